//! `intscope`: In-band Network Telemetry from the command line. Parses arguments and wires the
//! crates together; the logic lives in the libraries.

mod capture;
mod detect;
mod dump;
mod text;

use clap::{Parser, Subcommand};

/// In-band Network Telemetry: decode, generate, collect and simulate INT.
#[derive(Debug, Parser)]
#[command(name = "intscope", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode INT headers and telemetry reports in a pcap/pcapng file.
    Dump(dump::DumpArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Dump(args) => dump::run(args, &mut std::io::stdout().lock()).map(|_| ()),
    };
    if let Err(e) = result {
        // Broken pipe (e.g. `| head`) is not an error worth reporting.
        if e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        }) {
            std::process::exit(0);
        }
        eprintln!("intscope: {e:#}");
        std::process::exit(1);
    }
}

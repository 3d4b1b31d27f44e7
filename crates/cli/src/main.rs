//! `intscope`: In-band Network Telemetry from the command line. Parses arguments and wires the
//! crates together; the logic lives in the libraries.

mod agent;
mod blast;
mod capture;
mod collect;
mod detect;
mod dump;
mod frames;
mod lab;
mod live;
mod node;
mod serve;
mod sim;
mod text;
mod usage;
mod wireshark;

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
    /// Receive telemetry reports (or replay a capture of them) and serve the HTTP API.
    // Boxed: its flags make it twice the size of the next variant.
    Collect(Box<collect::CollectArgs>),
    /// Serve the API for a whole fabric from the store its collectors write (cluster mode).
    Serve(serve::ServeArgs),
    /// Send synthetic telemetry reports to a collector (load tests, benchmarks).
    Blast(blast::BlastArgs),
    /// Run a software INT node (source, transit or sink) over a capture.
    Node(node::NodeArgs),
    /// Run a simulated leaf-spine fabric of INT switches, reporting to a collector or a pcap.
    Sim(sim::SimArgs),
    /// A collector and a simulated fabric with scripted faults, on this machine.
    Demo(sim::DemoArgs),
    /// A leaf-spine fabric of network namespaces with eBPF INT, real traffic and scripted
    /// faults, scored against the collector's incidents (root).
    Lab(lab::LabArgs),
    /// Host INT: eBPF programs report what this Linux host's kernel did to watched packets.
    Agent(agent::AgentArgs),
    /// The Wireshark / tshark dissector for INT and telemetry reports (install or print).
    Wireshark(wireshark::WiresharkArgs),
}

fn main() {
    keep_large_allocations_mapped();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("INTSCOPE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match &cli.command {
        Command::Dump(args) => dump::run(args, &mut std::io::stdout().lock()).map(|_| ()),
        Command::Collect(args) => collect::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Blast(args) => blast::run(args).map(|summary| println!("{summary}")),
        Command::Node(args) => node::run(args).map(|summary| println!("{summary}")),
        Command::Sim(args) => sim::run(args).map(|summary| println!("{summary}")),
        Command::Demo(args) => sim::demo(args),
        Command::Lab(args) => lab::run(args),
        Command::Agent(args) => agent::run(args).map(|summary| println!("{summary}")),
        Command::Wireshark(args) => wireshark::run(args, &mut std::io::stdout().lock()),
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
        // 2: the command line is wrong, as clap exits for its own findings; 1: anything else.
        std::process::exit(if usage::is_usage(&e) { 2 } else { 1 });
    }
}

/// Gives every large allocation (a flow shard's snapshot rows and its index by ID, a flush's
/// part, an API answer) pages of its own, returned when it is freed. glibc raises its mmap
/// threshold to the size of the first such block freed and then serves blocks up to 32 MiB from
/// the heap, where the copies a collector makes while its flows grow left tens of MB resident as
/// holes (33 MB at a million flows, BENCHMARKS.md).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn keep_large_allocations_mapped() {
    // SAFETY: sets an allocator parameter (the default threshold, fixed), before any thread.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_large_allocations_mapped() {}

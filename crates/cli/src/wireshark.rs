//! `intscope wireshark`: the Lua dissector for Wireshark / tshark (`wireshark/intscope.lua`,
//! embedded in the binary), installed into the user's personal Lua plugin folder or printed.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The dissector's source, as shipped in `wireshark/intscope.lua`.
pub const PLUGIN: &str = include_str!("../../../wireshark/intscope.lua");

/// File name of the plugin in the plugin folder.
pub const FILE_NAME: &str = "intscope.lua";

/// Arguments of `intscope wireshark`.
#[derive(Debug, clap::Args)]
pub struct WiresharkArgs {
    #[command(subcommand)]
    command: WiresharkCommand,
}

#[derive(Debug, clap::Subcommand)]
enum WiresharkCommand {
    /// Copy the dissector into Wireshark's personal Lua plugin folder
    /// (~/.local/lib/wireshark/plugins on Linux and macOS, %APPDATA%\Wireshark\plugins on Windows).
    Install {
        /// Only print where the plugin would go.
        #[arg(long)]
        print_path: bool,
        /// Install into this folder instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Write the dissector to stdout (for `tshark -X lua_script:FILE` or a system-wide folder).
    Print,
}

/// Wireshark's personal Lua plugin folder, as Wireshark computes it (`tshark -G folders`,
/// "Personal Lua Plugins"): `$HOME/.local/lib/wireshark/plugins` on Unix (Wireshark does not
/// use `XDG_DATA_HOME` for plugins), `%APPDATA%\Wireshark\plugins` on Windows.
pub fn plugin_dir() -> Result<PathBuf> {
    if cfg!(windows) {
        let appdata = std::env::var_os("APPDATA").context("APPDATA is not set")?;
        return Ok(PathBuf::from(appdata).join("Wireshark").join("plugins"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("HOME is not set: give the folder with --dir")?;
    Ok(PathBuf::from(home).join(".local/lib/wireshark/plugins"))
}

/// Writes the plugin into `dir` (created if missing); returns the file's path.
pub fn install(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(FILE_NAME);
    // Written beside and renamed, so a Wireshark starting meanwhile never loads half a file.
    let tmp = dir.join(format!(".{FILE_NAME}.tmp"));
    std::fs::write(&tmp, PLUGIN).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Runs `intscope wireshark`, writing messages to `out`.
pub fn run(args: &WiresharkArgs, out: &mut dyn Write) -> Result<()> {
    match &args.command {
        WiresharkCommand::Print => out.write_all(PLUGIN.as_bytes())?,
        WiresharkCommand::Install { print_path, dir } => {
            let dir = match dir {
                Some(d) => d.clone(),
                None => plugin_dir()?,
            };
            if *print_path {
                writeln!(out, "{}", dir.join(FILE_NAME).display())?;
                return Ok(());
            }
            if dir.is_file() {
                bail!("{} is a file, not a folder", dir.display());
            }
            let path = install(&dir)?;
            writeln!(
                out,
                "installed {} (restart Wireshark, or reload Lua plugins with Ctrl+Shift+L)\n\
                 INT preferences: Edit > Preferences > Protocols > INT (UDP ports, DSCP, probe \
                 marker, GRE protocol type) and INTREP (report ports).\n\
                 DSCP-marked INT towards ports with a dissector of their own (HTTP, TLS...) needs \
                 Protocols > TCP/UDP > \"Try heuristic sub-dissectors first\" (docs/wireshark.md).",
                path.display()
            )?;
        }
    }
    Ok(())
}

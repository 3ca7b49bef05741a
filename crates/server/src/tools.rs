//! `keel bench`, `keel verify` and `keel report` run `keel-tools` (the
//! keel-tools package, for client nodes), so that the daemon, which runs
//! as root on a storage node, does not link the load generator, the
//! verifier or the report's plotting and image crates.

use crate::cli::out::errln;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

const TOOLS: &str = "keel-tools";

/// The commands of `keel` that `keel-tools` runs.
pub const COMMANDS: [&str; 3] = ["bench", "verify", "report"];

/// `keel-tools` next to this binary (`/usr/bin`, or the build directory),
/// else on the PATH.
fn find() -> Option<PathBuf> {
    let beside = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|d| d.join(TOOLS)));
    if let Some(path) = beside.filter(|p| p.is_file()) {
        return Some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(TOOLS)).find(|p| p.is_file())
}

/// Replaces this process with `keel-tools COMMAND ARGS...` (named `keel`,
/// so help and messages read as the command typed); returns only if that
/// cannot be done.
pub fn run(command: &str, args: Vec<OsString>) -> ExitCode {
    let Some(tools) = find() else {
        errln!(
            "keel: `keel {command}` is in the keel-tools package (the load generator, verifier and report \
             for client nodes), which is not installed here.\n\
             Install it (apt install keel-tools, or cargo build --release -p keel-tools to build \
             keel-tools next to keel), or run keel-tools {command} on a client node."
        );
        return ExitCode::from(127);
    };
    let err = Command::new(&tools).arg0("keel").arg(command).args(args).exec();
    errln!("keel: cannot run {}: {err}", tools.display());
    ExitCode::from(126)
}

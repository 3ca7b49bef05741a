//! `keel verify`: data verification across failures, after the
//! checkstream of Dell's NSS7.0-HA paper (docs/benchmarks.md, "Reference
//! systems"; appendix A.3 and section 4.3: streams copied to the
//! NFS share while the service fails over, then checked for corruption),
//! with one thing checkstream could not know: which data the server had
//! **acknowledged as stable** when it died.
//!
//! ```text
//! keel verify write --server nfs1:2049 --export /srv/scratch --clients 8 --size 4G \
//!                   [--stable file|data|unstable] [--journal run.journal] [--retry-for 300s]
//! keel verify check [--journal run.journal]         # same target, from the journal
//! keel verify write --local /mnt/xfs/dir ...        # the same against a local file system
//! ```
//!
//! **write** runs `--clients` streams at once, each over its own TCP
//! connection (a retrying, hard-mount-like [`keel_client::RetryingConnection`]:
//! it rides out a server kill and restart for `--retry-for`) into its own
//! file `stream.<i>` in `--dir` under the export, `--in-flight` pipelined
//! WRITEs of `--block` bytes each. Every byte is a piece of a
//! self-describing 8-byte word carrying its offset and a check keyed by the
//! run's seed and the stream (layout and rationale: [`pattern`]). A range
//! counts as **acknowledged stable** when
//! - a FILE_SYNC or DATA_SYNC WRITE reply says so, or
//! - with `--stable unstable`, a COMMIT (sent every `--commit-every` bytes
//!   and at the end) returns the same write verifier as the UNSTABLE WRITE
//!   did. Writes whose verifier differs from the COMMIT's were made by a
//!   server instance that has since restarted, and are sent again (and
//!   committed again), as an NFS client does;
//! - locally: after the `fsync`/`fdatasync` that follows the write.
//!
//! Acknowledgements go to a client-side **journal** ([`journal`]),
//! appended and fdatasync'ed in batches, so that a writer killed at any
//! point leaves a journal claiming only what was acknowledged.
//!
//! **check** reads the journal, reads every stream back (over NFS with
//! pipelined READs, or locally), classifies each word as valid, zero,
//! misplaced (genuine data of the stream at the wrong offset) or corrupt
//! (anything else), and the bytes past the end of a short file as missing,
//! then prints checkstream's report per stream plus Keel's lines:
//! `[acknowledged]`, `[lost acknowledged]` (acknowledged bytes that are not
//! valid, with the first ranges) and `[unacknowledged]` (zero or missing
//! data that was never acknowledged: the writes in flight when the server
//! or the writer died; reported, not an error). `--json` gives the same
//! numbers as [`CheckReport`].
//!
//! The verdict: a stream **fails** when acknowledged data is zero or
//! missing, when any data (acknowledged or not) is misplaced or corrupt
//! (no sequence of crashes makes a correct server return bytes nobody
//! wrote there), or when the file extends past the stream. [`run`] returns
//! `Ok(false)` then (the binary exits 1); `Err` means the check itself
//! could not be done (exit 2).

#![forbid(unsafe_code)]

mod check;
mod extents;
pub mod journal;
pub mod pattern;
mod target;
mod write;

use std::path::Path;

use anyhow::{Context, anyhow};

pub use check::{CheckArgs, CheckReport, Lost, StreamReport, Totals, check};
pub use extents::ExtentSet;
pub use pattern::{Extent, Kind};
pub use target::{TargetArgs, TargetSpec};
pub use write::{StreamWrite, WriteArgs, WriteReport, write};

/// The `keel verify` subcommands.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum VerifyCommand {
    /// Write self-checking streams from many clients at once, journaling
    /// which ranges the server acknowledged as stable. Retries through
    /// server restarts. Exits 0 when every stream was written and
    /// acknowledged, 1 when some stream gave up (the journal stays usable),
    /// 2 on errors.
    #[command(after_long_help = WRITE_EXAMPLES)]
    Write(WriteArgs),
    /// Read the streams of a `write` run back and report valid, zero,
    /// misplaced, corrupt and missing ranges, checkstream style, and the
    /// acknowledged bytes that were lost. Exits 1 when acknowledged data is
    /// missing or wrong, or any data is misplaced or corrupt; 2 on errors.
    #[command(after_long_help = CHECK_EXAMPLES)]
    Check(CheckArgs),
}

const WRITE_EXAMPLES: &str = "\
Examples:
  keel verify write --server nfs1 --export /srv/scratch --clients 16 --size 4G
  keel verify write --server 10.0.0.5:2049 --export /srv --stable unstable --commit-every 256M \\
                    --journal failover.journal --retry-for 10m
  keel verify write --local /mnt/xfs/verify --clients 4 --size 1G

Stream i is the file stream.<i> in --dir under the export (or in the --local
directory); an existing one is emptied first. The journal stays on this
machine: `keel verify check` reads it.";

const CHECK_EXAMPLES: &str = "\
Examples:
  keel verify check                       # ./keel-verify.journal and the target it names
  keel verify check --journal failover.journal --json report.json
  keel verify check --journal failover.journal --local /mnt/copy    # a copy of the streams";

/// Runs a `keel verify` subcommand: `Ok(true)` when the write finished with
/// everything acknowledged, or the check found every acknowledged byte
/// intact; `Ok(false)` otherwise. Builds its own tokio runtime (on a
/// thread of its own if called from inside one).
pub fn run(cmd: VerifyCommand) -> anyhow::Result<bool> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return std::thread::scope(|s| s.spawn(move || run_here(cmd)).join())
            .unwrap_or_else(|_| Err(anyhow!("keel verify panicked")));
    }
    run_here(cmd)
}

fn run_here(cmd: VerifyCommand) -> anyhow::Result<bool> {
    match cmd {
        VerifyCommand::Write(args) => Ok(write(&args, std::env::args().collect())?.ok),
        VerifyCommand::Check(args) => {
            let report = check(&args)?;
            let unread: Vec<_> = report.streams.iter().filter(|s| s.error.is_some()).collect();
            if let Some(first) = unread.first() {
                return Err(anyhow!(
                    "could not read {} of {} streams ({}: {})",
                    unread.len(),
                    report.streams.len(),
                    first.name,
                    first.error.as_deref().unwrap_or_default()
                ));
            }
            Ok(report.ok)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the tokio runtime")
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    if path.as_os_str() == "-" {
        print!("{text}");
        return Ok(());
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

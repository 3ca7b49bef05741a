//! `keel verify`: data verification across failures, after the seeds'
//! checkstream (NSS-HA, appendix A.3 and section 4.3: streams copied to the
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

mod check;
mod extents;
pub mod journal;
pub mod pattern;
mod target;
mod write;

use std::path::Path;
use std::time::Duration;

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

/// `4096`, `64K`, `1M`, `4G`, `1T` (powers of 1024; `KiB`, `MB` and the
/// like mean the same).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(digits_end);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("{s:?}: unknown unit (use K, M, G or T)")),
    };
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a size (like 4096, 64K, 1M, 4G)"))?;
    n.checked_mul(1 << shift).ok_or_else(|| format!("{s:?} is out of range"))
}

/// `300`, `300s`, `5m`, `1h`, `500ms`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (number, unit) = t.split_at(digits_end);
    let n: f64 = number.parse().map_err(|_| format!("{s:?} is not a duration (like 300s, 5m, 1h)"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is out of range"))
}

/// Sizes for people: 1.5 GiB, 4 KiB.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 { format!("{v:.0} {}", UNITS[u]) } else { format!("{v:.1} {}", UNITS[u]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size("2 MB"), Ok(2 << 20));
        assert!(parse_size("4X").is_err() && parse_size("M").is_err() && parse_size("99999999999T").is_err());
        assert_eq!(parse_duration("300s"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("300"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("5 fortnights").is_err() && parse_duration("-1s").is_err());
    }
}

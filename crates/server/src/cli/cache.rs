//! `keel cache`: the running server's SSD cache tier.

use std::path::PathBuf;

use clap::Subcommand;

use super::AdminArgs;
use super::out::{errln, out, outln};
use super::stat::{Sampling, sample};
use crate::{admin, cache};

#[derive(Subcommand)]
pub enum CacheCommand {
    /// The cache devices (role, state, size, bytes written and read by the
    /// log and the read cache, errors, and wear where the device reports
    /// it: NVMe drives do, in their SMART log), the log (used, dirty data
    /// and its age) and each export's mode.
    List {
        #[command(flatten)]
        server: AdminArgs,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a cache device: a block device (opened exclusively) or a file of
    /// at least 64 MiB on a fast file system (not in memory: tmpfs, ramfs
    /// and RAM disks are refused). With fewer than two devices
    /// before, the log moves onto the new pair (dirty data is destaged
    /// first). A runtime change: name the device in [cache] devices too.
    Add {
        #[command(flatten)]
        server: AdminArgs,
        device: PathBuf,
    },
    /// Remove a cache device. If it holds the log, the dirty data is
    /// destaged first (progress: dirty bytes left) and the log is made
    /// again on the devices left. A runtime change: take it out of [cache]
    /// devices too.
    Remove {
        #[command(flatten)]
        server: AdminArgs,
        device: String,
    },
    /// Write every dirty byte in the write-back log to the disks now, and
    /// return when the log is empty (progress: dirty bytes left). Before
    /// moving the disks elsewhere: a stop leaves the log's data for the
    /// next start to destage.
    Flush {
        #[command(flatten)]
        server: AdminArgs,
    },
    /// Set an export's cache mode (write-back, write-through, write-around
    /// or off), naming the export by id or path. Leaving write-back flushes the log first (progress:
    /// dirty bytes left). Kept until the configuration file changes the
    /// export's `cache` and is reloaded, or until a restart.
    Mode {
        #[command(flatten)]
        server: AdminArgs,
        export: String,
        mode: String,
    },
    /// The cache's statistics, like iostat: per device and export, writes
    /// taken by the log and sent around it (and why), reads from the log and
    /// from disk, dirty data and its age, destage. With --interval, rates.
    Stat {
        #[command(flatten)]
        server: AdminArgs,
        #[command(flatten)]
        sampling: Sampling,
    },
    /// The cache's event log, oldest first: devices added, failed and
    /// removed, mode changes, flushes, degradation, recovery.
    Events {
        #[command(flatten)]
        server: AdminArgs,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: CacheCommand) -> anyhow::Result<()> {
    let (server, request) = match cmd {
        CacheCommand::List { server, json } => {
            let answer = admin::call(&server.socket()?, &admin::Request::CacheList {})?;
            if json {
                outln!("{answer}");
            } else {
                let c: keel_stats::CacheSnapshot = serde_json::from_value(answer)?;
                out!("{}", keel_stats::text::render_cache(&c, None));
            }
            return Ok(());
        }
        CacheCommand::Events { server, json } => {
            let answer = admin::call(&server.socket()?, &admin::Request::CacheEvents {})?;
            if json {
                outln!("{answer}");
                return Ok(());
            }
            let events: Vec<cache::EventLine> = serde_json::from_value(answer)?;
            if events.is_empty() {
                outln!("no cache events");
            }
            for e in events {
                let at = keel_stats::time::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_millis(e.unix_ms));
                outln!("{at}  {}", e.event);
            }
            return Ok(());
        }
        CacheCommand::Stat { server, sampling } => {
            return sample(
                &server.socket()?,
                &sampling,
                |s, interval| keel_stats::text::render_cache(&s.cache, interval),
                |s| serde_json::to_value(&s.cache),
            );
        }
        CacheCommand::Add { server, device } => {
            let device = std::path::absolute(&device)?.display().to_string();
            (server, admin::Request::CacheAdd { device })
        }
        CacheCommand::Remove { server, device } => (server, admin::Request::CacheRemove { device }),
        CacheCommand::Flush { server } => (server, admin::Request::CacheFlush {}),
        CacheCommand::Mode { server, export, mode } => (server, admin::Request::CacheMode { export, mode }),
    };
    let answer = admin::call_with_progress(&server.socket()?, &request, None, |p| {
        if let Some(dirty) = p["dirty_bytes"].as_u64() {
            errln!("destaging: {} dirty", keel_stats::text::bytes(dirty as f64));
        }
    })?;
    let c: keel_stats::CacheSnapshot = serde_json::from_value(answer)?;
    out!("{}", keel_stats::text::render_cache(&c, None));
    Ok(())
}

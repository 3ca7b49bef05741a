//! The SSD cache tier as the server runs it: opened from `[cache]` before
//! the first call is served (its log is replayed then), the record of the
//! devices that hold the log, its statistics, and what `keel cache`
//! asks through the administration socket.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, UNIX_EPOCH};

use anyhow::{Context, bail};
use keel_cache::stats::Bypass;
use keel_cache::{CacheConfig, CacheMode, CacheStore};
use keel_stats::{BypassCount, CacheDeviceSnapshot, CacheExportSnapshot, CacheSnapshot, DeviceWear};
use keel_store_local::LocalStore;
use serde::{Deserialize, Serialize};

use crate::config::Config;

/// What the NFS service serves: the local file systems behind the cache
/// tier (which passes everything through when it has no devices).
pub type Served = CacheStore<LocalStore>;

/// The devices the cache used when it last changed, in the state
/// directory: a start whose configuration names none of those that hold
/// the log is refused, as it would abandon the dirty data on them.
const DEVICES_RECORD: &str = "cache-devices.json";

/// Opens the cache tier over `store` as `config` describes it.
pub fn open(config: &Config, store: Arc<LocalStore>) -> anyhow::Result<Served> {
    let settings = &config.cache;
    let state_dir = &config.server.state_dir;
    check_record(state_dir, &settings.devices)?;
    let defaults = CacheConfig::default();
    let cache_config = CacheConfig {
        devices: settings.devices.clone(),
        log_bytes: settings.log_bytes,
        sequential_cutoff: settings.sequential_cutoff,
        read_fill_bytes: settings.read_fill_bytes,
        modes: config.exports.iter().filter(|e| e.cache != CacheMode::Off).map(|e| (e.id, e.cache)).collect(),
        background_destage: true,
        ..defaults
    };
    let served = CacheStore::open(store, &cache_config).map_err(|e| anyhow::anyhow!("cache: {e}"))?;
    write_record(state_dir, &served).context("cannot record the cache devices")?;
    for d in served.shared().devices() {
        tracing::info!(device = d.name, role = d.role, state = d.state, size = d.size_bytes, "cache device");
    }
    for e in config.exports.iter().filter(|e| e.cache != CacheMode::Off) {
        tracing::info!(export = e.id, mode = e.cache.name(), "cache mode");
    }
    Ok(served)
}

fn check_record(state_dir: &Path, configured: &[PathBuf]) -> anyhow::Result<()> {
    let path = state_dir.join(DEVICES_RECORD);
    let recorded: Vec<PathBuf> = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| format!("{} does not parse", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("cannot read {}", path.display()))),
    };
    // The log is on the first two; one of them holds all of it.
    let log_devices = &recorded[..recorded.len().min(2)];
    if log_devices.is_empty() || log_devices.iter().any(|d| configured.contains(d)) {
        return Ok(());
    }
    let list = |l: &[PathBuf]| {
        if l.is_empty() {
            "none".to_owned()
        } else {
            l.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        }
    };
    bail!(
        "the cache log was last on {} (recorded in {}), and [cache] devices names none of them ({}): \
         starting would abandon any dirty data on them. Name them in [cache] devices; if they hold \
         nothing you need (or are gone for good), remove {}",
        list(log_devices),
        path.display(),
        list(configured),
        path.display()
    )
}

/// Records the devices the cache uses now (after a start, an add, a
/// remove), if they changed: a start writes nothing it need not, and so
/// works on a full file system.
pub fn write_record(state_dir: &Path, served: &Served) -> std::io::Result<()> {
    let names: Vec<String> = served.shared().devices().into_iter().map(|d| d.name).collect();
    let names = serde_json::to_vec(&names).expect("strings serialize");
    let path = state_dir.join(DEVICES_RECORD);
    // No record is a record of none.
    let recorded = match std::fs::read(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(b"[]".to_vec()),
        read => read.ok(),
    };
    if recorded.is_some_and(|r| r == names) {
        return Ok(());
    }
    keel_store::state_file::replace_durably(&path, &names)
}

/// The cache's part of the statistics; `exports` names the exports served.
pub fn snapshot(served: &Served, exports: &[(u32, String)]) -> CacheSnapshot {
    use std::sync::atomic::Ordering::Relaxed;
    let sh = served.shared();
    let (log_used_bytes, log_bytes, oldest) = sh.log_usage().unwrap_or((0, 0, None));
    let counters = sh.stats.exports();
    let rc = &sh.stats.read_cache;
    let exports = exports
        .iter()
        .map(|(id, path)| {
            let c = counters.iter().find(|(i, _)| i == id).map(|(_, c)| c.clone()).unwrap_or_default();
            CacheExportSnapshot {
                id: *id,
                path: path.clone(),
                mode: sh.mode(*id).name().into(),
                serving: match sh.serving(*id) {
                    s if s == sh.mode(*id) => String::new(),
                    s => s.name().into(),
                },
                writes_logged: c.writes_logged,
                bytes_logged: c.bytes_logged,
                writes_bypassed: Bypass::ALL
                    .iter()
                    .zip(c.writes_bypassed)
                    .map(|(b, n)| BypassCount { reason: b.name().into(), writes: n })
                    .collect(),
                bytes_bypassed: c.bytes_bypassed,
                reads_log_hit: c.reads_log_hit,
                bytes_from_log: c.bytes_from_log,
                reads_disk: c.reads_disk,
                bytes_from_disk: c.bytes_from_disk,
                read_hits: c.read_cache_hits,
                read_misses: c.read_cache_misses,
                bytes_from_cache: c.bytes_from_read_cache,
                admissions: c.read_cache_admissions,
                reads_sequential: c.reads_sequential,
            }
        })
        .collect();
    CacheSnapshot {
        devices: sh
            .devices()
            .into_iter()
            .map(|d| CacheDeviceSnapshot {
                name: d.name,
                size_bytes: d.size_bytes,
                role: d.role.into(),
                state: d.state.into(),
                bytes_written: d.bytes_written,
                bytes_read: d.bytes_read,
                errors: d.errors,
                read_cache_bytes: d.read_cache_bytes,
                read_cache_capacity_bytes: d.read_cache_capacity_bytes,
                wear: d.wear.map(|w| DeviceWear {
                    percent_used: w.percent_used,
                    spare_percent: w.spare_percent,
                    host_written_bytes: w.host_written_bytes,
                }),
            })
            .collect(),
        log_used_bytes,
        log_bytes,
        dirty_bytes: sh.index.dirty_bytes(),
        dirty_files: sh.index.live_files() as u64,
        oldest_dirty_ms: oldest.map_or(0, |d| d.as_millis() as u64),
        destaged_bytes: sh.stats.destaged_bytes.load(Relaxed),
        destage_rounds: sh.stats.destage_rounds.load(Relaxed),
        destage_errors: sh.stats.destage_errors.load(Relaxed),
        dropped_bytes: sh.stats.dropped_bytes.load(Relaxed),
        full_waits: sh.stats.full_waits.load(Relaxed),
        read_slots_used: rc.slots_used.load(Relaxed),
        read_slots: rc.slots_total.load(Relaxed),
        read_evictions: rc.evictions.load(Relaxed),
        read_errors: rc.checksum_errors.load(Relaxed) + rc.read_errors.load(Relaxed) + rc.write_errors.load(Relaxed),
        exports,
    }
}

/// What makes the cache unhealthy: a failed device, an export set to
/// write-back that cannot have it now.
pub fn problems(served: &Served, exports: &[(u32, String)]) -> Vec<String> {
    let sh = served.shared();
    let mut problems: Vec<String> = sh
        .devices()
        .iter()
        .filter(|d| d.state == "failed")
        .map(|d| format!("cache device {} has failed ({} errors)", d.name, d.errors))
        .collect();
    for m in sh.missing_devices() {
        problems.push(format!(
            "cache device {} was missing at start ({}): add a new one with `keel cache add DEVICE` and name it in \
             [cache] devices in its place",
            m.name, m.reason
        ));
    }
    let healthy = sh.log().map_or(0, |l| l.healthy_mirrors());
    for (id, path) in exports {
        if sh.mode(*id) == CacheMode::WriteBack && healthy < 2 {
            problems.push(format!(
                "export {id} {path} is set to write-back but only {healthy} cache device(s) work: it is served \
                 write-through (its writes go straight to disk) until `keel cache add DEVICE` brings a second"
            ));
        }
    }
    problems
}

/// One line of `keel cache events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventLine {
    pub unix_ms: u64,
    pub event: String,
}

pub fn events(served: &Served) -> Vec<EventLine> {
    served
        .shared()
        .events
        .list()
        .into_iter()
        .map(|(t, e)| EventLine {
            unix_ms: t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64,
            event: e.to_string(),
        })
        .collect()
}

/// Progress of a flush (dirty bytes left), at most twice a second.
pub struct Progress<F: FnMut(u64)> {
    report: F,
    last: Option<Instant>,
}

impl<F: FnMut(u64)> Progress<F> {
    pub fn new(report: F) -> Self {
        Progress { report, last: None }
    }

    pub fn tick(&mut self, dirty_bytes: u64) {
        if self.last.is_none_or(|t| t.elapsed().as_millis() >= 500) {
            self.last = Some(Instant::now());
            (self.report)(dirty_bytes);
        }
    }
}

/// The export an administrator names, by id or by path.
pub fn find_export(exports: &[(u32, String)], name: &str) -> Result<(u32, String), String> {
    let found = exports.iter().find(|(id, path)| name.parse::<u32>().is_ok_and(|n| n == *id) || path == name);
    found.cloned().ok_or_else(|| {
        let known: Vec<String> = exports.iter().map(|(id, p)| format!("{id} ({p})")).collect();
        format!(
            "no export {name:?}: name one by id or path ({})",
            if known.is_empty() { "none are served".into() } else { known.join(", ") }
        )
    })
}

//! The SSD cache tier: [`CacheStore`] wraps another store and keeps a
//! write-back log on fast devices, mirrored on two of them, destaged to the
//! wrapped store in the background, and a read cache of hot file blocks in
//! the rest of the devices (Dell Fluid Cache for DAS, bcache,
//! dm-writecache, Open CAS are the references).
//!
//! - **Device layout**: two superblock copies, the log's ring
//!   (`[RING_START, RING_START + ring_bytes)`, by default a quarter of the
//!   smallest of the first two devices, at least [`LOG_BYTES_MIN`]; a log
//!   found on the devices keeps its own size), then read-cache slots to the
//!   end of each device ([`readcache`]).
//! - **Modes** (per export, changeable at runtime): write-back (the log,
//!   needs two devices, and the read cache), write-through (writes go to
//!   the back end with the client's stability and update the blocks the
//!   read cache holds), write-around (writes go to the back end and drop
//!   the blocks), off (no read caching). Every mode invalidates.
//! - **Read cache** ([`readcache`]): READ asks it first (unless the
//!   export is off or the read is part of a sequential stream past the
//!   cutoff), then the back end, and copies a block in when it is admitted
//!   (at once while there are free slots, else on its second miss);
//!   dirty log data is laid over whatever the clean data came from.
//! - **Write-back** (per export): a WRITE of a file goes into the log as a
//!   checksummed, numbered record on both devices; a FILE_SYNC or DATA_SYNC
//!   WRITE, or a COMMIT, returns once the records are synced on both (group
//!   commit). The destager ([`destage`]) writes the dirty extents to the
//!   back end, in file order and coalesced, syncs each file, and only then
//!   moves the log's head.
//! - **What clients see** is what they would see without the cache:
//!   GETATTR, LOOKUP, READDIRPLUS, wcc data report the size and mtime of
//!   the newest acknowledged write ([`index`]), READ lays the dirty extents
//!   over what the back end returns, SETATTR of the size cuts dirty data
//!   beyond it (and logs the cut, so a replay repeats it), a removed file's
//!   dirty data is dropped when its handle goes stale.
//! - **Bypass**: writes of files with nothing in the log go straight to the
//!   back end when the export is not write-back, when a stream is
//!   sequential past the cutoff (sequential bandwidth is the back end's),
//!   when the log is full, and when fewer than two devices work (a
//!   write-back export is then served write-through). A write over a
//!   file's logged data past a full log, during a flush, or with one
//!   working device goes to the back end too, durably, followed by a small
//!   `Bypassed` record (the ring keeps room for those) that makes a replay
//!   drop the older logged data there.
//! - **Recovery** ([`log`]): at start the log is read back from the head,
//!   checksums and sequence numbers checked, and the index rebuilt before
//!   the first call is served. A configured device that is gone is left
//!   out: the other mirror's copy of the log is recovered.
//!
//! **Invariants:** a file with records in the live log has all its writes
//! and truncations logged (so replay is its exact history); dirty data
//! leaves the index only after the back end synced it; the log's head
//! moves only after that. A record goes only into the log in place and
//! under a file state the index holds: a log is replaced (`keel cache add`
//! or `remove`) only once it is empty and retired, between destage rounds,
//! and a call that took a log or a state replaced since starts again
//! (`writeback.rs`). A read-cache slot holds what the back end holds
//! for its block: every change of a file's data on the back end (WRITE,
//! SETATTR of the size, CREATE, REMOVE and RENAME over it, destage)
//! invalidates after the change, and a copy read before is never
//! published after ([`readcache`]).

#![deny(unsafe_code)]

pub mod config;
pub mod destage;
pub mod device;
pub mod devices;
pub mod error;
pub mod events;
pub mod index;
pub mod log;
mod read;
pub mod readcache;
pub mod stats;
mod store;
/// statfs, to refuse file systems that forget at a power cut.
#[allow(unsafe_code)]
mod sys;
/// The one unsafe call: the NVMe admin ioctl that reads a drive's wear.
#[allow(unsafe_code)]
pub mod wear;
mod writeback;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use keel_store::{Store, StoreError, Time, Verifier};

pub use crate::config::{CacheConfig, CacheMode, LOG_BYTES_MIN, default_log_bytes};
use crate::device::FileDevice;
pub use crate::devices::{CacheDevice, DeviceReport};
pub use crate::error::{CacheError, ConfigError, DestageError, DeviceError, UnknownMode};
use crate::events::{Event, Events};
use crate::index::Index;
use crate::log::{Log, LogError, Mirror};
use crate::readcache::ReadCache;
use crate::stats::CacheStats;

/// State shared by the store's calls, the destager and the administration.
pub struct Shared<S: Store> {
    pub inner: Arc<S>,
    pub index: Index,
    pub stats: CacheStats,
    pub events: Arc<Events>,
    pub(crate) log: RwLock<Option<Arc<Log>>>,
    pub(crate) devices: Mutex<Vec<CacheDevice>>,
    pub(crate) modes: RwLock<HashMap<u32, CacheMode>>,
    pub(crate) log_bytes: Option<u64>,
    pub(crate) sequential_cutoff: u64,
    /// The read cache over the devices' space after the ring (none: no
    /// device, or being rebuilt after a change of devices).
    pub(crate) read_cache: RwLock<Option<Arc<ReadCache>>>,
    pub(crate) read_slot_bytes: u64,
    pub(crate) read_fill_bytes: u64,
    /// Moves on whenever data acknowledged as unstable may be lost.
    pub(crate) epoch: AtomicU64,
    /// Read guards are held while log positions from the index are read;
    /// moving the head (which lets the space be reused) takes it.
    pub(crate) ring_guard: RwLock<()>,
    /// One destage round at a time.
    pub(crate) round: Mutex<()>,
    /// Callers waiting for the log to empty; the destager goes flat out.
    pub(crate) flushers: AtomicU64,
    pub(crate) stop: AtomicBool,
    /// Each file's write stream: its front, and how far the front moved.
    pub(crate) streams: Mutex<HashMap<Bytes, (u64, u64)>>,
    pub(crate) read_streams: Mutex<HashMap<Bytes, (u64, u64)>>,
    /// Configured devices that were gone at start, until a device is added.
    pub(crate) missing: Mutex<Vec<MissingDevice>>,
}

/// A configured device the cache started without.
#[derive(Debug, Clone)]
pub struct MissingDevice {
    pub name: String,
    /// Why it could not be opened.
    pub reason: String,
}

/// What a start with fewer than two working log devices tells the
/// administrator to do.
fn degraded_at_start(healthy: usize, missing: &[MissingDevice]) -> String {
    const SERVED: &str = "write-back exports are served write-through (each write goes to the disks as its \
                          client asks) until two cache devices work";
    if missing.is_empty() {
        return format!("{healthy} working cache device: {SERVED}: add one with `keel cache add DEVICE`");
    }
    let names: Vec<&str> = missing.iter().map(|m| m.name.as_str()).collect();
    format!(
        "{} missing, the log recovered from the device left: {SERVED}: add a new one with `keel cache add \
         DEVICE`, and name it in [cache] devices in place of {}",
        names.join(", "),
        names.join(", ")
    )
}

/// The cache tier in front of store `S`.
pub struct CacheStore<S: Store> {
    shared: Arc<Shared<S>>,
    destager: Mutex<Option<JoinHandle<()>>>,
}

pub(crate) fn now() -> Time {
    let d = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    Time { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() }
}

pub(crate) fn errno(e: i32) -> StoreError {
    StoreError::errno(e)
}

pub(crate) fn log_error(e: LogError) -> StoreError {
    match e {
        // Retired: the caller takes the log in place and tries again
        // (crate::writeback::Stop::Raced); never a client's answer.
        LogError::Full | LogError::Retired => errno(libc::EAGAIN),
        LogError::NoMirror(e) => StoreError::Os(e),
    }
}

impl<S: Store> CacheStore<S> {
    /// Opens the cache devices, recovers their log (the index is rebuilt
    /// before this returns) and starts the destager.
    ///
    /// A device that is gone ([`DeviceError::is_missing`]) is left out, with
    /// an event: the log is recovered from the other mirror, and with fewer
    /// than two devices write-back exports are served write-through until
    /// one is added. With every device gone the start is refused.
    pub fn open(inner: Arc<S>, config: &CacheConfig) -> Result<Self, CacheError> {
        let mut devices = Vec::new();
        let mut missing = Vec::new();
        for path in &config.devices {
            let dev = match FileDevice::open(path) {
                Ok(dev) => dev,
                Err(e) if e.is_missing() => {
                    tracing::error!("cache device missing: {e}");
                    missing.push(MissingDevice { name: path.display().to_string(), reason: e.to_string() });
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            devices::check_distinct(&devices, &dev.path, dev.id)?;
            devices.push(CacheDevice { name: path.display().to_string(), id: Some(dev.id), io: Arc::new(dev) });
        }
        if devices.is_empty() && !missing.is_empty() {
            let list: Vec<String> = missing.iter().map(|m| m.reason.clone()).collect();
            return Err(CacheError::AllMissing { devices: list.join("; ") });
        }
        Self::start(inner, devices, missing, config)
    }

    /// As [`CacheStore::open`], on devices already open (tests: simulated).
    pub fn with_devices(inner: Arc<S>, devices: Vec<CacheDevice>, config: &CacheConfig) -> Result<Self, CacheError> {
        Self::start(inner, devices, Vec::new(), config)
    }

    fn start(
        inner: Arc<S>,
        devices: Vec<CacheDevice>,
        missing: Vec<MissingDevice>,
        config: &CacheConfig,
    ) -> Result<Self, CacheError> {
        config.check()?;
        let events = Arc::new(Events::default());
        let shared = Arc::new(Shared {
            inner,
            index: Index::default(),
            stats: CacheStats::default(),
            events: events.clone(),
            log: RwLock::new(None),
            devices: Mutex::new(Vec::new()),
            modes: RwLock::new(config.modes.clone()),
            log_bytes: config.log_bytes,
            sequential_cutoff: config.sequential_cutoff,
            read_cache: RwLock::new(None),
            read_slot_bytes: config.read_slot_bytes,
            read_fill_bytes: config.read_fill_bytes,
            epoch: AtomicU64::new(0),
            ring_guard: RwLock::new(()),
            round: Mutex::new(()),
            flushers: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            streams: Mutex::new(HashMap::new()),
            read_streams: Mutex::new(HashMap::new()),
            missing: Mutex::new(missing.clone()),
        });
        if !devices.is_empty() {
            let mirrors: Vec<Arc<Mirror>> =
                devices.iter().take(2).map(|d| Mirror::new(d.name.clone(), d.io.clone())).collect();
            let ring = shared.ring_bytes_for(&devices);
            let opened = Log::open(mirrors, ring, events.clone()).map_err(CacheError::Log)?;
            if opened.recovered {
                let n = opened.records.len();
                shared.rebuild(&opened.records);
                events.push(Event::Recovered { records: n, dirty_bytes: shared.index.dirty_bytes() });
            }
            for m in &missing {
                events.push(Event::DeviceMissing { device: m.name.clone(), reason: m.reason.clone() });
            }
            let healthy = opened.log.healthy_mirrors();
            if healthy < 2 {
                events.push(Event::Degraded { reason: degraded_at_start(healthy, &missing) });
            }
            *shared.read_cache.write().unwrap_or_else(|p| p.into_inner()) =
                Some(Arc::new(shared.make_read_cache(&devices, opened.log.ring_bytes())));
            *shared.log.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(opened.log));
        }
        *shared.devices.lock().unwrap_or_else(|p| p.into_inner()) = devices;
        let destager = match config.background_destage {
            true => {
                let s = shared.clone();
                let h = std::thread::Builder::new()
                    .name("keel-destage".into())
                    .spawn(move || destage::run(&s))
                    .map_err(CacheError::Destager)?;
                Some(h)
            }
            false => None,
        };
        Ok(CacheStore { shared, destager: Mutex::new(destager) })
    }

    pub fn shared(&self) -> &Arc<Shared<S>> {
        &self.shared
    }

    pub fn inner(&self) -> &Arc<S> {
        &self.shared.inner
    }

    /// Stops the destager (dirty data stays in the log for the next start).
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(h) = self.destager.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = h.join();
        }
    }
}

impl<S: Store> Drop for CacheStore<S> {
    fn drop(&mut self) {
        self.stop();
    }
}

impl<S: Store> Shared<S> {
    pub fn log(&self) -> Option<Arc<Log>> {
        self.log.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The read cache, if there is one now.
    pub fn read_cache(&self) -> Option<Arc<ReadCache>> {
        self.read_cache.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn mode(&self, export_id: u32) -> CacheMode {
        self.modes.read().unwrap_or_else(|p| p.into_inner()).get(&export_id).copied().unwrap_or(CacheMode::Off)
    }

    /// Sets an export's mode. Leaving write-back (or setting off)
    /// flushes the log.
    pub fn set_mode(
        &self,
        export_id: u32,
        export: &str,
        mode: CacheMode,
        progress: impl FnMut(u64),
    ) -> Result<(), CacheError> {
        if mode == CacheMode::WriteBack {
            let healthy = self.log().map_or(0, |l| l.healthy_mirrors());
            if healthy < 2 {
                return Err(CacheError::WriteBackNeedsTwo { healthy });
            }
        }
        if matches!(mode, CacheMode::WriteThrough | CacheMode::WriteAround)
            && self.read_cache().is_none_or(|rc| rc.slots_total() == 0)
        {
            return Err(CacheError::NeedsReadCache { mode: mode.name() });
        }
        let from = {
            let mut modes = self.modes.write().unwrap_or_else(|p| p.into_inner());
            modes.insert(export_id, mode).unwrap_or(CacheMode::Off)
        };
        if from != mode {
            self.events.push(Event::ModeChanged {
                export: export.into(),
                from: from.name().into(),
                to: mode.name().into(),
            });
        }
        if mode == CacheMode::Off || (from == CacheMode::WriteBack && mode != CacheMode::WriteBack) {
            self.flush(&format!("{export} set to {}", mode.name()), progress)?;
        }
        Ok(())
    }

    /// How an export is served now: a write-back export with fewer than
    /// two working log devices is served write-through.
    pub fn serving(&self, export_id: u32) -> CacheMode {
        match self.mode(export_id) {
            CacheMode::WriteBack if self.log().is_none_or(|l| l.healthy_mirrors() < 2) => CacheMode::WriteThrough,
            mode => mode,
        }
    }

    /// Configured devices the cache started without (gone), until a
    /// device is added.
    pub fn missing_devices(&self) -> Vec<MissingDevice> {
        self.missing.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    pub fn flush_wanted(&self) -> bool {
        self.flushers.load(Ordering::Acquire) > 0
    }

    pub(crate) fn verifier(&self) -> Verifier {
        combine(self.inner.write_verifier(), self.epoch.load(Ordering::Acquire))
    }

    /// Read-cache occupancy: (slots used, slots in all, slot bytes).
    pub fn read_cache_usage(&self) -> Option<(u64, u64, u64)> {
        self.read_cache().map(|rc| (rc.slots_used(), rc.slots_total(), rc.slot_bytes()))
    }

    /// Log occupancy: (used bytes, ring bytes, age of the oldest record).
    pub fn log_usage(&self) -> Option<(u64, u64, Option<Duration>)> {
        self.log().map(|l| (l.used_bytes(), l.ring_bytes(), l.oldest().map(|t| t.elapsed())))
    }
}

/// The back end's verifier, changed by every loss of unstable data.
pub(crate) fn combine(mut v: Verifier, epoch: u64) -> Verifier {
    for (b, e) in v.iter_mut().zip(epoch.to_be_bytes()) {
        *b ^= e;
    }
    v
}

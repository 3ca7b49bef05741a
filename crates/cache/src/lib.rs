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
//!   when the log is full, and when fewer than two devices work. A write
//!   over a file's logged data past a full log goes to the back end too,
//!   durably, followed by a small `Bypassed` record (the ring keeps room
//!   for those) that makes a replay drop the older logged data there.
//! - **Recovery** ([`log`]): at start the log is read back from the head,
//!   checksums and sequence numbers checked, and the index rebuilt before
//!   the first call is served.
//!
//! **Invariants:** a file with records in the live log has all its writes
//! and truncations logged (so replay is its exact history); dirty data
//! leaves the index only after the back end synced it; the log's head
//! moves only after that. A read-cache slot holds what the back end holds
//! for its block: every change of a file's data on the back end (WRITE,
//! SETATTR of the size, CREATE, REMOVE and RENAME over it, destage)
//! invalidates after the change, and a copy read before is never
//! published after ([`readcache`]).

#![deny(unsafe_code)]

pub mod destage;
pub mod device;
pub mod events;
pub mod index;
pub mod log;
pub mod readcache;
pub mod stats;
/// The one unsafe call: the NVMe admin ioctl that reads a drive's wear.
#[allow(unsafe_code)]
pub mod wear;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use keel_store::{
    Attrs, CreateMode, Created, Cred, DirEntry, ExportInfo, FsStat, Limits, NodeKind, Object, ReadOut, SetAttrs,
    SetTime, Stability, Store, StoreError, StoreResult, Time, Verifier, WriteOut,
};

use crate::device::{DeviceId, DeviceIo, FileDevice};
use crate::events::{Event, Events};
use crate::index::{Extent, FileState, Index};
use crate::log::{Log, LogError, Mirror, RecordKind};
use crate::readcache::{ReadCache, Region};
use crate::stats::{Bypass, CacheStats};
use crate::wear::Wear;

/// How an export uses the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheMode {
    /// Writes go to the mirrored log and are destaged later; reads use
    /// the read cache.
    WriteBack,
    /// Writes go to the back end and update the blocks the read cache
    /// holds; reads use the read cache.
    WriteThrough,
    /// Writes go to the back end and drop the blocks from the read cache;
    /// reads use the read cache.
    WriteAround,
    /// The cache is not used for new writes nor for reads (dirty data is
    /// still destaged, and read over until it is).
    Off,
}

impl CacheMode {
    pub const ALL: [CacheMode; 4] =
        [CacheMode::WriteBack, CacheMode::WriteThrough, CacheMode::WriteAround, CacheMode::Off];

    pub fn parse(s: &str) -> Result<Self, String> {
        CacheMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown cache mode {s:?} (modes: write-back, write-through, write-around, off)"))
    }

    pub fn name(self) -> &'static str {
        match self {
            CacheMode::WriteBack => "write-back",
            CacheMode::WriteThrough => "write-through",
            CacheMode::WriteAround => "write-around",
            CacheMode::Off => "off",
        }
    }
}

/// The smallest ring the default sizing gives the log: many of the
/// largest records (1 MiB) and the 2 MiB a write keeps free.
pub const LOG_BYTES_MIN: u64 = 16 << 20;

/// The ring's size by default: a quarter of the smaller of the log's
/// devices, at least [`LOG_BYTES_MIN`]; the rest is read cache.
pub fn default_log_bytes(device_sizes: &[u64]) -> u64 {
    let smallest = device_sizes.iter().take(2).copied().min().unwrap_or(0);
    ((smallest / 4).max(LOG_BYTES_MIN)) & !511
}

/// The `[cache]` settings.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Cache devices: block devices or files on a fast file system. The log
    /// is mirrored on the first two.
    pub devices: Vec<PathBuf>,
    /// The ring's size on each device (at most what the smaller holds);
    /// `None`: [`default_log_bytes`]. A log found on the devices keeps the
    /// size it was made with.
    pub log_bytes: Option<u64>,
    /// The read cache's slot size: a power of two from 4 KiB to 1 MiB
    /// (memory: about 80 bytes per slot).
    pub read_slot_bytes: u64,
    /// A read that misses brings in the aligned window of this many bytes
    /// around it (one back-end read) while the read cache has free slots:
    /// a cold cache warms as a disk array's cache line does, at one disk
    /// I/O per window rather than per block. A multiple of the slot size
    /// up to [`readcache::FILL_BYTES_MAX`]; the slot size turns it off.
    pub read_fill_bytes: u64,
    /// A write stream of a file longer than this goes to the back end, and
    /// a read stream longer than this is read from it (neither admitted to
    /// nor served by the read cache).
    pub sequential_cutoff: u64,
    /// Mode per export id; exports not named are `Off`.
    pub modes: HashMap<u32, CacheMode>,
    /// Run the destager thread (tests drive rounds themselves).
    pub background_destage: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            devices: Vec::new(),
            log_bytes: None,
            read_slot_bytes: readcache::SLOT_BYTES_DEFAULT,
            read_fill_bytes: readcache::FILL_BYTES_DEFAULT,
            sequential_cutoff: 4 << 20,
            modes: HashMap::new(),
            background_destage: true,
        }
    }
}

/// A device the cache holds.
pub struct CacheDevice {
    pub name: String,
    pub id: Option<DeviceId>,
    pub io: Arc<dyn DeviceIo>,
}

/// State shared by the store's calls, the destager and the administration.
pub struct Shared<S: Store> {
    pub inner: Arc<S>,
    pub index: Index,
    pub stats: CacheStats,
    pub events: Arc<Events>,
    log: RwLock<Option<Arc<Log>>>,
    devices: Mutex<Vec<CacheDevice>>,
    modes: RwLock<HashMap<u32, CacheMode>>,
    log_bytes: Option<u64>,
    sequential_cutoff: u64,
    /// The read cache over the devices' space after the ring (none: no
    /// device, or being rebuilt after a change of devices).
    read_cache: RwLock<Option<Arc<ReadCache>>>,
    read_slot_bytes: u64,
    read_fill_bytes: u64,
    /// Moves on whenever data acknowledged as unstable may be lost.
    epoch: AtomicU64,
    /// Read guards are held while log positions from the index are read;
    /// moving the head (which lets the space be reused) takes it.
    ring_guard: RwLock<()>,
    /// One destage round at a time.
    round: Mutex<()>,
    /// Callers waiting for the log to empty; the destager goes flat out.
    flushers: AtomicU64,
    stop: AtomicBool,
    /// Each file's write stream: its front, and how far the front moved.
    streams: Mutex<HashMap<Bytes, (u64, u64)>>,
    read_streams: Mutex<HashMap<Bytes, (u64, u64)>>,
}

/// The cache tier in front of store `S`.
pub struct CacheStore<S: Store> {
    shared: Arc<Shared<S>>,
    destager: Mutex<Option<JoinHandle<()>>>,
}

const STREAMS_MAX: usize = 4096;
/// How far out of order a stream's calls may arrive: about the deepest
/// queue a client keeps (the Linux client's default slot table is 64, but
/// large transfers rarely have more than 16 in flight), in calls and bytes.
const REORDER_CALLS: u64 = 16;
const REORDER_SLACK_MIN: u64 = 64 << 10;
const REORDER_SLACK_MAX: u64 = 16 << 20;
/// How long a write of a file with dirty data waits for room in a full log.
const FULL_WAIT: Duration = Duration::from_secs(10);
/// Largest record payload.
const RECORD_PAYLOAD_MAX: usize = 1 << 20;

fn now() -> Time {
    let d = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    Time { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() }
}

fn errno(e: i32) -> StoreError {
    StoreError::errno(e)
}

fn log_error(e: LogError) -> StoreError {
    match e {
        LogError::Full => errno(libc::EAGAIN),
        LogError::NoMirror(e) => StoreError::Os(e),
    }
}

impl<S: Store> CacheStore<S> {
    /// Opens the cache devices, recovers their log (the index is rebuilt
    /// before this returns) and starts the destager.
    pub fn open(inner: Arc<S>, config: &CacheConfig) -> Result<Self, String> {
        let mut devices = Vec::new();
        for path in &config.devices {
            let dev = FileDevice::open(path)?;
            check_distinct(&devices, &dev.path, dev.id)?;
            devices.push(CacheDevice { name: path.display().to_string(), id: Some(dev.id), io: Arc::new(dev) });
        }
        Self::with_devices(inner, devices, config)
    }

    /// As [`CacheStore::open`], on devices already open (tests: simulated).
    pub fn with_devices(inner: Arc<S>, devices: Vec<CacheDevice>, config: &CacheConfig) -> Result<Self, String> {
        let slot = config.read_slot_bytes;
        if !slot.is_power_of_two() || !(readcache::SLOT_BYTES_MIN..=readcache::SLOT_BYTES_MAX).contains(&slot) {
            return Err(format!("read cache slot size {slot}: a power of two from 4 KiB to 1 MiB"));
        }
        let fill = config.read_fill_bytes;
        if fill < slot || !fill.is_multiple_of(slot) || fill > readcache::FILL_BYTES_MAX {
            return Err(format!(
                "read cache fill window {fill}: a multiple of the slot size ({slot}) up to {}",
                readcache::FILL_BYTES_MAX
            ));
        }
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
            read_slot_bytes: slot,
            read_fill_bytes: fill,
            epoch: AtomicU64::new(0),
            ring_guard: RwLock::new(()),
            round: Mutex::new(()),
            flushers: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            streams: Mutex::new(HashMap::new()),
            read_streams: Mutex::new(HashMap::new()),
        });
        if !devices.is_empty() {
            let mirrors: Vec<Arc<Mirror>> =
                devices.iter().take(2).map(|d| Mirror::new(d.name.clone(), d.io.clone())).collect();
            let ring = shared.ring_bytes_for(&devices);
            let opened = Log::open(mirrors, ring, events.clone()).map_err(|e| format!("cache log: {e}"))?;
            if opened.recovered {
                let n = opened.records.len();
                shared.rebuild(&opened.records);
                events.push(Event::Recovered { records: n, dirty_bytes: shared.index.dirty_bytes() });
            }
            if devices.len() < 2 {
                events.push(Event::Degraded { reason: "one cache device: write-back needs two".into() });
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
                    .map_err(|e| format!("cannot start the destager: {e}"))?;
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

fn check_distinct(devices: &[CacheDevice], path: &Path, id: DeviceId) -> Result<(), String> {
    match devices.iter().find(|d| d.id == Some(id)) {
        Some(d) => Err(format!("{}: the same device as {}", path.display(), d.name)),
        None => Ok(()),
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

    /// The ring size a new log on `devices` gets.
    fn ring_bytes_for(&self, devices: &[CacheDevice]) -> u64 {
        let sizes: Vec<u64> = devices.iter().map(|d| d.io.size()).collect();
        self.log_bytes.unwrap_or_else(|| default_log_bytes(&sizes))
    }

    /// A read cache over the space after a ring of `ring_bytes` on every
    /// device (spares too: their ring space is left alone, so one can
    /// become a log mirror without meeting cached data there).
    fn make_read_cache(&self, devices: &[CacheDevice], ring_bytes: u64) -> ReadCache {
        let regions = devices
            .iter()
            .map(|d| Region {
                name: d.name.clone(),
                io: d.io.clone(),
                base: log::RING_START.saturating_add(ring_bytes),
            })
            .collect();
        ReadCache::new(regions, self.read_slot_bytes, self.stats.read_cache.clone(), self.events.clone())
    }

    /// Takes the read cache away and waits until no call uses it (so no
    /// admission writes a device after this returns).
    fn quiesce_read_cache(&self) {
        let old = self.read_cache.write().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(old) = old {
            while Arc::strong_count(&old) > 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// The file's data in `[from, to)` changed on the back end (or may
    /// have): the read cache's blocks there go. Called after the change.
    fn invalidate(&self, handle: &Bytes, from: u64, to: u64) {
        if let Some(rc) = self.read_cache() {
            rc.invalidate(handle, from, to);
        }
    }

    /// A WRITE of `data` at `offset` reached the back end (`ok`) or may
    /// have: the blocks it touched go; in write-through, the blocks the
    /// cache held that it covers whole take the new data, if no other
    /// change of the file came in between (`gen_before`: the file's
    /// generation sampled before the back-end write).
    fn wrote(&self, obj: &S::Object, offset: u64, data: &[u8], ok: bool, gen_before: Option<u64>) {
        let Some(rc) = self.read_cache() else { return };
        let handle = obj.handle();
        let end = offset.saturating_add(data.len() as u64);
        let (generation, dropped) = rc.invalidate_blocks(handle, offset, end);
        let Some(before) = gen_before else { return };
        if !ok || generation != before + 1 || self.mode(obj.export_id()) != CacheMode::WriteThrough {
            return;
        }
        let b = rc.slot_bytes();
        for blk in dropped {
            let (bs, be) = (blk * b, blk * b + b);
            if bs >= offset && be <= end {
                let from = (bs - offset) as usize;
                rc.insert(handle, blk, &data[from..from + b as usize], generation);
            }
        }
    }

    pub fn mode(&self, export_id: u32) -> CacheMode {
        self.modes.read().unwrap_or_else(|p| p.into_inner()).get(&export_id).copied().unwrap_or(CacheMode::Off)
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    pub fn flush_wanted(&self) -> bool {
        self.flushers.load(Ordering::Acquire) > 0
    }

    fn verifier(&self) -> Verifier {
        combine(self.inner.write_verifier(), self.epoch.load(Ordering::Acquire))
    }

    fn data_lost(&self, why: &str) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        tracing::error!("cache: data acknowledged as unstable may be lost: {why}");
    }

    /// Makes the log durable through `seq` on every healthy mirror. A
    /// failure may lose unstable data: the verifier moves on.
    fn sync_log(&self, log: &Log, seq: u64) -> StoreResult<()> {
        log.sync_through(seq).map_err(|e| {
            self.data_lost("log sync failed");
            log_error(e)
        })
    }

    /// Rebuilds the index from recovered records, oldest first.
    fn rebuild(&self, records: &[log::Record]) {
        for r in records {
            let slot = self.index.get_or_insert(&r.handle, || FileState::new(None, 0, r.mtime_after, r.mtime_after));
            let mut st = slot.lock();
            let delta = match r.kind {
                RecordKind::Write => st.insert(r.offset, Extent { len: u64::from(r.len), seq: r.seq, pos: r.data_pos }),
                RecordKind::Bypassed => st.cut(r.offset, r.offset.saturating_add(u64::from(r.len))),
                _ => st.truncate(r.offset),
            };
            st.size = r.size_after;
            st.mtime = r.mtime_after;
            st.ctime = r.mtime_after;
            st.last_seq = r.seq;
            drop(st);
            self.index.add_dirty(delta);
        }
    }

    /// Whether a write of a file with nothing in the log goes to the back
    /// end, and why.
    fn bypass(&self, obj: &S::Object, offset: u64, len: u64, log: Option<&Log>) -> Option<Bypass> {
        if self.mode(obj.export_id()) != CacheMode::WriteBack {
            return Some(Bypass::Mode);
        }
        let Some(log) = log else { return Some(Bypass::Degraded) };
        if log.healthy_mirrors() < 2 {
            return Some(Bypass::Degraded);
        }
        if self.flush_wanted() {
            return Some(Bypass::Flushing);
        }
        if self.sequential(obj.handle(), offset, len) {
            return Some(Bypass::Sequential);
        }
        if log.used_bytes() + len + (2 << 20) > log.ring_bytes() {
            return Some(Bypass::Full);
        }
        None
    }

    /// Tracks each file's write stream; true once it has advanced by more
    /// than the cutoff.
    fn sequential(&self, handle: &Bytes, offset: u64, len: u64) -> bool {
        self.stream(&self.streams, handle, offset, len)
    }

    /// The same for each file's read stream.
    fn sequential_read(&self, handle: &Bytes, offset: u64, len: u64) -> bool {
        self.stream(&self.read_streams, handle, offset, len)
    }

    fn stream(&self, streams: &Mutex<HashMap<Bytes, (u64, u64)>>, handle: &Bytes, offset: u64, len: u64) -> bool {
        let mut streams = streams.lock().unwrap_or_else(|p| p.into_inner());
        if streams.len() >= STREAMS_MAX && !streams.contains_key(handle) {
            streams.clear();
        }
        let end = offset.saturating_add(len);
        // Calls in flight together reach here in any order: a call near the
        // stream's front (within what a deep queue of such calls spans)
        // still belongs to it. Only bytes that move the front count, so
        // rewriting a region smaller than the cutoff never becomes a stream;
        // a call that overtook the one before it counts for both.
        let slack = (len * REORDER_CALLS).clamp(REORDER_SLACK_MIN, REORDER_SLACK_MAX);
        let (front, run) = match streams.get(handle) {
            Some(&(front, run)) if offset.saturating_add(slack) >= front && offset <= front.saturating_add(slack) => {
                (front.max(end), run + end.saturating_sub(front).min(2 * len))
            }
            _ => (end, len),
        };
        streams.insert(handle.clone(), (front, run));
        run > self.sequential_cutoff
    }

    /// Waits for the log to be empty (every dirty byte on the back end),
    /// calling `progress` with the dirty bytes left now and then.
    pub fn flush(&self, why: &str, mut progress: impl FnMut(u64)) -> Result<(), String> {
        let dirty = self.index.dirty_bytes();
        self.events.push(Event::FlushStarted { why: why.into(), dirty_bytes: dirty });
        self.flushers.fetch_add(1, Ordering::AcqRel);
        let r = self.flush_inner(&mut progress);
        self.flushers.fetch_sub(1, Ordering::AcqRel);
        match &r {
            Ok(()) => self.events.push(Event::FlushFinished { why: why.into() }),
            Err(e) => self.events.push(Event::DestageFailed { reason: format!("flush ({why}): {e}") }),
        }
        r
    }

    fn flush_inner(&self, progress: &mut impl FnMut(u64)) -> Result<(), String> {
        let Some(log) = self.log() else { return Ok(()) };
        let mut failures = 0;
        loop {
            progress(self.index.dirty_bytes());
            if log.used_bytes() == 0 && self.index.live_files() == 0 {
                return Ok(());
            }
            match self.destage_round(&log, u64::MAX) {
                Ok(_) => failures = 0,
                Err(e) => {
                    failures += 1;
                    if failures >= 3 {
                        return Err(e);
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    /// Empties the log and replaces it with one on `devices` (none: no
    /// log). New appends wait while the last records are destaged.
    fn relog(&self, devices: &[CacheDevice], why: &str, progress: impl FnMut(u64)) -> Result<(), String> {
        self.flush(why, progress)?;
        let mut slot = self.log.write().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = slot.as_ref() {
            // Appends are shut out now; destage what came in meanwhile.
            while old.used_bytes() > 0 || self.index.live_files() > 0 {
                self.destage_round(old, u64::MAX)?;
            }
        }
        let generation = slot.as_ref().map_or(0, |l| l.generation());
        *slot = match devices.len() {
            0 => None,
            _ => {
                let mirrors = devices.iter().take(2).map(|d| Mirror::new(d.name.clone(), d.io.clone())).collect();
                let ring = self.ring_bytes_for(devices);
                let log = Log::format(mirrors, ring, generation, self.events.clone());
                Some(Arc::new(log.map_err(|e| e.to_string())?))
            }
        };
        if devices.len() < 2 {
            self.events
                .push(Event::Degraded { reason: format!("{} cache device(s): write-back needs two", devices.len()) });
        }
        Ok(())
    }

    /// Adds a cache device (hot): with fewer than two before, the log is
    /// emptied and re-made over the first two devices. The read cache
    /// starts again, empty, over all of them.
    pub fn add_device(&self, path: &Path, progress: impl FnMut(u64)) -> Result<(), String> {
        let dev = FileDevice::open(path)?;
        let name = path.display().to_string();
        self.add_device_io(CacheDevice { name, id: Some(dev.id), io: Arc::new(dev) }, progress)
    }

    /// As [`Shared::add_device`], with the device open (tests: simulated).
    pub fn add_device_io(&self, dev: CacheDevice, progress: impl FnMut(u64)) -> Result<(), String> {
        let name = dev.name.clone();
        let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = dev.id {
            check_distinct(&devices, Path::new(&name), id)?;
        }
        let mut next: Vec<CacheDevice> =
            devices.iter().map(|d| CacheDevice { name: d.name.clone(), id: d.id, io: d.io.clone() }).collect();
        next.push(dev);
        self.quiesce_read_cache();
        if devices.len() < 2
            && let Err(e) = self.relog(&next, &format!("adding {name}"), progress)
        {
            self.restart_read_cache(&devices);
            return Err(e);
        }
        *devices = next;
        self.restart_read_cache(&devices);
        self.events.push(Event::DeviceAdded { device: name });
        Ok(())
    }

    /// A new, empty read cache over `devices` after the log's ring.
    fn restart_read_cache(&self, devices: &[CacheDevice]) {
        let rc = self.log().map(|log| Arc::new(self.make_read_cache(devices, log.ring_bytes())));
        *self.read_cache.write().unwrap_or_else(|p| p.into_inner()) = rc;
    }

    /// Removes a cache device (hot): its dirty data is destaged first.
    pub fn remove_device(&self, name: &str, progress: impl FnMut(u64)) -> Result<(), String> {
        let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        let Some(at) = devices.iter().position(|d| d.name == name) else {
            let known: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
            return Err(format!("{name}: not a cache device (devices: {})", list_or_none(&known)));
        };
        let next: Vec<CacheDevice> = devices
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != at)
            .map(|(_, d)| CacheDevice { name: d.name.clone(), id: d.id, io: d.io.clone() })
            .collect();
        // The log lives on the first two devices; any other holds only
        // clean data of the read cache.
        self.quiesce_read_cache();
        if at < 2 {
            if let Err(e) = self.relog(&next, &format!("removing {name}"), progress) {
                self.restart_read_cache(&devices);
                return Err(e);
            }
            if let Err(e) = Log::erase(devices[at].io.as_ref()) {
                // Harmless: the new log's superblocks are newer.
                tracing::warn!(device = name, error = %e, "cannot erase the old log's superblocks");
            }
        }
        *devices = next;
        self.restart_read_cache(&devices);
        self.events.push(Event::DeviceRemoved { device: name.into() });
        Ok(())
    }

    /// Sets an export's mode. Leaving write-back (or setting off)
    /// flushes the log.
    pub fn set_mode(
        &self,
        export_id: u32,
        export: &str,
        mode: CacheMode,
        progress: impl FnMut(u64),
    ) -> Result<(), String> {
        if mode == CacheMode::WriteBack {
            let healthy = self.log().map_or(0, |l| l.healthy_mirrors());
            if healthy < 2 {
                return Err(format!("write-back needs two working cache devices ({healthy} now)"));
            }
        }
        if matches!(mode, CacheMode::WriteThrough | CacheMode::WriteAround)
            && self.read_cache().is_none_or(|rc| rc.slots_total() == 0)
        {
            return Err(format!("{} needs a read cache: no cache device has room after the log's ring", mode.name()));
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

    /// The devices: name, size, role, the log's counters for it and what
    /// the read cache holds on it.
    pub fn devices(&self) -> Vec<DeviceReport> {
        let log = self.log();
        let usage = self.read_cache().map(|rc| rc.usage()).unwrap_or_default();
        let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        devices
            .iter()
            .map(|d| {
                let mirror = log.as_ref().and_then(|l| l.mirrors().iter().find(|m| m.name == d.name).cloned());
                let rc = usage.iter().find(|u| u.name == d.name);
                let caches = rc.is_some_and(|u| u.capacity_bytes > 0);
                DeviceReport {
                    name: d.name.clone(),
                    size_bytes: d.io.size(),
                    role: match (mirror.is_some(), caches) {
                        (true, true) => "log mirror, read cache",
                        (true, false) => "log mirror",
                        (false, true) => "read cache",
                        (false, false) => "spare",
                    },
                    state: match &mirror {
                        Some(m) if m.is_failed() => "failed",
                        _ if rc.is_some_and(|u| u.dropped) => "out of the read cache",
                        _ => "ok",
                    },
                    read_cache_bytes: rc.map_or(0, |u| u.used_bytes),
                    read_cache_capacity_bytes: rc.map_or(0, |u| u.capacity_bytes),
                    // The log's I/O and the read cache's.
                    bytes_written: mirror.as_ref().map_or(0, |m| m.bytes_written.load(Ordering::Relaxed))
                        + rc.map_or(0, |u| u.bytes_written),
                    bytes_read: mirror.as_ref().map_or(0, |m| m.bytes_read.load(Ordering::Relaxed))
                        + rc.map_or(0, |u| u.bytes_read),
                    errors: mirror.as_ref().map_or(0, |m| m.errors.load(Ordering::Relaxed))
                        + rc.map_or(0, |u| u.errors),
                    wear: d.io.wear(),
                }
            })
            .collect()
    }

    /// Read-cache occupancy: (slots used, slots in all, slot bytes).
    pub fn read_cache_usage(&self) -> Option<(u64, u64, u64)> {
        self.read_cache().map(|rc| (rc.slots_used(), rc.slots_total(), rc.slot_bytes()))
    }

    /// Log occupancy: (used bytes, ring bytes, age of the oldest record).
    pub fn log_usage(&self) -> Option<(u64, u64, Option<Duration>)> {
        self.log().map(|l| (l.used_bytes(), l.ring_bytes(), l.oldest().map(|t| t.elapsed())))
    }

    /// Appends a record of a live file with its state locked, so records
    /// and index changes of one file happen in the same order. Waits for
    /// room (without the lock: the destager needs it) up to [`FULL_WAIT`].
    #[allow(clippy::too_many_arguments)]
    fn append_locked<'a>(
        &self,
        log: &Log,
        slot: &'a index::FileSlot,
        kind: RecordKind,
        handle: &Bytes,
        offset: u64,
        payload: &[u8],
        size_after: impl Fn(&FileState) -> u64,
        buf: &mut Vec<u8>,
    ) -> StoreResult<(std::sync::MutexGuard<'a, FileState>, log::Record)> {
        let deadline = Instant::now() + FULL_WAIT;
        loop {
            let st = slot.lock();
            match log.append(kind, handle, offset, size_after(&st), now(), payload, buf) {
                Ok(r) => return Ok((st, r)),
                Err(LogError::Full) if Instant::now() < deadline => {
                    drop(st);
                    self.stats.full_waits.fetch_add(1, Ordering::Relaxed);
                    log.wait_for_room(Duration::from_millis(100));
                }
                Err(e) => {
                    if matches!(e, LogError::NoMirror(_)) {
                        self.data_lost("no cache device takes the log");
                    }
                    return Err(log_error(e));
                }
            }
        }
    }

    /// A write of a live file past a full log: to the back end, durably,
    /// then a `Bypassed` record, so neither the destager nor a replay
    /// writes the file's older logged data over it. `None` when the log
    /// has no room even for that record (the caller logs the write,
    /// waiting for room, as before).
    #[allow(clippy::too_many_arguments)]
    fn write_past_full_log(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        slot: &index::FileSlot,
        log: &Log,
        offset: u64,
        data: &[u8],
        stability: Stability,
    ) -> Option<StoreResult<WriteOut>> {
        let len = u32::try_from(data.len()).ok()?;
        if !log.has_room_for_bypass() {
            return None;
        }
        let handle = obj.handle();
        // The destager writes extents it took before this without the
        // file's state lock: it must not write them after this write.
        let _io = slot.io();
        let mut st = slot.lock();
        let before = self.read_cache().map(|rc| rc.generation(handle));
        // Durable before the record can be: a record synced (by anyone's
        // group commit) over data that is not would lose the older data.
        let r = self.inner.write(who, obj, offset, data, Stability::FileSync);
        self.wrote(obj, offset, data, r.is_ok(), before);
        let mut out = match r {
            Ok(out) => out,
            Err(e) => return Some(Err(e)),
        };
        self.stats.bypassed(obj.export_id(), Bypass::Full, data.len() as u64);
        let end = offset + u64::from(len);
        st.overlay(&mut out.before);
        let size = st.size.max(end);
        let mut buf = Vec::new();
        let rec = log.append(
            RecordKind::Bypassed,
            handle,
            offset,
            size,
            out.after.mtime,
            &u64::from(len).to_le_bytes(),
            &mut buf,
        );
        // The back end holds the newer data whether or not the record
        // was written; without it a replay may bring the older data back,
        // which is allowed: this write is not acknowledged then.
        let delta = st.cut(offset, end);
        st.size = size;
        st.mtime = out.after.mtime;
        st.ctime = out.after.ctime;
        if let Ok(r) = &rec {
            st.last_seq = st.last_seq.max(r.seq);
        }
        st.overlay(&mut out.after);
        drop(st);
        self.index.add_dirty(delta);
        let seq = match rec {
            Ok(r) => r.seq,
            Err(e) => return Some(Err(log_error(e))),
        };
        if stability != Stability::Unstable
            && let Err(e) = self.sync_log(log, seq)
        {
            return Some(Err(e));
        }
        out.verifier = combine(out.verifier, self.epoch.load(Ordering::Acquire));
        Some(Ok(out))
    }

    /// SETATTR with a size of a live file. The cut is logged (and synced)
    /// before the back end is truncated, so a replay repeats it; if the
    /// back end then refuses, the dirty data beyond the cut is logged again
    /// after it, so a replay restores it.
    fn truncate_live(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        slot: &index::FileSlot,
        set: &SetAttrs,
        size: u64,
        commit: bool,
    ) -> StoreResult<()> {
        let log = self.log().ok_or_else(|| errno(libc::EIO))?;
        self.inner.check_io(who, obj, true)?;
        let handle = obj.handle();
        let mut buf = Vec::new();
        let (mut st, cut) =
            self.append_locked(&log, slot, RecordKind::Truncate, handle, size, &[], |_| size, &mut buf)?;
        log.sync_through(cut.seq).map_err(log_error)?;
        // The file's state stays locked across the back end's truncation:
        // a write of this file logged in between would be cut in the index
        // but not by a replay.
        match self.inner.setattr(who, obj, set, None, commit) {
            Ok(()) => {
                let a = self.inner.getattr(obj)?;
                let delta = st.truncate(size);
                st.mtime = a.mtime;
                if index::later(a.ctime, st.ctime) {
                    st.ctime = a.ctime;
                }
                st.last_seq = cut.seq;
                drop(st);
                self.index.add_dirty(delta);
                Ok(())
            }
            Err(refused) => {
                let beyond = st.overlapping(size, u64::MAX - size);
                let mut last = cut.seq;
                for (off, e) in beyond {
                    let mut data = vec![0u8; e.len as usize];
                    let relogged = log.read_data(&mut data, e.pos).map_err(StoreError::Os).and_then(|()| {
                        log.append(RecordKind::Write, handle, off, st.size, st.mtime, &data, &mut buf)
                            .map_err(log_error)
                    });
                    match relogged {
                        Ok(r) => {
                            st.insert(off, Extent { len: e.len, seq: r.seq, pos: r.data_pos });
                            last = r.seq;
                        }
                        Err(err) => {
                            // A replay would cut data the back end kept.
                            tracing::error!("cache: cannot undo a logged truncation: {err}");
                            self.data_lost("a truncation the back end refused could not be undone in the log");
                            break;
                        }
                    }
                }
                st.last_seq = last;
                drop(st);
                let _ = log.sync_through(last);
                Err(refused)
            }
        }
    }

    /// What the back end holds at `[offset, offset + count)`, from the
    /// read cache when it has every block of it (true), else from the back
    /// end, copying in the blocks the read cache admits.
    fn read_clean(&self, who: &S::Caller, obj: &S::Object, offset: u64, count: usize) -> StoreResult<(ReadOut, bool)> {
        let export = obj.export_id();
        let rc = match self.read_cache() {
            Some(rc) if count > 0 && self.mode(export) != CacheMode::Off && rc.usable() => rc,
            _ => return Ok((self.inner.read(who, obj, offset, count)?, false)),
        };
        let handle = obj.handle();
        if self.sequential_read(handle, offset, count as u64) {
            // Neither served nor admitted: sequential bandwidth is the
            // back end's, and a stream would push the working set out.
            self.stats.read_sequential(export);
            return Ok((self.inner.read(who, obj, offset, count)?, false));
        }
        let b = rc.slot_bytes();
        let first = offset / b;
        let hits = rc.lookup(handle, first, offset.saturating_add(count as u64 - 1) / b);
        if !hits.is_empty() {
            // The caller's permission and the size, as the back end's READ
            // would give them.
            let attrs = self.inner.check_io(who, obj, false)?;
            let len = (count as u64).min(attrs.size.saturating_sub(offset));
            let need = if len == 0 { usize::MAX } else { ((offset + len - 1) / b - first + 1) as usize };
            if need <= hits.len() {
                let mut buf = BytesMut::zeroed(need * b as usize);
                if rc.read_hits(&hits[..need], &mut buf).is_ok() {
                    let start = (offset - first * b) as usize;
                    let data = buf.freeze().slice(start..start + len as usize);
                    self.stats.read_cache_hit(export, len);
                    let eof = offset + len >= attrs.size;
                    return Ok((ReadOut { data: data.into(), eof, attrs }, true));
                }
            }
        }
        self.stats.read_cache_miss(export);
        // Sampled before the back end is read: a change after this makes
        // the copy unpublishable.
        let gen0 = rc.generation(handle);
        let fill = self.read_fill_bytes;
        if fill > b && rc.has_free_slots() {
            // The aligned window around the read, in one back-end read
            // (one disk I/O, as the read alone would cost), all admitted.
            let from = offset / fill * fill;
            let to = offset.saturating_add(count as u64).div_ceil(fill).saturating_mul(fill);
            // A neighbour the disk cannot read must not fail the client's
            // read: then the read alone is tried, as without the window.
            if let Ok(mut window) = self.inner.read(who, obj, from, (to - from) as usize) {
                self.admit(&rc, who, obj, from, gen0, &mut window)?;
                let data = window.data.into_bytes()?;
                let start = ((offset - from) as usize).min(data.len());
                let len = count.min(data.len() - start);
                let eof = offset + len as u64 >= window.attrs.size;
                return Ok((ReadOut { data: data.slice(start..start + len).into(), eof, attrs: window.attrs }, false));
            }
        }
        let mut out = self.inner.read(who, obj, offset, count)?;
        self.admit(&rc, who, obj, offset, gen0, &mut out)?;
        Ok((out, false))
    }

    /// Copies the blocks of a back-end read that the read cache admits
    /// ([`ReadCache::admits`]) into it: blocks the read covers whole (or to the end of
    /// file) from its data, others read whole from the back end.
    fn admit(
        &self,
        rc: &ReadCache,
        who: &S::Caller,
        obj: &S::Object,
        offset: u64,
        gen0: u64,
        out: &mut ReadOut,
    ) -> StoreResult<()> {
        let n = out.data.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let (b, end, handle) = (rc.slot_bytes(), offset + n, obj.handle());
        let want: Vec<u64> = (offset / b..=(end - 1) / b).filter(|&blk| rc.admits(handle, blk)).collect();
        if want.is_empty() {
            return Ok(());
        }
        let data = std::mem::take(&mut out.data).into_bytes()?;
        out.data = data.clone().into();
        let mut block = vec![0u8; b as usize];
        for blk in want {
            let (bs, be) = (blk * b, blk * b + b);
            block.fill(0);
            if bs >= offset && (be <= end || out.eof) {
                let piece = &data[(bs - offset) as usize..(be.min(end) - offset) as usize];
                block[..piece.len()].copy_from_slice(piece);
            } else {
                match self.inner.read(who, obj, bs, b as usize) {
                    Ok(r) if r.data.len() as u64 == b || r.eof => {
                        let Ok(d) = r.data.into_bytes() else { continue };
                        block[..d.len()].copy_from_slice(&d);
                    }
                    _ => continue,
                }
            }
            if rc.insert(handle, blk, &block, gen0) {
                self.stats.read_cache_admitted(obj.export_id());
            }
        }
        Ok(())
    }

    fn overlay(&self, handle: &Bytes, attrs: &mut Attrs) {
        if let Some(slot) = self.index.get(handle) {
            slot.lock().overlay(attrs);
        }
    }
}

fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() { "none".into() } else { names.join(", ") }
}

/// One line of `keel cache list`.
#[derive(Debug, Clone)]
pub struct DeviceReport {
    pub name: String,
    pub size_bytes: u64,
    pub role: &'static str,
    pub state: &'static str,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub errors: u64,
    /// Bytes of clean data the read cache holds on the device, and the
    /// room it has there.
    pub read_cache_bytes: u64,
    pub read_cache_capacity_bytes: u64,
    /// What the device says of its wear, where it says anything.
    pub wear: Option<Wear>,
}

fn combine(mut v: Verifier, epoch: u64) -> Verifier {
    for (b, e) in v.iter_mut().zip(epoch.to_be_bytes()) {
        *b ^= e;
    }
    v
}

impl<S: Store> Store for CacheStore<S> {
    type Object = S::Object;
    type Caller = S::Caller;
    type LockFile = S::LockFile;

    fn exports(&self) -> Vec<ExportInfo> {
        self.shared.inner.exports()
    }

    fn write_verifier(&self) -> Verifier {
        self.shared.verifier()
    }

    fn act_as(&self, cred: &Cred) -> StoreResult<S::Caller> {
        self.shared.inner.act_as(cred)
    }

    fn resolve<T, E: From<StoreError>>(
        &self,
        fh: &Bytes,
        admit: impl FnOnce(u32) -> Result<T, E>,
    ) -> Result<(S::Object, T), E> {
        self.shared.inner.resolve(fh, admit)
    }

    fn lookup_path(&self, export_id: u32, path: &[u8]) -> StoreResult<S::Object> {
        self.shared.inner.lookup_path(export_id, path)
    }

    fn getattr(&self, obj: &S::Object) -> StoreResult<Attrs> {
        let mut a = self.shared.inner.getattr(obj)?;
        self.shared.overlay(obj.handle(), &mut a);
        Ok(a)
    }

    fn setattr(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        set: &SetAttrs,
        guard: Option<Time>,
        commit: bool,
    ) -> StoreResult<()> {
        let sh = &self.shared;
        let Some(slot) = sh.index.get(obj.handle()) else {
            let r = sh.inner.setattr(who, obj, set, guard, commit);
            if let Some(size) = set.size {
                sh.invalidate(obj.handle(), size, u64::MAX);
            }
            return r;
        };
        // The client's guard is a ctime it saw here, overlaid.
        if let Some(g) = guard {
            let mut a = sh.inner.getattr(obj)?;
            slot.lock().overlay(&mut a);
            if a.ctime != g {
                return Err(StoreError::NotSync);
            }
        }
        let _io = slot.io();
        if let Some(size) = set.size {
            let r = sh.truncate_live(who, obj, &slot, set, size, commit);
            sh.invalidate(obj.handle(), size, u64::MAX);
            return r;
        }
        sh.inner.setattr(who, obj, set, None, commit)?;
        let a = sh.inner.getattr(obj)?;
        let mut st = slot.lock();
        if set.mtime != SetTime::Keep {
            st.mtime = a.mtime;
        }
        if index::later(a.ctime, st.ctime) {
            st.ctime = a.ctime;
        }
        Ok(())
    }

    fn access(&self, who: &S::Caller, obj: &S::Object, want: u32) -> StoreResult<u32> {
        self.shared.inner.access(who, obj, want)
    }

    fn readlink(&self, who: &S::Caller, obj: &S::Object) -> StoreResult<Vec<u8>> {
        self.shared.inner.readlink(who, obj)
    }

    fn lookup(&self, who: &S::Caller, dir: &S::Object, name: &[u8]) -> StoreResult<(S::Object, Attrs)> {
        let (o, mut a) = self.shared.inner.lookup(who, dir, name)?;
        self.shared.overlay(o.handle(), &mut a);
        Ok((o, a))
    }

    fn cookie_verifier(&self, dir: &S::Object) -> [u8; 8] {
        self.shared.inner.cookie_verifier(dir)
    }

    fn readdir(
        &self,
        who: &S::Caller,
        dir: &S::Object,
        cookie: u64,
        sink: impl FnMut(DirEntry<'_>) -> bool,
    ) -> StoreResult<bool> {
        self.shared.inner.readdir(who, dir, cookie, sink)
    }

    fn entry_plus(&self, who: &S::Caller, dir: &S::Object, name: &[u8]) -> Option<(Bytes, Attrs)> {
        let (fh, mut a) = self.shared.inner.entry_plus(who, dir, name)?;
        self.shared.overlay(&fh, &mut a);
        Some((fh, a))
    }

    fn check_io(&self, who: &S::Caller, obj: &S::Object, write: bool) -> StoreResult<Attrs> {
        let mut a = self.shared.inner.check_io(who, obj, write)?;
        self.shared.overlay(obj.handle(), &mut a);
        Ok(a)
    }

    fn read(&self, who: &S::Caller, obj: &S::Object, offset: u64, count: usize) -> StoreResult<ReadOut> {
        let sh = &self.shared;
        let Some(slot) = sh.index.get(obj.handle()) else {
            let (out, cached) = sh.read_clean(who, obj, offset, count)?;
            if !cached {
                sh.stats.read_from_disk(obj.export_id(), out.data.len() as u64);
            }
            return Ok(out);
        };
        // Hold off ring reuse while the log positions taken here are read.
        let _ring = sh.ring_guard.read().unwrap_or_else(|p| p.into_inner());
        let (size, pieces) = {
            let st = slot.lock();
            (st.size, st.overlapping(offset, count as u64))
        };
        let (mut out, cached) = sh.read_clean(who, obj, offset, count)?;
        // Writes that bypassed the log may have made the back end longer.
        let size = size.max(out.attrs.size);
        let len = (count as u64).min(size.saturating_sub(offset)) as usize;
        // The back end never holds more than `len` here: `size` covers it.
        let disk = out.data.len().min(len);
        if !(pieces.is_empty() && disk == len) {
            let mut buf = BytesMut::zeroed(len);
            let on_disk = std::mem::take(&mut out.data).into_bytes()?;
            buf[..disk].copy_from_slice(&on_disk[..disk]);
            let log = sh.log().ok_or_else(|| errno(libc::EIO))?;
            let mut from_log = 0;
            for (at, e) in &pieces {
                let from = (*at - offset) as usize;
                log.read_data(&mut buf[from..from + e.len as usize], e.pos)?;
                from_log += e.len;
            }
            sh.stats.read_from_log(obj.export_id(), from_log);
            out.data = buf.freeze().into();
        }
        if !cached {
            sh.stats.read_from_disk(obj.export_id(), disk as u64);
        }
        out.eof = offset + len as u64 >= size;
        slot.lock().overlay(&mut out.attrs);
        Ok(out)
    }

    fn write(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        offset: u64,
        data: &[u8],
        stability: Stability,
    ) -> StoreResult<WriteOut> {
        let sh = &self.shared;
        let handle = obj.handle();
        let live = sh.index.get(handle);
        let log = sh.log();
        let why = sh.bypass(obj, offset, data.len() as u64, log.as_deref());
        if let (Some(Bypass::Full), Some(slot), Some(log)) = (why, &live, &log)
            && !log.has_room_for_write(data.len())
            && let Some(r) = sh.write_past_full_log(who, obj, slot, log, offset, data, stability)
        {
            return r;
        }
        if let Some(why) = why {
            // A live file's write may bypass too, where no replay of the
            // log can write over it.
            let clear = live.as_ref().is_none_or(|s| !s.lock().overlaps_log(offset, data.len() as u64));
            if clear {
                sh.stats.bypassed(obj.export_id(), why, data.len() as u64);
                let before = sh.read_cache().map(|rc| rc.generation(handle));
                let r = sh.inner.write(who, obj, offset, data, stability);
                sh.wrote(obj, offset, data, r.is_ok(), before);
                let mut out = r?;
                if let Some(slot) = &live {
                    let mut st = slot.lock();
                    st.overlay(&mut out.before);
                    st.mtime = out.after.mtime;
                    st.ctime = out.after.ctime;
                    st.overlay(&mut out.after);
                }
                out.verifier = combine(out.verifier, sh.epoch.load(Ordering::Acquire));
                return Ok(out);
            }
        }
        let log = log.ok_or_else(|| errno(libc::EIO))?;
        if offset.checked_add(data.len() as u64).is_none_or(|end| end > i64::MAX as u64) {
            return Err(errno(libc::EFBIG));
        }
        let verifier = sh.verifier();
        let base = sh.inner.check_io(who, obj, true)?;
        let slot = live.unwrap_or_else(|| {
            sh.index.get_or_insert(handle, || FileState::new(Some(obj.export_id()), base.size, base.mtime, base.ctime))
        });
        let mut buf = Vec::with_capacity(data.len().min(RECORD_PAYLOAD_MAX) + log::HEADER_BYTES + 512);
        let mut before = base;
        let mut after = base;
        let mut last_seq = 0;
        let mut first = true;
        let chunk_max = RECORD_PAYLOAD_MAX.min(log::payload_bytes_max(log.ring_bytes()));
        let mut at = offset;
        for chunk in data.chunks(chunk_max).chain(data.is_empty().then_some(&data[..0])) {
            let end = at + chunk.len() as u64;
            let (mut st, rec) =
                sh.append_locked(&log, &slot, RecordKind::Write, handle, at, chunk, |st| st.size.max(end), &mut buf)?;
            if first {
                st.overlay(&mut before);
                first = false;
            }
            let (mtime, size_after) = (rec.mtime_after, rec.size_after);
            let delta = st.insert(at, Extent { len: chunk.len() as u64, seq: rec.seq, pos: rec.data_pos });
            st.size = st.size.max(size_after);
            st.mtime = mtime;
            st.ctime = mtime;
            st.last_seq = st.last_seq.max(rec.seq);
            st.export_id.get_or_insert(obj.export_id());
            st.overlay(&mut after);
            drop(st);
            sh.index.add_dirty(delta);
            last_seq = rec.seq;
            at += chunk.len() as u64;
        }
        sh.stats.logged(obj.export_id(), data.len() as u64);
        // The back end is unchanged (the destage invalidates when it
        // writes), but a logged write drops the blocks as any write does.
        sh.invalidate(handle, offset, offset + data.len() as u64);
        if stability != Stability::Unstable {
            sh.sync_log(&log, last_seq)?;
        }
        Ok(WriteOut { before, after, verifier })
    }

    fn commit(&self, who: &S::Caller, obj: &S::Object, flush: bool) -> StoreResult<Verifier> {
        let sh = &self.shared;
        if flush
            && let Some(slot) = sh.index.get(obj.handle())
            && let Some(log) = sh.log()
        {
            let seq = slot.lock().last_seq;
            sh.sync_log(&log, seq)?;
        }
        let v = sh.inner.commit(who, obj, flush)?;
        Ok(combine(v, sh.epoch.load(Ordering::Acquire)))
    }

    fn create(
        &self,
        who: &S::Caller,
        dir: &S::Object,
        name: &[u8],
        mode: CreateMode,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<S::Object>> {
        let sh = &self.shared;
        // CREATE UNCHECKED of an existing file may truncate it: a live
        // file's truncation goes through the log first.
        if let (CreateMode::Unchecked, Some(size)) = (mode, set.size)
            && sh.index.live_files() > 0
            && let Ok((existing, _)) = sh.inner.lookup(who, dir, name)
            && sh.index.get(existing.handle()).is_some()
        {
            let cut = SetAttrs { size: Some(size), ..SetAttrs::default() };
            self.setattr(who, &existing, &cut, None, commit)?;
        }
        let r = sh.inner.create(who, dir, name, mode, set, commit);
        let mut c = match r {
            Ok(c) => c,
            Err(e) => {
                // An UNCHECKED create may have truncated before it failed.
                if let (CreateMode::Unchecked, Some(_)) = (mode, set.size)
                    && let Ok((existing, _)) = sh.inner.lookup(who, dir, name)
                {
                    sh.invalidate(existing.handle(), 0, u64::MAX);
                }
                return Err(e);
            }
        };
        // An existing file's data may be cut (UNCHECKED with a size), and a
        // new file must not meet blocks of an earlier one with its handle.
        sh.invalidate(c.object.handle(), set.size.unwrap_or(0), u64::MAX);
        sh.overlay(c.object.handle(), &mut c.attrs);
        Ok(c)
    }

    fn mkdir(
        &self,
        who: &S::Caller,
        dir: &S::Object,
        name: &[u8],
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<S::Object>> {
        self.shared.inner.mkdir(who, dir, name, set, commit)
    }

    fn symlink(
        &self,
        who: &S::Caller,
        dir: &S::Object,
        name: &[u8],
        target: &[u8],
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<S::Object>> {
        self.shared.inner.symlink(who, dir, name, target, set, commit)
    }

    fn mknod(
        &self,
        who: &S::Caller,
        dir: &S::Object,
        name: &[u8],
        kind: NodeKind,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<S::Object>> {
        self.shared.inner.mknod(who, dir, name, kind, set, commit)
    }

    fn link(
        &self,
        who: &S::Caller,
        file: &S::Object,
        dir: &S::Object,
        name: &[u8],
        commit: bool,
    ) -> StoreResult<Attrs> {
        let mut a = self.shared.inner.link(who, file, dir, name, commit)?;
        self.shared.overlay(file.handle(), &mut a);
        Ok(a)
    }

    fn remove(&self, who: &S::Caller, dir: &S::Object, name: &[u8], commit: bool) -> StoreResult<()> {
        let sh = &self.shared;
        let victim = sh.read_cache().and_then(|_| sh.inner.lookup(who, dir, name).ok());
        sh.inner.remove(who, dir, name, commit)?;
        if let Some((v, _)) = victim {
            sh.invalidate(v.handle(), 0, u64::MAX);
        }
        Ok(())
    }

    fn rmdir(&self, who: &S::Caller, dir: &S::Object, name: &[u8], commit: bool) -> StoreResult<()> {
        self.shared.inner.rmdir(who, dir, name, commit)
    }

    fn rename(
        &self,
        who: &S::Caller,
        from_dir: &S::Object,
        from: &[u8],
        to_dir: &S::Object,
        to: &[u8],
        commit: bool,
    ) -> StoreResult<()> {
        let sh = &self.shared;
        // A file renamed over goes (unless another link keeps it; its
        // blocks are then read again).
        let victim = sh.read_cache().and_then(|_| sh.inner.lookup(who, to_dir, to).ok());
        sh.inner.rename(who, from_dir, from, to_dir, to, commit)?;
        if let Some((v, _)) = victim {
            sh.invalidate(v.handle(), 0, u64::MAX);
        }
        Ok(())
    }

    fn fsstat(&self, obj: &S::Object) -> StoreResult<FsStat> {
        self.shared.inner.fsstat(obj)
    }

    fn limits(&self, obj: &S::Object) -> Limits {
        self.shared.inner.limits(obj)
    }

    fn sync_all(&self) -> StoreResult<()> {
        if let Some(log) = self.shared.log() {
            log.sync_through(u64::MAX - 1).map_err(log_error)?;
        }
        self.shared.inner.sync_all()
    }

    fn check_export(&self, export_id: u32) -> StoreResult<()> {
        self.shared.inner.check_export(export_id)
    }

    fn open_for_locks(&self, who: &S::Caller, obj: &S::Object) -> StoreResult<S::LockFile> {
        self.shared.inner.open_for_locks(who, obj)
    }
}

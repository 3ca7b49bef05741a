//! The SSD cache tier: [`CacheStore`] wraps another store and keeps a
//! write-back log on fast devices, mirrored on two of them, destaged to the
//! wrapped store in the background (Dell Fluid Cache for DAS, bcache,
//! dm-writecache, Open CAS are the references).
//!
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
//!   when the log is full, and when fewer than two devices work.
//! - **Recovery** ([`log`]): at start the log is read back from the head,
//!   checksums and sequence numbers checked, and the index rebuilt before
//!   the first call is served.
//!
//! **Invariants:** a file with records in the live log has all its writes
//! and truncations logged (so replay is its exact history); dirty data
//! leaves the index only after the back end synced it; the log's head
//! moves only after that.

#![forbid(unsafe_code)]

pub mod destage;
pub mod device;
pub mod events;
pub mod index;
pub mod log;
pub mod stats;

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
use crate::stats::{Bypass, CacheStats};

/// How an export uses the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheMode {
    /// Writes go to the mirrored log and are destaged later.
    WriteBack,
    /// The cache is not used for new writes (dirty data is still
    /// destaged, and read over until it is).
    Off,
}

impl CacheMode {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "write-back" => Ok(CacheMode::WriteBack),
            "off" => Ok(CacheMode::Off),
            "write-through" | "write-around" => {
                Err(format!("cache mode {s:?} is not available: this build has no read cache (modes: write-back, off)"))
            }
            _ => Err(format!("unknown cache mode {s:?} (modes: write-back, off)")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CacheMode::WriteBack => "write-back",
            CacheMode::Off => "off",
        }
    }
}

/// The `[cache]` settings.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Cache devices: block devices or files on a fast file system. The log
    /// is mirrored on the first two.
    pub devices: Vec<PathBuf>,
    /// The ring's size on each device (at most what the smaller holds).
    pub log_bytes: u64,
    /// A write stream of a file longer than this goes to the back end.
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
            log_bytes: u64::MAX,
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
    log_bytes: u64,
    sequential_cutoff: u64,
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
    streams: Mutex<HashMap<Bytes, (u64, u64)>>,
}

/// The cache tier in front of store `S`.
pub struct CacheStore<S: Store> {
    shared: Arc<Shared<S>>,
    destager: Mutex<Option<JoinHandle<()>>>,
}

const STREAMS_MAX: usize = 4096;
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
            epoch: AtomicU64::new(0),
            ring_guard: RwLock::new(()),
            round: Mutex::new(()),
            flushers: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            streams: Mutex::new(HashMap::new()),
        });
        if !devices.is_empty() {
            let mirrors: Vec<Arc<Mirror>> =
                devices.iter().take(2).map(|d| Mirror::new(d.name.clone(), d.io.clone())).collect();
            let opened = Log::open(mirrors, config.log_bytes, events.clone()).map_err(|e| format!("cache log: {e}"))?;
            if opened.recovered {
                let n = opened.records.len();
                shared.rebuild(&opened.records);
                events.push(Event::Recovered { records: n, dirty_bytes: shared.index.dirty_bytes() });
            }
            if devices.len() < 2 {
                events.push(Event::Degraded { reason: "one cache device: write-back needs two".into() });
            }
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

    /// Rebuilds the index from recovered records, oldest first.
    fn rebuild(&self, records: &[log::Record]) {
        for r in records {
            let slot = self.index.get_or_insert(&r.handle, || FileState::new(None, 0, r.mtime_after, r.mtime_after));
            let mut st = slot.lock();
            let delta = match r.kind {
                RecordKind::Write => st.insert(r.offset, Extent { len: u64::from(r.len), seq: r.seq, pos: r.data_pos }),
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

    /// Tracks each file's write stream; true once a run of consecutive
    /// writes is longer than the cutoff.
    fn sequential(&self, handle: &Bytes, offset: u64, len: u64) -> bool {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        if streams.len() >= STREAMS_MAX && !streams.contains_key(handle) {
            streams.clear();
        }
        let run = match streams.get(handle) {
            Some(&(next, run)) if next == offset => run + len,
            _ => len,
        };
        streams.insert(handle.clone(), (offset + len, run));
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
                let log = Log::format(mirrors, self.log_bytes, generation, self.events.clone());
                Some(Arc::new(log.map_err(|e| e.to_string())?))
            }
        };
        if devices.len() < 2 {
            self.events
                .push(Event::Degraded { reason: format!("{} cache device(s): write-back needs two", devices.len()) });
        }
        Ok(())
    }

    /// Adds a cache device (hot): the log is emptied and re-made over the
    /// first two devices.
    pub fn add_device(&self, path: &Path, progress: impl FnMut(u64)) -> Result<(), String> {
        let dev = FileDevice::open(path)?;
        let name = path.display().to_string();
        let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        check_distinct(&devices, path, dev.id)?;
        let mut next: Vec<CacheDevice> =
            devices.iter().map(|d| CacheDevice { name: d.name.clone(), id: d.id, io: d.io.clone() }).collect();
        next.push(CacheDevice { name: name.clone(), id: Some(dev.id), io: Arc::new(dev) });
        if devices.len() < 2 {
            self.relog(&next, &format!("adding {name}"), progress)?;
        }
        *devices = next;
        self.events.push(Event::DeviceAdded { device: name });
        Ok(())
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
        // The log lives on the first two devices; any other holds nothing.
        if at < 2 {
            self.relog(&next, &format!("removing {name}"), progress)?;
            if let Err(e) = Log::erase(devices[at].io.as_ref()) {
                // Harmless: the new log's superblocks are newer.
                tracing::warn!(device = name, error = %e, "cannot erase the old log's superblocks");
            }
        }
        *devices = next;
        self.events.push(Event::DeviceRemoved { device: name.into() });
        Ok(())
    }

    /// Sets an export's mode. Turning write-back off flushes the log.
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
        if mode == CacheMode::Off {
            self.flush(&format!("{export} set to off"), progress)?;
        }
        Ok(())
    }

    /// The devices: name, size, role, and the log's counters for it.
    pub fn devices(&self) -> Vec<DeviceReport> {
        let log = self.log();
        let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        devices
            .iter()
            .map(|d| {
                let mirror = log.as_ref().and_then(|l| l.mirrors().iter().find(|m| m.name == d.name).cloned());
                DeviceReport {
                    name: d.name.clone(),
                    size_bytes: d.io.size(),
                    role: if mirror.is_some() { "log mirror" } else { "spare" },
                    state: match &mirror {
                        Some(m) if m.is_failed() => "failed",
                        _ => "ok",
                    },
                    bytes_written: mirror.as_ref().map_or(0, |m| m.bytes_written.load(Ordering::Relaxed)),
                    bytes_read: mirror.as_ref().map_or(0, |m| m.bytes_read.load(Ordering::Relaxed)),
                    errors: mirror.as_ref().map_or(0, |m| m.errors.load(Ordering::Relaxed)),
                }
            })
            .collect()
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
            return sh.inner.setattr(who, obj, set, guard, commit);
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
            return sh.truncate_live(who, obj, &slot, set, size, commit);
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
            let out = sh.inner.read(who, obj, offset, count)?;
            sh.stats.read_from_disk(obj.export_id(), out.data.len() as u64);
            return Ok(out);
        };
        // Hold off ring reuse while the log positions taken here are read.
        let _ring = sh.ring_guard.read().unwrap_or_else(|p| p.into_inner());
        let (size, pieces) = {
            let st = slot.lock();
            (st.size, st.overlapping(offset, count as u64))
        };
        let mut out = sh.inner.read(who, obj, offset, count)?;
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
        sh.stats.read_from_disk(obj.export_id(), disk as u64);
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
        if let Some(why) = sh.bypass(obj, offset, data.len() as u64, log.as_deref()) {
            // A live file's write may bypass too, where no replay of the
            // log can write over it.
            let clear = live.as_ref().is_none_or(|s| !s.lock().overlaps_log(offset, data.len() as u64));
            if clear {
                sh.stats.bypassed(obj.export_id(), why, data.len() as u64);
                let mut out = sh.inner.write(who, obj, offset, data, stability)?;
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
        if stability != Stability::Unstable {
            log.sync_through(last_seq).map_err(|e| {
                sh.data_lost("log sync failed");
                log_error(e)
            })?;
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
            log.sync_through(seq).map_err(|e| {
                sh.data_lost("log sync failed");
                log_error(e)
            })?;
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
        let mut c = sh.inner.create(who, dir, name, mode, set, commit)?;
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
        self.shared.inner.remove(who, dir, name, commit)
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
        self.shared.inner.rename(who, from_dir, from, to_dir, to, commit)
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

    fn open_for_locks(&self, who: &S::Caller, obj: &S::Object) -> StoreResult<S::LockFile> {
        self.shared.inner.open_for_locks(who, obj)
    }
}

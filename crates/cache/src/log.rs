//! The write-back log: a ring of checksummed, numbered records, written to
//! every healthy mirror (two cache devices) in the same place.
//!
//! Layout of each device: two superblock copies (at 0 and 4096, written
//! alternately, so a torn write leaves the other), then the ring. A record
//! is a 128-byte header (magic, CRC32 of the rest, the log's id, sequence
//! number, kind, the file's handle, offset, the file's size and mtime
//! after it) and its payload, padded to 512 bytes. A record never
//! straddles the end of the ring: a `Wrap` record fills the rest.
//!
//! Recovery starts at the superblock's head (the first record not yet
//! destaged) and follows records while each has the next sequence number,
//! this log's id and a good checksum; the first one that does not is where
//! the log ended (a torn record was never acknowledged: acknowledgement
//! waits for the sync that covers it).
//!
//! A log replaced by another on its devices (`keel cache add` or `remove`)
//! is first *retired*, at a moment it is empty ([`Log::retire_if_empty`]):
//! from then on it takes no record, so none can land where no start looks
//! and nothing of it writes over the new log's place on a shared device.
//!
//! **Invariants:** the head on the devices moves only after the records
//! before it are durable on the back end, and ring space is reused only
//! after the superblock naming the new head is durable on every healthy
//! mirror; so a recovery never meets a reused record inside its chain.
//! A retired log held every record it took on the back end, synced.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_store::Time;

use crate::device::DeviceIo;
use crate::events::{Event, Events};

const SB_MAGIC: &[u8; 8] = b"KEELCLOG";
const SB_VERSION: u32 = 1;
const SB_COPY_BYTES: u64 = 4096;
/// Where the ring starts on every device.
pub const RING_START: u64 = 2 * SB_COPY_BYTES;
const REC_MAGIC: u32 = 0x4b4c_5231;
pub const HEADER_BYTES: usize = 128;
const ALIGN: u64 = 512;
/// A record's header holds its file's handle in its second half: the
/// store's longest handle fits (a longer one would change the format).
pub const HANDLE_BYTES_MAX: usize = keel_store::HANDLE_BYTES_MAX;
const _: () = assert!(HANDLE_BYTES_MAX <= HEADER_BYTES - 64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// Data written to a file.
    Write = 1,
    /// A file's size set (its extents beyond it are gone).
    Truncate = 2,
    /// Fills the ring to its end.
    Wrap = 3,
    /// A write of `len` bytes at `offset` went to the back end, durably,
    /// past a full log: a replay drops the file's older logged data there.
    /// Its payload is the length (8 bytes).
    Bypassed = 4,
}

impl RecordKind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => RecordKind::Write,
            2 => RecordKind::Truncate,
            3 => RecordKind::Wrap,
            4 => RecordKind::Bypassed,
            _ => return None,
        })
    }
}

/// A record as recovery found it, or as an append placed it.
#[derive(Debug, Clone)]
pub struct Record {
    pub kind: RecordKind,
    pub seq: u64,
    pub handle: Bytes,
    /// A write's offset in the file; a truncation's size.
    pub offset: u64,
    /// A write's payload length; a bypassed write's length.
    pub len: u32,
    /// The file's size and mtime once this record applies.
    pub size_after: u64,
    pub mtime_after: Time,
    /// Where the payload is on every mirror.
    pub data_pos: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("the log is full")]
    Full,
    #[error("no cache device of the log is working: {0}")]
    NoMirror(io::Error),
    /// The log was replaced by another: take the one in place now.
    #[error("the log was replaced by another")]
    Retired,
}

/// One device of the log.
pub struct Mirror {
    pub name: String,
    pub dev: Arc<dyn DeviceIo>,
    failed: AtomicBool,
    pub errors: AtomicU64,
    pub bytes_written: AtomicU64,
    pub bytes_read: AtomicU64,
}

impl Mirror {
    pub fn new(name: String, dev: Arc<dyn DeviceIo>) -> Arc<Self> {
        Arc::new(Mirror {
            name,
            dev,
            failed: AtomicBool::new(false),
            errors: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
        })
    }

    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }
}

struct Tail {
    /// Log addresses grow without end; a record's place is
    /// `RING_START + addr % ring_bytes`.
    tail_addr: u64,
    next_seq: u64,
    head_addr: u64,
    head_seq: u64,
    /// Every record in the live part of the ring: (seq, addr, end addr, when).
    records: VecDeque<(u64, u64, u64, Instant)>,
}

#[derive(Debug, Clone, Copy)]
struct Superblock {
    slot: u32,
    cache_id: u64,
    generation: u64,
    ring_bytes: u64,
    head_addr: u64,
    head_seq: u64,
}

impl Superblock {
    fn encode(&self) -> [u8; 512] {
        let mut b = [0u8; 512];
        b[0..8].copy_from_slice(SB_MAGIC);
        b[8..12].copy_from_slice(&SB_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.slot.to_le_bytes());
        b[16..24].copy_from_slice(&self.cache_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.generation.to_le_bytes());
        b[32..40].copy_from_slice(&self.ring_bytes.to_le_bytes());
        b[40..48].copy_from_slice(&self.head_addr.to_le_bytes());
        b[48..56].copy_from_slice(&self.head_seq.to_le_bytes());
        let crc = crc32fast::hash(&b[0..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if &b[0..8] != SB_MAGIC || u32_at(b, 8) != SB_VERSION || u32_at(b, 56) != crc32fast::hash(&b[0..56]) {
            return None;
        }
        Some(Superblock {
            slot: u32_at(b, 12),
            cache_id: u64_at(b, 16),
            generation: u64_at(b, 24),
            ring_bytes: u64_at(b, 32),
            head_addr: u64_at(b, 40),
            head_seq: u64_at(b, 48),
        })
    }

    /// The newer valid copy on a device, if any.
    fn read(dev: &dyn DeviceIo) -> Option<Self> {
        let mut best: Option<Superblock> = None;
        for copy in 0..2 {
            let mut b = [0u8; 512];
            if dev.read_at(&mut b, copy * SB_COPY_BYTES).is_err() {
                continue;
            }
            if let Some(sb) = Superblock::decode(&b)
                && best.is_none_or(|x| sb.generation > x.generation)
            {
                best = Some(sb);
            }
        }
        best
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Room at the end of the ring that only small records (truncations,
/// bypassed writes) may take: a full log still takes them, so a write
/// past it need not wait for a destage.
const SMALL_RECORDS_ROOM: u64 = 256 * ALIGN;

/// A record's `len`: a bypassed write's length is its payload.
fn record_len(kind: RecordKind, payload: &[u8]) -> u32 {
    match (kind, payload.try_into()) {
        (RecordKind::Bypassed, Ok(len)) => u64::from_le_bytes(len) as u32,
        _ => payload.len() as u32,
    }
}

fn record_bytes(payload: usize) -> u64 {
    (HEADER_BYTES as u64 + payload as u64).next_multiple_of(ALIGN)
}

/// The largest payload one record carries in a ring of `ring_bytes`.
pub fn payload_bytes_max(ring_bytes: u64) -> usize {
    (ring_bytes / 4) as usize - HEADER_BYTES
}

struct Header<'a> {
    cache_id: u64,
    kind: RecordKind,
    seq: u64,
    handle: &'a [u8],
    offset: u64,
    size_after: u64,
    mtime_after: Time,
}

impl Header<'_> {
    fn encode(&self, payload: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.resize(HEADER_BYTES, 0);
        out[0..4].copy_from_slice(&REC_MAGIC.to_le_bytes());
        out[8..16].copy_from_slice(&self.cache_id.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24] = self.kind as u8;
        out[25] = self.handle.len() as u8;
        out[28..32].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        out[32..40].copy_from_slice(&self.offset.to_le_bytes());
        out[40..48].copy_from_slice(&self.size_after.to_le_bytes());
        out[48..56].copy_from_slice(&self.mtime_after.seconds.to_le_bytes());
        out[56..60].copy_from_slice(&self.mtime_after.nanos.to_le_bytes());
        out[64..64 + self.handle.len()].copy_from_slice(self.handle);
        out.extend_from_slice(payload);
        out.resize(record_bytes(payload.len()) as usize, 0);
        let mut h = crc32fast::Hasher::new();
        h.update(&out[8..HEADER_BYTES]);
        h.update(payload);
        let crc = h.finalize();
        out[4..8].copy_from_slice(&crc.to_le_bytes());
    }
}

/// The log over one or two mirrors.
pub struct Log {
    mirrors: Vec<Arc<Mirror>>,
    cache_id: u64,
    ring_bytes: u64,
    state: Mutex<Tail>,
    space: Condvar,
    /// Highest sequence number durable on every healthy mirror.
    synced: Mutex<u64>,
    /// Highest sequence number written to every healthy mirror.
    written: AtomicU64,
    /// Serializes superblock writes; holds the last generation.
    sb_generation: Mutex<u64>,
    /// Set (under the tail's lock, which every append holds) once the log
    /// is empty and about to be replaced: appends fail from then on.
    retired: AtomicBool,
    events: Arc<Events>,
}

/// What opening a log found.
pub struct Opened {
    pub log: Log,
    /// The live records, oldest first, to rebuild the index from.
    pub records: Vec<Record>,
    /// Whether an existing log was found (false: formatted).
    pub recovered: bool,
}

impl Log {
    /// Opens the log on `mirrors`: recovers the newest log found on any of
    /// them (and copies its live records to the others), or formats them
    /// with a ring of `ring_bytes` (at most what the smallest device
    /// holds).
    pub fn open(mirrors: Vec<Arc<Mirror>>, ring_bytes: u64, events: Arc<Events>) -> io::Result<Opened> {
        assert!(!mirrors.is_empty() && mirrors.len() <= 2);
        let sbs: Vec<Option<Superblock>> = mirrors.iter().map(|m| Superblock::read(m.dev.as_ref())).collect();
        let newest = sbs.iter().flatten().max_by_key(|sb| sb.generation).copied();
        let Some(sb) = newest else {
            let log = Log::format(mirrors, ring_bytes, 0, events)?;
            return Ok(Opened { log, records: Vec::new(), recovered: false });
        };
        for m in &mirrors {
            if m.dev.size() < RING_START + sb.ring_bytes {
                return Err(io::Error::other(format!(
                    "{}: too small for the log found on its mirror ({} MiB ring)",
                    m.name,
                    sb.ring_bytes >> 20
                )));
            }
        }
        // Follow the chain on every mirror that belongs to this log; keep
        // the longest (the others stopped at a torn or missing record).
        let mut best: Option<(usize, Vec<Scanned>, u64)> = None;
        for (i, m) in mirrors.iter().enumerate() {
            if sbs[i].is_none_or(|s| s.cache_id != sb.cache_id) {
                continue;
            }
            let (records, end) = scan(m.dev.as_ref(), &sb);
            if best.as_ref().is_none_or(|b| records.len() > b.1.len()) {
                best = Some((i, records, end));
            }
        }
        let (source, records, end_addr) = best.expect("the newest superblock's own mirror");
        let next_seq = records.last().map_or(sb.head_seq, |r| r.0.seq + 1);
        let now = Instant::now();
        let tail = Tail {
            tail_addr: end_addr,
            next_seq,
            head_addr: sb.head_addr,
            head_seq: sb.head_seq,
            records: records.iter().map(|(r, at, end)| (r.seq, *at, *end, now)).collect(),
        };
        let log = Log {
            cache_id: sb.cache_id,
            ring_bytes: sb.ring_bytes,
            state: Mutex::new(tail),
            space: Condvar::new(),
            synced: Mutex::new(next_seq - 1),
            written: AtomicU64::new(next_seq - 1),
            sb_generation: Mutex::new(sb.generation),
            retired: AtomicBool::new(false),
            mirrors,
            events,
        };
        log.resilver(source, sb.head_addr, end_addr)?;
        let records = records.into_iter().map(|(r, _, _)| r).filter(|r| r.kind != RecordKind::Wrap).collect();
        Ok(Opened { log, records, recovered: true })
    }

    /// A new, empty log on `mirrors`, its superblock generations after
    /// `after_generation` (a log that replaces another must be newer than
    /// it, for a copy of the old one left on some device never to win).
    pub fn format(
        mirrors: Vec<Arc<Mirror>>,
        ring_bytes: u64,
        after_generation: u64,
        events: Arc<Events>,
    ) -> io::Result<Log> {
        let smallest = mirrors.iter().map(|m| m.dev.size()).min().expect("a mirror");
        let ring_bytes = ring_bytes.min(smallest - RING_START) & !(ALIGN - 1);
        let log = Log {
            cache_id: new_cache_id(),
            ring_bytes,
            state: Mutex::new(Tail { tail_addr: 0, next_seq: 1, head_addr: 0, head_seq: 1, records: VecDeque::new() }),
            space: Condvar::new(),
            synced: Mutex::new(0),
            written: AtomicU64::new(0),
            sb_generation: Mutex::new(after_generation),
            retired: AtomicBool::new(false),
            mirrors,
            events,
        };
        log.write_superblock(0, 1)?;
        Ok(log)
    }

    /// The superblock generation now.
    pub fn generation(&self) -> u64 {
        *self.sb_generation.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Erases the log's superblocks on a device leaving the cache, so that
    /// no later start takes what is left on it for a log.
    pub fn erase(dev: &dyn DeviceIo) -> io::Result<()> {
        dev.write_at(&vec![0u8; RING_START as usize], 0)?;
        dev.sync()
    }

    pub fn mirrors(&self) -> &[Arc<Mirror>] {
        &self.mirrors
    }

    pub fn healthy_mirrors(&self) -> usize {
        self.mirrors.iter().filter(|m| !m.is_failed()).count()
    }

    pub fn ring_bytes(&self) -> u64 {
        self.ring_bytes
    }

    fn lock(&self) -> MutexGuard<'_, Tail> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes of the ring in use (records not yet destaged).
    pub fn used_bytes(&self) -> u64 {
        let t = self.lock();
        t.tail_addr - t.head_addr
    }

    /// Retires the log if it is empty: no record is appended to it from
    /// then on ([`LogError::Retired`]). False, and nothing changes, while
    /// it holds records (a destage must take them first).
    pub fn retire_if_empty(&self) -> bool {
        let t = self.lock();
        if t.tail_addr != t.head_addr {
            return false;
        }
        self.retired.store(true, Ordering::Release);
        true
    }

    /// Takes records again after [`Log::retire_if_empty`] (its replacement
    /// could not be made; it is still the log on the devices).
    pub fn unretire(&self) {
        let _t = self.lock();
        self.retired.store(false, Ordering::Release);
    }

    /// Whether the log was retired: everything it took is on the back end.
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// When the oldest live record was written.
    pub fn oldest(&self) -> Option<Instant> {
        self.lock().records.front().map(|r| r.3)
    }

    /// The next sequence number and the tail address: a destage round
    /// that covers every record before them may move the head there.
    pub fn cut(&self, bytes_max: u64) -> (u64, u64) {
        let t = self.lock();
        let limit = t.head_addr.saturating_add(bytes_max);
        match t.records.iter().find(|r| r.2 > limit) {
            // Include the record that crosses the limit, so a round always
            // makes progress.
            Some(r) => t.records.iter().find(|x| x.0 > r.0).map_or((t.next_seq, t.tail_addr), |x| (x.0, x.1)),
            None => (t.next_seq, t.tail_addr),
        }
    }

    fn fail(&self, m: &Mirror, what: &str, e: &io::Error) {
        m.errors.fetch_add(1, Ordering::Relaxed);
        if m.failed.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::error!(device = %m.name, "cache device failed ({what}): {e}");
        self.events.push(Event::DeviceFailed { device: m.name.clone(), reason: format!("{what}: {e}") });
        let healthy = self.healthy_mirrors();
        if healthy == 0 {
            return;
        }
        // From now on its copy of the log falls behind: a later start
        // that finds only this device must not replay it (its records
        // were destaged, and maybe overwritten since). Best effort: the
        // device may take no write any more.
        if let Err(e) = Log::erase(m.dev.as_ref()) {
            tracing::warn!(device = %m.name, "cannot erase the failed device's log superblocks: {e}");
        }
        self.events.push(Event::Degraded {
            reason: format!(
                "cache device {} failed: write-back exports are served write-through until two cache devices \
                 work: run `keel cache remove {}`, then `keel cache add DEVICE`",
                m.name, m.name
            ),
        });
    }

    /// Writes `buf` at `pos` on every healthy mirror. Fails only when none
    /// took it.
    fn write_all_mirrors(&self, buf: &[u8], pos: u64, what: &str) -> Result<(), LogError> {
        let mut last_err = None;
        let mut ok = 0;
        for m in &self.mirrors {
            if m.is_failed() {
                continue;
            }
            match m.dev.write_at(buf, pos) {
                Ok(()) => {
                    ok += 1;
                    m.bytes_written.fetch_add(buf.len() as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    self.fail(m, what, &e);
                    last_err = Some(e);
                }
            }
        }
        match ok {
            0 => Err(LogError::NoMirror(last_err.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EIO)))),
            _ => Ok(()),
        }
    }

    /// Appends a record; returns it as placed. `Full` when the ring has no
    /// room until a destage moves the head. The record is written but not
    /// yet durable: see [`Log::sync_through`].
    #[allow(clippy::too_many_arguments)]
    pub fn append(
        &self,
        kind: RecordKind,
        handle: &Bytes,
        offset: u64,
        size_after: u64,
        mtime_after: Time,
        payload: &[u8],
        buf: &mut Vec<u8>,
    ) -> Result<Record, LogError> {
        debug_assert!(handle.len() <= HANDLE_BYTES_MAX && payload.len() <= payload_bytes_max(self.ring_bytes));
        let rec_len = record_bytes(payload.len());
        let mut t = self.lock();
        if self.is_retired() {
            return Err(LogError::Retired);
        }
        let room_to_end = self.ring_bytes - t.tail_addr % self.ring_bytes;
        let wrap = rec_len > room_to_end;
        if !self.fits(&t, kind, rec_len) {
            return Err(LogError::Full);
        }
        if wrap {
            let seq = t.next_seq;
            let h = Header {
                cache_id: self.cache_id,
                kind: RecordKind::Wrap,
                seq,
                handle: &[],
                offset: 0,
                size_after: 0,
                mtime_after: Time::default(),
            };
            h.encode(&[], buf);
            self.write_all_mirrors(buf, RING_START + t.tail_addr % self.ring_bytes, "log write")?;
            let (at, now) = (t.tail_addr, Instant::now());
            t.records.push_back((seq, at, at + room_to_end, now));
            t.tail_addr += room_to_end;
            t.next_seq += 1;
            self.written.store(seq, Ordering::Release);
        }
        let seq = t.next_seq;
        Header { cache_id: self.cache_id, kind, seq, handle, offset, size_after, mtime_after }.encode(payload, buf);
        let pos = RING_START + t.tail_addr % self.ring_bytes;
        self.write_all_mirrors(buf, pos, "log write")?;
        let (at, now) = (t.tail_addr, Instant::now());
        t.records.push_back((seq, at, at + rec_len, now));
        t.tail_addr += rec_len;
        t.next_seq += 1;
        self.written.store(seq, Ordering::Release);
        Ok(Record {
            kind,
            seq,
            handle: handle.clone(),
            offset,
            len: record_len(kind, payload),
            size_after,
            mtime_after,
            data_pos: pos + HEADER_BYTES as u64,
        })
    }

    /// Whether a record of `rec_len` bytes (and the wrap record it may
    /// need) fits now; writes leave [`SMALL_RECORDS_ROOM`] to the others.
    fn fits(&self, t: &Tail, kind: RecordKind, rec_len: u64) -> bool {
        let room_to_end = self.ring_bytes - t.tail_addr % self.ring_bytes;
        let need = rec_len + if rec_len > room_to_end { room_to_end } else { 0 };
        let keep = if kind == RecordKind::Write { SMALL_RECORDS_ROOM } else { 0 };
        t.tail_addr + need + keep - t.head_addr <= self.ring_bytes
    }

    /// Whether a write record with `payload` bytes fits now.
    pub fn has_room_for_write(&self, payload: usize) -> bool {
        self.fits(&self.lock(), RecordKind::Write, record_bytes(payload))
    }

    /// Whether a bypassed-write record fits now.
    pub fn has_room_for_bypass(&self) -> bool {
        self.fits(&self.lock(), RecordKind::Bypassed, record_bytes(8))
    }

    /// Waits up to `timeout` for room in the ring; true if there may be.
    pub fn wait_for_room(&self, timeout: Duration) -> bool {
        let t = self.lock();
        let before = t.head_addr;
        let (t, res) =
            self.space.wait_timeout_while(t, timeout, |t| t.head_addr == before).unwrap_or_else(|p| p.into_inner());
        drop(t);
        !res.timed_out()
    }

    /// Makes every record up to `seq` durable on every healthy mirror
    /// (group commit: one sync covers every record written before it).
    pub fn sync_through(&self, seq: u64) -> Result<(), LogError> {
        let mut synced = self.synced.lock().unwrap_or_else(|p| p.into_inner());
        // A retired log's records are all on the back end, synced; its
        // devices may hold another log now.
        if *synced >= seq || self.is_retired() {
            return Ok(());
        }
        let target = self.written.load(Ordering::Acquire);
        let healthy: Vec<&Arc<Mirror>> = self.mirrors.iter().filter(|m| !m.is_failed()).collect();
        let results: Vec<io::Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = healthy.iter().skip(1).map(|m| s.spawn(|| m.dev.sync())).collect();
            let mut out = vec![healthy.first().map_or(Ok(()), |m| m.dev.sync())];
            out.extend(handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("panic")))));
            out
        });
        let mut ok = 0;
        let mut last_err = None;
        for (m, r) in healthy.iter().zip(results) {
            match r {
                Ok(()) => ok += 1,
                Err(e) => {
                    self.fail(m, "log sync", &e);
                    last_err = Some(e);
                }
            }
        }
        if ok == 0 {
            return Err(LogError::NoMirror(last_err.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EIO))));
        }
        *synced = target;
        Ok(())
    }

    /// Reads payload bytes at `pos` from the first mirror that gives them,
    /// straight into `buf`.
    pub fn read_data(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        let mut last = None;
        for m in &self.mirrors {
            if m.is_failed() {
                continue;
            }
            match m.dev.read_at(buf, pos) {
                Ok(()) => {
                    m.bytes_read.fetch_add(buf.len() as u64, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) => {
                    m.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(device = %m.name, "cache device read failed: {e}");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EIO)))
    }

    /// Moves the head to (`seq`, `addr`): every record before it is durable
    /// on the back end. The superblock is durable before the space is
    /// reused.
    pub fn advance_head(&self, seq: u64, addr: u64) -> io::Result<()> {
        {
            let t = self.lock();
            // A retired log is empty, and its devices may hold another.
            if seq <= t.head_seq || self.is_retired() {
                return Ok(());
            }
        }
        self.write_superblock(addr, seq)?;
        let mut t = self.lock();
        t.head_addr = addr;
        t.head_seq = seq;
        while t.records.front().is_some_and(|r| r.0 < seq) {
            t.records.pop_front();
        }
        drop(t);
        self.space.notify_all();
        Ok(())
    }

    fn write_superblock(&self, head_addr: u64, head_seq: u64) -> io::Result<()> {
        let mut generation = self.sb_generation.lock().unwrap_or_else(|p| p.into_inner());
        *generation += 1;
        let mut ok = 0;
        let mut last = None;
        for (slot, m) in self.mirrors.iter().enumerate() {
            if m.is_failed() {
                continue;
            }
            let sb = Superblock {
                slot: slot as u32,
                cache_id: self.cache_id,
                generation: *generation,
                ring_bytes: self.ring_bytes,
                head_addr,
                head_seq,
            };
            let r = m.dev.write_at(&sb.encode(), (*generation % 2) * SB_COPY_BYTES).and_then(|()| m.dev.sync());
            match r {
                Ok(()) => ok += 1,
                Err(e) => {
                    self.fail(m, "superblock write", &e);
                    last = Some(e);
                }
            }
        }
        match ok {
            0 => Err(last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EIO))),
            _ => Ok(()),
        }
    }

    /// Copies the live ring bytes of mirror `source` to the others and
    /// makes the superblock current on all (after recovery found them
    /// behind, or blank).
    fn resilver(&self, source: usize, from: u64, to: u64) -> io::Result<()> {
        if self.mirrors.len() > 1 && to > from {
            let mut addr = from;
            let mut buf = vec![0u8; 1 << 20];
            while addr < to {
                let in_ring = addr % self.ring_bytes;
                let n = (to - addr).min(buf.len() as u64).min(self.ring_bytes - in_ring) as usize;
                let pos = RING_START + in_ring;
                self.mirrors[source].dev.read_at(&mut buf[..n], pos)?;
                for (i, m) in self.mirrors.iter().enumerate() {
                    if i != source
                        && let Err(e) = m.dev.write_at(&buf[..n], pos)
                    {
                        self.fail(m, "resilver", &e);
                    }
                }
                addr += n as u64;
            }
            for m in &self.mirrors {
                if !m.is_failed()
                    && let Err(e) = m.dev.sync()
                {
                    self.fail(m, "resilver sync", &e);
                }
            }
        }
        let (addr, seq) = {
            let t = self.lock();
            (t.head_addr, t.head_seq)
        };
        self.write_superblock(addr, seq)
    }
}

/// A record found by a scan, with its address and the address after it.
type Scanned = (Record, u64, u64);

/// Follows the chain on one device from the superblock's head. Returns the
/// records (wrap records included) and the address after the last one.
fn scan(dev: &dyn DeviceIo, sb: &Superblock) -> (Vec<Scanned>, u64) {
    let mut records = Vec::new();
    let mut addr = sb.head_addr;
    let mut seq = sb.head_seq;
    let mut header = vec![0u8; HEADER_BYTES];
    let mut payload = Vec::new();
    loop {
        if addr - sb.head_addr >= sb.ring_bytes {
            break;
        }
        let pos = RING_START + addr % sb.ring_bytes;
        // Header, padded to a sector.
        let mut first = [0u8; ALIGN as usize];
        if dev.read_at(&mut first, pos).is_err() {
            break;
        }
        header.copy_from_slice(&first[..HEADER_BYTES]);
        let h = &header;
        if u32_at(h, 0) != REC_MAGIC || u64_at(h, 8) != sb.cache_id || u64_at(h, 16) != seq {
            break;
        }
        let Some(kind) = RecordKind::from_u8(h[24]) else { break };
        let hlen = h[25] as usize;
        let plen = u32_at(h, 28) as usize;
        if hlen > HANDLE_BYTES_MAX
            || plen > payload_bytes_max(sb.ring_bytes)
            || (kind == RecordKind::Bypassed && plen != 8)
        {
            break;
        }
        let room_to_end = sb.ring_bytes - addr % sb.ring_bytes;
        let rec_len = if kind == RecordKind::Wrap { room_to_end } else { record_bytes(plen) };
        if rec_len > room_to_end {
            break;
        }
        payload.resize(plen, 0);
        if plen > 0 {
            let mut tmp = vec![0u8; (record_bytes(plen) - ALIGN.min(record_bytes(plen))) as usize];
            // The payload starts inside the first sector; read the rest.
            let in_first = (ALIGN as usize - HEADER_BYTES).min(plen);
            payload[..in_first].copy_from_slice(&first[HEADER_BYTES..HEADER_BYTES + in_first]);
            if plen > in_first {
                if dev.read_at(&mut tmp, pos + ALIGN).is_err() {
                    break;
                }
                payload[in_first..].copy_from_slice(&tmp[..plen - in_first]);
            }
        }
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&h[8..HEADER_BYTES]);
        hasher.update(&payload);
        if hasher.finalize() != u32_at(h, 4) {
            break;
        }
        let record = Record {
            kind,
            seq,
            handle: Bytes::copy_from_slice(&h[64..64 + hlen]),
            offset: u64_at(h, 32),
            len: record_len(kind, &payload),
            size_after: u64_at(h, 40),
            mtime_after: Time { seconds: u64_at(h, 48) as i64, nanos: u32_at(h, 56) },
            data_pos: pos + HEADER_BYTES as u64,
        };
        records.push((record, addr, addr + rec_len));
        addr += rec_len;
        seq += 1;
    }
    (records, addr)
}

/// An id for a new log, different from every earlier one on these devices
/// (records of an earlier log must never pass for this one's).
fn new_cache_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS's random source.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

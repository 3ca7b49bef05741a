//! Write-back: a WRITE of a file goes into the mirrored log (or around
//! it, and why), SETATTR of a live file's size logs the cut, a flush waits
//! until the destager has emptied the log, and recovery rebuilds the index
//! from the records a start found.
//!
//! A WRITE or a truncation takes the log and the file's state, then does
//! what it must (back-end checks, waits for room) and appends. If either
//! was replaced in between (the log retired for another by `keel cache
//! add` or `remove`, the file's state released once the destager had put
//! its data on the back end), the append is refused and the call starts
//! again from the top ([`Stop::Raced`]): a record in a retired log would be
//! in no log a start reads, and one for a released state would be in no
//! index that reads or the destager see. Neither check adds a lock: the
//! log's is the tail lock every append holds, the state's is the file's.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_store::{Object, SetAttrs, Stability, Store, StoreError, StoreResult, WriteOut};

use crate::error::{CacheError, DestageError};
use crate::events::Event;
use crate::index::{self, Extent, FileState};
use crate::log::{self, Log, LogError, RecordKind};
use crate::stats::Bypass;
use crate::{CacheMode, Shared, combine, errno, log_error, now};

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
/// How many times a WRITE or truncation starts again after what it took
/// was replaced under it; each time takes a log swap or a destage round
/// that finished the file meanwhile.
const RACES_MAX: usize = 8;

/// Why an attempt at a WRITE or a truncation stopped.
pub(crate) enum Stop {
    /// The log or the file's state it took was replaced before it
    /// appended: nothing of it is acknowledged; start again.
    Raced,
    Failed(StoreError),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Failed(e)
    }
}

/// Runs `attempt` until it ends other than [`Stop::Raced`] (at most
/// [`RACES_MAX`] times; then EAGAIN, which a client retries).
pub(crate) fn until_not_raced<T>(mut attempt: impl FnMut() -> Result<T, Stop>) -> StoreResult<T> {
    for _ in 0..RACES_MAX {
        match attempt() {
            Ok(v) => return Ok(v),
            Err(Stop::Failed(e)) => return Err(e),
            Err(Stop::Raced) => {}
        }
    }
    Err(errno(libc::EAGAIN))
}

impl<S: Store> Shared<S> {
    pub(crate) fn write(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        offset: u64,
        data: &[u8],
        stability: Stability,
    ) -> StoreResult<WriteOut> {
        until_not_raced(|| self.write_once(who, obj, offset, data, stability))
    }

    fn write_once(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        offset: u64,
        data: &[u8],
        stability: Stability,
    ) -> Result<WriteOut, Stop> {
        let sh = self;
        let handle = obj.handle();
        let live = sh.index.get(handle);
        let log = sh.log();
        let why = sh.bypass(obj, offset, data.len() as u64, log.as_deref());
        if let (Some(why), Some(slot), Some(log)) = (why, &live, &log)
            && let Some(r) = sh.write_live_around_log(who, obj, slot, log, offset, data, stability, why)
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
            return Err(errno(libc::EFBIG).into());
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
            sh.durable_without_two_copies(&log);
        }
        Ok(WriteOut { before, after, verifier })
    }

    /// With fewer than two working mirrors (one failed under this very
    /// write or COMMIT), one copy in the log is not enough to acknowledge
    /// data as stable on: a destage round puts everything logged so far
    /// on the back end, synced, first. If the back end fails too, the
    /// synced copy on the survivor is what there is: an error would not
    /// undo the record (a replay applies it), so the reply stands.
    pub(crate) fn durable_without_two_copies(&self, log: &Log) {
        if log.healthy_mirrors() >= 2 {
            return;
        }
        if let Err(e) = self.destage_round(log, u64::MAX) {
            tracing::error!("cache: one cache device left, and logged data cannot reach the disks: {e}");
        }
    }

    /// Whether a write of a file with nothing in the log goes to the back
    /// end, and why.
    pub(crate) fn bypass(&self, obj: &S::Object, offset: u64, len: u64, log: Option<&Log>) -> Option<Bypass> {
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

    pub(crate) fn stream(
        &self,
        streams: &Mutex<HashMap<Bytes, (u64, u64)>>,
        handle: &Bytes,
        offset: u64,
        len: u64,
    ) -> bool {
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

    /// Appends a record of a live file with its state locked, so records
    /// and index changes of one file happen in the same order. Waits for
    /// room (without the lock: the destager needs it) up to [`FULL_WAIT`].
    /// [`Stop::Raced`] if the state was released or the log retired.
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
    ) -> Result<(std::sync::MutexGuard<'a, FileState>, log::Record), Stop> {
        let deadline = Instant::now() + FULL_WAIT;
        loop {
            let st = slot.lock();
            if st.released {
                return Err(Stop::Raced);
            }
            match log.append(kind, handle, offset, size_after(&st), now(), payload, buf) {
                Ok(r) => return Ok((st, r)),
                Err(LogError::Retired) => return Err(Stop::Raced),
                Err(LogError::Full) if Instant::now() < deadline => {
                    drop(st);
                    self.stats.full_waits.fetch_add(1, Ordering::Relaxed);
                    log.wait_for_room(Duration::from_millis(100));
                }
                Err(e) => {
                    if matches!(e, LogError::NoMirror(_)) {
                        self.data_lost("no cache device takes the log");
                    }
                    return Err(log_error(e).into());
                }
            }
        }
    }

    /// A write of a live file that is not to add dirty data to the log
    /// (`why`): past a full log; and, over the file's logged data, while
    /// the log is being emptied (a flush, the export leaving write-back:
    /// new dirty data could keep it from ever emptying) or has fewer than
    /// two working mirrors (one copy is not enough to acknowledge on).
    /// Those go [`Shared::write_past_log`], waiting for room for its small
    /// record if they must. `None`: the caller goes on as for any write
    /// (a full log's write is then logged, waiting for room, as before).
    #[allow(clippy::too_many_arguments)]
    fn write_live_around_log(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        slot: &index::FileSlot,
        log: &Log,
        offset: u64,
        data: &[u8],
        stability: Stability,
        why: Bypass,
    ) -> Option<Result<WriteOut, Stop>> {
        match why {
            Bypass::Full if !log.has_room_for_write(data.len()) => {
                self.write_past_log(who, obj, slot, log, offset, data, stability, why)
            }
            Bypass::Flushing | Bypass::Degraded | Bypass::Mode
                if slot.lock().overlaps_log(offset, data.len() as u64) =>
            {
                let deadline = Instant::now() + FULL_WAIT;
                loop {
                    if let Some(r) = self.write_past_log(who, obj, slot, log, offset, data, stability, why) {
                        return Some(r);
                    }
                    if Instant::now() >= deadline {
                        return Some(Err(errno(libc::EAGAIN).into()));
                    }
                    self.stats.full_waits.fetch_add(1, Ordering::Relaxed);
                    log.wait_for_room(Duration::from_millis(100));
                }
            }
            _ => None,
        }
    }

    /// A write of a live file around the log: to the back end, durably,
    /// then a `Bypassed` record, so neither the destager nor a replay
    /// writes the file's older logged data over it. `None` when the log
    /// has no room even for that record; [`Stop::Raced`] when the file's
    /// state was released (it has no logged data left to keep a replay
    /// from: the call starts again as any write of a file not live).
    #[allow(clippy::too_many_arguments)]
    fn write_past_log(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        slot: &index::FileSlot,
        log: &Log,
        offset: u64,
        data: &[u8],
        stability: Stability,
        why: Bypass,
    ) -> Option<Result<WriteOut, Stop>> {
        let len = u32::try_from(data.len()).ok()?;
        if !log.has_room_for_bypass() {
            return None;
        }
        let handle = obj.handle();
        // The destager writes extents it took before this without the
        // file's state lock: it must not write them after this write.
        let _io = slot.io();
        let mut st = slot.lock();
        if st.released {
            return Some(Err(Stop::Raced));
        }
        let before = self.read_cache().map(|rc| rc.generation(handle));
        // Durable before the record can be: a record synced (by anyone's
        // group commit) over data that is not would lose the older data.
        let r = self.inner.write(who, obj, offset, data, Stability::FileSync);
        self.wrote(obj, offset, data, r.is_ok(), before);
        let mut out = match r {
            Ok(out) => out,
            Err(e) => return Some(Err(e.into())),
        };
        self.stats.bypassed(obj.export_id(), why, data.len() as u64);
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
        // (Not retired: the log is retired only with no file live, and
        // this state is live and locked.)
        let seq = match rec {
            Ok(r) => r.seq,
            Err(e) => return Some(Err(log_error(e).into())),
        };
        if stability != Stability::Unstable
            && let Err(e) = self.sync_log(log, seq)
        {
            return Some(Err(e.into()));
        }
        out.verifier = combine(out.verifier, self.epoch.load(Ordering::Acquire));
        Some(Ok(out))
    }

    /// SETATTR with a size of a live file. The cut is logged (and synced)
    /// before the back end is truncated, so a replay repeats it; if the
    /// back end then refuses, the dirty data beyond the cut is logged again
    /// after it, so a replay restores it. [`Stop::Raced`] before anything
    /// changed, when the log or the file's state was replaced meanwhile.
    pub(crate) fn truncate_live(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        slot: &index::FileSlot,
        set: &SetAttrs,
        size: u64,
        commit: bool,
    ) -> Result<(), Stop> {
        let log = self.log().ok_or_else(|| errno(libc::EIO))?;
        self.inner.check_io(who, obj, true)?;
        let handle = obj.handle();
        let mut buf = Vec::new();
        let (mut st, cut) =
            self.append_locked(&log, slot, RecordKind::Truncate, handle, size, &[], |_| size, &mut buf)?;
        log.sync_through(cut.seq).map_err(log_error)?;
        // (The log is not retired before this returns: the file is live.)
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
                Err(refused.into())
            }
        }
    }

    /// Makes the log durable through `seq` on every healthy mirror. A
    /// failure may lose unstable data: the verifier moves on.
    pub(crate) fn sync_log(&self, log: &Log, seq: u64) -> StoreResult<()> {
        log.sync_through(seq).map_err(|e| {
            self.data_lost("log sync failed");
            log_error(e)
        })
    }

    pub(crate) fn data_lost(&self, why: &str) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        tracing::error!("cache: data acknowledged as unstable may be lost: {why}");
    }

    /// Rebuilds the index from recovered records, oldest first.
    pub(crate) fn rebuild(&self, records: &[log::Record]) {
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

    /// Waits for the log to be empty (every dirty byte on the back end,
    /// synced, and the head past every record), calling `progress` with
    /// the dirty bytes left now and then. While it runs no write adds dirty
    /// data ([`Shared::write_live_around_log`]), so it ends; a back end
    /// that fails three rounds in a row ends it with the error.
    pub fn flush(&self, why: &str, mut progress: impl FnMut(u64)) -> Result<(), CacheError> {
        let dirty = self.index.dirty_bytes();
        self.events.push(Event::FlushStarted { why: why.into(), dirty_bytes: dirty });
        self.flushers.fetch_add(1, Ordering::AcqRel);
        let r = self.flush_inner(&mut progress);
        self.flushers.fetch_sub(1, Ordering::AcqRel);
        match &r {
            Ok(()) => self.events.push(Event::FlushFinished { why: why.into() }),
            Err(e) => self.events.push(Event::DestageFailed { reason: format!("flush ({why}): {e}") }),
        }
        r.map_err(|source| CacheError::Flush { dirty_bytes: self.index.dirty_bytes(), source })
    }

    pub(crate) fn flush_inner(&self, progress: &mut impl FnMut(u64)) -> Result<(), DestageError> {
        let mut failures = 0;
        loop {
            // The log in place now: `keel cache add` or `remove` may have
            // replaced the one this started with.
            let Some(log) = self.log() else { return Ok(()) };
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
}

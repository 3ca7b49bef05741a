//! What the cache holds for each file with records in the live log: its
//! dirty extents (newest data wins, cut at truncations), and the size and
//! times clients must see while the back end is behind.
//!
//! A file is *live* from its first logged record until the log's head has
//! passed its last one. While it is live every write and truncation of it
//! goes through the log, so replaying the log repeats its history exactly;
//! other files' writes may go straight to the back end.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use keel_store::{Attrs, Time};

/// Dirty data in the log: `len` bytes at device position `pos`, from the
/// record numbered `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub len: u64,
    pub seq: u64,
    pub pos: u64,
}

#[derive(Debug)]
pub struct FileState {
    pub export_id: Option<u32>,
    /// Non-overlapping, by offset in the file.
    pub extents: BTreeMap<u64, Extent>,
    pub size: u64,
    pub mtime: Time,
    pub ctime: Time,
    /// The newest record of this file.
    pub last_seq: u64,
    /// Ranges destaged whose records are still in the log until the head
    /// passes them (offset, length, seq): a replay would write them again.
    pub shadow: Vec<(u64, u64, u64)>,
    /// Taken out of the index (the file is no longer live): a call that
    /// got this state before must get the file's state anew, as nothing
    /// added here is seen by reads or destaged.
    pub released: bool,
}

impl FileState {
    pub fn new(export_id: Option<u32>, size: u64, mtime: Time, ctime: Time) -> Self {
        FileState {
            export_id,
            extents: BTreeMap::new(),
            size,
            mtime,
            ctime,
            last_seq: 0,
            shadow: Vec::new(),
            released: false,
        }
    }

    /// Puts `len` bytes at `offset` over whatever was there; returns the
    /// change in dirty bytes.
    pub fn insert(&mut self, offset: u64, ext: Extent) -> i64 {
        let mut delta = self.cut(offset, offset + ext.len);
        if ext.len > 0 {
            self.extents.insert(offset, ext);
            delta += ext.len as i64;
        }
        delta
    }

    /// Removes dirty data in `[from, to)`, splitting extents that cross the
    /// bounds. Returns the (negative) change in dirty bytes.
    pub fn cut(&mut self, from: u64, to: u64) -> i64 {
        let hit: Vec<(u64, Extent)> =
            self.extents.range(..to).rev().take_while(|(s, e)| *s + e.len > from).map(|(s, e)| (*s, *e)).collect();
        let mut delta = 0i64;
        for (s, e) in hit {
            self.extents.remove(&s);
            delta -= e.len as i64;
            if s < from {
                let keep = from - s;
                self.extents.insert(s, Extent { len: keep, ..e });
                delta += keep as i64;
            }
            let end = s + e.len;
            if end > to {
                let keep = end - to;
                self.extents.insert(to, Extent { len: keep, seq: e.seq, pos: e.pos + (to - s) });
                delta += keep as i64;
            }
        }
        delta
    }

    /// A truncation (or extension) to `size`: dirty data beyond it goes.
    pub fn truncate(&mut self, size: u64) -> i64 {
        self.size = size;
        self.cut(size, u64::MAX)
    }

    /// The dirty pieces inside `[offset, offset + len)`, clipped to it.
    pub fn overlapping(&self, offset: u64, len: u64) -> Vec<(u64, Extent)> {
        let end = offset.saturating_add(len);
        let mut out: Vec<(u64, Extent)> = self
            .extents
            .range(..end)
            .rev()
            .take_while(|(s, e)| *s + e.len > offset)
            .map(|(s, e)| {
                let from = (*s).max(offset);
                let to = (*s + e.len).min(end);
                (from, Extent { len: to - from, seq: e.seq, pos: e.pos + (from - *s) })
            })
            .collect();
        out.reverse();
        out
    }

    /// Extents from records before `seq`.
    pub fn older_than(&self, seq: u64) -> Vec<(u64, Extent)> {
        self.extents.iter().filter(|(_, e)| e.seq < seq).map(|(s, e)| (*s, *e)).collect()
    }

    /// Forgets extents from records before `seq` (they are on the back
    /// end); their ranges stay shadowed until the head passes them.
    pub fn retire(&mut self, seq: u64) -> u64 {
        let mut gone = 0;
        let shadow = &mut self.shadow;
        self.extents.retain(|off, e| {
            let keep = e.seq >= seq;
            if !keep {
                gone += e.len;
                shadow.push((*off, e.len, e.seq));
            }
            keep
        });
        gone
    }

    /// Whether `[offset, offset + len)` meets data a replay of the log
    /// would write: such a write must go through the log, after it.
    pub fn overlaps_log(&self, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len.max(1));
        !self.overlapping(offset, len.max(1)).is_empty()
            || self.shadow.iter().any(|&(o, l, _)| o < end && offset < o + l)
    }

    pub fn dirty_bytes(&self) -> u64 {
        self.extents.values().map(|e| e.len).sum()
    }

    /// The back end's attributes as clients must see them. The back end
    /// is never longer than the file (truncations reach it at once), but
    /// may be longer than the logged size (writes that bypassed the log).
    /// `used` stays the back end's: dirty data holds no space there yet.
    pub fn overlay(&self, attrs: &mut Attrs) {
        attrs.size = attrs.size.max(self.size);
        attrs.mtime = self.mtime;
        if later(self.ctime, attrs.ctime) {
            attrs.ctime = self.ctime;
        }
    }
}

pub fn later(a: Time, b: Time) -> bool {
    (a.seconds, a.nanos) > (b.seconds, b.nanos)
}

/// A live file: its state, and the lock a destage of it or a truncation
/// holds while it changes the back end.
#[derive(Debug)]
pub struct FileSlot {
    state: Mutex<FileState>,
    pub io: Mutex<()>,
}

impl FileSlot {
    pub fn lock(&self) -> MutexGuard<'_, FileState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn io(&self) -> MutexGuard<'_, ()> {
        self.io.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Default)]
pub struct Index {
    files: Mutex<HashMap<Bytes, Arc<FileSlot>>>,
    live: AtomicUsize,
    dirty_bytes: AtomicU64,
}

impl Index {
    fn map(&self) -> MutexGuard<'_, HashMap<Bytes, Arc<FileSlot>>> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, handle: &Bytes) -> Option<Arc<FileSlot>> {
        if self.live.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.map().get(handle).cloned()
    }

    /// The file's slot, made live with `init` if it was not.
    pub fn get_or_insert(&self, handle: &Bytes, init: impl FnOnce() -> FileState) -> Arc<FileSlot> {
        let mut map = self.map();
        if let Some(slot) = map.get(handle) {
            return slot.clone();
        }
        let slot = Arc::new(FileSlot { state: Mutex::new(init()), io: Mutex::new(()) });
        map.insert(handle.clone(), slot.clone());
        self.live.store(map.len(), Ordering::Release);
        slot
    }

    pub fn all(&self) -> Vec<(Bytes, Arc<FileSlot>)> {
        self.map().iter().map(|(h, s)| (h.clone(), s.clone())).collect()
    }

    /// Forgets files with no dirty data whose records are all before
    /// `head_seq`: no replay can touch them any more. Their states are
    /// marked released, for calls that hold them.
    pub fn release_before(&self, head_seq: u64) {
        let mut map = self.map();
        map.retain(|_, slot| {
            let mut st = slot.lock();
            st.shadow.retain(|s| s.2 >= head_seq);
            st.released = st.extents.is_empty() && st.last_seq < head_seq;
            !st.released
        });
        self.live.store(map.len(), Ordering::Release);
    }

    pub fn add_dirty(&self, delta: i64) {
        if delta >= 0 {
            self.dirty_bytes.fetch_add(delta as u64, Ordering::AcqRel);
        } else {
            self.dirty_bytes.fetch_sub(delta.unsigned_abs(), Ordering::AcqRel);
        }
    }

    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_bytes.load(Ordering::Acquire)
    }

    pub fn live_files(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(len: u64, seq: u64, pos: u64) -> Extent {
        Extent { len, seq, pos }
    }

    #[test]
    fn newer_writes_replace_the_overlapped_part_only() {
        let mut f = FileState::new(None, 0, Time::default(), Time::default());
        assert_eq!(f.insert(0, ext(100, 1, 1000)), 100);
        assert_eq!(f.insert(40, ext(20, 2, 5000)), 0);
        let v: Vec<_> = f.extents.iter().map(|(s, e)| (*s, *e)).collect();
        assert_eq!(v, vec![(0, ext(40, 1, 1000)), (40, ext(20, 2, 5000)), (60, ext(40, 1, 1060))]);
        assert_eq!(f.overlapping(50, 20), vec![(50, ext(10, 2, 5010)), (60, ext(10, 1, 1060))]);
        assert_eq!(f.dirty_bytes(), 100);
    }

    #[test]
    fn truncation_cuts_dirty_data_beyond_the_size() {
        let mut f = FileState::new(None, 0, Time::default(), Time::default());
        f.insert(0, ext(100, 1, 0));
        f.insert(200, ext(100, 2, 512));
        assert_eq!(f.truncate(50), -150);
        assert_eq!(f.extents.len(), 1);
        assert_eq!(f.extents[&0], ext(50, 1, 0));
        assert_eq!(f.size, 50);
    }

    #[test]
    fn retire_forgets_only_older_records() {
        let mut f = FileState::new(None, 0, Time::default(), Time::default());
        f.insert(0, ext(10, 1, 0));
        f.insert(10, ext(10, 5, 0));
        assert_eq!(f.older_than(5).len(), 1);
        assert_eq!(f.retire(5), 10);
        assert_eq!(f.dirty_bytes(), 10);
    }
}

//! Byte-range locks of the simulated store: the kernel's model. The local
//! store leaves the arithmetic of open file description locks to Linux
//! (`fcntl(F_OFD_SETLK)`); this module answers as Linux does (see
//! [`crate::lock`]): another description's overlapping lock conflicts
//! unless both are shared; a description's own locks of the same kind
//! that overlap or touch a new one merge with it (`posix_lock_inode`),
//! those of the other kind are cut or split around it; a test reports the
//! first conflicting lock in the order Linux keeps them (`kernel_order`).
//! What is Keel's own (the EFBIG bound, what a range means) comes from
//! [`crate::lock`];
//! `keel-store-local`'s `tests/sim_agrees.rs` checks the model against
//! Linux.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::StoreResult;
use crate::lock::{HeldLock, LockConflict, LockFile, LockKind, LockRange, cut};

/// One held lock: its description (`whose`), kind and inclusive ends.
type Held = HeldLock<u64>;

#[derive(Debug, Default)]
pub(crate) struct LockTable {
    next_ofd: u64,
    by_ino: HashMap<u64, Vec<Held>>,
}

pub(crate) type SharedLocks = Arc<Mutex<LockTable>>;

fn table(locks: &SharedLocks) -> MutexGuard<'_, LockTable> {
    locks.lock().unwrap_or_else(|e| e.into_inner())
}

/// An open file description of a simulated file, for locks.
#[derive(Debug)]
pub struct SimLockFile {
    locks: SharedLocks,
    ino: u64,
    ofd: u64,
    /// Open for writing: an exclusive lock needs it (EBADF otherwise).
    writable: bool,
}

impl SimLockFile {
    pub(crate) fn open(locks: &SharedLocks, ino: u64, writable: bool) -> Self {
        let mut t = table(locks);
        t.next_ofd += 1;
        SimLockFile { locks: locks.clone(), ino, ofd: t.next_ofd, writable }
    }

    fn conflict(&self, held: &[Held], kind: LockKind, range: LockRange) -> Option<LockConflict> {
        held.iter()
            .find(|h| h.whose != self.ofd && h.range().overlaps(&range) && kind.conflicts_with(h.kind))
            .map(|h| LockConflict { kind: h.kind, range: h.range() })
    }

    /// The ends of a new lock of `kind` over `range` once this
    /// description's locks of the same kind that overlap or touch it are
    /// merged in, as Linux merges them.
    fn merged(&self, held: &[Held], kind: LockKind, range: LockRange) -> (u64, u64) {
        let (mut start, mut end) = (range.start, range.end());
        for h in held.iter().filter(|h| h.whose == self.ofd && h.kind == kind) {
            if h.start <= end.saturating_add(1) && start <= h.end.saturating_add(1) {
                (start, end) = (start.min(h.start), end.max(h.end));
            }
        }
        (start, end)
    }
}

/// The order Linux keeps a file's locks in, which decides the conflict a
/// test reports (the first): each description's locks together, by start,
/// descriptions in the order they came; one that holds none goes last.
/// Taken before a change, applied after it.
fn kernel_order(held: &[Held]) -> impl Fn(u64) -> usize + use<> {
    let mut first: Vec<u64> = Vec::new();
    for h in held {
        if !first.contains(&h.whose) {
            first.push(h.whose);
        }
    }
    move |ofd| first.iter().position(|o| *o == ofd).unwrap_or(usize::MAX)
}

impl LockFile for SimLockFile {
    fn try_lock(&self, kind: LockKind, range: LockRange) -> StoreResult<Option<LockConflict>> {
        if kind == LockKind::Exclusive && !self.writable {
            return Err(crate::StoreError::errno(libc::EBADF));
        }
        range.check()?;
        let mut t = table(&self.locks);
        let held = t.by_ino.entry(self.ino).or_default();
        if let Some(c) = self.conflict(held, kind, range) {
            return Ok(Some(c));
        }
        let (start, end) = self.merged(held, kind, range);
        let order = kernel_order(held);
        cut(held, self.ofd, start, end);
        held.push(Held { whose: self.ofd, kind, start, end });
        held.sort_by_key(|h| (order(h.whose), h.start));
        Ok(None)
    }

    fn test(&self, kind: LockKind, range: LockRange) -> StoreResult<Option<LockConflict>> {
        range.check()?;
        let t = table(&self.locks);
        Ok(t.by_ino.get(&self.ino).and_then(|held| self.conflict(held, kind, range)))
    }

    fn unlock(&self, range: LockRange) -> StoreResult<()> {
        range.check()?;
        let mut t = table(&self.locks);
        if let Some(held) = t.by_ino.get_mut(&self.ino) {
            cut(held, self.ofd, range.start, range.end());
        }
        Ok(())
    }
}

impl Drop for SimLockFile {
    fn drop(&mut self) {
        let mut t = table(&self.locks);
        if let Some(held) = t.by_ino.get_mut(&self.ino) {
            held.retain(|h| h.whose != self.ofd);
            if held.is_empty() {
                t.by_ino.remove(&self.ino);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_conflict_and_their_own_locks_merge() {
        let locks = SharedLocks::default();
        let (a, b) = (SimLockFile::open(&locks, 7, true), SimLockFile::open(&locks, 7, true));
        assert_eq!(a.try_lock(LockKind::Exclusive, LockRange::new(0, 10)).unwrap(), None);
        let c = b.try_lock(LockKind::Shared, LockRange::new(5, 1)).unwrap().expect("conflict");
        assert_eq!(c.range, LockRange::new(0, 10));
        assert_eq!(a.try_lock(LockKind::Shared, LockRange::new(0, 0)).unwrap(), None, "own locks never conflict");
        assert_eq!(b.try_lock(LockKind::Shared, LockRange::new(100, 1)).unwrap(), None, "shared with shared");
        a.unlock(LockRange::new(0, 100)).unwrap();
        assert!(b.test(LockKind::Exclusive, LockRange::new(0, 100)).unwrap().is_none());
        assert!(a.test(LockKind::Exclusive, LockRange::new(100, 1)).unwrap().is_some(), "b holds a shared lock at 100");
        drop(a);
        assert_eq!(b.try_lock(LockKind::Exclusive, LockRange::new(0, 0)).unwrap(), None);
        drop(b);
        assert!(table(&locks).by_ino.is_empty());
    }

    #[test]
    fn own_locks_of_one_kind_merge_when_they_touch_and_split_around_the_other_kind() {
        let locks = SharedLocks::default();
        let (a, b) = (SimLockFile::open(&locks, 7, true), SimLockFile::open(&locks, 7, true));
        a.try_lock(LockKind::Exclusive, LockRange::new(0, 10)).unwrap();
        a.try_lock(LockKind::Exclusive, LockRange::new(10, 10)).unwrap();
        let c = b.test(LockKind::Shared, LockRange::new(0, 1)).unwrap().expect("conflict");
        assert_eq!(c.range, LockRange::new(0, 20), "adjacent locks of one kind are one lock");
        a.try_lock(LockKind::Shared, LockRange::new(5, 5)).unwrap();
        let c = b.test(LockKind::Shared, LockRange::new(0, 100)).unwrap().expect("conflict");
        assert_eq!(c.range, LockRange::new(0, 5), "split around the shared lock");
        assert_eq!(b.try_lock(LockKind::Shared, LockRange::new(5, 5)).unwrap(), None);
        let c = b.test(LockKind::Shared, LockRange::new(12, 1)).unwrap().expect("conflict");
        assert_eq!(c.range, LockRange::new(10, 10));
        let c = b.test(LockKind::Exclusive, LockRange::new(8, 10)).unwrap().expect("conflict");
        assert_eq!(c.range, LockRange::new(5, 5), "the first by start, as Linux reports it");
    }
}

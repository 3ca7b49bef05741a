//! Byte-range locks as Linux open file description (OFD) locks: each
//! [`LocalLockFile`] is a description of its own, opened by handle, so
//! the locks of NFS clients and of local processes on the server exclude
//! each other, and closing it releases its locks.
//!
//! A lease's description lent for locks (`LocalReadLease::lend_for_locks`)
//! is shared: a client returning its delegation sends the locks each of
//! its processes took under it, one lock owner each, and none of them may
//! open a description of its own while the lease stands (any open breaks
//! a write lease). Every owner it is lent to gets a [`LocalLockFile`] on
//! the one [`LentDescription`], which holds the union of their locks for
//! the kernel, while Keel arbitrates among them as the kernel does among
//! descriptions: to each of them the others are other descriptions.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use keel_store::lock::{HeldLock, cut};
use keel_store::{LockConflict, LockFile, LockKind, LockRange, StoreResult};

use crate::sys;

/// A lock-holding open file description; counted while it lives.
#[derive(Debug)]
pub struct LocalLockFile {
    on: Description,
    writable: bool,
    /// The store's count, and its inode's.
    open: [Arc<AtomicUsize>; 2],
}

#[derive(Debug)]
enum Description {
    Own(OwnedFd),
    /// One member of a lent description's owners.
    Lent {
        shared: Arc<LentDescription>,
        member: u64,
    },
}

/// A lease's description (and maybe the store's cached inode's: it may
/// outlive the lease) as lent to lock owners: what each of them holds.
#[derive(Debug)]
pub(crate) struct LentDescription {
    fd: OwnedFd,
    /// Every member's locks; changed only with the description's locks,
    /// under this lock.
    held: Mutex<Vec<Held>>,
    members: AtomicU64,
}

/// Where a lease finds the description it lent, while any member lives:
/// a read lease's own, a write lease's its inode's (the description
/// outlives the lease, and a later lease on it lends it again).
pub(crate) type LentSlot = Arc<Mutex<Weak<LentDescription>>>;

/// One member's lock (`whose`: the member).
type Held = HeldLock<u64>;

impl LentDescription {
    /// The one lent from `slot`, or a new one on `fd` (a duplicate of
    /// the lease's description), kept there while it lives.
    pub(crate) fn join(slot: &LentSlot, fd: impl FnOnce() -> io::Result<OwnedFd>) -> StoreResult<Arc<Self>> {
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lent) = slot.upgrade() {
            return Ok(lent);
        }
        let lent = Arc::new(LentDescription { fd: fd()?, held: Mutex::default(), members: AtomicU64::new(0) });
        *slot = Arc::downgrade(&lent);
        Ok(lent)
    }

    fn held(&self) -> MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl LocalLockFile {
    pub(crate) fn new(fd: OwnedFd, writable: bool, open: [Arc<AtomicUsize>; 2]) -> Self {
        Self::counted(LocalLockFile { on: Description::Own(fd), writable, open })
    }

    /// A new member of `shared`, with locks of its own.
    pub(crate) fn lent(shared: Arc<LentDescription>, writable: bool, open: [Arc<AtomicUsize>; 2]) -> Self {
        let member = shared.members.fetch_add(1, Ordering::Relaxed);
        Self::counted(LocalLockFile { on: Description::Lent { shared, member }, writable, open })
    }

    fn counted(self) -> Self {
        self.open.iter().for_each(|n| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        self
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match &self.on {
            Description::Own(fd) => fd.as_fd(),
            Description::Lent { shared, .. } => shared.fd.as_fd(),
        }
    }

    fn fcntl(&self, cmd: libc::c_int, kind: libc::c_int, range: LockRange) -> StoreResult<Option<LockConflict>> {
        range.check()?;
        // A range ending past off_t's maximum runs to the end.
        let found = sys::ofd_lock(self.fd(), cmd, kind, range.start as i64, range.fcntl_len() as i64);
        match found {
            Ok(None) => Ok(None),
            Ok(Some((kind, start, len))) => Ok(Some(conflict(kind, start, len))),
            Err(e) if cmd == libc::F_OFD_SETLK && matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                // Held by another description: say by whom, as far as
                // the kernel tells (a lock may have gone in between).
                let mut held = self.fcntl(libc::F_OFD_GETLK, kind, range)?;
                if held.is_none() {
                    held = Some(LockConflict { kind: LockKind::Exclusive, range });
                }
                Ok(held)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Releases what `member` holds over `range` on a lent description:
    /// the description keeps what the other members hold there.
    fn unlock_member(&self, held: &mut Vec<Held>, member: u64, range: LockRange) -> StoreResult<()> {
        range.check()?;
        let (start, end) = (range.start, range.end());
        for (from, to) in uncovered(start, end, held.iter().filter(|h| h.whose != member)) {
            self.fcntl(libc::F_OFD_SETLK, libc::F_UNLCK, LockRange::from_ends(from, to))?;
        }
        cut(held, member, start, end);
        Ok(())
    }
}

/// The first of the other members' locks on a lent description that
/// `kind` over `range` would conflict with.
fn member_conflict(held: &[Held], member: u64, kind: LockKind, range: LockRange) -> Option<LockConflict> {
    let (start, end) = (range.start, range.end());
    held.iter()
        .find(|h| h.whose != member && h.start <= end && start <= h.end && kind.conflicts_with(h.kind))
        .map(|h| LockConflict { kind: h.kind, range: h.range() })
}

/// The parts of `start..=end` that none of `others` covers, in order.
fn uncovered<'a>(start: u64, end: u64, others: impl Iterator<Item = &'a Held>) -> Vec<(u64, u64)> {
    let mut over: Vec<(u64, u64)> =
        others.filter(|h| h.start <= end && start <= h.end).map(|h| (h.start, h.end)).collect();
    over.sort_unstable();
    let mut gaps = Vec::new();
    let mut next = start;
    for (from, to) in over {
        if next > end {
            break;
        }
        if from > next {
            gaps.push((next, from - 1));
        }
        next = next.max(to.saturating_add(1));
    }
    if next <= end {
        gaps.push((next, end));
    }
    gaps
}

fn conflict(kind: libc::c_int, start: i64, len: i64) -> LockConflict {
    let kind = if kind == libc::F_WRLCK { LockKind::Exclusive } else { LockKind::Shared };
    LockConflict { kind, range: LockRange::new(start.max(0) as u64, len.max(0) as u64) }
}

fn fcntl_kind(kind: LockKind) -> libc::c_int {
    match kind {
        LockKind::Shared => libc::F_RDLCK,
        LockKind::Exclusive => libc::F_WRLCK,
    }
}

impl LockFile for LocalLockFile {
    fn try_lock(&self, kind: LockKind, range: LockRange) -> StoreResult<Option<LockConflict>> {
        if kind == LockKind::Exclusive && !self.writable {
            // The file could only be opened for reading (a read-only
            // export or file system): an exclusive lock needs writing.
            return Err(io::Error::from_raw_os_error(libc::EBADF).into());
        }
        let Description::Lent { shared, member } = &self.on else {
            return self.fcntl(libc::F_OFD_SETLK, fcntl_kind(kind), range);
        };
        range.check()?;
        let mut held = shared.held();
        if let Some(conflict) = member_conflict(&held, *member, kind, range) {
            return Ok(Some(conflict));
        }
        // No other member holds anything over the range that this kind
        // conflicts with, so after this lock the union there is `kind`:
        // one fcntl sets it, all or nothing.
        let refused = self.fcntl(libc::F_OFD_SETLK, fcntl_kind(kind), range)?;
        if refused.is_none() {
            cut(&mut held, *member, range.start, range.end());
            held.push(Held { whose: *member, kind, start: range.start, end: range.end() });
        }
        Ok(refused)
    }

    fn test(&self, kind: LockKind, range: LockRange) -> StoreResult<Option<LockConflict>> {
        if let Description::Lent { shared, member } = &self.on
            && let Some(conflict) = member_conflict(&shared.held(), *member, kind, range)
        {
            return Ok(Some(conflict));
        }
        self.fcntl(libc::F_OFD_GETLK, fcntl_kind(kind), range)
    }

    fn unlock(&self, range: LockRange) -> StoreResult<()> {
        match &self.on {
            Description::Own(_) => self.fcntl(libc::F_OFD_SETLK, libc::F_UNLCK, range).map(drop),
            Description::Lent { shared, member } => self.unlock_member(&mut shared.held(), *member, range),
        }
    }
}

impl Drop for LocalLockFile {
    fn drop(&mut self) {
        if let Description::Lent { shared, member } = &self.on {
            // Everything this member holds; the description stays open.
            let mut held = shared.held();
            let _ = self.unlock_member(&mut held, *member, LockRange::new(0, 0));
        }
        self.open.iter().for_each(|n| {
            n.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(whose: u64, kind: LockKind, start: u64, end: u64) -> Held {
        Held { whose, kind, start, end }
    }

    #[test]
    fn uncovered_finds_the_gaps_between_and_around_the_others_ranges() {
        let others =
            [held(1, LockKind::Shared, 10, 19), held(2, LockKind::Shared, 15, 29), held(3, LockKind::Shared, 40, 49)];
        assert_eq!(uncovered(0, 59, others.iter()), vec![(0, 9), (30, 39), (50, 59)]);
        assert_eq!(uncovered(12, 25, others.iter()), vec![]);
        assert_eq!(uncovered(0, u64::MAX - 1, [held(1, LockKind::Shared, 5, u64::MAX - 1)].iter()), vec![(0, 4)]);
        assert_eq!(uncovered(3, 7, [].iter()), vec![(3, 7)]);
    }

    #[test]
    fn cut_splits_a_member_s_lock_and_leaves_the_others() {
        let mut locks = vec![held(1, LockKind::Exclusive, 0, 99), held(2, LockKind::Shared, 40, 59)];
        cut(&mut locks, 1, 40, 59);
        locks.sort_by_key(|h| (h.whose, h.start));
        assert_eq!(
            locks,
            vec![
                held(1, LockKind::Exclusive, 0, 39),
                held(1, LockKind::Exclusive, 60, 99),
                held(2, LockKind::Shared, 40, 59)
            ]
        );
    }

    #[test]
    fn a_member_conflicts_with_another_s_overlapping_lock_unless_both_are_shared() {
        let locks = [held(1, LockKind::Shared, 0, 9), held(2, LockKind::Exclusive, 20, 29)];
        let r = |s, e| LockRange::from_ends(s, e);
        assert_eq!(member_conflict(&locks, 3, LockKind::Shared, r(5, 15)), None);
        assert_eq!(member_conflict(&locks, 3, LockKind::Exclusive, r(5, 15)).unwrap().range, r(0, 9));
        assert_eq!(member_conflict(&locks, 3, LockKind::Shared, r(25, 25)).unwrap().kind, LockKind::Exclusive);
        assert_eq!(member_conflict(&locks, 2, LockKind::Exclusive, r(20, 29)), None, "its own lock is no conflict");
    }
}

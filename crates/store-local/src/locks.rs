//! Byte-range locks as Linux open file description (OFD) locks: each
//! [`LocalLockFile`] is a description of its own, opened by handle, so
//! the locks of NFS clients and of local processes on the server exclude
//! each other, and closing it releases its locks. One lent by a lease
//! (`LocalReadLease::lend_for_locks`) shares the lease's description,
//! which may stay open after it: it releases its locks when dropped.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use keel_store::{LockConflict, LockFile, LockKind, LockRange, StoreResult};

use crate::sys;

/// A lock-holding open file description; counted while it lives.
#[derive(Debug)]
pub struct LocalLockFile {
    fd: OwnedFd,
    writable: bool,
    /// The store's count, and its inode's.
    open: [Arc<AtomicUsize>; 2],
    /// The description is a lease's (and maybe the store's cached
    /// inode's), lent while this lives, and may outlive `fd`: its locks are
    /// released on drop, and it is the lease's to lend again.
    lent: Option<Arc<AtomicBool>>,
}

impl LocalLockFile {
    pub(crate) fn new(fd: OwnedFd, writable: bool, open: [Arc<AtomicUsize>; 2]) -> Self {
        Self::counted(LocalLockFile { fd, writable, open, lent: None })
    }

    /// One on `fd`, a duplicate of a lease's description, which `lent`
    /// says is lent until this is dropped.
    pub(crate) fn lent(fd: OwnedFd, writable: bool, open: [Arc<AtomicUsize>; 2], lent: Arc<AtomicBool>) -> Self {
        Self::counted(LocalLockFile { fd, writable, open, lent: Some(lent) })
    }

    fn counted(self) -> Self {
        self.open.iter().for_each(|n| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        self
    }

    fn fcntl(&self, cmd: libc::c_int, kind: libc::c_int, range: LockRange) -> StoreResult<Option<LockConflict>> {
        range.check()?;
        // A range ending past off_t's maximum runs to the end.
        let found = sys::ofd_lock(self.fd.as_fd(), cmd, kind, range.start as i64, range.fcntl_len() as i64);
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
        self.fcntl(libc::F_OFD_SETLK, fcntl_kind(kind), range)
    }

    fn test(&self, kind: LockKind, range: LockRange) -> StoreResult<Option<LockConflict>> {
        self.fcntl(libc::F_OFD_GETLK, fcntl_kind(kind), range)
    }

    fn unlock(&self, range: LockRange) -> StoreResult<()> {
        self.fcntl(libc::F_OFD_SETLK, libc::F_UNLCK, range).map(drop)
    }
}

impl Drop for LocalLockFile {
    fn drop(&mut self) {
        if let Some(lent) = &self.lent {
            // From 0 to the end: everything.
            let _ = sys::ofd_lock(self.fd.as_fd(), libc::F_OFD_SETLK, libc::F_UNLCK, 0, 0);
            lent.store(false, Ordering::Release);
        }
        self.open.iter().for_each(|n| {
            n.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

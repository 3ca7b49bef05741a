//! Read leases as Linux file leases (`fcntl(F_SETLEASE, F_RDLCK)`), each
//! on a read-only open file description of its own, as knfsd backs a read
//! delegation with a kernel lease: a local process (or another file
//! server) that opens the file for writing or truncates it breaks the
//! lease and waits in the kernel until the lease is dropped, or for
//! `/proc/sys/fs/lease-break-time` at most.
//!
//! The kernel tells a lease's holder of a break with SIGIO, whose default
//! action ends the process: the store ignores SIGIO before it takes its
//! first lease, and a holder asks [`ReadLease::is_broken`] (F_GETLEASE,
//! which answers the kind the lease is being downgraded to while it
//! breaks) instead. The store's own opens for writing pass O_NONBLOCK, so
//! they fail with EAGAIN rather than wait on a lease of its own.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::OnceLock;
use std::time::Duration;

use keel_store::{FileType, ReadLease, StoreError, StoreResult};

use crate::inode::Inode;
use crate::{ident, sys};

/// Where Linux says how long a lease breaker waits.
const LEASE_BREAK_TIME_PATH: &str = "/proc/sys/fs/lease-break-time";
/// Linux's default, if that cannot be read.
const LEASE_BREAK_TIME_DEFAULT: Duration = Duration::from_secs(45);

/// A read lease, on a description of its own; released when dropped.
#[derive(Debug)]
pub struct LocalReadLease {
    fd: OwnedFd,
}

impl LocalReadLease {
    /// A read lease on `inode`: EAGAIN if anyone has the file open for
    /// writing, the store included; EINVAL for anything but a regular file
    /// or where the file system takes no leases.
    pub(crate) fn take(inode: &Inode) -> StoreResult<Self> {
        if inode.ftype != FileType::Regular {
            return Err(StoreError::errno(libc::EINVAL));
        }
        static SIGIO_IGNORED: OnceLock<std::io::Result<()>> = OnceLock::new();
        if let Err(e) = SIGIO_IGNORED.get_or_init(sys::ignore_sigio) {
            // Without it a break would end the process.
            return Err(std::io::Error::new(e.kind(), e.to_string()).into());
        }
        // Not blocking: another's write lease would make the open wait.
        let fd = inode.open_description(libc::O_RDONLY | libc::O_NONBLOCK)?;
        // The file's owner may take a lease without CAP_LEASE (which Keel
        // does not ask for): the fsuid is the owner's while it does.
        let owner = sys::fstat(fd.as_fd())?.st_uid;
        ident::as_fsuid(owner, || sys::set_lease(fd.as_fd(), libc::F_RDLCK))?;
        Ok(LocalReadLease { fd })
    }
}

impl ReadLease for LocalReadLease {
    fn is_broken(&self) -> bool {
        // An error says nothing good about the lease either.
        !matches!(sys::get_lease(self.fd.as_fd()), Ok(libc::F_RDLCK))
    }

    fn break_wait(&self) -> Duration {
        std::fs::read_to_string(LEASE_BREAK_TIME_PATH)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map_or(LEASE_BREAK_TIME_DEFAULT, Duration::from_secs)
    }
}

impl Drop for LocalReadLease {
    fn drop(&mut self) {
        // Closing the description would release it too; this says so.
        let _ = sys::set_lease(self.fd.as_fd(), libc::F_UNLCK);
    }
}

//! Read leases (Linux's `F_SETLEASE` with `F_RDLCK`): what backs an
//! NFSv4.1 read delegation, as knfsd backs each with a kernel lease. A
//! lease is held on an open file description of its own and can be had
//! only while nobody has the file open for writing; anyone who then opens
//! it for writing or truncates it (a local process, another file server,
//! the store itself) breaks it, and waits until the holder drops the
//! lease, or for the system's lease-break time at most.
//!
//! A [`ReadLease`] is released when dropped. The store never waits on one
//! of its own: its opens for writing do not block on a lease (they fail
//! with EAGAIN, having broken it), so a verb on a leased file answers
//! EAGAIN until the lease is dropped.

use std::time::Duration;

/// One read lease on a regular file. Dropping it releases it (and lets a
/// breaker waiting for it go on).
pub trait ReadLease: Send + Sync + 'static {
    /// Whether someone began to break it (opened the file for writing, or
    /// truncated it): whatever the lease vouched for (that the file does
    /// not change) no longer holds once it is dropped.
    fn is_broken(&self) -> bool;

    /// How long a breaker waits for the lease at most before the system
    /// takes it away (Linux: `/proc/sys/fs/lease-break-time`).
    fn break_wait(&self) -> Duration;
}

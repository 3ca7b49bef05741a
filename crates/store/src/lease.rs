//! Read leases (Linux's `F_SETLEASE` with `F_RDLCK`): what backs an
//! NFSv4.1 read delegation, as knfsd backs each with a kernel lease. A
//! lease is held on an open file description of its own and can be had
//! only while nobody has the file open for writing; anyone who then opens
//! it for writing or truncates it (a local process, another file server,
//! the store itself) breaks it, and waits until the holder drops the
//! lease, or for the system's lease-break time at most.
//!
//! Write leases (`F_WRLCK`, [`Store::write_lease`]) back write
//! delegations: any other open of the file breaks one, for reading too.
//! The store holds it on its own description of the file, through which it
//! goes on reading and writing the file for everyone: the lease keeps out
//! only local processes (and other file servers); its holder sees to it
//! that every access on behalf of someone else recalls first. Both kinds
//! are a [`ReadLease`] to their holder (whether it breaks, how long a
//! breaker waits).
//!
//! [`Store::write_lease`]: crate::Store::write_lease
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

    /// The lease's holder is about to change the file's attributes or names
    /// through the store, on this thread (its own SETATTR, RENAME, LINK,
    /// REMOVE), until [`ReadLease::holder_change_ends`] on this thread:
    /// what the store does for it then is not a break (a store whose leases
    /// see such changes tells its own from anyone else's). By default
    /// nothing: such a change counts as anyone's.
    fn holder_change_begins(&self) {}

    /// The change [`ReadLease::holder_change_begins`] announced is over.
    fn holder_change_ends(&self) {}
}

//! The seam between NFSv4.1's state and the protocols that hold none
//! (NFSv3, NLM): before an access that would invalidate what a
//! delegation lets its client cache, NFSv3 and NLM ask the gate the server
//! installed on the [`ExportTable`](crate::ExportTable); while the
//! delegation is being recalled the access is refused for now (NFSv3
//! answers NFS3ERR_JUKEBOX and the client retries). An NLM lock refused by
//! a conflict asks it too: an NFSv4.1 courtesy client (its lease expired)
//! holding the conflicting lock is let go of, and the lock tried again.

use keel_store::LockRange;

/// What an access does to a file, as delegations see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateAccess {
    /// Reads it, or locks a range of it.
    Read,
    /// Writes it, changes its attributes, removes or renames it.
    Write,
}

/// A delegation on the file is being recalled: try again later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a delegation on the file is being recalled")]
pub struct Recalling;

/// Delegations held on files by clients of another protocol (NFSv4.1's).
pub trait DelegationGate: Send + Sync {
    /// Whether an access to the file with store handle `handle` by a
    /// client holding no delegation may go on now. A conflicting
    /// delegation is recalled, and the access refused until it is
    /// returned (or revoked).
    fn before_access(&self, handle: &[u8], access: GateAccess) -> Result<(), Recalling>;

    /// A lock (`exclusive` or shared, over `range`) on the file with store
    /// handle `handle` was refused by a conflicting lock: the courtesy
    /// clients holding one that conflicts are expired, their locks
    /// released. True if any was: the lock is worth trying once more.
    fn lock_refused(&self, _handle: &[u8], _exclusive: bool, _range: LockRange) -> bool {
        false
    }
}

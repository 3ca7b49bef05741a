//! The lock manager's limits and places.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockConfig {
    /// Where the NSM state lives (see `nsm_store`).
    pub nsm_state_dir: PathBuf,
    /// The longest grace period after a restart; it ends sooner once every
    /// client that held locks has reclaimed or is known gone. Read by
    /// [`LockManager::new`](crate::LockManager::new); a server that shares
    /// the grace period with NFSv4.1 gives it to the one it starts.
    pub grace_max: Duration,
    /// Locks held, locks waited for and share reservations, per client
    /// address (whatever names it gives).
    pub locks_per_client_max: usize,
    /// Client hosts (an address and a caller name) with state at once,
    /// and hosts recorded for SM_NOTIFY; one address holds at most its
    /// share ([`keel_exports::claims`]).
    pub hosts_max: usize,
    /// Lock-holding open file descriptions (one per lock owner and file),
    /// across all clients; one address holds at most its share.
    pub lock_files_max: usize,
}

impl LockConfig {
    pub fn new(nsm_state_dir: PathBuf) -> Self {
        LockConfig {
            nsm_state_dir,
            grace_max: Duration::from_secs(90),
            locks_per_client_max: 4096,
            hosts_max: 4096,
            lock_files_max: 16384,
        }
    }
}

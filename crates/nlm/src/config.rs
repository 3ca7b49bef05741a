//! The lock manager's limits and places.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockConfig {
    /// Where the NSM state lives (see `nsm_store`).
    pub nsm_state_dir: PathBuf,
    /// The longest grace period after a restart; it ends sooner once every
    /// client that held locks has reclaimed or is known gone.
    pub grace_max: Duration,
    /// Locks held plus locks waited for, per client host.
    pub locks_per_client_max: usize,
    /// Client hosts with locks or waiters at once.
    pub hosts_max: usize,
    /// Lock-holding open file descriptions (one per lock owner and file),
    /// across all clients.
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

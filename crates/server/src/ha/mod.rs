//! High availability on Pacemaker and Corosync: what `keel serve` checks
//! under `[ha]`, the configuration `keel ha init` writes and the view
//! `keel ha status` prints. The OCF resource agent (`contrib/ocf/keel`)
//! starts, stops and monitors `keel serve`; Pacemaker decides where.
//!
//! Failover works because everything a client's handles, locks and
//! retransmissions depend on lives on the shared file system that moves
//! with the service: the handle key and the NSM state in `state_dir`,
//! the export's files, and an fsid taken from that file system's UUID.

pub mod init;
pub mod status;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::config::Config;
use crate::validate::Findings;

/// Under `[ha]`: `state_dir` (and the NSM state), every export and the
/// write-back cache devices' record must be on one file system, and not
/// on the node's own root file system, or a failover would serve other
/// handles, forget locks or lose the log's device list. One of the checks
/// of `crate::validate`.
pub fn check_shared(config: &Config, found: &mut Findings) {
    if !config.ha {
        return;
    }
    // A directory not made yet (state_dir before the first start) will be
    // on the file system of its nearest existing ancestor.
    let dev_of = |p: &Path| -> std::io::Result<u64> {
        let existing = p.ancestors().find(|a| a.exists()).unwrap_or(p);
        std::fs::metadata(existing).map(|m| m.dev())
    };
    let state_dir = &config.server.state_dir;
    let (shared, root) = match (dev_of(state_dir), dev_of(Path::new("/"))) {
        (Ok(shared), Ok(root)) => (shared, root),
        (Err(e), _) => return found.problem(None, format!("[ha]: cannot stat state_dir {}: {e}", state_dir.display())),
        (_, Err(e)) => return found.problem(None, format!("[ha]: cannot stat the root directory: {e}")),
    };
    if shared == root {
        found.problem(
            None,
            format!(
                "[ha] enabled but state_dir {} is on the root file system: it must be on the shared storage \
                 that moves with the service (it holds the handle key and the lock state)",
                state_dir.display()
            ),
        );
    }
    if let Some(nsm) = &config.server.nsm_state_dir {
        match dev_of(nsm) {
            Ok(dev) if dev == shared => {}
            Ok(_) => found.problem(
                None,
                format!("[ha] enabled but nsm_state_dir {} is not on state_dir's file system", nsm.display()),
            ),
            Err(e) => found.problem(None, format!("[ha]: cannot stat nsm_state_dir {}: {e}", nsm.display())),
        }
    }
    for e in &config.exports {
        match dev_of(&e.path) {
            Ok(dev) if dev == shared => {}
            Ok(_) => found.problem(
                e.table_line(),
                format!(
                    "[ha] enabled but export {} is not on state_dir's file system ({}): both must be on the \
                     shared storage that moves with the service",
                    e.path.display(),
                    state_dir.display()
                ),
            ),
            Err(err) => found.problem(e.table_line(), format!("[ha]: cannot stat export {}: {err}", e.path.display())),
        }
    }
}

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

use anyhow::{Context, bail};

use crate::config::Config;

/// Under `[ha]`: `state_dir` (and the NSM state), every export and the
/// write-back cache devices' record must be on one file system, and not
/// on the node's own root file system, or a failover would serve other
/// handles, forget locks or lose the log's device list.
pub fn check_shared(config: &Config) -> anyhow::Result<()> {
    // A directory not made yet (state_dir before the first start) will be
    // on the file system of its nearest existing ancestor.
    let dev_of = |what: &str, p: &Path| -> anyhow::Result<u64> {
        let existing = p.ancestors().find(|a| a.exists()).unwrap_or(p);
        Ok(std::fs::metadata(existing).with_context(|| format!("[ha]: cannot stat {what} {}", p.display()))?.dev())
    };
    let state_dir = &config.server.state_dir;
    let shared = dev_of("state_dir", state_dir)?;
    if shared == dev_of("the root directory", Path::new("/"))? {
        bail!(
            "[ha] enabled but state_dir {} is on the root file system: it must be on the shared storage \
             that moves with the service (it holds the handle key and the lock state)",
            state_dir.display()
        );
    }
    if let Some(nsm) = &config.server.nsm_state_dir
        && dev_of("nsm_state_dir", nsm)? != shared
    {
        bail!("[ha] enabled but nsm_state_dir {} is not on state_dir's file system", nsm.display());
    }
    for e in &config.exports {
        if dev_of("export", &e.path)? != shared {
            bail!(
                "[ha] enabled but export {} is not on state_dir's file system ({}): both must be on the \
                 shared storage that moves with the service",
                e.path.display(),
                state_dir.display()
            );
        }
    }
    Ok(())
}

//! The state directory (`state_dir`): what the server keeps for itself,
//! the handle key (whoever reads it can forge handles), the NSM state
//! (`nsm/`, or `nsm_state_dir`), the mount list, the cache's device
//! record, under `[ha]` the reply journal and the connection list, and
//! the link to the administration socket. Three rules:
//!
//! - Root's alone: the directory is 0700 and refused if others can write
//!   it; everything in it is made through `keel_store::state_file` (files
//!   0600, directories 0700), and what an older version made looser is
//!   tightened at start.
//! - One server at a time: the directory is locked (flock) before anything
//!   in it is read or written, for the life of the process.
//! - Never reachable through an export: a configuration in which the
//!   state and an export overlap, by any name, is refused at start, by
//!   `keel check-config` and by an export reload.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{Context, bail};
use keel_store::state_file;

use crate::config::Config;
use crate::sys;
use crate::validate::Findings;

/// The files in the state directory that older versions made readable
/// and writable by everyone, and that a start may not rewrite. (The
/// handle key is refused, not tightened, when others could read it: it
/// may have leaked. The NSM state tightens its own.)
const OLDER_LOOSE_FILES: [&str; 4] = ["cache-devices.json", "mount-list", "reply-cache", "connections"];

/// The NSM state's directory: `nsm_state_dir`, or `nsm` in the state
/// directory.
pub fn nsm_dir(config: &Config) -> std::path::PathBuf {
    config.server.nsm_state_dir.clone().unwrap_or_else(|| config.server.state_dir.join("nsm"))
}

/// The state directory, locked while this value lives (the process's
/// life: the kernel drops the lock when the process ends, however it ends).
pub struct StateDir {
    _lock: File,
}

impl StateDir {
    /// Makes the state directory (mode 0700) if needed, refuses one that
    /// another user could change, locks it, and takes group and other
    /// access away from the files an older version made in it.
    ///
    /// The lock is flock(2) on the directory itself: nothing to make (a
    /// start on a full file system makes nothing), and a second `keel
    /// serve` on this host is refused before it reads or writes anything
    /// (replaying the cache's log, moving the NSM state number on). It
    /// does not reach another node: between the nodes of an HA pair, the
    /// cluster's fencing ensures that one mounts the shared file system
    /// at a time.
    pub fn open(dir: &Path) -> anyhow::Result<StateDir> {
        state_file::create_dir(dir).with_context(|| format!("cannot create the state directory {}", dir.display()))?;
        let meta = std::fs::symlink_metadata(dir)
            .with_context(|| format!("cannot examine the state directory {}", dir.display()))?;
        if !meta.is_dir() {
            bail!("state directory {} is not a directory", dir.display());
        }
        let me = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0);
        if meta.uid() != me || meta.mode() & 0o022 != 0 {
            bail!(
                "state directory {} is owned by uid {} with mode {:o}: it must belong to uid {me} and not be \
                 writable by others (it holds the handle key and the administration socket)",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o7777
            );
        }
        let lock = File::open(dir).with_context(|| format!("cannot open the state directory {}", dir.display()))?;
        let locked = sys::try_lock_exclusive(lock.as_fd())
            .with_context(|| format!("cannot lock the state directory {}", dir.display()))?;
        // A server of a version before the lock shows itself by its socket.
        let older = std::os::unix::net::UnixStream::connect(dir.join(crate::admin::SOCKET_NAME)).is_ok();
        if !locked || older {
            bail!(
                "another keel is running with the state directory {} (it holds the directory's lock, or its \
                 socket answers); stop it first, or give this server a state directory of its own",
                dir.display()
            );
        }
        for name in OLDER_LOOSE_FILES {
            let path = dir.join(name);
            match state_file::make_private(&path) {
                Ok(true) => {
                    tracing::warn!(file = %path.display(), "an older version let others read and write it: now root's alone")
                }
                Ok(false) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(anyhow::Error::new(e).context(format!("cannot change the mode of {}", path.display())));
                }
            }
        }
        Ok(StateDir { _lock: lock })
    }
}

/// Finds a configuration in which what the server keeps for itself
/// (`state_dir`, `nsm_state_dir`) and an export overlap: one inside the
/// other, by path, through a symlink or through a bind mount (see
/// `keel_store_local::lies_within`). A client of such an export could
/// read the handle key (and forge handles to any file of the file system)
/// or change the lock state. Works before the state directory exists.
pub fn check_not_exported(config: &Config, found: &mut Findings) {
    let mut own = vec![("state_dir", &config.server.state_dir)];
    if let Some(nsm) = &config.server.nsm_state_dir {
        own.push(("nsm_state_dir", nsm));
    }
    for e in &config.exports {
        let shown = format!("export {} (id {})", e.path.display(), e.id);
        for (key, dir) in &own {
            let overlap = keel_store_local::lies_within(&e.path, dir).and_then(|inside| {
                Ok(if inside {
                    Some(format!("{key} {} is inside {shown}", dir.display()))
                } else if keel_store_local::lies_within(dir, &e.path)? {
                    Some(format!("{shown} is inside {key} {}", dir.display()))
                } else {
                    None
                })
            });
            match overlap {
                Ok(None) => {}
                Ok(Some(what)) => found.problem(
                    e.table_line(),
                    format!(
                        "{what}: a client of the export could read the handle key (and forge file handles) or \
                         change the lock state. Put {key} outside every export (--state-dir for a server without \
                         a configuration file); to serve a whole file system with the state on it, export a \
                         directory of it and keep the state beside that directory (say <mount>/export and \
                         <mount>/.keel)"
                    ),
                ),
                Err(err) => found.problem(
                    e.table_line(),
                    format!("cannot check that {key} {} is outside {shown}: {err}", dir.display()),
                ),
            }
        }
    }
}

//! The state directory (`state_dir`): what the server keeps for itself,
//! the handle key (whoever reads it can forge handles), the NSM state
//! (`nsm/`, or `nsm_state_dir`), the mount list, the cache's device
//! record, under `[ha]` the reply journal and the connection list, and
//! the administration socket. Root's alone: the directory is 0700 and
//! refused if others can write it; everything in it is made through
//! `keel_store::state_file` (files 0600, directories 0700), and what an
//! older version made looser is tightened at start.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{Context, bail};
use keel_store::state_file;

use crate::config::Config;

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

/// The state directory, ready for the server's files.
pub struct StateDir;

impl StateDir {
    /// Makes the state directory (mode 0700) if needed, refuses one that
    /// another user could change, and takes group and other access away
    /// from the files an older version made in it.
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
        Ok(StateDir)
    }
}

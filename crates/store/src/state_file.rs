//! The server's own small state files (the NSM state, the mount list, the
//! cache device record): replaced whole, so that a crash leaves the old
//! file or the new one, never a torn one, and durably, so that what a
//! failover's new node reads is what the old node last wrote.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// Writes `data` to `path` through a temporary file, synced, renamed over
/// `path`, with the directory synced after.
pub fn replace_durably(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = Path::new(&tmp);
    let mut f = fs::File::create(tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    fs::rename(tmp, path)?;
    sync_dir(path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")))
}

/// Makes the directory's entries (a file made, renamed or removed) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_holds_the_new_data_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("keel-state-file-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state");
        replace_durably(&path, b"one").unwrap();
        replace_durably(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        assert!(replace_durably(&dir.join("missing/state"), b"x").is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}

//! The exported tree as the server's host sees it: metadata, snapshots
//! for before/after comparisons, and files made with a chosen owner and
//! mode.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

pub fn meta(path: &Path) -> std::fs::Metadata {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
}

pub fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Everything observable about a tree on the host, for before/after
/// comparisons: per path, its type, mode, owner, size, link count,
/// mtime, ctime and content (files) or target (symlinks).
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        let m = meta(&p);
        let ft = m.file_type();
        let extra = if ft.is_file() {
            format!("{:?}", std::fs::read(&p).unwrap())
        } else if ft.is_symlink() {
            format!("-> {}", std::fs::read_link(&p).unwrap().display())
        } else if ft.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                todo.push(e.unwrap().path());
            }
            String::new()
        } else {
            format!("special fifo={} rdev={}", ft.is_fifo(), m.rdev())
        };
        let desc = format!(
            "mode={:o} uid={} gid={} size={} nlink={} mtime={}.{} ctime={}.{} {extra}",
            m.mode(),
            m.uid(),
            m.gid(),
            m.size(),
            m.nlink(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        );
        out.insert(p.strip_prefix(root).unwrap().to_path_buf(), desc);
    }
    out
}

pub fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
}

pub fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A file with `content`, `mode` and owner `uid:gid`, made on the host.
pub fn host_file(path: &Path, content: &[u8], mode: u32, uid: u32, gid: u32) {
    std::fs::write(path, content).unwrap();
    // chown clears setuid and setgid: owner first, then mode.
    chown(path, uid, gid);
    chmod(path, mode);
}

pub fn host_dir(path: &Path, mode: u32, uid: u32, gid: u32) {
    std::fs::create_dir(path).unwrap();
    chown(path, uid, gid);
    chmod(path, mode);
}

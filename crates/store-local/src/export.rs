//! An exported directory tree: its root, its file system identity and how
//! handles are checked against it.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::handle::{self, FileHandle, HandleKey};
use crate::sys;
use keel_store::FileType;
use keel_store::{StoreError, StoreResult};

/// What the configuration says about an export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSpec {
    pub id: u32,
    pub path: PathBuf,
    /// Overrides the id derived from the file system UUID (exports(5) `fsid=`).
    pub fsid: Option<u64>,
}

/// Where an export's fsid came from, for the start-up log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsidSource {
    Configured,
    FsUuid,
    /// statfs's f_fsid: may change if the device is renumbered.
    Statfs,
    /// The device number: the file system has no usable identity of its
    /// own; changes if the device is renumbered.
    Device,
}

#[derive(Debug)]
pub struct Export {
    pub id: u32,
    pub fsid: u64,
    pub fsid_source: FsidSource,
    pub path: PathBuf,
    /// The export root, opened as a directory; also the mount descriptor
    /// for open_by_handle_at.
    root_fd: OwnedFd,
    pub(crate) root_dev: u64,
    pub(crate) root_ino: u64,
    pub(crate) mount_id: i32,
    /// The root is not the root of its file system, so an inode opened by
    /// handle may lie outside the export and directories are checked.
    pub(crate) subtree: bool,
    pub root_handle: FileHandle,
    /// One sync commits a whole namespace operation (see
    /// [`Export::one_sync_commits_namespace_ops`]).
    one_sync_per_namespace_op: bool,
    /// No longer served (an export reload removed it): objects opened
    /// through it are stale.
    retired: AtomicBool,
    storage: StorageHealth,
}

/// XFS_SUPER_MAGIC, statfs(2)'s f_type of XFS ("XFSB").
const XFS_SUPER_MAGIC: i64 = 0x5846_5342;

/// What a directory is as an export root, as [`Export::open`] finds it:
/// for checking a configuration without the handle key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportIdentity {
    pub fsid: u64,
    pub fsid_source: FsidSource,
    /// Not the root of its file system (see [`Export::is_subtree`]).
    pub subtree: bool,
}

/// An export root opened and examined: everything an [`Export`] needs but
/// the handle key.
struct Root {
    fd: OwnedFd,
    st: libc::stat,
    kernel: sys::KernelHandle,
    mount_id: i32,
    identity: ExportIdentity,
}

impl Root {
    fn open(spec: &ExportSpec) -> StoreResult<Root> {
        let fd = sys::open_path(&spec.path, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let st = sys::fstat(fd.as_fd())?;
        let (kernel, mount_id) = sys::name_to_handle(fd.as_fd(), b"")?;
        let (fsid, fsid_source) = match spec.fsid {
            Some(f) => (f, FsidSource::Configured),
            None => derive_fsid(fd.as_fd(), st.st_dev)?,
        };
        let subtree = !is_file_system_root(mount_id, &st);
        Ok(Root { fd, st, kernel, mount_id, identity: ExportIdentity { fsid, fsid_source, subtree } })
    }
}

impl Export {
    pub fn open(spec: &ExportSpec, key: &HandleKey) -> StoreResult<Export> {
        let Root { fd: root_fd, st, kernel, mount_id, identity } = Root::open(spec)?;
        let one_sync_per_namespace_op = sys::statfs_type(root_fd.as_fd())? == XFS_SUPER_MAGIC;
        let root_handle = handle::encode(key, spec.id, identity.fsid, FileType::Directory, &kernel)?;
        Ok(Export {
            id: spec.id,
            fsid: identity.fsid,
            fsid_source: identity.fsid_source,
            path: spec.path.clone(),
            root_fd,
            root_dev: st.st_dev,
            root_ino: st.st_ino,
            mount_id,
            subtree: identity.subtree,
            root_handle,
            one_sync_per_namespace_op,
            retired: AtomicBool::new(false),
            storage: StorageHealth::default(),
        })
    }

    /// What [`Export::open`] would find, and whether it would succeed,
    /// without the handle key: the same checks, made the same way.
    pub fn identify(spec: &ExportSpec) -> StoreResult<ExportIdentity> {
        Root::open(spec).map(|root| root.identity)
    }

    /// Whether one fsync of any object a namespace operation (a create, a
    /// link, a rename) changed makes the whole operation durable, so that a
    /// `sync` export need not sync every object it changed (knfsd's
    /// `commit_metadata`, which on XFS is one log force for an object and
    /// its directory). True on XFS only: XFS logs every inode such an
    /// operation changes in one transaction (or in a chain whose first
    /// transaction logs the intents that log recovery completes), and an
    /// fsync forces the log up to the last transaction that logged the
    /// object, which commits everything logged before it. Elsewhere every
    /// changed object is synced: what one fsync covers there depends on the
    /// file system and its mode (ext4's journal, its fast commits, or
    /// none), and Keel relies on nothing it has not tested.
    pub(crate) fn one_sync_commits_namespace_ops(&self) -> bool {
        self.one_sync_per_namespace_op
    }

    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }

    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }

    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root_fd.as_fd()
    }

    /// Whether the export is a subdirectory of its file system (handles of
    /// directories are then checked to lie under the export root).
    pub fn is_subtree(&self) -> bool {
        self.subtree
    }

    pub(crate) fn is_root(&self, st: &libc::stat) -> bool {
        st.st_dev == self.root_dev && st.st_ino == self.root_ino
    }

    /// Flushes everything of this export's file system to disk.
    pub fn sync(&self) -> StoreResult<()> {
        let result = sys::syncfs(self.root_fd.as_fd());
        if let Err(e) = &result {
            self.storage.failed(e);
        }
        result.map_err(StoreError::from)
    }

    /// Whether the export's storage as a whole works: its root answers
    /// and its file system takes a flush. See [`StorageHealth`].
    pub fn check(&self) -> StoreResult<()> {
        self.storage.check(|| sys::fstat(self.root_fd.as_fd()).and_then(|_| sys::syncfs(self.root_fd.as_fd())))
    }
}

/// Ancestors walked to prove a directory lies under another.
const SUBTREE_DEPTH_MAX: usize = 4096;

/// Whether the directory `fd` is the directory (`dev`, `ino`) or lies
/// under it, walking "..": a walk that reaches the file system's root or
/// leaves the device has not met it.
pub(crate) fn is_under(fd: BorrowedFd, dev: u64, ino: u64) -> std::io::Result<bool> {
    let mut current = sys::openat(fd, b".", libc::O_PATH | libc::O_DIRECTORY, 0)?;
    for _ in 0..SUBTREE_DEPTH_MAX {
        let st = sys::fstat(current.as_fd())?;
        if st.st_dev == dev && st.st_ino == ino {
            return Ok(true);
        }
        let parent = sys::openat(current.as_fd(), b"..", libc::O_PATH | libc::O_DIRECTORY, 0)?;
        let pst = sys::fstat(parent.as_fd())?;
        if pst.st_dev != dev || (pst.st_ino == st.st_ino && pst.st_dev == st.st_dev) {
            return Ok(false);
        }
        current = parent;
    }
    Ok(false)
}

/// Whether `path` is the directory `root` or lies in the tree under it,
/// so that a client of an export of `root` could reach it (or, the other
/// way round, an export of `path` would serve part of `root`). `path`
/// need not exist yet: its nearest existing ancestor stands for it (it
/// will be made there). Three ways, so that no other name gets round it:
/// - by path, with symlinks resolved;
/// - by identity: `root` is another name (a bind mount) of `path` or of
///   one of its ancestors;
/// - by the file system's own tree: `path` opened by handle through
///   `root`'s mount and walked up by "..", which finds `root` even when
///   `path` is reached by another name (a bind mount of a directory under
///   `root`). This needs CAP_DAC_READ_SEARCH; without it (a check of the
///   configuration by an ordinary user, who may not even look into the
///   directories) the path decides.
///
/// A `root` that does not exist contains nothing.
pub fn lies_within(root: &Path, path: &Path) -> std::io::Result<bool> {
    let root = match std::fs::canonicalize(root) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let existing = path.ancestors().find(|a| a.exists()).unwrap_or(Path::new("/"));
    let existing = std::fs::canonicalize(existing)?;
    if existing.starts_with(&root) {
        return Ok(true);
    }
    match within_by_identity(&root, &existing) {
        // Not allowed to look (a check by an ordinary user): the path decides.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => Ok(false),
        other => other,
    }
}

/// The second and third ways of [`lies_within`], for canonical paths.
fn within_by_identity(root: &Path, existing: &Path) -> std::io::Result<bool> {
    // Not O_PATH: open_by_handle_at refuses such a descriptor as the mount.
    let root_fd = sys::open_path(root, libc::O_RDONLY | libc::O_DIRECTORY)?;
    let rst = sys::fstat(root_fd.as_fd())?;
    for ancestor in existing.ancestors() {
        let st = sys::fstat(sys::open_path(ancestor, libc::O_PATH)?.as_fd())?;
        if st.st_dev == rst.st_dev && st.st_ino == rst.st_ino {
            return Ok(true);
        }
    }
    let fd = sys::open_path(existing, libc::O_PATH)?;
    if sys::fstat(fd.as_fd())?.st_dev != rst.st_dev {
        return Ok(false);
    }
    let (kernel, _) = sys::name_to_handle(fd.as_fd(), b"")?;
    let walked = sys::open_by_handle(root_fd.as_fd(), &kernel, libc::O_PATH | libc::O_DIRECTORY)
        .and_then(|through_root| is_under(through_root.as_fd(), rst.st_dev, rst.st_ino));
    match walked {
        // Not a directory: what stands for the path is a file, under no tree.
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Ok(false),
        // The kernel finds no way from `root`'s mount to the object
        // (ENOENT, ESTALE): it is outside the tree that mount shows, as
        // when one of the two is a bind mount of itself (systemd's
        // StateDirectory= in a unit with a mount namespace). The path
        // and the identity above have decided.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESTALE)) => Ok(false),
        other => other,
    }
}

/// How long a failure of the storage as a whole is taken to last: longer
/// than the cluster takes to notice it and move the service.
const STORAGE_FAILURE_HOLD: Duration = Duration::from_secs(30);

/// The export's storage seen as a whole, for the calls that failed with
/// EIO and ask whether the storage failed (an HA server then holds them).
///
/// Linux reports a write-back error to syncfs(2) once per open file
/// description, and all checks share the root's: of several calls that
/// fail together (a lost path), only the first check would see the error,
/// and the others, before the file system shuts down, would find the
/// storage healthy and answer EIO. So checks run one at a time, and a
/// failure seen stands for every check in the [`STORAGE_FAILURE_HOLD`]
/// after it.
#[derive(Debug, Default)]
pub(crate) struct StorageHealth {
    /// When the storage last failed, and its errno.
    last_failure: Mutex<Option<(Instant, i32)>>,
}

impl StorageHealth {
    pub(crate) fn failed(&self, e: &std::io::Error) {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), errno));
    }

    pub(crate) fn check(&self, probe: impl FnOnce() -> std::io::Result<()>) -> StoreResult<()> {
        let mut last = self.last_failure.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, errno)) = *last
            && at.elapsed() < STORAGE_FAILURE_HOLD
        {
            return Err(std::io::Error::from_raw_os_error(errno).into());
        }
        let result = probe();
        if let Err(e) = &result {
            *last = Some((Instant::now(), e.raw_os_error().unwrap_or(libc::EIO)));
        }
        result.map_err(StoreError::from)
    }
}

/// fsid from the file system UUID (stable across reboots and device
/// renumbering, the same on an HA peer), else from statfs, else the device
/// number. An all-zero UUID (images made without one) is no UUID.
fn derive_fsid(fd: BorrowedFd, dev: u64) -> StoreResult<(u64, FsidSource)> {
    let uuid = sys::fs_uuid(fd).ok().or_else(|| uuid_from_udev(dev)).filter(|u| *u != [0; 16]);
    if let Some(uuid) = uuid {
        let hi = u64::from_be_bytes(uuid[..8].try_into().expect("8 bytes"));
        let lo = u64::from_be_bytes(uuid[8..].try_into().expect("8 bytes"));
        return Ok((hi ^ lo, FsidSource::FsUuid));
    }
    match sys::statfs_fsid(fd)? {
        0 => Ok((dev, FsidSource::Device)),
        fsid => Ok((fsid, FsidSource::Statfs)),
    }
}

/// Finds the UUID whose /dev/disk/by-uuid link points at device `dev`.
fn uuid_from_udev(dev: u64) -> Option<[u8; 16]> {
    for entry in std::fs::read_dir("/dev/disk/by-uuid").ok()?.flatten() {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::metadata(entry.path()) else { continue };
        if meta.rdev() == dev {
            return parse_uuid(entry.file_name().as_bytes());
        }
    }
    None
}

fn parse_uuid(s: &[u8]) -> Option<[u8; 16]> {
    let hex: Vec<u8> = s.iter().copied().filter(|c| *c != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        out[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

/// Whether `st` (with `mount_id`) is the root directory of a mount that
/// shows its whole file system (mountinfo's root field is "/").
fn is_file_system_root(mount_id: i32, st: &libc::stat) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    for line in info.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() < 5 || fields[0].parse::<i32>().ok() != Some(mount_id) {
            continue;
        }
        if fields[3] != "/" {
            return false;
        }
        let mount_point = unescape_mountinfo(fields[4]);
        return std::fs::symlink_metadata(Path::new(std::ffi::OsStr::from_bytes(&mount_point)))
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                m.dev() == st.st_dev && m.ino() == st.st_ino
            })
            .unwrap_or(false);
    }
    false
}

/// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape_mountinfo(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo(r"/mnt/with\040space"), b"/mnt/with space");
        assert_eq!(unescape_mountinfo(r"/plain"), b"/plain");
        assert_eq!(unescape_mountinfo(r"/trailing\04"), br"/trailing\04");
    }

    #[test]
    fn a_directory_lies_within_by_path_symlink_and_not_yet_made() {
        let base = std::env::temp_dir().join(format!("keel-lies-within-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("export/sub")).unwrap();
        std::fs::create_dir_all(base.join("state")).unwrap();
        std::os::unix::fs::symlink(base.join("export"), base.join("link")).unwrap();
        let within = |root: &str, path: &str| lies_within(&base.join(root), &base.join(path)).unwrap();
        assert!(within("export", "export"));
        assert!(within("export", "export/sub"));
        assert!(within("export", "export/not/made/yet"));
        assert!(within("link", "export/sub"), "the export named through a symlink");
        assert!(within("export", "link/.keel"), "the state named through a symlink");
        assert!(!within("export", "state"));
        assert!(!within("export", "exported"), "a prefix of the name is not a parent");
        assert!(!within("export/sub", "export"));
        assert!(!within("state/not-made", "state"), "a directory not made holds nothing");
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// systemd's `StateDirectory=`, in a unit with a mount namespace, is
    /// such a bind mount of the state directory onto itself: the kernel
    /// opens no handle of the export through it.
    #[test]
    fn a_directory_beside_a_bind_mounted_one_is_not_within_it() {
        let base = std::env::temp_dir().join(format!("keel-lies-within-bind-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("state/sub")).unwrap();
        std::fs::create_dir_all(base.join("export")).unwrap();
        let state = base.join("state");
        let mount = |args: &[&std::ffi::OsStr]| {
            let status = std::process::Command::new(args[0]).args(&args[1..]).status().unwrap();
            assert!(status.success(), "{args:?} failed (the test needs root)");
        };
        mount(&["mount".as_ref(), "--bind".as_ref(), state.as_os_str(), state.as_os_str()]);
        let within = |root: &str, path: &str| lies_within(&base.join(root), &base.join(path));
        let (beside, around, inside) =
            (within("state", "export"), within("export", "state"), within("state", "state/sub"));
        mount(&["umount".as_ref(), state.as_os_str()]);
        std::fs::remove_dir_all(&base).unwrap();
        assert!(!beside.unwrap(), "the export beside the bind-mounted state");
        assert!(!around.unwrap(), "the state beside the export");
        assert!(inside.unwrap(), "a directory under the bind mount");
    }

    #[test]
    fn uuids_parse() {
        assert_eq!(
            parse_uuid(b"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").unwrap(),
            [0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a, 0x69, 0x78, 0x87, 0x96, 0xa5, 0xb4, 0xc3, 0xd2, 0xe1, 0xf0]
        );
        assert!(parse_uuid(b"1234-ABCD").is_none());
    }

    fn errno(r: StoreResult<()>) -> Option<i32> {
        match r {
            Ok(()) => None,
            Err(StoreError::Os(e)) => e.raw_os_error(),
            Err(e) => panic!("not an OS error: {e}"),
        }
    }

    /// Two calls fail together on a lost path; the first check consumes
    /// the write-back error, the second's probe finds nothing wrong.
    #[test]
    fn a_storage_failure_seen_by_one_check_stands_for_the_next() {
        let health = StorageHealth::default();
        assert_eq!(errno(health.check(|| Ok(()))), None, "healthy storage");
        assert_eq!(errno(health.check(|| Err(std::io::Error::from_raw_os_error(libc::EIO)))), Some(libc::EIO));
        assert_eq!(errno(health.check(|| Ok(()))), Some(libc::EIO), "the failure stands");
        let other = StorageHealth::default();
        other.failed(&std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(errno(other.check(|| Ok(()))), Some(libc::ENOSPC), "a failed flush outside a check counts too");
    }

    #[test]
    fn a_storage_failure_is_forgotten_after_the_hold() {
        let health = StorageHealth::default();
        let long_ago = Instant::now().checked_sub(STORAGE_FAILURE_HOLD + Duration::from_secs(1));
        let Some(long_ago) = long_ago else { return };
        *health.last_failure.lock().unwrap() = Some((long_ago, libc::EIO));
        assert_eq!(errno(health.check(|| Ok(()))), None, "probed again, and healthy");
    }

    /// Checks run one at a time: one that starts while another probes
    /// sees that probe's failure.
    #[test]
    fn concurrent_checks_see_one_probe_fail() {
        let health = std::sync::Arc::new(StorageHealth::default());
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let first = {
            let health = health.clone();
            std::thread::spawn(move || {
                errno(health.check(|| {
                    entered_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                    Err(std::io::Error::from_raw_os_error(libc::EIO))
                }))
            })
        };
        entered_rx.recv().unwrap();
        let second = {
            let health = health.clone();
            std::thread::spawn(move || errno(health.check(|| Ok(()))))
        };
        std::thread::sleep(Duration::from_millis(50));
        release_tx.send(()).unwrap();
        assert_eq!(first.join().unwrap(), Some(libc::EIO));
        assert_eq!(second.join().unwrap(), Some(libc::EIO));
    }
}

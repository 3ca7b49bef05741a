//! CREATE, MKDIR, SYMLINK, MKNOD and LINK. Objects are created as the
//! caller (so the kernel applies ownership, setgid directories and default
//! ACLs), then handled by descriptor, never by name again.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use keel_store::{
    Attrs, CreateMode, Created, FileType, NodeKind, SYMLINK_TARGET_BYTES_MAX, SetAttrs, SetTime, StoreError,
    StoreResult, Time, check_name,
};

use super::{LocalStore, apply_attrs, attrs_of, is_dot};
use crate::ident::{self, Acting};
use crate::inode::Inode;
use crate::sys;

/// What a creating verb made (or CREATE found), as this crate holds it.
type Made = Created<Arc<Inode>>;

fn check_new_name(name: &[u8]) -> StoreResult<()> {
    check_name(name)?;
    if is_dot(name) {
        return Err(StoreError::errno(libc::EEXIST));
    }
    Ok(())
}

fn require_dir(dir: &Inode) -> StoreResult<()> {
    if dir.ftype != FileType::Directory {
        return Err(StoreError::errno(libc::ENOTDIR));
    }
    Ok(())
}

/// The verifier split into the two timestamps that store it.
fn verifier_times(v: [u8; 8]) -> (Time, Time) {
    let mtime = u32::from_be_bytes(v[..4].try_into().expect("4 bytes"));
    let atime = u32::from_be_bytes(v[4..].try_into().expect("4 bytes"));
    (Time { seconds: i64::from(atime), nanos: 0 }, Time { seconds: i64::from(mtime), nanos: 0 })
}

impl LocalStore {
    pub(crate) fn create(
        &self,
        who: &Acting,
        dir: &Arc<Inode>,
        name: &[u8],
        mode: CreateMode,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Made> {
        require_dir(dir)?;
        check_new_name(name)?;
        let perm = set.mode.unwrap_or(0o644) & 0o7777;
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_NOFOLLOW;
        let fd = match sys::openat(dir.fd(), name, flags, perm) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                return self.create_existing(who, dir, name, mode, set, commit);
            }
            Err(e) => return Err(e.into()),
        };
        let inode = self.adopt_new(&dir.export, FileType::Regular, fd, true)?;
        let mut rest = SetAttrs { mode: None, ..*set };
        if rest.size == Some(0) {
            rest.size = None;
        }
        if let CreateMode::Exclusive(v) = mode {
            let (atime, mtime) = verifier_times(v);
            rest = SetAttrs { atime: SetTime::To(atime), mtime: SetTime::To(mtime), ..SetAttrs::default() };
        }
        apply_attrs(who.cred(), &inode, &rest)?;
        self.finish_create(dir, inode, commit)
    }

    /// CREATE of a name that exists: fine for UNCHECKED (an existing
    /// regular file, truncated if asked, committed like a SETATTR) and for
    /// the retransmission of an EXCLUSIVE create; otherwise EEXIST.
    fn create_existing(
        &self,
        who: &Acting,
        dir: &Arc<Inode>,
        name: &[u8],
        mode: CreateMode,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Made> {
        let (inode, attrs) = self.lookup(who, dir, name)?;
        if inode.ftype != FileType::Regular {
            return Err(StoreError::errno(libc::EEXIST));
        }
        match mode {
            CreateMode::Guarded => Err(StoreError::errno(libc::EEXIST)),
            CreateMode::Exclusive(v) => {
                let (atime, mtime) = verifier_times(v);
                // knfsd also insists the file is still empty.
                let ours = attrs.atime.seconds == atime.seconds && attrs.mtime.seconds == mtime.seconds;
                if ours && attrs.size == 0 {
                    Ok(Created { object: inode, attrs })
                } else {
                    Err(StoreError::errno(libc::EEXIST))
                }
            }
            CreateMode::Unchecked => {
                if let Some(size) = set.size {
                    apply_attrs(who.cred(), &inode, &SetAttrs { size: Some(size), ..SetAttrs::default() })?;
                    if commit {
                        self.commit_objects(&[&inode])?;
                    }
                }
                let attrs = attrs_of(&inode)?;
                Ok(Created { object: inode, attrs })
            }
        }
    }

    fn finish_create(&self, dir: &Arc<Inode>, inode: Arc<Inode>, commit: bool) -> StoreResult<Made> {
        if commit {
            self.commit_created(&inode, dir)?;
        }
        let attrs = attrs_of(&inode)?;
        Ok(Created { object: inode, attrs })
    }

    pub(crate) fn mkdir(
        &self,
        who: &Acting,
        dir: &Arc<Inode>,
        name: &[u8],
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Made> {
        require_dir(dir)?;
        check_new_name(name)?;
        sys::mkdirat(dir.fd(), name, set.mode.unwrap_or(0o755) & 0o7777)?;
        // Opened as root: the new directory may well have no read bit.
        let fd =
            ident::as_root(|| sys::openat(dir.fd(), name, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0))?;
        self.finish_special(who, dir, fd, FileType::Directory, set, commit)
    }

    pub(crate) fn symlink(
        &self,
        who: &Acting,
        dir: &Arc<Inode>,
        name: &[u8],
        target: &[u8],
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Made> {
        require_dir(dir)?;
        check_new_name(name)?;
        if target.is_empty() || target.contains(&0) {
            return Err(StoreError::errno(libc::EINVAL));
        }
        if target.len() > SYMLINK_TARGET_BYTES_MAX {
            return Err(StoreError::NameTooLong);
        }
        sys::symlinkat(target, dir.fd(), name)?;
        let fd = sys::openat(dir.fd(), name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        self.finish_special(who, dir, fd, FileType::Symlink, set, commit)
    }

    pub(crate) fn mknod(
        &self,
        who: &Acting,
        dir: &Arc<Inode>,
        name: &[u8],
        kind: NodeKind,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Made> {
        require_dir(dir)?;
        check_new_name(name)?;
        let (ftype, type_bits, dev) = match kind {
            NodeKind::Char { major, minor } => (FileType::CharDevice, libc::S_IFCHR, libc::makedev(major, minor)),
            NodeKind::Block { major, minor } => (FileType::BlockDevice, libc::S_IFBLK, libc::makedev(major, minor)),
            NodeKind::Socket => (FileType::Socket, libc::S_IFSOCK, 0),
            NodeKind::Fifo => (FileType::Fifo, libc::S_IFIFO, 0),
        };
        // Device nodes are root's business, whatever capabilities linger.
        if matches!(kind, NodeKind::Char { .. } | NodeKind::Block { .. }) && !who.cred().is_root() {
            return Err(StoreError::errno(libc::EPERM));
        }
        sys::mknodat(dir.fd(), name, type_bits | (set.mode.unwrap_or(0o644) & 0o7777), dev)?;
        let fd = sys::openat(dir.fd(), name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        self.finish_special(who, dir, fd, ftype, set, commit)
    }

    /// Adopts a new directory or special file and applies the initial
    /// attributes the creating call did not (owner, times).
    fn finish_special(
        &self,
        who: &Acting,
        dir: &Arc<Inode>,
        fd: OwnedFd,
        ftype: FileType,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Made> {
        let st = sys::fstat(fd.as_fd())?;
        if FileType::from_mode(st.st_mode) != Some(ftype) {
            // Replaced between creation and open: not ours to hand out.
            return Err(StoreError::errno(libc::EAGAIN));
        }
        let inode = self.adopt_new(&dir.export, ftype, fd, false)?;
        apply_attrs(who.cred(), &inode, &SetAttrs { mode: None, size: None, ..*set })?;
        self.finish_create(dir, inode, commit)
    }

    /// LINK: a new name in `dir` for `file`. Returns the file's attributes.
    pub(crate) fn link(
        &self,
        _who: &Acting,
        file: &Arc<Inode>,
        dir: &Arc<Inode>,
        name: &[u8],
        commit: bool,
    ) -> StoreResult<Attrs> {
        require_dir(dir)?;
        check_new_name(name)?;
        if file.export.id != dir.export.id {
            return Err(StoreError::errno(libc::EXDEV));
        }
        if file.ftype == FileType::Directory {
            return Err(StoreError::errno(libc::EISDIR));
        }
        sys::link_fd(file.fd(), dir.fd(), name)?;
        if commit {
            self.commit_namespace_op(&[dir, file])?;
        }
        attrs_of(file)
    }
}

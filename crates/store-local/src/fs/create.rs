//! CREATE, MKDIR, SYMLINK, MKNOD and LINK. Objects are created as the
//! caller (so the kernel applies ownership, setgid directories and default
//! ACLs), then handled by descriptor, never by name again.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use keel_store::rules::{self, CreateExisting};
use keel_store::{Attrs, CreateMode, Created, FileType, NodeKind, SetAttrs, StoreError, StoreResult};

use super::{LocalStore, apply_attrs, attrs_of};
use crate::ident::{self, Acting};
use crate::inode::Inode;
use crate::sys;

/// What a creating verb made (or CREATE found), as this crate holds it.
type Made = Created<Arc<Inode>>;

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
        rules::check_new_entry(dir.ftype, name)?;
        let perm = rules::initial_mode(set, rules::CREATE_MODE_DEFAULT);
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_NOFOLLOW;
        let fd = match sys::openat(dir.fd(), name, flags, perm) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                return self.create_existing(who, dir, name, mode, set, commit);
            }
            Err(e) => return Err(e.into()),
        };
        let inode = self.adopt_new(&dir.export, FileType::Regular, fd, true)?;
        apply_attrs(who.cred(), &inode, &rules::attrs_after_create(mode, set))?;
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
        match rules::create_existing(mode, set, &attrs)? {
            CreateExisting::Use => Ok(Created { object: inode, attrs }),
            CreateExisting::Resize(size) => {
                apply_attrs(who.cred(), &inode, &SetAttrs { size: Some(size), ..SetAttrs::default() })?;
                if commit {
                    self.commit_objects(&[&inode])?;
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
        rules::check_new_entry(dir.ftype, name)?;
        sys::mkdirat(dir.fd(), name, rules::initial_mode(set, rules::MKDIR_MODE_DEFAULT))?;
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
        rules::check_new_entry(dir.ftype, name)?;
        rules::check_symlink_target(target)?;
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
        rules::check_new_entry(dir.ftype, name)?;
        let (ftype, (major, minor)) = rules::mknod_kind(who.cred(), kind)?;
        let type_bits = match ftype {
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::Socket => libc::S_IFSOCK,
            _ => libc::S_IFIFO,
        };
        let perm = rules::initial_mode(set, rules::MKNOD_MODE_DEFAULT);
        sys::mknodat(dir.fd(), name, type_bits | perm, libc::makedev(major, minor))?;
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
        apply_attrs(who.cred(), &inode, &rules::attrs_after_make(set))?;
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
        rules::check_link(file.ftype, file.export.id, dir.ftype, dir.export.id, name)?;
        sys::link_fd(file.fd(), dir.fd(), name)?;
        crate::lease::own_change_made();
        if commit {
            self.commit_namespace_op(&[dir, file])?;
        }
        attrs_of(file)
    }
}

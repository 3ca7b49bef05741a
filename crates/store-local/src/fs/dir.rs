//! LOOKUP, READDIR and the per-entry half of READDIRPLUS.

use std::os::fd::AsFd;
use std::sync::Arc;

use keel_store::{Attrs, DirEntry, FileType, StoreError, StoreResult, check_name, rules};

use super::{LocalStore, from_stat, permit};
use crate::handle::{self, FileHandle};
use crate::ident::{self, Acting};
use crate::inode::Inode;
use crate::sys;

/// getdents64 buffer per READDIR call.
const DIRENT_BUFFER_BYTES: usize = 64 * 1024;

impl LocalStore {
    /// The object `name` in `dir`, with its attributes. "." and ".." are
    /// understood, and ".." of the export root is the root itself.
    /// Permission is checked by the kernel as the acting caller.
    pub(crate) fn lookup(&self, _who: &Acting, dir: &Arc<Inode>, name: &[u8]) -> StoreResult<(Arc<Inode>, Attrs)> {
        rules::require_dir(dir.ftype)?;
        check_name(name)?;
        if name == b"." || (name == b".." && dir.is_export_root()) {
            // Still needs search permission, like any lookup.
            sys::stat_at(dir.fd(), b".")?;
            return Ok((dir.clone(), super::attrs_of(dir)?));
        }
        if name == b".." && dir.export.subtree {
            // `dir` may have been moved out of the export since its handle
            // was issued (by a local process, or through a parent export):
            // its parent must be proven inside before it is handed out.
            let parent = ident::as_root(|| sys::openat(dir.fd(), b"..", libc::O_PATH | libc::O_DIRECTORY, 0))?;
            super::check_inside(&dir.export, parent.as_fd()).map_err(|_| StoreError::errno(libc::EACCES))?;
        }
        let st = sys::stat_at(dir.fd(), name)?;
        let (kernel, mount_id) = sys::name_to_handle(dir.fd(), name)?;
        if mount_id != dir.export.mount_id {
            return Err(StoreError::CrossesMount);
        }
        let inode = self.adopt(&dir.export, &st, kernel)?;
        let attrs = from_stat(&st, dir.export.fsid).ok_or(StoreError::NotSupported)?;
        Ok((inode, attrs))
    }

    /// Lists `dir` from `cookie` (0: the start), handing entries to `sink`
    /// until it returns false. Returns whether the end was reached.
    /// Cookies are the file system's own directory offsets, so a listing
    /// resumed with one continues exactly after that entry.
    pub(crate) fn readdir(
        &self,
        who: &Acting,
        dir: &Inode,
        cookie: u64,
        mut sink: impl FnMut(DirEntry<'_>) -> bool,
    ) -> StoreResult<bool> {
        rules::require_dir(dir.ftype)?;
        let st = sys::fstat(dir.fd())?;
        permit(who.cred(), dir, &st, libc::R_OK, false)?;
        // A descriptor of our own: the file position is per open file.
        let fd = ident::as_root(|| sys::openat(dir.fd(), b".", libc::O_RDONLY | libc::O_DIRECTORY, 0))?;
        if cookie != 0 {
            sys::lseek_set(fd.as_fd(), cookie).map_err(|_| StoreError::BadCookie)?;
        }
        let at_root = dir.is_export_root();
        let mut buf = vec![0u8; DIRENT_BUFFER_BYTES];
        loop {
            let n = match sys::getdents(fd.as_fd(), &mut buf) {
                Ok(n) => n,
                Err(e) if cookie != 0 && e.raw_os_error() == Some(libc::EINVAL) => return Err(StoreError::BadCookie),
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                return Ok(true);
            }
            for d in sys::dirents(&buf[..n]) {
                // The root's ".." must not reveal what lies above the export.
                let fileid = if at_root && d.name == b".." { st.st_ino } else { d.ino };
                if !sink(DirEntry { name: d.name, fileid, cookie: d.next_offset }) {
                    return Ok(false);
                }
            }
        }
    }

    /// Handle and attributes of one entry for READDIRPLUS, looked up as the
    /// caller. `None` when the entry cannot be given (gone, another mount,
    /// no permission): the protocol allows leaving them out. ".." of the
    /// export root is the root itself; the ".." of a directory that has
    /// been moved out of a subtree export is left out, as LOOKUP refuses it.
    pub(crate) fn entry_plus(&self, _who: &Acting, dir: &Inode, name: &[u8]) -> Option<(FileHandle, Attrs)> {
        let name: &[u8] = if name == b".." && dir.is_export_root() { b"." } else { name };
        if name == b".." && dir.export.subtree {
            let parent = ident::as_root(|| sys::openat(dir.fd(), b"..", libc::O_PATH | libc::O_DIRECTORY, 0)).ok()?;
            super::check_inside(&dir.export, parent.as_fd()).ok()?;
        }
        let st = sys::stat_at(dir.fd(), name).ok()?;
        let (kernel, mount_id) = sys::name_to_handle(dir.fd(), name).ok()?;
        if mount_id != dir.export.mount_id {
            return None;
        }
        let ftype = FileType::from_mode(st.st_mode)?;
        let fh = handle::encode(&self.key, dir.export.id, dir.export.fsid, ftype, &kernel).ok()?;
        Some((fh, from_stat(&st, dir.export.fsid)?))
    }
}

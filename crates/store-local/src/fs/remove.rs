//! REMOVE, RMDIR and RENAME. A name that goes away takes its cached
//! descriptor with it, so the space of a deleted file is freed at once.

use std::sync::Arc;

use keel_store::{StoreResult, rules};

use super::LocalStore;
use crate::ident::Acting;
use crate::inode::Inode;
use crate::sys;

impl LocalStore {
    pub(crate) fn remove(&self, who: &Acting, dir: &Arc<Inode>, name: &[u8], commit: bool) -> StoreResult<()> {
        self.unlink(who, dir, name, 0, commit)
    }

    pub(crate) fn rmdir(&self, who: &Acting, dir: &Arc<Inode>, name: &[u8], commit: bool) -> StoreResult<()> {
        self.unlink(who, dir, name, libc::AT_REMOVEDIR, commit)
    }

    fn unlink(
        &self,
        _who: &Acting,
        dir: &Arc<Inode>,
        name: &[u8],
        flags: libc::c_int,
        commit: bool,
    ) -> StoreResult<()> {
        rules::check_unlink(dir.ftype, name)?;
        let victim = self.handle_of_name(dir, name);
        sys::unlinkat(dir.fd(), name, flags)?;
        crate::lease::own_change_made();
        if let Some(fh) = victim {
            self.cache.remove(&fh);
        }
        if commit {
            self.commit_objects(&[dir])?;
        }
        Ok(())
    }

    pub(crate) fn rename(
        &self,
        _who: &Acting,
        from_dir: &Arc<Inode>,
        from: &[u8],
        to_dir: &Arc<Inode>,
        to: &[u8],
        commit: bool,
    ) -> StoreResult<()> {
        // The rest (into its own subtree, over a non-empty directory, a
        // file over a directory) is the kernel's to refuse.
        rules::check_rename((from_dir.ftype, from_dir.export.id), from, (to_dir.ftype, to_dir.export.id), to)?;
        let source = self.handle_of_name(from_dir, from);
        let victim = self.handle_of_name(to_dir, to).filter(|v| Some(v) != source.as_ref());
        sys::renameat(from_dir.fd(), from, to_dir.fd(), to)?;
        crate::lease::own_change_made();
        if let Some(fh) = victim {
            self.cache.remove(&fh);
        }
        if commit {
            self.commit_namespace_op(&[from_dir, to_dir])?;
        }
        Ok(())
    }
}

//! [`LocalStore`] behind the [`Store`] trait: the verbs the handlers see.
//! Objects are open inodes from the descriptor cache; the caller is the
//! identity assumed on the worker thread.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use keel_store::{
    Attrs, CreateMode, Created, Cred, DirEntry, ExportInfo, FileType, FsStat, Limits, NodeKind, ReadOut, SeekWhat,
    SetAttrs, Space, Stability, Store, StoreError, StoreResult, Time, Verifier, WriteOut,
};

use crate::fs::LocalStore;
use crate::ident::{self, Acting};
use crate::inode::Inode;

/// An object of the local store: an inode held open (by the descriptor
/// cache too), with its export. Lock-holding descriptions are not kept
/// here (the cache closes what it evicts): see `Store::open_for_locks`.
#[derive(Debug, Clone)]
pub struct LocalObject(pub(crate) Arc<Inode>);

impl LocalObject {
    /// The inode behind the object (this crate's tests and tools).
    pub fn inode(&self) -> &Arc<Inode> {
        &self.0
    }
}

impl keel_store::Object for LocalObject {
    fn handle(&self) -> &Bytes {
        self.0.handle.as_bytes()
    }

    fn file_key(&self) -> &[u8] {
        self.0.handle.file_key()
    }

    fn export_id(&self) -> u32 {
        self.0.export.id
    }

    fn file_type(&self) -> FileType {
        self.0.ftype
    }
}

fn made(c: Created<Arc<Inode>>) -> Created<LocalObject> {
    Created { object: LocalObject(c.object), attrs: c.attrs }
}

impl Store for LocalStore {
    type Object = LocalObject;
    type Caller = Acting;
    type LockFile = crate::LocalLockFile;
    type ReadLease = crate::LocalReadLease;

    fn read_lease(&self, obj: &LocalObject) -> StoreResult<crate::LocalReadLease> {
        LocalStore::read_lease(self, &obj.0)
    }

    fn read_lease_replacing(&self, obj: &mut LocalObject) -> StoreResult<crate::LocalReadLease> {
        LocalStore::read_lease_replacing(self, &mut obj.0)
    }

    fn write_lease(&self, obj: &LocalObject) -> StoreResult<crate::LocalReadLease> {
        LocalStore::write_lease(self, &obj.0)
    }

    fn write_lease_replacing(&self, obj: &mut LocalObject) -> StoreResult<crate::LocalReadLease> {
        LocalStore::write_lease_replacing(self, &mut obj.0)
    }

    fn touch_leased(&self, _obj: &LocalObject, lease: &crate::LocalReadLease) -> StoreResult<()> {
        lease.touch_modified()
    }

    fn lock_file_on_lease(
        &self,
        _obj: &LocalObject,
        lease: &crate::LocalReadLease,
    ) -> StoreResult<crate::LocalLockFile> {
        LocalStore::lock_file_on_lease(self, lease)
    }

    fn open_for_locks(&self, who: &Acting, obj: &LocalObject) -> StoreResult<crate::LocalLockFile> {
        LocalStore::open_for_locks(self, who, &obj.0)
    }

    fn exports(&self) -> Vec<ExportInfo> {
        self.open_exports()
            .iter()
            .map(|e| ExportInfo { id: e.id, path: PathBuf::from(&e.path), fsid: e.fsid })
            .collect()
    }

    fn write_verifier(&self) -> Verifier {
        self.verifier()
    }

    /// Assumes the caller's identity on this thread (only what differs
    /// from the identity it has: see [`ident`]).
    fn act_as(&self, cred: &Cred) -> StoreResult<Acting> {
        ident::act_as(cred).map_err(StoreError::from)
    }

    fn resolve<T, E: From<StoreError>>(
        &self,
        fh: &Bytes,
        admit: impl FnOnce(u32) -> Result<T, E>,
    ) -> Result<(LocalObject, T), E> {
        LocalStore::resolve(self, fh, admit).map(|(inode, t)| (LocalObject(inode), t))
    }

    fn lookup_path(&self, export_id: u32, path: &[u8]) -> StoreResult<LocalObject> {
        LocalStore::lookup_path(self, export_id, path).map(LocalObject)
    }

    fn getattr(&self, obj: &LocalObject) -> StoreResult<Attrs> {
        LocalStore::getattr(self, &obj.0)
    }

    fn setattr(
        &self,
        who: &Acting,
        obj: &LocalObject,
        set: &SetAttrs,
        guard: Option<Time>,
        commit: bool,
    ) -> StoreResult<()> {
        LocalStore::setattr(self, who, &obj.0, set, guard, commit)
    }

    fn access(&self, who: &Acting, obj: &LocalObject, want: u32) -> StoreResult<u32> {
        LocalStore::access(self, who, &obj.0, want)
    }

    fn readlink(&self, who: &Acting, obj: &LocalObject) -> StoreResult<Vec<u8>> {
        LocalStore::readlink(self, who, &obj.0)
    }

    fn lookup(&self, who: &Acting, dir: &LocalObject, name: &[u8]) -> StoreResult<(LocalObject, Attrs)> {
        LocalStore::lookup(self, who, &dir.0, name).map(|(inode, attrs)| (LocalObject(inode), attrs))
    }

    /// Cookies are the file system's own directory offsets (XFS and ext4
    /// keep them valid across changes and restarts), so the verifier only
    /// has to tell this export's cookies from anyone else's: it is derived
    /// from the export's fsid.
    fn cookie_verifier(&self, dir: &LocalObject) -> [u8; 8] {
        (dir.0.export.fsid ^ 0x6b65_656c_636f_6f6b).to_be_bytes()
    }

    fn readdir(
        &self,
        who: &Acting,
        dir: &LocalObject,
        cookie: u64,
        sink: impl FnMut(DirEntry<'_>) -> bool,
    ) -> StoreResult<bool> {
        LocalStore::readdir(self, who, &dir.0, cookie, sink)
    }

    fn entry_plus(&self, who: &Acting, dir: &LocalObject, name: &[u8]) -> Option<(Bytes, Attrs)> {
        LocalStore::entry_plus(self, who, &dir.0, name).map(|(fh, attrs)| (fh.as_bytes().clone(), attrs))
    }

    fn check_io(&self, who: &Acting, obj: &LocalObject, write: bool) -> StoreResult<Attrs> {
        LocalStore::check_io(self, who, &obj.0, write)
    }

    fn read(&self, who: &Acting, obj: &LocalObject, offset: u64, count: usize) -> StoreResult<ReadOut> {
        LocalStore::read(self, who, &obj.0, offset, count)
    }

    fn write(
        &self,
        who: &Acting,
        obj: &LocalObject,
        offset: u64,
        data: &[u8],
        stability: Stability,
    ) -> StoreResult<WriteOut> {
        LocalStore::write(self, who, &obj.0, offset, data, stability)
    }

    fn seek(&self, who: &Acting, obj: &LocalObject, offset: u64, what: SeekWhat) -> StoreResult<u64> {
        LocalStore::seek(self, who, &obj.0, offset, what)
    }

    fn fallocate(
        &self,
        who: &Acting,
        obj: &LocalObject,
        space: Space,
        offset: u64,
        len: u64,
        commit: bool,
    ) -> StoreResult<()> {
        LocalStore::fallocate(self, who, &obj.0, space, offset, len, commit)
    }

    fn copy_range(
        &self,
        who: &Acting,
        src: &LocalObject,
        src_offset: u64,
        dst: &LocalObject,
        dst_offset: u64,
        len: u64,
        commit: bool,
    ) -> StoreResult<u64> {
        LocalStore::copy_range(self, who, &src.0, src_offset, &dst.0, dst_offset, len, commit)
    }

    fn commit(&self, who: &Acting, obj: &LocalObject, flush: bool) -> StoreResult<Verifier> {
        LocalStore::commit(self, who, &obj.0, flush)
    }

    fn create(
        &self,
        who: &Acting,
        dir: &LocalObject,
        name: &[u8],
        mode: CreateMode,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<LocalObject>> {
        LocalStore::create(self, who, &dir.0, name, mode, set, commit).map(made)
    }

    fn mkdir(
        &self,
        who: &Acting,
        dir: &LocalObject,
        name: &[u8],
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<LocalObject>> {
        LocalStore::mkdir(self, who, &dir.0, name, set, commit).map(made)
    }

    fn symlink(
        &self,
        who: &Acting,
        dir: &LocalObject,
        name: &[u8],
        target: &[u8],
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<LocalObject>> {
        LocalStore::symlink(self, who, &dir.0, name, target, set, commit).map(made)
    }

    fn mknod(
        &self,
        who: &Acting,
        dir: &LocalObject,
        name: &[u8],
        kind: NodeKind,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<LocalObject>> {
        LocalStore::mknod(self, who, &dir.0, name, kind, set, commit).map(made)
    }

    fn link(
        &self,
        who: &Acting,
        file: &LocalObject,
        dir: &LocalObject,
        name: &[u8],
        commit: bool,
    ) -> StoreResult<Attrs> {
        LocalStore::link(self, who, &file.0, &dir.0, name, commit)
    }

    fn remove(&self, who: &Acting, dir: &LocalObject, name: &[u8], commit: bool) -> StoreResult<()> {
        LocalStore::remove(self, who, &dir.0, name, commit)
    }

    fn rmdir(&self, who: &Acting, dir: &LocalObject, name: &[u8], commit: bool) -> StoreResult<()> {
        LocalStore::rmdir(self, who, &dir.0, name, commit)
    }

    fn rename(
        &self,
        who: &Acting,
        from_dir: &LocalObject,
        from: &[u8],
        to_dir: &LocalObject,
        to: &[u8],
        commit: bool,
    ) -> StoreResult<()> {
        LocalStore::rename(self, who, &from_dir.0, from, &to_dir.0, to, commit)
    }

    fn fsstat(&self, obj: &LocalObject) -> StoreResult<FsStat> {
        LocalStore::fsstat(self, &obj.0)
    }

    fn limits(&self, obj: &LocalObject) -> Limits {
        LocalStore::limits(self, &obj.0)
    }

    /// fstat(2) of the root (a shut-down XFS fails it) and syncfs(2),
    /// which forces the journal out to the device.
    fn check_export(&self, export_id: u32) -> StoreResult<()> {
        let exports = self.open_exports();
        let export = exports.iter().find(|e| e.id == export_id).ok_or(StoreError::Stale)?;
        export.check()
    }

    /// syncfs(2) of every export's file system; each failure is logged,
    /// the last one returned.
    fn sync_all(&self) -> StoreResult<()> {
        let mut result = Ok(());
        for export in self.open_exports().iter() {
            if let Err(e) = export.sync() {
                tracing::error!(export = export.id, error = %e, "sync of the export's file system failed");
                result = Err(e);
            }
        }
        result
    }
}

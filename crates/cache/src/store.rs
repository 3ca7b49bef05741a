//! The [`Store`] impl: calls a cache has nothing to do with pass through;
//! GETATTR, LOOKUP, READDIRPLUS and wcc data are overlaid with the sizes
//! and times of the log's files; READ and WRITE go to [`crate::read`] and
//! [`crate::writeback`]; SETATTR of a live file's size logs the cut first;
//! SEEK, ALLOCATE, DEALLOCATE and COPY, which the log has no record for,
//! go to the back end once it holds the file's dirty data, and the read
//! cache's blocks of the file they change go.

use bytes::Bytes;
use keel_store::{
    Attrs, CreateMode, Created, Cred, DirEntry, ExportInfo, FsStat, Limits, NodeKind, Object, ReadOut, SeekWhat,
    SetAttrs, SetTime, Space, Stability, Store, StoreError, StoreResult, Time, Verifier, WriteOut,
};
use std::sync::atomic::Ordering;

use crate::writeback::{Stop, until_not_raced};
use crate::{CacheStore, combine, index, log_error};

impl<S: Store> Store for CacheStore<S> {
    type Object = S::Object;
    type Caller = S::Caller;
    type LockFile = S::LockFile;
    type ReadLease = S::ReadLease;

    fn exports(&self) -> Vec<ExportInfo> {
        self.shared.inner.exports()
    }

    fn write_verifier(&self) -> Verifier {
        self.shared.verifier()
    }

    fn act_as(&self, cred: &Cred) -> StoreResult<S::Caller> {
        self.shared.inner.act_as(cred)
    }

    fn resolve<T, E: From<StoreError>>(
        &self,
        fh: &Bytes,
        admit: impl FnOnce(u32) -> Result<T, E>,
    ) -> Result<(S::Object, T), E> {
        self.shared.inner.resolve(fh, admit)
    }

    fn lookup_path(&self, export_id: u32, path: &[u8]) -> StoreResult<S::Object> {
        self.shared.inner.lookup_path(export_id, path)
    }

    fn getattr(&self, obj: &S::Object) -> StoreResult<Attrs> {
        let mut a = self.shared.inner.getattr(obj)?;
        self.shared.overlay(obj.handle(), &mut a);
        Ok(a)
    }

    fn setattr(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        set: &SetAttrs,
        guard: Option<Time>,
        commit: bool,
    ) -> StoreResult<()> {
        until_not_raced(|| self.setattr_once(who, obj, set, guard, commit))
    }

    fn access(&self, who: &S::Caller, obj: &S::Object, want: u32) -> StoreResult<u32> {
        self.shared.inner.access(who, obj, want)
    }

    fn readlink(&self, who: &S::Caller, obj: &S::Object) -> StoreResult<Vec<u8>> {
        self.shared.inner.readlink(who, obj)
    }

    fn lookup(&self, who: &S::Caller, dir: &S::Object, name: &[u8]) -> StoreResult<(S::Object, Attrs)> {
        let (o, mut a) = self.shared.inner.lookup(who, dir, name)?;
        self.shared.overlay(o.handle(), &mut a);
        Ok((o, a))
    }

    fn cookie_verifier(&self, dir: &S::Object) -> [u8; 8] {
        self.shared.inner.cookie_verifier(dir)
    }

    fn readdir(
        &self,
        who: &S::Caller,
        dir: &S::Object,
        cookie: u64,
        sink: impl FnMut(DirEntry<'_>) -> bool,
    ) -> StoreResult<bool> {
        self.shared.inner.readdir(who, dir, cookie, sink)
    }

    fn entry_plus(&self, who: &S::Caller, dir: &S::Object, name: &[u8]) -> Option<(Bytes, Attrs)> {
        let (fh, mut a) = self.shared.inner.entry_plus(who, dir, name)?;
        self.shared.overlay(&fh, &mut a);
        Some((fh, a))
    }

    fn check_io(&self, who: &S::Caller, obj: &S::Object, write: bool) -> StoreResult<Attrs> {
        let mut a = self.shared.inner.check_io(who, obj, write)?;
        self.shared.overlay(obj.handle(), &mut a);
        Ok(a)
    }

    fn read(&self, who: &S::Caller, obj: &S::Object, offset: u64, count: usize) -> StoreResult<ReadOut> {
        self.shared.read(who, obj, offset, count)
    }

    fn write(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        offset: u64,
        data: &[u8],
        stability: Stability,
    ) -> StoreResult<WriteOut> {
        self.shared.write(who, obj, offset, data, stability)
    }

    /// A file with dirty data counts as data to its live end: where its
    /// holes are is known only once the log is destaged, and the log is
    /// destaged whole, which each SEEK (and each NFSv4.2 READ_PLUS of a
    /// file being written, which seeks) would make every writer wait for.
    /// A store may report holes as data.
    fn seek(&self, who: &S::Caller, obj: &S::Object, offset: u64, what: SeekWhat) -> StoreResult<u64> {
        let Some(slot) = self.shared.index.get(obj.handle()) else {
            return self.shared.inner.seek(who, obj, offset, what);
        };
        let logged = slot.lock().size;
        // The back end's read of nothing checks the caller may read, and
        // gives the size of writes that bypassed the log.
        let on_disk = self.shared.inner.read(who, obj, 0, 0)?.attrs.size;
        keel_store::rules::seek_dense(logged.max(on_disk), offset, what)
    }

    fn fallocate(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        space: Space,
        offset: u64,
        len: u64,
        commit: bool,
    ) -> StoreResult<()> {
        self.settle(obj)?;
        let r = self.shared.inner.fallocate(who, obj, space, offset, len, commit);
        // Also after a failure: the back end may have changed some of it.
        self.shared.invalidate(obj.handle(), 0, u64::MAX);
        r
    }

    fn copy_range(
        &self,
        who: &S::Caller,
        src: &S::Object,
        src_offset: u64,
        dst: &S::Object,
        dst_offset: u64,
        len: u64,
        commit: bool,
    ) -> StoreResult<u64> {
        self.settle(src)?;
        self.settle(dst)?;
        let r = self.shared.inner.copy_range(who, src, src_offset, dst, dst_offset, len, commit);
        self.shared.invalidate(dst.handle(), 0, u64::MAX);
        r
    }

    fn commit(&self, who: &S::Caller, obj: &S::Object, flush: bool) -> StoreResult<Verifier> {
        let sh = &self.shared;
        if flush
            && let Some(slot) = sh.index.get(obj.handle())
            && let Some(log) = sh.log()
        {
            let seq = slot.lock().last_seq;
            sh.sync_log(&log, seq)?;
            sh.durable_without_two_copies(&log);
        }
        let v = sh.inner.commit(who, obj, flush)?;
        Ok(combine(v, sh.epoch.load(Ordering::Acquire)))
    }

    fn create(
        &self,
        who: &S::Caller,
        dir: &S::Object,
        name: &[u8],
        mode: CreateMode,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<S::Object>> {
        let sh = &self.shared;
        // CREATE UNCHECKED of an existing file may truncate it: a live
        // file's truncation goes through the log first.
        if let (CreateMode::Unchecked, Some(size)) = (mode, set.size)
            && sh.index.live_files() > 0
            && let Ok((existing, _)) = sh.inner.lookup(who, dir, name)
            && sh.index.get(existing.handle()).is_some()
        {
            let cut = SetAttrs { size: Some(size), ..SetAttrs::default() };
            self.setattr(who, &existing, &cut, None, commit)?;
        }
        let r = sh.inner.create(who, dir, name, mode, set, commit);
        let mut c = match r {
            Ok(c) => c,
            Err(e) => {
                // An UNCHECKED create may have truncated before it failed.
                if let (CreateMode::Unchecked, Some(_)) = (mode, set.size)
                    && let Ok((existing, _)) = sh.inner.lookup(who, dir, name)
                {
                    sh.invalidate(existing.handle(), 0, u64::MAX);
                }
                return Err(e);
            }
        };
        // An existing file's data may be cut (UNCHECKED with a size), and a
        // new file must not meet blocks of an earlier one with its handle.
        sh.invalidate(c.object.handle(), set.size.unwrap_or(0), u64::MAX);
        sh.overlay(c.object.handle(), &mut c.attrs);
        Ok(c)
    }

    fn mkdir(
        &self,
        who: &S::Caller,
        dir: &S::Object,
        name: &[u8],
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<S::Object>> {
        self.shared.inner.mkdir(who, dir, name, set, commit)
    }

    fn symlink(
        &self,
        who: &S::Caller,
        dir: &S::Object,
        name: &[u8],
        target: &[u8],
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<S::Object>> {
        self.shared.inner.symlink(who, dir, name, target, set, commit)
    }

    fn mknod(
        &self,
        who: &S::Caller,
        dir: &S::Object,
        name: &[u8],
        kind: NodeKind,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<S::Object>> {
        self.shared.inner.mknod(who, dir, name, kind, set, commit)
    }

    fn link(
        &self,
        who: &S::Caller,
        file: &S::Object,
        dir: &S::Object,
        name: &[u8],
        commit: bool,
    ) -> StoreResult<Attrs> {
        let mut a = self.shared.inner.link(who, file, dir, name, commit)?;
        self.shared.overlay(file.handle(), &mut a);
        Ok(a)
    }

    fn remove(&self, who: &S::Caller, dir: &S::Object, name: &[u8], commit: bool) -> StoreResult<()> {
        let sh = &self.shared;
        let victim = sh.read_cache().and_then(|_| sh.inner.lookup(who, dir, name).ok());
        sh.inner.remove(who, dir, name, commit)?;
        if let Some((v, _)) = victim {
            sh.invalidate(v.handle(), 0, u64::MAX);
        }
        Ok(())
    }

    fn rmdir(&self, who: &S::Caller, dir: &S::Object, name: &[u8], commit: bool) -> StoreResult<()> {
        self.shared.inner.rmdir(who, dir, name, commit)
    }

    fn rename(
        &self,
        who: &S::Caller,
        from_dir: &S::Object,
        from: &[u8],
        to_dir: &S::Object,
        to: &[u8],
        commit: bool,
    ) -> StoreResult<()> {
        let sh = &self.shared;
        // A file renamed over goes (unless another link keeps it; its
        // blocks are then read again).
        let victim = sh.read_cache().and_then(|_| sh.inner.lookup(who, to_dir, to).ok());
        sh.inner.rename(who, from_dir, from, to_dir, to, commit)?;
        if let Some((v, _)) = victim {
            sh.invalidate(v.handle(), 0, u64::MAX);
        }
        Ok(())
    }

    fn fsstat(&self, obj: &S::Object) -> StoreResult<FsStat> {
        self.shared.inner.fsstat(obj)
    }

    fn limits(&self, obj: &S::Object) -> Limits {
        self.shared.inner.limits(obj)
    }

    fn sync_all(&self) -> StoreResult<()> {
        if let Some(log) = self.shared.log() {
            log.sync_through(u64::MAX - 1).map_err(log_error)?;
        }
        self.shared.inner.sync_all()
    }

    fn check_export(&self, export_id: u32) -> StoreResult<()> {
        self.shared.inner.check_export(export_id)
    }

    fn open_for_locks(&self, who: &S::Caller, obj: &S::Object) -> StoreResult<S::LockFile> {
        self.shared.inner.open_for_locks(who, obj)
    }

    fn lock_file_on_lease(&self, obj: &S::Object, lease: &S::ReadLease) -> StoreResult<S::LockFile> {
        self.shared.inner.lock_file_on_lease(obj, lease)
    }

    /// The back end's, for an export the tier does not cache. None in
    /// front of a cached one (or of a file with data in the log): the tier
    /// writes the back end's files whenever it destages, which would break
    /// the lease, and what it caches would not see a local process's
    /// write anyway.
    fn read_lease(&self, obj: &S::Object) -> StoreResult<S::ReadLease> {
        if self.shared.mode(obj.export_id()) != crate::CacheMode::Off || self.shared.index.get(obj.handle()).is_some() {
            return Err(crate::errno(libc::EINVAL));
        }
        self.shared.inner.read_lease(obj)
    }

    /// The back end's, as [`read_lease`](Self::read_lease)'s.
    fn read_lease_replacing(&self, obj: &mut S::Object) -> StoreResult<S::ReadLease> {
        if self.shared.mode(obj.export_id()) != crate::CacheMode::Off || self.shared.index.get(obj.handle()).is_some() {
            return Err(crate::errno(libc::EINVAL));
        }
        self.shared.inner.read_lease_replacing(obj)
    }

    /// The back end's, as [`read_lease`](Self::read_lease)'s.
    fn write_lease(&self, obj: &S::Object) -> StoreResult<S::ReadLease> {
        if self.shared.mode(obj.export_id()) != crate::CacheMode::Off || self.shared.index.get(obj.handle()).is_some() {
            return Err(crate::errno(libc::EINVAL));
        }
        self.shared.inner.write_lease(obj)
    }

    /// The back end's, as [`write_lease`](Self::write_lease)'s.
    fn write_lease_replacing(&self, obj: &mut S::Object) -> StoreResult<S::ReadLease> {
        if self.shared.mode(obj.export_id()) != crate::CacheMode::Off || self.shared.index.get(obj.handle()).is_some() {
            return Err(crate::errno(libc::EINVAL));
        }
        self.shared.inner.write_lease_replacing(obj)
    }

    /// The back end's: a write-leased file is not cached.
    fn touch_leased(&self, obj: &S::Object, lease: &S::ReadLease) -> StoreResult<()> {
        self.shared.inner.touch_leased(obj, lease)
    }
}

impl<S: Store> CacheStore<S> {
    /// Puts `obj`'s dirty data on the back end, before a verb the log
    /// keeps no record of reads or changes the back end's copy of the
    /// file: a destage after it would write older data over what it did,
    /// and the back end alone would miss acknowledged bytes. The log is
    /// emptied whole (it has no per-file destage); a file without dirty
    /// data costs nothing.
    fn settle(&self, obj: &S::Object) -> StoreResult<()> {
        if self.shared.index.get(obj.handle()).is_none() {
            return Ok(());
        }
        self.shared.flush("ALLOCATE, DEALLOCATE or COPY of a file with dirty data", |_| {}).map_err(|e| {
            tracing::error!("cache: cannot put a file's dirty data on the back end before passing a verb on: {e}");
            crate::errno(libc::EIO)
        })
    }

    /// SETATTR; a live file's size goes through the log first.
    fn setattr_once(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        set: &SetAttrs,
        guard: Option<Time>,
        commit: bool,
    ) -> Result<(), Stop> {
        let sh = &self.shared;
        let Some(slot) = sh.index.get(obj.handle()) else {
            let r = sh.inner.setattr(who, obj, set, guard, commit);
            if let Some(size) = set.size {
                sh.invalidate(obj.handle(), size, u64::MAX);
            }
            return Ok(r?);
        };
        // The client's guard is a ctime it saw here, overlaid.
        if let Some(g) = guard {
            let mut a = sh.inner.getattr(obj)?;
            slot.lock().overlay(&mut a);
            if a.ctime != g {
                return Err(StoreError::NotSync.into());
            }
        }
        let _io = slot.io();
        if let Some(size) = set.size {
            let r = sh.truncate_live(who, obj, &slot, set, size, commit);
            sh.invalidate(obj.handle(), size, u64::MAX);
            return r;
        }
        sh.inner.setattr(who, obj, set, None, commit)?;
        let a = sh.inner.getattr(obj)?;
        let mut st = slot.lock();
        if set.mtime != SetTime::Keep {
            st.mtime = a.mtime;
        }
        if index::later(a.ctime, st.ctime) {
            st.ctime = a.ctime;
        }
        Ok(())
    }
}

//! Open objects, cached by handle so that a request on a known handle
//! costs no open: knfsd's file cache, in user space.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;

use crate::export::Export;
use crate::handle::FileHandle;
use crate::ident;
use crate::locks::LentSlot;
use crate::sys::{self, KernelHandle};
use keel_store::FileType;
use keel_store::StoreResult;

/// An object of an export, held open.
#[derive(Debug)]
pub struct Inode {
    pub export: Arc<Export>,
    pub handle: FileHandle,
    pub ftype: FileType,
    kernel: KernelHandle,
    /// Directories: O_RDONLY|O_DIRECTORY. Regular files: O_RDONLY, or
    /// O_RDWR when the file was created here (until a read lease makes
    /// the store let go of the inode: `LocalStore::read_lease`). Others:
    /// O_PATH.
    fd: OwnedFd,
    fd_writable: bool,
    /// O_RDWR descriptor of a regular file, opened on its first write so
    /// that reading a file never takes write access (which would make a
    /// local exec of it fail with ETXTBSY).
    writer: OnceLock<OwnedFd>,
    /// O_RDWR descriptors for synchronous writes, each lent to one write at
    /// a time. The kernel reports a write-back error once per open file
    /// description: two synchronous writes through one description can
    /// both fail to reach the disk while only the first is told, and the
    /// second acknowledges data that is not there. (knfsd samples the
    /// description's error sequence before each write; user space cannot.)
    sync_writers: Mutex<Vec<OwnedFd>>,
    /// A write lease is held on [`Inode::fd`] (`lease.rs`): synchronous
    /// writes go through it too (another description would break the
    /// lease), one at a time (`leased_sync_turn`), each reporting the
    /// write-back errors since the last.
    write_leased: AtomicBool,
    leased_sync_turn: Mutex<()>,
    /// Lock-holding descriptions opened through this inode and open now
    /// (`LocalLockFile`): each stands in the way of a read lease.
    lock_files: Arc<AtomicUsize>,
    /// [`Inode::fd`] as lent for lock owners' locks (a write lease's
    /// description: `LocalReadLease::lend_for_locks`), by this lease or an
    /// earlier one, while any of them lives.
    fd_lent_for_locks: LentSlot,
}

/// Idle synchronous-write descriptions kept per inode (the server's
/// descriptor budget counts it); concurrent stable writes to one file open
/// more and close them after, at most one per worker thread.
const SYNC_WRITERS_KEPT: usize = 1;

impl Inode {
    pub(crate) fn new(
        export: Arc<Export>,
        handle: FileHandle,
        ftype: FileType,
        kernel: KernelHandle,
        fd: OwnedFd,
        fd_writable: bool,
    ) -> Self {
        Inode {
            export,
            handle,
            ftype,
            kernel,
            fd,
            fd_writable,
            writer: OnceLock::new(),
            sync_writers: Mutex::default(),
            write_leased: AtomicBool::new(false),
            leased_sync_turn: Mutex::default(),
            lock_files: Arc::default(),
            fd_lent_for_locks: LentSlot::default(),
        }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether [`Inode::fd`] is open for writing (the store writes through
    /// it, opening no other description).
    pub(crate) fn fd_writable(&self) -> bool {
        self.fd_writable
    }

    /// A descriptor open for writing, opened (as root: permission is the
    /// caller's business) on first use.
    pub(crate) fn writer(&self) -> StoreResult<BorrowedFd<'_>> {
        if self.fd_writable {
            return Ok(self.fd.as_fd());
        }
        if let Some(w) = self.writer.get() {
            return Ok(w.as_fd());
        }
        let fd = self.open_for_writing()?;
        // A concurrent first write may have won; either descriptor will do.
        let _ = self.writer.set(fd);
        Ok(self.writer.get().expect("set above").as_fd())
    }

    /// A description open for writing that no other call uses until the
    /// returned lease is dropped: for a write that must report every
    /// write-back error of its own data.
    pub(crate) fn sync_writer(&self) -> StoreResult<SyncWriter<'_>> {
        if self.write_leased.load(Ordering::Acquire) {
            let turn = self.leased_sync_turn.lock().unwrap_or_else(|p| p.into_inner());
            return Ok(SyncWriter { inode: self, fd: None, _turn: Some(turn) });
        }
        let idle = self.sync_writers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let fd = match idle {
            Some(fd) => fd,
            None => self.open_for_writing()?,
        };
        Ok(SyncWriter { inode: self, fd: Some(fd), _turn: None })
    }

    /// Closes the synchronous-write descriptions kept idle (a write lease
    /// can be had only once no other description is open).
    pub(crate) fn close_idle_sync_writers(&self) {
        self.sync_writers.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// A write lease is held on [`Inode::fd`] (`true`) or no longer.
    pub(crate) fn set_write_leased(&self, leased: bool) {
        self.write_leased.store(leased, Ordering::Release);
    }

    pub(crate) fn is_write_leased(&self) -> bool {
        self.write_leased.load(Ordering::Acquire)
    }

    /// Whether the store holds a description of the object open for
    /// writing that every writer shares ([`Inode::fd`] of a file created
    /// here, or the writer opened on a first write): one that stays open
    /// as long as the inode does.
    pub(crate) fn has_shared_writer(&self) -> bool {
        self.fd_writable || self.writer.get().is_some()
    }

    /// Whether synchronous-write descriptions are kept idle.
    pub(crate) fn has_idle_sync_writers(&self) -> bool {
        !self.sync_writers.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// The counter of lock-holding descriptions opened through this inode.
    pub(crate) fn lock_files(&self) -> &Arc<AtomicUsize> {
        &self.lock_files
    }

    /// Where [`Inode::fd`] as lent for locks is found.
    pub(crate) fn fd_lent_for_locks(&self) -> &LentSlot {
        &self.fd_lent_for_locks
    }

    /// A new read-write description of the object (as root: permission is
    /// the caller's business). It does not wait on a read lease on the file
    /// (see `lease.rs`): EAGAIN while one stands, which it breaks.
    pub(crate) fn open_for_writing(&self) -> std::io::Result<OwnedFd> {
        let fd = self.open_description(libc::O_RDWR | libc::O_NONBLOCK)?;
        sys::clear_nonblock(fd.as_fd())?;
        Ok(fd)
    }

    /// A new inode of the same object whose own description is open for
    /// writing (as [`Inode::open_for_writing`]), nothing else of this one's
    /// carried over.
    pub(crate) fn reopened_for_writing(&self) -> std::io::Result<Inode> {
        let fd = self.open_for_writing()?;
        Ok(Inode::new(self.export.clone(), self.handle.clone(), self.ftype, self.kernel.clone(), fd, true))
    }

    /// A new open file description of the object (as root: permission is
    /// the caller's business), for byte-range locks.
    pub(crate) fn open_description(&self, flags: libc::c_int) -> std::io::Result<OwnedFd> {
        ident::as_root(|| sys::open_by_handle(self.export.root_fd(), &self.kernel, flags))
    }

    /// The descriptor to flush: the writer if there is one.
    pub(crate) fn sync_fd(&self) -> BorrowedFd<'_> {
        self.writer.get().map(|w| w.as_fd()).unwrap_or(self.fd.as_fd())
    }

    pub fn is_export_root(&self) -> bool {
        self.handle == self.export.root_handle
    }
}

/// A synchronous-write description on lease from its inode.
pub(crate) struct SyncWriter<'a> {
    inode: &'a Inode,
    /// None: the write-leased inode's own description, whose turn this
    /// holds.
    fd: Option<OwnedFd>,
    _turn: Option<MutexGuard<'a, ()>>,
}

impl SyncWriter<'_> {
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_ref().map_or(self.inode.fd.as_fd(), |fd| fd.as_fd())
    }
}

impl Drop for SyncWriter<'_> {
    fn drop(&mut self) {
        let mut idle = self.inode.sync_writers.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < SYNC_WRITERS_KEPT {
            idle.extend(self.fd.take());
        }
    }
}

/// Inodes by wire handle, bounded; least recently used go first.
pub(crate) struct InodeCache {
    cache: quick_cache::sync::Cache<Bytes, Arc<Inode>>,
}

impl InodeCache {
    pub fn new(entries_max: usize) -> Self {
        InodeCache { cache: quick_cache::sync::Cache::new(entries_max.max(16)) }
    }

    pub fn get(&self, handle: &Bytes) -> Option<Arc<Inode>> {
        self.cache.get(handle)
    }

    pub fn insert(&self, inode: Arc<Inode>) {
        self.cache.insert(inode.handle.as_bytes().clone(), inode);
    }

    pub fn remove(&self, handle: &FileHandle) {
        self.cache.remove(handle.as_bytes());
    }

    /// Removes `inode`, if it is the one cached under its handle.
    pub fn remove_this(&self, inode: &Arc<Inode>) {
        self.cache.remove_if(inode.handle.as_bytes(), |cached| Arc::ptr_eq(cached, inode));
    }

    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Keeps only the inodes for which `keep` holds.
    pub fn retain(&self, keep: impl Fn(&Inode) -> bool) {
        self.cache.retain(|_, inode| keep(inode));
    }
}

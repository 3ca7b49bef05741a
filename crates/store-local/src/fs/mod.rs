//! The file-system verbs, version-independent (knfsd's `vfs.c`). Every verb
//! that touches the file system on a caller's behalf takes the call's
//! [`Acting`] identity, so the kernel checks permissions as that caller.
//!
//! Every fsync goes through [`LocalStore::sync_object`], which changes the write
//! verifier when it fails: data acknowledged as unstable may be gone. Calls
//! reach it through `commit_objects` (files' syncs shared by concurrent
//! calls in a group commit, directories' made by each call),
//! `commit_created` and `commit_namespace_op` (one sync per namespace
//! operation where the file system commits it whole).
//!
//! **Architecture invariants:** names passed to `*at()` calls are single
//! components (checked here, whatever the protocol layer did); symlinks are
//! never followed; a handle resolves only to an object of its own export.

mod create;
mod dir;
mod io;
mod remove;

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, RwLock, Weak};

use bytes::Bytes;

use keel_store::{
    Attrs, Cred, FileType, FsStat, Limits, NAME_BYTES_MAX, SetAttrs, SetTime, StoreError, StoreResult, Time, rules,
};

use crate::export::Export;
use crate::faults::{FaultInjector, FaultPoint};
use crate::group_commit::GroupCommit;
use crate::handle::{self, FileHandle, HandleKey};
use crate::ident::{self, Acting};
use crate::inode::{Inode, InodeCache};
use crate::sys::{self, KernelHandle};
use crate::verifier::WriteVerifier;

pub struct LocalStore {
    /// Swapped whole by [`LocalStore::set_exports`] (an export reload); a
    /// call works on the set it found when it resolved its handle.
    exports: RwLock<Arc<[Arc<Export>]>>,
    key: HandleKey,
    cache: InodeCache,
    verifier: WriteVerifier,
    faults: FaultInjector,
    commits: GroupCommit<FileHandle, Arc<Inode>>,
    /// Lock-holding open file descriptions open now (`LocalLockFile`).
    lock_files_open: Arc<std::sync::atomic::AtomicUsize>,
    /// Pipes for spliced READs, once [`LocalStore::splice_reads`] made
    /// them; without them every READ copies.
    pipes: Option<Arc<keel_store::pipe::PipePool>>,
    /// What each of them holds at least.
    pipe_bytes: usize,
    /// Objects whose description holds a write lease (`lease.rs`), by
    /// handle: an object that left the cache is found here again rather
    /// than opened anew, which would break the lease (and wait on it).
    write_leased: Mutex<WriteLeased>,
}

/// [`LocalStore`]'s objects of write leases, by handle. Entries whose
/// object is gone are dropped once the table has doubled since it was
/// last pruned: each grant does not walk it (a server may hold thousands).
#[derive(Default)]
struct WriteLeased {
    by_handle: HashMap<Bytes, Weak<Inode>>,
    pruned_len: usize,
}

impl WriteLeased {
    fn insert(&mut self, handle: Bytes, inode: Weak<Inode>) {
        if self.by_handle.len() >= (2 * self.pruned_len).max(WRITE_LEASED_PRUNED_FROM) {
            self.by_handle.retain(|_, i| i.strong_count() > 0);
            self.pruned_len = self.by_handle.len();
        }
        self.by_handle.insert(handle, inode);
    }
}

/// The write-leased table is not pruned before it holds this many entries.
const WRITE_LEASED_PRUNED_FROM: usize = 64;

impl LocalStore {
    /// A storage layer over `exports`, with a fresh write verifier.
    pub fn new(exports: Vec<Export>, key: HandleKey, cached_inodes_max: usize) -> StoreResult<Self> {
        Ok(LocalStore {
            exports: RwLock::new(exports.into_iter().map(Arc::new).collect()),
            key,
            cache: InodeCache::new(cached_inodes_max),
            verifier: WriteVerifier::new()?,
            faults: FaultInjector::default(),
            commits: GroupCommit::new(),
            lock_files_open: Arc::default(),
            pipes: None,
            pipe_bytes: 0,
            write_leased: Mutex::default(),
        })
    }

    /// READs of at least [`io::SPLICE_READ_BYTES_MIN`] bytes will be
    /// spliced from the page cache into a pipe of a pool of `pipes_max`,
    /// each holding `read_bytes_max` bytes (made now, with the server's
    /// privileges), rather than copied. An error if not one pipe can be
    /// made that large: the store copies as before.
    pub fn splice_reads(&mut self, pipes_max: usize, read_bytes_max: usize) -> std::io::Result<()> {
        let pool = keel_store::pipe::PipePool::new(pipes_max, Box::new(move || sys::pipe_sized(read_bytes_max)));
        if let Err(e) = pool.fill()
            && pool.counts().made == 0
        {
            return Err(e);
        }
        self.pipes = Some(pool);
        self.pipe_bytes = read_bytes_max;
        Ok(())
    }

    /// The READ pipes' counters, if READs are spliced.
    pub fn pipe_counts(&self) -> Option<keel_store::pipe::PipePoolCounts> {
        self.pipes.as_ref().map(|p| p.counts())
    }

    /// The write verifier now. It changes whenever data acknowledged as
    /// unstable may have been lost (see [`WriteVerifier`]).
    pub(crate) fn verifier(&self) -> [u8; 8] {
        self.verifier.get()
    }

    /// Lock-holding open file descriptions open now.
    pub fn lock_files_open(&self) -> usize {
        self.lock_files_open.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A new lock-holding description of `inode` for `who`, who must be
    /// able to read it or own it (knfsd's rule for NLM). Read-write when
    /// the file system allows, so exclusive locks can be taken.
    pub(crate) fn open_for_locks(&self, who: &Acting, inode: &Inode) -> StoreResult<crate::LocalLockFile> {
        rules::check_lock_file(inode.ftype)?;
        let owner = sys::fstat(inode.fd()).is_ok_and(|st| rules::owner_overrides(who.cred(), st.st_uid));
        if !owner {
            sys::access(inode.fd(), libc::R_OK)?;
        }
        // Not blocking: another's write lease would make the open wait.
        let read_only = || -> std::io::Result<OwnedFd> {
            let fd = inode.open_description(libc::O_RDONLY | libc::O_NONBLOCK)?;
            sys::clear_nonblock(fd.as_fd())?;
            Ok(fd)
        };
        let (fd, writable) = match inode.open_for_writing() {
            Ok(fd) => (fd, true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EROFS | libc::ETXTBSY | libc::EACCES | libc::EPERM)) => {
                (read_only()?, false)
            }
            Err(e) => return Err(e.into()),
        };
        Ok(crate::LocalLockFile::new(fd, writable, [self.lock_files_open.clone(), inode.lock_files().clone()]))
    }

    /// Faults to inject into this storage layer's calls (tests).
    pub fn faults(&self) -> &FaultInjector {
        &self.faults
    }

    /// The exports served now, open.
    pub fn open_exports(&self) -> Arc<[Arc<Export>]> {
        self.exports.read().expect("exports lock").clone()
    }

    pub fn export(&self, id: u32) -> Option<Arc<Export>> {
        self.exports.read().expect("exports lock").iter().find(|e| e.id == id).cloned()
    }

    /// Serves `exports` from now on (an export reload); those kept from
    /// the current set are passed as the same `Arc`s ([`open_exports`]),
    /// and their cached objects stay. An export not passed is retired: its
    /// handles are stale from the next call on (calls in flight finish),
    /// and its open objects leave the cache, so that its file system is
    /// not kept busy.
    ///
    /// [`open_exports`]: LocalStore::open_exports
    pub fn set_exports(&self, exports: Vec<Arc<Export>>) {
        let exports: Arc<[Arc<Export>]> = exports.into();
        let old = std::mem::replace(&mut *self.exports.write().expect("exports lock"), exports.clone());
        for gone in old.iter().filter(|o| !exports.iter().any(|e| Arc::ptr_eq(e, o))) {
            gone.retire();
        }
        self.cache.retain(|inode| !inode.export.is_retired());
    }

    pub fn cached_inodes(&self) -> usize {
        self.cache.len()
    }

    /// Lets `obj` leave the cache of open objects, as the cache does when
    /// it is full (tests).
    pub fn uncache(&self, obj: &crate::LocalObject) {
        self.cache.remove(&obj.0.handle);
    }

    /// A write lease on `inode` (see `lease.rs`), which is found again by
    /// its handle while the lease holds it.
    pub(crate) fn write_lease(&self, inode: &Arc<Inode>) -> StoreResult<crate::LocalReadLease> {
        let lease = crate::LocalReadLease::take_write(inode)?;
        let mut leased = self.write_leased.lock().unwrap_or_else(|e| e.into_inner());
        leased.insert(inode.handle.as_bytes().clone(), Arc::downgrade(inode));
        Ok(lease)
    }

    /// [`LocalStore::write_lease`], for a caller whose reference `inode`
    /// is the only one it holds (a write delegation reclaimed after a
    /// restart, on a file the store has not written since it was cached):
    /// an inode whose own description is read-only, with no other of its
    /// own open (a writer, a lock description: each would stand in the way
    /// of the lease anyway), is replaced, in the cache and in the caller's
    /// hands, by one opened for writing, and the old one closes with the
    /// caller's reference unless another call holds it (the lease is then
    /// refused, EAGAIN, as before).
    pub(crate) fn write_lease_replacing(&self, inode: &mut Arc<Inode>) -> StoreResult<crate::LocalReadLease> {
        let alone = inode.lock_files().load(std::sync::atomic::Ordering::Relaxed) == 0
            && !inode.has_shared_writer()
            && !inode.has_idle_sync_writers();
        if inode.ftype == FileType::Regular && alone {
            let fresh = Arc::new(inode.reopened_for_writing()?);
            self.cache.remove_this(inode);
            self.cache.insert(fresh.clone());
            *inode = fresh;
        }
        self.write_lease(inode)
    }

    /// A lock description on `lease`'s own description (see
    /// `Store::lock_file_on_lease`).
    pub(crate) fn lock_file_on_lease(&self, lease: &crate::LocalReadLease) -> StoreResult<crate::LocalLockFile> {
        lease.lend_for_locks(&self.lock_files_open)
    }

    /// A read lease on `inode` (see `lease.rs`). A file the store created
    /// or wrote keeps a description open for writing in its cached inode
    /// (see `Inode`), which stands in the way (EAGAIN): once no lock
    /// description of the inode is open and no write lease is on it (its
    /// description must stay, and findable: `write_leased`), the store lets
    /// go of its own writable descriptions, as knfsd closes the files its
    /// cache holds when a lease is set on their inode. Idle synchronous
    /// writers are closed at once, and if they alone stood in the way the
    /// lease is tried again. The shared writer cannot be closed under the
    /// calls that hold the inode (the caller's among them): the inode is
    /// synced through it, as a COMMIT would (so that no write-back error of
    /// data written through it goes unreported: a failure changes the write
    /// verifier; after a success nothing written through it is left to
    /// fail), and leaves the cache, so that the next resolve of its handle
    /// opens it read-only and the lease can be had once the calls holding
    /// it are done (the caller's own lease attempt still fails; with
    /// [`LocalStore::read_lease_replacing`] it need not).
    ///
    /// Whether a local process has the file open for writing too is not
    /// known here (Linux does not tell who holds a file open): then this
    /// lets go for nothing, once per write through the store at most (an
    /// inode reopened read-only holds no writer until the next write).
    ///
    /// Not done when a client CLOSEs its last open for writing, though it
    /// would give the first OPEN for reading after it a delegation rather
    /// than the second: the description of a file the store created is the
    /// only one a write delegation can ever be had on (`lease.rs`), and
    /// closing it at every CLOSE of a written file would cost every later
    /// OPEN for writing of it the write delegation (write delegations are
    /// on by default), as well as a reopen per file closed.
    pub(crate) fn read_lease(&self, inode: &Arc<Inode>) -> StoreResult<crate::LocalReadLease> {
        self.read_lease_letting_go(&mut inode.clone(), false)
    }

    /// [`LocalStore::read_lease`], for a caller whose reference `inode`
    /// is the only one it holds: once the shared writer's inode has left
    /// the cache, the inode its handle resolves to now (opened read-only,
    /// cached, unless another call resolved it first) takes its place, and
    /// the old one, and its writable descriptions with it, is closed if no
    /// other call holds it; the lease is tried on the new one. If the
    /// handle no longer resolves (the file was removed meanwhile), the
    /// caller keeps the old inode and the lease's EAGAIN.
    pub(crate) fn read_lease_replacing(&self, inode: &mut Arc<Inode>) -> StoreResult<crate::LocalReadLease> {
        self.read_lease_letting_go(inode, true)
    }

    /// [`LocalStore::read_lease`], and with `replace`
    /// [`LocalStore::read_lease_replacing`].
    fn read_lease_letting_go(&self, inode: &mut Arc<Inode>, replace: bool) -> StoreResult<crate::LocalReadLease> {
        match crate::LocalReadLease::take(inode) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && self.let_go_of_own_writers(inode) => {
                if inode.has_shared_writer() {
                    if !replace {
                        return Err(e);
                    }
                    let Ok((fresh, ())) = self.resolve(inode.handle.as_bytes(), |_| Ok::<_, StoreError>(())) else {
                        return Err(e);
                    };
                    // The old inode goes here, if this was its last holder.
                    *inode = fresh;
                }
                crate::LocalReadLease::take(inode)
            }
            other => other,
        }
    }

    /// See [`LocalStore::read_lease`]: whether the store let go of some
    /// description of `inode` open for writing.
    fn let_go_of_own_writers(&self, inode: &Arc<Inode>) -> bool {
        let lock_files = inode.lock_files().load(std::sync::atomic::Ordering::Relaxed);
        if inode.is_write_leased() || lock_files > 0 {
            return false;
        }
        let shared = inode.has_shared_writer();
        if !shared && !inode.has_idle_sync_writers() {
            return false;
        }
        // Each synchronous writer reported its own write's errors.
        inode.close_idle_sync_writers();
        if shared {
            keel_store::blocking::may_block();
            if let Err(e) = self.commit_objects(&[inode]) {
                tracing::warn!(error = %e, "sync of a file before its writer is let go of failed");
            }
            self.cache.remove_this(inode);
        }
        true
    }

    pub(crate) fn root(&self, export: &Export) -> StoreResult<Arc<Inode>> {
        self.resolve(export.root_handle.as_bytes(), |_| Ok::<_, StoreError>(())).map(|(inode, ())| inode)
    }

    /// The object a handle names, once `admit` has accepted its export (the
    /// client list): a handle from a client the export does not admit is
    /// never opened. Known handles come from the cache; others are
    /// authenticated, checked against their export, and opened.
    pub(crate) fn resolve<T, E: From<StoreError>>(
        &self,
        fh: &Bytes,
        admit: impl FnOnce(u32) -> Result<T, E>,
    ) -> Result<(Arc<Inode>, T), E> {
        // An object cached through an export since retired (opened by a
        // call that raced the reload) goes, and its handle is resolved
        // afresh against the exports served now.
        if let Some(inode) = self.cache.get(fh).filter(|inode| {
            let retired = inode.export.is_retired();
            if retired {
                self.cache.remove(&inode.handle);
            }
            !retired
        }) {
            let admitted = admit(inode.export.id)?;
            // Removed since it was cached (on the host, or through another
            // export): stale, as knfsd's file cache makes it.
            if sys::fstat(inode.fd()).map_err(StoreError::from)?.st_nlink == 0 {
                self.cache.remove(&inode.handle);
                return Err(StoreError::Stale.into());
            }
            return Ok((inode, admitted));
        }
        let parsed = handle::decode(&self.key, fh)?;
        let export = self.export(parsed.export_id).ok_or(StoreError::Stale)?;
        if parsed.fsid != export.fsid {
            return Err(StoreError::Stale.into());
        }
        let admitted = admit(export.id)?;
        let inode = self.open_inode(&export, handle::from_wire(fh.clone()), parsed.ftype, parsed.kernel, false)?;
        Ok((inode, admitted))
    }

    /// Opens the object behind a kernel handle and caches it. `inside` says
    /// the caller already knows it lies in the export (found by lookup).
    fn open_inode(
        &self,
        export: &Arc<Export>,
        handle: FileHandle,
        ftype: FileType,
        kernel: KernelHandle,
        inside: bool,
    ) -> StoreResult<Arc<Inode>> {
        if let Some(inode) = self.cache.get(handle.as_bytes()) {
            return Ok(inode);
        }
        let leased =
            self.write_leased.lock().unwrap_or_else(|e| e.into_inner()).by_handle.get(handle.as_bytes()).cloned();
        if let Some(inode) = leased.and_then(|i| i.upgrade()) {
            self.cache.insert(inode.clone());
            return Ok(inode);
        }
        let open = |flags| ident::as_root(|| open_by_handle_settled(export.root_fd(), &kernel, flags));
        let fd = match ftype {
            FileType::Directory => open(libc::O_RDONLY | libc::O_DIRECTORY),
            FileType::Regular => open(libc::O_RDONLY).or_else(|_| open(libc::O_PATH)),
            _ => open(libc::O_PATH),
        }
        .map_err(stale_if_gone)?;
        let st = sys::fstat(fd.as_fd())?;
        // An unlinked inode that someone still holds open opens by handle too.
        if FileType::from_mode(st.st_mode) != Some(ftype) || st.st_nlink == 0 {
            return Err(StoreError::Stale);
        }
        if export.subtree && ftype == FileType::Directory && !inside && !export.is_root(&st) {
            check_inside(export, fd.as_fd())?;
        }
        let inode = Arc::new(Inode::new(export.clone(), handle, ftype, kernel, fd, false));
        self.cache.insert(inode.clone());
        Ok(inode)
    }

    /// Issues the handle for an object found under `export` and returns
    /// its inode (from the cache if it is known).
    fn adopt(&self, export: &Arc<Export>, st: &libc::stat, kernel: KernelHandle) -> StoreResult<Arc<Inode>> {
        let ftype = FileType::from_mode(st.st_mode).ok_or(StoreError::NotSupported)?;
        let handle = handle::encode(&self.key, export.id, export.fsid, ftype, &kernel)?;
        self.open_inode(export, handle, ftype, kernel, true)
    }

    /// Caches an object this server just created, with the descriptor the
    /// creation produced.
    fn adopt_new(
        &self,
        export: &Arc<Export>,
        ftype: FileType,
        fd: std::os::fd::OwnedFd,
        writable: bool,
    ) -> StoreResult<Arc<Inode>> {
        let (kernel, _) = sys::name_to_handle(fd.as_fd(), b"")?;
        let handle = handle::encode(&self.key, export.id, export.fsid, ftype, &kernel)?;
        let inode = Arc::new(Inode::new(export.clone(), handle, ftype, kernel, fd, writable));
        self.cache.insert(inode.clone());
        Ok(inode)
    }

    /// The wire handle of a name in `dir` (for cache eviction), if any.
    fn handle_of_name(&self, dir: &Inode, name: &[u8]) -> Option<FileHandle> {
        let st = sys::stat_at(dir.fd(), name).ok()?;
        let (kernel, _) = sys::name_to_handle(dir.fd(), name).ok()?;
        let ftype = FileType::from_mode(st.st_mode)?;
        handle::encode(&self.key, dir.export.id, dir.export.fsid, ftype, &kernel).ok()
    }

    pub(crate) fn getattr(&self, inode: &Inode) -> StoreResult<Attrs> {
        attrs_of(inode)
    }

    /// SETATTR. `guard` is the ctime the client believes the object has.
    pub(crate) fn setattr(
        &self,
        who: &Acting,
        inode: &Arc<Inode>,
        set: &SetAttrs,
        guard: Option<Time>,
        commit: bool,
    ) -> StoreResult<()> {
        rules::check_guard(guard, || Ok(attrs_of(inode)?.ctime))?;
        apply_attrs(who.cred(), inode, set)?;
        if commit {
            self.commit_objects(&[inode])?;
        }
        Ok(())
    }

    /// The ACCESS bits of `want` that the caller really has.
    pub(crate) fn access(&self, _who: &Acting, inode: &Inode, want: u32) -> StoreResult<u32> {
        let may = |mode| sys::access(inode.fd(), mode).is_ok();
        let (read, write, exec) = (may(libc::R_OK), may(libc::W_OK), may(libc::X_OK));
        Ok(rules::access_granted(inode.ftype, read, write, exec, want))
    }

    pub(crate) fn readlink(&self, _who: &Acting, inode: &Inode) -> StoreResult<Vec<u8>> {
        if inode.ftype != FileType::Symlink {
            return Err(StoreError::errno(libc::EINVAL));
        }
        Ok(sys::readlink(inode.fd())?)
    }

    pub(crate) fn fsstat(&self, inode: &Inode) -> StoreResult<FsStat> {
        let st = sys::fstatvfs(inode.export.root_fd())?;
        let frsize = st.f_frsize as u64;
        Ok(FsStat {
            total_bytes: st.f_blocks as u64 * frsize,
            free_bytes: st.f_bfree as u64 * frsize,
            avail_bytes: st.f_bavail as u64 * frsize,
            total_files: st.f_files as u64,
            free_files: st.f_ffree as u64,
            avail_files: st.f_favail as u64,
        })
    }

    pub(crate) fn limits(&self, inode: &Inode) -> Limits {
        let fd = inode.export.root_fd();
        let bits = sys::fpathconf(fd, libc::_PC_FILESIZEBITS).unwrap_or(64).clamp(32, 64) as u32;
        Limits {
            link_max: sys::fpathconf(fd, libc::_PC_LINK_MAX).unwrap_or(32000).clamp(1, u32::MAX as i64) as u32,
            name_max: sys::fpathconf(fd, libc::_PC_NAME_MAX).unwrap_or(255).clamp(1, NAME_BYTES_MAX as i64) as u32,
            file_size_max: if bits >= 64 { i64::MAX as u64 } else { (1u64 << (bits - 1)) - 1 },
        }
    }

    /// The directory `path` (relative to the export root, components
    /// separated by '/') for MOUNT. Symlinks and other mounts are not
    /// followed, and ".." is refused.
    pub(crate) fn lookup_path(&self, export_id: u32, path: &[u8]) -> StoreResult<Arc<Inode>> {
        let export = self.export(export_id).ok_or(StoreError::Stale)?;
        let mut fd: Option<std::os::fd::OwnedFd> = None;
        for component in rules::path_components(path) {
            let component = component?;
            let dir = fd.as_ref().map(|f| f.as_fd()).unwrap_or(export.root_fd());
            fd = Some(ident::as_root(|| {
                sys::openat(dir, component, libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY, 0)
            })?);
        }
        let Some(fd) = fd else { return self.root(&export) };
        let (kernel, mount_id) = sys::name_to_handle(fd.as_fd(), b"")?;
        if mount_id != export.mount_id {
            return Err(StoreError::CrossesMount);
        }
        let st = sys::fstat(fd.as_fd())?;
        self.adopt(&export, &st, kernel)
    }

    /// COMMIT: flushes a file's data and metadata to disk when `flush`
    /// (a sync export). Needs the access a WRITE needs either way. Returns
    /// the write verifier read after the flush: a failure of anyone's
    /// flush until then has changed it.
    pub(crate) fn commit(&self, who: &Acting, inode: &Arc<Inode>, flush: bool) -> StoreResult<[u8; 8]> {
        if !inode.ftype.is_special() {
            let st = sys::fstat(inode.fd())?;
            permit(who.cred(), inode, &st, libc::W_OK, true)?;
        }
        if flush {
            self.commit_objects(&[inode])?;
        }
        Ok(self.verifier.get())
    }

    /// Makes objects' metadata (and files' data) durable. A file goes
    /// through the group commit (group_commit.rs), whose one leader at a
    /// time keeps the syncs of a file's shared writer serial: a write-back
    /// error is reported once per open file description (inode.rs). A
    /// directory holds no file data: this call syncs it at once, and
    /// concurrent calls' syncs meet in the file system's own coalescing of
    /// log forces (bench/ab.sh --meta: creates from 8 processes 14-34 %
    /// faster than in batches, docs/benchmarks.md). O_PATH objects
    /// (symlinks, devices, fifos, sockets) cannot be fsync'ed; their file
    /// system is.
    pub(crate) fn commit_objects(&self, objects: &[&Arc<Inode>]) -> StoreResult<()> {
        let mut files = Vec::with_capacity(objects.len());
        for (i, &inode) in objects.iter().enumerate() {
            if objects[..i].iter().any(|o| o.handle == inode.handle) {
                continue;
            }
            match inode.ftype {
                FileType::Directory => self.sync_object(inode.fd(), inode)?,
                t if t.is_special() => {
                    let r = sys::syncfs(inode.export.root_fd());
                    self.after_sync(r, inode)?;
                }
                _ => files.push((inode.handle.clone(), Arc::clone(inode))),
            }
        }
        self.commits.sync(&files, |inode| self.sync_object(inode.sync_fd(), inode))
    }

    /// An object this call created, and its directory. The new object has
    /// no data written before this call, so it need not wait for a batch
    /// either; a new file is synced through a description of its own (its
    /// shared writer may already be another call's).
    ///
    /// Where one sync commits a whole namespace operation (XFS:
    /// `Export::one_sync_commits_namespace_ops`), the new object's sync
    /// makes its directory entry durable too: one log force, as knfsd's
    /// commit_metadata. A second sync of the directory would force the log
    /// again whenever another call changed the directory meanwhile, as
    /// every other create in a directory many clients share does
    /// (docs/benchmarks.md, durable metadata). An object that cannot be
    /// fsync'ed (symlinks, devices, fifos, sockets) is committed there
    /// through its directory, not with a syncfs of the whole file system.
    fn commit_created(&self, created: &Arc<Inode>, dir: &Arc<Inode>) -> StoreResult<()> {
        let whole = dir.export.one_sync_commits_namespace_ops();
        match created.ftype {
            FileType::Regular => {
                let lease = created.sync_writer()?;
                self.sync_object(lease.fd(), created)?;
            }
            t if t.is_special() && whole => return self.commit_objects(&[dir]),
            _ => self.commit_objects(&[created])?,
        }
        if whole {
            return Ok(());
        }
        self.commit_objects(&[dir])
    }

    /// A namespace operation that changed `objects`, a directory first (a
    /// LINK: the directory and the file; a RENAME: both directories).
    /// Where one sync commits the operation whole (XFS), only that
    /// directory is synced, which also spares a linked file's data a
    /// flush the operation does not ask for; elsewhere every object.
    fn commit_namespace_op(&self, objects: &[&Arc<Inode>]) -> StoreResult<()> {
        match objects.first() {
            Some(dir) if dir.export.one_sync_commits_namespace_ops() => self.commit_objects(&objects[..1]),
            _ => self.commit_objects(objects),
        }
    }

    /// fsync(2) of `fd`, a descriptor of `inode`.
    fn sync_object(&self, fd: std::os::fd::BorrowedFd, inode: &Inode) -> StoreResult<()> {
        let r = match self.faults.strike(FaultPoint::Fsync, || inode_number(inode)) {
            Some(errno) => Err(std::io::Error::from_raw_os_error(errno)),
            None => sys::fsync(fd),
        };
        self.after_sync(r, inode)
    }

    /// A failed sync may have lost data clients were told was written:
    /// they must learn it through a new write verifier.
    fn after_sync(&self, r: std::io::Result<()>, inode: &Inode) -> StoreResult<()> {
        r.map_err(|e| {
            self.verifier.data_lost(&format_args!("sync of inode {} failed: {e}", inode_number(inode)));
            StoreError::from(e)
        })
    }
}

/// The inode number, for logs and fault targets (0 if it cannot be read).
fn inode_number(inode: &Inode) -> u64 {
    sys::fstat(inode.fd()).map_or(0, |st| st.st_ino)
}

pub(crate) fn attrs_of(inode: &Inode) -> StoreResult<Attrs> {
    let st = sys::fstat(inode.fd())?;
    from_stat(&st, inode.export.fsid).ok_or(StoreError::NotSupported)
}

/// Attributes from stat(2), with the export's fsid for the device.
pub(crate) fn from_stat(st: &libc::stat, fsid: u64) -> Option<Attrs> {
    Some(Attrs {
        ftype: FileType::from_mode(st.st_mode)?,
        mode: st.st_mode & 0o7777,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        used: st.st_blocks as u64 * 512,
        rdev_major: libc::major(st.st_rdev),
        rdev_minor: libc::minor(st.st_rdev),
        fsid,
        fileid: st.st_ino,
        atime: Time { seconds: st.st_atime, nanos: st.st_atime_nsec as u32 },
        mtime: Time { seconds: st.st_mtime, nanos: st.st_mtime_nsec as u32 },
        ctime: Time { seconds: st.st_ctime, nanos: st.st_ctime_nsec as u32 },
    })
}

/// Applies attribute changes in knfsd's order: size, owner (which clears
/// setuid bits), mode, then times (the others change ctime and mtime).
fn apply_attrs(cred: &Cred, inode: &Inode, set: &SetAttrs) -> StoreResult<()> {
    if let Some(size) = set.size {
        rules::require_regular(inode.ftype)?;
        let st = sys::fstat(inode.fd())?;
        permit(cred, inode, &st, libc::W_OK, true)?;
        sys::ftruncate(inode.writer()?, size)?;
    }
    if set.uid.is_some() || set.gid.is_some() {
        sys::fchown(inode.fd(), set.uid.unwrap_or(u32::MAX), set.gid.unwrap_or(u32::MAX))?;
    }
    if let Some(mode) = set.mode
        && rules::mode_applies(inode.ftype)
    {
        let mode = mode & rules::MODE_BITS;
        if inode.ftype.is_special() { sys::chmod_via_proc(inode.fd(), mode)? } else { sys::fchmod(inode.fd(), mode)? }
    }
    if set.atime != SetTime::Keep || set.mtime != SetTime::Keep {
        sys::set_times(inode.fd(), &[timespec(set.atime), timespec(set.mtime)])?;
    }
    crate::lease::own_change_made();
    Ok(())
}

fn timespec(t: SetTime) -> libc::timespec {
    match t {
        SetTime::Keep => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        SetTime::ServerNow => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
        SetTime::To(t) => {
            let t = rules::client_time(t);
            libc::timespec { tv_sec: t.seconds, tv_nsec: i64::from(t.nanos) }
        }
    }
}

/// Checks that the caller may read/write an object the server holds open
/// as root. Like knfsd, the owner may read and write their own file
/// whatever its mode (a file created 0444 must still take the data its
/// creator writes).
fn permit(cred: &Cred, inode: &Inode, st: &libc::stat, mode: libc::c_int, owner_override: bool) -> StoreResult<()> {
    if cred.is_root() || (owner_override && rules::owner_overrides(cred, st.st_uid)) {
        return Ok(());
    }
    sys::access(inode.fd(), mode).map_err(StoreError::from)
}

/// open_by_handle_at(2), asked again when it fails with ENOMEM: Linux
/// (6.x) reports ENOMEM for an inode that another thread is evicting at
/// that moment (a file just unlinked and closed), and the answer once the
/// eviction is over is the real one, ESTALE. An ENOMEM that persists is
/// returned (the client hears JUKEBOX and retries).
fn open_by_handle_settled(
    mount_fd: std::os::fd::BorrowedFd,
    kernel: &sys::KernelHandle,
    flags: libc::c_int,
) -> std::io::Result<std::os::fd::OwnedFd> {
    let mut tries = 0;
    loop {
        match sys::open_by_handle(mount_fd, kernel, flags) {
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) && tries < 5 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            other => return other,
        }
    }
}

fn stale_if_gone(e: std::io::Error) -> StoreError {
    match e.raw_os_error() {
        Some(libc::ESTALE) | Some(libc::ENOENT) | Some(libc::EINVAL) => StoreError::Stale,
        _ => StoreError::Os(e),
    }
}

/// Proves that directory `fd` lies under the export root by walking "..".
fn check_inside(export: &Export, fd: std::os::fd::BorrowedFd) -> StoreResult<()> {
    if ident::as_root(|| crate::export::is_under(fd, export.root_dev, export.root_ino))? {
        return Ok(());
    }
    tracing::warn!(export = export.id, "handle of a directory outside the export refused");
    Err(StoreError::Stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries of objects gone are dropped as the table grows, not kept
    /// for ever nor walked at every grant.
    #[test]
    fn the_write_leased_table_drops_what_is_gone_as_it_grows() {
        let mut leased = WriteLeased::default();
        for n in 0..1000u32 {
            leased.insert(Bytes::from(n.to_be_bytes().to_vec()), Weak::new());
            assert!(leased.by_handle.len() <= WRITE_LEASED_PRUNED_FROM, "{n}: {}", leased.by_handle.len());
        }
    }
}

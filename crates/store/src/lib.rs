//! The storage seam: the one trait the protocol handlers use to reach
//! storage, the types it speaks, and a simulated store for tests.
//!
//! A [`Store`] serves exports of objects named by opaque, persistent
//! handles. The handlers hold a store's [`Store::Object`]s (a handle, an
//! export, a type; whatever the store keeps behind them is its own), act as
//! the caller through a [`Store::Caller`] obtained once per call, and read
//! the durability epoch (the write verifier) from the store, which changes
//! it whenever it may have lost data it acknowledged.
//!
//! Stores stack: a store may wrap another (a cache tier in front of the
//! local file system, as Ganesha stacks FSALs), answering every verb, not
//! only reads and writes, so that attributes and wcc data reflect what it
//! holds.
//!
//! Implementations: `keel-store-local` (the local file system, by handle,
//! under the caller's identity) and [`sim::SimStore`] (in memory, seeded,
//! fault-injecting, with crashes that keep only what was made durable).
//!
//! **Architecture invariants:** knows nothing of the wire protocols; speaks
//! in handles (bytes), names (bytes), attributes and errno. A handle never
//! resolves to an object outside its export, and its export admits the
//! client (the `admit` callback of [`Store::resolve`]) before the object is
//! opened. Every verb that acts for a caller takes the call's
//! [`Store::Caller`].
//!
//! Dispatch is static: the handlers are generic over `S: Store`. A
//! virtual call would cost a few nanoseconds, lost in the noise of one
//! system call (`keel-store-local`'s `examples/dispatch_cost.rs`: GETATTR
//! 0.84–1.06 µs generic against 0.95–1.08 µs through a trait object, a
//! 4 KiB READ 2.1–3.5 against 2.1–2.6 µs), so the generic form stays: it
//! keeps the verbs' generic arguments (`admit`, the readdir sink) and
//! lets each store name its own object and caller types.

#![forbid(unsafe_code)]

pub mod attr;
pub mod blocking;
mod cred;
mod error;
pub mod lease;
pub mod lock;
pub mod pipe;
pub mod rules;
pub mod sim;
pub mod state_file;
mod types;

use bytes::Bytes;

pub use attr::{Attrs, FileType, FsStat, Limits, SetAttrs, SetTime, Time, access};
pub use cred::{Cred, GROUPS_MAX};
pub use error::{StoreError, StoreResult};
pub use lease::ReadLease;
pub use lock::{LockConflict, LockFile, LockKind, LockRange};
pub use rules::check_name;
pub use types::{
    CreateMode, Created, DirEntry, ExportInfo, NodeKind, ReadData, ReadOut, SeekWhat, Space, Stability, WriteOut,
};

/// Longest handle a store may give an object. One handle names an object
/// for every protocol (an NFSv3 client and an NFSv4 client of one export
/// see the same bytes, and a lock or a cache log record taken through one
/// holds for the other), so it fits the smallest limit of them: NFSv3's
/// 64 bytes (NFSv4 allows 128). The local store's handles are 16 bytes of
/// header, the kernel's handle (8-20 bytes on XFS, ext4, btrfs) and an
/// 8-byte MAC; a file system whose kernel handles do not fit is refused.
/// No store's handle begins with the byte 0xff: it marks the handles of
/// NFSv4's pseudo file system (keel-exports' `pseudo`), which a handler
/// tells from a store's by it.
pub const HANDLE_BYTES_MAX: usize = 64;
/// Longest name component (NFS3_MAXNAMLEN, and every Linux file system's).
pub const NAME_BYTES_MAX: usize = 255;
/// Longest symlink target.
pub const SYMLINK_TARGET_BYTES_MAX: usize = 4095;

/// The write verifier: the store's durability epoch. A client keeps the
/// data it wrote UNSTABLE until a COMMIT returns the verifier its WRITEs
/// returned; a different one tells it the store may have lost that data.
pub type Verifier = [u8; 8];

/// An object of a store, as the handlers hold it: opaque but for its
/// handle, its export and its type. Cheap to clone.
pub trait Object: Clone + Send + Sync + 'static {
    /// The handle clients present for it (at most [`HANDLE_BYTES_MAX`]).
    fn handle(&self) -> &Bytes;
    /// Bytes that name the file whichever export it is reached through
    /// (nested exports give one file a handle per export).
    fn file_key(&self) -> &[u8] {
        self.handle()
    }
    /// The id of the export it belongs to.
    fn export_id(&self) -> u32;
    fn file_type(&self) -> FileType;
}

/// The caller's identity while a call runs, as the store holds it (the
/// local store has it assumed on the thread; a simulated one records it).
pub trait Caller {
    fn cred(&self) -> &Cred;
}

/// The storage verbs the NFS and MOUNT handlers need (knfsd's `vfs.c`
/// interface), version-independent.
///
/// `commit` arguments say whether the change must be durable before the
/// verb returns (a `sync` export): the object's metadata, and that of the
/// directory whose entries changed.
///
/// Dispatch is static: the handlers are generic over `S: Store` (measured:
/// see the crate documentation), and a store that wraps another is generic
/// over the inner one (`CacheStore<S: Store>`).
pub trait Store: Send + Sync + 'static {
    type Object: Object;
    /// The caller's identity for one call, from [`Store::act_as`].
    type Caller: Caller;
    /// An open file description holding byte-range locks (see [`lock`]).
    type LockFile: LockFile;
    /// A read lease on a file (see [`lease`]).
    type ReadLease: ReadLease;

    /// The exports this store serves.
    fn exports(&self) -> Vec<ExportInfo>;

    /// The write verifier now (see [`Verifier`]). It changes at every start
    /// and whenever data acknowledged as unstable may have been lost: any
    /// failed flush or write (except EAGAIN and ESTALE).
    fn write_verifier(&self) -> Verifier;

    /// Assumes `cred` for the call in progress, until the returned caller
    /// is dropped. Called once per call; fails (EPERM) for an identity the
    /// store cannot take.
    fn act_as(&self, cred: &Cred) -> StoreResult<Self::Caller>;

    /// The object a handle names, once `admit` has accepted its export (by
    /// id: the client list): an object of an export that does not admit
    /// the client is never opened. BadHandle for a handle this store did
    /// not issue, Stale for one whose object or export is gone.
    fn resolve<T, E: From<StoreError>>(
        &self,
        fh: &Bytes,
        admit: impl FnOnce(u32) -> Result<T, E>,
    ) -> Result<(Self::Object, T), E>;

    /// The directory `path` under the root of export `export_id` (MOUNT):
    /// components separated by '/', no symlinks followed, ".." refused.
    fn lookup_path(&self, export_id: u32, path: &[u8]) -> StoreResult<Self::Object>;

    /// Attributes, with no identity needed (the object is admitted).
    fn getattr(&self, obj: &Self::Object) -> StoreResult<Attrs>;

    /// SETATTR. `guard` is the ctime the client believes the object has
    /// (NotSync if it has another).
    fn setattr(
        &self,
        who: &Self::Caller,
        obj: &Self::Object,
        set: &SetAttrs,
        guard: Option<Time>,
        commit: bool,
    ) -> StoreResult<()>;

    /// The [`access`] bits of `want` the caller really has.
    fn access(&self, who: &Self::Caller, obj: &Self::Object, want: u32) -> StoreResult<u32>;

    fn readlink(&self, who: &Self::Caller, obj: &Self::Object) -> StoreResult<Vec<u8>>;

    /// `name` in `dir`, with its attributes. "." is `dir`; ".." of an
    /// export root is the root.
    fn lookup(&self, who: &Self::Caller, dir: &Self::Object, name: &[u8]) -> StoreResult<(Self::Object, Attrs)>;

    /// The cookie verifier of `dir`'s listings: READDIR cookies from a
    /// listing with another verifier are refused.
    fn cookie_verifier(&self, dir: &Self::Object) -> [u8; 8];

    /// Lists `dir` from `cookie` (0: the start), handing entries to `sink`
    /// until it returns false. Returns whether the end was reached.
    fn readdir(
        &self,
        who: &Self::Caller,
        dir: &Self::Object,
        cookie: u64,
        sink: impl FnMut(DirEntry<'_>) -> bool,
    ) -> StoreResult<bool>;

    /// Handle and attributes of one entry for READDIRPLUS, looked up as
    /// the caller; `None` when they cannot be given (gone, another mount,
    /// no permission).
    fn entry_plus(&self, who: &Self::Caller, dir: &Self::Object, name: &[u8]) -> Option<(Bytes, Attrs)>;

    /// The checks READ (`write` false) or WRITE (`write` true) make before
    /// they touch data: a regular file, and the caller's permission with
    /// the owner's override. Returns the attributes. For a store that
    /// stacks on this one and answers I/O itself (a cache hit).
    fn check_io(&self, who: &Self::Caller, obj: &Self::Object, write: bool) -> StoreResult<Attrs>;

    /// Up to `count` bytes at `offset`.
    fn read(&self, who: &Self::Caller, obj: &Self::Object, offset: u64, count: usize) -> StoreResult<ReadOut>;

    /// Writes `data` at `offset`, durable as `stability` asks before it
    /// returns. The reply's verifier is the one read before the data went
    /// in.
    fn write(
        &self,
        who: &Self::Caller,
        obj: &Self::Object,
        offset: u64,
        data: &[u8],
        stability: Stability,
    ) -> StoreResult<WriteOut>;

    /// COMMIT: makes the file's data and metadata durable when `flush`.
    /// Needs the access a WRITE needs either way. Returns the verifier read
    /// after the flush, so a loss in between is seen by the client.
    fn commit(&self, who: &Self::Caller, obj: &Self::Object, flush: bool) -> StoreResult<Verifier>;

    fn create(
        &self,
        who: &Self::Caller,
        dir: &Self::Object,
        name: &[u8],
        mode: CreateMode,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<Self::Object>>;

    fn mkdir(
        &self,
        who: &Self::Caller,
        dir: &Self::Object,
        name: &[u8],
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<Self::Object>>;

    fn symlink(
        &self,
        who: &Self::Caller,
        dir: &Self::Object,
        name: &[u8],
        target: &[u8],
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<Self::Object>>;

    fn mknod(
        &self,
        who: &Self::Caller,
        dir: &Self::Object,
        name: &[u8],
        kind: NodeKind,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<Self::Object>>;

    /// A new name in `dir` for `file`. Returns the file's attributes.
    fn link(
        &self,
        who: &Self::Caller,
        file: &Self::Object,
        dir: &Self::Object,
        name: &[u8],
        commit: bool,
    ) -> StoreResult<Attrs>;

    fn remove(&self, who: &Self::Caller, dir: &Self::Object, name: &[u8], commit: bool) -> StoreResult<()>;

    fn rmdir(&self, who: &Self::Caller, dir: &Self::Object, name: &[u8], commit: bool) -> StoreResult<()>;

    fn rename(
        &self,
        who: &Self::Caller,
        from_dir: &Self::Object,
        from: &[u8],
        to_dir: &Self::Object,
        to: &[u8],
        commit: bool,
    ) -> StoreResult<()>;

    /// Space and file counts of the object's file system.
    fn fsstat(&self, obj: &Self::Object) -> StoreResult<FsStat>;

    /// POSIX limits of the object's file system.
    fn limits(&self, obj: &Self::Object) -> Limits;

    /// The first offset at or after `offset` where `what` begins
    /// (lseek's SEEK_DATA and SEEK_HOLE: the end of the file counts as a
    /// hole; a store may report all of a file as data). ENXIO when
    /// `offset` is at or past the end of the file, or when no data
    /// follows it. Needs the access a READ needs.
    fn seek(&self, who: &Self::Caller, obj: &Self::Object, offset: u64, what: SeekWhat) -> StoreResult<u64>;

    /// Reserves or frees the blocks of `len` bytes from `offset` (see
    /// [`Space`]), durable before it returns when `commit`. Needs the
    /// access a WRITE needs; EINVAL for an empty range, EFBIG for one
    /// past the largest offset ([`rules::check_space_extent`]).
    fn fallocate(
        &self,
        who: &Self::Caller,
        obj: &Self::Object,
        space: Space,
        offset: u64,
        len: u64,
        commit: bool,
    ) -> StoreResult<()>;

    /// Copies up to `len` bytes of `src` from `src_offset` into `dst` at
    /// `dst_offset`, sharing the blocks where the file system can (a
    /// reflink on XFS), durable before it returns when `commit`. Returns
    /// the bytes copied: fewer than `len` at the end of `src`, or when
    /// the file system stops short (the caller asks again for the rest).
    /// Needs read access to `src` and write access to `dst`; EINVAL for
    /// overlapping ranges of one file ([`rules::check_copy`]).
    #[allow(clippy::too_many_arguments)]
    fn copy_range(
        &self,
        who: &Self::Caller,
        src: &Self::Object,
        src_offset: u64,
        dst: &Self::Object,
        dst_offset: u64,
        len: u64,
        commit: bool,
    ) -> StoreResult<u64>;

    /// Makes everything every export holds durable (at stop).
    fn sync_all(&self) -> StoreResult<()>;

    /// Whether export `export_id`'s storage as a whole works now: its
    /// root answers and its file system takes a flush. An error that this
    /// shares is the device's or its path's, not one object's.
    fn check_export(&self, export_id: u32) -> StoreResult<()>;

    /// A new open file description of the regular file `obj` for
    /// byte-range locks, if the caller may lock it: the caller can read it
    /// or owns it (knfsd's rule for NLM). Locks taken through it exclude
    /// those of every other description, a local process's included.
    fn open_for_locks(&self, who: &Self::Caller, obj: &Self::Object) -> StoreResult<Self::LockFile>;

    /// A read lease on the regular file `obj`, on an open file description
    /// of its own (see [`lease`]): EAGAIN when the file is open for writing
    /// (by anyone, the store included: a store may then let go of its own
    /// idle descriptions open for writing, so that a later call gets one),
    /// EINVAL where the file system takes no leases. For whoever already
    /// may read the file: no permission is checked.
    fn read_lease(&self, obj: &Self::Object) -> StoreResult<Self::ReadLease>;

    /// [`Store::read_lease`] for a caller that holds no other reference to
    /// `obj` (an OPEN about to answer with the lease's delegation): where
    /// only the store's own description of the file open for writing,
    /// which lives as long as the object does, stands in the way, the
    /// store may put the object its handle names afresh (the same file,
    /// opened for reading) in `obj`'s place, so that the old one's
    /// descriptions close with the caller's reference and this call, not
    /// the next one, gets the lease. Still EAGAIN if another call holds
    /// the old object. The default: [`Store::read_lease`].
    fn read_lease_replacing(&self, obj: &mut Self::Object) -> StoreResult<Self::ReadLease> {
        self.read_lease(obj)
    }

    /// A write lease on the regular file `obj` (see [`lease`]), on the
    /// store's own description of it, through which it goes on reading and
    /// writing the file unseen by the lease: whoever holds it sees to it
    /// that every access on behalf of someone else recalls first. EAGAIN
    /// while anyone else has the file open (the store included, through
    /// any other description); EINVAL where the store or file system gives
    /// none (the default). No permission is checked.
    fn write_lease(&self, _obj: &Self::Object) -> StoreResult<Self::ReadLease> {
        Err(StoreError::errno(libc::EINVAL))
    }

    /// [`Store::write_lease`], for a caller whose `obj` is the only
    /// reference it holds, reclaiming a write delegation after a restart:
    /// where the store's own description of the file is not open for
    /// writing (it has not written the file since it opened it), one that
    /// is may take its place, in the store and in `obj`, so that the lease
    /// can be had. The default: [`Store::write_lease`].
    fn write_lease_replacing(&self, obj: &mut Self::Object) -> StoreResult<Self::ReadLease> {
        self.write_lease(obj)
    }

    /// Sets the modification time of `obj`, which `lease` (a write lease
    /// from [`Store::write_lease`]) is on, to now (the change time moves
    /// with it), on behalf of the lease's holder: what a write
    /// delegation's holder says it changed, which the file has not seen
    /// yet (RFC 8881 section 10.4.3), without that counting as a break of
    /// the lease. No permission is checked. EINVAL where the store gives
    /// no write leases (the default).
    fn touch_leased(&self, _obj: &Self::Object, _lease: &Self::ReadLease) -> StoreResult<()> {
        Err(StoreError::errno(libc::EINVAL))
    }

    /// A lock-holding description of `obj` (as [`Store::open_for_locks`])
    /// that is `lease`'s own, for the lease's holder while it gives the
    /// lease up: a lock taken through it holds before the lease goes, so
    /// that a process the lease kept waiting cannot take the range in
    /// between. Exclusive locks need a lease on a description open for
    /// writing (EBADF otherwise). One per lock owner, as many as the
    /// holder has: each behaves as a description of its own (the store
    /// arbitrates among them what the one description holds for all).
    /// EINVAL where the store gives none (the default); the holder then
    /// gives the lease up first and opens a description of its own.
    fn lock_file_on_lease(&self, _obj: &Self::Object, _lease: &Self::ReadLease) -> StoreResult<Self::LockFile> {
        Err(StoreError::errno(libc::EINVAL))
    }
}

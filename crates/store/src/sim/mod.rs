//! A simulated store: an in-memory file system behind the [`Store`] trait,
//! driven by a seed, that fails on purpose and crashes on demand
//! (TigerBeetle's simulator, redb's crash-testing backends).
//!
//! - **Objects and handles**: inodes in a table, directories with stable
//!   cookies; handles carry export, type and inode number under a keyed
//!   checksum, so a forged handle is BADHANDLE and a removed object STALE.
//! - **Permissions** are checked against the caller as the kernel checks
//!   them for the common cases: owner/group/other bits with root's
//!   overrides, search permission on lookups, write and search permission
//!   on the directory for changes, the sticky bit, chown and chmod by the
//!   owner or root, setgid directories, device nodes for root only,
//!   protected hard links (`fs.protected_hardlinks`), and knfsd's rule
//!   that the owner may read and write their own file.
//!   [`Store::act_as`] only records the caller.
//! - **Faults** ([`SimFault`], [`SimFaultRate`]): any verb, or any flush,
//!   fails with a chosen errno, once, a number of times, on one object or
//!   at random with a probability; a WRITE can be torn (a prefix of whole
//!   sectors goes in, then EIO). As the local store, a failed write or
//!   flush starts a new durability epoch (write verifier).
//! - **Durability**: besides the live file system the store keeps the
//!   image a crash falls back to. A flush of an object (COMMIT, a FILE_SYNC
//!   WRITE, a change on a sync export) copies it into the image: a file's
//!   data and attributes, a directory's entries (the objects they name
//!   exist from then on, empty if they were never flushed themselves); a
//!   DATA_SYNC WRITE its range and the file's size. [`SimStore::crash`]
//!   replaces the live file system with that image, optionally after
//!   letting random un-flushed writes (whole, torn or not at all) and
//!   metadata changes through as a disk's write-back would, then checks it
//!   as fsck would and starts a new epoch.
//!
//! Not modelled: holes (a file is all data up to its end: a punched
//! range reads zeros and SEEK finds data there, as lseek(2) allows of a
//! file system without sparse files), ACLs, quotas, extended attributes, special files' I/O,
//! open-but-unlinked files (an object is gone with its last name),
//! atime updates on reads, timestamps from a real clock (a logical clock
//! advances 1 µs per change), and the pessimism of Linux after a failed
//! flush (pages stay in the cache and a later flush writes them, where
//! Linux may have dropped them; the verifier change is what clients see
//! either way).
//!
//! Every run is determined by its seed and the order of calls; tests print
//! the seed when they fail so a run can be replayed.

mod faults;
mod fs;
mod leases;
mod locks;
mod rng;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use bytes::{BufMut, Bytes, BytesMut};

pub use faults::{SimAction, SimFault, SimFaultRate, SimPoint};
use fs::{Body, Dir, Meta, Node, R, Table, W, X};
pub use leases::{SIM_LEASE_BREAK_WAIT, SimReadLease};
pub use locks::SimLockFile;
pub use rng::Rng;

use crate::attr::{Attrs, FileType, FsStat, Limits, SetAttrs, SetTime, Time};
use crate::rules::{self, CreateExisting};
use crate::types::{
    CreateMode, Created, DirEntry, ExportInfo, NodeKind, ReadOut, SeekWhat, Space, Stability, WriteOut,
};
use crate::{Cred, StoreError, StoreResult, Verifier, check_name};

/// Bytes of space the simulated file systems report.
const CAPACITY_BYTES: u64 = 1 << 40;
/// Files they report room for.
const CAPACITY_FILES: u64 = 1 << 24;
/// Sector size: torn writes tear on these boundaries.
const SECTOR_BYTES: u64 = 512;
/// 2023-11-14T22:13:20Z: where the logical clock starts.
const CLOCK_START_NS: i128 = 1_700_000_000 * 1_000_000_000;
const HANDLE_MAGIC: u8 = b'S';
const HANDLE_BYTES: usize = 22;

/// How much of what was not flushed a crash keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Only what was made durable.
    DurableOnly,
    /// Also random un-flushed writes (whole, torn or lost) and metadata
    /// changes, chosen by the seed, as a disk's write-back leaves them.
    SomeUnsynced,
}

/// An object of the simulated store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimObject {
    handle: Bytes,
    export: u32,
    ftype: FileType,
    ino: u64,
}

impl SimObject {
    /// The inode number (the fileid clients see).
    pub fn fileid(&self) -> u64 {
        self.ino
    }
}

impl crate::Object for SimObject {
    fn handle(&self) -> &Bytes {
        &self.handle
    }

    fn export_id(&self) -> u32 {
        self.export
    }

    fn file_type(&self) -> FileType {
        self.ftype
    }
}

/// The caller of a call on the simulated store: recorded, never assumed.
#[derive(Debug)]
pub struct SimCaller {
    cred: Cred,
}

impl crate::Caller for SimCaller {
    fn cred(&self) -> &Cred {
        &self.cred
    }
}

struct SimExport {
    info: ExportInfo,
    root: u64,
}

struct State {
    rng: Rng,
    key: u64,
    clock_ns: i128,
    verifier: u64,
    next_ino: u64,
    exports: Vec<SimExport>,
    live: Table,
    /// What a crash falls back to.
    durable: Table,
    /// Writes since each file's last flush: (offset, length), in order.
    unsynced: BTreeMap<u64, Vec<(u64, u64)>>,
    /// Objects whose attributes or entries changed since their last flush.
    meta_dirty: BTreeSet<u64>,
    faults: faults::Faults,
    act_as_calls: u64,
    crashes: u64,
}

/// The simulated store. All state sits behind one lock: calls are
/// serialised, so a single-threaded test is exactly replayable.
pub struct SimStore {
    seed: u64,
    state: Mutex<State>,
    /// Byte-range locks: not file system state, so outside `state` (a
    /// crash of the store does not model a crash of the lock manager).
    locks: locks::SharedLocks,
    /// Read leases, as the kernel keeps them (outside `state`, as locks).
    leases: leases::SharedLeases,
}

impl SimStore {
    /// A simulated local process opens `obj` for writing: every lease on
    /// it breaks, and no new one can be had until
    /// [`SimStore::close_local_writer`]. How many leases stand: the opener
    /// waits until they are dropped (or for the lease-break time).
    pub fn open_for_write_locally(&self, obj: &SimObject) -> usize {
        leases::local_writer(&self.leases, obj.ino, true);
        leases::break_all(&self.leases, obj.ino)
    }

    /// The simulated local process closes what it opened.
    pub fn close_local_writer(&self, obj: &SimObject) {
        leases::local_writer(&self.leases, obj.ino, false);
    }

    /// A simulated local process opens `obj` for reading: its write
    /// leases break (how many: the opener waits for them), until
    /// [`SimStore::close_local_reader`] no new one can be had.
    pub fn open_for_read_locally(&self, obj: &SimObject) -> usize {
        leases::local_reader(&self.leases, obj.ino, true)
    }

    /// The simulated local process closes what it opened for reading.
    pub fn close_local_reader(&self, obj: &SimObject) {
        leases::local_reader(&self.leases, obj.ino, false);
    }

    /// A simulated local process changes `obj`'s attributes (a chmod):
    /// every lease on it counts as broken, as the local store's watch
    /// makes it (how many).
    pub fn change_attributes_locally(&self, obj: &SimObject) -> usize {
        leases::break_all(&self.leases, obj.ino)
    }

    /// Leases held on `obj` now.
    pub fn leases_held(&self, obj: &SimObject) -> usize {
        leases::held(&self.leases, obj.ino)
    }

    /// One export, id 1 at "/sim", its root a directory of mode 0777.
    pub fn new(seed: u64) -> Self {
        SimStore::with_exports(seed, &[(1, "/sim")])
    }

    /// Exports `(id, path)`, each a file system of its own.
    pub fn with_exports(seed: u64, exports: &[(u32, &str)]) -> Self {
        let mut rng = Rng::new(seed);
        let key = rng.next_u64();
        let verifier = rng.next_u64().max(1);
        let mut st = State {
            rng,
            key,
            clock_ns: CLOCK_START_NS,
            verifier,
            next_ino: 2,
            exports: Vec::new(),
            live: Table::new(),
            durable: Table::new(),
            unsynced: BTreeMap::new(),
            meta_dirty: BTreeSet::new(),
            faults: faults::Faults::default(),
            act_as_calls: 0,
            crashes: 0,
        };
        for &(id, path) in exports {
            let fsid = rng::mix(key ^ u64::from(id));
            let root = st.next_ino;
            st.next_ino += 1;
            let now = st.now();
            let node = Node {
                export: id,
                ftype: FileType::Directory,
                meta: Meta { mode: 0o777, uid: 0, gid: 0, nlink: 2, atime: now, mtime: now, ctime: now, rdev: (0, 0) },
                body: Body::Dir(Dir::new(root)),
            };
            st.durable.insert(root, node.clone());
            st.live.insert(root, node);
            st.exports.push(SimExport { info: ExportInfo { id, path: PathBuf::from(path), fsid }, root });
        }
        SimStore { seed, state: Mutex::new(st), locks: Default::default(), leases: Default::default() }
    }

    /// The seed this store runs from: print it when a test fails.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread leaves consistent state behind: every
        // change is made under checks that come first.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Arms a fault.
    pub fn inject(&self, fault: SimFault) {
        assert!(fault.count > 0, "a fault strikes at least once");
        self.lock().faults.armed.push(fault);
    }

    /// Adds a fault that strikes at random.
    pub fn inject_rate(&self, rate: SimFaultRate) {
        self.lock().faults.rates.push(rate);
    }

    /// Disarms every fault and rate.
    pub fn clear_faults(&self) {
        let mut st = self.lock();
        st.faults.armed.clear();
        st.faults.rates.clear();
    }

    /// How many faults have struck.
    pub fn faults_struck(&self) -> u64 {
        self.lock().faults.struck
    }

    /// How many times a caller's identity was assumed.
    pub fn act_as_calls(&self) -> u64 {
        self.lock().act_as_calls
    }

    /// Pulls the plug: the live file system becomes what was durable (and,
    /// with [`CrashMode::SomeUnsynced`], some of what was not), checked as
    /// fsck would; armed faults are gone and the verifier is new, as after
    /// a restart. Objects that survived keep their handles.
    pub fn crash(&self, mode: CrashMode) {
        let mut st = self.lock();
        if mode == CrashMode::SomeUnsynced {
            st.let_some_through();
        }
        let roots: Vec<u64> = st.exports.iter().map(|e| e.root).collect();
        fs::fsck(&mut st.durable, &roots);
        st.live = st.durable.clone();
        st.unsynced.clear();
        st.meta_dirty.clear();
        st.faults.armed.clear();
        st.faults.rates.clear();
        st.crashes += 1;
        st.new_epoch("crash");
    }

    /// What a file holds now, by fileid (tests' view from outside).
    pub fn file_data(&self, fileid: u64) -> Option<Vec<u8>> {
        self.lock().live.get(&fileid).and_then(|n| n.data().cloned())
    }
}

impl State {
    fn now(&mut self) -> Time {
        self.clock_ns += 1000;
        Time {
            seconds: (self.clock_ns.div_euclid(1_000_000_000)) as i64,
            nanos: self.clock_ns.rem_euclid(1_000_000_000) as u32,
        }
    }

    fn new_epoch(&mut self, why: &str) {
        let old = self.verifier;
        let mut new = self.rng.next_u64().max(1);
        if new == old {
            new = new.wrapping_add(1).max(1);
        }
        self.verifier = new;
        tracing::debug!(
            why,
            old = format_args!("{old:016x}"),
            new = format_args!("{new:016x}"),
            "sim: new write verifier"
        );
    }

    fn export(&self, id: u32) -> Option<&SimExport> {
        self.exports.iter().find(|e| e.info.id == id)
    }

    fn handle(&self, export: u32, ftype: FileType, ino: u64) -> Bytes {
        let mut b = BytesMut::with_capacity(HANDLE_BYTES);
        b.put_u8(HANDLE_MAGIC);
        b.put_u8(ftype as u8);
        b.put_u32(export);
        b.put_u64(ino);
        let mac = self.mac(&b);
        b.put_u64(mac);
        b.freeze()
    }

    /// A keyed checksum of a handle's body: enough for a simulator to
    /// tell its own handles from forged ones.
    fn mac(&self, body: &[u8]) -> u64 {
        body.iter().fold(rng::mix(self.key), |h, b| rng::mix(h ^ u64::from(*b)))
    }

    fn object(&self, ino: u64) -> StoreResult<SimObject> {
        let n = self.live.get(&ino).ok_or(StoreError::Stale)?;
        Ok(SimObject { handle: self.handle(n.export, n.ftype, ino), export: n.export, ftype: n.ftype, ino })
    }

    /// The live node of an object the caller holds: Stale once removed.
    fn node(&self, obj: &SimObject) -> StoreResult<&Node> {
        self.live.get(&obj.ino).filter(|n| n.export == obj.export && n.ftype == obj.ftype).ok_or(StoreError::Stale)
    }

    fn node_mut(&mut self, ino: u64) -> &mut Node {
        self.live.get_mut(&ino).expect("checked to exist")
    }

    fn attrs(&self, ino: u64) -> StoreResult<Attrs> {
        let n = self.live.get(&ino).ok_or(StoreError::Stale)?;
        let fsid = self.export(n.export).map_or(0, |e| e.info.fsid);
        let size = n.size();
        Ok(Attrs {
            ftype: n.ftype,
            mode: n.meta.mode,
            nlink: n.meta.nlink,
            uid: n.meta.uid,
            gid: n.meta.gid,
            size,
            used: size.div_ceil(4096) * 4096,
            rdev_major: n.meta.rdev.0,
            rdev_minor: n.meta.rdev.1,
            fsid,
            fileid: ino,
            atime: n.meta.atime,
            mtime: n.meta.mtime,
            ctime: n.meta.ctime,
        })
    }

    /// A fault at `point` on `ino`, as the error it makes (a torn write is
    /// the caller's to carry out: `Ok(true)`).
    fn strike(&mut self, point: SimPoint, ino: u64) -> StoreResult<bool> {
        match self.faults.strike(point, ino, &mut self.rng) {
            None => Ok(false),
            Some(SimAction::Fail(e)) => Err(StoreError::errno(e)),
            Some(SimAction::Torn) if point == SimPoint::Write => Ok(true),
            Some(SimAction::Torn) => Err(StoreError::errno(libc::EIO)),
        }
    }

    /// Flushes an object (fsync): into the durable image with its data or
    /// entries. A failed flush starts a new epoch.
    fn flush(&mut self, ino: u64) -> StoreResult<()> {
        if let Err(e) = self.strike(SimPoint::Sync, ino) {
            self.new_epoch("flush failed");
            // As Linux after a write-back error: the dirty marks are gone.
            self.unsynced.remove(&ino);
            self.meta_dirty.remove(&ino);
            return Err(e);
        }
        let node = self.live.get(&ino).ok_or(StoreError::Stale)?.clone();
        if let Some(d) = node.dir() {
            for (_, target) in d.entries.values() {
                if !self.durable.contains_key(target) {
                    let skeleton = self.live[target].skeleton();
                    self.durable.insert(*target, skeleton);
                }
            }
        }
        self.durable.insert(ino, node);
        self.unsynced.remove(&ino);
        self.meta_dirty.remove(&ino);
        Ok(())
    }

    /// Flushes the data of one write and the file's size (fdatasync of a
    /// range, as RWF_DSYNC does).
    fn flush_range(&mut self, ino: u64, offset: u64, len: u64) -> StoreResult<()> {
        if let Err(e) = self.strike(SimPoint::Sync, ino) {
            self.new_epoch("flush failed");
            self.unsynced.remove(&ino);
            return Err(e);
        }
        let live = self.live.get(&ino).ok_or(StoreError::Stale)?;
        let data = live.data().ok_or(StoreError::errno(libc::EINVAL))?;
        let (from, to) = (offset as usize, (offset + len) as usize);
        let range = data[from..to].to_vec();
        let size = data.len();
        let skeleton = live.skeleton();
        let durable = self.durable.entry(ino).or_insert(skeleton);
        let d = durable.data_mut().expect("a file in both tables");
        d.resize(size, 0);
        d[from..to].copy_from_slice(&range);
        Ok(())
    }

    /// Flushes `ino` when `commit`, then its directory `dir`.
    fn commit_change(&mut self, commit: bool, ino: Option<u64>, dirs: &[u64]) -> StoreResult<()> {
        if !commit {
            return Ok(());
        }
        if let Some(ino) = ino {
            self.flush(ino)?;
        }
        for &d in dirs {
            self.flush(d)?;
        }
        Ok(())
    }

    /// A crash with the disk's write-back half done: each un-flushed write
    /// survives whole (4 in 8), torn (1 in 8) or not at all; each object's
    /// un-flushed metadata survives 1 time in 3.
    fn let_some_through(&mut self) {
        let unsynced = std::mem::take(&mut self.unsynced);
        for (ino, extents) in unsynced {
            for (offset, len) in extents {
                let keep = match self.rng.below(8) {
                    0..4 => len,
                    4 => (self.rng.below(len.div_ceil(SECTOR_BYTES) + 1) * SECTOR_BYTES).min(len),
                    _ => 0,
                };
                let Some(data) = self.live.get(&ino).and_then(Node::data) else { continue };
                let end = (offset + keep).min(data.len() as u64);
                if keep == 0 || end <= offset {
                    continue;
                }
                let bytes = data[offset as usize..end as usize].to_vec();
                let Some(d) = self.durable.get_mut(&ino).and_then(Node::data_mut) else { continue };
                if d.len() < end as usize {
                    d.resize(end as usize, 0);
                }
                d[offset as usize..end as usize].copy_from_slice(&bytes);
            }
        }
        let dirty = std::mem::take(&mut self.meta_dirty);
        for ino in dirty {
            if self.rng.below(3) != 0 {
                continue;
            }
            let Some(live) = self.live.get(&ino).cloned() else { continue };
            if let Some(d) = live.dir() {
                for (_, target) in d.entries.values() {
                    if !self.durable.contains_key(target) {
                        let skeleton = self.live[target].skeleton();
                        self.durable.insert(*target, skeleton);
                    }
                }
            }
            match self.durable.get_mut(&ino) {
                Some(durable) => {
                    durable.meta = live.meta.clone();
                    if let (Body::Dir(dd), Some(ld)) = (&mut durable.body, live.dir()) {
                        *dd = ld.clone();
                    }
                }
                None => {
                    self.durable.insert(ino, live.skeleton());
                }
            }
        }
    }

    /// The directory node of `dir`, searchable (and, with `write`,
    /// writable) by `cred`.
    fn dir_for(&self, cred: &Cred, dir: &SimObject, want: u32) -> StoreResult<&Dir> {
        let n = self.node(dir)?;
        let d = n.dir().ok_or(StoreError::errno(libc::ENOTDIR))?;
        if !fs::may(cred, n, want) {
            return Err(StoreError::errno(libc::EACCES));
        }
        Ok(d)
    }

    /// Applies attribute changes as `cred`, in knfsd's order: size, owner,
    /// mode, times. Each is checked before anything changes.
    fn apply(&mut self, cred: &Cred, ino: u64, set: &SetAttrs) -> StoreResult<()> {
        let n = &self.live[&ino];
        if set.size.is_some() {
            rules::require_regular(n.ftype)?;
            if !(rules::owner_overrides(cred, n.meta.uid) || fs::may(cred, n, W)) {
                return Err(StoreError::errno(libc::EACCES));
            }
        }
        if (set.uid.is_some() || set.gid.is_some()) && !fs::may_chown(cred, n, set.uid, set.gid) {
            return Err(StoreError::errno(libc::EPERM));
        }
        if set.mode.is_some() && !fs::owns(cred, n) {
            return Err(StoreError::errno(libc::EPERM));
        }
        let explicit = matches!(set.atime, SetTime::To(_)) || matches!(set.mtime, SetTime::To(_));
        let to_now = set.atime == SetTime::ServerNow || set.mtime == SetTime::ServerNow;
        if explicit && !fs::owns(cred, n) {
            return Err(StoreError::errno(libc::EPERM));
        }
        if to_now && !fs::owns(cred, n) && !fs::may(cred, n, W) {
            return Err(StoreError::errno(libc::EACCES));
        }
        if set.is_empty() {
            return Ok(());
        }
        let now = self.now();
        let in_group = |g: u32| cred.gid == g || cred.groups().contains(&g);
        let n = self.node_mut(ino);
        if let Some(size) = set.size {
            let d = n.data_mut().expect("a regular file");
            d.resize(usize::try_from(size).map_err(|_| StoreError::errno(libc::EFBIG))?, 0);
            n.meta.mtime = now;
        }
        if set.uid.is_some() || set.gid.is_some() {
            n.meta.uid = set.uid.unwrap_or(n.meta.uid);
            n.meta.gid = set.gid.unwrap_or(n.meta.gid);
            if n.ftype == FileType::Regular && !cred.is_root() {
                n.meta.mode &= !0o6000;
            }
        }
        if let Some(mode) = set.mode
            && rules::mode_applies(n.ftype)
        {
            let mut mode = mode & rules::MODE_BITS;
            // chmod by a non-member drops setgid, as the kernel does.
            if !cred.is_root() && !in_group(n.meta.gid) {
                mode &= !0o2000;
            }
            n.meta.mode = mode;
        }
        n.meta.atime = rules::set_time(set.atime, n.meta.atime, now);
        n.meta.mtime = rules::set_time(set.mtime, n.meta.mtime, now);
        n.meta.ctime = now;
        self.meta_dirty.insert(ino);
        Ok(())
    }

    /// Makes a new object `name` in `dir` as `cred` and returns its inode
    /// number; the caller applies the remaining attributes.
    fn make(&mut self, cred: &Cred, dir: &SimObject, name: &[u8], ftype: FileType, mode: u32, body: Body) -> u64 {
        let now = self.now();
        let ino = self.next_ino;
        self.next_ino += 1;
        let d = &self.live[&dir.ino];
        let setgid_dir = d.meta.mode & 0o2000 != 0;
        let gid = if setgid_dir { d.meta.gid } else { cred.gid };
        let mut mode = mode & rules::MODE_BITS;
        if ftype == FileType::Directory && setgid_dir {
            mode |= 0o2000;
        }
        let nlink = if ftype == FileType::Directory { 2 } else { 1 };
        let node = Node {
            export: dir.export,
            ftype,
            meta: Meta { mode, uid: cred.uid, gid, nlink, atime: now, mtime: now, ctime: now, rdev: (0, 0) },
            body,
        };
        self.live.insert(ino, node);
        let parent = self.node_mut(dir.ino);
        parent.dir_mut().expect("a directory").insert(name, ino);
        if ftype == FileType::Directory {
            parent.meta.nlink += 1;
        }
        parent.meta.mtime = now;
        parent.meta.ctime = now;
        self.meta_dirty.insert(ino);
        self.meta_dirty.insert(dir.ino);
        ino
    }

    /// Checks that `name` (checked by [`rules::check_new_entry`]) may be
    /// made in `dir` by `cred`, as the kernel does.
    fn may_make(&self, cred: &Cred, dir: &SimObject, name: &[u8]) -> StoreResult<()> {
        // As open(O_CREAT): an existing name is EEXIST before the
        // directory's write permission is asked for.
        if self.dir_for(cred, dir, X)?.get(name).is_some() {
            return Err(StoreError::errno(libc::EEXIST));
        }
        self.dir_for(cred, dir, W | X).map(|_| ())
    }

    /// Removes the entry `name` from `dir`, and the object with its last name.
    fn unlink_entry(&mut self, dir: u64, name: &[u8]) {
        let now = self.now();
        let d = self.node_mut(dir);
        let target = d.dir_mut().expect("a directory").remove(name).expect("checked to exist");
        d.meta.mtime = now;
        d.meta.ctime = now;
        let t = self.node_mut(target);
        let is_dir = t.ftype == FileType::Directory;
        t.meta.nlink = if is_dir { 0 } else { t.meta.nlink.saturating_sub(1) };
        t.meta.ctime = now;
        if t.meta.nlink == 0 {
            self.live.remove(&target);
            self.unsynced.remove(&target);
            self.meta_dirty.remove(&target);
        } else {
            self.meta_dirty.insert(target);
        }
        if is_dir {
            self.node_mut(dir).meta.nlink -= 1;
        }
        self.meta_dirty.insert(dir);
    }

    /// The kernel's model: what renameat(2) answers for moving `source`
    /// out of `from_dir` into `to_dir`, over `victim` if the name is
    /// taken (the local store leaves these rules to Linux; its
    /// `tests/sim_agrees.rs` checks this against it). As
    /// `do_renameat2`'s `lock_rename` trap: a directory never goes into
    /// its own subtree (EINVAL), and the target is never an ancestor of
    /// the source, whatever their types (ENOTEMPTY); then as
    /// `vfs_rename`: a directory only over a directory (ENOTDIR), a
    /// non-directory only over a non-directory (EISDIR), a directory only
    /// over an empty one (ENOTEMPTY).
    fn kernel_rename_check(&self, source: u64, from_dir: u64, victim: Option<u64>, to_dir: u64) -> StoreResult<()> {
        let source_is_dir = self.live[&source].ftype == FileType::Directory;
        if source_is_dir && self.is_ancestor(source, to_dir) {
            return Err(StoreError::errno(libc::EINVAL));
        }
        let Some(v) = victim else { return Ok(()) };
        if self.is_ancestor(v, from_dir) {
            return Err(StoreError::errno(libc::ENOTEMPTY));
        }
        let v = &self.live[&v];
        match (source_is_dir, v.ftype == FileType::Directory) {
            (true, false) => Err(StoreError::errno(libc::ENOTDIR)),
            (false, true) => Err(StoreError::errno(libc::EISDIR)),
            (true, true) if !v.dir().expect("a directory").is_empty() => Err(StoreError::errno(libc::ENOTEMPTY)),
            _ => Ok(()),
        }
    }

    /// Whether directory `ancestor` is `ino` or holds it, at any depth.
    fn is_ancestor(&self, ancestor: u64, mut ino: u64) -> bool {
        loop {
            if ino == ancestor {
                return true;
            }
            let Some(parent) = self.live.get(&ino).and_then(Node::dir).map(|d| d.parent) else { return false };
            if parent == ino {
                return false;
            }
            ino = parent;
        }
    }
}

fn require_regular(n: &Node) -> StoreResult<()> {
    rules::require_regular(n.ftype)
}

/// knfsd's rule for READ, WRITE, COMMIT and truncation
/// ([`rules::owner_overrides`]); others need the kernel's permission.
fn permit_io(cred: &Cred, n: &Node, want: u32) -> StoreResult<()> {
    if rules::owner_overrides(cred, n.meta.uid) || fs::may(cred, n, want) {
        Ok(())
    } else {
        Err(StoreError::errno(libc::EACCES))
    }
}

impl crate::Store for SimStore {
    type Object = SimObject;
    type Caller = SimCaller;
    type LockFile = SimLockFile;
    type ReadLease = SimReadLease;

    fn read_lease(&self, obj: &SimObject) -> StoreResult<SimReadLease> {
        let st = self.lock();
        if st.node(obj)?.ftype != FileType::Regular {
            return Err(StoreError::errno(libc::EINVAL));
        }
        leases::take(&self.leases, obj.ino)
    }

    fn write_lease(&self, obj: &SimObject) -> StoreResult<SimReadLease> {
        let st = self.lock();
        if st.node(obj)?.ftype != FileType::Regular {
            return Err(StoreError::errno(libc::EINVAL));
        }
        leases::take_write(&self.leases, obj.ino)
    }

    /// Not a break: a change of the modification time alone is not
    /// watched (the local store's shows as IN_MODIFY, which its write
    /// leases do not watch).
    fn touch_leased(&self, obj: &SimObject, _lease: &SimReadLease) -> StoreResult<()> {
        let mut st = self.lock();
        st.node(obj)?;
        let now = st.now();
        let n = st.node_mut(obj.ino);
        n.meta.mtime = now;
        n.meta.ctime = now;
        st.meta_dirty.insert(obj.ino);
        Ok(())
    }

    fn open_for_locks(&self, who: &SimCaller, obj: &SimObject) -> StoreResult<SimLockFile> {
        let st = self.lock();
        let n = st.node(obj)?;
        rules::check_lock_file(n.ftype)?;
        if !(rules::owner_overrides(&who.cred, n.meta.uid) || fs::may(&who.cred, n, R)) {
            return Err(StoreError::errno(libc::EACCES));
        }
        // The local store opens a description of its own, for writing.
        leases::before_store_open(&self.leases, obj.ino)?;
        Ok(SimLockFile::open(&self.locks, obj.ino, true))
    }

    /// Each one lent is a description of its own here: the local store
    /// arbitrates among the owners of its one lent description as the
    /// kernel does among descriptions. It breaks no lease.
    fn lock_file_on_lease(&self, obj: &SimObject, lease: &SimReadLease) -> StoreResult<SimLockFile> {
        if lease.ino() != obj.ino {
            return Err(StoreError::errno(libc::EINVAL));
        }
        Ok(SimLockFile::open(&self.locks, obj.ino, lease.is_write()))
    }

    fn exports(&self) -> Vec<ExportInfo> {
        self.lock().exports.iter().map(|e| e.info.clone()).collect()
    }

    fn write_verifier(&self) -> Verifier {
        self.lock().verifier.to_be_bytes()
    }

    fn act_as(&self, cred: &Cred) -> StoreResult<SimCaller> {
        let mut st = self.lock();
        st.act_as_calls += 1;
        // The kernel takes no uid or gid of -1.
        if cred.uid == u32::MAX || cred.gid == u32::MAX {
            return Err(StoreError::errno(libc::EPERM));
        }
        Ok(SimCaller { cred: *cred })
    }

    fn resolve<T, E: From<StoreError>>(
        &self,
        fh: &Bytes,
        admit: impl FnOnce(u32) -> Result<T, E>,
    ) -> Result<(SimObject, T), E> {
        let mut st = self.lock();
        if fh.len() != HANDLE_BYTES || fh[0] != HANDLE_MAGIC {
            return Err(StoreError::BadHandle.into());
        }
        let mac = u64::from_be_bytes(fh[14..22].try_into().expect("8 bytes"));
        if st.mac(&fh[..14]) != mac {
            return Err(StoreError::BadHandle.into());
        }
        let ftype = FileType::from_u8(fh[1]).ok_or(StoreError::BadHandle)?;
        let export = u32::from_be_bytes(fh[2..6].try_into().expect("4 bytes"));
        let ino = u64::from_be_bytes(fh[6..14].try_into().expect("8 bytes"));
        if st.export(export).is_none() {
            return Err(StoreError::Stale.into());
        }
        let admitted = admit(export)?;
        st.strike(SimPoint::Open, ino)?;
        let obj = SimObject { handle: fh.clone(), export, ftype, ino };
        st.node(&obj)?;
        Ok((obj, admitted))
    }

    fn lookup_path(&self, export_id: u32, path: &[u8]) -> StoreResult<SimObject> {
        let st = self.lock();
        let mut ino = st.export(export_id).ok_or(StoreError::Stale)?.root;
        for component in rules::path_components(path) {
            let component = component?;
            let d = st.live[&ino].dir().ok_or(StoreError::errno(libc::ENOTDIR))?;
            ino = d.get(component).ok_or(StoreError::errno(libc::ENOENT))?;
            if st.live[&ino].ftype != FileType::Directory {
                return Err(StoreError::errno(libc::ENOTDIR));
            }
        }
        st.object(ino)
    }

    fn getattr(&self, obj: &SimObject) -> StoreResult<Attrs> {
        let mut st = self.lock();
        st.node(obj)?;
        st.strike(SimPoint::Getattr, obj.ino)?;
        st.attrs(obj.ino)
    }

    fn setattr(
        &self,
        who: &SimCaller,
        obj: &SimObject,
        set: &SetAttrs,
        guard: Option<Time>,
        commit: bool,
    ) -> StoreResult<()> {
        let mut st = self.lock();
        st.node(obj)?;
        if set.size.is_some() {
            leases::before_store_write(&self.leases, obj.ino)?;
        }
        st.strike(SimPoint::Setattr, obj.ino)?;
        rules::check_guard(guard, || Ok(st.attrs(obj.ino)?.ctime))?;
        st.apply(&who.cred, obj.ino, set)?;
        leases::attributes_changed(&self.leases, obj.ino);
        st.commit_change(commit, Some(obj.ino), &[])
    }

    fn access(&self, who: &SimCaller, obj: &SimObject, want: u32) -> StoreResult<u32> {
        let mut st = self.lock();
        let n = st.node(obj)?;
        let (read, write, exec) = (fs::may(&who.cred, n, R), fs::may(&who.cred, n, W), fs::may(&who.cred, n, X));
        let ftype = n.ftype;
        st.strike(SimPoint::Access, obj.ino)?;
        Ok(rules::access_granted(ftype, read, write, exec, want))
    }

    fn readlink(&self, _who: &SimCaller, obj: &SimObject) -> StoreResult<Vec<u8>> {
        let mut st = self.lock();
        let target = match &st.node(obj)?.body {
            Body::Symlink(t) => t.clone(),
            _ => return Err(StoreError::errno(libc::EINVAL)),
        };
        st.strike(SimPoint::Readlink, obj.ino)?;
        Ok(target)
    }

    fn lookup(&self, who: &SimCaller, dir: &SimObject, name: &[u8]) -> StoreResult<(SimObject, Attrs)> {
        let mut st = self.lock();
        st.node(dir)?;
        st.strike(SimPoint::Lookup, dir.ino)?;
        let ino = lookup_ino(&st, &who.cred, dir, name)?;
        Ok((st.object(ino)?, st.attrs(ino)?))
    }

    fn cookie_verifier(&self, dir: &SimObject) -> [u8; 8] {
        let st = self.lock();
        let fsid = st.export(dir.export).map_or(0, |e| e.info.fsid);
        (fsid ^ 0x7369_6d63_6f6f_6b69).to_be_bytes()
    }

    fn readdir(
        &self,
        who: &SimCaller,
        dir: &SimObject,
        cookie: u64,
        mut sink: impl FnMut(DirEntry<'_>) -> bool,
    ) -> StoreResult<bool> {
        // Collected under the lock, handed out without it: the sink may
        // call back into the store (READDIRPLUS).
        let listing: Vec<(Vec<u8>, u64, u64)> = {
            let mut st = self.lock();
            let n = st.node(dir)?;
            let d = n.dir().ok_or(StoreError::errno(libc::ENOTDIR))?;
            if !(fs::may(&who.cred, n, R)) {
                return Err(StoreError::errno(libc::EACCES));
            }
            if cookie >= d.next_cookie {
                return Err(StoreError::BadCookie);
            }
            let mut out = Vec::new();
            if cookie == 0 {
                out.push((b".".to_vec(), dir.ino, 1));
            }
            if cookie <= 1 {
                out.push((b"..".to_vec(), d.parent, 2));
            }
            let from = cookie.max(fs::FIRST_ENTRY_COOKIE - 1) + 1;
            out.extend(d.entries.range(from..).map(|(c, (name, ino))| (name.clone(), *ino, *c)));
            st.strike(SimPoint::Readdir, dir.ino)?;
            out
        };
        for (name, fileid, cookie) in &listing {
            if !sink(DirEntry { name, fileid: *fileid, cookie: *cookie }) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn entry_plus(&self, who: &SimCaller, dir: &SimObject, name: &[u8]) -> Option<(Bytes, Attrs)> {
        let st = self.lock();
        let ino = lookup_ino(&st, &who.cred, dir, name).ok()?;
        let obj = st.object(ino).ok()?;
        Some((obj.handle, st.attrs(ino).ok()?))
    }

    fn check_io(&self, who: &SimCaller, obj: &SimObject, write: bool) -> StoreResult<Attrs> {
        let st = self.lock();
        let n = st.node(obj)?;
        require_regular(n)?;
        permit_io(&who.cred, n, if write { W } else { R })?;
        st.attrs(obj.ino)
    }

    fn read(&self, who: &SimCaller, obj: &SimObject, offset: u64, count: usize) -> StoreResult<ReadOut> {
        let mut st = self.lock();
        let n = st.node(obj)?;
        require_regular(n)?;
        permit_io(&who.cred, n, R)?;
        rules::check_read_offset(offset)?;
        st.strike(SimPoint::Read, obj.ino)?;
        let attrs = st.attrs(obj.ino)?;
        let d = st.live[&obj.ino].data().expect("a regular file");
        let start = offset.min(d.len() as u64) as usize;
        let end = start.saturating_add(count).min(d.len());
        let data = Bytes::copy_from_slice(&d[start..end]);
        let eof = rules::read_eof(offset, data.len(), count, attrs.size);
        Ok(ReadOut { data: data.into(), eof, attrs })
    }

    fn write(
        &self,
        who: &SimCaller,
        obj: &SimObject,
        offset: u64,
        data: &[u8],
        stability: Stability,
    ) -> StoreResult<WriteOut> {
        let mut st = self.lock();
        let n = st.node(obj)?;
        require_regular(n)?;
        permit_io(&who.cred, n, W)?;
        leases::before_store_write(&self.leases, obj.ino)?;
        let before = st.attrs(obj.ino)?;
        rules::check_write_extent(offset, data.len())?;
        let verifier = st.verifier.to_be_bytes();
        let (torn, struck) = match st.strike(SimPoint::Write, obj.ino) {
            Ok(torn) => (torn, None),
            Err(e) => (false, Some(e)),
        };
        if let Some(e) = struck {
            if rules::write_error_loses_data(e.raw_os_error()) {
                st.new_epoch("write failed");
            }
            return Err(e);
        }
        let len = if torn {
            let sectors = (data.len() as u64).div_ceil(SECTOR_BYTES);
            (st.rng.below(sectors + 1) * SECTOR_BYTES).min(data.len() as u64)
        } else {
            data.len() as u64
        };
        if len > 0 {
            let now = st.now();
            let n = st.node_mut(obj.ino);
            let d = n.data_mut().expect("a regular file");
            let (from, to) = (offset as usize, (offset + len) as usize);
            if d.len() < to {
                d.resize(to, 0);
            }
            d[from..to].copy_from_slice(&data[..len as usize]);
            n.meta.mtime = now;
            n.meta.ctime = now;
            st.unsynced.entry(obj.ino).or_default().push((offset, len));
            st.meta_dirty.insert(obj.ino);
        }
        if torn {
            st.new_epoch("torn write");
            return Err(StoreError::errno(libc::EIO));
        }
        match stability {
            Stability::Unstable => {}
            Stability::DataSync => st.flush_range(obj.ino, offset, len)?,
            Stability::FileSync => st.flush(obj.ino)?,
        }
        let after = st.attrs(obj.ino)?;
        Ok(WriteOut { before, after, verifier })
    }

    fn commit(&self, who: &SimCaller, obj: &SimObject, flush: bool) -> StoreResult<Verifier> {
        let mut st = self.lock();
        let n = st.node(obj)?;
        if !n.ftype.is_special() {
            permit_io(&who.cred, n, W)?;
        }
        if flush {
            st.flush(obj.ino)?;
        }
        Ok(st.verifier.to_be_bytes())
    }

    fn create(
        &self,
        who: &SimCaller,
        dir: &SimObject,
        name: &[u8],
        mode: CreateMode,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<SimObject>> {
        let mut st = self.lock();
        let dir_type = st.node(dir)?.ftype;
        st.strike(SimPoint::Create, dir.ino)?;
        let cred = &who.cred;
        rules::check_new_entry(dir_type, name)?;
        match st.may_make(cred, dir, name) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                return create_existing(&mut st, cred, dir, name, mode, set, commit);
            }
            other => other?,
        }
        let perm = rules::initial_mode(set, rules::CREATE_MODE_DEFAULT);
        let ino = st.make(cred, dir, name, FileType::Regular, perm, Body::File(Vec::new()));
        finish(&mut st, cred, dir, ino, &rules::attrs_after_create(mode, set), commit)
    }

    fn mkdir(
        &self,
        who: &SimCaller,
        dir: &SimObject,
        name: &[u8],
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<SimObject>> {
        let mut st = self.lock();
        let dir_type = st.node(dir)?.ftype;
        st.strike(SimPoint::Mkdir, dir.ino)?;
        rules::check_new_entry(dir_type, name)?;
        st.may_make(&who.cred, dir, name)?;
        let perm = rules::initial_mode(set, rules::MKDIR_MODE_DEFAULT);
        let ino = st.make(&who.cred, dir, name, FileType::Directory, perm, Body::Dir(Dir::new(dir.ino)));
        finish(&mut st, &who.cred, dir, ino, &rules::attrs_after_make(set), commit)
    }

    fn symlink(
        &self,
        who: &SimCaller,
        dir: &SimObject,
        name: &[u8],
        target: &[u8],
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<SimObject>> {
        let mut st = self.lock();
        let dir_type = st.node(dir)?.ftype;
        st.strike(SimPoint::Symlink, dir.ino)?;
        rules::check_new_entry(dir_type, name)?;
        rules::check_symlink_target(target)?;
        st.may_make(&who.cred, dir, name)?;
        let ino = st.make(&who.cred, dir, name, FileType::Symlink, 0o777, Body::Symlink(target.to_vec()));
        finish(&mut st, &who.cred, dir, ino, &rules::attrs_after_make(set), commit)
    }

    fn mknod(
        &self,
        who: &SimCaller,
        dir: &SimObject,
        name: &[u8],
        kind: NodeKind,
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<SimObject>> {
        let mut st = self.lock();
        let dir_type = st.node(dir)?.ftype;
        st.strike(SimPoint::Mknod, dir.ino)?;
        rules::check_new_entry(dir_type, name)?;
        let (ftype, rdev) = rules::mknod_kind(&who.cred, kind)?;
        st.may_make(&who.cred, dir, name)?;
        let perm = rules::initial_mode(set, rules::MKNOD_MODE_DEFAULT);
        let ino = st.make(&who.cred, dir, name, ftype, perm, Body::Special);
        st.node_mut(ino).meta.rdev = rdev;
        finish(&mut st, &who.cred, dir, ino, &rules::attrs_after_make(set), commit)
    }

    fn link(
        &self,
        who: &SimCaller,
        file: &SimObject,
        dir: &SimObject,
        name: &[u8],
        commit: bool,
    ) -> StoreResult<Attrs> {
        let mut st = self.lock();
        st.node(file)?;
        let dir_type = st.node(dir)?.ftype;
        st.strike(SimPoint::Link, file.ino)?;
        rules::check_link(file.ftype, file.export, dir_type, dir.export, name)?;
        if !fs::may_hardlink(&who.cred, &st.live[&file.ino]) {
            return Err(StoreError::errno(libc::EPERM));
        }
        st.may_make(&who.cred, dir, name)?;
        let now = st.now();
        let d = st.node_mut(dir.ino);
        d.dir_mut().expect("a directory").insert(name, file.ino);
        d.meta.mtime = now;
        d.meta.ctime = now;
        let f = st.node_mut(file.ino);
        f.meta.nlink += 1;
        f.meta.ctime = now;
        leases::attributes_changed(&self.leases, file.ino);
        st.meta_dirty.insert(file.ino);
        st.meta_dirty.insert(dir.ino);
        st.commit_change(commit, Some(file.ino), &[dir.ino])?;
        st.attrs(file.ino)
    }

    fn remove(&self, who: &SimCaller, dir: &SimObject, name: &[u8], commit: bool) -> StoreResult<()> {
        unlink(self, who, dir, name, false, commit)
    }

    fn rmdir(&self, who: &SimCaller, dir: &SimObject, name: &[u8], commit: bool) -> StoreResult<()> {
        unlink(self, who, dir, name, true, commit)
    }

    fn rename(
        &self,
        who: &SimCaller,
        from_dir: &SimObject,
        from: &[u8],
        to_dir: &SimObject,
        to: &[u8],
        commit: bool,
    ) -> StoreResult<()> {
        let mut st = self.lock();
        let from_type = st.node(from_dir)?.ftype;
        let to_type = st.node(to_dir)?.ftype;
        st.strike(SimPoint::Rename, from_dir.ino)?;
        let cred = &who.cred;
        rules::check_rename((from_type, from_dir.export), from, (to_type, to_dir.export), to)?;
        let source = st.dir_for(cred, from_dir, W | X)?.get(from).ok_or(StoreError::errno(libc::ENOENT))?;
        let victim = st.dir_for(cred, to_dir, W | X)?.get(to);
        let (fd, td) = (&st.live[&from_dir.ino], &st.live[&to_dir.ino]);
        if !fs::sticky_allows(cred, fd, &st.live[&source])
            || victim.is_some_and(|v| !fs::sticky_allows(cred, td, &st.live[&v]))
        {
            return Err(StoreError::errno(libc::EPERM));
        }
        if victim == Some(source) {
            return Ok(());
        }
        st.kernel_rename_check(source, from_dir.ino, victim, to_dir.ino)?;
        let source_is_dir = st.live[&source].ftype == FileType::Directory;
        if victim.is_some() {
            st.unlink_entry(to_dir.ino, to);
        }
        let now = st.now();
        let fdn = st.node_mut(from_dir.ino);
        fdn.dir_mut().expect("a directory").remove(from);
        fdn.meta.mtime = now;
        fdn.meta.ctime = now;
        if source_is_dir {
            fdn.meta.nlink -= 1;
        }
        let tdn = st.node_mut(to_dir.ino);
        tdn.dir_mut().expect("a directory").insert(to, source);
        tdn.meta.mtime = now;
        tdn.meta.ctime = now;
        if source_is_dir {
            tdn.meta.nlink += 1;
        }
        let s = st.node_mut(source);
        s.meta.ctime = now;
        if let Some(d) = s.dir_mut() {
            d.parent = to_dir.ino;
        }
        st.meta_dirty.extend([from_dir.ino, to_dir.ino, source]);
        let dirs: &[u64] = if from_dir.ino == to_dir.ino { &[from_dir.ino] } else { &[from_dir.ino, to_dir.ino] };
        st.commit_change(commit, None, dirs)
    }

    fn fsstat(&self, obj: &SimObject) -> StoreResult<FsStat> {
        let st = self.lock();
        st.node(obj)?;
        let (used, files) = st
            .live
            .values()
            .filter(|n| n.export == obj.export)
            .fold((0u64, 0u64), |(b, f), n| (b + n.size().div_ceil(4096) * 4096, f + 1));
        let free = CAPACITY_BYTES.saturating_sub(used);
        let free_files = CAPACITY_FILES.saturating_sub(files);
        Ok(FsStat {
            total_bytes: CAPACITY_BYTES,
            free_bytes: free,
            avail_bytes: free,
            total_files: CAPACITY_FILES,
            free_files,
            avail_files: free_files,
        })
    }

    fn limits(&self, _obj: &SimObject) -> Limits {
        Limits { link_max: 32000, name_max: crate::NAME_BYTES_MAX as u32, file_size_max: i64::MAX as u64 }
    }

    fn seek(&self, who: &SimCaller, obj: &SimObject, offset: u64, what: SeekWhat) -> StoreResult<u64> {
        let mut st = self.lock();
        let n = st.node(obj)?;
        require_regular(n)?;
        permit_io(&who.cred, n, R)?;
        let size = n.size();
        st.strike(SimPoint::Read, obj.ino)?;
        rules::seek_dense(size, offset, what)
    }

    fn fallocate(
        &self,
        who: &SimCaller,
        obj: &SimObject,
        space: Space,
        offset: u64,
        len: u64,
        commit: bool,
    ) -> StoreResult<()> {
        let mut st = self.lock();
        let n = st.node(obj)?;
        require_regular(n)?;
        permit_io(&who.cred, n, W)?;
        leases::before_store_write(&self.leases, obj.ino)?;
        rules::check_space_extent(offset, len)?;
        st.strike(SimPoint::Write, obj.ino)?;
        let now = st.now();
        let n = st.node_mut(obj.ino);
        let d = n.data_mut().expect("a regular file");
        let end = usize::try_from(offset + len).map_err(|_| StoreError::errno(libc::EFBIG))?;
        match space {
            Space::Allocate if d.len() < end => d.resize(end, 0),
            Space::Allocate => {}
            Space::PunchHole => {
                let to = end.min(d.len());
                let from = (offset as usize).min(to);
                d[from..to].fill(0);
            }
        }
        n.meta.mtime = now;
        n.meta.ctime = now;
        st.unsynced.entry(obj.ino).or_default().push((offset, len));
        st.meta_dirty.insert(obj.ino);
        st.commit_change(commit, Some(obj.ino), &[])
    }

    fn copy_range(
        &self,
        who: &SimCaller,
        src: &SimObject,
        src_offset: u64,
        dst: &SimObject,
        dst_offset: u64,
        len: u64,
        commit: bool,
    ) -> StoreResult<u64> {
        let mut st = self.lock();
        let (s, d) = (st.node(src)?, st.node(dst)?);
        require_regular(s)?;
        require_regular(d)?;
        permit_io(&who.cred, s, R)?;
        permit_io(&who.cred, d, W)?;
        leases::before_store_write(&self.leases, dst.ino)?;
        rules::check_copy(src.ino == dst.ino, src_offset, dst_offset, len)?;
        let n = rules::copy_len(s.size(), src_offset, len);
        if n == 0 {
            return Ok(0);
        }
        st.strike(SimPoint::Write, dst.ino)?;
        let from = src_offset as usize;
        let bytes = st.live[&src.ino].data().expect("a regular file")[from..from + n as usize].to_vec();
        let now = st.now();
        let node = st.node_mut(dst.ino);
        let data = node.data_mut().expect("a regular file");
        let (at, end) = (dst_offset as usize, (dst_offset + n) as usize);
        if data.len() < end {
            data.resize(end, 0);
        }
        data[at..end].copy_from_slice(&bytes);
        node.meta.mtime = now;
        node.meta.ctime = now;
        st.unsynced.entry(dst.ino).or_default().push((dst_offset, n));
        st.meta_dirty.insert(dst.ino);
        st.commit_change(commit, Some(dst.ino), &[])?;
        Ok(n)
    }

    fn sync_all(&self) -> StoreResult<()> {
        let mut st = self.lock();
        let mut inos: Vec<u64> = st.live.keys().copied().collect();
        inos.sort_unstable();
        inos.into_iter().try_for_each(|ino| st.flush(ino))
    }

    /// A flush of the export's root, which a `Sync` fault fails.
    fn check_export(&self, export_id: u32) -> StoreResult<()> {
        let mut st = self.lock();
        let root = st.export(export_id).ok_or(StoreError::Stale)?.root;
        st.strike(SimPoint::Sync, root).map(|_| ())
    }
}

/// The object `name` in `dir` for `cred`: "." is `dir`, ".." its parent
/// (the export root's is the root).
fn lookup_ino(st: &State, cred: &Cred, dir: &SimObject, name: &[u8]) -> StoreResult<u64> {
    check_name(name)?;
    let d = st.dir_for(cred, dir, X)?;
    match name {
        b"." => Ok(dir.ino),
        b".." => Ok(d.parent),
        _ => d.get(name).ok_or(StoreError::errno(libc::ENOENT)),
    }
}

/// CREATE of a name that exists: fine for UNCHECKED (an existing regular
/// file, truncated if asked) and for the retransmission of an EXCLUSIVE
/// create of a file still empty; otherwise EEXIST.
fn create_existing(
    st: &mut State,
    cred: &Cred,
    dir: &SimObject,
    name: &[u8],
    mode: CreateMode,
    set: &SetAttrs,
    commit: bool,
) -> StoreResult<Created<SimObject>> {
    let ino = lookup_ino(st, cred, dir, name)?;
    let attrs = st.attrs(ino)?;
    match rules::create_existing(mode, set, &attrs)? {
        CreateExisting::Use => Ok(Created { object: st.object(ino)?, attrs }),
        CreateExisting::Resize(size) => {
            st.apply(cred, ino, &SetAttrs { size: Some(size), ..SetAttrs::default() })?;
            st.commit_change(commit, Some(ino), &[])?;
            Ok(Created { object: st.object(ino)?, attrs: st.attrs(ino)? })
        }
    }
}

/// Applies the attributes the creation did not, and flushes the new object
/// and its directory on a sync export.
fn finish(
    st: &mut State,
    cred: &Cred,
    dir: &SimObject,
    ino: u64,
    rest: &SetAttrs,
    commit: bool,
) -> StoreResult<Created<SimObject>> {
    st.apply(cred, ino, rest)?;
    st.commit_change(commit, Some(ino), &[dir.ino])?;
    Ok(Created { object: st.object(ino)?, attrs: st.attrs(ino)? })
}

fn unlink(
    store: &SimStore,
    who: &SimCaller,
    dir: &SimObject,
    name: &[u8],
    is_dir: bool,
    commit: bool,
) -> StoreResult<()> {
    let mut st = store.lock();
    let dir_type = st.node(dir)?.ftype;
    st.strike(if is_dir { SimPoint::Rmdir } else { SimPoint::Remove }, dir.ino)?;
    let cred = &who.cred;
    rules::check_unlink(dir_type, name)?;
    let target = st.dir_for(cred, dir, W | X)?.get(name).ok_or(StoreError::errno(libc::ENOENT))?;
    let (d, t) = (&st.live[&dir.ino], &st.live[&target]);
    if !fs::sticky_allows(cred, d, t) {
        return Err(StoreError::errno(libc::EPERM));
    }
    match (is_dir, t.ftype == FileType::Directory) {
        (true, false) => return Err(StoreError::errno(libc::ENOTDIR)),
        (false, true) => return Err(StoreError::errno(libc::EISDIR)),
        (true, true) if !t.dir().expect("a directory").is_empty() => return Err(StoreError::errno(libc::ENOTEMPTY)),
        _ => {}
    }
    st.unlink_entry(dir.ino, name);
    st.commit_change(commit, None, &[dir.ino])
}

#[cfg(test)]
mod tests;

//! A WRITE racing a change of what it took a moment before, on the
//! simulated store and devices: the log (swapped by `keel cache remove`)
//! or its file's state in the index (released by the destager once the
//! file's data was on the back end). A store wrapper pauses the WRITE in
//! its permission check, after it took both and before it appends, and
//! runs the change right there; then a power cut (or a read) must still
//! show the acknowledged data.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use keel_cache::device::SimDevice;
use keel_cache::{CacheConfig, CacheDevice, CacheMode, CacheStore, Shared};
use keel_store::sim::{CrashMode, Rng, SimCaller, SimLockFile, SimObject, SimStore};
use keel_store::{
    Attrs, CreateMode, Created, Cred, DirEntry, ExportInfo, FsStat, Limits, NodeKind, ReadOut, SeekWhat, SetAttrs,
    Space, Stability, Store, StoreError, StoreResult, Time, Verifier, WriteOut,
};

const DEVICE_BYTES: u64 = 64 << 20;
const ROOT: Cred = Cred::ROOT;

type Pause = Box<dyn FnOnce() + Send>;

/// The simulated store, with a hook run once in a WRITE's permission check
/// (`check_io` for writing: the cache calls it between taking the log and
/// appending to it).
struct Paused {
    sim: Arc<SimStore>,
    on_write_check: Mutex<Option<Pause>>,
}

impl Store for Paused {
    type Object = SimObject;
    type Caller = SimCaller;
    type LockFile = SimLockFile;
    type ReadLease = keel_store::sim::SimReadLease;

    fn read_lease(&self, obj: &SimObject) -> StoreResult<keel_store::sim::SimReadLease> {
        self.sim.read_lease(obj)
    }

    fn check_io(&self, who: &SimCaller, obj: &SimObject, write: bool) -> StoreResult<Attrs> {
        let r = self.sim.check_io(who, obj, write);
        let pause = if write { self.on_write_check.lock().unwrap().take() } else { None };
        if let Some(pause) = pause {
            pause();
        }
        r
    }

    fn exports(&self) -> Vec<ExportInfo> {
        self.sim.exports()
    }
    fn write_verifier(&self) -> Verifier {
        self.sim.write_verifier()
    }
    fn act_as(&self, cred: &Cred) -> StoreResult<SimCaller> {
        self.sim.act_as(cred)
    }
    fn resolve<T, E: From<StoreError>>(
        &self,
        fh: &Bytes,
        admit: impl FnOnce(u32) -> Result<T, E>,
    ) -> Result<(SimObject, T), E> {
        self.sim.resolve(fh, admit)
    }
    fn lookup_path(&self, export_id: u32, path: &[u8]) -> StoreResult<SimObject> {
        self.sim.lookup_path(export_id, path)
    }
    fn getattr(&self, obj: &SimObject) -> StoreResult<Attrs> {
        self.sim.getattr(obj)
    }
    fn setattr(
        &self,
        who: &SimCaller,
        obj: &SimObject,
        set: &SetAttrs,
        guard: Option<Time>,
        commit: bool,
    ) -> StoreResult<()> {
        self.sim.setattr(who, obj, set, guard, commit)
    }
    fn access(&self, who: &SimCaller, obj: &SimObject, want: u32) -> StoreResult<u32> {
        self.sim.access(who, obj, want)
    }
    fn readlink(&self, who: &SimCaller, obj: &SimObject) -> StoreResult<Vec<u8>> {
        self.sim.readlink(who, obj)
    }
    fn lookup(&self, who: &SimCaller, dir: &SimObject, name: &[u8]) -> StoreResult<(SimObject, Attrs)> {
        self.sim.lookup(who, dir, name)
    }
    fn cookie_verifier(&self, dir: &SimObject) -> [u8; 8] {
        self.sim.cookie_verifier(dir)
    }
    fn readdir(
        &self,
        who: &SimCaller,
        dir: &SimObject,
        cookie: u64,
        sink: impl FnMut(DirEntry<'_>) -> bool,
    ) -> StoreResult<bool> {
        self.sim.readdir(who, dir, cookie, sink)
    }
    fn entry_plus(&self, who: &SimCaller, dir: &SimObject, name: &[u8]) -> Option<(Bytes, Attrs)> {
        self.sim.entry_plus(who, dir, name)
    }
    fn read(&self, who: &SimCaller, obj: &SimObject, offset: u64, count: usize) -> StoreResult<ReadOut> {
        self.sim.read(who, obj, offset, count)
    }
    fn write(
        &self,
        who: &SimCaller,
        obj: &SimObject,
        offset: u64,
        data: &[u8],
        stability: Stability,
    ) -> StoreResult<WriteOut> {
        self.sim.write(who, obj, offset, data, stability)
    }
    fn commit(&self, who: &SimCaller, obj: &SimObject, flush: bool) -> StoreResult<Verifier> {
        self.sim.commit(who, obj, flush)
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
        self.sim.create(who, dir, name, mode, set, commit)
    }
    fn mkdir(
        &self,
        who: &SimCaller,
        dir: &SimObject,
        name: &[u8],
        set: &SetAttrs,
        commit: bool,
    ) -> StoreResult<Created<SimObject>> {
        self.sim.mkdir(who, dir, name, set, commit)
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
        self.sim.symlink(who, dir, name, target, set, commit)
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
        self.sim.mknod(who, dir, name, kind, set, commit)
    }
    fn link(
        &self,
        who: &SimCaller,
        file: &SimObject,
        dir: &SimObject,
        name: &[u8],
        commit: bool,
    ) -> StoreResult<Attrs> {
        self.sim.link(who, file, dir, name, commit)
    }
    fn remove(&self, who: &SimCaller, dir: &SimObject, name: &[u8], commit: bool) -> StoreResult<()> {
        self.sim.remove(who, dir, name, commit)
    }
    fn rmdir(&self, who: &SimCaller, dir: &SimObject, name: &[u8], commit: bool) -> StoreResult<()> {
        self.sim.rmdir(who, dir, name, commit)
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
        self.sim.rename(who, from_dir, from, to_dir, to, commit)
    }
    fn fsstat(&self, obj: &SimObject) -> StoreResult<FsStat> {
        self.sim.fsstat(obj)
    }
    fn limits(&self, obj: &SimObject) -> Limits {
        self.sim.limits(obj)
    }
    fn sync_all(&self) -> StoreResult<()> {
        self.sim.sync_all()
    }
    fn check_export(&self, export_id: u32) -> StoreResult<()> {
        self.sim.check_export(export_id)
    }
    fn open_for_locks(&self, who: &SimCaller, obj: &SimObject) -> StoreResult<SimLockFile> {
        self.sim.open_for_locks(who, obj)
    }
    fn seek(&self, who: &SimCaller, obj: &SimObject, offset: u64, what: SeekWhat) -> StoreResult<u64> {
        self.sim.seek(who, obj, offset, what)
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
        self.sim.fallocate(who, obj, space, offset, len, commit)
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
        self.sim.copy_range(who, src, src_offset, dst, dst_offset, len, commit)
    }
}

struct Rig {
    store: Arc<Paused>,
    devs: Vec<Arc<SimDevice>>,
    cache: Option<CacheStore<Paused>>,
}

impl Rig {
    fn new(seed: u64, devices: usize) -> Self {
        let sim = Arc::new(SimStore::new(seed));
        let store = Arc::new(Paused { sim, on_write_check: Mutex::new(None) });
        let devs = (0..devices).map(|i| Arc::new(SimDevice::new(DEVICE_BYTES, seed ^ (i as u64 + 1)))).collect();
        let mut rig = Rig { store, devs, cache: None };
        rig.open(&(0..devices).collect::<Vec<_>>());
        rig
    }

    /// Starts the cache on devices `which` (by number).
    fn open(&mut self, which: &[usize]) {
        let devices = which
            .iter()
            .map(|&i| CacheDevice { name: format!("sim{i}"), id: None, io: self.devs[i].clone() as Arc<_> })
            .collect();
        let config = CacheConfig {
            modes: HashMap::from([(1, CacheMode::WriteBack)]),
            background_destage: false,
            ..CacheConfig::default()
        };
        self.cache = Some(CacheStore::with_devices(self.store.clone(), devices, &config).expect("open the cache"));
    }

    fn c(&self) -> &CacheStore<Paused> {
        self.cache.as_ref().expect("open")
    }

    fn shared(&self) -> Arc<Shared<Paused>> {
        self.c().shared().clone()
    }

    /// Power cut of the devices and the back end; the cache starts again
    /// on devices `which`.
    fn power_cut(&mut self, which: &[usize]) {
        self.cache.take();
        for d in &self.devs {
            d.power_cut(false);
        }
        self.store.sim.crash(CrashMode::DurableOnly);
        self.open(which);
    }

    fn file(&self, name: &str) -> SimObject {
        let c = self.c();
        let who = c.act_as(&ROOT).unwrap();
        let root = c.lookup_path(1, b"").unwrap();
        c.create(&who, &root, name.as_bytes(), CreateMode::Guarded, &SetAttrs::default(), true).unwrap().object
    }

    fn write(&self, f: &SimObject, offset: u64, data: &[u8], how: Stability) {
        let c = self.c();
        c.write(&c.act_as(&ROOT).unwrap(), f, offset, data, how).unwrap();
    }

    /// The next WRITE runs `change` between taking the log and appending.
    fn pause_next_write(&self, change: impl FnOnce() + Send + 'static) {
        *self.store.on_write_check.lock().unwrap() = Some(Box::new(change));
    }

    fn read_all(&self, f: &SimObject) -> Vec<u8> {
        let c = self.c();
        let out = c.read(&c.act_as(&ROOT).unwrap(), f, 0, 1 << 24).unwrap();
        out.data.into_bytes().unwrap().to_vec()
    }

    fn backend(&self, f: &SimObject) -> Vec<u8> {
        self.store.sim.file_data(f.fileid()).unwrap()
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed);
    (0..len).map(|_| r.next_u64() as u8).collect()
}

/// `keel cache remove` of a log mirror, with a third device to take its
/// place, moves the log while a stable WRITE holds the old one: the WRITE
/// must land in the new log (or on the back end), not in the old one that
/// no start reads again.
#[test]
fn a_write_holding_the_log_while_a_removal_moves_it_is_not_lost() {
    let mut rig = Rig::new(51, 3);
    let f = rig.file("f");
    let first = pattern(51, 20_000);
    rig.write(&f, 0, &first, Stability::FileSync);
    let g = rig.file("g");
    let sh = rig.shared();
    rig.pause_next_write(move || sh.remove_device("sim0", |_| {}).expect("remove sim0"));
    let second = pattern(52, 8192);
    rig.write(&g, 0, &second, Stability::FileSync);
    let mirrors: Vec<String> = rig.shared().log().unwrap().mirrors().iter().map(|m| m.name.clone()).collect();
    assert_eq!(mirrors, ["sim1", "sim2"], "the log moved while the write waited");
    assert!(rig.read_all(&g) == second, "a read after the write does not show it");
    rig.power_cut(&[1, 2]);
    assert!(rig.read_all(&f) == first);
    assert!(rig.read_all(&g) == second, "the acknowledged write is gone after a power cut");
}

/// `keel cache remove` of one of the two log mirrors while a stable WRITE
/// holds the two-mirror log: write-back is served write-through from then
/// on, and that WRITE is acknowledged only once it is on the back end, not
/// from the one copy in a log.
#[test]
fn a_write_holding_the_log_while_a_removal_leaves_one_mirror_is_not_acknowledged_from_one_copy() {
    let mut rig = Rig::new(53, 2);
    let f = rig.file("f");
    let first = pattern(53, 20_000);
    rig.write(&f, 0, &first, Stability::FileSync);
    let g = rig.file("g");
    let sh = rig.shared();
    rig.pause_next_write(move || sh.remove_device("sim1", |_| {}).expect("remove sim1"));
    let second = pattern(54, 8192);
    rig.write(&g, 0, &second, Stability::FileSync);
    assert_eq!(rig.shared().serving(1), CacheMode::WriteThrough);
    assert!(rig.backend(&g) == second, "the stable write was acknowledged before it reached the back end");
    rig.power_cut(&[0]);
    assert!(rig.read_all(&f) == first);
    assert!(rig.read_all(&g) == second, "the acknowledged write is gone after a power cut");
}

/// The destager finishes a file (its data on the back end, the head past
/// its records) and releases its state from the index while a WRITE of it
/// holds that state: the WRITE must go into the index again, or a read
/// would not see it and no destage would ever take it to the back end.
#[test]
fn a_write_holding_a_file_state_the_destager_releases_is_not_lost() {
    let mut rig = Rig::new(55, 2);
    let f = rig.file("f");
    let first = pattern(55, 16_384);
    rig.write(&f, 0, &first, Stability::FileSync);
    let sh = rig.shared();
    rig.pause_next_write(move || sh.flush("test", |_| {}).expect("flush"));
    let second = pattern(56, 4096);
    rig.write(&f, 4096, &second, Stability::FileSync);
    let mut model = first.clone();
    model[4096..8192].copy_from_slice(&second);
    assert!(rig.read_all(&f) == model, "a read after the write does not show it");
    rig.shared().flush("test", |_| {}).expect("flush");
    assert!(rig.backend(&f) == model, "the destage never took the write to the back end");
    rig.power_cut(&[0, 1]);
    assert!(rig.read_all(&f) == model, "the acknowledged write is gone after a power cut");
}

/// A destage round that took the log just before `keel cache remove`
/// replaced it (the destager thread, a flush) runs after the swap: it must
/// leave alone the new log's data, which it would read at the same places
/// from the old log's devices (the removed one among them) and mark clean.
#[test]
fn a_destage_round_holding_a_replaced_log_leaves_the_new_log_s_data_alone() {
    let mut rig = Rig::new(57, 3);
    let f = rig.file("f");
    let first = pattern(57, 8192);
    rig.write(&f, 0, &first, Stability::FileSync);
    let old = rig.shared().log().unwrap();
    rig.shared().remove_device("sim0", |_| {}).expect("remove sim0");
    let g = rig.file("g");
    let second = pattern(58, 8192);
    rig.write(&g, 0, &second, Stability::FileSync);
    rig.shared().destage_round(&old, u64::MAX).expect("a round of the old log");
    assert!(rig.read_all(&g) == second, "a read after the old log's round does not show the write");
    rig.shared().flush("test", |_| {}).expect("flush");
    assert!(rig.backend(&g) == second, "the back end does not have the write after a flush");
    rig.power_cut(&[1, 2]);
    assert!(rig.read_all(&f) == first);
    assert!(rig.read_all(&g) == second, "the acknowledged write is gone after a power cut");
}

//! The cache tier over the simulated store and simulated devices: what
//! clients see, power cuts of the devices and the back end at once, device
//! failures, and a seeded random run checked against a model. No root, no
//! disk; a failing run prints its seed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use keel_cache::device::{DeviceIo, SimDevice};
use keel_cache::events::Event;
use keel_cache::stats::ExportSnapshot;
use keel_cache::{CacheConfig, CacheDevice, CacheMode, CacheStore};
use keel_store::sim::{CrashMode, Rng, SimFault, SimObject, SimPoint, SimStore};
use keel_store::{CreateMode, Cred, Object, SetAttrs, Stability, Store};

const DEVICE_BYTES: u64 = 64 << 20;
const ROOT: Cred = Cred::ROOT;

struct Rig {
    sim: Arc<SimStore>,
    devs: Vec<Arc<SimDevice>>,
    cache: Option<CacheStore<SimStore>>,
    log_bytes: Option<u64>,
    mode: CacheMode,
    /// The read cache's fill window: one slot (a miss brings in only its
    /// own blocks) unless a test asks for more.
    fill: u64,
    cutoff: u64,
}

impl Rig {
    fn new(seed: u64) -> Self {
        Self::with(seed, 2, None)
    }

    fn with(seed: u64, devices: usize, log_bytes: Option<u64>) -> Self {
        Self::with_mode(seed, devices, log_bytes, CacheMode::WriteBack)
    }

    fn with_mode(seed: u64, devices: usize, log_bytes: Option<u64>, mode: CacheMode) -> Self {
        let sim = Arc::new(SimStore::new(seed));
        let devs = (0..devices).map(|i| Arc::new(SimDevice::new(DEVICE_BYTES, seed ^ (i as u64 + 1)))).collect();
        let mut rig = Rig {
            sim,
            devs,
            cache: None,
            log_bytes,
            mode,
            fill: 4096,
            cutoff: CacheConfig::default().sequential_cutoff,
        };
        rig.open();
        rig
    }

    fn open(&mut self) {
        let devices = self
            .devs
            .iter()
            .enumerate()
            .map(|(i, d)| CacheDevice { name: format!("sim{i}"), id: None, io: d.clone() as Arc<_> })
            .collect();
        let config = CacheConfig {
            log_bytes: self.log_bytes,
            modes: HashMap::from([(1, self.mode)]),
            background_destage: false,
            read_fill_bytes: self.fill,
            sequential_cutoff: self.cutoff,
            ..CacheConfig::default()
        };
        self.cache = Some(CacheStore::with_devices(self.sim.clone(), devices, &config).expect("open the cache"));
    }

    fn with_fill(mut self, fill: u64) -> Self {
        self.fill = fill;
        self.cache.take();
        self.open();
        self
    }

    fn with_cutoff(mut self, cutoff: u64) -> Self {
        self.cutoff = cutoff;
        self.cache.take();
        self.open();
        self
    }

    fn c(&self) -> &CacheStore<SimStore> {
        self.cache.as_ref().expect("open")
    }

    /// Power cut of everything: the server stops dead, the devices keep
    /// what they synced (and, with `some`, random sectors of the rest),
    /// the back end what it flushed; then the server starts again.
    fn power_cut(&mut self, some: bool) {
        self.cache.take();
        for d in &self.devs {
            d.power_cut(some);
        }
        self.sim.crash(if some { CrashMode::SomeUnsynced } else { CrashMode::DurableOnly });
        self.open();
    }

    fn file(&self, name: &str) -> SimObject {
        let c = self.c();
        let who = c.act_as(&ROOT).unwrap();
        let root = c.lookup_path(1, b"").unwrap();
        c.create(&who, &root, name.as_bytes(), CreateMode::Guarded, &SetAttrs::default(), true).unwrap().object
    }

    fn write(&self, f: &SimObject, offset: u64, data: &[u8], how: Stability) -> keel_store::WriteOut {
        let c = self.c();
        c.write(&c.act_as(&ROOT).unwrap(), f, offset, data, how).unwrap()
    }

    fn read_all(&self, f: &SimObject) -> Vec<u8> {
        let c = self.c();
        let who = c.act_as(&ROOT).unwrap();
        let out = c.read(&who, f, 0, 1 << 24).unwrap();
        assert!(out.eof);
        assert_eq!(out.data.len() as u64, out.attrs.size, "a whole-file read returns the size GETATTR says");
        out.data.into_bytes().unwrap().to_vec()
    }

    fn truncate(&self, f: &SimObject, size: u64) {
        let c = self.c();
        let set = SetAttrs { size: Some(size), ..SetAttrs::default() };
        c.setattr(&c.act_as(&ROOT).unwrap(), f, &set, None, true).unwrap();
    }

    fn flush(&self) {
        self.c().shared().flush("test", |_| {}).unwrap();
    }

    fn backend(&self, f: &SimObject) -> Vec<u8> {
        self.sim.file_data(f.fileid()).unwrap()
    }

    fn read_at(&self, f: &SimObject, off: u64, len: usize) -> Vec<u8> {
        let c = self.c();
        c.read(&c.act_as(&ROOT).unwrap(), f, off, len).unwrap().data.into_bytes().unwrap().to_vec()
    }

    /// Two misses: the blocks of the range are admitted.
    fn warm(&self, f: &SimObject, off: u64, len: usize) {
        self.read_at(f, off, len);
        self.read_at(f, off, len);
    }

    fn cached(&self, f: &SimObject) -> Vec<u64> {
        self.c().shared().read_cache().map_or_else(Vec::new, |rc| rc.cached_blocks(f.handle()))
    }

    fn stats(&self) -> ExportSnapshot {
        self.c().shared().stats.exports().into_iter().find(|(id, _)| *id == 1).map(|e| e.1).unwrap_or_default()
    }

    fn dev(&self, name: &str) -> &SimDevice {
        &self.devs[name.trim_start_matches("sim").parse::<usize>().unwrap()]
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed);
    (0..len).map(|_| r.next_u64() as u8).collect()
}

#[test]
fn write_back_data_is_seen_at_once_and_reaches_the_back_end_only_at_destage() {
    let rig = Rig::new(1);
    let f = rig.file("f");
    let before = rig.c().getattr(&f).unwrap();
    let data = pattern(1, 10_000);
    let out = rig.write(&f, 0, &data, Stability::FileSync);
    assert_eq!(out.before.size, 0);
    assert_eq!(out.after.size, 10_000);
    let a = rig.c().getattr(&f).unwrap();
    assert_eq!(a.size, 10_000, "GETATTR reflects the acknowledged write");
    assert_ne!(a.mtime, before.mtime);
    assert_eq!(rig.read_all(&f), data);
    assert!(rig.backend(&f).is_empty(), "nothing destaged yet: the write was logged");
    assert_eq!(rig.c().shared().index.dirty_bytes(), 10_000);

    rig.flush();
    assert_eq!(rig.backend(&f), data);
    assert_eq!(rig.c().shared().index.dirty_bytes(), 0);
    assert_eq!(rig.c().shared().index.live_files(), 0);
    let after = rig.c().getattr(&f).unwrap();
    assert_eq!(after.size, 10_000);
    assert_eq!(after.mtime, a.mtime, "destage keeps the client's mtime");
}

#[test]
fn reads_lay_the_newest_data_over_the_back_end() {
    let rig = Rig::new(2);
    let f = rig.file("f");
    let base = pattern(2, 20_000);
    rig.write(&f, 0, &base, Stability::FileSync);
    rig.flush();
    let mut model = base.clone();
    for (i, (off, len)) in [(100u64, 50usize), (120, 10), (19_990, 100), (30_000, 5)].into_iter().enumerate() {
        let d = pattern(10 + i as u64, len);
        rig.write(&f, off, &d, Stability::Unstable);
        if model.len() < off as usize + len {
            model.resize(off as usize + len, 0);
        }
        model[off as usize..off as usize + len].copy_from_slice(&d);
    }
    assert_eq!(rig.read_all(&f), model, "log over disk, a hole of zeros, newest wins");
    let c = rig.c();
    let who = c.act_as(&ROOT).unwrap();
    let part = c.read(&who, &f, 110, 20).unwrap();
    assert_eq!(&part.data.into_bytes().unwrap()[..], &model[110..130]);
    assert!(!part.eof);
    let tail = c.read(&who, &f, 29_999, 100).unwrap();
    assert_eq!(&tail.data.into_bytes().unwrap()[..], &model[29_999..]);
    assert!(tail.eof);
}

#[test]
fn truncation_cuts_dirty_data_and_a_replay_repeats_it() {
    let mut rig = Rig::new(3);
    let f = rig.file("f");
    rig.write(&f, 0, &pattern(3, 8192), Stability::FileSync);
    rig.truncate(&f, 100);
    rig.write(&f, 200, b"after", Stability::FileSync);
    let mut model = pattern(3, 100);
    model.resize(200, 0);
    model.extend_from_slice(b"after");
    assert_eq!(rig.read_all(&f), model);
    rig.power_cut(false);
    assert_eq!(rig.read_all(&f), model, "the recovered log gives the same file");
    rig.flush();
    assert_eq!(rig.backend(&f), model);
}

#[test]
fn acknowledged_writes_survive_a_power_cut_of_devices_and_back_end() {
    let mut rig = Rig::new(4);
    let f = rig.file("f");
    let g = rig.file("g");
    let a = pattern(4, 300_000);
    rig.write(&f, 0, &a, Stability::FileSync);
    let b = pattern(5, 5000);
    rig.write(&g, 1000, &b, Stability::Unstable);
    let v = rig.c().commit(&rig.c().act_as(&ROOT).unwrap(), &g, true).unwrap();
    rig.write(&g, 0, b"unstable, never committed", Stability::Unstable);
    rig.power_cut(false);
    assert_ne!(rig.c().write_verifier(), v, "a restart is a new durability epoch");
    assert_eq!(rig.read_all(&f), a);
    let got = rig.read_all(&g);
    assert_eq!(&got[1000..], &b[..], "committed data survives");
    assert!(rig.c().shared().events.list().iter().any(|(_, e)| matches!(e, Event::Recovered { .. })));
    rig.flush();
    assert_eq!(rig.backend(&f), a);
}

#[test]
fn a_torn_record_ends_the_log_and_nothing_acknowledged_is_behind_it() {
    // Keep random unsynced sectors: the log's tail may be torn.
    for seed in 0..20 {
        let mut rig = Rig::new(100 + seed);
        let f = rig.file("f");
        let acked = pattern(seed, 70_000);
        rig.write(&f, 0, &acked, Stability::FileSync);
        rig.write(&f, 0, &pattern(seed + 1000, 70_000), Stability::Unstable);
        rig.power_cut(true);
        let got = rig.read_all(&f);
        // Either the unstable write made it whole or it did not at all:
        // a torn record is never replayed.
        assert!(got == acked || got == pattern(seed + 1000, 70_000), "seed {seed}: a torn record was replayed");
    }
}

#[test]
fn a_removed_file_s_dirty_data_is_dropped() {
    let rig = Rig::new(6);
    let f = rig.file("gone");
    rig.write(&f, 0, &pattern(6, 4096), Stability::FileSync);
    let c = rig.c();
    let who = c.act_as(&ROOT).unwrap();
    let root = c.lookup_path(1, b"").unwrap();
    c.remove(&who, &root, b"gone", true).unwrap();
    rig.flush();
    assert_eq!(c.shared().index.dirty_bytes(), 0);
    assert!(c.shared().events.list().iter().any(|(_, e)| matches!(e, Event::Dropped { bytes: 4096 })));
}

#[test]
fn a_failing_device_degrades_write_back_without_losing_acknowledged_data() {
    let mut rig = Rig::new(7);
    let f = rig.file("f");
    let a = pattern(7, 50_000);
    rig.write(&f, 0, &a, Stability::FileSync);
    rig.devs[1].kill();
    // With one device left, writes go to the back end (those over dirty
    // data durably, with a small record on the survivor that keeps a
    // replay from writing the older data over them).
    let b = pattern(8, 1000);
    rig.write(&f, 50_000, &b, Stability::FileSync);
    let events = rig.c().shared().events.list();
    assert!(events.iter().any(|(_, e)| matches!(e, Event::DeviceFailed { device, .. } if device == "sim1")));
    // A file with nothing in the log goes to the back end.
    let g = rig.file("g");
    rig.write(&g, 0, b"direct", Stability::FileSync);
    assert_eq!(rig.backend(&g), b"direct");
    let mut model = a.clone();
    model.extend_from_slice(&b);
    assert_eq!(rig.read_all(&f), model);
    rig.flush();
    assert_eq!(rig.backend(&f), model);
    // And after a power cut with one device dead, nothing was lost.
    rig.write(&g, 0, b"DIRECT", Stability::FileSync);
    rig.power_cut(false);
    assert_eq!(rig.read_all(&f), model);
    assert_eq!(rig.read_all(&g), b"DIRECT");
}

/// A log device failing at runtime is an event of its own ("degraded",
/// saying what to run), and from then on nothing is acknowledged as stable
/// from the one copy left: a COMMIT first puts the logged data on the back
/// end, and a stable write over logged data goes there before its reply.
#[test]
fn a_device_failing_at_runtime_is_a_degraded_event_and_nothing_stable_rests_on_one_copy() {
    let mut rig = Rig::new(30);
    let f = rig.file("f");
    let mut model = pattern(30, 20_000);
    rig.write(&f, 0, &model, Stability::FileSync);
    rig.devs[0].kill();
    // This write meets the dead device: logged on the survivor only.
    let over = pattern(31, 8192);
    rig.write(&f, 4096, &over, Stability::Unstable);
    model[4096..4096 + 8192].copy_from_slice(&over);
    let events = rig.c().shared().events.list();
    let degraded = events.iter().find_map(|(_, e)| match e {
        Event::Degraded { reason } => Some(reason.clone()),
        _ => None,
    });
    let degraded = degraded.expect("a degraded event when the device failed");
    assert!(degraded.contains("sim0") && degraded.contains("keel cache remove sim0"), "{degraded}");
    assert_eq!(rig.c().shared().serving(1), CacheMode::WriteThrough);
    let c = rig.c();
    c.commit(&c.act_as(&ROOT).unwrap(), &f, true).unwrap();
    assert_eq!(rig.backend(&f), model, "COMMIT put the data on the back end");
    let again = pattern(32, 3000);
    rig.write(&f, 15_000, &again, Stability::FileSync);
    model[15_000..18_000].copy_from_slice(&again);
    assert_eq!(rig.backend(&f), model, "a stable write went to the back end");
    rig.power_cut(false);
    assert_eq!(rig.read_all(&f), model);
}

#[test]
fn one_surviving_mirror_recovers_the_log_alone() {
    let mut rig = Rig::new(8);
    let f = rig.file("f");
    let a = pattern(9, 123_456);
    rig.write(&f, 0, &a, Stability::FileSync);
    rig.cache.take();
    rig.devs[0].power_cut(false);
    rig.devs[1].power_cut(false);
    rig.devs[0].corrupt(keel_cache::log::RING_START + 300);
    rig.sim.crash(CrashMode::DurableOnly);
    rig.open();
    assert_eq!(rig.read_all(&f), a, "the intact mirror's copy of the record is used");
}

#[test]
fn a_failing_back_end_keeps_the_data_dirty_until_it_takes_it() {
    let rig = Rig::new(9);
    let f = rig.file("f");
    let a = pattern(10, 9000);
    rig.write(&f, 0, &a, Stability::FileSync);
    rig.sim.inject(SimFault::fail(SimPoint::Sync, libc::EIO));
    let log = rig.c().shared().log().unwrap();
    let r = rig.c().shared().destage_round(&log, u64::MAX);
    assert!(r.is_err(), "a failed back-end sync fails the round");
    assert_eq!(rig.c().shared().index.dirty_bytes(), 9000, "nothing is marked clean");
    assert_eq!(rig.read_all(&f), a);
    rig.flush();
    assert_eq!(rig.backend(&f), a);
}

#[test]
fn a_full_log_sends_new_files_to_the_back_end() {
    let rig = Rig::with(10, 2, Some(8 << 20));
    let mut files = Vec::new();
    for i in 0..12 {
        let f = rig.file(&format!("f{i}"));
        rig.write(&f, 0, &pattern(i, 1 << 20), Stability::FileSync);
        files.push(f);
    }
    let s = rig.c().shared();
    assert!(s.index.live_files() < 12, "some writes bypassed the full log");
    let bypassed: u64 = s.stats.exports().iter().map(|(_, e)| e.writes_bypassed[2]).sum();
    assert!(bypassed > 0);
    for (i, f) in files.iter().enumerate() {
        assert_eq!(rig.read_all(f), pattern(i as u64, 1 << 20));
    }
}

#[test]
fn a_write_over_logged_data_past_a_full_log_goes_to_the_back_end_and_survives_a_power_cut() {
    // No sequential cutoff, so every write is a candidate for the log; the
    // destager does not run, so the log fills up.
    let mut rig = Rig::with(28, 2, Some(8 << 20)).with_cutoff(u64::MAX);
    let f = rig.file("f");
    let mut model = Vec::new();
    let mut logged = Vec::new();
    for (i, mib) in [0u64, 4, 2, 6, 1, 5, 3, 7].into_iter().enumerate() {
        let before = rig.stats().writes_logged;
        let d = pattern(100 + i as u64, 1 << 20);
        rig.write(&f, mib << 20, &d, Stability::FileSync);
        apply(&mut model, mib << 20, &d);
        if rig.stats().writes_logged > before {
            logged.push(mib);
        }
    }
    assert!(logged.len() >= 2 && logged.len() < 8, "some writes logged, then the log is full: {logged:?}");
    // Writes over logged data go into the log while it has room, then
    // past it; none waits (the destager never runs here: a wait would end
    // in EAGAIN after 10 s).
    let full_before = rig.stats().writes_bypassed[2];
    let overwrites = (0..12).map(|k| (logged[k % logged.len()] << 20 | (k as u64 * 4096), (1 << 20) - 8192));
    for (k, (off, len)) in overwrites.chain([(logged[0] << 20 | 8192, 100)]).enumerate() {
        let d = pattern(200 + k as u64, len);
        let c = rig.c();
        let out =
            c.write(&c.act_as(&ROOT).unwrap(), &f, off, &d, Stability::FileSync).expect("written past the full log");
        apply(&mut model, off, &d);
        assert_eq!(out.after.size, model.len() as u64);
    }
    let past = rig.stats().writes_bypassed[2] - full_before;
    assert!((2..=13).contains(&past), "the writes after the log filled went past it: {past}");
    assert_same(&rig.read_all(&f), &model, "read after the writes past the full log");
    // The replay keeps the newer data: the older records are still in the
    // log, and the Bypassed records after them cut them.
    rig.power_cut(false);
    assert_same(&rig.read_all(&f), &model, "after a power cut");
    rig.flush();
    assert_same(&rig.backend(&f), &model, "on the back end after a flush");
}

#[test]
fn mode_off_flushes_and_device_removal_destages_first() {
    let rig = Rig::new(11);
    let f = rig.file("f");
    rig.write(&f, 0, b"dirty", Stability::FileSync);
    let s = rig.c().shared();
    s.set_mode(1, "/export", CacheMode::Off, |_| {}).unwrap();
    assert_eq!(rig.backend(&f), b"dirty");
    rig.write(&f, 5, b" then direct", Stability::FileSync);
    assert_eq!(rig.backend(&f), b"dirty then direct");
    s.set_mode(1, "/export", CacheMode::WriteBack, |_| {}).unwrap();
    rig.write(&f, 0, b"DIRTY", Stability::FileSync);
    let mut seen = Vec::new();
    s.remove_device("sim1", |d| seen.push(d)).unwrap();
    assert!(seen.contains(&5), "progress reports the dirty bytes");
    assert_eq!(rig.backend(&f), b"DIRTY then direct");
    assert!(s.set_mode(1, "/export", CacheMode::WriteBack, |_| {}).unwrap_err().to_string().contains("two"));
    assert!(s.remove_device("nope", |_| {}).unwrap_err().to_string().contains("not a cache device"));
}

#[test]
fn bad_modes_are_refused_by_name() {
    for m in CacheMode::ALL {
        assert_eq!(CacheMode::parse(m.name()), Ok(m));
    }
    assert_eq!(CacheMode::parse("write-through"), Ok(CacheMode::WriteThrough));
    assert_eq!(CacheMode::parse("write-around"), Ok(CacheMode::WriteAround));
    assert!(CacheMode::parse("fast").unwrap_err().to_string().contains("unknown"));
}

#[test]
fn sequential_streams_bypass_the_log() {
    let rig = Rig::new(12);
    let f = rig.file("seq");
    for i in 0..8u64 {
        rig.write(&f, i << 20, &pattern(i, 1 << 20), Stability::Unstable);
    }
    let s = rig.c().shared();
    let e = &s.stats.exports()[0].1;
    assert!(e.writes_bypassed[1] >= 3, "past the 4 MiB cutoff the stream goes to disk: {e:?}");
}

#[test]
fn a_sequential_stream_whose_calls_arrive_out_of_order_still_bypasses_the_log() {
    let rig = Rig::new(29);
    let f = rig.file("seq");
    // 16 MiB in 1 MiB writes, each pair swapped, as two workers of a
    // client with several calls in flight deliver them.
    for i in (0..16u64).map(|i| i ^ 1) {
        rig.write(&f, i << 20, &pattern(i, 1 << 20), Stability::Unstable);
    }
    let e = rig.stats();
    assert!(e.writes_bypassed[1] >= 8, "past the 4 MiB cutoff the stream goes to disk: {e:?}");
    assert!(e.writes_logged <= 6, "only the stream's first 4 MiB or so are logged: {e:?}");
    for i in 0..16u64 {
        assert_eq!(rig.read_at(&f, i << 20, 1 << 20), pattern(i, 1 << 20), "MiB {i}");
    }
}

#[test]
fn rewriting_a_region_smaller_than_the_cutoff_never_becomes_a_stream() {
    let rig = Rig::new(30);
    let f = rig.file("hot");
    // 8 MiB of 4 KiB writes, all in one 64 KiB region: each lands near
    // the one before, as reordered calls of a stream would.
    let mut model = Vec::new();
    for k in 0..2048u64 {
        let off = (k * 5 % 16) * 4096;
        let d = pattern(k, 4096);
        rig.write(&f, off, &d, Stability::FileSync);
        apply(&mut model, off, &d);
    }
    let e = rig.stats();
    assert_eq!(e.writes_bypassed[1], 0, "{e:?}");
    assert_eq!(e.writes_logged, 2048, "{e:?}");
    assert_same(&rig.read_all(&f), &model, "the hot region");
}

/// A seeded random run: FILE_SYNC and committed writes, truncations, reads
/// checked against a model (many of a small hot set, so the read cache
/// holds and serves blocks), destage rounds, device and back-end faults,
/// bit rot and read errors in read-cache slots, switches among all four
/// modes, power cuts. After every power cut every file must equal the
/// model.
#[test]
fn random_runs_never_lose_an_acknowledged_byte() {
    let seeds: u64 = std::env::var("KEEL_CACHE_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
    if let Some(seed) = std::env::var("KEEL_CACHE_SEED").ok().and_then(|s| s.parse().ok()) {
        random_run(seed);
        return;
    }
    let mut hits = 0;
    for seed in 0..seeds {
        hits += random_run(seed * 7919 + 13);
    }
    eprintln!("read-cache hits over {seeds} runs: {hits}");
    assert!(seeds < 4 || hits > 0, "the runs never read from the read cache");
}

/// Returns the READs the read cache served.
fn random_run(seed: u64) -> u64 {
    let mut rng = Rng::new(seed);
    // Half the runs fill 64 KiB windows on a miss: neighbours read from
    // the back end while the log holds newer data for them.
    let fill = if seed.is_multiple_of(2) { 4096 } else { 64 << 10 };
    let mut rig = Rig::with(seed, 2, Some(16 << 20)).with_fill(fill);
    let files: Vec<SimObject> = (0..4).map(|i| rig.file(&format!("f{i}"))).collect();
    let mut model: Vec<Vec<u8>> = vec![Vec::new(); files.len()];
    let trace = std::env::var("KEEL_CACHE_TRACE").is_ok();
    // A device fault is armed (it strikes at the device's next write).
    let mut armed = false;
    let mut hits = 0;
    for step in 0..400 {
        let i = rng.below(files.len() as u64) as usize;
        if trace {
            let s = rig.c().shared();
            eprintln!(
                "step {step} f{i} live={} dirty={} used={:?}",
                s.index.live_files(),
                s.index.dirty_bytes(),
                s.log_usage().map(|u| u.0)
            );
        }
        let f = &files[i];
        let c = rig.c();
        let who = c.act_as(&ROOT).unwrap();
        match rng.below(146) {
            100..106 => {
                let mode = CacheMode::ALL[rng.below(4) as usize];
                let r = c.shared().set_mode(1, "/export", mode, |_| {});
                if trace {
                    eprintln!("  mode {}: {r:?}", mode.name());
                }
            }
            106..143 => {
                let off = rng.below(8) * 4096;
                let len = 4096 * (1 + rng.below(4) as usize);
                let want = model[i].get(off as usize..(off as usize + len).min(model[i].len())).unwrap_or(&[]);
                // Again and again: the second miss admits, the third hits.
                for n in 0..1 + rng.below(3) {
                    let out =
                        c.read(&who, f, off, len).unwrap_or_else(|e| panic!("seed {seed} step {step}: read: {e}"));
                    assert_same(
                        &out.data.into_bytes().unwrap(),
                        want,
                        &format!("seed {seed} step {step}: hot read {n} of f{i} at {off}+{len}"),
                    );
                }
            }
            143..146 => {
                // Bit rot in a cached block, or a read error on its device.
                if let Some(rc) = c.shared().read_cache() {
                    let blocks = rc.cached_blocks(f.handle());
                    if !blocks.is_empty() {
                        let b = blocks[rng.below(blocks.len() as u64) as usize];
                        if let Some((dev, pos)) = rc.location(f.handle(), b) {
                            if trace {
                                eprintln!("  rot block {b} of f{i} on {dev}");
                            }
                            rig.dev(&dev).corrupt(pos + rng.below(4096));
                        }
                    }
                }
            }
            0..40 => {
                let off = rng.below(200_000);
                let len = 1 + rng.below(40_000) as usize;
                let d = pattern(rng.next_u64(), len);
                let how = if rng.below(2) == 0 { Stability::FileSync } else { Stability::DataSync };
                let r = c.write(&who, f, off, &d, how);
                if trace {
                    eprintln!("  write {how:?} {off}+{len}: {:?}", r.as_ref().map(|_| ()));
                }
                if r.is_ok() {
                    apply(&mut model[i], off, &d);
                }
            }
            40..55 => {
                let off = rng.below(200_000);
                let d = pattern(rng.next_u64(), 1 + rng.below(9000) as usize);
                let ok = c.write(&who, f, off, &d, Stability::Unstable).is_ok() && c.commit(&who, f, true).is_ok();
                if trace {
                    eprintln!("  write+commit {off}+{}: {ok}", d.len());
                }
                if ok {
                    apply(&mut model[i], off, &d);
                }
            }
            55..62 => {
                let size = rng.below(250_000);
                let set = SetAttrs { size: Some(size), ..SetAttrs::default() };
                let r = c.setattr(&who, f, &set, None, true);
                if trace {
                    eprintln!("  truncate {size}: {r:?}");
                }
                if r.is_ok() {
                    model[i].resize(size as usize, 0);
                }
            }
            62..80 => {
                let log = c.shared().log().unwrap();
                let r = c.shared().destage_round(&log, rng.below(4 << 20) + 1);
                if trace {
                    eprintln!("  destage: {r:?}");
                }
            }
            80..85 => {
                if trace {
                    eprintln!("  inject back-end write fault");
                }
                rig.sim.inject(SimFault::fail(SimPoint::Write, libc::EIO))
            }
            // One device at a time: two failed devices lose the log, as
            // two failed disks lose a RAID 1.
            85..88 if !armed && c.shared().devices().iter().all(|d| d.state == "ok") => {
                armed = true;
                let d = rng.below(2) as usize;
                if trace {
                    eprintln!("  fail next write of device {d}");
                }
                rig.devs[d].fail_next_writes(1)
            }
            88..94 => {
                let off = rng.below(250_000);
                let len = rng.below(50_000) as usize;
                let out = c.read(&who, f, off, len).unwrap_or_else(|e| panic!("seed {seed} step {step}: read: {e}"));
                let want = model[i].get(off as usize..(off as usize + len).min(model[i].len())).unwrap_or(&[]);
                assert_same(
                    &out.data.into_bytes().unwrap(),
                    want,
                    &format!("seed {seed} step {step}: read of f{i} at {off}+{len}"),
                );
                assert_eq!(c.getattr(f).unwrap().size, model[i].len() as u64, "seed {seed} step {step}");
            }
            _ => {
                let some = rng.below(2) == 0;
                if trace {
                    eprintln!("  power cut (keep some: {some})");
                }
                hits += rig.stats().read_cache_hits;
                rig.power_cut(some);
                armed = false;
                for (j, g) in files.iter().enumerate() {
                    assert_same(
                        &rig.read_all(g),
                        &model[j],
                        &format!("seed {seed} step {step}: f{j} after a power cut"),
                    );
                }
            }
        }
    }
    rig.sim.clear_faults();
    rig.flush();
    for (j, g) in files.iter().enumerate() {
        assert_same(&rig.backend(g), &model[j], &format!("seed {seed}: f{j} on the back end after the final flush"));
    }
    hits + rig.stats().read_cache_hits
}

/// Compares file contents without printing megabytes.
#[track_caller]
fn assert_same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
        panic!("{what}: {} bytes, want {}; first difference at byte {first}", got.len(), want.len());
    }
}

fn apply(file: &mut Vec<u8>, off: u64, d: &[u8]) {
    let end = off as usize + d.len();
    if file.len() < end {
        file.resize(end, 0);
    }
    file[off as usize..end].copy_from_slice(d);
}

#[test]
fn a_missed_block_is_admitted_while_there_is_room_and_then_read_from_flash() {
    let rig = Rig::with_mode(20, 1, None, CacheMode::WriteAround);
    let f = rig.file("f");
    let data = pattern(20, 64 << 10);
    rig.write(&f, 0, &data, Stability::FileSync);
    assert_eq!(rig.read_at(&f, 8192, 4096), &data[8192..12288]);
    assert_eq!(rig.cached(&f), vec![2], "an empty cache admits the first miss");
    // The back end fails the next read: a hit does not read it.
    rig.sim.inject(SimFault::fail(SimPoint::Read, libc::EIO));
    assert_eq!(rig.read_at(&f, 8192, 4096), &data[8192..12288]);
    let s = rig.stats();
    assert_eq!((s.read_cache_hits, s.read_cache_misses, s.read_cache_admissions), (1, 1, 1), "{s:?}");
    assert_eq!(s.bytes_from_read_cache, 4096);
    rig.sim.clear_faults();
    // A read of cached and uncached blocks goes to the back end.
    assert_eq!(rig.read_at(&f, 4096, 8192), &data[4096..12288]);
    assert_eq!(rig.stats().read_cache_hits, 1);
    // The end of the file: a short block, and reads past the end.
    let g = rig.file("g");
    rig.write(&g, 0, &data[..5000], Stability::FileSync);
    rig.warm(&g, 0, 1 << 20);
    assert_eq!(rig.cached(&g), vec![0, 1]);
    let c = rig.c();
    let out = c.read(&c.act_as(&ROOT).unwrap(), &g, 0, 1 << 20).unwrap();
    assert!(out.eof);
    assert_eq!(out.attrs.size, 5000);
    assert_eq!(&out.data.into_bytes().unwrap()[..], &data[..5000]);
    // warm()'s second read was one hit; the whole-file read another.
    assert_eq!(rig.stats().read_cache_hits, 3, "a whole-file read of a small file is a hit");
    let report = c.shared().devices();
    // f's blocks 1 and 2, g's 0 and 1.
    assert_eq!(report[0].read_cache_bytes, 4 * 4096);
    assert_eq!(c.shared().read_cache_usage().map(|u| u.0), Some(4));
    // One device: write-back is refused, the read-cache modes are not.
    assert!(c.shared().set_mode(1, "/export", CacheMode::WriteBack, |_| {}).is_err());
    c.shared().set_mode(1, "/export", CacheMode::WriteThrough, |_| {}).unwrap();
}

#[test]
fn a_miss_in_a_cold_cache_brings_in_its_whole_fill_window() {
    let rig = Rig::with_mode(23, 2, None, CacheMode::WriteAround).with_fill(64 << 10);
    let f = rig.file("f");
    // 100 KiB: the second window ends in a short block.
    let data = pattern(23, 100 << 10);
    rig.write(&f, 0, &data, Stability::FileSync);
    assert_eq!(rig.read_at(&f, 8192, 4096), &data[8192..12288]);
    assert_eq!(rig.cached(&f), (0..16).collect::<Vec<_>>(), "the aligned 64 KiB around the miss");
    assert_eq!(rig.stats().read_cache_admissions, 16);
    // Every block of the window now comes from flash: the back end fails.
    rig.sim.inject(SimFault::fail(SimPoint::Read, libc::EIO).times(1000));
    for blk in 0..16 {
        assert_eq!(rig.read_at(&f, blk * 4096, 4096), &data[blk as usize * 4096..][..4096], "block {blk}");
    }
    assert_eq!(rig.stats().read_cache_hits, 16);
    let c = rig.c();
    assert!(c.read(&c.act_as(&ROOT).unwrap(), &f, 70 << 10, 4096).is_err(), "the next window is not cached");
    rig.sim.clear_faults();
    // The back end fails the window's read once: the client's own read is
    // tried alone and succeeds.
    rig.sim.inject(SimFault::fail(SimPoint::Read, libc::EIO).times(1));
    assert_eq!(rig.read_at(&f, 80 << 10, 4096), &data[80 << 10..84 << 10]);
    // A miss in the last window fills it up to the end of the file, the
    // short block padded as the invariant says.
    assert_eq!(rig.read_at(&f, 70 << 10, 4096), &data[70 << 10..74 << 10]);
    assert_eq!(rig.cached(&f), (0..25).collect::<Vec<_>>());
    rig.sim.inject(SimFault::fail(SimPoint::Read, libc::EIO).times(1000));
    let out = c.read(&c.act_as(&ROOT).unwrap(), &f, 96 << 10, 8192).unwrap();
    assert!(out.eof);
    assert_eq!(&out.data.into_bytes().unwrap()[..], &data[96 << 10..]);
    rig.sim.clear_faults();
    // A write invalidates what it overwrites and nothing is filled stale.
    let w = pattern(24, 4096);
    rig.write(&f, 16 << 10, &w, Stability::FileSync);
    let mut model = data.clone();
    apply(&mut model, 16 << 10, &w);
    assert!(!rig.cached(&f).contains(&4));
    assert_eq!(rig.read_at(&f, 12 << 10, 12 << 10), &model[12 << 10..24 << 10]);
    rig.sim.inject(SimFault::fail(SimPoint::Read, libc::EIO).times(1000));
    assert_eq!(rig.read_at(&f, 16 << 10, 4096), &w[..], "block 4 refilled with the new data");
    rig.sim.clear_faults();
}

#[test]
fn a_fill_window_that_is_not_a_multiple_of_the_slot_is_refused() {
    let sim = Arc::new(SimStore::new(25));
    let devs: Vec<CacheDevice> = (0..2)
        .map(|i| CacheDevice {
            name: format!("sim{i}"),
            id: None,
            io: Arc::new(SimDevice::new(DEVICE_BYTES, 25 + i)) as Arc<_>,
        })
        .collect();
    let config = CacheConfig { read_fill_bytes: 6000, background_destage: false, ..CacheConfig::default() };
    let err = CacheStore::with_devices(sim, devs, &config).err().expect("refused");
    assert!(err.to_string().contains("fill window 6000"), "{err}");
}

#[test]
fn every_mode_reads_the_newest_data_after_writes_truncations_removals_and_renames() {
    for mode in CacheMode::ALL {
        let rig = Rig::with_mode(21, 2, None, mode);
        let c = rig.c();
        let who = c.act_as(&ROOT).unwrap();
        let root = c.lookup_path(1, b"").unwrap();
        let f = rig.file("f");
        let mut model = pattern(1, 16384);
        rig.write(&f, 0, &model, Stability::FileSync);
        rig.flush();
        rig.warm(&f, 0, 16384);
        let want_cached: Vec<u64> = if mode == CacheMode::Off { vec![] } else { vec![0, 1, 2, 3] };
        assert_eq!(rig.cached(&f), want_cached, "{mode:?}");

        let w = pattern(2, 6000);
        rig.write(&f, 4096, &w, Stability::Unstable);
        apply(&mut model, 4096, &w);
        if mode == CacheMode::WriteThrough {
            assert_eq!(rig.cached(&f), vec![0, 1, 3], "write-through keeps a block it wrote whole, new");
        } else if mode != CacheMode::Off {
            assert_eq!(rig.cached(&f), vec![0, 3], "{mode:?}");
        }
        for _ in 0..3 {
            assert_same(&rig.read_at(&f, 0, 16384), &model, &format!("{mode:?}: after a write"));
        }
        rig.truncate(&f, 5000);
        model.truncate(5000);
        assert_same(&rig.read_at(&f, 0, 16384), &model, &format!("{mode:?}: after a cut"));
        rig.warm(&f, 0, 16384);
        rig.truncate(&f, 12000);
        model.resize(12000, 0);
        for _ in 0..3 {
            assert_same(&rig.read_at(&f, 0, 16384), &model, &format!("{mode:?}: after an extension"));
        }
        rig.flush();
        assert_same(&rig.read_all(&f), &model, &format!("{mode:?}: after the flush"));

        // A removed file's handle is stale, never answered from the cache.
        let g = rig.file("g");
        rig.write(&g, 0, &pattern(3, 8192), Stability::FileSync);
        rig.flush();
        rig.warm(&g, 0, 8192);
        c.remove(&who, &root, b"g", true).unwrap();
        assert!(c.read(&who, &g, 0, 8192).is_err(), "{mode:?}: a removed file read from the cache");
        assert!(rig.cached(&g).is_empty());

        // A rename over a cached file: the name has the new file's data.
        let h = rig.file("h");
        rig.write(&h, 0, &pattern(4, 8192), Stability::FileSync);
        let k = rig.file("k");
        rig.write(&k, 0, &pattern(5, 8192), Stability::FileSync);
        rig.flush();
        rig.warm(&h, 0, 8192);
        rig.warm(&k, 0, 8192);
        c.rename(&who, &root, b"k", &root, b"h", true).unwrap();
        let (h2, _) = c.lookup(&who, &root, b"h").unwrap();
        assert_same(&rig.read_all(&h2), &pattern(5, 8192), &format!("{mode:?}: renamed over"));
        assert!(c.read(&who, &h, 0, 8192).is_err(), "{mode:?}: the file renamed over read from the cache");

        // CREATE UNCHECKED with a size cuts an existing, cached file.
        let u = rig.file("u");
        rig.write(&u, 0, &pattern(6, 8192), Stability::FileSync);
        rig.flush();
        rig.warm(&u, 0, 8192);
        let set = SetAttrs { size: Some(100), ..SetAttrs::default() };
        c.create(&who, &root, b"u", CreateMode::Unchecked, &set, true).unwrap();
        assert_same(&rig.read_all(&u), &pattern(6, 100), &format!("{mode:?}: after CREATE UNCHECKED"));
        let s = rig.stats();
        if mode == CacheMode::Off {
            assert_eq!((s.read_cache_hits, s.read_cache_admissions), (0, 0), "off: no read caching");
        } else {
            assert!(s.read_cache_hits > 0, "{mode:?}: {s:?}");
        }
    }
}

/// A block stamped with `n` in every 8 bytes, per 4 KiB half.
fn stamp(n: u64, len: usize) -> Vec<u8> {
    n.to_le_bytes().iter().copied().cycle().take(len).collect()
}

fn stamp_of(block: &[u8]) -> u64 {
    let n = u64::from_le_bytes(block[..8].try_into().unwrap());
    assert!(block.chunks(8).all(|c| c == n.to_le_bytes()), "a torn block");
    n
}

/// Readers race a writer: no read that starts after a write was
/// acknowledged may return older data (a reader that read old data from
/// the back end must not publish it after the write).
#[test]
fn readers_racing_a_writer_never_see_data_older_than_an_acknowledged_write() {
    for mode in [CacheMode::WriteThrough, CacheMode::WriteAround, CacheMode::WriteBack] {
        let rig = Rig::with_mode(22, 2, None, mode);
        let f = rig.file("race");
        rig.write(&f, 0, &stamp(0, 8192), Stability::FileSync);
        rig.flush();
        let acked = AtomicU64::new(0);
        let done = AtomicBool::new(false);
        let hits_before = rig.stats().read_cache_hits;
        // Reads done: the writer starts once the readers are reading (on a
        // loaded machine it could otherwise finish before they began).
        let reads = AtomicU64::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let c = rig.c();
                let who = c.act_as(&ROOT).unwrap();
                while reads.load(Ordering::SeqCst) < 4 {
                    std::thread::yield_now();
                }
                for i in 1..=1500u64 {
                    c.write(&who, &f, 0, &stamp(i, 8192), Stability::FileSync).unwrap();
                    acked.store(i, Ordering::SeqCst);
                    if mode == CacheMode::WriteBack && i % 7 == 0 {
                        let log = c.shared().log().unwrap();
                        c.shared().destage_round(&log, u64::MAX).unwrap();
                    }
                }
                done.store(true, Ordering::SeqCst);
            });
            for r in 0..2 {
                let (rig, f, acked, done, reads) = (&rig, &f, &acked, &done, &reads);
                s.spawn(move || {
                    let c = rig.c();
                    let who = c.act_as(&ROOT).unwrap();
                    while !done.load(Ordering::SeqCst) {
                        let floor = acked.load(Ordering::SeqCst);
                        let d = c.read(&who, f, 0, 8192).unwrap().data.into_bytes().unwrap();
                        for half in d.chunks(4096) {
                            let n = stamp_of(half);
                            assert!(n >= floor, "{mode:?} reader {r}: read {n} after {floor} was acknowledged");
                        }
                        reads.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        let s = rig.stats();
        assert!(s.read_cache_hits > hits_before, "{mode:?}: the race ran against cached data: {s:?}");
    }
}

/// A log device that runs a hook before each read (the destager reads
/// dirty data from the log between taking its cut and moving the head).
struct Hooked {
    dev: SimDevice,
    on_read: std::sync::Mutex<Option<Box<dyn FnMut() + Send>>>,
}

impl DeviceIo for Hooked {
    fn size(&self) -> u64 {
        self.dev.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let hook = self.on_read.lock().unwrap().take();
        if let Some(mut hook) = hook {
            hook();
            *self.on_read.lock().unwrap() = Some(hook);
        }
        self.dev.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.dev.write_at(buf, offset)
    }

    fn sync(&self) -> std::io::Result<()> {
        self.dev.sync()
    }
}

/// A flush ends while a client keeps rewriting data that is in the log
/// (`keel cache flush` before the disks are moved): a write during a
/// destage round, after its cut, goes to the back end around the log
/// rather than into it, so the log empties; the back end holds the newest
/// data afterwards.
#[test]
fn a_flush_ends_while_a_client_keeps_rewriting_logged_data() {
    /// The client writes during each round, this many times at most.
    const WRITES_MAX: u64 = 50;
    let sim = Arc::new(SimStore::new(41));
    let hooked = Arc::new(Hooked { dev: SimDevice::new(DEVICE_BYTES, 41), on_read: Default::default() });
    let devices = vec![
        CacheDevice { name: "sim0".into(), id: None, io: hooked.clone() as Arc<_> },
        CacheDevice { name: "sim1".into(), id: None, io: Arc::new(SimDevice::new(DEVICE_BYTES, 42)) as Arc<_> },
    ];
    let config = CacheConfig {
        modes: HashMap::from([(1, CacheMode::WriteBack)]),
        background_destage: false,
        ..CacheConfig::default()
    };
    let c = Arc::new(CacheStore::with_devices(sim.clone(), devices, &config).unwrap());
    let who = c.act_as(&ROOT).unwrap();
    let root = c.lookup_path(1, b"").unwrap();
    let mut files: Vec<SimObject> = ["a", "b"]
        .iter()
        .map(|n| c.create(&who, &root, n.as_bytes(), CreateMode::Guarded, &SetAttrs::default(), true).unwrap().object)
        .collect();
    // The destager goes in handle order: `first`'s data is read while
    // `hot`, logged as one record, waits its turn.
    files.sort_by(|x, y| x.handle().cmp(y.handle()));
    let (first, hot) = (files[0].clone(), files[1].clone());
    c.write(&who, &first, 0, &stamp(1000, 65536), Stability::FileSync).unwrap();
    c.write(&who, &hot, 0, &stamp(0, 4096), Stability::FileSync).unwrap();

    let writes = Arc::new(AtomicU64::new(0));
    let (weak, n, f) = (Arc::downgrade(&c), writes.clone(), hot.clone());
    *hooked.on_read.lock().unwrap() = Some(Box::new(move || {
        let (Some(c), i) = (weak.upgrade(), n.load(Ordering::SeqCst)) else { return };
        if i < WRITES_MAX {
            n.store(i + 1, Ordering::SeqCst);
            let who = c.act_as(&ROOT).unwrap();
            c.write(&who, &f, 0, &stamp(i + 1, 4096), Stability::Unstable).unwrap();
        }
    }));
    c.shared().flush("test", |_| {}).unwrap();
    *hooked.on_read.lock().unwrap() = None;
    let writes = writes.load(Ordering::SeqCst);
    assert!(writes < 5, "the flush ended only when the client stopped writing ({writes} rounds with a write)");
    let s = c.shared();
    assert_eq!((s.index.dirty_bytes(), s.log_usage().unwrap().0), (0, 0), "the log is empty after the flush");
    assert_eq!(sim.file_data(hot.fileid()).unwrap(), stamp(writes, 4096), "the back end has the newest data");
    assert_eq!(sim.file_data(first.fileid()).unwrap(), stamp(1000, 65536));
}

#[test]
fn bit_rot_in_a_slot_is_caught_and_the_back_end_answers() {
    let rig = Rig::with_mode(23, 2, None, CacheMode::WriteThrough);
    let f = rig.file("f");
    let data = pattern(23, 16384);
    rig.write(&f, 0, &data, Stability::FileSync);
    rig.warm(&f, 0, 16384);
    assert_eq!(rig.cached(&f), vec![0, 1, 2, 3]);
    let rc = rig.c().shared().read_cache().unwrap();
    let (dev, pos) = rc.location(f.handle(), 2).unwrap();
    rig.dev(&dev).corrupt(pos + 17);
    assert_same(&rig.read_at(&f, 0, 16384), &data, "a read over a rotten slot");
    assert_eq!(rig.c().shared().stats.read_cache.checksum_errors.load(Ordering::Relaxed), 1);
    // The rotten slot was dropped; the back end's copy, read for the
    // answer, was admitted again into a fresh slot.
    assert!(rc.usable(), "one error does not take the device out");
    let hits = rig.stats().read_cache_hits;
    assert_eq!(rig.read_at(&f, 8192, 4096), &data[8192..12288], "the slot holds the back end's data again");
    assert_eq!(rig.stats().read_cache_hits, hits + 1);
    let hits = hits + 1;
    assert_eq!(rig.read_at(&f, 0, 8192), &data[..8192]);
    assert_eq!(rig.stats().read_cache_hits, hits + 1);
}

#[test]
fn a_device_failing_reads_is_taken_out_of_the_read_cache_and_reads_stay_right() {
    let rig = Rig::with_mode(24, 1, None, CacheMode::WriteAround);
    let f = rig.file("f");
    let data = pattern(24, 64 << 10);
    rig.write(&f, 0, &data, Stability::FileSync);
    for b in 0..16u64 {
        rig.warm(&f, b * 4096, 4096);
    }
    assert_eq!(rig.cached(&f).len(), 16);
    // The device's figures count the read cache's own I/O.
    let before = rig.c().shared().devices()[0].clone();
    assert_eq!(before.bytes_written, 64 << 10, "{before:?}");
    assert_eq!(rig.read_at(&f, 4096, 8192), &data[4096..12288]);
    assert_eq!(rig.c().shared().devices()[0].bytes_read, before.bytes_read + 8192);
    assert_eq!(before.wear, None, "a simulated device reports no wear");
    rig.devs[0].fail_next_reads(1000);
    for b in 0..16usize {
        assert_eq!(rig.read_at(&f, b as u64 * 4096, 4096), &data[b * 4096..(b + 1) * 4096], "block {b}");
    }
    let s = rig.c().shared();
    assert_eq!(s.stats.read_cache.read_errors.load(Ordering::Relaxed), keel_cache::readcache::DEVICE_ERRORS_MAX as u64);
    assert!(
        s.events
            .list()
            .iter()
            .any(|(_, e)| matches!(e, Event::ReadCacheDeviceDropped { device, .. } if device == "sim0"))
    );
    assert_eq!(s.devices()[0].state, "out of the read cache");
    assert_eq!(s.devices()[0].errors, keel_cache::readcache::DEVICE_ERRORS_MAX as u64);
    assert_eq!(s.read_cache_usage().map(|u| u.0), Some(0));
    rig.warm(&f, 0, 4096);
    assert!(rig.cached(&f).is_empty(), "nothing is admitted to a device taken out");
    assert_eq!(rig.read_at(&f, 0, 64 << 10), data);
}

#[test]
fn a_sequential_read_stream_past_the_cutoff_neither_admits_nor_hits() {
    let rig = Rig::with_mode(25, 2, None, CacheMode::WriteAround);
    let f = rig.file("big");
    let mib = 1usize << 20;
    for i in 0..12u64 {
        rig.write(&f, i << 20, &pattern(i, mib), Stability::Unstable);
    }
    for _ in 0..2 {
        for i in 0..12u64 {
            assert_eq!(rig.read_at(&f, i << 20, mib), pattern(i, mib), "MiB {i}");
        }
    }
    let cached = rig.cached(&f);
    // The ghost filter is direct-mapped: a few first misses collide.
    assert!(cached.len() > 900, "the first 4 MiB of the stream are admitted: {}", cached.len());
    assert!(cached.iter().all(|&b| b < 1024), "nothing past the cutoff is");
    assert!(rig.stats().reads_sequential >= 2 * 8, "{:?}", rig.stats());
    // Random reads of the same file are cached.
    rig.warm(&f, 9 << 20, 4096);
    assert!(rig.cached(&f).contains(&((9 << 20) / 4096)));
}

#[test]
fn the_ring_takes_a_quarter_by_default_and_an_existing_log_keeps_its_size() {
    let rig = Rig::new(26);
    let s = rig.c().shared();
    assert_eq!(s.log_usage().unwrap().1, keel_cache::LOG_BYTES_MIN);
    let per_device = (DEVICE_BYTES - keel_cache::log::RING_START - keel_cache::LOG_BYTES_MIN) / 4096;
    assert_eq!(s.read_cache_usage(), Some((0, 2 * per_device, 4096)));

    // A log made with the ring over the whole device (the old default).
    let mut rig = Rig::with(27, 2, Some(u64::MAX));
    let f = rig.file("f");
    rig.write(&f, 0, b"dirty", Stability::FileSync);
    rig.log_bytes = None;
    rig.power_cut(false);
    let s = rig.c().shared();
    assert_eq!(s.log_usage().unwrap().1, DEVICE_BYTES - keel_cache::log::RING_START, "the log kept its size");
    assert_eq!(s.read_cache_usage().map(|u| u.1), Some(0));
    assert!(s.set_mode(1, "/export", CacheMode::WriteThrough, |_| {}).unwrap_err().to_string().contains("room"));
    assert_eq!(rig.read_all(&f), b"dirty");
}

/// A device removed at runtime leaves nothing that a later start could
/// take for the log: started on the removed device and one of the new
/// log's (a configuration not updated after `keel cache remove`), the
/// cache recovers the new log, newer and the only one left.
#[test]
fn a_removed_device_never_brings_its_old_log_back() {
    let mut rig = Rig::with(21, 3, None);
    let f = rig.file("f");
    rig.write(&f, 0, b"first, in the old log", Stability::FileSync);
    rig.c().shared().remove_device("sim0", |_| {}).unwrap();
    rig.write(&f, 0, b"second, in the new one", Stability::FileSync);
    assert_eq!(rig.backend(&f), b"first, in the old log", "the second write is only in the log");
    rig.cache.take();
    for d in &rig.devs {
        d.power_cut(false);
    }
    rig.sim.crash(CrashMode::DurableOnly);
    let devices = [0, 2]
        .iter()
        .map(|&i| CacheDevice { name: format!("sim{i}"), id: None, io: rig.devs[i].clone() as Arc<_> })
        .collect();
    let config = CacheConfig {
        modes: HashMap::from([(1, CacheMode::WriteBack)]),
        background_destage: false,
        ..CacheConfig::default()
    };
    rig.cache = Some(CacheStore::with_devices(rig.sim.clone(), devices, &config).unwrap());
    assert_eq!(rig.read_all(&f), b"second, in the new one");
}

/// SEEK of a file with dirty data (NFSv4.2 READ_PLUS seeks on every
/// read) counts the file as data to its logged end and destages nothing:
/// the log is destaged whole, which would make every writer wait. The
/// caller must still be allowed to read the file.
#[test]
fn a_seek_of_a_dirty_file_counts_it_all_as_data_and_destages_nothing() {
    use keel_store::SeekWhat;
    let rig = Rig::new(24);
    let f = rig.file("f");
    rig.write(&f, 0, &pattern(24, 10_000), Stability::Unstable);
    let c = rig.c();
    let who = c.act_as(&ROOT).unwrap();
    assert_eq!(c.seek(&who, &f, 100, SeekWhat::Data).unwrap(), 100);
    assert_eq!(c.seek(&who, &f, 100, SeekWhat::Hole).unwrap(), 10_000, "the logged size");
    assert_eq!(c.seek(&who, &f, 10_000, SeekWhat::Data).unwrap_err().raw_os_error(), Some(libc::ENXIO));
    assert!(rig.backend(&f).len() < 10_000, "the dirty data is still only in the log");
    let stranger = c.act_as(&keel_store::Cred::new(4321, 4321, &[])).unwrap();
    let chmod = SetAttrs { mode: Some(0o600), ..SetAttrs::default() };
    c.setattr(&who, &f, &chmod, None, false).unwrap();
    assert_eq!(c.seek(&stranger, &f, 0, SeekWhat::Data).unwrap_err().raw_os_error(), Some(libc::EACCES));
}

/// SEEK, ALLOCATE, DEALLOCATE and COPY go to the back end, which alone
/// lacks a file's dirty data: the cache puts it there first (else COPY
/// would copy stale bytes and a later destage would refill a punched
/// hole), and the read cache's blocks of the changed file go (else a read
/// would find the bytes from before).
#[test]
fn space_and_copy_verbs_see_dirty_data_and_leave_no_stale_block() {
    use keel_store::{SeekWhat, Space};
    let rig = Rig::new(21);
    let (src, dst) = (rig.file("src"), rig.file("dst"));
    let mut model = pattern(21, 20_000);
    rig.write(&dst, 0, &model, Stability::FileSync);
    rig.flush();
    rig.warm(&dst, 0, 20_000);
    assert!(!rig.cached(&dst).is_empty(), "the destination's blocks are in the read cache");
    let data = pattern(22, 10_000);
    rig.write(&src, 0, &data, Stability::Unstable);
    let c = rig.c();
    let who = c.act_as(&ROOT).unwrap();
    assert_eq!(c.seek(&who, &src, 0, SeekWhat::Hole).unwrap(), 10_000, "SEEK sees the logged size");
    let copied = c.copy_range(&who, &src, 0, &dst, 1000, 10_000, false).unwrap();
    assert_eq!(copied, 10_000, "the copy takes the acknowledged bytes");
    model[1000..11_000].copy_from_slice(&data);
    assert_same(&rig.read_at(&dst, 0, 20_000), &model, "no stale block of the destination is read");

    let more = pattern(23, 500);
    rig.write(&dst, 0, &more, Stability::Unstable);
    model[..500].copy_from_slice(&more);
    c.fallocate(&who, &dst, Space::PunchHole, 100, 300, false).unwrap();
    model[100..400].fill(0);
    rig.warm(&dst, 0, 20_000);
    c.fallocate(&who, &dst, Space::PunchHole, 5000, 100, false).unwrap();
    model[5000..5100].fill(0);
    assert_same(&rig.read_at(&dst, 0, 20_000), &model, "a punched hole reads zeros at once");
    c.fallocate(&who, &dst, Space::Allocate, 30_000, 100, false).unwrap();
    model.resize(30_100, 0);
    assert_same(&rig.read_all(&dst), &model, "ALLOCATE past the end grows the file");
    rig.flush();
    assert_same(&rig.backend(&dst), &model, "no destage refilled the hole");
}

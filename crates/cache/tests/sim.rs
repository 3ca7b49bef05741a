//! The cache tier over the simulated store and simulated devices: what
//! clients see, power cuts of the devices and the back end at once, device
//! failures, and a seeded random run checked against a model. No root, no
//! disk; a failing run prints its seed.

use std::collections::HashMap;
use std::sync::Arc;

use keel_cache::device::SimDevice;
use keel_cache::events::Event;
use keel_cache::{CacheConfig, CacheDevice, CacheMode, CacheStore};
use keel_store::sim::{CrashMode, Rng, SimFault, SimObject, SimPoint, SimStore};
use keel_store::{CreateMode, Cred, SetAttrs, Stability, Store};

const DEVICE_BYTES: u64 = 64 << 20;
const ROOT: Cred = Cred::ROOT;

struct Rig {
    sim: Arc<SimStore>,
    devs: Vec<Arc<SimDevice>>,
    cache: Option<CacheStore<SimStore>>,
    log_bytes: Option<u64>,
    mode: CacheMode,
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
        let mut rig = Rig { sim, devs, cache: None, log_bytes, mode };
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
            ..CacheConfig::default()
        };
        self.cache = Some(CacheStore::with_devices(self.sim.clone(), devices, &config).expect("open the cache"));
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
    // With one device left, writes go to the back end unless they overlap
    // dirty data (those stay in order, in the log on the survivor).
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
    assert!(s.set_mode(1, "/export", CacheMode::WriteBack, |_| {}).unwrap_err().contains("two"));
    assert!(s.remove_device("nope", |_| {}).unwrap_err().contains("not a cache device"));
}

#[test]
fn bad_modes_are_refused_by_name() {
    for m in CacheMode::ALL {
        assert_eq!(CacheMode::parse(m.name()), Ok(m));
    }
    assert_eq!(CacheMode::parse("write-through"), Ok(CacheMode::WriteThrough));
    assert_eq!(CacheMode::parse("write-around"), Ok(CacheMode::WriteAround));
    assert!(CacheMode::parse("fast").unwrap_err().contains("unknown"));
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

/// A seeded random run: FILE_SYNC and committed writes, truncations, reads
/// checked against a model, destage rounds, device and back-end faults,
/// power cuts. After every power cut every file must equal the model.
#[test]
fn random_runs_never_lose_an_acknowledged_byte() {
    let seeds: u64 = std::env::var("KEEL_CACHE_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
    if let Some(seed) = std::env::var("KEEL_CACHE_SEED").ok().and_then(|s| s.parse().ok()) {
        return random_run(seed);
    }
    for seed in 0..seeds {
        random_run(seed * 7919 + 13);
    }
}

fn random_run(seed: u64) {
    let mut rng = Rng::new(seed);
    let mut rig = Rig::with(seed, 2, Some(16 << 20));
    let files: Vec<SimObject> = (0..4).map(|i| rig.file(&format!("f{i}"))).collect();
    let mut model: Vec<Vec<u8>> = vec![Vec::new(); files.len()];
    let trace = std::env::var("KEEL_CACHE_TRACE").is_ok();
    // A device fault is armed (it strikes at the device's next write).
    let mut armed = false;
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
        match rng.below(100) {
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

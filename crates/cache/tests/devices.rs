//! Bad cache devices get clear errors: too small, not a device or file,
//! missing, the same device twice.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use keel_cache::device::{DEVICE_BYTES_MIN, FileDevice};
use keel_cache::{CacheConfig, CacheStore};
use keel_store::sim::SimStore;
use keel_testkit::disk::Tmpfs;
use keel_testkit::procs::{TempDir, run_timeout};

fn sized(dir: &std::path::Path, name: &str, bytes: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(bytes).unwrap();
    p
}

fn open(devices: Vec<PathBuf>) -> Result<CacheStore<SimStore>, String> {
    let config = CacheConfig { devices, modes: HashMap::new(), background_destage: false, ..CacheConfig::default() };
    CacheStore::open(Arc::new(SimStore::new(1)), &config).map_err(|e| e.to_string())
}

#[test]
fn bad_devices_are_refused_with_a_reason() {
    // Device files on a disk: Keel refuses them in memory.
    let scratch = TempDir::on_disk("cache-devices-bad");
    let dir = scratch.path();
    let small = sized(dir, "small", DEVICE_BYTES_MIN - 4096);
    let err = FileDevice::open(&small).err().expect("too small");
    assert!(err.to_string().contains("too small"), "{err}");
    let err = FileDevice::open(dir).err().expect("a directory");
    assert!(err.to_string().contains("not a block device or a regular file"), "{err}");
    let err = FileDevice::open(&dir.join("missing")).err().expect("missing");
    assert!(err.to_string().contains("No such file"), "{err}");

    let good = sized(dir, "good", DEVICE_BYTES_MIN);
    let err = open(vec![good.clone(), good.clone()]).err().expect("the same device twice");
    assert!(err.contains("the same device as"), "{err}");
    // Another name for the same file is the same device too.
    let link = dir.join("link");
    std::fs::hard_link(&good, &link).unwrap();
    let err = open(vec![good.clone(), link]).err().expect("a hard link of the same file");
    assert!(err.contains("the same device as"), "{err}");

    let other = sized(dir, "other", DEVICE_BYTES_MIN);
    let cache = open(vec![good, other]).expect("two good devices");
    assert_eq!(cache.shared().devices().len(), 2);
    assert!(cache.shared().devices().iter().all(|d| d.role == "log mirror, read cache" && d.state == "ok"));
    // The default ring is a quarter of the device; the read cache has the rest.
    let (_, ring, _) = cache.shared().log_usage().unwrap();
    assert_eq!(ring, keel_cache::LOG_BYTES_MIN);
    let report = cache.shared().devices();
    assert!(report.iter().all(|d| d.read_cache_capacity_bytes >= DEVICE_BYTES_MIN - ring - (64 << 10)));
    drop(cache);
}

/// A log device gone for good (its file deleted after a crash): the cache
/// starts on the one left, recovers every acknowledged write from it,
/// serves write-back exports write-through and says so, and is write-back
/// again once a device is added. With every device gone it refuses.
#[test]
fn a_lost_log_device_leaves_a_degraded_start_on_the_other() {
    use keel_cache::CacheMode;
    use keel_cache::events::Event;
    use keel_store::{CreateMode, Cred, SetAttrs, Stability, Store};

    let scratch = TempDir::on_disk("cache-devices-lost");
    let dir = scratch.path();
    let (c1, c2, c3) =
        (sized(dir, "c1", DEVICE_BYTES_MIN), sized(dir, "c2", DEVICE_BYTES_MIN), sized(dir, "c3", DEVICE_BYTES_MIN));
    let sim = Arc::new(SimStore::new(5));
    let config = |devices: Vec<PathBuf>| CacheConfig {
        devices,
        modes: HashMap::from([(1, CacheMode::WriteBack)]),
        background_destage: false,
        ..CacheConfig::default()
    };
    let data = vec![0x5au8; 300_000];
    let f = {
        let cache = CacheStore::open(sim.clone(), &config(vec![c1.clone(), c2.clone()])).unwrap();
        let who = cache.act_as(&Cred::ROOT).unwrap();
        let root = cache.lookup_path(1, b"").unwrap();
        let f = cache.create(&who, &root, b"f", CreateMode::Guarded, &SetAttrs::default(), true).unwrap().object;
        cache.write(&who, &f, 0, &data, Stability::FileSync).unwrap();
        assert_eq!(cache.shared().index.dirty_bytes(), data.len() as u64, "in the log only");
        f
    };
    std::fs::remove_file(&c2).unwrap();

    let cache = CacheStore::open(sim.clone(), &config(vec![c1.clone(), c2.clone()])).expect("starts on c1");
    let s = cache.shared();
    let who = cache.act_as(&Cred::ROOT).unwrap();
    let read = cache.read(&who, &f, 0, 1 << 20).unwrap().data.into_bytes().unwrap();
    assert!(read == data[..], "the acknowledged write was recovered from c1");
    assert_eq!((s.mode(1), s.serving(1)), (CacheMode::WriteBack, CacheMode::WriteThrough));
    let events: Vec<String> = s.events.list().iter().map(|(_, e)| e.to_string()).collect();
    let c2_name = c2.display().to_string();
    assert!(events.iter().any(|e| e.starts_with("device missing at start: ") && e.contains(&c2_name)), "{events:?}");
    let degraded = events.iter().find(|e| e.starts_with("degraded: ")).expect("a degraded event");
    assert!(degraded.contains("write-through") && degraded.contains("keel cache add"), "{degraded}");
    assert_eq!(s.missing_devices().len(), 1);
    // New writes are not acknowledged from one copy.
    cache.write(&who, &f, 0, b"rewritten", Stability::FileSync).unwrap();
    assert_eq!(&sim.file_data(f.fileid()).unwrap()[..9], b"rewritten");

    s.add_device(&c3, |_| {}).unwrap();
    assert_eq!(s.serving(1), CacheMode::WriteBack, "two devices again");
    assert!(s.missing_devices().is_empty());
    assert!(s.events.list().iter().any(|(_, e)| matches!(e, Event::DeviceAdded { .. })));
    drop(cache);

    std::fs::remove_file(&c1).unwrap();
    let err = CacheStore::open(sim, &config(vec![c1, c2])).err().expect("every device gone");
    assert!(err.to_string().contains("no cache device could be opened"), "{err}");
}

/// Where the system temp dir is in memory (tmpfs is /tmp on Debian 13),
/// a cache device file there is refused: the tests above keep theirs on a
/// disk. Run again with TMPDIR on a tmpfs, they still pass.
#[test]
fn the_device_tests_pass_with_the_temp_dir_on_tmpfs() {
    let tmpfs = Tmpfs::mount("cache-devices-tmpdir");
    let me = std::env::current_exe().unwrap();
    let mut run = Command::new(me);
    run.args([
        "--exact",
        "bad_devices_are_refused_with_a_reason",
        "a_lost_log_device_leaves_a_degraded_start_on_the_other",
    ])
    .env("TMPDIR", tmpfs.path());
    let out = run_timeout(&mut run, Duration::from_secs(120));
    assert!(out.status.success() && out.stdout.contains("2 passed"), "with TMPDIR on a tmpfs:\n{}", out.text());
}

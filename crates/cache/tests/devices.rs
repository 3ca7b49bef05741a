//! Bad cache devices get clear errors: too small, not a device or file,
//! missing, the same device twice.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use keel_cache::device::{DEVICE_BYTES_MIN, FileDevice};
use keel_cache::{CacheConfig, CacheStore};
use keel_store::sim::SimStore;

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-cache-devices-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

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
    let dir = scratch("bad");
    let small = sized(&dir, "small", DEVICE_BYTES_MIN - 4096);
    let err = FileDevice::open(&small).err().expect("too small");
    assert!(err.to_string().contains("too small"), "{err}");
    let err = FileDevice::open(&dir).err().expect("a directory");
    assert!(err.to_string().contains("not a block device or a regular file"), "{err}");
    let err = FileDevice::open(&dir.join("missing")).err().expect("missing");
    assert!(err.to_string().contains("No such file"), "{err}");

    let good = sized(&dir, "good", DEVICE_BYTES_MIN);
    let err = open(vec![good.clone(), good.clone()]).err().expect("the same device twice");
    assert!(err.contains("the same device as"), "{err}");
    // Another name for the same file is the same device too.
    let link = dir.join("link");
    std::fs::hard_link(&good, &link).unwrap();
    let err = open(vec![good.clone(), link]).err().expect("a hard link of the same file");
    assert!(err.contains("the same device as"), "{err}");

    let other = sized(&dir, "other", DEVICE_BYTES_MIN);
    let cache = open(vec![good, other]).expect("two good devices");
    assert_eq!(cache.shared().devices().len(), 2);
    assert!(cache.shared().devices().iter().all(|d| d.role == "log mirror, read cache" && d.state == "ok"));
    // The default ring is a quarter of the device; the read cache has the rest.
    let (_, ring, _) = cache.shared().log_usage().unwrap();
    assert_eq!(ring, keel_cache::LOG_BYTES_MIN);
    let report = cache.shared().devices();
    assert!(report.iter().all(|d| d.read_cache_capacity_bytes >= DEVICE_BYTES_MIN - ring - (64 << 10)));
    drop(cache);
    std::fs::remove_dir_all(&dir).unwrap();
}

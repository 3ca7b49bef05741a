//! What dynamic dispatch would cost on the hot path: GETATTR and a 4 KiB
//! READ on the local store, called through the generic `Store` trait (as
//! the handlers do) and through a trait object. Needs root, as Keel does.
//!
//! ```sh
//! sudo cargo run --release -p keel-store-local --example dispatch_cost
//! ```

use std::hint::black_box;
use std::time::Instant;

use keel_store::{Attrs, CreateMode, ReadOut, SetAttrs, Stability, Store, StoreResult};
use keel_store_local::{Acting, Export, ExportSpec, HandleKey, LocalObject, LocalStore};

const CALLS: u32 = 1_000_000;

/// The two hot verbs as an object-safe trait, for the comparison.
trait HotPath {
    fn getattr_dyn(&self, obj: &LocalObject) -> StoreResult<Attrs>;
    fn read_dyn(&self, who: &Acting, obj: &LocalObject, offset: u64, count: usize) -> StoreResult<ReadOut>;
}

impl HotPath for LocalStore {
    fn getattr_dyn(&self, obj: &LocalObject) -> StoreResult<Attrs> {
        self.getattr(obj)
    }

    fn read_dyn(&self, who: &Acting, obj: &LocalObject, offset: u64, count: usize) -> StoreResult<ReadOut> {
        self.read(who, obj, offset, count)
    }
}

fn generic_getattr<S: Store>(s: &S, obj: &S::Object) -> u64 {
    s.getattr(obj).unwrap().size
}

fn generic_read<S: Store>(s: &S, who: &S::Caller, obj: &S::Object) -> usize {
    s.read(who, obj, 0, 4096).unwrap().data.len()
}

fn ns_per_call(f: impl Fn() -> u64) -> f64 {
    let start = Instant::now();
    let mut sum = 0u64;
    for _ in 0..CALLS {
        sum = sum.wrapping_add(f());
    }
    black_box(sum);
    start.elapsed().as_nanos() as f64 / f64::from(CALLS)
}

fn main() {
    let dir = std::env::temp_dir().join(format!("keel-dispatch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = HandleKey::from_bytes([5; 16]);
    let export = Export::open(&ExportSpec { id: 1, path: dir.clone(), fsid: None }, &key).unwrap();
    let store = LocalStore::new(vec![export], key, 1024).unwrap();
    let who = store.act_as(&keel_store::Cred::ROOT).unwrap();
    let root = store.lookup_path(1, b"").unwrap();
    let file = store.create(&who, &root, b"f", CreateMode::Unchecked, &SetAttrs::default(), false).unwrap().object;
    store.write(&who, &file, 0, &[7; 4096], Stability::Unstable).unwrap();
    let dynamic: &dyn HotPath = black_box(&store);
    assert!(who.cred().is_root());
    for round in 0..3 {
        let g = ns_per_call(|| generic_getattr(&store, &file));
        let d = ns_per_call(|| dynamic.getattr_dyn(&file).unwrap().size);
        let gr = ns_per_call(|| generic_read(&store, &who, &file) as u64);
        let dr = ns_per_call(|| dynamic.read_dyn(&who, &file, 0, 4096).unwrap().data.len() as u64);
        println!(
            "round {round}: GETATTR generic {g:.1} ns, dyn {d:.1} ns; READ 4 KiB generic {gr:.1} ns, dyn {dr:.1} ns"
        );
    }
    drop(who);
    std::fs::remove_dir_all(&dir).unwrap();
}

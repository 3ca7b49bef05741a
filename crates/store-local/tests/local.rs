//! The storage layer against a real directory. Needs root (as Keel does):
//! run as anyone else, every test fails and says so (a skipped check must
//! not read as a pass).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use keel_store::*;
use keel_store_local::*;

struct Fixture {
    base: PathBuf,
    export_dir: PathBuf,
    key: HandleKey,
}

impl Fixture {
    fn new(tag: &str) -> Self {
        if let Err(why) = keel_store_local::ident::check_privileges() {
            panic!("the storage-layer tests need root, as Keel does (CI runs them as root): {why}");
        }
        let base = std::env::temp_dir().join(format!("keel-store-local-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let export_dir = base.join("export");
        std::fs::create_dir_all(&export_dir).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&export_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        Fixture { base, export_dir, key: HandleKey::from_bytes([3; 16]) }
    }

    fn vfs(&self) -> LocalStore {
        let spec = ExportSpec { id: 1, path: self.export_dir.clone(), fsid: None };
        let export = Export::open(&spec, &self.key).unwrap();
        LocalStore::new(vec![export], self.key.clone(), 1024).unwrap()
    }

    fn root(&self, vfs: &LocalStore) -> LocalObject {
        vfs.lookup_path(1, b"").unwrap()
    }
}

impl Drop for Fixture {
    /// Removes the directories as root, on a thread of its own: a worker
    /// thread that drops the fixture may still act as the last caller it
    /// acted as (identities stay on a thread until the next differs), and
    /// such a caller may empty the export (mode 0777) but not remove it
    /// from `base` (0755, root's).
    fn drop(&mut self) {
        let base = self.base.clone();
        let removed = std::thread::spawn(move || {
            keel_store_local::ident::reset()?;
            std::fs::remove_dir_all(&base)
        })
        .join();
        if let Ok(Err(e)) = removed {
            eprintln!("cannot remove {}: {e}", self.base.display());
        }
    }
}

/// Resolves a handle with every export admitting the caller.
fn resolve(vfs: &LocalStore, fh: &Bytes) -> Result<LocalObject, StoreError> {
    vfs.resolve(fh, |_| Ok::<_, StoreError>(())).map(|(inode, ())| inode)
}

fn on_worker<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    // Identity is per thread: keep test threads' identities apart.
    std::thread::spawn(f).join().unwrap()
}

const ROOT: Cred = Cred::ROOT;

fn user(uid: u32) -> Cred {
    Cred::new(uid, uid, &[])
}

/// Runs `f` as `cred`, the way a worker runs one call.
fn act<T>(cred: Cred, f: impl FnOnce(&Acting) -> T) -> T {
    let who = keel_store_local::ident::act_as(&cred).expect("act as the caller");
    f(&who)
}

fn errno(e: &StoreError) -> Option<i32> {
    e.raw_os_error()
}

#[test]
fn handles_survive_a_new_server_instance() {
    let fx = Fixture::new("persist");
    let fx = Arc::new(fx);
    let f = fx.clone();
    let (fh, ino) = on_worker(move || {
        let vfs = f.vfs();
        let root = f.root(&vfs);
        let c = act(ROOT, |w| vfs.create(w, &root, b"file", CreateMode::Guarded, &SetAttrs::default(), true)).unwrap();
        act(ROOT, |w| vfs.write(w, &c.object, 0, b"hello", Stability::FileSync)).unwrap();
        (c.object.handle().clone(), c.attrs.fileid)
    });
    let f = fx.clone();
    on_worker(move || {
        let vfs = f.vfs(); // a "restarted" server: empty cache, same key
        let inode = resolve(&vfs, &fh).unwrap();
        assert_eq!(vfs.getattr(&inode).unwrap().fileid, ino);
        assert_eq!(&act(ROOT, |w| vfs.read(w, &inode, 0, 100)).unwrap().data.into_bytes().unwrap()[..], b"hello");
    });
}

#[test]
fn forged_and_foreign_handles_are_refused() {
    let fx = Fixture::new("forge");
    let outside = fx.base.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"top secret").unwrap();
    let fx = Arc::new(fx);
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        // Garbage, truncation and a flipped bit.
        assert!(matches!(resolve(&vfs, &Bytes::from_static(b"garbage")), Err(StoreError::BadHandle)));
        let good = root.handle().clone();
        assert!(matches!(resolve(&vfs, &good.slice(..good.len() - 1)), Err(StoreError::BadHandle)));
        let mut flipped = good.to_vec();
        flipped[20] ^= 1;
        assert!(matches!(resolve(&vfs, &Bytes::from(flipped)), Err(StoreError::BadHandle)));
        // A well-formed handle for a file outside the export, made with
        // another key (a client cannot know ours).
        let spec = ExportSpec { id: 1, path: outside.clone(), fsid: None };
        let attacker_key = HandleKey::from_bytes([9; 16]);
        let forged = Export::open(&spec, &attacker_key).unwrap().root_handle;
        assert!(matches!(resolve(&vfs, forged.as_bytes()), Err(StoreError::BadHandle)));
        // Even with our key (a handle minted for another export path on the
        // same file system), a directory outside the tree is stale.
        let minted = Export::open(&spec, &fx.key).unwrap().root_handle;
        assert!(matches!(resolve(&vfs, minted.as_bytes()), Err(StoreError::Stale)));
        // Export id that is not served.
        let spec2 = ExportSpec { id: 2, path: fx.export_dir.clone(), fsid: None };
        let other = Export::open(&spec2, &fx.key).unwrap().root_handle;
        assert!(matches!(resolve(&vfs, other.as_bytes()), Err(StoreError::Stale)));
        // ".." of the root is the root.
        let (up, _) = act(ROOT, |w| vfs.lookup(w, &root, b"..")).unwrap();
        assert_eq!(up.handle(), root.handle());
    });
}

#[test]
fn the_kernel_checks_permissions_as_the_caller() {
    let fx = Fixture::new("perm");
    let fx = Arc::new(fx);
    let f = fx.clone();
    on_worker(move || {
        let vfs = f.vfs();
        let root = f.root(&vfs);
        let attrs = SetAttrs { mode: Some(0o600), ..Default::default() };
        let secret = act(ROOT, |w| vfs.create(w, &root, b"secret", CreateMode::Guarded, &attrs, false)).unwrap().object;
        act(ROOT, |w| vfs.write(w, &secret, 0, b"root only", Stability::Unstable)).unwrap();
        let e = act(user(1000), |w| vfs.read(w, &secret, 0, 10)).unwrap_err();
        assert_eq!(errno(&e), Some(libc::EACCES));
        let e = act(user(1000), |w| vfs.write(w, &secret, 0, b"x", Stability::Unstable)).unwrap_err();
        assert_eq!(errno(&e), Some(libc::EACCES));
        assert_eq!(act(user(1000), |w| vfs.access(w, &secret, 0x3f)).unwrap(), 0);
        assert_eq!(act(ROOT, |w| vfs.access(w, &secret, 0x01 | 0x04)).unwrap(), 0x05);

        // A user's own read-only file still takes its writes (knfsd's owner override)...
        let ro = SetAttrs { mode: Some(0o444), ..Default::default() };
        let mine = act(user(1000), |w| vfs.create(w, &root, b"mine", CreateMode::Guarded, &ro, false)).unwrap();
        assert_eq!((mine.attrs.uid, mine.attrs.gid, mine.attrs.mode), (1000, 1000, 0o444));
        act(user(1000), |w| vfs.write(w, &mine.object, 0, b"ok", Stability::Unstable)).unwrap();
        // ...but not other people's, and ACCESS tells the truth.
        let e = act(user(1001), |w| vfs.write(w, &mine.object, 0, b"no", Stability::Unstable)).unwrap_err();
        assert_eq!(errno(&e), Some(libc::EACCES));
        assert_eq!(act(user(1001), |w| vfs.access(w, &mine.object, 0x3f)).unwrap(), 0x01);

        // chown to someone else needs root; chmod needs the owner.
        let give = SetAttrs { uid: Some(1001), ..Default::default() };
        let e = act(user(1000), |w| vfs.setattr(w, &mine.object, &give, None, false)).unwrap_err();
        assert_eq!(errno(&e), Some(libc::EPERM));
        let chmod = SetAttrs { mode: Some(0o666), ..Default::default() };
        assert_eq!(
            errno(&act(user(1001), |w| vfs.setattr(w, &mine.object, &chmod, None, false)).unwrap_err()),
            Some(libc::EPERM)
        );
        act(ROOT, |w| vfs.setattr(w, &mine.object, &give, None, false)).unwrap();
        assert_eq!(vfs.getattr(&mine.object).unwrap().uid, 1001);

        // Device nodes are root's only.
        let dev = NodeKind::Char { major: 1, minor: 3 };
        let e = act(user(1000), |w| vfs.mknod(w, &root, b"null", dev, &SetAttrs::default(), false)).err().unwrap();
        assert_eq!(errno(&e), Some(libc::EPERM));
        act(user(1000), |w| vfs.mknod(w, &root, b"fifo", NodeKind::Fifo, &SetAttrs::default(), false)).unwrap();
        act(ROOT, |w| vfs.mknod(w, &root, b"null", dev, &SetAttrs::default(), false)).unwrap();
    });
    let meta = std::fs::symlink_metadata(fx.export_dir.join("null")).unwrap();
    assert_eq!(meta.rdev(), libc::makedev(1, 3));
}

#[test]
fn create_modes_follow_rfc_1813() {
    let fx = Fixture::new("create");
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        let none = SetAttrs::default();
        let a = act(ROOT, |w| vfs.create(w, &root, b"a", CreateMode::Guarded, &none, false)).unwrap();
        act(ROOT, |w| vfs.write(w, &a.object, 0, b"data", Stability::Unstable)).unwrap();
        let e = act(ROOT, |w| vfs.create(w, &root, b"a", CreateMode::Guarded, &none, false)).err().unwrap();
        assert_eq!(errno(&e), Some(libc::EEXIST));
        // UNCHECKED on an existing file keeps it, truncating only if asked.
        let again = act(ROOT, |w| vfs.create(w, &root, b"a", CreateMode::Unchecked, &none, false)).unwrap();
        assert_eq!((again.object.handle().clone(), again.attrs.size), (a.object.handle().clone(), 4));
        let zero = SetAttrs { size: Some(0), ..Default::default() };
        assert_eq!(
            act(ROOT, |w| vfs.create(w, &root, b"a", CreateMode::Unchecked, &zero, false)).unwrap().attrs.size,
            0
        );
        // EXCLUSIVE: the same verifier is the same create, another is EEXIST.
        let v = CreateMode::Exclusive(*b"verifier");
        let x1 = act(ROOT, |w| vfs.create(w, &root, b"x", v, &none, false)).unwrap();
        let x2 = act(ROOT, |w| vfs.create(w, &root, b"x", v, &none, false)).unwrap();
        assert_eq!(x1.object.handle(), x2.object.handle());
        let e =
            act(ROOT, |w| vfs.create(w, &root, b"x", CreateMode::Exclusive(*b"other!!!"), &none, false)).err().unwrap();
        assert_eq!(errno(&e), Some(libc::EEXIST));
        // Names.
        for (bad, what) in [(&b"a/b"[..], "slash"), (b"a\0b", "nul"), (b"", "empty")] {
            let r = act(ROOT, |w| vfs.create(w, &root, bad, CreateMode::Guarded, &none, false));
            assert!(matches!(r, Err(StoreError::InvalidName)), "{what}");
        }
        let long = vec![b'n'; 256];
        assert!(matches!(
            act(ROOT, |w| vfs.create(w, &root, &long, CreateMode::Guarded, &none, false)),
            Err(StoreError::NameTooLong)
        ));
        assert_eq!(errno(&act(ROOT, |w| vfs.mkdir(w, &root, b"..", &none, false)).err().unwrap()), Some(libc::EEXIST));
    });
}

#[test]
fn symlinks_are_stored_and_never_followed() {
    let fx = Fixture::new("symlink");
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        let none = SetAttrs::default();
        let l = act(ROOT, |w| vfs.symlink(w, &root, b"escape", b"/etc", &none, false)).unwrap();
        assert_eq!(l.attrs.ftype, FileType::Symlink);
        assert_eq!(act(ROOT, |w| vfs.readlink(w, &l.object)).unwrap(), b"/etc");
        // LOOKUP through the link is not a thing: it is not a directory.
        assert_eq!(errno(&act(ROOT, |w| vfs.lookup(w, &l.object, b"passwd")).err().unwrap()), Some(libc::ENOTDIR));
        // CREATE over a symlink does not write through it.
        let e = act(ROOT, |w| vfs.create(w, &root, b"escape", CreateMode::Unchecked, &none, false)).err().unwrap();
        assert_eq!(errno(&e), Some(libc::EEXIST));
        assert!(act(ROOT, |w| vfs.read(w, &l.object, 0, 10)).is_err());
    });
}

#[test]
fn readdir_cookies_resume_exactly_once() {
    let fx = Fixture::new("readdir");
    let n = 3000;
    for i in 0..n {
        std::fs::write(fx.export_dir.join(format!("f{i:05}")), b"").unwrap();
    }
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        let mut seen = std::collections::HashSet::new();
        let mut cookie = 0;
        let mut calls = 0;
        loop {
            let mut batch = 0;
            let eof = act(ROOT, |w| {
                vfs.readdir(w, &root, cookie, |e| {
                    if batch == 97 {
                        return false;
                    }
                    batch += 1;
                    assert!(seen.insert(e.name.to_vec()), "{:?} listed twice", String::from_utf8_lossy(e.name));
                    cookie = e.cookie;
                    true
                })
            })
            .unwrap();
            calls += 1;
            if eof {
                break;
            }
        }
        assert_eq!(seen.len(), n + 2, "every entry plus . and ..");
        assert!(calls > 30);
        // The root's ".." shows the root itself.
        let root_ino = vfs.getattr(&root).unwrap().fileid;
        act(ROOT, |w| {
            vfs.readdir(w, &root, 0, |e| {
                if e.name == b".." {
                    assert_eq!(e.fileid, root_ino);
                }
                true
            })
        })
        .unwrap();
        let (fh, attrs) = act(ROOT, |w| vfs.entry_plus(w, &root, b"f00042")).unwrap();
        assert_eq!(resolve(&vfs, &fh).unwrap().file_type(), FileType::Regular);
        assert_eq!(attrs.size, 0);
    });
}

#[test]
fn removing_a_name_drops_the_cached_descriptor() {
    let fx = Fixture::new("remove");
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        let c = act(ROOT, |w| vfs.create(w, &root, b"big", CreateMode::Guarded, &SetAttrs::default(), false)).unwrap();
        let fh = c.object.handle().clone();
        drop(c);
        let cached = vfs.cached_inodes();
        act(ROOT, |w| vfs.remove(w, &root, b"big", true)).unwrap();
        assert_eq!(vfs.cached_inodes(), cached - 1);
        assert!(matches!(resolve(&vfs, &fh), Err(StoreError::Stale)));
        // rename over an existing name evicts the victim, not the source.
        let a =
            act(ROOT, |w| vfs.create(w, &root, b"a", CreateMode::Guarded, &SetAttrs::default(), false)).unwrap().object;
        let b =
            act(ROOT, |w| vfs.create(w, &root, b"b", CreateMode::Guarded, &SetAttrs::default(), false)).unwrap().object;
        let b_fh = b.handle().clone();
        drop(b);
        let sub = act(ROOT, |w| vfs.mkdir(w, &root, b"sub", &SetAttrs::default(), true)).unwrap().object;
        act(ROOT, |w| vfs.rename(w, &root, b"a", &root, b"b", true)).unwrap();
        assert!(matches!(resolve(&vfs, &b_fh), Err(StoreError::Stale)));
        assert_eq!(act(ROOT, |w| vfs.lookup(w, &root, b"b")).unwrap().0.handle(), a.handle());
        act(ROOT, |w| vfs.rename(w, &root, b"b", &sub, b"moved", true)).unwrap();
        assert_eq!(act(ROOT, |w| vfs.lookup(w, &sub, b"moved")).unwrap().0.handle(), a.handle());
        assert_eq!(errno(&act(ROOT, |w| vfs.rmdir(w, &root, b"sub", true)).unwrap_err()), Some(libc::ENOTEMPTY));
        assert_eq!(errno(&act(ROOT, |w| vfs.remove(w, &root, b".", true)).unwrap_err()), Some(libc::EINVAL));
        act(ROOT, |w| vfs.link(w, &a, &root, b"hard", true)).unwrap();
        assert_eq!(vfs.getattr(&a).unwrap().nlink, 2);
    });
}

#[test]
fn a_failed_flush_or_write_starts_a_new_verifier_epoch() {
    let fx = Fixture::new("verifier");
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        let f =
            act(ROOT, |w| vfs.create(w, &root, b"f", CreateMode::Guarded, &SetAttrs::default(), false)).unwrap().object;
        let v1 = vfs.write_verifier();
        let out = act(ROOT, |w| vfs.write(w, &f, 0, b"unstable", Stability::Unstable)).unwrap();
        assert_eq!(out.verifier, v1);
        let ino = vfs.getattr(&f).unwrap().fileid;
        let fault = |point, errno| Fault { point, inode: Some(ino), action: FaultAction::Fail(errno), count: 1 };

        // A flush of another file fails: this file's verifier is untouched.
        vfs.faults().arm(Fault { inode: Some(ino + 1_000_000), ..fault(FaultPoint::Fsync, libc::EIO) }).unwrap();
        assert_eq!(act(ROOT, |w| vfs.commit(w, &f, true)).unwrap(), v1);
        vfs.faults().clear();

        vfs.faults().arm(fault(FaultPoint::Fsync, libc::EIO)).unwrap();
        let e = act(ROOT, |w| vfs.commit(w, &f, true)).unwrap_err();
        assert_eq!(errno(&e), Some(libc::EIO));
        let v2 = vfs.write_verifier();
        assert_ne!(v2, v1, "a failed flush must start a new epoch");
        assert_eq!(act(ROOT, |w| vfs.commit(w, &f, true)).unwrap(), v2, "the next COMMIT shows it");

        vfs.faults().arm(fault(FaultPoint::Pwrite, libc::EAGAIN)).unwrap();
        assert!(act(ROOT, |w| vfs.write(w, &f, 0, b"x", Stability::FileSync)).is_err());
        assert_eq!(vfs.write_verifier(), v2, "EAGAIN says nothing about the storage");
        vfs.faults().arm(fault(FaultPoint::Pwrite, libc::ENOSPC)).unwrap();
        assert!(act(ROOT, |w| vfs.write(w, &f, 0, b"x", Stability::Unstable)).is_err());
        assert_ne!(vfs.write_verifier(), v2, "a failed write may have lost earlier data");

        // A metadata flush (a sync CREATE) goes through the same rule.
        let v3 = vfs.write_verifier();
        vfs.faults().arm(Fault { inode: None, ..fault(FaultPoint::Fsync, libc::EIO) }).unwrap();
        assert!(act(ROOT, |w| vfs.create(w, &root, b"g", CreateMode::Guarded, &SetAttrs::default(), true)).is_err());
        assert_ne!(vfs.write_verifier(), v3);
    });
}

#[test]
fn commit_needs_write_access() {
    let fx = Fixture::new("commit-perm");
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        let attrs = SetAttrs { mode: Some(0o644), ..Default::default() };
        let f = act(ROOT, |w| vfs.create(w, &root, b"f", CreateMode::Guarded, &attrs, false)).unwrap().object;
        let e = act(user(1000), |w| vfs.commit(w, &f, true)).unwrap_err();
        assert_eq!(errno(&e), Some(libc::EACCES));
        let e = act(user(1000), |w| vfs.commit(w, &f, false)).unwrap_err();
        assert_eq!(errno(&e), Some(libc::EACCES), "also where nothing is flushed (async)");
        act(ROOT, |w| vfs.commit(w, &f, true)).unwrap();
    });
}

/// An export reload: the exports kept are passed as the same `Arc`s and
/// their objects stay cached; a removed one is retired at once, its
/// handles (cached or not) stale and its objects out of the cache; served
/// again (opened afresh, same id and directory), its handles resolve again.
#[test]
fn set_exports_retires_a_removed_export_and_keeps_the_others() {
    let fx = Fixture::new("reload");
    let second_dir = fx.base.join("second");
    std::fs::create_dir_all(&second_dir).unwrap();
    std::fs::write(second_dir.join("f"), b"x").unwrap();
    let open = |id: u32, path: &PathBuf| Export::open(&ExportSpec { id, path: path.clone(), fsid: None }, &fx.key);
    let store =
        LocalStore::new(vec![open(1, &fx.export_dir).unwrap(), open(2, &second_dir).unwrap()], fx.key.clone(), 64)
            .unwrap();
    let keep = fx.root(&store);
    let second_root = store.lookup_path(2, b"").unwrap();
    let file = act(ROOT, |who| store.lookup(who, &second_root, b"f")).unwrap().0;
    let (keep_fh, file_fh) = (keep.handle().clone(), file.handle().clone());
    let cached = store.cached_inodes();

    let first = store.open_exports().iter().find(|e| e.id == 1).unwrap().clone();
    store.set_exports(vec![first.clone()]);
    assert!(!first.is_retired());
    assert_eq!(store.exports().iter().map(|e| e.id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(store.cached_inodes(), cached - 2, "the removed export's root and file left the cache");
    assert!(matches!(resolve(&store, &file_fh), Err(StoreError::Stale)));
    assert!(matches!(store.lookup_path(2, b""), Err(StoreError::Stale)));
    assert_eq!(resolve(&store, &keep_fh).unwrap().inode().handle.as_bytes(), &keep_fh, "kept, and cached still");

    // A call that held the object across the reload finishes with it; the
    // object knows its export is retired.
    assert!(file.inode().export.is_retired());

    store.set_exports(vec![first, Arc::new(open(2, &second_dir).unwrap())]);
    let again = resolve(&store, &file_fh).expect("served again: its handles resolve");
    assert!(!again.inode().export.is_retired());
}

/// The file's bytes, a pattern no shifted copy of itself matches.
fn pattern(len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect()
}

#[test]
fn spliced_reads_return_exactly_the_files_bytes() {
    let fx = Fixture::new("splice");
    let data = pattern((3 << 20) + 123);
    std::fs::write(fx.export_dir.join("big"), &data).unwrap();
    on_worker(move || {
        let mut vfs = fx.vfs();
        vfs.splice_reads(2, 1 << 20).expect("pipes of 1 MiB");
        let root = fx.root(&vfs);
        let (file, _) = act(ROOT, |w| vfs.lookup(w, &root, b"big")).unwrap();
        let size = data.len() as u64;
        let cases: &[(u64, usize)] = &[
            (0, 0),
            (0, 1),
            (0, 4095),
            (0, 4096),
            (4096, 64 << 10),
            (0, 1 << 20),
            (1 << 20, 1 << 20),
            (1, 1 << 20),            // one page more than the pipe: copied
            (4095, 100 << 10),       // unaligned, fits
            (size - 1000, 64 << 10), // across EOF
            (size - 40_000, 1 << 20),
            (size, 4096),        // at EOF
            (size + 5000, 4096), // past EOF
        ];
        let mut spliced = 0;
        for &(offset, count) in cases {
            let out = act(ROOT, |w| vfs.read(w, &file, offset, count)).unwrap();
            spliced += matches!(out.data, ReadData::Pipe(_)) as usize;
            let start = (offset as usize).min(data.len());
            let end = (start + count).min(data.len());
            assert_eq!(out.eof, end == data.len(), "eof at {offset}+{count}");
            let got = out.data.into_bytes().unwrap();
            assert!(got[..] == data[start..end], "data at {offset}+{count}: {} bytes, want {}", got.len(), end - start);
        }
        assert_eq!(spliced, 5, "the large reads that fit a pipe were spliced");
        let counts = vfs.pipe_counts().unwrap();
        assert_eq!((counts.made, counts.discarded, counts.exhausted), (2, 0, 0));
        // Both pipes held at once: the third read copies.
        let a = act(ROOT, |w| vfs.read(w, &file, 0, 64 << 10)).unwrap();
        let b = act(ROOT, |w| vfs.read(w, &file, 0, 64 << 10)).unwrap();
        let c = act(ROOT, |w| vfs.read(w, &file, 0, 64 << 10)).unwrap();
        assert!(matches!((&a.data, &b.data, &c.data), (ReadData::Pipe(_), ReadData::Pipe(_), ReadData::Bytes(_))));
        assert_eq!(vfs.pipe_counts().unwrap().exhausted, 1);
        // Dropped unread: drained and back in the pool.
        drop((a, b));
        let d = act(ROOT, |w| vfs.read(w, &file, 8192, 64 << 10)).unwrap();
        assert!(matches!(d.data, ReadData::Pipe(_)));
        assert!(d.data.into_bytes().unwrap()[..] == data[8192..8192 + (64 << 10)]);
    });
}

#[test]
fn a_spliced_read_of_a_file_truncated_before_it_is_sent_fails_rather_than_lying() {
    let fx = Fixture::new("splice-trunc");
    let path = fx.export_dir.join("shrinks");
    let data = pattern(256 << 10);
    std::fs::write(&path, &data).unwrap();
    on_worker(move || {
        let mut vfs = fx.vfs();
        vfs.splice_reads(1, 1 << 20).unwrap();
        let root = fx.root(&vfs);
        let (file, _) = act(ROOT, |w| vfs.lookup(w, &root, b"shrinks")).unwrap();
        let out = act(ROOT, |w| vfs.read(w, &file, 0, 256 << 10)).unwrap();
        assert!(matches!(out.data, ReadData::Pipe(_)));
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
        // The pipe references the pages the READ found: it yields the data
        // as it was then (Linux 6.18 does), or an error for pages that
        // left the file (ENODATA, as older kernels check; the transport
        // closes the connection), never other bytes.
        match out.data.into_bytes() {
            Ok(got) => assert!(got[..] == data[..got.len()], "bytes that were never in the file"),
            Err(e) => assert_eq!(errno(&e), Some(libc::ENODATA), "{e}"),
        }
        // The next READ sees the truncated file.
        let out = act(ROOT, |w| vfs.read(w, &file, 0, 256 << 10)).unwrap();
        assert!(out.eof && out.data.is_empty());
        // And the pool still serves.
        std::fs::write(&path, &data).unwrap();
        let out = act(ROOT, |w| vfs.read(w, &file, 0, 256 << 10)).unwrap();
        assert!(out.data.into_bytes().unwrap()[..] == data[..]);
    });
}

thread_local! {
    static ANNOUNCED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn count_announcement() {
    ANNOUNCED.with(|n| n.set(n.get() + 1));
}

/// Whether the page cache holds the page of `file` at `offset` (mincore(2)
/// on a mapping: asking starts no read, unlike a read with RWF_NOWAIT).
fn page_cached(file: &std::fs::File, len: usize, offset: usize) -> bool {
    use std::os::fd::AsRawFd;
    let pages = len.div_ceil(4096);
    let mut resident = vec![0u8; pages];
    // SAFETY: a private read-only mapping of `len` bytes of an open file,
    // asked about and unmapped here; mincore writes one byte per page into
    // `resident`, which has that many.
    unsafe {
        let map = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0);
        assert_ne!(map, libc::MAP_FAILED, "mmap");
        assert_eq!(libc::mincore(map, len, resident.as_mut_ptr()), 0, "mincore");
        libc::munmap(map, len);
    }
    resident[offset / 4096] & 1 != 0
}

/// How many times `f` announced a wait for storage (`blocking::may_block`).
fn announcements<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = ANNOUNCED.with(|n| n.get());
    let out = f();
    (out, ANNOUNCED.with(|n| n.get()) - before)
}

#[test]
fn a_small_read_announces_a_wait_only_when_its_data_is_not_in_memory() {
    let fx = Fixture::new("read-cached");
    let path = fx.export_dir.join("f");
    let data = pattern(256 << 10);
    std::fs::write(&path, &data).unwrap();
    std::fs::File::open(&path).unwrap().sync_all().unwrap();
    let fx_dir = fx.export_dir.clone();
    // tmpfs neither reads without waiting (RWF_NOWAIT: EOPNOTSUPP, so every
    // READ there announces) nor drops pages: say so rather than fail on
    // the counts below.
    let nowait = {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(&path).unwrap();
        let mut page = [0u8; 4096];
        let iov = libc::iovec { iov_base: page.as_mut_ptr().cast(), iov_len: page.len() };
        // SAFETY: one iovec over a live local buffer.
        unsafe { libc::preadv2(f.as_raw_fd(), &iov, 1, 0, libc::RWF_NOWAIT) }
    };
    assert_eq!(
        nowait,
        4096,
        "{} cannot read without waiting (tmpfs?): run the tests with TMPDIR on a disk-backed file system",
        fx_dir.display()
    );
    on_worker(move || {
        keel_store::blocking::set_hook(Some(count_announcement));
        let mut vfs = fx.vfs();
        vfs.splice_reads(1, 1 << 20).unwrap();
        let root = fx.root(&vfs);
        let (file, _) = act(ROOT, |w| vfs.lookup(w, &root, b"f")).unwrap();
        let read = |offset: u64, count: usize| act(ROOT, |w| vfs.read(w, &file, offset, count)).unwrap();
        let check = |out: ReadOut, offset: usize, count: usize| {
            let end = (offset + count).min(data.len());
            assert_eq!(out.eof, end == data.len(), "eof at {offset}+{count}");
            assert!(out.data.into_bytes().unwrap()[..] == data[offset..end], "data at {offset}+{count}");
        };
        // Written just now: in memory.
        let (out, n) = announcements(|| read(4096, 4096));
        assert_eq!(n, 0, "a read from the page cache announced a wait");
        check(out, 4096, 4096);
        let (out, n) = announcements(|| read((256 << 10) - 100, 4096));
        assert_eq!(n, 0, "a cached read across the end of the file announced a wait");
        check(out, (256 << 10) - 100, 4096);
        // Dropped from memory (clean, so the kernel lets them go). The
        // no-wait attempt itself starts the read-ahead, and a fast enough
        // disk can finish it before the kernel looks again: then the read
        // rightly did not wait. Such a race is rare, so a few tries tell it
        // from a store that never announces.
        let f = std::fs::File::open(fx.export_dir.join("f")).unwrap();
        let announced = (0..8).any(|_| {
            // SAFETY: plain syscall on a live descriptor.
            assert_eq!(
                unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, libc::POSIX_FADV_DONTNEED) },
                0
            );
            assert!(!page_cached(&f, 256 << 10, 128 << 10), "{} kept the dropped pages", fx_dir.display());
            let (out, n) = announcements(|| read(128 << 10, 8192));
            assert!(n <= 1, "one read announced {n} waits");
            check(out, 128 << 10, 8192);
            n == 1
        });
        assert!(announced, "reads from the disk did not announce their wait");
        // In memory again now.
        let (out, n) = announcements(|| read(128 << 10, 8192));
        assert_eq!(n, 0);
        check(out, 128 << 10, 8192);
    });
}

#[test]
fn a_spliced_read_announces_a_wait_only_when_its_data_is_not_in_memory() {
    let fx = Fixture::new("splice-cached");
    let path = fx.export_dir.join("f");
    let data = pattern(3 << 20);
    std::fs::write(&path, &data).unwrap();
    std::fs::File::open(&path).unwrap().sync_all().unwrap();
    let fx_dir = fx.export_dir.clone();
    on_worker(move || {
        keel_store::blocking::set_hook(Some(count_announcement));
        let mut vfs = fx.vfs();
        vfs.splice_reads(1, 1 << 20).unwrap();
        let root = fx.root(&vfs);
        let (file, _) = act(ROOT, |w| vfs.lookup(w, &root, b"f")).unwrap();
        let read = |offset: u64, count: usize| act(ROOT, |w| vfs.read(w, &file, offset, count)).unwrap();
        let check = |out: ReadOut, offset: usize, count: usize| {
            let end = (offset + count).min(data.len());
            assert!(matches!(out.data, ReadData::Pipe(_)), "a READ of {count} bytes is spliced");
            assert_eq!(out.eof, end == data.len(), "eof at {offset}+{count}");
            assert!(out.data.into_bytes().unwrap()[..] == data[offset..end], "data at {offset}+{count}");
        };
        // Written just now: in memory, so neither READ waits, nor says it
        // will (which handed the worker's place on, a context switch each).
        let (out, n) = announcements(|| read(0, 1 << 20));
        assert_eq!(n, 0, "a 1 MiB READ from the page cache announced a wait");
        check(out, 0, 1 << 20);
        let (out, n) = announcements(|| read((3 << 20) - 100_000, 1 << 20));
        assert_eq!(n, 0, "a cached READ across the end of the file announced a wait");
        check(out, (3 << 20) - 100_000, 1 << 20);
        // Dropped from memory (clean, so the kernel lets them go): that
        // READ waits for the disk, and says so first.
        let f = std::fs::File::open(&path).unwrap();
        // SAFETY: plain syscall on a live descriptor.
        let dropped =
            unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(dropped, 0, "posix_fadvise");
        assert!(!page_cached(&f, 3 << 20, (1 << 20) + 4096), "{} kept the dropped pages", fx_dir.display());
        let (out, n) = announcements(|| read(1 << 20, 1 << 20));
        assert_eq!(n, 1, "a READ from the disk announced {n} waits");
        check(out, 1 << 20, 1 << 20);
        // In memory again now.
        let (out, n) = announcements(|| read(1 << 20, 1 << 20));
        assert_eq!(n, 0);
        check(out, 1 << 20, 1 << 20);
    });
}

/// NFSv4.2's verbs on XFS: a hole punched reads as zeros and SEEK finds
/// it; ALLOCATE reserves blocks past the end; COPY shares the source's
/// blocks (a reflink: the extents are marked shared) and reads back the
/// same bytes.
#[test]
fn xfs_holes_allocation_and_reflinked_copies() {
    let disk = keel_testkit::disk::XfsDisk::new("v42");
    let export_dir = disk.mnt.join("export");
    std::fs::create_dir(&export_dir).unwrap();
    let key = HandleKey::from_bytes([4; 16]);
    let data = pattern(1 << 20);
    let (dir, written) = (export_dir.clone(), data.clone());
    let (hole, next_data, allocated, copied) = on_worker(move || {
        let export = Export::open(&ExportSpec { id: 1, path: dir, fsid: None }, &key).unwrap();
        let vfs = LocalStore::new(vec![export], key, 1024).unwrap();
        act(ROOT, |who| {
            let root = vfs.lookup_path(1, b"").unwrap();
            let none = SetAttrs::default();
            let mk = |name: &[u8]| vfs.create(who, &root, name, CreateMode::Guarded, &none, false).unwrap().object;
            let (src, dst, big) = (mk(b"src"), mk(b"dst"), mk(b"big"));
            vfs.write(who, &src, 0, &written, Stability::FileSync).unwrap();
            vfs.fallocate(who, &src, Space::PunchHole, 65536, 131072, true).unwrap();
            let hole = vfs.seek(who, &src, 0, SeekWhat::Hole).unwrap();
            let next_data = vfs.seek(who, &src, 65536, SeekWhat::Data).unwrap();
            vfs.fallocate(who, &big, Space::Allocate, 0, 4 << 20, true).unwrap();
            let allocated = vfs.getattr(&big).unwrap();
            let copied = vfs.copy_range(who, &src, 0, &dst, 0, 1 << 20, true).unwrap();
            assert_eq!(errno(&vfs.seek(who, &src, 1 << 20, SeekWhat::Data).unwrap_err()), Some(libc::ENXIO));
            (hole, next_data, allocated, copied)
        })
    });
    assert_eq!((hole, next_data), (65536, 196608), "SEEK finds the punched hole and the data after it");
    assert_eq!(allocated.size, 4 << 20);
    assert!(allocated.used >= 4 << 20, "ALLOCATE reserved the blocks: {} bytes used", allocated.used);
    assert_eq!(copied, 1 << 20);
    let mut want = data.clone();
    want[65536..196608].fill(0);
    assert!(std::fs::read(export_dir.join("src")).unwrap() == want, "the hole reads as zeros");
    assert!(std::fs::read(export_dir.join("dst")).unwrap() == want, "the copy has the same bytes");
    let extents = std::process::Command::new("filefrag").arg("-v").arg(export_dir.join("dst")).output().unwrap();
    let extents = String::from_utf8_lossy(&extents.stdout);
    assert!(extents.contains("shared"), "COPY reflinked the blocks on XFS:\n{extents}");
}

/// Waits (at most `WAIT_S` seconds) until `done`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    const WAIT_S: u64 = 20;
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < std::time::Duration::from_secs(WAIT_S), "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The lease tests, one at a time: one of them turns leases off for the
/// whole system for a moment.
static LEASE_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The system's `fs.leases-enable`, set for a test and put back when
/// dropped (a panic included).
struct LeasesEnable(String);

impl LeasesEnable {
    const PATH: &str = "/proc/sys/fs/leases-enable";

    fn set(value: &str) -> LeasesEnable {
        let was = std::fs::read_to_string(Self::PATH).unwrap();
        std::fs::write(Self::PATH, value).unwrap();
        LeasesEnable(was)
    }
}

impl Drop for LeasesEnable {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, self.0.trim());
    }
}

/// inotify watches this process holds (every instance's, from fdinfo).
fn inotify_watches() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().contains("inotify")))
        .filter_map(|e| std::fs::read_to_string(format!("/proc/self/fdinfo/{}", e.file_name().to_string_lossy())).ok())
        .map(|info| info.lines().filter(|l| l.starts_with("inotify wd:")).count())
        .sum()
}

/// A file system (or a system) that grants no leases: no lease, so no
/// delegation, and the watch taken for it is given back; leases work
/// again once allowed.
#[test]
fn a_system_that_refuses_leases_gets_no_lease_and_keeps_no_watch() {
    let _leases = LEASE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let fx = Fixture::new("lease-refused");
    std::fs::write(fx.export_dir.join("f"), b"data").unwrap();
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        let f = act(user(1000), |w| vfs.lookup(w, &root, b"f")).unwrap().0;
        let watches = inotify_watches();
        {
            let _off = LeasesEnable::set("0");
            let e = vfs.read_lease(&f).unwrap_err();
            assert_eq!(errno(&e), Some(libc::EINVAL), "{e}");
            assert_eq!(inotify_watches(), watches, "the refused lease's watch is given back");
        }
        let lease = vfs.read_lease(&f).unwrap();
        assert!(!lease.is_broken());
        assert_eq!(inotify_watches(), watches + 1);
        drop(lease);
        assert_eq!(inotify_watches(), watches);
    });
}

#[test]
fn a_read_lease_holds_a_local_writer_until_dropped_and_the_store_never_waits_on_its_own() {
    let _leases = LEASE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let fx = Fixture::new("lease");
    let path = fx.export_dir.join("f");
    std::fs::write(&path, b"old").unwrap();
    // Owned by someone else than the callers: the store takes the lease
    // as the owner (Keel asks for no CAP_LEASE).
    std::os::unix::fs::chown(&path, Some(4242), Some(4242)).unwrap();
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        let f = act(user(1000), |w| vfs.lookup(w, &root, b"f")).unwrap().0;
        let lease = act(user(1000), |_| vfs.read_lease(&f)).unwrap();
        assert!(!lease.is_broken());
        assert!(lease.break_wait() > std::time::Duration::ZERO);

        // A local process opens f for writing: it waits for the lease.
        let (done, opened) = std::sync::mpsc::channel();
        let writer_path = path.clone();
        let writer = std::thread::spawn(move || {
            // A root process (this thread would inherit the caller's fsuid).
            keel_store_local::ident::reset().unwrap();
            let mut file = std::fs::OpenOptions::new().write(true).truncate(true).open(&writer_path).unwrap();
            std::io::Write::write_all(&mut file, b"new").unwrap();
            done.send(()).unwrap();
        });
        wait_until("the lease is broken", || lease.is_broken());
        assert!(opened.try_recv().is_err(), "the writer waits while the lease is held");
        // The store's own write does not wait on the lease: EAGAIN.
        let e = act(ROOT, |w| vfs.write(w, &f, 0, b"keel", Stability::FileSync)).unwrap_err();
        assert_eq!(errno(&e), Some(libc::EAGAIN));
        assert!(opened.try_recv().is_err(), "still waiting");
        drop(lease);
        opened.recv_timeout(std::time::Duration::from_secs(20)).expect("the writer goes on once the lease is dropped");
        writer.join().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");

        // A file open for writing somewhere gets no lease.
        let held = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert_eq!(errno(&vfs.read_lease(&f).unwrap_err()), Some(libc::EAGAIN));
        drop(held);
        drop(vfs.read_lease(&f).unwrap());
        // Nor a directory.
        assert_eq!(errno(&vfs.read_lease(&root).unwrap_err()), Some(libc::EINVAL));
    });
}

/// The store's own descriptions open for writing (a file it created, or
/// wrote) stand in the way of a read lease only until it lets go of them:
/// an idle synchronous writer at once, the shared writer once the calls
/// holding the inode are done (the handle then resolves to an inode opened
/// read-only), after a sync through it whose failure changes the write
/// verifier. Not while a lock description of the inode is open (the lease
/// could not be had anyway).
#[test]
fn the_store_lets_go_of_its_own_writable_descriptions_for_a_read_lease() {
    let _leases = LEASE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let fx = Fixture::new("lease-own-writers");
    std::fs::write(fx.export_dir.join("old"), b"old").unwrap();
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        let fresh = |obj: &LocalObject| resolve(&vfs, obj.handle()).unwrap();

        // A file created here (its description is O_RDWR), written.
        let made = act(user(1000), |w| vfs.create(w, &root, b"f", CreateMode::Guarded, &SetAttrs::default(), true));
        let f = made.unwrap().object;
        act(user(1000), |w| vfs.write(w, &f, 0, b"data", Stability::Unstable)).unwrap();
        assert_eq!(errno(&vfs.read_lease(&f).unwrap_err()), Some(libc::EAGAIN), "the caller holds the inode");
        assert!(!Arc::ptr_eq(f.inode(), fresh(&f).inode()), "it left the cache");
        drop(f);
        let f = fresh(&f_handle(&vfs, &root, b"f"));
        let lease = vfs.read_lease(&f).expect("reopened read-only, the lease is had");
        assert!(!lease.is_broken());
        drop(lease);
        assert_eq!(act(user(1000), |w| vfs.read(w, &f, 0, 16)).unwrap().data.len(), 4);

        // A synchronous write's idle description: closed, the lease had at once.
        let old = act(user(1000), |w| vfs.lookup(w, &root, b"old")).unwrap().0;
        act(ROOT, |w| vfs.write(w, &old, 0, b"NEW", Stability::FileSync)).unwrap();
        drop(vfs.read_lease(&old).expect("the idle synchronous writer is closed"));
        assert!(Arc::ptr_eq(old.inode(), fresh(&old).inode()), "it stays cached");

        // An unstable write whose write-back fails before it is let go of:
        // the sync reports it, and the verifier changes.
        act(ROOT, |w| vfs.write(w, &old, 0, b"new", Stability::Unstable)).unwrap();
        let before = vfs.write_verifier();
        let ino = std::fs::metadata(fx.export_dir.join("old")).unwrap().ino();
        let fault =
            Fault { point: FaultPoint::Fsync, inode: Some(ino), action: FaultAction::Fail(libc::EIO), count: 1 };
        vfs.faults().arm(fault).unwrap();
        assert_eq!(errno(&vfs.read_lease(&old).unwrap_err()), Some(libc::EAGAIN));
        assert_ne!(vfs.write_verifier(), before, "the failed sync changed the verifier");
        vfs.faults().clear();
        drop(old);

        // A lock description of the inode stands in the way: kept.
        let old = act(user(1000), |w| vfs.lookup(w, &root, b"old")).unwrap().0;
        act(ROOT, |w| vfs.write(w, &old, 0, b"NEW", Stability::Unstable)).unwrap();
        let locks = act(ROOT, |w| vfs.open_for_locks(w, &old)).unwrap();
        assert_eq!(errno(&vfs.read_lease(&old).unwrap_err()), Some(libc::EAGAIN));
        assert!(Arc::ptr_eq(old.inode(), fresh(&old).inode()), "not let go of while a lock description is open");
        drop(locks);
        drop(old);
    });
}

/// A caller that holds the object alone (an OPEN) has the read lease at
/// once where the store's own writable description stood in the way: the
/// store lets go of it and puts the object the handle names afresh in the
/// caller's place, and the old inode, with its descriptions, is closed.
/// Not while another call holds the old object (EAGAIN, as before).
#[test]
fn a_caller_holding_the_object_alone_has_the_read_lease_at_once_after_the_store_s_writes() {
    let _leases = LEASE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let fx = Fixture::new("lease-replacing");
    std::fs::write(fx.export_dir.join("old"), b"old").unwrap();
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);

        // A file created here (its description is O_RDWR), written.
        let made = act(user(1000), |w| vfs.create(w, &root, b"f", CreateMode::Guarded, &SetAttrs::default(), true));
        let mut f = made.unwrap().object;
        act(user(1000), |w| vfs.write(w, &f, 0, b"data", Stability::Unstable)).unwrap();
        let created = Arc::downgrade(f.inode());
        let lease = vfs.read_lease_replacing(&mut f).expect("the lease at the first attempt");
        assert!(!lease.is_broken());
        assert!(created.upgrade().is_none(), "the inode opened at the creation is closed");
        assert_eq!(&act(user(1000), |w| vfs.read(w, &f, 0, 16)).unwrap().data.into_bytes().unwrap()[..], b"data");
        assert!(Arc::ptr_eq(f.inode(), resolve(&vfs, f.handle()).unwrap().inode()), "the new one is cached");
        drop(lease);

        // A file written here (its shared writer opened by the write).
        let mut old = act(user(1000), |w| vfs.lookup(w, &root, b"old")).unwrap().0;
        act(ROOT, |w| vfs.write(w, &old, 0, b"NEW", Stability::Unstable)).unwrap();
        drop(vfs.read_lease_replacing(&mut old).expect("the written file's lease at the first attempt"));

        // Another call holds the old object: its writer stays open, no lease.
        act(ROOT, |w| vfs.write(w, &old, 0, b"new", Stability::Unstable)).unwrap();
        let other = old.clone();
        assert_eq!(errno(&vfs.read_lease_replacing(&mut old).unwrap_err()), Some(libc::EAGAIN));
        drop(other);
        drop(vfs.read_lease_replacing(&mut old).expect("the next attempt"));
        assert_eq!(std::fs::read(fx.export_dir.join("old")).unwrap(), b"new");
    });
}

/// The store's change of a leased file's attributes or names on behalf of
/// the lease's holder (bracketed by `holder_change_begins`/`_ends`) is not
/// a break, another lease's on the same file excepted; a local process's
/// change a moment later still is, and so is one made before the holder's
/// began. A write lease's holder may change the size too.
#[test]
fn the_holder_s_own_change_through_the_store_does_not_break_its_lease() {
    let _leases = LEASE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let fx = Fixture::new("lease-holder-change");
    let dir = fx.export_dir.clone();
    std::fs::write(dir.join("f"), b"data").unwrap();
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        let f = act(ROOT, |w| vfs.lookup(w, &root, b"f")).unwrap().0;
        let mode = |m| SetAttrs { mode: Some(m), ..SetAttrs::default() };
        let lease = vfs.read_lease(&f).unwrap();
        let other = vfs.read_lease(&f).unwrap();
        lease.holder_change_begins();
        act(ROOT, |w| vfs.setattr(w, &f, &mode(0o600), None, true)).unwrap();
        assert!(!lease.is_broken(), "not looked at while the change is in progress");
        lease.holder_change_ends();
        assert!(!lease.is_broken(), "the holder's own chmod");
        assert!(other.is_broken(), "another lease on the file sees the change");
        drop(other);
        // Its rename and link too.
        lease.holder_change_begins();
        act(ROOT, |w| vfs.rename(w, &root, b"f", &root, b"g", true)).unwrap();
        act(ROOT, |w| vfs.link(w, &f, &root, b"h", true)).unwrap();
        lease.holder_change_ends();
        assert!(!lease.is_broken(), "the holder's own rename and link");
        // A local chmod a moment later is a break.
        let d = dir.clone();
        as_local_process(move || {
            std::fs::set_permissions(d.join("g"), std::fs::Permissions::from_mode(0o640)).unwrap()
        });
        wait_until("a local chmod after the holder's breaks the lease", || lease.is_broken());
        drop(lease);

        // A change before the holder's began stays a break.
        let lease = vfs.read_lease(&f).unwrap();
        let d = dir.clone();
        as_local_process(move || {
            std::fs::set_permissions(d.join("g"), std::fs::Permissions::from_mode(0o644)).unwrap()
        });
        lease.holder_change_begins();
        act(ROOT, |w| vfs.setattr(w, &f, &mode(0o600), None, true)).unwrap();
        lease.holder_change_ends();
        assert!(lease.is_broken(), "the local change before the holder's is not absorbed");
        drop(lease);

        // A write lease's holder: mode and size.
        let made = act(ROOT, |w| vfs.create(w, &root, b"w", CreateMode::Guarded, &SetAttrs::default(), true));
        let w = made.unwrap().object;
        let lease = vfs.write_lease(&w).unwrap();
        lease.holder_change_begins();
        let set = SetAttrs { mode: Some(0o600), size: Some(3), ..SetAttrs::default() };
        act(ROOT, |c| vfs.setattr(c, &w, &set, None, true)).unwrap();
        lease.holder_change_ends();
        act(ROOT, |c| vfs.write(c, &w, 0, b"more", Stability::Unstable)).unwrap();
        assert!(!lease.is_broken(), "the holder's own chmod and truncation, then its write");
        let d = dir.clone();
        as_local_process(move || {
            std::fs::set_permissions(d.join("w"), std::fs::Permissions::from_mode(0o644)).unwrap()
        });
        wait_until("a local chmod breaks the write lease", || lease.is_broken());
    });
}

/// The object `name` names in `dir`, looked up afresh.
fn f_handle(vfs: &LocalStore, dir: &LocalObject, name: &[u8]) -> LocalObject {
    act(ROOT, |w| vfs.lookup(w, dir, name)).unwrap().0
}

/// A write lease is had on the store's own description of a file it
/// created (its writes and reads go through it without breaking it), and
/// another process's open for reading breaks it: that reader waits until
/// the lease is dropped and then reads what the store wrote meanwhile.
#[test]
fn a_write_lease_is_broken_by_another_process_s_open_for_reading() {
    let _leases = LEASE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let fx = Fixture::new("write-lease");
    let path = fx.export_dir.join("w");
    std::fs::write(fx.export_dir.join("old"), b"old").unwrap();
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        // Created and committed (through a description of its own, kept).
        let made = act(user(1000), |w| vfs.create(w, &root, b"w", CreateMode::Guarded, &SetAttrs::default(), true));
        let f = made.unwrap().object;
        let lease = vfs.write_lease(&f).unwrap();
        assert!(!lease.is_broken());
        // The store's own I/O goes through the leased description.
        act(user(1000), |w| vfs.write(w, &f, 0, b"first", Stability::FileSync)).unwrap();
        act(user(1000), |w| vfs.write(w, &f, 0, b"first", Stability::Unstable)).unwrap();
        act(user(1000), |w| vfs.read(w, &f, 0, 16)).unwrap();
        assert!(!lease.is_broken(), "the store's own writes (synchronous too) and reads do not break it");
        // Out of the cache of open objects, its handle finds the leased
        // description again (a new open would break the lease).
        vfs.uncache(&f);
        let again = vfs.resolve(f.handle(), |_| Ok::<_, StoreError>(())).unwrap().0;
        act(user(1000), |w| vfs.read(w, &again, 0, 16)).unwrap();
        assert!(!lease.is_broken(), "found again, not opened again");

        // A local process opens w for reading: it waits for the lease.
        let (done, read) = std::sync::mpsc::channel();
        let reader_path = path.clone();
        let reader = std::thread::spawn(move || {
            keel_store_local::ident::reset().unwrap();
            done.send(std::fs::read(&reader_path).unwrap()).unwrap();
        });
        wait_until("the write lease is broken by a reader", || lease.is_broken());
        // What the lease's holder writes back while it is recalled.
        act(user(1000), |w| vfs.write(w, &f, 5, b" second", Stability::Unstable)).unwrap();
        assert!(read.try_recv().is_err(), "the reader waits while the lease is held");
        drop(lease);
        let seen = read.recv_timeout(std::time::Duration::from_secs(20)).expect("the reader goes on once dropped");
        reader.join().unwrap();
        assert_eq!(seen, b"first second");

        // No write lease while another description of the file is open: a
        // local reader's, or the store's own read-only one (a file it did
        // not create).
        let held = std::fs::File::open(&path).unwrap();
        assert_eq!(errno(&vfs.write_lease(&f).unwrap_err()), Some(libc::EAGAIN));
        drop(held);
        drop(vfs.write_lease(&f).unwrap());
        let old = act(user(1000), |w| vfs.lookup(w, &root, b"old")).unwrap().0;
        assert_eq!(errno(&vfs.write_lease(&old).unwrap_err()), Some(libc::EAGAIN));
        assert_eq!(errno(&vfs.write_lease(&root).unwrap_err()), Some(libc::EINVAL));
    });
}

/// Whether a process on the server can take an exclusive OFD lock on all
/// of `file` now.
fn local_lock_free(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed flock is valid; l_pid 0 as OFD locks require.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: a valid descriptor and flock.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) == 0 }
}

/// Whether a write lock on all of `file` would be free (F_OFD_GETLK:
/// needs no writable description, so a reader's open keeps a read lease).
fn write_lock_would_be_free(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed flock is valid; l_pid 0 as OFD locks require.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: a valid descriptor and flock.
    assert_eq!(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) }, 0);
    fl.l_type == libc::F_UNLCK as libc::c_short
}

/// A write lease's holder that locks while it gives the lease up (an
/// NFSv4.1 client returning its delegation) locks through the lease's own
/// description: a process that the lease kept waiting in its open finds
/// the range locked as soon as the open goes through. Every lock owner of
/// the holder's gets it lent (any open of a description of its own would
/// break the lease), and the store arbitrates among them: to each, the
/// others' locks are another description's. Dropped, a lent description's
/// locks go, though the store's cached inode keeps the description open.
#[test]
fn locks_taken_through_a_lease_s_description_hold_from_before_the_lease_goes() {
    let _leases = LEASE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let fx = Fixture::new("lease-lock");
    let path = fx.export_dir.join("w");
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        let made = act(user(1000), |w| vfs.create(w, &root, b"w", CreateMode::Guarded, &SetAttrs::default(), true));
        let f = made.unwrap().object;
        let lease = vfs.write_lease(&f).unwrap();

        // A local process opens w for writing (it waits for the lease),
        // then tries to lock bytes 10..20, which the second owner holds.
        let (done, locked) = std::sync::mpsc::channel();
        let locker_path = path.clone();
        let locker = std::thread::spawn(move || {
            keel_store_local::ident::reset().unwrap();
            let file = std::fs::OpenOptions::new().read(true).write(true).open(&locker_path).unwrap();
            done.send((range_free(&file, 10, 10), range_free(&file, 30, 10), range_free(&file, 0, 10))).unwrap();
        });
        wait_until("the write lease is broken by the process's open", || lease.is_broken());
        let first = vfs.lock_file_on_lease(&f, &lease).unwrap();
        let second = vfs.lock_file_on_lease(&f, &lease).expect("lent to a second owner too");
        let r = LockRange::new;
        assert_eq!(first.try_lock(LockKind::Exclusive, r(0, 10)).unwrap(), None);
        assert_eq!(second.try_lock(LockKind::Exclusive, r(10, 10)).unwrap(), None);
        let refused = second.try_lock(LockKind::Shared, r(5, 10)).unwrap().expect("the first owner's lock");
        assert_eq!((refused.kind, refused.range), (LockKind::Exclusive, r(0, 10)));
        assert_eq!(second.test(LockKind::Exclusive, r(0, 1)).unwrap().map(|c| c.range), Some(r(0, 10)));
        assert_eq!(first.try_lock(LockKind::Shared, r(30, 10)).unwrap(), None);
        assert_eq!(second.try_lock(LockKind::Shared, r(35, 10)).unwrap(), None, "shared locks of two owners overlap");
        // The first lets 30..40 go: 35..40 stays the second's.
        first.unlock(r(30, 10)).unwrap();
        assert!(locked.try_recv().is_err(), "the process waits while the lease is held");
        drop(lease);
        let (second_s, shared, first_s) =
            locked.recv_timeout(std::time::Duration::from_secs(20)).expect("the open goes on once dropped");
        locker.join().unwrap();
        assert!(!second_s, "the second owner's lock was had before the lease went");
        assert!(!first_s, "and the first's");
        assert!(!shared, "35..40 is still the second's");

        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        assert!(range_free(&file, 30, 5), "what the first let go of and no one else held went");
        // A later write lease on the same description (the store's cached
        // inode's) lends it again, to an owner the store arbitrates with
        // the first two.
        drop(file);
        let later = vfs.write_lease(&f).unwrap();
        let third = vfs.lock_file_on_lease(&f, &later).unwrap();
        assert!(third.try_lock(LockKind::Exclusive, r(15, 1)).unwrap().is_some(), "the second owner's range");
        assert_eq!(third.try_lock(LockKind::Exclusive, r(50, 1)).unwrap(), None);
        drop(later);

        drop(second);
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        assert!(range_free(&file, 10, 10) && range_free(&file, 35, 10), "the second's locks went with it");
        assert!(!range_free(&file, 0, 10) && !range_free(&file, 50, 1), "the others' stay");
        drop((first, third));
        assert!(local_lock_free(&file), "every lent description's locks went with it");
    });
}

/// Whether a process on the server could take an exclusive OFD lock on
/// `len` bytes of `file` from `start` (F_OFD_GETLK: nothing is taken).
fn range_free(file: &std::fs::File, start: i64, len: i64) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed flock is valid; l_pid 0 as OFD locks require.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    (fl.l_start, fl.l_len) = (start, len);
    // SAFETY: a valid descriptor and flock.
    assert_eq!(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) }, 0);
    fl.l_type == libc::F_UNLCK as libc::c_short
}

/// A read lease's description is open for reading only: an exclusive lock
/// through it is EBADF (LOCK then gives up the lease and opens a
/// description of its own), and the failed attempt gives the description
/// back, so a shared lock through it is had next.
#[test]
fn an_exclusive_lock_through_a_read_lease_s_description_is_ebadf_and_gives_it_back() {
    let _leases = LEASE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let fx = Fixture::new("read-lease-lock");
    let path = fx.export_dir.join("r");
    std::fs::write(&path, b"read").unwrap();
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        let r = act(user(1000), |w| vfs.lookup(w, &root, b"r")).unwrap().0;
        let lease = vfs.read_lease(&r).unwrap();
        let lent = vfs.lock_file_on_lease(&r, &lease).unwrap();
        let refused = lent.try_lock(LockKind::Exclusive, LockRange::new(0, 0)).unwrap_err();
        assert_eq!(errno(&refused), Some(libc::EBADF));
        drop(lent);
        let again = vfs.lock_file_on_lease(&r, &lease).expect("given back once dropped");
        assert_eq!(again.try_lock(LockKind::Shared, LockRange::new(0, 4)).unwrap(), None);
        assert!(!lease.is_broken(), "a shared lock through the lease's own description keeps it");
        let file = std::fs::OpenOptions::new().read(true).write(false).open(&path).unwrap();
        assert!(!write_lock_would_be_free(&file), "the shared lock is held against writers");
        drop(again);
        assert!(write_lock_would_be_free(&file), "and released with the lent description");
    });
}

/// A write lease on a file the store opened read-only (found by its
/// handle after a restart: a write delegation reclaimed) is had once the
/// caller's object is replaced by one open for writing; a local reader's
/// open then breaks it.
#[test]
fn a_write_lease_on_a_file_opened_read_only_is_had_by_reopening_it_for_writing() {
    let _leases = LEASE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let fx = Fixture::new("write-lease-reopen");
    let path = fx.export_dir.join("old");
    std::fs::write(&path, b"old").unwrap();
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        let mut old = act(user(1000), |w| vfs.lookup(w, &root, b"old")).unwrap().0;
        assert_eq!(errno(&vfs.write_lease(&old).unwrap_err()), Some(libc::EAGAIN), "read-only: none");
        let lease = vfs.write_lease_replacing(&mut old).unwrap();
        assert!(!lease.is_broken());
        act(ROOT, |w| vfs.write(w, &old, 3, b" and new", Stability::FileSync)).unwrap();
        assert!(!lease.is_broken(), "the store writes through the leased description");
        let reader_path = path.clone();
        let reader = std::thread::spawn(move || {
            keel_store_local::ident::reset().unwrap();
            std::fs::read(&reader_path).unwrap()
        });
        wait_until("a local reader breaks the write lease", || lease.is_broken());
        drop(lease);
        assert_eq!(reader.join().unwrap(), b"old and new");
    });
}

/// Runs `change` as a root process on the server would (not as this
/// worker's caller).
fn as_local_process(change: impl FnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        keel_store_local::ident::reset().unwrap();
        change();
    })
    .join()
    .unwrap();
}

#[test]
fn a_read_lease_counts_as_broken_when_another_process_changes_the_file_s_attributes_or_names() {
    use std::os::unix::fs::PermissionsExt;
    let _leases = LEASE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let fx = Fixture::new("lease-watch");
    let dir = fx.export_dir.clone();
    type Change = Box<dyn FnOnce(&std::path::Path) + Send>;
    let changes: Vec<(&str, Change)> = vec![
        ("chmod", Box::new(|d| std::fs::set_permissions(d.join("f"), std::fs::Permissions::from_mode(0o600)).unwrap())),
        ("chown", Box::new(|d| std::os::unix::fs::chown(d.join("f"), Some(4242), Some(4242)).unwrap())),
        (
            "utimes",
            Box::new(|d| std::fs::File::open(d.join("f")).unwrap().set_modified(std::time::UNIX_EPOCH).unwrap()),
        ),
        ("hard link", Box::new(|d| std::fs::hard_link(d.join("f"), d.join("f-link")).unwrap())),
        ("rename", Box::new(|d| std::fs::rename(d.join("f"), d.join("f-renamed")).unwrap())),
        ("rename over it", Box::new(|d| std::fs::rename(d.join("other"), d.join("f")).unwrap())),
        ("unlink", Box::new(|d| std::fs::remove_file(d.join("f")).unwrap())),
    ];
    on_worker(move || {
        let vfs = fx.vfs();
        let root = fx.root(&vfs);
        for (what, change) in changes {
            for name in ["f", "other", "f-link", "f-renamed"] {
                let _ = std::fs::remove_file(dir.join(name));
            }
            std::fs::write(dir.join("f"), b"data").unwrap();
            std::fs::write(dir.join("other"), b"other").unwrap();
            let f = act(user(1000), |w| vfs.lookup(w, &root, b"f")).unwrap().0;
            let lease = vfs.read_lease(&f).unwrap();
            // Another lease on the same file, taken and dropped, changes
            // nothing for this one.
            drop(vfs.read_lease(&f).unwrap());
            // Reading the file and its attributes does not break it.
            assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"data");
            vfs.getattr(&f).unwrap();
            assert!(!lease.is_broken(), "{what}: broken before the change");
            let d = dir.clone();
            as_local_process(move || change(&d));
            wait_until(&format!("the lease counts as broken after a local {what}"), || lease.is_broken());
            drop(lease);
            // A lease taken after the change is not broken by it.
            if what != "rename over it" && what != "unlink" {
                let again = vfs.read_lease(&f).unwrap();
                assert!(!again.is_broken(), "{what}: a later lease is broken by an earlier change");
            }
        }
    });
}

//! The simulated store on its own: durability and crashes, faults,
//! permissions, handles, cookies, replay.

use super::*;
use crate::attr::access;
use crate::{Object as _, Store};

const ROOT: Cred = Cred::ROOT;

fn user(uid: u32) -> Cred {
    Cred::new(uid, uid, &[])
}

fn root_dir(s: &SimStore) -> SimObject {
    s.lookup_path(1, b"").unwrap()
}

fn file(s: &SimStore, name: &[u8], commit: bool) -> SimObject {
    let who = s.act_as(&ROOT).unwrap();
    s.create(&who, &root_dir(s), name, CreateMode::Guarded, &SetAttrs::default(), commit).unwrap().object
}

fn write(s: &SimStore, f: &SimObject, offset: u64, data: &[u8], how: Stability) -> StoreResult<WriteOut> {
    s.write(&s.act_as(&ROOT).unwrap(), f, offset, data, how)
}

fn errno(e: StoreError) -> Option<i32> {
    e.raw_os_error()
}

#[test]
fn a_crash_keeps_what_was_flushed_and_loses_the_rest() {
    let s = SimStore::new(1);
    let who = s.act_as(&ROOT).unwrap();
    let synced = file(&s, b"synced", true);
    let lost = file(&s, b"lost", false);
    write(&s, &synced, 0, b"unstable", Stability::Unstable).unwrap();
    s.commit(&who, &synced, true).unwrap();
    write(&s, &synced, 100, b"stable", Stability::FileSync).unwrap();
    write(&s, &synced, 200, b"dsync", Stability::DataSync).unwrap();
    write(&s, &synced, 300, b"gone", Stability::Unstable).unwrap();
    write(&s, &lost, 0, b"never flushed", Stability::FileSync).unwrap();
    let v = s.write_verifier();
    s.crash(CrashMode::DurableOnly);
    assert_ne!(s.write_verifier(), v, "a restart starts a new epoch");
    let data = s.file_data(synced.fileid()).unwrap();
    assert_eq!(data.len(), 205, "the last write was not flushed");
    assert_eq!(&data[..8], b"unstable");
    assert_eq!(&data[100..106], b"stable");
    assert_eq!(&data[200..205], b"dsync");
    // `lost` was created without a flush of the directory: its name is gone.
    assert!(matches!(s.getattr(&lost), Err(StoreError::Stale)));
    let root = root_dir(&s);
    assert_eq!(errno(s.lookup(&who, &root, b"lost").unwrap_err()), Some(libc::ENOENT));
    assert_eq!(s.lookup(&who, &root, b"synced").unwrap().0, synced, "handles survive");
}

#[test]
fn a_flushed_directory_keeps_its_names_but_not_their_unflushed_data() {
    let s = SimStore::new(2);
    let who = s.act_as(&ROOT).unwrap();
    let root = root_dir(&s);
    let sub = s.mkdir(&who, &root, b"d", &SetAttrs::default(), true).unwrap().object;
    let f = s.create(&who, &sub, b"f", CreateMode::Unchecked, &SetAttrs::default(), false).unwrap().object;
    write(&s, &f, 0, b"data", Stability::Unstable).unwrap();
    s.commit(&who, &sub, true).unwrap();
    s.crash(CrashMode::DurableOnly);
    assert_eq!(s.file_data(f.fileid()).unwrap(), b"", "the name made it, the data did not");
    s.remove(&who, &sub, b"f", false).unwrap();
    s.rmdir(&who, &root, b"d", true).unwrap();
    s.crash(CrashMode::DurableOnly);
    assert_eq!(errno(s.lookup(&who, &root, b"d").unwrap_err()), Some(libc::ENOENT));
}

#[test]
fn failed_writes_and_flushes_start_a_new_epoch_except_eagain() {
    let s = SimStore::new(3);
    let who = s.act_as(&ROOT).unwrap();
    let f = file(&s, b"f", true);
    let v0 = s.write_verifier();
    assert_eq!(write(&s, &f, 0, b"a", Stability::Unstable).unwrap().verifier, v0);
    s.inject(SimFault::fail(SimPoint::Write, libc::EAGAIN));
    assert_eq!(errno(write(&s, &f, 0, b"b", Stability::Unstable).unwrap_err()), Some(libc::EAGAIN));
    assert_eq!(s.write_verifier(), v0, "EAGAIN says nothing about the storage");
    s.inject(SimFault::fail(SimPoint::Sync, libc::EIO).on(f.fileid()));
    assert_eq!(errno(s.commit(&who, &f, true).unwrap_err()), Some(libc::EIO));
    let v1 = s.write_verifier();
    assert_ne!(v1, v0);
    assert_eq!(s.commit(&who, &f, true).unwrap(), v1, "the next COMMIT reports the new epoch");
    s.inject(SimFault::fail(SimPoint::Write, libc::ENOSPC));
    assert!(write(&s, &f, 0, b"c", Stability::FileSync).is_err());
    assert_ne!(s.write_verifier(), v1);
    assert_eq!(s.faults_struck(), 3);
}

#[test]
fn a_torn_write_leaves_whole_sectors_and_fails() {
    let mut torn_lengths = BTreeSet::new();
    for seed in 0..32 {
        let s = SimStore::new(seed);
        let f = file(&s, b"f", true);
        let v = s.write_verifier();
        s.inject(SimFault { point: SimPoint::Write, fileid: None, action: SimAction::Torn, count: 1 });
        let data = vec![0xabu8; 4096];
        assert_eq!(errno(write(&s, &f, 0, &data, Stability::FileSync).unwrap_err()), Some(libc::EIO), "seed {seed}");
        assert_ne!(s.write_verifier(), v, "seed {seed}");
        let len = s.file_data(f.fileid()).unwrap().len();
        assert_eq!(len % 512, 0, "seed {seed}");
        torn_lengths.insert(len);
    }
    assert!(torn_lengths.len() > 1, "the seed chooses where a write tears: {torn_lengths:?}");
}

#[test]
fn random_faults_follow_their_rate() {
    let s = SimStore::new(4);
    let f = file(&s, b"f", true);
    s.inject_rate(SimFaultRate { point: SimPoint::Write, ppm: 250_000, action: SimAction::Fail(libc::EIO) });
    let failed = (0..1000).filter(|_| write(&s, &f, 0, b"x", Stability::Unstable).is_err()).count();
    assert!((150..350).contains(&failed), "{failed} of 1000 at 25 %");
    s.clear_faults();
    assert!(write(&s, &f, 0, b"x", Stability::Unstable).is_ok());
}

#[test]
fn the_same_seed_replays_the_same_run() {
    let run = |seed| {
        let s = SimStore::new(seed);
        let who = s.act_as(&ROOT).unwrap();
        let f = file(&s, b"f", true);
        s.inject_rate(SimFaultRate { point: SimPoint::Write, ppm: 100_000, action: SimAction::Torn });
        for i in 0..200u64 {
            let _ = write(&s, &f, (i * 777) % 20_000, &[i as u8; 1500], Stability::Unstable);
            if i % 50 == 49 {
                let _ = s.commit(&who, &f, true);
            }
        }
        s.crash(CrashMode::SomeUnsynced);
        (s.file_data(f.fileid()), s.write_verifier())
    };
    assert_eq!(run(77), run(77));
    assert_ne!(run(77), run(78));
}

#[test]
fn permissions_are_checked_against_the_caller() {
    let s = SimStore::new(5);
    let root = root_dir(&s);
    let (alice, bob) = (s.act_as(&user(1000)).unwrap(), s.act_as(&user(1001)).unwrap());
    let ro = SetAttrs { mode: Some(0o444), ..SetAttrs::default() };
    let mine = s.create(&alice, &root, b"mine", CreateMode::Guarded, &ro, false).unwrap().object;
    s.write(&alice, &mine, 0, b"ok", Stability::Unstable).expect("the owner may write a 0444 file (knfsd)");
    assert_eq!(errno(s.write(&bob, &mine, 0, b"no", Stability::Unstable).unwrap_err()), Some(libc::EACCES));
    assert_eq!(s.access(&bob, &mine, 0x3f).unwrap(), access::READ);
    let chown = SetAttrs { uid: Some(1001), ..SetAttrs::default() };
    assert_eq!(errno(s.setattr(&alice, &mine, &chown, None, false).unwrap_err()), Some(libc::EPERM));
    let chmod = SetAttrs { mode: Some(0o666), ..SetAttrs::default() };
    assert_eq!(errno(s.setattr(&bob, &mine, &chmod, None, false).unwrap_err()), Some(libc::EPERM));
    let private = s.mkdir(&alice, &root, b"private", &SetAttrs { mode: Some(0o700), ..SetAttrs::default() }, false);
    let private = private.unwrap().object;
    assert_eq!(errno(s.lookup(&bob, &private, b"x").unwrap_err()), Some(libc::EACCES));
    assert_eq!(errno(s.lookup(&alice, &private, b"x").unwrap_err()), Some(libc::ENOENT));
    let dev = NodeKind::Char { major: 1, minor: 3 };
    assert_eq!(
        errno(s.mknod(&alice, &root, b"null", dev, &SetAttrs::default(), false).unwrap_err()),
        Some(libc::EPERM)
    );
    // Sticky directory: bob may not remove alice's file.
    let who = s.act_as(&ROOT).unwrap();
    let tmp = s.mkdir(&who, &root, b"tmp", &SetAttrs { mode: Some(0o1777), ..SetAttrs::default() }, false).unwrap();
    s.create(&alice, &tmp.object, b"a", CreateMode::Guarded, &SetAttrs::default(), false).unwrap();
    assert_eq!(errno(s.remove(&bob, &tmp.object, b"a", false).unwrap_err()), Some(libc::EPERM));
    s.remove(&alice, &tmp.object, b"a", false).unwrap();
    assert_eq!(errno(s.act_as(&Cred::new(u32::MAX, 1, &[])).unwrap_err()), Some(libc::EPERM));
}

#[test]
fn forged_handles_are_bad_and_removed_objects_stale() {
    let s = SimStore::with_exports(6, &[(1, "/a"), (2, "/b")]);
    let who = s.act_as(&ROOT).unwrap();
    let f = file(&s, b"f", false);
    let ok = |fh: &Bytes| s.resolve(fh, |_| Ok::<_, StoreError>(())).map(|(o, ())| o);
    assert_eq!(ok(f.handle()).unwrap(), f);
    for i in 0..f.handle().len() {
        let mut forged = f.handle().to_vec();
        forged[i] ^= 1;
        assert!(matches!(ok(&Bytes::from(forged)), Err(StoreError::BadHandle)), "byte {i}");
    }
    assert!(matches!(ok(&Bytes::from_static(b"short")), Err(StoreError::BadHandle)));
    // Admission comes first, with the handle's export.
    let refused = s.resolve(f.handle(), |id| if id == 1 { Err(StoreError::errno(libc::EACCES)) } else { Ok(()) });
    assert_eq!(errno(refused.unwrap_err()), Some(libc::EACCES));
    assert_eq!(f.export_id(), 1);
    assert_eq!(s.lookup_path(2, b"").unwrap().export_id(), 2);
    s.remove(&who, &root_dir(&s), b"f", false).unwrap();
    assert!(matches!(ok(f.handle()), Err(StoreError::Stale)));
    assert!(matches!(s.read(&who, &f, 0, 1), Err(StoreError::Stale)));
}

#[test]
fn readdir_cookies_resume_after_changes() {
    let s = SimStore::new(7);
    let who = s.act_as(&ROOT).unwrap();
    let root = root_dir(&s);
    for i in 0..10 {
        s.create(&who, &root, format!("f{i}").as_bytes(), CreateMode::Guarded, &SetAttrs::default(), false).unwrap();
    }
    let mut first = Vec::new();
    let eof = s.readdir(&who, &root, 0, |e| {
        first.push((e.name.to_vec(), e.cookie));
        first.len() < 5
    });
    assert!(!eof.unwrap());
    assert_eq!(first[0].0, b".");
    assert_eq!(first[1].0, b"..");
    let resume = first.last().unwrap().1;
    s.remove(&who, &root, b"f1", false).unwrap();
    s.remove(&who, &root, b"f2", false).unwrap();
    let mut rest = Vec::new();
    assert!(
        s.readdir(&who, &root, resume, |e| {
            rest.push(e.name.to_vec());
            true
        })
        .unwrap()
    );
    let expected: Vec<Vec<u8>> = (3..10).map(|i| format!("f{i}").into_bytes()).collect();
    assert_eq!(rest, expected);
    assert!(matches!(s.readdir(&who, &root, 1 << 40, |_| true), Err(StoreError::BadCookie)));
}

#[test]
fn rename_and_link_keep_counts_and_refuse_what_the_kernel_refuses() {
    let s = SimStore::new(8);
    let who = s.act_as(&ROOT).unwrap();
    let root = root_dir(&s);
    let a = s.mkdir(&who, &root, b"a", &SetAttrs::default(), false).unwrap().object;
    let b = s.mkdir(&who, &a, b"b", &SetAttrs::default(), false).unwrap().object;
    assert_eq!(errno(s.rename(&who, &root, b"a", &b, b"loop", false).unwrap_err()), Some(libc::EINVAL));
    let f = file(&s, b"f", false);
    s.link(&who, &f, &a, b"f2", false).unwrap();
    assert_eq!(s.getattr(&f).unwrap().nlink, 2);
    assert_eq!(errno(s.rename(&who, &root, b"f", &root, b"a", false).unwrap_err()), Some(libc::EISDIR));
    assert_eq!(errno(s.rename(&who, &a, b"b", &root, b"f", false).unwrap_err()), Some(libc::ENOTDIR));
    s.rename(&who, &a, b"b", &root, b"b", true).unwrap();
    assert_eq!(s.getattr(&root).unwrap().nlink, 4);
    assert_eq!(s.lookup(&who, &b, b"..").unwrap().0, root);
    s.remove(&who, &root, b"f", false).unwrap();
    assert_eq!(s.getattr(&f).unwrap().nlink, 1);
    assert_eq!(errno(s.rmdir(&who, &root, b"a", false).unwrap_err()), Some(libc::ENOTEMPTY));
}

#[test]
fn a_rename_over_an_ancestor_of_the_source_is_enotempty_whatever_the_types() {
    let s = SimStore::new(9);
    let who = s.act_as(&ROOT).unwrap();
    let root = root_dir(&s);
    let d = s.mkdir(&who, &root, b"d", &SetAttrs::default(), false).unwrap().object;
    s.create(&who, &d, b"f", CreateMode::Guarded, &SetAttrs::default(), false).unwrap();
    s.mkdir(&who, &d, b"e", &SetAttrs::default(), false).unwrap();
    // As Linux's lock_rename trap, before the file-over-directory rule.
    assert_eq!(errno(s.rename(&who, &d, b"f", &root, b"d", false).unwrap_err()), Some(libc::ENOTEMPTY));
    assert_eq!(errno(s.rename(&who, &d, b"e", &root, b"d", false).unwrap_err()), Some(libc::ENOTEMPTY));
}

#[test]
fn only_the_owner_or_a_user_who_may_read_and_write_links_a_file() {
    let s = SimStore::new(10);
    let root = root_dir(&s);
    let f = file(&s, b"f", false);
    let bob = s.act_as(&user(1000)).unwrap();
    assert_eq!(errno(s.link(&bob, &f, &root, b"mine", false).unwrap_err()), Some(libc::EPERM));
    let who = s.act_as(&ROOT).unwrap();
    s.setattr(&who, &f, &SetAttrs { mode: Some(0o666), ..SetAttrs::default() }, None, false).unwrap();
    s.link(&bob, &f, &root, b"mine", false).unwrap();
    s.setattr(&who, &f, &SetAttrs { mode: Some(0o4666), ..SetAttrs::default() }, None, false).unwrap();
    assert_eq!(errno(s.link(&bob, &f, &root, b"setuid", false).unwrap_err()), Some(libc::EPERM));
}

#[test]
fn a_crash_with_write_back_keeps_flushed_data_and_some_of_the_rest() {
    let mut kept_some = false;
    for seed in 0..64 {
        let s = SimStore::new(seed);
        let f = file(&s, b"f", true);
        write(&s, &f, 0, &[1; 4096], Stability::FileSync).unwrap();
        for i in 1..8u64 {
            write(&s, &f, i * 4096, &[i as u8 + 1; 4096], Stability::Unstable).unwrap();
        }
        s.crash(CrashMode::SomeUnsynced);
        let data = s.file_data(f.fileid()).unwrap();
        assert_eq!(&data[..4096], &[1; 4096][..], "seed {seed}: acknowledged stable data is there");
        kept_some |= data.len() > 4096;
    }
    assert!(kept_some, "write-back lets some un-flushed writes through");
}

#[test]
fn check_io_makes_the_checks_of_read_and_write_with_the_owner_s_override() {
    let s = SimStore::new(41);
    let root = root_dir(&s);
    let set = SetAttrs { mode: Some(0o444), uid: Some(5), gid: Some(5), ..SetAttrs::default() };
    let who = s.act_as(&ROOT).unwrap();
    let f = s.create(&who, &root, b"ro", CreateMode::Guarded, &set, true).unwrap().object;
    let owner = s.act_as(&user(5)).unwrap();
    let other = s.act_as(&user(6)).unwrap();
    assert_eq!(s.check_io(&owner, &f, true).unwrap().uid, 5, "the owner may write a file it owns");
    assert!(s.check_io(&other, &f, false).is_ok());
    assert_eq!(errno(s.check_io(&other, &f, true).unwrap_err()), Some(libc::EACCES));
    assert_eq!(errno(s.check_io(&who, &root, false).unwrap_err()), Some(libc::EISDIR));
}

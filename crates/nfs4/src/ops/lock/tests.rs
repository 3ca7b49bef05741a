//! LOCK, LOCKT and LOCKU against the simulated store: conflicts between
//! NFSv4.1 clients and with a lock held through another description (an
//! NLM client's or a local process's, as keel-nlm and fcntl hold them),
//! LOCK4denied's details, unlocking and range splitting, upgrades,
//! stateid errors, and locks released with their state.

use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_nfs4_proto::{
    ExistLockOwner4, FreeStateid4Args, Lock4Args, Lock4Denied, Lock4Res, LockOwner4, Locker4, Lockt4Args, Lockt4Res,
    Locku4Args, NfsLockType4, Nfsstat4, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OpenToLockOwner4, Stateid4,
};
use keel_store::{Cred, LockFile, LockKind, LockRange, Store};
use keel_xdr::Opaque;

use super::harness::{Client, Rig};
use super::{OpOutcome, lock, lockt, locku};

const W: NfsLockType4 = NfsLockType4::WriteLt;
const R: NfsLockType4 = NfsLockType4::ReadLt;
const TO_END: u64 = u64::MAX;

fn owner(clientid: u64, name: &str) -> LockOwner4 {
    LockOwner4 { clientid, owner: Opaque(Bytes::copy_from_slice(name.as_bytes())) }
}

fn new_owner(open: Stateid4, name: &str) -> Locker4 {
    Locker4::OpenOwner(OpenToLockOwner4 {
        open_seqid: 0,
        open_stateid: open,
        lock_seqid: 0,
        lock_owner: owner(0, name),
    })
}

fn existing(lock_stateid: Stateid4) -> Locker4 {
    Locker4::LockOwner(ExistLockOwner4 { lock_stateid, lock_seqid: 0 })
}

fn do_lock(rig: &Rig, cl: &mut Client, file: &Bytes, kind: NfsLockType4, at: (u64, u64), who: Locker4) -> Lock4Res {
    let args = Lock4Args { locktype: kind, reclaim: false, offset: at.0, length: at.1, locker: who };
    rig.call(cl, 1, Instant::now(), Some(file), |c| lock(c, args).into_res())
}

fn granted(res: Lock4Res) -> Stateid4 {
    match res {
        Lock4Res::Ok(ok) => ok.lock_stateid,
        other => panic!("LOCK not granted: {other:?}"),
    }
}

fn denial(res: Lock4Res) -> Lock4Denied {
    match res {
        Lock4Res::Denied(d) => d,
        other => panic!("LOCK not denied: {other:?}"),
    }
}

fn do_lockt(rig: &Rig, cl: &mut Client, file: &Bytes, kind: NfsLockType4, at: (u64, u64), name: &str) -> Lockt4Res {
    let args = Lockt4Args { locktype: kind, offset: at.0, length: at.1, owner: owner(cl.clientid.0, name) };
    rig.call(cl, 1, Instant::now(), Some(file), |c| lockt(c, args).into_res())
}

fn do_locku(rig: &Rig, cl: &mut Client, file: &Bytes, stateid: Stateid4, at: (u64, u64)) -> Result<Stateid4, Nfsstat4> {
    let args = Locku4Args { locktype: W, seqid: 0, lock_stateid: stateid, offset: at.0, length: at.1 };
    rig.call(cl, 1, Instant::now(), Some(file), |c| locku(c, args))
}

/// A description of the file as keel-nlm (or a local process) holds one.
fn other_description(rig: &Rig, file: &Bytes) -> keel_store::sim::SimLockFile {
    let who = rig.store.act_as(&Cred::ROOT).unwrap();
    rig.store.open_for_locks(&who, &rig.object(file)).unwrap()
}

/// RFC 8881 section 18.10.4: a conflicting lock of another client is
/// NFS4ERR_DENIED with the holder's owner, range and type; other ranges
/// and shared locks are granted; LOCKU lets the waiter in.
#[test]
fn two_clients_conflict_and_denied_names_the_holder() {
    let rig = Rig::new(false);
    let f = rig.file("f", b"");
    let (mut a, mut b) = (rig.client("a"), rig.client("b"));
    let (oa, ob) = (rig.open(&a, "oa", &f, OPEN4_SHARE_ACCESS_BOTH), rig.open(&b, "ob", &f, OPEN4_SHARE_ACCESS_BOTH));
    let la = granted(do_lock(&rig, &mut a, &f, W, (0, 100), new_owner(oa, "la")));
    assert_eq!(la.seqid, 1);
    let d = denial(do_lock(&rig, &mut b, &f, W, (50, 10), new_owner(ob, "lb")));
    assert_eq!((d.offset, d.length, d.locktype), (0, 100, W));
    assert_eq!(d.owner, owner(a.clientid.0, "la"), "the holder's client ID and lock owner");
    let d = denial(do_lock(&rig, &mut b, &f, NfsLockType4::ReadwLt, (99, TO_END), new_owner(ob, "lb")));
    assert_eq!(d.owner, owner(a.clientid.0, "la"), "a blocking lock is answered at once");
    let lb = granted(do_lock(&rig, &mut b, &f, W, (100, TO_END), new_owner(ob, "lb")));
    let d = denial(do_lock(&rig, &mut a, &f, R, (200, 1), existing(la)));
    assert_eq!((d.offset, d.length, d.owner.clone()), (100, TO_END, owner(b.clientid.0, "lb")), "to the end");
    let la = do_locku(&rig, &mut a, &f, la, (0, 100)).unwrap();
    assert_eq!(la.seqid, 2, "LOCKU moved the seqid on; the denied LOCK did not");
    granted(do_lock(&rig, &mut b, &f, W, (50, 10), existing(lb)));
}

/// One lock space: a lock held through another description (an NLM
/// client's, a local process's) denies a v4 LOCK, with a synthetic owner
/// as knfsd gives (client ID 0, an empty owner), and a v4 lock denies it.
#[test]
fn a_lock_of_another_description_and_a_v4_lock_exclude_each_other() {
    let rig = Rig::new(false);
    let f = rig.file("f", b"");
    let mut a = rig.client("a");
    let oa = rig.open(&a, "oa", &f, OPEN4_SHARE_ACCESS_BOTH);
    let nlm = other_description(&rig, &f);
    assert_eq!(nlm.try_lock(LockKind::Exclusive, LockRange::new(0, 10)).unwrap(), None);
    let d = denial(do_lock(&rig, &mut a, &f, R, (5, 1), new_owner(oa, "la")));
    assert_eq!((d.offset, d.length, d.locktype, d.owner), (0, 10, W, owner(0, "")));
    let la = granted(do_lock(&rig, &mut a, &f, W, (20, 10), new_owner(oa, "la")));
    let held = nlm.try_lock(LockKind::Shared, LockRange::new(25, 1)).unwrap();
    assert_eq!(held.map(|h| (h.kind, h.range)), Some((LockKind::Exclusive, LockRange::new(20, 10))));
    assert!(matches!(do_lockt(&rig, &mut a, &f, W, (0, 1), "la"), Lockt4Res::Denied(_)));
    nlm.unlock(LockRange::new(0, 0)).unwrap();
    do_locku(&rig, &mut a, &f, la, (0, TO_END)).unwrap();
    assert_eq!(nlm.try_lock(LockKind::Exclusive, LockRange::new(0, 0)).unwrap(), None, "all released");
}

/// RFC 8881 section 18.11: LOCKT changes nothing, does not count the lock
/// owner's own locks, and names the holder as LOCK does.
#[test]
fn lockt_tests_without_taking() {
    let rig = Rig::new(false);
    let f = rig.file("f", b"");
    let (mut a, mut b) = (rig.client("a"), rig.client("b"));
    let oa = rig.open(&a, "oa", &f, OPEN4_SHARE_ACCESS_BOTH);
    assert_eq!(do_lockt(&rig, &mut b, &f, W, (0, TO_END), "lb"), Lockt4Res::Ok(()), "nothing held");
    granted(do_lock(&rig, &mut a, &f, W, (10, 10), new_owner(oa, "la")));
    assert_eq!(do_lockt(&rig, &mut a, &f, W, (0, 100), "la"), Lockt4Res::Ok(()), "its own lock");
    let Lockt4Res::Denied(d) = do_lockt(&rig, &mut a, &f, R, (0, 100), "another") else { panic!("denied") };
    assert_eq!((d.offset, d.length, d.owner), (10, 10, owner(a.clientid.0, "la")));
    let Lockt4Res::Denied(d) = do_lockt(&rig, &mut b, &f, R, (19, 1), "lb") else { panic!("denied") };
    assert_eq!(d.owner, owner(a.clientid.0, "la"));
    assert_eq!(do_lockt(&rig, &mut b, &f, R, (20, 1), "lb"), Lockt4Res::Ok(()));
    let ob = rig.open(&b, "ob", &f, OPEN4_SHARE_ACCESS_BOTH);
    granted(do_lock(&rig, &mut b, &f, W, (20, 1), new_owner(ob, "lb")));
}

/// LOCKU of the middle of a range splits it, as POSIX and OFD locks do;
/// a write lock over a read lock of the same owner upgrades it, and only
/// when no one else holds the range.
#[test]
fn unlock_splits_and_locks_upgrade_and_downgrade() {
    let rig = Rig::new(false);
    let f = rig.file("f", b"");
    let (mut a, mut b) = (rig.client("a"), rig.client("b"));
    let (oa, ob) = (rig.open(&a, "oa", &f, OPEN4_SHARE_ACCESS_BOTH), rig.open(&b, "ob", &f, OPEN4_SHARE_ACCESS_BOTH));
    let la = granted(do_lock(&rig, &mut a, &f, W, (0, 100), new_owner(oa, "la")));
    let la = do_locku(&rig, &mut a, &f, la, (40, 20)).unwrap();
    let lb = granted(do_lock(&rig, &mut b, &f, W, (45, 5), new_owner(ob, "lb")));
    assert_eq!(denial(do_lock(&rig, &mut b, &f, W, (30, 20), existing(lb))).length, 40, "the first piece");
    assert_eq!(denial(do_lock(&rig, &mut b, &f, W, (55, 10), existing(lb))).offset, 60, "the second piece");
    let lb = do_locku(&rig, &mut b, &f, lb, (0, TO_END)).unwrap();

    let la = granted(do_lock(&rig, &mut a, &f, R, (200, 10), existing(la)));
    let lb = granted(do_lock(&rig, &mut b, &f, R, (200, 10), existing(lb)));
    let d = denial(do_lock(&rig, &mut a, &f, W, (200, 10), existing(la)));
    assert_eq!((d.locktype, d.owner), (R, owner(b.clientid.0, "lb")), "an upgrade waits for the other reader");
    do_locku(&rig, &mut b, &f, lb, (200, 10)).unwrap();
    let la = granted(do_lock(&rig, &mut a, &f, W, (200, 10), existing(la)));
    assert!(matches!(do_lockt(&rig, &mut b, &f, R, (205, 1), "lb"), Lockt4Res::Denied(_)), "upgraded");
    granted(do_lock(&rig, &mut a, &f, R, (200, 10), existing(la)));
    assert_eq!(do_lockt(&rig, &mut b, &f, R, (205, 1), "lb"), Lockt4Res::Ok(()), "downgraded");
}

/// Stateids and ranges that are wrong get RFC 8881's errors.
#[test]
fn bad_stateids_modes_and_ranges_are_refused() {
    let rig = Rig::new(false);
    let f = rig.file("f", b"");
    let g = rig.file("g", b"");
    let (mut a, b) = (rig.client("a"), rig.client("b"));
    let oa = rig.open(&a, "oa", &f, OPEN4_SHARE_ACCESS_BOTH);
    let ob = rig.open(&b, "ob", &f, OPEN4_SHARE_ACCESS_BOTH);
    let ro = rig.open(&a, "ro", &g, OPEN4_SHARE_ACCESS_READ);
    let status = |r: Lock4Res| match r {
        Lock4Res::Fail(s) => s,
        other => panic!("LOCK did not fail: {other:?}"),
    };
    let forged = Stateid4 { seqid: 1, other: [9; 12] };
    assert_eq!(status(do_lock(&rig, &mut a, &f, W, (0, 1), new_owner(forged, "l"))), Nfsstat4::BadStateid);
    assert_eq!(status(do_lock(&rig, &mut a, &f, W, (0, 1), new_owner(ob, "l"))), Nfsstat4::BadStateid, "B's");
    assert_eq!(status(do_lock(&rig, &mut a, &g, W, (0, 1), new_owner(oa, "l"))), Nfsstat4::BadStateid, "f's");
    assert_eq!(status(do_lock(&rig, &mut a, &f, W, (0, 1), existing(oa))), Nfsstat4::BadStateid, "an open's");
    assert_eq!(status(do_lock(&rig, &mut a, &g, W, (0, 1), new_owner(ro, "l"))), Nfsstat4::Openmode);
    assert_eq!(status(do_lock(&rig, &mut a, &f, W, (0, 0), new_owner(oa, "l"))), Nfsstat4::Inval);
    assert_eq!(status(do_lock(&rig, &mut a, &f, W, (u64::MAX, 2), new_owner(oa, "l"))), Nfsstat4::Inval);
    let past = i64::MAX as u64 + 1;
    assert_eq!(status(do_lock(&rig, &mut a, &f, W, (past, 1), new_owner(oa, "l"))), Nfsstat4::BadRange);
    let current = Stateid4::CURRENT;
    assert_eq!(status(do_lock(&rig, &mut a, &f, W, (0, 1), new_owner(current, "l"))), Nfsstat4::BadStateid);
    assert_eq!(do_locku(&rig, &mut a, &f, oa, (0, 1)), Err(Nfsstat4::BadStateid), "LOCKU of an open stateid");
    let l = granted(do_lock(&rig, &mut a, &g, R, (0, TO_END), new_owner(ro, "l")));
    let old = Stateid4 { seqid: 0, ..l };
    assert_eq!(do_locku(&rig, &mut a, &g, Stateid4 { seqid: 5, ..l }, (0, 1)), Err(Nfsstat4::BadStateid));
    assert!(do_locku(&rig, &mut a, &g, old, (0, 1)).is_ok(), "seqid 0: the current one (RFC 8881 8.2.2)");
    let dir = rig.call(&mut a, 1, Instant::now(), None, |c| {
        let root = c.store().lookup_path(1, b"").unwrap();
        c.current = Some(crate::compound::Filehandle::Export(c.admit(keel_store::Object::handle(&root)).unwrap()));
        lock(c, Lock4Args { locktype: W, reclaim: false, offset: 0, length: 1, locker: new_owner(oa, "l") }).into_res()
    });
    assert_eq!(status(dir), Nfsstat4::Isdir);
}

/// The locks of a lock state go with it: FREE_STATEID refuses a lock
/// stateid that holds locks (NFS4ERR_LOCKS_HELD), and so does CLOSE of
/// its open; once unlocked and freed, its description is closed.
#[test]
fn locks_held_keep_their_state_and_free_stateid_releases_it() {
    let rig = Rig::new(false);
    let f = rig.file("f", b"");
    let mut a = rig.client("a");
    let oa = rig.open(&a, "oa", &f, OPEN4_SHARE_ACCESS_BOTH);
    let la = granted(do_lock(&rig, &mut a, &f, W, (0, 10), new_owner(oa, "la")));
    let free = |rig: &Rig, a: &mut Client, s: Stateid4| {
        rig.call(a, 1, Instant::now(), Some(&f), |c| {
            crate::ops::session::free_stateid(c, FreeStateid4Args { fsa_stateid: s })
        })
    };
    assert_eq!(free(&rig, &mut a, la), Err(Nfsstat4::LocksHeld));
    let close = |rig: &Rig, a: &mut Client| {
        let args = keel_nfs4_proto::Close4Args { seqid: 0, open_stateid: oa };
        rig.call(a, 1, Instant::now(), Some(&f), |c| crate::ops::open::close(c, args))
    };
    assert_eq!(close(&rig, &mut a), Err(Nfsstat4::LocksHeld), "CLOSE with locks held (RFC 8881 section 18.2.4)");
    let la = do_locku(&rig, &mut a, &f, la, (0, 10)).unwrap();
    assert_eq!(free(&rig, &mut a, la), Ok(()));
    assert!(close(&rig, &mut a).is_ok());
    let nlm = other_description(&rig, &f);
    assert_eq!(nlm.try_lock(LockKind::Exclusive, LockRange::new(0, 0)).unwrap(), None);
}

/// A client whose lease expired keeps its locks as a courtesy client
/// (knfsd since 5.19) until another client's LOCK runs into one: then it
/// is expired, its descriptions are closed, and the LOCK is granted.
#[test]
fn a_courtesy_client_s_lock_gives_way_and_is_released() {
    let rig = Rig::new(false);
    let f = rig.file("f", b"");
    let (mut a, mut b) = (rig.client("a"), rig.client("b"));
    let (oa, ob) = (rig.open(&a, "oa", &f, OPEN4_SHARE_ACCESS_BOTH), rig.open(&b, "ob", &f, OPEN4_SHARE_ACCESS_BOTH));
    granted(do_lock(&rig, &mut a, &f, W, (0, 10), new_owner(oa, "la")));
    let lease = rig.program.with_state(|s| s.config().lease);
    let later = Instant::now() + lease + Duration::from_secs(5);
    let args = Lock4Args { locktype: W, reclaim: false, offset: 0, length: 10, locker: new_owner(ob, "lb") };
    let res = rig.call(&mut b, 1, later, Some(&f), |c| lock(c, args).into_res());
    let lb = granted(res);
    let args = Locku4Args { locktype: W, seqid: 0, lock_stateid: lb, offset: 0, length: TO_END };
    rig.call(&mut b, 1, later, Some(&f), |c| locku(c, args)).unwrap();
    let nlm = other_description(&rig, &f);
    assert_eq!(nlm.try_lock(LockKind::Exclusive, LockRange::new(0, 0)).unwrap(), None, "A's description was closed");
}

/// An NLM lock refused by a courtesy client's lock (the gate NLM asks,
/// `deleg.rs`) expires that client, whose description closes; not before
/// its lease expired, and not for a lock its ranges do not conflict with.
#[test]
fn an_nlm_lock_refused_by_a_courtesy_client_s_lock_expires_it() {
    let rig = Rig::new(false);
    let f = rig.file("f", b"");
    let mut a = rig.client("a");
    let oa = rig.open(&a, "oa", &f, OPEN4_SHARE_ACCESS_BOTH);
    granted(do_lock(&rig, &mut a, &f, W, (0, 10), new_owner(oa, "la")));
    let nlm = other_description(&rig, &f);
    let lease = rig.program.with_state(|s| s.config().lease);
    let later = Instant::now() + lease + Duration::from_secs(5);
    let expire = |exclusive, range, now| crate::deleg::expire_courtesy_lockers(&rig.program, &f, exclusive, range, now);
    assert!(!expire(true, LockRange::new(5, 1), Instant::now()), "its lease runs");
    assert!(!expire(true, LockRange::new(10, 0), later), "no conflict past its range");
    assert!(nlm.try_lock(LockKind::Exclusive, LockRange::new(5, 1)).unwrap().is_some(), "still held");
    assert!(expire(false, LockRange::new(5, 1), later), "a shared lock conflicts with its write lock");
    assert_eq!(nlm.try_lock(LockKind::Exclusive, LockRange::new(0, 0)).unwrap(), None, "its description closed");
    assert!(rig.program.clients().is_empty(), "the client is gone");
}

/// RFC 8881 sections 8.4.2 and 18.10.4: after a restart, while a client
/// of the earlier instance may still reclaim, its reclaims are granted and
/// new locks and LOCKT are NFS4ERR_GRACE, for it and for everyone else.
#[test]
fn in_the_grace_period_only_reclaims_are_granted() {
    use keel_nfs4_state::{ClientRecord, ClientRecords, MemoryRecords, OpenClaim, Principal, StateConfig};
    let mut records = MemoryRecords::new();
    let principal = Principal::Sys { uid: 0, machine: b"client".to_vec().into() };
    records.put(&ClientRecord { owner: b"a".to_vec().into(), principal, epoch: 1 }).unwrap();
    let rig = Rig::with(false, StateConfig::default(), records);
    let f = rig.file("f", b"");
    let (mut a, mut b) = (rig.client_reclaiming("a"), rig.client("b"));
    let oa = rig.open_by(&a, "oa", &f, OPEN4_SHARE_ACCESS_BOTH, OpenClaim::Previous).expect("an open reclaimed");
    let args = Lock4Args { locktype: W, reclaim: true, offset: 0, length: 10, locker: new_owner(oa, "la") };
    let la = granted(rig.call(&mut a, 1, Instant::now(), Some(&f), |c| lock(c, args).into_res()));
    assert_eq!(do_lock(&rig, &mut a, &f, W, (20, 1), existing(la)), Lock4Res::Fail(Nfsstat4::Grace), "a new lock");
    assert_eq!(do_lockt(&rig, &mut b, &f, W, (0, 1), "lb"), Lockt4Res::Fail(Nfsstat4::Grace));
    assert_eq!(rig.open_by(&b, "ob", &f, OPEN4_SHARE_ACCESS_BOTH, OpenClaim::Null), Err(Nfsstat4::Grace));
    let nlm = other_description(&rig, &f);
    assert!(nlm.try_lock(LockKind::Shared, LockRange::new(0, 1)).unwrap().is_some(), "the reclaimed lock is held");
}

/// RFC 8881 section 8.4.2: in a grace period REMOVE and RENAME are
/// NFS4ERR_GRACE (the file may be one a client is yet to reclaim an open
/// of); once every client on record completed its reclaim, they work.
#[test]
fn in_the_grace_period_remove_and_rename_wait_for_the_reclaims() {
    use crate::ops::dir::{remove, rename};
    use keel_nfs4_proto::{Remove4Args, Rename4Args};
    use keel_nfs4_state::{ClientRecord, ClientRecords, MemoryRecords, Principal, StateConfig};
    let mut records = MemoryRecords::new();
    let principal = Principal::Sys { uid: 0, machine: b"client".to_vec().into() };
    records.put(&ClientRecord { owner: b"a".to_vec().into(), principal, epoch: 1 }).unwrap();
    let rig = Rig::with(false, StateConfig::default(), records);
    let f = rig.file("f", b"kept");
    let root = keel_store::Object::handle(&rig.store.lookup_path(1, b"").unwrap()).clone();
    let (mut a, mut b) = (rig.client_reclaiming("a"), rig.client("b"));
    let component = |n: &str| keel_nfs4_proto::Component4(Bytes::copy_from_slice(n.as_bytes()));
    let gone = |c: &mut crate::compound::Compound<'_, keel_store::sim::SimStore>| {
        remove(c, Remove4Args { target: component("f") }).map(|_| ())
    };
    let moved = |c: &mut crate::compound::Compound<'_, keel_store::sim::SimStore>| {
        c.saved = c.current.clone();
        rename(c, Rename4Args { oldname: component("f"), newname: component("g") }).map(|_| ())
    };
    assert_eq!(rig.call(&mut b, 1, Instant::now(), Some(&root), gone), Err(Nfsstat4::Grace));
    assert_eq!(rig.call(&mut b, 1, Instant::now(), Some(&root), moved), Err(Nfsstat4::Grace));
    assert_eq!(rig.data(&f), b"kept");
    let done = rig.call(&mut a, 1, Instant::now(), None, |c| {
        crate::ops::session::reclaim_complete(c, keel_nfs4_proto::ReclaimComplete4Args { rca_one_fs: false })
    });
    assert_eq!(done, Ok(()));
    assert_eq!(rig.call(&mut b, 1, Instant::now(), Some(&root), moved), Ok(()), "the grace period is over");
}

/// Past the state's bound on a client's lock ranges, LOCK is
/// NFS4ERR_RESOURCE, and nothing was taken; LOCKU still works.
#[test]
fn past_the_bound_on_lock_ranges_lock_is_resource() {
    use keel_nfs4_state::{Bound, MemoryRecords, StateConfig};
    let mut config = StateConfig::default();
    config.limits.lock_ranges = Bound { total: 100, per_address: 2 };
    let rig = Rig::with(false, config, MemoryRecords::new());
    let f = rig.file("f", b"");
    let mut a = rig.client("a");
    let oa = rig.open(&a, "oa", &f, OPEN4_SHARE_ACCESS_BOTH);
    let la = granted(do_lock(&rig, &mut a, &f, W, (0, 1), new_owner(oa, "la")));
    let la = granted(do_lock(&rig, &mut a, &f, W, (10, 1), existing(la)));
    assert_eq!(do_lock(&rig, &mut a, &f, W, (20, 1), existing(la)), Lock4Res::Fail(Nfsstat4::Resource));
    let nlm = other_description(&rig, &f);
    assert_eq!(nlm.try_lock(LockKind::Exclusive, LockRange::new(20, 1)).unwrap(), None, "nothing taken");
    nlm.unlock(LockRange::new(20, 1)).unwrap();
    let la = granted(do_lock(&rig, &mut a, &f, W, (1, 9), existing(la)));
    assert!(do_locku(&rig, &mut a, &f, la, (3, 2)).is_ok(), "an unlock that splits a range is never refused");
}

/// A reclaim outside a grace period is NFS4ERR_NO_GRACE.
#[test]
fn a_reclaim_with_no_grace_period_is_refused() {
    let rig = Rig::new(false);
    let f = rig.file("f", b"");
    let mut a = rig.client("a");
    let oa = rig.open(&a, "oa", &f, OPEN4_SHARE_ACCESS_BOTH);
    let args = Lock4Args { locktype: W, reclaim: true, offset: 0, length: 1, locker: new_owner(oa, "la") };
    let res = rig.call(&mut a, 1, Instant::now(), Some(&f), |c| lock(c, args).into_res());
    assert_eq!(res, Lock4Res::Fail(Nfsstat4::NoGrace));
}

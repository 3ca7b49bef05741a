//! LOCK, LOCKT, LOCKU: lock owners, lock stateids and the ranges they
//! hold.

use super::*;
use keel_nfs4_proto::{OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ};

fn existing(file: &u32, lock_stateid: Stateid4, kind: LockKind, range: ByteRange) -> LockRequest<'_, u32> {
    LockRequest { file, kind, range, reclaim: false, locker: Locker::Existing { lock_stateid } }
}

/// RFC 8881 sections 18.10.3 and 18.10.4: the first lock of a lock owner
/// on a file makes a lock stateid (seqid 1) from the open stateid, with a
/// new description; later locks (by `exist_lock_owner4`, or again by
/// `open_to_lock_owner4`) go through the same description and move the
/// seqid on, as does LOCKU.
#[test]
fn lock_stateids_come_from_opens_and_move_on_with_each_lock() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let o = open(&mut st, a, "x", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    let l1 = lock_new(&mut st, a, (10, o), "lo", range(0, 10), 7, t0).unwrap();
    assert_eq!(l1.seqid, 1);
    assert_ne!(l1.other, o.other);
    let LockPlan::Held(plan) = st
        .lock(
            a,
            LockRequest {
                file: &10,
                kind: LockKind::Read,
                range: range(20, 5),
                reclaim: false,
                locker: Locker::NewOwner { open_stateid: o, owner: b"lo" },
            },
            t0,
        )
        .unwrap()
    else {
        panic!("the owner already has a description for the file")
    };
    assert_eq!(*plan.holder(), 7);
    let l2 = plan.granted();
    assert_eq!((l2.other, l2.seqid), (l1.other, 2));
    let LockPlan::Held(plan) = st.lock(a, existing(&10, l2, LockKind::Write, range(100, u64::MAX)), t0).unwrap() else {
        panic!()
    };
    assert_eq!((plan.range().start_len(), plan.kind()), ((100, 0), LockKind::Write));
    let l3 = plan.granted();
    assert_eq!(l3.seqid, 3);
    assert_eq!(st.clients(t0)[0].lock_ranges, 3);
    assert!(matches!(st.lock(a, existing(&10, l1, LockKind::Write, range(0, 1)), t0), Err(Nfsstat4::OldStateid)));
    let unlock = st.locku(a, &l3, &10, range(0, 200)).unwrap();
    assert_eq!(*unlock.holder(), 7);
    let l4 = unlock.done();
    assert_eq!(l4.seqid, 4);
    assert_eq!(st.clients(t0)[0].lock_ranges, 1, "[200, end) remains");
    // Another lock owner gets a description of its own.
    assert!(matches!(
        st.lock(
            a,
            LockRequest {
                file: &10,
                kind: LockKind::Read,
                range: range(0, 1),
                reclaim: false,
                locker: Locker::NewOwner { open_stateid: o, owner: b"other" }
            },
            t0
        ),
        Ok(LockPlan::New(_))
    ));
}

/// A lock the handler could not take (denied by a conflict, or failed)
/// leaves no trace: no lock stateid, owner, claim or seqid change.
#[test]
fn a_denied_lock_changes_nothing() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let o = open(&mut st, a, "x", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    let req = LockRequest {
        file: &10,
        kind: LockKind::Write,
        range: range(0, 1),
        reclaim: false,
        locker: Locker::NewOwner { open_stateid: o, owner: b"lo" },
    };
    drop(st.lock(a, req, t0).unwrap());
    let info = &st.clients(t0)[0];
    assert_eq!((info.lock_owners, info.lock_states, info.lock_ranges), (0, 0, 0));
    assert_eq!(st.held(Resource::LockStates, ip(1)), (0, 0));
    let l = lock_new(&mut st, a, (10, o), "lo", range(0, 1), 1, t0).unwrap();
    drop(st.lock(a, existing(&10, l, LockKind::Write, range(5, 1)), t0).unwrap());
    assert_eq!(st.test_stateids(a, &[l]), vec![Nfsstat4::Ok], "still at seqid 1");
    assert_eq!(st.clients(t0)[0].lock_ranges, 1);
}

/// RFC 8881 section 18.10.4 (and knfsd): a write lock needs an open with
/// write access, a read lock one with read access (NFS4ERR_OPENMODE); a
/// lock stateid of another file is NFS4ERR_BAD_STATEID.
#[test]
fn a_lock_needs_the_opens_mode_and_file() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let o = open(&mut st, a, "x", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    assert_eq!(lock_new(&mut st, a, (10, o), "lo", range(0, 1), 1, t0), Err(Nfsstat4::Openmode));
    assert_eq!(lock_new(&mut st, a, (11, o), "lo", range(0, 1), 1, t0), Err(Nfsstat4::BadStateid));
    let req = LockRequest {
        file: &10,
        kind: LockKind::Read,
        range: range(0, 1),
        reclaim: false,
        locker: Locker::NewOwner { open_stateid: o, owner: b"lo" },
    };
    let LockPlan::New(plan) = st.lock(a, req, t0).unwrap() else { panic!() };
    let l = plan.granted(1);
    assert_eq!(st.locku(a, &l, &11, range(0, 1)).err(), Some(Nfsstat4::BadStateid));
    assert_eq!(
        st.locku(a, &o, &10, range(0, 1)).err(),
        Some(Nfsstat4::BadStateid),
        "an open stateid is no lock stateid"
    );
}

/// RFC 8881 section 18.11: LOCKT tests through the owner's own
/// description when it has one on the file (its own locks never conflict).
#[test]
fn lockt_names_the_owners_description() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let o = open(&mut st, a, "x", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    lock_new(&mut st, a, (10, o), "lo", range(0, 1), 9, t0).unwrap();
    assert_eq!(st.lockt(a, b"lo", &10, t0), Ok(Some(&9)));
    assert_eq!(st.lockt(a, b"lo", &11, t0), Ok(None));
    assert_eq!(st.lockt(a, b"nobody", &10, t0), Ok(None));
}

/// Every range a lock state holds is a lock in the kernel too: ranges are
/// bounded per address (NFS4ERR_RESOURCE past it, before the handler
/// takes anything), while an unlock that splits a range always succeeds.
#[test]
fn ranges_are_bounded_per_address_but_unlocks_always_succeed() {
    let t0 = Instant::now();
    let mut config = StateConfig::default();
    config.limits.lock_ranges = Bound { total: 1000, per_address: 3 };
    let mut st = state_with(config, &MemoryRecords::new(), t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let o = open(&mut st, a, "x", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    let mut l = lock_new(&mut st, a, (10, o), "lo", range(0, 10), 1, t0).unwrap();
    for start in [20, 40] {
        let LockPlan::Held(plan) = st.lock(a, existing(&10, l, LockKind::Write, range(start, 10)), t0).unwrap() else {
            panic!()
        };
        l = plan.granted();
    }
    assert!(matches!(st.lock(a, existing(&10, l, LockKind::Write, range(60, 10)), t0), Err(Nfsstat4::Resource)));
    let LockPlan::Held(plan) = st.lock(a, existing(&10, l, LockKind::Write, range(10, 10)), t0).unwrap() else {
        panic!("merging [0,10) [10,20) [20,30) needs no more")
    };
    l = plan.granted();
    assert_eq!(st.clients(t0)[0].lock_ranges, 2);
    l = st.locku(a, &l, &10, range(5, 10)).unwrap().done();
    l = st.locku(a, &l, &10, range(42, 2)).unwrap().done();
    assert_eq!(st.clients(t0)[0].lock_ranges, 4, "splits past the bound");
    assert_eq!(st.held(Resource::LockRanges, ip(1)).0, 4);
    st.locku(a, &l, &10, range(0, u64::MAX)).unwrap().done();
    assert_eq!(st.held(Resource::LockRanges, ip(1)).0, 0);
}

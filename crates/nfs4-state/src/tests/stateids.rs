//! Stateids: seqids, forgeries, earlier instances, TEST_STATEID,
//! FREE_STATEID, and the stateids of I/O.

use super::*;
use keel_nfs4_proto::{
    OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_READ,
    OPEN4_SHARE_DENY_WRITE,
};

/// RFC 8881 sections 8.2.2 and 8.2.4, 18.48: seqid 0 is the current one,
/// an older seqid is NFS4ERR_OLD_STATEID, one not issued yet
/// NFS4ERR_BAD_STATEID; an `other` the server did not issue is
/// BAD_STATEID, one of an earlier instance STALE_STATEID; special
/// stateids are not state.
#[test]
fn forged_old_and_stale_stateids_are_told_apart() {
    let t0 = Instant::now();
    let records = MemoryRecords::new();
    let mut st = state_with(StateConfig::default(), &records, t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let s1 = open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    let s2 = open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_WRITE, 0, t0).unwrap();
    assert_eq!((s1.seqid, s2.seqid, s1.other), (1, 2, s2.other), "an upgrade moves the seqid on");
    let zero = Stateid4 { seqid: 0, ..s1 };
    let ahead = Stateid4 { seqid: 3, ..s1 };
    let mut forged = s2;
    forged.other[11] ^= 0x40;
    let mut later = s2;
    later.other[..4].copy_from_slice(&8u32.to_be_bytes());
    let mut earlier = s2;
    earlier.other[..4].copy_from_slice(&6u32.to_be_bytes());
    let got =
        st.test_stateids(a, &[s2, s1, zero, ahead, forged, later, earlier, Stateid4::ANONYMOUS, Stateid4::READ_BYPASS]);
    use Nfsstat4::*;
    assert_eq!(got, vec![Ok, OldStateid, Ok, BadStateid, BadStateid, BadStateid, StaleStateid, BadStateid, BadStateid]);
    assert_eq!(st.close(a, &s1, &10), Err(OldStateid));
    assert_eq!(st.close(a, &s2, &11), Err(BadStateid), "a stateid of another file");

    // The next instance sees this one's stateids as stale.
    let next: St =
        NfsState::new(StateConfig::default(), BootEpoch::new(8).unwrap(), [1; 16], Box::new(records), t0).unwrap();
    assert_eq!(next.test_stateids(a, &[s2]), vec![StaleStateid]);
}

/// RFC 8881 section 18.38: FREE_STATEID frees a lock stateid holding no
/// lock; an open stateid or a lock stateid holding locks is
/// NFS4ERR_LOCKS_HELD; a freed stateid is gone.
#[test]
fn free_stateid_frees_only_what_holds_nothing() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let o = open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    let l = lock_new(&mut st, a, (10, o), "lo", range(0, 10), 5, t0).unwrap();
    assert_eq!(st.free_stateid(a, &o), Err(Nfsstat4::LocksHeld));
    assert_eq!(st.free_stateid(a, &l), Err(Nfsstat4::LocksHeld));
    let l2 = st.locku(a, &l, &10, range(0, 10)).unwrap().done();
    assert_eq!(l2.seqid, 2);
    st.take_released();
    st.free_stateid(a, &Stateid4 { seqid: 1, ..l2 }).unwrap();
    assert_eq!(released_holders(&mut st), vec![5]);
    assert_eq!(st.test_stateids(a, &[l2, o]), vec![Nfsstat4::BadStateid, Nfsstat4::Ok]);
    assert_eq!(st.free_stateid(a, &l2), Err(Nfsstat4::BadStateid));
    assert_eq!(st.free_stateid(a, &Stateid4::ANONYMOUS), Err(Nfsstat4::BadStateid));
    let info = &st.clients(t0)[0];
    assert_eq!((info.lock_owners, info.lock_states, info.lock_ranges), (0, 0, 0));
}

/// RFC 8881 sections 8.2.3 and 9.1.3: I/O with the anonymous stateid is
/// subject to every open's deny bits (NFS4ERR_LOCKED, knfsd's answer);
/// the all-ones stateid bypasses them for READ only; I/O with a stateid
/// needs the open's mode (a READ through a write-only open is allowed, as
/// knfsd); a lock stateid carries its open's mode.
#[test]
fn io_stateids_follow_share_reservations_and_open_modes() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let (b, _) = connect(&mut st, ip(2), "b", t0);
    let ro = open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_WRITE, t0).unwrap();
    assert_eq!(st.check_io(b, &Stateid4::ANONYMOUS, &10, IoAccess::Read, t0), Ok(IoAuth::Anonymous));
    assert_eq!(st.check_io(b, &Stateid4::ANONYMOUS, &10, IoAccess::Write, t0), Err(Nfsstat4::Locked));
    assert_eq!(st.check_io(b, &Stateid4::READ_BYPASS, &10, IoAccess::Write, t0), Err(Nfsstat4::Locked));
    let wo = open(&mut st, b, "o", 11, OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_READ, t0).unwrap();
    assert_eq!(st.check_io(a, &Stateid4::ANONYMOUS, &11, IoAccess::Read, t0), Err(Nfsstat4::Locked));
    assert_eq!(st.check_io(a, &Stateid4::READ_BYPASS, &11, IoAccess::Read, t0), Ok(IoAuth::ReadBypass));
    assert_eq!(st.check_io(a, &Stateid4::CURRENT, &11, IoAccess::Read, t0), Err(Nfsstat4::BadStateid));
    assert_eq!(st.check_io(a, &ro, &10, IoAccess::Write, t0), Err(Nfsstat4::Openmode));
    assert_eq!(st.check_io(a, &ro, &10, IoAccess::Read, t0), Ok(IoAuth::State(StateType::Open)));
    assert_eq!(st.check_io(b, &wo, &11, IoAccess::Read, t0), Ok(IoAuth::State(StateType::Open)));
    assert_eq!(st.check_io(b, &wo, &10, IoAccess::Read, t0), Err(Nfsstat4::BadStateid), "another file");
    let rw = open(&mut st, b, "o2", 12, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    let l = lock_new(&mut st, b, (12, rw), "l", range(0, 1), 1, t0).unwrap();
    assert_eq!(st.check_io(b, &l, &12, IoAccess::Write, t0), Ok(IoAuth::State(StateType::Lock)));
}

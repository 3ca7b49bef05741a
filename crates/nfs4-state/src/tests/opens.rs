//! OPEN, CLOSE, OPEN_DOWNGRADE and share reservations.

use super::*;
use keel_nfs4_proto::{
    OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_BOTH,
    OPEN4_SHARE_DENY_NONE, OPEN4_SHARE_DENY_READ, OPEN4_SHARE_DENY_WRITE,
};

/// RFC 8881 section 9.7: share reservations conflict between different
/// open owners (of one client too), never within one.
#[test]
fn share_reservations_conflict_between_open_owners_not_within_one() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    open(&mut st, a, "x", 10, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_WRITE, t0).unwrap();
    assert_eq!(open(&mut st, a, "y", 10, OPEN4_SHARE_ACCESS_WRITE, 0, t0), Err(Nfsstat4::ShareDenied));
    assert_eq!(
        open(&mut st, a, "y", 10, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_READ, t0),
        Err(Nfsstat4::ShareDenied)
    );
    open(&mut st, a, "y", 10, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_NONE, t0).unwrap();
    open(&mut st, a, "x", 10, OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_WRITE, t0).unwrap();
    assert_eq!(
        open(&mut st, a, "x", 10, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_READ, t0),
        Err(Nfsstat4::ShareDenied),
        "y reads"
    );
    open(&mut st, a, "y", 11, OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_READ, t0).unwrap();
    let stats = st.stats(t0);
    assert_eq!((stats.opens, stats.files, stats.share_denied), (3, 2, 3));
    let info = &st.clients(t0)[0];
    assert_eq!((info.open_owners, info.opens), (2, 3));
}

/// RFC 8881 sections 18.16.4 and 18.18.3: a second OPEN by the same
/// owner adds its bits to the open state (the seqid moves on); a
/// downgrade goes back to the union of some of those OPENs and nothing
/// else (NFS4ERR_INVAL), freeing what it drops for others.
#[test]
fn an_upgrade_adds_bits_and_a_downgrade_goes_back_to_some_of_them() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let (b, _) = connect(&mut st, ip(2), "b", t0);
    let s1 = open(&mut st, a, "x", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    let s2 = open(&mut st, a, "x", 10, OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_WRITE, t0).unwrap();
    assert_eq!((s1.other, s2.seqid), (s2.other, 2));
    assert_eq!(open(&mut st, b, "y", 10, OPEN4_SHARE_ACCESS_WRITE, 0, t0), Err(Nfsstat4::ShareDenied));
    assert_eq!(st.open_downgrade(a, &s2, &10, OPEN4_SHARE_ACCESS_WRITE, 0), Err(Nfsstat4::Inval));
    assert_eq!(st.open_downgrade(a, &s2, &10, OPEN4_SHARE_ACCESS_BOTH, 0), Err(Nfsstat4::Inval));
    assert_eq!(st.open_downgrade(a, &s2, &10, 0, 0), Err(Nfsstat4::Inval));
    let s3 = st.open_downgrade(a, &s2, &10, OPEN4_SHARE_ACCESS_READ, 0).unwrap();
    assert_eq!(s3.seqid, 3);
    open(&mut st, b, "y", 10, OPEN4_SHARE_ACCESS_WRITE, 0, t0).unwrap();
    assert_eq!(
        st.open_downgrade(a, &s3, &10, OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_WRITE),
        Err(Nfsstat4::Inval),
        "a downgrade never adds"
    );
    assert_eq!(st.open_downgrade(a, &s2, &10, OPEN4_SHARE_ACCESS_READ, 0), Err(Nfsstat4::OldStateid));
}

/// RFC 8881 section 18.2.3: CLOSE with locks held is NFS4ERR_LOCKS_HELD;
/// without, the open state ends with its lock states (their descriptions
/// released), its owner if it has no other open, and its claims; the
/// reply's stateid is the invalid one.
#[test]
fn close_ends_the_open_unless_locks_are_held() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let o = open(&mut st, a, "x", 10, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_BOTH, t0).unwrap();
    let l = lock_new(&mut st, a, (10, o), "lo", range(0, 10), 3, t0).unwrap();
    assert_eq!(st.close(a, &o, &10), Err(Nfsstat4::LocksHeld));
    let l = st.locku(a, &l, &10, range(0, 10)).unwrap().done();
    st.take_released();
    assert_eq!(st.close(a, &o, &10), Ok(Stateid4::INVALID));
    assert_eq!(released_holders(&mut st), vec![3]);
    assert_eq!(st.test_stateids(a, &[o, l]), vec![Nfsstat4::BadStateid, Nfsstat4::BadStateid]);
    let info = &st.clients(t0)[0];
    assert_eq!((info.open_owners, info.opens, info.lock_owners, info.lock_states), (0, 0, 0, 0));
    assert_eq!(st.stats(t0).files, 0);
    for r in [Resource::OpenOwners, Resource::Opens, Resource::LockOwners, Resource::LockStates, Resource::LockRanges] {
        assert_eq!(st.held(r, ip(1)), (0, 0), "{r:?}");
    }
    let (b, _) = connect(&mut st, ip(2), "b", t0);
    open(&mut st, b, "y", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
}

/// RFC 8881 section 18.16.3: CLAIM_DELEGATE_PREV is not supported
/// (NFS4ERR_NOTSUPP, as knfsd); CLAIM_DELEGATE_CUR needs a delegation of
/// the client on the file.
#[test]
fn open_claims_other_than_null_and_previous() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let s = share(OPEN4_SHARE_ACCESS_READ, 0);
    assert_eq!(st.open(a, b"x", &10, s, OpenClaim::DelegatePrev, t0), Err(Nfsstat4::Notsupp));
    let o = open(&mut st, a, "x", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    assert_eq!(
        st.open(a, b"x", &10, s, OpenClaim::DelegateCur(o), t0),
        Err(Nfsstat4::BadStateid),
        "an open stateid is no delegation"
    );
}

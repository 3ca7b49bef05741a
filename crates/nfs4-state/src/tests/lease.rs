//! Leases (RFC 8881 section 8.3) and courtesy clients.

use super::*;
use keel_nfs4_proto::{
    OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_WRITE,
};

fn why_ended(released: &[Released<u32, u32>]) -> Vec<(ClientId, ExpiryReason)> {
    released
        .iter()
        .filter_map(|r| match r {
            Released::Client { clientid, why, .. } => Some((*clientid, *why)),
            _ => None,
        })
        .collect()
}

/// RFC 8881 section 8.3 and knfsd's courteous server: a client whose
/// lease expired keeps its state until another client's request conflicts
/// with it; then it is expired and its state released.
#[test]
fn a_courtesy_client_keeps_its_state_until_a_share_conflict() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let (b, bs) = connect(&mut st, ip(2), "b", t0);
    let sa = open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_WRITE, t0).unwrap();
    let late = t0 + LEASE + Duration::from_secs(5);
    renew(&mut st, ip(2), &sys(0, "b"), bs, 1, late);
    assert_eq!(st.reap(late), 0, "a courtesy client is kept");
    let info = st.clients(late);
    assert!(matches!(info[0].lease, LeaseState::Courtesy { .. }));
    assert_eq!(st.stats(late).courtesy_clients, 1);
    assert_eq!(st.test_stateids(a, &[sa]), vec![Nfsstat4::Ok]);
    st.take_released();

    open(&mut st, b, "o", 10, OPEN4_SHARE_ACCESS_WRITE, 0, late).unwrap();
    let released = st.take_released();
    assert_eq!(why_ended(&released), vec![(a, ExpiryReason::Conflict)]);
    assert!(released.iter().any(|r| matches!(r, Released::Open { clientid, file: 10, .. } if *clientid == a)));
    assert_eq!(st.stats(late).courtesy_expired, 1);
}

/// The same conflict with an active client is NFS4ERR_SHARE_DENIED, and
/// a courtesy client that comes back (SEQUENCE) is active again with all
/// its state.
#[test]
fn a_courtesy_client_that_comes_back_keeps_everything() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let pa = sys(0, "a");
    let (a, sa_) = connect_as(&mut st, ip(1), &pa, "a", 1, t0);
    let (b, _) = connect(&mut st, ip(2), "b", t0);
    let sid = open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_WRITE, t0).unwrap();
    assert_eq!(open(&mut st, b, "o", 10, OPEN4_SHARE_ACCESS_WRITE, 0, t0), Err(Nfsstat4::ShareDenied));
    let late = t0 + LEASE * 3;
    assert_eq!(st.reap(late), 1, "b held nothing");
    renew(&mut st, ip(1), &pa, sa_, 1, late);
    assert!(matches!(st.clients(late)[0].lease, LeaseState::Active { .. }));
    let (c, _) = connect(&mut st, ip(3), "c", late);
    assert_eq!(open(&mut st, c, "o", 10, OPEN4_SHARE_ACCESS_WRITE, 0, late), Err(Nfsstat4::ShareDenied));
    assert_eq!(st.test_stateids(a, &[sid]), vec![Nfsstat4::Ok]);
}

/// knfsd's `lm_lock_expirable`: when a lock is refused by a conflict, the
/// courtesy clients holding a conflicting range are expired (their
/// descriptions released, which drops their OFD locks) so the lock can be
/// tried again; an active client's lock is left alone.
#[test]
fn a_courtesy_clients_conflicting_lock_is_released() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let oa = open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    lock_new(&mut st, a, (10, oa), "la", range(0, 100), 41, t0).unwrap();
    let late = t0 + LEASE + Duration::from_secs(1);
    let (b, _) = connect(&mut st, ip(2), "b", late);
    let ob = open(&mut st, b, "o", 10, OPEN4_SHARE_ACCESS_BOTH, 0, late).unwrap();
    lock_new(&mut st, b, (10, ob), "lb", range(500, 10), 42, late).unwrap();
    st.take_released();
    assert_eq!(st.expire_courtesy_lock_conflicts(&10, LockKind::Read, range(200, 10), late), 0, "no overlap");
    assert_eq!(st.expire_courtesy_lock_conflicts(&10, LockKind::Write, range(500, 1), late), 0, "b is active");
    assert_eq!(st.expire_courtesy_lock_conflicts(&10, LockKind::Read, range(50, 10), late), 1);
    assert_eq!(released_holders(&mut st), vec![41]);
    assert_eq!(st.clients(late).len(), 1);
}

/// A courtesy client holding byte-range locks is let go of sooner
/// ([`COURTESY_LOCKS_MAX_DEFAULT`]): a local process may wait for them,
/// unseen. One holding only opens keeps knfsd's 24 hours; `keel clients`
/// says when each goes.
#[test]
fn a_courtesy_client_holding_locks_is_let_go_of_sooner() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let (b, _) = connect(&mut st, ip(2), "b", t0);
    let oa = open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    open(&mut st, b, "o", 11, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    lock_new(&mut st, a, (10, oa), "la", range(0, 100), 41, t0).unwrap();
    let locks_end = t0 + LEASE + COURTESY_LOCKS_MAX_DEFAULT;
    assert_eq!(st.next_due(), Some(locks_end));
    let before = locks_end - Duration::from_secs(1);
    let ends_in: Vec<_> = st
        .clients(before)
        .iter()
        .map(|c| match c.lease {
            LeaseState::Courtesy { ends_in, .. } => ends_in,
            other => panic!("not a courtesy client: {other:?}"),
        })
        .collect();
    assert_eq!(
        ends_in,
        vec![Duration::from_secs(1), COURTESY_MAX_DEFAULT - COURTESY_LOCKS_MAX_DEFAULT + Duration::from_secs(1)]
    );
    assert_eq!(st.reap(before), 0);
    st.take_released();
    assert_eq!(st.reap(locks_end), 1);
    let released = st.take_released();
    assert_eq!(why_ended(&released), vec![(a, ExpiryReason::CourtesyOver)]);
    assert!(released.iter().any(|r| matches!(r, Released::LockHolder { holder: 41, .. })));
    assert_eq!(st.next_due(), Some(t0 + LEASE + COURTESY_MAX_DEFAULT), "the other keeps knfsd's 24 hours");
}

/// Courtesy has an end ([`StateConfig::courtesy_max`], knfsd's 24 hours);
/// an unconfirmed record ends after a lease; a client without state ends
/// with its lease.
#[test]
fn expiry_without_a_conflict() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    connect(&mut st, ip(2), "b", t0);
    let p = sys(0, "u");
    st.exchange_id(&caller(ip(3), &p, 3), &exid_args("u", 1), t0).unwrap();
    assert!(st.next_due().is_some_and(|at| at <= t0 + LEASE));
    st.take_released();
    let after_lease = t0 + LEASE;
    assert_eq!(st.reap(after_lease), 2);
    let ended = why_ended(&st.take_released());
    assert!(ended.iter().any(|(_, why)| *why == ExpiryReason::Unconfirmed));
    assert!(ended.iter().any(|(_, why)| *why == ExpiryReason::LeaseExpired));
    assert_eq!(st.next_due(), Some(t0 + LEASE + COURTESY_MAX_DEFAULT));
    assert_eq!(st.reap(t0 + LEASE + COURTESY_MAX_DEFAULT), 1);
    assert_eq!(why_ended(&st.take_released()), vec![(a, ExpiryReason::CourtesyOver)]);
    assert!(st.clients(t0).is_empty());
    for r in Resource::ALL {
        assert_eq!(st.held(r, ip(1)), (0, 0), "{r:?}");
    }
}

/// "Until the server needs the resources": a courtesy client holding what
/// another client needs is expired to make room for it.
#[test]
fn a_courtesy_client_makes_room() {
    let t0 = Instant::now();
    let mut config = StateConfig::default();
    config.limits.opens = Bound { total: 4, per_address: 4 };
    let mut st = state_with(config, &MemoryRecords::new(), t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    open(&mut st, a, "o", 1, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    let late = t0 + LEASE;
    let (b, _) = connect(&mut st, ip(2), "b", late);
    let (c, _) = connect(&mut st, ip(3), "c", late);
    let (d, _) = connect(&mut st, ip(4), "d", late);
    for (i, x) in [b, c, d].into_iter().enumerate() {
        open(&mut st, x, "o", 10 + i as u32, OPEN4_SHARE_ACCESS_READ, 0, late).unwrap();
    }
    st.take_released();
    let (e, _) = connect(&mut st, ip(5), "e", late);
    open(&mut st, e, "o", 20, OPEN4_SHARE_ACCESS_READ, 0, late).unwrap();
    assert_eq!(why_ended(&st.take_released()), vec![(a, ExpiryReason::Room)]);
    let (f, _) = connect(&mut st, ip(6), "f", late);
    assert_eq!(
        open(&mut st, f, "o", 21, OPEN4_SHARE_ACCESS_READ, 0, late),
        Err(Nfsstat4::Resource),
        "nobody left to expire"
    );
}

/// RFC 8881 section 9.1.3: a courtesy client's deny reservation does not
/// stop anonymous I/O of a live client: the courtesy client is expired.
#[test]
fn a_courtesy_clients_deny_does_not_stop_anonymous_io() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_WRITE, t0).unwrap();
    let (b, _) = connect(&mut st, ip(2), "b", t0);
    assert_eq!(st.check_io(b, &Stateid4::ANONYMOUS, &10, IoAccess::Write, t0), Err(Nfsstat4::Locked));
    let late = t0 + LEASE;
    let (c, _) = connect(&mut st, ip(3), "c", late);
    st.take_released();
    assert_eq!(st.check_io(c, &Stateid4::ANONYMOUS, &10, IoAccess::Write, late), Ok(IoAuth::Anonymous));
    assert_eq!(why_ended(&st.take_released()), vec![(a, ExpiryReason::Conflict)]);
}

//! Delegations: offers, recalls, deadlines, revocation, DELEGRETURN.

use super::*;
use keel_nfs4_proto::{
    OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WANT_ANY_DELEG,
    OPEN4_SHARE_ACCESS_WANT_NO_DELEG, OPEN4_SHARE_ACCESS_WANT_READ_DELEG, OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG,
    OPEN4_SHARE_ACCESS_WRITE, OpenNoneDelegation4, SEQ4_STATUS_RECALLABLE_STATE_REVOKED,
};

fn read_delegation(st: &mut St, client: ClientId, file: u32, now: Instant) -> Stateid4 {
    open(st, client, "o", file, OPEN4_SHARE_ACCESS_READ, 0, now).unwrap();
    match st.offer_delegation(client, &file, &share(OPEN4_SHARE_ACCESS_READ, 0), now) {
        DelegationOffer::Granted { stateid, kind: DelegationKind::Read } => stateid,
        other => panic!("a read delegation, not {other:?}"),
    }
}

/// RFC 8881 sections 10.2 and 10.4.4: a read delegation is offered to a
/// client with a backchannel; another client opening for write gets
/// NFS4ERR_DELAY while it is recalled (once); after DELEGRETURN the open
/// goes through.
#[test]
fn a_writer_recalls_a_read_delegation_and_waits_for_its_return() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let (b, _) = connect(&mut st, ip(2), "b", t0);
    let d = read_delegation(&mut st, a, 10, t0);
    assert_eq!(st.delegation_held(b, &10), None, "another client's");
    assert_eq!(st.check_io(a, &d, &10, IoAccess::Read, t0), Ok(IoAuth::State(StateType::Delegation)));
    assert_eq!(st.check_io(a, &d, &10, IoAccess::Write, t0), Err(Nfsstat4::Openmode));
    assert_eq!(open(&mut st, b, "o", 10, OPEN4_SHARE_ACCESS_WRITE, 0, t0), Err(Nfsstat4::Delay));
    let recalls = st.take_recalls();
    assert_eq!(recalls, vec![Recall { clientid: a, stateid: d, file: 10 }]);
    assert_eq!(open(&mut st, b, "o", 10, OPEN4_SHARE_ACCESS_WRITE, 0, t0), Err(Nfsstat4::Delay));
    assert!(st.take_recalls().is_empty(), "recalled once");
    st.delegreturn(a, &d, &10).unwrap();
    assert_eq!(st.delegation_held(a, &10), None, "returned");
    assert!(matches!(st.take_released().last(), Some(Released::Delegation { kind: DelegationKind::Read, .. })));
    open(&mut st, b, "o", 10, OPEN4_SHARE_ACCESS_WRITE, 0, t0).unwrap();
    assert_eq!(st.stats(t0).recalls, 1);
}

/// RFC 8881 section 10.4.4: reads by others (v4 opens for reading, v3
/// reads) do not conflict with a read delegation; a write by anyone else
/// (an NFSv3 client, NLM, a local process) does.
#[test]
fn reads_leave_read_delegations_alone_and_any_other_writer_recalls() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let (b, _) = connect(&mut st, ip(2), "b", t0);
    read_delegation(&mut st, a, 10, t0);
    open(&mut st, b, "o", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    assert_eq!(st.delegation_conflict(Accessor::Other, &10, ConflictAccess::Read, t0), Ok(()));
    assert_eq!(st.delegation_conflict(Accessor::Client(a), &10, ConflictAccess::Write, t0), Ok(()), "its own");
    assert_eq!(st.delegation_conflict(Accessor::Other, &10, ConflictAccess::Write, t0), Err(Nfsstat4::Delay));
    assert_eq!(st.take_recalls().len(), 1);
}

/// RFC 8881 section 10.4.6 (and 8.3): a delegation not returned within a
/// lease of its recall is revoked; its client sees
/// SEQ4_STATUS_RECALLABLE_STATE_REVOKED, its stateid answers
/// NFS4ERR_DELEG_REVOKED until FREE_STATEID, and the waiting access goes
/// on.
#[test]
fn a_delegation_not_returned_in_time_is_revoked() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let pa = sys(0, "a");
    let (a, sa) = connect_as(&mut st, ip(1), &pa, "a", 1, t0);
    let d = read_delegation(&mut st, a, 10, t0);
    assert_eq!(st.delegation_held(a, &10), Some(DelegationKind::Read));
    assert_eq!(st.delegation_held(a, &11), None);
    let t1 = t0 + Duration::from_secs(10);
    renew(&mut st, ip(1), &pa, sa, 1, t1);
    assert_eq!(st.delegation_conflict(Accessor::Other, &10, ConflictAccess::Write, t1), Err(Nfsstat4::Delay));
    let deadline = t1 + LEASE;
    assert_eq!(st.next_due(), Some(deadline));
    renew(&mut st, ip(1), &pa, sa, 2, deadline - Duration::from_secs(1));
    st.take_released();
    st.reap(deadline);
    assert!(matches!(st.take_released()[..], [Released::Delegation { file: 10, .. }]));
    assert_eq!(st.delegation_conflict(Accessor::Other, &10, ConflictAccess::Write, deadline), Ok(()));
    assert_eq!(st.delegation_held(a, &10), None, "revoked: no longer held");
    let c = caller(ip(1), &pa, 1);
    let SequenceStart::New(g) = st.sequence(&c, &seq_args(sa, 0, 3, false), shape(2), deadline).unwrap() else {
        panic!()
    };
    assert_ne!(g.resok.sr_status_flags & SEQ4_STATUS_RECALLABLE_STATE_REVOKED, 0);
    st.sequence_done(&g, SlotReply { status: Nfsstat4::Ok, ops: 2, reply: &[] }, deadline);
    assert_eq!(st.delegreturn(a, &d, &10), Err(Nfsstat4::DelegRevoked));
    assert_eq!(st.test_stateids(a, &[d]), vec![Nfsstat4::DelegRevoked]);
    assert_eq!(st.stats(deadline).revoked, 1);
    st.free_stateid(a, &d).unwrap();
    assert_eq!(st.clients(deadline)[0].revoked_delegations, 0);
    let SequenceStart::New(g) = st.sequence(&c, &seq_args(sa, 0, 4, false), shape(1), deadline).unwrap() else {
        panic!()
    };
    assert_eq!(g.resok.sr_status_flags & SEQ4_STATUS_RECALLABLE_STATE_REVOKED, 0);
}

/// A courtesy client's delegation is not waited for: its client is
/// expired and the access goes on at once.
#[test]
fn a_courtesy_clients_delegation_is_not_waited_for() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    read_delegation(&mut st, a, 10, t0);
    let late = t0 + LEASE;
    let (b, _) = connect(&mut st, ip(2), "b", late);
    open(&mut st, b, "o", 10, OPEN4_SHARE_ACCESS_WRITE, 0, late).unwrap();
    assert!(st.take_recalls().is_empty());
    assert!(
        st.take_released()
            .iter()
            .any(|r| matches!(r, Released::Client { clientid, why: ExpiryReason::Conflict, .. } if *clientid == a))
    );
}

/// RFC 8881 section 10.4: no delegation where it would conflict (another
/// client writes), without a backchannel the handler found working (as
/// knfsd: an unrecallable delegation would stall others for a lease), on
/// a file that just saw a
/// conflict, during the grace period, when not wanted, or (write
/// delegations being off) for a writer.
#[test]
fn delegations_are_declined_when_they_would_not_hold() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let (b, _) = connect(&mut st, ip(2), "b", t0);
    let read = share(OPEN4_SHARE_ACCESS_READ, 0);
    open(&mut st, b, "o", 10, OPEN4_SHARE_ACCESS_WRITE, 0, t0).unwrap();
    open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    assert_eq!(
        st.offer_delegation(a, &10, &read, t0),
        DelegationOffer::Declined(OpenNoneDelegation4::Wnd4Contention(false))
    );
    let no = share(OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_NO_DELEG, 0);
    assert_eq!(st.offer_delegation(a, &11, &no, t0), DelegationOffer::Declined(OpenNoneDelegation4::Wnd4NotWanted));
    let rw = share(OPEN4_SHARE_ACCESS_BOTH, 0);
    assert_eq!(
        st.offer_delegation(a, &11, &rw, t0),
        DelegationOffer::Declined(OpenNoneDelegation4::Wnd4WriteDelegNotSuppFtype)
    );
    read_delegation(&mut st, a, 12, t0);
    assert_eq!(
        st.offer_delegation(a, &12, &read, t0),
        DelegationOffer::Declined(OpenNoneDelegation4::Wnd4Contention(false)),
        "one per client and file"
    );
    assert_eq!(st.delegation_conflict(Accessor::Other, &13, ConflictAccess::Write, t0), Ok(()));
    for unusable in [CallbackState::Unknown, CallbackState::Down, CallbackState::Fault] {
        st.set_callback_state(a, unusable);
        let offer = st.offer_delegation(a, &14, &read, t0);
        assert_eq!(offer, DelegationOffer::Declined(OpenNoneDelegation4::Wnd4Resource(false)), "{unusable:?}");
    }
    st.set_callback_state(a, CallbackState::Up);
    // A recent conflict keeps delegations off the file for a lease.
    let (c, _) = connect(&mut st, ip(3), "c", t0);
    read_delegation(&mut st, c, 15, t0);
    assert_eq!(st.delegation_conflict(Accessor::Other, &15, ConflictAccess::Write, t0), Err(Nfsstat4::Delay));
    assert_eq!(
        st.offer_delegation(a, &15, &read, t0),
        DelegationOffer::Declined(OpenNoneDelegation4::Wnd4Contention(false))
    );
    st.reap(t0 + LEASE);
    assert!(st.recent_conflicts.is_empty());
}

/// Write delegations, when configured: granted to a writer alone on the
/// file, recalled by any access of another client, reads included.
#[test]
fn write_delegations_when_configured_are_recalled_by_any_access() {
    let t0 = Instant::now();
    let config = StateConfig { write_delegations: true, ..StateConfig::default() };
    let mut st = state_with(config, &MemoryRecords::new(), t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let (b, _) = connect(&mut st, ip(2), "b", t0);
    open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    let DelegationOffer::Granted { stateid, kind: DelegationKind::Write } =
        st.offer_delegation(a, &10, &share(OPEN4_SHARE_ACCESS_BOTH, 0), t0)
    else {
        panic!("a write delegation")
    };
    assert_eq!(st.check_io(a, &stateid, &10, IoAccess::Write, t0), Ok(IoAuth::State(StateType::Delegation)));
    assert_eq!(st.delegation_conflict(Accessor::Other, &10, ConflictAccess::Read, t0), Err(Nfsstat4::Delay));
    assert_eq!(open(&mut st, b, "o", 10, OPEN4_SHARE_ACCESS_READ, 0, t0), Err(Nfsstat4::Delay));
    assert_eq!(st.take_recalls().len(), 1);
}

/// A write delegation another client may ask about with CB_GETATTR
/// rather than recall: one of someone else, not recalled yet, whose
/// holder's callback path is up.
#[test]
fn a_write_delegation_is_asked_about_only_by_others_and_until_it_is_recalled() {
    let t0 = Instant::now();
    let config = StateConfig { write_delegations: true, ..StateConfig::default() };
    let mut st = state_with(config, &MemoryRecords::new(), t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let (b, _) = connect(&mut st, ip(2), "b", t0);
    open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    let DelegationOffer::Granted { stateid, .. } = st.offer_delegation(a, &10, &share(OPEN4_SHARE_ACCESS_BOTH, 0), t0)
    else {
        panic!("a write delegation")
    };
    assert_eq!(st.write_delegation_to_ask(Accessor::Client(b), &10, t0), Some((a, stateid)));
    assert_eq!(st.write_delegation_to_ask(Accessor::Other, &10, t0), Some((a, stateid)));
    assert_eq!(st.write_delegation_to_ask(Accessor::Client(a), &10, t0), None, "the holder's own");
    assert_eq!(st.write_delegation_to_ask(Accessor::Client(b), &11, t0), None, "no delegation");
    st.set_callback_state(a, CallbackState::Down);
    assert_eq!(st.write_delegation_to_ask(Accessor::Client(b), &10, t0), None, "the path is down");
    st.set_callback_state(a, CallbackState::Up);
    assert_eq!(st.delegation_conflict(Accessor::Client(b), &10, ConflictAccess::Read, t0), Err(Nfsstat4::Delay));
    assert_eq!(st.write_delegation_to_ask(Accessor::Client(b), &10, t0), None, "recalled");
}

/// With write delegations configured, which OPEN gets which (RFC 8881
/// section 18.16.3): a writer, WRITE alone too, a write delegation when
/// alone on the file; a writer that wants a read delegation none (its own
/// writes would change the file); a reader a read one, or none if it
/// wants a write one; a client holding one is neither upgraded nor
/// downgraded; another client's open stands in the way.
#[test]
fn write_delegation_offers_follow_the_open_s_access_and_wants() {
    use OpenNoneDelegation4 as Why;
    let t0 = Instant::now();
    let config = StateConfig { write_delegations: true, ..StateConfig::default() };
    let mut st = state_with(config, &MemoryRecords::new(), t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let (b, _) = connect(&mut st, ip(2), "b", t0);
    let offer = |st: &mut St, client, file: u32, access: u32| {
        let base = access & OPEN4_SHARE_ACCESS_BOTH;
        open(st, client, "o", file, base, 0, t0).unwrap();
        st.offer_delegation(client, &file, &share(access, 0), t0)
    };
    let granted = |o: &DelegationOffer| match o {
        DelegationOffer::Granted { kind, .. } => Some(*kind),
        DelegationOffer::Declined(_) => None,
    };
    assert_eq!(granted(&offer(&mut st, a, 10, OPEN4_SHARE_ACCESS_WRITE)), Some(DelegationKind::Write));
    let want_write = OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG;
    assert_eq!(granted(&offer(&mut st, a, 11, want_write)), Some(DelegationKind::Write));
    let want_any = OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_ANY_DELEG;
    assert_eq!(granted(&offer(&mut st, a, 12, want_any)), Some(DelegationKind::Read));

    let writer_wants_read = OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_READ_DELEG;
    assert_eq!(offer(&mut st, a, 13, writer_wants_read), DelegationOffer::Declined(Why::Wnd4Contention(false)));
    let reader_wants_write = OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG;
    assert_eq!(offer(&mut st, a, 14, reader_wants_write), DelegationOffer::Declined(Why::Wnd4WriteDelegNotSuppFtype));

    // a holds a write delegation on 10 and a read one on 12.
    assert_eq!(offer(&mut st, a, 10, OPEN4_SHARE_ACCESS_READ), DelegationOffer::Declined(Why::Wnd4NotSuppDowngrade));
    assert_eq!(offer(&mut st, a, 12, OPEN4_SHARE_ACCESS_BOTH), DelegationOffer::Declined(Why::Wnd4NotSuppUpgrade));
    assert_eq!(offer(&mut st, a, 11, OPEN4_SHARE_ACCESS_BOTH), DelegationOffer::Declined(Why::Wnd4Contention(false)));

    // b has 15 open for reading: no write delegation for a on it.
    let no_deleg = OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_NO_DELEG;
    assert_eq!(offer(&mut st, b, 15, no_deleg), DelegationOffer::Declined(Why::Wnd4NotWanted));
    assert_eq!(offer(&mut st, a, 15, OPEN4_SHARE_ACCESS_BOTH), DelegationOffer::Declined(Why::Wnd4Contention(false)));
}

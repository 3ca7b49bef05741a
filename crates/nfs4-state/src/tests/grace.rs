//! Grace and reclaim across restarts (RFC 8881 sections 8.4.2, 8.4.3,
//! 18.51), with the client records on "stable storage".

use super::*;
use keel_nfs4_proto::{OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ};

fn instance(epoch: u32, records: &MemoryRecords, config: StateConfig, now: Instant) -> St {
    NfsState::new(config, BootEpoch::new(epoch).unwrap(), [epoch as u8; 16], Box::new(records.clone()), now).unwrap()
}

fn reclaim_open(st: &mut St, client: ClientId, file: u32, now: Instant) -> Result<Stateid4, Nfsstat4> {
    st.open(client, b"o", &file, share(OPEN4_SHARE_ACCESS_BOTH, 0), OpenClaim::Previous, now).map(|ok| ok.stateid)
}

fn lock_req(file: &u32, open_stateid: Stateid4, reclaim: bool) -> LockRequest<'_, u32> {
    LockRequest {
        file,
        kind: LockKind::Write,
        range: range(0, 10),
        reclaim,
        locker: Locker::NewOwner { open_stateid, owner: b"lo" },
    }
}

fn owners(records: &MemoryRecords) -> Vec<(String, u32)> {
    records.snapshot().into_iter().map(|r| (String::from_utf8_lossy(&r.owner).into_owned(), r.epoch)).collect()
}

/// RFC 8881 sections 8.4.2.1 and 18.51: after a restart, clients of the
/// previous instance reclaim (CLAIM_PREVIOUS opens, LOCK with reclaim)
/// and nothing else is granted (NFS4ERR_GRACE, LOCKT included); a client
/// not in the records gets NFS4ERR_RECLAIM_BAD; the grace period ends as
/// soon as every previous client sent RECLAIM_COMPLETE, after which a
/// reclaim is NFS4ERR_NO_GRACE.
#[test]
fn after_a_restart_previous_clients_reclaim_and_grace_ends_when_all_completed() {
    let t0 = Instant::now();
    let records = MemoryRecords::new();
    let mut one = instance(1, &records, StateConfig::default(), t0);
    let (a, _) = connect(&mut one, ip(1), "a", t0);
    let (_b, _) = connect(&mut one, ip(2), "b", t0);
    assert!(owners(&records).is_empty(), "nobody has state yet");
    open(&mut one, a, "o", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    assert_eq!(owners(&records), vec![("a".into(), 1)], "recorded before its first state; b holds nothing");
    drop(one);

    let t1 = t0 + Duration::from_secs(5);
    let mut two = instance(2, &records, StateConfig::default(), t1);
    assert!(two.in_grace(t1));
    let (a2, _) = connect_reclaiming(&mut two, ip(1), "a", t1);
    let (c, _) = connect(&mut two, ip(3), "c", t1);
    assert_eq!(open(&mut two, a2, "o", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t1), Err(Nfsstat4::Grace));
    let o = reclaim_open(&mut two, a2, 10, t1).unwrap();
    assert!(matches!(two.lock(a2, lock_req(&10, o, false), t1), Err(Nfsstat4::Grace)));
    assert_eq!(two.lockt(a2, b"lo", &10, t1), Err(Nfsstat4::Grace));
    let LockPlan::New(plan) = two.lock(a2, lock_req(&10, o, true), t1).unwrap() else { panic!() };
    plan.granted(1);
    assert_eq!(reclaim_open(&mut two, c, 11, t1), Err(Nfsstat4::ReclaimBad));
    assert_eq!(open(&mut two, c, "o", 11, OPEN4_SHARE_ACCESS_READ, 0, t1), Err(Nfsstat4::Grace));
    assert_eq!(two.grace_status(t1).reclaiming, 1);

    two.reclaim_complete(a2, false, t1).unwrap();
    assert!(!two.in_grace(t1), "every previous client completed: grace is over at once");
    assert_eq!(two.reclaim_complete(a2, false, t1), Err(Nfsstat4::CompleteAlready));
    assert_eq!(reclaim_open(&mut two, a2, 12, t1), Err(Nfsstat4::NoGrace));
    open(&mut two, c, "o", 11, OPEN4_SHARE_ACCESS_READ, 0, t1).unwrap();
    assert_eq!(owners(&records), vec![("a".into(), 2), ("c".into(), 2)], "a kept (its reclaim completed), c recorded");
}

/// RFC 8881 section 8.4.2: a previous client that does not complete keeps
/// the grace period up to its ceiling; one that never comes back is known
/// gone after a lease. Records of clients that did not complete their
/// reclaim go at the end of the grace period.
#[test]
fn grace_ends_at_the_ceiling_or_once_absent_clients_are_known_gone() {
    let t0 = Instant::now();
    let records = MemoryRecords::new();
    let mut one = instance(1, &records, StateConfig::default(), t0);
    for (i, name) in ["a", "b"].into_iter().enumerate() {
        let (x, _) = connect(&mut one, ip(i as u8 + 1), name, t0);
        open(&mut one, x, "o", 10 + i as u32, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    }
    drop(one);

    let config = StateConfig { grace_max: Duration::from_secs(60), ..StateConfig::default() };
    let mut two = instance(2, &records, config, t0);
    let (a, _) = connect_reclaiming(&mut two, ip(1), "a", t0);
    reclaim_open(&mut two, a, 10, t0).unwrap();
    assert!(two.in_grace(t0 + Duration::from_secs(59)));
    assert!(!two.in_grace(t0 + Duration::from_secs(60)), "the ceiling");
    assert!(owners(&records).is_empty(), "neither completed its reclaim");

    // With a ceiling above the lease, an absent client is gone after a
    // lease: the grace period ends then, if everyone else completed.
    let records = MemoryRecords::new();
    let mut one = instance(3, &records, StateConfig::default(), t0);
    for (i, name) in ["a", "b"].into_iter().enumerate() {
        let (x, _) = connect(&mut one, ip(i as u8 + 1), name, t0);
        open(&mut one, x, "o", 10 + i as u32, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    }
    drop(one);
    let config = StateConfig { grace_max: Duration::from_secs(300), ..StateConfig::default() };
    let mut two = instance(4, &records, config, t0);
    let (a, _) = connect_reclaiming(&mut two, ip(1), "a", t0);
    reclaim_open(&mut two, a, 10, t0).unwrap();
    two.reclaim_complete(a, false, t0).unwrap();
    assert!(two.in_grace(t0 + LEASE - Duration::from_secs(1)));
    assert_eq!(two.next_due(), Some(t0 + LEASE));
    two.reap(t0 + LEASE);
    assert!(!two.grace_status(t0 + LEASE).active);
    assert_eq!(owners(&records), vec![("a".into(), 4)]);
}

/// RFC 8881 section 18.51.3: a client MUST send RECLAIM_COMPLETE before
/// its first lock that is not a reclaim, even with nothing to reclaim;
/// until it has, an OPEN of any claim but CLAIM_PREVIOUS and a LOCK
/// without reclaim are NFS4ERR_GRACE, in a grace period or not (knfsd
/// refuses such an OPEN the same way).
#[test]
fn a_client_takes_no_new_state_before_its_reclaim_complete() {
    let t0 = Instant::now();
    let records = MemoryRecords::new();
    let mut one = instance(1, &records, StateConfig::default(), t0);
    let (a, _) = connect_reclaiming(&mut one, ip(1), "a", t0);
    assert_eq!(open(&mut one, a, "o", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0), Err(Nfsstat4::Grace), "no grace period");
    assert_eq!(reclaim_open(&mut one, a, 10, t0), Err(Nfsstat4::NoGrace), "nor anything to reclaim");
    assert!(owners(&records).is_empty(), "refused before its record is written");
    one.reclaim_complete(a, false, t0).unwrap();
    open(&mut one, a, "o", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    drop(one);

    // After a restart a reclaims its open, and the grace period ends at
    // its ceiling before a's RECLAIM_COMPLETE: no new lock or open yet.
    let config = StateConfig { grace_max: Duration::from_secs(30), ..StateConfig::default() };
    let mut two = instance(2, &records, config, t0);
    let (a, _) = connect_reclaiming(&mut two, ip(1), "a", t0);
    let o = reclaim_open(&mut two, a, 10, t0).unwrap();
    let t1 = t0 + Duration::from_secs(30);
    assert!(!two.in_grace(t1));
    assert!(matches!(two.lock(a, lock_req(&10, o, false), t1), Err(Nfsstat4::Grace)));
    assert_eq!(open(&mut two, a, "o", 11, OPEN4_SHARE_ACCESS_READ, 0, t1), Err(Nfsstat4::Grace));
    two.reclaim_complete(a, false, t1).unwrap();
    let LockPlan::New(plan) = two.lock(a, lock_req(&10, o, false), t1).unwrap() else { panic!("a new lock state") };
    plan.granted(1);
    open(&mut two, a, "o", 11, OPEN4_SHARE_ACCESS_READ, 0, t1).unwrap();
}

/// The hostile case of grace: another principal presenting a previous
/// client's owner can neither reclaim its state (NFS4ERR_RECLAIM_BAD) nor
/// end the grace period it is owed with RECLAIM_COMPLETE.
#[test]
fn another_principal_can_neither_reclaim_nor_end_a_previous_clients_grace() {
    let t0 = Instant::now();
    let records = MemoryRecords::new();
    let mut one = instance(1, &records, StateConfig::default(), t0);
    let (a, _) = connect(&mut one, ip(1), "a", t0);
    open(&mut one, a, "o", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    drop(one);
    let mut two = instance(2, &records, StateConfig::default(), t0);
    let thief = sys(0, "thief");
    let (t, _) = connect_reclaiming_as(&mut two, ip(9), &thief, "a", 9, t0);
    assert_eq!(reclaim_open(&mut two, t, 10, t0), Err(Nfsstat4::ReclaimBad));
    two.reclaim_complete(t, false, t0).unwrap();
    assert!(two.in_grace(t0), "still waiting for the real a");
    assert_eq!(owners(&records), vec![("a".into(), 1)], "a's record untouched");
}

/// RFC 8881 section 8.4.3 (edge conditions): a client that had not
/// completed its reclaim when a grace period ended may have lost locks to
/// others, so after the next restart it may not reclaim; a restart during
/// a grace period, when nothing but reclaims was granted, keeps everyone's
/// records.
#[test]
fn records_follow_the_edge_conditions_of_restarts() {
    let t0 = Instant::now();
    let records = MemoryRecords::new();
    let mut one = instance(1, &records, StateConfig::default(), t0);
    for (i, name) in ["a", "b"].into_iter().enumerate() {
        let (x, _) = connect(&mut one, ip(i as u8 + 1), name, t0);
        open(&mut one, x, "o", 10 + i as u32, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    }
    drop(one);

    // Instance 2 stops during its grace period: nothing changes.
    let mut two = instance(2, &records, StateConfig::default(), t0);
    let (a, _) = connect_reclaiming(&mut two, ip(1), "a", t0);
    reclaim_open(&mut two, a, 10, t0).unwrap();
    drop(two);
    assert_eq!(owners(&records), vec![("a".into(), 1), ("b".into(), 1)]);

    // Instance 3: b completes, a reclaims but does not complete before
    // the ceiling.
    let config = StateConfig { grace_max: Duration::from_secs(30), ..StateConfig::default() };
    let mut three = instance(3, &records, config.clone(), t0);
    let (a, _) = connect_reclaiming(&mut three, ip(1), "a", t0);
    let (b, _) = connect_reclaiming(&mut three, ip(2), "b", t0);
    reclaim_open(&mut three, a, 10, t0).unwrap();
    three.reclaim_complete(b, false, t0).unwrap();
    three.reap(t0 + Duration::from_secs(30));
    assert_eq!(owners(&records), vec![("b".into(), 3)]);
    drop(three);

    let mut four = instance(4, &records, config, t0);
    let (a, _) = connect_reclaiming(&mut four, ip(1), "a", t0);
    assert_eq!(reclaim_open(&mut four, a, 10, t0), Err(Nfsstat4::ReclaimBad));
}

/// Durable before granted: when the record cannot be written, the first
/// state is refused with NFS4ERR_DELAY (the client retries); a client that
/// ends takes its record with it.
#[test]
fn the_first_state_waits_for_the_record_and_an_ended_client_is_forgotten() {
    let t0 = Instant::now();
    let records = MemoryRecords::new();
    let mut st = state_with(StateConfig::default(), &records, t0);
    let p = sys(0, "a");
    let (a, s) = connect_as(&mut st, ip(1), &p, "a", 1, t0);
    records.set_failing(true);
    assert_eq!(open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_READ, 0, t0), Err(Nfsstat4::Delay));
    assert_eq!(st.stats(t0).records_failed, 1);
    assert_eq!(st.clients(t0)[0].opens, 0);
    records.set_failing(false);
    let o = open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    assert_eq!(owners(&records).len(), 1);
    st.close(a, &o, &10).unwrap();
    st.destroy_session(&s, None, ConnId(1)).unwrap();
    st.destroy_clientid(a, &p, t0).unwrap();
    assert!(owners(&records).is_empty());
}

/// Records that cannot be read stop the start: the server cannot know who
/// may reclaim.
#[test]
fn unreadable_records_stop_the_start() {
    let t0 = Instant::now();
    let records = MemoryRecords::new();
    records.set_failing(true);
    let r: Result<St, _> =
        NfsState::new(StateConfig::default(), BootEpoch::new(1).unwrap(), [0; 16], Box::new(records), t0);
    assert!(matches!(r, Err(StartError::Records(_))));
    let bad = StateConfig { lease: Duration::ZERO, ..StateConfig::default() };
    let r: Result<St, _> = NfsState::new(bad, BootEpoch::new(1).unwrap(), [0; 16], Box::new(MemoryRecords::new()), t0);
    assert!(matches!(r, Err(StartError::Config(_))));
}

/// A previous client whose EXCHANGE_ID is retried (its unconfirmed record
/// replaced, RFC 8881 section 18.35.5 case 4) is not taken for gone: the
/// grace period it is owed goes on and it reclaims.
#[test]
fn a_retried_exchange_id_does_not_end_the_grace_period() {
    let t0 = Instant::now();
    let records = MemoryRecords::new();
    let mut one = instance(1, &records, StateConfig::default(), t0);
    let (a, _) = connect(&mut one, ip(1), "a", t0);
    open(&mut one, a, "o", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    drop(one);
    let mut two = instance(2, &records, StateConfig::default(), t0);
    let p = sys(0, "a");
    let c = caller(ip(1), &p, 1);
    two.exchange_id(&c, &exid_args("a", 1), t0).unwrap();
    let ok = two.exchange_id(&c, &exid_args("a", 1), t0).unwrap();
    assert!(two.in_grace(t0));
    two.create_session(&c, &cs_args(ok.clientid, ok.sequenceid, 4), t0).unwrap();
    reclaim_open(&mut two, ok.clientid, 10, t0).unwrap();
}

/// One grace period for NLM and NFSv4.1: a v4 state started in a shared
/// grace that also waits for an NLM host stays in grace after its only
/// previous client's RECLAIM_COMPLETE, refuses new state until the NLM
/// host is done too, and then keeps the completed client's record.
#[test]
fn a_shared_grace_ends_only_when_the_nlm_hosts_are_done_too() {
    let t0 = Instant::now();
    let records = MemoryRecords::new();
    let mut one = instance(1, &records, StateConfig::default(), t0);
    let (a, _) = connect(&mut one, ip(1), "a", t0);
    open(&mut one, a, "o", 10, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    drop(one);

    let t1 = t0 + Duration::from_secs(5);
    let host = Reclaimer::Nlm { addr: ip(9), name: b"nlm-host".as_slice().into() };
    let nlm = PreviousClient { who: host.clone(), principal: None, absent_after: None };
    let mut loaded = records.clone();
    let v4 = loaded.load().unwrap().into_iter().map(|r| r.previous_client(LEASE));
    let grace = SharedGrace::new(Grace::start(v4.chain([nlm]), t1, Duration::from_secs(60)));
    let config = StateConfig { grace_max: Duration::from_secs(60), ..StateConfig::default() };
    let mut two: St =
        NfsState::with_grace(config, BootEpoch::new(2).unwrap(), [2; 16], Box::new(records.clone()), grace.clone())
            .unwrap();
    let (a2, _) = connect_reclaiming(&mut two, ip(1), "a", t1);
    let (c, _) = connect(&mut two, ip(3), "c", t1);
    reclaim_open(&mut two, a2, 10, t1).unwrap();
    two.reclaim_complete(a2, false, t1).unwrap();
    assert!(two.in_grace(t1), "the NLM host has not reclaimed");
    assert_eq!(open(&mut two, c, "o", 11, OPEN4_SHARE_ACCESS_READ, 0, t1), Err(Nfsstat4::Grace));
    // keel-nlm's side: its host is done.
    assert!(grace.lock().complete(&host, None, t1));
    assert!(!two.in_grace(t1));
    open(&mut two, c, "o", 11, OPEN4_SHARE_ACCESS_READ, 0, t1).unwrap();
    assert_eq!(owners(&records), vec![("a".into(), 2), ("c".into(), 2)]);
    assert_eq!(grace.lock().ended(), Some(GraceEndReason::AllDone));
}

/// RFC 8881 section 18.16.3: an OPEN with CLAIM_PREVIOUS that claims a
/// delegation gets one of that kind, "although the server may specify an
/// immediate recall": pre-recalled when the handler asks (no lease, no
/// callback path) or another client's reclaimed open conflicts; a
/// pre-recalled delegation is revoked a lease later if not returned, and
/// is not recalled again meanwhile. Asked twice, the one held answers.
/// Only previous clients, only during the grace period.
#[test]
fn a_previous_client_reclaims_its_delegations_pre_recalled_when_they_conflict() {
    let t0 = Instant::now();
    let records = MemoryRecords::new();
    let mut one = instance(1, &records, StateConfig::default(), t0);
    let (a, _) = connect(&mut one, ip(1), "a", t0);
    let (b, _) = connect(&mut one, ip(2), "b", t0);
    open(&mut one, a, "o", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    open(&mut one, b, "o", 11, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    drop(one);

    // A ceiling past the revocation: the grace period ends by the completes.
    let config = StateConfig { grace_max: 3 * LEASE, ..StateConfig::default() };
    let mut two = instance(2, &records, config, t0);
    let pa = sys(0, "a");
    let (a, sa) = connect_reclaiming_as(&mut two, ip(1), &pa, "a", 1, t0);
    let (b, _) = connect_reclaiming(&mut two, ip(2), "b", t0);
    let (c, _) = connect_reclaiming(&mut two, ip(3), "c", t0);
    reclaim_open(&mut two, a, 10, t0).unwrap();
    let read = two.reclaim_delegation(a, &10, DelegationKind::Read, false, t0).unwrap();
    assert_eq!((read.kind, read.recall), (DelegationKind::Read, false));
    assert_eq!(two.delegation_held(a, &10), Some(DelegationKind::Read));
    assert_eq!(two.check_io(a, &read.stateid, &10, IoAccess::Read, t0), Ok(IoAuth::State(StateType::Delegation)));
    assert_eq!(two.reclaim_delegation(a, &10, DelegationKind::Read, false, t0), Ok(read), "the one held");
    let asked = two.reclaim_delegation(a, &12, DelegationKind::Read, true, t0).unwrap();
    assert!(asked.recall, "pre-recalled when the handler says so");
    assert_eq!(two.reclaim_delegation(c, &10, DelegationKind::Read, false, t0), Err(Nfsstat4::ReclaimBad));

    // b's reclaimed open for writing conflicts with a's write delegation.
    reclaim_open(&mut two, b, 11, t0).unwrap();
    two.reclaim_complete(b, false, t0).unwrap();
    reclaim_open(&mut two, a, 11, t0).unwrap();
    let write = two.reclaim_delegation(a, &11, DelegationKind::Write, false, t0).unwrap();
    assert_eq!((write.kind, write.recall), (DelegationKind::Write, true));
    let t1 = t0 + Duration::from_secs(1);
    assert_eq!(two.delegation_conflict(Accessor::Other, &11, ConflictAccess::Write, t1), Err(Nfsstat4::Delay));
    assert!(two.take_recalls().is_empty(), "recalled by OPEN's reply already, not by CB_RECALL");
    let deadline = t0 + LEASE;
    renew(&mut two, ip(1), &pa, sa, 1, deadline - Duration::from_secs(1));
    assert_eq!(two.delegation_conflict(Accessor::Other, &11, ConflictAccess::Write, deadline), Ok(()));
    assert_eq!(two.delegreturn(a, &write.stateid, &11), Err(Nfsstat4::DelegRevoked), "not returned in time");
    assert_eq!(two.delegreturn(a, &read.stateid, &10), Ok(()), "the unrecalled one stays");

    assert!(two.in_grace(deadline), "a has not completed");
    two.reclaim_complete(a, false, deadline).unwrap();
    assert!(!two.in_grace(deadline));
    assert_eq!(two.reclaim_delegation(a, &10, DelegationKind::Read, false, deadline), Err(Nfsstat4::NoGrace));
}

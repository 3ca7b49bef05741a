//! EXCHANGE_ID's case analysis and what stops one client from taking over
//! another's state.

use super::*;
use keel_nfs4_proto::{
    EXCHGID4_FLAG_CONFIRMED_R, EXCHGID4_FLAG_UPD_CONFIRMED_REC_A, EXCHGID4_FLAG_USE_NON_PNFS, OPEN4_SHARE_ACCESS_READ,
    StateProtectOps4,
};

/// RFC 8881 section 18.35.5 case 1, section 18.36.4: a new owner gets an
/// unconfirmed record and `eir_sequenceid` 1; CREATE_SESSION confirms it,
/// after which EXCHANGE_ID answers with CONFIRMED_R (case 2) and the next
/// CREATE_SESSION sequence.
#[test]
fn a_new_owner_is_confirmed_by_create_session_and_a_retry_finds_it_confirmed() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "a");
    let c = caller(ip(1), &p, 1);
    let ok = st.exchange_id(&c, &exid_args("a", 1), t0).unwrap();
    assert_eq!((ok.sequenceid, ok.flags), (1, EXCHGID4_FLAG_USE_NON_PNFS));
    assert_eq!(ok.clientid.epoch(), 7);
    assert_eq!(st.clients(t0)[0].lease, LeaseState::Unconfirmed);
    st.create_session(&c, &cs_args(ok.clientid, 1, 4), t0).unwrap();
    let again = st.exchange_id(&c, &exid_args("a", 1), t0).unwrap();
    assert_eq!(again.clientid, ok.clientid);
    assert_eq!(again.flags, EXCHGID4_FLAG_CONFIRMED_R | EXCHGID4_FLAG_USE_NON_PNFS);
    assert_eq!(again.sequenceid, 2);
    assert_eq!(st.clients(t0).len(), 1);
}

/// RFC 8881 section 18.35.5 case 3, the hostile one: another principal (on
/// another address) presenting the owner of a client with state gets
/// NFS4ERR_CLID_INUSE, and through its own record cannot touch the first
/// client's stateids.
#[test]
fn another_principal_presenting_an_owner_in_use_gets_clid_inuse_and_cannot_touch_its_state() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "victim", t0);
    let sid = open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();

    let thief = sys(0, "thief");
    let tc = caller(ip(2), &thief, 2);
    assert_eq!(st.exchange_id(&tc, &exid_args("victim", 1), t0), Err(Nfsstat4::ClidInuse));
    assert_eq!(
        st.exchange_id(&tc, &exid_args("victim", 2), t0),
        Err(Nfsstat4::ClidInuse),
        "a new verifier changes nothing"
    );
    assert_eq!(st.stats(t0).clid_inuse, 2);

    // Under its own owner, the thief has a client of its own; the victim's
    // stateids are not its: bad, whatever it tries.
    let (b, _) = connect_as(&mut st, ip(2), &thief, "thief", 2, t0);
    assert_eq!(st.test_stateids(b, &[sid]), vec![Nfsstat4::BadStateid]);
    assert_eq!(st.close(b, &sid, &10), Err(Nfsstat4::BadStateid));
    assert_eq!(st.free_stateid(b, &sid), Err(Nfsstat4::BadStateid));
    assert_eq!(st.check_io(b, &sid, &10, IoAccess::Read, t0), Err(Nfsstat4::BadStateid));
    // Nor may it destroy the victim's (guessable) client ID.
    assert_eq!(st.destroy_clientid(a, &thief, t0), Err(Nfsstat4::WrongCred));
    assert_eq!(st.test_stateids(a, &[sid]), vec![Nfsstat4::Ok], "the victim's state is intact");
}

/// RFC 8881 section 18.35.5 case 3: a collision with a record whose state
/// has expired (a courtesy client) expires that client; the newcomer gets
/// a fresh record, not the old state.
#[test]
fn a_collision_with_a_courtesy_client_expires_it() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (a, _) = connect(&mut st, ip(1), "host", t0);
    let sid = open(&mut st, a, "o", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    st.take_released();
    let later = t0 + LEASE + Duration::from_secs(1);
    let other = sys(5, "other");
    let ok = st.exchange_id(&caller(ip(2), &other, 2), &exid_args("host", 1), later).unwrap();
    assert_ne!(ok.clientid, a);
    let released = st.take_released();
    assert!(matches!(released[0], Released::Client { clientid, why: ExpiryReason::Conflict, .. } if clientid == a));
    assert!(released.iter().any(|r| matches!(r, Released::Open { file: 10, .. })));
    assert_eq!(st.test_stateids(ok.clientid, &[sid]), vec![Nfsstat4::BadStateid]);
}

/// RFC 8881 section 18.35.5 cases 3 and 4: a record without state (no
/// session, no open) under another principal is replaced; an unconfirmed
/// record is replaced by any new EXCHANGE_ID of its owner.
#[test]
fn records_without_state_are_replaced() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (p1, p2) = (sys(0, "one"), sys(0, "two"));
    let first = st.exchange_id(&caller(ip(1), &p1, 1), &exid_args("x", 1), t0).unwrap();
    let second = st.exchange_id(&caller(ip(2), &p2, 2), &exid_args("x", 1), t0).unwrap();
    assert_ne!(first.clientid, second.clientid);
    assert_eq!(
        st.create_session(&caller(ip(1), &p1, 1), &cs_args(first.clientid, 1, 4), t0),
        Err(Nfsstat4::StaleClientid)
    );
    // A confirmed record whose only session is gone is replaced too.
    let (a, s) = connect(&mut st, ip(3), "y", t0);
    st.destroy_session(&s, None, ConnId(3)).unwrap();
    let third = st.exchange_id(&caller(ip(4), &p2, 4), &exid_args("y", 1), t0).unwrap();
    assert_ne!(third.clientid, a);
    assert_eq!(st.clients(t0).len(), 2);
}

/// RFC 8881 section 18.35.5 case 5: a client that restarted (same owner
/// and principal, new verifier) gets a new record; its old record and all
/// its state stay until CREATE_SESSION confirms the new one, then end.
#[test]
fn a_restarted_client_loses_its_old_state_when_the_new_record_is_confirmed() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "h");
    let c = caller(ip(1), &p, 1);
    let (old, _) = connect_as(&mut st, ip(1), &p, "h", 1, t0);
    let sid = open(&mut st, old, "o", 10, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
    st.take_released();
    let new = st.exchange_id(&c, &exid_args("h", 2), t0).unwrap();
    assert_ne!(new.clientid, old);
    assert_eq!(new.flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
    assert_eq!(st.test_stateids(old, &[sid]), vec![Nfsstat4::Ok], "not yet");
    st.create_session(&c, &cs_args(new.clientid, new.sequenceid, 4), t0).unwrap();
    let released = st.take_released();
    assert!(matches!(released[0], Released::Client { clientid, why: ExpiryReason::Replaced, .. } if clientid == old));
    assert_eq!(st.destroy_clientid(old, &p, t0), Err(Nfsstat4::StaleClientid));
    assert_eq!(st.clients(t0).len(), 1);
}

/// RFC 8881 section 18.35.5 cases 6 to 9: EXCHGID4_FLAG_UPD_CONFIRMED_REC_A
/// updates a confirmed record of the same verifier and principal; no
/// record is NFS4ERR_NOENT, another verifier NFS4ERR_NOT_SAME, another
/// principal NFS4ERR_PERM.
#[test]
fn updates_need_the_confirmed_record_its_verifier_and_principal() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "u");
    let c = caller(ip(1), &p, 1);
    let mut upd = exid_args("u", 1);
    upd.eia_flags = EXCHGID4_FLAG_UPD_CONFIRMED_REC_A;
    assert_eq!(st.exchange_id(&c, &upd, t0), Err(Nfsstat4::Noent), "case 7");
    let (a, _) = connect_as(&mut st, ip(1), &p, "u", 1, t0);
    let ok = st.exchange_id(&c, &upd, t0).unwrap();
    assert_eq!((ok.clientid, ok.flags & EXCHGID4_FLAG_CONFIRMED_R), (a, EXCHGID4_FLAG_CONFIRMED_R), "case 6");
    let mut other_verifier = upd.clone();
    other_verifier.eia_clientowner.co_verifier = [2; 8];
    assert_eq!(st.exchange_id(&c, &other_verifier, t0), Err(Nfsstat4::NotSame), "case 8");
    let q = sys(1, "u");
    assert_eq!(st.exchange_id(&caller(ip(1), &q, 1), &upd, t0), Err(Nfsstat4::Perm), "case 9");
}

/// RFC 8881 section 18.35.3/4: unknown flags are NFS4ERR_INVAL; SP4_NONE
/// only: SP4_MACH_CRED without GSS is NFS4ERR_INVAL (as knfsd), with GSS
/// NFS4ERR_NOTSUPP (Keel cannot enforce it yet), SP4_SSV
/// NFS4ERR_ENCR_ALG_UNSUPP (as knfsd).
#[test]
fn unknown_flags_and_state_protection_are_refused() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "f");
    let c = caller(ip(1), &p, 1);
    let mut a = exid_args("f", 1);
    a.eia_flags = EXCHGID4_FLAG_CONFIRMED_R;
    assert_eq!(st.exchange_id(&c, &a, t0), Err(Nfsstat4::Inval));
    let mut a = exid_args("f", 1);
    a.eia_state_protect = StateProtect4A::Sp4MachCred(StateProtectOps4::default());
    assert_eq!(st.exchange_id(&c, &a, t0), Err(Nfsstat4::Inval));
    let gss = Principal::Gss { name: b"nfs/f@REALM".as_slice().into() };
    assert_eq!(st.exchange_id(&caller(ip(1), &gss, 1), &a, t0), Err(Nfsstat4::Notsupp));
    a.eia_state_protect = StateProtect4A::Sp4Ssv(Default::default());
    assert_eq!(st.exchange_id(&c, &a, t0), Err(Nfsstat4::EncrAlgUnsupp));
    assert!(st.clients(t0).is_empty());
}

/// RFC 8881 section 2.4: a client ID of an earlier server instance is
/// NFS4ERR_STALE_CLIENTID.
#[test]
fn a_clientid_of_an_earlier_instance_is_stale() {
    let t0 = Instant::now();
    let records = MemoryRecords::new();
    let mut old = state_with(StateConfig::default(), &records, t0);
    let (a, _) = connect(&mut old, ip(1), "a", t0);
    let mut new: St =
        NfsState::new(StateConfig::default(), BootEpoch::new(8).unwrap(), [9; 16], Box::new(records), t0).unwrap();
    let p = sys(0, "a");
    assert_eq!(new.create_session(&caller(ip(1), &p, 1), &cs_args(a, 2, 4), t0), Err(Nfsstat4::StaleClientid));
    assert_eq!(new.reclaim_complete(a, false, t0), Err(Nfsstat4::StaleClientid));
}

/// RFC 8881 section 18.50: DESTROY_CLIENTID is NFS4ERR_CLIENTID_BUSY while
/// the client has sessions or state; without, the record ends.
#[test]
fn destroy_clientid_waits_for_sessions_and_state() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "d");
    let (a, s) = connect_as(&mut st, ip(1), &p, "d", 1, t0);
    assert_eq!(st.destroy_clientid(a, &p, t0), Err(Nfsstat4::ClientidBusy));
    st.destroy_session(&s, None, ConnId(1)).unwrap();
    st.destroy_clientid(a, &p, t0).unwrap();
    assert!(st.clients(t0).is_empty());
    assert_eq!(st.held(Resource::Clients, ip(1)), (0, 0));
    assert_eq!(st.destroy_clientid(a, &p, t0), Err(Nfsstat4::StaleClientid));
}

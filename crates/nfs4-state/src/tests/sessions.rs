//! CREATE_SESSION, DESTROY_SESSION, BIND_CONN_TO_SESSION, connections and
//! the backchannel.

use super::*;
use keel_nfs4_proto::{
    BindConnToSession4Args, CREATE_SESSION4_FLAG_CONN_RDMA, CREATE_SESSION4_FLAG_PERSIST, CallbackSecParms4,
    ChannelDirFromClient4, ChannelDirFromServer4, GssCbHandles4, SEQ4_STATUS_CB_PATH_DOWN,
    SEQ4_STATUS_CB_PATH_DOWN_SESSION,
};

fn flags_of(st: &mut St, sid: SessionId, seqid: u32, t: Instant) -> u32 {
    let p = sys(0, "flags");
    let SequenceStart::New(g) =
        st.sequence(&caller(ip(200), &p, 200), &seq_args(sid, 0, seqid, false), shape(1), t).unwrap()
    else {
        panic!("new")
    };
    st.sequence_done(&g, SlotReply { status: Nfsstat4::Ok, ops: 1, reply: &[] }, t);
    g.resok.sr_status_flags
}

/// RFC 8881 section 18.36.4 phase 2: a retransmitted CREATE_SESSION gets
/// the reply of the first (the same session, no second one); a sequence
/// neither the last nor the next is NFS4ERR_SEQ_MISORDERED.
#[test]
fn create_session_replays_its_reply_and_refuses_misordered_sequences() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "c");
    let c = caller(ip(1), &p, 1);
    let ok = st.exchange_id(&c, &exid_args("c", 1), t0).unwrap();
    assert_eq!(
        st.create_session(&c, &cs_args(ok.clientid, 0, 4), t0),
        Err(Nfsstat4::SeqMisordered),
        "nothing to replay yet"
    );
    let first = st.create_session(&c, &cs_args(ok.clientid, 1, 4), t0).unwrap();
    let again = st.create_session(&c, &cs_args(ok.clientid, 1, 4), t0).unwrap();
    assert_eq!(first, again);
    assert_eq!(st.create_session(&c, &cs_args(ok.clientid, 3, 4), t0), Err(Nfsstat4::SeqMisordered));
    assert_eq!(st.stats(t0).sessions, 1);
    let second = st.create_session(&c, &cs_args(ok.clientid, 2, 4), t0).unwrap();
    assert_ne!(second.csr_sessionid, first.csr_sessionid);
    assert_eq!(SessionId(second.csr_sessionid).client(), ok.clientid);
}

/// RFC 8881 section 18.36.3: the server grants no more than its limits, no
/// header padding, no RDMA; NFS4ERR_TOOSMALL for channels that cannot
/// carry a SEQUENCE or a CB_RECALL. Persistence and RDMA are not granted.
#[test]
fn channel_attributes_are_clamped_to_the_servers_limits() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "n");
    let c = caller(ip(1), &p, 1);
    let ok = st.exchange_id(&c, &exid_args("n", 1), t0).unwrap();
    let mut args = cs_args(ok.clientid, 1, 1000);
    args.csa_flags |= CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_RDMA;
    args.csa_fore_chan_attrs = ChannelAttrs4 {
        ca_headerpadsize: 512,
        ca_maxrequestsize: u32::MAX,
        ca_maxresponsesize: u32::MAX,
        ca_maxresponsesize_cached: u32::MAX,
        ca_maxoperations: u32::MAX,
        ca_maxrequests: 1000,
        ca_rdma_ird: Some(4),
    };
    let mut tiny = args.clone();
    tiny.csa_fore_chan_attrs.ca_maxrequestsize = 32;
    assert_eq!(st.create_session(&c, &tiny, t0), Err(Nfsstat4::Toosmall));
    let mut tiny = args.clone();
    tiny.csa_back_chan_attrs.ca_maxoperations = 1;
    assert_eq!(st.create_session(&c, &tiny, t0), Err(Nfsstat4::Toosmall));
    let mut flags = args.clone();
    flags.csa_flags |= 0x100;
    assert_eq!(st.create_session(&c, &flags, t0), Err(Nfsstat4::Inval));

    let r = st.create_session(&c, &args, t0).unwrap();
    let limits = ChannelLimits::default();
    let fore = &r.csr_fore_chan_attrs;
    assert_eq!(fore.ca_headerpadsize, 0);
    assert_eq!(fore.ca_maxrequestsize, limits.request_bytes_max);
    assert_eq!(fore.ca_maxresponsesize, limits.response_bytes_max);
    assert_eq!(fore.ca_maxresponsesize_cached, limits.cached_response_bytes_max);
    assert_eq!(fore.ca_maxoperations, limits.operations_max);
    assert_eq!(fore.ca_maxrequests, limits.slots_per_session_max);
    assert_eq!(fore.ca_rdma_ird, None);
    assert_eq!(r.csr_back_chan_attrs.ca_maxrequests, 1);
    assert_eq!(r.csr_back_chan_attrs.ca_maxresponsesize_cached, 0);
    assert_eq!(r.csr_flags, CREATE_SESSION4_FLAG_CONN_BACK_CHAN);
    assert_eq!(st.fore_channel(&SessionId(r.csr_sessionid)), Some(fore));
}

/// RFC 8881 section 18.36.4 phase 3: an unconfirmed record is confirmed
/// only by its principal from its address (NFS4ERR_CLID_INUSE otherwise),
/// and a refused attempt uses up no sequence number: the real client's
/// CREATE_SESSION still works, and nobody else sees its reply.
#[test]
fn an_unconfirmed_record_is_confirmed_only_by_its_principal_from_its_address() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "u");
    let ok = st.exchange_id(&caller(ip(1), &p, 1), &exid_args("u", 1), t0).unwrap();
    let q = sys(1, "u");
    assert_eq!(st.create_session(&caller(ip(1), &q, 2), &cs_args(ok.clientid, 1, 4), t0), Err(Nfsstat4::ClidInuse));
    assert_eq!(st.create_session(&caller(ip(9), &p, 3), &cs_args(ok.clientid, 1, 4), t0), Err(Nfsstat4::ClidInuse));
    let r = st.create_session(&caller(ip(1), &p, 1), &cs_args(ok.clientid, 1, 4), t0).unwrap();
    assert!(st.sessions_of(ok.clientid).contains(&SessionId(r.csr_sessionid)));
}

/// RFC 8881 sections 2.10.8.3 and 18.36: a confirmed SP4_NONE client ID
/// takes sessions from another principal (pynfs CSESS10, as knfsd): under
/// AUTH_SYS or AUTH_NONE a principal is only claimed. A record made under
/// RPCSEC_GSS, whose principal Kerberos authenticated, takes them from
/// that principal only (NFS4ERR_WRONG_CRED), replays included: client IDs
/// can be guessed.
#[test]
fn a_confirmed_record_takes_sessions_from_another_principal_unless_made_under_gss() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "u");
    let (a, _) = connect_as(&mut st, ip(1), &p, "u", 1, t0);
    for (i, other) in [sys(1000, "u"), sys(0, "elsewhere"), Principal::None].iter().enumerate() {
        let seq = 2 + i as u32;
        let r = st.create_session(&caller(ip(2), other, 2), &cs_args(a, seq, 4), t0).unwrap();
        assert!(st.sessions_of(a).contains(&SessionId(r.csr_sessionid)), "{other:?}");
    }

    let krb = Principal::Gss { name: b"nfs/h@REALM".as_slice().into() };
    let (g, _) = connect_as(&mut st, ip(3), &krb, "g", 3, t0);
    let mallory = Principal::Gss { name: b"mallory@REALM".as_slice().into() };
    for other in [sys(0, "h"), Principal::None, mallory] {
        let c = caller(ip(3), &other, 4);
        assert_eq!(st.create_session(&c, &cs_args(g, 2, 4), t0), Err(Nfsstat4::WrongCred), "{other:?}");
        assert_eq!(st.create_session(&c, &cs_args(g, 1, 4), t0), Err(Nfsstat4::WrongCred), "a replay: {other:?}");
    }
    assert_eq!(st.sessions_of(g).len(), 1);
    st.create_session(&caller(ip(3), &krb, 3), &cs_args(g, 2, 4), t0).unwrap();
}

/// RFC 8881 section 18.37.3: DESTROY_SESSION waits (NFS4ERR_DELAY) for
/// requests under way on other slots, not for the one carrying it.
#[test]
fn destroy_session_waits_for_other_requests_but_not_its_own() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "d");
    let (_, sid) = connect_as(&mut st, ip(1), &p, "d", 1, t0);
    let c = caller(ip(1), &p, 1);
    let SequenceStart::New(own) = st.sequence(&c, &seq_args(sid, 0, 1, false), shape(2), t0).unwrap() else { panic!() };
    st.destroy_session(&sid, Some(&sid), ConnId(1)).unwrap();
    st.sequence_done(&own, SlotReply { status: Nfsstat4::Ok, ops: 2, reply: &[] }, t0);
    assert_eq!(st.destroy_session(&sid, None, ConnId(1)), Err(Nfsstat4::Badsession));

    let (a, sid) = connect_as(&mut st, ip(2), &p, "e", 2, t0);
    let SequenceStart::New(other) = st.sequence(&c, &seq_args(sid, 1, 1, false), shape(2), t0).unwrap() else {
        panic!()
    };
    assert_eq!(st.destroy_session(&sid, None, ConnId(2)), Err(Nfsstat4::Delay));
    st.sequence_done(&other, SlotReply { status: Nfsstat4::Ok, ops: 2, reply: &[] }, t0);
    st.destroy_session(&sid, None, ConnId(2)).unwrap();
    assert_eq!(st.held(Resource::ReplyCacheSlots, ip(2)).0, 0);
    assert_eq!(st.clients(t0).iter().find(|i| i.clientid == a).unwrap().sessions, 0);
}

/// RFC 8881 section 18.37.3: "DESTROY_SESSION MUST be invoked on a
/// connection that is associated with the session being destroyed": from
/// any other it is NFS4ERR_CONN_NOT_BOUND_TO_SESSION and the session lives
/// on; once a SEQUENCE in the session came on that connection (which binds
/// it, section 2.10.3.1), it is destroyed (pynfs DSESS9001).
#[test]
fn destroy_session_must_come_on_a_connection_of_the_session() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "d");
    let (a, sid) = connect_as(&mut st, ip(1), &p, "d", 1, t0);
    let (_, other) = connect_as(&mut st, ip(1), &p, "e", 2, t0);
    assert_eq!(st.destroy_session(&sid, None, ConnId(2)), Err(Nfsstat4::ConnNotBoundToSession));
    assert_eq!(st.destroy_session(&sid, Some(&other), ConnId(2)), Err(Nfsstat4::ConnNotBoundToSession));
    assert_eq!(st.sessions_of(a), vec![sid], "the session lives on");
    // renew's SEQUENCE comes on connection 99.
    renew(&mut st, ip(1), &p, sid, 1, t0);
    st.destroy_session(&sid, None, ConnId(99)).unwrap();
    assert_eq!(st.destroy_session(&sid, None, ConnId(1)), Err(Nfsstat4::Badsession));
}

/// RFC 8881 sections 18.34 and 18.46.3: a session without a backchannel
/// connection has its callback path down (SEQ4_STATUS_CB_PATH_DOWN and
/// _SESSION); BIND_CONN_TO_SESSION binds one; closing it unbinds it.
#[test]
fn connections_bind_and_unbind_the_backchannel() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "b");
    let c = caller(ip(1), &p, 1);
    let ok = st.exchange_id(&c, &exid_args("b", 1), t0).unwrap();
    let mut args = cs_args(ok.clientid, 1, 4);
    args.csa_flags = 0;
    let sid = SessionId(st.create_session(&c, &args, t0).unwrap().csr_sessionid);
    let down = SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;
    assert_eq!(flags_of(&mut st, sid, 1, t0), down);
    assert_eq!(st.callback_channel(ok.clientid), None);

    let bind = BindConnToSession4Args {
        bctsa_sessid: sid.0,
        bctsa_dir: ChannelDirFromClient4::Cdfc4BackOrBoth,
        bctsa_use_conn_in_rdma_mode: true,
    };
    let r = st.bind_conn_to_session(&caller(ip(1), &p, 5), &bind, t0).unwrap();
    assert_eq!((r.bctsr_dir, r.bctsr_use_conn_in_rdma_mode), (ChannelDirFromServer4::Cdfs4Both, false));
    assert_eq!(flags_of(&mut st, sid, 2, t0), 0);
    let cb = st.callback_channel(ok.clientid).unwrap();
    assert_eq!((cb.sessionid, cb.conn, cb.program), (sid, ConnId(5), 0x4000_0000));
    st.set_callback_state(ok.clientid, CallbackState::Down);
    assert_eq!(flags_of(&mut st, sid, 3, t0), SEQ4_STATUS_CB_PATH_DOWN);
    st.set_callback_state(ok.clientid, CallbackState::Up);

    st.connection_closed(ConnId(5));
    assert_eq!(flags_of(&mut st, sid, 4, t0), down);
    let unknown = BindConnToSession4Args { bctsa_sessid: [0; 16], ..bind };
    assert_eq!(st.bind_conn_to_session(&c, &unknown, t0), Err(Nfsstat4::Badsession));
}

/// One callback at a time per session: the backchannel slot's sequence
/// moves on only when the client answered.
#[test]
fn the_backchannel_slot_is_taken_one_callback_at_a_time() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let (_, sid) = connect(&mut st, ip(1), "cb", t0);
    assert_eq!(st.cb_sequence_begin(&sid), Some((0, 1)));
    assert_eq!(st.cb_sequence_begin(&sid), None);
    st.cb_sequence_end(&sid, false);
    assert_eq!(st.cb_sequence_begin(&sid), Some((0, 1)), "unanswered: the same sequence again");
    st.cb_sequence_end(&sid, true);
    assert_eq!(st.cb_sequence_begin(&sid), Some((0, 2)));
}

/// RFC 8881 section 18.36.3: callback security the server cannot use (only
/// RPCSEC_GSS) is NFS4ERR_ENCR_ALG_UNSUPP, as knfsd answers; BACKCHANNEL_CTL
/// checks the same.
#[test]
fn callback_security_must_include_one_the_server_can_use() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "s");
    let c = caller(ip(1), &p, 1);
    let ok = st.exchange_id(&c, &exid_args("s", 1), t0).unwrap();
    let gss = CallbackSecParms4::RpcsecGss(GssCbHandles4::default());
    let mut args = cs_args(ok.clientid, 1, 4);
    args.csa_sec_parms = vec![gss.clone()].into();
    assert_eq!(st.create_session(&c, &args, t0), Err(Nfsstat4::EncrAlgUnsupp));
    args.csa_sec_parms = vec![gss.clone(), CallbackSecParms4::AuthNone].into();
    let sid = SessionId(st.create_session(&c, &args, t0).unwrap().csr_sessionid);
    assert_eq!(st.backchannel_ctl(&sid, 7, &[gss]), Err(Nfsstat4::EncrAlgUnsupp));
    st.backchannel_ctl(&sid, 7, &[]).unwrap();
    assert_eq!(st.callback_channel(ok.clientid).unwrap().program, 7);
}

/// The bound on sessions per client: past it, NFS4ERR_DELAY, and the
/// sequence is not used up.
#[test]
fn sessions_per_client_are_bounded() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "m");
    let c = caller(ip(1), &p, 1);
    let ok = st.exchange_id(&c, &exid_args("m", 1), t0).unwrap();
    let max = st.config().limits.sessions_per_client as u32;
    for seq in 1..=max {
        st.create_session(&c, &cs_args(ok.clientid, seq, 1), t0).unwrap();
    }
    assert_eq!(st.create_session(&c, &cs_args(ok.clientid, max + 1, 1), t0), Err(Nfsstat4::Delay));
    let first = st.sessions_of(ok.clientid)[0];
    st.destroy_session(&first, None, ConnId(1)).unwrap();
    st.create_session(&c, &cs_args(ok.clientid, max + 1, 1), t0).unwrap();
}

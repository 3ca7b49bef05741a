//! SEQUENCE, the slot table and exactly-once semantics.

use super::*;

/// One SEQUENCE: its slot, seqid, cachethis and the COMPOUND's length.
#[derive(Clone, Copy)]
struct Req {
    slot: u32,
    seqid: u32,
    cachethis: bool,
    ops: u32,
}

fn req(slot: u32, seqid: u32, cachethis: bool, ops: u32) -> Req {
    Req { slot, seqid, cachethis, ops }
}

fn start(st: &mut St, p: &Principal, sid: SessionId, r: Req, t: Instant) -> Result<SequenceStart, Nfsstat4> {
    st.sequence(&caller(ip(1), p, 1), &seq_args(sid, r.slot, r.seqid, r.cachethis), shape(r.ops), t)
}

fn new_request(st: &mut St, p: &Principal, sid: SessionId, r: Req, t: Instant) -> SlotGrant {
    match start(st, p, sid, r, t).unwrap() {
        SequenceStart::New(g) => g,
        other => panic!("a new request, not {other:?}"),
    }
}

fn done(st: &mut St, g: &SlotGrant, ops: u32, reply: &[u8], t: Instant) {
    st.sequence_done(g, SlotReply { status: Nfsstat4::Ok, ops, reply }, t);
}

/// RFC 8881 sections 2.10.6.1 and 18.46.3: a retransmission of the last
/// request on a slot gets the reply cached for it (when it asked for
/// caching); a new seqid runs a new request, after which the old one is
/// misordered; a slot ID past the table is NFS4ERR_BADSLOT.
#[test]
fn a_retransmission_gets_the_cached_reply_exactly_once() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "s");
    let (_, sid) = connect_as(&mut st, ip(1), &p, "s", 1, t0);
    assert_eq!(start(&mut st, &p, sid, req(8, 1, true, 2), t0), Err(Nfsstat4::Badslot));
    let g = new_request(&mut st, &p, sid, req(0, 1, true, 2), t0);
    assert_eq!((g.resok.sr_highest_slotid, g.resok.sr_target_highest_slotid), (7, 7));
    assert_eq!(g.reply_bytes_max, 4096);
    done(&mut st, &g, 2, b"reply one", t0);
    assert_eq!(st.reply_cache_bytes(), 9);
    for _ in 0..2 {
        let replay = start(&mut st, &p, sid, req(0, 1, true, 2), t0).unwrap();
        assert_eq!(replay, SequenceStart::Replay(Replay::Cached(bytes::Bytes::from_static(b"reply one"))));
    }
    let g2 = new_request(&mut st, &p, sid, req(0, 2, true, 2), t0);
    assert_eq!(st.reply_cache_bytes(), 0, "the older reply is gone");
    done(&mut st, &g2, 2, b"two", t0);
    assert_eq!(start(&mut st, &p, sid, req(0, 1, true, 2), t0), Err(Nfsstat4::SeqMisordered));
    assert_eq!(start(&mut st, &p, sid, req(0, 4, true, 2), t0), Err(Nfsstat4::SeqMisordered));
    let g3 = new_request(&mut st, &p, sid, req(0, 3, false, 2), t0);
    done(&mut st, &g3, 2, b"", t0);
    let stats = st.stats(t0);
    assert_eq!((stats.sequences, stats.replays, stats.misordered), (3, 2, 2));
}

/// RFC 8881 section 2.10.6.1.3: a retransmission whose reply was not
/// cached gets NFS4ERR_RETRY_UNCACHED_REP after SEQUENCE; a SEQUENCE
/// alone is answered again.
#[test]
fn an_uncached_retransmission_is_retry_uncached_rep() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "s");
    let (_, sid) = connect_as(&mut st, ip(1), &p, "s", 1, t0);
    let g = new_request(&mut st, &p, sid, req(1, 1, false, 3), t0);
    assert_eq!(g.reply_bytes_max, 1 << 20);
    done(&mut st, &g, 3, b"not kept", t0);
    let SequenceStart::Replay(Replay::Uncached(resok)) = start(&mut st, &p, sid, req(1, 1, false, 3), t0).unwrap()
    else {
        panic!()
    };
    assert_eq!((resok.sr_slotid, resok.sr_sequenceid), (1, 1));
    let g = new_request(&mut st, &p, sid, req(2, 1, false, 1), t0);
    done(&mut st, &g, 1, b"", t0);
    assert!(matches!(
        start(&mut st, &p, sid, req(2, 1, false, 1), t0).unwrap(),
        SequenceStart::Replay(Replay::SequenceOnly(_))
    ));
    assert_eq!(st.reply_cache_bytes(), 0);
}

/// RFC 8881 section 2.10.6.2: while a request is under way on a slot, its
/// retransmission is NFS4ERR_DELAY and anything else misordered; errors
/// leave the slot as it was (section 2.10.6.1.2).
#[test]
fn a_slot_in_use_answers_delay_and_errors_change_nothing() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "s");
    let (_, sid) = connect_as(&mut st, ip(1), &p, "s", 1, t0);
    let g = new_request(&mut st, &p, sid, req(0, 1, true, 2), t0);
    assert_eq!(start(&mut st, &p, sid, req(0, 1, true, 2), t0), Err(Nfsstat4::Delay));
    assert_eq!(start(&mut st, &p, sid, req(0, 2, true, 2), t0), Err(Nfsstat4::SeqMisordered));
    done(&mut st, &g, 2, b"r", t0);
    assert_eq!(start(&mut st, &p, sid, req(0, 3, true, 2), t0), Err(Nfsstat4::SeqMisordered));
    new_request(&mut st, &p, sid, req(0, 2, true, 2), t0);
}

/// RFC 8881 section 2.10.6.1.3.1 (and knfsd's checks): a "retransmission"
/// from another principal or with more operations than the original is
/// NFS4ERR_SEQ_FALSE_RETRY, and gets nothing of the cached reply.
#[test]
fn a_false_retry_does_not_get_the_cached_reply() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "s");
    let (_, sid) = connect_as(&mut st, ip(1), &p, "s", 1, t0);
    let g = new_request(&mut st, &p, sid, req(0, 1, true, 2), t0);
    done(&mut st, &g, 2, b"secret", t0);
    let q = sys(1000, "s");
    assert_eq!(start(&mut st, &q, sid, req(0, 1, true, 2), t0), Err(Nfsstat4::SeqFalseRetry));
    assert_eq!(start(&mut st, &p, sid, req(0, 1, true, 3), t0), Err(Nfsstat4::SeqFalseRetry));
    assert!(matches!(
        start(&mut st, &p, sid, req(0, 1, true, 2), t0).unwrap(),
        SequenceStart::Replay(Replay::Cached(_))
    ));
}

/// RFC 8881 sections 2.10.6.1.3 and 2.10.6.1.3.1: `sa_cachethis` asks
/// for the reply to be kept; a retry that differs from the original only
/// there is a retry (false-retry detection is optional). It gets the
/// reply if it was kept, else NFS4ERR_RETRY_UNCACHED_REP as any retry of
/// an uncached reply (pynfs SEQ9a-e, SEQ10b).
#[test]
fn a_retry_that_differs_only_in_cachethis_is_a_retry() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "s");
    let (_, sid) = connect_as(&mut st, ip(1), &p, "s", 1, t0);
    let g = new_request(&mut st, &p, sid, req(0, 1, true, 2), t0);
    done(&mut st, &g, 2, b"kept", t0);
    assert_eq!(
        start(&mut st, &p, sid, req(0, 1, false, 2), t0),
        Ok(SequenceStart::Replay(Replay::Cached(bytes::Bytes::from_static(b"kept"))))
    );
    let g = new_request(&mut st, &p, sid, req(1, 1, false, 2), t0);
    done(&mut st, &g, 2, b"not kept", t0);
    assert!(matches!(start(&mut st, &p, sid, req(1, 1, true, 2), t0), Ok(SequenceStart::Replay(Replay::Uncached(_)))));
    assert_eq!(st.stats(t0).replays, 2);
}

/// RFC 8881 section 18.46.3: a COMPOUND longer than the session's
/// `ca_maxoperations` is NFS4ERR_TOO_MANY_OPS, larger than its
/// `ca_maxrequestsize` NFS4ERR_REQ_TOO_BIG; an unknown session is
/// NFS4ERR_BADSESSION.
#[test]
fn compounds_past_the_sessions_limits_are_refused() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "s");
    let (_, sid) = connect_as(&mut st, ip(1), &p, "s", 1, t0);
    assert_eq!(start(&mut st, &p, sid, req(0, 1, false, 17), t0), Err(Nfsstat4::TooManyOps));
    let big = CompoundShape { ops: 2, request_bytes: (1 << 20) + 1 };
    assert_eq!(st.sequence(&caller(ip(1), &p, 1), &seq_args(sid, 0, 1, false), big, t0), Err(Nfsstat4::ReqTooBig));
    let mut other = sid;
    other.0[15] ^= 1;
    assert_eq!(start(&mut st, &p, other, req(0, 1, false, 1), t0), Err(Nfsstat4::Badsession));
    new_request(&mut st, &p, sid, req(0, 1, false, 16), t0);
}

/// The reply cache is bounded: a reply larger than the session's cached
/// size is not kept (its retransmission is NFS4ERR_RETRY_UNCACHED_REP),
/// and what is kept is counted and given back with the session.
#[test]
fn the_reply_cache_is_bounded_and_counted() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "s");
    let (_, sid) = connect_as(&mut st, ip(1), &p, "s", 1, t0);
    let big = vec![7u8; 4097];
    let g = new_request(&mut st, &p, sid, req(0, 1, true, 2), t0);
    done(&mut st, &g, 2, &big, t0);
    assert_eq!(st.reply_cache_bytes(), 0);
    assert!(matches!(
        start(&mut st, &p, sid, req(0, 1, true, 2), t0).unwrap(),
        SequenceStart::Replay(Replay::Uncached(_))
    ));
    for slot in 0..8 {
        let g = new_request(&mut st, &p, sid, req(slot, if slot == 0 { 2 } else { 1 }, true, 2), t0);
        done(&mut st, &g, 2, &big[..4096], t0);
    }
    assert_eq!(st.reply_cache_bytes(), 8 * 4096);
    assert_eq!(st.stats(t0).reply_cache_bytes, 8 * 4096);
    st.destroy_session(&sid, None, ConnId(1)).unwrap();
    assert_eq!(st.reply_cache_bytes(), 0);
}

/// RFC 8881 section 8.3: every SEQUENCE renews the lease; a request under
/// way keeps it from expiring.
#[test]
fn sequence_renews_the_lease() {
    let t0 = Instant::now();
    let mut st = state(t0);
    let p = sys(0, "s");
    let (a, sid) = connect_as(&mut st, ip(1), &p, "s", 1, t0);
    let t1 = t0 + Duration::from_secs(80);
    let g = new_request(&mut st, &p, sid, req(0, 1, false, 2), t1);
    let t2 = t1 + LEASE + Duration::from_secs(10);
    assert!(matches!(st.clients(t2)[0].lease, LeaseState::Active { .. }), "a request is under way");
    assert_eq!(st.reap(t2), 0);
    done(&mut st, &g, 2, b"", t1);
    assert!(matches!(st.clients(t1 + Duration::from_secs(89))[0].lease, LeaseState::Active { .. }));
    assert_eq!(st.reap(t1 + LEASE), 1, "no state: the client ends with its lease");
    assert_eq!(st.destroy_clientid(a, &p, t2), Err(Nfsstat4::StaleClientid));
}

use std::sync::atomic::{AtomicU32, Ordering};

use super::*;
use crate::msg::{AUTH_NONE, AUTH_SYS, AuthStat, AuthSys, OpaqueAuth, decode_reply_header};
use crate::{CallConnection, ConnectionId, Principal};

/// Program 7, versions 1..=2. Procedure 1 echoes a u32 (cached, counts its
/// executions), 2 panics, 3 wants a u32 argument, 9 (after a gap) counts
/// its executions and answers nothing, 10 (cached) counts its executions
/// and answers with a spliced payload, 11 answers the credential as it
/// sees it, 12 the connection the call came on, after sending a call back
/// on it.
struct Echo {
    executions: AtomicU32,
}

impl RpcProgram for Echo {
    fn program(&self) -> u32 {
        7
    }
    fn versions(&self) -> (u32, u32) {
        (1, 2)
    }
    fn is_cached(&self, _vers: u32, proc_: u32) -> bool {
        proc_ == 1 || proc_ == 2 || proc_ == 10
    }
    fn reply_bytes_max(&self, _vers: u32, proc_: u32, _args: Bytes) -> usize {
        if proc_ == 1 { 8 } else { 0 }
    }
    fn answers(&self, _vers: u32, proc_: u32) -> bool {
        proc_ != 9
    }
    fn portmap_versions(&self) -> Vec<u32> {
        vec![2]
    }
    fn call(&self, ctx: &CallContext, args: &mut Decoder, reply: &mut Encoder) -> Result<(), AcceptError> {
        match ctx.proc_ {
            1 => {
                self.executions.fetch_add(1, Ordering::SeqCst);
                reply.u32(args.u32()?);
                if let Some(ids) = ctx.cred.ids() {
                    reply.u32(ids.uid);
                }
                Ok(())
            }
            2 => panic!("handler bug"),
            3 => {
                args.u32()?;
                Ok(())
            }
            9 => {
                args.u32()?;
                self.executions.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            10 => {
                self.executions.fetch_add(1, Ordering::SeqCst);
                reply.opaque_spliced(keel_xdr::Spliced::new(4096, "a pipe"));
                Ok(())
            }
            11 => {
                // The credential as the program sees it.
                reply.u32(ctx.cred.flavor().number());
                if let Principal::Sys { machine_name, uid } = ctx.cred.principal() {
                    reply.opaque(machine_name);
                    reply.u32(*uid);
                }
                if let Some(ids) = ctx.cred.ids() {
                    reply.u32(ids.gid);
                    reply.u32(ids.groups().len() as u32);
                    for g in ids.groups() {
                        reply.u32(*g);
                    }
                }
                Ok(())
            }
            12 => {
                reply.bool(ctx.connection.is_some());
                if let Some(connection) = ctx.connection {
                    reply.u64(connection.id().get());
                    connection.backchannel().send_call(Bytes::from_static(b"call back")).unwrap();
                }
                Ok(())
            }
            _ => Err(AcceptError::ProcUnavail),
        }
    }
}

fn dispatcher() -> (Dispatcher, Arc<Echo>) {
    let echo = Arc::new(Echo { executions: AtomicU32::new(0) });
    (Dispatcher::new(vec![echo.clone()], ReplyCache::new(16, 1 << 20)).unwrap(), echo)
}

/// Other versions of program 7, served apart from [`Echo`]'s: procedure 1
/// answers the version it was called with and a mark of its own.
struct Other {
    versions: (u32, u32),
}

const OTHER_MARK: u32 = 0x4f74_6872;

impl RpcProgram for Other {
    fn program(&self) -> u32 {
        7
    }
    fn versions(&self) -> (u32, u32) {
        self.versions
    }
    fn reply_bytes_max(&self, _vers: u32, _proc: u32, _args: Bytes) -> usize {
        12
    }
    fn call(&self, ctx: &CallContext, _args: &mut Decoder, reply: &mut Encoder) -> Result<(), AcceptError> {
        match ctx.proc_ {
            1 => {
                reply.u32(ctx.vers);
                reply.u32(OTHER_MARK);
                Ok(())
            }
            _ => Err(AcceptError::ProcUnavail),
        }
    }
}

/// Program 7's versions 1 and 2 ([`Echo`]) and 4 ([`Other`]).
fn two_versions() -> (Dispatcher, Arc<Echo>) {
    let echo = Arc::new(Echo { executions: AtomicU32::new(0) });
    let other: Arc<dyn RpcProgram> = Arc::new(Other { versions: (4, 4) });
    (Dispatcher::new(vec![echo.clone() as Arc<dyn RpcProgram>, other], ReplyCache::new(16, 1 << 20)).unwrap(), echo)
}

fn call(xid: u32, prog: u32, vers: u32, proc_: u32, cred: OpaqueAuth, args: &[u8]) -> Bytes {
    let mut enc = Encoder::new();
    CallHeader { xid, rpc_version: 2, prog, vers, proc_, cred, verf: OpaqueAuth::default() }.encode(&mut enc);
    enc.raw(args);
    enc.into_bytes()
}

const PEER: &str = "127.0.0.1:900";
const LOCAL: &str = "127.0.0.1:2049";

fn run(d: &Dispatcher, record: Bytes) -> Option<(u32, ReplyStat, Decoder)> {
    let segments = d.handle(record, PEER.parse().unwrap(), LOCAL.parse().unwrap())?;
    let mut all = Vec::new();
    for s in bytes(segments) {
        all.extend_from_slice(&s);
    }
    let mut dec = Decoder::new(Bytes::from(all));
    let (xid, stat) = decode_reply_header(&mut dec).unwrap();
    Some((xid, stat, dec))
}

/// A reply's segments, which must all be bytes.
fn bytes(segments: ReplySegments) -> Vec<Bytes> {
    segments.into_iter().map(|s| s.as_bytes().cloned().expect("no spliced payload")).collect()
}

fn sys(uid: u32) -> OpaqueAuth {
    AuthSys { uid, ..Default::default() }.to_opaque()
}

#[test]
fn success_carries_results_and_credentials() {
    let (d, _) = dispatcher();
    let (xid, stat, mut dec) = run(&d, call(5, 7, 1, 1, sys(1000), &[0, 0, 0, 42])).unwrap();
    assert_eq!((xid, stat), (5, ReplyStat::Accepted(AcceptStat::Success)));
    assert_eq!((dec.u32().unwrap(), dec.u32().unwrap()), (42, 1000));
}

#[test]
fn unknown_program_version_and_procedure_get_rfc_replies() {
    let (d, _) = dispatcher();
    let stat = |r: Bytes| run(&d, r).unwrap().1;
    assert_eq!(stat(call(1, 8, 1, 0, sys(0), &[])), ReplyStat::Accepted(AcceptStat::ProgUnavail));
    assert_eq!(stat(call(1, 7, 3, 0, sys(0), &[])), ReplyStat::Accepted(AcceptStat::ProgMismatch { low: 1, high: 2 }));
    assert_eq!(stat(call(1, 7, 2, 99, sys(0), &[])), ReplyStat::Accepted(AcceptStat::ProcUnavail));
    assert_eq!(stat(call(1, 7, 2, 3, sys(0), &[0, 0])), ReplyStat::Accepted(AcceptStat::GarbageArgs));
}

#[test]
fn wrong_rpc_version_and_bad_credentials_are_denied() {
    let (d, _) = dispatcher();
    let mut record = call(1, 7, 1, 1, sys(0), &[0, 0, 0, 1]).to_vec();
    record[11] = 3; // rpcvers
    assert_eq!(run(&d, Bytes::from(record)).unwrap().1, ReplyStat::Denied(RejectStat::RpcMismatch { low: 2, high: 2 }));
    let gss = OpaqueAuth { flavor: 6, body: Bytes::from_static(&[0, 0, 0, 0]) };
    assert_eq!(
        run(&d, call(1, 7, 1, 1, gss, &[0, 0, 0, 1])).unwrap().1,
        ReplyStat::Denied(RejectStat::AuthError(AuthStat::BadCred))
    );
    let broken = OpaqueAuth { flavor: AUTH_SYS, body: Bytes::from_static(&[0, 0, 0, 1]) };
    assert_eq!(
        run(&d, call(1, 7, 1, 1, broken, &[0, 0, 0, 1])).unwrap().1,
        ReplyStat::Denied(RejectStat::AuthError(AuthStat::BadCred))
    );
}

#[test]
fn garbage_and_replies_are_handled_without_panicking() {
    let (d, _) = dispatcher();
    assert!(run(&d, Bytes::from_static(&[1, 2, 3])).is_none(), "no xid: nothing to answer");
    assert!(run(&d, Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 1])).is_none(), "a reply is not a call");
    let (xid, stat, _) = run(&d, Bytes::from_static(&[0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 2])).unwrap();
    assert_eq!((xid, stat), (9, ReplyStat::Accepted(AcceptStat::GarbageArgs)));
}

#[test]
fn retransmissions_of_cached_procedures_are_replayed_not_executed() {
    let (d, echo) = dispatcher();
    let req = call(77, 7, 1, 1, sys(5), &[0, 0, 0, 3]);
    let first = bytes(d.handle(req.clone(), PEER.parse().unwrap(), LOCAL.parse().unwrap()).unwrap());
    let again = bytes(d.handle(req, PEER.parse().unwrap(), LOCAL.parse().unwrap()).unwrap());
    assert_eq!(first, again);
    assert_eq!(echo.executions.load(Ordering::SeqCst), 1);
    // Same xid, other arguments: a new call.
    run(&d, call(77, 7, 1, 1, sys(5), &[0, 0, 0, 4])).unwrap();
    assert_eq!(echo.executions.load(Ordering::SeqCst), 2);
}

#[test]
fn a_panicking_handler_leaves_no_stuck_cache_entry() {
    let (d, _) = dispatcher();
    let req = call(3, 7, 1, 2, sys(0), &[]);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        d.handle(req.clone(), PEER.parse().unwrap(), LOCAL.parse().unwrap())
    }));
    assert!(r.is_err());
    assert!(d.reply_cache().is_empty(), "entry abandoned on unwind");
}

#[test]
fn a_large_retransmitted_call_is_replayed_and_its_data_is_not_applied_twice() {
    // A WRITE's shape: a cached procedure with a large argument. The
    // retransmission (same xid, same bytes) is answered from the cache.
    let (d, echo) = dispatcher();
    let mut args = vec![0, 0, 0, 9];
    args.extend(std::iter::repeat_n(0xab, 1 << 20));
    let req = call(0x77, 7, 1, 1, sys(5), &args);
    let first = bytes(d.handle(req.clone(), PEER.parse().unwrap(), LOCAL.parse().unwrap()).unwrap());
    let again = bytes(d.handle(req, PEER.parse().unwrap(), LOCAL.parse().unwrap()).unwrap());
    assert_eq!(first, again);
    assert_eq!(echo.executions.load(Ordering::SeqCst), 1, "executed twice");
    // From another source port it is another client's call.
    let other: SocketAddr = "127.0.0.1:901".parse().unwrap();
    d.handle(call(0x77, 7, 1, 1, sys(5), &args), other, LOCAL.parse().unwrap()).unwrap();
    assert_eq!(echo.executions.load(Ordering::SeqCst), 2);
}

#[test]
fn the_reply_bound_is_known_from_the_call_header_and_holds() {
    let (d, _) = dispatcher();
    let echo = call(5, 7, 1, 1, sys(1000), &[0, 0, 0, 42]);
    assert_eq!(d.reply_bytes_max(&echo), REPLY_HEADER_BYTES_MAX + 8);
    let reply: usize =
        d.handle(echo, PEER.parse().unwrap(), LOCAL.parse().unwrap()).unwrap().iter().map(Segment::len).sum();
    assert!(reply <= REPLY_HEADER_BYTES_MAX + 8, "reply of {reply} bytes");
    // Refused before the program runs, or not a call: a header at most.
    for record in [
        call(1, 8, 1, 0, sys(0), &[]),
        call(1, 7, 3, 0, sys(0), &[]),
        Bytes::from_static(&[1, 2, 3]),
        Bytes::from_static(&[0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 2]),
    ] {
        assert_eq!(d.reply_bytes_max(&record), REPLY_HEADER_BYTES_MAX);
        if let Some(segments) = d.handle(record, PEER.parse().unwrap(), LOCAL.parse().unwrap()) {
            let len: usize = segments.iter().map(Segment::len).sum();
            assert!(len <= REPLY_HEADER_BYTES_MAX, "status reply of {len} bytes");
        }
    }
}

#[test]
fn a_procedure_that_answers_nothing_runs_and_sends_nothing_unless_refused() {
    let (d, echo) = dispatcher();
    let peer = PEER.parse().unwrap();
    let local = LOCAL.parse().unwrap();
    assert!(d.handle(call(1, 7, 1, 9, OpaqueAuth::default(), &5u32.to_be_bytes()), peer, local).is_none());
    assert_eq!(echo.executions.load(Ordering::SeqCst), 1);
    // Garbage is still answered, as are the missing procedures in the gap.
    let (_, stat, _) = run(&d, call(2, 7, 1, 9, OpaqueAuth::default(), &[])).expect("a reply");
    assert_eq!(stat, ReplyStat::Accepted(AcceptStat::GarbageArgs));
    for proc_ in 4..9 {
        let (_, stat, _) = run(&d, call(3, 7, 1, proc_, OpaqueAuth::default(), &[])).expect("a reply");
        assert_eq!(stat, ReplyStat::Accepted(AcceptStat::ProcUnavail));
    }
    assert_eq!(echo.portmap_versions(), vec![2]);
}

#[test]
fn a_reply_with_a_spliced_payload_is_never_cached() {
    let (d, echo) = dispatcher();
    let req = call(41, 7, 1, 10, sys(5), &[]);
    for round in 1..=2 {
        let reply = d.handle(req.clone(), PEER.parse().unwrap(), LOCAL.parse().unwrap()).unwrap();
        assert!(matches!(reply.iter().find(|s| s.as_bytes().is_none()), Some(Segment::Spliced(_))));
        assert_eq!(echo.executions.load(Ordering::SeqCst), round, "executed again, not replayed");
        assert!(d.reply_cache().is_empty(), "the entry was abandoned");
    }
}

#[test]
fn the_credential_reaches_the_program_as_the_call_header_gave_it() {
    let (d, _) = dispatcher();
    let sys =
        AuthSys { stamp: 3, machine_name: Bytes::from_static(b"node17"), uid: 1000, gid: 100, gids: vec![100, 10] };
    let (_, stat, mut dec) = run(&d, call(1, 7, 1, 11, sys.to_opaque(), &[])).unwrap();
    assert_eq!(stat, ReplyStat::Accepted(AcceptStat::Success));
    assert_eq!(dec.u32().unwrap(), AUTH_SYS);
    assert_eq!(&dec.opaque(255).unwrap()[..], b"node17");
    let ids: Vec<u32> = (0..5).map(|_| dec.u32().unwrap()).collect();
    assert_eq!(ids, [1000, 100, 2, 100, 10], "uid, gid, groups");
    dec.finish().unwrap();

    let (_, stat, mut dec) = run(&d, call(2, 7, 1, 11, OpaqueAuth::default(), &[])).unwrap();
    assert_eq!(stat, ReplyStat::Accepted(AcceptStat::Success));
    assert_eq!(dec.u32().unwrap(), AUTH_NONE);
    dec.finish().expect("no principal name, no ids");
}

#[test]
fn each_version_of_a_program_reaches_the_program_serving_it() {
    let (d, echo) = two_versions();
    let (_, stat, mut dec) = run(&d, call(1, 7, 1, 1, sys(1000), &[0, 0, 0, 42])).unwrap();
    assert_eq!(stat, ReplyStat::Accepted(AcceptStat::Success));
    assert_eq!((dec.u32().unwrap(), dec.u32().unwrap()), (42, 1000), "version 1 is Echo's");
    let v4 = call(2, 7, 4, 1, sys(1000), &[]);
    assert_eq!(d.reply_bytes_max(&v4), REPLY_HEADER_BYTES_MAX + 12, "version 4's bound is Other's");
    let (_, stat, mut dec) = run(&d, v4).unwrap();
    assert_eq!(stat, ReplyStat::Accepted(AcceptStat::Success));
    assert_eq!((dec.u32().unwrap(), dec.u32().unwrap()), (4, OTHER_MARK), "version 4 is Other's");
    dec.finish().unwrap();
    assert_eq!(echo.executions.load(Ordering::SeqCst), 1, "Echo ran version 1's call only");
}

#[test]
fn a_version_not_served_gets_the_lowest_and_highest_served() {
    let (d, _) = two_versions();
    for vers in [0, 3, 5, u32::MAX] {
        let (_, stat, dec) = run(&d, call(1, 7, vers, 1, sys(0), &[])).unwrap();
        assert_eq!(stat, ReplyStat::Accepted(AcceptStat::ProgMismatch { low: 1, high: 4 }), "version {vers}");
        dec.finish().unwrap();
    }
    let (_, stat, _) = run(&d, call(1, 8, 4, 1, sys(0), &[])).unwrap();
    assert_eq!(stat, ReplyStat::Accepted(AcceptStat::ProgUnavail));
}

#[test]
fn two_programs_may_not_serve_one_version() {
    let echo = || -> Arc<dyn RpcProgram> { Arc::new(Echo { executions: AtomicU32::new(0) }) };
    let other = |low: u32, high: u32| -> Arc<dyn RpcProgram> { Arc::new(Other { versions: (low, high) }) };
    let cache = || ReplyCache::new(16, 1 << 20);
    let err = Dispatcher::new(vec![echo(), other(2, 3)], cache()).err();
    assert_eq!(err, Some(VersionServedTwice { program: 7, version: 2 }));
    let err = Dispatcher::new(vec![other(3, 5), other(4, 4)], cache()).err();
    assert_eq!(err, Some(VersionServedTwice { program: 7, version: 4 }));
    assert!(Dispatcher::new(vec![echo(), other(3, 3), other(4, 9)], cache()).is_ok());
}

/// A backchannel that keeps what it is given.
#[derive(Default)]
struct Sent(std::sync::Mutex<Vec<Bytes>>);

impl crate::Backchannel for Sent {
    fn send_call(&self, call: Bytes) -> Result<(), crate::BackchannelError> {
        self.0.lock().unwrap().push(call);
        Ok(())
    }
}

#[test]
fn a_call_knows_the_connection_it_came_on() {
    let (d, _) = dispatcher();
    let (peer, local) = (PEER.parse().unwrap(), LOCAL.parse().unwrap());
    let connection_of = |segments: Option<ReplySegments>| {
        let all: Vec<u8> = bytes(segments.expect("a reply")).concat();
        let mut dec = Decoder::new(Bytes::from(all));
        assert_eq!(decode_reply_header(&mut dec).unwrap().1, ReplyStat::Accepted(AcceptStat::Success));
        let id = dec.bool().unwrap().then(|| dec.u64().unwrap());
        dec.finish().unwrap();
        id
    };
    let sent = Arc::new(Sent::default());
    let on = |id| {
        let connection = CallConnection::new(ConnectionId::new(id), sent.clone());
        d.handle_on_connection(call(1, 7, 1, 12, sys(0), &[]), peer, local, &connection)
    };
    assert_eq!(connection_of(on(41)), Some(41));
    assert_eq!(connection_of(on(u64::MAX)), Some(u64::MAX));
    assert_eq!(sent.0.lock().unwrap().len(), 2, "a call sent back on each");
    assert_eq!(connection_of(d.handle(call(2, 7, 1, 12, sys(0), &[]), peer, local)), None, "a datagram");
    assert_eq!(sent.0.lock().unwrap().len(), 2);
}

#[test]
fn replies_on_a_connection_reach_the_call_sent_back_there_and_nothing_else() {
    let router = Arc::new(crate::ReplyRouter::default());
    let (d, echo) = dispatcher();
    let d = d.with_reply_router(router.clone());
    let (peer, local) = (PEER.parse().unwrap(), LOCAL.parse().unwrap());
    let sent = Arc::new(Sent::default());
    let ours = CallConnection::new(ConnectionId::new(5), sent.clone());
    let theirs = CallConnection::new(ConnectionId::new(6), sent);
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let g = got.clone();
    let now = std::time::Instant::now();
    let waiter = Box::new(move |r: Bytes| g.lock().unwrap().push(r));
    let xid = router.expect(ours.id(), std::time::Duration::from_secs(30), now, waiter).unwrap();
    let reply = |xid: u32| {
        let mut enc = Encoder::new();
        crate::msg::encode_reply_header(&mut enc, xid, ReplyStat::Accepted(AcceptStat::Success));
        enc.u32(0x5a5a);
        enc.into_bytes()
    };
    // Another connection, a datagram, an xid nobody sent: nothing is
    // answered and the waiter hears nothing.
    assert!(d.handle_on_connection(reply(xid), peer, local, &theirs).is_none());
    assert!(d.handle(reply(xid), peer, local).is_none());
    assert!(d.handle_on_connection(reply(xid ^ 1), peer, local, &ours).is_none());
    assert!(got.lock().unwrap().is_empty());
    assert!(d.handle_on_connection(reply(xid), peer, local, &ours).is_none());
    assert_eq!(got.lock().unwrap().as_slice(), &[reply(xid)]);
    let stats = router.stats();
    assert_eq!((stats.delivered, stats.unknown, stats.waiting), (1, 3, 0));
    // The transport's read path: a reply is taken (routed: answered
    // already, so counted unknown), a call is left to run.
    assert!(d.take_reply(&reply(xid), &ours));
    assert!(!d.take_reply(&call(1, 7, 1, 12, sys(0), &[]), &ours));
    assert_eq!(router.stats().unknown, 4);
    assert_eq!(echo.executions.load(Ordering::SeqCst), 0, "no program ran");
}

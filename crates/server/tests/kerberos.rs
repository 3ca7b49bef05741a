//! RPCSEC_GSS (RFC 2203) with Kerberos V5 against a real KDC (`kerberos/lab.rs`):
//! contexts established through MIT's GSS-API on both sides (this file's
//! initiator is libgssapi's client side), calls at the three services
//! through keel-rpc's dispatcher, and what the server answers a replay, an
//! altered checksum, an unknown context, a malformed credential or token
//! and a flood of contexts.

mod kerberos {
    pub mod lab;
}

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use kerberos::lab::{REALM, lab};
use keel_rpc::gss::server::results_in_clear;
use keel_rpc::gss::wire::{GssCred, GssInitRes, GssProc, GssService, IntegData, MAXSEQ, RPCSEC_GSS};
use keel_rpc::gss::{Acceptor, ContextLimits, GssServer, IdentityCache, UserDatabase};
use keel_rpc::msg::{AUTH_NONE, AcceptStat, AuthStat, CallHeader, OpaqueAuth, RejectStat, ReplyStat};
use keel_rpc::{AcceptError, CallContext, Dispatcher, ReplyCache, RpcProgram};
use keel_store::Cred;
use keel_xdr::{Decoder, Encoder};
use libgssapi::context::{ClientCtx, CtxFlags, SecurityContext};
use libgssapi::credential::{Cred as GssCred_, CredUsage};
use libgssapi::name::Name;
use libgssapi::oid::{GSS_MECH_KRB5, GSS_NT_HOSTBASED_SERVICE, GSS_NT_KRB5_PRINCIPAL, OidSet};

const PROGRAM: u32 = 0x2000_4b47;
const NULL: u32 = 0;
/// Answers the caller's uid (u32::MAX for none), its flavor's pseudo
/// flavor number and the opaque it was given.
const ECHO: u32 = 1;
/// Counts its runs and answers the count: a non-idempotent procedure,
/// whose replies the reply cache keeps.
const COUNT: u32 = 2;

struct Echo {
    runs: AtomicU32,
}

impl RpcProgram for Echo {
    fn program(&self) -> u32 {
        PROGRAM
    }

    fn versions(&self) -> (u32, u32) {
        (1, 1)
    }

    fn is_cached(&self, _vers: u32, proc_: u32) -> bool {
        proc_ == COUNT
    }

    fn call(&self, ctx: &CallContext, args: &mut Decoder, reply: &mut Encoder) -> Result<(), AcceptError> {
        match ctx.proc_ {
            NULL => Ok(()),
            ECHO => {
                let data = args.opaque(1 << 20)?;
                args.finish()?;
                reply.u32(ctx.cred.ids().map_or(u32::MAX, |ids| ids.uid));
                reply.u32(ctx.cred.flavor().pseudo_flavor());
                reply.opaque(&data);
                Ok(())
            }
            COUNT => {
                reply.u32(self.runs.fetch_add(1, Ordering::SeqCst) + 1);
                Ok(())
            }
            _ => Err(AcceptError::ProcUnavail),
        }
    }
}

/// The system's users, as the tests need them: alice is 1001, bob 1002.
struct Users;

impl UserDatabase for Users {
    fn user(&self, name: &str) -> Option<Cred> {
        match name {
            "alice" => Some(Cred::new(1001, 1001, &[1001, 27])),
            "bob" => Some(Cred::new(1002, 1002, &[1002])),
            _ => None,
        }
    }
}

struct Server {
    dispatcher: Dispatcher,
    gss: Arc<GssServer>,
    echo: Arc<Echo>,
}

fn server(limits: ContextLimits) -> Server {
    lab();
    let acceptor = Acceptor::acquire(kerberos::lab::SERVICE).expect("the server's key from the lab's keytab");
    let gss = Arc::new(GssServer::new(acceptor, IdentityCache::new(Arc::new(Users)), limits));
    let echo = Arc::new(Echo { runs: AtomicU32::new(0) });
    let dispatcher = Dispatcher::new(vec![echo.clone()], ReplyCache::new(64, 1 << 20)).unwrap().with_gss(gss.clone());
    Server { dispatcher, gss, echo }
}

const PEER: &str = "127.0.0.1:801";
const LOCAL: &str = "127.0.0.1:2049";

fn peer() -> SocketAddr {
    PEER.parse().unwrap()
}

/// A reply as the client reads it.
#[derive(Debug)]
struct Reply {
    xid: u32,
    stat: ReplyStat,
    verf: OpaqueAuth,
    results: Bytes,
}

impl Server {
    /// One call record through the dispatcher; `None`: no reply.
    fn send(&self, record: Bytes, from: SocketAddr) -> Option<Reply> {
        let segments = self.dispatcher.handle(record, from, LOCAL.parse().unwrap())?;
        let bytes: Vec<u8> = segments.iter().flat_map(|s| s.as_bytes().expect("bytes").to_vec()).collect();
        Some(parse_reply(Bytes::from(bytes)))
    }
}

fn parse_reply(bytes: Bytes) -> Reply {
    let mut dec = Decoder::new(bytes);
    let xid = dec.u32().unwrap();
    assert_eq!(dec.u32().unwrap(), 1, "a reply");
    let (stat, verf) = match dec.u32().unwrap() {
        0 => {
            let verf = OpaqueAuth::decode(&mut dec).unwrap();
            let stat = match dec.u32().unwrap() {
                0 => AcceptStat::Success,
                3 => AcceptStat::ProcUnavail,
                4 => AcceptStat::GarbageArgs,
                5 => AcceptStat::SystemErr,
                s => panic!("accept_stat {s}"),
            };
            (ReplyStat::Accepted(stat), verf)
        }
        _ => {
            assert_eq!(dec.u32().unwrap(), 1, "AUTH_ERROR");
            let stat = match dec.u32().unwrap() {
                1 => AuthStat::BadCred,
                3 => AuthStat::BadVerf,
                5 => AuthStat::TooWeak,
                13 => AuthStat::GssCredProblem,
                14 => AuthStat::GssCtxProblem,
                s => panic!("auth_stat {s}"),
            };
            (ReplyStat::Denied(RejectStat::AuthError(stat)), OpaqueAuth::default())
        }
    };
    Reply { xid, stat, verf, results: dec.rest() }
}

fn call_header(xid: u32, proc_: u32, cred: OpaqueAuth, verf: OpaqueAuth) -> CallHeader {
    CallHeader { xid, rpc_version: 2, prog: PROGRAM, vers: 1, proc_, cred, verf }
}

static XIDS: AtomicU32 = AtomicU32::new(1);

fn next_xid() -> u32 {
    XIDS.fetch_add(1, Ordering::SeqCst)
}

/// An RPCSEC_GSS initiator for one principal: the context, its handle and
/// its next sequence number.
struct Client {
    ctx: ClientCtx,
    handle: Bytes,
    seq: u32,
}

fn gss_name(principal: &str) -> Name {
    Name::new(format!("{principal}@{REALM}").as_bytes(), Some(GSS_NT_KRB5_PRINCIPAL)).unwrap()
}

/// A client context for `principal` (its key from the lab's client keytab)
/// to the lab's nfs/localhost, before any token went.
fn client_ctx(principal: &str) -> ClientCtx {
    let mut mechs = OidSet::new();
    mechs.add(GSS_MECH_KRB5).unwrap();
    let cred = GssCred_::acquire(Some(&gss_name(principal)), None, CredUsage::Initiate, Some(&mechs))
        .unwrap_or_else(|e| panic!("{principal}'s initial credentials from the lab's keytab: {e}"));
    let target = Name::new(b"nfs@localhost", Some(GSS_NT_HOSTBASED_SERVICE)).unwrap();
    let flags = CtxFlags::GSS_C_MUTUAL_FLAG | CtxFlags::GSS_C_INTEG_FLAG | CtxFlags::GSS_C_CONF_FLAG;
    ClientCtx::new(Some(cred), target, flags, Some(GSS_MECH_KRB5))
}

fn init_record(xid: u32, proc_: GssProc, handle: Bytes, token: &[u8]) -> Bytes {
    let cred = GssCred { proc_, seq_num: 0, service: GssService::None, handle };
    let mut enc = Encoder::new();
    call_header(xid, NULL, OpaqueAuth { flavor: RPCSEC_GSS, body: cred.encode() }, OpaqueAuth::default())
        .encode(&mut enc);
    enc.opaque(token);
    enc.into_bytes()
}

impl Client {
    /// Establishes a context with `server` from `from` (RPCSEC_GSS_INIT on
    /// NULL), checking the reply's verifier (the MIC of the window).
    fn establish(server: &Server, principal: &str, from: SocketAddr) -> Client {
        let mut ctx = client_ctx(principal);
        let token = ctx.step(None, None).unwrap().expect("an AP-REQ");
        let reply = server.send(init_record(next_xid(), GssProc::Init, Bytes::new(), &token), from).expect("a reply");
        assert_eq!(reply.stat, ReplyStat::Accepted(AcceptStat::Success));
        let res = GssInitRes::decode(&mut Decoder::new(reply.results)).unwrap();
        assert_eq!((res.gss_major, res.gss_minor), (0, 0), "context established");
        if !res.gss_token.is_empty() {
            ctx.step(Some(&res.gss_token), None).unwrap();
        }
        assert!(ctx.is_complete(), "mutual authentication done");
        assert_eq!(reply.verf.flavor, RPCSEC_GSS);
        ctx.verify_mic(&res.seq_window.to_be_bytes(), &reply.verf.body).expect("the window's MIC verifies");
        Client { ctx, handle: res.handle, seq: 1 }
    }

    /// A data call record at `seq` (not taken from the client's count).
    fn record_at(&mut self, xid: u32, seq: u32, proc_: u32, service: GssService, args: &[u8]) -> Bytes {
        let cred = GssCred { proc_: GssProc::Data, seq_num: seq, service, handle: self.handle.clone() };
        self.record_with(xid, proc_, &cred, args)
    }

    fn record_with(&mut self, xid: u32, proc_: u32, cred: &GssCred, args: &[u8]) -> Bytes {
        let mut head = Encoder::new();
        call_header(xid, proc_, OpaqueAuth { flavor: RPCSEC_GSS, body: cred.encode() }, OpaqueAuth::default())
            .encode(&mut head);
        let head = head.into_bytes();
        // The verifier checksums the header through the credential: all
        // of it but the (empty) verifier's 8 bytes.
        let through_cred = &head[..head.len() - 8];
        let mic = self.ctx.get_mic(through_cred).unwrap();
        let mut enc = Encoder::new();
        enc.raw(through_cred);
        OpaqueAuth { flavor: RPCSEC_GSS, body: Bytes::copy_from_slice(&mic) }.encode(&mut enc);
        let mut body = cred.seq_num.to_be_bytes().to_vec();
        body.extend_from_slice(args);
        match cred.service {
            GssService::None => enc.raw(args),
            GssService::Integrity => {
                let checksum = Bytes::copy_from_slice(&self.ctx.get_mic(&body).unwrap());
                IntegData { databody: Bytes::from(body), checksum }.encode(&mut enc);
            }
            GssService::Privacy => enc.opaque(&self.ctx.wrap(true, &body).unwrap()),
        }
        enc.into_bytes()
    }

    fn record(&mut self, xid: u32, proc_: u32, service: GssService, args: &[u8]) -> Bytes {
        let seq = self.seq;
        self.seq += 1;
        self.record_at(xid, seq, proc_, service, args)
    }

    /// The results of a successful reply to the call at `seq`, checked
    /// and unsealed as `service` says.
    fn results(&mut self, reply: Reply, seq: u32, service: GssService) -> Bytes {
        assert_eq!(reply.stat, ReplyStat::Accepted(AcceptStat::Success), "{reply:?}");
        assert_eq!(reply.verf.flavor, RPCSEC_GSS);
        self.ctx.verify_mic(&seq.to_be_bytes(), &reply.verf.body).expect("the reply's verifier is the MIC of its seq");
        let ctx = std::cell::RefCell::new(&mut self.ctx);
        results_in_clear(
            service,
            reply.results,
            seq,
            |token| ctx.borrow_mut().unwrap(token).ok().map(|b| b.to_vec()),
            |body, mic| ctx.borrow_mut().verify_mic(body, mic).is_ok(),
        )
        .expect("the results unseal")
    }

    /// ECHO of `data` at `service`: the uid, the flavor and the data.
    fn echo(&mut self, server: &Server, service: GssService, data: &[u8]) -> (u32, u32, Bytes) {
        let mut args = Encoder::new();
        args.opaque(data);
        let seq = self.seq;
        let record = self.record(next_xid(), ECHO, service, &args.into_bytes());
        let reply = server.send(record, peer()).expect("a reply");
        let mut dec = Decoder::new(self.results(reply, seq, service));
        (dec.u32().unwrap(), dec.u32().unwrap(), dec.opaque(1 << 20).unwrap())
    }
}

fn denied(reply: Option<Reply>) -> AuthStat {
    match reply.expect("a reply").stat {
        ReplyStat::Denied(RejectStat::AuthError(stat)) => stat,
        other => panic!("not denied: {other:?}"),
    }
}

const SERVICES: [(GssService, u32); 3] =
    [(GssService::None, 390003), (GssService::Integrity, 390004), (GssService::Privacy, 390005)];

#[test]
fn krb5_krb5i_and_krb5p_calls_reach_the_program_as_the_mapped_user() {
    let server = server(ContextLimits::default());
    let mut alice = Client::establish(&server, "alice", peer());
    // NULL at each service, then ECHO with data checked.
    for (service, _) in SERVICES {
        let seq = alice.seq;
        let record = alice.record(next_xid(), NULL, service, &[]);
        let reply = server.send(record, peer()).unwrap();
        assert!(alice.results(reply, seq, service).is_empty());
    }
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    for (service, flavor) in SERVICES {
        let (uid, got_flavor, echoed) = alice.echo(&server, service, &data);
        assert_eq!((uid, got_flavor), (1001, flavor), "alice@{REALM} is local user alice, at {service:?}");
        assert!(echoed == data, "the data comes back intact at {service:?}");
    }
    let mut bob = Client::establish(&server, "bob", peer());
    assert_eq!(bob.echo(&server, GssService::Integrity, b"x").0, 1002);
    assert_eq!(server.gss.contexts(), 2);
}

#[test]
fn machine_principals_are_anonymous() {
    let server = server(ContextLimits::default());
    let mut machine = Client::establish(&server, "host/client1.keel.test", peer());
    assert_eq!(machine.echo(&server, GssService::None, b"x").0, u32::MAX, "no local identity: the export's anonymous");
}

#[test]
fn krb5p_bytes_on_the_wire_hold_no_plaintext() {
    let server = server(ContextLimits::default());
    let mut alice = Client::establish(&server, "alice", peer());
    let secret = b"the plaintext nobody on the wire may read".repeat(10);
    let mut args = Encoder::new();
    args.opaque(&secret);
    let args = args.into_bytes();
    let contains = |hay: &[u8]| hay.windows(24).any(|w| secret.windows(24).any(|s| s == w));

    let seq = alice.seq;
    let call = alice.record(next_xid(), ECHO, GssService::Privacy, &args);
    assert!(!contains(&call), "the call is encrypted");
    let segments = server.dispatcher.handle(call, peer(), LOCAL.parse().unwrap()).unwrap();
    let wire: Vec<u8> = segments.iter().flat_map(|s| s.as_bytes().unwrap().to_vec()).collect();
    assert!(!contains(&wire), "the reply is encrypted");
    let mut dec = Decoder::new(alice.results(parse_reply(Bytes::from(wire)), seq, GssService::Privacy));
    dec.u32().unwrap();
    dec.u32().unwrap();
    assert_eq!(&dec.opaque(1 << 20).unwrap()[..], &secret[..], "and the client reads it");

    // The same call under integrity carries the plaintext: the check above
    // can fail.
    let call = alice.record(next_xid(), ECHO, GssService::Integrity, &args);
    assert!(contains(&call));
}

#[test]
fn an_altered_krb5i_body_is_garbage_args_and_an_altered_header_a_credential_problem() {
    let server = server(ContextLimits::default());
    let mut alice = Client::establish(&server, "alice", peer());
    let mut args = Encoder::new();
    args.opaque(b"pay 10 to bob");
    let args = args.into_bytes();
    let record = alice.record(next_xid(), ECHO, GssService::Integrity, &args);
    // The last byte of the arguments sits before the checksum's length
    // and body: find "bob" and make it "eve".
    let at = record.windows(3).position(|w| w == b"bob").unwrap();
    let mut altered = record.to_vec();
    altered[at..at + 3].copy_from_slice(b"eve");
    let reply = server.send(Bytes::from(altered), peer()).unwrap();
    assert_eq!(reply.stat, ReplyStat::Accepted(AcceptStat::GarbageArgs));

    // The procedure number in the header, changed after it was signed.
    let mut altered = alice.record(next_xid(), ECHO, GssService::Integrity, &args).to_vec();
    altered[23] = COUNT as u8;
    assert_eq!(denied(server.send(Bytes::from(altered), peer())), AuthStat::GssCredProblem);
    assert_eq!(server.echo.runs.load(Ordering::SeqCst), 0, "COUNT never ran");

    // Unaltered, the context still works.
    assert_eq!(alice.echo(&server, GssService::Integrity, b"ok").2, Bytes::from_static(b"ok"));
}

#[test]
fn replayed_and_too_old_sequence_numbers_are_dropped() {
    let server = server(ContextLimits::default());
    let mut alice = Client::establish(&server, "alice", peer());
    let record = alice.record_at(next_xid(), 500, NULL, GssService::None, &[]);
    assert!(server.send(record.clone(), peer()).is_some());
    assert!(server.send(record, peer()).is_none(), "the same sequence number again: dropped");
    let inside = alice.record_at(next_xid(), 500 - 127, NULL, GssService::None, &[]);
    assert!(server.send(inside, peer()).is_some(), "out of order within the window: served");
    let below = alice.record_at(next_xid(), 500 - 128, NULL, GssService::None, &[]);
    assert!(server.send(below, peer()).is_none(), "below the window: dropped");
    let exhausted = alice.record_at(next_xid(), MAXSEQ, NULL, GssService::None, &[]);
    assert_eq!(denied(server.send(exhausted, peer())), AuthStat::GssCtxProblem);
}

#[test]
fn unknown_and_destroyed_contexts_are_credential_problems() {
    let server = server(ContextLimits::default());
    let mut alice = Client::establish(&server, "alice", peer());
    let real = alice.handle.clone();
    alice.handle = Bytes::from_static(&[7; 16]);
    let record = alice.record(next_xid(), NULL, GssService::None, &[]);
    assert_eq!(denied(server.send(record, peer())), AuthStat::GssCredProblem);
    alice.handle = real;
    let seq = alice.seq;
    alice.seq += 1;
    let cred = GssCred { proc_: GssProc::Destroy, seq_num: seq, service: GssService::None, handle: alice.handle.clone() };
    let destroy = alice.record_with(next_xid(), NULL, &cred, &[]);
    let reply = server.send(destroy, peer()).unwrap();
    assert_eq!(reply.stat, ReplyStat::Accepted(AcceptStat::Success));
    assert_eq!(server.gss.contexts(), 0);
    let record = alice.record(next_xid(), NULL, GssService::None, &[]);
    assert_eq!(denied(server.send(record, peer())), AuthStat::GssCredProblem, "destroyed");
}

#[test]
fn malformed_credentials_and_tokens_are_refused() {
    let server = server(ContextLimits::default());
    // A credential of version 2.
    let mut body = GssCred { proc_: GssProc::Init, seq_num: 0, service: GssService::None, handle: Bytes::new() }
        .encode()
        .to_vec();
    body[3] = 2;
    let mut enc = Encoder::new();
    call_header(next_xid(), NULL, OpaqueAuth { flavor: RPCSEC_GSS, body: Bytes::from(body) }, OpaqueAuth::default())
        .encode(&mut enc);
    enc.opaque(b"token");
    assert_eq!(denied(server.send(enc.into_bytes(), peer())), AuthStat::BadCred);
    // INIT on another procedure than NULL.
    let mut record = init_record(next_xid(), GssProc::Init, Bytes::new(), b"token").to_vec();
    record[23] = ECHO as u8;
    assert_eq!(denied(server.send(Bytes::from(record), peer())), AuthStat::BadCred);
    // Arguments that are not an rpc_gss_init_arg.
    let mut enc = Encoder::new();
    let cred = GssCred { proc_: GssProc::Init, seq_num: 0, service: GssService::None, handle: Bytes::new() };
    call_header(next_xid(), NULL, OpaqueAuth { flavor: RPCSEC_GSS, body: cred.encode() }, OpaqueAuth::default())
        .encode(&mut enc);
    enc.u32(1 << 30);
    let reply = server.send(enc.into_bytes(), peer()).unwrap();
    assert_eq!(reply.stat, ReplyStat::Accepted(AcceptStat::GarbageArgs));
    // A token GSS-API refuses: its status, and no context.
    let reply = server.send(init_record(next_xid(), GssProc::Init, Bytes::new(), b"not a kerberos token"), peer());
    let reply = reply.unwrap();
    assert_eq!(reply.stat, ReplyStat::Accepted(AcceptStat::Success));
    assert_eq!(reply.verf.flavor, AUTH_NONE);
    let res = GssInitRes::decode(&mut Decoder::new(reply.results)).unwrap();
    assert_ne!(res.gss_major, 0, "GSS-API's error");
    assert!(res.handle.is_empty());
    assert_eq!(server.gss.contexts(), 0, "no context kept for a refused token");
}

#[test]
fn a_context_flood_from_one_address_is_bounded() {
    let limits = ContextLimits { total_max: 8, per_client_max: 3 };
    let server = server(limits);
    let other: SocketAddr = "127.0.0.2:802".parse().unwrap();
    let mut bystander = Client::establish(&server, "bob", other);
    let mut first = Client::establish(&server, "alice", peer());
    for _ in 0..10 {
        Client::establish(&server, "alice", peer());
    }
    assert_eq!(server.gss.contexts(), 1 + 3, "the flooding address holds its bound");
    let record = first.record(next_xid(), NULL, GssService::None, &[]);
    assert_eq!(denied(server.send(record, peer())), AuthStat::GssCredProblem, "its oldest context was evicted");
    let seq = bystander.seq;
    let record = bystander.record(next_xid(), NULL, GssService::None, &[]);
    let reply = server.send(record, other).unwrap();
    bystander.results(reply, seq, GssService::None);
    // Half-made contexts count too: INITs never continued.
    for _ in 0..20 {
        let token = client_ctx("alice").step(None, None).unwrap().unwrap();
        server.send(init_record(next_xid(), GssProc::Init, Bytes::new(), &token), "127.0.0.3:803".parse().unwrap());
    }
    assert!(server.gss.contexts() <= limits.total_max);
}

#[test]
fn the_reply_cache_seals_a_replay_for_the_retransmission_and_never_crosses_principals() {
    let server = server(ContextLimits::default());
    let mut alice = Client::establish(&server, "alice", peer());
    let mut bob = Client::establish(&server, "bob", peer());
    for service in [GssService::Integrity, GssService::Privacy, GssService::None] {
        let runs = server.echo.runs.load(Ordering::SeqCst);
        let xid = next_xid();
        let seq = alice.seq;
        let first = alice.record(xid, COUNT, service, &[]);
        let reply = server.send(first, peer()).unwrap();
        assert_eq!(&alice.results(reply, seq, service)[..], &(runs + 1).to_be_bytes());
        // The retransmission: same xid, a new sequence number (RFC 2203
        // section 5.3.3.1). Answered from the cache, sealed for its number.
        let seq = alice.seq;
        let again = alice.record(xid, COUNT, service, &[]);
        let reply = server.send(again, peer()).unwrap();
        assert_eq!(&alice.results(reply, seq, service)[..], &(runs + 1).to_be_bytes(), "replayed at {service:?}");
        assert_eq!(server.echo.runs.load(Ordering::SeqCst), runs + 1, "not run again");
        // Bob, from the same address with the same xid and arguments:
        // his own call, not alice's reply.
        let seq = bob.seq;
        let bobs = bob.record(xid, COUNT, service, &[]);
        let reply = server.send(bobs, peer()).unwrap();
        assert_eq!(&bob.results(reply, seq, service)[..], &(runs + 2).to_be_bytes());
    }
}

#[test]
fn without_a_key_rpcsec_gss_is_a_flavor_not_served() {
    lab();
    let echo = Arc::new(Echo { runs: AtomicU32::new(0) });
    let plain = Server {
        dispatcher: Dispatcher::new(vec![echo.clone()], ReplyCache::new(4, 1 << 20)).unwrap(),
        gss: server(ContextLimits::default()).gss,
        echo,
    };
    let token = client_ctx("alice").step(None, None).unwrap().unwrap();
    let reply = plain.send(init_record(next_xid(), GssProc::Init, Bytes::new(), &token), peer());
    assert_eq!(denied(reply), AuthStat::BadCred);
}

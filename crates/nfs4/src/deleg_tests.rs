//! Delegations and the backchannel, driven with whole COMPOUND calls on
//! connections whose backchannel is a fake that keeps the calls sent
//! back; the tests answer them (or not) as a client would.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_exports::delegations::GateAccess;
use keel_exports::{Access, ClientOptions, ClientRule, ExportTable, HostMatch, PseudoKey, Squash};
use keel_nfs4_proto::*;
use keel_nfs4_state::{BootEpoch, MemoryRecords, StateConfig};
use keel_rpc::msg::{AcceptStat, CallHeader, ReplyStat, encode_reply_header};
use keel_rpc::{
    Backchannel, BackchannelError, CallConnection, CallContext, ConnectionId, Credential, ReplyRouter, RpcProgram,
    TabledProgram,
};
use keel_store::sim::SimStore;
use keel_xdr::{Decode, Decoder, Encode, Encoder, Opaque};

use crate::{MinorVersions, Nfs4Config, Nfs4Program};

type Program = Nfs4Program<SimStore>;

const LEASE: Duration = Duration::from_secs(90);

/// A backchannel that keeps what is sent on it.
#[derive(Default)]
struct FakeBackchannel(Mutex<Vec<Bytes>>);

impl Backchannel for FakeBackchannel {
    fn send_call(&self, call: Bytes) -> Result<(), BackchannelError> {
        self.0.lock().unwrap().push(call);
        Ok(())
    }
}

struct World {
    p: Arc<Program>,
    router: Arc<ReplyRouter>,
}

/// One export, /srv/a, read-write for 10/8; read delegations on unless
/// `delegations` is false.
fn world(delegations: bool) -> World {
    world_with(delegations, false)
}

/// [`world`], with write delegations too if `write`.
fn world_with(delegations: bool, write: bool) -> World {
    let store = Arc::new(SimStore::with_exports(7, &[(1, "/srv/a")]));
    let rule = ClientRule {
        host: HostMatch::Net { addr: "10.0.0.0".parse().unwrap(), prefix_len: 8 },
        options: ClientOptions { access: Access::ReadWrite, squash: Squash::None, secure: false, ..Default::default() },
    };
    let exports = Arc::new(ExportTable::new(store, vec![(1, vec![rule])]));
    let config = Nfs4Config {
        minors: MinorVersions { v41: true, v42: true },
        state: StateConfig { lease: LEASE, write_delegations: write, ..StateConfig::default() },
        epoch: BootEpoch::new(5).unwrap(),
        session_key: [3; 16],
        pseudo_key: PseudoKey::from_bytes([9; 16]),
        server_owner: Bytes::from_static(b"test-server"),
    };
    let router = Arc::new(ReplyRouter::default());
    let p = Nfs4Program::new(exports, config, Box::new(MemoryRecords::new()))
        .unwrap()
        .with_reply_router(router.clone())
        .with_read_delegations(delegations);
    let p = Arc::new(p);
    // What start_callbacks does, without its thread: the tests pump.
    crate::deleg::install_gate(&p);
    World { p, router }
}

fn root() -> Credential {
    Credential::sys(Bytes::from_static(b"client"), 0, 0, &[])
}

/// A client with a session whose backchannel is its own connection.
struct Client {
    p: Arc<Program>,
    router: Arc<ReplyRouter>,
    peer: SocketAddr,
    conn: CallConnection,
    sent: Arc<FakeBackchannel>,
    session: Sessionid4,
    seq: u32,
    cb_seq: u32,
}

impl Client {
    fn new(w: &World, peer: &str, conn: u64, owner: &str) -> Client {
        let sent = Arc::new(FakeBackchannel::default());
        let mut c = Client {
            p: w.p.clone(),
            router: w.router.clone(),
            peer: peer.parse().unwrap(),
            conn: CallConnection::new(ConnectionId::new(conn), sent.clone()),
            sent,
            session: [0; 16],
            seq: 0,
            cb_seq: 0,
        };
        let eid = ExchangeId4Args {
            eia_clientowner: ClientOwner4 {
                co_verifier: [1; 8],
                co_ownerid: Opaque(Bytes::copy_from_slice(owner.as_bytes())),
            },
            eia_flags: 0,
            eia_state_protect: StateProtect4A::Sp4None,
            eia_client_impl_id: None,
        };
        let res = c.call(vec![NfsArgop4::ExchangeId(eid)]);
        let NfsResop4::ExchangeId(Nfs4Result::Ok(eid)) = &res.resarray[0] else { panic!("EXCHANGE_ID: {res:?}") };
        let cs = CreateSession4Args {
            csa_clientid: eid.eir_clientid,
            csa_sequence: eid.eir_sequenceid,
            csa_flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            csa_fore_chan_attrs: ChannelAttrs4 {
                ca_maxrequestsize: 1 << 20,
                ca_maxresponsesize: 1 << 20,
                ca_maxresponsesize_cached: 4096,
                ca_maxoperations: 16,
                ca_maxrequests: 4,
                ..ChannelAttrs4::default()
            },
            csa_back_chan_attrs: ChannelAttrs4 {
                ca_maxrequestsize: 4096,
                ca_maxresponsesize: 4096,
                ca_maxoperations: 2,
                ca_maxrequests: 1,
                ..ChannelAttrs4::default()
            },
            csa_cb_program: 0x4000_0000,
            csa_sec_parms: vec![CallbackSecParms4::AuthNone].into(),
        };
        let res = c.call(vec![NfsArgop4::CreateSession(cs)]);
        let NfsResop4::CreateSession(Nfs4Result::Ok(cs)) = &res.resarray[0] else { panic!("CREATE_SESSION: {res:?}") };
        c.session = cs.csr_sessionid;
        // As the Linux client, before anything else.
        c.ok(vec![NfsArgop4::ReclaimComplete(ReclaimComplete4Args { rca_one_fs: false })]);
        c
    }

    fn call(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        let cred = root();
        let ctx = CallContext {
            xid: 1,
            vers: 4,
            proc_: NFSPROC4_COMPOUND,
            cred: &cred,
            peer: self.peer,
            local: "127.0.0.1:2049".parse().unwrap(),
            connection: Some(&self.conn),
            report: Default::default(),
        };
        let mut enc = Encoder::new();
        Compound4Args { tag: Tag4::default(), minorversion: 2, argarray: ops }.encode(&mut enc);
        let mut reply = Encoder::new();
        self.p.run(&ctx, &mut Decoder::new(enc.into_bytes()), &mut reply).expect("answered");
        Compound4Res::decode(&mut Decoder::new(reply.into_bytes())).expect("the reply decodes")
    }

    /// SEQUENCE, then `ops`; the SEQUENCE's result and the status.
    fn run(&mut self, ops: Vec<NfsArgop4>) -> (Sequence4ResOk, Compound4Res) {
        self.seq += 1;
        let mut all = vec![NfsArgop4::Sequence(Sequence4Args {
            sa_sessionid: self.session,
            sa_sequenceid: self.seq,
            sa_slotid: 0,
            sa_highest_slotid: 0,
            sa_cachethis: false,
        })];
        all.extend(ops);
        let res = self.call(all);
        let NfsResop4::Sequence(Nfs4Result::Ok(seq)) = &res.resarray[0] else { panic!("SEQUENCE: {res:?}") };
        (seq.clone(), res)
    }

    fn ok(&mut self, ops: Vec<NfsArgop4>) -> Vec<NfsResop4> {
        let (_, res) = self.run(ops);
        assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
        res.resarray
    }

    fn flags(&mut self) -> u32 {
        self.run(vec![]).0.sr_status_flags
    }

    /// The calls sent back to this client since the last look: their
    /// headers and, for CB_COMPOUND, their arguments.
    fn callbacks(&self) -> Vec<(CallHeader, Option<CbCompound4Args>)> {
        let calls = std::mem::take(&mut *self.sent.0.lock().unwrap());
        calls
            .into_iter()
            .map(|call| {
                let mut dec = Decoder::new(call);
                let header = CallHeader::decode(&mut dec).expect("a call header");
                assert_eq!((header.prog, header.vers), (0x4000_0000, NFS_CB), "the client's callback program");
                let args = (header.proc_ == CB_COMPOUND).then(|| CbCompound4Args::decode(&mut dec).unwrap());
                (header, args)
            })
            .collect()
    }

    /// Replies to a callback as the client would: CB_NULL, or CB_SEQUENCE
    /// and `recall` for a CB_RECALL. The reply is routed, as the transport
    /// does before it reads the client's next call; nothing else runs.
    fn reply(&mut self, header: &CallHeader, args: Option<&CbCompound4Args>, recall: Nfsstat4) {
        self.reply_with(header, args, recall, NfsCbResop4::CbRecall(recall));
    }

    /// [`Client::reply`], with `result` as the second operation's result
    /// and `status` the CB_COMPOUND's.
    fn reply_with(
        &mut self,
        header: &CallHeader,
        args: Option<&CbCompound4Args>,
        status: Nfsstat4,
        result: NfsCbResop4,
    ) {
        let mut enc = Encoder::new();
        encode_reply_header(&mut enc, header.xid, ReplyStat::Accepted(AcceptStat::Success));
        if let Some(args) = args {
            let Some(NfsCbArgop4::CbSequence(seq)) = args.argarray.first() else { panic!("CB_SEQUENCE first") };
            assert_eq!((seq.csa_sessionid, seq.csa_slotid), (self.session, 0));
            assert_eq!(seq.csa_sequenceid, self.cb_seq + 1, "the backchannel slot's next sequence");
            self.cb_seq += 1;
            let resok = CbSequence4ResOk {
                csr_sessionid: self.session,
                csr_sequenceid: seq.csa_sequenceid,
                ..CbSequence4ResOk::default()
            };
            let res = CbCompound4Res {
                status,
                tag: Tag4::default(),
                resarray: vec![NfsCbResop4::CbSequence(Nfs4Result::Ok(resok)), result],
            };
            res.encode(&mut enc);
        }
        let routed = self.router.route(Some(self.conn.id()), enc.into_bytes(), Instant::now());
        assert_eq!(routed, keel_rpc::Routed::Delivered);
    }

    /// Answers a callback, and the server takes the reply (the callback
    /// thread's pump).
    fn answer(&mut self, header: &CallHeader, args: Option<&CbCompound4Args>, recall: Nfsstat4) {
        self.reply(header, args, recall);
        self.p.callbacks.pump(&self.p, Instant::now());
    }

    /// Answers the CB_NULL probe its session started with.
    fn answer_probe(&mut self) {
        let calls = self.callbacks();
        assert_eq!(calls.len(), 1, "one probe");
        assert_eq!(calls[0].0.proc_, CB_NULL);
        self.answer(&calls[0].0, None, Nfsstat4::Ok);
    }
}

fn dir() -> Vec<NfsArgop4> {
    let lookup = |n: &str| NfsArgop4::Lookup(Lookup4Args { objname: n.into() });
    vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a")]
}

fn open(name: &str, owner: &str, access: u32) -> NfsArgop4 {
    let mode = Attrs4 { mode: Some(0o644), ..Attrs4::default() };
    NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: access,
        share_deny: 0,
        owner: OpenOwner4 { clientid: 0, owner: Opaque(Bytes::copy_from_slice(owner.as_bytes())) },
        openhow: Openflag4::Open4Create(Createhow4::Unchecked4(mode.to_fattr4(&Attrs4::known()))),
        claim: OpenClaim4::ClaimNull(name.into()),
    })
}

/// OPEN `name` for `access` in /srv/a: the OPEN's result and the file's
/// handle.
fn open_in_dir(c: &mut Client, name: &str, owner: &str, access: u32) -> (Open4ResOk, Bytes) {
    let mut ops = dir();
    ops.extend([open(name, owner, access), NfsArgop4::Getfh(())]);
    let res = c.ok(ops);
    let NfsResop4::Open(Nfs4Result::Ok(o)) = &res[4] else { panic!("OPEN: {res:?}") };
    let NfsResop4::Getfh(Nfs4Result::Ok(fh)) = &res[5] else { panic!("GETFH: {res:?}") };
    (o.clone(), fh.object.0.clone())
}

fn read_delegation(o: &Open4ResOk) -> Option<Stateid4> {
    match &o.delegation {
        OpenDelegation4::OpenDelegateRead(d) => Some(d.stateid),
        _ => None,
    }
}

fn putfh(fh: &Bytes) -> NfsArgop4 {
    NfsArgop4::Putfh(Putfh4Args { object: NfsFh4(fh.clone()) })
}

fn delegreturn(stateid: Stateid4) -> NfsArgop4 {
    NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid: stateid })
}

/// Client A holding a read delegation on /srv/a/f; B with a session.
fn a_delegated() -> (World, Client, Client, Bytes, Stateid4) {
    let w = world(true);
    let mut a = Client::new(&w, "10.0.0.5:700", 1, "a");
    let mut b = Client::new(&w, "10.0.0.6:701", 2, "b");
    a.answer_probe();
    b.answer_probe();
    let (o, fh) = open_in_dir(&mut a, "f", "oa", OPEN4_SHARE_ACCESS_READ);
    let deleg = read_delegation(&o).expect("a read delegation");
    (w, a, b, fh, deleg)
}

#[test]
fn a_read_delegation_is_offered_only_once_the_backchannel_answered_its_probe() {
    let w = world(true);
    let mut a = Client::new(&w, "10.0.0.5:700", 1, "a");
    // The probe is out, not answered: the path is not known to work.
    let (o, _) = open_in_dir(&mut a, "f", "o1", OPEN4_SHARE_ACCESS_READ);
    assert_eq!(o.delegation, OpenDelegation4::OpenDelegateNone);
    a.answer_probe();
    let (o, _) = open_in_dir(&mut a, "g", "o2", OPEN4_SHARE_ACCESS_READ);
    assert!(read_delegation(&o).is_some(), "{:?}", o.delegation);
    // Never for writing (no write delegations).
    let (o, _) = open_in_dir(&mut a, "h", "o3", OPEN4_SHARE_ACCESS_BOTH);
    assert!(read_delegation(&o).is_none());
    // Not offered when the server is not told to.
    let w = world(false);
    let mut a = Client::new(&w, "10.0.0.5:700", 1, "a");
    a.answer_probe();
    let (o, _) = open_in_dir(&mut a, "f", "o1", OPEN4_SHARE_ACCESS_READ);
    assert_eq!(o.delegation, OpenDelegation4::OpenDelegateNone);
}

#[test]
fn an_open_right_after_the_probe_s_reply_gets_a_read_delegation_before_the_callback_thread_runs() {
    let w = world(true);
    let mut a = Client::new(&w, "10.0.0.5:700", 1, "a");
    let calls = a.callbacks();
    assert_eq!(calls[0].0.proc_, CB_NULL, "the probe");
    // The client answers the probe and sends its OPEN at once: the
    // server's callback thread has not run (these tests have none), the
    // OPEN is the first to look at the reply.
    a.reply(&calls[0].0, None, Nfsstat4::Ok);
    let (o, _) = open_in_dir(&mut a, "f", "o1", OPEN4_SHARE_ACCESS_READ);
    assert!(read_delegation(&o).is_some(), "{:?}", o.delegation);
    assert_eq!(w.p.callback_counters().replies, 1);
    assert_eq!(a.flags() & (SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_BACKCHANNEL_FAULT), 0);
}

#[test]
fn a_conflicting_open_waits_for_the_recall_and_goes_on_once_the_delegation_is_returned() {
    let (_w, mut a, mut b, fh, deleg) = a_delegated();
    let mut ops = dir();
    ops.push(open("f", "ob", OPEN4_SHARE_ACCESS_WRITE));
    let (_, res) = b.run(ops.clone());
    assert_eq!(res.status, Nfsstat4::Delay);
    // CB_SEQUENCE and CB_RECALL of that delegation, on A's connection.
    let calls = a.callbacks();
    assert_eq!(calls.len(), 1, "one recall");
    let (header, args) = (&calls[0].0, calls[0].1.as_ref().expect("a CB_COMPOUND"));
    let NfsCbArgop4::CbRecall(recall) = &args.argarray[1] else { panic!("CB_RECALL: {args:?}") };
    assert_eq!((recall.stateid, &recall.fh.0), (deleg, &fh));
    assert!(b.callbacks().is_empty(), "nothing on B's connection");
    a.answer(header, Some(args), Nfsstat4::Ok);
    // Until it is returned, B waits; a retried OPEN does not recall again.
    assert_eq!(b.run(ops.clone()).1.status, Nfsstat4::Delay);
    assert!(a.callbacks().is_empty());
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
    b.ok(ops);
    // A returned delegation is gone.
    let (_, res) = a.run(vec![putfh(&fh), delegreturn(deleg)]);
    assert_eq!(res.status, Nfsstat4::BadStateid);
}

#[test]
fn an_unanswered_recall_takes_the_path_down_and_the_delegation_is_revoked_at_its_deadline() {
    let (w, mut a, mut b, fh, deleg) = a_delegated();
    let mut ops = dir();
    ops.push(open("f", "ob", OPEN4_SHARE_ACCESS_WRITE));
    assert_eq!(b.run(ops.clone()).1.status, Nfsstat4::Delay);
    assert_eq!(a.callbacks().len(), 1);
    assert_eq!(a.flags() & SEQ4_STATUS_CB_PATH_DOWN, 0);
    // No answer within the callback timeout: the path is down, and A's
    // SEQUENCE says so (the client then binds a connection again).
    let recalled = Instant::now();
    w.p.callbacks.pump(&w.p, recalled + LEASE / 10 + Duration::from_secs(1));
    assert_eq!(w.p.callback_counters().timeouts, 1);
    assert_ne!(a.flags() & SEQ4_STATUS_CB_PATH_DOWN, 0);
    assert_eq!(b.flags() & SEQ4_STATUS_CB_PATH_DOWN, 0, "B's path is up");
    // A lease after the recall, it is revoked: B's OPEN goes on, A is
    // told it lost recallable state, and its stateid is revoked.
    // (A and B renewed their leases after `recalled`: they are not
    // expired then.)
    w.p.with_state(|s| s.reap(recalled + LEASE));
    b.ok(ops);
    assert_ne!(a.flags() & SEQ4_STATUS_RECALLABLE_STATE_REVOKED, 0);
    let (_, res) = a.run(vec![putfh(&fh), delegreturn(deleg)]);
    assert_eq!(res.status, Nfsstat4::DelegRevoked);
}

#[test]
fn a_rebound_backchannel_is_probed_again_and_a_pending_recall_is_sent_once_it_answers() {
    let (w, mut a, mut b, _fh, deleg) = a_delegated();
    let mut ops = dir();
    ops.push(open("f", "ob", OPEN4_SHARE_ACCESS_WRITE));
    assert_eq!(b.run(ops).1.status, Nfsstat4::Delay);
    assert_eq!(a.callbacks().len(), 1);
    let timed_out = Instant::now() + LEASE / 10 + Duration::from_secs(1);
    w.p.callbacks.pump(&w.p, timed_out);
    assert_ne!(a.flags() & SEQ4_STATUS_CB_PATH_DOWN, 0);
    // The client's answer to CB_PATH_DOWN: BIND_CONN_TO_SESSION.
    let bind = BindConnToSession4Args {
        bctsa_sessid: a.session,
        bctsa_dir: ChannelDirFromClient4::Cdfc4BackOrBoth,
        bctsa_use_conn_in_rdma_mode: false,
    };
    let res = a.call(vec![NfsArgop4::BindConnToSession(bind)]);
    assert_eq!(res.status, Nfsstat4::Ok);
    // No longer "down" while the probe runs: the client does not bind
    // again and again.
    assert_eq!(a.flags() & SEQ4_STATUS_CB_PATH_DOWN, 0);
    a.answer_probe();
    // (The recall waits from the time it failed, which this test made
    // up: pump at that time.)
    w.p.callbacks.pump(&w.p, timed_out);
    // The recall, sent again on the slot's same sequence (the client
    // never answered the first).
    let calls = a.callbacks();
    assert_eq!(calls.len(), 1);
    let args = calls[0].1.as_ref().expect("a CB_COMPOUND");
    let NfsCbArgop4::CbRecall(recall) = &args.argarray[1] else { panic!("CB_RECALL: {args:?}") };
    assert_eq!(recall.stateid, deleg);
    a.answer(&calls[0].0, Some(args), Nfsstat4::Ok);
}

#[test]
fn an_nfsv3_write_to_a_delegated_file_gets_jukebox_until_the_delegation_is_returned() {
    let (w, mut a, _b, fh, deleg) = a_delegated();
    let nfs3 = keel_nfs3::Nfs3Program::new(w.p.exports.clone());
    let v3_write = || {
        let args = keel_nfs3_proto::nfs3::Write3Args {
            file: keel_nfs3_proto::nfs3::NfsFh3 { data: fh.clone() },
            offset: 0,
            count: 3,
            stable: keel_nfs3_proto::nfs3::StableHow::FileSync,
            data: Bytes::from_static(b"new"),
        };
        let mut enc = Encoder::new();
        args.encode(&mut enc);
        let cred = root();
        let ctx = CallContext {
            xid: 9,
            vers: 3,
            proc_: 7,
            cred: &cred,
            peer: "10.0.0.9:800".parse().unwrap(),
            local: "127.0.0.1:2049".parse().unwrap(),
            connection: None,
            report: Default::default(),
        };
        let mut reply = Encoder::new();
        RpcProgram::call(&nfs3, &ctx, &mut Decoder::new(enc.into_bytes()), &mut reply).unwrap();
        Decoder::new(reply.into_bytes()).u32().unwrap()
    };
    const NFS3_OK: u32 = 0;
    const NFS3ERR_JUKEBOX: u32 = 10008;
    assert_eq!(v3_write(), NFS3ERR_JUKEBOX);
    let calls = a.callbacks();
    assert_eq!(calls.len(), 1, "the v3 write recalled the delegation at once");
    let args = calls[0].1.as_ref().unwrap();
    a.answer(&calls[0].0, Some(args), Nfsstat4::Ok);
    assert_eq!(v3_write(), NFS3ERR_JUKEBOX, "until it is returned");
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
    assert_eq!(v3_write(), NFS3_OK);
    // Reads do not recall a read delegation.
    let (o, _) = open_in_dir(&mut a, "f", "oa2", OPEN4_SHARE_ACCESS_READ);
    assert!(read_delegation(&o).is_none(), "not offered again right after a conflict");
    assert_eq!(w.p.exports.before_access(&fh, GateAccess::Read), Ok(()));
}

#[test]
fn another_client_s_setattr_remove_and_rename_wait_for_the_recall() {
    let (_w, mut a, mut b, fh, deleg) = a_delegated();
    let chmod = Attrs4 { mode: Some(0o600), ..Attrs4::default() }.to_fattr4(&Attrs4::known());
    let setattr = NfsArgop4::Setattr(Setattr4Args { stateid: Stateid4::ANONYMOUS, obj_attributes: chmod });
    assert_eq!(b.run(vec![putfh(&fh), setattr.clone()]).1.status, Nfsstat4::Delay);
    assert_eq!(a.callbacks().len(), 1, "recalled");
    let mut remove = dir();
    remove.push(NfsArgop4::Remove(Remove4Args { target: "f".into() }));
    assert_eq!(b.run(remove.clone()).1.status, Nfsstat4::Delay);
    let mut rename = dir();
    rename.push(NfsArgop4::Savefh(()));
    rename.push(NfsArgop4::Rename(Rename4Args { oldname: "f".into(), newname: "g".into() }));
    assert_eq!(b.run(rename).1.status, Nfsstat4::Delay);
    assert!(a.callbacks().is_empty(), "recalled once");
    // The holder's own changes do not wait for its own delegation.
    a.ok(vec![putfh(&fh), setattr]);
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
    b.ok(remove);
}

/// One NFSv3 call to the same exports: its status.
fn v3_status(w: &World, proc_: u32, args: &impl Encode) -> u32 {
    let nfs3 = keel_nfs3::Nfs3Program::new(w.p.exports.clone());
    let mut enc = Encoder::new();
    args.encode(&mut enc);
    let cred = root();
    let ctx = CallContext {
        xid: 9,
        vers: 3,
        proc_,
        cred: &cred,
        peer: "10.0.0.9:800".parse().unwrap(),
        local: "127.0.0.1:2049".parse().unwrap(),
        connection: None,
        report: Default::default(),
    };
    let mut reply = Encoder::new();
    RpcProgram::call(&nfs3, &ctx, &mut Decoder::new(enc.into_bytes()), &mut reply).unwrap();
    Decoder::new(reply.into_bytes()).u32().unwrap()
}

#[test]
fn an_nfsv3_create_that_truncates_and_a_remove_of_a_delegated_file_get_jukebox() {
    use keel_nfs3_proto::nfs3::{Create3Args, Createhow3, Diropargs3, Filename3, NfsFh3, Remove3Args, Sattr3};
    const NFS3ERR_JUKEBOX: u32 = 10008;
    let (w, mut a, _b, fh, deleg) = a_delegated();
    let root = keel_store::Store::lookup_path(&*w.p.exports.store, 1, b"/").unwrap();
    let root = keel_store::Object::handle(&root).clone();
    let f = || Diropargs3 { dir: NfsFh3 { data: root.clone() }, name: Filename3(Bytes::from_static(b"f")) };
    let truncate = Sattr3 { size: Some(0), ..Sattr3::default() };
    let create = Create3Args { where_: f(), how: Createhow3::Unchecked(truncate) };
    assert_eq!(v3_status(&w, 8, &create), NFS3ERR_JUKEBOX);
    assert_eq!(v3_status(&w, 12, &Remove3Args { object: f() }), NFS3ERR_JUKEBOX);
    assert_eq!(a.callbacks().len(), 1, "recalled once");
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
    assert_eq!(v3_status(&w, 12, &Remove3Args { object: f() }), 0);
}

#[test]
fn an_nfsv3_setattr_rename_and_link_of_a_delegated_file_get_jukebox_until_it_is_returned() {
    use keel_nfs3_proto::nfs3::{Diropargs3, Filename3, Link3Args, NfsFh3, Rename3Args, Sattr3, Setattr3Args};
    const NFS3ERR_JUKEBOX: u32 = 10008;
    let (w, mut a, _b, fh, deleg) = a_delegated();
    let root = keel_store::Store::lookup_path(&*w.p.exports.store, 1, b"/").unwrap();
    let root = keel_store::Object::handle(&root).clone();
    let at = |name: &'static str| Diropargs3 {
        dir: NfsFh3 { data: root.clone() },
        name: Filename3(Bytes::from_static(name.as_bytes())),
    };
    let chmod = Setattr3Args {
        object: NfsFh3 { data: fh.clone() },
        new_attributes: Sattr3 { mode: Some(0o600), ..Sattr3::default() },
        guard: None,
    };
    let rename = Rename3Args { from: at("f"), to: at("g") };
    let link = Link3Args { file: NfsFh3 { data: fh.clone() }, link: at("f-link") };
    assert_eq!(v3_status(&w, 2, &chmod), NFS3ERR_JUKEBOX);
    assert_eq!(v3_status(&w, 14, &rename), NFS3ERR_JUKEBOX);
    assert_eq!(v3_status(&w, 15, &link), NFS3ERR_JUKEBOX);
    assert_eq!(a.callbacks().len(), 1, "recalled once");
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
    assert_eq!(v3_status(&w, 2, &chmod), 0);
    assert_eq!(v3_status(&w, 15, &link), 0);
    assert_eq!(v3_status(&w, 14, &rename), 0);
}

#[test]
fn a_recall_the_client_answers_with_delay_is_sent_again_on_the_slot_s_next_sequence() {
    let (w, mut a, mut b, _fh, deleg) = a_delegated();
    let mut ops = dir();
    ops.push(open("f", "ob", OPEN4_SHARE_ACCESS_WRITE));
    assert_eq!(b.run(ops).1.status, Nfsstat4::Delay);
    let calls = a.callbacks();
    a.answer(&calls[0].0, calls[0].1.as_ref(), Nfsstat4::Delay);
    assert!(a.callbacks().is_empty(), "not at once");
    w.p.callbacks.pump(&w.p, Instant::now() + crate::callback::RECALL_RETRY_AFTER);
    let calls = a.callbacks();
    assert_eq!(calls.len(), 1, "sent again");
    let args = calls[0].1.as_ref().unwrap();
    let NfsCbArgop4::CbRecall(recall) = &args.argarray[1] else { panic!("CB_RECALL: {args:?}") };
    assert_eq!(recall.stateid, deleg);
    // `answer` checks the CB_SEQUENCE moved on to the slot's next sequence.
    a.answer(&calls[0].0, Some(args), Nfsstat4::Ok);
}

/// The simulated store's object behind `fh`.
fn object(w: &World, fh: &Bytes) -> keel_store::sim::SimObject {
    use keel_store::Store;
    w.p.exports.store.resolve(fh, |_| Ok::<_, keel_store::StoreError>(())).unwrap().0
}

/// What the callback thread does on its tick: finds the broken leases,
/// reaps, sends the recalls.
fn tick(w: &World, now: Instant) {
    crate::deleg::recall_broken_leases(&w.p, now);
    w.p.with_state(|s| s.reap(now));
    w.p.callbacks.pump(&w.p, now);
}

#[test]
fn a_local_writer_breaks_the_delegation_s_lease_which_is_recalled_and_released_once_returned() {
    let (w, mut a, mut b, fh, deleg) = a_delegated();
    let store = w.p.exports.store.clone();
    let f = object(&w, &fh);
    assert_eq!(store.leases_held(&f), 1, "the delegation holds a lease");
    // A local process opens f for writing: it waits for the one lease.
    assert_eq!(store.open_for_write_locally(&f), 1);
    tick(&w, Instant::now());
    let calls = a.callbacks();
    assert_eq!(calls.len(), 1, "the broken lease recalled the delegation");
    let args = calls[0].1.as_ref().expect("a CB_COMPOUND");
    let NfsCbArgop4::CbRecall(recall) = &args.argarray[1] else { panic!("CB_RECALL: {args:?}") };
    assert_eq!((recall.stateid, &recall.fh.0), (deleg, &fh));
    a.answer(&calls[0].0, Some(args), Nfsstat4::Ok);
    // Recalled: another client's write waits too; the next tick recalls
    // nothing more.
    let mut ops = dir();
    ops.push(open("f", "ob", OPEN4_SHARE_ACCESS_WRITE));
    assert_eq!(b.run(ops).1.status, Nfsstat4::Delay);
    tick(&w, Instant::now());
    assert!(a.callbacks().is_empty());
    assert_eq!(store.leases_held(&f), 1, "held until returned: the local writer waits");
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
    assert_eq!(store.leases_held(&f), 0, "returned: the lease is released, the local writer goes on");
}

/// The holder's own SETATTR and LINK of its delegated file recall nothing:
/// its lease is told the change is its holder's (RFC 8881 section 10.4,
/// pynfs DELEG32); a local process's change of the file's attributes
/// after it still recalls.
#[test]
fn the_holder_s_own_setattr_and_link_keep_its_delegation_and_a_local_chmod_recalls_it() {
    let (w, mut a, _b, fh, deleg) = a_delegated();
    let store = w.p.exports.store.clone();
    let f = object(&w, &fh);
    let chmod = Attrs4 { mode: Some(0o600), ..Attrs4::default() };
    let setattr = Setattr4Args { stateid: Stateid4::default(), obj_attributes: chmod.to_fattr4(&Attrs4::known()) };
    a.ok(vec![putfh(&fh), NfsArgop4::Setattr(setattr)]);
    let mut ops = vec![putfh(&fh), NfsArgop4::Savefh(())];
    ops.extend(dir());
    ops.push(NfsArgop4::Link(Link4Args { newname: "f-link".into() }));
    a.ok(ops);
    tick(&w, Instant::now());
    assert!(a.callbacks().is_empty(), "the holder's own changes recalled its delegation");
    assert_eq!(store.leases_held(&f), 1);
    store.change_attributes_locally(&f);
    tick(&w, Instant::now());
    let calls = a.callbacks();
    assert_eq!(calls.len(), 1, "a local chmod recalls the delegation");
    let args = calls[0].1.as_ref().expect("a CB_COMPOUND");
    let NfsCbArgop4::CbRecall(recall) = &args.argarray[1] else { panic!("CB_RECALL: {args:?}") };
    assert_eq!(recall.stateid, deleg);
}

#[test]
fn a_delegation_whose_lease_breaks_and_is_not_returned_is_revoked_before_the_breaker_stops_waiting() {
    let (w, mut a, _b, fh, deleg) = a_delegated();
    let store = w.p.exports.store.clone();
    let f = object(&w, &fh);
    store.open_for_write_locally(&f);
    let broken = Instant::now();
    tick(&w, broken);
    assert_eq!(a.callbacks().len(), 1, "recalled");
    // A never returns it. The breaker waits SIM_LEASE_BREAK_WAIT at most
    // (shorter than the v4 lease, the usual recall deadline): the
    // delegation is revoked, and its lease released, before that.
    assert!(keel_store::sim::SIM_LEASE_BREAK_WAIT < LEASE);
    let revoke_at = broken + keel_store::sim::SIM_LEASE_BREAK_WAIT - crate::deleg::LEASE_BREAK_MARGIN;
    // (A's lease is renewed meanwhile: it is not expired.)
    a.flags();
    w.p.with_state(|s| s.reap(revoke_at - Duration::from_secs(1)));
    assert_eq!(store.leases_held(&f), 1, "not revoked yet");
    a.flags();
    w.p.with_state(|s| s.reap(revoke_at));
    assert_eq!(store.leases_held(&f), 0, "revoked: the lease is released, the local writer goes on");
    assert_ne!(a.flags() & SEQ4_STATUS_RECALLABLE_STATE_REVOKED, 0);
    let (_, res) = a.run(vec![putfh(&fh), delegreturn(deleg)]);
    assert_eq!(res.status, Nfsstat4::DelegRevoked);
}

#[test]
fn no_delegation_is_offered_on_a_file_a_local_process_has_open_for_writing() {
    let w = world(true);
    let mut a = Client::new(&w, "10.0.0.5:700", 1, "a");
    a.answer_probe();
    let (o, fh) = open_in_dir(&mut a, "g", "oa", OPEN4_SHARE_ACCESS_READ);
    let deleg = read_delegation(&o).expect("a read delegation");
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
    let store = w.p.exports.store.clone();
    let g = object(&w, &fh);
    assert_eq!(store.open_for_write_locally(&g), 0, "no lease to wait for");
    let (o, _) = open_in_dir(&mut a, "g", "oa2", OPEN4_SHARE_ACCESS_READ);
    assert!(read_delegation(&o).is_none(), "no lease, no delegation: {:?}", o.delegation);
    assert_eq!(store.leases_held(&g), 0);
    store.close_local_writer(&g);
    let (o, _) = open_in_dir(&mut a, "g", "oa3", OPEN4_SHARE_ACCESS_READ);
    assert!(read_delegation(&o).is_some(), "the writer closed: offered again");
}

/// A client that wants no delegation (or cancels its wish) is told so,
/// whatever the lease would have said: the want is decided before the
/// lease is taken (pynfs DELEG4).
#[test]
fn a_client_that_wants_no_delegation_is_told_not_wanted_even_where_no_lease_can_be_had() {
    let w = world(true);
    let mut a = Client::new(&w, "10.0.0.5:700", 1, "a");
    a.answer_probe();
    let (o, fh) = open_in_dir(&mut a, "g", "oa", OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_NO_DELEG);
    assert_eq!(o.delegation, OpenDelegation4::OpenDelegateNoneExt(OpenNoneDelegation4::Wnd4NotWanted));
    // A local writer: no lease could be had.
    let store = w.p.exports.store.clone();
    let g = object(&w, &fh);
    store.open_for_write_locally(&g);
    let (o, _) = open_in_dir(&mut a, "g", "ob", OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_NO_DELEG);
    assert_eq!(o.delegation, OpenDelegation4::OpenDelegateNoneExt(OpenNoneDelegation4::Wnd4NotWanted));
    let (o, _) = open_in_dir(&mut a, "g", "oc", OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_CANCEL);
    assert_eq!(o.delegation, OpenDelegation4::OpenDelegateNoneExt(OpenNoneDelegation4::Wnd4Cancelled));
    // One that wants one hears of the contention.
    let (o, _) = open_in_dir(&mut a, "g", "od", OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_READ_DELEG);
    assert_eq!(o.delegation, OpenDelegation4::OpenDelegateNoneExt(OpenNoneDelegation4::Wnd4Contention(false)));
    store.close_local_writer(&g);
}

#[test]
fn the_holder_s_own_read_lock_is_granted_at_once_through_its_lease_which_it_does_not_break() {
    let (w, mut a, _b, fh, deleg) = a_delegated();
    let store = w.p.exports.store.clone();
    let f = object(&w, &fh);
    let mut ops = dir();
    ops.extend([open("f", "oa-lock", OPEN4_SHARE_ACCESS_READ)]);
    let res = a.ok(ops);
    let NfsResop4::Open(Nfs4Result::Ok(o)) = &res[4] else { panic!("OPEN: {res:?}") };
    // A locks while it holds its delegation: the store's lock description
    // open for writing would break A's own lease (and the try would begin
    // to break it); the lock is taken through the lease's own description
    // instead, and the delegation is not recalled (knfsd does not recall
    // for the holder's own lock either).
    let lock = NfsArgop4::Lock(Lock4Args {
        locktype: NfsLockType4::ReadLt,
        reclaim: false,
        offset: 0,
        length: 10,
        locker: Locker4::OpenOwner(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: o.stateid,
            lock_seqid: 0,
            lock_owner: LockOwner4 { clientid: 0, owner: Opaque(Bytes::from_static(b"lo")) },
        }),
    });
    a.ok(vec![putfh(&fh), lock]);
    assert_eq!(store.leases_held(&f), 1, "the holder's own lock keeps its lease");
    tick(&w, Instant::now());
    assert!(a.callbacks().is_empty(), "recalled: the lease was broken by the holder's own lock");
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
    assert_eq!(store.leases_held(&f), 0, "released with the delegation");
}

#[test]
fn a_courtesy_client_s_delegation_whose_lease_breaks_is_let_go_of_at_once() {
    let (w, _a, mut b, fh, _deleg) = a_delegated();
    let store = w.p.exports.store.clone();
    let f = object(&w, &fh);
    // A stops renewing its lease: past it, A is a courtesy client (B
    // renews).
    let later = Instant::now() + LEASE + Duration::from_secs(1);
    b.flags();
    assert!(w.p.with_state(|s| s.clients(later)).len() == 2);
    store.open_for_write_locally(&f);
    crate::deleg::recall_broken_leases(&w.p, later);
    assert_eq!(store.leases_held(&f), 0, "the courtesy client is expired: the local writer goes on");
    assert_eq!(w.p.with_state(|s| s.clients(later)).len(), 1, "A is gone");
}

fn write_delegation(o: &Open4ResOk) -> Option<Stateid4> {
    match &o.delegation {
        OpenDelegation4::OpenDelegateWrite(d) => Some(d.stateid),
        _ => None,
    }
}

/// Client A holding a write delegation on /srv/a/f, to which it wrote
/// "data" through it; B with a session.
fn a_write_delegated() -> (World, Client, Client, Bytes, Stateid4) {
    let (w, mut a, b, fh, deleg) = a_write_delegated_new_file();
    let write =
        Write4Args { stateid: deleg, offset: 0, stable: StableHow4::Unstable4, data: Bytes::from_static(b"data") };
    a.ok(vec![putfh(&fh), NfsArgop4::Write(write)]);
    (w, a, b, fh, deleg)
}

/// Client A holding a write delegation on /srv/a/f, which it created
/// (empty); B with a session.
fn a_write_delegated_new_file() -> (World, Client, Client, Bytes, Stateid4) {
    let w = world_with(true, true);
    let mut a = Client::new(&w, "10.0.0.5:700", 1, "a");
    let mut b = Client::new(&w, "10.0.0.6:701", 2, "b");
    a.answer_probe();
    b.answer_probe();
    let (o, fh) = open_in_dir(&mut a, "f", "oa", OPEN4_SHARE_ACCESS_BOTH);
    let OpenDelegation4::OpenDelegateWrite(d) = &o.delegation else { panic!("a write delegation: {o:?}") };
    // The client flushes at every close (no page may stay dirty past it).
    assert_eq!(d.space_limit, NfsSpaceLimit4::NfsLimitSize(0));
    (w, a, b, fh, d.stateid)
}

fn getattr(bits: &[u32]) -> NfsArgop4 {
    NfsArgop4::Getattr(Getattr4Args { attr_request: Bitmap4::from_bits(bits.iter().copied()) })
}

/// Write delegations (when configured): offered to a writer (WRITE alone
/// too) alone on the file, never to one whose file is open elsewhere.
#[test]
fn a_writer_alone_on_the_file_gets_a_write_delegation() {
    let w = world_with(true, true);
    let mut a = Client::new(&w, "10.0.0.5:700", 1, "a");
    let mut b = Client::new(&w, "10.0.0.6:701", 2, "b");
    a.answer_probe();
    b.answer_probe();
    let (o, _) = open_in_dir(&mut a, "f", "o1", OPEN4_SHARE_ACCESS_WRITE);
    assert!(write_delegation(&o).is_some(), "{:?}", o.delegation);
    // Its own second OPEN, for reading, gets no second delegation (nor
    // takes a read lease, which would break its write lease).
    let (o, fh) = open_in_dir(&mut a, "f", "o2", OPEN4_SHARE_ACCESS_READ);
    assert_eq!(o.delegation, OpenDelegation4::OpenDelegateNone);
    assert_eq!(w.p.exports.store.leases_held(&object(&w, &fh)), 1);
    // g open for reading by B (no delegation wanted): none for A.
    let mut ops = dir();
    ops.push(open("g", "ob", OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_NO_DELEG));
    b.ok(ops);
    let (o, _) = open_in_dir(&mut a, "g", "o1", OPEN4_SHARE_ACCESS_BOTH);
    assert_eq!(o.delegation, OpenDelegation4::OpenDelegateNone);
    // h open by a local process: none either.
    let (_, h) = open_in_dir(&mut a, "h", "o8", OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_NO_DELEG);
    let h_obj = object(&w, &h);
    w.p.exports.store.open_for_read_locally(&h_obj);
    let mut ops = dir();
    ops.push(open("h", "o9", OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG));
    let res = a.ok(ops);
    let NfsResop4::Open(Nfs4Result::Ok(o)) = &res[4] else { panic!("OPEN: {res:?}") };
    assert!(matches!(o.delegation, OpenDelegation4::OpenDelegateNoneExt(_)), "{:?}", o.delegation);
    // Not offered when the server is not told to.
    let w = world_with(true, false);
    let mut a = Client::new(&w, "10.0.0.5:700", 1, "a");
    a.answer_probe();
    let (o, _) = open_in_dir(&mut a, "f", "o1", OPEN4_SHARE_ACCESS_BOTH);
    assert_eq!(o.delegation, OpenDelegation4::OpenDelegateNone);
}

/// RFC 8881 section 10.4: every access to a write-delegated file by
/// anyone else recalls it first and waits: another client's READ (with a
/// special stateid), GETATTR of the size or change once it is recalled,
/// OPEN for reading, LOCKT, and an NFSv3 READ. The holder's own go on.
#[test]
fn every_access_by_anyone_else_recalls_a_write_delegation_first() {
    const NFS3ERR_JUKEBOX: u32 = 10008;
    let (w, mut a, mut b, fh, deleg) = a_write_delegated();
    // Attributes that the holder's writes do not change are answered.
    b.ok(vec![putfh(&fh), getattr(&[FATTR4_MODE])]);
    assert!(a.callbacks().is_empty(), "no recall for the mode");
    let read = Read4Args { stateid: Stateid4::ANONYMOUS, offset: 0, count: 4 };
    assert_eq!(b.run(vec![putfh(&fh), NfsArgop4::Read(read.clone())]).1.status, Nfsstat4::Delay);
    let calls = a.callbacks();
    assert_eq!(calls.len(), 1, "a READ recalled it");
    assert!(matches!(calls[0].1.as_ref().unwrap().argarray[1], NfsCbArgop4::CbRecall(_)));
    // Recalled: nothing to ask the holder (no CB_GETATTR), the size waits.
    assert_eq!(b.run(vec![putfh(&fh), getattr(&[FATTR4_SIZE])]).1.status, Nfsstat4::Delay);
    assert_eq!(b.run(vec![putfh(&fh), getattr(&[FATTR4_CHANGE])]).1.status, Nfsstat4::Delay);
    let mut ops = dir();
    ops.push(open("f", "ob", OPEN4_SHARE_ACCESS_READ));
    assert_eq!(b.run(ops.clone()).1.status, Nfsstat4::Delay);
    let lockt = Lockt4Args {
        locktype: NfsLockType4::ReadLt,
        offset: 0,
        length: u64::MAX,
        owner: LockOwner4 { clientid: 0, owner: Opaque(Bytes::from_static(b"lb")) },
    };
    assert_eq!(b.run(vec![putfh(&fh), NfsArgop4::Lockt(lockt)]).1.status, Nfsstat4::Delay);
    let v3_read = keel_nfs3_proto::nfs3::Read3Args {
        file: keel_nfs3_proto::nfs3::NfsFh3 { data: fh.clone() },
        offset: 0,
        count: 4,
    };
    assert_eq!(v3_status(&w, 6, &v3_read), NFS3ERR_JUKEBOX);
    assert!(w.p.exports.before_access(&fh, GateAccess::Read).is_err(), "NLM's locks and TEST too");
    assert!(a.callbacks().is_empty(), "recalled once");
    // The holder's own accesses go on while it writes back.
    let read_own = Read4Args { stateid: deleg, offset: 0, count: 4 };
    a.ok(vec![putfh(&fh), getattr(&[FATTR4_SIZE]), NfsArgop4::Read(read_own)]);
    a.answer(&calls[0].0, calls[0].1.as_ref(), Nfsstat4::Ok);
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
    b.ok(vec![putfh(&fh), getattr(&[FATTR4_SIZE]), NfsArgop4::Read(read)]);
    assert_eq!(v3_status(&w, 6, &v3_read), 0);
    b.ok(ops);
}

/// Another client's OPEN that would truncate the file waits for the
/// recall before anything is truncated (the store writes a write-delegated
/// file unseen by its lease).
#[test]
fn another_client_s_truncating_open_recalls_before_it_truncates() {
    let (w, a, mut b, fh, _deleg) = a_write_delegated();
    let size0 = Attrs4 { size: Some(0), ..Attrs4::default() }.to_fattr4(&Attrs4::known());
    let mut ops = dir();
    ops.push(NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_WRITE,
        share_deny: 0,
        owner: OpenOwner4 { clientid: 0, owner: Opaque(Bytes::from_static(b"ob")) },
        openhow: Openflag4::Open4Create(Createhow4::Unchecked4(size0)),
        claim: OpenClaim4::ClaimNull("f".into()),
    }));
    assert_eq!(b.run(ops).1.status, Nfsstat4::Delay);
    assert_eq!(a.callbacks().len(), 1, "recalled");
    let size = keel_store::Store::getattr(&*w.p.exports.store, &object(&w, &fh)).unwrap().size;
    assert_eq!(size, 4, "not truncated while the holder may have more to write");
}

/// A local process's open for reading breaks the write delegation's
/// lease: the delegation is recalled, and released once returned.
#[test]
fn a_local_reader_breaks_a_write_delegation_s_lease_which_is_recalled() {
    let (w, mut a, _b, fh, deleg) = a_write_delegated();
    let store = w.p.exports.store.clone();
    let f = object(&w, &fh);
    assert_eq!(store.leases_held(&f), 1);
    assert_eq!(store.open_for_read_locally(&f), 1, "the reader waits for the write lease");
    tick(&w, Instant::now());
    let calls = a.callbacks();
    assert_eq!(calls.len(), 1, "the broken lease recalled the delegation");
    a.answer(&calls[0].0, calls[0].1.as_ref(), Nfsstat4::Ok);
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
    assert_eq!(store.leases_held(&f), 0, "returned: the lease is released, the reader goes on");
}

/// The size, change and modification time a GETATTR answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    size: u64,
    change: u64,
    mtime: Nfstime4,
}

const SEEN: &[u32] = &[FATTR4_CHANGE, FATTR4_SIZE, FATTR4_TIME_ACCESS, FATTR4_TIME_MODIFY];

fn seen(res: &[NfsResop4]) -> Seen {
    let Some(NfsResop4::Getattr(Nfs4Result::Ok(g))) = res.last() else { panic!("GETATTR: {res:?}") };
    let a = Attrs4::from_fattr4(&g.obj_attributes, AttrUse::Reply).unwrap();
    Seen { size: a.size.unwrap(), change: a.change.unwrap(), mtime: a.time_modify.unwrap() }
}

/// `c`'s GETATTR of the size, change and times of `fh`.
fn getattr_of(c: &mut Client, fh: &Bytes) -> Seen {
    seen(&c.ok(vec![putfh(fh), getattr(SEEN)]))
}

/// The callback sent to `a` within 2 s (as pynfs waits for it).
fn callback_within_2s(a: &Client) -> (CallHeader, CbCompound4Args) {
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let mut calls = a.callbacks();
        if let Some((header, args)) = calls.pop() {
            assert!(calls.is_empty(), "one callback");
            return (header, args.expect("a CB_COMPOUND"));
        }
        assert!(Instant::now() < until, "no callback within 2 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// B's GETATTR of the size, change and times of `fh` while A answers the
/// CB_GETATTR it causes with `change` and `size` (and the server takes
/// the reply, as the callback thread does): what B got.
fn b_getattr_while_a_answers(a: &mut Client, b: &mut Client, fh: &Bytes, change: u64, size: u64) -> Compound4Res {
    std::thread::scope(|scope| {
        let getattr = scope.spawn(|| b.run(vec![putfh(fh), getattr(SEEN)]).1);
        let (header, args) = callback_within_2s(a);
        let NfsCbArgop4::CbGetattr(asked) = &args.argarray[1] else { panic!("CB_GETATTR: {args:?}") };
        assert_eq!(asked.fh.0, *fh);
        assert!(asked.attr_request.contains(FATTR4_CHANGE) && asked.attr_request.contains(FATTR4_SIZE));
        let attrs = Attrs4 { change: Some(change), size: Some(size), ..Attrs4::default() };
        let ok = CbGetattr4ResOk { obj_attributes: attrs.to_fattr4(&asked.attr_request) };
        a.reply_with(&header, Some(&args), Nfsstat4::Ok, NfsCbResop4::CbGetattr(Nfs4Result::Ok(ok)));
        a.p.callbacks.pump(&a.p, Instant::now());
        getattr.join().unwrap()
    })
}

/// pynfs DELEG24 (RFC 8881 section 10.4.3): another client's GETATTR of
/// the size of a write-delegated file asks the holder with CB_GETATTR
/// instead of recalling; a holder that changed nothing leaves the file's
/// attributes as they were. The holder's own GETATTR asks nothing.
#[test]
fn a_getattr_by_another_client_asks_the_holder_with_cb_getattr() {
    let (w, mut a, mut b, fh, deleg) = a_write_delegated_new_file();
    let attrs1 = getattr_of(&mut a, &fh);
    assert!(a.callbacks().is_empty(), "no CB_GETATTR for the holder's own GETATTR");
    let res = b_getattr_while_a_answers(&mut a, &mut b, &fh, attrs1.change, attrs1.size);
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
    let attrs2 = seen(&res.resarray);
    assert_eq!(attrs2, attrs1, "nothing changed");
    assert!(a.callbacks().is_empty(), "not recalled");
    assert_eq!(w.p.callbacks.counters().getattrs_sent, 1);
    assert_eq!(w.p.callbacks.counters().recalls_sent, 0);
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
}

/// pynfs DELEG25: a holder that answers CB_GETATTR with a new change
/// attribute and size has written what the server has not seen: the
/// GETATTR answers its size, and a change attribute and modification
/// time that moved. Asked again with nothing new, nothing moves further.
#[test]
fn a_holder_s_cb_getattr_reporting_a_change_gives_its_size_and_moves_the_times() {
    let (_w, mut a, mut b, fh, deleg) = a_write_delegated_new_file();
    let attrs1 = getattr_of(&mut a, &fh);
    let res = b_getattr_while_a_answers(&mut a, &mut b, &fh, attrs1.change + 1, 5);
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
    let attrs2 = seen(&res.resarray);
    assert_eq!(attrs2.size, 5, "the holder's size");
    assert_ne!(attrs2.change, attrs1.change);
    assert_ne!(attrs2.mtime, attrs1.mtime);
    // The same answer again: the holder's size, nothing touched.
    let res = b_getattr_while_a_answers(&mut a, &mut b, &fh, attrs1.change + 1, 5);
    assert_eq!(seen(&res.resarray), attrs2);
    assert!(a.callbacks().is_empty(), "not recalled");
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
}

/// pynfs DELEG27: a holder whose write reached the server already (FILE_SYNC)
/// answers CB_GETATTR with the change attribute it was granted the
/// delegation with and the size the server has: nothing moves, and the
/// modification time after the delegation is returned is the write's.
#[test]
fn a_cb_getattr_answer_reporting_nothing_new_touches_nothing() {
    let (_w, mut a, mut b, fh, deleg) = a_write_delegated_new_file();
    let attrs1 = getattr_of(&mut a, &fh);
    let write =
        Write4Args { stateid: deleg, offset: 0, stable: StableHow4::FileSync4, data: Bytes::from_static(b"12345") };
    a.ok(vec![putfh(&fh), NfsArgop4::Write(write)]);
    let attrs2 = getattr_of(&mut a, &fh);
    assert_ne!(attrs2.mtime, attrs1.mtime, "the write moved it");
    let res = b_getattr_while_a_answers(&mut a, &mut b, &fh, attrs1.change, 5);
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
    assert_eq!(seen(&res.resarray), attrs2);
    // An OPEN for writing recalls.
    let mut ops = dir();
    ops.push(open("f", "ob", OPEN4_SHARE_ACCESS_WRITE));
    assert_eq!(b.run(ops).1.status, Nfsstat4::Delay);
    let (header, args) = callback_within_2s(&a);
    assert!(matches!(args.argarray[1], NfsCbArgop4::CbRecall(_)), "{args:?}");
    a.answer(&header, Some(&args), Nfsstat4::Ok);
    let attrs4 = seen(&a.ok(vec![putfh(&fh), getattr(SEEN), delegreturn(deleg)])[..3]);
    assert_eq!(attrs4.mtime, attrs2.mtime, "a CB_GETATTR reporting nothing new touched nothing");
}

/// A holder that does not answer CB_GETATTR in time: the GETATTR recalls
/// and gets NFS4ERR_DELAY after [`CB_GETATTR_WAIT`]; the recall goes out
/// once the backchannel's one slot is free (the late answer comes).
///
/// [`CB_GETATTR_WAIT`]: crate::deleg::CB_GETATTR_WAIT
#[test]
fn a_cb_getattr_not_answered_in_time_falls_back_to_a_recall() {
    let (w, mut a, mut b, fh, deleg) = a_write_delegated_new_file();
    let started = Instant::now();
    assert_eq!(b.run(vec![putfh(&fh), getattr(&[FATTR4_SIZE])]).1.status, Nfsstat4::Delay);
    assert!(started.elapsed() >= crate::deleg::CB_GETATTR_WAIT);
    let (header, args) = callback_within_2s(&a);
    assert!(matches!(args.argarray[1], NfsCbArgop4::CbGetattr(_)), "{args:?}");
    // The late answer frees the slot: the recall follows.
    let attrs = Attrs4 { change: Some(1), size: Some(0), ..Attrs4::default() };
    let ok = CbGetattr4ResOk { obj_attributes: attrs.to_fattr4(&Attrs4::known()) };
    a.reply_with(&header, Some(&args), Nfsstat4::Ok, NfsCbResop4::CbGetattr(Nfs4Result::Ok(ok)));
    w.p.callbacks.pump(&w.p, Instant::now());
    let (header, args) = callback_within_2s(&a);
    assert!(matches!(args.argarray[1], NfsCbArgop4::CbRecall(_)), "{args:?}");
    // Recalled: the next GETATTR asks nothing and waits.
    assert_eq!(b.run(vec![putfh(&fh), getattr(&[FATTR4_SIZE])]).1.status, Nfsstat4::Delay);
    assert!(a.callbacks().is_empty());
    a.answer(&header, Some(&args), Nfsstat4::Ok);
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
    b.ok(vec![putfh(&fh), getattr(&[FATTR4_SIZE])]);
}

/// A holder that refuses CB_GETATTR: the GETATTR recalls at once.
#[test]
fn a_refused_cb_getattr_falls_back_to_a_recall() {
    let (_w, mut a, mut b, fh, _deleg) = a_write_delegated_new_file();
    let res = std::thread::scope(|scope| {
        let getattr = scope.spawn(|| b.run(vec![putfh(&fh), getattr(&[FATTR4_SIZE])]).1);
        let (header, args) = callback_within_2s(&a);
        a.reply_with(
            &header,
            Some(&args),
            Nfsstat4::Badhandle,
            NfsCbResop4::CbGetattr(Nfs4Result::Fail(Nfsstat4::Badhandle)),
        );
        a.p.callbacks.pump(&a.p, Instant::now());
        getattr.join().unwrap()
    });
    assert_eq!(res.status, Nfsstat4::Delay);
    let (_, args) = callback_within_2s(&a);
    assert!(matches!(args.argarray[1], NfsCbArgop4::CbRecall(_)), "{args:?}");
}

/// Two other clients' GETATTRs while one CB_GETATTR is in flight share
/// it (knfsd keeps one per delegation in flight): the second waits for
/// the holder's answer instead of recalling, and both get its size.
#[test]
fn concurrent_getattrs_share_the_cb_getattr_in_flight() {
    let (w, mut a, mut b, fh, deleg) = a_write_delegated_new_file();
    let mut c = Client::new(&w, "10.0.0.7:702", 3, "c");
    c.answer_probe();
    let attrs1 = getattr_of(&mut a, &fh);
    let (from_b, from_c) = std::thread::scope(|scope| {
        let from_b = scope.spawn(|| b.run(vec![putfh(&fh), getattr(SEEN)]).1);
        let (header, args) = callback_within_2s(&a);
        let NfsCbArgop4::CbGetattr(asked) = &args.argarray[1] else { panic!("CB_GETATTR: {args:?}") };
        let from_c = scope.spawn(|| c.run(vec![putfh(&fh), getattr(SEEN)]).1);
        // C joins the CB_GETATTR in flight before it is answered.
        let until = Instant::now() + Duration::from_secs(2);
        while w.p.callbacks.counters().getattrs_shared == 0 && !from_c.is_finished() {
            assert!(Instant::now() < until, "C neither joined nor finished");
            std::thread::sleep(Duration::from_millis(1));
        }
        let attrs = Attrs4 { change: Some(attrs1.change + 1), size: Some(5), ..Attrs4::default() };
        let ok = CbGetattr4ResOk { obj_attributes: attrs.to_fattr4(&asked.attr_request) };
        a.reply_with(&header, Some(&args), Nfsstat4::Ok, NfsCbResop4::CbGetattr(Nfs4Result::Ok(ok)));
        a.p.callbacks.pump(&a.p, Instant::now());
        (from_b.join().unwrap(), from_c.join().unwrap())
    });
    assert_eq!(from_c.status, Nfsstat4::Ok, "C waited for the answer: {from_c:?}");
    assert_eq!(from_b.status, Nfsstat4::Ok, "{from_b:?}");
    let (seen_b, seen_c) = (seen(&from_b.resarray), seen(&from_c.resarray));
    assert_eq!(seen_b.size, 5);
    assert_eq!(seen_c, seen_b, "one answer, accounted once");
    assert!(a.callbacks().is_empty(), "no second CB_GETATTR, no recall");
    let counters = w.p.callbacks.counters();
    assert_eq!((counters.getattrs_sent, counters.getattrs_shared, counters.recalls_sent), (1, 1, 0));
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
}

/// B runs `ops` while A answers the CB_GETATTR they cause with `change`
/// and `size` (and the server takes the reply): what B got.
fn b_runs_while_a_answers(a: &mut Client, b: &mut Client, ops: Vec<NfsArgop4>, change: u64, size: u64) -> Compound4Res {
    std::thread::scope(|scope| {
        let run = scope.spawn(|| b.run(ops).1);
        let (header, args) = callback_within_2s(a);
        let NfsCbArgop4::CbGetattr(asked) = &args.argarray[1] else { panic!("CB_GETATTR: {args:?}") };
        let attrs = Attrs4 { change: Some(change), size: Some(size), ..Attrs4::default() };
        let ok = CbGetattr4ResOk { obj_attributes: attrs.to_fattr4(&asked.attr_request) };
        a.reply_with(&header, Some(&args), Nfsstat4::Ok, NfsCbResop4::CbGetattr(Nfs4Result::Ok(ok)));
        a.p.callbacks.pump(&a.p, Instant::now());
        run.join().unwrap()
    })
}

/// VERIFY and NVERIFY of the size of a file another client holds a write
/// delegation on compare the holder's size (CB_GETATTR), not the
/// server's stale one, as knfsd's (its VERIFY encodes the attributes as
/// GETATTR does).
#[test]
fn verify_and_nverify_of_the_size_ask_the_holder_with_cb_getattr() {
    let (_w, mut a, mut b, fh, deleg) = a_write_delegated_new_file();
    let attrs1 = getattr_of(&mut a, &fh);
    assert_eq!(attrs1.size, 0);
    let size5 = Attrs4 { size: Some(5), ..Attrs4::default() }.to_fattr4(&Bitmap4::from_bits([FATTR4_SIZE]));
    let verify = vec![putfh(&fh), NfsArgop4::Verify(Verify4Args { obj_attributes: size5.clone() })];
    let res = b_runs_while_a_answers(&mut a, &mut b, verify, attrs1.change + 1, 5);
    assert_eq!(res.status, Nfsstat4::Ok, "the holder's size: {res:?}");
    let nverify = vec![putfh(&fh), NfsArgop4::Nverify(Nverify4Args { obj_attributes: size5 })];
    let res = b_runs_while_a_answers(&mut a, &mut b, nverify, attrs1.change + 1, 5);
    assert_eq!(res.status, Nfsstat4::Same, "{res:?}");
    assert!(a.callbacks().is_empty(), "not recalled");
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
}

fn readdir_of_dir(bits: &[u32]) -> Vec<NfsArgop4> {
    let mut ops = dir();
    ops.push(NfsArgop4::Readdir(Readdir4Args {
        cookie: 0,
        cookieverf: [0; 8],
        dircount: 0,
        maxcount: 8192,
        attr_request: Bitmap4::from_bits(bits.iter().copied()),
    }));
    ops
}

/// The attributes READDIR's entry `name` carries.
fn entry_attrs(res: &Compound4Res, name: &str) -> Attrs4 {
    let Some(NfsResop4::Readdir(Nfs4Result::Ok(r))) = res.resarray.last() else { panic!("READDIR: {res:?}") };
    let e = r.reply.entries.iter().find(|e| e.name.as_str() == Some(name)).expect("the entry");
    Attrs4::from_fattr4(&e.attrs, AttrUse::Reply).unwrap()
}

/// READDIR's attributes of an entry another client holds a write
/// delegation on go the way GETATTR's do, as knfsd's (its entries'
/// attributes are encoded as GETATTR's): the holder is asked with
/// CB_GETATTR; one that does not answer gets the delegation recalled and
/// the entry NFS4ERR_DELAY as its `rdattr_error`, or the whole READDIR if
/// that was not asked for.
#[test]
fn readdir_attributes_of_a_write_delegated_file_ask_the_holder_or_wait_for_the_recall() {
    let (w, mut a, mut b, fh, deleg) = a_write_delegated_new_file();
    let attrs1 = getattr_of(&mut a, &fh);
    let with_error = [FATTR4_RDATTR_ERROR, FATTR4_CHANGE, FATTR4_SIZE];
    let res = b_runs_while_a_answers(&mut a, &mut b, readdir_of_dir(&with_error), attrs1.change + 1, 5);
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
    let f = entry_attrs(&res, "f");
    assert_eq!(f.size, Some(5), "the holder's size");
    assert_ne!(f.change, Some(attrs1.change), "the holder changed it");
    assert_eq!(f.rdattr_error, None);
    // The holder's own READDIR asks nothing: the server's size.
    let (_, res) = a.run(readdir_of_dir(&with_error));
    assert_eq!(entry_attrs(&res, "f").size, Some(0));
    assert!(a.callbacks().is_empty());
    // No answer in time: the entry says NFS4ERR_DELAY; the recall follows
    // the late answer.
    let (_, res) = b.run(readdir_of_dir(&with_error));
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
    assert_eq!(entry_attrs(&res, "f").rdattr_error, Some(Nfsstat4::Delay));
    let (header, args) = callback_within_2s(&a);
    assert!(matches!(args.argarray[1], NfsCbArgop4::CbGetattr(_)), "{args:?}");
    a.reply_with(&header, Some(&args), Nfsstat4::Delay, NfsCbResop4::CbGetattr(Nfs4Result::Fail(Nfsstat4::Delay)));
    w.p.callbacks.pump(&w.p, Instant::now());
    let (header, args) = callback_within_2s(&a);
    assert!(matches!(args.argarray[1], NfsCbArgop4::CbRecall(_)), "{args:?}");
    // Recalled, and no rdattr_error asked for: the READDIR waits.
    let (_, res) = b.run(readdir_of_dir(&[FATTR4_SIZE]));
    assert_eq!(res.status, Nfsstat4::Delay, "{res:?}");
    // Attributes the holder's writes do not change are answered.
    b.ok(readdir_of_dir(&[FATTR4_MODE, FATTR4_FILEID]));
    a.answer(&header, Some(&args), Nfsstat4::Ok);
    a.ok(vec![putfh(&fh), delegreturn(deleg)]);
    let (_, res) = b.run(readdir_of_dir(&[FATTR4_SIZE]));
    assert_eq!(entry_attrs(&res, "f").size, Some(0), "returned without writing back: the server's size");
}

/// An OPEN that gets a read delegation reads nothing of the file's
/// attributes for it: only a write delegation's CB_GETATTR answers are
/// measured against the file's change and size when it was granted.
#[test]
fn a_read_delegation_costs_no_getattr_and_a_write_delegation_one() {
    use keel_store::sim::{SimFault, SimPoint};
    let w = world_with(true, true);
    let mut a = Client::new(&w, "10.0.0.5:700", 1, "a");
    a.answer_probe();
    let (_, fh) = open_in_dir(&mut a, "f", "o0", OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_NO_DELEG);
    let fileid = object(&w, &fh).fileid();
    let store = w.p.exports.store.clone();
    let mut by_fh = vec![putfh(&fh)];
    by_fh.push(NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_READ,
        share_deny: 0,
        owner: OpenOwner4 { clientid: 0, owner: Opaque(Bytes::from_static(b"o1")) },
        openhow: Openflag4::Open4Nocreate,
        claim: OpenClaim4::ClaimFh,
    }));
    // The file's next GETATTR fails: the read OPEN does none.
    store.inject(SimFault::fail(SimPoint::Getattr, libc::EIO).on(fileid));
    let res = a.ok(by_fh.clone());
    let NfsResop4::Open(Nfs4Result::Ok(o)) = &res[2] else { panic!("OPEN: {res:?}") };
    assert!(read_delegation(o).is_some(), "{:?}", o.delegation);
    assert_eq!(store.faults_struck(), 0, "no GETATTR of the file");
    store.clear_faults();
    // A write delegation's OPEN reads them once (the same fault declines it).
    let mut b = Client::new(&w, "10.0.0.6:701", 2, "b");
    b.answer_probe();
    let (_, g) = open_in_dir(&mut b, "g", "o0", OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_NO_DELEG);
    let mut ops = vec![putfh(&g)];
    ops.push(NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: 0,
        owner: OpenOwner4 { clientid: 0, owner: Opaque(Bytes::from_static(b"o2")) },
        openhow: Openflag4::Open4Nocreate,
        claim: OpenClaim4::ClaimFh,
    }));
    let struck = store.faults_struck();
    store.inject(SimFault::fail(SimPoint::Getattr, libc::EIO).on(object(&w, &g).fileid()));
    let res = b.ok(ops);
    let NfsResop4::Open(Nfs4Result::Ok(o)) = &res[2] else { panic!("OPEN: {res:?}") };
    assert_eq!(store.faults_struck(), struck + 1, "one GETATTR of the file");
    assert_eq!(o.delegation, OpenDelegation4::OpenDelegateNone, "no baseline: no write delegation");
}

/// A lease that is never broken, for the lease table alone.
struct UnbrokenLease;

impl keel_store::ReadLease for UnbrokenLease {
    fn is_broken(&self) -> bool {
        false
    }

    fn break_wait(&self) -> Duration {
        Duration::ZERO
    }
}

/// A CB_GETATTR answer reporting a change moves the file's times (a
/// system call) without the lease table's lock, which every OPEN that
/// gets a delegation, every return and the callback thread's tick take;
/// two answers of one delegation are accounted one after the other, so
/// that the second, reporting the same news, touches nothing.
#[test]
fn a_cb_getattr_answer_is_accounted_outside_the_lease_table_s_lock_one_at_a_time() {
    use crate::callback::HolderAttrs;
    use crate::deleg::DelegationLeases;
    use std::sync::mpsc;
    let leases = DelegationLeases::<UnbrokenLease>::new();
    let stateid = Stateid4 { seqid: 1, other: [7; 12] };
    let granted = HolderAttrs { change: 1, size: 0 };
    leases.hold(keel_nfs4_state::ClientId(1), stateid, Bytes::from_static(b"f"), UnbrokenLease, Some(granted));
    let news = HolderAttrs { change: 2, size: 5 };
    let (touching_tx, touching_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (table_tx, table_rx) = mpsc::channel();
    let (first, second, table_free, second_waited) = std::thread::scope(|scope| {
        let leases = &leases;
        let first = scope.spawn(move || {
            leases.account(&stateid, news, 0, |_| {
                touching_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                Ok::<(), &str>(())
            })
        });
        touching_rx.recv().unwrap();
        scope.spawn(|| table_tx.send(leases.len()).unwrap());
        let table_free = table_rx.recv_timeout(Duration::from_secs(2));
        let second = scope.spawn(|| leases.account(&stateid, news, 0, |_| Err("touched again")));
        std::thread::sleep(Duration::from_millis(20));
        let second_waited = !second.is_finished();
        go_tx.send(()).unwrap();
        (first.join().unwrap(), second.join().unwrap(), table_free, second_waited)
    });
    assert_eq!(table_free, Ok(1), "the table is not locked while the times are set");
    assert!(second_waited, "the second answer waits for the first's accounting");
    assert_eq!(first, Some(Ok(true)));
    assert_eq!(second, Some(Ok(false)), "the same news: nothing touched again");
}

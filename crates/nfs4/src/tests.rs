//! The program driven with whole COMPOUND calls, as a client sends them,
//! over a simulated store.

use std::sync::Arc;

use bytes::Bytes;
use keel_exports::{
    Access, ClientOptions, ClientRule, ExportTable, HostMatch, PseudoKey, SecFlavor, SecFlavors, Squash,
};
use keel_nfs4_proto::*;
use keel_nfs4_state::{BootEpoch, MemoryRecords, StateConfig};
use keel_rpc::gss::GssService;
use keel_rpc::{CallContext, Credential, TabledProgram};
use keel_store::sim::SimStore;
use keel_store::{Cred, Object, Store};
use keel_xdr::{Decode, Decoder, Encode, Encoder, Opaque};

use crate::{MinorVersions, Nfs4Config, Nfs4Program};

type Program = Nfs4Program<SimStore>;

const CLIENT_A: &str = "10.0.0.5:700";
const CLIENT_B: &str = "10.0.0.6:701";

fn rule(host: HostMatch, access: Access, squash: Squash) -> ClientRule {
    ClientRule { host, options: ClientOptions { access, squash, secure: false, ..ClientOptions::default() } }
}

fn net(addr: &str, prefix_len: u8) -> HostMatch {
    HostMatch::Net { addr: addr.parse().unwrap(), prefix_len }
}

/// Exports 1 at /srv/a (rw for 10/8, no squash), 2 at /srv/b (only
/// 192.168.1.1), 3 at /srv/ro (ro for everyone), 4 at /srv/sq (rw,
/// root squashed).
fn program() -> Arc<Program> {
    let store = Arc::new(SimStore::with_exports(7, &[(1, "/srv/a"), (2, "/srv/b"), (3, "/srv/ro"), (4, "/srv/sq")]));
    let exports = ExportTable::new(
        store,
        vec![
            (1, vec![rule(net("10.0.0.0", 8), Access::ReadWrite, Squash::None)]),
            (
                2,
                vec![rule(
                    HostMatch::Net { addr: "192.168.1.1".parse().unwrap(), prefix_len: 32 },
                    Access::ReadWrite,
                    Squash::None,
                )],
            ),
            (3, vec![rule(HostMatch::Any, Access::ReadOnly, Squash::None)]),
            (4, vec![rule(HostMatch::Any, Access::ReadWrite, Squash::Root)]),
        ],
    );
    program_over(Arc::new(exports), StateConfig::default())
}

fn program_over(exports: Arc<ExportTable<SimStore>>, state: StateConfig) -> Arc<Program> {
    Arc::new(unshared_program_over(exports, state))
}

fn unshared_program_over(exports: Arc<ExportTable<SimStore>>, state: StateConfig) -> Program {
    let config = Nfs4Config {
        minors: MinorVersions { v41: true, v42: true },
        state,
        epoch: BootEpoch::new(5).unwrap(),
        session_key: [3; 16],
        pseudo_key: PseudoKey::from_bytes([9; 16]),
        server_owner: Bytes::from_static(b"test-server"),
    };
    Nfs4Program::new(exports, config, Box::new(MemoryRecords::new())).unwrap()
}

/// One COMPOUND call from `peer` as `cred`: the reply.
fn call(p: &Program, peer: &str, cred: &Credential, args: &Compound4Args) -> Compound4Res {
    let res = try_call(p, peer, cred, args).expect("a COMPOUND is answered");
    if let Some(last) = res.resarray.last() {
        assert_eq!(res.status, last.status(), "a COMPOUND's status is its last result's");
    }
    res
}

/// A client with a session.
struct Client {
    p: Arc<Program>,
    peer: &'static str,
    cred: Credential,
    session: Sessionid4,
    clientid: u64,
    seq: u32,
}

fn root() -> Credential {
    Credential::sys(Bytes::from_static(b"client"), 0, 0, &[])
}

impl Client {
    fn new(p: &Arc<Program>, peer: &'static str, owner: &str) -> Client {
        Client::with_fore(p, peer, owner, root(), fore(1 << 20))
    }

    /// A client with a session that sent RECLAIM_COMPLETE, as the Linux
    /// client does before anything else.
    fn with_fore(p: &Arc<Program>, peer: &'static str, owner: &str, cred: Credential, fore: ChannelAttrs4) -> Client {
        let mut c = Client::reclaiming(p, peer, owner, cred, fore);
        c.ok(vec![NfsArgop4::ReclaimComplete(ReclaimComplete4Args { rca_one_fs: false })]);
        c
    }

    /// A client with a session that has not sent RECLAIM_COMPLETE yet.
    fn reclaiming(p: &Arc<Program>, peer: &'static str, owner: &str, cred: Credential, fore: ChannelAttrs4) -> Client {
        let eid = ExchangeId4Args {
            eia_clientowner: ClientOwner4 {
                co_verifier: [1; 8],
                co_ownerid: Opaque(Bytes::copy_from_slice(owner.as_bytes())),
            },
            eia_flags: 0,
            eia_state_protect: StateProtect4A::Sp4None,
            eia_client_impl_id: None,
        };
        let res = call(p, peer, &cred, &compound(1, vec![NfsArgop4::ExchangeId(eid)]));
        let NfsResop4::ExchangeId(Nfs4Result::Ok(eid)) = &res.resarray[0] else { panic!("EXCHANGE_ID: {res:?}") };
        let cs = CreateSession4Args {
            csa_clientid: eid.eir_clientid,
            csa_sequence: eid.eir_sequenceid,
            csa_flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            csa_fore_chan_attrs: fore,
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
        let res = call(p, peer, &cred, &compound(1, vec![NfsArgop4::CreateSession(cs)]));
        let NfsResop4::CreateSession(Nfs4Result::Ok(cs)) = &res.resarray[0] else { panic!("CREATE_SESSION: {res:?}") };
        Client { p: p.clone(), peer, cred, session: cs.csr_sessionid, clientid: eid.eir_clientid, seq: 0 }
    }

    fn sequence(&mut self, cachethis: bool) -> NfsArgop4 {
        self.seq += 1;
        NfsArgop4::Sequence(Sequence4Args {
            sa_sessionid: self.session,
            sa_sequenceid: self.seq,
            sa_slotid: 0,
            sa_highest_slotid: 0,
            sa_cachethis: cachethis,
        })
    }

    /// SEQUENCE and `ops` in minor version 2.
    fn run(&mut self, ops: Vec<NfsArgop4>) -> Compound4Res {
        self.run_minor(2, ops)
    }

    fn run_minor(&mut self, minor: u32, ops: Vec<NfsArgop4>) -> Compound4Res {
        let mut all = vec![self.sequence(false)];
        all.extend(ops);
        let res = call(&self.p, self.peer, &self.cred, &compound(minor, all));
        assert!(matches!(res.resarray[0], NfsResop4::Sequence(Nfs4Result::Ok(_))), "SEQUENCE: {res:?}");
        res
    }

    /// Runs `ops` and expects them all to succeed.
    fn ok(&mut self, ops: Vec<NfsArgop4>) -> Vec<NfsResop4> {
        let res = self.run(ops);
        assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
        res.resarray
    }

    /// Runs `ops` and gives the status of the last one evaluated.
    fn status(&mut self, ops: Vec<NfsArgop4>) -> Nfsstat4 {
        self.run(ops).status
    }
}

fn compound(minor: u32, ops: Vec<NfsArgop4>) -> Compound4Args {
    Compound4Args { tag: Tag4::default(), minorversion: minor, argarray: ops }
}

fn fore(response: u32) -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_maxrequestsize: 1 << 20,
        ca_maxresponsesize: response,
        ca_maxresponsesize_cached: 4096,
        ca_maxoperations: 16,
        ca_maxrequests: 4,
        ..ChannelAttrs4::default()
    }
}

fn lookup(name: &str) -> NfsArgop4 {
    NfsArgop4::Lookup(Lookup4Args { objname: name.into() })
}

fn getattr(attrs: &[u32]) -> NfsArgop4 {
    NfsArgop4::Getattr(Getattr4Args { attr_request: Bitmap4::from_bits(attrs.iter().copied()) })
}

fn putfh(handle: &Bytes) -> NfsArgop4 {
    NfsArgop4::Putfh(Putfh4Args { object: NfsFh4(handle.clone()) })
}

fn open_create(name: &str, owner: &str, access: u32, deny: u32) -> NfsArgop4 {
    let mode = Attrs4 { mode: Some(0o644), ..Attrs4::default() };
    NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: access,
        share_deny: deny,
        owner: OpenOwner4 { clientid: 0, owner: Opaque(Bytes::copy_from_slice(owner.as_bytes())) },
        openhow: Openflag4::Open4Create(Createhow4::Unchecked4(mode.to_fattr4(&Attrs4::known()))),
        claim: OpenClaim4::ClaimNull(name.into()),
    })
}

fn attrs_of(res: &NfsResop4) -> Attrs4 {
    let NfsResop4::Getattr(Nfs4Result::Ok(g)) = res else { panic!("GETATTR: {res:?}") };
    Attrs4::from_fattr4(&g.obj_attributes, AttrUse::Reply).unwrap()
}

fn handle_of(res: &NfsResop4) -> Bytes {
    let NfsResop4::Getfh(Nfs4Result::Ok(g)) = res else { panic!("GETFH: {res:?}") };
    g.object.0.clone()
}

fn stateid_of(res: &NfsResop4) -> Stateid4 {
    let NfsResop4::Open(Nfs4Result::Ok(o)) = res else { panic!("OPEN: {res:?}") };
    o.stateid
}

#[test]
fn minor_version_0_and_unknown_ones_get_a_mismatch_and_no_results() {
    let p = program();
    for minor in [0, 3, u32::MAX] {
        let res = call(&p, CLIENT_A, &root(), &compound(minor, vec![NfsArgop4::Putrootfh(())]));
        assert_eq!((res.status, res.resarray.len()), (Nfsstat4::MinorVersMismatch, 0), "minor {minor}");
    }
}

#[test]
fn a_compound_starts_with_sequence_or_is_one_operation_allowed_alone() {
    let p = program();
    let res = call(&p, CLIENT_A, &root(), &compound(1, vec![NfsArgop4::Putrootfh(()), NfsArgop4::Getfh(())]));
    assert_eq!((res.status, res.resarray.len()), (Nfsstat4::OpNotInSession, 1));
    let destroy = NfsArgop4::DestroyClientid(DestroyClientid4Args { dca_clientid: 99 });
    let res = call(&p, CLIENT_A, &root(), &compound(1, vec![destroy, NfsArgop4::Putrootfh(())]));
    assert_eq!((res.status, res.resarray.len()), (Nfsstat4::NotOnlyOp, 1));

    let mut a = Client::new(&p, CLIENT_A, "a");
    let seq = NfsArgop4::Sequence(Sequence4Args { sa_sessionid: a.session, ..Sequence4Args::default() });
    assert_eq!(a.status(vec![seq]), Nfsstat4::SequencePos);
    assert_eq!(a.status(vec![NfsArgop4::Getfh(())]), Nfsstat4::Nofilehandle);
    // A 4.0-only operation in a 4.1 session.
    assert_eq!(a.status(vec![NfsArgop4::Renew(Renew4Args { clientid: a.clientid })]), Nfsstat4::Notsupp);
    // Nothing after the first failure runs.
    let res = a.run(vec![putfh(&Bytes::from_static(b"junk")), NfsArgop4::Putrootfh(())]);
    assert_eq!((res.status, res.resarray.len()), (Nfsstat4::Badhandle, 2));
}

#[test]
fn an_operation_of_4_2_is_illegal_in_4_1_and_an_unknown_number_in_any() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let seek = NfsArgop4::Seek(Seek4Args {
        sa_stateid: Stateid4::ANONYMOUS,
        sa_offset: 0,
        sa_what: DataContent4::Nfs4ContentData,
    });
    let res = a.run_minor(1, vec![NfsArgop4::Putrootfh(()), seek]);
    assert_eq!(res.status, Nfsstat4::OpIllegal);
    assert!(matches!(res.resarray[2], NfsResop4::Illegal(Nfsstat4::OpIllegal)), "{res:?}");
    let res = a.run(vec![NfsArgop4::Illegal(9999)]);
    assert_eq!(res.status, Nfsstat4::OpIllegal);
}

#[test]
fn a_session_bounds_operations_and_reply_size() {
    let p = program();
    let mut small = Client::with_fore(&p, CLIENT_A, "small", root(), fore(256));
    let ops = vec![NfsArgop4::Putrootfh(()); 15];
    assert_eq!(small.run(ops).status, Nfsstat4::Ok, "16 operations with SEQUENCE");
    let mut all = vec![small.sequence(false)];
    all.extend(vec![NfsArgop4::Putrootfh(()); 16]);
    let res = call(&p, CLIENT_A, &root(), &compound(2, all));
    assert_eq!((res.status, res.resarray.len()), (Nfsstat4::TooManyOps, 1));
    // The slot did not move.
    small.seq -= 1;
    // Every attribute of the root does not fit in 256 bytes.
    let res = small.run(vec![NfsArgop4::Putrootfh(()), getattr(crate::ops::attr_supported_bits())]);
    assert_eq!((res.status, res.resarray.len()), (Nfsstat4::RepTooBig, 3));
}

#[test]
fn a_retransmission_is_answered_from_the_slot_and_runs_once() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let mkdir = NfsArgop4::Create(Create4Args {
        objtype: Createtype4::Dir,
        objname: "d".into(),
        createattrs: Fattr4::default(),
    });
    let ops = vec![a.sequence(true), NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a"), mkdir];
    let first = call(&p, CLIENT_A, &root(), &compound(2, ops.clone()));
    assert_eq!(first.status, Nfsstat4::Ok, "{first:?}");
    let again = call(&p, CLIENT_A, &root(), &compound(2, ops));
    assert_eq!(again, first, "the cached reply, not EXIST from a second CREATE");
    // The slot moved on: an old sequence ID is misordered.
    let mut stale = vec![a.sequence(false)];
    if let NfsArgop4::Sequence(s) = &mut stale[0] {
        s.sa_sequenceid = 7;
    }
    let res = call(&p, CLIENT_A, &root(), &compound(2, stale));
    assert_eq!(res.status, Nfsstat4::SeqMisordered);
}

#[test]
fn client_ids_and_sessions_are_guarded() {
    let p = program();
    let a = Client::new(&p, CLIENT_A, "a");
    let destroy = NfsArgop4::DestroyClientid(DestroyClientid4Args { dca_clientid: a.clientid });
    let res = call(&p, CLIENT_A, &root(), &compound(1, vec![destroy]));
    assert_eq!(res.status, Nfsstat4::ClientidBusy, "it has a session");
    // Another principal presenting the same owner cannot take it over.
    let other = Credential::sys(Bytes::from_static(b"intruder"), 0, 0, &[]);
    let eid = ExchangeId4Args {
        eia_clientowner: ClientOwner4 { co_verifier: [2; 8], co_ownerid: Opaque(Bytes::from_static(b"a")) },
        eia_flags: 0,
        eia_state_protect: StateProtect4A::Sp4None,
        eia_client_impl_id: None,
    };
    let res = call(&p, CLIENT_B, &other, &compound(1, vec![NfsArgop4::ExchangeId(eid)]));
    assert_eq!(res.status, Nfsstat4::ClidInuse);
    let seq = NfsArgop4::Sequence(Sequence4Args { sa_sessionid: [0; 16], ..Sequence4Args::default() });
    assert_eq!(call(&p, CLIENT_A, &root(), &compound(1, vec![seq])).status, Nfsstat4::Badsession);
}

#[test]
fn the_pseudo_root_leads_to_the_admitted_exports_only() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let res = a.ok(vec![NfsArgop4::Putrootfh(()), lookup("srv"), readdir()]);
    assert_eq!(names(&res[3]), ["a", "ro", "sq"], "export 2 does not admit 10.0.0.5");
    let res = a.ok(vec![
        NfsArgop4::Putrootfh(()),
        getattr(&[FATTR4_FSID]),
        lookup("srv"),
        lookup("a"),
        getattr(&[FATTR4_FSID, FATTR4_TYPE]),
        NfsArgop4::Getfh(()),
        NfsArgop4::Lookupp(()),
        NfsArgop4::Getfh(()),
    ]);
    let (pseudo, export) = (attrs_of(&res[2]), attrs_of(&res[5]));
    assert_ne!(pseudo.fsid, export.fsid, "an export is a file system of its own");
    // The export root's handle is the store's, the one NFSv3 gives.
    let store_root = p.exports.store.lookup_path(1, b"/").unwrap();
    assert_eq!(handle_of(&res[6]), *store_root.handle());
    let srv = handle_of(&res[8]);
    assert_eq!(srv[0], 0xff, "back in the pseudo file system");
    assert_eq!(a.status(vec![putfh(&srv), lookup("b")]), Nfsstat4::Noent);
    // Nor can a handle of export 2 be used.
    let b_root = p.exports.store.lookup_path(2, b"/").unwrap();
    assert_eq!(a.status(vec![putfh(b_root.handle())]), Nfsstat4::Stale);
    // A forged pseudo handle.
    let mut forged = srv.to_vec();
    forged[17] ^= 1;
    assert_eq!(a.status(vec![putfh(&Bytes::from(forged))]), Nfsstat4::Badhandle);
    // The pseudo file system is read-only.
    let mkdir = NfsArgop4::Create(Create4Args {
        objtype: Createtype4::Dir,
        objname: "x".into(),
        createattrs: Fattr4::default(),
    });
    assert_eq!(a.status(vec![putfh(&srv), mkdir]), Nfsstat4::Rofs);
    assert_eq!(a.status(vec![NfsArgop4::Putrootfh(()), NfsArgop4::Lookupp(())]), Nfsstat4::Noent);
}

fn readdir() -> NfsArgop4 {
    NfsArgop4::Readdir(Readdir4Args {
        cookie: 0,
        cookieverf: [0; 8],
        dircount: 4096,
        maxcount: 8192,
        attr_request: Bitmap4::from_bits([FATTR4_TYPE, FATTR4_FILEID, FATTR4_MOUNTED_ON_FILEID]),
    })
}

fn names(res: &NfsResop4) -> Vec<String> {
    let NfsResop4::Readdir(Nfs4Result::Ok(r)) = res else { panic!("READDIR: {res:?}") };
    assert!(r.reply.eof);
    let mut names: Vec<String> = r.reply.entries.iter().map(|e| e.name.as_str().unwrap().to_string()).collect();
    names.sort();
    names
}

fn write(stateid: Stateid4, offset: u64, data: &'static [u8]) -> NfsArgop4 {
    NfsArgop4::Write(Write4Args { stateid, offset, stable: StableHow4::FileSync4, data: Bytes::from_static(data) })
}

fn read(stateid: Stateid4, count: u32) -> NfsArgop4 {
    NfsArgop4::Read(Read4Args { stateid, offset: 0, count })
}

#[test]
fn open_write_read_close_through_the_open_stateid() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let both = OPEN4_SHARE_ACCESS_BOTH;
    let res = a.ok(vec![
        NfsArgop4::Putrootfh(()),
        lookup("srv"),
        lookup("a"),
        open_create("f", "o1", both, 0),
        NfsArgop4::Getfh(()),
    ]);
    let stateid = stateid_of(&res[4]);
    let fh = handle_of(&res[5]);
    let res =
        a.ok(vec![putfh(&fh), write(stateid, 0, b"hello"), read(stateid, 100), getattr(&[FATTR4_SIZE, FATTR4_OWNER])]);
    let NfsResop4::Write(Nfs4Result::Ok(w)) = &res[2] else { panic!() };
    assert_eq!((w.count, w.committed, w.writeverf), (5, StableHow4::FileSync4, p.exports.store.write_verifier()));
    let NfsResop4::Read(Nfs4Result::Ok(r)) = &res[3] else { panic!() };
    assert_eq!((&r.data[..], r.eof), (&b"hello"[..], true));
    let attrs = attrs_of(&res[4]);
    assert_eq!((attrs.size, attrs.owner.unwrap().as_str()), (Some(5), Some("0")));
    // The handle is the store's: an NFSv3 client names the same file.
    let root = p.exports.store.lookup_path(1, b"/").unwrap();
    let who = p.exports.store.act_as(&Cred::ROOT).unwrap();
    let (file, _) = p.exports.store.lookup(&who, &root, b"f").unwrap();
    assert_eq!(*file.handle(), fh);
    let close = NfsArgop4::Close(Close4Args { seqid: 0, open_stateid: stateid });
    a.ok(vec![putfh(&fh), close]);
    assert_eq!(a.status(vec![putfh(&fh), read(stateid, 10)]), Nfsstat4::BadStateid);
    // A stateid of another client is bad too.
    let res = a.ok(vec![
        NfsArgop4::Putrootfh(()),
        lookup("srv"),
        lookup("a"),
        open_create("f", "o1", OPEN4_SHARE_ACCESS_READ, 0),
    ]);
    let mine = stateid_of(&res[4]);
    let mut b = Client::new(&p, CLIENT_B, "b");
    assert_eq!(b.status(vec![putfh(&fh), read(mine, 10)]), Nfsstat4::BadStateid);
}

#[test]
fn share_reservations_hold_between_two_clients() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let mut b = Client::new(&p, CLIENT_B, "b");
    let dir = vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a")];
    let mut ops = dir.clone();
    ops.push(open_create("shared", "oa", OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_WRITE));
    a.ok(ops);
    let mut ops = dir.clone();
    ops.push(open_create("shared", "ob", OPEN4_SHARE_ACCESS_WRITE, 0));
    assert_eq!(b.status(ops), Nfsstat4::ShareDenied);
    let mut ops = dir;
    ops.push(open_create("shared", "ob", OPEN4_SHARE_ACCESS_READ, 0));
    b.ok(ops);
}

#[test]
fn read_only_and_squashing_exports_hold_as_for_nfsv3() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let ro = vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("ro")];
    let mut ops = ro.clone();
    ops.push(open_create("f", "o", OPEN4_SHARE_ACCESS_WRITE, 0));
    assert_eq!(a.status(ops), Nfsstat4::Rofs);
    let mut ops = ro;
    let mode = Attrs4 { mode: Some(0o700), ..Attrs4::default() }.to_fattr4(&Attrs4::known());
    ops.push(NfsArgop4::Setattr(Setattr4Args { stateid: Stateid4::ANONYMOUS, obj_attributes: mode }));
    assert_eq!(a.status(ops), Nfsstat4::Rofs);
    let res = a.ok(vec![
        NfsArgop4::Putrootfh(()),
        lookup("srv"),
        lookup("sq"),
        open_create("mine", "o", OPEN4_SHARE_ACCESS_BOTH, 0),
        getattr(&[FATTR4_OWNER, FATTR4_OWNER_GROUP]),
    ]);
    let attrs = attrs_of(&res[5]);
    assert_eq!((attrs.owner.unwrap().as_str(), attrs.owner_group.unwrap().as_str()), (Some("65534"), Some("65534")));
    // A squashed root cannot give the file away.
    let owner = Attrs4 { owner: Some("0".into()), ..Attrs4::default() }.to_fattr4(&Attrs4::known());
    let chown = NfsArgop4::Setattr(Setattr4Args { stateid: Stateid4::ANONYMOUS, obj_attributes: owner });
    let res = a.run(vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("sq"), lookup("mine"), chown]);
    assert_eq!(res.status, Nfsstat4::Perm);
    // Owners are numbers: a name is refused.
    let named = Attrs4 { owner: Some("root@example".into()), ..Attrs4::default() }.to_fattr4(&Attrs4::known());
    let chown = NfsArgop4::Setattr(Setattr4Args { stateid: Stateid4::ANONYMOUS, obj_attributes: named });
    let res = a.run(vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a"), chown]);
    assert_eq!(res.status, Nfsstat4::Badowner);
}

#[test]
fn owner_names_of_the_configured_domain_are_the_database_s_ids() {
    let store = Arc::new(SimStore::with_exports(7, &[(1, "/srv/a")]));
    let exports = ExportTable::new(store, vec![(1, vec![rule(net("10.0.0.0", 8), Access::ReadWrite, Squash::None)])]);
    let program = unshared_program_over(Arc::new(exports), StateConfig::default())
        .with_owner_names(crate::OwnerNames::new("example.org", Arc::new(crate::owners::TestNames)));
    let p = Arc::new(program);
    let mut a = Client::new(&p, CLIENT_A, "a");
    let file = || vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a"), lookup("f")];
    a.ok(vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a"), open_create("f", "o", OPEN4_SHARE_ACCESS_BOTH, 0)]);
    let chown = |owner: &str, group: &str| {
        let attrs = Attrs4 { owner: Some(owner.into()), owner_group: Some(group.into()), ..Attrs4::default() };
        NfsArgop4::Setattr(Setattr4Args {
            stateid: Stateid4::ANONYMOUS,
            obj_attributes: attrs.to_fattr4(&Attrs4::known()),
        })
    };
    let mut ops = file();
    ops.extend([chown("alice@EXAMPLE.org", "staff@example.org"), getattr(&[FATTR4_OWNER, FATTR4_OWNER_GROUP])]);
    let res = a.ok(ops);
    let attrs = attrs_of(res.last().unwrap());
    assert_eq!((attrs.owner.unwrap().as_str(), attrs.owner_group.unwrap().as_str()), (Some("1001"), Some("50")));
    // Another domain, an unknown user, a user's name as a group.
    for (owner, group) in [("alice@example.com", "50"), ("mallory@example.org", "50"), ("1001", "alice@example.org")] {
        let mut ops = file();
        ops.push(chown(owner, group));
        assert_eq!(a.run(ops).status, Nfsstat4::Badowner, "{owner} {group}");
    }
}

/// Under Kerberos, with a domain given, owners in replies are names (the
/// client's ids need not be the server's); under AUTH_SYS they stay
/// numbers, and so does an id the database cannot name.
#[test]
fn a_kerberos_caller_is_told_owners_as_names_of_the_domain_and_a_sys_caller_as_numbers() {
    let store = Arc::new(SimStore::with_exports(7, &[(1, "/srv/a")]));
    let mut r = rule(HostMatch::Any, Access::ReadWrite, Squash::None);
    r.options.sec = SecFlavors::new(&[SecFlavor::Krb5, SecFlavor::Sys]).unwrap();
    let exports = ExportTable::new(store, vec![(1, vec![r])]);
    let program = unshared_program_over(Arc::new(exports), StateConfig::default())
        .with_owner_names(crate::OwnerNames::new("example.org", Arc::new(crate::owners::TestNames)));
    let p = Arc::new(program);
    let alice = Credential::gss("alice@KEEL.TEST", GssService::None, Some(Cred::new(1001, 50, &[])));
    let mut k = Client::with_fore(&p, CLIENT_A, "k", alice, fore(1 << 20));
    let mut sys = Client::new(&p, CLIENT_B, "s");
    let file = |name: &str| vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a"), lookup(name)];
    let owners = |c: &mut Client, name: &str| {
        let mut ops = file(name);
        ops.push(getattr(&[FATTR4_OWNER, FATTR4_OWNER_GROUP]));
        let res = c.ok(ops);
        let attrs = attrs_of(res.last().unwrap());
        (attrs.owner.unwrap().as_str().unwrap().to_owned(), attrs.owner_group.unwrap().as_str().unwrap().to_owned())
    };
    k.ok(vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a"), open_create("f", "o", OPEN4_SHARE_ACCESS_BOTH, 0)]);
    assert_eq!(owners(&mut k, "f"), ("alice@example.org".into(), "staff@example.org".into()));
    assert_eq!(owners(&mut sys, "f"), ("1001".into(), "50".into()));
    // An id without a name is a number, to either caller.
    let chown = Attrs4 { owner: Some("4242".into()), owner_group: Some("4343".into()), ..Attrs4::default() };
    let mut ops = file("f");
    ops.push(NfsArgop4::Setattr(Setattr4Args {
        stateid: Stateid4::ANONYMOUS,
        obj_attributes: chown.to_fattr4(&Attrs4::known()),
    }));
    sys.ok(ops);
    assert_eq!(owners(&mut k, "f"), ("4242".into(), "4343".into()));
    // Without a domain, numbers under Kerberos too.
    let p = sec_program();
    let mut k = Client::with_fore(&p, CLIENT_A, "k", kerberos(GssService::None), fore(1 << 20));
    let res = k.ok(vec![
        NfsArgop4::Putrootfh(()),
        lookup("srv"),
        lookup("k"),
        open_create("g", "o", OPEN4_SHARE_ACCESS_BOTH, 0),
        getattr(&[FATTR4_OWNER]),
    ]);
    assert_eq!(attrs_of(res.last().unwrap()).owner.unwrap().as_str(), Some("10001"));
}

#[test]
fn directories_and_names() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let dir = || vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a")];
    let mkdir = |n: &str| {
        NfsArgop4::Create(Create4Args { objtype: Createtype4::Dir, objname: n.into(), createattrs: Fattr4::default() })
    };
    let mut ops = dir();
    ops.extend([mkdir("d"), NfsArgop4::Getfh(())]);
    let res = a.ok(ops);
    let d = handle_of(&res[5]);
    let symlink = NfsArgop4::Create(Create4Args {
        objtype: Createtype4::Lnk("target".into()),
        objname: "l".into(),
        createattrs: Fattr4::default(),
    });
    let res = a.ok(vec![putfh(&d), symlink, NfsArgop4::Readlink(())]);
    let NfsResop4::Readlink(Nfs4Result::Ok(l)) = &res[3] else { panic!() };
    assert_eq!(l.link.as_bytes(), b"target");
    // RENAME from the saved directory to the current one.
    let mut ops = dir();
    ops.extend([
        NfsArgop4::Savefh(()),
        putfh(&d),
        NfsArgop4::Rename(Rename4Args { oldname: "d".into(), newname: "e".into() }),
    ]);
    // "d" is renamed inside itself? No: the source directory is the
    // export root, the target "d" itself, which the store refuses.
    assert_ne!(a.status(ops), Nfsstat4::Ok);
    let mut ops = dir();
    ops.extend([NfsArgop4::Savefh(()), NfsArgop4::Rename(Rename4Args { oldname: "d".into(), newname: "e".into() })]);
    a.ok(ops);
    let mut ops = dir();
    ops.extend([lookup("e"), lookup("l"), NfsArgop4::Getfh(())]);
    a.ok(ops);
    let long = "n".repeat(256);
    for (bad, status) in [
        (".", Nfsstat4::Badname),
        ("..", Nfsstat4::Badname),
        ("a/b", Nfsstat4::Badname),
        ("", Nfsstat4::Inval),
        (long.as_str(), Nfsstat4::Nametoolong),
    ] {
        let mut ops = dir();
        ops.push(lookup(bad));
        assert_eq!(a.status(ops), status, "{bad:?}");
    }
    // Names are bytes, as on the exported file system (and for NFSv3).
    let mut ops = dir();
    let latin1 = Component4(Bytes::from_static(b"caf\xe9"));
    ops.extend([NfsArgop4::Create(Create4Args {
        objtype: Createtype4::Dir,
        objname: latin1.clone(),
        createattrs: Fattr4::default(),
    })]);
    a.ok(ops);
    let mut ops = dir();
    ops.push(NfsArgop4::Lookup(Lookup4Args { objname: latin1.clone() }));
    a.ok(ops);
    let mut ops = dir();
    ops.push(NfsArgop4::Remove(Remove4Args { target: latin1 }));
    a.ok(ops);
    let mut ops = dir();
    ops.push(NfsArgop4::Remove(Remove4Args { target: "e".into() }));
    assert_eq!(a.status(ops), Nfsstat4::Notempty);
    let mut ops = dir();
    ops.extend([lookup("e"), NfsArgop4::Remove(Remove4Args { target: "l".into() })]);
    a.ok(ops);
    let mut ops = dir();
    ops.push(NfsArgop4::Remove(Remove4Args { target: "e".into() }));
    a.ok(ops);
    let mut ops = dir();
    ops.push(readdir());
    assert!(names(&a.ok(ops)[4]).is_empty());
}

#[test]
fn verify_compares_attributes_as_encoded() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let res = a.ok(vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a"), getattr(&[FATTR4_TYPE, FATTR4_MODE])]);
    let NfsResop4::Getattr(Nfs4Result::Ok(g)) = &res[4] else { panic!() };
    let same = g.obj_attributes.clone();
    let dir = || vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a")];
    let mut ops = dir();
    ops.push(NfsArgop4::Verify(Verify4Args { obj_attributes: same.clone() }));
    a.ok(ops);
    let mut ops = dir();
    ops.push(NfsArgop4::Nverify(Nverify4Args { obj_attributes: same }));
    assert_eq!(a.status(ops), Nfsstat4::Same);
    let other = Attrs4 { mode: Some(0o1), ..Attrs4::default() }.to_fattr4(&Attrs4::known());
    let mut ops = dir();
    ops.push(NfsArgop4::Verify(Verify4Args { obj_attributes: other }));
    assert_eq!(a.status(ops), Nfsstat4::NotSame);
}

fn open_exclusive(name: &str, verf: [u8; 8], attrs: Attrs4) -> NfsArgop4 {
    NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: 0,
        owner: OpenOwner4 { clientid: 0, owner: Opaque(Bytes::from_static(b"x")) },
        openhow: Openflag4::Open4Create(Createhow4::Exclusive4_1(CreatVerfAttr {
            cva_verf: verf,
            cva_attrs: attrs.to_fattr4(&Attrs4::known()),
        })),
        claim: OpenClaim4::ClaimNull(name.into()),
    })
}

#[test]
fn an_exclusive_create_is_exactly_once_and_sets_only_what_it_may() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let dir = || vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a")];
    let mode = Attrs4 { mode: Some(0o600), ..Attrs4::default() };
    let mut ops = dir();
    ops.extend([open_exclusive("x", [7; 8], mode.clone()), NfsArgop4::Getfh(())]);
    let res = a.ok(ops);
    let NfsResop4::Open(Nfs4Result::Ok(o)) = &res[4] else { panic!() };
    assert_eq!(o.attrset, Bitmap4::from_bits([FATTR4_MODE]));
    let first = handle_of(&res[5]);
    // A retransmission (same verifier) finds its own file.
    let mut ops = dir();
    ops.extend([open_exclusive("x", [7; 8], mode.clone()), NfsArgop4::Getfh(())]);
    assert_eq!(handle_of(&a.ok(ops)[5]), first);
    let mut ops = dir();
    ops.push(open_exclusive("x", [8; 8], mode));
    assert_eq!(a.status(ops), Nfsstat4::Exist, "another client's create");
    let mut ops = dir();
    ops.push(open_exclusive("y", [9; 8], Attrs4 { owner: Some("5".into()), ..Attrs4::default() }));
    assert_eq!(a.status(ops), Nfsstat4::Inval, "not in suppattr_exclcreat");
}

/// A change of a directory that no other change overlapped says so
/// (`atomic`), and its `before` is the last change's `after`: the Linux
/// client then keeps its cached names and permissions of the directory
/// instead of looking each name up again. One that another change (of any
/// protocol) overlapped does not.
#[test]
fn a_directory_change_alone_is_atomic_and_one_overlapping_another_is_not() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let dir = || vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a")];
    let mut ops = dir();
    ops.push(open_create("f", "o1", OPEN4_SHARE_ACCESS_BOTH, 0));
    let res = a.ok(ops);
    let NfsResop4::Open(Nfs4Result::Ok(opened)) = &res[4] else { panic!() };
    assert!(opened.cinfo.atomic, "{:?}", opened.cinfo);
    assert_ne!(opened.cinfo.before, opened.cinfo.after);
    let mut ops = dir();
    ops.push(NfsArgop4::Remove(Remove4Args { target: "f".into() }));
    let res = a.ok(ops);
    let NfsResop4::Remove(Nfs4Result::Ok(removed)) = &res[4] else { panic!() };
    assert!(removed.cinfo.atomic, "{:?}", removed.cinfo);
    assert_eq!(removed.cinfo.before, opened.cinfo.after);
    assert_ne!(removed.cinfo.after, removed.cinfo.before);
    // Another change of the directory is running (an NFSv3 CREATE, say).
    let root = p.exports.store.lookup_path(1, b"/").unwrap();
    let running = p.exports.dir_changes().begin(&root);
    let mut ops = dir();
    ops.push(open_create("g", "o1", OPEN4_SHARE_ACCESS_BOTH, 0));
    let res = a.ok(ops);
    let NfsResop4::Open(Nfs4Result::Ok(opened)) = &res[4] else { panic!() };
    assert!(!opened.cinfo.atomic, "overlapped: {:?}", opened.cinfo);
    let mut ops = dir();
    ops.extend([NfsArgop4::Savefh(()), NfsArgop4::Rename(Rename4Args { oldname: "g".into(), newname: "h".into() })]);
    let res = a.ok(ops);
    let NfsResop4::Rename(Nfs4Result::Ok(renamed)) = &res[5] else { panic!() };
    assert!(!renamed.source_cinfo.atomic && !renamed.target_cinfo.atomic, "{renamed:?}");
    drop(running);
    // A rename within one directory is one change of it, not two.
    let mut ops = dir();
    ops.extend([NfsArgop4::Savefh(()), NfsArgop4::Rename(Rename4Args { oldname: "h".into(), newname: "i".into() })]);
    let res = a.ok(ops);
    let NfsResop4::Rename(Nfs4Result::Ok(renamed)) = &res[5] else { panic!() };
    assert!(renamed.source_cinfo.atomic, "{renamed:?}");
    assert_eq!(renamed.source_cinfo, renamed.target_cinfo);
    assert_eq!(p.exports.dir_changes().in_flight(), 0);
}

/// Every prefix of a COMPOUND, and the COMPOUND with any one word
/// replaced, gets an answer (results or GARBAGE_ARGS), never a panic.
#[test]
fn a_malformed_compound_is_answered() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let args = compound(
        2,
        vec![
            a.sequence(false),
            NfsArgop4::Putrootfh(()),
            lookup("srv"),
            lookup("a"),
            open_create("m", "o", OPEN4_SHARE_ACCESS_BOTH, 0),
            write(Stateid4::CURRENT, 0, b"data"),
            getattr(&[FATTR4_SIZE, FATTR4_CHANGE]),
        ],
    );
    let mut enc = Encoder::new();
    args.encode(&mut enc);
    let bytes = enc.into_bytes();
    let ctx_run = |body: Bytes| {
        let cred = root();
        let ctx = CallContext {
            xid: 1,
            vers: 4,
            proc_: NFSPROC4_COMPOUND,
            cred: &cred,
            peer: CLIENT_A.parse().unwrap(),
            local: "127.0.0.1:2049".parse().unwrap(),
            connection: None,
            report: Default::default(),
        };
        let mut reply = Encoder::new();
        match p.run(&ctx, &mut Decoder::new(body), &mut reply) {
            Ok(_) => assert!(Compound4Res::decode(&mut Decoder::new(reply.into_bytes())).is_ok()),
            Err(e) => assert_eq!(e, keel_rpc::AcceptError::GarbageArgs),
        }
    };
    for len in 0..bytes.len() {
        ctx_run(bytes.slice(..len));
    }
    for at in (0..bytes.len()).step_by(4) {
        for word in [0u32, 1, 0xffff_ffff, 0x8000_0000, 10_044] {
            let mut b = bytes.to_vec();
            b[at..at + 4].copy_from_slice(&word.to_be_bytes());
            ctx_run(Bytes::from(b));
        }
    }
}

/// The transport sets aside what a COMPOUND's reply may take before it
/// runs: little for metadata, READ's count for a READ.
#[test]
fn a_compound_s_reply_is_bounded_by_what_it_asks_for() {
    let p = program();
    let bound = |ops: Vec<NfsArgop4>| {
        let mut enc = Encoder::new();
        compound(2, ops).encode(&mut enc);
        Program::PROCEDURES.reply_bytes_max(&p, NFSPROC4_COMPOUND, enc.into_bytes())
    };
    let small = bound(vec![NfsArgop4::Putrootfh(()), getattr(&[FATTR4_SIZE])]);
    assert!(small < 8192, "{small}");
    let one_read = bound(vec![NfsArgop4::Putrootfh(()), read(Stateid4::ANONYMOUS, 1 << 20)]);
    assert!(one_read > 1 << 20, "{one_read}");
    let args = ReadPlus4Args { rpa_stateid: Stateid4::ANONYMOUS, rpa_offset: 0, rpa_count: 1 << 20 };
    let one_read_plus = bound(vec![NfsArgop4::Putrootfh(()), NfsArgop4::ReadPlus(args)]);
    assert!(one_read_plus > 1 << 20, "{one_read_plus}");
    let huge = bound(vec![read(Stateid4::ANONYMOUS, 1 << 20); 8]);
    assert_eq!(huge, keel_nfs4_state::MESSAGE_BYTES_MAX_DEFAULT as usize, "no more than a session may get");
    assert_eq!(bound(Vec::new()), keel_rpc::REPLY_RESULTS_BYTES_DEFAULT);
}

/// GETATTR of every attribute fits the bound the transport sets aside for
/// an operation that does not say how much it returns.
#[test]
fn every_attribute_fits_an_operation_s_reply_bound() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let res =
        a.ok(vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a"), getattr(crate::ops::attr_supported_bits())]);
    let mut enc = Encoder::new();
    res[4].encode(&mut enc);
    assert!(enc.len() < crate::program::OP_RESULT_BYTES_MAX, "{} bytes", enc.len());
    // All but rdattr_error (READDIR's) and the two write-only times.
    let readable = crate::ops::attr_supported().difference(&Bitmap4::from_bits([
        FATTR4_RDATTR_ERROR,
        FATTR4_TIME_ACCESS_SET,
        FATTR4_TIME_MODIFY_SET,
    ]));
    assert_eq!(attrs_of(&res[4]).bitmap(), readable, "every readable attribute is given");
}

/// RFC 8881 section 18.51.3 (pynfs RECC3): before its RECLAIM_COMPLETE a
/// client's OPEN is NFS4ERR_GRACE, with no grace period on, and one that
/// would create its file leaves nothing behind.
#[test]
fn an_open_before_reclaim_complete_is_grace_and_creates_nothing() {
    let p = program();
    let mut a = Client::reclaiming(&p, CLIENT_A, "a", root(), fore(1 << 20));
    let dir = vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a")];
    let mut open = dir.clone();
    open.push(open_create("new", "o", OPEN4_SHARE_ACCESS_BOTH, 0));
    let mut look = dir;
    look.push(lookup("new"));
    assert_eq!(a.status(open.clone()), Nfsstat4::Grace);
    assert_eq!(a.status(look.clone()), Nfsstat4::Noent, "the refused OPEN made no file");
    a.ok(vec![NfsArgop4::ReclaimComplete(ReclaimComplete4Args { rca_one_fs: false })]);
    a.ok(open);
    a.ok(look);
}

#[test]
fn claims_without_grace_or_delegations_get_the_rfc_s_answers() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let mut ops = vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("a")];
    ops.extend([open_create("c", "o", OPEN4_SHARE_ACCESS_READ, 0), NfsArgop4::Getfh(())]);
    let fh = handle_of(&a.ok(ops)[5]);
    let open = |claim: OpenClaim4| {
        NfsArgop4::Open(Open4Args {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: 0,
            owner: OpenOwner4 { clientid: 0, owner: Opaque(Bytes::from_static(b"o")) },
            openhow: Openflag4::Open4Nocreate,
            claim,
        })
    };
    let previous = open(OpenClaim4::ClaimPrevious(OpenDelegationType4::OpenDelegateNone));
    assert_eq!(a.status(vec![putfh(&fh), previous]), Nfsstat4::NoGrace, "no grace period: nothing to reclaim");
    let cur = open(OpenClaim4::ClaimDelegCurFh(Stateid4 { seqid: 1, other: [7; 12] }));
    assert_eq!(a.status(vec![putfh(&fh), cur]), Nfsstat4::BadStateid, "no delegation was given");
    assert_eq!(a.status(vec![putfh(&fh), open(OpenClaim4::ClaimDelegPrevFh)]), Nfsstat4::Notsupp);
    let deleg = NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid: Stateid4 { seqid: 1, other: [7; 12] } });
    assert_eq!(a.status(vec![putfh(&fh), deleg]), Nfsstat4::BadStateid);
    // OPEN by handle works, and the pseudo file system has no files.
    a.ok(vec![putfh(&fh), open(OpenClaim4::ClaimFh)]);
    assert_eq!(a.status(vec![NfsArgop4::Putrootfh(()), open(OpenClaim4::ClaimFh)]), Nfsstat4::Isdir);
}

/// The backchannel the client offered is taken and never reported down:
/// the Linux client answers CB_PATH_DOWN with BIND_CONN_TO_SESSION, again
/// and again.
#[test]
fn sequence_reports_no_callback_path_down() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let res = a.ok(vec![NfsArgop4::Putrootfh(())]);
    let NfsResop4::Sequence(Nfs4Result::Ok(s)) = &res[0] else { panic!() };
    assert_eq!(s.sr_status_flags, 0);
}

#[test]
fn a_session_is_destroyed_by_the_last_operation_of_its_own_compound() {
    let p = program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let destroy = NfsArgop4::DestroySession(DestroySession4Args { dsa_sessionid: a.session });
    assert_eq!(a.status(vec![destroy.clone(), NfsArgop4::Putrootfh(())]), Nfsstat4::NotOnlyOp);
    a.ok(vec![NfsArgop4::Putrootfh(()), destroy]);
    let seq = a.sequence(false);
    let res = call(&p, CLIENT_A, &root(), &compound(1, vec![seq]));
    assert_eq!(res.status, Nfsstat4::Badsession, "gone");
}

/// Exports 1 at /srv/k (krb5p, krb5), 2 at /srv/s (sys), 3 at /only/k
/// (krb5i), each rw for everyone.
fn sec_program() -> Arc<Program> {
    let store = Arc::new(SimStore::with_exports(7, &[(1, "/srv/k"), (2, "/srv/s"), (3, "/only/k")]));
    let with_sec = |sec: &[SecFlavor]| {
        let mut r = rule(HostMatch::Any, Access::ReadWrite, Squash::None);
        r.options.sec = SecFlavors::new(sec).unwrap();
        vec![r]
    };
    let exports = ExportTable::new(
        store,
        vec![
            (1, with_sec(&[SecFlavor::Krb5p, SecFlavor::Krb5])),
            (2, with_sec(&[SecFlavor::Sys])),
            (3, with_sec(&[SecFlavor::Krb5i])),
        ],
    );
    program_over(Arc::new(exports), StateConfig::default())
}

fn kerberos(service: GssService) -> Credential {
    Credential::gss("alice@KEEL.TEST", service, Some(Cred::new(10001, 10001, &[])))
}

fn secinfo(name: &str) -> NfsArgop4 {
    NfsArgop4::Secinfo(Secinfo4Args { name: name.into() })
}

fn secinfo_no_name(style: SecinfoStyle4) -> NfsArgop4 {
    NfsArgop4::SecinfoNoName(style)
}

/// The last result's operation and status, and how many results came.
fn stopped_at(res: &Compound4Res) -> (usize, OpNum, Nfsstat4) {
    let last = res.resarray.last().unwrap();
    (res.resarray.len() - 1, last.opnum(), last.status())
}

#[test]
fn a_sys_call_gets_wrongsec_where_the_rfc_puts_it() {
    let p = sec_program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let k_root = p.exports.store.lookup_path(1, b"/").unwrap().handle().clone();
    let s_root = p.exports.store.lookup_path(2, b"/").unwrap().handle().clone();
    let wrongsec = |op| (op, Nfsstat4::Wrongsec);
    let at = |res: &Compound4Res| {
        let (i, op, status) = stopped_at(res);
        (i, (op, status))
    };

    // LOOKUP answers for what it reaches: the pseudo directories lead to
    // a sys export too, the Kerberos export's root is refused.
    let res = a.run(vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("k"), getattr(&[FATTR4_TYPE])]);
    assert_eq!(at(&res), (3, wrongsec(OpNum::Lookup)));
    a.ok(vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("s"), getattr(&[FATTR4_TYPE])]);
    // A pseudo directory that leads only to Kerberos exports.
    let res = a.run(vec![NfsArgop4::Putrootfh(()), lookup("only")]);
    assert_eq!(at(&res), (2, wrongsec(OpNum::Lookup)));

    // PUTFH followed by an operation that uses the handle answers itself.
    let res = a.run(vec![putfh(&k_root), getattr(&[FATTR4_TYPE])]);
    assert_eq!(at(&res), (1, wrongsec(OpNum::Putfh)));
    let res = a.run(vec![putfh(&k_root), NfsArgop4::Getfh(())]);
    assert_eq!(at(&res), (1, wrongsec(OpNum::Putfh)));
    // ... not when nothing follows, nor before SAVEFH, which leaves the
    // check to the operation that uses the saved handle.
    a.ok(vec![putfh(&k_root)]);
    let res = a.run(vec![putfh(&k_root), NfsArgop4::Savefh(()), getattr(&[FATTR4_TYPE])]);
    assert_eq!(at(&res), (3, wrongsec(OpNum::Getattr)));
    // RESTOREFH is a put-filehandle operation.
    let res = a.run(vec![
        putfh(&k_root),
        NfsArgop4::Savefh(()),
        putfh(&s_root),
        NfsArgop4::Restorefh(()),
        getattr(&[FATTR4_TYPE]),
    ]);
    assert_eq!(at(&res), (4, wrongsec(OpNum::Restorefh)));
    a.ok(vec![putfh(&k_root), putfh(&s_root), getattr(&[FATTR4_TYPE])]);
    // In a directory the flavor may not use, no name's existence is told.
    let res = a.run(vec![putfh(&k_root), lookup("absent")]);
    assert_eq!(at(&res), (2, wrongsec(OpNum::Lookup)));
    // OPEN answers for the directory it opens in.
    let res = a.run(vec![putfh(&k_root), open_create("f", "o", OPEN4_SHARE_ACCESS_BOTH, 0)]);
    assert_eq!(at(&res), (2, wrongsec(OpNum::Open)));
    // LOOKUPP from the sys export to the pseudo directory is admitted.
    a.ok(vec![putfh(&s_root), NfsArgop4::Lookupp(()), getattr(&[FATTR4_TYPE])]);
    // SECINFO_NO_NAME never gets NFS4ERR_WRONGSEC.
    a.ok(vec![putfh(&k_root), secinfo_no_name(SecinfoStyle4::Secinfo4StyleCurrentFh)]);
}

#[test]
fn secinfo_answers_the_export_s_flavors_in_order_and_consumes_the_filehandle() {
    let p = sec_program();
    let mut a = Client::new(&p, CLIENT_A, "a");
    let krb5 = |service| {
        Secinfo4::RpcsecGss(RpcsecGssInfo {
            oid: b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02".as_slice().into(),
            qop: 0,
            service,
        })
    };
    let flavors = |res: &NfsResop4| match res {
        NfsResop4::Secinfo(Nfs4Result::Ok(list)) | NfsResop4::SecinfoNoName(Nfs4Result::Ok(list)) => {
            list.iter().cloned().collect::<Vec<_>>()
        }
        other => panic!("not a SECINFO result: {other:?}"),
    };
    let res = a.ok(vec![NfsArgop4::Putrootfh(()), lookup("srv"), secinfo("k")]);
    assert_eq!(flavors(&res[3]), [krb5(RpcGssSvc::RpcGssSvcPrivacy), krb5(RpcGssSvc::RpcGssSvcNone)]);
    let res = a.ok(vec![NfsArgop4::Putrootfh(()), lookup("srv"), secinfo("s")]);
    assert_eq!(flavors(&res[3]), [Secinfo4::Flavor(AUTH_SYS)]);
    let res = a.ok(vec![NfsArgop4::Putrootfh(()), secinfo("only")]);
    assert_eq!(flavors(&res[2]), [krb5(RpcGssSvc::RpcGssSvcIntegrity)], "a pseudo directory: its exports'");
    let res =
        a.ok(vec![NfsArgop4::Putrootfh(()), lookup("srv"), secinfo_no_name(SecinfoStyle4::Secinfo4StyleCurrentFh)]);
    assert_eq!(
        flavors(&res[3]),
        [krb5(RpcGssSvc::RpcGssSvcPrivacy), krb5(RpcGssSvc::RpcGssSvcNone), Secinfo4::Flavor(AUTH_SYS)]
    );
    let k_root = p.exports.store.lookup_path(1, b"/").unwrap().handle().clone();
    let res = a.ok(vec![putfh(&k_root), secinfo_no_name(SecinfoStyle4::Secinfo4StyleCurrentFh)]);
    assert_eq!(flavors(&res[2]), [krb5(RpcGssSvc::RpcGssSvcPrivacy), krb5(RpcGssSvc::RpcGssSvcNone)]);
    let res = a.ok(vec![putfh(&k_root), secinfo_no_name(SecinfoStyle4::Secinfo4StyleParent)]);
    assert_eq!(flavors(&res[2]).len(), 3, "the parent of the export's root: /srv");
    assert_eq!(
        a.status(vec![NfsArgop4::Putrootfh(()), secinfo_no_name(SecinfoStyle4::Secinfo4StyleParent)]),
        Nfsstat4::Noent
    );
    // The current filehandle is consumed.
    let res = a.run(vec![NfsArgop4::Putrootfh(()), lookup("srv"), secinfo("s"), getattr(&[FATTR4_TYPE])]);
    assert_eq!(stopped_at(&res), (4, OpNum::Getattr, Nfsstat4::Nofilehandle));
    let res = a.run(vec![putfh(&k_root), secinfo_no_name(SecinfoStyle4::Secinfo4StyleCurrentFh), NfsArgop4::Getfh(())]);
    assert_eq!(stopped_at(&res), (3, OpNum::Getfh, Nfsstat4::Nofilehandle));
    assert_eq!(a.status(vec![NfsArgop4::Putrootfh(()), lookup("srv"), secinfo("absent")]), Nfsstat4::Noent);
}

#[test]
fn a_kerberos_call_is_admitted_where_its_flavor_is_listed() {
    let p = sec_program();
    let mut alice = Client::with_fore(&p, CLIENT_A, "alice", kerberos(GssService::Privacy), fore(1 << 20));
    let res = alice.ok(vec![
        NfsArgop4::Putrootfh(()),
        lookup("srv"),
        lookup("k"),
        open_create("mine", "o", OPEN4_SHARE_ACCESS_BOTH, 0),
        getattr(&[FATTR4_OWNER]),
    ]);
    assert_eq!(attrs_of(&res[5]).owner.unwrap().as_str(), Some("10001"), "acts as the principal's uid");
    let k_root = p.exports.store.lookup_path(1, b"/").unwrap().handle().clone();
    alice.ok(vec![putfh(&k_root), getattr(&[FATTR4_TYPE])]);
    // krb5p is not sys.
    let res = alice.run(vec![NfsArgop4::Putrootfh(()), lookup("srv"), lookup("s")]);
    assert_eq!(stopped_at(&res), (3, OpNum::Lookup, Nfsstat4::Wrongsec));

    // krb5i: neither export 1 nor /srv's exports take it; export 3 does.
    let mut integrity = Client::with_fore(&p, CLIENT_B, "i", kerberos(GssService::Integrity), fore(1 << 20));
    let res = integrity.run(vec![putfh(&k_root), getattr(&[FATTR4_TYPE])]);
    assert_eq!(stopped_at(&res), (1, OpNum::Putfh, Nfsstat4::Wrongsec));
    let res = integrity.run(vec![NfsArgop4::Putrootfh(()), lookup("srv")]);
    assert_eq!(stopped_at(&res), (2, OpNum::Lookup, Nfsstat4::Wrongsec));
    integrity.ok(vec![NfsArgop4::Putrootfh(()), lookup("only"), lookup("k"), getattr(&[FATTR4_TYPE])]);
}

/// A COMPOUND's answer, or the dispatcher's reason for giving none.
fn try_call(
    p: &Program,
    peer: &str,
    cred: &Credential,
    args: &Compound4Args,
) -> Result<Compound4Res, keel_rpc::AcceptError> {
    let ctx = CallContext {
        xid: 1,
        vers: 4,
        proc_: NFSPROC4_COMPOUND,
        cred,
        peer: peer.parse().unwrap(),
        local: "127.0.0.1:2049".parse().unwrap(),
        connection: None,
        report: Default::default(),
    };
    let mut enc = Encoder::new();
    args.encode(&mut enc);
    let mut reply = Encoder::new();
    p.run(&ctx, &mut Decoder::new(enc.into_bytes()), &mut reply)?;
    Ok(Compound4Res::decode(&mut Decoder::new(reply.into_bytes())).expect("the reply decodes"))
}

/// Under [ha], a COMPOUND that fails with NFS4ERR_IO while its export's
/// storage fails as a whole gets no reply, as NFSv3's calls: the client
/// retransmits, to the node that takes over (the HA lab's v4.1 client got
/// EIO from fsync at a storage path loss, and lost its lock). Its slot
/// takes the retransmission as a new request: it runs again, and is not
/// answered from a cache or as misordered.
#[test]
fn in_an_ha_pair_a_compound_failing_with_the_export_s_storage_gets_no_reply_and_runs_again() {
    use keel_store::sim::{SimAction, SimFault, SimPoint};
    let store = Arc::new(SimStore::with_exports(7, &[(1, "/srv/a")]));
    let rules = vec![(1, vec![rule(HostMatch::Any, Access::ReadWrite, Squash::None)])];
    let held = ExportTable::new(store.clone(), rules.clone()).holding_calls_when_storage_fails();
    let plain = ExportTable::new(store.clone(), rules);
    // Two flushes fail: the WRITE's, then the export's own check.
    let export_fails = SimFault { point: SimPoint::Sync, fileid: None, action: SimAction::Fail(libc::EIO), count: 2 };
    for (exports, held) in [(held, true), (plain, false)] {
        let p = program_over(Arc::new(exports), StateConfig::default());
        let mut a = Client::new(&p, CLIENT_A, if held { "held" } else { "plain" });
        let res = a.ok(vec![
            NfsArgop4::Putrootfh(()),
            lookup("srv"),
            lookup("a"),
            open_create(if held { "f" } else { "g" }, "o1", OPEN4_SHARE_ACCESS_BOTH, 0),
            NfsArgop4::Getfh(()),
        ]);
        let (stateid, fh) = (stateid_of(&res[4]), handle_of(&res[5]));
        let ops = compound(2, vec![a.sequence(false), putfh(&fh), write(stateid, 0, b"data")]);
        store.inject(export_fails);
        let first = try_call(&p, CLIENT_A, &root(), &ops);
        if !held {
            // Outside an HA pair every I/O error is answered, as knfsd does.
            assert_eq!(first.unwrap().status, Nfsstat4::Io);
            continue;
        }
        assert!(matches!(first, Err(keel_rpc::AcceptError::Drop)), "no reply: the client retransmits: {first:?}");
        let again = try_call(&p, CLIENT_A, &root(), &ops).expect("the retransmission is answered");
        assert_eq!(again.status, Nfsstat4::Ok, "the retransmission runs again: {again:?}");
        // The slot moved on as after any request.
        assert_eq!(a.status(vec![putfh(&fh), read(stateid, 100)]), Nfsstat4::Ok);
    }
}

/// A COMPOUND looks for state to reap (walking every client and state) at
/// most once per `REAP_RECHECK`: a client whose lease ran out goes at the
/// first look after it, which comes that much later at most.
#[test]
fn compounds_look_for_state_to_reap_at_most_once_per_recheck() {
    use std::time::{Duration, Instant};
    let p = program();
    let _a = Client::new(&p, "10.0.0.1:700", "a");
    let late = Instant::now() + StateConfig::default().lease + Duration::from_secs(1);
    p.reap_if_due_soon(late);
    assert!(p.clients().is_empty(), "a's lease ran out: reaped");
    let _b = Client::new(&p, "10.0.0.2:700", "b");
    p.reap_if_due_soon(late);
    assert_eq!(p.clients().len(), 1, "b's lease ran out too, but the state was looked at just now");
    p.reap_if_due_soon(late + crate::program::REAP_RECHECK);
    assert!(p.clients().is_empty(), "the next look reaps b");
}

//! Speaking NFSv4.1 to the server over TCP: a client built from
//! keel-nfs4-proto on one connection, which is its backchannel too (as the
//! Linux client's is): it answers CB_NULL, CB_SEQUENCE, CB_RECALL and CB_GETATTR.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_nfs4_proto::*;
use keel_rpc::msg::{AcceptStat, CallHeader, OpaqueAuth, RPC_VERSION, ReplyStat, decode_reply_header};
use keel_xdr::{Decode, Decoder, Encode, Encoder, Opaque};

use crate::nfs::reserved_stream;
use crate::server::TestServer;

/// Longest wait for the server to do something the test expects.
pub const WAIT: Duration = Duration::from_secs(20);

pub fn write_record(stream: &mut TcpStream, record: &[u8]) {
    stream.write_all(&marked(record)).unwrap();
}

/// `record` after its record mark (one fragment).
fn marked(record: &[u8]) -> Vec<u8> {
    let mark = (record.len() as u32 | 0x8000_0000).to_be_bytes();
    [&mark[..], record].concat()
}

pub fn read_record(stream: &mut TcpStream) -> Bytes {
    let mut record = Vec::new();
    loop {
        let mut mark = [0u8; 4];
        stream.read_exact(&mut mark).unwrap();
        let mark = u32::from_be_bytes(mark);
        let mut fragment = vec![0u8; (mark & 0x7fff_ffff) as usize];
        stream.read_exact(&mut fragment).unwrap();
        record.extend_from_slice(&fragment);
        if mark & 0x8000_0000 != 0 {
            return Bytes::from(record);
        }
    }
}

/// An NFSv4.1 client on one connection, which is its backchannel too.
pub struct V4 {
    pub stream: TcpStream,
    xid: u32,
    pub session: Sessionid4,
    seq: u32,
    /// Delegations the server recalled (CB_RECALL's stateids).
    pub recalled: Vec<Stateid4>,
    /// CB_NULL calls answered.
    pub probes: u32,
    /// What it answers CB_GETATTR with: the change attribute and size the
    /// test chooses, or, if none, NFS4ERR_SERVERFAULT.
    pub getattr_answer: Option<(u64, u64)>,
    /// CB_GETATTRs answered.
    pub getattrs: u32,
    /// The minor version of the COMPOUNDs it sends (1 unless set).
    pub minor: u32,
    /// The credential of its COMPOUNDs (AUTH_NONE unless set).
    pub cred: OpaqueAuth,
    /// Answers to callbacks kept to go out in one write with the next
    /// call (records, marked), when [`V4::connect_answering_with_calls`]
    /// made it.
    held_answers: Option<Vec<u8>>,
    /// Whether its RECLAIM_COMPLETE is still to go out with its first
    /// [`V4::open_read`].
    reclaim_complete_due: bool,
}

impl V4 {
    /// EXCHANGE_ID as `owner`, CREATE_SESSION with the backchannel on the
    /// same connection, and RECLAIM_COMPLETE (as the Linux client does:
    /// without it the server grants no new state).
    pub fn connect(server: &TestServer, owner: &'static [u8]) -> V4 {
        let mut c = Self::connect_with(server, owner, None);
        c.ok(vec![reclaim_complete()]);
        c
    }

    /// [`V4::connect`] without RECLAIM_COMPLETE: a client come back after
    /// the server's restart, to reclaim; it sends RECLAIM_COMPLETE itself.
    pub fn connect_to_reclaim(server: &TestServer, owner: &'static [u8]) -> V4 {
        Self::connect_with(server, owner, None)
    }

    /// [`V4::connect`], for a client whose answers to callbacks go out in
    /// one write with its next call (the backchannel probe's answer with
    /// the call after CREATE_SESSION): the server reads them together.
    /// That next call is to be its first [`V4::open_read`], which carries
    /// its RECLAIM_COMPLETE.
    pub fn connect_answering_with_calls(server: &TestServer, owner: &'static [u8]) -> V4 {
        let mut c = Self::connect_with(server, owner, Some(Vec::new()));
        c.reclaim_complete_due = true;
        c
    }

    fn connect_with(server: &TestServer, owner: &'static [u8], held_answers: Option<Vec<u8>>) -> V4 {
        let stream = reserved_stream(server.addr);
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let mut c = V4 {
            stream,
            xid: 0,
            session: [0; 16],
            seq: 0,
            recalled: Vec::new(),
            probes: 0,
            getattr_answer: None,
            getattrs: 0,
            minor: 1,
            cred: OpaqueAuth::default(),
            held_answers,
            reclaim_complete_due: false,
        };
        let eid = ExchangeId4Args {
            eia_clientowner: ClientOwner4 { co_verifier: [7; 8], co_ownerid: Opaque(Bytes::from_static(owner)) },
            eia_flags: 0,
            eia_state_protect: StateProtect4A::Sp4None,
            eia_client_impl_id: None,
        };
        let res = c.compound(vec![NfsArgop4::ExchangeId(eid)]);
        let NfsResop4::ExchangeId(Nfs4Result::Ok(eid)) = &res.resarray[0] else { panic!("EXCHANGE_ID: {res:?}") };
        let attrs = |size| ChannelAttrs4 {
            ca_maxrequestsize: size,
            ca_maxresponsesize: size,
            ca_maxresponsesize_cached: 4096,
            ca_maxoperations: 16,
            ca_maxrequests: 1,
            ..ChannelAttrs4::default()
        };
        let cs = CreateSession4Args {
            csa_clientid: eid.eir_clientid,
            csa_sequence: eid.eir_sequenceid,
            csa_flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            csa_fore_chan_attrs: attrs(1 << 20),
            csa_back_chan_attrs: attrs(4096),
            csa_cb_program: 0x4000_0000,
            csa_sec_parms: vec![CallbackSecParms4::AuthNone].into(),
        };
        let res = c.compound(vec![NfsArgop4::CreateSession(cs)]);
        let NfsResop4::CreateSession(Nfs4Result::Ok(cs)) = &res.resarray[0] else { panic!("CREATE_SESSION: {res:?}") };
        c.session = cs.csr_sessionid;
        c
    }

    /// Sends a COMPOUND and reads records until its reply, answering the
    /// callbacks that come meanwhile.
    pub fn compound(&mut self, ops: Vec<NfsArgop4>) -> Compound4Res {
        self.xid += 1;
        let mut enc = Encoder::new();
        let header = CallHeader {
            xid: self.xid,
            rpc_version: RPC_VERSION,
            prog: NFS4_PROGRAM,
            vers: NFS_V4,
            proc_: NFSPROC4_COMPOUND,
            cred: self.cred.clone(),
            verf: OpaqueAuth::default(),
        };
        header.encode(&mut enc);
        Compound4Args { tag: Tag4::default(), minorversion: self.minor, argarray: ops }.encode(&mut enc);
        let call = enc.into_bytes();
        match &mut self.held_answers {
            Some(held) => {
                held.extend_from_slice(&marked(&call));
                self.stream.write_all(held).unwrap();
                held.clear();
            }
            None => write_record(&mut self.stream, &call),
        }
        loop {
            let record = read_record(&mut self.stream);
            if record.get(4..8) == Some(&[0, 0, 0, 0]) {
                self.answer_callback(record);
                continue;
            }
            let mut dec = Decoder::new(record);
            let (xid, stat) = decode_reply_header(&mut dec).unwrap();
            assert_eq!((xid, stat), (self.xid, ReplyStat::Accepted(AcceptStat::Success)));
            return Compound4Res::decode(&mut dec).unwrap();
        }
    }

    /// Reads the next record, which must be a callback, and answers it
    /// (while no call of its own waits for a reply).
    pub fn answer_next_callback(&mut self) {
        let record = read_record(&mut self.stream);
        assert_eq!(record.get(4..8), Some(&[0, 0, 0, 0][..]), "a call, not a reply");
        self.answer_callback(record);
    }

    /// Answers a callback: CB_NULL, or CB_SEQUENCE and CB_RECALL or
    /// CB_GETATTR ([`V4::getattr_answer`]).
    pub fn answer_callback(&mut self, call: Bytes) {
        let mut dec = Decoder::new(call);
        let header = CallHeader::decode(&mut dec).unwrap();
        assert_eq!((header.prog, header.vers), (0x4000_0000, NFS_CB));
        let mut enc = Encoder::new();
        keel_rpc::msg::encode_reply_header(&mut enc, header.xid, ReplyStat::Accepted(AcceptStat::Success));
        if header.proc_ == CB_NULL {
            self.probes += 1;
        } else {
            let args = CbCompound4Args::decode(&mut dec).unwrap();
            let mut resarray = Vec::new();
            for op in &args.argarray {
                match op {
                    NfsCbArgop4::CbSequence(s) => {
                        let ok = CbSequence4ResOk {
                            csr_sessionid: s.csa_sessionid,
                            csr_sequenceid: s.csa_sequenceid,
                            ..CbSequence4ResOk::default()
                        };
                        resarray.push(NfsCbResop4::CbSequence(Nfs4Result::Ok(ok)));
                    }
                    NfsCbArgop4::CbRecall(r) => {
                        self.recalled.push(r.stateid);
                        resarray.push(NfsCbResop4::CbRecall(Nfsstat4::Ok));
                    }
                    NfsCbArgop4::CbGetattr(g) => {
                        self.getattrs += 1;
                        let res = match self.getattr_answer {
                            Some((change, size)) => {
                                let attrs = Attrs4 { change: Some(change), size: Some(size), ..Attrs4::default() };
                                Nfs4Result::Ok(CbGetattr4ResOk { obj_attributes: attrs.to_fattr4(&g.attr_request) })
                            }
                            None => Nfs4Result::Fail(Nfsstat4::Serverfault),
                        };
                        resarray.push(NfsCbResop4::CbGetattr(res));
                    }
                    other => panic!("unexpected callback {other:?}"),
                }
            }
            CbCompound4Res { status: Nfsstat4::Ok, tag: args.tag, resarray }.encode(&mut enc);
        }
        let answer = enc.into_bytes();
        match &mut self.held_answers {
            Some(held) => held.extend_from_slice(&marked(&answer)),
            None => write_record(&mut self.stream, &answer),
        }
    }

    /// SEQUENCE and `ops`.
    pub fn run(&mut self, ops: Vec<NfsArgop4>) -> (u32, Compound4Res) {
        self.seq += 1;
        let mut all = vec![NfsArgop4::Sequence(Sequence4Args {
            sa_sessionid: self.session,
            sa_sequenceid: self.seq,
            ..Sequence4Args::default()
        })];
        all.extend(ops);
        let res = self.compound(all);
        let NfsResop4::Sequence(Nfs4Result::Ok(seq)) = &res.resarray[0] else { panic!("SEQUENCE: {res:?}") };
        (seq.sr_status_flags, res)
    }

    pub fn ok(&mut self, ops: Vec<NfsArgop4>) -> Vec<NfsResop4> {
        let (_, res) = self.run(ops);
        assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
        res.resarray
    }

    /// Until the server has found the backchannel working.
    pub fn wait_for_callback_path(&mut self) {
        let start = Instant::now();
        loop {
            let (flags, _) = self.run(vec![]);
            if self.probes > 0 && flags & SEQ4_STATUS_CB_PATH_DOWN == 0 {
                return;
            }
            assert!(start.elapsed() < WAIT, "the backchannel was never probed (flags {flags:#x})");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl V4 {
    /// OPENs `name` for reading in export `id` (looked up from the root),
    /// as `owner`: the OPEN's result and the file's handle.
    pub fn open_read(&mut self, server: &TestServer, id: u32, owner: &'static [u8], name: &str) -> (Open4ResOk, Bytes) {
        let mut ops = Vec::new();
        if std::mem::take(&mut self.reclaim_complete_due) {
            ops.push(reclaim_complete());
        }
        ops.push(NfsArgop4::Putrootfh(()));
        for part in server.export_path(id).split('/').filter(|p| !p.is_empty()) {
            ops.push(NfsArgop4::Lookup(Lookup4Args { objname: part.into() }));
        }
        ops.push(NfsArgop4::Open(Open4Args {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: 0,
            owner: OpenOwner4 { clientid: 0, owner: Opaque(Bytes::from_static(owner)) },
            openhow: Openflag4::Open4Nocreate,
            claim: OpenClaim4::ClaimNull(name.into()),
        }));
        ops.push(NfsArgop4::Getfh(()));
        let res = self.ok(ops);
        let n = res.len();
        let NfsResop4::Open(Nfs4Result::Ok(open)) = &res[n - 2] else { panic!("OPEN: {res:?}") };
        let NfsResop4::Getfh(Nfs4Result::Ok(fh)) = &res[n - 1] else { panic!("GETFH: {res:?}") };
        (open.clone(), fh.object.0.clone())
    }
}

/// RECLAIM_COMPLETE for the whole client.
pub fn reclaim_complete() -> NfsArgop4 {
    NfsArgop4::ReclaimComplete(ReclaimComplete4Args { rca_one_fs: false })
}

pub fn putfh(fh: &Bytes) -> NfsArgop4 {
    NfsArgop4::Putfh(Putfh4Args { object: NfsFh4(fh.clone()) })
}

pub fn read(stateid: Stateid4) -> NfsArgop4 {
    NfsArgop4::Read(Read4Args { stateid, offset: 0, count: 4096 })
}

pub fn data_of(res: &NfsResop4) -> Bytes {
    let NfsResop4::Read(Nfs4Result::Ok(r)) = res else { panic!("READ: {res:?}") };
    r.data.clone()
}

//! Read delegations end to end, against the `keel` binary over TCP: an
//! NFSv4.1 client (built here from keel-nfs4-proto; it answers the
//! server's callbacks on its own connection, as the Linux client does)
//! opens and reads a file and gets a read delegation; an NFSv3 client
//! writes the file and gets NFS3ERR_JUKEBOX while the server recalls the
//! delegation with CB_RECALL on the v4 client's connection; the v4 client
//! returns it; the v3 write goes through; the v4 client reads the new
//! data. This is the path the handler tests do not take: the callbacks
//! and their replies through the real transport and the dispatcher's
//! reply router. Then the same with the Linux kernel client in the qemu
//! guest of `tools/kernel-nfs-client` holding the delegation.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_nfs4_proto::*;
use keel_rpc::msg::{AcceptStat, CallHeader, OpaqueAuth, RPC_VERSION, ReplyStat, decode_reply_header};
use keel_testkit::nfs::{Nfs, nfsstat3, reserved_stream, stable_how};
use keel_testkit::server::{ExportOpts, TestServer};
use keel_xdr::{Decode, Decoder, Encode, Encoder, Opaque};

/// Longest wait for the server to do something the test expects.
const WAIT: Duration = Duration::from_secs(20);

fn write_record(stream: &mut TcpStream, record: &[u8]) {
    let mark = (record.len() as u32 | 0x8000_0000).to_be_bytes();
    stream.write_all(&[&mark[..], record].concat()).unwrap();
}

fn read_record(stream: &mut TcpStream) -> Bytes {
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
struct V4 {
    stream: TcpStream,
    xid: u32,
    session: Sessionid4,
    seq: u32,
    /// Delegations the server recalled (CB_RECALL's stateids).
    recalled: Vec<Stateid4>,
    probes: u32,
}

impl V4 {
    fn connect(server: &TestServer) -> V4 {
        let stream = reserved_stream(server.addr);
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let mut c = V4 { stream, xid: 0, session: [0; 16], seq: 0, recalled: Vec::new(), probes: 0 };
        let eid = ExchangeId4Args {
            eia_clientowner: ClientOwner4 {
                co_verifier: [7; 8],
                co_ownerid: Opaque(Bytes::from_static(b"deleg-test")),
            },
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
    fn compound(&mut self, ops: Vec<NfsArgop4>) -> Compound4Res {
        self.xid += 1;
        let mut enc = Encoder::new();
        let header = CallHeader {
            xid: self.xid,
            rpc_version: RPC_VERSION,
            prog: NFS4_PROGRAM,
            vers: NFS_V4,
            proc_: NFSPROC4_COMPOUND,
            cred: OpaqueAuth::default(),
            verf: OpaqueAuth::default(),
        };
        header.encode(&mut enc);
        Compound4Args { tag: Tag4::default(), minorversion: 1, argarray: ops }.encode(&mut enc);
        write_record(&mut self.stream, &enc.into_bytes());
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

    /// Answers a callback: CB_NULL, or CB_SEQUENCE and CB_RECALL.
    fn answer_callback(&mut self, call: Bytes) {
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
                    other => panic!("unexpected callback {other:?}"),
                }
            }
            CbCompound4Res { status: Nfsstat4::Ok, tag: args.tag, resarray }.encode(&mut enc);
        }
        write_record(&mut self.stream, &enc.into_bytes());
    }

    /// SEQUENCE and `ops`.
    fn run(&mut self, ops: Vec<NfsArgop4>) -> (u32, Compound4Res) {
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

    fn ok(&mut self, ops: Vec<NfsArgop4>) -> Vec<NfsResop4> {
        let (_, res) = self.run(ops);
        assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
        res.resarray
    }

    /// Until the server has found the backchannel working.
    fn wait_for_callback_path(&mut self) {
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

fn putfh(fh: &Bytes) -> NfsArgop4 {
    NfsArgop4::Putfh(Putfh4Args { object: NfsFh4(fh.clone()) })
}

fn read(stateid: Stateid4) -> NfsArgop4 {
    NfsArgop4::Read(Read4Args { stateid, offset: 0, count: 4096 })
}

fn data_of(res: &NfsResop4) -> Bytes {
    let NfsResop4::Read(Nfs4Result::Ok(r)) = res else { panic!("READ: {res:?}") };
    r.data.clone()
}

#[test]
fn an_nfsv3_write_recalls_a_read_delegation_and_the_v4_client_then_reads_the_new_data() {
    keel_testkit::server::require_root();
    let server = TestServer::start(
        "nfs4-deleg",
        vec![ExportOpts::rw(1, "export")],
        "nfs_versions = [\"3\", \"4.1\"]\nnfs4_read_delegations = true",
    );
    std::fs::write(server.export_dir(1).join("f"), b"old data").unwrap();

    let mut v4 = V4::connect(&server);
    v4.wait_for_callback_path();
    let mut ops = vec![NfsArgop4::Putrootfh(())];
    for part in server.export_path(1).split('/').filter(|p| !p.is_empty()) {
        ops.push(NfsArgop4::Lookup(Lookup4Args { objname: part.into() }));
    }
    ops.push(NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_READ,
        share_deny: 0,
        owner: OpenOwner4 { clientid: 0, owner: Opaque(Bytes::from_static(b"owner")) },
        openhow: Openflag4::Open4Nocreate,
        claim: OpenClaim4::ClaimNull("f".into()),
    }));
    ops.push(NfsArgop4::Getfh(()));
    let res = v4.ok(ops);
    let n = res.len();
    let NfsResop4::Open(Nfs4Result::Ok(open)) = &res[n - 2] else { panic!("OPEN: {res:?}") };
    let NfsResop4::Getfh(Nfs4Result::Ok(fh)) = &res[n - 1] else { panic!("GETFH: {res:?}") };
    let fh = fh.object.0.clone();
    let OpenDelegation4::OpenDelegateRead(deleg) = &open.delegation else {
        panic!("no read delegation: {:?}", open.delegation)
    };
    let deleg = deleg.stateid;
    let res = v4.ok(vec![putfh(&fh), read(open.stateid)]);
    assert_eq!(&data_of(&res[2])[..], b"old data");

    // The v3 client writes the file: it is told to come back later while
    // the delegation is recalled.
    let mut v3 = Nfs::connect(server.addr).unwrap();
    assert_eq!(v3.write(&fh, 0, b"NEW", stable_how::FILE_SYNC).unwrap_err(), nfsstat3::NFS3ERR_JUKEBOX);
    assert_eq!(std::fs::read(server.export_dir(1).join("f")).unwrap(), b"old data", "not written yet");
    // The recall reaches the v4 client on its connection (the next reply
    // it reads comes after it), which returns the delegation.
    let start = Instant::now();
    while v4.recalled.is_empty() {
        assert!(start.elapsed() < WAIT, "no CB_RECALL");
        v4.run(vec![]);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(v4.recalled, vec![deleg]);
    v4.ok(vec![putfh(&fh), NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid: deleg })]);

    // The v3 write goes through now, and the v4 client reads it.
    v3.write(&fh, 0, b"NEW", stable_how::FILE_SYNC).unwrap();
    let res = v4.ok(vec![putfh(&fh), read(open.stateid)]);
    assert_eq!(&data_of(&res[2])[..], b"NEW data");
}

const RUN_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/kernel-nfs-client/run.sh");
const GUEST_SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernel");
const BOOT_TIMEOUT_S: u32 = 300;

/// Boots the guest with export 1 of `server` mounted with `vers=4.1` and
/// runs `script`: its exit code, output and `RESULT key=value` lines.
fn run_guest(server: &TestServer, script: &str) -> (Option<i32>, String, BTreeMap<String, String>) {
    let mut cmd = Command::new(RUN_SH);
    cmd.arg("--port").arg(server.addr.port().to_string());
    cmd.arg("--vers").arg("4.1").arg("--export").arg(server.export_path(1));
    cmd.arg("--timeout").arg(BOOT_TIMEOUT_S.to_string());
    cmd.arg(Path::new(GUEST_SCRIPTS).join(script));
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {RUN_SH}: {e}"));
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let mut results = BTreeMap::new();
    for line in output.lines() {
        let Some(at) = line.find("RESULT ") else { continue };
        if let Some((key, value)) = line[at + 7..].split_once('=') {
            results.insert(key.to_string(), value.to_string());
        }
    }
    (out.status.code(), output, results)
}

/// Writes `data` at the start of `name` with the NFSv3 client, retrying
/// while the server answers NFS3ERR_JUKEBOX: how many times it did.
fn v3_write_retrying(v3: &mut Nfs, dir: &[u8], name: &str, data: &[u8]) -> u32 {
    let fh = v3.lookup(dir, name).unwrap();
    let start = Instant::now();
    let mut jukebox = 0;
    loop {
        match v3.write(&fh, 0, data, stable_how::FILE_SYNC) {
            Ok(_) => return jukebox,
            Err(nfsstat3::NFS3ERR_JUKEBOX) => jukebox += 1,
            Err(e) => panic!("NFSv3 WRITE of {name}: {e:?}"),
        }
        assert!(start.elapsed() < Duration::from_secs(120), "the recall of {name}'s delegation never ended");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_kernel_client_returns_its_read_delegation_when_an_nfsv3_client_writes_and_reads_no_stale_data() {
    let export = ExportOpts::new(1, "export", "access = \"rw\"\nsquash = \"no_root_squash\"\ninsecure = true");
    let server = TestServer::start(
        "nfs4-deleg-kernel",
        vec![export],
        "nfs_versions = [\"3\", \"4.1\", \"4.2\"]\nnfs4_read_delegations = true",
    );
    let dir = server.export_dir(1);
    std::fs::write(dir.join("f"), b"old").unwrap();
    std::fs::write(dir.join("signal"), b"no").unwrap();
    std::thread::scope(|scope| {
        let guest = scope.spawn(|| run_guest(&server, "nfs4_deleg.sh"));
        // The guest has opened and read f (and holds a read delegation).
        let start = Instant::now();
        while !dir.join("ready").exists() {
            assert!(!guest.is_finished(), "the guest ended before it was ready");
            assert!(start.elapsed() < Duration::from_secs(u64::from(BOOT_TIMEOUT_S)), "the guest never got ready");
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut v3 = Nfs::connect(server.addr).unwrap();
        let root = v3.mount(&server.export_path(1)).unwrap();
        let jukebox = v3_write_retrying(&mut v3, &root, "f", b"new");
        assert!(jukebox > 0, "the write never waited for a recall: the guest held no delegation");
        assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"new");
        // signal too is delegated to the guest (it reads it in a loop).
        v3_write_retrying(&mut v3, &root, "signal", b"go");
        let (code, output, results) = guest.join().unwrap();
        let get = |k: &str| results.get(k).map_or("", String::as_str).to_string();
        assert!(code == Some(0) && get("done") == "1", "guest failed:\n{output}\nserver log:\n{}", server.log_text());
        assert_eq!(get("first"), "old", "{output}");
        assert_eq!(get("signal"), "go", "{output}");
        assert_eq!(get("after"), "new", "a stale read after the write was acknowledged:\n{output}");
        assert_eq!(get("after_fd"), "new", "a stale read through the open descriptor:\n{output}");
    });
}

//! NLM and NSM over the wire, without a VM: raw NLM calls over UDP from a
//! reserved port of this host to a `keel` process. Locks exclude each
//! other across owners and clients, a restart (kill -9) holds a grace
//! period in which only reclaims are granted, which ends as soon as the
//! client that held locks is done; state per client address is bounded
//! whatever names it gives; malformed calls get RPC errors and the server
//! lives on. The kernel client's side is in `kernel_locking.rs`.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use bytes::Bytes;
use keel_nlm_proto::nlm4::{
    NLM_PROGRAM, NLM_V4, Nlm4Lock, Nlm4Lockargs, Nlm4Proc, Nlm4Res, Nlm4Stats, Nlm4Testargs, Nlm4Testres, Nlm4Testrply,
    Nlm4Unlockargs,
};
use keel_rpc_client::{CallError, Proc, Retry, bind_from, call};
use keel_testkit::nfs::blocking::Nfs;
use keel_testkit::server::{ExportOpts, TestServer};
use keel_xdr::{Decode, Decoder, Encode, Encoder, Opaque};

const RETRY: Retry = Retry { timeout: Duration::from_secs(2), tries: 3 };

struct Client {
    sock: UdpSocket,
    server: SocketAddr,
}

impl Client {
    fn new(server: &TestServer) -> Self {
        Client::from_address(server, "127.0.0.1")
    }

    /// A client at another loopback address (all of 127.0.0.0/8 is this
    /// host's).
    fn from_address(server: &TestServer, addr: &str) -> Self {
        Client { sock: bind_from(addr.parse().unwrap()).unwrap(), server: server.addr }
    }

    fn call_raw(&self, proc_: u32, args: &dyn Encode) -> Result<Bytes, CallError> {
        call(&self.sock, self.server, Proc { prog: NLM_PROGRAM, vers: NLM_V4, proc_ }, args, RETRY)
    }

    fn lock(&self, l: &Nlm4Lock, block: bool, reclaim: bool) -> Nlm4Stats {
        let args = Nlm4Lockargs { cookie: "k".into(), block, exclusive: true, alock: l.clone(), reclaim, state: 1 };
        let res = self.call_raw(Nlm4Proc::Lock as u32, &args).unwrap();
        Nlm4Res::decode(&mut Decoder::new(res)).unwrap().stat
    }

    fn test(&self, l: &Nlm4Lock) -> Nlm4Testrply {
        let args = Nlm4Testargs { cookie: "t".into(), exclusive: true, alock: l.clone() };
        let res = self.call_raw(Nlm4Proc::Test as u32, &args).unwrap();
        Nlm4Testres::decode(&mut Decoder::new(res)).unwrap().stat
    }

    fn unlock(&self, l: &Nlm4Lock) -> Nlm4Stats {
        let args = Nlm4Unlockargs { cookie: "u".into(), alock: l.clone() };
        let res = self.call_raw(Nlm4Proc::Unlock as u32, &args).unwrap();
        Nlm4Res::decode(&mut Decoder::new(res)).unwrap().stat
    }
}

fn file_handle(server: &TestServer, name: &str) -> Bytes {
    let mut nfs = Nfs::connect(server.addr).unwrap();
    let root = nfs.mount(&server.export_path(1)).unwrap();
    std::fs::write(server.export_dir(1).join(name), b"locked data").unwrap();
    Bytes::from(nfs.lookup(&root, name).unwrap())
}

fn lock(fh: &Bytes, host: &str, svid: i32, offset: u64, len: u64) -> Nlm4Lock {
    Nlm4Lock {
        caller_name: Opaque(Bytes::from(host.to_string())),
        fh: Opaque(fh.clone()),
        oh: Opaque(Bytes::from(format!("{host}:{svid}"))),
        svid,
        l_offset: offset,
        l_len: len,
    }
}

#[test]
fn locks_exclude_and_a_restart_grants_only_reclaims_until_the_client_is_done() {
    let mut server = TestServer::start("nlm-wire", vec![ExportOpts::rw(1, "export")], "grace_seconds_max = 60");
    let fh = file_handle(&server, "f");
    let c = Client::new(&server);
    let x = lock(&fh, "hostx", 1, 0, 100);
    let y = lock(&fh, "hosty", 1, 50, 1);
    assert_eq!(c.lock(&x, false, false), Nlm4Stats::Granted);
    assert_eq!(c.lock(&y, false, false), Nlm4Stats::Denied);
    match c.test(&y) {
        Nlm4Testrply::Denied(h) => assert_eq!((h.svid, h.l_offset, h.l_len), (1, 0, 100)),
        other => panic!("TEST: {other:?}"),
    }
    server.restart();
    let c = Client::new(&server);
    assert_eq!(c.lock(&y, false, false), Nlm4Stats::DeniedGracePeriod, "a new lock in the grace period");
    assert_eq!(c.lock(&x, false, true), Nlm4Stats::Granted, "the reclaim");
    // hostx's first ordinary call says it is done: the grace period ends.
    assert!(matches!(c.test(&lock(&fh, "hostx", 1, 500, 1)), Nlm4Testrply::Other(Nlm4Stats::Granted)));
    assert_eq!(c.lock(&y, false, false), Nlm4Stats::Denied, "the reclaimed lock holds");
    assert!(server.log_text().contains("grace period over"), "{}", server.log_text());
    assert_eq!(c.unlock(&x), Nlm4Stats::Granted);
    assert_eq!(c.lock(&y, false, false), Nlm4Stats::Granted);
}

#[test]
fn lock_state_is_bounded_per_client_address_whatever_names_it_gives() {
    let server = TestServer::start("nlm-bound", vec![ExportOpts::rw(1, "export")], "max_locks_per_client = 4");
    let fh = file_handle(&server, "f");
    let c = Client::new(&server);
    // Each lock under another caller name: the address is full all the same.
    for i in 0..4 {
        assert_eq!(c.lock(&lock(&fh, &format!("greedy{i}"), 1, i * 10, 1), false, false), Nlm4Stats::Granted);
    }
    assert_eq!(c.lock(&lock(&fh, "greedy0", 1, 100, 1), false, false), Nlm4Stats::DeniedNolocks);
    assert_eq!(c.lock(&lock(&fh, "greedy0", 2, 100, 1), true, false), Nlm4Stats::DeniedNolocks);
    assert_eq!(c.lock(&lock(&fh, "greedy9", 1, 100, 1), false, false), Nlm4Stats::DeniedNolocks, "a new name");
    let other = Client::from_address(&server, "127.0.0.2");
    assert_eq!(other.lock(&lock(&fh, "modest", 1, 100, 1), false, false), Nlm4Stats::Granted, "another client");
}

#[test]
fn malformed_nlm_and_nsm_calls_get_errors_and_the_server_lives_on() {
    let mut server = TestServer::start("nlm-malformed", vec![ExportOpts::rw(1, "export")], "");
    let fh = file_handle(&server, "f");
    let c = Client::new(&server);
    let mut good = Encoder::new();
    Nlm4Lockargs {
        cookie: "c".into(),
        block: false,
        exclusive: true,
        alock: lock(&fh, "h", 1, 0, 1),
        reclaim: false,
        state: 1,
    }
    .encode(&mut good);
    let good = good.into_bytes();
    struct Raw(Bytes);
    impl Encode for Raw {
        fn encode(&self, enc: &mut Encoder) {
            enc.raw(&self.0);
        }
    }
    let refused = |r: Result<Bytes, CallError>| match r {
        Err(CallError::Refused(stat)) => format!("{stat:?}"),
        other => panic!("expected a refusal, got {other:?}"),
    };
    for cut in [0, 3, 8, 20, good.len() - 1] {
        let r = c.call_raw(Nlm4Proc::Lock as u32, &Raw(good.slice(..cut)));
        assert!(refused(r).contains("GarbageArgs"), "LOCK cut at {cut}");
    }
    let mut huge = Encoder::new();
    huge.opaque(&[7u8; 1025]);
    assert!(refused(c.call_raw(Nlm4Proc::Unlock as u32, &Raw(huge.into_bytes()))).contains("GarbageArgs"));
    for proc_ in [5, 16, 17, 19, 24] {
        assert!(refused(c.call_raw(proc_, &())).contains("ProcUnavail"), "NLM procedure {proc_}");
    }
    let nsm =
        |proc_: u32, args: &dyn Encode| call(&c.sock, server.addr, Proc { prog: 100024, vers: 1, proc_ }, args, RETRY);
    assert!(refused(nsm(6, &Raw(Bytes::from_static(&[0, 0, 4])))).contains("GarbageArgs"));
    assert!(refused(nsm(2, &())).contains("ProcUnavail"), "SM_MON is a local interface");
    // Over TCP too: a garbage record on the NFS port gets an error reply.
    let mut nfs = Nfs::connect(server.addr).unwrap();
    nfs.null().unwrap();
    // Still serving, and nothing panicked.
    assert_eq!(c.lock(&lock(&fh, "h", 1, 0, 1), false, false), Nlm4Stats::Granted);
    assert!(server.is_running());
    assert!(!server.log_text().contains("panicked"), "{}", server.log_text());
}

/// One grace period for NLM and NFSv4.1: a restart that finds an NFSv4.1
/// client on record in `state_dir` (and no NLM host that held locks)
/// holds a grace period in which an NLM client's new lock is
/// DENIED_GRACE_PERIOD and its reclaim is granted. (With NFSv4.1 not
/// served, nobody could reclaim for the v4 client: recovery.rs drops its
/// record and holds no grace period for it.)
#[test]
fn an_nfs4_client_on_record_holds_new_nlm_locks_off_after_a_restart() {
    use keel_nfs4_state::{ClientRecord, Principal};
    let extra = "grace_seconds_max = 60\nnfs_versions = [\"3\", \"4.1\"]";
    let mut server = TestServer::start("nlm-v4-grace", vec![ExportOpts::rw(1, "export")], extra);
    let fh = file_handle(&server, "f");
    // As the NFSv4.1 state records a client before its first open.
    let principal = Principal::Sys { uid: 0, machine: b"v4client".as_slice().into() };
    let record = ClientRecord { owner: b"Linux NFSv4.1 v4client".as_slice().into(), principal, epoch: 1 };
    let dir = server.state_dir().join("nfs4-clients");
    let (mut records, _) = keel_store::state_file::RecordDir::open(&dir, 16, |_, _| true).unwrap();
    records.put(&record.owner, &record.encode()).unwrap();
    server.restart();
    let c = Client::new(&server);
    let x = lock(&fh, "hostx", 1, 0, 100);
    assert_eq!(c.lock(&x, false, false), Nlm4Stats::DeniedGracePeriod, "a new lock in the grace period");
    assert_eq!(c.lock(&lock(&fh, "hostx", 2, 200, 1), false, true), Nlm4Stats::Granted, "a reclaim");
    assert!(server.log_text().contains("grace period: only reclaims"), "{}", server.log_text());
}

//! Malformed input against the real `keel` binary, byte by byte over TCP.
//!
//! Requirement under test: bad input of any kind (truncated or garbage XDR,
//! lengths that lie, oversized records, bad names, absurd counts) gets an
//! error reply or a closed connection -- never a panic, a hang, unbounded
//! memory or a change on disk; unknown programs, versions and procedures
//! get the replies RFC 5531 prescribes.
//!
//! Every call here is encoded by hand (record mark, call header, AUTH_SYS)
//! so the tests do not share the server's encoder, and every socket read is
//! bounded by a timeout. Each test ends by checking that the server still
//! answers a NULL call on a new connection, that its log shows no panic
//! and, where the calls could have touched files, that the export
//! directory is exactly as it was.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use keel_testkit::server::{ExportOpts, TestServer};

const NFS: u32 = 100_003;
const MOUNT: u32 = 100_005;
const PORTMAP: u32 = 100_000;

const LAST_FRAGMENT: u32 = 1 << 31;
/// The server's record limit (`RECORD_BYTES_MAX` in crates/transport/src/lib.rs).
const RECORD_BYTES_MAX: usize = (1 << 20) + (64 << 10);
/// FSINFO rtmax / wtmax and the READDIR reply limit (`keel_nfs3::IO_BYTES_MAX`).
const IO_BYTES_MAX: usize = 1 << 20;

/// How long any single read may wait before the test fails.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How soon a connection that must be refused has to be closed.
const CLOSE_WITHIN: Duration = Duration::from_secs(5);

// nfsstat3 values (RFC 1813 section 2.6).
const NFS3_OK: u32 = 0;
const NFS3ERR_NOENT: u32 = 2;
const NFS3ERR_EXIST: u32 = 17;
const NFS3ERR_INVAL: u32 = 22;
const NFS3ERR_FBIG: u32 = 27;
const NFS3ERR_NAMETOOLONG: u32 = 63;
const NFS3ERR_NOTEMPTY: u32 = 66;
const NFS3ERR_BADHANDLE: u32 = 10001;
const NFS3ERR_TOOSMALL: u32 = 10005;

// NFSv3 procedure numbers.
const GETATTR: u32 = 1;
const SETATTR: u32 = 2;
const LOOKUP: u32 = 3;
const ACCESS: u32 = 4;
const READLINK: u32 = 5;
const READ: u32 = 6;
const WRITE: u32 = 7;
const CREATE: u32 = 8;
const MKDIR: u32 = 9;
const SYMLINK: u32 = 10;
const MKNOD: u32 = 11;
const REMOVE: u32 = 12;
const RMDIR: u32 = 13;
const RENAME: u32 = 14;
const LINK: u32 = 15;
const READDIR: u32 = 16;
const READDIRPLUS: u32 = 17;
const FSSTAT: u32 = 18;
const FSINFO: u32 = 19;
const PATHCONF: u32 = 20;
const COMMIT: u32 = 21;

// ---------------------------------------------------------------------------
// XDR by hand
// ---------------------------------------------------------------------------

/// A tiny XDR writer (big-endian words, opaque data padded to four bytes).
#[derive(Default)]
struct Xdr(Vec<u8>);

impl Xdr {
    fn new() -> Self {
        Xdr::default()
    }

    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Variable-length opaque: length, bytes, zero padding.
    fn opaque(&mut self, data: &[u8]) -> &mut Self {
        self.u32(u32::try_from(data.len()).unwrap());
        self.fixed(data)
    }

    /// Fixed-length opaque: bytes and padding, no length.
    fn fixed(&mut self, data: &[u8]) -> &mut Self {
        self.0.extend_from_slice(data);
        self.0.resize(self.0.len() + (4 - data.len() % 4) % 4, 0);
        self
    }

    /// Bytes as they are (for lies: a length with no data behind it...).
    fn raw(&mut self, data: &[u8]) -> &mut Self {
        self.0.extend_from_slice(data);
        self
    }

    /// `sattr3` that sets nothing.
    fn sattr_none(&mut self) -> &mut Self {
        for _ in 0..6 {
            self.u32(0);
        }
        self
    }

    /// `diropargs3`.
    fn dirop(&mut self, dir: &[u8], name: &[u8]) -> &mut Self {
        self.opaque(dir).opaque(name)
    }

    fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }
}

/// Reads the XDR of a reply; running out of bytes fails the test.
struct XdrReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> XdrReader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        XdrReader { buf, pos: 0 }
    }

    fn u32(&mut self) -> u32 {
        let b = self.buf.get(self.pos..self.pos + 4).unwrap_or_else(|| panic!("reply truncated at {}", self.pos));
        self.pos += 4;
        u32::from_be_bytes(b.try_into().unwrap())
    }

    fn bool(&mut self) -> bool {
        match self.u32() {
            0 => false,
            1 => true,
            v => panic!("bad XDR bool {v}"),
        }
    }

    fn opaque(&mut self) -> &'a [u8] {
        let len = self.u32() as usize;
        let end = self.pos + len;
        let b = self.buf.get(self.pos..end).unwrap_or_else(|| panic!("opaque of {len} bytes overruns the reply"));
        self.pos = end + (4 - len % 4) % 4;
        b
    }

    fn skip(&mut self, n: usize) {
        self.pos += n;
    }

    /// `post_op_attr`: a bool and 84 bytes of fattr3.
    fn skip_post_op_attr(&mut self) {
        if self.bool() {
            self.skip(84);
        }
    }
}

/// AUTH_SYS for root (the test export is no_root_squash).
fn auth_sys_root() -> Vec<u8> {
    Xdr::new().u32(0).opaque(b"malformed-test").u32(0).u32(0).u32(0).take()
}

/// A call message without its record mark: header with the given RPC
/// version and credential, AUTH_NONE verifier, then `args`.
fn call_message(xid: u32, rpcvers: u32, prog: u32, vers: u32, proc_: u32, cred: (u32, &[u8]), args: &[u8]) -> Vec<u8> {
    let mut x = Xdr::new();
    x.u32(xid).u32(0).u32(rpcvers).u32(prog).u32(vers).u32(proc_);
    x.u32(cred.0).opaque(cred.1);
    x.u32(0).u32(0);
    x.raw(args);
    x.take()
}

/// One record sent as a single (last) fragment.
fn record(message: &[u8]) -> Vec<u8> {
    let mut r = (u32::try_from(message.len()).unwrap() | LAST_FRAGMENT).to_be_bytes().to_vec();
    r.extend_from_slice(message);
    r
}

/// A fragment header: `len` bytes follow, `last` marks the end of a record.
fn fragment_mark(len: u32, last: bool) -> [u8; 4] {
    (len | if last { LAST_FRAGMENT } else { 0 }).to_be_bytes()
}

// ---------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------

/// A reply as RFC 5531 section 9 defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    /// SUCCESS, with the procedure's results.
    Success(Vec<u8>),
    ProgUnavail,
    ProgMismatch {
        low: u32,
        high: u32,
    },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
    RpcMismatch {
        low: u32,
        high: u32,
    },
    AuthError(u32),
}

const AUTH_BADCRED: u32 = 1;

impl Reply {
    /// The results of a SUCCESS reply.
    fn results(&self) -> &[u8] {
        match self {
            Reply::Success(r) => r,
            other => panic!("expected SUCCESS, got {other:?}"),
        }
    }

    /// The `nfsstat3` (or `mountstat3`) that starts the results.
    fn status(&self) -> u32 {
        XdrReader::new(self.results()).u32()
    }
}

fn parse_reply(rec: &[u8], xid: u32) -> Reply {
    let mut r = XdrReader::new(rec);
    assert_eq!(r.u32(), xid, "reply to another call");
    assert_eq!(r.u32(), 1, "msg_type REPLY");
    let reply = match r.u32() {
        0 => {
            let _verf_flavor = r.u32();
            r.opaque();
            match r.u32() {
                0 => return Reply::Success(rec[r.pos..].to_vec()),
                1 => Reply::ProgUnavail,
                2 => Reply::ProgMismatch { low: r.u32(), high: r.u32() },
                3 => Reply::ProcUnavail,
                4 => Reply::GarbageArgs,
                5 => Reply::SystemErr,
                v => panic!("bad accept_stat {v}"),
            }
        }
        1 => match r.u32() {
            0 => Reply::RpcMismatch { low: r.u32(), high: r.u32() },
            1 => Reply::AuthError(r.u32()),
            v => panic!("bad reject_stat {v}"),
        },
        v => panic!("bad reply_stat {v}"),
    };
    assert_eq!(r.pos, rec.len(), "trailing bytes after {reply:?}");
    reply
}

/// What a read from the server came to.
#[derive(Debug)]
enum Incoming {
    Record(Vec<u8>),
    /// EOF or reset: the server closed the connection.
    Closed,
    /// Nothing (or only part of a record) within the timeout.
    TimedOut,
}

// ---------------------------------------------------------------------------
// A raw RPC connection
// ---------------------------------------------------------------------------

struct Client {
    s: TcpStream,
    xid: u32,
}

impl Client {
    fn connect(addr: SocketAddr) -> Self {
        let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect");
        s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        s.set_nodelay(true).unwrap();
        let port = s.local_addr().unwrap().port();
        Client { s, xid: u32::from(port) << 16 }
    }

    fn next_xid(&mut self) -> u32 {
        self.xid = self.xid.wrapping_add(1);
        self.xid
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("send to the server");
    }

    /// Sends what it can; the server may close the connection meanwhile.
    fn send_lossy(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.s.write_all(bytes)
    }

    /// Reads one record, waiting at most `timeout`.
    fn read_record_within(&mut self, timeout: Duration) -> Incoming {
        self.s.set_read_timeout(Some(timeout)).unwrap();
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            let mut mark = [0u8; 4];
            if let Err(i) = self.read_exact_until(&mut mark, deadline) {
                return i;
            }
            let mark = u32::from_be_bytes(mark);
            let len = (mark & !LAST_FRAGMENT) as usize;
            assert!(len <= 4 * IO_BYTES_MAX, "reply fragment of {len} bytes");
            let start = out.len();
            out.resize(start + len, 0);
            if let Err(i) = self.read_exact_until(&mut out[start..], deadline) {
                return i;
            }
            if mark & LAST_FRAGMENT != 0 {
                return Incoming::Record(out);
            }
        }
    }

    fn read_exact_until(&mut self, mut buf: &mut [u8], deadline: Instant) -> Result<(), Incoming> {
        while !buf.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Incoming::TimedOut);
            }
            self.s.set_read_timeout(Some(left)).unwrap();
            match self.s.read(buf) {
                Ok(0) => return Err(Incoming::Closed),
                Ok(n) => buf = &mut buf[n..],
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(Incoming::TimedOut);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted) => {
                    return Err(Incoming::Closed);
                }
                Err(e) => panic!("read from the server: {e}"),
            }
        }
        Ok(())
    }

    fn read_reply(&mut self, xid: u32) -> Reply {
        match self.read_record_within(IO_TIMEOUT) {
            Incoming::Record(rec) => parse_reply(&rec, xid),
            other => panic!("no reply to xid {xid:#x}: {other:?}"),
        }
    }

    /// Sends a call message (header included) as one record; reads the reply.
    fn call_raw(&mut self, xid: u32, message: &[u8]) -> Reply {
        self.send(&record(message));
        self.read_reply(xid)
    }

    /// A well-formed call with AUTH_SYS root and the given (possibly bad) args.
    fn call(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Reply {
        let xid = self.next_xid();
        let msg = call_message(xid, 2, prog, vers, proc_, (1, &auth_sys_root()), args);
        self.call_raw(xid, &msg)
    }

    fn nfs(&mut self, proc_: u32, args: &[u8]) -> Reply {
        self.call(NFS, 3, proc_, args)
    }

    /// The `nfsstat3` of an NFS call that must be accepted.
    fn nfs_status(&mut self, proc_: u32, args: &[u8]) -> u32 {
        let reply = self.nfs(proc_, args);
        match reply {
            Reply::Success(_) => reply.status(),
            other => panic!("NFS proc {proc_}: expected SUCCESS with a status, got {other:?}"),
        }
    }

    /// Asserts that the server closes this connection within `within`
    /// (bytes it sends first are an error too).
    fn expect_closed(&mut self, within: Duration, what: &str) {
        let started = Instant::now();
        match self.read_record_within(within) {
            Incoming::Closed => {}
            Incoming::TimedOut => panic!("{what}: connection still open after {:?}", started.elapsed()),
            Incoming::Record(r) => panic!("{what}: expected the connection closed, got a {}-byte record", r.len()),
        }
    }

    /// MNT of `path`: the mountstat3, and the handle when it is MNT3_OK.
    fn mnt(&mut self, path: &[u8]) -> (u32, Option<Vec<u8>>) {
        let reply = self.call(MOUNT, 3, 1, &Xdr::new().opaque(path).take());
        let mut r = XdrReader::new(reply.results());
        let status = r.u32();
        (status, (status == 0).then(|| r.opaque().to_vec()))
    }

    /// LOOKUP: the status and, on success, the handle.
    fn lookup(&mut self, dir: &[u8], name: &[u8]) -> (u32, Option<Vec<u8>>) {
        let reply = self.nfs(LOOKUP, &Xdr::new().dirop(dir, name).take());
        let mut r = XdrReader::new(reply.results());
        let status = r.u32();
        (status, (status == NFS3_OK).then(|| r.opaque().to_vec()))
    }
}

// ---------------------------------------------------------------------------
// Server-side checks
// ---------------------------------------------------------------------------

/// A server exporting one read-write directory with no_root_squash, and
/// `insecure`: these tests open hundreds of raw connections, in parallel
/// with each other, more than there are reserved source ports to make them
/// from; `secure` itself is tested in `protocol_errors.rs` and
/// `security.rs`.
fn start_server(tag: &str) -> TestServer {
    TestServer::start(tag, vec![insecure_rw_export()], "")
}

fn insecure_rw_export() -> ExportOpts {
    ExportOpts::new(1, "export", "access = \"rw\"\nsquash = \"no_root_squash\"\ninsecure = true")
}

/// The root handle of export 1, by MNT on the server's own port.
fn root_handle(server: &TestServer) -> Vec<u8> {
    let mut c = Client::connect(server.addr);
    let (status, fh) = c.mnt(server.export_path(1).as_bytes());
    assert_eq!(status, 0, "MNT of the export");
    fh.unwrap()
}

/// The server process is still there, answers a NULL call on a new
/// connection, and has not logged a panic.
fn assert_alive(server: &mut TestServer) {
    assert!(server.is_running(), "keel exited");
    let mut c = Client::connect(server.addr);
    assert_eq!(c.nfs(0, &[]), Reply::Success(Vec::new()), "NULL on a new connection");
    let log = server.log_text();
    assert!(!log.contains("panicked"), "the server logged a panic");
}

/// Everything under `dir` (itself included): type, size, mode, link count
/// and times, by relative path.
fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            let m = std::fs::symlink_metadata(&path).unwrap();
            out.insert(path.strip_prefix(root).unwrap().display().to_string(), describe(&m));
            if m.is_dir() {
                walk(root, &path, out);
            }
        }
    }
    fn describe(m: &std::fs::Metadata) -> String {
        format!(
            "mode={:o} size={} nlink={} uid={} mtime={}.{} ctime={}.{}",
            m.mode(),
            m.size(),
            m.nlink(),
            m.uid(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        )
    }
    let mut out = BTreeMap::new();
    out.insert(".".to_string(), describe(&std::fs::metadata(dir).unwrap()));
    walk(dir, dir, &mut out);
    out
}

fn assert_unchanged(before: &BTreeMap<String, String>, dir: &Path) {
    let after = snapshot(dir);
    if &after != before {
        let mut diff = String::new();
        for (k, v) in before {
            match after.get(k) {
                None => diff += &format!("  removed {k}: {v}\n"),
                Some(w) if w != v => diff += &format!("  changed {k}: {v} -> {w}\n"),
                _ => {}
            }
        }
        for (k, v) in &after {
            if !before.contains_key(k) {
                diff += &format!("  created {k:?}: {v}\n");
            }
        }
        panic!("the export directory changed:\n{diff}");
    }
}

/// Resident set size of a process, in bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS line");
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Small deterministic PRNG (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Well-formed arguments for NFS procedure `proc_` (1..=21), all aimed at
/// `fh` and the name "x". Only ever sent truncated or mutated.
fn valid_args(proc_: u32, fh: &[u8]) -> Vec<u8> {
    let mut x = Xdr::new();
    match proc_ {
        GETATTR | READLINK | FSSTAT | FSINFO | PATHCONF => x.opaque(fh),
        SETATTR => x.opaque(fh).sattr_none().u32(0),
        LOOKUP | REMOVE | RMDIR => x.dirop(fh, b"x"),
        ACCESS => x.opaque(fh).u32(0x3f),
        READ => x.opaque(fh).u64(0).u32(10),
        WRITE => x.opaque(fh).u64(0).u32(3).u32(0).opaque(b"abc"),
        CREATE => x.dirop(fh, b"x").u32(0).sattr_none(),
        MKDIR => x.dirop(fh, b"x").sattr_none(),
        SYMLINK => x.dirop(fh, b"x").sattr_none().opaque(b"target"),
        MKNOD => x.dirop(fh, b"x").u32(7).sattr_none(),
        RENAME => x.dirop(fh, b"x").dirop(fh, b"y"),
        LINK => x.opaque(fh).dirop(fh, b"x"),
        READDIR => x.opaque(fh).u64(0).fixed(&[0; 8]).u32(4096),
        READDIRPLUS => x.opaque(fh).u64(0).fixed(&[0; 8]).u32(4096).u32(8192),
        COMMIT => x.opaque(fh).u64(0).u32(0),
        _ => panic!("no procedure {proc_}"),
    };
    x.take()
}

/// Procedures that cannot change anything on disk.
fn is_read_only(proc_: u32) -> bool {
    matches!(proc_, GETATTR | LOOKUP | ACCESS | READLINK | READ | READDIR | READDIRPLUS | FSSTAT | FSINFO | PATHCONF)
}

// ---------------------------------------------------------------------------
// Programs, versions, procedures, credentials
// ---------------------------------------------------------------------------

/// PROG_UNAVAIL, PROG_MISMATCH with the served range, PROC_UNAVAIL: the
/// replies RFC 5531 section 9 prescribes; the connection stays usable.
#[test]
fn unknown_programs_versions_and_procedures_get_rfc_replies() {
    let mut server = start_server("malformed-prog");
    let mut c = Client::connect(server.addr);

    for prog in [0, 1, 99, 100_004, 200_000, 0x2000_0000, u32::MAX, PORTMAP] {
        assert_eq!(c.call(prog, 1, 0, &[]), Reply::ProgUnavail, "program {prog}");
    }
    // NFS: versions 3 and 4 (NFSv4.1 and 4.2 are minor versions of 4).
    for vers in [0, 1, 2, 5, u32::MAX] {
        assert_eq!(c.call(NFS, vers, 0, &[]), Reply::ProgMismatch { low: 3, high: 4 }, "NFS version {vers}");
    }
    assert_eq!(c.call(NFS, 4, 0, &[]), Reply::Success(Vec::new()), "NFSv4's NULL");
    for vers in [0, 1, 2, 4, 5, u32::MAX] {
        assert_eq!(c.call(MOUNT, vers, 0, &[]), Reply::ProgMismatch { low: 3, high: 3 }, "MOUNT version {vers}");
    }
    for proc_ in [22, 23, 100, 1000, u32::MAX] {
        assert_eq!(c.nfs(proc_, &[]), Reply::ProcUnavail, "NFS procedure {proc_}");
    }
    for proc_ in [6, 99, u32::MAX] {
        assert_eq!(c.call(MOUNT, 3, proc_, &[]), Reply::ProcUnavail, "MOUNT procedure {proc_}");
    }
    // The same connection still works, and so does a new one.
    assert_eq!(c.nfs(0, &[]), Reply::Success(Vec::new()));
    assert_eq!(c.call(MOUNT, 3, 0, &[]), Reply::Success(Vec::new()));
    assert_alive(&mut server);
}

/// RPC version other than 2 → MSG_DENIED RPC_MISMATCH 2..2. Unknown
/// credential flavors and AUTH_SYS bodies that do not parse →
/// MSG_DENIED AUTH_ERROR AUTH_BADCRED.
#[test]
fn bad_rpc_versions_and_credentials_are_denied() {
    let mut server = start_server("malformed-auth");
    let mut c = Client::connect(server.addr);
    let root = auth_sys_root();

    for rpcvers in [0, 1, 3, 4, u32::MAX] {
        let xid = c.next_xid();
        let msg = call_message(xid, rpcvers, NFS, 3, 0, (1, &root), &[]);
        assert_eq!(c.call_raw(xid, &msg), Reply::RpcMismatch { low: 2, high: 2 }, "RPC version {rpcvers}");
    }

    // RPCSEC_GSS (6), AUTH_DH (3), AUTH_SHORT (2), nonsense: not accepted.
    for flavor in [6, 3, 2, 390_003, u32::MAX] {
        let xid = c.next_xid();
        let msg = call_message(xid, 2, NFS, 3, 0, (flavor, b"\0\0\0\0"), &[]);
        assert_eq!(c.call_raw(xid, &msg), Reply::AuthError(AUTH_BADCRED), "flavor {flavor}");
    }

    let garbage_auth_sys: Vec<(&str, Vec<u8>)> = vec![
        ("empty body", Vec::new()),
        ("stamp only", Xdr::new().u32(7).take()),
        ("machine name length 0xFFFFFFFF", Xdr::new().u32(7).u32(u32::MAX).u32(0).u32(0).u32(0).take()),
        ("machine name of 256 bytes", Xdr::new().u32(7).opaque(&[b'm'; 256]).u32(0).u32(0).u32(0).take()),
        ("no gid array", Xdr::new().u32(7).opaque(b"h").u32(0).u32(0).take()),
        ("gid count 0xFFFFFFFF", Xdr::new().u32(7).opaque(b"h").u32(0).u32(0).u32(u32::MAX).take()),
        ("17 gids", {
            let mut x = Xdr::new();
            x.u32(7).opaque(b"h").u32(0).u32(0).u32(17);
            for g in 0..17 {
                x.u32(g);
            }
            x.take()
        }),
        ("gid count 3, 1 gid", Xdr::new().u32(7).opaque(b"h").u32(0).u32(0).u32(3).u32(1).take()),
        ("trailing bytes", Xdr::new().u32(7).opaque(b"h").u32(0).u32(0).u32(0).u32(0).take()),
        ("random bytes", Rng(42).bytes(64)),
    ];
    for (what, body) in &garbage_auth_sys {
        let xid = c.next_xid();
        let msg = call_message(xid, 2, NFS, 3, 0, (1, body), &[]);
        assert_eq!(c.call_raw(xid, &msg), Reply::AuthError(AUTH_BADCRED), "AUTH_SYS with {what}");
    }

    // A credential body over the 400 bytes RFC 5531 allows makes the call
    // header itself malformed. Keel answers GARBAGE_ARGS; knfsd answers
    // AUTH_BADCRED. Either is an error reply.
    let xid = c.next_xid();
    let msg = call_message(xid, 2, NFS, 3, 0, (1, &[0; 404]), &[]);
    let reply = c.call_raw(xid, &msg);
    assert!(matches!(reply, Reply::GarbageArgs | Reply::AuthError(AUTH_BADCRED)), "401+ byte credential: {reply:?}");

    // The connection survived all of that.
    assert_eq!(c.nfs(0, &[]), Reply::Success(Vec::new()));
    assert_alive(&mut server);
}

/// A call header cut anywhere after the xid gets GARBAGE_ARGS; records
/// without an xid, and replies sent to the server, get nothing and leave
/// the connection usable.
#[test]
fn truncated_call_headers_and_non_calls() {
    let mut server = start_server("malformed-header");
    let mut c = Client::connect(server.addr);

    let xid = c.next_xid();
    let full = call_message(xid, 2, NFS, 3, 0, (1, &auth_sys_root()), &[]);
    for len in 4..full.len() {
        assert_eq!(c.call_raw(xid, &full[..len]), Reply::GarbageArgs, "header cut to {len} bytes");
    }
    assert_eq!(c.call_raw(xid, &full), Reply::Success(Vec::new()));

    // No xid, a REPLY, an unknown message type: dropped without an answer.
    // The next reply on the connection must be the NULL call's.
    let ignored: Vec<Vec<u8>> = vec![
        Vec::new(),
        vec![1, 2, 3],
        Xdr::new().u32(77).u32(1).u32(0).take(),
        Xdr::new().u32(78).u32(7).u32(2).take(),
    ];
    for msg in &ignored {
        c.send(&record(msg));
        assert_eq!(c.nfs(0, &[]), Reply::Success(Vec::new()), "after an ignored {}-byte record", msg.len());
    }
    assert_alive(&mut server);
}

// ---------------------------------------------------------------------------
// Truncated and garbage arguments
// ---------------------------------------------------------------------------

/// Every NFS procedure with truncated arguments answers GARBAGE_ARGS:
/// no arguments, three random bytes, a valid handle and a few bytes, and
/// well-formed arguments missing their last one to four bytes.
#[test]
fn truncated_arguments_of_every_procedure_are_garbage_args() {
    let mut server = start_server("malformed-trunc");
    let root = root_handle(&server);
    let dir = server.export_dir(1);
    let before = snapshot(&dir);
    let mut c = Client::connect(server.addr);
    let mut rng = Rng(0x5eed);

    for proc_ in 1..=21 {
        assert_eq!(c.nfs(proc_, &[]), Reply::GarbageArgs, "proc {proc_} with no arguments");
        for _ in 0..4 {
            let three = rng.bytes(3);
            assert_eq!(c.nfs(proc_, &three), Reply::GarbageArgs, "proc {proc_} with {three:?}");
        }
        // Only a handle: complete for the procedures that take nothing else.
        if !matches!(proc_, GETATTR | READLINK | FSSTAT | FSINFO | PATHCONF) {
            let args = Xdr::new().opaque(&root).raw(&rng.bytes(3)).take();
            assert_eq!(c.nfs(proc_, &args), Reply::GarbageArgs, "proc {proc_}: a handle and three bytes");
        }
        let valid = valid_args(proc_, &root);
        for cut in 1..=4 {
            let args = &valid[..valid.len() - cut];
            assert_eq!(c.nfs(proc_, args), Reply::GarbageArgs, "proc {proc_} missing its last {cut} bytes");
        }
    }
    // MOUNT's MNT and UMNT take a dirpath.
    for proc_ in [1, 3] {
        assert_eq!(c.call(MOUNT, 3, proc_, &[]), Reply::GarbageArgs, "MOUNT proc {proc_} with no arguments");
        let cut = Xdr::new().u32(20).raw(b"/tmp").take();
        assert_eq!(c.call(MOUNT, 3, proc_, &cut), Reply::GarbageArgs, "MOUNT proc {proc_} with a short path");
    }

    assert_eq!(c.nfs(0, &[]), Reply::Success(Vec::new()));
    assert_alive(&mut server);
    assert_unchanged(&before, &dir);
}

/// Random bytes as the arguments of every procedure: random throughout,
/// a random short handle and random rest, the real root handle and a
/// random rest, and (for procedures that change nothing) well-formed
/// arguments with a few bytes flipped. The answer is GARBAGE_ARGS or an
/// NFS status -- never SYSTEM_ERR (a caught panic), never silence.
#[test]
fn random_garbage_arguments_never_crash_the_server() {
    let mut server = start_server("malformed-random");
    let root = root_handle(&server);
    let dir = server.export_dir(1);
    std::fs::write(dir.join("file"), b"some data").unwrap();
    let before = snapshot(&dir);
    let mut c = Client::connect(server.addr);
    let mut rng = Rng(0xdead_beef_cafe);

    let (mut garbage, mut statuses) = (0, 0);
    for proc_ in 1..=21 {
        for round in 0..60 {
            let args = match round % 4 {
                0 => {
                    let n = rng.below(256);
                    rng.bytes(n)
                }
                1 => {
                    let (fh_len, rest) = (rng.below(65), rng.below(128));
                    Xdr::new().opaque(&rng.bytes(fh_len)).raw(&rng.bytes(rest)).take()
                }
                2 => {
                    let rest = rng.below(64);
                    Xdr::new().opaque(&root).raw(&rng.bytes(rest)).take()
                }
                _ if is_read_only(proc_) => {
                    let mut a = valid_args(proc_, &root);
                    for _ in 0..1 + rng.below(3) {
                        let i = rng.below(a.len());
                        a[i] = rng.next() as u8;
                    }
                    a
                }
                _ => continue,
            };
            match c.nfs(proc_, &args) {
                Reply::GarbageArgs => garbage += 1,
                Reply::Success(r) => {
                    assert!(r.len() >= 4, "proc {proc_}: SUCCESS without a status");
                    statuses += 1;
                }
                other => panic!("proc {proc_} with random arguments {args:02x?}: {other:?}"),
            }
        }
    }
    assert!(garbage > 100 && statuses > 100, "{garbage} GARBAGE_ARGS, {statuses} statuses: a poor mix");
    assert_alive(&mut server);
    assert_unchanged(&before, &dir);
}

// ---------------------------------------------------------------------------
// Lengths that lie
// ---------------------------------------------------------------------------

/// Length fields larger than their bounds or than the record: GARBAGE_ARGS
/// (from the length alone -- nothing of that size is allocated).
#[test]
fn lengths_that_lie_are_garbage_args() {
    let mut server = start_server("malformed-lengths");
    let root = root_handle(&server);
    let dir = server.export_dir(1);
    let before = snapshot(&dir);
    let mut c = Client::connect(server.addr);

    let cases: Vec<(&str, u32, Vec<u8>)> = vec![
        ("handle length 0xFFFFFFFF", GETATTR, Xdr::new().u32(u32::MAX).raw(&[0; 64]).take()),
        ("handle length 0x80000000", GETATTR, Xdr::new().u32(0x8000_0000).take()),
        ("handle of 65 bytes", GETATTR, Xdr::new().opaque(&[1; 65]).take()),
        ("handle of 1000 bytes", GETATTR, Xdr::new().opaque(&[1; 1000]).take()),
        ("handle length 60, 8 bytes sent", GETATTR, Xdr::new().u32(60).raw(&[0; 8]).take()),
        ("handle missing its padding", GETATTR, Xdr::new().u32(5).raw(&[1; 5]).take()),
        ("name length 5000", LOOKUP, Xdr::new().opaque(&root).opaque(&[b'n'; 5000]).take()),
        ("name length 4097", LOOKUP, Xdr::new().opaque(&root).opaque(&[b'n'; 4097]).take()),
        ("name length 0xFFFFFFF0", CREATE, Xdr::new().opaque(&root).u32(0xFFFF_FFF0).raw(&[b'n'; 64]).take()),
        ("name length 1000, 10 sent", MKDIR, Xdr::new().opaque(&root).u32(1000).raw(b"0123456789").take()),
        (
            "RENAME target name length 5000",
            RENAME,
            Xdr::new().dirop(&root, b"a").opaque(&root).opaque(&[b'n'; 5000]).take(),
        ),
        (
            "symlink target of 5000 bytes",
            SYMLINK,
            Xdr::new().dirop(&root, b"l").sattr_none().opaque(&[b't'; 5000]).take(),
        ),
        ("symlink target length 0xFFFFFFFF", SYMLINK, Xdr::new().dirop(&root, b"l").sattr_none().u32(u32::MAX).take()),
        ("WRITE data length 0xFFFFFFFF", WRITE, Xdr::new().opaque(&root).u64(0).u32(4).u32(0).u32(u32::MAX).take()),
        (
            "WRITE data length 1 GiB, 16 bytes sent",
            WRITE,
            Xdr::new().opaque(&root).u64(0).u32(16).u32(2).u32(1 << 30).raw(&[0; 16]).take(),
        ),
        (
            "WRITE data length 1 MiB, 16 bytes sent",
            WRITE,
            Xdr::new().opaque(&root).u64(0).u32(16).u32(2).u32(1 << 20).raw(&[0; 16]).take(),
        ),
        (
            "WRITE of 1 MiB + 1 bytes (over the decode bound, within the record limit)",
            WRITE,
            Xdr::new().opaque(&root).u64(0).u32(1 << 20).u32(2).opaque(&vec![7; (1 << 20) + 1]).take(),
        ),
        ("bool that is 2", SETATTR, Xdr::new().opaque(&root).u32(2).take()),
        ("enum out of range (createmode 3)", CREATE, Xdr::new().dirop(&root, b"c").u32(3).sattr_none().take()),
        ("enum out of range (ftype 0)", MKNOD, Xdr::new().dirop(&root, b"m").u32(0).take()),
        ("enum out of range (stable_how 3)", WRITE, Xdr::new().opaque(&root).u64(0).u32(1).u32(3).opaque(b"x").take()),
        ("time_how 3", SETATTR, Xdr::new().opaque(&root).u32(0).u32(0).u32(0).u32(0).u32(3).take()),
    ];
    for (what, proc_, args) in &cases {
        assert_eq!(c.nfs(*proc_, args), Reply::GarbageArgs, "{what}");
    }
    // MOUNT: a dirpath over MNTPATHLEN (1024), or longer than the record.
    let long = Xdr::new().opaque(&[b'p'; 1025]).take();
    assert_eq!(c.call(MOUNT, 3, 1, &long), Reply::GarbageArgs, "MNT path of 1025 bytes");
    let lie = Xdr::new().u32(1000).raw(b"/tmp").take();
    assert_eq!(c.call(MOUNT, 3, 1, &lie), Reply::GarbageArgs, "MNT path length 1000, 4 bytes sent");

    assert_eq!(c.nfs(0, &[]), Reply::Success(Vec::new()));
    assert_alive(&mut server);
    assert_unchanged(&before, &dir);
}

/// A WRITE whose record claims a gigabyte: the connection is closed from
/// the record mark alone, and the server does not grow by anything like
/// the claimed size while the client keeps sending.
#[test]
fn write_claiming_a_gigabyte_is_refused_without_allocating_it() {
    let mut server = start_server("malformed-gib");
    let root = root_handle(&server);
    let dir = server.export_dir(1);
    std::fs::write(dir.join("target"), b"").unwrap();
    let before = snapshot(&dir);
    let rss_before = rss_bytes(server.pid());

    for (mark_len, data_len) in [(0x7FFF_FFFFu32, 1u32 << 30), ((1 << 30) + 200, 1 << 30), (64 << 20, 64 << 20)] {
        let mut c = Client::connect(server.addr);
        let xid = c.next_xid();
        let args = Xdr::new().opaque(&root).u64(0).u32(data_len).u32(2).u32(data_len).take();
        let msg = call_message(xid, 2, NFS, 3, WRITE, (1, &auth_sys_root()), &args);
        let mut bytes = (mark_len | LAST_FRAGMENT).to_be_bytes().to_vec();
        bytes.extend_from_slice(&msg);
        c.send(&bytes);
        // Keep sending "data": the server must not wait for (or buffer) it.
        let chunk = vec![0xAB; 64 << 10];
        let started = Instant::now();
        for _ in 0..64 {
            if c.send_lossy(&chunk).is_err() {
                break;
            }
        }
        c.expect_closed(CLOSE_WITHIN, &format!("record mark of {mark_len} bytes"));
        assert!(started.elapsed() < CLOSE_WITHIN, "closing took {:?}", started.elapsed());
    }
    let grown = rss_bytes(server.pid()).saturating_sub(rss_before);
    assert!(grown < 64 << 20, "the server grew by {} MiB", grown >> 20);
    assert_alive(&mut server);
    assert_unchanged(&before, &dir);
}

// ---------------------------------------------------------------------------
// Record marking
// ---------------------------------------------------------------------------

/// Record marks announcing more than the record limit (2 GiB, 64 MiB,
/// the limit + 1, across fragments) close the connection at once, from the
/// header: the client has sent only a few bytes of the record.
#[test]
fn oversized_records_close_the_connection_promptly() {
    let mut server = start_server("malformed-oversized");
    let rss_before = rss_bytes(server.pid());

    let marks: [(&str, u32); 6] = [
        ("2 GiB - 1, last fragment", 0xFFFF_FFFF),
        ("2 GiB - 1, not last", 0x7FFF_FFFF),
        ("64 MiB, last fragment", LAST_FRAGMENT | (64 << 20)),
        ("64 MiB, not last", 64 << 20),
        ("limit + 1, last fragment", LAST_FRAGMENT | (RECORD_BYTES_MAX as u32 + 1)),
        ("limit + 1, not last", RECORD_BYTES_MAX as u32 + 1),
    ];
    for (what, mark) in marks {
        let mut c = Client::connect(server.addr);
        let started = Instant::now();
        let mut bytes = mark.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0; 16]);
        c.send(&bytes);
        c.expect_closed(CLOSE_WITHIN, what);
        assert!(started.elapsed() < CLOSE_WITHIN, "{what}: closing took {:?}", started.elapsed());
    }

    // The limit is on the whole record: 1 MiB in a first fragment, then a
    // last fragment that takes it one byte over.
    let mut c = Client::connect(server.addr);
    c.send(&fragment_mark(1 << 20, false));
    c.send(&vec![0; 1 << 20]);
    let rest = (RECORD_BYTES_MAX - (1 << 20) + 1) as u32;
    let _ = c.send_lossy(&fragment_mark(rest, true));
    c.expect_closed(CLOSE_WITHIN, "two fragments one byte over the limit");

    // A record of exactly the limit is still a record: a NULL call padded
    // with ignored argument bytes gets its answer.
    let mut c = Client::connect(server.addr);
    let xid = c.next_xid();
    let mut msg = call_message(xid, 2, NFS, 3, 0, (0, &[]), &[]);
    msg.resize(RECORD_BYTES_MAX, 0);
    assert_eq!(c.call_raw(xid, &msg), Reply::Success(Vec::new()), "a record of exactly the limit");
    msg.push(0);
    let _ = c.send_lossy(&record(&msg));
    c.expect_closed(CLOSE_WITHIN, "a record of the limit + 1");

    let grown = rss_bytes(server.pid()).saturating_sub(rss_before);
    assert!(grown < 64 << 20, "the server grew by {} MiB", grown >> 20);
    assert_alive(&mut server);
}

/// A record in many tiny fragments: answered up to the server's fragment
/// limit (also when it recurs on one connection: the count is per record),
/// the connection closed beyond it -- never a hang.
#[test]
fn records_of_many_fragments_are_answered_or_closed() {
    let mut server = start_server("malformed-fragments");

    // A NULL call in 4-byte fragments.
    let mut c = Client::connect(server.addr);
    let xid = c.next_xid();
    let msg = call_message(xid, 2, NFS, 3, 0, (1, &auth_sys_root()), &[]);
    let chunks: Vec<&[u8]> = msg.chunks(4).collect();
    let mut bytes = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        bytes.extend_from_slice(&fragment_mark(chunk.len() as u32, i + 1 == chunks.len()));
        bytes.extend_from_slice(chunk);
    }
    c.send(&bytes);
    assert_eq!(c.read_reply(xid), Reply::Success(Vec::new()), "NULL in 4-byte fragments");

    // 1000 empty fragments before the call, twice on the same connection.
    for _ in 0..2 {
        let xid = c.next_xid();
        let msg = call_message(xid, 2, NFS, 3, 0, (0, &[]), &[]);
        let mut bytes: Vec<u8> = std::iter::repeat_n(fragment_mark(0, false), 1000).flatten().collect();
        bytes.extend_from_slice(&record(&msg));
        c.send(&bytes);
        assert_eq!(c.read_reply(xid), Reply::Success(Vec::new()), "NULL after 1000 empty fragments");
    }

    // Thousands of empty fragments: refused.
    let mut c = Client::connect(server.addr);
    let bytes: Vec<u8> = std::iter::repeat_n(fragment_mark(0, false), 5000).flatten().collect();
    let _ = c.send_lossy(&bytes);
    c.expect_closed(CLOSE_WITHIN, "5000 empty fragments");

    // An endless stream of one-byte fragments, sent as fast as possible.
    let mut c = Client::connect(server.addr);
    let one: Vec<u8> = std::iter::repeat_n([0, 0, 0, 1, 0x55], 20_000).flatten().collect();
    let _ = c.send_lossy(&one);
    c.expect_closed(CLOSE_WITHIN, "20000 one-byte fragments");

    assert_alive(&mut server);
}

// ---------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------

/// Names with '/', NUL, empty, ".", "..", 256 and 300 bytes and 4096 bytes,
/// in every procedure that takes a name: an NFS error status (LOOKUP of "."
/// and ".." excepted: they name the directory and, at the export root, the
/// root itself) and nothing created, removed or renamed. A name of exactly
/// 255 bytes works.
#[test]
fn bad_names_get_nfs_errors_and_change_nothing() {
    let mut server = start_server("malformed-names");
    let root = root_handle(&server);
    let dir = server.export_dir(1);
    std::fs::write(dir.join("file"), b"content").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/inner"), b"").unwrap();
    let mut c = Client::connect(server.addr);
    let file = c.lookup(&root, b"file").1.unwrap();
    let sub = c.lookup(&root, b"sub").1.unwrap();
    let before = snapshot(&dir);

    let n256 = vec![b'n'; 256];
    let n300 = vec![b'n'; 300];
    let n4096 = vec![b'n'; 4096];
    let bad: Vec<(&str, &[u8])> = vec![
        ("slash inside", b"a/b"),
        ("slash alone", b"/"),
        ("leading slash", b"/file"),
        ("escaping path", b"../../etc/passwd"),
        ("NUL inside", b"a\0b"),
        ("NUL alone", b"\0"),
        ("NUL after a real name", b"file\0"),
        ("empty", b""),
        (".", b"."),
        ("..", b".."),
        ("256 bytes", &n256),
        ("300 bytes", &n300),
        ("4096 bytes", &n4096),
    ];
    // The status keel answers for a bad name, by kind of operation.
    let expected = |name: &[u8], op: &str| -> u32 {
        if name.len() > 255 {
            return NFS3ERR_NAMETOOLONG;
        }
        match (name, op) {
            (b"." | b"..", "lookup") => NFS3_OK,
            (b"." | b"..", "create") => NFS3ERR_EXIST,
            (b".", "remove") => NFS3ERR_INVAL,
            (b"..", "remove") => NFS3ERR_NOTEMPTY,
            (b"." | b"..", "rename") => NFS3ERR_INVAL,
            _ => NFS3ERR_INVAL,
        }
    };

    for (what, name) in &bad {
        let name: &[u8] = name;
        let check = |c: &mut Client, proc_: u32, op: &str, args: Vec<u8>| {
            let status = c.nfs_status(proc_, &args);
            assert_eq!(status, expected(name, op), "proc {proc_} with a name {what}");
        };
        let (status, fh) = c.lookup(&root, name);
        assert_eq!(status, expected(name, "lookup"), "LOOKUP of a name {what}");
        if status == NFS3_OK {
            assert_eq!(fh.unwrap(), root, "LOOKUP {what} in the export root is the root");
        }
        check(&mut c, LOOKUP, "lookup", Xdr::new().dirop(&sub, name).take());
        for how in [0, 1] {
            check(&mut c, CREATE, "create", Xdr::new().dirop(&root, name).u32(how).sattr_none().take());
        }
        check(&mut c, CREATE, "create", Xdr::new().dirop(&root, name).u32(2).fixed(&[9; 8]).take());
        check(&mut c, MKDIR, "create", Xdr::new().dirop(&root, name).sattr_none().take());
        check(&mut c, SYMLINK, "create", Xdr::new().dirop(&root, name).sattr_none().opaque(b"file").take());
        check(&mut c, MKNOD, "create", Xdr::new().dirop(&root, name).u32(7).sattr_none().take());
        check(&mut c, LINK, "create", Xdr::new().opaque(&file).dirop(&root, name).take());
        check(&mut c, REMOVE, "remove", Xdr::new().dirop(&root, name).take());
        check(&mut c, RMDIR, "remove", Xdr::new().dirop(&sub, name).take());
        check(&mut c, RENAME, "rename", Xdr::new().dirop(&root, name).dirop(&root, b"renamed").take());
        check(&mut c, RENAME, "rename", Xdr::new().dirop(&root, b"file").dirop(&root, name).take());
        check(&mut c, RENAME, "rename", Xdr::new().dirop(&root, b"sub").dirop(&sub, name).take());
    }
    // Bad symlink targets: empty, with a NUL, longer than PATH_MAX - 1.
    for (what, target, status) in [
        ("empty", &b""[..], NFS3ERR_INVAL),
        ("with a NUL", &b"fi\0le"[..], NFS3ERR_INVAL),
        ("of 4096 bytes", &n4096[..], NFS3ERR_NAMETOOLONG),
    ] {
        let args = Xdr::new().dirop(&root, b"link").sattr_none().opaque(target).take();
        assert_eq!(c.nfs_status(SYMLINK, &args), status, "SYMLINK to a target {what}");
    }
    assert_alive(&mut server);
    assert_unchanged(&before, &dir);

    // 255 bytes is a legal name: created, found, removed.
    let n255 = vec![b'x'; 255];
    let args = Xdr::new().dirop(&root, &n255).u32(1).sattr_none().take();
    assert_eq!(c.nfs_status(CREATE, &args), NFS3_OK, "CREATE of a 255-byte name");
    assert!(dir.join(std::str::from_utf8(&n255).unwrap()).is_file());
    assert_eq!(c.lookup(&root, &n255).0, NFS3_OK, "LOOKUP of a 255-byte name");
    assert_eq!(c.nfs_status(REMOVE, &Xdr::new().dirop(&root, &n255).take()), NFS3_OK);
    assert_eq!(c.lookup(&root, &n255).0, NFS3ERR_NOENT);
}

/// MNT of paths that try to leave the export, hold a NUL, name a file or
/// nothing: an error status, never a handle.
#[test]
fn mount_paths_that_escape_or_lie_are_refused() {
    let mut server = start_server("malformed-mnt");
    let export = server.export_path(1);
    std::fs::write(server.export_dir(1).join("file"), b"").unwrap();
    let mut c = Client::connect(server.addr);

    let long = format!("{export}/{}", "d/".repeat(500));
    let paths = [
        format!("{export}/.."),
        format!("{export}/../.."),
        format!("{export}/../../etc"),
        format!("{export}/./.."),
        format!("{export}/file"),
        format!("{export}/missing"),
        format!("{export}\0/x"),
        format!("{export}/a\0b"),
        format!("{export}x"),
        "/".to_string(),
        "".to_string(),
        "relative".to_string(),
        long[..1024].to_string(),
    ];
    for p in &paths {
        let (status, fh) = c.mnt(p.as_bytes());
        assert_ne!(status, 0, "MNT of {p:?} answered with handle {fh:02x?}");
    }
    // And the export itself still mounts.
    assert_eq!(c.mnt(export.as_bytes()).0, 0);
    assert_eq!(c.mnt(format!("{export}/").as_bytes()).0, 0);
    assert_alive(&mut server);
}

// ---------------------------------------------------------------------------
// Absurd counts and offsets
// ---------------------------------------------------------------------------

/// READ and READDIR(PLUS) counts are clamped to what the server allows,
/// counts too small for one entry get TOOSMALL, a WRITE count larger than
/// its data gets INVAL, offsets past what a file can hold get FBIG (WRITE)
/// or INVAL (READ), and none of the refused calls changes the file.
#[test]
fn absurd_counts_and_offsets_are_clamped_or_refused() {
    let mut server = start_server("malformed-counts");
    let root = root_handle(&server);
    let dir = server.export_dir(1);
    let big: Vec<u8> = (0..3 * IO_BYTES_MAX / 2).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("big"), &big).unwrap();
    // Enough entries with long names that a full listing is well over the
    // 1 MiB reply limit.
    for i in 0..10_000 {
        std::fs::write(dir.join(format!("entry-{i:05}-{}", "n".repeat(100))), b"").unwrap();
    }
    let mut c = Client::connect(server.addr);
    let fh = c.lookup(&root, b"big").1.unwrap();

    // READ count 0xFFFFFFFF: at most 1 MiB comes back, and it is the file.
    let reply = c.nfs(READ, &Xdr::new().opaque(&fh).u64(0).u32(u32::MAX).take());
    let mut r = XdrReader::new(reply.results());
    assert_eq!(r.u32(), NFS3_OK);
    r.skip_post_op_attr();
    let count = r.u32() as usize;
    let eof = r.bool();
    let data = r.opaque();
    assert_eq!((count, data.len(), eof), (IO_BYTES_MAX, IO_BYTES_MAX, false), "READ count 0xFFFFFFFF");
    assert!(data == &big[..IO_BYTES_MAX]);
    // READ at offsets past anything: INVAL beyond 2^63, empty and eof below.
    let status = c.nfs_status(READ, &Xdr::new().opaque(&fh).u64(u64::MAX).u32(u32::MAX).take());
    assert_eq!(status, NFS3ERR_INVAL, "READ at offset 2^64 - 1");
    let reply = c.nfs(READ, &Xdr::new().opaque(&fh).u64(1 << 62).u32(u32::MAX).take());
    let mut r = XdrReader::new(reply.results());
    assert_eq!(r.u32(), NFS3_OK);
    r.skip_post_op_attr();
    assert_eq!((r.u32(), r.bool(), r.opaque().len()), (0, true, 0), "READ at offset 2^62");

    // READDIR(PLUS) with no room for one entry: TOOSMALL.
    for count in [0, 1, 8, 100] {
        let args = Xdr::new().opaque(&root).u64(0).fixed(&[0; 8]).u32(count).take();
        assert_eq!(c.nfs_status(READDIR, &args), NFS3ERR_TOOSMALL, "READDIR count {count}");
        let args = Xdr::new().opaque(&root).u64(0).fixed(&[0; 8]).u32(count).u32(count).take();
        assert_eq!(c.nfs_status(READDIRPLUS, &args), NFS3ERR_TOOSMALL, "READDIRPLUS maxcount {count}");
    }
    // Counts of 0xFFFFFFFF: a reply filled up to the server's limit, no
    // further, and not claiming the end of the directory.
    let args = Xdr::new().opaque(&root).u64(0).fixed(&[0; 8]).u32(u32::MAX).take();
    let readdir = c.nfs(READDIR, &args);
    let args = Xdr::new().opaque(&root).u64(0).fixed(&[0; 8]).u32(u32::MAX).u32(u32::MAX).take();
    let readdirplus = c.nfs(READDIRPLUS, &args);
    for (what, reply) in [("READDIR", readdir), ("READDIRPLUS", readdirplus)] {
        assert_eq!(reply.status(), NFS3_OK, "{what}");
        let len = reply.results().len();
        assert!(len <= IO_BYTES_MAX && len > IO_BYTES_MAX - 4096, "{what} reply of {len} bytes");
        let eof = XdrReader::new(&reply.results()[len - 4..]).bool();
        assert!(!eof, "{what} claims eof for a partial listing");
    }
    // Cookies no listing ever handed out (past the end, negative as an
    // off_t): some answer, not a crash.
    for cookie in [u64::MAX, 1 << 63, 1 << 62, 0xdead_beef] {
        let args = Xdr::new().opaque(&root).u64(cookie).fixed(&[0; 8]).u32(4096).take();
        assert!(matches!(c.nfs(READDIR, &args), Reply::Success(_)), "READDIR from cookie {cookie:#x}");
        let args = Xdr::new().opaque(&root).u64(cookie).fixed(&[0; 8]).u32(4096).u32(8192).take();
        assert!(matches!(c.nfs(READDIRPLUS, &args), Reply::Success(_)), "READDIRPLUS from cookie {cookie:#x}");
    }
    // A random cookie with a foreign verifier: BAD_COOKIE, not a crash.
    let args = Xdr::new().opaque(&root).u64(0xdead_beef).fixed(&[1; 8]).u32(4096).take();
    let status = c.nfs_status(READDIR, &args);
    assert_ne!(status, NFS3_OK, "READDIR with a foreign cookie verifier");

    let before = snapshot(&dir);
    // WRITE count larger than its data: INVAL, nothing written.
    for (count, data) in [(100u32, &b"0123456789"[..]), (u32::MAX, b"abcd"), (1, b"")] {
        for stable in [0, 2] {
            let args = Xdr::new().opaque(&fh).u64(0).u32(count).u32(stable).opaque(data).take();
            assert_eq!(c.nfs_status(WRITE, &args), NFS3ERR_INVAL, "WRITE count {count} of {} bytes", data.len());
        }
    }
    // WRITE at offsets a file cannot reach: FBIG, nothing written.
    for offset in [u64::MAX, u64::MAX - 3, 1 << 63, (1 << 63) - 2] {
        let args = Xdr::new().opaque(&fh).u64(offset).u32(4).u32(2).opaque(b"abcd").take();
        assert_eq!(c.nfs_status(WRITE, &args), NFS3ERR_FBIG, "WRITE at offset {offset:#x}");
    }
    // SETATTR to an impossible size: an error, the file untouched.
    for size in [u64::MAX, 1 << 63] {
        let args = Xdr::new().opaque(&fh).u32(0).u32(0).u32(0).u32(1).u64(size).u32(0).u32(0).u32(0).take();
        let status = c.nfs_status(SETATTR, &args);
        assert!(matches!(status, NFS3ERR_FBIG | NFS3ERR_INVAL), "SETATTR size {size:#x}: {status}");
    }
    // ACCESS asking for every bit: only defined bits come back.
    let reply = c.nfs(ACCESS, &Xdr::new().opaque(&fh).u32(u32::MAX).take());
    let mut r = XdrReader::new(reply.results());
    assert_eq!(r.u32(), NFS3_OK);
    r.skip_post_op_attr();
    let granted = r.u32();
    assert_eq!(granted & !0x3f, 0, "ACCESS granted undefined bits {granted:#x}");
    // Handles that are not ours: BADHANDLE (or STALE), never a crash.
    for forged in [vec![], vec![0; 64], fh[..fh.len() - 1].to_vec(), [&fh[..], &[0]].concat()] {
        let status = c.nfs_status(GETATTR, &Xdr::new().opaque(&forged).take());
        assert!(matches!(status, NFS3ERR_BADHANDLE | 70), "GETATTR of a forged handle: {status}");
    }
    // COMMIT of absurd ranges flushes the file and says so.
    for (offset, count) in [(0, u32::MAX), (u64::MAX, u32::MAX), (u64::MAX, 0)] {
        let args = Xdr::new().opaque(&fh).u64(offset).u32(count).take();
        assert_eq!(c.nfs_status(COMMIT, &args), NFS3_OK, "COMMIT offset {offset:#x} count {count:#x}");
    }
    assert_unchanged(&before, &dir);
    assert_eq!(std::fs::read(dir.join("big")).unwrap(), big);
    assert_alive(&mut server);
}

// ---------------------------------------------------------------------------
// Connections
// ---------------------------------------------------------------------------

/// Connections that send part of a record and go silent hold nothing up:
/// other connections are answered at once, and the silent one is answered
/// when it finally completes its record.
#[test]
fn half_a_record_does_not_block_other_connections() {
    let mut server = start_server("malformed-half");
    let root = root_handle(&server);

    let mut silent = Vec::new();
    let mut pending = Vec::new();
    for i in 0..20 {
        let mut c = Client::connect(server.addr);
        let xid = c.next_xid();
        let rec =
            record(&call_message(xid, 2, NFS, 3, GETATTR, (1, &auth_sys_root()), &Xdr::new().opaque(&root).take()));
        // Half a header, a header alone, a header and half the body.
        let cut = [2, 4, rec.len() / 2][i % 3];
        c.send(&rec[..cut]);
        pending.push((xid, rec[cut..].to_vec()));
        silent.push(c);
    }
    let started = Instant::now();
    let mut other = Client::connect(server.addr);
    for _ in 0..20 {
        assert_eq!(other.nfs(0, &[]), Reply::Success(Vec::new()));
        assert_eq!(other.nfs_status(GETATTR, &Xdr::new().opaque(&root).take()), NFS3_OK);
    }
    assert!(started.elapsed() < Duration::from_secs(5), "other connections waited {:?}", started.elapsed());
    // The silent connections were kept, not answered half-read.
    for c in &mut silent {
        match c.read_record_within(Duration::from_millis(50)) {
            Incoming::TimedOut => {}
            other => panic!("a half-sent record got {other:?}"),
        }
    }
    for (c, (xid, rest)) in silent.iter_mut().zip(pending) {
        c.send(&rest);
        assert_eq!(c.read_reply(xid).status(), NFS3_OK, "the completed record is answered");
    }
    assert_alive(&mut server);
}

/// 200 connections opened at once are all served.
#[test]
fn two_hundred_connections_at_once_are_all_served() {
    let mut server = start_server("malformed-200");
    let mut clients: Vec<Client> = (0..200).map(|_| Client::connect(server.addr)).collect();
    let xids: Vec<u32> = clients
        .iter_mut()
        .map(|c| {
            let xid = c.next_xid();
            c.send(&record(&call_message(xid, 2, NFS, 3, 0, (1, &auth_sys_root()), &[])));
            xid
        })
        .collect();
    for (c, xid) in clients.iter_mut().zip(xids) {
        assert_eq!(c.read_reply(xid), Reply::Success(Vec::new()));
    }
    assert_alive(&mut server);
}

/// With max_connections = 10, connection 11 takes the place of the one
/// idle for the longest (as knfsd closes idle connections when it needs
/// room): that one is closed, the other nine keep working, and so does the
/// new one. (With none idle the new one is refused: `conns.rs` tests that.)
#[test]
fn connections_above_max_connections_close_the_oldest_idle_one() {
    let mut server = TestServer::start("malformed-maxconn", vec![insecure_rw_export()], "max_connections = 10");
    let mut ten: Vec<Client> = (0..10).map(|_| Client::connect(server.addr)).collect();
    for c in &mut ten {
        assert_eq!(c.nfs(0, &[]), Reply::Success(Vec::new()));
        // Distinct idle ages for a clock counting milliseconds.
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut eleventh = Client::connect(server.addr);
    assert_eq!(eleventh.nfs(0, &[]), Reply::Success(Vec::new()), "connection 11 of 10");
    ten[0].expect_closed(CLOSE_WITHIN, "the connection idle for the longest");
    for c in &mut ten[1..] {
        assert_eq!(c.nfs(0, &[]), Reply::Success(Vec::new()), "the other nine still work");
    }
    assert_alive(&mut server);
}

/// A client that sends READ calls and never reads the replies must not
/// make the server hold an unbounded amount of reply data: the replies
/// waiting for a socket that does not drain have to stop the reading of
/// further calls at some bound.
#[test]
fn a_client_that_never_reads_replies_cannot_grow_the_server_without_bound() {
    const CALLS: usize = 600;
    let mut server = start_server("malformed-noread");
    let root = root_handle(&server);
    let dir = server.export_dir(1);
    std::fs::write(dir.join("mib"), vec![0x5a; IO_BYTES_MAX]).unwrap();
    let fh = Client::connect(server.addr).lookup(&root, b"mib").1.unwrap();
    let rss_before = rss_bytes(server.pid());

    let mut c = Client::connect(server.addr);
    let args = Xdr::new().opaque(&fh).u64(0).u32(IO_BYTES_MAX as u32).take();
    let mut calls = Vec::new();
    for _ in 0..CALLS {
        let xid = c.next_xid();
        calls.extend_from_slice(&record(&call_message(xid, 2, NFS, 3, READ, (1, &auth_sys_root()), &args)));
    }
    // A server that stops reading at its bound may leave part of this
    // unsent; that is fine.
    let _ = c.send_lossy(&calls);
    // Let the server do what it will with them.
    let mut peak = 0;
    let mut last = 0;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(100));
        let rss = rss_bytes(server.pid());
        peak = peak.max(rss);
        if rss == last {
            break;
        }
        last = rss;
    }
    let grown = peak.saturating_sub(rss_before);
    drop(c);
    assert!(
        grown < 300 << 20,
        "{CALLS} unread 1 MiB READ replies grew the server by {} MiB: replies queue without bound",
        grown >> 20
    );
    assert_alive(&mut server);
}

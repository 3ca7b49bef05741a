//! Helpers for the protocol tests (`protocol*.rs`): connections made with
//! the independent `nfs3_client` crate, short forms of the procedures,
//! hand-built RPC records for what that client cannot send (a chosen xid, a
//! MKNOD of a regular file), handle forging, and host-side inspection.
//!
//! Every network wait is bounded by [`STEP`].

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Cursor;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use nfs3_client::tokio::TokioIo;
use nfs3_client::{ConnectError, Nfs3Client, Nfs3Connection, Nfs3ConnectionBuilder, RpcError};
use nfs3_types::nfs3::*;
use nfs3_types::rpc::{
    RPC_VERSION_2, accept_stat_data, auth_unix, call_body, msg_body, opaque_auth, reply_body, rpc_msg,
};
use nfs3_types::xdr_codec::{Opaque, Pack, Unpack};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::common::TestServer;

/// The longest any single exchange with the server may take.
pub const STEP: Duration = Duration::from_secs(60);

pub type Io = TokioIo<TcpStream>;
/// A mounted export: the MOUNT connection and the NFS client (via Deref).
pub type Conn = Nfs3Connection<Io>;
pub type Client = Nfs3Client<Io>;

/// Awaits `f`, failing the test if it takes longer than [`STEP`].
pub async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(STEP, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no answer within {STEP:?}"),
    }
}

/// Awaits an RPC, failing the test on a timeout or an RPC-level error (an
/// NFS status is a result, not an error).
pub async fn rpc<T>(what: &str, f: impl Future<Output = Result<T, RpcError>>) -> T {
    match bounded(what, f).await {
        Ok(v) => v,
        Err(e) => panic!("{what}: RPC failed: {e} ({e:?})"),
    }
}

// ---------------------------------------------------------------------------
// Credentials and connections
// ---------------------------------------------------------------------------

/// AUTH_SYS for `uid`/`gid`, with `gid` as the only supplementary group.
pub fn cred(uid: u32, gid: u32) -> opaque_auth<'static> {
    opaque_auth::auth_unix(&auth_unix {
        stamp: 1,
        machinename: Opaque::borrowed(b"keel-protocol-test"),
        uid,
        gid,
        gids: vec![gid],
    })
}

/// AUTH_SYS for `uid`/`gid` with the supplementary groups `gids`.
pub fn cred_groups(uid: u32, gid: u32, gids: &[u32]) -> opaque_auth<'static> {
    opaque_auth::auth_unix(&auth_unix {
        stamp: 1,
        machinename: Opaque::borrowed(b"keel-protocol-test"),
        uid,
        gid,
        gids: gids.to_vec(),
    })
}

pub fn root() -> opaque_auth<'static> {
    cred(0, 0)
}

/// MNT `path` and open an NFS connection, from a privileged source port or not.
pub async fn try_mount(
    server: &TestServer,
    path: &str,
    credential: opaque_auth<'static>,
    privileged: bool,
) -> Result<Conn, ConnectError> {
    let port = server.addr.port();
    let builder = Nfs3ConnectionBuilder::new(nfs3_client::tokio::TokioConnector, server.addr.ip().to_string(), path)
        .mount_port(port)
        .nfs3_port(port)
        .connect_from_privileged_port(privileged)
        .credential(credential);
    bounded(&format!("MNT {path}"), builder.mount()).await
}

/// Mounts export `id` from a privileged port as `credential`.
pub async fn mount(server: &TestServer, id: u32, credential: opaque_auth<'static>) -> Conn {
    let path = server.export_path(id);
    match try_mount(server, &path, credential, true).await {
        Ok(c) => c,
        Err(e) => panic!("MNT {path}: {e} ({e:?})\nlog:\n{}", server.log_text()),
    }
}

/// Mounts export `id` as root; returns the connection and the root handle.
pub async fn mount_root(server: &TestServer, id: u32) -> (Conn, nfs_fh3) {
    let conn = mount(server, id, root()).await;
    let fh = conn.root_nfs_fh3();
    (conn, fh)
}

/// A TCP connection to the server from a source port below 1024.
pub async fn privileged_stream(addr: SocketAddr) -> TcpStream {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = (std::process::id() as u16).wrapping_mul(37);
    for _ in 0..PRIVILEGED_PORTS {
        let port = 600 + base.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % PRIVILEGED_PORTS;
        let socket = TcpSocket::new_v4().expect("socket");
        if socket.bind(SocketAddr::from(([0, 0, 0, 0], port))).is_err() {
            continue;
        }
        match bounded("connect", socket.connect(addr)).await {
            Ok(s) => return s,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::AddrInUse | std::io::ErrorKind::AddrNotAvailable) => {}
            Err(e) => panic!("connect to {addr} from port {port}: {e}"),
        }
    }
    panic!("no free privileged source port");
}

/// Source ports 600..1024 are tried for privileged connections.
const PRIVILEGED_PORTS: u16 = 424;

/// An NFS client without MNT, as a client that kept its handles from an
/// earlier mount would have.
pub async fn nfs_client(server: &TestServer, credential: opaque_auth<'static>, privileged: bool) -> Client {
    let stream = if privileged {
        privileged_stream(server.addr).await
    } else {
        bounded("connect", TcpStream::connect(server.addr)).await.expect("connect")
    };
    assert_eq!(stream.local_addr().unwrap().port() < 1024, privileged, "source port of the test connection");
    Nfs3Client::new_with_auth(TokioIo::new(stream), credential, opaque_auth::default())
}

// ---------------------------------------------------------------------------
// Short forms of the procedures
// ---------------------------------------------------------------------------

pub fn status<T, E>(r: &Nfs3Result<T, E>) -> nfsstat3 {
    match r {
        Nfs3Result::Ok(_) => nfsstat3::NFS3_OK,
        Nfs3Result::Err((s, _)) => *s,
    }
}

pub fn fh_of(bytes: &[u8]) -> nfs_fh3 {
    nfs_fh3 { data: Opaque::owned(bytes.to_vec()) }
}

pub fn dirop(dir: &nfs_fh3, name: &[u8]) -> diropargs3<'static> {
    diropargs3 { dir: dir.clone(), name: filename3::from(name.to_vec()) }
}

pub fn mode_attr(mode: u32) -> sattr3 {
    sattr3 { mode: Nfs3Option::Some(mode), ..sattr3::default() }
}

pub async fn getattr(c: &mut Client, fh: &nfs_fh3) -> GETATTR3res {
    rpc("GETATTR", c.getattr(&GETATTR3args { object: fh.clone() })).await
}

pub async fn attrs(c: &mut Client, fh: &nfs_fh3) -> fattr3 {
    getattr(c, fh).await.expect("GETATTR").obj_attributes
}

pub async fn lookup(c: &mut Client, dir: &nfs_fh3, name: &[u8]) -> LOOKUP3res {
    rpc("LOOKUP", c.lookup(&LOOKUP3args { what: dirop(dir, name) })).await
}

pub async fn lookup_fh(c: &mut Client, dir: &nfs_fh3, name: &[u8]) -> nfs_fh3 {
    lookup(c, dir, name).await.expect(&format!("LOOKUP {}", String::from_utf8_lossy(name))).object
}

pub async fn create(c: &mut Client, dir: &nfs_fh3, name: &[u8], how: createhow3) -> CREATE3res {
    rpc("CREATE", c.create(&CREATE3args { where_: dirop(dir, name), how })).await
}

/// CREATE GUARDED with `mode`; the new handle and attributes.
pub async fn create_file(c: &mut Client, dir: &nfs_fh3, name: &[u8], mode: u32) -> (nfs_fh3, fattr3) {
    let ok = create(c, dir, name, createhow3::GUARDED(mode_attr(mode)))
        .await
        .expect(&format!("CREATE {}", String::from_utf8_lossy(name)));
    (ok.obj.unwrap(), ok.obj_attributes.unwrap())
}

pub async fn mkdir(c: &mut Client, dir: &nfs_fh3, name: &[u8], mode: u32) -> MKDIR3res {
    rpc("MKDIR", c.mkdir(&MKDIR3args { where_: dirop(dir, name), attributes: mode_attr(mode) })).await
}

pub async fn mkdir_fh(c: &mut Client, dir: &nfs_fh3, name: &[u8], mode: u32) -> nfs_fh3 {
    mkdir(c, dir, name, mode).await.expect(&format!("MKDIR {}", String::from_utf8_lossy(name))).obj.unwrap()
}

pub async fn symlink(c: &mut Client, dir: &nfs_fh3, name: &[u8], target: &[u8]) -> SYMLINK3res {
    let args = SYMLINK3args {
        where_: dirop(dir, name),
        symlink: symlinkdata3 { symlink_attributes: sattr3::default(), symlink_data: nfspath3::from(target.to_vec()) },
    };
    rpc("SYMLINK", c.symlink(&args)).await
}

pub async fn mknod(c: &mut Client, dir: &nfs_fh3, name: &[u8], what: mknoddata3) -> MKNOD3res {
    rpc("MKNOD", c.mknod(&MKNOD3args { where_: dirop(dir, name), what })).await
}

pub async fn write(c: &mut Client, fh: &nfs_fh3, offset: u64, data: &[u8], stable: stable_how) -> WRITE3res {
    let args = WRITE3args { file: fh.clone(), offset, count: data.len() as u32, stable, data: Opaque::borrowed(data) };
    rpc("WRITE", c.write(&args)).await
}

pub async fn read(c: &mut Client, fh: &nfs_fh3, offset: u64, count: u32) -> READ3res<'static> {
    rpc("READ", c.read(&READ3args { file: fh.clone(), offset, count })).await
}

pub async fn commit(c: &mut Client, fh: &nfs_fh3) -> COMMIT3res {
    rpc("COMMIT", c.commit(&COMMIT3args { file: fh.clone(), offset: 0, count: 0 })).await
}

pub async fn setattr(c: &mut Client, fh: &nfs_fh3, new: sattr3, guard: Option<nfstime3>) -> SETATTR3res {
    let guard = match guard {
        Some(t) => Nfs3Option::Some(t),
        None => Nfs3Option::None,
    };
    rpc("SETATTR", c.setattr(&SETATTR3args { object: fh.clone(), new_attributes: new, guard })).await
}

pub async fn access(c: &mut Client, fh: &nfs_fh3, want: u32) -> ACCESS3res {
    rpc("ACCESS", c.access(&ACCESS3args { object: fh.clone(), access: want })).await
}

pub async fn remove(c: &mut Client, dir: &nfs_fh3, name: &[u8]) -> REMOVE3res {
    rpc("REMOVE", c.remove(&REMOVE3args { object: dirop(dir, name) })).await
}

pub async fn rmdir(c: &mut Client, dir: &nfs_fh3, name: &[u8]) -> RMDIR3res {
    rpc("RMDIR", c.rmdir(&RMDIR3args { object: dirop(dir, name) })).await
}

pub async fn rename(c: &mut Client, from: &nfs_fh3, fname: &[u8], to: &nfs_fh3, tname: &[u8]) -> RENAME3res {
    rpc("RENAME", c.rename(&RENAME3args { from: dirop(from, fname), to: dirop(to, tname) })).await
}

pub async fn link(c: &mut Client, file: &nfs_fh3, dir: &nfs_fh3, name: &[u8]) -> LINK3res {
    rpc("LINK", c.link(&LINK3args { file: file.clone(), link: dirop(dir, name) })).await
}

pub async fn readdir(
    c: &mut Client,
    dir: &nfs_fh3,
    cookie: u64,
    verf: cookieverf3,
    count: u32,
) -> READDIR3res<'static> {
    rpc("READDIR", c.readdir(&READDIR3args { dir: dir.clone(), cookie, cookieverf: verf, count })).await
}

pub async fn readdirplus(
    c: &mut Client,
    dir: &nfs_fh3,
    cookie: u64,
    verf: cookieverf3,
    maxcount: u32,
) -> READDIRPLUS3res<'static> {
    let args = READDIRPLUS3args { dir: dir.clone(), cookie, cookieverf: verf, dircount: maxcount / 2, maxcount };
    rpc("READDIRPLUS", c.readdirplus(&args)).await
}

/// Every entry name of a (small) directory, by READDIR from cookie 0.
pub async fn list_names(c: &mut Client, dir: &nfs_fh3) -> Vec<String> {
    let mut names = Vec::new();
    let (mut cookie, mut verf) = (0, cookieverf3::default());
    for _ in 0..10_000 {
        let ok = readdir(c, dir, cookie, verf, 64 * 1024).await.expect("READDIR");
        verf = ok.cookieverf;
        for e in ok.reply.entries.into_inner() {
            cookie = e.cookie;
            names.push(String::from_utf8_lossy(e.name.as_ref()).into_owned());
        }
        if ok.reply.eof {
            names.sort();
            return names;
        }
    }
    panic!("READDIR never reached eof");
}

// ---------------------------------------------------------------------------
// Hand-built RPC records, for calls nfs3_client cannot make
// ---------------------------------------------------------------------------

/// One NFSv3 call record (record mark included) with the given xid.
pub fn call_record<A: Pack>(xid: u32, proc_: NFS_PROGRAM, credential: &opaque_auth<'static>, args: &A) -> Vec<u8> {
    let verf = opaque_auth::default();
    let msg = rpc_msg {
        xid,
        body: msg_body::CALL(call_body {
            rpcvers: RPC_VERSION_2,
            prog: PROGRAM,
            vers: VERSION,
            proc: proc_ as u32,
            cred: credential.borrow(),
            verf: verf.borrow(),
        }),
    };
    let mut body = Vec::new();
    msg.pack(&mut body).expect("pack call header");
    args.pack(&mut body).expect("pack arguments");
    assert_eq!(body.len() % 4, 0);
    let mut record = ((body.len() as u32) | 0x8000_0000).to_be_bytes().to_vec();
    record.extend_from_slice(&body);
    record
}

/// Decodes a reply record (without its mark): checks the xid and that the
/// call was accepted and executed, then decodes the results.
pub fn decode_reply<R: Unpack>(xid: u32, reply: &[u8]) -> R {
    let mut cur = Cursor::new(reply);
    let (msg, _) = rpc_msg::unpack(&mut cur).expect("reply header");
    assert_eq!(msg.xid, xid, "reply xid");
    match msg.body {
        msg_body::REPLY(reply_body::MSG_ACCEPTED(a)) => {
            assert!(matches!(a.reply_data, accept_stat_data::SUCCESS), "call not executed: {:?}", a.reply_data)
        }
        other => panic!("not an accepted reply: {other:?}"),
    }
    let (r, _) = R::unpack(&mut cur).expect("results");
    assert_eq!(cur.position() as usize, reply.len(), "trailing bytes after the results");
    r
}

/// A raw TCP connection that sends records as given and reads replies
/// whole (all fragments).
pub struct RawConn {
    pub stream: TcpStream,
}

impl RawConn {
    pub async fn connect(addr: SocketAddr) -> Self {
        RawConn { stream: bounded("connect", TcpStream::connect(addr)).await.expect("connect") }
    }

    /// From local port `port` (0: any), with SO_REUSEADDR and, when
    /// `abortive`, SO_LINGER 0 so that closing resets the connection and
    /// leaves no TIME_WAIT behind (the port can be used again at once, as
    /// a client reconnecting from the same port does).
    pub async fn connect_from(addr: SocketAddr, port: u16, abortive: bool) -> Self {
        let socket = TcpSocket::new_v4().expect("socket");
        socket.set_reuseaddr(true).expect("SO_REUSEADDR");
        socket.bind(SocketAddr::from(([127, 0, 0, 1], port))).expect("bind");
        let stream = bounded("connect", socket.connect(addr)).await.expect("connect");
        if abortive {
            // Deprecated because a non-zero linger blocks in drop; zero
            // does not block, it resets.
            #[allow(deprecated)]
            stream.set_linger(Some(Duration::ZERO)).expect("SO_LINGER");
        }
        RawConn { stream }
    }

    pub fn local_port(&self) -> u16 {
        self.stream.local_addr().unwrap().port()
    }

    pub async fn send(&mut self, record: &[u8]) {
        bounded("send", self.stream.write_all(record)).await.expect("send");
    }

    /// The next reply record, without record marks.
    pub async fn recv(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let mut mark = [0u8; 4];
            bounded("reply", self.stream.read_exact(&mut mark)).await.expect("reply record mark");
            let mark = u32::from_be_bytes(mark);
            let start = out.len();
            out.resize(start + (mark & 0x7fff_ffff) as usize, 0);
            bounded("reply", self.stream.read_exact(&mut out[start..])).await.expect("reply fragment");
            if mark & 0x8000_0000 != 0 {
                return out;
            }
        }
    }

    pub async fn call(&mut self, record: &[u8]) -> Vec<u8> {
        self.send(record).await;
        self.recv().await
    }
}

/// MKNOD arguments of any `ftype3`, with no type-specific data: what
/// `mknoddata3` cannot express for NF3REG, NF3DIR and NF3LNK.
pub struct MknodOfType {
    pub where_: diropargs3<'static>,
    pub ftype: ftype3,
}

impl Pack for MknodOfType {
    fn packed_size(&self) -> usize {
        self.where_.packed_size() + 4
    }

    fn pack(&self, out: &mut impl std::io::Write) -> nfs3_types::xdr_codec::Result<usize> {
        Ok(self.where_.pack(out)? + (self.ftype as u32).pack(out)?)
    }
}

// ---------------------------------------------------------------------------
// File handles, as crates/vfs/src/handle.rs lays them out
// ---------------------------------------------------------------------------

/// The parts of a Keel handle:
/// version, ftype, kernel handle type, kernel handle length, export id
/// (BE u32), fsid (BE u64), kernel handle, 8-byte MAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandleParts {
    pub version: u8,
    pub ftype: u8,
    pub export_id: u32,
    pub fsid: u64,
    pub kernel: KernelHandle,
    pub mac: [u8; 8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelHandle {
    pub handle_type: i32,
    pub bytes: Vec<u8>,
}

pub fn parse_handle(fh: &[u8]) -> HandleParts {
    assert!(fh.len() >= 24, "handle of {} bytes", fh.len());
    let n = fh[3] as usize;
    assert_eq!(fh.len(), 16 + n + 8, "handle layout");
    HandleParts {
        version: fh[0],
        ftype: fh[1],
        export_id: u32::from_be_bytes(fh[4..8].try_into().unwrap()),
        fsid: u64::from_be_bytes(fh[8..16].try_into().unwrap()),
        kernel: KernelHandle { handle_type: i32::from(fh[2]), bytes: fh[16..16 + n].to_vec() },
        mac: fh[16 + n..].try_into().unwrap(),
    }
}

/// The handle bytes before the MAC.
pub fn handle_body(p: &HandleParts) -> Vec<u8> {
    let mut b = vec![p.version, p.ftype, p.kernel.handle_type as u8, p.kernel.bytes.len() as u8];
    b.extend_from_slice(&p.export_id.to_be_bytes());
    b.extend_from_slice(&p.fsid.to_be_bytes());
    b.extend_from_slice(&p.kernel.bytes);
    b
}

pub fn build_handle(p: &HandleParts) -> nfs_fh3 {
    let mut b = handle_body(p);
    b.extend_from_slice(&p.mac);
    fh_of(&b)
}

/// SipHash-2-4 under the server's handle key, as Keel computes the MAC.
pub fn handle_mac(key: &[u8; 16], body: &[u8]) -> [u8; 8] {
    use std::hash::Hasher;
    let k0 = u64::from_le_bytes(key[..8].try_into().unwrap());
    let k1 = u64::from_le_bytes(key[8..].try_into().unwrap());
    // std's SipHasher is SipHash-2-4; deprecated only in favour of
    // DefaultHasher, whose algorithm is unspecified.
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new_with_keys(k0, k1);
    h.write(body);
    h.finish().to_be_bytes()
}

/// The server's handle key, from its state directory.
pub fn handle_key(server: &TestServer) -> [u8; 16] {
    let bytes = std::fs::read(server.base.join("state/handle.key")).expect("read handle key");
    bytes[..16].try_into().expect("16-byte key")
}

/// name_to_handle_at(2) of `path` on the host (not following a final symlink).
pub fn kernel_handle(path: &Path) -> KernelHandle {
    #[repr(C)]
    struct RawHandle {
        handle_bytes: u32,
        handle_type: i32,
        f_handle: [u8; 128],
    }
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut raw = RawHandle { handle_bytes: 128, handle_type: 0, f_handle: [0; 128] };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: raw is a struct file_handle with 128 bytes of handle storage.
    let r = unsafe { libc::name_to_handle_at(libc::AT_FDCWD, c.as_ptr(), (&raw mut raw).cast(), &mut mount_id, 0) };
    assert_eq!(r, 0, "name_to_handle_at {}: {}", path.display(), std::io::Error::last_os_error());
    KernelHandle { handle_type: raw.handle_type, bytes: raw.f_handle[..raw.handle_bytes as usize].to_vec() }
}

// ---------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------

pub fn meta(path: &Path) -> std::fs::Metadata {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
}

pub fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Everything observable about a tree on the host, for before/after
/// comparisons: per path, its type, mode, owner, size, link count,
/// mtime, ctime and content (files) or target (symlinks).
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        let m = meta(&p);
        let ft = m.file_type();
        let extra = if ft.is_file() {
            format!("{:?}", std::fs::read(&p).unwrap())
        } else if ft.is_symlink() {
            format!("-> {}", std::fs::read_link(&p).unwrap().display())
        } else if ft.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                todo.push(e.unwrap().path());
            }
            String::new()
        } else {
            format!("special fifo={} rdev={}", ft.is_fifo(), m.rdev())
        };
        let desc = format!(
            "mode={:o} uid={} gid={} size={} nlink={} mtime={}.{} ctime={}.{} {extra}",
            m.mode(),
            m.uid(),
            m.gid(),
            m.size(),
            m.nlink(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        );
        out.insert(p.strip_prefix(root).unwrap().to_path_buf(), desc);
    }
    out
}

pub fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
}

pub fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A file with `content`, `mode` and owner `uid:gid`, made on the host.
pub fn host_file(path: &Path, content: &[u8], mode: u32, uid: u32, gid: u32) {
    std::fs::write(path, content).unwrap();
    // chown clears setuid and setgid: owner first, then mode.
    chown(path, uid, gid);
    chmod(path, mode);
}

pub fn host_dir(path: &Path, mode: u32, uid: u32, gid: u32) {
    std::fs::create_dir(path).unwrap();
    chown(path, uid, gid);
    chmod(path, mode);
}

/// Deterministic, position-dependent bytes (so misplaced data shows).
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

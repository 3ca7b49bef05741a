//! Connections made with the independent `nfs3_client` crate, and short
//! forms of the procedures over them. Every network wait is bounded by
//! [`STEP`].

use std::future::Future;
use std::time::Duration;

use nfs3_client::tokio::TokioIo;
use nfs3_client::{ConnectError, Nfs3Client, Nfs3Connection, Nfs3ConnectionBuilder, RpcError};
use nfs3_types::nfs3::*;
use nfs3_types::rpc::{auth_unix, opaque_auth};
use nfs3_types::xdr_codec::Opaque;
use tokio::net::TcpStream;

use super::ports::privileged_stream;
use crate::server::TestServer;

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

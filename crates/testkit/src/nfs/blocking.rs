//! A small blocking NFSv3 / MOUNT v3 client over TCP for tests that need
//! exact control over what goes on the wire: the stability of each WRITE,
//! calls pipelined on one connection whose replies are read later (or never),
//! and the raw outcome of each call. The calls are AUTH_SYS root unless a
//! connection is given another credential.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use nfs3_types::mount::{dirpath, mountres3};
use nfs3_types::nfs3::*;
use nfs3_types::rpc::opaque_auth;
use nfs3_types::xdr_codec::{Opaque, Pack, Unpack};

use super::client::{cred_groups, fh_of};
use super::ports::reserved_stream;
use super::records::{REPLY_BYTES_MAX, decode, parse_reply, prog, rpc_record};

/// A file handle as the server gave it.
pub type Fh = Vec<u8>;

/// One TCP connection speaking ONC RPC (record marking, AUTH_SYS root by
/// default).
pub struct RpcConn {
    stream: TcpStream,
    next_xid: u32,
    credential: opaque_auth<'static>,
    /// Calls kept back by [`RpcConn::hold`], to go in one write.
    held: Option<Vec<u8>>,
}

impl RpcConn {
    /// From a reserved source port, as a kernel client connects.
    pub fn connect(addr: SocketAddr) -> io::Result<Self> {
        Self::from_stream(reserved_stream(addr))
    }

    /// Over a connection made elsewhere (say, with socket options that
    /// must be set before connecting).
    pub fn from_stream(stream: TcpStream) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        stream.set_write_timeout(Some(Duration::from_secs(60)))?;
        Ok(RpcConn {
            stream,
            next_xid: 0x5eed_0000 ^ std::process::id(),
            credential: cred_groups(0, 0, &[]),
            held: None,
        })
    }

    /// The calls that follow go as `credential` (AUTH_SYS root until then).
    pub fn set_credential(&mut self, credential: opaque_auth<'static>) {
        self.credential = credential;
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.stream.local_addr().expect("local address")
    }

    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Sends one call without waiting for its reply; returns its xid.
    pub fn send<A: Pack>(&mut self, program: u32, version: u32, proc_: u32, args: &A) -> io::Result<u32> {
        let xid = self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1);
        let record = rpc_record(xid, program, version, proc_, &self.credential, args);
        match &mut self.held {
            Some(held) => held.extend_from_slice(&record),
            None => self.stream.write_all(&record)?,
        }
        Ok(xid)
    }

    /// Keeps the calls sent from now on back until [`RpcConn::release`],
    /// which writes them all at once: the server finds them in its socket
    /// together.
    pub fn hold(&mut self) {
        self.held.get_or_insert_with(Vec::new);
    }

    /// Writes the calls held back, in one write.
    pub fn release(&mut self) -> io::Result<()> {
        match self.held.take() {
            Some(held) => self.stream.write_all(&held),
            None => Ok(()),
        }
    }

    /// The calls held back since [`RpcConn::hold`], as bytes, for the test
    /// to send as it likes (in pieces, say); nothing is held after.
    pub fn take_held(&mut self) -> Vec<u8> {
        self.held.take().unwrap_or_default()
    }

    /// Reads the next reply: its xid and the procedure's result bytes. A
    /// reply that is not "accepted, success" is an error.
    pub fn recv(&mut self) -> io::Result<(u32, Vec<u8>)> {
        let mut record = Vec::new();
        loop {
            let mut mark = [0u8; 4];
            self.stream.read_exact(&mut mark)?;
            let mark = u32::from_be_bytes(mark);
            let len = (mark & 0x7fff_ffff) as usize;
            if record.len() + len > REPLY_BYTES_MAX {
                return Err(io::Error::other(format!("reply record of {} bytes", record.len() + len)));
            }
            let start = record.len();
            record.resize(start + len, 0);
            self.stream.read_exact(&mut record[start..])?;
            if mark & 0x8000_0000 != 0 {
                break;
            }
        }
        let (xid, results) = parse_reply(&record)?;
        Ok((xid, results.to_vec()))
    }

    pub fn call<A: Pack, R: Unpack>(&mut self, prog: u32, vers: u32, proc_: u32, args: &A) -> io::Result<R> {
        let xid = self.send(prog, vers, proc_, args)?;
        let (got, body) = self.recv()?;
        if got != xid {
            return Err(io::Error::other(format!("reply to xid {got:#x}, expected {xid:#x}")));
        }
        decode(&body)
    }
}

/// NFS procedure numbers (RFC 1813).
pub mod proc3 {
    pub const NULL: u32 = 0;
    pub const GETATTR: u32 = 1;
    pub const SETATTR: u32 = 2;
    pub const LOOKUP: u32 = 3;
    pub const READLINK: u32 = 5;
    pub const READ: u32 = 6;
    pub const WRITE: u32 = 7;
    pub const CREATE: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const SYMLINK: u32 = 10;
    pub const MKNOD: u32 = 11;
    pub const REMOVE: u32 = 12;
    pub const RMDIR: u32 = 13;
    pub const RENAME: u32 = 14;
    pub const LINK: u32 = 15;
    pub const COMMIT: u32 = 21;
}

/// What a WRITE reply said.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    pub count: u32,
    pub committed: stable_how,
    pub verf: [u8; 8],
}

/// NFSv3 calls on one connection, one at a time (plus explicit pipelining
/// through `send_write` / `recv_write`).
pub struct Nfs {
    pub conn: RpcConn,
}

pub type NfsResult<T> = Result<T, nfsstat3>;

fn ok_or_stat<T, E>(r: Nfs3Result<T, E>) -> NfsResult<T> {
    match r {
        Nfs3Result::Ok(v) => Ok(v),
        Nfs3Result::Err((stat, _)) => Err(stat),
    }
}

fn dirop<'a>(dir: &[u8], name: &'a str) -> diropargs3<'a> {
    diropargs3 { dir: fh_of(dir), name: filename3(Opaque::borrowed(name.as_bytes())) }
}

impl Nfs {
    pub fn connect(addr: SocketAddr) -> io::Result<Self> {
        Ok(Nfs { conn: RpcConn::connect(addr)? })
    }

    /// MOUNT MNT of `path` on this connection (Keel serves MOUNT on the NFS
    /// port): the root handle.
    pub fn mount(&mut self, path: &str) -> io::Result<Fh> {
        let args = dirpath(Opaque::borrowed(path.as_bytes()));
        match self.conn.call::<_, mountres3>(prog::MOUNT, prog::MOUNT_V3, 1, &args)? {
            mountres3::Ok(ok) => Ok(ok.fhandle.0.to_vec()),
            mountres3::Err(e) => Err(io::Error::other(format!("MNT {path}: {e:?}"))),
        }
    }

    fn call<A: Pack, R: Unpack>(&mut self, proc_: u32, args: &A) -> R {
        self.conn.call(prog::NFS, prog::NFS_V3, proc_, args).unwrap_or_else(|e| panic!("NFS call {proc_}: {e}"))
    }

    pub fn null(&mut self) -> io::Result<()> {
        let void = nfs3_types::xdr_codec::Void;
        self.conn.call::<_, nfs3_types::xdr_codec::Void>(prog::NFS, prog::NFS_V3, proc3::NULL, &void)?;
        Ok(())
    }

    pub fn getattr(&mut self, fh: &[u8]) -> NfsResult<fattr3> {
        let r: GETATTR3res = self.call(proc3::GETATTR, &GETATTR3args { object: fh_of(fh) });
        ok_or_stat(r).map(|ok| ok.obj_attributes)
    }

    pub fn lookup(&mut self, dir: &[u8], name: &str) -> NfsResult<Fh> {
        let r: LOOKUP3res = self.call(proc3::LOOKUP, &LOOKUP3args { what: dirop(dir, name) });
        ok_or_stat(r).map(|ok| ok.object.data.to_vec())
    }

    pub fn create(&mut self, dir: &[u8], name: &str, how: createhow3) -> NfsResult<Fh> {
        let r: CREATE3res = self.call(proc3::CREATE, &CREATE3args { where_: dirop(dir, name), how });
        match ok_or_stat(r)?.obj {
            Nfs3Option::Some(fh) => Ok(fh.data.to_vec()),
            Nfs3Option::None => self.lookup(dir, name),
        }
    }

    /// CREATE GUARDED with mode 0644.
    pub fn create_new(&mut self, dir: &[u8], name: &str) -> NfsResult<Fh> {
        let attrs = sattr3 { mode: Nfs3Option::Some(0o644), ..Default::default() };
        self.create(dir, name, createhow3::GUARDED(attrs))
    }

    pub fn mkdir(&mut self, dir: &[u8], name: &str) -> NfsResult<Fh> {
        let attributes = sattr3 { mode: Nfs3Option::Some(0o755), ..Default::default() };
        let r: MKDIR3res = self.call(proc3::MKDIR, &MKDIR3args { where_: dirop(dir, name), attributes });
        match ok_or_stat(r)?.obj {
            Nfs3Option::Some(fh) => Ok(fh.data.to_vec()),
            Nfs3Option::None => self.lookup(dir, name),
        }
    }

    pub fn symlink(&mut self, dir: &[u8], name: &str, target: &str) -> NfsResult<()> {
        let symlink = symlinkdata3 {
            symlink_attributes: sattr3::default(),
            symlink_data: nfspath3(Opaque::borrowed(target.as_bytes())),
        };
        let r: SYMLINK3res = self.call(proc3::SYMLINK, &SYMLINK3args { where_: dirop(dir, name), symlink });
        ok_or_stat(r).map(drop)
    }

    /// MKNOD of a fifo with mode 0644.
    pub fn mknod_fifo(&mut self, dir: &[u8], name: &str) -> NfsResult<()> {
        let what = mknoddata3::NF3FIFO(sattr3 { mode: Nfs3Option::Some(0o644), ..Default::default() });
        let r: MKNOD3res = self.call(proc3::MKNOD, &MKNOD3args { where_: dirop(dir, name), what });
        ok_or_stat(r).map(drop)
    }

    pub fn link(&mut self, file: &[u8], dir: &[u8], name: &str) -> NfsResult<()> {
        let r: LINK3res = self.call(proc3::LINK, &LINK3args { file: fh_of(file), link: dirop(dir, name) });
        ok_or_stat(r).map(drop)
    }

    pub fn remove(&mut self, dir: &[u8], name: &str) -> NfsResult<()> {
        let r: REMOVE3res = self.call(proc3::REMOVE, &REMOVE3args { object: dirop(dir, name) });
        ok_or_stat(r).map(drop)
    }

    pub fn rmdir(&mut self, dir: &[u8], name: &str) -> NfsResult<()> {
        let r: RMDIR3res = self.call(proc3::RMDIR, &RMDIR3args { object: dirop(dir, name) });
        ok_or_stat(r).map(drop)
    }

    pub fn rename(&mut self, from_dir: &[u8], from: &str, to_dir: &[u8], to: &str) -> NfsResult<()> {
        let r: RENAME3res =
            self.call(proc3::RENAME, &RENAME3args { from: dirop(from_dir, from), to: dirop(to_dir, to) });
        ok_or_stat(r).map(drop)
    }

    pub fn setattr(&mut self, fh: &[u8], attrs: sattr3) -> NfsResult<()> {
        let args = SETATTR3args { object: fh_of(fh), new_attributes: attrs, guard: Nfs3Option::None };
        let r: SETATTR3res = self.call(proc3::SETATTR, &args);
        ok_or_stat(r).map(drop)
    }

    pub fn write(&mut self, fh: &[u8], offset: u64, data: &[u8], stable: stable_how) -> NfsResult<Written> {
        self.send_write(fh, offset, data, stable).unwrap_or_else(|e| panic!("WRITE: {e}"));
        self.recv_write().unwrap_or_else(|e| panic!("WRITE reply: {e}")).1
    }

    /// Writes `data` from offset 0 in chunks of at most 1 MiB.
    pub fn write_all(&mut self, fh: &[u8], data: &[u8], stable: stable_how) -> NfsResult<Vec<Written>> {
        let mut out = Vec::new();
        for (i, chunk) in data.chunks(1 << 20).enumerate() {
            let w = self.write(fh, (i << 20) as u64, chunk, stable)?;
            assert_eq!(w.count as usize, chunk.len(), "short WRITE");
            out.push(w);
        }
        Ok(out)
    }

    pub fn send_write(&mut self, fh: &[u8], offset: u64, data: &[u8], stable: stable_how) -> io::Result<u32> {
        let args = WRITE3args {
            file: fh_of(fh),
            offset,
            count: u32::try_from(data.len()).expect("count"),
            stable,
            data: Opaque::borrowed(data),
        };
        self.conn.send(prog::NFS, prog::NFS_V3, proc3::WRITE, &args)
    }

    pub fn recv_write(&mut self) -> io::Result<(u32, NfsResult<Written>)> {
        let (xid, body) = self.conn.recv()?;
        let r: WRITE3res = decode(&body)?;
        Ok((xid, ok_or_stat(r).map(|ok| Written { count: ok.count, committed: ok.committed, verf: ok.verf.0 })))
    }

    pub fn send_commit(&mut self, fh: &[u8]) -> io::Result<u32> {
        self.conn.send(prog::NFS, prog::NFS_V3, proc3::COMMIT, &COMMIT3args { file: fh_of(fh), offset: 0, count: 0 })
    }

    pub fn send_getattr(&mut self, fh: &[u8]) -> io::Result<u32> {
        self.conn.send(prog::NFS, prog::NFS_V3, proc3::GETATTR, &GETATTR3args { object: fh_of(fh) })
    }

    pub fn commit(&mut self, fh: &[u8]) -> NfsResult<[u8; 8]> {
        let r: COMMIT3res = self.call(proc3::COMMIT, &COMMIT3args { file: fh_of(fh), offset: 0, count: 0 });
        ok_or_stat(r).map(|ok| ok.verf.0)
    }

    pub fn read(&mut self, fh: &[u8], offset: u64, count: u32) -> NfsResult<(Vec<u8>, bool)> {
        let r: READ3res = self.call(proc3::READ, &READ3args { file: fh_of(fh), offset, count });
        ok_or_stat(r).map(|ok| (ok.data.to_vec(), ok.eof))
    }

    pub fn send_read(&mut self, fh: &[u8], offset: u64, count: u32) -> io::Result<u32> {
        self.conn.send(prog::NFS, prog::NFS_V3, proc3::READ, &READ3args { file: fh_of(fh), offset, count })
    }

    /// The whole file, in 1 MiB READs.
    pub fn read_all(&mut self, fh: &[u8]) -> NfsResult<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let (data, eof) = self.read(fh, out.len() as u64, 1 << 20)?;
            out.extend_from_slice(&data);
            if eof || data.is_empty() {
                return Ok(out);
            }
        }
    }

    pub fn readlink(&mut self, fh: &[u8]) -> NfsResult<Vec<u8>> {
        let r: READLINK3res = self.call(proc3::READLINK, &READLINK3args { symlink: fh_of(fh) });
        ok_or_stat(r).map(|ok| ok.data.0.to_vec())
    }
}

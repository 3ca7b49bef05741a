//! Hand-built RPC records, for calls a client library cannot make (a chosen
//! xid, any credential, a MKNOD of a regular file), the decoding of reply
//! records, and a raw async connection that sends records as given.

use std::io::{self, Cursor};
use std::net::SocketAddr;
use std::time::Duration;

use nfs3_types::nfs3::*;
use nfs3_types::rpc::{RPC_VERSION_2, accept_stat_data, call_body, msg_body, opaque_auth, reply_body, rpc_msg};
use nfs3_types::xdr_codec::{Pack, Unpack};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::client::bounded;
use super::ports::privileged_stream;

/// The program numbers and versions calls are made to.
pub mod prog {
    pub const NFS: u32 = 100_003;
    pub const NFS_V3: u32 = 3;
    pub const MOUNT: u32 = 100_005;
    pub const MOUNT_V3: u32 = 3;
}

/// Largest reply record accepted (a 1 MiB READ plus headers, with room).
pub const REPLY_BYTES_MAX: usize = 4 << 20;

/// One call record (record mark included) of any program and procedure.
pub fn rpc_record<A: Pack>(
    xid: u32,
    program: u32,
    version: u32,
    proc_: u32,
    credential: &opaque_auth<'static>,
    args: &A,
) -> Vec<u8> {
    let verf = opaque_auth::default();
    let msg = rpc_msg {
        xid,
        body: msg_body::CALL(call_body {
            rpcvers: RPC_VERSION_2,
            prog: program,
            vers: version,
            proc: proc_,
            cred: credential.borrow(),
            verf: verf.borrow(),
        }),
    };
    let mut body = Vec::with_capacity(128 + args.packed_size());
    msg.pack(&mut body).expect("pack call header");
    args.pack(&mut body).expect("pack arguments");
    assert_eq!(body.len() % 4, 0);
    let mut record = (u32::try_from(body.len()).expect("record fits") | 0x8000_0000).to_be_bytes().to_vec();
    record.extend_from_slice(&body);
    record
}

/// One NFSv3 call record (record mark included) with the given xid.
pub fn call_record<A: Pack>(xid: u32, proc_: NFS_PROGRAM, credential: &opaque_auth<'static>, args: &A) -> Vec<u8> {
    rpc_record(xid, PROGRAM, VERSION, proc_ as u32, credential, args)
}

/// A reply record (without its marks): its xid and the procedure's results,
/// or an error unless the call was accepted and executed.
pub fn parse_reply(reply: &[u8]) -> io::Result<(u32, &[u8])> {
    let mut cur = Cursor::new(reply);
    let (msg, _) = rpc_msg::unpack(&mut cur).map_err(io::Error::other)?;
    match msg.body {
        msg_body::REPLY(reply_body::MSG_ACCEPTED(a)) if matches!(a.reply_data, accept_stat_data::SUCCESS) => {}
        other => return Err(io::Error::other(format!("xid {:#x}: not executed: {other:?}", msg.xid))),
    }
    let at = cur.position() as usize;
    Ok((msg.xid, &reply[at..]))
}

/// Decodes a reply record (without its mark): checks the xid and that the
/// call was accepted and executed, then decodes the results, which must
/// take up the rest of the record.
pub fn decode_reply<R: Unpack>(xid: u32, reply: &[u8]) -> R {
    let (got, results) = parse_reply(reply).unwrap_or_else(|e| panic!("reply: {e}"));
    assert_eq!(got, xid, "reply xid");
    let mut cur = Cursor::new(results);
    let (r, _) = R::unpack(&mut cur).expect("results");
    assert_eq!(cur.position() as usize, results.len(), "trailing bytes after the results");
    r
}

/// Decodes results (trailing bytes allowed).
pub fn decode<R: Unpack>(body: &[u8]) -> io::Result<R> {
    let (r, _) = R::unpack(&mut Cursor::new(body)).map_err(io::Error::other)?;
    Ok(r)
}

/// A raw TCP connection that sends records as given and reads replies
/// whole (all fragments).
pub struct RawConn {
    pub stream: TcpStream,
}

impl RawConn {
    /// From a reserved source port, as a kernel client connects.
    pub async fn connect(addr: SocketAddr) -> Self {
        RawConn { stream: privileged_stream(addr).await }
    }

    /// From an ordinary (unprivileged) source port, as a user-space client
    /// run by an ordinary user connects.
    pub async fn connect_ordinary(addr: SocketAddr) -> Self {
        let stream = bounded("connect", TcpStream::connect(addr)).await.expect("connect");
        assert!(stream.local_addr().unwrap().port() >= 1024, "an ordinary source port");
        RawConn { stream }
    }

    /// From local port `port` (0: any free reserved one), with SO_REUSEADDR
    /// and, when `abortive`, SO_LINGER 0 so that closing resets the
    /// connection and leaves no TIME_WAIT behind (the port can be used
    /// again at once, as a client reconnecting from the same port does).
    pub async fn connect_from(addr: SocketAddr, port: u16, abortive: bool) -> Self {
        let stream = if port == 0 {
            privileged_stream(addr).await
        } else {
            let socket = TcpSocket::new_v4().expect("socket");
            socket.set_reuseaddr(true).expect("SO_REUSEADDR");
            socket.bind(SocketAddr::from(([127, 0, 0, 1], port))).expect("bind");
            bounded("connect", socket.connect(addr)).await.expect("connect")
        };
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
            assert!(start + (mark & 0x7fff_ffff) as usize <= REPLY_BYTES_MAX, "reply record over {REPLY_BYTES_MAX}");
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

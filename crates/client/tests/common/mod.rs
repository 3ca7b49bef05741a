//! A scriptable fake RPC server for the client's tests: each test drives
//! its side of the conversation record by record.
#![allow(dead_code)]

pub mod memfs;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use keel_client::ConnectOptions;
use keel_rpc::msg::{AcceptStat, CallHeader, ReplyStat, encode_reply_header};
use keel_rpc::record::{LAST_FRAGMENT, RecordAssembler};
use keel_xdr::{Decode, Decoder, Encoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const SUCCESS: ReplyStat = ReplyStat::Accepted(AcceptStat::Success);
/// A program number from the "transient" range, for calls no real program
/// would answer.
pub const TEST_PROG: u32 = 0x4000_1234;

pub async fn listen() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// Options with timeouts short enough for tests.
pub fn opts() -> ConnectOptions {
    ConnectOptions {
        call_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
        ..ConnectOptions::default()
    }
}

pub struct Call {
    pub header: CallHeader,
    pub args: Decoder,
    pub record: Bytes,
}

impl Call {
    pub fn decode_args<T: Decode>(&mut self) -> T {
        let v = T::decode(&mut self.args).unwrap();
        self.args.finish().unwrap();
        v
    }
}

/// The server's side of one connection.
pub struct ServerConn {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    buf: BytesMut,
    records: RecordAssembler,
}

impl ServerConn {
    pub fn new(stream: TcpStream) -> Self {
        stream.set_nodelay(true).unwrap();
        let peer = stream.peer_addr().unwrap();
        ServerConn { stream, peer, buf: BytesMut::new(), records: RecordAssembler::new(64 << 20) }
    }

    pub async fn accept(listener: &TcpListener) -> Self {
        let (stream, _) = listener.accept().await.unwrap();
        ServerConn::new(stream)
    }

    /// The next record; `None` once the client has closed the connection.
    pub async fn read_record(&mut self) -> Option<Bytes> {
        loop {
            if let Some(r) = self.records.next_record(&mut self.buf).unwrap() {
                return Some(r);
            }
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    pub async fn read_call(&mut self) -> Option<Call> {
        let record = self.read_record().await?;
        let mut args = Decoder::new(record.clone());
        let header = CallHeader::decode(&mut args).unwrap();
        Some(Call { header, args, record })
    }

    pub async fn reply(&mut self, xid: u32, stat: ReplyStat, results: impl FnOnce(&mut Encoder)) {
        let bytes = frame(&reply_body(xid, stat, results), 1);
        self.write(&bytes).await;
    }

    pub async fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }
}

/// A reply record's body (no record mark).
pub fn reply_body(xid: u32, stat: ReplyStat, results: impl FnOnce(&mut Encoder)) -> Vec<u8> {
    let mut enc = Encoder::new();
    encode_reply_header(&mut enc, xid, stat);
    if stat == SUCCESS {
        results(&mut enc);
    }
    enc.into_bytes().to_vec()
}

/// `body` with record marking, cut into `fragments` fragments.
pub fn frame(body: &[u8], fragments: usize) -> Vec<u8> {
    let size = body.len().div_ceil(fragments.max(1)).max(1);
    let chunks: Vec<&[u8]> = if body.is_empty() { vec![&[][..]] } else { body.chunks(size).collect() };
    let mut out = Vec::with_capacity(body.len() + 4 * chunks.len());
    for (i, chunk) in chunks.iter().enumerate() {
        let last = if i + 1 == chunks.len() { LAST_FRAGMENT } else { 0 };
        out.extend_from_slice(&(chunk.len() as u32 | last).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// Runs `f` with a deadline, so that a hang fails the test instead of
/// stalling it.
pub async fn within<T>(secs: u64, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f).await.expect("test step hung")
}

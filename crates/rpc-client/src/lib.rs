//! Calls from the server out to its clients: NLM's GRANTED callback and
//! NSM's SM_NOTIFY, which must come from the address the client talked
//! to; and `keel probe`'s NULL calls over TCP. Blocking and deliberately small: one call at a time per caller,
//! over UDP (as lockd and statd answer), from a reserved port of a chosen
//! local address, with a timeout per try and a bounded number of tries.
//! The caller runs it on a thread of its own (the lock manager's callback
//! thread), never on a worker.
//!
//! `keel-client` (tokio, many calls in flight) is the tests' and the
//! bench's client; this one has no runtime and no state between calls.

#![forbid(unsafe_code)]

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_rpc::msg::{AcceptStat, CallHeader, OpaqueAuth, ReplyStat, decode_reply_header};
use keel_xdr::{Decoder, Encode, Encoder};

/// Portmapper program, version and GETPORT procedure (RFC 1833).
const PMAP_PROGRAM: u32 = 100000;
const PMAP_V2: u32 = 2;
const PMAP_GETPORT: u32 = 3;
const PMAP_PORT: u16 = 111;
pub const IPPROTO_UDP: u32 = 17;
pub const IPPROTO_TCP: u32 = 6;
/// Largest reply accepted.
const REPLY_BYTES_MAX: usize = 8192;
/// Reserved ports tried, from the top down (below 600 many are taken by
/// well-known services).
const RESERVED_PORTS: std::ops::Range<u16> = 600..1024;

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("no reply after {0} tries")]
    Timeout(u32),
    #[error("the peer answered {0:?}")]
    Refused(ReplyStat),
    #[error("the reply does not decode")]
    Garbage,
    #[error("program {0} version {1} is not registered with the peer's portmapper")]
    NotRegistered(u32, u32),
}

/// How hard one call tries.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Wait for a reply this long per try.
    pub timeout: Duration,
    /// Tries in all (at least one).
    pub tries: u32,
}

/// A program, version and procedure to call.
#[derive(Debug, Clone, Copy)]
pub struct Proc {
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
}

static XID: AtomicU32 = AtomicU32::new(0);

fn next_xid() -> u32 {
    if XID.load(Ordering::Relaxed) == 0 {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos() ^ (d.as_secs() as u32).rotate_left(16))
            | 1;
        let _ = XID.compare_exchange(0, seed, Ordering::Relaxed, Ordering::Relaxed);
    }
    XID.fetch_add(1, Ordering::Relaxed)
}

/// A UDP socket on `local` (port 0: any address of the right family),
/// from a reserved port when the process may bind one.
pub fn bind_from(local: IpAddr) -> io::Result<UdpSocket> {
    let start = (std::process::id() as u16) % (RESERVED_PORTS.end - RESERVED_PORTS.start);
    let span = RESERVED_PORTS.end - RESERVED_PORTS.start;
    for i in 0..span {
        let port = RESERVED_PORTS.start + (start + i) % span;
        match UdpSocket::bind(SocketAddr::new(local, port)) {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => break,
            // Not this host's address (yet): no port will do.
            Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => return Err(e),
            Err(_) => continue,
        }
    }
    UdpSocket::bind(SocketAddr::new(local, 0))
}

/// A call record: header (AUTH_NONE) and arguments.
fn call_record(xid: u32, p: Proc, args: &dyn Encode) -> Bytes {
    let mut enc = Encoder::new();
    CallHeader {
        xid,
        rpc_version: 2,
        prog: p.prog,
        vers: p.vers,
        proc_: p.proc_,
        cred: OpaqueAuth::default(),
        verf: OpaqueAuth::default(),
    }
    .encode(&mut enc);
    args.encode(&mut enc);
    enc.into_bytes()
}

/// The results of `reply` if it answers `xid` with success; `None` if it
/// answers another call or does not decode as a reply.
fn reply_results(reply: Bytes, xid: u32) -> Option<Result<Bytes, CallError>> {
    let mut dec = Decoder::new(reply);
    let (reply_xid, stat) = decode_reply_header(&mut dec).ok()?;
    if reply_xid != xid {
        return None;
    }
    if stat != ReplyStat::Accepted(AcceptStat::Success) {
        return Some(Err(CallError::Refused(stat)));
    }
    Some(Ok(dec.rest()))
}

/// Calls `p` at `dest` with `args` (AUTH_NONE) over `sock`, and returns
/// the results of an accepted, successful reply.
pub fn call(sock: &UdpSocket, dest: SocketAddr, p: Proc, args: &dyn Encode, retry: Retry) -> Result<Bytes, CallError> {
    let xid = next_xid();
    let record = call_record(xid, p, args);
    let mut buf = vec![0u8; REPLY_BYTES_MAX];
    let tries = retry.tries.max(1);
    for _ in 0..tries {
        sock.send_to(&record, dest)?;
        let deadline = Instant::now() + retry.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            sock.set_read_timeout(Some(left))?;
            let (n, from) = match sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => break,
                // An ICMP port unreachable from an earlier send: retry.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => break,
                Err(e) => return Err(e.into()),
            };
            if from.ip() != dest.ip() {
                continue;
            }
            if let Some(result) = reply_results(Bytes::copy_from_slice(&buf[..n]), xid) {
                return result;
            }
        }
    }
    Err(CallError::Timeout(tries))
}

/// Calls `p` at `dest` over a new TCP connection (record marking, RFC 5531
/// section 11), as NFS clients do: what a health probe must go through.
/// `timeout` bounds the connect and each read and write.
pub fn call_tcp(dest: SocketAddr, p: Proc, args: &dyn Encode, timeout: Duration) -> Result<Bytes, CallError> {
    let xid = next_xid();
    let record = call_record(xid, p, args);
    let mut stream = TcpStream::connect_timeout(&dest, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let last_fragment = 0x8000_0000 | u32::try_from(record.len()).map_err(|_| CallError::Garbage)?;
    stream.write_all(&last_fragment.to_be_bytes())?;
    stream.write_all(&record)?;
    let mut reply = Vec::new();
    loop {
        let mut marker = [0u8; 4];
        stream.read_exact(&mut marker)?;
        let marker = u32::from_be_bytes(marker);
        let len = (marker & 0x7fff_ffff) as usize;
        if reply.len() + len > REPLY_BYTES_MAX {
            return Err(CallError::Garbage);
        }
        let start = reply.len();
        reply.resize(start + len, 0);
        stream.read_exact(&mut reply[start..])?;
        if marker & 0x8000_0000 != 0 {
            break;
        }
    }
    reply_results(Bytes::from(reply), xid).unwrap_or(Err(CallError::Garbage))
}

/// The port of `prog`/`vers` over `prot` at `host`, from its portmapper.
pub fn getport(
    sock: &UdpSocket,
    host: IpAddr,
    prog: u32,
    vers: u32,
    prot: u32,
    retry: Retry,
) -> Result<u16, CallError> {
    struct Mapping(u32, u32, u32);
    impl Encode for Mapping {
        fn encode(&self, enc: &mut Encoder) {
            enc.u32(self.0);
            enc.u32(self.1);
            enc.u32(self.2);
            enc.u32(0);
        }
    }
    let p = Proc { prog: PMAP_PROGRAM, vers: PMAP_V2, proc_: PMAP_GETPORT };
    let results = call(sock, SocketAddr::new(host, PMAP_PORT), p, &Mapping(prog, vers, prot), retry)?;
    let port = Decoder::new(results).u32().map_err(|_| CallError::Garbage)?;
    match u16::try_from(port) {
        Ok(0) => Err(CallError::NotRegistered(prog, vers)),
        Ok(port) => Ok(port),
        Err(_) => Err(CallError::Garbage),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_rpc::msg::encode_reply_header;

    #[test]
    fn a_call_is_retried_and_matched_by_xid() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dest = server.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            // Drop the first try, answer the second (after a stray reply).
            let _ = server.recv_from(&mut buf).unwrap();
            let (n, from) = server.recv_from(&mut buf).unwrap();
            let mut dec = Decoder::new(Bytes::copy_from_slice(&buf[..n]));
            let h = CallHeader::decode(&mut dec).unwrap();
            assert_eq!((h.prog, h.vers, h.proc_), (100021, 4, 5));
            let value = dec.u32().unwrap();
            for xid in [h.xid.wrapping_add(1), h.xid] {
                let mut enc = Encoder::new();
                encode_reply_header(&mut enc, xid, ReplyStat::Accepted(AcceptStat::Success));
                enc.u32(value + 1);
                server.send_to(&enc.into_bytes(), from).unwrap();
            }
        });
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let retry = Retry { timeout: Duration::from_millis(300), tries: 3 };
        let out = call(&sock, dest, Proc { prog: 100021, vers: 4, proc_: 5 }, &41u32, retry).unwrap();
        assert_eq!(Decoder::new(out).u32().unwrap(), 42);
        t.join().unwrap();
    }

    #[test]
    fn a_tcp_call_reads_a_reply_in_two_fragments() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dest = listener.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut marker = [0u8; 4];
            conn.read_exact(&mut marker).unwrap();
            let mut call = vec![0u8; (u32::from_be_bytes(marker) & 0x7fff_ffff) as usize];
            conn.read_exact(&mut call).unwrap();
            let h = CallHeader::decode(&mut Decoder::new(Bytes::from(call))).unwrap();
            assert_eq!((h.prog, h.vers, h.proc_), (100003, 3, 0));
            let mut enc = Encoder::new();
            encode_reply_header(&mut enc, h.xid, ReplyStat::Accepted(AcceptStat::Success));
            enc.u32(7);
            let reply = enc.into_bytes();
            let (a, b) = reply.split_at(8);
            conn.write_all(&(a.len() as u32).to_be_bytes()).unwrap();
            conn.write_all(a).unwrap();
            conn.write_all(&(0x8000_0000 | b.len() as u32).to_be_bytes()).unwrap();
            conn.write_all(b).unwrap();
        });
        let out = call_tcp(dest, Proc { prog: 100003, vers: 3, proc_: 0 }, &(), Duration::from_secs(5)).unwrap();
        assert_eq!(Decoder::new(out).u32().unwrap(), 7);
        t.join().unwrap();
    }

    #[test]
    fn a_tcp_call_to_nobody_is_an_error_not_a_hang() {
        let dest = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let p = Proc { prog: 100003, vers: 3, proc_: 0 };
        assert!(matches!(call_tcp(dest, p, &(), Duration::from_secs(1)), Err(CallError::Io(_))));
    }

    #[test]
    fn silence_is_a_timeout() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let retry = Retry { timeout: Duration::from_millis(50), tries: 2 };
        let p = Proc { prog: 1, vers: 1, proc_: 0 };
        assert!(matches!(call(&sock, server.local_addr().unwrap(), p, &(), retry), Err(CallError::Timeout(2))));
    }
}

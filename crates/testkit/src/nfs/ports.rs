//! Connections from reserved source ports (below 1024), as the Linux kernel
//! client and libnfs make them when they run as root: what a `secure`
//! export (the default) requires. Needs root, as the tests do.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use socket2::{Domain, Socket, Type};

use super::client::bounded;

/// Source ports tried, from 600 up to 1023 (below are the well-known
/// services, 111 among them).
const RESERVED_LOW: u16 = 600;
const RESERVED_COUNT: u16 = 1024 - RESERVED_LOW;
/// How long a TCP connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The reserved ports in the order to try them: from a point that moves
/// on with every call (and differs between test processes), so concurrent
/// tests do not all fight for the same port.
fn reserved_ports() -> impl Iterator<Item = u16> {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = (std::process::id() as u16).wrapping_mul(37).wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
    (0..RESERVED_COUNT).map(move |i| RESERVED_LOW + base.wrapping_add(i) % RESERVED_COUNT)
}

/// A port is taken (bound, or the same connection still in TIME_WAIT).
fn port_taken(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::AddrInUse | io::ErrorKind::AddrNotAvailable)
}

/// A blocking TCP connection to `addr` from a reserved source port.
pub fn reserved_stream(addr: SocketAddr) -> TcpStream {
    reserved_stream_with(addr, |_| Ok(()))
}

/// Like [`reserved_stream`], with `configure` applied to the socket before
/// it connects (say, a small receive buffer).
pub fn reserved_stream_with(addr: SocketAddr, configure: impl Fn(&Socket) -> io::Result<()>) -> TcpStream {
    let wildcard: SocketAddr = if addr.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
    for port in reserved_ports() {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None).expect("socket");
        socket.set_reuse_address(true).expect("SO_REUSEADDR");
        configure(&socket).expect("socket options");
        match socket.bind(&SocketAddr::new(wildcard.ip(), port).into()) {
            Err(e) if port_taken(&e) => continue,
            Err(e) => panic!("bind port {port}: {e} (the tests run as root)"),
            Ok(()) => {}
        }
        match socket.connect_timeout(&addr.into(), CONNECT_TIMEOUT) {
            Ok(()) => return socket.into(),
            Err(e) if port_taken(&e) => continue,
            Err(e) => panic!("connect to {addr} from port {port}: {e}"),
        }
    }
    panic!("no free reserved source port");
}

/// An async TCP connection to `addr` from a reserved source port.
pub async fn privileged_stream(addr: SocketAddr) -> tokio::net::TcpStream {
    for port in reserved_ports() {
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }
            .expect("socket");
        socket.set_reuseaddr(true).expect("SO_REUSEADDR");
        let wildcard: SocketAddr = if addr.is_ipv4() { ([0, 0, 0, 0], port).into() } else { ([0u16; 8], port).into() };
        match socket.bind(wildcard) {
            Err(e) if port_taken(&e) => continue,
            Err(e) => panic!("bind port {port}: {e} (the tests run as root)"),
            Ok(()) => {}
        }
        match bounded("connect", socket.connect(addr)).await {
            Ok(s) => return s,
            Err(e) if port_taken(&e) => continue,
            Err(e) => panic!("connect to {addr} from port {port}: {e}"),
        }
    }
    panic!("no free reserved source port");
}

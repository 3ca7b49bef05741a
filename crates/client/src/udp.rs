//! One RPC call over UDP: one datagram each way, retransmitted on silence.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use keel_rpc::msg::Auth;
use keel_xdr::Encode;
use tokio::net::UdpSocket;
use tokio::time::Instant;

use crate::conn::{credential, encode_call, next_xid, reply_results};
use crate::error::ClientError;

/// Sends per call: the first and two retransmissions, evenly spread over
/// the timeout (UDP loses datagrams; TCP does not need this).
const UDP_SENDS: u32 = 3;
/// Largest UDP payload over IPv4.
const DATAGRAM_MAX: usize = 65_507;

/// Calls `proc_` of `prog`/`vers` over UDP and returns the results after
/// the reply header. Datagrams from other peers or with another xid are
/// ignored. The whole call, retransmissions included, takes at most
/// `timeout`.
pub async fn udp_call(
    addr: SocketAddr,
    auth: &Auth,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &(dyn Encode + Sync),
    timeout: Duration,
) -> Result<Bytes, ClientError> {
    let wildcard = match addr {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    };
    let socket = UdpSocket::bind(wildcard).await?;
    // Connected: the kernel drops datagrams from anyone else.
    socket.connect(addr).await?;
    let xid = next_xid();
    let mut datagram = BytesMut::new();
    for segment in encode_call(xid, &credential(auth), prog, vers, proc_, |enc| args.encode(enc)) {
        datagram.extend_from_slice(&segment);
    }
    if datagram.len() > DATAGRAM_MAX {
        return Err(ClientError::Limit(format!("call of {} bytes does not fit in a datagram", datagram.len())));
    }
    let deadline = after(timeout);
    let mut buf = vec![0u8; DATAGRAM_MAX + 1];
    for send in 1..=UDP_SENDS {
        socket.send(&datagram).await?;
        let until = deadline.min(after(timeout / UDP_SENDS));
        loop {
            match tokio::time::timeout_at(until, socket.recv(&mut buf)).await {
                Err(_) => break,
                Ok(Err(e)) => return Err(e.into()),
                Ok(Ok(n)) if n >= 4 && buf[..4] == xid.to_be_bytes() => {
                    return reply_results(Bytes::copy_from_slice(&buf[..n]), xid);
                }
                Ok(Ok(n)) => tracing::debug!(bytes = n, "datagram for another call; ignored"),
            }
        }
        tracing::debug!(%addr, xid, send, "no UDP reply yet");
    }
    Err(ClientError::Timeout(timeout))
}

/// Now plus `d`, saturating at a year (an "infinite" timeout must not
/// overflow `Instant`).
fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d).unwrap_or(now + Duration::from_secs(365 * 86_400))
}

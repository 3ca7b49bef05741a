//! Tickle ACKs (CTDB's name): after a failover the clients' TCP connections
//! still look open to them, and a client with nothing to send would wait
//! for its own retransmission timer, seconds to minutes, before it noticed.
//! The node that takes over sends each client an ACK on the old connection
//! with sequence numbers it cannot know; the client's kernel answers with
//! an ACK of its real ones, this node's kernel has no such connection and
//! answers with a reset, and the client reconnects at once.
//!
//! Under `[ha]`, the server keeps the list of its clients' connections on
//! the shared storage (`state_dir/connections`, rewritten within a second
//! of a change), and the next start reads it and tickles each. The list
//! is a record rewritten in place (`keel_store::state_file::RecordFile`),
//! so that recording it needs no new block on a full file system; it
//! holds the first [`CONNECTIONS_RECORDED_MAX`] connections.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use keel_store::state_file::{RecordFile, Stored};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

pub const FILE_NAME: &str = "connections";
/// Tries per connection: the client's kernel rate-limits its answers to
/// segments outside the window, and a datagram may be lost.
const TICKLES_PER_CONNECTION: usize = 3;
/// Connections recorded at most; the clients of any others notice the
/// failover by their own retransmission timers.
pub const CONNECTIONS_RECORDED_MAX: usize = 4096;
/// One line at most: two bracketed IPv6 addresses with scope and port.
const LINE_BYTES_MAX: usize = 128;
/// Each of the record file's two slots (the file is 1 MiB, made once).
const SLOT_BYTES: usize = CONNECTIONS_RECORDED_MAX * LINE_BYTES_MAX;

/// One connection as the file keeps it: the client's address and the
/// server address it connected to.
pub type Connection = (SocketAddr, SocketAddr);

/// Keeps the connection list (`state_dir/connections`).
pub struct Recorder {
    file: RecordFile,
}

impl Recorder {
    /// Opens the list in `dir`, making its file (at its full size) the
    /// first time.
    pub fn open(dir: &Path) -> std::io::Result<Recorder> {
        let (file, _) = RecordFile::open(&dir.join(FILE_NAME), SLOT_BYTES)?;
        Ok(Recorder { file })
    }

    /// Records `connections` (the first that fit) in place of the last list.
    pub fn save(&mut self, connections: &[Connection]) -> std::io::Result<()> {
        let mut text = String::new();
        for (client, server) in connections.iter().take(CONNECTIONS_RECORDED_MAX) {
            let line = format!("{client} {server}\n");
            if text.len() + line.len() > self.file.payload_bytes_max() {
                break;
            }
            text.push_str(&line);
        }
        self.file.write(text.as_bytes())
    }
}

/// The connections the last server recorded; lines that do not parse are
/// skipped (the file is advice, not state). Reads an older version's plain
/// text file too.
pub fn load(dir: &Path) -> Vec<Connection> {
    let text = match RecordFile::read(&dir.join(FILE_NAME), SLOT_BYTES) {
        Ok(Stored::Record(bytes) | Stored::Unrecognised(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(Stored::Nothing) | Err(_) => String::new(),
    };
    text.lines()
        .filter_map(|l| {
            let (c, s) = l.split_once(' ')?;
            Some((c.parse().ok()?, s.parse().ok()?))
        })
        .collect()
}

/// The TCP checksum: ones' complement sum over the pseudo-header and the
/// segment (RFC 793, RFC 8200 section 8.1).
fn checksum(src: IpAddr, dst: IpAddr, segment: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        for pair in bytes.chunks(2) {
            let word = if pair.len() == 2 { u16::from_be_bytes([pair[0], pair[1]]) } else { u16::from(pair[0]) << 8 };
            sum += u32::from(word);
        }
    };
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            add(&s.octets());
            add(&d.octets());
            add(&[0, 6]);
            add(&(segment.len() as u16).to_be_bytes());
        }
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            add(&v6(s).octets());
            add(&v6(d).octets());
            add(&(segment.len() as u32).to_be_bytes());
            add(&[0, 0, 0, 6]);
        }
    }
    add(segment);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A bare ACK from `server` to `client` with sequence and acknowledgement
/// numbers 0.
fn ack_segment(server: SocketAddr, client: SocketAddr) -> [u8; 20] {
    let mut s = [0u8; 20];
    s[0..2].copy_from_slice(&server.port().to_be_bytes());
    s[2..4].copy_from_slice(&client.port().to_be_bytes());
    s[12] = 5 << 4; // header length: five words
    s[13] = 0x10; // ACK
    s[14..16].copy_from_slice(&1024u16.to_be_bytes());
    let sum = checksum(server.ip(), client.ip(), &s);
    s[16..18].copy_from_slice(&sum.to_be_bytes());
    s
}

/// A gratuitous ARP request for `ip` from `mac` (RFC 5227's
/// announcement): every host on the link that knows `ip` takes `mac` for
/// it from now on.
fn announcement(mac: [u8; 6], ip: std::net::Ipv4Addr) -> [u8; 28] {
    let mut a = [0u8; 28];
    a[0..2].copy_from_slice(&1u16.to_be_bytes()); // Ethernet
    a[2..4].copy_from_slice(&0x0800u16.to_be_bytes()); // IPv4
    a[4] = 6;
    a[5] = 4;
    a[6..8].copy_from_slice(&1u16.to_be_bytes()); // request
    a[8..14].copy_from_slice(&mac);
    a[14..18].copy_from_slice(&ip.octets());
    // The target hardware address stays zero; the target is the sender.
    a[24..28].copy_from_slice(&ip.octets());
    a
}

/// Announces that this node holds `ip` (a gratuitous ARP), right before
/// its tickles: a client answers a tickle to the hardware address it has
/// for the address, and one that still has the old node's loses that
/// answer, and then answers no other tickle for half a second (Linux
/// rate-limits its answers to segments outside the window,
/// `tcp_invalid_ratelimit`). IPaddr2's own announcements come from a
/// background process, often after the first tickles. Whether one was
/// sent (not for IPv6, whose neighbours IPaddr2 tells itself, nor for an
/// address no Ethernet-like link here holds).
pub fn announce(ip: IpAddr) -> std::io::Result<bool> {
    let IpAddr::V4(v4) = ip else { return Ok(false) };
    match crate::sys::link_holding(v4)? {
        Some((ifindex, mac)) => crate::sys::broadcast_arp(ifindex, &announcement(mac, v4)).map(|()| true),
        None => Ok(false),
    }
}

/// Whether this node holds `ip` now (a socket binds to it).
pub fn holds(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Sends the tickles; how many connections were tickled. A connection whose
/// server address this node does not hold now is skipped (the kernel would
/// not send from it).
pub fn tickle(connections: &[Connection]) -> std::io::Result<usize> {
    let mut sent = 0;
    for &(client, server) in connections {
        if client.is_ipv4() != server.is_ipv4() || server.ip().is_unspecified() {
            continue;
        }
        let domain = if server.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
        let socket = Socket::new(domain, Type::RAW, Some(Protocol::TCP))?;
        if let Err(e) = socket.bind(&SockAddr::from(SocketAddr::new(server.ip(), 0))) {
            tracing::info!(server = %server, error = %e, "not tickling: this node does not hold the address");
            continue;
        }
        let segment = ack_segment(server, client);
        let to = SockAddr::from(SocketAddr::new(client.ip(), 0));
        for _ in 0..TICKLES_PER_CONNECTION {
            socket.send_to(&segment, &to)?;
        }
        sent += 1;
    }
    Ok(sent)
}

/// How long the tickles wait for this node to hold a floating address.
pub const ADDRESS_WAIT: Duration = Duration::from_secs(60);

/// When the tickle rounds go out, in milliseconds from the moment this
/// node holds the floating address, each after an announcement of the
/// address ([`announce`]). Closer rounds would go unanswered: a client
/// answers one segment outside the window per connection and half second
/// (Linux's `tcp_invalid_ratelimit`); rounds at 0.1 and 0.2 s made no
/// difference in the lab.
const ROUNDS_AFTER_MS: [u64; 4] = [0, 500, 1000, 2000];

/// Announces the last server's addresses and tickles its clients at once
/// and again over the next two seconds (`ROUNDS_AFTER_MS`): a client whose
/// answer to one round is lost answers the next. A client already
/// reconnected from the same port only answers with a duplicate ACK.
/// Returns how many connections the first round tickled: none if this
/// node never came to hold their addresses within `address_wait` (their
/// clients then reconnect by their own retransmission timers).
pub async fn send_rounds(connections: Vec<Connection>, address_wait: Duration) -> usize {
    // Keel listens before the floating address is up (`keel ha init`
    // starts the address after the server): the rounds start with it.
    let servers: Vec<IpAddr> = connections.iter().map(|c| c.1.ip()).collect();
    let deadline = Instant::now() + address_wait;
    while !servers.iter().any(|ip| holds(*ip)) {
        if Instant::now() >= deadline {
            tracing::warn!(
                waited_s = address_wait.as_secs(),
                "this node does not hold the last server's addresses: no tickles; its clients reconnect \
                 when they retransmit"
            );
            return 0;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut first = 0;
    let mut waited = 0;
    for at in ROUNDS_AFTER_MS {
        tokio::time::sleep(Duration::from_millis(at - waited)).await;
        waited = at;
        let these = connections.clone();
        let mut held: Vec<IpAddr> = servers.iter().copied().filter(|ip| holds(*ip)).collect();
        held.sort();
        held.dedup();
        let announce_then_tickle = move || {
            for ip in held {
                if let Err(e) = announce(ip) {
                    tracing::warn!(address = %ip, error = %e, "cannot announce the address before the tickles");
                }
            }
            tickle(&these)
        };
        match tokio::task::spawn_blocking(announce_then_tickle).await {
            Ok(Ok(n)) if at == 0 => {
                first = n;
                if n > 0 {
                    tracing::info!(connections = n, "sent tickle ACKs: the last server's clients reconnect now")
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot send tickle ACKs; clients reconnect when they retransmit");
                break;
            }
            Err(_) => break,
        }
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rounds wait for the floating address at most `address_wait`:
    /// never holding it, they end having tickled nothing; holding it, they
    /// tickle (a raw socket: root only).
    #[test]
    fn the_rounds_wait_for_the_address_only_so_long_and_tickle_once_it_is_held() {
        use std::os::unix::fs::MetadataExt;
        let root = std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false);
        assert!(root, "this test sends raw TCP segments: run it as root");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let rounds = |server: &str| {
            let connection = ("127.0.0.1:9".parse().unwrap(), server.parse().unwrap());
            let wait = Duration::from_millis(300);
            runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(20), send_rounds(vec![connection], wait)).await
            })
        };
        // 192.0.2.0/24 is TEST-NET-1: no host holds it.
        assert_eq!(rounds("192.0.2.100:2049"), Ok(0), "an address never held: no tickles, and the rounds end");
        assert_eq!(rounds("127.0.0.1:2049"), Ok(1), "an address held: its connection is tickled");
    }

    #[test]
    fn an_announcement_is_a_gratuitous_arp_request_from_the_holder() {
        let mac = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
        let a = announcement(mac, "10.1.0.100".parse().unwrap());
        assert_eq!(a[..8], [0, 1, 8, 0, 6, 4, 0, 1], "Ethernet, IPv4, a request");
        assert_eq!((a[8..14].to_vec(), a[14..18].to_vec()), (mac.to_vec(), vec![10, 1, 0, 100]), "sender");
        assert_eq!((a[18..24].to_vec(), a[24..28].to_vec()), (vec![0; 6], vec![10, 1, 0, 100]), "target: itself");
    }

    #[test]
    fn a_segment_with_its_checksum_sums_to_zero() {
        let server: SocketAddr = "10.1.0.100:2049".parse().unwrap();
        let client: SocketAddr = "10.1.0.7:812".parse().unwrap();
        let s = ack_segment(server, client);
        assert_eq!(checksum(server.ip(), client.ip(), &s), 0);
        assert_eq!((u16::from_be_bytes([s[0], s[1]]), u16::from_be_bytes([s[2], s[3]]), s[13]), (2049, 812, 0x10));
        let server6: SocketAddr = "[2001:db8::100]:2049".parse().unwrap();
        let client6: SocketAddr = "[2001:db8::7]:812".parse().unwrap();
        assert_eq!(checksum(server6.ip(), client6.ip(), &ack_segment(server6, client6)), 0);
    }

    #[test]
    fn the_list_round_trips_in_place_and_garbage_is_skipped() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("keel-tickle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // An older version's plain list.
        std::fs::write(dir.join(FILE_NAME), "garbage\n10.1.0.7:812 10.1.0.100:2049\n").unwrap();
        let list: Vec<Connection> = vec![
            ("10.1.0.7:812".parse().unwrap(), "10.1.0.100:2049".parse().unwrap()),
            ("[2001:db8::7]:700".parse().unwrap(), "[2001:db8::100]:2049".parse().unwrap()),
        ];
        assert_eq!(load(&dir), list[..1]);
        let mut recorder = Recorder::open(&dir).unwrap();
        let inode = std::fs::metadata(dir.join(FILE_NAME)).unwrap().ino();
        recorder.save(&list).unwrap();
        assert_eq!(load(&dir), list);
        recorder.save(&list[1..]).unwrap();
        assert_eq!(load(&dir), list[1..]);
        // More than fit: the first that do.
        let many: Vec<Connection> = (0..CONNECTIONS_RECORDED_MAX as u32 + 10)
            .map(|i| (SocketAddr::from((std::net::Ipv6Addr::from(u128::from(i)), 1)), list[1].1))
            .collect();
        recorder.save(&many).unwrap();
        assert_eq!(load(&dir), many[..CONNECTIONS_RECORDED_MAX]);
        assert_eq!(std::fs::metadata(dir.join(FILE_NAME)).unwrap().ino(), inode, "written in place");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

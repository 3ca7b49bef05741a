//! What one client host can hold of the server, and what the server gives
//! back: memory for replies a client does not read, connection slots held
//! by idle or unwelcome connections, and the duplicate reply cache keeping
//! a retransmitted WRITE from being applied twice.
//!
//! Every wait is bounded; timings are printed, never asserted on.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use keel_testkit::nfs::{Nfs, RpcConn, fh_of, pattern, proc3, prog, reserved_stream_with, stable_how};
use keel_testkit::server::{ExportOpts, TestServer};
use nfs3_types::nfs3::READ3args;

const MIB: usize = 1 << 20;

/// (VmRSS, VmHWM) of a process, in bytes.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} in status"));
        let kib: u64 = line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number of kB");
        kib * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Raises this process's descriptor limit to `want` (or the hard limit).
fn raise_nofile(want: u64) -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on a live local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_max < want {
            // Root may raise the hard limit too.
            lim.rlim_max = want;
        }
        lim.rlim_cur = want.min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0, "cannot raise RLIMIT_NOFILE");
    }
    lim.rlim_cur
}

/// Whether the server closes `stream` within `within`: EOF or a reset.
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 64 << 10];
    while Instant::now() < deadline {
        stream.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {} // replies still draining
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

fn wait_for_log(server: &TestServer, needle: &str, count: usize, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let n = server.log_text().matches(needle).count();
        if n >= count || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read_call(conn: &mut RpcConn, fh: &[u8], offset: u64, count: u32) -> u32 {
    let args = READ3args { file: fh_of(fh), offset, count };
    conn.send(prog::NFS, prog::NFS_V3, proc3::READ, &args).expect("send READ")
}

/// Sixteen connections pipeline 128 READs of 1 MiB each and never read a
/// reply. The server must hold a bounded amount of memory for them (not
/// the 2 GiB it took before), keep serving another client meanwhile, and
/// close the connections that do not read once the stall timeout passes.
#[test]
fn replies_nobody_reads_hold_bounded_memory_and_others_are_still_served() {
    const HOSTILE_CONNECTIONS: usize = 16;
    const CALLS_PER_CONNECTION: usize = 128;
    const FILE_BYTES: usize = 4 * MIB;
    const GOOD_READS: usize = 64;
    const GROWTH_BYTES_MAX: u64 = 256 << 20;
    let server = TestServer::start(
        "limits-noread",
        vec![ExportOpts::rw(1, "export")],
        "stall_timeout_seconds = 10\nmax_requests_per_connection = 128",
    );
    std::fs::write(server.export_dir(1).join("data"), pattern(1, FILE_BYTES)).unwrap();
    let mut good = Nfs::connect(server.addr).unwrap();
    let root = good.mount(&server.export_path(1)).unwrap();
    let fh = good.lookup(&root, "data").unwrap();
    good.read(&fh, 0, MIB as u32).unwrap(); // warm: the first read's allocations are not the load's
    let (rss_before, _) = memory(server.pid());

    let mut hostile = Vec::new();
    for _ in 0..HOSTILE_CONNECTIONS {
        let mut conn = RpcConn::connect(server.addr).unwrap();
        for i in 0..CALLS_PER_CONNECTION {
            read_call(&mut conn, &fh, ((i * MIB) % FILE_BYTES) as u64, MIB as u32);
        }
        hostile.push(conn);
    }
    // Let the server take what it will of them.
    std::thread::sleep(Duration::from_secs(3));

    // Meanwhile another client reads, as fast as it is served.
    let start = Instant::now();
    for i in 0..GOOD_READS {
        let (data, _) = good.read(&fh, ((i * MIB) % FILE_BYTES) as u64, MIB as u32).expect("READ meanwhile");
        assert_eq!(data.len(), MIB);
    }
    let took = start.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    let (rss_during, hwm) = memory(server.pid());
    let grown = hwm.saturating_sub(rss_before);
    println!(
        "hostile load: RSS {} MiB before, {} MiB during, peak {} MiB (grew {} MiB); \
         the other client read {GOOD_READS} MiB in {took:?} ({:.0} MiB/s)",
        rss_before >> 20,
        rss_during >> 20,
        hwm >> 20,
        grown >> 20,
        GOOD_READS as f64 / took.as_secs_f64()
    );
    assert!(
        grown < GROWTH_BYTES_MAX,
        "{HOSTILE_CONNECTIONS} connections not reading {CALLS_PER_CONNECTION} 1 MiB READ replies each grew \
         the server by {} MiB",
        grown >> 20
    );

    // The stall timeout closes them, and says so once for each.
    let closed = wait_for_log(&server, "does not read its replies", HOSTILE_CONNECTIONS, Duration::from_secs(90));
    assert_eq!(closed, HOSTILE_CONNECTIONS, "connections not reading their replies were not closed");
    for conn in &mut hostile {
        let stream = conn.stream().try_clone().unwrap();
        let mut stream = stream;
        assert!(closed_within(&mut stream, Duration::from_secs(20)), "the server did not close its side");
    }
    assert!(!server.log_text().contains("reply larger than its reserved bound"));
    // And the server is still there for everyone else.
    good.null().expect("NULL after the hostile load");
}

/// knfsd closes connections that stay idle; at the connection limit a new
/// client takes the place of the connection idle for the longest, instead
/// of being refused while 2,000 silent connections hold every slot.
#[test]
fn a_new_client_is_served_while_2000_idle_connections_are_held() {
    const IDLE_CONNECTIONS: usize = 2000;
    raise_nofile(IDLE_CONNECTIONS as u64 + 1024);
    let server = TestServer::start("limits-idle-held", vec![ExportOpts::rw(1, "export")], "max_connections = 1024");
    let mut idle = Vec::with_capacity(IDLE_CONNECTIONS);
    for _ in 0..IDLE_CONNECTIONS {
        idle.push(TcpStream::connect_timeout(&server.addr, Duration::from_secs(10)).expect("connect"));
    }
    // Let the server see them all.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = server.log_text();
        let seen = log.matches("connection opened").count() + log.matches("connection refused").count();
        if seen >= IDLE_CONNECTIONS {
            break;
        }
        assert!(Instant::now() < deadline, "the server saw {seen} of {IDLE_CONNECTIONS} connections");
        std::thread::sleep(Duration::from_millis(100));
    }

    let start = Instant::now();
    let mut fresh = Nfs::connect(server.addr).expect("connect");
    let answered = fresh.null();
    let latency = start.elapsed();
    println!("NULL from a new client with {IDLE_CONNECTIONS} idle connections held: answered in {latency:?}");
    answered.expect("a new client's NULL with every slot held by idle connections");
    assert!(server.log_text().contains("oldest idle connection, closed to admit a new one"));
    drop(idle);
}

/// With a short idle timeout, a silent connection is closed; one whose
/// replies are still being sent (calls in flight) is not, however long
/// its client takes to read them.
#[test]
fn idle_connections_are_closed_after_the_idle_timeout_and_busy_ones_are_not() {
    const CALLS: usize = 64;
    let server = TestServer::start(
        "limits-idle-timeout",
        vec![ExportOpts::rw(1, "export")],
        "idle_timeout_seconds = 1\nstall_timeout_seconds = 60",
    );
    std::fs::write(server.export_dir(1).join("data"), pattern(2, MIB)).unwrap();
    let mut setup = Nfs::connect(server.addr).unwrap();
    let root = setup.mount(&server.export_path(1)).unwrap();
    let fh = setup.lookup(&root, "data").unwrap();

    let mut silent = Nfs::connect(server.addr).unwrap();
    silent.null().unwrap();
    let mut busy = RpcConn::connect(server.addr).unwrap();
    let xids: Vec<u32> = (0..CALLS).map(|_| read_call(&mut busy, &fh, 0, MIB as u32)).collect();

    let start = Instant::now();
    let mut stream = silent.conn.stream().try_clone().unwrap();
    assert!(closed_within(&mut stream, Duration::from_secs(15)), "an idle connection was not closed");
    println!("idle connection closed after {:?} (idle_timeout_seconds = 1)", start.elapsed());
    // Well past the idle timeout, the busy connection's replies all arrive.
    std::thread::sleep(Duration::from_secs(3));
    let mut got: Vec<u32> = (0..CALLS).map(|_| busy.recv().expect("a reply on the busy connection").0).collect();
    got.sort_unstable();
    let mut sent = xids;
    sent.sort_unstable();
    assert_eq!(got, sent, "replies in any order, each once");
    assert!(server.log_text().contains("idle for the idle timeout"));
}

/// A host that no export's client list admits can do nothing but be
/// refused: its connection is closed at accept, before it takes a slot.
#[test]
fn a_host_in_no_client_list_is_closed_at_accept() {
    let mut export = ExportOpts::rw(1, "export");
    export.clients = "[[export.clients]]\nhost = \"192.0.2.1\"\n".into();
    let server = TestServer::start("limits-not-admitted", vec![export], "");
    let mut conn = Nfs::connect(server.addr).expect("the TCP handshake is the kernel's");
    let answered = conn.null();
    assert!(answered.is_err(), "a host in no client list was answered");
    let mut stream = conn.conn.stream().try_clone().unwrap();
    assert!(closed_within(&mut stream, Duration::from_secs(5)));
    assert_eq!(wait_for_log(&server, "in no export's client list", 1, Duration::from_secs(5)), 1);
    assert!(!server.log_text().contains("connection opened"), "it took a slot");
}

/// A connection from `port` on 127.0.0.1, with the address reusable at
/// once and a reset (not TIME_WAIT) when closed.
fn connect_from(addr: SocketAddr, port: u16) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_linger(Some(Duration::ZERO))?;
    socket.bind(&SocketAddr::from(([127, 0, 0, 1], port)).into())?;
    socket.connect_timeout(&addr.into(), Duration::from_secs(10))?;
    Ok(socket.into())
}

/// A client's WRITE is retransmitted (same xid, same bytes, from the same
/// source port after a reconnect) after another client wrote the same
/// range. knfsd answers it from the reply cache; executing it again would
/// overwrite the other client's later data.
#[test]
fn a_retransmitted_write_does_not_overwrite_a_later_write() {
    let server = TestServer::start_default("limits-write-replay");
    let mut setup = Nfs::connect(server.addr).unwrap();
    let root = setup.mount(&server.export_path(1)).unwrap();
    let fh = setup.create_new(&root, "shared").unwrap();
    let first = vec![b'A'; 4096];
    let later = vec![b'B'; 4096];

    // Client A writes, and its connection is lost (reset) before it knows.
    // (A reserved port, as the kernel's: the export is secure.)
    let stream = reserved_stream_with(server.addr, |s| s.set_linger(Some(Duration::ZERO)));
    let port = stream.local_addr().unwrap().port();
    let mut a = Nfs { conn: RpcConn::from_stream(stream).unwrap() };
    let w = a.write(&fh, 0, &first, stable_how::FILE_SYNC).expect("A's WRITE");
    assert_eq!(w.count, 4096);
    drop(a);

    // Client B writes the same range.
    let w = setup.write(&fh, 0, &later, stable_how::FILE_SYNC).expect("B's WRITE");
    assert_eq!(w.count, 4096);

    // A reconnects from its port and retransmits: the same first xid of a
    // new RpcConn, the same bytes.
    let deadline = Instant::now() + Duration::from_secs(10);
    let stream = loop {
        match connect_from(server.addr, port) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("reconnecting from port {port}: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("cannot reconnect from port {port}: {e}"),
        }
    };
    let mut a = Nfs { conn: RpcConn::from_stream(stream).unwrap() };
    let w = a.write(&fh, 0, &first, stable_how::FILE_SYNC).expect("A's retransmitted WRITE");
    assert_eq!(w.count, 4096);
    let now = std::fs::read(server.export_dir(1).join("shared")).unwrap();
    assert!(now == later, "the retransmitted WRITE was executed again over the later write");
    assert!(server.log_text().contains("replayed from the duplicate reply cache"));
}

/// A 1 MiB WRITE that arrives in pieces, the server seeing each: while the
/// record is half there, the socket wakes a worker only when the rest has
/// arrived (SO_RCVLOWAT); after it, at the first byte again, so the small
/// calls that follow are answered at once. A client that stops halfway
/// and leaves is closed, and nobody else notices.
#[test]
fn a_large_write_sent_in_pieces_is_answered_and_so_are_the_small_calls_after_it() {
    let server = TestServer::start_default("limits-pieces");
    let mut nfs = Nfs::connect(server.addr).unwrap();
    let root = nfs.mount(&server.export_path(1)).unwrap();
    let fh = nfs.create_new(&root, "big").unwrap();
    let data = pattern(7, 1 << 20);
    for round in 0..3u64 {
        nfs.conn.hold();
        nfs.send_write(&fh, round << 20, &data, stable_how::UNSTABLE).unwrap();
        let record = nfs.conn.take_held();
        let cuts = [0, 100 << 10, 400 << 10, record.len() - 10, record.len()];
        for piece in cuts.windows(2) {
            std::io::Write::write_all(&mut nfs.conn.stream(), &record[piece[0]..piece[1]]).unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
        let (_, written) = nfs.recv_write().unwrap();
        assert_eq!(written.expect("WRITE").count, 1 << 20, "round {round}");
        // Without the low-water mark set back, these would wait for
        // hundreds of KiB that never come.
        nfs.conn.stream().set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        for _ in 0..3 {
            nfs.null().unwrap_or_else(|e| panic!("NULL after a WRITE in pieces (round {round}): {e}"));
            nfs.getattr(&fh).expect("GETATTR");
        }
        nfs.conn.stream().set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    }
    let on_disk = std::fs::read(server.export_dir(1).join("big")).unwrap();
    assert_eq!(on_disk.len(), 3 << 20);
    assert!(on_disk.chunks(1 << 20).all(|c| c == &data[..]), "the pieces were put together wrongly");

    // Half a record, then gone: closed, the others still served.
    let closed = server.log_text().matches("closed by the client").count();
    let mut half = Nfs::connect(server.addr).unwrap();
    half.conn.hold();
    half.send_write(&fh, 0, &data, stable_how::UNSTABLE).unwrap();
    let record = half.conn.take_held();
    std::io::Write::write_all(&mut half.conn.stream(), &record[..300 << 10]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(half);
    assert!(
        wait_for_log(&server, "closed by the client", closed + 1, Duration::from_secs(10)) > closed,
        "{}",
        server.log_text()
    );
    nfs.null().expect("NULL from another client");
    assert!(std::fs::read(server.export_dir(1).join("big")).unwrap() == on_disk, "half a WRITE was written");
}

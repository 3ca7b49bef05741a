//! The life of a `keel` process: starting with and without a configuration,
//! refusing bad configurations and missing privileges, logging, and
//! stopping on SIGTERM without losing acknowledged calls.

use std::io::{BufRead, BufReader, ErrorKind};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_testkit::nfs::{Nfs, RpcConn, decode, pattern, proc3, prog, reserved_stream_with};
use keel_testkit::procs::{Output, TempDir, free_port, run_ok, run_timeout, wait_for, wait_timeout};
use keel_testkit::server::{TestServer, digest, require_root};
use nfs3_types::nfs3::stable_how;

const KEEL: &str = env!("CARGO_BIN_EXE_keel");
/// serve.rs DRAIN_TIMEOUT: how long a stop waits for calls in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
const CMD_TIMEOUT: Duration = Duration::from_secs(60);
const CHUNK_BYTES: usize = 1 << 20;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A `keel` started with arbitrary arguments (TestServer always uses a
/// configuration file). Killed on drop.
struct Keel {
    child: Option<Child>,
    stdout: Arc<Mutex<String>>,
    stderr_path: PathBuf,
}

impl Keel {
    fn spawn(cwd: &Path, args: &[&str]) -> Self {
        let stderr_path = cwd.join("keel.stderr");
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut child = Command::new(KEEL)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start keel");
        let stdout = Arc::new(Mutex::new(String::new()));
        let pipe = child.stdout.take().unwrap();
        let sink = stdout.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Keel { child: Some(child), stdout, stderr_path }
    }

    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Waits for the banner's last line (the mount command).
    fn wait_banner(&mut self) -> String {
        let found = wait_for(Duration::from_secs(20), || {
            let out = self.stdout();
            if out.lines().any(|l| l.trim_end().ends_with(" /mnt")) {
                return Some(out);
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("keel exited ({status}) before serving; stderr:\n{}", self.stderr());
            }
            None
        });
        found.unwrap_or_else(|| panic!("no banner within 20 s; stdout:\n{}\nstderr:\n{}", self.stdout(), self.stderr()))
    }

    fn sigterm(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        match wait_timeout(&mut child, DRAIN_TIMEOUT + Duration::from_secs(10)) {
            Some(status) => status,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("keel did not exit after SIGTERM; stderr:\n{}", self.stderr());
            }
        }
    }
}

impl Drop for Keel {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- keel stdout ----\n{}\n---- keel stderr ----\n{}", self.stdout(), self.stderr());
        }
    }
}

fn nfs_url(addr: SocketAddr, path: &str) -> String {
    format!("nfs://127.0.0.1{path}?nfsport={0}&mountport={0}", addr.port())
}

fn sigterm(server: &TestServer) {
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) }, 0);
}

/// Whether a TCP connection to `addr` is refused (not accepted, not
/// timing out).
fn refused(addr: SocketAddr) -> bool {
    matches!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)), Err(e) if e.kind() == ErrorKind::ConnectionRefused)
}

/// A connection that asks for `calls` 1 MiB READs of `file` and then does
/// not read the replies, so the server cannot finish answering it: Keel's
/// reply writer blocks on the full socket.
struct StalledReader {
    nfs: Nfs,
    /// xid of each READ, by chunk index.
    xids: Vec<u32>,
}

impl StalledReader {
    fn start(server: &TestServer, file: &str, calls: usize) -> Self {
        let mut nfs = Nfs::connect(server.addr).unwrap();
        let root = nfs.mount(&server.export_path(1)).unwrap();
        let fh = nfs.lookup(&root, file).unwrap();
        // Small receive buffer: the replies pile up in Keel, not here.
        let _ = socket2::SockRef::from(nfs.conn.stream()).set_recv_buffer_size(64 << 10);
        let xids =
            (0..calls).map(|i| nfs.send_read(&fh, (i * CHUNK_BYTES) as u64, CHUNK_BYTES as u32).unwrap()).collect();
        StalledReader { nfs, xids }
    }

    /// Reads every reply (they come in any order); returns the data of
    /// each READ, by chunk index.
    fn drain(mut self) -> Vec<Vec<u8>> {
        let mut out = vec![Vec::new(); self.xids.len()];
        for n in 0..self.xids.len() {
            let (xid, body) = self.nfs.conn.recv().unwrap_or_else(|e| {
                panic!("only {n} of the {} READs Keel had taken were answered, then: {e}", self.xids.len())
            });
            let i = self.xids.iter().position(|x| *x == xid).expect("reply to a READ sent");
            match decode::<nfs3_types::nfs3::READ3res>(&body).unwrap() {
                nfs3_types::nfs3::Nfs3Result::Ok(ok) => out[i] = ok.data.to_vec(),
                nfs3_types::nfs3::Nfs3Result::Err((s, _)) => panic!("READ {i} failed: {s:?}"),
            }
        }
        out
    }
}

/// Pipelined UNSTABLE 1 MiB WRITEs of chunk i = pattern(i) to `file`, 16 in
/// flight, until `chunks` are written or the connection ends. Records the
/// chunks whose WRITE was acknowledged.
fn pipelined_writer(
    addr: SocketAddr,
    export: String,
    file: &'static str,
    chunks: u64,
    acked: Arc<Mutex<Vec<u64>>>,
    progress: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut nfs = Nfs::connect(addr).unwrap();
        let root = nfs.mount(&export).unwrap();
        let fh = nfs.create_new(&root, file).unwrap();
        let mut in_flight = std::collections::HashMap::new();
        let mut next = 0u64;
        let mut send_error = None;
        loop {
            while in_flight.len() < 16 && next < chunks && send_error.is_none() {
                let data = pattern(next, CHUNK_BYTES);
                match nfs.send_write(&fh, next * CHUNK_BYTES as u64, &data, stable_how::UNSTABLE) {
                    Ok(xid) => {
                        in_flight.insert(xid, next);
                        next += 1;
                    }
                    // Collect the replies still coming before giving up.
                    Err(e) => send_error = Some(format!("send failed: {e}")),
                }
            }
            if in_flight.is_empty() {
                return send_error.unwrap_or_else(|| "all written".into());
            }
            match nfs.recv_write() {
                Ok((xid, Ok(w))) => {
                    let chunk = in_flight.remove(&xid).expect("reply to a call in flight");
                    assert_eq!(w.count as usize, CHUNK_BYTES);
                    acked.lock().unwrap().push(chunk);
                    progress.fetch_add(1, Ordering::SeqCst);
                }
                Ok((_, Err(s))) => return format!("WRITE failed: {s:?}"),
                Err(e) => return format!("{} then connection ended: {e}", send_error.unwrap_or_default()),
            }
        }
    })
}

// ---------------------------------------------------------------------------
// SIGTERM
// ---------------------------------------------------------------------------

/// SIGTERM in the middle of a long transfer: Keel stops accepting at once
/// (new connections are refused while it is still finishing), answers every
/// call it had taken (here: READs a client is slow to collect), exits with
/// status 0 well within the drain timeout and logs that it stopped; every
/// WRITE it acknowledged is in the file.
#[test]
fn sigterm_mid_transfer_answers_calls_taken_refuses_new_connections_and_exits_zero() {
    let mut server = TestServer::start_default("life-sigterm");
    let export = server.export_dir(1);
    let source = pattern(99, 48 * CHUNK_BYTES);
    std::fs::write(export.join("source.bin"), &source).unwrap();

    let acked = Arc::new(Mutex::new(Vec::new()));
    let progress = Arc::new(AtomicUsize::new(0));
    let writer =
        pipelined_writer(server.addr, server.export_path(1), "transfer.bin", 400, acked.clone(), progress.clone());
    // 12 MiB of READs: within what one connection may hold in flight (16
    // MiB), so Keel takes them all; more would wait in the socket, untaken.
    let stalled = StalledReader::start(&server, "source.bin", 12);
    assert!(
        wait_for(Duration::from_secs(60), || (progress.load(Ordering::SeqCst) >= 24).then_some(())).is_some(),
        "the transfer did not get going"
    );

    let t0 = Instant::now();
    sigterm(&server);
    assert!(
        wait_for(Duration::from_secs(10), || server.log_text().contains("stopping").then_some(())).is_some(),
        "no 'stopping' in the log after SIGTERM"
    );
    // New connections are refused while the stalled client keeps Keel
    // finishing.
    let refused_at = wait_for(Duration::from_secs(5), || refused(server.addr).then(Instant::now));
    assert!(refused_at.is_some(), "a new connection was still accepted 5 s after the stop began");
    assert!(server.is_running(), "keel exited although a client had replies still to collect");
    // The transfer's connection is closed by the server, not left hanging.
    let writer_end = writer.join().unwrap();
    assert!(progress.load(Ordering::SeqCst) < 400, "the transfer finished before SIGTERM: {writer_end}");

    // Every call Keel took is answered, even this late.
    let replies = stalled.drain();
    for (i, data) in replies.iter().enumerate() {
        assert!(data[..] == source[i * CHUNK_BYTES..(i + 1) * CHUNK_BYTES], "READ {i} returned wrong data");
    }
    let status = server.terminate();
    let elapsed = t0.elapsed();
    assert!(status.success(), "keel exited with {status} after SIGTERM");
    assert!(elapsed < DRAIN_TIMEOUT, "keel took {elapsed:?} to stop (drain timeout {DRAIN_TIMEOUT:?})");
    let log = server.log_text();
    for line in ["SIGTERM received", "stopping", "stopped"] {
        assert!(log.contains(line), "log lacks {line:?}:\n{log}");
    }
    assert!(!log.contains("did not finish"), "drain timed out although every client finished:\n{log}");

    // Every acknowledged WRITE is in the file.
    let on_disk = std::fs::read(export.join("transfer.bin")).unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 24);
    for &chunk in &acked {
        let at = chunk as usize * CHUNK_BYTES;
        assert!(
            on_disk.len() >= at + CHUNK_BYTES && on_disk[at..at + CHUNK_BYTES] == pattern(chunk, CHUNK_BYTES)[..],
            "acknowledged chunk {chunk} is not on disk ({} bytes in the file)",
            on_disk.len()
        );
    }
    eprintln!("{} chunks acknowledged before the stop; writer: {writer_end}; stopped in {elapsed:?}", acked.len());
}

/// A busy client keeps sending calls after the stop began (Keel no longer
/// reads them). The calls Keel did take must still be answered: closing a
/// socket with unread input makes the kernel reset the connection and throw
/// away the replies still queued in it, so Keel has to close gracefully.
///
/// Deterministic: the client's receive window is tiny and it reads nothing
/// until Keel has exited, so the replies (1 MiB) sit in Keel's socket when
/// Keel closes it; `ss` shows them queued before the stop begins.
#[test]
fn sigterm_still_answers_a_client_that_sent_more_calls_after_the_stop_began() {
    const CALLS: usize = 16;
    const READ_BYTES: usize = 64 << 10;
    let mut server = TestServer::start_default("life-busy");
    let source = pattern(97, CALLS * READ_BYTES);
    std::fs::write(server.export_dir(1).join("source.bin"), &source).unwrap();

    let stream = reserved_stream_with(server.addr, |socket| socket.set_recv_buffer_size(4096));
    let mut nfs = Nfs { conn: RpcConn::from_stream(stream).unwrap() };
    let client = nfs.conn.local_addr();
    let root = nfs.mount(&server.export_path(1)).unwrap();
    let fh = nfs.lookup(&root, "source.bin").unwrap();
    let xids: Vec<u32> =
        (0..CALLS).map(|i| nfs.send_read(&fh, (i * READ_BYTES) as u64, READ_BYTES as u32).unwrap()).collect();
    // Keel has taken every call once their replies are in its socket.
    let queued = wait_for(Duration::from_secs(10), || {
        let q = server_send_queue(server.addr.port(), client.port());
        (q >= (CALLS - 1) * READ_BYTES).then_some(q)
    });
    assert!(
        queued.is_some(),
        "Keel did not answer the READs: send queue {}",
        server_send_queue(server.addr.port(), client.port())
    );

    sigterm(&server);
    assert!(
        wait_for(Duration::from_secs(10), || server.log_text().contains("stopping").then_some(())).is_some(),
        "no 'stopping' in the log after SIGTERM"
    );
    // One more call, which the stopping server will not read.
    let void = nfs3_types::xdr_codec::Void;
    nfs.conn.send(prog::NFS, prog::NFS_V3, proc3::NULL, &void).unwrap();
    let status = server.terminate();
    assert!(status.success(), "exit status {status}");

    for n in 0..CALLS {
        let (xid, body) = nfs.conn.recv().unwrap_or_else(|e| {
            panic!("only {n} of the {CALLS} READs Keel had answered before stopping reached the client, then: {e}")
        });
        let i = xids.iter().position(|x| *x == xid).expect("reply to a READ sent");
        match decode::<nfs3_types::nfs3::READ3res>(&body).unwrap() {
            nfs3_types::nfs3::Nfs3Result::Ok(ok) => {
                assert!(ok.data[..] == source[i * READ_BYTES..(i + 1) * READ_BYTES], "READ {i} returned wrong data")
            }
            nfs3_types::nfs3::Nfs3Result::Err((s, _)) => panic!("READ {i} failed: {s:?}"),
        }
    }
}

/// Bytes queued in Keel's socket (port `server`) towards the client at
/// port `client`, as `ss` reports them (0 if there is no such socket).
fn server_send_queue(server: u16, client: u16) -> usize {
    let filter = format!("( sport = :{server} and dport = :{client} )");
    let out = run_timeout(Command::new("ss").args(["-Htn", "state", "established", &filter]), CMD_TIMEOUT);
    // Recv-Q Send-Q Local Peer
    out.stdout.split_whitespace().nth(1).and_then(|q| q.parse().ok()).unwrap_or(0)
}

/// A client that never reads its replies must not keep Keel from stopping:
/// after the drain timeout Keel gives up on it, logs so, and exits 0.
#[test]
fn sigterm_with_a_client_that_never_reads_exits_after_the_drain_timeout() {
    let mut server = TestServer::start_default("life-stuck");
    let source = pattern(98, 48 * CHUNK_BYTES);
    std::fs::write(server.export_dir(1).join("source.bin"), &source).unwrap();
    let _stalled = StalledReader::start(&server, "source.bin", 48);
    std::thread::sleep(Duration::from_millis(500));

    let t0 = Instant::now();
    sigterm(&server);
    let exited = wait_for(DRAIN_TIMEOUT + Duration::from_secs(10), || (!server.is_running()).then(Instant::now));
    let log = server.log_text();
    assert!(
        exited.is_some(),
        "keel still running {:?} after SIGTERM (drain timeout {DRAIN_TIMEOUT:?}); log tail:\n{}",
        t0.elapsed(),
        log.lines().rev().take(8).collect::<Vec<_>>().join("\n")
    );
    assert!(log.contains("did not finish"), "no drain-timeout warning:\n{log}");
    assert!(log.contains("stopped"), "no 'stopped' line:\n{log}");
}

// ---------------------------------------------------------------------------
// Logs
// ---------------------------------------------------------------------------

/// The log has the start line, one "connection opened" and one "connection
/// closed" line per connection (naming the peer), and the stop lines.
#[test]
fn log_has_start_stop_and_one_line_per_connection_open_and_close() {
    let mut server = TestServer::start_default("life-log");
    let mut peers = Vec::new();
    // All three open at once, so each has a source port of its own (a port
    // freed by a closed connection may be taken again on loopback).
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut nfs = Nfs::connect(server.addr).unwrap();
        nfs.null().unwrap();
        peers.push(nfs.conn.local_addr());
        open.push(nfs);
    }
    drop(open);
    // Closed by the client: wait for the server to notice.
    let closed_all = wait_for(Duration::from_secs(10), || {
        let log = server.log_text();
        peers.iter().all(|p| log.contains(&format!("peer={p} reason="))).then_some(())
    });
    let status = server.terminate();
    assert!(status.success(), "exit status {status}");
    let log = server.log_text();
    assert!(closed_all.is_some(), "not every close was logged:\n{log}");
    for p in &peers {
        let opened =
            log.lines().filter(|l| l.contains("connection opened") && l.contains(&format!("peer={p} "))).count();
        let closed =
            log.lines().filter(|l| l.contains("connection closed") && l.contains(&format!("peer={p} "))).count();
        assert_eq!((opened, closed), (1, 1), "connection {p}: {opened} open and {closed} close lines:\n{log}");
    }
    assert_eq!(log.matches("connection opened").count(), 3, "one open line per connection:\n{log}");
    assert_eq!(log.matches("connection closed").count(), 3, "one close line per connection:\n{log}");
    let order = [" serving NFS", "SIGTERM received", "stopping", "stopped"];
    let mut at = 0;
    for line in order {
        let found = log[at..].find(line).unwrap_or_else(|| panic!("log lacks {line:?} (in order {order:?}):\n{log}"));
        at += found + line.len();
    }
}

// ---------------------------------------------------------------------------
// Starting without a configuration
// ---------------------------------------------------------------------------

/// `keel serve` in an empty directory: creates ./keel-export and
/// ./keel-state, prints the exact mount command, and serves; libnfs copies
/// a file in.
#[test]
fn zero_config_serve_creates_its_directories_prints_the_mount_line_and_serves() {
    require_root();
    let cwd = TempDir::new("zeroconf");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut keel = Keel::spawn(cwd.path(), &["serve", "--portmap", "off", "--listen", &listen]);
    let banner = keel.wait_banner();
    let export = cwd.path().join("keel-export");
    assert!(export.is_dir(), "no ./keel-export");
    assert!(cwd.path().join("keel-state").is_dir(), "no ./keel-state");
    assert!(cwd.path().join("keel-state/handle.key").is_file(), "no handle key in ./keel-state");
    // --portmap off: no portmapper, so no locking through Keel (nolock).
    let expected = format!(
        "mount -t nfs -o vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp,nolock 127.0.0.1:{} /mnt",
        export.display()
    );
    assert!(banner.lines().any(|l| l.trim() == expected), "banner lacks\n  {expected}\nbanner:\n{banner}");

    let local = cwd.path().join("hello.bin");
    std::fs::write(&local, pattern(7, 300_001)).unwrap();
    let addr: SocketAddr = listen.parse().unwrap();
    let url = nfs_url(addr, &format!("{}/hello.bin", export.display()));
    run_ok(Command::new("nfs-cp").arg(&local).arg(&url), CMD_TIMEOUT);
    assert_eq!(digest(&export.join("hello.bin")), digest(&local));
    let status = keel.sigterm();
    assert!(status.success(), "exit status {status}");
}

/// `keel serve DIR` exports DIR (and creates no ./keel-export).
#[test]
fn serve_dir_exports_that_directory() {
    require_root();
    let cwd = TempDir::new("servedir");
    let dir = TempDir::new("servedir-export");
    std::fs::write(dir.path().join("already-here.txt"), b"hello from DIR\n").unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let dir_arg = dir.path().display().to_string();
    let mut keel = Keel::spawn(cwd.path(), &["serve", &dir_arg, "--portmap", "off", "--listen", &listen]);
    let banner = keel.wait_banner();
    assert!(banner.contains(&format!("export {dir_arg} ")), "banner does not name {dir_arg}:\n{banner}");
    assert!(!cwd.path().join("keel-export").exists(), "./keel-export created although DIR was given");
    let addr: SocketAddr = listen.parse().unwrap();
    let out = run_ok(Command::new("nfs-cat").arg(nfs_url(addr, &format!("{dir_arg}/already-here.txt"))), CMD_TIMEOUT);
    assert_eq!(out.stdout, "hello from DIR\n");
    let status = keel.sigterm();
    assert!(status.success(), "exit status {status}");
}

// ---------------------------------------------------------------------------
// Command line and configuration
// ---------------------------------------------------------------------------

#[test]
fn help_describes_every_command_and_exits_zero() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["--help"], &["Usage: keel", "serve", "check-config", "NFSv3"]),
        (&["serve", "--help"], &["Usage: keel serve", "--config", "--listen", "--portmap", "[DIR]"]),
        (&["check-config", "--help"], &["Usage: keel check-config", "Check a configuration file", "<FILE>"]),
    ];
    for (args, wanted) in cases {
        let out = run_timeout(Command::new(KEEL).args(*args), CMD_TIMEOUT);
        assert!(out.status.success(), "keel {args:?} exited {}:\n{}", out.status, out.text());
        for w in *wanted {
            assert!(out.stdout.contains(w), "keel {args:?} does not mention {w:?}:\n{}", out.stdout);
        }
    }
}

/// A configuration with an unknown key on line 3: `keel serve` exits
/// non-zero naming the file and line, and never listens.
#[test]
fn invalid_config_is_refused_with_file_and_line_before_listening() {
    require_root();
    let dir = TempDir::new("badconfig");
    let port = free_port();
    let config = dir.path().join("bad.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\nlisten_backlog = 5\nportmap = \"off\"\nstate_dir = \"{0}/state\"\n\n\
             [[export]]\npath = \"{0}\"\nid = 1\nclients = [{{ host = \"*\" }}]\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let config_arg = config.display().to_string();
    let mut keel = Keel::spawn(dir.path(), &["serve", "--config", &config_arg]);
    let status = wait_timeout(keel.child.as_mut().unwrap(), Duration::from_secs(20)).expect("keel kept running");
    keel.child = None;
    let stderr = keel.stderr();
    assert!(!status.success(), "keel accepted an invalid configuration");
    assert!(stderr.contains(&format!("{config_arg}:3:")), "message does not name {config_arg}:3:\n{stderr}");
    assert!(stderr.contains("listen_backlog"), "message does not name the key:\n{stderr}");
    assert!(!keel.stdout().contains("serving"), "printed a banner:\n{}", keel.stdout());
    assert!(!stderr.contains(" serving NFS"), "started serving:\n{stderr}");
    assert!(refused(format!("127.0.0.1:{port}").parse().unwrap()), "something listens on the configured port");
    assert!(!dir.path().join("state").exists(), "created its state directory before checking the configuration");

    // check-config says the same.
    let out = run_timeout(Command::new(KEEL).arg("check-config").arg(&config), CMD_TIMEOUT);
    assert!(!out.status.success());
    assert!(out.stderr.contains(&format!("{config_arg}:3:")), "{}", out.text());
}

/// A configuration file that cannot be read is named, with why, once.
#[test]
fn a_missing_configuration_file_is_named_with_its_error_once() {
    let dir = TempDir::new("missing-config");
    let missing = dir.path().join("missing.toml");
    for command in ["check-config", "probe --config", "status --config", "serve --config"] {
        let out = run_timeout(Command::new(KEEL).args(command.split(' ')).arg(&missing), CMD_TIMEOUT);
        assert!(!out.status.success(), "keel {command}: {}", out.text());
        let why = "No such file or directory (os error 2)";
        assert_eq!(out.stderr.matches(why).count(), 1, "keel {command}:\n{}", out.stderr);
        assert!(out.stderr.contains(&missing.display().to_string()), "keel {command}:\n{}", out.stderr);
    }
}

/// The shipped example, pointed at directories that exist here, checks
/// out: `keel check-config` prints a summary of what it would serve.
#[test]
fn check_config_of_the_example_prints_a_summary() {
    let dir = TempDir::new("example");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../keel.example.toml");
    let mut text = std::fs::read_to_string(&example).unwrap();
    for name in ["home", "scratch", "apps"] {
        let real = dir.path().join(name);
        std::fs::create_dir(&real).unwrap();
        let from = format!("path = \"/srv/{name}\"");
        assert!(text.contains(&from), "the example no longer has {from}");
        text = text.replace(&from, &format!("path = \"{}\"", real.display()));
    }
    let config = dir.path().join("keel.toml");
    std::fs::write(&config, &text).unwrap();
    let out = run_timeout(Command::new(KEEL).arg("check-config").arg(&config), CMD_TIMEOUT);
    assert!(out.status.success(), "check-config failed ({}):\n{}", out.status, out.text());
    assert!(out.stdout.contains(&format!("{}: valid", config.display())), "{}", out.stdout);
    assert!(out.stdout.contains("portmap auto"), "{}", out.stdout);
    for (name, id) in [("home", 1), ("scratch", 2), ("apps", 3)] {
        let line = format!("export {} id {id} fsid 0x", dir.path().join(name).display());
        assert!(out.stdout.contains(&line), "summary lacks {line:?}:\n{}", out.stdout);
    }
    assert!(out.stdout.contains("async"), "the scratch export is async:\n{}", out.stdout);
    assert!(out.stdout.contains("metrics not served"), "{}", out.stdout);
    assert!(out.stdout.contains("no cache devices"), "{}", out.stdout);

    // Everything the server would use: metrics, cache devices, each
    // export's cache mode and where its fsid comes from.
    let text = text
        .replace("[server]\n", "[server]\nmetrics_listen = \"127.0.0.1:9049\"\n")
        .replace("id = 3\n", "id = 3\nfsid = 1234\ncache = \"write-through\"\n")
        + "\n[cache]\ndevices = [\"/dev/keel-test-a\", \"/dev/keel-test-b\"]\n";
    std::fs::write(&config, &text).unwrap();
    let out = run_timeout(Command::new(KEEL).arg("check-config").arg(&config), CMD_TIMEOUT);
    assert!(out.status.success(), "check-config failed ({}):\n{}", out.status, out.text());
    for wanted in [
        "metrics on http://127.0.0.1:9049/metrics".to_string(),
        "cache devices /dev/keel-test-a, /dev/keel-test-b".to_string(),
        format!("export {} id 3 fsid 0x4d2 (from the configuration", dir.path().join("apps").display()),
        "; cache write-through)".to_string(),
    ] {
        assert!(out.stdout.contains(&wanted), "summary lacks {wanted:?}:\n{}", out.stdout);
    }
}

// ---------------------------------------------------------------------------
// Privileges
// ---------------------------------------------------------------------------

fn as_nobody(args: &[&str], cwd: &Path) -> Output {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid", "65534", "--regid", "65534", "--clear-groups", KEEL]).args(args).current_dir(cwd);
    run_timeout(&mut cmd, CMD_TIMEOUT)
}

fn assert_refused_for_privileges(out: &Output) {
    assert!(!out.status.success(), "keel ran as an unprivileged user:\n{}", out.text());
    let text = out.text();
    assert!(text.contains("root"), "the message does not say keel needs root:\n{text}");
    assert!(text.contains("capabilit"), "the message does not name the missing capabilities:\n{text}");
}

/// With a configuration: refused, with a message about root and the
/// capabilities it lacks.
#[test]
fn non_root_with_a_config_is_refused_with_a_clear_message() {
    require_root();
    let dir = TempDir::new("nonroot-config");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.path().join("keel.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{}\"]\nportmap = \"off\"\nstate_dir = \"{1}/state\"\n\n\
             [[export]]\npath = \"{1}\"\nid = 1\nclients = [{{ host = \"*\" }}]\n",
            free_port(),
            dir.path().display()
        ),
    )
    .unwrap();
    let out = as_nobody(&["serve", "--config", &config.display().to_string()], dir.path());
    assert_refused_for_privileges(&out);
}

/// The zero-configuration start as an ordinary user in a directory it
/// cannot write: the refusal must still be about privileges (not a bare
/// "Permission denied"), and come before anything is created.
#[test]
fn non_root_zero_config_is_refused_with_a_clear_message() {
    require_root();
    let dir = TempDir::new("nonroot-zeroconf");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let out = as_nobody(&["serve", "--portmap", "off", "--listen", &listen], dir.path());
    assert_refused_for_privileges(&out);
    assert!(!dir.path().join("keel-export").exists());
}

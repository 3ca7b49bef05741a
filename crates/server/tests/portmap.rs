//! Portmapper version 2: a client that asks port 111 finds NFS and MOUNT,
//! whether Keel serves port 111 itself (nothing else holds it) or registers
//! with the rpcbind that does.
//!
//! Port 111 is one per network stack, so each test makes its own network
//! namespace (`ip netns add`), runs Keel, rpcbind and the independent
//! clients (`rpcinfo` from Debian's rpcbind, libnfs's `nfs-ls`) inside it,
//! and deletes it afterwards. rpcbind also gets a private /run (its lock
//! file and socket live there), so it never meets the host's own rpcbind.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_client::{Auth, PreparedCall};
use keel_nfs3_proto::portmap::Mapping;
use keel_nfs3_proto::{IPPROTO_TCP, NFS_PROGRAM, NFS_V3, PMAP_PROGRAM, PMAP_V2, PmapProc};
use keel_testkit::netns::Netns;
use keel_testkit::procs::{Output, TempDir, wait_for, wait_timeout};
use keel_xdr::Encode;
use socket2::{Domain, Socket, Type};

const KEEL: &str = env!("CARGO_BIN_EXE_keel");
const CMD_TIMEOUT: Duration = Duration::from_secs(30);
/// Inside a namespace of its own, Keel can have the standard port.
const NFS_PORT: u16 = 2049;

// ---------------------------------------------------------------------------
// Namespaces and processes in them
// ---------------------------------------------------------------------------

/// `rpcinfo -p 127.0.0.1` as (program, version, protocol, port) rows;
/// None if the portmapper does not answer.
fn rpcinfo(ns: &Netns) -> Option<Vec<(u32, u32, String, u16)>> {
    let out = ns.run(&["rpcinfo", "-p", "127.0.0.1"]);
    if !out.status.success() {
        return None;
    }
    let rows = out
        .stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.first()?.parse().ok()?, f.get(1)?.parse().ok()?, f.get(2)?.to_string(), f.get(3)?.parse().ok()?))
        })
        .collect();
    Some(rows)
}

fn has(rows: &[(u32, u32, String, u16)], prog: u32, vers: u32, proto: &str, port: u16) -> bool {
    rows.iter().any(|(p, v, pr, po)| (*p, *v, pr.as_str(), *po) == (prog, vers, proto, port))
}

fn lists_program(rows: &[(u32, u32, String, u16)], prog: u32) -> bool {
    rows.iter().any(|(p, ..)| *p == prog)
}

/// A process started in a namespace; killed on drop.
struct NsChild {
    child: Option<Child>,
    stdout: Arc<Mutex<String>>,
    log: PathBuf,
}

impl NsChild {
    fn spawn(mut cmd: Command, log: PathBuf) -> Self {
        let stderr = std::fs::File::create(&log).unwrap();
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(stderr).spawn().expect("spawn");
        let stdout = Arc::new(Mutex::new(String::new()));
        let (pipe, sink) = (child.stdout.take().unwrap(), stdout.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        NsChild { child: Some(child), stdout, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// Waits for Keel's banner (it is serving), panicking if it exits.
    fn wait_serving(&mut self) {
        let ok = wait_for(Duration::from_secs(20), || {
            if self.stdout.lock().unwrap().contains(" serving NFS") {
                return Some(true);
            }
            if !self.running() {
                return Some(false);
            }
            None
        });
        assert_eq!(ok, Some(true), "keel did not start serving; log:\n{}", self.log_text());
    }

    /// The exit status, if the process exits within `timeout`.
    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let status = wait_timeout(self.child.as_mut().expect("running"), timeout);
        if status.is_some() {
            self.child = None;
        }
        status
    }

    fn signal(&mut self, sig: i32) {
        let pid = self.child.as_ref().expect("running").id();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid as i32, sig) };
    }

    fn sigterm(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit(Duration::from_secs(40)).unwrap_or_else(|| panic!("no exit after SIGTERM:\n{}", self.log_text()))
    }
}

impl Drop for NsChild {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- {} ----\n{}", self.log.display(), self.log_text());
        }
    }
}

/// Keel's files: a configuration, an export with one file in it.
struct Site {
    dir: TempDir,
}

impl Site {
    fn new(tag: &str) -> Self {
        let dir = TempDir::new(tag);
        std::fs::create_dir(dir.path().join("export")).unwrap();
        std::fs::write(dir.path().join("export/marker.txt"), b"found through the portmapper\n").unwrap();
        Site { dir }
    }

    fn export(&self) -> String {
        self.dir.path().join("export").display().to_string()
    }

    fn config(&self, portmap: &str, port: u16) -> PathBuf {
        let path = self.dir.path().join(format!("keel-{portmap}-{port}.toml"));
        let text = format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\nportmap = \"{portmap}\"\nworkers = 4\nlog_level = \"debug\"\n\
             state_dir = \"{0}/state\"\n\n[[export]]\npath = \"{1}\"\nid = 1\naccess = \"rw\"\n\
             squash = \"no_root_squash\"\nclients = [{{ host = \"*\" }}]\n",
            self.dir.path().display(),
            self.export()
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    fn keel(&self, ns: &Netns, portmap: &str, port: u16) -> NsChild {
        let config = self.config(portmap, port);
        let log = self.dir.path().join(format!("keel-{portmap}-{port}.log"));
        NsChild::spawn(ns.cmd(&[KEEL, "serve", "--config", &config.display().to_string()]), log)
    }
}

/// rpcbind in the foreground inside `ns`, with a private /run.
fn start_rpcbind(ns: &Netns, dir: &Path) -> NsChild {
    let script = "mount -t tmpfs keel-test-run /run && exec rpcbind -f -w";
    let child = NsChild::spawn(ns.cmd(&["unshare", "--mount", "sh", "-c", script]), dir.join("rpcbind.log"));
    let up = wait_for(Duration::from_secs(10), || rpcinfo(ns));
    let rows = up.unwrap_or_else(|| panic!("rpcbind did not answer; its log:\n{}", child.log_text()));
    assert!(has(&rows, 100_000, 2, "tcp", 111), "rpcbind does not list itself: {rows:?}");
    child
}

/// Where a portmap call comes from: an ordinary port, or a reserved one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Ordinary,
    Reserved,
}

/// Calls portmap procedure `proc_` with `mapping` on 127.0.0.1:111 inside
/// `ns`, over UDP or TCP, from an ordinary or a reserved source port, and
/// returns the result word (SET and UNSET: 1 true, 0 false; GETPORT: the
/// port). The call runs on a thread of its own that joins the namespace
/// first (a thread's sockets live in its network namespace).
fn pmap_call(ns: &Netns, udp: bool, from: Source, proc_: PmapProc, mapping: Mapping) -> u32 {
    let netns = ns.path();
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(&netns).unwrap_or_else(|e| panic!("{}: {e}", netns.display()));
        // SAFETY: setns on a descriptor of a network namespace; it only
        // changes this thread's namespace.
        assert_eq!(unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns");
        let xid = keel_client::next_xid();
        let call = PreparedCall::new(xid, &Auth::None, PMAP_PROGRAM, PMAP_V2, proc_ as u32, |e| mapping.encode(e))
            .expect("encode the call");
        let record: Vec<u8> = call.segments().concat();
        let socket = Socket::new(Domain::IPV4, if udp { Type::DGRAM } else { Type::STREAM }, None).unwrap();
        socket.set_read_timeout(Some(CMD_TIMEOUT)).unwrap();
        let ports: Vec<u16> = match from {
            Source::Ordinary => vec![0],
            Source::Reserved => (700..800).collect(),
        };
        let bound = ports.iter().any(|&p| socket.bind(&SocketAddr::from(([127, 0, 0, 1], p)).into()).is_ok());
        assert!(bound, "no source port for {from:?}");
        let local = socket.local_addr().unwrap().as_socket().unwrap();
        assert_eq!(local.port() < 1024, from == Source::Reserved, "source port {local}");
        socket.connect(&SocketAddr::from(([127, 0, 0, 1], 111)).into()).expect("connect to port 111");
        let reply = if udp {
            let udp: std::net::UdpSocket = socket.into();
            udp.send(&record[4..]).unwrap(); // no record mark on UDP
            let mut buf = vec![0u8; 9000];
            let n = udp.recv(&mut buf).expect("portmap reply");
            buf.truncate(n);
            buf
        } else {
            let mut stream: std::net::TcpStream = socket.into();
            stream.write_all(&record).unwrap();
            let mut mark = [0u8; 4];
            stream.read_exact(&mut mark).expect("portmap reply");
            let mut buf = vec![0u8; (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize];
            stream.read_exact(&mut buf).expect("portmap reply");
            buf
        };
        let results = keel_client::reply_results(reply.into(), xid).expect("portmap call accepted");
        u32::from_be_bytes(results[..4].try_into().unwrap())
    })
    .join()
    .expect("portmap call thread")
}

/// `nfs-ls` of the export through the portmapper: no nfsport/mountport.
fn nfs_ls_via_portmap(ns: &Netns, export: &str) -> Output {
    ns.run(&["nfs-ls", &format!("nfs://127.0.0.1{export}")])
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// Nothing holds port 111: Keel (portmap "auto") serves portmap v2 there,
/// over TCP and UDP. rpcinfo lists NFS v3 and MOUNT v3 on Keel's port and
/// the portmapper itself; libnfs finds the server with no port given.
/// After SIGTERM nothing answers on 111 any more.
#[test]
fn keel_serves_portmap_v2_when_port_111_is_free() {
    let ns = Netns::new("pm");
    let site = Site::new("pm-serve");
    let mut keel = site.keel(&ns, "auto", NFS_PORT);
    keel.wait_serving();
    assert!(keel.log_text().contains("serving portmap on port 111"), "{}", keel.log_text());

    let rows = rpcinfo(&ns).unwrap_or_else(|| panic!("rpcinfo -p failed; keel log:\n{}", keel.log_text()));
    for (prog, vers, proto, port) in [
        (100_003, 3, "tcp", NFS_PORT),
        (100_005, 3, "tcp", NFS_PORT),
        (100_000, 2, "tcp", 111),
        (100_000, 2, "udp", 111),
    ] {
        assert!(has(&rows, prog, vers, proto, port), "rpcinfo -p lacks {prog} v{vers} {proto} {port}: {rows:?}");
    }
    // The UDP side answers calls, and GETPORT finds NFS for rpcinfo -t.
    let udp = ns.run(&["rpcinfo", "-u", "127.0.0.1", "100000", "2"]);
    assert!(udp.status.success() && udp.stdout.contains("ready and waiting"), "{}", udp.text());
    let nfs = ns.run(&["rpcinfo", "-t", "127.0.0.1", "100003", "3"]);
    assert!(nfs.status.success() && nfs.stdout.contains("ready and waiting"), "{}", nfs.text());

    let ls = nfs_ls_via_portmap(&ns, &site.export());
    assert!(ls.status.success() && ls.stdout.contains("marker.txt"), "nfs-ls via portmap:\n{}", ls.text());

    let status = keel.sigterm();
    assert!(status.success(), "exit status {status}");
    assert!(rpcinfo(&ns).is_none(), "something still answers on port 111 after keel stopped");
}

/// portmap "register" with no rpcbind to register with: Keel refuses to
/// start and says why.
#[test]
fn register_mode_without_rpcbind_refuses_to_start() {
    let ns = Netns::new("pm");
    let site = Site::new("pm-noreg");
    let mut keel = site.keel(&ns, "register", NFS_PORT);
    let status = keel.wait_exit(Duration::from_secs(20)).expect("keel kept running without rpcbind");
    assert!(!status.success());
    assert!(keel.log_text().contains("cannot register with rpcbind"), "{}", keel.log_text());
}

/// rpcbind holds port 111: Keel (portmap "auto") registers NFS v3 and
/// MOUNT v3 with it (and says so), libnfs finds Keel through rpcbind, and
/// at SIGTERM Keel takes its registrations back. A Keel killed with -9
/// leaves a stale registration, which the next start replaces; portmap
/// "serve" cannot have port 111 and refuses to start.
#[test]
fn keel_registers_with_the_running_rpcbind_and_unregisters_at_stop() {
    let ns = Netns::new("pm");
    let site = Site::new("pm-register");
    let _rpcbind = start_rpcbind(&ns, site.dir.path());

    let mut keel = site.keel(&ns, "auto", NFS_PORT);
    keel.wait_serving();
    assert!(keel.log_text().contains("registered NFS and MOUNT with the running rpcbind"), "{}", keel.log_text());
    let rows = rpcinfo(&ns).expect("rpcbind answers");
    assert!(has(&rows, 100_003, 3, "tcp", NFS_PORT), "NFS not registered: {rows:?}");
    assert!(has(&rows, 100_005, 3, "tcp", NFS_PORT), "MOUNT not registered: {rows:?}");
    let ls = nfs_ls_via_portmap(&ns, &site.export());
    assert!(ls.status.success() && ls.stdout.contains("marker.txt"), "nfs-ls via rpcbind:\n{}", ls.text());

    let status = keel.sigterm();
    assert!(status.success(), "exit status {status}");
    let rows = rpcinfo(&ns).expect("rpcbind still answers");
    assert!(!lists_program(&rows, 100_003), "NFS still registered after keel stopped: {rows:?}");
    assert!(!lists_program(&rows, 100_005), "MOUNT still registered after keel stopped: {rows:?}");
    assert!(has(&rows, 100_000, 2, "tcp", 111));

    // kill -9 cannot unregister; the next start (another port) replaces
    // the stale entries.
    let mut killed = site.keel(&ns, "register", NFS_PORT);
    killed.wait_serving();
    killed.signal(libc::SIGKILL);
    killed.wait_exit(Duration::from_secs(10)).expect("killed");
    let rows = rpcinfo(&ns).unwrap();
    assert!(has(&rows, 100_003, 3, "tcp", NFS_PORT), "expected the stale entry: {rows:?}");
    let mut next = site.keel(&ns, "register", NFS_PORT + 1);
    next.wait_serving();
    let rows = rpcinfo(&ns).unwrap();
    assert!(has(&rows, 100_003, 3, "tcp", NFS_PORT + 1), "not re-registered: {rows:?}");
    assert!(!has(&rows, 100_003, 3, "tcp", NFS_PORT), "stale entry kept: {rows:?}");
    let ls = nfs_ls_via_portmap(&ns, &site.export());
    assert!(ls.status.success() && ls.stdout.contains("marker.txt"), "nfs-ls after re-registering:\n{}", ls.text());
    assert!(next.sigterm().success());

    // "serve" needs port 111, which rpcbind holds.
    let mut serve = site.keel(&ns, "serve", NFS_PORT);
    let status = serve.wait_exit(Duration::from_secs(20)).expect("portmap serve started although 111 is taken");
    assert!(!status.success());
    assert!(serve.log_text().contains("cannot serve portmap on port 111"), "{}", serve.log_text());
    let rows = rpcinfo(&ns).unwrap();
    assert!(!lists_program(&rows, 100_003), "a failed start left a registration: {rows:?}");
}

/// PMAPPROC_SET and UNSET change where clients are sent, so only a local
/// service running as root may call them (rpcbind's rule): from a loopback
/// address and a reserved port. From an ordinary port, over UDP and TCP,
/// both are answered `false` and the mapping stays; from a reserved port
/// they work.
#[test]
fn set_and_unset_are_refused_unless_from_a_privileged_local_port() {
    let ns = Netns::new("pm");
    let site = Site::new("pm-set");
    let mut keel = site.keel(&ns, "auto", NFS_PORT);
    keel.wait_serving();
    let nfs = Mapping { prog: NFS_PROGRAM, vers: NFS_V3, prot: IPPROTO_TCP, port: u32::from(NFS_PORT) };
    let evil = Mapping { port: 31337, ..nfs };
    let getport = |udp| pmap_call(&ns, udp, Source::Ordinary, PmapProc::Getport, nfs);

    for udp in [true, false] {
        let how = if udp { "UDP" } else { "TCP" };
        assert_eq!(pmap_call(&ns, udp, Source::Ordinary, PmapProc::Unset, nfs), 0, "UNSET over {how}, ordinary port");
        assert_eq!(pmap_call(&ns, udp, Source::Ordinary, PmapProc::Set, evil), 0, "SET over {how}, ordinary port");
        assert_eq!(getport(udp), u32::from(NFS_PORT), "the mapping changed over {how} from an ordinary port");
    }
    let rows = rpcinfo(&ns).expect("rpcinfo -p");
    assert!(has(&rows, 100_003, 3, "tcp", NFS_PORT), "rpcinfo -p: {rows:?}");
    assert!(keel.log_text().contains("portmap UNSET refused"), "{}", keel.log_text());

    for udp in [true, false] {
        let how = if udp { "UDP" } else { "TCP" };
        assert_eq!(pmap_call(&ns, udp, Source::Reserved, PmapProc::Unset, nfs), 1, "UNSET over {how}, reserved port");
        assert_eq!(getport(udp), 0, "UNSET over {how} from a reserved port");
        assert_eq!(pmap_call(&ns, udp, Source::Reserved, PmapProc::Set, nfs), 1, "SET over {how}, reserved port");
        assert_eq!(getport(udp), u32::from(NFS_PORT), "SET over {how} from a reserved port");
    }
    let ls = nfs_ls_via_portmap(&ns, &site.export());
    assert!(ls.status.success() && ls.stdout.contains("marker.txt"), "nfs-ls via portmap:\n{}", ls.text());
    assert!(keel.sigterm().success());
}

/// Where any user may bind ports below 1024 (containers often set
/// net.ipv4.ip_unprivileged_port_start to 0), `secure` proves nothing, and
/// Keel says so when it starts.
#[test]
fn keel_warns_when_ordinary_users_may_bind_reserved_ports() {
    let ns = Netns::new("pm");
    ns.run_ok(&["sysctl", "-q", "-w", "net.ipv4.ip_unprivileged_port_start=0"]);
    let site = Site::new("pm-unpriv");
    let mut keel = site.keel(&ns, "off", NFS_PORT);
    keel.wait_serving();
    let log = keel.log_text();
    assert!(log.contains("ip_unprivileged_port_start is 0") && log.contains("`secure`"), "no warning:\n{log}");
    assert!(keel.sigterm().success());

    // With the usual 1024 there is nothing to warn about.
    let ns = Netns::new("pm");
    ns.run_ok(&["sysctl", "-q", "-w", "net.ipv4.ip_unprivileged_port_start=1024"]);
    let mut keel = site.keel(&ns, "off", NFS_PORT + 1);
    keel.wait_serving();
    assert!(!keel.log_text().contains("ip_unprivileged_port_start"), "{}", keel.log_text());
    assert!(keel.sigterm().success());
}

//! Portmapper version 2: a client that asks port 111 finds NFS and MOUNT,
//! whether Keel serves port 111 itself (nothing else holds it) or registers
//! with the rpcbind that does.
//!
//! Port 111 is one per network stack, so each test makes its own network
//! namespace (`ip netns add`), runs Keel, rpcbind and the independent
//! clients (`rpcinfo` from Debian's rpcbind, libnfs's `nfs-ls`) inside it,
//! and deletes it afterwards. rpcbind also gets a private /run (its lock
//! file and socket live there), so it never meets the host's own rpcbind.

mod common;
mod procs;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use procs::{Output, TempDir, run_timeout, wait_for, wait_timeout};

const KEEL: &str = env!("CARGO_BIN_EXE_keel");
const CMD_TIMEOUT: Duration = Duration::from_secs(30);
/// Inside a namespace of its own, Keel can have the standard port.
const NFS_PORT: u16 = 2049;

// ---------------------------------------------------------------------------
// Namespaces and processes in them
// ---------------------------------------------------------------------------

/// A network namespace with loopback up; deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn new() -> Self {
        common::require_root();
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!("keel-pm-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        let _ = Command::new("ip").args(["netns", "del", &name]).stderr(Stdio::null()).status();
        procs::run_ok(Command::new("ip").args(["netns", "add", &name]), CMD_TIMEOUT);
        let ns = Netns { name };
        procs::run_ok(&mut ns.cmd(&["ip", "link", "set", "lo", "up"]), CMD_TIMEOUT);
        ns
    }

    /// `argv` to run inside the namespace.
    fn cmd(&self, argv: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).args(argv);
        c
    }

    fn run(&self, argv: &[&str]) -> Output {
        run_timeout(&mut self.cmd(argv), CMD_TIMEOUT)
    }

    /// `rpcinfo -p 127.0.0.1` as (program, version, protocol, port) rows;
    /// None if the portmapper does not answer.
    fn rpcinfo(&self) -> Option<Vec<(u32, u32, String, u16)>> {
        let out = self.run(&["rpcinfo", "-p", "127.0.0.1"]);
        if !out.status.success() {
            return None;
        }
        let rows = out
            .stdout
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some((
                    f.first()?.parse().ok()?,
                    f.get(1)?.parse().ok()?,
                    f.get(2)?.to_string(),
                    f.get(3)?.parse().ok()?,
                ))
            })
            .collect();
        Some(rows)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
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
            if self.stdout.lock().unwrap().contains(" serving NFSv3 on ") {
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
    let up = wait_for(Duration::from_secs(10), || ns.rpcinfo());
    let rows = up.unwrap_or_else(|| panic!("rpcbind did not answer; its log:\n{}", child.log_text()));
    assert!(has(&rows, 100_000, 2, "tcp", 111), "rpcbind does not list itself: {rows:?}");
    child
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
    let ns = Netns::new();
    let site = Site::new("pm-serve");
    let mut keel = site.keel(&ns, "auto", NFS_PORT);
    keel.wait_serving();
    assert!(keel.log_text().contains("serving portmap on port 111"), "{}", keel.log_text());

    let rows = ns.rpcinfo().unwrap_or_else(|| panic!("rpcinfo -p failed; keel log:\n{}", keel.log_text()));
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
    assert!(ns.rpcinfo().is_none(), "something still answers on port 111 after keel stopped");
}

/// portmap "register" with no rpcbind to register with: Keel refuses to
/// start and says why.
#[test]
fn register_mode_without_rpcbind_refuses_to_start() {
    let ns = Netns::new();
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
    let ns = Netns::new();
    let site = Site::new("pm-register");
    let _rpcbind = start_rpcbind(&ns, site.dir.path());

    let mut keel = site.keel(&ns, "auto", NFS_PORT);
    keel.wait_serving();
    assert!(keel.log_text().contains("registered NFS and MOUNT with the running rpcbind"), "{}", keel.log_text());
    let rows = ns.rpcinfo().expect("rpcbind answers");
    assert!(has(&rows, 100_003, 3, "tcp", NFS_PORT), "NFS not registered: {rows:?}");
    assert!(has(&rows, 100_005, 3, "tcp", NFS_PORT), "MOUNT not registered: {rows:?}");
    let ls = nfs_ls_via_portmap(&ns, &site.export());
    assert!(ls.status.success() && ls.stdout.contains("marker.txt"), "nfs-ls via rpcbind:\n{}", ls.text());

    let status = keel.sigterm();
    assert!(status.success(), "exit status {status}");
    let rows = ns.rpcinfo().expect("rpcbind still answers");
    assert!(!lists_program(&rows, 100_003), "NFS still registered after keel stopped: {rows:?}");
    assert!(!lists_program(&rows, 100_005), "MOUNT still registered after keel stopped: {rows:?}");
    assert!(has(&rows, 100_000, 2, "tcp", 111));

    // kill -9 cannot unregister; the next start (another port) replaces
    // the stale entries.
    let mut killed = site.keel(&ns, "register", NFS_PORT);
    killed.wait_serving();
    killed.signal(libc::SIGKILL);
    killed.wait_exit(Duration::from_secs(10)).expect("killed");
    let rows = ns.rpcinfo().unwrap();
    assert!(has(&rows, 100_003, 3, "tcp", NFS_PORT), "expected the stale entry: {rows:?}");
    let mut next = site.keel(&ns, "register", NFS_PORT + 1);
    next.wait_serving();
    let rows = ns.rpcinfo().unwrap();
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
    let rows = ns.rpcinfo().unwrap();
    assert!(!lists_program(&rows, 100_003), "a failed start left a registration: {rows:?}");
}

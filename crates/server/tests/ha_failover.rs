//! Keel failing over for real: two Pacemaker/Corosync nodes in namespaces
//! (keel_testkit::ha), configured by `keel ha init` and the OCF agent,
//! serving an export on the shared disk at the floating address, while
//! the Linux kernel client (a VM on the public bridge) writes and fsyncs,
//! a client in its own namespace writes with `keel verify`, and a prober
//! makes a FILE_SYNC WRITE every 50 ms. For each fault: the time from the
//! fault to Keel started on the other node, the client-visible
//! interruption (the prober's and the kernel client's longest wait
//! between two writes), `keel verify check` (every acknowledged byte is
//! there) and the kernel client's data read back and on the disk. And
//! active/active: two services, one preferring each node, both on one
//! node after the other crashes, one given back when it returns. With an
//! NFSv4.1 kernel client (`*_nfs41`, or every case with
//! KEEL_HA_KERNEL_VERS=4.1), whose writer holds a POSIX lock through the
//! fault, a second client must never get that lock. Root only; skipped
//! where Pacemaker is not installed.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_testkit::ha::{self, CLIENT_IP, FLOATING_IP, FLOATING_IP2, HaConfig, HaLab, Node, Switch};
use keel_testkit::nfs::{Nfs, RpcConn};
use keel_testkit::procs::run_timeout;
use keel_testkit::server::keel_bin;
use nfs3_types::nfs3::stable_how;

static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());
const AGENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../contrib/ocf/keel");
/// Where Pacemaker looks for ocf:keel:keel (the keel package installs it
/// there; the nodes see the host's /usr).
const AGENT_INSTALLED: &str = "/usr/lib/ocf/resource.d/keel/keel";
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(60);
const RUN_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/kernel-nfs-client/run.sh");
const FAILOVER_WRITER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernel/failover_writer.sh");
/// The guest's lock-holding writer for the NFSv4.1 cases.
const V4LOCK_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernel/v4lock.c");
/// The kernel client VM's address on the public network.
const KERNEL_CLIENT_IP: &str = "10.77.1.20";
/// Corosync's token timeout in the plan (KEEL_HA_TOKEN_MS overrides it).
const TOKEN_MS: u32 = 1000;

/// One `[[service]]` of the plan: a Pacemaker group serving one export
/// from its own shared disk at its own floating address.
#[derive(Clone, Copy, Debug)]
struct Service {
    /// The group's name, and the Keel configuration's (/etc/keel/NAME.toml).
    group: &'static str,
    ip: &'static str,
    disk: &'static str,
    /// Where the group mounts the disk (Keel's state is in `.keel` there).
    mount: &'static str,
    /// What clients mount: `keel ha init`'s default `export` under `mount`.
    export: &'static str,
    /// Where it runs when both nodes are up.
    prefer: Node,
}

/// The service of every case; active/active's first.
const NFS: Service = Service {
    group: "nfs",
    ip: FLOATING_IP,
    disk: ha::SHARED_DISK,
    mount: "/srv/keel",
    export: "/srv/keel/export",
    prefer: Node::A,
};
/// Active/active's second, preferring B.
const NFS2: Service = Service {
    group: "nfs2",
    ip: FLOATING_IP2,
    disk: ha::SHARED_DISK2,
    mount: "/srv/keel2",
    export: "/srv/keel2/export",
    prefer: Node::B,
};
const GROUP: &str = NFS.group;

fn skip() -> bool {
    match ha::unavailable() {
        Some(why) => {
            eprintln!("skipped: {why}");
            true
        }
        None => false,
    }
}

/// The plan `keel ha init` turns into the cluster's configuration: the
/// lab's nodes, its two emulated power switches as fence levels 1 and 2
/// (with the plan's default fence_action, off: fenced nodes stay off until
/// the test powers them on), and `services`, each with its shared disk
/// and floating address.
fn plan(services: &[Service]) -> String {
    // KEEL_HA_HEARTBEAT2 (bench/ha.sh --heartbeat2): a second Corosync
    // link, on the public network.
    let second_link = std::env::var_os("KEEL_HA_HEARTBEAT2").is_some();
    let node = |n: Node| {
        let heartbeat2 = if second_link { format!("heartbeat2 = \"{}\"\n", n.public_ip()) } else { String::new() };
        format!(
            "[[node]]\nname = \"{}\"\nheartbeat = \"{}\"\n{heartbeat2}fence = [\n  \
             {{ agent = \"fence_keel_lab\", params = {{ switch = \"ipmi\" }} }},\n  \
             {{ agent = \"fence_keel_lab\", params = {{ switch = \"pdu\" }} }},\n]\n\n",
            n.name(),
            n.heartbeat_ip()
        )
    };
    let service = |s: &Service| {
        format!(
            "[[service]]\nname = \"{}\"\naddress = \"{}/24\"\nnic = \"{}\"\ndevice = \"{}\"\nmount = \"{}\"\n\
             prefer = \"{}\"\n\n",
            s.group,
            s.ip,
            ha::PUBLIC_NIC,
            s.disk,
            s.mount,
            s.prefer.name()
        )
    };
    // bench/ha.sh sets the token and consensus timeouts, the knobs that
    // set a crash's failover, and the fencing delay.
    let token_ms: u32 = std::env::var("KEEL_HA_TOKEN_MS").ok().and_then(|t| t.parse().ok()).unwrap_or(TOKEN_MS);
    let consensus = match std::env::var("KEEL_HA_CONSENSUS_MS") {
        Ok(ms) => format!("consensus_ms = {ms}\n"),
        Err(_) => String::new(),
    };
    // And the fencing delay that settles a race, which adds to it.
    let consensus = match std::env::var("KEEL_HA_PRIORITY_FENCING_DELAY") {
        Ok(s) => format!("{consensus}priority_fencing_delay_seconds = {s}\n"),
        Err(_) => consensus,
    };
    format!(
        "token_ms = {token_ms}\n{consensus}monitor_seconds = 2\nping = [\"{CLIENT_IP}\"]\nkeel_binary = \"{}\"\n\n{}{}{}",
        keel_bin().display(),
        node(Node::A),
        node(Node::B),
        services.iter().map(service).collect::<String>()
    )
}

/// A lab serving the export from A, configured the way an administrator
/// would: `keel ha init`, the files it writes, `crm configure load`.
fn lab_serving_from_a() -> (HaLab, PathBuf) {
    lab_serving_from_a_with(|config| config)
}

/// Like `lab_serving_from_a`, with the generated Keel configuration edited.
fn lab_serving_from_a_with(edit: impl Fn(String) -> String) -> (HaLab, PathBuf) {
    let (lab, mut configs) = lab_serving(&[NFS], edit);
    (lab, configs.remove(0))
}

/// A lab serving each of `services` from its preferred node (waits for
/// all), configured by `keel ha init`; the Keel configurations it wrote
/// in /etc/keel, each edited by `edit`.
fn lab_serving(services: &[Service], edit: impl Fn(String) -> String) -> (HaLab, Vec<PathBuf>) {
    lab_serving_prepared(services, edit, &|_| {})
}

/// Like `lab_serving`, with `prepare` run once the cluster is up, before
/// any service starts.
fn lab_serving_prepared(
    services: &[Service],
    edit: impl Fn(String) -> String,
    prepare: &dyn Fn(&HaLab),
) -> (HaLab, Vec<PathBuf>) {
    std::fs::create_dir_all(Path::new(AGENT_INSTALLED).parent().unwrap()).unwrap();
    std::fs::copy(AGENT, AGENT_INSTALLED).unwrap();
    let init_dir = keel_testkit::procs::TempDir::new("keel-ha-init");
    let plan_file = init_dir.path().join("keel-ha.toml");
    std::fs::write(&plan_file, plan(services)).unwrap();
    let out = init_dir.path().join("written");
    let init = run_timeout(
        Command::new(keel_bin()).args(["ha", "init"]).arg(&plan_file).arg("--out").arg(&out),
        Duration::from_secs(30),
    );
    assert!(init.status.success(), "{init:?}");
    assert!(init.stdout.contains("crm configure load update"), "{init:?}");
    // Corosync runs on the corosync.conf `keel ha init` wrote.
    let corosync = std::fs::read_to_string(out.join("corosync.conf")).unwrap();
    let lab = HaLab::start(HaConfig { corosync_conf: Some(corosync), ..HaConfig::default() });
    prepare(&lab);
    // /etc/keel is the host's, seen by both nodes, as it would be copied.
    std::fs::create_dir_all("/etc/keel").unwrap();
    let mut configs = Vec::new();
    for s in services {
        let config = PathBuf::from(format!("/etc/keel/{}.toml", s.group));
        let generated = std::fs::read_to_string(out.join(format!("{}.toml", s.group))).unwrap();
        std::fs::write(&config, edit(generated)).unwrap();
        configs.push(config);
    }
    // The export's directory, made as `keel ha init` says to, once.
    for s in services {
        let line = init.stdout.lines().find(|l| l.starts_with("mount ") && l.contains(s.export));
        let line = line.unwrap_or_else(|| panic!("no command makes {}: {init:?}", s.export));
        let made = lab.sh(s.prefer, &format!("mkdir -p {} && {line}", s.mount));
        assert!(made.status.success(), "{line}: {made:?}");
    }
    let crm = std::fs::read_to_string(out.join("cluster.crm")).unwrap();
    assert!(crm.contains("stonith-enabled=true stonith-action=off"), "{crm}");
    // crmsh checks every operation's timeout against what its agent
    // advises, and more: what `keel ha init` writes draws no warning.
    let loaded = lab.configure(Node::A, &crm);
    assert!(
        !loaded.stdout.contains("WARNING") && !loaded.stderr.contains("WARNING"),
        "crm configure load warned:\n{}{}",
        loaded.stdout,
        loaded.stderr
    );
    for s in services {
        lab.wait_until_running_on(s.group, s.prefer, FAILOVER_TIMEOUT);
        // The generated export squashes root (as exports(5)): a directory
        // everyone may write, as an administrator would set up.
        lab.run_ok(s.prefer, &["chmod", "1777", s.export]);
    }
    (lab, configs)
}

/// Runs `f` on a thread inside the client's network namespace.
fn in_client_netns<T: Send + 'static>(
    lab: &HaLab,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let netns = std::fs::File::open(lab.client().path()).unwrap();
    std::thread::spawn(move || {
        // SAFETY: setns on this thread only (network namespaces are per thread).
        let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&netns), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns");
        f()
    })
}

/// A FILE_SYNC WRITE of 4 KiB every 50 ms to one file of `service`'s
/// export, reconnecting after any error, until it has written once after
/// `stop` was set (so that the last outage ends within what it records):
/// the times of the writes that succeeded.
fn prober(lab: &HaLab, service: Service, stop: Stop) -> std::thread::JoinHandle<Vec<Instant>> {
    let addr: std::net::SocketAddr = format!("{}:2049", service.ip).parse().unwrap();
    in_client_netns(lab, move || {
        let mut nfs = Nfs::connect(addr).expect("first connection");
        let root = nfs.mount(service.export).expect("MNT");
        // A new file each time (a case may probe a service more than once).
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let name = format!("prober-{}", N.fetch_add(1, Ordering::SeqCst));
        let fh = nfs.create_new(&root, &name).expect("CREATE");
        let mut conn = Some(nfs.conn);
        let mut ok = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut offset = 0u64;
        while !stop.reached(ok.last()) && Instant::now() < deadline {
            let c = match conn.take() {
                Some(c) => Some(c),
                None => reconnect(addr),
            };
            if let Some(mut c) = c {
                let mut nfs = Nfs { conn: c };
                let sent = nfs.send_write(&fh, offset, &[7u8; 4096], stable_how::FILE_SYNC).is_ok();
                match sent.then(|| nfs.recv_write()) {
                    Some(Ok((_, Ok(_)))) => {
                        ok.push(Instant::now());
                        offset += 4096;
                        c = nfs.conn;
                        conn = Some(c);
                    }
                    // An error status (say, JUKEBOX) keeps the connection.
                    Some(Ok((_, Err(_)))) => conn = Some(nfs.conn),
                    _ => {}
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        ok
    })
}

/// When probers stop: at their first write after it is set, or 10 s
/// after it if none succeeds (an async export's crash loses the prober's
/// file: every write then fails).
#[derive(Clone, Default)]
struct Stop(Arc<Mutex<Option<Instant>>>);

impl Stop {
    fn set(&self) {
        *self.0.lock().unwrap() = Some(Instant::now());
    }

    /// Whether a prober whose last successful write was `last` is done.
    fn reached(&self, last: Option<&Instant>) -> bool {
        match *self.0.lock().unwrap() {
            Some(at) => last.is_some_and(|l| *l >= at) || at.elapsed() > Duration::from_secs(10),
            None => false,
        }
    }
}

/// A new connection from a reserved port with short timeouts, or None.
fn reconnect(addr: std::net::SocketAddr) -> Option<RpcConn> {
    use socket2::{Domain, Socket, Type};
    for port in 600..1000u16 {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).ok()?;
        socket.set_reuse_address(true).ok()?;
        if socket.bind(&std::net::SocketAddr::from(([0, 0, 0, 0], port)).into()).is_err() {
            continue;
        }
        socket.connect_timeout(&addr.into(), Duration::from_millis(500)).ok()?;
        let stream: std::net::TcpStream = socket.into();
        let conn = RpcConn::from_stream(stream).ok()?;
        conn.stream().set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        return Some(conn);
    }
    None
}

/// The longest wait between two successful writes from the last one
/// before `fault` on: the outage may begin well after the fault (a node
/// cut off from the heartbeat serves until it is fenced).
/// None if it never wrote again.
fn interruption(ok: &[Instant], fault: Instant) -> Option<Duration> {
    longest_gap(ok, fault).map(|g| g.length)
}

/// A prober's longest wait between two writes (see `interruption`).
#[derive(Clone, Copy, Debug)]
struct Gap {
    length: Duration,
    /// From the fault to its last write before the gap (zero: before the
    /// fault), to find its cause in the logs.
    after_fault: Duration,
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.after_fault.is_zero() {
            write!(f, "{:.1?} (from the fault)", self.length)
        } else {
            write!(f, "{:.1?} (from +{:.1?})", self.length, self.after_fault)
        }
    }
}

fn longest_gap(ok: &[Instant], fault: Instant) -> Option<Gap> {
    let first = ok.iter().rposition(|t| *t <= fault).unwrap_or(0);
    ok.last().filter(|t| **t > fault)?;
    let w = ok[first..].windows(2).max_by_key(|w| w[1] - w[0])?;
    Some(Gap { length: w[1] - w[0], after_fault: w[0].saturating_duration_since(fault) })
}

/// `keel verify` from the client's namespace.
fn verify(lab: &HaLab, args: &[&str]) -> Command {
    let mut cmd = lab.client().cmd(&[keel_bin().to_str().unwrap(), "verify"]);
    cmd.args(args);
    cmd
}

/// `keel verify write` to `service`'s export, riding out failovers, its
/// record in `journal`, its files in a directory named after the journal
/// (so that a later writer does not overwrite them).
fn start_writer(lab: &HaLab, service: Service, journal: &Path, size: &str) -> std::process::Child {
    let dir = journal.file_stem().unwrap().to_str().unwrap();
    verify(lab, &["write", "--server", service.ip, "--export", service.export, "--dir", dir])
        .args(["--clients", "2", "--size", size, "--block", "64K", "--in-flight", "2", "--timeout", "5s"])
        .args(["--retry-for", "120s", "--quiet", "--force", "--journal"])
        .arg(journal)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (bounded) for a writer of `start_writer`, which must succeed.
fn finish_writer(lab: &HaLab, what: &str, mut writer: std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(150);
    let status = loop {
        if let Some(s) = writer.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = writer.kill();
            let _ = writer.wait();
            panic!("{what}: keel verify write did not finish\n{}", lab.diagnostics());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = writer.wait_with_output().unwrap();
    assert!(
        status.success(),
        "{what}: keel verify write: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `keel verify check` of a writer's journal.
fn check_journal(lab: &HaLab, journal: &Path) -> keel_testkit::procs::Output {
    run_timeout(verify(lab, &["check", "--retry-for", "60s", "--journal"]).arg(journal), FAILOVER_TIMEOUT)
}

/// The Linux kernel client: a VM on the public network (the harness's
/// `--tap`) that mounts `service` through its floating address and runs
/// `tests/kernel/failover_writer.sh` in a directory of its own.
struct KernelClient {
    child: std::process::Child,
    /// The guest's console lines, as they come.
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
    service: Service,
    dir: String,
    vers: KernelVers,
    /// Where run.sh makes the guest's files: Drop kills it (SIGKILL: its
    /// own cleanup never runs) and removes them.
    work_dir: PathBuf,
}

/// What the kernel client mounts and does in the failure table's cases.
#[derive(Clone, Copy, PartialEq, Debug)]
enum KernelVers {
    /// NFSv3, writing with `dd ... conv=fsync`.
    V3,
    /// NFSv4.1, writing with fsync from one process that holds a POSIX
    /// lock on the file through the fault (`v4lock lockwrite`): it must
    /// reclaim the lock from the new node and carry on.
    V41,
}

impl KernelVers {
    /// The version of the table's cases: KEEL_HA_KERNEL_VERS ("3", the
    /// default, or "4.1": `bench/ha.sh --vers 4.1`).
    fn from_env() -> KernelVers {
        match std::env::var("KEEL_HA_KERNEL_VERS").as_deref() {
            Ok("4.1") => KernelVers::V41,
            Ok("3") | Err(_) => KernelVers::V3,
            Ok(other) => panic!("KEEL_HA_KERNEL_VERS={other}: 3 or 4.1"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            KernelVers::V3 => "NFSv3",
            KernelVers::V41 => "NFSv4.1",
        }
    }
}

impl Drop for KernelClient {
    fn drop(&mut self) {
        // SAFETY: a signal to the process group the child leads.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.work_dir);
    }
}

/// What a lock prober's LOCK call got: None when no answer came (the
/// service moving).
type LockTry = (Instant, Option<keel_nlm_proto::nlm4::Nlm4Stats>);

/// A second locker, another client: from the client's namespace, NLM LOCK
/// calls (not blocking, exclusive, the whole file) on `fh` every 200 ms,
/// through the floating address, until `stop` and an answer after it
/// (bounded). A lock it is granted is given back at once (and the test
/// fails on it). Every call and its answer.
fn lock_prober(lab: &HaLab, fh: Vec<u8>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<LockTry>> {
    use keel_nlm_proto::nlm4::{
        NLM_PROGRAM, NLM_V4, Nlm4Lock, Nlm4Lockargs, Nlm4Proc, Nlm4Res, Nlm4Stats, Nlm4Unlockargs,
    };
    use keel_rpc_client::{Proc, Retry, bind_from, call};
    use keel_xdr::{Decode, Decoder, Opaque};
    let fh = bytes::Bytes::from(fh);
    in_client_netns(lab, move || {
        let sock = bind_from(CLIENT_IP.parse().unwrap()).unwrap();
        let host = "lock-prober";
        let alock = Nlm4Lock {
            caller_name: Opaque(bytes::Bytes::from(host)),
            fh: Opaque(fh),
            oh: Opaque(bytes::Bytes::from(format!("{host}:1"))),
            svid: 1,
            l_offset: 0,
            l_len: 0,
        };
        let server: std::net::SocketAddr = format!("{FLOATING_IP}:2049").parse().unwrap();
        let proc_ = |p: Nlm4Proc| Proc { prog: NLM_PROGRAM, vers: NLM_V4, proc_: p as u32 };
        let retry = Retry { timeout: Duration::from_millis(500), tries: 1 };
        let mut tries = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(180);
        while Instant::now() < deadline {
            let stopping = stop.load(Ordering::Relaxed);
            let args = Nlm4Lockargs {
                cookie: "p".into(),
                block: false,
                exclusive: true,
                alock: alock.clone(),
                reclaim: false,
                state: 1,
            };
            let at = Instant::now();
            let stat = call(&sock, server, proc_(Nlm4Proc::Lock), &args, retry)
                .ok()
                .and_then(|res| Nlm4Res::decode(&mut Decoder::new(res)).ok())
                .map(|r| r.stat);
            if stat == Some(Nlm4Stats::Granted) {
                let unlock = Nlm4Unlockargs { cookie: "u".into(), alock: alock.clone() };
                let _ = call(
                    &sock,
                    server,
                    proc_(Nlm4Proc::Unlock),
                    &unlock,
                    Retry { timeout: Duration::from_secs(1), tries: 3 },
                );
            }
            tries.push((at, stat));
            if stopping && stat.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        tries
    })
}

/// What the second locker found through a fault.
#[derive(Clone, Copy, Debug)]
struct LockOutcome {
    /// From the fault to the new node's "grace period over" (None: the
    /// service did not move, so there was no grace period).
    grace_over: Option<Duration>,
    /// Its LOCK calls answered DENIED_GRACE_PERIOD, DENIED and GRANTED
    /// from the fault on.
    in_grace: usize,
    denied: usize,
    granted: usize,
}

/// The "grace period over" lines in the log of Keel on `node`.
fn grace_over_lines(lab: &HaLab, node: Node) -> Vec<String> {
    let log = std::fs::read_to_string(lab.log_dir(node).join(format!("keel/{GROUP}-keel.log"))).unwrap_or_default();
    log.lines().filter(|l| l.contains("grace period over")).map(str::to_string).collect()
}

/// When, from the fault, Keel on `node` logged lines that contain `what`
/// (from its `skip`th such line on).
fn logged_after(lab: &HaLab, node: Node, what: &str, skip: usize, fault_second: f64) -> Vec<Duration> {
    let log = std::fs::read_to_string(lab.log_dir(node).join(format!("keel/{GROUP}-keel.log"))).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains(what))
        .skip(skip)
        .map(|l| Duration::from_secs_f64((second_of_day(Some(l)) - fault_second).rem_euclid(86_400.0)))
        .collect()
}

/// Seconds since midnight UTC of a log line's timestamp
/// (`2026-11-27T12:57:39.414895Z ...`), or of now.
fn second_of_day(line: Option<&str>) -> f64 {
    match line {
        Some(l) => {
            let time =
                l.split_whitespace().next().and_then(|t| t.split_once('T')).map(|(_, t)| t.trim_end_matches('Z'));
            let hms: Vec<f64> = time.unwrap_or_default().split(':').filter_map(|f| f.parse().ok()).collect();
            assert_eq!(hms.len(), 3, "a timestamp in {l}");
            hms[0] * 3600.0 + hms[1] * 60.0 + hms[2]
        }
        None => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
            now.as_secs_f64() % 86_400.0
        }
    }
}

/// Seconds since midnight of a Pacemaker or Corosync log line
/// (`Nov 27 03:47:33.494 keel-ha-b ...`, the nodes' local time, UTC here),
/// if it has milliseconds.
fn cluster_second_of_day(line: &str) -> Option<f64> {
    let time = line.split_whitespace().nth(2)?;
    if !time.contains('.') {
        return None;
    }
    let hms: Vec<f64> = time.split(':').filter_map(|f| f.parse().ok()).collect();
    (hms.len() == 3).then(|| hms[0] * 3600.0 + hms[1] * 60.0 + hms[2])
}

/// Where a failover's time went, from B's logs: Corosync's, Pacemaker's
/// (controller, scheduler, fencer) and Keel's, each step's first line
/// within a minute after the fault, as seconds from the fault.
fn timeline(lab: &HaLab, fault_second: f64) -> String {
    let read = |f: String| std::fs::read_to_string(lab.log_dir(Node::B).join(f)).unwrap_or_default();
    let (corosync, pacemaker, keel) = (
        read("cluster/corosync.log".into()),
        read("pacemaker/pacemaker.log".into()),
        read(format!("keel/{GROUP}-keel.log")),
    );
    let kernel_peer = format!("connection opened peer={KERNEL_CLIENT_IP}:");
    let steps: [(&str, &str, &[&str]); 26] = [
        ("Corosync: token lost", &corosync, &["A processor failed"]),
        ("Corosync: new membership", &corosync, &["A new membership"]),
        ("controld: A lost", &pacemaker, &["pacemaker-controld", "Node keel-ha-a state is now lost"]),
        ("controld: election won", &pacemaker, &["election-DC won by local node"]),
        ("controld: joins done", &pacemaker, &["S_FINALIZE_JOIN -> S_POLICY_ENGINE"]),
        // Pacemaker then runs fewer actions at once (one, at worst).
        ("controld: throttled (high CPU load)", &pacemaker, &["High CPU load detected"]),
        // transition-delay (keel ha init's) ends.
        ("controld: transition delay over", &pacemaker, &["New Transition Timer just popped"]),
        ("scheduler: transition", &pacemaker, &["Calculated transition"]),
        ("controld: fencing requested", &pacemaker, &["Requesting fencing"]),
        ("fenced: level 1 asked", &pacemaker, &["Requesting that", "using fence-keel-ha-a-1"]),
        // priority-fencing-delay (keel ha init's): A served.
        ("fenced: delayed", &pacemaker, &["Delaying 'off' action targeting keel-ha-a"]),
        ("fenced: level 1 timed out", &pacemaker, &["Peer's 'off' action targeting keel-ha-a", "timed out"]),
        ("fenced: level 2 asked", &pacemaker, &["Requesting that", "using fence-keel-ha-a-2"]),
        ("fenced: A fenced", &pacemaker, &["Operation 'off' targeting keel-ha-a by keel-ha-b", "OK"]),
        ("Filesystem start", &pacemaker, &["Initiating start operation nfs-fs_start_0"]),
        ("Filesystem started", &pacemaker, &["Result of start operation for nfs-fs on keel-ha-b"]),
        ("keel start", &pacemaker, &["Initiating start operation nfs-keel_start_0"]),
        ("keel started", &pacemaker, &["Result of start operation for nfs-keel on keel-ha-b"]),
        ("keel: first monitor", &pacemaker, &["Initiating monitor operation nfs-keel_monitor_"]),
        // The agent's record of the start (keel-history) written to the
        // CIB: the controller drops the transition under way and computes
        // it again, transition-delay included.
        ("controld: transition aborted by keel's record", &pacemaker, &["aborted by", "keel-nfs-keel-"]),
        ("IPaddr2 start", &pacemaker, &["Initiating start operation nfs-ip_start_0"]),
        ("IPaddr2 started", &pacemaker, &["Result of start operation for nfs-ip on keel-ha-b"]),
        ("keel: tickles sent", &keel, &["sent tickle ACKs"]),
        ("keel: kernel client connected", &keel, &[&kernel_peer]),
        ("keel: grace period over", &keel, &["grace period over"]),
        ("keel: first line", &keel, &[" INFO "]),
    ];
    let mut found: Vec<(f64, &str)> = steps
        .iter()
        .filter_map(|(what, log, needles)| {
            log.lines()
                .filter(|l| needles.iter().all(|n| l.contains(n)))
                .filter_map(|l| {
                    let at = if std::ptr::eq(*log, keel.as_str()) {
                        Some(second_of_day(Some(l)))
                    } else {
                        cluster_second_of_day(l)
                    };
                    at.map(|at| (at - fault_second).rem_euclid(86_400.0))
                })
                .find(|d| *d < 60.0)
                .map(|d| (d, *what))
        })
        .collect();
    found.sort_by(|a, b| a.0.total_cmp(&b.0));
    found.iter().map(|(d, what)| format!("  +{d:.3} s  {what}\n")).collect()
}

/// What the kernel client saw.
struct KernelOutcome {
    /// Its longest wait between two completed (fsynced) writes.
    max_gap: Duration,
}

impl KernelClient {
    fn start(lab: &HaLab, service: Service, vers: KernelVers) -> KernelClient {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = format!("kclient-{}", N.fetch_add(1, Ordering::SeqCst));
        let script = lab.dir().join(format!("{dir}.sh"));
        std::fs::write(&script, std::fs::read_to_string(FAILOVER_WRITER).unwrap().replace("DIR", &dir)).unwrap();
        let tap = "kclient0";
        let ns = lab.public_tap(tap);
        let work_dir = lab.dir().join(format!("{dir}.run"));
        let mut cmd = ns.cmd(&[RUN_SH, "--tap", tap, "--ip", KERNEL_CLIENT_IP, "--server", service.ip]);
        cmd.args(["--hostname", "kclient", "--port", "2049", "--timeout", "400", "--export", service.export]);
        cmd.arg("--work-dir").arg(&work_dir);
        if vers == KernelVers::V41 {
            // With /opt/v4lock the guest's writer holds a lock.
            let v4lock = lab.dir().join("v4lock");
            if !v4lock.exists() {
                keel_testkit::procs::build_static_c(Path::new(V4LOCK_C), &v4lock);
            }
            cmd.args(["--vers", "4.1", "--file"]).arg(&v4lock);
        }
        let mut child = cmd
            .arg(&script)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A group of its own: Drop ends qemu too, not only run.sh.
            .process_group(0)
            .spawn()
            .expect("run.sh");
        let (tx, lines) = std::sync::mpsc::channel();
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        KernelClient { child, lines, seen: Vec::new(), service, dir, vers, work_dir }
    }

    /// The value of the guest's `RESULT key=value` line, waiting up to
    /// `timeout` for it.
    fn result(&mut self, key: &str, timeout: Duration) -> Option<String> {
        let prefix = format!("RESULT {key}=");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.seen.iter().find_map(|l| l.find(&prefix).map(|at| l[at + prefix.len()..].to_string()))
            {
                return Some(v.trim().to_string());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => return None,
            }
        }
    }

    /// Waits until the guest has booted, mounted and begun writing.
    fn wait_writing(&mut self) {
        if self.result("writing", Duration::from_secs(180)).is_none() {
            panic!("the kernel client did not start writing:\n{}", self.seen.join("\n"));
        }
        if self.vers == KernelVers::V41 {
            let mounted = self.seen.iter().find(|l| l.starts_with("KCLIENT-MOUNTED")).cloned().unwrap_or_default();
            assert!(mounted.contains("vers=4.1"), "the kernel client mounted with NFSv4.1: {mounted}");
            assert!(self.result("locked", Duration::ZERO).is_some(), "the kernel client holds its lock");
        }
    }

    /// The NFSv3 handle of the file the guest writes (and locks), looked
    /// up from the client's namespace.
    fn data_handle(&self, lab: &HaLab) -> Vec<u8> {
        let (export, dir) = (self.service.export, self.dir.clone());
        let addr: std::net::SocketAddr = format!("{}:2049", self.service.ip).parse().unwrap();
        in_client_netns(lab, move || {
            let mut nfs = Nfs::connect(addr).expect("connect");
            let root = nfs.mount(export).expect("MNT");
            let dir = nfs.lookup(&root, &dir).expect("LOOKUP of the guest's directory");
            nfs.lookup(&dir, "data").expect("LOOKUP of the guest's file")
        })
        .join()
        .unwrap()
    }

    /// Tells the guest to stop writing (through the file system of the
    /// node serving it now), waits for it to read everything back, and
    /// checks the server's copy too.
    fn finish(mut self, lab: &HaLab, what: &str) -> KernelOutcome {
        let node = lab.where_is(self.service.group).expect("the service runs somewhere");
        let dir = format!("{}/{}", self.service.export, self.dir);
        let told = lab.sh(node, &format!("echo stop > {dir}/control"));
        assert!(told.status.success(), "{what}: cannot tell the kernel client to stop: {told:?}");
        // Returns early if the guest ends without it (the console closes).
        let done = self.result("done", Duration::from_secs(180)).is_some();
        let error = self.result("error", Duration::ZERO);
        // Written through the whole fault, not done before it.
        let stopped = self.result("stopped", Duration::ZERO).is_some();
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        let console = self.seen.join("\n");
        assert!(done && error.is_none(), "{what}: the kernel client failed: {error:?}\n{console}");
        assert!(stopped, "{what}: the kernel client stopped writing before it was told to\n{console}");
        let gap: u64 = self.result("max_gap_cs", Duration::ZERO).and_then(|v| v.parse().ok()).unwrap();
        let bytes = self.result("bytes", Duration::ZERO).unwrap();
        let md5 = self.result("md5", Duration::ZERO).unwrap();
        // What the server's disk holds, read on the node serving it.
        let on_disk = lab.sh(node, &format!("head -c {bytes} {dir}/data | md5sum"));
        assert!(
            on_disk.stdout.starts_with(&md5),
            "{what}: the kernel client's data on the disk: {on_disk:?}, wrote {md5}"
        );
        KernelOutcome { max_gap: Duration::from_millis(gap * 10) }
    }
}

struct Outcome {
    /// Fault to Keel started on the other node (None: it did not move).
    failover: Option<Duration>,
    /// The prober's longest wait between two writes from the fault on
    /// (None: it never wrote again).
    interruption: Option<Duration>,
    /// The kernel client's longest wait between two writes, if it ran.
    kernel: Option<Duration>,
    /// With the NFSv4.1 kernel client: what a second locker found.
    lock: Option<LockOutcome>,
}

/// Who writes through a fault.
#[derive(Clone, Copy, PartialEq)]
enum Clients {
    /// `keel verify` and the prober.
    Own,
    /// Those and the Linux kernel client.
    WithKernel(KernelVers),
}

/// Where the service must be after the fault.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    /// On B, after A was fenced through this level's switch.
    FencedBy(Switch),
    /// On B, with A stopped cleanly, not fenced.
    MovedUnfenced,
    /// Still on A: fencing cannot happen and A is healthy.
    StaysOnA,
}

/// Writes with `keel verify`, the prober and the Linux kernel client,
/// injects `fault` once some data is acknowledged, waits for the service
/// where `expect` says, lets the writers finish and checks every
/// acknowledged byte.
fn fail_over(lab: &HaLab, what: &str, expect: Expect, vers: KernelVers, fault: &dyn Fn(&HaLab)) -> Outcome {
    let (outcome, check) = fail_over_checked(lab, what, expect, Clients::WithKernel(vers), fault);
    assert!(check.status.success(), "{what}: acknowledged data lost:\n{check:?}");
    assert!(outcome.interruption.is_some(), "{what}: the prober never wrote after the fault");
    outcome
}

/// `fail_over`, returning `keel verify check`'s answer instead of
/// requiring it to pass.
fn fail_over_checked(
    lab: &HaLab,
    what: &str,
    expect: Expect,
    clients: Clients,
    fault: &dyn Fn(&HaLab),
) -> (Outcome, keel_testkit::procs::Output) {
    let kernel = match clients {
        Clients::WithKernel(vers) => {
            let mut k = KernelClient::start(lab, NFS, vers);
            k.wait_writing();
            Some(k)
        }
        Clients::Own => None,
    };
    // The NFSv4.1 client's lock: a second client tries to take it from
    // before the fault to after the grace period.
    let lock_stop = Arc::new(AtomicBool::new(false));
    let locker = kernel
        .as_ref()
        .filter(|k| k.vers == KernelVers::V41)
        .map(|k| lock_prober(lab, k.data_handle(lab), lock_stop.clone()));
    let graces_before = grace_over_lines(lab, Node::B).len();
    let kernel_peer = format!("connection opened peer={KERNEL_CLIENT_IP}:");
    let log_b = |what: &str| logged_after(lab, Node::B, what, 0, 0.0).len();
    let (reconnects_before, tickles_before) = (log_b(&kernel_peer), log_b("sent tickle ACKs"));
    let journal = lab.dir().join(format!("{}.journal", what.replace(' ', "-")));
    let stop = Stop::default();
    let probe = prober(lab, NFS, stop.clone());
    let writer = start_writer(lab, NFS, &journal, "48M");
    std::thread::sleep(Duration::from_millis(1500));
    let fenced_before = lab.power_actions(Node::A).len();

    let t = Instant::now();
    // The fault by the clock of the nodes' logs.
    let fault_second = second_of_day(None);
    fault(lab);
    let failover = match expect {
        Expect::StaysOnA => {
            // Longer than the token, the consensus and a fencing attempt.
            std::thread::sleep(Duration::from_secs(12));
            assert_eq!(lab.where_is_seen_by(Node::A, GROUP), Some(Node::A), "{what}: the service stays on A");
            None
        }
        _ => Some(lab.wait_until_running_on(GROUP, Node::B, FAILOVER_TIMEOUT)),
    };

    finish_writer(lab, what, writer);
    stop.set();
    let ok = probe.join().unwrap();
    let check = check_journal(lab, &journal);
    let lock = locker.map(|locker| {
        // The new node's grace period ends once the guest has reclaimed
        // (it is the only client on record); the locker goes on until
        // an answer after that.
        let grace_over = failover.map(|_| {
            let deadline = Instant::now() + Duration::from_secs(90);
            let over = loop {
                if let Some(l) = grace_over_lines(lab, Node::B).get(graces_before) {
                    break l.clone();
                }
                assert!(Instant::now() < deadline, "{what}: no end of the grace period on B\n{}", lab.diagnostics());
                std::thread::sleep(Duration::from_millis(100));
            };
            eprintln!("{what}: on B: {over}");
            // What the kernel client's interruption is made of.
            let at = |what: &str, skip| {
                let times = logged_after(lab, Node::B, what, skip, fault_second);
                times.first().map_or("-".into(), |d| format!("+{d:.1?}"))
            };
            eprintln!(
                "{what}: on B: tickle ACKs sent {}, the kernel client connected {} after the fault",
                at("sent tickle ACKs", tickles_before),
                at(&kernel_peer, reconnects_before)
            );
            // Its connections on both nodes since the lab started (a
            // reconnection from a port an earlier one used may meet
            // what is left of that one).
            for node in Node::ALL {
                let log = std::fs::read_to_string(lab.log_dir(node).join(format!("keel/{GROUP}-keel.log")))
                    .unwrap_or_default();
                let peers: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains(&kernel_peer) || l.contains(&format!("closed peer={KERNEL_CLIENT_IP}:")))
                    .collect();
                eprintln!("{what}: the kernel client's connections on {}:\n{}", node.name(), peers.join("\n"));
            }
            Duration::from_secs_f64((second_of_day(Some(&over)) - fault_second).rem_euclid(86_400.0))
        });
        lock_stop.store(true, Ordering::Relaxed);
        let tries = locker.join().unwrap();
        (grace_over, tries)
    });
    // The guest's own account first: an error it saw explains the rest.
    let kernel = kernel.map(|k| k.finish(lab, what).max_gap);
    let lock = lock.map(|(grace_over, tries)| {
        use keel_nlm_proto::nlm4::Nlm4Stats;
        let after: Vec<_> = tries.iter().filter(|(at, _)| *at >= t).filter_map(|(_, s)| *s).collect();
        let count = |s: Nlm4Stats| after.iter().filter(|a| **a == s).count();
        let before: Vec<_> = tries.iter().filter(|(at, _)| *at < t).filter_map(|(_, s)| *s).collect();
        // An NFSv4.1 writer holds a write delegation and its lock locally:
        // the first NLM LOCK recalls the delegation and is told to come
        // back (DENIED_GRACE_PERIOD) until the client has sent its lock.
        let recalling = |s: &Nlm4Stats| *s == Nlm4Stats::DeniedGracePeriod;
        assert!(
            before.contains(&Nlm4Stats::Denied)
                && before.iter().skip_while(|s| recalling(s)).all(|s| *s == Nlm4Stats::Denied),
            "{what}: before the fault a second client's lock is denied: {before:?}"
        );
        let outcome = LockOutcome {
            grace_over,
            in_grace: count(Nlm4Stats::DeniedGracePeriod),
            denied: count(Nlm4Stats::Denied),
            granted: count(Nlm4Stats::Granted),
        };
        assert!(
            // (A node whose storage fails may answer FAILED: not a grant.)
            after.iter().all(|s| *s != Nlm4Stats::Granted),
            "{what}: the kernel client's lock was taken by a second client through the fault: {outcome:?} \
             {after:?}\n{}",
            lab.diagnostics()
        );
        assert_eq!(after.last(), Some(&Nlm4Stats::Denied), "{what}: after the grace period the lock is held");
        outcome
    });

    let fenced: Vec<_> =
        lab.power_actions(Node::A).into_iter().skip(fenced_before).filter(|e| e.action != "on").collect();
    match expect {
        Expect::FencedBy(switch) => {
            assert!(
                fenced.iter().any(|e| e.switch == switch && e.answered),
                "{what}: A fenced through {switch:?}: {fenced:?}"
            );
            // A level 1 that fails is tried once (pcmk_off_retries=1), not
            // once more before level 2: a dead BMC costs one timeout. (Its
            // switch may see no request at all: Pacemaker runs one action
            // per device at a time, and a monitor of the dead device that
            // holds it can outlast the level-1 timeout.)
            if switch == Switch::Pdu {
                let level2 = fenced.iter().position(|e| e.switch == Switch::Pdu).unwrap_or(fenced.len());
                let tries = fenced[..level2].iter().filter(|e| e.switch == Switch::Ipmi).count();
                assert!(tries <= 1, "{what}: level 1 tried {tries} times before level 2: {fenced:?}");
            }
        }
        Expect::MovedUnfenced | Expect::StaysOnA => {
            assert!(fenced.iter().all(|e| !e.answered), "{what}: A was not fenced: {fenced:?}")
        }
    }
    if failover.is_some() {
        eprintln!("{what}: timeline on B, from the fault:\n{}", timeline(lab, fault_second));
    }
    let outcome = Outcome { failover, interruption: interruption(&ok, t), kernel, lock };
    eprintln!(
        "ha_failover: {what}: {}; client writes interrupted for {:?}{}{}; keel verify check: {}",
        match outcome.failover {
            Some(d) => format!("Keel started on B {d:.1?} after the fault"),
            None => "the service stayed on A".into(),
        },
        outcome.interruption,
        match outcome.kernel {
            Some(g) => format!(", the kernel client's for {g:.1?} (its data read back intact)"),
            None => String::new(),
        },
        match outcome.lock {
            Some(l) => format!(
                "; its lock kept (a second client's LOCK: {} DENIED_GRACE_PERIOD, {} DENIED, {} GRANTED from the \
                 fault on; grace period over {})",
                l.in_grace,
                l.denied,
                l.granted,
                l.grace_over.map_or("-: no restart".into(), |g| format!("{g:.1?} after the fault"))
            ),
            None => String::new(),
        },
        if check.status.success() { "every acknowledged byte there" } else { "DATA LOST" }
    );
    (outcome, check)
}

/// `keel ha status` on `node`.
fn ha_status(lab: &HaLab, node: Node) -> keel_testkit::procs::Output {
    lab.run(node, &[keel_bin().to_str().unwrap(), "ha", "status"])
}

/// `keel ha status` on `node` once it shows `service`'s start on `holder`:
/// the agent records a start from the first monitor that finds the
/// floating address up, a monitor interval (2 s) after it at most.
fn ha_status_recorded(lab: &HaLab, node: Node, service: Service, holder: Node) -> keel_testkit::procs::Output {
    let since = format!("service {}: served by {} since", service.group, holder.name());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = ha_status(lab, node);
        if out.stdout.contains(&since) || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Trials of one row of the NSS7.0-HA paper's failure table (docs/benchmarks.md,
/// "Reference systems"): KEEL_HA_TRIALS of them
/// (default 1), each from the service on A; between two, `repair` and the
/// service's return to A (it prefers A). Prints p50 and p99. The kernel
/// client mounts the version KEEL_HA_KERNEL_VERS says (NFSv3 by default).
fn case(what: &str, expect: Expect, fault: &dyn Fn(&HaLab), repair: &dyn Fn(&HaLab)) -> CaseLab {
    case_with(what, expect, KernelVers::from_env(), fault, repair)
}

/// `case` with the kernel client on `vers`.
fn case_with(what: &str, expect: Expect, vers: KernelVers, fault: &dyn Fn(&HaLab), repair: &dyn Fn(&HaLab)) -> CaseLab {
    let trials: usize = std::env::var("KEEL_HA_TRIALS").ok().and_then(|n| n.parse().ok()).unwrap_or(1).max(1);
    let (lab, config) = lab_serving_from_a();
    let mut outcomes = Vec::new();
    for trial in 0..trials {
        if trial > 0 {
            repair(&lab);
            lab.wait_until_running_on(GROUP, Node::A, FAILOVER_TIMEOUT);
        }
        outcomes.push(fail_over(&lab, what, expect, vers, fault));
    }
    summarize(what, vers, &outcomes);
    CaseLab { lab, config }
}

/// A case's lab, still serving: its Keel configuration (in /etc/keel,
/// which the nodes share with the host) goes with it, not before, or the
/// agent's next monitor fails on the missing file while the test still
/// asks the cluster what it sees.
struct CaseLab {
    lab: HaLab,
    config: PathBuf,
}

impl std::ops::Deref for CaseLab {
    type Target = HaLab;
    fn deref(&self) -> &HaLab {
        &self.lab
    }
}

impl Drop for CaseLab {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

/// The line `bench/ha.sh` collects for a case: p50 and p99 of its trials.
fn summarize(what: &str, vers: KernelVers, outcomes: &[Outcome]) {
    let trials = outcomes.len();
    let pct = |mut v: Vec<Duration>, p: f64| {
        v.sort();
        v[((v.len() - 1) as f64 * p).round() as usize]
    };
    let gaps: Vec<Duration> = outcomes.iter().filter_map(|o| o.interruption).collect();
    let moves: Vec<Duration> = outcomes.iter().filter_map(|o| o.failover).collect();
    let server = if moves.is_empty() {
        "stays on A".to_string()
    } else {
        format!("failover p50 {:.1?} p99 {:.1?}", pct(moves.clone(), 0.5), pct(moves, 0.99))
    };
    let kernel: Vec<Duration> = outcomes.iter().filter_map(|o| o.kernel).collect();
    let locks: Vec<LockOutcome> = outcomes.iter().filter_map(|o| o.lock).collect();
    let graces: Vec<Duration> = locks.iter().filter_map(|l| l.grace_over).collect();
    let lock = match (locks.len(), graces.is_empty()) {
        (0, _) => String::new(),
        (n, true) => format!(", lock kept in {n} of {n}"),
        (n, false) => format!(
            ", lock kept in {n} of {n}, grace period over p50 {:.1?} max {:.1?} after the fault",
            pct(graces.clone(), 0.5),
            pct(graces, 1.0)
        ),
    };
    eprintln!(
        "ha_failover summary: {what}: {trials} trial(s), {server}, client interruption p50 {:.1?} p99 {:.1?}, \
         kernel client's ({}) p50 {:.1?} p99 {:.1?} max {:.1?}{lock}, 0 bytes lost",
        pct(gaps.clone(), 0.5),
        pct(gaps, 0.99),
        vers.name(),
        pct(kernel.clone(), 0.5),
        pct(kernel.clone(), 0.99),
        pct(kernel, 1.0)
    );
}

fn power_on_a(lab: &HaLab) {
    lab.power_on(Node::A);
}

#[test]
fn server_crash() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lab = case("server crash", Expect::FencedBy(Switch::Ipmi), &|lab| lab.crash(Node::A), &power_on_a);
    // What the administrator sees afterwards.
    let after = ha_status_recorded(&lab, Node::B, NFS, Node::B);
    eprintln!("keel ha status on B after the failover:\n{}", after.stdout);
    assert!(after.stdout.contains(&format!("service {GROUP}: served by keel-ha-b since")), "{after:?}");
    assert!(after.stdout.contains("before that by keel-ha-a"), "{after:?}");
    assert!(after.stdout.contains("of keel-ha-a by keel-ha-b"), "the fencing is shown: {after:?}");
    assert!(after.stdout.contains("keel-ha-a OFFLINE"), "{after:?}");
}

/// The failure table's first row with the NFSv4.1 kernel client: it
/// writes with fsync from a process that holds a POSIX lock on its file
/// through a crash of A. On B it reclaims its open and its lock (its
/// record in state_dir/nfs4-clients, on the shared disk, says it may, and
/// B presents the same server scope), sends RECLAIM_COMPLETE, which ends
/// the grace period, and carries on without an error; a second client is
/// denied the lock before, during and after the grace period; every
/// fsynced byte is there.
#[test]
fn server_crash_nfs41() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    case_with(
        "server crash, NFSv4.1 client with a lock",
        Expect::FencedBy(Switch::Ipmi),
        KernelVers::V41,
        &|lab| lab.crash(Node::A),
        &power_on_a,
    );
}

#[test]
fn server_hang() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    case("server hang", Expect::FencedBy(Switch::Ipmi), &|lab| lab.hang(Node::A), &power_on_a);
}

#[test]
fn heartbeat_link_loss() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    case("heartbeat link loss", Expect::FencedBy(Switch::Ipmi), &|lab| lab.heartbeat_link_down(Node::A), &|lab| {
        lab.heartbeat_link_up(Node::A);
        lab.power_on(Node::A);
    });
}

#[test]
fn public_link_loss() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    case("public link loss", Expect::MovedUnfenced, &|lab| lab.public_link_down(Node::A), &|lab| {
        lab.public_link_up(Node::A)
    });
}

#[test]
fn primary_fence_device_failure() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let fault = |lab: &HaLab| {
        lab.fence_device_failure(Switch::Ipmi);
        lab.crash(Node::A);
    };
    case("fence level 1 dead + crash", Expect::FencedBy(Switch::Pdu), &fault, &|lab| {
        lab.fence_device_repair(Switch::Ipmi);
        lab.power_on(Node::A);
    });
}

/// A level-1 device that hangs, as a dead BMC does (it takes the request
/// and never answers), instead of refusing at once: Pacemaker ends the
/// wait after `keel ha init`'s level-1 timeout and fences through level 2.
#[test]
fn primary_fence_device_hung() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let fault = |lab: &HaLab| {
        lab.fence_device_hang(Switch::Ipmi);
        lab.crash(Node::A);
    };
    // After the BMC's repair, its device's failed monitor is cleared, as
    // an administrator would.
    let repair = |lab: &HaLab| {
        lab.fence_device_repair(Switch::Ipmi);
        lab.crm(Node::B, &["resource", "cleanup", "fence-keel-ha-a-1"]);
        lab.power_on(Node::A);
    };
    let lab = case("fence level 1 hung + crash", Expect::FencedBy(Switch::Pdu), &fault, &repair);
    // Pacemaker gave level 1 the plan's timeout (keel ha init's default,
    // 2 s), not the agent's own 5 s twice: the timeout is set for the
    // action the cluster requests. With a priority-fencing-delay (none by
    // default; bench/ha.sh --fencing-delay sets one), that and a second
    // more besides, which the fencer waits within it.
    let delay: u32 =
        std::env::var("KEEL_HA_PRIORITY_FENCING_DELAY").ok().and_then(|d| d.trim().parse().ok()).unwrap_or(0);
    let level1_timeout = if delay > 0 { 2 + delay + 1 } else { 2 };
    let log = std::fs::read_to_string(lab.log_dir(Node::B).join("pacemaker/pacemaker.log")).unwrap_or_default();
    let level1 = log
        .lines()
        .filter(|l| {
            l.contains("Requesting that keel-ha-b perform 'off' action targeting keel-ha-a using fence-keel-ha-a-1")
        })
        .collect::<Vec<_>>();
    assert!(
        !level1.is_empty() && level1.iter().all(|l| l.ends_with(&format!("({level1_timeout}s)"))),
        "level 1 asked to power A off within {level1_timeout} s: {level1:?}\n{}",
        lab.diagnostics()
    );
}

/// A level-1 device that takes a second to act and answer is not given up
/// for level 2: the level-1 timeout leaves it room.
#[test]
fn primary_fence_device_slow() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let fault = |lab: &HaLab| {
        lab.fence_device_slow(Switch::Ipmi, Duration::from_secs(1));
        lab.crash(Node::A);
    };
    case("fence level 1 slow (1 s) + crash", Expect::FencedBy(Switch::Ipmi), &fault, &|lab| {
        lab.fence_device_repair(Switch::Ipmi);
        lab.power_on(Node::A);
    });
}

#[test]
fn storage_path_loss() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // After the repair, the administrator clears A's failure (migration-
    // threshold=1 bans a failed node until then), as after any real one.
    case("storage path loss", Expect::MovedUnfenced, &|lab| lab.storage_path_loss(Node::A), &|lab| {
        lab.storage_path_repair(Node::A);
        lab.crm(Node::A, &["resource", "cleanup", GROUP]);
    });
}

/// Storage path loss with the NFSv4.1 kernel client holding a lock: A's
/// Keel answers nothing that failed with its storage (no NFS4ERR_IO, so
/// no EIO from the guest's fsync), and the client reclaims from B.
#[test]
fn storage_path_loss_nfs41() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    case_with(
        "storage path loss, NFSv4.1 client with a lock",
        Expect::MovedUnfenced,
        KernelVers::V41,
        &|lab| lab.storage_path_loss(Node::A),
        &|lab| {
            lab.storage_path_repair(Node::A);
            lab.crm(Node::A, &["resource", "cleanup", GROUP]);
        },
    );
}

/// As in the NSS7.0-HA paper: with the private switch gone, neither node can fence the
/// other, and the service goes on where it is. Not repaired: both nodes'
/// queued fencing would then reach the switches.
#[test]
fn heartbeat_switch_loss() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let vers = KernelVers::from_env();
    let (lab, config) = lab_serving_from_a();
    let outcome = fail_over(&lab, "heartbeat switch loss", Expect::StaysOnA, vers, &|lab| lab.heartbeat_switch_down());
    // One trial whatever KEEL_HA_TRIALS says: there is no repair to run
    // the next from.
    summarize("heartbeat switch loss", vers, &[outcome]);
    let _ = std::fs::remove_file(config);
}

/// Cuts (or restores) the heartbeat between the nodes and nothing else:
/// each node's route to the other's heartbeat address is a blackhole, so
/// Corosync loses the peer on both at once while the power switches, on
/// the same network, still answer both.
fn heartbeat_between_nodes(lab: &HaLab, up: bool) {
    for (node, peer) in [(Node::A, Node::B), (Node::B, Node::A)] {
        if lab.is_powered(node) {
            let verb = if up { "del" } else { "add" };
            let peer = format!("{}/32", peer.heartbeat_ip());
            let out = lab.run(node, &["ip", "route", verb, "blackhole", &peer]);
            assert!(up || out.status.success(), "{out:?}");
        }
    }
}

/// The fencing race: both nodes lose each other at once while both reach
/// the fence devices (the heartbeat network's fault between them), so
/// each fences the other, and with stonith-action=off both may end up
/// off. A priority-fencing-delay (the plan's, off by default) makes B,
/// which serves nothing, wait before it fences A, which serves: A fences B
/// at once and keeps the service, and B's request dies with B. With a
/// delay (bench/ha.sh --fencing-delay 1), A is never fenced; without one
/// the race is only reported.
#[test]
fn fencing_race() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    race("fencing race", true, &|lab| heartbeat_between_nodes(lab, false));
}

/// The race the heartbeat switch's repair starts: while it is down,
/// neither node reaches the switches, and both keep trying to fence the
/// other; when it comes back, the attempts in flight on both sides reach
/// them, and the nodes rejoin each other. Reported, not asserted: the
/// priority-fencing-delay does not settle it (docs/ha.md, "When both
/// nodes fence"); each trial prints both nodes' fencing steps.
#[test]
fn fencing_race_at_switch_repair() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    race("fencing race at switch repair", false, &|lab| {
        lab.heartbeat_switch_down();
        // Both nodes fence and fail (level 1's 2 s, level 2's 5 s) and try again.
        std::thread::sleep(Duration::from_secs(10));
        lab.heartbeat_switch_up();
    });
}

/// Each node's fencing steps within a minute after the fault, from its
/// Pacemaker log: what it requested, delayed, and saw done, and the
/// membership it saw.
fn fencing_steps(lab: &HaLab, fault_second: f64) -> String {
    let needles: [&[&str]; 6] = [
        &["pacemaker-controld", "Requesting fencing"],
        &["Delaying 'off' action"],
        &["Operation 'off' targeting", "OK"],
        &["pacemaker-controld", "state is now lost"],
        &["pacemaker-controld", "state is now member"],
        &["election-DC won by local node"],
    ];
    let mut out = String::new();
    for node in Node::ALL {
        let log = std::fs::read_to_string(lab.log_dir(node).join("pacemaker/pacemaker.log")).unwrap_or_default();
        for l in log.lines().filter(|l| needles.iter().any(|n| n.iter().all(|w| l.contains(w)))) {
            if let Some(at) = cluster_second_of_day(l).map(|t| (t - fault_second).rem_euclid(86_400.0))
                && at < 60.0
            {
                let said = l.split_once(") ").map_or(l, |(_, rest)| rest.trim());
                out.push_str(&format!("  +{at:.3} s  {}: {said}\n", node.name()));
            }
        }
    }
    out
}

/// KEEL_HA_TRIALS trials of `fault` from both nodes up and the service on
/// A: who was fenced, each time. With `assert_served`, and keel ha init's
/// priority-fencing-delay on, A must never be.
fn race(what: &str, assert_served: bool, fault: &dyn Fn(&HaLab)) {
    let trials: usize = std::env::var("KEEL_HA_TRIALS").ok().and_then(|n| n.parse().ok()).unwrap_or(1).max(1);
    let delayed = std::env::var("KEEL_HA_PRIORITY_FENCING_DELAY").is_ok_and(|d| d.trim() != "0");
    let (lab, config) = lab_serving_from_a();
    let mut tally = std::collections::BTreeMap::<&str, usize>::new();
    for trial in 0..trials {
        if trial > 0 {
            // Back to both nodes up and the service on A.
            lab.heartbeat_switch_up();
            for node in Node::ALL {
                if !lab.is_powered(node) {
                    lab.power_on(node);
                }
            }
            heartbeat_between_nodes(&lab, true);
            lab.wait_online(FAILOVER_TIMEOUT);
            lab.wait_until_running_on(GROUP, Node::A, FAILOVER_TIMEOUT);
        }
        let seen = lab.fence_events().len();
        let fault_second = second_of_day(None);
        fault(&lab);
        // Corosync's 2.2 s, the delay, the fencing: long done by then.
        std::thread::sleep(Duration::from_secs(12));
        let offs: Vec<String> = lab.fence_events()[seen..]
            .iter()
            .filter(|e| e.answered && e.action == "off")
            .map(|e| e.target.clone())
            .collect();
        let outcome = match (offs.iter().any(|t| t == Node::A.name()), offs.iter().any(|t| t == Node::B.name())) {
            (false, true) => "B fenced, A kept the service",
            (true, false) => "A fenced, the service moved to B",
            (true, true) => "both fenced, nothing served",
            (false, false) => "nobody fenced",
        };
        eprintln!("{what}: trial {}: {outcome} (off: {offs:?}, service on {:?})", trial + 1, lab.where_is(GROUP));
        eprint!("{}", fencing_steps(&lab, fault_second));
        *tally.entry(outcome).or_default() += 1;
    }
    let line: Vec<String> = tally.iter().map(|(o, n)| format!("{o}: {n}")).collect();
    eprintln!(
        "ha_failover summary: {what}: {trials} trial(s), priority-fencing-delay {}: {}",
        if delayed { "on" } else { "off" },
        line.join(", ")
    );
    if assert_served && delayed {
        assert_eq!(tally.get("B fenced, A kept the service"), Some(&trials), "the serving node lost a race: {tally:?}");
    }
    let _ = std::fs::remove_file(config);
}

/// The NSS7.0-HA paper's warning, shown: an `async` export (refused under [ha]; here
/// [ha] is turned off to allow it) acknowledges FILE_SYNC writes that are
/// only in the active node's memory, and the failover loses them.
#[test]
fn an_async_export_loses_acknowledged_writes_at_failover() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Without [ha] Keel cannot listen on the floating address before the
    // address is up (the group starts it first): it listens on every
    // address instead, as such a server would have to, and admits the
    // loopback address its monitor's probe then calls from.
    let (lab, config) = lab_serving_from_a_with(|c| {
        assert!(c.contains("enabled = true") && c.contains("access = \"rw\""), "{c}");
        let listen = c.lines().find(|l| l.starts_with("listen = ")).expect("a listen line").to_string();
        c.replace("enabled = true", "enabled = false")
            .replace("access = \"rw\"", "access = \"rw\"\nsync = false")
            .replace(&listen, "listen = [\"0.0.0.0:2049\"]")
            + "[[export.clients]]\nhost = \"127.0.0.1\"\n"
    });
    let (_, check) =
        fail_over_checked(&lab, "async export, crash", Expect::FencedBy(Switch::Ipmi), Clients::Own, &|lab| {
            lab.crash(Node::A)
        });
    assert!(!check.status.success(), "an async export kept everything through a power cut?\n{check:?}");
    eprintln!("keel verify check after the failover of an async export:\n{}{}", check.stdout, check.stderr);
    let _ = std::fs::remove_file(config);
}

/// The `keel serve` processes running in `node`: (configuration, pid).
fn keel_servers(lab: &HaLab, node: Node) -> Vec<(String, u32)> {
    let out = lab.run(node, &["pgrep", "-af", "serve --config"]);
    out.stdout
        .lines()
        .filter_map(|l| {
            // PID ARGV0 serve --config FILE; the agent's greps for the
            // same words are not servers.
            let words: Vec<&str> = l.split_whitespace().collect();
            match words[..] {
                [pid, argv0, "serve", "--config", config] if argv0.ends_with("keel") => {
                    Some((config.to_string(), pid.parse().ok()?))
                }
                _ => None,
            }
        })
        .collect()
}

/// The pid of `service`'s Keel in `node` (None: not running there).
fn keel_pid(lab: &HaLab, node: Node, service: Service) -> Option<u32> {
    let config = format!("/etc/keel/{}.toml", service.group);
    keel_servers(lab, node).into_iter().find(|(c, _)| *c == config).map(|(_, pid)| pid)
}

/// What the client's portmapper query (GETPORT of NFS v3 over TCP) at
/// `ip` answers: Keel's own portmapper on `ip`:111.
fn nfs_port_from_portmap(lab: &HaLab, ip: &'static str) -> Result<u16, String> {
    in_client_netns(lab, move || {
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
        let retry = keel_rpc_client::Retry { timeout: Duration::from_secs(1), tries: 3 };
        keel_rpc_client::getport(&sock, ip.parse().unwrap(), 100_003, 3, 6, retry).map_err(|e| e.to_string())
    })
    .join()
    .unwrap()
}

/// What a fault did to both services of an active/active pair.
struct PairOutcome {
    /// Fault to the moving service started where it goes.
    moved: Duration,
    /// Each service's prober's longest wait between two writes from the
    /// fault on, in the order of the services.
    interruptions: [Gap; 2],
    /// The writers' journals, in the order of the services.
    journals: [PathBuf; 2],
    /// Whether each writer was still writing when the move was seen done.
    spanned: [bool; 2],
}

/// When `through_fault` starts its `keel verify` writers. Each writes 2
/// streams of 128 MiB: about 4 s here with nothing in the way (two
/// services' writers at once: twice that), so that they are still
/// writing when the service moves (48 MiB took 1.5 s: sometimes done
/// before a fault 1.5 s after their start).
#[derive(Clone, Copy, PartialEq)]
enum Writers {
    /// 1.5 s before the fault (a crash cuts them mid-stream).
    BeforeFault,
    /// When the fault's closure returns: for a failback, which begins a
    /// few seconds after the returning node is online (its ping
    /// attribute first).
    AfterFault,
}

/// Writes to both services with `keel verify` (started as `writers`
/// says) and a prober each, injects `fault`, waits for `moving` to be
/// started on `to`, lets the writers finish and checks every acknowledged
/// byte of both. The journals are `WHAT-GROUP.journal` in the lab's
/// directory.
fn through_fault(
    lab: &HaLab,
    what: &str,
    services: [Service; 2],
    (moving, to): (Service, Node),
    writers: Writers,
    fault: &dyn Fn(&HaLab),
) -> PairOutcome {
    let journals = services.map(|s| lab.dir().join(format!("{}-{}.journal", what.replace([' ', '/'], "-"), s.group)));
    let start_writers = || -> Vec<std::process::Child> {
        services.iter().zip(&journals).map(|(s, j)| start_writer(lab, *s, j, "128M")).collect()
    };
    let stop = Stop::default();
    let probes = services.map(|s| prober(lab, s, stop.clone()));
    let mut running = Vec::new();
    if writers == Writers::BeforeFault {
        running = start_writers();
    }
    std::thread::sleep(Duration::from_millis(1500));

    let t = Instant::now();
    fault(lab);
    if writers == Writers::AfterFault {
        running = start_writers();
    }
    lab.wait_until_running_on(moving.group, to, FAILOVER_TIMEOUT);
    let moved = t.elapsed();
    let spanned: Vec<bool> = running.iter_mut().map(|w| w.try_wait().unwrap().is_none()).collect();
    for (s, w) in services.iter().zip(running) {
        finish_writer(lab, &format!("{what}: {}", s.group), w);
    }
    stop.set();
    let oks = probes.map(|p| p.join().unwrap());
    for (s, j) in services.iter().zip(&journals) {
        let check = check_journal(lab, j);
        assert!(check.status.success(), "{what}: {}: acknowledged data lost:\n{check:?}", s.group);
    }
    let interruptions = [0, 1].map(|i| {
        longest_gap(&oks[i], t).unwrap_or_else(|| panic!("{what}: {}'s prober never wrote after", services[i].group))
    });
    PairOutcome { moved, interruptions, journals, spanned: [spanned[0], spanned[1]] }
}

/// Active/active (NSS4.5-HA XL): `nfs` prefers A, `nfs2` prefers B, each
/// on its own disk and address. B crashes: A carries both (two Keel
/// servers on one node, each on its own address with its own
/// portmapper), `nfs` undisturbed. B returns: `nfs2` goes back by itself
/// (the preferred node's score outweighs stickiness), `nfs` stays.
#[test]
fn active_active_crash_and_failback() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let pair = [NFS, NFS2];
    let (lab, configs) = lab_serving(&pair, |c| c);
    // B's start of nfs2 recorded (its agent does so once nfs2's address
    // is up), so that A's status can say B served it before.
    let before = ha_status_recorded(&lab, Node::A, NFS2, Node::B);
    assert!(before.stdout.contains("service nfs: served by keel-ha-a"), "{before:?}");
    assert!(before.stdout.contains("service nfs2: served by keel-ha-b since"), "{before:?}");
    assert!(before.stdout.contains("service nfs2: served by keel-ha-b"), "{before:?}");
    let nfs_pid = keel_pid(&lab, Node::A, NFS).expect("nfs's Keel on A");

    // B crashes: nfs2 moves to A, nfs keeps running there.
    let crash = through_fault(&lab, "active/active crash of B", pair, (NFS2, Node::A), Writers::BeforeFault, &|lab| {
        lab.crash(Node::B)
    });
    assert_eq!(lab.where_is_seen_by(Node::A, NFS.group), Some(Node::A), "nfs stays on A");
    assert_eq!(keel_pid(&lab, Node::A, NFS), Some(nfs_pid), "nfs's Keel on A was not restarted");
    assert!(
        lab.power_actions(Node::B).iter().any(|e| e.action == "off" && e.switch == Switch::Ipmi && e.answered),
        "B fenced: {:?}",
        lab.power_actions(Node::B)
    );
    let servers = keel_servers(&lab, Node::A);
    assert_eq!(servers.len(), 2, "two Keel servers on A: {servers:?}");
    // Each on its own address: NFS, and the portmapper Keel serves there.
    let tcp = lab.run_ok(Node::A, &["ss", "-ltnH"]).stdout;
    let udp = lab.run_ok(Node::A, &["ss", "-lunH"]).stdout;
    for s in pair {
        for port in [2049, 111] {
            let addr = format!("{}:{port}", s.ip);
            assert!(tcp.contains(&addr) && udp.contains(&addr), "{addr} on A (TCP and UDP):\n{tcp}{udp}");
        }
        assert_eq!(nfs_port_from_portmap(&lab, s.ip), Ok(2049), "the portmapper at {}", s.ip);
    }
    assert!(!tcp.contains("0.0.0.0:2049") && !tcp.contains("*:2049"), "no wildcard listener:\n{tcp}");
    let on_a = ha_status_recorded(&lab, Node::A, NFS2, Node::A);
    eprintln!("keel ha status on A with B down:\n{}", on_a.stdout);
    assert!(on_a.stdout.contains("service nfs: served by keel-ha-a"), "{on_a:?}");
    assert!(on_a.stdout.contains("service nfs2: served by keel-ha-a since"), "{on_a:?}");
    assert!(on_a.stdout.contains("before that by keel-ha-b"), "{on_a:?}");
    assert!(on_a.stdout.contains("keel-ha-b OFFLINE"), "{on_a:?}");

    // B returns: nfs2 goes back by itself, nfs stays.
    let back = through_fault(&lab, "active/active failback to B", pair, (NFS2, Node::B), Writers::AfterFault, &|lab| {
        lab.power_on(Node::B);
        lab.wait_online(FAILOVER_TIMEOUT);
    });
    assert_eq!(lab.where_is_seen_by(Node::B, NFS.group), Some(Node::A), "nfs stays on A");
    assert_eq!(keel_pid(&lab, Node::A, NFS), Some(nfs_pid), "nfs's Keel on A was not restarted");
    assert_eq!(keel_servers(&lab, Node::A).len(), 1, "one Keel on A: {:?}", keel_servers(&lab, Node::A));
    assert!(keel_pid(&lab, Node::B, NFS2).is_some(), "nfs2's Keel on B: {:?}", keel_servers(&lab, Node::B));
    // What was written through A while B was down, read through B.
    for (s, j) in pair.iter().zip(&crash.journals) {
        let check = check_journal(&lab, j);
        assert!(check.status.success(), "{}: the crash's writes after the failback:\n{check:?}", s.group);
    }
    let on_b = ha_status_recorded(&lab, Node::B, NFS2, Node::B);
    eprintln!("keel ha status on B after the failback:\n{}", on_b.stdout);
    assert!(on_b.stdout.contains("service nfs: served by keel-ha-a"), "{on_b:?}");
    assert!(on_b.stdout.contains("service nfs2: served by keel-ha-b since"), "{on_b:?}");
    assert!(on_b.stdout.contains("before that by keel-ha-a"), "{on_b:?}");

    let spanned = |o: &PairOutcome| {
        if o.spanned[1] { "nfs2's writer ran through the move" } else { "nfs2's writer done before the move" }
    };
    eprintln!(
        "ha_failover: active/active, crash of B: nfs2 started on A {:.1?} after the fault; client writes \
         interrupted for {} (nfs2), {} (nfs, stayed on A); {}; keel verify check: every acknowledged byte \
         there",
        crash.moved,
        crash.interruptions[1],
        crash.interruptions[0],
        spanned(&crash)
    );
    eprintln!(
        "ha_failover: active/active, B back: nfs2 back on B {:.1?} after power-on (failback by itself); client \
         writes interrupted for {} (nfs2), {} (nfs, stayed on A); {}; keel verify check: every \
         acknowledged byte there",
        back.moved,
        back.interruptions[1],
        back.interruptions[0],
        spanned(&back)
    );
    for c in configs {
        let _ = std::fs::remove_file(c);
    }
}

/// A client's statd, and the portmapper that finds it, in the client's
/// namespace: the SM_NOTIFY calls it gets, as (mon_name, state, sender).
fn client_statd(lab: &HaLab, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<(String, i32, std::net::IpAddr)>> {
    use keel_nlm_proto::nsm::{SM_PROGRAM, SmProc, StatChge};
    use keel_rpc::msg::{AcceptStat, CallHeader, ReplyStat, encode_reply_header};
    use keel_xdr::{Decode, Decoder, Encoder};
    in_client_netns(lab, move || {
        let pmap = std::net::UdpSocket::bind((CLIENT_IP, 111)).unwrap();
        let statd = std::net::UdpSocket::bind((CLIENT_IP, 0)).unwrap();
        let statd_port = statd.local_addr().unwrap().port();
        for s in [&pmap, &statd] {
            s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        }
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            for (sock, is_portmapper) in [(&pmap, true), (&statd, false)] {
                let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
                let mut dec = Decoder::new(bytes::Bytes::copy_from_slice(&buf[..n]));
                let Ok(h) = CallHeader::decode(&mut dec) else { continue };
                let mut enc = Encoder::new();
                encode_reply_header(&mut enc, h.xid, ReplyStat::Accepted(AcceptStat::Success));
                if is_portmapper && h.prog == 100_000 && h.proc_ == 3 {
                    let prog = dec.u32();
                    enc.u32(if prog == Ok(SM_PROGRAM) { u32::from(statd_port) } else { 0 });
                } else if !is_portmapper && h.prog == SM_PROGRAM && h.proc_ == SmProc::Notify as u32 {
                    if let Ok(args) = StatChge::decode(&mut dec) {
                        got.push((String::from_utf8_lossy(&args.mon_name.0).into_owned(), args.state, from.ip()));
                    }
                } else if h.proc_ != 0 {
                    continue;
                }
                let _ = sock.send_to(&enc.into_bytes(), from);
            }
        }
        got
    })
}

/// NLM4 calls from the client's namespace over UDP, as lockd makes them.
fn nlm_lock(lab: &HaLab, fh: &[u8], host: &'static str, svid: i32, reclaim: bool) -> keel_nlm_proto::nlm4::Nlm4Stats {
    use keel_nlm_proto::nlm4::{NLM_PROGRAM, NLM_V4, Nlm4Lock, Nlm4Lockargs, Nlm4Proc, Nlm4Res};
    use keel_rpc_client::{Proc, Retry, bind_from, call};
    use keel_xdr::{Decode, Decoder, Opaque};
    let fh = bytes::Bytes::copy_from_slice(fh);
    in_client_netns(lab, move || {
        let sock = bind_from(CLIENT_IP.parse().unwrap()).unwrap();
        let alock = Nlm4Lock {
            caller_name: Opaque(bytes::Bytes::from(host)),
            fh: Opaque(fh),
            oh: Opaque(bytes::Bytes::from(format!("{host}:{svid}"))),
            svid,
            l_offset: 0,
            l_len: 100,
        };
        let args = Nlm4Lockargs { cookie: "k".into(), block: false, exclusive: true, alock, reclaim, state: 1 };
        let server = format!("{FLOATING_IP}:2049").parse().unwrap();
        let retry = Retry { timeout: Duration::from_secs(2), tries: 5 };
        let res =
            call(&sock, server, Proc { prog: NLM_PROGRAM, vers: NLM_V4, proc_: Nlm4Proc::Lock as u32 }, &args, retry)
                .expect("NLM LOCK");
        Nlm4Res::decode(&mut Decoder::new(res)).unwrap().stat
    })
    .join()
    .unwrap()
}

/// Locks survive a crash of the active node: the NSM state is on the
/// shared storage, the new node sends SM_NOTIFY from the service address,
/// the holder reclaims, and the grace period ends as soon as it has (not
/// after knfsd's and Ganesha's 90 s).
#[test]
fn locks_survive_a_failover_and_the_grace_period_ends_once_reclaimed() {
    use keel_nlm_proto::nlm4::Nlm4Stats;
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (lab, config) = lab_serving_from_a();
    let addr: std::net::SocketAddr = format!("{FLOATING_IP}:2049").parse().unwrap();
    let fh = in_client_netns(&lab, move || {
        let mut nfs = Nfs::connect(addr).unwrap();
        let root = nfs.mount(NFS.export).unwrap();
        nfs.create_new(&root, "locked").unwrap()
    })
    .join()
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let statd = client_statd(&lab, stop.clone());
    assert_eq!(nlm_lock(&lab, &fh, "client-x", 1, false), Nlm4Stats::Granted);
    assert_eq!(nlm_lock(&lab, &fh, "client-y", 2, false), Nlm4Stats::Denied);

    let t = Instant::now();
    lab.crash(Node::A);
    let failover = lab.wait_until_running_on(GROUP, Node::B, FAILOVER_TIMEOUT);
    // B's Keel notifies the holder from the service address.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !lab.sh(Node::B, "grep -q 'SM_NOTIFY answered' /var/log/keel/*.log").status.success() {
        assert!(Instant::now() < deadline, "no SM_NOTIFY answered:\n{}", lab.diagnostics());
        std::thread::sleep(Duration::from_millis(100));
    }
    let notified = t.elapsed();
    assert_eq!(nlm_lock(&lab, &fh, "client-y", 2, false), Nlm4Stats::DeniedGracePeriod, "new locks wait for reclaims");
    assert_eq!(nlm_lock(&lab, &fh, "client-x", 1, true), Nlm4Stats::Granted, "the reclaim");
    // The holder's first ordinary call says it is done: grace ends there.
    assert_eq!(nlm_lock(&lab, &fh, "client-x", 3, false), Nlm4Stats::Denied, "x's other owner conflicts with x's lock");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match nlm_lock(&lab, &fh, "client-y", 2, false) {
            Nlm4Stats::Denied => break,
            Nlm4Stats::DeniedGracePeriod if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            other => panic!("after the reclaim, y's lock: {other:?}"),
        }
    }
    let grace_over = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    let notes = statd.join().unwrap();
    assert!(
        notes
            .iter()
            .any(|(name, state, from)| name == FLOATING_IP && state % 2 == 1 && from.to_string() == FLOATING_IP),
        "SM_NOTIFY from and naming the service address, with an odd (up) state: {notes:?}"
    );
    eprintln!(
        "ha_failover: locks: Keel on B {failover:.1?} after the crash, SM_NOTIFY answered {notified:.1?}, \
         reclaimed and the grace period over {grace_over:.1?} after the crash (knfsd and Ganesha: 90 s)"
    );
    let _ = std::fs::remove_file(config);
}

/// The SSD cache tier in write-back mode under HA, in the design Keel
/// supports: its two log devices are where both nodes reach them (here
/// files on the shared disk; in production, shared SSD LUNs), and the
/// record of them is in state_dir. A crash with dirty data in the log:
/// B replays it before its first reply, and every acknowledged byte is
/// there.
#[test]
fn a_write_back_cache_on_shared_devices_survives_a_crash_failover() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let devices = ["/srv/keel/.cache-a", "/srv/keel/.cache-b"];
    let prepare = |lab: &HaLab| {
        let script = format!(
            "mkdir -p {m} && mount {d} {m} && truncate -s 256M {a} {b} && umount {m}",
            m = NFS.mount,
            d = NFS.disk,
            a = devices[0],
            b = devices[1]
        );
        let out = lab.sh(Node::A, &script);
        assert!(out.status.success(), "{out:?}");
    };
    // Sequential streams would bypass the log (the cutoff): send them in.
    let edit = |c: String| {
        let c = c.replace("access = \"rw\"", "access = \"rw\"\ncache = \"write-back\"");
        format!("{c}\n[cache]\ndevices = [\"{}\", \"{}\"]\nsequential_cutoff_mib = 1048576\n", devices[0], devices[1])
    };
    let (lab, configs) = lab_serving_prepared(&[NFS], edit, &prepare);
    let config = configs[0].to_str().unwrap().to_string();
    let journal = lab.dir().join("write-back.journal");
    let writer = start_writer(&lab, NFS, &journal, "24M");
    // Dirty data in the log at the crash: wait until some is there.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stat = lab.run(Node::A, &[keel_bin().to_str().unwrap(), "cache", "stat", "--json", "--config", &config]);
        let dirty = serde_json::from_str::<serde_json::Value>(&stat.stdout)
            .ok()
            .and_then(|v| v.pointer("/dirty_bytes").and_then(|d| d.as_u64()));
        if dirty.is_some_and(|d| d > 1 << 20) {
            break;
        }
        assert!(Instant::now() < deadline, "no dirty data in the log: {stat:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let t = Instant::now();
    lab.crash(Node::A);
    let failover = lab.wait_until_running_on(GROUP, Node::B, FAILOVER_TIMEOUT);
    finish_writer(&lab, "write-back", writer);
    let check = check_journal(&lab, &journal);
    assert!(check.status.success(), "write-back: acknowledged data lost:\n{check:?}");
    let events = lab.run(Node::B, &[keel_bin().to_str().unwrap(), "cache", "events", "--config", &config]);
    assert!(events.stdout.contains("recovered the log"), "B replayed A's log: {events:?}");
    let recovered = events.stdout.lines().find(|l| l.contains("recovered the log")).unwrap_or_default().to_string();
    eprintln!(
        "ha_failover: write-back cache: Keel on B {failover:.1?} after the crash ({:.1?} in all); {recovered}; \
         keel verify check: every acknowledged byte there",
        t.elapsed()
    );
    let _ = std::fs::remove_file(&configs[0]);
}

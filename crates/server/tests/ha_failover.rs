//! Keel failing over for real: two Pacemaker/Corosync nodes in namespaces
//! (keel_testkit::ha), configured by `keel ha init` and the OCF agent,
//! serving an export on the shared disk at the floating address, while a
//! client in its own namespace writes with `keel verify` and a prober
//! makes a FILE_SYNC WRITE every 50 ms. For each fault: the time from the
//! fault to Keel started on the other node, the client-visible
//! interruption (the gap between the prober's last write before the fault
//! and its first after), and `keel verify check`: every acknowledged byte
//! is there. Root only; skipped where Pacemaker is not installed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_testkit::ha::{self, CLIENT_IP, FLOATING_IP, HaConfig, HaLab, Node, Switch};
use keel_testkit::nfs::{Nfs, RpcConn};
use keel_testkit::procs::run_timeout;
use keel_testkit::server::keel_bin;
use nfs3_types::nfs3::stable_how;

static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());
const AGENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../contrib/ocf/keel");
/// Where Pacemaker looks for ocf:keel:keel (the keel package installs it
/// there; the nodes see the host's /usr).
const AGENT_INSTALLED: &str = "/usr/lib/ocf/resource.d/keel/keel";
const GROUP: &str = "nfs";
const MOUNT: &str = "/srv/keel";
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(60);

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
/// lab's nodes, its two emulated power switches as fence levels 1 and 2,
/// its shared disk and floating address.
fn plan() -> String {
    let node = |n: Node| {
        format!(
            "[[node]]\nname = \"{}\"\nheartbeat = \"{}\"\nfence = [\n  \
             {{ agent = \"fence_keel_lab\", params = {{ switch = \"ipmi\" }} }},\n  \
             {{ agent = \"fence_keel_lab\", params = {{ switch = \"pdu\" }} }},\n]\n\n",
            n.name(),
            n.heartbeat_ip()
        )
    };
    format!(
        "token_ms = 2000\nmonitor_seconds = 2\nping = [\"{CLIENT_IP}\"]\nkeel_binary = \"{}\"\n\n{}{}\
         [[service]]\nname = \"{GROUP}\"\naddress = \"{FLOATING_IP}/24\"\nnic = \"{}\"\ndevice = \"{}\"\n\
         mount = \"{MOUNT}\"\nprefer = \"keel-ha-a\"\n",
        keel_bin().display(),
        node(Node::A),
        node(Node::B),
        ha::PUBLIC_NIC,
        ha::SHARED_DISK,
    )
}

/// A lab serving the export from A, configured the way an administrator
/// would: `keel ha init`, the files it writes, `crm configure load`.
fn lab_serving_from_a() -> (HaLab, PathBuf) {
    lab_serving_from_a_with(|config| config)
}

/// Like `lab_serving_from_a`, with the generated Keel configuration edited.
fn lab_serving_from_a_with(edit: impl Fn(String) -> String) -> (HaLab, PathBuf) {
    std::fs::create_dir_all(Path::new(AGENT_INSTALLED).parent().unwrap()).unwrap();
    std::fs::copy(AGENT, AGENT_INSTALLED).unwrap();
    let lab = HaLab::start(HaConfig::default());
    let out = lab.dir().join("keel-ha");
    let plan_file = lab.dir().join("keel-ha.toml");
    std::fs::write(&plan_file, plan()).unwrap();
    let init = run_timeout(
        Command::new(keel_bin()).args(["ha", "init"]).arg(&plan_file).arg("--out").arg(&out),
        Duration::from_secs(30),
    );
    assert!(init.status.success(), "{init:?}");
    assert!(init.stdout.contains("crm configure load update"), "{init:?}");
    // /etc/keel is the host's, seen by both nodes, as it would be copied.
    let config = PathBuf::from(format!("/etc/keel/{GROUP}.toml"));
    std::fs::create_dir_all("/etc/keel").unwrap();
    std::fs::write(&config, edit(std::fs::read_to_string(out.join(format!("{GROUP}.toml"))).unwrap())).unwrap();
    let crm = std::fs::read_to_string(out.join("cluster.crm")).unwrap();
    // Fenced nodes stay off (the lab's switches turn them on again when told).
    assert!(crm.contains("stonith-enabled=true"), "{crm}");
    lab.configure(Node::A, &crm.replace("stonith-enabled=true", "stonith-enabled=true stonith-action=off"));
    lab.wait_until_running_on(GROUP, Node::A, FAILOVER_TIMEOUT);
    // The generated export squashes root (as exports(5)): a directory
    // everyone may write, as an administrator would set up.
    lab.run_ok(Node::A, &["chmod", "1777", MOUNT]);
    (lab, config)
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

/// A FILE_SYNC WRITE of 4 KiB every 50 ms to one file, reconnecting (and
/// mounting again) after any error, until `stop`: the times of the writes
/// that succeeded.
fn prober(lab: &HaLab, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Instant>> {
    let addr: std::net::SocketAddr = format!("{FLOATING_IP}:2049").parse().unwrap();
    in_client_netns(lab, move || {
        let mut nfs = Nfs::connect(addr).expect("first connection");
        let root = nfs.mount(MOUNT).expect("MNT");
        let fh = nfs.create_new(&root, "prober").expect("CREATE");
        let mut conn = Some(nfs.conn);
        let mut ok = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut offset = 0u64;
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
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
    let first = ok.iter().rposition(|t| *t <= fault).unwrap_or(0);
    ok.last().filter(|t| **t > fault)?;
    ok[first..].windows(2).map(|w| w[1] - w[0]).max()
}

/// `keel verify` from the client's namespace.
fn verify(lab: &HaLab, args: &[&str]) -> Command {
    let mut cmd = lab.client().cmd(&[keel_bin().to_str().unwrap(), "verify"]);
    cmd.args(args);
    cmd
}

struct Outcome {
    /// Fault to Keel started on the other node (None: it did not move).
    failover: Option<Duration>,
    /// The prober's longest wait between two writes from the fault on
    /// (None: it never wrote again).
    interruption: Option<Duration>,
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

/// Writes with `keel verify` and the prober, injects `fault` once some data
/// is acknowledged, waits for the service where `expect` says, lets the
/// writers finish and checks every acknowledged byte.
fn fail_over(lab: &HaLab, what: &str, expect: Expect, fault: &dyn Fn(&HaLab)) -> Outcome {
    let (outcome, check) = fail_over_checked(lab, what, expect, fault);
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
    fault: &dyn Fn(&HaLab),
) -> (Outcome, keel_testkit::procs::Output) {
    let journal = lab.dir().join(format!("{}.journal", what.replace(' ', "-")));
    let stop = Arc::new(AtomicBool::new(false));
    let probe = prober(lab, stop.clone());
    let mut writer = verify(lab, &["write", "--server", FLOATING_IP, "--export", MOUNT])
        .args(["--clients", "2", "--size", "48M", "--block", "64K", "--in-flight", "2", "--timeout", "5s"])
        .args(["--retry-for", "120s", "--quiet", "--force", "--journal"])
        .arg(&journal)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let fenced_before = lab.power_actions(Node::A).len();

    let t = Instant::now();
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

    let deadline = Instant::now() + Duration::from_secs(150);
    let status = loop {
        if let Some(s) = writer.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = writer.kill();
            panic!("{what}: keel verify write did not finish\n{}", lab.diagnostics());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = writer.wait_with_output().unwrap();
    stop.store(true, Ordering::Relaxed);
    let ok = probe.join().unwrap();
    assert!(
        status.success(),
        "{what}: keel verify write: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let check = run_timeout(verify(lab, &["check", "--retry-for", "60s", "--journal"]).arg(&journal), FAILOVER_TIMEOUT);

    let fenced: Vec<_> =
        lab.power_actions(Node::A).into_iter().skip(fenced_before).filter(|e| e.action != "on").collect();
    match expect {
        Expect::FencedBy(switch) => assert!(
            fenced.iter().any(|e| e.switch == switch && e.answered),
            "{what}: A fenced through {switch:?}: {fenced:?}"
        ),
        Expect::MovedUnfenced | Expect::StaysOnA => {
            assert!(fenced.iter().all(|e| !e.answered), "{what}: A was not fenced: {fenced:?}")
        }
    }
    let outcome = Outcome { failover, interruption: interruption(&ok, t) };
    eprintln!(
        "ha_failover: {what}: {}; client writes interrupted for {:?}; keel verify check: {}",
        match outcome.failover {
            Some(d) => format!("Keel started on B {d:.1?} after the fault"),
            None => "the service stayed on A".into(),
        },
        outcome.interruption,
        if check.status.success() { "every acknowledged byte there" } else { "DATA LOST" }
    );
    (outcome, check)
}

/// `keel ha status` on `node`.
fn ha_status(lab: &HaLab, node: Node) -> keel_testkit::procs::Output {
    lab.run(node, &[keel_bin().to_str().unwrap(), "ha", "status"])
}

/// Trials of one row of the seed's failure table: KEEL_HA_TRIALS of them
/// (default 1), each from the service on A; between two, `repair` and the
/// service's return to A (it prefers A). Prints p50 and p99.
fn case(what: &str, expect: Expect, fault: &dyn Fn(&HaLab), repair: &dyn Fn(&HaLab)) -> HaLab {
    let trials: usize = std::env::var("KEEL_HA_TRIALS").ok().and_then(|n| n.parse().ok()).unwrap_or(1).max(1);
    let (lab, config) = lab_serving_from_a();
    let mut outcomes = Vec::new();
    for trial in 0..trials {
        if trial > 0 {
            repair(&lab);
            lab.wait_until_running_on(GROUP, Node::A, FAILOVER_TIMEOUT);
        }
        outcomes.push(fail_over(&lab, what, expect, fault));
    }
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
    eprintln!(
        "ha_failover summary: {what}: {trials} trial(s), {server}, client interruption p50 {:.1?} p99 {:.1?}, 0 bytes lost",
        pct(gaps.clone(), 0.5),
        pct(gaps, 0.99)
    );
    let _ = std::fs::remove_file(config);
    lab
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
    let after = ha_status(&lab, Node::B);
    eprintln!("keel ha status on B after the failover:\n{}", after.stdout);
    assert!(after.stdout.contains(&format!("service {GROUP}: served by keel-ha-b since")), "{after:?}");
    assert!(after.stdout.contains("before that by keel-ha-a"), "{after:?}");
    assert!(after.stdout.contains("of keel-ha-a by keel-ha-b"), "the fencing is shown: {after:?}");
    assert!(after.stdout.contains("keel-ha-a OFFLINE"), "{after:?}");
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

#[test]
fn storage_path_loss() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    case("storage path loss", Expect::MovedUnfenced, &|lab| lab.storage_path_loss(Node::A), &|lab| {
        lab.storage_path_repair(Node::A)
    });
}

/// The seed: with the private switch gone, neither node can fence the
/// other, and the service goes on where it is. Not repaired: both nodes'
/// queued fencing would then reach the switches.
#[test]
fn heartbeat_switch_loss() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (lab, config) = lab_serving_from_a();
    fail_over(&lab, "heartbeat switch loss", Expect::StaysOnA, &|lab| lab.heartbeat_switch_down());
    let _ = std::fs::remove_file(config);
}

/// The seeds' warning, shown: an `async` export (refused under [ha]; here
/// [ha] is turned off to allow it) acknowledges FILE_SYNC writes that are
/// only in the active node's memory, and the failover loses them.
#[test]
fn an_async_export_loses_acknowledged_writes_at_failover() {
    if skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (lab, config) = lab_serving_from_a_with(|c| {
        assert!(c.contains("enabled = true") && c.contains("access = \"rw\""), "{c}");
        c.replace("enabled = true", "enabled = false").replace("access = \"rw\"", "access = \"rw\"\nsync = false")
    });
    let (_, check) =
        fail_over_checked(&lab, "async export, crash", Expect::FencedBy(Switch::Ipmi), &|lab| lab.crash(Node::A));
    assert!(!check.status.success(), "an async export kept everything through a power cut?\n{check:?}");
    eprintln!("keel verify check after the failover of an async export:\n{}{}", check.stdout, check.stderr);
    let _ = std::fs::remove_file(config);
}

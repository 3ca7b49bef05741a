//! Locking with the real Linux kernel client (NLM v4 served by Keel, no
//! `nolock`): guests on tap devices of one bridge in a network namespace of
//! the test's own, where Keel listens on 10.0.2.2 and serves the
//! portmapper (the client finds NLM through it, and Keel finds the
//! client's lockd through the guest's). Each guest runs `kstatd` (a minimal
//! rpcbind + rpc.statd, `tools/kernel-nfs-client/kstatd.c`), which the
//! kernel's lockd needs on the client side, and `klock`
//! (`tests/kernel/klock.c`) to take fcntl and flock locks.
//!
//! The VMs run under software emulation on a 2-core machine: one test at a
//! time.

use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use keel_testkit::netns::Netns;
use keel_testkit::server::{ExportOpts, TestServer};

const RUN_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/kernel-nfs-client/run.sh");
const KSTATD_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/kernel-nfs-client/kstatd.c");
const GUEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernel");

static VM: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    VM.lock().unwrap_or_else(|e| e.into_inner())
}

/// kstatd and klock, built static once per server, in its directory
/// (which goes with it: a directory of the test process's own would
/// outlive every test in /tmp).
fn tools(server: &TestServer) -> (PathBuf, PathBuf) {
    let (kstatd, klock) = (server.base.join("kstatd"), server.base.join("klock"));
    if !kstatd.exists() {
        keel_testkit::procs::build_static_c(Path::new(KSTATD_C), &kstatd);
    }
    if !klock.exists() {
        keel_testkit::procs::build_static_c(&Path::new(GUEST).join("klock.c"), &klock);
    }
    (kstatd, klock)
}

/// A namespace with a bridge at 10.0.2.2/24 and `taps` tap devices on it.
fn network(taps: &[&str]) -> Netns {
    let ns = Netns::new("klock");
    ns.run_ok(&["ip", "link", "add", "kbr0", "type", "bridge"]);
    ns.run_ok(&["ip", "addr", "add", "10.0.2.2/24", "dev", "kbr0"]);
    ns.run_ok(&["ip", "link", "set", "kbr0", "up"]);
    for tap in taps {
        ns.run_ok(&["ip", "tuntap", "add", "dev", tap, "mode", "tap"]);
        ns.run_ok(&["ip", "link", "set", tap, "master", "kbr0"]);
        ns.run_ok(&["ip", "link", "set", tap, "up"]);
    }
    ns
}

fn server(tag: &str, ns: &Netns) -> TestServer {
    let rw = "access = \"rw\"\nsquash = \"no_root_squash\"";
    let extra = "portmap = \"serve\"\ngrace_seconds_max = 60";
    TestServer::start_in_netns_with(
        tag,
        vec![ExportOpts::new(1, "export", rw)],
        ns,
        "10.0.2.2:2049".parse().unwrap(),
        extra,
    )
}

/// A guest: tap, address, host name, script (with `replace`d words).
fn guest(
    ns: &Netns,
    server: &TestServer,
    tap: &str,
    ip: &str,
    name: &str,
    script: &str,
    replace: &[(&str, &str)],
) -> Child {
    let (kstatd, klock) = tools(server);
    let mut text = fs::read_to_string(format!("{GUEST}/{script}")).unwrap();
    for (from, to) in replace {
        text = text.replace(from, to);
    }
    let path = server.base.join(format!("{name}-{script}"));
    fs::write(&path, text).unwrap();
    let mut cmd = ns.cmd(&[RUN_SH, "--tap", tap, "--ip", ip, "--hostname", name]);
    cmd.env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .arg("--statd")
        .arg(kstatd)
        .arg("--file")
        .arg(klock)
        .args(["--port", "2049", "--timeout", "400", "--export"])
        .arg(server.export_path(1))
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("run.sh")
}

/// The guest's exit code, output and `RESULT` lines.
fn finish(child: Child) -> (Option<i32>, String, Vec<(String, String)>) {
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let results = text
        .lines()
        .filter_map(|l| l.find("RESULT ").map(|at| &l[at + 7..]))
        .filter_map(|r| r.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect();
    (out.status.code(), text, results)
}

fn result<'a>(results: &'a [(String, String)], key: &str, text: &str) -> &'a str {
    results.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no {key}:\n{text}"))
}

/// Whether a process on the server can take an exclusive OFD lock on the
/// first `len` bytes of `path` (NFS clients' locks are OFD locks too).
fn local_lock_free(path: &Path, len: i64) -> bool {
    let f = fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    // SAFETY: zeroed flock is valid; l_pid 0 as OFD locks require.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_len = len;
    // SAFETY: valid descriptor and flock.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
    r == 0 // closing the file releases it
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Seconds of each grace period the log reports as over.
fn grace_periods(server: &TestServer) -> Vec<f64> {
    server
        .log_text()
        .lines()
        .filter(|l| l.contains("grace period over"))
        .filter_map(|l| l.split("seconds=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Two guests lock the same files at once: counters incremented under
/// fcntl locks and under flock by both lose no increment and every record
/// written under the lock is intact; a lock one guest waits for is
/// granted by callback when the other releases it (well before the
/// client's 30 s poll), and the waiter sees what the holder wrote.
#[test]
fn two_clients_contend_for_the_same_ranges() {
    let _vm = one_at_a_time();
    let ns = network(&["kl0", "kl1"]);
    let server = server("klock-contend", &ns);
    let a = guest(&ns, &server, "kl0", "10.0.2.15", "clienta", "lock_contend.sh", &[("TAGVALUE", "a")]);
    let b = guest(&ns, &server, "kl1", "10.0.2.16", "clientb", "lock_contend.sh", &[("TAGVALUE", "b")]);
    let (ca, ta, ra) = finish(a);
    let (cb, tb, rb) = finish(b);
    assert_eq!((ca, result(&ra, "done", &ta)), (Some(0), "1"), "{ta}");
    assert_eq!((cb, result(&rb, "done", &tb)), (Some(0), "1"), "{tb}");
    let root = server.export_dir(1);
    for file in ["counter", "fcounter"] {
        let text = fs::read_to_string(root.join(file)).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next().unwrap().trim_start_matches('0'), "60", "{file}: an increment was lost:\n{text}");
        let records: Vec<&str> = lines.collect();
        assert_eq!(records.len(), 60, "{file}:\n{text}");
        for (i, r) in records.iter().enumerate() {
            assert!(r.starts_with('a') || r.starts_with('b'), "{file} record {i}: {r:?}");
            assert_eq!(r[7..].parse::<usize>().unwrap(), i, "{file} record {i} written out of turn: {r:?}");
        }
        for tag in ["a", "b"] {
            assert_eq!(records.iter().filter(|r| r.starts_with(tag)).count(), 30, "{file}: {tag}'s records");
        }
    }
    // The holder held the gate 8 s; the waiter waited less than that
    // plus the callback, far less than the 30 s after which it polls.
    let waited: u64 = result(&rb, "waited_ms", &tb).parse().unwrap();
    assert!((1000..20_000).contains(&waited), "waited {waited} ms:\n{tb}");
    assert_eq!(result(&rb, "seen_after_grant", &tb), "held by the holder");
    let log = server.log_text();
    assert!(log.contains("blocked lock granted"), "{log}");
    assert!(!log.contains("GRANTED callback failed") && !log.contains("panicked"), "{log}");
}

/// A guest holds a lock while Keel is killed (-9) and restarted, then
/// stopped cleanly and started again: each time the guest is told
/// (SM_NOTIFY), reclaims its lock in the grace period, the grace period
/// ends early (not at its 60 s ceiling), the lock is held on the server
/// throughout what the test can see, and the guest's lock never failed.
#[test]
fn locks_survive_server_restarts() {
    let _vm = one_at_a_time();
    let ns = network(&["kr0"]);
    let mut server = server("klock-restart", &ns);
    let a = guest(&ns, &server, "kr0", "10.0.2.15", "clienta", "lock_hold.sh", &[("HOLD_SECONDS", "70")]);
    let root = server.export_dir(1);
    wait_for("the guest's lock", Duration::from_secs(180), || root.join("marker").exists());
    assert!(!local_lock_free(&root.join("data"), 100), "the guest's lock is not on the server");
    for (round, clean) in [(1, false), (2, true)] {
        if clean {
            assert!(server.terminate().success());
        } else {
            server.kill9();
        }
        server.start_again();
        wait_for("the end of the grace period", Duration::from_secs(70), || grace_periods(&server).len() == round);
        let took = grace_periods(&server)[round - 1];
        assert!(took < 20.0, "grace period {round} took {took} s");
        assert!(!local_lock_free(&root.join("data"), 100), "restart {round}: the guest did not reclaim its lock");
    }
    let (code, text, results) = finish(a);
    assert_eq!((code, result(&results, "released", &text)), (Some(0), "1"), "{text}");
    assert!(!text.contains("hold_write_errno"), "{text}");
    assert_eq!(fs::read_to_string(root.join("data")).unwrap(), "held by the holder\n");
    let log = server.log_text();
    assert!(log.contains("SM_NOTIFY answered"), "{log}");
}

/// A guest that crashes holding a lock keeps it on the server until it
/// reboots and its status monitor says so; then the lock is gone and the
/// rebooted client takes it again.
#[test]
fn a_client_reboot_releases_its_locks() {
    let _vm = one_at_a_time();
    let ns = network(&["kc0"]);
    let server = server("klock-reboot", &ns);
    let root = server.export_dir(1);
    let crash = guest(&ns, &server, "kc0", "10.0.2.15", "clienta", "lock_crash.sh", &[]);
    let (_, text, results) = finish(crash);
    assert_eq!(result(&results, "done", &text), "1", "{text}");
    assert!(root.join("marker").exists());
    assert!(!local_lock_free(&root.join("data"), 100), "the crashed client's lock is gone before its reboot");
    let reboot = guest(&ns, &server, "kc0", "10.0.2.15", "clienta", "lock_reboot.sh", &[]);
    let (code, text, results) = finish(reboot);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(result(&results, "notified", &text), "1", "{text}");
    assert_eq!(result(&results, "try", &text), "ok", "{text}");
    assert!(server.log_text().contains("client locks released"), "{}", server.log_text());
}

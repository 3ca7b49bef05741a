//! NFSv4.1 state across a restart, with the real Linux kernel client
//! (`tools/kernel-nfs-client`, `--vers 4.2`): a guest holds an fcntl lock
//! and has written with fsync when Keel is killed (-9) and started again
//! on the same state directory. The guest's client finds its client ID
//! stale, reclaims its open and its lock in the grace period (the client
//! records in `state_dir/nfs4-clients` say it may), and sends
//! RECLAIM_COMPLETE, which ends the grace period at once; the lock is held
//! on the server again, the guest's later write succeeds, and no fsynced
//! byte is lost.
//!
//! One boot of the VM. The guest and the test signal each other with empty
//! files in the export (the guest mounts with `lookupcache=none` so that
//! it sees the host's at once, and its polling keeps calls going).

use std::collections::BTreeMap;
use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use keel_testkit::server::{ExportOpts, TestServer};

const RUN_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/kernel-nfs-client/run.sh");
const GUEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernel");
const BOOT_TIMEOUT_S: u32 = 400;
/// The grace period's ceiling: the test waits for its end no longer than
/// this and a margin, and asserts it ended for another reason.
const GRACE_SECONDS_MAX: u64 = 60;

fn results(output: &str) -> BTreeMap<String, String> {
    keel_testkit::procs::guest_results(output)
}

/// v4lock, built static (the guest has no shared libraries).
fn v4lock(dir: &Path) -> PathBuf {
    let out = dir.join("v4lock");
    keel_testkit::procs::build_static_c(Path::new(&format!("{GUEST}/v4lock.c")), &out);
    out
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > timeout {
            return Err(format!("timed out waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Whether a process on the server can take an exclusive OFD lock on all
/// of `path` (Keel holds NFSv4 locks as OFD locks).
fn local_lock_free(path: &Path) -> bool {
    let f = fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    // SAFETY: zeroed flock is valid; l_pid 0 as OFD locks require.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: valid descriptor and flock.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
    r == 0 // closing the file releases it
}

/// The "grace period over" lines of the log: (seconds, why).
fn grace_ends(server: &TestServer) -> Vec<String> {
    server.log_text().lines().filter(|l| l.contains("grace period over")).map(str::to_string).collect()
}

#[test]
fn a_v4_client_keeps_its_lock_and_data_across_a_kill_9() {
    let export = ExportOpts::new(1, "export", "access = \"rw\"\nsquash = \"no_root_squash\"\ninsecure = true");
    let extra = format!("nfs_versions = [\"3\", \"4.1\", \"4.2\"]\ngrace_seconds_max = {GRACE_SECONDS_MAX}");
    let mut server = TestServer::start("nfs4restart", vec![export], &extra);
    let dir = server.export_dir(1);
    let tool = v4lock(&server.base);
    let data = dir.join("data");

    let mut cmd = Command::new(RUN_SH);
    cmd.args(["--port", &server.addr.port().to_string(), "--vers", "4.2", "--export", &server.export_path(1)]);
    cmd.args(["--opts", "lookupcache=none", "--timeout", &BOOT_TIMEOUT_S.to_string(), "--file"]);
    cmd.arg(&tool).arg(Path::new(GUEST).join("nfs4_restart.sh"));
    let guest = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run.sh");

    // What the host sees, checked after the guest is done (so that a
    // failure still shows the guest's output).
    let mut seen = Vec::new();
    let mut host = || -> Result<(), String> {
        wait_for("the guest's lock", Duration::from_secs(u64::from(BOOT_TIMEOUT_S)), || {
            dir.join("guest-holds").exists()
        })?;
        seen.push(format!("lock held before: {}", !local_lock_free(&data)));
        seen.push(format!("data before: {:?}", fs::read_to_string(&data).unwrap_or_default()));
        server.kill9();
        server.start_again();
        let ceiling = Duration::from_secs(GRACE_SECONDS_MAX + 30);
        wait_for("the end of the grace period", ceiling, || !grace_ends(&server).is_empty())?;
        seen.push(format!("lock held after the grace period: {}", !local_lock_free(&data)));
        fs::write(dir.join("host-go"), b"").unwrap();
        Ok(())
    };
    let host_outcome = host();
    if host_outcome.is_err() {
        // Let the guest go, so that it ends.
        let _ = fs::write(dir.join("host-go"), b"");
    }
    let out = guest.wait_with_output().unwrap();
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let g = results(&output);
    let get = |k: &str| g.get(k).map_or("", String::as_str);
    let context = format!("guest:\n{output}\nhost: {seen:#?}\nserver log:\n{}", server.log_text());
    host_outcome.unwrap_or_else(|e| panic!("{e}\n{context}"));
    assert_eq!(get("mount_vers"), "4.2", "{context}");

    let want = [
        "lock held before: true",
        "data before: \"written before the restart\\n\"",
        // Reclaimed: nobody on the server's host could take it.
        "lock held after the grace period: true",
    ];
    assert_eq!(seen, want, "{context}");
    // The guest's write after the restart, its fsync, unlock and close
    // all succeeded: the application saw no error.
    assert!(out.status.success() && get("holdwrite") == "ok" && get("done") == "1", "{context}");
    assert_eq!(
        fs::read_to_string(&data).unwrap(),
        "written before the restart\nwritten after the restart\n",
        "{context}"
    );
    assert!(local_lock_free(&data), "the guest's unlock released the lock\n{context}");
    // One grace period, ended by the client's RECLAIM_COMPLETE (its only
    // client on record), not by its ceiling.
    let ends = grace_ends(&server);
    assert_eq!(ends.len(), 1, "{context}");
    assert!(ends[0].contains("every client reclaimed or is gone"), "{context}");
    let log = server.log_text();
    assert!(!log.contains("panicked"), "{context}");
}

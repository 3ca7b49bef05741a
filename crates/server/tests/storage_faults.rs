//! What clients see when the storage fails, with faults injected into the
//! running server's storage layer through its administration socket
//! (`keel debug fault`): a lost write is never reported as committed, and a
//! worker thread that fails mid-call serves the next call correctly.
//! Clients: the independent `nfs3_client` crate.

use std::os::unix::fs::MetadataExt;
use std::process::Command;

use keel_testkit::nfs::*;
use keel_testkit::server::{ExportOpts, TestServer, keel_bin, run};
use nfs3_client::RpcError;
use nfs3_types::nfs3::*;

const FAULTS_ON: &str = "fault_injection = true";

/// `keel debug fault arm` against `server`.
fn arm(server: &TestServer, args: &[&str]) {
    let config = server.config.display().to_string();
    let mut all = vec!["debug", "fault", "arm", "--config", &config];
    all.extend_from_slice(args);
    run(Command::new(keel_bin()).args(&all));
}

/// `keel status --json` of `server`.
fn status_json(server: &TestServer) -> serde_json::Value {
    keel_json(server, "status")
}

/// `keel COMMAND --json` of `server`.
fn keel_json(server: &TestServer, command: &str) -> serde_json::Value {
    let out = run(Command::new(keel_bin()).args([command, "--json", "--config"]).arg(&server.config));
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("keel {command} --json: {e}: {out}"))
}

/// Restarts `server` with a single worker thread, so that consecutive
/// calls run on the same thread. The new process has nothing cached: the
/// next call on any handle opens it by kernel handle, which needs the
/// worker to become root for a moment.
fn restart_with_one_worker(server: &mut TestServer) {
    server.kill9();
    let text = std::fs::read_to_string(&server.config).unwrap();
    assert!(text.contains("workers = 8"), "the test configuration changed:\n{text}");
    std::fs::write(&server.config, text.replacen("workers = 8", "workers = 1", 1)).unwrap();
    server.start_again();
}

fn verifier_hex(v: &writeverf3) -> String {
    v.0.iter().map(|b| format!("{b:02x}")).collect()
}

async fn write_verf(c: &mut Client, fh: &nfs_fh3, offset: u64, data: &[u8]) -> writeverf3 {
    write(c, fh, offset, data, stable_how::UNSTABLE).await.expect("WRITE").verf
}

/// Linux reports a write-back error once per open file description, and
/// Keel flushes a file through one shared descriptor: after one client's
/// COMMIT failed, another client's COMMIT of the same file would succeed
/// with the old verifier, and that client would never resend data the
/// server lost. The failed flush must change the verifier.
#[tokio::test]
async fn a_failed_commit_changes_the_verifier_for_every_client() {
    let server = TestServer::start("verf-fsync", vec![ExportOpts::rw(1, "export")], FAULTS_ON);
    let (mut a, root) = mount_root(&server, 1).await;
    let (mut b, _) = mount_root(&server, 1).await;
    let (file, _) = create_file(&mut a, &root, b"shared", 0o644).await;
    let v1 = write_verf(&mut a, &file, 0, b"client a's data").await;
    assert_eq!(write_verf(&mut b, &file, 4096, b"client b's data").await, v1);
    let ino = meta(&server.export_dir(1).join("shared")).ino();

    arm(&server, &["--point", "fsync", "--inode", &ino.to_string(), "--errno", "5"]);
    assert_eq!(status(&commit(&mut a, &file).await), nfsstat3::NFS3ERR_IO, "the failed flush is reported");
    let v2 = commit(&mut b, &file).await.expect("COMMIT after the failure").verf;
    assert_ne!(v2, v1, "client b's unstable data may be lost: the verifier must have changed");
    assert_eq!(status_json(&server)["write_verifier"], verifier_hex(&v2), "keel status shows the new verifier");

    // Both clients resend under the new verifier, and it sticks.
    assert_eq!(write_verf(&mut a, &file, 0, b"client a's data").await, v2);
    assert_eq!(write_verf(&mut b, &file, 4096, b"client b's data").await, v2);
    assert_eq!(commit(&mut a, &file).await.expect("COMMIT").verf, v2);
    assert_eq!(commit(&mut b, &file).await.expect("COMMIT").verf, v2);
}

/// On a `sync` export a namespace call syncs its directory, and a file it
/// created, itself (outside the group commit): a failure of either sync
/// still fails the call with NFS3ERR_IO and changes the write verifier.
#[tokio::test]
async fn a_failed_sync_of_a_directory_or_a_new_file_fails_the_call_and_changes_the_verifier() {
    let server = TestServer::start("verf-dir-fsync", vec![ExportOpts::rw(1, "export")], FAULTS_ON);
    let (mut c, root) = mount_root(&server, 1).await;
    let (kept, _) = create_file(&mut c, &root, b"kept", 0o644).await;
    create_file(&mut c, &root, b"doomed", 0o644).await;
    let v1 = write_verf(&mut c, &kept, 0, b"unstable").await;

    let root_ino = meta(&server.export_dir(1)).ino();
    arm(&server, &["--point", "fsync", "--inode", &root_ino.to_string(), "--errno", "5"]);
    assert_eq!(status(&remove(&mut c, &root, b"doomed").await), nfsstat3::NFS3ERR_IO, "the directory's sync failed");
    let v2 = write_verf(&mut c, &kept, 0, b"unstable").await;
    assert_ne!(v2, v1, "a failed sync changes the verifier");

    // The first sync of a CREATE is the new file's.
    arm(&server, &["--point", "fsync", "--errno", "5"]);
    let how = createhow3::UNCHECKED(sattr3::default());
    assert_eq!(status(&create(&mut c, &root, b"new", how).await), nfsstat3::NFS3ERR_IO, "the new file's sync failed");
    let v3 = write_verf(&mut c, &kept, 0, b"unstable").await;
    assert_ne!(v3, v2, "a failed sync changes the verifier");

    // Nothing is armed any more: the next namespace call goes through.
    create_file(&mut c, &root, b"after", 0o644).await;
    assert_eq!(commit(&mut c, &kept).await.expect("COMMIT").verf, v3);
}

/// A failed write may have taken earlier acknowledged data with it (a
/// synchronous write reports the file's earlier write-back errors), so it
/// changes the verifier too; an error that says nothing about the storage
/// (EAGAIN, answered as JUKEBOX) does not.
#[tokio::test]
async fn a_failed_write_changes_the_verifier_but_a_transient_error_does_not() {
    let server = TestServer::start("verf-write", vec![ExportOpts::rw(1, "export")], FAULTS_ON);
    let (mut c, root) = mount_root(&server, 1).await;
    let (file, _) = create_file(&mut c, &root, b"f", 0o644).await;
    let v1 = write_verf(&mut c, &file, 0, b"unstable").await;

    arm(&server, &["--point", "pwrite", "--errno", "11"]);
    assert_eq!(status(&write(&mut c, &file, 0, b"x", stable_how::FILE_SYNC).await), nfsstat3::NFS3ERR_JUKEBOX);
    assert_eq!(write_verf(&mut c, &file, 0, b"unstable").await, v1, "EAGAIN loses nothing");

    arm(&server, &["--point", "pwrite", "--errno", "5"]);
    assert_eq!(status(&write(&mut c, &file, 0, b"x", stable_how::FILE_SYNC).await), nfsstat3::NFS3ERR_IO);
    let v2 = write_verf(&mut c, &file, 0, b"unstable").await;
    assert_ne!(v2, v1, "after a failed write the client must resend what it had not committed");
    assert_eq!(commit(&mut c, &file).await.expect("COMMIT").verf, v2);
}

/// Faults can only be armed when the configuration allows it.
#[test]
fn fault_injection_is_off_unless_configured() {
    let server = TestServer::start("faults-off", vec![ExportOpts::rw(1, "export")], "");
    let out = Command::new(keel_bin())
        .args(["debug", "fault", "arm", "--point", "fsync", "--errno", "5", "--config"])
        .arg(&server.config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("fault_injection = true"), "{text}");
}

/// A handle from a client the export's client list does not admit is
/// refused before the server opens it (as root).
#[tokio::test]
async fn a_handle_is_checked_against_the_client_list_before_it_is_opened() {
    let exports = vec![ExportOpts::rw(1, "open"), ExportOpts::rw(2, "closed")];
    let mut server = TestServer::start("admit-first", exports, "");
    let (mut c, root) = mount_root(&server, 2).await;
    let (file, _) = create_file(&mut c, &root, b"kept", 0o644).await;
    drop(c);
    // The same handle key and file system, but export 2 no longer admits
    // this host: the handle is well-formed and still names the file.
    server.kill9();
    let text = std::fs::read_to_string(&server.config).unwrap();
    let closed = format!("path = \"{}\"", server.export_path(2));
    let (head, tail) = text.split_at(text.find(&closed).unwrap());
    let tail = tail.replacen("host = \"*\"", "host = \"192.0.2.1\"", 1);
    std::fs::write(&server.config, format!("{head}{tail}")).unwrap();
    server.start_again();

    let (mut c, _) = mount_root(&server, 1).await;
    let open_before = status_json(&server)["cached_inodes"].clone();
    assert_eq!(status(&getattr(&mut c, &file).await), nfsstat3::NFS3ERR_ACCES);
    assert_eq!(status_json(&server)["cached_inodes"], open_before, "the refused handle was opened");
}

/// With one worker thread, a call whose identity cannot be assumed (uid
/// 4294967295) fails, and the thread is back to a known state for the
/// next call: opening a handle by kernel handle (as root) works, and the
/// next caller acts as itself.
#[tokio::test]
async fn a_failed_identity_switch_leaves_the_worker_usable() {
    let mut server = TestServer::start("ident-fail", vec![ExportOpts::rw(1, "export")], "");
    let (mut c, root) = mount_root(&server, 1).await;
    let (file, _) = create_file(&mut c, &root, b"f", 0o644).await;
    let (other, _) = create_file(&mut c, &root, b"other", 0o644).await;
    drop(c);
    restart_with_one_worker(&mut server);

    let mut user = nfs_client(&server, cred(1000, 1000), true).await;
    assert_eq!(status(&access(&mut user, &file, ACCESS3_READ).await), nfsstat3::NFS3_OK);
    let mut bad = nfs_client(&server, cred(u32::MAX, u32::MAX), true).await;
    assert_eq!(status(&access(&mut bad, &file, ACCESS3_READ).await), nfsstat3::NFS3ERR_PERM);
    let mut next = nfs_client(&server, cred(1001, 1001), true).await;
    assert_eq!(status(&getattr(&mut next, &other).await), nfsstat3::NFS3_OK, "uncached handle after the failure");
    let (made, attrs) = create_file(&mut next, &root, b"by-1001", 0o644).await;
    assert_eq!((attrs.uid, attrs.gid), (1001, 1001), "the next caller acts as itself");
    drop(made);
}

/// A worker that panics in the middle of a call (an injected panic in the
/// storage layer) answers SYSTEM_ERR, and its next call runs as the next
/// caller, not with what the panicking call left behind.
#[tokio::test]
async fn a_worker_that_panics_mid_call_serves_the_next_caller_as_itself() {
    let mut server = TestServer::start("ident-panic", vec![ExportOpts::rw(1, "export")], FAULTS_ON);
    let dir = server.export_dir(1);
    let (mut c, root) = mount_root(&server, 1).await;
    let (file, _) = create_file(&mut c, &root, b"writable", 0o666).await;
    let (group_only, _) = create_file(&mut c, &root, b"group-5000", 0o060).await;
    chown(&dir.join("group-5000"), 0, 5000);
    let (other, _) = create_file(&mut c, &root, b"other", 0o644).await;
    drop(c);
    restart_with_one_worker(&mut server);

    arm(&server, &["--point", "pwrite", "--panic"]);
    let mut member = nfs_client(&server, cred_groups(1001, 1001, &[5000]), true).await;
    match bounded(
        "WRITE",
        member.write(&WRITE3args {
            file: file.clone(),
            offset: 0,
            count: 4,
            stable: stable_how::FILE_SYNC,
            data: nfs3_types::xdr_codec::Opaque::borrowed(b"boom"),
        }),
    )
    .await
    {
        Err(RpcError::SystemErr) => {}
        other => panic!("the panicking WRITE answered {other:?}"),
    }
    let mut outsider = nfs_client(&server, cred(1002, 1002), true).await;
    assert_eq!(status(&getattr(&mut outsider, &other).await), nfsstat3::NFS3_OK, "uncached handle after the panic");
    assert_eq!(
        status(&read(&mut outsider, &group_only, 0, 10).await),
        nfsstat3::NFS3ERR_ACCES,
        "group 5000 of the panicking caller must not linger"
    );
    assert_eq!(status(&read(&mut member, &group_only, 0, 10).await), nfsstat3::NFS3_OK);
    assert!(server.log_text().contains("injected panic"), "the panic is logged");
}

/// Calls that arrive together are taken together and run one after another
/// on one worker, their replies sent in one write. A call among them that
/// stalls in storage must not hold up the calls behind it: one that says it
/// waits (a COMMIT, whose fsync stalls here) hands them on at once, and one
/// that does not (an UNSTABLE WRITE, whose pwrite stalls) is found by the
/// transport's watch. Either way the calls behind it are answered first.
#[test]
fn calls_that_arrive_together_do_not_wait_behind_a_stalled_one() {
    let server = TestServer::start("stall", vec![ExportOpts::rw(1, "export")], FAULTS_ON);
    let mut nfs = Nfs::connect(server.addr).unwrap();
    let root = nfs.mount(&server.export_path(1)).unwrap();
    let file = nfs.create_new(&root, "f").unwrap();
    for point in ["fsync", "pwrite"] {
        arm(&server, &["--point", point, "--stall-ms", "2000"]);
        nfs.conn.hold();
        let stalled = match point {
            "fsync" => nfs.send_commit(&file),
            _ => nfs.send_write(&file, 0, b"data", stable_how::UNSTABLE),
        }
        .unwrap();
        let behind: Vec<u32> = (0..6).map(|_| nfs.send_getattr(&root).unwrap()).collect();
        nfs.conn.release().unwrap();
        let answered: Vec<u32> = (0..7).map(|_| nfs.conn.recv().expect("a reply").0).collect();
        assert_eq!(
            answered.last(),
            Some(&stalled),
            "with a stalled {point}, the calls behind it ({behind:x?}) waited for it: replies in the order {answered:x?}"
        );
        let mut rest = answered[..6].to_vec();
        rest.sort_unstable();
        assert_eq!(rest, behind, "with a stalled {point}: replies {answered:x?}");
    }
    assert_eq!(nfs.read(&file, 0, 16).unwrap().0, b"data", "the stalled WRITE went on and wrote");
}

#[test]
fn a_stall_fault_is_refused_with_an_errno_and_beyond_a_minute() {
    let server = TestServer::start("stall-args", vec![ExportOpts::rw(1, "export")], FAULTS_ON);
    let config = server.config.display().to_string();
    for (args, expect) in [
        (&["--stall-ms", "60001"][..], "1 to 60000 ms"),
        (&["--stall-ms", "0"][..], "1 to 60000 ms"),
        (&["--stall-ms", "10", "--errno", "5"][..], "cannot be used with"),
    ] {
        let out = Command::new(keel_bin())
            .args(["debug", "fault", "arm", "--point", "pwrite", "--config", &config])
            .args(args)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success() && text.contains(expect), "{args:?}: {text}");
    }
}

/// Calls that wait in storage without saying so, one in each of the places
/// a worker may run in (as many as CPUs, at most 7 here: the server has 8
/// workers), must not stop other clients: the transport lends a parked
/// worker a place once every place is stuck.
#[test]
fn calls_stuck_in_every_place_do_not_stop_other_clients() {
    const STALL_MS: u64 = 5000;
    let server = TestServer::start("stuck", vec![ExportOpts::rw(1, "export")], FAULTS_ON);
    let stuck = std::thread::available_parallelism().map_or(1, usize::from).min(7);
    let mut writers: Vec<(Nfs, Fh)> = (0..stuck)
        .map(|i| {
            let mut nfs = Nfs::connect(server.addr).unwrap();
            let root = nfs.mount(&server.export_path(1)).unwrap();
            let file = nfs.create_new(&root, &format!("f{i}")).unwrap();
            (nfs, file)
        })
        .collect();
    let mut other = Nfs::connect(server.addr).unwrap();
    let root = other.mount(&server.export_path(1)).unwrap();
    arm(&server, &["--point", "pwrite", "--stall-ms", &STALL_MS.to_string(), "--count", &stuck.to_string()]);
    let since = std::time::Instant::now();
    for (nfs, file) in &mut writers {
        nfs.send_write(file, 0, b"data", stable_how::UNSTABLE).unwrap();
    }
    // Every stalled WRITE has reached its pwrite.
    std::thread::sleep(std::time::Duration::from_millis(300));
    other.getattr(&root).expect("GETATTR while every place is stuck");
    let mut late = Nfs::connect(server.addr).unwrap();
    late.mount(&server.export_path(1)).expect("a new connection's MOUNT while every place is stuck");
    let waited = since.elapsed();
    assert!(
        waited < std::time::Duration::from_millis(STALL_MS),
        "another client waited for the {stuck} stalled WRITEs: answered after {waited:?}"
    );
    let stats = keel_json(&server, "stat");
    let workers = &stats["workers"];
    if workers["places"].as_u64() <= Some(stuck as u64) {
        assert!(workers["places_lent"].as_u64() >= Some(1), "every place was stuck, yet none was lent: {workers}");
    }
    for (nfs, file) in &mut writers {
        let (_, written) = nfs.recv_write().unwrap();
        assert_eq!(written.expect("the stalled WRITE").count, 4);
        assert_eq!(nfs.read(file, 0, 16).unwrap().0, b"data", "the stalled WRITE went on and wrote");
    }
}

/// Voluntary context switches of each of the server's worker threads, by
/// thread name.
fn worker_switches(server: &TestServer) -> std::collections::HashMap<String, u64> {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", server.pid())).expect("the server's threads");
    tasks
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            let status = std::fs::read_to_string(dir.join("status")).ok()?;
            let switches = status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?;
            let switches = switches.trim().parse().ok()?;
            comm.starts_with("keel-worker-").then(|| (comm.trim().to_string(), switches))
        })
        .collect()
}

/// A worker whose call waits for a sync (a CREATE on a `sync` export) gives
/// its place up; while another worker that holds a place waits for calls,
/// that one takes what arrives, and no parked worker is woken for it. From
/// one client at one call in flight, every CREATE used to wake a parked
/// worker that only went to wait for calls beside the idle one, and the
/// syncing worker parked after its reply: every worker of the pool woke
/// about once per CREATE, each in turn (docs/benchmarks.md, durable
/// metadata). A count of the workers' sleeps, not a time.
#[test]
fn a_call_that_waits_for_a_sync_wakes_no_parked_worker_while_another_waits_for_calls() {
    const CREATES: u64 = 64;
    // The two workers that hold places and the sentinel (places.rs), which
    // looks every millisecond while calls run, may sleep any number of
    // times; the others (5 of the test servers' 8 workers) used to sleep
    // once per CREATE each.
    const BUSIEST: usize = 3;
    const OTHERS_SLEEPS_MAX: u64 = CREATES / 4;
    if std::thread::available_parallelism().map_or(1, usize::from) < 2 {
        eprintln!("one CPU, one place, held by the syncing worker: a parked worker must take calls meanwhile");
        return;
    }
    let server = TestServer::start("sync-handoff", vec![ExportOpts::rw(1, "export")], "");
    let mut nfs = Nfs::connect(server.addr).unwrap();
    let root = nfs.mount(&server.export_path(1)).unwrap();
    nfs.create_new(&root, "warm").unwrap();
    let before = worker_switches(&server);
    for i in 0..CREATES {
        nfs.create_new(&root, &format!("f{i}")).unwrap();
    }
    let mut slept: Vec<(u64, String)> = worker_switches(&server)
        .into_iter()
        .map(|(name, n)| (n - before.get(&name).copied().unwrap_or(0), name))
        .collect();
    slept.sort_unstable_by(|a, b| b.cmp(a));
    let others: u64 = slept.iter().skip(BUSIEST).map(|(n, _)| n).sum();
    assert!(
        others <= OTHERS_SLEEPS_MAX,
        "{CREATES} CREATEs from one client at a time: the workers beyond the {BUSIEST} busiest slept {others} times \
         (sleeps per worker: {slept:?})"
    );
}

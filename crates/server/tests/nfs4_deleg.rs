//! Read delegations end to end, against the `keel` binary over TCP: an
//! NFSv4.1 client (keel-testkit's, built from keel-nfs4-proto; it answers
//! the server's callbacks on its own connection, as the Linux client does)
//! opens and reads a file and gets a read delegation; an NFSv3 client
//! writes the file and gets NFS3ERR_JUKEBOX while the server recalls the
//! delegation with CB_RECALL on the v4 client's connection; the v4 client
//! returns it; the v3 write goes through; the v4 client reads the new
//! data. This is the path the handler tests do not take: the callbacks
//! and their replies through the real transport and the dispatcher's
//! reply router. Then the same with the Linux kernel client in the qemu
//! guest of `tools/kernel-nfs-client` holding the delegation, and that
//! client seeing a local chmod and rename of files it holds delegations on
//! (which break no lease: the server's inotify watch recalls them); and
//! the kernel client holding a write delegation, unflushed data and a lock
//! it took locally, which a local reader and another client recall. And
//! CB_GETATTR (RFC 8881 section 10.4.3): another client's GETATTR of the
//! size of a write-delegated file answered with what the holder says,
//! the testkit client's and the kernel client's (and its READDIR and
//! VERIFY of it, the kernel client's). And a file the testkit
//! client created through Keel, read-delegated by its first OPEN, whose
//! holder's own SETATTR keeps the delegation while a local chmod recalls
//! it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use keel_nfs4_proto::*;
use keel_testkit::nfs::{Nfs, nfsstat3, stable_how};
use keel_testkit::nfs4::{V4, WAIT, data_of, putfh, read};
use keel_testkit::server::{ExportOpts, TestServer};

#[test]
fn an_nfsv3_write_recalls_a_read_delegation_and_the_v4_client_then_reads_the_new_data() {
    keel_testkit::server::require_root();
    let server = TestServer::start(
        "nfs4-deleg",
        vec![ExportOpts::rw(1, "export")],
        "nfs_versions = [\"3\", \"4.1\"]\nnfs4_read_delegations = true",
    );
    std::fs::write(server.export_dir(1).join("f"), b"old data").unwrap();

    let mut v4 = V4::connect(&server, b"deleg-test");
    let (open, fh, deleg) = open_delegated(&mut v4, &server);

    // The v3 client writes the file: it is told to come back later while
    // the delegation is recalled.
    let mut v3 = Nfs::connect(server.addr).unwrap();
    assert_eq!(v3.write(&fh, 0, b"NEW", stable_how::FILE_SYNC).unwrap_err(), nfsstat3::NFS3ERR_JUKEBOX);
    assert_eq!(std::fs::read(server.export_dir(1).join("f")).unwrap(), b"old data", "not written yet");
    // The recall reaches the v4 client on its connection (the next reply
    // it reads comes after it), which returns the delegation.
    let start = Instant::now();
    while v4.recalled.is_empty() {
        assert!(start.elapsed() < WAIT, "no CB_RECALL");
        v4.run(vec![]);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(v4.recalled, vec![deleg]);
    v4.ok(vec![putfh(&fh), NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid: deleg })]);

    // The v3 write goes through now, and the v4 client reads it.
    v3.write(&fh, 0, b"NEW", stable_how::FILE_SYNC).unwrap();
    let res = v4.ok(vec![putfh(&fh), read(open.stateid)]);
    assert_eq!(&data_of(&res[2])[..], b"NEW data");
}

/// Opens `f` (holding "old data") for reading, which must come with a read
/// delegation, and reads it: the open, the file's handle and the
/// delegation's stateid.
fn open_delegated(v4: &mut V4, server: &TestServer) -> (Open4ResOk, bytes::Bytes, Stateid4) {
    let (open, fh) = v4.open_read(server, 1, b"owner", "f");
    let OpenDelegation4::OpenDelegateRead(deleg) = &open.delegation else {
        panic!("no read delegation: {:?}", open.delegation)
    };
    let deleg = deleg.stateid;
    let res = v4.ok(vec![putfh(&fh), read(open.stateid)]);
    assert_eq!(&data_of(&res[2])[..], b"old data");
    (open, fh, deleg)
}

/// Delegations the server's clients hold (`keel clients --json`).
fn delegations_held(server: &TestServer) -> u64 {
    let mut cmd = Command::new(keel_testkit::server::keel_bin());
    cmd.args(["clients", "--json"]).arg("--config").arg(&server.config);
    let out = keel_testkit::procs::run_timeout(&mut cmd, WAIT);
    assert!(out.status.success(), "keel clients: {}", out.text());
    let listed: serde_json::Value = serde_json::from_str(&out.stdout).expect("keel clients --json is JSON");
    listed.as_array().expect("a list").iter().map(|c| c["delegations"].as_u64().unwrap_or(0)).sum()
}

/// Opens `path` for writing and writes `data` at its start, as a local
/// process on the server would, on a thread of its own (the open waits
/// while a lease on the file is held): the receiver gets the outcome.
fn local_write(path: std::path::PathBuf, data: &'static [u8]) -> std::sync::mpsc::Receiver<std::io::Result<()>> {
    let (done, written) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, data));
        let _ = done.send(r);
    });
    written
}

/// A server of NFSv4.1 alone with read delegations, one export.
fn v41_server_with_delegations(tag: &str) -> TestServer {
    keel_testkit::server::require_root();
    TestServer::start(tag, vec![ExportOpts::rw(1, "export")], "nfs_versions = [\"4.1\"]\nnfs4_read_delegations = true")
}

#[test]
fn a_local_process_s_write_recalls_a_read_delegation_and_the_v4_client_then_reads_the_new_data() {
    let server = v41_server_with_delegations("nfs4-deleg-local");
    let path = server.export_dir(1).join("f");
    std::fs::write(&path, b"old data").unwrap();
    let mut v4 = V4::connect(&server, b"deleg-local");
    let (open, fh, deleg) = open_delegated(&mut v4, &server);

    // A local process opens f for writing: the server's lease on it
    // breaks, the delegation is recalled, and the process waits.
    let written = local_write(path.clone(), b"NEW");
    let start = Instant::now();
    while v4.recalled.is_empty() {
        assert!(start.elapsed() < WAIT, "no CB_RECALL after a local open for writing");
        v4.run(vec![]);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(v4.recalled, vec![deleg]);
    assert!(written.try_recv().is_err(), "the local writer waits for the delegation's return");
    assert_eq!(std::fs::read(&path).unwrap(), b"old data", "not written yet");
    v4.ok(vec![putfh(&fh), NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid: deleg })]);

    // Returned: the local write goes through, and the client reads it.
    written.recv_timeout(WAIT).expect("the local writer went on once the delegation was returned").unwrap();
    let res = v4.ok(vec![putfh(&fh), read(open.stateid)]);
    assert_eq!(&data_of(&res[2])[..], b"NEW data");
}

/// Opens `path` for writing, as a local process on the server would, on
/// a thread of its own (the open waits while a lease on the file is held),
/// and tries an exclusive lock (OFD, as Keel's) on bytes `range`: the
/// receiver gets whether the lock was had.
fn local_open_and_lock(path: std::path::PathBuf, range: (i64, i64)) -> std::sync::mpsc::Receiver<bool> {
    let (done, locked) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let _ = done.send(ofd_write_lock(&f, libc::F_OFD_SETLK, range).0 == 0);
    });
    locked
}

/// fcntl `cmd` (F_OFD_SETLK or F_OFD_GETLK) of an exclusive lock on
/// bytes `range` of `f`: its return and the flock it filled in.
fn ofd_write_lock(f: &std::fs::File, cmd: libc::c_int, range: (i64, i64)) -> (libc::c_int, libc::flock) {
    use std::os::fd::AsRawFd;
    // SAFETY: zeroed flock is valid; l_pid 0 as OFD locks require.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    (fl.l_start, fl.l_len) = range;
    // SAFETY: valid descriptor and flock.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), cmd, &mut fl) };
    (r, fl)
}

/// A client returning a read delegation sends the read locks its
/// processes took under it, one lock owner each. A local process that
/// waits to open the file for writing (and then lock it) must not get in
/// between two of those LOCKs: the lease stays until the DELEGRETURN, and
/// the second owner's read lock is taken through the lease's description
/// too, which the store lends to each lock owner of the holder's.
#[test]
fn a_second_lock_owner_s_read_lock_during_a_recall_is_taken_before_a_local_writer_gets_in() {
    let server = v41_server_with_delegations("nfs4-deleg-two-owners");
    let path = server.export_dir(1).join("f");
    std::fs::write(&path, b"old data").unwrap();
    let mut v4 = V4::connect(&server, b"deleg-two-owners");
    let (open, fh, deleg) = open_delegated(&mut v4, &server);

    let locked = local_open_and_lock(path.clone(), (4, 4));
    let start = Instant::now();
    while v4.recalled.is_empty() {
        assert!(start.elapsed() < WAIT, "no CB_RECALL after a local open for writing");
        v4.run(vec![]);
        std::thread::sleep(Duration::from_millis(20));
    }
    let lock = |owner, offset| lock_by_new_owner(open.stateid, owner, NfsLockType4::ReadLt, offset, 4);
    v4.ok(vec![putfh(&fh), lock(b"first process", 0)]);
    assert!(
        locked.recv_timeout(Duration::from_millis(500)).is_err(),
        "the local process got in after the first LOCK, before the second"
    );
    v4.ok(vec![putfh(&fh), lock(b"second process", 4)]);
    v4.ok(vec![putfh(&fh), NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid: deleg })]);
    let had = locked.recv_timeout(WAIT).expect("the local process went on once the delegation was returned");
    assert!(!had, "the local process locked bytes the second owner holds");
}

/// A LOCK of a new lock owner of `open`'s, over `length` bytes from
/// `offset`.
fn lock_by_new_owner(
    open: Stateid4,
    owner: &'static [u8],
    locktype: NfsLockType4,
    offset: u64,
    length: u64,
) -> NfsArgop4 {
    NfsArgop4::Lock(Lock4Args {
        locktype,
        reclaim: false,
        offset,
        length,
        locker: Locker4::OpenOwner(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: LockOwner4 { clientid: 0, owner: keel_xdr::Opaque(bytes::Bytes::from_static(owner)) },
        }),
    })
}

/// Whether a process on the server could write-lock `len` bytes of
/// `path` from `start` now (F_OFD_GETLK: nothing is taken).
fn local_range_free(path: &Path, start: i64, len: i64) -> bool {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let (r, fl) = ofd_write_lock(&f, libc::F_OFD_GETLK, (start, len));
    assert_eq!(r, 0, "F_OFD_GETLK: {}", std::io::Error::last_os_error());
    fl.l_type == libc::F_UNLCK as libc::c_short
}

/// The same for a write delegation, whose processes send write locks: no
/// lock owner can open a description of its own while the write lease
/// stands (any open breaks it), so every one of them locks through the
/// lease's description, and Keel arbitrates among them as the kernel
/// does among descriptions: another owner's LOCK over the first's range
/// is denied, naming the first, and the first's LOCKU leaves the
/// second's range locked.
#[test]
fn a_second_lock_owner_s_write_lock_during_a_recall_is_taken_before_a_local_locker_gets_in() {
    use std::os::unix::fs::OpenOptionsExt;
    let server = v41_server_with_write_delegations("nfs4-wdeleg-two-owners");
    let path = server.export_dir(1).join("w");
    let mut holder = V4::connect(&server, b"wdeleg-two-owners");
    holder.wait_for_callback_path();
    let mut ops = export_lookups(&server);
    ops.extend([open_creating_for_write_delegation("w", Fattr4::default()), NfsArgop4::Getfh(())]);
    let res = holder.ok(ops);
    let n = res.len();
    let NfsResop4::Open(Nfs4Result::Ok(open)) = &res[n - 2] else { panic!("OPEN: {res:?}") };
    let OpenDelegation4::OpenDelegateWrite(deleg) = &open.delegation else {
        panic!("no write delegation: {:?}", open.delegation)
    };
    let (open, deleg) = (open.stateid, deleg.stateid);
    let NfsResop4::Getfh(Nfs4Result::Ok(fh)) = &res[n - 1] else { panic!("GETFH: {res:?}") };
    let fh = fh.object.0.clone();

    let locked = local_open_and_lock(path.clone(), (4, 4));
    let start = Instant::now();
    while holder.recalled.is_empty() {
        assert!(start.elapsed() < WAIT, "no CB_RECALL after a local open for writing");
        holder.run(vec![]);
        std::thread::sleep(Duration::from_millis(20));
    }
    let res = holder.ok(vec![putfh(&fh), lock_by_new_owner(open, b"first process", NfsLockType4::WriteLt, 0, 4)]);
    let NfsResop4::Lock(Lock4Res::Ok(first)) = &res[2] else { panic!("LOCK: {res:?}") };
    let first = first.lock_stateid;
    assert!(
        locked.recv_timeout(Duration::from_millis(500)).is_err(),
        "the local process got in after the first LOCK, before the second"
    );
    holder.ok(vec![putfh(&fh), lock_by_new_owner(open, b"second process", NfsLockType4::WriteLt, 4, 4)]);
    // The race the local process may lose or win aside: the lease stands.
    let local_open = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&path);
    let refused = local_open.map(drop).expect_err("the lease went at the second owner's LOCK");
    assert_eq!(refused.raw_os_error(), Some(libc::EWOULDBLOCK), "{refused}");
    let (_, res) = holder.run(vec![putfh(&fh), lock_by_new_owner(open, b"third process", NfsLockType4::ReadLt, 2, 4)]);
    let NfsResop4::Lock(Lock4Res::Denied(denied)) = &res.resarray[2] else {
        panic!("LOCK over two owners' locks: {res:?}")
    };
    assert_eq!((denied.offset, denied.length, &denied.owner.owner.0[..]), (0, 4, &b"first process"[..]));
    holder.ok(vec![putfh(&fh), NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid: deleg })]);
    let had = locked.recv_timeout(WAIT).expect("the local process went on once the delegation was returned");
    assert!(!had, "the local process locked bytes the second owner holds");

    assert!(!local_range_free(&path, 0, 4) && !local_range_free(&path, 4, 4), "both owners' locks hold");
    let unlock = Locku4Args { locktype: NfsLockType4::WriteLt, seqid: 0, lock_stateid: first, offset: 0, length: 8 };
    holder.ok(vec![putfh(&fh), NfsArgop4::Locku(unlock)]);
    assert!(local_range_free(&path, 0, 4), "the first owner's lock went with its LOCKU");
    assert!(!local_range_free(&path, 4, 4), "the first owner's LOCKU over the second's range left that lock");
}

#[test]
fn no_read_delegation_is_offered_on_a_file_a_local_process_has_open_for_writing() {
    let server = v41_server_with_delegations("nfs4-deleg-busy");
    let path = server.export_dir(1).join("f");
    std::fs::write(&path, b"data").unwrap();
    let writer = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let mut v4 = V4::connect(&server, b"deleg-busy");
    let (open, _) = v4.open_read(&server, 1, b"owner", "f");
    assert!(
        matches!(open.delegation, OpenDelegation4::OpenDelegateNone | OpenDelegation4::OpenDelegateNoneExt(_)),
        "a delegation on a file open for writing: {:?}",
        open.delegation
    );
    drop(writer);
    let (open, _) = v4.open_read(&server, 1, b"owner2", "f");
    assert!(matches!(open.delegation, OpenDelegation4::OpenDelegateRead(_)), "{:?}", open.delegation);
}

/// Fresh sessions opened one after another, in
/// [`a_fresh_session_s_first_open_gets_a_read_delegation_every_time`].
const FRESH_SESSIONS: usize = 20;

#[test]
fn a_fresh_session_s_first_open_gets_a_read_delegation_every_time() {
    let server = v41_server_with_delegations("nfs4-deleg-fresh");
    std::fs::write(server.export_dir(1).join("f"), b"data").unwrap();
    for i in 0..FRESH_SESSIONS {
        let owner: &'static [u8] = format!("fresh-{i}").leak().as_bytes();
        // The backchannel's probe comes before CREATE_SESSION's reply;
        // the client's answer goes out with its OPEN, in one write on the
        // same connection: the server reads both at once, and the OPEN
        // must see the path up, whether or not the server's callback
        // thread has taken the answer yet.
        let mut v4 = V4::connect_answering_with_calls(&server, owner);
        assert_eq!(v4.probes, 1, "the probe was answered before the OPEN was sent");
        let (open, _) = v4.open_read(&server, 1, b"owner", "f");
        assert!(
            matches!(open.delegation, OpenDelegation4::OpenDelegateRead(_)),
            "session {i}: no read delegation: {:?}",
            open.delegation
        );
    }
}

const RUN_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/kernel-nfs-client/run.sh");
const GUEST_SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernel");
const BOOT_TIMEOUT_S: u32 = 300;

/// Boots the guest with export 1 of `server` mounted with `vers=4.1` and
/// runs `script`: its exit code, output and `RESULT key=value` lines.
fn run_guest(server: &TestServer, script: &str) -> (Option<i32>, String, BTreeMap<String, String>) {
    let mut cmd = Command::new(RUN_SH);
    cmd.arg("--port").arg(server.addr.port().to_string());
    cmd.arg("--vers").arg("4.1").arg("--export").arg(server.export_path(1));
    cmd.arg("--timeout").arg(BOOT_TIMEOUT_S.to_string());
    cmd.arg(Path::new(GUEST_SCRIPTS).join(script));
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {RUN_SH}: {e}"));
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let results = keel_testkit::procs::guest_results(&output);
    (out.status.code(), output, results)
}

/// Writes `data` at the start of `name` with the NFSv3 client, retrying
/// while the server answers NFS3ERR_JUKEBOX: how many times it did.
fn v3_write_retrying(v3: &mut Nfs, dir: &[u8], name: &str, data: &[u8]) -> u32 {
    let fh = v3.lookup(dir, name).unwrap();
    let start = Instant::now();
    let mut jukebox = 0;
    loop {
        match v3.write(&fh, 0, data, stable_how::FILE_SYNC) {
            Ok(_) => return jukebox,
            Err(nfsstat3::NFS3ERR_JUKEBOX) => jukebox += 1,
            Err(e) => panic!("NFSv3 WRITE of {name}: {e:?}"),
        }
        assert!(start.elapsed() < Duration::from_secs(120), "the recall of {name}'s delegation never ended");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the guest script created `ready` in the export `dir`
/// (failing if the guest ended first or never got there).
fn wait_for_ready<T>(dir: &std::path::Path, guest: &std::thread::ScopedJoinHandle<'_, T>) {
    let start = Instant::now();
    while !dir.join("ready").exists() {
        assert!(!guest.is_finished(), "the guest ended before it was ready");
        assert!(start.elapsed() < Duration::from_secs(u64::from(BOOT_TIMEOUT_S)), "the guest never got ready");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The kernel client opens and reads `f` and `signal` (holding a read
/// delegation on each); `write` changes `f` to "new" and `signal` to "go"
/// from elsewhere, and the guest must then read the new data, through a
/// new open and through the descriptor it kept.
fn the_kernel_client_reads_no_stale_data_after(tag: &str, write: impl FnOnce(&TestServer, &std::path::Path)) {
    let export = ExportOpts::new(1, "export", "access = \"rw\"\nsquash = \"no_root_squash\"\ninsecure = true");
    let server =
        TestServer::start(tag, vec![export], "nfs_versions = [\"3\", \"4.1\", \"4.2\"]\nnfs4_read_delegations = true");
    let dir = server.export_dir(1);
    std::fs::write(dir.join("f"), b"old").unwrap();
    std::fs::write(dir.join("signal"), b"no").unwrap();
    std::thread::scope(|scope| {
        let guest = scope.spawn(|| run_guest(&server, "nfs4_deleg.sh"));
        // The guest has opened and read f (and holds a read delegation).
        wait_for_ready(&dir, &guest);
        write(&server, &dir);
        let (code, output, results) = guest.join().unwrap();
        let get = |k: &str| results.get(k).map_or("", String::as_str).to_string();
        assert!(code == Some(0) && get("done") == "1", "guest failed:\n{output}\nserver log:\n{}", server.log_text());
        assert_eq!(get("first"), "old", "{output}");
        assert_eq!(get("signal"), "go", "{output}");
        assert_eq!(get("after"), "new", "a stale read after the write was acknowledged:\n{output}");
        assert_eq!(get("after_fd"), "new", "a stale read through the open descriptor:\n{output}");
    });
}

#[test]
fn the_kernel_client_returns_its_read_delegation_when_an_nfsv3_client_writes_and_reads_no_stale_data() {
    the_kernel_client_reads_no_stale_data_after("nfs4-deleg-kernel", |server, dir| {
        let mut v3 = Nfs::connect(server.addr).unwrap();
        let root = v3.mount(&server.export_path(1)).unwrap();
        let jukebox = v3_write_retrying(&mut v3, &root, "f", b"new");
        assert!(jukebox > 0, "the write never waited for a recall: the guest held no delegation");
        assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"new");
        // signal too is delegated to the guest (it reads it in a loop).
        v3_write_retrying(&mut v3, &root, "signal", b"go");
    });
}

#[test]
fn the_kernel_client_returns_its_read_delegation_when_a_local_process_writes_and_reads_no_stale_data() {
    the_kernel_client_reads_no_stale_data_after("nfs4-deleg-kernel-local", |server, dir| {
        let held = delegations_held(server);
        assert!(held >= 1, "the guest holds no delegation (on f): {held}");
        // A local process on the server writes f: its open waits until the
        // guest returned the delegation the lease backs.
        let written = local_write(dir.join("f"), b"new");
        written.recv_timeout(Duration::from_secs(120)).expect("the local write never went through").unwrap();
        assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"new");
        let mut v3 = Nfs::connect(server.addr).unwrap();
        let root = v3.mount(&server.export_path(1)).unwrap();
        v3_write_retrying(&mut v3, &root, "signal", b"go");
    });
}

#[test]
fn the_kernel_client_sees_a_local_chmod_and_rename_of_files_it_holds_read_delegations_on() {
    let export = ExportOpts::new(1, "export", "access = \"rw\"\nsquash = \"no_root_squash\"\ninsecure = true");
    let server = TestServer::start(
        "nfs4-deleg-kernel-attrs",
        vec![export],
        "nfs_versions = [\"4.1\", \"4.2\"]\nnfs4_read_delegations = true",
    );
    let dir = server.export_dir(1);
    std::fs::write(dir.join("f"), b"f").unwrap();
    std::fs::set_permissions(dir.join("f"), std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::write(dir.join("h"), b"h").unwrap();
    std::thread::scope(|scope| {
        let guest = scope.spawn(|| run_guest(&server, "nfs4_deleg_attrs.sh"));
        wait_for_ready(&dir, &guest);
        let held = delegations_held(&server);
        assert!(held >= 2, "the guest holds no delegation on f and h: {held}");
        // Neither breaks a lease: the server must see them otherwise.
        std::fs::set_permissions(dir.join("f"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        std::fs::rename(dir.join("h"), dir.join("h2")).unwrap();
        let (code, output, results) = guest.join().unwrap();
        let get = |k: &str| results.get(k).map_or("", String::as_str).to_string();
        assert!(code == Some(0) && get("done") == "1", "guest failed:\n{output}\nserver log:\n{}", server.log_text());
        assert_eq!(get("first_mode"), "644", "{output}");
        assert_eq!(get("first_h"), "h", "{output}");
        assert_eq!(get("mode"), "600", "the guest kept the mode its delegation let it cache:\n{output}");
        assert_eq!(get("old_name"), "gone", "the guest kept the name its delegation let it cache:\n{output}");
        assert_eq!(get("new_name"), "h", "{output}");
    });
}

/// Write delegations held by the server's clients (`keel clients --json`).
fn write_delegations_held(server: &TestServer) -> u64 {
    let mut cmd = Command::new(keel_testkit::server::keel_bin());
    cmd.args(["clients", "--json"]).arg("--config").arg(&server.config);
    let out = keel_testkit::procs::run_timeout(&mut cmd, WAIT);
    assert!(out.status.success(), "keel clients: {}", out.text());
    let listed: serde_json::Value = serde_json::from_str(&out.stdout).expect("keel clients --json is JSON");
    listed.as_array().expect("a list").iter().map(|c| c["write_delegations"].as_u64().unwrap_or(0)).sum()
}

/// The kernel client creates w, gets a write delegation, writes to it and
/// holds a POSIX lock on it, which it keeps locally; a local process on
/// the server then reads w (its open breaks the lease: the delegation is
/// recalled, the client sends its lock and returns it) and sees the
/// guest's data; another client reads it too, and its lock on the range
/// is refused (never granted while the guest holds its own).
#[test]
fn the_kernel_client_s_write_delegation_is_recalled_by_a_local_reader_with_its_data_and_lock() {
    let export = ExportOpts::new(1, "export", "access = \"rw\"\nsquash = \"no_root_squash\"\ninsecure = true");
    let server = TestServer::start(
        "nfs4-wdeleg-kernel",
        vec![export],
        "nfs_versions = [\"3\", \"4.1\"]\nnfs4_write_delegations = true",
    );
    let dir = server.export_dir(1);
    std::thread::scope(|scope| {
        let guest = scope.spawn(|| run_guest_with_v4lock(&server, "nfs4_wdeleg.sh"));
        wait_for_ready(&dir, &guest);
        // The guest lets go of its lock and ends once told, whatever
        // happens here.
        let _go = GoOnDrop(dir.join("go"));
        let held = write_delegations_held(&server);
        let context = || format!("server log:\n{}", server.log_text());
        assert!(held >= 1, "the guest holds no write delegation on w: {held}\n{}", context());

        // (a) A local reader: its open waits for the recall.
        let (done, local_read) = std::sync::mpsc::channel();
        let path = dir.join("w");
        std::thread::spawn(move || {
            let _ = done.send(std::fs::read(&path));
        });
        let seen =
            local_read.recv_timeout(Duration::from_secs(120)).expect("the local read never went through").unwrap();
        assert_eq!(seen, b"guest data", "the local reader saw what the guest had not written back\n{}", context());

        // (b) Another client reads it, and (c) its lock on the guest's
        // locked range is refused.
        let mut v4 = V4::connect(&server, b"wdeleg-other");
        let mut ops = vec![NfsArgop4::Putrootfh(())];
        for part in server.export_path(1).split('/').filter(|p| !p.is_empty()) {
            ops.push(NfsArgop4::Lookup(Lookup4Args { objname: part.into() }));
        }
        ops.push(NfsArgop4::Open(Open4Args {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: 0,
            owner: OpenOwner4 { clientid: 0, owner: keel_xdr::Opaque(bytes::Bytes::from_static(b"other")) },
            openhow: Openflag4::Open4Nocreate,
            claim: OpenClaim4::ClaimNull("w".into()),
        }));
        ops.push(NfsArgop4::Getfh(()));
        let start = Instant::now();
        let res = loop {
            let (_, res) = v4.run(ops.clone());
            if res.status != Nfsstat4::Delay {
                break res;
            }
            assert!(start.elapsed() < Duration::from_secs(120), "the other client's OPEN waited forever");
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
        let n = res.resarray.len();
        let NfsResop4::Open(Nfs4Result::Ok(open)) = &res.resarray[n - 2] else { panic!("OPEN: {res:?}") };
        let NfsResop4::Getfh(Nfs4Result::Ok(fh)) = &res.resarray[n - 1] else { panic!("GETFH: {res:?}") };
        let fh = fh.object.0.clone();
        let got = v4.ok(vec![putfh(&fh), read(open.stateid)]);
        assert_eq!(&data_of(&got[2])[..], b"guest data");
        // A shared lock: the guest's is exclusive, over the whole file.
        let lock = NfsArgop4::Lock(Lock4Args {
            locktype: NfsLockType4::ReadLt,
            reclaim: false,
            offset: 0,
            length: 1,
            locker: Locker4::OpenOwner(OpenToLockOwner4 {
                open_seqid: 0,
                open_stateid: open.stateid,
                lock_seqid: 0,
                lock_owner: LockOwner4 {
                    clientid: 0,
                    owner: keel_xdr::Opaque(bytes::Bytes::from_static(b"other-locker")),
                },
            }),
        });
        let (_, res) = v4.run(vec![putfh(&fh), lock]);
        assert_eq!(res.status, Nfsstat4::Denied, "a lock granted over the guest's: {res:?}\n{}", context());

        drop(_go);
        let output = guest.join().unwrap();
        let results = keel_testkit::procs::guest_results(&output);
        let get = |k: &str| results.get(k).map_or("", String::as_str).to_string();
        assert_eq!(get("hold"), "ok", "{output}");
        assert_eq!(get("done"), "1", "guest failed:\n{output}\n{}", context());
    });
}

/// Creates its file when dropped: the guest's signal to go on.
struct GoOnDrop(std::path::PathBuf);

impl Drop for GoOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, b"");
    }
}

/// Boots the guest with export 1 of `server` mounted with `vers=4.1` and
/// `lookupcache=none`, and `v4lock` in /opt, and runs `script`: its
/// output.
fn run_guest_with_v4lock(server: &TestServer, script: &str) -> String {
    let v4lock = server.base.join("v4lock");
    keel_testkit::procs::build_static_c(Path::new(&format!("{GUEST_SCRIPTS}/v4lock.c")), &v4lock);
    let mut cmd = Command::new(RUN_SH);
    cmd.arg("--port").arg(server.addr.port().to_string());
    cmd.arg("--vers").arg("4.1").arg("--export").arg(server.export_path(1));
    cmd.args(["--opts", "lookupcache=none", "--timeout", &BOOT_TIMEOUT_S.to_string(), "--file"]);
    cmd.arg(&v4lock).arg(Path::new(GUEST_SCRIPTS).join(script));
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {RUN_SH}: {e}"));
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The kernel client creates w and gets a write delegation; two of its
/// processes lock a range each, which it keeps locally under the
/// delegation (one lock owner each). A local process then opens w for
/// writing (which recalls the delegation: the client sends both owners'
/// locks before it returns it) and tries to lock the second process's
/// range: refused, as long as the guest holds it. Before Keel lent the
/// lease's description to every lock owner, the second owner's LOCK let
/// the lease go first, and the local process could get in: a race this
/// test does not force (it passed on that code too);
/// [`a_second_lock_owner_s_write_lock_during_a_recall_is_taken_before_a_local_locker_gets_in`]
/// does. This one shows the real client's recall with two lock owners.
#[test]
fn the_kernel_client_s_two_processes_locks_under_a_write_delegation_hold_through_its_recall() {
    let server = v41_server_with_write_delegations("nfs4-wdeleg-locks");
    let dir = server.export_dir(1);
    std::thread::scope(|scope| {
        let guest = scope.spawn(|| run_guest_with_v4lock(&server, "nfs4_wdeleg_locks.sh"));
        wait_for_ready(&dir, &guest);
        let go = GoOnDrop(dir.join("go"));
        let context = || format!("server log:\n{}", server.log_text());
        let held = write_delegations_held(&server);
        assert!(held >= 1, "the guest holds no write delegation on w: {held}\n{}", context());

        let locked = local_open_and_lock(dir.join("w"), (4, 4));
        let had = locked.recv_timeout(Duration::from_secs(120)).expect("the local open never went through");
        assert!(!had, "the local process locked the second guest process's range\n{}", context());
        let path = dir.join("w");
        assert!(!local_range_free(&path, 0, 4), "the first guest process's lock\n{}", context());
        assert!(!local_range_free(&path, 4, 4), "the second guest process's lock\n{}", context());
        assert!(local_range_free(&path, 8, 100), "nobody holds the rest");

        drop(go);
        let output = guest.join().unwrap();
        let results = keel_testkit::procs::guest_results(&output);
        let get = |k: &str| results.get(k).map_or("", String::as_str).to_string();
        assert_eq!(get("hold"), "ok", "{output}");
        assert_eq!(get("done"), "1", "guest failed:\n{output}\n{}", context());
        assert!(local_range_free(&path, 0, 8), "the guest's locks went with its unlocks");
    });
}

/// A server of NFSv4.1 with write delegations, one export the kernel
/// client may mount.
fn v41_server_with_write_delegations(tag: &str) -> TestServer {
    keel_testkit::server::require_root();
    let export = ExportOpts::new(1, "export", "access = \"rw\"\nsquash = \"no_root_squash\"\ninsecure = true");
    TestServer::start(tag, vec![export], "nfs_versions = [\"3\", \"4.1\"]\nnfs4_write_delegations = true")
}

/// A returned delegation's lease is released at once whoever returns it:
/// the kernel lets only the file's owner release a lease (Keel holds no
/// CAP_LEASE), and the thread that drops it runs as the calling client,
/// here root on a file of another user's. Left in place on the store's
/// cached description, the lease would make the next local open wait for
/// the kernel's lease-break-time (45 s by default).
#[test]
fn a_returned_write_delegation_s_lease_is_released_when_the_caller_does_not_own_the_file() {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let server = v41_server_with_write_delegations("nfs4-deleg-release");
    let path = server.export_dir(1).join("w");
    let mut holder = V4::connect(&server, b"deleg-release");
    holder.cred = keel_rpc::msg::AuthSys { uid: 0, gid: 0, ..Default::default() }.to_opaque();
    holder.wait_for_callback_path();
    let mut ops = export_lookups(&server);
    // Root creates it for another user (as `install -o` would).
    let attrs = Attrs4 { mode: Some(0o666), owner: Some("4242".into()), ..Attrs4::default() };
    ops.push(open_creating_for_write_delegation("w", attrs.to_fattr4(&Attrs4::known())));
    ops.push(NfsArgop4::Getfh(()));
    let res = holder.ok(ops);
    assert_eq!(std::fs::metadata(&path).unwrap().uid(), 4242);
    let n = res.len();
    let NfsResop4::Open(Nfs4Result::Ok(open)) = &res[n - 2] else { panic!("OPEN: {res:?}") };
    let OpenDelegation4::OpenDelegateWrite(deleg) = &open.delegation else {
        panic!("no write delegation: {:?}", open.delegation)
    };
    let deleg = deleg.stateid;
    let NfsResop4::Getfh(Nfs4Result::Ok(fh)) = &res[n - 1] else { panic!("GETFH: {res:?}") };
    let fh = fh.object.0.clone();
    let local_open = || std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&path);
    let held = local_open().expect_err("a local open while the write delegation is held");
    assert_eq!(held.raw_os_error(), Some(libc::EWOULDBLOCK), "{held}");
    holder.ok(vec![putfh(&fh), NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid: deleg })]);
    local_open().expect("a local open once the delegation was returned");
}

/// What a GETATTR of the change, size and modification time answered.
fn change_size_mtime(res: &NfsResop4) -> (u64, u64, Nfstime4) {
    let NfsResop4::Getattr(Nfs4Result::Ok(g)) = res else { panic!("GETATTR: {res:?}") };
    let a = Attrs4::from_fattr4(&g.obj_attributes, AttrUse::Reply).unwrap();
    (a.change.unwrap(), a.size.unwrap(), a.time_modify.unwrap())
}

fn getattr_change_size_mtime() -> NfsArgop4 {
    let bits = [FATTR4_CHANGE, FATTR4_SIZE, FATTR4_TIME_ACCESS, FATTR4_TIME_MODIFY];
    NfsArgop4::Getattr(Getattr4Args { attr_request: Bitmap4::from_bits(bits) })
}

/// The testkit client holds a write delegation on w (created empty);
/// another one's GETATTR of its size makes the server send CB_GETATTR on
/// the holder's connection and wait for the answer (read by another
/// worker) instead of recalling: a holder that says it wrote 5 bytes the
/// server has not seen gives the GETATTR its size and a new change
/// attribute and modification time. A holder that refuses CB_GETATTR is
/// recalled, and the GETATTR waits (NFS4ERR_DELAY) as before.
#[test]
fn another_client_s_getattr_of_a_write_delegated_file_gets_the_holder_s_size_by_cb_getattr() {
    let server = v41_server_with_write_delegations("nfs4-cbgetattr");
    let mut holder = V4::connect(&server, b"cbgetattr-holder");
    holder.wait_for_callback_path();
    let mut ops = export_lookups(&server);
    ops.push(open_creating_for_write_delegation("w", Fattr4::default()));
    ops.extend([NfsArgop4::Getfh(()), getattr_change_size_mtime()]);
    let res = holder.ok(ops);
    let n = res.len();
    let NfsResop4::Open(Nfs4Result::Ok(open)) = &res[n - 3] else { panic!("OPEN: {res:?}") };
    let OpenDelegation4::OpenDelegateWrite(deleg) = &open.delegation else {
        panic!("no write delegation: {:?}", open.delegation)
    };
    let deleg = deleg.stateid;
    let NfsResop4::Getfh(Nfs4Result::Ok(fh)) = &res[n - 2] else { panic!("GETFH: {res:?}") };
    let fh = fh.object.0.clone();
    let (change1, size1, mtime1) = change_size_mtime(&res[n - 1]);
    assert_eq!(size1, 0);

    let mut other = V4::connect(&server, b"cbgetattr-other");
    holder.getattr_answer = Some((change1 + 1, 5));
    let res = std::thread::scope(|scope| {
        let getattr = scope.spawn(|| other.run(vec![putfh(&fh), getattr_change_size_mtime()]).1);
        holder.answer_next_callback();
        getattr.join().unwrap()
    });
    let context = || format!("server log:\n{}", server.log_text());
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}\n{}", context());
    assert_eq!(holder.getattrs, 1, "one CB_GETATTR");
    let (change2, size2, mtime2) = change_size_mtime(&res.resarray[2]);
    assert_eq!(size2, 5, "the holder's size");
    assert_ne!(change2, change1, "the holder changed the file");
    assert_ne!(mtime2, mtime1, "the holder's writes move the modification time");
    // Moving the times was the server's own change of the file: not a
    // break of the delegation's lease, which the callback thread (every
    // second) would recall.
    std::thread::sleep(Duration::from_millis(2500));
    holder.ok(vec![]);
    assert!(holder.recalled.is_empty(), "recalled: {:?}\n{}", holder.recalled, context());
    let stat = keel_stat(&server);
    assert!(stat.contains("1 CB_GETATTR"), "{stat}");

    // A holder that refuses: recalled, and the GETATTR waits.
    holder.getattr_answer = None;
    let res = std::thread::scope(|scope| {
        let getattr = scope.spawn(|| other.run(vec![putfh(&fh), getattr_change_size_mtime()]).1);
        holder.answer_next_callback();
        getattr.join().unwrap()
    });
    assert_eq!(res.status, Nfsstat4::Delay, "{res:?}");
    assert_eq!(holder.getattrs, 2);
    holder.answer_next_callback();
    assert_eq!(holder.recalled, vec![deleg]);
    holder.ok(vec![putfh(&fh), NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid: deleg })]);
    other.ok(vec![putfh(&fh), getattr_change_size_mtime()]);
}

/// `keel stat` of the server.
fn keel_stat(server: &TestServer) -> String {
    let mut cmd = Command::new(keel_testkit::server::keel_bin());
    cmd.arg("stat").arg("--config").arg(&server.config);
    let out = keel_testkit::procs::run_timeout(&mut cmd, WAIT);
    assert!(out.status.success(), "keel stat: {}", out.text());
    out.stdout
}

/// The kernel client creates w and writes to it under a write delegation,
/// keeping it open; another client's GETATTR of w's size then makes the
/// server ask the kernel client with CB_GETATTR, and answers with the size
/// it says, without a recall (the delegation stays held); so do its
/// READDIR of the directory and its VERIFY of that size.
#[test]
fn the_kernel_client_answers_cb_getattr_and_another_client_s_getattr_gets_its_size_without_a_recall() {
    let server = v41_server_with_write_delegations("nfs4-cbgetattr-kernel");
    let dir = server.export_dir(1);
    std::thread::scope(|scope| {
        let guest = scope.spawn(|| run_guest(&server, "nfs4_cbgetattr.sh"));
        wait_for_ready(&dir, &guest);
        let go = GoOnDrop(dir.join("go"));
        let context = || format!("server log:\n{}", server.log_text());
        assert!(write_delegations_held(&server) >= 1, "the guest holds no write delegation on w\n{}", context());

        let mut other = V4::connect(&server, b"cbgetattr-kernel-other");
        let mut ops = vec![NfsArgop4::Putrootfh(())];
        for part in server.export_path(1).split('/').chain(["w"]).filter(|p| !p.is_empty()) {
            ops.push(NfsArgop4::Lookup(Lookup4Args { objname: part.into() }));
        }
        ops.push(NfsArgop4::Getfh(()));
        let res = other.ok(ops);
        let Some(NfsResop4::Getfh(Nfs4Result::Ok(fh))) = res.last() else { panic!("GETFH: {res:?}") };
        let fh = fh.object.0.clone();
        let on_server = std::fs::metadata(dir.join("w")).unwrap().len();
        let started = Instant::now();
        let (_, res) = other.run(vec![putfh(&fh), getattr_change_size_mtime()]);
        let took = started.elapsed();
        assert_eq!(res.status, Nfsstat4::Ok, "{res:?}\n{}", context());
        let (_, size, _) = change_size_mtime(&res.resarray[2]);
        eprintln!("GETATTR answered by CB_GETATTR in {took:?}: size {size} (the server's file: {on_server})");
        assert_eq!(size, 10, "the guest's size");
        let stat = keel_stat(&server);
        assert!(stat.contains(" 1 CB_GETATTR") && stat.contains(" 0 CB_RECALL"), "{stat}");
        // READDIR's entry attributes and VERIFY ask the guest the same way.
        let mut ops = export_lookups(&server);
        ops.push(NfsArgop4::Readdir(Readdir4Args {
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 0,
            maxcount: 8192,
            attr_request: Bitmap4::from_bits([FATTR4_RDATTR_ERROR, FATTR4_SIZE]),
        }));
        let res = other.ok(ops);
        let Some(NfsResop4::Readdir(Nfs4Result::Ok(listing))) = res.last() else { panic!("READDIR: {res:?}") };
        let w = listing.reply.entries.iter().find(|e| e.name.as_str() == Some("w")).expect("w listed");
        let w = Attrs4::from_fattr4(&w.attrs, AttrUse::Reply).unwrap();
        assert_eq!((w.rdattr_error, w.size), (None, Some(10)), "the guest's size in READDIR\n{}", context());
        let size10 = Attrs4 { size: Some(10), ..Attrs4::default() }.to_fattr4(&Bitmap4::from_bits([FATTR4_SIZE]));
        other.ok(vec![putfh(&fh), NfsArgop4::Verify(Verify4Args { obj_attributes: size10 })]);
        // One CB_GETATTR for VERIFY, one for w in READDIR (and one for
        // each other file the guest holds a write delegation on).
        let stat = keel_stat(&server);
        assert!(cb_getattrs(&stat) >= 3 && stat.contains(" 0 CB_RECALL"), "{stat}");
        assert!(write_delegations_held(&server) >= 1, "the guest's delegation was let go of\n{}", context());

        drop(go);
        let (code, output, results) = guest.join().unwrap();
        let get = |k: &str| results.get(k).map_or("", String::as_str).to_string();
        assert!(code == Some(0) && get("done") == "1", "guest failed:\n{output}\n{}", context());
        assert_eq!(get("size"), "10", "{output}");
    });
}

/// The CB_GETATTRs `keel stat` counts.
fn cb_getattrs(stat: &str) -> u64 {
    let line = stat.lines().find(|l| l.starts_with("nfsv4 callbacks:")).expect("the callbacks' line");
    let before = line.split(" CB_GETATTR").next().expect("CB_GETATTR counted");
    before.rsplit(' ').next().and_then(|n| n.parse().ok()).expect("a count")
}

/// The export's path as LOOKUPs from the root.
/// OPEN of `name` in the current directory for reading and writing,
/// created with `attrs` unless it exists, by the open owner "holder",
/// asking for a write delegation.
fn open_creating_for_write_delegation(name: &str, attrs: Fattr4) -> NfsArgop4 {
    NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG,
        share_deny: 0,
        owner: OpenOwner4 { clientid: 0, owner: keel_xdr::Opaque(bytes::Bytes::from_static(b"holder")) },
        openhow: Openflag4::Open4Create(Createhow4::Unchecked4(attrs)),
        claim: OpenClaim4::ClaimNull(name.into()),
    })
}

fn export_lookups(server: &TestServer) -> Vec<NfsArgop4> {
    let mut ops = vec![NfsArgop4::Putrootfh(())];
    for part in server.export_path(1).split('/').filter(|p| !p.is_empty()) {
        ops.push(NfsArgop4::Lookup(Lookup4Args { objname: part.into() }));
    }
    ops
}

/// Whether a CB_RECALL comes within `within`, the client sending
/// SEQUENCEs meanwhile (so the callbacks on its connection are read).
fn recalled_within(v4: &mut V4, within: Duration) -> bool {
    let start = Instant::now();
    while v4.recalled.is_empty() && start.elapsed() < within {
        v4.run(vec![]);
        std::thread::sleep(Duration::from_millis(20));
    }
    !v4.recalled.is_empty()
}

/// OPEN of "f" in the current directory for reading and writing by the
/// owner "writer", wanting no delegation.
fn open_f_for_writing(how: Openflag4) -> NfsArgop4 {
    NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
        share_deny: 0,
        owner: OpenOwner4 { clientid: 0, owner: keel_xdr::Opaque(bytes::Bytes::from_static(b"writer")) },
        openhow: how,
        claim: OpenClaim4::ClaimNull("f".into()),
    })
}
/// A file a client created, wrote and closed through Keel is delegated at
/// the first OPEN for reading (the store's own writable description of a
/// file it created stood in the way of every read lease, and then of the
/// first OPEN's, which made the store let go of it); the holder's own
/// SETATTR keeps the delegation (the store's chmod is not a break of its
/// lease), while a local process's chmod a moment later recalls it.
#[test]
fn a_file_created_through_keel_is_read_delegated_and_its_holder_s_setattr_keeps_the_delegation() {
    let server = v41_server_with_delegations("nfs4-deleg-created");
    let mut v4 = V4::connect(&server, b"deleg-created");
    let mut ops = export_lookups(&server);
    let mode = Attrs4 { mode: Some(0o644), ..Attrs4::default() };
    ops.push(open_f_for_writing(Openflag4::Open4Create(Createhow4::Guarded4(mode.to_fattr4(&Attrs4::known())))));
    ops.push(NfsArgop4::Getfh(()));
    let res = v4.ok(ops);
    let n = res.len();
    let NfsResop4::Open(Nfs4Result::Ok(open)) = &res[n - 2] else { panic!("OPEN: {res:?}") };
    let NfsResop4::Getfh(Nfs4Result::Ok(fh)) = &res[n - 1] else { panic!("GETFH: {res:?}") };
    let (created, fh) = (open.stateid, fh.object.0.clone());
    let write =
        Write4Args { stateid: created, offset: 0, stable: StableHow4::Unstable4, data: b"old data".to_vec().into() };
    v4.ok(vec![putfh(&fh), NfsArgop4::Write(write), NfsArgop4::Commit(Commit4Args { offset: 0, count: 0 })]);
    v4.ok(vec![putfh(&fh), NfsArgop4::Close(Close4Args { seqid: 0, open_stateid: created })]);

    let (open, _) = v4.open_read(&server, 1, b"reader", "f");
    let OpenDelegation4::OpenDelegateRead(deleg) = &open.delegation else {
        panic!("no read delegation at the first OPEN for reading: {:?}", open.delegation)
    };
    let deleg = deleg.stateid;
    assert_eq!(&data_of(&v4.ok(vec![putfh(&fh), read(deleg)])[2])[..], b"old data");

    // The holder's own SETATTR: no recall.
    let chmod = Attrs4 { mode: Some(0o600), ..Attrs4::default() };
    let setattr = Setattr4Args { stateid: Stateid4::default(), obj_attributes: chmod.to_fattr4(&Attrs4::known()) };
    v4.ok(vec![putfh(&fh), NfsArgop4::Setattr(setattr)]);
    assert!(!recalled_within(&mut v4, Duration::from_secs(3)), "the holder's own SETATTR recalled its delegation");
    assert_eq!(delegations_held(&server), 1);

    // A local chmod a moment later: recalled.
    let path = server.export_dir(1).join("f");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    assert!(recalled_within(&mut v4, WAIT), "a local chmod after the holder's did not recall the delegation");
    assert_eq!(v4.recalled, vec![deleg]);
    v4.ok(vec![putfh(&fh), NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid: deleg })]);
}

/// A file that was there before, written and closed through Keel (the
/// store opened a writer on it for the write, which it keeps), is
/// delegated at the first OPEN for reading after, and reads what was
/// written.
#[test]
fn a_file_written_through_keel_is_read_delegated_at_the_first_open_for_reading_after() {
    let server = v41_server_with_delegations("nfs4-deleg-written");
    let path = server.export_dir(1).join("f");
    std::fs::write(&path, b"old data").unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let mut v4 = V4::connect(&server, b"deleg-written");
    let mut ops = export_lookups(&server);
    ops.push(open_f_for_writing(Openflag4::Open4Nocreate));
    ops.push(NfsArgop4::Getfh(()));
    let res = v4.ok(ops);
    let n = res.len();
    let NfsResop4::Open(Nfs4Result::Ok(open)) = &res[n - 2] else { panic!("OPEN: {res:?}") };
    let NfsResop4::Getfh(Nfs4Result::Ok(fh)) = &res[n - 1] else { panic!("GETFH: {res:?}") };
    let (written, fh) = (open.stateid, fh.object.0.clone());
    let write = Write4Args { stateid: written, offset: 0, stable: StableHow4::Unstable4, data: b"NEW".to_vec().into() };
    v4.ok(vec![putfh(&fh), NfsArgop4::Write(write), NfsArgop4::Commit(Commit4Args { offset: 0, count: 0 })]);
    v4.ok(vec![putfh(&fh), NfsArgop4::Close(Close4Args { seqid: 0, open_stateid: written })]);

    let (open, _) = v4.open_read(&server, 1, b"reader", "f");
    let OpenDelegation4::OpenDelegateRead(deleg) = &open.delegation else {
        panic!("no read delegation at the first OPEN for reading: {:?}", open.delegation)
    };
    assert_eq!(&data_of(&v4.ok(vec![putfh(&fh), read(deleg.stateid)])[2])[..], b"NEW data");
    assert_eq!(delegations_held(&server), 1);
}

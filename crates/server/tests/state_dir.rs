//! What Keel keeps for itself (`state_dir`): private to root.
//!
//! - Every file and directory Keel makes there, with every feature that
//!   writes state running (write-back cache, locks, the mount list, the
//!   `[ha]` reply journal and connection list, the administration socket),
//!   is root's alone: files 0600, directories 0700. So are the files
//!   `keel ha init` writes (the fence devices' passwords are in them).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_nlm_proto::nlm4::{NLM_PROGRAM, NLM_V4, Nlm4Lock, Nlm4Lockargs, Nlm4Proc, Nlm4Res, Nlm4Stats};
use keel_rpc_client::{Proc, Retry, bind_from, call};
use keel_testkit::disk::XfsDisk;
use keel_testkit::nfs::blocking::Nfs;
use keel_testkit::nfs::pattern;
use keel_testkit::procs::{Output, TempDir, run_ok, run_timeout};
use keel_testkit::server::{ExportOpts, TestServer, keel_bin};
use keel_xdr::{Decode, Decoder, Opaque};
use nfs3_types::nfs3::stable_how;

const MIB: u64 = 1 << 20;
const CMD_TIMEOUT: Duration = Duration::from_secs(60);

fn keel(args: &[&str]) -> Output {
    run_timeout(Command::new(keel_bin()).args(args), CMD_TIMEOUT)
}

fn device_file(dir: &Path, name: &str, bytes: u64) -> PathBuf {
    let path = dir.join(name);
    run_ok(Command::new("fallocate").args(["-l", &bytes.to_string()]).arg(&path), CMD_TIMEOUT);
    path
}

fn cache_table(devices: &[&Path]) -> String {
    let list: Vec<String> = devices.iter().map(|d| format!("{:?}", d.display().to_string())).collect();
    format!("\n[cache]\ndevices = [{}]\nlog_mib = 32\nsequential_cutoff_mib = 4096\n", list.join(", "))
}

fn write_back_export() -> ExportOpts {
    ExportOpts::new(1, "export", "access = \"rw\"\nsquash = \"no_root_squash\"\ncache = \"write-back\"")
}

/// An NLM LOCK of the first bytes of `fh`, granted: the server records the
/// client in its NSM state.
fn lock(server: &TestServer, fh: &[u8]) {
    let sock = bind_from("127.0.0.1".parse().unwrap()).unwrap();
    let alock = Nlm4Lock {
        caller_name: Opaque(Bytes::from_static(b"state-dir-test")),
        fh: Opaque(Bytes::copy_from_slice(fh)),
        oh: Opaque(Bytes::from_static(b"state-dir-test:1")),
        svid: 1,
        l_offset: 0,
        l_len: 10,
    };
    let args = Nlm4Lockargs { cookie: "k".into(), block: false, exclusive: true, alock, reclaim: false, state: 1 };
    let retry = Retry { timeout: Duration::from_secs(2), tries: 3 };
    let reply =
        call(&sock, server.addr, Proc { prog: NLM_PROGRAM, vers: NLM_V4, proc_: Nlm4Proc::Lock as u32 }, &args, retry)
            .expect("NLM LOCK");
    assert_eq!(Nlm4Res::decode(&mut Decoder::new(reply)).unwrap().stat, Nlm4Stats::Granted);
}

/// Every entry under `dir` (not following symlinks), depth first.
fn walk(dir: &Path, out: &mut Vec<(PathBuf, std::fs::Metadata)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let is_dir = meta.is_dir();
        out.push((path.clone(), meta));
        if is_dir {
            walk(&path, out);
        }
    }
}

/// Modes that are not root's alone: files must be 0600, directories 0700,
/// sockets 0600 (symlinks have no mode of their own; what they point to is
/// checked by the caller).
fn not_private(entries: &[(PathBuf, std::fs::Metadata)]) -> Vec<String> {
    use std::os::unix::fs::FileTypeExt;
    let mut wrong = Vec::new();
    for (path, meta) in entries {
        let mode = meta.mode() & 0o7777;
        let ft = meta.file_type();
        let want = if ft.is_dir() {
            0o700
        } else if ft.is_file() || ft.is_socket() {
            0o600
        } else if ft.is_symlink() {
            continue;
        } else {
            wrong.push(format!("{}: unexpected file type {ft:?}", path.display()));
            continue;
        };
        if mode != want || meta.uid() != 0 {
            wrong.push(format!("{}: mode {mode:04o} uid {} (want {want:04o} uid 0)", path.display(), meta.uid()));
        }
    }
    wrong
}

/// With everything that writes state running (a write-back cache and its
/// device record, a lock and its NSM record, the mount list, the `[ha]`
/// reply journal and connection list, the administration socket),
/// nothing in the state directory is anyone's but root's: files 0600,
/// directories 0700, and the socket it links to too.
#[test]
fn everything_keel_keeps_for_itself_is_root_s_alone() {
    let disk = XfsDisk::new("state-modes");
    let devices = TempDir::new("state-modes-devices");
    let c1 = device_file(devices.path(), "c1", 96 * MIB);
    let c2 = device_file(devices.path(), "c2", 96 * MIB);
    let extra = format!("\n[ha]\nenabled = true\n{}", cache_table(&[&c1, &c2]));
    let server = TestServer::start_in("state-modes", &disk.mnt, vec![write_back_export()], &extra);
    let state = server.state_dir();

    let mut nfs = Nfs::connect(server.addr).unwrap();
    let root = nfs.mount(&server.export_path(1)).unwrap();
    let fh = nfs.create_new(&root, "f").unwrap();
    nfs.write_all(&fh, &pattern(1, MIB as usize), stable_how::FILE_SYNC).unwrap();
    nfs.create_new(&root, "gone").unwrap();
    nfs.remove(&root, "gone").unwrap();
    lock(&server, &fh);
    // The recorder writes the connection list within a second.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !state.join("connections").exists() {
        assert!(Instant::now() < deadline, "the connection list was not written");
        std::thread::sleep(Duration::from_millis(100));
    }
    let stat = keel(&["cache", "stat", "--state-dir", state.to_str().unwrap()]);
    assert!(stat.status.success(), "{stat:?}");

    let mut entries = Vec::new();
    walk(&state, &mut entries);
    let names: Vec<String> =
        entries.iter().map(|(p, _)| p.strip_prefix(&state).unwrap().display().to_string()).collect();
    for expected in [
        "handle.key",
        "cache-devices.json",
        "mount-list",
        "nsm",
        "nsm/state",
        "nsm/clients",
        "reply-cache",
        "connections",
    ] {
        assert!(names.iter().any(|n| n == expected), "no {expected} in {names:?}");
    }
    assert!(names.iter().any(|n| n.starts_with("nsm/clients/")), "the locking client is not recorded: {names:?}");
    let mut wrong = not_private(&entries);
    let state_meta = std::fs::metadata(&state).unwrap();
    wrong.extend(not_private(&[(state.clone(), state_meta)]));
    // The administration socket: `keel.sock` in the state directory,
    // wherever it is bound.
    let socket = std::fs::canonicalize(state.join("keel.sock")).unwrap();
    let mut around = vec![(socket.clone(), std::fs::symlink_metadata(&socket).unwrap())];
    let socket_dir = socket.parent().unwrap();
    around.push((socket_dir.to_path_buf(), std::fs::metadata(socket_dir).unwrap()));
    wrong.extend(not_private(&around));
    assert!(wrong.is_empty(), "not root's alone:\n{}", wrong.join("\n"));
    drop(server);
}

/// `keel ha init` writes the cluster's configuration (the fence devices'
/// credentials among it) for root alone.
#[test]
fn keel_ha_init_writes_for_root_alone() {
    let dir = TempDir::new("ha-init-modes");
    let out = dir.path().join("written");
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/../../contrib/ha/keel-ha.example.toml");
    let init = keel(&["ha", "init", plan, "--out", out.to_str().unwrap()]);
    assert!(init.status.success(), "{init:?}");
    let mut entries = vec![(out.clone(), std::fs::metadata(&out).unwrap())];
    walk(&out, &mut entries);
    assert!(entries.len() >= 4, "{entries:?}");
    let wrong = not_private(&entries);
    assert!(wrong.is_empty(), "not root's alone:\n{}", wrong.join("\n"));
}

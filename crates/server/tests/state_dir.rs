//! What Keel keeps for itself (`state_dir`): private to root, never
//! reachable through an export, and untouched by a second `keel serve`
//! that is refused.
//!
//! - Every file and directory Keel makes there, with every feature that
//!   writes state running (write-back cache, locks, the mount list, the
//!   `[ha]` reply journal and connection list, the administration socket),
//!   is root's alone: files 0600, directories 0700. So are the files
//!   `keel ha init` writes (the fence devices' passwords are in them).
//! - A configuration whose state directory (or NSM state) overlaps an
//!   export, by path, through a symlink or through a bind mount either
//!   way, is refused by `keel check-config`, `keel serve` and an export
//!   reload, naming both; an independent client (libnfs) cannot reach the
//!   handle key of a server whose state directory sits next to its export.
//! - A second `keel serve` on the state directory of a running server is
//!   refused before it touches anything: the NSM state number, the cache
//!   device record and the cache's log stay as the first server left them.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use keel_nlm_proto::nlm4::{NLM_PROGRAM, NLM_V4, Nlm4Lock, Nlm4Lockargs, Nlm4Proc, Nlm4Res, Nlm4Stats};
use keel_rpc_client::{Proc, Retry, bind_from, call};
use keel_testkit::disk::XfsDisk;
use keel_testkit::nfs::blocking::Nfs;
use keel_testkit::nfs::pattern;
use keel_testkit::procs::{Output, TempDir, free_port, run_ok, run_timeout};
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

/// A configuration with one export and `state_dir` (plus `server_extra`
/// lines), listening on 127.0.0.1:`port`.
fn config_file(dir: &Path, name: &str, state: &Path, exports: &[&Path], server_extra: &str, port: u16) -> PathBuf {
    let mut text = format!(
        "[server]\nlisten = [\"127.0.0.1:{port}\"]\nportmap = \"off\"\nstate_dir = \"{}\"\n{server_extra}\n",
        state.display()
    );
    for (i, export) in exports.iter().enumerate() {
        text += &format!(
            "\n[[export]]\npath = \"{}\"\nid = {}\naccess = \"rw\"\nsquash = \"no_root_squash\"\n\
             [[export.clients]]\nhost = \"*\"\n",
            export.display(),
            i + 1
        );
    }
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    file
}

/// Unmounts a bind mount when the test ends, whatever happened.
struct Bind(PathBuf);

impl Bind {
    fn new(from: &Path, to: &Path) -> Bind {
        std::fs::create_dir_all(to).unwrap();
        run_ok(Command::new("mount").arg("--bind").arg(from).arg(to), CMD_TIMEOUT);
        Bind(to.to_path_buf())
    }
}

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn nfs_url(port: u16, path: &str) -> String {
    format!("nfs://127.0.0.1{path}?nfsport={port}&mountport={port}")
}

/// `keel serve --config file`: refused at start (its exit and stderr), or,
/// if it serves, what an independent client (nfs-cat) read of the handle
/// key at `key_url_path`.
fn serve_refused(file: &Path, port: u16, key_url_path: &str) -> Output {
    let mut child: Child = Command::new(keel_bin())
        .args(["serve", "--config", file.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            return Output {
                status: out.status,
                stdout: String::new(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            };
        }
        if keel_testkit::procs::accepts(std::net::SocketAddr::from(([127, 0, 0, 1], port))) {
            let read = run_timeout(Command::new("nfs-cat").arg(nfs_url(port, key_url_path)), CMD_TIMEOUT);
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} was served; nfs-cat {key_url_path}: {:?}, {} bytes of the handle key read",
                file.display(),
                read.status,
                read.stdout.len()
            );
        }
        assert!(Instant::now() < deadline, "keel serve --config {} neither served nor exited", file.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `check-config` and `serve` (listening on `port`) both refuse `file`,
/// naming `state` and `export` and what to do; nothing is made at `state`.
fn assert_refused(file: &Path, port: u16, state: &Path, export: &Path, key_url_path: &str) {
    let checked = keel(&["check-config", file.to_str().unwrap()]);
    let existed = state.exists();
    let served = serve_refused(file, port, key_url_path);
    for (what, out) in [("check-config", &checked), ("serve", &served)] {
        assert_eq!(out.status.code(), Some(1), "{what} {}: {out:?}", file.display());
        let text = out.stderr.replace('\n', " ");
        assert!(
            text.contains(&state.display().to_string()) && text.contains(&export.display().to_string()),
            "{what}: the message names both {} and {}: {text}",
            state.display(),
            export.display()
        );
        assert!(text.contains("outside every export"), "{what}: the message says what to do: {text}");
    }
    assert_eq!(state.exists(), existed, "{} was made before the configuration was refused", state.display());
}

/// `keel serve --config file` until dropped.
struct Serving(Child);

impl Serving {
    fn start(file: &Path, port: u16) -> Serving {
        let log = file.with_extension("log");
        let child = Command::new(keel_bin())
            .args(["serve", "--config", file.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let serving = Serving(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !keel_testkit::procs::accepts(std::net::SocketAddr::from(([127, 0, 0, 1], port))) {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(Instant::now() < deadline, "keel did not start:\n{log}");
            std::thread::sleep(Duration::from_millis(50));
        }
        serving
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `state_dir` (or `nsm_state_dir`) in an export, or an export in the
/// state directory, by path, through a symlink, or through a bind mount
/// either way: refused by `keel check-config` and `keel serve`, naming both
/// directories and what to do. On a server whose state directory is next
/// to its export on the same file system, libnfs cannot reach the handle
/// key, and an export reload that would export their parent is refused.
#[test]
fn a_state_directory_an_export_would_show_is_refused() {
    let dir = TempDir::new("state-in-export");
    let base = dir.path();
    let export = base.join("export");
    std::fs::create_dir_all(&export).unwrap();
    let port = free_port();
    let refused = |name: &str, state: &Path, exports: &[&Path], extra: &str, shown: &Path, key: &str| {
        let file = config_file(base, name, state, exports, extra, port);
        assert_refused(&file, port, state, shown, key);
    };

    // Inside, plainly: the layout `keel ha init` used to write.
    let state = export.join(".keel");
    refused("plain.toml", &state, &[&export], "", &export, &format!("{}/handle.key", state.display()));

    // The export named through a symlink.
    let link = base.join("link");
    std::os::unix::fs::symlink(&export, &link).unwrap();
    refused("symlink.toml", &state, &[&link], "", &link, &format!("{}/.keel/handle.key", link.display()));

    // The export is a bind mount of the directory the state is in.
    let bound = base.join("bound");
    let _bound = Bind::new(&export, &bound);
    refused("bound-export.toml", &state, &[&bound], "", &bound, &format!("{}/.keel/handle.key", bound.display()));

    // The state directory is a bind mount of a directory in the export.
    let inner = export.join("inner");
    std::fs::create_dir_all(&inner).unwrap();
    std::fs::set_permissions(&inner, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let elsewhere = base.join("state-elsewhere");
    let _elsewhere = Bind::new(&inner, &elsewhere);
    let key = format!("{}/inner/handle.key", export.display());
    refused("bound-state.toml", &elsewhere, &[&export], "", &export, &key);

    // The NSM state in the export, the state directory outside.
    let outside = base.join("state");
    let nsm = export.join("nsm");
    let extra = format!("nsm_state_dir = \"{}\"", nsm.display());
    let key = format!("{}/nsm/state", export.display());
    let file = config_file(base, "nsm.toml", &outside, &[&export], &extra, port);
    assert_refused(&file, port, &nsm, &export, &key);

    // An export in the state directory.
    let sub = outside.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    refused("export-in-state.toml", &outside, &[&sub], "", &sub, &format!("{}/handle.key", sub.display()));
    std::fs::remove_dir_all(&outside).unwrap();

    // Next to each other: served; the key is out of a client's reach.
    let file = config_file(base, "beside.toml", &outside, &[&export], "", port);
    let checked = keel(&["check-config", file.to_str().unwrap()]);
    assert!(checked.status.success(), "{checked:?}");
    let serving = Serving::start(&file, port);
    assert!(outside.join("handle.key").exists());
    std::fs::write(export.join("visible"), b"a file of the export\n").unwrap();
    let listed = run_ok(Command::new("nfs-ls").arg(nfs_url(port, &export.display().to_string())), CMD_TIMEOUT);
    assert!(listed.stdout.contains("visible") && !listed.stdout.contains("handle.key"), "{listed:?}");
    for path in [format!("{}/../state/handle.key", export.display()), format!("{}/handle.key", outside.display())] {
        let read = run_timeout(Command::new("nfs-cat").arg(nfs_url(port, &path)), CMD_TIMEOUT);
        assert!(!read.status.success() && read.stdout.is_empty(), "nfs-cat {path}: {read:?}");
    }
    // LOOKUP ".." of the export root is the root itself.
    let mut nfs = Nfs::connect(std::net::SocketAddr::from(([127, 0, 0, 1], port))).unwrap();
    let root = nfs.mount(&export.display().to_string()).unwrap();
    assert_eq!(nfs.lookup(&root, "..").unwrap(), root);
    assert!(nfs.lookup(&root, "state").is_err());

    // A reload that would export the parent of both is refused, naming
    // both; the key stays out of reach.
    config_file(base, "beside.toml", &outside, &[&export, base], "", port);
    let reload = keel(&["exports", "reload", "--config", file.to_str().unwrap()]);
    assert_eq!(reload.status.code(), Some(1), "{reload:?}");
    let text = reload.text().replace('\n', " ");
    assert!(text.contains(&outside.display().to_string()) && text.contains(&base.display().to_string()), "{text}");
    let key = format!("{}/state/handle.key", base.display());
    let read = run_timeout(Command::new("nfs-cat").arg(nfs_url(port, &key)), CMD_TIMEOUT);
    assert!(!read.status.success() && read.stdout.is_empty(), "{read:?}");
    drop(serving);
}

/// Every file under `dir` with its bytes and modification time.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>, SystemTime)> {
    let mut entries = Vec::new();
    walk(dir, &mut entries);
    let mut files: Vec<_> = entries
        .into_iter()
        .filter(|(_, m)| m.is_file())
        .map(|(p, m)| (p.clone(), std::fs::read(&p).unwrap(), m.modified().unwrap()))
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

/// A second `keel serve` on the state directory of a running server with
/// a write-back cache holding dirty data and a client holding a lock is
/// refused, saying why, and changes nothing: the NSM state number, the
/// cache device record and the cache's log are as the first left them.
/// So is one beside a server of an older version (its socket answers).
#[test]
fn a_second_server_on_a_live_state_directory_changes_nothing() {
    let devices = TempDir::new("state-twice-devices");
    let c1 = device_file(devices.path(), "c1", 96 * MIB);
    let c2 = device_file(devices.path(), "c2", 96 * MIB);
    let server = TestServer::start("state-twice", vec![write_back_export()], &cache_table(&[&c1, &c2]));
    let mut nfs = Nfs::connect(server.addr).unwrap();
    let root = nfs.mount(&server.export_path(1)).unwrap();
    let fh = nfs.create_new(&root, "dirty").unwrap();
    // Less than a tenth of the log and younger than 30 s: not destaged.
    nfs.write_all(&fh, &pattern(2, MIB as usize), stable_how::FILE_SYNC).unwrap();
    lock(&server, &fh);
    assert!(server.export_dir(1).join("dirty").metadata().unwrap().len() < MIB, "the data is in the log only");

    let state = server.state_dir();
    let before = (snapshot(&state), snapshot(devices.path()));
    assert!(before.0.iter().any(|(p, _, _)| p.ends_with("nsm/state")), "{:?}", before.0);
    let text = std::fs::read_to_string(&server.config).unwrap();
    let other = server.base.join("other.toml");
    std::fs::write(&other, text.replace(&format!("127.0.0.1:{}", server.addr.port()), "127.0.0.1:0")).unwrap();
    let second = keel(&["serve", "--config", other.to_str().unwrap()]);
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    assert!(second.stderr.contains("another keel is running with the state directory"), "{second:?}");
    let after = (snapshot(&state), snapshot(devices.path()));
    for (was, is) in before.0.iter().chain(&before.1).zip(after.0.iter().chain(&after.1)) {
        assert_eq!(was.0, is.0, "files came or went");
        assert!(was.1 == is.1 && was.2 == is.2, "{} changed", was.0.display());
    }
    assert_eq!((before.0.len(), before.1.len()), (after.0.len(), after.1.len()), "files came or went");
    // The first one serves on.
    assert_eq!(nfs.read_all(&fh).unwrap(), pattern(2, MIB as usize));

    // A server of a version before the lock shows itself by its socket.
    let older = TempDir::new("state-older");
    let (state, export) = (older.path().join("state"), older.path().join("export"));
    for dir in [&state, &export] {
        std::fs::create_dir(dir).unwrap();
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    }
    let _socket = std::os::unix::net::UnixListener::bind(state.join("keel.sock")).unwrap();
    let file = config_file(older.path(), "keel.toml", &state, &[&export], "", free_port());
    let refused = keel(&["serve", "--config", file.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(refused.stderr.contains("another keel is running with the state directory"), "{refused:?}");
    assert!(!state.join("handle.key").exists() && !state.join("nsm").exists(), "it touched the state directory");
}

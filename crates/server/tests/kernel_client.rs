//! End to end with the real Linux kernel NFS client: `tools/kernel-nfs-client`
//! boots Debian's kernel under qemu, mounts a `keel` started here (NFSv3 over
//! TCP) and runs a guest script from `tests/kernel/`. The scripts print
//! `RESULT key=value` lines; each test checks them and, since the export is a
//! local directory, what the server really did to it.
//!
//! Each test boots a VM on a 2-core machine, so they run one at a time.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use keel_testkit::netns::Netns;
use keel_testkit::server::{ExportOpts, TestServer, digest, keel_bin};

const RUN_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/kernel-nfs-client/run.sh");
const GUEST_SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernel");

const MIB: u64 = 1 << 20;
/// The anonymous identity root_squash maps root to (anonuid/anongid defaults).
const NOBODY: u32 = 65534;

static VM: Mutex<()> = Mutex::new(());

/// Export 1 with `options`, made `insecure`: qemu's user-mode network
/// (slirp) NATs the guest's connections, so Keel sees them come from
/// slirp's ordinary ports on 127.0.0.1, never from the reserved ports the
/// guest kernel binds, and a `secure` export would refuse the mount.
fn vm_export(options: &str) -> ExportOpts {
    ExportOpts::new(1, "export", &format!("{options}\ninsecure = true"))
}

/// One VM at a time; a failed test must not poison the others.
fn one_vm_at_a_time() -> MutexGuard<'static, ()> {
    VM.lock().unwrap_or_else(|e| e.into_inner())
}

/// One run of a guest script: its exit code, its output and the results it
/// printed.
struct Guest {
    script: String,
    code: Option<i32>,
    output: String,
    results: BTreeMap<String, String>,
}

impl Guest {
    /// Boots the VM with export `id` of `server` mounted and runs `script`;
    /// `opts` are extra mount options. The guest reaches the server through
    /// qemu's user-mode network (NAT).
    fn run(server: &TestServer, id: u32, script: &str, opts: &str, timeout_s: u32) -> Guest {
        Self::run_with(Command::new(RUN_SH), server, id, script, opts, timeout_s)
    }

    /// Like `run`, with the guest on the tap device `tap` of `ns`, where
    /// `server` runs too: its packets reach the server unchanged.
    fn run_on_tap(ns: &Netns, tap: &str, server: &TestServer, script: &str, timeout_s: u32) -> Guest {
        let mut cmd = ns.cmd(&[RUN_SH, "--tap", tap]);
        cmd.env("PATH", std::env::var_os("PATH").unwrap_or_default());
        Self::run_with(cmd, server, 1, script, "", timeout_s)
    }

    fn run_with(mut cmd: Command, server: &TestServer, id: u32, script: &str, opts: &str, timeout_s: u32) -> Guest {
        cmd.arg("--port")
            .arg(server.addr.port().to_string())
            .arg("--export")
            .arg(server.export_path(id))
            .arg("--timeout")
            .arg(timeout_s.to_string());
        if !opts.is_empty() {
            cmd.arg("--opts").arg(opts);
        }
        cmd.arg(Path::new(GUEST_SCRIPTS).join(script));
        let start = Instant::now();
        let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {RUN_SH}: {e}"));
        let elapsed = start.elapsed();
        let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let mut results = BTreeMap::new();
        for line in output.lines() {
            // Kernel messages may share the console: look for the marker anywhere.
            let Some(at) = line.find("RESULT ") else { continue };
            let Some((key, value)) = line[at + 7..].split_once('=') else { continue };
            let old = results.insert(key.to_string(), value.to_string());
            assert!(old.is_none(), "{script} printed {key} twice:\n{output}");
        }
        let g = Guest { script: script.into(), code: out.status.code(), output, results };
        eprintln!("{script}: exit {:?} after {:.1} s", g.code, elapsed.as_secs_f64());
        for line in g.output.lines().filter(|l| l.starts_with("TIME ")) {
            eprintln!("  {line}");
        }
        g
    }

    /// The script ran to its end and exited 0.
    fn assert_completed(&self) {
        assert!(self.code == Some(0) && self.results.get("done").is_some_and(|d| d == "1"), "guest failed:\n{self}");
    }

    fn get(&self, key: &str) -> &str {
        self.results.get(key).unwrap_or_else(|| panic!("no result {key}:\n{self}"))
    }

    fn expect(&self, key: &str, want: &str) {
        assert_eq!(self.get(key), want, "result {key}:\n{self}");
    }

    /// A command that must have failed with `message` (strerror text).
    fn expect_failure(&self, op: &str, message: &str) {
        let (rc, err) = (self.get(&format!("rc_{op}")), self.get(&format!("err_{op}")));
        assert!(
            rc != "0" && err.contains(message),
            "{op}: wanted a failure with {message:?}, got rc {rc}, {err:?}\n{self}"
        );
    }

    fn expect_success(&self, op: &str) {
        assert_eq!(self.get(&format!("rc_{op}")), "0", "{op} failed: {:?}\n{self}", self.get(&format!("err_{op}")));
    }
}

impl fmt::Display for Guest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "---- guest {} (exit {:?}) ----\n{}---- end of guest output ----",
            self.script, self.code, self.output
        )
    }
}

/// Metadata of the object itself (never the symlink's target).
fn meta(path: &Path) -> fs::Metadata {
    fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{} on the server: {e}", path.display()))
}

fn absent(path: &Path) -> bool {
    fs::symlink_metadata(path).is_err()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{} on the server: {e}", path.display()))
}

fn mode(path: &Path) -> u32 {
    meta(path).mode() & 0o7777
}

/// Names in a directory, sorted bytewise (as the guest's `sort` in the C locale).
fn names(dir: &Path) -> Vec<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let mut v: Vec<Vec<u8>> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    v.sort();
    v
}

/// md5 of the names one per line, as `ls | sort | md5sum` prints it.
fn listing_md5(scratch: &Path, names: &[Vec<u8>]) -> String {
    let mut text = Vec::new();
    for n in names {
        text.extend_from_slice(n);
        text.push(b'\n');
    }
    let file = scratch.join("listing.txt");
    fs::write(&file, text).unwrap();
    digest(&file)
}

/// Everything the server has under `dir`: path, type, mode, owner, size,
/// mtime, link target (to show that nothing changed).
fn snapshot(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = meta(&p);
            let target = fs::read_link(&p).map(|t| t.display().to_string()).unwrap_or_default();
            out.push(format!(
                "{} {:o} {}:{} {} {}.{} {target}",
                p.display(),
                m.mode(),
                m.uid(),
                m.gid(),
                m.len(),
                m.mtime(),
                m.mtime_nsec()
            ));
            if m.is_dir() {
                todo.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The server logged no errors and never met an errno it does not map.
fn assert_log_clean(server: &TestServer) {
    let log = server.log_text();
    let bad: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ") || l.contains("unexpected")).collect();
    assert!(bad.is_empty(), "server log has errors:\n{}", bad.join("\n"));
}

/// The server holds no descriptor of a deleted file: a name that goes away
/// takes the cached descriptor with it, so the space is freed at once.
fn assert_no_deleted_files_held(server: &TestServer) {
    let fds = PathBuf::from(format!("/proc/{}/fd", server.pid()));
    let held: Vec<String> = fs::read_dir(&fds)
        .unwrap()
        .filter_map(|e| fs::read_link(e.unwrap().path()).ok())
        .map(|t| t.display().to_string())
        .filter(|t| t.ends_with(" (deleted)"))
        .collect();
    assert!(held.is_empty(), "the server still holds deleted files open:\n{}", held.join("\n"));
}

fn timed(name: &str, start: Instant) {
    eprintln!("{name}: {:.1} s in all", start.elapsed().as_secs_f64());
}

/// The workload on a rw, no_root_squash export: nested mkdir, a
/// 256 MiB file written and read back, append, truncate, renames across
/// directories, hard and symbolic links, chmod and chown with their effect on
/// other users, 10,000 entries listed completely; then, from a fresh mount,
/// rm -r of all of it.
#[test]
fn workload_on_rw_export() {
    let _vm = one_vm_at_a_time();
    let start = Instant::now();
    let server = TestServer::start("kclient-rw", vec![vm_export("access = \"rw\"\nsquash = \"no_root_squash\"")], "");
    let g = Guest::run(&server, 1, "workload.sh", "", 900);
    g.assert_completed();
    let w = server.export_dir(1).join("w");

    // Nested mkdir, and the subtree rename that moved d (with e) under x.
    g.expect("nested_mkdir", "ok");
    g.expect("renamed", "ok");
    assert!(meta(&w.join("a/b/c")).is_dir() && meta(&w.join("x/d2/e")).is_dir(), "{g}");
    assert!(absent(&w.join("a/b/c/d")), "renamed directory still at its old place");

    // 256 MiB: as generated, as read back cold by the client, as on the server.
    let big = w.join("x/y/big.moved");
    assert!(absent(&w.join("a/b/c/d/e/big")) && absent(&w.join("x/d2/e/big")), "big file not renamed away");
    assert_eq!(meta(&big).len(), 256 * MIB);
    g.expect("big_size", &(256 * MIB).to_string());
    g.expect("big_moved_size", &(256 * MIB).to_string());
    let host_md5 = digest(&big);
    g.expect("big_written_md5", &host_md5);
    g.expect("big_read_md5", &host_md5);

    g.expect("hello", "hello keel");
    assert_eq!(read(&w.join("hello")), "hello keel\n");

    // Append.
    g.expect("log", "one,two,three,");
    assert_eq!(read(&w.join("log")), "one\ntwo\nthree\n");
    g.expect("app_size", &MIB.to_string());
    assert_eq!(meta(&w.join("app")).len(), MIB);
    // Expected (head + tail as generated), read back by the client, on the server.
    let app_md5 = digest(&w.join("app"));
    g.expect("app_expected_md5", &app_md5);
    g.expect("app_md5", &app_md5);

    // Truncate down, up (zeros), and O_TRUNC.
    g.expect("trunc_shrunk_size", "1000");
    g.expect("trunc_size", "50000");
    g.expect("trunc_tail_nonzero", "0");
    let trunc = fs::read(w.join("trunc")).unwrap();
    assert_eq!(trunc.len(), 50000);
    assert!(trunc[1000..].iter().all(|b| *b == 0), "extended part of the truncated file is not zero");
    assert!(trunc[..1000].iter().any(|b| *b != 0), "kept part of the truncated file lost its data");
    let trunc_md5 = digest(&w.join("trunc"));
    g.expect("trunc_expected_md5", &trunc_md5);
    g.expect("trunc_md5", &trunc_md5);
    g.expect("emptied_size", "0");
    assert_eq!(meta(&w.join("emptied")).len(), 0);

    // Hard links: three names of one inode, in three directories.
    g.expect("nlink", "3");
    g.expect("same_inode", "yes");
    g.expect("via_orig", "linked,more,");
    let orig = meta(&w.join("orig"));
    for name in ["orig", "x/hard1", "a/hard2"] {
        let m = meta(&w.join(name));
        assert_eq!((m.ino(), m.nlink()), (orig.ino(), 3), "{name}");
    }
    assert_eq!(read(&w.join("orig")), "linked\nmore\n");

    // Symbolic links.
    g.expect("sym_target", "../orig");
    g.expect("sym_read", "linked,more,");
    g.expect("dirsym_list", "c,");
    g.expect("dangling_target", "/nonexistent/target");
    assert!(g.get("dangling_read").contains("No such file or directory"), "{g}");
    for (name, target) in [("x/sym", "../orig"), ("dirsym", "a/b"), ("dangling", "/nonexistent/target")] {
        assert!(meta(&w.join(name)).file_type().is_symlink(), "{name} is not a symlink on the server");
        assert_eq!(fs::read_link(w.join(name)).unwrap(), PathBuf::from(target), "{name}");
    }

    // chmod, and chown clearing setuid.
    g.expect("perm_mode", "640");
    g.expect("sticky_mode", "1777");
    g.expect("sgid_mode", "2750");
    assert_eq!(mode(&w.join("perm")), 0o640);
    assert_eq!(mode(&w.join("sticky")), 0o1777);
    assert_eq!(mode(&w.join("sgid")), 0o2750);
    g.expect("suid_after_chown", "755:1234");
    assert_eq!((mode(&w.join("suid")), meta(&w.join("suid")).uid()), (0o755, 1234));

    // chown and the permission checks that follow from it.
    g.expect("owned_ids", "1234:5678");
    g.expect("owned_mode", "600");
    let owned = meta(&w.join("owned"));
    assert_eq!((owned.uid(), owned.gid(), owned.mode() & 0o7777), (1234, 5678, 0o600));
    g.expect("alice_read", "secret");
    assert!(g.get("bob_read").contains("Permission denied"), "{g}");
    assert!(g.get("bob_write").contains("Permission denied"), "{g}");
    assert!(g.get("bob_chmod").contains("Operation not permitted"), "{g}");
    assert_eq!(read(&w.join("owned")), "secret\nalice\n", "only alice's append may land");
    g.expect("grp_ids", "0:4321");
    assert_eq!(meta(&w.join("grp")).gid(), 4321);
    g.expect("bob_grp_read", "group");
    assert!(g.get("alice_grp_read").contains("Permission denied"), "{g}");
    g.expect("alicedir_file", "1234:5678");
    let f = meta(&w.join("alicedir/f"));
    assert_eq!((f.uid(), f.gid()), (1234, 5678));
    assert!(g.get("bob_ls_alicedir").contains("Permission denied"), "{g}");

    // 10,000 entries: all created, all listed, each once.
    let want: Vec<Vec<u8>> = (1..=10000).map(|i| format!("entry-{i:05}").into_bytes()).collect();
    let on_server = names(&w.join("many"));
    assert!(on_server == want, "the server's directory does not hold entry-00001..entry-10000 ({})", on_server.len());
    g.expect("many_count", "10000");
    g.expect("many_unique", "10000");
    g.expect("many_find", "10000");
    g.expect("many_md5", &listing_md5(&server.base, &want));

    // Phase 2, from a fresh client: rm -r of everything.
    let g = Guest::run(&server, 1, "cleanup.sh", "", 600);
    g.assert_completed();
    g.expect("before", "10000");
    g.expect("rm_rc", "0");
    g.expect("gone", "yes");
    g.expect("left", "0");
    assert!(absent(&w), "rm -r left {} on the server", w.display());
    assert!(names(&server.export_dir(1)).is_empty());
    assert_no_deleted_files_held(&server);
    assert_log_clean(&server);
    timed("workload_on_rw_export", start);
}

/// A `ro` export, with root not squashed so that only `ro` stands in the
/// way: reading works, and every change fails with EROFS.
#[test]
fn readonly_export() {
    let _vm = one_vm_at_a_time();
    let start = Instant::now();
    let server = TestServer::start("kclient-ro", vec![vm_export("access = \"ro\"\nsquash = \"no_root_squash\"")], "");
    let root = server.export_dir(1);
    fs::write(root.join("readme.txt"), "keel read-only data\n").unwrap();
    fs::create_dir(root.join("sub")).unwrap();
    fs::create_dir(root.join("empty")).unwrap();
    let inner: Vec<u8> = (0..65536u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    fs::write(root.join("sub/inner.bin"), &inner).unwrap();
    let before = snapshot(&root);
    let inner_md5 = digest(&root.join("sub/inner.bin"));

    let g = Guest::run(&server, 1, "readonly.sh", "", 300);
    g.assert_completed();
    g.expect("read", "keel read-only data");
    g.expect("inner_md5", &inner_md5);
    g.expect("listing", "empty,readme.txt,sub,");
    for op in [
        "create",
        "touch_new",
        "mkdir",
        "rm",
        "rm_r",
        "rmdir",
        "mv",
        "symlink",
        "link",
        "touch_existing",
        "chmod",
        "chown",
        "mknod",
    ] {
        g.expect_failure(op, "Read-only file system");
    }
    // Opening an existing file for writing fails at open(), before any
    // data: the client asks ACCESS first and the server withholds MODIFY and
    // EXTEND on a ro export, as knfsd does; the client reports that as EACCES.
    for op in ["truncate", "append", "overwrite"] {
        g.expect_failure(op, "Permission denied");
    }
    g.expect("after_read", "keel read-only data");
    g.expect("after_listing", "empty,readme.txt,sub,");
    assert_eq!(snapshot(&root), before, "the read-only export changed");
    assert_log_clean(&server);
    timed("readonly_export", start);
}

/// The Linux client mounts a `secure` export (the default) when its packets
/// reach Keel as it sent them: on a tap device in a network namespace of
/// the test's own, where Keel listens, the guest kernel's connections come
/// from its reserved ports, and root (no_root_squash) writes as root.
/// Through qemu's user-mode network, which NATs the guest onto qemu's own
/// ordinary ports, the same export refuses the mount ("illegal port"):
/// why the other tests here mark their exports `insecure`.
#[test]
fn secure_export_through_a_tap_device() {
    const TAP: &str = "kctap0";
    let _vm = one_vm_at_a_time();
    let start = Instant::now();
    let rw = "access = \"rw\"\nsquash = \"no_root_squash\"";
    let ns = Netns::new("kclient");
    ns.run_ok(&["ip", "tuntap", "add", "dev", TAP, "mode", "tap"]);
    ns.run_ok(&["ip", "addr", "add", "10.0.2.2/24", "dev", TAP]);
    ns.run_ok(&["ip", "link", "set", TAP, "up"]);
    let listen = "10.0.2.2:2049".parse().unwrap();
    let server = TestServer::start_in_netns("kclient-tap", vec![ExportOpts::new(1, "export", rw)], &ns, listen);

    let g = Guest::run_on_tap(&ns, TAP, &server, "secure.sh", 300);
    g.assert_completed();
    g.expect("whoami", "0:0");
    g.expect("rc_write", "0");
    g.expect("rc_mkdir", "0");
    let root = server.export_dir(1);
    assert_eq!(read(&root.join("by-root")), "written by the guest's root\n");
    for made in ["by-root", "made-by-root"] {
        let m = meta(&root.join(made));
        assert_eq!((m.uid(), m.gid()), (0, 0), "{made} was not made as root");
    }
    // Every connection Keel took came from the guest itself, from a
    // reserved port.
    let log = server.log_text();
    let ports: Vec<u16> = log
        .lines()
        .filter(|l| l.contains("connection opened"))
        .filter_map(|l| l.split("peer=10.0.2.15:").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(!ports.is_empty() && ports.iter().all(|&p| p < 1024), "guest source ports {ports:?}; log:\n{log}");
    assert_log_clean(&server);

    let nat = TestServer::start("kclient-nat", vec![ExportOpts::new(1, "export", rw)], "");
    let g = Guest::run(&nat, 1, "secure.sh", "", 300);
    assert_eq!(g.code, Some(125), "a secure export mounted through NAT:\n{g}");
    assert!(nat.log_text().contains("illegal port"), "{}", nat.log_text());
    timed("secure_export_through_a_tap_device", start);
}

/// A root_squash export: the guest's root creates files as nobody, cannot
/// read root's private files, write root's files or give files away; a
/// non-root user keeps their identity.
#[test]
fn root_squash_export() {
    let _vm = one_vm_at_a_time();
    let start = Instant::now();
    let server = TestServer::start("kclient-squash", vec![vm_export("access = \"rw\"\nsquash = \"root_squash\"")], "");
    let root = server.export_dir(1);
    assert_eq!(mode(&root), 0o777, "the export root must let nobody create");
    let secret = root.join("secret");
    fs::write(&secret, "top secret\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(root.join("public"), "public data\n").unwrap();
    fs::set_permissions(root.join("public"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::create_dir(root.join("rootdir")).unwrap();
    fs::set_permissions(root.join("rootdir"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(root.join("rootdir/inside"), "inside\n").unwrap();

    let g = Guest::run(&server, 1, "root_squash.sh", "", 300);
    g.assert_completed();
    g.expect("whoami", "0:0");
    for (key, name) in [("mine_ids", "mine"), ("mydir_ids", "mydir"), ("nested_ids", "mydir/f")] {
        g.expect(key, &format!("{NOBODY}:{NOBODY}"));
        let m = meta(&root.join(name));
        assert_eq!((m.uid(), m.gid()), (NOBODY, NOBODY), "{name} on the server");
    }
    g.expect_failure("read_secret", "Permission denied");
    g.expect_success("read_public");
    g.expect("err_read_public", "public data");
    g.expect_failure("append_public", "Permission denied");
    g.expect_failure("rm_in_rootdir", "Permission denied");
    g.expect_failure("create_in_rootdir", "Permission denied");
    g.expect_failure("chmod_secret", "Operation not permitted");
    g.expect_failure("chown_mine", "Operation not permitted");
    g.expect("mine_ids_after", &format!("{NOBODY}:{NOBODY}"));
    g.expect("alice_ids", "1234:5678");

    assert_eq!(read(&secret), "top secret\n");
    assert_eq!((mode(&secret), meta(&secret).uid()), (0o600, 0));
    assert_eq!(read(&root.join("public")), "public data\n");
    assert!(!absent(&root.join("rootdir/inside")) && absent(&root.join("rootdir/new")));
    let m = meta(&root.join("mine"));
    assert_eq!((m.uid(), m.gid()), (NOBODY, NOBODY), "chown to root went through");
    let a = meta(&root.join("alicefile"));
    assert_eq!((a.uid(), a.gid()), (1234, 5678), "a non-root user was squashed");
    assert_log_clean(&server);
    timed("root_squash_export", start);
}

/// What else the client shows: dd conv=fsync lands intact, df reports the
/// export's file system (FSSTAT), mv over an existing file replaces it, and
/// plain READDIR (nordirplus) lists a directory with awkward names completely.
#[test]
fn fsync_df_rename_over_and_readdir() {
    let _vm = one_vm_at_a_time();
    let start = Instant::now();
    let server =
        TestServer::start("kclient-extras", vec![vm_export("access = \"rw\"\nsquash = \"no_root_squash\"")], "");
    let root = server.export_dir(1);
    let hostdir = root.join("hostdir");
    fs::create_dir(&hostdir).unwrap();
    let mut want: Vec<Vec<u8>> = (1..=5000).map(|i| format!("plain-{i:05}").into_bytes()).collect();
    for special in [
        "with space".as_bytes(),
        "-dash".as_bytes(),
        "back\\slash".as_bytes(),
        "ünïcödé-名前".as_bytes(),
        b"high-\xff-byte",
        &[b'L'; 255],
    ] {
        want.push(special.to_vec());
    }
    for n in &want {
        use std::os::unix::ffi::OsStrExt;
        fs::write(hostdir.join(std::ffi::OsStr::from_bytes(n)), "").unwrap();
    }
    want.sort();

    let g = Guest::run(&server, 1, "extras.sh", "nordirplus", 300);
    g.assert_completed();

    // dd conv=fsync.
    g.expect("dd_rc", "0");
    assert_eq!(meta(&root.join("fsynced")).len(), 8 * MIB);
    g.expect("src_md5", &digest(&root.join("fsynced")));

    // df: the guest's total is the server file system's, rounded up to the
    // client's block size (at most wsize, 1 MiB).
    let df: Vec<&str> = g.get("df").split_whitespace().collect();
    assert!(df.len() >= 5 && df[df.len() - 1] == "/mnt/nfs", "df output: {df:?}\n{g}");
    let field = |i: usize| -> u64 { df[df.len() - 5 + i].parse().unwrap_or_else(|_| panic!("df field {i}: {df:?}")) };
    let (total, used, avail) = (field(0), field(1), field(2));
    let st = statvfs(&root);
    let host_total = st.f_blocks * st.f_frsize / 1024;
    let host_avail = st.f_bavail * st.f_frsize / 1024;
    assert!(total >= host_total && total - host_total <= 1024, "df total {total} KiB, server {host_total} KiB");
    assert!(used + avail <= total, "df: used {used} + avail {avail} > total {total}");
    // Other tests may be writing to the same disk meanwhile: a loose bound.
    assert!(avail.abs_diff(host_avail) <= host_total / 20, "df avail {avail} KiB, server {host_avail} KiB");
    g.expect("namelen", "255");

    // mv over an existing file, in one directory and across two.
    g.expect("target", "new");
    g.expect("keep", "old");
    g.expect("keep_nlink", "1");
    g.expect("src_gone", "yes");
    g.expect("d2_moving", "from-d1");
    g.expect("d1_left", "0");
    assert_eq!(read(&root.join("target")), "new\n");
    assert_eq!(read(&root.join("keep")), "old\n");
    assert_eq!(meta(&root.join("keep")).nlink(), 1);
    assert_ne!(meta(&root.join("keep")).ino(), meta(&root.join("target")).ino());
    assert!(absent(&root.join("src")));
    assert_eq!(read(&root.join("d2/moving")), "from-d1\n");
    assert!(names(&root.join("d1")).is_empty());
    assert_no_deleted_files_held(&server);

    // READDIR of the host's directory.
    g.expect("hostdir_count", &want.len().to_string());
    g.expect("hostdir_md5", &listing_md5(&server.base, &want));
    assert_log_clean(&server);
    timed("fsync_df_rename_over_and_readdir", start);
}

fn statvfs(path: &Path) -> libc::statvfs {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string and a zeroed out-struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0, "statvfs {}", path.display());
    st
}

/// More files in use than the server may hold descriptors: the server must
/// keep serving (close cached descriptors, reopen by handle) instead of
/// answering JUKEBOX to every new object forever. It starts under a hard
/// limit of 1024 open files (as under systemd or in many containers); 1024
/// only makes the case cheap: with this machine's 20,000 the same happens at
/// 20,000 files.
#[test]
fn more_files_than_descriptors() {
    let _vm = one_vm_at_a_time();
    let start = Instant::now();
    let mut server =
        TestServer::start("kclient-fds", vec![vm_export("access = \"rw\"\nsquash = \"no_root_squash\"")], "");
    let keel = LimitedKeel::start(&mut server, 1024);
    let limits = fs::read_to_string(format!("/proc/{}/limits", keel.0.id())).unwrap();
    assert!(
        limits.lines().any(|l| l.starts_with("Max open files") && l.split_whitespace().nth(4) == Some("1024")),
        "the server did not start under the lowered limit:\n{limits}"
    );

    let g = Guest::run(&server, 1, "fd_limit.sh", "", 300);
    let lots = server.export_dir(1).join("lots");
    let first: Vec<String> = (1..=200).map(|i| format!("f-{i:04}")).collect();
    let mut content = String::new();
    for f in &first {
        content += &format!("{f}\n");
    }
    let scratch = server.base.join("first200.txt");
    fs::write(&scratch, &content).unwrap();

    let on_server = names(&lots).len();
    assert!(
        g.get("create_rc") == "0" && on_server == 2500,
        "creating 2,500 files under a 1,024-descriptor limit: touch exited {} (137: killed after 90 s), \
         {on_server} files on the server\n{g}",
        g.get("create_rc")
    );
    g.expect("count", "2500");
    g.expect("write_rc", "0");
    g.expect("first200_md5", &digest(&scratch));
    for f in &first {
        assert_eq!(read(&lots.join(f)), format!("{f}\n"));
    }
    g.assert_completed();
    assert_log_clean(&server);
    timed("more_files_than_descriptors", start);
}

/// The keel of a `TestServer` (same configuration, port, exports and log),
/// started again under an open-file limit: the harness starts it with this
/// process's limit, which a root without CAP_SYS_RESOURCE could lower but
/// never raise again.
struct LimitedKeel(std::process::Child);

impl LimitedKeel {
    fn start(server: &mut TestServer, nofile: u64) -> Self {
        use std::os::unix::process::CommandExt;
        server.kill9();
        let log = fs::OpenOptions::new().append(true).open(&server.log).unwrap();
        let mut cmd = Command::new(keel_bin());
        cmd.arg("serve").arg("--config").arg(&server.config).stdout(std::process::Stdio::null()).stderr(log);
        let limit = libc::rlimit { rlim_cur: nofile, rlim_max: nofile };
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let child = LimitedKeel(cmd.spawn().expect("start keel"));
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(server.addr).is_err() {
            assert!(Instant::now() < deadline, "keel did not listen again on {}:\n{}", server.addr, server.log_text());
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        child
    }
}

impl Drop for LimitedKeel {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `keel ARGS --state-dir` of `server`, which must succeed; its stdout.
fn keel_admin(server: &TestServer, args: &[&str]) -> String {
    let out = Command::new(keel_bin())
        .args(args)
        .arg("--state-dir")
        .arg(server.base.join("state"))
        .output()
        .unwrap_or_else(|e| panic!("keel {}: {e}", args.join(" ")));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "keel {} failed: {stdout}{stderr}", args.join(" "));
    stdout.into_owned()
}

/// The kernel client on a write-back export: 1 MiB and 4 KiB writes, odd
/// appends, a file cut down while its data is in the log, small files.
/// What the client reads back with cold caches is what it wrote, and once
/// `keel cache mode 1 off` has flushed the log, so is the file system.
#[test]
fn write_back_cache_with_the_kernel_client() {
    let _vm = one_vm_at_a_time();
    let start = Instant::now();
    let devices = keel_testkit::procs::TempDir::on_disk("kclient-cache-devices");
    let mut table = Vec::new();
    for name in ["c1", "c2"] {
        let path = devices.path().join(name);
        fs::File::create(&path).unwrap().set_len(128 * MIB).unwrap();
        table.push(format!("{:?}", path.display().to_string()));
    }
    // Every stream goes through the log, whatever its length.
    let cache = format!("[cache]\ndevices = [{}]\nlog_mib = 64\nsequential_cutoff_mib = 4096\n", table.join(", "));
    let export = vm_export("access = \"rw\"\nsquash = \"no_root_squash\"\ncache = \"write-back\"");
    let server = TestServer::start("kclient-cache", vec![export], &cache);
    let g = Guest::run(&server, 1, "write_back.sh", "", 600);
    g.assert_completed();
    for op in ["big_rc", "overwrites_failed", "appends_failed", "truncate_rc"] {
        g.expect(op, "0");
    }
    g.expect("errors", "");
    g.expect("small_count", "150");
    g.expect("big_size", &(24 * MIB).to_string());
    g.expect("odd_size", "50010");
    g.expect("cut_size", "3000000");
    let names = ["big", "odd", "cut", "small"];
    for f in names {
        let want = g.get(&format!("{f}_expected_md5"));
        assert_eq!(g.get(&format!("{f}_md5")), want, "{f} as the client read it back:\n{g}");
    }

    let stat: serde_json::Value =
        serde_json::from_str(&keel_admin(&server, &["cache", "stat", "--json"])).expect("cache stat --json");
    let logged = stat["exports"][0]["bytes_logged"].as_u64().unwrap_or(0);
    assert!(logged >= 24 * MIB, "the writes did not go through the log: {stat}");
    keel_admin(&server, &["cache", "mode", "1", "off"]);
    let dir = server.export_dir(1);
    for (f, path) in names.iter().zip(["big", "odd", "cut", "small/renamed"]) {
        assert_eq!(
            digest(&dir.join(path)),
            g.get(&format!("{f}_expected_md5")),
            "{path} on the file system after the flush"
        );
    }
    assert_log_clean(&server);
    timed("write_back_cache_with_the_kernel_client", start);
}

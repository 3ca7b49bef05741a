//! NFSv4.1 and 4.2 end to end with the real Linux kernel client
//! (`tools/kernel-nfs-client`, as `kernel_client.rs` runs it): a mount with
//! no version option gets 4.2 and works, 4.1 and 4.2 mount the same export,
//! the pseudo root shows only the exports the client is admitted to, and an
//! NFSv3 client (libnfs) reads what the v4 client wrote, by the same path;
//! and a second client kernel (Debian 13's 6.12) reads sparse files with
//! NFSv4.2 READ_PLUS.
//!
//! Four boots of the VM, one at a time (2 cores).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use keel_testkit::server::{ExportOpts, TestServer, digest};

const RUN_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/kernel-nfs-client/run.sh");
const GUEST_SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernel");
const BOOT_TIMEOUT_S: u32 = 300;

/// What one boot of the guest printed.
struct Guest {
    code: Option<i32>,
    output: String,
    results: BTreeMap<String, String>,
}

impl Guest {
    /// Boots the VM with `export` of `server` mounted as `vers` says
    /// (`--vers` of run.sh) and runs the guest script `script`.
    fn run(server: &TestServer, vers: &str, export: &str, script: &str, files: &[&Path]) -> Guest {
        Guest::run_with(server, vers, export, script, files, &[])
    }

    /// As `run`, with more of run.sh's options (`--kernel trixie`).
    fn run_with(server: &TestServer, vers: &str, export: &str, script: &str, files: &[&Path], opts: &[&str]) -> Guest {
        let mut cmd = Command::new(RUN_SH);
        cmd.args(opts);
        cmd.arg("--port").arg(server.addr.port().to_string());
        cmd.arg("--vers").arg(vers).arg("--export").arg(export);
        cmd.arg("--timeout").arg(BOOT_TIMEOUT_S.to_string());
        for f in files {
            cmd.arg("--file").arg(f);
        }
        cmd.arg(Path::new(GUEST_SCRIPTS).join(script));
        let start = Instant::now();
        let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {RUN_SH}: {e}"));
        let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let results = keel_testkit::procs::guest_results(&output);
        eprintln!("{script} ({vers}): exit {:?} after {:.1} s", out.status.code(), start.elapsed().as_secs_f64());
        let g = Guest { code: out.status.code(), output, results };
        assert!(
            g.code == Some(0) && g.get("done") == "1",
            "guest failed:\n{}\nserver log:\n{}",
            g.output,
            server.log_text()
        );
        g
    }

    fn get(&self, key: &str) -> &str {
        self.results.get(key).map_or("", String::as_str)
    }

    fn expect(&self, key: &str, want: &str) {
        assert_eq!(self.get(key), want, "result {key}:\n{}", self.output);
    }
}

/// md5 of what libnfs's NFSv3 `nfs-cat` reads of `name` in `export`.
fn nfs3_cat_md5(server: &TestServer, export: &str, name: &str, scratch: &Path) -> String {
    let url = format!("nfs://127.0.0.1{export}/{name}?nfsport={0}&mountport={0}", server.addr.port());
    let out = Command::new("nfs-cat").arg(&url).output().expect("nfs-cat (apt-get install libnfs-utils)");
    assert!(out.status.success(), "nfs-cat {url}: {}", String::from_utf8_lossy(&out.stderr));
    let copy = scratch.join(format!("v3-{name}"));
    fs::write(&copy, &out.stdout).unwrap();
    digest(&copy)
}

/// The server's count of NFSv4 LOOKUP operations and of COMPOUNDs so far.
fn v4_op_counts(server: &TestServer) -> (u64, u64) {
    let mut cmd = Command::new(keel_testkit::server::keel_bin());
    cmd.args(["stat", "--json", "--config"]).arg(&server.config);
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "keel stat: {}", String::from_utf8_lossy(&out.stderr));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let count = |program: &str, name: &str| {
        let p = s["calls"]["programs"].as_array().unwrap().iter().find(|p| p["name"] == program).expect(program);
        let c = p["procedures"].as_array().unwrap().iter().find(|c| c["name"] == name);
        c.map_or(0, |c| c["calls"].as_u64().unwrap())
    };
    (count("nfs4ops", "lookup"), count("nfs4", "compound"))
}

#[test]
fn the_kernel_client_mounts_v4_2_by_default_and_works() {
    let mut hidden = ExportOpts::new(2, "hidden", "access = \"rw\"\ninsecure = true");
    // Not this client (the guest's connections come from 127.0.0.1).
    hidden.clients = "[[export.clients]]\nhost = \"192.0.2.1\"\n".into();
    let exports =
        vec![ExportOpts::new(1, "export", "access = \"rw\"\nsquash = \"no_root_squash\"\ninsecure = true"), hidden];
    let server = TestServer::start("nfs4", exports, "nfs_versions = [\"3\", \"4.1\", \"4.2\"]");
    let export = server.export_path(1);
    let dir = server.export_dir(1);
    let path_file = server.base.join("export-path");
    fs::write(&path_file, export.trim_start_matches('/')).unwrap();

    // 1. No version option, at the pseudo root: 4.2.
    let g = Guest::run(&server, "auto", "/", "nfs4_workload.sh", &[&path_file]);
    g.expect("mount_vers", "4.2");
    g.expect("pseudo_listing", "export");
    let big = digest(&dir.join("big"));
    g.expect("written_md5", &big);
    g.expect("read_md5", &big);
    g.expect("mkdir", "ok");
    assert!(fs::metadata(dir.join("d")).unwrap().is_dir());
    g.expect("renamed", "moving");
    assert!(!dir.join("d/a").exists() && fs::read_to_string(dir.join("d/b")).unwrap() == "moving\n");
    g.expect("removed", "ok");
    assert!(!dir.join("d/c").exists());
    g.expect("readlink", "some/target");
    assert_eq!(fs::read_link(dir.join("sl")).unwrap(), Path::new("some/target"));
    g.expect("truncated", "abc");
    assert_eq!(fs::read(dir.join("t")).unwrap(), b"abc");
    g.expect("mode", "640");
    assert_eq!(fs::metadata(dir.join("t")).unwrap().permissions().mode() & 0o7777, 0o640);
    assert_eq!(fs::metadata(dir.join("t")).unwrap().uid(), 0, "no_root_squash: root's file");
    g.expect("ls_lines", "5");
    // An NFSv3 client sees the same file by the same path.
    assert_eq!(nfs3_cat_md5(&server, &export, "big", &server.base), big);

    // 2. vers=4.1 and 3. vers=4.2, at the export's path.
    for vers in ["4.1", "4.2"] {
        let before = v4_op_counts(&server);
        let g = Guest::run(&server, vers, &export, "nfs4_again.sh", &[]);
        g.expect("mount_vers", vers);
        // 64 creates and 64 removes in one directory, each the only change
        // of it: the client trusts its cached names of the directory
        // (atomic change_info4) instead of looking each name up again
        // before removing it (an NFSv3 client does not either). The rest
        // of the boot takes a handful.
        g.expect("meta", "ok");
        let after = v4_op_counts(&server);
        let (lookups, compounds) = (after.0 - before.0, after.1 - before.1);
        eprintln!("{vers}: {lookups} LOOKUPs in {compounds} COMPOUNDs");
        assert!(lookups < 32, "{vers}: {lookups} LOOKUPs for 64 creates and 64 removes");
        g.expect("big_md5", &big);
        g.expect("wrote", "ok");
        let name = format!("by-{vers}");
        assert_eq!(fs::read_to_string(dir.join(&name)).unwrap(), format!("written over {vers}\n"));
        assert_eq!(nfs3_cat_md5(&server, &export, &name, &server.base), digest(&dir.join(&name)));
    }
}

/// A file of `len` bytes holding `data` ranges of a pattern and holes
/// elsewhere (as the file system makes them: written ranges and a size).
fn sparse_file(path: &Path, len: u64, data: &[(u64, u64)]) {
    use std::os::unix::fs::FileExt;
    let f = fs::File::create(path).unwrap();
    for &(at, n) in data {
        let bytes: Vec<u8> = (at..at + n).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1).collect();
        f.write_all_at(&bytes, at).unwrap();
    }
    f.set_len(len).unwrap();
    f.sync_all().unwrap();
}

/// NFSv4.2 READ_PLUS (RFC 7862 section 15.10) with a client that uses it:
/// Debian 13's Linux 6.12 reads every file with READ_PLUS when the server
/// serves it (this host's 6.1 was built without it). Two sparse files and
/// a dense one read back whole, and the client's READ_PLUS replies carry
/// the data and not the holes: 7 MiB of data in 13 MiB of files.
#[test]
fn a_client_that_reads_with_read_plus_gets_sparse_files_whole_without_their_holes() {
    const MIB: u64 = 1 << 20;
    let opts = "access = \"rw\"\nsquash = \"no_root_squash\"\ninsecure = true";
    let server = TestServer::start("nfs4-read-plus", vec![ExportOpts::new(1, "export", opts)], "");
    let dir = server.export_dir(1);
    // 1 MiB of data, a 3 MiB hole, 1 MiB of data, a 3 MiB hole to the end.
    sparse_file(&dir.join("sparse"), 8 * MIB, &[(0, MIB), (4 * MIB, MIB)]);
    assert!(fs::metadata(dir.join("sparse")).unwrap().blocks() * 512 < 4 * MIB, "the file system keeps holes");
    // Holes of 16 KiB between 240 KiB of data, which READ_PLUS sends as
    // zeros (shorter than its least hole).
    let runs: Vec<_> = (0..8).map(|i| (i * 256 * 1024, 240 * 1024)).collect();
    sparse_file(&dir.join("small-holes"), 2 * MIB, &runs);
    sparse_file(&dir.join("dense"), 3 * MIB + 5, &[(0, 3 * MIB + 5)]);

    let export = server.export_path(1);
    let g = Guest::run_with(&server, "4.2", &export, "nfs4_read_plus.sh", &[], &["--kernel", "trixie"]);
    eprintln!("guest kernel {}", g.get("kernel"));
    g.expect("mount_vers", "4.2");
    for name in ["sparse", "small-holes", "dense"] {
        g.expect(&format!("{name}_md5"), &digest(&dir.join(name)));
    }
    let counts = |key: &str| -> (u64, u64) {
        let v: Vec<u64> = g.get(key).split(' ').filter_map(|n| n.parse().ok()).collect();
        assert_eq!(v.len(), 2, "{key} (ops, bytes received):\n{}", g.output);
        (v[0], v[1])
    };
    let (read_plus_ops, read_plus_bytes) = counts("read_plus");
    let (read_ops, read_bytes) = counts("read");
    eprintln!("READ_PLUS: {read_plus_ops} calls, {read_plus_bytes} bytes; READ: {read_ops} calls, {read_bytes} bytes");
    assert!(read_plus_ops >= 3 && read_bytes < MIB, "the client read with READ_PLUS:\n{}", g.output);
    // The data (2 + 2 + 3 MiB: the small holes go as zeros) and the
    // replies' headers; the sparse file's holes would add 6 MiB.
    assert!(read_plus_bytes < 8 * MIB, "{read_plus_bytes} bytes for 7 MiB of data: holes were sent");
    assert!(!server.log_text().contains("reply larger than its reserved bound"), "READ_PLUS's reply is bounded");
}

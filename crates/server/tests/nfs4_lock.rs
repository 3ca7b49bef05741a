//! NFSv4 locks and NFSv4.2 operations with the real Linux kernel client
//! (`tools/kernel-nfs-client`, `--vers 4.2`), against a process on the
//! server's host: one lock space. The Linux NFSv4 client sends both fcntl
//! and flock(2) locks as LOCK (flock as a whole-file write lock); Keel
//! takes them as OFD locks, which exclude the host's OFD and POSIX locks.
//! Then `fallocate` (ALLOCATE, punch hole: DEALLOCATE), `lseek`
//! SEEK_DATA/SEEK_HOLE (SEEK) and `copy_file_range` (COPY) in the guest,
//! checked on the host and in `keel stat`'s per-operation counts.
//!
//! One boot of the VM. The guest and a thread of the test signal each
//! other with empty files in the export (the guest mounts with
//! `lookupcache=none` so that it sees the host's at once).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use keel_testkit::server::{ExportOpts, TestServer, digest, keel_bin};

const RUN_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/kernel-nfs-client/run.sh");
const GUEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernel");
const BOOT_TIMEOUT_S: u32 = 400;
/// How long one side waits for the other's signal.
const SIGNAL_WAIT: Duration = Duration::from_secs(300);

fn results(output: &str) -> BTreeMap<String, String> {
    keel_testkit::procs::guest_results(output)
}

/// v4lock, built static (the guest has no shared libraries).
fn v4lock(dir: &Path) -> PathBuf {
    let out = dir.join("v4lock");
    keel_testkit::procs::build_static_c(Path::new(&format!("{GUEST}/v4lock.c")), &out);
    out
}

fn wait_for(path: &Path) -> bool {
    let start = Instant::now();
    while !path.exists() {
        if start.elapsed() > SIGNAL_WAIT {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// One lock attempt by a host process: "ok" or "errno N".
fn host_try(tool: &Path, how: &str, file: &Path) -> String {
    let out = Command::new(tool).args(["try", how]).arg(file).arg("k").output().expect("v4lock");
    results(&String::from_utf8_lossy(&out.stdout)).remove("k").unwrap_or_default()
}

#[test]
fn kernel_v4_locks_exclude_the_host_s_and_v4_2_operations_work() {
    let export = ExportOpts::new(1, "export", "access = \"rw\"\nsquash = \"no_root_squash\"\ninsecure = true");
    let server = TestServer::start("nfs4lock", vec![export], "nfs_versions = [\"3\", \"4.1\", \"4.2\"]");
    let dir = server.export_dir(1);
    let tool = v4lock(&server.base);
    let lk = dir.join("lk");
    fs::write(&lk, b"lock me\n").unwrap();

    // The host holds an OFD lock on lk until the guest says go.
    let mut holder = Command::new(&tool)
        .args(["hold", "ofd"])
        .args([&lk, &dir.join("host-holds"), &dir.join("host-go")])
        .stdout(Stdio::piped())
        .spawn()
        .expect("v4lock hold");
    assert!(wait_for(&dir.join("host-holds")), "the host's lock was not taken");

    let host = {
        let (tool, dir, lk) = (tool.clone(), dir.clone(), lk.clone());
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            for how in ["flock", "posix"] {
                if !wait_for(&dir.join(format!("guest-holds-{how}"))) {
                    seen.push(format!("guest {how} lock never held"));
                    break;
                }
                seen.push(format!("{how}: host ofd {}", host_try(&tool, "ofd", &lk)));
                seen.push(format!("{how}: host posix {}", host_try(&tool, "posix", &lk)));
                fs::write(dir.join(format!("guest-go-{how}")), b"").unwrap();
                if !wait_for(&dir.join(format!("guest-released-{how}"))) {
                    seen.push(format!("guest {how} lock never released"));
                    break;
                }
                seen.push(format!("{how}: host ofd after {}", host_try(&tool, "ofd", &lk)));
                fs::write(dir.join(format!("host-checked-{how}")), b"").unwrap();
            }
            seen
        })
    };

    let mut cmd = Command::new(RUN_SH);
    cmd.args(["--port", &server.addr.port().to_string(), "--vers", "4.2", "--export", &server.export_path(1)]);
    cmd.args(["--opts", "lookupcache=none", "--timeout", &BOOT_TIMEOUT_S.to_string(), "--file"]);
    cmd.arg(&tool).arg(Path::new(GUEST).join("nfs4_lock.sh"));
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {RUN_SH}: {e}"));
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let _ = holder.kill();
    let _ = holder.wait();
    let seen = host.join().unwrap();
    let g = results(&output);
    let get = |k: &str| g.get(k).map_or("", String::as_str);
    let context = format!("guest:\n{output}\nhost: {seen:#?}\nserver log:\n{}", server.log_text());
    assert!(out.status.success() && get("done") == "1", "the guest failed\n{context}");
    assert_eq!(get("mount_vers"), "4.2", "{context}");

    // 1. The host's OFD lock denied the guest's fcntl and flock locks.
    assert_eq!(get("guest_posix_vs_host"), format!("errno {}", libc::EAGAIN), "{context}");
    assert_eq!(get("guest_flock_vs_host"), format!("errno {}", libc::EAGAIN), "{context}");
    // 2. The guest's flock and fcntl locks denied the host's OFD and POSIX
    // locks, and were released with the guest's unlock.
    let eagain = format!("errno {}", libc::EAGAIN);
    let want: Vec<String> = ["flock", "posix"]
        .iter()
        .flat_map(|how| {
            [
                format!("{how}: host ofd {eagain}"),
                format!("{how}: host posix {eagain}"),
                format!("{how}: host ofd after ok"),
            ]
        })
        .collect();
    assert_eq!(seen, want, "{context}");
    assert_eq!(get("hold"), "ok", "{context}");

    // 3. NFSv4.2.
    let f = fs::read(dir.join("f")).unwrap();
    assert_eq!(f.len(), 1 << 20);
    assert!(f[65536..196608].iter().all(|b| *b == 0), "the punched range reads zeros on the server");
    assert_eq!(get("punch"), "ok", "{context}");
    assert_eq!(get("seek_hole_0"), "65536", "SEEK found the hole the punch made\n{context}");
    assert_eq!(get("seek_data_65536"), "196608", "{context}");
    assert_eq!(get("g_size"), "1048576", "{context}");
    let g_meta = fs::metadata(dir.join("g")).unwrap();
    assert!(g_meta.blocks() * 512 >= 1 << 20, "ALLOCATE reserved the blocks: {} blocks", g_meta.blocks());
    assert_eq!(get("copied"), "1048576", "{context}");
    assert_eq!(get("f2_md5"), get("f_md5"), "{context}");
    assert_eq!(digest(&dir.join("f2")), get("f_md5"), "the copy on the server");

    let stat = Command::new(keel_bin()).arg("stat").arg("--state-dir").arg(server.base.join("state")).output();
    let stat = String::from_utf8_lossy(&stat.expect("keel stat").stdout).into_owned();
    for op in ["lock", "locku", "allocate", "deallocate", "seek", "copy"] {
        let counted = stat.lines().any(|l| {
            let mut words = l.split_whitespace();
            words.next() == Some(op) && words.next().and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n > 0)
        });
        assert!(counted, "keel stat counts no {op}:\n{stat}");
    }
}

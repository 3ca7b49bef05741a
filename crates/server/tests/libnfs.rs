//! libnfs (Debian `libnfs-utils`: nfs-cp, nfs-ls, nfs-cat), an independent
//! user-space NFSv3 client, copies files in and out; digests of the
//! original, of the file on the server's disk and of the copy back agree.
//!
//! libnfs writes with UNSTABLE WRITEs and COMMITs when the file is closed
//! (seen with strace on Keel: pwritev2 without RWF_SYNC, then one fsync).

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use keel_testkit::nfs::pattern;
use keel_testkit::procs::{TempDir, run_ok, run_timeout};
use keel_testkit::server::{ExportOpts, TestServer, digest};

const CMD_TIMEOUT: Duration = Duration::from_secs(120);

fn url(addr: SocketAddr, export: &str, name: &str) -> String {
    let path = if name.is_empty() { export.to_string() } else { format!("{export}/{name}") };
    format!("nfs://127.0.0.1{path}?nfsport={0}&mountport={0}", addr.port())
}

/// Sizes as nfs-ls prints them: `-rw-r--r--  1  0  0  SIZE NAME`.
fn listed_sizes(listing: &str) -> Vec<(String, u64)> {
    listing
        .lines()
        .filter_map(|line| {
            let mut rest = line.trim_start();
            let mut fields = Vec::new();
            for _ in 0..5 {
                let end = rest.find(char::is_whitespace)?;
                fields.push(&rest[..end]);
                rest = rest[end..].trim_start();
            }
            Some((rest.to_string(), fields[4].parse().ok()?))
        })
        .collect()
}

/// In and out with nfs-cp: empty, 1 byte, 1 MiB + 1, 50 MiB of random
/// data, and a name with a space and non-ASCII UTF-8. md5 of the original,
/// of the server's file and of the copy back must agree; nfs-ls lists each
/// with its size.
#[test]
fn nfs_cp_copies_in_and_out_with_matching_digests() {
    let server = TestServer::start_default("libnfs-cp");
    let local = TempDir::new("libnfs-local");
    let export = server.export_path(1);
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("one-byte", vec![0x5a]),
        ("one-mib-plus-one", pattern(1, (1 << 20) + 1)),
        ("fifty-mib", pattern(2, 50 << 20)),
        ("with space é ü 名前.txt", b"a name with a space and UTF-8\n".to_vec()),
    ];
    for (name, data) in &files {
        let original = local.path().join(format!("orig-{name}"));
        std::fs::write(&original, data).unwrap();
        let out = run_ok(Command::new("nfs-cp").arg(&original).arg(url(server.addr, &export, name)), CMD_TIMEOUT);
        assert!(out.stdout.contains(&format!("copied {} bytes", data.len())), "nfs-cp {name}: {}", out.text());
        let on_server = server.export_dir(1).join(name);
        let back = local.path().join(format!("back-{name}"));
        run_ok(Command::new("nfs-cp").arg(url(server.addr, &export, name)).arg(&back), CMD_TIMEOUT);
        let digests = [digest(&original), digest(&on_server), digest(&back)];
        assert!(
            digests[0] == digests[1] && digests[1] == digests[2],
            "{name}: md5 original {}, on the server {}, copied back {}",
            digests[0],
            digests[1],
            digests[2]
        );
        assert_eq!(std::fs::metadata(&back).unwrap().len(), data.len() as u64, "{name}: size of the copy back");
    }

    let listing = run_ok(Command::new("nfs-ls").arg(url(server.addr, &export, "")), CMD_TIMEOUT).stdout;
    let listed = listed_sizes(&listing);
    for (name, data) in &files {
        assert!(
            listed.iter().any(|(n, size)| n == name && *size == data.len() as u64),
            "nfs-ls does not list {name:?} with {} bytes:\n{listing}",
            data.len()
        );
    }
    assert_eq!(listed.iter().filter(|(n, _)| n != "." && n != "..").count(), files.len(), "{listing}");

    // nfs-cat agrees on a file's content too.
    let cat = run_ok(Command::new("nfs-cat").arg(url(server.addr, &export, files[4].0)), CMD_TIMEOUT);
    assert_eq!(cat.stdout.as_bytes(), &files[4].1[..]);
}

/// nfs-cp into a read-only export fails and leaves nothing behind; copying
/// out of it works.
#[test]
fn nfs_cp_into_a_read_only_export_fails() {
    let ro = ExportOpts::new(2, "ro", "access = \"ro\"\nsquash = \"no_root_squash\"");
    let server = TestServer::start("libnfs-ro", vec![ExportOpts::rw(1, "rw"), ro], "");
    let local = TempDir::new("libnfs-ro-local");
    let export = server.export_path(2);
    std::fs::write(server.export_dir(2).join("present.txt"), b"served read-only\n").unwrap();
    let original = local.path().join("new.bin");
    std::fs::write(&original, pattern(3, 100_000)).unwrap();

    let out = run_timeout(Command::new("nfs-cp").arg(&original).arg(url(server.addr, &export, "new.bin")), CMD_TIMEOUT);
    assert!(!out.status.success(), "nfs-cp into a read-only export succeeded:\n{}", out.text());
    assert!(!server.export_dir(2).join("new.bin").exists(), "a file appeared in the read-only export");

    let back = local.path().join("present.txt");
    run_ok(Command::new("nfs-cp").arg(url(server.addr, &export, "present.txt")).arg(&back), CMD_TIMEOUT);
    assert_eq!(std::fs::read(&back).unwrap(), b"served read-only\n");
    // The read-write export of the same server does take the file.
    let rw_url = url(server.addr, &server.export_path(1), "new.bin");
    run_ok(Command::new("nfs-cp").arg(&original).arg(rw_url), CMD_TIMEOUT);
    assert_eq!(digest(&server.export_dir(1).join("new.bin")), digest(&original));
}

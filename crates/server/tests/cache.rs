//! The SSD cache tier as a user runs it: `[cache]` devices and per-export
//! modes in the configuration, `keel cache ...` at runtime, an independent
//! client (libnfs's nfs-cp, `keel verify`) writing through it.
//!
//! - Write-back data reads back at once, reaches the file system when the
//!   mode is turned off (a flush) or its log device is removed, and the
//!   administration commands answer bad requests with readable errors.
//! - A power cut of the cache devices and the back end together (XFS shut
//!   down without flushing its log, after kill -9) loses no byte `keel
//!   verify` saw acknowledged as stable, and the restart replays the log.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use keel_testkit::disk::{Tmpfs, XfsDisk};
use keel_testkit::nfs::pattern;
use keel_testkit::procs::{TempDir, run_ok};
use keel_testkit::server::{ExportOpts, TestServer, digest};

const MIB: u64 = 1 << 20;
const CMD_TIMEOUT: Duration = Duration::from_secs(120);

fn url(server: &TestServer, name: &str) -> String {
    format!("nfs://127.0.0.1{}/{name}?nfsport={1}&mountport={1}", server.export_path(1), server.addr.port())
}

fn keel(server: &TestServer, args: &[&str]) -> Output {
    let state = server.base.join("state");
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .arg("--state-dir")
        .arg(&state)
        .stdin(Stdio::null())
        .output()
        .expect("run keel");
    eprintln!(
        "keel {}: {:?}\n{}{}",
        args.join(" "),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn keel_ok(server: &TestServer, args: &[&str]) -> String {
    let out = keel(server, args);
    assert!(out.status.success(), "keel {} failed", args.join(" "));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `keel cache ...` that must fail, with `says` in its message.
fn keel_refuses(server: &TestServer, args: &[&str], says: &str) {
    let out = keel(server, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "keel {} should fail", args.join(" "));
    assert!(stderr.contains(says), "keel {}: no {says:?} in {stderr:?}", args.join(" "));
}

fn cache_stat(server: &TestServer) -> serde_json::Value {
    serde_json::from_str(&keel_ok(server, &["cache", "stat", "--json"])).expect("cache stat --json")
}

fn device_file(dir: &Path, name: &str, bytes: u64) -> PathBuf {
    let path = dir.join(name);
    run_ok(Command::new("fallocate").args(["-l", &bytes.to_string()]).arg(&path), CMD_TIMEOUT);
    path
}

fn cache_table(devices: &[&Path], log_mib: u64) -> String {
    let list: Vec<String> = devices.iter().map(|d| format!("{:?}", d.display().to_string())).collect();
    // Streams of any length go through the log: the tests are about it.
    format!("\n[cache]\ndevices = [{}]\nlog_mib = {log_mib}\nsequential_cutoff_mib = 4096\n", list.join(", "))
}

fn write_back_export(path: &str) -> ExportOpts {
    ExportOpts::new(1, path, "access = \"rw\"\nsquash = \"no_root_squash\"\ncache = \"write-back\"")
}

fn nfs_cp_in(server: &TestServer, local: &TempDir, name: &str, data: &[u8]) {
    let original = local.path().join(name);
    std::fs::write(&original, data).unwrap();
    let out = run_ok(Command::new("nfs-cp").arg(&original).arg(url(server, name)), CMD_TIMEOUT);
    assert!(out.stdout.contains(&format!("copied {} bytes", data.len())), "nfs-cp {name}: {}", out.text());
}

fn nfs_cp_out(server: &TestServer, local: &TempDir, name: &str) -> Vec<u8> {
    let back = local.path().join(format!("back-{name}"));
    let _ = std::fs::remove_file(&back);
    run_ok(Command::new("nfs-cp").arg(url(server, name)).arg(&back), CMD_TIMEOUT);
    std::fs::read(&back).unwrap()
}

#[test]
fn write_back_with_libnfs_and_the_cache_commands() {
    let devices = TempDir::on_disk("cache-devices");
    let c1 = device_file(devices.path(), "c1", 96 * MIB);
    let c2 = device_file(devices.path(), "c2", 96 * MIB);
    let c3 = device_file(devices.path(), "c3", 96 * MIB);
    let tiny = device_file(devices.path(), "tiny", MIB);
    let mut server = TestServer::start("cache-admin", vec![write_back_export("export")], &cache_table(&[&c1, &c2], 32));
    let local = TempDir::new("cache-local");
    let export_dir = server.export_dir(1);
    let on_disk = |name: &str| std::fs::read(export_dir.join(name)).unwrap_or_default();

    // Taken by the log, read back through it.
    let a = pattern(11, 3 * MIB as usize + 17);
    nfs_cp_in(&server, &local, "a.bin", &a);
    let stat = cache_stat(&server);
    let export = &stat["exports"][0];
    assert_eq!(export["mode"], "write-back");
    assert!(export["bytes_logged"].as_u64().unwrap() >= a.len() as u64, "{stat}");
    assert_eq!(stat["devices"].as_array().unwrap().len(), 2, "{stat}");
    assert!(nfs_cp_out(&server, &local, "a.bin") == a, "a.bin read back differs");

    // Off: the log is flushed to the file system.
    let said = keel(&server, &["cache", "mode", "1", "off"]);
    assert!(said.status.success());
    assert!(on_disk("a.bin") == a, "a.bin is not on the file system after the flush");
    let events = keel_ok(&server, &["cache", "events"]);
    assert!(events.contains("mode changed: ") && events.contains("write-back -> off"), "{events}");
    assert!(events.contains("flush finished"), "{events}");
    assert_eq!(cache_stat(&server)["dirty_bytes"], 0);

    // Removing a log device destages first; one device left is a problem
    // for a write-back export, which `keel status` reports.
    keel_ok(&server, &["cache", "mode", &server.export_path(1), "write-back"]);
    let b = pattern(12, 2 * MIB as usize);
    nfs_cp_in(&server, &local, "b.bin", &b);
    keel_ok(&server, &["cache", "remove", &c1.display().to_string()]);
    assert!(on_disk("b.bin") == b, "b.bin is not on the file system after its log device was removed");
    let status = keel(&server, &["status"]);
    assert_eq!(status.status.code(), Some(1), "one device left for a write-back export: unhealthy");
    assert!(String::from_utf8_lossy(&status.stdout).contains("write-back"));
    let listed = keel_ok(&server, &["cache", "add", &c3.display().to_string()]);
    assert!(listed.contains("c3: log mirror"), "{listed}");
    assert_eq!(keel(&server, &["status"]).status.code(), Some(0), "two devices again: healthy");
    let c = pattern(13, MIB as usize);
    nfs_cp_in(&server, &local, "c.bin", &c);
    assert!(nfs_cp_out(&server, &local, "c.bin") == c);

    // Bad requests: readable refusals, nothing changed.
    keel_refuses(&server, &["cache", "add", &tiny.display().to_string()], "too small");
    keel_refuses(&server, &["cache", "add", &c3.display().to_string()], "the same device as");
    keel_refuses(&server, &["cache", "add", "/nonexistent/ssd"], "/nonexistent/ssd");
    keel_refuses(&server, &["cache", "remove", "/nonexistent/ssd"], "not a cache device");
    keel_refuses(&server, &["cache", "mode", "9", "off"], "no export \"9\"");
    keel_refuses(&server, &["cache", "mode", "1", "fast"], "unknown cache mode");
    let stat = cache_stat(&server);
    let names: Vec<&str> = stat["devices"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, [c2.to_str().unwrap(), c3.to_str().unwrap()]);
    assert!(keel_ok(&server, &["stat"]).contains("cache export 1"));

    // A start whose [cache] names none of the devices that hold the log
    // now is refused, saying why; with them named, it serves the data.
    server.terminate();
    let config = std::fs::read_to_string(&server.config).unwrap();
    let old = format!("devices = [{:?}, {:?}]", c1.display().to_string(), c2.display().to_string());
    assert!(config.contains(&old), "{config}");
    let c4 = device_file(devices.path(), "c4", 96 * MIB);
    let elsewhere = format!("devices = [{:?}, {:?}]", c1.display().to_string(), c4.display().to_string());
    std::fs::write(&server.config, config.replace(&old, &elsewhere)).unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_keel")).arg("serve").arg("--config").arg(&server.config).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("the cache log was last on"), "{stderr}");
    let new = format!("devices = [{:?}, {:?}]", c2.display().to_string(), c3.display().to_string());
    std::fs::write(&server.config, config.replace(&old, &new)).unwrap();
    server.start_again();
    assert!(nfs_cp_out(&server, &local, "c.bin") == c, "c.bin after a restart");
    keel_ok(&server, &["cache", "mode", "1", "off"]);
    assert!(on_disk("c.bin") == c);
    for (name, data) in [("a.bin", &a), ("b.bin", &b)] {
        assert_eq!(digest(&export_dir.join(name)), digest(&local.path().join(name)), "{name}");
        assert!(on_disk(name) == *data);
    }
}

#[test]
fn write_back_needs_two_devices_in_the_configuration() {
    let dir = TempDir::new("cache-config");
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let file = dir.path().join("keel.toml");
    let text = format!(
        "[cache]\ndevices = [\"/dev/fast0\"]\n\n[[export]]\npath = {:?}\nid = 1\ncache = \"write-back\"\n\
         [[export.clients]]\nhost = \"*\"\n\n[[export]]\npath = \"/\"\nid = 2\ncache = \"sometimes\"\n\
         [[export.clients]]\nhost = \"*\"\n",
        export.display().to_string()
    );
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_keel")).arg("check-config").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("cache = \"write-back\" needs 2 cache device(s)"), "{stderr}");
    assert!(stderr.contains("unknown cache mode \"sometimes\""), "{stderr}");
}

/// kill -9 and a power cut of the cache devices and the back end together,
/// in the middle of `keel verify` writing FILE_SYNC streams through a
/// write-back cache: after the restart (which replays the log) the writers
/// carry on, and the check finds every acknowledged byte.
#[test]
fn power_cut_under_write_back_load_loses_nothing_acknowledged() {
    let (replayed, journal, mut server, disks) = power_cut_under_write_back("cache-powercut", false);
    assert!(replayed > 0, "the restart found nothing in the log to replay");
    // Read through the cache (the log may still hold data), then from the
    // file system alone once the log is flushed.
    assert_passes(&verify_check(&journal));
    keel_ok(&server, &["cache", "mode", "1", "off"]);
    assert_eq!(cache_stat(&server)["dirty_bytes"], 0);
    assert_passes(&verify_check(&journal));
    server.terminate();
    // The server goes before its disks are unmounted.
    drop(server);
    drop(disks);
}

/// Control: the same run, with the cache devices' contents lost in the
/// power cut (as if both SSDs died): the data acknowledged from the log and
/// not yet destaged is gone, and the check must say so.
#[test]
fn control_losing_both_cache_devices_loses_what_was_not_destaged() {
    let (replayed, journal, server, disks) = power_cut_under_write_back("cache-lost", true);
    assert_eq!(replayed, 0);
    let check = verify_check(&journal);
    let said = String::from_utf8_lossy(&check.stdout);
    assert_ne!(check.status.code(), Some(0), "the check passed although the log was lost:\n{said}");
    assert!(!said.contains(" 0 acknowledged bytes lost"), "{said}");
    drop(server);
    drop(disks);
}

/// Writes with `keel verify` until 40 MiB went through the log, then kill
/// -9 and the power cut (and, with `lose_cache`, the cache devices'
/// contents zeroed); starts the server again and lets the writers finish.
/// Returns the records the restart replayed, the run's journal, the server
/// and what holds the disks.
fn power_cut_under_write_back(tag: &str, lose_cache: bool) -> (u64, PathBuf, TestServer, (XfsDisk, XfsDisk, TempDir)) {
    let mut back = XfsDisk::new(&format!("{tag}-back"));
    let mut fast = XfsDisk::new(&format!("{tag}-ssd"));
    let c1 = device_file(&fast.mnt, "c1", 160 * MIB);
    let c2 = device_file(&fast.mnt, "c2", 160 * MIB);
    fast.syncfs();
    let export = back.mnt.join("export");
    std::fs::create_dir(&export).unwrap();
    let mut server =
        TestServer::start(tag, vec![write_back_export(&export.display().to_string())], &cache_table(&[&c1, &c2], 96));
    let client = TempDir::new(&format!("{tag}-verify"));
    let journal = client.path().join("run.journal");
    let mut writer = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["verify", "write", "--server", &server.addr.to_string(), "--export", &server.export_path(1)])
        .args(["--clients", "4", "--size", "24M", "--retry-for", "120s", "--quiet", "--force", "--journal"])
        .arg(&journal)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // Cut when a good part of the data went through the log.
    let deadline = Instant::now() + Duration::from_secs(120);
    while cache_stat(&server)["exports"][0]["bytes_logged"].as_u64().unwrap_or(0) < 40 * MIB {
        if writer.try_wait().unwrap().is_some() || Instant::now() > deadline {
            let _ = writer.kill();
            let out = writer.wait_with_output().unwrap();
            panic!(
                "the writers never got 40 MiB into the log; keel verify write said:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    server.kill9();
    fast.power_cut();
    back.power_cut();
    fast.mount();
    back.mount();
    if lose_cache {
        for c in [&c1, &c2] {
            let zeros = vec![0u8; 160 * MIB as usize];
            std::fs::write(c, zeros).unwrap();
        }
    }
    server.start_again();
    let events = keel_ok(&server, &["cache", "events"]);
    let replayed: u64 = events
        .lines()
        .find_map(|l| l.split("recovered the log: ").nth(1)?.split(' ').next()?.parse().ok())
        .unwrap_or(0);
    let written = wait_with_output(writer, Duration::from_secs(240));
    assert_eq!(written.status.code(), Some(0), "keel verify write should ride out the power cut");
    (replayed, journal, server, (back, fast, client))
}

fn assert_passes(check: &Output) {
    let said = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "check failed:\n{said}");
    assert!(said.contains("0 acknowledged bytes lost, 0 errors: PASS"), "{said}");
}

fn verify_check(journal: &Path) -> Output {
    let check = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["verify", "check", "--retry-for", "60s", "--journal"])
        .arg(journal)
        .output()
        .unwrap();
    eprintln!("{}{}", String::from_utf8_lossy(&check.stdout), String::from_utf8_lossy(&check.stderr));
    check
}

fn wait_with_output(child: std::process::Child, limit: Duration) -> Output {
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => {
            let out = out.unwrap();
            eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            out
        }
        Err(_) => {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("keel verify write did not finish within {limit:?}");
        }
    }
}

/// A file on tmpfs would hold a copy of the write-back log that the next
/// power cut empties (any device may become a log mirror: `keel cache
/// remove` of a log device promotes the next): refused at `keel cache add`
/// and at start, saying why.
#[test]
fn a_cache_device_on_tmpfs_is_refused_at_add_and_at_start() {
    let devices = TempDir::on_disk("cache-volatile");
    let c1 = device_file(devices.path(), "c1", 96 * MIB);
    let c2 = device_file(devices.path(), "c2", 96 * MIB);
    let tmpfs = Tmpfs::mount("cache-tmpfs");
    let shm = tmpfs.path().join("x");
    std::fs::File::create(&shm).unwrap().set_len(96 * MIB).unwrap();
    let shm_name = shm.display().to_string();
    let mut server =
        TestServer::start("cache-volatile", vec![write_back_export("export")], &cache_table(&[&c1, &c2], 32));

    keel_refuses(&server, &["cache", "add", &shm_name], &format!("{shm_name}: on tmpfs, which a power cut"));
    let stat = cache_stat(&server);
    let names: Vec<&str> = stat["devices"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, [c1.to_str().unwrap(), c2.to_str().unwrap()], "nothing changed");
    // Removing a log device leaves one: no tmpfs file took its place.
    keel_ok(&server, &["cache", "remove", c1.to_str().unwrap()]);
    assert!(!keel_ok(&server, &["cache", "list"]).contains(&shm_name));

    // Named in [cache] devices: the start is refused.
    server.terminate();
    let config = std::fs::read_to_string(&server.config).unwrap();
    let old = format!("devices = [{:?}, {:?}]", c1.display().to_string(), c2.display().to_string());
    assert!(config.contains(&old), "{config}");
    let with_shm = format!("devices = [{:?}, {:?}]", c2.display().to_string(), shm_name);
    std::fs::write(&server.config, config.replace(&old, &with_shm)).unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_keel")).arg("serve").arg("--config").arg(&server.config).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains(&format!("{shm_name}: on tmpfs")), "{stderr}");
    drop(server);
    drop(tmpfs);
}

/// `keel cache flush`: the log's dirty data reaches the file system (read
/// on the host, not through Keel) and the log is empty when it returns.
#[test]
fn cache_flush_writes_the_log_to_the_disk_and_empties_it() {
    let devices = TempDir::on_disk("cache-flush");
    let c1 = device_file(devices.path(), "c1", 96 * MIB);
    let c2 = device_file(devices.path(), "c2", 96 * MIB);
    let server = TestServer::start("cache-flush", vec![write_back_export("export")], &cache_table(&[&c1, &c2], 32));
    let local = TempDir::new("cache-flush-local");
    let data = pattern(21, 2 * MIB as usize + 5);
    nfs_cp_in(&server, &local, "f.bin", &data);
    let before = cache_stat(&server);
    assert!(before["dirty_bytes"].as_u64().unwrap() > 0, "the data is in the log: {before}");

    let listed = keel_ok(&server, &["cache", "flush"]);
    assert!(listed.contains("cache log: 0 B of"), "{listed}");
    let after = cache_stat(&server);
    assert_eq!((after["dirty_bytes"].as_u64(), after["log_used_bytes"].as_u64()), (Some(0), Some(0)), "{after}");
    let on_disk = std::fs::read(server.export_dir(1).join("f.bin")).unwrap();
    assert!(on_disk == data, "the file on the disk is not what was written ({} bytes)", on_disk.len());
    let events = keel_ok(&server, &["cache", "events"]);
    assert!(events.contains("flush finished (keel cache flush)"), "{events}");
}

/// A cache device lost for good after a crash: Keel starts on the one
/// left (no configuration edit), every write acknowledged before is there,
/// `keel status`, `keel cache list` and `keel cache events` say it is
/// degraded and what to run, and `keel cache add` makes it write-back
/// again.
#[test]
fn a_lost_cache_device_leaves_a_degraded_start_until_one_is_added() {
    let devices = TempDir::on_disk("cache-lost-device");
    let c1 = device_file(devices.path(), "c1", 96 * MIB);
    let c2 = device_file(devices.path(), "c2", 96 * MIB);
    let c3 = device_file(devices.path(), "c3", 96 * MIB);
    let mut server = TestServer::start("cache-lost", vec![write_back_export("export")], &cache_table(&[&c1, &c2], 32));
    let local = TempDir::new("cache-lost-local");
    let data = pattern(31, 2 * MIB as usize + 3);
    nfs_cp_in(&server, &local, "f.bin", &data);
    assert!(cache_stat(&server)["dirty_bytes"].as_u64().unwrap() > 0, "the data is in the log");

    server.kill9();
    std::fs::remove_file(&c2).unwrap();
    server.start_again();
    assert!(nfs_cp_out(&server, &local, "f.bin") == data, "f.bin after the restart on one device");
    let status = keel(&server, &["status"]);
    let said = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(1), "degraded is unhealthy: {said}");
    assert!(said.contains("served write-through") && said.contains("keel cache add"), "{said}");
    assert!(said.contains(&format!("cache device {} was missing at start", c2.display())), "{said}");
    let listed = keel_ok(&server, &["cache", "list"]);
    assert!(listed.contains("(write-back, served write-through for now)"), "{listed}");
    let events = keel_ok(&server, &["cache", "events"]);
    assert!(events.contains(&format!("device missing at start: {}", c2.display())), "{events}");
    assert!(events.contains("degraded: ") && events.contains("keel cache add DEVICE"), "{events}");
    // Writes go to the disk meanwhile.
    let more = pattern(32, MIB as usize);
    nfs_cp_in(&server, &local, "g.bin", &more);
    assert!(std::fs::read(server.export_dir(1).join("g.bin")).unwrap() == more);

    keel_ok(&server, &["cache", "add", c3.to_str().unwrap()]);
    let listed = keel_ok(&server, &["cache", "list"]);
    assert!(listed.contains("(write-back)") && !listed.contains("served write-through"), "{listed}");
    assert_eq!(keel(&server, &["status"]).status.code(), Some(0), "healthy again");
    assert!(nfs_cp_out(&server, &local, "f.bin") == data);
    let logged = cache_stat(&server)["exports"][0]["bytes_logged"].as_u64().unwrap();
    let again = pattern(33, MIB as usize);
    nfs_cp_in(&server, &local, "h.bin", &again);
    assert!(cache_stat(&server)["exports"][0]["bytes_logged"].as_u64().unwrap() > logged, "write-back again");
}

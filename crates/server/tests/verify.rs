//! `keel verify` against a real server, through the binary: streams
//! written by several clients at once check clean; a kill -9 and restart in
//! the middle of the write (FILE_SYNC, and UNSTABLE + COMMIT with the
//! verifier change that makes the client resend) loses no acknowledged
//! byte, the writer riding it out with retries; and damage done to the
//! files on the server's disk after the write fails the check, naming the
//! stream and the range.
//!
//! A kill -9 leaves the page cache intact, so these tests prove the client
//! side (retries, resends, the journal) and that the server acknowledges
//! nothing it then loses across a process restart; durability across a
//! power cut is the business of the godown tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use keel_testkit::procs::as_nobody;
use keel_testkit::server::{ExportOpts, TestServer};

const MIB: u64 = 1 << 20;
const STREAM_BYTES: u64 = 64 * MIB;
/// Writers retry this long; the tests wait a little longer.
const RETRY_FOR: &str = "120s";
const WAIT: Duration = Duration::from_secs(240);

/// The client side of one run: the journal and reports live here, not in
/// the export.
struct Run {
    addr: String,
    export: String,
    /// The streams' directory on the server's disk.
    streams: PathBuf,
    dir: PathBuf,
}

impl Run {
    fn new(server: &TestServer) -> Self {
        require_verify_subcommand();
        let dir = server.base.join("client");
        std::fs::create_dir_all(&dir).unwrap();
        Run {
            addr: server.addr.to_string(),
            export: server.export_path(1),
            streams: server.export_dir(1).join("keel-verify"),
            dir,
        }
    }

    fn journal(&self) -> PathBuf {
        self.dir.join("run.journal")
    }

    /// `keel verify write` with 4 clients of 64 MiB each and `extra` options.
    fn write_command(&self, extra: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_keel"));
        cmd.args(["verify", "write", "--server", &self.addr, "--export", &self.export])
            .args(["--clients", "4", "--size", "64M", "--retry-for", RETRY_FOR, "--quiet", "--force", "--journal"])
            .arg(self.journal())
            .arg("--json")
            .arg(self.dir.join("write.json"))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// `keel verify check` of the run (the target comes from the journal).
    fn check(&self) -> Output {
        let out = Command::new(env!("CARGO_BIN_EXE_keel"))
            .args(["verify", "check", "--retry-for", RETRY_FOR, "--journal"])
            .arg(self.journal())
            .arg("--json")
            .arg(self.dir.join("check.json"))
            .output()
            .expect("run keel verify check");
        eprintln!("{}{}", text(&out.stdout), text(&out.stderr));
        out
    }

    fn write_report(&self) -> String {
        std::fs::read_to_string(self.dir.join("write.json")).expect("write report")
    }

    fn stream(&self, i: u32) -> PathBuf {
        self.streams.join(format!("stream.{i}"))
    }

    /// Bytes of all streams on the server's disk so far.
    fn bytes_on_disk(&self) -> u64 {
        (0..4).filter_map(|i| std::fs::metadata(self.stream(i)).ok()).map(|m| m.len()).sum()
    }
}

/// A clear failure while `keel verify` is not (yet) part of the binary.
fn require_verify_subcommand() {
    let out = Command::new(env!("CARGO_BIN_EXE_keel")).args(["verify", "--help"]).output().unwrap();
    assert!(out.status.success(), "`keel verify` is not wired into the keel binary:\n{}", text(&out.stderr));
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits (bounded) for a spawned command, returning its output.
fn wait(child: std::process::Child, what: &str) -> Output {
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(WAIT) {
        Ok(out) => {
            let out = out.unwrap();
            eprintln!("{what}:\n{}{}", text(&out.stdout), text(&out.stderr));
            out
        }
        Err(_) => {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{what} did not finish within {WAIT:?}");
        }
    }
}

fn run_to_end(cmd: &mut Command, what: &str) -> Output {
    wait(cmd.spawn().expect("start keel verify"), what)
}

/// The values of every `"key": <number>` in a JSON text (the server's tests
/// have no JSON parser; the reports are flat enough for this).
fn numbers(json: &str, key: &str) -> Vec<u64> {
    let pattern = format!("\"{key}\": ");
    json.match_indices(&pattern)
        .filter_map(|(at, _)| {
            let rest = &json[at + pattern.len()..];
            rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len())].parse().ok()
        })
        .collect()
}

/// How many verifiers each stream saw (from the `"verifiers": [...]` lists).
fn verifier_counts(json: &str) -> Vec<usize> {
    json.match_indices("\"verifiers\": [")
        .map(|(at, _)| {
            let rest = &json[at..];
            rest[..rest.find(']').unwrap()].matches('"').count() / 2 - 1
        })
        .collect()
}

fn assert_passes(run: &Run) {
    let out = run.check();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "check failed:\n{stdout}");
    assert!(stdout.contains("268435456 bytes acknowledged, 0 acknowledged bytes lost, 0 errors: PASS"), "{stdout}");
    for i in 0..4 {
        assert!(
            stdout.contains(&format!("checkstream[stream.{i}]: valid data for {STREAM_BYTES} bytes at offset 0\n")),
            "stream {i}:\n{stdout}"
        );
    }
}

/// Waits until the streams hold `bytes` on the server's disk, then kills
/// the server with -9 and starts it again on the same port a second later
/// (the writers meanwhile see refused connections and keep retrying).
fn restart_after(server: &mut TestServer, run: &Run, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while run.bytes_on_disk() < bytes {
        assert!(Instant::now() < deadline, "the writers never got to {bytes} bytes");
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill9();
    std::thread::sleep(Duration::from_secs(1));
    server.start_again();
}

#[test]
fn four_clients_file_sync_check_clean() {
    let server = TestServer::start_default("verify-clean");
    let run = Run::new(&server);
    let out = run_to_end(&mut run.write_command(&[]), "keel verify write");
    assert_eq!(out.status.code(), Some(0));
    for i in 0..4 {
        assert_eq!(std::fs::metadata(run.stream(i)).unwrap().len(), STREAM_BYTES);
    }
    let report = run.write_report();
    assert_eq!(
        numbers(&report, "acknowledged_bytes"),
        [4 * STREAM_BYTES, STREAM_BYTES, STREAM_BYTES, STREAM_BYTES, STREAM_BYTES]
    );
    assert_passes(&run);
}

#[test]
fn kill9_and_restart_during_file_sync_writes_loses_nothing_acknowledged() {
    let mut server = TestServer::start_default("verify-restart");
    let run = Run::new(&server);
    let child = run.write_command(&[]).spawn().unwrap();
    restart_after(&mut server, &run, 64 * MIB);
    let out = wait(child, "keel verify write");
    assert_eq!(out.status.code(), Some(0), "the write should ride out the restart");
    let report = run.write_report();
    assert!(verifier_counts(&report).contains(&2), "no stream saw the restart:\n{report}");
    assert!(numbers(&report, "reconnects").iter().any(|&n| n >= 1), "{report}");
    assert_passes(&run);
}

#[test]
fn unstable_writes_are_resent_after_a_restart_and_nothing_acknowledged_is_lost() {
    let mut server = TestServer::start_default("verify-unstable");
    let run = Run::new(&server);
    let child = run.write_command(&["--stable", "unstable", "--commit-every", "16M"]).spawn().unwrap();
    restart_after(&mut server, &run, 64 * MIB);
    let out = wait(child, "keel verify write");
    assert_eq!(out.status.code(), Some(0));
    let report = run.write_report();
    assert!(verifier_counts(&report).contains(&2), "no stream saw the new verifier:\n{report}");
    // Up to 16 MiB per stream was written UNSTABLE under the old verifier
    // and not yet committed: COMMIT's new verifier makes the writer send it again.
    assert!(numbers(&report, "resent_bytes").iter().sum::<u64>() > 0, "nothing resent:\n{report}");
    assert!(std::fs::read_to_string(run.journal()).unwrap().contains("\"type\":\"resend\""));
    assert_passes(&run);
}

#[test]
fn damage_on_the_server_disk_fails_the_check_and_names_it() {
    let server = TestServer::start_default("verify-tamper");
    let run = Run::new(&server);
    let out = run_to_end(&mut run.write_command(&["--stable", "data"]), "keel verify write");
    assert_eq!(out.status.code(), Some(0));
    assert_passes(&run);

    // Garbage over 4 KiB of stream 2; stream 3 cut short.
    patch(&run.stream(2), 10 * MIB, &[0xab; 4096]);
    std::fs::OpenOptions::new().write(true).open(run.stream(3)).unwrap().set_len(5 * MIB).unwrap();
    let out = run.check();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "the check must fail:\n{stdout}");
    for line in [
        "checkstream[stream.2]: corrupt data for 4096 bytes at offset 10485760\n",
        "checkstream[stream.2]: [lost acknowledged] 4096 bytes at offset 10485760 (corrupt data)\n",
        "checkstream[stream.2]: encountered 1 errors, failing\n",
        "checkstream[stream.3]: missing data for 61865984 bytes at offset 5242880 (past the end of the file)\n",
        "checkstream[stream.3]: [lost acknowledged] 61865984 bytes in 1 extents\n",
        "checkstream[stream.3]: encountered 1 errors, failing\n",
        "checkstream[stream.0]: read 16384 blocks 67108864 bytes in ",
        "61870080 acknowledged bytes lost, 2 errors: FAIL (2 of 4 streams)\n",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    let report = std::fs::read_to_string(run.dir.join("check.json")).unwrap();
    assert_eq!(numbers(&report, "lost_acknowledged_bytes"), [61870080, 0, 0, 4096, 61865984]);
}

fn patch(path: &Path, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    std::fs::OpenOptions::new().write(true).open(path).unwrap().write_all_at(bytes, offset).unwrap();
}

/// Against a `secure` export (the default): run as root, `keel verify`
/// calls from reserved ports and works; run as an ordinary user it is
/// refused, exits 2 and says what to do.
#[test]
fn a_secure_export_takes_root_and_tells_others_what_to_do() {
    let rw_secure = "access = \"rw\"\nsquash = \"no_root_squash\"\nsecure = true";
    let server = TestServer::start("verify-secure", vec![ExportOpts::new(1, "export", rw_secure)], "");
    let run = Run::new(&server);
    let out = run_to_end(&mut run.write_command(&[]), "keel verify write");
    assert_eq!(out.status.code(), Some(0));
    assert_passes(&run);

    std::fs::set_permissions(&run.dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = as_nobody(Path::new(env!("CARGO_BIN_EXE_keel")))
        .args(["verify", "write", "--server", &run.addr, "--export", &run.export, "--dir", "nobody"])
        .args(["--clients", "1", "--size", "1M", "--retry-for", RETRY_FOR, "--quiet", "--journal"])
        .arg(run.dir.join("nobody.journal"))
        .output()
        .unwrap();
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "keel verify write as nobody:\n{said}");
    for hint in ["ordinary source port", "run this command as root", "insecure = true"] {
        assert!(said.contains(hint), "no {hint:?} in what keel verify said:\n{said}");
    }
    assert!(!server.export_dir(1).join("nobody").exists(), "nobody's run reached the export");
}

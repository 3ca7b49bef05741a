//! The kernel-client tests' harness itself (`tools/kernel-nfs-client/run.sh`):
//! a guest that has not booted by the boot deadline is killed and booted
//! again once, as is one that ended before it booted, and a guest that
//! fails before its mount fails fast and shows the end of its console,
//! leaving no qemu behind. No server is needed:
//! nothing reaches one before the guest has booted.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use keel_testkit::procs::{TempDir, run_timeout};

const RUN_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/kernel-nfs-client/run.sh");
const GUEST_SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernel");

/// Processes whose command line names something under `dir` (the guest's
/// qemu boots an initramfs from run.sh's --work-dir).
fn processes_using(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push(format!("{}: {cmdline}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

/// Runs run.sh with `args` (no server at the port: the guest never gets
/// that far) and returns its exit code, stdout, stderr and how long it took.
fn run_harness(work: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String, Duration) {
    let mut cmd = Command::new(RUN_SH);
    cmd.args(["--port", "1", "--work-dir"]).arg(work).args(args);
    cmd.arg(Path::new(GUEST_SCRIPTS).join("cleanup.sh"));
    cmd.envs(env.iter().copied());
    let start = Instant::now();
    let out = run_timeout(&mut cmd, Duration::from_secs(60));
    (out.status.code(), out.stdout, out.stderr, start.elapsed())
}

/// What every failed run must leave: no qemu (nor anything else) using its
/// files, and none of its files.
fn assert_nothing_left(work: &Path, context: &str) {
    // qemu ends within a moment of its SIGTERM; run.sh waits for it, so
    // there is nothing to wait for here.
    let left = processes_using(work);
    assert!(left.is_empty(), "processes left behind: {left:#?}\n{context}");
    let files: Vec<_> = fs::read_dir(work).unwrap().flatten().map(|e| e.path()).collect();
    assert!(files.is_empty(), "files left behind: {files:?}\n{context}");
}

#[test]
fn a_guest_that_misses_its_boot_deadline_is_booted_again_once_then_fails_with_its_console() {
    let work = TempDir::new("kharness-boot");
    // No guest boots in 1 s under emulation: both attempts miss it.
    let (code, stdout, stderr, took) = run_harness(work.path(), &["--boot-timeout", "1", "--timeout", "50"], &[]);
    let context = format!("exit {code:?} after {took:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(code, Some(124), "{context}");
    let first = "kernel-nfs-client: guest did not boot within 1s; booting again; the console's end:";
    let second = "kernel-nfs-client: guest did not boot within 1s, twice; the console's end:";
    assert_eq!(stderr.matches(first).count(), 1, "{context}");
    assert_eq!(stderr.matches(second).count(), 1, "{context}");
    assert!(stderr.find(first) < stderr.find(second), "{context}");
    // Each tail is that attempt's console log, which ends with qemu's word
    // that the harness ended it.
    assert_eq!(stderr.matches("qemu-system-x86_64: terminating on signal 15").count(), 2, "{context}");
    // The guest never said it was mounting: nothing reached the caller's stdout.
    assert!(!stdout.contains("KCLIENT-MOUNTING"), "{context}");
    // Two attempts of a second or so each, an initramfs built once.
    assert!(took < Duration::from_secs(30), "{context}");
    assert_nothing_left(work.path(), &context);
}

#[test]
fn a_guest_stopped_by_the_overall_timeout_before_it_booted_shows_its_console() {
    let work = TempDir::new("kharness-timeout");
    // The boot deadline (from the environment) is past the overall timeout,
    // which ends the guest first: no second boot, no time left for one.
    let (code, stdout, stderr, took) =
        run_harness(work.path(), &["--timeout", "2"], &[("KCLIENT_BOOT_TIMEOUT", "100")]);
    let context = format!("exit {code:?} after {took:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(code, Some(124), "{context}");
    assert!(
        stderr.contains("kernel-nfs-client: guest timed out after 2s before it booted; the console's end:"),
        "{context}"
    );
    assert!(stderr.contains("qemu-system-x86_64: terminating on signal 15"), "{context}");
    assert!(!stderr.contains("booting again"), "{context}");
    assert!(took < Duration::from_secs(20), "{context}");
    assert_nothing_left(work.path(), &context);
}

#[test]
fn a_guest_that_ends_before_it_booted_is_booted_again_once_then_fails_with_its_console() {
    let work = TempDir::new("kharness-ended");
    // 1 MiB of guest memory: qemu refuses to load the initramfs and ends.
    let (code, stdout, stderr, took) = run_harness(work.path(), &["--mem", "1", "--timeout", "50"], &[]);
    let context = format!("exit {code:?} after {took:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(code, Some(126), "{context}");
    let first = "kernel-nfs-client: guest ended before it booted (qemu exit 1); booting again; the console's end:";
    let second = "kernel-nfs-client: guest ended before it booted (qemu exit 1), twice; the console's end:";
    assert_eq!(stderr.matches(first).count(), 1, "{context}");
    assert_eq!(stderr.matches(second).count(), 1, "{context}");
    assert!(stderr.find(first) < stderr.find(second), "{context}");
    // Each tail is that attempt's console log: qemu's own word of why.
    assert_eq!(stderr.matches("initrd is too large").count(), 2, "{context}");
    assert!(!stdout.contains("KCLIENT-MOUNTING"), "{context}");
    assert_nothing_left(work.path(), &context);
}

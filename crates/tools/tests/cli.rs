//! The keel-tools binary's own command line: the man pages it writes for
//! the package (under both names), and usage that names the command the
//! user typed (`keel bench` when run by `keel`, `keel-tools bench`
//! otherwise).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

const TOOLS: &str = env!("CARGO_BIN_EXE_keel-tools");

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("tools-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn man_pages_are_written_as_keel_tools_and_as_keel() {
    let dir = scratch("man");
    let out = Command::new(TOOLS).arg("manpages").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for page in [
        "keel-tools.1",
        "keel-tools-bench-seq.1",
        "keel-tools-verify-check.1",
        "keel-bench.1",
        "keel-bench-seq.1",
        "keel-bench-ior.1",
        "keel-verify-write.1",
        "keel-report.1",
    ] {
        assert!(dir.join(page).is_file(), "no {page}");
    }
    // keel.1 and the server's commands are the keel package's.
    assert!(!dir.join("keel.1").exists() && !dir.join("keel-manpages.1").exists());
    let seq = std::fs::read_to_string(dir.join("keel-bench-seq.1")).unwrap();
    assert!(seq.contains("keel bench seq") && seq.contains("\\-\\-total"), "{seq}");

    let err = Command::new(TOOLS).args(["manpages", "/nonexistent/dir"]).output().unwrap();
    assert!(!err.status.success());
    assert!(String::from_utf8_lossy(&err.stderr).contains("cannot write man pages into /nonexistent/dir"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn usage_names_the_command_typed() {
    let usage = |arg0: &str| {
        let out = Command::new(TOOLS).arg0(arg0).args(["bench", "--help"]).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(usage("keel").contains("Usage: keel bench <COMMAND>"), "{}", usage("keel"));
    assert!(usage("keel-tools").contains("Usage: keel-tools bench <COMMAND>"));
}

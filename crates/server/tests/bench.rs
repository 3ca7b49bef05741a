//! `keel bench` end to end: the real binary against a real server, small
//! enough for CI. Assertions are on what the results say and on what
//! reached the server's disk, never on speed.

use std::path::Path;
use std::process::{Command, Output};

use keel_testkit::procs::as_nobody;
use keel_testkit::server::{ExportOpts, TestServer};
use serde_json::Value;

fn keel() -> Command {
    Command::new(env!("CARGO_BIN_EXE_keel"))
}

fn bench(server: &TestServer, args: &[&str], out: &Path) -> Output {
    keel()
        .arg("bench")
        .args(args)
        .args(["--server", &server.addr.to_string(), "--export", &server.export_path(1), "--quiet", "--output"])
        .arg(out)
        .output()
        .unwrap()
}

fn results(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "keel bench failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// (phase, clients, threads) of every point, in order.
fn points(r: &Value) -> Vec<(String, u64, u64)> {
    r["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["phase"].as_str().unwrap().to_string(),
                p["clients"].as_u64().unwrap(),
                p["threads_per_client"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn seq_sweeps_clients_with_repetitions_and_records_every_sample() {
    let s = TestServer::start_default("bench-seq");
    let out = s.base.join("seq.json");
    let o = bench(
        &s,
        &[
            "seq",
            "--total",
            "8M",
            "--record",
            "256K",
            "--clients",
            "1,2",
            "--threads",
            "1,2",
            "--repeat",
            "2",
            "--label",
            "keel test",
        ],
        &out,
    );
    ok(&o);
    let r = results(&out);
    assert_eq!(r["schema"], "keel-bench/1");
    assert_eq!(r["workload"], "seq");
    assert_eq!(r["label"], "keel test");
    assert_eq!(r["target"]["wtmax"], 1 << 20, "FSINFO recorded");
    assert_eq!(r["config"]["total"], 8 << 20, "the options are in the results");
    assert!(r["client"]["hosts"][0]["hostname"].as_str().is_some_and(|h| !h.is_empty()));
    let expect: Vec<(String, u64, u64)> = [(1, 1), (1, 2), (2, 1), (2, 2)]
        .iter()
        .flat_map(|&(c, t)| [("write".to_string(), c, t), ("read".to_string(), c, t)])
        .collect();
    assert_eq!(points(&r), expect);
    for p in r["points"].as_array().unwrap() {
        let procs = p["clients"].as_u64().unwrap() * p["threads_per_client"].as_u64().unwrap();
        let runs = p["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "one run per repetition");
        for run in runs {
            // The total is split evenly: every byte was written, then read.
            assert_eq!(run["bytes"], 8 << 20, "{p}");
            assert_eq!(run["errors"], 0);
            assert_eq!(run["per_process"].as_array().unwrap().len() as u64, procs);
            assert!(run["value"].as_f64().unwrap() > 0.0);
        }
        let (min, mean, max) = (p["min"].as_f64().unwrap(), p["mean"].as_f64().unwrap(), p["max"].as_f64().unwrap());
        assert!(min <= mean && mean <= max);
    }
    let csv = std::fs::read_to_string(out.with_extension("csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 8 * 2, "a header and a row per run");
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("Operation") && table.contains("MiB/s"), "{table}");
    // The figure of that run, with the reference papers' published points beside it.
    let report = s.base.join("report");
    let o = keel()
        .args(["report", "--reference", "seeds", "--baseline", "keel test", "-o"])
        .arg(&report)
        .arg(&out)
        .output()
        .unwrap();
    ok(&o);
    let html = std::fs::read_to_string(report.join("index.html")).unwrap();
    assert!(
        html.contains("keel test") && html.contains("<svg") && html.contains("BeeGFS"),
        "the page draws the run and the references"
    );
    let svg = std::fs::read_to_string(report.join("seq-write.svg")).unwrap();
    assert!(svg.contains("keel test"));
    let png = std::fs::read(report.join("seq-read.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // A lone series has nothing to be compared with.
    assert!(!report.join("ratios.md").exists());
    // The benchmark cleans up after itself.
    let left: Vec<_> = std::fs::read_dir(s.export_dir(1).join("keel-bench")).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn the_data_really_reaches_the_server() {
    let s = TestServer::start_default("bench-keep");
    let out = s.base.join("seq.json");
    ok(&bench(&s, &["seq", "--total", "6M", "--record", "1M", "--clients", "3", "--keep"], &out));
    let mut files = Vec::new();
    for entry in walk(&s.export_dir(1).join("keel-bench")) {
        if entry.is_file() {
            files.push(std::fs::metadata(&entry).unwrap().len());
        }
    }
    assert_eq!(files, vec![2 << 20; 3], "three files of 2 MiB");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn random_meta_and_ior_produce_their_phases() {
    let s = TestServer::start_default("bench-mixed");
    let out = s.base.join("random.json");
    ok(&bench(&s, &["random", "--file-size", "2M", "--ops", "300", "--queue-depth", "4", "--clients", "2"], &out));
    let r = results(&out);
    assert_eq!(points(&r), vec![("write".into(), 2, 1), ("read".into(), 2, 1)]);
    for p in r["points"].as_array().unwrap() {
        assert_eq!(p["unit"], "IOPS");
        assert_eq!(p["runs"][0]["ops"], 600);
        assert_eq!(p["runs"][0]["bytes"], 600 * 4096);
    }

    let out = s.base.join("meta.json");
    ok(&bench(&s, &["meta", "-n", "50", "-b", "2", "-z", "2", "--clients", "2", "--sync"], &out));
    let r = results(&out);
    assert_eq!(points(&r).into_iter().map(|p| p.0).collect::<Vec<_>>(), vec!["create", "stat", "remove"],);
    for p in r["points"].as_array().unwrap() {
        assert_eq!(p["unit"], "ops/s");
        assert_eq!(p["runs"][0]["ops"], 100, "50 files for each of 2 processes");
        assert_eq!(p["runs"][0]["errors"], 0);
    }

    let out = s.base.join("ior.json");
    ok(&bench(&s, &["ior", "-t", "64K", "-b", "1M", "-s", "2", "--clients", "2"], &out));
    let r = results(&out);
    let phases: Vec<String> = points(&r).into_iter().map(|p| p.0).collect();
    assert_eq!(
        phases,
        ["write-fpp", "read-fpp", "write-ssf-segmented", "read-ssf-segmented", "write-ssf-strided", "read-ssf-strided"]
    );
    for p in r["points"].as_array().unwrap() {
        assert_eq!(p["runs"][0]["bytes"], (2 * 2) << 20, "{}", p["phase"]);
    }
}

/// Ranks as mpirun or srun starts them: each process learns its rank from
/// the environment and rank 0 gathers everyone's results.
#[test]
fn ranks_coordinate_through_rank_zero() {
    let s = TestServer::start_default("bench-ranks");
    let coordinator = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let out = s.base.join("ranks.json");
    let children: Vec<_> = (0..3)
        .map(|rank| {
            keel()
                .args(["bench", "seq", "--total", "3M", "--record", "1M", "--clients", "1,3", "--quiet"])
                .args(["--server", &s.addr.to_string(), "--export", &s.export_path(1), "--output"])
                .arg(&out)
                .env("KEEL_BENCH_RANK", rank.to_string())
                .env("KEEL_BENCH_SIZE", "3")
                .env("KEEL_BENCH_COORDINATOR", &coordinator)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let r = results(&out);
    assert_eq!(r["client"]["ranks"], 3);
    let three = r["points"].as_array().unwrap().iter().find(|p| p["clients"] == 3 && p["phase"] == "write").unwrap();
    assert_eq!(three["runs"][0]["per_process"].as_array().unwrap().len(), 3, "every rank reported");
    assert_eq!(three["runs"][0]["bytes"], 3 << 20);
}

#[test]
fn bad_targets_and_options_are_clear_errors() {
    let s = TestServer::start_default("bench-errors");
    let out = s.base.join("x.json");
    let run = |args: &[&str]| {
        let o = keel().arg("bench").args(args).output().unwrap();
        assert!(!o.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    let server = s.addr.to_string();
    let e = run(&["seq", "--server", &server, "--export", "/not/exported", "-q"]);
    assert!(e.contains("cannot mount"), "{e}");
    let e = run(&["seq", "--server", "127.0.0.1:1", "--export", "/x", "-q"]);
    assert!(e.contains("cannot mount"), "{e}");
    let e = run(&["seq", "--server", &server, "--export", &s.export_path(1), "--total", "4Q"]);
    assert!(e.contains("unknown unit"), "{e}");
    let e = run(&["seq", "--server", &server, "--export", &s.export_path(1), "--clients", "0", "-q"]);
    assert!(e.contains("at least 1"), "{e}");
    assert!(!out.exists());
}

/// Against a `secure` export (the default): run as root, `keel bench` calls
/// from reserved ports, as the kernel client does, and works; run as an
/// ordinary user it cannot, is refused, and says what to do.
#[test]
fn a_secure_export_takes_root_and_tells_others_what_to_do() {
    let rw_secure = "access = \"rw\"\nsquash = \"no_root_squash\"\nsecure = true";
    let s = TestServer::start("bench-secure", vec![ExportOpts::new(1, "export", rw_secure)], "");
    let args = ["meta", "-n", "20", "--clients", "2"];
    let out = s.base.join("root.json");
    ok(&bench(&s, &args, &out));
    assert_eq!(results(&out)["points"].as_array().unwrap().len(), 3, "create, stat and remove");

    let cwd = s.base.join("nobody");
    std::fs::create_dir(&cwd).unwrap();
    std::fs::set_permissions(&cwd, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let o = as_nobody(Path::new(env!("CARGO_BIN_EXE_keel")))
        .arg("bench")
        .args(args)
        .args(["--server", &s.addr.to_string(), "--export", &s.export_path(1), "--quiet"])
        .current_dir(&cwd)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(!o.status.success(), "keel bench as nobody succeeded against a secure export:\n{text}");
    for hint in ["ordinary source port", "run this command as root", "insecure = true"] {
        assert!(text.contains(hint), "no {hint:?} in what keel bench said:\n{text}");
    }
}

/// The daemon does not link the tools: `keel bench|verify|report` run
/// `keel-tools` from beside `keel` or from the PATH. Without it, each says
/// which package holds it and exits 127 (as a shell does for a missing
/// command); with it on the PATH only, it is found there.
#[test]
fn without_keel_tools_the_tool_commands_say_what_to_install() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("no-tools-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let lone = dir.join("keel");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_keel"), &lone).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_keel"), &lone).unwrap();
    }
    for command in ["bench", "verify", "report"] {
        let o = Command::new(&lone).args([command, "--help"]).env("PATH", &dir).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(127), "keel {command} without keel-tools:\n{err}");
        for hint in [format!("`keel {command}`"), "keel-tools package".into(), "apt install keel-tools".into()] {
            assert!(err.contains(&hint), "no {hint:?} in:\n{err}");
        }
    }
    let beside = Path::new(env!("CARGO_BIN_EXE_keel")).parent().unwrap();
    assert!(beside.join("keel-tools").is_file(), "build keel-tools first: cargo build -p keel-tools");
    let o = Command::new(&lone).args(["report", "--help"]).env("PATH", beside).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("Usage: keel report"), "keel-tools on the PATH:\n{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

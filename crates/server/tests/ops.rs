//! Operating a running server through the real binary: `keel stat` counts
//! a known workload exactly, `keel exports reload` (and SIGHUP) changes
//! exports under load without failing a call on the exports that stay, a
//! bad configuration changes nothing, `keel status` tells health, and the
//! Prometheus endpoint parses with an independent parser.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use keel_testkit::nfs::{Nfs, RpcConn, nfsstat3, pattern, reserved_stream_with, stable_how};
use keel_testkit::procs::{free_port, run_timeout, wait_for};
use keel_testkit::server::{ExportOpts, TestServer, keel_bin};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

fn keel(server: &TestServer, args: &[&str]) -> keel_testkit::procs::Output {
    let mut cmd = Command::new(keel_bin());
    cmd.args(args).arg("--config").arg(&server.config);
    run_timeout(&mut cmd, LIMIT)
}

fn keel_ok(server: &TestServer, args: &[&str]) -> String {
    let out = keel(server, args);
    assert!(out.status.success(), "keel {args:?} failed ({}):\n{}", out.status, out.text());
    out.stdout
}

fn stats(server: &TestServer) -> Value {
    serde_json::from_str(&keel_ok(server, &["stat", "--json"])).expect("keel stat --json is JSON")
}

/// The procedure's entry of program `program` in a `keel stat --json` answer.
fn proc_of<'a>(s: &'a Value, program: &str, name: &str) -> &'a Value {
    let p = s["calls"]["programs"].as_array().unwrap().iter().find(|p| p["name"] == program).expect("program");
    p["procedures"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("{name}"))
}

fn status_count(s: &Value, name: &str) -> u64 {
    let p = s["calls"]["programs"].as_array().unwrap().iter().find(|p| p["name"] == "nfs").unwrap();
    p["statuses"].as_array().unwrap().iter().find(|st| st["name"] == name).map_or(0, |st| st["count"].as_u64().unwrap())
}

fn histogram_count(c: &Value) -> u64 {
    c["latency"]["buckets"].as_array().unwrap().iter().map(|b| b[1].as_u64().unwrap()).sum()
}

#[test]
fn stat_counts_a_known_workload_exactly() {
    let server = TestServer::start("ops-stat", vec![ExportOpts::rw(1, "a"), ExportOpts::rw(2, "b")], "");
    let mut c = Nfs::connect(server.addr).unwrap();
    let a = c.mount(&server.export_path(1)).unwrap();
    let b = c.mount(&server.export_path(2)).unwrap();
    // A refused mount is an error of MNT and of the client.
    assert!(c.mount("/not-exported").is_err());
    for _ in 0..3 {
        c.null().unwrap();
    }
    for _ in 0..7 {
        c.getattr(&a).unwrap();
    }
    for _ in 0..5 {
        assert_eq!(c.lookup(&a, "missing").unwrap_err(), nfsstat3::NFS3ERR_NOENT);
    }
    let f = c.create_new(&b, "f").unwrap();
    c.write(&f, 0, &[7u8; 10_000], stable_how::FILE_SYNC).unwrap();
    c.write(&f, 10_000, &[8u8; 10_000], stable_how::UNSTABLE).unwrap();
    c.commit(&f).unwrap();
    for i in 0..3 {
        let (data, _) = c.read(&f, i * 4096, 4096).unwrap();
        assert_eq!(data.len(), 4096);
    }

    let s = stats(&server);
    let expected = [
        ("null", 3, 0),
        ("getattr", 7, 0),
        ("lookup", 5, 5),
        ("create", 1, 0),
        ("write", 2, 0),
        ("commit", 1, 0),
        ("read", 3, 0),
    ];
    let nfs = s["calls"]["programs"].as_array().unwrap().iter().find(|p| p["name"] == "nfs").unwrap();
    for p in nfs["procedures"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let (calls, errors) = expected.iter().find(|(n, _, _)| *n == name).map_or((0, 0), |(_, c, e)| (*c, *e));
        assert_eq!((p["calls"].as_u64().unwrap(), p["errors"].as_u64().unwrap()), (calls, errors), "{name}: {p}");
        assert_eq!(histogram_count(p), calls, "{name}: one latency sample per call");
    }
    let mnt = proc_of(&s, "mount", "mnt");
    assert_eq!((mnt["calls"].as_u64(), mnt["errors"].as_u64()), (Some(3), Some(1)), "{mnt}");
    assert_eq!(status_count(&s, "NFS3_OK"), 7 + 1 + 2 + 1 + 3);
    assert_eq!(status_count(&s, "NFS3ERR_NOENT"), 5);
    assert_eq!((s["calls"]["read_bytes"].as_u64(), s["calls"]["write_bytes"].as_u64()), (Some(12_288), Some(20_000)));

    let export = |id: u64| s["calls"]["exports"].as_array().unwrap().iter().find(|e| e["id"] == id).unwrap().clone();
    let (e1, e2) = (export(1), export(2));
    // MNT + GETATTR x7 + LOOKUP x5 on export 1; MNT, CREATE, 2 WRITEs, COMMIT, 3 READs on export 2.
    assert_eq!((e1["calls"].as_u64(), e1["errors"].as_u64()), (Some(13), Some(5)), "{e1}");
    assert_eq!((e2["calls"].as_u64(), e2["errors"].as_u64()), (Some(8), Some(0)), "{e2}");
    assert_eq!((e2["read_bytes"].as_u64(), e2["write_bytes"].as_u64()), (Some(12_288), Some(20_000)));
    assert_eq!(e1["path"], server.export_path(1));

    let clients = s["calls"]["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 1, "{clients:?}");
    assert_eq!(clients[0]["address"], "127.0.0.1");
    assert_eq!(
        (clients[0]["calls"].as_u64(), clients[0]["errors"].as_u64()),
        (Some(3 + 3 + 7 + 5 + 1 + 2 + 1 + 3), Some(6))
    );
    assert_eq!(s["connections"]["open"], 1);
    assert_eq!((s["workers"]["workers"].as_u64(), s["workers"]["alive"].as_u64()), (Some(8), Some(8)));

    // The text form shows the same numbers.
    let text = keel_ok(&server, &["stat"]);
    let getattr = text.lines().find(|l| l.trim_start().starts_with("getattr")).expect("a getattr row");
    assert_eq!(getattr.split_whitespace().nth(1), Some("7"), "{text}");
    assert!(text.contains("NFS3ERR_NOENT 5"), "{text}");
    assert!(text.contains("MNT3ERR_NOENT 1"), "{text}");

    // Live: two intervals, each the difference (nothing happened).
    let live = keel_ok(&server, &["stat", "--json", "--interval", "0.2", "--count", "2"]);
    let lines: Vec<Value> = live.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{live}");
    for l in &lines {
        assert!(l["interval_seconds"].as_f64().unwrap() > 0.1, "{l}");
        assert_eq!(proc_of(l, "nfs", "getattr")["calls"], 0, "{l}");
    }
    drop(c);
}

/// The `[server]` table of the test configuration, to which tests append
/// the exports they want.
fn server_table(server: &TestServer) -> String {
    let text = std::fs::read_to_string(&server.config).unwrap();
    text.split("\n[[export]]").next().unwrap().to_string()
}

fn export_table(server: &TestServer, id: u32, name: &str) -> String {
    let dir = server.base.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    format!(
        "\n[[export]]\npath = \"{}\"\nid = {id}\naccess = \"rw\"\nsquash = \"no_root_squash\"\n\
         [[export.clients]]\nhost = \"*\"\n",
        dir.display()
    )
}

fn listed_ids(server: &TestServer) -> Vec<u64> {
    let list: Value = serde_json::from_str(&keel_ok(server, &["exports", "--json"])).unwrap();
    list.as_array().unwrap().iter().map(|e| e["id"].as_u64().unwrap()).collect()
}

#[test]
fn reload_under_load_adds_and_removes_exports_and_the_others_notice_nothing() {
    let server = TestServer::start("ops-reload", vec![ExportOpts::rw(1, "keep"), ExportOpts::rw(2, "gone")], "");
    let addr = server.addr;
    let keep = server.export_path(1);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    // Two clients work on the export that stays, without pause; any
    // failed call fails the test (the client panics, the join says so).
    let workers: Vec<_> = (0..2)
        .map(|n| {
            let (stop, done, keep) = (stop.clone(), done.clone(), keep.clone());
            std::thread::spawn(move || {
                let mut c = Nfs::connect(addr).unwrap();
                let root = c.mount(&keep).unwrap();
                let f = c.create_new(&root, &format!("load-{n}")).unwrap();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    c.getattr(&root).unwrap();
                    let w = c.write(&f, (i % 64) * 4096, &[n as u8; 4096], stable_how::UNSTABLE).unwrap();
                    assert_eq!(w.count, 4096);
                    let (data, _) = c.read(&f, (i % 64) * 4096, 4096).unwrap();
                    assert_eq!(data, vec![n as u8; 4096]);
                    c.lookup(&root, &format!("load-{n}")).unwrap();
                    i += 1;
                    done.fetch_add(4, Ordering::Relaxed);
                }
                i
            })
        })
        .collect();
    let mut old = Nfs::connect(addr).unwrap();
    let gone_root = old.mount(&server.export_path(2)).unwrap();
    let gone_file = old.create_new(&gone_root, "f").unwrap();
    wait_for(LIMIT, || (done.load(Ordering::Relaxed) > 200).then_some(())).expect("the load runs");

    // Remove export 2, add export 3, change export 1's client list.
    let base = server_table(&server);
    let mut changed_1 = export_table(&server, 1, "keep");
    changed_1 = changed_1.replace(
        "[[export.clients]]\nhost = \"*\"\n",
        "[[export.clients]]\nhost = \"192.0.2.1\"\naccess = \"ro\"\n[[export.clients]]\nhost = \"*\"\n",
    );
    std::fs::write(&server.config, format!("{base}{changed_1}{}", export_table(&server, 3, "new"))).unwrap();
    let before = done.load(Ordering::Relaxed);
    let out = keel_ok(&server, &["exports", "reload"]);
    assert!(out.contains(&format!("exports reloaded from {}:", server.config.display())), "{out}");
    assert!(out.contains("added export 3"), "{out}");
    assert!(out.contains("removed export 2"), "{out}");
    assert!(out.contains("changed export 1"), "{out}");
    assert!(out.contains("1 added, 1 removed, 1 changed, 0 unchanged"), "{out}");
    assert_eq!(listed_ids(&server), vec![1, 3]);

    // Clients of the removed export get STALE, on the root and on a file.
    assert_eq!(old.getattr(&gone_root).unwrap_err(), nfsstat3::NFS3ERR_STALE);
    assert_eq!(old.getattr(&gone_file).unwrap_err(), nfsstat3::NFS3ERR_STALE);
    assert!(old.mount(&server.export_path(2)).is_err(), "the removed export cannot be mounted");
    // The new export serves at once, on the same connection.
    let new_root = old.mount(&server.base.join("new").display().to_string()).unwrap();
    let nf = old.create_new(&new_root, "hello").unwrap();
    old.write(&nf, 0, b"new export", stable_how::FILE_SYNC).unwrap();
    assert_eq!(std::fs::read(server.base.join("new/hello")).unwrap(), b"new export");

    // Back again, by SIGHUP this time: export 2 returns, and its old
    // handles work again (same id, same directory).
    std::fs::write(
        &server.config,
        format!(
            "{base}{}{}{}",
            export_table(&server, 1, "keep"),
            export_table(&server, 2, "gone"),
            export_table(&server, 3, "new")
        ),
    )
    .unwrap();
    // SAFETY: a signal to the server this test started.
    unsafe { libc::kill(server.pid() as i32, libc::SIGHUP) };
    wait_for(LIMIT, || (listed_ids(&server) == vec![1, 2, 3]).then_some(())).expect("SIGHUP reloads");
    old.getattr(&gone_file).expect("a re-added export's handles resolve again");

    wait_for(LIMIT, || (done.load(Ordering::Relaxed) > before + 400).then_some(())).expect("the load goes on");
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let rounds = w.join().expect("a call on the export that stayed failed");
        assert!(rounds > 10, "{rounds}");
    }
    let log = server.log_text();
    for line in ["export added", "export removed", "export changed its clients", "exports reloaded"] {
        assert!(log.contains(line), "{line:?} not in the log:\n{log}");
    }
    let s = stats(&server);
    assert_eq!(s["reloads"]["applied"], 2);
}

#[test]
fn a_bad_configuration_changes_nothing_and_says_why() {
    let server = TestServer::start("ops-bad", vec![ExportOpts::rw(1, "a"), ExportOpts::rw(2, "b")], "");
    let mut c = Nfs::connect(server.addr).unwrap();
    let root = c.mount(&server.export_path(1)).unwrap();
    let good = std::fs::read_to_string(&server.config).unwrap();
    let base = server_table(&server);
    let exports_before = keel_ok(&server, &["exports"]);

    let cases: Vec<(String, String)> = vec![
        // A syntax error: FILE:LINE.
        (format!("{good}\n[[export]\n"), "keel.toml:".into()),
        // A directory that does not exist.
        (
            format!(
                "{base}{}\n[[export]]\npath = \"/nonexistent/keel\"\nid = 9\nclients = [{{ host = \"*\" }}]\n",
                export_table(&server, 1, "a")
            ),
            "does not exist".into(),
        ),
        // An id that now names another directory.
        (format!("{base}{}", export_table(&server, 1, "b")), "changed its path".into()),
        // No exports at all.
        (base.clone(), "no exports".into()),
        // [ha] switched on: what it sets up happens at start only.
        (format!("[ha]\nenabled = true\n\n{good}"), "[ha] changes only at a restart".into()),
        // A Kerberos flavor on a server started without its key.
        (good.replacen("id = 1\n", "id = 1\nsec = [\"krb5\"]\n", 1), "restart keel to apply it".into()),
    ];
    for (text, why) in &cases {
        std::fs::write(&server.config, text).unwrap();
        let out = keel(&server, &["exports", "reload"]);
        assert!(!out.status.success(), "a bad configuration was applied:\n{text}");
        assert!(out.stderr.contains(why), "{why:?} not in:\n{}", out.text());
        assert!(!out.stderr.starts_with("keel: keel"), "the server's words come once after keel: {}", out.stderr);
        assert_eq!(keel_ok(&server, &["exports"]), exports_before, "the exports changed");
        c.getattr(&root).expect("the export still serves");
    }
    let s = stats(&server);
    assert_eq!(
        (s["reloads"]["applied"].as_u64(), s["reloads"]["refused"].as_u64()),
        (Some(0), Some(cases.len() as u64))
    );

    // Another file (of the same state directory, so `--config` finds this
    // server) is refused, naming both: the server reads only its own.
    std::fs::write(&server.config, &good).unwrap();
    let other = server.base.join("other.toml");
    std::fs::write(&other, format!("{base}{}", export_table(&server, 5, "other"))).unwrap();
    let mut cmd = Command::new(keel_bin());
    let out = run_timeout(cmd.args(["exports", "reload", "--config"]).arg(&other), LIMIT);
    assert!(!out.status.success(), "{}", out.text());
    let why =
        format!("{} is not this server's configuration file: it serves {}", other.display(), server.config.display());
    assert!(out.stderr.contains(&why), "{why:?} not in:\n{}", out.text());
    assert_eq!(keel_ok(&server, &["exports"]), exports_before, "the exports changed");

    // A [server] change is reported, not applied; the exports reload anyway.
    let changed = good.replace("workers = 8", "workers = 9");
    std::fs::write(&server.config, changed).unwrap();
    let out = keel_ok(&server, &["exports", "reload"]);
    assert!(out.contains("not applied until keel restarts: workers: 8 -> 9"), "{out}");
    assert!(out.contains("0 added, 0 removed, 0 changed, 2 unchanged"), "{out}");
    assert!(server.log_text().contains("export reload refused, nothing changed"));

    // Nothing exported, said on purpose (the packaged configuration): the
    // server serves nothing, stays healthy, and takes exports back later.
    std::fs::write(&server.config, format!("export = []\n{base}")).unwrap();
    let out = keel_ok(&server, &["exports", "reload"]);
    assert!(out.contains("0 added, 2 removed"), "{out}");
    assert!(listed_ids(&server).is_empty());
    assert_eq!(c.getattr(&root).unwrap_err(), nfsstat3::NFS3ERR_STALE);
    keel_ok(&server, &["status"]);
    std::fs::write(&server.config, &good).unwrap();
    keel_ok(&server, &["exports", "reload"]);
    c.getattr(&root).expect("served again");
}

#[test]
fn status_is_healthy_and_says_so_when_an_export_root_is_gone() {
    let mut server = TestServer::start("ops-health", vec![ExportOpts::rw(1, "a")], "");
    let out = keel(&server, &["status"]);
    assert!(out.status.success(), "{}", out.text());
    assert!(out.stdout.contains("healthy"), "{}", out.stdout);
    let dir = server.export_dir(1);
    let moved = server.base.join("moved");
    std::fs::rename(&dir, &moved).unwrap();
    let out = keel(&server, &["status"]);
    assert_eq!(out.status.code(), Some(1), "{}", out.text());
    assert!(out.stdout.contains("UNHEALTHY") && out.stdout.contains(&dir.display().to_string()), "{}", out.stdout);
    let json: Value = serde_json::from_str(&keel(&server, &["status", "--json"]).stdout).unwrap();
    assert_eq!(json["healthy"], false);
    std::fs::rename(&moved, &dir).unwrap();
    assert!(keel(&server, &["status"]).status.success());
    // No server: 3, as LSB's "not running".
    server.terminate();
    assert_eq!(keel(&server, &["status"]).status.code(), Some(3));
}

fn http_get(addr: SocketAddr, request: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP response");
    (head.to_string(), body.to_string())
}

/// An independent parser: Python's prometheus_client (Debian's
/// python3-prometheus-client, which scripts/test.sh installs).
const PARSE: &str = r##"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        key = s.name + json.dumps(dict(sorted(s.labels.items())), sort_keys=True)
        out[key] = s.value
    out["#type " + family.name] = family.type
print(json.dumps(out))
"##;

#[test]
fn the_metrics_endpoint_parses_and_the_dashboard_draws_what_it_serves() {
    let port = free_port();
    let server = TestServer::start(
        "ops-metrics",
        vec![ExportOpts::rw(1, "a")],
        &format!("metrics_listen = \"127.0.0.1:{port}\""),
    );
    let metrics: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut c = Nfs::connect(server.addr).unwrap();
    let root = c.mount(&server.export_path(1)).unwrap();
    for _ in 0..11 {
        c.getattr(&root).unwrap();
    }
    let (head, body) = http_get(metrics, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");

    let mut py = Command::new("/usr/bin/python3");
    py.args(["-c", PARSE])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = py.spawn().expect("python3 (scripts/test.sh installs python3-prometheus-client)");
    child.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the parser refused the metrics:\n{}", String::from_utf8_lossy(&out.stderr));
    let parsed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sample = |key: &str| parsed[key].as_f64().unwrap_or_else(|| panic!("no sample {key}"));
    assert_eq!(sample(r#"keel_calls_total{"proc": "getattr", "program": "nfs"}"#), 11.0);
    assert_eq!(sample(r#"keel_call_duration_seconds_count{"proc": "getattr", "program": "nfs"}"#), 11.0);
    assert_eq!(sample(r#"keel_call_duration_seconds_bucket{"le": "+Inf", "proc": "getattr", "program": "nfs"}"#), 11.0);
    assert_eq!(sample(r#"keel_calls_total{"proc": "mnt", "program": "mount"}"#), 1.0);
    assert_eq!(sample(r#"keel_export_calls_total{"export": "1", "path": "PATH"}"#.replace("PATH", &server.export_path(1)).as_str()), 12.0);
    assert_eq!(sample(r#"keel_connections{"state": "idle"}"#) + sample(r#"keel_connections{"state": "busy"}"#), 1.0);
    assert_eq!(parsed["#type keel_call_duration_seconds"], "histogram");
    assert_eq!(parsed["#type keel_calls"], "counter");

    // Every metric the Grafana dashboard draws is served.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../contrib/grafana/keel.json")).unwrap(),
    )
    .unwrap();
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    assert!(exprs.len() >= 8, "{exprs:?}");
    for expr in &exprs {
        let names: Vec<&str> =
            expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("keel_")).collect();
        assert!(!names.is_empty(), "an expression without a keel metric: {expr}");
        for name in names {
            // A family without samples here (per cache device: this server
            // has none) still declares itself.
            let declared =
                body.lines().any(|l| l.strip_prefix("# TYPE ").is_some_and(|t| t.split(' ').next() == Some(name)));
            assert!(
                declared || body.lines().any(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' '])),
                "{name} (in {expr}) is not served"
            );
        }
    }

    // Anything else is refused, and a request is bounded.
    assert!(http_get(metrics, "GET / HTTP/1.1\r\n\r\n").0.starts_with("HTTP/1.1 404"));
    assert!(http_get(metrics, "POST /metrics HTTP/1.1\r\n\r\n").0.starts_with("HTTP/1.1 405"));
    let big = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let mut s = TcpStream::connect(metrics).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(big.as_bytes());
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:.80}");
}

fn collect_exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "expr" {
                    out.push(v.as_str().unwrap().to_string());
                } else {
                    collect_exprs(v, out);
                }
            }
        }
        Value::Array(list) => list.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

/// Worker pool use, from the transport: a client that sends calls and
/// reads no replies holds all of its `max_requests_per_connection` slots,
/// and its next call is parked (not polled) until replies go out; once it
/// reads them, nothing is parked.
#[test]
fn a_client_that_reads_no_replies_is_parked_for_slots() {
    // More than the socket buffers hold (tcp_wmem's 4 MiB at most), within
    // the connection's share of the memory budget (16 MiB).
    const CALLS: usize = 12;
    const READ_BYTES: usize = 1 << 20;
    let server = TestServer::start("ops-parked", vec![ExportOpts::rw(1, "export")], "max_requests_per_connection = 4");
    std::fs::write(server.export_dir(1).join("source.bin"), pattern(7, CALLS * READ_BYTES)).unwrap();
    let stream = reserved_stream_with(server.addr, |socket| socket.set_recv_buffer_size(4096));
    let mut nfs = Nfs { conn: RpcConn::from_stream(stream).unwrap() };
    let root = nfs.mount(&server.export_path(1)).unwrap();
    let fh = nfs.lookup(&root, "source.bin").unwrap();
    for i in 0..CALLS {
        nfs.send_read(&fh, (i * READ_BYTES) as u64, READ_BYTES as u32).unwrap();
    }
    let parked = wait_for(LIMIT, || {
        let w = stats(&server)["workers"].clone();
        (w["parked_for_slots"] == 1).then_some(w)
    });
    assert!(parked.is_some(), "never parked for slots: {}", stats(&server)["workers"]);
    let conn = &stats(&server)["connections"]["list"][0];
    assert_eq!(conn["calls_in_flight"], 4, "{conn}");
    let text = keel_ok(&server, &["stat"]);
    assert!(text.contains("1 parked for slots"), "{text}");

    for _ in 0..CALLS {
        nfs.conn.recv().expect("every READ is answered once the client reads");
    }
    let w = stats(&server)["workers"].clone();
    assert_eq!((w["parked_for_slots"].as_u64(), w["parked_for_budget"].as_u64()), (Some(0), Some(0)), "{w}");
    assert_eq!(w["ready_queue"], 0, "{w}");
}

/// A reader that has gone (`keel stat -i 1 | head -3`) ends every command
/// quietly, as a closed pipe ends any Unix tool (SIGPIPE): no panic, no
/// exit status 101.
#[test]
fn every_command_ends_quietly_when_its_reader_has_gone() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let server = TestServer::start("ops-pipe", vec![ExportOpts::rw(1, "a")], "");
    let config = server.config.to_str().unwrap();
    let commands: &[&[&str]] = &[
        &["stat", "-i", "0.1", "--count", "100", "--config", config],
        &["stat", "--json", "--config", config],
        &["stat", "--config", config],
        &["status", "--config", config],
        &["exports", "--config", config],
        &["exports", "reload", "--config", config],
        &["cache", "list", "--config", config],
        &["check-config", config],
        &["probe", "--config", config],
        &["--help"],
    ];
    for args in commands {
        let mut child = Command::new(keel_bin())
            .args(*args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes before anything is written.
        drop(child.stdout.take());
        let status = keel_testkit::procs::wait_timeout(&mut child, LIMIT).expect("the command ended");
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        assert!(
            status.success() || status.signal() == Some(libc::SIGPIPE),
            "keel {args:?} ended with {status}:\n{stderr}"
        );
        assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "keel {args:?}:\n{stderr}");
    }
}

/// The sample `name` (with its labels, as written) of a metrics body.
fn metric(body: &str, name: &str) -> f64 {
    let line = body.lines().find(|l| l.split_once(' ').is_some_and(|(n, _)| n == name));
    let value = line.unwrap_or_else(|| panic!("no sample {name} in:\n{body}")).rsplit(' ').next().unwrap();
    value.parse().unwrap()
}

#[test]
fn nfs4_clients_and_their_state_show_in_keel_clients_status_and_the_metrics() {
    use bytes::Bytes;
    use keel_nfs4_proto::*;
    use keel_testkit::nfs4::V4;
    use keel_xdr::Opaque;
    use std::os::unix::fs::OpenOptionsExt;

    let port = free_port();
    let server = TestServer::start(
        "ops-nfs4-clients",
        vec![ExportOpts::rw(1, "a")],
        &format!(
            "nfs_versions = [\"3\", \"4.1\", \"4.2\"]\nnfs4_read_delegations = true\nmetrics_listen = \"127.0.0.1:{port}\""
        ),
    );
    std::fs::write(server.export_dir(1).join("f"), b"data").unwrap();
    // An owner with a byte that is not printable: listed escaped.
    let mut v4 = V4::connect(&server, b"admin-test\x01");
    let (open, fh) = v4.open_read(&server, 1, b"owner", "f");
    assert!(matches!(open.delegation, OpenDelegation4::OpenDelegateRead(_)), "{:?}", open.delegation);
    let lock = NfsArgop4::Lock(Lock4Args {
        locktype: NfsLockType4::ReadLt,
        reclaim: false,
        offset: 0,
        length: 2,
        locker: Locker4::OpenOwner(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open.stateid,
            lock_seqid: 0,
            lock_owner: LockOwner4 { clientid: 0, owner: Opaque(Bytes::from_static(b"locker")) },
        }),
    });
    v4.ok(vec![keel_testkit::nfs4::putfh(&fh), lock]);
    // It made its session in 4.1 and now speaks 4.2.
    v4.minor = 2;
    v4.ok(vec![]);

    let text = keel_ok(&server, &["clients"]);
    for want in [
        "address: 127.0.0.1\n",
        "name: \"admin-test\\x01\"\n",
        "principal: none\n",
        "minor version: 2\n",
        "status: confirmed (lease: ",
        "callback: up\n",
        "sessions: 1\n",
        " slots, 1 connections (1 with the backchannel)\n",
        "opens: 1 (1 open owners)\n",
        "lock states: 1 (1 lock owners, 1 ranges)\n",
        "delegations: 1 (0 write, 0 revoked)\n",
    ] {
        assert!(text.contains(want), "no {want:?} in keel clients:\n{text}");
    }
    let listed: Value = serde_json::from_str(&keel_ok(&server, &["clients", "--json"])).unwrap();
    let listed = listed.as_array().expect("a list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["owner"], "admin-test\\x01");
    assert_eq!(listed[0]["minor_version"], 2, "the highest minor version its COMPOUNDs used");
    assert_eq!(listed[0]["sessions"][0]["id"].as_str().unwrap().len(), 32, "{listed:?}");
    assert_eq!((listed[0]["opens"].as_u64(), listed[0]["lock_states"].as_u64()), (Some(1), Some(1)));

    let status = keel_ok(&server, &["status"]);
    assert!(status.contains("NFSv4: 1 clients (0 courtesy), 1 sessions"), "{status}");

    let metrics: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (_, body) = http_get(metrics, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(metric(&body, r#"keel_nfs4_clients{state="active"}"#), 1.0);
    assert_eq!(metric(&body, r#"keel_nfs4_clients{state="courtesy"}"#), 0.0);
    assert_eq!(metric(&body, "keel_nfs4_sessions"), 1.0);
    assert_eq!(metric(&body, "keel_nfs4_opens"), 1.0);
    assert_eq!(metric(&body, "keel_nfs4_lock_states"), 1.0);
    assert_eq!(metric(&body, "keel_nfs4_delegations"), 1.0);
    assert!(metric(&body, r#"keel_nfs4_callbacks_total{op="cb_null"}"#) >= 1.0, "{body}");
    // A local process's try to open the file for writing breaks the
    // delegation's file lease (its own LOCK did not): the callback
    // thread's next tick (every second) recalls it.
    let local_open = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(server.export_dir(1).join("f"))
        .map(drop)
        .expect_err("a local open for writing while the delegation is held");
    assert_eq!(local_open.raw_os_error(), Some(libc::EWOULDBLOCK), "{local_open}");
    let recalls = || {
        let (_, body) = http_get(metrics, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        metric(&body, r#"keel_nfs4_callbacks_total{op="cb_recall"}"#)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while recalls() < 1.0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(recalls(), 1.0);
}

#[test]
fn keel_clients_says_so_when_nfsv4_is_not_served() {
    let port = free_port();
    let server = TestServer::start(
        "ops-nfs4-off",
        vec![ExportOpts::rw(1, "a")],
        &format!("metrics_listen = \"127.0.0.1:{port}\"\nnfs_versions = [\"3\"]"),
    );
    let out = keel(&server, &["clients"]);
    assert!(!out.status.success(), "{}", out.text());
    assert!(out.stderr.contains("this server does not serve NFSv4"), "{}", out.text());
    assert!(!keel_ok(&server, &["status"]).contains("NFSv4:"));
    // The families are written all the same, at zero.
    let metrics: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (_, body) = http_get(metrics, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(metric(&body, r#"keel_nfs4_clients{state="active"}"#), 0.0);
    assert_eq!(metric(&body, "keel_nfs4_sessions"), 0.0);
}

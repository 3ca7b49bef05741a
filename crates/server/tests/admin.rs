//! The administration socket (`keel status`, the protocol in
//! docs/admin-protocol.md) and the state directory it lives in.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::Command;

use keel_testkit::server::{ExportOpts, TestServer, keel_bin, require_root, run};

fn keel() -> Command {
    Command::new(keel_bin())
}

/// Sends raw request lines to the server's socket; the answer lines.
fn exchange(server: &TestServer, lines: &[&[u8]]) -> Vec<serde_json::Value> {
    let stream = UnixStream::connect(server.base.join("state/keel.sock")).expect("connect to the socket");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = Vec::new();
    for line in lines {
        (&stream).write_all(line).unwrap();
        let mut answer = String::new();
        reader.read_line(&mut answer).expect("an answer line");
        out.push(serde_json::from_str(&answer).unwrap_or_else(|e| panic!("answer {answer:?}: {e}")));
    }
    out
}

#[test]
fn status_tells_what_is_served() {
    let server = TestServer::start("admin-status", vec![ExportOpts::rw(7, "export")], "");
    let text = run(keel().args(["status", "--config"]).arg(&server.config));
    assert!(text.contains(&format!("pid {}", server.pid())), "{text}");
    assert!(text.contains(&format!("listen {}", server.addr)), "{text}");
    assert!(text.contains(&format!("export 7 {}", server.export_path(7))), "{text}");
    let log = server.log_text();
    let verifier = log.split("verifier=").nth(1).and_then(|s| s.get(..16)).expect("verifier in the log");
    assert!(text.contains(&format!("write verifier {verifier}")), "{text}\nlog: {log}");
    // check-config computes the fsid the server serves, the same way.
    let export = server.export_path(7);
    let fsid = text.lines().find_map(|l| l.strip_prefix(&format!("export 7 {export} fsid "))).expect("fsid");
    let check = run(keel().arg("check-config").arg(&server.config));
    assert!(check.contains(&format!("export {export} id 7 fsid {fsid} (from ")), "{check}");
    // --state-dir finds the same server.
    let by_dir = run(keel().args(["status", "--state-dir"]).arg(server.base.join("state")));
    assert!(by_dir.contains(&format!("pid {}", server.pid())));
}

#[test]
fn status_without_a_server_fails_readably() {
    require_root();
    let dir = tempdir("admin-none");
    let out = keel().args(["status", "--state-dir"]).arg(&dir).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("is keel running"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_protocol_refuses_bad_requests_and_keeps_the_connection() {
    let server = TestServer::start("admin-proto", vec![ExportOpts::rw(1, "export")], "");
    let answers = exchange(
        &server,
        &[
            b"not json\n",
            b"{\"version\":2,\"command\":\"status\"}\n",
            b"{\"command\":\"status\"}\n",
            b"{\"version\":1,\"command\":\"format-disk\"}\n",
            b"{\"version\":1,\"command\":\"fault-arm\",\"point\":\"fsync\",\"errno\":5,\"count\":1}\n",
            b"{\"version\":1,\"command\":\"status\"}\n",
        ],
    );
    let errors: Vec<String> = answers[..5]
        .iter()
        .map(|a| {
            assert_eq!((a["version"].as_u64(), a["ok"].as_bool()), (Some(1), Some(false)), "{a}");
            a["error"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(errors[0].contains("not a JSON object"), "{errors:?}");
    assert!(errors[1].contains("version 2 is not served") && errors[1].contains("speaks 1"), "{errors:?}");
    assert!(errors[2].contains("no \"version\""), "{errors:?}");
    assert!(errors[3].contains("format-disk"), "{errors:?}");
    assert!(errors[4].contains("fault injection is off"), "{errors:?}");
    assert_eq!(answers[5]["ok"], true);
    assert_eq!(answers[5]["result"]["pid"], server.pid());

    // A request line without an end is bounded.
    let mut stream = UnixStream::connect(server.base.join("state/keel.sock")).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    stream.write_all(&vec![b'x'; 70 << 10]).unwrap();
    let mut answer = String::new();
    BufReader::new(&stream).read_line(&mut answer).unwrap();
    assert!(answer.contains("longer than"), "{answer}");
}

#[test]
fn a_non_root_user_is_refused() {
    let server = TestServer::start("admin-user", vec![ExportOpts::rw(1, "export")], "");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(keel_bin())
        .args(["status", "--state-dir"])
        .arg(server.base.join("state"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a non-root user reached the administration socket");
    assert!(err.contains("root only") || err.contains("Permission denied"), "{err}");
}

#[test]
fn a_second_server_on_the_same_state_directory_is_refused() {
    let server = TestServer::start("admin-twice", vec![ExportOpts::rw(1, "export")], "");
    let text = std::fs::read_to_string(&server.config).unwrap();
    let other = server.base.join("other.toml");
    std::fs::write(&other, text.replace(&format!("127.0.0.1:{}", server.addr.port()), "127.0.0.1:0")).unwrap();
    let out = keel().args(["serve", "--config"]).arg(&other).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("another keel is running with the state directory"), "{err}");
    // The first one serves on.
    run(keel().args(["status", "--config"]).arg(&server.config));
}

#[test]
fn a_state_directory_or_key_others_can_touch_stops_the_server() {
    require_root();
    let base = tempdir("admin-perms");
    let export = base.join("export");
    std::fs::create_dir(&export).unwrap();
    let state = base.join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = base.join("keel.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\nportmap = \"off\"\nstate_dir = \"{}\"\n\
             [[export]]\npath = \"{}\"\nid = 1\n[[export.clients]]\nhost = \"*\"\n",
            state.display(),
            export.display()
        ),
    )
    .unwrap();
    let serve = || keel().args(["serve", "--config"]).arg(&config).output().unwrap();
    let out = serve();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("not be writable by others"), "{err}");

    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(state.join("handle.key"), [7u8; 16]).unwrap();
    std::fs::set_permissions(state.join("handle.key"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = serve();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("can forge file handles"), "{err}");
    let _ = std::fs::remove_dir_all(&base);
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

//! NFSv4.1 state against the `keel` binary over TCP, with keel-testkit's
//! v4.1 client (built from keel-nfs4-proto; its connection is its
//! backchannel too, as the Linux client's is): what a closed connection
//! does to the sessions bound to it.

use std::process::Command;
use std::time::{Duration, Instant};

use keel_nfs4_proto::*;
use keel_testkit::nfs::reserved_stream;
use keel_testkit::nfs4::{V4, WAIT};
use keel_testkit::server::{ExportOpts, TestServer, keel_bin};
use serde_json::Value;

const PATH_DOWN: u32 = SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;

/// `keel clients --json`.
fn clients(server: &TestServer) -> Value {
    let mut cmd = Command::new(keel_bin());
    cmd.args(["clients", "--json"]).arg("--config").arg(&server.config);
    let out = keel_testkit::procs::run_timeout(&mut cmd, WAIT);
    assert!(out.status.success(), "keel clients: {}", out.text());
    serde_json::from_str(&out.stdout).expect("keel clients --json is JSON")
}

/// The first client's first session: its connections and those with the
/// backchannel.
fn session_connections(server: &TestServer) -> (u64, u64) {
    let listed = clients(server);
    let s = &listed[0]["sessions"][0];
    (s["connections"].as_u64().unwrap(), s["back_connections"].as_u64().unwrap())
}

/// A new connection for the client (the old one is closed when dropped).
fn reconnect(server: &TestServer, v4: &mut V4) -> std::net::TcpStream {
    let stream = reserved_stream(server.addr);
    stream.set_read_timeout(Some(WAIT)).unwrap();
    std::mem::replace(&mut v4.stream, stream)
}

/// RFC 8881 sections 2.10.3.1 and 18.46.3: when the connection carrying a
/// session's backchannel closes, the session lets go of it, and SEQUENCE
/// on the client's other connection says CB_PATH_DOWN and
/// CB_PATH_DOWN_SESSION; the client binds its backchannel again with
/// BIND_CONN_TO_SESSION, which is probed, and the flags clear. A session
/// whose every connection closed lives on: a new connection just uses it.
#[test]
fn a_closed_connection_takes_the_backchannel_with_it_and_the_session_lives_on() {
    let server = TestServer::start("nfs4-conn-close", vec![ExportOpts::rw(1, "export")], "nfs_versions = [\"4.1\"]");
    let mut v4 = V4::connect(&server, b"conn-close-test");
    v4.wait_for_callback_path();

    // A second connection, bound to the fore channel by its first
    // SEQUENCE (SP4_NONE); the first one still carries the backchannel.
    let first = reconnect(&server, &mut v4);
    let (flags, _) = v4.run(vec![]);
    assert_eq!(flags & PATH_DOWN, 0, "flags {flags:#x}");
    assert_eq!(session_connections(&server), (2, 1));

    drop(first);
    let start = Instant::now();
    loop {
        let (flags, _) = v4.run(vec![]);
        if flags & PATH_DOWN == PATH_DOWN {
            break;
        }
        assert!(start.elapsed() < WAIT, "the closed backchannel was never noticed (flags {flags:#x})");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(session_connections(&server), (1, 0), "the closed connection is bound to nothing");

    // The client binds its backchannel to the connection it has.
    let bind = BindConnToSession4Args {
        bctsa_sessid: v4.session,
        bctsa_dir: ChannelDirFromClient4::Cdfc4BackOrBoth,
        bctsa_use_conn_in_rdma_mode: false,
    };
    let probes = v4.probes;
    let res = v4.compound(vec![NfsArgop4::BindConnToSession(bind)]);
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
    v4.wait_for_callback_path();
    assert!(v4.probes > probes, "the new backchannel was probed");
    assert_eq!(session_connections(&server), (1, 1));

    // Every connection of the session closes; it is still there for a
    // new one.
    drop(reconnect(&server, &mut v4));
    let start = Instant::now();
    while session_connections(&server) != (0, 0) {
        assert!(start.elapsed() < WAIT, "the last connection's close was never noticed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (flags, res) = v4.run(vec![]);
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
    assert_eq!(flags & PATH_DOWN, PATH_DOWN, "flags {flags:#x}");
}

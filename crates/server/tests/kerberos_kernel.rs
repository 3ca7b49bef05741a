//! Kerberos with the real Linux kernel client: `tools/krb5-lab`'s KDC, the
//! Debian guest of `tools/kernel-nfs-client` with rpc.gssd, and `keel serve`
//! with an export that accepts only krb5p, krb5i and krb5. Over NFSv3 with
//! `sec=krb5i` (and a second mount with `sec=krb5`) and over NFSv4.2 with
//! `sec=krb5p` (and a second mount with `sec=krb5i`): alice with a ticket
//! writes and reads back her own file, which is hers on the server's disk;
//! bob cannot read it; root in the guest, without a ticket of its own,
//! gets no user's rights; a `sec=sys` mount is refused. The guest talks to
//! the server through a relay in this test that keeps the bytes: alice's
//! data is on the wire in the clear with krb5i and nowhere with krb5p.
//!
//! In the NFSv3 boot also: carol, whose tickets live [`CAROL_LIFE_S`],
//! works over the `sec=krb5` mount, is refused once her ticket expired
//! (nothing served as her or as anyone else), and carries on after a
//! fresh kinit without a remount; `alice@OTHER.TEST`, of a realm whose
//! users KEEL.TEST trusts (`tools/krb5-lab/trust.sh`), is not the
//! server's alice (her 0600 file is closed, what she creates is the
//! anonymous user's); `alice@NOTRUST.TEST`, of a realm without trust, gets
//! nothing, and the server's alice keeps her rights.
//!
//! Two boots of the VM, one at a time (2 cores).

mod kerberos {
    pub mod users;
}

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use keel_testkit::procs::{free_port, run_ok};
use keel_testkit::server::{ExportOpts, TestServer, digest};
use kerberos::users::SystemUser;

const RUN_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/kernel-nfs-client/run.sh");
const LAB_SETUP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/krb5-lab/setup.sh");
const LAB_TRUST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/krb5-lab/trust.sh");
const LAB_STOP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/krb5-lab/stop.sh");
const GUEST_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernel/kerberos.sh");
const BOOT_TIMEOUT_S: u32 = 300;
/// The guest's users (tools/krb5-lab's `--uid-base` 10001): the server's
/// user database gets the same names with the same ids.
const ALICE: (&str, u32) = ("alice", 10001);
const BOB: (&str, u32) = ("bob", 10002);
const CAROL: (&str, u32) = ("carol", 10003);
/// A user the server and the guest both have, under other ids: over
/// NFSv4 under Kerberos the guest must see her by name (`nfs4_idmap_domain`),
/// under its own id for her (kerberos.sh's 10005).
const ERIN: (&str, u32) = ("erin", 20005);
/// carol's ticket lifetime (setup.sh --short-life): long enough for her
/// first calls from the emulated guest, short enough to wait out.
const CAROL_LIFE_S: u32 = 15;
/// The export's anonymous uid (exports(5)'s default), what root in the
/// guest and machine principals act as.
const ANON_UID: u32 = 65534;
/// The bytes alice writes: easy to find on the wire.
const CANARY: &[u8] = b"KEEL-KRB5-WIRE-CANARY-0123456789";
/// The most the relay keeps of each direction.
const CAPTURE_BYTES_MAX: usize = 256 << 20;

/// A throwaway realm of `tools/krb5-lab`, its KDC stopped and its
/// directory removed when dropped.
struct Lab {
    dir: PathBuf,
}

impl Lab {
    fn start(base: &Path, name: &str, args: &[&str]) -> Lab {
        let dir = base.join(name);
        let port = free_port().to_string();
        run_ok(Command::new(LAB_SETUP).arg(&dir).args(["--port", &port]).args(args), Duration::from_secs(300));
        Lab { dir }
    }

    /// `other`'s users known to this realm's clients, trusted or not
    /// (`trust.sh`).
    fn learn(&self, other: &Lab, trusted: bool) {
        let mut cmd = Command::new(LAB_TRUST);
        cmd.arg(&self.dir).arg(&other.dir);
        if !trusted {
            cmd.arg("--no-trust");
        }
        run_ok(&mut cmd, Duration::from_secs(60));
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new(LAB_STOP).arg(&self.dir).output();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A TCP relay from the guest to the server that keeps what passes each
/// way: the bytes on the wire, without a packet capture.
struct Relay {
    port: u16,
    to_server: Arc<Mutex<Vec<u8>>>,
    to_client: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Relay {
    fn start(server: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (to_server, to_client) = (Arc::default(), Arc::default());
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let (up, down, stop) = (Arc::clone(&to_server), Arc::clone(&to_client), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok((client, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    client.set_nonblocking(false).unwrap();
                    let Ok(upstream) = TcpStream::connect(server) else { continue };
                    pump(client.try_clone().unwrap(), upstream.try_clone().unwrap(), Arc::clone(&up));
                    pump(upstream, client, Arc::clone(&down));
                }
            })
        };
        Relay { port, to_server, to_client, stop, acceptor: Some(acceptor) }
    }

    /// Forgets what passed so far.
    fn clear(&self) {
        self.to_server.lock().unwrap().clear();
        self.to_client.lock().unwrap().clear();
    }

    /// Whether `pattern` passed (to the server, to the client).
    fn seen(&self, pattern: &[u8]) -> (bool, bool) {
        let has = |bytes: &Mutex<Vec<u8>>| bytes.lock().unwrap().windows(pattern.len()).any(|w| w == pattern);
        (has(&self.to_server), has(&self.to_client))
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

/// Copies `from` to `to` until either ends, keeping the bytes; the pump
/// thread ends with the connection (the guest's, when its VM stops).
fn pump(mut from: TcpStream, mut to: TcpStream, kept: Arc<Mutex<Vec<u8>>>) {
    std::thread::spawn(move || {
        let mut buf = vec![0; 64 << 10];
        while let Ok(n @ 1..) = from.read(&mut buf) {
            {
                let mut kept = kept.lock().unwrap();
                if kept.len() + n <= CAPTURE_BYTES_MAX {
                    kept.extend_from_slice(&buf[..n]);
                }
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
        let _ = from.shutdown(Shutdown::Read);
    });
}

/// What one boot of the guest printed.
struct Guest {
    output: String,
    results: BTreeMap<String, String>,
}

impl Guest {
    /// Boots the Debian guest against `relay` with the export mounted at
    /// `vers` with `sec`, and runs the guest script.
    fn run(server: &TestServer, lab: &Lab, relay: &Relay, vers: &str, sec: &str, files: &[&Path]) -> Guest {
        let mut cmd = Command::new(RUN_SH);
        cmd.args(["--guest", "debian", "--hostname", "client.keel.test", "--server-name", "server.keel.test"]);
        cmd.arg("--krb5").arg(lab.dir.join("guest"));
        cmd.arg("--port").arg(relay.port.to_string());
        cmd.arg("--vers").arg(vers).arg("--export").arg(server.export_path(1));
        cmd.arg("--opts").arg(format!("sec={sec}"));
        cmd.arg("--timeout").arg(BOOT_TIMEOUT_S.to_string());
        for f in files {
            cmd.arg("--file").arg(f);
        }
        cmd.arg(GUEST_SCRIPT);
        let start = Instant::now();
        let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {RUN_SH}: {e}"));
        let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let results = keel_testkit::procs::guest_results(&output);
        eprintln!("vers {vers} sec={sec}: exit {:?} after {:.1} s", out.status.code(), start.elapsed().as_secs_f64());
        let g = Guest { output, results };
        assert!(
            out.status.code() == Some(0) && g.get("done") == "1",
            "guest failed:\n{}\nserver log:\n{}",
            g.output,
            server.log_text()
        );
        g
    }

    fn get(&self, key: &str) -> &str {
        self.results.get(key).map_or("", String::as_str)
    }

    fn expect(&self, key: &str, want: &str) {
        assert_eq!(self.get(key), want, "result {key}:\n{}", self.output);
    }

    fn expect_denied(&self, key: &str) {
        assert!(self.get(key).contains("Permission denied"), "result {key} is not EACCES:\n{}", self.output);
    }

    /// Refused as the kernel reports a credential that is gone: EACCES,
    /// or EKEYEXPIRED for an expired ticket.
    fn expect_refused(&self, key: &str) {
        let got = self.get(key);
        assert!(
            got.contains("Permission denied") || got.contains("Key has expired"),
            "result {key} is not EACCES or EKEYEXPIRED:\n{}",
            self.output
        );
    }
}

#[test]
fn the_kernel_client_with_kerberos_over_v3_and_v4_2() {
    keel_testkit::server::require_root();
    let alice = SystemUser::create(ALICE.0, Some(ALICE.1));
    let _bob = SystemUser::create(BOB.0, Some(BOB.1));
    let carol = SystemUser::create(CAROL.0, Some(CAROL.1));
    let erin = SystemUser::create(ERIN.0, Some(ERIN.1));
    let base = std::env::temp_dir().join(format!("keel-krb5-kernel-{}", std::process::id()));
    let _ = fs::remove_dir_all(&base);
    fs::create_dir_all(&base).unwrap();
    let lab = Lab::start(&base, "krb5-lab", &["--short-life", &CAROL_LIFE_S.to_string()]);
    let other = Lab::start(&base, "other", &["--realm", "OTHER.TEST"]);
    let notrust = Lab::start(&base, "notrust", &["--realm", "NOTRUST.TEST"]);
    lab.learn(&other, true);
    lab.learn(&notrust, false);
    // SAFETY: this binary's only test sets it before it starts any thread
    // or process; keel inherits it (the realm is the lab's, never
    // /etc/krb5.conf's).
    unsafe { std::env::set_var("KRB5_CONFIG", lab.dir.join("krb5.conf")) };

    // The relay's connections come from unprivileged ports.
    let export =
        ExportOpts::new(1, "export", "access = \"rw\"\ninsecure = true\nsec = [\"krb5p\", \"krb5i\", \"krb5\"]");
    let extra = format!(
        "nfs_versions = [\"3\", \"4.1\", \"4.2\"]\nkeytab = \"{}\"\nprincipal = \"nfs/server.keel.test\"\n\
         nfs4_idmap_domain = \"keel.test\"",
        lab.dir.join("server.keytab").display()
    );
    let server = TestServer::start("krb5-kernel", vec![export], &extra);
    let dir = server.export_dir(1);
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o1777)).unwrap();
    let erin_file = dir.join("erin-file");
    fs::write(&erin_file, "erin's\n").unwrap();
    std::os::unix::fs::chown(&erin_file, Some(erin.uid), Some(erin.gid)).unwrap();
    let pattern_file = base.join("pattern");
    fs::write(&pattern_file, CANARY.repeat(2048)).unwrap();
    let pattern_md5 = digest(&pattern_file);
    let env_file = base.join("krb5-kernel.env");
    let relay = Relay::start(server.addr);

    for (vers, sec) in [("3", "krb5i"), ("4.2", "krb5p")] {
        fs::write(&env_file, format!("port={}\nvers={vers}\nexport={}\n", relay.port, server.export_path(1))).unwrap();
        relay.clear();
        let g = Guest::run(&server, &lab, &relay, vers, sec, &[&env_file, &pattern_file]);
        g.expect("mount_sec", sec);
        g.expect("alice_kinit", "ok");
        g.expect("alice_wrote", "ok");
        g.expect("alice_read", &pattern_md5);
        let file = dir.join(format!("alice-{vers}"));
        let meta = fs::metadata(&file).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (alice.uid, alice.gid), "alice's file is alice's on the server's disk");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(digest(&file), pattern_md5);
        g.expect("bob_kinit", "ok");
        g.expect_denied("bob_read");
        g.expect_denied("root_read");
        g.expect("root_wrote", "ok");
        assert_eq!(fs::metadata(dir.join(format!("root-{vers}"))).unwrap().uid(), ANON_UID, "root is anonymous");
        g.expect("sys_mount", "refused");
        let (to_server, to_client) = relay.seen(CANARY);
        if vers == "3" {
            g.expect("krb5_mount", "ok");
            g.expect("krb5_alice_read", &pattern_md5);
            g.expect_denied("krb5_bob_read");
            assert!(to_server, "krb5i checksums but does not hide: alice's bytes are on the wire");
            expect_carol_expires(&g, &dir, &carol);
            expect_foreign_realms_are_not_local(&g, &dir, &pattern_md5);
            eprintln!("keel stat after the v3 boot:\n{}", server_stat(&server));
        } else {
            g.expect("krb5i_mount", "ok");
            assert!(g.get("krb5i_alice_list").contains("alice-4.2"), "{}", g.output);
            // Owners travel as names: the guest's erin, not the server's id.
            g.expect("idmap_domain", "keel.test");
            g.expect("erin_owner", "erin:10005:erin");
            g.expect("alice_chgrp", "ok");
            assert_eq!(fs::metadata(&file).unwrap().gid(), alice.gid, "alice's group named by the guest");
            assert!(!to_server && !to_client, "krb5p: alice's bytes are nowhere on the wire in the clear");
        }
    }
    drop(relay);
    drop(server);
    drop(lab);
    drop(other);
    drop(notrust);
    let _ = fs::remove_dir_all(&base);
}

/// carol over the `sec=krb5` mount: her calls before her ticket expires
/// are hers; after, each is refused and none is served (her late file is
/// nowhere, as her or as the anonymous user); after a fresh kinit she
/// carries on on the same mount.
fn expect_carol_expires(g: &Guest, dir: &Path, carol: &SystemUser) {
    eprintln!(
        "carol after her ticket expired: read {:?}, create {:?}",
        g.get("carol_expired_read"),
        g.get("carol_expired_write")
    );
    g.expect("carol_kinit", "ok");
    g.expect("carol_wrote", "ok");
    g.expect("carol_read", "carol-early");
    g.expect("carol_expired", "yes");
    g.expect_refused("carol_expired_read");
    g.expect_refused("carol_expired_write");
    assert!(!dir.join("carol-late").exists(), "a call after carol's ticket expired was served:\n{}", g.output);
    g.expect("carol_rekinit", "ok");
    g.expect("carol_again_read", "carol-early");
    g.expect("carol_again_wrote", "ok");
    for name in ["carol", "carol-again"] {
        let meta = fs::metadata(dir.join(name)).unwrap();
        assert_eq!(meta.uid(), carol.uid, "{name} is carol's on the server's disk");
    }
}

/// `alice@OTHER.TEST` (a trusted realm) is nobody in particular here, not
/// the server's alice; `alice@NOTRUST.TEST` gets no ticket for the server
/// and nothing done; the server's alice is unaffected.
fn expect_foreign_realms_are_not_local(g: &Guest, dir: &Path, pattern_md5: &str) {
    eprintln!(
        "alice@OTHER.TEST: read {:?}, create {:?}; alice@NOTRUST.TEST: read {:?}, create {:?}",
        g.get("other_read"),
        g.get("other_wrote"),
        g.get("notrust_read"),
        g.get("notrust_wrote")
    );
    g.expect("other_kinit", "ok");
    g.expect("other_principal", "alice@OTHER.TEST");
    g.expect_denied("other_read");
    g.expect("other_wrote", "ok");
    let meta = fs::metadata(dir.join("other-realm")).unwrap();
    assert_eq!(meta.uid(), ANON_UID, "alice@OTHER.TEST creates as the anonymous user, not as alice");
    g.expect("notrust_kinit", "ok");
    g.expect("notrust_principal", "alice@NOTRUST.TEST");
    g.expect_denied("notrust_read");
    assert_ne!(g.get("notrust_wrote"), "ok", "{}", g.output);
    assert!(!dir.join("notrust-realm").exists(), "alice@NOTRUST.TEST created a file:\n{}", g.output);
    g.expect("alice_after_foreign", pattern_md5);
}

/// `keel stat` of the running server.
fn server_stat(server: &TestServer) -> String {
    let mut cmd = Command::new(keel_testkit::server::keel_bin());
    cmd.args(["stat", "--state-dir"]).arg(server.state_dir());
    keel_testkit::procs::run_timeout(&mut cmd, Duration::from_secs(20)).text()
}

//! A throwaway MIT Kerberos realm for the tests of this binary: a KDC
//! (Debian's `krb5-kdc`) on a free loopback port, with its database,
//! configuration and keytabs in a directory of its own. /etc/krb5.conf is
//! never read or touched: every command gets `KRB5_CONFIG` and
//! `KRB5_KDC_PROFILE`, and this process (the tests' GSS-API initiator and
//! acceptor) is pointed at the realm through its environment once, before
//! any GSS-API call.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use keel_testkit::procs::{accepts, free_port, run_ok, wait_for};

pub const REALM: &str = "KEEL.TEST";
/// The server's principal, a host-based service name for the client.
pub const SERVICE: &str = "nfs/localhost";
/// The user principals. `kgssuser` is also made a user of this machine by
/// the test that needs one ([`SystemUser`]).
pub const USERS: [&str; 5] = ["alice", "bob", "host/client1.keel.test", SYSTEM_USER, SHORT_LIVED];
/// A user whose tickets last [`SHORT_LIFE_SECONDS`].
pub const SHORT_LIVED: &str = "shortlived";
pub const SHORT_LIFE_SECONDS: u64 = 2;
/// MIT's acceptor keeps a context for the clock skew past its ticket's
/// end (5 minutes by default): one second here, all on one clock.
pub const CLOCK_SKEW_SECONDS: u64 = 1;
pub const SYSTEM_USER: &str = "kgssuser";
/// Services whose tickets' session keys are of one enctype (the
/// `session_enctypes` string attribute): aes128-cts-hmac-sha1-96 and
/// aes256-cts-hmac-sha384-192 (RFC 8009), where [`SERVICE`]'s are
/// aes256-cts-hmac-sha1-96 as MIT's defaults make them.
pub const AES128_SERVICE: &str = "nfs/aes128.keel.test";
pub const AES_SHA2_SERVICE: &str = "nfs/aes-sha2.keel.test";

pub struct Lab {
    pub dir: PathBuf,
}

static LAB: OnceLock<Lab> = OnceLock::new();

/// The realm, made by the first test that asks for it and kept until the
/// test binary exits (the KDC dies with it).
pub fn lab() -> &'static Lab {
    LAB.get_or_init(Lab::start)
}

fn missing_tools() -> Option<&'static str> {
    ["/usr/sbin/krb5kdc", "/usr/sbin/kdb5_util", "/usr/sbin/kadmin.local"]
        .into_iter()
        .find(|tool| !Path::new(tool).exists())
}

impl Lab {
    fn start() -> Lab {
        if let Some(tool) = missing_tools() {
            panic!("{tool} is missing: apt-get install krb5-kdc krb5-admin-server (scripts/test.sh installs them)");
        }
        remove_stale_labs();
        let dir = std::env::temp_dir().join(format!("{LAB_PREFIX}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        std::fs::write(
            dir.join("krb5.conf"),
            format!(
                "[libdefaults]\n default_realm = {REALM}\n clockskew = {CLOCK_SKEW_SECONDS}\n dns_lookup_kdc = false\n dns_lookup_realm = false\n \
                 rdns = false\n dns_canonicalize_hostname = false\n udp_preference_limit = 1\n\n\
                 [realms]\n {REALM} = {{\n  kdc = 127.0.0.1:{port}\n }}\n"
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("kdc.conf"),
            format!(
                "[kdcdefaults]\n kdc_ports = {port}\n kdc_tcp_listen = 127.0.0.1:{port}\n kdc_listen = 127.0.0.1:{port}\n\n\
                 [realms]\n {REALM} = {{\n  database_name = {d}/principal\n  key_stash_file = {d}/stash\n  \
                 acl_file = {d}/kadm5.acl\n  max_life = 10h 0m 0s\n }}\n\n[logging]\n kdc = FILE:{d}/kdc.log\n",
                d = dir.display()
            ),
        )
        .unwrap();
        let kadmin = |query: &str| {
            run_ok(lab_cmd(&dir, "/usr/sbin/kadmin.local").args(["-r", REALM, "-q", query]), Duration::from_secs(30));
        };
        run_ok(
            lab_cmd(&dir, "/usr/sbin/kdb5_util").args(["-r", REALM, "-P", "keel-test-master", "create", "-s"]),
            Duration::from_secs(60),
        );
        let server_keytab = dir.join("server.keytab");
        let client_keytab = dir.join("clients.keytab");
        kadmin(&format!("addprinc -randkey {SERVICE}"));
        kadmin(&format!("ktadd -k {} {SERVICE}", server_keytab.display()));
        for user in USERS {
            kadmin(&format!("addprinc -randkey {user}"));
            kadmin(&format!("ktadd -k {} {user}", client_keytab.display()));
        }
        kadmin(&format!("modprinc -maxlife \"{SHORT_LIFE_SECONDS} seconds\" {SHORT_LIVED}"));
        for (service, enctype) in
            [(AES128_SERVICE, "aes128-cts-hmac-sha1-96"), (AES_SHA2_SERVICE, "aes256-cts-hmac-sha384-192")]
        {
            kadmin(&format!("addprinc -randkey {service}"));
            kadmin(&format!("setstr {service} session_enctypes {enctype}"));
            kadmin(&format!("ktadd -k {} {service}", server_keytab.display()));
        }
        // The KDC runs from a thread that never ends and dies with this
        // process (setpriv's parent-death signal follows the thread that
        // started it).
        let kdc_dir = dir.clone();
        std::thread::spawn(move || {
            let mut kdc = lab_cmd(&kdc_dir, "setpriv")
                .args(["--pdeathsig", "KILL", "/usr/sbin/krb5kdc", "-n", "-r", REALM])
                .spawn()
                .expect("start krb5kdc");
            let _ = kdc.wait();
            loop {
                std::thread::park();
            }
        });
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        wait_for(Duration::from_secs(20), || accepts(addr).then_some(()))
            .unwrap_or_else(|| panic!("the KDC does not listen on {addr}"));
        // SAFETY: set once, while the lab is made under the OnceLock, before
        // this process makes any GSS-API call (the only reader of these
        // variables); no other thread of the tests reads the environment.
        unsafe {
            std::env::set_var("KRB5_CONFIG", dir.join("krb5.conf"));
            std::env::set_var("KRB5_KTNAME", &server_keytab);
            std::env::set_var("KRB5_CLIENT_KTNAME", &client_keytab);
            std::env::set_var("KRB5CCNAME", format!("DIR:{}", dir.join("ccache").display()));
        }
        std::fs::create_dir_all(dir.join("ccache")).unwrap();
        Lab { dir }
    }

    /// The service's key, for a server's `[server] keytab`.
    pub fn server_keytab(&self) -> PathBuf {
        self.dir.join("server.keytab")
    }
}

const LAB_PREFIX: &str = "keel-krb5-lab-";

/// The directories of labs whose test binary has exited: a static lives
/// until the process ends and is never dropped, so each run removes what
/// the ones before it left.
fn remove_stale_labs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(LAB_PREFIX).and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn lab_cmd(dir: &Path, program: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("KRB5_CONFIG", dir.join("krb5.conf")).env("KRB5_KDC_PROFILE", dir.join("kdc.conf"));
    cmd
}

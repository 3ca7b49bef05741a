use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use keel_exports::{Access, ClientOptions, ClientRule, HostMatch, SecFlavor, SecFlavors, Squash};

use super::*;

const ORIGIN: &str = "keel.toml";

/// Test DNS: a few fixed names, everything else does not resolve.
fn resolver(name: &str) -> Vec<IpAddr> {
    match name {
        "login01.cluster.example" => vec![ip("10.2.0.5")],
        "dual.cluster.example" => vec![ip("10.2.0.6"), ip("2001:db8::6")],
        _ => Vec::new(),
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str, prefix_len: u8) -> HostMatch {
    HostMatch::Net { addr: ip(s), prefix_len }
}

/// A directory under the system temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("keel-config-test-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// A subdirectory, created.
    fn dir(&self, name: &str) -> String {
        let p = self.0.join(name);
        std::fs::create_dir_all(&p).unwrap();
        p.to_str().unwrap().to_owned()
    }

    /// A regular file, created.
    fn file(&self, name: &str, contents: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, contents).unwrap();
        p.to_str().unwrap().to_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn parse_ok(text: &str) -> Config {
    match parse_with(text, ORIGIN, &resolver) {
        Ok(c) => c,
        Err(e) => panic!("unexpected error:\n{e}\n--- in ---\n{text}"),
    }
}

fn parse_err(text: &str) -> String {
    match parse_with(text, ORIGIN, &resolver) {
        Ok(c) => panic!("expected an error, got {c:#?}\n--- from ---\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// Asserts that `text` is rejected with a problem on `line` whose message
/// contains every one of `fragments`.
#[track_caller]
fn assert_problem(text: &str, line: usize, fragments: &[&str]) {
    let msg = parse_err(text);
    let prefix = format!("{ORIGIN}:{line}: ");
    let found = msg.lines().filter_map(|l| l.strip_prefix(&prefix)).any(|l| fragments.iter().all(|f| l.contains(f)));
    assert!(found, "no line `{prefix}...` containing {fragments:?} in:\n{msg}\n--- from ---\n{text}");
}

/// A minimal valid export of `/` (which exists everywhere), headed at line
/// `1 + lines before it`.
const SIMPLE_EXPORT: &str = "[[export]]\npath = \"/\"\nid = 1\nclients = [{ host = \"*\" }]\n";

#[test]
fn full_example_parses() {
    let tmp = TempDir::new();
    let home = tmp.dir("home");
    let scratch = tmp.dir("scratch");
    let text = format!(
        r#"# comment
[server]
listen = ["0.0.0.0:2049", "[::]:2049"]
mount_listen = ["10.0.0.1:20048"]
portmap = "register"
workers = 32
log_level = "debug"
state_dir = "/var/lib/keel-test/"
max_connections = 5000
max_requests_per_connection = 64
poll_spin_us = 0
fault_injection = true
max_inflight_mib = 512
max_inflight_mib_per_connection = 32
idle_timeout_seconds = 600
stall_timeout_seconds = 20
metrics_listen = "127.0.0.1:9049"
nsm_state_dir = "/shared/keel/nsm"
grace_seconds_max = 15
nfs4_lease_seconds = 30
max_locks_per_client = 100
nfs_versions = ["3", "4.2"]
nfs4_read_delegations = false
nfs4_write_delegations = true
nfs4_clients_per_address_max = 512

[[export]]
path = '{home}'
id = 1
fsid = 42
access = "rw"
sync = true
squash = "root_squash"
anonuid = 1000
anongid = 1001
secure = false

[[export.clients]]
host = "10.1.0.0/16"
access = "rw"
squash = "no_root_squash"

[[export.clients]]
host = "login01.cluster.example"
secure = true

[[export.clients]]
host = "2001:db8::/32"
sync = false
anonuid = 7
anongid = 8

[[export.clients]]
host = "*"
access = "ro"
squash = "all_squash"

[[export]]
path = '{scratch}'
id = 4294967295
clients = [{{ host = "192.0.2.7" }}]
"#
    );
    let config = parse_ok(&text);
    assert_eq!(
        config.server,
        ServerConfig {
            listen: vec!["0.0.0.0:2049".parse::<SocketAddr>().unwrap(), "[::]:2049".parse().unwrap()],
            mount_listen: vec!["10.0.0.1:20048".parse().unwrap()],
            portmap: PortmapMode::Register,
            workers: 32,
            log_level: LogLevel::Debug,
            state_dir: PathBuf::from("/var/lib/keel-test"),
            max_connections: 5000,
            max_requests_per_connection: 64,
            poll_spin: Duration::ZERO,
            fault_injection: true,
            max_inflight_bytes: 512 << 20,
            max_inflight_bytes_per_connection: 32 << 20,
            idle_timeout: std::time::Duration::from_secs(600),
            stall_timeout: std::time::Duration::from_secs(20),
            metrics_listen: Some("127.0.0.1:9049".parse().unwrap()),
            nsm_state_dir: Some(PathBuf::from("/shared/keel/nsm")),
            grace_max: std::time::Duration::from_secs(15),
            nfs4_lease: std::time::Duration::from_secs(30),
            max_locks_per_client: 100,
            keytab: PathBuf::from("/etc/krb5.keytab"),
            principal: None,
            principal_users: HashMap::new(),
            nfs_versions: NfsVersions { v3: true, v41: false, v42: true },
            nfs4_read_delegations: false,
            nfs4_write_delegations: true,
            nfs4_clients_per_address_max: 512,
            nfs4_idmap_domain: None,
        }
    );
    let export_wide = ClientOptions {
        access: Access::ReadWrite,
        sync: true,
        squash: Squash::Root,
        anonuid: 1000,
        anongid: 1001,
        secure: false,
        sec: SecFlavors::default(),
    };
    assert_eq!(
        config.exports,
        vec![
            ExportConfig {
                path: PathBuf::from(&home),
                id: 1,
                fsid: Some(42),
                clients: vec![
                    ClientRule {
                        host: net("10.1.0.0", 16),
                        options: ClientOptions { squash: Squash::None, ..export_wide },
                    },
                    ClientRule {
                        host: HostMatch::Host { name: "login01.cluster.example".into(), addrs: vec![ip("10.2.0.5")] },
                        options: ClientOptions { secure: true, ..export_wide },
                    },
                    ClientRule {
                        host: net("2001:db8::", 32),
                        options: ClientOptions { sync: false, anonuid: 7, anongid: 8, ..export_wide },
                    },
                    ClientRule {
                        host: HostMatch::Any,
                        options: ClientOptions { access: Access::ReadOnly, squash: Squash::All, ..export_wide },
                    },
                ],
                cache: keel_cache::CacheMode::Off,
                line: 27,
            },
            ExportConfig {
                path: PathBuf::from(&scratch),
                id: u32::MAX,
                fsid: None,
                clients: vec![ClientRule { host: net("192.0.2.7", 32), options: ClientOptions::default() }],
                cache: keel_cache::CacheMode::Off,
                line: 58,
            },
        ]
    );
    assert_eq!(config.warnings, Vec::<String>::new());
}

#[test]
fn defaults_when_server_table_is_absent() {
    let config = parse_ok(SIMPLE_EXPORT);
    assert_eq!(config.server, ServerConfig::default());
    let s = &config.server;
    assert_eq!(s.listen, vec!["0.0.0.0:2049".parse::<SocketAddr>().unwrap()]);
    assert!(s.mount_listen.is_empty());
    assert_eq!(s.portmap, PortmapMode::Auto);
    assert_eq!(s.workers, default_workers());
    assert!((16..=256).contains(&s.workers));
    assert_eq!(s.log_level, LogLevel::Info);
    assert_eq!(s.state_dir, Path::new("/var/lib/keel"));
    assert_eq!(s.max_connections, 1024);
    assert_eq!(s.max_requests_per_connection, 128);
    assert_eq!(s.poll_spin, Duration::from_micros(50));
    assert_eq!((s.max_inflight_bytes, s.max_inflight_bytes_per_connection), (192 << 20, 16 << 20));
    assert_eq!((s.idle_timeout.as_secs(), s.stall_timeout.as_secs()), (360, 60));
    assert_eq!(s.nfs_versions, NfsVersions { v3: true, v41: true, v42: true });
    assert!(s.nfs4_read_delegations, "read delegations are on unless turned off");
    assert!(s.nfs4_write_delegations, "write delegations are on unless turned off");

    let e = &config.exports[0];
    assert_eq!(e.path, Path::new("/"));
    assert_eq!(e.fsid, None);
    assert_eq!(e.line, 1);
    assert_eq!(e.clients, vec![ClientRule { host: HostMatch::Any, options: ClientOptions::default() }]);
}

#[test]
fn defaults_when_server_table_is_empty() {
    let config = parse_ok(&format!("[server]\n\n{SIMPLE_EXPORT}"));
    assert_eq!(config.server, ServerConfig::default());
    assert_eq!(config.exports[0].line, 3);
}

#[test]
fn client_options_default_to_exports5() {
    let config = parse_ok("[[export]]\npath = \"/\"\nid = 1\n[[export.clients]]\nhost = \"*\"\n");
    let o = config.exports[0].clients[0].options;
    assert_eq!(o.access, Access::ReadOnly);
    assert!(o.sync);
    assert_eq!(o.squash, Squash::Root);
    assert_eq!((o.anonuid, o.anongid), (65534, 65534));
    assert!(o.secure, "secure is the default, as in exports(5)");
}

#[test]
fn insecure_is_secure_false_in_either_table() {
    let text = r#"
[[export]]
path = "/"
id = 1
insecure = true

[[export.clients]]
host = "10.0.0.1"

[[export.clients]]
host = "10.0.0.2"
insecure = false

[[export.clients]]
host = "10.0.0.3"
secure = true
"#;
    let clients = parse_ok(text).exports.remove(0).clients;
    let secure: Vec<bool> = clients.iter().map(|c| c.options.secure).collect();
    assert_eq!(secure, [false, true, true]);

    let text = "[[export]]\npath = \"/\"\nid = 1\n[[export.clients]]\nhost = \"*\"\ninsecure = true\n";
    assert!(!parse_ok(text).exports[0].clients[0].options.secure);
}

#[test]
fn secure_and_insecure_may_agree_but_not_contradict() {
    let agree = "[[export]]\npath = \"/\"\nid = 1\nsecure = false\ninsecure = true\nclients = [{ host = \"*\" }]\n";
    assert!(!parse_ok(agree).exports[0].clients[0].options.secure);

    let text = r#"[[export]]
path = "/"
id = 1
secure = true
insecure = true
clients = [{ host = "*" }]
"#;
    assert_problem(text, 5, &["insecure = true contradicts secure = true at line 4"]);

    let text = r#"[[export]]
path = "/"
id = 1
[[export.clients]]
host = "*"
insecure = false
secure = false
"#;
    assert_problem(text, 6, &["insecure = false contradicts secure = false at line 7"]);
}

#[test]
fn client_overrides_export_wide_options() {
    let text = r#"
[[export]]
path = "/"
id = 1
access = "rw"
sync = false
squash = "all_squash"
anonuid = 1
anongid = 2
secure = true

[[export.clients]]
host = "10.0.0.1"
access = "ro"
sync = true
squash = "no_root_squash"
anonuid = 3
anongid = 4
secure = false

[[export.clients]]
host = "10.0.0.2"
"#;
    let clients = parse_ok(text).exports.remove(0).clients;
    assert_eq!(
        clients[0].options,
        ClientOptions {
            access: Access::ReadOnly,
            sync: true,
            squash: Squash::None,
            anonuid: 3,
            anongid: 4,
            secure: false,
            sec: SecFlavors::default(),
        }
    );
    assert_eq!(
        clients[1].options,
        ClientOptions {
            access: Access::ReadWrite,
            sync: false,
            squash: Squash::All,
            anonuid: 1,
            anongid: 2,
            secure: true,
            sec: SecFlavors::default(),
        }
    );
}

#[test]
fn inline_clients_equal_client_tables() {
    let inline = parse_ok(
        "[[export]]\npath = \"/\"\nid = 1\nclients = [{ host = \"10.1.0.0/16\", access = \"rw\" }, { host = \"*\" }]\n",
    );
    let tables = parse_ok(
        "[[export]]\npath = \"/\"\nid = 1\n[[export.clients]]\nhost = \"10.1.0.0/16\"\naccess = \"rw\"\n[[export.clients]]\nhost = \"*\"\n",
    );
    assert_eq!(inline.exports[0].clients, tables.exports[0].clients);
    assert_eq!(inline.exports[0].clients.len(), 2);
    assert_eq!(inline.exports[0].clients[0].options.access, Access::ReadWrite);
}

#[test]
fn inline_exports_work_too() {
    let config = parse_ok("export = [{ path = \"/\", id = 9, clients = [{ host = \"*\" }] }]\n");
    assert_eq!(config.exports[0].id, 9);
    assert_eq!(config.exports[0].line, 1);
}

#[test]
fn host_forms() {
    let hosts = |h: &str| {
        let text = format!("[[export]]\npath = \"/\"\nid = 1\nclients = [{{ host = \"{h}\" }}]\n");
        parse_ok(&text).exports.remove(0).clients.remove(0).host
    };
    assert_eq!(hosts("*"), HostMatch::Any);
    assert_eq!(hosts("10.1.2.3"), net("10.1.2.3", 32));
    assert_eq!(hosts("10.1.0.0/16"), net("10.1.0.0", 16));
    // Host bits are cleared.
    assert_eq!(hosts("10.1.2.3/16"), net("10.1.0.0", 16));
    assert_eq!(hosts("0.0.0.0/0"), net("0.0.0.0", 0));
    assert_eq!(hosts("10.1.2.3/32"), net("10.1.2.3", 32));
    assert_eq!(hosts("10.1.0.0/255.255.0.0"), net("10.1.0.0", 16));
    assert_eq!(hosts("2001:db8::7"), net("2001:db8::7", 128));
    assert_eq!(hosts("2001:db8:1:2::/32"), net("2001:db8::", 32));
    assert_eq!(hosts("::/0"), net("::", 0));
    // IPv4-mapped IPv6 is IPv4.
    assert_eq!(hosts("::ffff:10.1.2.3"), net("10.1.2.3", 32));
    assert_eq!(hosts("::ffff:10.1.0.0/112"), net("10.1.0.0", 16));
    assert_eq!(
        hosts("dual.cluster.example"),
        HostMatch::Host { name: "dual.cluster.example".into(), addrs: vec![ip("10.2.0.6"), ip("2001:db8::6")] }
    );
}

#[test]
fn every_option_value_is_accepted() {
    for (value, mode) in [
        ("auto", PortmapMode::Auto),
        ("serve", PortmapMode::Serve),
        ("register", PortmapMode::Register),
        ("off", PortmapMode::Off),
    ] {
        let c = parse_ok(&format!("[server]\nportmap = \"{value}\"\n{SIMPLE_EXPORT}"));
        assert_eq!(c.server.portmap, mode);
        assert_eq!(mode.to_string(), value);
    }
    for (value, level) in [
        ("error", LogLevel::Error),
        ("warn", LogLevel::Warn),
        ("info", LogLevel::Info),
        ("debug", LogLevel::Debug),
        ("trace", LogLevel::Trace),
    ] {
        let c = parse_ok(&format!("[server]\nlog_level = \"{value}\"\n{SIMPLE_EXPORT}"));
        assert_eq!(c.server.log_level, level);
        assert_eq!(level.as_str(), value);
    }
    for (value, squash) in
        [("root_squash", Squash::Root), ("all_squash", Squash::All), ("no_root_squash", Squash::None)]
    {
        let c = parse_ok(&format!(
            "[[export]]\npath = \"/\"\nid = 1\nsquash = \"{value}\"\nclients = [{{ host = \"*\" }}]\n"
        ));
        assert_eq!(c.exports[0].clients[0].options.squash, squash);
    }
    let c = parse_ok(
        "[server]\nworkers = 4096\nmax_connections = 1000000\nmax_requests_per_connection = 65536\n\
         [[export]]\npath = \"/\"\nid = 1\nanonuid = 4294967295\nanongid = 0\nfsid = 0\n\
         clients = [{ host = \"*\" }]\n",
    );
    assert_eq!(c.server.workers, 4096);
    assert_eq!(c.server.max_connections, 1_000_000);
    assert_eq!(c.server.max_requests_per_connection, 65536);
    let o = c.exports[0].clients[0].options;
    assert_eq!((o.anonuid, o.anongid), (u32::MAX, 0));
    assert_eq!(c.exports[0].fsid, Some(0));
    let c = parse_ok(&format!("[server]\nworkers = 1\n{SIMPLE_EXPORT}"));
    assert_eq!(c.server.workers, 1);
}

#[test]
fn export_path_is_normalised() {
    let tmp = TempDir::new();
    let dir = tmp.dir("a");
    let text = format!("[[export]]\npath = '{dir}//./'\nid = 1\nclients = [{{ host = \"*\" }}]\n");
    assert_eq!(parse_ok(&text).exports[0].path, PathBuf::from(dir));
}

// ---- errors -------------------------------------------------------------

#[test]
fn unknown_key_at_top_level() {
    assert_problem(&format!("\nfoo = 1\n{SIMPLE_EXPORT}"), 2, &["unknown field `foo`", "`server`"]);
    assert_problem("[[exports]]\npath = \"/\"\n", 1, &["unknown field `exports`", "[[export]]"]);
}

#[test]
fn unknown_key_in_server() {
    assert_problem(
        &format!("[server]\nworkers = 4\nwrokers = 5\n{SIMPLE_EXPORT}"),
        3,
        &["unknown field `wrokers`", "`workers`"],
    );
}

#[test]
fn unknown_key_in_export() {
    let text = "[[export]]\npath = \"/\"\nid = 1\n\nacess = \"rw\"\nclients = [{ host = \"*\" }]\n";
    assert_problem(text, 5, &["unknown field `acess`", "`access`"]);
    let text = "[[export]]\npath = \"/\"\nid = 1\nasync = true\nclients = [{ host = \"*\" }]\n";
    assert_problem(text, 4, &["unknown field `async`", "`sync = false`"]);
}

#[test]
fn unknown_key_in_client() {
    let text = "[[export]]\npath = \"/\"\nid = 1\n[[export.clients]]\nhost = \"*\"\nsquas = \"all_squash\"\n";
    assert_problem(text, 6, &["unknown field `squas`", "`squash`"]);
    let text = "[[export]]\npath = \"/\"\nid = 1\nclients = [\n  { host = \"*\" },\n  { host = \"10.0.0.1\", rw = true },\n]\n";
    assert_problem(text, 6, &["unknown field `rw`", "access = \"rw\""]);
}

#[test]
fn wrong_type() {
    assert_problem(
        &format!("[server]\nworkers = \"many\"\n{SIMPLE_EXPORT}"),
        2,
        &["invalid type: string \"many\", expected an integer"],
    );
    assert_problem(
        "[[export]]\npath = \"/\"\nid = 1\nsync = \"yes\"\nclients = [{ host = \"*\" }]\n",
        4,
        &["invalid type", "boolean"],
    );
    assert_problem(&format!("[server]\nlisten = \"0.0.0.0:2049\"\n{SIMPLE_EXPORT}"), 2, &["square brackets"]);
    assert_problem("[export]\npath = \"/\"\nid = 1\n", 1, &["[[export]]"]);
}

#[test]
fn toml_errors_show_the_line() {
    let msg = parse_err(&format!("[server]\nworkers = \"many\"\n{SIMPLE_EXPORT}"));
    let mut lines = msg.lines();
    assert!(lines.next().unwrap().starts_with("keel.toml:2: "));
    assert_eq!(lines.next().unwrap().trim(), "|");
    assert_eq!(lines.next().unwrap(), "2 | workers = \"many\"");
    assert_eq!(lines.next().unwrap(), "  |           ^^^^^^");
}

#[test]
fn out_of_range_numbers() {
    assert_problem(
        &format!("[server]\nworkers = 0\n{SIMPLE_EXPORT}"),
        2,
        &["workers = 0 is out of range", "from 1 to 4096"],
    );
    assert_problem(&format!("[server]\nworkers = 4097\n{SIMPLE_EXPORT}"), 2, &["workers = 4097"]);
    assert_problem(&format!("[server]\nworkers = -3\n{SIMPLE_EXPORT}"), 2, &["workers = -3"]);
    assert_problem(&format!("[server]\n\nmax_connections = 0\n{SIMPLE_EXPORT}"), 3, &["max_connections = 0"]);
    assert_problem(
        &format!("[server]\nmax_requests_per_connection = 65537\n{SIMPLE_EXPORT}"),
        2,
        &["max_requests_per_connection = 65537", "65536"],
    );
    assert_problem(
        &format!("[server]\npoll_spin_us = 1001\n{SIMPLE_EXPORT}"),
        2,
        &["poll_spin_us = 1001 is out of range", "from 0 to 1000"],
    );
    assert_problem(
        &format!("[server]\nmax_inflight_mib_per_connection = 7\n{SIMPLE_EXPORT}"),
        2,
        &["max_inflight_mib_per_connection = 7 is out of range", "from 8 to 4096"],
    );
    assert_problem(
        &format!("[server]\nmax_inflight_mib = 64\nmax_inflight_mib_per_connection = 128\n{SIMPLE_EXPORT}"),
        3,
        &["max_inflight_mib_per_connection (128) is more than max_inflight_mib (64)"],
    );
    assert_problem(
        &format!("[server]\nmax_inflight_mib = 9\n{SIMPLE_EXPORT}"),
        2,
        &["is more than max_inflight_mib (9)"],
    );
    assert_problem(&format!("[server]\nidle_timeout_seconds = 0\n{SIMPLE_EXPORT}"), 2, &["idle_timeout_seconds = 0"]);
    assert_problem(
        &format!("[server]\nstall_timeout_seconds = 86401\n{SIMPLE_EXPORT}"),
        2,
        &["stall_timeout_seconds = 86401 is out of range", "from 1 to 86400"],
    );
    assert_problem(
        &format!("[server]\nnfs4_lease_seconds = 9\n{SIMPLE_EXPORT}"),
        2,
        &["nfs4_lease_seconds = 9 is out of range", "from 10 to 3600"],
    );
    assert_problem(
        &format!("[server]\nnfs4_clients_per_address_max = 1025\n{SIMPLE_EXPORT}"),
        2,
        &["nfs4_clients_per_address_max = 1025 is out of range", "from 1 to 1024"],
    );
    let text = "[[export]]\npath = \"/\"\nid = 1\nanonuid = -1\nclients = [{ host = \"*\", anongid = 4294967296 }]\n";
    assert_problem(text, 4, &["anonuid = -1 is out of range"]);
    assert_problem(text, 5, &["anongid = 4294967296 is out of range"]);
    assert_problem("[[export]]\npath = \"/\"\nid = 1\nfsid = -5\nclients = [{ host = \"*\" }]\n", 4, &["fsid = -5"]);
    assert_problem(&format!("[server]\nworkers = 1.5\n{SIMPLE_EXPORT}"), 2, &["expected an integer"]);
}

#[test]
fn bad_choice_values() {
    let text = "[[export]]\npath = \"/\"\nid = 1\naccess = \"read-write\"\nclients = [{ host = \"*\" }]\n";
    assert_problem(text, 4, &["invalid access \"read-write\"", "\"rw\" or \"ro\""]);
    let text = "[[export]]\npath = \"/\"\nid = 1\n[[export.clients]]\nhost = \"*\"\nsquash = \"root\"\n";
    assert_problem(text, 6, &["invalid squash \"root\"", "\"root_squash\", \"all_squash\" or \"no_root_squash\""]);
    assert_problem(&format!("[server]\nportmap = \"yes\"\n{SIMPLE_EXPORT}"), 2, &["invalid portmap \"yes\""]);
    assert_problem(&format!("[server]\nlog_level = \"verbose\"\n{SIMPLE_EXPORT}"), 2, &["invalid log_level"]);
}

#[test]
fn missing_id() {
    assert_problem("\n[[export]]\npath = \"/\"\nclients = [{ host = \"*\" }]\n", 2, &["export has no `id`"]);
}

#[test]
fn missing_path_and_host() {
    assert_problem("[[export]]\nid = 1\nclients = [{ host = \"*\" }]\n", 1, &["export has no `path`"]);
    assert_problem(
        "[[export]]\npath = \"/\"\nid = 1\n\n[[export.clients]]\naccess = \"rw\"\n",
        5,
        &["client entry has no `host`"],
    );
}

#[test]
fn id_zero() {
    assert_problem(
        "[[export]]\npath = \"/\"\nid = 0\nclients = [{ host = \"*\" }]\n",
        3,
        &["id = 0 is out of range", "from 1 to 4294967295"],
    );
    assert_problem(
        "[[export]]\npath = \"/\"\nid = 4294967296\nclients = [{ host = \"*\" }]\n",
        3,
        &["id = 4294967296 is out of range"],
    );
}

#[test]
fn duplicate_id_names_both_lines() {
    let tmp = TempDir::new();
    let (a, b) = (tmp.dir("a"), tmp.dir("b"));
    let text = format!(
        "[[export]]\npath = '{a}'\nid = 7\nclients = [{{ host = \"*\" }}]\n\n\
         [[export]]\npath = '{b}'\nid = 7\nclients = [{{ host = \"*\" }}]\n"
    );
    assert_problem(&text, 8, &["export id 7 is already used by the export at line 1"]);
}

#[test]
fn duplicate_path() {
    let tmp = TempDir::new();
    let a = tmp.dir("a");
    let text = format!(
        "[[export]]\npath = '{a}'\nid = 1\nclients = [{{ host = \"*\" }}]\n\
         [[export]]\npath = '{a}/'\nid = 2\nclients = [{{ host = \"*\" }}]\n"
    );
    assert_problem(&text, 6, &["is already exported at line 1"]);
}

#[cfg(unix)]
#[test]
fn same_directory_through_a_symlink() {
    let tmp = TempDir::new();
    let a = tmp.dir("a");
    let link = tmp.0.join("link");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let link = link.to_str().unwrap();
    let text = format!(
        "[[export]]\npath = '{a}'\nid = 1\nclients = [{{ host = \"*\" }}]\n\
         [[export]]\npath = '{link}'\nid = 2\nclients = [{{ host = \"*\" }}]\n"
    );
    assert_problem(&text, 6, &["is the same directory as", "exported at line 1"]);
}

#[test]
fn relative_path() {
    assert_problem(
        "[[export]]\npath = \"srv/home\"\nid = 1\nclients = [{ host = \"*\" }]\n",
        2,
        &["export path \"srv/home\" is not an absolute path"],
    );
    assert_problem("[[export]]\npath = \"\"\nid = 1\nclients = [{ host = \"*\" }]\n", 2, &["is not an absolute path"]);
    assert_problem(
        "[[export]]\npath = \"/srv/../etc\"\nid = 1\nclients = [{ host = \"*\" }]\n",
        2,
        &["must not contain \"..\""],
    );
}

#[test]
fn nonexistent_path() {
    let tmp = TempDir::new();
    let missing = tmp.0.join("missing");
    let missing = missing.to_str().unwrap();
    let text = format!("\n\n[[export]]\npath = '{missing}'\nid = 1\nclients = [{{ host = \"*\" }}]\n");
    assert_problem(&text, 4, &[&format!("export path {missing:?} does not exist")]);
}

#[test]
fn path_that_is_a_file() {
    let tmp = TempDir::new();
    let file = tmp.file("f", "x");
    let text = format!("[[export]]\npath = '{file}'\nid = 1\nclients = [{{ host = \"*\" }}]\n");
    assert_problem(&text, 2, &["is not a directory"]);
}

#[test]
fn no_clients() {
    assert_problem("[[export]]\npath = \"/\"\nid = 1\n", 1, &["export \"/\" has no clients"]);
    assert_problem("[[export]]\npath = \"/\"\nid = 1\n\nclients = []\n", 5, &["has no clients"]);
}

#[test]
fn no_exports() {
    let msg = parse_err("[server]\nworkers = 4\n");
    assert!(msg.starts_with("keel.toml: no exports"), "{msg}");
    let msg = parse_err("");
    assert!(msg.starts_with("keel.toml: no exports"), "{msg}");
    assert!(msg.contains("export = []"), "{msg}");
    // On purpose: valid, with a warning (the packaged configuration).
    let config = parse_ok("export = []\n\n[server]\nworkers = 4\n");
    assert!(config.exports.is_empty());
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(config.warnings[0].starts_with("keel.toml:1: export = []: nothing is exported"), "{:?}", config.warnings);
}

#[test]
fn bad_cidr() {
    let client = |host: &str| format!("[[export]]\npath = \"/\"\nid = 1\n[[export.clients]]\nhost = \"{host}\"\n");
    assert_problem(&client("10.0.0.0/33"), 5, &["invalid host \"10.0.0.0/33\": prefix length 33 is longer than 32"]);
    assert_problem(&client("2001:db8::/129"), 5, &["prefix length 129 is longer than 128"]);
    assert_problem(&client("10.0.0.0/99999999999999999999"), 5, &["is longer than 32"]);
    assert_problem(&client("10.0.0.0/"), 5, &["prefix length after the '/' is missing"]);
    assert_problem(&client("10.0.0.0/abc"), 5, &["prefix length \"abc\" is not a number"]);
    assert_problem(&client("10.0.0.0/-1"), 5, &["is not a number"]);
    assert_problem(&client("10.0.0.0/255.0.255.0"), 5, &["netmask 255.0.255.0 is not contiguous"]);
    assert_problem(&client("10.0.0/8"), 5, &["\"10.0.0\" before the '/' is not an IP address"]);
    assert_problem(&client("nodes.example/24"), 5, &["is not an IP address"]);
}

#[test]
fn bad_ip() {
    let client = |host: &str| format!("[[export]]\npath = \"/\"\nid = 1\n\n[[export.clients]]\nhost = \"{host}\"\n");
    assert_problem(&client("10.0.0.256"), 6, &["invalid host \"10.0.0.256\": not a valid IPv4 address"]);
    assert_problem(&client("10.1"), 6, &["not a valid IPv4 address"]);
    assert_problem(&client("2001:db8:::1"), 6, &["not a valid IPv6 address"]);
    assert_problem(&client("fe80::1%eth0"), 6, &["not a valid IPv6 address"]);
    assert_problem(&client(""), 6, &["the host is empty"]);
    assert_problem(&client("node*.cluster"), 6, &["wildcards"]);
    assert_problem(&client("@compute"), 6, &["netgroups"]);
    assert_problem(&client("10.0.0.1 10.0.0.2"), 6, &["its own [[export.clients]] entry"]);
    assert_problem(&client("bad!name"), 6, &["'!' cannot appear in a host name"]);
    assert_problem(&client("-x.example"), 6, &["cannot begin or end with '-'"]);
    assert_problem(&client("a..example"), 6, &["empty part"]);
}

#[test]
fn bad_listen_addresses() {
    assert_problem(
        &format!("[server]\nlisten = [\n  \"0.0.0.0:2049\",\n  \"0.0.0.0\",\n]\n{SIMPLE_EXPORT}"),
        4,
        &["invalid listen address \"0.0.0.0\"", "IP address and a port"],
    );
    assert_problem(
        &format!("[server]\nmount_listen = [\"localhost:20048\"]\n{SIMPLE_EXPORT}"),
        2,
        &["invalid mount_listen address \"localhost:20048\""],
    );
    assert_problem(&format!("[server]\nlisten = []\n{SIMPLE_EXPORT}"), 2, &["listen is empty"]);
    assert_problem(
        &format!("[server]\nlisten = [\"0.0.0.0:2049\"]\nmount_listen = [\"0.0.0.0:2049\"]\n{SIMPLE_EXPORT}"),
        3,
        &["mount_listen address 0.0.0.0:2049 is already given at line 2"],
    );
}

#[test]
fn relative_state_dir() {
    assert_problem(
        &format!("[server]\nstate_dir = \"var/lib/keel\"\n{SIMPLE_EXPORT}"),
        2,
        &["state_dir \"var/lib/keel\" is not an absolute path"],
    );
}

#[test]
fn unresolvable_host_is_a_warning_and_dropped() {
    let text = "[[export]]\npath = \"/\"\nid = 1\n\
                [[export.clients]]\nhost = \"nosuch.example\"\naccess = \"rw\"\n\
                [[export.clients]]\nhost = \"login01.cluster.example\"\n";
    let config = parse_ok(text);
    assert_eq!(
        config.warnings,
        vec!["keel.toml:5: host \"nosuch.example\" does not resolve; this client entry is ignored"]
    );
    assert_eq!(
        config.exports[0].clients,
        vec![ClientRule {
            host: HostMatch::Host { name: "login01.cluster.example".into(), addrs: vec![ip("10.2.0.5")] },
            options: ClientOptions::default(),
        }]
    );
}

#[test]
fn unresolvable_sole_host_is_an_error() {
    let text = "\n[[export]]\npath = \"/\"\nid = 1\nclients = [{ host = \"nosuch.example\" }]\n";
    assert_problem(text, 2, &["export \"/\" has no usable clients: \"nosuch.example\" (line 5) does not resolve"]);
    let text = "[[export]]\npath = \"/\"\nid = 1\n[[export.clients]]\nhost = \"a.example\"\n\
                [[export.clients]]\nhost = \"b.example\"\n";
    assert_problem(text, 1, &["\"a.example\" (line 5), \"b.example\" (line 7) do not resolve"]);
}

#[test]
fn shadowed_client_entries_are_warned_about() {
    let text = "[[export]]\npath = \"/\"\nid = 1\nclients = [\n\
                { host = \"10.0.0.0/8\" },\n\
                { host = \"10.1.0.0/16\", access = \"rw\" },\n\
                { host = \"*\" },\n\
                { host = \"192.0.2.1\" },\n\
                ]\n";
    let config = parse_ok(text);
    assert_eq!(config.exports[0].clients.len(), 4, "shadowed entries are kept");
    assert_eq!(config.warnings.len(), 2, "{:#?}", config.warnings);
    assert!(config.warnings[0].starts_with("keel.toml:6: client entry \"10.1.0.0/16\" never applies"));
    assert!(config.warnings[0].contains("\"10.0.0.0/8\" at line 5"));
    assert!(config.warnings[1].starts_with("keel.toml:8: client entry \"192.0.2.1\""));
    assert!(config.warnings[1].contains("\"*\" at line 7"));
    // A narrower entry first is fine.
    let text = "[[export]]\npath = \"/\"\nid = 1\nclients = [{ host = \"10.1.0.0/16\" }, { host = \"10.0.0.0/8\" }, { host = \"2001:db8::/32\" }]\n";
    assert!(parse_ok(text).warnings.is_empty());
}

#[test]
fn toml_syntax_error() {
    assert_problem(
        &format!("[server]\nstate_dir = \"/var/lib/keel\nworkers = 4\n{SIMPLE_EXPORT}"),
        2,
        &["invalid basic string", "closing quote missing"],
    );
    assert_problem(&format!("{SIMPLE_EXPORT}[server\n"), 5, &[]);
    assert_problem(&format!("[server]\nworkers = 1\n[server]\nworkers = 2\n{SIMPLE_EXPORT}"), 3, &["duplicate"]);
}

#[test]
fn all_problems_are_reported_in_line_order() {
    let text = "[server]\nworkers = 0\nstate_dir = \"x\"\n\
                [[export]]\npath = \"rel\"\nid = 0\nclients = [{ host = \"10.0.0.0/40\" }]\n";
    let msg = parse_err(text);
    let lines: Vec<&str> = msg.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(lines, ["keel.toml:2:", "keel.toml:3:", "keel.toml:5:", "keel.toml:6:", "keel.toml:7:"], "{msg}");
    let err = parse_with(text, ORIGIN, &resolver).unwrap_err();
    assert_eq!(err.problems().len(), 5);
    assert_eq!(err.problems()[0].line, Some(2));
}

#[test]
fn load_reads_the_file() {
    let tmp = TempDir::new();
    let dir = tmp.dir("export");
    let file = tmp
        .file("keel.toml", &format!("[[export]]\npath = '{dir}'\nid = 1\nclients = [{{ host = \"10.0.0.0/8\" }}]\n"));
    let config = load(Path::new(&file)).unwrap();
    assert_eq!(config.exports[0].path, PathBuf::from(&dir));

    let bad = tmp.file("bad.toml", &format!("[server]\nworkers = 0\n{SIMPLE_EXPORT}"));
    let msg = load(Path::new(&bad)).unwrap_err().to_string();
    assert!(msg.starts_with(&format!("{bad}:2: workers = 0")), "{msg}");

    let not_utf8 = tmp.0.join("latin1.toml");
    std::fs::write(&not_utf8, b"# ok\n# caf\xe9\n").unwrap();
    let msg = load(&not_utf8).unwrap_err().to_string();
    assert!(msg.ends_with("latin1.toml:2: the file is not valid UTF-8 text"), "{msg}");
}

#[test]
fn load_missing_file() {
    let tmp = TempDir::new();
    let missing = tmp.0.join("nope.toml");
    let err = load(&missing).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    // The message says why; no source says it again (anyhow's `{:#}`
    // would print it twice).
    assert!(std::error::Error::source(&err).is_none());
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("{}: cannot read the configuration file: ", missing.display())), "{msg}");
    assert!(msg.ends_with("No such file or directory (os error 2)"), "{msg}");
    let msg = load(&tmp.0).unwrap_err().to_string();
    assert!(msg.contains("cannot read the configuration file"), "{msg}");
}

#[test]
fn parse_and_the_system_resolver() {
    // No name lookups here, so no dependence on DNS or /etc/hosts.
    let config = parse("[[export]]\npath = \"/\"\nid = 1\nclients = [{ host = \"10.0.0.0/8\" }]\n", ORIGIN).unwrap();
    assert_eq!(config.exports[0].clients[0].host, net("10.0.0.0", 8));
    // getaddrinfo answers numeric addresses itself; duplicates (one per
    // socket type) are removed.
    assert_eq!(resolve_host("127.0.0.1"), vec![ip("127.0.0.1")]);
    assert_eq!(resolve_host("::1"), vec![ip("::1")]);
}

#[test]
fn example_file_parses() {
    let text = include_str!("../../../../keel.example.toml");
    let config = match parse_inner(text, "keel.example.toml", &resolver, false) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    assert_eq!(config.server.listen, vec![DEFAULT_LISTEN]);
    assert_eq!(config.server.portmap, PortmapMode::Auto);
    assert_eq!(config.server.log_level, LogLevel::Info);
    assert_eq!(config.server.state_dir, Path::new(DEFAULT_STATE_DIR));
    let paths: Vec<_> = config.exports.iter().map(|e| (e.path.to_str().unwrap(), e.id)).collect();
    assert_eq!(paths, [("/srv/home", 1), ("/srv/scratch", 2), ("/srv/apps", 3)]);
    let home = &config.exports[0];
    assert_eq!(home.clients.len(), 3);
    assert_eq!(home.clients[0].options.squash, Squash::None);
    assert_eq!(home.clients[1].options.access, Access::ReadWrite);
    assert_eq!(home.clients[2].host, HostMatch::Any);
    assert_eq!(home.clients[2].options.access, Access::ReadOnly);
    assert!(!config.exports[1].clients[0].options.sync);
    assert_eq!(config.exports[2].clients[0].options.squash, Squash::All);

    // Every key the file format has appears in the example, at least
    // commented out.
    for key in [
        "listen",
        "mount_listen",
        "portmap",
        "workers",
        "log_level",
        "state_dir",
        "max_connections",
        "max_requests_per_connection",
        "poll_spin_us",
        "max_inflight_mib",
        "max_inflight_mib_per_connection",
        "idle_timeout_seconds",
        "stall_timeout_seconds",
        "metrics_listen",
        "path",
        "id",
        "fsid",
        "access",
        "sync",
        "squash",
        "anonuid",
        "anongid",
        "secure",
        "insecure",
        "clients",
        "host",
        "devices",
        "log_mib",
        "sequential_cutoff_mib",
        "read_fill_kib",
        "cache",
    ] {
        assert!(text.contains(&format!("\n{key} =")) || text.contains(&format!("\n# {key} =")), "{key}");
    }
}

#[test]
fn no_panics_on_odd_input() {
    for text in [
        "\u{feff}[server]\nworkers = 0\n",
        "\r\n[server]\r\nworkers = \"x\r\n",
        "[[export]]\npath = \"/\"\nid = 1\nclients = [{ host = \"\u{e9}\u{e9}/\u{e9}\" }]\n",
        "[[export]]\npath = \"/\\u0000\"\nid = 1\nclients = [{ host = \"*\" }]\n",
        "[[export]]\npath = \"/\"\nid = 9223372036854775807\nclients = [{ host = \"*\" }]\n",
        "[[export]]\npath = \"/\"\nid = 1\nclients = [{ host = \"::ffff:1.2.3.4/200\" }]\n",
        "[[export.clients]]\nhost = \"*\"\n",
        "x",
        "=",
        "[",
        "\"",
        "a = \"\u{e9}",
        "[server]\nlisten = [1]\n",
        "export = 3\n",
        "export = [3]\n",
        "[[export]]\nclients = \"*\"\n",
    ] {
        let _ = parse_with(text, ORIGIN, &resolver).map_err(|e| e.to_string());
    }
}

#[test]
fn metrics_listen_is_an_address_of_its_own() {
    assert_problem(
        &format!("[server]\nlisten = [\"0.0.0.0:2049\"]\nmetrics_listen = \"0.0.0.0:2049\"\n{SIMPLE_EXPORT}"),
        3,
        &["metrics_listen address 0.0.0.0:2049 is also an NFS or MOUNT address"],
    );
    assert_problem(
        &format!("[server]\nmetrics_listen = \"localhost:9049\"\n{SIMPLE_EXPORT}"),
        2,
        &["invalid metrics_listen address \"localhost:9049\""],
    );
}

#[test]
fn ha_refuses_an_async_export_naming_it_and_warns_of_a_wildcard_listen() {
    let text = "[ha]\nenabled = true\n\n[[export]]\npath = \"/\"\nid = 1\nclients = [{ host = \"10.0.0.0/8\" }, { host = \"*\", sync = false }]\n";
    assert_problem(text, 4, &["export \"/\" is async for *", "[ha]", "lose writes"]);
    // The same export is fine without [ha], and sync exports under it.
    assert!(!parse_ok(&text.replace("enabled = true", "enabled = false")).ha);
    let sync = parse_ok(&text.replace(", sync = false", ""));
    assert!(sync.ha);
    assert!(sync.warnings.iter().any(|w| w.contains("wildcard")), "{:?}", sync.warnings);
    let pinned = parse_ok(&format!("[server]\nlisten = [\"10.1.0.100:2049\"]\n{}", text.replace(", sync = false", "")));
    assert!(pinned.warnings.is_empty(), "{:?}", pinned.warnings);
    assert_problem("[ha]\nenable = true\n", 2, &["unknown field `enable`"]);
}

#[test]
fn the_read_fill_window_is_a_power_of_two_of_kib() {
    let c = parse_ok(&format!("[cache]\nread_fill_kib = 256\n{SIMPLE_EXPORT}"));
    assert_eq!(c.cache.read_fill_bytes, 256 << 10);
    assert_eq!(parse_ok(SIMPLE_EXPORT).cache.read_fill_bytes, 64 << 10);
    assert_problem(
        &format!("[cache]\nread_fill_kib = 48\n{SIMPLE_EXPORT}"),
        2,
        &["read_fill_kib = 48", "power of two"],
    );
    assert_problem(&format!("[cache]\nread_fill_kib = 2048\n{SIMPLE_EXPORT}"), 2, &["read_fill_kib"]);
}

/// The configuration file's man page, written by hand.
const MAN_PAGE: &str = include_str!("../../../../contrib/man/keel.toml.5");

/// The keys the table that `header` opens accepts, as the parser itself
/// lists them when it meets a key it does not know.
fn accepted_keys(header: &str) -> Vec<String> {
    let text = format!("{header}keel_no_such_key = 1\n");
    let err = toml::from_str::<raw::RawConfig>(&text).expect_err("an unknown key is refused");
    let message = err.message();
    let (_, expected) = message.split_once("expected").unwrap_or_else(|| panic!("{message}"));
    expected.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// The keys the man page describes in the section titled `title`: the
/// `.B KEY` line after each `.TP`.
fn documented_keys(title: &str) -> Vec<String> {
    let heading = format!(".SH \"{title}\"");
    let section = MAN_PAGE.split_once(&heading).unwrap_or_else(|| panic!("keel.toml.5 has no section {title}")).1;
    let section = section.split("\n.SH ").next().unwrap();
    let lines: Vec<&str> = section.lines().collect();
    lines
        .windows(2)
        .filter(|w| w[0] == ".TP")
        .map(|w| w[1].strip_prefix(".B ").unwrap_or_else(|| panic!("{title}: .TP not followed by .B KEY: {w:?}")))
        .map(str::to_owned)
        .collect()
}

/// keel.toml(5) describes every key the parser accepts, in its table's
/// section, and no key it refuses: the page cannot drift from the parser.
#[test]
fn the_man_page_describes_every_key_the_parser_accepts_and_no_other() {
    let tables = [
        ("[server]", "[server]\n"),
        ("[cache]", "[cache]\n"),
        ("[ha]", "[ha]\n"),
        ("[[export]]", "[[export]]\n"),
        ("[[export.clients]]", "[[export]]\n[[export.clients]]\n"),
    ];
    for (title, header) in tables {
        let mut accepted = accepted_keys(header);
        let mut documented = documented_keys(title);
        assert!(!accepted.is_empty(), "{title}");
        accepted.sort();
        documented.sort();
        assert_eq!(documented, accepted, "keel.toml.5's {title} against the parser");
    }
    // The top level holds the tables.
    for key in accepted_keys("") {
        assert!(
            tables.iter().any(|(title, _)| title.trim_matches(['[', ']']) == key),
            "top-level key {key:?} has no section in keel.toml.5"
        );
    }
}

#[test]
fn sec_lists_flavors_in_order_and_a_client_entry_overrides_it() {
    let tmp = TempDir::new();
    let dir = tmp.dir("export");
    let text = format!(
        r#"[server]
keytab = "/etc/keel/nfs.keytab"
principal = "nfs/server.example.org@EXAMPLE.ORG"

[[export]]
path = "{}"
id = 1
sec = ["krb5p", "krb5i", "sys"]
[[export.clients]]
host = "10.0.0.1"
sec = ["krb5"]
[[export.clients]]
host = "*"
"#,
        dir
    );
    let config = parse_ok(&text);
    assert_eq!(config.server.keytab, PathBuf::from("/etc/keel/nfs.keytab"));
    assert_eq!(config.server.principal.as_deref(), Some("nfs/server.example.org@EXAMPLE.ORG"));
    let clients = &config.exports[0].clients;
    assert_eq!(clients[0].options.sec.as_slice(), &[SecFlavor::Krb5]);
    assert_eq!(clients[1].options.sec.as_slice(), &[SecFlavor::Krb5p, SecFlavor::Krb5i, SecFlavor::Sys]);
    assert_eq!(
        describe_options(clients),
        "10.0.0.1(ro,sync,root_squash,secure,sec=krb5) *(ro,sync,root_squash,secure,sec=krb5p:krb5i:sys)"
    );
}

#[test]
fn bad_sec_lists_keytabs_and_principals_are_refused_with_their_line() {
    let tmp = TempDir::new();
    let dir = tmp.dir("export");
    let export =
        |sec: &str| format!("[[export]]\npath = \"{dir}\"\nid = 1\nsec = {sec}\n[[export.clients]]\nhost = \"*\"\n");
    for (sec, message) in [
        (r#"["krb5", "spkm3"]"#, "sec \"spkm3\" is not a security flavor Keel serves"),
        (r#"["sys", "sys"]"#, "sec lists \"sys\" twice"),
        ("[]", "sec is empty"),
    ] {
        assert_problem(&export(sec), 4, &[message]);
    }
    let err = parse_err("[server]\nkeytab = \"relative.keytab\"\n");
    assert!(err.contains("keytab \"relative.keytab\" is not an absolute path"), "{err}");
    let err = parse_err("[server]\nprincipal = \"nfs\"\n");
    assert!(err.contains("principal \"nfs\" is not a service principal"), "{err}");
}

#[test]
fn principal_users_map_whole_principals_to_user_names_and_refuse_anything_else() {
    let config = parse_ok(
        "export = []\n[server]\nprincipal_users = { \"host/node1.example.org@EXAMPLE.ORG\" = \"batch\", \"alice@PARTNER.ORG\" = \"alice\" }\n",
    );
    let users = &config.server.principal_users;
    assert_eq!(users.len(), 2);
    assert_eq!(users["host/node1.example.org@EXAMPLE.ORG"], "batch");
    assert_eq!(users["alice@PARTNER.ORG"], "alice");
    for (entry, message) in [
        (r#"{ "host/node1.example.org" = "batch" }"#, "\"host/node1.example.org\" is not a whole principal"),
        (r#"{ "@EXAMPLE.ORG" = "batch" }"#, "\"@EXAMPLE.ORG\" is not a whole principal"),
        (r#"{ "alice@EXAMPLE.ORG" = "" }"#, "\"\" (for alice@EXAMPLE.ORG) is not a local user name"),
        (r#"{ "alice@EXAMPLE.ORG" = "alice@EXAMPLE.ORG" }"#, "is not a local user name"),
    ] {
        let err = parse_err(&format!("[server]\nprincipal_users = {entry}\n"));
        assert!(err.contains(message), "{entry}: {err}");
    }
}

#[test]
fn nfs4_idmap_domain_is_a_domain_or_refused() {
    let config = parse_ok("export = []\n[server]\nnfs4_idmap_domain = \"example.org\"\n");
    assert_eq!(config.server.nfs4_idmap_domain.as_deref(), Some("example.org"));
    assert_eq!(parse_ok("export = []\n").server.nfs4_idmap_domain, None, "numbers only unless given");
    for bad in ["", "alice@example.org", "example org"] {
        let err = parse_err(&format!("[server]\nnfs4_idmap_domain = \"{bad}\"\n"));
        assert!(err.contains(&format!("nfs4_idmap_domain {bad:?} is not a domain")), "{bad}: {err}");
    }
}

#[test]
fn nfs_versions_list_what_is_served_and_refuse_anything_else() {
    // Every version by default, under [ha] too (its lab's NFSv4.1 cases).
    assert_eq!(parse_ok(SIMPLE_EXPORT).server.nfs_versions, NfsVersions { v3: true, v41: true, v42: true });
    let ha = "[ha]\nenabled = true\n[[export]]\npath = \"/\"\nid = 1\nclients = [{ host = \"10.0.0.0/8\" }]\n";
    assert_eq!(parse_ok(ha).server.nfs_versions, NfsVersions { v3: true, v41: true, v42: true });
    let listed = format!("[server]\nnfs_versions = [\"3\", \"4.2\"]\n{ha}");
    assert_eq!(parse_ok(&listed).server.nfs_versions, NfsVersions { v3: true, v41: false, v42: true });
    let config = parse_ok(&format!("[server]\nnfs_versions = [\"3\", \"4.1\", \"4.2\"]\n{SIMPLE_EXPORT}"));
    assert_eq!(config.server.nfs_versions, NfsVersions { v3: true, v41: true, v42: true });
    let config = parse_ok(&format!("[server]\nnfs_versions = [\"4.2\"]\n{SIMPLE_EXPORT}"));
    assert_eq!(config.server.nfs_versions, NfsVersions { v3: false, v41: false, v42: true });
    assert_problem(
        &format!("[server]\nnfs_versions = [\"3\", \"4.0\"]\n{SIMPLE_EXPORT}"),
        2,
        &["invalid nfs_versions entry \"4.0\"", "expected \"3\", \"4.1\" or \"4.2\"", "NFSv4.0 is not served"],
    );
    assert_problem(
        &format!("[server]\nnfs_versions = [\"v4\"]\n{SIMPLE_EXPORT}"),
        2,
        &["invalid nfs_versions entry \"v4\""],
    );
    assert_problem(&format!("[server]\nnfs_versions = []\n{SIMPLE_EXPORT}"), 2, &["nfs_versions is empty"]);
}

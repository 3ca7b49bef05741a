//! The configuration file (`keel.toml`): server settings and the exports,
//! the equivalent of /etc/exports. `keel.example.toml` at the top of the
//! repository documents every key.
//!
//! Everything is checked when the file is loaded, and an invalid file is
//! rejected as a whole, with every problem found reported as
//! `FILE:LINE: problem`. The one exception is a client host name that does
//! not resolve: like exportfs, Keel skips that client entry and reports a
//! warning ([`Config::warnings`]).

mod error;
mod host;
mod raw;
#[cfg(test)]
mod tests;

pub use error::{ConfigError, Problem};

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use keel_cache::CacheMode;
use keel_exports::{Access, ClientOptions, ClientRule, HostMatch, SecFlavor, SecFlavors, Squash};
use toml::Spanned;

use host::HostSpec;
use raw::{Int, RawCache, RawClient, RawConfig, RawExport, RawOptions, RawServer};

/// A loaded, fully checked configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub server: ServerConfig,
    pub exports: Vec<ExportConfig>,
    pub cache: CacheSettings,
    /// `[ha] enabled`: one of a Pacemaker-managed pair that share
    /// `state_dir` and the exports' file system (see `crate::ha`).
    pub ha: bool,
    /// Things the administrator should know about that did not stop the
    /// configuration from loading, each `FILE:LINE: message`. Log them.
    pub warnings: Vec<String>,
}

/// The `[server]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// NFS and MOUNT (TCP).
    pub listen: Vec<SocketAddr>,
    /// Extra MOUNT-only listeners; MOUNT is always served on `listen` too.
    pub mount_listen: Vec<SocketAddr>,
    pub portmap: PortmapMode,
    /// File-system worker threads (knfsd's thread count).
    pub workers: usize,
    pub log_level: LogLevel,
    /// Absolute.
    pub state_dir: PathBuf,
    pub max_connections: usize,
    /// In-flight requests per connection.
    pub max_requests_per_connection: usize,
    /// How long an idle worker polls for the next call before it sleeps,
    /// while every other worker sleeps (0: never).
    pub poll_spin: Duration,
    /// Whether the administration socket may arm storage faults (tests).
    pub fault_injection: bool,
    /// Bytes that calls in flight and their unwritten replies may hold,
    /// across all connections.
    pub max_inflight_bytes: usize,
    /// The same, per connection; at most `max_inflight_bytes`.
    pub max_inflight_bytes_per_connection: usize,
    /// A connection with no call for this long is closed (knfsd: 6 minutes).
    pub idle_timeout: Duration,
    /// A connection whose replies wait this long without the client
    /// reading any of them is closed.
    pub stall_timeout: Duration,
    /// Where Prometheus metrics are served over HTTP (`GET /metrics`);
    /// `None` (the default): not served.
    pub metrics_listen: Option<SocketAddr>,
    /// Where the NSM state (state number, monitored clients) lives;
    /// `None`: `nsm` under `state_dir`. Absolute.
    pub nsm_state_dir: Option<PathBuf>,
    /// The longest grace period after a restart (0: none).
    pub grace_max: Duration,
    /// How long an NFSv4.1 client's lease lasts without a SEQUENCE, and
    /// how long a recalled delegation may stay unreturned.
    pub nfs4_lease: Duration,
    /// Locks held and waited for, per client host.
    pub max_locks_per_client: usize,
    /// The keytab holding the server's Kerberos key, read at start when
    /// some export accepts a Kerberos flavor (`sec`).
    pub keytab: PathBuf,
    /// The server's principal, `service/host` or `service/host@REALM`;
    /// `None`: `nfs/` and this host's name.
    pub principal: Option<String>,
    /// Principals (full, `name@REALM` or `service/host@REALM`) given a
    /// local user by name, as idmapd.conf's [Static]: a machine's
    /// credential or another realm's user acts as that user.
    pub principal_users: HashMap<String, String>,
    /// The NFS versions served (nfs.conf's `vers3`, `vers4.1`, `vers4.2`).
    pub nfs_versions: NfsVersions,
    /// Whether NFSv4.1 clients are offered read delegations (recalled
    /// when an NFSv3 or another v4 client writes, changes the file's
    /// attributes or names, or a local process opens the file for writing
    /// or changes its attributes or names: each is backed by a file lease
    /// and an inotify watch). On by default, as knfsd's.
    pub nfs4_read_delegations: bool,
    /// Whether NFSv4.1 clients are offered write delegations (a writer
    /// alone on a file the server created: recalled by any access by
    /// anyone else, each backed by a write lease and an inotify watch).
    /// On by default, as knfsd's: bench/nfs4.sh measured no cost to a
    /// workload creating many files beyond its spread (docs/benchmarks.md).
    /// See keel.toml(5).
    pub nfs4_write_delegations: bool,
    /// NFSv4.1 client IDs one address may hold (a bound against a client
    /// that makes IDs without end); more for hosts behind one NAT address.
    pub nfs4_clients_per_address_max: usize,
    /// The domain of NFSv4 owner names (idmapd.conf's `Domain`): a client's
    /// `user@DOMAIN` or `group@DOMAIN` is that user or group of the system's
    /// database. `None`: owners are numbers only.
    pub nfs4_idmap_domain: Option<String>,
}

/// The NFS versions served. NFSv4.0 is not among them: it has another
/// state model (SETCLIENTID, OPEN_CONFIRM), and every client that speaks
/// NFSv4 speaks 4.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NfsVersions {
    pub v3: bool,
    pub v41: bool,
    pub v42: bool,
}

/// As the configuration lists them: `["3", "4.1", "4.2"]`.
impl fmt::Display for NfsVersions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let listed: Vec<String> = [(self.v3, "3"), (self.v41, "4.1"), (self.v42, "4.2")]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, v)| format!("{v:?}"))
            .collect();
        write!(f, "[{}]", listed.join(", "))
    }
}

impl Default for NfsVersions {
    /// Every version served, as knfsd's: a client that asks for none gets
    /// NFSv4.2.
    fn default() -> Self {
        NfsVersions { v3: true, v41: true, v42: true }
    }
}

/// The `[cache]` table: the SSD cache tier's devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    /// Block devices or files on a fast file system; absolute, distinct.
    /// The write-back log is mirrored on the first two.
    pub devices: Vec<PathBuf>,
    /// The log's size on each device; `None`: what the cache decides.
    pub log_bytes: Option<u64>,
    /// A sequential write stream longer than this goes to the back end.
    pub sequential_cutoff: u64,
    /// The window a read-cache miss brings in while the cache has room.
    pub read_fill_bytes: u64,
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            devices: Vec::new(),
            log_bytes: None,
            sequential_cutoff: 4 << 20,
            read_fill_bytes: keel_cache::readcache::FILL_BYTES_DEFAULT,
        }
    }
}

/// How Keel makes its ports known to clients (portmapper / rpcbind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortmapMode {
    /// Serve port 111 if it is free, else register with the running rpcbind.
    Auto,
    /// Serve port 111 (fail if it is taken).
    Serve,
    /// Register with the running rpcbind (fail if there is none).
    Register,
    /// Neither: clients must be given the ports in their mount options.
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

/// One `[[export]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportConfig {
    /// Absolute and lexically normalised (no `.`, no repeated or trailing
    /// `/`); existed and was a directory when the file was loaded.
    pub path: PathBuf,
    /// Unique across exports, never 0.
    pub id: u32,
    /// exports(5) `fsid=NUM`; `None`: derived from the file system's UUID.
    pub fsid: Option<u64>,
    /// At least one; the first rule that matches a client applies.
    pub clients: Vec<ClientRule>,
    /// How the export uses the cache tier (`off` without one).
    pub cache: CacheMode,
    /// 1-based line of the export's table header, for later messages; 0
    /// for an export that comes from no file (`keel serve DIR`).
    pub line: usize,
}

impl ExportConfig {
    /// The line of the export's table, if it comes from a file.
    pub fn table_line(&self) -> Option<usize> {
        (self.line > 0).then_some(self.line)
    }
}

pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 2049);
pub const DEFAULT_STATE_DIR: &str = "/var/lib/keel";
/// MIT Kerberos's default keytab, where knfsd's rpc.svcgssd and gssproxy
/// look too.
pub const DEFAULT_KEYTAB: &str = "/etc/krb5.keytab";
pub const WORKERS_MAX: usize = 4096;
pub const MAX_CONNECTIONS_MAX: usize = 1_000_000;
pub const MAX_REQUESTS_PER_CONNECTION_MAX: usize = 65536;
pub const POLL_SPIN_US_MAX: usize = 1000;
const MIB: usize = 1 << 20;
/// A connection must be able to hold its largest call: a 1 MiB READ or
/// WRITE, or a MOUNT DUMP reply (4.3 MiB), with room for a few more.
pub const MAX_INFLIGHT_MIB_PER_CONNECTION_MIN: usize = 8;
pub const MAX_INFLIGHT_MIB_PER_CONNECTION_MAX: usize = 4096;
pub const MAX_INFLIGHT_MIB_MAX: usize = 1 << 20;
pub const IDLE_TIMEOUT_SECONDS_MAX: usize = 7 * 24 * 3600;
pub const STALL_TIMEOUT_SECONDS_MAX: usize = 24 * 3600;
pub const GRACE_SECONDS_MAX_MAX: i64 = 3600;
pub const MAX_LOCKS_PER_CLIENT_MAX: usize = 1_000_000;
/// The log must hold a few of the largest records (1 MiB each).
pub const CACHE_LOG_MIB_MIN: usize = 16;
pub const CACHE_LOG_MIB_MAX: usize = 1 << 24;
pub const SEQUENTIAL_CUTOFF_MIB_MAX: usize = 1 << 20;
/// MNTPATHLEN: a longer path cannot be named in a MOUNT request.
const MAX_EXPORT_PATH_LEN: usize = 1024;

/// The default worker count: 16 per CPU, at least 16 and at most 256.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_mul(16).clamp(16, 256)
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: vec![DEFAULT_LISTEN],
            mount_listen: Vec::new(),
            portmap: PortmapMode::Auto,
            workers: default_workers(),
            log_level: LogLevel::Info,
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            max_connections: 1024,
            max_requests_per_connection: 128,
            poll_spin: Duration::from_micros(50),
            fault_injection: false,
            // 16 MiB: eight 1 MiB READs in flight per connection with room;
            // 192 MiB overall: twelve connections at their cap.
            max_inflight_bytes: 192 * MIB,
            max_inflight_bytes_per_connection: 16 * MIB,
            idle_timeout: Duration::from_secs(360),
            stall_timeout: Duration::from_secs(60),
            metrics_listen: None,
            nsm_state_dir: None,
            grace_max: Duration::from_secs(90),
            nfs4_lease: keel_nfs4_state::LEASE_DEFAULT,
            max_locks_per_client: 4096,
            keytab: PathBuf::from(DEFAULT_KEYTAB),
            principal: None,
            principal_users: HashMap::new(),
            nfs_versions: NfsVersions::default(),
            nfs4_read_delegations: true,
            nfs4_write_delegations: true,
            nfs4_clients_per_address_max: keel_nfs4_state::Limits::default().clients.per_address,
            nfs4_idmap_domain: None,
        }
    }
}

const PORTMAP_MODES: &[(&str, PortmapMode)] = &[
    ("auto", PortmapMode::Auto),
    ("serve", PortmapMode::Serve),
    ("register", PortmapMode::Register),
    ("off", PortmapMode::Off),
];

const LOG_LEVELS: &[(&str, LogLevel)] = &[
    ("error", LogLevel::Error),
    ("warn", LogLevel::Warn),
    ("info", LogLevel::Info),
    ("debug", LogLevel::Debug),
    ("trace", LogLevel::Trace),
];

const ACCESS: &[(&str, Access)] = &[("rw", Access::ReadWrite), ("ro", Access::ReadOnly)];

const SQUASH: &[(&str, Squash)] =
    &[("root_squash", Squash::Root), ("all_squash", Squash::All), ("no_root_squash", Squash::None)];

fn name_of<T: PartialEq>(table: &[(&'static str, T)], value: &T) -> &'static str {
    table.iter().find(|(_, v)| v == value).map_or("?", |(name, _)| name)
}

impl PortmapMode {
    /// The name used in the configuration file.
    pub fn as_str(self) -> &'static str {
        name_of(PORTMAP_MODES, &self)
    }
}

impl LogLevel {
    /// The name used in the configuration file (and by `tracing` filters).
    pub fn as_str(self) -> &'static str {
        name_of(LOG_LEVELS, &self)
    }
}

impl fmt::Display for PortmapMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Each client rule with its main options, as `keel serve` and reloads
/// print them: `HOST(rw,sync,no_root_squash,secure,sec=sys) ...`.
pub fn describe_options(rules: &[ClientRule]) -> String {
    rules
        .iter()
        .map(|r| {
            let o = &r.options;
            let access = if o.access == Access::ReadWrite { "rw" } else { "ro" };
            let sync = if o.sync { "sync" } else { "async" };
            let squash = match o.squash {
                Squash::None => "no_root_squash",
                Squash::Root => "root_squash",
                Squash::All => "all_squash",
            };
            let secure = if o.secure { "secure" } else { "insecure" };
            format!("{}({access},{sync},{squash},{secure},sec={})", r.host, sec_list(o))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every option of a client entry, as `exportfs -v` lists them.
pub fn option_list(o: &ClientOptions) -> String {
    let access = if o.access == Access::ReadWrite { "rw" } else { "ro" };
    let sync = if o.sync { "sync" } else { "async" };
    let squash = match o.squash {
        Squash::None => "no_root_squash",
        Squash::Root => "root_squash",
        Squash::All => "all_squash",
    };
    let secure = if o.secure { "secure" } else { "insecure" };
    format!("{access},{sync},{squash},{secure},sec={},anonuid={},anongid={}", sec_list(o), o.anonuid, o.anongid)
}

/// exports(5)'s `sec=` value: the flavors joined with colons.
fn sec_list(o: &ClientOptions) -> String {
    o.sec.as_slice().iter().map(|f| f.name()).collect::<Vec<_>>().join(":")
}

/// Reads, parses and checks the configuration file at `path`. Host names
/// are resolved with the system resolver; export paths must exist.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let bytes = std::fs::read(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    let origin = path.display().to_string();
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let line = e.as_bytes()[..valid].iter().filter(|&&b| b == b'\n').count() + 1;
            return Err(ConfigError::Invalid {
                origin,
                problems: vec![Problem {
                    line: Some(line),
                    message: "the file is not valid UTF-8 text".into(),
                    snippet: None,
                }],
            });
        }
    };
    parse(&text, &origin)
}

/// Parses and checks configuration `text`; `origin` (normally the file
/// name) begins every message. Host names are resolved with the system
/// resolver; export paths must exist.
/// The state directory a configuration file names, without validating
/// the rest (the `keel` command finds the administration socket with it,
/// also when the file has a problem that a reload is to report): from the
/// parsed `[server]` table, or, if the file does not parse, from its
/// `state_dir = "..."` line; the default if it names none.
pub fn state_dir_of(path: &Path) -> Result<PathBuf, ConfigError> {
    let text = std::fs::read(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    let text = String::from_utf8_lossy(&text);
    let named = match toml::from_str::<toml::Table>(&text) {
        Ok(table) => table.get("server").and_then(|s| s.get("state_dir")).and_then(|d| d.as_str()).map(str::to_owned),
        Err(_) => text.lines().find_map(|line| {
            let (key, value) = line.split_once('=')?;
            (key.trim() == "state_dir").then(|| value.trim().trim_matches(|c| c == '"' || c == '\'').to_owned())
        }),
    };
    Ok(named.map_or_else(|| PathBuf::from(DEFAULT_STATE_DIR), PathBuf::from))
}

pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
    parse_with(text, origin, &resolve_host)
}

/// [`parse`] with another resolver for client host names (which returns no
/// addresses for a name that does not resolve).
pub fn parse_with(text: &str, origin: &str, resolver: &dyn Fn(&str) -> Vec<IpAddr>) -> Result<Config, ConfigError> {
    parse_inner(text, origin, resolver, true)
}

/// The system resolver: every address `name` has, without duplicates;
/// none if it does not resolve.
pub fn resolve_host(name: &str) -> Vec<IpAddr> {
    let mut addrs = Vec::new();
    if let Ok(found) = (name, 0u16).to_socket_addrs() {
        for a in found {
            if !addrs.contains(&a.ip()) {
                addrs.push(a.ip());
            }
        }
    }
    addrs
}

/// `check_paths: false` skips the checks that export paths exist and are
/// directories (for checking a file meant for another machine).
fn parse_inner(
    text: &str,
    origin: &str,
    resolver: &dyn Fn(&str) -> Vec<IpAddr>,
    check_paths: bool,
) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(text)
        .map_err(|e| ConfigError::Invalid { origin: origin.to_owned(), problems: vec![error::from_toml(text, &e)] })?;

    let mut cx = Checker {
        text,
        origin,
        resolver,
        resolved: HashMap::new(),
        check_paths,
        problems: Vec::new(),
        warnings: Vec::new(),
    };
    let server = cx.server(raw.server.as_ref());
    let cache = cx.cache(raw.cache.as_ref());
    let exports = cx.exports(raw.export.as_ref(), &cache);
    let ha = raw.ha.as_ref().is_some_and(|h| h.get_ref().enabled.unwrap_or(false));
    if ha {
        cx.ha_exports(&exports);
        if server.listen.iter().any(|a| a.ip().is_unspecified()) {
            cx.warnings.push(format!(
                "{origin}: [ha] enabled but listen has a wildcard address: clients must mount the service \
                 address (the floating IP), which moves at failover; listen on it alone to make that sure"
            ));
        }
    }

    if cx.problems.is_empty() {
        Ok(Config { server, exports, cache, ha, warnings: cx.warnings })
    } else {
        // Stable: problems on the same line keep the order they were found.
        cx.problems.sort_by_key(|p| p.line);
        Err(ConfigError::Invalid { origin: origin.to_owned(), problems: cx.problems })
    }
}

/// Checks the raw configuration, collecting every problem rather than
/// stopping at the first.
struct Checker<'a> {
    text: &'a str,
    origin: &'a str,
    resolver: &'a dyn Fn(&str) -> Vec<IpAddr>,
    resolved: HashMap<String, Vec<IpAddr>>,
    check_paths: bool,
    problems: Vec<Problem>,
    warnings: Vec<String>,
}

/// What became of one client entry.
enum Client {
    Rule(ClientRule),
    /// The host name (and its line) did not resolve; the entry is skipped.
    Unresolved(String, usize),
    /// Invalid; a problem has been recorded.
    Invalid,
}

impl Checker<'_> {
    fn line(&self, span: &Range<usize>) -> usize {
        error::line_of(self.text, span.start)
    }

    fn error(&mut self, span: &Range<usize>, message: impl Into<String>) {
        let line = self.line(span);
        self.problems.push(Problem { line: Some(line), message: message.into(), snippet: None });
    }

    fn warn(&mut self, span: &Range<usize>, message: impl fmt::Display) {
        let line = self.line(span);
        self.warnings.push(format!("{}:{line}: {message}", self.origin));
    }

    /// `value` if it is in `lo..=hi`.
    fn int(&mut self, key: &str, value: &Spanned<Int>, lo: i64, hi: i64) -> Option<i64> {
        let n = value.get_ref().0;
        if (lo..=hi).contains(&n) {
            Some(n)
        } else {
            self.error(&value.span(), format!("{key} = {n} is out of range: it must be from {lo} to {hi}"));
            None
        }
    }

    fn usize(&mut self, key: &str, value: &Spanned<Int>, max: usize) -> Option<usize> {
        let hi = i64::try_from(max).unwrap_or(i64::MAX);
        self.int(key, value, 1, hi).and_then(|n| usize::try_from(n).ok())
    }

    fn usize_from(&mut self, key: &str, value: &Spanned<Int>, min: usize, max: usize) -> Option<usize> {
        let lo = i64::try_from(min).unwrap_or(i64::MAX);
        let hi = i64::try_from(max).unwrap_or(i64::MAX);
        self.int(key, value, lo, hi).and_then(|n| usize::try_from(n).ok())
    }

    fn u32(&mut self, key: &str, value: &Spanned<Int>, lo: u32) -> Option<u32> {
        self.int(key, value, i64::from(lo), i64::from(u32::MAX)).and_then(|n| u32::try_from(n).ok())
    }

    /// One of the names in `table`.
    fn choice<T: Copy>(&mut self, key: &str, value: &Spanned<String>, table: &[(&str, T)]) -> Option<T> {
        let s = value.get_ref();
        if let Some((_, t)) = table.iter().find(|(name, _)| name == s) {
            return Some(*t);
        }
        let mut expected = String::new();
        for (i, (name, _)) in table.iter().enumerate() {
            if i > 0 {
                expected.push_str(if i + 1 == table.len() { " or " } else { ", " });
            }
            expected.push_str(&format!("{name:?}"));
        }
        self.error(&value.span(), format!("invalid {key} {s:?}: expected {expected}"));
        None
    }

    fn server(&mut self, raw: Option<&RawServer>) -> ServerConfig {
        let mut s = ServerConfig::default();
        let Some(raw) = raw else { return s };

        let listen = raw.listen.as_ref().map(|l| self.socket_addrs("listen", l));
        let mount_listen = raw.mount_listen.as_ref().map(|l| self.socket_addrs("mount_listen", l));
        if let Some(l) = raw.listen.as_ref().filter(|l| l.get_ref().is_empty()) {
            self.error(&l.span(), "listen is empty: NFS needs at least one address, e.g. [\"0.0.0.0:2049\"]");
        }
        // The same address twice would fail to bind, the second time.
        let mut seen: Vec<(SocketAddr, usize)> = Vec::new();
        for (key, addrs) in [("listen", &listen), ("mount_listen", &mount_listen)] {
            for (addr, span) in addrs.iter().flatten() {
                if let Some((_, line)) = seen.iter().find(|(a, _)| a == addr) {
                    let msg = format!("{key} address {addr} is already given at line {line}");
                    self.error(span, msg);
                } else {
                    seen.push((*addr, self.line(span)));
                }
            }
        }
        if let Some(v) = &raw.metrics_listen {
            match v.get_ref().parse::<SocketAddr>() {
                Ok(a) if seen.iter().any(|(s, _)| *s == a) => {
                    self.error(&v.span(), format!("metrics_listen address {a} is also an NFS or MOUNT address"));
                }
                Ok(a) => s.metrics_listen = Some(a),
                Err(_) => {
                    let msg = format!(
                        "invalid metrics_listen address {:?}: expected an IP address and a port, \
                         e.g. \"127.0.0.1:9049\"",
                        v.get_ref()
                    );
                    self.error(&v.span(), msg);
                }
            }
        }
        if let Some(addrs) = listen {
            s.listen = addrs.into_iter().map(|(a, _)| a).collect();
        }
        if let Some(addrs) = mount_listen {
            s.mount_listen = addrs.into_iter().map(|(a, _)| a).collect();
        }

        if let Some(v) = &raw.portmap {
            s.portmap = self.choice("portmap", v, PORTMAP_MODES).unwrap_or(s.portmap);
        }
        if let Some(v) = &raw.workers {
            s.workers = self.usize("workers", v, WORKERS_MAX).unwrap_or(s.workers);
        }
        if let Some(v) = &raw.log_level {
            s.log_level = self.choice("log_level", v, LOG_LEVELS).unwrap_or(s.log_level);
        }
        if let Some(v) = &raw.state_dir {
            let dir = Path::new(v.get_ref());
            if dir.is_absolute() && !v.get_ref().contains('\0') {
                s.state_dir = dir.components().collect();
            } else {
                let msg = format!("state_dir {:?} is not an absolute path", v.get_ref());
                self.error(&v.span(), msg);
            }
        }
        if let Some(v) = &raw.max_connections {
            s.max_connections = self.usize("max_connections", v, MAX_CONNECTIONS_MAX).unwrap_or(s.max_connections);
        }
        if let Some(v) = &raw.max_requests_per_connection {
            s.max_requests_per_connection = self
                .usize("max_requests_per_connection", v, MAX_REQUESTS_PER_CONNECTION_MAX)
                .unwrap_or(s.max_requests_per_connection);
        }
        if let Some(v) = &raw.poll_spin_us {
            let us = self.usize_from("poll_spin_us", v, 0, POLL_SPIN_US_MAX);
            s.poll_spin = us.map_or(s.poll_spin, |us| Duration::from_micros(us as u64));
        }
        if let Some(v) = raw.fault_injection {
            s.fault_injection = v;
        }
        if let Some(v) = &raw.nfs4_idmap_domain {
            let d = v.get_ref();
            let valid = !d.is_empty() && !d.contains(|c: char| c.is_whitespace() || c == '@' || c == '/');
            if valid {
                s.nfs4_idmap_domain = Some(d.clone());
            } else {
                let msg = format!("nfs4_idmap_domain {d:?} is not a domain: give a name such as \"example.org\"");
                self.error(&v.span(), msg);
            }
        }
        if let Some(v) = raw.nfs4_read_delegations {
            s.nfs4_read_delegations = v;
        }
        if let Some(v) = raw.nfs4_write_delegations {
            s.nfs4_write_delegations = v;
        }
        if let Some(v) = &raw.nfs4_clients_per_address_max {
            // One address holds a quarter of the clients at most (keel-exports' claims).
            let most = keel_nfs4_state::Limits::default().clients.total / 4;
            let n = self.usize("nfs4_clients_per_address_max", v, most);
            s.nfs4_clients_per_address_max = n.unwrap_or(s.nfs4_clients_per_address_max);
        }
        if let Some(v) = &raw.max_inflight_mib {
            let mib = self.usize_from("max_inflight_mib", v, MAX_INFLIGHT_MIB_PER_CONNECTION_MIN, MAX_INFLIGHT_MIB_MAX);
            s.max_inflight_bytes = mib.map_or(s.max_inflight_bytes, |n| n * MIB);
        }
        if let Some(v) = &raw.max_inflight_mib_per_connection {
            let mib = self.usize_from(
                "max_inflight_mib_per_connection",
                v,
                MAX_INFLIGHT_MIB_PER_CONNECTION_MIN,
                MAX_INFLIGHT_MIB_PER_CONNECTION_MAX,
            );
            s.max_inflight_bytes_per_connection = mib.map_or(s.max_inflight_bytes_per_connection, |n| n * MIB);
        }
        if s.max_inflight_bytes_per_connection > s.max_inflight_bytes {
            let span = raw.max_inflight_mib_per_connection.as_ref().or(raw.max_inflight_mib.as_ref()).map(|v| v.span());
            let msg = format!(
                "max_inflight_mib_per_connection ({}) is more than max_inflight_mib ({})",
                s.max_inflight_bytes_per_connection / MIB,
                s.max_inflight_bytes / MIB
            );
            self.error(&span.unwrap_or(0..0), msg);
        }
        if let Some(v) = &raw.idle_timeout_seconds {
            let secs = self.usize("idle_timeout_seconds", v, IDLE_TIMEOUT_SECONDS_MAX);
            s.idle_timeout = secs.map_or(s.idle_timeout, |n| Duration::from_secs(n as u64));
        }
        if let Some(v) = &raw.stall_timeout_seconds {
            let secs = self.usize("stall_timeout_seconds", v, STALL_TIMEOUT_SECONDS_MAX);
            s.stall_timeout = secs.map_or(s.stall_timeout, |n| Duration::from_secs(n as u64));
        }
        if let Some(v) = &raw.nsm_state_dir {
            let dir = Path::new(v.get_ref());
            if dir.is_absolute() && !v.get_ref().contains('\0') {
                s.nsm_state_dir = Some(dir.components().collect());
            } else {
                let msg = format!("nsm_state_dir {:?} is not an absolute path", v.get_ref());
                self.error(&v.span(), msg);
            }
        }
        if let Some(v) = &raw.grace_seconds_max {
            let secs = self.int("grace_seconds_max", v, 0, GRACE_SECONDS_MAX_MAX);
            s.grace_max = secs.map_or(s.grace_max, |n| Duration::from_secs(n as u64));
        }
        if let Some(v) = &raw.nfs4_lease_seconds {
            let (min, max) = (keel_nfs4_state::LEASE_MIN.as_secs(), keel_nfs4_state::LEASE_MAX.as_secs());
            let secs = self.int("nfs4_lease_seconds", v, min as i64, max as i64);
            s.nfs4_lease = secs.map_or(s.nfs4_lease, |n| Duration::from_secs(n as u64));
        }
        if let Some(v) = &raw.max_locks_per_client {
            s.max_locks_per_client =
                self.usize("max_locks_per_client", v, MAX_LOCKS_PER_CLIENT_MAX).unwrap_or(s.max_locks_per_client);
        }
        if let Some(v) = &raw.keytab {
            let path = Path::new(v.get_ref());
            if path.is_absolute() && !v.get_ref().contains('\0') {
                s.keytab = path.to_path_buf();
            } else {
                let msg = format!("keytab {:?} is not an absolute path", v.get_ref());
                self.error(&v.span(), msg);
            }
        }
        if let Some(v) = &raw.principal {
            let p = v.get_ref();
            let valid = p.split_once('/').is_some_and(|(service, host)| {
                !service.is_empty() && !host.is_empty() && !host.starts_with('@') && !p.contains(char::is_whitespace)
            });
            if valid {
                s.principal = Some(p.clone());
            } else {
                let msg = format!(
                    "principal {p:?} is not a service principal: give SERVICE/HOST, such as \"nfs/server.example.org\", \
                     or SERVICE/HOST@REALM"
                );
                self.error(&v.span(), msg);
            }
        }
        if let Some(v) = &raw.principal_users {
            s.principal_users = self.principal_users(v);
        }
        if let Some(v) = &raw.nfs_versions {
            s.nfs_versions = self.nfs_versions(v).unwrap_or(s.nfs_versions);
        }
        s
    }

    /// `principal_users`: whole principals (with their realm) to local user
    /// names.
    fn principal_users(
        &mut self,
        map: &Spanned<std::collections::BTreeMap<String, String>>,
    ) -> HashMap<String, String> {
        let mut users = HashMap::new();
        for (principal, user) in map.get_ref() {
            let whole = principal.rsplit_once('@').is_some_and(|(name, realm)| {
                !name.is_empty() && !realm.is_empty() && !principal.contains(char::is_whitespace)
            });
            let plain = !user.is_empty() && !user.contains(|c: char| c.is_whitespace() || matches!(c, '@' | '/' | ':'));
            if !whole {
                let msg = format!(
                    "principal_users: {principal:?} is not a whole principal: give NAME@REALM or SERVICE/HOST@REALM, \
                     such as \"host/node1.example.org@EXAMPLE.ORG\""
                );
                self.error(&map.span(), msg);
            } else if !plain {
                let msg = format!("principal_users: {user:?} (for {principal}) is not a local user name");
                self.error(&map.span(), msg);
            } else {
                users.insert(principal.clone(), user.clone());
            }
        }
        users
    }

    /// `nfs_versions`: a non-empty list of "3", "4.1" and "4.2".
    fn nfs_versions(&mut self, list: &Spanned<Vec<Spanned<String>>>) -> Option<NfsVersions> {
        if list.get_ref().is_empty() {
            self.error(
                &list.span(),
                "nfs_versions is empty: list the NFS versions to serve, e.g. [\"3\", \"4.1\", \"4.2\"]",
            );
            return None;
        }
        let mut versions = NfsVersions { v3: false, v41: false, v42: false };
        let mut ok = true;
        for item in list.get_ref() {
            let served = match item.get_ref().as_str() {
                "3" => &mut versions.v3,
                "4.1" => &mut versions.v41,
                "4.2" => &mut versions.v42,
                other => {
                    let why = if matches!(other, "4" | "4.0") { " (NFSv4.0 is not served)" } else { "" };
                    let msg = format!("invalid nfs_versions entry {other:?}: expected \"3\", \"4.1\" or \"4.2\"{why}");
                    self.error(&item.span(), msg);
                    ok = false;
                    continue;
                }
            };
            if *served {
                self.warn(&item.span(), format!("nfs_versions lists {:?} twice", item.get_ref()));
            }
            *served = true;
        }
        ok.then_some(versions)
    }

    fn socket_addrs(&mut self, key: &str, list: &Spanned<Vec<Spanned<String>>>) -> Vec<(SocketAddr, Range<usize>)> {
        let mut addrs = Vec::new();
        for item in list.get_ref() {
            match item.get_ref().parse::<SocketAddr>() {
                Ok(a) => addrs.push((a, item.span())),
                Err(_) => {
                    let msg = format!(
                        "invalid {key} address {:?}: expected an IP address and a port, \
                         e.g. \"0.0.0.0:2049\" or \"[::]:2049\" (host names are not accepted)",
                        item.get_ref()
                    );
                    self.error(&item.span(), msg);
                }
            }
        }
        addrs
    }

    fn cache(&mut self, raw: Option<&Spanned<RawCache>>) -> CacheSettings {
        let mut c = CacheSettings::default();
        let Some(raw) = raw.map(|r| r.get_ref()) else { return c };
        for item in raw.devices.as_ref().map_or(&[][..], |l| l.get_ref().as_slice()) {
            let path = Path::new(item.get_ref());
            if !path.is_absolute() || item.get_ref().contains('\0') {
                let msg = format!("cache device {:?} is not an absolute path", item.get_ref());
                self.error(&item.span(), msg);
            } else if c.devices.iter().any(|d| d == path) {
                let msg = format!("cache device {:?} is given twice", item.get_ref());
                self.error(&item.span(), msg);
            } else {
                c.devices.push(path.components().collect());
            }
        }
        if let Some(v) = &raw.log_mib {
            c.log_bytes = self.usize_from("log_mib", v, CACHE_LOG_MIB_MIN, CACHE_LOG_MIB_MAX).map(|n| (n * MIB) as u64);
        }
        if let Some(v) = &raw.sequential_cutoff_mib {
            let mib = self.usize("sequential_cutoff_mib", v, SEQUENTIAL_CUTOFF_MIB_MAX);
            c.sequential_cutoff = mib.map_or(c.sequential_cutoff, |n| (n * MIB) as u64);
        }
        if let Some(v) = &raw.read_fill_kib {
            let max = (keel_cache::readcache::FILL_BYTES_MAX >> 10) as usize;
            match self.usize_from("read_fill_kib", v, 4, max) {
                Some(kib) if kib.is_power_of_two() => c.read_fill_bytes = (kib << 10) as u64,
                Some(kib) => self.error(&v.span(), format!("read_fill_kib = {kib}: a power of two from 4 to {max}")),
                None => {}
            }
        }
        c
    }

    /// An export's `cache` mode, which the `[cache]` devices must support.
    fn cache_mode(&mut self, raw: &RawExport, cache: &CacheSettings) -> CacheMode {
        let Some(v) = &raw.cache else { return CacheMode::Off };
        let mode = match CacheMode::parse(v.get_ref()) {
            Ok(m) => m,
            Err(why) => {
                self.error(&v.span(), why.to_string());
                return CacheMode::Off;
            }
        };
        let needed = match mode {
            CacheMode::Off => 0,
            CacheMode::WriteBack => 2,
            CacheMode::WriteThrough | CacheMode::WriteAround => 1,
        };
        if cache.devices.len() < needed {
            let mut msg = format!(
                "cache = {:?} needs {needed} cache device(s) in [cache] devices; {} given",
                mode.name(),
                cache.devices.len()
            );
            if mode == CacheMode::WriteBack && cache.devices.len() == 1 {
                // What an administrator who took a lost device out needs.
                msg.push_str(
                    " (if one was lost, keep it named: Keel starts on the one left, serving write-through, until \
                     `keel cache add DEVICE` brings a second)",
                );
            }
            self.error(&v.span(), msg);
        }
        mode
    }

    fn exports(&mut self, raw: Option<&Spanned<Vec<Spanned<RawExport>>>>, cache: &CacheSettings) -> Vec<ExportConfig> {
        let list = raw.map_or(&[][..], |l| l.get_ref().as_slice());
        match raw {
            // Said on purpose (the packaged configuration): serve nothing
            // until exports are added and reloaded, as knfsd does with an
            // empty /etc/exports.
            Some(l) if list.is_empty() => {
                self.warn(
                    &l.span(),
                    "export = []: nothing is exported; add [[export]] tables in its place and run \
                     `keel exports reload`",
                );
                return Vec::new();
            }
            Some(_) => {}
            None => {
                let problem = Problem {
                    line: None,
                    message: "no exports: add an [[export]] table for each directory to serve (or write \
                              `export = []` to serve nothing until exports are added and reloaded)"
                        .into(),
                    snippet: None,
                };
                self.problems.push(problem);
                return Vec::new();
            }
        }

        let mut exports = Vec::new();
        // id -> line of the export that has it; path -> line.
        let mut ids: HashMap<u32, usize> = HashMap::new();
        let mut paths: HashMap<PathBuf, usize> = HashMap::new();
        let mut dirs: HashMap<PathBuf, (usize, PathBuf)> = HashMap::new();
        for raw in list {
            let line = self.line(&raw.span());
            let path = self.export_path(raw);
            let id = self.export_id(raw);
            if let (Some(id), Some(v)) = (id, &raw.get_ref().id) {
                if let Some(other) = ids.get(&id) {
                    let msg = format!("export id {id} is already used by the export at line {other}");
                    self.error(&v.span(), msg);
                } else {
                    ids.insert(id, line);
                }
            }
            if let (Some(path), Some(v)) = (&path, &raw.get_ref().path) {
                if let Some(other) = paths.get(path) {
                    let msg =
                        format!("export path {:?} is already exported at line {other}", path.display().to_string());
                    self.error(&v.span(), msg);
                } else {
                    paths.insert(path.clone(), line);
                    // The same directory under another name (a symbolic link).
                    if let Some(dir) = self.check_paths.then(|| std::fs::canonicalize(path).ok()).flatten() {
                        if let Some((other, other_path)) = dirs.get(&dir) {
                            let msg = format!(
                                "export path {:?} is the same directory as {:?}, exported at line {other}",
                                path.display().to_string(),
                                other_path.display().to_string()
                            );
                            self.error(&v.span(), msg);
                        } else {
                            dirs.insert(dir, (line, path.clone()));
                        }
                    }
                }
            }
            let fsid = raw
                .get_ref()
                .fsid
                .as_ref()
                .and_then(|v| self.int("fsid", v, 0, i64::MAX).and_then(|n| u64::try_from(n).ok()));
            let clients = self.clients(raw, path.as_deref());
            let cache = self.cache_mode(raw.get_ref(), cache);
            if let (Some(path), Some(id), Some(clients)) = (path, id, clients) {
                exports.push(ExportConfig { path, id, fsid, clients, cache, line });
            }
        }
        exports
    }

    /// An `async` export acknowledges writes that exist only in the active
    /// node's memory: a failover loses them (the NSS7.0-HA paper's warning), so it is
    /// refused under `[ha]`.
    fn ha_exports(&mut self, exports: &[ExportConfig]) {
        for e in exports {
            let async_hosts: Vec<String> =
                e.clients.iter().filter(|c| !c.options.sync).map(|c| c.host.to_string()).collect();
            if !async_hosts.is_empty() {
                let message = format!(
                    "export {:?} is async for {}: with [ha] enabled a failover would lose writes the server \
                     acknowledged; remove `sync = false`",
                    e.path.display().to_string(),
                    async_hosts.join(", ")
                );
                self.problems.push(Problem { line: Some(e.line), message, snippet: None });
            }
        }
    }

    fn export_path(&mut self, raw: &Spanned<RawExport>) -> Option<PathBuf> {
        let Some(value) = &raw.get_ref().path else {
            self.error(&raw.span(), "export has no `path`: give the absolute path of the directory to export");
            return None;
        };
        let s = value.get_ref();
        let path = Path::new(s);
        let problem = if s.contains('\0') {
            Some("contains a NUL character".to_owned())
        } else if !path.is_absolute() {
            Some("is not an absolute path".to_owned())
        } else if path.components().any(|c| c == Component::ParentDir) {
            Some("must not contain \"..\"".to_owned())
        } else if s.len() > MAX_EXPORT_PATH_LEN {
            Some(format!("is longer than {MAX_EXPORT_PATH_LEN} bytes, the longest path a MOUNT request can name"))
        } else if self.check_paths {
            match std::fs::metadata(path) {
                Ok(m) if m.is_dir() => None,
                Ok(_) => Some("is not a directory".to_owned()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("does not exist".to_owned()),
                Err(e) => Some(format!("cannot be examined: {e}")),
            }
        } else {
            None
        };
        if let Some(problem) = problem {
            self.error(&value.span(), format!("export path {s:?} {problem}"));
            return None;
        }
        Some(path.components().collect())
    }

    fn export_id(&mut self, raw: &Spanned<RawExport>) -> Option<u32> {
        let Some(value) = &raw.get_ref().id else {
            self.error(
                &raw.span(),
                "export has no `id`: give each export a unique number from 1 to 4294967295, \
                 and do not change it while clients have the export mounted",
            );
            return None;
        };
        self.u32("id", value, 1)
    }

    /// The export's client rules, `None` if there are none (a problem has
    /// been recorded).
    fn clients(&mut self, raw: &Spanned<RawExport>, path: Option<&Path>) -> Option<Vec<ClientRule>> {
        let export = raw.get_ref();
        let base = self.options(ClientOptions::default(), export.options());
        let what = match path {
            Some(p) => format!("export {:?}", p.display().to_string()),
            None => "export".to_owned(),
        };
        let entries = export.clients.as_ref().map_or(&[][..], |c| c.get_ref().as_slice());
        if entries.is_empty() {
            let span = export.clients.as_ref().map_or(raw.span(), |c| c.span());
            self.error(
                &span,
                format!(
                    "{what} has no clients: add at least one [[export.clients]] entry \
                     (host = \"*\" for every client)"
                ),
            );
            return None;
        }

        let mut rules: Vec<(ClientRule, Range<usize>)> = Vec::new();
        let mut unresolved = Vec::new();
        let mut invalid = false;
        for entry in entries {
            match self.client(entry, base) {
                Client::Rule(rule) => rules.push((rule, entry.span())),
                Client::Unresolved(name, line) => unresolved.push(format!("{name:?} (line {line})")),
                Client::Invalid => invalid = true,
            }
        }
        if rules.is_empty() {
            if !invalid {
                let msg = format!(
                    "{what} has no usable clients: {} {} not resolve",
                    unresolved.join(", "),
                    if unresolved.len() == 1 { "does" } else { "do" }
                );
                self.error(&raw.span(), msg);
            }
            return None;
        }

        // First match wins: an entry whose clients all match an earlier
        // entry is dead, which is almost certainly not what was meant.
        for (i, (rule, span)) in rules.iter().enumerate() {
            if let Some((earlier, earlier_span)) = rules[..i].iter().find(|(e, _)| host::covers(&e.host, &rule.host)) {
                let msg = format!(
                    "client entry {:?} never applies: every client it matches is matched first by \
                     the entry {:?} at line {} (the first matching entry wins)",
                    rule.host.to_string(),
                    earlier.host.to_string(),
                    self.line(earlier_span)
                );
                self.warn(span, msg);
            }
        }
        if invalid { None } else { Some(rules.into_iter().map(|(r, _)| r).collect()) }
    }

    fn client(&mut self, entry: &Spanned<RawClient>, base: ClientOptions) -> Client {
        let raw = entry.get_ref();
        let errors = self.problems.len();
        let options = self.options(base, raw.options());
        let Some(host) = &raw.host else {
            self.error(
                &entry.span(),
                "client entry has no `host`: give \"*\", an address, a network such as \
                 \"10.1.0.0/16\", or a host name",
            );
            return Client::Invalid;
        };
        let name = match host::parse_host(host.get_ref()) {
            Ok(HostSpec::Match(m)) => {
                return if self.problems.len() > errors {
                    Client::Invalid
                } else {
                    Client::Rule(ClientRule { host: m, options })
                };
            }
            Ok(HostSpec::Name(name)) => name,
            Err(why) => {
                self.error(&host.span(), format!("invalid host {:?}: {why}", host.get_ref()));
                return Client::Invalid;
            }
        };
        let addrs = match self.resolved.get(&name) {
            Some(addrs) => addrs.clone(),
            None => {
                let addrs = (self.resolver)(&name);
                self.resolved.insert(name.clone(), addrs.clone());
                addrs
            }
        };
        if self.problems.len() > errors {
            return Client::Invalid;
        }
        if addrs.is_empty() {
            self.warn(&host.span(), format_args!("host {name:?} does not resolve; this client entry is ignored"));
            let line = self.line(&host.span());
            return Client::Unresolved(name, line);
        }
        Client::Rule(ClientRule { host: HostMatch::Host { name, addrs }, options })
    }

    /// `base` with the options given in `raw` applied.
    fn options(&mut self, base: ClientOptions, raw: RawOptions<'_>) -> ClientOptions {
        let mut o = base;
        if let Some(v) = raw.access {
            o.access = self.choice("access", v, ACCESS).unwrap_or(o.access);
        }
        if let Some(v) = raw.sync {
            o.sync = v;
        }
        if let Some(v) = raw.squash {
            o.squash = self.choice("squash", v, SQUASH).unwrap_or(o.squash);
        }
        if let Some(v) = raw.anonuid {
            o.anonuid = self.u32("anonuid", v, 0).unwrap_or(o.anonuid);
        }
        if let Some(v) = raw.anongid {
            o.anongid = self.u32("anongid", v, 0).unwrap_or(o.anongid);
        }
        o.secure = self.secure(raw.secure, raw.insecure).unwrap_or(o.secure);
        if let Some(v) = raw.sec {
            o.sec = self.sec(v).unwrap_or(o.sec);
        }
        o
    }

    /// `sec = [...]`: exports(5)'s flavors, most preferred first.
    fn sec(&mut self, list: &Spanned<Vec<Spanned<String>>>) -> Option<SecFlavors> {
        let mut flavors = Vec::new();
        for item in list.get_ref() {
            let Some(flavor) = SecFlavor::from_name(item.get_ref()) else {
                let msg = format!(
                    "sec {:?} is not a security flavor Keel serves: give \"sys\", \"krb5\", \"krb5i\" or \"krb5p\"",
                    item.get_ref()
                );
                self.error(&item.span(), msg);
                return None;
            };
            if flavors.contains(&flavor) {
                self.error(&item.span(), format!("sec lists {:?} twice", item.get_ref()));
                return None;
            }
            flavors.push(flavor);
        }
        let sec = SecFlavors::new(&flavors);
        if sec.is_none() {
            self.error(&list.span(), "sec is empty: list at least one flavor, such as [\"sys\"]");
        }
        sec
    }

    /// `secure`, given as `secure = BOOL` or as exports(5)'s `insecure =
    /// BOOL`; both in one table must agree.
    fn secure(&mut self, secure: Option<&Spanned<bool>>, insecure: Option<&Spanned<bool>>) -> Option<bool> {
        match (secure, insecure) {
            (Some(s), Some(i)) if s.get_ref() == i.get_ref() => {
                let msg = format!(
                    "insecure = {} contradicts secure = {} at line {} (insecure = true means secure = false): \
                     give only one of them",
                    i.get_ref(),
                    s.get_ref(),
                    self.line(&s.span())
                );
                self.error(&i.span(), msg);
                None
            }
            (Some(s), _) => Some(*s.get_ref()),
            (None, Some(i)) => Some(!*i.get_ref()),
            (None, None) => None,
        }
    }
}

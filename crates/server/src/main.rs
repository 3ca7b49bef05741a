//! `keel`: the command line.

// Every `unsafe` of this crate is in `sys`.
#![deny(unsafe_code)]

mod admin;
mod budget;
mod cache;
mod config;
mod conns;
mod ha;
mod metrics;
mod notify;
mod portmap;
mod probe;
mod reload;
mod reply_journal;
mod serve;
mod state_dir;
mod stats;
#[allow(unsafe_code)]
mod sys;
mod tickle;
mod tools;
mod transport;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use keel_nfs3::export::{Access, ClientOptions, ClientRule, HostMatch, Squash};

use config::{Config, ExportConfig, LogLevel, PortmapMode, ServerConfig};

#[derive(Parser)]
#[command(name = "keel", version, about = "Keel: an NFSv3 server for HPC clusters", propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve NFSv3 (with MOUNT and portmap). With no configuration, exports
    /// DIR (default ./keel-export, created if missing) read-write to this
    /// host only, on 127.0.0.1:2049.
    Serve(ServeArgs),
    /// Measure an NFS server the way the seed papers did (IOzone, mdtest,
    /// IOR): sweeps over clients, repetitions, JSON and CSV results. Runs
    /// keel-tools (the keel-tools package); `keel bench --help` for more.
    #[command(disable_help_flag = true)]
    Bench(Tool),
    /// Write self-describing data streams, recording what the server
    /// acknowledged as stable, and check them after failures (genstream and
    /// checkstream). Runs keel-tools; `keel verify --help` for more.
    #[command(disable_help_flag = true)]
    Verify(Tool),
    /// Draw result files of keel bench as an HTML page with figures and
    /// tables, against the seed papers' numbers. Runs keel-tools; `keel
    /// report --help` for more.
    #[command(disable_help_flag = true)]
    Report(Tool),
    /// Check a configuration file and print what it would serve.
    CheckConfig {
        /// The configuration file (see keel.example.toml).
        file: PathBuf,
    },
    /// Ask the running server whether it is serving and healthy, since
    /// when, with what. Exits 0 when healthy, 1 when it answers but is
    /// unhealthy (a worker thread gone, an export root that does not answer,
    /// every worker stuck), 3 when no server answers.
    Status {
        #[command(flatten)]
        server: AdminArgs,
        /// Print the answer as JSON (the administration protocol's).
        #[arg(long)]
        json: bool,
        /// Give up on a server that does not answer within SECONDS (exit 3).
        #[arg(long, value_name = "SECONDS", default_value_t = 30)]
        timeout: u64,
    },
    /// Statistics of the running server, like nfsstat -s: calls per
    /// procedure with latency percentiles, per export and per client,
    /// bytes, errors by status, reply cache, connections, workers. With
    /// --interval, rates over each interval, like nfsiostat.
    Stat(StatArgs),
    /// List what the running server exports now, like exportfs -v; `keel
    /// exports reload` re-reads the configuration and applies its exports
    /// without a restart (as SIGHUP does).
    Exports {
        #[command(flatten)]
        server: AdminArgs,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        cmd: Option<ExportsCommand>,
    },
    /// The SSD cache tier of the running server: its devices, the modes of
    /// the exports, live statistics and the event log.
    #[command(subcommand)]
    Cache(CacheCommand),
    /// Call the server as a client would: NFS and MOUNT NULL calls over TCP
    /// to each address the configuration listens on (a wildcard through
    /// loopback), or to the addresses given. Exits 0 when every call is
    /// answered, 1 otherwise: for monitors (the OCF agent runs it).
    Probe {
        /// The server's configuration file: probe its listen addresses.
        #[arg(short, long, value_name = "FILE", required_unless_present = "address")]
        config: Option<PathBuf>,
        /// Probe this address (IP or IP:PORT, port 2049 by default).
        #[arg(long, value_name = "ADDR")]
        address: Vec<String>,
        /// Per call: connect, send and answer.
        #[arg(long, value_name = "SECONDS", default_value_t = 5)]
        timeout: u64,
    },
    /// High availability on Pacemaker and Corosync: write a pair's
    /// configuration, show who serves what.
    #[command(subcommand)]
    Ha(HaCommand),
    /// Tools for testing a running server.
    #[command(subcommand)]
    Debug(DebugCommand),
    /// Write the man pages of keel and its commands into DIR (for
    /// packaging); those of bench, verify and report come from
    /// `keel-tools manpages`, which knows their options.
    #[command(hide = true)]
    Manpages { dir: PathBuf },
}

/// The arguments of a command that keel-tools runs, passed as they are.
#[derive(clap::Args)]
struct Tool {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    args: Vec<std::ffi::OsString>,
}

/// Which running server to ask, through its administration socket.
#[derive(clap::Args)]
struct AdminArgs {
    /// The server's configuration file (its state_dir holds the socket).
    #[arg(short, long, value_name = "FILE", conflicts_with = "state_dir")]
    config: Option<PathBuf>,
    /// The server's state directory (default: ./keel-state if a server
    /// without configuration runs there, else /var/lib/keel).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

impl AdminArgs {
    fn socket(&self) -> anyhow::Result<PathBuf> {
        let dir = match (&self.config, &self.state_dir) {
            (Some(file), _) => config::state_dir_of(file)?,
            (None, Some(dir)) => dir.clone(),
            (None, None) => {
                let local = std::env::current_dir()?.join("keel-state");
                // Even unreadable (0700): a non-root caller then learns the
                // interface is root's.
                if local.is_dir() { local } else { PathBuf::from(config::DEFAULT_STATE_DIR) }
            }
        };
        Ok(admin::socket_path(&dir))
    }
}

/// Totals since the start, or rates over intervals (`keel stat`, `keel
/// cache stat`).
#[derive(clap::Args)]
struct Sampling {
    /// Print rates over every interval of SECONDS instead of totals since
    /// the start, until interrupted (or --count intervals).
    #[arg(short, long, value_name = "SECONDS", value_parser = parse_interval)]
    interval: Option<f64>,
    /// With --interval: stop after this many intervals.
    #[arg(long, value_name = "N", requires = "interval")]
    count: Option<u64>,
    /// Print the statistics as JSON (one object per line with --interval:
    /// the difference over the interval, with `interval_seconds`).
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct StatArgs {
    #[command(flatten)]
    server: AdminArgs,
    #[command(flatten)]
    sampling: Sampling,
    /// Clients listed at most (the busiest first).
    #[arg(long, value_name = "N", default_value_t = 20)]
    clients: usize,
    /// Also list every open connection with its state.
    #[arg(long)]
    connections: bool,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=86400.0).contains(&v) => Ok(v),
        _ => Err("expected a number of seconds from 0.1 to 86400".into()),
    }
}

#[derive(Subcommand)]
enum ExportsCommand {
    /// Re-read the configuration file and apply its exports: new ones are
    /// served, removed ones become stale for their clients, changed client
    /// lists apply to the next call. A file with any problem changes
    /// nothing. Exits 1 if the reload was refused.
    Reload {
        #[command(flatten)]
        server: AdminArgs,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum CacheCommand {
    /// The cache devices (role, state, size, bytes written and read by the
    /// log and the read cache, errors, and wear where the device reports
    /// it: NVMe drives do, in their SMART log), the log (used, dirty data
    /// and its age) and each export's mode.
    List {
        #[command(flatten)]
        server: AdminArgs,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a cache device: a block device (opened exclusively) or a file of
    /// at least 64 MiB on a fast file system (not in memory: tmpfs, ramfs
    /// and RAM disks are refused). With fewer than two devices
    /// before, the log moves onto the new pair (dirty data is destaged
    /// first). A runtime change: name the device in [cache] devices too.
    Add {
        #[command(flatten)]
        server: AdminArgs,
        device: PathBuf,
    },
    /// Remove a cache device. If it holds the log, the dirty data is
    /// destaged first (progress: dirty bytes left) and the log is made
    /// again on the devices left. A runtime change: take it out of [cache]
    /// devices too.
    Remove {
        #[command(flatten)]
        server: AdminArgs,
        device: String,
    },
    /// Set an export's cache mode (write-back, write-through, write-around
    /// or off), naming the export by id or path. Leaving write-back flushes the log first (progress:
    /// dirty bytes left). Kept until the configuration file changes the
    /// export's `cache` and is reloaded, or until a restart.
    Mode {
        #[command(flatten)]
        server: AdminArgs,
        export: String,
        mode: String,
    },
    /// The cache's statistics, like iostat: per device and export, writes
    /// taken by the log and sent around it (and why), reads from the log and
    /// from disk, dirty data and its age, destage. With --interval, rates.
    Stat {
        #[command(flatten)]
        server: AdminArgs,
        #[command(flatten)]
        sampling: Sampling,
    },
    /// Write every dirty byte in the write-back log to the disks now, and
    /// return when the log is empty (progress: dirty bytes left). Before
    /// moving the disks elsewhere: a stop leaves the log's data for the
    /// next start to destage.
    Flush {
        #[command(flatten)]
        server: AdminArgs,
    },
    /// The cache's event log, oldest first: devices added, failed and
    /// removed, mode changes, flushes, degradation, recovery.
    Events {
        #[command(flatten)]
        server: AdminArgs,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum HaCommand {
    /// From PLAN (see /usr/share/doc/keel/examples/keel-ha.example.toml),
    /// write corosync.conf, cluster.crm (Pacemaker resources, constraints,
    /// fencing topology) and one Keel configuration per service into DIR,
    /// and print the commands that install them. Runs nothing.
    Init {
        plan: PathBuf,
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Which node serves which service and since when, the nodes, the last
    /// failover and fencing, failed actions (from crm_mon and the CIB).
    /// Exits 0 when every service is served and no node awaits fencing, 1
    /// otherwise, 3 when the cluster cannot be asked.
    Status {
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum DebugCommand {
    /// Make storage calls of the running server fail, to test what clients
    /// see (needs fault_injection = true in the server's [server] table).
    #[command(subcommand)]
    Fault(FaultCommand),
}

#[derive(Subcommand)]
enum FaultCommand {
    /// Arm a fault: the next COUNT calls at POINT (on INODE, or on any
    /// object) fail with ERRNO, panic their worker with --panic, or wait
    /// --stall-ms milliseconds (a device that hangs) and go on.
    Arm {
        #[command(flatten)]
        server: AdminArgs,
        /// pwrite (WRITE's data) or fsync (COMMIT, stable metadata changes).
        #[arg(long, value_enum)]
        point: admin::FaultPointName,
        /// Only calls on the object with this inode number.
        #[arg(long)]
        inode: Option<u64>,
        /// The error number to fail with (5 is EIO).
        #[arg(long, required_unless_present_any = ["panic", "stall_ms"], conflicts_with_all = ["panic", "stall_ms"])]
        errno: Option<i32>,
        /// Panic the worker thread instead of failing the call.
        #[arg(long, conflicts_with = "stall_ms")]
        panic: bool,
        /// Stall the call this many milliseconds (1 to 60000), then let it go on.
        #[arg(long, value_name = "MS")]
        stall_ms: Option<u32>,
        /// How many calls it strikes.
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Disarm every fault.
    Clear {
        #[command(flatten)]
        server: AdminArgs,
    },
    /// List the armed faults (JSON).
    List {
        #[command(flatten)]
        server: AdminArgs,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Directory to export when no --config is given.
    #[arg(conflicts_with = "config")]
    dir: Option<PathBuf>,
    /// Configuration file (TOML; see keel.example.toml).
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address for NFS and MOUNT, replacing the configured ones (repeatable).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Vec<SocketAddr>,
    /// Portmapper: auto (serve port 111 if free, else register with rpcbind), serve, register or off.
    #[arg(long, value_parser = parse_portmap)]
    portmap: Option<PortmapMode>,
    /// File-system worker threads (knfsd's thread count); as many as CPUs run at once, the others stand in for calls that wait for storage.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=4096))]
    workers: Option<u16>,
    /// error, warn, info, debug or trace.
    #[arg(long, value_parser = parse_log_level)]
    log_level: Option<LogLevel>,
    /// Where the server keeps its handle key (default /var/lib/keel, or
    /// ./keel-state without --config).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

fn parse_portmap(s: &str) -> Result<PortmapMode, String> {
    Ok(match s {
        "auto" => PortmapMode::Auto,
        "serve" => PortmapMode::Serve,
        "register" => PortmapMode::Register,
        "off" => PortmapMode::Off,
        _ => return Err("expected auto, serve, register or off".into()),
    })
}

fn parse_log_level(s: &str) -> Result<LogLevel, String> {
    Ok(match s {
        "error" => LogLevel::Error,
        "warn" => LogLevel::Warn,
        "info" => LogLevel::Info,
        "debug" => LogLevel::Debug,
        "trace" => LogLevel::Trace,
        _ => return Err("expected error, warn, info, debug or trace".into()),
    })
}

/// `keel.1` and a page per command (`keel-exports-reload.1`), except the
/// commands keel-tools runs: the keel-tools package installs their pages.
fn manpages(dir: &Path) -> anyhow::Result<()> {
    fn generate(cmd: &clap::Command, dir: &Path) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && !tools::COMMANDS.contains(&s.get_name())) {
            generate(sub, dir)?;
        }
        clap_mangen::Man::new(cmd.clone()).generate_to(dir).map(drop)
    }
    use clap::CommandFactory;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    generate(&cmd, dir).with_context(|| format!("cannot write man pages into {}", dir.display()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(t) => return tools::run("bench", t.args),
        Command::Verify(t) => return tools::run("verify", t.args),
        Command::Report(t) => return tools::run("report", t.args),
        Command::Serve(args) => serve_command(args),
        Command::CheckConfig { file } => check_config(&file),
        Command::Status { server, json, timeout } => return status(&server, json, timeout),
        Command::Stat(args) => stat(args),
        Command::Exports { server, json, cmd: None } => exports(&server, json),
        Command::Exports { cmd: Some(ExportsCommand::Reload { server, json }), .. } => reload(&server, json),
        Command::Cache(cmd) => cache_command(cmd),
        Command::Probe { config, address, timeout } => probe(config.as_deref(), &address, timeout),
        Command::Ha(HaCommand::Init { plan, out }) => ha_init(&plan, &out),
        Command::Ha(HaCommand::Status { json }) => return ha_status(json),
        Command::Debug(DebugCommand::Fault(cmd)) => fault(cmd),
        Command::Manpages { dir } => manpages(&dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keel: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn probe(config: Option<&Path>, addresses: &[String], timeout: u64) -> anyhow::Result<()> {
    let mut targets = Vec::new();
    if let Some(file) = config {
        let c = config::load(file)?;
        targets.extend(c.server.listen.iter().map(|a| probe::target(*a)));
    }
    for a in addresses {
        let addr = match a.parse::<SocketAddr>() {
            Ok(sa) => sa,
            Err(_) => SocketAddr::new(a.parse::<IpAddr>().with_context(|| format!("{a:?} is not an address"))?, 2049),
        };
        targets.push(addr);
    }
    probe::probe(&targets, std::time::Duration::from_secs(timeout.max(1)))
}

fn ha_init(plan: &Path, out: &Path) -> anyhow::Result<()> {
    let plan = ha::init::Plan::load(plan)?;
    let files = ha::init::render(&plan)?;
    // Root's alone: the fence devices' credentials are in them.
    keel_store::state_file::create_dir(out).with_context(|| format!("cannot create {}", out.display()))?;
    for (name, text) in &files {
        let path = out.join(name);
        keel_store::state_file::replace_durably(&path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    print!("{}", ha::init::commands(&plan, out));
    Ok(())
}

fn ha_status(json: bool) -> ExitCode {
    let st = match ha::status::gather() {
        Ok(st) => st,
        Err(e) => {
            eprintln!("keel: {e:#}");
            return ExitCode::from(3);
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&st).expect("status serializes"));
    } else {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        print!("{}", ha::status::render(&st, now));
    }
    if ha::status::healthy(&st) { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn serve_command(args: ServeArgs) -> anyhow::Result<()> {
    // Before anything touches the disk (the zero-configuration start
    // creates directories), so an ordinary user learns what is wrong.
    keel_store_local::ident::check_privileges().map_err(anyhow::Error::msg)?;
    let file = args.config.as_ref().map(std::path::absolute).transpose()?;
    let mut config = match &file {
        Some(file) => config::load(file)?,
        None => default_config(args.dir.clone())?,
    };
    let overrides = reload::Overrides {
        listen: args.listen.clone(),
        portmap: args.portmap,
        workers: args.workers.map(usize::from),
        log_level: args.log_level,
        state_dir: args.state_dir.as_ref().map(std::path::absolute).transpose()?,
    };
    overrides.apply(&mut config.server);
    init_logging(config.server.log_level);
    warn_if_reserved_ports_prove_nothing(&config);
    let exports: Vec<(PathBuf, String)> =
        config.exports.iter().map(|e| (e.path.clone(), describe_options(&e.clients))).collect();
    serve::run(config, file, overrides, move |bound, mount_port| banner(&exports, bound, mount_port))
}

/// The zero-configuration server: one directory, read-write, to this host
/// only (its loopback addresses), `secure` (the default) and
/// `no_root_squash`. Only local users can
/// reach 127.0.0.1, but they are not all trusted: `secure` refuses every
/// call from a port above 1023, which an ordinary user cannot bind, so only
/// root (the kernel client, or libnfs run by root) acts as root here, and a
/// user cannot plant a setuid-root file through the server.
fn default_config(dir: Option<PathBuf>) -> anyhow::Result<Config> {
    let cwd = std::env::current_dir()?;
    let dir = std::path::absolute(dir.unwrap_or_else(|| cwd.join("keel-export")))?;
    if !dir.exists() {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new().recursive(true).mode(0o755).create(&dir)?;
        // A scratch area every client user can write in, as /tmp.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))?;
    }
    if !dir.is_dir() {
        anyhow::bail!("{} is not a directory", dir.display());
    }
    let options = ClientOptions { access: Access::ReadWrite, squash: Squash::None, ..ClientOptions::default() };
    // This host only, whatever --listen says: with no_root_squash, root on
    // any host that reached the export would be root in it.
    let loopback = [
        HostMatch::Net { addr: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), prefix_len: 8 },
        HostMatch::Net { addr: IpAddr::V6(Ipv6Addr::LOCALHOST), prefix_len: 128 },
    ];
    Ok(Config {
        server: ServerConfig {
            listen: vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 2049)],
            state_dir: cwd.join("keel-state"),
            ..ServerConfig::default()
        },
        exports: vec![ExportConfig {
            path: dir,
            id: 1,
            fsid: None,
            clients: loopback.into_iter().map(|host| ClientRule { host, options }).collect(),
            cache: keel_cache::CacheMode::Off,
            line: 0,
        }],
        cache: Default::default(),
        ha: false,
        warnings: Vec::new(),
    })
}

/// Where Linux keeps the lowest port an unprivileged process cannot bind
/// (per network namespace).
const UNPRIVILEGED_PORT_START: &str = "/proc/sys/net/ipv4/ip_unprivileged_port_start";

/// `secure` trusts a source port below 1024 to mean "root on the client".
/// On this host that holds only if ordinary users cannot bind such ports;
/// containers often lower `ip_unprivileged_port_start` to 0. (It is the
/// clients' setting that matters; this host's is the one Keel can see, and
/// it decides for local clients.)
fn warn_if_reserved_ports_prove_nothing(config: &Config) {
    let any_secure = config.exports.iter().flat_map(|e| &e.clients).any(|r| r.options.secure);
    let Ok(text) = std::fs::read_to_string(UNPRIVILEGED_PORT_START) else { return };
    let Ok(start) = text.trim().parse::<u32>() else { return };
    if any_secure && start < 1024 {
        tracing::warn!(
            "{UNPRIVILEGED_PORT_START} is {start}: any local user can bind ports {start} to 1023, so `secure` \
             cannot tell root from an ordinary user on this host; set it to 1024 \
             (sysctl net.ipv4.ip_unprivileged_port_start=1024) or do not export to local clients"
        );
    }
}

pub(crate) fn describe_options(rules: &[ClientRule]) -> String {
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
            format!("{}({access},{sync},{squash},{secure})", r.host)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every option of a client entry, as `exportfs -v` lists them.
pub(crate) fn option_list(o: &ClientOptions) -> String {
    let access = if o.access == Access::ReadWrite { "rw" } else { "ro" };
    let sync = if o.sync { "sync" } else { "async" };
    let squash = match o.squash {
        Squash::None => "no_root_squash",
        Squash::Root => "root_squash",
        Squash::All => "all_squash",
    };
    let secure = if o.secure { "secure" } else { "insecure" };
    format!("{access},{sync},{squash},{secure},anonuid={},anongid={}", o.anonuid, o.anongid)
}

fn banner(exports: &[(PathBuf, String)], bound: &[SocketAddr], mount_port: u16) -> String {
    let addr = bound[0];
    let host = if addr.ip().is_unspecified() { hostname() } else { addr.ip().to_string() };
    let mut out = format!("keel {} serving NFSv3 on {}", env!("CARGO_PKG_VERSION"), list(bound));
    for (path, options) in exports {
        out += &format!("\n  export {} {}", path.display(), options);
    }
    if exports.is_empty() {
        out += "\nNothing is exported yet: add [[export]] tables to the configuration and run `keel exports reload`";
        return out;
    }
    out += "\nMount from a Linux client with:";
    for (path, _) in exports {
        out += &format!(
            "\n  mount -t nfs -o vers=3,proto=tcp,port={},mountport={mount_port},mountproto=tcp {host}:{} /mnt",
            addr.port(),
            path.display()
        );
    }
    out
}

fn list(addrs: &[SocketAddr]) -> String {
    addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "SERVER".into())
}

fn init_logging(level: LogLevel) {
    let level = match level {
        LogLevel::Error => tracing::Level::ERROR,
        LogLevel::Warn => tracing::Level::WARN,
        LogLevel::Info => tracing::Level::INFO,
        LogLevel::Debug => tracing::Level::DEBUG,
        LogLevel::Trace => tracing::Level::TRACE,
    };
    use std::io::IsTerminal;
    let log = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    // Under systemd, stderr goes to the journal, which stamps every line.
    if std::env::var_os("JOURNAL_STREAM").is_some() { log.without_time().init() } else { log.init() }
}

fn check_config(file: &Path) -> anyhow::Result<()> {
    let config = config::load(file)?;
    for w in &config.warnings {
        println!("warning: {w}");
    }
    state_dir::check_not_exported(&config)?;
    if config.ha {
        ha::check_shared(&config)?;
    }
    let s = &config.server;
    println!("{}: valid", file.display());
    if config.ha {
        println!("[ha]: state_dir and every export on one file system, not the root's");
    }
    let mount_also =
        if s.mount_listen.is_empty() { String::new() } else { format!(" (MOUNT also on {})", list(&s.mount_listen)) };
    println!("listen {}{mount_also}, portmap {}", list(&s.listen), s.portmap);
    println!("{} workers, state in {}", s.workers, s.state_dir.display());
    println!(
        "at most {} connections, idle ones closed after {} s; {} MiB for calls in flight ({} MiB per connection), \
         a connection whose replies are not read closed after {} s",
        s.max_connections,
        s.idle_timeout.as_secs(),
        s.max_inflight_bytes >> 20,
        s.max_inflight_bytes_per_connection >> 20,
        s.stall_timeout.as_secs()
    );
    for e in &config.exports {
        let fsid = e.fsid.map_or("from the file system UUID".to_string(), |f| f.to_string());
        println!("export {} id {} fsid {}: {}", e.path.display(), e.id, fsid, describe_options(&e.clients));
    }
    Ok(())
}

/// `keel status`: 0 healthy, 1 unhealthy, 3 no answer (as LSB's "not
/// running"), so that a monitoring check or a resource agent can use it.
fn status(server: &AdminArgs, json: bool, timeout: u64) -> ExitCode {
    let timeout = Some(std::time::Duration::from_secs(timeout.max(1)));
    let ask = |socket: PathBuf| admin::call_with_progress(&socket, &admin::Request::Status {}, timeout, |_| {});
    let answer = match server.socket().and_then(ask) {
        Ok(answer) => answer,
        Err(e) => {
            eprintln!("keel: {e:#}");
            return ExitCode::from(3);
        }
    };
    let s: admin::Status = match serde_json::from_value(answer.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("keel: the server's status does not parse: {e}");
            return ExitCode::from(1);
        }
    };
    if json {
        println!("{answer}");
    } else {
        let started = std::time::UNIX_EPOCH + std::time::Duration::from_secs(s.started_unix);
        let health = if s.healthy { "healthy".to_string() } else { format!("UNHEALTHY: {}", s.problems.join("; ")) };
        println!("keel {}: {health}", s.version);
        println!("serving since {} (up {} s), pid {}", keel_stats::time::rfc3339(started), s.uptime_seconds, s.pid);
        if let Some(file) = &s.config_file {
            println!("configuration {file}");
        }
        println!("listen {}", s.listen.join(", "));
        println!("write verifier {}", s.write_verifier);
        println!(
            "{} connections from {} client hosts; {} of {} workers busy",
            s.connections, s.clients, s.workers_busy, s.workers
        );
        println!("{} objects open in the inode cache", s.cached_inodes);
        for e in &s.exports {
            println!("export {} {} fsid {}", e.id, e.path, e.fsid);
        }
    }
    if s.healthy { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

fn snapshot(socket: &Path) -> anyhow::Result<keel_stats::Snapshot> {
    let answer = admin::call(socket, &admin::Request::Stats {})?;
    serde_json::from_value(answer).context("the server's statistics do not parse")
}

fn stat(args: StatArgs) -> anyhow::Result<()> {
    let opts =
        |interval| keel_stats::text::Options { interval, clients_max: args.clients, connections: args.connections };
    sample(
        &args.server.socket()?,
        &args.sampling,
        |s, interval| keel_stats::text::render(s, opts(interval)),
        |s| serde_json::to_value(s),
    )
}

/// The statistics once (totals since the start), or the difference over
/// every interval, as `text` (given the interval's seconds) or as `json`
/// (with `interval_seconds`).
fn sample(
    socket: &Path,
    sampling: &Sampling,
    text: impl Fn(&keel_stats::Snapshot, Option<f64>) -> String,
    json: impl Fn(&keel_stats::Snapshot) -> serde_json::Result<serde_json::Value>,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut before = snapshot(socket)?;
    let Some(seconds) = sampling.interval else {
        if sampling.json {
            println!("{}", json(&before)?);
        } else {
            print!("{}", text(&before, None));
        }
        return Ok(());
    };
    let mut printed = 0;
    while sampling.count.is_none_or(|n| printed < n) {
        std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
        let now = snapshot(socket)?;
        let elapsed = now.taken_unix_ms.saturating_sub(before.taken_unix_ms) as f64 / 1000.0;
        let delta = now.since(&before);
        if sampling.json {
            let mut value = json(&delta)?;
            value["interval_seconds"] = serde_json::json!(elapsed);
            println!("{value}");
        } else {
            println!("{}", text(&delta, Some(elapsed.max(0.001))));
        }
        std::io::stdout().flush()?;
        before = now;
        printed += 1;
    }
    Ok(())
}

fn cache_command(cmd: CacheCommand) -> anyhow::Result<()> {
    let (server, request) = match cmd {
        CacheCommand::List { server, json } => {
            let answer = admin::call(&server.socket()?, &admin::Request::CacheList {})?;
            if json {
                println!("{answer}");
            } else {
                let c: keel_stats::CacheSnapshot = serde_json::from_value(answer)?;
                print!("{}", keel_stats::text::render_cache(&c, None));
            }
            return Ok(());
        }
        CacheCommand::Events { server, json } => {
            let answer = admin::call(&server.socket()?, &admin::Request::CacheEvents {})?;
            if json {
                println!("{answer}");
                return Ok(());
            }
            let events: Vec<cache::EventLine> = serde_json::from_value(answer)?;
            if events.is_empty() {
                println!("no cache events");
            }
            for e in events {
                let at = keel_stats::time::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_millis(e.unix_ms));
                println!("{at}  {}", e.event);
            }
            return Ok(());
        }
        CacheCommand::Stat { server, sampling } => {
            return sample(
                &server.socket()?,
                &sampling,
                |s, interval| keel_stats::text::render_cache(&s.cache, interval),
                |s| serde_json::to_value(&s.cache),
            );
        }
        CacheCommand::Add { server, device } => {
            let device = std::path::absolute(&device)?.display().to_string();
            (server, admin::Request::CacheAdd { device })
        }
        CacheCommand::Remove { server, device } => (server, admin::Request::CacheRemove { device }),
        CacheCommand::Flush { server } => (server, admin::Request::CacheFlush {}),
        CacheCommand::Mode { server, export, mode } => (server, admin::Request::CacheMode { export, mode }),
    };
    let answer = admin::call_with_progress(&server.socket()?, &request, None, |p| {
        if let Some(dirty) = p["dirty_bytes"].as_u64() {
            eprintln!("destaging: {} dirty", keel_stats::text::bytes(dirty as f64));
        }
    })?;
    let c: keel_stats::CacheSnapshot = serde_json::from_value(answer)?;
    print!("{}", keel_stats::text::render_cache(&c, None));
    Ok(())
}

fn exports(server: &AdminArgs, json: bool) -> anyhow::Result<()> {
    let answer = admin::call(&server.socket()?, &admin::Request::Exports {})?;
    if json {
        println!("{answer}");
        return Ok(());
    }
    let list: Vec<admin::ExportListing> = serde_json::from_value(answer)?;
    for e in &list {
        let subtree = if e.subtree { ", a subdirectory of its file system" } else { "" };
        println!("{} (id {}, fsid {}{subtree})", e.path, e.id, e.fsid);
        for c in &e.clients {
            println!("\t{}({})", c.host, c.options);
        }
    }
    Ok(())
}

fn reload(server: &AdminArgs, json: bool) -> anyhow::Result<()> {
    let answer = admin::call(&server.socket()?, &admin::Request::ExportsReload {})?;
    if json {
        println!("{answer}");
        return Ok(());
    }
    let o: reload::ReloadOutcome = serde_json::from_value(answer)?;
    for w in &o.warnings {
        println!("warning: {w}");
    }
    for (what, list) in [("added", &o.added), ("removed", &o.removed), ("changed", &o.changed)] {
        for e in list {
            println!("{what} export {} {} {}", e.id, e.path, e.clients);
        }
    }
    println!(
        "exports reloaded: {} added, {} removed, {} changed, {} unchanged",
        o.added.len(),
        o.removed.len(),
        o.changed.len(),
        o.unchanged
    );
    for change in &o.needs_restart {
        println!("not applied until keel restarts: {change}");
    }
    Ok(())
}

fn fault(cmd: FaultCommand) -> anyhow::Result<()> {
    let (server, request) = match cmd {
        FaultCommand::Arm { server, point, inode, errno, panic, stall_ms, count } => {
            let errno = if panic { None } else { errno };
            (server, admin::Request::FaultArm { point, inode, errno, stall_ms, count })
        }
        FaultCommand::Clear { server } => (server, admin::Request::FaultClear {}),
        FaultCommand::List { server } => (server, admin::Request::FaultList {}),
    };
    let answer = admin::call(&server.socket()?, &request)?;
    if !answer.is_null() {
        println!("{answer}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The zero-configuration export: this host only, even when --listen
    /// makes it reachable from others; secure; root not squashed.
    #[test]
    fn zero_config_export_is_for_this_host_only_and_secure() {
        let dir = std::env::temp_dir().join(format!("keel-zero-config-test-{}", std::process::id()));
        let config = default_config(Some(dir.clone())).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let rules = &config.exports[0].clients;
        for (client, admitted) in
            [("127.0.0.1", true), ("127.1.2.3", true), ("::1", true), ("192.0.2.1", false), ("2001:db8::1", false)]
        {
            let options = keel_nfs3::export::options_for(rules, client.parse().unwrap());
            assert_eq!(options.is_some(), admitted, "{client}");
            if let Some(o) = options {
                assert_eq!((o.access, o.squash, o.secure), (Access::ReadWrite, Squash::None, true), "{client}");
            }
        }
    }
}

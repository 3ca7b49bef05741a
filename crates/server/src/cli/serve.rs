//! `keel serve`: the server's command line, its zero-configuration export
//! and the banner it prints; `crate::serve` runs the server.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use keel_exports::{Access, ClientOptions, ClientRule, HostMatch, Squash};

use super::list;
use crate::config::{self, Config, ExportConfig, LogLevel, NfsVersions, PortmapMode, ServerConfig, describe_options};
use crate::reload;

#[derive(clap::Args)]
pub struct ServeArgs {
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

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
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
    let exports: Vec<(PathBuf, String)> =
        config.exports.iter().map(|e| (e.path.clone(), describe_options(&e.clients))).collect();
    let versions = config.server.nfs_versions;
    crate::serve::run(config, file, overrides, move |bound, mount_port, portmapped| {
        banner(&exports, versions, bound, mount_port, portmapped)
    })
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

/// What `keel serve` prints once serving: the versions, the exports and
/// the exact mount command for each. Without a portmapper (`portmapped`
/// false) the clients' lock managers cannot find NLM, so the NFSv3 command
/// says `nolock` (locks then stay local to each client), as README says.
fn banner(
    exports: &[(PathBuf, String)],
    versions: NfsVersions,
    bound: &[SocketAddr],
    mount_port: u16,
    portmapped: bool,
) -> String {
    let addr = bound[0];
    let host = if addr.ip().is_unspecified() { hostname() } else { addr.ip().to_string() };
    let served: Vec<&str> = [(versions.v3, "NFSv3"), (versions.v41, "NFSv4.1"), (versions.v42, "NFSv4.2")]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
    let served = match served.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => "no NFS version".into(),
    };
    let mut out = format!("keel {} serving {served} on {}", env!("CARGO_PKG_VERSION"), list(bound));
    for (path, options) in exports {
        out += &format!("\n  export {} {}", path.display(), options);
    }
    if exports.is_empty() {
        out += "\nNothing is exported yet: add [[export]] tables to the configuration and run `keel exports reload`";
        return out;
    }
    let nolock = if portmapped { "" } else { ",nolock" };
    out += "\nMount from a Linux client with:";
    if versions.v3 {
        for (path, _) in exports {
            out += &format!(
                "\n  mount -t nfs -o vers=3,proto=tcp,port={},mountport={mount_port},mountproto=tcp{nolock} {host}:{} /mnt",
                addr.port(),
                path.display()
            );
        }
        if !portmapped {
            out += "\n(nolock: no portmapper knows Keel's lock manager here, so clients lock only locally)";
        }
    }
    let v4 = if versions.v42 { Some("4.2") } else { versions.v41.then_some("4.1") };
    if let Some(v4) = v4 {
        let (path, _) = &exports[0];
        out += &format!(
            "\n  mount -t nfs -o vers={v4},port={} {host}:{} /mnt   (NFSv{v4}: no MOUNT port; any export's path)",
            addr.port(),
            path.display()
        );
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a portmapper the clients' lock managers cannot find NLM:
    /// the mount command says nolock.
    #[test]
    fn the_mount_command_says_nolock_without_a_portmapper() {
        let exports = [(PathBuf::from("/srv/a"), "*(rw)".to_string())];
        let bound = ["192.0.2.7:2049".parse().unwrap()];
        let mount = |portmapped| {
            let text = banner(&exports, NfsVersions::default(), &bound, 2049, portmapped);
            text.lines().find(|l| l.trim_start().starts_with("mount ")).expect("a mount line").trim().to_string()
        };
        assert_eq!(
            mount(true),
            "mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp 192.0.2.7:/srv/a /mnt"
        );
        assert_eq!(
            mount(false),
            "mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,nolock 192.0.2.7:/srv/a /mnt"
        );
    }

    /// The banner names the versions served and gives a mount command
    /// only for those.
    #[test]
    fn the_banner_names_the_versions_served() {
        let exports = [(PathBuf::from("/srv/a"), "*(rw)".to_string())];
        let bound = ["192.0.2.7:2049".parse().unwrap()];
        let text = |versions| banner(&exports, versions, &bound, 2049, true);
        let all = text(NfsVersions::default());
        assert!(
            all.starts_with("keel ")
                && all.lines().next().unwrap().contains(" serving NFSv3, NFSv4.1 and NFSv4.2 on 192.0.2.7:2049"),
            "{all}"
        );
        assert!(
            all.contains("mount -t nfs -o vers=3,")
                && all.contains("mount -t nfs -o vers=4.2,port=2049 192.0.2.7:/srv/a /mnt"),
            "{all}"
        );
        let v41 = text(NfsVersions { v3: false, v41: true, v42: false });
        assert!(v41.lines().next().unwrap().contains(" serving NFSv4.1 on 192.0.2.7:2049"), "{v41}");
        assert!(
            !v41.contains("vers=3") && v41.contains("mount -t nfs -o vers=4.1,port=2049 192.0.2.7:/srv/a /mnt"),
            "{v41}"
        );
        let v3 = text(NfsVersions { v3: true, v41: false, v42: false });
        assert!(v3.lines().next().unwrap().contains(" serving NFSv3 on ") && !v3.contains("vers=4"), "{v3}");
    }

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
            let options = keel_exports::options_for(rules, client.parse().unwrap());
            assert_eq!(options.is_some(), admitted, "{client}");
            if let Some(o) = options {
                assert_eq!((o.access, o.squash, o.secure), (Access::ReadWrite, Squash::None, true), "{client}");
            }
        }
    }
}

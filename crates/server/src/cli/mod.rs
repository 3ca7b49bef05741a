//! The command line: one file per subcommand, each with its arguments and
//! what it does. This file holds the command tree, the arguments several
//! commands share, and the dispatch.

mod cache;
mod check_config;
mod clients;
mod debug;
mod exports;
mod ha;
mod manpages;
pub(crate) mod out;
mod probe;
mod serve;
mod stat;
mod status;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::{admin, config, tools};
use out::errln;

#[derive(Parser)]
#[command(name = "keel", version, about = "Keel: an NFSv3 server for HPC clusters", propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve NFSv3 (with MOUNT, NLM and portmap), NFSv4.1 and 4.2 on the
    /// same port. With no configuration, exports
    /// DIR (default ./keel-export, created if missing) read-write to this
    /// host only, on 127.0.0.1:2049.
    Serve(serve::ServeArgs),
    /// Measure an NFS server the way published NFS benchmarks did (Dell's
    /// NFS white papers, BeeGFS's report: IOzone, mdtest, IOR): sweeps
    /// over clients, repetitions, JSON and CSV results. Runs
    /// keel-tools (the keel-tools package); `keel bench --help` for more.
    #[command(disable_help_flag = true)]
    Bench(Tool),
    /// Write self-describing data streams, recording what the server
    /// acknowledged as stable, and check them after failures (genstream and
    /// checkstream). Runs keel-tools; `keel verify --help` for more.
    #[command(disable_help_flag = true)]
    Verify(Tool),
    /// Draw result files of keel bench as an HTML page with figures and
    /// tables, against the published numbers of Dell's NFS white papers
    /// (2012-2016) and a BeeGFS report (2015). Runs keel-tools; `keel
    /// report --help` for more.
    #[command(disable_help_flag = true)]
    Report(Tool),
    /// Check a configuration file and print what it would serve.
    CheckConfig {
        /// The configuration file (see keel.example.toml).
        file: PathBuf,
    },
    /// Ask the running server whether it is serving and healthy, since
    /// when, with what (while an export accepts Kerberos: the principal and
    /// keytab, GSS contexts, calls by flavor, authentication failures by
    /// cause). Exits 0 when healthy, 1 when it answers but is
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
    Stat(stat::StatArgs),
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
        cmd: Option<exports::ExportsCommand>,
    },
    /// The NFSv4.1 clients of the running server, like knfsd's
    /// /proc/fs/nfsd/clients: per client its ID, address, owner,
    /// principal, lease, sessions (connections, backchannel), opens, lock
    /// states and delegations. Fails on a server that serves no NFSv4.
    Clients {
        #[command(flatten)]
        server: AdminArgs,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The SSD cache tier of the running server: its devices, the modes of
    /// the exports, live statistics and the event log.
    #[command(subcommand)]
    Cache(cache::CacheCommand),
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
    Ha(ha::HaCommand),
    /// Tools for testing a running server.
    #[command(subcommand)]
    Debug(debug::DebugCommand),
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

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(t) => return tools::run("bench", t.args),
        Command::Verify(t) => return tools::run("verify", t.args),
        Command::Report(t) => return tools::run("report", t.args),
        Command::Serve(args) => serve::run(args),
        Command::CheckConfig { file } => check_config::run(&file),
        Command::Status { server, json, timeout } => return status::run(&server, json, timeout),
        Command::Stat(args) => stat::run(args),
        Command::Exports { server, json, cmd: None } => exports::list(&server, json),
        Command::Exports { cmd: Some(exports::ExportsCommand::Reload { server, json }), .. } => {
            exports::reload(&server, json)
        }
        Command::Clients { server, json } => clients::list(&server, json),
        Command::Cache(cmd) => cache::run(cmd),
        Command::Probe { config, address, timeout } => probe::run(config.as_deref(), &address, timeout),
        Command::Ha(cmd) => return ha::run(cmd),
        Command::Debug(debug::DebugCommand::Fault(cmd)) => debug::fault(cmd),
        Command::Manpages { dir } => manpages::write(&dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("keel: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Addresses as a comma-separated list.
fn list(addrs: &[SocketAddr]) -> String {
    addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
}

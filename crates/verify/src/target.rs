//! Where the streams live: a directory under an NFS export, or a local
//! directory; and the connections to it.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use keel_client::{ClientError, ConnectOptions, MountClient, Nfs3Client, RetryPolicy, RetryingConnection};
use keel_nfs3_proto::{Diropargs3, Lookup3Args, NfsFh3, NfsResult, Nfsstat3};
use serde::{Deserialize, Serialize};

/// NFS's port when `--server` names none.
pub const NFS_PORT: u16 = 2049;

/// The target options shared by `write` and `check`.
#[derive(clap::Args, Debug, Clone)]
pub struct TargetArgs {
    /// NFS server: HOST or HOST:PORT (port 2049 if left out; an IPv6 address with a port goes in brackets).
    #[arg(long, value_name = "HOST[:PORT]", conflicts_with = "local")]
    pub server: Option<String>,
    /// Exported path to mount, as the MOUNT protocol names it (with --server).
    #[arg(long, value_name = "PATH")]
    pub export: Option<String>,
    /// MOUNT port, when it is not the NFS port (Keel serves MOUNT on the NFS port).
    #[arg(long, value_name = "PORT")]
    pub mount_port: Option<u16>,
    /// Directory under the export holding the streams; `write` creates it.
    #[arg(long, value_name = "PATH", default_value = "keel-verify")]
    pub dir: String,
    /// A local directory instead of NFS (write and read with the local file
    /// system's own calls: pwrite, fsync, fdatasync).
    #[arg(long, value_name = "DIR")]
    pub local: Option<PathBuf>,
    /// AUTH_SYS uid of the calls.
    #[arg(long, default_value_t = 0)]
    pub uid: u32,
    /// AUTH_SYS gid of the calls.
    #[arg(long, default_value_t = 0)]
    pub gid: u32,
    /// Call from ordinary source ports even as root (mount's noresvport).
    /// By default, as root, calls come from reserved ports (below 1024),
    /// as the kernel client's do, which `secure` exports require.
    #[arg(long = "noresvport")]
    pub noresvport: bool,
    /// How long one attempt of a call waits for its reply before the
    /// connection is dropped and the call retransmitted (like mount's
    /// timeo; a dead server's connection is usually reset long before).
    #[arg(long, default_value = "60s", value_parser = keel_bench_format::units::parse_duration)]
    pub timeout: Duration,
}

/// A target as recorded in the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TargetSpec {
    Nfs {
        /// HOST:PORT as given (resolved again by `check`).
        server: String,
        export: String,
        mount_port: Option<u16>,
        /// Directory under the export.
        dir: String,
    },
    Local {
        /// Absolute.
        dir: PathBuf,
    },
}

impl std::fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TargetSpec::Nfs { server, export, dir, .. } => {
                write!(f, "nfs {server}:{export}")?;
                if !dir.is_empty() {
                    write!(f, " dir {dir}")?;
                }
                Ok(())
            }
            TargetSpec::Local { dir } => write!(f, "local {}", dir.display()),
        }
    }
}

impl TargetArgs {
    /// The target these options name, if they name one.
    pub fn spec(&self) -> anyhow::Result<Option<TargetSpec>> {
        match (&self.server, &self.local) {
            (Some(_), Some(_)) => bail!("--server and --local exclude each other"),
            (Some(server), None) => {
                let Some(export) = &self.export else { bail!("--server needs --export (the exported path)") };
                if !export.starts_with('/') {
                    bail!("--export {export:?}: an exported path is absolute");
                }
                // Check the address now, so a typo fails before anything is written.
                resolve(server, NFS_PORT)?;
                Ok(Some(TargetSpec::Nfs {
                    server: server.clone(),
                    export: export.clone(),
                    mount_port: self.mount_port,
                    dir: self.dir.trim_matches('/').to_string(),
                }))
            }
            (None, Some(dir)) => {
                if self.export.is_some() || self.mount_port.is_some() {
                    bail!("--export and --mount-port only go with --server");
                }
                let dir = std::path::absolute(dir).with_context(|| format!("{}", dir.display()))?;
                Ok(Some(TargetSpec::Local { dir }))
            }
            (None, None) => {
                if self.export.is_some() || self.mount_port.is_some() {
                    bail!("--export and --mount-port only go with --server");
                }
                Ok(None)
            }
        }
    }

    pub fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            auth: keel_client::auth_sys(self.uid, self.gid, &[]),
            reserved_port: !self.noresvport,
            call_timeout: self.timeout,
            ..ConnectOptions::default()
        }
    }
}

/// `HOST`, `HOST:PORT`, `ADDR`, `[ADDR]:PORT` → the first address.
pub fn resolve(server: &str, default_port: u16) -> anyhow::Result<SocketAddr> {
    if let Ok(addr) = server.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Ok(ip) = server.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, default_port));
    }
    let (host, port) = match server.rsplit_once(':') {
        Some((host, port)) => (host, port.parse::<u16>().map_err(|_| anyhow!("{server:?}: bad port {port:?}"))?),
        None => (server, default_port),
    };
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host:?}"))?
        .next()
        .ok_or_else(|| anyhow!("{host:?} has no address"))
}

/// How to reach the streams' directory over NFS.
#[derive(Debug, Clone)]
pub struct NfsTarget {
    pub addr: SocketAddr,
    pub mount_addr: SocketAddr,
    pub export: String,
    pub dir: String,
    pub opts: ConnectOptions,
    pub policy: RetryPolicy,
}

pub type Client = Nfs3Client<RetryingConnection>;

impl NfsTarget {
    pub fn new(spec: &TargetSpec, opts: ConnectOptions, retry_for: Duration) -> anyhow::Result<Self> {
        let TargetSpec::Nfs { server, export, mount_port, dir } = spec else {
            bail!("not an NFS target: {spec}");
        };
        let addr = resolve(server, NFS_PORT)?;
        let mount_addr = SocketAddr::new(addr.ip(), mount_port.unwrap_or(addr.port()));
        let policy = RetryPolicy { give_up_after: retry_for, ..RetryPolicy::default() };
        Ok(NfsTarget { addr, mount_addr, export: export.clone(), dir: dir.clone(), opts, policy })
    }

    /// A client on a connection of its own (reconnecting and retransmitting
    /// as a hard mount does) and the export's root handle.
    pub async fn connect(&self) -> anyhow::Result<(Client, NfsFh3)> {
        self.connect_inner().await.map_err(|e| keel_bench_format::secure::explain_refusal(e, &self.opts))
    }

    async fn connect_inner(&self) -> anyhow::Result<(Client, NfsFh3)> {
        let what = || format!("mounting {}:{}", self.mount_addr, self.export);
        if self.mount_addr == self.addr {
            return keel_client::mount_retrying(self.addr, &self.export, &self.opts, self.policy.clone())
                .await
                .with_context(what);
        }
        let mount_conn =
            RetryingConnection::connect(self.mount_addr, &self.opts, self.policy.clone()).await.with_context(what)?;
        let root = MountClient::new(mount_conn).mnt_root(self.export.as_str()).await.with_context(what)?;
        let conn = RetryingConnection::connect(self.addr, &self.opts, self.policy.clone())
            .await
            .with_context(|| format!("connecting to {}", self.addr))?;
        Ok((Nfs3Client::new(conn), root))
    }

    /// The streams' directory, created with its parents.
    pub async fn make_directory(&self, client: &Client, root: &NfsFh3) -> anyhow::Result<NfsFh3> {
        let mut fh = root.clone();
        for name in self.components() {
            fh = match lookup(client, &fh, name).await? {
                Some(found) => found,
                None => match client.create_dir(&fh, name, 0o755).await {
                    Ok(made) => made,
                    // Another writer made it first.
                    Err(ClientError::Nfs(Nfsstat3::Exist)) => {
                        lookup(client, &fh, name).await?.ok_or_else(|| anyhow!("{name:?} vanished"))?
                    }
                    Err(e) => return Err(e).with_context(|| format!("creating directory {name:?}")),
                },
            };
        }
        Ok(fh)
    }

    /// The streams' directory, if it exists.
    pub async fn find_directory(&self, client: &Client, root: &NfsFh3) -> anyhow::Result<Option<NfsFh3>> {
        let mut fh = root.clone();
        for name in self.components() {
            match lookup(client, &fh, name).await? {
                Some(found) => fh = found,
                None => return Ok(None),
            }
        }
        Ok(Some(fh))
    }

    fn components(&self) -> impl Iterator<Item = &str> {
        self.dir.split('/').filter(|c| !c.is_empty() && *c != ".")
    }
}

/// LOOKUP that says `None` for NOENT.
pub async fn lookup(client: &Client, dir: &NfsFh3, name: &str) -> anyhow::Result<Option<NfsFh3>> {
    let args = Lookup3Args { what: Diropargs3 { dir: dir.clone(), name: name.into() } };
    match client.lookup(&args).await.with_context(|| format!("LOOKUP {name:?}"))? {
        NfsResult::Ok(ok) => Ok(Some(ok.object)),
        NfsResult::Fail(Nfsstat3::Noent, _) => Ok(None),
        NfsResult::Fail(status, _) => Err(ClientError::Nfs(status)).with_context(|| format!("LOOKUP {name:?}")),
    }
}

/// The name of stream `i`'s file.
pub fn stream_name(i: u32) -> String {
    format!("stream.{i}")
}

/// `dir/stream.i` of a local target.
pub fn local_path(dir: &Path, i: u32) -> PathBuf {
    dir.join(stream_name(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses() {
        assert_eq!(resolve("127.0.0.1", 2049).unwrap(), "127.0.0.1:2049".parse().unwrap());
        assert_eq!(resolve("127.0.0.1:20490", 2049).unwrap(), "127.0.0.1:20490".parse().unwrap());
        assert_eq!(resolve("[::1]:7", 2049).unwrap(), "[::1]:7".parse().unwrap());
        assert_eq!(resolve("::1", 2049).unwrap(), "[::1]:2049".parse().unwrap());
        assert_eq!(resolve("localhost:5", 2049).unwrap().port(), 5);
        assert!(resolve("localhost:x", 2049).is_err());
    }
}

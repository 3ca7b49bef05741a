//! The local administration interface: a Unix socket, `keel.sock` in the
//! state directory (a link to the socket in /run/keel), through which the
//! `keel` command asks the running server (`keel status`, `keel stat`,
//! `keel exports`, `keel exports reload`, `keel debug fault`). Root only:
//! the socket is mode 0600 in a 0700 directory, and the peer's uid is
//! checked on every connection.
//!
//! The protocol (docs/admin-protocol.md): one JSON object per line each
//! way. A request carries `"version": 1` and a `"command"`; the answer is
//! `{"version": 1, "ok": true, "result": ...}` or
//! `{"version": 1, "ok": false, "error": "..."}`. A server refuses a
//! request of a version it does not speak, saying which it speaks.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use keel_store::Store;
use keel_store_local::{Fault, FaultAction, FaultPoint, LocalStore};
use tokio::sync::mpsc::UnboundedSender;

use crate::cache::{self, Served};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, watch};

use crate::reload::{ReloadOutcome, Reloader};
use crate::stats::ServerStats;

pub const SOCKET_NAME: &str = "keel.sock";
pub const PROTOCOL_VERSION: u32 = 1;
/// Longest request line accepted.
const REQUEST_BYTES_MAX: usize = 64 << 10;
/// Administration connections served at once.
const CONNECTIONS_MAX: usize = 16;
/// How long a connection may wait between requests.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// What the `keel` command can ask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// Is it serving, since when, with what. (Variants are structs, even
    /// empty ones: serde refuses unknown fields only in those.)
    Status {},
    /// Arms a storage fault (only with `fault_injection = true`).
    FaultArm {
        point: FaultPointName,
        /// Only this inode number; none: any object.
        #[serde(default)]
        inode: Option<u64>,
        /// Fail with this errno; none: panic the worker instead (unless
        /// `stall_ms`).
        #[serde(default)]
        errno: Option<i32>,
        /// Stall the call this many milliseconds, then go on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stall_ms: Option<u32>,
        count: u32,
    },
    /// Disarms every fault.
    FaultClear {},
    /// Lists the armed faults.
    FaultList {},
    /// Every statistic now (a `keel_stats::Snapshot`).
    Stats {},
    /// The exports served now, with their client lists.
    Exports {},
    /// Reads the configuration file again and applies its exports.
    ExportsReload {
        /// The file the caller means (absolute); the reload is refused
        /// unless it is the server's own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<String>,
    },
    /// The cache tier: devices, log, per-export modes and counters (the
    /// `cache` part of `stats`).
    CacheList {},
    /// Adds a cache device (a block device or a file on a fast file
    /// system). Answers progress lines while the log moves.
    CacheAdd { device: String },
    /// Removes a cache device; the dirty data on it is destaged first
    /// (progress lines: dirty bytes left).
    CacheRemove { device: String },
    /// Sets an export's cache mode (by id or path); leaving write-back
    /// flushes (progress lines).
    CacheMode { export: String, mode: String },
    /// The cache's event log, oldest first.
    CacheEvents {},
    /// Destages every dirty byte of the log to the back end and empties
    /// the log (progress lines: dirty bytes left).
    CacheFlush {},
    /// The NFSv4.1 clients and their state (as knfsd's
    /// `/proc/fs/nfsd/clients/*/info`).
    Nfs4Clients {},
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum FaultPointName {
    Pwrite,
    Fsync,
}

#[derive(Debug, Serialize, Deserialize)]
struct Envelope<T> {
    version: u32,
    #[serde(flatten)]
    body: T,
}

#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    version: u32,
    #[serde(default)]
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// `keel status`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    pub version: String,
    /// Seconds since the Unix epoch.
    pub started_unix: u64,
    pub uptime_seconds: u64,
    /// The write verifier now, in hex: it changes at every start and after
    /// a write-back error.
    pub write_verifier: String,
    pub listen: Vec<String>,
    pub exports: Vec<ExportStatus>,
    /// Objects held open in the inode cache.
    pub cached_inodes: usize,
    /// Whether the server is healthy, and what is wrong if not (see
    /// docs/admin-protocol.md, "Health").
    #[serde(default)]
    pub healthy: bool,
    #[serde(default)]
    pub problems: Vec<String>,
    /// The configuration file, if the server was started with one.
    #[serde(default)]
    pub config_file: Option<String>,
    /// Open connections, and the distinct client hosts they come from.
    #[serde(default)]
    pub connections: u64,
    #[serde(default)]
    pub clients: u64,
    #[serde(default)]
    pub workers: u64,
    #[serde(default)]
    pub workers_busy: u64,
    /// NFSv4.1's clients and sessions, if the server serves NFSv4.
    #[serde(default)]
    pub nfs4: Option<Nfs4Status>,
    /// Kerberos, while an export accepts a Kerberos flavor.
    #[serde(default)]
    pub kerberos: Option<KerberosStatus>,
}

/// RPCSEC_GSS in `keel status`: the key in use, the contexts held, and
/// the counts `keel stat` and the metrics have too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KerberosStatus {
    pub principal: String,
    /// The keytab the key was read from at start.
    pub keytab: String,
    /// GSS contexts held now.
    pub contexts: u64,
    /// Calls since the start by the flavor of their credential (`none`,
    /// `sys`, `krb5`, `krb5i`, `krb5p`).
    pub calls_by_flavor: Vec<keel_stats::FlavorCount>,
    /// Calls with an RPCSEC_GSS credential refused or dropped, by cause
    /// (every cause, in a fixed order).
    pub auth_failures: Vec<keel_stats::AuthFailureCount>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Nfs4Status {
    /// Confirmed clients (courtesy ones included), and those of them past
    /// their lease.
    pub clients: u64,
    pub courtesy_clients: u64,
    pub sessions: u64,
    /// Seconds left of the grace period after the start; none once over.
    pub grace_remaining_seconds: Option<u64>,
}

/// One NFSv4.1 client as `nfs4-clients` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Nfs4ClientListing {
    /// The client ID, in hex (as knfsd's `clientid`).
    pub clientid: String,
    pub address: String,
    /// The client's `co_ownerid`, printable (other bytes escaped `\xNN`).
    pub owner: String,
    /// `none`, `sys:UID@MACHINE` or `krb5:PRINCIPAL`.
    pub principal: String,
    /// The implementation the client names: `DOMAIN NAME`.
    pub implementation: Option<String>,
    /// The highest minor version of NFSv4 its COMPOUNDs used (1 or 2), as
    /// knfsd's `minor version`.
    pub minor_version: u32,
    /// `unconfirmed`, `confirmed` or `courtesy` (its lease expired; it
    /// keeps its state until a conflict).
    pub status: String,
    /// Seconds left of its lease (confirmed), or before a courtesy client
    /// is let go.
    pub lease_remaining_seconds: Option<u64>,
    /// Its backchannel as last found: `unknown`, `up`, `down` or `fault`.
    pub callback: String,
    pub sessions: Vec<Nfs4SessionListing>,
    pub open_owners: u64,
    pub opens: u64,
    pub lock_owners: u64,
    pub lock_states: u64,
    pub lock_ranges: u64,
    pub delegations: u64,
    /// Of which write delegations.
    #[serde(default)]
    pub write_delegations: u64,
    pub revoked_delegations: u64,
    pub reclaim_complete: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Nfs4SessionListing {
    /// The session ID, in hex.
    pub id: String,
    pub slots: u64,
    /// Connections bound to it, and those of them carrying its backchannel.
    pub connections: u64,
    pub back_connections: u64,
}

/// What `nfs4-clients` answers on a server that serves no NFSv4.
pub const NFS4_NOT_SERVED: &str =
    "this server does not serve NFSv4: it has no NFSv4 clients (add \"4.1\" or \"4.2\" to nfs_versions in [server])";

fn nfs4_listing(c: &keel_nfs4_state::ClientInfo) -> Nfs4ClientListing {
    use keel_nfs4_state::{CallbackState, LeaseState, Principal};
    let printable = |b: &[u8]| b.escape_ascii().to_string();
    let (status, remaining) = match c.lease {
        LeaseState::Unconfirmed => ("unconfirmed", None),
        LeaseState::Active { expires_in } => ("confirmed", Some(expires_in.as_secs())),
        LeaseState::Courtesy { ends_in, .. } => ("courtesy", Some(ends_in.as_secs())),
    };
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    Nfs4ClientListing {
        clientid: format!("{:#018x}", c.clientid.0),
        address: c.addr.to_string(),
        owner: printable(&c.owner),
        principal: match &c.principal {
            Principal::None => "none".into(),
            Principal::Sys { uid, machine } => format!("sys:{uid}@{}", printable(machine)),
            Principal::Gss { name } => format!("krb5:{}", printable(name)),
        },
        implementation: c.implementation.as_ref().map(|(domain, name)| format!("{domain} {name}")),
        minor_version: c.minor_version,
        status: status.into(),
        lease_remaining_seconds: remaining,
        callback: match c.callback {
            CallbackState::Unknown => "unknown",
            CallbackState::Up => "up",
            CallbackState::Down => "down",
            CallbackState::Fault => "fault",
        }
        .into(),
        sessions: c
            .session_list
            .iter()
            .map(|s| Nfs4SessionListing {
                id: hex(&s.id.0),
                slots: s.slots as u64,
                connections: s.connections as u64,
                back_connections: s.back_connections as u64,
            })
            .collect(),
        open_owners: c.open_owners as u64,
        opens: c.opens as u64,
        lock_owners: c.lock_owners as u64,
        lock_states: c.lock_states as u64,
        lock_ranges: c.lock_ranges as u64,
        delegations: c.delegations as u64,
        write_delegations: c.write_delegations as u64,
        revoked_delegations: c.revoked_delegations as u64,
        reclaim_complete: c.reclaim_complete,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportStatus {
    pub id: u32,
    pub path: String,
    pub fsid: String,
}

/// One export as `exports` lists it (like `exportfs -v`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportListing {
    pub id: u32,
    pub path: String,
    pub fsid: String,
    /// Whether the export is a subdirectory of its file system.
    pub subtree: bool,
    pub clients: Vec<ClientListing>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientListing {
    pub host: String,
    /// exports(5) style: `rw,sync,no_root_squash,secure,sec=sys,anonuid=65534,anongid=65534`.
    pub options: String,
}

/// An armed fault as `fault-list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultStatus {
    pub point: FaultPointName,
    pub inode: Option<u64>,
    pub errno: Option<i32>,
    pub stall_ms: Option<u32>,
    pub count: u32,
}

/// A stall fault holds a worker this long at most (a minute): a test of a
/// hung device, not a way to hang the server for good.
const STALL_MS_MAX: u32 = 60_000;

/// Export roots that take longer than this to answer `stat` make the
/// server unhealthy (a hung device or network file system under them).
const EXPORT_ROOT_TIMEOUT: Duration = Duration::from_secs(5);

/// What the administration interface answers from.
pub struct AdminState {
    pub served: Arc<Served>,
    pub state_dir: PathBuf,
    pub started: SystemTime,
    pub listen: Vec<String>,
    pub fault_injection: bool,
    pub stats: Arc<ServerStats>,
    pub reloader: Arc<Reloader>,
    /// The keytab the Kerberos key was read from at start, if one was.
    pub keytab: Option<PathBuf>,
}

impl AdminState {
    fn store(&self) -> &LocalStore {
        self.served.inner()
    }

    /// Runs a cache operation that may take long (it destages) on a
    /// blocking thread, sending its progress (dirty bytes left) on
    /// `progress`.
    async fn cache_op(
        self: &Arc<Self>,
        progress: UnboundedSender<serde_json::Value>,
        op: impl FnOnce(&Served, &mut dyn FnMut(u64)) -> Result<(), keel_cache::CacheError> + Send + 'static,
    ) -> Result<serde_json::Value, String> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut p = cache::Progress::new(|dirty| {
                let _ = progress.send(serde_json::json!({ "dirty_bytes": dirty }));
            });
            op(&me.served, &mut |dirty| p.tick(dirty)).map_err(|e| e.to_string())?;
            cache::write_record(&me.state_dir, &me.served)
                .map_err(|e| format!("done, but the device record could not be written: {e}"))?;
            Ok(to_json(cache::snapshot(&me.served, &me.stats.export_names())))
        })
        .await
        .map_err(|e| format!("the cache operation failed: {e}"))?
    }

    async fn answer(
        self: &Arc<Self>,
        request: Request,
        progress: UnboundedSender<serde_json::Value>,
    ) -> Result<serde_json::Value, String> {
        match request {
            Request::CacheList {} => Ok(to_json(cache::snapshot(&self.served, &self.stats.export_names()))),
            Request::CacheEvents {} => Ok(to_json(cache::events(&self.served))),
            Request::CacheAdd { device } => {
                self.cache_op(progress, move |s, p| s.shared().add_device(Path::new(&device), p)).await
            }
            Request::CacheRemove { device } => {
                self.cache_op(progress, move |s, p| s.shared().remove_device(&device, p)).await
            }
            Request::CacheFlush {} => self.cache_op(progress, |s, p| s.shared().flush("keel cache flush", p)).await,
            Request::CacheMode { export, mode } => {
                let (id, path) = cache::find_export(&self.stats.export_names(), &export)?;
                let mode = keel_cache::CacheMode::parse(&mode).map_err(|e| e.to_string())?;
                self.cache_op(progress, move |s, p| s.shared().set_mode(id, &path, mode, p)).await
            }
            Request::Status {} => Ok(to_json(self.status().await)),
            Request::Stats {} => Ok(to_json(self.stats.snapshot())),
            Request::Exports {} => Ok(to_json(self.exports())),
            Request::Nfs4Clients {} => match &self.stats.nfs4 {
                Some(nfs4) => Ok(to_json(nfs4.clients().iter().map(nfs4_listing).collect::<Vec<_>>())),
                None => Err(NFS4_NOT_SERVED.into()),
            },
            Request::ExportsReload { file } => {
                let me = self.clone();
                crate::notify::notify("RELOADING=1\nSTATUS=reloading exports");
                let outcome: Result<ReloadOutcome, String> =
                    tokio::task::spawn_blocking(move || me.reloader.reload(&me.stats.reloads, file.as_deref()))
                        .await
                        .map_err(|e| format!("the reload failed: {e}"))?;
                crate::notify::notify("READY=1\nSTATUS=serving");
                outcome.map(to_json)
            }
            Request::FaultArm { point, inode, errno, stall_ms, count } => {
                self.faults_allowed()?;
                let point = match point {
                    FaultPointName::Pwrite => FaultPoint::Pwrite,
                    FaultPointName::Fsync => FaultPoint::Fsync,
                };
                let action = match (errno, stall_ms) {
                    (Some(_), Some(_)) => return Err("a fault fails a call or stalls it, not both".into()),
                    (None, Some(ms)) if (1..=STALL_MS_MAX).contains(&ms) => FaultAction::Stall(ms),
                    (None, Some(ms)) => return Err(format!("a stall of {ms} ms: it is 1 to {STALL_MS_MAX} ms")),
                    (Some(e), None) if (1..4096).contains(&e) => FaultAction::Fail(e),
                    (Some(e), None) => return Err(format!("errno {e} is not an error number (1 to 4095)")),
                    (None, None) => FaultAction::Panic,
                };
                self.store().faults().arm(Fault { point, inode, action, count })?;
                tracing::warn!(?point, inode, ?action, count, "fault armed through the administration socket");
                Ok(serde_json::Value::Null)
            }
            Request::FaultClear {} => {
                self.faults_allowed()?;
                Ok(serde_json::json!({ "cleared": self.store().faults().clear() }))
            }
            Request::FaultList {} => {
                self.faults_allowed()?;
                let list: Vec<FaultStatus> = self.store().faults().armed().iter().map(fault_status).collect();
                Ok(to_json(list))
            }
        }
    }

    fn faults_allowed(&self) -> Result<(), String> {
        if self.fault_injection {
            Ok(())
        } else {
            Err("fault injection is off: it is for tests, and needs fault_injection = true in [server]".into())
        }
    }

    fn exports(&self) -> Vec<ExportListing> {
        let open = self.store().open_exports();
        self.stats
            .exports
            .exports()
            .iter()
            .map(|s| ExportListing {
                id: s.export.id,
                path: s.export.path.display().to_string(),
                fsid: format!("{:#x}", s.export.fsid),
                subtree: open.iter().any(|e| e.id == s.export.id && e.is_subtree()),
                clients: s
                    .rules
                    .iter()
                    .map(|r| ClientListing {
                        host: r.host.to_string(),
                        options: crate::config::option_list(&r.options),
                    })
                    .collect(),
            })
            .collect()
    }

    /// What makes the server unhealthy, if anything: a worker thread gone,
    /// an export root that does not answer, every worker stuck in one call.
    async fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let pool = self.stats.pool.usage();
        if pool.workers_alive < pool.workers {
            problems.push(format!(
                "only {} of {} worker threads are running (see the log for the panic)",
                pool.workers_alive, pool.workers
            ));
        }
        for export in self.store().open_exports().iter() {
            let path = export.path.clone();
            let checked = tokio::task::spawn_blocking(move || std::fs::metadata(&path));
            match tokio::time::timeout(EXPORT_ROOT_TIMEOUT, checked).await {
                Ok(Ok(Ok(meta))) if meta.is_dir() => {}
                Ok(Ok(Ok(_))) => problems.push(format!(
                    "export {} root {} is no longer a directory",
                    export.id,
                    export.path.display()
                )),
                Ok(Ok(Err(e))) => problems.push(format!("export {} root {}: {e}", export.id, export.path.display())),
                Ok(Err(e)) => problems.push(format!("export {} root {}: {e}", export.id, export.path.display())),
                Err(_) => problems.push(format!(
                    "export {} root {} did not answer within {} s",
                    export.id,
                    export.path.display(),
                    EXPORT_ROOT_TIMEOUT.as_secs()
                )),
            }
        }
        problems.extend(cache::problems(&self.served, &self.stats.export_names()));
        let calls = self.stats.calls.snapshot();
        let workers = pool.workers as u64;
        if workers > 0 && calls.stuck >= workers {
            problems.push(format!(
                "all {workers} workers are stuck: each has run one call for more than {} s",
                keel_stats::STUCK_AFTER_SECONDS
            ));
        }
        problems
    }

    /// Kerberos's part of the status: none unless the server has a key
    /// and an export (after the last reload too) accepts a Kerberos
    /// flavor.
    fn kerberos_status(&self) -> Option<KerberosStatus> {
        let gss = self.stats.dispatcher.gss()?;
        let keytab = self.keytab.as_ref()?;
        if !self.stats.exports.exports().iter().any(|s| keel_exports::wants_kerberos(&s.rules)) {
            return None;
        }
        let gss_now = self.stats.gss_snapshot();
        Some(KerberosStatus {
            principal: gss.principal().to_owned(),
            keytab: keytab.display().to_string(),
            contexts: gss_now.contexts,
            calls_by_flavor: self.stats.calls.flavors(),
            auth_failures: gss_now.failures,
        })
    }

    async fn status(&self) -> Status {
        let since = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let problems = self.problems().await;
        let pool = self.stats.pool.usage();
        let table = self.stats.conns.state();
        let mut hosts: Vec<std::net::IpAddr> = table.open.iter().map(|c| c.peer.ip()).collect();
        hosts.sort();
        hosts.dedup();
        Status {
            healthy: problems.is_empty(),
            problems,
            config_file: self.reloader.file().map(|f| f.display().to_string()),
            connections: table.open.len() as u64,
            clients: hosts.len() as u64,
            workers: pool.workers as u64,
            workers_busy: pool.workers_busy as u64,
            nfs4: self.stats.nfs4.as_ref().map(|nfs4| {
                let st = nfs4.state_stats();
                Nfs4Status {
                    clients: (st.clients - st.unconfirmed_clients) as u64,
                    courtesy_clients: st.courtesy_clients as u64,
                    sessions: st.sessions as u64,
                    grace_remaining_seconds: st.grace.active.then_some(st.grace.remaining.as_secs()),
                }
            }),
            kerberos: self.kerberos_status(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").into(),
            started_unix: since(self.started),
            uptime_seconds: SystemTime::now().duration_since(self.started).unwrap_or_default().as_secs(),
            write_verifier: format!("{:016x}", u64::from_be_bytes(self.served.write_verifier())),
            listen: self.listen.clone(),
            exports: self
                .store()
                .exports()
                .iter()
                .map(|e| ExportStatus { id: e.id, path: e.path.display().to_string(), fsid: format!("{:#x}", e.fsid) })
                .collect(),
            cached_inodes: self.store().cached_inodes(),
        }
    }
}

fn fault_status(f: &Fault) -> FaultStatus {
    FaultStatus {
        point: match f.point {
            FaultPoint::Pwrite => FaultPointName::Pwrite,
            FaultPoint::Fsync => FaultPointName::Fsync,
        },
        inode: f.inode,
        errno: match f.action {
            FaultAction::Fail(e) => Some(e),
            FaultAction::Panic | FaultAction::Stall(_) => None,
        },
        stall_ms: match f.action {
            FaultAction::Stall(ms) => Some(ms),
            FaultAction::Fail(_) | FaultAction::Panic => None,
        },
        count: f.count,
    }
}

fn to_json<T: Serialize>(v: T) -> serde_json::Value {
    serde_json::to_value(v).expect("plain data serializes")
}

/// Where the server binds its socket: a directory of the server's own on
/// the runtime file system. `STATE_DIR/keel.sock`, where the `keel`
/// command looks, is a symbolic link to it, made once and kept: binding a
/// socket makes an inode, which a full file system refuses (a failover's
/// survivor on a full shared disk), and the link needs nothing new at the
/// next start. Each state directory has its own socket there, named after
/// the directory's path (the same on both nodes of an HA pair).
const RUNTIME_DIR: &str = "/run/keel";

/// Binds the administration socket of the server whose state directory is
/// `state_dir` (which this process has locked: a socket left there is a
/// dead server's, and is replaced). One that answers all the same belongs
/// to another server, which is refused.
pub fn bind(state_dir: &Path) -> anyhow::Result<UnixListener> {
    let link = state_dir.join(SOCKET_NAME);
    let path = match runtime_socket(state_dir) {
        Ok(path) => path,
        Err(e) => {
            tracing::warn!(error = %e, "cannot use {RUNTIME_DIR}: the administration socket is made in the state directory");
            link.clone()
        }
    };
    clear_stale(&path, state_dir)?;
    let listener = UnixListener::bind(&path).with_context(|| format!("cannot listen on {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    if path != link {
        link_socket(&link, &path)?;
    }
    Ok(listener)
}

/// Removes the socket a server that is gone left at `path`.
fn clear_stale(path: &Path, state_dir: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() || meta.file_type().is_symlink() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                bail!(
                    "another keel is running with the state directory {} (its socket {} answers)",
                    state_dir.display(),
                    path.display()
                );
            }
            std::fs::remove_file(path).with_context(|| format!("cannot remove the stale socket {}", path.display()))
        }
        Ok(_) => bail!("{} exists and is not a socket; remove it", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot examine {}", path.display()))),
    }
}

/// The socket of `state_dir` in [`RUNTIME_DIR`], which is made (mode
/// 0700) if needed.
fn runtime_socket(state_dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let dir = Path::new(RUNTIME_DIR);
    match std::fs::DirBuilder::new().mode(keel_store::state_file::DIR_MODE).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let meta = std::fs::symlink_metadata(dir)?;
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0);
    if !meta.is_dir() || meta.uid() != me {
        return Err(std::io::Error::other(format!("{RUNTIME_DIR} is not a directory of this user")));
    }
    // Others may have made it (the OCF agent keeps its pid files there).
    keel_store::state_file::make_private(dir)?;
    runtime_socket_name(state_dir)
}

/// The name of `state_dir`'s socket in [`RUNTIME_DIR`]: after the FNV-1a
/// hash of the directory's canonical path, stable across builds and nodes.
fn runtime_socket_name(state_dir: &Path) -> std::io::Result<PathBuf> {
    let canonical = std::fs::canonicalize(state_dir)?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    Ok(Path::new(RUNTIME_DIR).join(format!("admin-{h:016x}.sock")))
}

/// Makes `link` a symbolic link to the socket at `socket`, unless it is
/// one already. A failure (a full file system, the first time) is logged:
/// the server serves on, and the `keel` command finds `socket` itself.
fn link_socket(link: &Path, socket: &Path) -> anyhow::Result<()> {
    if std::fs::read_link(link).is_ok_and(|to| to == socket) {
        return Ok(());
    }
    match std::fs::symlink_metadata(link) {
        // A socket an older version bound there, or a link elsewhere.
        Ok(meta) if meta.file_type().is_socket() || meta.file_type().is_symlink() => {
            std::fs::remove_file(link).with_context(|| format!("cannot remove the stale socket {}", link.display()))?
        }
        Ok(_) => bail!("{} exists and is not a socket; remove it", link.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(anyhow::Error::new(e).context(format!("cannot examine {}", link.display()))),
    }
    if let Err(e) = std::os::unix::fs::symlink(socket, link) {
        tracing::error!(
            error = %e,
            link = %link.display(),
            socket = %socket.display(),
            "cannot link the state directory to the administration socket: the keel command finds the socket \
             itself, other clients must be given its path"
        );
    }
    Ok(())
}

/// Removes the socket [`bind`] made (the link in the state directory
/// stays, for the next start).
pub fn unbind(state_dir: &Path) {
    let link = state_dir.join(SOCKET_NAME);
    let socket = std::fs::read_link(&link).unwrap_or(link);
    let _ = std::fs::remove_file(socket);
}

/// Serves administration connections until shutdown.
pub async fn serve(listener: UnixListener, state: Arc<AdminState>, mut shutdown: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "administration socket accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!("administration connection refused: {CONNECTIONS_MAX} are open");
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = serve_connection(stream, &state).await {
                tracing::debug!(error = %e, "administration connection ended");
            }
        });
    }
}

async fn serve_connection(stream: UnixStream, state: &Arc<AdminState>) -> std::io::Result<()> {
    let uid = stream.peer_cred()?.uid();
    let (rd, mut wr) = stream.into_split();
    if uid != 0 {
        tracing::warn!(uid, "administration request from a non-root user refused");
        return wr.write_all(&failure("the administration interface is for root only".into())).await;
    }
    let mut rd = tokio::io::BufReader::new(rd);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limited = (&mut rd).take(REQUEST_BYTES_MAX as u64 + 1);
        let n = match tokio::time::timeout(IDLE_TIMEOUT, read_line(limited, &mut line)).await {
            Ok(r) => r?,
            Err(_) => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        if line.last() != Some(&b'\n') {
            let why = format!("request longer than {REQUEST_BYTES_MAX} bytes, or not ended by a newline");
            return wr.write_all(&failure(why)).await;
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let answer = handle(&line, state, tx);
        tokio::pin!(answer);
        let out = loop {
            tokio::select! {
                out = &mut answer => break out,
                Some(p) = rx.recv() => wr.write_all(&progress_line(p)).await?,
            }
        };
        wr.write_all(&out).await?;
    }
}

/// A line sent before the answer of a long operation.
fn progress_line(progress: serde_json::Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(&serde_json::json!({ "version": PROTOCOL_VERSION, "progress": progress }))
        .expect("plain data serializes");
    out.push(b'\n');
    out
}

async fn read_line(mut rd: impl tokio::io::AsyncBufRead + Unpin, line: &mut Vec<u8>) -> std::io::Result<usize> {
    rd.read_until(b'\n', line).await
}

/// One request line to one answer line (progress goes to `progress`).
async fn handle(line: &[u8], state: &Arc<AdminState>, progress: UnboundedSender<serde_json::Value>) -> Vec<u8> {
    let mut object = match serde_json::from_slice::<serde_json::Value>(line) {
        Ok(serde_json::Value::Object(map)) => map,
        Ok(_) => return failure("not a JSON object".into()),
        Err(e) => return failure(format!("not a JSON object: {e}")),
    };
    match object.remove("version").map(|v| v.as_u64()) {
        Some(Some(v)) if v == u64::from(PROTOCOL_VERSION) => {}
        Some(Some(v)) => {
            return failure(format!("protocol version {v} is not served: this server speaks {PROTOCOL_VERSION}"));
        }
        _ => return failure("the request has no \"version\" number".into()),
    }
    // Without the envelope, so that unknown fields are refused (serde
    // does not refuse them through a flattened field).
    let request: Request = match serde_json::from_value(serde_json::Value::Object(object)) {
        Ok(r) => r,
        Err(e) => return failure(format!("bad request: {e}")),
    };
    match state.answer(request, progress).await {
        Ok(result) => encode(&Answer { version: PROTOCOL_VERSION, ok: true, result: Some(result), error: None }),
        Err(e) => failure(e),
    }
}

fn failure(error: String) -> Vec<u8> {
    encode(&Answer { version: PROTOCOL_VERSION, ok: false, result: None, error: Some(error) })
}

fn encode(answer: &Answer) -> Vec<u8> {
    let mut out = serde_json::to_vec(answer).expect("plain data serializes");
    out.push(b'\n');
    out
}

/// The socket of the server whose state directory is `state_dir`: its
/// socket in [`RUNTIME_DIR`] if there is one (so the `keel` command does not
/// depend on the link, which a full file system may not have let the
/// server make), else `STATE_DIR/keel.sock`.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    runtime_socket_name(state_dir).ok().filter(|p| p.exists()).unwrap_or_else(|| state_dir.join(SOCKET_NAME))
}

/// Asks the server listening on `socket` (the `keel` command's side).
pub fn call(socket: &Path, request: &Request) -> anyhow::Result<serde_json::Value> {
    call_with_progress(socket, request, Some(Duration::from_secs(30)), |_| {})
}

/// [`call`], for an operation that may take long: `on_progress` gets each
/// progress line; `timeout` bounds the wait for each line (none: no
/// bound).
pub fn call_with_progress(
    socket: &Path,
    request: &Request,
    timeout: Option<Duration>,
    mut on_progress: impl FnMut(&serde_json::Value),
) -> anyhow::Result<serde_json::Value> {
    let mut stream = std::os::unix::net::UnixStream::connect(socket).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                " (is keel running with this state directory? give --state-dir or --config)"
            }
            std::io::ErrorKind::PermissionDenied => " (the administration interface is for root only)",
            _ => "",
        };
        anyhow::anyhow!("cannot reach keel at {}: {e}{hint}", socket.display())
    })?;
    stream.set_read_timeout(timeout)?;
    let mut line = serde_json::to_vec(&Envelope { version: PROTOCOL_VERSION, body: request })?;
    line.push(b'\n');
    stream.write_all(&line)?;
    let mut reader = BufReader::new(&stream);
    let mut reply = Vec::new();
    loop {
        reply.clear();
        (&mut reader).take(16 << 20).read_until(b'\n', &mut reply)?;
        match serde_json::from_slice::<serde_json::Value>(&reply) {
            Ok(v) if v.get("progress").is_some() => on_progress(&v["progress"]),
            _ => break,
        }
    }
    let answer: Answer = serde_json::from_slice(&reply).with_context(|| {
        format!("keel answered something that is not the protocol: {:?}", String::from_utf8_lossy(&reply))
    })?;
    if answer.ok {
        Ok(answer.result.unwrap_or(serde_json::Value::Null))
    } else {
        // The server's words, for the command's `keel: ` to begin.
        bail!("{}", answer.error.unwrap_or_else(|| "the server refused, giving no reason".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_unknown_ones_are_refused() {
        let r = Request::FaultArm {
            point: FaultPointName::Fsync,
            inode: Some(7),
            errno: Some(5),
            stall_ms: None,
            count: 1,
        };
        let text = serde_json::to_string(&Envelope { version: 1, body: &r }).unwrap();
        assert_eq!(text, r#"{"version":1,"command":"fault-arm","point":"fsync","inode":7,"errno":5,"count":1}"#);
        let back: Envelope<Request> = serde_json::from_str(&text).unwrap();
        assert_eq!(back.body, r);
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let state = test_state();
        let answer = |line: &str| -> serde_json::Value {
            serde_json::from_slice(&rt.block_on(handle(
                format!("{line}\n").as_bytes(),
                &state,
                tokio::sync::mpsc::unbounded_channel().0,
            )))
            .unwrap()
        };
        assert_eq!(answer(r#"{"version":1,"command":"status"}"#)["result"]["listen"][0], "127.0.0.1:2049");
        let refused = |line: &str| answer(line)["error"].as_str().unwrap().to_string();
        assert!(refused(r#"{"version":1,"command":"format-disk"}"#).contains("unknown variant"));
        assert!(refused(r#"{"version":1,"command":"status","x":1}"#).contains("unknown field"));
        assert!(refused(r#"{"version":"1","command":"status"}"#).contains("version"));
        assert!(refused(r#"[1]"#).contains("not a JSON object"));
        assert_eq!(answer(r#"{"version":1,"command":"status"}"#)["result"]["healthy"], true);
        assert_eq!(answer(r#"{"version":1,"command":"exports"}"#)["result"], serde_json::json!([]));
        assert!(refused(r#"{"version":1,"command":"exports-reload"}"#).contains("without a configuration file"));
        let stats = answer(r#"{"version":1,"command":"stats"}"#);
        assert_eq!(stats["result"]["calls"]["programs"][0]["name"], "nfs");
    }

    /// A server with no exports, listeners or workers.
    fn test_state() -> Arc<AdminState> {
        use keel_exports::ExportTable;
        use keel_rpc::{Dispatcher, ReplyCache};

        use crate::stats::{ReloadCounts, ServerStats};
        let key = keel_store_local::HandleKey::from_bytes([1; 16]);
        let store = Arc::new(LocalStore::new(Vec::new(), key.clone(), 16).unwrap());
        let served = Arc::new(keel_cache::CacheStore::open(store, &keel_cache::CacheConfig::default()).unwrap());
        let exports = Arc::new(ExportTable::new(served.clone(), Vec::new()));
        let calls = keel_stats::CallStats::new(&crate::stats::programs());
        let stats = Arc::new(ServerStats {
            calls: calls.clone(),
            exports: exports.clone(),
            dispatcher: Arc::new(Dispatcher::new(Vec::new(), ReplyCache::new(16, 1 << 20)).unwrap()),
            conns: keel_transport::Connections::new(4, Duration::from_secs(60), Duration::from_secs(60)),
            budget: keel_transport::Budget::new(64 << 20, 16 << 20),
            pool: keel_transport::PoolProbe::none(),
            started: SystemTime::now(),
            reloads: ReloadCounts::default(),
            nfs4: None,
        });
        let config = crate::config::Config {
            server: crate::config::ServerConfig::default(),
            exports: Vec::new(),
            cache: Default::default(),
            ha: false,
            warnings: Vec::new(),
        };
        let reloader = Reloader::new(None, Default::default(), key, exports, calls, config);
        Arc::new(AdminState {
            served,
            state_dir: std::env::temp_dir(),
            started: SystemTime::now(),
            listen: vec!["127.0.0.1:2049".into()],
            fault_injection: false,
            stats,
            reloader: Arc::new(reloader),
            keytab: None,
        })
    }
}

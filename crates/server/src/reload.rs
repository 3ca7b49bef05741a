//! Changing exports without a restart (`keel exports reload`, SIGHUP):
//! the configuration file is read and validated whole first, with exactly
//! the checks of a start (`crate::validate`; a file with any problem
//! changes nothing, and the answer says why), then exports are added,
//! removed and changed by id while clients stay connected.
//!
//! - A new id is opened and served.
//! - A removed id is no longer served: its handles are stale (clients get
//!   NFS3ERR_STALE, MNT of its path MNT3ERR_NOENT); the others notice
//!   nothing.
//! - A changed client list (or options) applies from the next call on.
//! - An id whose `path` or `fsid` changed is refused: the id is part of
//!   every handle clients hold, and would then name another directory.
//! - `[ha] enabled` cannot change while serving: the reload is refused.
//! - `[server]` keys cannot change while serving (listeners, workers,
//!   state, limits): a change is reported as needing a restart and not
//!   applied; the exports are reloaded all the same.
//!
//! Calls in flight finish with the exports they started with.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use keel_cache::CacheMode;
use keel_exports::ExportTable;
use keel_stats::CallStats;
use keel_store_local::{Export, ExportSpec, HandleKey};
use serde::{Deserialize, Serialize};

use crate::config::describe_options;
use crate::config::{self, Config, ExportConfig, ServerConfig};
use crate::stats::ReloadCounts;
use crate::validate;

/// Command-line options that override the configuration file; a reload
/// applies them again, so they are not mistaken for changes.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Vec<std::net::SocketAddr>,
    pub portmap: Option<config::PortmapMode>,
    pub workers: Option<usize>,
    pub log_level: Option<config::LogLevel>,
    pub state_dir: Option<PathBuf>,
}

impl Overrides {
    pub fn apply(&self, s: &mut ServerConfig) {
        if !self.listen.is_empty() {
            s.listen = self.listen.clone();
        }
        if let Some(p) = self.portmap {
            s.portmap = p;
        }
        if let Some(w) = self.workers {
            s.workers = w;
        }
        if let Some(l) = self.log_level {
            s.log_level = l;
        }
        if let Some(d) = &self.state_dir {
            s.state_dir = d.clone();
        }
    }
}

/// One export in a reload's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportChange {
    pub id: u32,
    pub path: String,
    pub clients: String,
}

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReloadOutcome {
    /// The configuration file read.
    pub file: String,
    pub added: Vec<ExportChange>,
    pub removed: Vec<ExportChange>,
    /// Client lists or options changed.
    pub changed: Vec<ExportChange>,
    pub unchanged: usize,
    /// `[server]` changes that wait for a restart.
    pub needs_restart: Vec<String>,
    /// The configuration's warnings (`FILE:LINE: ...`).
    pub warnings: Vec<String>,
}

pub struct Reloader {
    /// `None`: the server runs without a configuration file.
    file: Option<PathBuf>,
    overrides: Overrides,
    key: HandleKey,
    exports: Arc<ExportTable<crate::cache::Served>>,
    calls: Arc<CallStats>,
    /// The configuration served now; also serialises reloads.
    current: Mutex<Config>,
}

impl Reloader {
    pub fn new(
        file: Option<PathBuf>,
        overrides: Overrides,
        key: HandleKey,
        exports: Arc<ExportTable<crate::cache::Served>>,
        calls: Arc<CallStats>,
        current: Config,
    ) -> Self {
        Reloader { file, overrides, key, exports, calls, current: Mutex::new(current) }
    }

    pub fn file(&self) -> Option<&PathBuf> {
        self.file.as_ref()
    }

    /// Reloads, counting the result in `counts` and logging every change.
    /// `meant`: the file the caller means (`keel exports reload --config
    /// FILE`); another than the server's is refused.
    pub fn reload(&self, counts: &ReloadCounts, meant: Option<&str>) -> Result<ReloadOutcome, String> {
        let result = self.reload_inner(meant);
        match &result {
            Ok(outcome) => {
                counts.applied.fetch_add(1, Ordering::Relaxed);
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
                counts.last_applied_unix.store(now, Ordering::Relaxed);
                tracing::info!(
                    file = outcome.file,
                    added = outcome.added.len(),
                    removed = outcome.removed.len(),
                    changed = outcome.changed.len(),
                    unchanged = outcome.unchanged,
                    "exports reloaded"
                );
            }
            Err(why) => {
                counts.refused.fetch_add(1, Ordering::Relaxed);
                tracing::error!("export reload refused, nothing changed: {why}");
            }
        }
        result
    }

    fn reload_inner(&self, meant: Option<&str>) -> Result<ReloadOutcome, String> {
        let Some(file) = &self.file else {
            return Err("this server was started without a configuration file (keel serve DIR): \
                        there is nothing to reload; start it with --config FILE"
                .into());
        };
        if let Some(meant) = meant
            && !same_file(Path::new(meant), file)
        {
            return Err(format!(
                "{meant} is not this server's configuration file: it serves {} and reloads only that; \
                 edit that file, or restart keel with --config {meant}",
                file.display()
            ));
        }
        let mut current = self.current.lock().expect("reload lock");
        let mut next = config::load(file).map_err(|e| e.to_string())?;
        self.overrides.apply(&mut next.server);
        // What [ha] decides (sync exports, shared storage, a journalled
        // reply cache, calls held when storage fails) is set up at start.
        if next.ha != current.ha {
            let [was, now] = [current.ha, next.ha].map(|on| if on { "enabled" } else { "disabled" });
            return Err(format!(
                "{}: [ha] is {now} in the file but this server started with it {was}: [ha] changes only at \
                 a restart (restart keel to apply it)",
                file.display()
            ));
        }
        // The Kerberos key is loaded at start only, when an export wants it.
        if crate::kerberos::wanted(&next) && !crate::kerberos::wanted(&current) {
            return Err(format!(
                "{}: an export now accepts a Kerberos flavor (sec = [\"krb5\", ...]) but this server started \
                 without one and has not loaded its key: restart keel to apply it",
                file.display()
            ));
        }
        // Exactly the checks of a start.
        let checked = validate::check(&next, &file.display().to_string()).map_err(|e| e.to_string())?;
        let mut needs_restart = server_changes(&current.server, &next.server);
        if current.cache != next.cache {
            needs_restart.push(
                "[cache]: devices change at runtime with `keel cache add` and `keel cache remove`; the other \
                 keys at the next start"
                    .into(),
            );
        }

        // Every check before anything changes.
        for e in &next.exports {
            if let Some(old) = current.exports.iter().find(|o| o.id == e.id) {
                if old.path != e.path {
                    return Err(format!(
                        "export id {} changed its path from {} to {}: the id is part of every file handle \
                         clients hold, so it must keep naming the same directory; give {} a new id \
                         (and remove id {} if it is no longer served)",
                        e.id,
                        old.path.display(),
                        e.path.display(),
                        e.path.display(),
                        e.id
                    ));
                }
                if old.fsid != e.fsid {
                    return Err(format!(
                        "export id {} ({}) changed its fsid: every handle clients hold would become stale; \
                         to do that on purpose, remove the export, reload, then add it again",
                        e.id,
                        e.path.display()
                    ));
                }
            }
        }
        let served = self.exports.store.inner().open_exports();
        let mut opened: Vec<(u32, Arc<Export>)> = Vec::new();
        for e in next.exports.iter().filter(|e| !current.exports.iter().any(|o| o.id == e.id)) {
            let spec = ExportSpec { id: e.id, path: e.path.clone(), fsid: e.fsid };
            let export = Export::open(&spec, &self.key)
                .map_err(|err| format!("cannot export {} (id {}): {err}", e.path.display(), e.id))?;
            if let Some(clash) = served.iter().find(|s| s.fsid == export.fsid && s.path == e.path) {
                return Err(format!("{} is already exported as id {}", e.path.display(), clash.id));
            }
            opened.push((e.id, Arc::new(export)));
        }

        // Apply.
        let mut outcome = ReloadOutcome {
            file: file.display().to_string(),
            needs_restart,
            warnings: checked.warnings,
            ..Default::default()
        };
        let mut list = Vec::with_capacity(next.exports.len());
        for e in &next.exports {
            let change = change_of(e);
            let export = match served.iter().find(|s| s.id == e.id) {
                Some(s) => {
                    let old = current.exports.iter().find(|o| o.id == e.id);
                    if old.is_some_and(|o| o.clients != e.clients) {
                        tracing::info!(export = e.id, path = %e.path.display(), clients = %change.clients, "export changed its clients");
                        outcome.changed.push(change);
                    } else {
                        outcome.unchanged += 1;
                    }
                    s.clone()
                }
                None => {
                    let (_, export) = opened.iter().find(|(id, _)| *id == e.id).expect("opened above");
                    tracing::info!(
                        export = e.id,
                        path = %e.path.display(),
                        fsid = format_args!("{:#x}", export.fsid),
                        clients = %change.clients,
                        "export added"
                    );
                    outcome.added.push(change);
                    export.clone()
                }
            };
            list.push(export);
        }
        for old in current.exports.iter().filter(|o| !next.exports.iter().any(|e| e.id == o.id)) {
            tracing::info!(export = old.id, path = %old.path.display(), "export removed: its clients now get NFS3ERR_STALE");
            outcome.removed.push(change_of(old));
        }
        for change in &outcome.needs_restart {
            tracing::warn!("not applied until keel restarts: {change}");
        }
        for w in &outcome.warnings {
            tracing::warn!("{w}");
        }
        // A removed export's dirty data goes to its file system while it
        // can still be reached there.
        let cache = self.exports.store.shared();
        for old in current.exports.iter().filter(|o| !next.exports.iter().any(|e| e.id == o.id)) {
            if cache.mode(old.id) != CacheMode::Off || cache.index.live_files() > 0 {
                let path = old.path.display().to_string();
                if let Err(e) = cache.set_mode(old.id, &path, CacheMode::Off, |_| {}) {
                    return Err(format!(
                        "export {} ({path}) has dirty data in the cache that cannot be destaged: {e}",
                        old.id
                    ));
                }
            }
        }
        // The store first: a removed export is stale before its client list
        // goes, and an added one is opened before clients are admitted.
        let ids: Vec<u32> = list.iter().map(|e| e.id).collect();
        self.exports.store.inner().set_exports(list);
        self.exports.exports_changed(next.exports.iter().map(|e| (e.id, e.clients.clone())).collect());
        self.calls.set_exports(&ids);
        // Cache modes the file changed (one set with `keel cache mode`
        // stays until the file changes it).
        for e in &next.exports {
            let before = current.exports.iter().find(|o| o.id == e.id).map_or(CacheMode::Off, |o| o.cache);
            if before != e.cache {
                let path = e.path.display().to_string();
                if let Err(why) = cache.set_mode(e.id, &path, e.cache, |_| {}) {
                    let msg = format!("export {} ({path}): cache mode {} not applied: {why}", e.id, e.cache.name());
                    tracing::error!("{msg}");
                    outcome.warnings.push(msg);
                }
            }
        }
        current.exports = next.exports;
        Ok(outcome)
    }
}

/// Whether `a` and `b` name the same file (through links, or as written
/// if one cannot be resolved).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn change_of(e: &ExportConfig) -> ExportChange {
    ExportChange { id: e.id, path: e.path.display().to_string(), clients: describe_options(&e.clients) }
}

/// The `[server]` keys whose values differ, as `key: old -> new`.
fn server_changes(old: &ServerConfig, new: &ServerConfig) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |key: &str, a: String, b: String| {
        if a != b {
            out.push(format!("{key}: {a} -> {b}"));
        }
    };
    let addrs = |v: &[std::net::SocketAddr]| format!("{v:?}");
    check("listen", addrs(&old.listen), addrs(&new.listen));
    check("mount_listen", addrs(&old.mount_listen), addrs(&new.mount_listen));
    check("portmap", old.portmap.to_string(), new.portmap.to_string());
    check("workers", old.workers.to_string(), new.workers.to_string());
    check("log_level", old.log_level.to_string(), new.log_level.to_string());
    check("state_dir", old.state_dir.display().to_string(), new.state_dir.display().to_string());
    check("max_connections", old.max_connections.to_string(), new.max_connections.to_string());
    check(
        "max_requests_per_connection",
        old.max_requests_per_connection.to_string(),
        new.max_requests_per_connection.to_string(),
    );
    check("poll_spin_us", old.poll_spin.as_micros().to_string(), new.poll_spin.as_micros().to_string());
    check("fault_injection", old.fault_injection.to_string(), new.fault_injection.to_string());
    check("max_inflight_mib", (old.max_inflight_bytes >> 20).to_string(), (new.max_inflight_bytes >> 20).to_string());
    check(
        "max_inflight_mib_per_connection",
        (old.max_inflight_bytes_per_connection >> 20).to_string(),
        (new.max_inflight_bytes_per_connection >> 20).to_string(),
    );
    check("idle_timeout_seconds", old.idle_timeout.as_secs().to_string(), new.idle_timeout.as_secs().to_string());
    check("stall_timeout_seconds", old.stall_timeout.as_secs().to_string(), new.stall_timeout.as_secs().to_string());
    check("metrics_listen", format!("{:?}", old.metrics_listen), format!("{:?}", new.metrics_listen));
    check("nsm_state_dir", format!("{:?}", old.nsm_state_dir), format!("{:?}", new.nsm_state_dir));
    check("grace_seconds_max", old.grace_max.as_secs().to_string(), new.grace_max.as_secs().to_string());
    check("max_locks_per_client", old.max_locks_per_client.to_string(), new.max_locks_per_client.to_string());
    check("keytab", old.keytab.display().to_string(), new.keytab.display().to_string());
    check("principal", format!("{:?}", old.principal), format!("{:?}", new.principal));
    let sorted = |m: &std::collections::HashMap<String, String>| {
        format!("{:?}", m.iter().collect::<std::collections::BTreeMap<_, _>>())
    };
    check("principal_users", sorted(&old.principal_users), sorted(&new.principal_users));
    check("nfs_versions", old.nfs_versions.to_string(), new.nfs_versions.to_string());
    check("nfs4_lease_seconds", old.nfs4_lease.as_secs().to_string(), new.nfs4_lease.as_secs().to_string());
    check("nfs4_read_delegations", old.nfs4_read_delegations.to_string(), new.nfs4_read_delegations.to_string());
    check("nfs4_write_delegations", old.nfs4_write_delegations.to_string(), new.nfs4_write_delegations.to_string());
    check(
        "nfs4_clients_per_address_max",
        old.nfs4_clients_per_address_max.to_string(),
        new.nfs4_clients_per_address_max.to_string(),
    );
    check("nfs4_idmap_domain", format!("{:?}", old.nfs4_idmap_domain), format!("{:?}", new.nfs4_idmap_domain));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_changes_name_each_key() {
        let old = ServerConfig::default();
        let mut new = old.clone();
        assert!(server_changes(&old, &new).is_empty());
        new.workers = old.workers + 1;
        new.metrics_listen = Some("127.0.0.1:9049".parse().unwrap());
        new.grace_max = old.grace_max * 2;
        new.nfs_versions.v42 = false;
        let changes = server_changes(&old, &new);
        assert_eq!(changes.len(), 4, "{changes:?}");
        assert_eq!(changes[3], "nfs_versions: [\"3\", \"4.1\", \"4.2\"] -> [\"3\", \"4.1\"]");
        assert!(changes[0].starts_with("workers: "), "{changes:?}");
        assert!(changes[1].contains("127.0.0.1:9049"), "{changes:?}");
        assert!(changes[2].starts_with("grace_seconds_max: "), "{changes:?}");
    }
}

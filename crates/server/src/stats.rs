//! The server's side of the statistics: which programs are counted (with
//! their procedure and status names), and a [`Snapshot`] of everything at
//! one moment, gathered from the call counters (`keel-stats`), the reply
//! cache, the connection table, the transport's worker pool and the memory
//! budget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{SystemTime, UNIX_EPOCH};

use keel_exports::ExportTable;
use keel_nfs3::{MountProgram, Nfs3Program};
use keel_nfs3_proto::mount::Mountstat3;
use keel_nfs3_proto::nfs3::Nfsstat3;
use keel_nfs4::Nfs4Program;
use keel_nfs4_proto::Nfsstat4;
use keel_nlm::{NlmProgram, NsmProgram};
use keel_nlm_proto::nlm4::{NLM_PROGRAM, NLM_V4, Nlm4Stats};
use keel_nlm_proto::nsm::{SM_PROGRAM, SM_V1, SmRes};
use keel_rpc::{Dispatcher, TabledProgram};
use keel_stats::{
    CallStats, ConnectionInfo, ConnectionsSnapshot, MemorySnapshot, ProgramSpec, ReadPipesSnapshot, ReloadsSnapshot,
    ReplyCacheSnapshot, ServerInfo, Snapshot, WorkersSnapshot,
};
use keel_store::Store;
use keel_transport::{Budget, Connections, PoolProbe};

use crate::cache::Served;
use crate::portmap::PortmapProgram;

static NFS_STATUSES: LazyLock<Vec<(u32, &'static str)>> =
    LazyLock::new(|| Nfsstat3::ALL.iter().map(|s| (*s as u32, s.name())).collect());
/// MNT's statuses (the other MOUNT procedures' replies carry none).
static MOUNT_STATUSES: LazyLock<Vec<(u32, &'static str)>> =
    LazyLock::new(|| Mountstat3::ALL.iter().map(|s| (*s as u32, s.name())).collect());
static NFS4_STATUSES: LazyLock<Vec<(u32, &'static str)>> =
    LazyLock::new(|| Nfsstat4::ALL.iter().map(|s| (s.code(), s.name())).collect());
static NLM_STATUSES: LazyLock<Vec<(u32, &'static str)>> =
    LazyLock::new(|| Nlm4Stats::ALL.iter().map(|s| (*s as u32, s.name())).collect());
/// STAT's results (NOTIFY's reply carries none).
static NSM_STATUSES: LazyLock<Vec<(u32, &'static str)>> =
    LazyLock::new(|| SmRes::ALL.iter().map(|s| (*s as u32, s.name())).collect());

/// The statistics' name of NFSv4's COMPOUND operations.
pub const NFS4_OPERATIONS: &str = "nfs4ops";

/// The programs Keel serves, as the statistics count them: each
/// procedure by the name its program's table gives it.
pub fn programs() -> [ProgramSpec; 7] {
    use keel_nfs3_proto::*;
    [
        ProgramSpec {
            program: NFS_PROGRAM,
            version: NFS_V3,
            name: "nfs",
            procedures: Nfs3Program::<Served>::PROCEDURES.names(),
            statuses: &NFS_STATUSES,
        },
        // NFSv4's calls (NULL and COMPOUND), then the operations inside
        // the COMPOUNDs, each by its name (counted by the program itself).
        ProgramSpec {
            program: NFS_PROGRAM,
            version: keel_nfs4_proto::NFS_V4,
            name: "nfs4",
            procedures: Nfs4Program::<Served>::PROCEDURES.names(),
            statuses: &NFS4_STATUSES,
        },
        ProgramSpec {
            program: NFS_PROGRAM,
            version: keel_nfs4_proto::NFS_V4,
            name: NFS4_OPERATIONS,
            procedures: keel_nfs4::operation_names(),
            statuses: &[],
        },
        ProgramSpec {
            program: MOUNT_PROGRAM,
            version: MOUNT_V3,
            name: "mount",
            procedures: MountProgram::<Served>::PROCEDURES.names(),
            statuses: &MOUNT_STATUSES,
        },
        ProgramSpec {
            program: NLM_PROGRAM,
            version: NLM_V4,
            name: "nlm",
            procedures: NlmProgram::<Served>::PROCEDURES.names(),
            statuses: &NLM_STATUSES,
        },
        ProgramSpec {
            program: SM_PROGRAM,
            version: SM_V1,
            name: "nsm",
            procedures: NsmProgram::<Served>::PROCEDURES.names(),
            statuses: &NSM_STATUSES,
        },
        ProgramSpec {
            program: PMAP_PROGRAM,
            version: PMAP_V2,
            name: "portmap",
            procedures: PortmapProgram::PROCEDURES.names(),
            statuses: &[],
        },
    ]
}

/// Export reloads applied and refused.
#[derive(Default)]
pub struct ReloadCounts {
    pub applied: AtomicU64,
    pub refused: AtomicU64,
    pub last_applied_unix: AtomicU64,
}

/// Where every number of a [`Snapshot`] comes from.
pub struct ServerStats {
    pub calls: Arc<CallStats>,
    pub exports: Arc<ExportTable<Served>>,
    pub dispatcher: Arc<Dispatcher>,
    pub conns: Arc<Connections>,
    pub budget: Arc<Budget>,
    pub pool: PoolProbe,
    pub started: SystemTime,
    pub reloads: ReloadCounts,
    /// The NFSv4 program, if the server serves a minor version of it.
    pub nfs4: Option<Arc<crate::nfs4::Nfs4>>,
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

impl ServerStats {
    /// The exports served now: id and path.
    pub fn export_names(&self) -> Vec<(u32, String)> {
        self.exports.exports().iter().map(|s| (s.export.id, s.export.path.display().to_string())).collect()
    }

    /// NFSv4.1's state and callbacks, if the server serves NFSv4.
    fn nfs4_snapshot(&self) -> keel_stats::Nfs4Snapshot {
        let Some(nfs4) = &self.nfs4 else { return Default::default() };
        let st = nfs4.state_stats();
        let cb = nfs4.callback_counters();
        let n = |v: usize| v as u64;
        keel_stats::Nfs4Snapshot {
            enabled: true,
            clients_active: n(st.clients - st.courtesy_clients - st.unconfirmed_clients),
            clients_courtesy: n(st.courtesy_clients),
            clients_unconfirmed: n(st.unconfirmed_clients),
            sessions: n(st.sessions),
            opens: n(st.opens),
            lock_states: n(st.lock_states),
            delegations: n(st.delegations),
            grace: st.grace.active,
            grace_remaining_seconds: st.grace.remaining.as_secs(),
            callback_probes: cb.probes_sent,
            callback_recalls: cb.recalls_sent,
            callback_getattrs: cb.getattrs_sent,
            callback_getattrs_shared: cb.getattrs_shared,
            callback_timeouts: cb.timeouts,
            callback_unsent: cb.unsent,
            delegations_recalled: st.recalls,
            delegations_revoked: st.revoked,
            reply_cache_bytes: n(st.reply_cache_bytes),
            refused: keel_nfs4_state::Resource::ALL
                .iter()
                .map(|r| keel_stats::Nfs4Refusals { resource: r.name().into(), count: st.refused[*r as usize] })
                .collect(),
            slots_past_the_pool: st.slots_past_the_pool,
            client_records_failed: st.records_failed,
        }
    }

    /// RPCSEC_GSS's contexts and refusals, if the server serves it.
    pub(crate) fn gss_snapshot(&self) -> keel_stats::GssSnapshot {
        let Some(gss) = self.dispatcher.gss() else { return Default::default() };
        let counts = gss.counts().snapshot();
        keel_stats::GssSnapshot {
            enabled: true,
            contexts: gss.contexts() as u64,
            established: counts.established,
            evicted: counts.evicted,
            failures: counts
                .failures
                .iter()
                .map(|(cause, count)| keel_stats::AuthFailureCount { cause: cause.name().into(), count: *count })
                .collect(),
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let now = SystemTime::now();
        let mut calls = self.calls.snapshot();
        let exports = self.exports.exports();
        for e in &mut calls.exports {
            if let Some(s) = exports.iter().find(|s| s.export.id == e.id) {
                e.path = s.export.path.display().to_string();
            }
        }
        let rc = self.dispatcher.reply_cache().counts();
        let table = self.conns.state();
        let mut connections = ConnectionsSnapshot {
            open: table.open.len() as u64,
            max: table.max as u64,
            accepted: table.accepted,
            refused: table.refused,
            closed_idle: table.closed_idle,
            closed_stalled: table.closed_stalled,
            closed_evicted: table.closed_evicted,
            ..Default::default()
        };
        for c in &table.open {
            let state = if c.closing.is_some() {
                connections.closing += 1;
                "closing"
            } else if c.stalled_for.is_some_and(|d| d.as_secs() >= 1) {
                connections.stalled += 1;
                "stalled"
            } else if c.calls_in_flight > 0 {
                connections.busy += 1;
                "busy"
            } else {
                connections.idle += 1;
                "idle"
            };
            connections.list.push(ConnectionInfo {
                peer: c.peer.to_string(),
                state: state.into(),
                calls_in_flight: c.calls_in_flight as u64,
                idle_seconds: c.idle.as_secs(),
            });
        }
        connections.list.sort_by(|a, b| a.peer.cmp(&b.peer));
        let pool = self.pool.usage();
        let workers = WorkersSnapshot {
            workers: pool.workers as u64,
            alive: pool.workers_alive as u64,
            busy: pool.workers_busy as u64,
            places: pool.places as u64,
            places_lent: pool.places_lent,
            ready_queue: pool.ready_queue as u64,
            parked_for_slots: pool.parked_for_slots as u64,
            parked_for_budget: pool.parked_for_budget as u64,
        };
        let store = &self.exports.store;
        Snapshot {
            taken_unix_ms: now.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64,
            server: ServerInfo {
                version: env!("CARGO_PKG_VERSION").into(),
                pid: std::process::id(),
                started_unix: unix_secs(self.started),
                write_verifier: format!("{:016x}", u64::from_be_bytes(store.write_verifier())),
                cached_inodes: store.inner().cached_inodes() as u64,
            },
            calls,
            reply_cache: ReplyCacheSnapshot {
                hits: rc.hits,
                misses: rc.misses,
                in_progress: rc.in_progress,
                evictions: rc.evictions,
                entries: rc.entries,
                bytes: rc.bytes,
            },
            connections,
            workers,
            memory: MemorySnapshot {
                inflight_bytes: self.budget.used_bytes() as u64,
                inflight_bytes_max: self.budget.total_bytes_max() as u64,
            },
            read_pipes: store.inner().pipe_counts().map_or_else(Default::default, |p| ReadPipesSnapshot {
                pipes: p.made,
                pipes_max: p.pipes_max,
                spliced: p.taken,
                exhausted: p.exhausted,
                make_failed: p.make_failed,
                discarded: p.discarded,
            }),
            cache: crate::cache::snapshot(store, &self.export_names()),
            gss: self.gss_snapshot(),
            nfs4: self.nfs4_snapshot(),
            reloads: ReloadsSnapshot {
                applied: self.reloads.applied.load(Ordering::Relaxed),
                refused: self.reloads.refused.load(Ordering::Relaxed),
                last_applied_unix: self.reloads.last_applied_unix.load(Ordering::Relaxed),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names `keel stat` and the metrics show (dashboards use them),
    /// from the programs' tables.
    #[test]
    fn the_statistics_name_procedures_and_statuses_as_the_specifications_do() {
        let snapshot = CallStats::new(&programs()).snapshot();
        let names = |program: &str| -> Vec<String> {
            let p = snapshot.programs.iter().find(|p| p.name == program).expect(program);
            p.procedures.iter().map(|c| c.name.clone()).collect()
        };
        let nfs = [
            "null",
            "getattr",
            "setattr",
            "lookup",
            "access",
            "readlink",
            "read",
            "write",
            "create",
            "mkdir",
            "symlink",
            "mknod",
            "remove",
            "rmdir",
            "rename",
            "link",
            "readdir",
            "readdirplus",
            "fsstat",
            "fsinfo",
            "pathconf",
            "commit",
        ];
        assert_eq!(names("nfs"), nfs);
        assert_eq!(names("nfs4"), ["null", "compound"]);
        let ops = names(NFS4_OPERATIONS);
        assert_eq!(ops[..3], ["access", "close", "commit"]);
        assert!(ops.iter().any(|n| n == "exchange_id") && ops.iter().any(|n| n == "seek"));
        assert_eq!(names("mount"), ["null", "mnt", "dump", "umnt", "umntall", "export"]);
        let nlm = [
            "null",
            "test",
            "lock",
            "cancel",
            "unlock",
            "granted",
            "test_msg",
            "lock_msg",
            "cancel_msg",
            "unlock_msg",
            "granted_msg",
            "test_res",
            "lock_res",
            "cancel_res",
            "unlock_res",
            "granted_res",
            "share",
            "unshare",
            "nm_lock",
            "free_all",
        ];
        assert_eq!(names("nlm"), nlm);
        assert_eq!(names("nsm"), ["null", "stat", "mon", "unmon", "unmon_all", "simu_crash", "notify"]);
        assert_eq!(names("portmap"), ["null", "set", "unset", "getport", "dump", "callit"]);
        assert_eq!(NFS_STATUSES[0], (0, "NFS3_OK"));
        assert_eq!((NLM_STATUSES[0], NLM_STATUSES[3]), ((0, "NLM4_GRANTED"), (3, "NLM4_BLOCKED")));
        assert_eq!(NSM_STATUSES[0], (0, "STAT_SUCC"));
    }
}

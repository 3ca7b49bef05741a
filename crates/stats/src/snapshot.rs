//! The statistics at one moment, as the administration socket sends them
//! (`stats`) and as `keel stat` and the Prometheus endpoint show them.
//! Counters only grow; [`Snapshot::since`] subtracts an earlier snapshot
//! to give what happened in between (`keel stat --interval`).

use serde::{Deserialize, Serialize};

use crate::histogram::HistogramSnapshot;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// When it was taken, in milliseconds since the Unix epoch.
    pub taken_unix_ms: u64,
    pub server: ServerInfo,
    pub calls: CallsSnapshot,
    pub reply_cache: ReplyCacheSnapshot,
    pub connections: ConnectionsSnapshot,
    pub workers: WorkersSnapshot,
    pub memory: MemorySnapshot,
    pub reloads: ReloadsSnapshot,
    #[serde(default)]
    pub read_pipes: ReadPipesSnapshot,
    /// The SSD cache tier (no devices and no exports when there is none).
    #[serde(default)]
    pub cache: CacheSnapshot,
    #[serde(default)]
    pub gss: GssSnapshot,
    #[serde(default)]
    pub nfs4: Nfs4Snapshot,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub version: String,
    pub pid: u32,
    pub started_unix: u64,
    pub write_verifier: String,
    pub cached_inodes: u64,
}

/// What the RPC programs did: counted by [`crate::CallStats`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallsSnapshot {
    pub programs: Vec<ProgramSnapshot>,
    pub exports: Vec<ExportSnapshot>,
    /// The clients in the bounded table, most calls first.
    pub clients: Vec<ClientSnapshot>,
    /// Clients dropped from the table to make room (their counts are gone
    /// from `clients`, not from the other totals).
    pub clients_evicted: u64,
    /// File data read and written by every call.
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Calls running now, and for how long the oldest of them has run.
    pub running: u64,
    pub oldest_running_ms: u64,
    /// Calls running for longer than the stuck threshold (a minute).
    pub stuck: u64,
    /// Calls by the security flavor of their credential (every flavor
    /// served, in a fixed order).
    #[serde(default)]
    pub flavors: Vec<FlavorCount>,
}

/// Calls of one security flavor: "none", "sys", "krb5", "krb5i", "krb5p".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlavorCount {
    pub flavor: String,
    pub calls: u64,
}

/// NFSv4.1 state and callbacks, when the server serves NFSv4.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Nfs4Snapshot {
    pub enabled: bool,
    /// Clients now, by the state of their lease: renewed within it, past
    /// it but keeping their state (courtesy), not confirmed yet.
    pub clients_active: u64,
    pub clients_courtesy: u64,
    pub clients_unconfirmed: u64,
    pub sessions: u64,
    pub opens: u64,
    pub lock_states: u64,
    pub delegations: u64,
    /// Whether the grace period after a start lasts, and how long it may.
    pub grace: bool,
    pub grace_remaining_seconds: u64,
    /// Callbacks sent (CB_NULL probes, CB_RECALLs, CB_GETATTRs), since
    /// the start.
    pub callback_probes: u64,
    pub callback_recalls: u64,
    #[serde(default)]
    pub callback_getattrs: u64,
    /// GETATTRs (and VERIFYs, READDIRs) that waited for the answer of a
    /// CB_GETATTR in flight for the same file instead of sending one.
    #[serde(default)]
    pub callback_getattrs_shared: u64,
    /// Callbacks that got no answer in time, or could not be sent (no
    /// backchannel connection, a full queue).
    pub callback_timeouts: u64,
    pub callback_unsent: u64,
    /// Delegations recalled, and revoked (not returned in time).
    pub delegations_recalled: u64,
    pub delegations_revoked: u64,
    /// Bytes the sessions' reply caches hold now (slots × their size).
    #[serde(default)]
    pub reply_cache_bytes: u64,
    /// Claims refused past a limit since the start, by what was short
    /// (clients, reply_cache_slots, opens, ...): the clients that met a
    /// bound, every resource listed.
    #[serde(default)]
    pub refused: Vec<Nfs4Refusals>,
    /// Sessions given their one slot beyond the reply cache's budget (a
    /// client's first session is never refused).
    #[serde(default)]
    pub slots_past_the_pool: u64,
    /// Client records (for reclaim after a restart) that could not be
    /// written or removed in state_dir.
    #[serde(default)]
    pub client_records_failed: u64,
}

/// Claims of one resource refused past a limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Nfs4Refusals {
    pub resource: String,
    pub count: u64,
}

/// RPCSEC_GSS (Kerberos), when the server serves it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GssSnapshot {
    /// Whether an export lists a Kerberos flavor (and the key was loaded).
    pub enabled: bool,
    /// Contexts held now.
    pub contexts: u64,
    pub established: u64,
    /// Contexts dropped to keep the bounds.
    pub evicted: u64,
    /// Calls refused or dropped, by cause (every cause, in a fixed order).
    pub failures: Vec<AuthFailureCount>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AuthFailureCount {
    pub cause: String,
    pub count: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgramSnapshot {
    /// The short name: "nfs", "mount", "nlm", "nsm", "portmap".
    pub name: String,
    pub program: u32,
    pub version: u32,
    pub procedures: Vec<ProcSnapshot>,
    /// Replies by the status they carry (nfsstat3, mountstat3, nlm4_stats, ...), those seen only.
    pub statuses: Vec<StatusCount>,
    /// Calls the program answered with an RPC error instead of results.
    pub garbage_args: u64,
    pub proc_unavail: u64,
    pub system_err: u64,
    /// Calls left unanswered for the client to retransmit (under `[ha]`,
    /// while the export's storage fails).
    #[serde(default)]
    pub dropped: u64,
    /// Calls denied AUTH_TOOWEAK: their flavor is not one their export
    /// accepts (`sec`).
    #[serde(default)]
    pub too_weak: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcSnapshot {
    pub name: String,
    pub calls: u64,
    /// Replies with a status other than success.
    pub errors: u64,
    /// Service time: from the program taking the call to its reply encoded.
    pub latency: HistogramSnapshot,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCount {
    pub status: u32,
    pub name: String,
    pub count: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportSnapshot {
    pub id: u32,
    /// Filled in by the server (the statistics know exports by id).
    pub path: String,
    pub calls: u64,
    pub errors: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientSnapshot {
    pub address: String,
    pub calls: u64,
    pub errors: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub idle_seconds: u64,
}

/// The pipes READ data is spliced through (all zero when READs copy).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadPipesSnapshot {
    /// Pipes made now (free or holding a reply's data), and the bound.
    pub pipes: u64,
    pub pipes_max: u64,
    /// READs given a pipe (the rare one whose splice fails then copies).
    pub spliced: u64,
    /// READs that found every pipe in use, and copied.
    pub exhausted: u64,
    /// Pipes that could not be made, and pipes closed with data left that
    /// could not be read.
    pub make_failed: u64,
    pub discarded: u64,
}

/// The SSD cache tier: its devices, its log, destage, and per export
/// what the cache took and what went around it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheSnapshot {
    pub devices: Vec<CacheDeviceSnapshot>,
    /// The write-back log: bytes in use of the ring, dirty file data
    /// (what the back end does not have yet) and the files it belongs to,
    /// and the age of the oldest record.
    pub log_used_bytes: u64,
    pub log_bytes: u64,
    pub dirty_bytes: u64,
    pub dirty_files: u64,
    pub oldest_dirty_ms: u64,
    pub destaged_bytes: u64,
    pub destage_rounds: u64,
    pub destage_errors: u64,
    /// Dirty data of files removed before it was destaged.
    pub dropped_bytes: u64,
    /// Writes that waited for room in a full log.
    pub full_waits: u64,
    /// The read cache: 4 KiB slots (by default) in use and in all, slots
    /// reused for other data, and errors (a bad checksum or a failed read
    /// sends the READ to disk).
    #[serde(default)]
    pub read_slots_used: u64,
    #[serde(default)]
    pub read_slots: u64,
    #[serde(default)]
    pub read_evictions: u64,
    #[serde(default)]
    pub read_errors: u64,
    pub exports: Vec<CacheExportSnapshot>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheDeviceSnapshot {
    pub name: String,
    pub size_bytes: u64,
    /// "log mirror" or "spare".
    pub role: String,
    /// "ok" or "failed".
    pub state: String,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub errors: u64,
    /// Clean data of the read cache on the device, and its room there.
    #[serde(default)]
    pub read_cache_bytes: u64,
    #[serde(default)]
    pub read_cache_capacity_bytes: u64,
    /// What the device says of its wear (NVMe's SMART log); None where it
    /// says nothing (SATA, virtual and loop devices, files on them).
    #[serde(default)]
    pub wear: Option<DeviceWear>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceWear {
    /// Share of the rated endurance used, in percent (may pass 100).
    pub percent_used: u8,
    /// Spare capacity left, in percent.
    pub spare_percent: u8,
    pub host_written_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheExportSnapshot {
    pub id: u32,
    pub path: String,
    /// write-back, off, ...
    pub mode: String,
    /// How it is served now, where that differs from `mode`: a write-back
    /// export with fewer than two working cache devices is served
    /// write-through. Empty: as `mode` says.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub serving: String,
    pub writes_logged: u64,
    pub bytes_logged: u64,
    /// Writes sent straight to the back end, by reason (mode, sequential,
    /// log_full, degraded, flushing).
    pub writes_bypassed: Vec<BypassCount>,
    pub bytes_bypassed: u64,
    /// READs that took data from the log, and the bytes.
    pub reads_log_hit: u64,
    pub bytes_from_log: u64,
    pub reads_disk: u64,
    pub bytes_from_disk: u64,
    /// READs the read cache answered (hits) or was asked and could not
    /// (misses), its bytes, blocks admitted, and READs of a sequential
    /// stream sent to disk without asking it.
    #[serde(default)]
    pub read_hits: u64,
    #[serde(default)]
    pub read_misses: u64,
    #[serde(default)]
    pub bytes_from_cache: u64,
    #[serde(default)]
    pub admissions: u64,
    #[serde(default)]
    pub reads_sequential: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BypassCount {
    pub reason: String,
    pub writes: u64,
}

impl CacheSnapshot {
    fn since(&mut self, e: &CacheSnapshot) {
        for d in &mut self.devices {
            if let Some(o) = e.devices.iter().find(|o| o.name == d.name) {
                d.bytes_written = d.bytes_written.saturating_sub(o.bytes_written);
                d.bytes_read = d.bytes_read.saturating_sub(o.bytes_read);
                d.errors = d.errors.saturating_sub(o.errors);
            }
        }
        self.destaged_bytes = self.destaged_bytes.saturating_sub(e.destaged_bytes);
        self.destage_rounds = self.destage_rounds.saturating_sub(e.destage_rounds);
        self.destage_errors = self.destage_errors.saturating_sub(e.destage_errors);
        self.dropped_bytes = self.dropped_bytes.saturating_sub(e.dropped_bytes);
        self.full_waits = self.full_waits.saturating_sub(e.full_waits);
        self.read_evictions = self.read_evictions.saturating_sub(e.read_evictions);
        self.read_errors = self.read_errors.saturating_sub(e.read_errors);
        for x in &mut self.exports {
            let Some(o) = e.exports.iter().find(|o| o.id == x.id) else { continue };
            x.writes_logged = x.writes_logged.saturating_sub(o.writes_logged);
            x.bytes_logged = x.bytes_logged.saturating_sub(o.bytes_logged);
            for b in &mut x.writes_bypassed {
                if let Some(ob) = o.writes_bypassed.iter().find(|ob| ob.reason == b.reason) {
                    b.writes = b.writes.saturating_sub(ob.writes);
                }
            }
            x.bytes_bypassed = x.bytes_bypassed.saturating_sub(o.bytes_bypassed);
            x.reads_log_hit = x.reads_log_hit.saturating_sub(o.reads_log_hit);
            x.bytes_from_log = x.bytes_from_log.saturating_sub(o.bytes_from_log);
            x.reads_disk = x.reads_disk.saturating_sub(o.reads_disk);
            x.bytes_from_disk = x.bytes_from_disk.saturating_sub(o.bytes_from_disk);
            x.read_hits = x.read_hits.saturating_sub(o.read_hits);
            x.read_misses = x.read_misses.saturating_sub(o.read_misses);
            x.bytes_from_cache = x.bytes_from_cache.saturating_sub(o.bytes_from_cache);
            x.admissions = x.admissions.saturating_sub(o.admissions);
            x.reads_sequential = x.reads_sequential.saturating_sub(o.reads_sequential);
        }
    }
}

/// The duplicate reply cache (knfsd's "rc" line).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyCacheSnapshot {
    pub hits: u64,
    pub misses: u64,
    pub in_progress: u64,
    pub evictions: u64,
    pub entries: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionsSnapshot {
    pub open: u64,
    pub max: u64,
    /// Open connections by state: calls in flight, none, replies waiting
    /// for a client that does not read, told to close.
    pub busy: u64,
    pub idle: u64,
    pub stalled: u64,
    pub closing: u64,
    /// Connections accepted since the start, and refused (host in no
    /// client list, or the limit reached with none idle).
    pub accepted: u64,
    pub refused: u64,
    /// Connections the server closed: idle, stalled, evicted at the limit.
    pub closed_idle: u64,
    pub closed_stalled: u64,
    pub closed_evicted: u64,
    pub list: Vec<ConnectionInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionInfo {
    pub peer: String,
    pub state: String,
    pub calls_in_flight: u64,
    pub idle_seconds: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkersSnapshot {
    pub workers: u64,
    /// Worker threads running (fewer than `workers` only if some died).
    pub alive: u64,
    /// Workers not waiting for work (taking, running or answering calls).
    pub busy: u64,
    /// Workers that may be active at once (as many as CPUs).
    #[serde(default)]
    pub places: u64,
    /// Times a worker was let in beyond `places` because every active
    /// one had waited in a call that did not say it would wait.
    #[serde(default)]
    pub places_lent: u64,
    /// Connections with a call ready, waiting for an idle worker.
    pub ready_queue: u64,
    /// Connections whose next call waits for a slot of
    /// max_requests_per_connection, or for bytes of the memory budget.
    pub parked_for_slots: u64,
    pub parked_for_budget: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySnapshot {
    /// Bytes of calls in flight and unsent replies, and the bound.
    pub inflight_bytes: u64,
    pub inflight_bytes_max: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadsSnapshot {
    pub applied: u64,
    pub refused: u64,
    /// Seconds since the Unix epoch of the last reload applied (0: none).
    pub last_applied_unix: u64,
}

impl Snapshot {
    /// What happened between `earlier` and this snapshot: counters are
    /// differences, gauges (connections open, workers busy, ...) are this
    /// snapshot's. Programs, procedures, exports and clients are matched by
    /// name; one that is new counts from zero.
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let mut out = self.clone();
        for f in &mut out.calls.flavors {
            if let Some(o) = earlier.calls.flavors.iter().find(|o| o.flavor == f.flavor) {
                f.calls = f.calls.saturating_sub(o.calls);
            }
        }
        let (v4, was) = (&mut out.nfs4, &earlier.nfs4);
        v4.callback_probes = v4.callback_probes.saturating_sub(was.callback_probes);
        v4.callback_recalls = v4.callback_recalls.saturating_sub(was.callback_recalls);
        v4.callback_getattrs = v4.callback_getattrs.saturating_sub(was.callback_getattrs);
        v4.callback_getattrs_shared = v4.callback_getattrs_shared.saturating_sub(was.callback_getattrs_shared);
        v4.callback_timeouts = v4.callback_timeouts.saturating_sub(was.callback_timeouts);
        v4.callback_unsent = v4.callback_unsent.saturating_sub(was.callback_unsent);
        v4.delegations_recalled = v4.delegations_recalled.saturating_sub(was.delegations_recalled);
        v4.delegations_revoked = v4.delegations_revoked.saturating_sub(was.delegations_revoked);
        v4.slots_past_the_pool = v4.slots_past_the_pool.saturating_sub(was.slots_past_the_pool);
        v4.client_records_failed = v4.client_records_failed.saturating_sub(was.client_records_failed);
        for r in &mut v4.refused {
            if let Some(o) = was.refused.iter().find(|o| o.resource == r.resource) {
                r.count = r.count.saturating_sub(o.count);
            }
        }
        let g = &mut out.gss;
        g.established = g.established.saturating_sub(earlier.gss.established);
        g.evicted = g.evicted.saturating_sub(earlier.gss.evicted);
        for f in &mut g.failures {
            if let Some(o) = earlier.gss.failures.iter().find(|o| o.cause == f.cause) {
                f.count = f.count.saturating_sub(o.count);
            }
        }
        for p in &mut out.calls.programs {
            let Some(old) = earlier.calls.programs.iter().find(|o| o.program == p.program) else { continue };
            for proc_ in &mut p.procedures {
                if let Some(o) = old.procedures.iter().find(|o| o.name == proc_.name) {
                    proc_.calls = proc_.calls.saturating_sub(o.calls);
                    proc_.errors = proc_.errors.saturating_sub(o.errors);
                    proc_.latency = proc_.latency.since(&o.latency);
                }
            }
            for s in &mut p.statuses {
                if let Some(o) = old.statuses.iter().find(|o| o.status == s.status) {
                    s.count = s.count.saturating_sub(o.count);
                }
            }
            p.statuses.retain(|s| s.count > 0);
            p.garbage_args = p.garbage_args.saturating_sub(old.garbage_args);
            p.proc_unavail = p.proc_unavail.saturating_sub(old.proc_unavail);
            p.system_err = p.system_err.saturating_sub(old.system_err);
            p.dropped = p.dropped.saturating_sub(old.dropped);
            p.too_weak = p.too_weak.saturating_sub(old.too_weak);
        }
        for e in &mut out.calls.exports {
            if let Some(o) = earlier.calls.exports.iter().find(|o| o.id == e.id) {
                e.calls = e.calls.saturating_sub(o.calls);
                e.errors = e.errors.saturating_sub(o.errors);
                e.read_bytes = e.read_bytes.saturating_sub(o.read_bytes);
                e.write_bytes = e.write_bytes.saturating_sub(o.write_bytes);
            }
        }
        for c in &mut out.calls.clients {
            if let Some(o) = earlier.calls.clients.iter().find(|o| o.address == c.address) {
                c.calls = c.calls.saturating_sub(o.calls);
                c.errors = c.errors.saturating_sub(o.errors);
                c.read_bytes = c.read_bytes.saturating_sub(o.read_bytes);
                c.write_bytes = c.write_bytes.saturating_sub(o.write_bytes);
            }
        }
        out.calls.clients.retain(|c| c.calls > 0);
        out.calls.clients.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.address.cmp(&b.address)));
        let c = &mut out.calls;
        c.clients_evicted = c.clients_evicted.saturating_sub(earlier.calls.clients_evicted);
        c.read_bytes = c.read_bytes.saturating_sub(earlier.calls.read_bytes);
        c.write_bytes = c.write_bytes.saturating_sub(earlier.calls.write_bytes);
        let (r, e) = (&mut out.reply_cache, &earlier.reply_cache);
        r.hits = r.hits.saturating_sub(e.hits);
        r.misses = r.misses.saturating_sub(e.misses);
        r.in_progress = r.in_progress.saturating_sub(e.in_progress);
        r.evictions = r.evictions.saturating_sub(e.evictions);
        let (p, e) = (&mut out.read_pipes, &earlier.read_pipes);
        p.spliced = p.spliced.saturating_sub(e.spliced);
        p.exhausted = p.exhausted.saturating_sub(e.exhausted);
        p.make_failed = p.make_failed.saturating_sub(e.make_failed);
        p.discarded = p.discarded.saturating_sub(e.discarded);
        out.cache.since(&earlier.cache);
        let (n, e) = (&mut out.connections, &earlier.connections);
        n.accepted = n.accepted.saturating_sub(e.accepted);
        n.refused = n.refused.saturating_sub(e.refused);
        n.closed_idle = n.closed_idle.saturating_sub(e.closed_idle);
        n.closed_stalled = n.closed_stalled.saturating_sub(e.closed_stalled);
        n.closed_evicted = n.closed_evicted.saturating_sub(e.closed_evicted);
        out
    }

    /// The program with this short name.
    pub fn program(&self, name: &str) -> Option<&ProgramSnapshot> {
        self.calls.programs.iter().find(|p| p.name == name)
    }
}

impl ProgramSnapshot {
    pub fn calls(&self) -> u64 {
        self.procedures.iter().map(|p| p.calls).sum()
    }

    pub fn procedure(&self, name: &str) -> Option<&ProcSnapshot> {
        self.procedures.iter().find(|p| p.name == name)
    }
}

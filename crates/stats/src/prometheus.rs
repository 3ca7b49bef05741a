//! The Prometheus text exposition format (version 0.0.4) of a
//! [`Snapshot`]: base units in names (`_seconds`, `_bytes`), `_total` on
//! counters, latency histograms whose buckets are the statistics' own
//! bucket bounds taken every power of two (the cumulative counts at those
//! bounds are exact: finer buckets nest inside them).

use std::fmt::Write;

use crate::histogram::{BUCKETS, bucket_upper_ns};
use crate::snapshot::Snapshot;

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every metric family this module writes, with its type: the Grafana
/// dashboard's test checks its expressions against these names.
pub const FAMILIES: &[(&str, &str)] = &[
    ("keel_info", "gauge"),
    ("keel_start_time_seconds", "gauge"),
    ("keel_calls_total", "counter"),
    ("keel_call_errors_total", "counter"),
    ("keel_call_duration_seconds", "histogram"),
    ("keel_rpc_errors_total", "counter"),
    ("keel_rpc_calls_by_flavor_total", "counter"),
    ("keel_gss_contexts", "gauge"),
    ("keel_gss_contexts_established_total", "counter"),
    ("keel_gss_contexts_evicted_total", "counter"),
    ("keel_gss_auth_failures_total", "counter"),
    ("keel_nfs4_clients", "gauge"),
    ("keel_nfs4_sessions", "gauge"),
    ("keel_nfs4_opens", "gauge"),
    ("keel_nfs4_lock_states", "gauge"),
    ("keel_nfs4_delegations", "gauge"),
    ("keel_nfs4_grace", "gauge"),
    ("keel_nfs4_callbacks_total", "counter"),
    ("keel_nfs4_cb_getattr_shared_total", "counter"),
    ("keel_nfs4_callback_failures_total", "counter"),
    ("keel_nfs4_delegations_recalled_total", "counter"),
    ("keel_nfs4_delegations_revoked_total", "counter"),
    ("keel_nfs4_reply_cache_bytes", "gauge"),
    ("keel_nfs4_refused_total", "counter"),
    ("keel_nfs4_slots_past_the_pool_total", "counter"),
    ("keel_nfs4_client_record_failures_total", "counter"),
    ("keel_replies_total", "counter"),
    ("keel_read_bytes_total", "counter"),
    ("keel_write_bytes_total", "counter"),
    ("keel_export_calls_total", "counter"),
    ("keel_export_errors_total", "counter"),
    ("keel_export_read_bytes_total", "counter"),
    ("keel_export_write_bytes_total", "counter"),
    ("keel_client_calls_total", "counter"),
    ("keel_client_errors_total", "counter"),
    ("keel_client_read_bytes_total", "counter"),
    ("keel_client_write_bytes_total", "counter"),
    ("keel_clients_evicted_total", "counter"),
    ("keel_calls_running", "gauge"),
    ("keel_calls_stuck", "gauge"),
    ("keel_reply_cache_hits_total", "counter"),
    ("keel_reply_cache_misses_total", "counter"),
    ("keel_reply_cache_in_progress_drops_total", "counter"),
    ("keel_reply_cache_evictions_total", "counter"),
    ("keel_reply_cache_entries", "gauge"),
    ("keel_reply_cache_bytes", "gauge"),
    ("keel_connections", "gauge"),
    ("keel_connections_max", "gauge"),
    ("keel_connections_accepted_total", "counter"),
    ("keel_connections_refused_total", "counter"),
    ("keel_connections_closed_total", "counter"),
    ("keel_workers", "gauge"),
    ("keel_workers_alive", "gauge"),
    ("keel_workers_busy", "gauge"),
    ("keel_worker_places", "gauge"),
    ("keel_worker_places_lent_total", "counter"),
    ("keel_ready_connections", "gauge"),
    ("keel_parked_connections", "gauge"),
    ("keel_inflight_bytes", "gauge"),
    ("keel_inflight_max_bytes", "gauge"),
    ("keel_cached_inodes", "gauge"),
    ("keel_spliced_reads_total", "counter"),
    ("keel_read_pipes_exhausted_total", "counter"),
    ("keel_read_pipes", "gauge"),
    ("keel_read_pipes_max", "gauge"),
    ("keel_read_pipe_failures_total", "counter"),
    ("keel_export_reloads_total", "counter"),
    ("keel_cache_device_written_bytes_total", "counter"),
    ("keel_cache_device_read_bytes_total", "counter"),
    ("keel_cache_device_errors_total", "counter"),
    ("keel_cache_device_failed", "gauge"),
    ("keel_cache_device_wear_percent", "gauge"),
    ("keel_cache_device_spare_percent", "gauge"),
    ("keel_cache_log_used_bytes", "gauge"),
    ("keel_cache_log_bytes", "gauge"),
    ("keel_cache_dirty_bytes", "gauge"),
    ("keel_cache_dirty_files", "gauge"),
    ("keel_cache_oldest_dirty_seconds", "gauge"),
    ("keel_cache_destaged_bytes_total", "counter"),
    ("keel_cache_destage_errors_total", "counter"),
    ("keel_cache_dropped_bytes_total", "counter"),
    ("keel_cache_full_waits_total", "counter"),
    ("keel_cache_writes_logged_total", "counter"),
    ("keel_cache_logged_bytes_total", "counter"),
    ("keel_cache_writes_bypassed_total", "counter"),
    ("keel_cache_bypassed_bytes_total", "counter"),
    ("keel_cache_read_bytes_total", "counter"),
    ("keel_cache_read_hits_total", "counter"),
    ("keel_cache_read_misses_total", "counter"),
    ("keel_cache_read_admissions_total", "counter"),
    ("keel_cache_read_slots_used", "gauge"),
    ("keel_cache_read_slots", "gauge"),
    ("keel_cache_read_evictions_total", "counter"),
    ("keel_cache_read_errors_total", "counter"),
];

struct Out {
    text: String,
}

impl Out {
    fn family(&mut self, name: &str, help: &str) {
        let kind = FAMILIES.iter().find(|(n, _)| *n == name).map(|(_, k)| *k).expect("family listed in FAMILIES");
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{k}=\"{}\"", escape(v));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }

    fn one(&mut self, name: &str, help: &str, value: u64) {
        self.family(name, help);
        self.sample(name, &[], value);
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn seconds(ns: u64) -> String {
    format!("{}", ns as f64 / 1e9)
}

/// A metric family over a list: its name, its help and its value for one item.
type PerItem<T> = (&'static str, &'static str, fn(&T) -> u64);

/// The snapshot in the text exposition format.
pub fn render(s: &Snapshot) -> String {
    let mut o = Out { text: String::with_capacity(64 << 10) };
    o.family("keel_info", "The running server: its version and write verifier (value 1).");
    o.sample("keel_info", &[("version", &s.server.version), ("write_verifier", &s.server.write_verifier)], 1);
    o.one(
        "keel_start_time_seconds",
        "When the server started, in seconds since the Unix epoch.",
        s.server.started_unix,
    );

    let programs = &s.calls.programs;
    o.family(
        "keel_calls_total",
        "RPC calls executed, by program and procedure (replays from the reply cache excluded).",
    );
    for p in programs {
        for c in &p.procedures {
            o.sample("keel_calls_total", &[("program", &p.name), ("proc", &c.name)], c.calls);
        }
    }
    o.family(
        "keel_call_errors_total",
        "Calls answered with an error status or an RPC error, by program and procedure.",
    );
    for p in programs {
        for c in &p.procedures {
            o.sample("keel_call_errors_total", &[("program", &p.name), ("proc", &c.name)], c.errors);
        }
    }
    o.family(
        "keel_call_duration_seconds",
        "Service time of calls: from the program taking the call to its reply encoded.",
    );
    for p in programs {
        for c in &p.procedures {
            let labels = [("program", p.name.as_str()), ("proc", c.name.as_str())];
            let dense = c.latency.dense();
            let mut cumulative = 0;
            for (i, n) in dense.iter().enumerate() {
                cumulative += n;
                let Some(upper) = bucket_upper_ns(i) else { continue };
                // Every power of two: the exposition stays small and its
                // buckets are exact sums of the statistics' buckets.
                if upper.is_power_of_two() {
                    let le = seconds(upper);
                    o.sample("keel_call_duration_seconds_bucket", &[labels[0], labels[1], ("le", &le)], cumulative);
                }
            }
            debug_assert_eq!(dense.len(), BUCKETS);
            o.sample("keel_call_duration_seconds_bucket", &[labels[0], labels[1], ("le", "+Inf")], cumulative);
            o.sample("keel_call_duration_seconds_sum", &labels, seconds(c.latency.sum_ns));
            o.sample("keel_call_duration_seconds_count", &labels, cumulative);
        }
    }
    o.family(
        "keel_rpc_errors_total",
        "Calls a program answered with an RPC error instead of results, or left unanswered (dropped).",
    );
    for p in programs {
        for (error, n) in [
            ("garbage_args", p.garbage_args),
            ("proc_unavail", p.proc_unavail),
            ("system_err", p.system_err),
            ("dropped", p.dropped),
            ("too_weak", p.too_weak),
        ] {
            o.sample("keel_rpc_errors_total", &[("program", &p.name), ("error", error)], n);
        }
    }
    o.family("keel_rpc_calls_by_flavor_total", "Calls by the security flavor of their credential.");
    for f in &s.calls.flavors {
        o.sample("keel_rpc_calls_by_flavor_total", &[("flavor", &f.flavor)], f.calls);
    }
    // Zero, with no causes, on a server that serves no Kerberos.
    let g = &s.gss;
    o.one("keel_gss_contexts", "RPCSEC_GSS contexts held now.", g.contexts);
    o.one("keel_gss_contexts_established_total", "RPCSEC_GSS contexts established.", g.established);
    o.one("keel_gss_contexts_evicted_total", "RPCSEC_GSS contexts dropped to keep the bounds.", g.evicted);
    o.family("keel_gss_auth_failures_total", "RPCSEC_GSS calls refused or dropped, by cause.");
    for f in &g.failures {
        o.sample("keel_gss_auth_failures_total", &[("cause", &f.cause)], f.count);
    }
    // Zero on a server that serves no NFSv4.
    let v4 = &s.nfs4;
    o.family("keel_nfs4_clients", "NFSv4.1 clients now, by the state of their lease.");
    for (state, n) in
        [("active", v4.clients_active), ("courtesy", v4.clients_courtesy), ("unconfirmed", v4.clients_unconfirmed)]
    {
        o.sample("keel_nfs4_clients", &[("state", state)], n);
    }
    o.one("keel_nfs4_sessions", "NFSv4.1 sessions now.", v4.sessions);
    o.one("keel_nfs4_opens", "NFSv4 open states now.", v4.opens);
    o.one("keel_nfs4_lock_states", "NFSv4 lock states (a lock owner on a file) now.", v4.lock_states);
    o.one("keel_nfs4_delegations", "NFSv4 delegations held now.", v4.delegations);
    o.one("keel_nfs4_grace", "1 while the NFSv4 grace period after a start lasts.", u64::from(v4.grace));
    o.family("keel_nfs4_callbacks_total", "NFSv4.1 callbacks sent on the backchannel, by operation.");
    o.sample("keel_nfs4_callbacks_total", &[("op", "cb_null")], v4.callback_probes);
    o.sample("keel_nfs4_callbacks_total", &[("op", "cb_recall")], v4.callback_recalls);
    o.sample("keel_nfs4_callbacks_total", &[("op", "cb_getattr")], v4.callback_getattrs);
    o.one(
        "keel_nfs4_cb_getattr_shared_total",
        "Attribute reads that waited for a CB_GETATTR in flight for the same file instead of sending one.",
        v4.callback_getattrs_shared,
    );
    o.family("keel_nfs4_callback_failures_total", "NFSv4.1 callbacks not answered in time or not sent, by cause.");
    o.sample("keel_nfs4_callback_failures_total", &[("cause", "timeout")], v4.callback_timeouts);
    o.sample("keel_nfs4_callback_failures_total", &[("cause", "unsent")], v4.callback_unsent);
    o.one("keel_nfs4_delegations_recalled_total", "NFSv4 delegations recalled.", v4.delegations_recalled);
    o.one(
        "keel_nfs4_delegations_revoked_total",
        "NFSv4 delegations revoked: not returned in time after a recall.",
        v4.delegations_revoked,
    );
    o.one("keel_nfs4_reply_cache_bytes", "Bytes the NFSv4.1 sessions' reply caches hold now.", v4.reply_cache_bytes);
    o.family("keel_nfs4_refused_total", "NFSv4.1 claims refused past a limit, by what was short.");
    for r in &v4.refused {
        o.sample("keel_nfs4_refused_total", &[("resource", &r.resource)], r.count);
    }
    o.one(
        "keel_nfs4_slots_past_the_pool_total",
        "NFSv4.1 sessions given their one slot beyond the reply cache's budget.",
        v4.slots_past_the_pool,
    );
    o.one(
        "keel_nfs4_client_record_failures_total",
        "NFSv4.1 client records that could not be written or removed in state_dir.",
        v4.client_records_failed,
    );
    o.family(
        "keel_replies_total",
        "Replies by the status they carry (nfsstat3, mountstat3, nlm4_stats, ...), statuses seen so far.",
    );
    for p in programs {
        for st in &p.statuses {
            o.sample("keel_replies_total", &[("program", &p.name), ("status", &st.name)], st.count);
        }
    }
    o.one("keel_read_bytes_total", "File data read by clients.", s.calls.read_bytes);
    o.one("keel_write_bytes_total", "File data written by clients.", s.calls.write_bytes);

    let exports = &s.calls.exports;
    let per_export: [PerItem<crate::ExportSnapshot>; 4] = [
        ("keel_export_calls_total", "Calls on each export.", |e| e.calls),
        ("keel_export_errors_total", "Calls on each export answered with an error.", |e| e.errors),
        ("keel_export_read_bytes_total", "File data read from each export.", |e| e.read_bytes),
        ("keel_export_write_bytes_total", "File data written to each export.", |e| e.write_bytes),
    ];
    for (name, help, value) in per_export {
        o.family(name, help);
        for e in exports {
            o.sample(name, &[("export", &e.id.to_string()), ("path", &e.path)], value(e));
        }
    }
    let clients = &s.calls.clients;
    let per_client: [PerItem<crate::ClientSnapshot>; 4] = [
        ("keel_client_calls_total", "Calls from each client host (a bounded table).", |c| c.calls),
        ("keel_client_errors_total", "Calls from each client host answered with an error.", |c| c.errors),
        ("keel_client_read_bytes_total", "File data read by each client host.", |c| c.read_bytes),
        ("keel_client_write_bytes_total", "File data written by each client host.", |c| c.write_bytes),
    ];
    for (name, help, value) in per_client {
        o.family(name, help);
        for c in clients {
            o.sample(name, &[("client", &c.address)], value(c));
        }
    }
    o.one(
        "keel_clients_evicted_total",
        "Clients dropped from the per-client table to make room.",
        s.calls.clients_evicted,
    );
    o.one("keel_calls_running", "Calls running now.", s.calls.running);
    o.one("keel_calls_stuck", "Calls running for longer than a minute.", s.calls.stuck);

    let r = &s.reply_cache;
    o.one("keel_reply_cache_hits_total", "Retransmissions answered from the duplicate reply cache.", r.hits);
    o.one("keel_reply_cache_misses_total", "Cacheable calls seen for the first time.", r.misses);
    o.one(
        "keel_reply_cache_in_progress_drops_total",
        "Retransmissions of a call still running, dropped.",
        r.in_progress,
    );
    o.one("keel_reply_cache_evictions_total", "Completed entries dropped to keep the cache's bounds.", r.evictions);
    o.one("keel_reply_cache_entries", "Entries in the duplicate reply cache.", r.entries);
    o.one("keel_reply_cache_bytes", "Bytes the duplicate reply cache holds.", r.bytes);

    let c = &s.connections;
    o.family("keel_connections", "Open connections by state.");
    for (state, n) in [("busy", c.busy), ("idle", c.idle), ("stalled", c.stalled), ("closing", c.closing)] {
        o.sample("keel_connections", &[("state", state)], n);
    }
    o.one("keel_connections_max", "The connection limit (max_connections).", c.max);
    o.one("keel_connections_accepted_total", "Connections accepted.", c.accepted);
    o.one("keel_connections_refused_total", "Connections refused at the limit with none idle to close.", c.refused);
    o.family("keel_connections_closed_total", "Connections the server closed, by reason.");
    for (reason, n) in [("idle", c.closed_idle), ("stalled", c.closed_stalled), ("evicted", c.closed_evicted)] {
        o.sample("keel_connections_closed_total", &[("reason", reason)], n);
    }
    let w = &s.workers;
    o.one("keel_workers", "File-system worker threads.", w.workers);
    o.one("keel_workers_alive", "Worker threads running (fewer than keel_workers if some died).", w.alive);
    o.one("keel_workers_busy", "Workers not waiting for work: taking, running or answering calls.", w.busy);
    o.one("keel_worker_places", "Workers that may be active at once (as many as CPUs).", w.places);
    o.one(
        "keel_worker_places_lent_total",
        "Workers let in beyond keel_worker_places because every active one waited in a call unannounced.",
        w.places_lent,
    );
    o.one("keel_ready_connections", "Connections with a call ready, waiting for an idle worker.", w.ready_queue);
    o.family("keel_parked_connections", "Connections whose next call waits, by what it waits for.");
    o.sample("keel_parked_connections", &[("waiting_for", "slots")], w.parked_for_slots);
    o.sample("keel_parked_connections", &[("waiting_for", "budget")], w.parked_for_budget);
    o.one("keel_inflight_bytes", "Bytes of calls in flight and unsent replies.", s.memory.inflight_bytes);
    o.one("keel_inflight_max_bytes", "The bound on bytes in flight (max_inflight_mib).", s.memory.inflight_bytes_max);
    o.one("keel_cached_inodes", "Objects held open in the inode cache.", s.server.cached_inodes);
    let p = &s.read_pipes;
    o.one("keel_spliced_reads_total", "READs whose data was spliced from the page cache.", p.spliced);
    o.one("keel_read_pipes_exhausted_total", "READs that copied because every pipe was in use.", p.exhausted);
    o.one("keel_read_pipes", "Pipes for spliced READs, free or in use.", p.pipes);
    o.one("keel_read_pipes_max", "The bound on pipes for spliced READs (0: READs copy).", p.pipes_max);
    o.family("keel_read_pipe_failures_total", "Pipes not made, or closed with data that could not be read.");
    o.sample("keel_read_pipe_failures_total", &[("kind", "make")], p.make_failed);
    o.sample("keel_read_pipe_failures_total", &[("kind", "discarded")], p.discarded);
    o.family("keel_export_reloads_total", "Export reloads, applied or refused.");
    o.sample("keel_export_reloads_total", &[("result", "applied")], s.reloads.applied);
    o.sample("keel_export_reloads_total", &[("result", "refused")], s.reloads.refused);
    cache(&mut o, &s.cache);
    o.text
}

fn cache(o: &mut Out, c: &crate::snapshot::CacheSnapshot) {
    type Device = crate::snapshot::CacheDeviceSnapshot;
    let devices: [PerItem<Device>; 4] = [
        ("keel_cache_device_written_bytes_total", "Bytes written to a cache device.", |d| d.bytes_written),
        ("keel_cache_device_read_bytes_total", "Bytes read from a cache device.", |d| d.bytes_read),
        ("keel_cache_device_errors_total", "I/O errors of a cache device.", |d| d.errors),
        ("keel_cache_device_failed", "1 if the cache device has failed and is no longer used.", |d| {
            u64::from(d.state == "failed")
        }),
    ];
    for (name, help, value) in devices {
        o.family(name, help);
        for d in &c.devices {
            o.sample(name, &[("device", &d.name), ("role", &d.role)], value(d));
        }
    }
    // Only devices that report wear have these samples.
    let wear: [PerItem<crate::snapshot::DeviceWear>; 2] = [
        (
            "keel_cache_device_wear_percent",
            "The device's estimate of its rated endurance used (NVMe percentage used).",
            |w| w.percent_used.into(),
        ),
        ("keel_cache_device_spare_percent", "The device's spare capacity left (NVMe available spare).", |w| {
            w.spare_percent.into()
        }),
    ];
    for (name, help, value) in wear {
        o.family(name, help);
        for d in &c.devices {
            if let Some(w) = &d.wear {
                o.sample(name, &[("device", &d.name), ("role", &d.role)], value(w));
            }
        }
    }
    o.one("keel_cache_log_used_bytes", "Bytes of the write-back log in use.", c.log_used_bytes);
    o.one("keel_cache_log_bytes", "The write-back log's size on each device.", c.log_bytes);
    o.one("keel_cache_dirty_bytes", "File data in the log that the back end does not have yet.", c.dirty_bytes);
    o.one("keel_cache_dirty_files", "Files with data in the log.", c.dirty_files);
    o.family("keel_cache_oldest_dirty_seconds", "Age of the oldest record in the log.");
    o.sample("keel_cache_oldest_dirty_seconds", &[], seconds(c.oldest_dirty_ms * 1_000_000));
    o.one("keel_cache_destaged_bytes_total", "Bytes written from the log to the back end.", c.destaged_bytes);
    o.one("keel_cache_destage_errors_total", "Destage rounds that failed (the data stays dirty).", c.destage_errors);
    o.one("keel_cache_dropped_bytes_total", "Dirty bytes of files removed before destage.", c.dropped_bytes);
    o.one("keel_cache_full_waits_total", "Writes that waited for room in a full log.", c.full_waits);
    type Export = crate::snapshot::CacheExportSnapshot;
    let exports: [PerItem<Export>; 6] = [
        ("keel_cache_writes_logged_total", "WRITEs taken by the write-back log.", |e| e.writes_logged),
        ("keel_cache_logged_bytes_total", "Bytes taken by the write-back log.", |e| e.bytes_logged),
        ("keel_cache_bypassed_bytes_total", "Bytes written straight to the back end.", |e| e.bytes_bypassed),
        ("keel_cache_read_hits_total", "READs the read cache answered.", |e| e.read_hits),
        ("keel_cache_read_misses_total", "READs the read cache was asked and could not answer.", |e| e.read_misses),
        ("keel_cache_read_admissions_total", "Blocks copied into the read cache.", |e| e.admissions),
    ];
    for (name, help, value) in exports {
        o.family(name, help);
        for e in &c.exports {
            o.sample(name, &[("export", &e.id.to_string()), ("mode", &e.mode)], value(e));
        }
    }
    o.family("keel_cache_writes_bypassed_total", "WRITEs sent straight to the back end, by reason.");
    for e in &c.exports {
        for b in &e.writes_bypassed {
            o.sample(
                "keel_cache_writes_bypassed_total",
                &[("export", &e.id.to_string()), ("reason", &b.reason)],
                b.writes,
            );
        }
    }
    o.family("keel_cache_read_bytes_total", "Bytes READ returned, by where they came from.");
    for e in &c.exports {
        let id = e.id.to_string();
        o.sample("keel_cache_read_bytes_total", &[("export", &id), ("source", "log")], e.bytes_from_log);
        o.sample("keel_cache_read_bytes_total", &[("export", &id), ("source", "disk")], e.bytes_from_disk);
        o.sample("keel_cache_read_bytes_total", &[("export", &id), ("source", "read_cache")], e.bytes_from_cache);
    }
    o.one("keel_cache_read_slots_used", "Read cache slots holding data.", c.read_slots_used);
    o.one("keel_cache_read_slots", "Read cache slots on all devices.", c.read_slots);
    o.one("keel_cache_read_evictions_total", "Read cache slots reused for other data.", c.read_evictions);
    o.one("keel_cache_read_errors_total", "Read cache checksum and I/O errors.", c.read_errors);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HistogramSnapshot, ProcSnapshot, ProgramSnapshot};

    #[test]
    fn histograms_are_cumulative_and_end_at_the_count() {
        let mut s = Snapshot::default();
        let h = crate::Histogram::default();
        for us in [1, 3, 3, 900, 70_000_000] {
            h.record(std::time::Duration::from_micros(us));
        }
        s.calls.programs.push(ProgramSnapshot {
            name: "nfs".into(),
            procedures: vec![ProcSnapshot { name: "read".into(), calls: 5, errors: 0, latency: h.snapshot() }],
            ..Default::default()
        });
        let text = render(&s);
        let buckets: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with("keel_call_duration_seconds_bucket{program=\"nfs\",proc=\"read\""))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
        assert_eq!(*buckets.last().unwrap(), 5);
        assert_eq!(buckets[0], 1, "1 µs is under the first bound, 1.024 µs");
        assert!(text.contains("le=\"+Inf\"} 5"));
        assert!(text.contains("keel_call_duration_seconds_count{program=\"nfs\",proc=\"read\"} 5"));
        // Every family written is declared once, with a type.
        for (name, _) in FAMILIES {
            assert_eq!(text.matches(&format!("# TYPE {name} ")).count(), 1, "{name}");
        }
        let _ = HistogramSnapshot::default();
    }

    #[test]
    fn wear_is_sampled_only_for_devices_that_report_it() {
        let mut s = Snapshot::default();
        let device = |name: &str, wear| crate::snapshot::CacheDeviceSnapshot {
            name: name.into(),
            role: "log mirror".into(),
            wear,
            ..Default::default()
        };
        let worn = crate::snapshot::DeviceWear { percent_used: 7, spare_percent: 100, host_written_bytes: 1 << 40 };
        s.cache.devices = vec![device("/dev/nvme0n1", Some(worn)), device("/var/tmp/c2", None)];
        let text = render(&s);
        assert!(
            text.contains("keel_cache_device_wear_percent{device=\"/dev/nvme0n1\",role=\"log mirror\"} 7\n"),
            "{text}"
        );
        assert!(text.contains("keel_cache_device_spare_percent{device=\"/dev/nvme0n1\",role=\"log mirror\"} 100\n"));
        assert!(!text.contains("wear_percent{device=\"/var/tmp/c2\""));
        assert!(text.contains("keel_cache_device_read_bytes_total{device=\"/var/tmp/c2\""));
    }

    #[test]
    fn shared_cb_getattrs_are_counted_beside_those_sent() {
        let mut s = Snapshot::default();
        s.nfs4.enabled = true;
        s.nfs4.callback_getattrs = 3;
        s.nfs4.callback_getattrs_shared = 2;
        let out = render(&s);
        assert!(out.contains("keel_nfs4_callbacks_total{op=\"cb_getattr\"} 3\n"), "{out}");
        assert!(out.contains("keel_nfs4_cb_getattr_shared_total 2\n"), "{out}");
    }

    #[test]
    fn nfs4_refusals_are_counted_by_resource() {
        let mut s = Snapshot::default();
        s.nfs4.enabled = true;
        s.nfs4.refused = vec![
            crate::Nfs4Refusals { resource: "clients".into(), count: 2 },
            crate::Nfs4Refusals { resource: "opens".into(), count: 0 },
        ];
        s.nfs4.slots_past_the_pool = 5;
        let out = render(&s);
        assert!(out.contains("keel_nfs4_refused_total{resource=\"clients\"} 2\n"), "{out}");
        assert!(out.contains("keel_nfs4_refused_total{resource=\"opens\"} 0\n"), "{out}");
        assert!(out.contains("keel_nfs4_slots_past_the_pool_total 5\n"), "{out}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}

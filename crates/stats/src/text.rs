//! `keel stat` as text: totals since the start (like `nfsstat -s`), or
//! rates over an interval (like `nfsiostat`) when given the difference of
//! two snapshots and the seconds between them.

use std::fmt::Write;
use std::time::Duration;

use crate::snapshot::{ProgramSnapshot, Snapshot};

/// How much to show.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `Some(seconds)`: `snapshot` is what happened in that many seconds;
    /// show rates.
    pub interval: Option<f64>,
    /// Clients listed at most (the busiest).
    pub clients_max: usize,
    /// List every open connection.
    pub connections: bool,
}

pub fn bytes(n: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{v:.0} B") } else { format!("{v:.1} {}", UNITS[unit]) }
}

pub fn duration(d: Option<Duration>) -> String {
    match d {
        None => "-".into(),
        Some(d) if d < Duration::from_millis(1) => format!("{:.0}µs", d.as_secs_f64() * 1e6),
        Some(d) if d < Duration::from_secs(1) => format!("{:.2}ms", d.as_secs_f64() * 1e3),
        Some(d) => format!("{:.2}s", d.as_secs_f64()),
    }
}

fn uptime(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 { format!("{d}d {h}h{m:02}m") } else { format!("{h}h{m:02}m{s:02}s") }
}

pub fn render(s: &Snapshot, opts: Options) -> String {
    let mut o = String::new();
    let per = |n: u64| match opts.interval {
        Some(secs) if secs > 0.0 => format!("{:.1}/s", n as f64 / secs),
        _ => n.to_string(),
    };
    let per_bytes = |n: u64| match opts.interval {
        Some(secs) if secs > 0.0 => format!("{}/s", bytes(n as f64 / secs)),
        _ => bytes(n as f64),
    };
    let now = s.taken_unix_ms / 1000;
    match opts.interval {
        Some(secs) => {
            let _ = writeln!(o, "keel {} pid {}: the last {secs:.1} s", s.server.version, s.server.pid);
        }
        None => {
            let _ = writeln!(
                o,
                "keel {} pid {}, up {}, write verifier {}",
                s.server.version,
                s.server.pid,
                uptime(now.saturating_sub(s.server.started_unix)),
                s.server.write_verifier
            );
        }
    }
    let c = &s.calls;
    let _ = writeln!(o, "data: read {}, written {}", per_bytes(c.read_bytes), per_bytes(c.write_bytes));
    let flavors: Vec<String> = c.flavors.iter().map(|f| format!("{} {}", f.flavor, per(f.calls))).collect();
    if !flavors.is_empty() {
        let _ = writeln!(o, "calls by flavor: {}", flavors.join(", "));
    }
    let g = &s.gss;
    if g.enabled {
        let failures: Vec<String> =
            g.failures.iter().filter(|f| f.count > 0).map(|f| format!("{} {}", f.cause, per(f.count))).collect();
        let failures = if failures.is_empty() { "none".to_owned() } else { failures.join(", ") };
        let _ = writeln!(
            o,
            "kerberos: {} contexts, {} established, {} evicted; refused: {failures}",
            g.contexts,
            per(g.established),
            per(g.evicted)
        );
    }
    let v4 = &s.nfs4;
    if v4.enabled {
        let _ = writeln!(
            o,
            "nfsv4: {} clients ({} courtesy, {} unconfirmed), {} sessions, {} opens, {} lock states, {} delegations{}",
            v4.clients_active + v4.clients_courtesy + v4.clients_unconfirmed,
            v4.clients_courtesy,
            v4.clients_unconfirmed,
            v4.sessions,
            v4.opens,
            v4.lock_states,
            v4.delegations,
            if v4.grace { format!(", in grace ({} s left)", v4.grace_remaining_seconds) } else { String::new() }
        );
        let _ = writeln!(
            o,
            "nfsv4 callbacks: {} CB_NULL, {} CB_RECALL, {} CB_GETATTR ({} shared), {} timed out, {} unsent; delegations: {} recalled, {} revoked",
            per(v4.callback_probes),
            per(v4.callback_recalls),
            per(v4.callback_getattrs),
            per(v4.callback_getattrs_shared),
            per(v4.callback_timeouts),
            per(v4.callback_unsent),
            per(v4.delegations_recalled),
            per(v4.delegations_revoked)
        );
        let refused: Vec<String> =
            v4.refused.iter().filter(|r| r.count > 0).map(|r| format!("{} {}", r.resource, per(r.count))).collect();
        let _ = writeln!(
            o,
            "nfsv4 limits: refused {}; {} sessions given a slot past the reply cache ({} held); {} client records failed",
            if refused.is_empty() { "none".to_owned() } else { refused.join(", ") },
            per(v4.slots_past_the_pool),
            bytes(v4.reply_cache_bytes as f64),
            per(v4.client_records_failed)
        );
    }
    let r = &s.reply_cache;
    let _ = writeln!(
        o,
        "reply cache: {} hits, {} misses, {} dropped in progress, {} evicted; {} entries, {}",
        per(r.hits),
        per(r.misses),
        per(r.in_progress),
        per(r.evictions),
        r.entries,
        bytes(r.bytes as f64)
    );
    let p = &s.read_pipes;
    if p.pipes_max == 0 {
        let _ = writeln!(o, "spliced reads: off (READs copy)");
    } else {
        let _ = writeln!(
            o,
            "spliced reads: {}, {} copied with every pipe in use; pipes {} of {}, {} not made, {} discarded",
            per(p.spliced),
            per(p.exhausted),
            p.pipes,
            p.pipes_max,
            per(p.make_failed),
            per(p.discarded)
        );
    }
    if !s.cache.devices.is_empty() || s.cache.exports.iter().any(|e| e.mode != "off") {
        o.push_str(&render_cache(&s.cache, opts.interval));
    }
    let n = &s.connections;
    let _ = writeln!(
        o,
        "connections: {} open of {} ({} busy, {} idle, {} stalled, {} closing); {} accepted, {} refused at the limit, \
         closed {} idle, {} stalled, {} evicted",
        n.open,
        n.max,
        n.busy,
        n.idle,
        n.stalled,
        n.closing,
        per(n.accepted),
        per(n.refused),
        per(n.closed_idle),
        per(n.closed_stalled),
        per(n.closed_evicted)
    );
    let w = &s.workers;
    let _ = writeln!(
        o,
        "workers: {} of {} busy ({} at once, {} more let in for unannounced waits), \
         {} connections ready for a worker, {} parked for slots, {} for memory; \
         {} calls running, the oldest for {}, {} stuck; memory in flight {} of {}",
        w.busy,
        w.workers,
        w.places,
        w.places_lent,
        w.ready_queue,
        w.parked_for_slots,
        w.parked_for_budget,
        c.running,
        duration(Some(Duration::from_millis(c.oldest_running_ms))),
        c.stuck,
        bytes(s.memory.inflight_bytes as f64),
        bytes(s.memory.inflight_bytes_max as f64)
    );
    for p in &c.programs {
        program(&mut o, p, &per);
    }
    if !c.exports.is_empty() {
        let _ = writeln!(
            o,
            "\nexports:\n  {:>5}  {:>10}  {:>8}  {:>12}  {:>12}  path",
            "id", "calls", "errors", "read", "written"
        );
        for e in &c.exports {
            let _ = writeln!(
                o,
                "  {:>5}  {:>10}  {:>8}  {:>12}  {:>12}  {}",
                e.id,
                per(e.calls),
                per(e.errors),
                per_bytes(e.read_bytes),
                per_bytes(e.write_bytes),
                e.path
            );
        }
    }
    if !c.clients.is_empty() {
        let shown = c.clients.len().min(opts.clients_max);
        let evicted = if c.clients_evicted > 0 {
            format!("; {} evicted from the table", c.clients_evicted)
        } else {
            String::new()
        };
        let _ = writeln!(o, "\nclients ({shown} of {} by calls{evicted}):", c.clients.len());
        let _ = writeln!(o, "  {:<40}  {:>10}  {:>8}  {:>12}  {:>12}", "address", "calls", "errors", "read", "written");
        for cl in &c.clients[..shown] {
            let _ = writeln!(
                o,
                "  {:<40}  {:>10}  {:>8}  {:>12}  {:>12}",
                cl.address,
                per(cl.calls),
                per(cl.errors),
                per_bytes(cl.read_bytes),
                per_bytes(cl.write_bytes)
            );
        }
    }
    if opts.connections && !n.list.is_empty() {
        let _ = writeln!(o, "\nopen connections:");
        for conn in &n.list {
            let _ = writeln!(
                o,
                "  {:<46}  {:<8}  {} calls in flight, idle {} s",
                conn.peer, conn.state, conn.calls_in_flight, conn.idle_seconds
            );
        }
    }
    o
}

fn program(o: &mut String, p: &ProgramSnapshot, per: &dyn Fn(u64) -> String) {
    let total = p.calls();
    let _ = writeln!(
        o,
        "\n{} v{}: {} calls, {} garbage args, {} unknown procedures, {} system errors, {} dropped, {} too weak",
        p.name,
        p.version,
        per(total),
        p.garbage_args,
        p.proc_unavail,
        p.system_err,
        p.dropped,
        p.too_weak
    );
    if total == 0 {
        return;
    }
    // NFSv4's operation names are longer than the procedures' of the others.
    let width = p.procedures.iter().filter(|c| c.calls > 0).map(|c| c.name.len()).max().unwrap_or(0).max(12);
    let _ = writeln!(
        o,
        "  {:<width$} {:>12} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "procedure", "calls", "%", "errors", "mean", "p50", "p99", "p99.9"
    );
    for c in p.procedures.iter().filter(|c| c.calls > 0) {
        let l = &c.latency;
        let _ = writeln!(
            o,
            "  {:<width$} {:>12} {:>5.1}% {:>9} {:>9} {:>9} {:>9} {:>9}",
            c.name,
            per(c.calls),
            100.0 * c.calls as f64 / total as f64,
            per(c.errors),
            duration(l.mean()),
            duration(l.quantile(0.5)),
            duration(l.quantile(0.99)),
            duration(l.quantile(0.999))
        );
    }
    let errors: Vec<_> = p.statuses.iter().filter(|s| Some(s.status) != Some(0) && s.count > 0).collect();
    if !errors.is_empty() {
        let list: Vec<String> = errors.iter().map(|s| format!("{} {}", s.name, per(s.count))).collect();
        let _ = writeln!(o, "  errors by status: {}", list.join(", "));
    }
}

/// The cache tier, like iostat: devices, the log, destage, and per export
/// what the cache took, what went around it and where reads came from.
/// With `interval`, counters are rates.
pub fn render_cache(c: &crate::snapshot::CacheSnapshot, interval: Option<f64>) -> String {
    let mut o = String::new();
    let per_bytes = |n: u64| match interval {
        Some(secs) if secs > 0.0 => format!("{}/s", bytes(n as f64 / secs)),
        _ => bytes(n as f64),
    };
    let per = |n: u64| match interval {
        Some(secs) if secs > 0.0 => format!("{:.1}/s", n as f64 / secs),
        _ => n.to_string(),
    };
    if c.devices.is_empty() {
        let _ = writeln!(o, "cache: no devices");
    }
    for d in &c.devices {
        let _ = writeln!(
            o,
            "cache device {}: {}, {}, {}; written {}, read {}, {} errors; read cache {} of {}; {}",
            d.name,
            d.role,
            d.state,
            bytes(d.size_bytes as f64),
            per_bytes(d.bytes_written),
            per_bytes(d.bytes_read),
            per(d.errors),
            bytes(d.read_cache_bytes as f64),
            bytes(d.read_cache_capacity_bytes as f64),
            match &d.wear {
                Some(w) => format!(
                    "wear {}% used, {}% spare, {} written in its life",
                    w.percent_used,
                    w.spare_percent,
                    bytes(w.host_written_bytes as f64)
                ),
                None => "wear not reported by the device".into(),
            }
        );
    }
    if c.log_bytes > 0 {
        let _ = writeln!(
            o,
            "cache log: {} of {} used, {} dirty in {} files, oldest {}; destaged {}, {} errors, {} dropped (removed), \
             {} writes waited for room",
            bytes(c.log_used_bytes as f64),
            bytes(c.log_bytes as f64),
            bytes(c.dirty_bytes as f64),
            c.dirty_files,
            duration((c.dirty_bytes > 0).then(|| Duration::from_millis(c.oldest_dirty_ms))),
            per_bytes(c.destaged_bytes),
            per(c.destage_errors),
            per_bytes(c.dropped_bytes),
            per(c.full_waits)
        );
    }
    if c.read_slots > 0 {
        let _ = writeln!(
            o,
            "cache reads: {} of {} slots used, {} evicted, {} errors",
            c.read_slots_used,
            c.read_slots,
            per(c.read_evictions),
            per(c.read_errors)
        );
    }
    for e in &c.exports {
        let bypassed: Vec<String> = e
            .writes_bypassed
            .iter()
            .filter(|b| b.writes > 0)
            .map(|b| format!("{} {}", per(b.writes), b.reason))
            .collect();
        let _ = writeln!(
            o,
            "cache export {} {} ({}{}): writes logged {} ({}), bypassed {} ({}){}; reads from log {} ({}), from disk {} \
             ({}); read cache {} hits ({}), {} misses, {} admitted, {} sequential",
            e.id,
            e.path,
            e.mode,
            if e.serving.is_empty() { String::new() } else { format!(", served {} for now", e.serving) },
            per(e.writes_logged),
            per_bytes(e.bytes_logged),
            per(e.writes_bypassed.iter().map(|b| b.writes).sum()),
            per_bytes(e.bytes_bypassed),
            if bypassed.is_empty() { String::new() } else { format!(": {}", bypassed.join(", ")) },
            per(e.reads_log_hit),
            per_bytes(e.bytes_from_log),
            per(e.reads_disk),
            per_bytes(e.bytes_from_disk),
            per(e.read_hits),
            per_bytes(e.bytes_from_cache),
            per(e.read_misses),
            per(e.admissions),
            per(e.reads_sequential)
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nfsv4_callbacks_line_counts_cb_getattrs_sent_and_shared() {
        let mut s = Snapshot::default();
        s.nfs4.enabled = true;
        s.nfs4.callback_getattrs = 3;
        s.nfs4.callback_getattrs_shared = 2;
        let text = render(&s, Options { interval: None, clients_max: 0, connections: false });
        assert!(text.contains("3 CB_GETATTR (2 shared)"), "{text}");
    }

    #[test]
    fn the_nfsv4_limits_line_names_only_what_was_refused() {
        let mut s = Snapshot::default();
        s.nfs4.enabled = true;
        let line = |s: &Snapshot| {
            let text = render(s, Options { interval: None, clients_max: 0, connections: false });
            text.lines().find(|l| l.starts_with("nfsv4 limits:")).map(str::to_owned).unwrap_or_default()
        };
        assert!(line(&s).starts_with("nfsv4 limits: refused none;"), "{}", line(&s));
        s.nfs4.refused = vec![
            crate::Nfs4Refusals { resource: "clients".into(), count: 0 },
            crate::Nfs4Refusals { resource: "opens".into(), count: 4 },
        ];
        s.nfs4.client_records_failed = 1;
        assert!(line(&s).starts_with("nfsv4 limits: refused opens 4;"), "{}", line(&s));
        assert!(line(&s).ends_with("; 1 client records failed"), "{}", line(&s));
    }

    #[test]
    fn sizes_and_durations_read_well() {
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3.0 GiB");
        assert_eq!(duration(Some(Duration::from_micros(85))), "85µs");
        assert_eq!(duration(Some(Duration::from_micros(1500))), "1.50ms");
        assert_eq!(duration(None), "-");
    }
}

//! What `keel bench` shows while it runs and when it is done.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::workload::{Phase, Progress, Unit};
use keel_bench_format::result::{BenchResult, Run};
use keel_bench_format::units::human_bytes;

/// Redraws a progress line on the terminal every half second until aborted.
pub async fn progress_line(label: String, progress: Arc<Progress>, total: u64, unit: Unit) {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let start = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let secs = start.elapsed().as_secs_f64();
        let line = match unit {
            Unit::MiBPerSecond => {
                let done = progress.bytes.load(Ordering::Relaxed);
                format!(
                    "{label}: {:.1} MiB/s, {} of {} ({:.0}%)",
                    done as f64 / (1 << 20) as f64 / secs,
                    human_bytes(done),
                    human_bytes(total),
                    100.0 * done as f64 / total.max(1) as f64
                )
            }
            _ => {
                let done = progress.ops.load(Ordering::Relaxed);
                let pct = 100.0 * done as f64 / total.max(1) as f64;
                format!("{label}: {:.0} {}, {done} of {total} ({pct:.0}%)", done as f64 / secs, unit.name())
            }
        };
        eprint!("\r\x1b[2K{line}");
        let _ = std::io::stderr().flush();
    }
}

pub fn clear_progress() {
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
}

/// One line per finished run.
pub fn run_line(workload: &str, phase: &Phase, clients: u32, threads: u32, rep: u32, reps: u32, run: &Run) {
    let amount = match phase.unit {
        Unit::MiBPerSecond => human_bytes(run.bytes),
        _ => format!("{} ops", run.ops),
    };
    let errors = if run.errors > 0 { format!(", {} ERRORS", run.errors) } else { String::new() };
    eprintln!(
        "{workload} {:<18} {clients:>4} x {threads:<3} run {rep}/{reps}: {:>12.1} {:<6} ({amount} in {:.2} s{errors})",
        phase.name,
        run.value,
        phase.unit.name(),
        run.seconds
    );
}

/// The summary, in the shape IOR and mdtest users know.
pub fn summary_table(r: &BenchResult) -> String {
    let mut out = format!(
        "\nkeel bench {}: {} {} ({}), {} rank(s)\n",
        r.workload, r.target.address, r.target.export, r.target.server, r.client.ranks
    );
    out += &format!(
        "{:<20} {:>7} {:>7} {:>7} {:>12} {:>12} {:>12} {:>7} {:>5}\n",
        "Operation", "Clients", "Threads", "Procs", "Max", "Min", "Mean", "Unit", "Runs"
    );
    for p in &r.points {
        out += &format!(
            "{:<20} {:>7} {:>7} {:>7} {:>12.1} {:>12.1} {:>12.1} {:>7} {:>5}\n",
            p.phase,
            p.clients,
            p.threads_per_client,
            p.processes(),
            p.max,
            p.min,
            p.mean,
            p.unit,
            p.runs.len()
        );
    }
    let errors: u64 = r.points.iter().flat_map(|p| &p.runs).map(|r| r.errors).sum();
    if errors > 0 {
        out += &format!("WARNING: {errors} operations failed; see the per-run lines above\n");
    }
    out
}

//! `keel stat`: the running server's statistics, totals or rates over
//! intervals (also used by `keel cache stat`).

use std::path::Path;

use anyhow::Context;

use super::AdminArgs;
use super::out::{out, outln};
use crate::admin;

/// Totals since the start, or rates over intervals (`keel stat`, `keel
/// cache stat`).
#[derive(clap::Args)]
pub struct Sampling {
    /// Print rates over every interval of SECONDS instead of totals since
    /// the start, until interrupted (or --count intervals).
    #[arg(short, long, value_name = "SECONDS", value_parser = parse_interval)]
    interval: Option<f64>,
    /// With --interval: stop after this many intervals.
    #[arg(long, value_name = "N", requires = "interval")]
    count: Option<u64>,
    /// Print the statistics as JSON (one object per line with --interval:
    /// the difference over the interval, with `interval_seconds`).
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct StatArgs {
    #[command(flatten)]
    server: AdminArgs,
    #[command(flatten)]
    sampling: Sampling,
    /// Clients listed at most (the busiest first).
    #[arg(long, value_name = "N", default_value_t = 20)]
    clients: usize,
    /// Also list every open connection with its state.
    #[arg(long)]
    connections: bool,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=86400.0).contains(&v) => Ok(v),
        _ => Err("expected a number of seconds from 0.1 to 86400".into()),
    }
}

fn snapshot(socket: &Path) -> anyhow::Result<keel_stats::Snapshot> {
    let answer = admin::call(socket, &admin::Request::Stats {})?;
    serde_json::from_value(answer).context("the server's statistics do not parse")
}

pub fn run(args: StatArgs) -> anyhow::Result<()> {
    let opts =
        |interval| keel_stats::text::Options { interval, clients_max: args.clients, connections: args.connections };
    sample(
        &args.server.socket()?,
        &args.sampling,
        |s, interval| keel_stats::text::render(s, opts(interval)),
        |s| serde_json::to_value(s),
    )
}

/// The statistics once (totals since the start), or the difference over
/// every interval, as `text` (given the interval's seconds) or as `json`
/// (with `interval_seconds`).
pub fn sample(
    socket: &Path,
    sampling: &Sampling,
    text: impl Fn(&keel_stats::Snapshot, Option<f64>) -> String,
    json: impl Fn(&keel_stats::Snapshot) -> serde_json::Result<serde_json::Value>,
) -> anyhow::Result<()> {
    let mut before = snapshot(socket)?;
    let Some(seconds) = sampling.interval else {
        if sampling.json {
            outln!("{}", json(&before)?);
        } else {
            out!("{}", text(&before, None));
        }
        return Ok(());
    };
    let mut printed = 0;
    while sampling.count.is_none_or(|n| printed < n) {
        std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
        let now = snapshot(socket)?;
        let elapsed = now.taken_unix_ms.saturating_sub(before.taken_unix_ms) as f64 / 1000.0;
        let delta = now.since(&before);
        if sampling.json {
            let mut value = json(&delta)?;
            value["interval_seconds"] = serde_json::json!(elapsed);
            outln!("{value}");
        } else {
            outln!("{}", text(&delta, Some(elapsed.max(0.001))));
        }
        before = now;
        printed += 1;
    }
    Ok(())
}

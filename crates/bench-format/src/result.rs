//! The result file of a benchmark run (JSON), shared by `keel bench`, which
//! writes it, and `keel report`, which draws it. Every sample is kept, with
//! the full configuration and the facts about the hosts, so a run can be
//! understood (and redrawn) years later.

use serde::{Deserialize, Serialize};

/// Identifies the format; bump on incompatible changes.
pub const SCHEMA: &str = "keel-bench/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    pub schema: String,
    /// The series name in reports ("keel sync", "ganesha", "cache on").
    pub label: String,
    /// "seq", "random", "meta" or "ior".
    pub workload: String,
    /// RFC 3339, UTC.
    pub started: String,
    pub finished: String,
    /// The command line, as given.
    pub command: Vec<String>,
    /// Every option of the run, as parsed (workload-specific keys).
    pub config: serde_json::Value,
    pub target: Target,
    pub client: ClientFacts,
    pub points: Vec<Point>,
}

/// What was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// host:port of the NFS server.
    pub address: String,
    pub export: String,
    /// What the user says the server is ("keel 0.1.0", "nfs-ganesha 4.3").
    pub server: String,
    /// Export options as the user describes them ("sync,no_root_squash").
    pub export_options: String,
    /// FSINFO as the server reported it.
    pub rtmax: u32,
    pub wtmax: u32,
    pub dtpref: u32,
}

/// The machines the clients ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientFacts {
    pub keel_version: String,
    /// Processes that generated load (MPI ranks; 1 on one machine).
    pub ranks: u32,
    /// One entry per distinct host among the ranks.
    pub hosts: Vec<HostFacts>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostFacts {
    pub hostname: String,
    pub kernel: String,
    pub os: String,
    pub cpus: u32,
    pub memory_bytes: u64,
}

/// One phase at one load level: every repetition, and their summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// "write", "read", "create", "stat", "remove", or for IOR
    /// "write-fpp", "read-ssf-strided", ...
    pub phase: String,
    pub clients: u32,
    pub threads_per_client: u32,
    /// "MiB/s", "IOPS" or "ops/s".
    pub unit: String,
    pub runs: Vec<Run>,
    pub min: f64,
    pub mean: f64,
    pub max: f64,
}

impl Point {
    /// Load generators in total: what the papers' x axes count.
    pub fn processes(&self) -> u32 {
        self.clients.saturating_mul(self.threads_per_client)
    }

    /// A point from its runs, with min/mean/max computed.
    pub fn new(phase: &str, clients: u32, threads_per_client: u32, unit: &str, runs: Vec<Run>) -> Self {
        let values: Vec<f64> = runs.iter().map(|r| r.value).collect();
        let (min, mean, max) = summarize(&values);
        Point { phase: phase.into(), clients, threads_per_client, unit: unit.into(), runs, min, mean, max }
    }
}

/// One repetition of one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// The aggregate figure (in the point's unit).
    pub value: f64,
    /// Wall time of the timed part, from the first start to the last end.
    pub seconds: f64,
    pub bytes: u64,
    pub ops: u64,
    /// The figure of each load generator, in rank/thread order.
    pub per_process: Vec<f64>,
    /// Operations that failed (a run with errors is still recorded).
    pub errors: u64,
}

/// min, mean and max; zeros for no values.
pub fn summarize(values: &[f64]) -> (f64, f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, values.iter().sum::<f64>() / values.len() as f64, max)
}

impl BenchResult {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("results serialize")
    }

    pub fn from_json(text: &str) -> Result<Self, ResultError> {
        let r: BenchResult = serde_json::from_str(text)?;
        if r.schema != SCHEMA {
            return Err(ResultError::Schema(r.schema));
        }
        Ok(r)
    }

    /// One CSV row per run, with a header.
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "label,workload,phase,clients,threads_per_client,processes,repetition,value,unit,seconds,bytes,ops,errors\n",
        );
        for p in &self.points {
            for (i, r) in p.runs.iter().enumerate() {
                out += &format!(
                    "{},{},{},{},{},{},{},{:.3},{},{:.6},{},{},{}\n",
                    csv_field(&self.label),
                    self.workload,
                    p.phase,
                    p.clients,
                    p.threads_per_client,
                    p.processes(),
                    i + 1,
                    r.value,
                    p.unit,
                    r.seconds,
                    r.bytes,
                    r.ops,
                    r.errors
                );
            }
        }
        out
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    #[error("not a keel bench result: {0}")]
    Json(#[from] serde_json::Error),
    #[error("unsupported result format {0:?} (this keel reads {SCHEMA:?})")]
    Schema(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> BenchResult {
        let run = |v: f64| Run {
            value: v,
            seconds: 2.0,
            bytes: 1 << 30,
            ops: 1024,
            per_process: vec![v / 2.0; 2],
            errors: 0,
        };
        BenchResult {
            schema: SCHEMA.into(),
            label: "keel, sync".into(),
            workload: "seq".into(),
            started: "2026-11-22T05:00:00Z".into(),
            finished: "2026-11-22T05:01:00Z".into(),
            command: vec!["keel".into(), "bench".into(), "seq".into()],
            config: serde_json::json!({"record_size": 1048576}),
            target: Target {
                address: "127.0.0.1:2049".into(),
                export: "/srv".into(),
                server: "keel 0.1.0".into(),
                export_options: "sync".into(),
                rtmax: 1 << 20,
                wtmax: 1 << 20,
                dtpref: 1 << 20,
            },
            client: ClientFacts {
                keel_version: "0.1.0".into(),
                ranks: 1,
                hosts: vec![HostFacts {
                    hostname: "n1".into(),
                    kernel: "6.1".into(),
                    os: "Debian 12".into(),
                    cpus: 2,
                    memory_bytes: 1 << 34,
                }],
            },
            points: vec![Point::new("write", 2, 1, "MiB/s", vec![run(100.0), run(300.0)])],
        }
    }

    #[test]
    fn json_roundtrips_and_checks_the_schema() {
        let r = sample();
        assert_eq!(BenchResult::from_json(&r.to_json()).unwrap(), r);
        let other = r.to_json().replace(SCHEMA, "keel-bench/99");
        assert!(matches!(BenchResult::from_json(&other), Err(ResultError::Schema(_))));
        assert!(BenchResult::from_json("{").is_err());
    }

    #[test]
    fn points_summarize_their_runs() {
        let p = &sample().points[0];
        assert_eq!((p.min, p.mean, p.max), (100.0, 200.0, 300.0));
        assert_eq!(p.processes(), 2);
    }

    #[test]
    fn csv_has_a_row_per_run_and_quotes_labels() {
        let csv = sample().to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with("\"keel, sync\",seq,write,2,1,2,1,100.000,MiB/s"));
    }
}

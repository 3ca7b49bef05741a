//! `keel bench`: load from one machine or many (mpirun/srun), in the shapes
//! of the published NFS benchmarks Keel is compared with (IOzone N-to-N,
//! random 4 KiB, mdtest, IOR; the papers are cited in docs/benchmarks.md,
//! "Reference systems", and called the seed papers in the code), written
//! out as JSON (every sample, the full configuration) and CSV, summarised
//! as a table.

#![forbid(unsafe_code)]

mod args;
mod engine;
mod group;
mod output;
mod workload;

use std::path::{Path, PathBuf};

use anyhow::Context;

pub use args::{BenchCommand, CommonArgs};
pub use group::rank_from_env;

use keel_bench_format::result::BenchResult;

/// Runs a benchmark to the end. Only rank 0 writes files and prints the
/// summary; it returns the result there.
pub fn run(cmd: BenchCommand, argv: Vec<String>) -> anyhow::Result<Option<BenchResult>> {
    // The options as given go into the results verbatim.
    let config = match &cmd {
        BenchCommand::Seq(a) => serde_json::to_value(a)?,
        BenchCommand::Random(a) => serde_json::to_value(a)?,
        BenchCommand::Meta(a) => serde_json::to_value(a)?,
        BenchCommand::Ior(a) => serde_json::to_value(a)?,
    };
    let (common, workload) = match cmd {
        BenchCommand::Seq(a) => (a.common.clone(), workload::Workload::Seq(a)),
        BenchCommand::Random(a) => (a.common.clone(), workload::Workload::Random(a)),
        BenchCommand::Meta(a) => (a.common.clone(), workload::Workload::Meta(a)),
        BenchCommand::Ior(a) => (a.common.clone(), workload::Workload::Ior(a)),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = runtime.block_on(engine::run(workload, common.clone(), config, argv))?;
    let Some(result) = result else { return Ok(None) };
    let json = common.output.clone().unwrap_or_else(|| default_output(&result));
    write_outputs(&result, &json)?;
    println!("{}", output::summary_table(&result));
    println!("results: {} and {}", json.display(), json.with_extension("csv").display());
    Ok(Some(result))
}

fn default_output(r: &BenchResult) -> PathBuf {
    let stamp: String = r.started.chars().filter(|c| c.is_ascii_digit()).collect();
    PathBuf::from(format!("keel-bench-{}-{stamp}.json", r.workload))
}

fn write_outputs(r: &BenchResult, json: &Path) -> anyhow::Result<()> {
    std::fs::write(json, r.to_json()).with_context(|| format!("cannot write {}", json.display()))?;
    let csv = json.with_extension("csv");
    std::fs::write(&csv, r.to_csv()).with_context(|| format!("cannot write {}", csv.display()))?;
    Ok(())
}

//! `keel-tools`: `keel bench`, `keel verify` and `keel report` for client
//! nodes, without the server. On a server node, `keel bench ...` runs this
//! binary with the same arguments (see the server's `tools.rs`).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use anyhow::Context;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// The command line of `keel-tools` (and of `keel bench|verify|report`,
/// which run it).
#[derive(Parser)]
#[command(
    name = "keel-tools",
    version,
    about = "Keel's evaluation tools: load generator, data verifier and report, for client nodes",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure an NFS server the way published NFS benchmarks did (Dell's
    /// NFS white papers, BeeGFS's report: IOzone, mdtest, IOR): sweeps over
    /// clients, repetitions, JSON and CSV results.
    #[command(subcommand)]
    Bench(Box<keel_loadgen::BenchCommand>),
    /// Write self-describing data streams, recording what the server
    /// acknowledged as stable, and check them after failures (genstream and
    /// checkstream). `check` exits 1 when acknowledged data is missing or
    /// wrong, 2 on an error.
    Verify {
        #[command(subcommand)]
        cmd: keel_verify::VerifyCommand,
    },
    /// Draw result files of keel bench as an HTML page with figures (PNG,
    /// SVG) and tables, side by side and against the published numbers of
    /// Dell's NFS white papers (2012-2016) and a BeeGFS report (2015).
    Report(keel_report::ReportArgs),
    /// Write the man pages of keel-tools and its commands into DIR, and
    /// the same pages as `keel bench|verify|report` (for packaging).
    #[command(hide = true)]
    Manpages { dir: PathBuf },
}

/// `keel-tools.1` and a page per command (`keel-tools-bench-seq.1`), and
/// the pages of the same commands as the server's `keel` runs them
/// (`keel-bench-seq.1`): the keel package leaves those to this one.
fn manpages(dir: &Path) -> anyhow::Result<()> {
    fn generate(cmd: &clap::Command, dir: &Path) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            generate(sub, dir)?;
        }
        clap_mangen::Man::new(cmd.clone()).generate_to(dir).map(drop)
    }
    let built = |name: &'static str| {
        let mut cmd = Cli::command().name(name).bin_name(name).disable_help_subcommand(true);
        cmd.build();
        cmd
    };
    let write = || -> std::io::Result<()> {
        generate(&built("keel-tools"), dir)?;
        for sub in built("keel").get_subcommands().filter(|s| !s.is_hide_set()) {
            generate(sub, dir)?;
        }
        Ok(())
    };
    write().with_context(|| format!("cannot write man pages into {}", dir.display()))
}

fn main() -> ExitCode {
    // `keel bench ...` runs `keel-tools bench ...` with argv[0] = `keel`,
    // so that help and errors read as the command the user typed.
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Verify { cmd } => {
            return match keel_verify::run(cmd) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("keel: {e:#}");
                    ExitCode::from(2)
                }
            };
        }
        Command::Report(args) => keel_report::run(args),
        Command::Manpages { dir } => manpages(&dir),
        Command::Bench(cmd) => keel_loadgen::run(*cmd, std::env::args().collect()).map(drop),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keel: {e:#}");
            ExitCode::FAILURE
        }
    }
}

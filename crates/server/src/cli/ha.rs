//! `keel ha`: write a Pacemaker pair's configuration, show who serves what.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use super::out::{errln, out, outln};
use crate::ha;

#[derive(Subcommand)]
pub enum HaCommand {
    /// From PLAN (see /usr/share/doc/keel/examples/keel-ha.example.toml),
    /// write corosync.conf, cluster.crm (Pacemaker resources, constraints,
    /// fencing topology) and one Keel configuration per service into DIR,
    /// and print the commands that install them. Runs nothing.
    Init {
        plan: PathBuf,
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Which node serves which service and since when, the nodes, the last
    /// failover and fencing, failed actions (from crm_mon and the CIB).
    /// Exits 0 when every service is served and no node awaits fencing, 1
    /// otherwise, 3 when the cluster cannot be asked.
    Status {
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: HaCommand) -> ExitCode {
    match cmd {
        HaCommand::Init { plan, out } => match init(&plan, &out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                errln!("keel: {e:#}");
                ExitCode::FAILURE
            }
        },
        HaCommand::Status { json } => status(json),
    }
}

fn init(plan: &Path, out: &Path) -> anyhow::Result<()> {
    let plan = ha::init::Plan::load(plan)?;
    let files = ha::init::render(&plan)?;
    // Root's alone: the fence devices' credentials are in them.
    keel_store::state_file::create_dir(out).with_context(|| format!("cannot create {}", out.display()))?;
    for (name, text) in &files {
        let path = out.join(name);
        keel_store::state_file::replace_durably(&path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        outln!("wrote {}", path.display());
    }
    out!("{}", ha::init::commands(&plan, out));
    Ok(())
}

fn status(json: bool) -> ExitCode {
    let st = match ha::status::gather() {
        Ok(st) => st,
        Err(e) => {
            errln!("keel: {e:#}");
            return ExitCode::from(3);
        }
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&st).expect("status serializes"));
    } else {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        out!("{}", ha::status::render(&st, now));
    }
    if ha::status::healthy(&st) { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

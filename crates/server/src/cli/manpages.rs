//! `keel manpages DIR` (hidden): the man pages the package installs, made
//! from the same command-line definitions the binary parses.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;

use super::Cli;
use crate::tools;

/// keel serves and administers a file server: section 8, as nfsd(8) and
/// exportfs(8). (keel-tools' commands, for client nodes, are in 1.)
pub const SECTION: &str = "8";

/// What every page refers to: the configuration file's page (written by
/// hand, contrib/man/keel.toml.5) and the commands keel-tools runs.
const SEE_ALSO: &str = "keel.toml(5), exports(5), keel-bench(1), keel-verify(1), keel-report(1)";

/// `keel.8` and a page per command (`keel-exports-reload.8`), except the
/// commands keel-tools runs: the keel-tools package installs their pages.
pub fn write(dir: &Path) -> anyhow::Result<()> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Their pages are keel-tools' (section 1); SEE ALSO names them.
    for name in tools::COMMANDS {
        cmd = cmd.mut_subcommand(name, |s| s.hide(true));
    }
    cmd.build();
    generate(&cmd, dir).with_context(|| format!("cannot write man pages into {}", dir.display()))
}

fn generate(cmd: &clap::Command, dir: &Path) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        generate(sub, dir)?;
    }
    let man = clap_mangen::Man::new(cmd.clone()).section(SECTION);
    let mut page = std::fs::File::create(dir.join(man.get_filename()))?;
    page.write_all(&render(&man, cmd)?)?;
    page.flush()
}

/// The page as clap_mangen renders it, with a SEE ALSO section before the
/// version.
fn render(man: &clap_mangen::Man, cmd: &clap::Command) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut out)?;
    }
    let parent = if cmd.get_name() == "keel" { "" } else { "keel(8), " };
    writeln!(out, ".SH \"SEE ALSO\"\n{parent}{}", SEE_ALSO.replace('-', "\\-"))?;
    man.render_version_section(&mut out)?;
    Ok(out)
}

//! `keel manpages DIR` (hidden): the man pages the package installs.

use std::path::Path;

use anyhow::Context;

use super::Cli;
use crate::tools;

/// `keel.1` and a page per command (`keel-exports-reload.1`), except the
/// commands keel-tools runs: the keel-tools package installs their pages.
pub fn write(dir: &Path) -> anyhow::Result<()> {
    fn generate(cmd: &clap::Command, dir: &Path) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && !tools::COMMANDS.contains(&s.get_name())) {
            generate(sub, dir)?;
        }
        clap_mangen::Man::new(cmd.clone()).generate_to(dir).map(drop)
    }
    use clap::CommandFactory;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    generate(&cmd, dir).with_context(|| format!("cannot write man pages into {}", dir.display()))
}

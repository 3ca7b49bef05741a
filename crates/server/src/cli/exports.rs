//! `keel exports`: what the running server exports, and `keel exports
//! reload`.

use clap::Subcommand;

use super::AdminArgs;
use super::out::outln;
use crate::{admin, reload};

#[derive(Subcommand)]
pub enum ExportsCommand {
    /// Make the server re-read its configuration file and apply its
    /// exports: new ones are served, removed ones become stale for their
    /// clients, changed client lists apply to the next call. A file with
    /// any problem changes nothing. --config must name the server's own
    /// file (the server reads no other). Exits 1 if the reload was refused.
    Reload {
        #[command(flatten)]
        server: AdminArgs,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn list(server: &AdminArgs, json: bool) -> anyhow::Result<()> {
    let answer = admin::call(&server.socket()?, &admin::Request::Exports {})?;
    if json {
        outln!("{answer}");
        return Ok(());
    }
    let list: Vec<admin::ExportListing> = serde_json::from_value(answer)?;
    for e in &list {
        let subtree = if e.subtree { ", a subdirectory of its file system" } else { "" };
        outln!("{} (id {}, fsid {}{subtree})", e.path, e.id, e.fsid);
        for c in &e.clients {
            outln!("\t{}({})", c.host, c.options);
        }
    }
    Ok(())
}

pub fn reload(server: &AdminArgs, json: bool) -> anyhow::Result<()> {
    // The server reloads its own file: one named here must be that one.
    let file = server.config.as_deref().map(std::path::absolute).transpose()?.map(|f| f.display().to_string());
    let answer = admin::call(&server.socket()?, &admin::Request::ExportsReload { file })?;
    if json {
        outln!("{answer}");
        return Ok(());
    }
    let o: reload::ReloadOutcome = serde_json::from_value(answer)?;
    for w in &o.warnings {
        outln!("warning: {w}");
    }
    for (what, list) in [("added", &o.added), ("removed", &o.removed), ("changed", &o.changed)] {
        for e in list {
            outln!("{what} export {} {} {}", e.id, e.path, e.clients);
        }
    }
    outln!(
        "exports reloaded from {}: {} added, {} removed, {} changed, {} unchanged",
        o.file,
        o.added.len(),
        o.removed.len(),
        o.changed.len(),
        o.unchanged
    );
    for change in &o.needs_restart {
        outln!("not applied until keel restarts: {change}");
    }
    Ok(())
}

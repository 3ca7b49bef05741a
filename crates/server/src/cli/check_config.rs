//! `keel check-config`: validate a file and print what it would serve.

use std::path::Path;

use super::list;
use crate::config::{self, describe_options};
use crate::ha;

pub fn run(file: &Path) -> anyhow::Result<()> {
    let config = config::load(file)?;
    for w in &config.warnings {
        println!("warning: {w}");
    }
    if config.ha {
        ha::check_shared(&config)?;
    }
    let s = &config.server;
    println!("{}: valid", file.display());
    if config.ha {
        println!("[ha]: state_dir and every export on one file system, not the root's");
    }
    let mount_also =
        if s.mount_listen.is_empty() { String::new() } else { format!(" (MOUNT also on {})", list(&s.mount_listen)) };
    println!("listen {}{mount_also}, portmap {}", list(&s.listen), s.portmap);
    println!("{} workers, state in {}", s.workers, s.state_dir.display());
    println!(
        "at most {} connections, idle ones closed after {} s; {} MiB for calls in flight ({} MiB per connection), \
         a connection whose replies are not read closed after {} s",
        s.max_connections,
        s.idle_timeout.as_secs(),
        s.max_inflight_bytes >> 20,
        s.max_inflight_bytes_per_connection >> 20,
        s.stall_timeout.as_secs()
    );
    for e in &config.exports {
        let fsid = e.fsid.map_or("from the file system UUID".to_string(), |f| f.to_string());
        println!("export {} id {} fsid {}: {}", e.path.display(), e.id, fsid, describe_options(&e.clients));
    }
    Ok(())
}

//! `keel check-config`: the checks of a start (`crate::validate`) on a
//! file, and everything the server would use from it.

use std::path::Path;

use keel_cache::CacheMode;

use super::list;
use super::out::out;
use crate::config::{self, Config, describe_options};
use crate::validate::{self, Checked};

pub fn run(file: &Path) -> anyhow::Result<()> {
    let config = config::load(file)?;
    let checked = validate::check(&config, &file.display().to_string())?;
    out!("{}", summary(file, &config, &checked));
    Ok(())
}

/// What a server started with `config` would use, as `keel serve` would
/// compute it.
fn summary(file: &Path, config: &Config, checked: &Checked) -> String {
    let mut out = String::new();
    let mut line = |text: String| {
        out += &text;
        out.push('\n');
    };
    for w in &checked.warnings {
        line(format!("warning: {w}"));
    }
    let s = &config.server;
    line(format!("{}: valid", file.display()));
    if config.ha {
        line("[ha]: state_dir and every export on one file system, not the root's".into());
    }
    let mount_also =
        if s.mount_listen.is_empty() { String::new() } else { format!(" (MOUNT also on {})", list(&s.mount_listen)) };
    line(format!("listen {}{mount_also}, portmap {}", list(&s.listen), s.portmap));
    line(match s.metrics_listen {
        Some(addr) => format!("metrics on http://{addr}/metrics"),
        None => "metrics not served (no metrics_listen)".into(),
    });
    let nsm = s.nsm_state_dir.as_ref().map_or(String::new(), |d| format!(", NSM state in {}", d.display()));
    line(format!("{} workers, state in {}{nsm}, log level {}", s.workers, s.state_dir.display(), s.log_level));
    line(format!(
        "at most {} connections, idle ones closed after {} s; {} MiB for calls in flight ({} MiB per connection), \
         a connection whose replies are not read closed after {} s",
        s.max_connections,
        s.idle_timeout.as_secs(),
        s.max_inflight_bytes >> 20,
        s.max_inflight_bytes_per_connection >> 20,
        s.stall_timeout.as_secs()
    ));
    line(format!(
        "grace period at most {} s after a restart, at most {} locks per client host",
        s.grace_max.as_secs(),
        s.max_locks_per_client
    ));
    let c = &config.cache;
    if c.devices.is_empty() {
        line("no cache devices".into());
    } else {
        let devices: Vec<String> = c.devices.iter().map(|d| d.display().to_string()).collect();
        let log = c.log_bytes.map_or("sized by the cache".to_owned(), |b| format!("{} MiB on each", b >> 20));
        line(format!(
            "cache devices {} (log on the first two: {log}); sequential writes past {} MiB go to disk; \
             read misses fill {} KiB",
            devices.join(", "),
            c.sequential_cutoff >> 20,
            c.read_fill_bytes >> 10
        ));
    }
    for (e, (_, identity)) in config.exports.iter().zip(&checked.exports) {
        let cache = if e.cache == CacheMode::Off { String::new() } else { format!("; cache {}", e.cache.name()) };
        let subtree = if identity.subtree { "; a subdirectory of its file system" } else { "" };
        line(format!(
            "export {} id {} fsid {:#x} (from {}{subtree}{cache}): {}",
            e.path.display(),
            e.id,
            identity.fsid,
            validate::fsid_source_text(identity.fsid_source),
            describe_options(&e.clients)
        ));
    }
    out
}

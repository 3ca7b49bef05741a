//! `keel probe`: NULL calls to the server, as a monitor makes them.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use anyhow::Context;

use super::out::outln;
use crate::{config, probe, tickle};

pub fn run(config: Option<&Path>, addresses: &[String], timeout: u64) -> anyhow::Result<()> {
    let mut targets = Vec::new();
    if let Some(file) = config {
        let c = config::load(file)?;
        for listen in &c.server.listen {
            // Under [ha] the server listens on its floating address before
            // the address comes up (`keel ha init` starts it after the
            // server): until then there is nothing to call it at, and the
            // address's own resource monitors the address.
            if c.ha && !listen.ip().is_unspecified() && !tickle::holds(listen.ip()) {
                outln!("{listen}: not on this node (yet): not probed");
                continue;
            }
            targets.push(probe::target(*listen));
        }
    }
    for a in addresses {
        let addr = match a.parse::<SocketAddr>() {
            Ok(sa) => sa,
            Err(_) => SocketAddr::new(a.parse::<IpAddr>().with_context(|| format!("{a:?} is not an address"))?, 2049),
        };
        targets.push(addr);
    }
    probe::probe(&targets, std::time::Duration::from_secs(timeout.max(1)), |answer| outln!("{answer}"))
}

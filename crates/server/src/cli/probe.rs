//! `keel probe`: NULL calls to the server, as a monitor makes them.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use anyhow::Context;

use super::out::outln;
use crate::{config, probe};

pub fn run(config: Option<&Path>, addresses: &[String], timeout: u64) -> anyhow::Result<()> {
    let mut targets = Vec::new();
    if let Some(file) = config {
        let c = config::load(file)?;
        targets.extend(c.server.listen.iter().map(|a| probe::target(*a)));
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

//! `keel probe`: the server as a client reaches it. A monitor (the OCF
//! agent, a load balancer's health check) needs more than a live process
//! and a healthy administration socket: the listener, the floating address
//! and the worker pool must answer NFS over the network.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::bail;
use keel_nfs3_proto::{MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};
use keel_rpc_client::{Proc, call_tcp};

/// Where a probe calls for a listen address: a wildcard is reached on the
/// loopback address of its family.
pub fn target(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(a) if a.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), listen.port()),
        IpAddr::V6(a) if a.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), listen.port()),
        _ => listen,
    }
}

/// NULL calls to NFS version 3 and MOUNT version 3 over TCP at each of
/// `targets`, each bounded by `timeout`; `answered` is told of each
/// answer. Every failure is named.
pub fn probe(targets: &[SocketAddr], timeout: Duration, mut answered: impl FnMut(String)) -> anyhow::Result<()> {
    let mut failures = Vec::new();
    for &addr in targets {
        for (name, prog, vers) in [("NFS", NFS_PROGRAM, NFS_V3), ("MOUNT", MOUNT_PROGRAM, MOUNT_V3)] {
            let null = Proc { prog, vers, proc_: 0 };
            match call_tcp(addr, null, &(), timeout) {
                Ok(_) => answered(format!("{addr}: {name} v{vers} answers")),
                Err(e) => failures.push(format!("{addr}: {name} v{vers} NULL: {e}")),
            }
        }
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

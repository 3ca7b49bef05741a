//! `keel clients`: the NFSv4.1 clients of the running server and their
//! state, like knfsd's `/proc/fs/nfsd/clients/*/info`.

use super::AdminArgs;
use super::out::outln;
use crate::admin;

pub fn list(server: &AdminArgs, json: bool) -> anyhow::Result<()> {
    let answer = admin::call(&server.socket()?, &admin::Request::Nfs4Clients {})?;
    if json {
        outln!("{answer}");
        return Ok(());
    }
    let clients: Vec<admin::Nfs4ClientListing> = serde_json::from_value(answer)?;
    if clients.is_empty() {
        outln!("no NFSv4 clients");
    }
    for (i, c) in clients.iter().enumerate() {
        if i > 0 {
            outln!();
        }
        outln!("clientid: {}", c.clientid);
        outln!("address: {}", c.address);
        outln!("name: \"{}\"", c.owner);
        outln!("principal: {}", c.principal);
        outln!("minor version: {}", c.minor_version);
        if let Some(implementation) = &c.implementation {
            outln!("implementation: {implementation}");
        }
        match c.lease_remaining_seconds {
            Some(s) if c.status == "courtesy" => outln!("status: courtesy (let go in {s} s at most)"),
            Some(s) => outln!("status: {} (lease: {s} s left)", c.status),
            None => outln!("status: {}", c.status),
        }
        outln!("callback: {}", c.callback);
        outln!("sessions: {}", c.sessions.len());
        for s in &c.sessions {
            outln!(
                "\tsession {}: {} slots, {} connections ({} with the backchannel)",
                s.id,
                s.slots,
                s.connections,
                s.back_connections
            );
        }
        outln!("opens: {} ({} open owners)", c.opens, c.open_owners);
        outln!("lock states: {} ({} lock owners, {} ranges)", c.lock_states, c.lock_owners, c.lock_ranges);
        outln!("delegations: {} ({} write, {} revoked)", c.delegations, c.write_delegations, c.revoked_delegations);
        outln!("reclaim complete: {}", if c.reclaim_complete { "yes" } else { "no" });
    }
    Ok(())
}

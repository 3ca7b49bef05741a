//! Introspection for the admin interface (as knfsd's
//! `/proc/fs/nfsd/clients/*/info`) and counters for the metrics.

use std::hash::Hash;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::session::CallbackState;
use crate::stateid::StateKind;
use crate::{ClientId, GraceStatus, NfsState, Principal, Resource, SessionId};

/// Where a client's lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// EXCHANGE_ID done, CREATE_SESSION not yet.
    Unconfirmed,
    /// Renewed within the lease: `expires_in` is what is left of it.
    Active { expires_in: Duration },
    /// Its lease expired; it keeps its state until a conflict, the need of
    /// room, or `ends_in`.
    Courtesy { since: Duration, ends_in: Duration },
}

/// One client, for the admin interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    pub clientid: ClientId,
    /// `co_ownerid` (often a host name; may be any bytes).
    pub owner: Box<[u8]>,
    pub addr: IpAddr,
    pub principal: Principal,
    /// The implementation's domain and name, as the client gave them.
    pub implementation: Option<(String, String)>,
    /// The highest minor version of NFSv4 it used (1 or 2; 0 before its
    /// first COMPOUND is counted).
    pub minor_version: u32,
    pub lease: LeaseState,
    pub sessions: usize,
    /// Each session, in the order the client made them.
    pub session_list: Vec<SessionInfo>,
    /// Whether its backchannel answers, as the server last found out.
    pub callback: CallbackState,
    pub open_owners: usize,
    pub opens: usize,
    pub lock_owners: usize,
    pub lock_states: usize,
    pub lock_ranges: usize,
    pub delegations: usize,
    /// Of which write delegations.
    pub write_delegations: usize,
    pub revoked_delegations: usize,
    pub reclaim_complete: bool,
}

/// One session of a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub id: SessionId,
    /// Forechannel slots.
    pub slots: usize,
    /// Connections bound to the session, and how many of them carry its
    /// backchannel.
    pub connections: usize,
    pub back_connections: usize,
}

/// Counts now and counters since start, for the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateStats {
    pub clients: usize,
    pub courtesy_clients: usize,
    pub unconfirmed_clients: usize,
    pub sessions: usize,
    pub opens: usize,
    pub lock_states: usize,
    pub delegations: usize,
    pub files: usize,
    pub reply_cache_bytes: usize,
    pub grace: GraceStatus,
    pub clients_created: u64,
    pub clients_expired: u64,
    pub courtesy_expired: u64,
    pub sessions_created: u64,
    pub sequences: u64,
    pub replays: u64,
    pub misordered: u64,
    pub clid_inuse: u64,
    pub share_denied: u64,
    pub recalls: u64,
    pub revoked: u64,
    /// Claims refused past a limit, per [`Resource`] (in
    /// [`Resource::ALL`]'s order).
    pub refused: [u64; 8],
    /// Writes or removals of client records that failed.
    pub records_failed: u64,
    /// Sessions given their one slot beyond the reply cache's pool.
    pub slots_past_the_pool: u64,
}

impl<F: Clone + Eq + Hash, L> NfsState<F, L> {
    /// Every client, ordered by client ID.
    pub fn clients(&self, now: Instant) -> Vec<ClientInfo> {
        let lease = self.config.lease;
        let mut v: Vec<ClientInfo> = self
            .clients
            .values()
            .map(|c| {
                let state = if !c.confirmed {
                    LeaseState::Unconfirmed
                } else if c.lease_expired(now, lease) {
                    let since = now.duration_since(c.renewed + lease);
                    LeaseState::Courtesy { since, ends_in: self.courtesy_max_of(c).saturating_sub(since) }
                } else {
                    LeaseState::Active { expires_in: (c.renewed + lease).saturating_duration_since(now) }
                };
                let count = |pred: fn(&StateKind<L>) -> bool| {
                    c.states.iter().filter(|k| self.states.get(k).is_some_and(|s| pred(&s.kind))).count()
                };
                ClientInfo {
                    clientid: c.id,
                    owner: c.owner.clone(),
                    addr: c.addr,
                    principal: c.principal.clone(),
                    implementation: c.impl_id.clone(),
                    minor_version: c.minor_version,
                    lease: state,
                    sessions: c.sessions.len(),
                    session_list: c.sessions.iter().filter_map(|id| self.sessions.get(id)).map(|s| s.info()).collect(),
                    callback: c.callback,
                    open_owners: c.open_owners.len(),
                    opens: count(|k| matches!(k, StateKind::Open(_))),
                    lock_owners: c.lock_owners.len(),
                    lock_states: count(|k| matches!(k, StateKind::Lock(_))),
                    lock_ranges: c.held[Resource::LockRanges as usize],
                    delegations: count(|k| matches!(k, StateKind::Delegation(d) if !d.revoked)),
                    write_delegations: count(
                        |k| matches!(k, StateKind::Delegation(d) if !d.revoked && d.kind == crate::DelegationKind::Write),
                    ),
                    revoked_delegations: c.revoked,
                    reclaim_complete: c.reclaim_complete,
                }
            })
            .collect();
        v.sort_by_key(|c| c.clientid);
        v
    }

    pub fn stats(&self, now: Instant) -> StateStats {
        let lease = self.config.lease;
        let k = &self.counters;
        let of = |pred: fn(&StateKind<L>) -> bool| self.states.values().filter(|s| pred(&s.kind)).count();
        StateStats {
            clients: self.clients.len(),
            courtesy_clients: self.clients.values().filter(|c| c.confirmed && c.lease_expired(now, lease)).count(),
            unconfirmed_clients: self.clients.values().filter(|c| !c.confirmed).count(),
            sessions: self.sessions.len(),
            opens: of(|k| matches!(k, StateKind::Open(_))),
            lock_states: of(|k| matches!(k, StateKind::Lock(_))),
            delegations: of(|k| matches!(k, StateKind::Delegation(_))),
            files: self.files.len(),
            reply_cache_bytes: self.reply_cache_bytes,
            grace: self.grace.lock().status(now),
            clients_created: k.clients_created,
            clients_expired: k.clients_expired,
            courtesy_expired: k.courtesy_expired,
            sessions_created: k.sessions_created,
            sequences: k.sequences,
            replays: k.replays,
            misordered: k.misordered,
            clid_inuse: k.clid_inuse,
            share_denied: k.share_denied,
            recalls: k.recalls,
            revoked: k.revoked,
            refused: k.refused,
            records_failed: k.records_failed,
            slots_past_the_pool: k.slots_past_the_pool,
        }
    }
}

//! The server state of NFSv4.1 (RFC 8881), sans I/O: what the server
//! remembers between operations about its clients, and every rule the
//! RFC puts on it. No sockets, threads, clocks or storage: time comes in
//! as an [`Instant`] with each call, files are opaque keys `F` the handler
//! chooses (its file handles' identity), and lock-holding descriptions
//! are opaque values `L` the handler makes (keel-store's `LockFile`), so
//! tests drive everything.
//!
//! # What this crate owns
//!
//! - **Client records** (sections 2.4, 18.35): confirmed and unconfirmed
//!   records keyed by client owner and client ID, with the full case
//!   analysis of EXCHANGE_ID ([`NfsState::exchange_id`]). A client owner
//!   presented under another [`Principal`] while its record has unexpired
//!   state is `NFS4ERR_CLID_INUSE`: one client cannot take over another's
//!   state. Client IDs carry the [`BootEpoch`], so one from an earlier
//!   instance is `NFS4ERR_STALE_CLIENTID`.
//! - **Sessions** (sections 2.10, 18.36, 18.37, 18.34): CREATE_SESSION with
//!   its own replay cache and negotiated channel attributes, DESTROY_SESSION,
//!   BIND_CONN_TO_SESSION and the connections ([`ConnId`]) bound to each
//!   session, the backchannel's program, security and slot.
//! - **SEQUENCE and exactly-once** (sections 2.10.6, 18.46): the slot
//!   table, replays answered from the slot's cached reply, the reply cache
//!   bounded per session and in total and counted.
//! - **Leases and courtesy** (section 8.3): a lease renewed by every
//!   SEQUENCE; a client whose lease expired keeps its state as a courtesy
//!   client (as knfsd since 5.19) until it conflicts with someone, the
//!   server needs the room, or [`StateConfig::courtesy_max`] passes
//!   ([`StateConfig::courtesy_locks_max`] for one holding byte-range
//!   locks, which a local process may wait for unseen).
//! - **Stateids** (section 8.2): open, lock, delegation (layout reserved
//!   for pNFS), their seqids, the special stateids and the current stateid
//!   ([`CurrentStateid`]), TEST_STATEID and FREE_STATEID.
//! - **Opens and share reservations** (sections 9.7, 18.16, 18.2, 18.18)
//!   among open owners; **lock bookkeeping** (sections 18.10 to 18.12):
//!   lock owners, lock stateids, and the byte ranges each holds;
//!   **delegations** (section 10.2, 10.4): who holds which, recalls and
//!   their deadlines, revocation.
//! - **Grace and reclaim** (sections 8.4.2, 18.51): [`Grace`], one for
//!   NFSv4.1 and NLM ([`SharedGrace`]), and the [`ClientRecords`] kept on
//!   stable storage.
//! - **Limits** on everything a client can make the server hold
//!   ([`Limits`]), counted per client address with
//!   [`keel_exports::claims::ClaimPool`].
//! - **Introspection**: [`NfsState::clients`] (knfsd's
//!   `/proc/fs/nfsd/clients`) and [`NfsState::stats`].
//!
//! # What the handler does with each answer
//!
//! Every operation returns the protocol's status on failure (an
//! [`Nfsstat4`] to put in the reply) and what the reply needs on success.
//! Beyond that:
//!
//! - After **every** call, the handler drains [`NfsState::take_released`]:
//!   lock-holding descriptions the state let go of (drop them: closing a
//!   description releases its OFD locks), and opens, delegations and
//!   clients that ended. The state expires clients from inside many calls
//!   (a conflict with a courtesy client, room needed for another, a client
//!   that restarted), so this is the one place where the handler learns
//!   of it.
//! - After every call that may conflict with a delegation, it drains
//!   [`NfsState::take_recalls`] and sends CB_RECALL for each (through
//!   [`NfsState::callback_channel`]); the operation that conflicted got
//!   `NFS4ERR_DELAY` and will be retried by its client.
//! - SEQUENCE ([`NfsState::sequence`]) either starts a request on a slot
//!   — the handler runs the rest of the COMPOUND and then calls
//!   [`NfsState::sequence_done`] exactly once, with the reply to cache, also
//!   when the COMPOUND failed — or answers a replay, which the handler
//!   sends as it is.
//! - LOCK and LOCKU return a plan ([`LockPlan`], [`UnlockPlan`]) holding
//!   the state borrowed: the handler takes or releases the byte range
//!   through the lock-holding description the plan names (or a new one it
//!   opens for a new lock owner and file) and tells the plan the outcome.
//!   The state never detects byte-range conflicts: OFD locks do, across
//!   NFSv4.1, NLM clients and local processes; it mirrors what each lock
//!   state holds so that it can count it, answer LOCKS_HELD and hand back
//!   every description of an expired client.
//! - I/O (READ, WRITE, SETATTR of the size) checks its stateid with
//!   [`NfsState::check_io`]; every other access that could conflict with a
//!   delegation (a v3 WRITE, an NLM lock, a REMOVE, ...) asks
//!   [`NfsState::delegation_conflict`] first and waits (NFS4ERR_DELAY,
//!   NFS3ERR_JUKEBOX) while a recall is in progress.
//! - Periodically (at the latest by [`NfsState::next_due`]), the server
//!   calls [`NfsState::reap`]: expired leases, recall deadlines, courtesy
//!   clients past their time, the end of the grace period.
//!
//! Left to the handler: COMPOUND structure (SEQUENCE first,
//! `NFS4ERR_NOT_ONLY_OP`, `NFS4ERR_OP_NOT_IN_SESSION`), filehandles and
//! export admission, what a file key is, the byte ranges' conflicts and
//! LOCK4denied's details, when to offer a delegation
//! ([`NfsState::offer_delegation`] says whether it may), sending callbacks
//! and probing the backchannel ([`NfsState::set_callback_state`]), and
//! the encoding of every reply.
//!
//! # Invariants
//!
//! - **Bounded:** every map grows only through a claim on a
//!   [`ClaimPool`](keel_exports::claims::ClaimPool) charged to the client's
//!   address (clients, reply-cache slots, open owners, opens, lock owners,
//!   lock states, lock ranges, delegations) or a per-client or per-session
//!   bound (sessions, connections). Past a bound the state first expires
//!   courtesy clients holding what is short, then answers with the
//!   protocol's status ([`Limited`]). Nothing the state keeps is a slice
//!   of a received record: owners and cached replies are copied.
//! - **Share reservations never conflict** among the open states they
//!   hold: an OPEN or upgrade that would is `NFS4ERR_SHARE_DENIED` (after
//!   expiring courtesy holders), and a downgrade only removes bits.
//! - **A stateid is valid until it is freed:** every stateid handed out
//!   tests OK (at its current seqid) until CLOSE, FREE_STATEID, DELEGRETURN
//!   or its client's end; a stateid of another client tests BAD, one of an
//!   earlier instance STALE.
//! - **Counts match:** what each client holds is what its pools count for
//!   its address; a client's end releases all of it.
//! - **Durable before granted:** a client is in [`ClientRecords`] before
//!   it gets its first state that is not a reclaim.
//! - A replayed request (same slot, same seqid) gets the original reply or
//!   `NFS4ERR_RETRY_UNCACHED_REP`, never a second execution.

#![forbid(unsafe_code)]

mod check;
mod client;
mod config;
mod deleg;
mod grace;
mod ids;
mod info;
mod lock;
mod open;
mod session;
mod siphash;
mod stateid;

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use keel_exports::claims::{ClaimPool, Refusal};
pub use keel_nfs4_proto::{Nfsstat4, Stateid4};

pub use client::{Caller, ConnId, ExchangeIdOk, Principal};
pub use config::*;
pub use deleg::{Accessor, ConflictAccess, DelegationKind, DelegationOffer, Recall, ReclaimedDelegation};
pub use grace::{
    ClientRecord, ClientRecords, Grace, GraceEnd, GraceEndReason, GraceRefusal, GraceStatus, MemoryRecords,
    PreviousClient, Reclaimer, SharedGrace,
};
pub use ids::{BootEpoch, ClientId, SessionId, SpecialStateid};
pub use info::{ClientInfo, LeaseState, SessionInfo, StateStats};
pub use lock::{ByteRange, LockKind, LockPlan, LockRequest, Locker, UnlockPlan};
pub use open::{OpenClaim, OpenOk, ShareAccess};
pub use session::{CallbackChannel, CallbackState, CompoundShape, Replay, SequenceStart, SlotGrant, SlotReply};
pub use stateid::{CurrentStateid, IoAccess, IoAuth, StateType};

use client::Client;
use session::Session;
use stateid::State;

/// What a client can make the server hold, each counted in a
/// [`ClaimPool`] by client address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    Clients,
    /// Reply-cache slots (of [`ChannelLimits::cached_response_bytes_max`]).
    ReplyCacheSlots,
    OpenOwners,
    Opens,
    LockOwners,
    LockStates,
    LockRanges,
    Delegations,
}

impl Resource {
    pub const ALL: [Resource; 8] = [
        Resource::Clients,
        Resource::ReplyCacheSlots,
        Resource::OpenOwners,
        Resource::Opens,
        Resource::LockOwners,
        Resource::LockStates,
        Resource::LockRanges,
        Resource::Delegations,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// The resource's name in statistics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Clients => "clients",
            Resource::ReplyCacheSlots => "reply_cache_slots",
            Resource::OpenOwners => "open_owners",
            Resource::Opens => "opens",
            Resource::LockOwners => "lock_owners",
            Resource::LockStates => "lock_states",
            Resource::LockRanges => "lock_ranges",
            Resource::Delegations => "delegations",
        }
    }
}

/// A claim refused: what was short and why. The operation answers with
/// [`Limited::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub resource: Resource,
    pub refusal: Refusal,
}

impl Limited {
    /// The protocol's answer past a limit. EXCHANGE_ID and CREATE_SESSION
    /// may not return NFS4ERR_RESOURCE (RFC 8881 section 15.2): they get
    /// NFS4ERR_DELAY, as knfsd answers when it has no room (courtesy
    /// clients expire, others leave). Opens and locks get NFS4ERR_RESOURCE:
    /// an error the application sees, where NFS4ERR_DELAY would have the
    /// client retry forever against an address's exhausted share.
    pub fn status(self) -> Nfsstat4 {
        match self.resource {
            Resource::Clients | Resource::ReplyCacheSlots => Nfsstat4::Delay,
            _ => Nfsstat4::Resource,
        }
    }
}

/// Something the state let go of; the handler acts on each (see the crate
/// documentation).
#[derive(Debug)]
pub enum Released<F, L> {
    /// A client's record ended: everything it held comes in the entries
    /// that follow this one.
    Client { clientid: ClientId, owner: Box<[u8]>, why: ExpiryReason },
    /// A lock state ended (FREE_STATEID, CLOSE, its client's end): drop
    /// its description (closing it releases every lock it still holds).
    LockHolder { clientid: ClientId, stateid: Stateid4, file: F, holder: L },
    /// An open state ended.
    Open { clientid: ClientId, stateid: Stateid4, file: F },
    /// A delegation ended (returned, its client's end) or was revoked (its
    /// stateid then lives on, answering NFS4ERR_DELEG_REVOKED, until the
    /// client frees it).
    Delegation { clientid: ClientId, stateid: Stateid4, file: F, kind: DelegationKind },
}

/// Why a client record ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryReason {
    /// DESTROY_CLIENTID.
    Destroyed,
    /// Its lease expired and it held nothing worth keeping.
    LeaseExpired,
    /// A courtesy client whose state conflicted with another's request.
    Conflict,
    /// A courtesy client expired to make room for another client's state.
    Room,
    /// A courtesy client past [`StateConfig::courtesy_max`].
    CourtesyOver,
    /// The client restarted (a new verifier, confirmed by CREATE_SESSION)
    /// or another record of its owner replaced this one.
    Replaced,
    /// An unconfirmed record never confirmed within a lease.
    Unconfirmed,
}

#[derive(Debug, Default)]
struct Pools([Option<ClaimPool>; 8]);

impl Pools {
    fn new(config: &StateConfig) -> Self {
        let l = &config.limits;
        let slot = config.channel.cached_response_bytes_max.max(1) as usize;
        let bound = |b: Bound| Some(ClaimPool::new(b.total, b.per_address));
        Pools([
            bound(l.clients),
            Some(ClaimPool::new(l.reply_cache_bytes.total / slot, (l.reply_cache_bytes.per_address / slot).max(1))),
            bound(l.open_owners),
            bound(l.opens),
            bound(l.lock_owners),
            bound(l.lock_states),
            bound(l.lock_ranges),
            bound(l.delegations),
        ])
    }

    fn get(&self, r: Resource) -> &ClaimPool {
        self.0[r.index()].as_ref().expect("every pool is made at start")
    }

    fn get_mut(&mut self, r: Resource) -> &mut ClaimPool {
        self.0[r.index()].as_mut().expect("every pool is made at start")
    }
}

/// One file's share reservations and the state on it.
#[derive(Debug, Default)]
struct FileState {
    /// Open states with read and with write access.
    access: [u32; 2],
    /// Open states denying read and denying write.
    deny: [u32; 2],
    opens: HashSet<u64>,
    locks: HashSet<u64>,
    delegations: HashSet<u64>,
}

impl FileState {
    fn is_empty(&self) -> bool {
        self.opens.is_empty() && self.locks.is_empty() && self.delegations.is_empty()
    }

    fn count(&mut self, access: u32, deny: u32, add: bool) {
        for (bit, i) in [(1u32, 0usize), (2, 1)] {
            if access & bit != 0 {
                self.access[i] = if add { self.access[i] + 1 } else { self.access[i] - 1 };
            }
            if deny & bit != 0 {
                self.deny[i] = if add { self.deny[i] + 1 } else { self.deny[i] - 1 };
            }
        }
    }

    /// The access and deny bits held by some open state, leaving out one
    /// contribution (`own`, the open state being changed).
    fn others(&self, own: (u32, u32)) -> (u32, u32) {
        let mut access = 0;
        let mut deny = 0;
        for (bit, i) in [(1u32, 0usize), (2, 1)] {
            if self.access[i] > u32::from(own.0 & bit != 0) {
                access |= bit;
            }
            if self.deny[i] > u32::from(own.1 & bit != 0) {
                deny |= bit;
            }
        }
        (access, deny)
    }
}

/// Cumulative counters, for metrics.
#[derive(Debug, Default, Clone)]
struct Counters {
    clients_created: u64,
    clients_expired: u64,
    courtesy_expired: u64,
    sessions_created: u64,
    sequences: u64,
    replays: u64,
    misordered: u64,
    clid_inuse: u64,
    share_denied: u64,
    recalls: u64,
    revoked: u64,
    refused: [u64; 8],
    records_failed: u64,
    slots_past_the_pool: u64,
}

/// The NFSv4.1 server state. `F` is the handler's key of a file, `L` its
/// lock-holding description (one per lock owner and file).
pub struct NfsState<F, L> {
    config: StateConfig,
    epoch: BootEpoch,
    session_key: [u8; 16],
    next_client: u32,
    next_session: u64,
    next_state: u64,
    clients: HashMap<ClientId, Client<F>>,
    confirmed_by_owner: HashMap<Box<[u8]>, ClientId>,
    unconfirmed_by_owner: HashMap<Box<[u8]>, ClientId>,
    sessions: HashMap<SessionId, Session>,
    /// The sessions each connection is bound to.
    connections: HashMap<ConnId, Vec<SessionId>>,
    states: HashMap<u64, State<F, L>>,
    files: HashMap<F, FileState>,
    /// Files on which delegations are not offered for a while, after a
    /// conflict (knfsd's bloom filter of recently recalled files).
    recent_conflicts: HashMap<F, Instant>,
    pools: Pools,
    reply_cache_bytes: usize,
    grace: SharedGrace,
    records: Box<dyn ClientRecords>,
    released: Vec<Released<F, L>>,
    recalls: Vec<Recall<F>>,
    /// The end of the grace period, for the handler to log.
    grace_report: Option<(GraceEndReason, Duration)>,
    counters: Counters,
}

/// Most files remembered as recently conflicting: each costs a key and an
/// instant; past this the oldest is forgotten (a delegation may then be
/// offered sooner, which a recall corrects).
pub const RECENT_CONFLICTS_MAX: usize = 4096;

/// Why the state could not start.
#[derive(Debug)]
pub enum StartError {
    Config(ConfigError),
    /// The client records could not be read: the server cannot know who
    /// may reclaim.
    Records(std::io::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Config(e) => write!(f, "NFSv4.1 state configuration: {e}"),
            StartError::Records(e) => write!(f, "cannot read the NFSv4.1 client records: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

impl<F: Clone + Eq + Hash, L> NfsState<F, L> {
    /// The state of a new server instance: `epoch` is larger than any
    /// earlier instance's, `session_key` is secret random bytes, `records`
    /// the clients of earlier instances (a grace period of its own waits
    /// for them: a server that also serves NLM uses
    /// [`NfsState::with_grace`]).
    pub fn new(
        config: StateConfig,
        epoch: BootEpoch,
        session_key: [u8; 16],
        mut records: Box<dyn ClientRecords>,
        now: Instant,
    ) -> Result<Self, StartError> {
        config.validate().map_err(StartError::Config)?;
        let previous = records.load().map_err(StartError::Records)?;
        let grace = Grace::start(previous.into_iter().map(|r| r.previous_client(config.lease)), now, config.grace_max);
        Self::with_grace(config, epoch, session_key, records, SharedGrace::new(grace))
    }

    /// As [`NfsState::new`], in the grace period the server shares with
    /// NLM (see [`SharedGrace`]), which it started from what `records`
    /// loaded: they are not loaded again.
    pub fn with_grace(
        config: StateConfig,
        epoch: BootEpoch,
        session_key: [u8; 16],
        records: Box<dyn ClientRecords>,
        grace: SharedGrace,
    ) -> Result<Self, StartError> {
        config.validate().map_err(StartError::Config)?;
        Ok(NfsState {
            pools: Pools::new(&config),
            config,
            epoch,
            session_key,
            next_client: 0,
            next_session: 0,
            next_state: 0,
            clients: HashMap::new(),
            confirmed_by_owner: HashMap::new(),
            unconfirmed_by_owner: HashMap::new(),
            sessions: HashMap::new(),
            connections: HashMap::new(),
            states: HashMap::new(),
            files: HashMap::new(),
            recent_conflicts: HashMap::new(),
            reply_cache_bytes: 0,
            grace,
            records,
            released: Vec::new(),
            recalls: Vec::new(),
            grace_report: None,
            counters: Counters::default(),
        })
    }

    pub fn config(&self) -> &StateConfig {
        &self.config
    }

    pub fn epoch(&self) -> BootEpoch {
        self.epoch
    }

    /// Everything the state let go of since the last call (see the crate
    /// documentation: the handler drains this after every call).
    pub fn take_released(&mut self) -> Vec<Released<F, L>> {
        std::mem::take(&mut self.released)
    }

    /// Delegations to recall now (send CB_RECALL for each).
    pub fn take_recalls(&mut self) -> Vec<Recall<F>> {
        std::mem::take(&mut self.recalls)
    }

    /// Why the grace period ended and how long it lasted, once, if this
    /// state noticed its end first (see [`Grace::take_report`]): the
    /// handler logs it.
    pub fn take_grace_report(&mut self) -> Option<(GraceEndReason, Duration)> {
        self.grace_report.take()
    }

    /// Whether the grace period is on; ends it if due.
    pub fn in_grace(&mut self, now: Instant) -> bool {
        self.poll_grace(now)
    }

    /// The grace period this state consults (shared with NLM's).
    pub fn grace(&self) -> &SharedGrace {
        &self.grace
    }

    pub fn grace_status(&self, now: Instant) -> GraceStatus {
        self.grace.lock().status(now)
    }

    /// Bytes of replies held by the replay caches of all sessions, for the
    /// server's memory budget.
    pub fn reply_cache_bytes(&self) -> usize {
        self.reply_cache_bytes
    }

    /// What `addr` holds of `resource`, and what everyone holds.
    pub fn held(&self, resource: Resource, addr: IpAddr) -> (usize, usize) {
        let pool = self.pools.get(resource);
        (pool.held_by(addr), pool.used())
    }

    /// Polls the grace period; at its end keeps the records of the clients
    /// that completed their reclaim (rewritten with this epoch) and removes
    /// the others'.
    fn poll_grace(&mut self, now: Instant) -> bool {
        let (active, end) = {
            let mut grace = self.grace.lock();
            let polled = (grace.poll(now), grace.take_end());
            if let Some(report) = grace.take_report() {
                self.grace_report = Some(report);
            }
            polled
        };
        if let Some(end) = end {
            for who in end.completed {
                let Reclaimer::Nfs4(owner) = who else { continue };
                let client = self.confirmed_by_owner.get(&owner).copied();
                let Some(c) = client.and_then(|id| self.clients.get_mut(&id)) else {
                    self.remove_record(&owner);
                    continue;
                };
                let record = ClientRecord { owner, principal: c.principal.clone(), epoch: self.epoch.get() };
                if self.records.put(&record).is_ok() {
                    // Its record now goes when it ends.
                    c.recorded = true;
                } else {
                    self.counters.records_failed += 1;
                }
            }
            for who in end.not_completed {
                // Nobody got state that is not a reclaim during the grace
                // period, so nobody of these was recorded in it.
                if let Reclaimer::Nfs4(owner) = who {
                    self.remove_record(&owner);
                }
            }
        }
        active
    }

    fn remove_record(&mut self, owner: &[u8]) {
        if self.records.remove(owner).is_err() {
            self.counters.records_failed += 1;
        }
    }

    /// Claims `n` of `resource` for `client`'s address, expiring courtesy
    /// clients that hold it if that is what it takes.
    fn claim(&mut self, client: ClientId, resource: Resource, n: usize, now: Instant) -> Result<(), Limited> {
        let addr = self.clients.get(&client).expect("claim for a known client").addr;
        self.claim_at(addr, resource, n, Some(client), now)
    }

    /// Claims as much of `want` of `resource` as the pool gives (at least
    /// one), halving the ask, expiring courtesy clients if none is left.
    fn claim_up_to(
        &mut self,
        client: ClientId,
        resource: Resource,
        want: usize,
        now: Instant,
    ) -> Result<usize, Limited> {
        let addr = self.clients.get(&client).expect("claim for a known client").addr;
        loop {
            let mut n = want.max(1);
            let mut refusal = None;
            while n >= 1 {
                match self.pools.get(resource).check(addr, n) {
                    Ok(()) => {
                        self.pools.get_mut(resource).add(addr, n);
                        if let Some(c) = self.clients.get_mut(&client) {
                            c.held[resource.index()] += n;
                        }
                        return Ok(n);
                    }
                    Err(r) => refusal = Some(r),
                }
                n /= 2;
            }
            let refusal = refusal.expect("at least one attempt");
            if !self.make_room(resource, refusal, addr, client, now) {
                self.counters.refused[resource.index()] += 1;
                return Err(Limited { resource, refusal });
            }
        }
    }

    fn release(&mut self, client: ClientId, resource: Resource, n: usize) {
        if n == 0 {
            return;
        }
        let Some(c) = self.clients.get_mut(&client) else { return };
        let n = n.min(c.held[resource.index()]);
        c.held[resource.index()] -= n;
        let addr = c.addr;
        self.pools.get_mut(resource).release(addr, n);
    }

    /// Expires the courtesy client that renewed least recently among those
    /// holding some of `resource` (of `addr` if it is `addr`'s share that
    /// is short). Returns whether one was.
    fn make_room(
        &mut self,
        resource: Resource,
        refusal: Refusal,
        addr: IpAddr,
        asking: ClientId,
        now: Instant,
    ) -> bool {
        let lease = self.config.lease;
        let victim = self
            .clients
            .values()
            .filter(|c| c.id != asking && c.confirmed && c.lease_expired(now, lease))
            .filter(|c| c.held[resource.index()] > 0)
            .filter(|c| refusal == Refusal::PoolFull || c.addr == addr)
            .min_by_key(|c| (c.renewed, c.id))
            .map(|c| c.id);
        match victim {
            Some(id) => {
                self.expire_client(id, ExpiryReason::Room, now);
                true
            }
            None => false,
        }
    }

    fn new_state_key(&mut self) -> u64 {
        self.next_state += 1;
        self.next_state
    }
}

#[cfg(test)]
mod tests;

//! Client records (RFC 8881 sections 2.4, 18.35, 18.50, 18.51), leases
//! and courtesy (section 8.3), and the end of a client.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use keel_nfs4_proto::{
    CreateSession4ResOk, EXCHGID4_FLAG_BIND_PRINC_STATEID, EXCHGID4_FLAG_CONFIRMED_R, EXCHGID4_FLAG_MASK_PNFS,
    EXCHGID4_FLAG_SUPP_FENCE_OPS, EXCHGID4_FLAG_SUPP_MOVED_MIGR, EXCHGID4_FLAG_SUPP_MOVED_REFER,
    EXCHGID4_FLAG_UPD_CONFIRMED_REC_A, EXCHGID4_FLAG_USE_NON_PNFS, ExchangeId4Args, Nfsstat4, StateProtect4A,
    Verifier4,
};

use crate::session::CallbackState;
use crate::{ClientId, ClientRecord, ExpiryReason, NfsState, Reclaimer, Released, Resource, SessionId};

/// Who a caller is, as the RPC layer authenticated it. Two requests with
/// equal principals may act on each other's client records; the handler
/// builds it from the credential (for AUTH_SYS the uid and the machine
/// name; for RPCSEC_GSS the authenticated name).
///
/// Under AUTH_SYS nothing is authenticated: the principal only stops a
/// client that happens to present another's owner (two machines with the
/// same name, a copied configuration) from taking over its state; a client
/// that forges credentials is stopped only by export client lists.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Principal {
    /// AUTH_NONE: every such caller is the same principal.
    None,
    /// AUTH_SYS: the uid and the machine name of the credential.
    Sys { uid: u32, machine: Box<[u8]> },
    /// RPCSEC_GSS: the authenticated principal (`nfs/host@REALM`).
    Gss { name: Box<[u8]> },
}

impl Principal {
    pub fn is_gss(&self) -> bool {
        matches!(self, Principal::Gss { .. })
    }
}

/// A connection, as the transport names it (any value unique among its
/// open connections). The transport calls
/// [`NfsState::connection_closed`] when it closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// Where a call comes from.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// The peer's address (an IPv4-mapped IPv6 one as IPv4): what limits
    /// are counted by.
    pub addr: IpAddr,
    pub principal: &'a Principal,
    pub conn: ConnId,
}

/// EXCHANGE_ID's answer; the handler adds the server owner, scope and
/// implementation ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExchangeIdOk {
    pub clientid: ClientId,
    /// `eir_sequenceid`: what the client's next CREATE_SESSION carries.
    pub sequenceid: u32,
    /// `eir_flags`: `EXCHGID4_FLAG_CONFIRMED_R` for a confirmed record,
    /// the pNFS role (not a pNFS server: `USE_NON_PNFS`).
    pub flags: u32,
}

/// The flags a client may send (RFC 8881 section 18.35.3); any other is
/// NFS4ERR_INVAL (as knfsd's `EXCHGID4_FLAG_MASK_A`, with FENCE_OPS).
const EXCHGID4_FLAGS_FROM_CLIENT: u32 = EXCHGID4_FLAG_SUPP_MOVED_REFER
    | EXCHGID4_FLAG_SUPP_MOVED_MIGR
    | EXCHGID4_FLAG_SUPP_FENCE_OPS
    | EXCHGID4_FLAG_BIND_PRINC_STATEID
    | EXCHGID4_FLAG_MASK_PNFS
    | EXCHGID4_FLAG_UPD_CONFIRMED_REC_A;

/// Most bytes kept of a client's implementation name and domain (for the
/// admin interface).
const IMPL_ID_BYTES_MAX: usize = 128;

pub(crate) struct Client<F> {
    pub(crate) id: ClientId,
    pub(crate) owner: Box<[u8]>,
    pub(crate) verifier: Verifier4,
    pub(crate) principal: Principal,
    pub(crate) addr: IpAddr,
    pub(crate) confirmed: bool,
    pub(crate) renewed: Instant,
    /// Requests of this client under way on a slot: its lease does not
    /// expire meanwhile.
    pub(crate) in_flight: u32,
    /// CREATE_SESSION's sequence (section 18.36.4): the last one seen and
    /// its reply, replayed for a retransmission.
    pub(crate) cs_seqid: u32,
    pub(crate) cs_reply: Option<Result<CreateSession4ResOk, Nfsstat4>>,
    pub(crate) sessions: Vec<SessionId>,
    /// Open owners: for each, its open state key per file.
    pub(crate) open_owners: HashMap<Box<[u8]>, HashMap<F, u64>>,
    /// Lock owners: for each, its lock state key per file.
    pub(crate) lock_owners: HashMap<Box<[u8]>, HashMap<F, u64>>,
    /// Every stateid of the client (open, lock, delegation).
    pub(crate) states: HashSet<u64>,
    /// What the client holds of each pool.
    pub(crate) held: [usize; 8],
    pub(crate) impl_id: Option<(String, String)>,
    pub(crate) reclaim_complete: bool,
    /// In the [`ClientRecords`](crate::ClientRecords) of this instance.
    pub(crate) recorded: bool,
    pub(crate) callback: CallbackState,
    /// Delegations revoked and not yet freed by the client.
    pub(crate) revoked: usize,
    /// The highest minor version of its COMPOUNDs (for the admin
    /// interface, as knfsd's `minor version`).
    pub(crate) minor_version: u32,
}

impl<F> Client<F> {
    /// Whether the lease has run out (never while a request is under way).
    pub(crate) fn lease_expired(&self, now: Instant, lease: Duration) -> bool {
        self.in_flight == 0 && now >= self.renewed + lease
    }

    /// knfsd's `client_has_state`: what a client with another principal
    /// may not take over.
    pub(crate) fn has_state(&self) -> bool {
        !self.states.is_empty() || !self.sessions.is_empty()
    }
}

impl<F: Clone + Eq + Hash, L> NfsState<F, L> {
    /// EXCHANGE_ID (RFC 8881 section 18.35): the case analysis of section
    /// 18.35.5 on the client owner, verifier and principal.
    ///
    /// Unexpired state under another principal is NFS4ERR_CLID_INUSE; a
    /// courtesy client's state is expired instead (it conflicts with a
    /// live client). A client that restarted (new verifier) gets a new
    /// unconfirmed record; its old one and all its state end when the
    /// new record is confirmed by CREATE_SESSION.
    pub fn exchange_id(
        &mut self,
        caller: &Caller,
        args: &ExchangeId4Args,
        now: Instant,
    ) -> Result<ExchangeIdOk, Nfsstat4> {
        if args.eia_flags & !EXCHGID4_FLAGS_FROM_CLIENT != 0 {
            return Err(Nfsstat4::Inval);
        }
        match &args.eia_state_protect {
            StateProtect4A::Sp4None => {}
            // knfsd: MACH_CRED needs an integrity-protected (GSS) caller;
            // Keel does not enforce it (spo_must_enforce) for one either,
            // so every client ID is SP4_NONE (the Linux client then falls
            // back to SP4_NONE; CREATE_SESSION relies on it).
            StateProtect4A::Sp4MachCred(_) if caller.principal.is_gss() => return Err(Nfsstat4::Notsupp),
            StateProtect4A::Sp4MachCred(_) => return Err(Nfsstat4::Inval),
            // knfsd's answer: no SSV algorithms are supported.
            StateProtect4A::Sp4Ssv(_) => return Err(Nfsstat4::EncrAlgUnsupp),
        }
        let owner = args.eia_clientowner.co_ownerid.as_bytes();
        let verifier = args.eia_clientowner.co_verifier;
        let update = args.eia_flags & EXCHGID4_FLAG_UPD_CONFIRMED_REC_A != 0;
        let impl_id = args.eia_client_impl_id.as_ref().map(|i| {
            let text = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(IMPL_ID_BYTES_MAX)]).into_owned();
            (text(i.nii_domain.as_bytes()), text(i.nii_name.as_bytes()))
        });

        if let Some(&id) = self.confirmed_by_owner.get(owner) {
            let c = &self.clients[&id];
            let same_principal = c.principal == *caller.principal;
            let same_verifier = c.verifier == verifier;
            if update {
                if !same_principal {
                    return Err(Nfsstat4::Perm); // case 9
                }
                if !same_verifier {
                    return Err(Nfsstat4::NotSame); // case 8
                }
                // Case 6: an update of the confirmed record.
                return Ok(self.exchange_reply(id, impl_id, now));
            }
            if !same_principal {
                // Case 3: a collision.
                if c.has_state() && !c.lease_expired(now, self.config.lease) {
                    self.counters.clid_inuse += 1;
                    return Err(Nfsstat4::ClidInuse);
                }
                let why = if c.has_state() { ExpiryReason::Conflict } else { ExpiryReason::Replaced };
                self.expire_client(id, why, now);
            } else if same_verifier {
                // Case 2: a retry, or a trunking probe.
                return Ok(self.exchange_reply(id, impl_id, now));
            }
            // Case 5 (same principal, new verifier): the client restarted;
            // the confirmed record stays until the new one is confirmed.
        } else if update {
            return Err(Nfsstat4::Noent); // case 7
        }
        // Case 4: an unconfirmed record of this owner is replaced.
        if let Some(&old) = self.unconfirmed_by_owner.get(owner) {
            self.expire_client(old, ExpiryReason::Replaced, now);
        }
        // Case 1: a new record.
        self.claim_at(caller.addr, Resource::Clients, 1, None, now).map_err(|l| l.status())?;
        let id = self.new_client_id();
        let client = Client {
            id,
            owner: owner.into(),
            verifier,
            principal: caller.principal.clone(),
            addr: caller.addr,
            confirmed: false,
            renewed: now,
            in_flight: 0,
            cs_seqid: 0,
            cs_reply: None,
            sessions: Vec::new(),
            open_owners: HashMap::new(),
            lock_owners: HashMap::new(),
            states: HashSet::new(),
            held: {
                let mut held = [0; 8];
                held[Resource::Clients as usize] = 1;
                held
            },
            impl_id,
            reclaim_complete: false,
            recorded: false,
            callback: CallbackState::Unknown,
            revoked: 0,
            minor_version: 0,
        };
        self.clients.insert(id, client);
        self.unconfirmed_by_owner.insert(owner.into(), id);
        self.counters.clients_created += 1;
        self.grace.lock().came_back(&Reclaimer::Nfs4(owner.into()), Some(caller.principal));
        Ok(ExchangeIdOk { clientid: id, sequenceid: 1, flags: EXCHGID4_FLAG_USE_NON_PNFS })
    }

    fn exchange_reply(&mut self, id: ClientId, impl_id: Option<(String, String)>, now: Instant) -> ExchangeIdOk {
        let c = self.clients.get_mut(&id).expect("a confirmed client");
        c.renewed = now;
        if impl_id.is_some() {
            c.impl_id = impl_id;
        }
        ExchangeIdOk {
            clientid: id,
            sequenceid: c.cs_seqid.wrapping_add(1),
            flags: EXCHGID4_FLAG_CONFIRMED_R | EXCHGID4_FLAG_USE_NON_PNFS,
        }
    }

    fn new_client_id(&mut self) -> ClientId {
        loop {
            self.next_client = self.next_client.wrapping_add(1);
            let id = ClientId::new(self.epoch, self.next_client);
            if self.next_client != 0 && !self.clients.contains_key(&id) {
                return id;
            }
        }
    }

    /// Claims `n` of `resource` for `addr` (for `client`, if it has a
    /// record yet), expiring courtesy clients if that is what it takes.
    pub(crate) fn claim_at(
        &mut self,
        addr: IpAddr,
        resource: Resource,
        n: usize,
        client: Option<ClientId>,
        now: Instant,
    ) -> Result<(), crate::Limited> {
        loop {
            match self.pools.get(resource).check(addr, n) {
                Ok(()) => {
                    self.pools.get_mut(resource).add(addr, n);
                    if let Some(c) = client.and_then(|id| self.clients.get_mut(&id)) {
                        c.held[resource as usize] += n;
                    }
                    return Ok(());
                }
                Err(refusal) => {
                    let asking = client.unwrap_or(ClientId(0));
                    if !self.make_room(resource, refusal, addr, asking, now) {
                        self.counters.refused[resource as usize] += 1;
                        return Err(crate::Limited { resource, refusal });
                    }
                }
            }
        }
    }

    /// DESTROY_CLIENTID (RFC 8881 section 18.50): NFS4ERR_CLIENTID_BUSY
    /// while the client has sessions or state; NFS4ERR_WRONG_CRED from a
    /// principal other than the record's (client IDs can be guessed).
    pub fn destroy_clientid(
        &mut self,
        clientid: ClientId,
        principal: &Principal,
        now: Instant,
    ) -> Result<(), Nfsstat4> {
        let c = self.clients.get(&clientid).ok_or(Nfsstat4::StaleClientid)?;
        if c.principal != *principal {
            return Err(Nfsstat4::WrongCred);
        }
        if c.has_state() {
            return Err(Nfsstat4::ClientidBusy);
        }
        self.expire_client(clientid, ExpiryReason::Destroyed, now);
        Ok(())
    }

    /// RECLAIM_COMPLETE (RFC 8881 section 18.51) for the whole client
    /// (`one_fs` false); `one_fs` is accepted and means nothing (knfsd
    /// does the same: it is optional).
    pub fn reclaim_complete(&mut self, clientid: ClientId, one_fs: bool, now: Instant) -> Result<(), Nfsstat4> {
        let c = self.clients.get_mut(&clientid).ok_or(Nfsstat4::StaleClientid)?;
        if one_fs {
            return Ok(());
        }
        if c.reclaim_complete {
            return Err(Nfsstat4::CompleteAlready);
        }
        c.reclaim_complete = true;
        let who = Reclaimer::Nfs4(c.owner.clone());
        let principal = c.principal.clone();
        self.grace.lock().complete(&who, Some(&principal), now);
        self.poll_grace(now);
        Ok(())
    }

    /// The client for an operation of its session.
    pub(crate) fn client(&self, id: ClientId) -> Result<&Client<F>, Nfsstat4> {
        self.clients.get(&id).ok_or(Nfsstat4::StaleClientid)
    }

    /// Writes the client's record before its first state that is not a
    /// reclaim: if the server restarts, it may then reclaim.
    pub(crate) fn record_client(&mut self, id: ClientId) -> Result<(), Nfsstat4> {
        let c = self.clients.get(&id).ok_or(Nfsstat4::StaleClientid)?;
        if c.recorded {
            return Ok(());
        }
        let record = ClientRecord { owner: c.owner.clone(), principal: c.principal.clone(), epoch: self.epoch.get() };
        if self.records.put(&record).is_err() {
            // Granting state that could not be reclaimed after a restart
            // would lose it silently; the client retries (and an HA pair
            // whose storage fails moves the service meanwhile).
            self.counters.records_failed += 1;
            return Err(Nfsstat4::Delay);
        }
        self.clients.get_mut(&id).expect("looked up above").recorded = true;
        Ok(())
    }

    /// Ends a client: its sessions, its state (handed to the handler in
    /// [`Released`]), its record here and on stable storage.
    pub(crate) fn expire_client(&mut self, id: ClientId, why: ExpiryReason, now: Instant) {
        let Some(c) = self.clients.get(&id) else { return };
        let courtesy = c.confirmed && c.lease_expired(now, self.config.lease) && !c.states.is_empty();
        self.released.push(Released::Client { clientid: id, owner: c.owner.clone(), why });
        for sid in c.sessions.clone() {
            self.remove_session(sid);
        }
        let mut keys: Vec<u64> = self.clients[&id].states.iter().copied().collect();
        // Lock states before the opens they came from, so each goes once.
        keys.sort_by_key(|k| !matches!(self.states.get(k).map(|s| &s.kind), Some(crate::stateid::StateKind::Lock(_))));
        for key in keys {
            self.drop_state(key);
        }
        let c = self.clients.remove(&id).expect("present above");
        for r in Resource::ALL {
            self.pools.get_mut(r).release(c.addr, c.held[r as usize]);
        }
        if self.confirmed_by_owner.get(&c.owner) == Some(&id) {
            self.confirmed_by_owner.remove(&c.owner);
        }
        if self.unconfirmed_by_owner.get(&c.owner) == Some(&id) {
            self.unconfirmed_by_owner.remove(&c.owner);
        }
        let owner_left =
            self.confirmed_by_owner.contains_key(&c.owner) || self.unconfirmed_by_owner.contains_key(&c.owner);
        if c.recorded && !owner_left {
            self.remove_record(&c.owner);
        }
        // A record replaced by its owner's next one is no sign that the
        // owner is gone (ending a grace period it is owed).
        if !owner_left && why != ExpiryReason::Replaced {
            self.grace.lock().gone(&Reclaimer::Nfs4(c.owner.clone()), now);
            self.poll_grace(now);
        }
        self.counters.clients_expired += 1;
        if courtesy {
            self.counters.courtesy_expired += 1;
        }
    }

    /// Periodic work: ends unconfirmed records and clients whose lease
    /// expired with nothing worth keeping, courtesy clients past
    /// [`courtesy_max`](crate::StateConfig::courtesy_max), revokes
    /// delegations not returned in time, and ends the grace period when
    /// due. Returns how many clients ended (their state is in
    /// [`take_released`](NfsState::take_released)).
    pub fn reap(&mut self, now: Instant) -> usize {
        self.poll_grace(now);
        let lease = self.config.lease;
        let ending: Vec<(ClientId, ExpiryReason)> = self
            .clients
            .values()
            .filter(|c| c.lease_expired(now, lease))
            .filter_map(|c| {
                if !c.confirmed {
                    Some((c.id, ExpiryReason::Unconfirmed))
                } else if c.states.is_empty() {
                    Some((c.id, ExpiryReason::LeaseExpired))
                } else if now >= c.renewed + lease + self.courtesy_max_of(c) {
                    Some((c.id, ExpiryReason::CourtesyOver))
                } else {
                    None
                }
            })
            .collect();
        for &(id, why) in &ending {
            self.expire_client(id, why, now);
        }
        self.revoke_overdue_delegations(now);
        self.recent_conflicts.retain(|_, at| now < *at + lease);
        ending.len()
    }

    /// When [`reap`](NfsState::reap) next has something to do (a lease,
    /// a recall deadline, the grace period), if anything.
    pub fn next_due(&self) -> Option<Instant> {
        let lease = self.config.lease;
        let leases = self.clients.values().filter(|c| c.in_flight == 0).map(|c| {
            if c.confirmed && !c.states.is_empty() {
                c.renewed + lease + self.courtesy_max_of(c)
            } else {
                c.renewed + lease
            }
        });
        let recalls = self.states.values().filter_map(|s| s.recall_deadline(lease));
        leases.chain(recalls).chain(self.grace.lock().next_due()).min()
    }

    /// `clientid` sent a COMPOUND of minor version `minor` (its
    /// EXCHANGE_ID, CREATE_SESSION or a SEQUENCE): the admin interface
    /// shows the highest.
    pub fn minor_version_used(&mut self, clientid: ClientId, minor: u32) {
        if let Some(c) = self.clients.get_mut(&clientid) {
            c.minor_version = c.minor_version.max(minor);
        }
    }

    /// Expires `clientid` if it is a courtesy client (its lease expired),
    /// because its state conflicts with a request: the caller then retries
    /// the request. Returns whether it did.
    pub fn expire_if_courtesy(&mut self, clientid: ClientId, now: Instant) -> bool {
        let lease = self.config.lease;
        match self.clients.get(&clientid) {
            Some(c) if c.confirmed && c.lease_expired(now, lease) => {
                self.expire_client(clientid, ExpiryReason::Conflict, now);
                true
            }
            _ => false,
        }
    }

    /// How long `c` may stay a courtesy client: less while it holds
    /// byte-range locks, which a local process may be waiting for unseen
    /// ([`COURTESY_LOCKS_MAX_DEFAULT`](crate::config::COURTESY_LOCKS_MAX_DEFAULT)).
    pub(crate) fn courtesy_max_of(&self, c: &Client<F>) -> Duration {
        if c.held[Resource::LockRanges as usize] > 0 {
            self.config.courtesy_max.min(self.config.courtesy_locks_max)
        } else {
            self.config.courtesy_max
        }
    }

    pub(crate) fn is_courtesy(&self, clientid: ClientId, now: Instant) -> bool {
        self.clients.get(&clientid).is_some_and(|c| c.confirmed && c.lease_expired(now, self.config.lease))
    }
}

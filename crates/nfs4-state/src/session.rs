//! Sessions (RFC 8881 sections 2.10, 18.33, 18.34, 18.36, 18.37, 18.46):
//! CREATE_SESSION and its replay cache, channel attributes, connections,
//! the slot table and its reply cache, the backchannel.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Instant;

use bytes::Bytes;
use keel_nfs4_proto::{
    AUTH_NONE, AUTH_SYS, BindConnToSession4Args, BindConnToSession4ResOk, CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
    CREATE_SESSION4_FLAG_CONN_RDMA, CREATE_SESSION4_FLAG_PERSIST, CallbackSecParms4, ChannelAttrs4,
    ChannelDirFromClient4, ChannelDirFromServer4, CreateSession4Args, CreateSession4ResOk, Nfsstat4,
    SEQ4_STATUS_BACKCHANNEL_FAULT, SEQ4_STATUS_CB_PATH_DOWN, SEQ4_STATUS_CB_PATH_DOWN_SESSION,
    SEQ4_STATUS_RECALLABLE_STATE_REVOKED, Sequence4Args, Sequence4ResOk,
};

use crate::client::{Caller, Client, ConnId};
use crate::config::{
    BACK_OPERATIONS_MIN, BACK_REQUEST_BYTES_MIN, BACK_RESPONSE_BYTES_MIN, BACK_SLOTS_MAX, ChannelLimits,
    FORE_REQUEST_BYTES_MIN, FORE_RESPONSE_BYTES_MIN,
};
use crate::{ClientId, ExpiryReason, NfsState, Principal, Resource, SessionId};

/// Whether the server can reach the client on its backchannel, as the
/// handler last found out (by CB_NULL or a callback's fate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CallbackState {
    /// Not probed yet.
    #[default]
    Unknown,
    Up,
    /// A callback got no answer (`SEQ4_STATUS_CB_PATH_DOWN`).
    Down,
    /// A callback got a backchannel error (`SEQ4_STATUS_BACKCHANNEL_FAULT`).
    Fault,
}

/// Which channels a connection carries for a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Fore,
    Back,
    Both,
}

impl Dir {
    fn back(self) -> bool {
        matches!(self, Dir::Back | Dir::Both)
    }

    fn to_wire(self) -> ChannelDirFromServer4 {
        match self {
            Dir::Fore => ChannelDirFromServer4::Cdfs4Fore,
            Dir::Back => ChannelDirFromServer4::Cdfs4Back,
            Dir::Both => ChannelDirFromServer4::Cdfs4Both,
        }
    }
}

/// A reply a slot keeps for replays.
#[derive(Debug)]
struct SlotCache {
    ops: u32,
    status: Nfsstat4,
    principal: Principal,
    /// The reply itself, if the request asked for it to be cached and it
    /// fitted.
    reply: Option<Bytes>,
}

#[derive(Debug, Default)]
struct Slot {
    seqid: u32,
    /// The request under way (its principal and `sa_cachethis`).
    in_use: Option<(Principal, bool)>,
    cache: Option<SlotCache>,
}

#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) id: SessionId,
    pub(crate) client: ClientId,
    fore: ChannelAttrs4,
    back: ChannelAttrs4,
    slots: Vec<Slot>,
    conns: HashMap<ConnId, Dir>,
    cb_program: u32,
    cb_sec: Vec<CallbackSecParms4>,
    cb_seqid: u32,
    cb_busy: bool,
    cached_bytes: usize,
}

/// What [`NfsState::check_invariants`] needs of a session.
pub(crate) struct SessionAudit {
    pub(crate) slots: usize,
    pub(crate) in_use: usize,
    pub(crate) cached_bytes: usize,
    /// The lengths of the replies its slots hold.
    pub(crate) cached_recount: usize,
    pub(crate) conns: Vec<ConnId>,
}

impl Session {
    pub(crate) fn info(&self) -> crate::info::SessionInfo {
        crate::info::SessionInfo {
            id: self.id,
            slots: self.slots.len(),
            connections: self.conns.len(),
            back_connections: self.conns.values().filter(|d| d.back()).count(),
        }
    }

    pub(crate) fn audit(&self) -> SessionAudit {
        SessionAudit {
            slots: self.slots.len(),
            in_use: self.slots_in_use(),
            cached_bytes: self.cached_bytes,
            cached_recount: self.slots.iter().filter_map(|s| s.cache.as_ref()?.reply.as_ref()).map(Bytes::len).sum(),
            conns: self.conns.keys().copied().collect(),
        }
    }

    fn has_back(&self) -> bool {
        self.conns.values().any(|d| d.back())
    }

    fn slots_in_use(&self) -> usize {
        self.slots.iter().filter(|s| s.in_use.is_some()).count()
    }
}

/// What the COMPOUND carrying a SEQUENCE looks like, for the session's
/// limits (RFC 8881 section 18.46.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompoundShape {
    /// Operations in the COMPOUND, SEQUENCE included.
    pub ops: u32,
    /// Bytes of the request (the RPC record).
    pub request_bytes: usize,
}

/// A request started on a slot. The handler runs the rest of the COMPOUND
/// and then calls [`NfsState::sequence_done`] with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotGrant {
    pub clientid: ClientId,
    pub sessionid: SessionId,
    pub slotid: u32,
    pub sequenceid: u32,
    /// Whether the client asked for the reply to be cached.
    pub cachethis: bool,
    /// The largest reply the session allows for this request: the cached
    /// size if `cachethis` (past it: NFS4ERR_REP_TOO_BIG_TO_CACHE), else
    /// the reply size (NFS4ERR_REP_TOO_BIG).
    pub reply_bytes_max: u32,
    /// SEQUENCE's result.
    pub resok: Sequence4ResOk,
}

/// A retransmission of the request last run on its slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// The cached reply, to send as it is.
    Cached(Bytes),
    /// The request was a SEQUENCE alone: its result.
    SequenceOnly(Sequence4ResOk),
    /// Its reply was not cached: SEQUENCE's result, then the second
    /// operation fails with NFS4ERR_RETRY_UNCACHED_REP.
    Uncached(Sequence4ResOk),
}

/// SEQUENCE's outcome when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SequenceStart {
    New(SlotGrant),
    Replay(Replay),
}

/// How a request started on a slot ended, for the slot's cache.
#[derive(Debug, Clone, Copy)]
pub struct SlotReply<'a> {
    /// The COMPOUND's status.
    pub status: Nfsstat4,
    /// Operations in the reply, SEQUENCE included.
    pub ops: u32,
    /// The reply the handler would send again for a retransmission (the
    /// whole COMPOUND4res), when the request asked for it to be cached;
    /// copied.
    pub reply: &'a [u8],
}

/// Where to send a callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackChannel {
    pub sessionid: SessionId,
    /// A connection bound to the session's backchannel.
    pub conn: ConnId,
    pub program: u32,
    /// The client's security parameters; the handler uses the first it
    /// supports (AUTH_NONE or AUTH_SYS: [`NfsState::create_session`]
    /// refuses a list without one).
    pub sec: Vec<CallbackSecParms4>,
    /// The backchannel's attributes (the client's limits on callbacks).
    pub attrs: ChannelAttrs4,
}

impl<F: Clone + Eq + Hash, L> NfsState<F, L> {
    /// The reply-cache slots of a new session of `id`, which asks `want`:
    /// no more than its address's share leaves, and no more than an eighth
    /// of what the pool has free (as knfsd), so that as the pool fills the
    /// slots go round more clients rather than to the first ones alone. A
    /// client's first session gets one slot however full the pool is,
    /// beyond it if need be (knfsd: "better than failure"): no client is
    /// kept from the server by others' slots, and what that adds is one
    /// slot per client at most. Another session past the pool waits
    /// (NFS4ERR_DELAY).
    fn session_slots(&mut self, id: ClientId, want: usize, now: Instant) -> Result<usize, Nfsstat4> {
        let spread = (self.pools.get(Resource::ReplyCacheSlots).free() / SLOT_SPREAD_DIVISOR).max(1);
        match self.claim_up_to(id, Resource::ReplyCacheSlots, want.min(spread), now) {
            Ok(n) => Ok(n),
            Err(_) if self.clients.get(&id).is_some_and(|c| c.sessions.is_empty()) => {
                let c = self.clients.get_mut(&id).expect("looked up above");
                c.held[Resource::ReplyCacheSlots.index()] += 1;
                let addr = c.addr;
                self.pools.get_mut(Resource::ReplyCacheSlots).add(addr, 1);
                self.counters.slots_past_the_pool += 1;
                Ok(1)
            }
            Err(l) => Err(l.status()),
        }
    }
}

/// A new session gets at most this fraction of the reply-cache slots free.
const SLOT_SPREAD_DIVISOR: usize = 8;

/// The forechannel a session gets (RFC 8881 section 18.36.3): the client's
/// ask, no larger than the server's limits; NFS4ERR_TOOSMALL below what a
/// SEQUENCE needs.
fn negotiate_fore(ask: &ChannelAttrs4, limits: &ChannelLimits) -> Result<ChannelAttrs4, Nfsstat4> {
    if ask.ca_maxrequestsize < FORE_REQUEST_BYTES_MIN
        || ask.ca_maxresponsesize < FORE_RESPONSE_BYTES_MIN
        || ask.ca_maxoperations == 0
        || ask.ca_maxrequests == 0
    {
        return Err(Nfsstat4::Toosmall);
    }
    let response = ask.ca_maxresponsesize.min(limits.response_bytes_max);
    Ok(ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: ask.ca_maxrequestsize.min(limits.request_bytes_max),
        ca_maxresponsesize: response,
        ca_maxresponsesize_cached: ask.ca_maxresponsesize_cached.min(limits.cached_response_bytes_max).min(response),
        ca_maxoperations: ask.ca_maxoperations.min(limits.operations_max),
        ca_maxrequests: ask.ca_maxrequests.min(limits.slots_per_session_max),
        ca_rdma_ird: None,
    })
}

/// The backchannel: the client's limits, as long as a CB_RECALL fits.
fn negotiate_back(ask: &ChannelAttrs4) -> Result<ChannelAttrs4, Nfsstat4> {
    if ask.ca_maxrequestsize < BACK_REQUEST_BYTES_MIN
        || ask.ca_maxresponsesize < BACK_RESPONSE_BYTES_MIN
        || ask.ca_maxoperations < BACK_OPERATIONS_MIN
        || ask.ca_maxrequests == 0
    {
        return Err(Nfsstat4::Toosmall);
    }
    Ok(ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: ask.ca_maxrequestsize,
        ca_maxresponsesize: ask.ca_maxresponsesize,
        ca_maxresponsesize_cached: 0,
        ca_maxoperations: ask.ca_maxoperations,
        ca_maxrequests: ask.ca_maxrequests.min(BACK_SLOTS_MAX),
        ca_rdma_ird: None,
    })
}

/// A list of callback security parameters the server can use: empty (no
/// callbacks) or with AUTH_NONE or AUTH_SYS. Only RPCSEC_GSS is
/// NFS4ERR_ENCR_ALG_UNSUPP, as knfsd answers.
fn check_cb_sec(sec: &[CallbackSecParms4]) -> Result<(), Nfsstat4> {
    let usable = |s: &CallbackSecParms4| matches!(s.discriminant(), AUTH_NONE | AUTH_SYS);
    if sec.is_empty() || sec.iter().any(usable) { Ok(()) } else { Err(Nfsstat4::EncrAlgUnsupp) }
}

impl<F: Clone + Eq + Hash, L> NfsState<F, L> {
    /// CREATE_SESSION (RFC 8881 section 18.36): look-up, the caller's
    /// principal (the record's, else NFS4ERR_CLID_INUSE for an unconfirmed
    /// record and NFS4ERR_WRONG_CRED for one confirmed under RPCSEC_GSS;
    /// any principal may use a confirmed AUTH_SYS or AUTH_NONE one), the
    /// client's CREATE_SESSION sequence (a replay gets the same reply), confirmation
    /// of an unconfirmed record (ending a restarted client's old record),
    /// then the session with negotiated attributes, bound to the caller's
    /// connection.
    pub fn create_session(
        &mut self,
        caller: &Caller,
        args: &CreateSession4Args,
        now: Instant,
    ) -> Result<CreateSession4ResOk, Nfsstat4> {
        let flags_known =
            CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_BACK_CHAN | CREATE_SESSION4_FLAG_CONN_RDMA;
        if args.csa_flags & !flags_known != 0 {
            return Err(Nfsstat4::Inval);
        }
        check_cb_sec(&args.csa_sec_parms)?;
        let fore = negotiate_fore(&args.csa_fore_chan_attrs, &self.config.channel)?;
        let back = negotiate_back(&args.csa_back_chan_attrs)?;

        // Phase 1: the client record.
        let id = ClientId(args.csa_clientid);
        let c = self.clients.get_mut(&id).ok_or(Nfsstat4::StaleClientid)?;
        // Before the sequence, and never cached: a refused caller neither
        // sees a replayed reply (it holds the session ID) nor uses up a
        // sequence number. An unconfirmed record is confirmed by its own
        // principal only (section 18.36.4 phase 3). On a confirmed record
        // RFC 8881 binds the principal only under SP4_MACH_CRED or SP4_SSV,
        // which EXCHANGE_ID refuses, so every record here is SP4_NONE and
        // a client may change principals (knfsd allows it too): under
        // AUTH_SYS or AUTH_NONE a principal is whatever the caller claims,
        // so refusing another would protect nothing. A record made under
        // RPCSEC_GSS is different: Kerberos authenticated its principal,
        // and since client IDs can be guessed, a session opened on it by
        // anyone else would reach its stateids; that stays refused.
        if c.principal != *caller.principal {
            if !c.confirmed {
                return Err(Nfsstat4::ClidInuse);
            }
            if c.principal.is_gss() {
                return Err(Nfsstat4::WrongCred);
            }
        }
        // knfsd also wants an unconfirmed record confirmed from its
        // address.
        if !c.confirmed && c.addr != caller.addr {
            return Err(Nfsstat4::ClidInuse);
        }
        c.renewed = now;
        // Phase 2: the sequence.
        if args.csa_sequence == c.cs_seqid {
            return c.cs_reply.clone().unwrap_or(Err(Nfsstat4::SeqMisordered));
        }
        if args.csa_sequence != c.cs_seqid.wrapping_add(1) {
            return Err(Nfsstat4::SeqMisordered);
        }
        // Phase 4: the session, if there is room (NFS4ERR_DELAY is not
        // cached: the retry is a new request).
        if c.sessions.len() >= self.config.limits.sessions_per_client {
            return Err(Nfsstat4::Delay);
        }
        let slots = self.session_slots(id, fore.ca_maxrequests as usize, now)?;
        let mut fore = fore;
        fore.ca_maxrequests = slots as u32;

        let c = self.clients.get(&id).expect("claims never end the asking client");
        if !c.confirmed {
            let owner = c.owner.clone();
            if let Some(&old) = self.confirmed_by_owner.get(&owner) {
                self.expire_client(old, ExpiryReason::Replaced, now);
            }
            self.unconfirmed_by_owner.remove(&owner);
            self.confirmed_by_owner.insert(owner, id);
            self.clients.get_mut(&id).expect("still there").confirmed = true;
        }
        let sid = self.new_session_id(id);
        let mut flags = 0;
        let dir = if args.csa_flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0 {
            flags |= CREATE_SESSION4_FLAG_CONN_BACK_CHAN;
            Dir::Both
        } else {
            Dir::Fore
        };
        let session = Session {
            id: sid,
            client: id,
            fore: fore.clone(),
            back: back.clone(),
            slots: (0..slots).map(|_| Slot::default()).collect(),
            conns: HashMap::from([(caller.conn, dir)]),
            cb_program: args.csa_cb_program,
            cb_sec: args.csa_sec_parms.0.clone(),
            cb_seqid: 0,
            cb_busy: false,
            cached_bytes: 0,
        };
        self.sessions.insert(sid, session);
        self.connections.entry(caller.conn).or_default().push(sid);
        let resok = CreateSession4ResOk {
            csr_sessionid: sid.0,
            csr_sequence: args.csa_sequence,
            csr_flags: flags,
            csr_fore_chan_attrs: fore,
            csr_back_chan_attrs: back,
        };
        let c = self.clients.get_mut(&id).expect("still there");
        c.sessions.push(sid);
        c.cs_seqid = args.csa_sequence;
        c.cs_reply = Some(Ok(resok.clone()));
        self.counters.sessions_created += 1;
        Ok(resok)
    }

    fn new_session_id(&mut self, client: ClientId) -> SessionId {
        loop {
            self.next_session += 1;
            let sid = SessionId::new(&self.session_key, client, self.next_session);
            if !self.sessions.contains_key(&sid) {
                return sid;
            }
        }
    }

    /// DESTROY_SESSION (RFC 8881 section 18.37). `in_session` is the
    /// session of the COMPOUND carrying it, if any (its own slot does not
    /// count as busy), `conn` the connection it came on. "DESTROY_SESSION
    /// MUST be invoked on a connection that is associated with the session
    /// being destroyed" (section 18.37.3): NFS4ERR_CONN_NOT_BOUND_TO_SESSION
    /// otherwise, so that a session ID seen on the wire does not suffice
    /// to end someone's session. A COMPOUND whose SEQUENCE is in the
    /// session counts as associated (SEQUENCE binds its connection, section
    /// 2.10.3.1, unless the session is at its bound of connections).
    /// NFS4ERR_DELAY while other requests are under way on the session.
    pub fn destroy_session(
        &mut self,
        sessionid: &SessionId,
        in_session: Option<&SessionId>,
        conn: ConnId,
    ) -> Result<(), Nfsstat4> {
        let s = self.sessions.get(sessionid).ok_or(Nfsstat4::Badsession)?;
        if in_session != Some(sessionid) && !s.conns.contains_key(&conn) {
            return Err(Nfsstat4::ConnNotBoundToSession);
        }
        let own = usize::from(in_session == Some(sessionid));
        if s.slots_in_use() > own {
            return Err(Nfsstat4::Delay);
        }
        self.remove_session(*sessionid);
        Ok(())
    }

    /// Removes a session and gives back what it held.
    pub(crate) fn remove_session(&mut self, sid: SessionId) {
        let Some(s) = self.sessions.remove(&sid) else { return };
        self.reply_cache_bytes -= s.cached_bytes;
        for conn in s.conns.keys() {
            if let Some(list) = self.connections.get_mut(conn) {
                list.retain(|x| *x != sid);
                if list.is_empty() {
                    self.connections.remove(conn);
                }
            }
        }
        let in_use = s.slots_in_use() as u32;
        self.release(s.client, Resource::ReplyCacheSlots, s.slots.len());
        if let Some(c) = self.clients.get_mut(&s.client) {
            c.sessions.retain(|x| *x != sid);
            c.in_flight -= in_use;
        }
    }

    /// BIND_CONN_TO_SESSION (RFC 8881 section 18.34): binds the caller's
    /// connection to the session's fore channel, backchannel or both.
    pub fn bind_conn_to_session(
        &mut self,
        caller: &Caller,
        args: &BindConnToSession4Args,
        now: Instant,
    ) -> Result<BindConnToSession4ResOk, Nfsstat4> {
        let limit = self.config.limits.connections_per_session;
        let s = self.sessions.get_mut(&SessionId(args.bctsa_sessid)).ok_or(Nfsstat4::Badsession)?;
        let current = s.conns.get(&caller.conn).copied();
        let dir = match (args.bctsa_dir, current) {
            (ChannelDirFromClient4::Cdfc4Fore, _) => Dir::Fore,
            (ChannelDirFromClient4::Cdfc4Back, _) => Dir::Back,
            (ChannelDirFromClient4::Cdfc4ForeOrBoth | ChannelDirFromClient4::Cdfc4BackOrBoth, _) => Dir::Both,
        };
        if current.is_none() {
            if s.conns.len() >= limit {
                return Err(Nfsstat4::Delay);
            }
            self.connections.entry(caller.conn).or_default().push(s.id);
        }
        s.conns.insert(caller.conn, dir);
        let client = s.client;
        if let Some(c) = self.clients.get_mut(&client) {
            c.renewed = now;
        }
        Ok(BindConnToSession4ResOk {
            bctsr_sessid: args.bctsa_sessid,
            bctsr_dir: dir.to_wire(),
            bctsr_use_conn_in_rdma_mode: false,
        })
    }

    /// The transport closed `conn`: it is bound to nothing any more (a
    /// session whose last backchannel connection this was has its
    /// callback path down).
    pub fn connection_closed(&mut self, conn: ConnId) {
        for sid in self.connections.remove(&conn).unwrap_or_default() {
            if let Some(s) = self.sessions.get_mut(&sid) {
                s.conns.remove(&conn);
            }
        }
    }

    /// SEQUENCE (RFC 8881 sections 2.10.6 and 18.46): the slot's sequence
    /// decides whether this is a new request, a retransmission (answered
    /// from the slot's cache) or a mistake; a new request renews the lease.
    /// A failure leaves the slot as it was (section 2.10.6.1.2).
    pub fn sequence(
        &mut self,
        caller: &Caller,
        args: &Sequence4Args,
        shape: CompoundShape,
        now: Instant,
    ) -> Result<SequenceStart, Nfsstat4> {
        let sid = SessionId(args.sa_sessionid);
        let conn_limit = self.config.limits.connections_per_session;
        let s = self.sessions.get_mut(&sid).ok_or(Nfsstat4::Badsession)?;
        if shape.ops > s.fore.ca_maxoperations {
            return Err(Nfsstat4::TooManyOps);
        }
        if shape.request_bytes > s.fore.ca_maxrequestsize as usize {
            return Err(Nfsstat4::ReqTooBig);
        }
        let slot = s.slots.get_mut(args.sa_slotid as usize).ok_or(Nfsstat4::Badslot)?;
        if slot.in_use.is_some() {
            return Err(if args.sa_sequenceid == slot.seqid { Nfsstat4::Delay } else { Nfsstat4::SeqMisordered });
        }
        let client = s.client;
        if args.sa_sequenceid == slot.seqid {
            let Some(cache) = &slot.cache else {
                self.counters.misordered += 1;
                return Err(Nfsstat4::SeqMisordered);
            };
            // knfsd's check that a retransmission is one: same principal,
            // and as many operations (fewer if it failed). Not knfsd's
            // "same sa_cachethis": the flag asks for the reply to be kept,
            // it is no part of the request retried (section 2.10.6.1.3
            // lets a server keep any reply, and false-retry detection is
            // optional, section 2.10.6.1.3.1). A retry that differs only
            // there gets the kept reply, or NFS4ERR_RETRY_UNCACHED_REP as
            // any retry of a reply not kept (pynfs SEQ9a-e).
            if cache.principal != *caller.principal
                || cache.ops > shape.ops
                || (cache.ops < shape.ops && cache.status == Nfsstat4::Ok)
            {
                return Err(Nfsstat4::SeqFalseRetry);
            }
            let replay = match (&cache.reply, cache.ops) {
                (_, 1) => Replay::SequenceOnly(self.sequence_resok(&sid, args)),
                (Some(reply), _) => Replay::Cached(reply.clone()),
                (None, _) => Replay::Uncached(self.sequence_resok(&sid, args)),
            };
            if let Some(c) = self.clients.get_mut(&client) {
                c.renewed = now;
            }
            self.counters.replays += 1;
            return Ok(SequenceStart::Replay(replay));
        }
        if args.sa_sequenceid != slot.seqid.wrapping_add(1) {
            self.counters.misordered += 1;
            return Err(Nfsstat4::SeqMisordered);
        }
        // A new request: the older reply can no longer be asked for.
        slot.seqid = args.sa_sequenceid;
        slot.in_use = Some((caller.principal.clone(), args.sa_cachethis));
        if let Some(old) = slot.cache.take().and_then(|c| c.reply) {
            s.cached_bytes -= old.len();
            self.reply_cache_bytes -= old.len();
        }
        // SP4_NONE: a connection a request comes on is bound to the fore
        // channel (section 2.10.3.1); past the bound it serves unbound.
        if !s.conns.contains_key(&caller.conn) && s.conns.len() < conn_limit {
            s.conns.insert(caller.conn, Dir::Fore);
            self.connections.entry(caller.conn).or_default().push(sid);
        }
        let reply_bytes_max =
            if args.sa_cachethis { s.fore.ca_maxresponsesize_cached } else { s.fore.ca_maxresponsesize };
        let c = self.clients.get_mut(&client).expect("a session's client exists");
        c.renewed = now;
        c.in_flight += 1;
        self.counters.sequences += 1;
        Ok(SequenceStart::New(SlotGrant {
            clientid: client,
            sessionid: sid,
            slotid: args.sa_slotid,
            sequenceid: args.sa_sequenceid,
            cachethis: args.sa_cachethis,
            reply_bytes_max,
            resok: self.sequence_resok(&sid, args),
        }))
    }

    fn sequence_resok(&self, sid: &SessionId, args: &Sequence4Args) -> Sequence4ResOk {
        let s = &self.sessions[sid];
        let highest = s.slots.len() as u32 - 1;
        Sequence4ResOk {
            sr_sessionid: sid.0,
            sr_sequenceid: args.sa_sequenceid,
            sr_slotid: args.sa_slotid,
            sr_highest_slotid: highest,
            sr_target_highest_slotid: highest,
            sr_status_flags: self.clients.get(&s.client).map_or(0, |c| self.status_flags(c, s)),
        }
    }

    /// `sr_status_flags` (RFC 8881 section 18.46.3).
    fn status_flags(&self, c: &Client<F>, s: &Session) -> u32 {
        let mut flags = 0;
        let any_back = c.sessions.iter().any(|x| self.sessions.get(x).is_some_and(Session::has_back));
        if !any_back || c.callback == CallbackState::Down {
            flags |= SEQ4_STATUS_CB_PATH_DOWN;
        }
        if c.callback == CallbackState::Fault {
            flags |= SEQ4_STATUS_BACKCHANNEL_FAULT;
        }
        if !s.has_back() {
            flags |= SEQ4_STATUS_CB_PATH_DOWN_SESSION;
        }
        if c.revoked > 0 {
            flags |= SEQ4_STATUS_RECALLABLE_STATE_REVOKED;
        }
        flags
    }

    /// The end of a request SEQUENCE started: the slot is free again and
    /// keeps `reply` for retransmissions (if the request asked for it and
    /// it is no larger than the session's cached reply size; otherwise a
    /// retransmission gets NFS4ERR_RETRY_UNCACHED_REP). A grant whose
    /// session is gone (DESTROY_SESSION in the same COMPOUND, the client's
    /// end) is ignored.
    pub fn sequence_done(&mut self, grant: &SlotGrant, reply: SlotReply, now: Instant) {
        let Some(s) = self.sessions.get_mut(&grant.sessionid) else { return };
        let cached_max = s.fore.ca_maxresponsesize_cached as usize;
        let Some(slot) = s.slots.get_mut(grant.slotid as usize) else { return };
        if slot.seqid != grant.sequenceid {
            return;
        }
        let Some((principal, cachethis)) = slot.in_use.take() else { return };
        let kept = (cachethis && reply.reply.len() <= cached_max).then(|| Bytes::copy_from_slice(reply.reply));
        let bytes = kept.as_ref().map_or(0, Bytes::len);
        slot.cache = Some(SlotCache { ops: reply.ops, status: reply.status, principal, reply: kept });
        s.cached_bytes += bytes;
        self.reply_cache_bytes += bytes;
        let client = s.client;
        if let Some(c) = self.clients.get_mut(&client) {
            c.in_flight -= 1;
            c.renewed = now;
        }
    }

    /// The end of a request SEQUENCE started that gets no reply at all
    /// (under `[ha]`, its export's storage failed: the client retransmits,
    /// to whichever node serves by then): the slot is free again and
    /// takes the same sequence ID as a new request, so that a
    /// retransmission here runs again instead of finding a reply that
    /// never went out.
    pub fn sequence_abandoned(&mut self, grant: &SlotGrant, now: Instant) {
        let Some(s) = self.sessions.get_mut(&grant.sessionid) else { return };
        let Some(slot) = s.slots.get_mut(grant.slotid as usize) else { return };
        if slot.seqid != grant.sequenceid || slot.in_use.take().is_none() {
            return;
        }
        slot.seqid = grant.sequenceid.wrapping_sub(1);
        let client = s.client;
        if let Some(c) = self.clients.get_mut(&client) {
            c.in_flight -= 1;
            c.renewed = now;
        }
    }

    /// BACKCHANNEL_CTL (RFC 8881 section 18.33): new callback program and
    /// security parameters for the session.
    pub fn backchannel_ctl(
        &mut self,
        sessionid: &SessionId,
        program: u32,
        sec: &[CallbackSecParms4],
    ) -> Result<(), Nfsstat4> {
        check_cb_sec(sec)?;
        let s = self.sessions.get_mut(sessionid).ok_or(Nfsstat4::Badsession)?;
        s.cb_program = program;
        s.cb_sec = sec.to_vec();
        Ok(())
    }

    /// What the handler found out about the client's backchannel.
    pub fn set_callback_state(&mut self, clientid: ClientId, state: CallbackState) {
        if let Some(c) = self.clients.get_mut(&clientid) {
            c.callback = state;
        }
    }

    /// The client's callback path as the handler last set it; `None` for
    /// an unknown client.
    pub fn callback_state(&self, clientid: ClientId) -> Option<CallbackState> {
        self.clients.get(&clientid).map(|c| c.callback)
    }

    /// A session and connection to send the client a callback on, if it
    /// has a backchannel.
    pub fn callback_channel(&self, clientid: ClientId) -> Option<CallbackChannel> {
        let c = self.clients.get(&clientid)?;
        c.sessions.iter().filter_map(|sid| self.sessions.get(sid)).find_map(|s| {
            let conn = s.conns.iter().filter(|(_, d)| d.back()).map(|(c, _)| *c).min()?;
            Some(CallbackChannel {
                sessionid: s.id,
                conn,
                program: s.cb_program,
                sec: s.cb_sec.clone(),
                attrs: s.back.clone(),
            })
        })
    }

    /// Takes the session's backchannel slot for a CB_SEQUENCE: its slot ID
    /// and sequence ID, or `None` while another callback is under way.
    pub fn cb_sequence_begin(&mut self, sessionid: &SessionId) -> Option<(u32, u32)> {
        let s = self.sessions.get_mut(sessionid)?;
        if s.cb_busy {
            return None;
        }
        s.cb_busy = true;
        Some((0, s.cb_seqid.wrapping_add(1)))
    }

    /// Frees the backchannel slot; `answered`: the client replied (its
    /// slot moved on), else the same sequence ID is used again.
    pub fn cb_sequence_end(&mut self, sessionid: &SessionId, answered: bool) {
        if let Some(s) = self.sessions.get_mut(sessionid) {
            s.cb_busy = false;
            if answered {
                s.cb_seqid = s.cb_seqid.wrapping_add(1);
            }
        }
    }

    /// The session's negotiated forechannel (for the handler's checks, e.g.
    /// a CREATE_SESSION in a COMPOUND).
    pub fn fore_channel(&self, sessionid: &SessionId) -> Option<&ChannelAttrs4> {
        self.sessions.get(sessionid).map(|s| &s.fore)
    }
}

impl<F: Clone + Eq + Hash, L> NfsState<F, L> {
    /// The sessions of `clientid`, oldest first.
    pub fn sessions_of(&self, clientid: ClientId) -> Vec<SessionId> {
        self.clients.get(&clientid).map(|c| c.sessions.clone()).unwrap_or_default()
    }
}

//! The backchannel's client side (RFC 8881 sections 2.10.3.1, 18.36,
//! 20): CB_NULL to probe a session's backchannel, CB_COMPOUND of
//! CB_SEQUENCE and CB_RECALL to recall a delegation, or CB_GETATTR to ask
//! a write delegation's holder for the file's size and change, on a
//! connection the client bound to the backchannel (the client's own fore
//! channel connection when it asked CREATE_SESSION4_FLAG_CONN_BACK_CHAN).
//!
//! Calls go out through the connection's [`Backchannel`] and their replies
//! come back through the [`ReplyRouter`]; the router's waiter only posts
//! the reply in a mailbox (on the transport's read path, before the
//! client's next call on that connection is read), and everything else
//! happens in [`pump`] (`Callbacks::pump`), which the end of every
//! COMPOUND and the callback thread ([`Nfs4Program::start_callbacks`])
//! call: replies are read and their outcome given to the state, callbacks
//! past their timeout make the callback path down (SEQUENCE then says
//! SEQ4_STATUS_CB_PATH_DOWN and the client binds a connection again,
//! which probes again), the state's recalls are sent, one at a time per
//! session (its one backchannel slot). A COMPOUND first answers the
//! replies posted and not answered yet (`Callbacks::before_compound`): a
//! client that answered the probe and then sent an OPEN gets the OPEN
//! run with its path up, whether or not the callback thread got there
//! first.
//!
//! A CB_GETATTR is sent at once by the GETATTR that needs it, unless one
//! of the same file is in flight ([`Callbacks::send_getattr`]); the
//! GETATTR then waits for its [`GetattrAnswer`] (shared by all that need
//! it) with nothing locked; its reply comes the same way as
//! the others' (another worker reads it, the callback thread or the next
//! COMPOUND answers it), so the waiting worker never stands in its way.
//!
//! Lock order: the engine, then the state; never the engine while the
//! state is held.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_nfs4_proto::{
    AttrUse, Attrs4, Bitmap4, CB_COMPOUND, CB_NULL, CallbackSecParms4, CbCompound4Args, CbCompound4Res, CbGetattr4Args,
    CbRecall4Args, CbSequence4Args, FATTR4_CHANGE, FATTR4_SIZE, NFS_CB, Nfs4Result, NfsCbArgop4, NfsCbResop4, NfsFh4,
    Nfsstat4, Tag4,
};
use keel_nfs4_state::{CallbackChannel, CallbackState, ClientId, ConnId, Recall, SessionId};
use keel_rpc::msg::{AcceptStat, CallHeader, OpaqueAuth, ReplyStat, decode_reply_header};
use keel_rpc::{AuthSys, BackchannelError, CallConnection, ConnectionId, ReplyRouter};
use keel_store::Store;
use keel_xdr::{Decode, Decoder, Encode, Encoder};

use crate::program::Nfs4Program;

/// Connections remembered as bound to a backchannel, at most; past it the
/// closed ones are forgotten, and if none is, a new one is not
/// remembered (its client's callback path is then down).
pub const CALLBACK_CONNECTIONS_MAX: usize = 4096;
/// Recalls waiting to be sent, at most (each is a delegation, which the
/// state bounds already; this bounds the queue against a bug).
pub const RECALLS_QUEUED_MAX: usize = 65_536;
/// How often the callback thread looks for timeouts, reaps the state and
/// retries recalls when nothing wakes it.
pub const CALLBACK_TICK: Duration = Duration::from_secs(1);
/// A recall the client answered NFS4ERR_DELAY (or with a stateid it does
/// not know yet: its OPEN reply may still be on its way, as knfsd
/// reasons) is sent again after this.
pub const RECALL_RETRY_AFTER: Duration = Duration::from_secs(1);

/// How long a callback waits for its reply: a tenth of the lease, at
/// least a second (knfsd's `max_cb_time`).
pub(crate) fn callback_timeout(lease: Duration) -> Duration {
    (lease / 10).max(Duration::from_secs(1))
}

/// Replies posted by the router's waiters, and the callback thread's
/// wake-up.
#[derive(Default)]
pub(crate) struct Mailbox {
    replies: Mutex<Vec<(u64, Bytes)>>,
    /// Replies posted whose outcome the state does not know yet: counted
    /// up before a reply is posted, down once it was answered (with the
    /// engine held), so a COMPOUND that finds none has nothing to wait
    /// for, even while the callback thread answers what it took.
    unanswered: AtomicUsize,
    wake: Condvar,
}

impl Mailbox {
    fn post(&self, token: u64, reply: Bytes) {
        self.unanswered.fetch_add(1, Ordering::SeqCst);
        self.replies.lock().unwrap_or_else(|e| e.into_inner()).push((token, reply));
        self.wake.notify_all();
    }

    fn take(&self) -> Vec<(u64, Bytes)> {
        std::mem::take(&mut *self.replies.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Waits until a reply is posted or `timeout` passes.
    fn wait(&self, timeout: Duration) {
        let replies = self.replies.lock().unwrap_or_else(|e| e.into_inner());
        if replies.is_empty() {
            drop(self.wake.wait_timeout(replies, timeout));
        }
    }
}

/// What a callback sent is for.
#[derive(Debug, Clone)]
enum Purpose {
    Probe,
    Recall {
        sessionid: SessionId,
        recall: Recall<Bytes>,
    },
    /// Of the size and change of `file`, which its GETATTRs wait for.
    Getattr {
        sessionid: SessionId,
        file: Bytes,
        answer: Arc<GetattrAnswer>,
    },
}

/// The size and change attribute a write delegation's holder answered
/// CB_GETATTR with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HolderAttrs {
    pub change: u64,
    pub size: u64,
}

/// A CB_GETATTR's outcome, for the GETATTR that waits for it.
#[derive(Debug, Default)]
pub(crate) struct GetattrAnswer {
    /// None until it is known; then the holder's attributes, or None if
    /// the callback failed (not answered, refused, no size or change).
    outcome: Mutex<Option<Option<HolderAttrs>>>,
    came: Condvar,
}

impl GetattrAnswer {
    fn give(&self, attrs: Option<HolderAttrs>) {
        let mut outcome = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        outcome.get_or_insert(attrs);
        self.came.notify_all();
    }

    /// The holder's attributes, if they come within `timeout`.
    pub(crate) fn wait(&self, timeout: Duration) -> Option<HolderAttrs> {
        let outcome = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        let (outcome, _) =
            self.came.wait_timeout_while(outcome, timeout, |o| o.is_none()).unwrap_or_else(|e| e.into_inner());
        outcome.flatten()
    }
}

#[derive(Debug)]
struct InFlight {
    client: ClientId,
    conn: ConnId,
    xid: u32,
    deadline: Instant,
    purpose: Purpose,
}

#[derive(Debug, Clone)]
struct Queued {
    recall: Recall<Bytes>,
    not_before: Instant,
}

#[derive(Default)]
struct Engine {
    /// Connections bound to a backchannel, by the state's name for them.
    conns: HashMap<ConnId, CallConnection>,
    /// The minor version each client's sessions use (CB_COMPOUND's).
    minors: HashMap<ClientId, u32>,
    in_flight: HashMap<u64, InFlight>,
    queued: Vec<Queued>,
    probes: HashSet<ClientId>,
    next_token: u64,
}

/// What the program keeps for its callbacks.
pub(crate) struct Callbacks {
    router: Option<Arc<ReplyRouter>>,
    timeout: Duration,
    engine: Mutex<Engine>,
    mailbox: Arc<Mailbox>,
    counters: Mutex<CallbackCounters>,
    /// Whether OPEN offers read delegations (`deleg.rs`).
    read_delegations: bool,
    /// Whether OPEN offers write delegations (the state's configuration).
    write_delegations: bool,
    /// Whether one was ever granted (NFSv3's accesses look no further
    /// until then).
    granted: AtomicBool,
    /// Whether a write delegation was ever granted (reads by others look
    /// no further until then: only those conflict with one).
    write_granted: AtomicBool,
    /// A probe waits to be sent (the end of the COMPOUND that asked for it
    /// sends it).
    kick: AtomicBool,
}

/// Callback counters, for statistics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallbackCounters {
    pub probes_sent: u64,
    pub recalls_sent: u64,
    pub getattrs_sent: u64,
    /// GETATTRs that waited for the answer of a CB_GETATTR in flight for
    /// the same file instead of sending one.
    pub getattrs_shared: u64,
    pub replies: u64,
    pub timeouts: u64,
    /// Callbacks that could not be sent (no connection, a full queue).
    pub unsent: u64,
}

impl Callbacks {
    pub(crate) fn new(lease: Duration) -> Self {
        Callbacks {
            router: None,
            timeout: callback_timeout(lease),
            engine: Mutex::new(Engine::default()),
            mailbox: Arc::default(),
            counters: Mutex::default(),
            read_delegations: false,
            write_delegations: false,
            granted: AtomicBool::new(false),
            write_granted: AtomicBool::new(false),
            kick: AtomicBool::new(false),
        }
    }

    /// Before a COMPOUND runs: the replies that came before it (on its
    /// connection, before its call) are answered, so that it sees their
    /// outcome (a probe answered: the path is up). Nothing is locked
    /// while no reply waits.
    pub(crate) fn before_compound<S: Store>(&self, program: &Nfs4Program<S>, now: Instant) {
        if self.router.is_none() || self.mailbox.unanswered.load(Ordering::SeqCst) == 0 {
            return;
        }
        // The callback thread may be answering replies it took: the
        // engine is had once it is done.
        let mut e = self.engine();
        self.answer_replies(program, &mut e, now);
    }

    /// At the end of a COMPOUND: sends the probes it asked for and the
    /// recalls it caused. Skipped (no lock taken) while no delegation was
    /// ever granted and no probe waits: replies and timeouts are the
    /// callback thread's.
    pub(crate) fn after_compound<S: Store>(&self, program: &Nfs4Program<S>, now: Instant) {
        if self.kick.swap(false, Ordering::SeqCst) || self.any_granted() {
            self.pump(program, now);
        }
    }

    pub(crate) fn set_read_delegations(&mut self, on: bool) {
        self.read_delegations = on;
    }

    /// Whether read delegations may be offered: configured, and callbacks
    /// can be sent.
    pub(crate) fn read_delegations(&self) -> bool {
        self.read_delegations && self.enabled()
    }

    pub(crate) fn set_write_delegations(&mut self, on: bool) {
        self.write_delegations = on;
    }

    /// Whether write delegations may be offered: configured, and callbacks
    /// can be sent.
    pub(crate) fn write_delegations(&self) -> bool {
        self.write_delegations && self.enabled()
    }

    pub(crate) fn delegation_granted(&self, write: bool) {
        if write {
            self.write_granted.store(true, Ordering::Relaxed);
        }
        self.granted.store(true, Ordering::Relaxed);
    }

    pub(crate) fn any_granted(&self) -> bool {
        self.granted.load(Ordering::Relaxed)
    }

    pub(crate) fn any_write_granted(&self) -> bool {
        self.write_granted.load(Ordering::Relaxed)
    }

    pub(crate) fn set_router(&mut self, router: Arc<ReplyRouter>) {
        self.router = Some(router);
    }

    /// Whether callbacks can be sent at all (a router routes their
    /// replies).
    pub(crate) fn enabled(&self) -> bool {
        self.router.is_some()
    }

    fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut CallbackCounters)) {
        f(&mut self.counters.lock().unwrap_or_else(|e| e.into_inner()));
    }

    pub(crate) fn counters(&self) -> CallbackCounters {
        *self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `conn` was bound to `client`'s backchannel (CREATE_SESSION with
    /// CONN_BACK_CHAN, BIND_CONN_TO_SESSION, BACKCHANNEL_CTL): remember
    /// it and probe the path.
    pub(crate) fn backchannel_bound(&self, client: ClientId, minor: u32, conn: Option<&CallConnection>) {
        if !self.enabled() {
            return;
        }
        let mut e = self.engine();
        if let Some(conn) = conn {
            let id = ConnId(conn.id().get());
            if !e.conns.contains_key(&id) && e.conns.len() >= CALLBACK_CONNECTIONS_MAX {
                e.conns.retain(|_, c| c.backchannel().is_open());
            }
            if e.conns.len() < CALLBACK_CONNECTIONS_MAX || e.conns.contains_key(&id) {
                e.conns.insert(id, conn.clone());
            }
        }
        if e.minors.len() >= CALLBACK_CONNECTIONS_MAX && !e.minors.contains_key(&client) {
            e.minors.clear();
        }
        e.minors.insert(client, minor);
        e.probes.insert(client);
        self.kick.store(true, Ordering::SeqCst);
    }

    /// Reads the replies, times out callbacks, sends probes and recalls.
    pub(crate) fn pump<S: Store>(&self, program: &Nfs4Program<S>, now: Instant) {
        let Some(router) = &self.router else { return };
        let mut e = self.engine();
        self.answer_replies(program, &mut e, now);
        let overdue: Vec<u64> = e.in_flight.iter().filter(|(_, f)| f.deadline <= now).map(|(t, _)| *t).collect();
        for token in overdue {
            let f = e.in_flight.remove(&token).expect("listed above");
            router.forget(ConnectionId::new(f.conn.0), f.xid);
            self.count(|c| c.timeouts += 1);
            tracing::info!(client = f.client.0, purpose = ?f.purpose, "NFSv4.1 callback timed out: callback path down");
            self.path_failed(program, &mut e, &f, CallbackState::Down, now);
        }
        let recalls = program.with_state(|s| s.take_recalls());
        for recall in recalls {
            if e.queued.len() < RECALLS_QUEUED_MAX {
                e.queued.push(Queued { recall, not_before: now });
            }
        }
        let probes: Vec<ClientId> = e.probes.drain().collect();
        for client in probes {
            self.send_probe(program, &mut e, router, client, now);
        }
        self.send_recalls(program, &mut e, router, now);
    }

    /// Gives the outcome of the replies posted to the state.
    fn answer_replies<S: Store>(&self, program: &Nfs4Program<S>, e: &mut Engine, now: Instant) {
        let replies = self.mailbox.take();
        let taken = replies.len();
        for (token, reply) in replies {
            if let Some(f) = e.in_flight.remove(&token) {
                self.count(|c| c.replies += 1);
                self.answered(program, e, f, reply, now);
            }
        }
        self.mailbox.unanswered.fetch_sub(taken, Ordering::SeqCst);
    }

    /// Sends `client` a CB_COMPOUND on `channel` of CB_SEQUENCE on the
    /// backchannel slot and sequence the caller began (one call in flight
    /// per session: the highest slot is 0, no reply is cached), then `op`.
    #[allow(clippy::too_many_arguments)]
    fn send_sequenced<S: Store>(
        &self,
        program: &Nfs4Program<S>,
        e: &mut Engine,
        router: &ReplyRouter,
        client: ClientId,
        channel: &CallbackChannel,
        (slot, seq): (u32, u32),
        op: NfsCbArgop4,
        purpose: Purpose,
        now: Instant,
    ) -> Result<(), BackchannelError> {
        let args = CbCompound4Args {
            tag: Tag4::default(),
            minorversion: e.minors.get(&client).copied().unwrap_or(1),
            callback_ident: 0,
            argarray: vec![
                NfsCbArgop4::CbSequence(CbSequence4Args {
                    csa_sessionid: channel.sessionid.0,
                    csa_sequenceid: seq,
                    csa_slotid: slot,
                    csa_highest_slotid: 0,
                    csa_cachethis: false,
                    csa_referring_call_lists: Default::default(),
                }),
                op,
            ],
        };
        let cred = credential(&channel.sec);
        let encode = |xid, enc: &mut Encoder| {
            call_header(xid, channel.program, CB_COMPOUND, &cred).encode(enc);
            args.encode(enc);
        };
        self.send(program, e, router, client, channel.conn, encode, purpose, now)
    }

    /// Sends `call` (header and arguments after the xid the router gives)
    /// on the client's backchannel; the token of the call in flight.
    #[allow(clippy::too_many_arguments)]
    fn send<S: Store>(
        &self,
        program: &Nfs4Program<S>,
        e: &mut Engine,
        router: &ReplyRouter,
        client: ClientId,
        conn: ConnId,
        encode: impl Fn(u32, &mut Encoder),
        purpose: Purpose,
        now: Instant,
    ) -> Result<(), BackchannelError> {
        let Some(connection) = e.conns.get(&conn).cloned() else { return Err(BackchannelError::Closed) };
        e.next_token += 1;
        let token = e.next_token;
        let mailbox = Arc::downgrade(&self.mailbox);
        let waiter = Box::new(move |reply: Bytes| {
            if let Some(m) = Weak::upgrade(&mailbox) {
                m.post(token, reply);
            }
        });
        let wire = ConnectionId::new(conn.0);
        let xid = router.expect(wire, self.timeout, now, waiter).map_err(|_| BackchannelError::Full { queued: 0 })?;
        let mut enc = Encoder::new();
        encode(xid, &mut enc);
        if let Err(err) = connection.backchannel().send_call(enc.into_bytes()) {
            router.forget(wire, xid);
            if err == BackchannelError::Closed {
                e.conns.remove(&conn);
                program.with_state(|s| s.connection_closed(conn));
            }
            return Err(err);
        }
        e.in_flight.insert(token, InFlight { client, conn, xid, deadline: now + self.timeout, purpose });
        Ok(())
    }

    fn send_probe<S: Store>(
        &self,
        program: &Nfs4Program<S>,
        e: &mut Engine,
        router: &ReplyRouter,
        client: ClientId,
        now: Instant,
    ) {
        // A connection that turns out closed is unbound and the next one
        // tried; a session has a few at most.
        for _ in 0..CONNECTIONS_TRIED_MAX {
            let Some(channel) = program.with_state(|s| s.callback_channel(client)) else {
                program.with_state(|s| s.set_callback_state(client, CallbackState::Down));
                return;
            };
            let cred = credential(&channel.sec);
            let encode = |xid, enc: &mut Encoder| call_header(xid, channel.program, CB_NULL, &cred).encode(enc);
            match self.send(program, e, router, client, channel.conn, encode, Purpose::Probe, now) {
                Ok(()) => {
                    self.count(|c| c.probes_sent += 1);
                    return;
                }
                Err(BackchannelError::Closed) => {
                    // Unbound by `send` when the transport knows it
                    // closed; one never remembered is unbound here.
                    program.with_state(|s| s.connection_closed(channel.conn));
                }
                Err(err) => {
                    tracing::debug!(client = client.0, %err, "CB_NULL not sent");
                    self.count(|c| c.unsent += 1);
                    program.with_state(|s| s.set_callback_state(client, CallbackState::Down));
                    return;
                }
            }
        }
    }

    /// Sends the queued recalls whose time has come, whose delegation is
    /// still held, whose client's path is up and whose session's slot is
    /// free.
    fn send_recalls<S: Store>(&self, program: &Nfs4Program<S>, e: &mut Engine, router: &ReplyRouter, now: Instant) {
        let queued = std::mem::take(&mut e.queued);
        let mut kept = Vec::with_capacity(queued.len());
        for q in queued {
            if q.not_before > now {
                kept.push(q);
                continue;
            }
            let (client, stateid) = (q.recall.clientid, q.recall.stateid);
            let (held, state, channel) = program.with_state(|s| {
                let held = s.test_stateids(client, &[stateid]) == [Nfsstat4::Ok];
                (held, s.callback_state(client), s.callback_channel(client))
            });
            if !held {
                // Returned or revoked meanwhile.
                continue;
            }
            let (Some(CallbackState::Up), Some(channel)) = (state, channel) else {
                // Sent once the path is up again (or revoked when its
                // deadline passes).
                kept.push(q);
                continue;
            };
            let sid = channel.sessionid;
            let Some((slot, seq)) = program.with_state(|s| s.cb_sequence_begin(&sid)) else {
                kept.push(q);
                continue;
            };
            let recall = NfsCbArgop4::CbRecall(CbRecall4Args {
                stateid: q.recall.stateid,
                truncate: false,
                fh: NfsFh4(q.recall.file.clone()),
            });
            let purpose = Purpose::Recall { sessionid: sid, recall: q.recall.clone() };
            match self.send_sequenced(program, e, router, client, &channel, (slot, seq), recall, purpose, now) {
                Ok(()) => self.count(|c| c.recalls_sent += 1),
                Err(err) => {
                    tracing::debug!(client = client.0, %err, "CB_RECALL not sent; retried once the path is up");
                    self.count(|c| c.unsent += 1);
                    program.with_state(|s| {
                        s.cb_sequence_end(&sid, false);
                        s.recall_failed(client);
                    });
                    e.probes.insert(client);
                    kept.push(q);
                }
            }
        }
        e.queued.extend(kept);
    }

    /// Sends `client` (whose callback path the caller found up) a
    /// CB_GETATTR of the size and change of `file`, which it holds a write
    /// delegation on, unless one is in flight already, whose answer the
    /// caller then shares (as knfsd keeps one CB_GETATTR per delegation
    /// in flight): what the caller waits for, or None if it could not be
    /// sent (no backchannel, its slot busy with another callback).
    pub(crate) fn send_getattr<S: Store>(
        &self,
        program: &Nfs4Program<S>,
        client: ClientId,
        file: &Bytes,
        now: Instant,
    ) -> Option<Arc<GetattrAnswer>> {
        let router = self.router.as_ref()?;
        let mut e = self.engine();
        // In flight: not answered yet (an answered callback leaves the
        // table, under the engine, before its answer is given).
        let in_flight = e.in_flight.values().find_map(|f| match &f.purpose {
            Purpose::Getattr { file: asked, answer, .. } if f.client == client && asked == file => Some(answer.clone()),
            _ => None,
        });
        if let Some(answer) = in_flight {
            self.count(|c| c.getattrs_shared += 1);
            return Some(answer);
        }
        let channel = program.with_state(|s| s.callback_channel(client))?;
        let sid = channel.sessionid;
        let (slot, seq) = program.with_state(|s| s.cb_sequence_begin(&sid))?;
        let getattr = NfsCbArgop4::CbGetattr(CbGetattr4Args {
            fh: NfsFh4(file.clone()),
            attr_request: Bitmap4::from_bits([FATTR4_CHANGE, FATTR4_SIZE]),
        });
        let answer = Arc::new(GetattrAnswer::default());
        let purpose = Purpose::Getattr { sessionid: sid, file: file.clone(), answer: answer.clone() };
        match self.send_sequenced(program, &mut e, router, client, &channel, (slot, seq), getattr, purpose, now) {
            Ok(()) => {
                self.count(|c| c.getattrs_sent += 1);
                Some(answer)
            }
            Err(err) => {
                tracing::debug!(client = client.0, %err, "CB_GETATTR not sent");
                self.count(|c| c.unsent += 1);
                program.with_state(|s| s.cb_sequence_end(&sid, false));
                None
            }
        }
    }

    /// A callback's reply came.
    fn answered<S: Store>(&self, program: &Nfs4Program<S>, e: &mut Engine, f: InFlight, reply: Bytes, now: Instant) {
        let mut dec = Decoder::new(reply);
        let accepted = matches!(decode_reply_header(&mut dec), Ok((_, ReplyStat::Accepted(AcceptStat::Success))));
        match &f.purpose {
            Purpose::Probe if accepted => {
                program.with_state(|s| s.set_callback_state(f.client, CallbackState::Up));
            }
            Purpose::Probe => self.path_failed(program, e, &f, CallbackState::Fault, now),
            Purpose::Recall { sessionid, .. } | Purpose::Getattr { sessionid, .. } => {
                let res = if accepted { CbCompound4Res::decode(&mut dec).ok() } else { None };
                let Some(res) = res else {
                    return self.path_failed(program, e, &f, CallbackState::Fault, now);
                };
                let sequenced = matches!(res.resarray.first(), Some(NfsCbResop4::CbSequence(Nfs4Result::Ok(_))));
                program.with_state(|s| s.cb_sequence_end(sessionid, sequenced));
                if !sequenced {
                    tracing::info!(client = f.client.0, status = ?res.status, "CB_SEQUENCE refused: backchannel fault");
                    return self.path_failed(program, e, &f, CallbackState::Fault, now);
                }
                program.with_state(|s| s.set_callback_state(f.client, CallbackState::Up));
                match &f.purpose {
                    Purpose::Recall { recall, .. } => self.recall_answered(e, &f, recall, &res, now),
                    Purpose::Getattr { answer, .. } => answer.give(holder_attrs(&f, &res)),
                    Purpose::Probe => {}
                }
            }
        }
    }

    /// A CB_RECALL's CB_COMPOUND was answered (its CB_SEQUENCE was).
    fn recall_answered(
        &self,
        e: &mut Engine,
        f: &InFlight,
        recall: &Recall<Bytes>,
        res: &CbCompound4Res,
        now: Instant,
    ) {
        let recalled = match res.resarray.get(1) {
            Some(NfsCbResop4::CbRecall(status)) => *status,
            _ => res.status,
        };
        match recalled {
            // The client returns it with DELEGRETURN.
            Nfsstat4::Ok => {}
            Nfsstat4::Delay | Nfsstat4::BadStateid | Nfsstat4::Badhandle => {
                e.queued.push(Queued { recall: recall.clone(), not_before: now + RECALL_RETRY_AFTER });
            }
            other => {
                // Its deadline revokes it if it is not returned.
                tracing::info!(client = f.client.0, status = ?other, "CB_RECALL refused");
            }
        }
    }

    /// A callback failed (`why`): the path is down or faulty; a recall is
    /// sent again once it is up (the client binds a connection again when
    /// SEQUENCE tells it, which probes).
    fn path_failed<S: Store>(
        &self,
        program: &Nfs4Program<S>,
        e: &mut Engine,
        f: &InFlight,
        why: CallbackState,
        now: Instant,
    ) {
        program.with_state(|s| {
            if let Purpose::Recall { sessionid, .. } | Purpose::Getattr { sessionid, .. } = &f.purpose {
                s.cb_sequence_end(sessionid, false);
            }
            s.set_callback_state(f.client, why);
        });
        match &f.purpose {
            Purpose::Recall { recall, .. } => e.queued.push(Queued { recall: recall.clone(), not_before: now }),
            // Its GETATTR recalls instead, if it still waits.
            Purpose::Getattr { answer, .. } => answer.give(None),
            Purpose::Probe => {}
        }
    }
}

/// The size and change a CB_GETATTR's answer gives, if it gives both.
fn holder_attrs(f: &InFlight, res: &CbCompound4Res) -> Option<HolderAttrs> {
    let Some(NfsCbResop4::CbGetattr(Nfs4Result::Ok(ok))) = res.resarray.get(1) else {
        tracing::info!(client = f.client.0, status = ?res.status, "CB_GETATTR refused");
        return None;
    };
    let attrs = Attrs4::from_fattr4(&ok.obj_attributes, AttrUse::Reply).ok()?;
    match (attrs.change, attrs.size) {
        (Some(change), Some(size)) => Some(HolderAttrs { change, size }),
        _ => {
            tracing::info!(client = f.client.0, "CB_GETATTR answered without the size or change");
            None
        }
    }
}

/// Connections of a session tried in one pump when they turn out closed.
const CONNECTIONS_TRIED_MAX: usize = 8;

/// The credential the client asked its callbacks to carry: the first
/// AUTH_SYS or AUTH_NONE of its list (the state refuses lists without
/// one).
fn credential(sec: &[CallbackSecParms4]) -> OpaqueAuth {
    for s in sec {
        match s {
            CallbackSecParms4::AuthNone => return OpaqueAuth::default(),
            CallbackSecParms4::AuthSys(p) => {
                return AuthSys {
                    stamp: p.stamp,
                    machine_name: p.machinename.0.clone(),
                    uid: p.uid,
                    gid: p.gid,
                    gids: p.gids.to_vec(),
                }
                .to_opaque();
            }
            CallbackSecParms4::RpcsecGss(_) => {}
        }
    }
    OpaqueAuth::default()
}

fn call_header(xid: u32, program: u32, proc_: u32, cred: &OpaqueAuth) -> CallHeader {
    CallHeader {
        xid,
        rpc_version: keel_rpc::msg::RPC_VERSION,
        prog: program,
        vers: NFS_CB,
        proc_,
        cred: cred.clone(),
        verf: OpaqueAuth::default(),
    }
}

/// The callback thread: pumps when a reply comes and at least every
/// [`CALLBACK_TICK`], recalls the delegations whose file lease is being
/// broken, and reaps the state (leases, recall deadlines, grace) when due;
/// it ends once the program is gone.
pub(crate) fn run_thread<S: Store>(program: Weak<Nfs4Program<S>>, mailbox: Arc<Mailbox>) {
    loop {
        mailbox.wait(CALLBACK_TICK);
        let Some(p) = program.upgrade() else { return };
        let now = Instant::now();
        crate::deleg::recall_broken_leases(&p, now);
        p.reap_if_due(now);
        p.callbacks.pump(&p, now);
    }
}

impl Callbacks {
    pub(crate) fn mailbox(&self) -> Arc<Mailbox> {
        self.mailbox.clone()
    }
}

/// After an operation that bound a backchannel succeeded: the path is
/// unknown until the probe it starts answers (so SEQUENCE stops saying
/// CB_PATH_DOWN, and the client does not bind again meanwhile).
pub(crate) fn after_bind<S: Store>(c: &crate::Compound<'_, S>, hook: BindHook) {
    let BindHook::Bound(client) = hook else { return };
    if !c.program.callbacks.enabled() {
        return;
    }
    c.program.with_state(|s| s.set_callback_state(client, CallbackState::Unknown));
    c.program.callbacks.backchannel_bound(client, c.minor, c.ctx.connection);
}

/// What the loop needs to know after an operation succeeded, taken from
/// its arguments before it runs.
pub(crate) enum BindHook {
    None,
    /// CREATE_SESSION with CONN_BACK_CHAN, BIND_CONN_TO_SESSION with a
    /// backchannel, BACKCHANNEL_CTL: the path is probed.
    Bound(ClientId),
}

impl BindHook {
    pub(crate) fn of(op: &keel_nfs4_proto::NfsArgop4, slot_client: Option<ClientId>) -> BindHook {
        use keel_nfs4_proto::{CREATE_SESSION4_FLAG_CONN_BACK_CHAN, ChannelDirFromClient4 as Dir, NfsArgop4};
        match op {
            NfsArgop4::CreateSession(a) if a.csa_flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0 => {
                BindHook::Bound(ClientId(a.csa_clientid))
            }
            NfsArgop4::BindConnToSession(a) if !matches!(a.bctsa_dir, Dir::Cdfc4Fore) => {
                BindHook::Bound(SessionId(a.bctsa_sessid).client())
            }
            NfsArgop4::BackchannelCtl(_) => slot_client.map_or(BindHook::None, BindHook::Bound),
            _ => BindHook::None,
        }
    }
}

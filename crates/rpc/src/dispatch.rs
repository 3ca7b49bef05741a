//! From one call record to one reply: header checks, credentials, program
//! and version lookup, the duplicate reply cache, then the program itself.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use keel_store::pipe::FilePipe;
use keel_xdr::{Decoder, Encoder, Segment};

use crate::connection::{CallConnection, ConnectionId, ConnectionWatcher};
use crate::cred::Credential;
use crate::drc::{CacheLookup, DrcKey, ReplyCache};
use crate::gss::wire::RPCSEC_GSS;
use crate::gss::{GssCall, GssServer, GssService, GssVerdict};
use crate::msg::{
    AcceptStat, AuthStat, CallHeader, CallHeaderError, OpaqueAuth, RPC_VERSION, RejectStat, ReplyStat,
    encode_reply_header, encode_reply_header_with,
};
use crate::replies::ReplyRouter;
use crate::report::CallReport;

/// What a program needs to know about a call besides its arguments.
#[derive(Debug)]
pub struct CallContext<'a> {
    pub xid: u32,
    pub vers: u32,
    pub proc_: u32,
    /// Who the call comes from, established once by the dispatcher.
    pub cred: &'a Credential,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// The connection the call came on; `None` for a datagram. NFSv4.1
    /// binds sessions and their backchannel to connections.
    pub connection: Option<&'a CallConnection>,
    /// What the program reports about the call, for statistics.
    pub report: CallReport,
}

/// A call the program accepted but cannot answer with results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptError {
    ProcUnavail,
    GarbageArgs,
    SystemErr,
    /// No reply at all (knfsd's "drop it"): the client retransmits, to
    /// this server or, after a failover, to the one that took over.
    Drop,
    /// The call's security flavor is not one the object's export accepts:
    /// denied with AUTH_TOOWEAK (RFC 2623 section 2.3), and not cached.
    TooWeak,
}

impl From<keel_xdr::XdrError> for AcceptError {
    fn from(_: keel_xdr::XdrError) -> Self {
        AcceptError::GarbageArgs
    }
}

/// Bytes of RPC framing around a reply's results, at most: record mark,
/// xid, message type, reply status, an AUTH_NONE verifier, and the accept
/// status with a mismatch's two versions. A flavor whose replies carry a
/// verifier of their own (RPCSEC_GSS, [`Credential::reply_verifier`])
/// adds its bytes.
pub const REPLY_HEADER_BYTES_MAX: usize = 64;

/// Results of a procedure that does not say otherwise, at most (knfsd's
/// `pc_xdrressize` for the small ones: attributes, a handle, wcc data).
pub const REPLY_RESULTS_BYTES_DEFAULT: usize = 1024;

/// One RPC program (NFS, MOUNT, portmap) as the dispatcher sees it. A
/// program describes its procedures in a
/// [`ProcedureTable`](crate::ProcedureTable) and answers each question
/// below by looking the procedure up in it.
pub trait RpcProgram: Send + Sync {
    fn program(&self) -> u32;
    /// Lowest and highest version served.
    fn versions(&self) -> (u32, u32);
    /// Whether replies to this procedure belong in the duplicate reply cache
    /// (the non-idempotent ones).
    fn is_cached(&self, _vers: u32, _proc: u32) -> bool {
        false
    }
    /// Whether this procedure answers: the asynchronous ones (NLM's
    /// `_MSG` and `_RES` calls) run and send nothing back; their results,
    /// if any, travel in a call of their own. Calls refused before they
    /// run (PROC_UNAVAIL, GARBAGE_ARGS, ...) are answered all the same.
    fn answers(&self, _vers: u32, _proc: u32) -> bool {
        true
    }
    /// The versions to register with the portmapper, on every transport
    /// and port the program is served on: all of them unless the program
    /// says otherwise.
    fn portmap_versions(&self) -> Vec<u32> {
        let (low, high) = self.versions();
        (low..=high).collect()
    }
    /// The most bytes of results a call can produce, before it runs, from
    /// its procedure and (raw) arguments: knfsd's `pc_xdrressize`, with the
    /// count a READ or READDIR asks for. The transport reserves this much
    /// of its memory budget before the call runs, so it must never be less
    /// than what `call` writes; arguments that do not decode may give any
    /// value (the call answers GARBAGE_ARGS).
    fn reply_bytes_max(&self, _vers: u32, _proc: u32, _args: Bytes) -> usize {
        REPLY_RESULTS_BYTES_DEFAULT
    }
    /// Decodes the arguments and writes the results after the success
    /// header already in `reply`. On error, `reply` is discarded.
    fn call(&self, ctx: &CallContext, args: &mut Decoder, reply: &mut Encoder) -> Result<(), AcceptError>;
}

/// The programs a dispatcher serves, each version of a program by one of
/// them: a program number may have several (NFS's version 3 and version
/// 4 are two programs with one number).
pub struct Dispatcher {
    programs: Vec<Arc<dyn RpcProgram>>,
    cache: ReplyCache,
    /// RPCSEC_GSS, if the server has a key: without one, an RPCSEC_GSS
    /// credential is a flavor not served (AUTH_BADCRED).
    gss: Option<Arc<GssServer>>,
    /// Where replies to the calls sent back on connections go; without
    /// one they are dropped.
    replies: Option<Arc<ReplyRouter>>,
    /// Told when a connection closes.
    watchers: Vec<Arc<dyn ConnectionWatcher>>,
}

/// Two programs given to one [`Dispatcher`] serve the same version of a
/// program: which one a call reaches would be an accident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("version {version} of RPC program {program} is served by two programs")]
pub struct VersionServedTwice {
    pub program: u32,
    pub version: u32,
}

/// The reply message to one call, as segments ready for `writev` (and a
/// spliced payload, such as a READ's pipe of file data, which the
/// transport knows how to write). The transport frames it: a record mark
/// before it on TCP ([`crate::record::record_mark`]), nothing on UDP.
pub type ReplySegments = Vec<Segment>;

impl Dispatcher {
    /// Serves `programs`, which must not share a version of a program.
    pub fn new(programs: Vec<Arc<dyn RpcProgram>>, cache: ReplyCache) -> Result<Self, VersionServedTwice> {
        for (i, a) in programs.iter().enumerate() {
            let (a_low, a_high) = a.versions();
            for b in programs[i + 1..].iter().filter(|b| b.program() == a.program()) {
                let (b_low, b_high) = b.versions();
                if a_low <= b_high && b_low <= a_high {
                    return Err(VersionServedTwice { program: a.program(), version: a_low.max(b_low) });
                }
            }
        }
        Ok(Dispatcher { programs, cache, gss: None, replies: None, watchers: Vec::new() })
    }

    /// Also serves RPCSEC_GSS, with `gss`'s key and contexts.
    pub fn with_gss(mut self, gss: Arc<GssServer>) -> Self {
        self.gss = Some(gss);
        self
    }

    pub fn gss(&self) -> Option<&Arc<GssServer>> {
        self.gss.as_ref()
    }

    /// Gives the replies that come on connections to `router` (the calls
    /// the programs sent back registered there).
    pub fn with_reply_router(mut self, router: Arc<ReplyRouter>) -> Self {
        self.replies = Some(router);
        self
    }

    /// Tells `watcher` of every connection the transport closes.
    pub fn with_connection_watcher(mut self, watcher: Arc<dyn ConnectionWatcher>) -> Self {
        self.watchers.push(watcher);
        self
    }

    /// The transport closed connection `id`: the watchers are told.
    pub fn connection_closed(&self, id: ConnectionId) {
        for w in &self.watchers {
            w.connection_closed(id);
        }
    }

    /// The program serving version `vers` of program `prog`, or how the
    /// call is refused: PROG_UNAVAIL if no version of `prog` is served,
    /// else PROG_MISMATCH with the lowest and highest versions served.
    fn program(&self, prog: u32, vers: u32) -> Result<&dyn RpcProgram, AcceptStat> {
        let mut served: Option<(u32, u32)> = None;
        for program in self.programs.iter().filter(|p| p.program() == prog) {
            let (low, high) = program.versions();
            if (low..=high).contains(&vers) {
                return Ok(&**program);
            }
            served = Some(served.map_or((low, high), |(l, h)| (l.min(low), h.max(high))));
        }
        Err(served.map_or(AcceptStat::ProgUnavail, |(low, high)| AcceptStat::ProgMismatch { low, high }))
    }

    /// The most bytes the reply to `record` can take, record mark included,
    /// from its call header alone (nothing runs). A reply to a record that
    /// is not a call, or is refused before its program runs, is a header.
    pub fn reply_bytes_max(&self, record: &Bytes) -> usize {
        let mut dec = Decoder::new(record.clone());
        let results = match CallHeader::decode(&mut dec) {
            Ok(h) if h.rpc_version == RPC_VERSION => match self.program(h.prog, h.vers) {
                Ok(p) if h.cred.flavor == RPCSEC_GSS => GSS_REPLY_BYTES_MAX + gss_results_bytes_max(p, &h, dec.rest()),
                Ok(p) => p.reply_bytes_max(h.vers, h.proc_, dec.rest()),
                Err(_) => 0,
            },
            _ => 0,
        };
        REPLY_HEADER_BYTES_MAX + results
    }

    /// Handles one call record that came as a datagram. `None` means no
    /// reply is due: the record was not a call, it retransmits a call
    /// still being executed, or its procedure answers nothing
    /// ([`RpcProgram::answers`]).
    pub fn handle(&self, record: Bytes, peer: SocketAddr, local: SocketAddr) -> Option<ReplySegments> {
        self.handle_call(record, peer, local, None)
    }

    /// [`Dispatcher::handle`] for a call record that came on `connection`.
    pub fn handle_on_connection(
        &self,
        record: Bytes,
        peer: SocketAddr,
        local: SocketAddr,
        connection: &CallConnection,
    ) -> Option<ReplySegments> {
        self.handle_call(record, peer, local, Some(connection))
    }

    /// Takes `record` if it is a reply (to a call sent back on
    /// `connection`): routed to its call's waiter, and true. The transport
    /// calls this on its read path, before it reads the connection's next
    /// record, so that what a reply tells (NFSv4.1's backchannel is up) is
    /// known before the client's next call runs; a reply takes no call
    /// slot.
    pub fn take_reply(&self, record: &Bytes, connection: &CallConnection) -> bool {
        if !is_reply(record) {
            return false;
        }
        self.route_reply(Some(connection.id()), record.clone());
        true
    }

    fn route_reply(&self, connection: Option<ConnectionId>, record: Bytes) {
        match &self.replies {
            Some(router) => {
                router.route(connection, record, std::time::Instant::now());
            }
            None => tracing::debug!(?connection, "a reply, and no calls sent back; dropped"),
        }
    }

    fn handle_call(
        &self,
        record: Bytes,
        peer: SocketAddr,
        local: SocketAddr,
        connection: Option<&CallConnection>,
    ) -> Option<ReplySegments> {
        let mut dec = Decoder::new(record.clone());
        let header = match CallHeader::decode(&mut dec) {
            Ok(h) => h,
            Err(CallHeaderError::NotACall { .. }) if self.replies.is_some() && is_reply(&record) => {
                self.route_reply(connection.map(CallConnection::id), record);
                return None;
            }
            Err(CallHeaderError::NoXid) | Err(CallHeaderError::NotACall { .. }) => {
                tracing::debug!(%peer, "record is not an RPC call; dropped");
                return None;
            }
            Err(CallHeaderError::Garbage { xid, error }) => {
                tracing::debug!(%peer, xid, %error, "malformed call header");
                return Some(status_reply(xid, ReplyStat::Accepted(AcceptStat::GarbageArgs)));
            }
        };
        let xid = header.xid;
        if header.rpc_version != RPC_VERSION {
            let stat = RejectStat::RpcMismatch { low: RPC_VERSION, high: RPC_VERSION };
            return Some(status_reply(xid, ReplyStat::Denied(stat)));
        }
        let denied = |stat| Some(status_reply(xid, ReplyStat::Denied(RejectStat::AuthError(stat))));
        let mut gss_call = None;
        let cred = match (&self.gss, header.cred.flavor) {
            (Some(gss), RPCSEC_GSS) => match gss.accept(&header, dec.buffer(), dec.rest(), peer) {
                GssVerdict::Reply(reply) => return Some(reply),
                GssVerdict::Drop => return None,
                GssVerdict::Deny(stat) => {
                    tracing::debug!(%peer, ?stat, "RPCSEC_GSS credential refused");
                    return denied(stat);
                }
                GssVerdict::GarbageArgs(verf) => return Some(verified_reply(xid, &verf, AcceptStat::GarbageArgs)),
                GssVerdict::Data(call) => {
                    dec = Decoder::new(call.args.clone());
                    let cred = call.credential.clone();
                    gss_call = Some(call);
                    cred
                }
            },
            _ => match Credential::from_call(&header) {
                Ok(cred) => cred,
                Err(stat) => {
                    tracing::debug!(%peer, flavor = header.cred.flavor, ?stat, "credential refused");
                    return denied(stat);
                }
            },
        };
        let verf = cred.reply_verifier();
        let program = match self.program(header.prog, header.vers) {
            Ok(program) => program,
            Err(refused) => return Some(verified_reply(xid, &verf, refused)),
        };

        let mut in_cache = None;
        if program.is_cached(header.vers, header.proc_) {
            let key = DrcKey {
                peer,
                xid,
                prog: header.prog,
                vers: header.vers,
                proc_: header.proc_,
                args_checksum: DrcKey::args_checksum(&dec.rest()),
                caller: cred.cache_identity(gss_call.as_ref().map(GssCall::context_handle)),
            };
            match self.cache.begin(&key) {
                CacheLookup::New => in_cache = Some(PendingEntry { cache: &self.cache, key: Some(key) }),
                CacheLookup::InProgress => return None,
                CacheLookup::Replay(reply) => {
                    tracing::debug!(%peer, xid, proc = header.proc_, "replayed from the duplicate reply cache");
                    return match &gss_call {
                        // Cached in the clear; sealed again for this call's
                        // sequence number (see `sealed_reply`).
                        Some(call) => sealed_reply(xid, &verf, call, &reply.concat()),
                        None => Some(reply.into_iter().map(Segment::Bytes).collect()),
                    };
                }
            }
        }

        let ctx = CallContext {
            xid,
            vers: header.vers,
            proc_: header.proc_,
            cred: &cred,
            peer,
            local,
            connection,
            report: CallReport::default(),
        };
        if let Some(call) = &gss_call {
            return self.run_gss(program, &ctx, call, &mut dec, &verf, in_cache);
        }
        let mut reply = Encoder::with_capacity(256);
        encode_reply_header_with(&mut reply, xid, &verf, ReplyStat::Accepted(AcceptStat::Success));
        let segments = match program.call(&ctx, &mut dec, &mut reply) {
            Ok(()) if !program.answers(header.vers, header.proc_) => return None,
            Ok(()) => reply.finish(),
            // Nothing cached either (`in_cache` is abandoned): a
            // retransmission runs the call again.
            Err(AcceptError::Drop) => return None,
            Err(AcceptError::TooWeak) => return too_weak(xid),
            Err(e) => verified_reply(xid, &verf, refusal(e)),
        };
        if let Some(mut pending) = in_cache {
            // A spliced payload can be sent once only: such a reply is not
            // cached (dropping `pending` abandons the entry). The cached
            // procedures are the non-idempotent ones, whose replies are
            // small and never carry one.
            let bytes: Option<Vec<Bytes>> = segments.iter().map(|s| s.as_bytes().cloned()).collect();
            if let Some(bytes) = bytes {
                pending.complete(bytes);
            }
        }
        Some(segments)
    }

    /// Runs an RPCSEC_GSS data call: its results are sealed for its
    /// service, and the reply cache holds them in the clear, behind their
    /// accept status ([`sealed_reply`] seals a replay anew). The key
    /// holds the context, so only a retransmission on the same context
    /// (the same principal) is answered from it; a reply journal records
    /// the clear bytes too, but a peer that takes over has no context and
    /// answers such a retransmission CREDPROBLEM before its cache is
    /// consulted.
    fn run_gss(
        &self,
        program: &dyn RpcProgram,
        ctx: &CallContext,
        call: &GssCall,
        args: &mut Decoder,
        verf: &OpaqueAuth,
        in_cache: Option<PendingEntry>,
    ) -> Option<ReplySegments> {
        let mut clear = Encoder::with_capacity(256);
        clear.u32(ACCEPT_SUCCESS);
        let outcome = program.call(ctx, args, &mut clear);
        let clear = match outcome {
            Ok(()) if !program.answers(ctx.vers, ctx.proc_) => return None,
            Err(AcceptError::Drop) => return None,
            Err(AcceptError::TooWeak) => return too_weak(ctx.xid),
            Ok(()) if call.service() == GssService::None => {
                // Nothing to seal: the results go as they are (a READ's
                // spliced data too).
                let mut reply = Encoder::with_capacity(64);
                encode_reply_header_with(&mut reply, ctx.xid, verf, ReplyStat::Accepted(AcceptStat::Success));
                let mut segments = reply.finish();
                let results = clear.finish();
                if let Some(mut pending) = in_cache {
                    let bytes: Option<Vec<Bytes>> = results.iter().map(|s| s.as_bytes().cloned()).collect();
                    if let Some(bytes) = bytes {
                        pending.complete(bytes);
                    }
                }
                let mut results = results.into_iter();
                // The accept status was written with the results; the
                // header above has it already.
                let first = results.next().and_then(|s| s.as_bytes().cloned()).unwrap_or_default();
                segments.push(Segment::Bytes(first.slice(4.min(first.len())..)));
                segments.extend(results);
                return Some(segments);
            }
            // Not kept (a READ's results): sealed where they are written.
            Ok(()) if in_cache.is_none() => return Some(sealed_results_reply(ctx.xid, verf, call, clear.finish())),
            Ok(()) => match in_memory(clear.finish()) {
                Some(bytes) => bytes,
                None => status_body(AcceptStat::SystemErr),
            },
            Err(e) => status_body(refusal(e)),
        };
        if let Some(mut pending) = in_cache {
            pending.complete(vec![clear.clone()]);
        }
        sealed_reply(ctx.xid, verf, call, &clear)
    }

    pub fn reply_cache(&self) -> &ReplyCache {
        &self.cache
    }
}

/// A reply cache entry that is abandoned unless completed, so a handler
/// that panics does not leave its call "in progress" forever.
struct PendingEntry<'a> {
    cache: &'a ReplyCache,
    key: Option<DrcKey>,
}

impl PendingEntry<'_> {
    fn complete(&mut self, reply: Vec<Bytes>) {
        if let Some(key) = self.key.take() {
            self.cache.complete(&key, reply);
        }
    }
}

impl Drop for PendingEntry<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.cache.abandon(&key);
        }
    }
}

/// What RPCSEC_GSS adds to a reply, at most: the verifier's MIC and the
/// sealing of the results (a Kerberos MIC or wrap token's header,
/// checksum and padding; an INIT reply's token is counted in its results
/// below).
const GSS_REPLY_BYTES_MAX: usize = 512;
/// Results of a call whose arguments are encrypted, which cannot be read
/// before the call is accepted: the most any procedure answers (a 1 MiB
/// READ and its attributes, within the transport's record limit).
const GSS_PRIVACY_RESULTS_BYTES_MAX: usize = (1 << 20) + (64 << 10);

/// [`RpcProgram::reply_bytes_max`] for a call with an RPCSEC_GSS
/// credential: its arguments read through their integrity body (not
/// verified: this only sizes the reply), the worst case for an encrypted
/// body, and an establishment token's reply for a context call.
fn gss_results_bytes_max(program: &dyn RpcProgram, header: &CallHeader, args: Bytes) -> usize {
    use crate::gss::wire::{GssCred, GssProc, INIT_TOKEN_BYTES_MAX, IntegData};
    let Ok(cred) = GssCred::decode(header.cred.body.clone()) else { return 0 };
    match (cred.proc_, cred.service) {
        (GssProc::Init | GssProc::ContinueInit, _) => INIT_TOKEN_BYTES_MAX + 64,
        (GssProc::Destroy, _) => 0,
        (GssProc::Data, GssService::None) => program.reply_bytes_max(header.vers, header.proc_, args),
        (GssProc::Data, GssService::Integrity) => {
            let len = args.len();
            let clear = IntegData::decode(args, len).map(|i| i.databody.slice(4.min(i.databody.len())..));
            program.reply_bytes_max(header.vers, header.proc_, clear.unwrap_or_default())
        }
        (GssProc::Data, GssService::Privacy) => GSS_PRIVACY_RESULTS_BYTES_MAX,
    }
}

/// accept_stat SUCCESS on the wire.
const ACCEPT_SUCCESS: u32 = 0;

/// The accept status a program's refusal answers with.
fn refusal(e: AcceptError) -> AcceptStat {
    match e {
        AcceptError::ProcUnavail => AcceptStat::ProcUnavail,
        AcceptError::GarbageArgs => AcceptStat::GarbageArgs,
        AcceptError::SystemErr | AcceptError::Drop | AcceptError::TooWeak => AcceptStat::SystemErr,
    }
}

/// The denial of a call whose flavor is too weak for its export.
fn too_weak(xid: u32) -> Option<ReplySegments> {
    Some(status_reply(xid, ReplyStat::Denied(RejectStat::AuthError(AuthStat::TooWeak))))
}

/// An accept status with no results, as [`Dispatcher::run_gss`] keeps a
/// reply in the clear.
fn status_body(stat: AcceptStat) -> Bytes {
    let mut enc = Encoder::with_capacity(4);
    enc.u32(match stat {
        AcceptStat::Success => ACCEPT_SUCCESS,
        AcceptStat::ProcUnavail => 3,
        AcceptStat::GarbageArgs => 4,
        _ => 5,
    });
    enc.into_bytes()
}

/// Results in one buffer, a spliced READ's pipe read into memory: what
/// GSS-API checksums or encrypts. `None` if a payload cannot be read.
fn in_memory(segments: Vec<Segment>) -> Option<Bytes> {
    let mut out = Vec::with_capacity(segments.iter().map(Segment::len).sum());
    for segment in segments {
        match segment {
            Segment::Bytes(b) => out.extend_from_slice(&b),
            Segment::Spliced(mut s) => {
                let pipe = s.downcast_mut::<FilePipe>()?;
                match pipe.read_to_bytes() {
                    Ok(b) => out.extend_from_slice(&b),
                    Err(error) => {
                        tracing::warn!(%error, "READ data could not be read from its pipe to be sealed");
                        return None;
                    }
                }
            }
        }
    }
    Some(Bytes::from(out))
}

/// The reply to an RPCSEC_GSS data call from its accept status and
/// results in the clear (`clear`): the header with the call's verifier
/// (the MIC of its sequence number), then the results sealed for its
/// service with its sequence number. A replay from the reply cache goes
/// through here too, so it carries the retransmission's own sequence
/// number: a client bumps the number with each retransmission (RFC 2203
/// section 5.3.3.1), and a reply sealed for the first would be refused.
fn sealed_reply(xid: u32, verf: &OpaqueAuth, call: &GssCall, clear: &[u8]) -> Option<ReplySegments> {
    let (stat, results) = clear.split_at_checked(4)?;
    let stat = match u32::from_be_bytes(stat.try_into().ok()?) {
        ACCEPT_SUCCESS => AcceptStat::Success,
        3 => AcceptStat::ProcUnavail,
        4 => AcceptStat::GarbageArgs,
        _ => AcceptStat::SystemErr,
    };
    if stat != AcceptStat::Success {
        return Some(verified_reply(xid, verf, stat));
    }
    let Some(sealed) = call.wrap_results(results) else {
        return Some(verified_reply(xid, verf, AcceptStat::SystemErr));
    };
    let mut reply = Encoder::with_capacity(64);
    encode_reply_header_with(&mut reply, xid, verf, ReplyStat::Accepted(AcceptStat::Success));
    reply.raw_segments([Segment::Bytes(sealed)]);
    Some(reply.finish())
}

/// The reply to an RPCSEC_GSS data call whose procedure succeeded with
/// `clear` (its accept status, then its results, a spliced READ's data
/// among them): as [`sealed_reply`], but each segment is written once,
/// into the buffer the sealed body is sent from.
fn sealed_results_reply(xid: u32, verf: &OpaqueAuth, call: &GssCall, clear: Vec<Segment>) -> ReplySegments {
    let results_len = clear.iter().map(Segment::len).sum::<usize>().saturating_sub(4);
    let mut stat = 4;
    let sealed = call.seal_results(results_len, |out| {
        for segment in clear {
            match segment {
                Segment::Bytes(b) => {
                    // The accept status heads the first segments.
                    let skip = stat.min(b.len());
                    stat -= skip;
                    out.extend_from_slice(&b[skip..]);
                }
                Segment::Spliced(mut s) => {
                    let pipe = s.downcast_mut::<FilePipe>()?;
                    if let Err(error) = pipe.append_to(out) {
                        tracing::warn!(%error, "READ data could not be read from its pipe to be sealed");
                        return None;
                    }
                }
            }
        }
        Some(())
    });
    let Some(sealed) = sealed else {
        return verified_reply(xid, verf, AcceptStat::SystemErr);
    };
    let mut reply = Encoder::with_capacity(64);
    encode_reply_header_with(&mut reply, xid, verf, ReplyStat::Accepted(AcceptStat::Success));
    reply.raw_segments([Segment::Bytes(sealed)]);
    reply.finish()
}

/// Whether `record` is a reply message (its second word is REPLY).
fn is_reply(record: &Bytes) -> bool {
    record.get(4..8).is_some_and(|w| w == crate::msg::MSG_REPLY.to_be_bytes())
}

/// A reply carrying only a status, e.g. SYSTEM_ERR for a call whose
/// handler failed outside the protocol, with an AUTH_NONE verifier.
pub fn status_reply(xid: u32, stat: ReplyStat) -> ReplySegments {
    let mut enc = Encoder::with_capacity(64);
    encode_reply_header(&mut enc, xid, stat);
    enc.finish()
}

/// An accepted reply carrying only a status, with the caller's verifier.
fn verified_reply(xid: u32, verf: &OpaqueAuth, stat: AcceptStat) -> ReplySegments {
    let mut enc = Encoder::with_capacity(64);
    encode_reply_header_with(&mut enc, xid, verf, ReplyStat::Accepted(stat));
    enc.finish()
}

#[cfg(test)]
mod tests;

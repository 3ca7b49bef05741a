//! From one call record to one reply: header checks, credentials, program
//! and version lookup, the duplicate reply cache, then the program itself.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use keel_xdr::{Decoder, Encoder, Segment};

use crate::connection::CallConnection;
use crate::cred::Credential;
use crate::drc::{CacheLookup, DrcKey, ReplyCache};
use crate::msg::{
    AcceptStat, CallHeader, CallHeaderError, OpaqueAuth, RPC_VERSION, RejectStat, ReplyStat, encode_reply_header,
    encode_reply_header_with,
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
    /// Where replies to the calls sent back on connections go; without
    /// one they are dropped.
    replies: Option<Arc<ReplyRouter>>,
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
        Ok(Dispatcher { programs, cache, replies: None })
    }

    /// Gives the replies that come on connections to `router` (the calls
    /// the programs sent back registered there).
    pub fn with_reply_router(mut self, router: Arc<ReplyRouter>) -> Self {
        self.replies = Some(router);
        self
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
            Ok(h) if h.rpc_version == RPC_VERSION => {
                self.program(h.prog, h.vers).map_or(0, |p| p.reply_bytes_max(h.vers, h.proc_, dec.rest()))
            }
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
                let router = self.replies.as_ref().expect("checked");
                router.route(connection.map(CallConnection::id), record, std::time::Instant::now());
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
        let cred = match Credential::from_call(&header) {
            Ok(cred) => cred,
            Err(stat) => {
                tracing::debug!(%peer, flavor = header.cred.flavor, ?stat, "credential refused");
                return Some(status_reply(xid, ReplyStat::Denied(RejectStat::AuthError(stat))));
            }
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
            };
            match self.cache.begin(&key) {
                CacheLookup::New => in_cache = Some(PendingEntry { cache: &self.cache, key: Some(key) }),
                CacheLookup::InProgress => return None,
                CacheLookup::Replay(reply) => {
                    tracing::debug!(%peer, xid, proc = header.proc_, "replayed from the duplicate reply cache");
                    return Some(reply.into_iter().map(Segment::Bytes).collect());
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
        let mut reply = Encoder::with_capacity(256);
        encode_reply_header_with(&mut reply, xid, &verf, ReplyStat::Accepted(AcceptStat::Success));
        let segments = match program.call(&ctx, &mut dec, &mut reply) {
            Ok(()) if !program.answers(header.vers, header.proc_) => return None,
            Ok(()) => reply.finish(),
            // Nothing cached either (`in_cache` is abandoned): a
            // retransmission runs the call again.
            Err(AcceptError::Drop) => return None,
            Err(e) => {
                let stat = match e {
                    AcceptError::ProcUnavail => AcceptStat::ProcUnavail,
                    AcceptError::GarbageArgs => AcceptStat::GarbageArgs,
                    AcceptError::SystemErr | AcceptError::Drop => AcceptStat::SystemErr,
                };
                verified_reply(xid, &verf, stat)
            }
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

//! One COMPOUND (RFC 8881 sections 2.10.6, 15.2, 16.2): the context every
//! operation's handler is given ([`Compound`]), and the loop that runs the
//! operations under the rules of sessions.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use keel_exports::{Admitted, ClientOptions, PseudoError, PseudoFs, PseudoNodeId, SecFlavor, SecFlavors};
use keel_nfs4_proto::{
    Compound4ArgsHead, Compound4ResEncoder, CompoundOps, Nfs4Result, NfsArgop4, NfsResop4, Nfsstat4, OpNum,
    ReadPlusContent,
};
use keel_nfs4_state::{
    Caller as StateCaller, ConnId, CurrentStateid, Principal, Replay, SequenceStart, SlotGrant, SlotReply,
};
use keel_rpc::{CallContext, Handled};
use keel_store::{Caller as _, Cred, Store};
use keel_xdr::{Decode, Decoder, Encode, Encoder, Spliced};

use crate::errno::{admit_status, pseudo_status};
use crate::ops::{self, OpFlags};
use crate::program::{Nfs4Program, canonical_ip};

/// An object of an export as a COMPOUND holds it: admitted for this
/// client, with its options there and the identity it acts as there.
#[derive(Clone)]
pub struct ExportFh<O> {
    pub object: O,
    pub options: ClientOptions,
    /// The caller's identity after the export's squashing.
    pub cred: Cred,
}

impl<O: keel_store::Object> ExportFh<O> {
    pub fn handle(&self) -> &Bytes {
        self.object.handle()
    }

    /// NFS4ERR_ROFS unless the export is read-write for this client.
    pub fn writable(&self) -> Result<(), Nfsstat4> {
        self.options.writable().map_err(|e| admit_status(&e))
    }
}

/// A current or saved filehandle: a directory of the pseudo file system
/// or an object of an export.
#[derive(Clone)]
pub enum Filehandle<O> {
    Pseudo(PseudoNodeId),
    Export(ExportFh<O>),
}

/// The context of one COMPOUND, given to every operation's handler.
pub struct Compound<'a, S: Store> {
    pub program: &'a Nfs4Program<S>,
    pub ctx: &'a CallContext<'a>,
    /// The COMPOUND's minor version (1 or 2).
    pub minor: u32,
    /// One instant for the whole COMPOUND (leases, the state's clocks).
    pub now: Instant,
    pub current: Option<Filehandle<S::Object>>,
    pub saved: Option<Filehandle<S::Object>>,
    pub stateid: CurrentStateid,
    /// The slot SEQUENCE started this request on; `None` for a COMPOUND
    /// of one of the operations allowed alone.
    pub slot: Option<SlotGrant>,
    /// The caller as the state names it.
    pub principal: Principal,
    /// The position of the operation running, and how many the COMPOUND
    /// has.
    op_index: u32,
    op_count: u32,
    /// The largest reply allowed (the session's) and the reply's size so
    /// far.
    reply_limit: usize,
    reply_len: usize,
    pseudo: Option<Arc<PseudoFs>>,
    /// The identity assumed for store calls, and the one it was assumed
    /// for (each export squashes the caller its own way).
    acting: Option<S::Caller>,
    /// A READ's data in a pipe, which the reply sends as a spliced
    /// payload (the READ's result then carries `eof` and no bytes).
    pub(crate) spliced_read: Option<Spliced>,
}

impl<'a, S: Store> Compound<'a, S> {
    pub(crate) fn new(program: &'a Nfs4Program<S>, ctx: &'a CallContext<'a>, minor: u32, now: Instant) -> Self {
        Compound {
            program,
            ctx,
            minor,
            now,
            current: None,
            saved: None,
            stateid: CurrentStateid::new(),
            slot: None,
            principal: principal(ctx),
            op_index: 0,
            op_count: 0,
            reply_limit: program.reply_bytes_max,
            reply_len: 0,
            pseudo: None,
            acting: None,
            spliced_read: None,
        }
    }

    pub fn store(&self) -> &'a S {
        let program: &'a Nfs4Program<S> = self.program;
        program.store()
    }

    /// The connection the call came on, as the state names it. Calls that
    /// come without one (tests, datagrams) share one name.
    pub fn conn(&self) -> ConnId {
        ConnId(self.ctx.connection.map_or(u64::MAX, |c| c.id().get()))
    }

    /// The caller, for the state.
    pub fn caller(&self) -> StateCaller<'_> {
        StateCaller { addr: canonical_ip(self.ctx.peer.ip()), principal: &self.principal, conn: self.conn() }
    }

    /// The pseudo file system this client sees (built once per COMPOUND
    /// at most).
    pub fn pseudo(&mut self) -> Arc<PseudoFs> {
        match &self.pseudo {
            Some(fs) => fs.clone(),
            None => {
                let fs = self.program.pseudo_fs(self.ctx.peer, self.flavor());
                self.pseudo = Some(fs.clone());
                fs
            }
        }
    }

    /// The current filehandle, or NFS4ERR_NOFILEHANDLE.
    pub fn current(&self) -> Result<&Filehandle<S::Object>, Nfsstat4> {
        self.current.as_ref().ok_or(Nfsstat4::Nofilehandle)
    }

    /// The current filehandle when it is an export's object; `pseudo` is
    /// the status for a pseudo directory (NFS4ERR_ROFS for a change,
    /// NFS4ERR_ISDIR for I/O, ...).
    pub fn current_export(&self, pseudo: Nfsstat4) -> Result<ExportFh<S::Object>, Nfsstat4> {
        match self.current()? {
            Filehandle::Export(fh) => Ok(fh.clone()),
            Filehandle::Pseudo(_) => Err(pseudo),
        }
    }

    /// The object `handle` names, if its export admits this client (the
    /// same check as NFSv3's), or a pseudo directory of this client's.
    pub fn resolve(&mut self, handle: &Bytes) -> Result<Filehandle<S::Object>, Nfsstat4> {
        // No store's handle begins with the pseudo handles' mark: most
        // PUTFHs need no pseudo file system.
        if handle.first() != Some(&PSEUDO_FH_MARK) {
            return self.admit(handle).map(Filehandle::Export);
        }
        match self.pseudo().node_from_handle(handle) {
            Ok(node) => return Ok(Filehandle::Pseudo(node)),
            Err(PseudoError::NotPseudo) => {}
            Err(e) => return Err(pseudo_status(e)),
        }
        self.admit(handle).map(Filehandle::Export)
    }

    /// The export object `handle` names, admitted for this client.
    pub fn admit(&self, handle: &Bytes) -> Result<ExportFh<S::Object>, Nfsstat4> {
        let report = &self.ctx.report;
        let Admitted { object, options, cred } = self
            .program
            .exports
            .admit_handle(self.ctx.peer, handle, self.flavor(), self.ctx.cred.ids(), |id| report.set_export(id))
            .map_err(|e| admit_status(&e))?;
        Ok(ExportFh { object, options, cred })
    }

    /// The flavor the call came with, as exports name it.
    pub fn flavor(&self) -> SecFlavor {
        SecFlavor::of_call(self.ctx.cred.flavor())
    }

    /// The flavors `fh` may be used with, most preferred first: its
    /// export's for this client, or those of the exports a pseudo
    /// directory leads to.
    pub fn sec_of(&mut self, fh: &Filehandle<S::Object>) -> Result<SecFlavors, Nfsstat4> {
        match fh {
            Filehandle::Export(fh) => Ok(fh.options.sec),
            Filehandle::Pseudo(node) => self.pseudo().sec(*node).map_err(pseudo_status),
        }
    }

    /// NFS4ERR_WRONGSEC unless the call's flavor is one `fh` may be used
    /// with (RFC 8881 section 2.6.3.1).
    pub fn check_sec(&mut self, fh: &Filehandle<S::Object>) -> Result<(), Nfsstat4> {
        match self.sec_of(fh)?.accepts(self.flavor()) {
            true => Ok(()),
            false => Err(Nfsstat4::Wrongsec),
        }
    }

    /// [`Compound::check_sec`] of the current filehandle, if there is one.
    fn check_current_sec(&mut self) -> Result<(), Nfsstat4> {
        match self.current.clone() {
            Some(fh) => self.check_sec(&fh),
            None => Ok(()),
        }
    }

    /// Assumes the identity `fh`'s export gives the caller, for the store
    /// calls that follow.
    pub fn act(&mut self, fh: &ExportFh<S::Object>) -> Result<&S::Caller, Nfsstat4> {
        let who = match self.acting.take() {
            Some(who) if *who.cred() == fh.cred => who,
            // Another identity is given up before this one is assumed.
            other => {
                drop(other);
                self.store().act_as(&fh.cred).map_err(|e| crate::errno::status(&e))?
            }
        };
        Ok(self.acting.insert(who))
    }

    /// Whether the operation running is the COMPOUND's last.
    pub fn is_last_op(&self) -> bool {
        self.op_index + 1 == self.op_count
    }

    /// Whether the reply is kept in the slot's cache (it must then be
    /// bytes: no spliced payload).
    pub fn reply_cached(&self) -> bool {
        self.slot.as_ref().is_some_and(|g| g.cachethis)
    }

    /// Bytes the reply may still grow by (READ and READDIR clamp their
    /// counts to it).
    pub fn reply_room(&self) -> usize {
        self.reply_limit.saturating_sub(self.reply_len)
    }

    /// The status for a reply that would outgrow the session's limit.
    fn too_big(&self) -> Nfsstat4 {
        match &self.slot {
            Some(g) if g.cachethis => Nfsstat4::RepTooBigToCache,
            _ => Nfsstat4::RepTooBig,
        }
    }

    /// Ends the request on its slot (exactly once: also when the COMPOUND
    /// failed, and from `drop` if a handler panicked).
    fn sequence_done(&mut self, status: Nfsstat4, ops: u32, reply: &[u8]) {
        if let Some(grant) = self.slot.take() {
            let now = self.now;
            self.program.with_state(|s| s.sequence_done(&grant, SlotReply { status, ops, reply }, now));
        }
    }
}

impl<S: Store> Drop for Compound<'_, S> {
    fn drop(&mut self) {
        self.sequence_done(Nfsstat4::Serverfault, 1, &[]);
    }
}

/// The first byte of every pseudo handle (keel-exports' `pseudo`), and of
/// no store's handle (keel-store's `HANDLE_BYTES_MAX`).
const PSEUDO_FH_MARK: u8 = 0xff;

/// The state's principal for the call's credential.
fn principal(ctx: &CallContext) -> Principal {
    match ctx.cred.principal() {
        keel_rpc::Principal::Anonymous => Principal::None,
        keel_rpc::Principal::Sys { machine_name, uid } => {
            Principal::Sys { uid: *uid, machine: machine_name.to_vec().into_boxed_slice() }
        }
        keel_rpc::Principal::Gss { name, .. } => Principal::Gss { name: name.as_bytes().into() },
    }
}

/// Runs one COMPOUND call.
pub(crate) fn run<S: Store>(
    program: &Nfs4Program<S>,
    ctx: &CallContext,
    args: &mut Decoder,
    reply: &mut Encoder,
) -> Handled<Nfs4Program<S>> {
    let request_bytes = args.remaining();
    let head = Compound4ArgsHead::decode(args)?;
    if !program.minors.serves(head.minorversion) {
        // No operation is evaluated (RFC 8881 section 16.2.3).
        Nfsstat4::MinorVersMismatch.encode(reply);
        head.tag.encode(reply);
        reply.u32(0);
        return Ok(Some(Nfsstat4::MinorVersMismatch));
    }
    let now = Instant::now();
    program.reap_if_due_soon(now);
    // Replies the client sent before this call (its CB_NULL answered)
    // count for it.
    program.callbacks.before_compound(program, now);
    let mut c = Compound::new(program, ctx, head.minorversion, now);
    let mut ops = CompoundOps::new(&head);
    let mut out = Compound4ResEncoder::new(head.tag.clone());
    c.reply_len = out.len();
    while let Some(op) = ops.next_op(args) {
        let index = ops.index() - 1;
        let op = match op {
            Ok(op) => op,
            Err(e) => {
                out.push(&e.reply());
                break;
            }
        };
        let opnum = op.opnum();
        (c.op_index, c.op_count) = (index, head.numops);
        let started = Instant::now();
        let res = match op {
            NfsArgop4::Sequence(sargs) if index == 0 => {
                let shape = keel_nfs4_state::CompoundShape { ops: head.numops, request_bytes };
                let caller = c.caller();
                let minor = c.minor;
                let started = program.with_state(|s| {
                    let started = s.sequence(&caller, &sargs, shape, now);
                    if let Ok(SequenceStart::New(grant)) = &started {
                        s.minor_version_used(grant.clientid, minor);
                    }
                    started
                });
                match started {
                    Err(status) => NfsResop4::Sequence(Nfs4Result::Fail(status)),
                    Ok(SequenceStart::New(grant)) => {
                        c.reply_limit = c.reply_limit.min(grant.reply_bytes_max as usize);
                        let res = NfsResop4::Sequence(Nfs4Result::Ok(grant.resok.clone()));
                        c.slot = Some(grant);
                        res
                    }
                    Ok(SequenceStart::Replay(replay)) => {
                        return Ok(Some(replay_reply(replay, &mut ops, args, out, reply)));
                    }
                }
            }
            op => {
                let hook = crate::callback::BindHook::of(&op, c.slot.as_ref().map(|g| g.clientid));
                // The operation after this one, for a put-filehandle
                // operation's security check; ILLEGAL if it is not there
                // or unknown (knfsd's need_wrongsec_check).
                let next = match index + 1 < head.numops {
                    true => args.clone().u32().ok().and_then(OpNum::from_u32).unwrap_or(OpNum::Illegal),
                    false => OpNum::Illegal,
                };
                let res = run_op(&mut c, index, head.numops, op, next);
                if res.status() == Nfsstat4::Ok {
                    crate::callback::after_bind(&c, hook);
                }
                res
            }
        };
        let res = fit(&c, &out, res);
        if let Some(observer) = &program.observer {
            observer.op_done(opnum, res.status(), started.elapsed());
        }
        match (c.spliced_read.take(), &res) {
            (Some(data), NfsResop4::Read(Nfs4Result::Ok(r))) => out.push_read_spliced(r.eof, data),
            // READ_PLUS splices only a reply of one data segment.
            (Some(data), NfsResop4::ReadPlus(Nfs4Result::Ok(r)))
                if let [ReadPlusContent::Nfs4ContentData(d)] = r.rpr_contents.as_slice() =>
            {
                out.push_read_plus_spliced(r.rpr_eof, d.d_offset, data)
            }
            _ => out.push(&res),
        }
        c.reply_len = out.len();
        if res.status() != Nfsstat4::Ok {
            break;
        }
    }
    let status = out.status();
    let count = out.count();
    if status == Nfsstat4::Io
        && let Some(export) = ctx.report.export()
        && let Some(e) = program.exports.storage_failure(export)
    {
        // As NFSv3's calls (keel-nfs3): no reply, and the slot takes the
        // retransmission as new, so that the client neither sees the
        // error nor gets it replayed; it retransmits once the service
        // has moved (the new node's sessions send it to reclaim first).
        tracing::warn!(
            export, error = %e,
            "the export's storage fails: no reply to an NFSv4 COMPOUND, the client retransmits (to the node that takes over)"
        );
        if let Some(grant) = c.slot.take() {
            program.with_state(|s| s.sequence_abandoned(&grant, now));
        }
        return Err(keel_rpc::AcceptError::Drop);
    }
    if c.slot.as_ref().is_some_and(|g| g.cachethis) {
        let mut cached = Encoder::new();
        out.finish(&mut cached);
        let bytes = cached.into_bytes();
        c.sequence_done(status, count, &bytes);
        reply.raw(&bytes);
    } else {
        c.sequence_done(status, count, &[]);
        out.finish(reply);
    }
    // Recalls this COMPOUND caused, probes it asked for.
    program.callbacks.after_compound(program, now);
    Ok(Some(status))
}

/// One operation other than a first SEQUENCE: the ordering rules, the
/// table's flags, the security flavor of the filehandles it uses, then
/// its handler. `next` is the operation that follows it (ILLEGAL for
/// none).
fn run_op<S: Store>(c: &mut Compound<'_, S>, index: u32, numops: u32, op: NfsArgop4, next: OpNum) -> NfsResop4 {
    let opnum = op.opnum();
    if let NfsArgop4::Illegal(_) = op {
        return NfsResop4::Illegal(Nfsstat4::OpIllegal);
    }
    let entry = ops::entry::<S>(opnum);
    let flags = entry.map_or(OpFlags::NONE, |e| e.flags);
    // knfsd's nfs41_check_op_ordering.
    if index == 0 {
        if !flags.contains(OpFlags::FIRST_OK) {
            return NfsResop4::failed(opnum, Nfsstat4::OpNotInSession);
        }
        if numops != 1 {
            return NfsResop4::failed(opnum, Nfsstat4::NotOnlyOp);
        }
    } else if opnum == OpNum::Sequence {
        return NfsResop4::failed(opnum, Nfsstat4::SequencePos);
    }
    if opnum.is_v40_only() {
        return NfsResop4::failed(opnum, Nfsstat4::Notsupp);
    }
    if flags.contains(OpFlags::NEEDS_FH) && c.current.is_none() {
        return NfsResop4::failed(opnum, Nfsstat4::Nofilehandle);
    }
    let Some(handler) = entry.and_then(|e| e.handler) else {
        return NfsResop4::failed(opnum, Nfsstat4::Notsupp);
    };
    if let Err(status) = check_sec_before(c, opnum, flags) {
        return NfsResop4::failed(opnum, status);
    }
    let res = handler(c, op);
    if flags.contains(OpFlags::PUTFH_LIKE)
        && res.status() == Nfsstat4::Ok
        && next_uses_fh_sec::<S>(next)
        && let Err(status) = c.check_current_sec()
    {
        return NfsResop4::failed(opnum, status);
    }
    res
}

/// The flavor check of the filehandles an operation uses, before it runs
/// (RFC 8881 section 2.6.3.1): the current one, and the saved one for the
/// operations that use two. Put-filehandle operations, SAVEFH, LOOKUP,
/// LOOKUPP, SECINFO and SECINFO_NO_NAME check (or not) themselves.
fn check_sec_before<S: Store>(c: &mut Compound<'_, S>, opnum: OpNum, flags: OpFlags) -> Result<(), Nfsstat4> {
    if !flags.contains(OpFlags::NEEDS_FH) || flags.contains(OpFlags::OWN_SEC_CHECK) {
        return Ok(());
    }
    c.check_current_sec()?;
    if matches!(opnum, OpNum::Rename | OpNum::Link | OpNum::Copy)
        && let Some(saved) = c.saved.clone()
    {
        c.check_sec(&saved)?;
    }
    Ok(())
}

/// Whether a put-filehandle operation followed by `next` checks the new
/// current filehandle's flavor itself (RFC 8881 sections 2.6.3.1.1.1 to
/// 2.6.3.1.1.7): not when nothing that matters follows, nor before an
/// operation that answers NFS4ERR_WRONGSEC itself or never does
/// (another put-filehandle, SAVEFH, LOOKUP, LOOKUPP, OPEN, SECINFO,
/// SECINFO_NO_NAME).
fn next_uses_fh_sec<S: Store>(next: OpNum) -> bool {
    match ops::entry::<S>(next) {
        Some(e) => !e.flags.contains(OpFlags::HANDLES_WRONGSEC),
        None => false,
    }
}

/// The result, or the operation's failure if it would make the reply
/// larger than the session allows.
fn fit<S: Store>(c: &Compound<'_, S>, out: &Compound4ResEncoder, res: NfsResop4) -> NfsResop4 {
    let mut scratch = Encoder::new();
    res.encode(&mut scratch);
    if out.len() + scratch.len() <= c.reply_limit {
        return res;
    }
    NfsResop4::failed(res.opnum(), c.too_big())
}

/// The reply to a retransmission SEQUENCE found on its slot.
fn replay_reply(
    replay: Replay,
    ops: &mut CompoundOps,
    args: &mut Decoder,
    mut out: Compound4ResEncoder,
    reply: &mut Encoder,
) -> Nfsstat4 {
    match replay {
        Replay::Cached(bytes) => {
            reply.raw(&bytes);
            // The status is the first word of a COMPOUND4res.
            bytes.get(..4).map_or(Nfsstat4::Ok, |w| {
                Nfsstat4::decode(&mut Decoder::new(Bytes::copy_from_slice(w))).unwrap_or(Nfsstat4::Ok)
            })
        }
        Replay::SequenceOnly(resok) => {
            out.push(&NfsResop4::Sequence(Nfs4Result::Ok(resok)));
            let status = out.status();
            out.finish(reply);
            status
        }
        Replay::Uncached(resok) => {
            out.push(&NfsResop4::Sequence(Nfs4Result::Ok(resok)));
            let second = match ops.next_op(args) {
                Some(Ok(op)) => op.opnum(),
                Some(Err(keel_nfs4_proto::OpDecodeError::BadXdr { opnum, .. })) => opnum,
                _ => OpNum::Illegal,
            };
            out.push(&NfsResop4::failed(second, Nfsstat4::RetryUncachedRep));
            let status = out.status();
            out.finish(reply);
            status
        }
    }
}

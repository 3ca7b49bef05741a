//! The NFS version 3 program: the procedure table and the handlers, one
//! file per kind of procedure.

mod attr;
mod create;
mod dir;
mod io;
mod remove;

use std::cell::{Cell, OnceCell};
use std::sync::Arc;

use keel_exports::dir_changes::DirChange;
use keel_exports::{AdmitError, Admitted, ClientOptions, ExportTable, SecFlavor};
use keel_nfs3_proto::nfs3::{
    NFSPATH_MAX, NfsFh3, NfsResult, Nfsstat3, PostOpAttr, PreOpAttr, Read3Args, Readdir3Args, Readdirplus3Args, WccData,
};
use keel_nfs3_proto::{NFS_PROGRAM, NFS_V3};
use keel_rpc::CacheClass::{Cached, Uncached};
use keel_rpc::ReplyBytesMax::{Computed, Fixed};
use keel_rpc::{
    AcceptError, CallContext, Handled, Handlers, Procedure, ProcedureTable, REPLY_RESULTS_BYTES_DEFAULT, ReplyBytesMax,
    TabledProgram,
};
use keel_store::{Caller as _, Store};
use keel_xdr::{Decode, Decoder, Encode, Encoder, XdrError};

use crate::convert::{fattr, wcc_attr};
use crate::errno::{admit_status, status};

/// The NFSv3 program over a store. Static dispatch: the handlers are
/// generic over the store (keel-store's crate documentation gives the
/// measured cost of the alternative).
pub struct Nfs3Program<S: Store> {
    exports: Arc<ExportTable<S>>,
}

impl<S: Store> Nfs3Program<S> {
    pub fn new(exports: Arc<ExportTable<S>>) -> Self {
        Nfs3Program { exports }
    }
}

impl<S: Store> Handlers for Nfs3Program<S> {
    type Call<'a> = Request<'a, S>;
    type Status = Nfsstat3;

    fn status_code(status: Nfsstat3) -> u32 {
        status as u32
    }
}

/// Decodes `A`, runs the handler, encodes its result; the result's status
/// is the reply's.
fn run<S: Store, A: Decode, T: Encode, F: Encode>(
    r: &Request<S>,
    args: &mut Decoder,
    reply: &mut Encoder,
    f: impl FnOnce(&Request<S>, A) -> NfsResult<T, F>,
) -> Handled<Nfs3Program<S>> {
    let res = f(r, A::decode(args)?);
    reply.put(&res);
    Ok(Some(res.status()))
}

/// As [`run`], for the handlers that encode their results themselves (a
/// READ's data spliced from a pipe, READDIR's entries as they come).
fn run_encoding<S: Store, A: Decode>(
    r: &Request<S>,
    args: &mut Decoder,
    reply: &mut Encoder,
    f: impl FnOnce(&Request<S>, A, &mut Encoder) -> Nfsstat3,
) -> Handled<Nfs3Program<S>> {
    Ok(Some(f(r, A::decode(args)?, reply)))
}

/// READLINK's results: attributes and a path.
const READLINK_REPLY: usize = REPLY_RESULTS_BYTES_DEFAULT + NFSPATH_MAX;

impl<S: Store> TabledProgram for Nfs3Program<S> {
    const PROGRAM: u32 = NFS_PROGRAM;
    const VERSION: u32 = NFS_V3;

    /// The NFSv3 procedures (RFC 1813), knfsd's `nfsd_procedures3`. The
    /// cached ones are the non-idempotent ones, as knfsd's RC_REPLBUFF
    /// list, WRITE included (as knfsd caches it): a retransmitted WRITE
    /// executed again could overwrite what another client wrote in
    /// between. A reply is bounded as knfsd's `pc_xdrressize` bounds it:
    /// those that grow with what the call asks for by that, clamped as
    /// their handlers clamp it; the others by the default.
    #[rustfmt::skip]
    const PROCEDURES: ProcedureTable<Self> = ProcedureTable::new(&[
        Procedure::new(0, "NULL", Uncached, ReplyBytesMax::DEFAULT, |_, _, _| Ok(None)),
        Procedure::new(1, "GETATTR", Uncached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, attr::getattr)),
        Procedure::new(2, "SETATTR", Cached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, attr::setattr)),
        Procedure::new(3, "LOOKUP", Uncached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, dir::lookup)),
        Procedure::new(4, "ACCESS", Uncached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, attr::access)),
        Procedure::new(5, "READLINK", Uncached, Fixed(READLINK_REPLY), |r, a, e| run(r, a, e, attr::readlink)),
        Procedure::new(6, "READ", Uncached, Computed(read_reply_bytes_max), |r, a, e| run_encoding(r, a, e, io::read)),
        Procedure::new(7, "WRITE", Cached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, io::write)),
        Procedure::new(8, "CREATE", Cached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, create::create)),
        Procedure::new(9, "MKDIR", Cached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, create::mkdir)),
        Procedure::new(10, "SYMLINK", Cached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, create::symlink)),
        Procedure::new(11, "MKNOD", Cached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, create::mknod)),
        Procedure::new(12, "REMOVE", Cached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, remove::remove)),
        Procedure::new(13, "RMDIR", Cached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, remove::rmdir)),
        Procedure::new(14, "RENAME", Cached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, remove::rename)),
        Procedure::new(15, "LINK", Cached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, create::link)),
        Procedure::new(16, "READDIR", Uncached, Computed(readdir_reply_bytes_max),
            |r, a, e| run_encoding(r, a, e, dir::readdir)),
        Procedure::new(17, "READDIRPLUS", Uncached, Computed(readdirplus_reply_bytes_max),
            |r, a, e| run_encoding(r, a, e, dir::readdirplus)),
        Procedure::new(18, "FSSTAT", Uncached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, attr::fsstat)),
        Procedure::new(19, "FSINFO", Uncached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, attr::fsinfo)),
        Procedure::new(20, "PATHCONF", Uncached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, attr::pathconf)),
        Procedure::new(21, "COMMIT", Uncached, ReplyBytesMax::DEFAULT, |r, a, e| run(r, a, e, io::commit)),
    ]);

    fn run(&self, ctx: &CallContext, args: &mut Decoder, reply: &mut Encoder) -> Handled<Self> {
        let r = Request { exports: &self.exports, ctx, acting: OnceCell::new(), too_weak: Cell::new(false) };
        let status = Self::PROCEDURES.call(&r, ctx, args, reply)?;
        if r.too_weak.get() {
            return Err(AcceptError::TooWeak);
        }
        if status == Some(Nfsstat3::Io)
            && let Some(export) = ctx.report.export()
            && let Some(e) = self.exports.storage_failure(export)
        {
            let proc_ = Self::PROCEDURES.get(ctx.proc_).map_or("?", |p| p.name);
            tracing::warn!(
                export, proc = proc_, error = %e,
                "the export's storage fails: no reply, the client retransmits (to the node that takes over)"
            );
            return Err(AcceptError::Drop);
        }
        Ok(status)
    }
}

fn read_reply_bytes_max<S: Store>(_: &Nfs3Program<S>, args: &mut Decoder) -> Result<usize, XdrError> {
    Ok(io::read_reply_bytes_max(Read3Args::decode(args)?.count))
}

fn readdir_reply_bytes_max<S: Store>(_: &Nfs3Program<S>, args: &mut Decoder) -> Result<usize, XdrError> {
    Ok(dir::reply_bytes_max(Readdir3Args::decode(args)?.count))
}

fn readdirplus_reply_bytes_max<S: Store>(_: &Nfs3Program<S>, args: &mut Decoder) -> Result<usize, XdrError> {
    Ok(dir::reply_bytes_max(Readdirplus3Args::decode(args)?.maxcount))
}

/// Who is calling, after the export's rules applied: the identity the
/// call acts as, and the client's options on the export.
pub(crate) struct Caller<'r, C> {
    pub who: &'r C,
    pub opts: ClientOptions,
}

impl<C> Caller<'_, C> {
    /// ROFS unless the export is read-write for this client.
    pub fn writable(&self) -> Result<(), Nfsstat3> {
        self.opts.writable().map_err(|e| admit_status(&e))
    }
}

/// One call as the handlers see it.
pub struct Request<'a, S: Store> {
    exports: &'a ExportTable<S>,
    ctx: &'a CallContext<'a>,
    /// The caller's identity, assumed once for the whole call by
    /// [`Request::authorize`] and given up when the request is dropped
    /// (also when a handler panics).
    acting: OnceCell<S::Caller>,
    /// The call's flavor was refused by an export's `sec=`.
    too_weak: Cell<bool>,
}

impl<'a, S: Store> Request<'a, S> {
    fn store(&self) -> &S {
        &self.exports.store
    }

    /// NFS3ERR_JUKEBOX while an NFSv4.1 delegation on `obj` that the
    /// access conflicts with is being recalled (the client retries).
    fn delegations(&self, obj: &S::Object, access: keel_exports::delegations::GateAccess) -> Result<(), Nfsstat3> {
        self.exports.before_access(keel_store::Object::handle(obj), access).map_err(|_| Nfsstat3::Jukebox)
    }

    /// [`Request::delegations`] for the file `name` in `dir` names, if any
    /// (REMOVE, RENAME; a missing name is for the operation to report).
    fn delegations_of_name(&self, who: &S::Caller, dir: &S::Object, name: &[u8]) -> Result<(), Nfsstat3> {
        match self.store().lookup(who, dir, name) {
            Ok((obj, _)) => self.delegations(&obj, keel_exports::delegations::GateAccess::Write),
            Err(_) => Ok(()),
        }
    }

    /// The object `fh` names, if the export admits this client, with the
    /// client's options there and its squashed identity.
    /// A call whose flavor the export does not accept (`sec=`) is
    /// answered AUTH_TOOWEAK ([`Nfs3Program::run`]; RFC 2623 section 2.3).
    fn admit(&self, fh: &NfsFh3) -> Result<Admitted<S::Object>, Nfsstat3> {
        // The export is noted before the object is opened: an I/O error
        // there is the export's storage failing too (see `call`).
        let flavor = SecFlavor::of_call(self.ctx.cred.flavor());
        let ids = self.ctx.cred.ids();
        let admitted = self
            .exports
            .admit_handle_with_sec(self.ctx.peer, &fh.data, flavor, ids, |id| self.ctx.report.set_export(id));
        admitted.map_err(|e| {
            if matches!(e, AdmitError::WrongSecurity { .. }) {
                self.too_weak.set(true);
            }
            admit_status(&e)
        })
    }

    /// Resolves `fh` for this client and assumes the caller's (squashed)
    /// identity for the rest of the call.
    fn authorize(&self, fh: &NfsFh3) -> Result<(S::Object, Caller<'_, S::Caller>), Nfsstat3> {
        let Admitted { object, options, cred } = self.admit(fh)?;
        let who = match self.acting.get() {
            Some(who) if *who.cred() == cred => who,
            // Two handles whose exports squash the caller differently: no
            // procedure works across exports.
            Some(_) => return Err(Nfsstat3::Xdev),
            None => {
                let who = self.store().act_as(&cred).map_err(|e| status(&e))?;
                self.acting.get_or_init(|| who)
            }
        };
        Ok((object, Caller { who, opts: options }))
    }

    /// Resolves `fh` for this client, for procedures that only read
    /// attributes the server holds open (no identity needed).
    fn resolve(&self, fh: &NfsFh3) -> Result<S::Object, Nfsstat3> {
        Ok(self.admit(fh)?.object)
    }

    fn post(&self, obj: &S::Object) -> PostOpAttr {
        self.store().getattr(obj).ok().map(|a| fattr(&a))
    }

    /// The attributes of `obj` before a change of it starts, with the
    /// change's window: see [`Request::wcc`].
    fn pre(&self, obj: &S::Object) -> Pre<'a> {
        let change = self.exports.dir_changes().begin(obj);
        Pre { change, attrs: self.attrs_before(obj) }
    }

    fn attrs_before(&self, obj: &S::Object) -> PreOpAttr {
        self.store().getattr(obj).ok().map(|a| wcc_attr(&a))
    }

    /// The wcc data of a change: the attributes before it only if no other
    /// change of the object through this server overlapped it (RFC 1813:
    /// pre-op attributes are for a client to tell whether the change was
    /// its own alone; [`keel_exports::dir_changes`]).
    fn wcc(&self, pre: Pre<'a>, obj: &S::Object) -> WccData {
        let after = self.post(obj);
        let before = if pre.change.end() { pre.attrs } else { None };
        WccData { before, after }
    }

    /// The wcc data of a call that changed nothing of `obj`.
    fn wcc_unchanged(&self, obj: &S::Object) -> WccData {
        WccData { before: None, after: self.post(obj) }
    }
}

/// See [`Request::pre`].
struct Pre<'a> {
    change: DirChange<'a>,
    attrs: PreOpAttr,
}

fn fh(obj: &impl keel_store::Object) -> NfsFh3 {
    NfsFh3 { data: obj.handle().clone() }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use keel_nfs3_proto::nfs3::Nfs3Proc;
    use keel_store::sim::SimStore;

    use super::*;

    type Table = ProcedureTable<Nfs3Program<SimStore>>;
    const TABLE: Table = Nfs3Program::<SimStore>::PROCEDURES;

    #[test]
    fn every_procedure_of_rfc_1813_has_its_entry_under_its_name() {
        let expected: Vec<(u32, &str)> = Nfs3Proc::ALL.iter().map(|p| (*p as u32, p.name())).collect();
        assert_eq!(TABLE.names(), expected);
        assert_eq!(expected.len(), 22);
    }

    #[test]
    fn write_and_the_other_non_idempotent_procedures_are_cached() {
        use Nfs3Proc::*;
        for p in [Setattr, Write, Create, Mkdir, Symlink, Mknod, Remove, Rmdir, Rename, Link] {
            assert!(TABLE.is_cached(p as u32), "{} not cached", p.name());
        }
        for p in [Null, Getattr, Lookup, Access, Readlink, Read, Readdir, Readdirplus, Fsstat, Fsinfo, Pathconf, Commit]
        {
            assert!(!TABLE.is_cached(p as u32), "{} cached", p.name());
        }
        assert!(TABLE.procedures().iter().all(|p| p.answers), "every NFSv3 procedure answers");
    }

    #[test]
    fn the_table_bounds_each_reply_before_the_call_runs() {
        let store = Arc::new(SimStore::new(1));
        let program = Nfs3Program::new(Arc::new(ExportTable::new(store, vec![(1, Vec::new())])));
        let encoded = |args: &dyn Encode| {
            let mut enc = Encoder::new();
            args.encode(&mut enc);
            enc.into_bytes()
        };
        let read = encoded(&Read3Args { file: NfsFh3::default(), offset: 0, count: 4096 });
        assert_eq!(TABLE.reply_bytes_max(&program, Nfs3Proc::Read as u32, read), io::read_reply_bytes_max(4096));
        let readdir = encoded(&Readdir3Args { dir: NfsFh3::default(), cookie: 0, cookieverf: [0; 8], count: 9000 });
        assert_eq!(TABLE.reply_bytes_max(&program, Nfs3Proc::Readdir as u32, readdir), dir::reply_bytes_max(9000));
        let plus =
            Readdirplus3Args { dir: NfsFh3::default(), cookie: 0, cookieverf: [0; 8], dircount: 1, maxcount: 7000 };
        let plus = encoded(&plus);
        assert_eq!(TABLE.reply_bytes_max(&program, Nfs3Proc::Readdirplus as u32, plus), dir::reply_bytes_max(7000));
        assert_eq!(TABLE.reply_bytes_max(&program, Nfs3Proc::Readlink as u32, Bytes::new()), READLINK_REPLY);
        let garbage = Bytes::from_static(&[0, 0]);
        assert_eq!(TABLE.reply_bytes_max(&program, Nfs3Proc::Read as u32, garbage), REPLY_RESULTS_BYTES_DEFAULT);
        assert_eq!(TABLE.reply_bytes_max(&program, Nfs3Proc::Write as u32, Bytes::new()), REPLY_RESULTS_BYTES_DEFAULT);
    }

    #[test]
    fn read_and_readdir_bounds_follow_the_count_clamped_as_the_handlers_clamp_it() {
        assert!(io::read_reply_bytes_max(4096) >= 4096);
        assert!(io::read_reply_bytes_max(4096) < 4096 + 256);
        assert_eq!(io::read_reply_bytes_max(u32::MAX), io::read_reply_bytes_max(crate::IO_BYTES_MAX));
        assert!(dir::reply_bytes_max(0) > 0);
        assert_eq!(dir::reply_bytes_max(u32::MAX), dir::reply_bytes_max(crate::DIR_REPLY_BYTES_MAX));
    }
}

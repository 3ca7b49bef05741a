//! The NFS version 3 program: the procedure table and the handlers, one
//! file per kind of procedure.

mod attr;
mod create;
mod dir;
mod io;
mod remove;

use std::cell::OnceCell;
use std::sync::Arc;

use bytes::Bytes;
use keel_exports::{Admitted, ClientOptions, ExportTable};
use keel_nfs3_proto::nfs3::{
    NFSPATH_MAX, Nfs3Proc, NfsFh3, Nfsstat3, PostOpAttr, PreOpAttr, Read3Args, Readdir3Args, Readdirplus3Args, WccData,
};
use keel_nfs3_proto::{NFS_PROGRAM, NFS_V3};
use keel_rpc::{AcceptError, Auth, CallContext, REPLY_RESULTS_BYTES_DEFAULT, RpcProgram};
use keel_store::{Caller as _, Cred, Store};
use keel_xdr::{Decode, Decoder, Encode, Encoder};

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

/// Decodes `A`, runs the handler, encodes its result.
fn run<A: Decode, R: Encode>(
    args: &mut Decoder,
    reply: &mut Encoder,
    f: impl FnOnce(A) -> R,
) -> Result<(), AcceptError> {
    let a = A::decode(args)?;
    reply.put(&f(a));
    Ok(())
}

impl<S: Store> RpcProgram for Nfs3Program<S> {
    fn program(&self) -> u32 {
        NFS_PROGRAM
    }

    fn versions(&self) -> (u32, u32) {
        (NFS_V3, NFS_V3)
    }

    fn is_cached(&self, _vers: u32, proc_: u32) -> bool {
        is_cached(proc_)
    }

    /// knfsd's `pc_xdrressize`: the procedures whose results grow with
    /// what the call asks for are bounded by that, clamped as their
    /// handlers clamp it; the others fit the default.
    fn reply_bytes_max(&self, _vers: u32, proc_: u32, args: Bytes) -> usize {
        let mut args = Decoder::new(args);
        let asked = match Nfs3Proc::from_u32(proc_) {
            Some(Nfs3Proc::Read) => Read3Args::decode(&mut args).map(|a| io::read_reply_bytes_max(a.count)),
            Some(Nfs3Proc::Readdir) => Readdir3Args::decode(&mut args).map(|a| dir::reply_bytes_max(a.count)),
            Some(Nfs3Proc::Readdirplus) => {
                Readdirplus3Args::decode(&mut args).map(|a| dir::reply_bytes_max(a.maxcount))
            }
            Some(Nfs3Proc::Readlink) => Ok(REPLY_RESULTS_BYTES_DEFAULT + NFSPATH_MAX),
            _ => Ok(REPLY_RESULTS_BYTES_DEFAULT),
        };
        // Arguments that do not decode are answered GARBAGE_ARGS.
        asked.unwrap_or(REPLY_RESULTS_BYTES_DEFAULT)
    }

    fn call(&self, ctx: &CallContext, args: &mut Decoder, reply: &mut Encoder) -> Result<(), AcceptError> {
        let Some(proc_) = Nfs3Proc::from_u32(ctx.proc_) else { return Err(AcceptError::ProcUnavail) };
        let r = Request { exports: &self.exports, ctx, acting: OnceCell::new() };
        tracing::trace!(peer = %ctx.peer, xid = ctx.xid, "{}", proc_.name());
        let results_at = reply.len();
        let done = match proc_ {
            Nfs3Proc::Null => Ok(()),
            Nfs3Proc::Getattr => run(args, reply, |a| attr::getattr(&r, a)),
            Nfs3Proc::Setattr => run(args, reply, |a| attr::setattr(&r, a)),
            Nfs3Proc::Lookup => run(args, reply, |a| dir::lookup(&r, a)),
            Nfs3Proc::Access => run(args, reply, |a| attr::access(&r, a)),
            Nfs3Proc::Readlink => run(args, reply, |a| attr::readlink(&r, a)),
            Nfs3Proc::Read => {
                let a = Decode::decode(args)?;
                io::read(&r, a, reply);
                Ok(())
            }
            Nfs3Proc::Write => run(args, reply, |a| crate::report::write(ctx, io::write(&r, a))),
            Nfs3Proc::Create => run(args, reply, |a| create::create(&r, a)),
            Nfs3Proc::Mkdir => run(args, reply, |a| create::mkdir(&r, a)),
            Nfs3Proc::Symlink => run(args, reply, |a| create::symlink(&r, a)),
            Nfs3Proc::Mknod => run(args, reply, |a| create::mknod(&r, a)),
            Nfs3Proc::Remove => run(args, reply, |a| remove::remove(&r, a)),
            Nfs3Proc::Rmdir => run(args, reply, |a| remove::rmdir(&r, a)),
            Nfs3Proc::Rename => run(args, reply, |a| remove::rename(&r, a)),
            Nfs3Proc::Link => run(args, reply, |a| create::link(&r, a)),
            Nfs3Proc::Readdir => {
                let a = Decode::decode(args)?;
                dir::readdir(&r, a, reply);
                Ok(())
            }
            Nfs3Proc::Readdirplus => {
                let a = Decode::decode(args)?;
                dir::readdirplus(&r, a, reply);
                Ok(())
            }
            Nfs3Proc::Fsstat => run(args, reply, |a| attr::fsstat(&r, a)),
            Nfs3Proc::Fsinfo => run(args, reply, |a| attr::fsinfo(&r, a)),
            Nfs3Proc::Pathconf => run(args, reply, |a| attr::pathconf(&r, a)),
            Nfs3Proc::Commit => run(args, reply, |a| io::commit(&r, a)),
        };
        crate::report::status(ctx, proc_, reply, results_at);
        if ctx.report.status() == Some(Nfsstat3::Io as u32)
            && let Some(export) = ctx.report.export()
            && let Some(e) = self.exports.storage_failure(export)
        {
            tracing::warn!(
                export, proc = proc_.name(), error = %e,
                "the export's storage fails: no reply, the client retransmits (to the node that takes over)"
            );
            return Err(AcceptError::Drop);
        }
        done
    }
}

/// The procedures whose replies go into the duplicate reply cache: the
/// non-idempotent ones, as knfsd's RC_REPLBUFF list, WRITE included (as
/// knfsd caches it): a retransmitted WRITE executed again could overwrite
/// what another client wrote in between.
fn is_cached(proc_: u32) -> bool {
    use Nfs3Proc::*;
    matches!(
        Nfs3Proc::from_u32(proc_),
        Some(Setattr | Write | Create | Mkdir | Symlink | Mknod | Remove | Rmdir | Rename | Link)
    )
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

/// Who an RPC call says it comes from: AUTH_SYS's ids, or no one.
pub(crate) fn claimed(auth: &Auth) -> Option<Cred> {
    match auth {
        Auth::Sys(sys) => Some(Cred::new(sys.uid, sys.gid, &sys.gids)),
        Auth::None => None,
    }
}

/// One call as the handlers see it.
struct Request<'a, S: Store> {
    exports: &'a ExportTable<S>,
    ctx: &'a CallContext<'a>,
    /// The caller's identity, assumed once for the whole call by
    /// [`Request::authorize`] and given up when the request is dropped
    /// (also when a handler panics).
    acting: OnceCell<S::Caller>,
}

impl<S: Store> Request<'_, S> {
    fn store(&self) -> &S {
        &self.exports.store
    }

    /// The object `fh` names, if the export admits this client, with the
    /// client's options there and its squashed identity.
    fn admit(&self, fh: &NfsFh3) -> Result<Admitted<S::Object>, Nfsstat3> {
        // The export is noted before the object is opened: an I/O error
        // there is the export's storage failing too (see `call`).
        let claimed = claimed(self.ctx.auth);
        self.exports
            .admit_handle(self.ctx.peer, &fh.data, claimed.as_ref(), |id| self.ctx.report.set_export(id))
            .map_err(|e| admit_status(&e))
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

    fn pre(&self, obj: &S::Object) -> PreOpAttr {
        self.store().getattr(obj).ok().map(|a| wcc_attr(&a))
    }

    fn wcc(&self, before: PreOpAttr, obj: &S::Object) -> WccData {
        WccData { before, after: self.post(obj) }
    }
}

fn fh(obj: &impl keel_store::Object) -> NfsFh3 {
    NfsFh3 { data: obj.handle().clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_and_the_other_non_idempotent_procedures_are_cached() {
        use Nfs3Proc::*;
        for p in [Setattr, Write, Create, Mkdir, Symlink, Mknod, Remove, Rmdir, Rename, Link] {
            assert!(is_cached(p as u32), "{} not cached", p.name());
        }
        for p in [Null, Getattr, Lookup, Access, Readlink, Read, Readdir, Readdirplus, Fsstat, Fsinfo, Pathconf, Commit]
        {
            assert!(!is_cached(p as u32), "{} cached", p.name());
        }
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

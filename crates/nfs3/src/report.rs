//! What the NFS and MOUNT programs tell the statistics about each call
//! (through [`keel_rpc::CallReport`]): the status of the reply and the
//! bytes of file data moved. The export is reported where a handle (or
//! MNT's path) is authorized.

use keel_nfs3_proto::mount::Mountstat3;
use keel_nfs3_proto::nfs3::{Nfs3Proc, NfsResult, Write3ResOk};
use keel_rpc::CallContext;
use keel_xdr::Encoder;

/// Every NFSv3 reply but NULL's starts with its `nfsstat3`: read it back
/// from where the results begin.
pub(crate) fn status(ctx: &CallContext, proc_: Nfs3Proc, reply: &Encoder, results_at: usize) {
    if proc_ != Nfs3Proc::Null
        && let Some(status) = reply.u32_at(results_at)
    {
        ctx.report.set_status(status);
    }
}

/// MNT's reply carries a `mountstat3`: a refused mount counts as an
/// error of MNT, of the client and of the export (if it named one).
pub(crate) fn mount_status(ctx: &CallContext, status: Mountstat3) {
    ctx.report.set_status(status as u32);
}

/// A READ succeeded with `bytes` of data (in memory or in a pipe).
pub(crate) fn read(ctx: &CallContext, bytes: usize) {
    ctx.report.add_read_bytes(bytes as u64);
}

pub(crate) fn write<F>(ctx: &CallContext, res: NfsResult<Write3ResOk, F>) -> NfsResult<Write3ResOk, F> {
    if let NfsResult::Ok(ok) = &res {
        ctx.report.add_write_bytes(u64::from(ok.count));
    }
    res
}

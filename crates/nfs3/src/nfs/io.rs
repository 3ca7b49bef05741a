//! READ, WRITE, COMMIT.

use keel_exports::delegations::GateAccess;
use keel_nfs3_proto::nfs3::*;
use keel_store::{ReadData, Stability, Store};
use keel_xdr::{Encode, Encoder, Spliced};

use super::Request;
use crate::IO_BYTES_MAX;
use crate::convert::fattr;
use crate::errno::status;

/// Status, attributes, count, eof and the data's length and padding: a
/// READ reply around its data.
const READ_REPLY_FIXED_BYTES: usize = 4 + 4 + FATTR3_XDR_LEN + 4 + 4 + 4 + 3;

/// The largest reply to a READ of `count` bytes (clamped as `read` clamps it).
pub(super) fn read_reply_bytes_max(count: u32) -> usize {
    count.min(IO_BYTES_MAX) as usize + READ_REPLY_FIXED_BYTES
}

/// READ writes its reply itself: data in a pipe ([`ReadData::Pipe`]) is
/// encoded as a spliced payload, which the transport sends from the pipe;
/// the bytes on the wire are the same as `Read3ResOk`'s.
pub(super) fn read<S: Store>(r: &Request<S>, a: Read3Args, reply: &mut Encoder) -> Nfsstat3 {
    let fail = |reply: &mut Encoder, s: Nfsstat3, res: Read3ResFail| {
        reply.put(&Read3Res::Fail(s, res));
        s
    };
    let (inode, caller) = match r.authorize(&a.file) {
        Ok(x) => x,
        Err(s) => return fail(reply, s, Default::default()),
    };
    // A write delegation's holder may have written what the server has
    // not seen yet.
    if let Err(s) = r.delegations(&inode, GateAccess::Read) {
        return fail(reply, s, Read3ResFail { file_attributes: r.post(&inode) });
    }
    let count = a.count.min(IO_BYTES_MAX) as usize;
    let out = match r.store().read(caller.who, &inode, a.offset, count) {
        Ok(out) => out,
        Err(e) => return fail(reply, status(&e), Read3ResFail { file_attributes: r.post(&inode) }),
    };
    let len = out.data.len();
    r.ctx.report.add_read_bytes(len as u64);
    let file_attributes = Some(fattr(&out.attrs));
    match out.data {
        ReadData::Bytes(data) => {
            reply.put(&Read3Res::Ok(Read3ResOk { file_attributes, count: len as u32, eof: out.eof, data }))
        }
        ReadData::Pipe(pipe) => {
            Nfsstat3::Ok.encode(reply);
            file_attributes.encode(reply);
            reply.u32(len as u32);
            reply.bool(out.eof);
            reply.opaque_spliced(Spliced::new(len, pipe));
        }
    }
    Nfsstat3::Ok
}

/// On an `async` export nothing waits for the disk, and the reply claims
/// the stability the client asked for, exactly as knfsd does. A crash then
/// loses writes the client believes are safe: see README, "sync and async".
pub(super) fn write<S: Store>(r: &Request<S>, a: Write3Args) -> Write3Res {
    let (inode, caller) = match r.authorize(&a.file) {
        Ok(x) => x,
        Err(s) => return NfsResult::Fail(s, Default::default()),
    };
    if let Err(s) = caller.writable().and_then(|()| r.delegations(&inode, GateAccess::Write)) {
        return NfsResult::Fail(s, Write3ResFail { file_wcc: r.wcc_unchanged(&inode) });
    }
    let count = a.count as usize;
    if count > a.data.len() {
        return NfsResult::Fail(Nfsstat3::Inval, Write3ResFail { file_wcc: r.wcc_unchanged(&inode) });
    }
    let stability = match (caller.opts.sync, a.stable) {
        (false, _) | (true, StableHow::Unstable) => Stability::Unstable,
        (true, StableHow::DataSync) => Stability::DataSync,
        (true, StableHow::FileSync) => Stability::FileSync,
    };
    match r.store().write(caller.who, &inode, a.offset, &a.data[..count], stability) {
        Ok(out) => {
            r.ctx.report.add_write_bytes(count as u64);
            NfsResult::Ok(Write3ResOk {
                file_wcc: WccData {
                    before: Some(crate::convert::wcc_attr(&out.before)),
                    after: Some(fattr(&out.after)),
                },
                count: count as u32,
                committed: a.stable,
                verf: out.verifier,
            })
        }
        Err(e) => NfsResult::Fail(status(&e), Write3ResFail { file_wcc: r.wcc_unchanged(&inode) }),
    }
}

/// COMMIT flushes the whole file (like fsync; a range buys nothing once the
/// journal has to be forced anyway), for a caller who may write it. On an
/// `async` export it flushes nothing. The verifier is read after the flush,
/// so a flush that failed meanwhile (this one or anyone's) is seen.
pub(super) fn commit<S: Store>(r: &Request<S>, a: Commit3Args) -> Commit3Res {
    let (inode, caller) = match r.authorize(&a.file) {
        Ok(x) => x,
        Err(s) => return NfsResult::Fail(s, Default::default()),
    };
    let before = r.attrs_before(&inode);
    let done =
        caller.writable().and_then(|()| r.store().commit(caller.who, &inode, caller.opts.sync).map_err(|e| status(&e)));
    let file_wcc = WccData { before, after: r.post(&inode) };
    match done {
        Ok(verf) => NfsResult::Ok(Commit3ResOk { file_wcc, verf }),
        Err(s) => NfsResult::Fail(s, Commit3ResFail { file_wcc }),
    }
}

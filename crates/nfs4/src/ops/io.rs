//! File data (RFC 8881 sections 18.3, 18.22, 18.32): READ, WRITE, COMMIT,
//! with NFSv3's rules on stability and the write verifier, and the
//! stateid check every I/O makes.

use bytes::Bytes;
use keel_nfs4_proto::{
    Commit4Args, Commit4ResOk, Nfsstat4, Read4Args, Read4ResOk, StableHow4, Stateid4, Write4Args, Write4ResOk,
};
use keel_nfs4_state::{IoAccess, IoAuth};
use keel_store::{FileType, Object, ReadData, Stability, Store};
use keel_xdr::Spliced;

use crate::IO_BYTES_MAX;
use crate::compound::{Compound, ExportFh};
use crate::errno::status;

/// The stateid of a READ, WRITE or SETATTR of the size, checked against
/// the opens and share reservations on the file (keel-nfs4-state's
/// `check_io`).
pub(crate) fn check_stateid<S: Store>(
    c: &mut Compound<'_, S>,
    arg: &Stateid4,
    fh: &ExportFh<S::Object>,
    access: IoAccess,
) -> Result<IoAuth, Nfsstat4> {
    let client = c.slot.as_ref().map(|g| g.clientid).ok_or(Nfsstat4::OpNotInSession)?;
    let stateid = c.stateid.resolve(arg)?;
    let now = c.now;
    let file = fh.handle().clone();
    c.program.with_state(|s| s.check_io(client, &stateid, &file, access, now))
}

/// NFS4ERR_ISDIR for a directory, NFS4ERR_INVAL for anything else that is
/// not a regular file (knfsd's `nfs4_check_file`).
fn regular<O: Object>(fh: &ExportFh<O>) -> Result<(), Nfsstat4> {
    match fh.object.file_type() {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(Nfsstat4::Isdir),
        _ => Err(Nfsstat4::Inval),
    }
}

/// Bytes of a READ result around its data: operation number, status, eof,
/// the data's length and padding.
const READ_RESULT_FIXED_BYTES: usize = 4 + 4 + 4 + 4 + 3;

pub(super) fn read<S: Store>(c: &mut Compound<'_, S>, args: Read4Args) -> Result<Read4ResOk, Nfsstat4> {
    let (fh, count) = read_start(c, &args.stateid, args.count, READ_RESULT_FIXED_BYTES)?;
    let (eof, data) = read_data(c, &fh, args.offset, count, true)?;
    Ok(Read4ResOk { eof, data })
}

/// What READ and READ_PLUS check before they read: the current file, a
/// regular one, and the stateid; and the count, bounded by what the
/// server sends at once and by the session's reply size (less `fixed`
/// bytes of the result around the data).
pub(super) fn read_start<S: Store>(
    c: &mut Compound<'_, S>,
    stateid: &Stateid4,
    count: u32,
    fixed: usize,
) -> Result<(ExportFh<S::Object>, usize), Nfsstat4> {
    let fh = c.current_export(Nfsstat4::Isdir)?;
    regular(&fh)?;
    check_stateid(c, stateid, &fh, IoAccess::Read)?;
    let room = c.reply_room().saturating_sub(fixed);
    Ok((fh, (count.min(IO_BYTES_MAX) as usize).min(room)))
}

/// Reads `count` bytes at `offset`: whether that reached the end of the
/// file, and the data, or no bytes when the data goes to the socket from
/// its pipe (`c.spliced_read`), as NFSv3's READ sends it, unless the
/// reply is kept in the slot's cache or `splice` is false.
pub(super) fn read_data<S: Store>(
    c: &mut Compound<'_, S>,
    fh: &ExportFh<S::Object>,
    offset: u64,
    count: usize,
    splice: bool,
) -> Result<(bool, Bytes), Nfsstat4> {
    let store = c.store();
    let who = c.act(fh)?;
    let out = store.read(who, &fh.object, offset, count).map_err(|e| status(&e))?;
    c.ctx.report.add_read_bytes(out.data.len() as u64);
    match out.data {
        ReadData::Pipe(pipe) if splice && !c.reply_cached() => {
            c.spliced_read = Some(Spliced::new(pipe.len(), pipe));
            Ok((out.eof, Bytes::new()))
        }
        data => Ok((out.eof, data.into_bytes().map_err(|e| status(&e))?)),
    }
}

/// As NFSv3's WRITE: on an `async` export nothing waits for the disk and
/// the reply claims the stability asked for, as knfsd does (README, "sync
/// and async"); the verifier is the store's.
pub(super) fn write<S: Store>(c: &mut Compound<'_, S>, args: Write4Args) -> Result<Write4ResOk, Nfsstat4> {
    let fh = c.current_export(Nfsstat4::Isdir)?;
    regular(&fh)?;
    fh.writable()?;
    check_stateid(c, &args.stateid, &fh, IoAccess::Write)?;
    if args.data.len() > IO_BYTES_MAX as usize {
        return Err(Nfsstat4::Inval);
    }
    let stability = match (fh.options.sync, args.stable) {
        (false, _) | (true, StableHow4::Unstable4) => Stability::Unstable,
        (true, StableHow4::DataSync4) => Stability::DataSync,
        (true, StableHow4::FileSync4) => Stability::FileSync,
    };
    let store = c.store();
    let (program, now, client) = (c.program, c.now, c.slot.as_ref().map(|g| g.clientid));
    let who = c.act(&fh)?;
    let write = || store.write(who, &fh.object, args.offset, &args.data, stability);
    let out = match write() {
        Err(e) if crate::deleg::is_eagain(&e) => {
            let own = client.is_some_and(|id| crate::deleg::release_own_lease(program, id, fh.handle(), now));
            if own { write() } else { Err(e) }
        }
        r => r,
    }
    .map_err(|e| status(&e))?;
    c.ctx.report.add_write_bytes(args.data.len() as u64);
    Ok(Write4ResOk { count: args.data.len() as u32, committed: args.stable, writeverf: out.verifier })
}

/// As NFSv3's COMMIT: the whole file, nothing on an `async` export, the
/// verifier read after the flush.
pub(super) fn commit<S: Store>(c: &mut Compound<'_, S>, args: Commit4Args) -> Result<Commit4ResOk, Nfsstat4> {
    let fh = c.current_export(Nfsstat4::Isdir)?;
    regular(&fh)?;
    if args.offset.checked_add(u64::from(args.count)).is_none() {
        return Err(Nfsstat4::Inval);
    }
    fh.writable()?;
    let store = c.store();
    let who = c.act(&fh)?;
    let writeverf = store.commit(who, &fh.object, fh.options.sync).map_err(|e| status(&e))?;
    Ok(Commit4ResOk { writeverf })
}

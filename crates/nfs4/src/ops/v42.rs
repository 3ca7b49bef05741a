//! The operations NFSv4.2 added (RFC 7862 section 15) that Keel serves:
//! SEEK (holes and data), ALLOCATE and DEALLOCATE (space reservation),
//! and COPY within the server, synchronous only. The decoder refuses them
//! under minor version 1 (NFS4ERR_OP_ILLEGAL, as knfsd).
//!
//! Each checks its stateid as the I/O it is like does (SEEK as READ; the
//! others as WRITE, and COPY its source as READ), with `io.rs`'s
//! `check_stateid`, then calls the store. A `sync` export makes ALLOCATE,
//! DEALLOCATE and COPY durable before the reply, as NFSv3's FILE_SYNC
//! WRITE would be; COPY's reply says which (`wr_committed`), with the
//! write verifier read before the copy, so an unstable copy is committed
//! (or redone) as unstable WRITEs are.
//!
//! Not served: COPY from another server (NFS4ERR_NOTSUPP, as knfsd
//! without inter-server copy), asynchronous copies (a COPY asking for one
//! gets a synchronous copy, `cr_synchronous` true, which RFC 7862 section
//! 15.2.3 allows), hence COPY_NOTIFY, OFFLOAD_CANCEL and OFFLOAD_STATUS;
//! READ_PLUS (the Linux client falls back to READ), CLONE, WRITE_SAME and
//! IO_ADVISE.

use keel_nfs4_proto::{
    Allocate4Args, Copy4Args, Copy4Res, Copy4ResOk, CopyRequirements4, DataContent4, Deallocate4Args, Nfsstat4,
    Seek4Args, SeekRes4, StableHow4, Stateid4, WriteResponse4,
};
use keel_nfs4_state::{ClientId, IoAccess};
use keel_store::{FileType, Object, SeekWhat, Space, Store, StoreError};

use super::OpOutcome;
use super::io::check_stateid;
use crate::compound::{Compound, ExportFh, Filehandle};
use crate::errno::status;

/// Most bytes one COPY copies: a worker (and the client's slot) waits for
/// the copy, so a larger one is cut short and the client asks again for
/// the rest (knfsd's 4 MiB, `nfsd_copy_file_range`).
pub const COPY_BYTES_MAX: u64 = 4 << 20;

/// The client of the COMPOUND's session (operations that take a stateid
/// are never allowed outside one: the loop refuses them first).
pub(super) fn session_client<S: Store>(c: &Compound<'_, S>) -> Result<ClientId, Nfsstat4> {
    c.slot.as_ref().map(|g| g.clientid).ok_or(Nfsstat4::OpNotInSession)
}

/// `fh` if it is a regular file; the status RFC 8881 gives for what else
/// it may be (section 15.1.2: ISDIR, SYMLINK, WRONG_TYPE).
pub(super) fn regular<O: Object>(fh: Option<&Filehandle<O>>, none: Nfsstat4) -> Result<ExportFh<O>, Nfsstat4> {
    match fh.ok_or(none)? {
        Filehandle::Pseudo(_) => Err(Nfsstat4::Isdir),
        Filehandle::Export(fh) => match fh.object.file_type() {
            FileType::Regular => Ok(fh.clone()),
            FileType::Directory => Err(Nfsstat4::Isdir),
            FileType::Symlink => Err(Nfsstat4::Symlink),
            _ => Err(Nfsstat4::WrongType),
        },
    }
}

/// SEEK (RFC 7862 section 15.11): where the next data or hole begins at or
/// after `sa_offset`. Past the end: NFS4ERR_NXIO. No data after the
/// offset: NFS4_OK with `sr_eof`, at the end of the file.
pub(super) fn seek<S: Store>(c: &mut Compound<'_, S>, args: Seek4Args) -> Result<SeekRes4, Nfsstat4> {
    let fh = regular(c.current.as_ref(), Nfsstat4::Nofilehandle)?;
    check_stateid(c, &args.sa_stateid, &fh, IoAccess::Read)?;
    let store = c.store();
    let who = c.act(&fh)?;
    let size = store.getattr(&fh.object).map_err(|e| status(&e))?.size;
    if args.sa_offset >= size {
        return Err(Nfsstat4::Nxio);
    }
    let what = match args.sa_what {
        DataContent4::Nfs4ContentData => SeekWhat::Data,
        DataContent4::Nfs4ContentHole => SeekWhat::Hole,
    };
    match store.seek(who, &fh.object, args.sa_offset, what) {
        Ok(at) => Ok(SeekRes4 { sr_eof: at >= size, sr_offset: at }),
        // Nothing more of it before the end (or the file shrank).
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(SeekRes4 { sr_eof: true, sr_offset: size }),
        Err(e) => Err(status(&e)),
    }
}

/// ALLOCATE and DEALLOCATE of the current file's range.
fn space<S: Store>(
    c: &mut Compound<'_, S>,
    stateid: &Stateid4,
    offset: u64,
    length: u64,
    space: Space,
) -> Result<(), Nfsstat4> {
    let fh = regular(c.current.as_ref(), Nfsstat4::Nofilehandle)?;
    fh.writable()?;
    check_stateid(c, stateid, &fh, IoAccess::Write)?;
    let store = c.store();
    let who = c.act(&fh)?;
    store.fallocate(who, &fh.object, space, offset, length, fh.options.sync).map_err(|e| status(&e))
}

/// ALLOCATE (RFC 7862 section 15.1): the range's blocks reserved, the
/// size grown to cover it.
pub(super) fn allocate<S: Store>(c: &mut Compound<'_, S>, args: Allocate4Args) -> Result<(), Nfsstat4> {
    space(c, &args.aa_stateid, args.aa_offset, args.aa_length, Space::Allocate)
}

/// DEALLOCATE (RFC 7862 section 15.4): the range reads as zeros, its
/// blocks freed; the size stays.
pub(super) fn deallocate<S: Store>(c: &mut Compound<'_, S>, args: Deallocate4Args) -> Result<(), Nfsstat4> {
    space(c, &args.da_stateid, args.da_offset, args.da_length, Space::PunchHole)
}

impl OpOutcome<Copy4Res> for Result<Copy4ResOk, Nfsstat4> {
    fn into_res(self) -> Copy4Res {
        match self {
            Ok(ok) => Copy4Res::Ok(ok),
            Err(status) => Copy4Res::Fail(status),
        }
    }
}

/// COPY (RFC 7862 section 15.2) from the saved filehandle's file to the
/// current one's, within this server and synchronously: at most
/// [`COPY_BYTES_MAX`] bytes, the count copied reported as it is (the
/// client asks again for the rest). A count of 0 copies to the source's
/// end. A source range past the source's end is NFS4ERR_INVAL, as are
/// overlapping ranges of one file.
pub(super) fn copy<S: Store>(c: &mut Compound<'_, S>, args: Copy4Args) -> Result<Copy4ResOk, Nfsstat4> {
    if !args.ca_source_server.is_empty() {
        return Err(Nfsstat4::Notsupp);
    }
    let dst = regular(c.current.as_ref(), Nfsstat4::Nofilehandle)?;
    let src = regular(c.saved.as_ref(), Nfsstat4::Nofilehandle)?;
    dst.writable()?;
    if src.object.export_id() != dst.object.export_id() {
        // Two file systems (the Linux client never asks: it copies
        // between superblocks itself).
        return Err(Nfsstat4::Xdev);
    }
    check_stateid(c, &args.ca_src_stateid, &src, IoAccess::Read)?;
    check_stateid(c, &args.ca_dst_stateid, &dst, IoAccess::Write)?;
    let store = c.store();
    let who = c.act(&dst)?;
    let size = store.getattr(&src.object).map_err(|e| status(&e))?.size;
    let count = match args.ca_count {
        0 => size.saturating_sub(args.ca_src_offset),
        n => n,
    };
    if args.ca_src_offset.checked_add(count).is_none_or(|end| end > size) {
        return Err(Nfsstat4::Inval);
    }
    let verifier = store.write_verifier();
    let chunk = count.min(COPY_BYTES_MAX);
    let sync = dst.options.sync;
    let copied = store
        .copy_range(who, &src.object, args.ca_src_offset, &dst.object, args.ca_dst_offset, chunk, sync)
        .map_err(|e: StoreError| status(&e))?;
    Ok(Copy4ResOk {
        cr_response: WriteResponse4 {
            wr_callback_id: None,
            wr_count: copied,
            wr_committed: if sync { StableHow4::FileSync4 } else { StableHow4::Unstable4 },
            wr_writeverf: verifier,
        },
        cr_requirements: CopyRequirements4 { cr_consecutive: true, cr_synchronous: true },
    })
}

#[cfg(test)]
mod tests;

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
//! READ_PLUS reads as READ does and names the holes it finds on the way
//! (SEEK_HOLE and SEEK_DATA), so that a sparse file's holes do not cross
//! the wire as zeros; a reply of one data segment is spliced from the file
//! as READ's data is.
//!
//! Not served: COPY from another server (NFS4ERR_NOTSUPP, as knfsd
//! without inter-server copy), asynchronous copies (a COPY asking for one
//! gets a synchronous copy, `cr_synchronous` true, which RFC 7862 section
//! 15.2.3 allows), hence COPY_NOTIFY, OFFLOAD_CANCEL and OFFLOAD_STATUS;
//! CLONE, WRITE_SAME and IO_ADVISE.

use keel_nfs4_proto::{
    Allocate4Args, Copy4Args, Copy4Res, Copy4ResOk, CopyRequirements4, Data4, DataContent4, DataInfo4, Deallocate4Args,
    Nfsstat4, ReadPlus4Args, ReadPlusContent, ReadPlusRes4, Seek4Args, SeekRes4, StableHow4, Stateid4, WriteResponse4,
};
use keel_nfs4_state::{ClientId, IoAccess};
use keel_store::{FileType, Object, SeekWhat, Space, Store, StoreError};

use super::OpOutcome;
use super::io::{check_stateid, read_data, read_start};
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

/// A hole shorter than this with data after it is sent as data (zeros):
/// each segment after the first costs the client a move of the data that
/// follows it within its pages (Linux's decoder), and the server two more
/// seeks, which a few KiB of zeros saved do not pay for.
pub const READ_PLUS_HOLE_MIN: u64 = 64 << 10;

/// Most segments in one READ_PLUS reply (each costs the server up to two
/// seeks); the client asks again for the rest.
pub const READ_PLUS_SEGMENTS_MAX: usize = 16;

/// Bytes of a READ_PLUS result around its data: operation number,
/// status, eof, the segment count, and per segment at most its content
/// type, offset, length and padding.
const READ_PLUS_RESULT_FIXED_BYTES: usize = 4 + 4 + 4 + 4 + READ_PLUS_SEGMENTS_MAX * (4 + 8 + 8 + 3);
// The transport sets aside a READ_PLUS's count and this much for the rest.
const _: () = assert!(READ_PLUS_RESULT_FIXED_BYTES <= crate::program::OP_RESULT_BYTES_MAX);

/// A range of a file as READ_PLUS sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment {
    Data { offset: u64, len: u64 },
    Hole { offset: u64, len: u64 },
}

/// The segments of the file from `offset` to `end` (fewer if there are
/// more than [`READ_PLUS_SEGMENTS_MAX`]), and whether they reach its end
/// when they end in a hole or are none (when they end in data, the read of
/// it tells). `seek` is SEEK_DATA or SEEK_HOLE (`None` for ENXIO: nothing
/// of that kind from there to the end of the file); `size` is asked only
/// when a hole runs to the end of the file or the range is empty. A hole
/// shorter than [`READ_PLUS_HOLE_MIN`] with data after it joins the data
/// around it.
fn plan_segments(
    offset: u64,
    end: u64,
    seek: &mut dyn FnMut(u64, SeekWhat) -> Result<Option<u64>, Nfsstat4>,
    size: &mut dyn FnMut() -> Result<u64, Nfsstat4>,
) -> Result<(Vec<Segment>, bool), Nfsstat4> {
    let mut segments: Vec<Segment> = Vec::new();
    let data = |segments: &mut Vec<Segment>, from: u64, to: u64| match segments.last_mut() {
        Some(Segment::Data { offset, len }) if *offset + *len == from => *len = to - *offset,
        _ => segments.push(Segment::Data { offset: from, len: to - from }),
    };
    let mut pos = offset;
    while pos < end && segments.len() < READ_PLUS_SEGMENTS_MAX {
        let Some(hole) = seek(pos, SeekWhat::Hole)? else {
            // At or past the end (the file may have shrunk).
            return Ok((segments, true));
        };
        if hole > pos {
            let to = hole.min(end);
            data(&mut segments, pos, to);
            pos = to;
            continue;
        }
        let (to, to_eof) = match seek(pos, SeekWhat::Data)? {
            Some(next) => (next, false),
            None => (size()?, true),
        };
        if to <= pos {
            // The file shrank to here, or data came where the hole was:
            // the reply ends here and the client asks again.
            return Ok((segments, to_eof));
        }
        if !to_eof && to - pos < READ_PLUS_HOLE_MIN {
            data(&mut segments, pos, to.min(end));
        } else {
            segments.push(Segment::Hole { offset: pos, len: to.min(end) - pos });
        }
        if to_eof && to <= end {
            return Ok((segments, true));
        }
        pos = to.min(end);
    }
    let eof = match segments.last() {
        None => pos >= size()?,
        Some(_) => false,
    };
    Ok((segments, eof))
}

/// READ_PLUS (RFC 7862 section 15.10): the range as READ would read it,
/// with the holes of at least [`READ_PLUS_HOLE_MIN`] named rather than
/// sent. A reply of one data segment (every read of a file without holes)
/// splices its data from the file; one of several copies each segment's
/// data, and ends at the first that comes back short (the file shrank).
pub(super) fn read_plus<S: Store>(c: &mut Compound<'_, S>, args: ReadPlus4Args) -> Result<ReadPlusRes4, Nfsstat4> {
    let (fh, count) = read_start(c, &args.rpa_stateid, args.rpa_count, READ_PLUS_RESULT_FIXED_BYTES)?;
    let offset = args.rpa_offset;
    let end = offset.saturating_add(count as u64);
    let store = c.store();
    let who = c.act(&fh)?;
    let (segments, mut eof) = plan_segments(
        offset,
        end,
        &mut |at, what| match store.seek(who, &fh.object, at, what) {
            Ok(next) => Ok(Some(next)),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
            Err(e) => Err(status(&e)),
        },
        &mut || store.getattr(&fh.object).map(|a| a.size).map_err(|e| status(&e)),
    )?;
    let splice = matches!(segments.as_slice(), [Segment::Data { .. }]);
    let mut contents = Vec::with_capacity(segments.len());
    for (i, segment) in segments.iter().enumerate() {
        match *segment {
            Segment::Hole { offset, len } => {
                contents.push(ReadPlusContent::Nfs4ContentHole(DataInfo4 { di_offset: offset, di_length: len }))
            }
            Segment::Data { offset, len } => {
                let (at_end, data) = read_data(c, &fh, offset, len as usize, splice)?;
                let short = !splice && (data.len() as u64) < len;
                contents.push(ReadPlusContent::Nfs4ContentData(Data4 { d_offset: offset, d_data: data }));
                if i + 1 == segments.len() || short {
                    eof = at_end;
                }
                if short {
                    break;
                }
            }
        }
    }
    Ok(ReadPlusRes4 { rpr_eof: eof, rpr_contents: contents.into() })
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

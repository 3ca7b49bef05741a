//! READ and WRITE.

use keel_store::pipe::FilePipe;
use std::sync::Arc;

use keel_store::{Attrs, ReadData, ReadOut, SeekWhat, Space, Stability, StoreError, StoreResult, WriteOut, rules};

use super::{LocalStore, from_stat, permit};
use crate::faults::FaultPoint;
use crate::ident::Acting;
use crate::inode::Inode;
use crate::sys;

/// READs of fewer bytes copy their data. Measured (docs/benchmarks.md,
/// "Spliced READs"): below 16 KiB a pread and a send cost the server less
/// than the two splices, at 16 KiB they are even, from 32 KiB splicing is
/// clearly cheaper; a READ that gains nothing should not hold a pipe.
pub const SPLICE_READ_BYTES_MIN: usize = 32 << 10;

/// Pages are this large at least: data at an offset within a page takes
/// one more of the pipe's page-sized slots.
const PAGE_BYTES: u64 = 4096;

fn require_regular(inode: &Inode) -> StoreResult<()> {
    rules::require_regular(inode.ftype)
}

impl LocalStore {
    pub(crate) fn check_io(&self, who: &Acting, inode: &Inode, write: bool) -> StoreResult<Attrs> {
        require_regular(inode)?;
        let st = sys::fstat(inode.fd())?;
        permit(who.cred(), inode, &st, if write { libc::W_OK } else { libc::R_OK }, true)?;
        from_stat(&st, inode.export.fsid).ok_or(StoreError::NotSupported)
    }

    pub(crate) fn read(&self, who: &Acting, inode: &Inode, offset: u64, count: usize) -> StoreResult<ReadOut> {
        require_regular(inode)?;
        let st = sys::fstat(inode.fd())?;
        permit(who.cred(), inode, &st, libc::R_OK, true)?;
        let attrs = from_stat(&st, inode.export.fsid).ok_or(StoreError::NotSupported)?;
        rules::check_read_offset(offset)?;
        let data = if count == 0 || offset >= attrs.size {
            ReadData::default()
        } else {
            let expected = count.min((attrs.size - offset).try_into().unwrap_or(usize::MAX));
            match self.read_cached(inode, offset, count, expected) {
                Some(bytes) => ReadData::Bytes(bytes.freeze()),
                None => {
                    // A small READ gets here on a miss. A large one from
                    // the page cache does not wait, and announcing it
                    // anyway handed the worker's place to a parked worker
                    // and parked this one after the reply: two context
                    // switches per READ (docs/benchmarks.md, "Sequential
                    // 1 MiB READs at one call in flight").
                    if expected < SPLICE_READ_BYTES_MIN || !sys::range_cached(inode.fd(), offset, expected) {
                        keel_store::blocking::may_block();
                    }
                    match self.splice_read(inode, offset, count, expected) {
                        Some(pipe) => ReadData::Pipe(pipe),
                        None => ReadData::Bytes(sys::pread(inode.fd(), offset, count)?.freeze()),
                    }
                }
            }
        };
        let eof = rules::read_eof(offset, data.len(), count, attrs.size);
        Ok(ReadOut { data, eof, attrs })
    }

    /// A READ too small to splice, answered from the page cache without
    /// waiting, so that it stays in its worker's batch: announcing every
    /// READ handed the calls behind it to other workers, a wake-up each
    /// (docs/benchmarks.md, "Reads that hit"). `None` if some of it must
    /// come from the disk.
    fn read_cached(&self, inode: &Inode, offset: u64, count: usize, expected: usize) -> Option<bytes::BytesMut> {
        if expected >= SPLICE_READ_BYTES_MIN {
            return None;
        }
        sys::pread_cached(inode.fd(), offset, count).filter(|b| b.len() >= expected)
    }

    /// The file's data at `offset` spliced into a pipe, when the read is
    /// large enough (`expected` bytes, from the size just read), a pipe
    /// is free and holds it all. `None` means copy: no pipe, or a splice
    /// that failed or stopped short of EOF (the pread that follows reports
    /// a real error itself).
    fn splice_read(&self, inode: &Inode, offset: u64, count: usize, expected: usize) -> Option<FilePipe> {
        if expected < SPLICE_READ_BYTES_MIN || (offset % PAGE_BYTES) as usize + expected > self.pipe_bytes {
            return None;
        }
        let mut pipe = self.pipes.as_ref()?.take()?;
        let mut at = offset;
        while pipe.len() < count {
            match sys::splice_to_pipe(inode.fd(), at, pipe.write_fd(), count - pipe.len()) {
                Ok(0) => break,
                Ok(n) => {
                    pipe.filled(n);
                    at += n as u64;
                }
                // The pipe full before `count` (a page slot per page, and a
                // file system that fills them differently), or a file that
                // cannot be spliced: the pipe is drained and goes back.
                Err(_) => return None,
            }
        }
        Some(pipe)
    }

    pub(crate) fn write(
        &self,
        who: &Acting,
        inode: &Inode,
        offset: u64,
        data: &[u8],
        stability: Stability,
    ) -> StoreResult<WriteOut> {
        require_regular(inode)?;
        let st = sys::fstat(inode.fd())?;
        permit(who.cred(), inode, &st, libc::W_OK, true)?;
        let before = from_stat(&st, inode.export.fsid).ok_or(StoreError::NotSupported)?;
        rules::check_write_extent(offset, data.len())?;
        let flags = match stability {
            Stability::Unstable => 0,
            Stability::DataSync => libc::RWF_DSYNC,
            Stability::FileSync => libc::RWF_SYNC,
        };
        let verifier = self.verifier.get();
        let written = match self.faults.strike(FaultPoint::Pwrite, || st.st_ino) {
            Some(errno) => Err(std::io::Error::from_raw_os_error(errno)),
            None if flags == 0 => sys::pwrite_all(inode.writer()?, data, offset, flags),
            // Reports its own data's write-back errors (inode.rs).
            None => sys::pwrite_all(inode.sync_writer()?.fd(), data, offset, flags),
        };
        if let Err(e) = written {
            // As knfsd: whatever failed may have taken data acknowledged
            // earlier with it (a synchronous write also reports the file's
            // earlier write-back errors), except for errors that say
            // nothing about the storage.
            if rules::write_error_loses_data(e.raw_os_error()) {
                self.verifier.data_lost(&format_args!("write to inode {} failed: {e}", st.st_ino));
            }
            return Err(e.into());
        }
        let after = super::attrs_of(inode)?;
        Ok(WriteOut { before, after, verifier })
    }
}

/// Bytes a copy moves through memory at a time where the kernel cannot
/// copy between the two files (another file system).
const COPY_BOUNCE_BYTES: usize = 1 << 20;

impl LocalStore {
    pub(crate) fn seek(&self, who: &Acting, inode: &Inode, offset: u64, what: SeekWhat) -> StoreResult<u64> {
        require_regular(inode)?;
        let st = sys::fstat(inode.fd())?;
        permit(who.cred(), inode, &st, libc::R_OK, true)?;
        Ok(sys::seek_data_or_hole(inode.fd(), offset, what == SeekWhat::Data)?)
    }

    pub(crate) fn fallocate(
        &self,
        who: &Acting,
        inode: &Arc<Inode>,
        space: Space,
        offset: u64,
        len: u64,
        commit: bool,
    ) -> StoreResult<()> {
        require_regular(inode)?;
        let st = sys::fstat(inode.fd())?;
        permit(who.cred(), inode, &st, libc::W_OK, true)?;
        rules::check_space_extent(offset, len)?;
        sys::fallocate(inode.writer()?, space == Space::PunchHole, offset, len)?;
        if commit {
            self.commit_objects(&[inode])?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn copy_range(
        &self,
        who: &Acting,
        src: &Inode,
        src_offset: u64,
        dst: &Arc<Inode>,
        dst_offset: u64,
        len: u64,
        commit: bool,
    ) -> StoreResult<u64> {
        require_regular(src)?;
        require_regular(dst)?;
        let src_st = sys::fstat(src.fd())?;
        permit(who.cred(), src, &src_st, libc::R_OK, true)?;
        let dst_st = sys::fstat(dst.fd())?;
        permit(who.cred(), dst, &dst_st, libc::W_OK, true)?;
        let same = src_st.st_dev == dst_st.st_dev && src_st.st_ino == dst_st.st_ino;
        rules::check_copy(same, src_offset, dst_offset, len)?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len == 0 {
            return Ok(0);
        }
        let copied = match sys::copy_file_range(src.fd(), src_offset, dst.writer()?, dst_offset, len) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EXDEV | libc::EOPNOTSUPP)) => {
                self.copy_through_memory(src, src_offset, dst, dst_offset, len)?
            }
            r => r?,
        };
        if commit && copied > 0 {
            self.commit_objects(&[dst])?;
        }
        Ok(copied as u64)
    }

    /// A copy between file systems: read, then written, a bounded chunk.
    fn copy_through_memory(
        &self,
        src: &Inode,
        src_offset: u64,
        dst: &Inode,
        dst_offset: u64,
        len: usize,
    ) -> StoreResult<usize> {
        keel_store::blocking::may_block();
        let data = sys::pread(src.fd(), src_offset, len.min(COPY_BOUNCE_BYTES))?;
        sys::pwrite_all(dst.writer()?, &data, dst_offset, 0)?;
        Ok(data.len())
    }
}

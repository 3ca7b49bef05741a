//! READ and WRITE.

use keel_store::{Attrs, FileType, ReadOut, Stability, StoreError, StoreResult, WriteOut};

use super::{LocalStore, from_stat, permit};
use crate::faults::FaultPoint;
use crate::ident::Acting;
use crate::inode::Inode;
use crate::sys;

fn require_regular(inode: &Inode) -> StoreResult<()> {
    match inode.ftype {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(StoreError::errno(libc::EISDIR)),
        _ => Err(StoreError::errno(libc::EINVAL)),
    }
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
        if offset > i64::MAX as u64 {
            return Err(StoreError::errno(libc::EINVAL));
        }
        let data = if count == 0 || offset >= attrs.size {
            Default::default()
        } else {
            sys::pread(inode.fd(), offset, count)?
        };
        let eof = data.len() < count || offset + data.len() as u64 >= attrs.size;
        Ok(ReadOut { data: data.freeze(), eof, attrs })
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
        if offset.checked_add(data.len() as u64).is_none_or(|end| end > i64::MAX as u64) {
            return Err(StoreError::errno(libc::EFBIG));
        }
        let flags = match stability {
            Stability::Unstable => 0,
            Stability::DataSync => libc::RWF_DSYNC,
            Stability::FileSync => libc::RWF_SYNC,
        };
        let verifier = self.verifier.get();
        let written = match self.faults.strike(FaultPoint::Pwrite, || st.st_ino) {
            Some(errno) => Err(std::io::Error::from_raw_os_error(errno)),
            None => sys::pwrite_all(inode.writer()?, data, offset, flags),
        };
        if let Err(e) = written {
            // As knfsd: whatever failed may have taken data acknowledged
            // earlier with it (a synchronous write also reports the file's
            // earlier write-back errors), except for errors that say
            // nothing about the storage.
            if !matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ESTALE)) {
                self.verifier.data_lost(&format_args!("write to inode {} failed: {e}", st.st_ino));
            }
            return Err(e.into());
        }
        let after = super::attrs_of(inode)?;
        Ok(WriteOut { before, after, verifier })
    }
}

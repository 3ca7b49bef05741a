//! READ and WRITE.

use bytes::Bytes;

use super::{Vfs, permit};
use crate::attr::{Attrs, FileType};
use crate::error::{VfsError, VfsResult};
use crate::faults::FaultPoint;
use crate::ident::Acting;
use crate::inode::Inode;
use crate::sys;

/// How durable a write must be before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stability {
    /// In the page cache; a later COMMIT makes it durable.
    Unstable,
    /// Data and the metadata needed to read it back (fdatasync semantics).
    DataSync,
    /// Data and all metadata (fsync semantics).
    FileSync,
}

#[derive(Debug)]
pub struct ReadOut {
    pub data: Bytes,
    pub eof: bool,
    pub attrs: Attrs,
}

#[derive(Debug)]
pub struct WriteOut {
    pub before: Attrs,
    pub after: Attrs,
    /// The write verifier as it was before the data went in: if a later
    /// flush fails, the verifier moves on and the client resends.
    pub verifier: [u8; 8],
}

fn require_regular(inode: &Inode) -> VfsResult<()> {
    match inode.ftype {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(VfsError::errno(libc::EISDIR)),
        _ => Err(VfsError::errno(libc::EINVAL)),
    }
}

impl Vfs {
    pub fn read(&self, who: &Acting, inode: &Inode, offset: u64, count: usize) -> VfsResult<ReadOut> {
        require_regular(inode)?;
        let st = sys::fstat(inode.fd())?;
        permit(who.cred(), inode, &st, libc::R_OK, true)?;
        let attrs = Attrs::from_stat(&st, inode.export.fsid).ok_or(VfsError::NotSupported)?;
        if offset > i64::MAX as u64 {
            return Err(VfsError::errno(libc::EINVAL));
        }
        let data = if count == 0 || offset >= attrs.size {
            Default::default()
        } else {
            sys::pread(inode.fd(), offset, count)?
        };
        let eof = data.len() < count || offset + data.len() as u64 >= attrs.size;
        Ok(ReadOut { data: data.freeze(), eof, attrs })
    }

    pub fn write(
        &self,
        who: &Acting,
        inode: &Inode,
        offset: u64,
        data: &[u8],
        stability: Stability,
    ) -> VfsResult<WriteOut> {
        require_regular(inode)?;
        let st = sys::fstat(inode.fd())?;
        permit(who.cred(), inode, &st, libc::W_OK, true)?;
        let before = Attrs::from_stat(&st, inode.export.fsid).ok_or(VfsError::NotSupported)?;
        if offset.checked_add(data.len() as u64).is_none_or(|end| end > i64::MAX as u64) {
            return Err(VfsError::errno(libc::EFBIG));
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

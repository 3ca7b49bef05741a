//! The one place where storage errors and an export's refusals become
//! NFSv4 status codes.

use keel_exports::{AdmitError, PseudoError};
use keel_nfs4_proto::Nfsstat4;
use keel_store::StoreError;

/// An export's refusal as NFSv4 answers it (knfsd's): a handle of an
/// export whose client list leaves the client out is stale to it (it must
/// learn nothing of the export), a `secure` export called from an
/// unprivileged port is NFS4ERR_PERM.
pub(crate) fn admit_status(e: &AdmitError) -> Nfsstat4 {
    match e {
        AdmitError::NotAdmitted | AdmitError::Stale => Nfsstat4::Stale,
        AdmitError::InsecurePort { .. } => Nfsstat4::Perm,
        AdmitError::BadHandle => Nfsstat4::Badhandle,
        AdmitError::ReadOnly => Nfsstat4::Rofs,
        AdmitError::WrongSecurity { .. } => Nfsstat4::Wrongsec,
        AdmitError::Store(e) => status(e),
    }
}

/// A refusal of the pseudo file system.
pub(crate) fn pseudo_status(e: PseudoError) -> Nfsstat4 {
    match e {
        // Not a pseudo handle is the store's to judge; never reported.
        PseudoError::NotPseudo | PseudoError::BadHandle => Nfsstat4::Badhandle,
        PseudoError::Stale => Nfsstat4::Stale,
        PseudoError::NoEntry => Nfsstat4::Noent,
    }
}

pub(crate) fn status(e: &StoreError) -> Nfsstat4 {
    match e {
        StoreError::Os(io) => match io.raw_os_error() {
            Some(errno) => errno_status(errno),
            None => {
                tracing::warn!(error = %io, "unexpected error without errno; answering NFS4ERR_IO");
                Nfsstat4::Io
            }
        },
        StoreError::Stale => Nfsstat4::Stale,
        StoreError::BadHandle => Nfsstat4::Badhandle,
        // Only SETATTR's guard, which NFSv4 does not send.
        StoreError::NotSync => Nfsstat4::Inval,
        StoreError::BadCookie => Nfsstat4::BadCookie,
        StoreError::NameTooLong => Nfsstat4::Nametoolong,
        StoreError::InvalidName => Nfsstat4::Badname,
        // The mounted-on directory is not part of the export (no crossmnt).
        StoreError::CrossesMount => Nfsstat4::Access,
        StoreError::NotSupported => Nfsstat4::Notsupp,
    }
}

fn errno_status(errno: i32) -> Nfsstat4 {
    match errno {
        libc::EPERM => Nfsstat4::Perm,
        libc::ENOENT => Nfsstat4::Noent,
        libc::EIO => Nfsstat4::Io,
        libc::ENXIO | libc::ENODEV => Nfsstat4::Nxio,
        libc::EACCES => Nfsstat4::Access,
        // knfsd: a file being executed cannot be opened for writing.
        libc::ETXTBSY => Nfsstat4::Access,
        libc::EEXIST => Nfsstat4::Exist,
        libc::EXDEV => Nfsstat4::Xdev,
        libc::ENOTDIR => Nfsstat4::Notdir,
        libc::EISDIR => Nfsstat4::Isdir,
        libc::EINVAL => Nfsstat4::Inval,
        libc::EFBIG | libc::EOVERFLOW => Nfsstat4::Fbig,
        libc::ENOSPC => Nfsstat4::Nospc,
        libc::EROFS => Nfsstat4::Rofs,
        libc::EMLINK => Nfsstat4::Mlink,
        libc::ENAMETOOLONG => Nfsstat4::Nametoolong,
        libc::ENOTEMPTY => Nfsstat4::Notempty,
        libc::EDQUOT => Nfsstat4::Dquot,
        libc::ESTALE => Nfsstat4::Stale,
        // A symbolic link where a directory or a file was needed: never
        // followed (RFC 8881 section 18.16.3: OPEN of a symlink).
        libc::ELOOP => Nfsstat4::Symlink,
        libc::EOPNOTSUPP | libc::ENOSYS => Nfsstat4::Notsupp,
        libc::EAGAIN | libc::ENOMEM | libc::EMFILE | libc::ENFILE => Nfsstat4::Delay,
        other => {
            tracing::warn!(errno = other, error = %std::io::Error::from_raw_os_error(other), "unexpected errno; answering NFS4ERR_IO");
            Nfsstat4::Io
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_hide_an_export_from_a_client_it_leaves_out() {
        assert_eq!(admit_status(&AdmitError::NotAdmitted), Nfsstat4::Stale);
        assert_eq!(admit_status(&AdmitError::InsecurePort { port: 2000 }), Nfsstat4::Perm);
        assert_eq!(admit_status(&AdmitError::ReadOnly), Nfsstat4::Rofs);
        assert_eq!(status(&StoreError::errno(libc::EAGAIN)), Nfsstat4::Delay);
        assert_eq!(status(&StoreError::errno(libc::EHOSTDOWN)), Nfsstat4::Io);
        assert_eq!(status(&StoreError::errno(libc::ELOOP)), Nfsstat4::Symlink);
    }
}

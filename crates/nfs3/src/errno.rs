//! The one place where storage errors and an export's refusals become
//! NFSv3 and MOUNT status codes.

use keel_exports::AdmitError;
use keel_nfs3_proto::mount::Mountstat3;
use keel_nfs3_proto::nfs3::Nfsstat3;
use keel_store::StoreError;

/// An export's refusal as NFSv3 answers it (knfsd's): a client not in
/// the list gets ACCES, one from an unprivileged port to a `secure`
/// export PERM.
pub(crate) fn admit_status(e: &AdmitError) -> Nfsstat3 {
    match e {
        AdmitError::NotAdmitted => Nfsstat3::Acces,
        AdmitError::InsecurePort { .. } => Nfsstat3::Perm,
        AdmitError::Stale => Nfsstat3::Stale,
        AdmitError::BadHandle => Nfsstat3::Badhandle,
        AdmitError::ReadOnly => Nfsstat3::Rofs,
        // The call is answered AUTH_TOOWEAK instead (`Request::admit`);
        // this status is never sent.
        AdmitError::WrongSecurity { .. } => Nfsstat3::Perm,
        AdmitError::Store(e) => status(e),
    }
}

/// An export's refusal of MNT as rpc.mountd answers it: MNT3ERR_ACCES,
/// also for an "illegal port" on a `secure` export, so that mount.nfs says
/// "access denied by server", which points at the export's options, where
/// MNT3ERR_PERM would read as a local "Operation not permitted".
pub(crate) fn mount_admit_status(e: &AdmitError) -> Mountstat3 {
    match e {
        AdmitError::NotAdmitted
        | AdmitError::InsecurePort { .. }
        | AdmitError::WrongSecurity { .. }
        | AdmitError::ReadOnly => Mountstat3::Acces,
        AdmitError::Stale | AdmitError::BadHandle => Mountstat3::Noent,
        AdmitError::Store(e) => mount_status(e),
    }
}

pub(crate) fn status(e: &StoreError) -> Nfsstat3 {
    match e {
        StoreError::Os(io) => match io.raw_os_error() {
            Some(errno) => errno_status(errno),
            None => {
                tracing::warn!(error = %io, "unexpected error without errno; answering NFS3ERR_IO");
                Nfsstat3::Io
            }
        },
        StoreError::Stale => Nfsstat3::Stale,
        StoreError::BadHandle => Nfsstat3::Badhandle,
        StoreError::NotSync => Nfsstat3::NotSync,
        StoreError::BadCookie => Nfsstat3::BadCookie,
        StoreError::NameTooLong => Nfsstat3::Nametoolong,
        StoreError::InvalidName => Nfsstat3::Inval,
        // The mounted-on directory is not part of the export (no crossmnt).
        StoreError::CrossesMount => Nfsstat3::Acces,
        StoreError::NotSupported => Nfsstat3::Notsupp,
    }
}

fn errno_status(errno: i32) -> Nfsstat3 {
    match errno {
        libc::EPERM => Nfsstat3::Perm,
        libc::ENOENT => Nfsstat3::Noent,
        libc::EIO => Nfsstat3::Io,
        libc::ENXIO => Nfsstat3::Nxio,
        libc::EACCES | libc::ETXTBSY => Nfsstat3::Acces,
        libc::EEXIST => Nfsstat3::Exist,
        libc::EXDEV => Nfsstat3::Xdev,
        libc::ENODEV => Nfsstat3::Nodev,
        libc::ENOTDIR => Nfsstat3::Notdir,
        libc::EISDIR => Nfsstat3::Isdir,
        libc::EINVAL => Nfsstat3::Inval,
        libc::EFBIG | libc::EOVERFLOW => Nfsstat3::Fbig,
        libc::ENOSPC => Nfsstat3::Nospc,
        libc::EROFS => Nfsstat3::Rofs,
        libc::EMLINK => Nfsstat3::Mlink,
        libc::ENAMETOOLONG => Nfsstat3::Nametoolong,
        libc::ENOTEMPTY => Nfsstat3::Notempty,
        libc::EDQUOT => Nfsstat3::Dquot,
        libc::ESTALE => Nfsstat3::Stale,
        // A symlink where a directory or file was needed: we never follow.
        libc::ELOOP => Nfsstat3::Inval,
        libc::EOPNOTSUPP | libc::ENOSYS => Nfsstat3::Notsupp,
        // Transient: the client waits and retries.
        libc::EAGAIN | libc::ENOMEM | libc::EMFILE | libc::ENFILE => Nfsstat3::Jukebox,
        other => {
            tracing::warn!(errno = other, error = %std::io::Error::from_raw_os_error(other), "unexpected errno; answering NFS3ERR_IO");
            Nfsstat3::Io
        }
    }
}

pub(crate) fn mount_status(e: &StoreError) -> Mountstat3 {
    match status(e) {
        Nfsstat3::Perm => Mountstat3::Perm,
        Nfsstat3::Noent | Nfsstat3::Stale => Mountstat3::Noent,
        Nfsstat3::Acces => Mountstat3::Acces,
        Nfsstat3::Notdir | Nfsstat3::Inval => Mountstat3::Notdir,
        Nfsstat3::Nametoolong => Mountstat3::Nametoolong,
        Nfsstat3::Notsupp => Mountstat3::Notsupp,
        Nfsstat3::Serverfault => Mountstat3::Serverfault,
        _ => Mountstat3::Io,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_errors_map_as_knfsd_does() {
        let cases = [
            (libc::ENOENT, Nfsstat3::Noent),
            (libc::EACCES, Nfsstat3::Acces),
            (libc::EEXIST, Nfsstat3::Exist),
            (libc::ENOTEMPTY, Nfsstat3::Notempty),
            (libc::EDQUOT, Nfsstat3::Dquot),
            (libc::ENOSPC, Nfsstat3::Nospc),
            (libc::EROFS, Nfsstat3::Rofs),
            (libc::EXDEV, Nfsstat3::Xdev),
            (libc::ESTALE, Nfsstat3::Stale),
            (libc::EHOSTDOWN, Nfsstat3::Io),
        ];
        for (errno, expected) in cases {
            assert_eq!(status(&StoreError::errno(errno)), expected, "errno {errno}");
        }
        assert_eq!(status(&StoreError::BadHandle), Nfsstat3::Badhandle);
        assert_eq!(mount_status(&StoreError::errno(libc::ENOENT)), Mountstat3::Noent);
    }

    #[test]
    fn refusals_map_as_knfsd_and_mountd_answer_them() {
        let cases = [
            (AdmitError::NotAdmitted, Nfsstat3::Acces, Mountstat3::Acces),
            (AdmitError::InsecurePort { port: 2000 }, Nfsstat3::Perm, Mountstat3::Acces),
            (AdmitError::Stale, Nfsstat3::Stale, Mountstat3::Noent),
            (AdmitError::BadHandle, Nfsstat3::Badhandle, Mountstat3::Noent),
            (AdmitError::ReadOnly, Nfsstat3::Rofs, Mountstat3::Acces),
            (AdmitError::Store(StoreError::errno(libc::EIO)), Nfsstat3::Io, Mountstat3::Io),
        ];
        for (e, nfs, mount) in cases {
            assert_eq!((admit_status(&e), mount_admit_status(&e)), (nfs, mount), "{e}");
        }
    }
}

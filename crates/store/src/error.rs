use std::io;

/// Why a store's verb failed. Operating-system errors keep their
/// errno; the protocol layer maps errno to its status codes in one table.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Os(#[from] io::Error),
    /// The handle was issued by this server but its object is gone, or it
    /// names an export or file system that is not served.
    #[error("stale file handle")]
    Stale,
    /// The handle was not issued by this server: wrong size, version or MAC.
    #[error("malformed or forged file handle")]
    BadHandle,
    /// SETATTR's ctime guard did not match.
    #[error("object changed since the guard time")]
    NotSync,
    #[error("invalid directory cookie")]
    BadCookie,
    #[error("name longer than 255 bytes")]
    NameTooLong,
    /// A name that is empty or holds '/' or NUL.
    #[error("invalid name")]
    InvalidName,
    /// LOOKUP into a directory on another mount: not part of the export.
    #[error("crosses a mount point")]
    CrossesMount,
    #[error("operation not supported for this object")]
    NotSupported,
}

impl StoreError {
    pub fn errno(e: i32) -> Self {
        StoreError::Os(io::Error::from_raw_os_error(e))
    }

    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            StoreError::Os(e) => e.raw_os_error(),
            _ => None,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

//! Keel's storage layer: a local file system (XFS, ext4, ...) served
//! through persistent, authenticated file handles, with each request
//! executed under the caller's identity (knfsd's `vfs.c`, `nfsfh.c` and
//! `export.c`, in user space).
//!
//! **Architecture invariant:** this crate never sees wire types. It speaks
//! in handles (opaque bytes), names (bytes), attributes and errno.

pub mod attr;
mod error;
pub mod export;
mod fs;
pub mod handle;
pub mod ident;
mod inode;
mod sys;

pub use attr::{Attrs, FileType, FsStat, Limits, SetAttrs, SetTime, Time};
pub use error::{VfsError, VfsResult};
pub use export::{Export, ExportSpec, FsidSource};
pub use fs::create::{CreateMode, Created, NodeKind};
pub use fs::{DirEntry, NAME_BYTES_MAX, ReadOut, SYMLINK_TARGET_BYTES_MAX, Stability, Vfs, WriteOut};
pub use handle::{FileHandle, HandleKey};
pub use ident::Cred;
pub use inode::Inode;

/// Fills `buf` with random bytes from the kernel (write verifiers).
pub fn random_bytes(buf: &mut [u8]) -> std::io::Result<()> {
    sys::random_bytes(buf)
}

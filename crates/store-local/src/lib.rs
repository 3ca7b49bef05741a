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
pub mod faults;
mod fs;
pub mod handle;
pub mod ident;
mod inode;
mod sys;
mod verifier;

pub use attr::{Attrs, FileType, FsStat, Limits, SetAttrs, SetTime, Time};
pub use error::{VfsError, VfsResult};
pub use export::{Export, ExportSpec, FsidSource};
pub use faults::{Fault, FaultAction, FaultInjector, FaultPoint};
pub use fs::create::{CreateMode, Created, NodeKind};
pub use fs::{DirEntry, NAME_BYTES_MAX, ReadOut, SYMLINK_TARGET_BYTES_MAX, Stability, Vfs, WriteOut};
pub use handle::{FileHandle, HandleKey};
pub use ident::{Acting, Cred};
pub use inode::Inode;
pub use verifier::WriteVerifier;

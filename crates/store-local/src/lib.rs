//! The local store: a local file system (XFS, ext4, ...) served through
//! persistent, authenticated file handles, with each request executed
//! under the caller's identity (knfsd's `vfs.c`, `nfsfh.c` and `export.c`,
//! in user space). It implements [`keel_store::Store`]; nothing outside
//! this crate sees its descriptors.
//!
//! **Architecture invariant:** this crate never sees wire types. It speaks
//! in handles (opaque bytes), names (bytes), attributes and errno.

// Every `unsafe` of this crate is in `sys`.
#![deny(unsafe_code)]

pub mod export;
pub mod faults;
mod fs;
mod group_commit;
pub mod handle;
pub mod ident;
mod inode;
mod lease;
mod locks;
mod store;
#[allow(unsafe_code)]
mod sys;
mod verifier;

pub use export::{Export, ExportIdentity, ExportSpec, FsidSource, lies_within};
pub use faults::{Fault, FaultAction, FaultInjector, FaultPoint};
pub use fs::LocalStore;
pub use handle::{FileHandle, HandleKey};
pub use ident::Acting;
pub use inode::Inode;
pub use lease::LocalReadLease;
pub use locks::LocalLockFile;
pub use store::LocalObject;
pub use verifier::WriteVerifier;

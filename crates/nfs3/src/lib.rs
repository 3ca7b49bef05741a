//! NFSv3 and MOUNT v3 procedures (knfsd's `nfs3proc.c` and mountd): thin
//! handlers between the wire types of `keel-nfs3-proto` and the storage
//! verbs of `keel-vfs`. Policy lives here: which clients may use an export,
//! read-only, squashing, sync or async.
//!
//! **Architecture invariant:** handlers never touch the file system
//! themselves; every access goes through `keel_vfs::Vfs` with the caller's
//! squashed identity.

#![forbid(unsafe_code)]

mod convert;
mod errno;
pub mod export;
mod mount;
mod nfs;
mod report;
mod service;

pub use mount::MountProgram;
pub use nfs::Nfs3Program;
pub use service::{NfsService, ServedExport};

/// Largest READ and WRITE (FSINFO rtmax/wtmax): 1 MiB, as the seeds' tuned servers use.
pub const IO_BYTES_MAX: u32 = 1 << 20;
/// Largest READDIR / READDIRPLUS reply.
pub const DIR_REPLY_BYTES_MAX: u32 = 1 << 20;

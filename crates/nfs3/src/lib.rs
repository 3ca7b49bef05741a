//! NFSv3 and MOUNT v3 procedures (knfsd's `nfs3proc.c` and mountd): thin
//! handlers between the wire types of `keel-nfs3-proto` and the verbs of a
//! `keel_store::Store`. Which clients may use an export, and as whom, is
//! `keel-exports`' (the same for every protocol); what an export's options
//! mean for NFSv3 (read-only, sync or async) and which status answers a
//! refusal (`errno.rs`) is decided here.
//!
//! **Architecture invariant:** handlers see only the `Store` trait and
//! `keel-exports`: no descriptors, no file system; every access goes
//! through the store with the caller's squashed identity, assumed once per
//! call; replies carry the write verifier the store reports.

#![forbid(unsafe_code)]

mod convert;
mod errno;
mod mount;
mod nfs;

pub use mount::MountProgram;
pub use nfs::Nfs3Program;

// Every handle a store gives must travel in an nfs_fh3.
const _: () = assert!(keel_store::HANDLE_BYTES_MAX <= keel_nfs3_proto::nfs3::NFS3_FHSIZE);

/// Largest READ and WRITE (FSINFO rtmax/wtmax): 1 MiB, knfsd's largest and the record size of
/// the reference systems' sequential tests (docs/benchmarks.md).
pub const IO_BYTES_MAX: u32 = 1 << 20;
/// Largest READDIR / READDIRPLUS reply.
pub const DIR_REPLY_BYTES_MAX: u32 = 1 << 20;

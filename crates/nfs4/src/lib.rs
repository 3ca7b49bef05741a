//! NFSv4.1 and NFSv4.2 procedure logic (knfsd's `nfs4proc.c`, apart from
//! the wire types of `keel-nfs4-proto` and the state of `keel-nfs4-state`):
//! the program (NULL and COMPOUND), the COMPOUND loop and its rules, one
//! table of operations, and the operations' handlers, one file per group
//! under `ops/`.
//!
//! - [`Nfs4Program`] (`program.rs`) serves program 100003 version 4 beside
//!   NFSv3 on the same port. Minor versions 1 and 2 are served as the
//!   server's configuration says ([`MinorVersions`]); minor version 0
//!   (NFSv4.0, a different state model) is not: its COMPOUNDs are answered
//!   `NFS4ERR_MINOR_VERS_MISMATCH`.
//! - `compound.rs` runs one COMPOUND: SEQUENCE first (or one of the
//!   operations allowed alone, which must then be the only one), the
//!   session's limits on operations and reply size, SEQUENCE's replay
//!   answered from the slot's cache, stop at the first failure,
//!   `sequence_done` exactly once, `take_released` after every call into
//!   the state. [`Compound`] is what every handler is given: the current
//!   and saved filehandles, the current stateid, the minor version, the
//!   slot, the credential, the peer, the connection.
//! - `ops/mod.rs` is the table: for each operation its handler (or none:
//!   `NFS4ERR_NOTSUPP`) and its flags (allowed as the first operation,
//!   needs a current filehandle).
//!
//! Export rules are keel-exports', the same as for NFSv3: a real object's
//! handle is the store's handle, the same bytes an NFSv3 client is given,
//! and every use of one is admitted by `ExportTable::admit_handle`; the
//! pseudo file system above the exports is keel-exports' `PseudoFs`.
//!
//! **Architecture invariant:** handlers see only the `Store` trait,
//! keel-exports and keel-nfs4-state; every access goes through the store
//! with the caller's squashed identity.

#![forbid(unsafe_code)]

mod callback;
mod compound;
mod deleg;
#[cfg(test)]
mod deleg_tests;
mod errno;
mod ops;
mod owners;
mod program;
#[cfg(test)]
mod tests;

pub use callback::CallbackCounters;
pub use compound::{Compound, ExportFh, Filehandle};
pub use ops::{OpEntry, OpFlags, operation_names};
pub use owners::{NameDatabase, OwnerNames};
pub use program::{MinorVersions, Nfs4Config, Nfs4Program, OpObserver};

/// Largest READ and WRITE (`maxread`, `maxwrite`): NFSv3's, 1 MiB.
pub const IO_BYTES_MAX: u32 = 1 << 20;
/// Largest READDIR reply the server builds, whatever `maxcount` asks.
pub const DIR_REPLY_BYTES_MAX: u32 = 1 << 20;

// Every handle a store gives must travel in an nfs_fh4.
const _: () = assert!(keel_store::HANDLE_BYTES_MAX <= keel_nfs4_proto::NFS4_FHSIZE);

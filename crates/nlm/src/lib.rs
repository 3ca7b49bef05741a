//! Locking for NFSv3 clients, served by Keel itself: the Network Lock
//! Manager (NLM v4, program 100021) and the Network Status Monitor (NSM
//! v1, program 100024).
//!
//! - [`LockManager`] (`manager.rs`): lock owners, their open file
//!   descriptions (real OFD locks through `keel_store::Store`), blocked
//!   requests, per-client bounds, and its part in the grace period after
//!   a restart (one for NLM and NFSv4.1: `keel_nfs4_state::SharedGrace`).
//!   Each server-wide pool is shared among client addresses by
//!   `keel_exports::claims`.
//! - [`NlmProgram`], [`NsmProgram`] (`program.rs`): the procedure tables.
//! - `courier.rs`: the server's calls to clients (GRANTED, `_RES`,
//!   SM_NOTIFY) on a thread of their own, and the tick thread.
//! - `nsm_store.rs`: the NSM state on disk.
//!
//! **Architecture invariants:** sees storage only through the `Store`
//! trait, and handles only after the export's admission
//! (`keel_exports::Exports::admit_handle`: client list, `secure`, squash,
//! the same rule as for NFS); no worker
//! thread ever waits for a lock or for a client; every table is bounded
//! per client address (never per name a client gives) and overall.

#![forbid(unsafe_code)]

mod config;
pub mod courier;
mod manager;
pub mod nsm_store;
mod program;

pub use config::LockConfig;
pub use manager::{Courier, Ctx, LockManager, LockStats, Outbound, OwnerKey, RECLAIM_QUIET, previous_client};
pub use program::{NlmProgram, NsmProgram};

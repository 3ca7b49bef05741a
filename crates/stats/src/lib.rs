//! The one place where Keel counts: every RPC call by program and
//! procedure (with its latency in a fixed log-spaced histogram), by export,
//! by client (a bounded table), the NFS status of every reply, the bytes
//! read and written, and the calls running now. The counters are atomics
//! updated by the workers without locks (the client table takes one of 16
//! shard locks); a [`Snapshot`] is read from them on demand, for
//! `keel stat` (the administration socket) and the Prometheus endpoint
//! alike, so both show the same numbers.
//!
//! Counting hooks onto the RPC layer without changing it: [`Counted`]
//! wraps each program the dispatcher runs, times its calls and reads what
//! the program reported about them ([`keel_rpc::CallReport`]: export,
//! status, bytes).
//!
//! **Architecture invariant:** knows nothing of NFS. Programs, procedure
//! names and status names come in as data ([`ProgramSpec`]); the server
//! supplies them.

#![forbid(unsafe_code)]

mod calls;
mod clients;
pub mod histogram;
pub mod prometheus;
mod snapshot;
pub mod text;
pub mod time;

pub use calls::{CallStats, Counted, OperationCounter, ProgramSpec, STUCK_AFTER, STUCK_AFTER_SECONDS};
pub use clients::CLIENTS_MAX;
pub use histogram::{Histogram, HistogramSnapshot};
pub use snapshot::*;

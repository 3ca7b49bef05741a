//! What the evaluation tools share (`keel bench`, `keel verify` and `keel
//! report`, each a crate of its own): the result file format that ties
//! them together, units and timestamps, the facts about a client host, and
//! the explanation of a `secure` export's refusal.

#![forbid(unsafe_code)]

pub mod host;
pub mod result;
pub mod secure;
/// UTC timestamps, shared with the server's statistics.
pub use keel_stats::time;
pub mod units;

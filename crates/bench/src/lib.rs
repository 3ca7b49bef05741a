//! `keel bench`, `keel verify` and `keel report`: the evaluation method of
//! the seed papers (IOzone's N-to-N sequential and random I/O, mdtest's
//! metadata rates, IOR, checkstream's data verification) as one tool that
//! speaks NFSv3 itself.

#![forbid(unsafe_code)]

pub mod bench;
pub mod host;
pub mod report;
pub mod result;
mod secure;
pub mod time;
pub mod units;
pub mod verify;

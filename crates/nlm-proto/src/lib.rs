//! Wire types of the Network Lock Manager version 4 and the Network Status
//! Monitor version 1 (X/Open XNFS, chapters 10 and 11; NLM4 as RFC 1813
//! appendix II amends it), named as the specifications name them and
//! encoded and decoded in both directions: the server decodes calls and
//! encodes its callbacks, tests and clients do the reverse.
//!
//! Decoders check shape and limits only (string and netobj lengths, enum
//! values); what a handle or an owner means is the lock manager's business.
//!
//! **Architecture invariant:** knows nothing of RPC transport, storage or
//! lock semantics.

#![forbid(unsafe_code)]

pub mod nlm4;
pub mod nsm;

//! Export policy and admission, the same for every protocol Keel serves
//! (NFSv3, MOUNT, NLM, NFSv4.1): one rule holds for all of them.
//!
//! - [`claims`]: what one client address may make the server hold of a
//!   server-wide pool (locks, lock-holding descriptions, client records,
//!   NFSv4.1 state).
//!
//! **Architecture Invariant:** knows nothing of wire protocols, RPC or
//! storage; every protocol maps its answers from here to its own status.

#![forbid(unsafe_code)]

pub mod claims;

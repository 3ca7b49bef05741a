//! Speaking NFSv3 and MOUNT v3 to the server under test, at every level a
//! test may need:
//!
//! - [`records`]: hand-built RPC call records (any program, procedure, xid
//!   and credential) and the decoding of reply records, and [`RawConn`], an
//!   async connection that sends records as given and reads replies whole;
//! - [`blocking`]: [`Nfs`], a small blocking NFSv3 client with exact control
//!   over what goes on the wire (the stability of each WRITE, calls
//!   pipelined on one connection and their replies read later or never);
//! - [`client`]: connections made with the independent `nfs3_client` crate
//!   (MNT included) and short forms of every procedure;
//! - [`handles`]: taking Keel's handles apart and forging new ones;
//! - [`host`]: what the exported tree looks like on the server's side.
//!
//! Procedure arguments and results are the independent `nfs3_types`
//! definitions, never Keel's own. Exports are `secure` by default, so every
//! connection comes from a reserved source port ([`ports`]) unless the test
//! asks for an ordinary one; the tests run as root.

pub mod blocking;
pub mod client;
pub mod handles;
pub mod host;
pub mod ports;
pub mod records;

pub use blocking::*;
pub use client::*;
pub use handles::*;
pub use host::*;
pub use nfs3_types::nfs3::{fattr3, nfsstat3, stable_how};
pub use ports::*;
pub use records::*;

/// Deterministic pseudo-random bytes (xorshift), so a test can regenerate
/// what it wrote from a seed, and misplaced data shows.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

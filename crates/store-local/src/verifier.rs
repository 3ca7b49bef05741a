//! The write verifier: the durability epoch of the server's data.
//!
//! A client that wrote UNSTABLE data keeps it until a COMMIT returns the
//! verifier its WRITEs returned; a different verifier tells it that the
//! server may have lost what it had not committed, and it sends the data
//! again. So the verifier changes at every start and whenever the storage
//! layer may have lost data it acknowledged: a failed fsync or stable
//! write (Linux reports a write-back error once per open file description,
//! and Keel shares one writing descriptor per file, so the next COMMIT of
//! the same file would otherwise succeed), as knfsd's
//! `commit_reset_write_verifier` does.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys;

#[derive(Debug)]
pub struct WriteVerifier(AtomicU64);

impl WriteVerifier {
    /// A fresh random verifier.
    pub fn new() -> std::io::Result<Self> {
        Ok(WriteVerifier(AtomicU64::new(random_nonzero()?)))
    }

    pub fn get(&self) -> [u8; 8] {
        self.0.load(Ordering::Acquire).to_be_bytes()
    }

    /// Data acknowledged as unstable may be lost: start a new epoch.
    pub(crate) fn data_lost(&self, why: &dyn std::fmt::Display) {
        let old = self.0.load(Ordering::Acquire);
        let mut new = random_nonzero().unwrap_or(old.wrapping_add(0x9e37_79b9_7f4a_7c15));
        if new == old {
            new = new.wrapping_add(1).max(1);
        }
        self.0.store(new, Ordering::Release);
        tracing::error!(
            error = %why,
            old = format_args!("{old:016x}"),
            new = format_args!("{new:016x}"),
            "write-back failed: new write verifier, so clients resend what they had not committed"
        );
    }
}

fn random_nonzero() -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    sys::random_bytes(&mut b)?;
    Ok(u64::from_be_bytes(b).max(1))
}

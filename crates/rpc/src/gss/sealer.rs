//! The per-message protection of one established context, behind one
//! interface with two makers: MIT's GSS-API itself, or Keel's own RFC 4121
//! tokens ([`super::krb5`]) from the keys GSS-API exports, for the
//! enctypes done there (aes128- and aes256-cts-hmac-sha1-96, what the
//! Linux client uses). Every other context (aes-sha2, camellia, RFC 1964)
//! stays with GSS-API.
//!
//! A sealer is shared by the calls of its context (the Linux client has
//! one context per user, and sends that user's calls in parallel): Keel's
//! tokens need no lock (their sequence number is atomic), so one call's
//! 1 MiB reply is sealed while another's is; GSS-API's context is used
//! under a mutex.

use std::sync::Mutex;

use super::krb5::{AES128_CTS_HMAC_SHA1_96, AES256_CTS_HMAC_SHA1_96, CfxAcceptor, WRAP_PREFIX, WRAP_SUFFIX};
use crate::sys::{AcceptContext, GssStatus};

/// MIC and Wrap tokens of one context, the server's side. The RPC code
/// needs no more: call verifiers and integrity bodies are MICs, privacy
/// bodies are Wrap tokens (always sealed when the server makes them).
pub trait Sealer: Send + Sync {
    fn get_mic(&self, message: &[u8]) -> Option<Vec<u8>>;
    /// Whether `mic` is the client's MIC of `message`. The token's own
    /// sequence number is not checked: RPCSEC_GSS keeps its own window
    /// (as the kernel's gss_krb5 does).
    fn verify_mic(&self, message: &[u8], mic: &[u8]) -> bool;
    fn wrap(&self, message: &[u8]) -> Option<Vec<u8>>;
    /// Bytes of room [`Self::wrap_in_place`] wants before the message,
    /// and how many it may add after it.
    fn wrap_room(&self) -> (usize, usize);
    /// The Wrap token of `out[at + room..]` (room: [`Self::wrap_room`]'s
    /// first) made in `out` from `at` on, the message copied as little as
    /// the maker allows (Keel's tokens: not at all).
    fn wrap_in_place(&self, out: &mut Vec<u8>, at: usize) -> Option<()>;
    /// The message of the client's Wrap token, sealed or only signed.
    fn unwrap(&self, token: &[u8]) -> Option<Vec<u8>>;
    /// Whether the tokens are made in process (not by GSS-API).
    fn in_process(&self) -> bool;
    /// The Kerberos enctype of the tokens' key, if known.
    fn enctype(&self) -> Option<i32>;
}

/// GSS-API's own tokens, one call at a time (a GSS-API context is not
/// safe to share). A status with supplementary bits only (a token out of
/// GSS-API's order, for a client that asked it for sequencing) is
/// success: RPCSEC_GSS keeps its own window.
pub struct GssApiSealer(Mutex<AcceptContext>);

impl GssApiSealer {
    fn context(&self) -> std::sync::MutexGuard<'_, AcceptContext> {
        self.0.lock().expect("GSS-API context lock")
    }
}

impl Sealer for GssApiSealer {
    fn get_mic(&self, message: &[u8]) -> Option<Vec<u8>> {
        self.context().get_mic(message).ok()
    }

    fn verify_mic(&self, message: &[u8], mic: &[u8]) -> bool {
        self.context().verify_mic(message, mic).is_ok()
    }

    fn wrap(&self, message: &[u8]) -> Option<Vec<u8>> {
        self.context().wrap(message).ok()
    }

    fn wrap_room(&self) -> (usize, usize) {
        (0, 0)
    }

    fn wrap_in_place(&self, out: &mut Vec<u8>, at: usize) -> Option<()> {
        let token = self.wrap(out.get(at..)?)?;
        out.truncate(at);
        out.extend_from_slice(&token);
        Some(())
    }

    fn unwrap(&self, token: &[u8]) -> Option<Vec<u8>> {
        self.context().unwrap(token).ok()
    }

    fn in_process(&self) -> bool {
        false
    }

    fn enctype(&self) -> Option<i32> {
        self.context().enctype().ok()
    }
}

impl Sealer for CfxAcceptor {
    fn get_mic(&self, message: &[u8]) -> Option<Vec<u8>> {
        Some(CfxAcceptor::get_mic(self, message))
    }

    fn verify_mic(&self, message: &[u8], mic: &[u8]) -> bool {
        CfxAcceptor::verify_mic(self, message, mic)
    }

    fn wrap(&self, message: &[u8]) -> Option<Vec<u8>> {
        CfxAcceptor::wrap(self, message)
    }

    fn wrap_room(&self) -> (usize, usize) {
        (WRAP_PREFIX, WRAP_SUFFIX)
    }

    fn wrap_in_place(&self, out: &mut Vec<u8>, at: usize) -> Option<()> {
        CfxAcceptor::wrap_in_place(self, out, at)
    }

    fn unwrap(&self, token: &[u8]) -> Option<Vec<u8>> {
        CfxAcceptor::unwrap(self, token)
    }

    fn in_process(&self) -> bool {
        true
    }

    fn enctype(&self) -> Option<i32> {
        Some(CfxAcceptor::enctype(self))
    }
}

/// The sealer of a context GSS-API completed: Keel's tokens when its key
/// is of an enctype done here, else GSS-API's. Exporting the keys ends
/// GSS-API's context, so the enctype is asked first; a context whose
/// export then fails, or whose exported keys are not what was asked
/// (which MIT never gives), is unusable: Err.
pub fn for_context(context: AcceptContext) -> Result<Box<dyn Sealer>, GssStatus> {
    match context.enctype() {
        Ok(AES128_CTS_HMAC_SHA1_96 | AES256_CTS_HMAC_SHA1_96) => {}
        _ => return Ok(Box::new(GssApiSealer(Mutex::new(context)))),
    }
    let keys = context.export_lucid()?;
    match CfxAcceptor::new(&keys) {
        Ok(tokens) => Ok(Box::new(tokens)),
        Err(e) => {
            tracing::warn!(error = %e, "GSS-API exported keys unlike the enctype it named");
            Err(GssStatus { major: GSS_S_FAILURE, minor: 0 })
        }
    }
}

/// GSS_S_FAILURE (RFC 2744 section 3.9.1).
const GSS_S_FAILURE: u32 = 13 << 16;

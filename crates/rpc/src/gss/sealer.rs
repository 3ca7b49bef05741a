//! The per-message protection of one established context, behind one
//! interface with two makers: MIT's GSS-API itself, or Keel's own RFC 4121
//! tokens ([`super::krb5`]) from the keys GSS-API exports, for the
//! enctypes done there (aes128- and aes256-cts-hmac-sha1-96, what the
//! Linux client uses). Every other context (aes-sha2, camellia, RFC 1964)
//! stays with GSS-API.

use super::krb5::{AES128_CTS_HMAC_SHA1_96, AES256_CTS_HMAC_SHA1_96, CfxAcceptor};
use crate::sys::{AcceptContext, GssStatus};

/// MIC and Wrap tokens of one context, the server's side. The RPC code
/// needs no more: call verifiers and integrity bodies are MICs, privacy
/// bodies are Wrap tokens (always sealed when the server makes them).
pub trait Sealer: Send {
    fn get_mic(&mut self, message: &[u8]) -> Option<Vec<u8>>;
    /// Whether `mic` is the client's MIC of `message`. The token's own
    /// sequence number is not checked: RPCSEC_GSS keeps its own window
    /// (as the kernel's gss_krb5 does).
    fn verify_mic(&mut self, message: &[u8], mic: &[u8]) -> bool;
    fn wrap(&mut self, message: &[u8]) -> Option<Vec<u8>>;
    /// The message of the client's Wrap token, sealed or only signed.
    fn unwrap(&mut self, token: &[u8]) -> Option<Vec<u8>>;
    /// Whether the tokens are made in process (not by GSS-API).
    fn in_process(&self) -> bool;
    /// The Kerberos enctype of the tokens' key, if known.
    fn enctype(&self) -> Option<i32>;
}

/// GSS-API's own tokens. A status with supplementary bits only (a token
/// out of GSS-API's order, for a client that asked it for sequencing) is
/// success: RPCSEC_GSS keeps its own window.
impl Sealer for AcceptContext {
    fn get_mic(&mut self, message: &[u8]) -> Option<Vec<u8>> {
        AcceptContext::get_mic(self, message).ok()
    }

    fn verify_mic(&mut self, message: &[u8], mic: &[u8]) -> bool {
        AcceptContext::verify_mic(self, message, mic).is_ok()
    }

    fn wrap(&mut self, message: &[u8]) -> Option<Vec<u8>> {
        AcceptContext::wrap(self, message).ok()
    }

    fn unwrap(&mut self, token: &[u8]) -> Option<Vec<u8>> {
        AcceptContext::unwrap(self, token).ok()
    }

    fn in_process(&self) -> bool {
        false
    }

    fn enctype(&self) -> Option<i32> {
        AcceptContext::enctype(self).ok()
    }
}

impl Sealer for CfxAcceptor {
    fn get_mic(&mut self, message: &[u8]) -> Option<Vec<u8>> {
        Some(CfxAcceptor::get_mic(self, message))
    }

    fn verify_mic(&mut self, message: &[u8], mic: &[u8]) -> bool {
        CfxAcceptor::verify_mic(self, message, mic)
    }

    fn wrap(&mut self, message: &[u8]) -> Option<Vec<u8>> {
        CfxAcceptor::wrap(self, message)
    }

    fn unwrap(&mut self, token: &[u8]) -> Option<Vec<u8>> {
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
        _ => return Ok(Box::new(context)),
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

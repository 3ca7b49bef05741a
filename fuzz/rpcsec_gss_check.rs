//! The decoding oracle behind the `rpcsec_gss` fuzz target, shared with the
//! replay test `crates/rpc/tests/fuzz_gss.rs` (both include this file with
//! `#[path]`), so CI runs it on stable without cargo-fuzz.
//!
//! An input is one control byte and then bytes read, by the control
//! byte's low three bits, as:
//!
//! 0. an RPCSEC_GSS credential body (`rpc_gss_cred_t`);
//! 1. RPCSEC_GSS_INIT's arguments (`rpc_gss_init_arg`);
//! 2. RPCSEC_GSS_INIT's results (`rpc_gss_init_res`);
//! 3. an integrity body (`rpc_gss_integ_data`) and its `rpc_gss_data_t`;
//! 4. a privacy body (`rpc_gss_priv_data`);
//! 5. a call header whose credential, if RPCSEC_GSS, is read as the
//!    server reads it, checking the extent of the checksummed header.
//!
//! Everything that decodes is encoded again and must decode to the same
//! value, from an encoding exactly as long as the bytes it came from.
//! Decode errors are fine; panics and broken invariants are the bugs.

use bytes::Bytes;
use keel_rpc::gss::wire::{
    GssCred, GssInitRes, IntegData, RPCSEC_GSS, decode_init_arg, decode_priv_data, encode_init_arg,
    header_bytes_through_cred, split_seq_num,
};
use keel_rpc::msg::CallHeader;
use keel_xdr::{Decoder, Encoder};

/// What an input came to, for the replay test's seeds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Whether the bytes decoded as what the control byte named.
    pub decoded: bool,
}

pub const KINDS: u8 = 6;

/// The control byte for an input of kind `kind`.
pub fn control_byte(kind: u8) -> u8 {
    kind % KINDS
}

pub fn check(data: &[u8]) -> Outcome {
    let Some((&control, rest)) = data.split_first() else { return Outcome::default() };
    let bytes = Bytes::copy_from_slice(rest);
    let decoded = match control % KINDS {
        0 => check_cred(bytes),
        1 => check_init_arg(bytes),
        2 => check_init_res(bytes),
        3 => check_integ(bytes),
        4 => check_priv(bytes),
        _ => check_header(bytes),
    };
    Outcome { decoded }
}

fn check_cred(bytes: Bytes) -> bool {
    let Ok(cred) = GssCred::decode(bytes.clone()) else { return false };
    let again = cred.encode();
    assert_eq!(again.len(), bytes.len(), "a credential re-encodes to its length");
    assert_eq!(GssCred::decode(again).unwrap(), cred);
    true
}

fn check_init_arg(bytes: Bytes) -> bool {
    let Ok(token) = decode_init_arg(bytes.clone()) else { return false };
    let mut enc = Encoder::new();
    encode_init_arg(&mut enc, &token);
    let again = enc.into_bytes();
    assert_eq!(again.len(), bytes.len());
    assert_eq!(decode_init_arg(again).unwrap(), token);
    true
}

fn check_init_res(bytes: Bytes) -> bool {
    let mut dec = Decoder::new(bytes.clone());
    let Ok(res) = GssInitRes::decode(&mut dec) else { return false };
    let used = dec.position();
    let mut enc = Encoder::new();
    res.encode(&mut enc);
    let again = enc.into_bytes();
    assert_eq!(again.len(), used);
    assert_eq!(GssInitRes::decode(&mut Decoder::new(again)).unwrap(), res);
    true
}

fn check_integ(bytes: Bytes) -> bool {
    let len = bytes.len();
    let Ok(integ) = IntegData::decode(bytes.clone(), len) else { return false };
    assert!(integ.databody.len() <= len, "the body's bound holds");
    let mut enc = Encoder::new();
    integ.encode(&mut enc);
    let again = enc.into_bytes();
    assert_eq!(again.len(), len);
    assert_eq!(IntegData::decode(again, len).unwrap(), integ);
    if let Ok((_, args)) = split_seq_num(integ.databody.clone()) {
        assert_eq!(args.len() + 4, integ.databody.len());
    }
    true
}

fn check_priv(bytes: Bytes) -> bool {
    let len = bytes.len();
    let Ok(token) = decode_priv_data(bytes, len) else { return false };
    let mut enc = Encoder::new();
    enc.opaque(&token);
    assert_eq!(enc.len(), len);
    true
}

fn check_header(bytes: Bytes) -> bool {
    let mut dec = Decoder::new(bytes.clone());
    let Ok(header) = CallHeader::decode(&mut dec) else { return false };
    // The checksummed header ends where the verifier begins.
    let verf_bytes = 8 + header.verf.body.len() + keel_xdr::padding(header.verf.body.len());
    assert_eq!(header_bytes_through_cred(header.cred.body.len()) + verf_bytes, dec.position());
    if header.cred.flavor == RPCSEC_GSS {
        return check_cred(header.cred.body);
    }
    true
}

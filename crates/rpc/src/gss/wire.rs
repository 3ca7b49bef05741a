//! RPCSEC_GSS version 1 on the wire (RFC 2203 section 5): the credential,
//! the context establishment arguments and results, and the bodies of
//! calls and replies under integrity and privacy. Encoding only: what the
//! fields mean is [`super::server`]'s.

use bytes::Bytes;
use keel_xdr::{Decoder, Encoder, XdrError};

/// The RPCSEC_GSS security flavor's number (RFC 2203 section 5).
pub const RPCSEC_GSS: u32 = 6;
/// The only version of RPCSEC_GSS (section 5).
pub const RPCSEC_GSS_VERS_1: u32 = 1;
/// Sequence numbers at or above this end a context (section 5.3.3.1).
pub const MAXSEQ: u32 = 0x8000_0000;
/// Longest context handle accepted. The server's own are 16 bytes; RFC
/// 2203 sets no limit, the credential's 400 bytes do.
pub const HANDLE_BYTES_MAX: usize = 64;
/// Longest context establishment token accepted: a Kerberos AP-REQ with
/// a PAC from a large Active Directory runs to about 12 KiB (MIT's own
/// limit on a received token is 64 KiB).
pub const INIT_TOKEN_BYTES_MAX: usize = 64 << 10;
/// Longest checksum (MIC token) accepted: a Kerberos MIC is 28 to 76 bytes.
pub const CHECKSUM_BYTES_MAX: usize = 1024;

/// rpc_gss_proc_t: what a call with an RPCSEC_GSS credential does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GssProc {
    Data,
    Init,
    ContinueInit,
    Destroy,
}

/// rpc_gss_service_t: the protection of a call's arguments and results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GssService {
    /// Authentication only: the header is checksummed, the body is not.
    None,
    /// The body checksummed (krb5i).
    Integrity,
    /// The body encrypted (krb5p).
    Privacy,
}

impl GssService {
    fn decode(value: u32) -> Result<Self, XdrError> {
        match value {
            1 => Ok(GssService::None),
            2 => Ok(GssService::Integrity),
            3 => Ok(GssService::Privacy),
            value => Err(XdrError::InvalidValue { what: "rpc_gss_service_t", value }),
        }
    }

    fn number(self) -> u32 {
        match self {
            GssService::None => 1,
            GssService::Integrity => 2,
            GssService::Privacy => 3,
        }
    }
}

/// rpc_gss_cred_vers_1_t, the body of an RPCSEC_GSS credential (behind
/// its version number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GssCred {
    pub proc_: GssProc,
    pub seq_num: u32,
    pub service: GssService,
    pub handle: Bytes,
}

impl GssCred {
    /// Reads a credential's body: version 1 and nothing after it.
    pub fn decode(body: Bytes) -> Result<Self, XdrError> {
        let mut dec = Decoder::new(body);
        match dec.u32()? {
            RPCSEC_GSS_VERS_1 => {}
            value => return Err(XdrError::InvalidValue { what: "rpc_gss_cred_t version", value }),
        }
        let proc_ = match dec.u32()? {
            0 => GssProc::Data,
            1 => GssProc::Init,
            2 => GssProc::ContinueInit,
            3 => GssProc::Destroy,
            value => return Err(XdrError::InvalidValue { what: "rpc_gss_proc_t", value }),
        };
        let cred = GssCred {
            proc_,
            seq_num: dec.u32()?,
            service: GssService::decode(dec.u32()?)?,
            handle: dec.opaque(HANDLE_BYTES_MAX)?,
        };
        dec.finish()?;
        Ok(cred)
    }

    /// The credential's body, version number first.
    pub fn encode(&self) -> Bytes {
        let mut enc = Encoder::with_capacity(20 + self.handle.len());
        enc.u32(RPCSEC_GSS_VERS_1);
        enc.u32(match self.proc_ {
            GssProc::Data => 0,
            GssProc::Init => 1,
            GssProc::ContinueInit => 2,
            GssProc::Destroy => 3,
        });
        enc.u32(self.seq_num);
        enc.u32(self.service.number());
        enc.opaque(&self.handle);
        enc.into_bytes()
    }
}

/// rpc_gss_init_arg: the arguments of RPCSEC_GSS_INIT and _CONTINUE_INIT.
pub fn decode_init_arg(args: Bytes) -> Result<Bytes, XdrError> {
    let mut dec = Decoder::new(args);
    let token = dec.opaque(INIT_TOKEN_BYTES_MAX)?;
    dec.finish()?;
    Ok(token)
}

pub fn encode_init_arg(enc: &mut Encoder, token: &[u8]) {
    enc.opaque(token);
}

/// rpc_gss_init_res: the results of RPCSEC_GSS_INIT and _CONTINUE_INIT.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GssInitRes {
    pub handle: Bytes,
    pub gss_major: u32,
    pub gss_minor: u32,
    pub seq_window: u32,
    pub gss_token: Bytes,
}

impl GssInitRes {
    pub fn encode(&self, enc: &mut Encoder) {
        enc.opaque(&self.handle);
        enc.u32(self.gss_major);
        enc.u32(self.gss_minor);
        enc.u32(self.seq_window);
        enc.opaque(&self.gss_token);
    }

    pub fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(GssInitRes {
            handle: dec.opaque(HANDLE_BYTES_MAX)?,
            gss_major: dec.u32()?,
            gss_minor: dec.u32()?,
            seq_window: dec.u32()?,
            gss_token: dec.opaque(INIT_TOKEN_BYTES_MAX)?,
        })
    }
}

/// rpc_gss_integ_data: a body under integrity, `databody_integ` (the
/// sequence number and the arguments or results) and its MIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntegData {
    pub databody: Bytes,
    pub checksum: Bytes,
}

impl IntegData {
    /// Reads an integrity body of at most `body_bytes_max` bytes; nothing
    /// may follow it.
    pub fn decode(body: Bytes, body_bytes_max: usize) -> Result<Self, XdrError> {
        let mut dec = Decoder::new(body);
        let data = IntegData { databody: dec.opaque(body_bytes_max)?, checksum: dec.opaque(CHECKSUM_BYTES_MAX)? };
        dec.finish()?;
        Ok(data)
    }

    pub fn encode(&self, enc: &mut Encoder) {
        enc.opaque_shared(self.databody.clone());
        enc.opaque(&self.checksum);
    }
}

/// rpc_gss_priv_data: a body under privacy, `databody_priv` (a GSS wrap
/// token holding the sequence number and the arguments or results).
pub fn decode_priv_data(body: Bytes, body_bytes_max: usize) -> Result<Bytes, XdrError> {
    let mut dec = Decoder::new(body);
    let token = dec.opaque(body_bytes_max)?;
    dec.finish()?;
    Ok(token)
}

/// rpc_gss_data_t's sequence number before the arguments or results it
/// protects, as `databody_integ` and the plaintext of `databody_priv`
/// hold them: the sequence number and the rest.
pub fn split_seq_num(databody: Bytes) -> Result<(u32, Bytes), XdrError> {
    let mut dec = Decoder::new(databody);
    let seq_num = dec.u32()?;
    Ok((seq_num, dec.rest()))
}

/// Bytes of a call header up to and including its credential, which the
/// call's verifier checksums (RFC 2203 section 5.3.1): xid, message type,
/// RPC version, program, version, procedure, then the credential's
/// flavor, length and padded body.
pub fn header_bytes_through_cred(cred_body_len: usize) -> usize {
    6 * 4 + 8 + cred_body_len + keel_xdr::padding(cred_body_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_roundtrips_and_is_bounded() {
        let cred = GssCred {
            proc_: GssProc::Data,
            seq_num: 7,
            service: GssService::Integrity,
            handle: Bytes::from_static(&[1, 2, 3, 4, 5]),
        };
        assert_eq!(GssCred::decode(cred.encode()).unwrap(), cred);
        let long = GssCred { handle: Bytes::from(vec![0; HANDLE_BYTES_MAX + 1]), ..cred.clone() };
        assert!(GssCred::decode(long.encode()).is_err());
        let mut v2 = cred.encode().to_vec();
        v2[3] = 2;
        assert!(GssCred::decode(Bytes::from(v2)).is_err(), "only version 1");
        let mut service = cred.encode().to_vec();
        service[15] = 4;
        assert!(GssCred::decode(Bytes::from(service)).is_err(), "services are 1 to 3");
        let mut trailing = cred.encode().to_vec();
        trailing.extend_from_slice(&[0; 4]);
        assert!(GssCred::decode(Bytes::from(trailing)).is_err());
    }

    #[test]
    fn init_results_and_integrity_bodies_roundtrip() {
        let res = GssInitRes {
            handle: Bytes::from_static(b"0123456789abcdef"),
            gss_major: 0,
            gss_minor: 0,
            seq_window: 128,
            gss_token: Bytes::from_static(b"token"),
        };
        let mut enc = Encoder::new();
        res.encode(&mut enc);
        let mut dec = Decoder::new(enc.into_bytes());
        assert_eq!(GssInitRes::decode(&mut dec).unwrap(), res);
        dec.finish().unwrap();

        let integ = IntegData { databody: Bytes::from_static(&[0, 0, 0, 9, 1]), checksum: Bytes::from_static(b"mic") };
        let mut enc = Encoder::new();
        integ.encode(&mut enc);
        let body = enc.into_bytes();
        assert_eq!(IntegData::decode(body.clone(), 16).unwrap(), integ);
        assert!(IntegData::decode(body, 4).is_err(), "a body over the limit");
        assert_eq!(split_seq_num(integ.databody).unwrap(), (9, Bytes::from_static(&[1])));
    }

    #[test]
    fn the_checksummed_header_ends_with_the_credential() {
        // 24 bytes of header, flavor and length, a 5-byte body padded to 8.
        assert_eq!(header_bytes_through_cred(5), 24 + 8 + 8);
        assert_eq!(header_bytes_through_cred(0), 32);
    }
}

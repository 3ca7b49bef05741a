//! RPC message headers (RFC 5531 section 9) and AUTH_SYS credentials
//! (section 14), in both directions: the server decodes calls and encodes
//! replies, the client library does the reverse.

use bytes::Bytes;
use keel_xdr::{Decoder, Encoder, XdrError};

pub const RPC_VERSION: u32 = 2;
const MSG_CALL: u32 = 0;
pub(crate) const MSG_REPLY: u32 = 1;
const MSG_ACCEPTED: u32 = 0;
const MSG_DENIED: u32 = 1;

pub const AUTH_NONE: u32 = 0;
pub const AUTH_SYS: u32 = 1;
/// Largest opaque_auth body (RFC 5531 section 8.2).
pub const AUTH_BODY_MAX: usize = 400;
pub const MACHINE_NAME_MAX: usize = 255;
/// Supplementary groups AUTH_SYS can carry.
pub const AUTH_SYS_GROUPS_MAX: usize = 16;

/// accept_stat, for calls that were accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptStat {
    Success,
    ProgUnavail,
    ProgMismatch { low: u32, high: u32 },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
}

/// auth_stat, for calls rejected for their credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum AuthStat {
    BadCred = 1,
    RejectedCred = 2,
    BadVerf = 3,
    RejectedVerf = 4,
    TooWeak = 5,
    /// RPCSEC_GSS: no credentials for the user (RFC 2203 section 5):
    /// the client establishes a new context.
    GssCredProblem = 13,
    /// RPCSEC_GSS: a problem with the context (its sequence numbers ran out).
    GssCtxProblem = 14,
}

/// Why a call was rejected outright.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectStat {
    RpcMismatch { low: u32, high: u32 },
    AuthError(AuthStat),
}

/// The body of a reply after its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyStat {
    Accepted(AcceptStat),
    Denied(RejectStat),
}

/// A credential or verifier as it travels: flavor and opaque body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpaqueAuth {
    pub flavor: u32,
    pub body: Bytes,
}

impl OpaqueAuth {
    pub fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(OpaqueAuth { flavor: dec.u32()?, body: dec.opaque(AUTH_BODY_MAX)? })
    }

    pub fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.flavor);
        enc.opaque(&self.body);
    }
}

/// AUTH_SYS parameters: who the client says the caller is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthSys {
    pub stamp: u32,
    pub machine_name: Bytes,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

impl AuthSys {
    pub fn decode(body: Bytes) -> Result<Self, XdrError> {
        let mut dec = Decoder::new(body);
        let auth = AuthSys {
            stamp: dec.u32()?,
            machine_name: dec.opaque(MACHINE_NAME_MAX)?,
            uid: dec.u32()?,
            gid: dec.u32()?,
            gids: dec.array(AUTH_SYS_GROUPS_MAX)?,
        };
        dec.finish()?;
        Ok(auth)
    }

    pub fn to_opaque(&self) -> OpaqueAuth {
        let mut enc = Encoder::new();
        enc.u32(self.stamp);
        enc.opaque(&self.machine_name);
        enc.u32(self.uid);
        enc.u32(self.gid);
        enc.u32(self.gids.len() as u32);
        for g in &self.gids {
            enc.u32(*g);
        }
        OpaqueAuth { flavor: AUTH_SYS, body: enc.into_bytes() }
    }
}

/// The credential a client sends (the server reads a call's credential
/// into a [`Credential`](crate::Credential)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    Sys(AuthSys),
}

/// The header of a call, up to its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHeader {
    pub xid: u32,
    pub rpc_version: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub cred: OpaqueAuth,
    pub verf: OpaqueAuth,
}

/// What went wrong reading a call header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallHeaderError {
    /// Not even a transaction id: nothing can be answered.
    NoXid,
    /// A reply where a call was expected: dropped, as RFC 5531 allows.
    NotACall { xid: u32 },
    /// The header after the xid is malformed.
    Garbage { xid: u32, error: XdrError },
}

impl CallHeader {
    /// Reads a call header. The RPC version is returned as sent; checking it
    /// (and answering RPC_MISMATCH) is the dispatcher's job.
    pub fn decode(dec: &mut Decoder) -> Result<Self, CallHeaderError> {
        let xid = dec.u32().map_err(|_| CallHeaderError::NoXid)?;
        let garbage = |error| CallHeaderError::Garbage { xid, error };
        match dec.u32().map_err(garbage)? {
            MSG_CALL => {}
            _ => return Err(CallHeaderError::NotACall { xid }),
        }
        Ok(CallHeader {
            xid,
            rpc_version: dec.u32().map_err(garbage)?,
            prog: dec.u32().map_err(garbage)?,
            vers: dec.u32().map_err(garbage)?,
            proc_: dec.u32().map_err(garbage)?,
            cred: OpaqueAuth::decode(dec).map_err(garbage)?,
            verf: OpaqueAuth::decode(dec).map_err(garbage)?,
        })
    }

    pub fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.xid);
        enc.u32(MSG_CALL);
        enc.u32(self.rpc_version);
        enc.u32(self.prog);
        enc.u32(self.vers);
        enc.u32(self.proc_);
        self.cred.encode(enc);
        self.verf.encode(enc);
    }
}

/// Writes a reply header with an AUTH_NONE verifier (what replies to
/// AUTH_NONE and AUTH_SYS calls, and calls refused before their
/// credential is known, carry); for `Accepted(Success)` the results follow.
pub fn encode_reply_header(enc: &mut Encoder, xid: u32, stat: ReplyStat) {
    encode_reply_header_with(enc, xid, &OpaqueAuth::default(), stat);
}

/// Writes a reply header; an accepted reply carries `verf` (the caller's
/// [`Credential::reply_verifier`](crate::Credential::reply_verifier)), a
/// denied one has none.
pub fn encode_reply_header_with(enc: &mut Encoder, xid: u32, verf: &OpaqueAuth, stat: ReplyStat) {
    enc.u32(xid);
    enc.u32(MSG_REPLY);
    match stat {
        ReplyStat::Accepted(accept) => {
            enc.u32(MSG_ACCEPTED);
            verf.encode(enc);
            match accept {
                AcceptStat::Success => enc.u32(0),
                AcceptStat::ProgUnavail => enc.u32(1),
                AcceptStat::ProgMismatch { low, high } => {
                    enc.u32(2);
                    enc.u32(low);
                    enc.u32(high);
                }
                AcceptStat::ProcUnavail => enc.u32(3),
                AcceptStat::GarbageArgs => enc.u32(4),
                AcceptStat::SystemErr => enc.u32(5),
            }
        }
        ReplyStat::Denied(reject) => {
            enc.u32(MSG_DENIED);
            match reject {
                RejectStat::RpcMismatch { low, high } => {
                    enc.u32(0);
                    enc.u32(low);
                    enc.u32(high);
                }
                RejectStat::AuthError(stat) => {
                    enc.u32(1);
                    enc.u32(stat as u32);
                }
            }
        }
    }
}

/// Reads a reply header: the xid and the status. For `Accepted(Success)`
/// the decoder is left at the results.
pub fn decode_reply_header(dec: &mut Decoder) -> Result<(u32, ReplyStat), XdrError> {
    let xid = dec.u32()?;
    let mtype = dec.u32()?;
    if mtype != MSG_REPLY {
        return Err(XdrError::InvalidValue { what: "msg_type", value: mtype });
    }
    let stat = match dec.u32()? {
        MSG_ACCEPTED => {
            OpaqueAuth::decode(dec)?;
            ReplyStat::Accepted(match dec.u32()? {
                0 => AcceptStat::Success,
                1 => AcceptStat::ProgUnavail,
                2 => AcceptStat::ProgMismatch { low: dec.u32()?, high: dec.u32()? },
                3 => AcceptStat::ProcUnavail,
                4 => AcceptStat::GarbageArgs,
                5 => AcceptStat::SystemErr,
                value => return Err(XdrError::InvalidValue { what: "accept_stat", value }),
            })
        }
        MSG_DENIED => ReplyStat::Denied(match dec.u32()? {
            0 => RejectStat::RpcMismatch { low: dec.u32()?, high: dec.u32()? },
            1 => RejectStat::AuthError(match dec.u32()? {
                1 => AuthStat::BadCred,
                2 => AuthStat::RejectedCred,
                3 => AuthStat::BadVerf,
                4 => AuthStat::RejectedVerf,
                5 => AuthStat::TooWeak,
                13 => AuthStat::GssCredProblem,
                14 => AuthStat::GssCtxProblem,
                value => return Err(XdrError::InvalidValue { what: "auth_stat", value }),
            }),
            value => return Err(XdrError::InvalidValue { what: "reject_stat", value }),
        }),
        value => return Err(XdrError::InvalidValue { what: "reply_stat", value }),
    };
    Ok((xid, stat))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_header_roundtrip_with_auth_sys() {
        let sys = AuthSys {
            stamp: 7,
            machine_name: Bytes::from_static(b"node17"),
            uid: 1000,
            gid: 100,
            gids: vec![100, 10, 4],
        };
        let call = CallHeader {
            xid: 0xdead_beef,
            rpc_version: 2,
            prog: 100003,
            vers: 3,
            proc_: 1,
            cred: sys.to_opaque(),
            verf: OpaqueAuth::default(),
        };
        let mut enc = Encoder::new();
        call.encode(&mut enc);
        let mut dec = Decoder::new(enc.into_bytes());
        let back = CallHeader::decode(&mut dec).unwrap();
        assert_eq!(back, call);
        assert_eq!(AuthSys::decode(back.cred.body).unwrap(), sys);
        dec.finish().unwrap();
    }

    #[test]
    fn every_reply_status_roundtrips() {
        let stats = [
            ReplyStat::Accepted(AcceptStat::Success),
            ReplyStat::Accepted(AcceptStat::ProgUnavail),
            ReplyStat::Accepted(AcceptStat::ProgMismatch { low: 3, high: 3 }),
            ReplyStat::Accepted(AcceptStat::ProcUnavail),
            ReplyStat::Accepted(AcceptStat::GarbageArgs),
            ReplyStat::Accepted(AcceptStat::SystemErr),
            ReplyStat::Denied(RejectStat::RpcMismatch { low: 2, high: 2 }),
            ReplyStat::Denied(RejectStat::AuthError(AuthStat::TooWeak)),
            ReplyStat::Denied(RejectStat::AuthError(AuthStat::GssCredProblem)),
            ReplyStat::Denied(RejectStat::AuthError(AuthStat::GssCtxProblem)),
        ];
        for stat in stats {
            let mut enc = Encoder::new();
            encode_reply_header(&mut enc, 42, stat);
            let mut dec = Decoder::new(enc.into_bytes());
            assert_eq!(decode_reply_header(&mut dec).unwrap(), (42, stat));
            dec.finish().unwrap();
        }
    }

    #[test]
    fn auth_sys_with_too_many_groups_is_refused() {
        let sys = AuthSys { gids: (0..17).collect(), ..Default::default() };
        assert!(AuthSys::decode(sys.to_opaque().body).is_err());
        // Trailing bytes inside the credential are garbage too.
        let mut body = AuthSys::default().to_opaque().body.to_vec();
        body.extend_from_slice(&[0, 0, 0, 0]);
        assert!(AuthSys::decode(Bytes::from(body)).is_err());
    }

    #[test]
    fn truncated_headers_say_how_far_they_got() {
        assert_eq!(CallHeader::decode(&mut Decoder::new(Bytes::from_static(&[1, 2]))), Err(CallHeaderError::NoXid));
        let r = CallHeader::decode(&mut Decoder::new(Bytes::from_static(&[0, 0, 0, 9, 0, 0, 0, 0, 0, 0])));
        assert!(matches!(r, Err(CallHeaderError::Garbage { xid: 9, .. })));
        let r = CallHeader::decode(&mut Decoder::new(Bytes::from_static(&[0, 0, 0, 9, 0, 0, 0, 1])));
        assert_eq!(r, Err(CallHeaderError::NotACall { xid: 9 }));
    }
}

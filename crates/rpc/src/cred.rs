//! Who a call comes from, established once per call from its header by
//! the dispatcher (knfsd's `svc_cred`): the security flavor, the principal
//! the flavor names, the Unix identity the call claims and, for a flavor
//! that has one, its security context. Handlers take the caller from here
//! whatever the flavor, so a new flavor (RPCSEC_GSS) is a new arm of
//! [`Credential::from_call`] and a [`SecurityContext`] that signs replies,
//! not code in the handlers.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use keel_store::{Cred, GROUPS_MAX};

use crate::gss::GssService;
use crate::gss::wire::RPCSEC_GSS;
use crate::msg::{AUTH_NONE, AUTH_SYS, AUTH_SYS_GROUPS_MAX, AuthStat, AuthSys, CallHeader, OpaqueAuth};

/// [`Credential::cache_identity`]'s SipHash key: fixed, so an HA peer
/// computes the same value from a journaled call.
const CACHE_IDENTITY_KEY: (u64, u64) = (0x6b65_656c_2d63_616c, 0x6c65_722d_6964_3031);

const _: () = assert!(GROUPS_MAX >= AUTH_SYS_GROUPS_MAX, "a store identity holds every AUTH_SYS group");

/// The security flavor a call's credential is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// AUTH_NONE: anonymous.
    None,
    /// AUTH_SYS: ids the client asserts, believed as they come.
    Sys,
    /// RPCSEC_GSS with Kerberos V5, authentication only.
    Krb5,
    /// RPCSEC_GSS with Kerberos V5, arguments and results checksummed.
    Krb5i,
    /// RPCSEC_GSS with Kerberos V5, arguments and results encrypted.
    Krb5p,
}

impl Flavor {
    /// The flavor's number in a call's credential (RFC 5531 section 8.2):
    /// the three Kerberos flavors are all RPCSEC_GSS there.
    pub fn number(self) -> u32 {
        match self {
            Flavor::None => AUTH_NONE,
            Flavor::Sys => AUTH_SYS,
            Flavor::Krb5 | Flavor::Krb5i | Flavor::Krb5p => RPCSEC_GSS,
        }
    }

    /// The flavor's number where a server lists the flavors it accepts
    /// (MOUNT's auth_flavors, NFSv4's SECINFO): the Kerberos pseudo
    /// flavors 390003 to 390005 (RFC 2623 section 2.2.1).
    pub fn pseudo_flavor(self) -> u32 {
        match self {
            Flavor::None => AUTH_NONE,
            Flavor::Sys => AUTH_SYS,
            Flavor::Krb5 => 390003,
            Flavor::Krb5i => 390004,
            Flavor::Krb5p => 390005,
        }
    }

    /// The flavor's name as exports(5)'s `sec=` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::None => "none",
            Flavor::Sys => "sys",
            Flavor::Krb5 => "krb5",
            Flavor::Krb5i => "krb5i",
            Flavor::Krb5p => "krb5p",
        }
    }

    /// The Kerberos flavor of an RPCSEC_GSS service.
    pub fn of_gss_service(service: GssService) -> Flavor {
        match service {
            GssService::None => Flavor::Krb5,
            GssService::Integrity => Flavor::Krb5i,
            GssService::Privacy => Flavor::Krb5p,
        }
    }

    pub const ALL: [Flavor; 5] = [Flavor::None, Flavor::Sys, Flavor::Krb5, Flavor::Krb5i, Flavor::Krb5p];
}

/// Who the caller is as its flavor names it (RPCSEC_GSS: the Kerberos
/// principal its context was established for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// AUTH_NONE: nobody in particular.
    Anonymous,
    /// AUTH_SYS: a user of a host: the machine name the client gives and
    /// the uid.
    Sys { machine_name: Bytes, uid: u32 },
    /// RPCSEC_GSS: the Kerberos principal its context was established
    /// for (`alice@EXAMPLE.ORG`, `host/node17.example.org@EXAMPLE.ORG`)
    /// and the service of this call.
    Gss { name: Arc<str>, service: GssService },
}

/// A flavor's state for one caller beyond its credential (RPCSEC_GSS: the
/// established context, its sequence window and keys). None of the
/// flavors served today has one.
pub trait SecurityContext: Send + Sync + fmt::Debug {
    /// The verifier of the reply to the call this context came with
    /// (RPCSEC_GSS: a checksum of the call's sequence number).
    fn reply_verifier(&self) -> OpaqueAuth;
}

/// The caller of one call: its flavor, its principal, the Unix identity
/// it claims (none for AUTH_NONE: the export's anonymous ids apply) and
/// its security context, if its flavor has one.
#[derive(Debug, Clone)]
pub struct Credential {
    flavor: Flavor,
    principal: Principal,
    ids: Option<Cred>,
    context: Option<Arc<dyn SecurityContext>>,
}

impl Credential {
    /// The credential a call header carries, or the `auth_stat` to deny
    /// the call with: AUTH_BADCRED for a malformed credential or a flavor
    /// not served (as knfsd). RPCSEC_GSS, whose credential names a
    /// context, is the dispatcher's [`GssServer`](crate::gss::GssServer)'s
    /// to establish; without one it is a flavor not served.
    pub fn from_call(header: &CallHeader) -> Result<Credential, AuthStat> {
        match header.cred.flavor {
            AUTH_NONE => Ok(Credential::anonymous()),
            AUTH_SYS => match AuthSys::decode(header.cred.body.clone()) {
                Ok(sys) => Ok(Credential::sys(sys.machine_name, sys.uid, sys.gid, &sys.gids)),
                Err(_) => Err(AuthStat::BadCred),
            },
            _ => Err(AuthStat::BadCred),
        }
    }

    /// RPCSEC_GSS's: a call of a context established for `name`, whose
    /// local identity is `ids` (`None`: the export's anonymous identity,
    /// as for a machine or an unknown principal).
    pub fn gss(name: impl Into<Arc<str>>, service: GssService, ids: Option<Cred>) -> Credential {
        Credential {
            flavor: Flavor::of_gss_service(service),
            principal: Principal::Gss { name: name.into(), service },
            ids,
            context: None,
        }
    }

    /// AUTH_NONE's.
    pub fn anonymous() -> Credential {
        Credential { flavor: Flavor::None, principal: Principal::Anonymous, ids: None, context: None }
    }

    /// AUTH_SYS's: `uid` on `machine_name`, with these ids (groups beyond
    /// AUTH_SYS's 16 are ignored).
    pub fn sys(machine_name: Bytes, uid: u32, gid: u32, groups: &[u32]) -> Credential {
        Credential {
            flavor: Flavor::Sys,
            principal: Principal::Sys { machine_name, uid },
            ids: Some(Cred::new(uid, gid, &groups[..groups.len().min(AUTH_SYS_GROUPS_MAX)])),
            context: None,
        }
    }

    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The Unix identity the caller claims, before an export squashes it;
    /// `None` for an anonymous caller.
    pub fn ids(&self) -> Option<&Cred> {
        self.ids.as_ref()
    }

    pub fn context(&self) -> Option<&Arc<dyn SecurityContext>> {
        self.context.as_ref()
    }

    /// The verifier a reply to this caller carries: its context's, else
    /// AUTH_NONE's (what AUTH_NONE and AUTH_SYS replies carry).
    pub fn reply_verifier(&self) -> OpaqueAuth {
        self.context.as_ref().map_or_else(OpaqueAuth::default, |c| c.reply_verifier())
    }

    /// Who the caller is for the duplicate reply cache: a retransmission
    /// from another principal must not get this caller's reply. AUTH_SYS's
    /// ids and machine name, RPCSEC_GSS's context (given by the
    /// dispatcher: its credential changes with each call), nothing for
    /// AUTH_NONE.
    pub fn cache_identity(&self, gss_context: Option<&[u8]>) -> u64 {
        let mut h = siphasher::sip::SipHasher24::new_with_keys(CACHE_IDENTITY_KEY.0, CACHE_IDENTITY_KEY.1);
        std::hash::Hash::hash(&self.flavor.number(), &mut h);
        match (&self.principal, gss_context) {
            (_, Some(handle)) => std::hash::Hash::hash(handle, &mut h),
            (Principal::Sys { machine_name, .. }, None) => {
                std::hash::Hash::hash(&machine_name[..], &mut h);
                if let Some(ids) = &self.ids {
                    std::hash::Hash::hash(&(ids.uid, ids.gid, ids.groups()), &mut h);
                }
            }
            _ => {}
        }
        std::hash::Hasher::finish(&h)
    }

    /// The same caller, with the security context its flavor established.
    pub fn with_context(self, context: Arc<dyn SecurityContext>) -> Credential {
        Credential { context: Some(context), ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(cred: OpaqueAuth) -> CallHeader {
        CallHeader { xid: 1, rpc_version: 2, prog: 7, vers: 1, proc_: 0, cred, verf: OpaqueAuth::default() }
    }

    #[test]
    fn auth_sys_gives_its_principal_and_ids() {
        let sys = AuthSys {
            stamp: 9,
            machine_name: Bytes::from_static(b"node17"),
            uid: 1000,
            gid: 100,
            gids: vec![100, 10, 4],
        };
        let cred = Credential::from_call(&header(sys.to_opaque())).unwrap();
        assert_eq!(cred.flavor(), Flavor::Sys);
        assert_eq!(cred.principal(), &Principal::Sys { machine_name: Bytes::from_static(b"node17"), uid: 1000 });
        let ids = cred.ids().unwrap();
        assert_eq!((ids.uid, ids.gid, ids.groups()), (1000, 100, &[100, 10, 4][..]));
        assert_eq!(cred.reply_verifier(), OpaqueAuth::default());
        assert!(cred.context().is_none());
    }

    #[test]
    fn auth_none_is_anonymous_with_no_ids() {
        let cred = Credential::from_call(&header(OpaqueAuth::default())).unwrap();
        assert_eq!((cred.flavor(), cred.principal(), cred.ids()), (Flavor::None, &Principal::Anonymous, None));
        assert_eq!(cred.flavor().number(), AUTH_NONE);
    }

    #[test]
    fn unknown_flavors_and_malformed_credentials_are_bad_credentials() {
        let gss = OpaqueAuth { flavor: 6, body: Bytes::from_static(&[0, 0, 0, 0]) };
        assert_eq!(Credential::from_call(&header(gss)).unwrap_err(), AuthStat::BadCred);
        let short = OpaqueAuth { flavor: AUTH_SYS, body: Bytes::from_static(&[0, 0, 0, 1]) };
        assert_eq!(Credential::from_call(&header(short)).unwrap_err(), AuthStat::BadCred);
        let too_many = AuthSys { gids: (0..17).collect(), ..Default::default() }.to_opaque();
        assert_eq!(Credential::from_call(&header(too_many)).unwrap_err(), AuthStat::BadCred);
        let mut trailing = AuthSys::default().to_opaque();
        trailing.body = Bytes::from([&trailing.body[..], &[0, 0, 0, 0]].concat());
        assert_eq!(Credential::from_call(&header(trailing)).unwrap_err(), AuthStat::BadCred);
    }

    #[derive(Debug)]
    struct Signing;

    impl SecurityContext for Signing {
        fn reply_verifier(&self) -> OpaqueAuth {
            OpaqueAuth { flavor: 6, body: Bytes::from_static(b"mic!") }
        }
    }

    #[test]
    fn a_security_context_gives_the_reply_verifier() {
        let cred = Credential::anonymous().with_context(Arc::new(Signing));
        assert_eq!(cred.reply_verifier(), OpaqueAuth { flavor: 6, body: Bytes::from_static(b"mic!") });
    }
}

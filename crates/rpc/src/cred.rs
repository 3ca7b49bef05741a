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

use crate::msg::{AUTH_NONE, AUTH_SYS, AUTH_SYS_GROUPS_MAX, AuthStat, AuthSys, CallHeader, OpaqueAuth};

const _: () = assert!(GROUPS_MAX >= AUTH_SYS_GROUPS_MAX, "a store identity holds every AUTH_SYS group");

/// The security flavor a call's credential is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// AUTH_NONE: anonymous.
    None,
    /// AUTH_SYS: ids the client asserts, believed as they come.
    Sys,
}

impl Flavor {
    /// The flavor's number on the wire (RFC 5531 section 8.2).
    pub fn number(self) -> u32 {
        match self {
            Flavor::None => AUTH_NONE,
            Flavor::Sys => AUTH_SYS,
        }
    }
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
    /// not served (as knfsd). A new flavor is a new arm here.
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

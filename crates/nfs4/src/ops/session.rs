//! Client IDs, sessions and stateids (RFC 8881 sections 18.33 to 18.51):
//! each a thin call into keel-nfs4-state, which holds every rule; and the
//! security flavors (SECINFO, SECINFO_NO_NAME).

use keel_exports::SecFlavor;
use keel_nfs4_proto::{
    AUTH_SYS, BackchannelCtl4Args, BindConnToSession4Args, BindConnToSession4ResOk, CreateSession4Args,
    CreateSession4ResOk, DestroyClientid4Args, DestroySession4Args, ExchangeId4Args, ExchangeId4ResOk,
    FreeStateid4Args, NfsImplId4, Nfsstat4, Nfstime4, ReclaimComplete4Args, RpcGssSvc, RpcsecGssInfo, Secinfo4,
    Secinfo4Args, Secinfo4ResOk, SecinfoNoName4Args, SecinfoStyle4, ServerOwner4, StateProtect4R, TestStateid4Args,
    TestStateid4ResOk,
};
use keel_nfs4_state::{ClientId, SessionId};
use keel_store::Store;
use keel_xdr::Opaque;

use crate::compound::{Compound, Filehandle};

/// The client of the COMPOUND's session. Every operation that calls this
/// is refused outside a session by the loop (it is not allowed first).
fn session_client<S: Store>(c: &Compound<'_, S>) -> Result<ClientId, Nfsstat4> {
    c.slot.as_ref().map(|g| g.clientid).ok_or(Nfsstat4::OpNotInSession)
}

pub(super) fn exchange_id<S: Store>(
    c: &mut Compound<'_, S>,
    args: ExchangeId4Args,
) -> Result<ExchangeId4ResOk, Nfsstat4> {
    let now = c.now;
    let caller = c.caller();
    let minor = c.minor;
    let ok = c.program.with_state(|s| {
        let ok = s.exchange_id(&caller, &args, now)?;
        s.minor_version_used(ok.clientid, minor);
        Ok::<_, Nfsstat4>(ok)
    })?;
    let owner = c.program.server_owner.clone();
    Ok(ExchangeId4ResOk {
        eir_clientid: ok.clientid.0,
        eir_sequenceid: ok.sequenceid,
        eir_flags: ok.flags,
        eir_state_protect: StateProtect4R::Sp4None,
        eir_server_owner: ServerOwner4 { so_minor_id: 0, so_major_id: Opaque(owner.clone()) },
        eir_server_scope: Opaque(owner),
        eir_server_impl_id: Some(NfsImplId4 {
            nii_domain: "keel.invalid".into(),
            nii_name: concat!("keel ", env!("CARGO_PKG_VERSION")).into(),
            nii_date: Nfstime4 { seconds: 0, nseconds: 0 },
        }),
    })
}

pub(super) fn create_session<S: Store>(
    c: &mut Compound<'_, S>,
    args: CreateSession4Args,
) -> Result<CreateSession4ResOk, Nfsstat4> {
    let now = c.now;
    let caller = c.caller();
    let minor = c.minor;
    c.program.with_state(|s| {
        let ok = s.create_session(&caller, &args, now)?;
        s.minor_version_used(ClientId(args.csa_clientid), minor);
        Ok(ok)
    })
}

/// DESTROY_SESSION (RFC 8881 section 18.37): of the COMPOUND's own
/// session only as its last operation (knfsd answers NFS4ERR_NOT_ONLY_OP).
pub(super) fn destroy_session<S: Store>(c: &mut Compound<'_, S>, args: DestroySession4Args) -> Result<(), Nfsstat4> {
    let own = c.slot.as_ref().map(|g| g.sessionid);
    if own.is_some_and(|s| s.0 == args.dsa_sessionid) && !c.is_last_op() {
        return Err(Nfsstat4::NotOnlyOp);
    }
    let conn = c.conn();
    c.program.with_state(|s| s.destroy_session(&SessionId(args.dsa_sessionid), own.as_ref(), conn))
}

pub(super) fn destroy_clientid<S: Store>(c: &mut Compound<'_, S>, args: DestroyClientid4Args) -> Result<(), Nfsstat4> {
    let now = c.now;
    let principal = c.principal.clone();
    c.program.with_state(|s| s.destroy_clientid(ClientId(args.dca_clientid), &principal, now))
}

/// BIND_CONN_TO_SESSION (RFC 8881 section 18.34): the last operation (as
/// knfsd requires), usually the only one.
pub(super) fn bind_conn_to_session<S: Store>(
    c: &mut Compound<'_, S>,
    args: BindConnToSession4Args,
) -> Result<BindConnToSession4ResOk, Nfsstat4> {
    if !c.is_last_op() {
        return Err(Nfsstat4::NotOnlyOp);
    }
    let now = c.now;
    let caller = c.caller();
    c.program.with_state(|s| s.bind_conn_to_session(&caller, &args, now))
}

pub(super) fn backchannel_ctl<S: Store>(c: &mut Compound<'_, S>, args: BackchannelCtl4Args) -> Result<(), Nfsstat4> {
    let sid = c.slot.as_ref().map(|g| g.sessionid).ok_or(Nfsstat4::OpNotInSession)?;
    c.program.with_state(|s| s.backchannel_ctl(&sid, args.bca_cb_program, &args.bca_sec_parms))
}

pub(super) fn reclaim_complete<S: Store>(c: &mut Compound<'_, S>, args: ReclaimComplete4Args) -> Result<(), Nfsstat4> {
    let client = session_client(c)?;
    let now = c.now;
    c.program.with_state(|s| s.reclaim_complete(client, args.rca_one_fs, now))
}

pub(super) fn test_stateid<S: Store>(
    c: &mut Compound<'_, S>,
    args: TestStateid4Args,
) -> Result<TestStateid4ResOk, Nfsstat4> {
    let client = session_client(c)?;
    let codes = c.program.with_state(|s| s.test_stateids(client, &args.ts_stateids));
    Ok(TestStateid4ResOk { tsr_status_codes: codes.into() })
}

pub(super) fn free_stateid<S: Store>(c: &mut Compound<'_, S>, args: FreeStateid4Args) -> Result<(), Nfsstat4> {
    let client = session_client(c)?;
    let stateid = c.stateid.resolve(&args.fsa_stateid)?;
    c.program.with_state(|s| s.free_stateid(client, &stateid))
}

/// The Kerberos V5 mechanism's OID (1.2.840.113554.1.2.2), DER without
/// its tag and length, as `sec_oid4` carries it (RFC 8881 section 18.29).
const KRB5_OID: &[u8] = b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02";

/// SECINFO's answer for `fh`: the flavors it may be used with, most
/// preferred first, the Kerberos ones as RPCSEC_GSS with their service.
fn flavors<S: Store>(c: &mut Compound<'_, S>, fh: &Filehandle<S::Object>) -> Result<Secinfo4ResOk, Nfsstat4> {
    let gss = |service| Secinfo4::RpcsecGss(RpcsecGssInfo { oid: KRB5_OID.into(), qop: 0, service });
    let list: Vec<Secinfo4> = c
        .sec_of(fh)?
        .as_slice()
        .iter()
        .map(|f| match f {
            SecFlavor::Sys => Secinfo4::Flavor(AUTH_SYS),
            SecFlavor::Krb5 => gss(RpcGssSvc::RpcGssSvcNone),
            SecFlavor::Krb5i => gss(RpcGssSvc::RpcGssSvcIntegrity),
            SecFlavor::Krb5p => gss(RpcGssSvc::RpcGssSvcPrivacy),
        })
        .collect();
    Ok(list.into())
}

/// SECINFO_NO_NAME (RFC 8881 section 18.45): the flavors of the current
/// filehandle or of its parent; the current filehandle is consumed. Never
/// NFS4ERR_WRONGSEC (section 2.6.3.1.1.8).
pub(super) fn secinfo_no_name<S: Store>(
    c: &mut Compound<'_, S>,
    style: SecinfoNoName4Args,
) -> Result<Secinfo4ResOk, Nfsstat4> {
    let fh = match style {
        SecinfoStyle4::Secinfo4StyleCurrentFh => c.current()?.clone(),
        SecinfoStyle4::Secinfo4StyleParent => super::dir::parent(c)?,
    };
    let res = flavors(c, &fh)?;
    c.current = None;
    Ok(res)
}

/// SECINFO (RFC 8881 section 18.29): the flavors for `name` in the
/// current directory, which must exist; the current filehandle is
/// consumed. Never NFS4ERR_WRONGSEC.
pub(super) fn secinfo<S: Store>(c: &mut Compound<'_, S>, args: Secinfo4Args) -> Result<Secinfo4ResOk, Nfsstat4> {
    let fh = super::dir::lookup_name(c, &args.name)?;
    let res = flavors(c, &fh)?;
    c.current = None;
    Ok(res)
}

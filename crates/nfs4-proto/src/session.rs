//! Operations new in NFSv4.1 for client IDs, sessions, state and
//! delegations (RFC 8881 sections 18.33 to 18.51 except the pNFS ones,
//! which are in `pnfs.rs`), and the types they share: callback security,
//! channel attributes, state protection.

use keel_xdr::Opaque;
use keel_xdr::bytes_newtype;

use crate::{
    AUTHSYS_GIDS_MAX, AUTHSYS_MACHINENAME_MAX, Array, Bitmap4, CB_SEC_PARMS_MAX, ClientOwner4, Clientid4, Count4,
    GSS_HANDLE_MAX, GSS_HANDLES_MAX, NFS4_OPAQUE_LIMIT, Nfs4Result, NfsImplId4, Nfsstat4, Nfstime4, OpenClaimType4,
    OpenDelegation4, OpenDelegationType4, SEC_OIDS_MAX, SSV_MAX, SecOid4, Secinfo4Res, Sequenceid4, ServerOwner4,
    Sessionid4, Slotid4, Stateid4, TEST_STATEIDS_MAX, Verifier4,
};

// RPC security flavors (RFC 5531 section 8.2, RFC 2203).

/// `AUTH_NONE`.
pub const AUTH_NONE: u32 = 0;
/// `AUTH_SYS`.
pub const AUTH_SYS: u32 = 1;
/// `RPCSEC_GSS`.
pub const RPCSEC_GSS: u32 = 6;

xdr_enums! {
    /// `rpc_gss_svc_t` (RFC 2203): what RPCSEC_GSS protects.
    RpcGssSvc { RpcGssSvcNone = 1, RpcGssSvcIntegrity = 2, RpcGssSvcPrivacy = 3 }
}

bytes_newtype!(
    /// `gsshandle4_t`: an RPCSEC_GSS context handle, kept opaque.
    GssHandle4,
    GSS_HANDLE_MAX
);

xdr_structs! {
    /// `authsys_parms` (RFC 5531 section 14): the credential the server is
    /// to use on the backchannel.
    #[derive(Default)]
    AuthsysParms {
        stamp: u32,
        machinename: Opaque<AUTHSYS_MACHINENAME_MAX>,
        uid: u32,
        gid: u32,
        gids: Array<u32, AUTHSYS_GIDS_MAX>,
    }

    /// `gss_cb_handles4`: the RPCSEC_GSS contexts for the backchannel.
    #[derive(Default)]
    GssCbHandles4 {
        gcbp_service: RpcGssSvc,
        gcbp_handle_from_server: GssHandle4,
        gcbp_handle_from_client: GssHandle4,
    }
}

xdr_union! {
    /// `callback_sec_parms4`: how the server is to authenticate its
    /// callbacks. Any other flavor is a decode error (the union has no
    /// default arm).
    CallbackSecParms4 {
        AUTH_NONE => AuthNone,
        AUTH_SYS => AuthSys(AuthsysParms),
        RPCSEC_GSS => RpcsecGss(GssCbHandles4),
    }
}

/// The security parameter sets of CREATE_SESSION and BACKCHANNEL_CTL.
pub type CallbackSecParmsList4 = Array<CallbackSecParms4, CB_SEC_PARMS_MAX>;

// BACKCHANNEL_CTL, BIND_CONN_TO_SESSION (sections 18.33, 18.34)

xdr_enums! {
    /// `channel_dir_from_client4`.
    ChannelDirFromClient4 {
        Cdfc4Fore = 1,
        Cdfc4Back = 2,
        Cdfc4ForeOrBoth = 3,
        Cdfc4BackOrBoth = 7,
    }

    /// `channel_dir_from_server4`.
    ChannelDirFromServer4 {
        Cdfs4Fore = 1,
        Cdfs4Back = 2,
        Cdfs4Both = 3,
    }
}

xdr_structs! {
    /// `BACKCHANNEL_CTL4args`.
    #[derive(Default)]
    BackchannelCtl4Args { bca_cb_program: u32, bca_sec_parms: CallbackSecParmsList4 }

    /// `BIND_CONN_TO_SESSION4args`.
    #[derive(Default)]
    BindConnToSession4Args {
        bctsa_sessid: Sessionid4,
        bctsa_dir: ChannelDirFromClient4,
        bctsa_use_conn_in_rdma_mode: bool,
    }

    /// `BIND_CONN_TO_SESSION4resok`.
    #[derive(Default)]
    BindConnToSession4ResOk {
        bctsr_sessid: Sessionid4,
        bctsr_dir: ChannelDirFromServer4,
        bctsr_use_conn_in_rdma_mode: bool,
    }
}
pub type BackchannelCtl4Res = Nfsstat4;
pub type BindConnToSession4Res = Nfs4Result<BindConnToSession4ResOk>;

// EXCHANGE_ID (section 18.35)

pub const EXCHGID4_FLAG_SUPP_MOVED_REFER: u32 = 0x0000_0001;
pub const EXCHGID4_FLAG_SUPP_MOVED_MIGR: u32 = 0x0000_0002;
pub const EXCHGID4_FLAG_SUPP_FENCE_OPS: u32 = 0x0000_0004;
pub const EXCHGID4_FLAG_BIND_PRINC_STATEID: u32 = 0x0000_0100;
pub const EXCHGID4_FLAG_USE_NON_PNFS: u32 = 0x0001_0000;
pub const EXCHGID4_FLAG_USE_PNFS_MDS: u32 = 0x0002_0000;
pub const EXCHGID4_FLAG_USE_PNFS_DS: u32 = 0x0004_0000;
pub const EXCHGID4_FLAG_MASK_PNFS: u32 = 0x0007_0000;
pub const EXCHGID4_FLAG_UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
pub const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;

xdr_enums! {
    /// `state_protect_how4`.
    StateProtectHow4 { Sp4None = 0, Sp4MachCred = 1, Sp4Ssv = 2 }
}

xdr_structs! {
    /// `state_protect_ops4`: bitmaps of operation numbers.
    #[derive(Default)]
    StateProtectOps4 { spo_must_enforce: Bitmap4, spo_must_allow: Bitmap4 }

    /// `ssv_sp_parms4`.
    #[derive(Default)]
    SsvSpParms4 {
        ssp_ops: StateProtectOps4,
        ssp_hash_algs: Array<SecOid4, SEC_OIDS_MAX>,
        ssp_encr_algs: Array<SecOid4, SEC_OIDS_MAX>,
        ssp_window: u32,
        ssp_num_gss_handles: u32,
    }

    /// `ssv_prot_info4`.
    #[derive(Default)]
    SsvProtInfo4 {
        spi_ops: StateProtectOps4,
        spi_hash_alg: u32,
        spi_encr_alg: u32,
        spi_ssv_len: u32,
        spi_window: u32,
        spi_handles: Array<GssHandle4, GSS_HANDLES_MAX>,
    }
}

xdr_union! {
    /// `state_protect4_a`: the protection a client asks for.
    StateProtect4A {
        StateProtectHow4::Sp4None => Sp4None,
        StateProtectHow4::Sp4MachCred => Sp4MachCred(StateProtectOps4),
        StateProtectHow4::Sp4Ssv => Sp4Ssv(SsvSpParms4),
    }
}

xdr_union! {
    /// `state_protect4_r`: the protection the server grants.
    StateProtect4R {
        StateProtectHow4::Sp4None => Sp4None,
        StateProtectHow4::Sp4MachCred => Sp4MachCred(StateProtectOps4),
        StateProtectHow4::Sp4Ssv => Sp4Ssv(SsvProtInfo4),
    }
}

xdr_structs! {
    /// `EXCHANGE_ID4args`.
    ExchangeId4Args {
        eia_clientowner: ClientOwner4,
        eia_flags: u32,
        eia_state_protect: StateProtect4A,
        /// `nfs_impl_id4 eia_client_impl_id<1>`.
        eia_client_impl_id: Option<NfsImplId4>,
    }

    /// `EXCHANGE_ID4resok`.
    ExchangeId4ResOk {
        eir_clientid: Clientid4,
        eir_sequenceid: Sequenceid4,
        eir_flags: u32,
        eir_state_protect: StateProtect4R,
        eir_server_owner: ServerOwner4,
        eir_server_scope: Opaque<NFS4_OPAQUE_LIMIT>,
        /// `nfs_impl_id4 eir_server_impl_id<1>`.
        eir_server_impl_id: Option<NfsImplId4>,
    }
}
pub type ExchangeId4Res = Nfs4Result<ExchangeId4ResOk>;

// CREATE_SESSION, DESTROY_SESSION (sections 18.36, 18.37)

pub const CREATE_SESSION4_FLAG_PERSIST: u32 = 0x1;
pub const CREATE_SESSION4_FLAG_CONN_BACK_CHAN: u32 = 0x2;
pub const CREATE_SESSION4_FLAG_CONN_RDMA: u32 = 0x4;

xdr_structs! {
    /// `channel_attrs4`: the sizes and counts of one channel, asked by the
    /// client and granted (no larger) by the server.
    #[derive(Default)]
    ChannelAttrs4 {
        ca_headerpadsize: Count4,
        ca_maxrequestsize: Count4,
        ca_maxresponsesize: Count4,
        ca_maxresponsesize_cached: Count4,
        ca_maxoperations: Count4,
        ca_maxrequests: Count4,
        /// `uint32_t ca_rdma_ird<1>`.
        ca_rdma_ird: Option<u32>,
    }

    /// `CREATE_SESSION4args`.
    #[derive(Default)]
    CreateSession4Args {
        csa_clientid: Clientid4,
        csa_sequence: Sequenceid4,
        csa_flags: u32,
        csa_fore_chan_attrs: ChannelAttrs4,
        csa_back_chan_attrs: ChannelAttrs4,
        csa_cb_program: u32,
        csa_sec_parms: CallbackSecParmsList4,
    }

    /// `CREATE_SESSION4resok`.
    #[derive(Default)]
    CreateSession4ResOk {
        csr_sessionid: Sessionid4,
        csr_sequence: Sequenceid4,
        csr_flags: u32,
        csr_fore_chan_attrs: ChannelAttrs4,
        csr_back_chan_attrs: ChannelAttrs4,
    }

    /// `DESTROY_SESSION4args`.
    #[derive(Default)]
    DestroySession4Args { dsa_sessionid: Sessionid4 }
}
pub type CreateSession4Res = Nfs4Result<CreateSession4ResOk>;
pub type DestroySession4Res = Nfsstat4;

// FREE_STATEID, GET_DIR_DELEGATION (sections 18.38, 18.39)

/// `attr_notice4`.
pub type AttrNotice4 = Nfstime4;

xdr_enums! {
    /// `gddrnf4_status`.
    Gddrnf4Status { Gdd4Ok = 0, Gdd4Unavail = 1 }
}

xdr_structs! {
    /// `FREE_STATEID4args`.
    #[derive(Default)]
    FreeStateid4Args { fsa_stateid: Stateid4 }

    /// `GET_DIR_DELEGATION4args`.
    #[derive(Default)]
    GetDirDelegation4Args {
        gdda_signal_deleg_avail: bool,
        gdda_notification_types: Bitmap4,
        gdda_child_attr_delay: AttrNotice4,
        gdda_dir_attr_delay: AttrNotice4,
        gdda_child_attributes: Bitmap4,
        gdda_dir_attributes: Bitmap4,
    }

    /// `GET_DIR_DELEGATION4resok`.
    #[derive(Default)]
    GetDirDelegation4ResOk {
        gddr_cookieverf: Verifier4,
        gddr_stateid: Stateid4,
        gddr_notification: Bitmap4,
        gddr_child_attributes: Bitmap4,
        gddr_dir_attributes: Bitmap4,
    }
}
pub type FreeStateid4Res = Nfsstat4;

xdr_union! {
    /// `GET_DIR_DELEGATION4res_non_fatal`: a delegation, or none and
    /// whether the server will signal when one is available.
    GetDirDelegation4ResNonFatal {
        Gddrnf4Status::Gdd4Ok => Gdd4Ok(GetDirDelegation4ResOk),
        Gddrnf4Status::Gdd4Unavail => Gdd4Unavail(bool),
    }
}
pub type GetDirDelegation4Res = Nfs4Result<GetDirDelegation4ResNonFatal>;

// SECINFO_NO_NAME, SEQUENCE, SET_SSV, TEST_STATEID (sections 18.45 to 18.48)

xdr_enums! {
    /// `secinfo_style4`: SECINFO_NO_NAME's argument.
    SecinfoStyle4 { Secinfo4StyleCurrentFh = 0, Secinfo4StyleParent = 1 }
}
pub type SecinfoNoName4Args = SecinfoStyle4;
pub type SecinfoNoName4Res = Secinfo4Res;

// `sr_status_flags` of SEQUENCE4resok.
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x0000_0001;
pub const SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRING: u32 = 0x0000_0002;
pub const SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRED: u32 = 0x0000_0004;
pub const SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED: u32 = 0x0000_0008;
pub const SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED: u32 = 0x0000_0010;
pub const SEQ4_STATUS_ADMIN_STATE_REVOKED: u32 = 0x0000_0020;
pub const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x0000_0040;
pub const SEQ4_STATUS_LEASE_MOVED: u32 = 0x0000_0080;
pub const SEQ4_STATUS_RESTART_RECLAIM_NEEDED: u32 = 0x0000_0100;
pub const SEQ4_STATUS_CB_PATH_DOWN_SESSION: u32 = 0x0000_0200;
pub const SEQ4_STATUS_BACKCHANNEL_FAULT: u32 = 0x0000_0400;
pub const SEQ4_STATUS_DEVID_CHANGED: u32 = 0x0000_0800;
pub const SEQ4_STATUS_DEVID_DELETED: u32 = 0x0000_1000;

xdr_structs! {
    /// `SEQUENCE4args`: the first operation of every 4.1 COMPOUND but the
    /// few that may stand alone.
    #[derive(Default)]
    Sequence4Args {
        sa_sessionid: Sessionid4,
        sa_sequenceid: Sequenceid4,
        sa_slotid: Slotid4,
        sa_highest_slotid: Slotid4,
        sa_cachethis: bool,
    }

    /// `SEQUENCE4resok`.
    #[derive(Default)]
    Sequence4ResOk {
        sr_sessionid: Sessionid4,
        sr_sequenceid: Sequenceid4,
        sr_slotid: Slotid4,
        sr_highest_slotid: Slotid4,
        sr_target_highest_slotid: Slotid4,
        sr_status_flags: u32,
    }

    /// `SET_SSV4args`, kept opaque: Keel does not offer SSV protection.
    #[derive(Default)]
    SetSsv4Args { ssa_ssv: Opaque<SSV_MAX>, ssa_digest: Opaque<SSV_MAX> }

    /// `SET_SSV4resok`.
    #[derive(Default)]
    SetSsv4ResOk { ssr_digest: Opaque<SSV_MAX> }

    /// `TEST_STATEID4args`.
    #[derive(Default)]
    TestStateid4Args { ts_stateids: Array<Stateid4, TEST_STATEIDS_MAX> }

    /// `TEST_STATEID4resok`: one status per stateid, in order.
    #[derive(Default)]
    TestStateid4ResOk { tsr_status_codes: Array<Nfsstat4, TEST_STATEIDS_MAX> }
}
pub type Sequence4Res = Nfs4Result<Sequence4ResOk>;
pub type SetSsv4Res = Nfs4Result<SetSsv4ResOk>;
pub type TestStateid4Res = Nfs4Result<TestStateid4ResOk>;

// WANT_DELEGATION, DESTROY_CLIENTID, RECLAIM_COMPLETE (sections 18.49 to
// 18.51)

xdr_union! {
    /// `deleg_claim4`.
    DelegClaim4 {
        OpenClaimType4::ClaimFh => ClaimFh,
        OpenClaimType4::ClaimDelegPrevFh => ClaimDelegPrevFh,
        OpenClaimType4::ClaimPrevious => ClaimPrevious(OpenDelegationType4),
    }
}

xdr_structs! {
    /// `WANT_DELEGATION4args`: `wda_want` holds the
    /// `OPEN4_SHARE_ACCESS_WANT_*` bits.
    WantDelegation4Args { wda_want: u32, wda_claim: DelegClaim4 }

    /// `DESTROY_CLIENTID4args`.
    #[derive(Default)]
    DestroyClientid4Args { dca_clientid: Clientid4 }

    /// `RECLAIM_COMPLETE4args`: with `rca_one_fs`, for CURRENT_FH's file
    /// system only.
    #[derive(Default)]
    ReclaimComplete4Args { rca_one_fs: bool }
}
pub type WantDelegation4Res = Nfs4Result<OpenDelegation4>;
pub type DestroyClientid4Res = Nfsstat4;
pub type ReclaimComplete4Res = Nfsstat4;

//! Protocol data types shared by many operations (RFC 8881 section 3,
//! RFC 7862 section 4 for 4.2's): handles, names, times, stateids, owners.

use keel_xdr::Opaque;
use keel_xdr::bytes_newtype;

use crate::{
    Array, COMPONENT4_DECODE_MAX, COMPOUND_TAG_MAX, FS_LOCATIONS_MAX, LINKTEXT4_MAX, NETADDR4_STRING_MAX, NFS4_FHSIZE,
    NFS4_OPAQUE_LIMIT, NFS4_OTHER_SIZE, NFS4_SESSIONID_SIZE, NFS4_VERIFIER_SIZE, Nfsstat4, PATHNAME4_COMPONENTS_MAX,
    SEC_LABEL4_MAX, SEC_OID4_MAX, UTF8STR4_MAX,
};

pub type Changeid4 = u64;
pub type Clientid4 = u64;
pub type Count4 = u32;
pub type Length4 = u64;
pub type Mode4 = u32;
pub type NfsCookie4 = u64;
pub type Offset4 = u64;
pub type Qop4 = u32;
pub type Sequenceid4 = u32;
pub type Seqid4 = u32;
pub type Slotid4 = u32;
pub type NfsLease4 = u32;
pub type Policy4 = u32;

/// `verifier4`: an opaque 8-byte verifier (write, cookie, exclusive create,
/// client boot instance).
pub type Verifier4 = [u8; NFS4_VERIFIER_SIZE];
/// `sessionid4`.
pub type Sessionid4 = [u8; NFS4_SESSIONID_SIZE];

bytes_newtype!(
    /// `nfs_fh4`: an opaque file handle of at most [`NFS4_FHSIZE`] bytes.
    NfsFh4,
    NFS4_FHSIZE
);

bytes_newtype!(
    /// `utf8str_cs`: a case-sensitive UTF-8 string (implementation names).
    /// Decoding checks the length only.
    Utf8StrCs,
    UTF8STR4_MAX
);

bytes_newtype!(
    /// `utf8str_cis`: a case-insensitive UTF-8 string (domains, server
    /// names). Decoding checks the length only.
    Utf8StrCis,
    UTF8STR4_MAX
);

bytes_newtype!(
    /// `utf8str_mixed`: an owner or group name (`user@domain` or a numeric
    /// id), or an ACE's `who`. Decoding checks the length only; mapping it
    /// to an id is the server's (`NFS4ERR_BADOWNER`).
    Utf8StrMixed,
    UTF8STR4_MAX
);

bytes_newtype!(
    /// The `tag` of a COMPOUND or CB_COMPOUND (a `utf8str_cs`), echoed in
    /// the reply; at most [`COMPOUND_TAG_MAX`] bytes.
    Tag4,
    COMPOUND_TAG_MAX
);

bytes_newtype!(
    /// `component4`: one path component. Decodes up to
    /// [`COMPONENT4_DECODE_MAX`] bytes; [`Component4::check`] classifies it
    /// as the server must.
    Component4,
    COMPONENT4_DECODE_MAX
);

bytes_newtype!(
    /// `linktext4`: a symbolic link's target, at most [`LINKTEXT4_MAX`]
    /// bytes.
    Linktext4,
    LINKTEXT4_MAX
);

bytes_newtype!(
    /// `sec_oid4`: a GSS-API mechanism OID in DER.
    SecOid4,
    SEC_OID4_MAX
);

/// `pathname4`: components from a root.
pub type Pathname4 = Array<Component4, PATHNAME4_COMPONENTS_MAX>;

impl Component4 {
    /// Classifies a component name the way RFC 8881 section 14.5 (and
    /// knfsd) requires of every operation that takes one, in this order:
    /// empty → `NFS4ERR_INVAL`; `.` or `..` → `NFS4ERR_BADNAME`; longer
    /// than `name_max` bytes → `NFS4ERR_NAMETOOLONG`; not UTF-8 →
    /// `NFS4ERR_INVAL`. Otherwise the name as a string.
    ///
    /// A `/` or NUL inside the name is not checked here: what a server
    /// refuses beyond the RFC's wire rules (`NFS4ERR_BADNAME`,
    /// `NFS4ERR_BADCHAR`) is its own policy.
    pub fn check(&self, name_max: usize) -> Result<&str, Nfsstat4> {
        match self.as_bytes() {
            [] => Err(Nfsstat4::Inval),
            b"." | b".." => Err(Nfsstat4::Badname),
            b if b.len() > name_max => Err(Nfsstat4::Nametoolong),
            b => std::str::from_utf8(b).map_err(|_| Nfsstat4::Inval),
        }
    }
}

xdr_enums! {
    /// `nfs_ftype4`.
    NfsFtype4 {
        Nf4reg = 1,
        Nf4dir = 2,
        Nf4blk = 3,
        Nf4chr = 4,
        Nf4lnk = 5,
        Nf4sock = 6,
        Nf4fifo = 7,
        Nf4attrdir = 8,
        Nf4namedattr = 9,
    }

    /// `time_how4`: the discriminant of [`Settime4`].
    TimeHow4 {
        SetToServerTime4 = 0,
        SetToClientTime4 = 1,
    }

    /// `nfs_lock_type4`; the `W` types are blocking requests.
    NfsLockType4 {
        ReadLt = 1,
        WriteLt = 2,
        ReadwLt = 3,
        WritewLt = 4,
    }

    /// `stable_how4`: how durable a WRITE must be before the reply.
    StableHow4 {
        Unstable4 = 0,
        DataSync4 = 1,
        FileSync4 = 2,
    }

    /// `change_attr_type4` (RFC 7862 section 12.2.3): how the `change`
    /// attribute moves.
    ChangeAttrType4 {
        IsMonotonicIncr = 0,
        IsVersionCounter = 1,
        IsVersionCounterNopnfs = 2,
        IsTimeMetadata = 3,
        IsUndefined = 4,
    }
}

xdr_structs! {
    /// `nfstime4`: seconds (signed) and nanoseconds since the epoch.
    #[derive(Default, Copy, PartialOrd, Ord)]
    Nfstime4 {
        seconds: i64,
        nseconds: u32,
    }

    /// `fsid4`: a file system's identity.
    #[derive(Default, Copy)]
    Fsid4 {
        major: u64,
        minor: u64,
    }

    /// `specdata4`: device numbers of a block or character special file.
    #[derive(Default, Copy)]
    Specdata4 {
        specdata1: u32,
        specdata2: u32,
    }

    /// `stateid4` (RFC 8881 section 8.2). See the special stateids on
    /// [`Stateid4`]'s associated constants.
    #[derive(Default, Copy)]
    Stateid4 {
        seqid: u32,
        other: [u8; NFS4_OTHER_SIZE],
    }

    /// `change_info4`: a directory's change attribute before and after an
    /// operation, and whether nothing else happened in between.
    #[derive(Default, Copy)]
    ChangeInfo4 {
        atomic: bool,
        before: Changeid4,
        after: Changeid4,
    }

    /// `fs_location4`: one place a file system can be found.
    #[derive(Default)]
    FsLocation4 {
        server: Array<Utf8StrCis, FS_LOCATIONS_MAX>,
        rootpath: Pathname4,
    }

    /// `fs_locations4`: the `fs_locations` attribute (Keel sends an empty
    /// list: it has no referrals).
    #[derive(Default)]
    FsLocations4 {
        fs_root: Pathname4,
        locations: Array<FsLocation4, FS_LOCATIONS_MAX>,
    }

    /// `nfsace4`: one access control entry. ACLs are not served; an ACE
    /// appears only as a delegation's `permissions`.
    #[derive(Default)]
    Nfsace4 {
        type_: u32,
        flag: u32,
        access_mask: u32,
        who: Utf8StrMixed,
    }

    /// `netaddr4`: an RPC network id and universal address (RFC 5665).
    #[derive(Default)]
    Netaddr4 {
        na_r_netid: Opaque<NETADDR4_STRING_MAX>,
        na_r_addr: Opaque<NETADDR4_STRING_MAX>,
    }

    /// `nfs_impl_id4`: who wrote a client's or server's implementation.
    #[derive(Default)]
    NfsImplId4 {
        nii_domain: Utf8StrCis,
        nii_name: Utf8StrCs,
        nii_date: Nfstime4,
    }

    /// `client_owner4`: a client's long-lived identity and boot instance.
    #[derive(Default)]
    ClientOwner4 {
        co_verifier: Verifier4,
        co_ownerid: Opaque<NFS4_OPAQUE_LIMIT>,
    }

    /// `server_owner4`: which servers share state (minor id) and which can
    /// trunk sessions (major id).
    #[derive(Default)]
    ServerOwner4 {
        so_minor_id: u64,
        so_major_id: Opaque<NFS4_OPAQUE_LIMIT>,
    }

    /// `state_owner4`, also `open_owner4` and `lock_owner4`.
    #[derive(Default)]
    StateOwner4 {
        clientid: Clientid4,
        owner: Opaque<NFS4_OPAQUE_LIMIT>,
    }

    /// `labelformat_spec4` (RFC 7862 section 12.2.2).
    #[derive(Default, Copy)]
    LabelformatSpec4 {
        lfs_lfs: Policy4,
        lfs_pi: Policy4,
    }

    /// `sec_label4`: a security label (the `sec_label` attribute).
    #[derive(Default)]
    SecLabel4 {
        slai_lfs: LabelformatSpec4,
        slai_data: Opaque<SEC_LABEL4_MAX>,
    }
}

pub type OpenOwner4 = StateOwner4;
pub type LockOwner4 = StateOwner4;
/// `clientaddr4`.
pub type Clientaddr4 = Netaddr4;

impl Stateid4 {
    /// The anonymous stateid: I/O without any open or lock state.
    pub const ANONYMOUS: Stateid4 = Stateid4 { seqid: 0, other: [0; NFS4_OTHER_SIZE] };
    /// The READ bypass stateid: a READ that ignores share reservations.
    pub const READ_BYPASS: Stateid4 = Stateid4 { seqid: u32::MAX, other: [0xff; NFS4_OTHER_SIZE] };
    /// The current stateid: the one the previous operation of the COMPOUND
    /// returned or used.
    pub const CURRENT: Stateid4 = Stateid4 { seqid: 1, other: [0; NFS4_OTHER_SIZE] };
    /// The invalid stateid: never valid (a client's placeholder).
    pub const INVALID: Stateid4 = Stateid4 { seqid: u32::MAX, other: [0; NFS4_OTHER_SIZE] };
}

xdr_union! {
    /// `settime4`: set a time to the server's clock or to the client's
    /// value.
    Settime4 {
        TimeHow4::SetToServerTime4 => SetToServerTime,
        TimeHow4::SetToClientTime4 => SetToClientTime(Nfstime4),
    }
}

// `access` bits of ACCESS (RFC 8881 section 18.1).
pub const ACCESS4_READ: u32 = 0x0001;
pub const ACCESS4_LOOKUP: u32 = 0x0002;
pub const ACCESS4_MODIFY: u32 = 0x0004;
pub const ACCESS4_EXTEND: u32 = 0x0008;
pub const ACCESS4_DELETE: u32 = 0x0010;
pub const ACCESS4_EXECUTE: u32 = 0x0020;

// `mode` bits (RFC 8881 section 6.2.4).
pub const MODE4_SUID: u32 = 0o4000;
pub const MODE4_SGID: u32 = 0o2000;
pub const MODE4_SVTX: u32 = 0o1000;
pub const MODE4_RUSR: u32 = 0o400;
pub const MODE4_WUSR: u32 = 0o200;
pub const MODE4_XUSR: u32 = 0o100;
pub const MODE4_RGRP: u32 = 0o040;
pub const MODE4_WGRP: u32 = 0o020;
pub const MODE4_XGRP: u32 = 0o010;
pub const MODE4_ROTH: u32 = 0o004;
pub const MODE4_WOTH: u32 = 0o002;
pub const MODE4_XOTH: u32 = 0o001;

// Values of `fh_expire_type` (RFC 8881 section 4.2.1).
pub const FH4_PERSISTENT: u32 = 0x0;
pub const FH4_NOEXPIRE_WITH_OPEN: u32 = 0x1;
pub const FH4_VOLATILE_ANY: u32 = 0x2;
pub const FH4_VOL_MIGRATION: u32 = 0x4;
pub const FH4_VOL_RENAME: u32 = 0x8;

// `aclsupport` bits (RFC 8881 section 6.2.1.2); Keel reports none.
pub const ACL4_SUPPORT_ALLOW_ACL: u32 = 0x1;
pub const ACL4_SUPPORT_DENY_ACL: u32 = 0x2;
pub const ACL4_SUPPORT_AUDIT_ACL: u32 = 0x4;
pub const ACL4_SUPPORT_ALARM_ACL: u32 = 0x8;

// ACE types (RFC 8881 section 6.2.1.1).
pub const ACE4_ACCESS_ALLOWED_ACE_TYPE: u32 = 0;
pub const ACE4_ACCESS_DENIED_ACE_TYPE: u32 = 1;
pub const ACE4_SYSTEM_AUDIT_ACE_TYPE: u32 = 2;
pub const ACE4_SYSTEM_ALARM_ACE_TYPE: u32 = 3;

//! Arguments and results of the operations NFSv4.0 already had, ACCESS to
//! RELEASE_LOCKOWNER (RFC 8881 sections 18.1 to 18.32). The five that 4.1
//! made "must not implement" (RFC 8881 section 17: OPEN_CONFIRM, RENEW,
//! SETCLIENTID, SETCLIENTID_CONFIRM, RELEASE_LOCKOWNER; their XDR is RFC
//! 7530's) decode all the same, so that the server can answer them with
//! `NFS4ERR_NOTSUPP` and a test client can send them.
//!
//! Operations without arguments (GETFH, LOOKUPP, PUTPUBFH, PUTROOTFH,
//! READLINK, RESTOREFH, SAVEFH) take `()`; results that are only a status
//! are aliases of [`Nfsstat4`].

use bytes::Bytes;
use keel_xdr::{Decode, Decoder, Encode, Encoder, Opaque, XdrError};

use crate::{
    Array, Bitmap4, ChangeInfo4, Clientaddr4, Clientid4, Component4, Count4, Fattr4, Length4, Linktext4, LockOwner4,
    NFS4_OPAQUE_LIMIT, Netaddr4, Nfs4Result, NfsCookie4, NfsFh4, NfsFtype4, NfsLockType4, Nfsace4, Nfsstat4, Offset4,
    OpResult, OpenOwner4, Qop4, READ_DATA_MAX, READDIR_ENTRIES_MAX, RPCSEC_GSS, RpcGssSvc, SECINFO4_MAX, SecOid4,
    Seqid4, Specdata4, StableHow4, Stateid4, Verifier4, WRITE_DATA_MAX,
};

// ACCESS (section 18.1)

xdr_structs! {
    /// `ACCESS4args`: `access` is a mask of the `ACCESS4_*` bits.
    #[derive(Default)]
    Access4Args { access: u32 }

    /// `ACCESS4resok`: which of the asked bits the server could check, and
    /// which of those it grants.
    #[derive(Default)]
    Access4ResOk { supported: u32, access: u32 }
}
pub type Access4Res = Nfs4Result<Access4ResOk>;

// CLOSE (section 18.2)

xdr_structs! {
    /// `CLOSE4args`; `seqid` is ignored in 4.1.
    #[derive(Default)]
    Close4Args { seqid: Seqid4, open_stateid: Stateid4 }
}
/// `CLOSE4res`: the (invalidated) open stateid.
pub type Close4Res = Nfs4Result<Stateid4>;

// COMMIT (section 18.3)

xdr_structs! {
    /// `COMMIT4args`; `count` 0 means "to the end of the file".
    #[derive(Default)]
    Commit4Args { offset: Offset4, count: Count4 }

    /// `COMMIT4resok`.
    #[derive(Default)]
    Commit4ResOk { writeverf: Verifier4 }
}
pub type Commit4Res = Nfs4Result<Commit4ResOk>;

// CREATE (section 18.4)

/// `createtype4`: what CREATE makes (regular files are made by OPEN).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Createtype4 {
    Lnk(Linktext4),
    Blk(Specdata4),
    Chr(Specdata4),
    Sock,
    Fifo,
    Dir,
    /// The union's `default: void` arm: `NF4REG`, `NF4ATTRDIR`,
    /// `NF4NAMEDATTR` or a value that is no `nfs_ftype4`; the server
    /// answers `NFS4ERR_BADTYPE`.
    Other(u32),
}

impl Createtype4 {
    /// The discriminant that goes on the wire.
    pub fn discriminant(&self) -> u32 {
        match self {
            Createtype4::Lnk(_) => NfsFtype4::Nf4lnk as u32,
            Createtype4::Blk(_) => NfsFtype4::Nf4blk as u32,
            Createtype4::Chr(_) => NfsFtype4::Nf4chr as u32,
            Createtype4::Sock => NfsFtype4::Nf4sock as u32,
            Createtype4::Fifo => NfsFtype4::Nf4fifo as u32,
            Createtype4::Dir => NfsFtype4::Nf4dir as u32,
            Createtype4::Other(v) => *v,
        }
    }
}

impl Encode for Createtype4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.discriminant());
        match self {
            Createtype4::Lnk(l) => l.encode(enc),
            Createtype4::Blk(d) | Createtype4::Chr(d) => d.encode(enc),
            Createtype4::Sock | Createtype4::Fifo | Createtype4::Dir | Createtype4::Other(_) => {}
        }
    }
}

impl Decode for Createtype4 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        const LNK: u32 = NfsFtype4::Nf4lnk as u32;
        const BLK: u32 = NfsFtype4::Nf4blk as u32;
        const CHR: u32 = NfsFtype4::Nf4chr as u32;
        const SOCK: u32 = NfsFtype4::Nf4sock as u32;
        const FIFO: u32 = NfsFtype4::Nf4fifo as u32;
        const DIR: u32 = NfsFtype4::Nf4dir as u32;
        Ok(match dec.u32()? {
            LNK => Createtype4::Lnk(Linktext4::decode(dec)?),
            BLK => Createtype4::Blk(Specdata4::decode(dec)?),
            CHR => Createtype4::Chr(Specdata4::decode(dec)?),
            SOCK => Createtype4::Sock,
            FIFO => Createtype4::Fifo,
            DIR => Createtype4::Dir,
            other => Createtype4::Other(other),
        })
    }
}

xdr_structs! {
    /// `CREATE4args`.
    Create4Args { objtype: Createtype4, objname: Component4, createattrs: Fattr4 }

    /// `CREATE4resok`: the directory's change and the attributes set.
    #[derive(Default)]
    Create4ResOk { cinfo: ChangeInfo4, attrset: Bitmap4 }
}
pub type Create4Res = Nfs4Result<Create4ResOk>;

// DELEGPURGE, DELEGRETURN (sections 18.5, 18.6)

xdr_structs! {
    /// `DELEGPURGE4args`.
    #[derive(Default)]
    Delegpurge4Args { clientid: Clientid4 }

    /// `DELEGRETURN4args`.
    #[derive(Default)]
    Delegreturn4Args { deleg_stateid: Stateid4 }
}
pub type Delegpurge4Res = Nfsstat4;
pub type Delegreturn4Res = Nfsstat4;

// GETATTR, GETFH (sections 18.7, 18.8)

xdr_structs! {
    /// `GETATTR4args`.
    #[derive(Default)]
    Getattr4Args { attr_request: Bitmap4 }

    /// `GETATTR4resok`.
    #[derive(Default)]
    Getattr4ResOk { obj_attributes: Fattr4 }

    /// `GETFH4resok`.
    #[derive(Default)]
    Getfh4ResOk { object: NfsFh4 }
}
pub type Getattr4Res = Nfs4Result<Getattr4ResOk>;
pub type Getfh4Res = Nfs4Result<Getfh4ResOk>;

// LINK (section 18.9)

xdr_structs! {
    /// `LINK4args`: SAVED_FH is the object, CURRENT_FH the directory.
    #[derive(Default)]
    Link4Args { newname: Component4 }

    /// `LINK4resok`.
    #[derive(Default)]
    Link4ResOk { cinfo: ChangeInfo4 }
}
pub type Link4Res = Nfs4Result<Link4ResOk>;

// LOCK, LOCKT, LOCKU (sections 18.10 to 18.12)

xdr_structs! {
    /// `open_to_lock_owner4`: the first lock of a lock-owner on an open.
    #[derive(Default)]
    OpenToLockOwner4 {
        open_seqid: Seqid4,
        open_stateid: Stateid4,
        lock_seqid: Seqid4,
        lock_owner: LockOwner4,
    }

    /// `exist_lock_owner4`: a further lock of a lock-owner.
    #[derive(Default)]
    ExistLockOwner4 { lock_stateid: Stateid4, lock_seqid: Seqid4 }
}

xdr_union! {
    /// `locker4`, switched on `new_lock_owner`.
    Locker4 {
        true => OpenOwner(OpenToLockOwner4),
        false => LockOwner(ExistLockOwner4),
    }
}

xdr_structs! {
    /// `LOCK4args`.
    Lock4Args {
        locktype: NfsLockType4,
        reclaim: bool,
        offset: Offset4,
        length: Length4,
        locker: Locker4,
    }

    /// `LOCK4denied`: the conflicting lock.
    #[derive(Default)]
    Lock4Denied {
        offset: Offset4,
        length: Length4,
        locktype: NfsLockType4,
        owner: LockOwner4,
    }

    /// `LOCK4resok`.
    #[derive(Default)]
    Lock4ResOk { lock_stateid: Stateid4 }

    /// `LOCKT4args`.
    #[derive(Default)]
    Lockt4Args {
        locktype: NfsLockType4,
        offset: Offset4,
        length: Length4,
        owner: LockOwner4,
    }

    /// `LOCKU4args`.
    #[derive(Default)]
    Locku4Args {
        locktype: NfsLockType4,
        seqid: Seqid4,
        lock_stateid: Stateid4,
        offset: Offset4,
        length: Length4,
    }
}

status_union! {
    /// `LOCK4res`.
    Lock4Res { Ok(Lock4ResOk), Denied => Denied(Lock4Denied) }
}

status_union! {
    /// `LOCKT4res`: `NFS4_OK` (no conflict) is void.
    Lockt4Res { Ok(()), Denied => Denied(Lock4Denied) }
}

/// `LOCKU4res`: the lock stateid.
pub type Locku4Res = Nfs4Result<Stateid4>;

// LOOKUP, LOOKUPP, NVERIFY (sections 18.13 to 18.15)

xdr_structs! {
    /// `LOOKUP4args`.
    #[derive(Default)]
    Lookup4Args { objname: Component4 }

    /// `NVERIFY4args`: the attribute values the object must not all have.
    #[derive(Default)]
    Nverify4Args { obj_attributes: Fattr4 }
}
pub type Lookup4Res = Nfsstat4;
pub type Lookupp4Res = Nfsstat4;
pub type Nverify4Res = Nfsstat4;

// OPEN (section 18.16)

pub const OPEN4_SHARE_ACCESS_READ: u32 = 0x1;
pub const OPEN4_SHARE_ACCESS_WRITE: u32 = 0x2;
pub const OPEN4_SHARE_ACCESS_BOTH: u32 = 0x3;
pub const OPEN4_SHARE_DENY_NONE: u32 = 0x0;
pub const OPEN4_SHARE_DENY_READ: u32 = 0x1;
pub const OPEN4_SHARE_DENY_WRITE: u32 = 0x2;
pub const OPEN4_SHARE_DENY_BOTH: u32 = 0x3;
/// The delegation wishes in `share_access` (new in 4.1).
pub const OPEN4_SHARE_ACCESS_WANT_DELEG_MASK: u32 = 0xff00;
pub const OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE: u32 = 0x0000;
pub const OPEN4_SHARE_ACCESS_WANT_READ_DELEG: u32 = 0x0100;
pub const OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG: u32 = 0x0200;
pub const OPEN4_SHARE_ACCESS_WANT_ANY_DELEG: u32 = 0x0300;
pub const OPEN4_SHARE_ACCESS_WANT_NO_DELEG: u32 = 0x0400;
pub const OPEN4_SHARE_ACCESS_WANT_CANCEL: u32 = 0x0500;
pub const OPEN4_SHARE_ACCESS_WANT_SIGNAL_DELEG_WHEN_RESRC_AVAIL: u32 = 0x10000;
pub const OPEN4_SHARE_ACCESS_WANT_PUSH_DELEG_WHEN_UNCONTENDED: u32 = 0x20000;

// `rflags` of OPEN4resok.
pub const OPEN4_RESULT_CONFIRM: u32 = 0x02;
pub const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 0x04;
pub const OPEN4_RESULT_PRESERVE_UNLINKED: u32 = 0x08;
pub const OPEN4_RESULT_MAY_NOTIFY_LOCK: u32 = 0x20;

xdr_enums! {
    /// `createmode4`.
    Createmode4 {
        Unchecked4 = 0,
        Guarded4 = 1,
        /// Deprecated in 4.1 for EXCLUSIVE4_1, still to be served.
        Exclusive4 = 2,
        Exclusive4_1 = 3,
    }

    /// `opentype4`.
    Opentype4 { Open4Nocreate = 0, Open4Create = 1 }

    /// `limit_by4`.
    LimitBy4 { NfsLimitSize = 1, NfsLimitBlocks = 2 }

    /// `open_delegation_type4`.
    OpenDelegationType4 {
        OpenDelegateNone = 0,
        OpenDelegateRead = 1,
        OpenDelegateWrite = 2,
        /// New in 4.1: no delegation, and why.
        OpenDelegateNoneExt = 3,
    }

    /// `open_claim_type4`.
    OpenClaimType4 {
        ClaimNull = 0,
        ClaimPrevious = 1,
        ClaimDelegateCur = 2,
        ClaimDelegatePrev = 3,
        ClaimFh = 4,
        ClaimDelegCurFh = 5,
        ClaimDelegPrevFh = 6,
    }

    /// `why_no_delegation4`: the discriminant of [`OpenNoneDelegation4`].
    WhyNoDelegation4 {
        Wnd4NotWanted = 0,
        Wnd4Contention = 1,
        Wnd4Resource = 2,
        Wnd4NotSuppFtype = 3,
        Wnd4WriteDelegNotSuppFtype = 4,
        Wnd4NotSuppUpgrade = 5,
        Wnd4NotSuppDowngrade = 6,
        Wnd4Cancelled = 7,
        Wnd4IsDir = 8,
    }
}

xdr_structs! {
    /// `creatverfattr`: EXCLUSIVE4_1's verifier and attributes.
    #[derive(Default)]
    CreatVerfAttr { cva_verf: Verifier4, cva_attrs: Fattr4 }

    /// `nfs_modified_limit4`.
    #[derive(Default)]
    NfsModifiedLimit4 { num_blocks: u32, bytes_per_block: u32 }

    /// `open_claim_delegate_cur4`.
    #[derive(Default)]
    OpenClaimDelegateCur4 { delegate_stateid: Stateid4, file: Component4 }
}

xdr_union! {
    /// `createhow4`.
    Createhow4 {
        Createmode4::Unchecked4 => Unchecked4(Fattr4),
        Createmode4::Guarded4 => Guarded4(Fattr4),
        Createmode4::Exclusive4 => Exclusive4(Verifier4),
        Createmode4::Exclusive4_1 => Exclusive4_1(CreatVerfAttr),
    }
}

xdr_union! {
    /// `openflag4`.
    Openflag4 {
        Opentype4::Open4Nocreate => Open4Nocreate,
        Opentype4::Open4Create => Open4Create(Createhow4),
    }
}

xdr_union! {
    /// `nfs_space_limit4`: when a write delegation's holder must flush.
    NfsSpaceLimit4 {
        LimitBy4::NfsLimitSize => NfsLimitSize(u64),
        LimitBy4::NfsLimitBlocks => NfsLimitBlocks(NfsModifiedLimit4),
    }
}

xdr_union! {
    /// `open_claim4`: what OPEN opens, and by which right. CURRENT_FH is the
    /// directory for the arms with a name, the file for the others.
    OpenClaim4 {
        OpenClaimType4::ClaimNull => ClaimNull(Component4),
        OpenClaimType4::ClaimPrevious => ClaimPrevious(OpenDelegationType4),
        OpenClaimType4::ClaimDelegateCur => ClaimDelegateCur(OpenClaimDelegateCur4),
        OpenClaimType4::ClaimDelegatePrev => ClaimDelegatePrev(Component4),
        OpenClaimType4::ClaimFh => ClaimFh,
        OpenClaimType4::ClaimDelegCurFh => ClaimDelegCurFh(Stateid4),
        OpenClaimType4::ClaimDelegPrevFh => ClaimDelegPrevFh,
    }
}

xdr_structs! {
    /// `OPEN4args`; `seqid` is ignored in 4.1.
    Open4Args {
        seqid: Seqid4,
        share_access: u32,
        share_deny: u32,
        owner: OpenOwner4,
        openhow: Openflag4,
        claim: OpenClaim4,
    }

    /// `open_read_delegation4`.
    #[derive(Default)]
    OpenReadDelegation4 { stateid: Stateid4, recall: bool, permissions: Nfsace4 }

    /// `open_write_delegation4`.
    OpenWriteDelegation4 {
        stateid: Stateid4,
        recall: bool,
        space_limit: NfsSpaceLimit4,
        permissions: Nfsace4,
    }
}

xdr_union! {
    /// `open_none_delegation4`: why no delegation was granted, with the
    /// promise the two transient reasons carry.
    OpenNoneDelegation4 {
        WhyNoDelegation4::Wnd4NotWanted => Wnd4NotWanted,
        WhyNoDelegation4::Wnd4Contention =>
            /// `ond_server_will_push_deleg`.
            Wnd4Contention(bool),
        WhyNoDelegation4::Wnd4Resource =>
            /// `ond_server_will_signal_avail`.
            Wnd4Resource(bool),
        WhyNoDelegation4::Wnd4NotSuppFtype => Wnd4NotSuppFtype,
        WhyNoDelegation4::Wnd4WriteDelegNotSuppFtype => Wnd4WriteDelegNotSuppFtype,
        WhyNoDelegation4::Wnd4NotSuppUpgrade => Wnd4NotSuppUpgrade,
        WhyNoDelegation4::Wnd4NotSuppDowngrade => Wnd4NotSuppDowngrade,
        WhyNoDelegation4::Wnd4Cancelled => Wnd4Cancelled,
        WhyNoDelegation4::Wnd4IsDir => Wnd4IsDir,
    }
}

xdr_union! {
    /// `open_delegation4`.
    OpenDelegation4 {
        OpenDelegationType4::OpenDelegateNone => OpenDelegateNone,
        OpenDelegationType4::OpenDelegateRead => OpenDelegateRead(OpenReadDelegation4),
        OpenDelegationType4::OpenDelegateWrite => OpenDelegateWrite(OpenWriteDelegation4),
        OpenDelegationType4::OpenDelegateNoneExt => OpenDelegateNoneExt(OpenNoneDelegation4),
    }
}

xdr_structs! {
    /// `OPEN4resok`.
    Open4ResOk {
        stateid: Stateid4,
        cinfo: ChangeInfo4,
        rflags: u32,
        attrset: Bitmap4,
        delegation: OpenDelegation4,
    }
}
pub type Open4Res = Nfs4Result<Open4ResOk>;

// OPENATTR, OPEN_DOWNGRADE (sections 18.17, 18.18), OPEN_CONFIRM (RFC 7530
// section 16.18)

xdr_structs! {
    /// `OPENATTR4args`.
    #[derive(Default)]
    Openattr4Args { createdir: bool }

    /// `OPEN_CONFIRM4args` (4.0 only).
    #[derive(Default)]
    OpenConfirm4Args { open_stateid: Stateid4, seqid: Seqid4 }

    /// `OPEN_CONFIRM4resok`.
    #[derive(Default)]
    OpenConfirm4ResOk { open_stateid: Stateid4 }

    /// `OPEN_DOWNGRADE4args`.
    #[derive(Default)]
    OpenDowngrade4Args { open_stateid: Stateid4, seqid: Seqid4, share_access: u32, share_deny: u32 }

    /// `OPEN_DOWNGRADE4resok`.
    #[derive(Default)]
    OpenDowngrade4ResOk { open_stateid: Stateid4 }
}
pub type Openattr4Res = Nfsstat4;
pub type OpenConfirm4Res = Nfs4Result<OpenConfirm4ResOk>;
pub type OpenDowngrade4Res = Nfs4Result<OpenDowngrade4ResOk>;

// PUTFH, PUTPUBFH, PUTROOTFH (sections 18.19 to 18.21)

xdr_structs! {
    /// `PUTFH4args`.
    #[derive(Default)]
    Putfh4Args { object: NfsFh4 }
}
pub type Putfh4Res = Nfsstat4;
pub type Putpubfh4Res = Nfsstat4;
pub type Putrootfh4Res = Nfsstat4;

// READ (section 18.22)

xdr_structs! {
    /// `READ4args`.
    #[derive(Default)]
    Read4Args { stateid: Stateid4, offset: Offset4, count: Count4 }
}

/// `READ4resok`. `data` is spliced, not copied, into the output on encode
/// and is a slice of the received record on decode (at most
/// [`READ_DATA_MAX`] bytes). For data the encoder does not hold, see
/// [`Compound4ResEncoder::push_read_spliced`](crate::Compound4ResEncoder::push_read_spliced).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Read4ResOk {
    pub eof: bool,
    pub data: Bytes,
}

impl Encode for Read4ResOk {
    fn encode(&self, enc: &mut Encoder) {
        enc.bool(self.eof);
        enc.opaque_shared(self.data.clone());
    }
}

impl Decode for Read4ResOk {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(Read4ResOk { eof: dec.bool()?, data: dec.opaque(READ_DATA_MAX)? })
    }
}
pub type Read4Res = Nfs4Result<Read4ResOk>;

// READDIR, READLINK (sections 18.23, 18.24)

xdr_structs! {
    /// `READDIR4args`: `dircount` bounds the names and cookies, `maxcount`
    /// the whole READDIR4resok.
    #[derive(Default)]
    Readdir4Args {
        cookie: NfsCookie4,
        cookieverf: Verifier4,
        dircount: Count4,
        maxcount: Count4,
        attr_request: Bitmap4,
    }

    /// `entry4` without its link: [`Dirlist4`] writes the list.
    #[derive(Default)]
    Entry4 { cookie: NfsCookie4, name: Component4, attrs: Fattr4 }
}

impl Entry4 {
    /// Bytes the entry takes in a reply, with the list's leading "value
    /// follows" word: what the server counts against `maxcount`.
    pub fn xdr_len(&self) -> usize {
        4 + 8 + self.name.xdr_len() + self.attrs.xdr_len()
    }

    /// Bytes the entry counts against `dircount` (RFC 8881 section 18.23.2:
    /// the cookie and the name, as XDR).
    pub fn dircount_len(&self) -> usize {
        8 + self.name.xdr_len()
    }
}

/// `dirlist4`: the entries (an XDR linked list of `entry4`) and `eof`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Dirlist4 {
    pub entries: Vec<Entry4>,
    pub eof: bool,
}

impl Encode for Dirlist4 {
    fn encode(&self, enc: &mut Encoder) {
        crate::encode_list(enc, &self.entries);
        enc.bool(self.eof);
    }
}

impl Decode for Dirlist4 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(Dirlist4 { entries: dec.list(READDIR_ENTRIES_MAX)?, eof: dec.bool()? })
    }
}

impl Dirlist4 {
    /// Bytes of a `dirlist4` with no entries (the list's end and `eof`).
    pub const EMPTY_XDR_LEN: usize = 8;
}

xdr_structs! {
    /// `READDIR4resok`.
    #[derive(Default)]
    Readdir4ResOk { cookieverf: Verifier4, reply: Dirlist4 }

    /// `READLINK4resok`.
    #[derive(Default)]
    Readlink4ResOk { link: Linktext4 }
}
pub type Readdir4Res = Nfs4Result<Readdir4ResOk>;
pub type Readlink4Res = Nfs4Result<Readlink4ResOk>;

// REMOVE, RENAME, RESTOREFH, SAVEFH (sections 18.25 to 18.28), RENEW (RFC
// 7530 section 16.29)

xdr_structs! {
    /// `REMOVE4args`.
    #[derive(Default)]
    Remove4Args { target: Component4 }

    /// `REMOVE4resok`.
    #[derive(Default)]
    Remove4ResOk { cinfo: ChangeInfo4 }

    /// `RENAME4args`: SAVED_FH is the source directory, CURRENT_FH the
    /// target directory.
    #[derive(Default)]
    Rename4Args { oldname: Component4, newname: Component4 }

    /// `RENAME4resok`.
    #[derive(Default)]
    Rename4ResOk { source_cinfo: ChangeInfo4, target_cinfo: ChangeInfo4 }

    /// `RENEW4args` (4.0 only).
    #[derive(Default)]
    Renew4Args { clientid: Clientid4 }
}
pub type Remove4Res = Nfs4Result<Remove4ResOk>;
pub type Rename4Res = Nfs4Result<Rename4ResOk>;
pub type Renew4Res = Nfsstat4;
pub type Restorefh4Res = Nfsstat4;
pub type Savefh4Res = Nfsstat4;

// SECINFO (section 18.29)

xdr_structs! {
    /// `SECINFO4args`.
    #[derive(Default)]
    Secinfo4Args { name: Component4 }

    /// `rpcsec_gss_info`.
    #[derive(Default)]
    RpcsecGssInfo { oid: SecOid4, qop: Qop4, service: RpcGssSvc }
}

/// `secinfo4`: one security flavor; RPCSEC_GSS comes with its mechanism
/// and service, every other flavor is just its number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Secinfo4 {
    RpcsecGss(RpcsecGssInfo),
    /// AUTH_NONE, AUTH_SYS, or any flavor but RPCSEC_GSS.
    Flavor(u32),
}

impl Encode for Secinfo4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Secinfo4::RpcsecGss(info) => {
                enc.u32(RPCSEC_GSS);
                info.encode(enc);
            }
            Secinfo4::Flavor(f) => {
                debug_assert_ne!(*f, RPCSEC_GSS, "RPCSEC_GSS needs its info");
                enc.u32(*f);
            }
        }
    }
}

impl Decode for Secinfo4 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(match dec.u32()? {
            RPCSEC_GSS => Secinfo4::RpcsecGss(RpcsecGssInfo::decode(dec)?),
            flavor => Secinfo4::Flavor(flavor),
        })
    }
}

/// `SECINFO4resok`: the flavors, most preferred first.
pub type Secinfo4ResOk = Array<Secinfo4, SECINFO4_MAX>;
pub type Secinfo4Res = Nfs4Result<Secinfo4ResOk>;

// SETATTR (section 18.30)

xdr_structs! {
    /// `SETATTR4args`: `stateid` matters when `size` is set.
    #[derive(Default)]
    Setattr4Args { stateid: Stateid4, obj_attributes: Fattr4 }

    /// `SETATTR4res`: the attributes set, sent with every status.
    #[derive(Default)]
    Setattr4Res { status: Nfsstat4, attrsset: Bitmap4 }
}

impl OpResult for Setattr4Res {
    fn status(&self) -> Nfsstat4 {
        self.status
    }

    fn failed(status: Nfsstat4) -> Self {
        Setattr4Res { status, attrsset: Bitmap4::new() }
    }
}

// SETCLIENTID, SETCLIENTID_CONFIRM (4.0 only: RFC 7530 sections 16.33, 16.34)

xdr_structs! {
    /// `nfs_client_id4`.
    #[derive(Default)]
    NfsClientId4 { verifier: Verifier4, id: Opaque<NFS4_OPAQUE_LIMIT> }

    /// `cb_client4`.
    #[derive(Default)]
    CbClient4 { cb_program: u32, cb_location: Netaddr4 }

    /// `SETCLIENTID4args`.
    #[derive(Default)]
    Setclientid4Args { client: NfsClientId4, callback: CbClient4, callback_ident: u32 }

    /// `SETCLIENTID4resok`.
    #[derive(Default)]
    Setclientid4ResOk { clientid: Clientid4, setclientid_confirm: Verifier4 }

    /// `SETCLIENTID_CONFIRM4args`.
    #[derive(Default)]
    SetclientidConfirm4Args { clientid: Clientid4, setclientid_confirm: Verifier4 }
}

status_union! {
    /// `SETCLIENTID4res`.
    Setclientid4Res { Ok(Setclientid4ResOk), ClidInuse => ClidInuse(Clientaddr4) }
}
pub type SetclientidConfirm4Res = Nfsstat4;

// VERIFY, WRITE (sections 18.31, 18.32), RELEASE_LOCKOWNER (RFC 7530
// section 16.37), ILLEGAL (section 18.52)

xdr_structs! {
    /// `VERIFY4args`: the attribute values the object must have.
    #[derive(Default)]
    Verify4Args { obj_attributes: Fattr4 }
}
pub type Verify4Res = Nfsstat4;

/// `WRITE4args`. `data` is a slice of the received record on decode (at
/// most [`WRITE_DATA_MAX`] bytes) and is spliced, not copied, into the
/// output on encode.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Write4Args {
    pub stateid: Stateid4,
    pub offset: Offset4,
    pub stable: StableHow4,
    pub data: Bytes,
}

impl Encode for Write4Args {
    fn encode(&self, enc: &mut Encoder) {
        self.stateid.encode(enc);
        enc.u64(self.offset);
        self.stable.encode(enc);
        enc.opaque_shared(self.data.clone());
    }
}

impl Decode for Write4Args {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(Write4Args {
            stateid: Stateid4::decode(dec)?,
            offset: dec.u64()?,
            stable: StableHow4::decode(dec)?,
            data: dec.opaque(WRITE_DATA_MAX)?,
        })
    }
}

xdr_structs! {
    /// `WRITE4resok`: `committed` is how durable the data really is.
    #[derive(Default)]
    Write4ResOk { count: Count4, committed: StableHow4, writeverf: Verifier4 }

    /// `RELEASE_LOCKOWNER4args` (4.0 only).
    #[derive(Default)]
    ReleaseLockowner4Args { lock_owner: LockOwner4 }
}
pub type Write4Res = Nfs4Result<Write4ResOk>;
pub type ReleaseLockowner4Res = Nfsstat4;
pub type Illegal4Res = Nfsstat4;

//! `nfsstat4`, the status of every operation and of the COMPOUND (RFC 8881
//! section 15, values in RFC 5662 and RFC 7863), and the shape shared by
//! most operation results.

use keel_xdr::{Decode, Decoder, Encode, Encoder, XdrError};

/// Declares [`Nfsstat4`] from `Variant = value "NAME"` rows.
macro_rules! nfsstat4 {
    ($($variant:ident = $value:literal $text:literal,)*) => {
        /// `nfsstat4`. A value this crate does not know (a newer minor
        /// version's, or a peer's mistake) decodes as `Unknown` rather than
        /// failing, so a reply is never lost over its status; the server
        /// never sends one.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub enum Nfsstat4 {
            #[default]
            $($variant,)*
            /// A value not listed above; [`Nfsstat4::from_u32`] never makes
            /// one of a listed value.
            Unknown(u32),
        }

        impl Nfsstat4 {
            /// Every known status, in value order.
            pub const ALL: &'static [Nfsstat4] = &[$(Nfsstat4::$variant),*];

            /// The status with wire value `value`.
            pub fn from_u32(value: u32) -> Self {
                match value {
                    $($value => Nfsstat4::$variant,)*
                    other => Nfsstat4::Unknown(other),
                }
            }

            /// The wire value.
            pub fn code(self) -> u32 {
                match self {
                    $(Nfsstat4::$variant => $value,)*
                    Nfsstat4::Unknown(v) => v,
                }
            }

            /// The RFC's name, e.g. `"NFS4ERR_NOENT"`.
            pub fn name(self) -> &'static str {
                match self {
                    $(Nfsstat4::$variant => $text,)*
                    Nfsstat4::Unknown(_) => "NFS4ERR_UNKNOWN",
                }
            }
        }
    };
}

nfsstat4! {
    Ok = 0 "NFS4_OK",
    Perm = 1 "NFS4ERR_PERM",
    Noent = 2 "NFS4ERR_NOENT",
    Io = 5 "NFS4ERR_IO",
    Nxio = 6 "NFS4ERR_NXIO",
    Access = 13 "NFS4ERR_ACCESS",
    Exist = 17 "NFS4ERR_EXIST",
    Xdev = 18 "NFS4ERR_XDEV",
    Notdir = 20 "NFS4ERR_NOTDIR",
    Isdir = 21 "NFS4ERR_ISDIR",
    Inval = 22 "NFS4ERR_INVAL",
    Fbig = 27 "NFS4ERR_FBIG",
    Nospc = 28 "NFS4ERR_NOSPC",
    Rofs = 30 "NFS4ERR_ROFS",
    Mlink = 31 "NFS4ERR_MLINK",
    Nametoolong = 63 "NFS4ERR_NAMETOOLONG",
    Notempty = 66 "NFS4ERR_NOTEMPTY",
    Dquot = 69 "NFS4ERR_DQUOT",
    Stale = 70 "NFS4ERR_STALE",
    Badhandle = 10001 "NFS4ERR_BADHANDLE",
    BadCookie = 10003 "NFS4ERR_BAD_COOKIE",
    Notsupp = 10004 "NFS4ERR_NOTSUPP",
    Toosmall = 10005 "NFS4ERR_TOOSMALL",
    Serverfault = 10006 "NFS4ERR_SERVERFAULT",
    Badtype = 10007 "NFS4ERR_BADTYPE",
    Delay = 10008 "NFS4ERR_DELAY",
    Same = 10009 "NFS4ERR_SAME",
    Denied = 10010 "NFS4ERR_DENIED",
    Expired = 10011 "NFS4ERR_EXPIRED",
    Locked = 10012 "NFS4ERR_LOCKED",
    Grace = 10013 "NFS4ERR_GRACE",
    Fhexpired = 10014 "NFS4ERR_FHEXPIRED",
    ShareDenied = 10015 "NFS4ERR_SHARE_DENIED",
    Wrongsec = 10016 "NFS4ERR_WRONGSEC",
    ClidInuse = 10017 "NFS4ERR_CLID_INUSE",
    Resource = 10018 "NFS4ERR_RESOURCE",
    Moved = 10019 "NFS4ERR_MOVED",
    Nofilehandle = 10020 "NFS4ERR_NOFILEHANDLE",
    MinorVersMismatch = 10021 "NFS4ERR_MINOR_VERS_MISMATCH",
    StaleClientid = 10022 "NFS4ERR_STALE_CLIENTID",
    StaleStateid = 10023 "NFS4ERR_STALE_STATEID",
    OldStateid = 10024 "NFS4ERR_OLD_STATEID",
    BadStateid = 10025 "NFS4ERR_BAD_STATEID",
    BadSeqid = 10026 "NFS4ERR_BAD_SEQID",
    NotSame = 10027 "NFS4ERR_NOT_SAME",
    LockRange = 10028 "NFS4ERR_LOCK_RANGE",
    Symlink = 10029 "NFS4ERR_SYMLINK",
    Restorefh = 10030 "NFS4ERR_RESTOREFH",
    LeaseMoved = 10031 "NFS4ERR_LEASE_MOVED",
    Attrnotsupp = 10032 "NFS4ERR_ATTRNOTSUPP",
    NoGrace = 10033 "NFS4ERR_NO_GRACE",
    ReclaimBad = 10034 "NFS4ERR_RECLAIM_BAD",
    ReclaimConflict = 10035 "NFS4ERR_RECLAIM_CONFLICT",
    Badxdr = 10036 "NFS4ERR_BADXDR",
    LocksHeld = 10037 "NFS4ERR_LOCKS_HELD",
    Openmode = 10038 "NFS4ERR_OPENMODE",
    Badowner = 10039 "NFS4ERR_BADOWNER",
    Badchar = 10040 "NFS4ERR_BADCHAR",
    Badname = 10041 "NFS4ERR_BADNAME",
    BadRange = 10042 "NFS4ERR_BAD_RANGE",
    LockNotsupp = 10043 "NFS4ERR_LOCK_NOTSUPP",
    OpIllegal = 10044 "NFS4ERR_OP_ILLEGAL",
    Deadlock = 10045 "NFS4ERR_DEADLOCK",
    FileOpen = 10046 "NFS4ERR_FILE_OPEN",
    AdminRevoked = 10047 "NFS4ERR_ADMIN_REVOKED",
    CbPathDown = 10048 "NFS4ERR_CB_PATH_DOWN",
    Badiomode = 10049 "NFS4ERR_BADIOMODE",
    Badlayout = 10050 "NFS4ERR_BADLAYOUT",
    BadSessionDigest = 10051 "NFS4ERR_BAD_SESSION_DIGEST",
    Badsession = 10052 "NFS4ERR_BADSESSION",
    Badslot = 10053 "NFS4ERR_BADSLOT",
    CompleteAlready = 10054 "NFS4ERR_COMPLETE_ALREADY",
    ConnNotBoundToSession = 10055 "NFS4ERR_CONN_NOT_BOUND_TO_SESSION",
    DelegAlreadyWanted = 10056 "NFS4ERR_DELEG_ALREADY_WANTED",
    BackChanBusy = 10057 "NFS4ERR_BACK_CHAN_BUSY",
    Layouttrylater = 10058 "NFS4ERR_LAYOUTTRYLATER",
    Layoutunavailable = 10059 "NFS4ERR_LAYOUTUNAVAILABLE",
    NomatchingLayout = 10060 "NFS4ERR_NOMATCHING_LAYOUT",
    Recallconflict = 10061 "NFS4ERR_RECALLCONFLICT",
    UnknownLayouttype = 10062 "NFS4ERR_UNKNOWN_LAYOUTTYPE",
    SeqMisordered = 10063 "NFS4ERR_SEQ_MISORDERED",
    SequencePos = 10064 "NFS4ERR_SEQUENCE_POS",
    ReqTooBig = 10065 "NFS4ERR_REQ_TOO_BIG",
    RepTooBig = 10066 "NFS4ERR_REP_TOO_BIG",
    RepTooBigToCache = 10067 "NFS4ERR_REP_TOO_BIG_TO_CACHE",
    RetryUncachedRep = 10068 "NFS4ERR_RETRY_UNCACHED_REP",
    UnsafeCompound = 10069 "NFS4ERR_UNSAFE_COMPOUND",
    TooManyOps = 10070 "NFS4ERR_TOO_MANY_OPS",
    OpNotInSession = 10071 "NFS4ERR_OP_NOT_IN_SESSION",
    HashAlgUnsupp = 10072 "NFS4ERR_HASH_ALG_UNSUPP",
    ClientidBusy = 10074 "NFS4ERR_CLIENTID_BUSY",
    PnfsIoHole = 10075 "NFS4ERR_PNFS_IO_HOLE",
    SeqFalseRetry = 10076 "NFS4ERR_SEQ_FALSE_RETRY",
    BadHighSlot = 10077 "NFS4ERR_BAD_HIGH_SLOT",
    Deadsession = 10078 "NFS4ERR_DEADSESSION",
    EncrAlgUnsupp = 10079 "NFS4ERR_ENCR_ALG_UNSUPP",
    PnfsNoLayout = 10080 "NFS4ERR_PNFS_NO_LAYOUT",
    NotOnlyOp = 10081 "NFS4ERR_NOT_ONLY_OP",
    WrongCred = 10082 "NFS4ERR_WRONG_CRED",
    WrongType = 10083 "NFS4ERR_WRONG_TYPE",
    DirdelegUnavail = 10084 "NFS4ERR_DIRDELEG_UNAVAIL",
    RejectDeleg = 10085 "NFS4ERR_REJECT_DELEG",
    Returnconflict = 10086 "NFS4ERR_RETURNCONFLICT",
    DelegRevoked = 10087 "NFS4ERR_DELEG_REVOKED",
    PartnerNotsupp = 10088 "NFS4ERR_PARTNER_NOTSUPP",
    PartnerNoAuth = 10089 "NFS4ERR_PARTNER_NO_AUTH",
    UnionNotsupp = 10090 "NFS4ERR_UNION_NOTSUPP",
    OffloadDenied = 10091 "NFS4ERR_OFFLOAD_DENIED",
    WrongLfs = 10092 "NFS4ERR_WRONG_LFS",
    Badlabel = 10093 "NFS4ERR_BADLABEL",
    OffloadNoReqs = 10094 "NFS4ERR_OFFLOAD_NO_REQS",
}

impl std::fmt::Display for Nfsstat4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Nfsstat4::Unknown(v) => write!(f, "nfsstat4 {v}"),
            s => f.write_str(s.name()),
        }
    }
}

impl Encode for Nfsstat4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.code());
    }
}

impl Decode for Nfsstat4 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.u32().map(Nfsstat4::from_u32)
    }
}

/// What every operation result has: a status, and a form that carries
/// nothing but a failure status (what the server sends for an operation it
/// cannot run, e.g. `NFS4ERR_BADXDR` or `NFS4ERR_NOTSUPP`).
pub trait OpResult: Sized {
    /// The status that goes on the wire.
    fn status(&self) -> Nfsstat4;

    /// The result of an operation that failed with `status`. `status` must
    /// be an error whose arm is void (checked in debug builds): `NFS4_OK`
    /// and the few errors that carry a value (e.g. LOCK's
    /// `NFS4ERR_DENIED`) need their value.
    fn failed(status: Nfsstat4) -> Self;
}

/// Operations whose result is the status alone (`LOOKUP4res`, ...).
impl OpResult for Nfsstat4 {
    fn status(&self) -> Nfsstat4 {
        *self
    }

    fn failed(status: Nfsstat4) -> Self {
        status
    }
}

/// The most common result union:
///
/// ```text
/// union XXX4res switch (nfsstat4 status) {
/// case NFS4_OK: XXX4resok resok4;
/// default:      void;
/// };
/// ```
///
/// `Fail` never holds [`Nfsstat4::Ok`]: the decoder cannot produce it, and
/// building one is a programming error (checked in debug builds).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Nfs4Result<T> {
    Ok(T),
    Fail(Nfsstat4),
}

impl<T> Nfs4Result<T> {
    pub fn is_ok(&self) -> bool {
        matches!(self, Nfs4Result::Ok(_))
    }

    /// The `resok4` part, if any.
    pub fn ok(self) -> Option<T> {
        match self {
            Nfs4Result::Ok(t) => Some(t),
            Nfs4Result::Fail(_) => None,
        }
    }

    /// As a standard `Result`, for `?`.
    pub fn into_result(self) -> Result<T, Nfsstat4> {
        match self {
            Nfs4Result::Ok(t) => Ok(t),
            Nfs4Result::Fail(s) => Err(s),
        }
    }
}

impl<T> From<Result<T, Nfsstat4>> for Nfs4Result<T> {
    fn from(r: Result<T, Nfsstat4>) -> Self {
        match r {
            Ok(t) => Nfs4Result::Ok(t),
            Err(s) => Nfs4Result::failed(s),
        }
    }
}

impl<T> OpResult for Nfs4Result<T> {
    fn status(&self) -> Nfsstat4 {
        match self {
            Nfs4Result::Ok(_) => Nfsstat4::Ok,
            Nfs4Result::Fail(s) => *s,
        }
    }

    fn failed(status: Nfsstat4) -> Self {
        debug_assert_ne!(status, Nfsstat4::Ok, "Nfs4Result::Fail with NFS4_OK");
        Nfs4Result::Fail(status)
    }
}

impl<T: Encode> Encode for Nfs4Result<T> {
    fn encode(&self, enc: &mut Encoder) {
        self.status().encode(enc);
        if let Nfs4Result::Ok(t) = self {
            t.encode(enc);
        }
    }
}

impl<T: Decode> Decode for Nfs4Result<T> {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        match Nfsstat4::decode(dec)? {
            Nfsstat4::Ok => Ok(Nfs4Result::Ok(T::decode(dec)?)),
            status => Ok(Nfs4Result::Fail(status)),
        }
    }
}

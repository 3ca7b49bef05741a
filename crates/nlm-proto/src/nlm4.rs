//! NLM version 4 (program 100021).
//!
//! Procedure arguments and results: NULL `()` → `()`; TEST
//! [`Nlm4Testargs`] → [`Nlm4Testres`]; LOCK [`Nlm4Lockargs`] → [`Nlm4Res`];
//! CANCEL [`Nlm4Cancargs`] → [`Nlm4Res`]; UNLOCK [`Nlm4Unlockargs`] →
//! [`Nlm4Res`]; GRANTED [`Nlm4Testargs`] → [`Nlm4Res`]; the `_MSG` forms
//! take the same arguments and answer nothing (the result comes back as a
//! call of the matching `_RES` procedure, whose argument is the result);
//! SHARE and UNSHARE [`Nlm4Shareargs`] → [`Nlm4Shareres`]; NM_LOCK
//! [`Nlm4Lockargs`] → [`Nlm4Res`]; FREE_ALL [`Nlm4Notify`] → `()`.
//! Procedures 16 to 19 do not exist.

use keel_xdr::{Decode, Decoder, Encode, Encoder, Opaque, XdrError, xdr_enum, xdr_struct};

pub const NLM_PROGRAM: u32 = 100021;
pub const NLM_V4: u32 = 4;
/// `LM_MAXSTRLEN`: the longest caller name.
pub const LM_MAXSTRLEN: usize = 1024;
/// `MAXNETOBJ_SZ`: the longest netobj (cookie, handle, owner).
pub const MAXNETOBJ_SZ: usize = 1024;

/// A netobj: opaque bytes of at most [`MAXNETOBJ_SZ`].
pub type Netobj = Opaque<MAXNETOBJ_SZ>;
/// A caller name: a string of at most [`LM_MAXSTRLEN`] bytes.
pub type CallerName = Opaque<LM_MAXSTRLEN>;

/// NLM4 procedure numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Nlm4Proc {
    Null = 0,
    Test = 1,
    Lock = 2,
    Cancel = 3,
    Unlock = 4,
    Granted = 5,
    TestMsg = 6,
    LockMsg = 7,
    CancelMsg = 8,
    UnlockMsg = 9,
    GrantedMsg = 10,
    TestRes = 11,
    LockRes = 12,
    CancelRes = 13,
    UnlockRes = 14,
    GrantedRes = 15,
    Share = 20,
    Unshare = 21,
    NmLock = 22,
    FreeAll = 23,
}

impl Nlm4Proc {
    pub const ALL: &'static [Nlm4Proc] = &[
        Nlm4Proc::Null,
        Nlm4Proc::Test,
        Nlm4Proc::Lock,
        Nlm4Proc::Cancel,
        Nlm4Proc::Unlock,
        Nlm4Proc::Granted,
        Nlm4Proc::TestMsg,
        Nlm4Proc::LockMsg,
        Nlm4Proc::CancelMsg,
        Nlm4Proc::UnlockMsg,
        Nlm4Proc::GrantedMsg,
        Nlm4Proc::TestRes,
        Nlm4Proc::LockRes,
        Nlm4Proc::CancelRes,
        Nlm4Proc::UnlockRes,
        Nlm4Proc::GrantedRes,
        Nlm4Proc::Share,
        Nlm4Proc::Unshare,
        Nlm4Proc::NmLock,
        Nlm4Proc::FreeAll,
    ];

    /// The procedure with number `n`; none for 16 to 19 and past 23.
    pub fn from_u32(n: u32) -> Option<Self> {
        Self::ALL.iter().copied().find(|p| *p as u32 == n)
    }
}

/// `nlm4_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Nlm4Stats {
    Granted = 0,
    Denied = 1,
    DeniedNolocks = 2,
    Blocked = 3,
    DeniedGracePeriod = 4,
    Deadlck = 5,
    Rofs = 6,
    StaleFh = 7,
    Fbig = 8,
    Failed = 9,
}

impl Nlm4Stats {
    /// The specification's name, e.g. `"NLM4_DENIED"`.
    pub fn name(self) -> &'static str {
        match self {
            Nlm4Stats::Granted => "NLM4_GRANTED",
            Nlm4Stats::Denied => "NLM4_DENIED",
            Nlm4Stats::DeniedNolocks => "NLM4_DENIED_NOLOCKS",
            Nlm4Stats::Blocked => "NLM4_BLOCKED",
            Nlm4Stats::DeniedGracePeriod => "NLM4_DENIED_GRACE_PERIOD",
            Nlm4Stats::Deadlck => "NLM4_DEADLCK",
            Nlm4Stats::Rofs => "NLM4_ROFS",
            Nlm4Stats::StaleFh => "NLM4_STALE_FH",
            Nlm4Stats::Fbig => "NLM4_FBIG",
            Nlm4Stats::Failed => "NLM4_FAILED",
        }
    }
}

xdr_enum!(Nlm4Stats {
    Granted,
    Denied,
    DeniedNolocks,
    Blocked,
    DeniedGracePeriod,
    Deadlck,
    Rofs,
    StaleFh,
    Fbig,
    Failed
});

/// `nlm4_lock`: who locks what. `svid` is the client's process (or lock
/// owner) id, `oh` its owner handle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nlm4Lock {
    pub caller_name: CallerName,
    pub fh: Netobj,
    pub oh: Netobj,
    pub svid: i32,
    pub l_offset: u64,
    pub l_len: u64,
}
xdr_struct!(Nlm4Lock { caller_name, fh, oh, svid, l_offset, l_len });

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nlm4Lockargs {
    pub cookie: Netobj,
    pub block: bool,
    pub exclusive: bool,
    pub alock: Nlm4Lock,
    pub reclaim: bool,
    /// The client's NSM state number.
    pub state: i32,
}
xdr_struct!(Nlm4Lockargs { cookie, block, exclusive, alock, reclaim, state });

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nlm4Cancargs {
    pub cookie: Netobj,
    pub block: bool,
    pub exclusive: bool,
    pub alock: Nlm4Lock,
}
xdr_struct!(Nlm4Cancargs { cookie, block, exclusive, alock });

/// TEST's and GRANTED's arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nlm4Testargs {
    pub cookie: Netobj,
    pub exclusive: bool,
    pub alock: Nlm4Lock,
}
xdr_struct!(Nlm4Testargs { cookie, exclusive, alock });

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nlm4Unlockargs {
    pub cookie: Netobj,
    pub alock: Nlm4Lock,
}
xdr_struct!(Nlm4Unlockargs { cookie, alock });

/// The holder of a conflicting lock, in a TEST reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nlm4Holder {
    pub exclusive: bool,
    pub svid: i32,
    pub oh: Netobj,
    pub l_offset: u64,
    pub l_len: u64,
}
xdr_struct!(Nlm4Holder { exclusive, svid, oh, l_offset, l_len });

/// `nlm4_res`: LOCK, CANCEL, UNLOCK and GRANTED results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nlm4Res {
    pub cookie: Netobj,
    pub stat: Nlm4Stats,
}
xdr_struct!(Nlm4Res { cookie, stat });

/// `nlm4_testrply`: DENIED carries the holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nlm4Testrply {
    Denied(Nlm4Holder),
    Other(Nlm4Stats),
}

impl Nlm4Testrply {
    /// The status on the wire.
    pub fn status(&self) -> Nlm4Stats {
        match self {
            Nlm4Testrply::Denied(_) => Nlm4Stats::Denied,
            Nlm4Testrply::Other(s) => *s,
        }
    }
}

impl Encode for Nlm4Testrply {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Nlm4Testrply::Denied(h) => {
                Nlm4Stats::Denied.encode(enc);
                h.encode(enc);
            }
            Nlm4Testrply::Other(s) => s.encode(enc),
        }
    }
}

impl Decode for Nlm4Testrply {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        match Nlm4Stats::decode(dec)? {
            Nlm4Stats::Denied => Ok(Nlm4Testrply::Denied(Nlm4Holder::decode(dec)?)),
            s => Ok(Nlm4Testrply::Other(s)),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nlm4Testres {
    pub cookie: Netobj,
    pub stat: Nlm4Testrply,
}
xdr_struct!(Nlm4Testres { cookie, stat });

/// `fsh4_mode`: what a DOS share reservation denies others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fsh4Mode {
    DenyNone = 0,
    DenyRead = 1,
    DenyWrite = 2,
    DenyReadWrite = 3,
}
xdr_enum!(Fsh4Mode { DenyNone, DenyRead, DenyWrite, DenyReadWrite });

/// `fsh4_access`: what a share reservation's holder does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fsh4Access {
    None = 0,
    Read = 1,
    Write = 2,
    ReadWrite = 3,
}
xdr_enum!(Fsh4Access { None, Read, Write, ReadWrite });

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nlm4Share {
    pub caller_name: CallerName,
    pub fh: Netobj,
    pub oh: Netobj,
    pub mode: Fsh4Mode,
    pub access: Fsh4Access,
}
xdr_struct!(Nlm4Share { caller_name, fh, oh, mode, access });

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nlm4Shareargs {
    pub cookie: Netobj,
    pub share: Nlm4Share,
    pub reclaim: bool,
}
xdr_struct!(Nlm4Shareargs { cookie, share, reclaim });

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nlm4Shareres {
    pub cookie: Netobj,
    pub stat: Nlm4Stats,
    pub sequence: i32,
}
xdr_struct!(Nlm4Shareres { cookie, stat, sequence });

/// FREE_ALL's argument: a client host and its new NSM state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nlm4Notify {
    pub name: CallerName,
    pub state: i32,
}
xdr_struct!(Nlm4Notify { name, state });

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn roundtrip<T: Encode + Decode + PartialEq + std::fmt::Debug>(v: T) {
        let mut enc = Encoder::new();
        v.encode(&mut enc);
        let mut dec = Decoder::new(enc.into_bytes());
        assert_eq!(T::decode(&mut dec).unwrap(), v);
        dec.finish().unwrap();
    }

    fn lock() -> Nlm4Lock {
        Nlm4Lock {
            caller_name: "client".into(),
            fh: Opaque(Bytes::from_static(&[1; 36])),
            oh: "owner".into(),
            svid: -7,
            l_offset: 1 << 40,
            l_len: 0,
        }
    }

    #[test]
    fn arguments_and_results_roundtrip() {
        roundtrip(Nlm4Lockargs {
            cookie: "c".into(),
            block: true,
            exclusive: true,
            alock: lock(),
            reclaim: false,
            state: 3,
        });
        roundtrip(Nlm4Cancargs { cookie: "c".into(), block: true, exclusive: false, alock: lock() });
        roundtrip(Nlm4Testargs { cookie: "".into(), exclusive: true, alock: lock() });
        roundtrip(Nlm4Unlockargs { cookie: "x".into(), alock: lock() });
        roundtrip(Nlm4Res { cookie: "c".into(), stat: Nlm4Stats::Blocked });
        let holder = Nlm4Holder { exclusive: true, svid: 9, oh: "o".into(), l_offset: 3, l_len: 4 };
        roundtrip(Nlm4Testres { cookie: "c".into(), stat: Nlm4Testrply::Denied(holder) });
        roundtrip(Nlm4Testres { cookie: "c".into(), stat: Nlm4Testrply::Other(Nlm4Stats::Granted) });
        let share = Nlm4Share {
            caller_name: "h".into(),
            fh: "f".into(),
            oh: "o".into(),
            mode: Fsh4Mode::DenyWrite,
            access: Fsh4Access::Read,
        };
        roundtrip(Nlm4Shareargs { cookie: "c".into(), share, reclaim: true });
        roundtrip(Nlm4Shareres { cookie: "c".into(), stat: Nlm4Stats::Granted, sequence: 0 });
        roundtrip(Nlm4Notify { name: "h".into(), state: 5 });
    }

    #[test]
    fn statuses_are_listed_in_number_order_with_their_names() {
        for (i, s) in Nlm4Stats::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i, "{}", s.name());
            assert!(s.name().starts_with("NLM4_"));
        }
        let denied =
            Nlm4Testrply::Denied(Nlm4Holder { exclusive: true, svid: 1, oh: "o".into(), l_offset: 0, l_len: 1 });
        assert_eq!(
            (denied.status(), Nlm4Testrply::Other(Nlm4Stats::Granted).status()),
            (Nlm4Stats::Denied, Nlm4Stats::Granted)
        );
    }

    #[test]
    fn procedure_numbers_have_a_gap() {
        for n in 16..=19 {
            assert_eq!(Nlm4Proc::from_u32(n), None);
        }
        assert_eq!(Nlm4Proc::from_u32(20), Some(Nlm4Proc::Share));
        assert_eq!(Nlm4Proc::from_u32(23), Some(Nlm4Proc::FreeAll));
        assert_eq!(Nlm4Proc::from_u32(24), None);
    }

    #[test]
    fn oversized_netobjs_and_bad_enums_are_errors() {
        let mut enc = Encoder::new();
        enc.opaque(&[0u8; MAXNETOBJ_SZ + 1]);
        assert!(Nlm4Unlockargs::decode(&mut Decoder::new(enc.into_bytes())).is_err());
        let mut enc = Encoder::new();
        enc.opaque(b"c");
        enc.u32(10);
        assert!(Nlm4Res::decode(&mut Decoder::new(enc.into_bytes())).is_err());
    }
}

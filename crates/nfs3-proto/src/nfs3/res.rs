//! Results of the NFSv3 procedures (RFC 1813 section 3.3).
//!
//! Every `XXX3res` in the RFC is the same shape of union:
//!
//! ```text
//! union XXX3res switch (nfsstat3 status) {
//! case NFS3_OK: XXX3resok resok;
//! default:      XXX3resfail resfail;
//! };
//! ```
//!
//! so one generic [`NfsResult`] replaces 21 hand-written unions, and each
//! procedure gets an alias (e.g. [`Lookup3Res`]). NULL returns void, not an
//! `nfsstat3` union, and has no alias.

use bytes::Bytes;
use keel_xdr::{Decode, Decoder, Encode, Encoder, XdrError, xdr_struct};

use super::readdir::{Readdir3ResOk, Readdirplus3ResOk};
use super::types::*;

/// The `XXX3res` union: `status` (an `nfsstat3`), then `T` when it is
/// `NFS3_OK` and `F` otherwise.
///
/// `Fail` never holds [`Nfsstat3::Ok`]: the decoder cannot produce it, and
/// encoding it is a programming error (checked in debug builds).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NfsResult<T, F> {
    Ok(T),
    Fail(Nfsstat3, F),
}

impl<T, F> NfsResult<T, F> {
    /// The status that goes on the wire.
    pub fn status(&self) -> Nfsstat3 {
        match self {
            NfsResult::Ok(_) => Nfsstat3::Ok,
            NfsResult::Fail(s, _) => *s,
        }
    }

    pub fn is_ok(&self) -> bool {
        matches!(self, NfsResult::Ok(_))
    }

    /// The `resok` part, if any.
    pub fn ok(self) -> Option<T> {
        match self {
            NfsResult::Ok(t) => Some(t),
            NfsResult::Fail(..) => None,
        }
    }

    /// As a standard `Result`, for `?`.
    pub fn into_result(self) -> Result<T, (Nfsstat3, F)> {
        match self {
            NfsResult::Ok(t) => Ok(t),
            NfsResult::Fail(s, f) => Err((s, f)),
        }
    }
}

impl<T: Encode, F: Encode> Encode for NfsResult<T, F> {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            NfsResult::Ok(t) => {
                Nfsstat3::Ok.encode(enc);
                t.encode(enc);
            }
            NfsResult::Fail(status, f) => {
                debug_assert_ne!(*status, Nfsstat3::Ok, "NfsResult::Fail with NFS3_OK");
                status.encode(enc);
                f.encode(enc);
            }
        }
    }
}

impl<T: Decode, F: Decode> Decode for NfsResult<T, F> {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        match Nfsstat3::decode(dec)? {
            Nfsstat3::Ok => Ok(NfsResult::Ok(T::decode(dec)?)),
            status => Ok(NfsResult::Fail(status, F::decode(dec)?)),
        }
    }
}

/// Declares a struct whose XDR is its fields in order.
macro_rules! res_struct {
    ($(#[$meta:meta])* $name:ident { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
        pub struct $name {
            $(pub $field: $ty,)*
        }
        xdr_struct!($name { $($field),* });
    };
}

// GETATTR (the failure arm is void).

/// `GETATTR3resok`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Getattr3ResOk {
    pub obj_attributes: Fattr3,
}
xdr_struct!(Getattr3ResOk { obj_attributes });
pub type Getattr3Res = NfsResult<Getattr3ResOk, ()>;

// SETATTR

res_struct!(
    /// `SETATTR3resok`.
    Setattr3ResOk { obj_wcc: WccData }
);
res_struct!(
    /// `SETATTR3resfail`.
    Setattr3ResFail { obj_wcc: WccData }
);
pub type Setattr3Res = NfsResult<Setattr3ResOk, Setattr3ResFail>;

// LOOKUP

res_struct!(
    /// `LOOKUP3resok`.
    Lookup3ResOk {
        object: NfsFh3,
        obj_attributes: PostOpAttr,
        dir_attributes: PostOpAttr,
    }
);
res_struct!(
    /// `LOOKUP3resfail`.
    Lookup3ResFail { dir_attributes: PostOpAttr }
);
pub type Lookup3Res = NfsResult<Lookup3ResOk, Lookup3ResFail>;

// ACCESS

res_struct!(
    /// `ACCESS3resok`; `access` is the subset of the asked bits granted.
    Access3ResOk {
        obj_attributes: PostOpAttr,
        access: u32,
    }
);
res_struct!(
    /// `ACCESS3resfail`.
    Access3ResFail { obj_attributes: PostOpAttr }
);
pub type Access3Res = NfsResult<Access3ResOk, Access3ResFail>;

// READLINK

res_struct!(
    /// `READLINK3resok`.
    Readlink3ResOk {
        symlink_attributes: PostOpAttr,
        data: Nfspath3,
    }
);
res_struct!(
    /// `READLINK3resfail`.
    Readlink3ResFail { symlink_attributes: PostOpAttr }
);
pub type Readlink3Res = NfsResult<Readlink3ResOk, Readlink3ResFail>;

// READ

/// `READ3resok`. `data` is spliced, not copied, into the output on encode
/// and is a slice of the received record on decode (at most
/// [`READ_DATA_MAX`] bytes). `count` is kept apart from `data.len()` as the
/// RFC sends both.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Read3ResOk {
    pub file_attributes: PostOpAttr,
    pub count: Count3,
    pub eof: bool,
    pub data: Bytes,
}

impl Encode for Read3ResOk {
    fn encode(&self, enc: &mut Encoder) {
        self.file_attributes.encode(enc);
        enc.u32(self.count);
        enc.bool(self.eof);
        enc.opaque_shared(self.data.clone());
    }
}

impl Decode for Read3ResOk {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(Read3ResOk {
            file_attributes: PostOpAttr::decode(dec)?,
            count: dec.u32()?,
            eof: dec.bool()?,
            data: dec.opaque(READ_DATA_MAX)?,
        })
    }
}

res_struct!(
    /// `READ3resfail`.
    Read3ResFail { file_attributes: PostOpAttr }
);
pub type Read3Res = NfsResult<Read3ResOk, Read3ResFail>;

// WRITE

res_struct!(
    /// `WRITE3resok`. `committed` is how durable the data really is;
    /// `verf` lets the client detect a server restart.
    Write3ResOk {
        file_wcc: WccData,
        count: Count3,
        committed: StableHow,
        verf: Writeverf3,
    }
);
res_struct!(
    /// `WRITE3resfail`.
    Write3ResFail { file_wcc: WccData }
);
pub type Write3Res = NfsResult<Write3ResOk, Write3ResFail>;

// CREATE, MKDIR, SYMLINK, MKNOD: same shapes.

res_struct!(
    /// `CREATE3resok`.
    Create3ResOk {
        obj: PostOpFh3,
        obj_attributes: PostOpAttr,
        dir_wcc: WccData,
    }
);
res_struct!(
    /// `CREATE3resfail`.
    Create3ResFail { dir_wcc: WccData }
);
pub type Create3Res = NfsResult<Create3ResOk, Create3ResFail>;

res_struct!(
    /// `MKDIR3resok`.
    Mkdir3ResOk {
        obj: PostOpFh3,
        obj_attributes: PostOpAttr,
        dir_wcc: WccData,
    }
);
res_struct!(
    /// `MKDIR3resfail`.
    Mkdir3ResFail { dir_wcc: WccData }
);
pub type Mkdir3Res = NfsResult<Mkdir3ResOk, Mkdir3ResFail>;

res_struct!(
    /// `SYMLINK3resok`.
    Symlink3ResOk {
        obj: PostOpFh3,
        obj_attributes: PostOpAttr,
        dir_wcc: WccData,
    }
);
res_struct!(
    /// `SYMLINK3resfail`.
    Symlink3ResFail { dir_wcc: WccData }
);
pub type Symlink3Res = NfsResult<Symlink3ResOk, Symlink3ResFail>;

res_struct!(
    /// `MKNOD3resok`.
    Mknod3ResOk {
        obj: PostOpFh3,
        obj_attributes: PostOpAttr,
        dir_wcc: WccData,
    }
);
res_struct!(
    /// `MKNOD3resfail`.
    Mknod3ResFail { dir_wcc: WccData }
);
pub type Mknod3Res = NfsResult<Mknod3ResOk, Mknod3ResFail>;

// REMOVE, RMDIR

res_struct!(
    /// `REMOVE3resok`.
    Remove3ResOk { dir_wcc: WccData }
);
res_struct!(
    /// `REMOVE3resfail`.
    Remove3ResFail { dir_wcc: WccData }
);
pub type Remove3Res = NfsResult<Remove3ResOk, Remove3ResFail>;

res_struct!(
    /// `RMDIR3resok`.
    Rmdir3ResOk { dir_wcc: WccData }
);
res_struct!(
    /// `RMDIR3resfail`.
    Rmdir3ResFail { dir_wcc: WccData }
);
pub type Rmdir3Res = NfsResult<Rmdir3ResOk, Rmdir3ResFail>;

// RENAME

res_struct!(
    /// `RENAME3resok`.
    Rename3ResOk {
        fromdir_wcc: WccData,
        todir_wcc: WccData,
    }
);
res_struct!(
    /// `RENAME3resfail`.
    Rename3ResFail {
        fromdir_wcc: WccData,
        todir_wcc: WccData,
    }
);
pub type Rename3Res = NfsResult<Rename3ResOk, Rename3ResFail>;

// LINK

res_struct!(
    /// `LINK3resok`.
    Link3ResOk {
        file_attributes: PostOpAttr,
        linkdir_wcc: WccData,
    }
);
res_struct!(
    /// `LINK3resfail`.
    Link3ResFail {
        file_attributes: PostOpAttr,
        linkdir_wcc: WccData,
    }
);
pub type Link3Res = NfsResult<Link3ResOk, Link3ResFail>;

// READDIR, READDIRPLUS (the resok types live in `readdir`).

res_struct!(
    /// `READDIR3resfail`.
    Readdir3ResFail { dir_attributes: PostOpAttr }
);
pub type Readdir3Res = NfsResult<Readdir3ResOk, Readdir3ResFail>;

res_struct!(
    /// `READDIRPLUS3resfail`.
    Readdirplus3ResFail { dir_attributes: PostOpAttr }
);
pub type Readdirplus3Res = NfsResult<Readdirplus3ResOk, Readdirplus3ResFail>;

// FSSTAT

res_struct!(
    /// `FSSTAT3resok`: total/free/available bytes and file slots.
    Fsstat3ResOk {
        obj_attributes: PostOpAttr,
        tbytes: Size3,
        fbytes: Size3,
        abytes: Size3,
        tfiles: Size3,
        ffiles: Size3,
        afiles: Size3,
        invarsec: u32,
    }
);
res_struct!(
    /// `FSSTAT3resfail`.
    Fsstat3ResFail { obj_attributes: PostOpAttr }
);
pub type Fsstat3Res = NfsResult<Fsstat3ResOk, Fsstat3ResFail>;

// FSINFO

res_struct!(
    /// `FSINFO3resok`: transfer sizes and `FSF3_*` properties.
    Fsinfo3ResOk {
        obj_attributes: PostOpAttr,
        rtmax: u32,
        rtpref: u32,
        rtmult: u32,
        wtmax: u32,
        wtpref: u32,
        wtmult: u32,
        dtpref: u32,
        maxfilesize: Size3,
        time_delta: Nfstime3,
        properties: u32,
    }
);
res_struct!(
    /// `FSINFO3resfail`.
    Fsinfo3ResFail { obj_attributes: PostOpAttr }
);
pub type Fsinfo3Res = NfsResult<Fsinfo3ResOk, Fsinfo3ResFail>;

// PATHCONF

res_struct!(
    /// `PATHCONF3resok`.
    Pathconf3ResOk {
        obj_attributes: PostOpAttr,
        linkmax: u32,
        name_max: u32,
        no_trunc: bool,
        chown_restricted: bool,
        case_insensitive: bool,
        case_preserving: bool,
    }
);
res_struct!(
    /// `PATHCONF3resfail`.
    Pathconf3ResFail { obj_attributes: PostOpAttr }
);
pub type Pathconf3Res = NfsResult<Pathconf3ResOk, Pathconf3ResFail>;

// COMMIT

res_struct!(
    /// `COMMIT3resok`.
    Commit3ResOk {
        file_wcc: WccData,
        verf: Writeverf3,
    }
);
res_struct!(
    /// `COMMIT3resfail`.
    Commit3ResFail { file_wcc: WccData }
);
pub type Commit3Res = NfsResult<Commit3ResOk, Commit3ResFail>;

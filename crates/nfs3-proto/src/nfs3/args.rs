//! Call arguments of the NFSv3 procedures (RFC 1813 section 3.3). NULL takes
//! no arguments; READDIR and READDIRPLUS are with their
//! replies (see `readdir.rs`).

use bytes::Bytes;
use keel_xdr::{Decode, Decoder, Encode, Encoder, XdrError, xdr_struct};

use super::types::*;

/// `GETATTR3args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Getattr3Args {
    pub object: NfsFh3,
}
xdr_struct!(Getattr3Args { object });

/// `SETATTR3args`. `guard` is `sattrguard3`: when present, the server
/// applies the change only if the object's ctime equals it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Setattr3Args {
    pub object: NfsFh3,
    pub new_attributes: Sattr3,
    pub guard: Sattrguard3,
}
xdr_struct!(Setattr3Args { object, new_attributes, guard });

/// `LOOKUP3args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Lookup3Args {
    pub what: Diropargs3,
}
xdr_struct!(Lookup3Args { what });

/// `ACCESS3args`; `access` is a mask of the `ACCESS3_*` bits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Access3Args {
    pub object: NfsFh3,
    pub access: u32,
}
xdr_struct!(Access3Args { object, access });

/// `READLINK3args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Readlink3Args {
    pub symlink: NfsFh3,
}
xdr_struct!(Readlink3Args { symlink });

/// `READ3args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Read3Args {
    pub file: NfsFh3,
    pub offset: Offset3,
    pub count: Count3,
}
xdr_struct!(Read3Args { file, offset, count });

/// `WRITE3args`. `count` is kept apart from `data.len()` because the RFC
/// sends both and a server must check that they agree (and that `count` is
/// not larger than the data). `data` is a slice of the received record on
/// decode (at most [`WRITE_DATA_MAX`] bytes) and is spliced, not copied,
/// into the output on encode.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Write3Args {
    pub file: NfsFh3,
    pub offset: Offset3,
    pub count: Count3,
    pub stable: StableHow,
    pub data: Bytes,
}

impl Encode for Write3Args {
    fn encode(&self, enc: &mut Encoder) {
        self.file.encode(enc);
        enc.u64(self.offset);
        enc.u32(self.count);
        self.stable.encode(enc);
        enc.opaque_shared(self.data.clone());
    }
}

impl Decode for Write3Args {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(Write3Args {
            file: NfsFh3::decode(dec)?,
            offset: dec.u64()?,
            count: dec.u32()?,
            stable: StableHow::decode(dec)?,
            data: dec.opaque(WRITE_DATA_MAX)?,
        })
    }
}

/// `CREATE3args`. `where_` is the RFC's `where` (a Rust keyword).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Create3Args {
    pub where_: Diropargs3,
    pub how: Createhow3,
}
xdr_struct!(Create3Args { where_, how });

/// `MKDIR3args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Mkdir3Args {
    pub where_: Diropargs3,
    pub attributes: Sattr3,
}
xdr_struct!(Mkdir3Args { where_, attributes });

/// `SYMLINK3args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Symlink3Args {
    pub where_: Diropargs3,
    pub symlink: Symlinkdata3,
}
xdr_struct!(Symlink3Args { where_, symlink });

/// `MKNOD3args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mknod3Args {
    pub where_: Diropargs3,
    pub what: Mknoddata3,
}
xdr_struct!(Mknod3Args { where_, what });

/// `REMOVE3args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Remove3Args {
    pub object: Diropargs3,
}
xdr_struct!(Remove3Args { object });

/// `RMDIR3args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Rmdir3Args {
    pub object: Diropargs3,
}
xdr_struct!(Rmdir3Args { object });

/// `RENAME3args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Rename3Args {
    pub from: Diropargs3,
    pub to: Diropargs3,
}
xdr_struct!(Rename3Args { from, to });

/// `LINK3args`: make `link` a new name for `file`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Link3Args {
    pub file: NfsFh3,
    pub link: Diropargs3,
}
xdr_struct!(Link3Args { file, link });

/// `FSSTAT3args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Fsstat3Args {
    pub fsroot: NfsFh3,
}
xdr_struct!(Fsstat3Args { fsroot });

/// `FSINFO3args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Fsinfo3Args {
    pub fsroot: NfsFh3,
}
xdr_struct!(Fsinfo3Args { fsroot });

/// `PATHCONF3args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Pathconf3Args {
    pub object: NfsFh3,
}
xdr_struct!(Pathconf3Args { object });

/// `COMMIT3args`; `count` 0 means "to the end of the file".
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Commit3Args {
    pub file: NfsFh3,
    pub offset: Offset3,
    pub count: Count3,
}
xdr_struct!(Commit3Args { file, offset, count });

//! File attributes (RFC 8881 section 5; 4.2's in RFC 7862 section 12):
//! attribute numbers, `bitmap4`, `fattr4` as it is on the wire, and
//! [`Attrs4`], the attributes Keel serves, typed.
//!
//! An attribute list travels as a bitmap of attribute numbers and the
//! values of the set bits, in ascending bit order, packed into one opaque
//! (`attr_vals`). Decoders of operations keep it that way ([`Fattr4`],
//! whose values are a slice of the record): whether the server knows every
//! attribute in it, and may set it, is the handler's question, answered by
//! [`Attrs4::from_fattr4`] with an [`AttrError`] that maps to the status
//! RFC 8881 section 18.30.3 asks for. The server answers GETATTR with
//! [`Attrs4::to_fattr4`], which writes the attributes the request asked for
//! and the server has, and their bitmap.

use keel_xdr::bytes_newtype;
use std::fmt;

use keel_xdr::{Decode, Decoder, Encode, Encoder, XdrError};

use crate::{
    ATTRLIST4_MAX, Array, BITMAP4_WORDS_MAX, ChangeAttrType4, FsLocations4, Fsid4, LAYOUT_TYPES_MAX, Layouttype4,
    NfsFh4, NfsFtype4, Nfsstat4, Nfstime4, SecLabel4, Settime4, Specdata4, Utf8StrMixed,
};

// Attribute numbers (RFC 8881 section 5.8, RFC 7862 section 12.2). REQUIRED:
// 0-11, 19 and 75; the rest RECOMMENDED.
pub const FATTR4_SUPPORTED_ATTRS: u32 = 0;
pub const FATTR4_TYPE: u32 = 1;
pub const FATTR4_FH_EXPIRE_TYPE: u32 = 2;
pub const FATTR4_CHANGE: u32 = 3;
pub const FATTR4_SIZE: u32 = 4;
pub const FATTR4_LINK_SUPPORT: u32 = 5;
pub const FATTR4_SYMLINK_SUPPORT: u32 = 6;
pub const FATTR4_NAMED_ATTR: u32 = 7;
pub const FATTR4_FSID: u32 = 8;
pub const FATTR4_UNIQUE_HANDLES: u32 = 9;
pub const FATTR4_LEASE_TIME: u32 = 10;
pub const FATTR4_RDATTR_ERROR: u32 = 11;
pub const FATTR4_ACL: u32 = 12;
pub const FATTR4_ACLSUPPORT: u32 = 13;
pub const FATTR4_ARCHIVE: u32 = 14;
pub const FATTR4_CANSETTIME: u32 = 15;
pub const FATTR4_CASE_INSENSITIVE: u32 = 16;
pub const FATTR4_CASE_PRESERVING: u32 = 17;
pub const FATTR4_CHOWN_RESTRICTED: u32 = 18;
pub const FATTR4_FILEHANDLE: u32 = 19;
pub const FATTR4_FILEID: u32 = 20;
pub const FATTR4_FILES_AVAIL: u32 = 21;
pub const FATTR4_FILES_FREE: u32 = 22;
pub const FATTR4_FILES_TOTAL: u32 = 23;
pub const FATTR4_FS_LOCATIONS: u32 = 24;
pub const FATTR4_HIDDEN: u32 = 25;
pub const FATTR4_HOMOGENEOUS: u32 = 26;
pub const FATTR4_MAXFILESIZE: u32 = 27;
pub const FATTR4_MAXLINK: u32 = 28;
pub const FATTR4_MAXNAME: u32 = 29;
pub const FATTR4_MAXREAD: u32 = 30;
pub const FATTR4_MAXWRITE: u32 = 31;
pub const FATTR4_MIMETYPE: u32 = 32;
pub const FATTR4_MODE: u32 = 33;
pub const FATTR4_NO_TRUNC: u32 = 34;
pub const FATTR4_NUMLINKS: u32 = 35;
pub const FATTR4_OWNER: u32 = 36;
pub const FATTR4_OWNER_GROUP: u32 = 37;
pub const FATTR4_QUOTA_AVAIL_HARD: u32 = 38;
pub const FATTR4_QUOTA_AVAIL_SOFT: u32 = 39;
pub const FATTR4_QUOTA_USED: u32 = 40;
pub const FATTR4_RAWDEV: u32 = 41;
pub const FATTR4_SPACE_AVAIL: u32 = 42;
pub const FATTR4_SPACE_FREE: u32 = 43;
pub const FATTR4_SPACE_TOTAL: u32 = 44;
pub const FATTR4_SPACE_USED: u32 = 45;
pub const FATTR4_SYSTEM: u32 = 46;
pub const FATTR4_TIME_ACCESS: u32 = 47;
pub const FATTR4_TIME_ACCESS_SET: u32 = 48;
pub const FATTR4_TIME_BACKUP: u32 = 49;
pub const FATTR4_TIME_CREATE: u32 = 50;
pub const FATTR4_TIME_DELTA: u32 = 51;
pub const FATTR4_TIME_METADATA: u32 = 52;
pub const FATTR4_TIME_MODIFY: u32 = 53;
pub const FATTR4_TIME_MODIFY_SET: u32 = 54;
pub const FATTR4_MOUNTED_ON_FILEID: u32 = 55;
pub const FATTR4_DIR_NOTIF_DELAY: u32 = 56;
pub const FATTR4_DIRENT_NOTIF_DELAY: u32 = 57;
pub const FATTR4_DACL: u32 = 58;
pub const FATTR4_SACL: u32 = 59;
pub const FATTR4_CHANGE_POLICY: u32 = 60;
pub const FATTR4_FS_STATUS: u32 = 61;
pub const FATTR4_FS_LAYOUT_TYPES: u32 = 62;
pub const FATTR4_LAYOUT_HINT: u32 = 63;
pub const FATTR4_LAYOUT_TYPES: u32 = 64;
pub const FATTR4_LAYOUT_BLKSIZE: u32 = 65;
pub const FATTR4_LAYOUT_ALIGNMENT: u32 = 66;
pub const FATTR4_FS_LOCATIONS_INFO: u32 = 67;
pub const FATTR4_MDSTHRESHOLD: u32 = 68;
pub const FATTR4_RETENTION_GET: u32 = 69;
pub const FATTR4_RETENTION_SET: u32 = 70;
pub const FATTR4_RETENTEVT_GET: u32 = 71;
pub const FATTR4_RETENTEVT_SET: u32 = 72;
pub const FATTR4_RETENTION_HOLD: u32 = 73;
pub const FATTR4_MODE_SET_MASKED: u32 = 74;
pub const FATTR4_SUPPATTR_EXCLCREAT: u32 = 75;
pub const FATTR4_FS_CHARSET_CAP: u32 = 76;
pub const FATTR4_CLONE_BLKSIZE: u32 = 77;
pub const FATTR4_SPACE_FREED: u32 = 78;
pub const FATTR4_CHANGE_ATTR_TYPE: u32 = 79;
pub const FATTR4_SEC_LABEL: u32 = 80;
/// `bitmap4`: a set of attribute (or operation, or notification) numbers,
/// bit `n` in word `n / 32`. At most [`BITMAP4_WORDS_MAX`] words on decode.
/// Equality is of the sets: trailing zero words do not count (they do on
/// the wire, where the words go as they are).
#[derive(Clone, Default)]
pub struct Bitmap4(pub Vec<u32>);

impl Bitmap4 {
    /// The words without trailing zero words.
    fn significant(&self) -> &[u32] {
        let len = self.0.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
        &self.0[..len]
    }
}

impl PartialEq for Bitmap4 {
    fn eq(&self, other: &Self) -> bool {
        self.significant() == other.significant()
    }
}

impl Eq for Bitmap4 {}

impl std::hash::Hash for Bitmap4 {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.significant().hash(state);
    }
}

impl Bitmap4 {
    /// Bits a bitmap can hold (what decoding accepts).
    pub const BITS_MAX: u32 = (BITMAP4_WORDS_MAX * 32) as u32;

    pub fn new() -> Self {
        Bitmap4(Vec::new())
    }

    /// A bitmap with `bits` set.
    pub fn from_bits(bits: impl IntoIterator<Item = u32>) -> Self {
        let mut b = Bitmap4::new();
        for bit in bits {
            b.insert(bit);
        }
        b
    }

    pub fn contains(&self, bit: u32) -> bool {
        self.0.get((bit / 32) as usize).is_some_and(|w| w & (1 << (bit % 32)) != 0)
    }

    /// Sets `bit`, growing the bitmap as needed.
    ///
    /// # Panics
    /// If `bit` is not below [`Bitmap4::BITS_MAX`] (a programming error:
    /// no attribute or operation number is that large).
    pub fn insert(&mut self, bit: u32) {
        assert!(bit < Self::BITS_MAX, "bitmap4 bit {bit} out of range");
        let word = (bit / 32) as usize;
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (bit % 32);
    }

    pub fn remove(&mut self, bit: u32) {
        if let Some(w) = self.0.get_mut((bit / 32) as usize) {
            *w &= !(1 << (bit % 32));
        }
    }

    /// True if no bit is set (whatever the number of words).
    pub fn is_empty(&self) -> bool {
        self.significant().is_empty()
    }

    /// The set bits, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0
            .iter()
            .enumerate()
            .flat_map(|(i, &w)| (0..32).filter(move |b| w & (1 << b) != 0).map(move |b| i as u32 * 32 + b))
    }

    /// Bits set in both, without trailing zero words.
    pub fn intersection(&self, other: &Bitmap4) -> Bitmap4 {
        Bitmap4(self.0.iter().zip(&other.0).map(|(a, b)| a & b).collect()).trimmed()
    }

    /// Bits set here and not in `other`, without trailing zero words (e.g.
    /// the attributes of a SETATTR the server does not support).
    pub fn difference(&self, other: &Bitmap4) -> Bitmap4 {
        let word = |i: usize| other.0.get(i).copied().unwrap_or(0);
        Bitmap4(self.0.iter().enumerate().map(|(i, a)| a & !word(i)).collect()).trimmed()
    }

    fn trimmed(mut self) -> Self {
        self.0.truncate(self.significant().len());
        self
    }

    /// Encoded size: count word and the words.
    pub fn xdr_len(&self) -> usize {
        4 + 4 * self.0.len()
    }
}

impl fmt::Debug for Bitmap4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl Encode for Bitmap4 {
    fn encode(&self, enc: &mut Encoder) {
        crate::encode_array(enc, &self.0);
    }
}

impl Decode for Bitmap4 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.array(BITMAP4_WORDS_MAX).map(Bitmap4)
    }
}

bytes_newtype!(
    /// `attrlist4`: attribute values, packed in bitmap order.
    Attrlist4,
    ATTRLIST4_MAX
);

xdr_structs! {
    /// `fattr4`: an attribute list as it is on the wire. Decoding checks
    /// only the bitmap's and the values' lengths; [`Attrs4::from_fattr4`]
    /// reads the values.
    #[derive(Default)]
    Fattr4 {
        attrmask: Bitmap4,
        attr_vals: Attrlist4,
    }
}

impl Fattr4 {
    /// Encoded size.
    pub fn xdr_len(&self) -> usize {
        self.attrmask.xdr_len() + self.attr_vals.xdr_len()
    }
}

/// `fattr4_fs_layout_types`.
pub type LayoutTypes4 = Array<Layouttype4, LAYOUT_TYPES_MAX>;

/// Who may read and write an attribute (RFC 8881 section 5.6 and 5.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrAccess {
    Read,
    /// `time_access_set` and `time_modify_set` only.
    Write,
    ReadWrite,
}

/// What an attribute list is for, which decides the attributes it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrUse {
    /// SETATTR, CREATE, OPEN's `createattrs`: writable attributes only.
    Set,
    /// VERIFY and NVERIFY: readable attributes except `rdattr_error`.
    Verify,
    /// A reply (GETATTR, READDIR, CB_GETATTR) read by a client: any.
    Reply,
}

impl AttrUse {
    fn check(self, attr: u32, access: AttrAccess) -> Result<(), AttrError> {
        let allowed = match self {
            AttrUse::Set => access != AttrAccess::Read,
            AttrUse::Verify => access != AttrAccess::Write && attr != FATTR4_RDATTR_ERROR,
            AttrUse::Reply => true,
        };
        if allowed { Ok(()) } else { Err(AttrError::NotAllowed { attr, usage: self }) }
    }
}

/// Why [`Attrs4::from_fattr4`] refused an attribute list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttrError {
    /// An attribute this crate does not represent (ACLs, quotas, archive,
    /// ...) or does not know at all: its value's length is unknown, so
    /// nothing after it can be read.
    #[error("attribute {0} is not supported")]
    Unsupported(u32),
    /// A known attribute that this use does not allow: a read-only one in
    /// SETATTR, a write-only one or `rdattr_error` in VERIFY.
    #[error("attribute {attr} is not allowed in {usage:?}")]
    NotAllowed { attr: u32, usage: AttrUse },
    /// The values do not match the bitmap: too short, too long, or a value
    /// out of its type's range.
    #[error("attribute values: {0}")]
    Xdr(#[from] XdrError),
}

impl AttrError {
    /// The status the server answers with (RFC 8881 sections 18.30.3 and
    /// 18.31.3).
    pub fn status(&self) -> Nfsstat4 {
        match self {
            AttrError::Unsupported(_) => Nfsstat4::Attrnotsupp,
            AttrError::NotAllowed { .. } => Nfsstat4::Inval,
            AttrError::Xdr(_) => Nfsstat4::Badxdr,
        }
    }
}

/// Declares [`Attrs4`] from rows `FATTR4_NUMBER field: Type, Access;` in
/// ascending attribute number.
macro_rules! attributes {
    ($($(#[$meta:meta])* $num:ident $field:ident: $ty:ty, $access:ident;)*) => {
        /// The attributes Keel serves, typed: every REQUIRED attribute and
        /// the RECOMMENDED ones Linux asks for. A field is `Some` when the
        /// value is known (to be sent, or as received).
        ///
        /// Left out, and so `NFS4ERR_ATTRNOTSUPP` when a client sends them:
        /// ACLs (`acl`, `dacl`, `sacl`), `archive`, `hidden`, `system`,
        /// `mimetype`, quotas, `time_backup`, retention, `mode_set_masked`,
        /// `layout_hint` and the other pNFS and migration details.
        #[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
        pub struct Attrs4 {
            $($(#[$meta])* pub $field: Option<$ty>,)*
        }

        impl Attrs4 {
            /// Numbers of the attributes an `Attrs4` holds, ascending.
            pub const KNOWN: &'static [u32] = &[$($num),*];

            /// Who may read and write attribute `attr`, if it is one of
            /// [`Attrs4::KNOWN`].
            pub fn access(attr: u32) -> Option<AttrAccess> {
                match attr {
                    $($num => Some(AttrAccess::$access),)*
                    _ => None,
                }
            }

            /// The attributes that are set.
            pub fn bitmap(&self) -> Bitmap4 {
                let mut b = Bitmap4::new();
                $(if self.$field.is_some() {
                    b.insert($num);
                })*
                b
            }

            /// The attributes that are set and that `request` asks for, as
            /// an attribute list (bitmap and values in bitmap order).
            pub fn to_fattr4(&self, request: &Bitmap4) -> Fattr4 {
                let mut attrmask = Bitmap4::new();
                let mut vals = Encoder::new();
                $(if let Some(v) = &self.$field && request.contains($num) {
                    attrmask.insert($num);
                    v.encode(&mut vals);
                })*
                Fattr4 { attrmask, attr_vals: Attrlist4(vals.into_bytes()) }
            }

            /// Reads an attribute list, in bitmap order, for `usage`. The
            /// first attribute that is unknown or not allowed, or values that
            /// do not match the bitmap, are an error (see
            /// [`AttrError::status`]).
            pub fn from_fattr4(fattr: &Fattr4, usage: AttrUse) -> Result<Self, AttrError> {
                let mut dec = Decoder::new(fattr.attr_vals.0.clone());
                let mut out = Attrs4::default();
                for attr in fattr.attrmask.iter() {
                    match attr {
                        $($num => {
                            usage.check(attr, AttrAccess::$access)?;
                            out.$field = Some(Decode::decode(&mut dec)?);
                        })*
                        _ => return Err(AttrError::Unsupported(attr)),
                    }
                }
                dec.finish()?;
                Ok(out)
            }
        }
    };
}

attributes! {
    FATTR4_SUPPORTED_ATTRS supported_attrs: Bitmap4, Read;
    /// The RFC's `type`.
    FATTR4_TYPE type_: NfsFtype4, Read;
    FATTR4_FH_EXPIRE_TYPE fh_expire_type: u32, Read;
    FATTR4_CHANGE change: u64, Read;
    FATTR4_SIZE size: u64, ReadWrite;
    FATTR4_LINK_SUPPORT link_support: bool, Read;
    FATTR4_SYMLINK_SUPPORT symlink_support: bool, Read;
    FATTR4_NAMED_ATTR named_attr: bool, Read;
    FATTR4_FSID fsid: Fsid4, Read;
    FATTR4_UNIQUE_HANDLES unique_handles: bool, Read;
    FATTR4_LEASE_TIME lease_time: u32, Read;
    /// Only in READDIR, for an entry whose attributes could not be read.
    FATTR4_RDATTR_ERROR rdattr_error: Nfsstat4, Read;
    FATTR4_ACLSUPPORT aclsupport: u32, Read;
    FATTR4_CANSETTIME cansettime: bool, Read;
    FATTR4_CASE_INSENSITIVE case_insensitive: bool, Read;
    FATTR4_CASE_PRESERVING case_preserving: bool, Read;
    FATTR4_CHOWN_RESTRICTED chown_restricted: bool, Read;
    FATTR4_FILEHANDLE filehandle: NfsFh4, Read;
    FATTR4_FILEID fileid: u64, Read;
    FATTR4_FILES_AVAIL files_avail: u64, Read;
    FATTR4_FILES_FREE files_free: u64, Read;
    FATTR4_FILES_TOTAL files_total: u64, Read;
    FATTR4_FS_LOCATIONS fs_locations: FsLocations4, Read;
    FATTR4_HOMOGENEOUS homogeneous: bool, Read;
    FATTR4_MAXFILESIZE maxfilesize: u64, Read;
    FATTR4_MAXLINK maxlink: u32, Read;
    FATTR4_MAXNAME maxname: u32, Read;
    FATTR4_MAXREAD maxread: u64, Read;
    FATTR4_MAXWRITE maxwrite: u64, Read;
    FATTR4_MODE mode: u32, ReadWrite;
    FATTR4_NO_TRUNC no_trunc: bool, Read;
    FATTR4_NUMLINKS numlinks: u32, Read;
    FATTR4_OWNER owner: Utf8StrMixed, ReadWrite;
    FATTR4_OWNER_GROUP owner_group: Utf8StrMixed, ReadWrite;
    FATTR4_RAWDEV rawdev: Specdata4, Read;
    FATTR4_SPACE_AVAIL space_avail: u64, Read;
    FATTR4_SPACE_FREE space_free: u64, Read;
    FATTR4_SPACE_TOTAL space_total: u64, Read;
    FATTR4_SPACE_USED space_used: u64, Read;
    FATTR4_TIME_ACCESS time_access: Nfstime4, Read;
    FATTR4_TIME_ACCESS_SET time_access_set: Settime4, Write;
    FATTR4_TIME_CREATE time_create: Nfstime4, ReadWrite;
    FATTR4_TIME_DELTA time_delta: Nfstime4, Read;
    FATTR4_TIME_METADATA time_metadata: Nfstime4, Read;
    FATTR4_TIME_MODIFY time_modify: Nfstime4, Read;
    FATTR4_TIME_MODIFY_SET time_modify_set: Settime4, Write;
    FATTR4_MOUNTED_ON_FILEID mounted_on_fileid: u64, Read;
    FATTR4_FS_LAYOUT_TYPES fs_layout_types: LayoutTypes4, Read;
    FATTR4_LAYOUT_BLKSIZE layout_blksize: u32, Read;
    FATTR4_LAYOUT_ALIGNMENT layout_alignment: u32, Read;
    FATTR4_SUPPATTR_EXCLCREAT suppattr_exclcreat: Bitmap4, Read;
    FATTR4_CLONE_BLKSIZE clone_blksize: u32, Read;
    FATTR4_CHANGE_ATTR_TYPE change_attr_type: ChangeAttrType4, Read;
    FATTR4_SEC_LABEL sec_label: SecLabel4, ReadWrite;
}

impl Attrs4 {
    /// [`Attrs4::KNOWN`] as a bitmap (what a server that stores all of them
    /// reports as `supported_attrs`).
    pub fn known() -> Bitmap4 {
        Bitmap4::from_bits(Self::KNOWN.iter().copied())
    }
}

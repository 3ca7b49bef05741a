//! Basic NFSv3 data types (RFC 1813 sections 2.5 and 2.6).

use bytes::Bytes;
use keel_xdr::{Decode, Decoder, Encode, Encoder, XdrError, padding, xdr_enum, xdr_struct};

use keel_xdr::bytes_newtype;

/// Most bytes in an NFSv3 file handle (`NFS3_FHSIZE`).
pub const NFS3_FHSIZE: usize = 64;
/// Size of a READDIR cookie verifier.
pub const NFS3_COOKIEVERFSIZE: usize = 8;
/// Size of an exclusive-CREATE verifier.
pub const NFS3_CREATEVERFSIZE: usize = 8;
/// Size of a WRITE/COMMIT verifier.
pub const NFS3_WRITEVERFSIZE: usize = 8;

/// Longest file name the server accepts (what PATHCONF reports as
/// `name_max`). Handlers compare names against this; decoders do not.
pub const NFS3_MAXNAMLEN: usize = 255;

/// Most bytes a `filename3` may have on decode. Deliberately far above
/// [`NFS3_MAXNAMLEN`]: a 300-byte name must reach the handler so it can
/// answer `NFS3ERR_NAMETOOLONG`; rejecting it at decode time would turn a
/// well-defined error into GARBAGE_ARGS. The bound only stops absurd sizes.
pub const FILENAME_DECODE_MAX: usize = 4096;

/// Most bytes an `nfspath3` (a symbolic link's target) may have on decode;
/// this is the usual `PATH_MAX`.
pub const NFSPATH_MAX: usize = 4096;

/// Most bytes of data a WRITE call may carry on decode. Servers advertise a
/// smaller `wtmax` in FSINFO; this only caps what a peer can make us hold.
pub const WRITE_DATA_MAX: usize = 1 << 20;

/// Most bytes of data a READ reply may carry on decode (client side): well
/// above any sane `rtmax`, small enough that a broken server cannot make the
/// client accept an absurd reply.
pub const READ_DATA_MAX: usize = 1 << 24;

/// ACCESS3 permission bits (RFC 1813 section 3.3.4).
pub const ACCESS3_READ: u32 = 0x0001;
pub const ACCESS3_LOOKUP: u32 = 0x0002;
pub const ACCESS3_MODIFY: u32 = 0x0004;
pub const ACCESS3_EXTEND: u32 = 0x0008;
pub const ACCESS3_DELETE: u32 = 0x0010;
pub const ACCESS3_EXECUTE: u32 = 0x0020;

/// FSINFO3 `properties` bits (RFC 1813 section 3.3.19).
pub const FSF3_LINK: u32 = 0x0001;
pub const FSF3_SYMLINK: u32 = 0x0002;
pub const FSF3_HOMOGENEOUS: u32 = 0x0008;
pub const FSF3_CANSETTIME: u32 = 0x0010;

pub type Uint64 = u64;
pub type Uint32 = u32;
pub type Fileid3 = u64;
pub type Cookie3 = u64;
pub type Uid3 = u32;
pub type Gid3 = u32;
pub type Size3 = u64;
pub type Offset3 = u64;
pub type Mode3 = u32;
pub type Count3 = u32;

/// `cookieverf3`: opaque READDIR verifier.
pub type Cookieverf3 = [u8; NFS3_COOKIEVERFSIZE];
/// `createverf3`: opaque exclusive-CREATE verifier.
pub type Createverf3 = [u8; NFS3_CREATEVERFSIZE];
/// `writeverf3`: opaque WRITE/COMMIT verifier (changes when the server
/// restarts and may have lost unstable writes).
pub type Writeverf3 = [u8; NFS3_WRITEVERFSIZE];

/// `nfsstat3`: the status of every NFSv3 reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Nfsstat3 {
    #[default]
    Ok = 0,
    Perm = 1,
    Noent = 2,
    Io = 5,
    Nxio = 6,
    Acces = 13,
    Exist = 17,
    Xdev = 18,
    Nodev = 19,
    Notdir = 20,
    Isdir = 21,
    Inval = 22,
    Fbig = 27,
    Nospc = 28,
    Rofs = 30,
    Mlink = 31,
    Nametoolong = 63,
    Notempty = 66,
    Dquot = 69,
    Stale = 70,
    Remote = 71,
    Badhandle = 10001,
    NotSync = 10002,
    BadCookie = 10003,
    Notsupp = 10004,
    Toosmall = 10005,
    Serverfault = 10006,
    Badtype = 10007,
    Jukebox = 10008,
}
xdr_enum!(Nfsstat3 {
    Ok,
    Perm,
    Noent,
    Io,
    Nxio,
    Acces,
    Exist,
    Xdev,
    Nodev,
    Notdir,
    Isdir,
    Inval,
    Fbig,
    Nospc,
    Rofs,
    Mlink,
    Nametoolong,
    Notempty,
    Dquot,
    Stale,
    Remote,
    Badhandle,
    NotSync,
    BadCookie,
    Notsupp,
    Toosmall,
    Serverfault,
    Badtype,
    Jukebox,
});

impl Nfsstat3 {
    /// The RFC's name, e.g. `"NFS3ERR_NOENT"`.
    pub fn name(self) -> &'static str {
        match self {
            Nfsstat3::Ok => "NFS3_OK",
            Nfsstat3::Perm => "NFS3ERR_PERM",
            Nfsstat3::Noent => "NFS3ERR_NOENT",
            Nfsstat3::Io => "NFS3ERR_IO",
            Nfsstat3::Nxio => "NFS3ERR_NXIO",
            Nfsstat3::Acces => "NFS3ERR_ACCES",
            Nfsstat3::Exist => "NFS3ERR_EXIST",
            Nfsstat3::Xdev => "NFS3ERR_XDEV",
            Nfsstat3::Nodev => "NFS3ERR_NODEV",
            Nfsstat3::Notdir => "NFS3ERR_NOTDIR",
            Nfsstat3::Isdir => "NFS3ERR_ISDIR",
            Nfsstat3::Inval => "NFS3ERR_INVAL",
            Nfsstat3::Fbig => "NFS3ERR_FBIG",
            Nfsstat3::Nospc => "NFS3ERR_NOSPC",
            Nfsstat3::Rofs => "NFS3ERR_ROFS",
            Nfsstat3::Mlink => "NFS3ERR_MLINK",
            Nfsstat3::Nametoolong => "NFS3ERR_NAMETOOLONG",
            Nfsstat3::Notempty => "NFS3ERR_NOTEMPTY",
            Nfsstat3::Dquot => "NFS3ERR_DQUOT",
            Nfsstat3::Stale => "NFS3ERR_STALE",
            Nfsstat3::Remote => "NFS3ERR_REMOTE",
            Nfsstat3::Badhandle => "NFS3ERR_BADHANDLE",
            Nfsstat3::NotSync => "NFS3ERR_NOT_SYNC",
            Nfsstat3::BadCookie => "NFS3ERR_BAD_COOKIE",
            Nfsstat3::Notsupp => "NFS3ERR_NOTSUPP",
            Nfsstat3::Toosmall => "NFS3ERR_TOOSMALL",
            Nfsstat3::Serverfault => "NFS3ERR_SERVERFAULT",
            Nfsstat3::Badtype => "NFS3ERR_BADTYPE",
            Nfsstat3::Jukebox => "NFS3ERR_JUKEBOX",
        }
    }
}

impl std::fmt::Display for Nfsstat3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `ftype3`: the type of a file system object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Ftype3 {
    #[default]
    Reg = 1,
    Dir = 2,
    Blk = 3,
    Chr = 4,
    Lnk = 5,
    Sock = 6,
    Fifo = 7,
}
xdr_enum!(Ftype3 { Reg, Dir, Blk, Chr, Lnk, Sock, Fifo });

/// `specdata3`: device numbers (major, minor) of a block or character
/// special file; zero for every other type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Specdata3 {
    pub specdata1: u32,
    pub specdata2: u32,
}
xdr_struct!(Specdata3 { specdata1, specdata2 });

/// `nfs_fh3`: an opaque file handle of at most [`NFS3_FHSIZE`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct NfsFh3 {
    pub data: Bytes,
}

impl NfsFh3 {
    pub fn new(data: impl Into<Bytes>) -> Self {
        NfsFh3 { data: data.into() }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// Encoded size: length word, bytes, padding.
    pub fn xdr_len(&self) -> usize {
        4 + self.data.len() + padding(self.data.len())
    }
}

impl Encode for NfsFh3 {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque(&self.data);
    }
}

impl Decode for NfsFh3 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.opaque(NFS3_FHSIZE).map(|data| NfsFh3 { data })
    }
}

bytes_newtype!(
    /// `filename3`: one path component. Names are bytes, not UTF-8.
    /// Decodes up to [`FILENAME_DECODE_MAX`] bytes (see there for why not
    /// [`NFS3_MAXNAMLEN`]).
    Filename3,
    FILENAME_DECODE_MAX
);

bytes_newtype!(
    /// `nfspath3`: the target of a symbolic link, at most [`NFSPATH_MAX`]
    /// bytes on decode.
    Nfspath3,
    NFSPATH_MAX
);

/// `nfstime3`: seconds and nanoseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Nfstime3 {
    pub seconds: u32,
    pub nseconds: u32,
}
xdr_struct!(Nfstime3 { seconds, nseconds });

/// Encoded size of an [`Fattr3`].
pub const FATTR3_XDR_LEN: usize = 84;

/// `fattr3`: the attributes of a file system object. `ftype` is the RFC's
/// `type` (a Rust keyword).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Fattr3 {
    pub ftype: Ftype3,
    pub mode: Mode3,
    pub nlink: u32,
    pub uid: Uid3,
    pub gid: Gid3,
    pub size: Size3,
    pub used: Size3,
    pub rdev: Specdata3,
    pub fsid: u64,
    pub fileid: Fileid3,
    pub atime: Nfstime3,
    pub mtime: Nfstime3,
    pub ctime: Nfstime3,
}
xdr_struct!(Fattr3 { ftype, mode, nlink, uid, gid, size, used, rdev, fsid, fileid, atime, mtime, ctime });

/// `post_op_attr`: attributes after the operation, if the server has them.
pub type PostOpAttr = Option<Fattr3>;

/// `wcc_attr`: the subset of attributes used for weak cache consistency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WccAttr {
    pub size: Size3,
    pub mtime: Nfstime3,
    pub ctime: Nfstime3,
}
xdr_struct!(WccAttr { size, mtime, ctime });

/// `pre_op_attr`: attributes before the operation, if the server has them.
pub type PreOpAttr = Option<WccAttr>;

/// `wcc_data`: before and after attributes of a modified object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WccData {
    pub before: PreOpAttr,
    pub after: PostOpAttr,
}
xdr_struct!(WccData { before, after });

/// `post_op_fh3`: the handle of a created or looked-up object, if returned.
pub type PostOpFh3 = Option<NfsFh3>;

/// `set_atime` / `set_mtime`: the `time_how` union.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SetTime {
    /// `DONT_CHANGE` (0).
    #[default]
    DontChange,
    /// `SET_TO_SERVER_TIME` (1).
    ServerTime,
    /// `SET_TO_CLIENT_TIME` (2).
    ClientTime(Nfstime3),
}

impl Encode for SetTime {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            SetTime::DontChange => enc.u32(0),
            SetTime::ServerTime => enc.u32(1),
            SetTime::ClientTime(t) => {
                enc.u32(2);
                t.encode(enc);
            }
        }
    }
}

impl Decode for SetTime {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        match dec.u32()? {
            0 => Ok(SetTime::DontChange),
            1 => Ok(SetTime::ServerTime),
            2 => Ok(SetTime::ClientTime(Nfstime3::decode(dec)?)),
            value => Err(XdrError::InvalidValue { what: "time_how", value }),
        }
    }
}

/// `sattr3`: attributes to set. Each `set_*` union (void or value) is XDR
/// optional-data on the wire, so `Option` encodes it exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sattr3 {
    pub mode: Option<Mode3>,
    pub uid: Option<Uid3>,
    pub gid: Option<Gid3>,
    pub size: Option<Size3>,
    pub atime: SetTime,
    pub mtime: SetTime,
}
xdr_struct!(Sattr3 { mode, uid, gid, size, atime, mtime });

/// `sattrguard3`: SETATTR's optional ctime check.
pub type Sattrguard3 = Option<Nfstime3>;

/// `diropargs3`: a name in a directory.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Diropargs3 {
    pub dir: NfsFh3,
    pub name: Filename3,
}
xdr_struct!(Diropargs3 { dir, name });

/// `stable_how`: how durable a WRITE must be before the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum StableHow {
    #[default]
    Unstable = 0,
    DataSync = 1,
    FileSync = 2,
}
xdr_enum!(StableHow { Unstable, DataSync, FileSync });

/// `createmode3`: the discriminant of [`Createhow3`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Createmode3 {
    #[default]
    Unchecked = 0,
    Guarded = 1,
    Exclusive = 2,
}
xdr_enum!(Createmode3 { Unchecked, Guarded, Exclusive });

/// `createhow3`: how CREATE treats an existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Createhow3 {
    Unchecked(Sattr3),
    Guarded(Sattr3),
    Exclusive(Createverf3),
}

impl Createhow3 {
    pub fn mode(&self) -> Createmode3 {
        match self {
            Createhow3::Unchecked(_) => Createmode3::Unchecked,
            Createhow3::Guarded(_) => Createmode3::Guarded,
            Createhow3::Exclusive(_) => Createmode3::Exclusive,
        }
    }
}

impl Encode for Createhow3 {
    fn encode(&self, enc: &mut Encoder) {
        self.mode().encode(enc);
        match self {
            Createhow3::Unchecked(a) | Createhow3::Guarded(a) => a.encode(enc),
            Createhow3::Exclusive(v) => v.encode(enc),
        }
    }
}

impl Decode for Createhow3 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(match Createmode3::decode(dec)? {
            Createmode3::Unchecked => Createhow3::Unchecked(Sattr3::decode(dec)?),
            Createmode3::Guarded => Createhow3::Guarded(Sattr3::decode(dec)?),
            Createmode3::Exclusive => Createhow3::Exclusive(Createverf3::decode(dec)?),
        })
    }
}

/// `devicedata3`: attributes and device numbers of a new special file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Devicedata3 {
    pub dev_attributes: Sattr3,
    pub spec: Specdata3,
}
xdr_struct!(Devicedata3 { dev_attributes, spec });

/// `mknoddata3`: the union of MKNOD3args, switched on `ftype3`. The RFC's
/// `default: void` arm is split into [`Reg`](Self::Reg), [`Dir`](Self::Dir)
/// and [`Lnk`](Self::Lnk) so the server's handler still sees which type was
/// asked for (it answers `NFS3ERR_BADTYPE`). A value that is not an `ftype3`
/// at all is a decode error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mknoddata3 {
    Chr(Devicedata3),
    Blk(Devicedata3),
    Sock(Sattr3),
    Fifo(Sattr3),
    Reg,
    Dir,
    Lnk,
}

impl Mknoddata3 {
    pub fn ftype(&self) -> Ftype3 {
        match self {
            Mknoddata3::Chr(_) => Ftype3::Chr,
            Mknoddata3::Blk(_) => Ftype3::Blk,
            Mknoddata3::Sock(_) => Ftype3::Sock,
            Mknoddata3::Fifo(_) => Ftype3::Fifo,
            Mknoddata3::Reg => Ftype3::Reg,
            Mknoddata3::Dir => Ftype3::Dir,
            Mknoddata3::Lnk => Ftype3::Lnk,
        }
    }
}

impl Encode for Mknoddata3 {
    fn encode(&self, enc: &mut Encoder) {
        self.ftype().encode(enc);
        match self {
            Mknoddata3::Chr(d) | Mknoddata3::Blk(d) => d.encode(enc),
            Mknoddata3::Sock(a) | Mknoddata3::Fifo(a) => a.encode(enc),
            Mknoddata3::Reg | Mknoddata3::Dir | Mknoddata3::Lnk => {}
        }
    }
}

impl Decode for Mknoddata3 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(match Ftype3::decode(dec)? {
            Ftype3::Chr => Mknoddata3::Chr(Devicedata3::decode(dec)?),
            Ftype3::Blk => Mknoddata3::Blk(Devicedata3::decode(dec)?),
            Ftype3::Sock => Mknoddata3::Sock(Sattr3::decode(dec)?),
            Ftype3::Fifo => Mknoddata3::Fifo(Sattr3::decode(dec)?),
            Ftype3::Reg => Mknoddata3::Reg,
            Ftype3::Dir => Mknoddata3::Dir,
            Ftype3::Lnk => Mknoddata3::Lnk,
        })
    }
}

/// `symlinkdata3`: attributes and target of a new symbolic link.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Symlinkdata3 {
    pub symlink_attributes: Sattr3,
    pub symlink_data: Nfspath3,
}
xdr_struct!(Symlinkdata3 { symlink_attributes, symlink_data });

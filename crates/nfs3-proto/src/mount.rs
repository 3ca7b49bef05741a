//! MOUNT version 3 (RFC 1813 appendix I): how a client gets the root file
//! handle of an export.
//!
//! Procedure arguments and results, by procedure:
//! NULL `()` → `()`; MNT [`Dirpath`] → [`Mountres3`]; DUMP `()` →
//! [`Mountlist`]; UMNT [`Dirpath`] → `()`; UMNTALL `()` → `()`;
//! EXPORT `()` → [`Exports`].

use keel_xdr::{Decode, Decoder, Encode, Encoder, XdrError, xdr_enum, xdr_struct};

use crate::nfs3::NFS3_FHSIZE;
use crate::{GROUPS_DECODE_MAX, LIST_DECODE_MAX, encode_array, encode_list};
use keel_xdr::bytes_newtype;

/// `MNTPATHLEN`: most bytes in a [`Dirpath`].
pub const DIRPATH_MAX: usize = 1024;
/// `MNTNAMLEN`: most bytes in a [`Name`] (host or group name).
pub const MNTNAMLEN: usize = 255;
/// `FHSIZE3`: most bytes in an [`Fhandle3`] (the same as an NFSv3 handle).
pub const FHSIZE3: usize = NFS3_FHSIZE;
/// Most auth flavors accepted in a MNT reply. The RFC leaves the array
/// unbounded; real servers send one to a handful.
pub const AUTH_FLAVORS_MAX: usize = 64;

procedures! {
    /// MOUNT3 procedure numbers.
    MountProc {
        Null = 0 "NULL",
        Mnt = 1 "MNT",
        Dump = 2 "DUMP",
        Umnt = 3 "UMNT",
        Umntall = 4 "UMNTALL",
        Export = 5 "EXPORT",
    }
}

/// `mountstat3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mountstat3 {
    #[default]
    Ok = 0,
    Perm = 1,
    Noent = 2,
    Io = 5,
    Acces = 13,
    Notdir = 20,
    Inval = 22,
    Nametoolong = 63,
    Notsupp = 10004,
    Serverfault = 10006,
}
xdr_enum!(Mountstat3 { Ok, Perm, Noent, Io, Acces, Notdir, Inval, Nametoolong, Notsupp, Serverfault });

impl Mountstat3 {
    /// The RFC's name, e.g. `"MNT3ERR_NOENT"`.
    pub fn name(self) -> &'static str {
        match self {
            Mountstat3::Ok => "MNT3_OK",
            Mountstat3::Perm => "MNT3ERR_PERM",
            Mountstat3::Noent => "MNT3ERR_NOENT",
            Mountstat3::Io => "MNT3ERR_IO",
            Mountstat3::Acces => "MNT3ERR_ACCES",
            Mountstat3::Notdir => "MNT3ERR_NOTDIR",
            Mountstat3::Inval => "MNT3ERR_INVAL",
            Mountstat3::Nametoolong => "MNT3ERR_NAMETOOLONG",
            Mountstat3::Notsupp => "MNT3ERR_NOTSUPP",
            Mountstat3::Serverfault => "MNT3ERR_SERVERFAULT",
        }
    }
}

impl std::fmt::Display for Mountstat3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

bytes_newtype!(
    /// `dirpath`: a server path name, at most [`DIRPATH_MAX`] bytes.
    Dirpath,
    DIRPATH_MAX
);

bytes_newtype!(
    /// `name`: a host or group name, at most [`MNTNAMLEN`] bytes.
    Name,
    MNTNAMLEN
);

bytes_newtype!(
    /// `fhandle3`: the root file handle of a mount, at most [`FHSIZE3`]
    /// bytes.
    Fhandle3,
    FHSIZE3
);

/// `mountres3_ok`: the root handle and the RPC auth flavors the server
/// accepts for it, in order of preference.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Mountres3Ok {
    pub fhandle: Fhandle3,
    pub auth_flavors: Vec<u32>,
}

impl Encode for Mountres3Ok {
    fn encode(&self, enc: &mut Encoder) {
        self.fhandle.encode(enc);
        encode_array(enc, &self.auth_flavors);
    }
}

impl Decode for Mountres3Ok {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(Mountres3Ok { fhandle: Fhandle3::decode(dec)?, auth_flavors: dec.array(AUTH_FLAVORS_MAX)? })
    }
}

/// `mountres3`: `MNT3_OK` with [`Mountres3Ok`], or another status and
/// nothing. `Fail` never holds [`Mountstat3::Ok`] (the decoder cannot
/// produce it; encoding it is a programming error checked in debug builds).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Mountres3 {
    Ok(Mountres3Ok),
    Fail(Mountstat3),
}

impl Mountres3 {
    pub fn status(&self) -> Mountstat3 {
        match self {
            Mountres3::Ok(_) => Mountstat3::Ok,
            Mountres3::Fail(s) => *s,
        }
    }
}

impl Encode for Mountres3 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Mountres3::Ok(ok) => {
                Mountstat3::Ok.encode(enc);
                ok.encode(enc);
            }
            Mountres3::Fail(status) => {
                debug_assert_ne!(*status, Mountstat3::Ok, "Mountres3::Fail with MNT3_OK");
                status.encode(enc);
            }
        }
    }
}

impl Decode for Mountres3 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        match Mountstat3::decode(dec)? {
            Mountstat3::Ok => Ok(Mountres3::Ok(Mountres3Ok::decode(dec)?)),
            status => Ok(Mountres3::Fail(status)),
        }
    }
}

/// `mountbody`: one entry of the DUMP reply (who has what mounted).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Mountbody {
    pub ml_hostname: Name,
    pub ml_directory: Dirpath,
}
xdr_struct!(Mountbody { ml_hostname, ml_directory });

/// `mountlist`: the DUMP reply, an XDR linked list of [`Mountbody`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Mountlist(pub Vec<Mountbody>);

impl Encode for Mountlist {
    fn encode(&self, enc: &mut Encoder) {
        encode_list(enc, &self.0);
    }
}

impl Decode for Mountlist {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.list(LIST_DECODE_MAX).map(Mountlist)
    }
}

/// `exportnode`: one exported directory and the groups (an XDR linked list
/// of names) allowed to mount it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Exportnode {
    pub ex_dir: Dirpath,
    pub ex_groups: Vec<Name>,
}

impl Encode for Exportnode {
    fn encode(&self, enc: &mut Encoder) {
        self.ex_dir.encode(enc);
        encode_list(enc, &self.ex_groups);
    }
}

impl Decode for Exportnode {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(Exportnode { ex_dir: Dirpath::decode(dec)?, ex_groups: dec.list(GROUPS_DECODE_MAX)? })
    }
}

/// `exports`: the EXPORT reply, an XDR linked list of [`Exportnode`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Exports(pub Vec<Exportnode>);

impl Encode for Exports {
    fn encode(&self, enc: &mut Encoder) {
        encode_list(enc, &self.0);
    }
}

impl Decode for Exports {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.list(LIST_DECODE_MAX).map(Exports)
    }
}

//! NFS version 3 (RFC 1813 sections 2 and 3), flat in this module:
//!
//! - the basic data types of sections 2.5/2.6 ([`Fattr3`], [`Sattr3`],
//!   [`NfsFh3`], ...), the size limits and the procedure numbers
//!   ([`Nfs3Proc`]);
//! - the `XXX3args` of every procedure ([`Lookup3Args`], [`Write3Args`], ...);
//! - the `XXX3resok`/`XXX3resfail` of every procedure, joined by the generic
//!   [`NfsResult`] union into `XXX3res` aliases ([`Lookup3Res`], ...);
//! - READDIR and READDIRPLUS, whose replies a server streams entry by entry
//!   ([`encode_entry3`], [`Entry3::xdr_len`], ...).

mod args;
mod readdir;
mod res;
mod types;

pub use args::*;
pub use readdir::*;
pub use res::*;
pub use types::*;

procedures! {
    /// NFSv3 procedure numbers (RFC 1813 section 3.3).
    Nfs3Proc {
        Null = 0 "NULL",
        Getattr = 1 "GETATTR",
        Setattr = 2 "SETATTR",
        Lookup = 3 "LOOKUP",
        Access = 4 "ACCESS",
        Readlink = 5 "READLINK",
        Read = 6 "READ",
        Write = 7 "WRITE",
        Create = 8 "CREATE",
        Mkdir = 9 "MKDIR",
        Symlink = 10 "SYMLINK",
        Mknod = 11 "MKNOD",
        Remove = 12 "REMOVE",
        Rmdir = 13 "RMDIR",
        Rename = 14 "RENAME",
        Link = 15 "LINK",
        Readdir = 16 "READDIR",
        Readdirplus = 17 "READDIRPLUS",
        Fsstat = 18 "FSSTAT",
        Fsinfo = 19 "FSINFO",
        Pathconf = 20 "PATHCONF",
        Commit = 21 "COMMIT",
    }
}

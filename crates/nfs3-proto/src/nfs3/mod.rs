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

/// NFSv3 procedure numbers (RFC 1813 section 3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Nfs3Proc {
    Null = 0,
    Getattr = 1,
    Setattr = 2,
    Lookup = 3,
    Access = 4,
    Readlink = 5,
    Read = 6,
    Write = 7,
    Create = 8,
    Mkdir = 9,
    Symlink = 10,
    Mknod = 11,
    Remove = 12,
    Rmdir = 13,
    Rename = 14,
    Link = 15,
    Readdir = 16,
    Readdirplus = 17,
    Fsstat = 18,
    Fsinfo = 19,
    Pathconf = 20,
    Commit = 21,
}

impl Nfs3Proc {
    /// Every procedure, in procedure-number order.
    pub const ALL: [Nfs3Proc; 22] = [
        Nfs3Proc::Null,
        Nfs3Proc::Getattr,
        Nfs3Proc::Setattr,
        Nfs3Proc::Lookup,
        Nfs3Proc::Access,
        Nfs3Proc::Readlink,
        Nfs3Proc::Read,
        Nfs3Proc::Write,
        Nfs3Proc::Create,
        Nfs3Proc::Mkdir,
        Nfs3Proc::Symlink,
        Nfs3Proc::Mknod,
        Nfs3Proc::Remove,
        Nfs3Proc::Rmdir,
        Nfs3Proc::Rename,
        Nfs3Proc::Link,
        Nfs3Proc::Readdir,
        Nfs3Proc::Readdirplus,
        Nfs3Proc::Fsstat,
        Nfs3Proc::Fsinfo,
        Nfs3Proc::Pathconf,
        Nfs3Proc::Commit,
    ];

    /// The procedure with number `n`, if there is one.
    pub fn from_u32(n: u32) -> Option<Self> {
        Self::ALL.get(usize::try_from(n).ok()?).copied()
    }

    /// The RFC's name without the `NFSPROC3_` prefix, e.g. `"WRITE"`.
    pub fn name(self) -> &'static str {
        match self {
            Nfs3Proc::Null => "NULL",
            Nfs3Proc::Getattr => "GETATTR",
            Nfs3Proc::Setattr => "SETATTR",
            Nfs3Proc::Lookup => "LOOKUP",
            Nfs3Proc::Access => "ACCESS",
            Nfs3Proc::Readlink => "READLINK",
            Nfs3Proc::Read => "READ",
            Nfs3Proc::Write => "WRITE",
            Nfs3Proc::Create => "CREATE",
            Nfs3Proc::Mkdir => "MKDIR",
            Nfs3Proc::Symlink => "SYMLINK",
            Nfs3Proc::Mknod => "MKNOD",
            Nfs3Proc::Remove => "REMOVE",
            Nfs3Proc::Rmdir => "RMDIR",
            Nfs3Proc::Rename => "RENAME",
            Nfs3Proc::Link => "LINK",
            Nfs3Proc::Readdir => "READDIR",
            Nfs3Proc::Readdirplus => "READDIRPLUS",
            Nfs3Proc::Fsstat => "FSSTAT",
            Nfs3Proc::Fsinfo => "FSINFO",
            Nfs3Proc::Pathconf => "PATHCONF",
            Nfs3Proc::Commit => "COMMIT",
        }
    }
}

impl std::fmt::Display for Nfs3Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

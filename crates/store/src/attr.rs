//! File attributes as a store reports and changes them.

/// Object types; the values are those of NFS's ftype3 for convenience, and
/// one of them is stored in every file handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FileType {
    Regular = 1,
    Directory = 2,
    BlockDevice = 3,
    CharDevice = 4,
    Symlink = 5,
    Socket = 6,
    Fifo = 7,
}

impl FileType {
    pub fn from_mode(mode: u32) -> Option<Self> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileType::Regular,
            libc::S_IFDIR => FileType::Directory,
            libc::S_IFBLK => FileType::BlockDevice,
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFLNK => FileType::Symlink,
            libc::S_IFSOCK => FileType::Socket,
            libc::S_IFIFO => FileType::Fifo,
            _ => return None,
        })
    }

    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => FileType::Regular,
            2 => FileType::Directory,
            3 => FileType::BlockDevice,
            4 => FileType::CharDevice,
            5 => FileType::Symlink,
            6 => FileType::Socket,
            7 => FileType::Fifo,
            _ => return None,
        })
    }

    /// Objects that cannot be opened for I/O without side effects (opening a
    /// device opens the device, opening a fifo blocks) and so are held by
    /// O_PATH descriptors.
    pub fn is_special(self) -> bool {
        !matches!(self, FileType::Regular | FileType::Directory)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Time {
    pub seconds: i64,
    pub nanos: u32,
}

/// What a client may know about an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attrs {
    pub ftype: FileType,
    /// Permission bits, including setuid, setgid and sticky (07777).
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Bytes of storage in use.
    pub used: u64,
    pub rdev_major: u32,
    pub rdev_minor: u32,
    /// The export's file system id, not the local device number.
    pub fsid: u64,
    pub fileid: u64,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    #[default]
    Keep,
    ServerNow,
    To(Time),
}

/// Attribute changes requested by a client (SETATTR, or the initial
/// attributes of a new object).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetAttrs {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: SetTime,
    pub mtime: SetTime,
}

impl SetAttrs {
    pub fn is_empty(&self) -> bool {
        *self == SetAttrs::default()
    }
}

/// Space and file counts of a file system (FSSTAT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStat {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
    pub total_files: u64,
    pub free_files: u64,
    pub avail_files: u64,
}

/// POSIX limits of a file system (PATHCONF, FSINFO).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub link_max: u32,
    pub name_max: u32,
    pub file_size_max: u64,
}

/// The ACCESS bits, in NFSv3's numbering.
pub mod access {
    pub const READ: u32 = 0x01;
    pub const LOOKUP: u32 = 0x02;
    pub const MODIFY: u32 = 0x04;
    pub const EXTEND: u32 = 0x08;
    pub const DELETE: u32 = 0x10;
    pub const EXECUTE: u32 = 0x20;
}

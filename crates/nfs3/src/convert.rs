//! Storage attributes to and from their wire form.

use keel_nfs3_proto::nfs3::{self as p, Fattr3, Ftype3, Nfstime3, Sattr3, Specdata3, WccAttr};
use keel_store::{Attrs, FileType, SetAttrs, SetTime, Time};

pub(crate) fn ftype(t: FileType) -> Ftype3 {
    match t {
        FileType::Regular => Ftype3::Reg,
        FileType::Directory => Ftype3::Dir,
        FileType::BlockDevice => Ftype3::Blk,
        FileType::CharDevice => Ftype3::Chr,
        FileType::Symlink => Ftype3::Lnk,
        FileType::Socket => Ftype3::Sock,
        FileType::Fifo => Ftype3::Fifo,
    }
}

/// NFSv3 times are unsigned 32-bit seconds: earlier than 1970 shows as
/// 1970, later than 2106 as 2106.
pub(crate) fn nfstime(t: Time) -> Nfstime3 {
    Nfstime3 { seconds: t.seconds.clamp(0, u32::MAX as i64) as u32, nseconds: t.nanos }
}

pub(crate) fn time(t: Nfstime3) -> Time {
    Time { seconds: i64::from(t.seconds), nanos: t.nseconds }
}

pub(crate) fn fattr(a: &Attrs) -> Fattr3 {
    Fattr3 {
        ftype: ftype(a.ftype),
        mode: a.mode,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        used: a.used,
        rdev: Specdata3 { specdata1: a.rdev_major, specdata2: a.rdev_minor },
        fsid: a.fsid,
        fileid: a.fileid,
        atime: nfstime(a.atime),
        mtime: nfstime(a.mtime),
        ctime: nfstime(a.ctime),
    }
}

pub(crate) fn wcc_attr(a: &Attrs) -> WccAttr {
    WccAttr { size: a.size, mtime: nfstime(a.mtime), ctime: nfstime(a.ctime) }
}

fn set_time(t: p::SetTime) -> SetTime {
    match t {
        p::SetTime::DontChange => SetTime::Keep,
        p::SetTime::ServerTime => SetTime::ServerNow,
        p::SetTime::ClientTime(t) => SetTime::To(time(t)),
    }
}

pub(crate) fn set_attrs(s: &Sattr3) -> SetAttrs {
    SetAttrs { mode: s.mode, uid: s.uid, gid: s.gid, size: s.size, atime: set_time(s.atime), mtime: set_time(s.mtime) }
}

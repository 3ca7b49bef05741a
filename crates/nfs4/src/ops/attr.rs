//! Attributes and access (RFC 8881 sections 18.1, 18.7, 18.15, 18.24,
//! 18.30, 18.31): GETATTR, SETATTR, VERIFY, NVERIFY, ACCESS, READLINK;
//! and the attributes of an object as every operation that returns some
//! (READDIR, OPEN, CREATE) builds them.

use keel_exports::{PseudoNodeId, SecFlavor};
use keel_nfs4_proto::*;
use keel_nfs4_state::IoAccess;
use keel_store::{Attrs, FileType, Object, SetAttrs, SetTime, Store, Time};

use crate::compound::{Compound, ExportFh, Filehandle};
use crate::errno::status;
use crate::owners::{OwnerKind, OwnerNames, owner_id};
use crate::{DIR_REPLY_BYTES_MAX, IO_BYTES_MAX};

/// The attributes Keel serves (`supported_attrs`): every REQUIRED one and
/// the RECOMMENDED ones the Linux client asks for.
pub(super) const SUPPORTED: &[u32] = &[
    FATTR4_SUPPORTED_ATTRS,
    FATTR4_TYPE,
    FATTR4_FH_EXPIRE_TYPE,
    FATTR4_CHANGE,
    FATTR4_SIZE,
    FATTR4_LINK_SUPPORT,
    FATTR4_SYMLINK_SUPPORT,
    FATTR4_NAMED_ATTR,
    FATTR4_FSID,
    FATTR4_UNIQUE_HANDLES,
    FATTR4_LEASE_TIME,
    FATTR4_RDATTR_ERROR,
    FATTR4_CANSETTIME,
    FATTR4_CASE_INSENSITIVE,
    FATTR4_CASE_PRESERVING,
    FATTR4_CHOWN_RESTRICTED,
    FATTR4_FILEHANDLE,
    FATTR4_FILEID,
    FATTR4_FILES_AVAIL,
    FATTR4_FILES_FREE,
    FATTR4_FILES_TOTAL,
    FATTR4_HOMOGENEOUS,
    FATTR4_MAXFILESIZE,
    FATTR4_MAXLINK,
    FATTR4_MAXNAME,
    FATTR4_MAXREAD,
    FATTR4_MAXWRITE,
    FATTR4_MODE,
    FATTR4_NO_TRUNC,
    FATTR4_NUMLINKS,
    FATTR4_OWNER,
    FATTR4_OWNER_GROUP,
    FATTR4_RAWDEV,
    FATTR4_SPACE_AVAIL,
    FATTR4_SPACE_FREE,
    FATTR4_SPACE_TOTAL,
    FATTR4_SPACE_USED,
    FATTR4_TIME_ACCESS,
    FATTR4_TIME_ACCESS_SET,
    FATTR4_TIME_DELTA,
    FATTR4_TIME_METADATA,
    FATTR4_TIME_MODIFY,
    FATTR4_TIME_MODIFY_SET,
    FATTR4_MOUNTED_ON_FILEID,
    FATTR4_SUPPATTR_EXCLCREAT,
];

/// What an EXCLUSIVE4_1 create sets besides its verifier (which the store
/// keeps in the times): the mode, given when the file is made. The client
/// sets the rest with a SETATTR.
pub(crate) const EXCLCREAT: &[u32] = &[FATTR4_MODE];

pub(crate) fn supported() -> Bitmap4 {
    Bitmap4::from_bits(SUPPORTED.iter().copied())
}

/// The change attribute: the ctime, as NFSv3's wcc data reports it (a
/// change of data or metadata moves it).
pub(crate) fn change(a: &Attrs) -> u64 {
    ((a.ctime.seconds as u64) << 30) | u64::from(a.ctime.nanos & ((1 << 30) - 1))
}

fn time(t: Time) -> Nfstime4 {
    Nfstime4 { seconds: t.seconds, nseconds: t.nanos }
}

fn ftype(t: FileType) -> NfsFtype4 {
    match t {
        FileType::Regular => NfsFtype4::Nf4reg,
        FileType::Directory => NfsFtype4::Nf4dir,
        FileType::BlockDevice => NfsFtype4::Nf4blk,
        FileType::CharDevice => NfsFtype4::Nf4chr,
        FileType::Symlink => NfsFtype4::Nf4lnk,
        FileType::Socket => NfsFtype4::Nf4sock,
        FileType::Fifo => NfsFtype4::Nf4fifo,
    }
}

/// An owner as the caller is told it (`owners.rs`): a number, as knfsd
/// sends them with idmapping off, or under Kerberos `name@domain` when
/// the server is given a domain.
fn owner<S: Store>(c: &Compound<'_, S>, id: u32, kind: OwnerKind) -> Utf8StrMixed {
    if c.flavor() != SecFlavor::Sys
        && let Some(name) = c.program.owner_names.as_ref().and_then(|n| n.name_of(id, kind))
    {
        return (*name).into();
    }
    id.to_string().as_str().into()
}

/// The id an owner string names (`owners.rs`); NFS4ERR_BADOWNER if none.
fn parse_owner(s: &Utf8StrMixed, kind: OwnerKind, names: Option<&OwnerNames>) -> Result<u32, Nfsstat4> {
    s.as_str().and_then(|s| owner_id(s, kind, names)).ok_or(Nfsstat4::Badowner)
}

/// The attributes common to every object (what the server and the
/// client's file system agree on).
fn server_wide<S: Store>(c: &Compound<'_, S>) -> Attrs4 {
    Attrs4 {
        supported_attrs: Some(supported()),
        fh_expire_type: Some(FH4_PERSISTENT),
        link_support: Some(true),
        symlink_support: Some(true),
        named_attr: Some(false),
        unique_handles: Some(true),
        lease_time: Some(c.program.lease_seconds()),
        cansettime: Some(true),
        case_insensitive: Some(false),
        case_preserving: Some(true),
        chown_restricted: Some(true),
        homogeneous: Some(true),
        maxread: Some(u64::from(IO_BYTES_MAX)),
        maxwrite: Some(u64::from(IO_BYTES_MAX)),
        no_trunc: Some(true),
        time_delta: Some(Nfstime4 { seconds: 0, nseconds: 1 }),
        suppattr_exclcreat: Some(Bitmap4::from_bits(EXCLCREAT.iter().copied())),
        ..Attrs4::default()
    }
}

fn wants_any(request: &Bitmap4, attrs: &[u32]) -> bool {
    attrs.iter().any(|a| request.contains(*a))
}

/// The attributes `request` asks for of an export's object whose
/// attributes are `a`, before encoding.
pub(crate) fn export_values<S: Store>(
    c: &Compound<'_, S>,
    obj: &S::Object,
    a: &Attrs,
    request: &Bitmap4,
) -> Result<Attrs4, Nfsstat4> {
    let store = c.store();
    let mut v = server_wide(c);
    v.type_ = Some(ftype(a.ftype));
    v.change = Some(change(a));
    v.size = Some(a.size);
    v.fsid = Some(Fsid4 { major: a.fsid, minor: 0 });
    v.filehandle = Some(NfsFh4(obj.handle().clone()));
    v.fileid = Some(a.fileid);
    v.mode = Some(a.mode & 0o7777);
    v.numlinks = Some(a.nlink);
    v.owner = Some(owner(c, a.uid, OwnerKind::User));
    v.owner_group = Some(owner(c, a.gid, OwnerKind::Group));
    v.rawdev = Some(Specdata4 { specdata1: a.rdev_major, specdata2: a.rdev_minor });
    v.space_used = Some(a.used);
    v.time_access = Some(time(a.atime));
    v.time_metadata = Some(time(a.ctime));
    v.time_modify = Some(time(a.mtime));
    v.mounted_on_fileid = Some(a.fileid);
    if request.contains(FATTR4_MOUNTED_ON_FILEID)
        && let Some(fileid) = c.program.mounted_on_fileid(c.ctx.peer, c.flavor(), obj)
    {
        v.mounted_on_fileid = Some(fileid);
    }
    if wants_any(request, &[FATTR4_MAXFILESIZE, FATTR4_MAXLINK, FATTR4_MAXNAME]) {
        let l = store.limits(obj);
        v.maxfilesize = Some(l.file_size_max);
        v.maxlink = Some(l.link_max);
        v.maxname = Some(l.name_max);
    }
    let fs = [
        FATTR4_FILES_AVAIL,
        FATTR4_FILES_FREE,
        FATTR4_FILES_TOTAL,
        FATTR4_SPACE_AVAIL,
        FATTR4_SPACE_FREE,
        FATTR4_SPACE_TOTAL,
    ];
    if wants_any(request, &fs) {
        let st = store.fsstat(obj).map_err(|e| status(&e))?;
        v.files_avail = Some(st.avail_files);
        v.files_free = Some(st.free_files);
        v.files_total = Some(st.total_files);
        v.space_avail = Some(st.avail_bytes);
        v.space_free = Some(st.free_bytes);
        v.space_total = Some(st.total_bytes);
    }
    Ok(v)
}

/// The attributes `request` asks for of a pseudo directory.
pub(crate) fn pseudo_attrs<S: Store>(
    c: &mut Compound<'_, S>,
    node: PseudoNodeId,
    request: &Bitmap4,
) -> Result<Fattr4, Nfsstat4> {
    let fs = c.pseudo();
    let a = fs.attrs(node).map_err(crate::errno::pseudo_status)?;
    let started = time(c.program.started());
    let mut v = server_wide(c);
    v.type_ = Some(NfsFtype4::Nf4dir);
    v.change = Some(a.change);
    v.size = Some(4096);
    v.fsid = Some(Fsid4 { major: a.fsid, minor: 0 });
    v.filehandle = Some(NfsFh4(fs.handle(node)));
    v.fileid = Some(a.fileid);
    v.mode = Some(a.mode);
    v.numlinks = Some(a.nlink);
    v.owner = Some(owner(c, a.uid, OwnerKind::User));
    v.owner_group = Some(owner(c, a.gid, OwnerKind::Group));
    v.rawdev = Some(Specdata4 { specdata1: 0, specdata2: 0 });
    v.space_used = Some(0);
    v.time_access = Some(started);
    v.time_metadata = Some(started);
    v.time_modify = Some(started);
    v.mounted_on_fileid = Some(a.fileid);
    v.maxfilesize = Some(0);
    v.maxlink = Some(u32::MAX);
    v.maxname = Some(keel_store::NAME_BYTES_MAX as u32);
    for (field, value) in [
        (&mut v.files_avail, 0),
        (&mut v.files_free, 0),
        (&mut v.files_total, 0),
        (&mut v.space_avail, 0),
        (&mut v.space_free, 0),
        (&mut v.space_total, 0),
    ] {
        *field = Some(value);
    }
    Ok(v.to_fattr4(request))
}

/// Whether `request` asks for the size or the change attribute: what a
/// write delegation's holder may have changed unseen by the server.
pub(crate) fn reads_size_or_change(request: &Bitmap4) -> bool {
    request.contains(FATTR4_SIZE) || request.contains(FATTR4_CHANGE)
}

/// The attributes of the current filehandle that `request` asks for (GETATTR,
/// VERIFY, NVERIFY). The size and change of a file another client holds a
/// write delegation on are the holder's ([`crate::deleg::before_size_read`]:
/// RFC 8881 section 10.4.3), or NFS4ERR_DELAY while it is recalled.
pub(crate) fn current_attrs<S: Store>(c: &mut Compound<'_, S>, request: &Bitmap4) -> Result<Fattr4, Nfsstat4> {
    match c.current()?.clone() {
        Filehandle::Pseudo(node) => pseudo_attrs(c, node, request),
        Filehandle::Export(fh) => {
            let holders_size = if reads_size_or_change(request) && c.program.callbacks.any_write_granted() {
                crate::deleg::before_size_read(c, &fh)?
            } else {
                None
            };
            // Read after the holder was asked: its answer may have moved
            // the times.
            let a = c.store().getattr(&fh.object).map_err(|e| status(&e))?;
            let mut values = export_values(c, &fh.object, &a, request)?;
            if let Some(size) = holders_size {
                values.size = Some(size);
            }
            Ok(values.to_fattr4(request))
        }
    }
}

pub(super) fn getattr<S: Store>(c: &mut Compound<'_, S>, args: Getattr4Args) -> Result<Getattr4ResOk, Nfsstat4> {
    Ok(Getattr4ResOk { obj_attributes: current_attrs(c, &args.attr_request)? })
}

/// Whether the current object's attributes are those given (VERIFY and
/// NVERIFY): compared as their encodings, as knfsd compares them.
fn same_attrs<S: Store>(c: &mut Compound<'_, S>, given: &Fattr4) -> Result<bool, Nfsstat4> {
    Attrs4::from_fattr4(given, AttrUse::Verify).map_err(|e| e.status())?;
    if !given.attrmask.difference(&supported()).is_empty() {
        return Err(Nfsstat4::Attrnotsupp);
    }
    let ours = current_attrs(c, &given.attrmask)?;
    Ok(ours.attrmask == given.attrmask && ours.attr_vals == given.attr_vals)
}

pub(super) fn verify<S: Store>(c: &mut Compound<'_, S>, args: Verify4Args) -> Result<(), Nfsstat4> {
    if same_attrs(c, &args.obj_attributes)? { Ok(()) } else { Err(Nfsstat4::NotSame) }
}

pub(super) fn nverify<S: Store>(c: &mut Compound<'_, S>, args: Nverify4Args) -> Result<(), Nfsstat4> {
    if same_attrs(c, &args.obj_attributes)? { Err(Nfsstat4::Same) } else { Ok(()) }
}

/// The changes an attribute list asks for (SETATTR, OPEN's and CREATE's
/// initial attributes), and the attributes it sets.
pub(crate) fn set_attrs(fattr: &Fattr4, names: Option<&OwnerNames>) -> Result<(SetAttrs, Bitmap4), Nfsstat4> {
    let a = Attrs4::from_fattr4(fattr, AttrUse::Set).map_err(|e| e.status())?;
    if a.time_create.is_some() || a.sec_label.is_some() {
        return Err(Nfsstat4::Attrnotsupp);
    }
    let settime = |t: &Option<Settime4>| match t {
        None => SetTime::Keep,
        Some(Settime4::SetToServerTime) => SetTime::ServerNow,
        Some(Settime4::SetToClientTime(t)) => SetTime::To(Time { seconds: t.seconds, nanos: t.nseconds }),
    };
    if let Some(Settime4::SetToClientTime(t)) = a.time_access_set.as_ref().or(a.time_modify_set.as_ref())
        && t.nseconds >= 1_000_000_000
    {
        return Err(Nfsstat4::Inval);
    }
    let set = SetAttrs {
        mode: a.mode.map(|m| m & 0o7777),
        uid: a.owner.as_ref().map(|s| parse_owner(s, OwnerKind::User, names)).transpose()?,
        gid: a.owner_group.as_ref().map(|s| parse_owner(s, OwnerKind::Group, names)).transpose()?,
        size: a.size,
        atime: settime(&a.time_access_set),
        mtime: settime(&a.time_modify_set),
    };
    Ok((set, a.bitmap()))
}

/// SETATTR (RFC 8881 section 18.30): a size change is I/O and needs a
/// stateid that allows writing, as WRITE does.
pub(super) fn setattr<S: Store>(c: &mut Compound<'_, S>, args: Setattr4Args) -> Setattr4Res {
    match do_setattr(c, &args) {
        Ok(attrsset) => Setattr4Res { status: Nfsstat4::Ok, attrsset },
        Err(status) => Setattr4Res { status, attrsset: Bitmap4::new() },
    }
}

fn do_setattr<S: Store>(c: &mut Compound<'_, S>, args: &Setattr4Args) -> Result<Bitmap4, Nfsstat4> {
    let fh = c.current_export(Nfsstat4::Rofs)?;
    let (set, bits) = set_attrs(&args.obj_attributes, c.program.owner_names.as_ref())?;
    fh.writable()?;
    // Held until the store has made the change.
    let _holder = crate::deleg::before_change(c, fh.handle())?;
    if set.size.is_some() {
        if fh.object.file_type() != FileType::Regular {
            return Err(if fh.object.file_type() == FileType::Directory { Nfsstat4::Isdir } else { Nfsstat4::Inval });
        }
        super::io::check_stateid(c, &args.stateid, &fh, IoAccess::Write)?;
    }
    // A change of a directory's attributes overlaps a change of its
    // entries as much as another entry's change does.
    let program: &crate::Nfs4Program<S> = c.program;
    let _change = program.exports.dir_changes().begin(&fh.object);
    let store = c.store();
    let who = c.act(&fh)?;
    store.setattr(who, &fh.object, &set, None, fh.options.sync).map_err(|e| status(&e))?;
    Ok(bits)
}

const ACCESS_ALL: u32 =
    ACCESS4_READ | ACCESS4_LOOKUP | ACCESS4_MODIFY | ACCESS4_EXTEND | ACCESS4_DELETE | ACCESS4_EXECUTE;

pub(super) fn access<S: Store>(c: &mut Compound<'_, S>, args: Access4Args) -> Result<Access4ResOk, Nfsstat4> {
    let supported = args.access & ACCESS_ALL;
    let access = match c.current()?.clone() {
        // Anyone may list and pass through the pseudo file system.
        Filehandle::Pseudo(_) => supported & (ACCESS4_READ | ACCESS4_LOOKUP | ACCESS4_EXECUTE),
        Filehandle::Export(fh) => granted(c, &fh, supported)?,
    };
    Ok(Access4ResOk { supported, access })
}

/// The ACCESS bits of `want` the caller has on `fh`'s object (NFSv3's
/// numbering is NFSv4's): none that change anything on a read-only export.
fn granted<S: Store>(c: &mut Compound<'_, S>, fh: &ExportFh<S::Object>, want: u32) -> Result<u32, Nfsstat4> {
    let store = c.store();
    let who = c.act(fh)?;
    let mut granted = store.access(who, &fh.object, want).map_err(|e| status(&e))?;
    if fh.writable().is_err() {
        granted &= !(ACCESS4_MODIFY | ACCESS4_EXTEND | ACCESS4_DELETE);
    }
    Ok(granted)
}

pub(super) fn readlink<S: Store>(c: &mut Compound<'_, S>, _: ()) -> Result<Readlink4ResOk, Nfsstat4> {
    let fh = c.current_export(Nfsstat4::Inval)?;
    if fh.object.file_type() != FileType::Symlink {
        return Err(Nfsstat4::Inval);
    }
    let store = c.store();
    let who = c.act(&fh)?;
    let target = store.readlink(who, &fh.object).map_err(|e| status(&e))?;
    Ok(Readlink4ResOk { link: target.into() })
}

/// Bytes a READDIR reply may take at most, whatever the client asks.
pub(crate) const READDIR_REPLY_BYTES_MAX: usize = DIR_REPLY_BYTES_MAX as usize;

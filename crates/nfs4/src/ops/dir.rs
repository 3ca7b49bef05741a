//! Names and directories (RFC 8881 sections 18.4, 18.9, 18.13, 18.14,
//! 18.23, 18.25, 18.26): LOOKUP, LOOKUPP, READDIR, CREATE, LINK, REMOVE,
//! RENAME. The pseudo file system is read-only (NFS4ERR_ROFS for a
//! change, as knfsd); LOOKUP crosses from it into an export's root, and
//! LOOKUPP from an export's root back to it.

use bytes::Bytes;
use keel_exports::Reached;
use keel_exports::dir_changes::DirChange;
use keel_exports::pseudo::ExportParent;
use keel_nfs4_proto::*;
use keel_store::{Attrs, FileType, NAME_BYTES_MAX, NodeKind, Object, Store};

use super::attr::{READDIR_REPLY_BYTES_MAX, change, export_values, pseudo_attrs, reads_size_or_change, set_attrs};
use super::fh::{export_root, reached};
use crate::compound::{Compound, ExportFh, Filehandle};
use crate::errno::{pseudo_status, status};

/// A component name as the store takes it: RFC 8881 section 14.5's
/// checks but UTF-8 (knfsd does not insist on it either: names are bytes
/// on the exported file system, and NFSv3 clients see them so), and no
/// '/' or NUL (NFS4ERR_BADNAME, as knfsd).
pub(super) fn name(n: &Component4) -> Result<&[u8], Nfsstat4> {
    match n.as_bytes() {
        [] => Err(Nfsstat4::Inval),
        b"." | b".." => Err(Nfsstat4::Badname),
        b if b.len() > NAME_BYTES_MAX => Err(Nfsstat4::Nametoolong),
        b if b.iter().any(|&c| c == b'/' || c == 0) => Err(Nfsstat4::Badname),
        b => Ok(b),
    }
}

/// The current filehandle as a directory of an export: NFS4ERR_ROFS for
/// a pseudo directory (changes), NFS4ERR_NOTDIR for anything else.
fn export_dir<S: Store>(c: &Compound<'_, S>) -> Result<ExportFh<S::Object>, Nfsstat4> {
    let fh = c.current_export(Nfsstat4::Rofs)?;
    is_dir(&fh.object)?;
    Ok(fh)
}

fn is_dir<O: Object>(obj: &O) -> Result<(), Nfsstat4> {
    match obj.file_type() {
        FileType::Directory => Ok(()),
        FileType::Symlink => Err(Nfsstat4::Symlink),
        _ => Err(Nfsstat4::Notdir),
    }
}

/// What `name` in the current directory is, without making it current
/// (LOOKUP, SECINFO).
pub(super) fn lookup_name<S: Store>(
    c: &mut Compound<'_, S>,
    n: &Component4,
) -> Result<Filehandle<S::Object>, Nfsstat4> {
    let n = name(n)?;
    match c.current()?.clone() {
        Filehandle::Pseudo(node) => {
            let to = c.pseudo().lookup(node, n).map_err(pseudo_status)?;
            reached(c, to)
        }
        Filehandle::Export(dir) => {
            is_dir(&dir.object)?;
            let store = c.store();
            let who = c.act(&dir)?;
            let (object, _) = store.lookup(who, &dir.object, n).map_err(|e| status(&e))?;
            let fh = ExportFh { object, options: dir.options, cred: dir.cred };
            cross_nested(c, fh).map(Filehandle::Export)
        }
    }
}

/// An export's directory on which another admitted export is mounted is
/// that export's root (knfsd crosses into it).
fn cross_nested<S: Store>(c: &mut Compound<'_, S>, fh: ExportFh<S::Object>) -> Result<ExportFh<S::Object>, Nfsstat4> {
    if fh.object.file_type() != FileType::Directory {
        return Ok(fh);
    }
    let fs = c.pseudo();
    let outer = fh.object.export_id();
    for nested in fs.nested_exports().iter().filter(|n| n.outer == outer) {
        let below = c.store().lookup_path(outer, &nested.below);
        if below.is_ok_and(|b| b.handle() == fh.object.handle()) {
            return export_root(c, nested.export_id);
        }
    }
    Ok(fh)
}

/// What `step` reaches from the current filehandle, if the call's flavor
/// may use it (RFC 8881 section 2.6.3.1.1.3): LOOKUP and LOOKUPP answer
/// NFS4ERR_WRONGSEC for what they reach, so a client crosses into an
/// export with that export's flavor whatever the directory's. From a
/// directory the flavor may not use, every failure is NFS4ERR_WRONGSEC:
/// which names exist there is not told.
fn step_checked<S: Store>(
    c: &mut Compound<'_, S>,
    step: impl FnOnce(&mut Compound<'_, S>) -> Result<Filehandle<S::Object>, Nfsstat4>,
) -> Result<Filehandle<S::Object>, Nfsstat4> {
    let dir = c.current()?.clone();
    let dir_admits = c.check_sec(&dir).is_ok();
    match step(c) {
        Ok(fh) => c.check_sec(&fh).map(|()| fh),
        Err(e) if dir_admits => Err(e),
        Err(_) => Err(Nfsstat4::Wrongsec),
    }
}

pub(super) fn lookup<S: Store>(c: &mut Compound<'_, S>, args: Lookup4Args) -> Result<(), Nfsstat4> {
    let fh = step_checked(c, |c| lookup_name(c, &args.objname))?;
    c.current = Some(fh);
    c.stateid.clear();
    Ok(())
}

pub(super) fn lookupp<S: Store>(c: &mut Compound<'_, S>, _: ()) -> Result<(), Nfsstat4> {
    let parent = step_checked(c, parent)?;
    c.current = Some(parent);
    c.stateid.clear();
    Ok(())
}

/// The parent of the current directory, without making it current
/// (LOOKUPP, SECINFO_NO_NAME).
pub(super) fn parent<S: Store>(c: &mut Compound<'_, S>) -> Result<Filehandle<S::Object>, Nfsstat4> {
    let parent = match c.current()?.clone() {
        Filehandle::Pseudo(node) => Filehandle::Pseudo(c.pseudo().lookupp(node).map_err(pseudo_status)?),
        Filehandle::Export(fh) => {
            is_dir(&fh.object)?;
            if c.program.is_export_root(&fh.object) {
                match c.pseudo().parent_of_export(fh.object.export_id()) {
                    Some(ExportParent::Pseudo { dir, .. }) => Filehandle::Pseudo(dir),
                    Some(ExportParent::InExport { outer, dir }) => {
                        let obj = c.store().lookup_path(outer, &dir).map_err(|e| status(&e))?;
                        Filehandle::Export(c.admit(obj.handle())?)
                    }
                    // The root of everything, or an export this client
                    // no longer sees.
                    Some(ExportParent::IsRoot) | None => return Err(Nfsstat4::Noent),
                }
            } else {
                let store = c.store();
                let who = c.act(&fh)?;
                let (object, _) = store.lookup(who, &fh.object, b"..").map_err(|e| status(&e))?;
                Filehandle::Export(ExportFh { object, options: fh.options, cred: fh.cred })
            }
        }
    };
    Ok(parent)
}

/// A directory's change attribute now, for `change_info4`.
fn dir_change<S: Store>(c: &Compound<'_, S>, dir: &S::Object) -> u64 {
    c.store().getattr(dir).map_or(0, |a| change(&a))
}

/// A directory's change attribute before a change of it, with the change's
/// window ([`keel_exports::dir_changes`]): see [`cinfo`].
pub(super) struct DirBefore<'a> {
    change: DirChange<'a>,
    before: u64,
}

/// A change of `dir` starts: its change attribute before it.
pub(super) fn dir_before<'a, S: Store>(c: &Compound<'a, S>, dir: &S::Object) -> DirBefore<'a> {
    let program: &'a crate::Nfs4Program<S> = c.program;
    let change = program.exports.dir_changes().begin(dir);
    DirBefore { change, before: dir_change(c, dir) }
}

/// The change of `dir` that `before` started is done: atomic if no other
/// change of the directory through this server overlapped it (a client
/// then keeps its cached names and permissions of the directory).
pub(super) fn cinfo<S: Store>(c: &Compound<'_, S>, before: DirBefore<'_>, dir: &S::Object) -> ChangeInfo4 {
    let after = dir_change(c, dir);
    ChangeInfo4 { atomic: before.change.end(), before: before.before, after }
}

pub(super) fn create<S: Store>(c: &mut Compound<'_, S>, args: Create4Args) -> Result<Create4ResOk, Nfsstat4> {
    let dir = export_dir(c)?;
    let n = name(&args.objname)?.to_vec();
    let (set, attrset) = set_attrs(&args.createattrs, c.program.owner_names.as_ref())?;
    if set.size.is_some() {
        return Err(Nfsstat4::Inval);
    }
    dir.writable()?;
    let before = dir_before(c, &dir.object);
    let store = c.store();
    let sync = dir.options.sync;
    let who = c.act(&dir)?;
    let d = &dir.object;
    let created = match &args.objtype {
        Createtype4::Dir => store.mkdir(who, d, &n, &set, sync),
        Createtype4::Lnk(target) => {
            if target.is_empty() {
                return Err(Nfsstat4::Inval);
            }
            store.symlink(who, d, &n, target.as_bytes(), &set, sync)
        }
        Createtype4::Blk(dev) => {
            store.mknod(who, d, &n, NodeKind::Block { major: dev.specdata1, minor: dev.specdata2 }, &set, sync)
        }
        Createtype4::Chr(dev) => {
            store.mknod(who, d, &n, NodeKind::Char { major: dev.specdata1, minor: dev.specdata2 }, &set, sync)
        }
        Createtype4::Sock => store.mknod(who, d, &n, NodeKind::Socket, &set, sync),
        Createtype4::Fifo => store.mknod(who, d, &n, NodeKind::Fifo, &set, sync),
        Createtype4::Other(_) => return Err(Nfsstat4::Badtype),
    }
    .map_err(|e| status(&e))?;
    let cinfo = cinfo(c, before, &dir.object);
    c.current = Some(Filehandle::Export(ExportFh { object: created.object, options: dir.options, cred: dir.cred }));
    c.stateid.clear();
    Ok(Create4ResOk { cinfo, attrset })
}

/// The saved filehandle as an object of the same export as `current`
/// (LINK, RENAME): NFS4ERR_XDEV across exports.
fn saved_same_export<S: Store>(
    c: &Compound<'_, S>,
    current: &ExportFh<S::Object>,
) -> Result<ExportFh<S::Object>, Nfsstat4> {
    match c.saved.as_ref().ok_or(Nfsstat4::Nofilehandle)? {
        Filehandle::Pseudo(_) => Err(Nfsstat4::Xdev),
        Filehandle::Export(fh) if fh.object.export_id() != current.object.export_id() => Err(Nfsstat4::Xdev),
        Filehandle::Export(fh) => Ok(fh.clone()),
    }
}

pub(super) fn link<S: Store>(c: &mut Compound<'_, S>, args: Link4Args) -> Result<Link4ResOk, Nfsstat4> {
    let dir = export_dir(c)?;
    let file = saved_same_export(c, &dir)?;
    if file.object.file_type() == FileType::Directory {
        return Err(Nfsstat4::Isdir);
    }
    let n = name(&args.newname)?.to_vec();
    dir.writable()?;
    let _holder = crate::deleg::before_change(c, file.handle())?;
    let before = dir_before(c, &dir.object);
    let store = c.store();
    let who = c.act(&dir)?;
    store.link(who, &file.object, &dir.object, &n, dir.options.sync).map_err(|e| status(&e))?;
    Ok(Link4ResOk { cinfo: cinfo(c, before, &dir.object) })
}

/// NFS4ERR_GRACE during a grace period: a file removed or renamed over
/// then may be one a client of the last start is yet to reclaim an open
/// of, by its filehandle (RFC 8881 section 8.4.2; knfsd refuses both too).
fn outside_grace<S: Store>(c: &Compound<'_, S>) -> Result<(), Nfsstat4> {
    let now = c.now;
    if c.program.with_state(|s| s.in_grace(now)) { Err(Nfsstat4::Grace) } else { Ok(()) }
}

pub(super) fn remove<S: Store>(c: &mut Compound<'_, S>, args: Remove4Args) -> Result<Remove4ResOk, Nfsstat4> {
    let dir = export_dir(c)?;
    let n = name(&args.target)?.to_vec();
    dir.writable()?;
    outside_grace(c)?;
    let _holder = crate::deleg::before_change_of_name(c, &dir, &n)?;
    let before = dir_before(c, &dir.object);
    let store = c.store();
    let who = c.act(&dir)?;
    let (object, _) = store.lookup(who, &dir.object, &n).map_err(|e| status(&e))?;
    if object.file_type() == FileType::Directory {
        store.rmdir(who, &dir.object, &n, dir.options.sync)
    } else {
        store.remove(who, &dir.object, &n, dir.options.sync)
    }
    .map_err(|e| status(&e))?;
    Ok(Remove4ResOk { cinfo: cinfo(c, before, &dir.object) })
}

pub(super) fn rename<S: Store>(c: &mut Compound<'_, S>, args: Rename4Args) -> Result<Rename4ResOk, Nfsstat4> {
    let to_dir = export_dir(c)?;
    let from_dir = saved_same_export(c, &to_dir)?;
    is_dir(&from_dir.object)?;
    let (from, to) = (name(&args.oldname)?.to_vec(), name(&args.newname)?.to_vec());
    to_dir.writable()?;
    outside_grace(c)?;
    let _holder_from = crate::deleg::before_change_of_name(c, &from_dir, &from)?;
    let _holder_to = crate::deleg::before_change_of_name(c, &to_dir, &to)?;
    // One directory: one change of it, not two overlapping ones.
    let one_dir = from_dir.object.file_key() == to_dir.object.file_key();
    let from_before = dir_before(c, &from_dir.object);
    let to_before = (!one_dir).then(|| dir_before(c, &to_dir.object));
    let store = c.store();
    let who = c.act(&to_dir)?;
    store.rename(who, &from_dir.object, &from, &to_dir.object, &to, to_dir.options.sync).map_err(|e| status(&e))?;
    let source_cinfo = cinfo(c, from_before, &from_dir.object);
    let target_cinfo = match to_before {
        Some(to_before) => cinfo(c, to_before, &to_dir.object),
        None => source_cinfo,
    };
    Ok(Rename4ResOk { source_cinfo, target_cinfo })
}

/// Bytes of a READDIR result besides its entries: operation number,
/// status, cookie verifier, the list's end and eof.
const READDIR_RESULT_FIXED_BYTES: usize = 4 + 4 + 8 + Dirlist4::EMPTY_XDR_LEN;
/// Fewest bytes an entry takes (cookie, a one-byte name, an empty
/// attribute list, the list's link): bounds how many names are read ahead.
const ENTRY_BYTES_MIN: usize = 4 + 8 + 8 + 8;

pub(super) fn readdir<S: Store>(c: &mut Compound<'_, S>, args: Readdir4Args) -> Result<Readdir4ResOk, Nfsstat4> {
    if args.cookie == 1 || args.cookie == 2 {
        return Err(Nfsstat4::BadCookie);
    }
    let maxcount = (args.maxcount as usize).min(READDIR_REPLY_BYTES_MAX).min(c.reply_room());
    let Some(room) = maxcount.checked_sub(READDIR_RESULT_FIXED_BYTES) else { return Err(Nfsstat4::Toosmall) };
    let mut page = Page { room, dircount: args.dircount as usize, used: 0, used_dircount: 0, entries: Vec::new() };
    let (cookieverf, eof) = match c.current()?.clone() {
        Filehandle::Pseudo(node) => {
            let fs = c.pseudo();
            if args.cookie != 0 && args.cookieverf != [0; 8] {
                return Err(Nfsstat4::NotSame);
            }
            let listing = fs.readdir(node, args.cookie, room / ENTRY_BYTES_MIN).map_err(pseudo_status)?;
            let mut eof = listing.eof;
            for e in &listing.entries {
                let attrs = match e.reached {
                    Reached::Pseudo(n) => pseudo_attrs(c, n, &args.attr_request),
                    Reached::ExportRoot(id) => export_root(c, id).and_then(|root| {
                        let a = c.store().getattr(&root.object).map_err(|e| status(&e))?;
                        let mut v = export_values(c, &root.object, &a, &args.attr_request)?;
                        v.mounted_on_fileid = Some(e.fileid);
                        Ok(v.to_fattr4(&args.attr_request))
                    }),
                };
                if !page.add(e.cookie, e.name, attrs, &args.attr_request)? {
                    eof = false;
                    break;
                }
            }
            ([0; 8], eof)
        }
        Filehandle::Export(dir) => {
            is_dir(&dir.object)?;
            let store = c.store();
            let verifier = store.cookie_verifier(&dir.object);
            if args.cookie != 0 && args.cookieverf != verifier {
                return Err(Nfsstat4::NotSame);
            }
            let ahead = room / ENTRY_BYTES_MIN;
            let mut names: Vec<(Bytes, u64)> = Vec::new();
            let who = c.act(&dir)?;
            let end = store
                .readdir(who, &dir.object, args.cookie, |e| {
                    if e.name != b"." && e.name != b".." {
                        names.push((Bytes::copy_from_slice(e.name), e.cookie));
                    }
                    names.len() < ahead
                })
                .map_err(|e| status(&e))?;
            let mut eof = end;
            for (n, cookie) in names {
                let who = c.act(&dir)?;
                let attrs = match store.entry_plus(who, &dir.object, &n) {
                    Some((handle, a)) => as_delegated(c, &dir, &n, &handle, a, &args.attr_request)
                        .and_then(|a| entry_attrs(c, &dir, handle, &a, &args.attr_request)),
                    // Gone since it was listed, or not readable.
                    None => Err(Nfsstat4::Noent),
                };
                if attrs == Err(Nfsstat4::Noent) && !args.attr_request.contains(FATTR4_RDATTR_ERROR) {
                    continue;
                }
                if !page.add(cookie, &n, attrs, &args.attr_request)? {
                    eof = false;
                    break;
                }
            }
            (verifier, eof)
        }
    };
    Ok(Readdir4ResOk { cookieverf, reply: Dirlist4 { entries: page.entries, eof } })
}

/// The attributes `a` of the entry `name` of `dir`, whose handle is
/// `handle`, with the size and change of a file another client holds a
/// write delegation on as its holder reports them: what GETATTR answers
/// ([`crate::deleg::before_size_read`]; knfsd encodes its entries'
/// attributes as GETATTR's). NFS4ERR_DELAY while it is recalled (the
/// entry's `rdattr_error`, or the READDIR's if that is not asked for).
fn as_delegated<S: Store>(
    c: &mut Compound<'_, S>,
    dir: &ExportFh<S::Object>,
    name: &[u8],
    handle: &Bytes,
    a: Attrs,
    request: &Bitmap4,
) -> Result<Attrs, Nfsstat4> {
    if a.ftype != FileType::Regular || !reads_size_or_change(request) {
        return Ok(a);
    }
    let Some(holder) = crate::deleg::holder_to_ask(c, handle)? else { return Ok(a) };
    let store = c.store();
    let who = c.act(dir)?;
    let (object, _) = store.lookup(who, &dir.object, name).map_err(|e| status(&e))?;
    if object.handle() != handle {
        // Another file by that name since it was listed: this one is gone.
        return Err(Nfsstat4::Noent);
    }
    let holders_size = crate::deleg::ask_holder_or_recall(c, handle, &object, holder)?;
    // Read again: the holder's answer may have moved the times.
    let mut a = store.getattr(&object).map_err(|e| status(&e))?;
    if let Some(size) = holders_size {
        a.size = size;
    }
    Ok(a)
}

/// The attributes of a directory entry of an export, by its handle.
fn entry_attrs<S: Store>(
    c: &Compound<'_, S>,
    dir: &ExportFh<S::Object>,
    handle: Bytes,
    a: &Attrs,
    request: &Bitmap4,
) -> Result<Fattr4, Nfsstat4> {
    // Most requests need nothing of the object but its handle and the
    // attributes the listing gave; the file system's counts and limits
    // are the directory's (one export, one file system).
    let mut v = export_values(c, &dir.object, a, request)?;
    v.filehandle = request.contains(FATTR4_FILEHANDLE).then(|| NfsFh4(handle));
    v.mounted_on_fileid = request.contains(FATTR4_MOUNTED_ON_FILEID).then_some(a.fileid);
    Ok(v.to_fattr4(request))
}

/// The entries of one READDIR reply, within its byte limits.
struct Page {
    room: usize,
    dircount: usize,
    used: usize,
    used_dircount: usize,
    entries: Vec<Entry4>,
}

impl Page {
    /// Adds an entry if it fits; an entry whose attributes could not be
    /// read carries `rdattr_error` if asked for, else fails the READDIR.
    /// NFS4ERR_TOOSMALL if not even the first fits.
    fn add(
        &mut self,
        cookie: u64,
        name: &[u8],
        attrs: Result<Fattr4, Nfsstat4>,
        request: &Bitmap4,
    ) -> Result<bool, Nfsstat4> {
        let attrs = match attrs {
            Ok(a) => a,
            Err(e) if request.contains(FATTR4_RDATTR_ERROR) => {
                Attrs4 { rdattr_error: Some(e), ..Attrs4::default() }.to_fattr4(request)
            }
            Err(e) => return Err(e),
        };
        let entry = Entry4 { cookie, name: name.into(), attrs };
        let fits = self.used + entry.xdr_len() <= self.room
            && (self.dircount == 0
                || self.entries.is_empty()
                || self.used_dircount + entry.dircount_len() <= self.dircount);
        if !fits {
            return if self.entries.is_empty() { Err(Nfsstat4::Toosmall) } else { Ok(false) };
        }
        self.used += entry.xdr_len();
        self.used_dircount += entry.dircount_len();
        self.entries.push(entry);
        Ok(true)
    }
}

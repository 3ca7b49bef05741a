//! Opens, share reservations and delegations (RFC 8881 sections 18.2,
//! 18.6, 18.16, 18.18): OPEN, CLOSE, OPEN_DOWNGRADE, DELEGRETURN. Share
//! reservations are keel-nfs4-state's; whether OPEN offers a read
//! delegation is `deleg.rs`'s.

use keel_nfs4_proto::*;
use keel_nfs4_state::{ClientId, OpenClaim, ShareAccess};
use keel_store::{CreateMode, FileType, Object, SetAttrs, Store};

use super::attr::{change, set_attrs};
use crate::compound::{Compound, ExportFh, Filehandle};
use crate::errno::status;

fn session_client<S: Store>(c: &Compound<'_, S>) -> Result<ClientId, Nfsstat4> {
    c.slot.as_ref().map(|g| g.clientid).ok_or(Nfsstat4::OpNotInSession)
}

/// What OPEN opens: the file, the directory's change around it, the
/// attributes set.
struct Opened<O> {
    file: ExportFh<O>,
    cinfo: ChangeInfo4,
    attrset: Bitmap4,
}

/// OPEN's file must be a regular file: NFS4ERR_ISDIR, NFS4ERR_SYMLINK or
/// NFS4ERR_WRONG_TYPE otherwise (RFC 8881 section 18.16.3).
fn regular(t: FileType) -> Result<(), Nfsstat4> {
    match t {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(Nfsstat4::Isdir),
        FileType::Symlink => Err(Nfsstat4::Symlink),
        _ => Err(Nfsstat4::WrongType),
    }
}

pub(super) fn open<S: Store>(c: &mut Compound<'_, S>, args: Open4Args) -> Result<Open4ResOk, Nfsstat4> {
    let client = session_client(c)?;
    let share = ShareAccess::from_wire(args.share_access, args.share_deny)?;
    let now = c.now;
    let new_state = matches!(
        args.claim,
        OpenClaim4::ClaimNull(_)
            | OpenClaim4::ClaimFh
            | OpenClaim4::ClaimDelegateCur(_)
            | OpenClaim4::ClaimDelegCurFh(_)
    );
    if new_state {
        // Before the file is made: an OPEN refused with NFS4ERR_GRACE
        // (in the grace period, or before the client's RECLAIM_COMPLETE)
        // leaves the directory as it was, as knfsd's does.
        c.program.with_state(|s| s.check_new_state_for(client, now))?;
    }
    let (opened, claim) = match &args.claim {
        OpenClaim4::ClaimNull(name) => (by_name(c, name, &args.openhow, share)?, OpenClaim::Null),
        OpenClaim4::ClaimFh => (by_fh(c, share)?, OpenClaim::Null),
        // Outside a grace period the state answers NFS4ERR_NO_GRACE.
        OpenClaim4::ClaimPrevious(_) => (by_fh(c, share)?, OpenClaim::Previous),
        // The state checks the delegation stateid.
        OpenClaim4::ClaimDelegateCur(cur) => {
            (by_name(c, &cur.file, &Openflag4::Open4Nocreate, share)?, OpenClaim::DelegateCur(cur.delegate_stateid))
        }
        OpenClaim4::ClaimDelegCurFh(stateid) => (by_fh(c, share)?, OpenClaim::DelegateCur(*stateid)),
        OpenClaim4::ClaimDelegatePrev(_) | OpenClaim4::ClaimDelegPrevFh => return Err(Nfsstat4::Notsupp),
    };
    let owner = args.owner.owner.as_bytes().to_vec();
    let Opened { file: mut fh, cinfo, attrset } = opened;
    let file = fh.handle().clone();
    let ok = c.program.with_state(|s| s.open(client, &owner, &file, share, claim, now))?;
    c.stateid.set(ok.stateid);
    // The file becomes the current filehandle after the delegation is
    // decided: until then `fh` holds the compound's only reference to its
    // object (the current filehandle, CLAIM_FH's file, lets go of its own),
    // which the store may replace to have the lease (`on_open`).
    c.current = None;
    let none = no_delegation(share.want);
    let delegation = crate::deleg::on_open(c, client, &file, &mut fh.object, share, &args.claim, none);
    c.current = Some(Filehandle::Export(fh));
    Ok(Open4ResOk { stateid: ok.stateid, cinfo, rflags: OPEN4_RESULT_LOCKTYPE_POSIX, attrset, delegation })
}

/// "No delegation", and why when the client wished for one (RFC 8881
/// section 18.16.3).
fn no_delegation(want: u32) -> OpenDelegation4 {
    match want & OPEN4_SHARE_ACCESS_WANT_DELEG_MASK {
        OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE => OpenDelegation4::OpenDelegateNone,
        OPEN4_SHARE_ACCESS_WANT_NO_DELEG => OpenDelegation4::OpenDelegateNoneExt(OpenNoneDelegation4::Wnd4NotWanted),
        OPEN4_SHARE_ACCESS_WANT_CANCEL => OpenDelegation4::OpenDelegateNoneExt(OpenNoneDelegation4::Wnd4Cancelled),
        _ => OpenDelegation4::OpenDelegateNoneExt(OpenNoneDelegation4::Wnd4Resource(false)),
    }
}

/// The caller's permission for the access it opens with (the owner may
/// always, as for NFSv3's READ and WRITE), on an export that allows it.
fn check_access<S: Store>(
    c: &mut Compound<'_, S>,
    fh: &ExportFh<S::Object>,
    share: ShareAccess,
) -> Result<(), Nfsstat4> {
    if share.access & OPEN4_SHARE_ACCESS_WRITE != 0 {
        fh.writable()?;
    }
    let store = c.store();
    let who = c.act(fh)?;
    for (bit, write) in [(OPEN4_SHARE_ACCESS_READ, false), (OPEN4_SHARE_ACCESS_WRITE, true)] {
        if share.access & bit != 0 {
            store.check_io(who, &fh.object, write).map_err(|e| status(&e))?;
        }
    }
    Ok(())
}

/// CLAIM_FH and the claims on the current filehandle.
fn by_fh<S: Store>(c: &mut Compound<'_, S>, share: ShareAccess) -> Result<Opened<S::Object>, Nfsstat4> {
    let fh = c.current_export(Nfsstat4::Isdir)?;
    regular(fh.object.file_type())?;
    check_access(c, &fh, share)?;
    Ok(Opened { file: fh, cinfo: ChangeInfo4::default(), attrset: Bitmap4::new() })
}

/// CLAIM_NULL: `name` in the current directory, made if `how` says so.
fn by_name<S: Store>(
    c: &mut Compound<'_, S>,
    name: &Component4,
    how: &Openflag4,
    share: ShareAccess,
) -> Result<Opened<S::Object>, Nfsstat4> {
    let dir = match c.current()? {
        // Everything in the pseudo file system is a directory.
        Filehandle::Pseudo(_) if matches!(how, Openflag4::Open4Nocreate) => {
            return Err(super::dir::lookup_name(c, name).map_or_else(|e| e, |_| Nfsstat4::Isdir));
        }
        Filehandle::Pseudo(_) => return Err(Nfsstat4::Rofs),
        Filehandle::Export(dir) => dir.clone(),
    };
    if dir.object.file_type() != FileType::Directory {
        return Err(Nfsstat4::Notdir);
    }
    let n = super::dir::name(name)?.to_vec();
    let store = c.store();
    let (mode, set, bits) = match how {
        Openflag4::Open4Nocreate => {
            let who = c.act(&dir)?;
            let (object, _) = store.lookup(who, &dir.object, &n).map_err(|e| status(&e))?;
            let fh = ExportFh { object, options: dir.options, cred: dir.cred };
            regular(fh.object.file_type())?;
            check_access(c, &fh, share)?;
            // Nothing changed: one read is both.
            let now = store.getattr(&dir.object).map_or(0, |a| change(&a));
            let cinfo = ChangeInfo4 { atomic: true, before: now, after: now };
            return Ok(Opened { file: fh, cinfo, attrset: Bitmap4::new() });
        }
        Openflag4::Open4Create(Createhow4::Unchecked4(attrs)) => {
            let (set, bits) = set_attrs(attrs, c.program.owner_names.as_ref())?;
            (CreateMode::Unchecked, set, bits)
        }
        Openflag4::Open4Create(Createhow4::Guarded4(attrs)) => {
            let (set, bits) = set_attrs(attrs, c.program.owner_names.as_ref())?;
            (CreateMode::Guarded, set, bits)
        }
        Openflag4::Open4Create(Createhow4::Exclusive4(verf)) => {
            (CreateMode::Exclusive(*verf), SetAttrs::default(), Bitmap4::new())
        }
        Openflag4::Open4Create(Createhow4::Exclusive4_1(cva)) => {
            let (set, bits) = set_attrs(&cva.cva_attrs, c.program.owner_names.as_ref())?;
            // Only what suppattr_exclcreat lists (RFC 8881 section
            // 18.16.3): the verifier lives in the times.
            let allowed = Bitmap4::from_bits(super::attr::EXCLCREAT.iter().copied());
            if !bits.difference(&allowed).is_empty() {
                return Err(Nfsstat4::Inval);
            }
            (CreateMode::Exclusive(cva.cva_verf), set, bits)
        }
    };
    dir.writable()?;
    let before = super::dir::dir_before(c, &dir.object);
    let who = c.act(&dir)?;
    let existed = store.lookup(who, &dir.object, &n).is_ok();
    let _holder = if existed && mode == CreateMode::Unchecked && set.size.is_some() {
        // It truncates the file: a delegation on it is recalled first (the
        // store writes a write-delegated file unseen by its lease).
        Some(crate::deleg::before_change_of_name(c, &dir, &n)?)
    } else {
        None
    };
    let store = c.store();
    let who = c.act(&dir)?;
    let created = store.create(who, &dir.object, &n, mode, &set, dir.options.sync).map_err(|e| status(&e))?;
    let fh = ExportFh { object: created.object, options: dir.options, cred: dir.cred };
    regular(fh.object.file_type())?;
    let attrset = if !existed {
        bits
    } else if set.size.is_some() && mode == CreateMode::Unchecked {
        Bitmap4::from_bits([FATTR4_SIZE])
    } else {
        Bitmap4::new()
    };
    if existed {
        // An existing file is opened with the caller's rights; a file the
        // caller just made may be opened whatever mode it was made with.
        check_access(c, &fh, share)?;
    }
    let cinfo = super::dir::cinfo(c, before, &dir.object);
    Ok(Opened { file: fh, cinfo, attrset })
}

/// The current filehandle's handle, the file an open state is on.
fn current_file<S: Store>(c: &Compound<'_, S>) -> Result<bytes::Bytes, Nfsstat4> {
    match c.current()? {
        Filehandle::Export(fh) => Ok(fh.handle().clone()),
        Filehandle::Pseudo(_) => Err(Nfsstat4::Isdir),
    }
}

pub(super) fn close<S: Store>(c: &mut Compound<'_, S>, args: Close4Args) -> Result<Stateid4, Nfsstat4> {
    let client = session_client(c)?;
    let file = current_file(c)?;
    let stateid = c.stateid.resolve(&args.open_stateid)?;
    c.program.with_state(|s| s.close(client, &stateid, &file))
}

pub(super) fn open_downgrade<S: Store>(
    c: &mut Compound<'_, S>,
    args: OpenDowngrade4Args,
) -> Result<OpenDowngrade4ResOk, Nfsstat4> {
    let client = session_client(c)?;
    let file = current_file(c)?;
    let stateid = c.stateid.resolve(&args.open_stateid)?;
    let open_stateid =
        c.program.with_state(|s| s.open_downgrade(client, &stateid, &file, args.share_access, args.share_deny))?;
    c.stateid.set(open_stateid);
    Ok(OpenDowngrade4ResOk { open_stateid })
}

/// The delegation ends (a revoked one answers NFS4ERR_DELEG_REVOKED;
/// the client frees it with FREE_STATEID).
pub(super) fn delegreturn<S: Store>(c: &mut Compound<'_, S>, args: Delegreturn4Args) -> Result<(), Nfsstat4> {
    let client = session_client(c)?;
    let file = current_file(c)?;
    let stateid = c.stateid.resolve(&args.deleg_stateid)?;
    c.program.with_state(|s| s.delegreturn(client, &stateid, &file))
}

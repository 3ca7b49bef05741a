//! CREATE, MKDIR, SYMLINK, MKNOD, LINK.

use keel_exports::delegations::GateAccess;
use keel_nfs3_proto::nfs3::*;
use keel_store::{CreateMode, Created, NodeKind, Store};

use super::{Caller, Request, fh};
use crate::convert::{fattr, set_attrs};
use crate::errno::status;

/// The common shape of a creating procedure: authorize the directory, check
/// the export is writable, create; the directory's wcc data either way.
fn make<S: Store>(
    r: &Request<S>,
    dir: &NfsFh3,
    f: impl FnOnce(&Caller<S::Caller>, &S::Object) -> Result<Created<S::Object>, Nfsstat3>,
) -> (Result<(PostOpFh3, PostOpAttr), Nfsstat3>, WccData) {
    let (dir, caller) = match r.authorize(dir) {
        Ok(x) => x,
        Err(s) => return (Err(s), WccData::default()),
    };
    let before = r.pre(&dir);
    let made = caller.writable().and_then(|()| f(&caller, &dir));
    let dir_wcc = r.wcc(before, &dir);
    (made.map(|c| (Some(fh(&c.object)), Some(fattr(&c.attrs)))), dir_wcc)
}

pub(super) fn create<S: Store>(r: &Request<S>, a: Create3Args) -> Create3Res {
    let (mode, attrs) = match a.how {
        Createhow3::Unchecked(s) => (CreateMode::Unchecked, set_attrs(&s)),
        Createhow3::Guarded(s) => (CreateMode::Guarded, set_attrs(&s)),
        Createhow3::Exclusive(v) => (CreateMode::Exclusive(v), Default::default()),
    };
    let name = a.where_.name.as_bytes();
    let (made, dir_wcc) = make(r, &a.where_.dir, |c, dir| {
        // UNCHECKED over an existing file may truncate it.
        if mode == CreateMode::Unchecked && attrs.size.is_some() {
            r.delegations_of_name(c.who, dir, name)?;
        }
        r.store().create(c.who, dir, name, mode, &attrs, c.opts.sync).map_err(|e| status(&e))
    });
    match made {
        Ok((obj, obj_attributes)) => NfsResult::Ok(Create3ResOk { obj, obj_attributes, dir_wcc }),
        Err(s) => NfsResult::Fail(s, Create3ResFail { dir_wcc }),
    }
}

pub(super) fn mkdir<S: Store>(r: &Request<S>, a: Mkdir3Args) -> Mkdir3Res {
    let attrs = set_attrs(&a.attributes);
    let name = a.where_.name.as_bytes();
    let (made, dir_wcc) =
        make(r, &a.where_.dir, |c, dir| r.store().mkdir(c.who, dir, name, &attrs, c.opts.sync).map_err(|e| status(&e)));
    match made {
        Ok((obj, obj_attributes)) => NfsResult::Ok(Mkdir3ResOk { obj, obj_attributes, dir_wcc }),
        Err(s) => NfsResult::Fail(s, Mkdir3ResFail { dir_wcc }),
    }
}

pub(super) fn symlink<S: Store>(r: &Request<S>, a: Symlink3Args) -> Symlink3Res {
    let attrs = set_attrs(&a.symlink.symlink_attributes);
    let (name, target) = (a.where_.name.as_bytes(), a.symlink.symlink_data.as_bytes());
    let (made, dir_wcc) = make(r, &a.where_.dir, |c, dir| {
        r.store().symlink(c.who, dir, name, target, &attrs, c.opts.sync).map_err(|e| status(&e))
    });
    match made {
        Ok((obj, obj_attributes)) => NfsResult::Ok(Symlink3ResOk { obj, obj_attributes, dir_wcc }),
        Err(s) => NfsResult::Fail(s, Symlink3ResFail { dir_wcc }),
    }
}

pub(super) fn mknod<S: Store>(r: &Request<S>, a: Mknod3Args) -> Mknod3Res {
    let device = |d: Devicedata3| (d.spec.specdata1, d.spec.specdata2, set_attrs(&d.dev_attributes));
    let node = match a.what {
        Mknoddata3::Chr(d) => {
            let (major, minor, attrs) = device(d);
            Some((NodeKind::Char { major, minor }, attrs))
        }
        Mknoddata3::Blk(d) => {
            let (major, minor, attrs) = device(d);
            Some((NodeKind::Block { major, minor }, attrs))
        }
        Mknoddata3::Sock(s) => Some((NodeKind::Socket, set_attrs(&s))),
        Mknoddata3::Fifo(s) => Some((NodeKind::Fifo, set_attrs(&s))),
        Mknoddata3::Reg | Mknoddata3::Dir | Mknoddata3::Lnk => None,
    };
    let name = a.where_.name.as_bytes();
    let (made, dir_wcc) = make(r, &a.where_.dir, |c, dir| {
        let (kind, attrs) = node.ok_or(Nfsstat3::Badtype)?;
        r.store().mknod(c.who, dir, name, kind, &attrs, c.opts.sync).map_err(|e| status(&e))
    });
    match made {
        Ok((obj, obj_attributes)) => NfsResult::Ok(Mknod3ResOk { obj, obj_attributes, dir_wcc }),
        Err(s) => NfsResult::Fail(s, Mknod3ResFail { dir_wcc }),
    }
}

pub(super) fn link<S: Store>(r: &Request<S>, a: Link3Args) -> Link3Res {
    let (file, _) = match r.authorize(&a.file) {
        Ok(x) => x,
        Err(s) => return NfsResult::Fail(s, Default::default()),
    };
    let (dir, caller) = match r.authorize(&a.link.dir) {
        Ok(x) => x,
        Err(s) => return NfsResult::Fail(s, Link3ResFail { file_attributes: r.post(&file), ..Default::default() }),
    };
    let before = r.pre(&dir);
    let done = caller.writable().and_then(|()| r.delegations(&file, GateAccess::Write)).and_then(|()| {
        r.store().link(caller.who, &file, &dir, a.link.name.as_bytes(), caller.opts.sync).map_err(|e| status(&e))
    });
    let (file_attributes, linkdir_wcc) = (r.post(&file), r.wcc(before, &dir));
    match done {
        Ok(_) => NfsResult::Ok(Link3ResOk { file_attributes, linkdir_wcc }),
        Err(s) => NfsResult::Fail(s, Link3ResFail { file_attributes, linkdir_wcc }),
    }
}

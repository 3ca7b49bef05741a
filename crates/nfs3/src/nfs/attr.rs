//! GETATTR, SETATTR, ACCESS, READLINK, FSSTAT, FSINFO, PATHCONF.

use keel_exports::delegations::GateAccess;
use keel_nfs3_proto::nfs3::*;
use keel_store::Store;

use super::Request;
use crate::convert::{fattr, set_attrs, time};
use crate::errno::status;
use crate::{DIR_REPLY_BYTES_MAX, IO_BYTES_MAX};

pub(super) fn getattr<S: Store>(r: &Request<S>, a: Getattr3Args) -> Getattr3Res {
    let attrs = r.resolve(&a.object).and_then(|inode| r.store().getattr(&inode).map_err(|e| status(&e)));
    match attrs {
        Ok(attrs) => NfsResult::Ok(Getattr3ResOk { obj_attributes: fattr(&attrs) }),
        Err(s) => NfsResult::Fail(s, ()),
    }
}

pub(super) fn setattr<S: Store>(r: &Request<S>, a: Setattr3Args) -> Setattr3Res {
    let (inode, caller) = match r.authorize(&a.object) {
        Ok(x) => x,
        Err(s) => return NfsResult::Fail(s, Default::default()),
    };
    let before = r.pre(&inode);
    let done = caller.writable().and_then(|()| r.delegations(&inode, GateAccess::Write)).and_then(|()| {
        let guard = a.guard.map(time);
        r.store()
            .setattr(caller.who, &inode, &set_attrs(&a.new_attributes), guard, caller.opts.sync)
            .map_err(|e| status(&e))
    });
    let obj_wcc = r.wcc(before, &inode);
    match done {
        Ok(()) => NfsResult::Ok(Setattr3ResOk { obj_wcc }),
        Err(s) => NfsResult::Fail(s, Setattr3ResFail { obj_wcc }),
    }
}

pub(super) fn access<S: Store>(r: &Request<S>, a: Access3Args) -> Access3Res {
    let (inode, caller) = match r.authorize(&a.object) {
        Ok(x) => x,
        Err(s) => return NfsResult::Fail(s, Default::default()),
    };
    let granted = r.store().access(caller.who, &inode, a.access).map(|mut granted| {
        if caller.writable().is_err() {
            granted &= !(ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE);
        }
        granted
    });
    let obj_attributes = r.post(&inode);
    match granted {
        Ok(access) => NfsResult::Ok(Access3ResOk { obj_attributes, access }),
        Err(e) => NfsResult::Fail(status(&e), Access3ResFail { obj_attributes }),
    }
}

pub(super) fn readlink<S: Store>(r: &Request<S>, a: Readlink3Args) -> Readlink3Res {
    let (inode, caller) = match r.authorize(&a.symlink) {
        Ok(x) => x,
        Err(s) => return NfsResult::Fail(s, Default::default()),
    };
    let target = r.store().readlink(caller.who, &inode);
    let symlink_attributes = r.post(&inode);
    match target {
        Ok(t) => NfsResult::Ok(Readlink3ResOk { symlink_attributes, data: Nfspath3(t.into()) }),
        Err(e) => NfsResult::Fail(status(&e), Readlink3ResFail { symlink_attributes }),
    }
}

pub(super) fn fsstat<S: Store>(r: &Request<S>, a: Fsstat3Args) -> Fsstat3Res {
    let inode = match r.resolve(&a.fsroot) {
        Ok(inode) => inode,
        Err(s) => return NfsResult::Fail(s, Default::default()),
    };
    let obj_attributes = r.post(&inode);
    match r.store().fsstat(&inode) {
        Ok(st) => NfsResult::Ok(Fsstat3ResOk {
            obj_attributes,
            tbytes: st.total_bytes,
            fbytes: st.free_bytes,
            abytes: st.avail_bytes,
            tfiles: st.total_files,
            ffiles: st.free_files,
            afiles: st.avail_files,
            invarsec: 0,
        }),
        Err(e) => NfsResult::Fail(status(&e), Fsstat3ResFail { obj_attributes }),
    }
}

pub(super) fn fsinfo<S: Store>(r: &Request<S>, a: Fsinfo3Args) -> Fsinfo3Res {
    let inode = match r.resolve(&a.fsroot) {
        Ok(inode) => inode,
        Err(s) => return NfsResult::Fail(s, Default::default()),
    };
    let limits = r.store().limits(&inode);
    NfsResult::Ok(Fsinfo3ResOk {
        obj_attributes: r.post(&inode),
        rtmax: IO_BYTES_MAX,
        rtpref: IO_BYTES_MAX,
        rtmult: 4096,
        wtmax: IO_BYTES_MAX,
        wtpref: IO_BYTES_MAX,
        wtmult: 4096,
        dtpref: DIR_REPLY_BYTES_MAX,
        maxfilesize: limits.file_size_max,
        time_delta: Nfstime3 { seconds: 0, nseconds: 1 },
        properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
    })
}

pub(super) fn pathconf<S: Store>(r: &Request<S>, a: Pathconf3Args) -> Pathconf3Res {
    let inode = match r.resolve(&a.object) {
        Ok(inode) => inode,
        Err(s) => return NfsResult::Fail(s, Default::default()),
    };
    let limits = r.store().limits(&inode);
    NfsResult::Ok(Pathconf3ResOk {
        obj_attributes: r.post(&inode),
        linkmax: limits.link_max,
        name_max: limits.name_max,
        no_trunc: true,
        chown_restricted: true,
        case_insensitive: false,
        case_preserving: true,
    })
}

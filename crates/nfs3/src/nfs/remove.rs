//! REMOVE, RMDIR, RENAME.

use keel_nfs3_proto::nfs3::*;
use keel_store::Store;

use super::Request;
use crate::errno::status;

fn unlink<S: Store>(r: &Request<S>, what: &Diropargs3, dir_too: bool) -> (Result<(), Nfsstat3>, WccData) {
    let (dir, caller) = match r.authorize(&what.dir) {
        Ok(x) => x,
        Err(s) => return (Err(s), WccData::default()),
    };
    let before = r.pre(&dir);
    let done = caller.writable().and_then(|()| {
        let (who, name, sync) = (caller.who, what.name.as_bytes(), caller.opts.sync);
        r.delegations_of_name(who, &dir, name)?;
        let store = r.store();
        if dir_too { store.rmdir(who, &dir, name, sync) } else { store.remove(who, &dir, name, sync) }
            .map_err(|e| status(&e))
    });
    (done, r.wcc(before, &dir))
}

pub(super) fn remove<S: Store>(r: &Request<S>, a: Remove3Args) -> Remove3Res {
    match unlink(r, &a.object, false) {
        (Ok(()), dir_wcc) => NfsResult::Ok(Remove3ResOk { dir_wcc }),
        (Err(s), dir_wcc) => NfsResult::Fail(s, Remove3ResFail { dir_wcc }),
    }
}

pub(super) fn rmdir<S: Store>(r: &Request<S>, a: Rmdir3Args) -> Rmdir3Res {
    match unlink(r, &a.object, true) {
        (Ok(()), dir_wcc) => NfsResult::Ok(Rmdir3ResOk { dir_wcc }),
        (Err(s), dir_wcc) => NfsResult::Fail(s, Rmdir3ResFail { dir_wcc }),
    }
}

pub(super) fn rename<S: Store>(r: &Request<S>, a: Rename3Args) -> Rename3Res {
    let (from, caller) = match r.authorize(&a.from.dir) {
        Ok(x) => x,
        Err(s) => return NfsResult::Fail(s, Default::default()),
    };
    let (to, _) = match r.authorize(&a.to.dir) {
        Ok(x) => x,
        Err(s) => {
            return NfsResult::Fail(s, Rename3ResFail { fromdir_wcc: r.wcc_unchanged(&from), ..Default::default() });
        }
    };
    // One directory: one change of it, not two overlapping ones.
    let one_dir = keel_store::Object::file_key(&from) == keel_store::Object::file_key(&to);
    let (from_before, to_before) = (r.pre(&from), (!one_dir).then(|| r.pre(&to)));
    let done = caller.writable().and_then(|()| {
        r.delegations_of_name(caller.who, &from, a.from.name.as_bytes())?;
        r.delegations_of_name(caller.who, &to, a.to.name.as_bytes())?;
        r.store()
            .rename(caller.who, &from, a.from.name.as_bytes(), &to, a.to.name.as_bytes(), caller.opts.sync)
            .map_err(|e| status(&e))
    });
    let (fromdir_wcc, todir_wcc) = match to_before {
        Some(to_before) => (r.wcc(from_before, &from), r.wcc(to_before, &to)),
        None => {
            let wcc = r.wcc(from_before, &from);
            (wcc, wcc)
        }
    };
    match done {
        Ok(()) => NfsResult::Ok(Rename3ResOk { fromdir_wcc, todir_wcc }),
        Err(s) => NfsResult::Fail(s, Rename3ResFail { fromdir_wcc, todir_wcc }),
    }
}

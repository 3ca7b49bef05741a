//! LOOKUP, READDIR, READDIRPLUS.

use bytes::Bytes;
use keel_nfs3_proto::nfs3::*;
use keel_store::{DirEntry, Store};
use keel_xdr::Encoder;

use super::{Request, fh};
use crate::DIR_REPLY_BYTES_MAX;
use crate::convert::fattr;
use crate::errno::status;

pub(super) fn lookup<S: Store>(r: &Request<S>, a: Lookup3Args) -> Lookup3Res {
    let (dir, caller) = match r.authorize(&a.what.dir) {
        Ok(x) => x,
        Err(s) => return NfsResult::Fail(s, Default::default()),
    };
    let found = r.store().lookup(caller.who, &dir, a.what.name.as_bytes());
    let dir_attributes = r.post(&dir);
    match found {
        Ok((inode, attrs)) => {
            NfsResult::Ok(Lookup3ResOk { object: fh(&inode), obj_attributes: Some(fattr(&attrs)), dir_attributes })
        }
        Err(e) => NfsResult::Fail(status(&e), Lookup3ResFail { dir_attributes }),
    }
}

/// Status, dir attributes, verifier, the list terminator and eof: the
/// parts of a READDIR(PLUS) reply around its entries.
const DIR_REPLY_FIXED_BYTES: usize = 4 + 4 + FATTR3_XDR_LEN + 8 + DIRLIST_END_XDR_LEN;

/// The largest READDIR(PLUS) reply for `count` (clamped as `list` clamps
/// it): the entries fill at most the count less the fixed part, which is
/// there even when the count is smaller than it.
pub(super) fn reply_bytes_max(count: u32) -> usize {
    count.min(DIR_REPLY_BYTES_MAX) as usize + DIR_REPLY_FIXED_BYTES
}

/// What READDIR and READDIRPLUS share: checks, the walk, the framing.
/// `entry` encodes one entry into `entries` if it fits in `budget` bytes
/// and says whether it did.
fn list<S: Store>(
    r: &Request<S>,
    dir_fh: &NfsFh3,
    cookie: u64,
    verifier: Cookieverf3,
    count: u32,
    reply: &mut Encoder,
    mut entry: impl FnMut(&S::Object, &S::Caller, DirEntry, &mut Encoder, usize) -> bool,
) -> Nfsstat3 {
    let fail = |reply: &mut Encoder, s: Nfsstat3, attrs: PostOpAttr| {
        reply.put(&Readdir3Res::Fail(s, Readdir3ResFail { dir_attributes: attrs }));
        s
    };
    let (dir, caller) = match r.authorize(dir_fh) {
        Ok(x) => x,
        Err(s) => return fail(reply, s, None),
    };
    // The store's cookies, and so their verifier, are its own business.
    let ours = r.store().cookie_verifier(&dir);
    if cookie != 0 && verifier != [0; 8] && verifier != ours {
        return fail(reply, Nfsstat3::BadCookie, r.post(&dir));
    }
    let budget = count.min(DIR_REPLY_BYTES_MAX) as usize;
    let mut entries = Encoder::with_capacity(budget.min(64 * 1024));
    let mut n = 0;
    let walked = r.store().readdir(caller.who, &dir, cookie, |e| {
        let room = budget.saturating_sub(DIR_REPLY_FIXED_BYTES + entries.len());
        let fits = entry(&dir, caller.who, e, &mut entries, room);
        n += fits as usize;
        fits
    });
    let dir_attributes = r.post(&dir);
    match walked {
        Err(e) => fail(reply, status(&e), dir_attributes),
        Ok(eof) if n == 0 && !eof => fail(reply, Nfsstat3::Toosmall, dir_attributes),
        Ok(eof) => {
            reply.put(&Nfsstat3::Ok);
            reply.put(&dir_attributes);
            reply.put(&ours);
            reply.raw_segments(entries.finish());
            encode_dirlist_end(reply, eof);
            Nfsstat3::Ok
        }
    }
}

pub(super) fn readdir<S: Store>(r: &Request<S>, a: Readdir3Args, reply: &mut Encoder) -> Nfsstat3 {
    list(r, &a.dir, a.cookie, a.cookieverf, a.count, reply, |_, _, e, out, room| {
        let entry = Entry3 { fileid: e.fileid, name: Filename3(Bytes::copy_from_slice(e.name)), cookie: e.cookie };
        if entry.xdr_len() > room {
            return false;
        }
        encode_entry3(out, &entry);
        true
    })
}

/// `dircount` is not enforced, as knfsd does not: `maxcount` bounds the reply.
pub(super) fn readdirplus<S: Store>(r: &Request<S>, a: Readdirplus3Args, reply: &mut Encoder) -> Nfsstat3 {
    let store = r.store();
    list(r, &a.dir, a.cookie, a.cookieverf, a.maxcount, reply, |dir, who, e, out, room| {
        let mut entry = Entryplus3 {
            fileid: e.fileid,
            name: Filename3(Bytes::copy_from_slice(e.name)),
            cookie: e.cookie,
            name_attributes: None,
            name_handle: None,
        };
        // Stop before the lookup if even the bare entry cannot fit.
        if entry.xdr_len() > room {
            return false;
        }
        if let Some((handle, attrs)) = store.entry_plus(who, dir, e.name) {
            entry.name_attributes = Some(fattr(&attrs));
            entry.name_handle = Some(NfsFh3 { data: handle });
        }
        if entry.xdr_len() > room {
            return false;
        }
        encode_entryplus3(out, &entry);
        true
    })
}

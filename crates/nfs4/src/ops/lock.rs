//! Byte-range locks (RFC 8881 sections 18.10 LOCK, 18.11 LOCKT, 18.12
//! LOCKU).
//!
//! One lock space: every lock owner's locks on a file are held through an
//! open file description of its own (keel-store's `LockFile`, OFD locks on
//! the local store), the same way keel-nlm holds an NLM client's and a
//! local process holds its own, so the kernel arbitrates between NFSv4.1
//! clients, NFSv3 clients and local processes. The state
//! (keel-nfs4-state) keeps the bookkeeping: lock owners and stateids, the
//! description of each lock state, a mirror of the ranges it holds (for
//! LOCKS_HELD, limits, and naming a conflicting owner). Descriptions the
//! state lets go of (FREE_STATEID, CLOSE, a client's end) are dropped by
//! `Nfs4Program::with_state`, which releases their locks.
//!
//! Blocking lock types (READW_LT, WRITEW_LT) are answered at once, as the
//! others: NFS4ERR_DENIED, and the client polls (Keel offers no
//! CB_NOTIFY_LOCK). A lock that a courtesy client's lock is in the way of
//! expires that client and is tried once more.
//!
//! Ranges are 64-bit on the wire but `off_t` in the kernel: a range that
//! starts past `off_t`'s maximum is NFS4ERR_BAD_RANGE, and one that ends
//! past it runs to the end of the file (as knfsd clamps it).

use keel_nfs4_proto::{
    Lock4Args, Lock4Denied, Lock4Res, Lock4ResOk, LockOwner4, Locker4, Lockt4Args, Lockt4Res, Locku4Args, NfsLockType4,
    Nfsstat4, Stateid4,
};
use keel_nfs4_state::{ByteRange, ClientId, LockKind, LockPlan, LockRequest, Locker};
use keel_store::lock::LOCK_OFFSET_MAX;
use keel_store::{LockConflict, LockFile, LockRange, Store, StoreError};
use keel_xdr::Opaque;

use super::OpOutcome;
use super::v42::{regular, session_client};
use crate::compound::Compound;
use crate::errno::status;
use crate::program::Nfs4Program;

/// Why a LOCK or LOCKT did not succeed.
pub(super) enum Refused {
    Status(Nfsstat4),
    Denied(Lock4Denied),
}

impl From<Nfsstat4> for Refused {
    fn from(s: Nfsstat4) -> Self {
        Refused::Status(s)
    }
}

impl OpOutcome<Lock4Res> for Result<Lock4ResOk, Refused> {
    fn into_res(self) -> Lock4Res {
        match self {
            Ok(ok) => Lock4Res::Ok(ok),
            Err(Refused::Denied(d)) => Lock4Res::Denied(d),
            Err(Refused::Status(s)) => Lock4Res::Fail(s),
        }
    }
}

impl OpOutcome<Lockt4Res> for Result<(), Refused> {
    fn into_res(self) -> Lockt4Res {
        match self {
            Ok(()) => Lockt4Res::Ok(()),
            Err(Refused::Denied(d)) => Lockt4Res::Denied(d),
            Err(Refused::Status(s)) => Lockt4Res::Fail(s),
        }
    }
}

/// LOCK's, LOCKT's or LOCKU's `offset` and `length` as a range the kernel
/// can hold: NFS4ERR_INVAL for a zero length or one past 2^64 - 1,
/// NFS4ERR_BAD_RANGE for a start past `off_t`'s maximum; an end past it
/// is the end of the file.
fn lock_range(offset: u64, length: u64) -> Result<ByteRange, Nfsstat4> {
    let range = ByteRange::from_wire(offset, length)?;
    if range.start > LOCK_OFFSET_MAX {
        return Err(Nfsstat4::BadRange);
    }
    let last = if range.last >= LOCK_OFFSET_MAX { u64::MAX } else { range.last };
    Ok(ByteRange { start: range.start, last })
}

fn store_range(r: ByteRange) -> LockRange {
    LockRange::from_ends(r.start, r.last)
}

fn store_kind(k: LockKind) -> keel_store::LockKind {
    match k {
        LockKind::Read => keel_store::LockKind::Shared,
        LockKind::Write => keel_store::LockKind::Exclusive,
    }
}

/// A store error of a lock call: a write lock through a description that
/// could only be opened for reading is the open's mode's fault.
fn lock_status(e: &StoreError) -> Nfsstat4 {
    match e.raw_os_error() {
        Some(libc::EBADF) => Nfsstat4::Openmode,
        _ => status(e),
    }
}

/// LOCK4denied for a conflict the kernel reported on `file`: the NFSv4.1
/// lock owner holding it if it is one (other than `asking`), else a
/// synthetic owner (client ID 0, an empty owner), as knfsd answers for
/// an NLM client's or a local process's lock.
fn denied<S: Store>(
    program: &Nfs4Program<S>,
    file: &bytes::Bytes,
    conflict: LockConflict,
    asking: (ClientId, &[u8]),
) -> Lock4Denied {
    let kind = match conflict.kind {
        keel_store::LockKind::Shared => LockKind::Read,
        keel_store::LockKind::Exclusive => LockKind::Write,
    };
    let end = conflict.range.end();
    let range = ByteRange { start: conflict.range.start, last: if end >= LOCK_OFFSET_MAX { u64::MAX } else { end } };
    let holder = program.with_state(|s| {
        s.lock_holder(file, kind, range, asking).map(|(client, owner, held)| (client.0, owner.to_vec(), held))
    });
    let (clientid, owner, range) = holder.unwrap_or((0, Vec::new(), range));
    Lock4Denied {
        offset: range.start,
        length: if range.last == u64::MAX { u64::MAX } else { range.last - range.start + 1 },
        locktype: match kind {
            LockKind::Read => NfsLockType4::ReadLt,
            LockKind::Write => NfsLockType4::WriteLt,
        },
        owner: LockOwner4 { clientid, owner: Opaque(owner.into()) },
    }
}

/// What one attempt at a LOCK came to.
enum Attempt {
    Granted(Stateid4),
    /// Refused by this lock, held through another description; the asking
    /// lock owner.
    Conflict(LockConflict, Box<[u8]>),
    /// No description open for writing could be had: a lease on the
    /// file (maybe the client's own delegation's) stands in the way.
    Leased,
}

/// LOCK (RFC 8881 section 18.10).
pub(super) fn lock<S: Store>(c: &mut Compound<'_, S>, args: Lock4Args) -> Result<Lock4ResOk, Refused> {
    let fh = regular(c.current.as_ref(), Nfsstat4::Nofilehandle)?;
    let client = session_client(c)?;
    let range = lock_range(args.offset, args.length)?;
    let kind = LockKind::from(args.locktype);
    let locker = match &args.locker {
        Locker4::OpenOwner(o) => {
            Locker::NewOwner { open_stateid: c.stateid.resolve(&o.open_stateid)?, owner: &o.lock_owner.owner.0[..] }
        }
        Locker4::LockOwner(e) => Locker::Existing { lock_stateid: c.stateid.resolve(&e.lock_stateid)? },
    };
    let (program, store, now) = (c.program, c.store(), c.now);
    let who = c.act(&fh)?;
    let file = fh.handle();
    let (want, at) = (store_kind(kind), store_range(range));
    // `lent`: a description to take a new owner's locks through, instead
    // of one of its own.
    let attempt = |lent: Option<S::LockFile>| {
        program.with_state(|s| -> Result<Attempt, Nfsstat4> {
            let req = LockRequest { file, kind, range, reclaim: args.reclaim, locker };
            match s.lock(client, req, now)? {
                LockPlan::Held(plan) => match plan.holder().try_lock(want, at).map_err(|e| lock_status(&e))? {
                    None => Ok(Attempt::Granted(plan.granted())),
                    Some(conflict) => Ok(Attempt::Conflict(conflict, plan.owner().into())),
                },
                LockPlan::New(plan) => {
                    let holder = match lent.map_or_else(|| store.open_for_locks(who, &fh.object), Ok) {
                        Err(e) if crate::deleg::is_eagain(&e) => return Ok(Attempt::Leased),
                        r => r.map_err(|e| status(&e))?,
                    };
                    match holder.try_lock(want, at).map_err(|e| lock_status(&e))? {
                        None => Ok(Attempt::Granted(plan.granted(holder))),
                        // The new description goes, holding nothing.
                        Some(conflict) => Ok(Attempt::Conflict(conflict, plan.owner().into())),
                    }
                }
            }
        })
    };
    // A client that holds a delegation on the file locks through its
    // lease's own description, which the store lends to each of the
    // client's lock owners and arbitrates among them: a description of
    // their own would break the lease (any open breaks a write lease) and
    // recall the delegation, which knfsd does not do for its holder's own
    // lock either. While the client returns the delegation (sending the
    // locks its processes took under it), the lease so stays until the
    // DELEGRETURN, and a process it kept out, which now waits to open the
    // file and lock it, cannot get in between two of those LOCKs.
    let try_once =
        || match crate::deleg::lend_own_lease(program, store, client, file, &fh.object).map(|l| attempt(Some(l))) {
            Some(Ok(outcome)) => Ok(outcome),
            // None lent (no delegation of this client's on the file, a store
            // that lends none), or a write lock through a read lease's
            // description (EBADF).
            _ => attempt(None),
        };
    let mut outcome = try_once()?;
    if matches!(outcome, Attempt::Leased) && crate::deleg::release_own_lease(program, client, file, now) {
        // The client's own lease stood in the way of a description of the
        // lock's own: gone now, and the delegation recalled.
        outcome = attempt(None)?;
    }
    if let Attempt::Conflict(..) = outcome
        && program.with_state(|s| s.expire_courtesy_lock_conflicts(file, kind, range, now)) > 0
    {
        // Their descriptions were dropped as the state was let go of.
        outcome = try_once()?;
    }
    match outcome {
        Attempt::Granted(stateid) => {
            c.stateid.set(stateid);
            Ok(Lock4ResOk { lock_stateid: stateid })
        }
        Attempt::Conflict(conflict, owner) => Err(Refused::Denied(denied(program, file, conflict, (client, &owner)))),
        // Another's lease, being broken: the client tries again.
        Attempt::Leased => Err(Refused::Status(Nfsstat4::Delay)),
    }
}

/// LOCKT (RFC 8881 section 18.11): whether LOCK would be denied, through
/// the lock owner's own description if it has one on the file (its own
/// locks are no conflict), else through a new one.
pub(super) fn lockt<S: Store>(c: &mut Compound<'_, S>, args: Lockt4Args) -> Result<(), Refused> {
    let fh = regular(c.current.as_ref(), Nfsstat4::Nofilehandle)?;
    let client = session_client(c)?;
    let range = lock_range(args.offset, args.length)?;
    let kind = LockKind::from(args.locktype);
    let owner: &[u8] = &args.owner.owner.0;
    let (program, store, now) = (c.program, c.store(), c.now);
    let who = c.act(&fh)?;
    let file = fh.handle();
    let (want, at) = (store_kind(kind), store_range(range));
    let tested = program.with_state(|s| -> Result<_, Nfsstat4> {
        Ok(s.lockt(client, owner, file, now)?.map(|holder| holder.test(want, at)))
    })?;
    let found = match tested {
        Some(found) => found,
        None => {
            // Through the client's own delegation's lease's description,
            // as LOCK: a description of its own would break the lease.
            let open = || store.open_for_locks(who, &fh.object);
            let holder = match crate::deleg::lend_own_lease(program, store, client, file, &fh.object) {
                Some(lent) => Ok(lent),
                None => match open() {
                    Err(e)
                        if crate::deleg::is_eagain(&e)
                            && crate::deleg::release_own_lease(program, client, file, now) =>
                    {
                        open()
                    }
                    r => r,
                },
            };
            holder.and_then(|holder| holder.test(want, at))
        }
    };
    match found.map_err(|e| lock_status(&e))? {
        None => Ok(()),
        Some(conflict) => Err(Refused::Denied(denied(program, file, conflict, (client, owner)))),
    }
}

/// LOCKU (RFC 8881 section 18.12): releases the range through the lock
/// state's description (whatever the lock type says; a range not held is
/// no error, as with fcntl). Returns the lock stateid, its seqid moved on.
pub(super) fn locku<S: Store>(c: &mut Compound<'_, S>, args: Locku4Args) -> Result<Stateid4, Nfsstat4> {
    let fh = regular(c.current.as_ref(), Nfsstat4::Nofilehandle)?;
    let client = session_client(c)?;
    let range = lock_range(args.offset, args.length)?;
    let lock_stateid = c.stateid.resolve(&args.lock_stateid)?;
    let file = fh.handle();
    let stateid = c.program.with_state(|s| {
        let plan = s.locku(client, &lock_stateid, file, range)?;
        plan.holder().unlock(store_range(range)).map_err(|e| lock_status(&e))?;
        Ok::<_, Nfsstat4>(plan.done())
    })?;
    c.stateid.set(stateid);
    Ok(stateid)
}

#[cfg(test)]
pub(super) mod harness;
#[cfg(test)]
mod tests;

//! Read delegations (RFC 8881 section 10.4): when OPEN offers one, and
//! the gate through which NFSv3 (and NLM) accesses recall them, and an
//! NLM lock refused by a courtesy client's lock expires that client.
//!
//! Offered only when the server is told to ([`Nfs4Program::with_read_delegations`]):
//! a local process writing a file under an export is not seen (Keel
//! takes no file leases), so a client holding a read delegation would
//! keep reading what it cached. Offered for an OPEN of CLAIM_NULL or
//! CLAIM_FH for reading only, as knfsd, when keel-nfs4-state allows
//! ([`NfsState::offer_delegation`]: the callback path is up, nobody else
//! has the file open for writing, nobody conflicted on it lately, outside
//! the grace period). Write delegations are never offered: every access
//! by anyone else (a v3 GETATTR and READ too, a local process's) would
//! have to recall them first.
//!
//! [`NfsState::offer_delegation`]: keel_nfs4_state::NfsState::offer_delegation

use std::sync::{Arc, Weak};
use std::time::Instant;

use bytes::Bytes;
use keel_exports::delegations::{DelegationGate, GateAccess, Recalling};
use keel_nfs4_proto::{
    Nfsace4, OPEN4_SHARE_ACCESS_WANT_DELEG_MASK, OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE, OPEN4_SHARE_ACCESS_WRITE,
    OpenClaim4, OpenDelegation4, OpenReadDelegation4, OpenWriteDelegation4,
};
use keel_nfs4_state::{
    Accessor, ByteRange, ClientId, ConflictAccess, DelegationKind, DelegationOffer, LockKind, ShareAccess,
};
use keel_store::lock::LOCK_OFFSET_MAX;
use keel_store::{LockRange, Store};

use crate::compound::Compound;
use crate::program::Nfs4Program;

/// What OPEN answers about a delegation: one if it may be offered,
/// `none` (the reply without one) otherwise.
pub(crate) fn on_open<S: Store>(
    c: &Compound<'_, S>,
    client: ClientId,
    file: &Bytes,
    share: ShareAccess,
    claim: &OpenClaim4,
    none: OpenDelegation4,
) -> OpenDelegation4 {
    let callbacks = &c.program.callbacks;
    if !callbacks.read_delegations() || share.access & OPEN4_SHARE_ACCESS_WRITE != 0 {
        return none;
    }
    if !matches!(claim, OpenClaim4::ClaimNull(_) | OpenClaim4::ClaimFh) {
        return none;
    }
    let now = c.now;
    match c.program.with_state(|s| s.offer_delegation(client, file, &share, now)) {
        DelegationOffer::Granted { stateid, kind: DelegationKind::Read } => {
            callbacks.delegation_granted();
            OpenDelegation4::OpenDelegateRead(OpenReadDelegation4 {
                stateid,
                recall: false,
                // An empty ACE: the client asks the server (ACCESS) before
                // it lets a user read, as knfsd's.
                permissions: Nfsace4::default(),
            })
        }
        DelegationOffer::Granted { stateid, kind: DelegationKind::Write } => {
            // Not reached: the state grants write delegations only when
            // configured to, which this program never does.
            callbacks.delegation_granted();
            OpenDelegation4::OpenDelegateWrite(OpenWriteDelegation4 {
                stateid,
                recall: false,
                // The client flushes before the file grows past nothing:
                // it writes through, as without a delegation.
                space_limit: keel_nfs4_proto::NfsSpaceLimit4::NfsLimitSize(0),
                permissions: Nfsace4::default(),
            })
        }
        DelegationOffer::Declined(why) => {
            if share.want & OPEN4_SHARE_ACCESS_WANT_DELEG_MASK == OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE {
                none
            } else {
                OpenDelegation4::OpenDelegateNoneExt(why)
            }
        }
    }
}

/// Before a COMPOUND changes `file` otherwise than by WRITE (whose
/// stateid check does this): SETATTR, REMOVE, RENAME, LINK. A delegation
/// of another client on it is recalled, and the operation gets
/// NFS4ERR_DELAY until it is returned (RFC 8881 section 10.4.4).
pub(crate) fn before_change<S: Store>(c: &Compound<'_, S>, file: &Bytes) -> Result<(), keel_nfs4_proto::Nfsstat4> {
    if !c.program.callbacks.any_granted() {
        return Ok(());
    }
    let who = c.slot.as_ref().map_or(Accessor::Other, |g| Accessor::Client(g.clientid));
    let now = c.now;
    c.program.with_state(|s| s.delegation_conflict(who, file, ConflictAccess::Write, now))
}

/// [`before_change`] for the object `name` names in `dir`, if any.
pub(crate) fn before_change_of_name<S: Store>(
    c: &mut Compound<'_, S>,
    dir: &crate::ExportFh<S::Object>,
    name: &[u8],
) -> Result<(), keel_nfs4_proto::Nfsstat4> {
    if !c.program.callbacks.any_granted() {
        return Ok(());
    }
    let store = c.store();
    let who = c.act(dir)?;
    match store.lookup(who, &dir.object, name) {
        Ok((object, _)) => before_change(c, keel_store::Object::handle(&object)),
        Err(_) => Ok(()),
    }
}

/// The gate the export table asks for NFSv3's and NLM's accesses.
struct Gate<S: Store>(Weak<Nfs4Program<S>>);

impl<S: Store> DelegationGate for Gate<S> {
    fn before_access(&self, handle: &[u8], access: GateAccess) -> Result<(), Recalling> {
        let Some(p) = self.0.upgrade() else { return Ok(()) };
        // No delegation was ever granted: nothing to look up (a v3 WRITE
        // does not take the state's lock).
        if !p.callbacks.any_granted() {
            return Ok(());
        }
        let access = match access {
            GateAccess::Read => ConflictAccess::Read,
            GateAccess::Write => ConflictAccess::Write,
        };
        let now = Instant::now();
        let file = Bytes::copy_from_slice(handle);
        let verdict = p.with_state(|s| s.delegation_conflict(Accessor::Other, &file, access, now));
        // The recall goes out now, not at the next COMPOUND.
        p.callbacks.pump(&p, now);
        verdict.map_err(|_| Recalling)
    }

    fn lock_refused(&self, handle: &[u8], exclusive: bool, range: LockRange) -> bool {
        let Some(p) = self.0.upgrade() else { return false };
        expire_courtesy_lockers(&p, handle, exclusive, range, Instant::now())
    }
}

/// Another protocol's lock (`exclusive` or shared, over `range`) on the
/// file with store handle `handle` was refused: expires the courtesy
/// clients holding a lock that conflicts (their descriptions close as the
/// state lets go of them, releasing their locks). Whether any was.
pub(crate) fn expire_courtesy_lockers<S: Store>(
    p: &Nfs4Program<S>,
    handle: &[u8],
    exclusive: bool,
    range: LockRange,
    now: Instant,
) -> bool {
    let kind = if exclusive { LockKind::Write } else { LockKind::Read };
    let end = range.end();
    let range = ByteRange { start: range.start, last: if end >= LOCK_OFFSET_MAX { u64::MAX } else { end } };
    let file = Bytes::copy_from_slice(handle);
    p.with_state(|s| s.expire_courtesy_lock_conflicts(&file, kind, range, now)) > 0
}

/// Installs the gate on the export table the program serves.
pub(crate) fn install_gate<S: Store>(program: &Arc<Nfs4Program<S>>) {
    program.exports.set_delegation_gate(Arc::new(Gate(Arc::downgrade(program))));
}

//! Read and write delegations (RFC 8881 section 10.4): when OPEN offers
//! one, and the gate through which NFSv3 (and NLM) accesses recall them,
//! and an NLM lock refused by a courtesy client's lock expires that client.
//!
//! Read delegations are offered when the server is told to
//! ([`Nfs4Program::with_read_delegations`]), each backed by a read lease
//! the store takes on the file ([`Store::read_lease`], a Linux file lease,
//! as knfsd's): none if the lease cannot be had (the file is open for
//! writing somewhere). A local process (or another file server) that opens
//! the file for writing breaks the lease and waits (one that changes the
//! file's attributes or names counts as breaking it, and does not wait:
//! the store watches the file too; the holder's own SETATTR, RENAME, LINK
//! or REMOVE does not: [`before_change`]); the callback thread finds the broken
//! leases ([`DelegationLeases::take_broken`], every [`CALLBACK_TICK`]) and
//! the delegation is recalled, and revoked unless returned before the
//! breaker would stop waiting; its lease is dropped when it ends, which
//! lets the breaker go on. Offered for an OPEN of CLAIM_NULL or CLAIM_FH
//! for reading only, as knfsd, when keel-nfs4-state allows
//! ([`NfsState::offer_delegation`]: the client wants one, the callback
//! path is up, nobody else has the file open for writing, nobody
//! conflicted on it lately, outside the grace period), which is asked
//! before the lease is taken. A file the store created or wrote, whose
//! own writable description stands in the way of the lease, gets one at
//! the first such OPEN all the same: the store lets go of that description
//! and leases the file on a fresh object in its place
//! (`Store::read_lease_replacing`), unless another call in flight still
//! holds the old one (then the next OPEN gets one).
//!
//! Write delegations are offered when the state is configured for them
//! (`StateConfig::write_delegations`, the server's `nfs4_write_delegations`),
//! for an OPEN with write access (WRITE alone too, as knfsd since "NFSD:
//! Offer write delegation for OPEN with OPEN4_SHARE_ACCESS_WRITE"; before
//! it, knfsd offered them for BOTH only, since a client READs what it
//! caches with the delegation's stateid and knfsd's file of a WRITE-only
//! open could not serve that; Keel reads through its own description and
//! checks every READ against the caller's permission) when nobody else has
//! the file open: no other
//! client (the state), no local process and no other description of the
//! store's own (the write lease, [`Store::write_lease`], which only the
//! store's one description of a file it created can have, and which any
//! other open breaks, for reading too). The store goes on reading and
//! writing the file through that description for everyone, unseen by the
//! lease, so every access by anyone else recalls first and waits
//! (NFS4ERR_DELAY, NFS3ERR_JUKEBOX): another client's OPEN (any, and one
//! that truncates before it truncates), READ, WRITE and SETATTR (special
//! stateids too), LOCK (it needs an OPEN) and LOCKT (its lock description
//! breaks the lease); an NFSv3 READ, WRITE, SETATTR, truncating CREATE,
//! REMOVE, RENAME and LINK, and NLM's LOCK and TEST (the gate, a read
//! conflicting with write delegations only). The holder, which takes
//! byte-range locks locally, sends them before it returns the delegation,
//! so that a conflicting lock is never granted meanwhile. The space limit
//! offered is none: the client writes back at every close, so an NFSv3
//! client's or a local process's GETATTR (which recalls nothing, as with
//! knfsd) keeps close-to-open consistency with the holder.
//!
//! Another client's GETATTR of the size or change ([`before_size_read`],
//! RFC 8881 section 10.4.3), and its VERIFY, NVERIFY and READDIR entry
//! attributes of them (knfsd encodes all of these as GETATTR's), asks
//! the holder with CB_GETATTR instead, as
//! knfsd does since Linux 6.9, when its callback path is up and the
//! delegation is not being recalled: the worker waits [`CB_GETATTR_WAIT`]
//! at most for the answer, with nothing locked (another worker reads the
//! reply, the callback thread answers it: `callback.rs`), and the GETATTR
//! answers with the holder's size. The holder changed the file if the
//! change attribute it reports is not the one the server accounted for
//! (the file's when the delegation was granted, then the holder's last
//! answer), or the size it reports is neither the file's nor its last
//! answer's; then the file's modification time moves to now
//! ([`Store::touch_leased`], not a break of the lease), as knfsd's
//! `notify_change` does, so the GETATTR's change attribute and times are
//! new. An answer that reports nothing new touches nothing (pynfs
//! DELEG27: a holder whose writes reached the server reports the change
//! it was granted with and the server's size). knfsd marks the file
//! changed for good once it was and moves its times at every later
//! CB_GETATTR; Keel moves them only when the answer is new. A GETATTR
//! that finds a CB_GETATTR of the same file in flight to the holder sends
//! none and waits for that one's answer, [`CB_GETATTR_WAIT`] at most, as
//! knfsd keeps one per delegation in flight. No answer in time, a
//! refusal, a busy backchannel slot (a recall, or a CB_GETATTR of another
//! file, in flight) or a path that is down: the delegation is recalled
//! and the GETATTR gets NFS4ERR_DELAY, as before (a READDIR entry gets it
//! as its `rdattr_error`, or the whole READDIR if that is not asked for,
//! as with knfsd: the Linux client asks for it, lists the name and
//! GETATTRs the file later). The holder's own GETATTR asks nothing.
//!
//! Reclaimed after a restart: an OPEN with CLAIM_PREVIOUS that claims a
//! read or write delegation gets one of that kind (RFC 8881 section
//! 18.16.3: "delegation will always be granted, although the server may
//! specify an immediate recall"), backed by the store's lease as a new
//! one ([`on_reclaim`]). It comes pre-recalled (`recall` set: the client
//! returns it at once, after writing back what it caches; section 10.2.1)
//! when the callback path is not known up yet, the server does not offer
//! that kind, or another client's reclaimed state conflicts with it; the
//! state revokes such a one a lease later if it is not returned. Where no
//! lease can be had there is none, as with knfsd: a delegation no lease
//! backs would not hold local processes off, and its holder would keep
//! its locks local meanwhile. (A write lease, only ever on the store's own
//! description of the file open for writing, is had after a restart by
//! reopening the file: `Store::write_lease_replacing`.)
//!
//! [`NfsState::offer_delegation`]: keel_nfs4_state::NfsState::offer_delegation
//! [`CALLBACK_TICK`]: crate::callback::CALLBACK_TICK

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_exports::delegations::{DelegationGate, GateAccess, Recalling};
use keel_nfs4_proto::{
    Nfsace4, OPEN4_SHARE_ACCESS_WANT_DELEG_MASK, OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE, OPEN4_SHARE_ACCESS_WRITE,
    OpenClaim4, OpenDelegation4, OpenDelegationType4, OpenNoneDelegation4, OpenReadDelegation4, OpenWriteDelegation4,
    Stateid4,
};
use keel_nfs4_state::{
    Accessor, ByteRange, CallbackState, ClientId, ConflictAccess, DelegationKind, DelegationOffer, LockKind,
    ShareAccess,
};
use keel_store::lock::LOCK_OFFSET_MAX;
use keel_store::{LockRange, ReadLease, Store};

use crate::callback::HolderAttrs;
use crate::compound::{Compound, ExportFh};
use crate::program::Nfs4Program;

/// What OPEN answers about a delegation: one if it may be offered,
/// `none` (the reply without one) otherwise.
pub(crate) fn on_open<S: Store>(
    c: &Compound<'_, S>,
    client: ClientId,
    file: &Bytes,
    object: &mut S::Object,
    share: ShareAccess,
    claim: &OpenClaim4,
    none: OpenDelegation4,
) -> OpenDelegation4 {
    let callbacks = &c.program.callbacks;
    let writing = share.access & OPEN4_SHARE_ACCESS_WRITE != 0;
    if let OpenClaim4::ClaimPrevious(claimed) = claim {
        return on_reclaim(c, client, file, object, *claimed, none);
    }
    let offered = if writing { callbacks.write_delegations() } else { callbacks.read_delegations() };
    if !offered || !matches!(claim, OpenClaim4::ClaimNull(_) | OpenClaim4::ClaimFh) {
        return none;
    }
    let declined = |why| {
        if share.want & OPEN4_SHARE_ACCESS_WANT_DELEG_MASK == OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE {
            none.clone()
        } else {
            OpenDelegation4::OpenDelegateNoneExt(why)
        }
    };
    let now = c.now;
    // No lease is taken (a few system calls; for a file the store created,
    // the closing of its writable descriptions: `Store::read_lease`)
    // where the state declines anyway: a client that wants none or whose
    // callback path is not up, another client's open for writing, or a
    // delegation of this client's on the file already (the state declines
    // a second, and a new description of the file, a read lease's, would
    // break the write lease of the first).
    let (callback, held, offerable) = c.program.with_state(|s| {
        (s.callback_state(client), s.delegation_held(client, file), s.delegation_offerable(client, file, &share, now))
    });
    if let Err(why @ (OpenNoneDelegation4::Wnd4NotWanted | OpenNoneDelegation4::Wnd4Cancelled)) = offerable {
        return declined(why);
    }
    if callback != Some(CallbackState::Up) {
        return declined(OpenNoneDelegation4::Wnd4Resource(false));
    }
    if let Some(kind) = held {
        let why = match (kind, writing) {
            (DelegationKind::Read, true) => OpenNoneDelegation4::Wnd4NotSuppUpgrade,
            (DelegationKind::Write, false) => OpenNoneDelegation4::Wnd4NotSuppDowngrade,
            _ => OpenNoneDelegation4::Wnd4Contention(false),
        };
        return declined(why);
    }
    if let Err(why) = offerable {
        return declined(why);
    }
    // The lease first: a file open for writing somewhere gets none, and a
    // write delegation none while the file is open anywhere else. The
    // caller holds no other reference to `object`: a file the store
    // created or wrote is read-leased at this OPEN, on the object its
    // handle names afresh, once the store let go of its own writable one.
    let lease = if writing { c.store().write_lease(object) } else { c.store().read_lease_replacing(object) };
    let lease = match lease {
        Ok(lease) => lease,
        Err(e) => {
            tracing::debug!(error = %e, writing, "no lease: no delegation");
            // ENOSPC: the store could not watch one more file.
            let why = if e.raw_os_error() == Some(libc::ENOSPC) {
                OpenNoneDelegation4::Wnd4Resource(false)
            } else {
                OpenNoneDelegation4::Wnd4Contention(false)
            };
            return declined(why);
        }
    };
    let seen = match holder_baseline(c, object, writing) {
        Ok(seen) => seen,
        Err(e) => {
            tracing::debug!(error = %e, "no attributes: no delegation");
            return declined(OpenNoneDelegation4::Wnd4Contention(false));
        }
    };
    let leases = &c.program.leases;
    let (offer, unused) = c.program.with_state(|s| {
        let offer = s.offer_delegation(client, file, &share, now);
        if let DelegationOffer::Granted { stateid, .. } = &offer {
            // Held while the state is: its end (drained after) finds it.
            leases.hold(client, *stateid, file.clone(), lease, seen);
            (offer, None)
        } else {
            (offer, Some(lease))
        }
    });
    // Released once the state is unlocked.
    drop(unused);
    match offer {
        DelegationOffer::Granted { stateid, kind } => granted(c, stateid, kind, false),
        DelegationOffer::Declined(why) => declined(why),
    }
}

/// The delegation an OPEN with CLAIM_PREVIOUS reclaims, of the kind it
/// claims (`claimed`; none for OPEN_DELEGATE_NONE). The store's lease is
/// taken as for a new delegation, whatever the configuration offers; the
/// state grants it (or answers with the one the client holds already)
/// and decides whether it comes pre-recalled.
///
/// None where no lease can be had (as knfsd, where a failed lease gives
/// no delegation, reclaim or not), though RFC 8881 section 18.16.3 says a
/// claimed delegation "will always be granted": one the lease does not
/// back would not hold a local process off the file while its holder
/// writes back, and the Linux client does not reclaim its locks on a file
/// it holds a delegation of (it keeps them locally until it returns the
/// delegation), so a local lock could be had meanwhile. Without the
/// delegation the client reclaims its locks at once, mostly: a client
/// whose return of the delegation the restart cut short keeps them local
/// even then (`nfs4_lock_reclaim` skips a delegated open, and the old
/// delegation still counts until the reclaim is over), which is why a
/// write lease is had by reopening the file for writing
/// (`Store::write_lease_replacing`). None too where the
/// state refuses the reclaim (the grace period ended since the OPEN) or
/// the client is at its limit of delegations.
fn on_reclaim<S: Store>(
    c: &Compound<'_, S>,
    client: ClientId,
    file: &Bytes,
    object: &mut S::Object,
    claimed: OpenDelegationType4,
    none: OpenDelegation4,
) -> OpenDelegation4 {
    let kind = match claimed {
        OpenDelegationType4::OpenDelegateRead => DelegationKind::Read,
        OpenDelegationType4::OpenDelegateWrite => DelegationKind::Write,
        _ => return none,
    };
    let callbacks = &c.program.callbacks;
    let offered = match kind {
        DelegationKind::Read => callbacks.read_delegations(),
        DelegationKind::Write => callbacks.write_delegations(),
    };
    let now = c.now;
    let (callback, backchannel, held) = c.program.with_state(|s| {
        (s.callback_state(client), s.callback_channel(client).is_some(), s.delegation_held(client, file))
    });
    // A second lease for a delegation held already would be one more
    // description of the file, which breaks a write lease: the state
    // answers with the one held, which has its lease.
    let lease = match held {
        Some(_) => None,
        None => {
            let lease = match kind {
                DelegationKind::Read => c.store().read_lease(object),
                // The file was likely opened read-only since the restart.
                DelegationKind::Write => c.store().write_lease_replacing(object),
            };
            match lease.and_then(|lease| Ok((lease, holder_baseline(c, object, kind == DelegationKind::Write)?))) {
                Ok(had) => Some(had),
                Err(e) => {
                    tracing::debug!(?kind, error = %e, "no lease: delegation not reclaimed");
                    return none;
                }
            }
        }
    };
    // "The use of callbacks should not be depended upon until the client
    // has proven its ability to receive them" (RFC 8881 section 10.2.1):
    // a backchannel not probed yet gets the delegation pre-recalled, as
    // one found down. (knfsd takes a v4.1 path not known down as up.)
    let path_up = backchannel && callback == Some(CallbackState::Up);
    let recall = !offered || !path_up;
    let leases = &c.program.leases;
    let (reclaimed, unused) = c.program.with_state(|s| match s.reclaim_delegation(client, file, kind, recall, now) {
        Ok(r) => {
            if let Some((lease, seen)) = lease {
                // Held while the state is: its end (drained after) finds it.
                leases.hold(client, r.stateid, file.clone(), lease, seen);
            }
            (Ok(r), None)
        }
        Err(e) => (Err(e), lease),
    });
    // Released once the state is unlocked.
    drop(unused);
    match reclaimed {
        Ok(r) => granted(c, r.stateid, r.kind, r.recall),
        Err(e) => {
            tracing::debug!(status = ?e, "delegation not reclaimed");
            none
        }
    }
}

/// What a write delegation's holder's CB_GETATTR answers are measured
/// against: the change attribute and size its OPEN sees. A read
/// delegation's holder is never asked: no system call for it.
fn holder_baseline<S: Store>(
    c: &Compound<'_, S>,
    object: &S::Object,
    write: bool,
) -> keel_store::StoreResult<Option<HolderAttrs>> {
    if !write {
        return Ok(None);
    }
    let a = c.store().getattr(object)?;
    Ok(Some(HolderAttrs { change: crate::ops::attr::change(&a), size: a.size }))
}

/// OPEN's reply for a delegation granted (`recall`: to be returned at
/// once, a reclaim the server recalls).
fn granted<S: Store>(c: &Compound<'_, S>, stateid: Stateid4, kind: DelegationKind, recall: bool) -> OpenDelegation4 {
    let callbacks = &c.program.callbacks;
    match kind {
        DelegationKind::Read => {
            callbacks.delegation_granted(false);
            OpenDelegation4::OpenDelegateRead(OpenReadDelegation4 {
                stateid,
                recall,
                // An empty ACE: the client asks the server (ACCESS) before
                // it lets a user read, as knfsd's.
                permissions: Nfsace4::default(),
            })
        }
        DelegationKind::Write => {
            callbacks.delegation_granted(true);
            OpenDelegation4::OpenDelegateWrite(OpenWriteDelegation4 {
                stateid,
                recall,
                // No modified page may stay cached past a close: the Linux
                // client flushes on close unless fewer pages are dirty than
                // this limit allows (nfs4_delegation_flush_on_close), so
                // with none it writes back (and commits) at every close, as
                // without a delegation. NFSv3 clients and local processes,
                // which see the file without recalling it (a GETATTR), keep
                // close-to-open consistency with the holder. knfsd offers
                // an unlimited size instead.
                space_limit: keel_nfs4_proto::NfsSpaceLimit4::NfsLimitSize(0),
                // An empty ACE: the client asks the server (ACCESS) before
                // it lets a user open the file.
                permissions: Nfsace4::default(),
            })
        }
    }
}

/// Time kept between revoking a delegation whose lease is being broken
/// and the moment its breaker would stop waiting (and the system take the
/// lease away): the callback thread's tick, and some.
pub const LEASE_BREAK_MARGIN: Duration = Duration::from_secs(3);

/// The store's read leases backing the delegations granted, by stateid.
pub(crate) struct DelegationLeases<L> {
    held: Mutex<HeldLeases<L>>,
}

/// The leases by stateid, and the stateid of each holder's on a file (a
/// client holds one delegation per file): every REMOVE, RENAME, SETATTR
/// and LOCK of a holder looks its own up, which must not cost a walk of
/// every lease held.
struct HeldLeases<L> {
    by_stateid: HashMap<[u8; 12], HeldLease<L>>,
    by_holder: HashMap<(ClientId, Bytes), [u8; 12]>,
}

impl<L> HeldLeases<L> {
    fn remove(&mut self, other: &[u8; 12]) -> Option<HeldLease<L>> {
        let h = self.by_stateid.remove(other)?;
        let key = (h.client, h.file.clone());
        if self.by_holder.get(&key) == Some(other) {
            self.by_holder.remove(&key);
        }
        Some(h)
    }

    fn of(&self, client: ClientId, file: &Bytes) -> Option<&HeldLease<L>> {
        self.by_holder.get(&(client, file.clone())).and_then(|other| self.by_stateid.get(other))
    }
}

struct HeldLease<L> {
    client: ClientId,
    stateid: Stateid4,
    file: Bytes,
    /// Shared only with a change of its holder's in progress
    /// ([`HolderChange`]) or a CB_GETATTR answer being accounted for
    /// ([`DelegationLeases::account`]).
    lease: Arc<L>,
    /// Found broken (and told to the state) already.
    broken: bool,
    /// A write delegation's: the change attribute and size the server has
    /// accounted for, the file's when the delegation was granted, then
    /// the holder's last CB_GETATTR answer. None for a read delegation.
    /// Its own lock: held while an answer is accounted for, which may set
    /// the file's times, while the table's is not.
    seen: Option<Arc<Mutex<HolderAttrs>>>,
}

impl<L: ReadLease> DelegationLeases<L> {
    pub(crate) fn new() -> Self {
        DelegationLeases { held: Mutex::new(HeldLeases { by_stateid: HashMap::new(), by_holder: HashMap::new() }) }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HeldLeases<L>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn hold(&self, client: ClientId, stateid: Stateid4, file: Bytes, lease: L, seen: Option<HolderAttrs>) {
        let lease = Arc::new(lease);
        let seen = seen.map(|seen| Arc::new(Mutex::new(seen)));
        let mut held = self.held();
        held.remove(&stateid.other);
        held.by_holder.insert((client, file.clone()), stateid.other);
        held.by_stateid.insert(stateid.other, HeldLease { client, stateid, file, lease, broken: false, seen });
    }

    /// The holder of delegation `stateid` answered CB_GETATTR with
    /// `reported`; the file's size on the server is `size_here`. Whether
    /// the holder changed the file since the server last accounted for it
    /// (its change attribute moved, or it reports a size that is neither
    /// the file's nor the one it reported last), after `touch`, which is
    /// given the lease when it did; None if the delegation is gone (or
    /// is a read delegation). `reported` is accounted for once `touch`
    /// succeeds.
    ///
    /// `touch` (a system call) runs without the table's lock, which every
    /// grant, return and tick takes, and under the delegation's own: a
    /// second answer waits for the first to be accounted for and is
    /// measured against it, so the same news is not touched twice.
    pub(crate) fn account<E>(
        &self,
        stateid: &Stateid4,
        reported: HolderAttrs,
        size_here: u64,
        touch: impl FnOnce(&L) -> Result<(), E>,
    ) -> Option<Result<bool, E>> {
        let (lease, seen) = {
            let held = self.held();
            let h = held.by_stateid.get(&stateid.other)?;
            (h.lease.clone(), h.seen.clone()?)
        };
        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        let modified = reported.change != seen.change || (reported.size != size_here && reported.size != seen.size);
        if modified && let Err(e) = touch(&lease) {
            return Some(Err(e));
        }
        *seen = reported;
        Some(Ok(modified))
    }

    /// The lease of `client`'s delegation on `file`, if it holds one,
    /// taken out: its stateid and the lease.
    fn take_of(&self, client: ClientId, file: &Bytes) -> Option<(Stateid4, Arc<L>)> {
        let mut held = self.held();
        let key = held.of(client, file)?.stateid.other;
        held.remove(&key).map(|h| (h.stateid, h.lease))
    }

    /// The lease of delegation `stateid`, which ended (returned, revoked,
    /// its client gone): the caller drops it, which releases it.
    pub(crate) fn release(&self, stateid: &Stateid4) -> Option<Arc<L>> {
        self.held().remove(&stateid.other).map(|h| h.lease)
    }

    /// The delegations whose lease began to break since the last call,
    /// with how long their breaker will wait for them now.
    pub(crate) fn take_broken(&self) -> Vec<(ClientId, Stateid4, Duration)> {
        let mut held = self.held();
        let mut out = Vec::new();
        for h in held.by_stateid.values_mut() {
            if !h.broken && h.lease.is_broken() {
                h.broken = true;
                out.push((h.client, h.stateid, h.lease.break_wait().saturating_sub(LEASE_BREAK_MARGIN)));
            }
        }
        out
    }

    /// The lease of `client`'s delegation on `file`, if it holds one.
    fn of(&self, client: ClientId, file: &Bytes) -> Option<Arc<L>> {
        self.held().of(client, file).map(|h| h.lease.clone())
    }

    /// Leases held.
    pub(crate) fn len(&self) -> usize {
        self.held().by_stateid.len()
    }
}

/// A store verb of `client` on `file` answered EAGAIN: if this client's
/// own delegation's lease stood in the way (the client reclaims its locks
/// or writes back while it returns the delegation, or writes through an
/// open of its own), the lease goes, and the delegation is recalled if it
/// was not (knfsd does not break a lease for the client that holds it).
/// True if so: the verb is worth trying once more.
pub(crate) fn release_own_lease<S: Store>(p: &Nfs4Program<S>, client: ClientId, file: &Bytes, now: Instant) -> bool {
    let Some((stateid, lease)) = p.leases.take_of(client, file) else { return false };
    let within = lease.break_wait().saturating_sub(LEASE_BREAK_MARGIN);
    p.with_state(|s| s.delegation_lease_broken(client, &stateid, within, now));
    drop(lease);
    true
}

/// A lock description on the lease of `client`'s own delegation on
/// `file`, if it holds one and the store lends it
/// ([`Store::lock_file_on_lease`]).
pub(crate) fn lend_own_lease<S: Store>(
    p: &Nfs4Program<S>,
    store: &S,
    client: ClientId,
    file: &Bytes,
    object: &S::Object,
) -> Option<S::LockFile> {
    let lease = p.leases.of(client, file)?;
    store
        .lock_file_on_lease(object, &lease)
        .map_err(|e| tracing::debug!(error = %e, "no lock description lent by the lease"))
        .ok()
}

/// Whether `e` is EAGAIN: what the store answers for a write it would have
/// to wait for a lease for.
pub(crate) fn is_eagain(e: &keel_store::StoreError) -> bool {
    e.raw_os_error() == Some(libc::EAGAIN)
}

/// Recalls the delegations whose lease began to break: the callback
/// thread's, every tick (the kernel's SIGIO is ignored: see keel-store-local's
/// `lease.rs`).
pub(crate) fn recall_broken_leases<S: Store>(p: &Nfs4Program<S>, now: Instant) {
    if p.leases.len() == 0 {
        return;
    }
    let broken = p.leases.take_broken();
    if broken.is_empty() {
        return;
    }
    p.with_state(|s| {
        for (client, stateid, within) in &broken {
            tracing::debug!(client = client.0, "a delegation's lease is being broken: recalled");
            s.delegation_lease_broken(*client, stateid, *within, now);
        }
    });
}

/// Before a COMPOUND changes `file` otherwise than by WRITE (whose
/// stateid check does this): SETATTR, REMOVE, RENAME, LINK. A delegation
/// of another client on it is recalled, and the operation gets
/// NFS4ERR_DELAY until it is returned (RFC 8881 section 10.4.4). The
/// caller's own delegation is not (recall is for others' conflicting
/// accesses, and knfsd does not recall here either): the returned
/// [`HolderChange`], held while the store makes the change, tells its
/// lease that the change is its holder's, so the store's own change of
/// the file's attributes or names does not read as a break of it.
pub(crate) fn before_change<S: Store>(
    c: &Compound<'_, S>,
    file: &Bytes,
) -> Result<HolderChange<S::ReadLease>, keel_nfs4_proto::Nfsstat4> {
    if !c.program.callbacks.any_granted() {
        return Ok(HolderChange::none());
    }
    let who = c.slot.as_ref().map_or(Accessor::Other, |g| Accessor::Client(g.clientid));
    let now = c.now;
    c.program.with_state(|s| s.delegation_conflict(who, file, ConflictAccess::Write, now))?;
    let own = match who {
        Accessor::Client(client) => c.program.leases.of(client, file),
        Accessor::Other => None,
    };
    Ok(HolderChange::begin(own))
}

/// A change a delegation's holder makes to its file through the store, in
/// progress on this thread until dropped ([`ReadLease::holder_change_begins`]).
pub(crate) struct HolderChange<L: ReadLease> {
    lease: Option<Arc<L>>,
    /// Ends on the thread it began on (the store's own change is told
    /// apart there).
    _thread: std::marker::PhantomData<*const ()>,
}

impl<L: ReadLease> HolderChange<L> {
    fn none() -> Self {
        HolderChange { lease: None, _thread: std::marker::PhantomData }
    }

    fn begin(lease: Option<Arc<L>>) -> Self {
        if let Some(l) = &lease {
            l.holder_change_begins();
        }
        HolderChange { lease, _thread: std::marker::PhantomData }
    }
}

impl<L: ReadLease> Drop for HolderChange<L> {
    fn drop(&mut self) {
        if let Some(l) = &self.lease {
            l.holder_change_ends();
        }
    }
}

/// How long a GETATTR waits for the CB_GETATTR it sent to be answered
/// before it recalls instead. knfsd waits 30 ms. A client answers from
/// memory in one round trip: the whole GETATTR took 3 ms with the Linux
/// 6.1 client in the test harness's virtual machine (qemu, on the 2-core
/// build host). 100 ms leaves room for a guest or host busy with other
/// work, where 30 ms would fall back to a recall now and then, and a
/// worker waits no longer than a slow disk read would keep it; only a
/// holder that does not answer costs it.
pub const CB_GETATTR_WAIT: Duration = Duration::from_millis(100);

/// Before a COMPOUND reads the size or change attribute of `fh`'s file
/// (GETATTR, VERIFY, NVERIFY), which another client may hold a write
/// delegation on (RFC 8881 section 10.4.3: the holder may have written
/// what the server has not seen): the size to answer with, if not the
/// file's. The holder is asked with CB_GETATTR ([`ask_holder`]) when its
/// callback path is up; otherwise, or if it does not answer in time, the
/// delegation is recalled and the operation gets NFS4ERR_DELAY until it
/// is returned.
pub(crate) fn before_size_read<S: Store>(
    c: &Compound<'_, S>,
    fh: &ExportFh<S::Object>,
) -> Result<Option<u64>, keel_nfs4_proto::Nfsstat4> {
    match holder_to_ask(c, fh.handle())? {
        Some(holder) => ask_holder_or_recall(c, fh.handle(), &fh.object, holder),
        None => Ok(None),
    }
}

/// The first half of [`before_size_read`], for a caller that has the
/// file's handle and not its object yet (READDIR's entries): the holder
/// of a write delegation on `file` to ask ([`ask_holder_or_recall`]), if
/// another client holds one; NFS4ERR_DELAY if one is being recalled (or
/// its holder cannot be asked: it is recalled now). One look at the state
/// when nobody holds one.
pub(crate) fn holder_to_ask<S: Store>(
    c: &Compound<'_, S>,
    file: &Bytes,
) -> Result<Option<(ClientId, Stateid4)>, keel_nfs4_proto::Nfsstat4> {
    if !c.program.callbacks.any_write_granted() {
        return Ok(None);
    }
    let who = c.slot.as_ref().map_or(Accessor::Other, |g| Accessor::Client(g.clientid));
    // Not the COMPOUND's start: a READDIR may have waited for holders.
    let now = Instant::now();
    c.program.with_state(|s| match s.write_delegation_to_ask(who, file, now) {
        Some(holder) => Ok(Some(holder)),
        None => s.delegation_conflict(who, file, ConflictAccess::Read, now).map(|()| None),
    })
}

/// The second half of [`before_size_read`]: asks `holder` about `file`
/// (whose object is `object`); if it does not answer in time, recalls
/// its delegation: NFS4ERR_DELAY, or None if the delegation is gone
/// meanwhile (the file's size is the one to answer with).
pub(crate) fn ask_holder_or_recall<S: Store>(
    c: &Compound<'_, S>,
    file: &Bytes,
    object: &S::Object,
    (client, stateid): (ClientId, Stateid4),
) -> Result<Option<u64>, keel_nfs4_proto::Nfsstat4> {
    if let Some(size) = ask_holder(c, file, object, client, &stateid) {
        return Ok(Some(size));
    }
    let who = c.slot.as_ref().map_or(Accessor::Other, |g| Accessor::Client(g.clientid));
    let now = Instant::now();
    c.program.with_state(|s| s.delegation_conflict(who, file, ConflictAccess::Read, now)).map(|()| None)
}

/// Asks `client`, holding write delegation `stateid` on `file` (whose
/// object is `object`), for its size and change (CB_GETATTR, or the
/// answer of the one in flight), waiting [`CB_GETATTR_WAIT`] at most
/// with nothing locked: the size to answer with, or None if it did not
/// answer in time (or could not be asked). If it changed the file since
/// the server last accounted for it, the file's modification and change
/// times move to now, as knfsd's do: the change attribute the caller
/// answers with is then new, and the times move as the holder's writes
/// will move them. A holder reporting nothing new touches nothing.
fn ask_holder<S: Store>(
    c: &Compound<'_, S>,
    file: &Bytes,
    object: &S::Object,
    client: ClientId,
    stateid: &Stateid4,
) -> Option<u64> {
    let p = c.program;
    let answer = p.callbacks.send_getattr(p, client, file, c.now)?;
    // The worker waits off the CPU: its batch goes to other workers, one
    // of which reads the reply.
    keel_store::blocking::may_block();
    let reported = answer.wait(CB_GETATTR_WAIT)?;
    let store = c.store();
    let here = store.getattr(object).ok()?;
    match p.leases.account(stateid, reported, here.size, |lease| store.touch_leased(object, lease))? {
        Ok(modified) => {
            tracing::debug!(client = client.0, modified, size = reported.size, "CB_GETATTR answered");
            Some(reported.size)
        }
        Err(e) => {
            tracing::info!(error = %e, "the times of a file its write delegation's holder changed could not be set");
            None
        }
    }
}

/// [`before_change`] for the object `name` names in `dir`, if any.
pub(crate) fn before_change_of_name<S: Store>(
    c: &mut Compound<'_, S>,
    dir: &crate::ExportFh<S::Object>,
    name: &[u8],
) -> Result<HolderChange<S::ReadLease>, keel_nfs4_proto::Nfsstat4> {
    if !c.program.callbacks.any_granted() {
        return Ok(HolderChange::none());
    }
    let store = c.store();
    let who = c.act(dir)?;
    match store.lookup(who, &dir.object, name) {
        Ok((object, _)) => before_change(c, keel_store::Object::handle(&object)),
        Err(_) => Ok(HolderChange::none()),
    }
}

/// The gate the export table asks for NFSv3's and NLM's accesses.
struct Gate<S: Store>(Weak<Nfs4Program<S>>);

impl<S: Store> DelegationGate for Gate<S> {
    fn before_access(&self, handle: &[u8], access: GateAccess) -> Result<(), Recalling> {
        let Some(p) = self.0.upgrade() else { return Ok(()) };
        // No delegation was ever granted: nothing to look up (a v3 WRITE
        // does not take the state's lock); a read conflicts with write
        // delegations only.
        let granted = match access {
            GateAccess::Read => p.callbacks.any_write_granted(),
            GateAccess::Write => p.callbacks.any_granted(),
        };
        if !granted {
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Lease;

    impl ReadLease for Lease {
        fn is_broken(&self) -> bool {
            false
        }

        fn break_wait(&self) -> Duration {
            Duration::ZERO
        }
    }

    fn stateid(n: u8) -> Stateid4 {
        Stateid4 { seqid: 1, other: [n; 12] }
    }

    /// A holder's lease on a file is found through the index, which follows
    /// every grant, return and take.
    #[test]
    fn a_holder_s_lease_is_found_by_client_and_file_and_leaves_with_it() {
        let leases = DelegationLeases::<Lease>::new();
        let (a, b) = (Bytes::from_static(b"a"), Bytes::from_static(b"b"));
        leases.hold(ClientId(1), stateid(1), a.clone(), Lease, None);
        leases.hold(ClientId(2), stateid(2), a.clone(), Lease, None);
        leases.hold(ClientId(1), stateid(3), b.clone(), Lease, None);
        assert!(leases.of(ClientId(1), &a).is_some() && leases.of(ClientId(2), &a).is_some());
        assert!(leases.of(ClientId(2), &b).is_none());
        let (taken, _) = leases.take_of(ClientId(1), &a).unwrap();
        assert_eq!(taken, stateid(1));
        assert!(leases.of(ClientId(1), &a).is_none() && leases.take_of(ClientId(1), &a).is_none());
        assert!(leases.release(&stateid(2)).is_some());
        assert!(leases.of(ClientId(2), &a).is_none());
        assert_eq!(leases.len(), 1);
        assert!(leases.of(ClientId(1), &b).is_some());
        let held = leases.held();
        assert_eq!((held.by_stateid.len(), held.by_holder.len()), (1, 1), "nothing left behind in the index");
    }
}

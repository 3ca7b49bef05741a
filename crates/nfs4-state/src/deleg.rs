//! Delegations (RFC 8881 sections 10.2, 10.4): who holds which, the rule
//! of when an access by someone else must recall them, recall deadlines
//! and revocation, DELEGRETURN. CB_RECALL itself is sent by the handler
//! ([`NfsState::take_recalls`]).

use std::hash::Hash;
use std::time::{Duration, Instant};

use keel_nfs4_proto::{
    Nfsstat4, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WANT_CANCEL, OPEN4_SHARE_ACCESS_WANT_DELEG_MASK,
    OPEN4_SHARE_ACCESS_WANT_NO_DELEG, OPEN4_SHARE_ACCESS_WANT_READ_DELEG, OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG,
    OPEN4_SHARE_ACCESS_WRITE, OpenNoneDelegation4, Stateid4,
};

use crate::grace::GraceRefusal;
use crate::session::CallbackState;
use crate::stateid::{StateKind, StateType};
use crate::{ClientId, ExpiryReason, NfsState, RECENT_CONFLICTS_MAX, Reclaimer, Released, Resource, ShareAccess};

/// A read or a write delegation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DelegationKind {
    Read,
    Write,
}

impl DelegationKind {
    /// The I/O its stateid allows.
    pub(crate) fn access(self) -> u32 {
        match self {
            DelegationKind::Read => OPEN4_SHARE_ACCESS_READ,
            DelegationKind::Write => OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WRITE,
        }
    }
}

/// Who accesses a file, for [`NfsState::delegation_conflict`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accessor {
    /// An NFSv4.1 client: its own delegations never conflict with it.
    Client(ClientId),
    /// Anyone else: an NFSv3 client, an NLM client, a local process.
    Other,
}

/// What an access does, as delegations see it (RFC 8881 section 10.4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictAccess {
    /// Reads the file or its attributes, opens it for reading, or locks a
    /// range of it (NFSv4.1, NLM or a local process): conflicts with write
    /// delegations only (the holder of a write delegation may lock
    /// locally; the holder of a read delegation locks through the server).
    Read,
    /// Writes, truncates, changes attributes, removes, renames or links
    /// the file, or opens it for writing: conflicts with every delegation.
    Write,
}

/// A delegation to recall: the handler sends CB_RECALL to its client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recall<F> {
    pub clientid: ClientId,
    pub stateid: Stateid4,
    pub file: F,
}

/// Whether OPEN comes with a delegation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelegationOffer {
    Granted {
        stateid: Stateid4,
        kind: DelegationKind,
    },
    /// None, and why (for `OPEN_DELEGATE_NONE_EXT` when the client
    /// expressed a wish).
    Declined(OpenNoneDelegation4),
}

/// The delegation an OPEN with CLAIM_PREVIOUS got back
/// ([`NfsState::reclaim_delegation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReclaimedDelegation {
    pub stateid: Stateid4,
    pub kind: DelegationKind,
    /// To be returned at once (OPEN's `recall`): the server recalls it.
    pub recall: bool,
}

#[derive(Debug)]
pub(crate) struct Delegation {
    pub(crate) kind: DelegationKind,
    pub(crate) recalled_at: Option<Instant>,
    /// Revoked at this time if not returned, when sooner than a lease
    /// after the recall: the store's lease backing it is being broken, and
    /// its breaker waits only so long ([`NfsState::delegation_lease_broken`]).
    pub(crate) revoke_by: Option<Instant>,
    /// Revoked (not returned in time): the stateid stays, answering
    /// NFS4ERR_DELEG_REVOKED, until the client frees it.
    pub(crate) revoked: bool,
}

impl<F: Clone + Eq + Hash, L> NfsState<F, L> {
    /// Whether `client`, which just opened `file` with `share`, gets a
    /// delegation (RFC 8881 section 10.4): only outside the grace period,
    /// with a backchannel the handler found working ([`CallbackState::Up`]:
    /// as knfsd, since a delegation that cannot be recalled would stall
    /// other clients for a lease), on a file nobody conflicted on lately,
    /// and when no other client's open or delegation conflicts with it. A
    /// write delegation only if the configuration allows them, for an
    /// open with write access (WRITE alone too, as knfsd since "NFSD: Offer
    /// write delegation for OPEN with OPEN4_SHARE_ACCESS_WRITE": the client
    /// may read what it writes through its cache, and every READ is checked
    /// against the caller's permission anyway); a read
    /// delegation only for an open without (its own writes would change
    /// the file the delegation vouches for). The kind is the one the
    /// client wants, if it says (RFC 8881 section 18.16.3); one it holds
    /// already is neither upgraded nor downgraded.
    pub fn offer_delegation(
        &mut self,
        client: ClientId,
        file: &F,
        share: &ShareAccess,
        now: Instant,
    ) -> DelegationOffer {
        let kind = match self.delegation_offerable(client, file, share, now) {
            Ok(kind) => kind,
            Err(why) => return DelegationOffer::Declined(why),
        };
        match self.grant_delegation(client, file, kind, None, now) {
            Ok(stateid) => DelegationOffer::Granted { stateid, kind },
            Err(_) => DelegationOffer::Declined(OpenNoneDelegation4::Wnd4Resource(false)),
        }
    }

    /// The kind of delegation [`NfsState::offer_delegation`] would grant
    /// `client` on `file` now, or why none, granting nothing: what the
    /// handler asks before it takes the store's lease (a few system calls,
    /// and for a file the store created, the closing of its own writable
    /// descriptions), so that a client that wants none (RFC 8881 section
    /// 18.16.3: WND4_NOT_WANTED, WND4_CANCELLED) or another client's open
    /// for writing never costs one.
    pub fn delegation_offerable(
        &mut self,
        client: ClientId,
        file: &F,
        share: &ShareAccess,
        now: Instant,
    ) -> Result<DelegationKind, OpenNoneDelegation4> {
        use OpenNoneDelegation4 as Why;
        let writing = share.access & OPEN4_SHARE_ACCESS_WRITE != 0;
        let write_ok = self.config.write_delegations && writing;
        let kind = match share.want & OPEN4_SHARE_ACCESS_WANT_DELEG_MASK {
            OPEN4_SHARE_ACCESS_WANT_NO_DELEG => return Err(Why::Wnd4NotWanted),
            OPEN4_SHARE_ACCESS_WANT_CANCEL => return Err(Why::Wnd4Cancelled),
            OPEN4_SHARE_ACCESS_WANT_READ_DELEG if writing => {
                return Err(Why::Wnd4Contention(false));
            }
            OPEN4_SHARE_ACCESS_WANT_READ_DELEG => DelegationKind::Read,
            OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG if write_ok => DelegationKind::Write,
            OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG => return Err(Why::Wnd4WriteDelegNotSuppFtype),
            _ if write_ok => DelegationKind::Write,
            // As knfsd: a writer without write delegations gets none.
            _ if writing => return Err(Why::Wnd4WriteDelegNotSuppFtype),
            _ => DelegationKind::Read,
        };
        if self.poll_grace(now) || self.recent_conflicts.contains_key(file) {
            return Err(Why::Wnd4Contention(false));
        }
        let Some(c) = self.clients.get(&client) else { return Err(Why::Wnd4Resource(false)) };
        if c.callback != CallbackState::Up || self.callback_channel(client).is_none() {
            return Err(Why::Wnd4Resource(false));
        }
        if let Some(fs) = self.files.get(file) {
            let mut why = None;
            for k in fs.opens.iter().chain(&fs.delegations) {
                let s = &self.states[k];
                let conflict = match &s.kind {
                    StateKind::Delegation(d) if d.revoked => None,
                    // One delegation per client and file (RFC 8881 section
                    // 18.16.3: no atomic upgrade or downgrade).
                    StateKind::Delegation(d) if s.client == client => Some(match (d.kind, kind) {
                        (DelegationKind::Read, DelegationKind::Write) => Why::Wnd4NotSuppUpgrade,
                        (DelegationKind::Write, DelegationKind::Read) => Why::Wnd4NotSuppDowngrade,
                        _ => Why::Wnd4Contention(false),
                    }),
                    _ if s.client == client => None,
                    StateKind::Delegation(d) => (kind == DelegationKind::Write || d.kind == DelegationKind::Write)
                        .then_some(Why::Wnd4Contention(false)),
                    StateKind::Open(o) => (kind == DelegationKind::Write || o.access & OPEN4_SHARE_ACCESS_WRITE != 0)
                        .then_some(Why::Wnd4Contention(false)),
                    StateKind::Lock(_) => None,
                };
                if conflict.is_some() {
                    why = conflict;
                    break;
                }
            }
            if let Some(why) = why {
                return Err(why);
            }
        }
        Ok(kind)
    }

    /// The kind of `client`'s delegation on `file` that is not revoked,
    /// if it holds one (looked up through the file's own states).
    pub fn delegation_held(&self, client: ClientId, file: &F) -> Option<DelegationKind> {
        self.files.get(file)?.delegations.iter().find_map(|k| {
            let s = &self.states[k];
            match &s.kind {
                StateKind::Delegation(d) if s.client == client && !d.revoked => Some(d.kind),
                _ => None,
            }
        })
    }

    /// The delegation an OPEN with CLAIM_PREVIOUS reclaims (RFC 8881
    /// section 18.16.3: "delegation will always be granted, although the
    /// server may specify an immediate recall"; section 10.2.1): granted
    /// during the grace period to a previous client of the kind it claims,
    /// whatever its backchannel's state. Pre-recalled (`recall` in OPEN's
    /// reply) when the handler says so (`recall`: no store lease backs it,
    /// the callback path is down, the kind is not offered) or another
    /// client's open or delegation conflicts with it (reclaimed before it);
    /// a pre-recalled delegation is revoked a lease later if not returned,
    /// as one recalled with CB_RECALL. A client reclaiming a second
    /// delegation on the file gets the one it holds. NFS4ERR_NO_GRACE /
    /// NFS4ERR_RECLAIM_BAD as for any reclaim; NFS4ERR_RESOURCE at the
    /// client's limit of delegations.
    pub fn reclaim_delegation(
        &mut self,
        client: ClientId,
        file: &F,
        kind: DelegationKind,
        recall: bool,
        now: Instant,
    ) -> Result<ReclaimedDelegation, Nfsstat4> {
        let c = self.client(client)?;
        let (who, principal) = (Reclaimer::Nfs4(c.owner.clone()), c.principal.clone());
        self.poll_grace(now);
        self.grace.lock().check_reclaim(&who, Some(&principal), now).map_err(GraceRefusal::nfs4_status)?;
        let mut conflict = false;
        if let Some(fs) = self.files.get(file) {
            for k in fs.opens.iter().chain(&fs.delegations) {
                let s = &self.states[k];
                match &s.kind {
                    StateKind::Delegation(d) if d.revoked => {}
                    StateKind::Delegation(d) if s.client == client => {
                        let recall = d.recalled_at.is_some();
                        return Ok(ReclaimedDelegation { stateid: self.stateid(*k), kind: d.kind, recall });
                    }
                    _ if s.client == client => {}
                    StateKind::Delegation(d) => {
                        conflict |= kind == DelegationKind::Write || d.kind == DelegationKind::Write;
                    }
                    StateKind::Open(o) => {
                        conflict |= kind == DelegationKind::Write || o.access & OPEN4_SHARE_ACCESS_WRITE != 0;
                    }
                    StateKind::Lock(_) => {}
                }
            }
        }
        let recall = recall || conflict;
        let stateid = self.grant_delegation(client, file, kind, recall.then_some(now), now)?;
        Ok(ReclaimedDelegation { stateid, kind, recall })
    }

    /// A new delegation of `client` on `file`, recalled at `recalled_at`
    /// if given (a pre-recalled reclaim); NFS4ERR_RESOURCE at the client's
    /// limit of delegations.
    fn grant_delegation(
        &mut self,
        client: ClientId,
        file: &F,
        kind: DelegationKind,
        recalled_at: Option<Instant>,
        now: Instant,
    ) -> Result<Stateid4, Nfsstat4> {
        self.claim(client, Resource::Delegations, 1, now).map_err(|l| l.status())?;
        let d = Delegation { kind, recalled_at, revoke_by: None, revoked: false };
        let key = self.insert_state(client, file.clone(), StateKind::Delegation(d));
        self.files.entry(file.clone()).or_default().delegations.insert(key);
        Ok(self.stateid(key))
    }

    /// Whether an access by `who` to `file` may go on now (RFC 8881
    /// section 10.4.4): a delegation of another client it conflicts with
    /// is recalled (its CB_RECALL comes out of
    /// [`take_recalls`](NfsState::take_recalls)) and the access gets
    /// NFS4ERR_DELAY until it is returned, or revoked a lease after the
    /// recall. A courtesy client's delegation is not waited for: its
    /// client is expired.
    pub fn delegation_conflict(
        &mut self,
        who: Accessor,
        file: &F,
        access: ConflictAccess,
        now: Instant,
    ) -> Result<(), Nfsstat4> {
        let Some(fs) = self.files.get(file) else { return Ok(()) };
        let lease = self.config.lease;
        let (mut recall, mut revoke, mut courtesy) = (Vec::new(), Vec::new(), Vec::new());
        let mut wait = false;
        for &k in &fs.delegations {
            let s = &self.states[&k];
            let StateKind::Delegation(d) = &s.kind else { continue };
            if d.revoked || who == Accessor::Client(s.client) {
                continue;
            }
            if d.kind == DelegationKind::Read && access == ConflictAccess::Read {
                continue;
            }
            if self.is_courtesy(s.client, now) {
                courtesy.push(s.client);
                continue;
            }
            match s.recall_deadline(lease) {
                Some(at) if now >= at => revoke.push(k),
                Some(_) => wait = true,
                None => {
                    recall.push(k);
                    wait = true;
                }
            }
        }
        let conflicted = wait || !revoke.is_empty() || !courtesy.is_empty();
        for c in courtesy {
            self.expire_client(c, ExpiryReason::Conflict, now);
        }
        for k in revoke {
            self.revoke_delegation(k);
        }
        for k in recall {
            let s = self.states.get_mut(&k).expect("listed above");
            if let StateKind::Delegation(d) = &mut s.kind {
                d.recalled_at = Some(now);
            }
            let r = Recall { clientid: s.client, stateid: self.stateid(k), file: file.clone() };
            self.recalls.push(r);
            self.counters.recalls += 1;
        }
        if conflicted {
            self.note_conflict(file, now);
        }
        if wait { Err(Nfsstat4::Delay) } else { Ok(()) }
    }

    /// The write delegation on `file` that an access by `who` reading its
    /// size or change attribute may ask its holder about with CB_GETATTR
    /// (RFC 8881 section 10.4.3) rather than recall: another client's,
    /// not recalled, not revoked, its client neither a courtesy client nor
    /// one whose callback path is not up. None otherwise (then
    /// [`delegation_conflict`](NfsState::delegation_conflict) decides).
    pub fn write_delegation_to_ask(&self, who: Accessor, file: &F, now: Instant) -> Option<(ClientId, Stateid4)> {
        let fs = self.files.get(file)?;
        fs.delegations.iter().find_map(|k| {
            let s = &self.states[k];
            let StateKind::Delegation(d) = &s.kind else { return None };
            let askable = d.kind == DelegationKind::Write
                && !d.revoked
                && d.recalled_at.is_none()
                && d.revoke_by.is_none()
                && who != Accessor::Client(s.client)
                && !self.is_courtesy(s.client, now)
                && self.callback_state(s.client) == Some(CallbackState::Up);
            askable.then(|| (s.client, self.stateid(*k)))
        })
    }

    /// The lease on the file that backs `client`'s delegation `stateid`
    /// is being broken (a local process, another file server or the store
    /// itself opens the file for writing or truncates it): the delegation
    /// is recalled if it was not, and revoked unless returned by `now +
    /// within` (its breaker waits that long at most), or a lease after the
    /// recall if that comes first. A courtesy client's is not waited for:
    /// the client is expired. Nothing for a delegation that is gone or
    /// revoked already.
    pub fn delegation_lease_broken(&mut self, client: ClientId, stateid: &Stateid4, within: Duration, now: Instant) {
        let Ok(key) = self.find_state(client, stateid, StateType::Delegation, None) else { return };
        if self.is_courtesy(client, now) {
            let file = self.states.get(&key).map(|s| s.file.clone());
            self.expire_client(client, ExpiryReason::Conflict, now);
            if let Some(file) = file {
                self.note_conflict(&file, now);
            }
            return;
        }
        let Some(s) = self.states.get_mut(&key) else { return };
        let StateKind::Delegation(d) = &mut s.kind else { return };
        if d.revoked {
            return;
        }
        let by = now + within;
        d.revoke_by = Some(d.revoke_by.map_or(by, |r| r.min(by)));
        let file = s.file.clone();
        if d.recalled_at.is_none() {
            d.recalled_at = Some(now);
            let r = Recall { clientid: s.client, stateid: self.stateid(key), file: file.clone() };
            self.recalls.push(r);
            self.counters.recalls += 1;
        }
        self.note_conflict(&file, now);
    }

    /// No delegation is offered on `file` for a lease.
    fn note_conflict(&mut self, file: &F, now: Instant) {
        if self.recent_conflicts.len() >= RECENT_CONFLICTS_MAX
            && !self.recent_conflicts.contains_key(file)
            && let Some(oldest) = self.recent_conflicts.iter().min_by_key(|(_, at)| **at).map(|(f, _)| f.clone())
        {
            self.recent_conflicts.remove(&oldest);
        }
        self.recent_conflicts.insert(file.clone(), now);
    }

    /// Revokes delegation `key`: it no longer counts on its file, and its
    /// client sees SEQ4_STATUS_RECALLABLE_STATE_REVOKED until it frees it.
    fn revoke_delegation(&mut self, key: u64) {
        let Some(s) = self.states.get_mut(&key) else { return };
        let StateKind::Delegation(d) = &mut s.kind else { return };
        if d.revoked {
            return;
        }
        d.revoked = true;
        let (client, file, kind) = (s.client, s.file.clone(), d.kind);
        let stateid = self.stateid(key);
        if let Some(fs) = self.files.get_mut(&file) {
            fs.delegations.remove(&key);
            if fs.is_empty() {
                self.files.remove(&file);
            }
        }
        if let Some(c) = self.clients.get_mut(&client) {
            c.revoked += 1;
        }
        self.counters.revoked += 1;
        self.released.push(Released::Delegation { clientid: client, stateid, file, kind });
    }

    /// Revokes every delegation recalled more than a lease ago.
    pub(crate) fn revoke_overdue_delegations(&mut self, now: Instant) {
        let lease = self.config.lease;
        let overdue: Vec<u64> = self
            .states
            .iter()
            .filter(|(_, s)| s.recall_deadline(lease).is_some_and(|at| now >= at))
            .map(|(k, _)| *k)
            .collect();
        for k in overdue {
            self.revoke_delegation(k);
        }
    }

    /// DELEGRETURN (RFC 8881 section 18.6): the delegation ends; a revoked
    /// one is NFS4ERR_DELEG_REVOKED (the client frees it with
    /// FREE_STATEID).
    pub fn delegreturn(&mut self, client: ClientId, stateid: &Stateid4, file: &F) -> Result<(), Nfsstat4> {
        let key = self.find_state(client, stateid, StateType::Delegation, Some(file))?;
        self.drop_state(key);
        Ok(())
    }

    /// The handler could not deliver a CB_RECALL: the recall stands, and
    /// its deadline too (the delegation is revoked a lease after the
    /// recall unless returned); the backchannel is taken as down.
    pub fn recall_failed(&mut self, clientid: ClientId) {
        self.set_callback_state(clientid, CallbackState::Down);
    }
}

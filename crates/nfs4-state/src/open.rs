//! Opens and share reservations (RFC 8881 sections 9.7, 18.16 OPEN, 18.2
//! CLOSE, 18.18 OPEN_DOWNGRADE): one open state per open owner and file,
//! holding the union of the access and deny bits of its OPENs; different
//! open owners' reservations never conflict.

use std::hash::Hash;
use std::time::Instant;

use keel_nfs4_proto::{
    Nfsstat4, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_WANT_CANCEL, OPEN4_SHARE_ACCESS_WANT_DELEG_MASK,
    OPEN4_SHARE_ACCESS_WANT_PUSH_DELEG_WHEN_UNCONTENDED, OPEN4_SHARE_ACCESS_WANT_SIGNAL_DELEG_WHEN_RESRC_AVAIL,
    OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_BOTH, Stateid4,
};

use crate::grace::GraceRefusal;
use crate::stateid::{StateKind, StateType};
use crate::{Accessor, ClientId, ConflictAccess, ExpiryReason, FileState, NfsState, Reclaimer, Resource};

/// The share access and deny of an OPEN or OPEN_DOWNGRADE, checked, and
/// the delegation wishes that came with the access (new in 4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareAccess {
    /// `OPEN4_SHARE_ACCESS_READ`, `_WRITE` or `_BOTH`.
    pub access: u32,
    /// `OPEN4_SHARE_DENY_NONE` to `_BOTH`.
    pub deny: u32,
    /// The `OPEN4_SHARE_ACCESS_WANT_*` bits.
    pub want: u32,
}

impl ShareAccess {
    /// From `share_access` and `share_deny` as they came: an access of
    /// none, an unknown bit or an unknown delegation wish is NFS4ERR_INVAL
    /// (RFC 8881 section 18.16.3).
    pub fn from_wire(share_access: u32, share_deny: u32) -> Result<Self, Nfsstat4> {
        let want_bits = OPEN4_SHARE_ACCESS_WANT_DELEG_MASK
            | OPEN4_SHARE_ACCESS_WANT_SIGNAL_DELEG_WHEN_RESRC_AVAIL
            | OPEN4_SHARE_ACCESS_WANT_PUSH_DELEG_WHEN_UNCONTENDED;
        let access = share_access & OPEN4_SHARE_ACCESS_BOTH;
        let unknown_bits = share_access & !(OPEN4_SHARE_ACCESS_BOTH | want_bits) != 0;
        let unknown_want = share_access & OPEN4_SHARE_ACCESS_WANT_DELEG_MASK > OPEN4_SHARE_ACCESS_WANT_CANCEL;
        if access == 0 || unknown_bits || unknown_want || share_deny & !OPEN4_SHARE_DENY_BOTH != 0 {
            return Err(Nfsstat4::Inval);
        }
        Ok(ShareAccess { access, deny: share_deny, want: share_access & want_bits })
    }
}

/// What OPEN opens by (RFC 8881 section 18.16.3's claim types, reduced to
/// what matters to the state: the handler resolves names and handles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenClaim {
    /// CLAIM_NULL or CLAIM_FH: a new open, not during grace.
    Null,
    /// CLAIM_PREVIOUS: a reclaim after a restart, only during grace.
    Previous,
    /// CLAIM_DELEGATE_CUR or CLAIM_DELEG_CUR_FH: an open under a
    /// delegation the client holds.
    DelegateCur(Stateid4),
    /// CLAIM_DELEGATE_PREV or CLAIM_DELEG_PREV_FH: reclaiming a delegation
    /// across a client restart, which Keel does not support (knfsd does
    /// not either): NFS4ERR_NOTSUPP.
    DelegatePrev,
}

/// OPEN's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOk {
    pub stateid: Stateid4,
    /// Whether this created the open state (else it upgraded one).
    pub created: bool,
}

/// One open owner's open of one file.
#[derive(Debug)]
pub(crate) struct OpenState {
    pub(crate) owner: Box<[u8]>,
    pub(crate) access: u32,
    pub(crate) deny: u32,
    /// The (access, deny) pairs of the OPENs in effect, one bit each
    /// (`access * 4 + deny`): what OPEN_DOWNGRADE may go back to.
    pub(crate) pairs: u16,
    /// Lock states opened from this one.
    pub(crate) locks: Vec<u64>,
}

fn pair_bit(access: u32, deny: u32) -> u16 {
    1 << (access * 4 + deny)
}

/// The union of the pairs in `pairs` that are within (`access`, `deny`).
fn union_within(pairs: u16, access: u32, deny: u32) -> (u32, u32) {
    let mut union = (0, 0);
    for a in 1..=3u32 {
        for d in 0..=3u32 {
            if pairs & pair_bit(a, d) != 0 && a & !access == 0 && d & !deny == 0 {
                union = (union.0 | a, union.1 | d);
            }
        }
    }
    union
}

impl<F: Clone + Eq + Hash, L> NfsState<F, L> {
    /// OPEN (RFC 8881 section 18.16) of `file` by `owner` of `client`,
    /// after the handler found or created the file. Checks the grace
    /// rules (a client that has not sent RECLAIM_COMPLETE may only
    /// reclaim: [`check_new_state_for`](NfsState::check_new_state_for)),
    /// recalls conflicting delegations of other clients
    /// (NFS4ERR_DELAY meanwhile), checks share reservations against other
    /// open owners (NFS4ERR_SHARE_DENIED; a courtesy client in the way is
    /// expired), then creates the open state or adds the new bits to it.
    pub fn open(
        &mut self,
        client: ClientId,
        owner: &[u8],
        file: &F,
        share: ShareAccess,
        claim: OpenClaim,
        now: Instant,
    ) -> Result<OpenOk, Nfsstat4> {
        let c = self.client(client)?;
        let (who, principal) = (Reclaimer::Nfs4(c.owner.clone()), c.principal.clone());
        let reclaim = match claim {
            OpenClaim::Previous => {
                self.poll_grace(now);
                self.grace.lock().check_reclaim(&who, Some(&principal), now).map_err(GraceRefusal::nfs4_status)?;
                true
            }
            OpenClaim::DelegatePrev => return Err(Nfsstat4::Notsupp),
            OpenClaim::DelegateCur(deleg) => {
                self.find_state(client, &deleg, StateType::Delegation, Some(file))?;
                self.check_new_state_for(client, now)?;
                false
            }
            OpenClaim::Null => {
                self.check_new_state_for(client, now)?;
                false
            }
        };
        let conflict =
            if share.access & OPEN4_SHARE_ACCESS_WRITE != 0 { ConflictAccess::Write } else { ConflictAccess::Read };
        self.delegation_conflict(Accessor::Client(client), file, conflict, now)?;

        let existing = self.client(client)?.open_owners.get(owner).and_then(|files| files.get(file)).copied();
        let own = existing.map_or((0, 0), |k| match &self.states[&k].kind {
            StateKind::Open(o) => (o.access, o.deny),
            _ => unreachable!("open owners index open states"),
        });
        let (access, deny) = (own.0 | share.access, own.1 | share.deny);
        self.clear_share_conflicts(client, owner, file, own, (access, deny), now)
            .map_err(|e| if reclaim { Nfsstat4::ReclaimConflict } else { e })?;

        if !reclaim {
            self.record_client(client)?;
        }
        let owner_new = !self.client(client)?.open_owners.contains_key(owner);
        if owner_new {
            self.claim(client, Resource::OpenOwners, 1, now).map_err(|l| l.status())?;
        }
        if existing.is_none()
            && let Err(l) = self.claim(client, Resource::Opens, 1, now)
        {
            if owner_new {
                self.release(client, Resource::OpenOwners, 1);
            }
            return Err(l.status());
        }

        let fs = self.files.entry(file.clone()).or_default();
        fs.count(own.0, own.1, false);
        fs.count(access, deny, true);
        let key = match existing {
            Some(key) => {
                let state = self.states.get_mut(&key).expect("indexed");
                state.seqid = crate::ids::next_seqid(state.seqid);
                if let StateKind::Open(o) = &mut state.kind {
                    o.access = access;
                    o.deny = deny;
                    o.pairs |= pair_bit(share.access, share.deny);
                }
                key
            }
            None => {
                let open = OpenState {
                    owner: owner.into(),
                    access,
                    deny,
                    pairs: pair_bit(share.access, share.deny),
                    locks: Vec::new(),
                };
                let key = self.insert_state(client, file.clone(), StateKind::Open(open));
                self.files.get_mut(file).expect("made above").opens.insert(key);
                let c = self.clients.get_mut(&client).expect("looked up above");
                c.open_owners.entry(owner.into()).or_default().insert(file.clone(), key);
                key
            }
        };
        Ok(OpenOk { stateid: self.stateid(key), created: existing.is_none() })
    }

    /// NFS4ERR_GRACE during the grace period (for anything not a reclaim).
    pub(crate) fn check_new_state(&mut self, now: Instant) -> Result<(), Nfsstat4> {
        self.poll_grace(now);
        self.grace.lock().check_new_state(now).map_err(GraceRefusal::nfs4_status)
    }

    /// Whether `client` may be granted a lock that is not a reclaim (an
    /// OPEN of any claim but CLAIM_PREVIOUS, a LOCK without `reclaim`):
    /// NFS4ERR_GRACE until it sent RECLAIM_COMPLETE (RFC 8881 section
    /// 18.51.3: a client MUST send it before its first such operation,
    /// even with nothing to reclaim; knfsd refuses such an OPEN the same
    /// way), and during the grace period. The handler asks before OPEN
    /// creates a file; the state asks again when it grants.
    pub fn check_new_state_for(&mut self, client: ClientId, now: Instant) -> Result<(), Nfsstat4> {
        if !self.client(client)?.reclaim_complete {
            return Err(Nfsstat4::Grace);
        }
        self.check_new_state(now)
    }

    /// Makes sure the open state of (`client`, `owner`) on `file` may go
    /// from `own` to `want` without conflicting with any other open owner's
    /// reservation, expiring courtesy clients whose opens are in the way.
    fn clear_share_conflicts(
        &mut self,
        client: ClientId,
        owner: &[u8],
        file: &F,
        own: (u32, u32),
        want: (u32, u32),
        now: Instant,
    ) -> Result<(), Nfsstat4> {
        let conflicts = |fs: &FileState| {
            let (access, deny) = fs.others(own);
            want.0 & deny != 0 || want.1 & access != 0
        };
        if !self.files.get(file).is_some_and(conflicts) {
            return Ok(());
        }
        let in_the_way: Vec<ClientId> = self.files[file]
            .opens
            .iter()
            .filter_map(|k| {
                let s = &self.states[k];
                let StateKind::Open(o) = &s.kind else { return None };
                let other_owner = s.client != client || *o.owner != *owner;
                (other_owner && (want.0 & o.deny != 0 || want.1 & o.access != 0)).then_some(s.client)
            })
            .collect();
        if in_the_way.iter().all(|c| self.is_courtesy(*c, now)) {
            for c in in_the_way {
                self.expire_client(c, ExpiryReason::Conflict, now);
            }
            if !self.files.get(file).is_some_and(conflicts) {
                return Ok(());
            }
        }
        self.counters.share_denied += 1;
        Err(Nfsstat4::ShareDenied)
    }

    /// CLOSE (RFC 8881 section 18.2): ends the open state, unless one of
    /// its lock states holds locks (NFS4ERR_LOCKS_HELD). Its lock states
    /// that hold none end with it. Returns the stateid to reply with (the
    /// special invalid stateid, as knfsd: the client must not use it).
    pub fn close(&mut self, client: ClientId, stateid: &Stateid4, file: &F) -> Result<Stateid4, Nfsstat4> {
        let key = self.find_state(client, stateid, StateType::Open, Some(file))?;
        let StateKind::Open(open) = &self.states[&key].kind else { unreachable!("found as an open") };
        let holding =
            open.locks.iter().any(|l| matches!(&self.states[l].kind, StateKind::Lock(l) if !l.ranges.is_empty()));
        if holding {
            return Err(Nfsstat4::LocksHeld);
        }
        self.drop_state(key);
        Ok(Stateid4::INVALID)
    }

    /// OPEN_DOWNGRADE (RFC 8881 section 18.18): the open state keeps only
    /// `access` and `deny`, which must be the union of some of the OPENs
    /// that made it (NFS4ERR_INVAL otherwise).
    pub fn open_downgrade(
        &mut self,
        client: ClientId,
        stateid: &Stateid4,
        file: &F,
        share_access: u32,
        share_deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        let share = ShareAccess::from_wire(share_access, share_deny)?;
        let key = self.find_state(client, stateid, StateType::Open, Some(file))?;
        let StateKind::Open(open) = &self.states[&key].kind else { unreachable!("found as an open") };
        let (old_access, old_deny, pairs) = (open.access, open.deny, open.pairs);
        if union_within(pairs, share.access, share.deny) != (share.access, share.deny) {
            return Err(Nfsstat4::Inval);
        }
        if let Some(fs) = self.files.get_mut(file) {
            fs.count(old_access, old_deny, false);
            fs.count(share.access, share.deny, true);
        }
        let state = self.states.get_mut(&key).expect("found above");
        state.seqid = crate::ids::next_seqid(state.seqid);
        if let StateKind::Open(o) = &mut state.kind {
            o.access = share.access;
            o.deny = share.deny;
            let mut kept = 0;
            for a in 1..=3u32 {
                for d in 0..=3u32 {
                    if pairs & pair_bit(a, d) != 0 && a & !share.access == 0 && d & !share.deny == 0 {
                        kept |= pair_bit(a, d);
                    }
                }
            }
            o.pairs = kept;
        }
        Ok(self.stateid(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_access_takes_the_want_bits_apart() {
        let s = ShareAccess::from_wire(0x0103, 2).unwrap();
        assert_eq!((s.access, s.deny, s.want), (3, 2, 0x0100));
        assert_eq!(ShareAccess::from_wire(0, 0), Err(Nfsstat4::Inval));
        assert_eq!(ShareAccess::from_wire(1, 4), Err(Nfsstat4::Inval));
        assert_eq!(ShareAccess::from_wire(0x0601, 0), Err(Nfsstat4::Inval), "no such wish");
        assert_eq!(ShareAccess::from_wire(0x4_0001, 0), Err(Nfsstat4::Inval));
    }

    /// RFC 8881 section 18.18.3: a downgrade is to the union of a subset
    /// of the OPENs in effect.
    #[test]
    fn downgrades_go_back_to_unions_of_opens() {
        let pairs = pair_bit(1, 0) | pair_bit(2, 2);
        assert_eq!(union_within(pairs, 1, 0), (1, 0));
        assert_eq!(union_within(pairs, 3, 2), (3, 2));
        assert_ne!(union_within(pairs, 2, 0), (2, 0), "write was only opened with deny write");
        assert_ne!(union_within(pairs, 3, 0), (3, 0));
    }
}

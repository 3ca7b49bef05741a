//! Stateids (RFC 8881 section 8.2): the table of every open, lock and
//! delegation stateid, their validation, TEST_STATEID (section 18.48),
//! FREE_STATEID (section 18.38), the stateid checks of I/O, and the
//! current stateid of a COMPOUND (section 16.2.3.1.2).

use std::hash::Hash;
use std::time::{Duration, Instant};

use keel_nfs4_proto::{Nfsstat4, Stateid4};

use crate::deleg::Delegation;
use crate::ids::{StateidName, check_seqid, name_stateid, stateid_other};
use crate::lock::LockState;
use crate::open::OpenState;
use crate::{ClientId, NfsState, Released, Resource, SpecialStateid};

/// The kinds of stateid (RFC 8881 section 8.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateType {
    Open,
    Lock,
    Delegation,
    /// A pNFS layout stateid (section 12.5.2): reserved, none is issued
    /// until Keel serves layouts.
    Layout,
}

pub(crate) enum StateKind<L> {
    Open(OpenState),
    Lock(LockState<L>),
    Delegation(Delegation),
}

/// One stateid's state.
pub(crate) struct State<F, L> {
    pub(crate) client: ClientId,
    pub(crate) seqid: u32,
    pub(crate) file: F,
    pub(crate) kind: StateKind<L>,
}

impl<F, L> State<F, L> {
    pub(crate) fn state_type(&self) -> StateType {
        match self.kind {
            StateKind::Open(_) => StateType::Open,
            StateKind::Lock(_) => StateType::Lock,
            StateKind::Delegation(_) => StateType::Delegation,
        }
    }

    pub(crate) fn recall_deadline(&self, lease: Duration) -> Option<Instant> {
        match &self.kind {
            StateKind::Delegation(d) if !d.revoked => {
                d.recalled_at.map(|at| d.revoke_by.map_or(at + lease, |by| by.min(at + lease)))
            }
            _ => None,
        }
    }
}

/// What an I/O operation does with the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoAccess {
    Read,
    /// WRITE, or SETATTR of the size.
    Write,
}

/// Under which state an I/O operation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoAuth {
    /// The anonymous stateid (or the all-ones one for anything but READ).
    Anonymous,
    /// A READ with the all-ones stateid: share reservations bypassed.
    ReadBypass,
    /// An open, lock or delegation stateid of the caller's client.
    State(StateType),
}

impl<F: Clone + Eq + Hash, L> NfsState<F, L> {
    /// A new stateid of `client` on `file`, seqid 1.
    pub(crate) fn insert_state(&mut self, client: ClientId, file: F, kind: StateKind<L>) -> u64 {
        let key = self.new_state_key();
        self.states.insert(key, State { client, seqid: 1, file, kind });
        if let Some(c) = self.clients.get_mut(&client) {
            c.states.insert(key);
        }
        key
    }

    /// The wire form of stateid `key` at its current seqid.
    pub(crate) fn stateid(&self, key: u64) -> Stateid4 {
        Stateid4 { seqid: self.states[&key].seqid, other: stateid_other(self.epoch, key) }
    }

    /// The key of `stateid` if it is one of `client`'s of type `want` on
    /// `file` at an acceptable seqid (RFC 8881 section 8.2.2). Special
    /// stateids are NFS4ERR_BAD_STATEID here (the current stateid must be
    /// resolved by [`CurrentStateid`] first). A revoked delegation is
    /// NFS4ERR_DELEG_REVOKED.
    pub(crate) fn find_state(
        &self,
        client: ClientId,
        stateid: &Stateid4,
        want: StateType,
        file: Option<&F>,
    ) -> Result<u64, Nfsstat4> {
        let key = match name_stateid(self.epoch, stateid)? {
            StateidName::Ours(key) => key,
            StateidName::Special(_) => return Err(Nfsstat4::BadStateid),
        };
        let state = self.states.get(&key).ok_or(Nfsstat4::BadStateid)?;
        if state.client != client || state.state_type() != want || file.is_some_and(|f| *f != state.file) {
            return Err(Nfsstat4::BadStateid);
        }
        if let StateKind::Delegation(d) = &state.kind
            && d.revoked
        {
            return Err(Nfsstat4::DelegRevoked);
        }
        check_seqid(stateid.seqid, state.seqid)?;
        Ok(key)
    }

    /// TEST_STATEID (RFC 8881 section 18.48): the status of each stateid
    /// for `client`: NFS4_OK, NFS4ERR_BAD_STATEID (special, unknown, freed,
    /// another client's), NFS4ERR_OLD_STATEID, NFS4ERR_STALE_STATEID,
    /// NFS4ERR_DELEG_REVOKED.
    pub fn test_stateids(&self, client: ClientId, stateids: &[Stateid4]) -> Vec<Nfsstat4> {
        stateids.iter().map(|s| self.test_stateid(client, s).err().unwrap_or(Nfsstat4::Ok)).collect()
    }

    fn test_stateid(&self, client: ClientId, stateid: &Stateid4) -> Result<(), Nfsstat4> {
        let key = match name_stateid(self.epoch, stateid)? {
            StateidName::Ours(key) => key,
            StateidName::Special(_) => return Err(Nfsstat4::BadStateid),
        };
        let state = self.states.get(&key).filter(|s| s.client == client).ok_or(Nfsstat4::BadStateid)?;
        self.find_state(client, stateid, state.state_type(), None).map(|_| ())
    }

    /// FREE_STATEID (RFC 8881 section 18.38): frees a lock stateid that
    /// holds no lock (its description comes back in
    /// [`take_released`](NfsState::take_released)) or a revoked delegation;
    /// an open stateid, a lock stateid holding locks and a delegation still
    /// held are NFS4ERR_LOCKS_HELD. The seqid does not matter.
    pub fn free_stateid(&mut self, client: ClientId, stateid: &Stateid4) -> Result<(), Nfsstat4> {
        let key = match name_stateid(self.epoch, stateid)? {
            StateidName::Ours(key) => key,
            StateidName::Special(_) => return Err(Nfsstat4::BadStateid),
        };
        let state = self.states.get(&key).filter(|s| s.client == client).ok_or(Nfsstat4::BadStateid)?;
        match &state.kind {
            StateKind::Lock(l) if l.ranges.is_empty() => {}
            StateKind::Delegation(d) if d.revoked => {}
            _ => return Err(Nfsstat4::LocksHeld),
        }
        self.drop_state(key);
        Ok(())
    }

    /// Ends stateid `key`: out of every index, its claims given back, and
    /// what the handler must know in [`Released`]. An open state takes
    /// its lock states with it.
    pub(crate) fn drop_state(&mut self, key: u64) {
        let Some(state) = self.states.remove(&key) else { return };
        let client = state.client;
        let stateid = Stateid4 { seqid: state.seqid, other: stateid_other(self.epoch, key) };
        if let Some(c) = self.clients.get_mut(&client) {
            c.states.remove(&key);
        }
        let file_state = self.files.get_mut(&state.file);
        match state.kind {
            StateKind::Open(open) => {
                if let Some(fs) = file_state {
                    fs.opens.remove(&key);
                    fs.count(open.access, open.deny, false);
                }
                for lock in &open.locks {
                    self.drop_state(*lock);
                }
                self.release(client, Resource::Opens, 1);
                if let Some(c) = self.clients.get_mut(&client)
                    && let Some(files) = c.open_owners.get_mut(&open.owner)
                {
                    files.remove(&state.file);
                    if files.is_empty() {
                        c.open_owners.remove(&open.owner);
                        self.release(client, Resource::OpenOwners, 1);
                    }
                }
                self.released.push(Released::Open { clientid: client, stateid, file: state.file.clone() });
            }
            StateKind::Lock(lock) => {
                if let Some(fs) = file_state {
                    fs.locks.remove(&key);
                }
                if let Some(State { kind: StateKind::Open(open), .. }) = self.states.get_mut(&lock.open) {
                    open.locks.retain(|k| *k != key);
                }
                self.release(client, Resource::LockRanges, lock.ranges.len());
                self.release(client, Resource::LockStates, 1);
                if let Some(c) = self.clients.get_mut(&client)
                    && let Some(files) = c.lock_owners.get_mut(&lock.owner)
                {
                    files.remove(&state.file);
                    if files.is_empty() {
                        c.lock_owners.remove(&lock.owner);
                        self.release(client, Resource::LockOwners, 1);
                    }
                }
                self.released.push(Released::LockHolder {
                    clientid: client,
                    stateid,
                    file: state.file.clone(),
                    holder: lock.holder,
                });
            }
            StateKind::Delegation(d) => {
                if let Some(fs) = file_state {
                    fs.delegations.remove(&key);
                }
                self.release(client, Resource::Delegations, 1);
                if d.revoked {
                    if let Some(c) = self.clients.get_mut(&client) {
                        c.revoked -= 1;
                    }
                } else {
                    self.released.push(Released::Delegation {
                        clientid: client,
                        stateid,
                        file: state.file.clone(),
                        kind: d.kind,
                    });
                }
            }
        }
        if self.files.get(&state.file).is_some_and(|f| f.is_empty()) {
            self.files.remove(&state.file);
        }
    }

    /// The stateid of a READ, WRITE or SETATTR of the size (RFC 8881
    /// sections 8.2.2, 9.1.3, 9.7): one of `client`'s on `file` whose open
    /// allows `access` (NFS4ERR_OPENMODE otherwise; a READ is allowed
    /// through a write-only open, as knfsd does, so a client can fill its
    /// cache around a write), or a special stateid, which is subject to
    /// every open's deny bits (NFS4ERR_LOCKED, knfsd's answer; courtesy
    /// clients whose denies are all that is in the way are expired) and to
    /// other clients' delegations (NFS4ERR_DELAY while a recall is under
    /// way).
    pub fn check_io(
        &mut self,
        client: ClientId,
        stateid: &Stateid4,
        file: &F,
        access: IoAccess,
        now: Instant,
    ) -> Result<IoAuth, Nfsstat4> {
        let auth = match name_stateid(self.epoch, stateid)? {
            StateidName::Special(SpecialStateid::ReadBypass) if access == IoAccess::Read => {
                return Ok(IoAuth::ReadBypass);
            }
            StateidName::Special(SpecialStateid::Anonymous | SpecialStateid::ReadBypass) => IoAuth::Anonymous,
            StateidName::Special(_) => return Err(Nfsstat4::BadStateid),
            StateidName::Ours(key) => {
                let state = self.states.get(&key).filter(|s| s.client == client).ok_or(Nfsstat4::BadStateid)?;
                let ty = state.state_type();
                let key = self.find_state(client, stateid, ty, Some(file))?;
                let allowed = match &self.states[&key].kind {
                    StateKind::Open(o) => o.access,
                    StateKind::Lock(l) => match self.states.get(&l.open).map(|s| &s.kind) {
                        Some(StateKind::Open(o)) => o.access,
                        _ => 0,
                    },
                    StateKind::Delegation(d) => d.kind.access(),
                };
                if access == IoAccess::Write && allowed & keel_nfs4_proto::OPEN4_SHARE_ACCESS_WRITE == 0 {
                    return Err(Nfsstat4::Openmode);
                }
                return Ok(IoAuth::State(ty));
            }
        };
        let bit = match access {
            IoAccess::Read => keel_nfs4_proto::OPEN4_SHARE_DENY_READ,
            IoAccess::Write => keel_nfs4_proto::OPEN4_SHARE_DENY_WRITE,
        };
        self.clear_deny_conflicts(file, bit, now)?;
        let conflict = match access {
            IoAccess::Read => crate::ConflictAccess::Read,
            IoAccess::Write => crate::ConflictAccess::Write,
        };
        self.delegation_conflict(crate::Accessor::Client(client), file, conflict, now)?;
        Ok(auth)
    }
}

impl<F: Clone + Eq + Hash, L> NfsState<F, L> {
    /// NFS4ERR_LOCKED if an open denies `deny_bit` on `file` to I/O with a
    /// special stateid, unless every open denying it is a courtesy
    /// client's: those clients are expired (a courtesy client's state
    /// gives way to a live client's request, as in OPEN).
    fn clear_deny_conflicts(&mut self, file: &F, deny_bit: u32, now: Instant) -> Result<(), Nfsstat4> {
        let Some(fs) = self.files.get(file) else { return Ok(()) };
        if fs.others((0, 0)).1 & deny_bit == 0 {
            return Ok(());
        }
        let mut denying: Vec<ClientId> = fs
            .opens
            .iter()
            .filter_map(|k| {
                let s = &self.states[k];
                matches!(&s.kind, StateKind::Open(o) if o.deny & deny_bit != 0).then_some(s.client)
            })
            .collect();
        denying.sort_unstable();
        denying.dedup();
        if !denying.iter().all(|c| self.is_courtesy(*c, now)) {
            return Err(Nfsstat4::Locked);
        }
        for c in denying {
            self.expire_client(c, crate::ExpiryReason::Conflict, now);
        }
        Ok(())
    }
}

/// The current and saved stateids of one COMPOUND (RFC 8881 section
/// 16.2.3.1.2). An operation that returns a stateid sets the current one;
/// an operation that changes the current filehandle without returning a
/// stateid clears it; SAVEFH and RESTOREFH save and restore it with the
/// filehandle. An argument equal to the special current stateid is
/// replaced by the current one, or is NFS4ERR_BAD_STATEID if there is
/// none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CurrentStateid {
    current: Option<Stateid4>,
    saved: Option<Stateid4>,
}

impl CurrentStateid {
    pub fn new() -> Self {
        CurrentStateid::default()
    }

    /// The stateid an operation is to use for its argument `arg`.
    pub fn resolve(&self, arg: &Stateid4) -> Result<Stateid4, Nfsstat4> {
        if *arg == Stateid4::CURRENT { self.current.ok_or(Nfsstat4::BadStateid) } else { Ok(*arg) }
    }

    /// An operation returned (or used) `stateid`.
    pub fn set(&mut self, stateid: Stateid4) {
        self.current = Some(stateid);
    }

    /// The current filehandle changed and no stateid came with it.
    pub fn clear(&mut self) {
        self.current = None;
    }

    /// SAVEFH.
    pub fn save(&mut self) {
        self.saved = self.current;
    }

    /// RESTOREFH.
    pub fn restore(&mut self) {
        self.current = self.saved;
    }

    pub fn current(&self) -> Option<Stateid4> {
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8881 section 16.2.3.1.2: the current stateid follows the
    /// operations that set it, is cleared by a filehandle change, and is
    /// saved and restored with SAVEFH and RESTOREFH.
    #[test]
    fn the_current_stateid_follows_savefh_and_restorefh() {
        let a = Stateid4 { seqid: 3, other: [1; 12] };
        let b = Stateid4 { seqid: 1, other: [2; 12] };
        let mut cs = CurrentStateid::new();
        assert_eq!(cs.resolve(&Stateid4::CURRENT), Err(Nfsstat4::BadStateid));
        assert_eq!(cs.resolve(&a), Ok(a), "other stateids pass through");
        cs.set(a);
        cs.save();
        cs.clear();
        assert_eq!(cs.resolve(&Stateid4::CURRENT), Err(Nfsstat4::BadStateid), "PUTFH cleared it");
        cs.set(b);
        assert_eq!(cs.resolve(&Stateid4::CURRENT), Ok(b));
        cs.restore();
        assert_eq!(cs.resolve(&Stateid4::CURRENT), Ok(a));
        assert_eq!(cs.current(), Some(a));
    }
}

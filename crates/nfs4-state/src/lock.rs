//! Lock state (RFC 8881 sections 18.10 LOCK, 18.11 LOCKT, 18.12 LOCKU):
//! lock owners, one lock stateid per lock owner and file, and the byte
//! ranges each holds. The ranges themselves are taken and released by the
//! handler through OFD locks (one description per lock state), which
//! arbitrate between NFSv4.1 owners, NLM clients and local processes; the
//! state mirrors what each description holds, to count it (every range is
//! a lock in the kernel too), to answer LOCKS_HELD, and to find the
//! courtesy clients in a conflict's way.

use std::hash::Hash;
use std::time::Instant;

use keel_nfs4_proto::{NfsLockType4, Nfsstat4, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE, Stateid4};

use crate::grace::GraceRefusal;
use crate::ids::next_seqid;
use crate::stateid::{StateKind, StateType};
use crate::{ClientId, ExpiryReason, Limited, NfsState, Reclaimer, Resource};

/// A lock's kind; the blocking variants (`READW_LT`, `WRITEW_LT`) are the
/// same to the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockKind {
    Read,
    Write,
}

impl From<NfsLockType4> for LockKind {
    fn from(t: NfsLockType4) -> Self {
        match t {
            NfsLockType4::ReadLt | NfsLockType4::ReadwLt => LockKind::Read,
            NfsLockType4::WriteLt | NfsLockType4::WritewLt => LockKind::Write,
        }
    }
}

/// A byte range: `start` to `last` inclusive; `last` is `u64::MAX` for a
/// range to the end of the file and beyond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ByteRange {
    pub start: u64,
    pub last: u64,
}

impl ByteRange {
    /// From LOCK's, LOCKT's or LOCKU's `offset` and `length` (RFC 8881
    /// section 18.10.3): a length of 0, or one that goes past 2^64 - 1
    /// without being all ones, is NFS4ERR_INVAL.
    pub fn from_wire(offset: u64, length: u64) -> Result<Self, Nfsstat4> {
        if length == 0 {
            return Err(Nfsstat4::Inval);
        }
        if length == u64::MAX {
            return Ok(ByteRange { start: offset, last: u64::MAX });
        }
        let last = offset.checked_add(length - 1).ok_or(Nfsstat4::Inval)?;
        Ok(ByteRange { start: offset, last })
    }

    /// As fcntl counts it: a start and a length, 0 for "to the end".
    pub fn start_len(&self) -> (u64, u64) {
        if self.last == u64::MAX { (self.start, 0) } else { (self.start, self.last - self.start + 1) }
    }

    fn overlaps(&self, other: &ByteRange) -> bool {
        self.start <= other.last && other.start <= self.last
    }
}

/// A range held, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) range: ByteRange,
    pub(crate) kind: LockKind,
}

/// Removes `cut` from the ranges, splitting those it falls inside.
fn cut(held: &[Held], cut: ByteRange) -> Vec<Held> {
    let mut out = Vec::with_capacity(held.len() + 1);
    for h in held {
        if !h.range.overlaps(&cut) {
            out.push(*h);
            continue;
        }
        if h.range.start < cut.start {
            out.push(Held { range: ByteRange { start: h.range.start, last: cut.start - 1 }, kind: h.kind });
        }
        if h.range.last > cut.last {
            out.push(Held { range: ByteRange { start: cut.last + 1, last: h.range.last }, kind: h.kind });
        }
    }
    out
}

/// The ranges after a lock of `kind` over `range`, as POSIX and OFD locks
/// combine them: the new lock replaces what it covers, and merges with
/// ranges of the same kind it touches.
fn with_lock(held: &[Held], range: ByteRange, kind: LockKind) -> Vec<Held> {
    let mut v = cut(held, range);
    v.push(Held { range, kind });
    v.sort_by_key(|h| h.range.start);
    let mut merged: Vec<Held> = Vec::with_capacity(v.len());
    for h in v {
        if let Some(last) = merged.last_mut()
            && last.kind == h.kind
            && last.range.last.checked_add(1).is_none_or(|next| next >= h.range.start)
        {
            last.range.last = last.range.last.max(h.range.last);
            continue;
        }
        merged.push(h);
    }
    merged
}

/// One lock owner's lock state on one file.
#[derive(Debug)]
pub(crate) struct LockState<L> {
    pub(crate) owner: Box<[u8]>,
    /// The open state it came from.
    pub(crate) open: u64,
    /// The handler's lock-holding description.
    pub(crate) holder: L,
    pub(crate) ranges: Vec<Held>,
}

/// LOCK's `locker4` (RFC 8881 section 18.10.3). The lock owner's client ID
/// is the session's: the one in `lock_owner4` is ignored in 4.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locker<'a> {
    /// The first lock of `owner` under an open: `open_to_lock_owner4`.
    NewOwner { open_stateid: Stateid4, owner: &'a [u8] },
    /// A further lock: `exist_lock_owner4`.
    Existing { lock_stateid: Stateid4 },
}

/// A LOCK, as the state needs it.
#[derive(Debug, Clone, Copy)]
pub struct LockRequest<'a, F> {
    pub file: &'a F,
    pub kind: LockKind,
    pub range: ByteRange,
    pub reclaim: bool,
    pub locker: Locker<'a>,
}

/// A LOCK the state admits; the handler takes the range and reports.
/// Dropping a plan (the lock was denied or failed) changes nothing.
pub enum LockPlan<'s, F: Clone + Eq + Hash, L> {
    /// The lock owner already has a lock state on the file: lock through
    /// its description ([`HeldLockPlan::holder`]).
    Held(HeldLockPlan<'s, F, L>),
    /// The first lock of this lock owner on this file: the handler opens a
    /// new description, locks through it, and gives it to
    /// [`NewLockPlan::granted`].
    New(NewLockPlan<'s, F, L>),
}

pub struct HeldLockPlan<'s, F: Clone + Eq + Hash, L> {
    state: &'s mut NfsState<F, L>,
    key: u64,
    range: ByteRange,
    kind: LockKind,
    client: ClientId,
}

pub struct NewLockPlan<'s, F: Clone + Eq + Hash, L> {
    state: &'s mut NfsState<F, L>,
    client: ClientId,
    owner: Box<[u8]>,
    open: u64,
    file: F,
    range: ByteRange,
    kind: LockKind,
}

impl<F: Clone + Eq + Hash, L> HeldLockPlan<'_, F, L> {
    /// The description to lock through.
    pub fn holder(&self) -> &L {
        match &self.state.states[&self.key].kind {
            StateKind::Lock(l) => &l.holder,
            _ => unreachable!("a lock plan names a lock state"),
        }
    }

    pub fn range(&self) -> ByteRange {
        self.range
    }

    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The lock owner asking (to leave out of a conflict's holders).
    pub fn owner(&self) -> &[u8] {
        match &self.state.states[&self.key].kind {
            StateKind::Lock(l) => &l.owner,
            _ => unreachable!("a lock plan names a lock state"),
        }
    }

    /// The handler took the lock: the state records it and moves the lock
    /// stateid's seqid on. Returns the stateid to reply with.
    pub fn granted(self) -> Stateid4 {
        let st = self.state;
        let StateKind::Lock(l) = &mut st.states.get_mut(&self.key).expect("planned").kind else { unreachable!() };
        let before = l.ranges.len();
        l.ranges = with_lock(&l.ranges, self.range, self.kind);
        let after = l.ranges.len();
        st.adjust_ranges(self.client, before, after);
        let s = st.states.get_mut(&self.key).expect("planned");
        s.seqid = next_seqid(s.seqid);
        st.stateid(self.key)
    }
}

impl<F: Clone + Eq + Hash, L> NewLockPlan<'_, F, L> {
    pub fn range(&self) -> ByteRange {
        self.range
    }

    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The lock owner asking (to leave out of a conflict's holders).
    pub fn owner(&self) -> &[u8] {
        &self.owner
    }

    /// The handler took the lock through `holder`, a new description: the
    /// state keeps it in a new lock state (seqid 1). Returns its stateid.
    pub fn granted(self, holder: L) -> Stateid4 {
        let st = self.state;
        let owner_new = !st.clients[&self.client].lock_owners.contains_key(&self.owner);
        st.add_claim(self.client, Resource::LockOwners, usize::from(owner_new));
        st.add_claim(self.client, Resource::LockStates, 1);
        st.add_claim(self.client, Resource::LockRanges, 1);
        let lock = LockState {
            owner: self.owner.clone(),
            open: self.open,
            holder,
            ranges: vec![Held { range: self.range, kind: self.kind }],
        };
        let key = st.insert_state(self.client, self.file.clone(), StateKind::Lock(lock));
        st.files.entry(self.file.clone()).or_default().locks.insert(key);
        if let Some(crate::stateid::State { kind: StateKind::Open(o), .. }) = st.states.get_mut(&self.open) {
            o.locks.push(key);
        }
        let c = st.clients.get_mut(&self.client).expect("planned for a client");
        c.lock_owners.entry(self.owner).or_default().insert(self.file, key);
        st.stateid(key)
    }
}

/// A LOCKU the state admits: the handler releases the range through
/// [`holder`](UnlockPlan::holder), then calls [`done`](UnlockPlan::done).
pub struct UnlockPlan<'s, F: Clone + Eq + Hash, L> {
    state: &'s mut NfsState<F, L>,
    key: u64,
    range: ByteRange,
    client: ClientId,
}

impl<F: Clone + Eq + Hash, L> UnlockPlan<'_, F, L> {
    pub fn holder(&self) -> &L {
        match &self.state.states[&self.key].kind {
            StateKind::Lock(l) => &l.holder,
            _ => unreachable!("an unlock plan names a lock state"),
        }
    }

    pub fn range(&self) -> ByteRange {
        self.range
    }

    /// The range is released: the lock stateid's seqid moves on. Returns
    /// the stateid to reply with.
    pub fn done(self) -> Stateid4 {
        let st = self.state;
        let s = st.states.get_mut(&self.key).expect("planned");
        s.seqid = next_seqid(s.seqid);
        let StateKind::Lock(l) = &mut s.kind else { unreachable!() };
        let before = l.ranges.len();
        l.ranges = cut(&l.ranges, self.range);
        let after = l.ranges.len();
        // Released whatever the limits: an unlock that splits a range needs
        // one more, and an unlock always succeeds.
        st.adjust_ranges(self.client, before, after);
        st.stateid(self.key)
    }
}

impl<F: Clone + Eq + Hash, L> NfsState<F, L> {
    /// LOCK (RFC 8881 section 18.10): checks the locker's stateid, the
    /// open's mode (a write lock needs write access, a read lock read
    /// access: NFS4ERR_OPENMODE), the grace rules and the bounds on lock
    /// owners, lock states and ranges, and says through which description
    /// the handler is to take the range.
    pub fn lock(
        &mut self,
        client: ClientId,
        req: LockRequest<'_, F>,
        now: Instant,
    ) -> Result<LockPlan<'_, F, L>, Nfsstat4> {
        let c = self.client(client)?;
        let (who, principal) = (Reclaimer::Nfs4(c.owner.clone()), c.principal.clone());
        let (open, existing, owner): (u64, Option<u64>, Box<[u8]>) = match req.locker {
            Locker::NewOwner { open_stateid, owner } => {
                let open = self.find_state(client, &open_stateid, StateType::Open, Some(req.file))?;
                let existing = c.lock_owners.get(owner).and_then(|files| files.get(req.file)).copied();
                (open, existing, owner.into())
            }
            Locker::Existing { lock_stateid } => {
                let key = self.find_state(client, &lock_stateid, StateType::Lock, Some(req.file))?;
                let StateKind::Lock(l) = &self.states[&key].kind else { unreachable!("found as a lock") };
                (l.open, Some(key), l.owner.clone())
            }
        };
        let StateKind::Open(o) = &self.states[&open].kind else { unreachable!("a lock comes from an open") };
        let needed = match req.kind {
            LockKind::Read => OPEN4_SHARE_ACCESS_READ,
            LockKind::Write => OPEN4_SHARE_ACCESS_WRITE,
        };
        if o.access & needed == 0 {
            return Err(Nfsstat4::Openmode);
        }
        self.poll_grace(now);
        if req.reclaim {
            self.grace.lock().check_reclaim(&who, Some(&principal), now).map_err(GraceRefusal::nfs4_status)?;
        } else {
            self.check_new_state_for(client, now)?;
            self.record_client(client)?;
        }
        match existing {
            Some(key) => {
                let StateKind::Lock(l) = &self.states[&key].kind else { unreachable!("indexed as a lock") };
                let growth = with_lock(&l.ranges, req.range, req.kind).len().saturating_sub(l.ranges.len());
                self.reserve(client, &[(Resource::LockRanges, growth)], now).map_err(|l| l.status())?;
                Ok(LockPlan::Held(HeldLockPlan { state: self, key, range: req.range, kind: req.kind, client }))
            }
            None => {
                let owner_new = !self.client(client)?.lock_owners.contains_key(&owner);
                let needs = [
                    (Resource::LockOwners, usize::from(owner_new)),
                    (Resource::LockStates, 1),
                    (Resource::LockRanges, 1),
                ];
                self.reserve(client, &needs, now).map_err(|l| l.status())?;
                Ok(LockPlan::New(NewLockPlan {
                    state: self,
                    client,
                    owner,
                    open,
                    file: req.file.clone(),
                    range: req.range,
                    kind: req.kind,
                }))
            }
        }
    }

    /// LOCKU (RFC 8881 section 18.12): checks the lock stateid and says
    /// which description to release `range` through.
    pub fn locku(
        &mut self,
        client: ClientId,
        lock_stateid: &Stateid4,
        file: &F,
        range: ByteRange,
    ) -> Result<UnlockPlan<'_, F, L>, Nfsstat4> {
        let key = self.find_state(client, lock_stateid, StateType::Lock, Some(file))?;
        Ok(UnlockPlan { state: self, key, range, client })
    }

    /// LOCKT (RFC 8881 section 18.11): NFS4ERR_GRACE during the grace
    /// period; otherwise the description of lock owner `owner` on `file`
    /// if it has one (test through it, so that the owner's own locks do
    /// not count), else `None` (test through a new one).
    pub fn lockt(&mut self, client: ClientId, owner: &[u8], file: &F, now: Instant) -> Result<Option<&L>, Nfsstat4> {
        self.check_new_state(now)?;
        let key = self.client(client)?.lock_owners.get(owner).and_then(|files| files.get(file)).copied();
        Ok(key.and_then(|k| match &self.states[&k].kind {
            StateKind::Lock(l) => Some(&l.holder),
            _ => None,
        }))
    }

    /// Who holds the lock a LOCK or LOCKT on `file` ran into, if it is an
    /// NFSv4.1 lock owner other than `asking` (client and owner): the lock
    /// state holding a range of `kind` that overlaps `range`, the lock the
    /// kernel reported. Returns its client, owner and range; `None` for a
    /// lock of an NLM client or a local process (or one that went).
    pub fn lock_holder(
        &self,
        file: &F,
        kind: LockKind,
        range: ByteRange,
        asking: (ClientId, &[u8]),
    ) -> Option<(ClientId, &[u8], ByteRange)> {
        let fs = self.files.get(file)?;
        let mut found: Vec<(u64, ClientId, &[u8], ByteRange)> = fs
            .locks
            .iter()
            .filter_map(|k| {
                let s = &self.states[k];
                let StateKind::Lock(l) = &s.kind else { return None };
                if (s.client, &*l.owner) == asking {
                    return None;
                }
                let held = l.ranges.iter().find(|h| h.kind == kind && h.range.overlaps(&range))?;
                Some((*k, s.client, &*l.owner, held.range))
            })
            .collect();
        // The same answer whatever order the set keeps.
        found.sort_by_key(|f| f.0);
        found.first().map(|&(_, client, owner, range)| (client, owner, range))
    }

    /// A lock on `file` was refused by a conflict: expires the courtesy
    /// clients whose lock states hold a range conflicting with `kind` over
    /// `range` (knfsd's `lm_lock_expirable`). Returns how many were
    /// expired; if any, the handler tries the lock once more.
    pub fn expire_courtesy_lock_conflicts(
        &mut self,
        file: &F,
        kind: LockKind,
        range: ByteRange,
        now: Instant,
    ) -> usize {
        let Some(fs) = self.files.get(file) else { return 0 };
        let mut holders: Vec<ClientId> = fs
            .locks
            .iter()
            .filter_map(|k| {
                let s = &self.states[k];
                let StateKind::Lock(l) = &s.kind else { return None };
                let conflicts = l
                    .ranges
                    .iter()
                    .any(|h| h.range.overlaps(&range) && (kind == LockKind::Write || h.kind == LockKind::Write));
                conflicts.then_some(s.client)
            })
            .filter(|c| self.is_courtesy(*c, now))
            .collect();
        holders.sort();
        holders.dedup();
        for c in &holders {
            self.expire_client(*c, ExpiryReason::Conflict, now);
        }
        holders.len()
    }

    /// Checks that `client` may take each `(resource, n)` (expiring
    /// courtesy clients to make room), without taking it yet.
    fn reserve(&mut self, client: ClientId, needs: &[(Resource, usize)], now: Instant) -> Result<(), Limited> {
        let addr = self
            .client(client)
            .map_err(|_| Limited { resource: Resource::Clients, refusal: keel_exports::claims::Refusal::PoolFull })?
            .addr;
        for &(resource, n) in needs {
            if n == 0 {
                continue;
            }
            loop {
                match self.pools.get(resource).check(addr, n) {
                    Ok(()) => break,
                    Err(refusal) => {
                        if !self.make_room(resource, refusal, addr, client, now) {
                            self.counters.refused[resource as usize] += 1;
                            return Err(Limited { resource, refusal });
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Counts `n` more of `resource` for `client` without a check (for
    /// what [`reserve`](NfsState::reserve) admitted).
    pub(crate) fn add_claim(&mut self, client: ClientId, resource: Resource, n: usize) {
        if n == 0 {
            return;
        }
        if let Some(c) = self.clients.get_mut(&client) {
            c.held[resource as usize] += n;
            self.pools.get_mut(resource).add(c.addr, n);
        }
    }

    fn adjust_ranges(&mut self, client: ClientId, before: usize, after: usize) {
        if after > before {
            self.add_claim(client, Resource::LockRanges, after - before);
        } else {
            self.release(client, Resource::LockRanges, before - after);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, last: u64) -> ByteRange {
        ByteRange { start, last }
    }

    /// RFC 8881 section 18.10.3: a zero length, or a range past 2^64 - 1,
    /// is NFS4ERR_INVAL; all ones is "to the end".
    #[test]
    fn ranges_come_from_offset_and_length() {
        assert_eq!(ByteRange::from_wire(10, 0), Err(Nfsstat4::Inval));
        assert_eq!(ByteRange::from_wire(u64::MAX - 1, 5), Err(Nfsstat4::Inval));
        assert_eq!(ByteRange::from_wire(10, u64::MAX), Ok(r(10, u64::MAX)));
        assert_eq!(ByteRange::from_wire(10, 5), Ok(r(10, 14)));
        assert_eq!(r(10, u64::MAX).start_len(), (10, 0));
        assert_eq!(r(10, 14).start_len(), (10, 5));
    }

    /// What an OFD description holds after locks and unlocks: a new lock
    /// replaces what it covers, same kinds merge, an unlock splits.
    /// The holder named in LOCK4denied is the lock state holding the
    /// kernel's conflicting lock, never the asking lock owner itself.
    #[test]
    fn a_conflict_names_the_other_lock_owner() {
        use crate::tests::*;
        let now = Instant::now();
        let mut st = state(now);
        let (a, _) = connect(&mut st, ip(1), "a", now);
        let (b, _) = connect(&mut st, ip(2), "b", now);
        let oa = open(&mut st, a, "oa", 7, 3, 0, now).unwrap();
        let ob = open(&mut st, b, "ob", 7, 3, 0, now).unwrap();
        let shared = |st: &mut St, client, open_stateid, owner: &str, holder| {
            let req = LockRequest {
                file: &7,
                kind: LockKind::Read,
                range: r(0, 9),
                reclaim: false,
                locker: Locker::NewOwner { open_stateid, owner: owner.as_bytes() },
            };
            match st.lock(client, req, now).unwrap() {
                LockPlan::New(plan) => plan.granted(holder),
                LockPlan::Held(_) => unreachable!("a new lock owner"),
            }
        };
        shared(&mut st, a, oa, "la", 1);
        shared(&mut st, b, ob, "lb", 2);
        let holder = st.lock_holder(&7, LockKind::Read, r(5, 5), (a, b"la")).unwrap();
        assert_eq!((holder.0, holder.1, holder.2), (b, &b"lb"[..], r(0, 9)));
        let holder = st.lock_holder(&7, LockKind::Read, r(5, 5), (b, b"lb")).unwrap();
        assert_eq!((holder.0, holder.1), (a, &b"la"[..]));
        assert!(st.lock_holder(&7, LockKind::Write, r(0, 9), (a, b"x")).is_none(), "no write lock there");
        assert!(st.lock_holder(&7, LockKind::Read, r(10, 19), (a, b"x")).is_none(), "nothing there");
        assert!(st.lock_holder(&8, LockKind::Read, r(0, 9), (a, b"x")).is_none(), "another file");
    }

    #[test]
    fn held_ranges_combine_as_posix_locks_do() {
        let w = LockKind::Write;
        let rd = LockKind::Read;
        let v = with_lock(&[], r(0, 9), w);
        let v = with_lock(&v, r(10, 19), w);
        assert_eq!(v, vec![Held { range: r(0, 19), kind: w }], "adjacent same kind merges");
        let v = with_lock(&v, r(5, 14), rd);
        assert_eq!(v.len(), 3, "a read lock in the middle splits the write lock");
        let v = cut(&v, r(0, 4));
        assert_eq!(v[0], Held { range: r(5, 14), kind: rd });
        let v = with_lock(&v, r(0, u64::MAX), rd);
        assert_eq!(v, vec![Held { range: r(0, u64::MAX), kind: rd }]);
        assert!(cut(&v, r(0, u64::MAX)).is_empty());
        assert_eq!(cut(&v, r(100, 199)).len(), 2);
    }
}

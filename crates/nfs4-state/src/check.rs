//! The crate's invariants, checked over everything the state holds: for
//! tests (the randomized one calls it after every operation) and for
//! debugging a live server. Nothing here changes the state.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;

use crate::lock::Held;
use crate::stateid::StateKind;
use crate::{FileState, NfsState, Resource};

impl<F: Clone + Eq + Hash, L> NfsState<F, L> {
    /// Checks that every index agrees with what it indexes, that no two
    /// open owners' share reservations on a file conflict, that every
    /// client's claims are what it holds and every pool's counts the sum
    /// of its clients', and that the reply cache's count is the sum of
    /// the replies kept. Returns the first violation found. Takes time in
    /// proportion to everything held.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_clients()?;
        self.check_sessions()?;
        self.check_states()?;
        self.check_files()?;
        self.check_claims()
    }

    fn check_clients(&self) -> Result<(), String> {
        for (id, c) in &self.clients {
            let index = if c.confirmed { &self.confirmed_by_owner } else { &self.unconfirmed_by_owner };
            if index.get(&c.owner) != Some(id) {
                return Err(format!("client {id} is not indexed by its owner"));
            }
            for sid in &c.sessions {
                if self.sessions.get(sid).map(|s| s.client) != Some(*id) {
                    return Err(format!("client {id} lists session {sid} that is not its own"));
                }
            }
            for key in &c.states {
                if self.states.get(key).map(|s| s.client) != Some(*id) {
                    return Err(format!("client {id} lists state {key} that is not its own"));
                }
            }
            let in_use: usize = c.sessions.iter().map(|s| self.sessions[s].audit().in_use).sum();
            if in_use != c.in_flight as usize {
                return Err(format!("client {id} has {} requests in flight but {in_use} slots in use", c.in_flight));
            }
            let revoked = c
                .states
                .iter()
                .filter(|k| matches!(&self.states[k].kind, StateKind::Delegation(d) if d.revoked))
                .count();
            if revoked != c.revoked {
                return Err(format!("client {id} counts {} revoked delegations, holds {revoked}", c.revoked));
            }
        }
        for (owner_index, confirmed) in [(&self.confirmed_by_owner, true), (&self.unconfirmed_by_owner, false)] {
            for id in owner_index.values() {
                if self.clients.get(id).map(|c| c.confirmed) != Some(confirmed) {
                    return Err(format!("the owner index names client {id}, which is not there as such"));
                }
            }
        }
        Ok(())
    }

    fn check_sessions(&self) -> Result<(), String> {
        let mut cached = 0;
        for (sid, s) in &self.sessions {
            if !self.clients.get(&s.client).is_some_and(|c| c.sessions.contains(sid)) {
                return Err(format!("session {sid} is not listed by its client"));
            }
            let a = s.audit();
            if a.cached_bytes != a.cached_recount {
                return Err(format!(
                    "session {sid} counts {} cached bytes, holds {}",
                    a.cached_bytes, a.cached_recount
                ));
            }
            cached += a.cached_bytes;
            for conn in a.conns {
                if !self.connections.get(&conn).is_some_and(|l| l.contains(sid)) {
                    return Err(format!("connection {conn:?} of session {sid} is not indexed"));
                }
            }
        }
        if cached != self.reply_cache_bytes {
            return Err(format!("the reply cache counts {} bytes, sessions hold {cached}", self.reply_cache_bytes));
        }
        for (conn, list) in &self.connections {
            if list.is_empty()
                || list.iter().any(|sid| !self.sessions.get(sid).is_some_and(|s| s.audit().conns.contains(conn)))
            {
                return Err(format!("connection {conn:?} is indexed to a session it is not bound to"));
            }
        }
        Ok(())
    }

    fn check_states(&self) -> Result<(), String> {
        for (key, s) in &self.states {
            let Some(c) = self.clients.get(&s.client) else {
                return Err(format!("state {key} belongs to no client"));
            };
            if !c.states.contains(key) {
                return Err(format!("state {key} is not listed by its client"));
            }
            let file = self.files.get(&s.file);
            let indexed =
                |pick: fn(&FileState) -> &std::collections::HashSet<u64>| file.is_some_and(|f| pick(f).contains(key));
            match &s.kind {
                StateKind::Open(o) => {
                    if !indexed(|f| &f.opens) || c.open_owners.get(&o.owner).and_then(|m| m.get(&s.file)) != Some(key) {
                        return Err(format!("open state {key} is not indexed"));
                    }
                    for l in &o.locks {
                        if !matches!(self.states.get(l).map(|x| &x.kind), Some(StateKind::Lock(lock)) if lock.open == *key)
                        {
                            return Err(format!("open state {key} lists lock state {l} that is not from it"));
                        }
                    }
                }
                StateKind::Lock(l) => {
                    if !indexed(|f| &f.locks) || c.lock_owners.get(&l.owner).and_then(|m| m.get(&s.file)) != Some(key) {
                        return Err(format!("lock state {key} is not indexed"));
                    }
                    let from_open = matches!(self.states.get(&l.open).map(|x| &x.kind), Some(StateKind::Open(o)) if o.locks.contains(key));
                    if !from_open {
                        return Err(format!("lock state {key} is not listed by its open state"));
                    }
                    if !ranges_well_formed(&l.ranges) {
                        return Err(format!("lock state {key} holds overlapping or unmerged ranges: {:?}", l.ranges));
                    }
                }
                StateKind::Delegation(d) => {
                    if indexed(|f| &f.delegations) == d.revoked {
                        return Err(format!("delegation {key} is indexed on its file if and only if revoked"));
                    }
                }
            }
        }
        Ok(())
    }

    fn check_files(&self) -> Result<(), String> {
        for fs in self.files.values() {
            if fs.is_empty() {
                return Err("an empty file state is kept".into());
            }
            let mut recount = FileState::default();
            let opens: Vec<_> = fs
                .opens
                .iter()
                .map(|k| match self.states.get(k) {
                    Some(s) => match &s.kind {
                        StateKind::Open(o) => Ok((s.client, &o.owner, o.access, o.deny)),
                        _ => Err(format!("file index lists state {k} as an open")),
                    },
                    None => Err(format!("file index lists missing state {k}")),
                })
                .collect::<Result<_, _>>()?;
            for (i, a) in opens.iter().enumerate() {
                recount.count(a.2, a.3, true);
                for b in &opens[i + 1..] {
                    let same_owner = a.0 == b.0 && a.1 == b.1;
                    if !same_owner && (a.2 & b.3 != 0 || b.2 & a.3 != 0) {
                        return Err(format!("share reservations conflict: {a:?} and {b:?}"));
                    }
                }
            }
            if (recount.access, recount.deny) != (fs.access, fs.deny) {
                return Err(format!(
                    "file counts {:?}/{:?}, opens hold {:?}/{:?}",
                    fs.access, fs.deny, recount.access, recount.deny
                ));
            }
            for k in fs.locks.iter().chain(&fs.delegations) {
                if !self.states.contains_key(k) {
                    return Err(format!("file index lists missing state {k}"));
                }
            }
        }
        Ok(())
    }

    fn check_claims(&self) -> Result<(), String> {
        let mut by_addr: HashMap<(IpAddr, Resource), usize> = HashMap::new();
        for (id, c) in &self.clients {
            let kinds =
                |pred: fn(&StateKind<L>) -> bool| c.states.iter().filter(|k| pred(&self.states[k].kind)).count();
            let ranges: usize = c
                .states
                .iter()
                .map(|k| match &self.states[k].kind {
                    StateKind::Lock(l) => l.ranges.len(),
                    _ => 0,
                })
                .sum();
            let holds = [
                (Resource::Clients, 1),
                (Resource::ReplyCacheSlots, c.sessions.iter().map(|s| self.sessions[s].audit().slots).sum()),
                (Resource::OpenOwners, c.open_owners.len()),
                (Resource::Opens, kinds(|k| matches!(k, StateKind::Open(_)))),
                (Resource::LockOwners, c.lock_owners.len()),
                (Resource::LockStates, kinds(|k| matches!(k, StateKind::Lock(_)))),
                (Resource::LockRanges, ranges),
                (Resource::Delegations, kinds(|k| matches!(k, StateKind::Delegation(_)))),
            ];
            for (r, n) in holds {
                if c.held[r as usize] != n {
                    return Err(format!("client {id} has claimed {} of {r:?} and holds {n}", c.held[r as usize]));
                }
                *by_addr.entry((c.addr, r)).or_default() += n;
            }
        }
        for r in Resource::ALL {
            let pool = self.pools.get(r);
            let total: usize = by_addr.iter().filter(|((_, x), _)| *x == r).map(|(_, n)| n).sum();
            if pool.used() != total {
                return Err(format!("the {r:?} pool counts {}, clients hold {total}", pool.used()));
            }
            for ((addr, x), n) in &by_addr {
                if *x == r && pool.held_by(*addr) != *n {
                    return Err(format!(
                        "the {r:?} pool counts {} for {addr}, its clients hold {n}",
                        pool.held_by(*addr)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Sorted, disjoint, and adjacent ranges of one kind merged (as the OFD
/// description holds them).
fn ranges_well_formed(ranges: &[Held]) -> bool {
    ranges.windows(2).all(|w| {
        let (a, b) = (&w[0], &w[1]);
        a.range.last < b.range.start && (a.kind != b.kind || a.range.last + 1 < b.range.start)
    })
}

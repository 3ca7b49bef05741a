//! The duplicate reply cache, after knfsd's `nfscache.c`: a retransmitted
//! non-idempotent call (same client address, xid, program, version,
//! procedure and arguments) gets the original reply again instead of being
//! executed a second time, and a retransmission of a call still being
//! executed is dropped.

use std::collections::hash_map::{DefaultHasher, Entry};
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::Mutex;

use bytes::Bytes;

/// Bytes of arguments that go into the checksum, as knfsd's RC_CSUMLEN.
const ARGS_CHECKSUM_BYTES: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DrcKey {
    pub peer: SocketAddr,
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    /// Checksum of the arguments, so a reused xid with other arguments is
    /// not mistaken for a retransmission.
    pub args_checksum: u64,
}

impl DrcKey {
    pub fn args_checksum(args: &[u8]) -> u64 {
        let mut h = DefaultHasher::new();
        args.len().hash(&mut h);
        args[..args.len().min(ARGS_CHECKSUM_BYTES)].hash(&mut h);
        h.finish()
    }
}

/// What the cache knows of a call.
#[derive(Debug, PartialEq, Eq)]
pub enum CacheLookup {
    /// First time seen: execute it, then `complete` or `abandon`.
    New,
    /// Being executed right now: drop the retransmission.
    InProgress,
    /// Done before: send this reply again.
    Replay(Vec<Bytes>),
}

enum State {
    InProgress,
    Done(Vec<Bytes>),
}

struct Slot {
    /// Tells this insertion of a key from earlier ones still queued in `order`.
    generation: u64,
    state: State,
}

pub struct ReplyCache {
    entries_max: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    slots: HashMap<DrcKey, Slot>,
    /// Insertion order, oldest first, for eviction. An entry whose
    /// generation no longer matches its slot is stale and skipped.
    order: VecDeque<(DrcKey, u64)>,
    next_generation: u64,
}

impl ReplyCache {
    pub fn new(entries_max: usize) -> Self {
        assert!(entries_max > 0);
        ReplyCache { entries_max, inner: Mutex::new(Inner::default()) }
    }

    pub fn begin(&self, key: &DrcKey) -> CacheLookup {
        let mut inner = self.inner.lock().expect("reply cache lock");
        let generation = inner.next_generation;
        match inner.slots.entry(key.clone()) {
            Entry::Occupied(e) => match &e.get().state {
                State::InProgress => CacheLookup::InProgress,
                State::Done(reply) => CacheLookup::Replay(reply.clone()),
            },
            Entry::Vacant(e) => {
                e.insert(Slot { generation, state: State::InProgress });
                inner.next_generation += 1;
                inner.order.push_back((key.clone(), generation));
                let Inner { slots, order, .. } = &mut *inner;
                let live = |slots: &HashMap<DrcKey, Slot>, (k, g): &(DrcKey, u64)| {
                    slots.get(k).is_some_and(|s| s.generation == *g)
                };
                while slots.len() > self.entries_max {
                    let Some(oldest) = order.pop_front() else { break };
                    if live(slots, &oldest) {
                        slots.remove(&oldest.0);
                    }
                }
                // Abandoned calls leave stale entries behind; keep `order` bounded too.
                if order.len() > 2 * self.entries_max {
                    order.retain(|e| live(slots, e));
                }
                CacheLookup::New
            }
        }
    }

    pub fn complete(&self, key: &DrcKey, reply: Vec<Bytes>) {
        let mut inner = self.inner.lock().expect("reply cache lock");
        if let Some(slot) = inner.slots.get_mut(key) {
            slot.state = State::Done(reply);
        }
    }

    /// Forgets a call that was begun but produced no reply to cache.
    pub fn abandon(&self, key: &DrcKey) {
        let mut inner = self.inner.lock().expect("reply cache lock");
        if let Some(Slot { state: State::InProgress, .. }) = inner.slots.get(key) {
            inner.slots.remove(key);
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().expect("reply cache lock").slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(xid: u32) -> DrcKey {
        DrcKey {
            peer: "192.0.2.1:800".parse().unwrap(),
            xid,
            prog: 100003,
            vers: 3,
            proc_: 8,
            args_checksum: DrcKey::args_checksum(b"args"),
        }
    }

    #[test]
    fn replays_completed_and_drops_in_progress() {
        let c = ReplyCache::new(10);
        assert_eq!(c.begin(&key(1)), CacheLookup::New);
        assert_eq!(c.begin(&key(1)), CacheLookup::InProgress);
        c.complete(&key(1), vec![Bytes::from_static(b"reply")]);
        assert_eq!(c.begin(&key(1)), CacheLookup::Replay(vec![Bytes::from_static(b"reply")]));
    }

    #[test]
    fn other_arguments_or_clients_are_not_duplicates() {
        let c = ReplyCache::new(10);
        assert_eq!(c.begin(&key(1)), CacheLookup::New);
        let mut other = key(1);
        other.args_checksum = DrcKey::args_checksum(b"other args");
        assert_eq!(c.begin(&other), CacheLookup::New);
        let mut other = key(1);
        other.peer = "192.0.2.2:800".parse().unwrap();
        assert_eq!(c.begin(&other), CacheLookup::New);
    }

    #[test]
    fn oldest_entries_are_evicted_at_capacity() {
        let c = ReplyCache::new(3);
        for xid in 0..5 {
            assert_eq!(c.begin(&key(xid)), CacheLookup::New);
            c.complete(&key(xid), vec![]);
        }
        assert_eq!(c.len(), 3);
        assert_eq!(c.begin(&key(0)), CacheLookup::New, "evicted");
        assert_eq!(c.begin(&key(4)), CacheLookup::Replay(vec![]));
    }

    #[test]
    fn abandoned_calls_can_run_again() {
        let c = ReplyCache::new(3);
        for _ in 0..20 {
            assert_eq!(c.begin(&key(9)), CacheLookup::New);
            c.abandon(&key(9));
        }
        assert!(c.is_empty());
        assert!(c.inner.lock().unwrap().order.len() <= 6);
    }

    #[test]
    fn a_reinserted_key_is_not_evicted_by_its_stale_queue_entry() {
        let c = ReplyCache::new(2);
        assert_eq!(c.begin(&key(1)), CacheLookup::New);
        c.abandon(&key(1));
        assert_eq!(c.begin(&key(1)), CacheLookup::New);
        c.complete(&key(1), vec![]);
        assert_eq!(c.begin(&key(2)), CacheLookup::New);
        // The queue's front is key 1's abandoned first insertion; evicting
        // for key 3 must drop a live entry by age, and key 1's current
        // insertion is older than key 2's, so key 1 goes, key 2 stays.
        assert_eq!(c.begin(&key(3)), CacheLookup::New);
        assert_eq!(c.len(), 2);
        assert_eq!(c.begin(&key(2)), CacheLookup::InProgress);
    }
}

//! The duplicate reply cache, after knfsd's `nfscache.c`: a retransmitted
//! non-idempotent call (same client address, xid, program, version,
//! procedure and arguments) gets the original reply again instead of being
//! executed a second time, and a retransmission of a call still being
//! executed is dropped.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::Hasher;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use siphasher::sip::SipHasher24;

/// Bytes of arguments that go into the checksum, as knfsd's RC_CSUMLEN.
const ARGS_CHECKSUM_BYTES: usize = 256;
/// The checksum's SipHash-2-4 key: fixed, so that every build of Keel and
/// an HA peer compute the same checksum for the same arguments. It guards
/// against accidents (a reused xid), not an adversary: a client can only
/// confuse its own calls.
const ARGS_CHECKSUM_KEY: (u64, u64) = (0x6b65_656c_2d64_7263, 0x6172_6773_2d63_6b31);
/// What an entry costs besides its reply: the key, the slot, the order
/// queue's copy of the key and the reply's segment list.
const ENTRY_OVERHEAD_BYTES: usize = 256;

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
    /// Who the call is from ([`Credential::cache_identity`](crate::Credential::cache_identity)),
    /// so one principal's call is never answered with another's reply.
    pub caller: u64,
}

impl DrcKey {
    /// SipHash-2-4 under [`ARGS_CHECKSUM_KEY`] of the arguments' length (a
    /// little-endian u64) followed by their first [`ARGS_CHECKSUM_BYTES`]
    /// bytes. Fixed: a test pins its value.
    pub fn args_checksum(args: &[u8]) -> u64 {
        let mut h = SipHasher24::new_with_keys(ARGS_CHECKSUM_KEY.0, ARGS_CHECKSUM_KEY.1);
        h.write(&(args.len() as u64).to_le_bytes());
        h.write(&args[..args.len().min(ARGS_CHECKSUM_BYTES)]);
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
    /// What the entry counts against `bytes_max`.
    bytes: usize,
}

/// Where completed entries are kept beyond this process: an HA pair's
/// shared storage, so that the node that takes over answers a
/// retransmission of a call the failed node executed with the reply it
/// sent. `record` returns once the entry is durable: the reply goes out
/// after it. Failing to record is the journal's to report; the call's
/// reply still goes out (as it would from a server without one).
pub trait ReplyJournal: Send + Sync {
    fn record(&self, key: &DrcKey, reply: &[Bytes]);
}

/// Bounded by entries and by bytes. An entry whose call is still running
/// is never evicted (its retransmissions must be dropped, not executed a
/// second time), so the cache may hold up to one entry per call in
/// execution beyond `entries_max`: at most one per worker thread.
pub struct ReplyCache {
    entries_max: usize,
    bytes_max: usize,
    inner: Mutex<Inner>,
    journal: Option<Arc<dyn ReplyJournal>>,
}

#[derive(Default)]
struct Inner {
    slots: HashMap<DrcKey, Slot>,
    /// Insertion order, oldest first, for eviction. An entry whose
    /// generation no longer matches its slot is stale and skipped.
    order: VecDeque<(DrcKey, u64)>,
    next_generation: u64,
    /// Sum of the slots' `bytes`.
    bytes: usize,
    counts: ReplyCacheCounts,
}

/// What the cache has done since it was made (knfsd's `/proc/net/rpc/nfsd`
/// "rc" line: hits, misses, nocache), for statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplyCacheCounts {
    /// Retransmissions answered with the cached reply.
    pub hits: u64,
    /// Calls seen for the first time (then executed).
    pub misses: u64,
    /// Retransmissions of a call still running, dropped.
    pub in_progress: u64,
    /// Completed entries dropped to keep the bounds.
    pub evictions: u64,
    /// Entries and bytes held now.
    pub entries: u64,
    pub bytes: u64,
}

impl Inner {
    fn is_live(&self, (key, generation): &(DrcKey, u64)) -> bool {
        self.slots.get(key).is_some_and(|s| s.generation == *generation)
    }

    fn remove(&mut self, key: &DrcKey) {
        if let Some(slot) = self.slots.remove(key) {
            self.bytes -= slot.bytes;
        }
    }
}

fn reply_bytes(reply: &[Bytes]) -> usize {
    reply.iter().map(Bytes::len).sum()
}

impl ReplyCache {
    pub fn new(entries_max: usize, bytes_max: usize) -> Self {
        assert!(entries_max > 0);
        assert!(bytes_max >= ENTRY_OVERHEAD_BYTES);
        ReplyCache { entries_max, bytes_max, inner: Mutex::new(Inner::default()), journal: None }
    }

    /// Also records every completed entry in `journal`.
    pub fn with_journal(mut self, journal: Arc<dyn ReplyJournal>) -> Self {
        self.journal = Some(journal);
        self
    }

    /// Holds `reply` for `key` as if the call had completed here: entries
    /// read back from a journal at start, oldest first.
    pub fn preload(&self, key: DrcKey, reply: Vec<Bytes>) {
        let mut guard = self.inner.lock().expect("reply cache lock");
        let inner = &mut *guard;
        inner.remove(&key);
        let generation = inner.next_generation;
        inner.next_generation += 1;
        let bytes = ENTRY_OVERHEAD_BYTES + reply_bytes(&reply);
        inner.slots.insert(key.clone(), Slot { generation, state: State::Done(reply), bytes });
        inner.bytes += bytes;
        inner.order.push_back((key, generation));
        self.evict(inner);
    }

    pub fn begin(&self, key: &DrcKey) -> CacheLookup {
        let mut guard = self.inner.lock().expect("reply cache lock");
        let inner = &mut *guard;
        let generation = inner.next_generation;
        match inner.slots.entry(key.clone()) {
            Entry::Occupied(e) => match &e.get().state {
                State::InProgress => {
                    inner.counts.in_progress += 1;
                    CacheLookup::InProgress
                }
                State::Done(reply) => {
                    let reply = reply.clone();
                    inner.counts.hits += 1;
                    CacheLookup::Replay(reply)
                }
            },
            Entry::Vacant(e) => {
                inner.counts.misses += 1;
                e.insert(Slot { generation, state: State::InProgress, bytes: ENTRY_OVERHEAD_BYTES });
                inner.bytes += ENTRY_OVERHEAD_BYTES;
                inner.next_generation += 1;
                inner.order.push_back((key.clone(), generation));
                self.evict(inner);
                CacheLookup::New
            }
        }
    }

    pub fn complete(&self, key: &DrcKey, reply: Vec<Bytes>) {
        // Durable before a retransmission can be replayed from memory, and
        // before the caller sends the reply.
        if let Some(journal) = &self.journal {
            journal.record(key, &reply);
        }
        let mut inner = self.inner.lock().expect("reply cache lock");
        let bytes = ENTRY_OVERHEAD_BYTES + reply_bytes(&reply);
        let Some(slot) = inner.slots.get_mut(key) else { return };
        let before = slot.bytes;
        slot.state = State::Done(reply);
        slot.bytes = bytes;
        inner.bytes = inner.bytes - before + bytes;
        self.evict(&mut inner);
    }

    /// Drops the oldest completed entries until both bounds hold. Entries
    /// in progress are skipped (and keep their place); each queued entry is
    /// looked at once at most, so a cache full of calls in progress costs
    /// one pass, not a loop.
    fn evict(&self, inner: &mut Inner) {
        let mut kept = Vec::new();
        let mut looked = 0;
        let queued = inner.order.len();
        while (inner.slots.len() > self.entries_max || inner.bytes > self.bytes_max) && looked < queued {
            let Some(oldest) = inner.order.pop_front() else { break };
            looked += 1;
            if !inner.is_live(&oldest) {
                continue;
            }
            if matches!(inner.slots[&oldest.0].state, State::InProgress) {
                kept.push(oldest);
            } else {
                inner.remove(&oldest.0);
                inner.counts.evictions += 1;
            }
        }
        // Back at the front, oldest first, so they go first once done.
        for entry in kept.into_iter().rev() {
            inner.order.push_front(entry);
        }
        // Abandoned calls leave stale entries behind; keep `order` bounded too.
        if inner.order.len() > 2 * self.entries_max {
            let Inner { slots, order, .. } = inner;
            order.retain(|(k, g)| slots.get(k).is_some_and(|s| s.generation == *g));
        }
    }

    /// Forgets a call that was begun but produced no reply to cache.
    pub fn abandon(&self, key: &DrcKey) {
        let mut inner = self.inner.lock().expect("reply cache lock");
        if let Some(Slot { state: State::InProgress, .. }) = inner.slots.get(key) {
            inner.remove(key);
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().expect("reply cache lock").slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the entries count against the bound.
    pub fn bytes(&self) -> usize {
        self.inner.lock().expect("reply cache lock").bytes
    }

    /// Hits, misses, drops and evictions so far, and what is held now.
    pub fn counts(&self) -> ReplyCacheCounts {
        let inner = self.inner.lock().expect("reply cache lock");
        ReplyCacheCounts { entries: inner.slots.len() as u64, bytes: inner.bytes as u64, ..inner.counts }
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
            caller: 7,
        }
    }

    #[derive(Default)]
    struct Recorded(Mutex<Vec<(DrcKey, Vec<Bytes>)>>);

    impl ReplyJournal for Recorded {
        fn record(&self, key: &DrcKey, reply: &[Bytes]) {
            self.0.lock().unwrap().push((key.clone(), reply.to_vec()));
        }
    }

    #[test]
    fn a_journal_gets_every_completed_reply_and_a_preload_replays_it() {
        let journal = Arc::new(Recorded::default());
        let c = ReplyCache::new(10, 1 << 20).with_journal(journal.clone());
        assert_eq!(c.begin(&key(1)), CacheLookup::New);
        assert_eq!(c.begin(&key(2)), CacheLookup::New);
        c.abandon(&key(2));
        c.complete(&key(1), vec![Bytes::from_static(b"reply")]);
        let recorded = journal.0.lock().unwrap().clone();
        assert_eq!(recorded, [(key(1), vec![Bytes::from_static(b"reply")])], "abandoned calls are not recorded");

        // What the next node (or the next start) loads answers the retransmission.
        let next = ReplyCache::new(2, 1 << 20);
        for (k, r) in recorded {
            next.preload(k, r);
        }
        assert_eq!(next.begin(&key(1)), CacheLookup::Replay(vec![Bytes::from_static(b"reply")]));
        for xid in 10..20 {
            next.preload(key(xid), vec![Bytes::from_static(b"r")]);
        }
        assert_eq!(next.len(), 2, "preloading keeps the bounds, dropping the oldest");
        assert_eq!(next.begin(&key(19)), CacheLookup::Replay(vec![Bytes::from_static(b"r")]));
    }

    #[test]
    fn replays_completed_and_drops_in_progress() {
        let c = ReplyCache::new(10, 1 << 20);
        assert_eq!(c.begin(&key(1)), CacheLookup::New);
        assert_eq!(c.begin(&key(1)), CacheLookup::InProgress);
        c.complete(&key(1), vec![Bytes::from_static(b"reply")]);
        assert_eq!(c.begin(&key(1)), CacheLookup::Replay(vec![Bytes::from_static(b"reply")]));
        let counts = c.counts();
        assert_eq!((counts.misses, counts.in_progress, counts.hits, counts.entries), (1, 1, 1, 1));
    }

    #[test]
    fn other_arguments_or_clients_are_not_duplicates() {
        let c = ReplyCache::new(10, 1 << 20);
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
        let c = ReplyCache::new(3, 1 << 20);
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
        let c = ReplyCache::new(3, 1 << 20);
        for _ in 0..20 {
            assert_eq!(c.begin(&key(9)), CacheLookup::New);
            c.abandon(&key(9));
        }
        assert!(c.is_empty());
        assert!(c.inner.lock().unwrap().order.len() <= 6);
    }

    #[test]
    fn a_reinserted_key_is_not_evicted_by_its_stale_queue_entry() {
        let c = ReplyCache::new(2, 1 << 20);
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

    #[test]
    fn the_checksum_is_a_fixed_function_of_the_arguments() {
        // Pinned: a new build or an HA peer must compute the same keys. If
        // this changes, retransmissions across an upgrade are executed again.
        assert_eq!(DrcKey::args_checksum(b""), 0x56e5_4fdf_2220_357e, "{:#x}", DrcKey::args_checksum(b""));
        let args: Vec<u8> = (0..300u16).map(|i| i as u8).collect();
        assert_eq!(DrcKey::args_checksum(&args), 0x8a8d_bbd7_40eb_229d, "{:#x}", DrcKey::args_checksum(&args));
        // Only the first 256 bytes and the length count.
        let mut tail = args.clone();
        tail[299] ^= 1;
        assert_eq!(DrcKey::args_checksum(&tail), DrcKey::args_checksum(&args));
        assert_ne!(DrcKey::args_checksum(&args[..299]), DrcKey::args_checksum(&args));
    }

    #[test]
    fn entries_in_progress_are_never_evicted() {
        let c = ReplyCache::new(3, 1 << 20);
        assert_eq!(c.begin(&key(0)), CacheLookup::New); // still running
        for xid in 1..10 {
            assert_eq!(c.begin(&key(xid)), CacheLookup::New);
            c.complete(&key(xid), vec![]);
        }
        assert_eq!(c.begin(&key(0)), CacheLookup::InProgress, "the running call was evicted");
        assert_eq!(c.len(), 3);
        c.complete(&key(0), vec![Bytes::from_static(b"late")]);
        assert_eq!(c.begin(&key(0)), CacheLookup::Replay(vec![Bytes::from_static(b"late")]));
        // Once done it is the oldest, and goes first.
        assert_eq!(c.begin(&key(100)), CacheLookup::New);
        assert_eq!(c.begin(&key(0)), CacheLookup::New, "completed and oldest: evicted");
    }

    #[test]
    fn a_cache_full_of_calls_in_progress_grows_past_its_bound_instead_of_evicting_them() {
        let c = ReplyCache::new(2, 1 << 20);
        for xid in 0..5 {
            assert_eq!(c.begin(&key(xid)), CacheLookup::New);
        }
        assert_eq!(c.len(), 5);
        for xid in 0..5 {
            assert_eq!(c.begin(&key(xid)), CacheLookup::InProgress);
        }
    }

    #[test]
    fn the_cache_is_bounded_by_bytes() {
        let reply = vec![Bytes::from(vec![0u8; 1000])];
        let per_entry = ENTRY_OVERHEAD_BYTES + 1000;
        let c = ReplyCache::new(1000, 4 * per_entry);
        for xid in 0..10 {
            assert_eq!(c.begin(&key(xid)), CacheLookup::New);
            c.complete(&key(xid), reply.clone());
        }
        assert_eq!(c.len(), 4);
        assert_eq!(c.bytes(), 4 * per_entry);
        assert_eq!(c.begin(&key(9)), CacheLookup::Replay(reply.clone()));
        assert_eq!(c.begin(&key(5)), CacheLookup::New, "oldest evicted by bytes");
    }
}

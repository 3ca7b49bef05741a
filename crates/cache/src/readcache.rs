//! The read cache: clean copies of hot file blocks in the space of the
//! cache devices after the log's ring, so random reads of a working set
//! larger than RAM come from flash.
//!
//! - **Slots** of [`SLOT_BYTES_DEFAULT`] (4 KiB; `read_slot_bytes` sets a
//!   larger power of two) hold one block of one file, keyed by (file
//!   handle, block number): the handle, not a name, so a rename moves
//!   nothing and a removed file's blocks are never found again. Each
//!   device's region `[base, size)` is cut into slots; free slots are
//!   handed out in address order, alternating between devices, from a
//!   cursor that sweeps them ([`FreeSlots`]), so blocks admitted together
//!   lie together on each device whatever earlier files freed. Clean data:
//!   no mirroring, no persistence.
//!   **The index is in memory only: the cache is cold after a restart.**
//! - **Admission**: at the first miss while the cache has free slots
//!   (nothing is evicted for it); once full, at the second miss of a block:
//!   a direct-mapped table of fingerprints of recently missed blocks (the
//!   ghost filter) remembers a first miss; a block is copied to a slot when
//!   it misses again while its fingerprint is still there. One-off reads (a
//!   scan, a backup) do not push the working set out.
//! - **Eviction** by CLOCK: a hit sets the slot's reference bit; the hand
//!   clears set bits and takes the first slot whose bit is clear.
//! - **Checksums**: a CRC32 of each slot's contents is kept in memory and
//!   checked on every hit. A mismatch or a read error drops the slot and
//!   the read is served by the back end; [`DEVICE_ERRORS_MAX`] errors on a
//!   device take it out of the read cache (an event says so).
//!
//! **Invariant:** a valid slot holds what the back end holds for its block
//! (zeros past the back end's end of file). Whoever changes a file's data
//! on the back end (a write, a truncation, a destage, a removal) calls
//! [`ReadCache::invalidate`] *after* the change: that bumps the file's
//! generation and drops its slots in the range, under the index lock. A
//! reader samples the generation *before* it reads the back end and its
//! copy is published only if the generation is unchanged, under the same
//! lock, so data read before a change never lands in a slot after it.
//! Generations are striped by a hash of the handle: a collision only makes
//! an admission fail.
//!
//! Device I/O is never done under the index lock: a hit notes the slots and
//! their versions, reads them, then checks the versions again (a slot
//! reused meanwhile makes the hit a miss); an admission claims a slot
//! (`Filling`), writes it, then publishes it.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use crate::device::DeviceIo;
use crate::events::{Event, Events};
use crate::stats::ReadCacheCounters;

/// 4 KiB: the unit of the random reads the cache is for. A larger slot
/// holds neighbours a random reader may never ask for (less of the working
/// set fits) and costs a larger back-end read at admission; a smaller one
/// is below the page size clients read in. The price is memory: about 80
/// bytes per slot, 20 MiB of RAM per GiB of read cache.
pub const SLOT_BYTES_DEFAULT: u64 = 4096;
pub const SLOT_BYTES_MIN: u64 = 4096;
pub const SLOT_BYTES_MAX: u64 = 1 << 20;
/// 64 KiB, Open CAS's largest cache line: a miss costs one disk I/O
/// either way, and 16 blocks come in for it.
pub const FILL_BYTES_DEFAULT: u64 = 64 << 10;
pub const FILL_BYTES_MAX: u64 = 1 << 20;
/// Errors (read errors, checksum mismatches, write errors) after which a
/// device is no longer used by the read cache.
pub const DEVICE_ERRORS_MAX: u32 = 3;
const GEN_STRIPES: usize = 4096;
const GHOST_MIN: usize = 1024;
const GHOST_MAX: usize = 1 << 22;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    /// Claimed by an admission whose write is in flight.
    Filling,
    Valid,
    /// On a device taken out of the read cache.
    Retired,
}

#[derive(Debug)]
struct Slot {
    handle: Bytes,
    block: u64,
    crc: u32,
    /// Moves on whenever the slot changes hands.
    version: u32,
    state: State,
    referenced: bool,
}

struct Dev {
    name: String,
    io: Arc<dyn DeviceIo>,
    base: u64,
    first: u32,
    count: u32,
    errors: AtomicU32,
    dropped: AtomicBool,
    used: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

struct Inner {
    slots: Vec<Slot>,
    free: FreeSlots,
    hand: usize,
    files: HashMap<Bytes, BTreeMap<u64, u32>>,
    used: u64,
}

/// A device's share of the read cache, for `keel cache list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceUsage {
    pub name: String,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    /// Taken out of the read cache after errors.
    pub dropped: bool,
    /// The read cache's own I/O on the device, and its errors there.
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub errors: u64,
}

/// A slot found by a lookup.
#[derive(Debug, Clone, Copy)]
pub struct Hit {
    slot: u32,
    version: u32,
    crc: u32,
}

/// Why a hit could not be served from the devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitFailed {
    /// A slot changed hands during the read (not an error).
    Moved,
    /// A read error or a checksum mismatch (the slot was dropped).
    Bad,
}

pub struct ReadCache {
    slot_bytes: u64,
    devs: Vec<Dev>,
    gens: Box<[AtomicU64]>,
    ghost: Box<[AtomicU64]>,
    inner: Mutex<Inner>,
    counters: Arc<ReadCacheCounters>,
    events: Arc<Events>,
}

/// A device region for the read cache: `[base, io.size())`.
pub struct Region {
    pub name: String,
    pub io: Arc<dyn DeviceIo>,
    pub base: u64,
}

impl ReadCache {
    pub fn new(regions: Vec<Region>, slot_bytes: u64, counters: Arc<ReadCacheCounters>, events: Arc<Events>) -> Self {
        assert!(slot_bytes.is_power_of_two() && (SLOT_BYTES_MIN..=SLOT_BYTES_MAX).contains(&slot_bytes));
        let mut devs = Vec::new();
        let mut total: u64 = 0;
        for r in regions {
            let base = r.base.next_multiple_of(slot_bytes);
            let count = (r.io.size().saturating_sub(base) / slot_bytes).min(u64::from(u32::MAX) - total) as u32;
            devs.push(Dev {
                name: r.name,
                io: r.io,
                base,
                first: total as u32,
                count,
                errors: AtomicU32::new(0),
                dropped: AtomicBool::new(false),
                used: AtomicU64::new(0),
                bytes_read: AtomicU64::new(0),
                bytes_written: AtomicU64::new(0),
            });
            total += u64::from(count);
        }
        let slots = (0..total)
            .map(|_| Slot { handle: Bytes::new(), block: 0, crc: 0, version: 0, state: State::Free, referenced: false })
            .collect();
        // The sweep's order: the first slot of each device in turn, then
        // the second, ...
        let longest = devs.iter().map(|d| d.count).max().unwrap_or(0);
        let mut order = Vec::with_capacity(total as usize);
        for k in 0..longest {
            for d in &devs {
                if k < d.count {
                    order.push(d.first + k);
                }
            }
        }
        let free = FreeSlots::new(order);
        let ghost_len = (total as usize).clamp(GHOST_MIN, GHOST_MAX).next_power_of_two();
        counters.slots_total.store(total, Ordering::Relaxed);
        counters.slots_used.store(0, Ordering::Relaxed);
        ReadCache {
            slot_bytes,
            devs,
            gens: (0..GEN_STRIPES).map(|_| AtomicU64::new(0)).collect(),
            ghost: (0..ghost_len).map(|_| AtomicU64::new(0)).collect(),
            inner: Mutex::new(Inner { slots, free, hand: 0, files: HashMap::new(), used: 0 }),
            counters,
            events,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn slot_bytes(&self) -> u64 {
        self.slot_bytes
    }

    pub fn slots_total(&self) -> u64 {
        self.devs.iter().map(|d| u64::from(d.count)).sum()
    }

    pub fn slots_used(&self) -> u64 {
        self.lock().used
    }

    /// Whether any device holds slots the cache may use.
    pub fn usable(&self) -> bool {
        self.devs.iter().any(|d| d.count > 0 && !d.dropped.load(Ordering::Acquire))
    }

    pub fn usage(&self) -> Vec<DeviceUsage> {
        self.devs
            .iter()
            .map(|d| DeviceUsage {
                name: d.name.clone(),
                used_bytes: d.used.load(Ordering::Relaxed) * self.slot_bytes,
                capacity_bytes: u64::from(d.count) * self.slot_bytes,
                dropped: d.dropped.load(Ordering::Acquire),
                bytes_read: d.bytes_read.load(Ordering::Relaxed),
                bytes_written: d.bytes_written.load(Ordering::Relaxed),
                errors: u64::from(d.errors.load(Ordering::Relaxed)),
            })
            .collect()
    }

    fn dev_of(&self, slot: u32) -> usize {
        self.devs.iter().position(|d| slot >= d.first && slot < d.first + d.count).expect("a slot of a device")
    }

    fn pos(&self, dev: usize, slot: u32) -> u64 {
        let d = &self.devs[dev];
        d.base + u64::from(slot - d.first) * self.slot_bytes
    }

    fn stripe(handle: &Bytes) -> usize {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        handle.hash(&mut h);
        h.finish() as usize % GEN_STRIPES
    }

    /// The file's generation: sample it before reading the back end, pass
    /// it to [`ReadCache::insert`].
    pub fn generation(&self, handle: &Bytes) -> u64 {
        self.gens[Self::stripe(handle)].load(Ordering::Acquire)
    }

    /// Whether a block that missed is copied in: at once while the cache
    /// has free slots (nothing is evicted for it), else at its second miss
    /// within the filter's memory, so a scan does not flush the hot set.
    pub fn admits(&self, handle: &Bytes, block: u64) -> bool {
        self.has_free_slots() || self.second_miss(handle, block)
    }

    /// Whether a slot is free (an admission evicts nothing).
    pub fn has_free_slots(&self) -> bool {
        self.slots_used() < self.slots_total()
    }

    /// True on the second miss of a block within the filter's memory.
    pub fn second_miss(&self, handle: &Bytes, block: u64) -> bool {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        handle.hash(&mut h);
        block.hash(&mut h);
        let f = h.finish() | 1;
        let cell = &self.ghost[(f >> 1) as usize & (self.ghost.len() - 1)];
        if cell.load(Ordering::Relaxed) == f {
            cell.store(0, Ordering::Relaxed);
            true
        } else {
            cell.store(f, Ordering::Relaxed);
            false
        }
    }

    /// The valid slots of `first..=last` from `first` on, stopping at the
    /// first block not cached (empty: `first` is not). Sets their
    /// reference bits.
    pub fn lookup(&self, handle: &Bytes, first: u64, last: u64) -> Vec<Hit> {
        let mut inner = self.lock();
        let Some(blocks) = inner.files.get(handle) else { return Vec::new() };
        let mut found = Vec::new();
        for b in first..=last {
            match blocks.get(&b) {
                Some(&s) => found.push(s),
                None => break,
            }
        }
        let mut hits = Vec::with_capacity(found.len());
        for s in found {
            let slot = &mut inner.slots[s as usize];
            if slot.state != State::Valid {
                break;
            }
            slot.referenced = true;
            hits.push(Hit { slot: s, version: slot.version, crc: slot.crc });
        }
        hits
    }

    /// Reads the slots of `hits` into consecutive `slot_bytes` pieces of
    /// `out`, checks each against its checksum, and checks that none
    /// changed hands meanwhile.
    pub fn read_hits(&self, hits: &[Hit], out: &mut [u8]) -> Result<(), HitFailed> {
        let n = self.slot_bytes as usize;
        let mut bad: Option<(u32, u32, bool)> = None;
        for (i, h) in hits.iter().enumerate() {
            let dev = self.dev_of(h.slot);
            let buf = &mut out[i * n..(i + 1) * n];
            let read = self.devs[dev].io.read_at(buf, self.pos(dev, h.slot));
            if read.is_ok() {
                self.devs[dev].bytes_read.fetch_add(n as u64, Ordering::Relaxed);
            }
            match read {
                Ok(()) if crc32fast::hash(buf) == h.crc => {}
                Ok(()) => {
                    bad = Some((h.slot, h.version, true));
                    break;
                }
                Err(e) => {
                    tracing::warn!(device = %self.devs[dev].name, "read cache: device read failed: {e}");
                    bad = Some((h.slot, h.version, false));
                    break;
                }
            }
        }
        let mut inner = self.lock();
        let moved = |inner: &Inner, h: &Hit| {
            let s = &inner.slots[h.slot as usize];
            s.version != h.version || s.state != State::Valid
        };
        if let Some((slot, version, checksum)) = bad {
            // A slot reused while it was read is not the device's fault.
            if moved(&inner, &Hit { slot, version, crc: 0 }) {
                return Err(HitFailed::Moved);
            }
            self.free_slot(&mut inner, slot);
            drop(inner);
            let dev = self.dev_of(slot);
            let what = if checksum {
                self.counters.checksum_errors.fetch_add(1, Ordering::Relaxed);
                "checksum mismatch"
            } else {
                self.counters.read_errors.fetch_add(1, Ordering::Relaxed);
                "read error"
            };
            self.device_error(dev, what);
            return Err(HitFailed::Bad);
        }
        if hits.iter().any(|h| moved(&inner, h)) {
            return Err(HitFailed::Moved);
        }
        Ok(())
    }

    fn device_error(&self, dev: usize, what: &str) {
        let d = &self.devs[dev];
        let n = d.errors.fetch_add(1, Ordering::AcqRel) + 1;
        if n >= DEVICE_ERRORS_MAX && !d.dropped.swap(true, Ordering::AcqRel) {
            let mut inner = self.lock();
            for s in d.first..d.first + d.count {
                match inner.slots[s as usize].state {
                    // Retired by free_slot, the device being out.
                    State::Valid | State::Filling => self.free_slot(&mut inner, s),
                    State::Free => {
                        let slot = &mut inner.slots[s as usize];
                        slot.version = slot.version.wrapping_add(1);
                        slot.state = State::Retired;
                    }
                    State::Retired => {}
                }
            }
            drop(inner);
            self.events.push(Event::ReadCacheDeviceDropped {
                device: d.name.clone(),
                reason: format!("{n} errors, the last a {what}"),
            });
        }
    }

    /// Frees a valid or filling slot: out of its file's map, back to the
    /// free list (unless its device is out).
    fn free_slot(&self, inner: &mut Inner, s: u32) {
        let slot = &mut inner.slots[s as usize];
        let was_valid = slot.state == State::Valid;
        let handle = std::mem::take(&mut slot.handle);
        let block = slot.block;
        slot.version = slot.version.wrapping_add(1);
        slot.state = State::Free;
        slot.referenced = false;
        if let Some(blocks) = inner.files.get_mut(&handle) {
            if blocks.get(&block) == Some(&s) {
                blocks.remove(&block);
            }
            if blocks.is_empty() {
                inner.files.remove(&handle);
            }
        }
        if was_valid {
            inner.used -= 1;
            self.counters.slots_used.fetch_sub(1, Ordering::Relaxed);
            self.devs[self.dev_of(s)].used.fetch_sub(1, Ordering::Relaxed);
        }
        if self.devs[self.dev_of(s)].dropped.load(Ordering::Acquire) {
            inner.slots[s as usize].state = State::Retired;
        } else {
            inner.free.put(s);
        }
    }

    /// A slot to fill: a free one, else CLOCK's victim.
    fn alloc(&self, inner: &mut Inner) -> Option<u32> {
        while let Some(s) = inner.free.take() {
            // A slot of a device taken out is retired, not free.
            if inner.slots[s as usize].state == State::Free {
                return Some(s);
            }
        }
        let n = inner.slots.len();
        for _ in 0..2 * n {
            let i = inner.hand;
            inner.hand = (i + 1) % n;
            let slot = &mut inner.slots[i];
            if slot.state != State::Valid {
                continue;
            }
            if slot.referenced {
                slot.referenced = false;
                continue;
            }
            self.free_slot(inner, i as u32);
            self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            // free_slot put it back among the free (unless its device was
            // just taken out).
            if inner.slots[i].state == State::Free {
                inner.free.remove(i as u32);
                return Some(i as u32);
            }
        }
        None
    }

    /// Copies one block (`slot_bytes`, zeros past the end of file) read
    /// from the back end at generation `gen0` into a slot. Returns whether
    /// it was published; it is not when the file changed since `gen0`, the
    /// block is already cached, or the device failed.
    pub fn insert(&self, handle: &Bytes, block: u64, data: &[u8], gen0: u64) -> bool {
        debug_assert_eq!(data.len() as u64, self.slot_bytes);
        let stripe = Self::stripe(handle);
        let (s, version) = {
            let mut inner = self.lock();
            if self.gens[stripe].load(Ordering::Acquire) != gen0
                || inner.files.get(handle).is_some_and(|b| b.contains_key(&block))
            {
                return false;
            }
            let Some(s) = self.alloc(&mut inner) else { return false };
            let slot = &mut inner.slots[s as usize];
            slot.handle = handle.clone();
            slot.block = block;
            slot.version = slot.version.wrapping_add(1);
            slot.state = State::Filling;
            slot.referenced = false;
            let version = slot.version;
            inner.files.entry(handle.clone()).or_default().insert(block, s);
            (s, version)
        };
        let dev = self.dev_of(s);
        let crc = crc32fast::hash(data);
        let written = self.devs[dev].io.write_at(data, self.pos(dev, s));
        if written.is_ok() {
            self.devs[dev].bytes_written.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        let mut inner = self.lock();
        let slot = &inner.slots[s as usize];
        if slot.version != version || slot.state != State::Filling {
            // Invalidated (and freed) while it was written.
            return false;
        }
        if written.is_err() || self.gens[stripe].load(Ordering::Acquire) != gen0 {
            self.free_slot(&mut inner, s);
            drop(inner);
            if let Err(e) = written {
                tracing::warn!(device = %self.devs[dev].name, "read cache: device write failed: {e}");
                self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                self.device_error(dev, "write error");
            }
            return false;
        }
        let slot = &mut inner.slots[s as usize];
        slot.state = State::Valid;
        slot.crc = crc;
        inner.used += 1;
        drop(inner);
        self.counters.slots_used.fetch_add(1, Ordering::Relaxed);
        self.devs[dev].used.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The file's data in `[from, to)` changed on the back end (or may
    /// have): its generation moves on and its slots there go. Call it
    /// after the change.
    pub fn invalidate(&self, handle: &Bytes, from: u64, to: u64) {
        self.invalidate_blocks(handle, from, to);
    }

    /// As [`ReadCache::invalidate`]; returns the generation after it and
    /// the blocks that were cached.
    pub fn invalidate_blocks(&self, handle: &Bytes, from: u64, to: u64) -> (u64, Vec<u64>) {
        let mut inner = self.lock();
        let generation = self.gens[Self::stripe(handle)].fetch_add(1, Ordering::AcqRel) + 1;
        if to <= from {
            return (generation, Vec::new());
        }
        let Some(blocks) = inner.files.get(handle) else { return (generation, Vec::new()) };
        let (first, last) = (from / self.slot_bytes, (to - 1) / self.slot_bytes);
        let gone: Vec<(u64, u32)> = blocks.range(first..=last).map(|(b, s)| (*b, *s)).collect();
        let mut cached = Vec::with_capacity(gone.len());
        for (b, s) in gone {
            if inner.slots[s as usize].state == State::Valid {
                cached.push(b);
            }
            self.free_slot(&mut inner, s);
        }
        (generation, cached)
    }

    /// The whole file changed or went.
    pub fn invalidate_file(&self, handle: &Bytes) {
        self.invalidate(handle, 0, u64::MAX);
    }

    /// Cached blocks of a file (tests, diagnostics).
    pub fn cached_blocks(&self, handle: &Bytes) -> Vec<u64> {
        let inner = self.lock();
        inner.files.get(handle).map_or_else(Vec::new, |b| {
            b.iter().filter(|(_, s)| inner.slots[**s as usize].state == State::Valid).map(|(b, _)| *b).collect()
        })
    }

    /// Where a cached block is: (device name, byte offset on it).
    pub fn location(&self, handle: &Bytes, block: u64) -> Option<(String, u64)> {
        let inner = self.lock();
        let s = *inner.files.get(handle)?.get(&block)?;
        let dev = self.dev_of(s);
        Some((self.devs[dev].name.clone(), self.pos(dev, s)))
    }
}

/// The free slots: a bitmap in the sweep's order (device by device in
/// turn, address by address) and a cursor. A slot is taken at or after the
/// cursor, wrapping, so admissions fill the devices in address order and a
/// region freed by an earlier file is refilled front to back, not in the
/// order its slots were freed (last-freed-first scattered one fill
/// window's blocks over every region earlier files had used).
struct FreeSlots {
    /// Bit r set: the slot of rank r is free.
    words: Vec<u64>,
    slot_of: Vec<u32>,
    rank_of: Vec<u32>,
    cursor: usize,
    count: usize,
}

impl FreeSlots {
    /// Every slot free; `order` lists the slots in the sweep's order.
    fn new(order: Vec<u32>) -> Self {
        let n = order.len();
        let mut rank_of = vec![0; n];
        for (r, &s) in order.iter().enumerate() {
            rank_of[s as usize] = r as u32;
        }
        let mut words = vec![u64::MAX; n.div_ceil(64)];
        if !n.is_multiple_of(64) {
            *words.last_mut().expect("n > 0") = (1u64 << (n % 64)) - 1;
        }
        FreeSlots { words, slot_of: order, rank_of, cursor: 0, count: n }
    }

    fn put(&mut self, slot: u32) {
        let r = self.rank_of[slot as usize] as usize;
        let bit = 1u64 << (r % 64);
        if self.words[r / 64] & bit == 0 {
            self.words[r / 64] |= bit;
            self.count += 1;
        }
    }

    fn remove(&mut self, slot: u32) {
        let r = self.rank_of[slot as usize] as usize;
        let bit = 1u64 << (r % 64);
        if self.words[r / 64] & bit != 0 {
            self.words[r / 64] &= !bit;
            self.count -= 1;
        }
    }

    /// The first free slot at or after the cursor, wrapping.
    fn take(&mut self) -> Option<u32> {
        if self.count == 0 {
            return None;
        }
        let r = self.first_set(self.cursor, self.slot_of.len()).or_else(|| self.first_set(0, self.cursor))?;
        self.words[r / 64] &= !(1u64 << (r % 64));
        self.count -= 1;
        self.cursor = r + 1;
        Some(self.slot_of[r])
    }

    /// The first set bit in ranks `[from, to)`.
    fn first_set(&self, from: usize, to: usize) -> Option<usize> {
        let mut w = from / 64;
        let mut bits = self.words.get(w)? & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                let r = w * 64 + bits.trailing_zeros() as usize;
                return (r < to).then_some(r);
            }
            w += 1;
            if w * 64 >= to {
                return None;
            }
            bits = self.words[w];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::SimDevice;

    fn cache(slots_per_dev: u64, devs: usize) -> (ReadCache, Vec<Arc<SimDevice>>) {
        let sims: Vec<Arc<SimDevice>> =
            (0..devs).map(|i| Arc::new(SimDevice::new(4096 + slots_per_dev * 4096, i as u64))).collect();
        let regions = sims
            .iter()
            .enumerate()
            .map(|(i, d)| Region { name: format!("d{i}"), io: d.clone() as Arc<dyn DeviceIo>, base: 4096 })
            .collect();
        (ReadCache::new(regions, 4096, Arc::default(), Arc::default()), sims)
    }

    fn block(v: u8) -> Vec<u8> {
        vec![v; 4096]
    }

    #[test]
    fn slots_alternate_between_devices_and_clock_evicts_unreferenced_ones() {
        let (rc, _) = cache(2, 2);
        assert_eq!(rc.slots_total(), 4);
        let h = Bytes::from_static(b"f");
        for b in 0..4 {
            assert!(rc.insert(&h, b, &block(b as u8), rc.generation(&h)));
        }
        let devs: Vec<String> = (0..4).map(|b| rc.location(&h, b).unwrap().0).collect();
        assert_eq!(devs, ["d0", "d1", "d0", "d1"]);
        // Block 1 is hit: the hand passes it and takes block 0.
        rc.lock().slots.iter_mut().for_each(|s| s.referenced = false);
        assert_eq!(rc.lookup(&h, 1, 1).len(), 1);
        assert!(rc.insert(&h, 9, &block(9), rc.generation(&h)));
        assert_eq!(rc.cached_blocks(&h), vec![1, 2, 3, 9]);
        assert_eq!(rc.counters.evictions.load(Ordering::Relaxed), 1);
        let mut out = vec![0u8; 4096];
        rc.read_hits(&rc.lookup(&h, 9, 9), &mut out).unwrap();
        assert_eq!(out, block(9));
    }

    #[test]
    fn slots_freed_in_any_order_are_refilled_in_address_order() {
        let (rc, _) = cache(8, 2);
        let a = Bytes::from_static(b"a");
        // Admitted in a random order, as random reads admit: slot k holds
        // block perm[k], and a removal frees the slots in block order.
        let perm = [5u64, 12, 1, 9, 14, 0, 7, 3, 11, 15, 2, 8, 6, 13, 4, 10];
        for &b in &perm {
            assert!(rc.insert(&a, b, &block(b as u8), rc.generation(&a)));
        }
        rc.invalidate_file(&a);
        let b = Bytes::from_static(b"b");
        for k in 0..16 {
            assert!(rc.insert(&b, k, &block(k as u8), rc.generation(&b)));
        }
        let at: Vec<(String, u64)> = (0..16).map(|k| rc.location(&b, k).unwrap()).collect();
        let expect: Vec<(String, u64)> = (0..16).map(|k| (format!("d{}", k % 2), 4096 + (k / 2) * 4096)).collect();
        assert_eq!(at, expect, "one file's blocks side by side on each device");
        // A slot freed behind the cursor is found after a wrap.
        rc.invalidate(&b, 6 * 4096, 7 * 4096);
        let c = Bytes::from_static(b"c");
        assert!(rc.insert(&c, 0, &block(1), rc.generation(&c)));
        assert_eq!(rc.location(&c, 0), Some(("d0".into(), 4096 + 3 * 4096)));
    }

    #[test]
    fn an_insert_after_a_change_of_the_file_is_refused() {
        let (rc, _) = cache(4, 1);
        let h = Bytes::from_static(b"f");
        let g = rc.generation(&h);
        rc.invalidate(&h, 0, 10);
        assert!(!rc.insert(&h, 0, &block(1), g), "read before the change, published after it");
        assert!(rc.insert(&h, 0, &block(1), rc.generation(&h)));
        rc.invalidate(&h, 4096, 4097);
        assert_eq!(rc.cached_blocks(&h), vec![0], "outside the range: kept");
        rc.invalidate_file(&h);
        assert!(rc.cached_blocks(&h).is_empty());
        assert_eq!(rc.slots_used(), 0);
    }

    #[test]
    fn misses_are_admitted_at_once_until_the_cache_is_full_then_at_the_second() {
        let (rc, _) = cache(4, 1);
        let h = Bytes::from_static(b"f");
        for b in 0..4 {
            assert!(rc.admits(&h, b), "free slots: the first miss admits");
            assert!(rc.insert(&h, b, &block(b as u8), rc.generation(&h)));
        }
        assert!(!rc.admits(&h, 7), "full: the first miss only marks the block");
        assert!(rc.admits(&h, 7));
    }

    #[test]
    fn the_ghost_filter_admits_on_the_second_miss() {
        let (rc, _) = cache(4, 1);
        let h = Bytes::from_static(b"f");
        assert!(!rc.second_miss(&h, 7));
        assert!(rc.second_miss(&h, 7));
        assert!(!rc.second_miss(&h, 7), "admitted: forgotten by the filter");
    }

    #[test]
    fn bad_slots_are_dropped_and_a_failing_device_is_taken_out() {
        let (rc, sims) = cache(4, 1);
        let h = Bytes::from_static(b"f");
        for b in 0..4 {
            rc.insert(&h, b, &block(1), rc.generation(&h));
        }
        let (_, pos) = rc.location(&h, 2).unwrap();
        sims[0].corrupt(pos + 100);
        let mut out = vec![0u8; 4096];
        assert_eq!(rc.read_hits(&rc.lookup(&h, 2, 2), &mut out), Err(HitFailed::Bad));
        assert_eq!(rc.cached_blocks(&h), vec![0, 1, 3]);
        sims[0].fail_next_reads(5);
        for b in [0, 1] {
            assert_eq!(rc.read_hits(&rc.lookup(&h, b, b), &mut out), Err(HitFailed::Bad));
        }
        assert!(!rc.usable(), "three errors: the device is out");
        assert!(rc.cached_blocks(&h).is_empty());
        assert!(!rc.insert(&h, 0, &block(1), rc.generation(&h)), "no slot of a dropped device is used");
        assert!(rc.events.list().iter().any(|(_, e)| matches!(e, Event::ReadCacheDeviceDropped { .. })));
    }
}

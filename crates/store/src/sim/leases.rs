//! Read leases of the simulated store (see [`crate::lease`]), as Linux
//! keeps them: one can be had while no writer has the file open; an open
//! for writing (a simulated local process's, [`SimStore::open_for_write_locally`])
//! or a write, truncation, allocation or lock description through the
//! store breaks every
//! lease on the file, and the store's own verb then fails with EAGAIN (as
//! the local store's non-blocking open does) until they are dropped. Not
//! modelled: the store's own descriptors held open for writing (the local
//! store refuses a lease while it holds one). The store's own change of a
//! file's attributes (SETATTR, LINK) breaks every lease on it but those
//! whose holder's change it is ([`ReadLease::holder_change_begins`]), as
//! the local store's watch of a leased file does; a simulated local
//! process's ([`SimStore::change_attributes_locally`]) breaks them all.
//!
//!
//! Write leases: one can be had while nobody has the file open (no local
//! process, no other lease); a simulated local process's open, for
//! reading too ([`SimStore::open_for_read_locally`]), a read lease's or a
//! lock description breaks it. The store's own reads and writes do not:
//! the local store does them through the leased description.
//!
//! [`SimStore::open_for_write_locally`]: super::SimStore::open_for_write_locally
//! [`SimStore::open_for_read_locally`]: super::SimStore::open_for_read_locally
//! [`SimStore::change_attributes_locally`]: super::SimStore::change_attributes_locally

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::lease::ReadLease;
use crate::{StoreError, StoreResult};

/// How long a breaker waits for a simulated lease at most (Linux's
/// default lease-break time).
pub const SIM_LEASE_BREAK_WAIT: Duration = Duration::from_secs(45);

#[derive(Debug, Default)]
struct LeasedFile {
    /// Simulated local processes holding the file open for writing.
    writers: usize,
    /// And for reading only.
    readers: usize,
    leases: Vec<SimLease>,
}

#[derive(Debug)]
struct SimLease {
    id: u64,
    write: bool,
    broken: Arc<AtomicBool>,
    /// Its holder's changes in progress.
    holder_changes: Arc<AtomicUsize>,
}

impl LeasedFile {
    fn is_unused(&self) -> bool {
        self.leases.is_empty() && self.writers == 0 && self.readers == 0
    }

    /// Breaks the leases `which` picks: how many it picked.
    fn break_some(&self, which: impl Fn(&SimLease) -> bool) -> usize {
        let picked: Vec<&SimLease> = self.leases.iter().filter(|l| which(l)).collect();
        picked.iter().for_each(|l| l.broken.store(true, Ordering::SeqCst));
        picked.len()
    }
}

#[derive(Debug, Default)]
pub(crate) struct LeaseTable {
    next_id: u64,
    by_ino: HashMap<u64, LeasedFile>,
}

pub(crate) type SharedLeases = Arc<Mutex<LeaseTable>>;

fn table(leases: &SharedLeases) -> MutexGuard<'_, LeaseTable> {
    leases.lock().unwrap_or_else(|e| e.into_inner())
}

/// A read lease on a simulated file.
#[derive(Debug)]
pub struct SimReadLease {
    leases: SharedLeases,
    ino: u64,
    id: u64,
    /// A write lease: its description is open for writing.
    write: bool,
    broken: Arc<AtomicBool>,
    holder_changes: Arc<AtomicUsize>,
}

impl SimReadLease {
    pub(crate) fn ino(&self) -> u64 {
        self.ino
    }

    pub(crate) fn is_write(&self) -> bool {
        self.write
    }
}

impl ReadLease for SimReadLease {
    fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }

    fn break_wait(&self) -> Duration {
        SIM_LEASE_BREAK_WAIT
    }

    fn holder_change_begins(&self) {
        self.holder_changes.fetch_add(1, Ordering::SeqCst);
    }

    fn holder_change_ends(&self) {
        self.holder_changes.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for SimReadLease {
    fn drop(&mut self) {
        let mut t = table(&self.leases);
        if let Some(f) = t.by_ino.get_mut(&self.ino) {
            f.leases.retain(|l| l.id != self.id);
            if f.is_unused() {
                t.by_ino.remove(&self.ino);
            }
        }
    }
}

/// A new read lease on `ino`, unless a writer has it open (EAGAIN); its
/// open breaks a write lease (EAGAIN too).
pub(crate) fn take(leases: &SharedLeases, ino: u64) -> StoreResult<SimReadLease> {
    take_kind(leases, ino, false)
}

/// A new write lease on `ino`, unless anyone has it open (EAGAIN).
pub(crate) fn take_write(leases: &SharedLeases, ino: u64) -> StoreResult<SimReadLease> {
    take_kind(leases, ino, true)
}

fn take_kind(leases: &SharedLeases, ino: u64, write: bool) -> StoreResult<SimReadLease> {
    let mut t = table(leases);
    t.next_id += 1;
    let id = t.next_id;
    let f = t.by_ino.entry(ino).or_default();
    let open_elsewhere = if write { f.writers + f.readers + f.leases.len() } else { f.writers };
    if open_elsewhere > 0 || f.break_some(|l| l.write) > 0 {
        return Err(StoreError::errno(libc::EAGAIN));
    }
    let broken = Arc::new(AtomicBool::new(false));
    let holder_changes = Arc::new(AtomicUsize::new(0));
    f.leases.push(SimLease { id, write, broken: broken.clone(), holder_changes: holder_changes.clone() });
    Ok(SimReadLease { leases: leases.clone(), ino, id, write, broken, holder_changes })
}

/// The store changed `ino`'s attributes: every lease on it but those whose
/// holder's change it is counts as broken.
pub(crate) fn attributes_changed(leases: &SharedLeases, ino: u64) {
    let t = table(leases);
    if let Some(f) = t.by_ino.get(&ino) {
        f.break_some(|l| l.holder_changes.load(Ordering::SeqCst) == 0);
    }
}

/// Breaks every lease on `ino`: how many still stand (a breaker waits for
/// them).
pub(crate) fn break_all(leases: &SharedLeases, ino: u64) -> usize {
    let t = table(leases);
    t.by_ino.get(&ino).map_or(0, |f| f.break_some(|_| true))
}

/// Before the store itself changes `ino`'s data: EAGAIN, every read lease
/// broken, while one stands (the local store opens the file for writing;
/// a write lease is on the description it writes through).
pub(crate) fn before_store_write(leases: &SharedLeases, ino: u64) -> StoreResult<()> {
    let t = table(leases);
    let broken = t.by_ino.get(&ino).map_or(0, |f| f.break_some(|l| !l.write));
    if broken > 0 { Err(StoreError::errno(libc::EAGAIN)) } else { Ok(()) }
}

/// Before the store opens a description of `ino` of its own (for locks):
/// EAGAIN, every lease broken, while one stands.
pub(crate) fn before_store_open(leases: &SharedLeases, ino: u64) -> StoreResult<()> {
    if break_all(leases, ino) > 0 { Err(StoreError::errno(libc::EAGAIN)) } else { Ok(()) }
}

/// A simulated local process opens `ino` for writing (`true`) or closes
/// it (`false`).
pub(crate) fn local_writer(leases: &SharedLeases, ino: u64, open: bool) {
    let mut t = table(leases);
    let f = t.by_ino.entry(ino).or_default();
    if open {
        f.writers += 1;
    } else {
        f.writers = f.writers.saturating_sub(1);
    }
}

/// A simulated local process opens `ino` for reading (`true`), breaking
/// its write leases (how many), or closes it (`false`).
pub(crate) fn local_reader(leases: &SharedLeases, ino: u64, open: bool) -> usize {
    let mut t = table(leases);
    let f = t.by_ino.entry(ino).or_default();
    if open {
        f.readers += 1;
        f.break_some(|l| l.write)
    } else {
        f.readers = f.readers.saturating_sub(1);
        0
    }
}

/// Leases held on `ino`.
pub(crate) fn held(leases: &SharedLeases, ino: u64) -> usize {
    table(leases).by_ino.get(&ino).map_or(0, |f| f.leases.len())
}

//! Read leases of the simulated store (see [`crate::lease`]), as Linux
//! keeps them: one can be had while no writer has the file open; an open
//! for writing (a simulated local process's, [`SimStore::open_for_write_locally`])
//! or a write, truncation, allocation or lock description through the
//! store breaks every
//! lease on the file, and the store's own verb then fails with EAGAIN (as
//! the local store's non-blocking open does) until they are dropped. Not
//! modelled: the store's own descriptors held open for writing (the local
//! store refuses a lease while it holds one).
//!
//! [`SimStore::open_for_write_locally`]: super::SimStore::open_for_write_locally

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
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
    leases: Vec<(u64, Arc<AtomicBool>)>,
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
    broken: Arc<AtomicBool>,
}

impl ReadLease for SimReadLease {
    fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }

    fn break_wait(&self) -> Duration {
        SIM_LEASE_BREAK_WAIT
    }
}

impl Drop for SimReadLease {
    fn drop(&mut self) {
        let mut t = table(&self.leases);
        if let Some(f) = t.by_ino.get_mut(&self.ino) {
            f.leases.retain(|(id, _)| *id != self.id);
            if f.leases.is_empty() && f.writers == 0 {
                t.by_ino.remove(&self.ino);
            }
        }
    }
}

/// A new lease on `ino`, unless a writer has it open (EAGAIN).
pub(crate) fn take(leases: &SharedLeases, ino: u64) -> StoreResult<SimReadLease> {
    let mut t = table(leases);
    t.next_id += 1;
    let id = t.next_id;
    let f = t.by_ino.entry(ino).or_default();
    if f.writers > 0 {
        return Err(StoreError::errno(libc::EAGAIN));
    }
    let broken = Arc::new(AtomicBool::new(false));
    f.leases.push((id, broken.clone()));
    Ok(SimReadLease { leases: leases.clone(), ino, id, broken })
}

/// Breaks every lease on `ino`: how many still stand (a breaker waits for
/// them).
pub(crate) fn break_all(leases: &SharedLeases, ino: u64) -> usize {
    let t = table(leases);
    let Some(f) = t.by_ino.get(&ino) else { return 0 };
    for (_, broken) in &f.leases {
        broken.store(true, Ordering::SeqCst);
    }
    f.leases.len()
}

/// Before the store itself changes `ino`'s data: EAGAIN, every lease
/// broken, while one stands.
pub(crate) fn before_store_write(leases: &SharedLeases, ino: u64) -> StoreResult<()> {
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

/// Leases held on `ino`.
pub(crate) fn held(leases: &SharedLeases, ino: u64) -> usize {
    table(leases).by_ino.get(&ino).map_or(0, |f| f.leases.len())
}

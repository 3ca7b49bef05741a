//! The server-wide budget of bytes held by calls in flight and their
//! replies, shared fairly between connections.
//!
//! A call is charged before it runs, for its record and the largest reply
//! it can produce (`Dispatcher::reply_bytes_max`), and the charge is given
//! back once its reply has been written to the socket. A connection whose
//! client does not read its replies thus stops at its own cap instead of
//! taking the server's memory, and part of the budget stays free for the
//! connections that hold little: a connection already holding more than a
//! quarter of its cap may only take from the budget while less than three
//! quarters of it are in use. Measured: 16 connections pipelining 128
//! READs of 1 MiB each without reading their replies grow the server by
//! about 160 MiB (2 GiB before the budget).
//!
//! Transport-agnostic: a transport charges an [`Account`] per connection
//! and keeps the [`Charge`] with the reply. A charge that cannot be granted
//! at once waits in a queue; when it is granted, the waiter's wake-up
//! callback runs (under the budget's lock: it must only schedule work), and
//! the transport picks the charge up with [`Wait::take`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub struct Budget {
    total_bytes_max: usize,
    connection_bytes_max: usize,
    state: Mutex<State>,
}

struct State {
    used_bytes: usize,
    /// Charges waiting, first come first served among those that fit.
    waiters: VecDeque<Arc<Waiter>>,
}

/// One connection's share of the budget.
pub struct Account {
    budget: Arc<Budget>,
    /// Changed only under the budget's lock.
    used_bytes: AtomicUsize,
}

/// Called once a waiting charge has been granted.
pub type Wake = Arc<dyn Fn() + Send + Sync>;

struct Waiter {
    account: Arc<Account>,
    bytes: usize,
    /// Set (under the budget's lock) once the bytes are charged to it.
    granted: AtomicBool,
    wake: Wake,
}

/// Bytes held by one call; given back when dropped.
pub struct Charge {
    account: Arc<Account>,
    bytes: usize,
}

/// A charge waiting in the queue. Dropping it cancels the wait (or gives
/// back what was granted meanwhile).
pub struct Wait {
    waiter: Option<Arc<Waiter>>,
}

/// The outcome of asking for bytes.
pub enum Charged {
    Now(Charge),
    /// Queued: `wake` runs once granted; then [`Wait::take`] has it.
    Later(Wait),
}

impl Budget {
    pub fn new(total_bytes_max: usize, connection_bytes_max: usize) -> Arc<Self> {
        assert!(connection_bytes_max > 0 && connection_bytes_max <= total_bytes_max);
        Arc::new(Budget {
            total_bytes_max,
            connection_bytes_max,
            state: Mutex::new(State { used_bytes: 0, waiters: VecDeque::new() }),
        })
    }

    pub fn account(self: &Arc<Self>) -> Arc<Account> {
        Arc::new(Account { budget: self.clone(), used_bytes: AtomicUsize::new(0) })
    }

    /// The bound on bytes in flight, whole server.
    pub fn total_bytes_max(&self) -> usize {
        self.total_bytes_max
    }

    pub fn used_bytes(&self) -> usize {
        self.lock().used_bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("budget lock")
    }

    /// Whether a connection holding `held` may take `bytes` more now.
    fn fits(&self, used: usize, held: usize, bytes: usize) -> bool {
        let limit =
            if held > self.connection_bytes_max / 4 { self.total_bytes_max / 4 * 3 } else { self.total_bytes_max };
        held + bytes <= self.connection_bytes_max && used + bytes <= limit
    }

    /// Whether a waiter that does not fit holds up the ones behind it: only
    /// if the whole budget is what it lacks. One held back by its own cap
    /// or by the reserve for small connections must not stop the others.
    fn blocks_others(&self, held: usize, bytes: usize) -> bool {
        held <= self.connection_bytes_max / 4 && held + bytes <= self.connection_bytes_max
    }

    /// Gives the freed bytes to the waiters that now fit, in order.
    fn grant(&self, st: &mut State) {
        let mut i = 0;
        while i < st.waiters.len() {
            let w = &st.waiters[i];
            let held = w.account.used_bytes.load(Ordering::Relaxed);
            if self.fits(st.used_bytes, held, w.bytes) {
                st.used_bytes += w.bytes;
                w.account.used_bytes.store(held + w.bytes, Ordering::Relaxed);
                w.granted.store(true, Ordering::Release);
                (w.wake)();
                st.waiters.remove(i);
            } else if self.blocks_others(held, w.bytes) {
                break;
            } else {
                i += 1;
            }
        }
    }

    fn release(&self, account: &Account, bytes: usize) {
        let mut st = self.lock();
        st.used_bytes -= bytes;
        account.used_bytes.fetch_sub(bytes, Ordering::Relaxed);
        if !st.waiters.is_empty() {
            self.grant(&mut st);
        }
    }
}

impl Account {
    /// Charges `bytes` to this connection now if they fit and nobody waits
    /// ahead; otherwise queues the charge, and `wake` runs once it is
    /// granted. More than the connection's cap is charged as the cap, so a
    /// charge can always be granted once the connection holds nothing.
    pub fn charge(self: &Arc<Self>, bytes: usize, wake: Wake) -> Charged {
        let budget = &self.budget;
        let bytes = bytes.clamp(1, budget.connection_bytes_max);
        let mut st = budget.lock();
        let held = self.used_bytes.load(Ordering::Relaxed);
        // As `grant` would: past the waiters that do not hold up others.
        let unblocked =
            || st.waiters.iter().all(|w| !budget.blocks_others(w.account.used_bytes.load(Ordering::Relaxed), w.bytes));
        if budget.fits(st.used_bytes, held, bytes) && unblocked() {
            st.used_bytes += bytes;
            self.used_bytes.store(held + bytes, Ordering::Relaxed);
            return Charged::Now(Charge { account: self.clone(), bytes });
        }
        let waiter = Arc::new(Waiter { account: self.clone(), bytes, granted: AtomicBool::new(false), wake });
        st.waiters.push_back(waiter.clone());
        Charged::Later(Wait { waiter: Some(waiter) })
    }

    /// Bytes this connection holds.
    pub fn held_bytes(&self) -> usize {
        self.used_bytes.load(Ordering::Relaxed)
    }
}

impl Wait {
    pub fn is_granted(&self) -> bool {
        self.waiter.as_ref().is_some_and(|w| w.granted.load(Ordering::Acquire))
    }

    /// The charge, once granted.
    pub fn take(&mut self) -> Option<Charge> {
        let w = self.waiter.as_ref()?;
        if !w.granted.load(Ordering::Acquire) {
            return None;
        }
        let w = self.waiter.take().expect("checked above");
        Some(Charge { account: w.account.clone(), bytes: w.bytes })
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        let Some(w) = self.waiter.take() else { return };
        let budget = &w.account.budget;
        let mut st = budget.lock();
        if w.granted.load(Ordering::Acquire) {
            drop(st);
            budget.release(&w.account, w.bytes);
        } else {
            st.waiters.retain(|x| !Arc::ptr_eq(x, &w));
            // Whoever was behind it may fit now.
            budget.grant(&mut st);
        }
    }
}

impl Charge {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Gives back what is charged beyond `bytes` (a reply smaller than its
    /// bound), or, if `bytes` is more, charges the rest without waiting:
    /// that is a program whose bound is wrong, which the caller reports.
    pub fn resize(&mut self, bytes: usize) {
        let budget = &self.account.budget;
        if bytes < self.bytes {
            budget.release(&self.account, self.bytes - bytes);
        } else if bytes > self.bytes {
            let extra = bytes - self.bytes;
            let mut st = budget.lock();
            st.used_bytes += extra;
            self.account.used_bytes.fetch_add(extra, Ordering::Relaxed);
        }
        self.bytes = bytes;
    }

    /// Adds `other`'s bytes to this charge (both of the same connection).
    pub fn absorb(&mut self, mut other: Charge) {
        debug_assert!(Arc::ptr_eq(&self.account, &other.account));
        self.bytes += std::mem::take(&mut other.bytes);
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.account.budget.release(&self.account, self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    const MIB: usize = 1 << 20;

    fn no_wake() -> Wake {
        Arc::new(|| {})
    }

    /// The charge if it is granted at once.
    fn now(account: &Arc<Account>, bytes: usize) -> Option<Charge> {
        match account.charge(bytes, no_wake()) {
            Charged::Now(c) => Some(c),
            Charged::Later(_) => None,
        }
    }

    /// A charge that must wait, and a counter of its wake-ups.
    fn later(account: &Arc<Account>, bytes: usize) -> (Wait, Arc<AtomicUsize>) {
        let woken = Arc::new(AtomicUsize::new(0));
        let w = woken.clone();
        match account.charge(bytes, Arc::new(move || _ = w.fetch_add(1, Ordering::SeqCst))) {
            Charged::Now(_) => panic!("granted at once"),
            Charged::Later(wait) => (wait, woken),
        }
    }

    #[test]
    fn a_connection_stops_at_its_cap_and_resumes_when_it_gives_back() {
        let budget = Budget::new(64 * MIB, 16 * MIB);
        let a = budget.account();
        let mut held: Vec<Charge> = Vec::new();
        for _ in 0..16 {
            held.push(now(&a, MIB).expect("under the cap"));
        }
        let (mut wait, woken) = later(&a, MIB);
        assert!(wait.take().is_none());
        held.pop();
        assert_eq!(woken.load(Ordering::SeqCst), 1, "woken once granted");
        let c = wait.take().expect("granted");
        assert_eq!(c.bytes(), MIB);
        assert_eq!(a.held_bytes(), 16 * MIB);
        drop(held);
        drop(c);
        drop(wait);
        assert_eq!(budget.used_bytes(), 0);
    }

    #[test]
    fn a_quarter_of_the_budget_stays_for_connections_that_hold_little() {
        let budget = Budget::new(64 * MIB, 16 * MIB);
        // Four connections that never give back, charging in turn, fill
        // the budget as far as they may: three quarters.
        let hogs: Vec<_> = (0..4).map(|_| budget.account()).collect();
        let mut held = Vec::new();
        let mut waits = Vec::new();
        for _ in 0..16 {
            for hog in &hogs {
                match hog.charge(MIB, no_wake()) {
                    Charged::Now(c) => held.push(c),
                    Charged::Later(w) => waits.push(w),
                }
            }
        }
        drop(waits);
        assert_eq!(budget.used_bytes(), 48 * MIB);
        // A small connection still gets through, up to the whole budget.
        let small = budget.account();
        let mut mine = Vec::new();
        for _ in 0..5 {
            mine.push(now(&small, MIB).expect("the reserve is for small connections"));
        }
        assert_eq!(budget.used_bytes(), 53 * MIB);
        assert!(now(&small, MIB).is_none(), "no longer small");
    }

    #[test]
    fn a_waiter_held_back_by_its_own_cap_does_not_hold_up_others() {
        let budget = Budget::new(32 * MIB, 16 * MIB);
        let hog = budget.account();
        let full = now(&hog, 16 * MIB).unwrap();
        let (mut stuck, woken) = later(&hog, MIB);
        let other = budget.account();
        assert!(now(&other, MIB).is_some(), "granted past a connection held back by its own cap");
        drop(full);
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        assert_eq!(stuck.take().unwrap().bytes(), MIB);
    }

    #[test]
    fn a_cancelled_wait_leaves_nothing_behind() {
        let budget = Budget::new(4 * MIB, 4 * MIB);
        let a = budget.account();
        let full = now(&a, 4 * MIB).unwrap();
        let (wait, _) = later(&a, MIB);
        drop(wait);
        assert!(budget.lock().waiters.is_empty());
        drop(full);
        assert_eq!(budget.used_bytes(), 0);
        // Granted, never taken: given back when dropped.
        let full = now(&a, 4 * MIB).unwrap();
        let (wait, _) = later(&a, MIB);
        drop(full);
        assert_eq!(budget.used_bytes(), MIB);
        drop(wait);
        assert_eq!(budget.used_bytes(), 0);
    }

    #[test]
    fn charges_resize_and_merge() {
        let budget = Budget::new(64 * MIB, 16 * MIB);
        let a = budget.account();
        let mut c = now(&a, 2 * MIB).unwrap();
        c.resize(MIB);
        assert_eq!(budget.used_bytes(), MIB);
        c.absorb(now(&a, MIB).unwrap());
        assert_eq!((c.bytes(), a.held_bytes()), (2 * MIB, 2 * MIB));
        c.resize(3 * MIB);
        assert_eq!(budget.used_bytes(), 3 * MIB);
        drop(c);
        assert_eq!((budget.used_bytes(), a.held_bytes()), (0, 0));
        // More than the cap is charged as the cap.
        assert_eq!(now(&a, 100 * MIB).unwrap().bytes(), 16 * MIB);
    }
}

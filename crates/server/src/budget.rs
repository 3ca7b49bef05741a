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
//! quarters of it are in use.
//!
//! Transport-agnostic: a transport charges an [`Account`] per connection
//! and keeps the [`Charge`] with the reply. Waiting is a future that any
//! executor can poll.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

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

struct Waiter {
    account: Arc<Account>,
    bytes: usize,
    /// Set (under the budget's lock) once the bytes are charged to it.
    granted: AtomicBool,
    wake: Notify,
}

/// Bytes held by one call; given back when dropped.
pub struct Charge {
    account: Arc<Account>,
    bytes: usize,
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
                w.wake.notify_one();
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
    /// Waits until `bytes` can be charged to this connection, then charges
    /// them. More than the connection's cap is charged as the cap, so a
    /// charge can always be granted once the connection holds nothing.
    /// Cancel-safe: dropping the future gives back anything granted.
    pub async fn charge(self: &Arc<Self>, bytes: usize) -> Charge {
        let budget = &self.budget;
        let bytes = bytes.clamp(1, budget.connection_bytes_max);
        let waiter = {
            let mut st = budget.lock();
            let held = self.used_bytes.load(Ordering::Relaxed);
            if st.waiters.is_empty() && budget.fits(st.used_bytes, held, bytes) {
                st.used_bytes += bytes;
                self.used_bytes.store(held + bytes, Ordering::Relaxed);
                return Charge { account: self.clone(), bytes };
            }
            let waiter =
                Arc::new(Waiter { account: self.clone(), bytes, granted: AtomicBool::new(false), wake: Notify::new() });
            st.waiters.push_back(waiter.clone());
            budget.grant(&mut st);
            waiter
        };
        let mut guard = WaitGuard { waiter: Some(waiter) };
        loop {
            let w = guard.waiter.as_ref().expect("waiting");
            if w.granted.load(Ordering::Acquire) {
                guard.waiter = None;
                return Charge { account: self.clone(), bytes };
            }
            w.wake.notified().await;
        }
    }

    /// Bytes this connection holds.
    pub fn held_bytes(&self) -> usize {
        self.used_bytes.load(Ordering::Relaxed)
    }
}

/// Takes a cancelled wait out of the queue, or gives back what was granted
/// to it after all.
struct WaitGuard {
    waiter: Option<Arc<Waiter>>,
}

impl Drop for WaitGuard {
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
    use std::time::Duration;

    use super::*;

    const MIB: usize = 1 << 20;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
    }

    /// Whether `charge` completes at once.
    async fn now(account: &Arc<Account>, bytes: usize) -> Option<Charge> {
        tokio::time::timeout(Duration::from_millis(20), account.charge(bytes)).await.ok()
    }

    #[test]
    fn a_connection_stops_at_its_cap_and_resumes_when_it_gives_back() {
        runtime().block_on(async {
            let budget = Budget::new(64 * MIB, 16 * MIB);
            let a = budget.account();
            let mut held: Vec<Charge> = Vec::new();
            for _ in 0..16 {
                held.push(now(&a, MIB).await.expect("under the cap"));
            }
            assert!(now(&a, MIB).await.is_none(), "over the cap");
            let waiting = tokio::spawn({
                let a = a.clone();
                async move { a.charge(MIB).await }
            });
            tokio::time::sleep(Duration::from_millis(10)).await;
            held.pop();
            let c = tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap();
            assert_eq!(c.bytes(), MIB);
            assert_eq!(a.held_bytes(), 16 * MIB);
            drop(held);
            drop(c);
            assert_eq!(budget.used_bytes(), 0);
        });
    }

    #[test]
    fn a_quarter_of_the_budget_stays_for_connections_that_hold_little() {
        runtime().block_on(async {
            let budget = Budget::new(64 * MIB, 16 * MIB);
            // Four connections that never give back, charging in turn, fill
            // the budget as far as they may: three quarters.
            let hogs: Vec<_> = (0..4).map(|_| budget.account()).collect();
            let mut held = Vec::new();
            for _ in 0..16 {
                for hog in &hogs {
                    held.extend(now(hog, MIB).await);
                }
            }
            assert_eq!(budget.used_bytes(), 48 * MIB);
            // A small connection still gets through, up to the whole budget.
            let small = budget.account();
            let mut mine = Vec::new();
            for _ in 0..5 {
                mine.push(now(&small, MIB).await.expect("the reserve is for small connections"));
            }
            assert_eq!(budget.used_bytes(), 53 * MIB);
            assert!(now(&small, MIB).await.is_none(), "no longer small");
        });
    }

    #[test]
    fn a_waiter_held_back_by_its_own_cap_does_not_hold_up_others() {
        runtime().block_on(async {
            let budget = Budget::new(32 * MIB, 16 * MIB);
            let hog = budget.account();
            let full = now(&hog, 16 * MIB).await.unwrap();
            let stuck = tokio::spawn({
                let hog = hog.clone();
                async move { hog.charge(MIB).await }
            });
            tokio::time::sleep(Duration::from_millis(10)).await;
            let other = budget.account();
            assert!(now(&other, MIB).await.is_some(), "queued behind a capped connection");
            drop(full);
            let c = tokio::time::timeout(Duration::from_secs(5), stuck).await.unwrap().unwrap();
            assert_eq!(c.bytes(), MIB);
        });
    }

    #[test]
    fn a_cancelled_wait_leaves_nothing_behind() {
        runtime().block_on(async {
            let budget = Budget::new(4 * MIB, 4 * MIB);
            let a = budget.account();
            let full = now(&a, 4 * MIB).await.unwrap();
            assert!(now(&a, MIB).await.is_none());
            assert!(budget.lock().waiters.is_empty());
            drop(full);
            assert_eq!(budget.used_bytes(), 0);
        });
    }

    #[test]
    fn charges_resize_and_merge() {
        runtime().block_on(async {
            let budget = Budget::new(64 * MIB, 16 * MIB);
            let a = budget.account();
            let mut c = now(&a, 2 * MIB).await.unwrap();
            c.resize(MIB);
            assert_eq!(budget.used_bytes(), MIB);
            c.absorb(now(&a, MIB).await.unwrap());
            assert_eq!((c.bytes(), a.held_bytes()), (2 * MIB, 2 * MIB));
            c.resize(3 * MIB);
            assert_eq!(budget.used_bytes(), 3 * MIB);
            drop(c);
            assert_eq!((budget.used_bytes(), a.held_bytes()), (0, 0));
            // More than the cap is charged as the cap.
            assert_eq!(now(&a, 100 * MIB).await.unwrap().bytes(), 16 * MIB);
        });
    }
}

//! How many workers are active at once: running calls, or polling and
//! waiting for sockets. At most as many as the machine has CPUs; the other
//! workers park here, where an arriving call does not wake them. (epoll
//! wakes a sleeping waiter for every call that arrives, whether or not a
//! busy worker would have taken it a moment later: with a pool larger
//! than the CPUs, that was a wake-up per call under load.)
//!
//! A worker about to wait for storage gives its place up
//! (`keel_store::blocking::may_block`), so a parked one serves meanwhile.
//! A call that waits without saying so (a lookup that reads the disk, a
//! lock held by such a call) is found by the sentinel, the one parked
//! worker that looks every `stall` while calls run: it lends one more place
//! while every worker holding one has been in its call for that long and
//! is not running (`Watch::Stuck`). A lent place goes back when a worker
//! finishes a call and the others are not all stuck. While no call runs,
//! the sentinel looks less often (`IDLE_LOOK`): an idle server does not
//! spin.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How often the sentinel looks while no call runs.
const IDLE_LOOK: Duration = Duration::from_millis(50);

/// What the sentinel sees of the workers that hold places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watch {
    /// None of them runs a call.
    Quiet,
    /// Some run calls, and one waits for sockets: it takes what arrives.
    Free,
    /// All run calls, and one of them runs on a CPU or started lately.
    Busy,
    /// All have waited in their calls for at least the stall.
    Stuck,
}

pub(crate) struct Places {
    state: Mutex<State>,
    freed: Condvar,
    places: usize,
    stall: Duration,
    /// Places lent since the start.
    lent_total: AtomicU64,
    /// Workers parked now (changed under the lock, read without it).
    parked: AtomicUsize,
    /// Whether places are lent (`State::free` below zero), read without
    /// the lock after every call.
    lent: AtomicBool,
}

struct State {
    /// Places not taken; below zero while the sentinel has lent places.
    free: isize,
    sentinel: bool,
    stopped: bool,
}

impl Places {
    pub(crate) fn new(places: usize, stall: Duration) -> Places {
        Places {
            state: Mutex::new(State { free: places.max(1) as isize, sentinel: false, stopped: false }),
            freed: Condvar::new(),
            places: places.max(1),
            stall,
            lent_total: AtomicU64::new(0),
            parked: AtomicUsize::new(0),
            lent: AtomicBool::new(false),
        }
    }

    /// How long the workers holding places must all wait before one more
    /// is lent.
    pub(crate) fn stall(&self) -> Duration {
        self.stall
    }

    /// Takes a place, parking until one is free or, for the sentinel, until
    /// `watch` says every worker holding one is stuck. False once stopped.
    pub(crate) fn take(&self, watch: impl Fn() -> Watch) -> bool {
        let mut st = self.lock();
        loop {
            if st.stopped {
                return false;
            }
            if st.free > 0 {
                st.free -= 1;
                return true;
            }
            self.parked.fetch_add(1, Ordering::SeqCst);
            if st.sentinel {
                st = self.freed.wait(st).unwrap_or_else(|p| p.into_inner());
                self.parked.fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            st.sentinel = true;
            let look = if watch() == Watch::Quiet { IDLE_LOOK } else { self.stall };
            let (s, waited) = self.freed.wait_timeout(st, look).unwrap_or_else(|p| p.into_inner());
            st = s;
            self.parked.fetch_sub(1, Ordering::SeqCst);
            st.sentinel = false;
            if st.stopped {
                return false;
            }
            let take = if st.free > 0 {
                true
            } else if waited.timed_out() && watch() == Watch::Stuck {
                self.lent.store(true, Ordering::SeqCst);
                self.lent_total.fetch_add(1, Ordering::Relaxed);
                true
            } else {
                false
            };
            if take {
                st.free -= 1;
                if self.parked.load(Ordering::SeqCst) > 0 {
                    // Someone else watches now.
                    self.freed.notify_one();
                }
                return true;
            }
        }
    }

    /// Gives a place back.
    pub(crate) fn give_back(&self) {
        let mut st = self.lock();
        st.free += 1;
        self.lent.store(st.free < 0, Ordering::SeqCst);
        let wake = st.free > 0 && self.parked.load(Ordering::SeqCst) > 0;
        drop(st);
        if wake {
            self.freed.notify_one();
        }
    }

    /// Whether places are lent now: a worker that finishes a call then
    /// asks `others` whether the rest are still stuck, and if not gives
    /// its place back (true).
    pub(crate) fn return_lent(&self, others: impl FnOnce() -> Watch) -> bool {
        if !self.lent.load(Ordering::SeqCst) || others() == Watch::Stuck {
            return false;
        }
        let mut st = self.lock();
        if st.free >= 0 {
            return false;
        }
        st.free += 1;
        self.lent.store(st.free < 0, Ordering::SeqCst);
        true
    }

    /// How many workers may be active at once, lent places aside.
    pub(crate) fn places(&self) -> usize {
        self.places
    }

    /// Places lent since the start: each time, every active worker had
    /// waited in a call that did not say it would.
    pub(crate) fn lent_total(&self) -> u64 {
        self.lent_total.load(Ordering::Relaxed)
    }

    /// Workers parked now.
    pub(crate) fn parked(&self) -> usize {
        self.parked.load(Ordering::SeqCst)
    }

    /// Wakes every parked worker to leave.
    pub(crate) fn stop(&self) {
        self.lock().stopped = true;
        self.freed.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether the thread `tid` of this process runs or waits to run (state
/// `R` in /proc): a call on it is not stuck, only slow or preempted. A
/// thread that cannot be read (no /proc) counts as not running: the
/// sentinel then goes by time alone and lends more often than it needs
/// to, rather than never, which would leave stuck calls stopping every
/// client.
pub(crate) fn thread_runs(tid: i32) -> bool {
    let Ok(stat) = std::fs::read(format!("/proc/self/task/{tid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": comm may hold spaces and parentheses.
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return false;
    };
    stat.get(close + 2).is_some_and(|&state| state == b'R')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU8;
    use std::time::Instant;

    fn watch_of(w: &AtomicU8) -> Watch {
        match w.load(Ordering::SeqCst) {
            0 => Watch::Quiet,
            1 => Watch::Busy,
            _ => Watch::Stuck,
        }
    }

    #[test]
    fn a_worker_parks_until_a_place_is_given_back() {
        let places = Arc::new(Places::new(1, Duration::from_secs(60)));
        assert!(places.take(|| Watch::Busy));
        let waiter = {
            let places = places.clone();
            std::thread::spawn(move || places.take(|| Watch::Busy))
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished(), "no place was free");
        assert_eq!(places.parked(), 1);
        places.give_back();
        assert!(waiter.join().unwrap());
    }

    #[test]
    fn a_place_is_lent_only_while_every_holder_is_stuck_and_goes_back_after() {
        let places = Arc::new(Places::new(1, Duration::from_millis(5)));
        assert!(places.take(|| Watch::Busy));
        let watch = Arc::new(AtomicU8::new(1));
        let waiter = {
            let (places, watch) = (places.clone(), watch.clone());
            std::thread::spawn(move || places.take(|| watch_of(&watch)))
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished(), "the holder is busy, not stuck: nothing lent");
        let since = Instant::now();
        watch.store(2, Ordering::SeqCst);
        assert!(waiter.join().unwrap());
        assert!(since.elapsed() < Duration::from_secs(5));
        assert_eq!(places.lent_total(), 1);
        // Two places are taken now. While the other holder stays stuck the
        // lent one is kept; once it is not, the lent one goes back.
        assert!(!places.return_lent(|| Watch::Stuck));
        assert!(places.return_lent(|| Watch::Busy));
        assert!(!places.return_lent(|| Watch::Busy), "only the lent place goes back");
        places.give_back();
        assert!(places.take(|| Watch::Busy));
    }

    #[test]
    fn stopping_wakes_every_parked_worker() {
        let places = Arc::new(Places::new(1, Duration::from_millis(1)));
        assert!(places.take(|| Watch::Busy));
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let places = places.clone();
                std::thread::spawn(move || places.take(|| Watch::Busy))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        places.stop();
        for w in waiters {
            assert!(!w.join().unwrap(), "a stopped pool gives no place");
        }
    }

    #[test]
    fn a_sleeping_thread_does_not_run_and_this_one_does() {
        assert!(thread_runs(crate::sys::gettid()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            tx.send(crate::sys::gettid()).unwrap();
            std::thread::sleep(Duration::from_secs(2));
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(!thread_runs(tid));
        sleeper.join().unwrap();
        assert!(!thread_runs(i32::MAX), "an unknown thread counts as not running: time alone decides");
    }
}

//! How many workers are active at once: running calls, or polling and
//! waiting for sockets. At most as many as the machine has CPUs; the other
//! workers park here, where an arriving call does not wake them. (epoll
//! wakes a sleeping waiter for every call that arrives, whether or not a
//! busy worker would have taken it a moment later: with a pool larger
//! than the CPUs, that was a wake-up per call under load.)
//!
//! A worker about to wait for storage gives its place up
//! (`keel_store::blocking::may_block`), so a parked one serves meanwhile;
//! not while another worker with a place runs no call: that one takes what
//! arrives, the giver takes its place again after the wait (`try_take`),
//! and a parked worker is woken only once every worker with a place runs a
//! call (`wake_if_unheard`). From one client at a time, a sync then costs
//! no parked worker's wake-up and sleep, nor the syncing worker's park,
//! and the calls stay on the same two threads, whose caches are warm.
//! A call that waits without saying so (a lookup that reads the disk, a
//! lock held by such a call) is found by the sentinel, the one parked
//! worker that looks every `stall` while calls run: it lends one more place
//! while every worker holding one has been in its call for that long and
//! is not running (`Watch::Stuck`). A lent place goes back when a worker
//! finishes a call and the others are not all stuck. While no call runs,
//! the sentinel looks less often (`IDLE_LOOK`): an idle server does not
//! spin.

use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, AtomicUsize, Ordering};
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
    /// `State::free`, read without the lock when a call starts.
    free_now: AtomicIsize,
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
            free_now: AtomicIsize::new(places.max(1) as isize),
        }
    }

    /// How long the workers holding places must all wait before one more
    /// is lent.
    pub(crate) fn stall(&self) -> Duration {
        self.stall
    }

    /// Takes a place, parking until one is free or, for the sentinel, until
    /// `watch` says every worker holding one is stuck. False once stopped.
    /// A place given back while another worker waited for calls
    /// (`give_back_unless`) is left to its giver by the sentinel while
    /// `listening` says one still does.
    pub(crate) fn take(&self, watch: impl Fn() -> Watch, listening: impl Fn() -> bool) -> bool {
        let mut st = self.lock();
        // Whether the sentinel came back from a look, not woken for a place.
        let mut looked = false;
        loop {
            if st.stopped {
                return false;
            }
            if st.free > 0 && !(looked && listening()) {
                st.free -= 1;
                self.free_now.store(st.free, Ordering::SeqCst);
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
            looked = waited.timed_out();
            let take = if st.free > 0 {
                !(looked && listening())
            } else if looked && watch() == Watch::Stuck {
                self.lent.store(true, Ordering::SeqCst);
                self.lent_total.fetch_add(1, Ordering::Relaxed);
                true
            } else {
                false
            };
            if take {
                st.free -= 1;
                self.free_now.store(st.free, Ordering::SeqCst);
                if self.parked.load(Ordering::SeqCst) > 0 {
                    // Someone else watches now.
                    self.freed.notify_one();
                }
                return true;
            }
        }
    }

    /// Takes a place if one is free, without parking.
    pub(crate) fn try_take(&self) -> bool {
        let mut st = self.lock();
        let free = st.free > 0 && !st.stopped;
        if free {
            st.free -= 1;
            self.free_now.store(st.free, Ordering::SeqCst);
        }
        free
    }

    /// Gives a place back.
    pub(crate) fn give_back(&self) {
        self.give_back_unless(|| false);
    }

    /// Gives a place back, and wakes a parked worker to take it unless
    /// `listening` says another worker with a place runs no call: that one
    /// takes what arrives, and the place stays free for the giver to take
    /// again. A worker that starts a call marks itself running, then reads
    /// [`Places::any_free`], and if no other worker with a place is free
    /// calls [`Places::wake_if_unheard`]; `listening` reads those marks
    /// after the freed place is published (all SeqCst): one of the two
    /// sees the other's change.
    pub(crate) fn give_back_unless(&self, listening: impl FnOnce() -> bool) {
        let mut st = self.lock();
        st.free += 1;
        self.free_now.store(st.free, Ordering::SeqCst);
        self.lent.store(st.free < 0, Ordering::SeqCst);
        let wake = st.free > 0 && self.parked.load(Ordering::SeqCst) > 0 && !listening();
        drop(st);
        if wake {
            self.freed.notify_one();
        }
    }

    /// Whether a place is free now (without the lock: a hint).
    pub(crate) fn any_free(&self) -> bool {
        self.free_now.load(Ordering::SeqCst) > 0
    }

    /// No worker with a place waits for calls any more: a place given back
    /// meanwhile goes to a parked worker, who does.
    pub(crate) fn wake_if_unheard(&self) {
        let st = self.lock();
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
        self.free_now.store(st.free, Ordering::SeqCst);
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
        assert!(places.take(|| Watch::Busy, || false));
        let waiter = {
            let places = places.clone();
            std::thread::spawn(move || places.take(|| Watch::Busy, || false))
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
        assert!(places.take(|| Watch::Busy, || false));
        let watch = Arc::new(AtomicU8::new(1));
        let waiter = {
            let (places, watch) = (places.clone(), watch.clone());
            std::thread::spawn(move || places.take(|| watch_of(&watch), || false))
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
        assert!(places.take(|| Watch::Busy, || false));
    }

    #[test]
    fn a_place_given_back_while_another_worker_waits_for_calls_stays_free_until_none_does() {
        let places = Arc::new(Places::new(1, Duration::from_millis(1)));
        assert!(places.take(|| Watch::Busy, || false));
        let listening = Arc::new(AtomicBool::new(true));
        let waiter = {
            let (places, listening) = (places.clone(), listening.clone());
            // The sentinel: it looks again and again meanwhile.
            std::thread::spawn(move || places.take(|| Watch::Free, || listening.load(Ordering::SeqCst)))
        };
        std::thread::sleep(Duration::from_millis(50));
        places.give_back_unless(|| listening.load(Ordering::SeqCst));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished(), "another worker waits for calls: the place is left to its giver");
        listening.store(false, Ordering::SeqCst);
        places.wake_if_unheard();
        assert!(waiter.join().unwrap());
        // Given back while none waits for calls, a place goes at once.
        let waiter = {
            let places = places.clone();
            std::thread::spawn(move || places.take(|| Watch::Busy, || false))
        };
        std::thread::sleep(Duration::from_millis(50));
        places.give_back_unless(|| false);
        assert!(waiter.join().unwrap());
    }

    #[test]
    fn stopping_wakes_every_parked_worker() {
        let places = Arc::new(Places::new(1, Duration::from_millis(1)));
        assert!(places.take(|| Watch::Busy, || false));
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let places = places.clone();
                std::thread::spawn(move || places.take(|| Watch::Busy, || false))
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

//! The table of open connections: the connection limit, what each
//! connection is doing, and which to close (knfsd's `svc_xprt` aging).
//!
//! A connection is idle when it has no call in flight (a call is in flight
//! from when it is taken until its reply is written or dropped). Idle
//! connections are closed after the idle timeout, and at the connection
//! limit the one idle for the longest is closed to admit a new one. A
//! connection whose replies wait to be written and make no progress for
//! the stall timeout (its client does not read them) is closed, which
//! gives back what its calls held of the memory budget.
//!
//! Transport-agnostic: the transport registers a connection, reports
//! activity, and gives each connection a closer ([`Conn::on_close`]) that
//! makes it close its socket when the table decides to close it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Why the server closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// No call for the idle timeout.
    Idle,
    /// Its replies were not read for the stall timeout.
    Stalled,
    /// The oldest idle connection, closed to admit a new one at the limit.
    Evicted,
    /// The server stops, and the client did not close its side in time.
    Stopping,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Idle => "idle for the idle timeout",
            CloseReason::Stalled => "replies not read by the client for the stall timeout",
            CloseReason::Evicted => "oldest idle connection, closed to admit a new one (max_connections reached)",
            CloseReason::Stopping => "server stopping",
        }
    }
}

pub struct Connections {
    connections_max: usize,
    idle_timeout: Duration,
    stall_timeout: Duration,
    epoch: Instant,
    table: Mutex<Table>,
    /// Wakes whoever waits for the table to empty.
    emptied: Condvar,
    counts: Counts,
}

/// Connections admitted, refused and closed since the start (statistics).
#[derive(Default)]
struct Counts {
    accepted: AtomicU64,
    refused: AtomicU64,
    /// By [`CloseReason`], in the order of `REASONS`.
    closed: [AtomicU64; REASONS.len()],
}

/// What the table holds now and has done, for statistics.
#[derive(Debug, Clone, Default)]
pub struct TableState {
    pub max: usize,
    pub accepted: u64,
    /// Refused at the limit with none idle.
    pub refused: u64,
    /// Closed by the server, by reason: idle, stalled, evicted.
    pub closed_idle: u64,
    pub closed_stalled: u64,
    pub closed_evicted: u64,
    pub open: Vec<ConnState>,
}

/// One open connection as the table sees it.
#[derive(Debug, Clone)]
pub struct ConnState {
    pub peer: SocketAddr,
    /// The server address it connected to (a failover's tickle source).
    pub local: Option<SocketAddr>,
    pub calls_in_flight: usize,
    /// Since the last call received or reply done.
    pub idle: Duration,
    /// Replies have waited for this long without being written.
    pub stalled_for: Option<Duration>,
    /// Told to close (and why).
    pub closing: Option<CloseReason>,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    open: HashMap<u64, Arc<Conn>>,
}

/// One connection as the table sees it.
pub struct Conn {
    pub peer: SocketAddr,
    pub local: Option<SocketAddr>,
    id: u64,
    epoch: Instant,
    calls_in_flight: AtomicUsize,
    /// Milliseconds since `epoch` of the last call received or reply done.
    active_ms: AtomicU64,
    /// Milliseconds since `epoch` (plus one) since when replies have waited
    /// without any being written; 0 when none waits.
    stalled_since_ms: AtomicU64,
    /// CloseReason as 1 + its index; 0 while open.
    close_reason: AtomicU64,
    /// What the transport does to close the connection.
    closer: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

/// A connection's place in the table, given up when dropped.
pub struct Slot {
    table: Arc<Connections>,
    pub conn: Arc<Conn>,
}

/// A call in flight on a connection; the connection is active again when
/// it is dropped (its reply written, or dropped with the connection).
pub struct CallInFlight {
    conn: Arc<Conn>,
}

const REASONS: [CloseReason; 4] =
    [CloseReason::Idle, CloseReason::Stalled, CloseReason::Evicted, CloseReason::Stopping];

impl Connections {
    pub fn new(connections_max: usize, idle_timeout: Duration, stall_timeout: Duration) -> Arc<Self> {
        assert!(connections_max > 0);
        Arc::new(Connections {
            connections_max,
            idle_timeout,
            stall_timeout,
            epoch: Instant::now(),
            table: Mutex::new(Table::default()),
            emptied: Condvar::new(),
            counts: Counts::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().expect("connection table lock")
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A place for a new connection from `peer`. At the limit, the
    /// connection idle for the longest is told to close and gives its place
    /// up at once; `None` if none is idle.
    pub fn admit(self: &Arc<Self>, peer: SocketAddr, local: Option<SocketAddr>) -> Option<Slot> {
        let mut table = self.lock();
        let mut evicted = None;
        if table.open.len() >= self.connections_max {
            let oldest = table
                .open
                .values()
                .filter(|c| c.calls_in_flight.load(Ordering::Acquire) == 0)
                .min_by_key(|c| c.active_ms.load(Ordering::Relaxed))
                .cloned();
            let Some(oldest) = oldest else {
                self.counts.refused.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            table.open.remove(&oldest.id);
            evicted = Some(oldest);
        }
        self.counts.accepted.fetch_add(1, Ordering::Relaxed);
        let id = table.next_id;
        table.next_id += 1;
        let conn = Arc::new(Conn {
            peer,
            local,
            id,
            epoch: self.epoch,
            calls_in_flight: AtomicUsize::new(0),
            active_ms: AtomicU64::new(self.now_ms()),
            stalled_since_ms: AtomicU64::new(0),
            close_reason: AtomicU64::new(0),
            closer: OnceLock::new(),
        });
        table.open.insert(id, conn.clone());
        drop(table);
        // Closers run outside the lock: closing may drop a connection,
        // whose place then goes back to the table.
        if let Some(oldest) = evicted
            && oldest.close(CloseReason::Evicted)
        {
            self.count_close(CloseReason::Evicted);
        }
        Some(Slot { table: self.clone(), conn })
    }

    /// Tells the connections idle or stalled for too long to close; how
    /// many it told. Call it every [`Connections::sweep_interval`].
    pub fn sweep(&self) -> usize {
        let now = self.now_ms();
        let idle_ms = self.idle_timeout.as_millis() as u64;
        let stall_ms = self.stall_timeout.as_millis() as u64;
        let open: Vec<Arc<Conn>> = self.lock().open.values().cloned().collect();
        let mut told = 0;
        // Closers run outside the lock (see `admit`).
        for c in &open {
            let since = c.stalled_since_ms.load(Ordering::Relaxed);
            let reason = if since != 0 && now.saturating_sub(since - 1) >= stall_ms {
                CloseReason::Stalled
            } else if c.calls_in_flight.load(Ordering::Acquire) == 0
                && now.saturating_sub(c.active_ms.load(Ordering::Relaxed)) >= idle_ms
            {
                CloseReason::Idle
            } else {
                continue;
            };
            if c.close(reason) {
                self.count_close(reason);
                tracing::debug!(peer = %c.peer, reason = reason.as_str(), "telling a connection to close");
                told += 1;
            }
        }
        told
    }

    fn count_close(&self, reason: CloseReason) {
        let i = REASONS.iter().position(|r| *r == reason).expect("listed");
        self.counts.closed[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The open connections and what the table has done so far.
    pub fn state(&self) -> TableState {
        let now = self.now_ms();
        let open = self
            .lock()
            .open
            .values()
            .map(|c| {
                let since = c.stalled_since_ms.load(Ordering::Relaxed);
                ConnState {
                    peer: c.peer,
                    local: c.local,
                    calls_in_flight: c.calls_in_flight.load(Ordering::Acquire),
                    idle: Duration::from_millis(now.saturating_sub(c.active_ms.load(Ordering::Relaxed))),
                    stalled_for: (since != 0).then(|| Duration::from_millis(now.saturating_sub(since - 1))),
                    closing: c.close_reason(),
                }
            })
            .collect();
        let closed = |r: CloseReason| {
            let i = REASONS.iter().position(|x| *x == r).expect("listed");
            self.counts.closed[i].load(Ordering::Relaxed)
        };
        TableState {
            max: self.connections_max,
            accepted: self.counts.accepted.load(Ordering::Relaxed),
            refused: self.counts.refused.load(Ordering::Relaxed),
            closed_idle: closed(CloseReason::Idle),
            closed_stalled: closed(CloseReason::Stalled),
            closed_evicted: closed(CloseReason::Evicted),
            open,
        }
    }

    /// Often enough that a timeout is overshot by a quarter at most.
    pub fn sweep_interval(&self) -> Duration {
        (self.idle_timeout.min(self.stall_timeout) / 4).clamp(Duration::from_millis(100), Duration::from_secs(15))
    }

    /// Waits until every connection has given its place up, for at most
    /// `timeout`; whether they all did.
    pub fn wait_empty(&self, timeout: Duration) -> bool {
        let table = self.lock();
        let (table, _) =
            self.emptied.wait_timeout_while(table, timeout, |t| !t.open.is_empty()).expect("connection table lock");
        table.open.is_empty()
    }

    /// Connections open now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().open.len()
    }
}

impl Conn {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Tells the connection to close; false if it already was told.
    pub fn close(&self, reason: CloseReason) -> bool {
        let code = 1 + REASONS.iter().position(|r| *r == reason).expect("listed") as u64;
        let first = self.close_reason.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if first && let Some(closer) = self.closer.get() {
            closer();
        }
        first
    }

    pub fn close_reason(&self) -> Option<CloseReason> {
        match self.close_reason.load(Ordering::Acquire) {
            0 => None,
            n => Some(REASONS[n as usize - 1]),
        }
    }

    /// Sets what closing the connection does (once, by its transport). If
    /// the table already decided to close it, `closer` runs at once.
    pub fn on_close(&self, closer: Box<dyn Fn() + Send + Sync>) {
        if self.closer.set(closer).is_ok() && self.close_reason().is_some() {
            (self.closer.get().expect("just set"))();
        }
    }

    /// Bytes arrived from the client.
    pub fn received(&self) {
        self.active_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// A call was taken; it is in flight until the guard is dropped.
    pub fn call_started(self: &Arc<Self>) -> CallInFlight {
        self.calls_in_flight.fetch_add(1, Ordering::AcqRel);
        CallInFlight { conn: self.clone() }
    }

    /// What waits to be written changed: `waiting` says whether replies
    /// still wait after some were (or were not) written. `progress`: bytes
    /// went out, so the stall clock starts again.
    pub fn replies_waiting(&self, waiting: bool, progress: bool) {
        if !waiting {
            self.stalled_since_ms.store(0, Ordering::Relaxed);
        } else if progress || self.stalled_since_ms.load(Ordering::Relaxed) == 0 {
            self.stalled_since_ms.store(self.now_ms() + 1, Ordering::Relaxed);
        }
    }
}

impl Drop for CallInFlight {
    fn drop(&mut self) {
        self.conn.active_ms.store(self.conn.now_ms(), Ordering::Relaxed);
        self.conn.calls_in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.table.lock();
        table.open.remove(&self.conn.id);
        if table.open.is_empty() {
            self.table.emptied.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn at_the_limit_the_oldest_idle_connection_makes_room() {
        let t = Connections::new(3, Duration::from_secs(360), Duration::from_secs(60));
        let a = t.admit(peer(1), None).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let b = t.admit(peer(2), None).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let c = t.admit(peer(3), None).unwrap();
        let _busy = a.conn.call_started(); // the oldest, but not idle
        let d = t.admit(peer(4), None).expect("b is idle");
        assert_eq!(b.conn.close_reason(), Some(CloseReason::Evicted));
        assert_eq!((a.conn.close_reason(), c.conn.close_reason()), (None, None));
        assert_eq!(t.len(), 3);
        drop(b); // its task ends later; that frees nothing twice
        assert_eq!(t.len(), 3);
        let _c_busy = c.conn.call_started();
        let _d_busy = d.conn.call_started();
        assert!(t.admit(peer(5), None).is_none(), "none idle: refused");
        let state = t.state();
        assert_eq!((state.accepted, state.refused, state.closed_evicted, state.open.len()), (4, 1, 1, 3));
        assert!(state.open.iter().all(|c| c.calls_in_flight == 1));
    }

    #[test]
    fn idle_and_stalled_connections_are_told_to_close() {
        let t = Connections::new(8, Duration::from_millis(50), Duration::from_millis(50));
        let idle = t.admit(peer(1), None).unwrap();
        let busy = t.admit(peer(2), None).unwrap();
        let stalled = t.admit(peer(3), None).unwrap();
        let _call = busy.conn.call_started();
        let _stuck = stalled.conn.call_started();
        stalled.conn.replies_waiting(true, false);
        busy.conn.replies_waiting(true, false);
        std::thread::sleep(Duration::from_millis(60));
        busy.conn.replies_waiting(true, true); // its client reads
        assert_eq!(t.sweep(), 2);
        assert_eq!(idle.conn.close_reason(), Some(CloseReason::Idle));
        assert_eq!(stalled.conn.close_reason(), Some(CloseReason::Stalled));
        assert_eq!(busy.conn.close_reason(), None);
        assert_eq!(t.sweep(), 0, "told once");
    }

    #[test]
    fn closing_runs_the_closer_once_and_empties_the_table() {
        let t = Connections::new(2, Duration::from_secs(1), Duration::from_secs(1));
        let s = t.admit(peer(1), None).unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        s.conn.on_close(Box::new(move || _ = r.fetch_add(1, Ordering::SeqCst)));
        assert!(s.conn.close(CloseReason::Idle));
        assert!(!s.conn.close(CloseReason::Stalled), "told once");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(s.conn.close_reason(), Some(CloseReason::Idle));
        // Told before the transport set its closer: the closer runs at once.
        let early = t.admit(peer(2), None).unwrap();
        early.conn.close(CloseReason::Evicted);
        let r = runs.clone();
        early.conn.on_close(Box::new(move || _ = r.fetch_add(1, Ordering::SeqCst)));
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert!(!t.wait_empty(Duration::from_millis(10)));
        let waiter = std::thread::spawn({
            let t = t.clone();
            move || t.wait_empty(Duration::from_secs(5))
        });
        drop(s);
        drop(early);
        assert!(waiter.join().unwrap(), "emptied");
    }
}

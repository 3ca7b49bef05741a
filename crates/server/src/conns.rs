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
//! activity, and closes its socket when [`Conn::closed`] completes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Why the server closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// No call for the idle timeout.
    Idle,
    /// Its replies were not read for the stall timeout.
    Stalled,
    /// The oldest idle connection, closed to admit a new one at the limit.
    Evicted,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Idle => "idle for the idle timeout",
            CloseReason::Stalled => "replies not read by the client for the stall timeout",
            CloseReason::Evicted => "oldest idle connection, closed to admit a new one (max_connections reached)",
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
    emptied: Notify,
    counts: Counts,
}

/// Connections admitted, refused and closed since the start (statistics).
#[derive(Default)]
struct Counts {
    accepted: AtomicU64,
    refused: AtomicU64,
    /// By [`CloseReason`], in the order of `REASONS`.
    closed: [AtomicU64; 3],
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
    close: Notify,
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

const REASONS: [CloseReason; 3] = [CloseReason::Idle, CloseReason::Stalled, CloseReason::Evicted];

impl Connections {
    pub fn new(connections_max: usize, idle_timeout: Duration, stall_timeout: Duration) -> Arc<Self> {
        assert!(connections_max > 0);
        Arc::new(Connections {
            connections_max,
            idle_timeout,
            stall_timeout,
            epoch: Instant::now(),
            table: Mutex::new(Table::default()),
            emptied: Notify::new(),
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
    pub fn admit(self: &Arc<Self>, peer: SocketAddr) -> Option<Slot> {
        let mut table = self.lock();
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
            if oldest.close(CloseReason::Evicted) {
                self.count_close(CloseReason::Evicted);
            }
        }
        self.counts.accepted.fetch_add(1, Ordering::Relaxed);
        let id = table.next_id;
        table.next_id += 1;
        let conn = Arc::new(Conn {
            peer,
            id,
            epoch: self.epoch,
            calls_in_flight: AtomicUsize::new(0),
            active_ms: AtomicU64::new(self.now_ms()),
            stalled_since_ms: AtomicU64::new(0),
            close_reason: AtomicU64::new(0),
            close: Notify::new(),
        });
        table.open.insert(id, conn.clone());
        Some(Slot { table: self.clone(), conn })
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().open.len()
    }

    /// Tells the connections idle or stalled for too long to close; how
    /// many it told. Call it every [`Connections::sweep_interval`].
    pub fn sweep(&self) -> usize {
        let now = self.now_ms();
        let idle_ms = self.idle_timeout.as_millis() as u64;
        let stall_ms = self.stall_timeout.as_millis() as u64;
        let table = self.lock();
        let mut told = 0;
        for c in table.open.values() {
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
                    calls_in_flight: c.calls_in_flight.load(Ordering::Acquire),
                    idle: Duration::from_millis(now.saturating_sub(c.active_ms.load(Ordering::Relaxed))),
                    stalled_for: (since != 0).then(|| Duration::from_millis(now.saturating_sub(since - 1))),
                    closing: c.close_reason(),
                }
            })
            .collect();
        let closed = |r: usize| self.counts.closed[r].load(Ordering::Relaxed);
        TableState {
            max: self.connections_max,
            accepted: self.counts.accepted.load(Ordering::Relaxed),
            refused: self.counts.refused.load(Ordering::Relaxed),
            closed_idle: closed(0),
            closed_stalled: closed(1),
            closed_evicted: closed(2),
            open,
        }
    }

    /// Often enough that a timeout is overshot by a quarter at most.
    pub fn sweep_interval(&self) -> Duration {
        (self.idle_timeout.min(self.stall_timeout) / 4).clamp(Duration::from_millis(100), Duration::from_secs(15))
    }

    /// Waits until every connection has given its place up.
    pub async fn wait_empty(&self) {
        loop {
            let emptied = self.emptied.notified();
            tokio::pin!(emptied);
            emptied.as_mut().enable();
            if self.lock().open.is_empty() {
                return;
            }
            emptied.await;
        }
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
        if first {
            // One waiter (the transport); the permit is kept if it is not waiting yet.
            self.close.notify_one();
        }
        first
    }

    pub fn close_reason(&self) -> Option<CloseReason> {
        match self.close_reason.load(Ordering::Acquire) {
            0 => None,
            n => Some(REASONS[n as usize - 1]),
        }
    }

    /// Completes once the server has decided to close this connection.
    pub async fn closed(&self) -> CloseReason {
        loop {
            if let Some(reason) = self.close_reason() {
                return reason;
            }
            self.close.notified().await;
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
            self.table.emptied.notify_waiters();
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
        let a = t.admit(peer(1)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let b = t.admit(peer(2)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let c = t.admit(peer(3)).unwrap();
        let _busy = a.conn.call_started(); // the oldest, but not idle
        let d = t.admit(peer(4)).expect("b is idle");
        assert_eq!(b.conn.close_reason(), Some(CloseReason::Evicted));
        assert_eq!((a.conn.close_reason(), c.conn.close_reason()), (None, None));
        assert_eq!(t.len(), 3);
        drop(b); // its task ends later; that frees nothing twice
        assert_eq!(t.len(), 3);
        let _c_busy = c.conn.call_started();
        let _d_busy = d.conn.call_started();
        assert!(t.admit(peer(5)).is_none(), "none idle: refused");
        let state = t.state();
        assert_eq!((state.accepted, state.refused, state.closed_evicted, state.open.len()), (4, 1, 1, 3));
        assert!(state.open.iter().all(|c| c.calls_in_flight == 1));
    }

    #[test]
    fn idle_and_stalled_connections_are_told_to_close() {
        let t = Connections::new(8, Duration::from_millis(50), Duration::from_millis(50));
        let idle = t.admit(peer(1)).unwrap();
        let busy = t.admit(peer(2)).unwrap();
        let stalled = t.admit(peer(3)).unwrap();
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
    fn closed_completes_after_close() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let t = Connections::new(1, Duration::from_secs(1), Duration::from_secs(1));
        let s = t.admit(peer(1)).unwrap();
        s.conn.close(CloseReason::Idle);
        rt.block_on(async {
            let r = tokio::time::timeout(Duration::from_secs(5), s.conn.closed()).await;
            assert_eq!(r.unwrap(), CloseReason::Idle);
            drop(s);
            tokio::time::timeout(Duration::from_secs(5), t.wait_empty()).await.unwrap();
        });
    }
}

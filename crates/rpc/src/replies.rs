//! Replies to the calls the server sends back on its clients' connections
//! (NFSv4.1's callbacks): each call is registered here before it is sent,
//! under the connection it goes out on and an xid this router chose, and
//! the reply that comes back on that connection with that xid reaches
//! the call's waiter, once. Anything else that looks like a reply (an
//! unknown xid, the right xid on another connection, a reply past its
//! deadline, a reply in a datagram) is dropped and counted: a client
//! cannot answer a call the server did not make, nor another client's.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::connection::ConnectionId;

/// Calls waiting for their reply, at most, over all connections: a
/// callback waits a few seconds, and NFSv4.1 gives each session one
/// backchannel slot.
pub const REPLIES_WAITING_MAX: usize = 4096;

/// What receives a reply: called once, with the whole reply message
/// (from its xid on), on the worker that received it, in its
/// connection's read turn ([`crate::Dispatcher::take_reply`]): it must not
/// block, the connection reads nothing else meanwhile.
pub type ReplyWaiter = Box<dyn FnOnce(Bytes) + Send>;

struct Waiting {
    deadline: Instant,
    waiter: ReplyWaiter,
}

/// What became of a reply message given to [`ReplyRouter::route`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routed {
    /// Given to the call's waiter.
    Delivered,
    /// No call waits for it on its connection (never made, answered
    /// already, given up, or the reply came in a datagram): dropped.
    Unknown,
    /// Its call's deadline had passed: dropped, the call forgotten.
    Late,
}

/// The router has [`REPLIES_WAITING_MAX`] calls waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{waiting} calls already wait for a reply")]
pub struct RouterFull {
    pub waiting: usize,
}

/// Counters of the router, for statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplyRouterStats {
    pub waiting: usize,
    pub delivered: u64,
    pub unknown: u64,
    pub late: u64,
    /// Calls not registered because the router was full.
    pub refused: u64,
}

/// Routes replies to the calls sent back on connections.
pub struct ReplyRouter {
    waiting: Mutex<HashMap<(ConnectionId, u32), Waiting>>,
    capacity: usize,
    next_xid: AtomicU32,
    delivered: AtomicU64,
    unknown: AtomicU64,
    late: AtomicU64,
    refused: AtomicU64,
}

impl Default for ReplyRouter {
    fn default() -> Self {
        Self::new(REPLIES_WAITING_MAX)
    }
}

impl ReplyRouter {
    /// A router holding at most `capacity` waiting calls.
    pub fn new(capacity: usize) -> Self {
        ReplyRouter {
            waiting: Mutex::new(HashMap::new()),
            capacity,
            // Far from the xids a fresh client numbers its own calls from;
            // nothing depends on it (each direction has its own xids).
            next_xid: AtomicU32::new(0x4b45_0000),
            delivered: AtomicU64::new(0),
            unknown: AtomicU64::new(0),
            late: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(ConnectionId, u32), Waiting>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a call about to be sent on `conn`: the xid to send it
    /// with. Its reply goes to `waiter` if it comes on `conn` before
    /// `now + timeout`; otherwise the waiter is dropped uncalled (the
    /// caller keeps its own clock for the timeout, and calls
    /// [`ReplyRouter::forget`] when it gives up).
    pub fn expect(
        &self,
        conn: ConnectionId,
        timeout: Duration,
        now: Instant,
        waiter: ReplyWaiter,
    ) -> Result<u32, RouterFull> {
        let mut waiting = self.lock();
        if waiting.len() >= self.capacity {
            let before = waiting.len();
            waiting.retain(|_, w| w.deadline > now);
            self.late.fetch_add((before - waiting.len()) as u64, Ordering::Relaxed);
        }
        if waiting.len() >= self.capacity {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(RouterFull { waiting: waiting.len() });
        }
        // At most `capacity` xids are taken on one connection: a free
        // one comes within `capacity + 1` tries.
        let xid = loop {
            let xid = self.next_xid.fetch_add(1, Ordering::Relaxed);
            if !waiting.contains_key(&(conn, xid)) {
                break xid;
            }
        };
        waiting.insert((conn, xid), Waiting { deadline: now + timeout, waiter });
        Ok(xid)
    }

    /// The call `xid` on `conn` waits no more (it timed out, or could not
    /// be sent); true if it was still waiting.
    pub fn forget(&self, conn: ConnectionId, xid: u32) -> bool {
        self.lock().remove(&(conn, xid)).is_some()
    }

    /// A reply message (from its xid on) that came on `conn` (`None`: in
    /// a datagram, where the server sends no calls).
    pub fn route(&self, conn: Option<ConnectionId>, reply: Bytes, now: Instant) -> Routed {
        let xid = reply.get(..4).map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")));
        let found = match (conn, xid) {
            (Some(conn), Some(xid)) => self.lock().remove(&(conn, xid)),
            _ => None,
        };
        match found {
            None => {
                self.unknown.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(?conn, ?xid, "a reply to no call waiting for one; dropped");
                Routed::Unknown
            }
            Some(w) if w.deadline <= now => {
                self.late.fetch_add(1, Ordering::Relaxed);
                Routed::Late
            }
            Some(w) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
                (w.waiter)(reply);
                Routed::Delivered
            }
        }
    }

    pub fn stats(&self) -> ReplyRouterStats {
        ReplyRouterStats {
            waiting: self.lock().len(),
            delivered: self.delivered.load(Ordering::Relaxed),
            unknown: self.unknown.load(Ordering::Relaxed),
            late: self.late.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(5);

    fn reply(xid: u32) -> Bytes {
        let mut b = xid.to_be_bytes().to_vec();
        b.extend_from_slice(&1u32.to_be_bytes());
        Bytes::from(b)
    }

    /// A waiter that records the replies it gets.
    fn recorder() -> (Arc<Mutex<Vec<Bytes>>>, ReplyWaiter) {
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        (got, Box::new(move |r| g.lock().unwrap().push(r)))
    }

    #[test]
    fn a_reply_reaches_the_waiter_of_its_call_once() {
        let router = ReplyRouter::default();
        let now = Instant::now();
        let conn = ConnectionId::new(3);
        let (got, waiter) = recorder();
        let xid = router.expect(conn, TIMEOUT, now, waiter).unwrap();
        assert_eq!(router.route(Some(conn), reply(xid), now), Routed::Delivered);
        assert_eq!(got.lock().unwrap().as_slice(), &[reply(xid)]);
        // The same reply again (a retransmission, a forgery) finds nobody.
        assert_eq!(router.route(Some(conn), reply(xid), now), Routed::Unknown);
        assert_eq!(got.lock().unwrap().len(), 1);
        let stats = router.stats();
        assert_eq!((stats.waiting, stats.delivered, stats.unknown), (0, 1, 1));
    }

    #[test]
    fn replies_on_another_connection_or_with_unknown_xids_are_dropped_and_counted() {
        let router = ReplyRouter::default();
        let now = Instant::now();
        let (ours, theirs) = (ConnectionId::new(1), ConnectionId::new(2));
        let (got, waiter) = recorder();
        let xid = router.expect(ours, TIMEOUT, now, waiter).unwrap();
        assert_eq!(router.route(Some(theirs), reply(xid), now), Routed::Unknown);
        assert_eq!(router.route(Some(ours), reply(xid.wrapping_add(1)), now), Routed::Unknown);
        assert_eq!(router.route(None, reply(xid), now), Routed::Unknown);
        assert_eq!(router.route(Some(ours), Bytes::from_static(b"\0\0"), now), Routed::Unknown);
        assert!(got.lock().unwrap().is_empty());
        assert_eq!(router.stats().unknown, 4);
        // The call still waits for its own reply.
        assert_eq!(router.route(Some(ours), reply(xid), now), Routed::Delivered);
    }

    #[test]
    fn a_reply_past_its_deadline_is_dropped_and_forget_ends_a_wait() {
        let router = ReplyRouter::default();
        let now = Instant::now();
        let conn = ConnectionId::new(1);
        let (got, waiter) = recorder();
        let xid = router.expect(conn, TIMEOUT, now, waiter).unwrap();
        assert_eq!(router.route(Some(conn), reply(xid), now + TIMEOUT), Routed::Late);
        let (_, waiter) = recorder();
        let xid = router.expect(conn, TIMEOUT, now, waiter).unwrap();
        assert!(router.forget(conn, xid));
        assert!(!router.forget(conn, xid));
        assert_eq!(router.route(Some(conn), reply(xid), now), Routed::Unknown);
        assert!(got.lock().unwrap().is_empty());
        assert_eq!(router.stats().late, 1);
    }

    #[test]
    fn the_router_is_bounded_and_makes_room_from_calls_past_their_deadline() {
        let router = ReplyRouter::new(2);
        let now = Instant::now();
        let conn = ConnectionId::new(1);
        let calls = Arc::new(AtomicUsize::new(0));
        let waiter = || -> ReplyWaiter {
            let c = calls.clone();
            Box::new(move |_| _ = c.fetch_add(1, Ordering::SeqCst))
        };
        let first = router.expect(conn, Duration::from_secs(1), now, waiter()).unwrap();
        let second = router.expect(conn, TIMEOUT, now, waiter()).unwrap();
        assert_ne!(first, second);
        assert_eq!(router.expect(conn, TIMEOUT, now, waiter()), Err(RouterFull { waiting: 2 }));
        assert_eq!(router.stats().refused, 1);
        // Once the first call's deadline passed, its place is taken.
        let later = now + Duration::from_secs(2);
        let third = router.expect(conn, TIMEOUT, later, waiter()).unwrap();
        assert_eq!(router.route(Some(conn), reply(first), later), Routed::Unknown);
        assert_eq!(router.route(Some(conn), reply(third), later), Routed::Delivered);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(router.stats().waiting, 1);
    }
}

//! The network side, knfsd's way: a fixed pool of worker threads that find
//! a ready socket, take one call from it, run it, and send the reply
//! themselves. At one call in flight a call costs one thread wake-up (the
//! worker's return from `epoll_wait`), as a raw ping-pong does; there is no
//! task per request and no queue between a reader and the workers.
//!
//! - Every socket is in one epoll set. A connection's socket is registered
//!   one-shot, so exactly one worker holds its *read turn* at a time: it
//!   reads until it has a whole call, then passes the turn on (re-arming
//!   the socket, or, if more is already buffered, putting the connection
//!   on the ready queue for the next idle worker) before it runs the call.
//!   So the calls of one connection run in parallel, and connections take
//!   turns.
//! - A read turn takes with its call the whole calls already buffered
//!   behind it (`BATCH_CALLS_MAX`), runs them one after another and sends
//!   their replies in one write: under load a call costs no wake-up, and
//!   the client gets one segment for several replies. A call about to wait
//!   for storage says so (`keel_store::blocking`), and the worker hands the
//!   rest of its batch to idle workers, with the replies it holds sent
//!   first; a call that waits without saying so is found by the batch
//!   watch (a timer while batches exist), which does the same after
//!   `BATCH_STALL`. So a batch never waits behind one call's disk.
//! - A worker about to sleep while every other worker sleeps polls first
//!   (`poll_spin_us`): at one call in flight it takes the client's next
//!   call without a sleep and a wake-up. Between polls it yields its
//!   CPU, which the client its reply woke may be waiting for. Not after a
//!   large reply (`POLL_AFTER_REPLY_BYTES_MAX`), which the client takes
//!   longer to receive than the poll lasts.
//! - At most as many workers as CPUs are active (`places.rs`); the rest
//!   park where arriving calls do not wake them. A larger pool in
//!   `epoll_wait` cost a wake-up per call under load: epoll wakes a
//!   sleeping waiter for each arrival even when a busy worker would take
//!   the call a moment later. A worker about to wait for storage gives its
//!   place up: to a parked worker, unless another worker with a place runs
//!   no call (it takes what arrives; the place stays free for the waiter to
//!   take back before its reply, and goes to a parked worker once every
//!   worker with a place runs a call). A sentinel lends one more place when
//!   every active worker has waited off the CPU in one call for
//!   `PLACE_STALL`.
//! - While a large record (a WRITE) is half received, the socket wakes a
//!   worker only once the rest is there (SO_RCVLOWAT, `conn.rs`), not at
//!   every segment.
//! - A call is taken only with a slot of its connection
//!   (`max_requests_per_connection`) and its bytes from the memory budget
//!   (`budget.rs`); without them the connection is parked, not polled,
//!   until a reply goes out or the budget grants the bytes.
//! - The worker writes its reply with a non-blocking `sendmsg`; what the
//!   socket does not take waits in the connection's outbox, flushed by
//!   whichever worker gets the socket's (separately registered) write
//!   readiness.
//! - Listeners, UDP sockets and the batch watch are one-shot too, armed
//!   again by the worker that took the event: one worker wakes for a
//!   connection, datagram or tick, not every idle one.
//! - A sweeper thread ages connections (`conns.rs`: idle, stalled).
//!
//! Bounds: the ready queue holds each connection's read turn at most once
//! (only the holder of a read turn puts it there) and calls handed off
//! from batches, which hold slots; calls in flight per connection and
//! bytes in flight overall are bounded by the slots and the budget.

// Every `unsafe` of this crate is in `sys`.
#![deny(unsafe_code)]

mod budget;
mod conn;
mod conns;
mod places;
mod poller;
#[allow(unsafe_code)]
mod sys;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use keel_rpc::{ConnectionId, Dispatcher};

pub use budget::Budget;
use conn::{Connection, Reply, TakenCall};
use conns::CloseReason;
pub use conns::Connections;
use places::{Places, Watch};
use poller::{Poller, Token};

/// Largest RPC record accepted: a 1 MiB WRITE plus headers, with room.
pub const RECORD_BYTES_MAX: usize = (1 << 20) + (64 << 10);
/// How long a stopping server waits for clients to close their side after
/// it closed its own, so that its last replies are not reset away. A client
/// that can be reached closes within a round trip.
pub const LINGER: Duration = Duration::from_secs(2);
/// The same in an HA pair, where a stop is most often a service moving
/// away from a node that lost its public link: a client that cannot be
/// reached will not close, and every moment waited here the client waits
/// for the other node.
pub const LINGER_HA: Duration = Duration::from_millis(250);
/// Connections accepted per wake-up of a worker, at most.
const ACCEPTS_PER_TURN: usize = 32;
/// Datagrams served per wake-up of a worker, at most.
const DATAGRAMS_PER_TURN: usize = 16;
/// Largest datagram received (portmap, later NLM: small calls).
const DATAGRAM_BYTES_MAX: usize = 64 << 10;
/// Calls a read turn takes together, at most: enough for one write to
/// carry several replies, few enough that a batch is short.
const BATCH_CALLS_MAX: usize = 8;
/// How long a batch's call may run before the batch watch hands the rest
/// of the batch to other workers (a call that waited without saying so);
/// also the watch timer's period.
const BATCH_STALL: Duration = Duration::from_micros(500);
/// A worker that has just sent a reply at least this large does not poll
/// before it sleeps: a client at one call in flight sends its next call
/// only once it has received the whole reply, which takes longer than the
/// poll (a 1 MiB READ reply took 250-300 µs on the bench VM's loopback),
/// so the poll only took CPU from the clients.
const POLL_AFTER_REPLY_BYTES_MAX: usize = 256 << 10;
/// How long every worker holding a place must wait in its call, off the
/// CPU, before a parked worker is lent one more (places.rs); also how
/// often the sentinel looks while calls run.
const PLACE_STALL: Duration = Duration::from_millis(1);

/// Whether a listener's peers are checked against the exports' client
/// lists before they take a connection slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// NFS and MOUNT: hosts in no client list are closed at accept.
    Clients,
    /// The portmapper answers anyone, as rpcbind does.
    Anyone,
}

/// What the transport serves.
pub struct TransportConfig {
    pub workers: usize,
    /// How long an idle worker polls before it sleeps (0: never).
    pub poll_spin: Duration,
    pub requests_per_connection: usize,
    pub dispatcher: Arc<Dispatcher>,
    pub budget: Arc<Budget>,
    pub conns: Arc<Connections>,
    /// Whether a host is in some export's client list.
    pub admits: Box<dyn Fn(IpAddr) -> bool + Send + Sync>,
    pub listeners: Vec<(TcpListener, Admit)>,
    /// UDP sockets, each with the dispatcher of the programs served on it.
    pub datagrams: Vec<(UdpSocket, Arc<Dispatcher>)>,
    /// Called on a worker thread after a handler panicked, to put the
    /// thread back in the state every call starts from. The server says
    /// what that is (the local store's identity, `ident::reset`): the
    /// transport knows no store.
    pub reset_after_panic: fn() -> io::Result<()>,
}

/// What the worker pool is doing now (statistics: `keel stat`, metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolUsage {
    pub workers: usize,
    /// Worker threads running: fewer than `workers` only if some died
    /// (a panic outside a call), which makes the server unhealthy.
    pub workers_alive: usize,
    /// Workers not waiting for work: taking a call, running it, writing
    /// replies, accepting.
    pub workers_busy: usize,
    /// Workers that may be active at once (as many as CPUs; places.rs).
    pub places: usize,
    /// Places lent since the start, each when every active worker had
    /// waited in a call that did not say it would (a sign of storage that
    /// stalls where Keel does not expect it).
    pub places_lent: u64,
    /// Read turns of connections with more buffered, and calls handed on
    /// from a batch, waiting for an idle worker.
    pub ready_queue: usize,
    /// Connections whose next call waits for a slot: all of
    /// `max_requests_per_connection` are in flight.
    pub parked_for_slots: usize,
    /// Connections whose next call waits for bytes of the memory budget.
    pub parked_for_budget: usize,
}

/// Reads the pool's [`PoolUsage`] without keeping the transport alive.
#[derive(Clone)]
pub struct PoolProbe {
    shared: Weak<Shared>,
}

impl PoolProbe {
    /// The usage now; all zeros once the transport is gone (or for a probe
    /// of no transport, in tests).
    pub fn usage(&self) -> PoolUsage {
        let Some(sh) = self.shared.upgrade() else { return PoolUsage::default() };
        let alive = sh.alive_workers.load(Ordering::SeqCst);
        let mut usage = PoolUsage {
            workers: sh.workers,
            workers_alive: alive,
            workers_busy: alive.saturating_sub(sh.idle_workers.load(Ordering::SeqCst) + sh.places.parked()),
            places: sh.places.places(),
            places_lent: sh.places.lent_total(),
            ready_queue: sh.ready.lock().expect("ready queue lock").len(),
            ..PoolUsage::default()
        };
        for c in sh.connections() {
            match c.parked_for() {
                Some(conn::Parked::Slots) => usage.parked_for_slots += 1,
                Some(conn::Parked::Budget) => usage.parked_for_budget += 1,
                None => {}
            }
        }
        usage
    }

    /// A probe of no pool, which reads every count as 0 (for the server's
    /// tests, which have statistics but no transport).
    pub fn none() -> PoolProbe {
        PoolProbe { shared: Weak::new() }
    }
}

/// The running transport.
pub struct Transport {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    sweeper: Option<JoinHandle<()>>,
}

const SERVING: u8 = 0;
/// No new connections or calls; calls in flight finish.
const DRAINING: u8 = 1;
/// Workers leave.
const STOPPED: u8 = 2;

pub(crate) struct Shared {
    poller: Poller,
    dispatcher: Arc<Dispatcher>,
    budget: Arc<Budget>,
    conns: Arc<Connections>,
    admits: Box<dyn Fn(IpAddr) -> bool + Send + Sync>,
    requests_per_connection: usize,
    listeners: Vec<(TcpListener, Admit)>,
    datagrams: Vec<(UdpSocket, Arc<Dispatcher>)>,
    reset_after_panic: fn() -> io::Result<()>,
    /// Open connections by the slot in their tokens.
    table: Mutex<Table>,
    /// The id of the next connection accepted (ids are never reused,
    /// unlike slots).
    next_connection_id: AtomicU64,
    /// Read turns and calls waiting for a worker.
    ready: Mutex<VecDeque<Ready>>,
    /// Each worker's batch, for the batch watch.
    batches: Vec<Arc<Batch>>,
    /// Whether the batch watch's timer runs.
    watching: AtomicBool,
    /// Where batches' clocks start.
    epoch: Instant,
    /// Workers in (or about to enter) epoll_wait.
    idle_workers: AtomicUsize,
    /// Workers allowed to be active at once (places.rs).
    places: Arc<Places>,
    /// An idle worker polls without sleeping (at most one does).
    spinning: AtomicBool,
    poll_spin: Duration,
    /// The pool's size, and its threads running now.
    workers: usize,
    alive_workers: AtomicUsize,
    state: AtomicU8,
    /// Lets the sweeper sleep until the next sweep or the stop.
    sweeper_wake: (Mutex<bool>, std::sync::Condvar),
}

/// What waits in the ready queue.
enum Ready {
    /// A connection's read turn: more of it is buffered.
    Turn(Arc<Connection>),
    /// A call of a batch, handed on.
    Call(TakenCall),
}

/// The calls a worker took together from a connection and runs one after
/// another, and the replies to them it holds to send together. The batch
/// watch and the worker's own announcement of a wait hand them on.
#[derive(Default)]
struct Batch {
    queued: Mutex<VecDeque<TakenCall>>,
    unsent: Mutex<Vec<Reply>>,
    /// When the running call of the batch started (ns since `epoch`, at
    /// least 1); 0 while none runs.
    running_since: AtomicU64,
    /// Whether the batch's worker holds one of the places (places.rs).
    holds_place: AtomicBool,
    /// The worker's thread id, for the sentinel to see whether it runs.
    tid: AtomicI32,
    /// The bytes of the replies the worker sent last (with its last call).
    sent_bytes: AtomicUsize,
}

thread_local! {
    /// The batch of the worker on this thread, and its pool.
    static WORKER_BATCH: RefCell<Option<(Arc<Batch>, Arc<Shared>)>> = const { RefCell::new(None) };
}

/// The workers' hook for `keel_store::blocking`: the call running is about
/// to wait for storage, so what its batch holds goes on now, and so does
/// its worker's place: to a parked worker, unless another worker with a
/// place runs no call (places.rs).
fn worker_may_block() {
    if let Some((batch, shared)) = WORKER_BATCH.with(|b| b.borrow().clone()) {
        // Calls handed on from the batch may need more workers than the
        // one free to take calls.
        let handed_calls = batch.hand_on();
        if batch.holds_place.swap(false, Ordering::SeqCst) {
            shared.places.give_back_unless(|| !handed_calls && shared.free_hand(None));
        }
    }
}

impl Batch {
    /// Sends the replies held and puts the calls not started on the ready
    /// queue, for idle workers; whether there were any.
    fn hand_on(&self) -> bool {
        let unsent = std::mem::take(&mut *self.unsent.lock().expect("batch lock"));
        if let Some(conn) = unsent.first().map(|r| r.conn().clone())
            && let Some(sh) = conn.shared_handle()
        {
            conn.send(&sh, unsent);
        }
        let calls = std::mem::take(&mut *self.queued.lock().expect("batch lock"));
        let handed = !calls.is_empty();
        if let Some(sh) = calls.front().and_then(|c| c.conn().shared_handle()) {
            sh.push_ready_all(calls.into_iter().map(Ready::Call));
        }
        handed
    }

    fn holds_something(&self) -> bool {
        !self.queued.lock().expect("batch lock").is_empty() || !self.unsent.lock().expect("batch lock").is_empty()
    }
}

/// Connections by slot; a slot's generation tells its connections apart,
/// so a stale token never reaches a newer connection.
#[derive(Default)]
struct Table {
    slots: Vec<(u32, Option<Arc<Connection>>)>,
    free: Vec<u32>,
}

impl Transport {
    pub fn start(config: TransportConfig) -> io::Result<Transport> {
        let TransportConfig {
            workers,
            poll_spin,
            requests_per_connection,
            dispatcher,
            budget,
            conns,
            admits,
            listeners,
            datagrams,
            reset_after_panic,
        } = config;
        let poller = Poller::new()?;
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let places = Arc::new(Places::new(cpus.min(workers.max(1)), PLACE_STALL));
        for (i, (l, _)) in listeners.iter().enumerate() {
            l.set_nonblocking(true)?;
            poller.add_shared(l, Token::Listener(i as u32))?;
        }
        for (i, (s, _)) in datagrams.iter().enumerate() {
            s.set_nonblocking(true)?;
            poller.add_shared(s, Token::Datagram(i as u32))?;
        }
        let shared = Arc::new(Shared {
            poller,
            dispatcher,
            budget,
            conns,
            admits,
            requests_per_connection,
            listeners,
            datagrams,
            reset_after_panic,
            table: Mutex::default(),
            next_connection_id: AtomicU64::new(1),
            ready: Mutex::default(),
            batches: (0..workers.max(1)).map(|_| Arc::default()).collect(),
            watching: AtomicBool::new(false),
            epoch: Instant::now(),
            idle_workers: AtomicUsize::new(0),
            places,
            spinning: AtomicBool::new(false),
            poll_spin,
            workers: workers.max(1),
            alive_workers: AtomicUsize::new(0),
            state: AtomicU8::new(SERVING),
            sweeper_wake: (Mutex::new(false), std::sync::Condvar::new()),
        });
        let workers = (0..workers.max(1))
            .map(|i| {
                let shared = shared.clone();
                shared.alive_workers.fetch_add(1, Ordering::SeqCst);
                std::thread::Builder::new().name(format!("keel-worker-{i}")).spawn(move || {
                    let batch = shared.batches[i].clone();
                    batch.tid.store(crate::sys::gettid(), Ordering::SeqCst);
                    let _alive = Alive(shared.clone(), batch.clone());
                    WORKER_BATCH.with(|b| *b.borrow_mut() = Some((batch.clone(), shared.clone())));
                    keel_store::blocking::set_hook(Some(worker_may_block));
                    shared.work(&batch)
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        let sweeper = {
            let shared = shared.clone();
            std::thread::Builder::new().name("keel-sweeper".into()).spawn(move || shared.sweep_until_stopped())?
        };
        Ok(Transport { shared, workers, sweeper: Some(sweeper) })
    }

    pub fn probe(&self) -> PoolProbe {
        PoolProbe { shared: Arc::downgrade(&self.shared) }
    }

    /// Stops: no new connections or calls; the calls in flight finish and
    /// their replies are written (for up to `drain_timeout`); the server
    /// closes its side and waits up to `linger` for clients to close
    /// theirs; then the workers leave.
    pub fn stop(mut self, drain_timeout: Duration, linger: Duration) {
        let sh = &self.shared;
        sh.state.store(DRAINING, Ordering::SeqCst);
        for (l, _) in &sh.listeners {
            sh.poller.remove(l);
            // A shut listening socket stops listening: new connections are
            // refused at once (the kernel would otherwise complete them
            // into the backlog).
            let _ = socket2::SockRef::from(l).shutdown(std::net::Shutdown::Both);
        }
        for (s, _) in &sh.datagrams {
            sh.poller.remove(s);
        }
        // Each connection finishes its calls in flight, closes its side,
        // and waits (for `linger`) for its client to close too: closing with
        // unread input would reset the connection and lose replies the
        // client has not read yet.
        for c in sh.connections() {
            c.drain(sh);
        }
        let deadline = Instant::now() + drain_timeout;
        while !sh.conns.wait_empty(Duration::from_millis(50)) {
            for c in sh.connections() {
                if c.lingering_for().is_some_and(|t| t >= linger) {
                    c.close(CloseReason::Stopping);
                }
            }
            if Instant::now() >= deadline {
                tracing::warn!("some connections did not finish within {drain_timeout:?}");
                for c in sh.connections() {
                    c.close(CloseReason::Stopping);
                }
                sh.conns.wait_empty(Duration::from_secs(1));
                break;
            }
        }
        sh.state.store(STOPPED, Ordering::SeqCst);
        sh.places.stop();
        sh.poller.wake();
        *sh.sweeper_wake.0.lock().expect("sweeper lock") = true;
        sh.sweeper_wake.1.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        if let Some(s) = self.sweeper.take() {
            let _ = s.join();
        }
    }
}

/// Counts a worker thread out when it ends, by return or by panic, and
/// gives its place back.
struct Alive(Arc<Shared>, Arc<Batch>);

impl Drop for Alive {
    fn drop(&mut self) {
        if self.1.holds_place.swap(false, Ordering::SeqCst) {
            self.0.places.give_back();
        }
        self.0.alive_workers.fetch_sub(1, Ordering::SeqCst);
        if std::thread::panicking() {
            tracing::error!("a worker thread panicked outside a call and is gone");
        }
    }
}

/// A listener's or UDP socket's event goes to one worker (one-shot): the
/// worker arms it again when its turn ends, by return or by panic, and
/// what still waits on it wakes the next.
struct RearmShared<'a> {
    shared: &'a Shared,
    fd: RawFd,
    token: Token,
}

impl Drop for RearmShared<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.shared.poller.rearm_shared(&self.fd, self.token) {
            tracing::error!(error = %e, token = ?self.token, "cannot poll a listening socket again");
        }
    }
}

impl Shared {
    fn state(&self) -> u8 {
        self.state.load(Ordering::SeqCst)
    }

    pub(crate) fn draining(&self) -> bool {
        self.state() != SERVING
    }

    /// A worker: with a place (places.rs), ready connections first, else
    /// whatever epoll has.
    fn work(self: Arc<Self>, batch: &Batch) {
        let mut events = poller::Events::new();
        loop {
            if batch.holds_place.load(Ordering::SeqCst) && self.places.return_lent(|| self.watch_places(Some(batch))) {
                batch.holds_place.store(false, Ordering::SeqCst);
            }
            if !batch.holds_place.load(Ordering::SeqCst) {
                if !self.places.take(|| self.watch_places(None), || self.free_hand(None)) {
                    return;
                }
                batch.holds_place.store(true, Ordering::SeqCst);
            }
            if let Some(r) = self.pop_ready() {
                self.run_ready(r, batch);
                continue;
            }
            if self.state() == STOPPED {
                // Pass the stop on to the next worker.
                self.poller.wake();
                return;
            }
            if self.spin(&mut events, batch) {
                continue;
            }
            // Announced before the ready queue is looked at again, so a
            // connection queued in between wakes someone (see push_ready).
            self.idle_workers.fetch_add(1, Ordering::SeqCst);
            if let Some(r) = self.pop_ready() {
                self.idle_workers.fetch_sub(1, Ordering::SeqCst);
                self.run_ready(r, batch);
                continue;
            }
            let fired = self.poller.wait(&mut events);
            self.idle_workers.fetch_sub(1, Ordering::SeqCst);
            match fired {
                Ok(Some(token)) => self.serve(token, batch),
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(error = %e, "epoll_wait failed");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    /// Whether a worker with a place (but `except`) runs no call: it takes
    /// the next call that arrives, polling or from epoll_wait, or is about
    /// to. A place given back meanwhile is left free (places.rs).
    fn free_hand(&self, except: Option<&Batch>) -> bool {
        self.place_holders(except).any(|b| b.running_since.load(Ordering::SeqCst) == 0)
    }

    /// One idle worker at a time polls, without sleeping, for up to
    /// `poll_spin`: at one call in flight the client's next call arrives
    /// within a round trip, and the worker that answered the last one
    /// takes it without a sleep and a wake-up; under load, calls queued
    /// for the ready queue need no wake-up while someone spins. Between
    /// polls it yields: a poll that held its CPU kept waiting what the
    /// kernel had woken there, the client its reply woke or the log's
    /// kernel work (with the yield, `sync` creates and removes from one
    /// process 1-23 % faster, stat calls from two 1.3-2.3 ×;
    /// docs/benchmarks.md). Not right after a large reply
    /// (`POLL_AFTER_REPLY_BYTES_MAX`). True if it found work (and did it).
    fn spin(self: &Arc<Self>, events: &mut poller::Events, batch: &Batch) -> bool {
        let after_large_reply = batch.sent_bytes.swap(0, Ordering::Relaxed) >= POLL_AFTER_REPLY_BYTES_MAX;
        if self.poll_spin.is_zero()
            || after_large_reply
            || self.spinning.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_err()
        {
            return false;
        }
        let until = Instant::now() + self.poll_spin;
        let (mut ready, mut event) = (None, None);
        while Instant::now() < until && self.others_idle() {
            ready = self.pop_ready();
            if ready.is_some() {
                break;
            }
            event = self.poller.poll(events).ok().flatten();
            if event.is_some() {
                break;
            }
            std::thread::yield_now();
        }
        // Stopped before looking at the ready queue again (see push_ready).
        self.spinning.store(false, Ordering::SeqCst);
        if ready.is_none() && event.is_none() {
            return false;
        }
        // A connection queued while this worker polled woke nobody, and
        // what this worker found may be a long call: a sleeping worker
        // takes the queue.
        if !self.ready.lock().expect("ready queue lock").is_empty() && self.idle_workers.load(Ordering::SeqCst) > 0 {
            self.poller.wake();
        }
        match (ready, event) {
            (Some(r), _) => self.run_ready(r, batch),
            (None, Some(token)) => self.serve(token, batch),
            (None, None) => {}
        }
        true
    }

    /// Whether every other worker sleeps or is parked: spinning beside
    /// busy ones would take their CPU.
    fn others_idle(&self) -> bool {
        self.idle_workers.load(Ordering::SeqCst) + self.places.parked() + 1 >= self.alive_workers.load(Ordering::SeqCst)
    }

    /// What the workers holding places (but `except`) do, for the
    /// sentinel (places.rs): stuck if each has been in one call for the
    /// stall and does not run.
    fn watch_places(&self, except: Option<&Batch>) -> Watch {
        let (now, stall) = (self.clock_ns(), self.places.stall().as_nanos() as u64);
        let (mut waiting, mut calls, mut lately) = (false, false, false);
        for b in self.place_holders(except) {
            match b.running_since.load(Ordering::SeqCst) {
                0 => waiting = true,
                since => {
                    calls = true;
                    lately |= now.saturating_sub(since) < stall;
                }
            }
        }
        match (calls, waiting) {
            (false, _) => Watch::Quiet,
            (true, true) => Watch::Free,
            _ if lately => Watch::Busy,
            _ if self.place_holders(except).any(|b| places::thread_runs(b.tid.load(Ordering::SeqCst))) => Watch::Busy,
            _ => Watch::Stuck,
        }
    }

    fn place_holders<'a>(&'a self, except: Option<&'a Batch>) -> impl Iterator<Item = &'a Arc<Batch>> + 'a {
        self.batches
            .iter()
            .filter(move |b| b.holds_place.load(Ordering::SeqCst) && !except.is_some_and(|e| std::ptr::eq(e, &***b)))
    }

    fn serve(self: &Arc<Self>, token: Token, batch: &Batch) {
        match token {
            Token::Wake => {}
            Token::Listener(i) => {
                let _rearm = RearmShared { shared: self, fd: self.listeners[i as usize].0.as_raw_fd(), token };
                self.accept(i as usize);
            }
            Token::Datagram(i) => {
                let _rearm = RearmShared { shared: self, fd: self.datagrams[i as usize].0.as_raw_fd(), token };
                self.answer_datagrams(i as usize);
            }
            Token::Read(slot, generation) => {
                if let Some(c) = self.lookup(slot, generation) {
                    self.take_turn(&c, batch);
                }
            }
            Token::Watch => self.watch_batches(),
            Token::Write(slot, generation) => {
                if let Some(c) = self.lookup(slot, generation) {
                    c.write_turn(self);
                }
            }
        }
    }

    fn run_ready(self: &Arc<Self>, ready: Ready, batch: &Batch) {
        match ready {
            Ready::Turn(c) => self.take_turn(&c, batch),
            Ready::Call(call) => self.run_batch(batch, vec![call]),
        }
    }

    /// A connection's read turn, and the calls it took.
    fn take_turn(self: &Arc<Self>, c: &Arc<Connection>, batch: &Batch) {
        let mut taken = Vec::new();
        c.read_turn(self, &mut taken);
        if !taken.is_empty() {
            self.run_batch(batch, taken);
        }
    }

    /// Runs calls of one connection one after another; while more of them
    /// wait, the replies are held and go out together with the last one.
    fn run_batch(self: &Arc<Self>, batch: &Batch, calls: Vec<TakenCall>) {
        let mut calls = calls.into_iter();
        let mut next = calls.next();
        let rest: VecDeque<TakenCall> = calls.collect();
        if !rest.is_empty() {
            *batch.queued.lock().expect("batch lock") = rest;
            self.watch(true);
        }
        while let Some(taken) = next {
            let conn = taken.conn().clone();
            batch.running_since.store(self.clock_ns(), Ordering::SeqCst);
            // A place left free for a worker waiting for storage, while
            // this one was free to take calls, goes to a parked worker
            // once no worker with a place is (places.rs).
            if self.places.any_free() && !self.free_hand(Some(batch)) {
                self.places.wake_if_unheard();
            }
            let reply = conn.execute(self, taken.call, taken.hold);
            batch.running_since.store(0, Ordering::SeqCst);
            // A place given up for a wait and still free is this worker's
            // again before the reply goes: the client's next call finds it
            // polling, rather than a parked worker woken for it.
            if !batch.holds_place.load(Ordering::SeqCst) && self.places.try_take() {
                batch.holds_place.store(true, Ordering::SeqCst);
            }
            let mut queued = batch.queued.lock().expect("batch lock");
            next = queued.pop_front();
            let last = next.is_none();
            drop(queued);
            let mut unsent = batch.unsent.lock().expect("batch lock");
            unsent.extend(reply);
            if last && !unsent.is_empty() {
                let replies = std::mem::take(&mut *unsent);
                drop(unsent);
                let bytes = replies.iter().flat_map(|r| &r.segments).map(keel_xdr::Segment::len).sum();
                batch.sent_bytes.store(bytes, Ordering::Relaxed);
                conn.send(self, replies);
            }
        }
    }

    /// ns since the transport started, never 0.
    fn clock_ns(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).max(1)
    }

    /// Starts the batch watch's timer (`on`, if it does not run), or stops it.
    fn watch(&self, on: bool) {
        if on {
            if !self.watching.swap(true, Ordering::SeqCst) {
                self.poller.set_watch(Some(BATCH_STALL));
            }
        } else {
            self.watching.store(false, Ordering::SeqCst);
            self.poller.set_watch(None);
        }
    }

    /// The batch watch: a batch whose call has run for `BATCH_STALL` is
    /// handed on; with no batch left, the timer stops.
    fn watch_batches(&self) {
        self.poller.ack_watch();
        let now = self.clock_ns();
        let stall = BATCH_STALL.as_nanos() as u64;
        let mut holding = false;
        for b in &self.batches {
            if !b.holds_something() {
                continue;
            }
            let since = b.running_since.load(Ordering::SeqCst);
            if since != 0 && now.saturating_sub(since) >= stall {
                b.hand_on();
            } else {
                holding = true;
            }
        }
        if !holding {
            self.watch(false);
            // A batch that began while the timer was being stopped saw it
            // running and did not start it.
            if self.batches.iter().any(|b| b.holds_something()) {
                self.watch(true);
            }
        }
    }

    fn push_ready(&self, r: Ready) {
        self.push_ready_all(std::iter::once(r));
    }

    /// Queues for idle workers and wakes as many as there are items (a
    /// spinning one takes the first without a wake-up); each that takes
    /// from the queue wakes another while more wait (see pop_ready).
    fn push_ready_all(&self, items: impl Iterator<Item = Ready>) {
        let mut ready = self.ready.lock().expect("ready queue lock");
        let before = ready.len();
        ready.extend(items);
        let added = ready.len() - before;
        drop(ready);
        let spinning = usize::from(self.spinning.load(Ordering::SeqCst));
        let wakes = added.saturating_sub(spinning).min(self.idle_workers.load(Ordering::SeqCst));
        for _ in 0..wakes {
            self.poller.wake();
        }
    }

    fn pop_ready(&self) -> Option<Ready> {
        let mut ready = self.ready.lock().expect("ready queue lock");
        let c = ready.pop_front()?;
        // One wake-up may stand for several queued connections.
        if !ready.is_empty() && self.idle_workers.load(Ordering::SeqCst) > 0 {
            self.poller.wake();
        }
        Some(c)
    }

    fn accept(self: &Arc<Self>, i: usize) {
        let (listener, admit) = &self.listeners[i];
        for _ in 0..ACCEPTS_PER_TURN {
            let (stream, peer) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(e) => {
                    // Out of descriptors, typically: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    std::thread::sleep(Duration::from_millis(100));
                    return;
                }
            };
            if self.draining() {
                return;
            }
            // Before it takes a slot: such a host could only be refused.
            if *admit == Admit::Clients && !(self.admits)(peer.ip()) {
                tracing::info!(%peer, "connection refused: the host is in no export's client list");
                continue;
            }
            let Some(place) = self.conns.admit(peer, stream.local_addr().ok()) else {
                tracing::warn!(%peer, "connection refused: max_connections reached and none is idle");
                continue;
            };
            let (slot, generation) = self.reserve_slot();
            let id = ConnectionId::new(self.next_connection_id.fetch_add(1, Ordering::Relaxed));
            match Connection::open(self, stream, peer, place, (slot, generation), id) {
                Ok(c) => {
                    self.table.lock().expect("connection table lock").slots[slot as usize].1 = Some(c.clone());
                    if let Err(e) = c.start(self) {
                        tracing::warn!(%peer, error = %e, "cannot poll a new connection");
                        c.close(CloseReason::Stopping);
                    }
                }
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "cannot set up a new connection");
                    self.free_slot(slot);
                }
            }
        }
        // More may be waiting: the re-armed listener says so at once.
    }

    fn answer_datagrams(&self, i: usize) {
        let (socket, dispatcher) = &self.datagrams[i];
        let local = socket.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let mut buf = vec![0u8; DATAGRAM_BYTES_MAX];
        for _ in 0..DATAGRAMS_PER_TURN {
            let (n, peer) = match socket.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::debug!(error = %e, "datagram receive failed");
                    return;
                }
            };
            let record = bytes::Bytes::copy_from_slice(&buf[..n]);
            let Some(segments) = dispatcher.handle(record, peer, local) else { continue };
            match datagram(segments) {
                Ok(reply) => drop(socket.send_to(&reply, peer)),
                // No answer rather than a wrong one: the client retries.
                Err(e) => tracing::debug!(%peer, error = %e, "datagram reply dropped"),
            }
        }
    }

    /// A free slot of the connection table and its generation.
    fn reserve_slot(&self) -> (u32, u32) {
        let mut t = self.table.lock().expect("connection table lock");
        match t.free.pop() {
            Some(slot) => {
                let entry = &mut t.slots[slot as usize];
                entry.0 = Token::generation_bits(entry.0.wrapping_add(1));
                (slot, entry.0)
            }
            None => {
                t.slots.push((0, None));
                ((t.slots.len() - 1) as u32, 0)
            }
        }
    }

    pub(crate) fn free_slot(&self, slot: u32) {
        let mut t = self.table.lock().expect("connection table lock");
        t.slots[slot as usize].1 = None;
        t.free.push(slot);
    }

    fn lookup(&self, slot: u32, generation: u32) -> Option<Arc<Connection>> {
        let t = self.table.lock().expect("connection table lock");
        match t.slots.get(slot as usize) {
            Some((g, Some(c))) if *g == generation => Some(c.clone()),
            _ => None,
        }
    }

    fn connections(&self) -> Vec<Arc<Connection>> {
        let t = self.table.lock().expect("connection table lock");
        t.slots.iter().filter_map(|(_, c)| c.clone()).collect()
    }

    fn sweep_until_stopped(&self) {
        let interval = self.conns.sweep_interval();
        let (lock, wake) = &self.sweeper_wake;
        let mut stopped = lock.lock().expect("sweeper lock");
        loop {
            let (s, _) = wake.wait_timeout_while(stopped, interval, |s| !*s).expect("sweeper lock");
            stopped = s;
            if *stopped {
                return;
            }
            self.conns.sweep();
        }
    }
}

/// A reply as one datagram: a pipe of file data (a READ's) is read out, as
/// a datagram cannot be spliced into.
fn datagram(segments: keel_rpc::ReplySegments) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(segments.iter().map(keel_xdr::Segment::len).sum());
    for s in segments {
        match s {
            keel_xdr::Segment::Bytes(b) => out.extend_from_slice(&b),
            keel_xdr::Segment::Spliced(s) => match s.downcast::<keel_store::pipe::FilePipe>() {
                Ok(mut pipe) => out.extend_from_slice(&pipe.read_to_bytes()?),
                Err(s) => {
                    return Err(io::Error::other(format!("a reply carries a payload a datagram cannot hold: {s:?}")));
                }
            },
        }
    }
    Ok(out)
}

//! One TCP connection: its read turn (assembling calls, taking a slot and
//! budget for each), the running of a call, and its outbox.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use keel_rpc::msg::{AcceptStat, ReplyStat};
use keel_rpc::record::{RecordAssembler, record_mark};
use keel_rpc::{Backchannel, BackchannelError, CallConnection, ConnectionId, status_reply};
use keel_store::pipe::FilePipe;
use keel_xdr::Segment;

use super::poller::Token;
use super::{RECORD_BYTES_MAX, Shared};
use crate::budget::{Account, Charge, Charged, Wait};
use crate::conns::{CallInFlight, CloseReason, Slot};
use crate::sys;

/// Bytes read from a socket at a time when no large record is expected.
const READ_CHUNK_BYTES: usize = 64 << 10;
/// Segments handed to one sendmsg (IOV_MAX is 1024).
const WRITEV_SEGMENTS_MAX: usize = 512;
/// Calls sent back on a connection (the backchannel) that wait to be
/// written, at most: an NFSv4.1 client offers a backchannel of a few slots.
pub(super) const BACKCHANNEL_CALLS_QUEUED_MAX: usize = 16;
/// Bytes of one call sent back on a connection, at most (a CB_COMPOUND
/// recalling delegations is a few hundred).
pub(super) const BACKCHANNEL_CALL_BYTES_MAX: usize = 64 << 10;

/// Why a read turn stopped taking calls.
const PARKED_NOT: u8 = 0;
/// All of `max_requests_per_connection` are in flight.
const PARKED_SLOTS: u8 = 1;
/// The memory budget has not granted the next call's bytes yet.
const PARKED_BUDGET: u8 = 2;

/// What a parked read turn waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parked {
    Slots,
    Budget,
}

pub struct Connection {
    shared: Weak<Shared>,
    stream: TcpStream,
    /// A duplicate of the socket, registered for write readiness.
    write_fd: OwnedFd,
    slot: u32,
    generation: u32,
    /// What the calls that come on it know it by: its id and its
    /// backchannel.
    call_connection: CallConnection,
    peer: SocketAddr,
    local: SocketAddr,
    /// The connection's place in the connection table.
    place: Slot,
    account: Arc<Account>,
    read: Mutex<ReadSide>,
    out: Mutex<Outbox>,
    /// Calls taken and not yet answered (their replies not yet written).
    in_flight: AtomicUsize,
    parked: AtomicU8,
    /// Set when no more calls are taken: the client ended, the server
    /// closes it, or the server stops.
    reading_done: AtomicBool,
    /// Set when the server closes it: what waits to be sent is dropped.
    aborted: AtomicBool,
    /// Set when the server stops: once the calls in flight are answered,
    /// the server closes its side and waits for the client to close.
    draining: AtomicBool,
    /// When the server closed its side, while stopping.
    lingering_since: Mutex<Option<Instant>>,
    finished: AtomicBool,
}

struct ReadSide {
    buf: BytesMut,
    assembler: RecordAssembler,
    /// A call taken from `buf` that waits for a slot or its bytes.
    call: Option<Bytes>,
    /// The budget's bytes for a large record being received.
    receiving: Option<Charge>,
    /// A charge queued in the budget.
    waiting: Option<Wait>,
    /// Why the reading ended, for the log.
    ended: Option<String>,
    /// The socket's receive low-water mark (SO_RCVLOWAT) as last set.
    low_water: usize,
}

impl ReadSide {
    fn next_record(&mut self) -> Result<Option<Bytes>, keel_rpc::record::RecordError> {
        self.assembler.next_record(&mut self.buf)
    }
}

#[derive(Default)]
struct Outbox {
    /// Replies not (completely) written yet, in order; the first may be
    /// partly written.
    queue: VecDeque<Pending>,
    front_written: usize,
    /// The socket failed or the connection was aborted: replies are dropped.
    closed: bool,
    /// The write descriptor is in the epoll set (added once).
    write_added: bool,
}

impl Outbox {
    /// Counts `n` more bytes of the queue as written; the replies now
    /// written whole leave the queue (to be dropped by the caller once the
    /// lock is released).
    fn advance(&mut self, n: usize) -> Vec<Pending> {
        let mut written = self.front_written + n;
        let mut done = Vec::new();
        while let Some(front) = self.queue.front() {
            let len: usize = front.segments.iter().map(Segment::len).sum();
            if written < len {
                break;
            }
            written -= len;
            done.extend(self.queue.pop_front());
        }
        self.front_written = written;
        done
    }
}

struct Pending {
    /// Bytes, and pipes of file data (a READ's), drained as they are sent.
    segments: Vec<Segment>,
    _hold: Hold,
}

/// What a message in the outbox holds until it is written or dropped.
enum Hold {
    /// A reply: what its call holds.
    Reply { _call: CallHold },
    /// A call sent back: its place among the backchannel's queued calls.
    Backchannel { _place: QueuedCall },
}

/// A place among [`BACKCHANNEL_CALLS_QUEUED_MAX`], given back on drop,
/// and the call's bytes of the budget.
struct QueuedCall {
    queued: Arc<AtomicUsize>,
    _charge: Option<Charge>,
}

impl Drop for QueuedCall {
    fn drop(&mut self) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A connection's backchannel: queues calls in its outbox, behind the
/// replies already there. It does not keep the connection open.
struct ConnectionWriter {
    conn: Weak<Connection>,
    /// Calls queued and not yet written (or dropped).
    queued: Arc<AtomicUsize>,
}

impl Backchannel for ConnectionWriter {
    fn send_call(&self, call: Bytes) -> Result<(), BackchannelError> {
        if call.len() > BACKCHANNEL_CALL_BYTES_MAX {
            return Err(BackchannelError::TooLarge { bytes: call.len(), max: BACKCHANNEL_CALL_BYTES_MAX });
        }
        let conn = self.conn.upgrade().ok_or(BackchannelError::Closed)?;
        let sh = conn.shared_handle().ok_or(BackchannelError::Closed)?;
        let queued = self.queued.fetch_add(1, Ordering::SeqCst);
        let mut place = QueuedCall { queued: self.queued.clone(), _charge: None };
        if queued >= BACKCHANNEL_CALLS_QUEUED_MAX {
            return Err(BackchannelError::Full { queued });
        }
        // Charged as a reply is, until written; not waited for (the
        // caller may be a worker): a dropped wait is cancelled.
        match conn.account.charge(call.len() + 4, Arc::new(|| {})) {
            Charged::Now(charge) => place._charge = Some(charge),
            Charged::Later(_) => return Err(BackchannelError::OverBudget),
        }
        let mark = Segment::Bytes(Bytes::copy_from_slice(&record_mark(call.len())));
        let pending =
            Pending { segments: vec![mark, Segment::Bytes(call)], _hold: Hold::Backchannel { _place: place } };
        if conn.send_pending(&sh, vec![pending]) { Ok(()) } else { Err(BackchannelError::Closed) }
    }

    fn is_open(&self) -> bool {
        self.conn.upgrade().is_some_and(|c| !c.out.lock().expect("outbox lock").closed)
    }
}

/// What a call holds until its reply is written or dropped: its bytes of
/// the budget, its slot, and its mark in the connection table.
pub(super) struct CallHold {
    charge: Charge,
    _call: CallInFlight,
    conn: Arc<Connection>,
}

impl Drop for CallHold {
    fn drop(&mut self) {
        let c = &self.conn;
        if c.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            if c.reading_done.load(Ordering::SeqCst) {
                c.finish();
                return;
            }
            if c.draining.load(Ordering::SeqCst) {
                c.linger();
                return;
            }
        }
        c.unpark(PARKED_SLOTS);
    }
}

/// A call taken from its connection with its slot and its bytes, not yet
/// run.
pub(super) struct TakenCall {
    pub call: Bytes,
    pub hold: CallHold,
}

impl TakenCall {
    pub fn conn(&self) -> &Arc<Connection> {
        &self.hold.conn
    }
}

/// A reply (record mark first) and what its call holds until it is sent.
pub(super) struct Reply {
    pub segments: Vec<Segment>,
    pub hold: CallHold,
}

impl Reply {
    pub fn conn(&self) -> &Arc<Connection> {
        &self.hold.conn
    }
}

impl Connection {
    pub(super) fn open(
        sh: &Arc<Shared>,
        stream: TcpStream,
        peer: SocketAddr,
        place: Slot,
        (slot, generation): (u32, u32),
        id: ConnectionId,
    ) -> io::Result<Arc<Connection>> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        socket2::SockRef::from(&stream).set_keepalive(true)?;
        let local = stream.local_addr().unwrap_or(peer);
        let write_fd = stream.as_fd().try_clone_to_owned()?;
        Ok(Arc::new_cyclic(|conn| Connection {
            shared: Arc::downgrade(sh),
            stream,
            write_fd,
            slot,
            generation,
            call_connection: CallConnection::new(
                id,
                Arc::new(ConnectionWriter { conn: conn.clone(), queued: Arc::new(AtomicUsize::new(0)) }),
            ),
            peer,
            local,
            place,
            account: sh.budget.account(),
            read: Mutex::new(ReadSide {
                buf: BytesMut::with_capacity(READ_CHUNK_BYTES),
                assembler: RecordAssembler::new(RECORD_BYTES_MAX),
                call: None,
                receiving: None,
                waiting: None,
                ended: None,
                low_water: 1,
            }),
            out: Mutex::default(),
            in_flight: AtomicUsize::new(0),
            parked: AtomicU8::new(PARKED_NOT),
            reading_done: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            lingering_since: Mutex::new(None),
            finished: AtomicBool::new(false),
        }))
    }

    /// Registers the connection for its first read turn, and with the
    /// connection table for being closed.
    pub(super) fn start(self: &Arc<Self>, sh: &Arc<Shared>) -> io::Result<()> {
        tracing::info!(peer = %self.peer, local = %self.local, "connection opened");
        let weak = Arc::downgrade(self);
        self.place.conn.on_close(Box::new(move || {
            if let Some(c) = weak.upgrade() {
                c.abort();
            }
        }));
        sh.poller.add_read(&self.stream, Token::Read(self.slot, self.generation))
    }

    /// What the read turn waits for, if it is parked.
    pub(super) fn parked_for(&self) -> Option<Parked> {
        match self.parked.load(Ordering::SeqCst) {
            PARKED_SLOTS => Some(Parked::Slots),
            PARKED_BUDGET => Some(Parked::Budget),
            _ => None,
        }
    }

    fn token_read(&self) -> Token {
        Token::Read(self.slot, self.generation)
    }

    fn token_write(&self) -> Token {
        Token::Write(self.slot, self.generation)
    }

    /// The read turn: take the next call, and the calls buffered behind it
    /// (up to `BATCH_CALLS_MAX` calls and replies), then pass the turn on; the caller runs
    /// what was taken. Only one worker at a time holds a connection's read
    /// turn.
    pub(super) fn read_turn(self: &Arc<Self>, sh: &Arc<Shared>, taken: &mut Vec<TakenCall>) {
        let mut rd = self.read.lock().expect("read side lock");
        // Replies need no slot, so nothing else bounds how many one turn
        // takes: they count towards the batch, or a client streaming
        // replies would keep this worker to itself.
        let mut replies = 0;
        loop {
            if self.reading_done.load(Ordering::SeqCst) {
                return;
            }
            if sh.draining() {
                if !taken.is_empty() {
                    break;
                }
                // Stopping: take no new call; read and drop what comes
                // until the client closes (see Transport::stop).
                rd.call = None;
                rd.waiting = None;
                if self.drain_input(&mut rd, sh) {
                    return;
                }
                continue;
            }
            let call = match rd.call.take() {
                Some(call) => call,
                None => match rd.next_record() {
                    Ok(Some(call)) => call,
                    // Only calls already buffered join a batch.
                    Ok(None) if !taken.is_empty() => break,
                    Ok(None) => {
                        if self.receive(&mut rd, sh) {
                            return;
                        }
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(peer = %self.peer, error = %e, "bad record; closing the connection");
                        rd.ended = Some(e.to_string());
                        drop(rd);
                        self.end_reading();
                        self.abort();
                        return;
                    }
                },
            };
            // A reply to a call sent back is routed here, before the
            // client's next call is read (which may then run at once on
            // another worker): it answers the server, so it needs no slot.
            if sh.dispatcher.take_reply(&call, &self.call_connection) {
                // The bytes charged while a large one came are not needed.
                rd.receiving = None;
                replies += 1;
                if taken.len() + replies >= super::BATCH_CALLS_MAX {
                    break;
                }
                continue;
            }
            if self.in_flight.load(Ordering::SeqCst) >= sh.requests_per_connection {
                rd.call = Some(call);
                if self.park(PARKED_SLOTS, || self.in_flight.load(Ordering::SeqCst) < sh.requests_per_connection) {
                    return;
                }
                continue;
            }
            let bytes = call.len() + sh.dispatcher.reply_bytes_max(&call);
            let Some(charge) = self.charge(&mut rd, bytes) else {
                rd.call = Some(call);
                return;
            };
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            let hold = CallHold { charge, _call: self.place.conn.call_started(), conn: self.clone() };
            taken.push(TakenCall { call, hold });
            if taken.len() >= super::BATCH_CALLS_MAX {
                break;
            }
        }
        // Pass the turn on before running the calls: the next calls of
        // this connection may run meanwhile on another worker.
        let more = rd.assembler.holds_fragment(&rd.buf);
        if !more {
            self.wake_for_rest(&mut rd);
        }
        drop(rd);
        if more {
            sh.push_ready(super::Ready::Turn(self.clone()));
        } else {
            self.rearm(sh);
        }
    }

    /// Reads more of the socket into the buffer. True if the turn ends
    /// (nothing to read now, the client is gone, or the turn is parked).
    fn receive(self: &Arc<Self>, rd: &mut ReadSide, sh: &Arc<Shared>) -> bool {
        let wanted = rd.assembler.bytes_wanted(&rd.buf);
        // A large record's buffer is allocated in one piece, after its
        // bytes have been charged to the budget.
        if wanted > READ_CHUNK_BYTES && rd.receiving.is_none() {
            match self.charge(rd, wanted) {
                Some(c) => rd.receiving = Some(c),
                None => return true,
            }
        }
        let room = wanted.saturating_sub(rd.buf.len()).max(READ_CHUNK_BYTES / 4);
        match sys::read_into(self.stream.as_fd(), &mut rd.buf, room) {
            Ok(0) => {
                rd.ended = Some("closed by the client".into());
                self.end_reading();
                true
            }
            Ok(_) => {
                self.place.conn.received();
                false
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.wake_for_rest(rd);
                self.rearm(sh);
                true
            }
            Err(e) => {
                rd.ended = Some(e.to_string());
                self.end_reading();
                true
            }
        }
    }

    /// Before the socket is polled again: while a large record is half
    /// received, the socket is to wake a worker only once the rest of it
    /// is there (SO_RCVLOWAT), not at each segment, which on loopback
    /// arrives 64 KiB at a time: a 1 MiB WRITE took a wake-up per
    /// segment. Otherwise at the first byte.
    fn wake_for_rest(&self, rd: &mut ReadSide) {
        let rest = rd.assembler.bytes_wanted(&rd.buf).saturating_sub(rd.buf.len());
        let mark = if rest > READ_CHUNK_BYTES {
            // A mark above about half the receive buffer makes the kernel
            // grow the buffer and clamp the window to the mark for the
            // rest of the connection; a quarter stays clear of that.
            sys::rcvbuf(self.stream.as_fd()).map_or(1, |buffer| rest.min(buffer / 4).max(1))
        } else {
            1
        };
        if mark != rd.low_water && sys::set_rcvlowat(self.stream.as_fd(), mark).is_ok() {
            rd.low_water = mark;
        }
    }

    /// Reads and drops what the client sends while the server stops; true
    /// when the turn ends.
    fn drain_input(self: &Arc<Self>, rd: &mut ReadSide, sh: &Arc<Shared>) -> bool {
        rd.buf.clear();
        match sys::read_into(self.stream.as_fd(), &mut rd.buf, READ_CHUNK_BYTES) {
            Ok(0) => {
                rd.ended.get_or_insert_with(|| "server stopping".into());
                self.end_reading();
                true
            }
            Ok(_) => false,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.rearm(sh);
                true
            }
            Err(_) => {
                rd.ended.get_or_insert_with(|| "server stopping".into());
                self.end_reading();
                true
            }
        }
    }

    /// `bytes` of the budget for the turn's next step; `None` parks the
    /// turn until the budget grants them.
    fn charge(self: &Arc<Self>, rd: &mut ReadSide, bytes: usize) -> Option<Charge> {
        if let Some(wait) = &mut rd.waiting {
            return match wait.take() {
                Some(charge) => {
                    rd.waiting = None;
                    Some(self.with_receiving(rd, charge))
                }
                // Woken for nothing: keep waiting.
                None => self.park_for_budget(rd),
            };
        }
        // Bytes already charged while the record came in count for it.
        let have = rd.receiving.as_ref().map_or(0, Charge::bytes);
        if have >= bytes {
            return rd.receiving.take();
        }
        let weak: Weak<Connection> = Arc::downgrade(self);
        let wake = Arc::new(move || {
            if let Some(c) = weak.upgrade() {
                c.unpark(PARKED_BUDGET);
            }
        });
        match self.account.charge(bytes - have, wake) {
            Charged::Now(charge) => Some(self.with_receiving(rd, charge)),
            Charged::Later(wait) => {
                rd.waiting = Some(wait);
                self.park_for_budget(rd)
            }
        }
    }

    fn park_for_budget(self: &Arc<Self>, rd: &mut ReadSide) -> Option<Charge> {
        let granted = || rd.waiting.as_ref().is_some_and(Wait::is_granted);
        if self.park(PARKED_BUDGET, granted) {
            return None;
        }
        let charge = rd.waiting.take().and_then(|mut w| w.take()).expect("granted");
        Some(self.with_receiving(rd, charge))
    }

    fn with_receiving(&self, rd: &mut ReadSide, mut charge: Charge) -> Charge {
        if let Some(receiving) = rd.receiving.take() {
            charge.absorb(receiving);
        }
        charge
    }

    /// Parks the read turn for `why`, unless `ready` says the reason is
    /// gone already. True if parked: whoever removes the reason calls
    /// [`Connection::unpark`], which queues the turn again.
    fn park(&self, why: u8, ready: impl FnOnce() -> bool) -> bool {
        self.parked.store(why, Ordering::SeqCst);
        // Checked after parking, so an unpark in between is not lost.
        if ready() && self.parked.compare_exchange(why, PARKED_NOT, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            return false;
        }
        true
    }

    fn unpark(self: &Arc<Self>, why: u8) {
        if self.parked.compare_exchange(why, PARKED_NOT, Ordering::SeqCst, Ordering::SeqCst).is_ok()
            && let Some(sh) = self.shared_handle()
        {
            sh.push_ready(super::Ready::Turn(self.clone()));
        }
    }

    fn rearm(self: &Arc<Self>, sh: &Shared) {
        if let Err(e) = sh.poller.rearm_read(&self.stream, self.token_read()) {
            tracing::warn!(peer = %self.peer, error = %e, "cannot poll a connection; closing it");
            self.end_reading();
            self.abort();
        }
    }

    /// Runs a call on this worker; its reply, to be sent.
    pub(super) fn execute(&self, sh: &Shared, call: Bytes, mut hold: CallHold) -> Option<Reply> {
        let xid = call.get(..4).map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")));
        let (peer, local) = (self.peer, self.local);
        let mut segments = match catch_unwind(AssertUnwindSafe(|| {
            sh.dispatcher.handle_on_connection(call, peer, local, &self.call_connection)
        })) {
            Ok(Some(reply)) => {
                let reply_bytes: usize = reply.iter().map(Segment::len).sum::<usize>() + 4;
                if reply_bytes > hold.charge.bytes() {
                    tracing::warn!(%peer, xid, reply_bytes, reserved_bytes = hold.charge.bytes(), "reply larger than its reserved bound");
                }
                // The call's record is gone; the reply is what it holds now.
                hold.charge.resize(reply_bytes);
                reply
            }
            Ok(None) => return None,
            Err(_) => {
                // Whatever the handler left on this thread (for the local
                // store, its caller's identity), the server's reset undoes
                // before the next call.
                if let Err(e) = (sh.reset_after_panic)() {
                    tracing::error!(error = %e, "cannot reset the worker's identity after a panic");
                }
                tracing::error!(%peer, xid, "a request handler panicked; answered SYSTEM_ERR");
                status_reply(xid?, ReplyStat::Accepted(AcceptStat::SystemErr))
            }
        };
        let len: usize = segments.iter().map(Segment::len).sum();
        segments.insert(0, Segment::Bytes(Bytes::copy_from_slice(&record_mark(len))));
        Some(Reply { segments, hold })
    }

    /// Sends replies of this connection, in one write if the socket takes
    /// them: written at once if nothing is queued ahead of them, as far as
    /// the socket takes them; the rest is queued for the write turn.
    pub(super) fn send(self: &Arc<Self>, sh: &Shared, replies: Vec<Reply>) {
        self.send_messages(
            sh,
            replies,
            |r| &mut r.segments[..],
            |r| Pending { segments: r.segments, _hold: Hold::Reply { _call: r.hold } },
        );
    }

    /// [`Connection::send`] for messages in the outbox's own form (calls
    /// sent back); false if the outbox is closed, and they are dropped.
    fn send_pending(self: &Arc<Self>, sh: &Shared, pending: Vec<Pending>) -> bool {
        self.send_messages(sh, pending, |p| &mut p.segments[..], |p| p)
    }

    /// Writes or queues `messages`, whose `segments` are theirs and which
    /// become `pending` in the outbox; false if the outbox is closed.
    fn send_messages<T>(
        self: &Arc<Self>,
        sh: &Shared,
        mut messages: Vec<T>,
        segments: impl Fn(&mut T) -> &mut [Segment],
        pending: impl Fn(T) -> Pending,
    ) -> bool {
        let mut out = self.out.lock().expect("outbox lock");
        if out.closed {
            drop(out);
            drop(messages);
            return false;
        }
        if !out.queue.is_empty() {
            out.queue.extend(messages.into_iter().map(pending));
            return true;
        }
        let total: usize = messages.iter_mut().map(|m| segments(m).iter().map(Segment::len).sum::<usize>()).sum();
        let written = match write_replies(self.stream.as_fd(), messages.iter_mut().map(&segments), 0) {
            Ok(n) if n == total => {
                drop(out);
                drop(messages);
                return true;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => {
                tracing::debug!(peer = %self.peer, error = %e, "reply write failed");
                let dropped = self.close_outbox(&mut out);
                drop(out);
                drop((messages, dropped));
                self.stream_failed();
                return true;
            }
        };
        out.queue.extend(messages.into_iter().map(pending));
        out.front_written = 0;
        let sent = out.advance(written);
        self.place.conn.replies_waiting(true, written > 0);
        self.arm_write(sh, &mut out);
        drop(out);
        // Their holds go (calls answered) outside the outbox lock.
        drop(sent);
        true
    }

    fn arm_write(&self, sh: &Shared, out: &mut Outbox) {
        match sh.poller.arm_write(&self.write_fd, self.token_write(), out.write_added) {
            Ok(()) => out.write_added = true,
            Err(e) => {
                tracing::warn!(peer = %self.peer, error = %e, "cannot poll a connection for writing; closing it");
                out.closed = true;
                self.abort_later();
            }
        }
    }

    /// The write turn: sends what is queued, as far as the socket takes it.
    pub(super) fn write_turn(self: &Arc<Self>, sh: &Arc<Shared>) {
        let mut done: Vec<Pending> = Vec::new();
        let mut guard = self.out.lock().expect("outbox lock");
        if guard.closed || guard.queue.is_empty() {
            return;
        }
        let out = &mut *guard;
        let queued = out.queue.iter_mut().map(|p| &mut p.segments[..]);
        match write_replies(self.stream.as_fd(), queued, out.front_written) {
            Ok(n) => {
                done = out.advance(n);
                self.place.conn.replies_waiting(!out.queue.is_empty(), n > 0);
                if !out.queue.is_empty() {
                    self.arm_write(sh, out);
                }
            }
            Err(e) => {
                tracing::debug!(peer = %self.peer, error = %e, "reply write failed");
                done.extend(self.close_outbox(out));
                drop(guard);
                drop(done);
                self.stream_failed();
                return;
            }
        }
        drop(guard);
        // Their holds go (calls answered) outside the outbox lock.
        drop(done);
    }

    /// Marks the outbox closed and takes what waits in it (to be dropped
    /// by the caller once the lock is released).
    fn close_outbox(&self, out: &mut Outbox) -> VecDeque<Pending> {
        out.closed = true;
        self.place.conn.replies_waiting(false, false);
        std::mem::take(&mut out.queue)
    }

    /// The socket failed: no more calls, nothing more to send.
    fn stream_failed(self: &Arc<Self>) {
        if let Ok(mut rd) = self.read.try_lock() {
            rd.ended.get_or_insert_with(|| "connection failed".into());
        }
        self.end_reading();
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    /// No more calls are taken; the connection finishes once the calls in
    /// flight are answered.
    fn end_reading(self: &Arc<Self>) {
        if !self.reading_done.swap(true, Ordering::SeqCst) {
            // Whatever it waited for no longer matters.
            self.parked.store(PARKED_NOT, Ordering::SeqCst);
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                self.finish();
            }
        }
    }

    /// The server closes the connection (idle, stalled, evicted, a bad
    /// record, stopping): what waits to be sent is dropped, and the
    /// socket is shut so that its read turn ends.
    pub(super) fn abort(self: &Arc<Self>) {
        if self.aborted.swap(true, Ordering::SeqCst) {
            return;
        }
        if self.place.conn.close_reason() == Some(CloseReason::Stalled) {
            tracing::warn!(
                peer = %self.peer,
                held_bytes = self.account.held_bytes(),
                budget_used_bytes = self.shared_handle().map_or(0, |sh| sh.budget.used_bytes()),
                "closing a connection whose client does not read its replies"
            );
        }
        let dropped = {
            let mut out = self.out.lock().expect("outbox lock");
            self.close_outbox(&mut out)
        };
        drop(dropped);
        let _ = self.stream.shutdown(Shutdown::Both);
        // A parked turn would never see the shut socket: end it here.
        if self.parked.swap(PARKED_NOT, Ordering::SeqCst) != PARKED_NOT {
            self.end_reading();
        }
    }

    /// `abort` from under the outbox lock: done by the next read turn,
    /// which the shut socket wakes.
    fn abort_later(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    /// Closes the connection for `reason` (the table records it).
    pub(super) fn close(self: &Arc<Self>, reason: CloseReason) {
        self.place.conn.close(reason);
        self.abort();
    }

    /// The server stops: no more calls are taken (a read turn reads and
    /// drops what comes); once the calls in flight are answered the server
    /// closes its side, and the client is expected to close its own.
    pub(super) fn drain(self: &Arc<Self>, sh: &Arc<Shared>) {
        self.draining.store(true, Ordering::SeqCst);
        // A parked turn no longer waits for anything: it drops its call.
        if self.parked.swap(PARKED_NOT, Ordering::SeqCst) != PARKED_NOT {
            sh.push_ready(super::Ready::Turn(self.clone()));
        }
        if self.in_flight.load(Ordering::SeqCst) == 0 {
            self.linger();
        }
    }

    /// Closes the server's side of a draining connection (once).
    fn linger(&self) {
        let mut since = self.lingering_since.lock().expect("linger lock");
        if since.is_none() {
            *since = Some(Instant::now());
            let _ = self.stream.shutdown(Shutdown::Write);
        }
    }

    /// How long the server has waited for the client to close its side.
    pub(super) fn lingering_for(&self) -> Option<std::time::Duration> {
        self.lingering_since.lock().expect("linger lock").map(|t| t.elapsed())
    }

    /// Last step, once: out of the poller and the table; the socket closes
    /// when the last reference goes.
    fn finish(&self) {
        if self.finished.swap(true, Ordering::SeqCst) {
            return;
        }
        let Some(sh) = self.shared_handle() else { return };
        sh.poller.remove(&self.stream);
        sh.poller.remove(&self.write_fd);
        let dropped = {
            let mut out = self.out.lock().expect("outbox lock");
            self.close_outbox(&mut out)
        };
        drop(dropped);
        let why = match self.place.conn.close_reason() {
            Some(r) => r.as_str().to_string(),
            None => self
                .read
                .try_lock()
                .ok()
                .and_then(|rd| rd.ended.clone())
                .unwrap_or_else(|| "closed by the client".into()),
        };
        tracing::info!(peer = %self.peer, reason = %why, "connection closed");
        // What the programs bound to it (NFSv4.1's sessions, their
        // backchannel) is let go of.
        sh.dispatcher.connection_closed(self.call_connection.id());
        sh.free_slot(self.slot);
    }

    pub(super) fn shared_handle(&self) -> Option<Arc<Shared>> {
        self.shared.upgrade()
    }
}

/// Writes `replies` in order, the first with `skip` of its bytes sent
/// already, as far as the socket takes them without blocking: bytes with
/// sendmsg (MSG_MORE while more of a reply follows), a READ's pipe of file
/// data with splice, so its pages go from the page cache to the socket. A
/// pipe the socket took part of keeps the rest, for the next write turn.
/// The bytes written (0 if the socket is full); any other failure, even
/// after some bytes went out, fails the connection: a reply cut short
/// cannot be finished, and a wrong one must never be sent.
fn write_replies<'a>(
    socket: BorrowedFd,
    replies: impl Iterator<Item = &'a mut [Segment]>,
    mut skip: usize,
) -> io::Result<usize> {
    let mut w = Gather { socket, slices: Vec::new(), gathered: 0, written: 0 };
    let mut segments = replies.flat_map(|r| r.iter_mut()).peekable();
    while let Some(segment) = segments.next() {
        let len = segment.len();
        if skip >= len {
            skip -= len;
            continue;
        }
        let sent = std::mem::take(&mut skip);
        match segment {
            Segment::Bytes(b) => {
                let b: &'a Bytes = b;
                if w.slices.len() == WRITEV_SEGMENTS_MAX && !w.flush(true)? {
                    return Ok(w.written);
                }
                w.slices.push(IoSlice::new(&b[sent..]));
                w.gathered += len - sent;
            }
            Segment::Spliced(s) => {
                let Some(pipe) = s.downcast_mut::<FilePipe>() else {
                    return Err(io::Error::other("a reply carries a payload the transport cannot send"));
                };
                if len - pipe.len() != sent {
                    return Err(io::Error::other("a pipe's content disagrees with what was sent of it"));
                }
                if !w.flush(true)? {
                    return Ok(w.written);
                }
                let more = segments.peek().is_some();
                if !splice_out(socket, pipe, more, &mut w.written)? {
                    return Ok(w.written);
                }
            }
        }
    }
    w.flush(false)?;
    Ok(w.written)
}

/// Byte segments gathered for one sendmsg.
struct Gather<'a> {
    socket: BorrowedFd<'a>,
    slices: Vec<IoSlice<'a>>,
    gathered: usize,
    written: usize,
}

impl Gather<'_> {
    /// Sends what is gathered; true if the socket took it all.
    fn flush(&mut self, more: bool) -> io::Result<bool> {
        if self.slices.is_empty() {
            return Ok(true);
        }
        let n = match sys::send_vectored(self.socket, &self.slices, more) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        self.written += n;
        let all = n == self.gathered;
        self.slices.clear();
        self.gathered = 0;
        Ok(all)
    }
}

/// Splices what is left in `pipe` to the socket; true if it all went,
/// false if the socket is full.
fn splice_out(socket: BorrowedFd, pipe: &mut FilePipe, more: bool, written: &mut usize) -> io::Result<bool> {
    while !pipe.is_empty() {
        match sys::splice_to_socket(pipe.read_fd(), socket, pipe.len(), more) {
            Ok(0) => return Err(io::Error::other("a pipe of file data ran dry")),
            Ok(n) => {
                pipe.drained(n);
                *written += n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

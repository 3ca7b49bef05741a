//! TCP: accepting connections and moving records between sockets and the
//! workers. Per connection there is one reader task and one writer task,
//! never a task per request.
//!
//! A worker writes its reply to the socket itself when nothing is queued
//! ahead of it (a non-blocking writev), as knfsd's threads do: at low load
//! a call then costs one hand-off between threads instead of two. What
//! cannot be written at once waits in the connection's outbox for the
//! writer task, which sends everything queued in one writev when the
//! socket can take it.
//!
//! What a connection may hold is bounded by `budget` (bytes of calls and
//! replies) and `conns` (idle and stalled connections are closed); both
//! are independent of this transport.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use keel_rpc::record::RecordAssembler;
use keel_rpc::{Dispatcher, ReplySegments};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};

use crate::budget::{Account, Budget, Charge};
use crate::conns::{CloseReason, Conn, Connections, Slot};
use crate::workers::{Job, JobQueue, Permits};

/// Largest RPC record accepted: a 1 MiB WRITE plus headers, with room.
pub const RECORD_BYTES_MAX: usize = (1 << 20) + (64 << 10);
/// Bytes read from a socket at a time when no large record is expected.
const READ_CHUNK_BYTES: usize = 64 << 10;
/// Segments handed to one writev (IOV_MAX is 1024).
const WRITEV_SEGMENTS_MAX: usize = 512;
/// How long a closing connection keeps reading (and discarding) what the
/// client still sends, so that its last replies are not reset away.
const LINGER: Duration = Duration::from_secs(2);

/// What every connection shares.
pub struct Net {
    pub jobs: Arc<JobQueue>,
    pub dispatcher: Arc<Dispatcher>,
    pub conns: Arc<Connections>,
    /// Bytes of calls in flight and of their replies.
    pub budget: Arc<Budget>,
    pub requests_per_connection: usize,
    /// Whether some export's client list admits a host.
    pub admits: Box<dyn Fn(IpAddr) -> bool + Send + Sync>,
    pub shutdown: watch::Receiver<bool>,
}

/// Who may connect to a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// NFS and MOUNT: hosts that some export's client list admits.
    Clients,
    /// The portmapper: anyone, as rpcbind.
    Anyone,
}

/// The sending side of a connection, shared by the workers and the
/// connection's writer task.
pub struct ReplyPath {
    stream: Arc<TcpStream>,
    conn: Arc<Conn>,
    outbox: Mutex<Outbox>,
    /// Wakes the writer task: something was queued, or the end came.
    wake: Notify,
}

#[derive(Default)]
struct Outbox {
    /// Replies not (completely) written yet, in order; the first may be
    /// partly written.
    queue: VecDeque<Pending>,
    /// Bytes of the first reply already written.
    front_written: usize,
    /// The connection failed or is done: replies are dropped.
    closed: bool,
    /// The reader is done; the writer task ends once the queue is empty.
    finishing: bool,
}

struct Pending {
    segments: ReplySegments,
    /// Released when the reply is written: the call's in-flight slot, its
    /// share of the byte budget, its mark on the connection. A client that
    /// stops reading thus stops the server from taking more of its calls.
    _permits: Permits,
}

impl ReplyPath {
    /// Sends a reply: written at once if nothing is queued ahead of it and
    /// the socket takes it, queued for the writer task otherwise.
    pub fn send(&self, segments: ReplySegments, permits: Permits) {
        let mut out = self.outbox.lock().expect("outbox lock");
        if out.closed {
            return;
        }
        let mut written = 0;
        if out.queue.is_empty() {
            match write_some(&self.stream, &segments, 0) {
                Ok(n) if n == total_len(&segments) => return,
                Ok(n) => written = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    tracing::debug!(error = %e, "reply write failed");
                    out.closed = true;
                    drop(out);
                    self.wake.notify_one();
                    return;
                }
            }
            out.front_written = written;
            self.conn.replies_waiting(true, written > 0);
        }
        out.queue.push_back(Pending { segments, _permits: permits });
        drop(out);
        self.wake.notify_one();
    }

    /// Drops every reply not written yet, and those still to come.
    fn abort(&self) {
        let mut out = self.outbox.lock().expect("outbox lock");
        out.closed = true;
        out.queue.clear();
        self.conn.replies_waiting(false, false);
        drop(out);
        self.wake.notify_one();
    }
}

fn total_len(segments: &[Bytes]) -> usize {
    segments.iter().map(Bytes::len).sum()
}

/// One non-blocking writev of `segments` (skipping `skip` bytes); how much
/// was written.
fn write_some(stream: &TcpStream, segments: &[Bytes], mut skip: usize) -> io::Result<usize> {
    let mut slices = Vec::with_capacity(segments.len());
    for s in segments {
        if skip >= s.len() {
            skip -= s.len();
            continue;
        }
        slices.push(IoSlice::new(&s[skip..]));
        skip = 0;
    }
    loop {
        match stream.try_write_vectored(&slices) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Ok(0) if !slices.is_empty() => return Err(io::ErrorKind::WriteZero.into()),
            r => return r,
        }
    }
}

pub async fn accept_loop(listener: TcpListener, net: Arc<Net>, admit: Admit) {
    let mut shutdown = net.shutdown.clone();
    let local = listener.local_addr().ok();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                // Before it takes a slot: such a host could only be refused.
                if admit == Admit::Clients && !(net.admits)(peer.ip()) {
                    tracing::info!(%peer, "connection refused: the host is in no export's client list");
                    continue;
                }
                match net.conns.admit(peer) {
                    Some(slot) => {
                        tokio::spawn(serve_connection(stream, peer, net.clone(), slot));
                    }
                    None => tracing::warn!(%peer, "connection refused: max_connections reached and none is idle"),
                }
            }
            Err(e) => {
                // Out of descriptors, typically: back off instead of spinning.
                tracing::warn!(listener = ?local, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    tracing::debug!(listener = ?local, "stopped accepting");
}

/// Tells idle and stalled connections to close, until the server stops.
pub async fn sweep_loop(net: Arc<Net>) {
    let mut shutdown = net.shutdown.clone();
    let mut tick = tokio::time::interval(net.conns.sweep_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        net.conns.sweep();
    }
}

/// Why a connection's reader stopped.
enum Ended {
    Client(String),
    Server(CloseReason),
    Stopping,
}

async fn serve_connection(stream: TcpStream, peer: SocketAddr, net: Arc<Net>, slot: Slot) {
    let conn = slot.conn.clone();
    let local = stream.local_addr().unwrap_or(peer);
    let _ = stream.set_nodelay(true);
    let _ = socket2::SockRef::from(&stream).set_keepalive(true);
    tracing::debug!(%peer, %local, "connection opened");
    let stream = Arc::new(stream);
    let path = Arc::new(ReplyPath {
        stream: stream.clone(),
        conn: conn.clone(),
        outbox: Mutex::default(),
        wake: Notify::new(),
    });
    let writer = tokio::spawn(write_replies(path.clone()));
    let reader = Reader {
        net: &net,
        conn: &conn,
        path: &path,
        stream: &stream,
        requests: Arc::new(Semaphore::new(net.requests_per_connection)),
        account: net.budget.account(),
        peer,
        local,
    };
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let ended = reader.read_calls(&mut buf).await;
    if let Ended::Server(reason) = ended {
        path.abort();
        if reason == CloseReason::Stalled {
            tracing::warn!(
                %peer,
                held_bytes = reader.account.held_bytes(),
                budget_used_bytes = net.budget.used_bytes(),
                "closing a connection whose client does not read its replies"
            );
        }
    }
    reader.answer_calls_taken().await;
    path.outbox.lock().expect("outbox lock").finishing = true;
    path.wake.notify_one();
    let _ = writer.await;
    let _ = socket2::SockRef::from(&*stream).shutdown(Shutdown::Write);
    // Closing a socket with unread input makes the kernel reset the
    // connection and drop replies the client has not received yet: read
    // (and ignore) what the client still sends until it closes its side,
    // for a bounded time. A connection the server closed has no replies
    // worth that.
    if conn.close_reason().is_none() {
        let _ = tokio::time::timeout(LINGER, async {
            loop {
                buf.clear();
                match read_some(&stream, &mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
    }
    let reason = match (&ended, conn.close_reason()) {
        (_, Some(r)) => r.as_str().to_string(),
        (Ended::Client(why), None) => why.clone(),
        (Ended::Stopping | Ended::Server(_), None) => "server stopping".to_string(),
    };
    tracing::debug!(%peer, reason = %reason, "connection closed");
    drop(slot);
}

/// What a connection's reader works with.
struct Reader<'a> {
    net: &'a Net,
    conn: &'a Arc<Conn>,
    path: &'a Arc<ReplyPath>,
    stream: &'a TcpStream,
    /// The connection's in-flight slots (`max_requests_per_connection`).
    requests: Arc<Semaphore>,
    account: Arc<Account>,
    peer: SocketAddr,
    local: SocketAddr,
}

impl Reader<'_> {
    /// Reads calls and queues them for the workers until the client, the
    /// server or the connection table ends the connection.
    async fn read_calls(&self, buf: &mut BytesMut) -> Ended {
        let (conn, net) = (self.conn, self.net);
        let mut shutdown = net.shutdown.clone();
        let mut assembler = RecordAssembler::new(RECORD_BYTES_MAX);
        // The budget's bytes for a large record being received.
        let mut receiving: Option<Charge> = None;
        loop {
            match assembler.next_record(buf) {
                Ok(Some(record)) => {
                    let bytes = record.len() + net.dispatcher.reply_bytes_max(&record);
                    let (slot, charge) = tokio::select! {
                        p = take_call(&self.requests, &self.account, bytes, receiving.take()) => p,
                        _ = shutdown.wait_for(|stop| *stop) => return Ended::Stopping,
                        r = conn.closed() => return Ended::Server(r),
                    };
                    let permits = Permits { _slot: slot, charge, _call: conn.call_started() };
                    let job = Job { record, peer: self.peer, local: self.local, reply: self.path.clone(), permits };
                    tokio::select! {
                        r = net.jobs.push(job) => if r.is_err() {
                            return Ended::Stopping;
                        },
                        _ = shutdown.wait_for(|stop| *stop) => return Ended::Stopping,
                        r = conn.closed() => return Ended::Server(r),
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(peer = %self.peer, error = %e, "bad record; closing the connection");
                    return Ended::Client(e.to_string());
                }
            }
            // Room for the rest of the record being received (one allocation
            // for a large WRITE, charged to the budget first), or for another chunk.
            let record_bytes = assembler.bytes_wanted(buf);
            if record_bytes > READ_CHUNK_BYTES && receiving.is_none() {
                receiving = Some(tokio::select! {
                    c = self.account.charge(record_bytes) => c,
                    _ = shutdown.wait_for(|stop| *stop) => return Ended::Stopping,
                    r = conn.closed() => return Ended::Server(r),
                });
            }
            let wanted = record_bytes.max(buf.len() + READ_CHUNK_BYTES / 4);
            if buf.capacity() < wanted {
                buf.reserve(wanted - buf.len());
            }
            tokio::select! {
                r = read_some(self.stream, buf) => match r {
                    Ok(0) => return Ended::Client("closed by the client".into()),
                    Ok(_) => conn.received(),
                    Err(e) => return Ended::Client(e.to_string()),
                },
                _ = shutdown.wait_for(|stop| *stop) => return Ended::Stopping,
                r = conn.closed() => return Ended::Server(r),
            }
        }
    }

    /// Waits until every call taken is answered (its slot comes back once
    /// its reply is written), or dropped if the server closes the
    /// connection meanwhile (its client may never read again).
    async fn answer_calls_taken(&self) {
        let all = u32::try_from(self.net.requests_per_connection).unwrap_or(u32::MAX);
        tokio::select! {
            _ = self.requests.acquire_many(all) => {}
            _ = self.conn.closed() => {
                self.path.abort();
                let _ = self.requests.acquire_many(all).await;
            }
        }
    }
}

async fn read_some(stream: &TcpStream, buf: &mut BytesMut) -> io::Result<usize> {
    loop {
        stream.readable().await?;
        match stream.try_read_buf(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return r,
        }
    }
}

/// A call's in-flight slot and its bytes: the record (already charged in
/// part if it was large) and its largest reply.
async fn take_call(
    requests: &Arc<Semaphore>,
    account: &Arc<Account>,
    bytes: usize,
    receiving: Option<Charge>,
) -> (OwnedSemaphorePermit, Charge) {
    let slot = requests.clone().acquire_owned().await.expect("semaphore never closed");
    let charge = match receiving {
        Some(mut charge) => {
            if bytes > charge.bytes() {
                charge.absorb(account.charge(bytes - charge.bytes()).await);
            }
            charge
        }
        None => account.charge(bytes).await,
    };
    (slot, charge)
}

/// Sends what the workers could not: everything queued, in one writev
/// (up to WRITEV_SEGMENTS_MAX segments), whenever the socket can take it.
async fn write_replies(path: Arc<ReplyPath>) {
    loop {
        let written = {
            let mut out = path.outbox.lock().expect("outbox lock");
            if out.closed || (out.finishing && out.queue.is_empty()) {
                out.queue.clear();
                path.conn.replies_waiting(false, false);
                return;
            }
            if out.queue.is_empty() {
                None
            } else {
                let mut segments: Vec<Bytes> = Vec::new();
                for p in &out.queue {
                    if segments.len() + p.segments.len() > WRITEV_SEGMENTS_MAX && !segments.is_empty() {
                        break;
                    }
                    segments.extend(p.segments.iter().cloned());
                }
                let skip = out.front_written;
                match write_some(&path.stream, &segments, skip) {
                    Ok(n) => {
                        // Drop the replies written in full (releasing their permits).
                        let mut done = out.front_written + n;
                        while let Some(front) = out.queue.front() {
                            let len = total_len(&front.segments);
                            if done < len {
                                break;
                            }
                            done -= len;
                            out.queue.pop_front();
                        }
                        out.front_written = done;
                        path.conn.replies_waiting(!out.queue.is_empty(), n > 0);
                        Some(true)
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Some(false),
                    Err(e) => {
                        tracing::debug!(error = %e, "reply write failed");
                        out.closed = true;
                        out.queue.clear();
                        path.conn.replies_waiting(false, false);
                        return;
                    }
                }
            }
        };
        match written {
            // More may be queued behind what was just written.
            Some(true) => {}
            // The socket is full: wait for room, or for the connection to
            // be closed (its client may never read again).
            Some(false) => tokio::select! {
                r = path.stream.writable() => if r.is_err() {
                    path.outbox.lock().expect("outbox lock").closed = true;
                    return;
                },
                _ = path.wake.notified() => {}
            },
            None => path.wake.notified().await,
        }
    }
}

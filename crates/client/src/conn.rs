//! One RPC connection over TCP: many calls in flight, replies matched by xid.
//!
//! ```text
//!  callers ──(record segments)──▶ mpsc ──▶ writer task ──writev──▶ socket
//!     ▲                                                             │
//!     └──── oneshot per xid ◀── pending table ◀── reader task ◀─────┘
//! ```
//!
//! A caller encodes its call, registers a oneshot under its xid, queues the
//! record's segments for the writer task and waits. The writer task owns the
//! write half, so a caller that gives up (timeout, dropped future) can never
//! leave half a record on the wire; it also batches the records queued at
//! the same moment into one `writev`. The reader task owns the read half,
//! cuts the stream into records and hands each one, uncopied, to the caller
//! whose xid it carries. Decoding happens in the caller's task.
//!
//! When either task sees the connection die, every waiting caller gets the
//! same error at once, and later calls fail immediately: nothing hangs.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io::{self, IoSlice};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use keel_rpc::msg::{AcceptStat, Auth, AuthSys, CallHeader, OpaqueAuth, RPC_VERSION, ReplyStat, decode_reply_header};
use keel_rpc::record::{LAST_FRAGMENT, RecordAssembler, RecordError, record_mark};
use keel_xdr::{Decoder, Encoder};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::error::ClientError;

/// How long a call waits for its reply by default. Long, like a hard mount's
/// major timeout: a busy server is not a dead one.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long establishing a TCP connection may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest reply record accepted by default: a 1 MiB READ plus headroom.
pub const DEFAULT_RECORD_BYTES_MAX: usize = 4 << 20;
/// Calls in flight per connection by default (what Linux calls the slot
/// table); further calls wait for a slot.
pub const DEFAULT_OUTSTANDING_MAX: usize = 128;

/// Source ports tried when [`ConnectOptions::reserved_port`] is set: the
/// range the Linux kernel client uses (`min_resvport`..`max_resvport`).
const RESERVED_PORTS: std::ops::RangeInclusive<u16> = 665..=1023;
/// The read buffer grows by at least this much, so small replies are
/// received many per `read`.
const READ_BUF_MIN: usize = 64 << 10;
/// Most segments gathered into one `writev` (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;
/// Records queued together are written together, up to this many segments.
const BATCH_SEGMENTS_MAX: usize = 256;
/// Largest accepted [`ConnectOptions::outstanding_max`]; more is clamped.
const OUTSTANDING_LIMIT: usize = 1 << 20;
/// How long [`RpcConnection::close`] waits for the socket to be released.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// How to open a connection and how its calls behave.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Credential sent with every call (per handle: see
    /// [`RpcConnection::with_auth`]). Default: AUTH_SYS with this process's
    /// effective uid and gid (see [`process_auth`]).
    pub auth: Auth,
    /// How long a call may take, from asking for a slot to the reply.
    pub call_timeout: Duration,
    /// How long establishing the TCP connection may take.
    pub connect_timeout: Duration,
    /// Bind a reserved source port (665..=1023), as the Linux kernel client
    /// and libnfs do when they run as root, so that `secure` exports (the
    /// default, on Keel as on knfsd) accept the calls. Default: true. It
    /// needs root (or `CAP_NET_BIND_SERVICE`); without that the client
    /// logs a warning (once per process) and uses an ordinary port: see
    /// [`reserved_port_available`], and [`RpcConnection::local_addr`] for
    /// the port a connection got. False: always an ordinary port (mount's
    /// `noresvport`).
    pub reserved_port: bool,
    /// Bind exactly this source port (with `SO_REUSEADDR`), failing if it is
    /// taken. Overrides `reserved_port`. The retrying client uses it to come
    /// back from the same address, which the server's reply cache needs.
    pub source_port: Option<u16>,
    /// Largest reply record accepted; a larger one closes the connection.
    pub record_bytes_max: usize,
    /// Calls in flight on the connection at most (clamped to 1..=2^20).
    pub outstanding_max: usize,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            auth: process_auth(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            reserved_port: true,
            source_port: None,
            record_bytes_max: DEFAULT_RECORD_BYTES_MAX,
            outstanding_max: DEFAULT_OUTSTANDING_MAX,
        }
    }
}

/// An AUTH_SYS credential with no supplementary groups and machine name
/// `keel-client`.
pub fn auth_sys(uid: u32, gid: u32, gids: &[u32]) -> Auth {
    Auth::Sys(AuthSys { stamp: 0, machine_name: Bytes::from_static(b"keel-client"), uid, gid, gids: gids.to_vec() })
}

/// AUTH_SYS as this process: the owner of `/proc/self` is the effective uid
/// and gid (read this way because the crate has no `unsafe` to call
/// `geteuid`). Falls back to nobody (65534) where there is no `/proc`.
pub fn process_auth() -> Auth {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = std::fs::metadata("/proc/self") {
            return auth_sys(m.uid(), m.gid(), &[]);
        }
    }
    auth_sys(65534, 65534, &[])
}

/// The credential as it goes on the wire. Nothing is checked: a test may
/// well want to send 17 groups to see the server refuse them.
pub(crate) fn credential(auth: &Auth) -> OpaqueAuth {
    match auth {
        Auth::None => OpaqueAuth::default(),
        Auth::Sys(sys) => sys.to_opaque(),
    }
}

/// A fresh transaction id. One counter for the whole process, started at a
/// time-derived value, so xids are unique across every connection the
/// process opens: a call retransmitted on a new connection cannot collide
/// with the calls already there, and a restarted client does not reuse the
/// xids its previous run left in the server's reply cache.
pub fn next_xid() -> u32 {
    static SEED: OnceLock<u32> = OnceLock::new();
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let seed = *SEED.get_or_init(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        (nanos as u32) ^ ((nanos >> 32) as u32) ^ std::process::id().rotate_left(16)
    });
    seed.wrapping_add(COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Encodes a call header and arguments: the record's body, no record mark.
pub(crate) fn encode_call(
    xid: u32,
    cred: &OpaqueAuth,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: impl FnOnce(&mut Encoder),
) -> Vec<Bytes> {
    let mut enc = Encoder::new();
    CallHeader { xid, rpc_version: RPC_VERSION, prog, vers, proc_, cred: cred.clone(), verf: OpaqueAuth::default() }
        .encode(&mut enc);
    args(&mut enc);
    enc.finish_bytes()
}

/// A call ready to go on the wire: record mark, header, arguments. Sending
/// the same `PreparedCall` again is a retransmission: same xid, same bytes.
#[derive(Debug, Clone)]
pub struct PreparedCall {
    pub(crate) xid: u32,
    /// Record mark first; large payloads are their own segments.
    pub(crate) segments: Vec<Bytes>,
}

impl PreparedCall {
    /// Encodes a call with transaction id `xid`.
    pub fn new(
        xid: u32,
        auth: &Auth,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: impl FnOnce(&mut Encoder),
    ) -> Result<Self, ClientError> {
        Self::from_body(xid, encode_call(xid, &credential(auth), prog, vers, proc_, args))
    }

    pub(crate) fn from_body(xid: u32, body: Vec<Bytes>) -> Result<Self, ClientError> {
        let len: usize = body.iter().map(Bytes::len).sum();
        let max = (LAST_FRAGMENT - 1) as usize;
        if len > max {
            return Err(RecordError::TooLarge { bytes: len, max }.into());
        }
        let mut segments = Vec::with_capacity(body.len() + 1);
        segments.push(Bytes::copy_from_slice(&record_mark(len)));
        segments.extend(body);
        Ok(PreparedCall { xid, segments })
    }

    pub fn xid(&self) -> u32 {
        self.xid
    }

    /// The record as it goes on the wire, record mark first.
    pub fn segments(&self) -> &[Bytes] {
        &self.segments
    }
}

/// Reads the reply record to call `xid` (from [`RpcConnection::send`] or
/// [`RpcConnection::call_raw`]). Returns the results (a slice of `record`,
/// not a copy) when the call succeeded at the RPC level, else
/// [`ClientError::Rpc`].
pub fn reply_results(record: Bytes, xid: u32) -> Result<Bytes, ClientError> {
    let mut dec = Decoder::new(record);
    let (reply_xid, stat) = decode_reply_header(&mut dec)?;
    if reply_xid != xid {
        return Err(ClientError::Protocol(format!("reply xid {reply_xid:#x} for call {xid:#x}")));
    }
    match stat {
        ReplyStat::Accepted(AcceptStat::Success) => Ok(dec.rest()),
        other => Err(ClientError::Rpc(other)),
    }
}

type ReplySender = oneshot::Sender<Result<Bytes, ClientError>>;

/// What the caller side, the reader and the writer share.
struct Calls {
    state: Mutex<CallsState>,
    /// One permit per call in flight.
    slots: Semaphore,
    /// Tells the writer task to stop.
    shutdown: Notify,
    reader: Mutex<Option<AbortHandle>>,
    /// One permit per socket half dropped: with two, the socket is closed.
    released: Semaphore,
}

#[derive(Default)]
struct CallsState {
    pending: HashMap<u32, (u64, ReplySender)>,
    /// Tells one registration from a later one of the same xid.
    next_token: u64,
    /// Why the connection is no longer usable, once it is not.
    closed: Option<ClientError>,
    /// Close with a reset (zero linger) so the port is free at once.
    reset: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Calls {
    fn register(&self, xid: u32, tx: ReplySender) -> Result<u64, ClientError> {
        let mut st = lock(&self.state);
        if let Some(e) = &st.closed {
            return Err(e.clone());
        }
        if st.pending.contains_key(&xid) {
            return Err(ClientError::Protocol(format!("xid {xid:#x} already has a call in flight on this connection")));
        }
        st.next_token += 1;
        let token = st.next_token;
        st.pending.insert(xid, (token, tx));
        Ok(token)
    }

    fn cancel(&self, xid: u32, token: u64) {
        let mut st = lock(&self.state);
        if st.pending.get(&xid).is_some_and(|(t, _)| *t == token) {
            st.pending.remove(&xid);
        }
    }

    fn deliver(&self, record: Bytes) {
        let Some(xid) = record.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])) else {
            tracing::warn!(bytes = record.len(), "reply record shorter than an xid; dropped");
            return;
        };
        let waiter = lock(&self.state).pending.remove(&xid);
        match waiter {
            // The caller may have given up in the meantime; nothing to do.
            Some((_, tx)) => drop(tx.send(Ok(record))),
            None => tracing::debug!(xid, "reply to no call in flight (late or duplicate); dropped"),
        }
    }

    fn is_closed(&self) -> bool {
        lock(&self.state).closed.is_some()
    }

    fn close_reason(&self) -> ClientError {
        lock(&self.state)
            .closed
            .clone()
            .unwrap_or_else(|| ClientError::io(io::ErrorKind::ConnectionAborted, "connection closed"))
    }

    /// Marks the connection dead (the first reason wins), fails every
    /// waiting call with `reason` and stops both tasks. With `reset`, the
    /// socket is closed with a reset (zero linger) rather than a FIN, so no
    /// TIME_WAIT or LAST_ACK state keeps its source port busy.
    fn fail(&self, reason: ClientError, reset: bool) {
        let pending = {
            let mut st = lock(&self.state);
            if st.closed.is_none() {
                tracing::debug!(error = %reason, "connection closed");
                st.closed = Some(reason);
            }
            st.reset |= reset;
            std::mem::take(&mut st.pending)
        };
        let reason = self.close_reason();
        for (_, (_, tx)) in pending {
            drop(tx.send(Err(reason.clone())));
        }
        self.slots.close();
        self.shutdown.notify_one();
        if let Some(reader) = lock(&self.reader).take() {
            reader.abort();
        }
    }
}

/// Reports a socket half as dropped, when dropped itself.
struct Released(Arc<Calls>);

impl Drop for Released {
    fn drop(&mut self) {
        self.0.released.add_permits(1);
    }
}

/// A socket half owned by a task. Fields drop in order: the half first,
/// then the report that it is gone, whether the task ends or is aborted.
struct Half<H> {
    io: H,
    _released: Released,
}

/// Removes a call's registration however its future ends (reply, timeout,
/// or the caller dropping it), so the pending table cannot leak.
struct Registration<'a> {
    calls: &'a Calls,
    xid: u32,
    token: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.calls.cancel(self.xid, self.token);
    }
}

struct ConnInner {
    calls: Arc<Calls>,
    queue: mpsc::Sender<Vec<Bytes>>,
    local: SocketAddr,
    peer: SocketAddr,
}

impl Drop for ConnInner {
    fn drop(&mut self) {
        // Last handle gone: no call can be waiting. Stop the tasks; the
        // socket closes with a FIN once both halves are dropped.
        self.calls.fail(ClientError::io(io::ErrorKind::ConnectionAborted, "connection dropped by the client"), false);
    }
}

/// One TCP connection carrying RPC calls of any program. Cheap to clone:
/// clones share the socket, and each clone has its own credential and call
/// timeout ([`with_auth`](Self::with_auth),
/// [`with_timeout`](Self::with_timeout)). The connection closes when the
/// last clone is dropped, or at once with [`close`](Self::close).
#[derive(Clone)]
pub struct RpcConnection {
    inner: Arc<ConnInner>,
    cred: OpaqueAuth,
    timeout: Duration,
}

impl fmt::Debug for RpcConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RpcConnection")
            .field("local", &self.inner.local)
            .field("peer", &self.inner.peer)
            .field("closed", &self.inner.calls.is_closed())
            .finish()
    }
}

impl RpcConnection {
    /// Connects to `addr` and starts the reader and writer tasks (so it must
    /// run inside a tokio runtime).
    pub async fn connect(addr: SocketAddr, opts: &ConnectOptions) -> Result<Self, ClientError> {
        let stream = tokio::time::timeout(opts.connect_timeout, open_stream(addr, opts))
            .await
            .map_err(|_| ClientError::Timeout(opts.connect_timeout))??;
        Self::from_stream(stream, opts)
    }

    /// Runs the client over an already connected stream.
    pub fn from_stream(stream: TcpStream, opts: &ConnectOptions) -> Result<Self, ClientError> {
        // Calls are small and latency-bound: never wait for Nagle.
        stream.set_nodelay(true)?;
        let local = stream.local_addr()?;
        let peer = stream.peer_addr()?;
        let outstanding = opts.outstanding_max.clamp(1, OUTSTANDING_LIMIT);
        let calls = Arc::new(Calls {
            state: Mutex::new(CallsState::default()),
            slots: Semaphore::new(outstanding),
            shutdown: Notify::new(),
            reader: Mutex::new(None),
            released: Semaphore::new(0),
        });
        let (rd, wr) = stream.into_split();
        let rd = Half { io: rd, _released: Released(calls.clone()) };
        let wr = Half { io: wr, _released: Released(calls.clone()) };
        let (queue, rx) = mpsc::channel(outstanding);
        tokio::spawn(write_task(wr, rx, calls.clone()));
        let reader = tokio::spawn(read_task(rd, calls.clone(), opts.record_bytes_max));
        *lock(&calls.reader) = Some(reader.abort_handle());
        // A failure before the handle was stored could not abort the reader;
        // it has ended by itself then, but make sure.
        if calls.is_closed() {
            reader.abort();
        }
        tracing::debug!(%local, %peer, "connected");
        Ok(RpcConnection {
            inner: Arc::new(ConnInner { calls, queue, local, peer }),
            cred: credential(&opts.auth),
            timeout: opts.call_timeout,
        })
    }

    /// Calls `proc_` of `prog` version `vers` with the arguments `args`
    /// writes, and returns the results: the reply after its header, as a
    /// slice of the received record. RPC-level rejections are
    /// [`ClientError::Rpc`].
    ///
    /// The arguments are encoded before this returns, so `args` need not be
    /// `Send`, and the future does not borrow `self`: it is `'static` (can
    /// be spawned) whenever `args` is.
    pub fn call<F: FnOnce(&mut Encoder)>(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: F,
    ) -> impl Future<Output = Result<Bytes, ClientError>> + Send + use<F> {
        let xid = next_xid();
        let prepared = PreparedCall::from_body(xid, encode_call(xid, &self.cred, prog, vers, proc_, args));
        let this = self.clone();
        async move { reply_results(this.send(&prepared?).await?, xid) }
    }

    /// Sends `record` (everything after the record mark) as one record and
    /// returns the whole reply record, matched by the first four bytes of
    /// `record` taken as the xid. For malformed-input tests: nothing in
    /// `record` is checked besides having an xid.
    pub async fn call_raw(&self, record: Bytes) -> Result<Bytes, ClientError> {
        let Some(xid) = record.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])) else {
            return Err(ClientError::Protocol("a raw call needs at least the 4 bytes of an xid".into()));
        };
        self.send(&PreparedCall::from_body(xid, vec![record])?).await
    }

    /// Sends a prepared call and waits for its reply record, within this
    /// handle's call timeout. Sending the same `PreparedCall` again (here or
    /// on another connection) is a retransmission.
    pub async fn send(&self, call: &PreparedCall) -> Result<Bytes, ClientError> {
        let calls = &*self.inner.calls;
        let exchange = async {
            let _slot = calls.slots.acquire().await.map_err(|_| calls.close_reason())?;
            let (tx, rx) = oneshot::channel();
            let token = calls.register(call.xid, tx)?;
            let _registration = Registration { calls, xid: call.xid, token };
            self.inner.queue.send(call.segments.clone()).await.map_err(|_| calls.close_reason())?;
            rx.await.unwrap_or_else(|_| Err(calls.close_reason()))
        };
        tokio::time::timeout(self.timeout, exchange).await.unwrap_or(Err(ClientError::Timeout(self.timeout)))
    }

    /// A handle on the same connection that sends `auth` instead.
    pub fn with_auth(&self, auth: &Auth) -> Self {
        RpcConnection { cred: credential(auth), ..self.clone() }
    }

    /// Sends `auth` from now on (this handle only).
    pub fn set_auth(&mut self, auth: &Auth) {
        self.cred = credential(auth);
    }

    /// A handle on the same connection whose calls time out after `timeout`.
    pub fn with_timeout(&self, timeout: Duration) -> Self {
        RpcConnection { timeout, ..self.clone() }
    }

    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    pub fn peer_addr(&self) -> SocketAddr {
        self.inner.peer
    }

    /// Whether the connection is dead (lost, or closed by [`close`](Self::close)).
    pub fn is_closed(&self) -> bool {
        self.inner.calls.is_closed()
    }

    /// Calls waiting for a reply right now.
    pub fn in_flight(&self) -> usize {
        lock(&self.inner.calls.state).pending.len()
    }

    /// Closes the connection now, for every handle: waiting calls fail with
    /// `ConnectionAborted`. Returns once the socket is closed (or after a
    /// short bound). The socket is reset rather than closed in order, so no
    /// TIME_WAIT keeps its source port: a reconnect can come back from the
    /// same port, which the server's reply cache needs to recognise
    /// retransmissions.
    pub async fn close(&self) {
        let calls = &self.inner.calls;
        calls.fail(ClientError::io(io::ErrorKind::ConnectionAborted, "connection closed by the client"), true);
        if let Ok(Ok(permits)) = tokio::time::timeout(CLOSE_WAIT, calls.released.acquire_many(2)).await {
            // Give them back, so that every later `close` returns at once.
            drop(permits);
        }
    }
}

/// Opens the TCP connection, from the source port `opts` asks for.
async fn open_stream(addr: SocketAddr, opts: &ConnectOptions) -> Result<TcpStream, ClientError> {
    if let Some(port) = opts.source_port.filter(|&p| p != 0) {
        return Ok(connect_from(addr, port).await?);
    }
    if opts.reserved_port {
        match connect_reserved(addr).await {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                static WARNED: AtomicBool = AtomicBool::new(false);
                if !WARNED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        %addr,
                        "no privilege to bind a reserved port (not root); connecting from ordinary ports, \
                         which exports marked `secure` refuse"
                    );
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(connect_from(addr, 0).await?)
}

/// Whether this process may bind the reserved ports that
/// [`ConnectOptions::reserved_port`] asks for (root, `CAP_NET_BIND_SERVICE`,
/// or a lowered `ip_unprivileged_port_start`). Probes with a UDP bind on
/// the loopback address, which takes no TCP port from anyone: the kernel
/// checks the privilege before it looks whether the port is free.
pub fn reserved_port_available() -> bool {
    let probe = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, *RESERVED_PORTS.start()));
    !matches!(probe, Err(e) if e.kind() == io::ErrorKind::PermissionDenied)
}

/// Connects from `port` (0: any) on the wildcard address of `addr`'s
/// family. Always with `SO_REUSEADDR`: a later connection may then bind
/// this one's port while it is still winding down (Linux only allows that
/// when both sockets set the option).
async fn connect_from(addr: SocketAddr, port: u16) -> io::Result<TcpStream> {
    let (socket, wildcard) = match addr {
        SocketAddr::V4(_) => (TcpSocket::new_v4()?, SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))),
        SocketAddr::V6(_) => (TcpSocket::new_v6()?, SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))),
    };
    socket.set_reuseaddr(true)?;
    if port != 0 {
        socket.bind(wildcard)?;
    }
    socket.connect(addr).await
}

/// Connects from the first free port of [`RESERVED_PORTS`], starting at a
/// rotating point so that concurrent connects do not all fight for 1023.
async fn connect_reserved(addr: SocketAddr) -> io::Result<TcpStream> {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let (low, high) = (*RESERVED_PORTS.start(), *RESERVED_PORTS.end());
    let count = high - low + 1;
    let start = NEXT.fetch_add(1, Ordering::Relaxed);
    for i in 0..count {
        let port = high - (start.wrapping_add(i) % count);
        match connect_from(addr, port).await {
            Err(e) if matches!(e.kind(), io::ErrorKind::AddrInUse | io::ErrorKind::AddrNotAvailable) => continue,
            result => return result,
        }
    }
    Err(io::Error::new(io::ErrorKind::AddrInUse, "every reserved port is in use"))
}

async fn read_task(mut rd: Half<tokio::net::tcp::OwnedReadHalf>, calls: Arc<Calls>, record_bytes_max: usize) {
    let reason = read_records(&mut rd.io, &calls, record_bytes_max).await;
    // Reset: the connection is dead either way, and a reset frees the port.
    calls.fail(reason, true);
}

/// Delivers records until the stream fails; returns why it did.
async fn read_records<R: AsyncRead + Unpin>(rd: &mut R, calls: &Calls, record_bytes_max: usize) -> ClientError {
    let mut buf = BytesMut::new();
    let mut records = RecordAssembler::new(record_bytes_max);
    loop {
        loop {
            match records.next_record(&mut buf) {
                Ok(Some(record)) => calls.deliver(record),
                Ok(None) => break,
                Err(e) => return e.into(),
            }
        }
        // Room for the whole fragment being received (bounded by the record
        // limit, already checked) so a large READ arrives in one buffer.
        let wanted = records.bytes_wanted(&buf).saturating_sub(buf.len());
        buf.reserve(wanted.max(READ_BUF_MIN));
        match rd.read_buf(&mut buf).await {
            Ok(0) => return ClientError::io(io::ErrorKind::UnexpectedEof, "connection closed by the server"),
            Ok(_) => {}
            Err(e) => return e.into(),
        }
    }
}

async fn write_task(mut wr: Half<OwnedWriteHalf>, mut queue: mpsc::Receiver<Vec<Bytes>>, calls: Arc<Calls>) {
    let result = tokio::select! {
        biased;
        () = calls.shutdown.notified() => Ok(()),
        r = pump(&mut wr.io, &mut queue) => r,
    };
    if let Err(e) = result {
        calls.fail(e.into(), true);
    }
    if lock(&calls.state).reset {
        // Best effort: takes effect when the last half is dropped.
        drop(wr.io.as_ref().set_zero_linger());
    }
}

/// Writes queued records until the queue closes. Records queued while a
/// write is under way go out together in the next `writev`.
pub(crate) async fn pump<W: AsyncWrite + Unpin>(w: &mut W, queue: &mut mpsc::Receiver<Vec<Bytes>>) -> io::Result<()> {
    let mut batch = Vec::new();
    while let Some(record) = queue.recv().await {
        batch.extend(record);
        while batch.len() < BATCH_SEGMENTS_MAX {
            match queue.try_recv() {
                Ok(record) => batch.extend(record),
                Err(_) => break,
            }
        }
        write_segments(w, &batch).await?;
        batch.clear();
    }
    Ok(())
}

/// Writes every byte of `segments` with vectored writes, each segment its
/// own `IoSlice`: payloads go from their `Bytes` to the socket uncopied.
pub(crate) async fn write_segments<W: AsyncWrite + Unpin>(w: &mut W, segments: &[Bytes]) -> io::Result<()> {
    let (mut index, mut offset) = (0, 0);
    loop {
        let slices: Vec<IoSlice<'_>> = segments[index..]
            .iter()
            .enumerate()
            .map(|(i, s)| if i == 0 { &s[offset..] } else { &s[..] })
            .filter(|s| !s.is_empty())
            .take(IOV_MAX)
            .map(IoSlice::new)
            .collect();
        if slices.is_empty() {
            break;
        }
        let mut n = w.write_vectored(&slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let left = segments[index].len() - offset;
            if n >= left {
                n -= left;
                index += 1;
                offset = 0;
            } else {
                offset += n;
                n = 0;
            }
        }
    }
    w.flush().await
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use super::*;

    /// Records every `IoSlice` it is handed, accepting at most `limit` bytes
    /// per call so partial writes are exercised.
    struct Recorder {
        slices: Vec<(usize, usize)>,
        data: Vec<u8>,
        limit: usize,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.limit);
            self.data.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let mut n = 0;
            for b in bufs {
                self.slices.push((b.as_ptr() as usize, b.len()));
                let take = b.len().min(self.limit - n);
                self.data.extend_from_slice(&b[..take]);
                n += take;
                if n == self.limit {
                    break;
                }
            }
            Poll::Ready(Ok(n))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn write_call(payload: Bytes) -> PreparedCall {
        let args = keel_nfs3_proto::Write3Args {
            file: keel_nfs3_proto::NfsFh3::new(&b"fh"[..]),
            offset: 0,
            count: payload.len() as u32,
            stable: keel_nfs3_proto::StableHow::Unstable,
            data: payload,
        };
        PreparedCall::new(7, &Auth::None, 100_003, 3, 7, |e| e.put(&args)).unwrap()
    }

    #[tokio::test]
    async fn write_payload_reaches_the_socket_as_its_own_uncopied_slice() {
        let payload = Bytes::from((0..300_000u32).map(|i| i as u8).collect::<Vec<u8>>());
        let call = write_call(payload.clone());
        let mut w = Recorder { slices: Vec::new(), data: Vec::new(), limit: usize::MAX };
        write_segments(&mut w, &call.segments).await.unwrap();
        assert!(
            w.slices.contains(&(payload.as_ptr() as usize, payload.len())),
            "payload not handed over as its own IoSlice: {:?}",
            w.slices
        );
        let expected: Vec<u8> = call.segments.iter().flat_map(|s| s.iter().copied()).collect();
        assert_eq!(w.data, expected);
    }

    #[tokio::test]
    async fn partial_vectored_writes_resume_where_they_stopped() {
        let call = write_call(Bytes::from(vec![0xa5; 10_001]));
        for limit in [1, 3, 4, 1000, 4096] {
            let mut w = Recorder { slices: Vec::new(), data: Vec::new(), limit };
            write_segments(&mut w, &call.segments).await.unwrap();
            let expected: Vec<u8> = call.segments.iter().flat_map(|s| s.iter().copied()).collect();
            assert_eq!(w.data, expected, "limit {limit}");
            // Every slice handed over points into one of the call's own
            // segments: resuming a partial write never copies.
            for (ptr, len) in &w.slices {
                let inside = call.segments.iter().any(|s| {
                    let start = s.as_ptr() as usize;
                    *ptr >= start && ptr + len <= start + s.len()
                });
                assert!(inside, "limit {limit}: slice {ptr:#x}+{len} is a copy");
            }
        }
    }

    #[tokio::test]
    async fn queued_records_are_batched_in_order() {
        let (tx, mut rx) = mpsc::channel(8);
        for i in 0..5u8 {
            tx.send(vec![Bytes::from(vec![i; 3]), Bytes::from(vec![i; 2])]).await.unwrap();
        }
        drop(tx);
        let mut w = Recorder { slices: Vec::new(), data: Vec::new(), limit: usize::MAX };
        pump(&mut w, &mut rx).await.unwrap();
        assert_eq!(w.data, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4]);
        assert_eq!(w.slices.len(), 10, "one writev for all five records");
    }

    #[test]
    fn prepared_calls_carry_a_correct_record_mark() {
        let call = write_call(Bytes::from(vec![1; 5000]));
        let body: usize = call.segments[1..].iter().map(Bytes::len).sum();
        assert_eq!(&call.segments[0][..], &record_mark(body));
        let mut dec = Decoder::new(call.segments[1].clone());
        let header = CallHeader::decode(&mut dec).unwrap();
        assert_eq!((header.xid, header.prog, header.vers, header.proc_), (7, 100_003, 3, 7));
    }

    #[test]
    fn xids_are_unique_in_a_process() {
        let a: Vec<u32> = (0..1000).map(|_| next_xid()).collect();
        let set: std::collections::HashSet<_> = a.iter().collect();
        assert_eq!(set.len(), a.len());
    }
}

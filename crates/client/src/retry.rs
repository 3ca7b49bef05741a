//! Hard-mount semantics: reconnect and retransmit until the server answers
//! (or a bounded time has passed).
//!
//! What a retransmission is, and why the details matter:
//!
//! - A call is encoded **once**, with one xid. Every retry sends those same
//!   bytes again, on whatever connection is current. The server's duplicate
//!   reply cache recognises a retransmitted non-idempotent call (CREATE,
//!   REMOVE, RENAME, WRITE, ...) by client address, xid and a checksum of
//!   the arguments, and answers it from the cache rather than running it a
//!   second time (which would turn a successful REMOVE into NFS3ERR_NOENT).
//! - The cache key includes the client's **source port**, so a reconnect
//!   binds the port the previous connection used (as the Linux client
//!   does). A connection this client gives up on is reset rather than
//!   closed so no TIME_WAIT holds that port. When the port cannot be had
//!   anyway, the client reconnects from a new one and logs it: the call is
//!   still retransmitted, but the cache will not recognise it.
//! - Retries happen on connection loss ([`ClientError::Io`]) and on
//!   timeout ([`ClientError::Timeout`]); a timed-out connection is closed
//!   first, which makes every other call waiting on it retransmit as well.
//!   Answers, including RPC rejections and NFS errors, are returned as
//!   they are. Between attempts the client backs off exponentially; it
//!   gives up when [`RetryPolicy::give_up_after`] has passed since the
//!   call started and returns the last error.
//! - A server restart empties its reply cache, so a retransmitted call
//!   that had been executed before the restart is executed again. That is
//!   inherent to NFSv3; `keel verify` must allow for it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use keel_rpc::msg::{Auth, OpaqueAuth};
use keel_xdr::Encode;
use tokio::time::Instant;

use crate::RpcTransport;
use crate::conn::{ConnectOptions, PreparedCall, RpcConnection, credential, encode_call, next_xid, reply_results};
use crate::error::ClientError;

/// Attempts to reconnect from the previous source port before using another:
/// up to two seconds, as long as closing may take, because a retransmission
/// from another port escapes the server's reply cache.
const SAME_PORT_TRIES: u32 = 100;
const SAME_PORT_PAUSE: Duration = Duration::from_millis(20);

/// How long and how often to retry.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Total time a call (or the first connect) may take, retries included.
    pub give_up_after: Duration,
    /// Wait before the first retry; doubled after each failed attempt.
    pub backoff_initial: Duration,
    /// Longest wait between attempts.
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    /// Five minutes of retries: long enough to ride out a server restart.
    fn default() -> Self {
        RetryPolicy {
            give_up_after: Duration::from_secs(300),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// Counters, for tests and for `keel verify`'s report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryStats {
    /// Connections opened, the first one included.
    pub connects: u64,
    /// Connections reopened from the previous source port.
    pub same_port_reconnects: u64,
    /// Calls sent again after a failed attempt.
    pub retransmissions: u64,
}

/// A transport that reconnects and retransmits, as a hard-mounted client
/// does (see the module documentation for the exact semantics). Cheap to
/// clone; clones share the current connection. Each call's attempts are
/// bounded by [`ConnectOptions::call_timeout`], the whole call by the
/// [`RetryPolicy`].
#[derive(Clone)]
pub struct RetryingConnection {
    shared: Arc<Shared>,
    cred: OpaqueAuth,
}

struct Shared {
    addr: SocketAddr,
    opts: ConnectOptions,
    policy: RetryPolicy,
    current: tokio::sync::Mutex<Current>,
    connects: AtomicU64,
    same_port_reconnects: AtomicU64,
    retransmissions: AtomicU64,
}

#[derive(Default)]
struct Current {
    conn: Option<RpcConnection>,
    /// Bumped on every connect, so that of many calls failing on the same
    /// connection only the first closes it.
    generation: u64,
    /// Source port of the last connection, to reconnect from.
    local_port: Option<u16>,
}

impl std::fmt::Debug for RetryingConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryingConnection").field("addr", &self.shared.addr).field("stats", &self.stats()).finish()
    }
}

impl RetryingConnection {
    /// Connects to `addr`, retrying under `policy` (so a server that is
    /// still starting up is waited for).
    pub async fn connect(addr: SocketAddr, opts: &ConnectOptions, policy: RetryPolicy) -> Result<Self, ClientError> {
        let this = RetryingConnection {
            shared: Arc::new(Shared {
                addr,
                opts: opts.clone(),
                policy,
                current: tokio::sync::Mutex::new(Current::default()),
                connects: AtomicU64::new(0),
                same_port_reconnects: AtomicU64::new(0),
                retransmissions: AtomicU64::new(0),
            }),
            cred: credential(&opts.auth),
        };
        let started = Instant::now();
        let mut backoff = this.shared.policy.backoff_initial;
        loop {
            match this.connection().await {
                Ok(_) => return Ok(this),
                Err(e) => backoff = this.back_off(e, started, backoff, None).await?,
            }
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    pub fn stats(&self) -> RetryStats {
        RetryStats {
            connects: self.shared.connects.load(Ordering::Relaxed),
            same_port_reconnects: self.shared.same_port_reconnects.load(Ordering::Relaxed),
            retransmissions: self.shared.retransmissions.load(Ordering::Relaxed),
        }
    }

    /// The current connection, if one is open.
    pub async fn current(&self) -> Option<RpcConnection> {
        self.shared.current.lock().await.conn.clone().filter(|c| !c.is_closed())
    }

    /// Calls `proc_` of `prog`/`vers` and returns the results after the
    /// reply header. The call is encoded once and retransmitted as is.
    pub async fn call(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: &(dyn Encode + Sync),
    ) -> Result<Bytes, ClientError> {
        let xid = next_xid();
        let call = PreparedCall::from_body(xid, encode_call(xid, &self.cred, prog, vers, proc_, |e| args.encode(e)))?;
        reply_results(self.send(&call).await?, xid)
    }

    /// Sends `call` until a reply comes back, reconnecting as needed, and
    /// returns the reply record. Every attempt sends the same bytes.
    pub async fn send(&self, call: &PreparedCall) -> Result<Bytes, ClientError> {
        let started = Instant::now();
        let mut backoff = self.shared.policy.backoff_initial;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            if attempts > 1 {
                self.shared.retransmissions.fetch_add(1, Ordering::Relaxed);
            }
            let (error, generation) = match self.connection().await {
                Ok((conn, generation)) => match conn.send(call).await {
                    Ok(record) => return Ok(record),
                    Err(e) => (e, Some(generation)),
                },
                Err(e) => (e, None),
            };
            tracing::debug!(xid = call.xid, attempts, %error, "call attempt failed");
            backoff = self.back_off(error, started, backoff, generation).await?;
        }
    }

    /// After a failed attempt: gives up (returning the error) if it is not
    /// retryable or time is up; otherwise drops the failed connection,
    /// sleeps and returns the next backoff.
    async fn back_off(
        &self,
        error: ClientError,
        started: Instant,
        backoff: Duration,
        generation: Option<u64>,
    ) -> Result<Duration, ClientError> {
        if !error.is_retryable() {
            return Err(error);
        }
        if let Some(generation) = generation {
            self.discard(generation).await;
        }
        let policy = &self.shared.policy;
        if started.elapsed().saturating_add(backoff) > policy.give_up_after {
            tracing::warn!(addr = %self.shared.addr, %error, "giving up after {:?}", started.elapsed());
            return Err(error);
        }
        tracing::info!(addr = %self.shared.addr, %error, "retrying in {backoff:?}");
        tokio::time::sleep(backoff).await;
        Ok(backoff.saturating_mul(2).min(policy.backoff_max))
    }

    /// Closes the connection of `generation` if it is still the current
    /// one. A connection that merely timed out is alive, and calls still
    /// waiting on it would wait in vain: closing it makes them retransmit.
    async fn discard(&self, generation: u64) {
        let mut current = self.shared.current.lock().await;
        if current.generation == generation
            && let Some(conn) = current.conn.take()
        {
            conn.close().await;
        }
    }

    /// The current connection, connecting first if there is none.
    async fn connection(&self) -> Result<(RpcConnection, u64), ClientError> {
        let mut current = self.shared.current.lock().await;
        if let Some(conn) = &current.conn
            && !conn.is_closed()
        {
            return Ok((conn.clone(), current.generation));
        }
        current.conn = None;
        let conn = self.open(current.local_port).await?;
        self.shared.connects.fetch_add(1, Ordering::Relaxed);
        current.generation += 1;
        current.local_port = Some(conn.local_addr().port());
        current.conn = Some(conn.clone());
        Ok((conn, current.generation))
    }

    /// Opens a connection, from `port` if possible. The previous socket on
    /// that port may take a moment to go away, so a busy port is retried a
    /// few times before giving up on it.
    async fn open(&self, port: Option<u16>) -> Result<RpcConnection, ClientError> {
        let Shared { addr, opts, .. } = &*self.shared;
        if let Some(port) = port {
            let same_port = ConnectOptions { source_port: Some(port), ..opts.clone() };
            for attempt in 1..=SAME_PORT_TRIES {
                match RpcConnection::connect(*addr, &same_port).await {
                    Ok(conn) => {
                        self.shared.same_port_reconnects.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(%addr, port, "reconnected from the same source port");
                        return Ok(conn);
                    }
                    Err(e) if is_port_busy(&e) && attempt < SAME_PORT_TRIES => {
                        tokio::time::sleep(SAME_PORT_PAUSE).await;
                    }
                    Err(e) if is_port_busy(&e) => {
                        tracing::warn!(
                            %addr, port, error = %e,
                            "source port unavailable; reconnecting from another, so the server's reply cache \
                             will not recognise retransmissions"
                        );
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        RpcConnection::connect(*addr, opts).await
    }
}

fn is_port_busy(e: &ClientError) -> bool {
    matches!(e.io_kind(), Some(std::io::ErrorKind::AddrInUse | std::io::ErrorKind::AddrNotAvailable))
}

impl RpcTransport for RetryingConnection {
    fn call_args(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: &(dyn Encode + Sync),
    ) -> impl Future<Output = Result<Bytes, ClientError>> + Send {
        self.call(prog, vers, proc_, args)
    }

    fn with_auth(&self, auth: &Auth) -> Self {
        RetryingConnection { shared: self.shared.clone(), cred: credential(auth) }
    }
}

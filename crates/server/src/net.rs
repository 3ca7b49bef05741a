//! TCP: accepting connections and moving records between sockets and the
//! workers. Per connection there is one reader task and one writer task,
//! never a task per request; replies queued meanwhile go out together in
//! one writev.

use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use keel_rpc::record::RecordAssembler;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::workers::{Job, QueuedReply};

/// Largest RPC record accepted: a 1 MiB WRITE plus headers, with room.
pub const RECORD_BYTES_MAX: usize = (1 << 20) + (64 << 10);
/// Bytes read from a socket at a time when no large record is expected.
const READ_CHUNK_BYTES: usize = 64 << 10;
/// Segments handed to one writev (IOV_MAX is 1024).
const WRITEV_SEGMENTS_MAX: usize = 512;
/// Unit of the in-flight byte budget.
pub const BUDGET_UNIT_BYTES: usize = 1024;
/// How long a closing connection keeps reading (and discarding) what the
/// client still sends, so that its last replies are not reset away.
const LINGER: Duration = Duration::from_secs(2);

/// What every connection shares.
pub struct Net {
    pub jobs: crossbeam_channel::Sender<Job>,
    /// Open connections; a permit per connection.
    pub connections: Arc<Semaphore>,
    /// Bytes of received calls not yet answered, in BUDGET_UNIT_BYTES.
    pub inflight_budget: Arc<Semaphore>,
    pub requests_per_connection: usize,
    pub shutdown: watch::Receiver<bool>,
}

pub async fn accept_loop(listener: TcpListener, net: Arc<Net>) {
    let mut shutdown = net.shutdown.clone();
    let local = listener.local_addr().ok();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        match accepted {
            Ok((stream, peer)) => match net.connections.clone().try_acquire_owned() {
                Ok(permit) => {
                    tokio::spawn(serve_connection(stream, peer, net.clone(), permit));
                }
                Err(_) => tracing::warn!(%peer, "connection refused: max_connections reached"),
            },
            Err(e) => {
                // Out of descriptors, typically: back off instead of spinning.
                tracing::warn!(listener = ?local, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    tracing::debug!(listener = ?local, "stopped accepting");
}

async fn serve_connection(stream: TcpStream, peer: SocketAddr, net: Arc<Net>, _slot: OwnedSemaphorePermit) {
    let local = stream.local_addr().unwrap_or(peer);
    let _ = stream.set_nodelay(true);
    let _ = socket2::SockRef::from(&stream).set_keepalive(true);
    tracing::info!(%peer, %local, "connection opened");
    let (mut rd, wr) = stream.into_split();
    let (reply_tx, reply_rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_replies(wr, reply_rx));
    let requests = Arc::new(Semaphore::new(net.requests_per_connection));
    let mut shutdown = net.shutdown.clone();
    let mut assembler = RecordAssembler::new(RECORD_BYTES_MAX);
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);

    let reason = 'conn: loop {
        match assembler.next_record(&mut buf) {
            Ok(Some(record)) => {
                let units = (record.len() / BUDGET_UNIT_BYTES + 1) as u32;
                let permits = tokio::select! {
                    p = acquire_both(&requests, &net.inflight_budget, units) => p,
                    _ = shutdown.wait_for(|stop| *stop) => break 'conn "server stopping".to_string(),
                };
                let job = Job { record, peer, local, reply: reply_tx.clone(), permits };
                if net.jobs.send(job).is_err() {
                    break 'conn "workers stopped".to_string();
                }
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%peer, error = %e, "bad record; closing the connection");
                break 'conn e.to_string();
            }
        }
        // Room for the rest of the record being received (one allocation
        // for a large WRITE), or for another chunk.
        let wanted = assembler.bytes_wanted(&buf).max(buf.len() + READ_CHUNK_BYTES / 4);
        if buf.capacity() < wanted {
            buf.reserve(wanted - buf.len());
        }
        tokio::select! {
            r = rd.read_buf(&mut buf) => match r {
                Ok(0) => break 'conn "closed by the client".to_string(),
                Ok(_) => {}
                Err(e) => break 'conn e.to_string(),
            },
            _ = shutdown.wait_for(|stop| *stop) => break 'conn "server stopping".to_string(),
        }
    };
    // The writer ends once the calls still with the workers are answered.
    drop(reply_tx);
    let _ = writer.await;
    // Closing a socket with unread input makes the kernel reset the
    // connection and drop replies the client has not received yet: read
    // (and ignore) what the client still sends until it closes its side,
    // for a bounded time.
    let _ = tokio::time::timeout(LINGER, async {
        loop {
            buf.clear();
            match rd.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    tracing::info!(%peer, reason = %reason, "connection closed");
}

async fn acquire_both(
    requests: &Arc<Semaphore>,
    budget: &Arc<Semaphore>,
    units: u32,
) -> (OwnedSemaphorePermit, OwnedSemaphorePermit) {
    let slot = requests.clone().acquire_owned().await.expect("semaphore never closed");
    let bytes = budget.clone().acquire_many_owned(units).await.expect("semaphore never closed");
    (slot, bytes)
}

async fn write_replies(mut wr: OwnedWriteHalf, mut replies: mpsc::UnboundedReceiver<QueuedReply>) {
    let mut batch: Vec<Bytes> = Vec::new();
    // The permits of the calls in `batch`, released once it is written.
    let mut permits = Vec::new();
    while let Some((first, p)) = replies.recv().await {
        batch.extend(first);
        permits.push(p);
        while batch.len() < WRITEV_SEGMENTS_MAX - 8 {
            match replies.try_recv() {
                Ok((more, p)) => {
                    batch.extend(more);
                    permits.push(p);
                }
                Err(_) => break,
            }
        }
        if let Err(e) = write_all_vectored(&mut wr, &batch).await {
            tracing::debug!(error = %e, "reply write failed");
            // Keep draining so workers never block on a dead connection.
            while replies.recv().await.is_some() {}
            return;
        }
        batch.clear();
        permits.clear();
    }
    let _ = wr.shutdown().await;
}

async fn write_all_vectored(wr: &mut OwnedWriteHalf, segments: &[Bytes]) -> std::io::Result<()> {
    let mut slices: Vec<IoSlice> = segments.iter().filter(|s| !s.is_empty()).map(|s| IoSlice::new(s)).collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = wr.write_vectored(rest).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}

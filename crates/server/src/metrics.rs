//! Prometheus metrics over HTTP (`metrics_listen`, off by default): a
//! minimal HTTP/1.1 responder for `GET /metrics`, bounded in connections,
//! request size and time. Each response is a fresh snapshot of the same
//! counters `keel stat` shows, in the text exposition format.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use crate::stats::ServerStats;

/// Scrapes served at once; more wait in the listen backlog.
const CONNECTIONS_MAX: usize = 8;
/// The request head (request line and headers) read at most.
const REQUEST_BYTES_MAX: usize = 8 << 10;
/// For the request to arrive and the response to be taken.
const TIMEOUT: Duration = Duration::from_secs(10);

pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    use anyhow::Context;
    TcpListener::bind(addr).await.with_context(|| format!("cannot listen for metrics on {addr}"))
}

pub async fn serve(listener: TcpListener, stats: Arc<ServerStats>, mut shutdown: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.expect("never closed"),
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                let stats = stats.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    if let Err(e) = tokio::time::timeout(TIMEOUT, answer(stream, &stats)).await {
                        tracing::debug!(%peer, error = %e, "metrics request timed out");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(mut stream: TcpStream, stats: &ServerStats) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let complete = loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            break true;
        }
        if head.len() > REQUEST_BYTES_MAX {
            break false;
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    };
    let response = if complete {
        respond(&head, stats)
    } else {
        plain("431 Request Header Fields Too Large", "request too large\n")
    };
    let _ = stream.write_all(&response).await;
    let _ = stream.shutdown().await;
}

fn respond(head: &[u8], stats: &ServerStats) -> Vec<u8> {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end().split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let body = keel_stats::prometheus::render(&stats.snapshot());
            let mut out = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                keel_stats::prometheus::CONTENT_TYPE,
                body.len()
            )
            .into_bytes();
            if method == "GET" {
                out.extend_from_slice(body.as_bytes());
            }
            out
        }
        ("GET" | "HEAD", _) => plain("404 Not Found", "keel serves /metrics only\n"),
        _ => plain("405 Method Not Allowed", "GET /metrics\n"),
    }
}

fn plain(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

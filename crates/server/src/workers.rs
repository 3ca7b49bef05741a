//! The file-system workers (knfsd's nfsd threads): a fixed pool of OS
//! threads that decode, execute and encode calls. Each assumes the caller's
//! identity for the call, so identity never crosses threads, and no async
//! task is ever blocked on the disk.

use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use keel_rpc::msg::{AcceptStat, ReplyStat};
use keel_rpc::{Dispatcher, status_reply};
use tokio::sync::OwnedSemaphorePermit;

use crate::net::ReplyPath;

/// One call on its way to a worker.
pub struct Job {
    pub record: Bytes,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// Where the reply goes.
    pub reply: Arc<ReplyPath>,
    /// Held until the reply is written to the socket (they travel with it):
    /// the connection's in-flight slot and the call's share of the
    /// server's in-flight byte budget. Releasing them when the reply is
    /// merely queued would let a client that never reads make the server
    /// queue replies without bound.
    pub permits: Permits,
}

pub type Permits = (OwnedSemaphorePermit, OwnedSemaphorePermit);

pub struct WorkerPool {
    jobs: Option<crossbeam_channel::Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    pub fn start(workers: usize, dispatcher: Arc<Dispatcher>) -> std::io::Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let threads = (0..workers)
            .map(|i| {
                let (rx, dispatcher) = (rx.clone(), dispatcher.clone());
                std::thread::Builder::new().name(format!("keel-worker-{i}")).spawn(move || {
                    for job in rx.iter() {
                        run(&dispatcher, job);
                    }
                })
            })
            .collect::<std::io::Result<_>>()?;
        Ok(WorkerPool { jobs: Some(tx), threads })
    }

    pub fn sender(&self) -> crossbeam_channel::Sender<Job> {
        self.jobs.clone().expect("pool running")
    }

    /// Lets the queued calls finish, then joins the threads.
    pub fn stop(mut self) {
        self.jobs.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn run(dispatcher: &Dispatcher, job: Job) {
    let Job { record, peer, local, reply, permits } = job;
    let xid = record.get(..4).map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")));
    match catch_unwind(AssertUnwindSafe(|| dispatcher.handle(record, peer, local))) {
        Ok(Some(segments)) => reply.send(segments, permits),
        Ok(None) => {}
        Err(_) => {
            // Whatever identity the handler left behind, the next call
            // starts from root.
            if let Err(e) = keel_vfs::ident::reset() {
                tracing::error!(error = %e, "cannot reset the worker's identity after a panic");
            }
            tracing::error!(%peer, xid, "a request handler panicked; answered SYSTEM_ERR");
            if let Some(xid) = xid {
                reply.send(status_reply(xid, ReplyStat::Accepted(AcceptStat::SystemErr)), permits);
            }
        }
    }
}

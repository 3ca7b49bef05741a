//! The file-system workers (knfsd's nfsd threads): a fixed pool of OS
//! threads that decode, execute and encode calls. Each assumes the caller's
//! identity for the call, so identity never crosses threads, and no async
//! task is ever blocked on the disk.

use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use crossbeam_channel::TrySendError;
use keel_rpc::msg::{AcceptStat, ReplyStat};
use keel_rpc::{Dispatcher, status_reply};
use tokio::sync::{Notify, OwnedSemaphorePermit};

use crate::budget::Charge;
use crate::conns::CallInFlight;
use crate::net::ReplyPath;

/// Calls queued for the workers, per worker: enough to keep every worker
/// busy between two wake-ups of the connections' readers. More calls wait
/// in their sockets, where TCP holds them back.
const JOBS_QUEUED_PER_WORKER: usize = 4;

/// One call on its way to a worker.
pub struct Job {
    pub record: Bytes,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// Where the reply goes.
    pub reply: Arc<ReplyPath>,
    /// Held until the reply is written to the socket (they travel with it).
    pub permits: Permits,
}

/// What a call holds until its reply is written (or dropped with its
/// connection). Releasing them when the reply is merely queued would let a
/// client that never reads make the server queue replies without bound.
pub struct Permits {
    /// The connection's in-flight slot.
    pub _slot: OwnedSemaphorePermit,
    /// The call's record and largest reply, from the memory budget.
    pub charge: Charge,
    /// Keeps the connection from counting as idle.
    pub _call: CallInFlight,
}

/// The bounded queue from the connections' readers (async) to the workers
/// (OS threads). A reader facing a full queue waits asynchronously; each
/// worker that takes a job makes room for one waiting reader.
pub struct JobQueue {
    jobs: crossbeam_channel::Sender<Job>,
    room: Arc<Notify>,
}

impl JobQueue {
    /// Queues `job`, waiting for room; gives it back if the workers stopped.
    pub async fn push(&self, mut job: Job) -> Result<(), Job> {
        loop {
            // Registered before trying, so room made in between is not missed.
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match self.jobs.try_send(job) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(j)) => job = j,
                Err(TrySendError::Disconnected(j)) => return Err(j),
            }
            room.await;
        }
    }
}

pub struct WorkerPool {
    queue: Option<Arc<JobQueue>>,
    threads: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    pub fn start(workers: usize, dispatcher: Arc<Dispatcher>) -> std::io::Result<Self> {
        let jobs_queued_max = workers * JOBS_QUEUED_PER_WORKER;
        let (tx, rx) = crossbeam_channel::bounded::<Job>(jobs_queued_max);
        let room = Arc::new(Notify::new());
        let threads = (0..workers)
            .map(|i| {
                let (rx, dispatcher, room) = (rx.clone(), dispatcher.clone(), room.clone());
                std::thread::Builder::new().name(format!("keel-worker-{i}")).spawn(move || {
                    for job in rx.iter() {
                        room.notify_one();
                        run(&dispatcher, job);
                    }
                })
            })
            .collect::<std::io::Result<_>>()?;
        Ok(WorkerPool { queue: Some(Arc::new(JobQueue { jobs: tx, room })), threads })
    }

    pub fn queue(&self) -> Arc<JobQueue> {
        self.queue.clone().expect("pool running")
    }

    /// Lets the queued calls finish, then joins the threads.
    pub fn stop(mut self) {
        self.queue.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn run(dispatcher: &Dispatcher, job: Job) {
    let Job { record, peer, local, reply, mut permits } = job;
    let xid = record.get(..4).map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")));
    match catch_unwind(AssertUnwindSafe(|| dispatcher.handle(record, peer, local))) {
        Ok(Some(segments)) => {
            // The record is gone; the reply is what the call holds now.
            let reply_bytes: usize = segments.iter().map(Bytes::len).sum();
            if reply_bytes > permits.charge.bytes() {
                tracing::warn!(%peer, xid, reply_bytes, reserved_bytes = permits.charge.bytes(), "reply larger than its reserved bound");
            }
            permits.charge.resize(reply_bytes);
            reply.send(segments, permits)
        }
        Ok(None) => {}
        Err(_) => {
            // The identity the handler left behind is unknown now.
            keel_vfs::ident::forget();
            tracing::error!(%peer, xid, "a request handler panicked; answered SYSTEM_ERR");
            if let Some(xid) = xid {
                reply.send(status_reply(xid, ReplyStat::Accepted(AcceptStat::SystemErr)), permits);
            }
        }
    }
}

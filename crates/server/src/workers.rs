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
pub struct JobQueue<T = Job> {
    jobs: crossbeam_channel::Sender<T>,
    room: Arc<Notify>,
}

/// The workers' end of a [`JobQueue`].
pub struct JobReceiver<T = Job> {
    jobs: crossbeam_channel::Receiver<T>,
    room: Arc<Notify>,
}

/// A queue of at most `jobs_queued_max` jobs.
pub fn job_queue<T>(jobs_queued_max: usize) -> (JobQueue<T>, JobReceiver<T>) {
    assert!(jobs_queued_max > 0);
    let (tx, rx) = crossbeam_channel::bounded(jobs_queued_max);
    let room = Arc::new(Notify::new());
    (JobQueue { jobs: tx, room: room.clone() }, JobReceiver { jobs: rx, room })
}

impl<T> JobQueue<T> {
    /// Jobs waiting for a worker now, and the most the queue holds.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn capacity(&self) -> usize {
        self.jobs.capacity().unwrap_or(usize::MAX)
    }

    /// Queues `job`, waiting for room; gives it back if the workers stopped.
    pub async fn push(&self, mut job: T) -> Result<(), T> {
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

impl<T> JobReceiver<T> {
    /// The next job, blocking the thread; `None` once every queue end is
    /// gone and the queue is empty.
    pub fn recv(&self) -> Option<T> {
        let job = self.jobs.recv().ok()?;
        self.room.notify_one();
        Some(job)
    }
}

impl<T> Clone for JobReceiver<T> {
    fn clone(&self) -> Self {
        JobReceiver { jobs: self.jobs.clone(), room: self.room.clone() }
    }
}

pub struct WorkerPool {
    queue: Option<Arc<JobQueue>>,
    threads: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    pub fn start(workers: usize, dispatcher: Arc<Dispatcher>) -> std::io::Result<Self> {
        let (queue, rx) = job_queue(workers * JOBS_QUEUED_PER_WORKER);
        let threads = (0..workers)
            .map(|i| {
                let (rx, dispatcher) = (rx.clone(), dispatcher.clone());
                std::thread::Builder::new().name(format!("keel-worker-{i}")).spawn(move || {
                    while let Some(job) = rx.recv() {
                        run(&dispatcher, job);
                    }
                })
            })
            .collect::<std::io::Result<_>>()?;
        Ok(WorkerPool { queue: Some(Arc::new(queue)), threads })
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_full_queue_makes_the_reader_wait_until_a_worker_takes_a_job() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let (queue, rx) = job_queue::<u32>(2);
        rt.block_on(async {
            queue.push(1).await.unwrap();
            queue.push(2).await.unwrap();
            let third = tokio::time::timeout(Duration::from_millis(50), queue.push(3)).await;
            assert!(third.is_err(), "a third job went into a queue of two");
        });
        let worker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let first = rx.recv();
            (first, rx)
        });
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), queue.push(3)).await.expect("room made").unwrap();
        });
        let (first, rx) = worker.join().unwrap();
        assert_eq!(first, Some(1));
        assert_eq!((rx.recv(), rx.recv()), (Some(2), Some(3)));
        drop(rx);
        rt.block_on(async { assert_eq!(queue.push(4).await, Err(4), "no workers left") });
    }
}

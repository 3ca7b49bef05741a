//! The courier: the one thread that makes the server's calls to its
//! clients (GRANTED, `_RES` results, SM_NOTIFY), from a bounded queue, so
//! that no worker ever waits on a client. Each call looks the client's
//! service up with its portmapper and calls it over UDP from the address
//! the client talked to (a Linux client matches GRANTED against the
//! server address it locked at, and NSM peers know the server by it),
//! with a short timeout and few tries.
//!
//! A full queue drops the call; the protocol copes: a client waiting for
//! GRANTED polls with its LOCK again (Linux every 30 s), `_RES` results
//! are retried by the client's own retransmission, and an SM_NOTIFY
//! round is retried by the lock manager's tick.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_nlm_proto::nlm4::{NLM_PROGRAM, NLM_V4, Nlm4Proc, Nlm4Res, Nlm4Stats};
use keel_nlm_proto::nsm::{SM_PROGRAM, SM_V1, SmProc, StatChge};
use keel_rpc_client::{IPPROTO_UDP, Proc, Retry, bind_from, call, getport};
use keel_store::Store;
use keel_xdr::{Decode, Decoder, Encode, Encoder, Opaque};

use crate::manager::{Courier, LockManager, Outbound};

/// Calls waiting for the courier, at most.
pub const QUEUE_MAX: usize = 1024;
/// How often the idle courier looks whether the lock manager stopped:
/// a server's stop waits for it (and a failback's clients with it).
const STOP_POLL: Duration = Duration::from_millis(100);
/// One try of a callback.
const RETRY: Retry = Retry { timeout: Duration::from_millis(700), tries: 3 };

struct Queue(SyncSender<Outbound>);

impl Courier for Queue {
    fn send(&self, call: Outbound) -> bool {
        match self.0.try_send(call) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

/// The courier and the ticking thread of a lock manager.
pub struct Threads(Vec<JoinHandle<()>>);

impl Threads {
    /// Waits for both to end, once the lock manager is stopped: the ticker
    /// is woken from its interval (up to 1 s), the courier sees the stop
    /// within `STOP_POLL`.
    pub fn join(self) {
        for t in self.0 {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Starts the courier and the lock manager's ticking thread for `lm`;
/// both end once `lm` is stopped (or dropped).
pub fn start<S: Store>(lm: &Arc<LockManager<S>>) -> std::io::Result<Threads> {
    let (tx, rx) = sync_channel(QUEUE_MAX);
    lm.set_courier(Box::new(Queue(tx)));
    let weak = Arc::downgrade(lm);
    let courier = std::thread::Builder::new().name("keel-nlm-courier".into()).spawn(move || deliver(weak, rx))?;
    let weak = Arc::downgrade(lm);
    let ticker = std::thread::Builder::new().name("keel-nlm-tick".into()).spawn(move || {
        let stopped = |weak: &Weak<LockManager<S>>| weak.upgrade().is_none_or(|lm| lm.is_stopping());
        loop {
            let Some(lm) = weak.upgrade() else { return };
            if lm.is_stopping() {
                return;
            }
            lm.tick();
            let deadline = Instant::now() + lm.tick_interval();
            drop(lm);
            // Parked, not asleep: `Threads::join` wakes it.
            while let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) {
                std::thread::park_timeout(left);
                if stopped(&weak) {
                    return;
                }
            }
        }
    })?;
    Ok(Threads(vec![courier, ticker]))
}

fn deliver<S: Store>(lm: Weak<LockManager<S>>, rx: Receiver<Outbound>) {
    loop {
        let call = match rx.recv_timeout(STOP_POLL) {
            Ok(call) => call,
            Err(RecvTimeoutError::Timeout) => match lm.upgrade() {
                Some(lm) if !lm.is_stopping() => continue,
                _ => return,
            },
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let Some(lm) = lm.upgrade() else { return };
        if lm.is_stopping() {
            return;
        }
        match call {
            Outbound::Granted { to, from, args, fh, owner, range } => {
                match call_client(from, to, NLM_PROGRAM, NLM_V4, Nlm4Proc::Granted as u32, &*args) {
                    Ok(results) => {
                        let refused = Nlm4Res::decode(&mut Decoder::new(results)).map(|r| r.stat);
                        if !matches!(refused, Ok(Nlm4Stats::Granted)) {
                            lm.granted_refused(&fh, &owner, range);
                        }
                    }
                    Err(e) => tracing::info!(client = %to, error = %e, "GRANTED callback failed; the client will poll"),
                }
            }
            Outbound::Result { to, from, proc_, body } => {
                if let Err(e) = call_client(from, to, NLM_PROGRAM, NLM_V4, proc_, &Raw(body)) {
                    tracing::info!(client = %to, proc_, error = %e, "NLM _RES callback failed");
                }
            }
            Outbound::Notify { host, from, state } => {
                let args = StatChge { mon_name: Opaque(Bytes::from(from.to_string())), state };
                let sent = call_client(from, host.addr, SM_PROGRAM, SM_V1, SmProc::Notify as u32, &args);
                if let Err(keel_rpc_client::CallError::Io(e)) = &sent
                    && e.kind() == std::io::ErrorKind::AddrNotAvailable
                {
                    // The floating address is not up yet (under [ha] it
                    // comes up after the server): not a try.
                    lm.notify_unsent(&host);
                    continue;
                }
                if let Err(e) = &sent {
                    tracing::info!(client = %host.addr, error = %e, "SM_NOTIFY not answered");
                } else {
                    tracing::info!(client = %host.addr, state, "SM_NOTIFY answered");
                }
                lm.notified(&host, sent.is_ok());
            }
        }
    }
}

/// Already encoded arguments.
struct Raw(Bytes);

impl Encode for Raw {
    fn encode(&self, enc: &mut Encoder) {
        enc.raw(&self.0);
    }
}

fn call_client(
    from: IpAddr,
    to: IpAddr,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &dyn Encode,
) -> Result<Bytes, keel_rpc_client::CallError> {
    let sock: UdpSocket = bind_from(from)?;
    let port = getport(&sock, to, prog, vers, IPPROTO_UDP, RETRY)?;
    call(&sock, SocketAddr::new(to, port), Proc { prog, vers, proc_ }, args, RETRY)
}

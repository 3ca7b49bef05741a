//! The lock manager: who holds which byte ranges of which file, who waits,
//! and the grace period after a restart.
//!
//! Each lock owner (client host, `svid`, owner handle) gets one open file
//! description per file ([`Store::open_for_locks`]) and takes its locks
//! through it, so the kernel arbitrates between owners, and between NFS
//! clients and local processes on the server. The table below mirrors what
//! each description holds, to count it, to name holders in TEST replies
//! and to free everything a client held.
//!
//! A client host is its address and the name it gives (`caller_name`),
//! which SM_NOTIFY and FREE_ALL match; but what a client may make the
//! server hold (locks, waiters and shares; descriptions; hosts) is counted
//! by address alone, with the rule of [`keel_exports::claims`], since a client can
//! give itself any number of names.
//!
//! The grace period after a restart is the server's one ([`SharedGrace`],
//! started from this lock manager's previous hosts and NFSv4.1's client
//! records): a new lock is DENIED_GRACE_PERIOD while any previous client
//! of either protocol may still reclaim. This module tells it when each
//! NLM host is done (its first ordinary call, [`RECLAIM_QUIET`] after its
//! SM_NOTIFY answer) or gone (SM_NOTIFY unanswered, its reboot,
//! FREE_ALL), and sends the SM_NOTIFY rounds while it lasts.
//!
//! A blocked LOCK leaves a [`Waiter`] in its file's queue and returns
//! BLOCKED at once: no thread waits. The queue is retried whenever a lock
//! of the file is released through Keel (in the releasing call) and, for
//! locks held by local processes, on every tick of the lock manager's
//! thread; a waiter whose lock is taken is told with a GRANTED callback.
//! A LOCK refused by an NFSv4.1 courtesy client's lock asks the export
//! table's gate (NFSv4.1's state) to let that client go, with no lock of
//! this module held, and tries once more; a waiter whose blocker turns
//! courtesy later gets its lock at its client's next poll (Linux polls
//! every 30 s).
//!
//! Lock order: `table`, then `monitored` or the grace period (a leaf).
//! Nothing blocks while `table` is held but non-blocking fcntl calls and
//! opening a file by handle;
//! callbacks go out through the courier after it is released. The NSM
//! state on disk is written by a thread of its own that never takes a
//! caller's identity (a worker thread may still hold one): the first lock
//! of a client waits for its record to be durable, as knfsd's lockd waits
//! for statd's SM_MON.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_exports::delegations::GateAccess;
use keel_exports::{AdmitError, Admitted, ExportTable, SecFlavor};
use keel_nfs4_state::{Grace, PreviousClient, Reclaimer, SharedGrace};
use keel_nlm_proto::nlm4::{
    Fsh4Access, Fsh4Mode, Nlm4Cancargs, Nlm4Holder, Nlm4Lock, Nlm4Lockargs, Nlm4Notify, Nlm4Shareargs, Nlm4Stats,
    Nlm4Testargs, Nlm4Testrply, Nlm4Unlockargs,
};
use keel_nlm_proto::nsm::StatChge;
use keel_rpc::Credential;
use keel_store::lock::{HeldLock, LOCK_OFFSET_MAX, cut};
use keel_store::{LockFile, LockKind, LockRange, Store, StoreError};
use keel_xdr::Opaque;

use crate::config::LockConfig;
use crate::nsm_store::{HostKey, Monitored, NsmStore};
use keel_exports::claims::{ClaimPool, Refusal};

/// A grace-period client is taken to be done reclaiming once it has been
/// notified and sent no reclaim for this long (the Linux client reclaims
/// everything in one go as soon as its statd hears of the restart, and
/// makes no other lock call before it is done).
///
/// A trade-off, kept on purpose: a client that answers SM_NOTIFY but
/// reclaims more than this later (or pauses this long between two
/// reclaims) is taken to be done, and once every client is, the grace
/// period ends and another client may take a lock it had not yet
/// reclaimed (its late reclaim is then an ordinary lock request, and may
/// be denied). Waiting instead for an ordinary call or the ceiling would
/// make every restart cost the full `grace_max` with Linux clients, which
/// hold their locks without further calls, and with clients that are
/// still monitored but hold nothing (a client stays on disk until it
/// reboots, a grace period ends with it holding nothing, or it holds
/// nothing and its record makes room for another's).
pub const RECLAIM_QUIET: Duration = Duration::from_secs(3);
/// SM_NOTIFY rounds to a client before it is taken to be gone.
const NOTIFY_ROUNDS_MAX: u32 = 3;
/// Between two SM_NOTIFY rounds to a client that did not answer.
const NOTIFY_RETRY: Duration = Duration::from_secs(5);

/// One lock owner on one client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerKey {
    pub host: HostKey,
    pub svid: i32,
    pub oh: Bytes,
}

/// Where a call came from, and as whom.
pub struct Ctx<'a> {
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub cred: &'a Credential,
}

/// A call the server makes to a client, handed to the courier.
#[derive(Debug, Clone)]
pub enum Outbound {
    /// NLM4_GRANTED for a blocked lock now held for the client.
    Granted { to: IpAddr, from: IpAddr, args: Box<Nlm4Testargs>, fh: Bytes, owner: OwnerKey, range: LockRange },
    /// The result of a `_MSG` call, as a call of its `_RES` procedure.
    Result { to: IpAddr, from: IpAddr, proc_: u32, body: Bytes },
    /// SM_NOTIFY: this server restarted.
    Notify { host: HostKey, from: IpAddr, state: i32 },
}

/// Sends [`Outbound`] calls (on a thread of its own); returns whether the
/// call was queued (a full queue drops it: the protocol copes, see
/// `courier`).
pub trait Courier: Send + Sync {
    fn send(&self, call: Outbound) -> bool;
}

/// One lock of an owner's (each owner's list is its own).
type Held = HeldLock<()>;

struct Owner<L> {
    fd: L,
    held: Vec<Held>,
    /// Waiters of this owner in the file's queue.
    waiting: usize,
}

struct Waiter {
    owner: OwnerKey,
    kind: LockKind,
    range: LockRange,
    /// TEST-shaped arguments to send back in GRANTED: the client matches
    /// them against the lock it waits for.
    args: Nlm4Testargs,
    local: IpAddr,
}

struct Share {
    host: HostKey,
    oh: Bytes,
    mode: u32,
    access: u32,
}

struct File<L> {
    owners: HashMap<OwnerKey, Owner<L>>,
    waiters: VecDeque<Waiter>,
    shares: Vec<Share>,
}

impl<L> Default for File<L> {
    fn default() -> Self {
        File { owners: HashMap::new(), waiters: VecDeque::new(), shares: Vec::new() }
    }
}

impl<L> File<L> {
    fn is_empty(&self) -> bool {
        self.owners.is_empty() && self.waiters.is_empty() && self.shares.is_empty()
    }
}

/// A client that held locks before the restart, while the grace period
/// lasts.
struct Pending {
    local: IpAddr,
    notified: Option<Instant>,
    last_try: Option<Instant>,
    tries: u32,
    last_reclaim: Option<Instant>,
    /// Done or gone, as the shared grace period was told.
    done: bool,
}

/// The NLM side of the grace period after a restart, while it lasts: the
/// hosts to notify and to hear from (none if only NFSv4.1 clients hold
/// it on).
struct Recovery {
    pending: HashMap<HostKey, Pending>,
}

/// An NLM host as the shared grace period names it.
fn reclaimer(host: &HostKey) -> Reclaimer {
    Reclaimer::Nlm { addr: host.addr, name: Box::from(&host.name[..]) }
}

/// What the grace period waits for, for a host that held locks before
/// the restart: no principal to check (NLM has none), and no deadline of
/// its own: the lock manager says when it is done or gone.
pub fn previous_client(m: &Monitored) -> PreviousClient {
    PreviousClient { who: reclaimer(&m.host), principal: None, absent_after: None }
}

struct Table<L> {
    files: HashMap<Bytes, File<L>>,
    /// Client hosts with state here, and their locks held, locks waited
    /// for and share reservations (a host is here while it has one).
    hosts: HashMap<HostKey, usize>,
    /// Those claims, per address (`locks_per_client_max`).
    claims: ClaimPool,
    /// The hosts, per address (`hosts_max`).
    names: ClaimPool,
    /// The owners' open file descriptions, per address (`lock_files_max`).
    lock_files: ClaimPool,
    recovery: Option<Recovery>,
}

/// Counters for the log and the tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockStats {
    pub hosts: usize,
    /// Client addresses holding state.
    pub addresses: usize,
    /// Client hosts recorded on disk for SM_NOTIFY after a restart.
    pub monitored: usize,
    pub files: usize,
    pub lock_files: usize,
    pub locks: usize,
    pub waiters: usize,
    pub in_grace: bool,
}

pub struct LockManager<S: Store> {
    exports: Arc<ExportTable<S>>,
    config: LockConfig,
    table: Mutex<Table<S::LockFile>>,
    /// Clients recorded on disk (a copy of what the NSM thread holds).
    monitored: Mutex<HashSet<HostKey>>,
    nsm: Mutex<Sender<NsmOp>>,
    state: i32,
    /// The server's one grace period (NLM's and NFSv4.1's).
    grace: SharedGrace,
    courier: OnceLock<Box<dyn Courier>>,
    stopping: AtomicBool,
}

/// A change to the NSM state on disk, done by the NSM thread; the answer
/// says whether it is durable.
enum NsmOp {
    Monitor(Monitored, Sender<bool>),
    Unmonitor(HostKey),
}

/// How long the first lock of a client waits for its NSM record.
const NSM_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

fn nsm_thread(mut nsm: NsmStore) -> std::io::Result<Sender<NsmOp>> {
    let (tx, rx) = channel::<NsmOp>();
    std::thread::Builder::new().name("keel-nsm".into()).spawn(move || {
        for op in rx {
            match op {
                NsmOp::Monitor(m, done) => {
                    let r = nsm.monitor(&m);
                    if let Err(e) = &r {
                        tracing::warn!(error = %e, host = %m.host.addr, "cannot record an NSM client: its locks will not be reclaimable");
                    }
                    let _ = done.send(r.is_ok());
                }
                NsmOp::Unmonitor(host) => {
                    if let Err(e) = nsm.unmonitor(&host) {
                        tracing::warn!(error = %e, "cannot forget an NSM client");
                    }
                }
            }
        }
    })?;
    Ok(tx)
}

fn kind_of(exclusive: bool) -> LockKind {
    if exclusive { LockKind::Exclusive } else { LockKind::Shared }
}

fn range_of(lock: &Nlm4Lock) -> LockRange {
    LockRange::new(lock.l_offset, lock.l_len)
}

fn owner_of(peer: SocketAddr, lock: &Nlm4Lock) -> OwnerKey {
    OwnerKey {
        host: HostKey { addr: canonical(peer.ip()), name: lock.caller_name.0.clone() },
        svid: lock.svid,
        oh: lock.oh.0.clone(),
    }
}

/// IPv4-mapped IPv6 addresses as IPv4, so a client is one host however
/// it reached a dual-stack socket.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

fn stat_of(e: &StoreError) -> Nlm4Stats {
    match e {
        StoreError::Stale | StoreError::BadHandle => Nlm4Stats::StaleFh,
        _ => match e.raw_os_error() {
            Some(libc::EFBIG) => Nlm4Stats::Fbig,
            Some(libc::EROFS) => Nlm4Stats::Rofs,
            Some(libc::ESTALE) => Nlm4Stats::StaleFh,
            Some(libc::ENOLCK | libc::EMFILE | libc::ENFILE | libc::ENOMEM) => Nlm4Stats::DeniedNolocks,
            Some(libc::EDEADLK) => Nlm4Stats::Deadlck,
            _ => Nlm4Stats::Failed,
        },
    }
}

/// What one description holds once it takes `kind` over `range` (as the
/// kernel does: the new lock replaces what it covers).
fn held_after(held: &[Held], kind: LockKind, range: LockRange) -> Vec<Held> {
    let mut after = held.to_vec();
    cut(&mut after, (), range.start, range.end());
    after.push(Held { whose: (), kind, start: range.start, end: range.end() });
    after
}

/// How many more entries `after` has than `before` (negative: fewer).
fn growth(before: usize, after: usize) -> isize {
    after as isize - before as isize
}

fn conflicts(a: LockKind, b: LockKind) -> bool {
    a == LockKind::Exclusive || b == LockKind::Exclusive
}

const LOCK_FILES: &str = "lock-holding descriptions (lock_files_max)";

/// A claim refused: of what, and why.
struct Refused {
    what: &'static str,
    why: Refusal,
}

impl Refused {
    /// Logs the refusal; the client is told NLM4_DENIED_NOLOCKS.
    fn answer(self, host: &HostKey) -> Nlm4Stats {
        let limit = match self.why {
            Refusal::AddressShare => "the client's address holds all it may",
            Refusal::PoolFull => "the server holds all it may",
        };
        tracing::warn!(host = %host.addr, what = self.what, limit, "lock request refused (NLM4_DENIED_NOLOCKS)");
        Nlm4Stats::DeniedNolocks
    }
}

impl<L: LockFile> Table<L> {
    fn new(config: &LockConfig, recovery: Option<Recovery>) -> Self {
        Table {
            files: HashMap::new(),
            hosts: HashMap::new(),
            claims: ClaimPool::per_address(config.locks_per_client_max),
            names: ClaimPool::new(config.hosts_max, usize::MAX),
            lock_files: ClaimPool::new(config.lock_files_max, usize::MAX),
            recovery,
        }
    }

    /// Whether `host` may hold `n` more locks, waiters or shares (and, if
    /// it holds none, become a host).
    fn may_claim(&self, host: &HostKey, n: usize) -> Result<(), Refused> {
        if n == 0 {
            return Ok(());
        }
        if !self.hosts.contains_key(host) {
            self.names.check(host.addr, 1).map_err(|why| Refused { what: "client hosts (hosts_max)", why })?;
        }
        self.claims
            .check(host.addr, n)
            .map_err(|why| Refused { what: "locks, waiters and shares (locks_per_client_max)", why })
    }

    /// Counts `delta` more (or fewer) claims of `host`: at most what
    /// [`Table::may_claim`] admitted.
    fn count(&mut self, host: &HostKey, delta: isize) {
        let n = delta.unsigned_abs();
        if delta > 0 {
            if !self.hosts.contains_key(host) {
                self.names.add(host.addr, 1);
            }
            *self.hosts.entry(host.clone()).or_insert(0) += n;
            self.claims.add(host.addr, n);
        } else if delta < 0
            && let Some(count) = self.hosts.get_mut(host)
        {
            let n = n.min(*count);
            *count -= n;
            self.claims.release(host.addr, n);
            if *count == 0 {
                self.hosts.remove(host);
                self.names.release(host.addr, 1);
            }
        }
    }

    /// Whether the grace period waits for `host` to reclaim.
    fn awaits_reclaim(&self, host: &HostKey) -> bool {
        self.recovery.as_ref().and_then(|r| r.pending.get(host)).is_some_and(|p| !p.done)
    }

    /// Drops `owner` of `fh` if it holds and awaits nothing (closing its
    /// description), and the file's entry if nothing is left of it.
    fn tidy(&mut self, fh: &Bytes, owner: &OwnerKey) {
        let Some(file) = self.files.get_mut(fh) else { return };
        if file.owners.get(owner).is_some_and(|o| o.held.is_empty() && o.waiting == 0) {
            file.owners.remove(owner);
            self.lock_files.release(owner.host.addr, 1);
        }
        if file.is_empty() {
            self.files.remove(fh);
        }
    }

    /// Takes what waiters of `fh` can now have, in order; returns the
    /// GRANTED callbacks to send. A waiter whose lock would split one of
    /// its owner's ranges past its client's limit waits on (the tick
    /// retries it).
    fn grant_waiters(&mut self, fh: &Bytes, out: &mut Vec<Outbound>) {
        let mut i = 0;
        loop {
            let Some(file) = self.files.get(fh) else { return };
            let Some(w) = file.waiters.get(i) else { break };
            let Some(owner) = file.owners.get(&w.owner) else {
                let w = self.files.get_mut(fh).and_then(|f| f.waiters.remove(i)).expect("waiter at i");
                self.count(&w.owner.host, -1);
                continue;
            };
            // The lock replaces the waiter.
            let after = held_after(&owner.held, w.kind, w.range);
            let need = growth(owner.held.len(), after.len()) - 1;
            if need > 0 && self.may_claim(&w.owner.host, need.unsigned_abs()).is_err() {
                i += 1;
                continue;
            }
            let file = self.files.get_mut(fh).expect("listed");
            let w = &file.waiters[i];
            let owner = file.owners.get_mut(&w.owner).expect("listed");
            match owner.fd.try_lock(w.kind, w.range) {
                Ok(Some(_)) => i += 1,
                result => {
                    let w = file.waiters.remove(i).expect("waiter at i");
                    owner.waiting -= 1;
                    if result.is_ok() {
                        owner.held = after;
                        self.count(&w.owner.host, need);
                        tracing::debug!(host = %w.owner.host.addr, svid = w.owner.svid, "blocked lock granted");
                        out.push(Outbound::Granted {
                            to: w.owner.host.addr,
                            from: w.local,
                            args: Box::new(w.args),
                            fh: fh.clone(),
                            owner: w.owner.clone(),
                            range: w.range,
                        });
                    } else {
                        self.count(&w.owner.host, -1);
                    }
                    self.tidy(fh, &w.owner);
                }
            }
        }
    }

    /// Drops everything `matches` says belongs to a freed client.
    fn free_hosts(&mut self, matches: &dyn Fn(&HostKey) -> bool, out: &mut Vec<Outbound>) -> usize {
        let fhs: Vec<Bytes> = self.files.keys().cloned().collect();
        let mut freed = 0;
        for fh in &fhs {
            let file = self.files.get_mut(fh).expect("listed");
            let gone: Vec<OwnerKey> = file.owners.keys().filter(|k| matches(&k.host)).cloned().collect();
            for k in &gone {
                file.owners.remove(k);
                self.lock_files.release(k.host.addr, 1);
            }
            freed += gone.len();
            file.waiters.retain(|w| !matches(&w.owner.host));
            file.shares.retain(|s| !matches(&s.host));
        }
        let hosts: Vec<(HostKey, usize)> =
            self.hosts.iter().filter(|(k, _)| matches(k)).map(|(k, n)| (k.clone(), *n)).collect();
        for (host, n) in hosts {
            self.count(&host, -(n as isize));
        }
        // Waiters are granted once what was freed is given back, since
        // they may be other hosts of the same address.
        for fh in &fhs {
            self.grant_waiters(fh, out);
            if self.files.get(fh).is_some_and(File::is_empty) {
                self.files.remove(fh);
            }
        }
        freed
    }
}

impl<S: Store> LockManager<S> {
    /// Opens the NSM state (moving the state number on) and, if clients
    /// held locks before this start, begins a grace period for them alone
    /// (a server that also serves NFSv4.1 starts one for both and uses
    /// [`LockManager::with_grace`]).
    pub fn new(exports: Arc<ExportTable<S>>, config: LockConfig) -> std::io::Result<Self> {
        let (nsm, previous) = NsmStore::open(&config.nsm_state_dir)?;
        let grace = Grace::start(previous.iter().map(previous_client), Instant::now(), config.grace_max);
        Self::with_grace(exports, config, nsm, previous, SharedGrace::new(grace))
    }

    /// The lock manager over the NSM state `nsm`, opened with
    /// [`NsmStore::open`], which returned `previous`, in the server's one
    /// grace period, `grace`, which waits for `previous` (see
    /// [`previous_client`]) and any other protocol's clients
    /// (`config.grace_max` is its ceiling, not read here).
    pub fn with_grace(
        exports: Arc<ExportTable<S>>,
        config: LockConfig,
        nsm: NsmStore,
        previous: Vec<Monitored>,
        grace: SharedGrace,
    ) -> std::io::Result<Self> {
        let status = {
            let mut g = grace.lock();
            g.poll(Instant::now());
            g.status(Instant::now())
        };
        let recovery = status.active.then(|| Recovery {
            pending: previous
                .into_iter()
                .map(|m| {
                    let p = Pending {
                        local: m.local,
                        notified: None,
                        last_try: None,
                        tries: 0,
                        last_reclaim: None,
                        done: false,
                    };
                    (m.host, p)
                })
                .collect(),
        });
        if let Some(r) = &recovery {
            tracing::info!(
                nlm_hosts = r.pending.len(),
                clients = status.awaited,
                ceiling_s = status.remaining.as_secs(),
                "grace period: only reclaims until the clients of the last start (NLM and NFSv4.1) have reclaimed"
            );
        }
        let state = nsm.state();
        tracing::info!(nsm_state = state, dir = %config.nsm_state_dir.display(), "lock manager ready");
        let monitored = recovery.as_ref().map(|r| r.pending.keys().cloned().collect()).unwrap_or_default();
        let nsm = nsm_thread(nsm)?;
        let table = Mutex::new(Table::new(&config, recovery));
        Ok(LockManager {
            exports,
            config,
            table,
            monitored: Mutex::new(monitored),
            nsm: Mutex::new(nsm),
            state,
            grace,
            courier: OnceLock::new(),
            stopping: AtomicBool::new(false),
        })
    }

    pub fn set_courier(&self, courier: Box<dyn Courier>) {
        let _ = self.courier.set(courier);
    }

    /// This start's NSM state number.
    pub fn nsm_state(&self) -> i32 {
        self.state
    }

    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    fn table(&self) -> MutexGuard<'_, Table<S::LockFile>> {
        // Every change is made after the checks that can fail: a panic
        // leaves the table consistent.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send(&self, out: Vec<Outbound>) {
        let Some(courier) = self.courier.get() else { return };
        for call in out {
            if !courier.send(call) {
                tracing::warn!("callback queue full: a callback was dropped (the client will poll)");
            }
        }
    }

    /// Queues one call to a client.
    pub fn send_one(&self, call: Outbound) {
        self.send(vec![call]);
    }

    pub fn stats(&self) -> LockStats {
        let t = self.table();
        LockStats {
            hosts: t.hosts.len(),
            addresses: t.claims.addresses(),
            monitored: self.monitored().len(),
            files: t.files.len(),
            lock_files: t.lock_files.used(),
            locks: t.files.values().flat_map(|f| f.owners.values()).map(|o| o.held.len()).sum(),
            waiters: t.files.values().map(|f| f.waiters.len()).sum(),
            in_grace: self.grace.lock().status(Instant::now()).active,
        }
    }

    /// Whether the grace period is on, ending it if its time is up or
    /// every client it waits for (NLM's and NFSv4.1's) is done. A call
    /// from `from` that is not a reclaim means that client is done
    /// reclaiming.
    fn in_grace(&self, t: &mut Table<S::LockFile>, from: Option<(&HostKey, bool)>) -> bool {
        let now = Instant::now();
        let mut grace = self.grace.lock();
        if let Some(r) = &mut t.recovery {
            if let Some((host, reclaim)) = from
                && let Some(p) = r.pending.get_mut(host)
            {
                if reclaim {
                    p.last_reclaim = Some(now);
                } else if !p.done {
                    p.done = true;
                    grace.complete(&reclaimer(host), None, now);
                }
            }
            for (host, p) in r.pending.iter_mut() {
                let Some(notified) = p.notified else { continue };
                let quiet_since = p.last_reclaim.map_or(notified, |r| r.max(notified));
                if !p.done && now.duration_since(quiet_since) >= RECLAIM_QUIET {
                    p.done = true;
                    grace.complete(&reclaimer(host), None, now);
                }
            }
        }
        if grace.poll(now) {
            return true;
        }
        // One line per grace period, by whoever sharing it notices first.
        if let Some((why, took)) = grace.take_report() {
            tracing::info!(
                seconds = format_args!("{:.1}", took.as_secs_f64()),
                why = why.describe(),
                "grace period over"
            );
        }
        drop(grace);
        let Some(r) = t.recovery.take() else { return false };
        // Clients that came back are monitored again by their reclaims;
        // forget the others.
        for host in r.pending.keys() {
            if !t.hosts.contains_key(host) {
                self.unmonitor(host);
            }
        }
        false
    }

    /// The object `fh` names, if the caller's export admits it (as it
    /// would admit an NFS call: client list, `secure`), and the identity to
    /// act as (squashed as an NFS call would be). A refusal is the one
    /// place where an [`AdmitError`] becomes an `nlm4_stats`. The export's
    /// `sec=` is not checked: clients send NLM calls with AUTH_SYS whatever
    /// their mount's flavor (knfsd exempts locks from it too).
    fn admit(&self, ctx: &Ctx, fh: &Bytes) -> Result<(S::Object, keel_store::Cred), Nlm4Stats> {
        let flavor = SecFlavor::of_call(ctx.cred.flavor());
        match self.exports.admit_handle(ctx.peer, fh, flavor, ctx.cred.ids(), |_| {}) {
            Ok(Admitted { object, cred, .. }) => Ok((object, cred)),
            Err(AdmitError::Stale | AdmitError::BadHandle) => Err(Nlm4Stats::StaleFh),
            Err(
                AdmitError::NotAdmitted
                | AdmitError::InsecurePort { .. }
                | AdmitError::WrongSecurity { .. }
                | AdmitError::ReadOnly
                | AdmitError::Store(_),
            ) => Err(Nlm4Stats::Failed),
        }
    }

    fn open(&self, obj: &S::Object, cred: &keel_store::Cred) -> Result<S::LockFile, Nlm4Stats> {
        let store = &self.exports.store;
        let who = store.act_as(cred).map_err(|e| stat_of(&e))?;
        store.open_for_locks(&who, obj).map_err(|e| match e.raw_os_error() {
            // A lease on the file (an NFSv4.1 read delegation's) is being
            // broken: lockd retries a lock denied for the grace period.
            Some(libc::EAGAIN) => Nlm4Stats::DeniedGracePeriod,
            _ => stat_of(&e),
        })
    }

    /// Monitors `host` (durably, on disk) if it is not yet.
    ///
    /// A client that comes to hold nothing stays recorded, so that its
    /// next lock costs no disk write; but at most `hosts_max` are: past
    /// that, a first lock forgets an idle one (holding nothing here and
    /// not awaited for a reclaim, so SM_NOTIFY had nothing to tell it).
    /// Without it, one address giving ever new names would fill the disk
    /// records, and every restart's grace period would wait for them.
    fn monitor(&self, host: &HostKey, local: IpAddr) {
        if self.monitored().contains(host) {
            return;
        }
        let idle = {
            let t = self.table();
            let mut monitored = self.monitored();
            let idle = if monitored.len() >= self.config.hosts_max {
                monitored.iter().find(|h| !t.hosts.contains_key(*h) && !t.awaits_reclaim(h)).cloned()
            } else {
                None
            };
            idle.inspect(|h| {
                monitored.remove(h);
            })
        };
        let nsm = self.nsm.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = idle {
            let _ = nsm.send(NsmOp::Unmonitor(h));
        }
        let (done_tx, done) = channel();
        let m = Monitored { host: host.clone(), local: canonical(local) };
        let sent = nsm.send(NsmOp::Monitor(m, done_tx)).is_ok();
        drop(nsm);
        // A durable write: calls queued behind this one go to other workers.
        keel_store::blocking::may_block();
        if sent && done.recv_timeout(NSM_WRITE_TIMEOUT).unwrap_or(false) {
            self.monitored().insert(host.clone());
        }
    }

    fn monitored(&self) -> MutexGuard<'_, HashSet<HostKey>> {
        self.monitored.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unmonitor(&self, host: &HostKey) {
        if self.monitored().remove(host) {
            let _ = self.nsm.lock().unwrap_or_else(|e| e.into_inner()).send(NsmOp::Unmonitor(host.clone()));
        }
    }

    /// TEST.
    pub fn test(&self, ctx: &Ctx, args: &Nlm4Testargs) -> Nlm4Testrply {
        let owner = owner_of(ctx.peer, &args.alock);
        if args.alock.l_offset > LOCK_OFFSET_MAX {
            return Nlm4Testrply::Other(Nlm4Stats::Fbig);
        }
        if self.in_grace(&mut self.table(), Some((&owner.host, false))) {
            return Nlm4Testrply::Other(Nlm4Stats::DeniedGracePeriod);
        }
        let (obj, cred) = match self.admit(ctx, &args.alock.fh.0) {
            Ok(x) => x,
            Err(s) => return Nlm4Testrply::Other(s),
        };
        // An NFSv4.1 client holding a write delegation may hold locks it
        // never sent: the delegation is recalled first (it sends them).
        if self.exports.before_access(&args.alock.fh.0, GateAccess::Read).is_err() {
            return Nlm4Testrply::Other(Nlm4Stats::DeniedGracePeriod);
        }
        let (kind, range) = (kind_of(args.exclusive), range_of(&args.alock));
        let fh = &args.alock.fh.0;
        let mut t = self.table();
        let found = match t.files.get(fh).and_then(|f| f.owners.get(&owner)) {
            Some(o) => o.fd.test(kind, range),
            None => {
                drop(t);
                let fd = match self.open(&obj, &cred) {
                    Ok(fd) => fd,
                    Err(s) => return Nlm4Testrply::Other(s),
                };
                let found = fd.test(kind, range);
                t = self.table();
                found
            }
        };
        let conflict = match found {
            Ok(None) => return Nlm4Testrply::Other(Nlm4Stats::Granted),
            Ok(Some(c)) => c,
            Err(e) => return Nlm4Testrply::Other(stat_of(&e)),
        };
        // Name the holder if it is one of ours.
        let holder = t.files.get(fh).and_then(|f| {
            f.owners.iter().filter(|(k, _)| **k != owner).find_map(|(k, o)| {
                o.held
                    .iter()
                    .find(|h| h.start <= range.end() && range.start <= h.end && conflicts(kind, h.kind))
                    .map(|h| (k, *h))
            })
        });
        Nlm4Testrply::Denied(match holder {
            Some((k, h)) => Nlm4Holder {
                exclusive: h.kind == LockKind::Exclusive,
                svid: k.svid,
                oh: Opaque(k.oh.clone()),
                l_offset: h.start,
                l_len: LockRange::from_ends(h.start, h.end).len,
            },
            None => Nlm4Holder {
                exclusive: conflict.kind == LockKind::Exclusive,
                svid: 0,
                oh: Opaque::default(),
                l_offset: conflict.range.start,
                l_len: conflict.range.len,
            },
        })
    }

    /// LOCK (and NM_LOCK, with `monitor` false: a client that asks for no
    /// monitoring gets no reclaim). A lock refused by an NFSv4.1 courtesy
    /// client's lock (its lease expired) expires that client, as an
    /// NFSv4.1 client's LOCK does, and is granted at once: nobody live
    /// holds it, and a non-blocking lock must not fail for a client that
    /// is gone (knfsd denies it first and grants a retry, because its lock
    /// manager cannot expire the client where it finds the conflict).
    pub fn lock(&self, ctx: &Ctx, args: &Nlm4Lockargs, monitor: bool) -> Nlm4Stats {
        if let Some(stat) = self.lock_attempt(ctx, args, monitor, true) {
            return stat;
        }
        // Whether or not a courtesy client was let go of, the second
        // attempt answers (and queues a blocking lock).
        self.exports.lock_refused(&args.alock.fh.0, args.exclusive, range_of(&args.alock));
        self.lock_attempt(ctx, args, monitor, false).expect("only a first attempt stops at a conflict")
    }

    /// One try of LOCK; the `first` stops at a conflict (`None`), leaving
    /// nothing behind.
    fn lock_attempt(&self, ctx: &Ctx, args: &Nlm4Lockargs, monitor: bool, first: bool) -> Option<Nlm4Stats> {
        let owner = owner_of(ctx.peer, &args.alock);
        if args.alock.l_offset > LOCK_OFFSET_MAX {
            return Some(Nlm4Stats::Fbig);
        }
        let grace = self.in_grace(&mut self.table(), Some((&owner.host, args.reclaim)));
        if grace && !args.reclaim {
            return Some(Nlm4Stats::DeniedGracePeriod);
        }
        let (obj, cred) = match self.admit(ctx, &args.alock.fh.0) {
            Ok(x) => x,
            Err(s) => return Some(s),
        };
        // An NFSv4.1 client holding a delegation may hold locks it never
        // sent (Linux keeps them locally): shared ones under a read
        // delegation, which an exclusive lock waits for, any under a write
        // delegation, which every lock waits for while it is recalled (the
        // holder sends its locks before it returns it). The client's lockd
        // retries a lock denied for the grace period after a few seconds.
        let access = if args.exclusive { GateAccess::Write } else { GateAccess::Read };
        if self.exports.before_access(&args.alock.fh.0, access).is_err() {
            return Some(Nlm4Stats::DeniedGracePeriod);
        }
        let (kind, range) = (kind_of(args.exclusive), range_of(&args.alock));
        let fh = args.alock.fh.0.clone();
        // Open a description first if the owner has none on this file
        // (not under the table lock: it is an open by handle), unless the
        // client may not have one more.
        let (has_fd, room) = {
            let t = self.table();
            let has_fd = t.files.get(&fh).is_some_and(|f| f.owners.contains_key(&owner));
            (has_fd, t.lock_files.check(owner.host.addr, 1))
        };
        let mut fresh = if has_fd {
            None
        } else if let Err(why) = room {
            return Some(Refused { what: LOCK_FILES, why }.answer(&owner.host));
        } else {
            match self.open(&obj, &cred) {
                Ok(fd) => Some(fd),
                Err(s) => return Some(s),
            }
        };
        let mut t = self.table();
        let blocks = args.block && !grace;
        let same = |w: &Waiter| w.owner == owner && w.range == range && w.kind == kind;
        // What the answer can add to the client's claims: the lock's new
        // ranges less the waiter it replaces (the client's poll), or a
        // waiter.
        let file = t.files.get(&fh);
        let held = file.and_then(|f| f.owners.get(&owner)).map_or(&[][..], |o| &o.held[..]);
        let after = held_after(held, kind, range);
        let waited = file.map_or(0, |f| f.waiters.iter().filter(|w| same(w)).count());
        let grant_need = growth(held.len(), after.len()) - waited as isize;
        let need = grant_need.max(isize::from(blocks && waited == 0));
        if need > 0
            && let Err(r) = t.may_claim(&owner.host, need.unsigned_abs())
        {
            // A poll for a lock that no longer fits: it waits no more.
            if let Some(file) = t.files.get_mut(&fh)
                && waited > 0
            {
                file.waiters.retain(|w| !same(w));
                if let Some(o) = file.owners.get_mut(&owner) {
                    o.waiting -= waited;
                }
                t.count(&owner.host, -(waited as isize));
                t.tidy(&fh, &owner);
            }
            return Some(r.answer(&owner.host));
        }
        if !t.files.get(&fh).is_some_and(|f| f.owners.contains_key(&owner)) {
            // Another call of the same owner dropped its description
            // meanwhile: rare; let the client retry.
            let Some(fd) = fresh.take() else { return Some(Nlm4Stats::DeniedNolocks) };
            if let Err(why) = t.lock_files.try_claim(owner.host.addr, 1) {
                return Some(Refused { what: LOCK_FILES, why }.answer(&owner.host));
            }
            let file = t.files.entry(fh.clone()).or_default();
            file.owners.insert(owner.clone(), Owner { fd, held: Vec::new(), waiting: 0 });
        }
        let file = t.files.get_mut(&fh).expect("inserted");
        let o = file.owners.get_mut(&owner).expect("inserted");
        let tried = o.fd.try_lock(kind, range);
        if first && matches!(tried, Ok(Some(_))) {
            // Asked of the NFSv4.1 state with the table released.
            t.tidy(&fh, &owner);
            return None;
        }
        let (stat, claimed) = match tried {
            Ok(None) => {
                // A waiter for the same lock (the client's poll) is done.
                file.waiters.retain(|w| !same(w));
                o.waiting -= waited;
                o.held = after;
                (Nlm4Stats::Granted, grant_need)
            }
            Ok(Some(_)) if blocks && waited > 0 => (Nlm4Stats::Blocked, 0),
            Ok(Some(_)) if blocks => {
                let waiter = Waiter {
                    owner: owner.clone(),
                    kind,
                    range,
                    args: Nlm4Testargs {
                        cookie: args.cookie.clone(),
                        exclusive: args.exclusive,
                        alock: args.alock.clone(),
                    },
                    local: canonical(ctx.local.ip()),
                };
                file.waiters.push_back(waiter);
                o.waiting += 1;
                (Nlm4Stats::Blocked, 1)
            }
            Ok(Some(_)) => (Nlm4Stats::Denied, 0),
            Err(e) => (stat_of(&e), 0),
        };
        t.count(&owner.host, claimed);
        t.tidy(&fh, &owner);
        drop(t);
        if monitor && matches!(stat, Nlm4Stats::Granted | Nlm4Stats::Blocked) {
            self.monitor(&owner.host, ctx.local.ip());
        }
        Some(stat)
    }

    /// CANCEL: forgets a blocked request. A request already granted stays
    /// granted (the client is told by GRANTED and refuses it if it no
    /// longer waits, which releases it).
    pub fn cancel(&self, ctx: &Ctx, args: &Nlm4Cancargs) -> Nlm4Stats {
        let owner = owner_of(ctx.peer, &args.alock);
        if let Err(s) = self.admit(ctx, &args.alock.fh.0)
            && s != Nlm4Stats::StaleFh
        {
            return s;
        }
        let (kind, range) = (kind_of(args.exclusive), range_of(&args.alock));
        let fh = &args.alock.fh.0;
        let mut t = self.table();
        if self.in_grace(&mut t, Some((&owner.host, false))) {
            return Nlm4Stats::DeniedGracePeriod;
        }
        let Some(file) = t.files.get_mut(fh) else { return Nlm4Stats::Denied };
        let before = file.waiters.len();
        file.waiters.retain(|w| !(w.owner == owner && w.range == range && w.kind == kind));
        let gone = before - file.waiters.len();
        if let Some(o) = file.owners.get_mut(&owner) {
            o.waiting -= gone;
        }
        t.count(&owner.host, -(gone as isize));
        t.tidy(fh, &owner);
        if gone == 0 { Nlm4Stats::Denied } else { Nlm4Stats::Granted }
    }

    /// UNLOCK. A handle gone stale can still be unlocked (the owner's
    /// description still holds the lock).
    pub fn unlock(&self, ctx: &Ctx, args: &Nlm4Unlockargs) -> Nlm4Stats {
        let owner = owner_of(ctx.peer, &args.alock);
        if let Err(s) = self.admit(ctx, &args.alock.fh.0)
            && s != Nlm4Stats::StaleFh
        {
            return s;
        }
        if args.alock.l_offset > LOCK_OFFSET_MAX {
            return Nlm4Stats::Fbig;
        }
        let range = range_of(&args.alock);
        let fh = &args.alock.fh.0;
        let mut out = Vec::new();
        let mut t = self.table();
        if self.in_grace(&mut t, Some((&owner.host, false))) {
            return Nlm4Stats::DeniedGracePeriod;
        }
        let Some(o) = t.files.get(fh).and_then(|f| f.owners.get(&owner)) else { return Nlm4Stats::Granted };
        let mut after = o.held.clone();
        cut(&mut after, (), range.start, range.end());
        // Unlocking the middle of a range splits it in two: bounded too,
        // or a client could grow one lock into any number.
        let change = growth(o.held.len(), after.len());
        if change > 0
            && let Err(r) = t.may_claim(&owner.host, change.unsigned_abs())
        {
            return r.answer(&owner.host);
        }
        let o = t.files.get_mut(fh).and_then(|f| f.owners.get_mut(&owner)).expect("found above");
        if let Err(e) = o.fd.unlock(range) {
            return stat_of(&e);
        }
        o.held = after;
        t.count(&owner.host, change);
        t.tidy(fh, &owner);
        t.grant_waiters(fh, &mut out);
        drop(t);
        self.send(out);
        Nlm4Stats::Granted
    }

    /// SHARE and UNSHARE: DOS share reservations, kept among NLM clients
    /// (as knfsd keeps them: local opens are not checked against them).
    pub fn share(&self, ctx: &Ctx, args: &Nlm4Shareargs, take: bool) -> Nlm4Stats {
        let s = &args.share;
        let host = HostKey { addr: canonical(ctx.peer.ip()), name: s.caller_name.0.clone() };
        let mut t = self.table();
        if self.in_grace(&mut t, Some((&host, args.reclaim))) && take && !args.reclaim {
            return Nlm4Stats::DeniedGracePeriod;
        }
        drop(t);
        if let Err(st) = self.admit(ctx, &s.fh.0)
            && (take || st != Nlm4Stats::StaleFh)
        {
            return st;
        }
        let fh = s.fh.0.clone();
        let mut t = self.table();
        if !take {
            if let Some(file) = t.files.get_mut(&fh) {
                let before = file.shares.len();
                file.shares.retain(|x| !(x.host == host && x.oh == s.oh.0));
                let gone = before - file.shares.len();
                if file.is_empty() {
                    t.files.remove(&fh);
                }
                t.count(&host, -(gone as isize));
            }
            return Nlm4Stats::Granted;
        }
        let mine = t.files.get(&fh).is_some_and(|f| f.shares.iter().any(|x| x.host == host && x.oh == s.oh.0));
        if !mine && let Err(r) = t.may_claim(&host, 1) {
            return r.answer(&host);
        }
        let (mode, access) = (mode_bits(s.mode), access_bits(s.access));
        let file = t.files.entry(fh).or_default();
        let clash = file
            .shares
            .iter()
            .any(|x| !(x.host == host && x.oh == s.oh.0) && (x.mode & access != 0 || mode & x.access != 0));
        if clash {
            if file.is_empty() {
                t.files.remove(&s.fh.0);
            }
            return Nlm4Stats::Denied;
        }
        let mine = file.shares.iter_mut().find(|x| x.host == host && x.oh == s.oh.0);
        match mine {
            Some(x) => {
                x.mode = mode;
                x.access = access;
            }
            None => {
                file.shares.push(Share { host: host.clone(), oh: s.oh.0.clone(), mode, access });
                t.count(&host, 1);
            }
        }
        Nlm4Stats::Granted
    }

    /// FREE_ALL: the client `args.name` (calling from its own address)
    /// dropped everything it held.
    pub fn free_all(&self, peer: SocketAddr, args: &Nlm4Notify) {
        let addr = canonical(peer.ip());
        let name = args.name.0.clone();
        self.free(&move |h: &HostKey| h.addr == addr && h.name == name, "FREE_ALL");
    }

    /// SM_NOTIFY from a client: it rebooted, so whatever it held is gone.
    /// Only the host itself (its address) or a monitor on this machine
    /// (loopback) may say so: anyone else could drop others' locks.
    pub fn host_rebooted(&self, peer: SocketAddr, args: &StatChge) {
        let from = canonical(peer.ip());
        let name = args.mon_name.0.clone();
        let named: Option<IpAddr> = std::str::from_utf8(&name).ok().and_then(|s| s.parse().ok()).map(canonical);
        let matches = move |h: &HostKey| {
            let same_host = h.name == name || named == Some(h.addr);
            same_host && (h.addr == from || from.is_loopback())
        };
        self.free(&matches, "SM_NOTIFY");
    }

    fn free(&self, matches: &dyn Fn(&HostKey) -> bool, why: &str) {
        let mut out = Vec::new();
        let mut t = self.table();
        let mut hosts: HashSet<HostKey> = t.hosts.keys().filter(|h| matches(h)).cloned().collect();
        // Idle hosts are still on disk; a reboot or FREE_ALL ends that too.
        hosts.extend(self.monitored().iter().filter(|h| matches(h)).cloned());
        let freed = t.free_hosts(matches, &mut out);
        if let Some(r) = &mut t.recovery {
            // It says it holds nothing: nothing to reclaim.
            let mut grace = self.grace.lock();
            for (k, p) in r.pending.iter_mut().filter(|(k, p)| matches(k) && !p.done) {
                p.done = true;
                grace.gone(&reclaimer(k), Instant::now());
            }
        }
        drop(t);
        for h in &hosts {
            self.unmonitor(h);
        }
        if !hosts.is_empty() {
            tracing::info!(hosts = hosts.len(), lock_owners = freed, why, "client locks released");
        }
        self.send(out);
    }

    /// The client refused a GRANTED (it no longer waits): release the
    /// lock taken for it.
    pub fn granted_refused(&self, fh: &Bytes, owner: &OwnerKey, range: LockRange) {
        let mut out = Vec::new();
        let mut t = self.table();
        let Some(o) = t.files.get_mut(fh).and_then(|f| f.owners.get_mut(owner)) else { return };
        if o.fd.unlock(range).is_err() {
            return;
        }
        // Released whatever the limits: the client does not want it (a
        // split here needs a lock the client took since, inside this one).
        let before = o.held.len();
        cut(&mut o.held, (), range.start, range.end());
        let change = growth(before, o.held.len());
        t.count(&owner.host, change);
        t.tidy(fh, owner);
        t.grant_waiters(fh, &mut out);
        drop(t);
        tracing::debug!(host = %owner.host.addr, "GRANTED refused by the client: lock released");
        self.send(out);
    }

    /// The result of an SM_NOTIFY to a client of the last start.
    pub fn notified(&self, host: &HostKey, answered: bool) {
        let mut t = self.table();
        let Some(p) = t.recovery.as_mut().and_then(|r| r.pending.get_mut(host)) else { return };
        if answered {
            p.notified = Some(Instant::now());
        } else if p.tries >= NOTIFY_ROUNDS_MAX && !p.done {
            tracing::info!(host = %host.addr, "a client of the last start did not answer SM_NOTIFY: taken as gone");
            p.done = true;
            self.grace.lock().gone(&reclaimer(host), Instant::now());
        }
    }

    /// An SM_NOTIFY that could not be sent at all (its source address is
    /// not this host's yet): sent again at the next tick, not counted.
    pub fn notify_unsent(&self, host: &HostKey) {
        let mut t = self.table();
        let Some(p) = t.recovery.as_mut().and_then(|r| r.pending.get_mut(host)) else { return };
        p.tries = p.tries.saturating_sub(1);
        p.last_try = None;
    }

    /// Periodic work (the lock manager's thread): waiters blocked by
    /// locks Keel did not see go (local processes), the grace period and
    /// its SM_NOTIFY rounds.
    pub fn tick(&self) {
        let mut out = Vec::new();
        let mut t = self.table();
        let waiting: Vec<Bytes> =
            t.files.iter().filter(|(_, f)| !f.waiters.is_empty()).map(|(k, _)| k.clone()).collect();
        for fh in waiting {
            t.grant_waiters(&fh, &mut out);
        }
        if self.in_grace(&mut t, None)
            && let Some(r) = &mut t.recovery
        {
            let now = Instant::now();
            for (host, p) in r.pending.iter_mut() {
                let due = p.last_try.is_none_or(|at| now.duration_since(at) >= NOTIFY_RETRY);
                if p.done || p.notified.is_some() || !due || p.tries >= NOTIFY_ROUNDS_MAX {
                    continue;
                }
                p.tries += 1;
                p.last_try = Some(now);
                out.push(Outbound::Notify { host: host.clone(), from: p.local, state: self.state });
            }
        }
        drop(t);
        self.send(out);
    }

    /// How often [`LockManager::tick`] should run now.
    pub fn tick_interval(&self) -> Duration {
        if self.table().recovery.is_some() { Duration::from_millis(200) } else { Duration::from_secs(1) }
    }
}

fn mode_bits(m: Fsh4Mode) -> u32 {
    m as u32
}

fn access_bits(a: Fsh4Access) -> u32 {
    a as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_what_lies_outside() {
        let mut held = vec![Held { whose: (), kind: LockKind::Shared, start: 0, end: 99 }];
        cut(&mut held, (), 10, 19);
        let ends: Vec<_> = held.iter().map(|h| (h.start, h.end)).collect();
        assert_eq!(ends, vec![(0, 9), (20, 99)]);
        cut(&mut held, (), 0, LOCK_OFFSET_MAX);
        assert!(held.is_empty());
    }
}

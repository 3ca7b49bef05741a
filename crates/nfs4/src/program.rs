//! The NFSv4 program: NULL and COMPOUND, what the server gives it (the
//! exports, the state, the pseudo file system's key), and the per-client
//! pseudo file systems it keeps.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use keel_exports::pseudo::ExportParent;
use keel_exports::{ExportTable, PseudoFs, PseudoKey, SecFlavor, port_meets_secure};
use keel_nfs4_proto::{Compound4ArgsHead, CompoundOps, NFS_V4, NFS4_PROGRAM, NfsArgop4, Nfsstat4, OpNum};
use keel_nfs4_state::{BootEpoch, ClientRecords, NfsState, Released, SharedGrace, StartError, StateConfig};
use keel_rpc::CacheClass::Uncached;
use keel_rpc::ReplyBytesMax::Computed;
use keel_rpc::{CallContext, Handled, Handlers, Procedure, ProcedureTable, REPLY_RESULTS_BYTES_DEFAULT, TabledProgram};
use keel_store::{Object, Store, Time};
use keel_xdr::{Decode, Decoder, Encoder, XdrError};

use crate::compound;
use crate::owners::OwnerNames;

/// The minor versions of NFSv4 served (nfs.conf's `vers4.1`, `vers4.2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinorVersions {
    pub v41: bool,
    pub v42: bool,
}

impl MinorVersions {
    pub fn serves(self, minor: u32) -> bool {
        match minor {
            1 => self.v41,
            2 => self.v42,
            // NFSv4.0 (SETCLIENTID, OPEN_CONFIRM) is not served.
            _ => false,
        }
    }

    pub fn any(self) -> bool {
        self.v41 || self.v42
    }
}

/// What the server gives the NFSv4 program.
pub struct Nfs4Config {
    pub minors: MinorVersions,
    pub state: StateConfig,
    /// Larger than any earlier instance's (client IDs of an earlier one are
    /// then NFS4ERR_STALE_CLIENTID).
    pub epoch: BootEpoch,
    /// Secret random bytes, new at every start: they make session IDs.
    pub session_key: [u8; 16],
    /// Authenticates pseudo file system handles: kept across restarts.
    pub pseudo_key: PseudoKey,
    /// EXCHANGE_ID's server owner and scope (knfsd: the host's name). Two
    /// servers with the same one are taken by clients for one server.
    pub server_owner: Bytes,
}

/// Told the outcome of every COMPOUND operation (the statistics count
/// them by name).
pub trait OpObserver: Send + Sync {
    fn op_done(&self, op: OpNum, status: Nfsstat4, elapsed: Duration);
}

/// The server state of this program: files are keyed by their store
/// handle, lock-holding descriptions are the store's.
pub(crate) type State<S> = NfsState<Bytes, <S as Store>::LockFile>;

/// Most per-client pseudo file systems kept; past it the cache starts
/// over (each is rebuilt from the export table on its next use).
const PSEUDO_TREES_MAX: usize = 1024;

/// The NFSv4 program over a store.
pub struct Nfs4Program<S: Store> {
    pub(crate) exports: Arc<ExportTable<S>>,
    pub(crate) minors: MinorVersions,
    pub(crate) server_owner: Bytes,
    pub(crate) state: Mutex<State<S>>,
    pseudo_key: PseudoKey,
    /// Pseudo file systems by client address and whether its port is
    /// reserved (what decides which exports a client sees).
    pseudo_trees: Mutex<HashMap<(IpAddr, bool), Arc<PseudoFs>>>,
    pub(crate) observer: Option<Arc<dyn OpObserver>>,
    /// Bytes of the largest COMPOUND reply a session may negotiate.
    pub(crate) reply_bytes_max: usize,
    lease_seconds: u32,
    /// When the program started: the times of pseudo directories.
    started: Time,
    /// The handle of each export's root (export ids are never reused).
    export_roots: Mutex<HashMap<u32, Bytes>>,
    /// The backchannel: probes and recalls (`callback.rs`).
    pub(crate) callbacks: crate::callback::Callbacks,
    /// The read leases backing the delegations granted (`deleg.rs`).
    pub(crate) leases: crate::deleg::DelegationLeases<S::ReadLease>,
    /// Owner names taken in SETATTR, OPEN and CREATE: `None` takes numbers
    /// only.
    pub(crate) owner_names: Option<OwnerNames>,
    /// What [`Nfs4Program::reap_if_due_soon`] measures from, and until
    /// when (nanoseconds from it) no COMPOUND looks at the state again.
    reap_clock: Instant,
    reap_checked_until: AtomicU64,
}

/// How often COMPOUNDs look whether the state has something to reap: the
/// look walks every client and state under the state's lock, which a
/// server holding hundreds of thousands of opens must not do at every call
/// (the callback thread looks every second regardless).
pub(crate) const REAP_RECHECK: Duration = Duration::from_millis(100);

impl<S: Store> Nfs4Program<S> {
    /// The program, with the client records of earlier instances (a grace
    /// period of its own waits for them).
    pub fn new(
        exports: Arc<ExportTable<S>>,
        config: Nfs4Config,
        records: Box<dyn ClientRecords>,
    ) -> Result<Self, StartError> {
        let state = NfsState::new(config.state.clone(), config.epoch, config.session_key, records, Instant::now())?;
        Ok(Self::with_state_of(exports, config, state))
    }

    /// The program in the grace period the server shares with NLM, started
    /// from what `records` loaded (see [`NfsState::with_grace`]).
    pub fn with_grace(
        exports: Arc<ExportTable<S>>,
        config: Nfs4Config,
        records: Box<dyn ClientRecords>,
        grace: SharedGrace,
    ) -> Result<Self, StartError> {
        let state = NfsState::with_grace(config.state.clone(), config.epoch, config.session_key, records, grace)?;
        Ok(Self::with_state_of(exports, config, state))
    }

    fn with_state_of(exports: Arc<ExportTable<S>>, config: Nfs4Config, state: State<S>) -> Self {
        let reply_bytes_max = config.state.channel.response_bytes_max as usize;
        let lease_seconds = u32::try_from(config.state.lease.as_secs()).unwrap_or(u32::MAX);
        let since_1970 = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let started = Time { seconds: since_1970.as_secs() as i64, nanos: since_1970.subsec_nanos() };
        let mut callbacks = crate::callback::Callbacks::new(config.state.lease);
        callbacks.set_write_delegations(config.state.write_delegations);
        Nfs4Program {
            exports,
            minors: config.minors,
            server_owner: config.server_owner,
            state: Mutex::new(state),
            pseudo_key: config.pseudo_key,
            pseudo_trees: Mutex::new(HashMap::new()),
            observer: None,
            reply_bytes_max,
            lease_seconds,
            started,
            export_roots: Mutex::new(HashMap::new()),
            callbacks,
            leases: crate::deleg::DelegationLeases::new(),
            owner_names: None,
            reap_clock: Instant::now(),
            reap_checked_until: AtomicU64::new(0),
        }
    }

    /// Sends callbacks (the backchannel's probes and CB_RECALL) and reads
    /// their replies through `router`, which the dispatcher gives the
    /// replies that come on connections. Without it no callback is sent:
    /// every client's callback path stays down and no delegation is
    /// offered.
    pub fn with_reply_router(mut self, router: Arc<keel_rpc::ReplyRouter>) -> Self {
        self.callbacks.set_router(router);
        self
    }

    /// Also takes `name@domain` owners of `names`' domain (numbers are
    /// always taken).
    pub fn with_owner_names(mut self, names: OwnerNames) -> Self {
        self.owner_names = Some(names);
        self
    }

    /// Offers read delegations on OPEN (`deleg.rs` says when: each backed
    /// by the store's read lease on the file; off by default: a local
    /// process's attribute change does not break a lease).
    /// Needs [`Nfs4Program::with_reply_router`] to recall them.
    pub fn with_read_delegations(mut self, on: bool) -> Self {
        self.callbacks.set_read_delegations(on);
        self
    }

    /// Starts the callback thread: it handles callbacks' replies and
    /// timeouts, retries recalls and reaps the state (leases, recall
    /// deadlines, the grace period) when no COMPOUND comes. It ends once
    /// the program is dropped. Installs the gate NFSv3's accesses go
    /// through on the export table, which recalls delegations.
    pub fn start_callbacks(self: &Arc<Self>) -> std::io::Result<()> {
        crate::deleg::install_gate(self);
        let (program, mailbox) = (Arc::downgrade(self), self.callbacks.mailbox());
        std::thread::Builder::new()
            .name("keel-nfs4-cb".into())
            .spawn(move || crate::callback::run_thread(program, mailbox))
            .map(drop)
    }

    /// Callback counters (probes and recalls sent, replies, timeouts).
    pub fn callback_counters(&self) -> crate::callback::CallbackCounters {
        self.callbacks.counters()
    }

    /// Every client and its state, for the admin interface.
    pub fn clients(&self) -> Vec<keel_nfs4_state::ClientInfo> {
        self.lock_state().clients(Instant::now())
    }

    /// State counts and counters, for the metrics and `keel status`.
    pub fn state_stats(&self) -> keel_nfs4_state::StateStats {
        self.lock_state().stats(Instant::now())
    }

    /// Tells `observer` the outcome of every operation.
    pub fn with_observer(mut self, observer: Arc<dyn OpObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    pub(crate) fn store(&self) -> &S {
        &self.exports.store
    }

    /// Runs `f` on the state, then drains what the state let go of (and
    /// drops it once the state is unlocked: closing a lock-holding
    /// description releases its locks, dropping a delegation's lease
    /// releases the lease).
    pub(crate) fn with_state<R>(&self, f: impl FnOnce(&mut State<S>) -> R) -> R {
        let (r, released, grace_end) = {
            let mut state = self.lock_state();
            let r = f(&mut state);
            (r, state.take_released(), state.take_grace_report())
        };
        if let Some((why, took)) = grace_end {
            // One line per grace period, by whoever sharing it (NLM or
            // this) notices its end first.
            tracing::info!(
                seconds = format_args!("{:.1}", took.as_secs_f64()),
                why = why.describe(),
                "grace period over"
            );
        }
        for r in released {
            match &r {
                Released::Client { clientid, why, .. } => {
                    tracing::debug!(clientid = clientid.0, ?why, "NFSv4.1 client ended");
                }
                // Its lease goes: a breaker waiting for it goes on.
                Released::Delegation { stateid, .. } => drop(self.leases.release(stateid)),
                _ => {}
            }
        }
        r
    }

    fn lock_state(&self) -> MutexGuard<'_, State<S>> {
        // A panicking handler leaves the state as consistent as the state
        // crate keeps it between calls: go on with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pseudo file system `peer` sees now, calling with `flavor`.
    pub(crate) fn pseudo_fs(&self, peer: SocketAddr, flavor: SecFlavor) -> Arc<PseudoFs> {
        let key = (canonical_ip(peer.ip()), port_meets_secure(peer, flavor));
        let mut trees = self.pseudo_trees.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fs) = trees.get(&key)
            && fs.is_current(&self.exports)
        {
            return fs.clone();
        }
        if trees.len() >= PSEUDO_TREES_MAX {
            trees.clear();
        }
        let fs = Arc::new(PseudoFs::build(&self.exports, peer, flavor, &self.pseudo_key));
        trees.insert(key, fs.clone());
        fs
    }

    pub(crate) fn lease_seconds(&self) -> u32 {
        self.lease_seconds
    }

    pub(crate) fn started(&self) -> Time {
        self.started
    }

    /// The handle of export `id`'s root.
    pub(crate) fn export_root_handle(&self, id: u32) -> Option<Bytes> {
        let mut roots = self.export_roots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = roots.get(&id) {
            return Some(h.clone());
        }
        let handle = self.store().lookup_path(id, b"/").ok()?.handle().clone();
        roots.insert(id, handle.clone());
        Some(handle)
    }

    pub(crate) fn is_export_root(&self, obj: &S::Object) -> bool {
        self.export_root_handle(obj.export_id()).is_some_and(|h| h == *obj.handle())
    }

    /// The fileid of the pseudo directory entry an export's root is
    /// mounted on, for `peer` calling with `flavor` (`None` for any other
    /// object).
    pub(crate) fn mounted_on_fileid(&self, peer: SocketAddr, flavor: SecFlavor, obj: &S::Object) -> Option<u64> {
        if !self.is_export_root(obj) {
            return None;
        }
        match self.pseudo_fs(peer, flavor).parent_of_export(obj.export_id())? {
            ExportParent::Pseudo { mounted_on_fileid, .. } => Some(mounted_on_fileid),
            ExportParent::IsRoot | ExportParent::InExport { .. } => None,
        }
    }

    /// Expires leases, recalls past their deadline, the end of the grace
    /// period, when due.
    /// [`Nfs4Program::reap_if_due`] for a COMPOUND: at most once per
    /// [`REAP_RECHECK`], so a lease or recall deadline is acted on that much
    /// later at most (and within the callback thread's tick anyway).
    pub(crate) fn reap_if_due_soon(&self, now: Instant) {
        let at = now.saturating_duration_since(self.reap_clock).as_nanos() as u64;
        let until = self.reap_checked_until.load(Ordering::Relaxed);
        if at < until {
            return;
        }
        let next = at.saturating_add(REAP_RECHECK.as_nanos() as u64);
        // One COMPOUND of those arriving together looks.
        if self.reap_checked_until.compare_exchange(until, next, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            self.reap_if_due(now);
        }
    }

    pub(crate) fn reap_if_due(&self, now: Instant) {
        self.with_state(|s| {
            if s.next_due().is_some_and(|due| due <= now) {
                s.reap(now);
            }
        });
    }
}

/// The transport tells the program of closed connections: the sessions
/// bound to one let go of it (fore and back channel), so that SEQUENCE
/// says SEQ4_STATUS_CB_PATH_DOWN(_SESSION) once no backchannel is left and
/// no callback is sent on it. The sessions stay until their client's lease
/// ends: the client may come back on a new connection (RFC 8881 section
/// 2.10.3.1). Only the state is touched: the transport may close a
/// connection from under the callbacks' engine (a failed send), whose
/// entry for it goes the next time a send finds it closed.
impl<S: Store> keel_rpc::ConnectionWatcher for Nfs4Program<S> {
    fn connection_closed(&self, id: keel_rpc::ConnectionId) {
        self.with_state(|s| s.connection_closed(keel_nfs4_state::ConnId(id.get())));
    }
}

/// An IPv4-mapped IPv6 address as IPv4 (what the state counts by).
pub(crate) fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl<S: Store> Handlers for Nfs4Program<S> {
    type Call<'a> = keel_rpc::Call<'a, Nfs4Program<S>>;
    type Status = Nfsstat4;

    fn status_code(status: Nfsstat4) -> u32 {
        status.code()
    }
}

/// Bytes of one operation's result, at most, for those whose result does
/// not grow with what they ask for (the largest: GETATTR of every
/// attribute with a 64-byte handle, OPEN, EXCHANGE_ID).
pub(crate) const OP_RESULT_BYTES_MAX: usize = 1024;
/// READLINK's result: a path.
const READLINK_RESULT_BYTES_MAX: usize = 64 + keel_nfs4_proto::LINKTEXT4_MAX;

/// The most bytes a COMPOUND's reply can take, from what its operations
/// ask for (the transport sets this much of its memory budget aside):
/// READ's and READ_PLUS's count and READDIR's maxcount as their handlers
/// clamp them, a
/// fixed bound for the others, never more than a session may negotiate.
fn compound_reply_bytes_max<S: Store>(p: &Nfs4Program<S>, args: &mut Decoder) -> Result<usize, XdrError> {
    let head = Compound4ArgsHead::decode(args)?;
    let mut ops = CompoundOps::new(&head);
    let mut total = 16 + head.tag.xdr_len();
    while let Some(op) = ops.next_op(args) {
        total += match op {
            Ok(NfsArgop4::Read(a)) => a.count.min(crate::IO_BYTES_MAX) as usize + OP_RESULT_BYTES_MAX,
            Ok(NfsArgop4::ReadPlus(a)) => a.rpa_count.min(crate::IO_BYTES_MAX) as usize + OP_RESULT_BYTES_MAX,
            Ok(NfsArgop4::Readdir(a)) => a.maxcount.min(crate::DIR_REPLY_BYTES_MAX) as usize + OP_RESULT_BYTES_MAX,
            Ok(NfsArgop4::Readlink(())) => READLINK_RESULT_BYTES_MAX,
            _ => OP_RESULT_BYTES_MAX,
        };
        if total >= p.reply_bytes_max {
            break;
        }
    }
    Ok(total.clamp(REPLY_RESULTS_BYTES_DEFAULT, p.reply_bytes_max.max(REPLY_RESULTS_BYTES_DEFAULT)))
}

impl<S: Store> TabledProgram for Nfs4Program<S> {
    const PROGRAM: u32 = NFS4_PROGRAM;
    const VERSION: u32 = NFS_V4;

    /// NFSv4's two procedures (RFC 8881 section 16). COMPOUND is not in
    /// the RPC reply cache: NFSv4.1's sessions give exactly-once
    /// semantics themselves (the slot's reply cache), and a COMPOUND
    /// without SEQUENCE is one of the operations allowed alone, each of
    /// which handles its own retransmission.
    #[rustfmt::skip]
    const PROCEDURES: ProcedureTable<Self> = ProcedureTable::new(&[
        Procedure::new(0, "NULL", Uncached, keel_rpc::ReplyBytesMax::DEFAULT, |_, _, _| Ok(None)),
        Procedure::new(1, "COMPOUND", Uncached, Computed(compound_reply_bytes_max),
            |c, a, e| compound::run(c.program, c.ctx, a, e)),
    ]);

    fn run(&self, ctx: &CallContext, args: &mut Decoder, reply: &mut Encoder) -> Handled<Self> {
        Self::PROCEDURES.call(&keel_rpc::Call { program: self, ctx }, ctx, args, reply)
    }
}

//! Counting RPC calls: [`Counted`] wraps a program, [`CallStats`] holds
//! the counters every worker adds to.

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use keel_rpc::{AcceptError, CallContext, CallReport, Flavor, RpcProgram};

use crate::clients::ClientTable;
use crate::histogram::Histogram;
use crate::snapshot::{CallsSnapshot, ExportSnapshot, FlavorCount, ProcSnapshot, ProgramSnapshot, StatusCount};

/// What the statistics need to know of a program: its number, the version
/// counted, a short name for displays and metric names, its procedures'
/// numbers and names (as its procedure table gives them: shown in lower
/// case; a call to any other number counts as "other") and, if its replies
/// carry a status, the statuses' names (the first, success, is not an
/// error).
#[derive(Debug, Clone)]
pub struct ProgramSpec {
    pub program: u32,
    pub version: u32,
    pub name: &'static str,
    pub procedures: Vec<(u32, &'static str)>,
    pub statuses: &'static [(u32, &'static str)],
}

/// Procedure numbers counted by name at most; a program's higher numbers
/// count as "other".
const PROCEDURE_NUMBER_MAX: u32 = 1024;

/// A call running longer than this counts as stuck (`keel status` is
/// unhealthy when every worker is stuck).
pub const STUCK_AFTER: Duration = Duration::from_secs(STUCK_AFTER_SECONDS);
pub const STUCK_AFTER_SECONDS: u64 = 60;
/// Threads whose running call is tracked (workers are at most 4096; the
/// network threads run the UDP portmapper's calls).
const RUNNING_SLOTS: usize = 8192;

pub struct CallStats {
    epoch: Instant,
    programs: Vec<ProgramCounters>,
    exports: RwLock<ExportTable>,
    clients: ClientTable,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    /// Calls by the flavor of their credential, in [`Flavor::ALL`]'s order.
    flavors: [AtomicU64; Flavor::ALL.len()],
    /// Per thread: milliseconds since `epoch` (plus one) when its running
    /// call started, 0 when it runs none. A cache line each: every call
    /// writes its thread's slot twice.
    running: Box<[Slot]>,
}

#[repr(align(64))]
#[derive(Default)]
struct Slot(AtomicU64);

struct ProgramCounters {
    spec: ProgramSpec,
    /// The procedures' names as shown, in `procs` order.
    proc_names: Box<[String]>,
    /// Procedure number → index in `procs`, up to the highest named one.
    proc_slots: Box<[usize]>,
    /// One per named procedure, and one for every other number.
    procs: Box<[ProcCounters]>,
    /// One per named status, and one for every other value.
    statuses: Box<[AtomicU64]>,
    garbage_args: AtomicU64,
    proc_unavail: AtomicU64,
    system_err: AtomicU64,
    dropped: AtomicU64,
    too_weak: AtomicU64,
}

#[derive(Default)]
struct ProcCounters {
    calls: AtomicU64,
    errors: AtomicU64,
    latency: Histogram,
}

/// Counters by export id, swapped whole when the exports change.
type ExportTable = Arc<[(u32, Arc<ExportCounters>)]>;

#[derive(Default)]
struct ExportCounters {
    calls: AtomicU64,
    errors: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
}

/// How a call ended, as the counters see it.
enum Outcome {
    Replied,
    Refused(AcceptError),
}

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    /// This thread's slot in every `CallStats::running`.
    static THREAD_SLOT: Cell<usize> = Cell::new(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
}

impl CallStats {
    pub fn new(programs: &[ProgramSpec]) -> Arc<Self> {
        Arc::new(CallStats {
            epoch: Instant::now(),
            programs: programs
                .iter()
                .map(|spec| ProgramCounters {
                    spec: spec.clone(),
                    proc_names: spec.procedures.iter().map(|(_, name)| name.to_ascii_lowercase()).collect(),
                    proc_slots: proc_slots(&spec.procedures),
                    procs: (0..=spec.procedures.len()).map(|_| ProcCounters::default()).collect(),
                    statuses: (0..=spec.statuses.len()).map(|_| AtomicU64::new(0)).collect(),
                    garbage_args: AtomicU64::new(0),
                    proc_unavail: AtomicU64::new(0),
                    system_err: AtomicU64::new(0),
                    dropped: AtomicU64::new(0),
                    too_weak: AtomicU64::new(0),
                })
                .collect(),
            exports: RwLock::new(Arc::from(Vec::new())),
            clients: ClientTable::default(),
            read_bytes: AtomicU64::new(0),
            write_bytes: AtomicU64::new(0),
            flavors: Default::default(),
            running: (0..RUNNING_SLOTS).map(|_| Slot::default()).collect(),
        })
    }

    /// Wraps `program` so that its calls are counted under the spec of
    /// its number and of a version it serves (NFS's version 3 and version
    /// 4 are two programs with one number); a program the statistics were
    /// not told about is returned as it is.
    pub fn counted(self: &Arc<Self>, program: Arc<dyn RpcProgram>) -> Arc<dyn RpcProgram> {
        let (low, high) = program.versions();
        let spec_of =
            |p: &ProgramCounters| p.spec.program == program.program() && (low..=high).contains(&p.spec.version);
        match self.programs.iter().position(spec_of) {
            Some(index) => Arc::new(Counted { inner: program, stats: self.clone(), index }),
            None => program,
        }
    }

    /// Counts the operations inside the calls of a program whose calls
    /// carry several (NFSv4's COMPOUND), under the spec named `name` (its
    /// procedures are the operations), apart from the calls themselves.
    pub fn operations(self: &Arc<Self>, name: &str) -> Option<OperationCounter> {
        let index = self.programs.iter().position(|p| p.spec.name == name)?;
        Some(OperationCounter { stats: self.clone(), index })
    }

    /// The exports counted from now on (by id): those that stay keep their
    /// counts, new ones start from zero, removed ones are dropped.
    pub fn set_exports(&self, ids: &[u32]) {
        let mut table = self.exports.write().expect("export counters lock");
        let next: Vec<(u32, Arc<ExportCounters>)> = ids
            .iter()
            .map(|id| {
                let kept = table.iter().find(|(i, _)| i == id).map(|(_, c)| c.clone());
                (*id, kept.unwrap_or_default())
            })
            .collect();
        *table = next.into();
    }

    /// Milliseconds from the epoch to `t`.
    fn ms_at(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_millis() as u64
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn record(&self, index: usize, ctx: &CallContext, elapsed: Duration, now_ms: u64, outcome: Outcome) {
        let program = &self.programs[index];
        let spec = &program.spec;
        let other = spec.procedures.len();
        let proc_counters = &program.procs[program.proc_slots.get(ctx.proc_ as usize).copied().unwrap_or(other)];
        proc_counters.calls.fetch_add(1, Ordering::Relaxed);
        proc_counters.latency.record(elapsed);
        let flavor = ctx.cred.flavor();
        if let Some(i) = Flavor::ALL.iter().position(|f| *f == flavor) {
            self.flavors[i].fetch_add(1, Ordering::Relaxed);
        }
        let report: &CallReport = &ctx.report;
        let error = match outcome {
            Outcome::Replied => match report.status() {
                Some(status) => {
                    let slot = spec.statuses.iter().position(|(s, _)| *s == status).unwrap_or(spec.statuses.len());
                    program.statuses[slot].fetch_add(1, Ordering::Relaxed);
                    status != spec.statuses.first().map_or(0, |(s, _)| *s)
                }
                None => false,
            },
            Outcome::Refused(e) => {
                let counter = match e {
                    AcceptError::GarbageArgs => &program.garbage_args,
                    AcceptError::ProcUnavail => &program.proc_unavail,
                    AcceptError::SystemErr => &program.system_err,
                    AcceptError::Drop => &program.dropped,
                    AcceptError::TooWeak => &program.too_weak,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                true
            }
        };
        if error {
            proc_counters.errors.fetch_add(1, Ordering::Relaxed);
        }
        let (read, written) = (report.read_bytes(), report.write_bytes());
        if read > 0 {
            self.read_bytes.fetch_add(read, Ordering::Relaxed);
        }
        if written > 0 {
            self.write_bytes.fetch_add(written, Ordering::Relaxed);
        }
        if let Some(id) = report.export() {
            let table = self.exports.read().expect("export counters lock");
            if let Some((_, c)) = table.iter().find(|(i, _)| *i == id) {
                c.calls.fetch_add(1, Ordering::Relaxed);
                c.errors.fetch_add(u64::from(error), Ordering::Relaxed);
                c.read_bytes.fetch_add(read, Ordering::Relaxed);
                c.write_bytes.fetch_add(written, Ordering::Relaxed);
            }
        }
        self.clients.record(peer_ip(ctx.peer), error, read, written, now_ms);
    }

    /// Calls by the flavor of their credential, in [`Flavor::ALL`]'s
    /// order.
    pub fn flavors(&self) -> Vec<FlavorCount> {
        Flavor::ALL
            .iter()
            .zip(&self.flavors)
            .map(|(f, n)| FlavorCount { flavor: f.name().into(), calls: n.load(Ordering::Relaxed) })
            .collect()
    }

    /// Every counter now.
    pub fn snapshot(&self) -> CallsSnapshot {
        let programs = self.programs.iter().map(program_snapshot).collect();
        let exports = self
            .exports
            .read()
            .expect("export counters lock")
            .iter()
            .map(|(id, c)| ExportSnapshot {
                id: *id,
                path: String::new(),
                calls: c.calls.load(Ordering::Relaxed),
                errors: c.errors.load(Ordering::Relaxed),
                read_bytes: c.read_bytes.load(Ordering::Relaxed),
                write_bytes: c.write_bytes.load(Ordering::Relaxed),
            })
            .collect();
        let now = self.now_ms();
        let (clients, clients_evicted) = self.clients.snapshot(now);
        let (mut running, mut oldest, mut stuck) = (0, 0, 0);
        for Slot(slot) in self.running.iter() {
            let since = slot.load(Ordering::Relaxed);
            if since != 0 {
                let ran = now.saturating_sub(since - 1);
                running += 1;
                oldest = oldest.max(ran);
                stuck += u64::from(ran >= STUCK_AFTER.as_millis() as u64);
            }
        }
        CallsSnapshot {
            programs,
            exports,
            clients,
            clients_evicted,
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
            flavors: self.flavors(),
            running,
            oldest_running_ms: oldest,
            stuck,
        }
    }
}

/// Counts the operations of one program's calls (see
/// [`CallStats::operations`]).
#[derive(Clone)]
pub struct OperationCounter {
    stats: Arc<CallStats>,
    index: usize,
}

impl OperationCounter {
    /// One operation `number` ran for `elapsed`; `error`: it failed.
    pub fn record(&self, number: u32, error: bool, elapsed: Duration) {
        let program = &self.stats.programs[self.index];
        let other = program.spec.procedures.len();
        let counters = &program.procs[program.proc_slots.get(number as usize).copied().unwrap_or(other)];
        counters.calls.fetch_add(1, Ordering::Relaxed);
        counters.latency.record(elapsed);
        if error {
            counters.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Procedure number → index of its counters (`procedures.len()`, "other",
/// for a number not named).
fn proc_slots(procedures: &[(u32, &'static str)]) -> Box<[usize]> {
    let other = procedures.len();
    let named = procedures.iter().map(|(n, _)| *n).filter(|n| *n <= PROCEDURE_NUMBER_MAX);
    let mut slots = vec![other; named.max().map_or(0, |n| n as usize + 1)];
    for (i, (n, _)) in procedures.iter().enumerate() {
        if let Some(slot) = slots.get_mut(*n as usize) {
            *slot = i;
        }
    }
    slots.into()
}

fn program_snapshot(p: &ProgramCounters) -> ProgramSnapshot {
    let names = p.proc_names.iter().map(String::as_str).chain(std::iter::once("other"));
    let procedures = p
        .procs
        .iter()
        .zip(names)
        .filter(|(c, name)| *name != "other" || c.calls.load(Ordering::Relaxed) > 0)
        .map(|(c, name)| ProcSnapshot {
            name: name.to_string(),
            calls: c.calls.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            latency: c.latency.snapshot(),
        })
        .collect();
    let status_names = p.spec.statuses.iter().copied().chain(std::iter::once((u32::MAX, "other")));
    let statuses = p
        .statuses
        .iter()
        .zip(status_names)
        .filter_map(|(c, (status, name))| {
            let count = c.load(Ordering::Relaxed);
            (count > 0).then(|| StatusCount { status, name: name.to_string(), count })
        })
        .collect();
    ProgramSnapshot {
        name: p.spec.name.to_string(),
        program: p.spec.program,
        version: p.spec.version,
        procedures,
        statuses,
        garbage_args: p.garbage_args.load(Ordering::Relaxed),
        proc_unavail: p.proc_unavail.load(Ordering::Relaxed),
        system_err: p.system_err.load(Ordering::Relaxed),
        dropped: p.dropped.load(Ordering::Relaxed),
        too_weak: p.too_weak.load(Ordering::Relaxed),
    }
}

fn peer_ip(peer: SocketAddr) -> std::net::IpAddr {
    peer.ip()
}

/// A program whose calls are counted: times each call, then counts it by
/// procedure, export, client and status (what the program put in
/// [`CallContext::report`]). A call whose handler panics counts as
/// SYSTEM_ERR.
pub struct Counted {
    inner: Arc<dyn RpcProgram>,
    stats: Arc<CallStats>,
    index: usize,
}

/// Records the call when dropped, so a panicking handler is counted too.
struct Running<'a> {
    counted: &'a Counted,
    ctx: &'a CallContext<'a>,
    started: Instant,
    slot: Option<&'a AtomicU64>,
    outcome: Option<Outcome>,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            slot.store(0, Ordering::Relaxed);
        }
        let outcome = self.outcome.take().unwrap_or(Outcome::Refused(AcceptError::SystemErr));
        // One clock read for the latency and the client's last call.
        let stats = &self.counted.stats;
        let now = Instant::now();
        stats.record(self.counted.index, self.ctx, now - self.started, stats.ms_at(now), outcome);
    }
}

impl RpcProgram for Counted {
    fn program(&self) -> u32 {
        self.inner.program()
    }

    fn versions(&self) -> (u32, u32) {
        self.inner.versions()
    }

    // Every method of the trait is forwarded, those with defaults too: a
    // default here would silently change what the wrapped program does
    // (NLM's `_MSG` calls must not be answered).
    fn is_cached(&self, vers: u32, proc_: u32) -> bool {
        self.inner.is_cached(vers, proc_)
    }

    fn answers(&self, vers: u32, proc_: u32) -> bool {
        self.inner.answers(vers, proc_)
    }

    fn portmap_versions(&self) -> Vec<u32> {
        self.inner.portmap_versions()
    }

    fn reply_bytes_max(&self, vers: u32, proc_: u32, args: bytes::Bytes) -> usize {
        self.inner.reply_bytes_max(vers, proc_, args)
    }

    fn call(
        &self,
        ctx: &CallContext,
        args: &mut keel_xdr::Decoder,
        reply: &mut keel_xdr::Encoder,
    ) -> Result<(), AcceptError> {
        let stats = &self.stats;
        let slot = stats.running.get(THREAD_SLOT.with(Cell::get)).map(|Slot(s)| s);
        let started = Instant::now();
        if let Some(slot) = slot {
            slot.store(stats.ms_at(started) + 1, Ordering::Relaxed);
        }
        let mut running = Running { counted: self, ctx, started, slot, outcome: None };
        let result = self.inner.call(ctx, args, reply);
        running.outcome = Some(match result {
            Ok(()) => Outcome::Replied,
            Err(e) => Outcome::Refused(e),
        });
        result
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use bytes::Bytes;
    use keel_rpc::Credential;
    use keel_xdr::{Decoder, Encoder};

    use super::*;

    /// A program that says something other than the trait's defaults to
    /// every question.
    struct Odd;

    impl RpcProgram for Odd {
        fn program(&self) -> u32 {
            7
        }
        fn versions(&self) -> (u32, u32) {
            (1, 4)
        }
        fn is_cached(&self, _vers: u32, proc_: u32) -> bool {
            proc_ == 2
        }
        fn answers(&self, _vers: u32, proc_: u32) -> bool {
            proc_ != 3
        }
        fn portmap_versions(&self) -> Vec<u32> {
            vec![1, 4]
        }
        fn reply_bytes_max(&self, _vers: u32, proc_: u32, _args: Bytes) -> usize {
            100 + proc_ as usize
        }
        fn call(&self, ctx: &CallContext, _args: &mut Decoder, _reply: &mut Encoder) -> Result<(), AcceptError> {
            ctx.report.set_export(9);
            ctx.report.add_write_bytes(10);
            if ctx.proc_ == 5 { Err(AcceptError::GarbageArgs) } else { Ok(()) }
        }
    }

    /// Procedures 0 to 5, and 9 after a gap.
    fn odd() -> ProgramSpec {
        let procedures = vec![(0, "A"), (1, "B"), (2, "C"), (3, "D"), (4, "E"), (5, "F"), (9, "NINE")];
        ProgramSpec { program: 7, version: 4, name: "odd", procedures, statuses: &[] }
    }

    #[test]
    fn a_program_is_counted_only_under_the_spec_of_a_version_it_serves() {
        /// Program 7 again, version 5 only: not what `odd` describes.
        struct Later;
        impl RpcProgram for Later {
            fn program(&self) -> u32 {
                7
            }
            fn versions(&self) -> (u32, u32) {
                (5, 5)
            }
            fn call(&self, _: &CallContext, _: &mut Decoder, _: &mut Encoder) -> Result<(), AcceptError> {
                Ok(())
            }
        }
        let stats = CallStats::new(&[odd()]);
        let peer: SocketAddr = "192.0.2.1:700".parse().unwrap();
        let cred = Credential::anonymous();
        for (program, vers) in [(stats.counted(Arc::new(Later)), 5), (stats.counted(Arc::new(Odd)), 4)] {
            let ctx = CallContext {
                xid: 1,
                vers,
                proc_: 1,
                cred: &cred,
                peer,
                local: peer,
                connection: None,
                report: Default::default(),
            };
            program.call(&ctx, &mut Decoder::new(Bytes::new()), &mut Encoder::new()).unwrap();
        }
        assert_eq!(stats.snapshot().programs[0].procedures[1].calls, 1, "version 4's call only");
    }

    #[test]
    fn a_counted_program_answers_every_question_as_the_program_does() {
        let stats = CallStats::new(&[odd()]);
        let counted = stats.counted(Arc::new(Odd));
        assert_eq!((counted.program(), counted.versions()), (7, (1, 4)));
        assert_eq!((counted.is_cached(4, 2), counted.is_cached(4, 1)), (true, false));
        assert_eq!((counted.answers(4, 3), counted.answers(4, 1)), (false, true));
        assert_eq!(counted.portmap_versions(), vec![1, 4]);
        assert_eq!(counted.reply_bytes_max(4, 5, Bytes::new()), 105);
    }

    #[test]
    fn calls_are_counted_by_procedure_export_and_outcome() {
        let stats = CallStats::new(&[odd()]);
        stats.set_exports(&[9]);
        let counted = stats.counted(Arc::new(Odd));
        let peer: SocketAddr = "192.0.2.1:700".parse().unwrap();
        let cred = Credential::anonymous();
        for proc_ in [1, 1, 5, 9, 7, 9] {
            let ctx = CallContext {
                xid: 1,
                vers: 4,
                proc_,
                cred: &cred,
                peer,
                local: peer,
                connection: None,
                report: Default::default(),
            };
            let _ = counted.call(&ctx, &mut Decoder::new(Bytes::new()), &mut Encoder::new());
        }
        let s = stats.snapshot();
        let p = &s.programs[0];
        assert_eq!((p.procedures[1].name.as_str(), p.procedures[1].calls, p.procedures[1].errors), ("b", 2, 0));
        assert_eq!((p.procedures[5].calls, p.procedures[5].errors, p.garbage_args), (1, 1, 1));
        assert_eq!((p.procedures[6].name.as_str(), p.procedures[6].calls), ("nine", 2));
        assert_eq!((p.procedures[7].name.as_str(), p.procedures[7].calls), ("other", 1), "a number with no entry");
        assert_eq!((s.exports[0].calls, s.exports[0].errors, s.exports[0].write_bytes), (6, 1, 60));
        assert_eq!((s.clients[0].address.as_str(), s.clients[0].calls), ("192.0.2.1", 6));
        assert_eq!(s.running, 0);

        // A program the statistics do not know is left as it is.
        let other = CallStats::new(&[]).counted(Arc::new(Odd));
        assert!(!other.answers(4, 3));
    }

    #[test]
    fn operations_inside_calls_are_counted_under_their_own_names() {
        let stats = CallStats::new(&[odd()]);
        assert!(stats.operations("even").is_none(), "no such spec");
        let ops = stats.operations("odd").unwrap();
        ops.record(9, false, Duration::from_micros(5));
        ops.record(9, true, Duration::from_micros(5));
        ops.record(10_044, true, Duration::from_micros(5));
        let p = &stats.snapshot().programs[0];
        assert_eq!((p.procedures[6].name.as_str(), p.procedures[6].calls, p.procedures[6].errors), ("nine", 2, 1));
        assert_eq!((p.procedures[7].name.as_str(), p.procedures[7].calls), ("other", 1));
        assert!(p.statuses.is_empty(), "an operation's status is not the call's");
    }
}

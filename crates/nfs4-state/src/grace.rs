//! The grace period after a restart or takeover (RFC 8881 sections 8.4.2
//! and 18.51), and what must be on stable storage for it.
//!
//! [`Grace`] knows the clients of the previous instance and whether each
//! has come back, finished reclaiming (RECLAIM_COMPLETE) or is known gone.
//! While it lasts only reclaims are granted; it ends as soon as every
//! previous client is complete or gone, or at its ceiling. It holds no
//! NFSv4 types but the [`Principal`] (an authenticated identity), so the
//! NLM lock manager can use the same value for its hosts
//! ([`Reclaimer::Nlm`]): one grace period for one lock space, shared as a
//! [`SharedGrace`].
//!
//! [`ClientRecords`] is where the server keeps, on stable storage, which
//! clients may reclaim after the next restart: one [`ClientRecord`] per
//! client owner, written before the client is granted its first state that
//! is not a reclaim, removed when the client is destroyed or expires, and
//! kept across a grace period only for clients that completed their
//! reclaim in it (RFC 8881 section 8.4.3's edge conditions: a client that
//! had not finished reclaiming when a grace period ended may have lost
//! locks to others, so it must not reclaim after the next restart).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::Principal;

/// A client of the previous instance, as the protocol that reclaims
/// names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reclaimer {
    /// An NFSv4.1 client: its `co_ownerid`.
    Nfs4(Box<[u8]>),
    /// An NLM host: its address and `caller_name` (keel-nlm's `HostKey`).
    Nlm { addr: IpAddr, name: Box<[u8]> },
}

/// A client the grace period waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviousClient {
    pub who: Reclaimer,
    /// Who it was; its reclaims must come from the same principal. `None`
    /// where the protocol has no principal to compare (NLM).
    pub principal: Option<Principal>,
    /// Taken as gone if it has not come back within this long of the
    /// start (NFSv4.1: a lease, since a live client renews within one).
    /// `None`: its protocol says when it is gone ([`Grace::gone`]).
    pub absent_after: Option<Duration>,
}

/// Why a request was refused by the grace rules. Each protocol maps it to
/// its own status ([`GraceRefusal::nfs4_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraceRefusal {
    /// Not a reclaim, during the grace period (`NFS4ERR_GRACE`).
    InGrace,
    /// A reclaim outside the grace period, or after the client's
    /// RECLAIM_COMPLETE (`NFS4ERR_NO_GRACE`).
    NoGrace,
    /// A reclaim by a client the previous instance did not record
    /// (`NFS4ERR_RECLAIM_BAD`).
    ReclaimBad,
}

impl GraceRefusal {
    pub fn nfs4_status(self) -> keel_nfs4_proto::Nfsstat4 {
        use keel_nfs4_proto::Nfsstat4;
        match self {
            GraceRefusal::InGrace => Nfsstat4::Grace,
            GraceRefusal::NoGrace => Nfsstat4::NoGrace,
            GraceRefusal::ReclaimBad => Nfsstat4::ReclaimBad,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Not seen since the start.
    Awaited { absent_by: Option<Instant> },
    /// Came back, reclaiming.
    Back,
    /// Sent RECLAIM_COMPLETE (or its protocol's equivalent).
    Complete,
    /// Known gone: not back in time, or its new lease expired.
    Gone,
}

#[derive(Debug, Clone)]
struct Pending {
    principal: Option<Principal>,
    progress: Progress,
}

/// Why a grace period ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraceEndReason {
    /// Every previous client completed its reclaim or is known gone.
    AllDone,
    /// The ceiling was reached.
    Ceiling,
}

impl GraceEndReason {
    /// Why, in words, for the log line that reports the end.
    pub fn describe(self) -> &'static str {
        match self {
            GraceEndReason::AllDone => "every client reclaimed or is gone",
            GraceEndReason::Ceiling => "ceiling reached",
        }
    }
}

/// The end of a grace period, reported once ([`Grace::take_end`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraceEnd {
    pub why: GraceEndReason,
    pub lasted: Duration,
    /// Previous clients that completed their reclaim: their records stay.
    pub completed: Vec<Reclaimer>,
    /// The others: their records go.
    pub not_completed: Vec<Reclaimer>,
}

/// The grace period's progress, for the admin interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GraceStatus {
    pub active: bool,
    /// Time left to the ceiling.
    pub remaining: Duration,
    pub awaited: usize,
    pub reclaiming: usize,
    pub complete: usize,
    pub gone: usize,
}

/// The grace period: only reclaims while it lasts.
#[derive(Debug, Clone)]
pub struct Grace {
    started: Instant,
    ceiling: Instant,
    pending: HashMap<Reclaimer, Pending>,
    active: bool,
    end: Option<GraceEnd>,
    /// Why it ended, kept after [`take_end`](Grace::take_end).
    ended: Option<GraceEndReason>,
    /// The end, until it is logged ([`Grace::take_report`]).
    report: Option<(GraceEndReason, Duration)>,
}

impl Grace {
    /// No grace period (a first start, or nothing to reclaim).
    pub fn none(now: Instant) -> Self {
        Grace {
            started: now,
            ceiling: now,
            pending: HashMap::new(),
            active: false,
            end: None,
            ended: None,
            report: None,
        }
    }

    /// A grace period for `previous`, ending at `now + ceiling` at the
    /// latest; none if there is nobody to wait for or the ceiling is 0.
    pub fn start(previous: impl IntoIterator<Item = PreviousClient>, now: Instant, ceiling: Duration) -> Self {
        let pending: HashMap<Reclaimer, Pending> = previous
            .into_iter()
            .map(|p| {
                let absent_by = p.absent_after.map(|d| now + d);
                (p.who, Pending { principal: p.principal, progress: Progress::Awaited { absent_by } })
            })
            .collect();
        let active = !pending.is_empty() && !ceiling.is_zero();
        Grace { started: now, ceiling: now + ceiling, pending, active, end: None, ended: None, report: None }
    }

    /// Whether the grace period is on at `now`, ending it if its ceiling
    /// is reached or nobody is left to wait for.
    pub fn poll(&mut self, now: Instant) -> bool {
        if !self.active {
            return false;
        }
        for p in self.pending.values_mut() {
            if let Progress::Awaited { absent_by: Some(at) } = p.progress
                && now >= at
            {
                p.progress = Progress::Gone;
            }
        }
        let all_done = self.pending.values().all(|p| matches!(p.progress, Progress::Complete | Progress::Gone));
        if all_done || now >= self.ceiling {
            self.finish(if all_done { GraceEndReason::AllDone } else { GraceEndReason::Ceiling }, now);
        }
        self.active
    }

    fn finish(&mut self, why: GraceEndReason, now: Instant) {
        self.active = false;
        let (mut completed, mut not_completed) = (Vec::new(), Vec::new());
        for (who, p) in self.pending.drain() {
            if p.progress == Progress::Complete {
                completed.push(who);
            } else {
                not_completed.push(who);
            }
        }
        let lasted = now.duration_since(self.started);
        self.end = Some(GraceEnd { why, lasted, completed, not_completed });
        self.ended = Some(why);
        self.report = Some((why, lasted));
    }

    /// Why the grace period ended and how long it lasted, once, for the
    /// one log line that says so: whoever sharing it (NLM or NFSv4.1)
    /// notices the end first logs it.
    pub fn take_report(&mut self) -> Option<(GraceEndReason, Duration)> {
        self.report.take()
    }

    /// Why the grace period ended, once it did (whoever took the end).
    pub fn ended(&self) -> Option<GraceEndReason> {
        self.ended
    }

    /// When the grace period started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The end of the grace period, once, after [`poll`](Grace::poll)
    /// ended it: the caller keeps the records of the clients that
    /// completed and removes the others'.
    pub fn take_end(&mut self) -> Option<GraceEnd> {
        self.end.take()
    }

    /// May `who` (as `principal`) reclaim now?
    pub fn check_reclaim(
        &mut self,
        who: &Reclaimer,
        principal: Option<&Principal>,
        now: Instant,
    ) -> Result<(), GraceRefusal> {
        if !self.poll(now) {
            return Err(GraceRefusal::NoGrace);
        }
        let Some(p) = self.pending.get_mut(who) else { return Err(GraceRefusal::ReclaimBad) };
        if !principal_matches(p.principal.as_ref(), principal) {
            return Err(GraceRefusal::ReclaimBad);
        }
        match p.progress {
            Progress::Complete => Err(GraceRefusal::NoGrace),
            _ => {
                // A client taken for gone that reclaims after all is back:
                // nothing but reclaims was granted in the meantime.
                p.progress = Progress::Back;
                Ok(())
            }
        }
    }

    /// May anyone be granted new state (not a reclaim) now?
    pub fn check_new_state(&mut self, now: Instant) -> Result<(), GraceRefusal> {
        if self.poll(now) { Err(GraceRefusal::InGrace) } else { Ok(()) }
    }

    /// `who` (as `principal`) is back: it no longer counts as absent; it
    /// is now done when it completes, or gone when its protocol says so.
    pub fn came_back(&mut self, who: &Reclaimer, principal: Option<&Principal>) {
        if !self.active {
            return;
        }
        if let Some(p) = self.pending.get_mut(who)
            && principal_matches(p.principal.as_ref(), principal)
            && matches!(p.progress, Progress::Awaited { .. } | Progress::Gone)
        {
            p.progress = Progress::Back;
        }
    }

    /// `who` (as `principal`) finished reclaiming. Returns whether the
    /// grace period was waiting for it: another principal presenting the
    /// same name does not end anybody's grace.
    pub fn complete(&mut self, who: &Reclaimer, principal: Option<&Principal>, now: Instant) -> bool {
        if !self.poll(now) {
            return false;
        }
        let Some(p) = self.pending.get_mut(who) else { return false };
        if !principal_matches(p.principal.as_ref(), principal) {
            return false;
        }
        p.progress = Progress::Complete;
        self.poll(now);
        true
    }

    /// `who` is gone (its lease expired, it was destroyed, it did not
    /// answer): the grace period stops waiting for it.
    pub fn gone(&mut self, who: &Reclaimer, now: Instant) {
        if let Some(p) = self.pending.get_mut(who)
            && p.progress != Progress::Complete
        {
            p.progress = Progress::Gone;
            self.poll(now);
        }
    }

    pub fn status(&self, now: Instant) -> GraceStatus {
        let mut s = GraceStatus {
            active: self.active,
            remaining: if self.active { self.ceiling.saturating_duration_since(now) } else { Duration::ZERO },
            ..GraceStatus::default()
        };
        for p in self.pending.values() {
            match p.progress {
                Progress::Awaited { .. } => s.awaited += 1,
                Progress::Back => s.reclaiming += 1,
                Progress::Complete => s.complete += 1,
                Progress::Gone => s.gone += 1,
            }
        }
        s
    }

    /// The earliest instant at which [`poll`](Grace::poll) may change
    /// something without any call (a ceiling or an absence deadline).
    pub fn next_due(&self) -> Option<Instant> {
        if !self.active {
            return None;
        }
        let absent = self.pending.values().filter_map(|p| match p.progress {
            Progress::Awaited { absent_by } => absent_by,
            _ => None,
        });
        absent.chain([self.ceiling]).min()
    }
}

fn principal_matches(recorded: Option<&Principal>, given: Option<&Principal>) -> bool {
    match recorded {
        None => true,
        Some(r) => given == Some(r),
    }
}

/// The one grace period of a server instance, shared by the NFSv4.1
/// state and the NLM lock manager (clones share it): a new NLM lock and a
/// new v4 open or lock are refused while it lasts, reclaims of both are
/// accepted, and it ends early only once every NLM host that held locks
/// and every v4 client in the stable records has reclaimed (sent
/// RECLAIM_COMPLETE, or NLM's equivalent) or is known gone, else at its
/// ceiling.
///
/// The server builds it once per start, before serving, from both lists
/// of previous clients: keel-nlm's hosts (its NSM records) and
/// [`ClientRecord::previous_client`] of each loaded v4 record, passed to
/// [`Grace::start`] together; it hands one clone to the lock manager and
/// one to [`NfsState::with_grace`](crate::NfsState::with_grace).
///
/// The NFSv4.1 handler makes no call of its own on it: [`NfsState`]
/// consults it.
/// - "In grace?": [`NfsState::in_grace`](crate::NfsState::in_grace) (it
///   also ends the grace period when due); OPEN with CLAIM_NULL and LOCK
///   without `reclaim` get NFS4ERR_GRACE from the state while it lasts.
/// - A reclaim: OPEN with CLAIM_PREVIOUS ([`OpenClaim`](crate::OpenClaim))
///   and LOCK with `reclaim` are checked against it (NFS4ERR_NO_GRACE,
///   NFS4ERR_RECLAIM_BAD); an EXCHANGE_ID of a previous client marks it
///   back.
/// - RECLAIM_COMPLETE: [`NfsState::reclaim_complete`](crate::NfsState::reclaim_complete).
/// - [`NfsState::reap`](crate::NfsState::reap) ends it at its ceiling, and
///   keeps or removes the v4 records at its end.
///
/// Anyone else (keel-nlm, the admin interface) locks it for one call at a
/// time: [`lock`](SharedGrace::lock) is a leaf lock, never held while
/// another lock is taken.
#[derive(Debug, Clone)]
pub struct SharedGrace(Arc<Mutex<Grace>>);

impl SharedGrace {
    pub fn new(grace: Grace) -> Self {
        SharedGrace(Arc::new(Mutex::new(grace)))
    }

    /// The grace period, for one call.
    pub fn lock(&self) -> MutexGuard<'_, Grace> {
        // Every method of Grace leaves it consistent.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the server keeps on stable storage about one client, so that it
/// may reclaim after the next restart or takeover.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientRecord {
    /// The client owner (`co_ownerid`), the key of the record.
    pub owner: Box<[u8]>,
    /// The principal that established it: only the same one may reclaim
    /// (knfsd's nfsdcld keeps a hash of it for the same reason).
    pub principal: Principal,
    /// The boot epoch of the instance that wrote (or kept) the record.
    pub epoch: u32,
}

/// The format of [`ClientRecord::encode`].
const RECORD_FORMAT: u8 = 1;
/// The largest client owner (`co_ownerid`: NFS4_OPAQUE_LIMIT).
const RECORD_OWNER_BYTES_MAX: usize = 1024;
/// The largest name in a recorded principal (a machine name or a GSS
/// principal).
const RECORD_NAME_BYTES_MAX: usize = 1024;

impl ClientRecord {
    /// The record as bytes, for a [`ClientRecords`] on stable storage:
    /// a format byte, the epoch, the principal (a tag, then AUTH_SYS's uid
    /// and a name where it has them), the owner; numbers big-endian,
    /// names and the owner after their length.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![RECORD_FORMAT];
        out.extend_from_slice(&self.epoch.to_be_bytes());
        let put_bytes = |out: &mut Vec<u8>, b: &[u8]| {
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(b);
        };
        match &self.principal {
            Principal::None => out.push(0),
            Principal::Sys { uid, machine } => {
                out.push(1);
                out.extend_from_slice(&uid.to_be_bytes());
                put_bytes(&mut out, machine);
            }
            Principal::Gss { name } => {
                out.push(2);
                put_bytes(&mut out, name);
            }
        }
        put_bytes(&mut out, &self.owner);
        out
    }

    /// A record [`encode`](ClientRecord::encode) made; `None` for anything
    /// else (damage, another format), which the caller reports and skips.
    pub fn decode(bytes: &[u8]) -> Option<ClientRecord> {
        let mut r = RecordReader(bytes);
        if r.take(1)? != [RECORD_FORMAT] {
            return None;
        }
        let epoch = r.u32()?;
        let principal = match r.take(1)?[0] {
            0 => Principal::None,
            1 => Principal::Sys { uid: r.u32()?, machine: r.bytes(RECORD_NAME_BYTES_MAX)? },
            2 => Principal::Gss { name: r.bytes(RECORD_NAME_BYTES_MAX)? },
            _ => return None,
        };
        let owner = r.bytes(RECORD_OWNER_BYTES_MAX)?;
        r.0.is_empty().then_some(ClientRecord { owner, principal, epoch })
    }

    /// The client a grace period waits for: it may reclaim only as the
    /// same principal, and is taken as gone if not back within `lease`
    /// (a live client renews within one).
    pub fn previous_client(self, lease: Duration) -> PreviousClient {
        PreviousClient { who: Reclaimer::Nfs4(self.owner), principal: Some(self.principal), absent_after: Some(lease) }
    }
}

/// The unread rest of an encoded record.
struct RecordReader<'a>(&'a [u8]);

impl RecordReader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (head, tail) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = tail;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    /// Bytes after their length, at most `max` of them.
    fn bytes(&mut self, max: usize) -> Option<Box<[u8]>> {
        let len = self.u32()? as usize;
        if len > max {
            return None;
        }
        self.take(len).map(Box::from)
    }
}

/// Stable storage for [`ClientRecord`]s, one per owner. The server
/// implements it with files in `state_dir` (on the shared storage under
/// `[ha]`); [`MemoryRecords`] is for tests.
///
/// Calls are made with the state's lock held: each writes one small
/// record and syncs it (a first state per client incarnation, a removal
/// per expiry, a rewrite per completed reclaim at the end of a grace
/// period).
pub trait ClientRecords: Send {
    /// Every record, at start.
    fn load(&mut self) -> std::io::Result<Vec<ClientRecord>>;
    /// Makes `record` durable, replacing the one of the same owner.
    fn put(&mut self, record: &ClientRecord) -> std::io::Result<()>;
    /// Removes the record of `owner`, if any.
    fn remove(&mut self, owner: &[u8]) -> std::io::Result<()>;
}

/// [`ClientRecords`] in memory, shared by its clones (a test starts a new
/// server instance on the records of the old one); can be made to fail.
#[derive(Debug, Clone, Default)]
pub struct MemoryRecords {
    inner: Arc<Mutex<MemoryInner>>,
}

#[derive(Debug, Default)]
struct MemoryInner {
    records: HashMap<Box<[u8]>, ClientRecord>,
    failing: bool,
}

impl MemoryRecords {
    pub fn new() -> Self {
        MemoryRecords::default()
    }

    /// Every record now, sorted by owner.
    pub fn snapshot(&self) -> Vec<ClientRecord> {
        let mut v: Vec<ClientRecord> = self.lock().records.values().cloned().collect();
        v.sort_by(|a, b| a.owner.cmp(&b.owner));
        v
    }

    /// Makes every call fail (as a broken disk would) until called with
    /// `false`.
    pub fn set_failing(&self, failing: bool) {
        self.lock().failing = failing;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check(inner: &MemoryInner) -> std::io::Result<()> {
        if inner.failing { Err(std::io::Error::other("client records: injected failure")) } else { Ok(()) }
    }
}

impl ClientRecords for MemoryRecords {
    fn load(&mut self) -> std::io::Result<Vec<ClientRecord>> {
        let inner = self.lock();
        Self::check(&inner)?;
        Ok(inner.records.values().cloned().collect())
    }

    fn put(&mut self, record: &ClientRecord) -> std::io::Result<()> {
        let mut inner = self.lock();
        Self::check(&inner)?;
        inner.records.insert(record.owner.clone(), record.clone());
        Ok(())
    }

    fn remove(&mut self, owner: &[u8]) -> std::io::Result<()> {
        let mut inner = self.lock();
        Self::check(&inner)?;
        inner.records.remove(owner);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(name: &str) -> Reclaimer {
        Reclaimer::Nfs4(name.as_bytes().into())
    }

    fn sys(uid: u32) -> Principal {
        Principal::Sys { uid, machine: b"host".as_slice().into() }
    }

    fn prev(name: &str, uid: u32) -> PreviousClient {
        PreviousClient { who: v4(name), principal: Some(sys(uid)), absent_after: Some(Duration::from_secs(90)) }
    }

    /// RFC 8881 section 8.4.2.1: the grace period may end early once
    /// every client of the previous instance has sent RECLAIM_COMPLETE.
    #[test]
    fn grace_ends_when_every_previous_client_completed() {
        let t0 = Instant::now();
        let mut g = Grace::start([prev("a", 0), prev("b", 0)], t0, Duration::from_secs(90));
        assert_eq!(g.check_new_state(t0), Err(GraceRefusal::InGrace));
        assert_eq!(g.check_reclaim(&v4("a"), Some(&sys(0)), t0), Ok(()));
        assert!(g.complete(&v4("a"), Some(&sys(0)), t0));
        assert_eq!(
            g.check_reclaim(&v4("a"), Some(&sys(0)), t0),
            Err(GraceRefusal::NoGrace),
            "after its RECLAIM_COMPLETE"
        );
        assert!(g.poll(t0 + Duration::from_secs(1)));
        assert!(g.complete(&v4("b"), Some(&sys(0)), t0 + Duration::from_secs(2)));
        assert!(!g.poll(t0 + Duration::from_secs(2)));
        let end = g.take_end().unwrap();
        assert_eq!((end.why, end.lasted), (GraceEndReason::AllDone, Duration::from_secs(2)));
        assert_eq!(end.completed.len(), 2);
        assert!(g.take_end().is_none(), "reported once");
        assert_eq!(g.take_report(), Some((GraceEndReason::AllDone, Duration::from_secs(2))), "logged once");
        assert_eq!(g.take_report(), None);
        assert_eq!(g.check_reclaim(&v4("a"), Some(&sys(0)), t0), Err(GraceRefusal::NoGrace));
        assert_eq!(g.check_new_state(t0), Ok(()));
    }

    /// RFC 8881 section 8.4.2: a client that is not back ends the grace
    /// period only at its ceiling... unless it is known gone, here by not
    /// coming back within a lease.
    #[test]
    fn grace_ends_at_the_ceiling_or_when_the_absent_are_known_gone() {
        let t0 = Instant::now();
        let mut g = Grace::start([prev("a", 0), prev("b", 0)], t0, Duration::from_secs(300));
        g.came_back(&v4("a"), Some(&sys(0)));
        assert!(g.poll(t0 + Duration::from_secs(91)), "b is gone, a is still reclaiming");
        assert_eq!(g.status(t0).gone, 1);
        assert!(g.poll(t0 + Duration::from_secs(299)));
        assert!(!g.poll(t0 + Duration::from_secs(300)));
        let end = g.take_end().unwrap();
        assert_eq!(end.why, GraceEndReason::Ceiling);
        assert_eq!(end.not_completed.len(), 2);

        let mut g = Grace::start([prev("a", 0)], t0, Duration::from_secs(300));
        assert!(!g.poll(t0 + Duration::from_secs(90)), "nobody came back within a lease");
        assert_eq!(g.take_end().unwrap().why, GraceEndReason::AllDone);
    }

    /// RFC 8881 section 8.4.2.1: a reclaim by a client the previous
    /// instance did not record is RECLAIM_BAD; a reclaim under another
    /// principal is too, and its RECLAIM_COMPLETE ends nobody's wait.
    #[test]
    fn reclaims_come_only_from_recorded_clients_under_their_principal() {
        let t0 = Instant::now();
        let mut g = Grace::start([prev("a", 0)], t0, Duration::from_secs(90));
        assert_eq!(g.check_reclaim(&v4("z"), Some(&sys(0)), t0), Err(GraceRefusal::ReclaimBad));
        assert_eq!(g.check_reclaim(&v4("a"), Some(&sys(7)), t0), Err(GraceRefusal::ReclaimBad));
        assert!(!g.complete(&v4("a"), Some(&sys(7)), t0));
        assert!(g.poll(t0));
        g.gone(&v4("a"), t0);
        assert!(!g.poll(t0), "its only client is gone");
        assert_eq!(g.check_reclaim(&v4("a"), Some(&sys(0)), t0), Err(GraceRefusal::NoGrace));
    }

    /// NLM hosts have no principal and no absence deadline: their own
    /// protocol says when they are done or gone.
    #[test]
    fn nlm_hosts_share_the_same_grace() {
        let t0 = Instant::now();
        let host = Reclaimer::Nlm { addr: IpAddr::from([10, 0, 0, 1]), name: b"h1".as_slice().into() };
        let nlm = PreviousClient { who: host.clone(), principal: None, absent_after: None };
        let mut g = Grace::start([nlm, prev("a", 0)], t0, Duration::from_secs(90));
        assert_eq!(g.check_reclaim(&host, None, t0), Ok(()));
        assert!(g.complete(&v4("a"), Some(&sys(0)), t0));
        assert!(g.poll(t0 + Duration::from_secs(89)), "the NLM host is still awaited");
        g.gone(&host, t0 + Duration::from_secs(89));
        assert!(!g.poll(t0 + Duration::from_secs(89)));
        assert_eq!(Grace::none(t0).check_new_state(t0), Ok(()));
        assert!(!Grace::start(Vec::new(), t0, Duration::from_secs(90)).poll(t0), "nothing to reclaim");
    }

    /// A record read back is the record written; anything else (a torn
    /// or garbled file, another format, lengths past their bounds) is
    /// `None`, never a panic.
    #[test]
    fn client_records_encode_and_decode_and_refuse_damage() {
        let principals = [sys(7), Principal::None, Principal::Gss { name: b"nfs/h@REALM".as_slice().into() }];
        for principal in principals {
            let r = ClientRecord { owner: vec![0xab; 1024].into(), principal, epoch: 41 };
            let bytes = r.encode();
            assert_eq!(ClientRecord::decode(&bytes), Some(r.clone()));
            for cut in 0..bytes.len() {
                assert_eq!(ClientRecord::decode(&bytes[..cut]), None, "cut at {cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(ClientRecord::decode(&longer), None);
            let mut other = bytes;
            other[0] = 2;
            assert_eq!(ClientRecord::decode(&other), None, "another format");
        }
        let r = ClientRecord { owner: vec![1; 1025].into(), principal: Principal::None, epoch: 1 };
        assert_eq!(ClientRecord::decode(&r.encode()), None, "an owner longer than NFSv4 allows");
        let p = ClientRecord { owner: b"o".as_slice().into(), principal: sys(3), epoch: 1 }
            .previous_client(Duration::from_secs(90));
        assert_eq!((p.who, p.principal, p.absent_after), (v4("o"), Some(sys(3)), Some(Duration::from_secs(90))));
    }

    /// NLM and NFSv4.1 clients in one grace period: NLM's host done but a
    /// v4 client not yet: still on; both: over; or at the ceiling.
    #[test]
    fn a_shared_grace_waits_for_both_protocols_or_its_ceiling() {
        let t0 = Instant::now();
        let host = Reclaimer::Nlm { addr: IpAddr::from([10, 0, 0, 1]), name: b"h1".as_slice().into() };
        let nlm = || PreviousClient { who: host.clone(), principal: None, absent_after: None };
        let shared = SharedGrace::new(Grace::start([nlm(), prev("a", 0)], t0, Duration::from_secs(300)));
        let other = shared.clone();
        assert!(shared.lock().complete(&host, None, t0));
        assert!(other.lock().poll(t0 + Duration::from_secs(1)), "the v4 client has not completed");
        assert_eq!(other.lock().check_new_state(t0), Err(GraceRefusal::InGrace));
        assert!(other.lock().complete(&v4("a"), Some(&sys(0)), t0 + Duration::from_secs(2)));
        assert!(!shared.lock().poll(t0 + Duration::from_secs(2)));
        assert_eq!(shared.lock().ended(), Some(GraceEndReason::AllDone));

        // Neither comes back; the v4 client would be taken as gone after
        // its lease, but the NLM host keeps it on to the ceiling.
        let absent = PreviousClient { absent_after: Some(Duration::from_secs(400)), ..prev("a", 0) };
        let shared = SharedGrace::new(Grace::start([nlm(), absent], t0, Duration::from_secs(300)));
        assert!(shared.lock().poll(t0 + Duration::from_secs(299)));
        assert!(!shared.lock().poll(t0 + Duration::from_secs(300)));
        assert_eq!(shared.lock().ended(), Some(GraceEndReason::Ceiling));
    }
}

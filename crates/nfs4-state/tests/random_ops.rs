//! Random sequences of operations by several clients on few files, as a
//! handler would drive the state (with a model of the kernel's OFD locks
//! deciding conflicts), checking after every step that:
//! - the state's invariants hold (`check_invariants`: indexes agree, no
//!   two open owners' share reservations conflict, every client's claims
//!   are what it holds and every pool's count the sum of its clients');
//! - every stateid the state handed out tests OK at its latest seqid until
//!   the state reports it released (closed, freed, returned, revoked, or
//!   its client ended);
//! - a retransmitted request gets exactly the reply cached for it.
//!
//! Seeds 0..KEEL_SIM_SEEDS (default 200) run; KEEL_SIM_SEED=N replays one.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use keel_nfs4_proto::{
    CREATE_SESSION4_FLAG_CONN_BACK_CHAN, CallbackSecParms4, ChannelAttrs4, ClientOwner4, CreateSession4Args,
    ExchangeId4Args, Sequence4Args, StateProtect4A,
};
use keel_nfs4_state::*;
use keel_xdr::Opaque;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        if v.is_empty() { None } else { Some(&v[self.below(v.len() as u64) as usize]) }
    }
}

const OWNERS: usize = 6;
const FILES: u64 = 5;
const STEPS: usize = 400;

type St = NfsState<u32, u32>;

struct Client {
    id: ClientId,
    principal: Principal,
    addr: IpAddr,
    session: SessionId,
    conn: u64,
    /// Slot 0's last seqid and the reply cached for it, if any.
    seqid: u32,
    cached: Option<Vec<u8>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Open,
    Lock,
    Delegation,
}

#[derive(Clone, Copy, Debug)]
struct Live {
    client: ClientId,
    stateid: Stateid4,
    kind: Kind,
    file: u32,
}

/// A range an OFD description holds: first and last byte, kind.
type Held = (u64, u64, LockKind);

/// The kernel's OFD locks, as far as the handler's tests need them: each
/// description's file and ranges.
#[derive(Default)]
struct Kernel {
    holders: HashMap<u32, (u32, Vec<Held>)>,
}

impl Kernel {
    fn conflicts(&self, holder: u32, file: u32, kind: LockKind, r: ByteRange) -> bool {
        self.holders.iter().any(|(h, (f, held))| {
            *h != holder
                && *f == file
                && held
                    .iter()
                    .any(|&(s, l, k)| s <= r.last && r.start <= l && (k == LockKind::Write || kind == LockKind::Write))
        })
    }

    fn cut(held: &mut Vec<Held>, r: ByteRange) {
        let mut out = Vec::new();
        for &(s, l, k) in held.iter() {
            if l < r.start || s > r.last {
                out.push((s, l, k));
                continue;
            }
            if s < r.start {
                out.push((s, r.start - 1, k));
            }
            if l > r.last {
                out.push((r.last + 1, l, k));
            }
        }
        *held = out;
    }

    fn lock(&mut self, holder: u32, file: u32, kind: LockKind, r: ByteRange) {
        let held = &mut self.holders.entry(holder).or_insert((file, Vec::new())).1;
        Self::cut(held, r);
        held.push((r.start, r.last, kind));
    }

    fn unlock(&mut self, holder: u32, r: ByteRange) {
        if let Some((_, held)) = self.holders.get_mut(&holder) {
            Self::cut(held, r);
        }
    }
}

struct World {
    rng: Rng,
    st: St,
    now: Instant,
    clients: Vec<Option<Client>>,
    live: HashMap<[u8; 12], Live>,
    kernel: Kernel,
    next_holder: u32,
    next_conn: u64,
    thief: Principal,
    seed: u64,
    step: usize,
    /// What happened, for the check that the runs reach every path.
    seen: HashMap<String, usize>,
}

fn ip(n: usize) -> IpAddr {
    IpAddr::from([10, 0, 0, (n % 3 + 1) as u8])
}

fn owner(i: usize) -> String {
    format!("client-{i}")
}

fn attrs(slots: u32, cached: u32) -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1 << 16,
        ca_maxresponsesize: 1 << 16,
        ca_maxresponsesize_cached: cached,
        ca_maxoperations: 8,
        ca_maxrequests: slots,
        ca_rdma_ird: None,
    }
}

impl World {
    fn new(seed: u64) -> World {
        let mut config = StateConfig::default();
        // Small bounds, so the runs reach them.
        config.limits.opens = Bound { total: 24, per_address: 12 };
        config.limits.lock_states = Bound { total: 16, per_address: 8 };
        config.limits.lock_ranges = Bound { total: 48, per_address: 12 };
        config.limits.delegations = Bound { total: 8, per_address: 4 };
        config.limits.clients = Bound { total: 16, per_address: 4 };
        config.write_delegations = seed % 2 == 1;
        let now = Instant::now();
        let st =
            NfsState::new(config, BootEpoch::new(3).unwrap(), [seed as u8; 16], Box::new(MemoryRecords::new()), now)
                .unwrap();
        World {
            rng: Rng(seed),
            st,
            now,
            clients: (0..OWNERS).map(|_| None).collect(),
            live: HashMap::new(),
            kernel: Kernel::default(),
            next_holder: 0,
            next_conn: 0,
            thief: Principal::Sys { uid: 666, machine: b"thief".as_slice().into() },
            seed,
            step: 0,
            seen: HashMap::new(),
        }
    }

    /// The live stateids of `kind` (all if `None`), in a replayable order.
    fn live_of(&self, kind: Option<Kind>) -> Vec<Live> {
        let mut v: Vec<Live> = self.live.values().copied().filter(|l| kind.is_none_or(|k| l.kind == k)).collect();
        v.sort_by_key(|l| l.stateid.other);
        v
    }

    fn client_index(&self, id: ClientId) -> Option<usize> {
        self.clients.iter().position(|c| c.as_ref().is_some_and(|c| c.id == id))
    }

    fn step(&mut self) -> String {
        match self.rng.below(17) {
            0 => self.connect(),
            1 => self.thief(),
            2 | 3 => self.sequence(),
            4 | 5 => self.open(),
            6 => self.downgrade(),
            7 => self.close(),
            8 | 9 => self.lock(),
            10 => self.unlock(),
            11 => self.free(),
            12 => self.delegate(),
            13 => self.other_access(),
            14 => self.time_passes(),
            15 => self.destroy(),
            _ => self.forgeries(),
        }
    }

    fn connect(&mut self) -> String {
        let i = self.rng.below(OWNERS as u64) as usize;
        let principal = Principal::Sys { uid: 0, machine: owner(i).into_bytes().into() };
        self.next_conn += 1;
        let conn = self.next_conn;
        let caller = Caller { addr: ip(i), principal: &principal, conn: ConnId(conn) };
        let verifier = [self.rng.below(2) as u8; 8];
        let args = ExchangeId4Args {
            eia_clientowner: ClientOwner4 { co_verifier: verifier, co_ownerid: Opaque(owner(i).into_bytes().into()) },
            eia_flags: 0,
            eia_state_protect: StateProtect4A::Sp4None,
            eia_client_impl_id: None,
        };
        let ok = match self.st.exchange_id(&caller, &args, self.now) {
            Ok(ok) => ok,
            Err(e) => return format!("exchange_id {i}: {e}"),
        };
        let cs = CreateSession4Args {
            csa_clientid: ok.clientid.0,
            csa_sequence: ok.sequenceid,
            csa_flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            csa_fore_chan_attrs: attrs(1 + self.rng.below(4) as u32, 64),
            csa_back_chan_attrs: ChannelAttrs4 { ca_maxoperations: 2, ca_maxrequests: 1, ..attrs(1, 0) },
            csa_cb_program: 1,
            csa_sec_parms: vec![CallbackSecParms4::AuthNone].into(),
        };
        match self.st.create_session(&caller, &cs, self.now) {
            Ok(r) => {
                let c = Client {
                    id: ok.clientid,
                    principal,
                    addr: ip(i),
                    session: SessionId(r.csr_sessionid),
                    conn,
                    seqid: 0,
                    cached: None,
                };
                // The handler's CB_NULL got an answer.
                self.st.set_callback_state(ok.clientid, CallbackState::Up);
                // As the Linux client, before any new state (again for a
                // second session of the same client ID).
                let done = self.st.reclaim_complete(ok.clientid, false, self.now);
                self.ensure(matches!(done, Ok(()) | Err(Nfsstat4::CompleteAlready)), format!("{done:?}"));
                // A second session of the same client is used from now on.
                self.clients[i] = Some(c);
                format!("connect {i}: {} {}", ok.clientid, ok.flags)
            }
            Err(e) => format!("create_session {i}: {e}"),
        }
    }

    fn thief(&mut self) -> String {
        let i = self.rng.below(OWNERS as u64) as usize;
        let args = ExchangeId4Args {
            eia_clientowner: ClientOwner4 { co_verifier: [7; 8], co_ownerid: Opaque(owner(i).into_bytes().into()) },
            eia_flags: 0,
            eia_state_protect: StateProtect4A::Sp4None,
            eia_client_impl_id: None,
        };
        let caller = Caller { addr: IpAddr::from([10, 9, 9, 9]), principal: &self.thief, conn: ConnId(9999) };
        let info = self.st.clients(self.now);
        let victim = self.clients[i].as_ref().and_then(|c| info.iter().find(|x| x.clientid == c.id));
        let active_with_state = victim.is_some_and(|v| matches!(v.lease, LeaseState::Active { .. }) && v.sessions > 0);
        let r = self.st.exchange_id(&caller, &args, self.now);
        if active_with_state {
            self.ensure(r == Err(Nfsstat4::ClidInuse), format!("a live client's owner under another principal: {r:?}"));
        }
        if let Ok(ok) = r {
            // The thief has a record of its own, and no state.
            let stolen: Vec<Stateid4> = self.live_of(None).iter().map(|l| l.stateid).collect();
            let got = self.st.test_stateids(ok.clientid, &stolen);
            self.ensure(got.iter().all(|s| *s == Nfsstat4::BadStateid), format!("the thief tests {got:?}"));
        }
        format!("thief {i}: {r:?}")
    }

    fn sequence(&mut self) -> String {
        let Some(i) = self.pick_client() else { return "no client".into() };
        let cachethis = self.rng.below(2) == 0;
        let replay = self.rng.below(4) == 0;
        let c = self.clients[i].as_ref().unwrap();
        let seqid = if replay { c.seqid } else { c.seqid.wrapping_add(1) };
        let args = Sequence4Args {
            sa_sessionid: c.session.0,
            sa_sequenceid: seqid,
            sa_slotid: 0,
            sa_highest_slotid: 0,
            sa_cachethis: cachethis,
        };
        let caller = Caller { addr: c.addr, principal: &c.principal, conn: ConnId(c.conn) };
        let r = self.st.sequence(&caller, &args, CompoundShape { ops: 2, request_bytes: 100 }, self.now);
        let c = self.clients[i].as_mut().unwrap();
        match r {
            Ok(SequenceStart::New(g)) => {
                let fresh = !replay || c.seqid == 0;
                let reply: Vec<u8> = (0..self.rng.below(100)).map(|b| b as u8 ^ seqid as u8).collect();
                self.st.sequence_done(&g, SlotReply { status: Nfsstat4::Ok, ops: 2, reply: &reply }, self.now);
                c.seqid = seqid;
                c.cached = (cachethis && reply.len() <= 64).then_some(reply);
                self.ensure(fresh, "a replay ran as a new request".into());
                format!("sequence {i} new {seqid}")
            }
            Ok(SequenceStart::Replay(Replay::Cached(bytes))) => {
                let same = replay && c.cached.as_deref() == Some(&bytes[..]);
                self.ensure(same, "a replay gets the reply cached for the request".into());
                format!("sequence {i} replayed")
            }
            Ok(SequenceStart::Replay(other)) => {
                let uncached = replay && c.cached.is_none();
                self.ensure(uncached, format!("{other:?} for a request whose reply was cached"));
                format!("sequence {i} replayed uncached")
            }
            Err(e) => {
                if e == Nfsstat4::Badsession {
                    self.clients[i] = None;
                }
                format!("sequence {i}: {e}")
            }
        }
    }

    fn pick_client(&mut self) -> Option<usize> {
        let present: Vec<usize> = (0..OWNERS).filter(|i| self.clients[*i].is_some()).collect();
        self.rng.pick(&present).copied()
    }

    fn open(&mut self) -> String {
        let Some(i) = self.pick_client() else { return "no client".into() };
        let id = self.clients[i].as_ref().unwrap().id;
        let file = self.rng.below(FILES) as u32;
        let access = 1 + self.rng.below(3) as u32;
        let deny = if self.rng.below(3) == 0 { self.rng.below(4) as u32 } else { 0 };
        let oo = format!("oo{}", self.rng.below(2));
        let share = ShareAccess::from_wire(access, deny).unwrap();
        match self.st.open(id, oo.as_bytes(), &file, share, OpenClaim::Null, self.now) {
            Ok(ok) => {
                self.live.insert(ok.stateid.other, Live { client: id, stateid: ok.stateid, kind: Kind::Open, file });
                format!("open {i} {file} {access}/{deny}: {}", ok.stateid.seqid)
            }
            Err(e) => format!("open {i} {file} {access}/{deny}: {e}"),
        }
    }

    fn downgrade(&mut self) -> String {
        let Some(l) = self.rng.pick(&self.live_of(Some(Kind::Open))).copied() else { return "no open".into() };
        let (access, deny) = (1 + self.rng.below(3) as u32, self.rng.below(4) as u32);
        match self.st.open_downgrade(l.client, &l.stateid, &l.file, access, deny) {
            Ok(s) => {
                self.live.get_mut(&s.other).unwrap().stateid = s;
                format!("downgrade {access}/{deny}: ok")
            }
            Err(e) => format!("downgrade {access}/{deny}: {e}"),
        }
    }

    fn close(&mut self) -> String {
        let Some(l) = self.rng.pick(&self.live_of(Some(Kind::Open))).copied() else { return "no open".into() };
        format!("close: {:?}", self.st.close(l.client, &l.stateid, &l.file))
    }

    fn range(&mut self) -> ByteRange {
        let start = self.rng.below(64);
        let len = if self.rng.below(8) == 0 { u64::MAX } else { 1 + self.rng.below(16) };
        ByteRange::from_wire(start, len).unwrap()
    }

    fn lock(&mut self) -> String {
        let kind = if self.rng.below(2) == 0 { LockKind::Read } else { LockKind::Write };
        let range = self.range();
        let new_owner = self.rng.below(2) == 0;
        let (l, lo) = if new_owner {
            let Some(l) = self.rng.pick(&self.live_of(Some(Kind::Open))).copied() else { return "no open".into() };
            (l, format!("lo{}", self.rng.below(2)))
        } else {
            let Some(l) = self.rng.pick(&self.live_of(Some(Kind::Lock))).copied() else { return "no lock".into() };
            (l, String::new())
        };
        for attempt in 0..2 {
            let locker = if new_owner {
                Locker::NewOwner { open_stateid: l.stateid, owner: lo.as_bytes() }
            } else {
                Locker::Existing { lock_stateid: l.stateid }
            };
            let req = LockRequest { file: &l.file, kind, range, reclaim: false, locker };
            let next_holder = self.next_holder + 1;
            let granted = match self.st.lock(l.client, req, self.now) {
                Err(e) => return format!("lock: {e}"),
                Ok(LockPlan::Held(plan)) => {
                    let holder = *plan.holder();
                    if self.kernel.conflicts(holder, l.file, kind, range) {
                        None
                    } else {
                        self.kernel.lock(holder, l.file, kind, range);
                        Some(plan.granted())
                    }
                }
                Ok(LockPlan::New(plan)) => {
                    if self.kernel.conflicts(next_holder, l.file, kind, range) {
                        None
                    } else {
                        self.kernel.lock(next_holder, l.file, kind, range);
                        self.next_holder = next_holder;
                        Some(plan.granted(next_holder))
                    }
                }
            };
            if let Some(s) = granted {
                self.live.insert(s.other, Live { client: l.client, stateid: s, kind: Kind::Lock, file: l.file });
                return format!("lock {kind:?} {range:?}: {}", s.seqid);
            }
            if attempt == 0 && self.st.expire_courtesy_lock_conflicts(&l.file, kind, range, self.now) == 0 {
                return format!("lock {kind:?} {range:?}: denied");
            }
            self.drain();
            if !self.live.contains_key(&l.stateid.other) {
                return "lock: its own client ended".into();
            }
        }
        "lock: denied again".into()
    }

    fn unlock(&mut self) -> String {
        let Some(l) = self.rng.pick(&self.live_of(Some(Kind::Lock))).copied() else { return "no lock".into() };
        let range = self.range();
        match self.st.locku(l.client, &l.stateid, &l.file, range) {
            Ok(plan) => {
                self.kernel.unlock(*plan.holder(), range);
                let s = plan.done();
                self.live.get_mut(&s.other).unwrap().stateid = s;
                format!("locku {range:?}")
            }
            Err(e) => format!("locku: {e}"),
        }
    }

    fn free(&mut self) -> String {
        let all = self.live_of(None);
        let Some(l) = self.rng.pick(&all).copied() else { return "nothing".into() };
        format!("free {:?}: {:?}", l.kind, self.st.free_stateid(l.client, &l.stateid))
    }

    fn delegate(&mut self) -> String {
        if self.rng.below(2) == 0
            && let Some(l) = self.rng.pick(&self.live_of(Some(Kind::Delegation))).copied()
        {
            return format!("delegreturn: {:?}", self.st.delegreturn(l.client, &l.stateid, &l.file));
        }
        let Some(l) = self.rng.pick(&self.live_of(Some(Kind::Open))).copied() else { return "no open".into() };
        let share = ShareAccess::from_wire(1 + self.rng.below(3) as u32, 0).unwrap();
        match self.st.offer_delegation(l.client, &l.file, &share, self.now) {
            DelegationOffer::Granted { stateid, kind } => {
                self.live
                    .insert(stateid.other, Live { client: l.client, stateid, kind: Kind::Delegation, file: l.file });
                format!("delegation {kind:?}")
            }
            DelegationOffer::Declined(why) => format!("no delegation: {why:?}"),
        }
    }

    fn other_access(&mut self) -> String {
        let file = self.rng.below(FILES) as u32;
        let access = if self.rng.below(2) == 0 { ConflictAccess::Read } else { ConflictAccess::Write };
        format!("v3 {access:?} {file}: {:?}", self.st.delegation_conflict(Accessor::Other, &file, access, self.now))
    }

    fn time_passes(&mut self) -> String {
        self.now += Duration::from_secs(1 + self.rng.below(40));
        format!("reap: {}", self.st.reap(self.now))
    }

    fn destroy(&mut self) -> String {
        let Some(i) = self.pick_client() else { return "no client".into() };
        let c = self.clients[i].as_ref().unwrap();
        let (id, sid, principal) = (c.id, c.session, c.principal.clone());
        if self.rng.below(2) == 0 {
            self.st.connection_closed(ConnId(c.conn));
            return "connection closed".into();
        }
        let r = self.st.destroy_session(&sid, None, ConnId(c.conn));
        if r.is_ok() {
            self.clients[i] = None;
        }
        let d = self.st.destroy_clientid(id, &principal, self.now);
        format!("destroy {i}: {r:?} {d:?}")
    }

    fn forgeries(&mut self) -> String {
        let all = self.live_of(None);
        let Some(l) = self.rng.pick(&all).copied() else { return "nothing".into() };
        // A counter far past any issued, an epoch not this one, a seqid
        // not issued yet.
        let mut forged = l.stateid;
        forged.other[4 + self.rng.below(4) as usize] ^= 1 << self.rng.below(8);
        let mut other_epoch = l.stateid;
        other_epoch.other[self.rng.below(4) as usize] ^= 1 << self.rng.below(8);
        let epoch = u32::from_be_bytes(other_epoch.other[..4].try_into().unwrap());
        let mut ahead = l.stateid;
        ahead.seqid = ahead.seqid.wrapping_add(1).max(1);
        let got = self.st.test_stateids(l.client, &[forged, other_epoch, ahead]);
        let expect_epoch = if epoch != 0 && epoch < 3 { Nfsstat4::StaleStateid } else { Nfsstat4::BadStateid };
        let expected = [Nfsstat4::BadStateid, expect_epoch, Nfsstat4::BadStateid];
        self.ensure(got == expected, format!("forged, other epoch, ahead of {l:?}: {got:?}"));
        "forgeries".into()
    }

    fn ensure(&self, ok: bool, what: String) {
        if !ok {
            panic!(
                "seed {} step {}: {what}\n(replay: KEEL_SIM_SEED={} cargo test -p keel-nfs4-state --test random_ops)",
                self.seed, self.step, self.seed
            );
        }
    }

    /// Applies what the state released to the model and the kernel.
    fn drain(&mut self) {
        for r in self.st.take_released() {
            match r {
                Released::Client { clientid, why, .. } => {
                    *self.seen.entry(format!("ended {why:?}")).or_default() += 1;
                    self.live.retain(|_, l| l.client != clientid);
                    if let Some(i) = self.client_index(clientid) {
                        self.clients[i] = None;
                    }
                }
                Released::LockHolder { stateid, holder, .. } => {
                    self.live.remove(&stateid.other);
                    self.kernel.holders.remove(&holder);
                }
                Released::Open { stateid, .. } => {
                    self.live.remove(&stateid.other);
                }
                Released::Delegation { stateid, .. } => {
                    if self
                        .st
                        .test_stateids(self.live.get(&stateid.other).map_or(ClientId(0), |l| l.client), &[stateid])
                        == [Nfsstat4::DelegRevoked]
                    {
                        *self.seen.entry("revoked".into()).or_default() += 1;
                    }
                    self.live.remove(&stateid.other);
                }
            }
        }
        self.st.take_recalls();
    }

    fn check(&mut self, seed: u64, step: usize, what: &str) {
        self.drain();
        let fail = |msg: String| -> ! {
            panic!(
                "seed {seed} step {step} ({what}): {msg}\n(replay: KEEL_SIM_SEED={seed} cargo test -p keel-nfs4-state --test random_ops)"
            )
        };
        if let Err(e) = self.st.check_invariants() {
            fail(e);
        }
        for l in self.live.values() {
            let zero = Stateid4 { seqid: 0, ..l.stateid };
            let got = self.st.test_stateids(l.client, &[l.stateid, zero]);
            if got != [Nfsstat4::Ok, Nfsstat4::Ok] {
                fail(format!("{l:?} tests {got:?}"));
            }
        }
        // Every client the model has is one the state has.
        let known: Vec<ClientId> = self.st.clients(self.now).iter().map(|c| c.clientid).collect();
        for c in self.clients.iter().flatten() {
            if !known.contains(&c.id) {
                fail(format!("client {} vanished without a release", c.id));
            }
        }
    }
}

fn run(seed: u64) -> (Vec<String>, HashMap<String, usize>) {
    let mut w = World::new(seed);
    let mut log = Vec::with_capacity(STEPS);
    for step in 0..STEPS {
        w.step = step;
        let what = w.step();
        w.check(seed, step, &what);
        for mark in ["RESOURCE", "denied", "DELAY", "SHARE_DENIED", "ClidInuse", "replayed", "LOCKS_HELD", "LocksHeld"]
        {
            if what.contains(mark) {
                *w.seen.entry(mark.into()).or_default() += 1;
            }
        }
        log.push(what);
    }
    (log, w.seen)
}

#[test]
fn random_operations_keep_the_invariants() {
    let seeds: Vec<u64> = match std::env::var("KEEL_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("KEEL_SIM_SEED is a number")],
        Err(_) => {
            let n = std::env::var("KEEL_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
            (0..n).collect()
        }
    };
    let one = seeds.len() == 1;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for seed in seeds {
        let (log, marks) = run(seed);
        for line in log {
            let kind = line.split([':', ' ']).next().unwrap_or("").to_string();
            *seen.entry(kind).or_default() += 1;
        }
        for (k, n) in marks {
            *seen.entry(k).or_default() += n;
        }
    }
    eprintln!("{seen:?}");
    if one {
        return;
    }
    // The runs reach every kind of step and every path that matters.
    let paths = [
        "open",
        "lock",
        "locku",
        "close",
        "delegation",
        "downgrade",
        "reap",
        "sequence",
        "RESOURCE",
        "denied",
        "DELAY",
        "SHARE_DENIED",
        "ClidInuse",
        "replayed",
        "LocksHeld",
        "revoked",
        "ended Conflict",
        "ended LeaseExpired",
        "ended Replaced",
        "ended Destroyed",
    ];
    for path in paths {
        assert!(seen.get(path).copied().unwrap_or(0) > 0, "no {path} in the runs: {seen:?}");
    }
}

#[test]
fn the_same_seed_replays_the_same_run() {
    assert_eq!(run(17).0, run(17).0);
}

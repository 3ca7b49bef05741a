//! The lock manager on the simulated store: mutual exclusion between
//! owners, blocked requests granted by callback, TEST's holder, limits per
//! client address whatever names it gives, releases by FREE_ALL and
//! SM_NOTIFY, the grace period after a restart, and malformed calls
//! through the dispatcher.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use keel_exports::{Access, ClientOptions, ClientRule, ExportTable, HostMatch, Squash};
use keel_nlm::{Courier, Ctx, LockConfig, LockManager, NlmProgram, NsmProgram, Outbound};
use keel_nlm_proto::nlm4::{
    Nlm4Cancargs, Nlm4Lock, Nlm4Lockargs, Nlm4Notify, Nlm4Stats, Nlm4Testargs, Nlm4Testrply, Nlm4Unlockargs,
};
use keel_nlm_proto::nsm::StatChge;
use keel_rpc::msg::{AcceptStat, CallHeader, OpaqueAuth, ReplyStat, decode_reply_header};
use keel_rpc::{Credential, Dispatcher, ReplyCache, RpcProgram};
use keel_store::sim::SimStore;
use keel_store::{CreateMode, Cred, Object, SetAttrs, Store};
use keel_xdr::{Decoder, Encode, Encoder, Opaque};

#[derive(Default)]
struct Recorder(Arc<Mutex<Vec<Outbound>>>);

impl Courier for Recorder {
    fn send(&self, call: Outbound) -> bool {
        self.0.lock().unwrap().push(call);
        true
    }
}

struct Setup {
    lm: Arc<LockManager<SimStore>>,
    sent: Arc<Mutex<Vec<Outbound>>>,
    fh: Bytes,
    dir: PathBuf,
}

fn nsm_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-nlm-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn setup_in(dir: PathBuf, store: Arc<SimStore>, fh: Bytes, edit: impl FnOnce(&mut LockConfig)) -> Setup {
    let opts = ClientOptions { access: Access::ReadWrite, squash: Squash::None, secure: false, ..Default::default() };
    let svc = Arc::new(ExportTable::new(store, vec![(1, vec![ClientRule { host: HostMatch::Any, options: opts }])]));
    let mut config = LockConfig::new(dir.clone());
    edit(&mut config);
    let lm = Arc::new(LockManager::new(svc, config).unwrap());
    let rec = Recorder::default();
    let sent = rec.0.clone();
    lm.set_courier(Box::new(rec));
    Setup { lm, sent, fh, dir }
}

fn setup(tag: &str, edit: impl FnOnce(&mut LockConfig)) -> (Setup, Arc<SimStore>) {
    let store = Arc::new(SimStore::new(7));
    let root = store.lookup_path(1, b"/").unwrap();
    let who = store.act_as(&Cred::ROOT).unwrap();
    let file = store.create(&who, &root, b"f", CreateMode::Unchecked, &SetAttrs::default(), false).unwrap();
    let fh = file.object.handle().clone();
    (setup_in(nsm_dir(tag), store.clone(), fh, edit), store)
}

const A: &str = "10.0.0.1:700";
const B: &str = "10.0.0.2:700";
const LOCAL: &str = "10.0.0.9:2049";

fn root() -> Credential {
    Credential::sys(Bytes::new(), 0, 0, &[])
}

fn ctx<'a>(peer: &str, cred: &'a Credential) -> Ctx<'a> {
    Ctx { peer: peer.parse().unwrap(), local: LOCAL.parse().unwrap(), cred }
}

fn lock(fh: &Bytes, host: &str, svid: i32, offset: u64, len: u64) -> Nlm4Lock {
    Nlm4Lock {
        caller_name: Opaque(Bytes::from(host.to_string())),
        fh: Opaque(fh.clone()),
        oh: Opaque(Bytes::from(format!("{host}-{svid}"))),
        svid,
        l_offset: offset,
        l_len: len,
    }
}

fn lockargs(l: Nlm4Lock, block: bool, reclaim: bool) -> Nlm4Lockargs {
    Nlm4Lockargs { cookie: "c".into(), block, exclusive: true, alock: l, reclaim, state: 1 }
}

#[test]
fn owners_exclude_each_other_and_a_blocked_lock_is_granted_by_callback() {
    let (s, _) = setup("exclusion", |_| {});
    let auth = root();
    let (a, b) = (ctx(A, &auth), ctx(B, &auth));
    assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 1, 0, 100), false, false), true), Nlm4Stats::Granted);
    assert_eq!(s.lm.lock(&b, &lockargs(lock(&s.fh, "b", 2, 50, 10), false, false), true), Nlm4Stats::Denied);
    // Outside the range, or shared against shared, is fine.
    assert_eq!(s.lm.lock(&b, &lockargs(lock(&s.fh, "b", 2, 100, 10), false, false), true), Nlm4Stats::Granted);
    let test = Nlm4Testargs { cookie: "t".into(), exclusive: false, alock: lock(&s.fh, "b", 2, 10, 1) };
    match s.lm.test(&b, &test) {
        Nlm4Testrply::Denied(h) => assert_eq!((h.svid, h.exclusive, h.l_offset, h.l_len), (1, true, 0, 100)),
        other => panic!("TEST: {other:?}"),
    }
    // B blocks; A's unlock grants it, with a callback to B's address.
    let blocked = lockargs(lock(&s.fh, "b", 3, 0, 0), true, false);
    assert_eq!(s.lm.lock(&b, &blocked, true), Nlm4Stats::Blocked);
    assert_eq!(s.lm.lock(&b, &blocked, true), Nlm4Stats::Blocked, "a poll does not queue twice");
    assert_eq!(s.lm.stats().waiters, 1);
    // B's own lock at 100 is another owner (svid 2): A unlocking is not enough.
    let unlock = Nlm4Unlockargs { cookie: "u".into(), alock: lock(&s.fh, "a", 1, 0, 0) };
    assert_eq!(s.lm.unlock(&a, &unlock), Nlm4Stats::Granted);
    assert!(s.sent.lock().unwrap().is_empty());
    let unlock_b = Nlm4Unlockargs { cookie: "u".into(), alock: lock(&s.fh, "b", 2, 0, 0) };
    assert_eq!(s.lm.unlock(&b, &unlock_b), Nlm4Stats::Granted);
    let sent = s.sent.lock().unwrap().clone();
    match sent.as_slice() {
        [Outbound::Granted { to, from, args, .. }] => {
            assert_eq!(to.to_string(), "10.0.0.2");
            assert_eq!(from.to_string(), "10.0.0.9");
            assert_eq!((args.alock.svid, args.alock.l_len), (3, 0));
        }
        other => panic!("callbacks: {other:?}"),
    }
    // B's poll after the grant is answered GRANTED; A is now refused.
    assert_eq!(s.lm.lock(&b, &blocked, true), Nlm4Stats::Granted);
    assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 1, 5, 1), false, false), true), Nlm4Stats::Denied);
    let st = s.lm.stats();
    assert_eq!((st.waiters, st.locks, st.lock_files), (0, 1, 1), "{st:?}");
    // A refused GRANTED releases the lock.
    s.lm.granted_refused(&s.fh, &keel_owner(B, "b", 3), keel_store::LockRange::new(0, 0));
    assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 1, 5, 1), false, false), true), Nlm4Stats::Granted);
    std::fs::remove_dir_all(&s.dir).unwrap();
}

fn keel_owner(peer: &str, host: &str, svid: i32) -> keel_nlm::OwnerKey {
    let addr: SocketAddr = peer.parse().unwrap();
    keel_nlm::OwnerKey {
        host: keel_nlm::nsm_store::HostKey { addr: addr.ip(), name: Bytes::from(host.to_string()) },
        svid,
        oh: Bytes::from(format!("{host}-{svid}")),
    }
}

#[test]
fn cancel_forgets_a_blocked_request() {
    let (s, _) = setup("cancel", |_| {});
    let auth = root();
    let (a, b) = (ctx(A, &auth), ctx(B, &auth));
    assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 1, 0, 0), false, false), true), Nlm4Stats::Granted);
    assert_eq!(s.lm.lock(&b, &lockargs(lock(&s.fh, "b", 1, 0, 0), true, false), true), Nlm4Stats::Blocked);
    let cancel = Nlm4Cancargs { cookie: "x".into(), block: true, exclusive: true, alock: lock(&s.fh, "b", 1, 0, 0) };
    assert_eq!(s.lm.cancel(&b, &cancel), Nlm4Stats::Granted);
    assert_eq!(s.lm.cancel(&b, &cancel), Nlm4Stats::Denied, "nothing left to cancel");
    let unlock = Nlm4Unlockargs { cookie: "u".into(), alock: lock(&s.fh, "a", 1, 0, 0) };
    assert_eq!(s.lm.unlock(&a, &unlock), Nlm4Stats::Granted);
    assert!(s.sent.lock().unwrap().is_empty(), "no grant for a cancelled request");
    let st = s.lm.stats();
    assert_eq!((st.hosts, st.addresses, st.files, st.lock_files, st.locks), (0, 0, 0, 0, 0), "{st:?}");
    std::fs::remove_dir_all(&s.dir).unwrap();
}

#[test]
fn lock_state_is_bounded_per_client_and_in_hosts() {
    let (s, _) = setup("bounds", |c| {
        c.locks_per_client_max = 3;
        c.hosts_max = 1;
    });
    let auth = root();
    let a = ctx(A, &auth);
    for i in 0..3 {
        assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 1, i * 10, 1), false, false), true), Nlm4Stats::Granted);
    }
    let fourth = lockargs(lock(&s.fh, "a", 1, 100, 1), true, false);
    assert_eq!(s.lm.lock(&a, &fourth, true), Nlm4Stats::DeniedNolocks);
    let b = ctx(B, &auth);
    assert_eq!(s.lm.lock(&b, &lockargs(lock(&s.fh, "b", 1, 500, 1), false, false), true), Nlm4Stats::DeniedNolocks);
    // A client cannot unlock what another host's owner of the same name holds.
    let forged = Nlm4Unlockargs { cookie: "u".into(), alock: lock(&s.fh, "a", 1, 0, 0) };
    assert_eq!(s.lm.unlock(&b, &forged), Nlm4Stats::Granted);
    assert_eq!(s.lm.stats().locks, 3, "a forged owner from another address released nothing");
    std::fs::remove_dir_all(&s.dir).unwrap();
}

#[test]
fn free_all_and_reboot_notifications_release_only_that_client() {
    let (s, _) = setup("free", |_| {});
    let auth = root();
    let (a, b) = (ctx(A, &auth), ctx(B, &auth));
    assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 1, 0, 10), false, false), true), Nlm4Stats::Granted);
    assert_eq!(s.lm.lock(&b, &lockargs(lock(&s.fh, "b", 1, 10, 10), false, false), true), Nlm4Stats::Granted);
    // A notification about "a" from B's address is not believed.
    let notify = StatChge { mon_name: "a".into(), state: 3 };
    s.lm.host_rebooted(B.parse().unwrap(), &notify);
    assert_eq!(s.lm.stats().locks, 2);
    s.lm.host_rebooted(A.parse().unwrap(), &notify);
    assert_eq!(s.lm.stats().locks, 1);
    assert_eq!(s.lm.lock(&b, &lockargs(lock(&s.fh, "b", 2, 0, 10), false, false), true), Nlm4Stats::Granted);
    s.lm.free_all(B.parse().unwrap(), &Nlm4Notify { name: "b".into(), state: 5 });
    let st = s.lm.stats();
    assert_eq!((st.hosts, st.locks, st.lock_files), (0, 0, 0), "{st:?}");
    std::fs::remove_dir_all(&s.dir).unwrap();
}

#[test]
fn after_a_restart_only_reclaims_are_granted_until_the_clients_are_done() {
    let (s, store) = setup("grace", |_| {});
    let auth = root();
    let (a, b) = (ctx(A, &auth), ctx(B, &auth));
    assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 1, 0, 10), false, false), true), Nlm4Stats::Granted);
    let (dir, fh) = (s.dir.clone(), s.fh.clone());
    drop(s); // the server dies: its descriptions, and so its locks, go
    let s = setup_in(dir, store, fh, |_| {});
    assert!(s.lm.stats().in_grace);
    s.lm.tick();
    let notified: Vec<_> = s.sent.lock().unwrap().clone();
    assert!(
        matches!(notified.as_slice(), [Outbound::Notify { host, from, state: 3 }] if host.addr.to_string() == "10.0.0.1" && from.to_string() == "10.0.0.9"),
        "{notified:?}"
    );
    // B may neither lock nor test; A reclaims.
    let take = lockargs(lock(&s.fh, "b", 1, 0, 10), false, false);
    assert_eq!(s.lm.lock(&b, &take, true), Nlm4Stats::DeniedGracePeriod);
    assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 1, 0, 10), false, true), true), Nlm4Stats::Granted);
    assert!(s.lm.stats().in_grace, "A may have more to reclaim");
    // A's first ordinary call says it is done: the grace period ends early.
    let test = Nlm4Testargs { cookie: "t".into(), exclusive: true, alock: lock(&s.fh, "a", 1, 100, 1) };
    assert!(matches!(s.lm.test(&a, &test), Nlm4Testrply::Other(Nlm4Stats::Granted)));
    assert!(!s.lm.stats().in_grace);
    assert_eq!(s.lm.lock(&b, &take, true), Nlm4Stats::Denied, "A's reclaimed lock holds");
    std::fs::remove_dir_all(&s.dir).unwrap();
}

/// A server restarted (its state on disk kept) after client A took a
/// lock; A's host, whose reclaim the new server waits for.
fn restarted_after_a_lock(tag: &str) -> (Setup, keel_nlm::nsm_store::HostKey) {
    let (s, store) = setup(tag, |_| {});
    let auth = root();
    let a = ctx(A, &auth);
    assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 1, 0, 10), false, false), true), Nlm4Stats::Granted);
    let (dir, fh) = (s.dir.clone(), s.fh.clone());
    drop(s);
    let s = setup_in(dir, store, fh, |_| {});
    let host = keel_owner(A, "a", 1).host;
    (s, host)
}

#[test]
fn a_notified_client_that_goes_quiet_ends_the_grace_period() {
    let (s, host) = restarted_after_a_lock("quiet");
    s.lm.notified(&host, true);
    s.lm.tick();
    assert!(s.lm.stats().in_grace);
    std::thread::sleep(keel_nlm::RECLAIM_QUIET + std::time::Duration::from_millis(100));
    s.lm.tick();
    assert!(!s.lm.stats().in_grace);
    std::fs::remove_dir_all(&s.dir).unwrap();
}

#[test]
fn an_sm_notify_that_could_not_be_sent_is_sent_at_the_next_tick_and_not_counted() {
    let (s, host) = restarted_after_a_lock("unsent");
    let notifies = || s.sent.lock().unwrap().iter().filter(|o| matches!(o, Outbound::Notify { .. })).count();
    // Under [ha] the floating address comes up after the server: far
    // more ticks than there are rounds go by without it.
    for round in 1..=10 {
        s.lm.tick();
        assert_eq!(notifies(), round, "sent again at once, round {round}");
        s.lm.notify_unsent(&host);
    }
    // Unanswered tries still count, and only they end the client's wait.
    s.lm.tick();
    s.lm.notified(&host, false);
    assert!(s.lm.stats().in_grace, "one unanswered try does not make the client gone");
    std::fs::remove_dir_all(&s.dir).unwrap();
}

fn call(prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Bytes {
    let mut enc = Encoder::new();
    CallHeader { xid: 9, rpc_version: 2, prog, vers, proc_, cred: OpaqueAuth::default(), verf: OpaqueAuth::default() }
        .encode(&mut enc);
    enc.raw(args);
    enc.into_bytes()
}

#[test]
fn malformed_calls_get_errors() {
    let (s, _) = setup("malformed", |_| {});
    let programs: Vec<Arc<dyn RpcProgram>> =
        vec![Arc::new(NlmProgram::new(s.lm.clone())), Arc::new(NsmProgram::new(s.lm.clone()))];
    let d = Dispatcher::new(programs, ReplyCache::new(16, 1 << 20)).unwrap();
    let peer: SocketAddr = A.parse().unwrap();
    let local: SocketAddr = LOCAL.parse().unwrap();
    let stat = |record: Bytes| {
        let reply = d.handle(record, peer, local).expect("a reply");
        let mut dec = Decoder::new(Bytes::from(
            reply.iter().map(|s| s.as_bytes().expect("no spliced payload").clone()).collect::<Vec<_>>().concat(),
        ));
        decode_reply_header(&mut dec).unwrap().1
    };
    let garbage = ReplyStat::Accepted(AcceptStat::GarbageArgs);
    let unavail = ReplyStat::Accepted(AcceptStat::ProcUnavail);
    // Truncated, oversized netobj, bad enum, trailing nothing at all.
    let mut good = Encoder::new();
    lockargs(lock(&s.fh, "a", 1, 0, 1), false, false).encode(&mut good);
    let good = good.into_bytes();
    for cut in [0, 4, 11, good.len() - 1] {
        assert_eq!(stat(call(100021, 4, 2, &good[..cut])), garbage, "LOCK cut at {cut}");
    }
    let mut huge = Encoder::new();
    huge.opaque(&[0u8; 1025]);
    assert_eq!(stat(call(100021, 4, 4, &huge.into_bytes())), garbage);
    assert_eq!(stat(call(100024, 1, 6, &[0, 0, 0, 200])), garbage);
    for proc_ in [5, 10, 15, 16, 17, 19, 24, 1000] {
        assert_eq!(stat(call(100021, 4, proc_, &[])), unavail, "NLM procedure {proc_}");
    }
    for proc_ in [2, 3, 4, 5, 7] {
        assert_eq!(stat(call(100024, 1, proc_, &[])), unavail, "NSM procedure {proc_}");
    }
    assert_eq!(stat(call(100021, 3, 0, &[])), ReplyStat::Accepted(AcceptStat::ProgMismatch { low: 4, high: 4 }));
    // A forged handle is a stale one, not a panic.
    let mut forged = Encoder::new();
    lockargs(lock(&Bytes::from_static(&[1; 22]), "a", 1, 0, 1), false, false).encode(&mut forged);
    let reply = d.handle(call(100021, 4, 2, &forged.into_bytes()), peer, local).expect("a reply");
    let mut dec = Decoder::new(Bytes::from(
        reply.iter().map(|s| s.as_bytes().expect("no spliced payload").clone()).collect::<Vec<_>>().concat(),
    ));
    assert_eq!(decode_reply_header(&mut dec).unwrap().1, ReplyStat::Accepted(AcceptStat::Success));
    dec.opaque(1024).unwrap();
    assert_eq!(dec.u32().unwrap(), Nlm4Stats::StaleFh as u32);
    // A _MSG call answers nothing; its result goes out as a call.
    assert!(d.handle(call(100021, 4, 7, &good), peer, local).is_none());
    assert!(matches!(s.sent.lock().unwrap().last(), Some(Outbound::Result { proc_: 12, .. })));
    std::fs::remove_dir_all(&s.dir).unwrap();
}

#[test]
fn share_reservations_exclude_by_mode_and_access() {
    use keel_nlm_proto::nlm4::{Fsh4Access, Fsh4Mode, Nlm4Share, Nlm4Shareargs};
    let (s, _) = setup("share", |_| {});
    let auth = root();
    let (a, b) = (ctx(A, &auth), ctx(B, &auth));
    let share = |host: &str, mode, access| Nlm4Shareargs {
        cookie: "s".into(),
        share: Nlm4Share {
            caller_name: Opaque(Bytes::from(host.to_string())),
            fh: Opaque(s.fh.clone()),
            oh: "o".into(),
            mode,
            access,
        },
        reclaim: false,
    };
    assert_eq!(s.lm.share(&a, &share("a", Fsh4Mode::DenyWrite, Fsh4Access::Read), true), Nlm4Stats::Granted);
    assert_eq!(s.lm.share(&b, &share("b", Fsh4Mode::DenyNone, Fsh4Access::Write), true), Nlm4Stats::Denied);
    assert_eq!(s.lm.share(&b, &share("b", Fsh4Mode::DenyNone, Fsh4Access::Read), true), Nlm4Stats::Granted);
    assert_eq!(s.lm.share(&a, &share("a", Fsh4Mode::DenyWrite, Fsh4Access::Read), false), Nlm4Stats::Granted);
    assert_eq!(s.lm.share(&b, &share("b", Fsh4Mode::DenyNone, Fsh4Access::Write), true), Nlm4Stats::Granted);
    s.lm.free_all(B.parse().unwrap(), &Nlm4Notify { name: "b".into(), state: 1 });
    assert_eq!(s.lm.stats().hosts, 0);
    std::fs::remove_dir_all(&s.dir).unwrap();
}

/// A LOCK from `peer` as the client named `name`, of a byte of its own.
fn lock_as(s: &Setup, peer: &str, name: &str, svid: i32) -> Nlm4Stats {
    let auth = root();
    let offset = 1000 * u64::from(svid.unsigned_abs());
    s.lm.lock(&ctx(peer, &auth), &lockargs(lock(&s.fh, name, svid, offset, 1), false, false), true)
}

#[test]
fn one_address_giving_many_names_cannot_take_every_lock_file() {
    let (s, _) = setup("lock-files", |c| c.lock_files_max = 8);
    // Each caller name is a client host of its own, and each of its
    // owners needs a description of the file: A asks until refused.
    let granted = (0..64).take_while(|i| lock_as(&s, A, &format!("n{}", i % 4), i + 1) == Nlm4Stats::Granted).count();
    assert_eq!(granted, 2, "one address holds at most a quarter of lock_files_max");
    assert_eq!(lock_as(&s, A, "n0", 100), Nlm4Stats::DeniedNolocks);
    // Another address is served.
    assert_eq!(lock_as(&s, B, "b", 500), Nlm4Stats::Granted);
    let st = s.lm.stats();
    assert_eq!((st.lock_files, st.addresses, st.hosts), (3, 2, 3), "{st:?}");
    // Once A lets go, it gets its share back.
    s.lm.free_all(A.parse().unwrap(), &Nlm4Notify { name: "n0".into(), state: 3 });
    assert_eq!(lock_as(&s, A, "n9", 200), Nlm4Stats::Granted);
    std::fs::remove_dir_all(&s.dir).unwrap();
}

#[test]
fn the_per_client_limit_counts_every_name_an_address_gives() {
    use keel_nlm_proto::nlm4::{Fsh4Access, Fsh4Mode, Nlm4Share, Nlm4Shareargs};
    let (s, _) = setup("per-address", |c| c.locks_per_client_max = 4);
    let auth = root();
    for (i, name) in ["x", "y", "z"].iter().enumerate() {
        assert_eq!(lock_as(&s, A, name, i as i32 + 1), Nlm4Stats::Granted);
    }
    // The same address over IPv6 (v4-mapped) is the same client.
    assert_eq!(lock_as(&s, "[::ffff:10.0.0.1]:800", "w", 4), Nlm4Stats::Granted);
    assert_eq!(lock_as(&s, A, "v", 5), Nlm4Stats::DeniedNolocks);
    let share = Nlm4Shareargs {
        cookie: "s".into(),
        share: Nlm4Share {
            caller_name: "u".into(),
            fh: Opaque(s.fh.clone()),
            oh: "o".into(),
            mode: Fsh4Mode::DenyNone,
            access: Fsh4Access::Read,
        },
        reclaim: false,
    };
    assert_eq!(s.lm.share(&ctx(A, &auth), &share, true), Nlm4Stats::DeniedNolocks);
    // Unlocking the middle of a lock would make two of it: refused too.
    let middle = Nlm4Unlockargs { cookie: "u".into(), alock: lock(&s.fh, "x", 1, 1000, 1) };
    let whole = lockargs(lock(&s.fh, "x", 1, 1000, 10), false, false);
    assert_eq!(s.lm.lock(&ctx(A, &auth), &whole, true), Nlm4Stats::Granted, "a lock replacing one is no more");
    let middle_of_whole = Nlm4Unlockargs { cookie: "u".into(), alock: lock(&s.fh, "x", 1, 1004, 1) };
    assert_eq!(s.lm.unlock(&ctx(A, &auth), &middle_of_whole), Nlm4Stats::DeniedNolocks);
    assert_eq!(s.lm.stats().locks, 4);
    // Its end is fine, and so is another address.
    assert_eq!(s.lm.unlock(&ctx(A, &auth), &middle), Nlm4Stats::Granted);
    assert_eq!(lock_as(&s, B, "x", 1), Nlm4Stats::Granted);
    std::fs::remove_dir_all(&s.dir).unwrap();
}

#[test]
fn idle_clients_stay_on_disk_only_up_to_hosts_max() {
    let (s, _) = setup("idle-hosts", |c| c.hosts_max = 4);
    let auth = root();
    // One host per address at a time (a quarter of four).
    assert_eq!(lock_as(&s, A, "n0", 1), Nlm4Stats::Granted);
    assert_eq!(lock_as(&s, A, "n1", 2), Nlm4Stats::DeniedNolocks);
    assert_eq!(lock_as(&s, B, "b", 500), Nlm4Stats::Granted);
    // A host that holds nothing stays recorded, but ever new names do not
    // pile up on disk.
    let a = ctx(A, &auth);
    for i in 0..12 {
        let name = format!("n{i}");
        assert_eq!(lock_as(&s, A, &name, i + 1), Nlm4Stats::Granted, "{name}");
        let unlock = Nlm4Unlockargs { cookie: "u".into(), alock: lock(&s.fh, &name, i + 1, 0, 0) };
        assert_eq!(s.lm.unlock(&a, &unlock), Nlm4Stats::Granted);
        let st = s.lm.stats();
        assert!(st.monitored <= 4, "{name}: {st:?}");
    }
    assert_eq!(s.lm.stats().monitored, 4, "idle hosts are kept while there is room");
    // On disk too (the NSM thread forgets an idle host before it records
    // the next), and B, which holds a lock, is among them.
    let dir = s.dir.clone();
    drop(s);
    let (_, previous) = keel_nlm::nsm_store::NsmStore::open(&dir).unwrap();
    assert_eq!(previous.len(), 4, "{previous:?}");
    assert!(previous.iter().any(|m| m.host.name == "b"), "{previous:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

thread_local! {
    static ANNOUNCED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn count_announcement() {
    ANNOUNCED.with(|n| n.set(n.get() + 1));
}

#[test]
fn a_first_lock_announces_that_it_waits_for_the_disk() {
    let (s, _) = setup("announce", |_| {});
    keel_store::blocking::set_hook(Some(count_announcement));
    assert_eq!(lock_as(&s, A, "a", 1), Nlm4Stats::Granted);
    assert_eq!(ANNOUNCED.with(|n| n.get()), 1, "the NSM record is a durable write");
    assert_eq!(lock_as(&s, A, "a", 2), Nlm4Stats::Granted);
    assert_eq!(ANNOUNCED.with(|n| n.get()), 1, "a client already recorded waits for nothing");
    keel_store::blocking::set_hook(None);
    std::fs::remove_dir_all(&s.dir).unwrap();
}

#[test]
fn a_waiter_whose_grant_would_pass_the_limit_waits_on_and_its_poll_is_refused() {
    let (s, _) = setup("split-grant", |c| c.locks_per_client_max = 3);
    let auth = root();
    let (a, b) = (ctx(A, &auth), ctx(B, &auth));
    let shared = |l| Nlm4Lockargs { exclusive: false, ..lockargs(l, false, false) };
    assert_eq!(s.lm.lock(&a, &shared(lock(&s.fh, "a", 1, 0, 100)), true), Nlm4Stats::Granted);
    assert_eq!(s.lm.lock(&b, &shared(lock(&s.fh, "b", 1, 10, 10)), true), Nlm4Stats::Granted);
    // A's owner waits to make the middle of its range exclusive (three
    // ranges once granted: room for it now), then A takes another lock.
    let middle = lockargs(lock(&s.fh, "a", 1, 10, 10), true, false);
    assert_eq!(s.lm.lock(&a, &middle, true), Nlm4Stats::Blocked);
    assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 2, 200, 1), false, false), true), Nlm4Stats::Granted);
    // B lets go: the grant would make four, past A's limit.
    let unlock = Nlm4Unlockargs { cookie: "u".into(), alock: lock(&s.fh, "b", 1, 0, 0) };
    assert_eq!(s.lm.unlock(&b, &unlock), Nlm4Stats::Granted);
    assert!(s.sent.lock().unwrap().is_empty(), "no grant past the limit");
    let st = s.lm.stats();
    assert_eq!((st.locks, st.waiters), (2, 1), "{st:?}");
    // The client's poll is told, and the waiter goes.
    assert_eq!(s.lm.lock(&a, &middle, true), Nlm4Stats::DeniedNolocks);
    let st = s.lm.stats();
    assert_eq!((st.locks, st.waiters, st.hosts, st.lock_files), (2, 0, 1, 2), "{st:?}");
    // Making the whole range exclusive needs no more: granted.
    assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 1, 0, 100), false, false), true), Nlm4Stats::Granted);
    std::fs::remove_dir_all(&s.dir).unwrap();
}

/// The lock manager in a grace period shared with NFSv4.1: started from
/// the NSM state in `dir` and `v4` (the NFSv4.1 clients of the last
/// start), with `ceiling`.
fn setup_shared(
    dir: PathBuf,
    store: Arc<SimStore>,
    fh: Bytes,
    v4: &[&str],
    ceiling: std::time::Duration,
) -> (Setup, keel_nfs4_state::SharedGrace) {
    use keel_nfs4_state::{Grace, Principal, SharedGrace};
    let opts = ClientOptions { access: Access::ReadWrite, squash: Squash::None, secure: false, ..Default::default() };
    let svc = Arc::new(ExportTable::new(store, vec![(1, vec![ClientRule { host: HostMatch::Any, options: opts }])]));
    let (nsm, previous) = keel_nlm::nsm_store::NsmStore::open(&dir).unwrap();
    let v4 = v4.iter().map(|owner| {
        let principal = Principal::Sys { uid: 0, machine: b"m".as_slice().into() };
        keel_nfs4_state::ClientRecord { owner: owner.as_bytes().into(), principal, epoch: 1 }
            .previous_client(std::time::Duration::from_secs(90))
    });
    let nlm = previous.iter().map(keel_nlm::previous_client);
    let grace = SharedGrace::new(Grace::start(nlm.chain(v4), std::time::Instant::now(), ceiling));
    let lm = LockManager::with_grace(svc, LockConfig::new(dir.clone()), nsm, previous, grace.clone()).unwrap();
    let rec = Recorder::default();
    let sent = rec.0.clone();
    lm.set_courier(Box::new(rec));
    (Setup { lm: Arc::new(lm), sent, fh, dir }, grace)
}

fn v4_owner(name: &str) -> keel_nfs4_state::Reclaimer {
    keel_nfs4_state::Reclaimer::Nfs4(name.as_bytes().into())
}

/// One grace period for NLM and NFSv4.1: a grace period held on only by
/// an NFSv4.1 client's record refuses an NLM client's new lock
/// (DENIED_GRACE_PERIOD) and accepts reclaims, and ends once that client
/// sends RECLAIM_COMPLETE.
#[test]
fn a_grace_period_held_by_an_nfs4_client_alone_refuses_new_nlm_locks() {
    let store = Arc::new(SimStore::new(7));
    let top = store.lookup_path(1, b"/").unwrap();
    let who = store.act_as(&Cred::ROOT).unwrap();
    let file = store.create(&who, &top, b"f", CreateMode::Unchecked, &SetAttrs::default(), false).unwrap();
    let fh = file.object.handle().clone();
    let long = std::time::Duration::from_secs(300);
    let (s, grace) = setup_shared(nsm_dir("v4-only"), store, fh, &["v4 client"], long);
    let auth = root();
    let b = ctx(B, &auth);
    assert!(s.lm.stats().in_grace);
    let take = lockargs(lock(&s.fh, "b", 1, 0, 10), false, false);
    assert_eq!(s.lm.lock(&b, &take, true), Nlm4Stats::DeniedGracePeriod);
    let test = Nlm4Testargs { cookie: "t".into(), exclusive: true, alock: lock(&s.fh, "b", 1, 0, 10) };
    assert!(matches!(s.lm.test(&b, &test), Nlm4Testrply::Other(Nlm4Stats::DeniedGracePeriod)));
    s.lm.tick();
    assert!(s.sent.lock().unwrap().is_empty(), "no NLM host to notify");
    // A reclaim (of a lock it held before, say) is granted.
    let a = ctx(A, &auth);
    assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 1, 100, 10), false, true), true), Nlm4Stats::Granted);
    // The NFSv4.1 client completes its reclaim (NfsState's
    // RECLAIM_COMPLETE): the grace period is over for NLM too.
    assert!(grace.lock().complete(
        &v4_owner("v4 client"),
        Some(&keel_nfs4_state::Principal::Sys { uid: 0, machine: b"m".as_slice().into() }),
        std::time::Instant::now()
    ));
    assert_eq!(s.lm.lock(&b, &take, true), Nlm4Stats::Granted);
    assert!(!s.lm.stats().in_grace);
    std::fs::remove_dir_all(&s.dir).unwrap();
}

/// The early end waits for both protocols: the NLM host that held locks
/// reclaimed and is done, but an NFSv4.1 client of the last start has not
/// completed: still in grace; once it has, over. Without it, the ceiling
/// ends the grace period.
#[test]
fn the_early_end_waits_for_the_nlm_hosts_and_the_nfs4_clients() {
    let (s, store) = setup("shared-grace", |_| {});
    let auth = root();
    let (a, b) = (ctx(A, &auth), ctx(B, &auth));
    assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 1, 0, 10), false, false), true), Nlm4Stats::Granted);
    let (dir, fh) = (s.dir.clone(), s.fh.clone());
    drop(s);
    let long = std::time::Duration::from_secs(300);
    let (s, grace) = setup_shared(dir.clone(), store.clone(), fh.clone(), &["v4 client"], long);
    assert_eq!(s.lm.lock(&a, &lockargs(lock(&s.fh, "a", 1, 0, 10), false, true), true), Nlm4Stats::Granted);
    // A's first ordinary call: the NLM host is done (the call itself is
    // refused: the grace period goes on for the NFSv4.1 client).
    let test = Nlm4Testargs { cookie: "t".into(), exclusive: true, alock: lock(&s.fh, "a", 1, 100, 1) };
    assert!(matches!(s.lm.test(&a, &test), Nlm4Testrply::Other(Nlm4Stats::DeniedGracePeriod)));
    assert_eq!(grace.lock().status(std::time::Instant::now()).complete, 1);
    let take = lockargs(lock(&s.fh, "b", 1, 50, 10), false, false);
    assert_eq!(s.lm.lock(&b, &take, true), Nlm4Stats::DeniedGracePeriod, "the NFSv4.1 client is awaited");
    let principal = keel_nfs4_state::Principal::Sys { uid: 0, machine: b"m".as_slice().into() };
    assert!(grace.lock().complete(&v4_owner("v4 client"), Some(&principal), std::time::Instant::now()));
    assert_eq!(s.lm.lock(&b, &take, true), Nlm4Stats::Granted, "both done: over");
    drop(s);

    // Neither protocol's clients come back: the ceiling ends it.
    let short = std::time::Duration::from_secs(2);
    let (s, _grace) = setup_shared(dir, store, fh, &["v4 client"], short);
    let other = lockargs(lock(&s.fh, "b", 1, 500, 10), false, false);
    assert_eq!(s.lm.lock(&b, &other, true), Nlm4Stats::DeniedGracePeriod);
    std::thread::sleep(short + std::time::Duration::from_millis(100));
    s.lm.tick();
    assert!(!s.lm.stats().in_grace);
    assert_eq!(s.lm.lock(&b, &other, true), Nlm4Stats::Granted);
    std::fs::remove_dir_all(&s.dir).unwrap();
}

/// A delegation gate that refuses writers while `recalling` is set.
struct Recalling(Arc<std::sync::atomic::AtomicBool>);

impl keel_exports::delegations::DelegationGate for Recalling {
    fn before_access(
        &self,
        _handle: &[u8],
        access: keel_exports::delegations::GateAccess,
    ) -> Result<(), keel_exports::delegations::Recalling> {
        let busy = self.0.load(std::sync::atomic::Ordering::SeqCst);
        if busy && access == keel_exports::delegations::GateAccess::Write {
            Err(keel_exports::delegations::Recalling)
        } else {
            Ok(())
        }
    }
}

/// A lock manager over a new file `f` of an export that asks `gate`
/// before each access: the manager, the file's handle, its NSM directory.
fn gated(
    tag: &str,
    gate: Arc<dyn keel_exports::delegations::DelegationGate>,
) -> (LockManager<SimStore>, Bytes, PathBuf) {
    let store = Arc::new(SimStore::new(7));
    let root_dir = store.lookup_path(1, b"/").unwrap();
    let who = store.act_as(&Cred::ROOT).unwrap();
    let file = store.create(&who, &root_dir, b"f", CreateMode::Unchecked, &SetAttrs::default(), false).unwrap();
    let opts = ClientOptions { access: Access::ReadWrite, squash: Squash::None, secure: false, ..Default::default() };
    let exports =
        Arc::new(ExportTable::new(store, vec![(1, vec![ClientRule { host: HostMatch::Any, options: opts }])]));
    exports.set_delegation_gate(gate);
    let dir = nsm_dir(tag);
    let lm = LockManager::new(exports, LockConfig::new(dir.clone())).unwrap();
    lm.set_courier(Box::new(Recorder::default()));
    (lm, file.object.handle().clone(), dir)
}

#[test]
fn an_exclusive_lock_waits_while_a_delegation_is_recalled_and_a_shared_one_does_not() {
    let recalling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (lm, fh, dir) = gated("deleg", Arc::new(Recalling(recalling.clone())));
    let cred = root();
    let shared = Nlm4Lockargs { exclusive: false, ..lockargs(lock(&fh, "a", 1, 0, 10), false, false) };
    assert_eq!(lm.lock(&ctx(A, &cred), &shared, true), Nlm4Stats::Granted);
    let exclusive = Nlm4Lockargs { exclusive: true, ..lockargs(lock(&fh, "b", 2, 100, 10), false, false) };
    assert_eq!(lm.lock(&ctx(B, &cred), &exclusive, true), Nlm4Stats::DeniedGracePeriod);
    recalling.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(lm.lock(&ctx(B, &cred), &exclusive, true), Nlm4Stats::Granted);
    let _ = std::fs::remove_dir_all(dir);
}

/// A delegation gate that refuses every access while `recalling` is set:
/// an NFSv4.1 write delegation, whose client may hold locks the server
/// has not seen, being recalled.
struct RecallingWrite(Arc<std::sync::atomic::AtomicBool>);

impl keel_exports::delegations::DelegationGate for RecallingWrite {
    fn before_access(
        &self,
        _handle: &[u8],
        _access: keel_exports::delegations::GateAccess,
    ) -> Result<(), keel_exports::delegations::Recalling> {
        if self.0.load(std::sync::atomic::Ordering::SeqCst) {
            Err(keel_exports::delegations::Recalling)
        } else {
            Ok(())
        }
    }
}

/// While a write delegation is recalled, a TEST says nothing (the holder's
/// locks are not known yet) and a shared lock waits; both go on once it
/// is returned.
#[test]
fn a_test_and_a_shared_lock_wait_while_a_write_delegation_is_recalled() {
    let recalling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (lm, fh, dir) = gated("write-deleg", Arc::new(RecallingWrite(recalling.clone())));
    let cred = root();
    let test = Nlm4Testargs { cookie: "t".into(), exclusive: false, alock: lock(&fh, "a", 1, 0, 10) };
    assert!(matches!(lm.test(&ctx(A, &cred), &test), Nlm4Testrply::Other(Nlm4Stats::DeniedGracePeriod)));
    let shared = Nlm4Lockargs { exclusive: false, ..lockargs(lock(&fh, "a", 1, 0, 10), false, false) };
    assert_eq!(lm.lock(&ctx(A, &cred), &shared, true), Nlm4Stats::DeniedGracePeriod);
    recalling.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(matches!(lm.test(&ctx(A, &cred), &test), Nlm4Testrply::Other(Nlm4Stats::Granted)));
    assert_eq!(lm.lock(&ctx(A, &cred), &shared, true), Nlm4Stats::Granted);
    let _ = std::fs::remove_dir_all(dir);
}

/// A gate standing for NFSv4.1's state: a courtesy client holds a lock
/// through a description of its own until a refused lock asks.
struct Courtesy {
    holder: Mutex<Option<<SimStore as Store>::LockFile>>,
    asked: std::sync::atomic::AtomicUsize,
}

impl keel_exports::delegations::DelegationGate for Courtesy {
    fn before_access(
        &self,
        _handle: &[u8],
        _access: keel_exports::delegations::GateAccess,
    ) -> Result<(), keel_exports::delegations::Recalling> {
        Ok(())
    }

    fn lock_refused(&self, _handle: &[u8], _exclusive: bool, _range: keel_store::LockRange) -> bool {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.holder.lock().unwrap().take().is_some()
    }
}

/// An NFSv4.1 courtesy client's lock (its lease expired) does not hold
/// off an NLM lock: the refused lock asks the gate, which lets the client
/// go, and is granted at once, blocking or not. A lock held by someone
/// live is still denied.
#[test]
fn a_lock_refused_by_a_courtesy_client_s_lock_lets_the_client_go_and_is_granted() {
    use keel_store::{LockFile, LockKind, LockRange};
    let store = Arc::new(SimStore::new(7));
    let root_dir = store.lookup_path(1, b"/").unwrap();
    let who = store.act_as(&Cred::ROOT).unwrap();
    let file = store.create(&who, &root_dir, b"f", CreateMode::Unchecked, &SetAttrs::default(), false).unwrap();
    let fh = file.object.handle().clone();
    let opts = ClientOptions { access: Access::ReadWrite, squash: Squash::None, secure: false, ..Default::default() };
    let exports =
        Arc::new(ExportTable::new(store.clone(), vec![(1, vec![ClientRule { host: HostMatch::Any, options: opts }])]));
    let courtesy_lock = || {
        let holder = store.open_for_locks(&who, &file.object).unwrap();
        assert_eq!(holder.try_lock(LockKind::Exclusive, LockRange::new(0, 10)).unwrap(), None);
        holder
    };
    let gate = Arc::new(Courtesy { holder: Mutex::new(Some(courtesy_lock())), asked: Default::default() });
    exports.set_delegation_gate(gate.clone());
    let dir = nsm_dir("courtesy");
    let lm = LockManager::new(exports, LockConfig::new(dir.clone())).unwrap();
    lm.set_courier(Box::new(Recorder::default()));
    let cred = root();
    let ask = |host: &str, svid: i32, block: bool| lockargs(lock(&fh, host, svid, 5, 10), block, false);

    assert_eq!(lm.lock(&ctx(A, &cred), &ask("a", 1, false), true), Nlm4Stats::Granted, "not blocking");
    assert_eq!(gate.asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Held by a live NLM owner now: denied, the gate asked in vain.
    assert_eq!(lm.lock(&ctx(B, &cred), &ask("b", 2, false), true), Nlm4Stats::Denied);
    assert_eq!(gate.asked.load(std::sync::atomic::Ordering::SeqCst), 2);
    let unlock = Nlm4Unlockargs { cookie: "c".into(), alock: lock(&fh, "a", 1, 5, 10) };
    assert_eq!(lm.unlock(&ctx(A, &cred), &unlock), Nlm4Stats::Granted);

    *gate.holder.lock().unwrap() = Some(courtesy_lock());
    assert_eq!(lm.lock(&ctx(B, &cred), &ask("b", 2, true), true), Nlm4Stats::Granted, "blocking");
    assert_eq!(lm.stats().waiters, 0, "nothing was left waiting");
    let _ = std::fs::remove_dir_all(dir);
}

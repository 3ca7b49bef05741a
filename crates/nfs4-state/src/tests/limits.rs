//! What one client address can make the server hold is bounded, and
//! another address is still served when one is at its bound.

use super::*;
use keel_nfs4_proto::{OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ};

/// Clients: one address making ever new client owners is stopped at its
/// share (NFS4ERR_DELAY, the answer EXCHANGE_ID may give), while another
/// address still gets a client record.
#[test]
fn a_flood_of_client_records_from_one_address_is_bounded() {
    let t0 = Instant::now();
    let mut config = StateConfig::default();
    config.limits.clients = Bound { total: 64, per_address: 8 };
    let mut st = state_with(config, &MemoryRecords::new(), t0);
    let p = sys(0, "flood");
    let c = caller(ip(1), &p, 1);
    for i in 0..8 {
        st.exchange_id(&c, &exid_args(&format!("owner{i}"), 1), t0).unwrap();
    }
    assert_eq!(st.exchange_id(&c, &exid_args("owner8", 1), t0), Err(Nfsstat4::Delay));
    assert_eq!(st.stats(t0).refused[Resource::Clients as usize], 1);
    assert_eq!(st.held(Resource::Clients, ip(1)), (8, 8));
    connect(&mut st, ip(2), "innocent", t0);
    // Unconfirmed records end after a lease, and the address may come back.
    st.reap(t0 + LEASE + Duration::from_secs(1));
    assert_eq!(st.held(Resource::Clients, ip(1)).0, 0);
}

/// Sessions and their replay caches: a session gets no more than its
/// address's share leaves and an eighth of the pool free; past the share a
/// client's further session waits (NFS4ERR_DELAY), but a client's first
/// session always gets one slot, beyond the pool if need be; another
/// address still gets its slots.
#[test]
fn reply_cache_slots_are_shared_among_addresses() {
    let t0 = Instant::now();
    let mut config = StateConfig::default();
    config.limits.reply_cache_bytes = Bound { total: 64 * 4096, per_address: 12 * 4096 };
    let mut st = state_with(config, &MemoryRecords::new(), t0);
    let p = sys(0, "s");
    let c = caller(ip(1), &p, 1);
    let ok = st.exchange_id(&c, &exid_args("s", 1), t0).unwrap();
    let slots =
        |r: Result<keel_nfs4_proto::CreateSession4ResOk, Nfsstat4>| r.map(|r| r.csr_fore_chan_attrs.ca_maxrequests);
    assert_eq!(slots(st.create_session(&c, &cs_args(ok.clientid, 1, 8), t0)), Ok(8), "an eighth of 64");
    assert_eq!(slots(st.create_session(&c, &cs_args(ok.clientid, 2, 8), t0)), Ok(3), "what is left of the share");
    assert_eq!(slots(st.create_session(&c, &cs_args(ok.clientid, 3, 8), t0)), Ok(1));
    assert_eq!(st.create_session(&c, &cs_args(ok.clientid, 4, 8), t0), Err(Nfsstat4::Delay), "the share is spent");
    // Another client of the address: its first session has one slot,
    // beyond the address's share.
    let p2 = sys(0, "s2");
    let c2 = caller(ip(1), &p2, 3);
    let ok2 = st.exchange_id(&c2, &exid_args("s2", 1), t0).unwrap();
    assert_eq!(slots(st.create_session(&c2, &cs_args(ok2.clientid, 1, 8), t0)), Ok(1));
    assert_eq!(st.create_session(&c2, &cs_args(ok2.clientid, 2, 8), t0), Err(Nfsstat4::Delay));
    assert_eq!(st.stats(t0).slots_past_the_pool, 1);
    assert_eq!(st.held(Resource::ReplyCacheSlots, ip(1)), (13, 13));
    let q = sys(0, "t");
    let d = caller(ip(2), &q, 2);
    let ok3 = st.exchange_id(&d, &exid_args("t", 1), t0).unwrap();
    assert_eq!(slots(st.create_session(&d, &cs_args(ok3.clientid, 1, 8), t0)), Ok(6), "an eighth of the 51 free");
}

/// A pool filled by many clients (more than its slots, as an HPC
/// cluster's nodes may be) keeps admitting clients: each newcomer's first
/// session gets one slot; the sessions' slots shrink as the pool fills
/// rather than running out after the first few clients; and what ends
/// is given back.
#[test]
fn every_client_gets_a_session_however_many_share_the_reply_cache() {
    let t0 = Instant::now();
    let mut config = StateConfig::default();
    config.limits.reply_cache_bytes = Bound { total: 256 * 4096, per_address: 64 * 4096 };
    let mut st = state_with(config, &MemoryRecords::new(), t0);
    let mut given = Vec::new();
    let mut clients = Vec::new();
    let p = sys(0, "node");
    for i in 0..200u32 {
        let c = caller(ip(i as u8 + 1), &p, i as u64 + 1);
        let ok = st.exchange_id(&c, &exid_args(&format!("node{i}"), 1), t0).unwrap();
        let r = st.create_session(&c, &cs_args(ok.clientid, 1, 64), t0).expect("every node has a session");
        given.push(r.csr_fore_chan_attrs.ca_maxrequests);
        clients.push((c, ok.clientid, SessionId(r.csr_sessionid)));
    }
    assert_eq!(given[0], 32, "an eighth of the pool");
    assert!(given.windows(2).all(|w| w[1] <= w[0]), "shrinking as the pool fills: {given:?}");
    assert!(given.iter().filter(|&&n| n > 1).count() > 20, "more than a few clients have several: {given:?}");
    let past = st.stats(t0).slots_past_the_pool;
    assert!(past > 0 && given.iter().sum::<u32>() as usize == 256 + past as usize, "{given:?}, {past} past");
    // A second session past the pool waits.
    let (c, id, sid) = clients.pop().unwrap();
    assert_eq!(st.create_session(&c, &cs_args(id, 2, 64), t0), Err(Nfsstat4::Delay));
    // Its first session ends; its slot is given back, and it has one again.
    st.destroy_session(&sid, Some(&sid), c.conn).unwrap();
    assert_eq!(st.held(Resource::ReplyCacheSlots, c.addr).0, 0);
    assert_eq!(st.create_session(&c, &cs_args(id, 2, 64), t0).unwrap().csr_fore_chan_attrs.ca_maxrequests, 1);
}

/// Opens and lock states: a client flooding them from one address gets
/// NFS4ERR_RESOURCE past its address's share, whatever client and open
/// owners it uses; what is given back can be taken again, and a client on
/// another address is still served.
#[test]
fn open_and_lock_state_is_bounded_per_address() {
    let t0 = Instant::now();
    let mut config = StateConfig::default();
    config.limits.opens = Bound { total: 1000, per_address: 16 };
    config.limits.lock_states = Bound { total: 1000, per_address: 4 };
    let mut st = state_with(config, &MemoryRecords::new(), t0);
    let (a1, _) = connect(&mut st, ip(1), "a1", t0);
    let (a2, _) = connect_as(&mut st, ip(1), &sys(0, "a2"), "a2", 11, t0);
    let mut opened = Vec::new();
    for f in 0..16u32 {
        let who = if f % 2 == 0 { a1 } else { a2 };
        opened.push((who, f, open(&mut st, who, "o", f, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap()));
    }
    assert_eq!(open(&mut st, a1, "o", 99, OPEN4_SHARE_ACCESS_READ, 0, t0), Err(Nfsstat4::Resource));
    assert_eq!(open(&mut st, a2, "other", 98, OPEN4_SHARE_ACCESS_READ, 0, t0), Err(Nfsstat4::Resource));
    for (i, (who, f, o)) in opened.iter().take(4).enumerate() {
        lock_new(&mut st, *who, (*f, *o), "l", range(0, 1), i as u32, t0).unwrap();
    }
    let (who, f, o) = opened[4];
    assert_eq!(lock_new(&mut st, who, (f, o), "l", range(0, 1), 9, t0), Err(Nfsstat4::Resource));
    st.close(a1, &opened[6].2, &6).unwrap();
    open(&mut st, a1, "d", 20, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();

    let (b, _) = connect(&mut st, ip(2), "b", t0);
    let ob = open(&mut st, b, "o", 0, OPEN4_SHARE_ACCESS_BOTH, 0, t0).unwrap();
    lock_new(&mut st, b, (0, ob), "l", range(5, 1), 50, t0).unwrap();
    assert_eq!(st.held(Resource::Opens, ip(1)).0, 16);
    assert_eq!(st.held(Resource::LockStates, ip(1)).0, 4);
}

/// Delegations are bounded per address: past the share, OPEN gets no
/// delegation (WND4_RESOURCE) but still succeeds.
#[test]
fn delegations_are_bounded_per_address() {
    let t0 = Instant::now();
    let mut config = StateConfig::default();
    config.limits.delegations = Bound { total: 1000, per_address: 2 };
    let mut st = state_with(config, &MemoryRecords::new(), t0);
    let (a, _) = connect(&mut st, ip(1), "a", t0);
    let read = share(OPEN4_SHARE_ACCESS_READ, 0);
    let offers: Vec<bool> = (0..3u32)
        .map(|f| {
            open(&mut st, a, "o", f, OPEN4_SHARE_ACCESS_READ, 0, t0).unwrap();
            matches!(st.offer_delegation(a, &f, &read, t0), DelegationOffer::Granted { .. })
        })
        .collect();
    assert_eq!(offers, vec![true, true, false]);
    assert_eq!(st.stats(t0).refused[Resource::Delegations as usize], 1);
}

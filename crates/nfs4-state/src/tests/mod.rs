//! Tests of the state's rules, one file per area; each test names the RFC
//! 8881 section it checks.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use keel_nfs4_proto::{
    CREATE_SESSION4_FLAG_CONN_BACK_CHAN, ChannelAttrs4, ClientOwner4, CreateSession4Args, ExchangeId4Args, Nfsstat4,
    Sequence4Args, StateProtect4A, Stateid4,
};
use keel_xdr::Opaque;

use crate::*;

mod delegations;
mod exchange;
mod grace;
mod lease;
mod limits;
mod locks;
mod opens;
mod sequence;
mod sessions;
mod stateids;

/// File keys are numbers; lock-holding descriptions are numbers too.
pub(crate) type St = NfsState<u32, u32>;

pub(crate) const LEASE: Duration = Duration::from_secs(90);

pub(crate) fn ip(last: u8) -> IpAddr {
    IpAddr::from([10, 0, 0, last])
}

pub(crate) fn sys(uid: u32, machine: &str) -> Principal {
    Principal::Sys { uid, machine: machine.as_bytes().into() }
}

pub(crate) fn state_with(config: StateConfig, records: &MemoryRecords, now: Instant) -> St {
    NfsState::new(config, BootEpoch::new(7).unwrap(), [9; 16], Box::new(records.clone()), now).unwrap()
}

pub(crate) fn state(now: Instant) -> St {
    state_with(StateConfig::default(), &MemoryRecords::new(), now)
}

pub(crate) fn caller<'a>(addr: IpAddr, principal: &'a Principal, conn: u64) -> Caller<'a> {
    Caller { addr, principal, conn: ConnId(conn) }
}

pub(crate) fn exid_args(owner: &str, verifier: u8) -> ExchangeId4Args {
    ExchangeId4Args {
        eia_clientowner: ClientOwner4 {
            co_verifier: [verifier; 8],
            co_ownerid: Opaque(owner.as_bytes().to_vec().into()),
        },
        eia_flags: 0,
        eia_state_protect: StateProtect4A::Sp4None,
        eia_client_impl_id: None,
    }
}

pub(crate) fn attrs(slots: u32) -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1 << 20,
        ca_maxresponsesize: 1 << 20,
        ca_maxresponsesize_cached: 4096,
        ca_maxoperations: 16,
        ca_maxrequests: slots,
        ca_rdma_ird: None,
    }
}

pub(crate) fn back_attrs() -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 4096,
        ca_maxresponsesize: 4096,
        ca_maxresponsesize_cached: 0,
        ca_maxoperations: 2,
        ca_maxrequests: 1,
        ca_rdma_ird: None,
    }
}

pub(crate) fn cs_args(clientid: ClientId, sequence: u32, slots: u32) -> CreateSession4Args {
    CreateSession4Args {
        csa_clientid: clientid.0,
        csa_sequence: sequence,
        csa_flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
        csa_fore_chan_attrs: attrs(slots),
        csa_back_chan_attrs: back_attrs(),
        csa_cb_program: 0x4000_0000,
        csa_sec_parms: vec![keel_nfs4_proto::CallbackSecParms4::AuthNone].into(),
    }
}

/// A client that did EXCHANGE_ID, CREATE_SESSION (with a backchannel on
/// connection `conn`) and RECLAIM_COMPLETE from `addr` as `principal`, as
/// the Linux client does before anything else.
pub(crate) fn connect_as(
    st: &mut St,
    addr: IpAddr,
    principal: &Principal,
    owner: &str,
    conn: u64,
    now: Instant,
) -> (ClientId, SessionId) {
    let (id, sid) = connect_reclaiming_as(st, addr, principal, owner, conn, now);
    st.reclaim_complete(id, false, now).unwrap();
    (id, sid)
}

/// [`connect_as`] without RECLAIM_COMPLETE: a client that has yet to
/// reclaim (it may take no new state until it completes).
pub(crate) fn connect_reclaiming_as(
    st: &mut St,
    addr: IpAddr,
    principal: &Principal,
    owner: &str,
    conn: u64,
    now: Instant,
) -> (ClientId, SessionId) {
    let c = caller(addr, principal, conn);
    let ok = st.exchange_id(&c, &exid_args(owner, 1), now).unwrap();
    let cs = st.create_session(&c, &cs_args(ok.clientid, ok.sequenceid, 8), now).unwrap();
    // The handler's CB_NULL got an answer.
    st.set_callback_state(ok.clientid, CallbackState::Up);
    (ok.clientid, SessionId(cs.csr_sessionid))
}

pub(crate) fn connect(st: &mut St, addr: IpAddr, owner: &str, now: Instant) -> (ClientId, SessionId) {
    connect_as(st, addr, &sys(0, owner), owner, u64::from(addr_last(addr)), now)
}

/// [`connect`] without RECLAIM_COMPLETE.
pub(crate) fn connect_reclaiming(st: &mut St, addr: IpAddr, owner: &str, now: Instant) -> (ClientId, SessionId) {
    connect_reclaiming_as(st, addr, &sys(0, owner), owner, u64::from(addr_last(addr)), now)
}

fn addr_last(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(a) => a.octets()[3],
        IpAddr::V6(a) => a.octets()[15],
    }
}

pub(crate) fn seq_args(sid: SessionId, slot: u32, seqid: u32, cachethis: bool) -> Sequence4Args {
    Sequence4Args {
        sa_sessionid: sid.0,
        sa_sequenceid: seqid,
        sa_slotid: slot,
        sa_highest_slotid: 0,
        sa_cachethis: cachethis,
    }
}

pub(crate) fn shape(ops: u32) -> CompoundShape {
    CompoundShape { ops, request_bytes: 200 }
}

/// SEQUENCE on `slot` with `seqid`, then done at once (a renewal).
pub(crate) fn renew(st: &mut St, addr: IpAddr, principal: &Principal, sid: SessionId, seqid: u32, now: Instant) {
    let c = caller(addr, principal, 99);
    let SequenceStart::New(grant) = st.sequence(&c, &seq_args(sid, 0, seqid, false), shape(1), now).unwrap() else {
        panic!("a new request")
    };
    st.sequence_done(&grant, SlotReply { status: Nfsstat4::Ok, ops: 1, reply: &[] }, now);
}

pub(crate) fn share(access: u32, deny: u32) -> ShareAccess {
    ShareAccess::from_wire(access, deny).unwrap()
}

pub(crate) fn open(
    st: &mut St,
    client: ClientId,
    owner: &str,
    file: u32,
    access: u32,
    deny: u32,
    now: Instant,
) -> Result<Stateid4, Nfsstat4> {
    st.open(client, owner.as_bytes(), &file, share(access, deny), OpenClaim::Null, now).map(|ok| ok.stateid)
}

/// A write lock over `range` by a new lock owner under the open stateid
/// of `file`, granted through description `holder`.
pub(crate) fn lock_new(
    st: &mut St,
    client: ClientId,
    (file, open_stateid): (u32, Stateid4),
    owner: &str,
    range: ByteRange,
    holder: u32,
    now: Instant,
) -> Result<Stateid4, Nfsstat4> {
    let req = LockRequest {
        file: &file,
        kind: LockKind::Write,
        range,
        reclaim: false,
        locker: Locker::NewOwner { open_stateid, owner: owner.as_bytes() },
    };
    match st.lock(client, req, now)? {
        LockPlan::New(plan) => Ok(plan.granted(holder)),
        LockPlan::Held(plan) => Ok(plan.granted()),
    }
}

pub(crate) fn range(start: u64, len: u64) -> ByteRange {
    ByteRange::from_wire(start, len).unwrap()
}

/// Every lock-holding description released, in order.
pub(crate) fn released_holders(st: &mut St) -> Vec<u32> {
    st.take_released()
        .into_iter()
        .filter_map(|r| match r {
            Released::LockHolder { holder, .. } => Some(holder),
            _ => None,
        })
        .collect()
}

//! A harness for the handlers' tests: an [`Nfs4Program`] over a
//! [`SimStore`] whose one export admits every client read-write with no
//! squashing, clients with a session, and one COMPOUND at a time, run by
//! calling handlers in its context (the filehandle operations and OPEN
//! are other files' business: a test sets the current filehandle and
//! opens through the state).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use keel_exports::{Access, ClientOptions, ClientRule, ExportTable, HostMatch, PseudoKey, Squash};
use keel_nfs4_proto::{
    CallbackSecParms4, ChannelAttrs4, ClientOwner4, CreateSession4Args, ExchangeId4Args, Sequence4Args, StateProtect4A,
    Stateid4,
};
use keel_nfs4_state::{
    BootEpoch, ClientId, CompoundShape, MemoryRecords, OpenClaim, SequenceStart, SessionId, ShareAccess, StateConfig,
};
use keel_rpc::{CallContext, Credential};
use keel_store::sim::{SimObject, SimStore};
use keel_store::{CreateMode, Cred, SetAttrs, Stability, Store, StoreError};
use keel_xdr::Opaque;

use crate::compound::{Compound, Filehandle};
use crate::program::{MinorVersions, Nfs4Config, Nfs4Program};

pub(crate) struct Rig {
    pub program: Nfs4Program<SimStore>,
    pub store: Arc<SimStore>,
    cred: Credential,
    peer: SocketAddr,
}

/// A client with a session; `seq` is its slot 0's next sequence ID.
pub(crate) struct Client {
    pub clientid: ClientId,
    sessionid: SessionId,
    seq: u32,
}

fn channel() -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1 << 20,
        ca_maxresponsesize: 1 << 20,
        ca_maxresponsesize_cached: 4096,
        ca_maxoperations: 16,
        ca_maxrequests: 4,
        ca_rdma_ird: None,
    }
}

impl Rig {
    /// Over a new simulated store; `sync` is the export's option.
    pub fn new(sync: bool) -> Rig {
        Rig::with(sync, StateConfig::default(), MemoryRecords::new())
    }

    /// With the state's configuration `state` and the client records of
    /// an earlier instance `records` (a grace period waits for them).
    pub fn with(sync: bool, state: StateConfig, records: MemoryRecords) -> Rig {
        let store = Arc::new(SimStore::new(41));
        let options = ClientOptions {
            access: Access::ReadWrite,
            sync,
            squash: Squash::None,
            secure: false,
            ..ClientOptions::default()
        };
        let rules = vec![(1, vec![ClientRule { host: HostMatch::Any, options }])];
        let exports = Arc::new(ExportTable::new(store.clone(), rules));
        let config = Nfs4Config {
            minors: MinorVersions { v41: true, v42: true },
            state,
            epoch: BootEpoch::new(2).expect("a valid epoch"),
            session_key: [1; 16],
            pseudo_key: PseudoKey::from_bytes([2; 16]),
            server_owner: Bytes::from_static(b"keel-test"),
        };
        let program = Nfs4Program::new(exports, config, Box::new(records)).expect("the program");
        let cred = Credential::sys(Bytes::from_static(b"client"), 0, 0, &[]);
        Rig { program, store, cred, peer: "127.0.0.1:700".parse().expect("an address") }
    }

    fn context(&self) -> CallContext<'_> {
        CallContext {
            xid: 1,
            vers: 4,
            proc_: 1,
            cred: &self.cred,
            peer: self.peer,
            local: "127.0.0.1:2049".parse().expect("an address"),
            connection: None,
            report: Default::default(),
        }
    }

    /// A client named `owner` with a session (EXCHANGE_ID and
    /// CREATE_SESSION through their handlers) that sent RECLAIM_COMPLETE,
    /// as the Linux client does before anything else.
    pub fn client(&self, owner: &str) -> Client {
        let c = self.client_reclaiming(owner);
        let now = Instant::now();
        self.program.with_state(|s| s.reclaim_complete(c.clientid, false, now)).expect("RECLAIM_COMPLETE");
        c
    }

    /// [`Rig::client`] without RECLAIM_COMPLETE: a client that has yet to
    /// reclaim after a restart.
    pub fn client_reclaiming(&self, owner: &str) -> Client {
        let ctx = self.context();
        let mut c = Compound::new(&self.program, &ctx, 1, Instant::now());
        let exid = ExchangeId4Args {
            eia_clientowner: ClientOwner4 { co_verifier: [7; 8], co_ownerid: Opaque(owner.as_bytes().to_vec().into()) },
            eia_flags: 0,
            eia_state_protect: StateProtect4A::Sp4None,
            eia_client_impl_id: None,
        };
        let ok = crate::ops::session::exchange_id(&mut c, exid).expect("EXCHANGE_ID");
        let cs = CreateSession4Args {
            csa_clientid: ok.eir_clientid,
            csa_sequence: ok.eir_sequenceid,
            csa_flags: 0,
            csa_fore_chan_attrs: channel(),
            csa_back_chan_attrs: channel(),
            csa_cb_program: 0x4000_0000,
            csa_sec_parms: vec![CallbackSecParms4::AuthNone].into(),
        };
        let cs = crate::ops::session::create_session(&mut c, cs).expect("CREATE_SESSION");
        Client { clientid: ClientId(ok.eir_clientid), sessionid: SessionId(cs.csr_sessionid), seq: 1 }
    }

    /// Runs `f` as one COMPOUND of `client` at `now` under `minor`, after
    /// its SEQUENCE, with `file` (if any) the current filehandle.
    pub fn call<R>(
        &self,
        client: &mut Client,
        minor: u32,
        now: Instant,
        file: Option<&Bytes>,
        f: impl FnOnce(&mut Compound<'_, SimStore>) -> R,
    ) -> R {
        let ctx = self.context();
        let mut c = Compound::new(&self.program, &ctx, minor, now);
        let args = Sequence4Args {
            sa_sessionid: client.sessionid.0,
            sa_sequenceid: client.seq,
            sa_slotid: 0,
            sa_highest_slotid: 0,
            sa_cachethis: false,
        };
        client.seq += 1;
        let caller = c.caller();
        let shape = CompoundShape { ops: 3, request_bytes: 300 };
        let started = self.program.with_state(|s| s.sequence(&caller, &args, shape, now)).expect("SEQUENCE");
        let SequenceStart::New(grant) = started else { panic!("a new request, not a replay") };
        c.slot = Some(grant);
        if let Some(handle) = file {
            c.current = Some(Filehandle::Export(c.admit(handle).expect("the export admits the file")));
        }
        f(&mut c)
    }

    /// A new file `name` in the export's root holding `data`; its handle.
    pub fn file(&self, name: &str, data: &[u8]) -> Bytes {
        let s = &*self.store;
        let who = s.act_as(&Cred::ROOT).expect("root");
        let root = s.lookup_path(1, b"").expect("the root");
        let f = s.create(&who, &root, name.as_bytes(), CreateMode::Guarded, &SetAttrs::default(), false);
        let f = f.expect("create").object;
        if !data.is_empty() {
            s.write(&who, &f, 0, data, Stability::Unstable).expect("write");
        }
        keel_store::Object::handle(&f).clone()
    }

    pub fn object(&self, handle: &Bytes) -> SimObject {
        self.store.resolve(handle, |_| Ok::<_, StoreError>(())).expect("a handle of the store").0
    }

    /// What the file holds now.
    pub fn data(&self, handle: &Bytes) -> Vec<u8> {
        self.store.file_data(self.object(handle).fileid()).expect("a file")
    }

    /// An open of `file` by `client`'s open owner `owner` with
    /// `OPEN4_SHARE_ACCESS_*` bits `access`, made through the state.
    pub fn open(&self, client: &Client, owner: &str, file: &Bytes, access: u32) -> Stateid4 {
        self.open_by(client, owner, file, access, OpenClaim::Null).expect("OPEN")
    }

    /// An open with claim `claim` (a reclaim during a grace period).
    pub fn open_by(
        &self,
        client: &Client,
        owner: &str,
        file: &Bytes,
        access: u32,
        claim: OpenClaim,
    ) -> Result<Stateid4, keel_nfs4_proto::Nfsstat4> {
        let share = ShareAccess::from_wire(access, 0).expect("valid share bits");
        let now = Instant::now();
        self.program
            .with_state(|s| s.open(client.clientid, owner.as_bytes(), file, share, claim, now))
            .map(|ok| ok.stateid)
    }
}

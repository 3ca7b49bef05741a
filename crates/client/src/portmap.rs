//! Portmapper v2 (rpcbind's v2 protocol), over TCP and, for GETPORT, UDP.

use std::net::SocketAddr;
use std::time::Duration;

use keel_nfs3_proto::portmap::{CallArgs, CallResult, Mapping, Pmaplist};
use keel_nfs3_proto::{PMAP_PROGRAM, PMAP_V2, PmapProc};
use keel_rpc::msg::Auth;
use keel_xdr::{Decode, Encode};

use crate::conn::RpcConnection;
use crate::error::ClientError;
use crate::udp::udp_call;
use crate::{RpcTransport, call_decoded, decode_results};

/// A portmapper v2 client (connect it to port 111, or to whatever port
/// the portmapper under test listens on).
#[derive(Debug, Clone)]
pub struct PortmapClient<T = RpcConnection> {
    transport: T,
}

impl<T: RpcTransport> PortmapClient<T> {
    pub fn new(transport: T) -> Self {
        PortmapClient { transport }
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    pub fn with_auth(&self, auth: &Auth) -> Self {
        PortmapClient { transport: self.transport.with_auth(auth) }
    }

    async fn call<A: Encode + Sync, R: Decode>(&self, proc_: PmapProc, args: &A) -> Result<R, ClientError> {
        call_decoded(&self.transport, PMAP_PROGRAM, PMAP_V2, proc_ as u32, args).await
    }

    pub async fn null(&self) -> Result<(), ClientError> {
        self.call(PmapProc::Null, &()).await
    }

    /// SET: registers a mapping; `false` if the server refused it.
    pub async fn set(&self, mapping: &Mapping) -> Result<bool, ClientError> {
        self.call(PmapProc::Set, mapping).await
    }

    /// UNSET: removes the mappings of `prog`/`vers` (port and protocol are
    /// ignored by the server).
    pub async fn unset(&self, mapping: &Mapping) -> Result<bool, ClientError> {
        self.call(PmapProc::Unset, mapping).await
    }

    /// GETPORT: the port of `prog`/`vers` over `prot` (`IPPROTO_TCP` or
    /// `IPPROTO_UDP`), 0 if not registered.
    pub async fn getport(&self, prog: u32, vers: u32, prot: u32) -> Result<u32, ClientError> {
        self.call(PmapProc::Getport, &Mapping { prog, vers, prot, port: 0 }).await
    }

    /// DUMP: every registered mapping.
    pub async fn dump(&self) -> Result<Pmaplist, ClientError> {
        self.call(PmapProc::Dump, &()).await
    }

    /// CALLIT: asks the portmapper to call another program for us.
    pub async fn callit(&self, args: &CallArgs) -> Result<CallResult, ClientError> {
        self.call(PmapProc::Callit, args).await
    }
}

/// GETPORT over UDP, as `mount(8)` and `rpcinfo -u` do it.
pub async fn getport_udp(
    addr: SocketAddr,
    prog: u32,
    vers: u32,
    prot: u32,
    timeout: Duration,
) -> Result<u32, ClientError> {
    let mapping = Mapping { prog, vers, prot, port: 0 };
    let results =
        udp_call(addr, &Auth::None, PMAP_PROGRAM, PMAP_V2, PmapProc::Getport as u32, &mapping, timeout).await?;
    decode_results(results)
}

//! An async NFSv3 + MOUNT v3 + portmap v2 client on tokio.
//!
//! Written for Keel's own tests ("our own client") and for `keel bench` and
//! `keel verify`, so it is built for load and for hostile conditions rather
//! than for mounting a file system:
//!
//! - **Pipelined.** An [`RpcConnection`] keeps many calls in flight on one
//!   TCP connection (at most [`ConnectOptions::outstanding_max`]) and
//!   matches replies to calls by xid, in whatever order they come back.
//! - **Zero-copy payloads.** WRITE data is handed to `writev` as its own
//!   `Bytes` segment; READ data comes back as a slice of the received
//!   record.
//! - **Robust.** Every failure is a typed [`ClientError`], never a panic:
//!   bounded record size, bounded calls in flight, a timeout on every call,
//!   and a lost connection fails all its waiting calls at once.
//! - **Hard-mount retries.** [`RetryingConnection`] reconnects (from the
//!   same source port when it can) and retransmits a call with the *same*
//!   xid, so the server's duplicate reply cache can answer a non-idempotent
//!   call that was already executed instead of executing it twice.
//!
//! The protocol status of an NFS or MOUNT procedure is data, not an error:
//! [`Nfs3Client::lookup`] returns `Ok(NfsResult::Fail(NFS3ERR_NOENT, ..))`
//! for a missing name, because the server's tests need to see exactly which
//! status came back. The helpers of [`ops`] (and [`NfsResultExt`]) turn a
//! failed status into [`ClientError::Nfs`] for code that just wants the
//! happy path.
//!
//! The typed clients ([`Nfs3Client`], [`MountClient`], [`PortmapClient`])
//! are generic over an [`RpcTransport`]: a plain [`RpcConnection`] or a
//! [`RetryingConnection`], so the same calls and helpers work on both.

#![forbid(unsafe_code)]

mod conn;
mod error;
mod mount;
mod nfs;
pub mod ops;
mod portmap;
mod retry;
mod udp;
mod window;
pub use window::Window;

use std::future::Future;

use bytes::Bytes;
use keel_xdr::{Decode, Decoder, Encode};

pub use conn::{
    ConnectOptions, DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_OUTSTANDING_MAX, DEFAULT_RECORD_BYTES_MAX,
    PreparedCall, RpcConnection, auth_sys, next_xid, process_auth, reply_results, reserved_port_available,
};
pub use error::ClientError;
pub use keel_rpc::msg::{AcceptStat, Auth, AuthStat, AuthSys, RejectStat, ReplyStat};
pub use mount::{MountClient, mount, mount_retrying};
pub use nfs::{Nfs3Client, NfsResultExt};
pub use ops::{ReadOutcome, Transfer, WriteOutcome};
pub use portmap::{PortmapClient, getport_udp};
pub use retry::{RetryPolicy, RetryStats, RetryingConnection};
pub use udp::udp_call;

/// The wire types, re-exported so users need not name the proto crates.
pub use keel_nfs3_proto as proto;
pub use keel_xdr as xdr;

/// Something that carries RPC calls: a plain [`RpcConnection`] or a
/// [`RetryingConnection`]. The typed clients are generic over it.
pub trait RpcTransport: Clone + Send + Sync {
    /// Calls `proc_` of `prog`/`vers` with `args` and returns the results
    /// that follow an accepted, successful reply header (a slice of the
    /// received record). RPC-level rejections are [`ClientError::Rpc`].
    fn call_args(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: &(dyn Encode + Sync),
    ) -> impl Future<Output = Result<Bytes, ClientError>> + Send;

    /// A transport sharing this one's connection(s) that sends `auth`.
    fn with_auth(&self, auth: &Auth) -> Self;
}

impl RpcTransport for RpcConnection {
    fn call_args(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: &(dyn Encode + Sync),
    ) -> impl Future<Output = Result<Bytes, ClientError>> + Send {
        self.call(prog, vers, proc_, |enc| args.encode(enc))
    }

    fn with_auth(&self, auth: &Auth) -> Self {
        RpcConnection::with_auth(self, auth)
    }
}

/// Decodes a `T` that must take up all of `results`: trailing bytes mean
/// the server and this client disagree on the reply's shape, which a test
/// of the server wants to know.
pub fn decode_results<T: Decode>(results: Bytes) -> Result<T, ClientError> {
    let mut dec = Decoder::new(results);
    let value = T::decode(&mut dec)?;
    dec.finish()?;
    Ok(value)
}

/// Calls and decodes the results as `R`.
pub(crate) async fn call_decoded<T: RpcTransport, R: Decode>(
    transport: &T,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &(dyn Encode + Sync),
) -> Result<R, ClientError> {
    decode_results(transport.call_args(prog, vers, proc_, args).await?)
}

//! MOUNT v3, and the `mount` convenience that gets an NFS client and the
//! root handle of an export in one step.

use std::net::SocketAddr;

use keel_nfs3_proto::mount::{Dirpath, Exports, Mountlist, Mountres3};
use keel_nfs3_proto::{MOUNT_PROGRAM, MOUNT_V3, MountProc, NfsFh3};
use keel_rpc::msg::Auth;
use keel_xdr::{Decode, Encode};

use crate::conn::{ConnectOptions, RpcConnection};
use crate::error::ClientError;
use crate::nfs::Nfs3Client;
use crate::retry::{RetryPolicy, RetryingConnection};
use crate::{RpcTransport, call_decoded};

/// A MOUNT v3 client. MNT's status is data ([`Mountres3::Fail`]);
/// [`mnt_root`](Self::mnt_root) turns it into an error.
#[derive(Debug, Clone)]
pub struct MountClient<T = RpcConnection> {
    transport: T,
}

impl<T: RpcTransport> MountClient<T> {
    pub fn new(transport: T) -> Self {
        MountClient { transport }
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    pub fn with_auth(&self, auth: &Auth) -> Self {
        MountClient { transport: self.transport.with_auth(auth) }
    }

    async fn call<A: Encode + Sync, R: Decode>(&self, proc_: MountProc, args: &A) -> Result<R, ClientError> {
        call_decoded(&self.transport, MOUNT_PROGRAM, MOUNT_V3, proc_ as u32, args).await
    }

    pub async fn null(&self) -> Result<(), ClientError> {
        self.call(MountProc::Null, &()).await
    }

    /// MNT: the root handle of the export at `path`, or why not.
    pub async fn mnt(&self, path: impl Into<Dirpath>) -> Result<Mountres3, ClientError> {
        let path = path.into();
        self.call(MountProc::Mnt, &path).await
    }

    /// MNT, with a failed status as [`ClientError::Mount`].
    pub async fn mnt_root(&self, path: impl Into<Dirpath>) -> Result<NfsFh3, ClientError> {
        match self.mnt(path).await? {
            Mountres3::Ok(ok) => Ok(NfsFh3::new(ok.fhandle.0)),
            Mountres3::Fail(status) => Err(ClientError::Mount(status)),
        }
    }

    /// DUMP: who has what mounted, as far as the server remembers.
    pub async fn dump(&self) -> Result<Mountlist, ClientError> {
        self.call(MountProc::Dump, &()).await
    }

    pub async fn umnt(&self, path: impl Into<Dirpath>) -> Result<(), ClientError> {
        let path = path.into();
        self.call(MountProc::Umnt, &path).await
    }

    pub async fn umntall(&self) -> Result<(), ClientError> {
        self.call(MountProc::Umntall, &()).await
    }

    /// EXPORT: the export list.
    pub async fn export(&self) -> Result<Exports, ClientError> {
        self.call(MountProc::Export, &()).await
    }
}

/// Connects to `addr` (the server's NFS address: Keel serves MOUNT on the
/// NFS port), mounts `export_path` and returns an NFS client on the same
/// connection with the export's root handle.
pub async fn mount(
    addr: SocketAddr,
    export_path: &str,
    opts: &ConnectOptions,
) -> Result<(Nfs3Client, NfsFh3), ClientError> {
    let conn = RpcConnection::connect(addr, opts).await?;
    let root = MountClient::new(conn.clone()).mnt_root(export_path).await?;
    Ok((Nfs3Client::new(conn), root))
}

/// Like [`mount`], with a client that reconnects and retransmits (see
/// [`RetryingConnection`]); the MNT call itself is retried too.
pub async fn mount_retrying(
    addr: SocketAddr,
    export_path: &str,
    opts: &ConnectOptions,
    policy: RetryPolicy,
) -> Result<(Nfs3Client<RetryingConnection>, NfsFh3), ClientError> {
    let conn = RetryingConnection::connect(addr, opts, policy).await?;
    let root = MountClient::new(conn.clone()).mnt_root(export_path).await?;
    Ok((Nfs3Client::new(conn), root))
}

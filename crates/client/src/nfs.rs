//! Typed wrappers for the 22 NFSv3 procedures.

use keel_nfs3_proto::*;
use keel_rpc::msg::Auth;
use keel_xdr::{Decode, Encode};

use crate::conn::RpcConnection;
use crate::error::ClientError;
use crate::{RpcTransport, call_decoded};

/// An NFSv3 client over a transport. Each procedure takes the proto crate's
/// `XXX3Args` and returns its `XXX3Res`: the NFS status is data
/// (`NfsResult::Fail`), only transport and RPC failures are errors.
///
/// Cheap to clone; clones share the connection. Many calls may be awaited
/// concurrently on one client (they are pipelined on the connection).
#[derive(Debug, Clone)]
pub struct Nfs3Client<T = RpcConnection> {
    transport: T,
}

macro_rules! nfs_procedures {
    ($($(#[$meta:meta])* $name:ident: $proc:ident, $args:ty => $res:ty;)*) => {
        $(
            $(#[$meta])*
            pub async fn $name(&self, args: &$args) -> Result<$res, ClientError> {
                self.call(Nfs3Proc::$proc, args).await
            }
        )*
    };
}

impl<T: RpcTransport> Nfs3Client<T> {
    pub fn new(transport: T) -> Self {
        Nfs3Client { transport }
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    pub fn into_transport(self) -> T {
        self.transport
    }

    /// A client on the same connection that calls as `auth`.
    pub fn with_auth(&self, auth: &Auth) -> Self {
        Nfs3Client { transport: self.transport.with_auth(auth) }
    }

    /// Calls any NFSv3 procedure with any arguments and decodes any result
    /// type: for tests that send what the typed wrappers would not.
    pub async fn call<A: Encode + Sync, R: Decode>(&self, proc_: Nfs3Proc, args: &A) -> Result<R, ClientError> {
        call_decoded(&self.transport, NFS_PROGRAM, NFS_V3, proc_ as u32, args).await
    }

    /// NULL: does the server answer at all?
    pub async fn null(&self) -> Result<(), ClientError> {
        self.call(Nfs3Proc::Null, &()).await
    }

    nfs_procedures! {
        getattr: Getattr, Getattr3Args => Getattr3Res;
        setattr: Setattr, Setattr3Args => Setattr3Res;
        lookup: Lookup, Lookup3Args => Lookup3Res;
        access: Access, Access3Args => Access3Res;
        readlink: Readlink, Readlink3Args => Readlink3Res;
        /// READ: the data in the result is a slice of the received record.
        read: Read, Read3Args => Read3Res;
        /// WRITE: `args.data` goes to the socket as its own segment, uncopied.
        write: Write, Write3Args => Write3Res;
        create: Create, Create3Args => Create3Res;
        mkdir: Mkdir, Mkdir3Args => Mkdir3Res;
        symlink: Symlink, Symlink3Args => Symlink3Res;
        mknod: Mknod, Mknod3Args => Mknod3Res;
        remove: Remove, Remove3Args => Remove3Res;
        rmdir: Rmdir, Rmdir3Args => Rmdir3Res;
        rename: Rename, Rename3Args => Rename3Res;
        link: Link, Link3Args => Link3Res;
        readdir: Readdir, Readdir3Args => Readdir3Res;
        readdirplus: Readdirplus, Readdirplus3Args => Readdirplus3Res;
        fsstat: Fsstat, Fsstat3Args => Fsstat3Res;
        fsinfo: Fsinfo, Fsinfo3Args => Fsinfo3Res;
        pathconf: Pathconf, Pathconf3Args => Pathconf3Res;
        commit: Commit, Commit3Args => Commit3Res;
    }
}

/// Turns an `NfsResult` into a `Result` whose error is
/// [`ClientError::Nfs`], for code that only follows the happy path:
/// `client.lookup(&args).await?.ok_or_status()?`.
pub trait NfsResultExt<T> {
    fn ok_or_status(self) -> Result<T, ClientError>;
}

impl<T, F> NfsResultExt<T> for NfsResult<T, F> {
    fn ok_or_status(self) -> Result<T, ClientError> {
        match self {
            NfsResult::Ok(t) => Ok(t),
            NfsResult::Fail(status, _) => Err(ClientError::Nfs(status)),
        }
    }
}

//! The one error type of the crate.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use keel_nfs3_proto::Nfsstat3;
use keel_nfs3_proto::mount::Mountstat3;
use keel_rpc::msg::ReplyStat;
use keel_rpc::record::RecordError;
use keel_xdr::XdrError;

/// Why a call (or a helper built on calls) failed.
///
/// The typed NFS wrappers return the protocol status as data
/// ([`keel_nfs3_proto::NfsResult`]), so `Nfs` and `Mount` only come from the
/// convenience helpers, which turn a failed status into an error.
///
/// `Clone` because one connection failure is reported to every call that
/// was waiting on that connection.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The socket failed: connect refused, connection reset or closed by the
    /// server (`UnexpectedEof`), or closed by this client
    /// (`ConnectionAborted`).
    #[error("I/O error: {0}")]
    Io(Arc<io::Error>),
    /// No reply arrived within the call (or connect) timeout.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The server answered, but rejected the call at the RPC level
    /// (PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL, GARBAGE_ARGS, SYSTEM_ERR,
    /// RPC_MISMATCH, AUTH_ERROR).
    #[error("call rejected by the server: {0:?}")]
    Rpc(ReplyStat),
    /// The reply could not be decoded (or had bytes left over).
    #[error("malformed reply: {0}")]
    Xdr(#[from] XdrError),
    /// The server sent a record over the size limit (or in too many
    /// fragments), or a call was too large to send. The connection is
    /// closed, since the stream can no longer be trusted.
    #[error("bad record: {0}")]
    Record(#[from] RecordError),
    /// An NFS procedure returned this status (helpers only).
    #[error("NFS error {0}")]
    Nfs(Nfsstat3),
    /// MNT returned this status (helpers only).
    #[error("MOUNT error {0}")]
    Mount(Mountstat3),
    /// The server broke the protocol in a way the decoder cannot see (a READ
    /// claiming more data than it carries, READDIR making no progress, ...).
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// A client-side bound was reached (bytes read, directory depth, calls
    /// per listing). Bounds keep a misbehaving server from making a helper
    /// run forever or use unbounded memory.
    #[error("limit exceeded: {0}")]
    Limit(String),
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(Arc::new(e))
    }
}

impl ClientError {
    pub(crate) fn io(kind: io::ErrorKind, msg: &'static str) -> Self {
        ClientError::Io(Arc::new(io::Error::new(kind, msg)))
    }

    /// The kind of an [`Io`](Self::Io) error.
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            ClientError::Io(e) => Some(e.kind()),
            _ => None,
        }
    }

    /// Whether a hard-mounted client would retransmit the call: the
    /// connection was lost or the call timed out. Everything else is an
    /// answer (or a broken server) and retrying would get the same again.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ClientError::Io(_) | ClientError::Timeout(_))
    }
}

//! The connection a call came on, as a program sees it: what tells it from
//! the others, and the way to send calls back on it. NFSv4.1 binds a
//! session to its connections and sends its callbacks (CB_RECALL) on the
//! client's own connection, the backchannel.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

/// One connection of the transport, as long as the process runs: the
/// transport never gives two connections the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(u64);

impl ConnectionId {
    pub const fn new(id: u64) -> Self {
        ConnectionId(id)
    }

    pub const fn get(self) -> u64 {
        self.0
    }
}

/// Sends RPC calls to the client at the other end of a connection.
pub trait Backchannel: Send + Sync {
    /// Queues `call`, a whole call message (header and arguments; the
    /// transport frames it), behind what the connection already has to
    /// send. `Ok` means queued, not received: the connection may fail
    /// before it goes out. The client's reply comes back on the
    /// connection, where the dispatcher gives it to the
    /// [`ReplyRouter`](crate::ReplyRouter) the call was registered with.
    fn send_call(&self, call: Bytes) -> Result<(), BackchannelError>;

    /// Whether the connection may still take calls (false once it is
    /// known closed): who keeps backchannels forgets the closed ones.
    fn is_open(&self) -> bool {
        true
    }
}

/// Told when the transport closes a connection, once, after its last
/// call was answered: a program that bound state to it (NFSv4.1's
/// sessions and backchannel) lets go of it. Called from the transport's
/// worker with none of the program's locks held; it must not block on
/// anything the transport itself might wait for.
pub trait ConnectionWatcher: Send + Sync {
    fn connection_closed(&self, id: ConnectionId);
}

/// Why a call was not queued on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BackchannelError {
    #[error("the connection is closed")]
    Closed,
    #[error("{queued} calls already wait to be sent on the connection")]
    Full { queued: usize },
    #[error("the server's memory budget has no room for the call now")]
    OverBudget,
    #[error("a call of {bytes} bytes is larger than a backchannel call may be ({max} bytes)")]
    TooLarge { bytes: usize, max: usize },
}

/// The connection a call came on: its id, and its backchannel, which a
/// program may keep beyond the call (it does not keep the connection
/// open).
#[derive(Clone)]
pub struct CallConnection {
    id: ConnectionId,
    backchannel: Arc<dyn Backchannel>,
}

impl CallConnection {
    pub fn new(id: ConnectionId, backchannel: Arc<dyn Backchannel>) -> Self {
        CallConnection { id, backchannel }
    }

    pub fn id(&self) -> ConnectionId {
        self.id
    }

    pub fn backchannel(&self) -> &Arc<dyn Backchannel> {
        &self.backchannel
    }
}

impl fmt::Debug for CallConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallConnection").field("id", &self.id).finish_non_exhaustive()
    }
}

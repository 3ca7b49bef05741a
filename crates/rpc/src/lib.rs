//! ONC RPC version 2 (RFC 5531) over stream transports.
//!
//! Sans-I/O: [`record::RecordAssembler`] cuts a byte stream into records,
//! [`msg`] reads and writes call and reply headers, [`Credential`] is who a
//! call comes from (flavor, principal, Unix ids, security context),
//! [`Dispatcher`] turns one call record into one reply (or none),
//! establishing the credential once and consulting the [`ReplyCache`]. The
//! server and the client library both drive these with their own sockets.
//! A program describes its procedures in one [`ProcedureTable`] (`table`).
//!
//! **Architecture invariant:** this crate knows nothing about NFS. Programs
//! plug in through [`RpcProgram`].

// Every `unsafe` of this crate is in `sys`.
#![deny(unsafe_code)]

mod connection;
mod cred;
mod dispatch;
pub mod drc;
pub mod gss;
pub mod msg;
pub mod record;
mod replies;
mod report;
#[allow(unsafe_code)]
mod sys;
mod table;

pub use connection::{Backchannel, BackchannelError, CallConnection, ConnectionId, ConnectionWatcher};
pub use cred::{Credential, Flavor, Principal, SecurityContext};
pub use dispatch::{
    AcceptError, CallContext, Dispatcher, REPLY_HEADER_BYTES_MAX, REPLY_RESULTS_BYTES_DEFAULT, ReplySegments,
    RpcProgram, VersionServedTwice, status_reply,
};
pub use drc::{ReplyCache, ReplyJournal};
pub use msg::{Auth, AuthSys};
pub use replies::{REPLIES_WAITING_MAX, ReplyRouter, ReplyRouterStats, ReplyWaiter, Routed, RouterFull};
pub use report::CallReport;
pub use table::{
    CacheClass, Call, Handled, Handler, Handlers, Procedure, ProcedureTable, ReplyBytesMax, TabledProgram,
};

/// Runs a closure with the server's own privileges. A server may run each
/// call under the caller's file-system identity, which stays on the worker
/// thread after the call; what the server reads or writes for itself from
/// a call (a keytab, its state files) must run through this, as root.
pub type Privileged = std::sync::Arc<dyn Fn(&mut dyn FnMut()) + Send + Sync>;

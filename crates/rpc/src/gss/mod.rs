//! RPCSEC_GSS version 1 (RFC 2203) with Kerberos V5 (RFC 4121), the
//! server side: [`wire`] encodes and decodes, [`server`] establishes
//! contexts through the system's GSS-API (MIT Kerberos) and checks calls,
//! [`sealer`] makes and checks one context's tokens (by GSS-API, or by
//! [`krb5`] in process from the keys GSS-API exports), [`window`] keeps
//! each context's sequence window, [`idmap`] maps a principal to a local
//! identity. The dispatcher hands every call with an RPCSEC_GSS
//! credential to [`GssServer::accept`].

pub mod idmap;
pub mod krb5;
pub mod sealer;
pub mod server;
pub mod stats;
pub mod window;
pub mod wire;

pub use crate::sys::{AcceptContext, AcceptStep, GssStatus};
pub use idmap::{IdentityCache, UserDatabase};
pub use server::{Acceptor, AcceptorError, ContextLimits, GssCall, GssServer, GssVerdict};
pub use stats::{AuthFailure, GssCounts, GssSnapshot};
pub use wire::GssService;

//! RPCSEC_GSS version 1 (RFC 2203) with Kerberos V5 (RFC 4121), the
//! server side: [`wire`] encodes and decodes, [`server`] establishes and
//! checks contexts through the system's GSS-API (MIT Kerberos, by the
//! `libgssapi` binding), [`window`] keeps each context's sequence window,
//! [`idmap`] maps a principal to a local identity. The dispatcher hands
//! every call with an RPCSEC_GSS credential to [`GssServer::accept`].

pub mod idmap;
pub mod server;
pub mod stats;
pub mod window;
pub mod wire;

pub use idmap::{IdentityCache, UserDatabase};
pub use server::{Acceptor, AcceptorError, ContextLimits, GssCall, GssServer, GssVerdict};
pub use stats::{AuthFailure, GssCounts, GssSnapshot};
pub use wire::GssService;

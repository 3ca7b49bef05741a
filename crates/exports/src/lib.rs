//! Export policy and admission, the same for every protocol Keel serves
//! (NFSv3, MOUNT, NLM, NFSv4.1): one rule holds for all of them.
//!
//! - [`policy`]: exports(5)'s options ([`ClientOptions`]: `ro`/`rw`,
//!   `sync`, squashing, `secure`, `sec=` flavors), client lists ([`ClientRule`],
//!   [`HostMatch`]) and [`squash`], the identity a caller acts as.
//! - [`ExportTable`] (`admit.rs`): the exports served now with their client
//!   lists, swapped whole by a reload; [`ExportTable::admits`], whether a host
//!   may connect at all; [`ExportTable::admit_handle`], whether a call may use
//!   the object a handle names (client list, `secure`, then the store's
//!   resolve) and as whom. Refusals are an [`AdmitError`], which each
//!   protocol maps to its own status in one place.
//! - [`pseudo`]: NFSv4's pseudo file system for one client ([`PseudoFs`]):
//!   the directories leading to the exports that admit it (by
//!   [`ExportTable::client_options`], as MNT), with MAC'd handles, fileids,
//!   READDIR cookies and a change attribute that survive reloads.
//! - [`dir_changes`]: which changes of a directory overlapped others, for
//!   the atomicity NFSv3's wcc data and NFSv4's `change_info4` claim.
//! - [`claims`]: what one client address may make the server hold of a
//!   server-wide pool (locks, lock-holding descriptions, client records,
//!   NFSv4.1 state).
//!
//! **Architecture Invariant:** knows nothing of wire protocols or RPC;
//! storage only through the `Store` trait; a handle's object is opened
//! only after its export admitted the client.

#![forbid(unsafe_code)]

mod admit;
pub mod claims;
pub mod delegations;
pub mod dir_changes;
pub mod policy;
pub mod pseudo;

pub use admit::{AdmitError, Admitted, ExportTable, ServedExport, port_meets_secure};
pub use policy::{
    Access, ClientOptions, ClientRule, HostMatch, SecFlavor, SecFlavors, Squash, options_for, squash, wants_kerberos,
};
pub use pseudo::{PseudoError, PseudoFs, PseudoKey, PseudoNodeId, Reached};

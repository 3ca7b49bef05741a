//! Wire types of NFS version 4.1 (RFC 8881 sections 16 to 18; the XDR is
//! RFC 5662) and NFS version 4.2 (RFC 7862; the XDR is RFC 7863), with XDR
//! encode and decode: the COMPOUND procedure and every operation of both
//! minor versions, the callback program's CB_COMPOUND, and file attributes.
//!
//! Both directions are implemented for every type: the server decodes
//! COMPOUND calls and encodes their replies and its callbacks, a test client
//! does the reverse.
//!
//! - [`Compound4ArgsHead`] and [`CompoundOps`] decode a COMPOUND one
//!   operation at a time, so that the server stops at the first failing
//!   operation, compares the operation count with its session's limit
//!   before decoding the rest, and answers a malformed operation with
//!   `NFS4ERR_BADXDR` at its position. [`Compound4ResEncoder`] writes the
//!   reply as the operations run. [`Compound4Args`] and [`Compound4Res`]
//!   are the whole messages, for a client.
//! - [`NfsArgop4`] and [`NfsResop4`] hold the arguments and results of
//!   every operation, declared in one table in `compound.rs`; the types of
//!   each operation are in `file.rs` (the operations NFSv4.0 already had),
//!   `session.rs` (client ID, sessions, delegations: new in 4.1),
//!   `pnfs.rs` (layouts) and `v42.rs` (new in 4.2).
//! - [`Fattr4`] is an attribute list as it is on the wire (a bitmap and the
//!   values as opaque bytes, a slice of the received record); [`Attrs4`]
//!   holds the values Keel knows, typed, and converts both ways.
//! - [`CbCompound4Args`] and [`CbCompound4Res`] (`callback.rs`) are the
//!   callback program's messages.
//!
//! Decoders check shape and size limits only. A component name longer than
//! [`NFS4_MAXNAMLEN`] still decodes (up to [`COMPONENT4_DECODE_MAX`]) so the
//! server can answer `NFS4ERR_NAMETOOLONG`; an attribute the server does not
//! support decodes as part of an opaque [`Fattr4`] and is reported by
//! [`Attrs4::from_fattr4`] as its own error; a stateid, a session or a
//! layout type is checked by the server, not here. What a client can make
//! the server allocate while decoding is bounded by the named constants
//! below, each with the reason for its value.
//!
//! Large payloads (READ reply data, WRITE call data) are [`bytes::Bytes`]
//! slices of the received record when decoded, and are spliced into the
//! output as their own segment when encoded, so neither side copies them;
//! a READ whose data the encoder does not hold (a pipe) is written by
//! [`Compound4ResEncoder::push_read_spliced`].
//!
//! **Architecture invariant:** this crate knows nothing about RPC framing,
//! authentication, state, storage or I/O; it only maps protocol structures
//! to XDR.

#![forbid(unsafe_code)]

use std::fmt;
use std::ops::{Deref, DerefMut};

use keel_xdr::{Decode, Decoder, Encode, Encoder, XdrError};

// Program numbers and versions (RFC 8881 section 16.1, RFC 5662).

/// RPC program number of NFS.
pub const NFS4_PROGRAM: u32 = 100_003;
/// The NFS version of every minor version of NFSv4.
pub const NFS_V4: u32 = 4;
/// `NFSPROC4_NULL`.
pub const NFSPROC4_NULL: u32 = 0;
/// `NFSPROC4_COMPOUND`.
pub const NFSPROC4_COMPOUND: u32 = 1;
/// NFSv4.0 (RFC 7530): not served by Keel, its ops are here only so that
/// the server can answer them.
pub const NFS4_MINOR_VERSION_0: u32 = 0;
/// NFSv4.1 (RFC 8881).
pub const NFS4_MINOR_VERSION_1: u32 = 1;
/// NFSv4.2 (RFC 7862).
pub const NFS4_MINOR_VERSION_2: u32 = 2;
/// The highest minor version this crate decodes operations of.
pub const NFS4_MINOR_VERSION_MAX: u32 = NFS4_MINOR_VERSION_2;

/// The callback program's number in RFC 5662's XDR. The real number is the
/// client's choice, sent in CREATE_SESSION's `csa_cb_program` and in
/// BACKCHANNEL_CTL; the server calls back with that one.
pub const NFS4_CALLBACK: u32 = 0x4000_0000;
/// The callback program's version.
pub const NFS_CB: u32 = 1;
/// `CB_NULL`.
pub const CB_NULL: u32 = 0;
/// `CB_COMPOUND`.
pub const CB_COMPOUND: u32 = 1;

// Sizes the RFC fixes.

/// Most bytes in a file handle.
pub const NFS4_FHSIZE: usize = 128;
/// Bytes in a `verifier4`.
pub const NFS4_VERIFIER_SIZE: usize = 8;
/// Bytes in a stateid's `other` field.
pub const NFS4_OTHER_SIZE: usize = 12;
/// Most bytes in the opaque identifiers the RFC bounds (client and server
/// owners, state owners, server scope).
pub const NFS4_OPAQUE_LIMIT: usize = 1024;
/// Bytes in a `sessionid4`.
pub const NFS4_SESSIONID_SIZE: usize = 16;
/// Bytes in a `deviceid4`.
pub const NFS4_DEVICEID4_SIZE: usize = 16;
/// `NFS4_UINT64_MAX`: a length of "to the end of the file".
pub const NFS4_UINT64_MAX: u64 = u64::MAX;
/// `NFS4_MAXFILEOFF`.
pub const NFS4_MAXFILEOFF: u64 = u64::MAX - 1;

// Keel's bounds on what a peer can make a decoder allocate or hold.

/// Longest component name the server accepts (what it reports as
/// `maxname`). Handlers compare names against this (see
/// [`Component4::check`]); decoders do not.
pub const NFS4_MAXNAMLEN: usize = 255;
/// Most bytes a `component4` may have on decode. Far above
/// [`NFS4_MAXNAMLEN`] so that a 300-byte name reaches the handler, which
/// answers `NFS4ERR_NAMETOOLONG`; rejecting it here would turn that into
/// `NFS4ERR_BADXDR`. The bound only stops absurd sizes.
pub const COMPONENT4_DECODE_MAX: usize = 4096;
/// Most bytes of a symbolic link's target (`linktext4`): the usual
/// `PATH_MAX`.
pub const LINKTEXT4_MAX: usize = 4096;
/// Most components in a `pathname4` (`fs_locations`): a 4096-byte path
/// has at most 2048 non-empty components, and no real export is more than
/// a few dozen deep; 256 keeps the vector small.
pub const PATHNAME4_COMPONENTS_MAX: usize = 256;
/// Most bytes in an owner or group name, an ACE's `who`, an implementation
/// domain or name (`utf8str_mixed`, `utf8str_cis`): the RFC's opaque limit,
/// far above `user@domain` names (Linux's idmapper stops at 128) and room
/// for Kerberos principals.
pub const UTF8STR4_MAX: usize = NFS4_OPAQUE_LIMIT;
/// Most bytes in a COMPOUND or CB_COMPOUND tag. Linux sends an empty tag;
/// knfsd refuses tags over 128 bytes (`NFSD4_MAX_TAGLEN`), and so does Keel.
pub const COMPOUND_TAG_MAX: usize = 128;
/// Most operations decoded from one COMPOUND. The Linux client asks for 8
/// per compound in CREATE_SESSION (`NFS4_MAX_OPS`) and knfsd grants 50; 128
/// leaves room for longer clients while bounding one call's work. The
/// server should also clamp the `ca_maxoperations` it grants to this.
pub const COMPOUND_OPS_MAX: u32 = 128;
/// Most operations decoded from one CB_COMPOUND (client side). Keel's server
/// sends CB_SEQUENCE and one or two more; Linux accepts two
/// (`NFS4_MAX_BACK_CHANNEL_OPS`).
pub const CB_COMPOUND_OPS_MAX: usize = 16;
/// Most 32-bit words in a `bitmap4`. Every attribute through NFSv4.2 and
/// its extensions (82) fits in 3 words; 8 (256 bits) accepts clients that
/// send padding words and future attributes while capping the vector.
pub const BITMAP4_WORDS_MAX: usize = 8;
/// Most bytes of attribute values (`attrlist4`) on decode. The values are a
/// slice of the record (not an allocation); the bound only refuses absurd
/// lengths. Real lists are a few hundred bytes, the largest (a reply with
/// `fs_locations` listing several servers) a few KiB.
pub const ATTRLIST4_MAX: usize = 64 * 1024;
/// Most bytes of a security label (`sec_label`). Linux's label limit
/// (`NFS4_MAXLABELLEN`) is 2048; SELinux contexts are under 256.
pub const SEC_LABEL4_MAX: usize = 4096;
/// Most layout types in `fs_layout_types`: five are defined (files, objects,
/// block, flexfiles, SCSI).
pub const LAYOUT_TYPES_MAX: usize = 8;
/// Most bytes of a layout-type-specific body (layout, device address,
/// layout update, hint, return and error bodies). Kept opaque here and a
/// slice of the record; a flexfiles layout with mirrors or a block layout's
/// extent list is a few KiB.
pub const LAYOUT_BODY_MAX: usize = 64 * 1024;
/// Most layouts in a LAYOUTGET reply (client side): a server returns one
/// segment per call, a few at most.
pub const LAYOUTS_MAX: usize = 64;
/// Most device IDs in a GETDEVICELIST reply (client side).
pub const DEVICE_IDS_MAX: usize = 1024;
/// Most entries in a `secinfo4` array (SECINFO reply, client side); real
/// servers list a handful of flavors.
pub const SECINFO4_MAX: usize = 64;
/// Most security parameter sets in CREATE_SESSION and BACKCHANNEL_CTL:
/// Linux sends one; a client has no use for more than a few.
pub const CB_SEC_PARMS_MAX: usize = 8;
/// Most bytes of a GSS mechanism OID (`sec_oid4`): the Kerberos v5 OID is
/// 9 bytes in DER.
pub const SEC_OID4_MAX: usize = 128;
/// Most OIDs in a list of algorithms (SSV state protection).
pub const SEC_OIDS_MAX: usize = 16;
/// Most bytes of an RPCSEC_GSS handle (`gsshandle4_t`): RFC 5531's
/// `MAX_AUTH_BYTES`, the size of any RPC credential.
pub const GSS_HANDLE_MAX: usize = 400;
/// Most GSS handles in an SSV reply (client side).
pub const GSS_HANDLES_MAX: usize = 16;
/// Most bytes in an AUTH_SYS machine name (RFC 5531).
pub const AUTHSYS_MACHINENAME_MAX: usize = 255;
/// Most supplementary groups in AUTH_SYS parameters (RFC 5531).
pub const AUTHSYS_GIDS_MAX: usize = 16;
/// Most bytes in a `netaddr4` network id or universal address: "tcp6" and
/// an IPv6 address with port are under 64.
pub const NETADDR4_STRING_MAX: usize = 128;
/// Most stateids in TEST_STATEID (and status codes in its reply). A client
/// tests the stateids of one file system after a revocation; each takes 16
/// bytes of the request, which the session's request size also bounds.
pub const TEST_STATEIDS_MAX: usize = 1024;
/// Most servers in COPY's source list and COPY_NOTIFY's reply.
pub const NETLOCS_MAX: usize = 16;
/// Most entries in `fs_locations` (locations, and server names in each).
pub const FS_LOCATIONS_MAX: usize = 16;
/// Most device errors in one LAYOUTERROR.
pub const DEVICE_ERRORS_MAX: usize = 64;
/// Most bytes of the SSV or a digest in SET_SSV: SSVs are hash-sized
/// (at most 64 bytes for SHA-512).
pub const SSV_MAX: usize = NFS4_OPAQUE_LIMIT;
/// Most bytes of data a WRITE call may carry on decode. The server
/// advertises a smaller `maxwrite`; this only caps what a peer can make it
/// hold (the data is a slice of the record).
pub const WRITE_DATA_MAX: usize = 1 << 20;
/// Most bytes of data a READ or READ_PLUS reply may carry on decode (client
/// side): above any sane `maxread`.
pub const READ_DATA_MAX: usize = 1 << 24;
/// Most bytes of WRITE_SAME's pattern: a block of at most the write size.
pub const WRITE_SAME_PATTERN_MAX: usize = WRITE_DATA_MAX;
/// Most segments (data or hole) in a READ_PLUS reply (client side).
pub const READ_PLUS_SEGMENTS_MAX: usize = 1024;
/// Most entries in a READDIR reply (client side); each entry also takes
/// at least 24 bytes of the record.
pub const READDIR_ENTRIES_MAX: usize = 1 << 16;
/// Most referring call lists, and calls in each, in CB_SEQUENCE: bounded by
/// the slots of the client's sessions.
pub const REFERRING_CALLS_MAX: usize = 64;
/// Most changes in one CB_NOTIFY or CB_NOTIFY_DEVICEID.
pub const NOTIFY4_MAX: usize = 64;
/// Most bytes of one change's values in CB_NOTIFY (`notifylist4`).
pub const NOTIFYLIST4_MAX: usize = 64 * 1024;

#[macro_use]
mod macros;

mod attr;
mod callback;
mod compound;
mod file;
mod pnfs;
mod session;
mod status;
mod types;
mod v42;

pub use attr::*;
pub use callback::*;
pub use compound::*;
pub use file::*;
pub use pnfs::*;
pub use session::*;
pub use status::*;
pub use types::*;
pub use v42::*;

/// A counted XDR array (`T<>`) of at most `MAX` elements on decode.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Array<T, const MAX: usize>(pub Vec<T>);

impl<T, const MAX: usize> Array<T, MAX> {
    /// Most elements accepted on decode.
    pub const DECODE_MAX: usize = MAX;

    pub fn new() -> Self {
        Array(Vec::new())
    }
}

impl<T, const MAX: usize> Default for Array<T, MAX> {
    fn default() -> Self {
        Array(Vec::new())
    }
}

impl<T: fmt::Debug, const MAX: usize> fmt::Debug for Array<T, MAX> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T, const MAX: usize> Deref for Array<T, MAX> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T, const MAX: usize> DerefMut for Array<T, MAX> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

impl<T, const MAX: usize> From<Vec<T>> for Array<T, MAX> {
    fn from(v: Vec<T>) -> Self {
        Array(v)
    }
}

impl<T, const MAX: usize> FromIterator<T> for Array<T, MAX> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Array(iter.into_iter().collect())
    }
}

impl<T: Encode, const MAX: usize> Encode for Array<T, MAX> {
    fn encode(&self, enc: &mut Encoder) {
        encode_array(enc, &self.0);
    }
}

impl<T: Decode, const MAX: usize> Decode for Array<T, MAX> {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.array(MAX).map(Array)
    }
}

/// Writes `items` as an XDR counted array (`T<>`).
pub(crate) fn encode_array<T: Encode>(enc: &mut Encoder, items: &[T]) {
    enc.u32(u32::try_from(items.len()).expect("XDR array longer than 2^32 items"));
    for item in items {
        item.encode(enc);
    }
}

/// Writes `items` as an XDR linked list: `TRUE item` for each, then `FALSE`.
pub(crate) fn encode_list<T: Encode>(enc: &mut Encoder, items: &[T]) {
    for item in items {
        enc.bool(true);
        item.encode(enc);
    }
    enc.bool(false);
}

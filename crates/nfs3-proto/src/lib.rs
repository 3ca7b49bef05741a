//! Wire types of NFS version 3 and MOUNT version 3 (RFC 1813) and of the
//! portmapper version 2 (RFC 1833 section 3), with XDR encode and decode.
//!
//! Both directions are implemented for every type because the crate is
//! shared by the server (decodes calls, encodes replies) and by the client
//! library (the reverse).
//!
//! Decoders check shape and size limits only: a name longer than
//! [`NFS3_MAXNAMLEN`] still decodes (up to [`FILENAME_DECODE_MAX`]) so that
//! the server can answer `NFS3ERR_NAMETOOLONG` instead of rejecting the call
//! as garbage. Meaning-level checks belong to the server's handlers.
//!
//! Large payloads (READ reply data, WRITE call data) are [`bytes::Bytes`]
//! slices of the received record when decoded, and are spliced into the
//! output as their own segment when encoded, so neither side copies them.
//!
//! **Architecture invariant:** this crate knows nothing about RPC framing,
//! authentication or I/O; it only maps protocol structures to XDR.

#![forbid(unsafe_code)]

/// A procedure-number enum from its variants, numbers and RFC names, in
/// number order: `ALL`, `from_u32`, `name` and `Display` come with it.
macro_rules! procedures {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $number:literal $text:literal),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($variant = $number),*
        }

        impl $name {
            /// Every procedure, in procedure-number order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The procedure with number `n`, if there is one.
            pub fn from_u32(n: u32) -> Option<Self> {
                Self::ALL.get(usize::try_from(n).ok()?).copied()
            }

            /// The RFC's name without its prefix, e.g. `"WRITE"`.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text),*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

pub mod mount;
pub mod nfs3;
pub mod portmap;

pub use mount::MountProc;
pub use nfs3::*;
pub use portmap::PmapProc;

/// RPC program number of NFS.
pub const NFS_PROGRAM: u32 = 100_003;
/// The NFS version this crate speaks.
pub const NFS_V3: u32 = 3;
/// RPC program number of the MOUNT protocol.
pub const MOUNT_PROGRAM: u32 = 100_005;
/// The MOUNT version that goes with NFSv3.
pub const MOUNT_V3: u32 = 3;
/// RPC program number of the portmapper (rpcbind).
pub const PMAP_PROGRAM: u32 = 100_000;
/// The portmapper version this crate speaks.
pub const PMAP_V2: u32 = 2;
/// Well-known port of the portmapper.
pub const PMAP_PORT: u16 = 111;
/// Protocol number of TCP in portmapper mappings.
pub const IPPROTO_TCP: u32 = 6;
/// Protocol number of UDP in portmapper mappings.
pub const IPPROTO_UDP: u32 = 17;

/// Writes `items` as an XDR linked list: `TRUE item` for each, then `FALSE`.
pub(crate) fn encode_list<T: keel_xdr::Encode>(enc: &mut keel_xdr::Encoder, items: &[T]) {
    for item in items {
        enc.bool(true);
        item.encode(enc);
    }
    enc.bool(false);
}

/// Writes `items` as an XDR counted array (`T<>`).
pub(crate) fn encode_array<T: keel_xdr::Encode>(enc: &mut keel_xdr::Encoder, items: &[T]) {
    enc.u32(u32::try_from(items.len()).expect("XDR array longer than 2^32 items"));
    for item in items {
        item.encode(enc);
    }
}

/// Most entries accepted in a linked list decoded by a client (directory
/// entries, mount and export lists, portmapper dumps). The decoder also
/// needs four bytes per entry, so the record size is the practical bound.
pub const LIST_DECODE_MAX: usize = 1 << 20;

/// Most groups accepted in one export's group list.
pub const GROUPS_DECODE_MAX: usize = 1 << 16;

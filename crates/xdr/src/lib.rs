//! XDR (RFC 4506) primitives.
//!
//! [`Decoder`] reads from a shared [`Bytes`] buffer so that opaque payloads
//! (WRITE data, READ replies in a client) are slices of the received record,
//! never copies. Every variable-length item is read with an explicit upper
//! bound, and a length is checked against the bytes that are really there
//! before anything is allocated: a peer that lies about a length gets an
//! error, not an allocation.
//!
//! [`Encoder`] writes into a growable buffer but can splice in large shared
//! payloads as separate segments, so a reply is a list of buffers handed to
//! one vectored write (`sendmsg`, `writev`) as they are. A payload the encoder does not hold (a pipe of
//! file data, say) is carried as an opaque [`Spliced`] segment of known
//! length, for the transport to write.
//!
//! **Architecture invariant:** this crate knows nothing about RPC, NFS or I/O.

#![forbid(unsafe_code)]

mod decode;
mod encode;

pub use decode::Decoder;
pub use encode::{Encoder, Segment, Spliced};

use bytes::Bytes;

/// Why a decode failed. Encoding cannot fail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XdrError {
    #[error("truncated: needed {needed} more bytes, {remaining} left")]
    Truncated { needed: usize, remaining: usize },
    #[error("length {len} exceeds the limit of {max}")]
    TooLong { len: usize, max: usize },
    #[error("invalid value {value} for {what}")]
    InvalidValue { what: &'static str, value: u32 },
}

/// A value that can be written in XDR.
pub trait Encode {
    fn encode(&self, enc: &mut Encoder);
}

/// A value that can be read from XDR, within its own bounds.
pub trait Decode: Sized {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError>;
}

/// Bytes of padding that follow `len` bytes of opaque data.
pub const fn padding(len: usize) -> usize {
    (4 - (len & 3)) & 3
}

/// Variable-length opaque data or string, at most `MAX` bytes on the wire.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Opaque<const MAX: usize>(pub Bytes);

impl<const MAX: usize> Opaque<MAX> {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl<const MAX: usize> std::fmt::Debug for Opaque<MAX> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match std::str::from_utf8(&self.0) {
            Ok(s) if self.0.len() <= 64 => write!(f, "{s:?}"),
            _ => write!(f, "<{} bytes>", self.0.len()),
        }
    }
}

impl<const MAX: usize> From<&[u8]> for Opaque<MAX> {
    fn from(b: &[u8]) -> Self {
        Opaque(Bytes::copy_from_slice(b))
    }
}

impl<const MAX: usize> From<&str> for Opaque<MAX> {
    fn from(s: &str) -> Self {
        Opaque(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl<const MAX: usize> From<Bytes> for Opaque<MAX> {
    fn from(b: Bytes) -> Self {
        Opaque(b)
    }
}

impl<const MAX: usize> Encode for Opaque<MAX> {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque(&self.0);
    }
}

impl<const MAX: usize> Decode for Opaque<MAX> {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.opaque(MAX).map(Opaque)
    }
}

impl Encode for u32 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(*self);
    }
}
impl Decode for u32 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.u32()
    }
}
impl Encode for i32 {
    fn encode(&self, enc: &mut Encoder) {
        enc.i32(*self);
    }
}
impl Decode for i32 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.i32()
    }
}
impl Encode for u64 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u64(*self);
    }
}
impl Decode for u64 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.u64()
    }
}
impl Encode for i64 {
    fn encode(&self, enc: &mut Encoder) {
        enc.i64(*self);
    }
}
impl Decode for i64 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.i64()
    }
}
impl Encode for bool {
    fn encode(&self, enc: &mut Encoder) {
        enc.bool(*self);
    }
}
impl Decode for bool {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.bool()
    }
}
impl<const N: usize> Encode for [u8; N] {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque_fixed(self);
    }
}
impl<const N: usize> Decode for [u8; N] {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.opaque_fixed()
    }
}
impl Encode for () {
    fn encode(&self, _: &mut Encoder) {}
}
impl Decode for () {
    fn decode(_: &mut Decoder) -> Result<Self, XdrError> {
        Ok(())
    }
}

/// XDR optional-data (`*T`): a boolean, then the value when it is true.
impl<T: Encode> Encode for Option<T> {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Some(v) => {
                enc.bool(true);
                v.encode(enc);
            }
            None => enc.bool(false),
        }
    }
}
impl<T: Decode> Decode for Option<T> {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        if dec.bool()? { Ok(Some(T::decode(dec)?)) } else { Ok(None) }
    }
}

/// Defines a newtype over [`bytes::Bytes`] for a bounded XDR `opaque<>` or
/// `string<>` that decodes with at most `$max` bytes (the caller depends on
/// `bytes`). Shown as text when it is short UTF-8.
#[macro_export]
macro_rules! bytes_newtype {
    ($(#[$meta:meta])* $name:ident, $max:expr) => {
        $(#[$meta])*
        #[derive(Clone, Default, PartialEq, Eq, Hash)]
        pub struct $name(pub ::bytes::Bytes);

        impl $name {
            /// Most bytes accepted on decode.
            pub const DECODE_MAX: usize = $max;

            /// The raw bytes (not necessarily UTF-8).
            pub fn as_bytes(&self) -> &[u8] {
                &self.0
            }

            /// The bytes as UTF-8, if they are.
            pub fn as_str(&self) -> Option<&str> {
                std::str::from_utf8(&self.0).ok()
            }

            pub fn len(&self) -> usize {
                self.0.len()
            }

            pub fn is_empty(&self) -> bool {
                self.0.is_empty()
            }

            /// Encoded size: length word, bytes, padding.
            pub fn xdr_len(&self) -> usize {
                4 + self.0.len() + $crate::padding(self.0.len())
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.as_str() {
                    Some(s) if s.len() <= 64 => write!(f, "{s:?}"),
                    _ => write!(f, "<{} bytes>", self.0.len()),
                }
            }
        }

        impl From<::bytes::Bytes> for $name {
            fn from(b: ::bytes::Bytes) -> Self {
                $name(b)
            }
        }

        impl From<&[u8]> for $name {
            fn from(b: &[u8]) -> Self {
                $name(::bytes::Bytes::copy_from_slice(b))
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(::bytes::Bytes::copy_from_slice(s.as_bytes()))
            }
        }

        impl From<Vec<u8>> for $name {
            fn from(v: Vec<u8>) -> Self {
                $name(::bytes::Bytes::from(v))
            }
        }

        impl AsRef<[u8]> for $name {
            fn as_ref(&self) -> &[u8] {
                &self.0
            }
        }

        impl $crate::Encode for $name {
            fn encode(&self, enc: &mut $crate::Encoder) {
                enc.opaque(&self.0);
            }
        }

        impl $crate::Decode for $name {
            fn decode(dec: &mut $crate::Decoder) -> Result<Self, $crate::XdrError> {
                dec.opaque($max).map($name)
            }
        }
    };
}

/// Implements [`Encode`] and [`Decode`] for a struct whose XDR form is its
/// fields in the order listed.
#[macro_export]
macro_rules! xdr_struct {
    ($name:ty { $($field:ident),* $(,)? }) => {
        impl $crate::Encode for $name {
            fn encode(&self, enc: &mut $crate::Encoder) {
                $( $crate::Encode::encode(&self.$field, enc); )*
            }
        }
        impl $crate::Decode for $name {
            fn decode(dec: &mut $crate::Decoder) -> Result<Self, $crate::XdrError> {
                Ok(Self { $( $field: $crate::Decode::decode(dec)?, )* })
            }
        }
    };
}

/// Implements [`Encode`] and [`Decode`] for a fieldless enum with explicit
/// `u32` discriminants (an XDR enum). Unknown values are a decode error.
#[macro_export]
macro_rules! xdr_enum {
    ($name:ident { $($variant:ident),* $(,)? }) => {
        impl $crate::Encode for $name {
            fn encode(&self, enc: &mut $crate::Encoder) {
                enc.u32(*self as u32);
            }
        }
        impl $crate::Decode for $name {
            fn decode(dec: &mut $crate::Decoder) -> Result<Self, $crate::XdrError> {
                let v = dec.u32()?;
                $( if v == $name::$variant as u32 { return Ok($name::$variant); } )*
                Err($crate::XdrError::InvalidValue { what: stringify!($name), value: v })
            }
        }
        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
        }
    };
}

#[cfg(test)]
mod tests;

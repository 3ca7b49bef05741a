//! The declarative macros that write the mechanical parts: one place per
//! type, from which its Rust form and its XDR both come.

/// Discards `$ty` and expands to the pattern `$v`: lets a macro write a
/// binding only for variants that carry a value.
macro_rules! bind {
    ($v:ident $ty:ty) => {
        $v
    };
}

/// Declares structs whose XDR form is their fields in order (with the
/// derives every wire type has) and implements `Encode` and `Decode`.
macro_rules! xdr_structs {
    ($($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty),* $(,)? })*) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }
        keel_xdr::xdr_struct!($name { $($field),* });
    )*};
}

/// Declares fieldless XDR enums with explicit values (the first variant is
/// the `Default`) and implements `Encode` and `Decode` (unknown values are
/// a decode error) and `ALL`.
macro_rules! xdr_enums {
    ($($(#[$meta:meta])* $name:ident {
        $(#[$fmeta:meta])* $first:ident = $fv:literal $(, $(#[$vmeta:meta])* $variant:ident = $value:literal)* $(,)?
    })*) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub enum $name {
            #[default]
            $(#[$fmeta])*
            $first = $fv,
            $($(#[$vmeta])* $variant = $value,)*
        }
        keel_xdr::xdr_enum!($name { $first $(, $variant)* });
    )*};
}

/// Declares an XDR discriminated union as an enum, one variant per arm,
/// and implements `Encode` and `Decode`. Each arm is `DISCRIMINANT =>
/// Variant` (a void arm) or `DISCRIMINANT => Variant(Type)` (with the
/// variant's attributes after the arrow); discriminants
/// are expressions that convert `as u32` (an enum variant, a constant,
/// `true`). A discriminant no arm names is a decode error, so a union with
/// a `default:` arm lists its values or is written by hand.
macro_rules! xdr_union {
    ($(#[$meta:meta])* $name:ident {
        $($disc:expr => $(#[$vmeta:meta])* $variant:ident $(($ty:ty))?),* $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant $(($ty))?,)*
        }

        impl $name {
            /// The discriminant that goes on the wire.
            pub fn discriminant(&self) -> u32 {
                match self {
                    $(Self::$variant $((bind!(_v $ty)))? => $disc as u32,)*
                }
            }
        }

        impl keel_xdr::Encode for $name {
            fn encode(&self, enc: &mut keel_xdr::Encoder) {
                enc.u32(self.discriminant());
                match self {
                    $(Self::$variant $((bind!(v $ty)))? => { $(<$ty as keel_xdr::Encode>::encode(v, enc);)? })*
                }
            }
        }

        impl keel_xdr::Decode for $name {
            fn decode(dec: &mut keel_xdr::Decoder) -> Result<Self, keel_xdr::XdrError> {
                let value = dec.u32()?;
                $(if value == $disc as u32 {
                    return Ok(Self::$variant $((<$ty as keel_xdr::Decode>::decode(dec)?))?);
                })*
                Err(keel_xdr::XdrError::InvalidValue { what: stringify!($name), value })
            }
        }
    };
}

/// Declares a result union switched on `nfsstat4` whose `NFS4_OK` arm
/// carries `Ok`'s type, some error statuses carry a value of their own
/// (`STATUS => Variant(Type)`), and every other status is void (`Fail`).
macro_rules! status_union {
    ($(#[$meta:meta])* $name:ident { Ok($ok:ty) $(, $status:ident => $variant:ident($ty:ty))* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            Ok($ok),
            $($variant($ty),)*
            /// Any status without an arm of its own (never `NFS4_OK`).
            Fail($crate::Nfsstat4),
        }

        impl $crate::OpResult for $name {
            fn status(&self) -> $crate::Nfsstat4 {
                match self {
                    Self::Ok(_) => $crate::Nfsstat4::Ok,
                    $(Self::$variant(_) => $crate::Nfsstat4::$status,)*
                    Self::Fail(s) => *s,
                }
            }

            fn failed(status: $crate::Nfsstat4) -> Self {
                debug_assert!(status != $crate::Nfsstat4::Ok $(&& status != $crate::Nfsstat4::$status)*, "{status} needs a value");
                Self::Fail(status)
            }
        }

        impl keel_xdr::Encode for $name {
            fn encode(&self, enc: &mut keel_xdr::Encoder) {
                keel_xdr::Encode::encode(&$crate::OpResult::status(self), enc);
                match self {
                    Self::Ok(v) => keel_xdr::Encode::encode(v, enc),
                    $(Self::$variant(v) => keel_xdr::Encode::encode(v, enc),)*
                    Self::Fail(_) => {}
                }
            }
        }

        impl keel_xdr::Decode for $name {
            fn decode(dec: &mut keel_xdr::Decoder) -> Result<Self, keel_xdr::XdrError> {
                Ok(match <$crate::Nfsstat4 as keel_xdr::Decode>::decode(dec)? {
                    $crate::Nfsstat4::Ok => Self::Ok(keel_xdr::Decode::decode(dec)?),
                    $($crate::Nfsstat4::$status => Self::$variant(keel_xdr::Decode::decode(dec)?),)*
                    status => Self::Fail(status),
                })
            }
        }
    };
}

/// Declares an operation table: the operation-number enum, and the
/// argument and result unions switched on it (`nfs_opnum4`, `nfs_argop4`,
/// `nfs_resop4`, and the callback program's three). Each row is
/// `Variant = NUMBER "NAME", minor M, ArgsType => ResultType;`, where `M`
/// is the minor version that introduced the operation. The ILLEGAL
/// operation's number and name come first.
macro_rules! operations {
    (
        $(#[$nmeta:meta])* $num:ident;
        $(#[$ameta:meta])* $argop:ident;
        $(#[$rmeta:meta])* $resop:ident;
        Illegal = $illegal:literal $itext:literal;
        $($variant:ident = $n:literal $text:literal, minor $minor:literal, $args:ty => $res:ty;)*
    ) => {
        $(#[$nmeta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $num {
            $($variant = $n,)*
            Illegal = $illegal,
        }

        impl $num {
            /// Every operation, in number order, ILLEGAL last.
            pub const ALL: &'static [$num] = &[$($num::$variant,)* $num::Illegal];

            /// The operation with number `n`, if there is one.
            pub fn from_u32(n: u32) -> Option<Self> {
                match n {
                    $($n => Some($num::$variant),)*
                    $illegal => Some($num::Illegal),
                    _ => None,
                }
            }

            /// The RFC's name without its prefix, e.g. `"EXCHANGE_ID"`.
            pub fn name(self) -> &'static str {
                match self {
                    $($num::$variant => $text,)*
                    $num::Illegal => $itext,
                }
            }

            /// The minor version that introduced the operation.
            pub fn minorversion(self) -> u32 {
                match self {
                    $($num::$variant => $minor,)*
                    $num::Illegal => 0,
                }
            }
        }

        impl std::fmt::Display for $num {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl keel_xdr::Encode for $num {
            fn encode(&self, enc: &mut keel_xdr::Encoder) {
                enc.u32(*self as u32);
            }
        }

        impl keel_xdr::Decode for $num {
            fn decode(dec: &mut keel_xdr::Decoder) -> Result<Self, keel_xdr::XdrError> {
                let value = dec.u32()?;
                $num::from_u32(value).ok_or(keel_xdr::XdrError::InvalidValue { what: stringify!($num), value })
            }
        }

        $(#[$ameta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $argop {
            $($variant($args),)*
            /// An operation number that names no operation of the call's
            /// minor version (including ILLEGAL's own), kept as it was sent:
            /// the server answers `NFS4ERR_OP_ILLEGAL` with the ILLEGAL
            /// result. Its arguments, whatever they are, are not read.
            Illegal(u32),
        }

        impl $argop {
            pub fn opnum(&self) -> $num {
                match self {
                    $($argop::$variant(_) => $num::$variant,)*
                    $argop::Illegal(_) => $num::Illegal,
                }
            }

            /// Decodes one operation of a call of minor version
            /// `minorversion`. An operation that minor version does not
            /// have (an unknown number, or one a later minor version added)
            /// is [`Illegal`](Self::Illegal), and nothing after its number
            /// is read.
            pub fn decode_op(dec: &mut keel_xdr::Decoder, minorversion: u32) -> Result<Self, keel_xdr::XdrError> {
                let n = dec.u32()?;
                match $num::from_u32(n).filter(|op| op.minorversion() <= minorversion) {
                    $(Some($num::$variant) => Ok($argop::$variant(keel_xdr::Decode::decode(dec)?)),)*
                    Some($num::Illegal) | None => Ok($argop::Illegal(n)),
                }
            }
        }

        impl keel_xdr::Encode for $argop {
            fn encode(&self, enc: &mut keel_xdr::Encoder) {
                match self {
                    $($argop::$variant(args) => {
                        enc.u32($n);
                        keel_xdr::Encode::encode(args, enc);
                    })*
                    $argop::Illegal(n) => enc.u32(*n),
                }
            }
        }

        /// Decodes with every operation of every minor version known.
        impl keel_xdr::Decode for $argop {
            fn decode(dec: &mut keel_xdr::Decoder) -> Result<Self, keel_xdr::XdrError> {
                $argop::decode_op(dec, u32::MAX)
            }
        }

        $(#[$rmeta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $resop {
            $($variant($res),)*
            /// ILLEGAL's result: its status (`NFS4ERR_OP_ILLEGAL`).
            Illegal($crate::Nfsstat4),
        }

        impl $resop {
            pub fn opnum(&self) -> $num {
                match self {
                    $($resop::$variant(_) => $num::$variant,)*
                    $resop::Illegal(_) => $num::Illegal,
                }
            }

            /// The operation's status.
            pub fn status(&self) -> $crate::Nfsstat4 {
                match self {
                    $($resop::$variant(res) => $crate::OpResult::status(res),)*
                    $resop::Illegal(status) => *status,
                }
            }

            /// The result of operation `op` that failed with `status` and
            /// carries nothing else (see [`OpResult::failed`](crate::OpResult::failed)).
            pub fn failed(op: $num, status: $crate::Nfsstat4) -> Self {
                match op {
                    $($num::$variant => $resop::$variant($crate::OpResult::failed(status)),)*
                    $num::Illegal => $resop::Illegal(status),
                }
            }
        }

        impl keel_xdr::Encode for $resop {
            fn encode(&self, enc: &mut keel_xdr::Encoder) {
                enc.u32(self.opnum() as u32);
                match self {
                    $($resop::$variant(res) => keel_xdr::Encode::encode(res, enc),)*
                    $resop::Illegal(status) => keel_xdr::Encode::encode(status, enc),
                }
            }
        }

        impl keel_xdr::Decode for $resop {
            fn decode(dec: &mut keel_xdr::Decoder) -> Result<Self, keel_xdr::XdrError> {
                Ok(match <$num as keel_xdr::Decode>::decode(dec)? {
                    $($num::$variant => $resop::$variant(keel_xdr::Decode::decode(dec)?),)*
                    $num::Illegal => $resop::Illegal(keel_xdr::Decode::decode(dec)?),
                })
            }
        }
    };
}

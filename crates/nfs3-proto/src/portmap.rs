//! Portmapper version 2 (RFC 1833 section 3): maps (program, version,
//! protocol) to a port.
//!
//! Procedure arguments and results, by procedure:
//! NULL `()` → `()`; SET [`Mapping`] → `bool`; UNSET [`Mapping`] → `bool`;
//! GETPORT [`Mapping`] (port ignored) → `u32` port (0 if unregistered);
//! DUMP `()` → [`Pmaplist`]; CALLIT [`CallArgs`] → [`CallResult`].

use bytes::Bytes;
use keel_xdr::{Decode, Decoder, Encode, Encoder, XdrError, xdr_struct};

use crate::{LIST_DECODE_MAX, encode_list};

/// Most bytes of procedure arguments or results carried by CALLIT on
/// decode. The RFC leaves them unbounded; CALLIT is a UDP broadcast
/// mechanism, so nothing legitimate exceeds a datagram.
pub const CALLIT_DATA_MAX: usize = 1 << 16;

procedures! {
    /// Portmapper v2 procedure numbers.
    PmapProc {
        Null = 0 "NULL",
        Set = 1 "SET",
        Unset = 2 "UNSET",
        Getport = 3 "GETPORT",
        Dump = 4 "DUMP",
        Callit = 5 "CALLIT",
    }
}

/// `mapping`: `prot` is [`crate::IPPROTO_TCP`] or [`crate::IPPROTO_UDP`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Mapping {
    pub prog: u32,
    pub vers: u32,
    pub prot: u32,
    pub port: u32,
}
xdr_struct!(Mapping { prog, vers, prot, port });

/// `pmaplist`: the DUMP reply, an XDR linked list of [`Mapping`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Pmaplist(pub Vec<Mapping>);

impl Encode for Pmaplist {
    fn encode(&self, enc: &mut Encoder) {
        encode_list(enc, &self.0);
    }
}

impl Decode for Pmaplist {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.list(LIST_DECODE_MAX).map(Pmaplist)
    }
}

/// `call_args`: CALLIT's request to call `prog`/`vers`/`proc` with the
/// already-encoded `args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CallArgs {
    pub prog: u32,
    pub vers: u32,
    pub proc: u32,
    pub args: Bytes,
}

impl Encode for CallArgs {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.prog);
        enc.u32(self.vers);
        enc.u32(self.proc);
        enc.opaque_shared(self.args.clone());
    }
}

impl Decode for CallArgs {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(CallArgs { prog: dec.u32()?, vers: dec.u32()?, proc: dec.u32()?, args: dec.opaque(CALLIT_DATA_MAX)? })
    }
}

/// `call_result`: the port of the called program and its encoded result.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CallResult {
    pub port: u32,
    pub res: Bytes,
}

impl Encode for CallResult {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.port);
        enc.opaque_shared(self.res.clone());
    }
}

impl Decode for CallResult {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(CallResult { port: dec.u32()?, res: dec.opaque(CALLIT_DATA_MAX)? })
    }
}

//! The decoding oracle behind the `compound4` fuzz target, shared with the
//! replay test `crates/nfs4-proto/tests/fuzz_check.rs` (both include this
//! file with `#[path]`), so CI runs it on stable without cargo-fuzz.
//!
//! An input is one control byte and then the arguments of an NFSv4 call
//! (no RPC header). The control byte's low two bits pick what the bytes are
//! read as:
//!
//! 0. a COMPOUND, read as the server reads it: the head, then one
//!    operation at a time with `CompoundOps` until it stops; the attribute
//!    lists of SETATTR, CREATE, OPEN, VERIFY and NVERIFY are read as the
//!    handlers read them;
//! 1. a COMPOUND reply, as a client reads it, with the attribute lists of
//!    its GETATTR results;
//! 2. a CB_COMPOUND call; 3. a CB_COMPOUND reply.
//!
//! Everything that decodes is encoded again and must decode to the same
//! value, from an encoding exactly as long as the bytes it came from.
//! Decode errors are fine; panics and broken invariants are the bugs.

use std::fmt::Debug;

use bytes::Bytes;
use keel_nfs4_proto::*;
use keel_xdr::{Decode, Decoder, Encode, Encoder};

/// What an input came to, for tests that check inputs reach deep enough.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Operations decoded (of any of the four messages).
    pub ops: usize,
    /// Operations that failed to decode.
    pub op_errors: usize,
    /// Attribute lists read in full.
    pub attr_lists: usize,
}

/// Checks one fuzz input.
pub fn check(data: &[u8]) -> Outcome {
    let mut out = Outcome::default();
    let Some((&control, rest)) = data.split_first() else { return out };
    let bytes = Bytes::copy_from_slice(rest);
    match control & 3 {
        0 => compound_call(bytes, &mut out),
        1 => {
            if let Some(reply) = whole::<Compound4Res>(bytes) {
                out.ops += reply.resarray.len();
                for res in &reply.resarray {
                    if let NfsResop4::Getattr(Nfs4Result::Ok(ok)) = res {
                        attrs(&ok.obj_attributes, AttrUse::Reply, &mut out);
                    }
                }
            }
        }
        2 => out.ops += whole::<CbCompound4Args>(bytes).map_or(0, |c| c.argarray.len()),
        _ => out.ops += whole::<CbCompound4Res>(bytes).map_or(0, |c| c.resarray.len()),
    }
    out
}

/// Control byte that makes [`check`] read the rest as message `kind`
/// (0 to 3, as listed above).
pub fn control_byte(kind: u8) -> u8 {
    kind & 3
}

fn compound_call(bytes: Bytes, out: &mut Outcome) {
    let mut dec = Decoder::new(bytes.clone());
    let Ok(head) = Compound4ArgsHead::decode(&mut dec) else { return };
    let mut ops = CompoundOps::new(&head);
    let mut decoded = Vec::new();
    loop {
        let start = dec.position();
        let Some(op) = ops.next_op(&mut dec) else { break };
        match op {
            Ok(op) => {
                // Read back as of the call's minor version: an operation of a
                // later one is ILLEGAL there.
                let encoded = encode(&op);
                assert_eq!(encoded.len(), dec.position() - start, "{op:?}");
                let mut again = Decoder::new(encoded);
                assert_eq!(NfsArgop4::decode_op(&mut again, head.minorversion).as_ref(), Ok(&op));
                assert_eq!(again.remaining(), 0);
                for fattr in attr_lists(&op) {
                    attrs(fattr.0, fattr.1, out);
                }
                out.ops += 1;
                decoded.push(op);
            }
            Err(e) => {
                out.op_errors += 1;
                assert_eq!(e.index() as usize, decoded.len());
                let reply = e.reply();
                assert_eq!(reply.status(), e.status());
                let again: NfsResop4 = decode_all(encode(&reply)).expect("an error reply decodes");
                assert_eq!(again, reply);
            }
        }
        assert!(ops.index() <= COMPOUND_OPS_MAX + 1);
    }
    assert!(decoded.iter().rev().skip(1).all(|op| op.opnum() != OpNum::Illegal), "ILLEGAL ends the decoding");
    // The whole-message decoder agrees with the incremental one.
    if let Ok(whole) = decode_all::<Compound4Args>(bytes.clone()) {
        assert_eq!(whole.argarray, decoded);
        assert_eq!(encode(&whole).len(), bytes.len());
    }
}

/// The attribute lists of an operation, and what they are for.
fn attr_lists(op: &NfsArgop4) -> Vec<(&Fattr4, AttrUse)> {
    match op {
        NfsArgop4::Setattr(a) => vec![(&a.obj_attributes, AttrUse::Set)],
        NfsArgop4::Create(a) => vec![(&a.createattrs, AttrUse::Set)],
        NfsArgop4::Verify(a) => vec![(&a.obj_attributes, AttrUse::Verify)],
        NfsArgop4::Nverify(a) => vec![(&a.obj_attributes, AttrUse::Verify)],
        NfsArgop4::Open(a) => match &a.openhow {
            Openflag4::Open4Create(Createhow4::Unchecked4(f) | Createhow4::Guarded4(f)) => vec![(f, AttrUse::Set)],
            Openflag4::Open4Create(Createhow4::Exclusive4_1(v)) => vec![(&v.cva_attrs, AttrUse::Set)],
            _ => vec![],
        },
        _ => vec![],
    }
}

/// Reads an attribute list; what reads must write back the same values
/// under the same bits (padding bytes may differ: they are not checked).
fn attrs(fattr: &Fattr4, usage: AttrUse, out: &mut Outcome) {
    let Ok(values) = Attrs4::from_fattr4(fattr, usage) else { return };
    out.attr_lists += 1;
    let again = values.to_fattr4(&fattr.attrmask);
    assert_eq!(again.attrmask.iter().collect::<Vec<_>>(), fattr.attrmask.iter().collect::<Vec<_>>());
    assert_eq!(again.attr_vals.len(), fattr.attr_vals.len());
    assert_eq!(Attrs4::from_fattr4(&again, usage).as_ref(), Ok(&values));
}

fn whole<T: Decode + Encode + PartialEq + Debug>(bytes: Bytes) -> Option<T> {
    let v = decode_all::<T>(bytes.clone()).ok()?;
    same_again(&v, &bytes);
    Some(v)
}

/// `v` encodes to exactly `from`'s length and decodes back to itself.
fn same_again<T: Decode + Encode + PartialEq + Debug>(v: &T, from: &[u8]) {
    let bytes = encode(v);
    assert_eq!(bytes.len(), from.len(), "{v:?}");
    let again: T = decode_all(bytes).expect("an encoding decodes");
    assert_eq!(&again, v);
}

fn encode<T: Encode>(v: &T) -> Bytes {
    let mut enc = Encoder::new();
    v.encode(&mut enc);
    enc.into_bytes()
}

fn decode_all<T: Decode>(bytes: Bytes) -> Result<T, keel_xdr::XdrError> {
    let mut dec = Decoder::new(bytes);
    let v = T::decode(&mut dec)?;
    dec.finish()?;
    Ok(v)
}

//! Malformed and oversized input: every case gives the documented error
//! (what the server answers at that operation's position), never a panic.

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use keel_nfs4_proto::*;
use keel_xdr::{Decode, Decoder, XdrError};

/// The head of a COMPOUND with `numops` operations, then `ops` (hex).
fn compound(minorversion: u32, numops: u32, ops: &str) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u32(0); // tag
    b.put_u32(minorversion);
    b.put_u32(numops);
    b.put_slice(&hex(ops));
    b.freeze()
}

/// Runs the server's loop: every operation until the decoder stops.
fn ops_of(bytes: Bytes) -> Vec<Result<NfsArgop4, OpDecodeError>> {
    let mut dec = Decoder::new(bytes);
    let head = Compound4ArgsHead::decode(&mut dec).unwrap();
    let mut ops = CompoundOps::new(&head);
    let mut out = Vec::new();
    while let Some(op) = ops.next_op(&mut dec) {
        out.push(op);
    }
    assert!(ops.next_op(&mut dec).is_none(), "stays finished");
    out
}

fn opaque_of(len: usize) -> String {
    format!("{len:08x} {}", "78".repeat(len + keel_xdr::padding(len)))
}

#[test]
fn a_length_over_its_bound() {
    // A LOOKUP name of 4097 bytes (COMPONENT4_DECODE_MAX is 4096).
    let ops = ops_of(compound(1, 2, &format!("00000018  0000000f {}", opaque_of(4097))));
    assert_eq!(ops.len(), 2);
    assert_eq!(ops[0], Ok(NfsArgop4::Putrootfh(())));
    let err = ops[1].clone().unwrap_err();
    assert_eq!(
        err,
        OpDecodeError::BadXdr {
            index: 1,
            opnum: OpNum::Lookup,
            error: XdrError::TooLong { len: 4097, max: COMPONENT4_DECODE_MAX }
        }
    );
    assert_eq!(err.status(), Nfsstat4::Badxdr);
    assert_eq!(err.reply(), NfsResop4::Lookup(Nfsstat4::Badxdr));
    // 4096 is fine: the handler says NAMETOOLONG.
    let ops = ops_of(compound(1, 1, &format!("0000000f {}", opaque_of(4096))));
    assert!(matches!(&ops[0], Ok(NfsArgop4::Lookup(l)) if l.objname.len() == 4096));
    // A file handle of 129 bytes.
    let ops = ops_of(compound(1, 1, &format!("00000016 {}", opaque_of(129))));
    assert!(matches!(&ops[0], Err(OpDecodeError::BadXdr { error: XdrError::TooLong { len: 129, max: 128 }, .. })));
    // A tag of 129 bytes: the head itself does not decode.
    let mut b = BytesMut::new();
    b.put_slice(&hex(&opaque_of(129)));
    b.put_u32(1);
    b.put_u32(0);
    let e = Compound4ArgsHead::decode(&mut Decoder::new(b.freeze())).unwrap_err();
    assert_eq!(e, XdrError::TooLong { len: 129, max: COMPOUND_TAG_MAX });
    // A TEST_STATEID with more stateids than the bound: refused before any
    // is read (and without allocating for them).
    let ops = ops_of(compound(1, 1, "00000037 ffffffff"));
    assert!(matches!(&ops[0], Err(OpDecodeError::BadXdr { error: XdrError::TooLong { .. }, .. })));
    // WRITE data over WRITE_DATA_MAX.
    let write = format!("00000026 {} 0000000000000000 00000000 {:08x}", "00".repeat(16), WRITE_DATA_MAX + 1);
    let ops = ops_of(compound(1, 1, &write));
    assert_eq!(ops[0].clone().unwrap_err().reply(), NfsResop4::Write(Nfs4Result::Fail(Nfsstat4::Badxdr)));
}

#[test]
fn a_truncated_operation_in_the_middle() {
    // SEQUENCE, PUTFH whose handle says 8 bytes and has 3, then nothing.
    let bytes = compound(
        1,
        3,
        &format!("00000035 {} 00000001 00000000 00000000 00000000  00000016 00000008 010203 00", "00".repeat(16)),
    );
    let ops = ops_of(bytes);
    assert_eq!(ops.len(), 2, "nothing after the broken operation");
    assert!(matches!(ops[0], Ok(NfsArgop4::Sequence(_))));
    let err = ops[1].clone().unwrap_err();
    assert!(matches!(err, OpDecodeError::BadXdr { index: 1, opnum: OpNum::Putfh, error: XdrError::Truncated { .. } }));
    assert_eq!(err.reply(), NfsResop4::Putfh(Nfsstat4::Badxdr));
    // The same call, whole, is refused.
    let bytes = compound(1, 2, "00000018 00000016 00000008 01020304");
    assert!(matches!(decode::<Compound4Args>(bytes), Err(XdrError::Truncated { .. })));
}

#[test]
fn fewer_operations_than_announced() {
    let ops = ops_of(compound(1, 3, "00000018 0000000a"));
    assert_eq!(ops.len(), 3);
    let err = ops[2].clone().unwrap_err();
    assert!(matches!(err, OpDecodeError::Missing { index: 2, .. }));
    assert_eq!(err.reply(), NfsResop4::Illegal(Nfsstat4::Badxdr));
}

#[test]
fn an_unknown_operation_number() {
    // PUTROOTFH, then op 9999 with what would be its arguments: ILLEGAL,
    // and nothing more is read.
    let ops = ops_of(compound(1, 3, "00000018 0000270f deadbeef 0000000a"));
    assert_eq!(ops, vec![Ok(NfsArgop4::Putrootfh(())), Ok(NfsArgop4::Illegal(9999))]);
    let reply = NfsResop4::failed(OpNum::Illegal, Nfsstat4::OpIllegal);
    assert_eq!(encode(&reply), hex("0000273c 0000273c"), "OP_ILLEGAL, NFS4ERR_OP_ILLEGAL");
    // 0, 1 and 2 are not operations either; neither is ILLEGAL's own number.
    for n in [0, 1, 2, 10044] {
        assert_eq!(ops_of(compound(1, 1, &format!("{n:08x}"))), vec![Ok(NfsArgop4::Illegal(n))]);
    }
    // A 4.2 operation in a 4.1 COMPOUND is illegal there; in 4.2 it is SEEK.
    let seek = format!("00000045 {} 0000000000000000 00000001", "00".repeat(16));
    assert_eq!(ops_of(compound(1, 1, &seek)), vec![Ok(NfsArgop4::Illegal(69))]);
    assert!(matches!(ops_of(compound(2, 1, &seek))[0], Ok(NfsArgop4::Seek(_))));
    // A 4.0-only operation decodes in 4.1 (the server answers NOTSUPP).
    let ops = ops_of(compound(1, 1, "0000001e 00000000 00000007"));
    assert_eq!(ops, vec![Ok(NfsArgop4::Renew(Renew4Args { clientid: 7 }))]);
    assert!(OpNum::Renew.is_v40_only());
    // A whole call may end with ILLEGAL, not continue after it.
    assert!(decode::<Compound4Args>(compound(1, 2, "00000018 0000270f")).is_ok());
    assert_eq!(
        decode::<Compound4Args>(compound(1, 3, "00000018 0000270f 00000018")),
        Err(XdrError::InvalidValue { what: "nfs_opnum4", value: 9999 })
    );
    // A reply naming no operation is malformed (replies have no ILLEGAL
    // escape besides OP_ILLEGAL itself).
    assert!(decode::<NfsResop4>(hex("0000270f 00000000")).is_err());
}

#[test]
fn a_bitmap_with_too_many_words() {
    let words = |n: usize| format!("{n:08x} {}", "00000001".repeat(n));
    let ops = ops_of(compound(1, 1, &format!("00000009 {}", words(BITMAP4_WORDS_MAX))));
    assert!(matches!(ops[0], Ok(NfsArgop4::Getattr(_))));
    let ops = ops_of(compound(1, 1, &format!("00000009 {}", words(BITMAP4_WORDS_MAX + 1))));
    assert_eq!(
        ops[0].clone().unwrap_err(),
        OpDecodeError::BadXdr { index: 0, opnum: OpNum::Getattr, error: XdrError::TooLong { len: 9, max: 8 } }
    );
}

#[test]
fn attribute_values_shorter_than_the_bitmap() {
    // SETATTR: size and mode in the bitmap, only the size's 8 bytes of
    // values. The operation decodes (the values are opaque to it); reading
    // them gives BADXDR.
    let ops = ops_of(compound(
        1,
        1,
        &format!("00000022 {}  00000002 00000010 00000002  00000008 00000000 00001000", "00".repeat(16)),
    ));
    let Ok(NfsArgop4::Setattr(setattr)) = &ops[0] else { panic!("SETATTR: {ops:?}") };
    let err = Attrs4::from_fattr4(&setattr.obj_attributes, AttrUse::Set).unwrap_err();
    assert!(matches!(err, AttrError::Xdr(XdrError::Truncated { .. })), "{err:?}");
    assert_eq!(err.status(), Nfsstat4::Badxdr);
    assert_eq!(
        NfsResop4::failed(OpNum::Setattr, err.status()),
        NfsResop4::Setattr(Setattr4Res { status: Nfsstat4::Badxdr, attrsset: Bitmap4::new() })
    );
}

#[test]
fn too_many_operations() {
    // The server compares numops with its session's limit after SEQUENCE;
    // past COMPOUND_OPS_MAX the decoder stops on its own.
    let n = COMPOUND_OPS_MAX + 5;
    let bytes = compound(1, n, &"00000018".repeat(n as usize));
    let mut dec = Decoder::new(bytes.clone());
    let head = Compound4ArgsHead::decode(&mut dec).unwrap();
    assert_eq!(head.numops, n);
    let ops = ops_of(bytes.clone());
    assert_eq!(ops.len(), COMPOUND_OPS_MAX as usize + 1);
    let err = ops.last().unwrap().clone().unwrap_err();
    assert_eq!(err, OpDecodeError::TooManyOps { index: COMPOUND_OPS_MAX });
    assert_eq!(err.reply(), NfsResop4::Illegal(Nfsstat4::TooManyOps));
    assert_eq!(
        decode::<Compound4Args>(bytes),
        Err(XdrError::TooLong { len: n as usize, max: COMPOUND_OPS_MAX as usize })
    );
    // The callback side refuses more than CB_COMPOUND_OPS_MAX at once.
    let cb = hex(&format!("00000000 00000001 00000000 {:08x}", CB_COMPOUND_OPS_MAX + 1));
    assert!(matches!(decode::<CbCompound4Args>(cb), Err(XdrError::TooLong { .. })));
}

#[test]
fn union_values_out_of_range() {
    // OPEN with createmode 4 (there are 0 to 3).
    let open = "00000012 00000000 00000001 00000000 0000000000000001 00000000  00000001 00000004";
    let ops = ops_of(compound(1, 1, open));
    assert!(matches!(
        &ops[0],
        Err(OpDecodeError::BadXdr { opnum: OpNum::Open, error: XdrError::InvalidValue { value: 4, .. }, .. })
    ));
    // callback_sec_parms4 with flavor 3 (AUTH_SHORT): not a flavor the union has.
    let ctl = "00000028 40000000 00000001 00000003";
    assert!(matches!(&ops_of(compound(1, 1, ctl))[0], Err(OpDecodeError::BadXdr { opnum: OpNum::BackchannelCtl, .. })));
    // A boolean that is 2.
    assert!(matches!(&ops_of(compound(1, 1, "00000013 00000002"))[0], Err(OpDecodeError::BadXdr { .. })));
    // CREATE of a regular file decodes (the server answers BADTYPE).
    let create = "00000006 00000001 00000001 61000000 00000000 00000000";
    assert!(
        matches!(&ops_of(compound(1, 1, create))[0], Ok(NfsArgop4::Create(c)) if c.objtype == Createtype4::Other(1))
    );
}

/// Every strict prefix of well-formed calls fails cleanly.
#[test]
fn every_prefix_fails_cleanly() {
    let call = Compound4Args {
        tag: "prefix".into(),
        minorversion: 2,
        argarray: vec![
            NfsArgop4::Sequence(Sequence4Args::default()),
            NfsArgop4::Putfh(Putfh4Args { object: fh(30) }),
            NfsArgop4::Setattr(Setattr4Args { stateid: stateid(1), obj_attributes: set_attrs() }),
            NfsArgop4::Write(Write4Args { data: Bytes::from_static(b"12345"), ..Default::default() }),
            NfsArgop4::Getattr(Getattr4Args { attr_request: Attrs4::known() }),
        ],
    };
    let bytes = encode(&call);
    for len in 0..bytes.len() {
        assert!(decode::<Compound4Args>(bytes.slice(..len)).is_err(), "prefix of {len} bytes");
    }
    let reply = Compound4Res {
        status: Nfsstat4::Ok,
        tag: "prefix".into(),
        resarray: vec![
            NfsResop4::Sequence(Nfs4Result::Ok(Sequence4ResOk::default())),
            NfsResop4::Getattr(Nfs4Result::Ok(Getattr4ResOk {
                obj_attributes: full_attrs().to_fattr4(&Attrs4::known()),
            })),
        ],
    };
    let bytes = encode(&reply);
    for len in 0..bytes.len() {
        assert!(decode::<Compound4Res>(bytes.slice(..len)).is_err(), "prefix of {len} bytes");
    }
}

use bytes::Bytes;

use crate::*;

#[derive(Debug, PartialEq)]
struct Pair {
    a: u32,
    b: Option<u64>,
    name: Opaque<8>,
}
xdr_struct!(Pair { a, b, name });

#[derive(Debug, PartialEq, Clone, Copy)]
enum Colour {
    Red = 1,
    Blue = 7,
}
xdr_enum!(Colour { Red, Blue });

fn roundtrip<T: Encode + Decode + PartialEq + std::fmt::Debug>(v: &T) -> Bytes {
    let mut enc = Encoder::new();
    enc.put(v);
    let bytes = enc.into_bytes();
    assert_eq!(bytes.len() % 4, 0, "XDR is 4-byte aligned");
    let mut dec = Decoder::new(bytes.clone());
    assert_eq!(&T::decode(&mut dec).unwrap(), v);
    dec.finish().unwrap();
    bytes
}

#[test]
fn structs_roundtrip_with_padding() {
    let p = Pair { a: 5, b: Some(1 << 40), name: Opaque::from("abcde") };
    let bytes = roundtrip(&p);
    // 4 (a) + 4 (bool) + 8 (u64) + 4 (len) + 5 + 3 padding
    assert_eq!(bytes.len(), 28);
    assert_eq!(&bytes[20..28], b"abcde\0\0\0");
    roundtrip(&Pair { a: 0, b: None, name: Opaque::default() });
}

#[test]
fn enums_reject_unknown_values() {
    assert_eq!(Colour::ALL, [Colour::Red, Colour::Blue]);
    Colour::ALL.iter().for_each(|c| drop(roundtrip(c)));
    let mut dec = Decoder::new(Bytes::from_static(&[0, 0, 0, 2]));
    assert_eq!(Colour::decode(&mut dec), Err(XdrError::InvalidValue { what: "Colour", value: 2 }));
}

#[test]
fn opaque_longer_than_its_bound_is_rejected() {
    let mut enc = Encoder::new();
    enc.opaque(b"123456789");
    let mut dec = Decoder::new(enc.into_bytes());
    assert_eq!(Opaque::<8>::decode(&mut dec), Err(XdrError::TooLong { len: 9, max: 8 }));
}

#[test]
fn lengths_that_lie_are_truncation_errors() {
    // Claims 1000 bytes of opaque, carries 4.
    let mut dec = Decoder::new(Bytes::from_static(&[0, 0, 3, 232, 1, 2, 3, 4]));
    assert!(matches!(dec.opaque(4096), Err(XdrError::Truncated { .. })));
    // Claims a million-element array in eight bytes: refused before allocating.
    let mut dec = Decoder::new(Bytes::from_static(&[0, 0xf, 0x42, 0x40, 0, 0, 0, 1]));
    assert!(matches!(dec.array::<u32>(usize::MAX), Err(XdrError::Truncated { .. })));
    let mut dec = Decoder::new(Bytes::from_static(&[0, 0, 0, 17]));
    assert_eq!(dec.array::<u32>(16), Err(XdrError::TooLong { len: 17, max: 16 }));
}

#[test]
fn bool_other_than_zero_or_one_is_invalid() {
    let mut dec = Decoder::new(Bytes::from_static(&[0, 0, 0, 2]));
    assert!(dec.bool().is_err());
}

#[test]
fn linked_lists_are_bounded() {
    let mut enc = Encoder::new();
    for v in [1u32, 2, 3] {
        enc.bool(true);
        enc.u32(v);
    }
    enc.bool(false);
    let bytes = enc.into_bytes();
    assert_eq!(Decoder::new(bytes.clone()).list::<u32>(3).unwrap(), vec![1, 2, 3]);
    assert!(Decoder::new(bytes).list::<u32>(2).is_err());
}

#[test]
fn large_shared_payloads_are_spliced_not_copied() {
    let payload = Bytes::from(vec![7u8; 4099]);
    let mut enc = Encoder::new();
    enc.u32(1);
    enc.opaque_shared(payload.clone());
    enc.u32(2);
    assert_eq!(enc.len(), 4 + 4 + 4099 + 1 + 4);
    let segments = enc.finish_bytes();
    assert_eq!(segments.len(), 3);
    assert_eq!(segments[1].as_ptr(), payload.as_ptr(), "payload segment is the same memory");
    let mut all = Vec::new();
    for s in &segments {
        all.extend_from_slice(s);
    }
    let mut dec = Decoder::new(Bytes::from(all));
    assert_eq!(dec.u32().unwrap(), 1);
    assert_eq!(dec.opaque(1 << 20).unwrap(), payload);
    assert_eq!(dec.u32().unwrap(), 2);
    dec.finish().unwrap();
}

#[test]
fn decoded_opaque_shares_the_input_buffer() {
    let mut enc = Encoder::new();
    enc.opaque(&[9u8; 100]);
    let input = enc.into_bytes();
    let mut dec = Decoder::new(input.clone());
    let data = dec.opaque(100).unwrap();
    assert_eq!(data.as_ptr(), input[4..].as_ptr());
}

#[test]
fn a_word_reads_back_across_spliced_segments() {
    let mut enc = Encoder::new();
    enc.u32(7);
    enc.opaque_shared(Bytes::from(vec![0xab; 2048]));
    enc.u32(0x0102_0304);
    assert_eq!(enc.u32_at(0), Some(7));
    assert_eq!(enc.u32_at(4), Some(2048));
    assert_eq!(enc.u32_at(8), Some(0xabab_abab));
    assert_eq!(enc.u32_at(8 + 2048), Some(0x0102_0304));
    assert_eq!(enc.u32_at(6), Some(0x0800_abab), "a word that straddles two segments");
    assert_eq!(enc.u32_at(8 + 2048 + 1), None);
}

#[test]
fn a_spliced_payload_is_carried_with_its_length_and_padding() {
    let mut enc = Encoder::new();
    enc.u32(7);
    enc.opaque_spliced(Spliced::new(4097, "a pipe"));
    assert_eq!(enc.len(), 4 + 4 + 4097 + 3);
    assert_eq!(enc.u32_at(4), Some(4097));
    assert_eq!(enc.u32_at(8), None, "the payload's bytes are not the encoder's");
    let segments = enc.finish();
    let lens: Vec<usize> = segments.iter().map(Segment::len).collect();
    assert_eq!(lens, [8, 4097, 3]);
    assert_eq!(segments[2].as_bytes().map(|b| &b[..]), Some(&[0u8; 3][..]));
    let Segment::Spliced(s) = segments.into_iter().nth(1).unwrap() else { panic!("not spliced") };
    let s = s.downcast::<u32>().expect_err("not a u32");
    assert_eq!(s.downcast::<&str>().unwrap(), "a pipe");
}

#[test]
fn an_aligned_spliced_payload_has_no_padding_segment() {
    let mut enc = Encoder::new();
    enc.opaque_spliced(Spliced::new(8192, ()));
    assert_eq!(enc.finish().iter().map(Segment::len).collect::<Vec<_>>(), [4, 8192]);
}

//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::fmt::Debug;

use bytes::Bytes;
use keel_nfs3_proto::*;
use keel_xdr::{Decode, Decoder, Encode, Encoder, XdrError};

/// Encodes `v` into one contiguous buffer.
pub fn encode<T: Encode + ?Sized>(v: &T) -> Bytes {
    let mut enc = Encoder::new();
    enc.put(v);
    enc.into_bytes()
}

/// Decodes a `T` that must use every byte of `b`.
pub fn decode<T: Decode>(b: Bytes) -> Result<T, XdrError> {
    let mut dec = Decoder::new(b);
    let v = T::decode(&mut dec)?;
    dec.finish()?;
    Ok(v)
}

/// Encodes, checks 4-byte alignment, decodes and compares; returns the
/// encoding.
#[track_caller]
pub fn roundtrip<T: Encode + Decode + PartialEq + Debug>(v: &T) -> Bytes {
    let bytes = encode(v);
    assert_eq!(bytes.len() % 4, 0, "XDR is 4-byte aligned: {v:?}");
    let back: T = decode(bytes.clone()).unwrap_or_else(|e| panic!("decode {v:?}: {e}"));
    assert_eq!(&back, v);
    bytes
}

pub fn fh(n: usize) -> NfsFh3 {
    NfsFh3::new((0..n).map(|i| (i * 7 + 1) as u8).collect::<Vec<u8>>())
}

pub fn time(s: u32) -> Nfstime3 {
    Nfstime3 { seconds: s, nseconds: s.wrapping_mul(1000) % 1_000_000_000 }
}

pub fn fattr(fileid: u64) -> Fattr3 {
    Fattr3 {
        ftype: Ftype3::Chr,
        mode: 0o100644,
        nlink: 3,
        uid: 1000,
        gid: 100,
        size: 1 << 33,
        used: 4096,
        rdev: Specdata3 { specdata1: 8, specdata2: 1 },
        fsid: 0xdead_beef_0000_0001,
        fileid,
        atime: time(1_700_000_001),
        mtime: time(1_700_000_002),
        ctime: time(1_700_000_003),
    }
}

pub fn wcc() -> WccData {
    WccData { before: Some(WccAttr { size: 10, mtime: time(1), ctime: time(2) }), after: Some(fattr(9)) }
}

pub fn sattr_all() -> Sattr3 {
    Sattr3 {
        mode: Some(0o755),
        uid: Some(0),
        gid: Some(65534),
        size: Some(12345),
        atime: SetTime::ServerTime,
        mtime: SetTime::ClientTime(time(77)),
    }
}

pub fn dirop(name: &str) -> Diropargs3 {
    Diropargs3 { dir: fh(32), name: Filename3::from(name) }
}

/// A small deterministic PRNG (xorshift64*), so fuzz-style tests repeat.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

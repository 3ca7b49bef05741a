//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::fmt::Debug;

use bytes::Bytes;
use keel_nfs4_proto::*;
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

/// Bytes written by hand as hex: whitespace is ignored, `#` starts a
/// comment that runs to the end of the line.
pub fn hex(text: &str) -> Bytes {
    let digits: String = text
        .lines()
        .map(|l| l.split('#').next().unwrap())
        .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
        .collect();
    assert_eq!(digits.len() % 2, 0, "odd number of hex digits");
    let bytes: Vec<u8> =
        (0..digits.len()).step_by(2).map(|i| u8::from_str_radix(&digits[i..i + 2], 16).expect("hex digit")).collect();
    assert_eq!(bytes.len() % 4, 0, "XDR is 4-byte aligned");
    Bytes::from(bytes)
}

pub fn fh(n: usize) -> NfsFh4 {
    NfsFh4::from((0..n).map(|i| (i * 7 + 1) as u8).collect::<Vec<u8>>())
}

pub fn stateid(seqid: u32) -> Stateid4 {
    Stateid4 { seqid, other: [seqid as u8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11] }
}

pub fn time(s: i64) -> Nfstime4 {
    Nfstime4 { seconds: s, nseconds: (s.unsigned_abs() % 1_000_000_000) as u32 }
}

pub fn owner(clientid: u64, name: &str) -> StateOwner4 {
    StateOwner4 { clientid, owner: name.into() }
}

pub fn cinfo(before: u64) -> ChangeInfo4 {
    ChangeInfo4 { atomic: true, before, after: before + 1 }
}

/// An attribute list as a SETATTR would carry it: mode and owner.
pub fn set_attrs() -> Fattr4 {
    Attrs4 { mode: Some(0o644), owner: Some("alice@example.com".into()), ..Default::default() }
        .to_fattr4(&Attrs4::known())
}

/// Every attribute [`Attrs4`] holds, set to something recognisable.
pub fn full_attrs() -> Attrs4 {
    Attrs4 {
        supported_attrs: Some(Attrs4::known()),
        type_: Some(NfsFtype4::Nf4reg),
        fh_expire_type: Some(FH4_PERSISTENT),
        change: Some(0x1122_3344_5566_7788),
        size: Some(1 << 40),
        link_support: Some(true),
        symlink_support: Some(true),
        named_attr: Some(false),
        fsid: Some(Fsid4 { major: 7, minor: 9 }),
        unique_handles: Some(true),
        lease_time: Some(90),
        rdattr_error: Some(Nfsstat4::Access),
        aclsupport: Some(0),
        cansettime: Some(true),
        case_insensitive: Some(false),
        case_preserving: Some(true),
        chown_restricted: Some(true),
        filehandle: Some(fh(33)),
        fileid: Some(4242),
        files_avail: Some(1000),
        files_free: Some(1001),
        files_total: Some(2000),
        fs_locations: Some(FsLocations4 {
            fs_root: vec!["export".into(), "a".into()].into(),
            locations: vec![FsLocation4 { server: vec!["srv1".into()].into(), rootpath: vec!["b".into()].into() }]
                .into(),
        }),
        homogeneous: Some(true),
        maxfilesize: Some(u64::MAX >> 1),
        maxlink: Some(65000),
        maxname: Some(255),
        maxread: Some(1 << 20),
        maxwrite: Some(1 << 20),
        mode: Some(0o100644),
        no_trunc: Some(true),
        numlinks: Some(2),
        owner: Some("1000".into()),
        owner_group: Some("users@example.com".into()),
        rawdev: Some(Specdata4 { specdata1: 8, specdata2: 1 }),
        space_avail: Some(10),
        space_free: Some(11),
        space_total: Some(12),
        space_used: Some(4096),
        time_access: Some(time(1_700_000_001)),
        time_access_set: Some(Settime4::SetToServerTime),
        time_create: Some(time(-5)),
        time_delta: Some(Nfstime4 { seconds: 0, nseconds: 1 }),
        time_metadata: Some(time(1_700_000_003)),
        time_modify: Some(time(1_700_000_004)),
        time_modify_set: Some(Settime4::SetToClientTime(time(1_600_000_000))),
        mounted_on_fileid: Some(2),
        fs_layout_types: Some(vec![Layouttype4::LAYOUT4_FLEX_FILES].into()),
        layout_blksize: Some(1 << 20),
        layout_alignment: Some(4096),
        suppattr_exclcreat: Some(Bitmap4::from_bits([FATTR4_SIZE, FATTR4_MODE])),
        clone_blksize: Some(4096),
        change_attr_type: Some(ChangeAttrType4::IsVersionCounterNopnfs),
        sec_label: Some(SecLabel4 {
            slai_lfs: LabelformatSpec4 { lfs_lfs: 1, lfs_pi: 0 },
            slai_data: "system_u:object_r:etc_t:s0".into(),
        }),
    }
}

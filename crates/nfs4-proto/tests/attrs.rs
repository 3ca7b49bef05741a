//! Attributes: the bitmap, the typed values both ways, and the errors a
//! server answers SETATTR and VERIFY with.

mod common;

use bytes::Bytes;
use common::*;
use keel_nfs4_proto::*;
use keel_xdr::XdrError;

#[test]
fn known_attributes_are_ascending_and_cover_the_required_ones() {
    assert!(Attrs4::KNOWN.windows(2).all(|w| w[0] < w[1]), "the table is in bitmap order");
    let required = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 19, 75];
    for a in required {
        assert!(Attrs4::KNOWN.contains(&a), "REQUIRED attribute {a}");
    }
    assert_eq!(Attrs4::access(FATTR4_MODE), Some(AttrAccess::ReadWrite));
    assert_eq!(Attrs4::access(FATTR4_TIME_MODIFY_SET), Some(AttrAccess::Write));
    assert_eq!(Attrs4::access(FATTR4_ACL), None);
    assert_eq!(Attrs4::known().iter().collect::<Vec<_>>(), Attrs4::KNOWN);
    // Every field of `full_attrs` is set, so its bitmap is every known one.
    assert_eq!(full_attrs().bitmap(), Attrs4::known());
}

#[test]
fn all_attributes_roundtrip() {
    let attrs = full_attrs();
    let fattr = attrs.to_fattr4(&Attrs4::known());
    assert_eq!(fattr.attrmask, Attrs4::known());
    roundtrip(&fattr);
    assert_eq!(Attrs4::from_fattr4(&fattr, AttrUse::Reply).unwrap(), attrs);
}

#[test]
fn encoding_writes_what_was_asked_and_is_known() {
    let attrs = Attrs4 { size: Some(10), mode: Some(0o755), fileid: Some(3), ..Default::default() };
    // Asked: type (not set), size, mode, acl (not supported), bit 200.
    let request = Bitmap4::from_bits([FATTR4_TYPE, FATTR4_SIZE, FATTR4_MODE, FATTR4_ACL, 200]);
    let fattr = attrs.to_fattr4(&request);
    assert_eq!(fattr.attrmask, Bitmap4::from_bits([FATTR4_SIZE, FATTR4_MODE]));
    // size (word 0, bit 4), then mode (word 1, bit 1), in bitmap order.
    assert_eq!(fattr.attrmask.0, vec![1 << 4, 1 << 1]);
    assert_eq!(fattr.attr_vals.as_bytes(), hex("00000000 0000000a  000001ed").as_ref());
    // Nothing asked: nothing written.
    assert_eq!(attrs.to_fattr4(&Bitmap4::new()), Fattr4::default());
}

fn fattr(bits: &[u32], vals: &str) -> Fattr4 {
    Fattr4 { attrmask: Bitmap4::from_bits(bits.iter().copied()), attr_vals: hex(vals).into() }
}

#[test]
fn setattr_decoding_and_its_errors() {
    // size and mode, as a client sends them.
    let a =
        Attrs4::from_fattr4(&fattr(&[FATTR4_SIZE, FATTR4_MODE], "00000000 00001000  000001a4"), AttrUse::Set).unwrap();
    assert_eq!((a.size, a.mode), (Some(4096), Some(0o644)));
    // Set the times: atime to the server's clock, mtime to a given time.
    let a = Attrs4::from_fattr4(
        &fattr(&[FATTR4_TIME_ACCESS_SET, FATTR4_TIME_MODIFY_SET], "00000000  00000001 00000000 00000064 00000005"),
        AttrUse::Set,
    )
    .unwrap();
    assert_eq!(a.time_access_set, Some(Settime4::SetToServerTime));
    assert_eq!(a.time_modify_set, Some(Settime4::SetToClientTime(Nfstime4 { seconds: 100, nseconds: 5 })));

    // A read-only attribute: NFS4ERR_INVAL.
    let e = Attrs4::from_fattr4(&fattr(&[FATTR4_MODE, FATTR4_FILEID], "000001a4 00000000 00000001"), AttrUse::Set)
        .unwrap_err();
    assert_eq!(e, AttrError::NotAllowed { attr: FATTR4_FILEID, usage: AttrUse::Set });
    assert_eq!(e.status(), Nfsstat4::Inval);
    // An attribute the crate does not represent (acl): NFS4ERR_ATTRNOTSUPP.
    let e = Attrs4::from_fattr4(&fattr(&[FATTR4_ACL], "00000000"), AttrUse::Set).unwrap_err();
    assert_eq!((e.clone(), e.status()), (AttrError::Unsupported(FATTR4_ACL), Nfsstat4::Attrnotsupp));
    // An attribute number nobody defined.
    let e = Attrs4::from_fattr4(&fattr(&[FATTR4_MODE, 190], "000001a4"), AttrUse::Set).unwrap_err();
    assert_eq!(e, AttrError::Unsupported(190));
    // Values shorter than the bitmap says: NFS4ERR_BADXDR.
    let e = Attrs4::from_fattr4(&fattr(&[FATTR4_SIZE, FATTR4_MODE], "00000000 00001000"), AttrUse::Set).unwrap_err();
    assert!(matches!(e, AttrError::Xdr(XdrError::Truncated { .. })), "{e:?}");
    assert_eq!(e.status(), Nfsstat4::Badxdr);
    // Longer: NFS4ERR_BADXDR too.
    let e = Attrs4::from_fattr4(&fattr(&[FATTR4_MODE], "000001a4 00000000"), AttrUse::Set).unwrap_err();
    assert_eq!(e.status(), Nfsstat4::Badxdr);
    // A value out of its type's range (settime4 arm 2).
    let e = Attrs4::from_fattr4(&fattr(&[FATTR4_TIME_ACCESS_SET], "00000002"), AttrUse::Set).unwrap_err();
    assert_eq!(e.status(), Nfsstat4::Badxdr);
    // An owner longer than its bound.
    let e = Attrs4::from_fattr4(&fattr(&[FATTR4_OWNER], "00000401"), AttrUse::Set).unwrap_err();
    assert_eq!(e, AttrError::Xdr(XdrError::TooLong { len: 1025, max: UTF8STR4_MAX }));
}

#[test]
fn verify_decoding_and_its_errors() {
    let a = Attrs4::from_fattr4(&fattr(&[FATTR4_TYPE, FATTR4_SIZE], "00000002 00000000 00000000"), AttrUse::Verify)
        .unwrap();
    assert_eq!((a.type_, a.size), (Some(NfsFtype4::Nf4dir), Some(0)));
    for (attr, vals) in [(FATTR4_TIME_MODIFY_SET, "00000000"), (FATTR4_RDATTR_ERROR, "00000000")] {
        let e = Attrs4::from_fattr4(&fattr(&[attr], vals), AttrUse::Verify).unwrap_err();
        assert_eq!(e, AttrError::NotAllowed { attr, usage: AttrUse::Verify });
        assert_eq!(e.status(), Nfsstat4::Inval);
    }
}

#[test]
fn bitmap_operations() {
    let mut b = Bitmap4::from_bits([0, 33, 75]);
    assert_eq!(b.0, vec![1, 2, 1 << 11]);
    assert!(b.contains(33) && !b.contains(34) && !b.contains(1000));
    b.remove(75);
    assert_eq!(b.iter().collect::<Vec<_>>(), vec![0, 33]);
    let other = Bitmap4::from_bits([33, 40, 64]);
    assert_eq!(b.intersection(&other).0, vec![0, 2]);
    assert_eq!(other.difference(&b), Bitmap4::from_bits([40, 64]));
    assert!(Bitmap4(vec![0, 0, 0]).is_empty());
    // Sets compare as sets; the words on the wire stay as they were.
    assert_eq!(Bitmap4(vec![2, 0]), Bitmap4(vec![2]));
    assert_ne!(Bitmap4(vec![2, 1]), Bitmap4(vec![2]));
    assert_eq!(encode(&Bitmap4(vec![2, 0])), hex("00000002 00000002 00000000"));
    assert_eq!(format!("{b:?}"), "{0, 33}");
    // Trailing zero words are accepted and mean nothing.
    let padded: Bitmap4 = decode(hex("00000003 00000002 00000000 00000000")).unwrap();
    assert!(padded.contains(1));
    assert_eq!(padded.iter().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn component_names() {
    let c = |s: &[u8]| Component4(Bytes::copy_from_slice(s));
    assert_eq!(c(b"file.txt").check(NFS4_MAXNAMLEN), Ok("file.txt"));
    assert_eq!(c("été".as_bytes()).check(NFS4_MAXNAMLEN), Ok("été"));
    assert_eq!(c(b"").check(NFS4_MAXNAMLEN), Err(Nfsstat4::Inval));
    assert_eq!(c(b".").check(NFS4_MAXNAMLEN), Err(Nfsstat4::Badname));
    assert_eq!(c(b"..").check(NFS4_MAXNAMLEN), Err(Nfsstat4::Badname));
    assert_eq!(c(b"...").check(NFS4_MAXNAMLEN), Ok("..."));
    assert_eq!(c(b"\xff\xfe").check(NFS4_MAXNAMLEN), Err(Nfsstat4::Inval));
    assert_eq!(c(&[b'x'; 256]).check(NFS4_MAXNAMLEN), Err(Nfsstat4::Nametoolong));
    assert_eq!(c(&[b'x'; 255]).check(NFS4_MAXNAMLEN).map(str::len), Ok(255));
    // A name over maxname still decodes: the handler answers NAMETOOLONG.
    let mut long = hex("00000100");
    long = [long.as_ref(), &[b'y'; 256]].concat().into();
    let name: Component4 = decode(long).unwrap();
    assert_eq!(name.check(NFS4_MAXNAMLEN), Err(Nfsstat4::Nametoolong));
}

//! The server-side READDIR/READDIRPLUS helpers: `xdr_len` is exact and the
//! streamed framing equals the `Vec`-based encoding.

mod common;

use common::*;
use keel_nfs3_proto::*;
use keel_xdr::{Encode, Encoder};

fn streamed_len3(e: &Entry3) -> usize {
    let mut enc = Encoder::new();
    encode_entry3(&mut enc, e);
    let b = enc.into_bytes();
    assert_eq!(&b[..4], &[0, 0, 0, 1], "starts with value-follows TRUE");
    b.len()
}

fn streamed_lenplus3(e: &Entryplus3) -> usize {
    let mut enc = Encoder::new();
    encode_entryplus3(&mut enc, e);
    let b = enc.into_bytes();
    assert_eq!(&b[..4], &[0, 0, 0, 1], "starts with value-follows TRUE");
    b.len()
}

fn names() -> Vec<Filename3> {
    let mut v: Vec<Filename3> = (0..=9).map(|n| Filename3::from(vec![b'n'; n])).collect();
    v.push(Filename3::from(vec![b'L'; 255]));
    v.push(Filename3::from(vec![b'L'; 300]));
    v.push(Filename3::from(vec![b'L'; FILENAME_DECODE_MAX]));
    v
}

#[test]
fn entry3_xdr_len_is_exact() {
    for name in names() {
        let e = Entry3 { fileid: u64::MAX, name: name.clone(), cookie: 12 };
        assert_eq!(e.xdr_len(), streamed_len3(&e), "name of {} bytes", name.len());
        assert_eq!(e.xdr_len(), 4 + encode(&e).len());
    }
    // ".": 4 (TRUE) + 8 (fileid) + 4 (len) + 1 + 3 (pad) + 8 (cookie).
    assert_eq!(Entry3 { fileid: 1, name: ".".into(), cookie: 1 }.xdr_len(), 28);
}

#[test]
fn entryplus3_xdr_len_is_exact() {
    let attrs = [None, Some(fattr(3))];
    let handles = [None, Some(fh(0)), Some(fh(1)), Some(fh(8)), Some(fh(31)), Some(fh(64))];
    for name in names() {
        for a in attrs {
            for h in &handles {
                let e = Entryplus3 {
                    fileid: 77,
                    name: name.clone(),
                    cookie: 78,
                    name_attributes: a,
                    name_handle: h.clone(),
                };
                assert_eq!(e.xdr_len(), streamed_lenplus3(&e), "{e:?}");
                assert_eq!(e.xdr_len(), 4 + encode(&e).len());
                let plain = Entry3 { fileid: 77, name: name.clone(), cookie: 78 };
                assert_eq!(e.dir_info_len(), plain.xdr_len());
            }
        }
    }
    // Short name, attributes and a 32-byte handle:
    // 4 + 8 + (4 + 4) + 8 + (4 + 84) + (4 + 4 + 32).
    let e = Entryplus3 {
        fileid: 1,
        name: "abcd".into(),
        cookie: 2,
        name_attributes: Some(fattr(1)),
        name_handle: Some(fh(32)),
    };
    assert_eq!(e.xdr_len(), 156);
}

/// A server streaming entries under a byte budget produces exactly what a
/// client decodes as `Readdir3Res`, and never exceeds the budget.
#[test]
fn streamed_readdir_matches_vec_encoding() {
    let all: Vec<Entry3> = (0..50u64)
        .map(|i| Entry3 {
            fileid: 100 + i,
            name: format!("file-{i:0w$}", w = (i % 7) as usize).as_str().into(),
            cookie: i + 1,
        })
        .collect();
    for count in [120usize, 300, 512, 1024, 4096] {
        let dir_attributes = Some(fattr(2));
        let cookieverf = [5u8; 8];

        let mut enc = Encoder::new();
        Nfsstat3::Ok.encode(&mut enc);
        dir_attributes.encode(&mut enc);
        cookieverf.encode(&mut enc);
        let mut used = enc.len() + DIRLIST_END_XDR_LEN;
        let mut sent = Vec::new();
        for e in &all {
            if used + e.xdr_len() > count {
                break;
            }
            used += e.xdr_len();
            encode_entry3(&mut enc, e);
            sent.push(e.clone());
        }
        let eof = sent.len() == all.len();
        encode_dirlist_end(&mut enc, eof);
        let wire = enc.into_bytes();
        assert_eq!(wire.len(), used, "accounting is exact");
        assert!(wire.len() <= count);

        let expected: Readdir3Res =
            NfsResult::Ok(Readdir3ResOk { dir_attributes, cookieverf, reply: Dirlist3 { entries: sent, eof } });
        assert_eq!(wire, encode(&expected));
        assert_eq!(decode::<Readdir3Res>(wire).unwrap(), expected);
    }
}

#[test]
fn streamed_readdirplus_matches_vec_encoding() {
    let entries: Vec<Entryplus3> = (0..5u64)
        .map(|i| Entryplus3 {
            fileid: i,
            name: Filename3::from(vec![b'a' + i as u8; i as usize * 3]),
            cookie: i + 1,
            name_attributes: (i % 2 == 0).then(|| fattr(i)),
            name_handle: (i % 3 != 0).then(|| fh(i as usize * 10)),
        })
        .collect();
    let mut enc = Encoder::new();
    Nfsstat3::Ok.encode(&mut enc);
    None::<Fattr3>.encode(&mut enc);
    [0u8; 8].encode(&mut enc);
    for e in &entries {
        encode_entryplus3(&mut enc, e);
    }
    encode_dirlist_end(&mut enc, true);
    let expected: Readdirplus3Res = NfsResult::Ok(Readdirplus3ResOk {
        dir_attributes: None,
        cookieverf: [0; 8],
        reply: Dirlistplus3 { entries, eof: true },
    });
    let wire = enc.into_bytes();
    assert_eq!(wire, encode(&expected));
    assert_eq!(decode::<Readdirplus3Res>(wire).unwrap(), expected);
}

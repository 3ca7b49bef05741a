//! Decoders enforce shape and size limits, and fail with a bounded error
//! (never a panic) on any input.

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use keel_nfs3_proto::mount::*;
use keel_nfs3_proto::portmap::*;
use keel_nfs3_proto::*;
use keel_xdr::{Decode, Decoder, Encode, XdrError};

fn opaque_of(len: usize) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u32(len as u32);
    b.put_bytes(b'x', len);
    b.put_bytes(0, keel_xdr::padding(len));
    b.freeze()
}

fn lookup_args_with_name(len: usize) -> Bytes {
    let mut b = BytesMut::from(&encode(&fh(16))[..]);
    b.put_slice(&opaque_of(len));
    b.freeze()
}

fn too_long<T: std::fmt::Debug>(r: Result<T, XdrError>, len: usize, max: usize) {
    match r {
        Err(XdrError::TooLong { len: l, max: m }) => assert_eq!((l, m), (len, max)),
        other => panic!("expected TooLong {{ {len}, {max} }}, got {other:?}"),
    }
}

fn invalid<T: std::fmt::Debug>(r: Result<T, XdrError>, value: u32) {
    match r {
        Err(XdrError::InvalidValue { value: v, .. }) => assert_eq!(v, value),
        other => panic!("expected InvalidValue {value}, got {other:?}"),
    }
}

#[test]
fn filename_bounds() {
    // 300 bytes is above NFS3_MAXNAMLEN but must decode: the handler answers
    // NFS3ERR_NAMETOOLONG.
    let args: Lookup3Args = decode(lookup_args_with_name(300)).unwrap();
    assert_eq!(args.what.name.len(), 300);
    assert!(args.what.name.len() > NFS3_MAXNAMLEN);
    let args: Lookup3Args = decode(lookup_args_with_name(FILENAME_DECODE_MAX)).unwrap();
    assert_eq!(args.what.name.len(), 4096);
    too_long(decode::<Lookup3Args>(lookup_args_with_name(4097)), 4097, FILENAME_DECODE_MAX);
    too_long(decode::<Filename3>(opaque_of(4097)), 4097, 4096);
}

#[test]
fn file_handle_bounds() {
    decode::<NfsFh3>(opaque_of(64)).unwrap();
    too_long(decode::<NfsFh3>(opaque_of(65)), 65, NFS3_FHSIZE);
    too_long(decode::<Getattr3Args>(opaque_of(65)), 65, 64);
    too_long(decode::<Fhandle3>(opaque_of(65)), 65, 64);
    // A handle inside a reply, too.
    let mut b = BytesMut::new();
    b.put_u32(0); // NFS3_OK
    b.put_slice(&opaque_of(65));
    too_long(decode::<Lookup3Res>(b.freeze()), 65, 64);
}

#[test]
fn path_bounds() {
    decode::<Nfspath3>(opaque_of(NFSPATH_MAX)).unwrap();
    too_long(decode::<Nfspath3>(opaque_of(NFSPATH_MAX + 1)), 4097, 4096);
    decode::<Dirpath>(opaque_of(1024)).unwrap();
    too_long(decode::<Dirpath>(opaque_of(1025)), 1025, DIRPATH_MAX);
    decode::<Name>(opaque_of(255)).unwrap();
    too_long(decode::<Name>(opaque_of(256)), 256, MNTNAMLEN);
}

fn write_args(data_len: usize) -> Bytes {
    let mut b = BytesMut::from(&encode(&fh(8))[..]);
    b.put_u64(0);
    b.put_u32(data_len as u32);
    b.put_u32(2);
    b.put_slice(&opaque_of(data_len));
    b.freeze()
}

#[test]
fn write_data_bounds() {
    let ok: Write3Args = decode(write_args(WRITE_DATA_MAX)).unwrap();
    assert_eq!(ok.data.len(), 1 << 20);
    assert_eq!(ok.stable, StableHow::FileSync);
    too_long(decode::<Write3Args>(write_args(WRITE_DATA_MAX + 1)), (1 << 20) + 1, 1 << 20);
    // count and data length are independent on the wire (the server checks).
    let mut b = BytesMut::from(&encode(&fh(8))[..]);
    b.put_u64(0);
    b.put_u32(999);
    b.put_u32(0);
    b.put_slice(&opaque_of(3));
    let w: Write3Args = decode(b.freeze()).unwrap();
    assert_eq!((w.count, w.data.len()), (999, 3));
}

#[test]
fn read_data_bounds() {
    // Only the header: the length is checked before the bytes are needed.
    let mut b = BytesMut::new();
    b.put_u32(0); // NFS3_OK
    b.put_u32(0); // no attributes
    b.put_u32(1); // count
    b.put_u32(0); // eof
    b.put_u32((READ_DATA_MAX + 1) as u32);
    too_long(decode::<Read3Res>(b.freeze()), (1 << 24) + 1, 1 << 24);
}

#[test]
fn truncated_readdir_reply() {
    let res: Readdir3Res = NfsResult::Ok(Readdir3ResOk {
        dir_attributes: Some(fattr(1)),
        cookieverf: [1; 8],
        reply: Dirlist3 {
            entries: (0..4)
                .map(|i| Entry3 { fileid: i, name: format!("entry{i}").as_str().into(), cookie: i })
                .collect(),
            eof: true,
        },
    });
    let wire = encode(&res);
    // Cut in the middle of the second entry's name.
    let head = 4 + 4 + FATTR3_XDR_LEN + 8;
    let first = res.clone().ok().unwrap().reply.entries[0].xdr_len();
    let cut = head + first + 4 + 8 + 4 + 2;
    match decode::<Readdir3Res>(wire.slice(..cut)) {
        Err(XdrError::Truncated { .. }) => {}
        other => panic!("expected Truncated, got {other:?}"),
    }
    // Every strict prefix fails with Truncated: no value check can fire on
    // a correct encoding cut short.
    for n in 0..wire.len() {
        match decode::<Readdir3Res>(wire.slice(..n)) {
            Err(XdrError::Truncated { .. }) => {}
            other => panic!("prefix {n}: expected Truncated, got {other:?}"),
        }
    }
    let plus: Readdirplus3Res = NfsResult::Ok(Readdirplus3ResOk {
        dir_attributes: None,
        cookieverf: [0; 8],
        reply: Dirlistplus3 {
            entries: vec![Entryplus3 {
                fileid: 1,
                name: "x".into(),
                cookie: 1,
                name_attributes: Some(fattr(1)),
                name_handle: Some(fh(30)),
            }],
            eof: false,
        },
    });
    let wire = encode(&plus);
    for n in 0..wire.len() {
        assert!(matches!(decode::<Readdirplus3Res>(wire.slice(..n)), Err(XdrError::Truncated { .. })));
    }
}

fn u32s(words: &[u32]) -> Bytes {
    let mut b = BytesMut::new();
    for w in words {
        b.put_u32(*w);
    }
    b.freeze()
}

#[test]
fn unknown_discriminants() {
    invalid(decode::<Ftype3>(u32s(&[0])), 0);
    invalid(decode::<Ftype3>(u32s(&[8])), 8);
    // ftype3 inside fattr3
    let mut a = BytesMut::from(&encode(&fattr(1))[..]);
    a[..4].copy_from_slice(&9u32.to_be_bytes());
    invalid(decode::<Fattr3>(a.freeze()), 9);

    invalid(decode::<StableHow>(u32s(&[3])), 3);
    let mut w = BytesMut::from(&write_args(4)[..]);
    let stable_at = 4 + 8 + 8 + 4;
    w[stable_at..stable_at + 4].copy_from_slice(&3u32.to_be_bytes());
    invalid(decode::<Write3Args>(w.freeze()), 3);

    invalid(decode::<Createhow3>(u32s(&[3])), 3);
    let mut c = BytesMut::from(&encode(&dirop("f"))[..]);
    c.put_u32(7);
    invalid(decode::<Create3Args>(c.freeze()), 7);

    // time_how, as atime then as mtime of a sattr3.
    invalid(decode::<SetTime>(u32s(&[3])), 3);
    invalid(decode::<Sattr3>(u32s(&[0, 0, 0, 0, 3])), 3);
    invalid(decode::<Sattr3>(u32s(&[0, 0, 0, 0, 1, 4])), 4);

    invalid(decode::<Mknoddata3>(u32s(&[0])), 0);
    invalid(decode::<Nfsstat3>(u32s(&[3])), 3);
    invalid(decode::<Lookup3Res>(u32s(&[10009, 0])), 10009);
    invalid(decode::<Mountstat3>(u32s(&[6])), 6);
    // A bool that is neither 0 nor 1 (post_op_attr).
    invalid(decode::<PostOpAttr>(u32s(&[2])), 2);
    invalid(decode::<Pmaplist>(u32s(&[5])), 5);
}

#[test]
fn array_and_list_bounds() {
    let mut b = BytesMut::new();
    b.put_u32(0); // MNT3_OK
    b.put_slice(&opaque_of(4));
    b.put_u32(65); // 65 auth flavors
    b.put_bytes(0, 65 * 4);
    too_long(decode::<Mountres3>(b.freeze()), 65, AUTH_FLAVORS_MAX);
    // A lying count cannot make the decoder reserve memory.
    let mut b = BytesMut::new();
    b.put_u32(0);
    b.put_slice(&opaque_of(4));
    b.put_u32(60);
    assert!(matches!(decode::<Mountres3>(b.freeze()), Err(XdrError::Truncated { .. })));
    // CALLIT payloads are bounded.
    let mut b = BytesMut::from(&u32s(&[1, 2, 3])[..]);
    b.put_u32((CALLIT_DATA_MAX + 1) as u32);
    too_long(decode::<CallArgs>(b.freeze()), CALLIT_DATA_MAX + 1, CALLIT_DATA_MAX);
}

/// Mutates `seed` encodings and feeds random bytes to every decoder.
/// Any result is fine; a panic is not.
fn fuzz_one<T: Decode>(rng: &mut Rng, seed: &Bytes) {
    for _ in 0..200 {
        let mut b = BytesMut::from(&seed[..]);
        match rng.below(4) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            1 if !b.is_empty() => {
                // Overwrite an aligned word with an interesting value.
                let i = rng.below(b.len()) & !3;
                let v = [0u32, 1, 2, 3, 7, 64, 65, 255, 4096, 4097, u32::MAX, 0x8000_0000][rng.below(12)];
                let end = (i + 4).min(b.len());
                b[i..end].copy_from_slice(&v.to_be_bytes()[..end - i]);
            }
            2 => b.truncate(rng.below(b.len() + 1)),
            _ => {
                let n = rng.below(256);
                b = BytesMut::new();
                for _ in 0..n {
                    b.put_u8(rng.next() as u8);
                }
            }
        }
        let mut dec = Decoder::new(b.freeze());
        let _ = T::decode(&mut dec);
    }
}

fn seed<T: Encode>(v: &T) -> Bytes {
    encode(v)
}

#[test]
fn decoders_never_panic() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let a = Some(fattr(1));
    let r = &mut rng;
    fuzz_one::<Getattr3Args>(r, &seed(&Getattr3Args { object: fh(8) }));
    fuzz_one::<Setattr3Args>(
        r,
        &seed(&Setattr3Args { object: fh(8), new_attributes: sattr_all(), guard: Some(time(1)) }),
    );
    fuzz_one::<Lookup3Args>(r, &seed(&Lookup3Args { what: dirop("abc") }));
    fuzz_one::<Access3Args>(r, &seed(&Access3Args { object: fh(8), access: 63 }));
    fuzz_one::<Readlink3Args>(r, &seed(&Readlink3Args { symlink: fh(8) }));
    fuzz_one::<Read3Args>(r, &seed(&Read3Args { file: fh(8), offset: 1, count: 2 }));
    fuzz_one::<Write3Args>(r, &write_args(10));
    for how in [Createhow3::Unchecked(sattr_all()), Createhow3::Exclusive([1; 8])] {
        fuzz_one::<Create3Args>(r, &seed(&Create3Args { where_: dirop("n"), how }));
    }
    fuzz_one::<Mkdir3Args>(r, &seed(&Mkdir3Args { where_: dirop("d"), attributes: sattr_all() }));
    fuzz_one::<Symlink3Args>(
        r,
        &seed(&Symlink3Args {
            where_: dirop("l"),
            symlink: Symlinkdata3 { symlink_attributes: sattr_all(), symlink_data: "t".into() },
        }),
    );
    let dev = Devicedata3 { dev_attributes: sattr_all(), spec: Specdata3::default() };
    fuzz_one::<Mknod3Args>(r, &seed(&Mknod3Args { where_: dirop("c"), what: Mknoddata3::Chr(dev) }));
    fuzz_one::<Remove3Args>(r, &seed(&Remove3Args { object: dirop("x") }));
    fuzz_one::<Rmdir3Args>(r, &seed(&Rmdir3Args { object: dirop("x") }));
    fuzz_one::<Rename3Args>(r, &seed(&Rename3Args { from: dirop("a"), to: dirop("b") }));
    fuzz_one::<Link3Args>(r, &seed(&Link3Args { file: fh(8), link: dirop("l") }));
    fuzz_one::<Readdir3Args>(r, &seed(&Readdir3Args::default()));
    fuzz_one::<Readdirplus3Args>(r, &seed(&Readdirplus3Args::default()));
    fuzz_one::<Fsstat3Args>(r, &seed(&Fsstat3Args::default()));
    fuzz_one::<Fsinfo3Args>(r, &seed(&Fsinfo3Args::default()));
    fuzz_one::<Pathconf3Args>(r, &seed(&Pathconf3Args::default()));
    fuzz_one::<Commit3Args>(r, &seed(&Commit3Args::default()));

    fuzz_one::<Getattr3Res>(r, &seed(&Getattr3Res::Ok(Getattr3ResOk { obj_attributes: fattr(1) })));
    fuzz_one::<Lookup3Res>(
        r,
        &seed(&Lookup3Res::Ok(Lookup3ResOk { object: fh(9), obj_attributes: a, dir_attributes: a })),
    );
    fuzz_one::<Read3Res>(
        r,
        &seed(&Read3Res::Ok(Read3ResOk { file_attributes: a, count: 3, eof: true, data: Bytes::from_static(b"abc") })),
    );
    fuzz_one::<Write3Res>(r, &seed(&Write3Res::Fail(Nfsstat3::Nospc, Write3ResFail { file_wcc: wcc() })));
    fuzz_one::<Create3Res>(
        r,
        &seed(&Create3Res::Ok(Create3ResOk { obj: Some(fh(4)), obj_attributes: a, dir_wcc: wcc() })),
    );
    fuzz_one::<Readdir3Res>(
        r,
        &seed(&Readdir3Res::Ok(Readdir3ResOk {
            dir_attributes: a,
            cookieverf: [0; 8],
            reply: Dirlist3 { entries: vec![Entry3 { fileid: 1, name: "a".into(), cookie: 1 }; 3], eof: true },
        })),
    );
    fuzz_one::<Readdirplus3Res>(
        r,
        &seed(&Readdirplus3Res::Ok(Readdirplus3ResOk {
            dir_attributes: a,
            cookieverf: [0; 8],
            reply: Dirlistplus3 {
                entries: vec![
                    Entryplus3 {
                        fileid: 1,
                        name: "a".into(),
                        cookie: 1,
                        name_attributes: a,
                        name_handle: Some(fh(8)),
                    };
                    2
                ],
                eof: false,
            },
        })),
    );
    fuzz_one::<Fsinfo3Res>(r, &seed(&Fsinfo3Res::Ok(Fsinfo3ResOk::default())));
    fuzz_one::<Pathconf3Res>(r, &seed(&Pathconf3Res::Ok(Pathconf3ResOk::default())));
    fuzz_one::<Commit3Res>(r, &seed(&Commit3Res::Ok(Commit3ResOk::default())));

    fuzz_one::<Mountres3>(
        r,
        &seed(&Mountres3::Ok(Mountres3Ok { fhandle: Fhandle3::from("abcd"), auth_flavors: vec![1] })),
    );
    fuzz_one::<Mountlist>(r, &seed(&Mountlist(vec![Mountbody { ml_hostname: "h".into(), ml_directory: "/d".into() }])));
    fuzz_one::<Exports>(r, &seed(&Exports(vec![Exportnode { ex_dir: "/".into(), ex_groups: vec!["g".into()] }])));
    fuzz_one::<Pmaplist>(r, &seed(&Pmaplist(vec![Mapping::default(); 2])));
    fuzz_one::<CallArgs>(r, &seed(&CallArgs { prog: 1, vers: 1, proc: 1, args: Bytes::from_static(b"abcd") }));
    fuzz_one::<CallResult>(r, &seed(&CallResult { port: 1, res: Bytes::from_static(b"ab") }));
}

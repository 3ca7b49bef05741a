//! Wire compatibility with an independent implementation (`nfs3_types`):
//! for each case the same value is built on both sides and
//! - our encoding is byte-identical to theirs,
//! - we decode their bytes to our value,
//! - they decode our bytes, and re-encoding gives the same bytes,
//! - selected fields of their decoded value match ours.

mod common;

use std::fmt::Debug;
use std::io::Cursor;

use bytes::Bytes;
use common::*;
use keel_nfs3_proto::mount as km;
use keel_nfs3_proto::portmap as kp;
use keel_nfs3_proto::*;
use keel_xdr::{Decode, Encode};
use nfs3_types::mount as tm;
use nfs3_types::nfs3 as t;
use nfs3_types::portmap as tp;
use nfs3_types::xdr_codec::{List, Opaque, Pack, Unpack};

fn pack<T: Pack>(v: &T) -> Vec<u8> {
    let mut out = Vec::new();
    let n = v.pack(&mut out).expect("nfs3_types pack");
    assert_eq!(n, out.len());
    assert_eq!(v.packed_size(), out.len());
    out
}

fn unpack<T: Unpack>(b: &[u8]) -> T {
    let mut cur = Cursor::new(b);
    let (v, n) = T::unpack(&mut cur).expect("nfs3_types unpack");
    assert_eq!(n, b.len(), "nfs3_types consumed every byte");
    v
}

/// The four checks; returns their decoding of our bytes for field checks.
#[track_caller]
fn check<O, T>(ours: &O, theirs: &T) -> T
where
    O: Encode + Decode + PartialEq + Debug,
    T: Pack + Unpack,
{
    let our_bytes = encode(ours);
    let their_bytes = pack(theirs);
    assert_eq!(&our_bytes[..], &their_bytes[..], "byte equality for {ours:?}");
    assert_eq!(&decode::<O>(Bytes::from(their_bytes)).unwrap(), ours);
    let back: T = unpack(&our_bytes);
    assert_eq!(pack(&back), our_bytes);
    back
}

fn t_time(x: Nfstime3) -> t::nfstime3 {
    t::nfstime3 { seconds: x.seconds, nseconds: x.nseconds }
}

fn t_ftype(f: Ftype3) -> t::ftype3 {
    match f {
        Ftype3::Reg => t::ftype3::NF3REG,
        Ftype3::Dir => t::ftype3::NF3DIR,
        Ftype3::Blk => t::ftype3::NF3BLK,
        Ftype3::Chr => t::ftype3::NF3CHR,
        Ftype3::Lnk => t::ftype3::NF3LNK,
        Ftype3::Sock => t::ftype3::NF3SOCK,
        Ftype3::Fifo => t::ftype3::NF3FIFO,
    }
}

fn t_fattr(a: &Fattr3) -> t::fattr3 {
    t::fattr3 {
        type_: t_ftype(a.ftype),
        mode: a.mode,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        used: a.used,
        rdev: t::specdata3 { specdata1: a.rdev.specdata1, specdata2: a.rdev.specdata2 },
        fsid: a.fsid,
        fileid: a.fileid,
        atime: t_time(a.atime),
        mtime: t_time(a.mtime),
        ctime: t_time(a.ctime),
    }
}

fn t_opt<T: Pack + Unpack, U>(o: Option<U>, f: impl FnOnce(U) -> T) -> t::Nfs3Option<T> {
    match o {
        Some(v) => t::Nfs3Option::Some(f(v)),
        None => t::Nfs3Option::None,
    }
}

fn t_fh(h: &NfsFh3) -> t::nfs_fh3 {
    t::nfs_fh3 { data: Opaque::owned(h.data.to_vec()) }
}

fn t_sattr(s: &Sattr3) -> t::sattr3 {
    t::sattr3 {
        mode: t_opt(s.mode, |v| v),
        uid: t_opt(s.uid, |v| v),
        gid: t_opt(s.gid, |v| v),
        size: t_opt(s.size, |v| v),
        atime: match s.atime {
            SetTime::DontChange => t::set_atime::DONT_CHANGE,
            SetTime::ServerTime => t::set_atime::SET_TO_SERVER_TIME,
            SetTime::ClientTime(x) => t::set_atime::SET_TO_CLIENT_TIME(t_time(x)),
        },
        mtime: match s.mtime {
            SetTime::DontChange => t::set_mtime::DONT_CHANGE,
            SetTime::ServerTime => t::set_mtime::SET_TO_SERVER_TIME,
            SetTime::ClientTime(x) => t::set_mtime::SET_TO_CLIENT_TIME(t_time(x)),
        },
    }
}

fn t_dirop(d: &Diropargs3) -> t::diropargs3<'static> {
    t::diropargs3 { dir: t_fh(&d.dir), name: t::filename3::from(d.name.as_bytes().to_vec()) }
}

fn assert_fattr_fields(theirs: &t::fattr3, ours: &Fattr3) {
    assert_eq!(theirs.type_, t_ftype(ours.ftype));
    assert_eq!(theirs.mode, ours.mode);
    assert_eq!(theirs.nlink, ours.nlink);
    assert_eq!((theirs.uid, theirs.gid), (ours.uid, ours.gid));
    assert_eq!((theirs.size, theirs.used), (ours.size, ours.used));
    assert_eq!((theirs.rdev.specdata1, theirs.rdev.specdata2), (ours.rdev.specdata1, ours.rdev.specdata2));
    assert_eq!((theirs.fsid, theirs.fileid), (ours.fsid, ours.fileid));
    assert_eq!(theirs.atime, t_time(ours.atime));
    assert_eq!(theirs.mtime, t_time(ours.mtime));
    assert_eq!(theirs.ctime, t_time(ours.ctime));
}

#[test]
fn nfsstat3_names_and_values() {
    for v in [0u32, 1, 2, 5, 6, 13, 17, 18, 19, 20, 21, 22, 27, 28, 30, 31, 63, 66, 69, 70, 71]
        .into_iter()
        .chain(10001..=10008)
    {
        let b = Bytes::copy_from_slice(&v.to_be_bytes());
        let ours: Nfsstat3 = decode(b.clone()).unwrap();
        let theirs: t::nfsstat3 = unpack(&b);
        assert_eq!(ours.name(), theirs.to_string());
        assert_eq!(pack(&theirs), encode(&ours));
    }
}

#[test]
fn fattr3() {
    for ftype in [Ftype3::Reg, Ftype3::Dir, Ftype3::Blk, Ftype3::Chr, Ftype3::Lnk, Ftype3::Sock, Ftype3::Fifo] {
        let ours = Fattr3 { ftype, ..fattr(1234) };
        let theirs = check(&ours, &t_fattr(&ours));
        assert_fattr_fields(&theirs, &ours);
    }
    let post: PostOpAttr = Some(fattr(5));
    check(&post, &t::post_op_attr::Some(t_fattr(&fattr(5))));
    check(&PostOpAttr::None, &t::post_op_attr::None);
}

#[test]
fn sattr3_every_arm() {
    let times = [SetTime::DontChange, SetTime::ServerTime, SetTime::ClientTime(time(99))];
    let mut cases = vec![Sattr3::default(), sattr_all()];
    for atime in times {
        for mtime in times {
            cases.push(Sattr3 { atime, mtime, ..Default::default() });
        }
    }
    cases.push(Sattr3 { mode: Some(0o4755), ..Default::default() });
    cases.push(Sattr3 { uid: Some(7), ..Default::default() });
    cases.push(Sattr3 { gid: Some(8), ..Default::default() });
    cases.push(Sattr3 { size: Some(u64::MAX), ..Default::default() });
    for ours in cases {
        let theirs = check(&ours, &t_sattr(&ours));
        assert_eq!(theirs.mode.is_some(), ours.mode.is_some());
        assert_eq!(theirs.size.is_some(), ours.size.is_some());
    }
}

#[test]
fn lookup3_args_and_res() {
    for name in ["a", "ab", "abc", "abcd", "hello world.txt"] {
        let ours = Lookup3Args { what: dirop(name) };
        let theirs = check(&ours, &t::LOOKUP3args { what: t_dirop(&ours.what) });
        assert_eq!(theirs.what.name.as_ref(), name.as_bytes());
        assert_eq!(theirs.what.dir.data.as_ref(), ours.what.dir.as_bytes());
    }
    let ok: Lookup3Res =
        NfsResult::Ok(Lookup3ResOk { object: fh(28), obj_attributes: Some(fattr(3)), dir_attributes: None });
    let t_ok: t::LOOKUP3res = t::Nfs3Result::Ok(t::LOOKUP3resok {
        object: t_fh(&fh(28)),
        obj_attributes: t::Nfs3Option::Some(t_fattr(&fattr(3))),
        dir_attributes: t::Nfs3Option::None,
    });
    check(&ok, &t_ok);
    let fail: Lookup3Res = NfsResult::Fail(Nfsstat3::Noent, Lookup3ResFail { dir_attributes: Some(fattr(1)) });
    let t_fail: t::LOOKUP3res = t::Nfs3Result::Err((
        t::nfsstat3::NFS3ERR_NOENT,
        t::LOOKUP3resfail { dir_attributes: t::Nfs3Option::Some(t_fattr(&fattr(1))) },
    ));
    check(&fail, &t_fail);
}

#[test]
fn write3_args() {
    for len in [0usize, 1, 5, 1023, 1024, 70_001] {
        let data = Bytes::from((0..len).map(|i| i as u8).collect::<Vec<u8>>());
        for (stable, t_stable) in [
            (StableHow::Unstable, t::stable_how::UNSTABLE),
            (StableHow::DataSync, t::stable_how::DATA_SYNC),
            (StableHow::FileSync, t::stable_how::FILE_SYNC),
        ] {
            let ours = Write3Args { file: fh(40), offset: 1 << 35, count: len as u32, stable, data: data.clone() };
            let theirs = check(
                &ours,
                &t::WRITE3args {
                    file: t_fh(&ours.file),
                    offset: ours.offset,
                    count: ours.count,
                    stable: t_stable,
                    data: Opaque::owned(data.to_vec()),
                },
            );
            assert_eq!(theirs.data.as_ref(), &data[..]);
            assert_eq!((theirs.offset, theirs.count, theirs.stable), (ours.offset, ours.count, t_stable));
        }
    }
}

#[test]
fn read3_resok() {
    for len in [0usize, 3, 4096, 100_003] {
        let data = Bytes::from(vec![0x5a; len]);
        let ours = Read3ResOk { file_attributes: Some(fattr(8)), count: len as u32, eof: len == 3, data: data.clone() };
        let theirs = check(
            &ours,
            &t::READ3resok {
                file_attributes: t::Nfs3Option::Some(t_fattr(&fattr(8))),
                count: len as u32,
                eof: len == 3,
                data: Opaque::owned(data.to_vec()),
            },
        );
        assert_eq!(theirs.data.as_ref(), &data[..]);
        assert_eq!(theirs.eof, ours.eof);
        // The whole union too.
        let res: Read3Res = NfsResult::Ok(ours);
        let t_res: t::READ3res = t::Nfs3Result::Ok(theirs);
        check(&res, &t_res);
    }
}

#[test]
fn readdirplus3_resok_two_entries() {
    let e1 = Entryplus3 {
        fileid: 11,
        name: "first".into(),
        cookie: 100,
        name_attributes: Some(fattr(11)),
        name_handle: Some(fh(24)),
    };
    let e2 =
        Entryplus3 { fileid: 12, name: "second-entry".into(), cookie: 101, name_attributes: None, name_handle: None };
    let ours = Readdirplus3ResOk {
        dir_attributes: Some(fattr(2)),
        cookieverf: *b"cookieV!",
        reply: Dirlistplus3 { entries: vec![e1.clone(), e2.clone()], eof: true },
    };
    let t_entry = |e: &Entryplus3| t::entryplus3 {
        fileid: e.fileid,
        name: t::filename3::from(e.name.as_bytes().to_vec()),
        cookie: e.cookie,
        name_attributes: t_opt(e.name_attributes, |a| t_fattr(&a)),
        name_handle: t_opt(e.name_handle.clone(), |h| t_fh(&h)),
    };
    let theirs = t::READDIRPLUS3resok {
        dir_attributes: t::Nfs3Option::Some(t_fattr(&fattr(2))),
        cookieverf: t::cookieverf3(*b"cookieV!"),
        reply: t::dirlistplus3 { entries: List(vec![t_entry(&e1), t_entry(&e2)]), eof: true },
    };
    let back = check(&ours, &theirs);
    assert_eq!(back.reply.entries.0.len(), 2);
    assert!(back.reply.eof);
    for (t_e, e) in back.reply.entries.0.iter().zip([&e1, &e2]) {
        assert_eq!(t_e.fileid, e.fileid);
        assert_eq!(t_e.cookie, e.cookie);
        assert_eq!(t_e.name.as_ref(), e.name.as_bytes());
        assert_eq!(t_e.name_handle.is_some(), e.name_handle.is_some());
        // Their packed size of one list element agrees with our xdr_len.
        assert_eq!(4 + t_e.packed_size(), e.xdr_len());
    }

    // READDIR too, with the streaming helpers on our side.
    let entries =
        [Entry3 { fileid: 1, name: ".".into(), cookie: 1 }, Entry3 { fileid: 2, name: "..".into(), cookie: 2 }];
    let ours = Readdir3ResOk {
        dir_attributes: None,
        cookieverf: [0; 8],
        reply: Dirlist3 { entries: entries.to_vec(), eof: false },
    };
    let theirs = t::READDIR3resok {
        dir_attributes: t::Nfs3Option::None,
        cookieverf: t::cookieverf3([0; 8]),
        reply: t::dirlist3 {
            entries: List(
                entries
                    .iter()
                    .map(|e| t::entry3 {
                        fileid: e.fileid,
                        name: t::filename3::from(e.name.as_bytes().to_vec()),
                        cookie: e.cookie,
                    })
                    .collect(),
            ),
            eof: false,
        },
    };
    check(&ours, &theirs);
}

#[test]
fn create3_args_all_modes() {
    let ours_and_theirs = [
        (Createhow3::Unchecked(sattr_all()), t::createhow3::UNCHECKED(t_sattr(&sattr_all()))),
        (Createhow3::Guarded(Sattr3::default()), t::createhow3::GUARDED(t_sattr(&Sattr3::default()))),
        (
            Createhow3::Exclusive(*b"\x01\x02\x03\x04\x05\x06\x07\x08"),
            t::createhow3::EXCLUSIVE(t::createverf3([1, 2, 3, 4, 5, 6, 7, 8])),
        ),
    ];
    for (how, t_how) in ours_and_theirs {
        let ours = Create3Args { where_: dirop("newfile"), how };
        let theirs = check(&ours, &t::CREATE3args { where_: t_dirop(&ours.where_), how: t_how });
        match (&theirs.how, &ours.how) {
            (t::createhow3::UNCHECKED(_), Createhow3::Unchecked(_))
            | (t::createhow3::GUARDED(_), Createhow3::Guarded(_)) => {}
            (t::createhow3::EXCLUSIVE(v), Createhow3::Exclusive(o)) => assert_eq!(&v.0, o),
            other => panic!("mode mismatch: {other:?}"),
        }
    }
}

#[test]
fn mknod3_args_chr_and_fifo() {
    let spec = Specdata3 { specdata1: 136, specdata2: 4 };
    let dev = Devicedata3 { dev_attributes: sattr_all(), spec };
    let t_dev = || t::devicedata3 {
        dev_attributes: t_sattr(&sattr_all()),
        spec: t::specdata3 { specdata1: 136, specdata2: 4 },
    };
    let ours = Mknod3Args { where_: dirop("tty"), what: Mknoddata3::Chr(dev) };
    let theirs = check(&ours, &t::MKNOD3args { where_: t_dirop(&ours.where_), what: t::mknoddata3::NF3CHR(t_dev()) });
    match theirs.what {
        t::mknoddata3::NF3CHR(d) => assert_eq!((d.spec.specdata1, d.spec.specdata2), (136, 4)),
        other => panic!("expected NF3CHR, got {other:?}"),
    }
    let ours = Mknod3Args { where_: dirop("blk"), what: Mknoddata3::Blk(dev) };
    check(&ours, &t::MKNOD3args { where_: t_dirop(&ours.where_), what: t::mknoddata3::NF3BLK(t_dev()) });

    let ours = Mknod3Args {
        where_: dirop("pipe"),
        what: Mknoddata3::Fifo(Sattr3 { mode: Some(0o600), ..Default::default() }),
    };
    let t_attr = t_sattr(&Sattr3 { mode: Some(0o600), ..Default::default() });
    let theirs = check(&ours, &t::MKNOD3args { where_: t_dirop(&ours.where_), what: t::mknoddata3::NF3FIFO(t_attr) });
    assert!(matches!(theirs.what, t::mknoddata3::NF3FIFO(_)));
    let ours = Mknod3Args { where_: dirop("sock"), what: Mknoddata3::Sock(Sattr3::default()) };
    check(
        &ours,
        &t::MKNOD3args { where_: t_dirop(&ours.where_), what: t::mknoddata3::NF3SOCK(t_sattr(&Sattr3::default())) },
    );
}

#[test]
fn mountres3_ok() {
    let ours = km::Mountres3::Ok(km::Mountres3Ok {
        fhandle: km::Fhandle3::from(&[7u8; 33][..]),
        auth_flavors: vec![1, 0, 390003],
    });
    let theirs = tm::mountres3::Ok(tm::mountres3_ok {
        fhandle: tm::fhandle3(Opaque::owned(vec![7; 33])),
        auth_flavors: vec![1, 0, 390003],
    });
    let back = check(&ours, &theirs);
    match back {
        tm::mountres3::Ok(ok) => {
            assert_eq!(ok.fhandle.0.as_ref(), &[7u8; 33]);
            assert_eq!(ok.auth_flavors, vec![1, 0, 390003]);
        }
        tm::mountres3::Err(e) => panic!("expected OK, got {e}"),
    }
    check(&km::Mountres3::Fail(km::Mountstat3::Acces), &tm::mountres3::Err(tm::mountstat3::MNT3ERR_ACCES));

    let ours = km::Exports(vec![
        km::Exportnode { ex_dir: "/srv".into(), ex_groups: vec!["*".into(), "lab".into()] },
        km::Exportnode { ex_dir: "/home".into(), ex_groups: vec![] },
    ]);
    let theirs: tm::exports = List(vec![
        tm::export_node {
            ex_dir: tm::dirpath(Opaque::owned(b"/srv".to_vec())),
            ex_groups: List(vec![tm::name(Opaque::owned(b"*".to_vec())), tm::name(Opaque::owned(b"lab".to_vec()))]),
        },
        tm::export_node { ex_dir: tm::dirpath(Opaque::owned(b"/home".to_vec())), ex_groups: List(vec![]) },
    ]);
    check(&ours, &theirs);
}

#[test]
fn pmap_mapping() {
    let ours = kp::Mapping { prog: MOUNT_PROGRAM, vers: MOUNT_V3, prot: IPPROTO_UDP, port: 20048 };
    let theirs = check(&ours, &tp::mapping { prog: 100005, vers: 3, prot: tp::IPPROTO_UDP, port: 20048 });
    assert_eq!((theirs.prog, theirs.vers, theirs.prot, theirs.port), (100005, 3, 17, 20048));

    let list = kp::Pmaplist(vec![ours, kp::Mapping { prog: NFS_PROGRAM, vers: NFS_V3, prot: IPPROTO_TCP, port: 2049 }]);
    let t_list: tp::pmaplist = List(vec![
        tp::mapping { prog: 100005, vers: 3, prot: 17, port: 20048 },
        tp::mapping { prog: 100003, vers: 3, prot: 6, port: 2049 },
    ]);
    check(&list, &t_list);
    let call = kp::CallArgs { prog: 100003, vers: 3, proc: 0, args: Bytes::from_static(b"xyz") };
    check(&call, &tp::call_args { prog: 100003, vers: 3, proc: 0, args: Opaque::owned(b"xyz".to_vec()) });
    assert_eq!(tp::PROGRAM, PMAP_PROGRAM);
    assert_eq!(tp::VERSION, PMAP_V2);
    assert_eq!((t::PROGRAM, t::VERSION), (NFS_PROGRAM, NFS_V3));
    assert_eq!((tm::PROGRAM, tm::VERSION), (MOUNT_PROGRAM, MOUNT_V3));
}

//! Round trips for every type family: build, encode, decode, compare.

mod common;

use bytes::Bytes;
use common::*;
use keel_nfs3_proto::mount::*;
use keel_nfs3_proto::portmap::*;
use keel_nfs3_proto::*;
use keel_xdr::Encoder;

const ALL_STATUSES: [(Nfsstat3, u32); 29] = [
    (Nfsstat3::Ok, 0),
    (Nfsstat3::Perm, 1),
    (Nfsstat3::Noent, 2),
    (Nfsstat3::Io, 5),
    (Nfsstat3::Nxio, 6),
    (Nfsstat3::Acces, 13),
    (Nfsstat3::Exist, 17),
    (Nfsstat3::Xdev, 18),
    (Nfsstat3::Nodev, 19),
    (Nfsstat3::Notdir, 20),
    (Nfsstat3::Isdir, 21),
    (Nfsstat3::Inval, 22),
    (Nfsstat3::Fbig, 27),
    (Nfsstat3::Nospc, 28),
    (Nfsstat3::Rofs, 30),
    (Nfsstat3::Mlink, 31),
    (Nfsstat3::Nametoolong, 63),
    (Nfsstat3::Notempty, 66),
    (Nfsstat3::Dquot, 69),
    (Nfsstat3::Stale, 70),
    (Nfsstat3::Remote, 71),
    (Nfsstat3::Badhandle, 10001),
    (Nfsstat3::NotSync, 10002),
    (Nfsstat3::BadCookie, 10003),
    (Nfsstat3::Notsupp, 10004),
    (Nfsstat3::Toosmall, 10005),
    (Nfsstat3::Serverfault, 10006),
    (Nfsstat3::Badtype, 10007),
    (Nfsstat3::Jukebox, 10008),
];

#[test]
fn constants() {
    assert_eq!(NFS_PROGRAM, 100003);
    assert_eq!(NFS_V3, 3);
    assert_eq!(MOUNT_PROGRAM, 100005);
    assert_eq!(MOUNT_V3, 3);
    assert_eq!(PMAP_PROGRAM, 100000);
    assert_eq!(PMAP_V2, 2);
    assert_eq!(IPPROTO_TCP, 6);
    assert_eq!(IPPROTO_UDP, 17);
    assert_eq!(NFS3_FHSIZE, 64);
    assert_eq!(NFS3_MAXNAMLEN, 255);
    assert_eq!(FILENAME_DECODE_MAX, 4096);
    assert_eq!(NFSPATH_MAX, 4096);
    assert_eq!(DIRPATH_MAX, 1024);
    assert_eq!(MNTNAMLEN, 255);
    assert_eq!(WRITE_DATA_MAX, 1 << 20);
    assert_eq!(READ_DATA_MAX, 1 << 24);
}

#[test]
fn procedure_numbers() {
    for (i, p) in Nfs3Proc::ALL.iter().enumerate() {
        assert_eq!(*p as u32, i as u32);
        assert_eq!(Nfs3Proc::from_u32(i as u32), Some(*p));
    }
    assert_eq!(Nfs3Proc::from_u32(22), None);
    assert_eq!(Nfs3Proc::from_u32(u32::MAX), None);
    assert_eq!(Nfs3Proc::from_u32(7), Some(Nfs3Proc::Write));
    assert_eq!(Nfs3Proc::Write.name(), "WRITE");
    assert_eq!(Nfs3Proc::Readdirplus.to_string(), "READDIRPLUS");
    assert_eq!(Nfs3Proc::Commit as u32, 21);

    for (i, p) in MountProc::ALL.iter().enumerate() {
        assert_eq!(*p as u32, i as u32);
        assert_eq!(MountProc::from_u32(i as u32), Some(*p));
    }
    assert_eq!(MountProc::from_u32(6), None);
    assert_eq!(MountProc::Mnt.name(), "MNT");
    assert_eq!(MountProc::Umntall.name(), "UMNTALL");

    for (i, p) in PmapProc::ALL.iter().enumerate() {
        assert_eq!(*p as u32, i as u32);
        assert_eq!(PmapProc::from_u32(i as u32), Some(*p));
    }
    assert_eq!(PmapProc::from_u32(6), None);
    assert_eq!(PmapProc::Getport.name(), "GETPORT");
    assert_eq!(PmapProc::Callit as u32, 5);
}

#[test]
fn nfsstat3_values() {
    for (s, v) in ALL_STATUSES {
        assert_eq!(s as u32, v);
        let b = roundtrip(&s);
        assert_eq!(&b[..], &v.to_be_bytes());
    }
    assert_eq!(Nfsstat3::Nametoolong.to_string(), "NFS3ERR_NAMETOOLONG");
    assert_eq!(Nfsstat3::NotSync.name(), "NFS3ERR_NOT_SYNC");
    assert_eq!(Nfsstat3::Ok.name(), "NFS3_OK");
}

#[test]
fn basic_types() {
    for (t, v) in [
        (Ftype3::Reg, 1u32),
        (Ftype3::Dir, 2),
        (Ftype3::Blk, 3),
        (Ftype3::Chr, 4),
        (Ftype3::Lnk, 5),
        (Ftype3::Sock, 6),
        (Ftype3::Fifo, 7),
    ] {
        assert_eq!(&roundtrip(&t)[..], &v.to_be_bytes());
    }
    for (s, v) in [(StableHow::Unstable, 0u32), (StableHow::DataSync, 1), (StableHow::FileSync, 2)] {
        assert_eq!(&roundtrip(&s)[..], &v.to_be_bytes());
    }
    roundtrip(&Specdata3 { specdata1: 1, specdata2: u32::MAX });
    roundtrip(&time(5));
    for n in 0..=NFS3_FHSIZE {
        let h = fh(n);
        let b = roundtrip(&h);
        assert_eq!(b.len(), h.xdr_len());
    }
    for n in 0..=9 {
        let name = Filename3::from(vec![b'x'; n]);
        assert_eq!(roundtrip(&name).len(), name.xdr_len());
    }
    // Names are bytes, not UTF-8.
    roundtrip(&Filename3::from(&[0xff, 0xfe, 0x00, 0x80][..]));
    roundtrip(&Nfspath3::from("../a/b/c"));
}

#[test]
fn attributes() {
    let a = fattr(42);
    assert_eq!(roundtrip(&a).len(), FATTR3_XDR_LEN);
    assert_eq!(roundtrip(&Fattr3::default()).len(), FATTR3_XDR_LEN);
    roundtrip(&PostOpAttr::None);
    assert_eq!(roundtrip(&Some(a)).len(), 4 + FATTR3_XDR_LEN);
    roundtrip(&wcc());
    roundtrip(&WccData::default());
    roundtrip(&WccData { before: None, after: Some(a) });
    roundtrip(&WccData { before: Some(WccAttr::default()), after: None });
    roundtrip(&PostOpFh3::None);
    roundtrip(&Some(fh(28)));
}

#[test]
fn sattr3_every_arm() {
    roundtrip(&Sattr3::default());
    assert_eq!(encode(&Sattr3::default()).len(), 24, "six FALSE/DONT_CHANGE words");
    let full = roundtrip(&sattr_all());
    assert_eq!(full.len(), 4 * 6 + 4 * 3 + 8 + 8);
    for how in [SetTime::DontChange, SetTime::ServerTime, SetTime::ClientTime(time(3))] {
        roundtrip(&how);
        roundtrip(&Sattr3 { atime: how, mtime: how, ..Default::default() });
    }
    roundtrip(&Sattr3 { mode: Some(0), ..Default::default() });
    roundtrip(&Sattr3 { uid: Some(1), ..Default::default() });
    roundtrip(&Sattr3 { gid: Some(2), ..Default::default() });
    roundtrip(&Sattr3 { size: Some(0), ..Default::default() });
    // set_mode3 is bool + u32, exactly like Option<u32>.
    let b = encode(&Sattr3 { mode: Some(0o644), ..Default::default() });
    assert_eq!(&b[..4], &1u32.to_be_bytes());
    assert_eq!(&b[4..8], &0o644u32.to_be_bytes());
}

#[test]
fn unions() {
    for how in [
        Createhow3::Unchecked(sattr_all()),
        Createhow3::Guarded(Sattr3::default()),
        Createhow3::Exclusive(*b"verifier"),
    ] {
        let b = roundtrip(&how);
        assert_eq!(&b[..4], &(how.mode() as u32).to_be_bytes());
    }
    let dev = Devicedata3 { dev_attributes: sattr_all(), spec: Specdata3 { specdata1: 1, specdata2: 3 } };
    for m in [
        Mknoddata3::Chr(dev),
        Mknoddata3::Blk(dev),
        Mknoddata3::Sock(sattr_all()),
        Mknoddata3::Fifo(Sattr3::default()),
        Mknoddata3::Reg,
        Mknoddata3::Dir,
        Mknoddata3::Lnk,
    ] {
        let b = roundtrip(&m);
        assert_eq!(&b[..4], &(m.ftype() as u32).to_be_bytes());
    }
    assert_eq!(encode(&Mknoddata3::Dir).len(), 4, "the default arm is void");
    roundtrip(&Symlinkdata3 { symlink_attributes: sattr_all(), symlink_data: "target".into() });
}

#[test]
fn every_args_type() {
    roundtrip(&Getattr3Args { object: fh(8) });
    roundtrip(&Setattr3Args { object: fh(8), new_attributes: sattr_all(), guard: None });
    roundtrip(&Setattr3Args { object: fh(8), new_attributes: sattr_all(), guard: Some(time(9)) });
    roundtrip(&Lookup3Args { what: dirop("hello.txt") });
    roundtrip(&Access3Args { object: fh(8), access: ACCESS3_READ | ACCESS3_EXECUTE });
    roundtrip(&Readlink3Args { symlink: fh(8) });
    roundtrip(&Read3Args { file: fh(8), offset: 1 << 40, count: 65536 });
    roundtrip(&Write3Args {
        file: fh(8),
        offset: 3,
        count: 5,
        stable: StableHow::FileSync,
        data: Bytes::from_static(b"hello"),
    });
    roundtrip(&Create3Args { where_: dirop("new"), how: Createhow3::Exclusive([1; 8]) });
    roundtrip(&Mkdir3Args { where_: dirop("d"), attributes: sattr_all() });
    roundtrip(&Symlink3Args {
        where_: dirop("ln"),
        symlink: Symlinkdata3 { symlink_attributes: Sattr3::default(), symlink_data: "/x".into() },
    });
    roundtrip(&Mknod3Args { where_: dirop("fifo"), what: Mknoddata3::Fifo(sattr_all()) });
    roundtrip(&Remove3Args { object: dirop("gone") });
    roundtrip(&Rmdir3Args { object: dirop("gone") });
    roundtrip(&Rename3Args { from: dirop("a"), to: dirop("bb") });
    roundtrip(&Link3Args { file: fh(3), link: dirop("hard") });
    roundtrip(&Readdir3Args { dir: fh(8), cookie: 7, cookieverf: [2; 8], count: 4096 });
    roundtrip(&Readdirplus3Args { dir: fh(8), cookie: 7, cookieverf: [2; 8], dircount: 1024, maxcount: 32768 });
    roundtrip(&Fsstat3Args { fsroot: fh(8) });
    roundtrip(&Fsinfo3Args { fsroot: fh(8) });
    roundtrip(&Pathconf3Args { object: fh(8) });
    roundtrip(&Commit3Args { file: fh(8), offset: 0, count: 0 });
}

/// Round-trips both arms of a result alias.
fn both_arms<T, F>(ok: T, fail: F)
where
    T: keel_xdr::Encode + keel_xdr::Decode + PartialEq + std::fmt::Debug,
    F: keel_xdr::Encode + keel_xdr::Decode + PartialEq + std::fmt::Debug,
{
    let b = roundtrip(&NfsResult::<T, F>::Ok(ok));
    assert_eq!(&b[..4], &[0; 4]);
    for status in [Nfsstat3::Noent, Nfsstat3::Jukebox] {
        let r = NfsResult::<T, F>::Fail(status, fail_clone(&fail));
        let b = roundtrip(&r);
        assert_eq!(&b[..4], &(status as u32).to_be_bytes());
        assert_eq!(r.status(), status);
        assert!(!r.is_ok());
    }
}

/// `F: Clone` is not required by `both_arms`; re-decode to copy.
fn fail_clone<F: keel_xdr::Encode + keel_xdr::Decode>(f: &F) -> F {
    decode(encode(f)).unwrap()
}

#[test]
fn every_res_type() {
    let a = Some(fattr(1));
    both_arms::<Getattr3ResOk, ()>(Getattr3ResOk { obj_attributes: fattr(1) }, ());
    let g: Getattr3Res = NfsResult::Fail(Nfsstat3::Stale, ());
    assert_eq!(encode(&g).len(), 4, "GETATTR's failure arm is void");

    both_arms(Setattr3ResOk { obj_wcc: wcc() }, Setattr3ResFail { obj_wcc: wcc() });
    both_arms(
        Lookup3ResOk { object: fh(16), obj_attributes: a, dir_attributes: None },
        Lookup3ResFail { dir_attributes: a },
    );
    both_arms(Access3ResOk { obj_attributes: a, access: ACCESS3_MODIFY }, Access3ResFail { obj_attributes: None });
    both_arms(
        Readlink3ResOk { symlink_attributes: a, data: "../t".into() },
        Readlink3ResFail { symlink_attributes: a },
    );
    both_arms(
        Read3ResOk { file_attributes: a, count: 3, eof: true, data: Bytes::from_static(b"abc") },
        Read3ResFail { file_attributes: a },
    );
    both_arms(
        Write3ResOk { file_wcc: wcc(), count: 9, committed: StableHow::DataSync, verf: [7; 8] },
        Write3ResFail { file_wcc: wcc() },
    );
    both_arms(Create3ResOk { obj: Some(fh(12)), obj_attributes: a, dir_wcc: wcc() }, Create3ResFail { dir_wcc: wcc() });
    both_arms(
        Mkdir3ResOk { obj: None, obj_attributes: None, dir_wcc: WccData::default() },
        Mkdir3ResFail { dir_wcc: wcc() },
    );
    both_arms(
        Symlink3ResOk { obj: Some(fh(1)), obj_attributes: a, dir_wcc: wcc() },
        Symlink3ResFail { dir_wcc: wcc() },
    );
    both_arms(Mknod3ResOk { obj: Some(fh(64)), obj_attributes: a, dir_wcc: wcc() }, Mknod3ResFail { dir_wcc: wcc() });
    both_arms(Remove3ResOk { dir_wcc: wcc() }, Remove3ResFail { dir_wcc: wcc() });
    both_arms(Rmdir3ResOk { dir_wcc: wcc() }, Rmdir3ResFail { dir_wcc: wcc() });
    both_arms(
        Rename3ResOk { fromdir_wcc: wcc(), todir_wcc: WccData::default() },
        Rename3ResFail { fromdir_wcc: WccData::default(), todir_wcc: wcc() },
    );
    both_arms(
        Link3ResOk { file_attributes: a, linkdir_wcc: wcc() },
        Link3ResFail { file_attributes: None, linkdir_wcc: wcc() },
    );
    both_arms(
        Readdir3ResOk {
            dir_attributes: a,
            cookieverf: [3; 8],
            reply: Dirlist3 {
                entries: vec![
                    Entry3 { fileid: 1, name: ".".into(), cookie: 1 },
                    Entry3 { fileid: 2, name: "..".into(), cookie: 2 },
                    Entry3 { fileid: 3, name: "file".into(), cookie: 3 },
                ],
                eof: true,
            },
        },
        Readdir3ResFail { dir_attributes: a },
    );
    both_arms(Readdir3ResOk::default(), Readdir3ResFail { dir_attributes: None });
    both_arms(
        Readdirplus3ResOk {
            dir_attributes: a,
            cookieverf: [3; 8],
            reply: Dirlistplus3 {
                entries: vec![
                    Entryplus3 {
                        fileid: 1,
                        name: "a".into(),
                        cookie: 10,
                        name_attributes: a,
                        name_handle: Some(fh(20)),
                    },
                    Entryplus3 {
                        fileid: 2,
                        name: "bcdef".into(),
                        cookie: 11,
                        name_attributes: None,
                        name_handle: None,
                    },
                ],
                eof: false,
            },
        },
        Readdirplus3ResFail { dir_attributes: a },
    );
    both_arms(
        Fsstat3ResOk {
            obj_attributes: a,
            tbytes: 1 << 40,
            fbytes: 1 << 39,
            abytes: 1 << 38,
            tfiles: 1000,
            ffiles: 500,
            afiles: 400,
            invarsec: 0,
        },
        Fsstat3ResFail { obj_attributes: a },
    );
    both_arms(
        Fsinfo3ResOk {
            obj_attributes: a,
            rtmax: 1 << 20,
            rtpref: 1 << 20,
            rtmult: 4096,
            wtmax: 1 << 20,
            wtpref: 1 << 20,
            wtmult: 4096,
            dtpref: 65536,
            maxfilesize: u64::MAX,
            time_delta: Nfstime3 { seconds: 0, nseconds: 1 },
            properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
        },
        Fsinfo3ResFail { obj_attributes: None },
    );
    both_arms(
        Pathconf3ResOk {
            obj_attributes: a,
            linkmax: 32000,
            name_max: 255,
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
        },
        Pathconf3ResFail { obj_attributes: a },
    );
    both_arms(Commit3ResOk { file_wcc: wcc(), verf: *b"12345678" }, Commit3ResFail { file_wcc: wcc() });
}

#[test]
fn result_helpers() {
    let r: Lookup3Res = NfsResult::Fail(Nfsstat3::Noent, Lookup3ResFail::default());
    assert_eq!(r.clone().into_result(), Err((Nfsstat3::Noent, Lookup3ResFail::default())));
    assert_eq!(r.ok(), None);
    let r: Getattr3Res = NfsResult::Ok(Getattr3ResOk::default());
    assert!(r.is_ok());
    assert_eq!(r.status(), Nfsstat3::Ok);
    assert_eq!(r.ok(), Some(Getattr3ResOk::default()));
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "NfsResult::Fail with NFS3_OK")]
fn encoding_fail_with_ok_status_is_a_bug() {
    let r: Getattr3Res = NfsResult::Fail(Nfsstat3::Ok, ());
    encode(&r);
}

/// The payloads of WRITE calls and READ replies are spliced into the
/// encoder's output as their own segment, and decode as slices of the
/// received buffer: neither direction copies them.
#[test]
fn payloads_are_not_copied() {
    let data = Bytes::from(vec![0xab; 64 * 1024 + 3]);
    let args = Write3Args {
        file: fh(16),
        offset: 0,
        count: data.len() as u32,
        stable: StableHow::Unstable,
        data: data.clone(),
    };
    let mut enc = Encoder::new();
    enc.put(&args);
    let segs = enc.finish_bytes();
    assert!(segs.iter().any(|s| s.as_ptr() == data.as_ptr() && s.len() == data.len()));
    assert_eq!(segs.last().map(|s| s.len()), Some(1), "padding after the payload");

    let wire = roundtrip(&args);
    let back: Write3Args = decode(wire.clone()).unwrap();
    let wire_range = wire.as_ptr() as usize..wire.as_ptr() as usize + wire.len();
    assert!(wire_range.contains(&(back.data.as_ptr() as usize)), "a slice of the record");

    let res: Read3Res = NfsResult::Ok(Read3ResOk {
        file_attributes: Some(fattr(5)),
        count: data.len() as u32,
        eof: false,
        data: data.clone(),
    });
    let mut enc = Encoder::new();
    enc.put(&res);
    let segs = enc.finish_bytes();
    assert!(segs.iter().any(|s| s.as_ptr() == data.as_ptr()));
    let wire = roundtrip(&res);
    let back = decode::<Read3Res>(wire.clone()).unwrap().ok().unwrap();
    let wire_range = wire.as_ptr() as usize..wire.as_ptr() as usize + wire.len();
    assert!(wire_range.contains(&(back.data.as_ptr() as usize)));
}

#[test]
fn mount_types() {
    for (s, v) in [
        (Mountstat3::Ok, 0u32),
        (Mountstat3::Perm, 1),
        (Mountstat3::Noent, 2),
        (Mountstat3::Io, 5),
        (Mountstat3::Acces, 13),
        (Mountstat3::Notdir, 20),
        (Mountstat3::Inval, 22),
        (Mountstat3::Nametoolong, 63),
        (Mountstat3::Notsupp, 10004),
        (Mountstat3::Serverfault, 10006),
    ] {
        assert_eq!(&roundtrip(&s)[..], &v.to_be_bytes());
    }
    assert_eq!(Mountstat3::Acces.to_string(), "MNT3ERR_ACCES");
    roundtrip(&Dirpath::from("/export/home"));
    roundtrip(&Name::from("client.example"));
    roundtrip(&Fhandle3::from(&[9u8; 64][..]));

    let ok = Mountres3::Ok(Mountres3Ok { fhandle: Fhandle3::from(&[1u8; 20][..]), auth_flavors: vec![1, 0] });
    roundtrip(&ok);
    assert_eq!(ok.status(), Mountstat3::Ok);
    for s in [Mountstat3::Noent, Mountstat3::Acces, Mountstat3::Serverfault] {
        let b = roundtrip(&Mountres3::Fail(s));
        assert_eq!(b.len(), 4, "failure arm is void");
    }
    roundtrip(&Mountres3::Ok(Mountres3Ok::default()));

    roundtrip(&Mountlist::default());
    roundtrip(&Mountlist(vec![
        Mountbody { ml_hostname: "h1".into(), ml_directory: "/a".into() },
        Mountbody { ml_hostname: "host-two".into(), ml_directory: "/b/c".into() },
    ]));
    assert_eq!(&encode(&Mountlist::default())[..], &[0, 0, 0, 0]);

    roundtrip(&Exports::default());
    let ex = Exports(vec![
        Exportnode { ex_dir: "/".into(), ex_groups: vec![] },
        Exportnode { ex_dir: "/data".into(), ex_groups: vec!["g1".into(), "netgroup2".into()] },
    ]);
    roundtrip(&ex);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "Mountres3::Fail with MNT3_OK")]
fn encoding_mount_fail_with_ok_status_is_a_bug() {
    encode(&Mountres3::Fail(Mountstat3::Ok));
}

#[test]
fn portmap_types() {
    let m = Mapping { prog: NFS_PROGRAM, vers: NFS_V3, prot: IPPROTO_TCP, port: 2049 };
    let b = roundtrip(&m);
    assert_eq!(b.len(), 16);
    roundtrip(&Pmaplist::default());
    let list = Pmaplist(vec![m, Mapping { prog: MOUNT_PROGRAM, vers: MOUNT_V3, prot: IPPROTO_UDP, port: 20048 }]);
    let b = roundtrip(&list);
    assert_eq!(b.len(), 2 * (4 + 16) + 4);
    roundtrip(&CallArgs { prog: 100003, vers: 3, proc: 0, args: Bytes::new() });
    roundtrip(&CallArgs { prog: 1, vers: 2, proc: 3, args: Bytes::from_static(b"\0\0\0\x05") });
    roundtrip(&CallResult { port: 2049, res: Bytes::from(vec![1; 2000]) });
}

//! Protocol-level tests of every NFSv3 procedure, driven by an independent
//! client (`nfs3_client` / `nfs3_types` from crates.io) against the real
//! `keel` binary, with results checked against the host's view of the
//! exported directory. Error paths are in `protocol_errors.rs`, restarts,
//! the duplicate reply cache and async exports in `protocol_restart.rs`.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use keel_testkit::nfs::*;
use keel_testkit::server::{ExportOpts, TestServer};
use nfs3_types::nfs3::*;
use nfs3_types::xdr_codec::Pack;

const ALL_ACCESS: u32 =
    ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE | ACCESS3_EXECUTE;
const MIB: u32 = 1 << 20;

/// The attributes a client got for `path` are the host's.
fn assert_matches_host(a: &fattr3, path: &Path) {
    let m = meta(path);
    let ft = m.file_type();
    let want_type = if ft.is_dir() {
        ftype3::NF3DIR
    } else if ft.is_file() {
        ftype3::NF3REG
    } else if ft.is_symlink() {
        ftype3::NF3LNK
    } else if ft.is_fifo() {
        ftype3::NF3FIFO
    } else if ft.is_char_device() {
        ftype3::NF3CHR
    } else if ft.is_block_device() {
        ftype3::NF3BLK
    } else {
        ftype3::NF3SOCK
    };
    let p = path.display();
    assert_eq!(a.type_, want_type, "type of {p}");
    assert_eq!(a.mode, m.mode() & 0o7777, "mode of {p}");
    assert_eq!(a.nlink as u64, m.nlink(), "nlink of {p}");
    assert_eq!(a.uid, m.uid(), "uid of {p}");
    assert_eq!(a.gid, m.gid(), "gid of {p}");
    assert_eq!(a.size, m.size(), "size of {p}");
    assert_eq!(a.used, m.blocks() * 512, "used of {p}");
    assert_eq!(a.fileid, m.ino(), "fileid of {p}");
    assert_eq!((a.rdev.specdata1, a.rdev.specdata2), (libc::major(m.rdev()), libc::minor(m.rdev())), "rdev of {p}");
    assert_eq!((a.mtime.seconds as i64, a.mtime.nseconds as i64), (m.mtime(), m.mtime_nsec()), "mtime of {p}");
    assert_eq!((a.ctime.seconds as i64, a.ctime.nseconds as i64), (m.ctime(), m.ctime_nsec()), "ctime of {p}");
    assert_eq!((a.atime.seconds as i64, a.atime.nseconds as i64), (m.atime(), m.atime_nsec()), "atime of {p}");
}

#[tokio::test]
async fn null_and_getattr_match_the_host() {
    let server = TestServer::start_default("proto-getattr");
    let dir = server.export_dir(1);
    host_file(&dir.join("f"), b"0123456789", 0o4751, 1234, 5678);
    std::fs::hard_link(dir.join("f"), dir.join("f2")).unwrap();
    host_dir(&dir.join("d"), 0o1750, 42, 43);
    let (mut c, root_fh) = mount_root(&server, 1).await;

    rpc("NULL", c.null()).await;

    let root_attrs = attrs(&mut c, &root_fh).await;
    assert_matches_host(&root_attrs, &dir);
    for name in ["f", "d"] {
        let fh = lookup_fh(&mut c, &root_fh, name.as_bytes()).await;
        let a = attrs(&mut c, &fh).await;
        assert_matches_host(&a, &dir.join(name));
        assert_eq!(a.fsid, root_attrs.fsid, "one export, one fsid");
    }
    let f = lookup_fh(&mut c, &root_fh, b"f").await;
    let f = attrs(&mut c, &f).await;
    assert_eq!((f.nlink, f.size, f.mode, f.uid, f.gid), (2, 10, 0o4751, 1234, 5678));
}

#[tokio::test]
async fn setattr_sets_each_attribute_and_honours_the_ctime_guard() {
    let server = TestServer::start_default("proto-setattr");
    let path = server.export_dir(1).join("s");
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let (fh, _) = create_file(&mut c, &root_fh, b"s", 0o644).await;
    let content = pattern(7, 100);
    std::fs::write(&path, &content).unwrap();

    let atime = nfstime3 { seconds: 1_000_000_000, nseconds: 123 };
    let mtime = nfstime3 { seconds: 1_100_000_000, nseconds: 456_789 };
    let new = sattr3 {
        mode: Nfs3Option::Some(0o600),
        uid: Nfs3Option::Some(1001),
        gid: Nfs3Option::Some(1002),
        size: Nfs3Option::Some(10),
        atime: set_atime::SET_TO_CLIENT_TIME(atime),
        mtime: set_mtime::SET_TO_CLIENT_TIME(mtime),
    };
    let ok = setattr(&mut c, &fh, new, None).await.expect("SETATTR");
    let m = meta(&path);
    assert_eq!((m.mode() & 0o7777, m.uid(), m.gid(), m.size()), (0o600, 1001, 1002, 10));
    assert_eq!((m.atime(), m.atime_nsec()), (1_000_000_000, 123));
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_100_000_000, 456_789));
    let before = ok.obj_wcc.before.unwrap();
    assert_eq!(before.size, 100, "pre-op size");
    assert_matches_host(&ok.obj_wcc.after.unwrap(), &path);
    // (Reading updates atime: only after the comparison.)
    assert_eq!(std::fs::read(&path).unwrap(), &content[..10], "truncated, not rewritten");

    // The guard: a ctime that is not the object's refuses the change.
    let ctime = attrs(&mut c, &fh).await.ctime;
    let stale = nfstime3 { seconds: ctime.seconds - 1, nseconds: ctime.nseconds };
    let r = setattr(&mut c, &fh, mode_attr(0o640), Some(stale)).await;
    assert_eq!(status(&r), nfsstat3::NFS3ERR_NOT_SYNC);
    assert_eq!(meta(&path).mode() & 0o7777, 0o600, "unchanged after NOT_SYNC");
    setattr(&mut c, &fh, mode_attr(0o640), Some(ctime)).await.expect("SETATTR with the right guard");
    assert_eq!(meta(&path).mode() & 0o7777, 0o640);

    // Server time.
    let new = sattr3 { mtime: set_mtime::SET_TO_SERVER_TIME, ..sattr3::default() };
    setattr(&mut c, &fh, new, None).await.expect("SETATTR mtime to server time");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((meta(&path).mtime() - now).abs() < 120, "mtime set to the server's time");
}

#[tokio::test]
async fn lookup_of_dot_and_dotdot_at_the_root_stays_at_the_root() {
    let server = TestServer::start_default("proto-lookup");
    let dir = server.export_dir(1);
    host_file(&dir.join("f"), b"x", 0o644, 0, 0);
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let root_ino = meta(&dir).ino();
    assert_ne!(meta(dir.parent().unwrap()).ino(), root_ino);

    for name in [&b"."[..], b"..", b"."] {
        let ok = lookup(&mut c, &root_fh, name).await.expect("LOOKUP at the root");
        assert_eq!(ok.object, root_fh, "{} at the root is the root", String::from_utf8_lossy(name));
        assert_eq!(ok.obj_attributes.unwrap().fileid, root_ino);
    }
    let sub = mkdir_fh(&mut c, &root_fh, b"sub", 0o755).await;
    assert_eq!(lookup_fh(&mut c, &sub, b".").await, sub);
    assert_eq!(lookup_fh(&mut c, &sub, b"..").await, root_fh);
    let deeper = mkdir_fh(&mut c, &sub, b"deeper", 0o755).await;
    assert_eq!(lookup_fh(&mut c, &deeper, b"..").await, sub);

    let f = lookup(&mut c, &root_fh, b"f").await.expect("LOOKUP f");
    assert_eq!(f.obj_attributes.unwrap().fileid, meta(&dir.join("f")).ino());
    assert_eq!(f.dir_attributes.unwrap().fileid, root_ino);
    assert_eq!(attrs(&mut c, &f.object).await.fileid, meta(&dir.join("f")).ino());

    // READDIR of the root: ".." is the root itself, not what lies above.
    let ok = readdir(&mut c, &root_fh, 0, cookieverf3::default(), 64 * 1024).await.expect("READDIR");
    let entries = ok.reply.entries.into_inner();
    let dotdot = entries.iter().find(|e| e.name.as_ref() == b"..").expect("..");
    assert_eq!(dotdot.fileid, root_ino);
}

#[tokio::test]
async fn access_is_computed_for_the_caller_and_the_export() {
    let exports =
        vec![ExportOpts::rw(1, "rw"), ExportOpts::new(2, "ro", "access = \"ro\"\nsquash = \"no_root_squash\"")];
    let server = TestServer::start("proto-access", exports, "");
    let rw = server.export_dir(1);
    host_file(&rw.join("secret"), b"s", 0o600, 0, 0);
    host_file(&rw.join("script"), b"#!/bin/sh\n", 0o700, 0, 0);
    host_file(&rw.join("mine"), b"m", 0o600, 1000, 1000);
    host_dir(&rw.join("locked"), 0o755, 0, 0);
    let ro = server.export_dir(2);
    host_file(&ro.join("f"), b"f", 0o666, 0, 0);
    host_dir(&ro.join("d"), 0o777, 0, 0);

    let (mut rootc, root_fh) = mount_root(&server, 1).await;
    let mut user = mount(&server, 1, cred(1000, 1000)).await;
    let rwx_file = ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND;
    let dir_all = ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE;

    let cases: [(&[u8], bool, u32); 9] = [
        (b"secret", true, rwx_file),
        (b"script", true, rwx_file | ACCESS3_EXECUTE),
        (b"mine", true, rwx_file),
        (b"locked", true, dir_all),
        (b"secret", false, 0),
        (b"script", false, 0),
        (b"mine", false, rwx_file),
        (b"locked", false, ACCESS3_READ | ACCESS3_LOOKUP),
        (b".", false, dir_all),
    ];
    for (name, as_root, want) in cases {
        let c: &mut Client = if as_root { &mut rootc } else { &mut user };
        let fh = lookup_fh(c, &root_fh, name).await;
        let ok = access(c, &fh, ALL_ACCESS).await.expect("ACCESS");
        let who = if as_root { "root" } else { "uid 1000" };
        assert_eq!(ok.access, want, "{who} on {}: {:#x} granted", String::from_utf8_lossy(name), ok.access);
        assert_eq!(ok.obj_attributes.unwrap().fileid, meta(&rw.join(std::str::from_utf8(name).unwrap())).ino());
        // Only what was asked is answered.
        let ok = access(c, &fh, ACCESS3_READ).await.expect("ACCESS");
        assert_eq!(ok.access, want & ACCESS3_READ);
    }

    // A read-only export never grants MODIFY, EXTEND or DELETE, even to
    // root on mode 0666/0777 objects.
    let (mut roc, ro_root) = mount_root(&server, 2).await;
    for (name, want) in
        [(&b"."[..], ACCESS3_READ | ACCESS3_LOOKUP), (b"d", ACCESS3_READ | ACCESS3_LOOKUP), (b"f", ACCESS3_READ)]
    {
        let fh = lookup_fh(&mut roc, &ro_root, name).await;
        let ok = access(&mut roc, &fh, ALL_ACCESS).await.expect("ACCESS on ro");
        assert_eq!(ok.access, want, "root on ro export, {}", String::from_utf8_lossy(name));
    }
}

#[tokio::test]
async fn symlink_and_readlink_round_trip() {
    let server = TestServer::start_default("proto-symlink");
    let dir = server.export_dir(1);
    std::os::unix::fs::symlink("/etc/passwd", dir.join("host-link")).unwrap();
    let (mut c, root_fh) = mount_root(&server, 1).await;

    let target = b"some/where/../target with spaces";
    let ok = symlink(&mut c, &root_fh, b"ln", target).await.expect("SYMLINK");
    let a = ok.obj_attributes.unwrap();
    assert_eq!((a.type_, a.size), (ftype3::NF3LNK, target.len() as u64));
    assert_matches_host(&a, &dir.join("ln"));
    assert_eq!(std::fs::read_link(dir.join("ln")).unwrap().as_os_str().as_encoded_bytes(), target);
    let ln = ok.obj.unwrap();
    let r = rpc("READLINK", c.readlink(&READLINK3args { symlink: ln.clone() })).await.expect("READLINK");
    assert_eq!(r.data.as_ref(), target);
    assert_eq!(r.symlink_attributes.unwrap().fileid, meta(&dir.join("ln")).ino());
    assert_eq!(lookup_fh(&mut c, &root_fh, b"ln").await, ln, "LOOKUP gives the handle SYMLINK gave");

    // A link made on the host: read, never followed.
    let fh = lookup_fh(&mut c, &root_fh, b"host-link").await;
    assert_eq!(attrs(&mut c, &fh).await.type_, ftype3::NF3LNK);
    let r = rpc("READLINK", c.readlink(&READLINK3args { symlink: fh })).await.expect("READLINK");
    assert_eq!(r.data.as_ref(), b"/etc/passwd");
}

#[tokio::test]
async fn read_reports_eof_and_clamps_the_count() {
    let server = TestServer::start_default("proto-read");
    let dir = server.export_dir(1);
    let size = 3 * MIB as usize + 123;
    let content = pattern(3, size);
    host_file(&dir.join("big"), &content, 0o644, 0, 0);
    host_file(&dir.join("empty"), b"", 0o644, 0, 0);
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let fh = lookup_fh(&mut c, &root_fh, b"big").await;
    let size = size as u64;

    let cases: [(u64, u32, usize, bool); 7] = [
        (0, 4096, 4096, false),
        // More than rtmax (1 MiB) is asked: the reply is clamped to it.
        (0, 2 * MIB, MIB as usize, false),
        (MIB as u64 + 5, 3 * MIB, MIB as usize, false),
        (size - 100, 4096, 100, true),
        // Ending exactly at the end of the file is eof too.
        (size - 4096, 4096, 4096, true),
        (size, 10, 0, true),
        (size + 1_000_000, 10, 0, true),
    ];
    for (offset, count, want, eof) in cases {
        let ok = read(&mut c, &fh, offset, count).await.expect("READ");
        assert!(ok.count <= MIB, "count {} above rtmax", ok.count);
        assert_eq!(ok.count as usize, want, "READ at {offset} of {count}");
        assert_eq!(ok.data.len(), want, "data length agrees with count");
        assert_eq!(ok.eof, eof, "eof of READ at {offset} of {count}");
        let start = (offset.min(size)) as usize;
        assert!(ok.data.as_ref() == &content[start..start + want], "data of READ at {offset} of {count}");
        assert_eq!(ok.file_attributes.unwrap().size, size);
    }
    let empty = lookup_fh(&mut c, &root_fh, b"empty").await;
    let ok = read(&mut c, &empty, 0, 100).await.expect("READ empty");
    assert_eq!((ok.count, ok.eof), (0, true));
}

#[tokio::test]
async fn write_stability_levels_commit_and_the_verifier() {
    let server = TestServer::start_default("proto-write");
    let path = server.export_dir(1).join("w");
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let (fh, _) = create_file(&mut c, &root_fh, b"w", 0o644).await;

    let mut expected = Vec::new();
    let mut verifier = None;
    for (i, stable) in [stable_how::UNSTABLE, stable_how::DATA_SYNC, stable_how::FILE_SYNC].into_iter().enumerate() {
        let data = pattern(i as u64, 1000 + i);
        let offset = expected.len() as u64;
        let ok = write(&mut c, &fh, offset, &data, stable).await.expect("WRITE");
        assert_eq!(ok.count as usize, data.len(), "{stable} count");
        assert!(ok.committed as u32 >= stable as u32, "{stable} answered as {}", ok.committed);
        assert_eq!(ok.file_wcc.before.unwrap().size, offset, "{stable} pre-op size");
        expected.extend_from_slice(&data);
        assert_eq!(ok.file_wcc.after.unwrap().size, expected.len() as u64, "{stable} post-op size");
        assert_eq!(*verifier.get_or_insert(ok.verf), ok.verf, "one verifier per server start");
    }
    assert_eq!(std::fs::read(&path).unwrap(), expected);
    let verifier = verifier.unwrap();
    assert_ne!(verifier, writeverf3([0; 8]), "the verifier is random");

    // A full 1 MiB (wtmax) write at an unaligned offset.
    let big = pattern(99, MIB as usize);
    let ok = write(&mut c, &fh, expected.len() as u64, &big, stable_how::FILE_SYNC).await.expect("WRITE 1 MiB");
    assert_eq!((ok.count, ok.committed), (MIB, stable_how::FILE_SYNC));
    expected.extend_from_slice(&big);
    assert!(std::fs::read(&path).unwrap() == expected, "1 MiB written at its offset");

    let ok = commit(&mut c, &fh).await.expect("COMMIT");
    assert_eq!(ok.verf, verifier, "COMMIT's verifier is WRITE's");
    assert_eq!(ok.file_wcc.after.unwrap().size, expected.len() as u64);
    let ok = rpc("COMMIT range", c.commit(&COMMIT3args { file: fh.clone(), offset: 100, count: 4096 })).await;
    assert_eq!(ok.expect("COMMIT range").verf, verifier);
}

#[tokio::test]
async fn create_unchecked_guarded_and_exclusive() {
    let server = TestServer::start_default("proto-create");
    let dir = server.export_dir(1);
    host_dir(&dir.join("a-dir"), 0o755, 0, 0);
    let (mut c, root_fh) = mount_root(&server, 1).await;

    // UNCHECKED: creates with the attributes given.
    let ok = create(&mut c, &root_fh, b"u", createhow3::UNCHECKED(mode_attr(0o640))).await.expect("CREATE");
    let u = ok.obj.unwrap();
    assert_matches_host(&ok.obj_attributes.unwrap(), &dir.join("u"));
    let m = meta(&dir.join("u"));
    assert_eq!((m.mode() & 0o7777, m.uid(), m.size()), (0o640, 0, 0));
    // UNCHECKED on an existing file: the same file; size 0 truncates it,
    // no size leaves the data alone.
    std::fs::write(dir.join("u"), b"hello").unwrap();
    let ok = create(&mut c, &root_fh, b"u", createhow3::UNCHECKED(sattr3::default())).await.expect("CREATE");
    assert_eq!(ok.obj.unwrap(), u);
    assert_eq!(std::fs::read(dir.join("u")).unwrap(), b"hello");
    let trunc = sattr3 { size: Nfs3Option::Some(0), ..sattr3::default() };
    let ok = create(&mut c, &root_fh, b"u", createhow3::UNCHECKED(trunc)).await.expect("CREATE");
    assert_eq!(ok.obj.unwrap(), u);
    assert_eq!(meta(&dir.join("u")).size(), 0);

    // GUARDED: EXIST on any existing name, and nothing changes.
    std::fs::write(dir.join("u"), b"keep").unwrap();
    for name in [&b"u"[..], b"a-dir"] {
        let r = create(&mut c, &root_fh, name, createhow3::GUARDED(mode_attr(0o600))).await;
        assert_eq!(status(&r), nfsstat3::NFS3ERR_EXIST);
    }
    assert_eq!(std::fs::read(dir.join("u")).unwrap(), b"keep");
    assert_eq!(meta(&dir.join("u")).mode() & 0o7777, 0o640);
    let (g, ga) = create_file(&mut c, &root_fh, b"g", 0o600).await;
    assert_eq!(ga.fileid, meta(&dir.join("g")).ino());
    assert_eq!(lookup_fh(&mut c, &root_fh, b"g").await, g);

    // EXCLUSIVE: the same verifier again is the same file (a
    // retransmission), another verifier is EXIST.
    let v1 = createverf3(*b"verf-one");
    let first = create(&mut c, &root_fh, b"x", createhow3::EXCLUSIVE(v1)).await.expect("CREATE EXCLUSIVE");
    let x = first.obj.unwrap();
    let again = create(&mut c, &root_fh, b"x", createhow3::EXCLUSIVE(v1)).await.expect("CREATE EXCLUSIVE again");
    assert_eq!(again.obj.unwrap(), x, "same verifier: same file");
    assert_eq!(again.obj_attributes.unwrap().fileid, meta(&dir.join("x")).ino());
    let r = create(&mut c, &root_fh, b"x", createhow3::EXCLUSIVE(createverf3(*b"verf-two"))).await;
    assert_eq!(status(&r), nfsstat3::NFS3ERR_EXIST, "another verifier");
    let r = create(&mut c, &root_fh, b"u", createhow3::EXCLUSIVE(v1)).await;
    assert_eq!(status(&r), nfsstat3::NFS3ERR_EXIST, "EXCLUSIVE over a file made otherwise");
    // The client then sets the real attributes.
    setattr(&mut c, &x, mode_attr(0o604), None).await.expect("SETATTR after EXCLUSIVE");
    assert_eq!(meta(&dir.join("x")).mode() & 0o7777, 0o604);
}

#[tokio::test]
async fn mkdir_and_mknod_make_what_was_asked() {
    let server = TestServer::start_default("proto-mknod");
    let dir = server.export_dir(1);
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let mut user = mount(&server, 1, cred(1000, 1000)).await;

    let ok = mkdir(&mut c, &root_fh, b"d", 0o750).await.expect("MKDIR");
    let a = ok.obj_attributes.unwrap();
    assert_eq!((a.type_, a.mode, a.uid), (ftype3::NF3DIR, 0o750, 0));
    assert_matches_host(&a, &dir.join("d"));
    assert!(ok.dir_wcc.after.is_some());
    assert_eq!(status(&mkdir(&mut c, &root_fh, b"d", 0o755).await), nfsstat3::NFS3ERR_EXIST);
    let ok = mkdir(&mut user, &root_fh, b"user-d", 0o700).await.expect("MKDIR as uid 1000");
    assert_eq!((ok.obj_attributes.unwrap().uid, meta(&dir.join("user-d")).uid()), (1000, 1000));

    let dev = |major, minor, mode| devicedata3 {
        dev_attributes: mode_attr(mode),
        spec: specdata3 { specdata1: major, specdata2: minor },
    };
    let ok = mknod(&mut c, &root_fh, b"fifo", mknoddata3::NF3FIFO(mode_attr(0o640))).await.expect("MKNOD FIFO");
    let a = ok.obj_attributes.unwrap();
    assert_eq!((a.type_, a.mode), (ftype3::NF3FIFO, 0o640));
    assert!(meta(&dir.join("fifo")).file_type().is_fifo());
    assert_matches_host(&a, &dir.join("fifo"));

    let ok = mknod(&mut c, &root_fh, b"chr", mknoddata3::NF3CHR(dev(1, 7, 0o600))).await.expect("MKNOD CHR as root");
    let m = meta(&dir.join("chr"));
    assert!(m.file_type().is_char_device());
    assert_eq!((libc::major(m.rdev()), libc::minor(m.rdev()), m.mode() & 0o7777), (1, 7, 0o600));
    let a = ok.obj_attributes.unwrap();
    assert_eq!((a.type_, a.rdev.specdata1, a.rdev.specdata2), (ftype3::NF3CHR, 1, 7));

    let ok = mknod(&mut c, &root_fh, b"blk", mknoddata3::NF3BLK(dev(7, 200, 0o600))).await.expect("MKNOD BLK");
    assert_eq!(ok.obj_attributes.unwrap().type_, ftype3::NF3BLK);
    assert!(meta(&dir.join("blk")).file_type().is_block_device());
    let ok = mknod(&mut c, &root_fh, b"sock", mknoddata3::NF3SOCK(mode_attr(0o644))).await.expect("MKNOD SOCK");
    assert_eq!(ok.obj_attributes.unwrap().type_, ftype3::NF3SOCK);
    assert!(meta(&dir.join("sock")).file_type().is_socket());

    // Device nodes are root's; a user may make a fifo.
    for (name, what) in
        [(&b"chr-user"[..], mknoddata3::NF3CHR(dev(1, 3, 0o666))), (b"blk-user", mknoddata3::NF3BLK(dev(7, 0, 0o666)))]
    {
        let r = mknod(&mut user, &root_fh, name, what).await;
        assert_eq!(status(&r), nfsstat3::NFS3ERR_PERM, "MKNOD device as uid 1000");
        assert!(!exists(&dir.join(std::str::from_utf8(name).unwrap())));
    }
    let ok =
        mknod(&mut user, &root_fh, b"fifo-user", mknoddata3::NF3FIFO(mode_attr(0o600))).await.expect("FIFO as user");
    assert_eq!(ok.obj_attributes.unwrap().uid, 1000);
    assert_eq!(meta(&dir.join("fifo-user")).uid(), 1000);

    // MKNOD of a regular file, directory or symlink is BADTYPE. nfs3_client
    // cannot encode these (mknoddata3 has no such variants), so by hand.
    let mut raw = RawConn::connect(server.addr).await;
    for (i, ftype) in [ftype3::NF3REG, ftype3::NF3DIR, ftype3::NF3LNK].into_iter().enumerate() {
        let xid = 0x4d4b_0000 + i as u32;
        let args = MknodOfType { where_: dirop(&root_fh, b"not-special"), ftype };
        let reply = raw.call(&call_record(xid, NFS_PROGRAM::NFSPROC3_MKNOD, &root(), &args)).await;
        let r: MKNOD3res = decode_reply(xid, &reply);
        assert_eq!(status(&r), nfsstat3::NFS3ERR_BADTYPE, "MKNOD {ftype}");
        assert!(!exists(&dir.join("not-special")));
    }
}

#[tokio::test]
async fn remove_rmdir_rename_and_link() {
    let server = TestServer::start_default("proto-namespace");
    let dir = server.export_dir(1);
    for d in ["a", "b", "full", "empty"] {
        host_dir(&dir.join(d), 0o755, 0, 0);
    }
    for (f, content) in [("a/x", "X"), ("rm-me", "r"), ("full/f", "f"), ("dst", "old"), ("src", "new"), ("orig", "o")] {
        host_file(&dir.join(f), content.as_bytes(), 0o644, 0, 0);
    }
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let a = lookup_fh(&mut c, &root_fh, b"a").await;
    let b = lookup_fh(&mut c, &root_fh, b"b").await;

    // REMOVE
    let ok = remove(&mut c, &root_fh, b"rm-me").await.expect("REMOVE");
    assert!(!exists(&dir.join("rm-me")));
    assert_eq!(ok.dir_wcc.after.unwrap().fileid, meta(&dir).ino());
    assert_eq!(status(&remove(&mut c, &root_fh, b"rm-me").await), nfsstat3::NFS3ERR_NOENT);

    // RMDIR
    assert_eq!(status(&rmdir(&mut c, &root_fh, b"full").await), nfsstat3::NFS3ERR_NOTEMPTY);
    assert!(exists(&dir.join("full/f")));
    rmdir(&mut c, &root_fh, b"empty").await.expect("RMDIR");
    assert!(!exists(&dir.join("empty")));

    // RENAME across directories: the handle follows the file.
    let x = lookup_fh(&mut c, &a, b"x").await;
    let ok = rename(&mut c, &a, b"x", &b, b"y").await.expect("RENAME");
    assert!(ok.fromdir_wcc.after.is_some() && ok.todir_wcc.after.is_some());
    assert!(!exists(&dir.join("a/x")));
    assert_eq!(std::fs::read(dir.join("b/y")).unwrap(), b"X");
    assert_eq!(attrs(&mut c, &x).await.fileid, meta(&dir.join("b/y")).ino());
    assert_eq!(lookup_fh(&mut c, &b, b"y").await, x);

    // RENAME over an existing file replaces it; the old target is gone.
    let old_dst = lookup_fh(&mut c, &root_fh, b"dst").await;
    let src = lookup_fh(&mut c, &root_fh, b"src").await;
    rename(&mut c, &root_fh, b"src", &root_fh, b"dst").await.expect("RENAME over");
    assert_eq!(std::fs::read(dir.join("dst")).unwrap(), b"new");
    assert!(!exists(&dir.join("src")));
    assert_eq!(lookup_fh(&mut c, &root_fh, b"dst").await, src);
    assert_eq!(status(&getattr(&mut c, &old_dst).await), nfsstat3::NFS3ERR_STALE, "replaced file");

    // RENAME onto itself changes nothing.
    let orig = lookup_fh(&mut c, &root_fh, b"orig").await;
    rename(&mut c, &root_fh, b"orig", &root_fh, b"orig").await.expect("RENAME onto itself");
    assert_eq!(std::fs::read(dir.join("orig")).unwrap(), b"o");
    assert_eq!(attrs(&mut c, &orig).await.fileid, meta(&dir.join("orig")).ino());

    // LINK: a second name for the same file.
    let ok = link(&mut c, &orig, &b, b"alias").await.expect("LINK");
    assert_eq!(ok.file_attributes.unwrap().nlink, 2);
    assert!(ok.linkdir_wcc.after.is_some());
    let (m1, m2) = (meta(&dir.join("orig")), meta(&dir.join("b/alias")));
    assert_eq!((m1.ino(), m1.nlink()), (m2.ino(), 2));
    assert_eq!(lookup_fh(&mut c, &b, b"alias").await, orig, "one file, one handle");
    assert_eq!(attrs(&mut c, &orig).await.nlink, 2);
}

/// Lists a directory of 100,000 entries made on the host with READDIR or
/// READDIRPLUS and 8 KiB replies, following cookies and the cookie
/// verifier, and checks that every entry comes exactly once.
async fn list_huge_directory(tag: &str, plus: bool) {
    const ENTRIES: usize = 100_000;
    const COUNT: u32 = 8192;
    let server = TestServer::start_default(tag);
    let big = server.export_dir(1).join("big");
    std::fs::create_dir(&big).unwrap();
    let mut host = HashMap::new();
    for i in 0..ENTRIES {
        let name = format!("entry-{i:06}");
        std::fs::File::create(big.join(&name)).unwrap();
        host.insert(name.into_bytes(), 0u64);
    }
    for e in std::fs::read_dir(&big).unwrap() {
        let e = e.unwrap();
        use std::os::unix::fs::DirEntryExt;
        host.insert(e.file_name().into_encoded_bytes(), e.ino());
    }
    host.insert(b".".to_vec(), meta(&big).ino());
    host.insert(b"..".to_vec(), meta(&server.export_dir(1)).ino());
    assert_eq!(host.len(), ENTRIES + 2);

    let (mut c, root_fh) = mount_root(&server, 1).await;
    let dir = lookup_fh(&mut c, &root_fh, b"big").await;
    let mut seen: HashMap<Vec<u8>, u32> = HashMap::new();
    let (mut cookie, mut verf) = (0u64, cookieverf3::default());
    let mut calls = 0;
    let mut checked_handles = 0;
    loop {
        calls += 1;
        assert!(calls < 20 * ENTRIES, "listing does not end");
        let (names, eof) = if plus {
            let ok = readdirplus(&mut c, &dir, cookie, verf, COUNT).await.expect("READDIRPLUS");
            assert!(4 + ok.packed_size() <= COUNT as usize, "reply of {} bytes for maxcount {COUNT}", ok.packed_size());
            assert!(calls == 1 || ok.cookieverf == verf, "cookie verifier changed mid-listing");
            verf = ok.cookieverf;
            let entries = ok.reply.entries.into_inner();
            assert!(!entries.is_empty() || ok.reply.eof, "an empty reply that is not eof");
            let mut names = Vec::new();
            for e in entries {
                let name = e.name.as_ref().to_vec();
                let a = e.name_attributes.clone().unwrap();
                assert_eq!(a.fileid, e.fileid, "attributes of {}", String::from_utf8_lossy(&name));
                let fh = e.name_handle.unwrap();
                // Spot-check that the handles work.
                if checked_handles < 20 && name.starts_with(b"entry-") && e.cookie % 7 == 0 {
                    checked_handles += 1;
                    assert_eq!(attrs(&mut c, &fh).await.fileid, e.fileid);
                }
                names.push((name, e.fileid, e.cookie));
            }
            (names, ok.reply.eof)
        } else {
            let ok = readdir(&mut c, &dir, cookie, verf, COUNT).await.expect("READDIR");
            assert!(4 + ok.packed_size() <= COUNT as usize, "reply of {} bytes for count {COUNT}", ok.packed_size());
            assert!(calls == 1 || ok.cookieverf == verf, "cookie verifier changed mid-listing");
            verf = ok.cookieverf;
            let entries = ok.reply.entries.into_inner();
            assert!(!entries.is_empty() || ok.reply.eof, "an empty reply that is not eof");
            let names: Vec<_> = entries.into_iter().map(|e| (e.name.as_ref().to_vec(), e.fileid, e.cookie)).collect();
            (names, ok.reply.eof)
        };
        for (name, fileid, next) in names {
            let want = host.get(&name).unwrap_or_else(|| panic!("unknown entry {}", String::from_utf8_lossy(&name)));
            assert_eq!(fileid, *want, "fileid of {}", String::from_utf8_lossy(&name));
            *seen.entry(name).or_default() += 1;
            cookie = next;
        }
        if eof {
            break;
        }
    }
    let twice: Vec<_> =
        seen.iter().filter(|(_, n)| **n > 1).map(|(k, _)| String::from_utf8_lossy(k)).take(10).collect();
    assert!(twice.is_empty(), "entries listed more than once: {twice:?}");
    let missing: Vec<_> =
        host.keys().filter(|k| !seen.contains_key(*k)).map(|k| String::from_utf8_lossy(k)).take(10).collect();
    assert!(missing.is_empty(), "entries never listed: {missing:?}");
    assert_eq!(seen.len(), ENTRIES + 2);
    eprintln!("listed {} entries in {calls} {} calls", seen.len(), if plus { "READDIRPLUS" } else { "READDIR" });
    assert!(calls > 50, "{calls} calls: the small count was not honoured");
    if plus {
        assert_eq!(checked_handles, 20);
    }
}

#[tokio::test]
async fn readdir_lists_100000_entries_exactly_once() {
    list_huge_directory("proto-readdir", false).await;
}

#[tokio::test]
async fn readdirplus_lists_100000_entries_exactly_once() {
    list_huge_directory("proto-readdirplus", true).await;
}

#[tokio::test]
async fn fsstat_fsinfo_and_pathconf_describe_the_file_system() {
    let server = TestServer::start_default("proto-fsstat");
    let dir = server.export_dir(1);
    let (mut c, root_fh) = mount_root(&server, 1).await;

    let ok = rpc("FSSTAT", c.fsstat(&FSSTAT3args { fsroot: root_fh.clone() })).await.expect("FSSTAT");
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: zeroed statvfs is a valid out-parameter; path is a C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut st) }, 0);
    let frsize = st.f_frsize as u64;
    assert_eq!(ok.tbytes, st.f_blocks as u64 * frsize, "total bytes");
    assert_eq!(ok.tfiles, st.f_files as u64, "total files");
    // Other tests write and create concurrently: free counts only roughly.
    let near = |a: u64, b: u64, tol: u64| a.abs_diff(b) <= tol;
    assert!(
        near(ok.fbytes, st.f_bfree as u64 * frsize, 4 << 30),
        "free bytes {} vs {}",
        ok.fbytes,
        st.f_bfree as u64 * frsize
    );
    assert!(near(ok.abytes, st.f_bavail as u64 * frsize, 4 << 30), "available bytes");
    assert!(near(ok.ffiles, st.f_ffree as u64, 1_000_000), "free files");
    assert!(ok.abytes <= ok.fbytes && ok.fbytes <= ok.tbytes);
    assert!(ok.afiles <= ok.ffiles && ok.ffiles <= ok.tfiles);
    assert_eq!(ok.obj_attributes.unwrap().fileid, meta(&dir).ino());

    let ok = rpc("FSINFO", c.fsinfo(&FSINFO3args { fsroot: root_fh.clone() })).await.expect("FSINFO");
    assert_eq!((ok.rtmax, ok.wtmax), (MIB, MIB));
    assert!(ok.rtpref <= ok.rtmax && ok.wtpref <= ok.wtmax && ok.rtpref >= 4096 && ok.wtpref >= 4096);
    assert!(ok.dtpref >= 4096);
    assert!(ok.maxfilesize >= 1 << 40, "maxfilesize {}", ok.maxfilesize);
    assert_eq!(ok.time_delta, nfstime3 { seconds: 0, nseconds: 1 });
    let props = FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME;
    assert_eq!(ok.properties & props, props, "properties {:#x}", ok.properties);

    let ok = rpc("PATHCONF", c.pathconf(&PATHCONF3args { object: root_fh.clone() })).await.expect("PATHCONF");
    assert_eq!(ok.name_max, 255);
    assert!(ok.linkmax > 1);
    assert!(ok.no_trunc && ok.chown_restricted && !ok.case_insensitive && ok.case_preserving);
}

/// MOUNT's bookkeeping procedures: DUMP lists who mounted what, EXPORT the
/// exports and their client lists, UMNT and UMNTALL take entries away.
#[tokio::test]
async fn mount_dump_export_umnt_and_umntall() {
    use nfs3_types::mount::dirpath;
    use nfs3_types::xdr_codec::Opaque;

    let mut only_tens = ExportOpts::new(2, "b", "access = \"ro\"");
    only_tens.clients = "[[export.clients]]\nhost = \"10.0.0.0/8\"\n".into();
    let s = TestServer::start("mountproc", vec![ExportOpts::rw(1, "a"), only_tens], "");
    let path = s.export_path(1);
    let mut c = mount(&s, 1, root()).await;
    let m = &mut c.mount_client;
    let text = |o: &Opaque| String::from_utf8_lossy(o.as_ref()).into_owned();

    let dump = rpc("DUMP", m.dump()).await;
    let entries: Vec<(String, String)> =
        dump.0.iter().map(|b| (text(&b.ml_hostname.0), text(&b.ml_directory.0))).collect();
    assert_eq!(entries, vec![("127.0.0.1".to_string(), path.clone())]);

    let exports = rpc("EXPORT", m.export()).await;
    let listed: Vec<(String, Vec<String>)> =
        exports.0.iter().map(|e| (text(&e.ex_dir.0), e.ex_groups.0.iter().map(|g| text(&g.0)).collect())).collect();
    assert_eq!(listed, vec![(path.clone(), vec!["*".to_string()]), (s.export_path(2), vec!["10.0.0.0/8".to_string()])]);

    rpc("UMNT", m.umnt(dirpath(Opaque::borrowed(path.as_bytes())))).await;
    assert!(rpc("DUMP", m.dump()).await.0.is_empty(), "UMNT removed the entry");

    bounded("MNT", m.mnt(dirpath(Opaque::borrowed(path.as_bytes())))).await.expect("MNT again");
    assert_eq!(rpc("DUMP", m.dump()).await.0.len(), 1);
    rpc("UMNTALL", m.umntall()).await;
    assert!(rpc("DUMP", m.dump()).await.0.is_empty(), "UMNTALL removed everything of this client");
}

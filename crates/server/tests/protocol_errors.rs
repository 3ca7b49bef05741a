//! Protocol-level error paths, driven by the independent `nfs3_client`
//! crate: stale, malformed and forged handles, names, permissions, squash,
//! read-only exports, client lists and `secure`.

use std::os::unix::fs::MetadataExt;

use keel_testkit::nfs::*;
use keel_testkit::server::{ExportOpts, TestServer};
use nfs3_client::{ConnectError, MountError, RpcError};
use nfs3_types::mount::mountstat3;
use nfs3_types::nfs3::*;
use nfs3_types::rpc::opaque_auth;
use nfs3_types::xdr_codec::Opaque;

const ROOT_SQUASH: &str = "access = \"rw\"\nsquash = \"root_squash\"";

/// Calls, on handle `fh`, every procedure that takes a handle first (as
/// a directory for the name-based ones), and returns their statuses.
/// A READ, READDIR or READDIRPLUS that succeeds fails the test at once,
/// showing what leaked.
async fn status_of_every_procedure(c: &mut Client, fh: &nfs_fh3) -> Vec<(&'static str, nfsstat3)> {
    let mut out = Vec::new();
    out.push(("GETATTR", status(&getattr(c, fh).await)));
    out.push(("SETATTR", status(&setattr(c, fh, mode_attr(0o777), None).await)));
    out.push(("LOOKUP", status(&lookup(c, fh, b"secret.txt").await)));
    out.push(("ACCESS", status(&access(c, fh, ACCESS3_READ).await)));
    let r = rpc("READLINK", c.readlink(&READLINK3args { symlink: fh.clone() })).await;
    out.push(("READLINK", status(&r)));
    let r = read(c, fh, 0, 4096).await;
    if let Nfs3Result::Ok(ok) = &r {
        panic!("READ through a bad handle returned {} bytes: {:?}", ok.count, String::from_utf8_lossy(&ok.data));
    }
    out.push(("READ", status(&r)));
    out.push(("WRITE", status(&write(c, fh, 0, b"pwned", stable_how::FILE_SYNC).await)));
    out.push(("CREATE", status(&create(c, fh, b"pwned", createhow3::UNCHECKED(sattr3::default())).await)));
    out.push(("MKDIR", status(&mkdir(c, fh, b"pwned-d", 0o777).await)));
    out.push(("SYMLINK", status(&symlink(c, fh, b"pwned-l", b"/").await)));
    out.push(("MKNOD", status(&mknod(c, fh, b"pwned-f", mknoddata3::NF3FIFO(sattr3::default())).await)));
    out.push(("REMOVE", status(&remove(c, fh, b"secret.txt").await)));
    out.push(("RMDIR", status(&rmdir(c, fh, b"sub").await)));
    out.push(("RENAME", status(&rename(c, fh, b"secret.txt", fh, b"moved").await)));
    out.push(("LINK", status(&link(c, fh, fh, b"pwned-h").await)));
    let r = readdir(c, fh, 0, cookieverf3::default(), 8192).await;
    if let Nfs3Result::Ok(ok) = &r {
        panic!("READDIR through a bad handle listed {:?}", ok.reply.entries);
    }
    out.push(("READDIR", status(&r)));
    let r = readdirplus(c, fh, 0, cookieverf3::default(), 8192).await;
    if let Nfs3Result::Ok(ok) = &r {
        panic!("READDIRPLUS through a bad handle listed {:?}", ok.reply.entries);
    }
    out.push(("READDIRPLUS", status(&r)));
    out.push(("FSSTAT", status(&rpc("FSSTAT", c.fsstat(&FSSTAT3args { fsroot: fh.clone() })).await)));
    out.push(("FSINFO", status(&rpc("FSINFO", c.fsinfo(&FSINFO3args { fsroot: fh.clone() })).await)));
    out.push(("PATHCONF", status(&rpc("PATHCONF", c.pathconf(&PATHCONF3args { object: fh.clone() })).await)));
    out.push(("COMMIT", status(&commit(c, fh).await)));
    out
}

fn assert_all(statuses: &[(&str, nfsstat3)], want: nfsstat3, what: &str) {
    let wrong: Vec<_> = statuses.iter().filter(|(_, s)| *s != want).collect();
    assert!(wrong.is_empty(), "{what}: expected {want} from every procedure, got {wrong:?}");
}

#[tokio::test]
async fn handles_of_removed_objects_are_stale() {
    let server = TestServer::start_default("proto-stale");
    let dir = server.export_dir(1);
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let (file, _) = create_file(&mut c, &root_fh, b"f", 0o644).await;
    write(&mut c, &file, 0, b"data", stable_how::FILE_SYNC).await.expect("WRITE");
    let sub = mkdir_fh(&mut c, &root_fh, b"sub", 0o755).await;

    remove(&mut c, &root_fh, b"f").await.expect("REMOVE");
    rmdir(&mut c, &root_fh, b"sub").await.expect("RMDIR");
    // Something else may take the inode number; the handle stays stale.
    create_file(&mut c, &root_fh, b"g", 0o644).await;

    assert_all(&status_of_every_procedure(&mut c, &file).await, nfsstat3::NFS3ERR_STALE, "removed file");
    assert_all(&status_of_every_procedure(&mut c, &sub).await, nfsstat3::NFS3ERR_STALE, "removed directory");
    assert!(!exists(&dir.join("pwned")) && !exists(&dir.join("sub")));
}

/// knfsd drops its cached open file when the link count of a file falls
/// to 0, so a file removed on the server itself (by a local process, or
/// through another export) is STALE to clients at once.
#[tokio::test]
async fn a_file_removed_on_the_server_host_is_stale() {
    let server = TestServer::start_default("proto-stale-host");
    let dir = server.export_dir(1);
    host_file(&dir.join("f"), b"still here?", 0o644, 0, 0);
    host_dir(&dir.join("d"), 0o755, 0, 0);
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let file = lookup_fh(&mut c, &root_fh, b"f").await;
    let d = lookup_fh(&mut c, &root_fh, b"d").await;
    // The server now holds both open.
    read(&mut c, &file, 0, 100).await.expect("READ");
    readdir(&mut c, &d, 0, cookieverf3::default(), 8192).await.expect("READDIR");

    std::fs::remove_file(dir.join("f")).unwrap();
    std::fs::remove_dir(dir.join("d")).unwrap();
    let mut got = vec![
        ("GETATTR file", status(&getattr(&mut c, &file).await)),
        ("GETATTR directory", status(&getattr(&mut c, &d).await)),
        ("READDIR directory", status(&readdir(&mut c, &d, 0, cookieverf3::default(), 8192).await)),
    ];
    let r = read(&mut c, &file, 0, 100).await;
    let shown = match &r {
        Nfs3Result::Ok(ok) => format!("READ returned {:?}", String::from_utf8_lossy(&ok.data)),
        Nfs3Result::Err((s, _)) => format!("READ: {s}"),
    };
    got.push(("READ file", status(&r)));
    let wrong: Vec<_> = got.iter().filter(|(_, s)| *s != nfsstat3::NFS3ERR_STALE).collect();
    assert!(wrong.is_empty(), "objects removed on the host must be STALE; got {wrong:?} ({shown})");
}

#[tokio::test]
async fn garbage_truncated_and_bit_flipped_handles_are_badhandle() {
    let server = TestServer::start_default("proto-badhandle");
    let dir = server.export_dir(1);
    host_file(&dir.join("secret.txt"), b"secret", 0o644, 0, 0);
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let root = root_fh.data.to_vec();
    let file = lookup_fh(&mut c, &root_fh, b"secret.txt").await.data.to_vec();

    let mut bad: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), vec![]),
        ("64 bytes of noise".into(), pattern(5, 64)),
        ("zeros".into(), vec![0; root.len()]),
        ("one byte more".into(), [&root[..], &[0]].concat()),
    ];
    for len in 1..root.len() {
        bad.push((format!("truncated to {len}"), root[..len].to_vec()));
    }
    for (name, h) in [("root", &root), ("file", &file)] {
        for i in 0..h.len() {
            for bit in 0..8 {
                let mut f = h.clone();
                f[i] ^= 1 << bit;
                bad.push((format!("{name} handle, byte {i} bit {bit} flipped"), f));
            }
        }
    }
    for (what, h) in &bad {
        let r = getattr(&mut c, &fh_of(h)).await;
        assert_eq!(status(&r), nfsstat3::NFS3ERR_BADHANDLE, "GETATTR, {what}");
    }
    // Every procedure, with a handle that differs from a real one only in its MAC.
    let mut flipped = file.clone();
    *flipped.last_mut().unwrap() ^= 0x80;
    assert_all(&status_of_every_procedure(&mut c, &fh_of(&flipped)).await, nfsstat3::NFS3ERR_BADHANDLE, "MAC flipped");
    let mut flipped = root.clone();
    flipped[20] ^= 1;
    assert_all(
        &status_of_every_procedure(&mut c, &fh_of(&flipped)).await,
        nfsstat3::NFS3ERR_BADHANDLE,
        "kernel handle flipped",
    );

    // Longer than NFS3_FHSIZE: not even a handle.
    let r = bounded("GETATTR", c.getattr(&GETATTR3args { object: fh_of(&[7; 65]) })).await;
    assert!(matches!(r, Err(RpcError::GarbageArgs)), "65-byte handle: {r:?}");
    // The connection and the real handles still work.
    assert_eq!(attrs(&mut c, &root_fh).await.fileid, meta(&dir).ino());
    assert!(!exists(&dir.join("pwned")));
    assert_eq!(std::fs::read(dir.join("secret.txt")).unwrap(), b"secret");
}

/// Sets up a directory `outside` next to the export (outside it) holding
/// `secret.txt`, and returns the server.
fn server_with_a_secret_outside(tag: &str) -> TestServer {
    let server = TestServer::start_default(tag);
    let outside = server.base.join("outside");
    host_dir(&outside, 0o755, 0, 0);
    host_file(&outside.join("secret.txt"), b"TOP SECRET", 0o644, 0, 0);
    host_dir(&outside.join("sub"), 0o755, 0, 0);
    server
}

#[tokio::test]
async fn a_forged_handle_for_a_directory_outside_the_export_is_badhandle() {
    let server = server_with_a_secret_outside("proto-forged");
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let real = parse_handle(&root_fh.data);
    assert_eq!((real.version, real.ftype, real.export_id), (1, 2, 1), "root handle layout: {real:?}");
    assert_eq!(real.kernel, kernel_handle(&server.export_dir(1)), "the root handle carries the kernel handle");

    let targets = [
        (server.base.join("outside"), 2u8),
        (server.base.clone(), 2),
        (std::path::PathBuf::from("/"), 2),
        (server.base.join("outside/secret.txt"), 1),
    ];
    for (path, ftype) in targets {
        let kernel = kernel_handle(&path);
        for (mac_name, mac) in [("the root's MAC", real.mac), ("a zero MAC", [0; 8]), ("a noise MAC", [0x5a; 8])] {
            let forged = HandleParts { ftype, kernel: kernel.clone(), mac, ..real.clone() };
            let statuses = status_of_every_procedure(&mut c, &build_handle(&forged)).await;
            assert_all(&statuses, nfsstat3::NFS3ERR_BADHANDLE, &format!("{} with {mac_name}", path.display()));
        }
    }
    assert_eq!(std::fs::read(server.base.join("outside/secret.txt")).unwrap(), b"TOP SECRET");
    assert!(exists(&server.base.join("outside/sub")), "nothing removed outside the export");
    let names: Vec<_> =
        std::fs::read_dir(server.base.join("outside")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "nothing created outside the export: {names:?}");
}

/// Defence in depth: even a handle with a valid MAC (made with the
/// server's own key, which no client has) for a directory outside a
/// subtree export resolves to nothing.
#[tokio::test]
async fn a_validly_signed_handle_for_a_directory_outside_the_export_is_stale() {
    let server = server_with_a_secret_outside("proto-forged-mac");
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let key = handle_key(&server);
    let real = parse_handle(&root_fh.data);
    // The forging recipe reproduces the server's own root handle exactly.
    let rebuilt = HandleParts { mac: handle_mac(&key, &handle_body(&real)), ..real.clone() };
    assert_eq!(build_handle(&rebuilt), root_fh, "MAC recipe");

    for path in [server.base.join("outside"), server.base.join("outside/sub"), server.base.clone()] {
        let mut forged = HandleParts { ftype: 2, kernel: kernel_handle(&path), ..real.clone() };
        forged.mac = handle_mac(&key, &handle_body(&forged));
        let statuses = status_of_every_procedure(&mut c, &build_handle(&forged)).await;
        assert_all(&statuses, nfsstat3::NFS3ERR_STALE, &format!("signed handle of {}", path.display()));
    }
    assert_eq!(std::fs::read(server.base.join("outside/secret.txt")).unwrap(), b"TOP SECRET");
}

#[tokio::test]
async fn a_client_not_in_the_export_client_list_is_refused() {
    let exports = vec![ExportOpts::rw(1, "open"), ExportOpts::rw(2, "closed")];
    let mut server = TestServer::start("proto-clients", exports, "");
    let closed = server.export_dir(2);
    host_file(&closed.join("f"), b"private data", 0o644, 0, 0);
    // Handles from when the client was still allowed.
    let (mut c, root2) = mount_root(&server, 2).await;
    let f2 = lookup_fh(&mut c, &root2, b"f").await;
    drop(c);

    // Only 10.0.0.0/8 may use export 2 now.
    let config = std::fs::read_to_string(&server.config).unwrap();
    let at = config.find(&format!("path = \"{}\"", closed.display())).expect("export 2 in the configuration");
    let host_at = at + config[at..].find("host = \"*\"").expect("client rule of export 2");
    let config = format!("{}host = \"10.0.0.0/8\"{}", &config[..host_at], &config[host_at + "host = \"*\"".len()..]);
    std::fs::write(&server.config, config).unwrap();
    server.restart();

    match try_mount(&server, &server.export_path(2), root(), true).await {
        Err(ConnectError::Mount(MountError::Denied(s))) => {
            // mountstat3 has no PartialEq.
            assert!(matches!(s, mountstat3::MNT3ERR_ACCES), "MNT of export 2 refused with {s}")
        }
        Err(e) => panic!("MNT of export 2: {e:?}"),
        Ok(_) => panic!("MNT of export 2 from 127.0.0.1 succeeded"),
    }
    let mut c = nfs_client(&server, root(), true).await;
    for fh in [&root2, &f2] {
        assert_all(&status_of_every_procedure(&mut c, fh).await, nfsstat3::NFS3ERR_ACCES, "export 2 from 127.0.0.1");
    }
    assert_eq!(std::fs::read(closed.join("f")).unwrap(), b"private data");
    // Export 1 is still open to us, on the same connection.
    let (_c1, root1) = mount_root(&server, 1).await;
    assert_eq!(attrs(&mut c, &root1).await.fileid, meta(&server.export_dir(1)).ino());
}

#[tokio::test]
async fn a_secure_export_refuses_unprivileged_source_ports() {
    let exports = vec![
        ExportOpts::new(1, "secure", "access = \"rw\"\nsquash = \"no_root_squash\"\nsecure = true"),
        // exports(5)'s spelling of secure = false.
        ExportOpts::new(2, "insecure", "access = \"rw\"\nsquash = \"no_root_squash\"\ninsecure = true"),
    ];
    let server = TestServer::start("proto-secure", exports, "");
    let path = server.export_path(1);
    match try_mount(&server, &path, root(), false).await {
        Err(ConnectError::Mount(MountError::Denied(s))) => {
            assert!(matches!(s, mountstat3::MNT3ERR_PERM | mountstat3::MNT3ERR_ACCES), "MNT refused with {s}")
        }
        Err(e) => panic!("MNT from an unprivileged port: {e:?}"),
        Ok(_) => panic!("MNT of a secure export from an unprivileged port succeeded"),
    }
    let (mut privileged, root_fh) = mount_root(&server, 1).await;
    assert_eq!(attrs(&mut privileged, &root_fh).await.fileid, meta(&server.export_dir(1)).ino());
    create_file(&mut privileged, &root_fh, b"f", 0o644).await;

    let mut unprivileged = nfs_client(&server, root(), false).await;
    rpc("NULL", unprivileged.null()).await;
    let r = getattr(&mut unprivileged, &root_fh).await;
    assert_eq!(status(&r), nfsstat3::NFS3ERR_PERM, "GETATTR from an unprivileged port");
    assert_eq!(status(&lookup(&mut unprivileged, &root_fh, b"f").await), nfsstat3::NFS3ERR_PERM);
    assert_eq!(
        status(&create(&mut unprivileged, &root_fh, b"g", createhow3::GUARDED(sattr3::default())).await),
        nfsstat3::NFS3ERR_PERM
    );
    assert!(!exists(&server.export_dir(1).join("g")));

    // A non-secure export of the same server takes unprivileged clients.
    let insecure = try_mount(&server, &server.export_path(2), root(), false).await.expect("MNT of the insecure export");
    let root2 = insecure.root_nfs_fh3();
    assert_eq!(attrs(&mut unprivileged, &root2).await.fileid, meta(&server.export_dir(2)).ino());
}

#[tokio::test]
async fn long_names_and_names_with_a_slash_are_refused_and_create_nothing() {
    let server = TestServer::start_default("proto-names");
    let dir = server.export_dir(1);
    host_dir(&dir.join("a"), 0o755, 0, 0);
    host_file(&dir.join("file"), b"f", 0o644, 0, 0);
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let file = lookup_fh(&mut c, &root_fh, b"file").await;
    let before = snapshot(&server.base);

    let long = vec![b'n'; 300];
    let slashes: [&[u8]; 6] = [b"a/b", b"../escape", b"/abs", b"trailing/", b"a/../../escape", b"nul\0byte"];
    let mut cases: Vec<(Vec<u8>, nfsstat3)> = vec![(long, nfsstat3::NFS3ERR_NAMETOOLONG)];
    cases.extend(slashes.iter().map(|n| (n.to_vec(), nfsstat3::NFS3ERR_INVAL)));
    for (name, want) in &cases {
        let n = &name[..];
        let shown = String::from_utf8_lossy(&n[..n.len().min(20)]).into_owned();
        let statuses = [
            ("LOOKUP", status(&lookup(&mut c, &root_fh, n).await)),
            ("CREATE", status(&create(&mut c, &root_fh, n, createhow3::UNCHECKED(sattr3::default())).await)),
            (
                "CREATE EXCLUSIVE",
                status(&create(&mut c, &root_fh, n, createhow3::EXCLUSIVE(createverf3([1; 8]))).await),
            ),
            ("MKDIR", status(&mkdir(&mut c, &root_fh, n, 0o755).await)),
            ("SYMLINK", status(&symlink(&mut c, &root_fh, n, b"target").await)),
            ("MKNOD", status(&mknod(&mut c, &root_fh, n, mknoddata3::NF3FIFO(sattr3::default())).await)),
            ("REMOVE", status(&remove(&mut c, &root_fh, n).await)),
            ("RMDIR", status(&rmdir(&mut c, &root_fh, n).await)),
            ("RENAME to", status(&rename(&mut c, &root_fh, b"file", &root_fh, n).await)),
            ("RENAME from", status(&rename(&mut c, &root_fh, n, &root_fh, b"renamed").await)),
            ("LINK", status(&link(&mut c, &file, &root_fh, n).await)),
        ];
        for (proc_, s) in statuses {
            assert_eq!(s, *want, "{proc_} of {shown:?}");
        }
    }
    assert_eq!(
        snapshot(&server.base).into_iter().filter(|(p, _)| !p.ends_with("keel.log")).collect::<Vec<_>>(),
        before.into_iter().filter(|(p, _)| !p.ends_with("keel.log")).collect::<Vec<_>>(),
        "nothing changed on disk"
    );

    // 255 bytes is a valid name.
    let longest = vec![b'm'; 255];
    create_file(&mut c, &root_fh, &longest, 0o644).await;
    assert!(exists(&dir.join(std::str::from_utf8(&longest).unwrap())));
}

#[tokio::test]
async fn noent_notdir_isdir_exist_inval_and_bad_cookie() {
    let server = TestServer::start_default("proto-errors");
    let dir = server.export_dir(1);
    host_dir(&dir.join("d"), 0o755, 0, 0);
    host_file(&dir.join("d/inner"), b"i", 0o644, 0, 0);
    host_file(&dir.join("f"), b"0123456789", 0o644, 0, 0);
    std::os::unix::fs::symlink("f", dir.join("ln")).unwrap();
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let d = lookup_fh(&mut c, &root_fh, b"d").await;
    let f = lookup_fh(&mut c, &root_fh, b"f").await;
    let ln = lookup_fh(&mut c, &root_fh, b"ln").await;
    let before = snapshot(&dir);

    use nfsstat3::*;
    let checks = [
        ("LOOKUP missing", status(&lookup(&mut c, &root_fh, b"missing").await), NFS3ERR_NOENT),
        ("REMOVE missing", status(&remove(&mut c, &root_fh, b"missing").await), NFS3ERR_NOENT),
        ("RMDIR missing", status(&rmdir(&mut c, &root_fh, b"missing").await), NFS3ERR_NOENT),
        ("RENAME missing", status(&rename(&mut c, &root_fh, b"missing", &root_fh, b"x").await), NFS3ERR_NOENT),
        ("LOOKUP in a file", status(&lookup(&mut c, &f, b"x").await), NFS3ERR_NOTDIR),
        (
            "CREATE in a file",
            status(&create(&mut c, &f, b"x", createhow3::UNCHECKED(sattr3::default())).await),
            NFS3ERR_NOTDIR,
        ),
        ("MKDIR in a file", status(&mkdir(&mut c, &f, b"x", 0o755).await), NFS3ERR_NOTDIR),
        ("READDIR of a file", status(&readdir(&mut c, &f, 0, cookieverf3::default(), 8192).await), NFS3ERR_NOTDIR),
        ("RMDIR of a file", status(&rmdir(&mut c, &root_fh, b"f").await), NFS3ERR_NOTDIR),
        ("RENAME into a file", status(&rename(&mut c, &root_fh, b"f", &f, b"x").await), NFS3ERR_NOTDIR),
        ("READ of a directory", status(&read(&mut c, &d, 0, 100).await), NFS3ERR_ISDIR),
        ("WRITE to a directory", status(&write(&mut c, &d, 0, b"x", stable_how::FILE_SYNC).await), NFS3ERR_ISDIR),
        ("REMOVE of a directory", status(&remove(&mut c, &root_fh, b"d").await), NFS3ERR_ISDIR),
        ("MKDIR existing", status(&mkdir(&mut c, &root_fh, b"d", 0o755).await), NFS3ERR_EXIST),
        ("MKDIR over a file", status(&mkdir(&mut c, &root_fh, b"f", 0o755).await), NFS3ERR_EXIST),
        ("SYMLINK existing", status(&symlink(&mut c, &root_fh, b"f", b"t").await), NFS3ERR_EXIST),
        ("LINK to existing", status(&link(&mut c, &f, &root_fh, b"ln").await), NFS3ERR_EXIST),
        (
            "MKNOD existing",
            status(&mknod(&mut c, &root_fh, b"d", mknoddata3::NF3FIFO(sattr3::default())).await),
            NFS3ERR_EXIST,
        ),
        ("RMDIR not empty", status(&rmdir(&mut c, &root_fh, b"d").await), NFS3ERR_NOTEMPTY),
        (
            "READLINK of a file",
            status(&rpc("READLINK", c.readlink(&READLINK3args { symlink: f.clone() })).await),
            NFS3ERR_INVAL,
        ),
        ("READ of a symlink", status(&read(&mut c, &ln, 0, 100).await), NFS3ERR_INVAL),
        ("LINK of a directory", status(&link(&mut c, &d, &root_fh, b"dlink").await), NFS3ERR_ISDIR),
    ];
    for (what, got, want) in checks {
        assert_eq!(got, want, "{what}");
    }
    // WRITE whose count is more than the data sent.
    let args = WRITE3args {
        file: f.clone(),
        offset: 0,
        count: 10,
        stable: stable_how::FILE_SYNC,
        data: Opaque::borrowed(b"abc"),
    };
    assert_eq!(status(&rpc("WRITE", c.write(&args)).await), NFS3ERR_INVAL, "WRITE count beyond its data");
    assert_eq!(snapshot(&dir), before, "no failed call changed anything");

    // A cookie with someone else's verifier.
    let ok = readdir(&mut c, &root_fh, 0, cookieverf3::default(), 8192).await.expect("READDIR");
    let cookie = ok.reply.entries.into_inner()[0].cookie;
    let mut wrong = ok.cookieverf;
    wrong.0[0] ^= 0xff;
    assert_eq!(status(&readdir(&mut c, &root_fh, cookie, wrong, 8192).await), NFS3ERR_BAD_COOKIE);
    assert_eq!(status(&readdirplus(&mut c, &root_fh, cookie, wrong, 8192).await), NFS3ERR_BAD_COOKIE);
    readdir(&mut c, &root_fh, cookie, ok.cookieverf, 8192).await.expect("READDIR with the right verifier");
    // A count too small for a single entry.
    assert_eq!(status(&readdir(&mut c, &root_fh, 0, cookieverf3::default(), 100).await), NFS3ERR_TOOSMALL);
}

#[tokio::test]
async fn a_read_only_export_refuses_every_modifying_procedure() {
    let server = TestServer::start(
        "proto-rofs",
        vec![ExportOpts::new(1, "ro", "access = \"ro\"\nsquash = \"no_root_squash\"")],
        "",
    );
    let dir = server.export_dir(1);
    host_file(&dir.join("f"), b"original", 0o666, 0, 0);
    host_dir(&dir.join("d"), 0o777, 0, 0);
    host_file(&dir.join("d/inner"), b"inner", 0o666, 0, 0);
    host_dir(&dir.join("e"), 0o777, 0, 0);
    let before = snapshot(&dir);
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let f = lookup_fh(&mut c, &root_fh, b"f").await;
    let d = lookup_fh(&mut c, &root_fh, b"d").await;

    let trunc = sattr3 { size: Nfs3Option::Some(0), ..sattr3::default() };
    let dev = devicedata3 { dev_attributes: sattr3::default(), spec: specdata3 { specdata1: 1, specdata2: 3 } };
    let statuses = [
        ("SETATTR mode", status(&setattr(&mut c, &f, mode_attr(0o600), None).await)),
        ("SETATTR size", status(&setattr(&mut c, &f, trunc, None).await)),
        ("WRITE UNSTABLE", status(&write(&mut c, &f, 0, b"changed", stable_how::UNSTABLE).await)),
        ("WRITE FILE_SYNC", status(&write(&mut c, &f, 0, b"changed", stable_how::FILE_SYNC).await)),
        (
            "CREATE UNCHECKED new",
            status(&create(&mut c, &root_fh, b"new", createhow3::UNCHECKED(sattr3::default())).await),
        ),
        (
            "CREATE UNCHECKED existing",
            status(&create(&mut c, &root_fh, b"f", createhow3::UNCHECKED(sattr3::default())).await),
        ),
        ("CREATE GUARDED", status(&create(&mut c, &root_fh, b"new", createhow3::GUARDED(sattr3::default())).await)),
        (
            "CREATE EXCLUSIVE",
            status(&create(&mut c, &root_fh, b"new", createhow3::EXCLUSIVE(createverf3([2; 8]))).await),
        ),
        ("MKDIR", status(&mkdir(&mut c, &root_fh, b"newdir", 0o755).await)),
        ("SYMLINK", status(&symlink(&mut c, &root_fh, b"newlink", b"f").await)),
        ("MKNOD FIFO", status(&mknod(&mut c, &root_fh, b"fifo", mknoddata3::NF3FIFO(sattr3::default())).await)),
        ("MKNOD CHR", status(&mknod(&mut c, &root_fh, b"chr", mknoddata3::NF3CHR(dev)).await)),
        ("REMOVE", status(&remove(&mut c, &root_fh, b"f").await)),
        ("REMOVE inner", status(&remove(&mut c, &d, b"inner").await)),
        ("RMDIR", status(&rmdir(&mut c, &root_fh, b"e").await)),
        ("RENAME", status(&rename(&mut c, &root_fh, b"f", &d, b"moved").await)),
        ("LINK", status(&link(&mut c, &f, &d, b"alias").await)),
        // Flushing is writing: no client may make a ro export do it.
        ("COMMIT", status(&commit(&mut c, &f).await)),
    ];
    for (what, s) in statuses {
        assert_eq!(s, nfsstat3::NFS3ERR_ROFS, "{what} on a read-only export");
    }
    // Reading still works.
    let ok = read(&mut c, &f, 0, 100).await.expect("READ on ro");
    assert_eq!(ok.data.as_ref(), b"original");
    assert_eq!(snapshot(&dir), before, "nothing changed on disk");
}

#[tokio::test]
async fn a_user_without_permission_gets_acces_or_perm() {
    let server = TestServer::start_default("proto-perm");
    let dir = server.export_dir(1);
    host_file(&dir.join("secret"), b"root only", 0o600, 0, 0);
    host_file(&dir.join("mine"), b"user's", 0o644, 1000, 1000);
    host_dir(&dir.join("private"), 0o700, 0, 0);
    host_file(&dir.join("private/inner"), b"inner", 0o644, 0, 0);
    host_dir(&dir.join("locked"), 0o755, 0, 0);
    host_file(&dir.join("locked/victim"), b"victim", 0o666, 0, 0);
    let (mut rootc, root_fh) = mount_root(&server, 1).await;
    let secret = lookup_fh(&mut rootc, &root_fh, b"secret").await;
    let mine = lookup_fh(&mut rootc, &root_fh, b"mine").await;
    let private = lookup_fh(&mut rootc, &root_fh, b"private").await;
    let locked = lookup_fh(&mut rootc, &root_fh, b"locked").await;
    let before = snapshot(&dir);

    let mut user = mount(&server, 1, cred(1000, 1000)).await;
    let u = &mut user;
    if let Nfs3Result::Ok(ok) = read(u, &secret, 0, 100).await {
        panic!("uid 1000 read a 0600 root file: {:?}", String::from_utf8_lossy(&ok.data));
    }
    use nfsstat3::*;
    let checks = [
        ("READ 0600 root file", status(&read(u, &secret, 0, 100).await), NFS3ERR_ACCES),
        ("WRITE 0600 root file", status(&write(u, &secret, 0, b"x", stable_how::FILE_SYNC).await), NFS3ERR_ACCES),
        (
            "truncate 0600 root file",
            status(&setattr(u, &secret, sattr3 { size: Nfs3Option::Some(0), ..sattr3::default() }, None).await),
            NFS3ERR_ACCES,
        ),
        ("chmod someone else's file", status(&setattr(u, &secret, mode_attr(0o666), None).await), NFS3ERR_PERM),
        (
            "give own file to root",
            status(&setattr(u, &mine, sattr3 { uid: Nfs3Option::Some(0), ..sattr3::default() }, None).await),
            NFS3ERR_PERM,
        ),
        ("LOOKUP in a 0700 directory", status(&lookup(u, &private, b"inner").await), NFS3ERR_ACCES),
        (
            "READDIR of a 0700 directory",
            status(&readdir(u, &private, 0, cookieverf3::default(), 8192).await),
            NFS3ERR_ACCES,
        ),
        (
            "CREATE in a 0700 directory",
            status(&create(u, &private, b"x", createhow3::UNCHECKED(sattr3::default())).await),
            NFS3ERR_ACCES,
        ),
        (
            "CREATE in a 0755 root directory",
            status(&create(u, &locked, b"x", createhow3::GUARDED(sattr3::default())).await),
            NFS3ERR_ACCES,
        ),
        ("MKDIR in a 0755 root directory", status(&mkdir(u, &locked, b"x", 0o755).await), NFS3ERR_ACCES),
        ("REMOVE from a 0755 root directory", status(&remove(u, &locked, b"victim").await), NFS3ERR_ACCES),
        (
            "RENAME out of a 0755 root directory",
            status(&rename(u, &locked, b"victim", &root_fh, b"stolen").await),
            NFS3ERR_ACCES,
        ),
        ("LINK into a 0755 root directory", status(&link(u, &mine, &locked, b"alias").await), NFS3ERR_ACCES),
        ("COMMIT 0600 root file", status(&commit(u, &secret).await), NFS3ERR_ACCES),
    ];
    for (what, got, want) in checks {
        assert_eq!(got, want, "uid 1000: {what}");
    }
    assert_eq!(snapshot(&dir), before, "nothing changed on disk");
    // Root may.
    assert_eq!(read(&mut rootc, &secret, 0, 100).await.expect("root READ").data.as_ref(), b"root only");
    lookup(&mut rootc, &private, b"inner").await.expect("root LOOKUP");
}

#[tokio::test]
async fn root_squash_maps_root_to_the_anonymous_user() {
    let server = TestServer::start("proto-rootsquash", vec![ExportOpts::new(1, "export", ROOT_SQUASH)], "");
    let dir = server.export_dir(1);
    host_file(&dir.join("root-only"), b"r", 0o600, 0, 0);
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let (_, a) = create_file(&mut c, &root_fh, b"by-root", 0o644).await;
    assert_eq!((a.uid, a.gid), (65534, 65534));
    let m = meta(&dir.join("by-root"));
    assert_eq!((m.uid(), m.gid()), (65534, 65534), "file created by uid 0 under root_squash");
    mkdir_fh(&mut c, &root_fh, b"dir-by-root", 0o755).await;
    let m = meta(&dir.join("dir-by-root"));
    assert_eq!((m.uid(), m.gid()), (65534, 65534));
    let f = lookup_fh(&mut c, &root_fh, b"root-only").await;
    assert_eq!(status(&read(&mut c, &f, 0, 10).await), nfsstat3::NFS3ERR_ACCES, "squashed root reads a 0600 root file");
    assert_eq!(status(&setattr(&mut c, &f, mode_attr(0o666), None).await), nfsstat3::NFS3ERR_PERM);
    // Other users are left alone.
    let mut user = mount(&server, 1, cred(1000, 1000)).await;
    create_file(&mut user, &root_fh, b"by-user", 0o644).await;
    let m = meta(&dir.join("by-user"));
    assert_eq!((m.uid(), m.gid()), (1000, 1000));
}

#[tokio::test]
async fn all_squash_maps_everyone_to_anonuid() {
    let opts = "access = \"rw\"\nsquash = \"all_squash\"\nanonuid = 1234\nanongid = 4321";
    let server = TestServer::start("proto-allsquash", vec![ExportOpts::new(1, "export", opts)], "");
    let dir = server.export_dir(1);
    let (mut rootc, root_fh) = mount_root(&server, 1).await;
    let mut user = mount(&server, 1, cred(1000, 1000)).await;
    let (_, a) = create_file(&mut user, &root_fh, b"by-user", 0o644).await;
    assert_eq!((a.uid, a.gid), (1234, 4321));
    let m = meta(&dir.join("by-user"));
    assert_eq!((m.uid(), m.gid()), (1234, 4321), "file created by uid 1000 under all_squash");
    create_file(&mut rootc, &root_fh, b"by-root", 0o644).await;
    let m = meta(&dir.join("by-root"));
    assert_eq!((m.uid(), m.gid()), (1234, 4321), "file created by uid 0 under all_squash");
    let r = setattr(
        &mut user,
        &lookup_fh(&mut rootc, &root_fh, b"by-user").await,
        sattr3 { uid: Nfs3Option::Some(1000), ..sattr3::default() },
        None,
    )
    .await;
    assert_eq!(status(&r), nfsstat3::NFS3ERR_PERM, "the anonymous user cannot chown");
}

/// The caller's uid, gid and supplementary groups are applied per call:
/// group permissions come from the AUTH_SYS groups, an owner may write its
/// own read-only file (knfsd's owner override, what `cp` of a 0444 file
/// needs), and users whose calls interleave never borrow each other's
/// identity on the server's worker threads.
#[tokio::test]
async fn identities_are_applied_per_call() {
    let server = TestServer::start_default("proto-ident");
    let dir = server.export_dir(1);
    host_file(&dir.join("group-file"), b"group data", 0o660, 0, 2000);
    host_file(&dir.join("secret"), b"root only", 0o600, 0, 0);
    let (mut rootc, root_fh) = mount_root(&server, 1).await;
    let gf = lookup_fh(&mut rootc, &root_fh, b"group-file").await;
    let secret = lookup_fh(&mut rootc, &root_fh, b"secret").await;

    let mut member = mount(&server, 1, cred_groups(1000, 1000, &[1000, 2000])).await;
    let mut primary = mount(&server, 1, cred_groups(1001, 2000, &[])).await;
    let mut outsider = mount(&server, 1, cred(1000, 1000)).await;
    assert_eq!(
        read(&mut member, &gf, 0, 100).await.expect("READ via a supplementary group").data.as_ref(),
        b"group data"
    );
    write(&mut member, &gf, 0, b"GROUP", stable_how::FILE_SYNC).await.expect("WRITE via a supplementary group");
    assert_eq!(read(&mut primary, &gf, 0, 100).await.expect("READ via the primary group").data.as_ref(), b"GROUP data");
    assert_eq!(status(&read(&mut outsider, &gf, 0, 100).await), nfsstat3::NFS3ERR_ACCES, "not in the group");
    let r = write(&mut outsider, &gf, 0, b"x", stable_how::FILE_SYNC).await;
    assert_eq!(status(&r), nfsstat3::NFS3ERR_ACCES, "not in the group");
    assert_eq!(std::fs::read(dir.join("group-file")).unwrap(), b"GROUP data");

    // Owner override: created 0444 by uid 1000, still written by uid 1000.
    let (ro, _) = create_file(&mut outsider, &root_fh, b"read-only-by-owner", 0o444).await;
    write(&mut outsider, &ro, 0, b"written", stable_how::FILE_SYNC).await.expect("owner writes its 0444 file");
    let m = meta(&dir.join("read-only-by-owner"));
    assert_eq!((m.mode() & 0o7777, m.uid()), (0o444, 1000));
    assert_eq!(std::fs::read(dir.join("read-only-by-owner")).unwrap(), b"written");
    let mut stranger = mount(&server, 1, cred(1002, 1002)).await;
    let r = write(&mut stranger, &ro, 0, b"x", stable_how::FILE_SYNC).await;
    assert_eq!(status(&r), nfsstat3::NFS3ERR_ACCES, "someone else's 0444 file");

    // Root and a user, interleaved on two connections each.
    let (mut root2, mut user2) = (mount(&server, 1, root()).await, mount(&server, 1, cred(1000, 1000)).await);
    async fn as_root(c: &mut Client, fh: &nfs_fh3) {
        for i in 0..300 {
            let ok = read(c, fh, 0, 100).await.expect(&format!("root READ {i}"));
            assert_eq!(ok.data.as_ref(), b"root only");
        }
    }
    async fn as_user(c: &mut Client, fh: &nfs_fh3) {
        for i in 0..300 {
            let r = read(c, fh, 0, 100).await;
            assert_eq!(status(&r), nfsstat3::NFS3ERR_ACCES, "uid 1000 READ {i} of a 0600 root file");
        }
    }
    tokio::join!(
        as_root(&mut rootc, &secret),
        as_user(&mut outsider, &secret),
        as_root(&mut root2, &secret),
        as_user(&mut user2, &secret)
    );
}

/// A call with AUTH_NONE is the anonymous user, even on a
/// no_root_squash export.
#[tokio::test]
async fn auth_none_is_the_anonymous_user() {
    let server = TestServer::start_default("proto-authnone");
    let dir = server.export_dir(1);
    host_file(&dir.join("secret"), b"root only", 0o600, 0, 0);
    let mut c = try_mount(&server, &server.export_path(1), opaque_auth::default(), true).await.expect("MNT");
    let root_fh = c.root_nfs_fh3();
    let (_, a) = create_file(&mut c, &root_fh, b"anonymous", 0o644).await;
    assert_eq!((a.uid, a.gid), (65534, 65534));
    let m = meta(&dir.join("anonymous"));
    assert_eq!((m.uid(), m.gid()), (65534, 65534));
    let secret = lookup_fh(&mut c, &root_fh, b"secret").await;
    assert_eq!(status(&read(&mut c, &secret, 0, 100).await), nfsstat3::NFS3ERR_ACCES);
}

/// Two exports of one file system are still separate: no hard link or
/// rename from one into the other.
#[tokio::test]
async fn link_and_rename_across_exports_are_xdev() {
    let server = TestServer::start("proto-xdev", vec![ExportOpts::rw(1, "one"), ExportOpts::rw(2, "two")], "");
    host_file(&server.export_dir(1).join("f"), b"f", 0o644, 0, 0);
    let (before1, before2) = (snapshot(&server.export_dir(1)), snapshot(&server.export_dir(2)));
    let (mut c, root1) = mount_root(&server, 1).await;
    let (_c2, root2) = mount_root(&server, 2).await;
    let f = lookup_fh(&mut c, &root1, b"f").await;
    assert_eq!(status(&link(&mut c, &f, &root2, b"alias").await), nfsstat3::NFS3ERR_XDEV, "LINK across exports");
    let r = rename(&mut c, &root1, b"f", &root2, b"moved").await;
    assert_eq!(status(&r), nfsstat3::NFS3ERR_XDEV, "RENAME across exports");
    assert_eq!((snapshot(&server.export_dir(1)), snapshot(&server.export_dir(2))), (before1, before2));
}

/// A directory whose handle a client holds, moved out of a subtree export
/// by a local process: LOOKUP ".." must not hand out what now lies above
/// it (outside the export), nor must READDIRPLUS.
#[tokio::test]
async fn dotdot_of_a_directory_moved_out_of_the_export_does_not_climb_out() {
    let server = server_with_a_secret_outside("proto-dotdot-moved");
    let dir = server.export_dir(1);
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let a = mkdir_fh(&mut c, &root_fh, b"a", 0o755).await;
    let b = mkdir_fh(&mut c, &a, b"b", 0o755).await;
    assert_eq!(lookup_fh(&mut c, &b, b"..").await, a, "inside the export, .. works");
    // The host moves a (with b in it) next to the secret, outside the export.
    std::fs::rename(dir.join("a"), server.base.join("outside/a")).unwrap();

    let r = lookup(&mut c, &b, b"..").await;
    if let Nfs3Result::Ok(ok) = &r {
        let listing = list_names(&mut c, &ok.object).await;
        panic!("LOOKUP .. climbed out of the export, to a directory holding {listing:?}");
    }
    assert_eq!(status(&r), nfsstat3::NFS3ERR_ACCES);
    let plus = readdirplus(&mut c, &b, 0, cookieverf3::default(), 8192).await.expect("READDIRPLUS of b");
    for e in plus.reply.entries.into_inner() {
        if e.name.as_ref() == b".." {
            assert!(matches!(e.name_handle, Nfs3Option::None), "READDIRPLUS handed out the handle of ..");
        }
    }
    // From a, ".." is now the outside directory itself.
    assert_eq!(status(&lookup(&mut c, &a, b"..").await), nfsstat3::NFS3ERR_ACCES);
    // Inside the export nothing changed.
    let sub = mkdir_fh(&mut c, &root_fh, b"sub", 0o755).await;
    let deeper = mkdir_fh(&mut c, &sub, b"deeper", 0o755).await;
    assert_eq!(lookup_fh(&mut c, &deeper, b"..").await, sub);
}

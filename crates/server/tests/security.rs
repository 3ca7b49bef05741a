//! Who may act as root. AUTH_SYS carries whatever uid the caller claims, so
//! the only thing that tells a client host's kernel (or its root) from one
//! of its ordinary users is the source port: only root can bind one below
//! 1024. Exports are therefore `secure` by default, as exports(5) says, and
//! that includes the zero-configuration `keel serve` on 127.0.0.1: a local
//! user who connects from an ordinary port and claims uid 0 must not be able
//! to plant a setuid-root program, which is what `no_root_squash` without
//! `secure` allowed.

use std::os::unix::fs::MetadataExt;

use keel_testkit::nfs::*;
use keel_testkit::server::{ExportOpts, TestServer};
use nfs3_client::{ConnectError, MountError};
use nfs3_types::mount::mountstat3;
use nfs3_types::nfs3::*;

/// What the attacker wants to run as root.
const SCRIPT: &[u8] = b"#!/bin/sh\nexec /bin/sh -p\n";

/// MNT of export `id` from an ordinary source port, as root, is refused
/// with MNT3ERR_ACCES (what rpc.mountd answers an "illegal port").
async fn assert_mnt_refused_from_an_ordinary_port(server: &TestServer, id: u32) {
    match try_mount(server, &server.export_path(id), root(), false).await {
        Err(ConnectError::Mount(MountError::Denied(s))) => {
            // mountstat3 has no PartialEq.
            assert!(matches!(s, mountstat3::MNT3ERR_ACCES), "MNT from an ordinary port refused with {s}")
        }
        Err(e) => panic!("MNT of export {id} from an ordinary port: {e:?}"),
        Ok(_) => panic!("MNT of export {id} from an ordinary port as root succeeded\nlog:\n{}", server.log_text()),
    }
}

/// The attack: CREATE `name` with mode 04755 in `dir`, then WRITE a script
/// into it. Returns the status of the CREATE and, if it succeeded, of the
/// WRITE.
async fn plant_setuid_program(c: &mut Client, dir: &nfs_fh3, name: &[u8]) -> (nfsstat3, Option<nfsstat3>) {
    let created = create(c, dir, name, createhow3::GUARDED(mode_attr(0o4755))).await;
    let fh = match created {
        Nfs3Result::Ok(ok) => ok.obj.unwrap(),
        Nfs3Result::Err((s, _)) => return (s, None),
    };
    let written = write(c, &fh, 0, SCRIPT, stable_how::FILE_SYNC).await;
    (nfsstat3::NFS3_OK, Some(status(&written)))
}

/// The README's first command: `keel serve` with no configuration exports
/// a directory read-write with no_root_squash to 127.0.0.1. A local user
/// (an ordinary source port) claiming uid 0 can neither mount it nor, even
/// holding its root handle, create a setuid-root file or write into one;
/// root from a reserved port (the kernel client, libnfs run by root) still
/// acts as root.
#[tokio::test]
async fn zero_config_server_refuses_root_from_an_ordinary_port() {
    let server = TestServer::start_zero_config("sec-zero");
    let dir = server.export_dir(1);
    assert_mnt_refused_from_an_ordinary_port(&server, 1).await;

    // A kernel-like caller: root from a reserved port.
    let (mut kernel, root_fh) = mount_root(&server, 1).await;
    let (victim, _) = create_file(&mut kernel, &root_fh, b"victim", 0o4755).await;

    // The local user, with a handle they should never have had.
    let mut user = nfs_client(&server, root(), false).await;
    assert_eq!(plant_setuid_program(&mut user, &root_fh, b"evil").await, (nfsstat3::NFS3ERR_PERM, None));
    assert!(!exists(&dir.join("evil")), "a setuid file was created from an ordinary port");
    let w = write(&mut user, &victim, 0, SCRIPT, stable_how::FILE_SYNC).await;
    assert_eq!(status(&w), nfsstat3::NFS3ERR_PERM, "WRITE from an ordinary port");
    assert_eq!(meta(&dir.join("victim")).len(), 0, "the WRITE from an ordinary port reached the file");
    assert!(server.log_text().contains("illegal port"), "the refused MNT is not logged as such");

    // no_root_squash still holds for root from a reserved port.
    assert_eq!(
        plant_setuid_program(&mut kernel, &root_fh, b"tool").await,
        (nfsstat3::NFS3_OK, Some(nfsstat3::NFS3_OK))
    );
    let m = meta(&dir.join("tool"));
    assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o4755), "root's setuid file from a reserved port");
    assert_eq!(std::fs::read(dir.join("tool")).unwrap(), SCRIPT);
}

/// A configured export that names neither `secure` nor `insecure` is
/// `secure`: MNT and every call from an ordinary port are refused.
#[tokio::test]
async fn a_configured_export_without_secure_or_insecure_is_secure() {
    let exports = vec![ExportOpts::new(1, "default", "access = \"rw\"\nsquash = \"no_root_squash\"")];
    let server = TestServer::start("sec-default", exports, "");

    assert_mnt_refused_from_an_ordinary_port(&server, 1).await;
    let (_kernel, root1) = mount_root(&server, 1).await;
    let mut user = nfs_client(&server, root(), false).await;
    assert_eq!(status(&getattr(&mut user, &root1).await), nfsstat3::NFS3ERR_PERM);
    assert_eq!(plant_setuid_program(&mut user, &root1, b"evil").await, (nfsstat3::NFS3ERR_PERM, None));
    assert!(!exists(&server.export_dir(1).join("evil")));
}

/// An export marked `insecure = true` (exports(5)'s spelling of `secure =
/// false`) takes ordinary ports, root included (no_root_squash here).
#[tokio::test]
async fn an_insecure_export_takes_ordinary_ports() {
    let options = "access = \"rw\"\nsquash = \"no_root_squash\"\ninsecure = true";
    let server = TestServer::start("sec-insecure", vec![ExportOpts::new(1, "insecure", options)], "");
    let insecure = try_mount(&server, &server.export_path(1), root(), false).await.expect("MNT of the insecure export");
    let root1 = insecure.root_nfs_fh3();
    let mut user = nfs_client(&server, root(), false).await;
    let (fh, attrs) = create_file(&mut user, &root1, b"f", 0o644).await;
    assert_eq!(attrs.uid, 0, "no_root_squash on the insecure export");
    assert_eq!(status(&write(&mut user, &fh, 0, b"data", stable_how::FILE_SYNC).await), nfsstat3::NFS3_OK);
    assert_eq!(std::fs::read(server.export_dir(1).join("f")).unwrap(), b"data");
}

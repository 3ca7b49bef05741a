//! Protocol-level tests of what outlives a call: handles and the write
//! verifier across a restart (kill -9), the duplicate reply cache (by
//! hand-built RPC records, since nfs3_client chooses its own xids), and the
//! stability an `async` export claims.

use std::collections::HashMap;
use std::time::Duration;

use keel_testkit::nfs::*;
use keel_testkit::server::{ExportOpts, TestServer};
use nfs3_types::nfs3::*;

#[tokio::test]
async fn handles_survive_a_restart_and_the_write_verifier_changes() {
    let mut server = TestServer::start_default("proto-restart");
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let d = mkdir_fh(&mut c, &root_fh, b"d", 0o755).await;
    let (f, fa) = create_file(&mut c, &d, b"f", 0o644).await;
    let data = pattern(11, 300_000);
    let w = write(&mut c, &f, 0, &data, stable_how::FILE_SYNC).await.expect("WRITE FILE_SYNC");
    assert_eq!(w.committed, stable_how::FILE_SYNC);
    let (u, _) = create_file(&mut c, &root_fh, b"unstable", 0o644).await;
    let w = write(&mut c, &u, 0, b"unstable data", stable_how::UNSTABLE).await.expect("WRITE UNSTABLE");
    let mut verifiers = vec![w.verf];
    assert_eq!(commit(&mut c, &u).await.expect("COMMIT").verf, w.verf);
    let (doomed, _) = create_file(&mut c, &root_fh, b"doomed", 0o644).await;
    drop(c);

    for start in 2..=3 {
        let pid = server.pid();
        if start == 2 {
            // Removed while the server is down.
            server.kill9();
            std::fs::remove_file(server.export_dir(1).join("doomed")).unwrap();
            server.start_again();
        } else {
            server.restart();
        }
        assert_ne!(server.pid(), pid, "a new process");
        // A client that reconnects keeps using the handles it has: no MNT.
        let mut c = nfs_client(&server, root(), true).await;
        let a = attrs(&mut c, &f).await;
        assert_eq!((a.fileid, a.size), (fa.fileid, data.len() as u64), "start {start}: GETATTR with an old handle");
        let ok = read(&mut c, &f, 0, 1 << 20).await.expect("READ with an old handle");
        assert!(ok.eof && ok.data.as_ref() == &data[..], "start {start}: FILE_SYNC data read back");
        assert_eq!(lookup_fh(&mut c, &d, b"f").await, f, "start {start}: the same file has the same handle");
        assert_eq!(lookup_fh(&mut c, &root_fh, b"d").await, d);
        assert_eq!(list_names(&mut c, &d).await, [".", "..", "f"]);
        assert_eq!(status(&getattr(&mut c, &doomed).await), nfsstat3::NFS3ERR_STALE, "removed while down");

        // The verifier changed, so a client knows to send its unstable
        // writes again; WRITE and COMMIT agree on the new one.
        let w = write(&mut c, &u, 0, b"UNSTABLE DATA", stable_how::UNSTABLE).await.expect("WRITE after restart");
        assert!(!verifiers.contains(&w.verf), "start {start}: verifier {:?} was used before: {verifiers:?}", w.verf);
        assert_eq!(commit(&mut c, &u).await.expect("COMMIT after restart").verf, w.verf);
        verifiers.push(w.verf);

        // MNT hands out the very same root handle.
        let conn = mount(&server, 1, root()).await;
        assert_eq!(conn.root_nfs_fh3(), root_fh, "start {start}: root handle");
    }
    assert_eq!(std::fs::read(server.export_dir(1).join("unstable")).unwrap(), b"UNSTABLE DATA");
}

/// READDIR cookies are the file system's own directory offsets: a listing
/// resumed with them neither repeats nor skips an entry, although the
/// directory changes under it and the server restarts in the middle.
#[tokio::test]
async fn readdir_cookies_survive_directory_changes_and_a_restart() {
    const ENTRIES: usize = 20_000;
    let mut server = TestServer::start_default("proto-cookies");
    let big = server.export_dir(1).join("big");
    std::fs::create_dir(&big).unwrap();
    for i in 0..ENTRIES {
        std::fs::File::create(big.join(format!("f-{i:05}"))).unwrap();
    }
    let (mut conn, root_fh) = mount_root(&server, 1).await;
    let dir = lookup_fh(&mut conn, &root_fh, b"big").await;
    let mut c: Client = conn.into_nfs3_client();
    let mut seen: HashMap<String, u32> = HashMap::new();
    let (mut cookie, mut verf) = (0u64, cookieverf3::default());
    let mut eof = false;
    for phase in 0..3 {
        // Read about a third of the directory, or to the end.
        while !eof && seen.len() < (phase + 1) * ENTRIES / 3 {
            let ok = readdir(&mut c, &dir, cookie, verf, 8192).await.expect("READDIR");
            assert!(cookie == 0 || ok.cookieverf == verf, "cookie verifier changed");
            verf = ok.cookieverf;
            for e in ok.reply.entries.into_inner() {
                *seen.entry(String::from_utf8_lossy(e.name.as_ref()).into_owned()).or_default() += 1;
                cookie = e.cookie;
            }
            eof = ok.reply.eof;
        }
        match phase {
            0 => {
                // Remove every 10th original entry and add new ones.
                for i in (3..ENTRIES).step_by(10) {
                    std::fs::remove_file(big.join(format!("f-{i:05}"))).unwrap();
                }
                for i in 0..2000 {
                    std::fs::File::create(big.join(format!("new-{i:04}"))).unwrap();
                }
            }
            1 => {
                server.restart();
                c = nfs_client(&server, root(), true).await;
            }
            _ => {}
        }
    }
    assert!(eof, "the listing ended");
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).map(|(k, _)| k.clone()).take(10).collect();
    assert!(twice.is_empty(), "listed more than once: {twice:?}");
    let missing: Vec<_> = (0..ENTRIES)
        .filter(|i| i % 10 != 3)
        .map(|i| format!("f-{i:05}"))
        .filter(|n| !seen.contains_key(n))
        .take(10)
        .collect();
    assert!(missing.is_empty(), "entries that stayed in the directory were skipped: {missing:?}");
    assert!(seen.contains_key(".") && seen.contains_key(".."));
}

/// REMOVE is not idempotent: its retransmission must get the original
/// reply from the duplicate reply cache, not a second execution's NOENT.
#[tokio::test]
async fn a_retransmitted_remove_is_replayed_from_the_reply_cache() {
    let server = TestServer::start_default("proto-drc-remove");
    let dir = server.export_dir(1);
    for name in ["victim", "other"] {
        host_file(&dir.join(name), b"x", 0o644, 0, 0);
    }
    let (_conn, root_fh) = mount_root(&server, 1).await;
    let mut raw = RawConn::connect(server.addr).await;
    let args = REMOVE3args { object: dirop(&root_fh, b"victim") };
    let xid = 0x5eed_0001;
    let call = call_record(xid, NFS_PROGRAM::NFSPROC3_REMOVE, &root(), &args);

    let first = raw.call(&call).await;
    assert_eq!(status(&decode_reply::<REMOVE3res>(xid, &first)), nfsstat3::NFS3_OK);
    assert!(!exists(&dir.join("victim")));

    // The same call again (same xid, same bytes): the same reply, byte for byte.
    let again = raw.call(&call).await;
    assert_eq!(status(&decode_reply::<REMOVE3res>(xid, &again)), nfsstat3::NFS3_OK, "retransmission");
    assert!(again == first, "the retransmission's reply is not the original one");

    // A new xid with the same arguments is a new call, and is executed.
    let fresh = raw.call(&call_record(xid + 1, NFS_PROGRAM::NFSPROC3_REMOVE, &root(), &args)).await;
    assert_eq!(status(&decode_reply::<REMOVE3res>(xid + 1, &fresh)), nfsstat3::NFS3ERR_NOENT, "new xid");
    host_file(&dir.join("victim"), b"y", 0o644, 0, 0);
    let fresh = raw.call(&call_record(xid + 2, NFS_PROGRAM::NFSPROC3_REMOVE, &root(), &args)).await;
    assert_eq!(status(&decode_reply::<REMOVE3res>(xid + 2, &fresh)), nfsstat3::NFS3_OK, "new xid, file there again");
    assert!(!exists(&dir.join("victim")), "executed, not replayed");

    // The same xid with other arguments is not a retransmission either.
    let other = REMOVE3args { object: dirop(&root_fh, b"other") };
    let reply = raw.call(&call_record(xid, NFS_PROGRAM::NFSPROC3_REMOVE, &root(), &other)).await;
    assert_eq!(status(&decode_reply::<REMOVE3res>(xid, &reply)), nfsstat3::NFS3_OK, "same xid, other name");
    assert!(!exists(&dir.join("other")), "same xid with other arguments executed");
    // ...and the original is still remembered.
    assert!(raw.call(&call).await == first, "original reply after another call with its xid");
    let replays = server.log_text().matches("replayed from the duplicate reply cache").count();
    assert_eq!(replays, 2, "the server logged its replays");
}

/// CREATE GUARDED: the retransmission gets the original OK (with the
/// handle), not EXIST.
#[tokio::test]
async fn a_retransmitted_guarded_create_is_replayed_from_the_reply_cache() {
    let server = TestServer::start_default("proto-drc-create");
    let dir = server.export_dir(1);
    let (_conn, root_fh) = mount_root(&server, 1).await;
    let mut raw = RawConn::connect(server.addr).await;
    let args = CREATE3args { where_: dirop(&root_fh, b"new"), how: createhow3::GUARDED(mode_attr(0o640)) };
    let xid = 0xc4ea_0001;
    let call = call_record(xid, NFS_PROGRAM::NFSPROC3_CREATE, &root(), &args);

    let first = raw.call(&call).await;
    let handle = decode_reply::<CREATE3res>(xid, &first).expect("CREATE GUARDED").obj.unwrap();
    assert!(exists(&dir.join("new")));
    let again = raw.call(&call).await;
    let replayed = decode_reply::<CREATE3res>(xid, &again).expect("retransmitted CREATE GUARDED");
    assert_eq!(replayed.obj.unwrap(), handle);
    assert!(again == first, "the retransmission's reply is not the original one");

    let fresh = raw.call(&call_record(xid + 1, NFS_PROGRAM::NFSPROC3_CREATE, &root(), &args)).await;
    assert_eq!(status(&decode_reply::<CREATE3res>(xid + 1, &fresh)), nfsstat3::NFS3ERR_EXIST, "new xid");
}

/// Over TCP a client retransmits after reconnecting, and Linux clients
/// reconnect from the same source port so the server's reply cache
/// (keyed, as knfsd's, by address and port) still recognises the call.
#[tokio::test]
async fn a_retransmission_after_a_reconnect_from_the_same_port_is_replayed() {
    let server = TestServer::start_default("proto-drc-reconnect");
    let dir = server.export_dir(1);
    host_dir(&dir.join("gone"), 0o755, 0, 0);
    let (_conn, root_fh) = mount_root(&server, 1).await;
    let args = RMDIR3args { object: dirop(&root_fh, b"gone") };
    let xid = 0x4ec0_0001;
    let call = call_record(xid, NFS_PROGRAM::NFSPROC3_RMDIR, &root(), &args);

    let mut raw = RawConn::connect_from(server.addr, 0, true).await;
    let port = raw.local_port();
    let first = raw.call(&call).await;
    assert_eq!(status(&decode_reply::<RMDIR3res>(xid, &first)), nfsstat3::NFS3_OK);
    assert!(!exists(&dir.join("gone")));
    drop(raw); // reset: no TIME_WAIT, the port is free again

    let mut raw = None;
    for _ in 0..50 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        if socket.bind(std::net::SocketAddr::from(([127, 0, 0, 1], port))).is_ok()
            && let Ok(Ok(s)) = tokio::time::timeout(STEP, socket.connect(server.addr)).await
        {
            raw = Some(RawConn { stream: s });
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut raw = raw.unwrap_or_else(|| panic!("cannot reconnect from port {port}"));
    let again = raw.call(&call).await;
    assert_eq!(status(&decode_reply::<RMDIR3res>(xid, &again)), nfsstat3::NFS3_OK, "retransmission after reconnect");
    assert!(again == first, "the retransmission's reply is not the original one");
}

/// On an `async` export nothing waits for the disk and the reply claims
/// the stability that was asked for, as knfsd's async does.
#[tokio::test]
async fn an_async_export_claims_the_stability_asked_for() {
    let opts = "access = \"rw\"\nsquash = \"no_root_squash\"\nsync = false";
    let server = TestServer::start("proto-async", vec![ExportOpts::new(1, "export", opts)], "");
    let path = server.export_dir(1).join("a");
    let (mut c, root_fh) = mount_root(&server, 1).await;
    let (fh, _) = create_file(&mut c, &root_fh, b"a", 0o644).await;
    let mut verifier = None;
    let mut expected = Vec::new();
    for stable in [stable_how::FILE_SYNC, stable_how::DATA_SYNC, stable_how::UNSTABLE] {
        let data = pattern(stable as u64, 4096);
        let ok = write(&mut c, &fh, expected.len() as u64, &data, stable).await.expect("WRITE");
        assert_eq!(ok.committed, stable, "async export answers {stable} with {}", ok.committed);
        assert_eq!(ok.count, 4096);
        assert_eq!(*verifier.get_or_insert(ok.verf), ok.verf);
        expected.extend_from_slice(&data);
    }
    assert_eq!(commit(&mut c, &fh).await.expect("COMMIT").verf, verifier.unwrap());
    assert!(std::fs::read(&path).unwrap() == expected);
}

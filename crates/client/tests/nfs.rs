//! The typed NFS and MOUNT clients and the helpers, against the in-memory
//! fake server of `common::memfs`.

mod common;

use std::collections::BTreeSet;

use bytes::Bytes;
use common::memfs::{self, EXPORT, RTMAX, WRITEVERF, WTMAX};
use common::opts;
use keel_client::proto::mount::Mountstat3;
use keel_client::proto::*;
use keel_client::{
    ClientError, MountClient, Nfs3Client, NfsResultExt, RetryPolicy, RpcConnection, Transfer, auth_sys, mount,
    mount_retrying,
};

fn pattern(len: usize) -> Bytes {
    (0..len).map(|i| (i.wrapping_mul(31) ^ (i >> 9)) as u8).collect()
}

#[tokio::test]
async fn mount_returns_the_root_handle_and_a_client_on_the_same_connection() {
    let addr = memfs::spawn().await;
    let (nfs, root) = mount(addr, EXPORT, &opts()).await.unwrap();
    assert_eq!(root, memfs::fh(memfs::ROOT));
    nfs.null().await.unwrap();
    assert_eq!(nfs.attributes(&root).await.unwrap().ftype, Ftype3::Dir);

    match mount(addr, "/nope", &opts()).await {
        Err(ClientError::Mount(Mountstat3::Noent)) => {}
        other => panic!("{other:?}"),
    }
    let mnt = MountClient::new(RpcConnection::connect(addr, &opts()).await.unwrap());
    mnt.null().await.unwrap();
    assert_eq!(mnt.mnt("/nope").await.unwrap().status(), Mountstat3::Noent);
}

#[tokio::test]
async fn nfs_status_is_data_not_an_error() {
    let addr = memfs::spawn().await;
    let (nfs, root) = mount(addr, EXPORT, &opts()).await.unwrap();
    let res =
        nfs.lookup(&Lookup3Args { what: Diropargs3 { dir: root.clone(), name: "missing".into() } }).await.unwrap();
    match res {
        NfsResult::Fail(Nfsstat3::Noent, fail) => assert!(fail.dir_attributes.is_some()),
        other => panic!("{other:?}"),
    }
    let stale = nfs.getattr(&Getattr3Args { object: memfs::fh(999) }).await.unwrap();
    assert_eq!(stale.status(), Nfsstat3::Stale);
    // The helpers turn it into an error.
    assert!(matches!(nfs.lookup_path(&root, "missing").await, Err(ClientError::Nfs(Nfsstat3::Noent))));
    assert!(matches!(stale.ok_or_status(), Err(ClientError::Nfs(Nfsstat3::Stale))));
}

#[tokio::test]
async fn create_and_lookup_nested_paths() {
    let addr = memfs::spawn().await;
    let (nfs, root) = mount(addr, EXPORT, &opts()).await.unwrap();
    let a = nfs.create_dir(&root, "a", 0o755).await.unwrap();
    let b = nfs.create_dir(&a, "b", 0o700).await.unwrap();
    // memfs leaves the handle out of CREATE replies: found by LOOKUP.
    let c = nfs.create_file(&b, "c", 0o600).await.unwrap();
    assert_eq!(nfs.lookup_path(&root, "a/b/c").await.unwrap(), c);
    assert_eq!(nfs.lookup_path(&root, "/a//./b/").await.unwrap(), b);
    assert_eq!(nfs.lookup_path(&root, "").await.unwrap(), root);
    let attrs = nfs.attributes(&c).await.unwrap();
    assert_eq!((attrs.ftype, attrs.mode), (Ftype3::Reg, 0o600));
    // UNCHECKED create of an existing file returns the same file.
    assert_eq!(nfs.create_file(&b, "c", 0o600).await.unwrap(), c);
    assert!(matches!(nfs.create_dir(&a, "b", 0o700).await, Err(ClientError::Nfs(Nfsstat3::Exist))));
}

#[tokio::test]
async fn calls_carry_the_clients_credential() {
    let addr = memfs::spawn().await;
    let (nfs, root) = mount(addr, EXPORT, &opts()).await.unwrap();
    let alice = nfs.with_auth(&auth_sys(1001, 1001, &[]));
    let bob = nfs.with_auth(&auth_sys(1002, 1002, &[]));
    let fa = alice.create_file(&root, "alice", 0o644).await.unwrap();
    let fb = bob.create_file(&root, "bob", 0o644).await.unwrap();
    assert_eq!(nfs.attributes(&fa).await.unwrap().uid, 1001);
    assert_eq!(nfs.attributes(&fb).await.unwrap().uid, 1002);
}

#[tokio::test]
async fn write_all_and_read_all_pipeline_through_short_writes_and_reads() {
    let addr = memfs::spawn().await;
    let (nfs, root) = mount(addr, EXPORT, &opts()).await.unwrap();
    let file = nfs.create_file(&root, "big", 0o644).await.unwrap();
    let data = pattern(1_000_003);
    // Chunks larger than the server's limits: every WRITE and READ is
    // short and must be completed by another.
    let xfer = Transfer { read_chunk: RTMAX + 5000, write_chunk: WTMAX + 4000, in_flight: 8, ..Transfer::default() };
    let out = nfs.write_all(&file, 0, data.clone(), StableHow::Unstable, &xfer).await.unwrap();
    assert_eq!(out.written, data.len() as u64);
    assert_eq!((out.committed, out.verf, out.verf_changed), (StableHow::FileSync, WRITEVERF, false));
    assert_eq!(nfs.attributes(&file).await.unwrap().size, data.len() as u64);

    let back = nfs.read_all(&file, &xfer).await.unwrap();
    assert_eq!(back.len(), data.len());
    assert!(back == data, "read_all returned other bytes");

    // Ranges: inside the file, across its end, past it.
    let mid = nfs.read_range(&file, 12_345, 100_000, &xfer).await.unwrap();
    assert_eq!((mid.data, mid.eof), (data.slice(12_345..112_345), false));
    let tail = nfs.read_range(&file, 990_000, 50_000, &xfer).await.unwrap();
    assert_eq!((tail.data, tail.eof), (data.slice(990_000..), true));
    let past = nfs.read_range(&file, 2_000_000, 10, &xfer).await.unwrap();
    assert_eq!((past.data, past.eof), (Bytes::new(), true));

    // The transfer sizes the server advertises work as they are.
    let sizes = nfs.transfer_sizes(&root).await.unwrap();
    assert_eq!((sizes.read_chunk, sizes.write_chunk), (RTMAX, WTMAX));
    let rewrite = pattern(50_000).slice(1..);
    nfs.write_all(&file, 7, rewrite.clone(), StableHow::FileSync, &sizes).await.unwrap();
    assert_eq!(nfs.read_range(&file, 7, rewrite.len() as u64, &sizes).await.unwrap().data, rewrite);

    // A single READ's data is returned without copying into a new buffer.
    let small = nfs.read_range(&file, 0, 100, &sizes).await.unwrap();
    assert_eq!(small.data.len(), 100);
}

#[tokio::test]
async fn read_all_stops_at_its_limit() {
    let addr = memfs::spawn().await;
    let (nfs, root) = mount(addr, EXPORT, &opts()).await.unwrap();
    let file = nfs.create_file(&root, "f", 0o644).await.unwrap();
    nfs.write_all(&file, 0, pattern(30_000), StableHow::FileSync, &Transfer::default()).await.unwrap();
    let xfer = Transfer { read_bytes_max: 20_000, ..Transfer::default() };
    assert!(matches!(nfs.read_all(&file, &xfer).await, Err(ClientError::Limit(_))));
    assert!(matches!(nfs.read_range(&file, 0, 20_001, &xfer).await, Err(ClientError::Limit(_))));
    // An empty file reads as empty.
    let empty = nfs.create_file(&root, "empty", 0o644).await.unwrap();
    assert!(nfs.read_all(&empty, &Transfer::default()).await.unwrap().is_empty());
}

#[tokio::test]
async fn listings_follow_cookies_across_many_replies() {
    let addr = memfs::spawn().await;
    let (nfs, root) = mount(addr, EXPORT, &opts()).await.unwrap();
    let dir = nfs.create_dir(&root, "d", 0o755).await.unwrap();
    let mut expected = BTreeSet::from([b".".to_vec(), b"..".to_vec()]);
    for i in 0..20 {
        let name = format!("file-{i:02}");
        nfs.create_file(&dir, name.as_str(), 0o644).await.unwrap();
        expected.insert(name.into_bytes());
    }
    // memfs answers three entries per READDIR: seven or more calls.
    let entries = nfs.readdir_all(&dir, 4096).await.unwrap();
    let names: BTreeSet<Vec<u8>> = entries.iter().map(|e| e.name.as_bytes().to_vec()).collect();
    assert_eq!(entries.len(), 22);
    assert_eq!(names, expected);
    let cookies: BTreeSet<u64> = entries.iter().map(|e| e.cookie).collect();
    assert_eq!(cookies.len(), 22, "cookies are distinct");

    let plus = nfs.readdirplus_all(&dir, 4096, 65536).await.unwrap();
    assert_eq!(plus.len(), 22);
    for e in &plus {
        let fh = e.name_handle.clone().unwrap();
        assert_eq!(e.name_attributes.unwrap().fileid, e.fileid);
        if e.name.as_bytes() != b"." && e.name.as_bytes() != b".." {
            assert_eq!(nfs.lookup_path(&dir, std::str::from_utf8(e.name.as_bytes()).unwrap()).await.unwrap(), fh);
        }
    }
}

#[tokio::test]
async fn remove_tree_removes_everything_below() {
    let addr = memfs::spawn().await;
    let (nfs, root) = mount(addr, EXPORT, &opts()).await.unwrap();
    let top = nfs.create_dir(&root, "top", 0o755).await.unwrap();
    let mut dir = top.clone();
    for depth in 0..5 {
        for i in 0..4 {
            nfs.create_file(&dir, format!("f{depth}-{i}").as_str(), 0o644).await.unwrap();
        }
        dir = nfs.create_dir(&dir, format!("d{depth}").as_str(), 0o755).await.unwrap();
    }
    nfs.create_file(&root, "keep", 0o644).await.unwrap();
    nfs.remove_tree(&root, "top").await.unwrap();
    let left: Vec<Vec<u8>> =
        nfs.readdir_all(&root, 4096).await.unwrap().into_iter().map(|e| e.name.as_bytes().to_vec()).collect();
    assert_eq!(left, [b".".to_vec(), b"..".to_vec(), b"keep".to_vec()]);
    assert!(matches!(nfs.remove_tree(&root, "top").await, Err(ClientError::Nfs(Nfsstat3::Noent))));
    // A plain file is removed too.
    nfs.remove_tree(&root, "keep").await.unwrap();
}

#[tokio::test]
async fn helper_futures_can_be_spawned() {
    let addr = memfs::spawn().await;
    let (nfs, root) = mount(addr, EXPORT, &opts()).await.unwrap();
    let file = nfs.create_file(&root, "spawned", 0o644).await.unwrap();
    let data = pattern(100_000);
    let task = {
        let (nfs, file, data) = (nfs.clone(), file.clone(), data.clone());
        tokio::spawn(async move {
            let xfer = Transfer::default();
            nfs.write_all(&file, 0, data, StableHow::FileSync, &xfer).await?;
            nfs.read_all(&file, &xfer).await
        })
    };
    assert_eq!(task.await.unwrap().unwrap(), data);
}

#[tokio::test]
async fn the_retrying_client_offers_the_same_calls_and_helpers() {
    let addr = memfs::spawn().await;
    let (nfs, root): (Nfs3Client<_>, _) = mount_retrying(addr, EXPORT, &opts(), RetryPolicy::default()).await.unwrap();
    let file = nfs.create_file(&root, "r", 0o644).await.unwrap();
    let data = pattern(40_000);
    nfs.write_all(&file, 0, data.clone(), StableHow::FileSync, &Transfer::default()).await.unwrap();
    assert_eq!(nfs.read_all(&file, &Transfer::default()).await.unwrap(), data);
    assert_eq!(nfs.transport().stats().retransmissions, 0);
    assert_eq!(nfs.transport().stats().connects, 1);
}

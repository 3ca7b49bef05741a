//! A full file system: writes get NFS3ERR_NOSPC, the server keeps serving,
//! and freeing space lets writes succeed again.

use std::process::Command;

use bytes::Bytes;
use keel_client::proto::nfs3::*;
use keel_client::{ConnectOptions, mount};
use keel_testkit::server::{TestServer, run};

/// Unmounts the small file system before the server's directory goes.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test]
async fn a_full_disk_is_nospc_and_recoverable() {
    let mut s = TestServer::start_default("full-disk");
    let dir = s.export_dir(1);
    run(Command::new("mount").args(["-t", "tmpfs", "-o", "size=4m,mode=0777", "keel-full"]).arg(&dir));
    let unmount = Unmount(dir.clone());
    // The server opened the directory under the mount; start it on the mount.
    s.restart();

    let (nfs, root) = mount(s.addr, &s.export_path(1), &ConnectOptions::default()).await.unwrap();
    let fh = nfs.create_file(&root, "big", 0o644).await.unwrap();
    let chunk = Bytes::from(vec![0x5a; 1 << 20]);
    let mut status = Nfsstat3::Ok;
    for i in 0..16u64 {
        let args = Write3Args {
            file: fh.clone(),
            offset: i << 20,
            count: chunk.len() as u32,
            stable: StableHow::FileSync,
            data: chunk.clone(),
        };
        let r = nfs.write(&args).await.unwrap();
        status = r.status();
        if status != Nfsstat3::Ok {
            break;
        }
    }
    assert_eq!(status, Nfsstat3::Nospc, "a 4 MiB file system cannot take 16 MiB");
    // The server is fine, and answers for the file it could not grow.
    assert!(nfs.attributes(&fh).await.unwrap().size <= 4 << 20);
    let other = nfs.create_file(&root, "small", 0o644).await.unwrap();

    let removed =
        nfs.remove(&Remove3Args { object: Diropargs3 { dir: root.clone(), name: "big".into() } }).await.unwrap();
    assert!(removed.is_ok());
    let args =
        Write3Args { file: other, offset: 0, count: chunk.len() as u32, stable: StableHow::FileSync, data: chunk };
    assert!(nfs.write(&args).await.unwrap().is_ok(), "space freed by REMOVE can be written again");
    drop(unmount);
}

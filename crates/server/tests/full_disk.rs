//! A full file system: writes get NFS3ERR_NOSPC, the server keeps serving,
//! and freeing space lets writes succeed again; and Keel starts on one, as
//! a failover's survivor must.

use std::process::Command;

use bytes::Bytes;
use keel_client::proto::nfs3::*;
use keel_client::{ConnectOptions, mount};
use keel_testkit::disk::XfsDisk;
use keel_testkit::nfs::blocking::Nfs;
use keel_testkit::nfs::pattern;
use keel_testkit::procs::{TempDir, run_timeout};
use keel_testkit::server::{ExportOpts, TestServer, keel_bin, run};
use nfs3_types::nfs3::stable_how;

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

/// Fills the file system of `dir` from the host: a file as large as the
/// free space allows, then appends until ENOSPC.
fn fill(dir: &std::path::Path) {
    let out = run(Command::new("df").args(["--output=avail", "-B1"]).arg(dir));
    let avail: u64 = out.lines().last().unwrap().trim().parse().unwrap();
    let filler = dir.join("filler");
    run(Command::new("fallocate").args(["-l", &avail.saturating_sub(4 << 20).to_string()]).arg(&filler));
    let mut f = std::fs::OpenOptions::new().append(true).open(&filler).unwrap();
    let chunk = vec![0x33u8; 64 << 10];
    use std::io::Write;
    // 4 MiB were left: bounded well above that.
    for _ in 0..1024 {
        if let Err(e) = f.write_all(&chunk).and_then(|()| f.sync_all()) {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "filling {}: {e}", dir.display());
            return;
        }
    }
    panic!("{} did not fill up", dir.display());
}

/// WRITEs of 1 MiB to `fh` from `offset` on until one is not NFS3_OK
/// (bounded): that status.
fn write_until_refused(nfs: &mut Nfs, fh: &[u8], offset: u64) -> Result<(), nfs3_types::nfs3::nfsstat3> {
    let chunk = vec![0x5a; 1 << 20];
    for i in 0..16u64 {
        nfs.write(fh, offset + (i << 20), &chunk, stable_how::FILE_SYNC)?;
    }
    Ok(())
}

/// A failover's survivor finds the shared file system full: Keel starts
/// on it all the same, under `[ha]` (reply journal, connection list) and
/// with a cache device record, writing nothing at start that needs a new
/// block. It serves reads, answers NFS3ERR_NOSPC to writes, takes a
/// REMOVE, and the space that frees takes writes again; `keel status`
/// (the cluster's monitor) answers. Twice, so the NSM state number moves
/// on at each start.
#[test]
fn keel_starts_and_serves_on_a_full_file_system() {
    let disk = XfsDisk::new("full-start");
    let devices = TempDir::new("full-start-devices");
    let mut names = Vec::new();
    for name in ["c1", "c2"] {
        let path = devices.path().join(name);
        run(Command::new("fallocate").args(["-l", &(96u64 << 20).to_string()]).arg(&path));
        names.push(format!("{:?}", path.display().to_string()));
    }
    let extra = format!("\n[ha]\nenabled = true\n\n[cache]\ndevices = [{}]\nlog_mib = 32\n", names.join(", "));
    let mut server = TestServer::start_in("full-start", &disk.mnt, vec![ExportOpts::rw(1, "export")], &extra);
    let data = pattern(7, 64 << 10);
    {
        let mut nfs = Nfs::connect(server.addr).unwrap();
        let root = nfs.mount(&server.export_path(1)).unwrap();
        let kept = nfs.create_new(&root, "kept").unwrap();
        nfs.write_all(&kept, &data, stable_how::FILE_SYNC).unwrap();
        let ballast = nfs.create_new(&root, "ballast").unwrap();
        nfs.write_all(&ballast, &pattern(8, 8 << 20), stable_how::FILE_SYNC).unwrap();
        // The recorder writes the connection list within a second.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !server.state_dir().join("connections").exists() {
            assert!(std::time::Instant::now() < deadline, "the connection list was not written");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    fill(&server.export_dir(1));

    for start in 0..2 {
        // kill -9, as a failover leaves it.
        server.restart();
        let mut nfs = Nfs::connect(server.addr).unwrap();
        let root = nfs.mount(&server.export_path(1)).unwrap();
        let kept = nfs.lookup(&root, "kept").unwrap();
        assert!(nfs.read_all(&kept).unwrap() == data, "start {start}: kept reads back");
        assert_eq!(write_until_refused(&mut nfs, &kept, 1 << 20), Err(nfs3_types::nfs3::nfsstat3::NFS3ERR_NOSPC));
        let status = run_timeout(
            Command::new(keel_bin()).args(["status", "--config"]).arg(&server.config),
            std::time::Duration::from_secs(30),
        );
        assert!(status.status.success(), "start {start}: keel status: {status:?}");
    }
    let states: Vec<u32> = server
        .log_text()
        .lines()
        .filter_map(|l| l.split("nsm_state=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(states.len() == 3 && states.windows(2).all(|w| w[0] < w[1]), "NSM states of the three starts: {states:?}");

    let mut nfs = Nfs::connect(server.addr).unwrap();
    let root = nfs.mount(&server.export_path(1)).unwrap();
    nfs.remove(&root, "ballast").unwrap();
    let again = nfs.create_new(&root, "again").unwrap();
    let written = nfs.write(&again, 0, &pattern(9, 1 << 20), stable_how::FILE_SYNC);
    assert_eq!(written.map(|w| w.count), Ok(1 << 20), "the space REMOVE freed takes writes again");
    drop(server);
}

//! The client library, `keel bench` and `keel verify` against a server we
//! did not write: NFS-Ganesha (Debian's nfs-ganesha-vfs), run in a private
//! network namespace with its own rpcbind, which Ganesha insists on.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_client::ConnectOptions;
use keel_client::proto::nfs3::StableHow;
use keel_testkit::server::{self, require_root, run};

const NFS_PORT: u16 = 2049;
const MOUNT_PORT: u16 = 20048;

/// Ganesha and rpcbind in a namespace of their own, removed on drop.
struct Ganesha {
    ns: String,
    dir: PathBuf,
    children: Vec<Child>,
}

impl Ganesha {
    fn start(tag: &str) -> Ganesha {
        require_root();
        assert!(
            Path::new("/usr/bin/ganesha.nfsd").exists(),
            "nfs-ganesha is not installed (scripts/test.sh installs nfs-ganesha and nfs-ganesha-vfs)"
        );
        let ns = format!("keel-ganesha-{tag}-{}", std::process::id());
        let dir = std::env::temp_dir().join(&ns);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("export")).unwrap();
        run(Command::new("ip").args(["netns", "add", &ns]));
        let mut g = Ganesha { ns, dir, children: Vec::new() };
        g.inns(&["ip", "link", "set", "lo", "up"]);
        let conf = g.dir.join("ganesha.conf");
        std::fs::write(
            &conf,
            format!(
                "NFS_CORE_PARAM {{ NFS_Port = {NFS_PORT}; MNT_Port = {MOUNT_PORT}; Protocols = 3; Enable_NLM = false; Enable_RQUOTA = false; }}\n\
                 NFSV4 {{ Graceless = true; }}\nNFS_KRB5 {{ Active_krb5 = false; }}\n\
                 EXPORT {{ Export_Id = 1; Path = {0}; Pseudo = {0}; Protocols = 3; Transports = TCP; \
                 Access_Type = RW; Squash = No_Root_Squash; SecType = sys; FSAL {{ Name = VFS; }} }}\n\
                 LOG {{ Default_Log_Level = WARN; }}\n",
                g.export()
            ),
        )
        .unwrap();
        g.spawn(&["unshare", "--mount", "sh", "-c", "mount -t tmpfs tmp /run && exec rpcbind -f -w"]);
        // Ganesha registers with rpcbind as it starts, and does not come up
        // if rpcbind is not listening yet.
        g.wait_for(&[111], || "rpcbind did not start".into());
        let log = g.dir.join("ganesha.log");
        let pid = g.dir.join("ganesha.pid");
        g.spawn(&["ganesha.nfsd", "-F", "-L", &path(&log), "-f", &path(&conf), "-p", &path(&pid), "-N", "NIV_WARN"]);
        g.wait_for(&[NFS_PORT, MOUNT_PORT], || {
            format!("ganesha did not start; log:\n{}", std::fs::read_to_string(&log).unwrap_or_default())
        });
        g
    }

    /// Waits (bounded) until the namespace listens on every port.
    fn wait_for(&self, ports: &[u16], why: impl Fn() -> String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let listening = self.inns(&["ss", "-ltnH"]);
            if ports.iter().all(|p| listening.contains(&format!(":{p} "))) {
                return;
            }
            assert!(Instant::now() < deadline, "{}", why());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn export(&self) -> String {
        path(&self.dir.join("export"))
    }

    fn inns(&self, cmd: &[&str]) -> String {
        run(Command::new("ip").args(["netns", "exec", &self.ns]).args(cmd))
    }

    fn spawn(&mut self, cmd: &[&str]) {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .args(cmd)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.children.push(child);
    }

    /// Runs `f` on a thread inside the namespace, with a tokio runtime.
    fn client<T: Send + 'static>(&self, f: impl AsyncFnOnce() -> T + Send + 'static) -> T {
        let netns = std::fs::File::open(format!("/run/netns/{}", self.ns)).unwrap();
        std::thread::spawn(move || {
            // SAFETY: setns on this thread only, with a namespace file we hold open.
            assert_eq!(unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns");
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f())
        })
        .join()
        .unwrap()
    }

    /// The `keel` binary inside the namespace.
    fn keel(&self, args: &[&str]) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns, env!("CARGO_BIN_EXE_keel")])
            .args(args)
            .current_dir(&self.dir)
            .output()
            .unwrap()
    }
}

impl Drop for Ganesha {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

fn server() -> std::net::SocketAddr {
    ([127, 0, 0, 1], NFS_PORT).into()
}

#[test]
fn the_client_library_works_against_ganesha() {
    let g = Ganesha::start("client");
    let export = g.export();
    let host_dir = PathBuf::from(&export);
    let (digest, names) = g.client(async move || {
        // Ganesha serves MOUNT on its own port.
        let opts = ConnectOptions::default();
        let conn = keel_client::RpcConnection::connect(([127, 0, 0, 1], MOUNT_PORT).into(), &opts).await.unwrap();
        let root = keel_client::MountClient::new(conn).mnt_root(export.as_str()).await.unwrap();
        let nfs = keel_client::Nfs3Client::new(keel_client::RpcConnection::connect(server(), &opts).await.unwrap());
        let xfer = nfs.transfer_sizes(&root).await.unwrap();
        assert!(xfer.write_chunk >= 4096);

        let dir = nfs.create_dir(&root, "d", 0o755).await.unwrap();
        let fh = nfs.create_file(&dir, "data", 0o644).await.unwrap();
        let data: Bytes =
            (0..8u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect::<Vec<_>>().into();
        let w = nfs.write_all(&fh, 0, data.clone(), StableHow::Unstable, &xfer).await.unwrap();
        assert_eq!(w.written, 8 << 20);
        nfs.commit(&keel_client::proto::nfs3::Commit3Args { file: fh.clone(), offset: 0, count: 0 }).await.unwrap();
        let back = nfs.read_all(&fh, &xfer).await.unwrap();
        assert!(back == data, "read back what was written");

        for i in 0..1000 {
            nfs.create_file(&dir, format!("f{i:04}").as_str(), 0o644).await.unwrap();
        }
        // Small replies: the listing takes many calls and follows cookies.
        let names: Vec<String> = nfs
            .readdir_all(&dir, 4096)
            .await
            .unwrap()
            .into_iter()
            .map(|e| String::from_utf8_lossy(e.name.as_bytes()).into_owned())
            .collect();
        let plus = nfs.readdirplus_all(&dir, 4096, 16384).await.unwrap();
        assert_eq!(plus.len(), names.len());
        assert_eq!(
            nfs.lookup_path(&root, "d/f0999").await.unwrap(),
            plus.iter().find(|e| e.name.as_bytes() == b"f0999").unwrap().name_handle.clone().unwrap()
        );
        (md5(&data), names)
    });
    assert_eq!(server::digest(&host_dir.join("d/data")), digest, "the data is on Ganesha's disk");
    let mut files: Vec<&String> = names.iter().filter(|n| n.starts_with('f')).collect();
    files.sort();
    files.dedup();
    assert_eq!(files.len(), 1000, "every entry listed once");
    let export = g.export();
    g.client(async move || {
        let opts = ConnectOptions::default();
        let conn = keel_client::RpcConnection::connect(([127, 0, 0, 1], MOUNT_PORT).into(), &opts).await.unwrap();
        let root = keel_client::MountClient::new(conn).mnt_root(export.as_str()).await.unwrap();
        let nfs = keel_client::Nfs3Client::new(keel_client::RpcConnection::connect(server(), &opts).await.unwrap());
        nfs.remove_tree(&root, "d").await.unwrap();
    });
    assert!(!host_dir.join("d").exists(), "remove_tree removed everything");
    // Not a mount point: the client gets Ganesha's refusal as an error.
    let refused = g.client(async move || {
        let conn = keel_client::RpcConnection::connect(([127, 0, 0, 1], MOUNT_PORT).into(), &ConnectOptions::default())
            .await
            .unwrap();
        keel_client::MountClient::new(conn).mnt_root("/nonexistent").await.is_err()
    });
    assert!(refused);
}

fn md5(data: &[u8]) -> String {
    let f = std::env::temp_dir().join(format!("keel-ganesha-md5-{}", std::process::id()));
    std::fs::write(&f, data).unwrap();
    let d = server::digest(&f);
    std::fs::remove_file(&f).unwrap();
    d
}

#[test]
fn keel_bench_and_keel_verify_measure_ganesha() {
    let g = Ganesha::start("bench");
    let export = g.export();
    let out = g.dir.join("seq.json");
    let o = g.keel(&[
        "bench",
        "seq",
        "--server",
        "127.0.0.1:2049",
        "--mount-port",
        "20048",
        "--export",
        &export,
        "--total",
        "8M",
        "--clients",
        "1,2",
        "--quiet",
        "--server-name",
        "nfs-ganesha",
        "-o",
        &path(&out),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(r["target"]["server"], "nfs-ganesha");
    for p in r["points"].as_array().unwrap() {
        assert_eq!(p["runs"][0]["bytes"], 8 << 20);
        assert_eq!(p["runs"][0]["errors"], 0);
    }

    let o = g.keel(&[
        "verify",
        "write",
        "--server",
        "127.0.0.1",
        "--mount-port",
        "20048",
        "--export",
        &export,
        "--clients",
        "2",
        "--size",
        "8M",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = g.keel(&["verify", "check"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    // Damage on Ganesha's disk is found.
    let stream = Path::new(&export).join("keel-verify/stream.1");
    let mut bytes = std::fs::read(&stream).unwrap();
    bytes[100_000] ^= 0xff;
    std::fs::write(&stream, bytes).unwrap();
    let o = g.keel(&["verify", "check"]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stdout));
}

//! Starting and stopping a real `keel` process for integration tests.
//!
//! Each server gets its own directory under the system temp dir holding the
//! exports, the state directory (handle key), the configuration file and
//! the server's log, and listens on an ephemeral port on 127.0.0.1 with the
//! portmapper off (port 111 is shared by the whole machine).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::netns::Netns;

/// One `[[export]]` of the test configuration.
#[derive(Clone, Debug)]
pub struct ExportOpts {
    pub id: u32,
    /// Directory name under the server's base directory.
    pub name: String,
    /// Extra TOML lines for the export table (access, squash, sync, ...).
    pub options: String,
    /// TOML for the client list; default: every client.
    pub clients: String,
}

impl ExportOpts {
    pub fn new(id: u32, name: &str, options: &str) -> Self {
        ExportOpts {
            id,
            name: name.into(),
            options: options.into(),
            clients: "[[export.clients]]\nhost = \"*\"\n".into(),
        }
    }

    pub fn rw(id: u32, name: &str) -> Self {
        Self::new(id, name, "access = \"rw\"\nsquash = \"no_root_squash\"")
    }
}

pub struct TestServer {
    pub base: PathBuf,
    /// Where the state directory (`state`) and the exports are: `base`,
    /// unless the test gave a directory of its own ([`TestServer::start_in`]).
    pub data: PathBuf,
    /// The configuration file (empty for a server started without one).
    pub config: PathBuf,
    pub log: PathBuf,
    pub addr: SocketAddr,
    pub exports: Vec<ExportOpts>,
    child: Option<Child>,
    /// The command line: `keel` and its arguments, after `ip netns exec
    /// NAME` for a server in a network namespace.
    argv: Vec<String>,
}

static SERVERS: AtomicU32 = AtomicU32::new(0);

/// The `keel` binary of this build. Cargo builds it for the integration
/// tests of its package, next to the directory (`deps/`) that holds the
/// test executables; `KEEL_BIN` overrides that.
pub fn keel_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("KEEL_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let keel = dir.join("keel");
    assert!(keel.is_file(), "{} not found: build the keel binary (cargo test -p keel builds it)", keel.display());
    keel
}

pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "these tests run keel, which needs root (run the suite as root)");
}

impl TestServer {
    /// A server exporting one read-write directory with no_root_squash
    /// (and `secure`, the default).
    pub fn start_default(tag: &str) -> Self {
        Self::start(tag, vec![ExportOpts::rw(1, "export")], "")
    }

    /// `server_extra` is extra TOML for the `[server]` table.
    pub fn start(tag: &str, exports: Vec<ExportOpts>, server_extra: &str) -> Self {
        Self::start_on(tag, exports, server_extra, 0)
    }

    /// Like `start`, keeping `port` across restarts (0 picks one now).
    pub fn start_on(tag: &str, exports: Vec<ExportOpts>, server_extra: &str, port: u16) -> Self {
        Self::build(tag, exports, server_extra, SocketAddr::from(([127, 0, 0, 1], port)), None, None)
    }

    /// Like `start`, with the state directory and the exports in `data`
    /// (a file system of the test's own, say) instead of the server's
    /// temporary directory, which keeps the configuration and the log.
    pub fn start_in(tag: &str, data: &Path, exports: Vec<ExportOpts>, server_extra: &str) -> Self {
        Self::build(tag, exports, server_extra, SocketAddr::from(([127, 0, 0, 1], 0)), None, Some(data))
    }

    /// Like `start`, with Keel inside the network namespace `netns`,
    /// listening on `listen`.
    pub fn start_in_netns(tag: &str, exports: Vec<ExportOpts>, netns: &Netns, listen: SocketAddr) -> Self {
        Self::build(tag, exports, "", listen, Some(netns), None)
    }

    /// Like `start_in_netns`, with `server_extra` TOML for the `[server]`
    /// table (which may set `portmap`: the namespace has its own port 111).
    pub fn start_in_netns_with(
        tag: &str,
        exports: Vec<ExportOpts>,
        netns: &Netns,
        listen: SocketAddr,
        server_extra: &str,
    ) -> Self {
        Self::build(tag, exports, server_extra, listen, Some(netns), None)
    }

    fn build(
        tag: &str,
        exports: Vec<ExportOpts>,
        server_extra: &str,
        listen: SocketAddr,
        netns: Option<&Netns>,
        data: Option<&Path>,
    ) -> Self {
        require_root();
        let n = SERVERS.fetch_add(1, Ordering::SeqCst);
        let base = std::env::temp_dir().join(format!("keel-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let data = data.map_or_else(|| base.clone(), Path::to_path_buf);
        let portmap = if server_extra.contains("portmap =") { "" } else { "portmap = \"off\"\n" };
        let workers = if server_extra.contains("workers =") { "" } else { "workers = 8\n" };
        let mut toml = format!(
            "[server]\nlisten = [\"{listen}\"]\n{portmap}{workers}log_level = \"debug\"\nstate_dir = \"{}\"\n{server_extra}\n",
            data.join("state").display()
        );
        for e in &exports {
            let dir = data.join(&e.name);
            std::fs::create_dir_all(&dir).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
            toml +=
                &format!("\n[[export]]\npath = \"{}\"\nid = {}\n{}\n{}\n", dir.display(), e.id, e.options, e.clients);
        }
        let config = base.join("keel.toml");
        std::fs::write(&config, toml).unwrap();
        let log = base.join("keel.log");
        let mut argv = match netns {
            Some(ns) => vec!["ip".into(), "netns".into(), "exec".into(), ns.name.clone()],
            None => Vec::new(),
        };
        argv.extend([
            keel_bin().display().to_string(),
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
        ]);
        let mut s = TestServer { base, data, config, log, addr: listen, exports, child: None, argv };
        s.spawn();
        if listen.port() == 0 {
            // Keep the same port across restarts, so clients can carry on.
            let text = std::fs::read_to_string(&s.config).unwrap();
            std::fs::write(&s.config, text.replacen(&listen.to_string(), &s.addr.to_string(), 1)).unwrap();
        }
        s
    }

    /// `keel serve DIR` with no configuration, as the README's first command
    /// runs it (export 1 is DIR, which keel creates), on an ephemeral port
    /// of 127.0.0.1 instead of 2049 and with the portmapper off.
    pub fn start_zero_config(tag: &str) -> Self {
        require_root();
        let n = SERVERS.fetch_add(1, Ordering::SeqCst);
        let base = std::env::temp_dir().join(format!("keel-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let export = ExportOpts::new(1, "keel-export", "");
        let mut argv: Vec<String> =
            vec![keel_bin().display().to_string(), "serve".into(), base.join(&export.name).display().to_string()];
        let state = base.join("state").display().to_string();
        for (option, value) in
            [("--listen", "127.0.0.1:0"), ("--portmap", "off"), ("--state-dir", &state), ("--log-level", "debug")]
        {
            argv.push(option.into());
            argv.push(value.into());
        }
        let mut s = TestServer {
            config: PathBuf::new(),
            log: base.join("keel.log"),
            data: base.clone(),
            base,
            addr: "127.0.0.1:0".parse().unwrap(),
            exports: vec![export],
            child: None,
            argv,
        };
        s.spawn();
        // Keep the same port across restarts, so clients can carry on.
        let listen = s.argv.iter_mut().find(|a| *a == "127.0.0.1:0").expect("--listen");
        *listen = s.addr.to_string();
        s
    }

    /// The exported directory of export `id` on the server's side.
    pub fn export_dir(&self, id: u32) -> PathBuf {
        let e = self.exports.iter().find(|e| e.id == id).expect("export id");
        self.data.join(&e.name)
    }

    /// The server's state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.data.join("state")
    }

    /// The path clients mount.
    pub fn export_path(&self, id: u32) -> String {
        self.export_dir(id).display().to_string()
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let mut child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start keel");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // "keel VERSION serving NFSv3, NFSv4.1 and NFSv4.2 on ADDR, ..."
                if let Some(rest) = line.split_once(" serving NFS").and_then(|(_, r)| r.split_once(" on ")) {
                    let addr: SocketAddr = rest.1.split(',').next().unwrap().trim().parse().unwrap();
                    let _ = tx.send(addr);
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(addr) => self.addr = addr,
            Err(_) => {
                let _ = child.kill();
                panic!("keel did not start; log:\n{}", self.log_text());
            }
        }
        self.child = Some(child);
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// kill -9: no chance to flush or answer anything.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then wait (bounded) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut c = self.child.take().expect("running");
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("keel did not exit after SIGTERM; log:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// kill -9 and start again with the same configuration, state and port.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Starts the server again after `kill9` or `terminate`.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none());
        self.spawn();
    }

    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => c.try_wait().unwrap().is_none(),
            None => false,
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill9();
        // The administration socket a killed server left in /run/keel (its
        // state directory links to it).
        if let Ok(socket) = std::fs::read_link(self.state_dir().join("keel.sock")) {
            let _ = std::fs::remove_file(socket);
        }
        if std::thread::panicking() {
            eprintln!("---- keel log ({}) ----\n{}", self.log.display(), self.log_text());
        } else {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }
}

/// Runs a command, failing the test with its output if it fails.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed ({}):\n{text}", out.status);
    text
}

pub fn digest(path: &Path) -> String {
    run(Command::new("md5sum").arg(path)).split_whitespace().next().unwrap().to_string()
}

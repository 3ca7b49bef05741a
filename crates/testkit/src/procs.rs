//! Running external programs from tests with a bound on time, so a hung
//! client or server fails the test instead of hanging the suite.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs `cmd` (stdin closed) and returns its output; kills it and panics
/// if it runs longer than `timeout`.
pub fn run_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out_pipe.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let status = match wait_timeout(&mut child, timeout) {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            let (o, e) = (out_reader.join().unwrap_or_default(), err_reader.join().unwrap_or_default());
            panic!("{cmd:?} did not finish within {timeout:?}; output:\n{o}{e}");
        }
    };
    Output { status, stdout: out_reader.join().unwrap_or_default(), stderr: err_reader.join().unwrap_or_default() }
}

/// Like `run_timeout`, failing the test unless the command succeeds.
pub fn run_ok(cmd: &mut Command, timeout: Duration) -> Output {
    let out = run_timeout(cmd, timeout);
    assert!(out.status.success(), "{cmd:?} failed ({}):\n{}", out.status, out.text());
    out
}

/// The exit status of `child` if it exits within `timeout`.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `f` until it returns `Some`, or `None` after `timeout`.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port()
}

/// Whether something accepts TCP connections at `addr`.
pub fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

/// A fresh directory under the system temp dir, removed on drop unless the
/// test is failing (then it is kept for inspection).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        Self::under(&std::env::temp_dir(), tag)
    }

    /// A fresh directory on a disk: for what must outlive a power cut or
    /// what Keel refuses in memory, cache devices above all. Under the
    /// system temp dir unless that is in memory (tmpfs is /tmp on Debian
    /// 13), else under /var/tmp; see [`disk_temp_base`].
    pub fn on_disk(tag: &str) -> Self {
        Self::under(&disk_temp_base(), tag)
    }

    fn under(base: &Path, tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = base.join(format!("keel-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(std::fs::canonicalize(&dir).unwrap())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

/// Where [`TempDir::on_disk`] makes its directories: the first of the
/// system temp dir and /var/tmp that is not in memory ([`in_memory`]).
/// Panics, saying what to do, when both are.
pub fn disk_temp_base() -> PathBuf {
    let candidates = [std::env::temp_dir(), PathBuf::from(DISK_TEMP_DIR)];
    let mut found = Vec::new();
    for dir in &candidates {
        match in_memory(dir) {
            None => return dir.clone(),
            Some(what) => found.push(format!("{} is on {what}", dir.display())),
        }
    }
    panic!(
        "cache device files need a directory on a disk (a power cut empties one in memory, and Keel refuses cache \
         devices there), and {}: set TMPDIR to a directory on a disk",
        found.join(" and ")
    );
}

/// The temp dir that stays on a disk when /tmp is a tmpfs (FHS: kept
/// across reboots).
const DISK_TEMP_DIR: &str = "/var/tmp";

/// ramfs's statfs magic (linux/magic.h; libc names tmpfs's and
/// hugetlbfs's only).
const RAMFS_MAGIC: u32 = 0x8584_58f6;

/// The file system holding `path`, if it keeps its files in memory only
/// (tmpfs, ramfs, hugetlbfs), as Keel's cache tells them apart; `None`
/// for anything else, and for a path that does not exist.
pub fn in_memory(path: &Path) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `st` outlives the call.
    if unsafe { libc::statfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    // Every magic number fits in 32 bits; f_type is wider on some targets.
    match st.f_type as u32 {
        t if t == libc::TMPFS_MAGIC as u32 => Some("tmpfs"),
        RAMFS_MAGIC => Some("ramfs"),
        t if t == libc::HUGETLBFS_MAGIC as u32 => Some("hugetlbfs"),
        _ => None,
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for inspection", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// md5 of bytes, as md5sum prints it (via md5sum, so digests compare
/// with those of files).
pub fn md5_of(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("md5sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("run md5sum");
    let mut stdin = child.stdin.take().unwrap();
    let data = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_string()
}

/// The uid and gid of nobody / nogroup, as which [`as_nobody`] runs.
pub const NOBODY: u32 = 65534;

/// A command that runs `program` as nobody:nogroup with no supplementary
/// groups (through `setpriv`), as an ordinary user would run it. Add the
/// arguments; the program must be reachable and executable by nobody.
pub fn as_nobody(program: &Path) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={NOBODY}")).arg(format!("--regid={NOBODY}")).arg("--clear-groups").arg(program);
    cmd
}

/// The `RESULT key=value` lines of a kernel-client guest's output (the
/// marker may follow kernel messages on the same console line), by key.
pub fn guest_results(output: &str) -> std::collections::BTreeMap<String, String> {
    output
        .lines()
        .filter_map(|l| l.find("RESULT ").map(|at| &l[at + 7..]))
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.trim().to_string())))
        .collect()
}

/// Builds the C program `src` static into `out` (the busybox guest has no
/// shared libraries).
pub fn build_static_c(src: &Path, out: &Path) {
    let st = Command::new("gcc").args(["-static", "-O2", "-o"]).arg(out).arg(src).status().expect("gcc");
    assert!(st.success(), "cannot build {}", src.display());
}

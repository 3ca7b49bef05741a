//! Network namespaces of a test's own (`ip netns add`), for what cannot
//! share the host's network stack: port 111, a sysctl, a tap device.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::procs::{Output, run_ok, run_timeout};
use crate::server::require_root;

/// How long a command in the namespace may take.
const CMD_TIMEOUT: Duration = Duration::from_secs(30);

/// A network namespace with loopback up; deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// A fresh namespace named after `tag` and this process.
    pub fn new(tag: &str) -> Self {
        require_root();
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!("keel-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        let _ = Command::new("ip").args(["netns", "del", &name]).stderr(Stdio::null()).status();
        run_ok(Command::new("ip").args(["netns", "add", &name]), CMD_TIMEOUT);
        let ns = Netns { name };
        ns.run_ok(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// `argv` to run inside the namespace.
    pub fn cmd(&self, argv: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).args(argv);
        c
    }

    pub fn run(&self, argv: &[&str]) -> Output {
        run_timeout(&mut self.cmd(argv), CMD_TIMEOUT)
    }

    /// Like `run`, failing the test unless the command succeeds.
    pub fn run_ok(&self, argv: &[&str]) -> Output {
        run_ok(&mut self.cmd(argv), CMD_TIMEOUT)
    }

    /// The namespace's file, for setns(2).
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

//! Users of this machine's user database for one test (the server maps a
//! Kerberos principal to the local user of its name).

use std::process::Command;
use std::time::Duration;

use keel_testkit::procs::run_ok;

/// A user of this machine's user database for one test: made with
/// useradd (no home, no login), removed with userdel when dropped, so no
/// test leaves it behind (one a killed run left is removed first).
pub struct SystemUser {
    pub name: &'static str,
    pub uid: u32,
    pub gid: u32,
}

impl SystemUser {
    /// `name`, with uid and gid `id` (a client's, for the ids on the
    /// server's disk to be the client's) or the next free ones.
    pub fn create(name: &'static str, id: Option<u32>) -> SystemUser {
        let _ = Command::new("userdel").arg(name).output();
        let _ = Command::new("groupdel").arg(name).output();
        let mut useradd = Command::new("useradd");
        useradd.args(["--no-create-home", "--shell", "/usr/sbin/nologin"]);
        match id {
            Some(id) => {
                run_ok(Command::new("groupadd").args(["--gid", &id.to_string(), name]), Duration::from_secs(30));
                useradd.args(["--uid", &id.to_string(), "--gid", &id.to_string()]);
            }
            None => {
                useradd.arg("--user-group");
            }
        }
        run_ok(useradd.arg(name), Duration::from_secs(30));
        let id = |flag: &str| -> u32 {
            let out = run_ok(Command::new("id").args([flag, name]), Duration::from_secs(10));
            out.stdout.trim().parse().expect("a number")
        };
        SystemUser { name, uid: id("-u"), gid: id("-g") }
    }
}

impl Drop for SystemUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(self.name).output();
        let _ = Command::new("groupdel").arg(self.name).output();
    }
}

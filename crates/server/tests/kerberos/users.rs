//! Users of this machine's user database for one test (the server maps a
//! Kerberos principal to the local user of its name).

use std::process::Command;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use keel_testkit::procs::run_ok;

/// A user of this machine's user database for one test: made with
/// useradd (no home, no login), removed with userdel when dropped, so no
/// test leaves it behind (one a killed run left is removed first). A name
/// is one test's at a time: tests share the names, and one test's userdel
/// must not pull the user from under another.
pub struct SystemUser {
    pub name: &'static str,
    pub uid: u32,
    pub gid: u32,
    /// Let go of after the user is removed (fields drop after `drop`).
    _held: HeldName,
}

/// The names some test's SystemUser holds, and a wake-up when one is let go.
static NAMES_IN_USE: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
static NAME_LET_GO: Condvar = Condvar::new();

/// A name of NAMES_IN_USE, given back when dropped (a panic in `create`
/// included).
struct HeldName(&'static str);

impl HeldName {
    fn take(name: &'static str) -> HeldName {
        // A test that failed holding the list poisons it; the next goes on.
        let mut in_use = NAMES_IN_USE.lock().unwrap_or_else(|e| e.into_inner());
        while in_use.contains(&name) {
            in_use = NAME_LET_GO.wait(in_use).unwrap_or_else(|e| e.into_inner());
        }
        in_use.push(name);
        HeldName(name)
    }
}

impl Drop for HeldName {
    fn drop(&mut self) {
        NAMES_IN_USE.lock().unwrap_or_else(|e| e.into_inner()).retain(|n| *n != self.0);
        NAME_LET_GO.notify_all();
    }
}

impl SystemUser {
    /// `name`, with uid and gid `id` (a client's, for the ids on the
    /// server's disk to be the client's) or the next free ones.
    pub fn create(name: &'static str, id: Option<u32>) -> SystemUser {
        let held = HeldName::take(name);
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
        SystemUser { name, uid: id("-u"), gid: id("-g"), _held: held }
    }
}

impl Drop for SystemUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(self.name).output();
        let _ = Command::new("groupdel").arg(self.name).output();
    }
}

//! The caller's identity on the worker thread.
//!
//! Linux keeps fsuid, fsgid, supplementary groups and capabilities per
//! thread at the system-call level (glibc's wrappers broadcast setgroups to
//! every thread, so the raw system calls are used). A worker thread assumes
//! the caller's identity before touching the file system, and the kernel
//! checks permissions exactly as for that local user:
//!
//! - a non-zero fsuid drops the file-system capabilities (CAP_DAC_OVERRIDE,
//!   CAP_CHOWN, CAP_FOWNER, ...) from the effective set;
//! - for non-root callers the remaining effective capabilities are cut down
//!   to CAP_SETUID and CAP_SETGID (needed to switch back), so CAP_MKNOD,
//!   CAP_SYS_RESOURCE (quota and reserved-block overrides) and the rest do
//!   not leak to NFS users;
//! - [`as_root`] lends fsuid 0 for the few calls that need it
//!   (open_by_handle_at needs CAP_DAC_READ_SEARCH), and gives it back even
//!   if the call panics.

use std::cell::Cell;
use std::io;

pub const GROUPS_MAX: usize = 16;

/// An identity after export squashing: what the kernel will check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    groups: [u32; GROUPS_MAX],
    ngroups: u8,
}

impl Cred {
    /// Groups beyond [`GROUPS_MAX`] are ignored (AUTH_SYS carries 16).
    pub fn new(uid: u32, gid: u32, groups: &[u32]) -> Self {
        let n = groups.len().min(GROUPS_MAX);
        let mut g = [0; GROUPS_MAX];
        g[..n].copy_from_slice(&groups[..n]);
        Cred { uid, gid, groups: g, ngroups: n as u8 }
    }

    pub const ROOT: Cred = Cred { uid: 0, gid: 0, groups: [0; GROUPS_MAX], ngroups: 0 };

    pub fn groups(&self) -> &[u32] {
        &self.groups[..self.ngroups as usize]
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

thread_local! {
    /// The identity this thread has assumed; `None` when unknown (a new
    /// thread, or after a panic), which forces the next `assume` to set all.
    static CURRENT: Cell<Option<Cred>> = const { Cell::new(None) };
}

const CAP_CHOWN: u32 = 0;
const CAP_DAC_OVERRIDE: u32 = 1;
const CAP_DAC_READ_SEARCH: u32 = 2;
const CAP_FOWNER: u32 = 3;
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;

/// The capabilities Keel needs in its permitted set, with their names.
const REQUIRED_CAPS: [(u32, &str); 6] = [
    (CAP_CHOWN, "CAP_CHOWN"),
    (CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"),
    (CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"),
    (CAP_FOWNER, "CAP_FOWNER"),
    (CAP_SETGID, "CAP_SETGID"),
    (CAP_SETUID, "CAP_SETUID"),
];

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn capget() -> io::Result<[CapData; 2]> {
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: version 3 takes two data structs.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(data) }
}

/// Sets this thread's effective capabilities (capset acts on the calling
/// thread only).
fn set_effective(effective: [u32; 2]) -> io::Result<()> {
    let mut data = capget()?;
    data[0].effective = effective[0] & data[0].permitted;
    data[1].effective = effective[1] & data[1].permitted;
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    // SAFETY: as above.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Refuses to run without the capabilities identity switching and handle
/// resolution need, with a message saying which are missing.
pub fn check_privileges() -> Result<(), String> {
    let data = capget().map_err(|e| format!("cannot read process capabilities: {e}"))?;
    let missing: Vec<&str> =
        REQUIRED_CAPS.iter().filter(|(cap, _)| data[0].permitted & (1 << cap) == 0).map(|(_, n)| *n).collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "keel needs to run as root (missing capabilities: {}): it opens files by handle and \
             acts as each caller's uid and gids",
            missing.join(", ")
        ))
    }
}

fn setfsuid(uid: u32) -> u32 {
    // SAFETY: raw syscall; returns the previous fsuid.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid) as u32 }
}

fn setfsgid(gid: u32) -> u32 {
    // SAFETY: raw syscall; returns the previous fsgid.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid) as u32 }
}

fn setgroups(groups: &[u32]) -> io::Result<()> {
    // SAFETY: raw syscall (per thread, unlike glibc's setgroups).
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Makes this thread act as `cred` for file-system access.
pub fn assume(cred: &Cred) -> io::Result<()> {
    if CURRENT.get() == Some(*cred) {
        return Ok(());
    }
    CURRENT.set(None);
    setgroups(cred.groups())?;
    setfsgid(cred.gid);
    setfsuid(cred.uid);
    if cred.is_root() {
        set_effective([u32::MAX, u32::MAX])?;
    } else {
        set_effective([(1 << CAP_SETUID) | (1 << CAP_SETGID), 0])?;
    }
    // setfsuid/setfsgid report no errors: read the values back (an invalid
    // id changes nothing and returns the current one).
    let (fsuid, fsgid) = (setfsuid(u32::MAX), setfsgid(u32::MAX));
    if fsuid != cred.uid || fsgid != cred.gid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("could not assume uid {} gid {} (fsuid {fsuid}, fsgid {fsgid})", cred.uid, cred.gid),
        ));
    }
    CURRENT.set(Some(*cred));
    Ok(())
}

/// Runs `f` with fsuid 0 (and so the file-system capabilities), then
/// returns to the assumed identity, also when `f` panics.
pub fn as_root<T>(f: impl FnOnce() -> T) -> T {
    match CURRENT.get() {
        Some(cred) if !cred.is_root() => {
            struct Restore(u32);
            impl Drop for Restore {
                fn drop(&mut self) {
                    setfsuid(self.0);
                }
            }
            setfsuid(0);
            let _restore = Restore(cred.uid);
            f()
        }
        // Root, or a thread that never assumed anyone: already privileged.
        _ => f(),
    }
}

/// Forgets what this thread assumed, so the next [`assume`] sets everything
/// (after a panic unwound through a request, say).
pub fn forget() {
    CURRENT.set(None);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current_fsuid() -> u32 {
        setfsuid(u32::MAX)
    }

    #[test]
    fn assume_switches_this_thread_only_and_as_root_lends_fsuid_0() {
        if check_privileges().is_err() {
            eprintln!("skipped: needs root");
            return;
        }
        // A thread inherits its creator's credentials, so the bystander
        // starts before the switch and reports after it.
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let bystander = std::thread::spawn(move || {
            wait.recv().unwrap();
            current_fsuid()
        });
        std::thread::spawn(move || {
            let user = Cred::new(4242, 4243, &[4244, 4245]);
            assume(&user).unwrap();
            assert_eq!(current_fsuid(), 4242);
            go.send(()).unwrap();
            assert_eq!(bystander.join().unwrap(), 0, "identity is per thread");
            assert_eq!(as_root(current_fsuid), 0);
            assert_eq!(current_fsuid(), 4242, "restored after as_root");
            let r = std::panic::catch_unwind(|| as_root(|| panic!("boom")));
            assert!(r.is_err());
            assert_eq!(current_fsuid(), 4242, "restored after a panic in as_root");
            // Non-fs capabilities are gone for a user: CAP_MKNOD (27).
            let caps = capget().unwrap();
            assert_eq!(caps[0].effective & (1 << 27), 0);
            assume(&Cred::ROOT).unwrap();
            assert_eq!(current_fsuid(), 0);
            assert_ne!(capget().unwrap()[0].effective & (1 << 27), 0, "root gets its capabilities back");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn groups_beyond_sixteen_are_dropped() {
        let groups: Vec<u32> = (0..20).collect();
        assert_eq!(Cred::new(1, 1, &groups).groups().len(), GROUPS_MAX);
    }
}

//! The caller's identity on the worker thread.
//!
//! A call runs under the caller's fsuid, fsgid and supplementary groups,
//! so the kernel checks permissions exactly as for that local user. The
//! layer that runs a call assumes the identity once, with [`act_as`], and
//! holds the returned [`Acting`] for the rest of the call; every storage
//! verb that touches the file system on a caller's behalf takes `&Acting`,
//! so none can run without the identity of the call in progress.
//!
//! Capabilities follow knfsd's `nfsd_setuser`: root callers hold the
//! file-system capabilities and CAP_SYS_RESOURCE, other callers only
//! CAP_SETUID and CAP_SETGID (needed to switch back), so CAP_MKNOD, quota
//! and reserved-block overrides and the rest never reach an NFS user. The
//! kernel drops and restores the file-system capabilities itself when the
//! fsuid leaves or returns to 0; a capset is needed only to move
//! CAP_SYS_RESOURCE across that boundary.
//!
//! Each credential system call costs a couple of microseconds (the kernel
//! commits a new credential set), so switching changes only what differs
//! from the identity the thread already has, and the identity stays in
//! place when a call ends: the thread is always in a known state, and the
//! next call from the same user costs nothing. After a failed switch or a
//! panic the thread is reset to root before anything else runs on it.

use std::cell::Cell;
use std::io;
use std::marker::PhantomData;

use crate::sys::{self, CapData};

pub use keel_store::Cred;

thread_local! {
    /// The identity this thread has; `None` when unknown (a new thread, or
    /// a switch that failed half-way), which makes the next switch start
    /// from a full reset.
    static CURRENT: Cell<Option<Cred>> = const { Cell::new(None) };
    /// Whether an [`Acting`] is alive on this thread.
    static ACTING: Cell<bool> = const { Cell::new(false) };
    /// The thread's permitted capabilities (they never change).
    static PERMITTED: Cell<u64> = const { Cell::new(0) };
}

const CAP_CHOWN: u32 = 0;
const CAP_DAC_OVERRIDE: u32 = 1;
const CAP_DAC_READ_SEARCH: u32 = 2;
const CAP_FOWNER: u32 = 3;
const CAP_FSETID: u32 = 4;
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;
const CAP_LINUX_IMMUTABLE: u32 = 9;
const CAP_SYS_RESOURCE: u32 = 24;
const CAP_MKNOD: u32 = 27;
const CAP_MAC_OVERRIDE: u32 = 32;

const fn bit(cap: u32) -> u64 {
    1 << cap
}

/// The capabilities the kernel drops when the fsuid leaves 0 and restores
/// when it returns (CAP_FS_MASK in linux/capability.h).
const FS_CAPS: u64 = bit(CAP_CHOWN)
    | bit(CAP_DAC_OVERRIDE)
    | bit(CAP_DAC_READ_SEARCH)
    | bit(CAP_FOWNER)
    | bit(CAP_FSETID)
    | bit(CAP_LINUX_IMMUTABLE)
    | bit(CAP_MKNOD)
    | bit(CAP_MAC_OVERRIDE);
/// What any caller's thread keeps, to be able to switch identities.
const SWITCH_CAPS: u64 = bit(CAP_SETUID) | bit(CAP_SETGID);
/// A root caller's effective set (knfsd: the fs set plus CAP_SYS_RESOURCE).
const ROOT_CAPS: u64 = FS_CAPS | SWITCH_CAPS | bit(CAP_SYS_RESOURCE);
/// Any other caller's effective set.
const USER_CAPS: u64 = SWITCH_CAPS;

/// The capabilities Keel needs in its permitted set, with their names.
const REQUIRED_CAPS: [(u32, &str); 6] = [
    (CAP_CHOWN, "CAP_CHOWN"),
    (CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"),
    (CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"),
    (CAP_FOWNER, "CAP_FOWNER"),
    (CAP_SETGID, "CAP_SETGID"),
    (CAP_SETUID, "CAP_SETUID"),
];

fn join(data: &[CapData; 2], field: impl Fn(&CapData) -> u32) -> u64 {
    u64::from(field(&data[0])) | (u64::from(field(&data[1])) << 32)
}

/// Refuses to run without the capabilities identity switching and handle
/// resolution need, with a message saying which are missing.
pub fn check_privileges() -> Result<(), String> {
    let data = sys::capget().map_err(|e| format!("cannot read process capabilities: {e}"))?;
    let permitted = join(&data, |d| d.permitted);
    let missing: Vec<&str> =
        REQUIRED_CAPS.iter().filter(|(cap, _)| permitted & bit(*cap) == 0).map(|(_, n)| *n).collect();
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

/// Sets this thread's effective capabilities to `wanted` (within the
/// permitted set).
fn set_effective(wanted: u64) -> io::Result<()> {
    let permitted = PERMITTED.get();
    let effective = wanted & permitted;
    let half = |shift: u32| CapData {
        effective: (effective >> shift) as u32,
        permitted: (permitted >> shift) as u32,
        inheritable: 0,
    };
    sys::capset(&[half(0), half(32)])
}

/// The caller's identity, assumed on this thread for the duration of one
/// call. Dropping it ends the call's use of the identity; a drop during a
/// panic resets the thread to root.
#[derive(Debug)]
pub struct Acting {
    cred: Cred,
    /// Identity is per thread: the guard must not move to another one.
    _this_thread: PhantomData<*const ()>,
}

impl Acting {
    pub fn cred(&self) -> &Cred {
        &self.cred
    }
}

impl keel_store::Caller for Acting {
    fn cred(&self) -> &Cred {
        &self.cred
    }
}

impl Drop for Acting {
    fn drop(&mut self) {
        ACTING.set(false);
        if std::thread::panicking() {
            // What the unwound call left behind is unknown.
            let _ = reset();
        }
    }
}

/// Makes this thread act as `cred` until the returned guard is dropped.
/// Fails with EPERM if the kernel does not take the identity (an id such
/// as 4294967295 that cannot be set); the thread is then back to root.
pub fn act_as(cred: &Cred) -> io::Result<Acting> {
    if ACTING.get() {
        // Two identities in one call is a bug in the calling layer.
        debug_assert!(false, "act_as while an identity is already assumed on this thread");
        return Err(io::Error::from_raw_os_error(libc::EBUSY));
    }
    let current = match CURRENT.get() {
        Some(c) => c,
        None => {
            reset()?;
            Cred::ROOT
        }
    };
    if current != *cred {
        CURRENT.set(None);
        if let Err(e) = switch(&current, cred) {
            tracing::warn!(uid = cred.uid, gid = cred.gid, error = %e, "cannot act as the caller");
            let _ = reset();
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        CURRENT.set(Some(*cred));
    }
    ACTING.set(true);
    Ok(Acting { cred: *cred, _this_thread: PhantomData })
}

/// Changes what differs between `from` (the thread's identity now) and `to`.
fn switch(from: &Cred, to: &Cred) -> io::Result<()> {
    if from.groups() != to.groups() {
        sys::setgroups(to.groups())?;
    }
    if from.gid != to.gid {
        sys::setfsgid(to.gid);
        // setfsgid reports no errors: read the value back.
        let now = sys::setfsgid(u32::MAX);
        if now != to.gid {
            return Err(io::Error::other(format!("fsgid is {now}, not {}", to.gid)));
        }
    }
    if from.uid != to.uid {
        sys::setfsuid(to.uid);
        let now = sys::setfsuid(u32::MAX);
        if now != to.uid {
            return Err(io::Error::other(format!("fsuid is {now}, not {}", to.uid)));
        }
    }
    if from.is_root() != to.is_root() {
        set_effective(if to.is_root() { ROOT_CAPS } else { USER_CAPS })?;
    }
    Ok(())
}

/// Puts this thread back to root with root's capabilities, whatever state
/// it is in: the known state a worker starts every call from after a
/// failure or a panic.
pub fn reset() -> io::Result<()> {
    debug_assert!(!ACTING.get() || std::thread::panicking(), "reset while a call acts on this thread");
    CURRENT.set(None);
    if PERMITTED.get() == 0 {
        PERMITTED.set(join(&sys::capget()?, |d| d.permitted));
    }
    sys::setfsuid(0);
    sys::setfsgid(0);
    sys::setgroups(&[])?;
    set_effective(ROOT_CAPS)?;
    let (fsuid, fsgid) = (sys::setfsuid(u32::MAX), sys::setfsgid(u32::MAX));
    if (fsuid, fsgid) != (0, 0) {
        return Err(io::Error::other(format!("cannot reset to root: fsuid {fsuid}, fsgid {fsgid}")));
    }
    CURRENT.set(Some(Cred::ROOT));
    Ok(())
}

/// Runs `f` with fsuid 0 (and so the file-system capabilities: opening by
/// handle needs CAP_DAC_READ_SEARCH), then puts back the fsuid the thread
/// had, also when `f` panics.
pub fn as_root<T>(f: impl FnOnce() -> T) -> T {
    if CURRENT.get().is_some_and(|c| c.is_root()) {
        return f();
    }
    struct Restore(u32);
    impl Drop for Restore {
        fn drop(&mut self) {
            sys::setfsuid(self.0);
        }
    }
    // setfsuid answers with the previous fsuid, so this is exact even when
    // the thread's identity is unknown.
    let _restore = Restore(sys::setfsuid(0));
    f()
}

/// Runs `f` with fsuid `uid`, then puts back the fsuid the thread had
/// (the kernel drops the file-system capabilities while it is not 0 and
/// gives them back when it is again), also when `f` panics.
pub(crate) fn as_fsuid<T>(uid: u32, f: impl FnOnce() -> T) -> T {
    struct Restore(u32);
    impl Drop for Restore {
        fn drop(&mut self) {
            sys::setfsuid(self.0);
        }
    }
    let _restore = Restore(sys::setfsuid(uid));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fsuid() -> u32 {
        sys::setfsuid(u32::MAX)
    }

    fn fsgid() -> u32 {
        sys::setfsgid(u32::MAX)
    }

    fn effective() -> u64 {
        join(&sys::capget().unwrap(), |d| d.effective)
    }

    fn groups() -> Vec<u32> {
        let mut buf = [0u32; 64];
        let n = sys::getgroups(&mut buf).unwrap();
        buf[..n].to_vec()
    }

    fn require_root() {
        if let Err(e) = check_privileges() {
            panic!("this test needs root (the suite runs as root): {e}");
        }
    }

    /// Runs `f` on a thread of its own: identities are per thread.
    fn on_thread(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(f).join().unwrap();
    }

    #[test]
    fn act_as_switches_this_thread_only_and_as_root_lends_fsuid_0() {
        require_root();
        // A thread inherits its creator's credentials, so the bystander
        // starts before the switch and reports after it.
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let bystander = std::thread::spawn(move || {
            wait.recv().unwrap();
            fsuid()
        });
        on_thread(move || {
            let user = Cred::new(4242, 4243, &[4244, 4245]);
            let acting = act_as(&user).unwrap();
            assert_eq!((fsuid(), fsgid(), groups()), (4242, 4243, vec![4244, 4245]));
            go.send(()).unwrap();
            assert_eq!(bystander.join().unwrap(), 0, "identity is per thread");
            assert_eq!(as_root(fsuid), 0);
            assert_eq!(fsuid(), 4242, "restored after as_root");
            let r = std::panic::catch_unwind(|| as_root(|| panic!("boom")));
            assert!(r.is_err());
            assert_eq!(fsuid(), 4242, "restored after a panic in as_root");
            // A user holds nothing beyond switching identities: no CAP_MKNOD,
            // no CAP_SYS_RESOURCE, no CAP_DAC_OVERRIDE.
            assert_eq!(effective() & !SWITCH_CAPS, 0, "effective {:#x}", effective());
            drop(acting);
            let _root = act_as(&Cred::ROOT).unwrap();
            assert_eq!((fsuid(), fsgid(), groups()), (0, 0, vec![]));
            let caps = effective();
            assert_ne!(caps & bit(CAP_MKNOD), 0, "root gets its capabilities back");
            let resource = bit(CAP_SYS_RESOURCE);
            assert_eq!(caps & resource, PERMITTED.get() & resource, "root keeps CAP_SYS_RESOURCE, as with knfsd");
        });
    }

    #[test]
    fn only_what_differs_is_switched() {
        require_root();
        on_thread(|| {
            drop(act_as(&Cred::new(5000, 6000, &[7000])).unwrap());
            // Same groups and gid, other uid: groups and gid stay as they are.
            let acting = act_as(&Cred::new(5001, 6000, &[7000])).unwrap();
            assert_eq!((fsuid(), fsgid(), groups()), (5001, 6000, vec![7000]));
            drop(acting);
            let acting = act_as(&Cred::new(5001, 6001, &[])).unwrap();
            assert_eq!((fsuid(), fsgid(), groups()), (5001, 6001, vec![]));
            drop(acting);
        });
    }

    #[test]
    fn a_failed_switch_leaves_the_thread_as_root() {
        require_root();
        on_thread(|| {
            drop(act_as(&Cred::new(5000, 5000, &[5001])).unwrap());
            let e = act_as(&Cred::new(u32::MAX, 77, &[78])).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EPERM));
            assert_eq!((fsuid(), fsgid(), groups()), (0, 0, vec![]), "reset to root, not half-switched");
            assert_eq!(CURRENT.get(), Some(Cred::ROOT));
            let e = act_as(&Cred::new(78, u32::MAX, &[])).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EPERM));
            assert_eq!((fsuid(), fsgid()), (0, 0));
            // And the thread works on.
            let _ok = act_as(&Cred::new(5002, 5002, &[])).unwrap();
            assert_eq!(fsuid(), 5002);
        });
    }

    #[test]
    fn a_panic_during_a_call_resets_the_thread() {
        require_root();
        on_thread(|| {
            let r = std::panic::catch_unwind(|| {
                let _acting = act_as(&Cred::new(5003, 5004, &[5005])).unwrap();
                panic!("mid-call");
            });
            assert!(r.is_err());
            assert_eq!((fsuid(), fsgid(), groups()), (0, 0, vec![]));
            assert!(!ACTING.get());
            let _next = act_as(&Cred::new(5006, 5006, &[])).unwrap();
            assert_eq!((fsuid(), groups()), (5006, vec![]));
        });
    }

    #[test]
    fn as_root_is_exact_when_the_identity_is_unknown() {
        require_root();
        on_thread(|| {
            drop(act_as(&Cred::new(5007, 5007, &[])).unwrap());
            CURRENT.set(None);
            assert_eq!(as_root(fsuid), 0);
            assert_eq!(fsuid(), 5007);
        });
    }
}

//! Fault injection: make chosen storage calls fail, panic or stall on
//! purpose, so tests can prove what the server does when the disk fails or
//! hangs: the write verifier changes, clients are told, the worker thread
//! recovers, calls queued behind a stalled one go on.
//!
//! Faults are armed at run time (the administration socket does it for a
//! running server, when its configuration allows) and each fires a bounded
//! number of times. With nothing armed a check is one atomic load.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Where in the storage layer a fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// The pwrite of a WRITE (any stability).
    Pwrite,
    /// Any fsync of a file or directory (COMMIT, stable metadata changes).
    Fsync,
}

/// What happens when a fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// The call fails with this errno, as if the device had reported it.
    Fail(i32),
    /// The worker thread panics in the middle of the call.
    Panic,
    /// The call waits this many milliseconds, as on a device that hangs,
    /// then goes on.
    Stall(u32),
}

/// One armed fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub point: FaultPoint,
    /// Only calls on this inode number; `None`: any object.
    pub inode: Option<u64>,
    pub action: FaultAction,
    /// How many more times it strikes.
    pub count: u32,
}

/// Armed faults at most; arming more is refused.
pub const FAULTS_ARMED_MAX: usize = 64;

#[derive(Default)]
pub struct FaultInjector {
    armed: AtomicUsize,
    faults: Mutex<Vec<Fault>>,
}

impl FaultInjector {
    /// Arms `fault`. Fails when [`FAULTS_ARMED_MAX`] are armed already.
    pub fn arm(&self, fault: Fault) -> Result<(), String> {
        if fault.count == 0 {
            return Err("a fault must strike at least once (count >= 1)".into());
        }
        let mut faults = self.faults.lock().expect("fault lock");
        if faults.len() >= FAULTS_ARMED_MAX {
            return Err(format!("{FAULTS_ARMED_MAX} faults are armed already; clear some first"));
        }
        faults.push(fault);
        self.armed.store(faults.len(), Ordering::Release);
        Ok(())
    }

    /// Disarms every fault; returns how many were armed.
    pub fn clear(&self) -> usize {
        let mut faults = self.faults.lock().expect("fault lock");
        let n = faults.len();
        faults.clear();
        self.armed.store(0, Ordering::Release);
        n
    }

    /// The faults armed now.
    pub fn armed(&self) -> Vec<Fault> {
        self.faults.lock().expect("fault lock").clone()
    }

    /// Strikes the first armed fault at `point` for the object whose inode
    /// number `inode` gives (asked only when a fault is armed), if any: the
    /// errno to fail with. Panics for [`FaultAction::Panic`].
    pub(crate) fn strike(&self, point: FaultPoint, inode: impl FnOnce() -> u64) -> Option<i32> {
        if self.armed.load(Ordering::Acquire) == 0 {
            return None;
        }
        let inode = inode();
        let action = {
            let mut faults = self.faults.lock().expect("fault lock");
            let i = faults.iter().position(|f| f.point == point && f.inode.is_none_or(|i| i == inode))?;
            let action = faults[i].action;
            faults[i].count -= 1;
            if faults[i].count == 0 {
                faults.remove(i);
                self.armed.store(faults.len(), Ordering::Release);
            }
            action
        };
        tracing::warn!(?point, inode, ?action, "injected fault");
        match action {
            FaultAction::Fail(errno) => Some(errno),
            FaultAction::Panic => panic!("injected panic at {point:?} of inode {inode}"),
            FaultAction::Stall(ms) => {
                std::thread::sleep(std::time::Duration::from_millis(ms.into()));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_strike_their_target_and_count_down() {
        let f = FaultInjector::default();
        assert_eq!(f.strike(FaultPoint::Fsync, || 7), None);
        f.arm(Fault { point: FaultPoint::Fsync, inode: Some(7), action: FaultAction::Fail(libc::EIO), count: 2 })
            .unwrap();
        assert_eq!(f.strike(FaultPoint::Pwrite, || 7), None, "other point");
        assert_eq!(f.strike(FaultPoint::Fsync, || 8), None, "other inode");
        assert_eq!(f.strike(FaultPoint::Fsync, || 7), Some(libc::EIO));
        assert_eq!(f.strike(FaultPoint::Fsync, || 7), Some(libc::EIO));
        assert_eq!(f.strike(FaultPoint::Fsync, || 7), None, "spent");
        assert!(f.armed().is_empty());
    }

    #[test]
    fn arming_is_bounded_and_checked() {
        let f = FaultInjector::default();
        let fault = Fault { point: FaultPoint::Pwrite, inode: None, action: FaultAction::Fail(libc::EIO), count: 1 };
        assert!(f.arm(Fault { count: 0, ..fault }).is_err());
        for _ in 0..FAULTS_ARMED_MAX {
            f.arm(fault).unwrap();
        }
        assert!(f.arm(fault).is_err());
        assert_eq!(f.clear(), FAULTS_ARMED_MAX);
        assert_eq!(f.strike(FaultPoint::Pwrite, || 1), None);
    }

    #[test]
    fn a_panic_fault_panics() {
        let f = FaultInjector::default();
        f.arm(Fault { point: FaultPoint::Pwrite, inode: None, action: FaultAction::Panic, count: 1 }).unwrap();
        assert!(std::panic::catch_unwind(|| f.strike(FaultPoint::Pwrite, || 1)).is_err());
        assert_eq!(f.strike(FaultPoint::Pwrite, || 1), None);
    }
}

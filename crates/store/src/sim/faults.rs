//! What the simulated store can be made to do wrong.

/// Where a fault strikes: a verb (before it changes anything), or any
/// flush to stable storage, whichever verb asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimPoint {
    /// Opening the object a handle names, once its export admitted the
    /// client (the local store's `open_by_handle_at`).
    Open,
    Getattr,
    Setattr,
    Lookup,
    Access,
    Readlink,
    Read,
    /// The data of a WRITE going in (a failure here changes the verifier).
    Write,
    Create,
    Mkdir,
    Symlink,
    Mknod,
    Link,
    Remove,
    Rmdir,
    Rename,
    Readdir,
    /// Any flush: COMMIT, a stable WRITE, the metadata of a change on a
    /// sync export. A failed flush changes the verifier and the data it
    /// was flushing is no longer sure to survive a crash.
    Sync,
}

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimAction {
    /// The call fails with this errno.
    Fail(i32),
    /// WRITE only: part of the data (whole 512-byte sectors from the
    /// start, chosen by the seed) goes in, then the call fails with EIO.
    Torn,
}

/// One armed fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimFault {
    pub point: SimPoint,
    /// Only calls on this object (its fileid); `None`: any.
    pub fileid: Option<u64>,
    pub action: SimAction,
    /// How many more times it strikes.
    pub count: u32,
}

impl SimFault {
    /// Fails the next call at `point` with `errno`.
    pub fn fail(point: SimPoint, errno: i32) -> Self {
        SimFault { point, fileid: None, action: SimAction::Fail(errno), count: 1 }
    }

    pub fn on(self, fileid: u64) -> Self {
        SimFault { fileid: Some(fileid), ..self }
    }

    pub fn times(self, count: u32) -> Self {
        SimFault { count, ..self }
    }
}

/// Faults that strike at random: each call at `point` fails with `errno`
/// with probability `ppm` in a million (drawn from the store's seed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimFaultRate {
    pub point: SimPoint,
    pub ppm: u32,
    pub action: SimAction,
}

/// The armed faults and rates.
#[derive(Debug, Default)]
pub(super) struct Faults {
    pub armed: Vec<SimFault>,
    pub rates: Vec<SimFaultRate>,
    /// Faults that struck, for the test that asked for them.
    pub struck: u64,
}

impl Faults {
    /// The fault striking a call at `point` on `fileid`, if any.
    pub fn strike(&mut self, point: SimPoint, fileid: u64, rng: &mut super::rng::Rng) -> Option<SimAction> {
        if let Some(i) = self.armed.iter().position(|f| f.point == point && f.fileid.is_none_or(|id| id == fileid)) {
            let action = self.armed[i].action;
            self.armed[i].count -= 1;
            if self.armed[i].count == 0 {
                self.armed.remove(i);
            }
            self.struck += 1;
            return Some(action);
        }
        for r in &self.rates {
            if r.point == point && rng.chance_ppm(r.ppm) {
                self.struck += 1;
                return Some(r.action);
            }
        }
        None
    }
}

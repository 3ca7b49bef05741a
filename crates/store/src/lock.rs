//! Byte-range locks through the store: what the lock manager (NLM) needs.
//!
//! A [`LockFile`] is one open file description of a regular file that
//! holds byte-range locks, as Linux's open file description (OFD) locks
//! do: locks of one description never conflict with each other (a new one
//! replaces, splits or merges what the description held over its range),
//! locks of different descriptions conflict when they overlap and one of
//! them is exclusive, and closing the description (dropping it) releases
//! every lock it held. A lock manager keeps one per lock owner and file.
//!
//! None of these calls waits: a conflict is reported, and the caller
//! decides whether to try again later.

use crate::{StoreError, StoreResult};

/// Shared (read) or exclusive (write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockKind {
    Shared,
    Exclusive,
}

impl LockKind {
    /// Whether locks of these kinds, held through different descriptions
    /// over overlapping ranges, exclude each other: unless both are shared.
    pub fn conflicts_with(self, other: LockKind) -> bool {
        self == LockKind::Exclusive || other == LockKind::Exclusive
    }
}

/// `len` bytes from `start`; `len == 0` means to the end of the file and
/// beyond, as in NLM and fcntl.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockRange {
    pub start: u64,
    pub len: u64,
}

/// Largest offset a lock can name (`off_t`'s maximum).
pub const LOCK_OFFSET_MAX: u64 = i64::MAX as u64;

impl LockRange {
    pub fn new(start: u64, len: u64) -> Self {
        LockRange { start, len }
    }

    /// The last byte covered, inclusive (`LOCK_OFFSET_MAX` for "to the
    /// end"); a range that would end past `LOCK_OFFSET_MAX` runs to the
    /// end, as the Linux NLM client and knfsd read it.
    pub fn end(&self) -> u64 {
        if self.len == 0 {
            return LOCK_OFFSET_MAX;
        }
        self.start.saturating_add(self.len - 1).min(LOCK_OFFSET_MAX)
    }

    /// EFBIG for a start past [`LOCK_OFFSET_MAX`]: no lock can begin there.
    pub fn check(&self) -> StoreResult<()> {
        if self.start > LOCK_OFFSET_MAX {
            return Err(StoreError::errno(libc::EFBIG));
        }
        Ok(())
    }

    /// The length fcntl(2) is given: 0 ("to the end") for a range that
    /// runs to [`LOCK_OFFSET_MAX`] or past it.
    pub fn fcntl_len(&self) -> u64 {
        if self.end() == LOCK_OFFSET_MAX { 0 } else { self.len }
    }

    pub fn overlaps(&self, other: &LockRange) -> bool {
        self.start <= other.end() && other.start <= self.end()
    }

    /// The range with `start..=end`.
    pub fn from_ends(start: u64, end: u64) -> Self {
        if end >= LOCK_OFFSET_MAX { LockRange { start, len: 0 } } else { LockRange { start, len: end - start + 1 } }
    }
}

/// One lock as a lock manager's bookkeeping mirrors the kernel's: whose
/// it is (where one list holds several holders' locks), its kind and its
/// inclusive ends (`end` as [`LockRange::end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldLock<W> {
    pub whose: W,
    pub kind: LockKind,
    pub start: u64,
    pub end: u64,
}

impl<W> HeldLock<W> {
    pub fn range(&self) -> LockRange {
        LockRange::from_ends(self.start, self.end)
    }
}

/// Takes `start..=end` out of `whose`'s locks in `held`, splitting those
/// that reach past it, as the kernel does with a description's own.
pub fn cut<W: Copy + PartialEq>(held: &mut Vec<HeldLock<W>>, whose: W, start: u64, end: u64) {
    let mut kept = Vec::with_capacity(held.len() + 1);
    for h in held.drain(..) {
        if h.whose != whose || h.end < start || end < h.start {
            kept.push(h);
            continue;
        }
        if h.start < start {
            kept.push(HeldLock { end: start - 1, ..h });
        }
        if end < h.end {
            kept.push(HeldLock { start: end + 1, ..h });
        }
    }
    *held = kept;
}

/// A lock held through another description that stands in the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockConflict {
    pub kind: LockKind,
    pub range: LockRange,
}

/// One open file description holding byte-range locks (see the module
/// documentation). Dropping it releases its locks.
pub trait LockFile: Send + Sync + 'static {
    /// Takes `kind` over `range` unless a lock of another description
    /// conflicts: `Ok(None)` when taken, the conflict otherwise. EFBIG for
    /// a start past [`LOCK_OFFSET_MAX`].
    fn try_lock(&self, kind: LockKind, range: LockRange) -> StoreResult<Option<LockConflict>>;

    /// What `try_lock` would run into, changing nothing.
    fn test(&self, kind: LockKind, range: LockRange) -> StoreResult<Option<LockConflict>>;

    /// Releases what this description holds over `range`.
    fn unlock(&self, range: LockRange) -> StoreResult<()>;
}

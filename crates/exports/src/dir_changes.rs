//! Whether a change of a directory was the only one in flight: the
//! atomicity that NFSv3's wcc data and NFSv4's `change_info4` claim.
//!
//! A client that is told "the directory went from `before` to `after` by
//! this change alone" keeps its cached names and permissions of the
//! directory (the Linux client checks `before` against what it holds);
//! told nothing, it looks everything up again. knfsd can say it because it
//! holds the directory's inode lock around the attributes and the change.
//! A user-space server cannot lock a directory, so Keel claims it for a
//! change through which no other change of the same directory, by any
//! protocol, started or was still running. A change made meanwhile by a
//! local process of the server's host is not seen (as with any cached
//! attribute, the client's attribute timeout catches it up).

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::sync::Mutex;

use keel_store::Object;

/// Directory changes in flight, by directory.
#[derive(Default)]
pub struct DirChanges {
    /// Keyed by a hash of the directory's [`Object::file_key`]: two
    /// directories sharing a hash only look like overlapping changes.
    in_flight: Mutex<HashMap<u64, InFlight>>,
}

#[derive(Default)]
struct InFlight {
    running: u32,
    /// Changes started since the directory last had none running.
    started: u64,
}

/// One change of a directory, from before its `before` attributes are read
/// to after its `after` ones are. Dropped without [`DirChange::end`] (an
/// early error return), it just ends.
pub struct DirChange<'a> {
    table: &'a DirChanges,
    key: u64,
    alone_at_start: bool,
    started_as: u64,
    ended: bool,
}

impl DirChanges {
    /// A change of `dir` starts: call before reading its `before` attributes.
    pub fn begin(&self, dir: &impl Object) -> DirChange<'_> {
        let mut h = DefaultHasher::new();
        h.write(dir.file_key());
        let key = h.finish();
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let entry = in_flight.entry(key).or_default();
        let alone_at_start = entry.running == 0;
        entry.running += 1;
        entry.started += 1;
        DirChange { table: self, key, alone_at_start, started_as: entry.started, ended: false }
    }

    /// Directories with changes in flight now (at most the calls
    /// running): for tests.
    pub fn in_flight(&self) -> usize {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl DirChange<'_> {
    /// The change ends: call after reading its `after` attributes. Whether
    /// no other change of the directory through this server overlapped it
    /// (none was running when it started, none started since).
    pub fn end(mut self) -> bool {
        self.finish()
    }

    fn finish(&mut self) -> bool {
        self.ended = true;
        let mut in_flight = self.table.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = in_flight.get_mut(&self.key) else { return false };
        let alone = self.alone_at_start && entry.started == self.started_as;
        entry.running -= 1;
        if entry.running == 0 {
            in_flight.remove(&self.key);
        }
        alone
    }
}

impl Drop for DirChange<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use keel_store::FileType;

    #[derive(Clone)]
    struct Dir(Bytes);

    impl Object for Dir {
        fn handle(&self) -> &Bytes {
            &self.0
        }
        fn export_id(&self) -> u32 {
            1
        }
        fn file_type(&self) -> FileType {
            FileType::Directory
        }
    }

    #[test]
    fn a_change_alone_is_atomic_and_one_after_another_too() {
        let changes = DirChanges::default();
        let d = Dir(Bytes::from_static(b"d"));
        assert!(changes.begin(&d).end());
        assert!(changes.begin(&d).end());
        assert_eq!(changes.in_flight(), 0);
    }

    #[test]
    fn overlapping_changes_of_one_directory_are_neither_atomic() {
        let changes = DirChanges::default();
        let d = Dir(Bytes::from_static(b"d"));
        // B starts while A runs and ends after A.
        let a = changes.begin(&d);
        let b = changes.begin(&d);
        assert!(!a.end(), "another change started while it ran");
        assert!(!b.end(), "another change was running when it started");
        // C starts and ends inside D.
        let d1 = changes.begin(&d);
        let c = changes.begin(&d);
        assert!(!c.end());
        assert!(!d1.end());
        assert_eq!(changes.in_flight(), 0);
    }

    #[test]
    fn changes_of_other_directories_do_not_overlap() {
        let changes = DirChanges::default();
        let (d, e) = (Dir(Bytes::from_static(b"d")), Dir(Bytes::from_static(b"e")));
        let a = changes.begin(&d);
        assert!(changes.begin(&e).end());
        assert!(a.end());
    }

    #[test]
    fn a_change_dropped_without_ending_ends() {
        let changes = DirChanges::default();
        let d = Dir(Bytes::from_static(b"d"));
        drop(changes.begin(&d));
        assert_eq!(changes.in_flight(), 0);
        assert!(changes.begin(&d).end());
    }
}

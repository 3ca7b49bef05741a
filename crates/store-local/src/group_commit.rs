//! Group commit: calls in flight that must make files durable before they
//! reply share the syncs. A call adds its objects to the next batch; one
//! caller at a time (the leader) syncs a whole batch, each object once,
//! while the others wait; whoever finds no leader leads the next batch. At
//! one call in flight nobody waits. Its other use is the one the store
//! relies on: the syncs of a file's shared writer description are never
//! concurrent, so no sync is told "success" while another sync of the same
//! description was told of the error that lost its data. Directories and
//! new objects do not come here (`LocalStore::commit_objects`). Never a
//! sync of the whole file system.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use keel_store::{StoreError, StoreResult};

pub(crate) struct GroupCommit<K, O> {
    state: Mutex<State<K, O>>,
    batch_done: Condvar,
}

struct State<K, O> {
    /// Objects for the next batch, each once, with the calls waiting on it.
    pending: HashMap<K, (O, Vec<Arc<Ticket>>)>,
    /// The batch that `pending` will be synced in.
    next_batch: u64,
    /// Every batch below this one is synced.
    done_below: u64,
    leading: bool,
}

/// One call's share of a batch: the first error among its objects.
#[derive(Default)]
struct Ticket {
    error: Mutex<Option<i32>>,
}

impl Ticket {
    fn fail(&self, errno: i32) {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(errno);
    }
}

impl<K: Hash + Eq + Clone, O: Clone> GroupCommit<K, O> {
    pub(crate) fn new() -> Self {
        GroupCommit {
            state: Mutex::new(State { pending: HashMap::new(), next_batch: 0, done_below: 0, leading: false }),
            batch_done: Condvar::new(),
        }
    }

    /// Returns once every object of `objects` was synced by `sync_one`
    /// after this call began; the error is the first of its objects'
    /// (as an errno: a sync shared by several calls fails for all of them).
    pub(crate) fn sync(&self, objects: &[(K, O)], sync_one: impl Fn(&O) -> StoreResult<()>) -> StoreResult<()> {
        if objects.is_empty() {
            return Ok(());
        }
        // Leader or follower, this thread waits for the disk.
        keel_store::blocking::may_block();
        let ticket = Arc::new(Ticket::default());
        let mut st = self.lock();
        for (key, object) in objects {
            st.pending.entry(key.clone()).or_insert_with(|| (object.clone(), Vec::new())).1.push(ticket.clone());
        }
        let batch = st.next_batch;
        while st.done_below <= batch {
            if st.leading {
                st = self.batch_done.wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            // No leader: the batch now pending (ours, or a later one that
            // holds ours if ours never started) is this thread's to sync.
            st.leading = true;
            let objects = std::mem::take(&mut st.pending);
            let id = st.next_batch;
            st.next_batch += 1;
            drop(st);
            let mut lead = Leading { group: self, id, objects, finished: false };
            for (object, tickets) in lead.objects.values() {
                if let Err(e) = sync_one(object) {
                    let errno = e.raw_os_error().unwrap_or(libc::EIO);
                    tickets.iter().for_each(|t| t.fail(errno));
                }
            }
            lead.finished = true;
            drop(lead);
            st = self.lock();
        }
        drop(st);
        match *ticket.error.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(errno) => Err(StoreError::errno(errno)),
            None => Ok(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K, O>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Ends a batch, also when a sync panicked, so that its waiters do not
/// wait for ever; a batch cut short fails every call in it (EIO), since
/// some of their objects may not be synced.
struct Leading<'a, K, O> {
    group: &'a GroupCommit<K, O>,
    id: u64,
    objects: HashMap<K, (O, Vec<Arc<Ticket>>)>,
    finished: bool,
}

impl<K, O> Drop for Leading<'_, K, O> {
    fn drop(&mut self) {
        if !self.finished {
            self.objects.values().flat_map(|(_, tickets)| tickets).for_each(|t| t.fail(libc::EIO));
        }
        let mut st = self.group.state.lock().unwrap_or_else(|p| p.into_inner());
        st.done_below = self.id + 1;
        st.leading = false;
        drop(st);
        self.group.batch_done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn alone_a_call_syncs_its_own_objects_once_each() {
        let group = GroupCommit::new();
        let synced = Mutex::new(Vec::new());
        group
            .sync(&[(1, "dir"), (2, "file"), (1, "dir")], |o| {
                synced.lock().unwrap().push(*o);
                Ok(())
            })
            .unwrap();
        let mut synced = synced.into_inner().unwrap();
        synced.sort();
        assert_eq!(synced, ["dir", "file"]);
    }

    #[test]
    fn concurrent_calls_share_a_directory_sync() {
        let group = GroupCommit::new();
        let dir_syncs = AtomicUsize::new(0);
        let file_syncs = AtomicUsize::new(0);
        let calls = 8;
        let start = Barrier::new(calls);
        std::thread::scope(|s| {
            for i in 0..calls {
                let (group, start, dir_syncs, file_syncs) = (&group, &start, &dir_syncs, &file_syncs);
                s.spawn(move || {
                    start.wait();
                    group
                        .sync(&[(0, 0), (i + 1, i + 1)], |o| {
                            // A slow device: later calls pile up behind.
                            std::thread::sleep(Duration::from_millis(20));
                            if *o == 0 { dir_syncs } else { file_syncs }.fetch_add(1, Ordering::SeqCst);
                            Ok(())
                        })
                        .unwrap();
                });
            }
        });
        assert_eq!(file_syncs.load(Ordering::SeqCst), calls, "every file synced");
        let dirs = dir_syncs.load(Ordering::SeqCst);
        assert!(dirs < calls, "the directory was synced {dirs} times for {calls} calls");
    }

    #[test]
    fn a_failed_sync_fails_every_call_that_shares_the_object_and_no_other() {
        let group = GroupCommit::new();
        let start = Barrier::new(3);
        let results: Vec<StoreResult<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = [[(0, "bad"), (1, "a")], [(0, "bad"), (2, "b")], [(3, "c"), (4, "d")]]
                .into_iter()
                .map(|objects| {
                    let (group, start) = (&group, &start);
                    s.spawn(move || {
                        start.wait();
                        group.sync(&objects, |o| {
                            std::thread::sleep(Duration::from_millis(5));
                            if *o == "bad" { Err(StoreError::errno(libc::EIO)) } else { Ok(()) }
                        })
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(results[0].as_ref().unwrap_err().raw_os_error(), Some(libc::EIO));
        assert_eq!(results[1].as_ref().unwrap_err().raw_os_error(), Some(libc::EIO));
        assert!(results[2].is_ok());
    }

    #[test]
    fn a_panicking_sync_fails_its_batch_and_leaves_nobody_waiting() {
        let group = GroupCommit::new();
        let (entered, release) = (Barrier::new(2), Barrier::new(2));
        let (panicked, follower) = std::thread::scope(|s| {
            let leader = s.spawn(|| {
                group.sync(&[(0, 0)], |_| {
                    entered.wait();
                    release.wait();
                    panic!("sync panicked")
                })
            });
            entered.wait();
            // Joins the next batch while the leader is inside its sync.
            let follower = s.spawn(|| group.sync(&[(1, 1)], |_| Ok(())));
            while group.lock().pending.is_empty() {
                std::thread::sleep(Duration::from_millis(1));
            }
            release.wait();
            (leader.join().is_err(), follower.join().unwrap())
        });
        assert!(panicked);
        assert!(follower.is_ok(), "the next batch runs: {follower:?}");
        // A batch cut short by a panic fails every call in it: A and B
        // share batch 1 (batch 0 holds them back); whichever leads it
        // panics on "x", and the other must not hear that its sync ran.
        let group = GroupCommit::new();
        let (entered, release) = (Barrier::new(2), Barrier::new(2));
        let outcomes = std::thread::scope(|s| {
            let first = s.spawn(|| {
                group.sync(&[(0, "first")], |_| {
                    entered.wait();
                    release.wait();
                    Ok(())
                })
            });
            entered.wait();
            let sync_one = |o: &&str| if *o == "x" { panic!("sync panicked") } else { Ok(()) };
            let group = &group;
            let a = s.spawn(move || group.sync(&[(1, "x")], sync_one));
            let b = s.spawn(move || group.sync(&[(2, "y")], sync_one));
            while group.lock().pending.len() < 2 {
                std::thread::sleep(Duration::from_millis(1));
            }
            release.wait();
            first.join().unwrap().unwrap();
            [a.join(), b.join()]
        });
        let panics = outcomes.iter().filter(|o| o.is_err()).count();
        let eio = outcomes.iter().filter(|o| matches!(o, Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO))).count();
        assert_eq!((panics, eio), (1, 1), "one leader panicked, the other call failed");
        group.sync(&[(2, "after")], |_| Ok(())).unwrap();
    }
}

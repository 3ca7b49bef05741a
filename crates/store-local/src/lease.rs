//! Read leases as Linux file leases (`fcntl(F_SETLEASE, F_RDLCK)`), each
//! on a read-only open file description of its own, as knfsd backs a read
//! delegation with a kernel lease: a local process (or another file
//! server) that opens the file for writing or truncates it breaks the
//! lease and waits in the kernel until the lease is dropped, or for
//! `/proc/sys/fs/lease-break-time` at most. The store's own descriptions
//! open for writing stand in the way too, until it lets go of them
//! (`LocalStore::read_lease`).
//!
//! Write leases (`F_WRLCK`), which any other open of the file breaks (for
//! reading too), can be had only on the one open file description of the
//! file in the whole system: the store's own cached one (an [`Inode`]'s,
//! which it reads and writes the file through, so that its own I/O does
//! not break it), when that one is open for writing (the file was created
//! through the store since it was cached). Any other description the
//! store holds (its writer, a synchronous writer, a lock description)
//! stands in the way (EAGAIN), and opening one later breaks the lease, as
//! a local process's open does (synchronous writes go through the leased
//! description while it is). The store's own accesses on behalf of
//! others go through that description unseen: the caller recalls first.
//!
//! The kernel tells a lease's holder of a break with SIGIO, whose default
//! action ends the process: the store ignores SIGIO before it takes its
//! first lease, and a holder asks [`ReadLease::is_broken`] (F_GETLEASE,
//! which answers the kind the lease is being downgraded to while it
//! breaks) instead. The store's own opens for writing pass O_NONBLOCK, so
//! they fail with EAGAIN rather than wait on a lease of its own.
//!
//! A lease is not broken by what changes a file's attributes or names
//! (chmod, chown, utimes, a hard link, rename, unlink), which knfsd's
//! delegations are: each leased file is watched with inotify too
//! ([`Watches`], one instance for the process), and such a change reports
//! the lease broken as a break does. A file that cannot be watched (past
//! `/proc/sys/fs/inotify/max_user_watches`) gets no lease.
//!
//! The lease's holder changing the file through the store (its own
//! SETATTR, RENAME, LINK, REMOVE: RFC 8881 section 10.4 recalls a
//! delegation for others' conflicting accesses, and knfsd does not break
//! a lease for the client that holds it) is not a break: the caller
//! brackets the store's verb with [`ReadLease::holder_change_begins`] and
//! [`ReadLease::holder_change_ends`] on the same thread, the store counts
//! the watch's events right after its own change ([`own_change_made`]),
//! and the events up to that count are the holder's, unless the file had
//! changed before the verb began. One that comes after the count is
//! anyone's: a local process's chmod a moment later still breaks the
//! lease (inotify merges an event into the last unread one only if they
//! are the same, and the queue is read right after the change). A change
//! by someone else between the store's system call and that count (a few
//! microseconds) passes for the holder's.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use keel_store::{FileType, ReadLease, StoreError, StoreResult};

use crate::inode::Inode;
use crate::locks::{LentDescription, LentSlot};
use crate::{ident, sys};

/// Where Linux says how long a lease breaker waits.
const LEASE_BREAK_TIME_PATH: &str = "/proc/sys/fs/lease-break-time";
/// Linux's default, if that cannot be read.
const LEASE_BREAK_TIME_DEFAULT: Duration = Duration::from_secs(45);

/// What a change to a leased file by anyone shows as in inotify: its
/// attributes (mode, owners, times, ACLs and xattrs, and its link count:
/// a hard link made, an unlink, a rename over it), its name (a rename of
/// it), its end, and its data (which a lease keeps from changing anyway).
const WATCHED: u32 = libc::IN_ATTRIB | libc::IN_MOVE_SELF | libc::IN_DELETE_SELF | libc::IN_MODIFY;

/// Bytes read from the inotify instance at once (some hundred events).
const EVENTS_BUF_BYTES: usize = 4096;

/// What a change to a write-leased file shows as: [`WATCHED`] but its
/// data, which only the lease's holder can change (anyone else would have
/// to open the file, breaking the lease), through the lease's own
/// description.
const WATCHED_WRITE_LEASED: u32 = WATCHED & !libc::IN_MODIFY;

/// A read lease on a description of its own, or a write lease on the
/// store's own description of the file, and the inotify watch on its
/// file; released when dropped.
#[derive(Debug)]
pub struct LocalReadLease {
    on: LeasedDescription,
    /// F_RDLCK or F_WRLCK.
    kind: libc::c_int,
    watch: Watch,
    /// The inode's count of lock descriptions.
    lock_files: Arc<AtomicUsize>,
    /// Its description as lent for locks
    /// ([`LocalReadLease::lend_for_locks`]).
    lent: LentSlot,
}

#[derive(Debug)]
enum LeasedDescription {
    /// A read lease's own.
    Own(OwnedFd),
    /// A write lease's: the cached inode's, kept open while the lease is.
    Store(Arc<Inode>),
}

impl LeasedDescription {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            LeasedDescription::Own(fd) => fd.as_fd(),
            LeasedDescription::Store(inode) => inode.fd(),
        }
    }
}

impl LocalReadLease {
    /// A read lease on `inode`: EAGAIN if anyone has the file open for
    /// writing, the store included; EINVAL for anything but a regular file
    /// or where the file system takes no leases.
    pub(crate) fn take(inode: &Inode) -> StoreResult<Self> {
        can_lease(inode)?;
        // Not blocking: another's write lease would make the open wait.
        let fd = inode.open_description(libc::O_RDONLY | libc::O_NONBLOCK)?;
        // Watched before the lease is taken: no change after it is missed.
        let watch = Watch::add(fd.as_fd(), WATCHED)?;
        let on = LeasedDescription::Own(fd);
        set_lease_as_owner(&on, libc::F_RDLCK)?;
        Ok(LocalReadLease::new(on, libc::F_RDLCK, watch, inode))
    }

    /// A write lease on `inode`'s own description: EAGAIN unless that one
    /// is open for writing and is the file's only open description (the
    /// store's writer or lock descriptions, a read lease's, a local
    /// process's stand in the way); EINVAL as [`LocalReadLease::take`].
    pub(crate) fn take_write(inode: &Arc<Inode>) -> StoreResult<Self> {
        can_lease(inode)?;
        if !inode.fd_writable() {
            // A lease on a read-only description would be broken by the
            // store's own first write (its writer's open).
            return Err(StoreError::errno(libc::EAGAIN));
        }
        // One kept from the file's creation (a synchronous commit) would
        // stand in the way.
        inode.close_idle_sync_writers();
        let on = LeasedDescription::Store(inode.clone());
        let before = sys::fstat(on.fd())?;
        set_lease_as_owner(&on, libc::F_WRLCK)?;
        // Watched once the lease is had, not before: inotify keeps one
        // mask per file, and a read lease's watch on it (whose lease
        // stands in the way of this one) would lose IN_MODIFY.
        let watch = match Watch::add(on.fd(), WATCHED_WRITE_LEASED) {
            Ok(watch) => watch,
            Err(e) => {
                let _ = set_lease_as_owner(&on, libc::F_UNLCK);
                return Err(e);
            }
        };
        let lease = LocalReadLease::new(on, libc::F_WRLCK, watch, inode);
        // A change between the lease and the watch is not missed: every
        // one the watch looks for changes the file's ctime.
        let after = sys::fstat(lease.on.fd())?;
        if (after.st_ctime, after.st_ctime_nsec) != (before.st_ctime, before.st_ctime_nsec) {
            return Err(StoreError::errno(libc::EAGAIN));
        }
        inode.set_write_leased(true);
        Ok(lease)
    }
}

impl LocalReadLease {
    fn new(on: LeasedDescription, kind: libc::c_int, watch: Watch, inode: &Inode) -> Self {
        let lock_files = inode.lock_files().clone();
        let lent = match &on {
            LeasedDescription::Own(_) => LentSlot::default(),
            LeasedDescription::Store(inode) => inode.fd_lent_for_locks().clone(),
        };
        LocalReadLease { on, kind, watch, lock_files, lent }
    }

    /// A lock description on the lease's own description (see
    /// `Store::lock_file_on_lease`), counted in `store_count` and the
    /// inode's: a write lease's is open for writing, a read lease's for
    /// reading only. Each one lent is a lock owner's: the description
    /// holds all their locks, and the store arbitrates among them
    /// (`locks.rs`).
    pub(crate) fn lend_for_locks(&self, store_count: &Arc<AtomicUsize>) -> StoreResult<crate::LocalLockFile> {
        let shared = LentDescription::join(&self.lent, || self.on.fd().try_clone_to_owned())?;
        let writable = self.kind == libc::F_WRLCK;
        let open = [store_count.clone(), self.lock_files.clone()];
        Ok(crate::LocalLockFile::lent(shared, writable, open))
    }

    /// Sets the file's modification time (and so its change time) to now
    /// through a write lease's description, as root (for the lease's
    /// holder, whatever the caller may do). Not a break of the lease: a
    /// change of the modification time alone shows in inotify as
    /// IN_MODIFY (a change of data), which only the holder can make and
    /// the write lease's watch does not look for ([`WATCHED_WRITE_LEASED`]).
    /// EINVAL on a read lease, whose watch does.
    pub(crate) fn touch_modified(&self) -> StoreResult<()> {
        if self.kind != libc::F_WRLCK {
            return Err(StoreError::errno(libc::EINVAL));
        }
        let now = libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW };
        let keep = libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT };
        ident::as_root(|| sys::set_times(self.on.fd(), &[keep, now]))?;
        Ok(())
    }
}

/// Leases are for regular files, once SIGIO is ignored.
fn can_lease(inode: &Inode) -> StoreResult<()> {
    if inode.ftype != FileType::Regular {
        return Err(StoreError::errno(libc::EINVAL));
    }
    static SIGIO_IGNORED: OnceLock<std::io::Result<()>> = OnceLock::new();
    if let Err(e) = SIGIO_IGNORED.get_or_init(sys::ignore_sigio) {
        // Without it a break would end the process.
        return Err(std::io::Error::new(e.kind(), e.to_string()).into());
    }
    Ok(())
}

/// The file's owner may take a lease without CAP_LEASE (which Keel does
/// not ask for): the fsuid is the owner's while it does.
fn set_lease_as_owner(on: &LeasedDescription, kind: libc::c_int) -> StoreResult<()> {
    let owner = sys::fstat(on.fd())?.st_uid;
    ident::as_fsuid(owner, || sys::set_lease(on.fd(), kind))?;
    Ok(())
}

impl ReadLease for LocalReadLease {
    fn is_broken(&self) -> bool {
        // The events of a change of its holder's in progress are not
        // looked at until it ends (`holder_change_ends`).
        let watched = self.watch.events.holder_changes.load(Ordering::Acquire) == 0 && self.watch.changed();
        // An error says nothing good about the lease either (while it
        // breaks, F_GETLEASE answers the kind it goes down to).
        watched || sys::get_lease(self.on.fd()).map_or(true, |k| k != self.kind)
    }

    fn holder_change_begins(&self) {
        let events = &self.watch.events;
        events.holder_changes.fetch_add(1, Ordering::AcqRel);
        let _ = Watches::with(Watches::drain);
        let changed_before = events.changed();
        HOLDER_CHANGES.with(|h| {
            h.borrow_mut().push(HolderChange { events: events.clone(), changed_before, own_upto: None });
        });
    }

    fn holder_change_ends(&self) {
        let events = &self.watch.events;
        let change = HOLDER_CHANGES.with(|h| {
            let mut h = h.borrow_mut();
            let at = h.iter().rposition(|c| Arc::ptr_eq(&c.events, events))?;
            Some(h.remove(at))
        });
        let _ = Watches::with(Watches::drain);
        // Absorbed only if nothing came after the store's own change.
        if let Some(HolderChange { changed_before: false, own_upto: Some(upto), .. }) = change
            && events.seen.load(Ordering::Acquire) == upto
        {
            events.holders.fetch_max(upto, Ordering::AcqRel);
        }
        events.holder_changes.fetch_sub(1, Ordering::AcqRel);
    }

    fn break_wait(&self) -> Duration {
        std::fs::read_to_string(LEASE_BREAK_TIME_PATH)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map_or(LEASE_BREAK_TIME_DEFAULT, Duration::from_secs)
    }
}

impl Drop for LocalReadLease {
    fn drop(&mut self) {
        // Closing the description would release it too, but the
        // description may outlive the lease (a write lease's is the cached
        // inode's, a lent lock description shares either kind's). The
        // kernel lets only the file's owner (or CAP_LEASE, which Keel does
        // not hold) release a lease, as take it: the thread dropping it
        // runs as whichever client called.
        if let Err(e) = set_lease_as_owner(&self.on, libc::F_UNLCK) {
            tracing::warn!(error = %e, "a lease could not be released: it ends with its description");
        }
        if let LeasedDescription::Store(inode) = &self.on {
            inode.set_write_leased(false);
        }
    }
}

/// A holder's change of its leased file in progress on this thread.
struct HolderChange {
    events: Arc<WatchEvents>,
    /// The file had changed before it began: a break, whatever follows.
    changed_before: bool,
    /// The count of events right after the store's own change.
    own_upto: Option<u64>,
}

thread_local! {
    /// The changes in progress on this thread, made by the store for the
    /// holders of these leases ([`ReadLease::holder_change_begins`]).
    static HOLDER_CHANGES: RefCell<Vec<HolderChange>> = const { RefCell::new(Vec::new()) };
}

/// Called by the store right after a change of a file's attributes or
/// names it made (the system calls of one verb): if the verb is a lease
/// holder's own change, the events seen until now are the holder's.
pub(crate) fn own_change_made() {
    HOLDER_CHANGES.with(|h| {
        let mut h = h.borrow_mut();
        if h.is_empty() {
            return;
        }
        let _ = Watches::with(Watches::drain);
        for change in h.iter_mut() {
            change.own_upto = Some(change.events.seen.load(Ordering::Acquire));
        }
    });
}

/// The process's inotify instance and the leases watching through it.
#[derive(Debug)]
struct Watches {
    inotify: OwnedFd,
    /// By watch descriptor (one per inode): each lease's events.
    by_wd: HashMap<i32, Vec<Arc<WatchEvents>>>,
}

/// What one lease's watch saw.
#[derive(Debug, Default)]
struct WatchEvents {
    /// Events read for it (one for several the kernel merged).
    seen: AtomicU64,
    /// Events up to this count were its holder's own changes.
    holders: AtomicU64,
    /// Events may have been lost (the queue overflowed or could not be
    /// read): never the holder's.
    lost: AtomicBool,
    /// The holder's changes in progress, during which the events are not
    /// looked at.
    holder_changes: AtomicUsize,
}

impl WatchEvents {
    fn mark(&self) {
        self.seen.fetch_add(1, Ordering::AcqRel);
    }

    fn mark_lost(&self) {
        self.lost.store(true, Ordering::Release);
        self.mark();
    }

    fn changed(&self) -> bool {
        self.lost.load(Ordering::Acquire) || self.seen.load(Ordering::Acquire) > self.holders.load(Ordering::Acquire)
    }
}

impl Watches {
    /// Runs `f` on the instance, made on first use (tried again on the
    /// next lease if it cannot be had: no lease is taken meanwhile).
    fn with<T>(f: impl FnOnce(&mut Watches) -> T) -> std::io::Result<T> {
        static WATCHES: Mutex<Option<Watches>> = Mutex::new(None);
        let mut made = WATCHES.lock().unwrap_or_else(|e| e.into_inner());
        let mut watches = match made.take() {
            Some(w) => w,
            None => Watches { inotify: sys::inotify_init()?, by_wd: HashMap::new() },
        };
        let out = f(&mut watches);
        *made = Some(watches);
        Ok(out)
    }

    /// Sets the flags of the watches the waiting events are for: all of
    /// them if the kernel's queue overflowed (events were lost), or if it
    /// cannot be read.
    fn drain(&mut self) {
        let mut buf = [0u8; EVENTS_BUF_BYTES];
        loop {
            let n = match sys::inotify_read(self.inotify.as_fd(), &mut buf) {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "inotify read failed: every read lease counts as broken");
                    self.by_wd.values().flatten().for_each(|w| w.mark_lost());
                    return;
                }
            };
            for (wd, mask) in sys::inotify_events(&buf[..n]) {
                if mask & libc::IN_Q_OVERFLOW != 0 {
                    self.by_wd.values().flatten().for_each(|w| w.mark_lost());
                } else if let Some(watches) = self.by_wd.get(&wd) {
                    watches.iter().for_each(|w| w.mark());
                }
                // The kernel dropped the watch (its inode is gone).
                if mask & libc::IN_IGNORED != 0 {
                    self.by_wd.remove(&wd);
                }
            }
        }
    }
}

/// One lease's watch on its file.
#[derive(Debug)]
struct Watch {
    wd: i32,
    events: Arc<WatchEvents>,
}

impl Watch {
    /// Watches the file behind `fd` for `mask`: an error (ENOSPC past the system's
    /// watch limit) means no lease.
    fn add(fd: std::os::fd::BorrowedFd<'_>, mask: u32) -> StoreResult<Watch> {
        let watch = Watches::with(|watches| {
            // Events from before this watch are not this lease's.
            watches.drain();
            let wd = ident::as_root(|| sys::inotify_watch_fd(watches.inotify.as_fd(), fd, mask))?;
            let events = Arc::new(WatchEvents::default());
            watches.by_wd.entry(wd).or_default().push(events.clone());
            Ok::<_, std::io::Error>(Watch { wd, events })
        })??;
        Ok(watch)
    }

    /// Whether the file's attributes, name or data changed since it was
    /// watched.
    fn changed(&self) -> bool {
        if !self.events.changed() {
            // The instance is there: this watch was made in it.
            let _ = Watches::with(Watches::drain);
        }
        self.events.changed()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = Watches::with(|watches| {
            let Some(flags) = watches.by_wd.get_mut(&self.wd) else { return };
            flags.retain(|f| !Arc::ptr_eq(f, &self.events));
            if flags.is_empty() {
                watches.by_wd.remove(&self.wd);
                // EINVAL: the kernel dropped it already (the inode is gone).
                let _ = sys::inotify_unwatch(watches.inotify.as_fd(), self.wd);
            }
        });
    }
}

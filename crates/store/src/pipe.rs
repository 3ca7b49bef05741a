//! Pipes of file data for READ replies, as knfsd's splice read: a store
//! splices a file range into a pipe (the page cache's pages are referenced,
//! not copied), and the transport splices the pipe on to the socket after
//! the reply's header. The pipes come from a bounded [`PipePool`] and go
//! back to it once sent; this module only holds and reads them (the
//! splicing itself is the store's and the transport's).
//!
//! The pages go out as they are when the socket takes them: a WRITE
//! between the store's splice and the send can show through, as with
//! knfsd's splice reads (the attributes are those of the READ). A store
//! never maps a file instead: a file truncated under a mapping is SIGBUS.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use bytes::{Bytes, BytesMut};

/// An empty pipe: both ends, non-blocking, and what it can hold.
pub struct Pipe {
    read: File,
    write: File,
    capacity: usize,
}

impl Pipe {
    /// The ends of a pipe opened non-blocking, which holds `capacity`
    /// bytes at least (`F_GETPIPE_SZ`), whatever the page offset of the
    /// data spliced into it (so one page less than its size).
    pub fn new(read: OwnedFd, write: OwnedFd, capacity: usize) -> Self {
        Pipe { read: File::from(read), write: File::from(write), capacity }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Makes a pipe for the pool when it has fewer than its bound.
pub type MakePipe = Box<dyn Fn() -> io::Result<Pipe> + Send + Sync>;

/// The pipes of a store, at most `pipes_max` of them made at a time
/// (taken or free). A READ that finds none left copies its data instead.
pub struct PipePool {
    pipes_max: usize,
    /// Pipes made and not closed: free or in a [`FilePipe`].
    made: AtomicUsize,
    free: Mutex<Vec<Pipe>>,
    make: MakePipe,
    counts: PipeCounts,
}

/// What the pool has done, for statistics.
#[derive(Debug, Default)]
struct PipeCounts {
    taken: AtomicU64,
    exhausted: AtomicU64,
    make_failed: AtomicU64,
    discarded: AtomicU64,
}

/// A snapshot of [`PipePool`]'s counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PipePoolCounts {
    /// Pipes made now (free or in use) and the bound.
    pub made: u64,
    pub pipes_max: u64,
    /// Pipes handed out (one per spliced READ; the rare READ whose splice
    /// fails then copies).
    pub taken: u64,
    /// Times none was left: the READ copied.
    pub exhausted: u64,
    /// Pipes that could not be made (or sized): the READ copied.
    pub make_failed: u64,
    /// Pipes closed instead of returned (data left that could not be read).
    pub discarded: u64,
}

impl PipePool {
    pub fn new(pipes_max: usize, make: MakePipe) -> Arc<PipePool> {
        Arc::new(PipePool {
            pipes_max,
            made: AtomicUsize::new(0),
            free: Mutex::new(Vec::with_capacity(pipes_max)),
            make,
            counts: PipeCounts::default(),
        })
    }

    /// Makes pipes until the bound is reached (at start, with the
    /// server's full privileges); the first failure is returned.
    pub fn fill(&self) -> io::Result<()> {
        while self.reserve() {
            match (self.make)() {
                Ok(p) => self.free.lock().expect("pipe pool lock").push(p),
                Err(e) => {
                    self.made.fetch_sub(1, Ordering::SeqCst);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Takes a place for one more pipe, if the bound allows.
    fn reserve(&self) -> bool {
        self.made.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |m| (m < self.pipes_max).then_some(m + 1)).is_ok()
    }

    /// An empty pipe for one READ, or `None` (all in use, or one could not
    /// be made): the caller copies instead.
    pub fn take(self: &Arc<Self>) -> Option<FilePipe> {
        let free = self.free.lock().expect("pipe pool lock").pop();
        let pipe = match free {
            Some(p) => p,
            None if self.reserve() => match (self.make)() {
                Ok(p) => p,
                // Not an error of the call, which copies instead; the
                // counter says so (nothing is logged per call).
                Err(_) => {
                    self.made.fetch_sub(1, Ordering::SeqCst);
                    self.counts.make_failed.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            },
            None => {
                self.counts.exhausted.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        self.counts.taken.fetch_add(1, Ordering::Relaxed);
        Some(FilePipe { pipe: Some(pipe), len: 0, pool: Arc::downgrade(self) })
    }

    fn give_back(&self, pipe: Pipe) {
        self.free.lock().expect("pipe pool lock").push(pipe);
    }

    fn discard(&self, pipe: Pipe) {
        drop(pipe);
        self.made.fetch_sub(1, Ordering::SeqCst);
        self.counts.discarded.fetch_add(1, Ordering::Relaxed);
    }

    pub fn counts(&self) -> PipePoolCounts {
        let c = &self.counts;
        PipePoolCounts {
            made: self.made.load(Ordering::SeqCst) as u64,
            pipes_max: self.pipes_max as u64,
            taken: c.taken.load(Ordering::Relaxed),
            exhausted: c.exhausted.load(Ordering::Relaxed),
            make_failed: c.make_failed.load(Ordering::Relaxed),
            discarded: c.discarded.load(Ordering::Relaxed),
        }
    }
}

/// A pipe of a pool holding `len` bytes of file data, read from it in
/// order. Back to its pool when dropped empty; dropped with data left (a
/// connection closed before its reply went out), it is drained first.
pub struct FilePipe {
    pipe: Option<Pipe>,
    len: usize,
    pool: Weak<PipePool>,
}

impl FilePipe {
    /// Bytes in the pipe.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What it can hold.
    pub fn capacity(&self) -> usize {
        self.pipe().capacity
    }

    fn pipe(&self) -> &Pipe {
        self.pipe.as_ref().expect("a FilePipe holds its pipe until dropped")
    }

    /// The end the data is spliced into (the store's side).
    pub fn write_fd(&self) -> BorrowedFd<'_> {
        self.pipe().write.as_fd()
    }

    /// `n` more bytes were spliced in.
    pub fn filled(&mut self, n: usize) {
        assert!(self.len + n <= self.capacity(), "a pipe of {} bytes holds {} + {n}", self.capacity(), self.len);
        self.len += n;
    }

    /// The end the data is spliced from (the transport's side).
    pub fn read_fd(&self) -> BorrowedFd<'_> {
        self.pipe().read.as_fd()
    }

    /// `n` bytes were spliced out.
    pub fn drained(&mut self, n: usize) {
        assert!(n <= self.len, "{n} bytes taken from a pipe holding {}", self.len);
        self.len -= n;
    }

    /// Reads what is left into memory (for a datagram, a store that
    /// overlays the data, or a reply that cannot be spliced).
    pub fn read_to_bytes(&mut self) -> io::Result<Bytes> {
        let mut buf = BytesMut::zeroed(self.len);
        let mut got = 0;
        while got < buf.len() {
            match (&self.pipe().read).read(&mut buf[got..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    got += n;
                    self.len -= n;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Non-blocking and holding `len` bytes: WouldBlock means
                // the pipe lost data, an error like any other.
                Err(e) => return Err(e),
            }
        }
        Ok(buf.freeze())
    }

    /// Reads what is left onto the end of `out`, which is not zeroed
    /// first (a sealed READ reply is built around its data there).
    pub fn append_to(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        out.reserve(self.len);
        while self.len > 0 {
            let start = out.len();
            let read = (&self.pipe().read).take(self.len as u64).read_to_end(out);
            // What was read stays in `out`, an error or not.
            self.len -= out.len() - start;
            match read {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Non-blocking and holding `len` bytes: WouldBlock means
                // the pipe lost data, an error like any other.
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl fmt::Debug for FilePipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FilePipe({} bytes)", self.len)
    }
}

impl Drop for FilePipe {
    fn drop(&mut self) {
        let drained = self.len == 0 || self.read_to_bytes().is_ok();
        let Some(pipe) = self.pipe.take() else { return };
        match self.pool.upgrade() {
            Some(pool) if drained => pool.give_back(pipe),
            // A page truncated since it was spliced in cannot be read
            // (ENODATA) and stays in the pipe: close it.
            Some(pool) => pool.discard(pipe),
            None => drop(pipe),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// Pipes made with std (blocking, which the tests never block on).
    fn pool(max: usize) -> Arc<PipePool> {
        PipePool::new(
            max,
            Box::new(|| {
                let (r, w) = std::io::pipe()?;
                Ok(Pipe::new(OwnedFd::from(r), OwnedFd::from(w), 4096))
            }),
        )
    }

    fn fill(p: &mut FilePipe, data: &[u8]) {
        let mut w = File::from(p.write_fd().try_clone_to_owned().unwrap());
        w.write_all(data).unwrap();
        p.filled(data.len());
    }

    #[test]
    fn the_pool_is_bounded_and_pipes_come_back_empty() {
        let pool = pool(2);
        let a = pool.take().unwrap();
        let mut b = pool.take().unwrap();
        assert!(pool.take().is_none(), "bound of 2");
        fill(&mut b, b"hello");
        assert_eq!(b.read_to_bytes().unwrap(), &b"hello"[..]);
        drop((a, b));
        let c = pool.counts();
        assert_eq!((c.made, c.taken, c.exhausted, c.discarded), (2, 2, 1, 0));
        assert_eq!(pool.free.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_pipe_dropped_with_data_is_drained_before_it_is_reused() {
        let pool = pool(1);
        let mut p = pool.take().unwrap();
        fill(&mut p, b"left over");
        drop(p);
        let mut p = pool.take().unwrap();
        assert_eq!(p.len(), 0);
        fill(&mut p, b"new");
        assert_eq!(p.read_to_bytes().unwrap(), &b"new"[..]);
        assert_eq!(pool.counts().discarded, 0);
    }

    #[test]
    fn append_to_puts_the_data_after_what_the_buffer_holds() {
        let pool = pool(1);
        let mut p = pool.take().unwrap();
        fill(&mut p, b"spliced data");
        let mut out = b"header|".to_vec();
        p.append_to(&mut out).unwrap();
        assert_eq!(out, b"header|spliced data");
        assert_eq!(p.len(), 0, "nothing left to drain");
        drop(p);
        assert_eq!(pool.counts().discarded, 0);
    }

    #[test]
    fn fill_makes_pipes_up_to_the_bound() {
        let pool = pool(3);
        pool.fill().unwrap();
        assert_eq!(pool.counts().made, 3);
        assert_eq!(pool.free.lock().unwrap().len(), 3);
    }
}

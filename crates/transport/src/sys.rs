//! Every `unsafe` of the transport, its system calls: epoll, an eventfd
//! to wake pollers, a timerfd for the batch watch, reads into a buffer's
//! spare capacity, socket options, sendmsg and splice to sockets, and the
//! thread's id.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// epoll_create1(EPOLL_CLOEXEC).
pub fn epoll_create() -> io::Result<OwnedFd> {
    // SAFETY: epoll_create1 takes a flag and returns a new descriptor or -1.
    let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    // SAFETY: the descriptor was just created and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// epoll_ctl(2): `op` on `fd` with `events`, tagged with `token`.
pub fn epoll_ctl(epoll: BorrowedFd, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: `ev` is a live, initialised epoll_event the kernel reads (and
    // ignores for EPOLL_CTL_DEL); the descriptors are plain integers.
    cvt(unsafe { libc::epoll_ctl(epoll.as_raw_fd(), op, fd, &mut ev) }).map(drop)
}

/// epoll_wait(2) into `events`; the (token, events) pairs that fired.
/// EINTR counts as nothing fired.
pub fn epoll_wait(epoll: BorrowedFd, events: &mut [libc::epoll_event], timeout_ms: i32) -> io::Result<usize> {
    let max = libc::c_int::try_from(events.len()).unwrap_or(libc::c_int::MAX);
    // SAFETY: the kernel writes at most `max` events into the slice, which
    // holds that many.
    match cvt(unsafe { libc::epoll_wait(epoll.as_raw_fd(), events.as_mut_ptr(), max, timeout_ms) }) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

/// A non-blocking eventfd, for waking a thread blocked in epoll_wait.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes an initial value and flags, returns a new fd.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: freshly created, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd's counter (makes it readable).
pub fn eventfd_signal(fd: BorrowedFd) {
    let one: u64 = 1;
    // SAFETY: writes the 8 bytes of a live u64, the size eventfd expects.
    // A full counter (EAGAIN) means it is readable already, which is all
    // the signal is for.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// A non-blocking monotonic timerfd, disarmed.
pub fn timerfd() -> io::Result<OwnedFd> {
    // SAFETY: timerfd_create takes a clock and flags, returns a new fd.
    let fd = cvt(unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK) })?;
    // SAFETY: freshly created, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Arms a timerfd to fire every `period` (the first time one period from
/// now), or disarms it with `None`.
pub fn timerfd_set(fd: BorrowedFd, period: Option<std::time::Duration>) -> io::Result<()> {
    let period = period.unwrap_or_default();
    let every = libc::timespec { tv_sec: period.as_secs() as libc::time_t, tv_nsec: period.subsec_nanos() as _ };
    let spec = libc::itimerspec { it_interval: every, it_value: every };
    // SAFETY: a valid itimerspec; the old value is not asked for.
    cvt(unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) }).map(drop)
}

/// Reads a timerfd's expiry count, which makes it unreadable until it
/// fires again (nothing to read is not an error).
pub fn timerfd_ack(fd: BorrowedFd) {
    let mut count: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live u64.
    unsafe { libc::read(fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
}

/// One non-blocking read(2) from `fd` into the spare capacity of `buf`
/// (at least `min_spare` bytes of it); the bytes read (0 at the end).
pub fn read_into(fd: BorrowedFd, buf: &mut bytes::BytesMut, min_spare: usize) -> io::Result<usize> {
    buf.reserve(min_spare);
    loop {
        let spare = buf.spare_capacity_mut();
        // SAFETY: the kernel writes at most `spare.len()` bytes into the
        // buffer's spare capacity, which is allocated and that long.
        let n = unsafe { libc::read(fd.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
        if n >= 0 {
            let n = n as usize;
            // SAFETY: the kernel initialised the first n bytes of the spare
            // capacity just above.
            unsafe { buf.set_len(buf.len() + n) };
            return Ok(n);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sets the socket's receive low-water mark (SO_RCVLOWAT): epoll reports
/// it readable once `bytes` have arrived, or at the end, an error, or when
/// the receive window has all but closed.
pub fn set_rcvlowat(fd: BorrowedFd, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the kernel reads one int from a live local.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// The socket's receive buffer now (SO_RCVBUF; TCP grows it as it goes).
pub fn rcvbuf(fd: BorrowedFd) -> io::Result<usize> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into a live int.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(value.max(0) as usize)
}

/// One non-blocking sendmsg(2) of `slices` on the socket `fd`; with `more`,
/// MSG_MORE says more of the same reply follows (TCP holds a partial
/// segment back for it). The bytes sent.
pub fn send_vectored(fd: BorrowedFd, slices: &[io::IoSlice], more: bool) -> io::Result<usize> {
    let mut msg = empty_msghdr();
    msg.msg_iov = slices.as_ptr().cast_mut().cast();
    msg.msg_iovlen = slices.len();
    let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    loop {
        // SAFETY: `msg` points to `slices`, whose IoSlices are ABI-compatible
        // with iovec (std guarantees it) and live for the call; no name, no
        // control data. The kernel only reads them.
        let n = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, flags) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn empty_msghdr() -> libc::msghdr {
    // SAFETY: msghdr is plain data (pointers and integers), for which all
    // zeroes is a valid value: no name, no iovecs, no control data.
    unsafe { std::mem::zeroed() }
}

/// One non-blocking splice(2) of up to `count` bytes from the pipe `pipe`
/// to the socket `socket` (the pipe's pages go to the socket, not through
/// user space); with `more`, SPLICE_F_MORE says more of the reply follows.
/// The bytes moved.
pub fn splice_to_socket(pipe: BorrowedFd, socket: BorrowedFd, count: usize, more: bool) -> io::Result<usize> {
    let flags = libc::SPLICE_F_NONBLOCK | if more { libc::SPLICE_F_MORE } else { 0 };
    loop {
        // SAFETY: splice(2) between two live descriptors, with no offsets
        // (both are streams): no memory of ours is read or written.
        let n = unsafe {
            libc::splice(pipe.as_raw_fd(), std::ptr::null_mut(), socket.as_raw_fd(), std::ptr::null_mut(), count, flags)
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The calling thread's id (for /proc/self/task/TID).
pub fn gettid() -> i32 {
    // SAFETY: gettid(2) takes nothing and cannot fail.
    unsafe { libc::gettid() }
}

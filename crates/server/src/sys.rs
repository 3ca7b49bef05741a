//! Every `unsafe` of the server crate: the process-wide system calls made
//! at start, and the state directory's lock. (The file-system calls are
//! in `keel_store_local::sys`.)

/// Sets the file-creation mask to 0: modes from clients are applied
/// exactly (they already carry the client's umask).
pub fn clear_umask() {
    // SAFETY: umask(2) takes a plain integer, cannot fail and touches no
    // memory; it changes only the process's file-creation mask.
    unsafe { libc::umask(0) };
}

/// Raises the soft limit on open descriptors to the hard limit; returns
/// the limit now in effect (1024 if it cannot be read).
pub fn raise_open_file_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit(2) writes one `rlimit` through the pointer, which
    // points to a live, properly aligned local of that type.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        // SAFETY: setrlimit(2) only reads the `rlimit` behind the pointer,
        // a live local; raising the soft limit up to the hard one needs no
        // privilege and affects nothing but this process's limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim = raised;
        }
    }
    lim.rlim_cur
}

/// flock(2) LOCK_EX without waiting: whether the lock was taken (false:
/// another open file description holds it).
pub fn try_lock_exclusive(fd: std::os::fd::BorrowedFd) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock(2) on a live descriptor; it touches no memory.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

// The transport's system calls: epoll, an eventfd to wake pollers, and
// reads into a buffer's spare capacity.

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

/// Ends the process as SIGPIPE ends a program that does not ignore it
/// (`keel stat | head`): quietly, with the status a shell reports as 141.
/// Rust ignores SIGPIPE, so a write to a closed pipe fails with EPIPE
/// instead; the command then comes here.
pub fn die_of_sigpipe() -> ! {
    // SAFETY: restoring a signal's default action and raising it in the
    // calling thread; nothing else runs after.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // Not reached: SIGPIPE's default action ends the process.
    std::process::exit(128 + libc::SIGPIPE)
}

/// The system's user database through NSS (getpwnam_r(3), getgrnam_r(3),
/// getgrouplist(3)), for RPCSEC_GSS's principal-to-user mapping and
/// NFSv4's owner names.
pub struct SystemUsers;

/// Bytes for the strings of one passwd or group entry (a group's member
/// list can be long; an entry that does not fit is not found).
const NSS_ENTRY_BYTES_MAX: usize = 64 << 10;

impl SystemUsers {
    /// User `name`'s uid and primary gid.
    fn passwd(name: &std::ffi::CStr) -> Option<(libc::uid_t, libc::gid_t)> {
        let mut pwd: libc::passwd = unsafe_zeroed_passwd();
        let mut buf = vec![0 as libc::c_char; NSS_ENTRY_BYTES_MAX];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: getpwnam_r(3) writes one `passwd` into `pwd`, its strings
        // into `buf` (whose length it is given) and a pointer to `pwd` (or
        // null) into `found`; all are live locals, and `name` is a
        // NUL-terminated string that outlives the call.
        let rc = unsafe { libc::getpwnam_r(name.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
        (rc == 0 && !found.is_null()).then_some((pwd.pw_uid, pwd.pw_gid))
    }
}

impl keel_nfs4::NameDatabase for SystemUsers {
    fn uid(&self, user: &str) -> Option<u32> {
        Self::passwd(&std::ffi::CString::new(user).ok()?).map(|(uid, _)| uid)
    }

    fn gid(&self, group: &str) -> Option<u32> {
        let cname = std::ffi::CString::new(group).ok()?;
        // SAFETY: `group` is plain C data (integers and pointers) for which
        // all-zero bytes are a valid value; getgrnam_r fills it.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut buf = vec![0 as libc::c_char; NSS_ENTRY_BYTES_MAX];
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: as getpwnam_r above: every pointer is to a live local of
        // the size given, and `cname` is NUL-terminated.
        let rc = unsafe { libc::getgrnam_r(cname.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut found) };
        (rc == 0 && !found.is_null()).then_some(grp.gr_gid)
    }
}

/// Groups looked up for one user at most (the rest are ignored, as the
/// store's identity holds no more).
const USER_GROUPS_MAX: usize = keel_store::GROUPS_MAX;

impl keel_rpc::gss::UserDatabase for SystemUsers {
    fn user(&self, name: &str) -> Option<keel_store::Cred> {
        let cname = std::ffi::CString::new(name).ok()?;
        let (uid, gid) = Self::passwd(&cname)?;
        let mut groups = vec![0 as libc::gid_t; USER_GROUPS_MAX];
        let mut n = groups.len() as libc::c_int;
        // SAFETY: getgrouplist(3) writes at most `n` gids into `groups`
        // (a live buffer of that many) and the count into `n`; when there
        // are more it returns -1 having written `n` of them, which is all
        // we keep.
        unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        groups.truncate((n.max(0) as usize).min(USER_GROUPS_MAX));
        Some(keel_store::Cred::new(uid, gid, &groups))
    }
}

fn unsafe_zeroed_passwd() -> libc::passwd {
    // SAFETY: `passwd` is plain C data (integers and pointers) for which
    // all-zero bytes are a valid value; getpwnam_r fills it.
    unsafe { std::mem::zeroed() }
}

unsafe extern "C" {
    /// MIT Kerberos's GSS-API: the keytab the acceptor's keys come from,
    /// for the whole process (gssapi_krb5.h).
    fn krb5_gss_register_acceptor_identity(keytab: *const libc::c_char) -> u32;
}

/// Points GSS-API's acceptor at `keytab` (instead of KRB5_KTNAME or
/// /etc/krb5.keytab). Called once at start, before any context is made.
pub fn register_acceptor_keytab(keytab: &std::path::Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(keytab.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a keytab path with a NUL byte"))?;
    // SAFETY: the function copies the NUL-terminated path it is given
    // (which outlives the call) into the library's process-wide setting.
    match unsafe { krb5_gss_register_acceptor_identity(path.as_ptr()) } {
        0 => Ok(()),
        major => Err(io::Error::other(format!("GSS-API refused the keytab (major status {major:#x})"))),
    }
}

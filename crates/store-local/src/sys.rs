//! Thin wrappers over the Linux system calls the storage layer uses. Every
//! `unsafe` block of the crate lives here; the rest of the crate sees
//! `io::Result`s, owned descriptors and byte slices.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use bytes::BytesMut;

/// Largest kernel file handle (MAX_HANDLE_SZ in linux/exportfs.h).
pub const KERNEL_HANDLE_BYTES_MAX: usize = 128;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

fn cvt_size(r: isize) -> io::Result<usize> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r as usize) }
}

/// A name as a C string; names with NUL bytes are refused before this.
pub fn cstr(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

const EMPTY: &std::ffi::CStr = c"";

/// struct file_handle with room for the largest handle.
#[repr(C)]
struct RawHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; KERNEL_HANDLE_BYTES_MAX],
}

/// A kernel file handle: the file system's own name for an inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelHandle {
    pub handle_type: i32,
    pub bytes: Vec<u8>,
}

/// name_to_handle_at(2) without following symlinks. `name` empty means the
/// object `dirfd` itself. Returns the handle and the mount id.
pub fn name_to_handle(dirfd: BorrowedFd, name: &[u8]) -> io::Result<(KernelHandle, i32)> {
    let c = cstr(name)?;
    let mut raw = RawHandle { handle_bytes: KERNEL_HANDLE_BYTES_MAX as u32, handle_type: 0, f_handle: [0; 128] };
    let mut mount_id: libc::c_int = 0;
    let flags = if name.is_empty() { libc::AT_EMPTY_PATH } else { 0 };
    // SAFETY: raw is a file_handle with handle_bytes of trailing storage.
    cvt(unsafe {
        libc::name_to_handle_at(
            dirfd.as_raw_fd(),
            c.as_ptr(),
            (&raw mut raw).cast::<libc::file_handle>(),
            &mut mount_id,
            flags,
        )
    })?;
    let n = (raw.handle_bytes as usize).min(KERNEL_HANDLE_BYTES_MAX);
    Ok((KernelHandle { handle_type: raw.handle_type, bytes: raw.f_handle[..n].to_vec() }, mount_id))
}

/// open_by_handle_at(2). Needs CAP_DAC_READ_SEARCH in the effective set.
pub fn open_by_handle(mount_fd: BorrowedFd, handle: &KernelHandle, flags: libc::c_int) -> io::Result<OwnedFd> {
    if handle.bytes.len() > KERNEL_HANDLE_BYTES_MAX {
        return Err(io::Error::from_raw_os_error(libc::ESTALE));
    }
    let mut raw =
        RawHandle { handle_bytes: handle.bytes.len() as u32, handle_type: handle.handle_type, f_handle: [0; 128] };
    raw.f_handle[..handle.bytes.len()].copy_from_slice(&handle.bytes);
    // SAFETY: raw is a valid file_handle; the returned fd is owned by us.
    let fd = cvt(unsafe {
        libc::open_by_handle_at(
            mount_fd.as_raw_fd(),
            (&raw mut raw).cast::<libc::file_handle>(),
            flags | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: fd was just returned by the kernel and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn openat(dirfd: BorrowedFd, name: &[u8], flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: plain syscall on valid arguments.
    let fd =
        cvt(unsafe { libc::openat(dirfd.as_raw_fd(), c.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) })?;
    // SAFETY: fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a path (for the export roots at start).
pub fn open_path(path: &std::path::Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = cstr(path.as_os_str().as_bytes())?;
    // SAFETY: plain syscall on valid arguments.
    let fd = cvt(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) })?;
    // SAFETY: fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn fstat(fd: BorrowedFd) -> io::Result<libc::stat> {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is valid; empty path with AT_EMPTY_PATH works on O_PATH fds too.
    cvt(unsafe { libc::fstatat(fd.as_raw_fd(), EMPTY.as_ptr(), &mut st, libc::AT_EMPTY_PATH) })?;
    Ok(st)
}

/// fstatat(2) without following a final symlink.
pub fn stat_at(dirfd: BorrowedFd, name: &[u8]) -> io::Result<libc::stat> {
    let c = cstr(name)?;
    // SAFETY: as above.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and C string.
    cvt(unsafe { libc::fstatat(dirfd.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

pub fn fstatvfs(fd: BorrowedFd) -> io::Result<libc::statvfs> {
    // SAFETY: zeroed statvfs is a valid out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: fd valid (not O_PATH: callers pass a directory or file fd).
    cvt(unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// faccessat2(2) on the object itself with the thread's effective (fs)
/// identity: what the kernel would allow this caller.
pub fn access(fd: BorrowedFd, mode: libc::c_int) -> io::Result<()> {
    // SAFETY: raw syscall, valid arguments.
    let r = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            mode,
            libc::AT_EMPTY_PATH | libc::AT_EACCESS,
        )
    };
    cvt(r as libc::c_int).map(drop)
}

/// pread(2) of up to `count` bytes into a fresh buffer.
pub fn pread(fd: BorrowedFd, offset: u64, count: usize) -> io::Result<BytesMut> {
    let mut buf = BytesMut::with_capacity(count);
    let mut done = 0;
    while done < count {
        let spare = buf.spare_capacity_mut();
        // SAFETY: writing into the buffer's spare capacity, at most its length.
        let n = cvt_size(unsafe {
            libc::pread(fd.as_raw_fd(), spare.as_mut_ptr().cast(), count - done, (offset + done as u64) as libc::off_t)
        });
        let n = match n {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => r?,
        };
        if n == 0 {
            break;
        }
        // SAFETY: the kernel initialised n more bytes.
        unsafe { buf.set_len(done + n) };
        done += n;
    }
    Ok(buf)
}

/// Up to `count` bytes at `offset`, but only what the page cache holds
/// (preadv2 with RWF_NOWAIT): `None` if the first page must come from the
/// disk (a miss starts its read-ahead) or on any error, which the
/// blocking read that follows reports itself (tmpfs, which cannot read
/// without waiting, says EOPNOTSUPP: its READs all announce, as before).
/// May return fewer bytes than asked: the cached part, or up to the
/// file's end.
pub fn pread_cached(fd: BorrowedFd, offset: u64, count: usize) -> Option<BytesMut> {
    let mut buf = BytesMut::with_capacity(count);
    let spare = buf.spare_capacity_mut();
    let iov = libc::iovec { iov_base: spare.as_mut_ptr().cast(), iov_len: count };
    // SAFETY: one iovec over the buffer's spare capacity, `count` long.
    let n = cvt_size(unsafe { libc::preadv2(fd.as_raw_fd(), &iov, 1, offset as libc::off_t, libc::RWF_NOWAIT) });
    let n = n.ok()?;
    // SAFETY: the kernel initialised n bytes.
    unsafe { buf.set_len(n) };
    Some(buf)
}

/// cachestat(2)'s number (Linux 6.5; the same on every architecture),
/// which the libc crate does not name for every target.
const SYS_CACHESTAT: libc::c_long = 451;

/// What cachestat(2) reads: a byte range, and what it says of its pages.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Whether the `len` bytes at `offset` can be read without waiting for
/// the disk: every page of them is in the page cache (cachestat(2)), and
/// the last one is readable now (a one-byte preadv2 with RWF_NOWAIT:
/// cachestat also counts pages whose read-ahead is still on its way, and
/// a read-ahead fills its pages together). False when unknown (a kernel
/// before 6.5, an error): the caller then assumes a wait, as before it
/// asked. Neither call starts a read, but for the last page's, which the
/// caller is about to read anyway.
pub fn range_cached(fd: BorrowedFd, offset: u64, len: usize) -> bool {
    if len == 0 {
        return true;
    }
    // SAFETY: sysconf takes a name and touches no memory of ours.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as u64,
        _ => return false,
    };
    let pages = (offset + len as u64 - 1) / page - offset / page + 1;
    let range = CachestatRange { off: offset, len: len as u64 };
    let mut stat = Cachestat::default();
    // SAFETY: cachestat(2) reads one range and writes one cachestat, both
    // live, properly aligned locals of the kernel's layout; flags are 0.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0 as libc::c_uint,
        )
    };
    if r != 0 || stat.nr_cache < pages {
        return false;
    }
    let mut last = 0u8;
    let iov = libc::iovec { iov_base: (&mut last as *mut u8).cast(), iov_len: 1 };
    let at = (offset + len as u64 - 1) as libc::off_t;
    // SAFETY: one iovec over a live one-byte local.
    let n = unsafe { libc::preadv2(fd.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT) };
    n == 1
}

/// A non-blocking pipe sized to hold `bytes` (`F_SETPIPE_SZ`); an error
/// if the kernel will not make it that large (`pipe-max-size`, or the
/// user's pipe pages beyond `pipe-user-pages-soft` without
/// CAP_SYS_RESOURCE).
pub fn pipe_sized(bytes: usize) -> io::Result<keel_store::pipe::Pipe> {
    let mut fds = [-1 as libc::c_int; 2];
    // SAFETY: pipe2(2) writes two descriptors into the array, which is
    // live, properly aligned and two ints long.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors were just returned by pipe2 and are owned
    // by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let want = libc::c_int::try_from(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: fcntl(2) with F_SETPIPE_SZ takes an int and touches no memory
    // of ours; the descriptor is a live pipe.
    let got = cvt(unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, want) })?;
    if (got as usize) < bytes {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    Ok(keel_store::pipe::Pipe::new(read, write, got as usize))
}

/// splice(2) of up to `count` bytes of the file `fd` at `offset` into the
/// pipe `pipe` (non-blocking: EAGAIN when the pipe is full). The pipe
/// references the page cache's pages; nothing is copied.
pub fn splice_to_pipe(fd: BorrowedFd, offset: u64, pipe: BorrowedFd, count: usize) -> io::Result<usize> {
    let mut off = offset as libc::loff_t;
    loop {
        // SAFETY: splice(2) reads and updates the offset through the
        // pointer (a live local) and moves data between two live
        // descriptors; no memory of ours is read or written otherwise.
        let r = unsafe {
            libc::splice(
                fd.as_raw_fd(),
                &mut off,
                pipe.as_raw_fd(),
                std::ptr::null_mut(),
                count,
                libc::SPLICE_F_NONBLOCK,
            )
        };
        match cvt_size(r) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// pwritev2(2) of all of `data`, with `flags` (RWF_DSYNC / RWF_SYNC or 0).
pub fn pwrite_all(fd: BorrowedFd, mut data: &[u8], mut offset: u64, flags: libc::c_int) -> io::Result<()> {
    if flags != 0 {
        keel_store::blocking::may_block();
    }
    while !data.is_empty() {
        let iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
        // SAFETY: one valid iovec over `data`.
        let n = cvt_size(unsafe { libc::pwritev2(fd.as_raw_fd(), &iov, 1, offset as libc::off_t, flags) });
        let n = match n {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => r?,
        };
        if n == 0 {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        data = &data[n..];
        offset += n as u64;
    }
    Ok(())
}

/// lseek(2) with SEEK_DATA or SEEK_HOLE (`data`): the offset found.
/// lseek moves the description's offset, which nothing here reads (I/O is
/// positional).
pub fn seek_data_or_hole(fd: BorrowedFd, offset: u64, data: bool) -> io::Result<u64> {
    let offset = libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::ENXIO))?;
    let whence = if data { libc::SEEK_DATA } else { libc::SEEK_HOLE };
    // SAFETY: plain syscall.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), offset, whence) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r as u64) }
}

/// fallocate(2): `punch_hole` frees the range keeping the size, otherwise
/// the range's blocks are reserved and the size grows to cover it.
pub fn fallocate(fd: BorrowedFd, punch_hole: bool, offset: u64, len: u64) -> io::Result<()> {
    let (offset, len) = match (libc::off_t::try_from(offset), libc::off_t::try_from(len)) {
        (Ok(o), Ok(l)) => (o, l),
        _ => return Err(io::Error::from_raw_os_error(libc::EFBIG)),
    };
    let mode = if punch_hole { libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE } else { 0 };
    keel_store::blocking::may_block();
    loop {
        // SAFETY: plain syscall.
        match cvt(unsafe { libc::fallocate(fd.as_raw_fd(), mode, offset, len) }) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r.map(drop),
        }
    }
}

/// One copy_file_range(2) of up to `len` bytes: the bytes copied (0 at
/// the source's end). The kernel shares blocks where the file system can
/// (a reflink on XFS).
pub fn copy_file_range(
    src: BorrowedFd,
    src_offset: u64,
    dst: BorrowedFd,
    dst_offset: u64,
    len: usize,
) -> io::Result<usize> {
    let mut off_in = libc::loff_t::try_from(src_offset).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let mut off_out = libc::loff_t::try_from(dst_offset).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    keel_store::blocking::may_block();
    loop {
        // SAFETY: the offsets are valid for the call's duration; the
        // descriptors are borrowed and open.
        let r = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut off_in, dst.as_raw_fd(), &mut off_out, len, 0) };
        match cvt_size(r) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

pub fn fsync(fd: BorrowedFd) -> io::Result<()> {
    keel_store::blocking::may_block();
    // SAFETY: plain syscall.
    cvt(unsafe { libc::fsync(fd.as_raw_fd()) }).map(drop)
}

pub fn syncfs(fd: BorrowedFd) -> io::Result<()> {
    keel_store::blocking::may_block();
    // SAFETY: plain syscall.
    cvt(unsafe { libc::syncfs(fd.as_raw_fd()) }).map(drop)
}

pub fn ftruncate(fd: BorrowedFd, size: u64) -> io::Result<()> {
    let size = libc::off_t::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: plain syscall.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), size) }).map(drop)
}

pub fn fchmod(fd: BorrowedFd, mode: u32) -> io::Result<()> {
    // SAFETY: plain syscall.
    cvt(unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) }).map(drop)
}

/// chmod through /proc/self/fd, for O_PATH descriptors (fifos, sockets,
/// device nodes) that fchmod refuses. Never used on symlinks.
pub fn chmod_via_proc(fd: BorrowedFd, mode: u32) -> io::Result<()> {
    let path = cstr(format!("/proc/self/fd/{}", fd.as_raw_fd()).as_bytes())?;
    // SAFETY: plain syscall on a valid path.
    cvt(unsafe { libc::chmod(path.as_ptr(), mode as libc::mode_t) }).map(drop)
}

/// fchownat(2) on the object itself; u32::MAX leaves an id unchanged.
pub fn fchown(fd: BorrowedFd, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: plain syscall; works on O_PATH descriptors.
    cvt(unsafe {
        libc::fchownat(fd.as_raw_fd(), EMPTY.as_ptr(), uid, gid, libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW)
    })
    .map(drop)
}

/// utimensat(2) on the object itself (works on O_PATH descriptors).
pub fn set_times(fd: BorrowedFd, times: &[libc::timespec; 2]) -> io::Result<()> {
    // SAFETY: two valid timespecs.
    cvt(unsafe { libc::utimensat(fd.as_raw_fd(), EMPTY.as_ptr(), times.as_ptr(), libc::AT_EMPTY_PATH) }).map(drop)
}

pub fn mkdirat(dirfd: BorrowedFd, name: &[u8], mode: u32) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: plain syscall.
    cvt(unsafe { libc::mkdirat(dirfd.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) }).map(drop)
}

pub fn symlinkat(target: &[u8], dirfd: BorrowedFd, name: &[u8]) -> io::Result<()> {
    let t = cstr(target)?;
    let c = cstr(name)?;
    // SAFETY: plain syscall.
    cvt(unsafe { libc::symlinkat(t.as_ptr(), dirfd.as_raw_fd(), c.as_ptr()) }).map(drop)
}

pub fn mknodat(dirfd: BorrowedFd, name: &[u8], mode: u32, dev: libc::dev_t) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: plain syscall.
    cvt(unsafe { libc::mknodat(dirfd.as_raw_fd(), c.as_ptr(), mode as libc::mode_t, dev) }).map(drop)
}

pub fn unlinkat(dirfd: BorrowedFd, name: &[u8], flags: libc::c_int) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: plain syscall.
    cvt(unsafe { libc::unlinkat(dirfd.as_raw_fd(), c.as_ptr(), flags) }).map(drop)
}

pub fn renameat(from_dir: BorrowedFd, from: &[u8], to_dir: BorrowedFd, to: &[u8]) -> io::Result<()> {
    let f = cstr(from)?;
    let t = cstr(to)?;
    // SAFETY: plain syscall.
    cvt(unsafe { libc::renameat(from_dir.as_raw_fd(), f.as_ptr(), to_dir.as_raw_fd(), t.as_ptr()) }).map(drop)
}

/// A new name for the object behind `fd`. Goes through /proc/self/fd
/// because linkat's AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH, which the
/// caller's identity does not have.
pub fn link_fd(fd: BorrowedFd, dirfd: BorrowedFd, name: &[u8]) -> io::Result<()> {
    let src = cstr(format!("/proc/self/fd/{}", fd.as_raw_fd()).as_bytes())?;
    let c = cstr(name)?;
    // SAFETY: plain syscall.
    cvt(unsafe { libc::linkat(libc::AT_FDCWD, src.as_ptr(), dirfd.as_raw_fd(), c.as_ptr(), libc::AT_SYMLINK_FOLLOW) })
        .map(drop)
}

/// The target of the symlink `fd` refers to (an O_PATH descriptor).
pub fn readlink(fd: BorrowedFd) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: buf is valid for its length.
    let n = cvt_size(unsafe { libc::readlinkat(fd.as_raw_fd(), EMPTY.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
    buf.truncate(n);
    Ok(buf)
}

pub fn lseek_set(fd: BorrowedFd, offset: u64) -> io::Result<()> {
    // SAFETY: plain syscall.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), offset as libc::off_t, libc::SEEK_SET) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// getdents64(2) into `buf`; returns the bytes filled (0 at the end).
pub fn getdents(fd: BorrowedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for its length.
    let r = unsafe { libc::syscall(libc::SYS_getdents64, fd.as_raw_fd(), buf.as_mut_ptr(), buf.len()) };
    cvt_size(r as isize)
}

/// One record from a getdents64 buffer.
pub struct RawDirent<'a> {
    pub ino: u64,
    /// Position of the next entry: the cookie to resume after this one.
    pub next_offset: u64,
    pub name: &'a [u8],
}

/// Parses the records of a getdents64 buffer.
pub fn dirents(buf: &[u8]) -> impl Iterator<Item = RawDirent<'_>> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
        if pos + 19 > buf.len() {
            return None;
        }
        let rec = &buf[pos..];
        let ino = u64::from_ne_bytes(rec[0..8].try_into().ok()?);
        let next_offset = u64::from_ne_bytes(rec[8..16].try_into().ok()?);
        let reclen = u16::from_ne_bytes(rec[16..18].try_into().ok()?) as usize;
        if reclen < 19 || pos + reclen > buf.len() {
            return None;
        }
        let name_area = &rec[19..reclen];
        let name_len = name_area.iter().position(|&b| b == 0).unwrap_or(name_area.len());
        pos += reclen;
        Some(RawDirent { ino, next_offset, name: &name_area[..name_len] })
    })
}

pub fn fpathconf(fd: BorrowedFd, name: libc::c_int) -> Option<i64> {
    // SAFETY: plain call.
    let r = unsafe { libc::fpathconf(fd.as_raw_fd(), name) };
    (r >= 0).then_some(r as i64)
}

/// The file system UUID (FS_IOC_GETFSUUID, Linux 6.5+).
pub fn fs_uuid(fd: BorrowedFd) -> io::Result<[u8; 16]> {
    #[repr(C)]
    struct FsUuid2 {
        len: u8,
        uuid: [u8; 16],
    }
    const FS_IOC_GETFSUUID: libc::c_ulong = 0x8011_1500; // _IOR(0x15, 0, struct fsuuid2)
    let mut out = FsUuid2 { len: 0, uuid: [0; 16] };
    // SAFETY: the ioctl writes at most sizeof(struct fsuuid2).
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), FS_IOC_GETFSUUID as _, &mut out) })?;
    if out.len != 16 {
        return Err(io::Error::from_raw_os_error(libc::ENOTTY));
    }
    Ok(out.uuid)
}

/// statfs's f_type: the file system's magic number (XFS_SUPER_MAGIC, ...).
pub fn statfs_type(fd: BorrowedFd) -> io::Result<i64> {
    // SAFETY: zeroed statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fd valid.
    cvt(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) })?;
    Ok(st.f_type as i64)
}

/// statfs's f_fsid as one number (0 when the file system reports none).
pub fn statfs_fsid(fd: BorrowedFd) -> io::Result<u64> {
    // SAFETY: zeroed statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fd valid.
    cvt(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) })?;
    // fsid_t's fields are private in libc; in C it is two ints.
    // SAFETY: fsid_t is 8 bytes of plain data.
    let words: [u32; 2] = unsafe { std::mem::transmute(st.f_fsid) };
    Ok((u64::from(words[0]) << 32) | u64::from(words[1]))
}

/// The effective uid of the process.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Fills `buf` from the kernel's random source.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: writing into buf's remaining bytes.
        let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), buf.len() - done, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

// Thread credentials. Linux keeps fsuid, fsgid, supplementary groups and
// capabilities per thread at the system-call level; glibc's wrappers would
// broadcast setgroups and the set*id calls to every thread, so the raw
// system calls are used.

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// One half of the kernel's 64-bit capability sets (version 3 takes two).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct CapData {
    pub effective: u32,
    pub permitted: u32,
    pub inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// This thread's capability sets.
pub fn capget() -> io::Result<[CapData; 2]> {
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: version 3 writes exactly two CapData structs, which `data` holds.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    cvt(r as libc::c_int).map(|_| data)
}

/// Sets this thread's capability sets (capset acts on the calling thread
/// only).
pub fn capset(data: &[CapData; 2]) -> io::Result<()> {
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    // SAFETY: version 3 reads exactly two CapData structs, which `data` holds.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    cvt(r as libc::c_int).map(drop)
}

/// setfsuid(2) for this thread; returns the previous fsuid. It reports no
/// errors: an id it cannot set changes nothing (u32::MAX only queries).
pub fn setfsuid(uid: u32) -> u32 {
    // SAFETY: plain syscall with an integer argument.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid) as u32 }
}

/// setfsgid(2) for this thread; returns the previous fsgid (see setfsuid).
pub fn setfsgid(gid: u32) -> u32 {
    // SAFETY: plain syscall with an integer argument.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid) as u32 }
}

/// setgroups(2) for this thread only.
pub fn setgroups(groups: &[u32]) -> io::Result<()> {
    // SAFETY: the kernel reads `groups.len()` gid_t values (u32) from the slice.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    cvt(r as libc::c_int).map(drop)
}

/// This thread's supplementary groups (at most `buf.len()`).
#[cfg(test)]
pub fn getgroups(buf: &mut [u32]) -> io::Result<usize> {
    let len = libc::c_int::try_from(buf.len()).unwrap_or(libc::c_int::MAX);
    // SAFETY: the kernel writes at most `len` gid_t values into `buf`.
    let r = unsafe { libc::syscall(libc::SYS_getgroups, len, buf.as_mut_ptr()) };
    cvt(r as libc::c_int).map(|n| n as usize)
}

/// One open file description lock request (fcntl F_OFD_SETLK or
/// F_OFD_GETLK): `kind` is F_RDLCK, F_WRLCK or F_UNLCK; `len` 0 runs to
/// the end. Never waits. For F_OFD_GETLK, returns the conflicting lock's
/// kind, start and length, or None.
pub fn ofd_lock(
    fd: BorrowedFd,
    cmd: libc::c_int,
    kind: libc::c_int,
    start: i64,
    len: i64,
) -> io::Result<Option<(libc::c_int, i64, i64)>> {
    // SAFETY: zeroed flock is valid; l_pid must be 0 for OFD locks.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = len;
    // SAFETY: fd is valid and fl a valid flock for the duration of the call.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), cmd, &mut fl) })?;
    if cmd == libc::F_OFD_GETLK && i32::from(fl.l_type) != libc::F_UNLCK {
        return Ok(Some((i32::from(fl.l_type), fl.l_start, fl.l_len)));
    }
    Ok(None)
}

/// fcntl F_SETLEASE: takes (F_RDLCK, F_WRLCK) or releases (F_UNLCK) a
/// lease on the open file description of `fd`. Needs the caller's fsuid to
/// own the file, or CAP_LEASE.
pub fn set_lease(fd: BorrowedFd, kind: libc::c_int) -> io::Result<()> {
    // SAFETY: fd is valid; F_SETLEASE takes an int argument.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, kind) }).map(drop)
}

/// fcntl F_GETLEASE: the lease held on `fd`'s description (F_RDLCK,
/// F_WRLCK, F_UNLCK), or while it is being broken the kind it is to be
/// downgraded to.
pub fn get_lease(fd: BorrowedFd) -> io::Result<libc::c_int> {
    // SAFETY: fd is valid; F_GETLEASE takes no argument.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETLEASE) })
}

/// Clears O_NONBLOCK on `fd`'s description (it was opened with it only so
/// that the open would not wait on a lease).
pub fn clear_nonblock(fd: BorrowedFd) -> io::Result<()> {
    // SAFETY: fd is valid; F_GETFL and F_SETFL take and give ints.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) }).map(drop)
}

/// Ignores SIGIO in the whole process: the kernel sends it to a lease's
/// holder when the lease is broken, and its default action ends the
/// process. Lease holders ask F_GETLEASE instead.
pub fn ignore_sigio() -> io::Result<()> {
    // SAFETY: a zeroed sigaction with SIG_IGN and an empty mask is valid;
    // ignoring a signal touches no memory of ours.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = libc::SIG_IGN;
        libc::sigemptyset(&mut act.sa_mask);
        cvt(libc::sigaction(libc::SIGIO, &act, std::ptr::null_mut())).map(drop)
    }
}

/// inotify_init1 with IN_NONBLOCK | IN_CLOEXEC: an inotify instance whose
/// reads answer EAGAIN when no event waits.
pub fn inotify_init() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall on valid flags.
    let fd = cvt(unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) })?;
    // SAFETY: fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// inotify_add_watch for the object behind `fd` (through /proc/self/fd,
/// which resolves to the inode even once it is unlinked): its watch
/// descriptor in `inotify`, the same for the same inode. ENOSPC past
/// /proc/sys/fs/inotify/max_user_watches.
pub fn inotify_watch_fd(inotify: BorrowedFd, fd: BorrowedFd, mask: u32) -> io::Result<i32> {
    let path = cstr(format!("/proc/self/fd/{}", fd.as_raw_fd()).as_bytes())?;
    // SAFETY: inotify is valid; path is a NUL-terminated string.
    cvt(unsafe { libc::inotify_add_watch(inotify.as_raw_fd(), path.as_ptr(), mask) })
}

/// inotify_rm_watch: EINVAL if the kernel removed the watch already (its
/// inode is gone).
pub fn inotify_unwatch(inotify: BorrowedFd, wd: i32) -> io::Result<()> {
    // SAFETY: plain syscall on valid arguments.
    cvt(unsafe { libc::inotify_rm_watch(inotify.as_raw_fd(), wd) }).map(drop)
}

/// One read of `inotify`'s events into `buf` (whole events only; EAGAIN
/// when none waits): the bytes read, for [`inotify_events`].
pub fn inotify_read(inotify: BorrowedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for buf.len() bytes of writing.
    cvt_size(unsafe { libc::read(inotify.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
}

/// Size of `struct inotify_event` without its name.
const INOTIFY_EVENT_HEADER: usize = 16;

/// The events (watch descriptor, mask) in what [`inotify_read`] read.
pub fn inotify_events(buf: &[u8]) -> impl Iterator<Item = (i32, u32)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let header = buf.get(at..at + INOTIFY_EVENT_HEADER)?;
        let word = |i: usize| [header[i], header[i + 1], header[i + 2], header[i + 3]];
        let wd = i32::from_ne_bytes(word(0));
        let mask = u32::from_ne_bytes(word(4));
        let name_len = u32::from_ne_bytes(word(12)) as usize;
        at += INOTIFY_EVENT_HEADER + name_len;
        Some((wd, mask))
    })
}

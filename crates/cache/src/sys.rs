//! The cache's one call into the kernel that std does not wrap besides the
//! wear ioctl ([`crate::wear`]): the type of the file system a file is on.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// statfs's `f_type` (a `*_MAGIC` of linux/magic.h) for the file system
/// that holds `file`.
pub fn fs_type(file: &File) -> io::Result<u32> {
    // SAFETY: a zeroed statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is open for the call; `st` outlives it.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Every magic number fits in 32 bits; f_type is wider on some targets.
    Ok(st.f_type as u32)
}

//! Every `unsafe` of the server crate: the process-wide system calls made
//! at start. (The file-system calls are in `keel_store_local::sys`.)

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

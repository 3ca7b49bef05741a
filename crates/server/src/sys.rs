//! Every `unsafe` of the server crate: the process-wide system calls made
//! at start, the state directory's lock, and the link-layer lookup and
//! packet socket of a failover's address announcement. (The file-system
//! calls are in `keel_store_local::sys`, the transport's in
//! `keel_transport::sys`.)

use std::io;

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

    fn user_name(&self, uid: u32) -> Option<String> {
        let mut pwd: libc::passwd = unsafe_zeroed_passwd();
        let mut buf = vec![0 as libc::c_char; NSS_ENTRY_BYTES_MAX];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: as getpwnam_r above: every pointer is to a live local of
        // the size given; `pw_name` then points into `buf`.
        let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
        if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        // SAFETY: getpwuid_r succeeded, so `pw_name` is a NUL-terminated
        // string inside `buf`, which is still live.
        let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
        name.to_str().ok().map(str::to_owned)
    }

    fn group_name(&self, gid: u32) -> Option<String> {
        // SAFETY: as in `gid`: plain C data, filled by getgrgid_r.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut buf = vec![0 as libc::c_char; NSS_ENTRY_BYTES_MAX];
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: as getgrnam_r above; `gr_name` then points into `buf`.
        let rc = unsafe { libc::getgrgid_r(gid, &mut grp, buf.as_mut_ptr(), buf.len(), &mut found) };
        if rc != 0 || found.is_null() || grp.gr_name.is_null() {
            return None;
        }
        // SAFETY: getgrgid_r succeeded, so `gr_name` is a NUL-terminated
        // string inside `buf`, which is still live.
        let name = unsafe { std::ffi::CStr::from_ptr(grp.gr_name) };
        name.to_str().ok().map(str::to_owned)
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

/// The link that holds `ip` on this node: its interface index and its
/// Ethernet address (getifaddrs(3)); `None` if no interface holds it or
/// its link has no 6-byte hardware address.
pub fn link_holding(ip: std::net::Ipv4Addr) -> io::Result<Option<(i32, [u8; 6])>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs(3) writes the head of a list it allocates through
    // the pointer, a live local; the list is freed below, once.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut holder: Option<Vec<u8>> = None;
    let mut links: Vec<(Vec<u8>, i32, [u8; 6])> = Vec::new();
    let mut node = list;
    while !node.is_null() {
        // SAFETY: `node` is a member of the list getifaddrs returned, which
        // is not freed until after this loop.
        let ifa = unsafe { &*node };
        node = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string of the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_bytes();
        // SAFETY: ifa_addr, not null, points to a sockaddr of the list.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        if family == libc::AF_INET {
            // SAFETY: an address of family AF_INET is a sockaddr_in.
            let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
            if u32::from_be(sin.sin_addr.s_addr) == u32::from(ip) {
                // An address with a label (`pub0:0`) is the link's (`pub0`).
                holder = Some(name.split(|b| *b == b':').next().unwrap_or(name).to_vec());
            }
        } else if family == libc::AF_PACKET {
            // SAFETY: an address of family AF_PACKET is a sockaddr_ll.
            let sll = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_ll>() };
            if sll.sll_halen == 6 {
                let mut mac = [0u8; 6];
                mac.copy_from_slice(&sll.sll_addr[..6]);
                links.push((name.to_vec(), sll.sll_ifindex, mac));
            }
        }
    }
    // SAFETY: the list getifaddrs returned, freed once; the names and
    // addresses kept above are copies.
    unsafe { libc::freeifaddrs(list) };
    Ok(holder.and_then(|h| links.into_iter().find(|(name, _, _)| *name == h).map(|(_, index, mac)| (index, mac))))
}

/// Sends `arp` (an ARP packet) in an Ethernet broadcast out of the
/// interface `ifindex`.
pub fn broadcast_arp(ifindex: i32, arp: &[u8]) -> io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let protocol = (libc::ETH_P_ARP as u16).to_be();
    // SAFETY: socket(2) returns a new descriptor or -1; it touches no memory.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, i32::from(protocol)) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    let socket = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain data, valid all zero.
    let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    to.sll_family = libc::AF_PACKET as u16;
    to.sll_protocol = protocol;
    to.sll_ifindex = ifindex;
    to.sll_halen = 6;
    to.sll_addr[..6].copy_from_slice(&[0xff; 6]);
    // SAFETY: sendto(2) reads `arp` and `to`, both live for the call, with
    // their true lengths.
    let sent = unsafe {
        libc::sendto(
            socket.as_raw_fd(),
            arp.as_ptr().cast(),
            arp.len(),
            0,
            std::ptr::from_ref(&to).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use keel_nfs4::NameDatabase;

    use super::SystemUsers;

    #[test]
    fn the_user_database_names_ids_both_ways_and_knows_no_name_for_an_unused_id() {
        let db = SystemUsers;
        assert_eq!(db.user_name(0).as_deref(), Some("root"));
        assert_eq!(db.group_name(0).as_deref(), Some("root"));
        assert_eq!(db.uid("root"), Some(0));
        // An id no entry has (just below the "no id" -1).
        assert_eq!(db.user_name(u32::MAX - 1), None);
        assert_eq!(db.group_name(u32::MAX - 1), None);
    }
}

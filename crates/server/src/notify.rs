//! systemd's readiness protocol (sd_notify(3)), without libsystemd: one
//! datagram to the socket named by `$NOTIFY_SOCKET`, when there is one.
//! `READY=1` once serving, `RELOADING=1` and `READY=1` around an export
//! reload, `STOPPING=1` when the stop begins.

use std::os::unix::net::UnixDatagram;

/// Sends `state` (newline-separated `KEY=VALUE` lines) to the service
/// manager; does nothing when not started by one. Failures are logged,
/// never fatal: serving matters more than telling systemd about it.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    if let Err(e) = send(&path, state) {
        tracing::warn!(error = %e, socket = ?path, "cannot notify the service manager");
    }
}

fn send(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let socket = UnixDatagram::unbound()?;
    let bytes = path.as_bytes();
    match bytes.first() {
        // An abstract socket (Linux).
        Some(b'@') => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(&bytes[1..])?;
            socket.send_to_addr(state.as_bytes(), &addr)?;
        }
        Some(b'/') => {
            socket.send_to(state.as_bytes(), path)?;
        }
        _ => {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "NOTIFY_SOCKET is not a socket path"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_reaches_the_socket() {
        let dir = std::env::temp_dir().join(format!("keel-notify-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        send(path.as_os_str(), "READY=1\nSTATUS=serving").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving");
        assert!(send(std::ffi::OsStr::new("relative"), "READY=1").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

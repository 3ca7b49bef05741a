//! NSM state on disk: this server's state number and the clients it
//! monitors (those that have held locks), so that after a restart it can
//! tell them (SM_NOTIFY) and hold a grace period for their reclaims.
//!
//! Layout of the directory (`nsm_state_dir`, by default `nsm` under the
//! state directory; HA puts it on shared storage), mode 0700, its files
//! 0600:
//! - `state`: the state number, decimal, as a record rewritten in place
//!   ([`RecordFile`]: two checksummed slots). Odd while up (NSM's rule);
//!   each start makes it the next odd number. Every start writes it, so
//!   the write allocates nothing: a start on a full file system (a
//!   failover's survivor) works, and a torn write leaves the last number.
//!   (Older versions kept the bare number; it is read and replaced.)
//! - `clients/<key>`: one file per monitored client: its address, the
//!   server address it talked to (which SM_NOTIFY must come from), and
//!   its name, one per line (the name hex-encoded). Each is written to a
//!   temporary file, flushed and renamed into place, and the directory
//!   is flushed: a crash leaves the old or the new version, never a torn
//!   one.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use keel_store::state_file::{self, RecordFile, Stored, replace_durably, sync_dir};

/// Monitored clients at most: more files would slow the start down for
/// no client's benefit (they are bounded by the hosts limit anyway).
pub const MONITORED_MAX: usize = 65536;
/// The slots of the state number's record file: one sector each.
const STATE_SLOT_BYTES: usize = 512;

/// A client host as the lock manager knows it: the address it calls from
/// and the name it gives (`caller_name`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostKey {
    pub addr: IpAddr,
    pub name: Bytes,
}

/// A monitored client, as kept on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Monitored {
    pub host: HostKey,
    /// The server address the client talked to.
    pub local: IpAddr,
}

pub struct NsmStore {
    dir: PathBuf,
    state: i32,
    files: HashMap<HostKey, PathBuf>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// A file name for `host`: short, and the same for the same host.
fn file_name(host: &HostKey) -> String {
    // FNV-1a over address and name: stable across builds and versions.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host.addr.to_string().bytes().chain([0]).chain(host.name.iter().copied()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{}-{h:016x}", host.addr.to_string().replace(':', "_"))
}

impl NsmStore {
    /// Opens (creating if needed) the state in `dir`, moves the state
    /// number on to the next odd one, and returns the clients monitored
    /// before this start.
    pub fn open(dir: &Path) -> io::Result<(NsmStore, Vec<Monitored>)> {
        let clients = dir.join("clients");
        state_file::create_dir(&clients)?;
        // Older versions made them world-writable.
        state_file::make_private(dir)?;
        state_file::make_private(&clients)?;
        let (mut record, stored) = RecordFile::open(&dir.join("state"), STATE_SLOT_BYTES)?;
        let old: i32 = match stored {
            Stored::Record(text) | Stored::Unrecognised(text) => parse_state(&text),
            Stored::Nothing => 0,
        };
        let state = if (0..i32::MAX - 2).contains(&old) { (old + 1) | 1 } else { 1 };
        record.write(format!("{state}\n").as_bytes())?;
        let mut files = HashMap::new();
        let mut previous = Vec::new();
        for entry in fs::read_dir(&clients)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "tmp") {
                let _ = fs::remove_file(&path);
                continue;
            }
            state_file::make_private(&path)?;
            let parsed = fs::read_to_string(&path).ok().and_then(|t| parse(&t));
            match parsed {
                Some(m) if previous.len() < MONITORED_MAX => {
                    files.insert(m.host.clone(), path);
                    previous.push(m);
                }
                _ => {
                    tracing::warn!(path = %path.display(), "ignoring an unreadable NSM client record");
                }
            }
        }
        Ok((NsmStore { dir: dir.to_owned(), state, files }, previous))
    }

    /// This start's state number.
    pub fn state(&self) -> i32 {
        self.state
    }

    pub fn is_monitored(&self, host: &HostKey) -> bool {
        self.files.contains_key(host)
    }

    /// Records that `m`'s client holds locks (idempotent).
    pub fn monitor(&mut self, m: &Monitored) -> io::Result<()> {
        if self.files.contains_key(&m.host) {
            return Ok(());
        }
        if self.files.len() >= MONITORED_MAX {
            return Err(io::Error::other("too many monitored clients"));
        }
        let path = self.dir.join("clients").join(file_name(&m.host));
        let text = format!("{}\n{}\n{}\n", m.host.addr, m.local, hex(&m.host.name));
        replace_durably(&path, text.as_bytes())?;
        self.files.insert(m.host.clone(), path);
        Ok(())
    }

    /// Forgets a client (it rebooted, or freed all it held).
    pub fn unmonitor(&mut self, host: &HostKey) -> io::Result<()> {
        if let Some(path) = self.files.remove(host) {
            fs::remove_file(&path)?;
            sync_dir(&self.dir.join("clients"))?;
        }
        Ok(())
    }
}

/// A state number as text; 0 (so the next start is 1) if unreadable.
fn parse_state(text: &[u8]) -> i32 {
    let text = String::from_utf8_lossy(text);
    text.trim_matches(|c: char| c.is_whitespace() || c == '\0').parse().unwrap_or(0)
}

fn parse(text: &str) -> Option<Monitored> {
    let mut lines = text.lines();
    let addr = lines.next()?.parse().ok()?;
    let local = lines.next()?.parse().ok()?;
    let name = Bytes::from(unhex(lines.next()?)?);
    Some(Monitored { host: HostKey { addr, name }, local })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_moves_on_and_clients_survive_a_restart() {
        let dir = std::env::temp_dir().join(format!("keel-nsm-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (mut s, prev) = NsmStore::open(&dir).unwrap();
        assert_eq!((s.state(), prev.len()), (1, 0));
        let m = Monitored {
            host: HostKey { addr: "10.0.2.15".parse().unwrap(), name: Bytes::from_static(b"client a\n") },
            local: "10.0.2.2".parse().unwrap(),
        };
        s.monitor(&m).unwrap();
        let other = Monitored { host: HostKey { addr: "::1".parse().unwrap(), name: Bytes::new() }, ..m.clone() };
        s.monitor(&other).unwrap();
        s.unmonitor(&other.host).unwrap();
        drop(s);
        let (s, prev) = NsmStore::open(&dir).unwrap();
        assert_eq!(s.state(), 3);
        assert_eq!(prev, vec![m.clone()]);
        assert!(s.is_monitored(&m.host));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_state_number_moves_on_from_an_older_version_s_file_in_place() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("keel-nsm-legacy-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("clients")).unwrap();
        fs::write(dir.join("state"), "41\n").unwrap();
        let inode = fs::metadata(dir.join("state")).unwrap().ino();
        let (s, _) = NsmStore::open(&dir).unwrap();
        assert_eq!(s.state(), 43);
        let (s, _) = NsmStore::open(&dir).unwrap();
        assert_eq!(s.state(), 45);
        assert_eq!(fs::metadata(dir.join("state")).unwrap().ino(), inode, "rewritten in place, not replaced");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2, "no temporary left");
        fs::remove_dir_all(&dir).unwrap();
    }
}

//! The duplicate reply cache kept on the shared storage (`[ha]`): the node
//! that takes over answers a retransmission of a call the failed node
//! executed (a REMOVE, a CREATE, a RENAME whose reply was lost with the
//! node) with the reply that node sent, instead of executing it again and
//! answering NOENT or EXIST for an operation that succeeded.
//!
//! A fixed-size ring file of 512-byte slots, written in place (the blocks
//! are allocated and zeroed when it is made, so a record's fdatasync writes
//! data only and forces no log). Each record starts a slot with a header
//! (magic, length, sequence number, CRC32) and may span slots; a record
//! overwritten in part fails its CRC and is skipped. Records are durable
//! before the reply goes out; concurrent calls share one fdatasync (group
//! commit), as the log of the cache tier does.
//!
//! WRITE replies stay in the in-memory cache (as knfsd's) but are not
//! journaled: a WRITE run again after a failover writes the same bytes,
//! and journaling it would put an fdatasync on every WRITE, UNSTABLE ones
//! included, which the protocol lets the server answer from memory.

use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Condvar, Mutex};

use bytes::{BufMut, Bytes, BytesMut};
use keel_nfs3_proto::{NFS_PROGRAM, Nfs3Proc};
use keel_rpc::ReplyJournal;
use keel_rpc::drc::DrcKey;

pub const FILE_NAME: &str = "reply-cache";
const SLOT_BYTES: usize = 512;
const SLOTS: usize = 1 << 16;
const FILE_BYTES: u64 = (SLOT_BYTES * SLOTS) as u64;
/// "KDRD": records of the first format ("KDRC", without the caller in
/// the key) are skipped, not misread.
const MAGIC: u32 = 0x4b44_5244;
/// Magic, payload length, sequence number, CRC32 of sequence and payload.
const HEADER_BYTES: usize = 4 + 4 + 8 + 4;
/// Where the CRC sits in the header.
const CRC_AT: usize = 16;
/// A payload's key: client address (IPv6 or mapped IPv4), port, family,
/// xid, program, version, procedure, argument checksum, caller.
const KEY_BYTES: usize = 16 + 2 + 1 + 16 + 8 + 8;
/// Larger replies are not recorded: the cached procedures' replies are a
/// few hundred bytes (status and wcc data).
const RECORD_BYTES_MAX: usize = 64 << 10;

/// A recorded call and its reply.
pub type Entry = (DrcKey, Vec<Bytes>);

pub struct FileReplyJournal {
    file: File,
    /// The next slot to write and the next sequence number.
    head: Mutex<(usize, u64)>,
    sync: Mutex<SyncState>,
    synced: Condvar,
}

/// Group commit: a record is durable once a sync that started after its
/// write has finished. One sync runs at a time; its number is `started`.
#[derive(Default)]
struct SyncState {
    started: u64,
    done: u64,
    running: bool,
    /// The last sync failed: later records must sync again, not ride on it.
    failed: bool,
}

/// Whether `key`'s reply goes into the journal (see the module doc).
fn journaled(key: &DrcKey) -> bool {
    !(key.prog == NFS_PROGRAM && key.proc_ == Nfs3Proc::Write as u32)
}

/// Appends the payload (key, then reply) to `buf`.
fn put_payload(buf: &mut BytesMut, key: &DrcKey, reply: &[Bytes]) {
    let ip = match key.peer.ip() {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    buf.put_slice(&ip.octets());
    buf.put_u16(key.peer.port());
    buf.put_u8(u8::from(key.peer.is_ipv4()));
    for v in [key.xid, key.prog, key.vers, key.proc_] {
        buf.put_u32(v);
    }
    buf.put_u64(key.args_checksum);
    buf.put_u64(key.caller);
    for segment in reply {
        buf.put_slice(segment);
    }
}

fn decode_payload(p: &[u8]) -> Option<Entry> {
    if p.len() < KEY_BYTES {
        return None;
    }
    let u32_at = |i: usize| u32::from_be_bytes(p[i..i + 4].try_into().expect("4 bytes"));
    let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(&p[..16]).ok()?);
    let port = u16::from_be_bytes([p[16], p[17]]);
    let ip = match (p[18], v6.to_ipv4_mapped()) {
        (1, Some(v4)) => IpAddr::V4(v4),
        (0, _) => IpAddr::V6(v6),
        _ => return None,
    };
    let key = DrcKey {
        peer: SocketAddr::new(ip, port),
        xid: u32_at(19),
        prog: u32_at(23),
        vers: u32_at(27),
        proc_: u32_at(31),
        args_checksum: u64::from_be_bytes(p[35..43].try_into().ok()?),
        caller: u64::from_be_bytes(p[43..51].try_into().ok()?),
    };
    Some((key, vec![Bytes::copy_from_slice(&p[KEY_BYTES..])]))
}

fn crc(seq: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_be_bytes());
    h.update(payload);
    h.finalize()
}

impl FileReplyJournal {
    /// Opens the journal in `dir` (making it the first time) and returns
    /// the entries it holds, oldest first, for the reply cache to preload.
    pub fn open(dir: &Path) -> io::Result<(FileReplyJournal, Vec<Entry>)> {
        let path = dir.join(FILE_NAME);
        let file = keel_store::state_file::open(&path)?;
        if file.metadata()?.len() != FILE_BYTES {
            // Allocated and written once, so records overwrite in place.
            file.set_len(0)?;
            let zeros = vec![0u8; 1 << 20];
            for i in 0..FILE_BYTES / zeros.len() as u64 {
                file.write_all_at(&zeros, i * zeros.len() as u64)?;
            }
            file.sync_all()?;
            keel_store::state_file::sync_dir(dir)?;
        }
        let mut image = vec![0u8; FILE_BYTES as usize];
        file.read_exact_at(&mut image, 0)?;
        let mut found = Vec::new();
        let mut slot = 0;
        while slot < SLOTS {
            let at = slot * SLOT_BYTES;
            let h = &image[at..at + HEADER_BYTES];
            let magic = u32::from_be_bytes(h[..4].try_into().expect("4 bytes"));
            let len = u32::from_be_bytes(h[4..8].try_into().expect("4 bytes")) as usize;
            let seq = u64::from_be_bytes(h[8..16].try_into().expect("8 bytes"));
            let sum = u32::from_be_bytes(h[16..20].try_into().expect("4 bytes"));
            let end = at + HEADER_BYTES + len;
            if magic == MAGIC && len <= RECORD_BYTES_MAX && end <= image.len() {
                let payload = &image[at + HEADER_BYTES..end];
                if crc(seq, payload) == sum
                    && let Some(entry) = decode_payload(payload)
                {
                    let end = slot + (HEADER_BYTES + len).div_ceil(SLOT_BYTES);
                    found.push((seq, end, entry));
                    slot = end;
                    continue;
                }
            }
            slot += 1;
        }
        found.sort_by_key(|(seq, ..)| *seq);
        // After the newest record (`found` holds each record's end slot).
        let head = found.last().map_or((0, 1), |(seq, end, _)| (end % SLOTS, seq + 1));
        let journal = FileReplyJournal {
            file,
            head: Mutex::new(head),
            sync: Mutex::new(SyncState::default()),
            synced: Condvar::new(),
        };
        Ok((journal, found.into_iter().map(|(_, _, e)| e).collect()))
    }

    fn write(&self, key: &DrcKey, reply: &[Bytes]) -> io::Result<()> {
        if !journaled(key) {
            return Ok(());
        }
        let len = KEY_BYTES + reply.iter().map(Bytes::len).sum::<usize>();
        if len > RECORD_BYTES_MAX {
            return Ok(());
        }
        let slots = (HEADER_BYTES + len).div_ceil(SLOT_BYTES);
        let (slot, seq) = {
            let mut head = self.head.lock().expect("journal head lock");
            if head.0 + slots > SLOTS {
                head.0 = 0;
            }
            let taken = *head;
            *head = (head.0 + slots, head.1 + 1);
            taken
        };
        let mut record = BytesMut::with_capacity(slots * SLOT_BYTES);
        record.put_u32(MAGIC);
        record.put_u32(len as u32);
        record.put_u64(seq);
        record.put_u32(0);
        put_payload(&mut record, key, reply);
        let sum = crc(seq, &record[HEADER_BYTES..]);
        record[CRC_AT..HEADER_BYTES].copy_from_slice(&sum.to_be_bytes());
        // Zero to the end of the last slot: no stale header survives inside.
        record.resize(slots * SLOT_BYTES, 0);
        self.file.write_all_at(&record, (slot * SLOT_BYTES) as u64)?;
        self.sync_after_write()
    }

    fn sync_after_write(&self) -> io::Result<()> {
        let mut st = self.sync.lock().expect("journal sync lock");
        let needed = st.started + 1;
        loop {
            if st.done >= needed && !st.failed {
                return Ok(());
            }
            if !st.running {
                st.running = true;
                st.started += 1;
                let number = st.started;
                drop(st);
                let result = self.file.sync_data();
                st = self.sync.lock().expect("journal sync lock");
                st.running = false;
                st.done = number;
                st.failed = result.is_err();
                self.synced.notify_all();
                if number >= needed {
                    return result;
                }
                continue;
            }
            st = self.synced.wait(st).expect("journal sync lock");
        }
    }
}

impl ReplyJournal for FileReplyJournal {
    fn record(&self, key: &DrcKey, reply: &[Bytes]) {
        if let Err(e) = self.write(key, reply) {
            tracing::error!(error = %e, xid = key.xid, client = %key.peer,
                "cannot record a reply on the shared storage: a retransmission after a failover would run the call again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(xid: u32, peer: &str) -> DrcKey {
        DrcKey {
            peer: peer.parse().unwrap(),
            xid,
            prog: 100003,
            vers: 3,
            proc_: 12,
            args_checksum: u64::from(xid) * 7,
            caller: 9,
        }
    }

    #[test]
    fn records_come_back_in_order_across_reopens_and_wraps() {
        let dir = std::env::temp_dir().join(format!("keel-reply-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (j, found) = FileReplyJournal::open(&dir).unwrap();
        assert!(found.is_empty());
        j.record(&key(1, "10.0.0.1:700"), &[Bytes::from_static(b"first"), Bytes::from_static(b" reply")]);
        j.record(&key(2, "[2001:db8::1]:800"), &[Bytes::from(vec![7u8; 1500])]);
        let write = DrcKey { proc_: Nfs3Proc::Write as u32, ..key(3, "10.0.0.1:700") };
        j.record(&write, &[Bytes::from_static(b"not journaled")]);
        drop(j);
        let (j, found) = FileReplyJournal::open(&dir).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].0, key(1, "10.0.0.1:700"));
        assert_eq!(found[0].1.concat(), b"first reply");
        assert_eq!(found[1].0, key(2, "[2001:db8::1]:800"));
        assert_eq!(found[1].1.concat(), vec![7u8; 1500]);

        // Past the end of the ring, the oldest go; the newest stay, in order.
        let big = Bytes::from(vec![1u8; 4000]);
        let per_record = (HEADER_BYTES + KEY_BYTES + 4000).div_ceil(SLOT_BYTES);
        let n = SLOTS / per_record + 10;
        for xid in 100..100 + n as u32 {
            j.record(&key(xid, "10.0.0.2:900"), std::slice::from_ref(&big));
        }
        drop(j);
        let (_, found) = FileReplyJournal::open(&dir).unwrap();
        let xids: Vec<u32> = found.iter().map(|(k, _)| k.xid).collect();
        assert_eq!(*xids.last().unwrap(), 100 + n as u32 - 1, "the newest record is kept");
        assert!(xids.windows(2).all(|w| w[0] < w[1]), "oldest first");
        assert!(!xids.contains(&1) && !xids.contains(&100), "the oldest were overwritten");

        // A torn record (the bytes after its header never written) is skipped.
        let file = std::fs::OpenOptions::new().write(true).open(dir.join(FILE_NAME)).unwrap();
        let (_, before) = FileReplyJournal::open(&dir).unwrap();
        let last_slot = {
            let (j, _) = FileReplyJournal::open(&dir).unwrap();
            let head = j.head.lock().unwrap().0;
            head - per_record
        };
        file.write_all_at(&[0xff; 100], (last_slot * SLOT_BYTES + HEADER_BYTES + 10) as u64).unwrap();
        let (_, after) = FileReplyJournal::open(&dir).unwrap();
        assert_eq!(after.len(), before.len() - 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

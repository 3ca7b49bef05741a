//! The server's own files (the state directory, the NSM state, the mount
//! list, the cache device record, the reply journal, the connection list,
//! the handle key): every file and directory the server makes for itself
//! is made here, with an explicit mode, since the server runs with umask 0
//! (files 0600, directories 0700: root's alone).
//!
//! Two ways to write them:
//! - [`replace_durably`]: replaced whole, so that a crash leaves the old
//!   file or the new one, never a torn one, and durably, so that what a
//!   failover's new node reads is what the old node last wrote. It needs
//!   a new inode and new blocks: it fails on a full file system.
//! - [`RecordFile`]: a small record rewritten in place in one of two
//!   slots of a file made once at its full size, for what is written at
//!   every start or often (the NSM state number, the connection list): it
//!   needs no new block, so it works on a full file system, and a torn
//!   write leaves the previous record in the other slot.
//! - [`RecordDir`]: a directory of small records, one file per key, each
//!   replaced durably, for what is kept per client (`record_dir.rs`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

mod record_dir;
pub use record_dir::{Loaded, RECORD_DIR_ENTRY_BYTES_MAX, RecordDir, RecordDirError, SkipReason, Skipped};

/// The mode of every file the server keeps for itself.
pub const FILE_MODE: u32 = 0o600;
/// The mode of every directory the server keeps for itself.
pub const DIR_MODE: u32 = 0o700;

/// Makes `dir` and any missing parent, mode 0700. One that exists is left
/// as it is (see [`make_private`]).
pub fn create_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Takes group and other access away from `path` (a file or directory of
/// the server's own that an older version made with a looser mode).
/// Returns whether it had any.
pub fn make_private(path: &Path) -> io::Result<bool> {
    let meta = fs::symlink_metadata(path)?;
    let mode = meta.mode() & 0o7777;
    if meta.file_type().is_symlink() || mode & 0o077 == 0 {
        return Ok(false);
    }
    let private = if meta.is_dir() { DIR_MODE } else { FILE_MODE };
    fs::set_permissions(path, fs::Permissions::from_mode(private))?;
    Ok(true)
}

/// Opens `path` for reading and writing, making it (mode 0600, empty) if
/// there is none. An existing file keeps its contents; a mode looser than
/// 0600 is tightened (the mode only applies when the file is made).
pub fn open(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(FILE_MODE).open(path)?;
    tighten(&file)?;
    Ok(file)
}

fn tighten(file: &File) -> io::Result<()> {
    if file.metadata()?.mode() & 0o077 != 0 {
        file.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
    }
    Ok(())
}

/// Writes `data` to `path` (mode 0600) through a temporary file, synced,
/// renamed over `path`, with the directory synced after.
pub fn replace_durably(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = Path::new(&tmp);
    let placed = write_synced(tmp, data).and_then(|()| fs::rename(tmp, path));
    if let Err(e) = placed {
        // A full file system fails the write: what it took goes with it.
        let _ = fs::remove_file(tmp);
        return Err(e);
    }
    sync_dir(parent_of(path))
}

fn write_synced(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).create(true).truncate(true).mode(FILE_MODE).open(path)?;
    // A temporary left by a crash keeps the mode it was made with.
    tighten(&f)?;
    f.write_all(data)?;
    f.sync_all()
}

fn parent_of(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Makes the directory's entries (a file made, renamed or removed) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// "KREC": the start of a slot that holds a record.
const RECORD_MAGIC: u32 = 0x4b52_4543;
/// Magic, sequence number, payload length, CRC32 of the sequence number,
/// the length and the payload.
const RECORD_HEADER_BYTES: usize = 4 + 8 + 4 + 4;
/// Slots start on sector boundaries, so that one slot's write never
/// shares a sector with the other's.
const SLOT_ALIGN: usize = 512;

/// A small record rewritten in place (see the module's doc). The file is
/// two slots of `slot_bytes`; each write goes to the slot that does not
/// hold the last record, then is synced, so the last record survives a
/// torn write. The blocks are allocated once, when the file is made (or
/// grown from an older format): zeros are written over them.
pub struct RecordFile {
    file: File,
    slot_bytes: usize,
    /// The last record's sequence number (0: none yet).
    seq: u64,
    /// The slot the next record goes to.
    next: usize,
}

/// What a record file held when it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// Nothing: made just now, or all zeros.
    Nothing,
    /// The last record written.
    Record(Vec<u8>),
    /// No slot holds a record, but the file is not empty: a file of an
    /// older format (its bytes), or damage.
    Unrecognised(Vec<u8>),
}

fn record_crc(seq: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_be_bytes());
    h.update(&(payload.len() as u32).to_be_bytes());
    h.update(payload);
    h.finalize()
}

/// The record in `slot`, if one is whole there: its sequence number and
/// payload.
fn decode_slot(slot: &[u8]) -> Option<(u64, &[u8])> {
    let u32_at = |i: usize| u32::from_be_bytes(slot[i..i + 4].try_into().expect("4 bytes"));
    if slot.len() < RECORD_HEADER_BYTES || u32_at(0) != RECORD_MAGIC {
        return None;
    }
    let seq = u64::from_be_bytes(slot[4..12].try_into().expect("8 bytes"));
    let len = u32_at(12) as usize;
    let payload = slot.get(RECORD_HEADER_BYTES..RECORD_HEADER_BYTES.checked_add(len)?)?;
    (seq > 0 && u32_at(16) == record_crc(seq, payload)).then_some((seq, payload))
}

impl RecordFile {
    /// Opens the record file at `path` with slots of `slot_bytes` (a
    /// multiple of 512: the same for every open of the file), making it
    /// if there is none, and returns what it holds. A file shorter than
    /// two slots (an older format) is grown in place, keeping its bytes.
    pub fn open(path: &Path, slot_bytes: usize) -> io::Result<(RecordFile, Stored)> {
        assert!(slot_bytes > RECORD_HEADER_BYTES && slot_bytes.is_multiple_of(SLOT_ALIGN), "slot size {slot_bytes}");
        let existed = path.exists();
        let file = open(path)?;
        let full = 2 * slot_bytes;
        let len = usize::try_from(file.metadata()?.len()).unwrap_or(usize::MAX).min(full);
        let mut image = vec![0u8; full];
        file.read_exact_at(&mut image[..len], 0)?;
        let slots = [decode_slot(&image[..slot_bytes]), decode_slot(&image[slot_bytes..])];
        let newest = (0..2).filter(|&i| slots[i].is_some()).max_by_key(|&i| slots[i].map(|(seq, _)| seq));
        let stored = match newest {
            Some(i) => Stored::Record(slots[i].expect("a record").1.to_vec()),
            None if image.iter().all(|&b| b == 0) => Stored::Nothing,
            None => Stored::Unrecognised(image[..len].to_vec()),
        };
        let seq = newest.and_then(|i| slots[i]).map_or(0, |(seq, _)| seq);
        if len < full {
            // Zeros, not a hole or fallocate's unwritten extents: the
            // blocks are allocated and written now, so no later write
            // in place allocates or converts anything.
            file.write_all_at(&image[len..], len as u64)?;
            file.sync_all()?;
            if !existed {
                sync_dir(parent_of(path))?;
            }
        }
        // Slot 0 may hold an older format's bytes: they go last.
        let next = newest.map_or(1, |i| 1 - i);
        Ok((RecordFile { file, slot_bytes, seq, next }, stored))
    }

    /// What [`RecordFile::open`] would return as stored, without making or
    /// changing anything; `Nothing` if there is no file.
    pub fn read(path: &Path, slot_bytes: usize) -> io::Result<Stored> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Stored::Nothing),
            Err(e) => return Err(e),
        };
        let slot = |i: usize| bytes.get(i * slot_bytes..((i + 1) * slot_bytes).min(bytes.len())).and_then(decode_slot);
        let newest = [slot(0), slot(1)].into_iter().flatten().max_by_key(|(seq, _)| *seq);
        Ok(match newest {
            Some((_, payload)) => Stored::Record(payload.to_vec()),
            None if bytes.iter().all(|&b| b == 0) => Stored::Nothing,
            None => Stored::Unrecognised(bytes),
        })
    }

    /// The longest payload a record can have.
    pub fn payload_bytes_max(&self) -> usize {
        self.slot_bytes - RECORD_HEADER_BYTES
    }

    /// Writes `payload` as the new record, in place, and syncs it. A
    /// payload longer than [`RecordFile::payload_bytes_max`] is refused.
    pub fn write(&mut self, payload: &[u8]) -> io::Result<()> {
        if payload.len() > self.payload_bytes_max() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a record of {} bytes; at most {} fit", payload.len(), self.payload_bytes_max()),
            ));
        }
        let seq = self.seq + 1;
        let mut slot = Vec::with_capacity(RECORD_HEADER_BYTES + payload.len());
        slot.extend_from_slice(&RECORD_MAGIC.to_be_bytes());
        slot.extend_from_slice(&seq.to_be_bytes());
        slot.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        slot.extend_from_slice(&record_crc(seq, payload).to_be_bytes());
        slot.extend_from_slice(payload);
        self.file.write_all_at(&slot, (self.next * self.slot_bytes) as u64)?;
        // Data only: the file's size and blocks do not change.
        self.file.sync_data()?;
        // A failed write leaves `next` as it was: the slot it may have
        // torn is the one to write again, the other holds the last record.
        self.seq = seq;
        self.next = 1 - self.next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("keel-state-file-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        create_dir(&dir).unwrap();
        dir
    }

    #[test]
    fn a_replaced_file_holds_the_new_data_and_leaves_no_temporary() {
        let dir = test_dir("replace");
        let path = dir.join("state");
        replace_durably(&path, b"one").unwrap();
        replace_durably(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        assert!(replace_durably(&dir.join("missing/state"), b"x").is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn what_is_made_here_is_private_even_over_a_leftover() {
        let dir = test_dir("modes");
        let loose = dir.join("loose.tmp");
        fs::write(&loose, b"left by a crash").unwrap();
        fs::set_permissions(&loose, fs::Permissions::from_mode(0o666)).unwrap();
        replace_durably(&dir.join("loose"), b"data").unwrap();
        open(&dir.join("opened")).unwrap();
        RecordFile::open(&dir.join("record"), 512).unwrap();
        create_dir(&dir.join("sub/dir")).unwrap();
        for name in ["loose", "opened", "record", "sub", "sub/dir"] {
            let meta = fs::metadata(dir.join(name)).unwrap();
            let want = if meta.is_dir() { DIR_MODE } else { FILE_MODE };
            assert_eq!(meta.mode() & 0o7777, want, "{name}");
        }
        fs::set_permissions(dir.join("sub"), fs::Permissions::from_mode(0o777)).unwrap();
        assert!(make_private(&dir.join("sub")).unwrap());
        assert!(!make_private(&dir.join("sub")).unwrap());
        assert_eq!(fs::metadata(dir.join("sub")).unwrap().mode() & 0o7777, DIR_MODE);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_record_survives_reopens_and_a_torn_write_of_the_next() {
        let dir = test_dir("record");
        let path = dir.join("record");
        let (mut r, stored) = RecordFile::open(&path, 512).unwrap();
        assert_eq!(stored, Stored::Nothing);
        assert_eq!(fs::metadata(&path).unwrap().len(), 1024);
        r.write(b"first").unwrap();
        r.write(b"second").unwrap();
        drop(r);
        let (mut r, stored) = RecordFile::open(&path, 512).unwrap();
        assert_eq!(stored, Stored::Record(b"second".to_vec()));
        assert_eq!(RecordFile::read(&path, 512).unwrap(), Stored::Record(b"second".to_vec()));
        r.write(b"third").unwrap();
        assert!(r.write(&[0; 512]).is_err(), "too long for a slot");
        drop(r);
        // A torn write of the next record: its slot (the older) garbled.
        let (r, _) = RecordFile::open(&path, 512).unwrap();
        let torn = r.next * 512;
        drop(r);
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0xff; 40], torn as u64 + 10).unwrap();
        let (_, stored) = RecordFile::open(&path, 512).unwrap();
        assert_eq!(stored, Stored::Record(b"third".to_vec()));
        assert_eq!(fs::metadata(&path).unwrap().len(), 1024, "never grows");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_older_format_is_returned_and_kept_until_the_second_record() {
        let dir = test_dir("legacy");
        let path = dir.join("state");
        fs::write(&path, b"41\n").unwrap();
        let (mut r, stored) = RecordFile::open(&path, 512).unwrap();
        assert_eq!(stored, Stored::Unrecognised(b"41\n".to_vec()));
        assert_eq!(fs::metadata(&path).unwrap().len(), 1024);
        r.write(b"43\n").unwrap();
        assert_eq!(&fs::read(&path).unwrap()[..3], b"41\n", "the first record goes to the other slot");
        drop(r);
        assert_eq!(RecordFile::open(&path, 512).unwrap().1, Stored::Record(b"43\n".to_vec()));
        fs::remove_dir_all(&dir).unwrap();
    }
}

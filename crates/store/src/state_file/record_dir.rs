//! [`RecordDir`]: a directory of small records, one file per key, for
//! what the server must find again after a restart or a failover, record
//! by record (NFSv4.1's client records, as knfsd's v4 recovery directory
//! keeps one entry per client).
//!
//! Each record is its own file, written through [`replace_durably`] (a
//! temporary file, synced, renamed into place, the directory synced), so
//! a `put` or a `remove` is on stable storage when it returns, and a crash
//! at any point leaves every record whole: the old version or the new.
//! A file holds a magic number, the key, the data and a CRC32 of them; its
//! name is a hash of the key, only to spread the files (two keys of the
//! same hash get names of their own). At [`RecordDir::open`], temporaries
//! left by a crash are removed, and a file that is not a whole record
//! (damaged, truncated, someone else's) is reported and left where it is,
//! never fatal to the others. The directory is made by the first `put`:
//! a start makes nothing, so it works on a full file system (a
//! failover's survivor may find one).

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::{create_dir, make_private, replace_durably, sync_dir};

/// "KRD1": the start of a record file.
const MAGIC: [u8; 4] = *b"KRD1";
/// Magic, key length, data length, CRC32.
const HEADER_BYTES: usize = 4 + 4 + 4 + 4;
/// The largest key and data of one record together.
pub const RECORD_DIR_ENTRY_BYTES_MAX: usize = 8192;
/// What a temporary of [`replace_durably`] ends with.
const TEMPORARY_SUFFIX: &str = ".tmp";

/// Why a record directory cannot be used or changed. Each names the path.
#[derive(Debug, thiserror::Error)]
pub enum RecordDirError {
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{} holds {records_max} records, as many as it may: no room for another", dir.display())]
    Full { dir: PathBuf, records_max: usize },
    #[error("{}: a record of {bytes} bytes; at most {RECORD_DIR_ENTRY_BYTES_MAX} fit", dir.display())]
    TooLarge { dir: PathBuf, bytes: usize },
}

impl From<RecordDirError> for io::Error {
    /// Keeps the kind of the system's error (a full file system stays
    /// `StorageFull`), with the typed error, which names the path, inside.
    fn from(e: RecordDirError) -> io::Error {
        let kind = match &e {
            RecordDirError::Io { source, .. } => source.kind(),
            RecordDirError::Full { .. } => io::ErrorKind::QuotaExceeded,
            RecordDirError::TooLarge { .. } => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, e)
    }
}

/// A file [`RecordDir::open`] found and did not take as a record.
#[derive(Debug)]
pub struct Skipped {
    pub path: PathBuf,
    pub why: SkipReason,
}

#[derive(Debug)]
pub enum SkipReason {
    /// Not a whole record: truncated, garbled, or not a record file at
    /// all. Left in place for the operator to look at.
    Damaged,
    /// Could not be read.
    Unreadable(io::Error),
    /// A second file for a key already loaded (only a hand-made copy can
    /// do that): removed, or its key's removal would not last.
    Duplicate,
    /// Past the directory's bound: left in place, not loaded.
    PastBound,
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::Damaged => f.write_str("not a whole record (damaged or not written by Keel)"),
            SkipReason::Unreadable(e) => write!(f, "unreadable: {e}"),
            SkipReason::Duplicate => f.write_str("a second record of the same key, removed"),
            SkipReason::PastBound => f.write_str("past the bound on records, not loaded"),
        }
    }
}

/// What [`RecordDir::open`] found.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Every whole record: its key and data.
    pub records: Vec<(Vec<u8>, Vec<u8>)>,
    /// The files it did not take, and why: the caller reports them.
    pub skipped: Vec<Skipped>,
}

/// A directory of at most `records_max` records (see the module's doc).
#[derive(Debug)]
pub struct RecordDir {
    dir: PathBuf,
    records_max: usize,
    /// Whether the directory exists (else the first put makes it).
    made: bool,
    /// Each key's file name.
    files: HashMap<Vec<u8>, OsString>,
    /// Every file name in use: records' and damaged files' (never
    /// overwritten, so that what the operator is told about stays).
    names: HashSet<OsString>,
}

/// FNV-1a: stable across builds and versions; collisions are handled.
fn key_hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

fn record_crc(key: &[u8], data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&(key.len() as u32).to_be_bytes());
    h.update(&(data.len() as u32).to_be_bytes());
    h.update(key);
    h.update(data);
    h.finalize()
}

fn encode(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + key.len() + data.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(&record_crc(key, data).to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(data);
    out
}

/// The key and data of a whole record file, if `bytes` is one.
fn decode(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let u32_at = |i: usize| bytes.get(i..i + 4).map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")));
    if bytes.get(..4)? != MAGIC {
        return None;
    }
    let (key_len, data_len, crc) = (u32_at(4)? as usize, u32_at(8)? as usize, u32_at(12)?);
    if HEADER_BYTES.checked_add(key_len)?.checked_add(data_len)? != bytes.len() {
        return None;
    }
    let (key, data) = bytes[HEADER_BYTES..].split_at(key_len);
    (record_crc(key, data) == crc).then_some((key, data))
}

/// Reads one file, at most a whole record's worth (a larger file is no
/// record of ours, and is not read whole).
fn read_bounded(path: &Path) -> io::Result<Vec<u8>> {
    let limit = (HEADER_BYTES + RECORD_DIR_ENTRY_BYTES_MAX + 1) as u64;
    let mut bytes = Vec::new();
    fs::File::open(path)?.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

impl RecordDir {
    /// Opens the directory `dir` (tightened to mode 0700 if looser; made,
    /// 0700, by the first put if missing) and returns every record in it
    /// that `valid` accepts
    /// (given its key and data: the caller's own check of what it wrote).
    /// Only a directory that cannot be made, read or listed is an error; a
    /// file that is not a whole, valid record is skipped (see
    /// [`Loaded::skipped`]).
    pub fn open(
        dir: &Path,
        records_max: usize,
        valid: impl Fn(&[u8], &[u8]) -> bool,
    ) -> Result<(RecordDir, Loaded), RecordDirError> {
        let io_err = |action| move |source| RecordDirError::Io { path: dir.to_owned(), action, source };
        let mut rd =
            RecordDir { dir: dir.to_owned(), records_max, made: true, files: HashMap::new(), names: HashSet::new() };
        let mut loaded = Loaded::default();
        match fs::symlink_metadata(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                rd.made = false;
                return Ok((rd, loaded));
            }
            Err(e) => return Err(io_err("examine the directory")(e)),
            Ok(meta) if !meta.is_dir() => {
                return Err(io_err("use it")(io::Error::new(io::ErrorKind::NotADirectory, "not a directory")));
            }
            Ok(_) => {}
        }
        make_private(dir).map_err(io_err("make the directory private"))?;
        let mut removed = false;
        for entry in fs::read_dir(dir).map_err(io_err("list the directory"))? {
            let name = entry.map_err(io_err("list the directory"))?.file_name();
            let path = dir.join(&name);
            if name.as_encoded_bytes().ends_with(TEMPORARY_SUFFIX.as_bytes()) {
                // A put cut short by a crash: its record is the old one.
                match fs::remove_file(&path) {
                    Ok(()) => removed = true,
                    Err(e) => loaded.skipped.push(Skipped { path, why: SkipReason::Unreadable(e) }),
                }
                continue;
            }
            if let Some(why) = rd.load_one(&path, &name, &valid, &mut loaded.records) {
                loaded.skipped.push(Skipped { path, why });
            }
        }
        if removed {
            sync_dir(dir).map_err(io_err("sync the directory"))?;
        }
        Ok((rd, loaded))
    }

    /// Loads the record in `path`; why not, if it is not taken.
    fn load_one(
        &mut self,
        path: &Path,
        name: &OsString,
        valid: &impl Fn(&[u8], &[u8]) -> bool,
        records: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Option<SkipReason> {
        self.names.insert(name.clone());
        if self.files.len() >= self.records_max {
            return Some(SkipReason::PastBound);
        }
        let meta = match fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) => return Some(SkipReason::Unreadable(e)),
        };
        if !meta.is_file() {
            return Some(SkipReason::Damaged);
        }
        let bytes = match read_bounded(path) {
            Ok(b) => b,
            Err(e) => return Some(SkipReason::Unreadable(e)),
        };
        let Some((key, data)) = decode(&bytes).filter(|(key, data)| valid(key, data)) else {
            return Some(SkipReason::Damaged);
        };
        if self.files.contains_key(key) {
            self.names.remove(name);
            return Some(match fs::remove_file(path) {
                Ok(()) => SkipReason::Duplicate,
                Err(e) => SkipReason::Unreadable(e),
            });
        }
        // An older version, or a copy by hand, may have left it looser.
        if let Err(e) = make_private(path) {
            return Some(SkipReason::Unreadable(e));
        }
        self.files.insert(key.to_vec(), name.clone());
        records.push((key.to_vec(), data.to_vec()));
        None
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub fn records_max(&self) -> usize {
        self.records_max
    }

    /// Makes `data` the record of `key`, durably: on stable storage when
    /// this returns, replacing the key's last one. A new key past
    /// `records_max` is refused, as is a record too large; a failure
    /// leaves the last record of the key as it was.
    pub fn put(&mut self, key: &[u8], data: &[u8]) -> Result<(), RecordDirError> {
        let bytes = key.len() + data.len();
        if bytes > RECORD_DIR_ENTRY_BYTES_MAX {
            return Err(RecordDirError::TooLarge { dir: self.dir.clone(), bytes });
        }
        let name = match self.files.get(key) {
            Some(name) => name.clone(),
            None if self.files.len() >= self.records_max => {
                return Err(RecordDirError::Full { dir: self.dir.clone(), records_max: self.records_max });
            }
            None => self.free_name(key),
        };
        if !self.made {
            self.make()?;
        }
        let path = self.dir.join(&name);
        replace_durably(&path, &encode(key, data)).map_err(|source| RecordDirError::Io {
            path,
            action: "write the record",
            source,
        })?;
        self.names.insert(name.clone());
        self.files.insert(key.to_vec(), name);
        Ok(())
    }

    /// Makes the directory, durably: its entry in its parent is synced.
    fn make(&mut self) -> Result<(), RecordDirError> {
        let io_err = |path: &Path, action| {
            let path = path.to_owned();
            move |source| RecordDirError::Io { path, action, source }
        };
        create_dir(&self.dir).map_err(io_err(&self.dir, "create the directory"))?;
        let parent = self.dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        sync_dir(parent).map_err(io_err(parent, "sync the directory"))?;
        self.made = true;
        Ok(())
    }

    /// Removes the record of `key`, if any, durably.
    pub fn remove(&mut self, key: &[u8]) -> Result<(), RecordDirError> {
        let Some(name) = self.files.get(key) else { return Ok(()) };
        let path = self.dir.join(name);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(RecordDirError::Io { path, action: "remove the record", source }),
        }
        // Forgotten here only once gone from the disk too: a failed sync
        // is retried by the next removal.
        sync_dir(&self.dir).map_err(|source| RecordDirError::Io {
            path: self.dir.clone(),
            action: "sync the directory",
            source,
        })?;
        let name = self.files.remove(key).expect("looked up above");
        self.names.remove(&name);
        Ok(())
    }

    /// A file name for a new key: its hash, and a number after it if
    /// another file has that name.
    fn free_name(&self, key: &[u8]) -> OsString {
        let base = format!("{:016x}", key_hash(key));
        (0..)
            .map(|n| OsString::from(if n == 0 { base.clone() } else { format!("{base}-{n}") }))
            .find(|name| !self.names.contains(name))
            .expect("fewer names in use than numbers")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn test_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("keel-record-dir-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn any(_: &[u8], _: &[u8]) -> bool {
        true
    }

    fn sorted(mut v: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
        v.sort();
        v
    }

    fn kv(k: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
        (k.as_bytes().to_vec(), v.as_bytes().to_vec())
    }

    #[test]
    fn records_survive_a_reopen_with_their_replacements_and_removals() {
        let dir = test_dir("reopen");
        let (mut rd, loaded) = RecordDir::open(&dir, 8, any).unwrap();
        assert!(loaded.records.is_empty() && loaded.skipped.is_empty());
        rd.put(b"a", b"one").unwrap();
        rd.put(b"b", b"two").unwrap();
        rd.put(b"a", b"three").unwrap();
        rd.put(b"c", b"four").unwrap();
        rd.remove(b"c").unwrap();
        rd.remove(b"never").unwrap();
        drop(rd);
        let (rd, loaded) = RecordDir::open(&dir, 8, any).unwrap();
        assert_eq!(sorted(loaded.records), vec![kv("a", "three"), kv("b", "two")]);
        assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
        assert_eq!(rd.len(), 2);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2, "one file a record, no temporary");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A start makes nothing (it works on a full file system); the first
    /// put makes the directory, 0700.
    #[test]
    fn the_directory_is_made_by_the_first_put() {
        let dir = test_dir("lazy");
        let (mut rd, loaded) = RecordDir::open(&dir, 8, any).unwrap();
        assert!(loaded.records.is_empty() && !dir.exists());
        rd.remove(b"a").unwrap();
        assert!(!dir.exists());
        rd.put(b"a", b"x").unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o7777, 0o700);
        drop(rd);
        assert_eq!(RecordDir::open(&dir, 8, any).unwrap().1.records, vec![kv("a", "x")]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_are_private_and_a_looser_directory_is_tightened() {
        let dir = test_dir("modes");
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let (mut rd, _) = RecordDir::open(&dir, 8, any).unwrap();
        rd.put(b"a", b"x").unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o7777, 0o700);
        let file = fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
        assert_eq!(fs::metadata(&file).unwrap().mode() & 0o7777, 0o600);
        // A record copied in by hand with a loose mode is tightened.
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
        drop(rd);
        RecordDir::open(&dir, 8, any).unwrap();
        assert_eq!(fs::metadata(&file).unwrap().mode() & 0o7777, 0o600);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Crash points: a temporary left by a put cut short, a record file
    /// truncated or garbled (what a torn write on a file system without
    /// ordered data, or a bad sector, leaves), an empty file, a stranger's
    /// file, a directory. None stops the others from loading.
    #[test]
    fn damage_and_leftovers_are_reported_and_skipped_never_fatal() {
        let dir = test_dir("damage");
        let (mut rd, _) = RecordDir::open(&dir, 16, any).unwrap();
        for k in ["a", "b", "c", "d"] {
            rd.put(k.as_bytes(), format!("data of {k}").as_bytes()).unwrap();
        }
        let file_of = |rd: &RecordDir, k: &str| dir.join(&rd.files[k.as_bytes()]);
        let (b, c, d) = (file_of(&rd, "b"), file_of(&rd, "c"), file_of(&rd, "d"));
        let rd_files_a = rd.files[b"a".as_slice()].clone();
        drop(rd);
        let len = fs::metadata(&b).unwrap().len();
        fs::OpenOptions::new().write(true).open(&b).unwrap().set_len(len - 3).unwrap();
        let mut garbled = fs::read(&c).unwrap();
        let last = garbled.len() - 1;
        garbled[last] ^= 0x40;
        fs::write(&c, garbled).unwrap();
        fs::write(&d, b"").unwrap();
        fs::write(dir.join("0123456789abcdef.tmp"), b"KRD1 half a record").unwrap();
        // A put of a's next version cut short after its temporary was
        // whole but before the rename: a's last record is the one.
        let a = dir.join(&rd_files_a);
        let mut next = a.clone().into_os_string();
        next.push(TEMPORARY_SUFFIX);
        fs::write(&next, encode(b"a", b"newer, never renamed")).unwrap();
        fs::write(dir.join("README"), b"not ours").unwrap();
        fs::create_dir(dir.join("subdir")).unwrap();
        let (mut rd, loaded) = RecordDir::open(&dir, 16, any).unwrap();
        assert_eq!(loaded.records, vec![kv("a", "data of a")]);
        let mut skipped: Vec<_> = loaded.skipped.iter().map(|s| s.path.clone()).collect();
        skipped.sort();
        let mut want = vec![b, c.clone(), d, dir.join("README"), dir.join("subdir")];
        want.sort();
        assert_eq!(skipped, want);
        assert!(loaded.skipped.iter().all(|s| matches!(s.why, SkipReason::Damaged)), "{:?}", loaded.skipped);
        assert!(!dir.join("0123456789abcdef.tmp").exists() && !Path::new(&next).exists(), "temporaries removed");
        // A damaged file is left for the operator, never overwritten: the
        // key it held gets a file of its own.
        rd.put(b"c", b"again").unwrap();
        assert!(c.exists());
        drop(rd);
        let (_, loaded) = RecordDir::open(&dir, 16, any).unwrap();
        assert_eq!(sorted(loaded.records), vec![kv("a", "data of a"), kv("c", "again")]);
        // A whole file whose data the caller does not accept is damaged too.
        let (_, loaded) = RecordDir::open(&dir, 16, |_, data| data != b"again").unwrap();
        assert_eq!(loaded.records, vec![kv("a", "data of a")]);
        assert_eq!(loaded.skipped.len(), 6);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn records_are_bounded_and_too_large_ones_refused() {
        let dir = test_dir("bound");
        let (mut rd, _) = RecordDir::open(&dir, 2, any).unwrap();
        rd.put(b"a", b"1").unwrap();
        rd.put(b"b", b"2").unwrap();
        assert!(matches!(rd.put(b"c", b"3"), Err(RecordDirError::Full { records_max: 2, .. })));
        rd.put(b"a", b"replaced").unwrap();
        let big = vec![0u8; RECORD_DIR_ENTRY_BYTES_MAX];
        let e = rd.put(b"b", &big).unwrap_err();
        assert!(matches!(e, RecordDirError::TooLarge { .. }) && e.to_string().contains(&*dir.to_string_lossy()));
        rd.remove(b"b").unwrap();
        rd.put(b"c", b"3").unwrap();
        drop(rd);
        // A directory holding more than the bound (a smaller bound
        // configured since): the bound is loaded, the rest reported.
        let (_, loaded) = RecordDir::open(&dir, 1, any).unwrap();
        assert_eq!(loaded.records.len(), 1);
        assert!(matches!(loaded.skipped.as_slice(), [Skipped { why: SkipReason::PastBound, .. }]));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn keys_of_the_same_hash_get_files_of_their_own() {
        let dir = test_dir("collide");
        let (mut rd, _) = RecordDir::open(&dir, 8, any).unwrap();
        rd.put(b"other", b"1").unwrap();
        // Its file under the name key "x" hashes to, as a collision would be.
        let x_name = format!("{:016x}", key_hash(b"x"));
        fs::rename(dir.join(&rd.files[b"other".as_slice()]), dir.join(&x_name)).unwrap();
        drop(rd);
        let (mut rd, _) = RecordDir::open(&dir, 8, any).unwrap();
        rd.put(b"x", b"2").unwrap();
        assert_eq!(rd.files[b"x".as_slice()], OsString::from(format!("{x_name}-1")));
        drop(rd);
        let (_, loaded) = RecordDir::open(&dir, 8, any).unwrap();
        assert_eq!(sorted(loaded.records), vec![kv("other", "1"), kv("x", "2")]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unusable_directory_is_an_error_naming_it() {
        let dir = test_dir("unusable");
        fs::create_dir_all(dir.parent().unwrap()).unwrap();
        fs::write(&dir, b"a file where the directory should be").unwrap();
        let e = RecordDir::open(&dir, 8, any).unwrap_err();
        assert!(e.to_string().contains(&*dir.to_string_lossy()), "{e}");
        let e = RecordDir::open(&dir.join("below"), 8, any).unwrap_err();
        assert!(e.to_string().contains("below"), "{e}");
        let io: io::Error = e.into();
        assert!(io.to_string().contains("below"), "{io}");
        fs::remove_file(&dir).unwrap();
    }

    /// A full file system (a tmpfs of 64 KiB; needs root, as the suite
    /// does): a put fails with the system's error and the path, leaves no
    /// temporary taking space, and the records already there still load.
    #[test]
    fn a_full_file_system_is_an_error_not_a_panic() {
        use std::io::Write;
        let mount = test_dir("full");
        fs::create_dir_all(&mount).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "keel-test"])
            .arg(&mount)
            .status()
            .unwrap();
        assert!(mounted.success(), "mounting a tmpfs (run the tests as root)");
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg("-l").arg(self.0).status();
                let _ = fs::remove_dir_all(self.0);
            }
        }
        let _unmount = Unmount(&mount);
        let dir = mount.join("records");
        let (mut rd, _) = RecordDir::open(&dir, 8, any).unwrap();
        rd.put(b"a", b"kept").unwrap();
        let mut filler = fs::File::create(mount.join("filler")).unwrap();
        let chunk = [0u8; 4096];
        let full = (0..64).map(|_| filler.write_all(&chunk)).find_map(Result::err).expect("64 KiB fill the tmpfs");
        assert_eq!(full.raw_os_error(), Some(libc::ENOSPC));
        let e = rd.put(b"b", &[7; 2000]).unwrap_err();
        assert!(
            matches!(&e, RecordDirError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC)),
            "{e:?}"
        );
        assert!(e.to_string().contains("records"), "{e}");
        assert_eq!(io::Error::from(e).kind(), io::ErrorKind::StorageFull);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "no temporary left");
        drop(rd);
        let (mut rd, loaded) = RecordDir::open(&dir, 8, any).unwrap();
        assert_eq!(loaded.records, vec![kv("a", "kept")]);
        // Removing works on a full file system, and makes room.
        rd.remove(b"a").unwrap();
        drop(filler);
        fs::remove_file(mount.join("filler")).unwrap();
        rd.put(b"b", b"room again").unwrap();
    }
}

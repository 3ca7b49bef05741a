//! Cache devices: what the log and the statistics need of a fast device,
//! a block device or a file on an SSD file system ([`FileDevice`]), or an
//! in-memory one that fails and loses power on demand ([`SimDevice`]).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::DeviceError;
use crate::wear::{self, Wear};

use keel_store::sim::Rng;

/// The smallest device the cache takes: room for the superblocks and a
/// log that holds many of the largest writes (1 MiB).
pub const DEVICE_BYTES_MIN: u64 = 64 << 20;

/// Positional I/O on one cache device (buffered: any offset and length;
/// the log writes whole 512-byte sectors). `sync` makes every completed
/// write durable (a flush of the device's write cache).
pub trait DeviceIo: Send + Sync {
    fn size(&self) -> u64;
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    fn sync(&self) -> io::Result<()>;
    /// The device's own account of its wear, where it gives one.
    fn wear(&self) -> Option<Wear> {
        None
    }
}

/// What makes two paths the same device: a block device's number, or a
/// file's device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceId {
    Block(u64),
    File { dev: u64, ino: u64 },
    Sim(u64),
}

/// A block device (opened O_EXCL: refused while mounted or in use) or a
/// regular file of at least [`DEVICE_BYTES_MIN`].
pub struct FileDevice {
    file: File,
    len: u64,
    pub id: DeviceId,
    pub path: PathBuf,
    wear: Mutex<Option<(Instant, Option<Wear>)>>,
}

impl FileDevice {
    pub fn open(path: &Path) -> Result<Self, DeviceError> {
        let device = || path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|source| DeviceError::Open { device: device(), source })?;
        let ft = meta.file_type();
        let (file, id) = if ft.is_block_device() {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_EXCL | libc::O_CLOEXEC)
                .open(path)
                .map_err(|source| match source.raw_os_error() {
                    Some(libc::EBUSY) => DeviceError::Busy { device: device() },
                    _ => DeviceError::Open { device: device(), source },
                })?;
            (file, DeviceId::Block(meta.rdev()))
        } else if ft.is_file() {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(path)
                .map_err(|source| DeviceError::Open { device: device(), source })?;
            (file, DeviceId::File { dev: meta.dev(), ino: meta.ino() })
        } else {
            return Err(DeviceError::NotADevice { device: device() });
        };
        let volatile = match id {
            DeviceId::Block(rdev) => volatile_block_device(Path::new(SYS_DEV_BLOCK), rdev),
            _ => volatile_fs(
                crate::sys::fs_type(&file).map_err(|source| DeviceError::Open { device: device(), source })?,
            ),
        };
        if let Some(what) = volatile {
            return Err(DeviceError::Volatile { device: device(), what });
        }
        let len = device_size(&file).map_err(|source| DeviceError::Size { device: device(), source })? & !511;
        if len < DEVICE_BYTES_MIN {
            return Err(DeviceError::TooSmall { device: device(), mib: len >> 20, min_mib: DEVICE_BYTES_MIN >> 20 });
        }
        Ok(FileDevice { file, len, id, path: path.to_path_buf(), wear: Mutex::new(None) })
    }
}

/// RAMFS_MAGIC of linux/magic.h (libc names tmpfs's and hugetlbfs's, not
/// this one).
const RAMFS_MAGIC: u32 = 0x8584_58f6;
/// RAMDISK_MAJOR of linux/major.h: brd's `/dev/ramN`.
const RAMDISK_MAJOR: u32 = 1;
const SYS_DEV_BLOCK: &str = "/sys/dev/block";

/// What a file system of type `f_type` (statfs) is, if it keeps its files
/// in memory only: tmpfs (also `/dev/shm` and devtmpfs), ramfs, hugetlbfs.
pub fn volatile_fs(f_type: u32) -> Option<&'static str> {
    match f_type {
        t if t == libc::TMPFS_MAGIC as u32 => Some("on tmpfs"),
        RAMFS_MAGIC => Some("on ramfs"),
        t if t == libc::HUGETLBFS_MAGIC as u32 => Some("on hugetlbfs"),
        _ => None,
    }
}

/// What block device `rdev` is, if its blocks are memory: a brd RAM disk
/// or a zram device (named by the kernel in `sys_dev_block`).
fn volatile_block_device(sys_dev_block: &Path, rdev: u64) -> Option<&'static str> {
    if libc::major(rdev) == RAMDISK_MAJOR {
        return Some("a RAM disk (brd)");
    }
    let link = sys_dev_block.join(format!("{}:{}", libc::major(rdev), libc::minor(rdev)));
    let name = std::fs::canonicalize(link).ok()?.file_name()?.to_string_lossy().into_owned();
    name.starts_with("zram").then_some("a RAM disk (zram)")
}

fn device_size(file: &File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    // SEEK_END gives a block device's size as well as a file's.
    let mut f = file;
    f.seek(SeekFrom::End(0))
}

impl DeviceIo for FileDevice {
    fn size(&self) -> u64 {
        self.len
    }

    // A read may wait for the device and a sync does; a write lands in
    // the page cache.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        keel_store::blocking::may_block();
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn sync(&self) -> io::Result<()> {
        keel_store::blocking::may_block();
        self.file.sync_data()
    }

    fn wear(&self) -> Option<Wear> {
        let mut memo = self.wear.lock().unwrap_or_else(|p| p.into_inner());
        match *memo {
            Some((at, wear)) if at.elapsed() < WEAR_MEMO => wear,
            _ => {
                let wear = match self.id {
                    DeviceId::Block(rdev) => wear::of_block_device(rdev),
                    DeviceId::File { dev, .. } => wear::of_block_device(dev),
                    DeviceId::Sim(_) => None,
                };
                *memo = Some((Instant::now(), wear));
                wear
            }
        }
    }
}

/// How long a device's wear is taken as read: `keel cache stat` asks every
/// second, and the drive's figure moves by a percent in weeks.
const WEAR_MEMO: Duration = Duration::from_secs(600);

/// An in-memory device for tests: writes land in a volatile image that a
/// [`SimDevice::power_cut`] throws away except for what `sync` made
/// durable (and, by the seed, some unsynced sectors, as a drive's write
/// cache would let through); faults fail chosen operations.
pub struct SimDevice {
    state: Mutex<SimState>,
    len: u64,
}

struct SimState {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// Sector ranges written since the last sync.
    unsynced: Vec<(u64, u64)>,
    rng: Rng,
    /// Every I/O fails from now on (a pulled or dead device).
    dead: bool,
    /// The next `n` writes fail.
    fail_writes: u32,
    /// The next `n` syncs fail.
    fail_syncs: u32,
    /// The next `n` reads fail.
    fail_reads: u32,
}

impl SimDevice {
    pub fn new(len: u64, seed: u64) -> Self {
        let len = len & !511;
        SimDevice {
            state: Mutex::new(SimState {
                live: vec![0; len as usize],
                durable: vec![0; len as usize],
                unsynced: Vec::new(),
                rng: Rng::new(seed),
                dead: false,
                fail_writes: 0,
                fail_syncs: 0,
                fail_reads: 0,
            }),
            len,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SimState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Power loss: the device keeps what was synced, plus (when
    /// `keep_some`) a random choice of the sectors written since.
    pub fn power_cut(&self, keep_some: bool) {
        let mut st = self.lock();
        let mut image = st.durable.clone();
        if keep_some {
            let ranges = std::mem::take(&mut st.unsynced);
            for (off, len) in ranges {
                for sector in (off..off + len).step_by(512) {
                    if st.rng.below(2) == 1 {
                        let s = sector as usize;
                        image[s..s + 512].copy_from_slice(&st.live[s..s + 512]);
                    }
                }
            }
        }
        st.unsynced.clear();
        // A power cycle clears transient faults (not a dead device).
        st.fail_writes = 0;
        st.fail_syncs = 0;
        st.fail_reads = 0;
        st.live = image.clone();
        st.durable = image;
    }

    pub fn kill(&self) {
        self.lock().dead = true;
    }

    pub fn fail_next_writes(&self, n: u32) {
        self.lock().fail_writes = n;
    }

    pub fn fail_next_syncs(&self, n: u32) {
        self.lock().fail_syncs = n;
    }

    pub fn fail_next_reads(&self, n: u32) {
        self.lock().fail_reads = n;
    }

    /// Flips a byte of the durable and live images (bit rot).
    pub fn corrupt(&self, offset: u64) {
        let mut st = self.lock();
        st.live[offset as usize] ^= 0xff;
        st.durable[offset as usize] ^= 0xff;
    }
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

impl DeviceIo for SimDevice {
    fn size(&self) -> u64 {
        self.len
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut st = self.lock();
        if st.dead {
            return Err(eio());
        }
        if st.fail_reads > 0 {
            st.fail_reads -= 1;
            return Err(eio());
        }
        let (from, to) = (offset as usize, offset as usize + buf.len());
        if to > st.live.len() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        buf.copy_from_slice(&st.live[from..to]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut st = self.lock();
        if st.dead {
            return Err(eio());
        }
        if st.fail_writes > 0 {
            st.fail_writes -= 1;
            return Err(eio());
        }
        let (from, to) = (offset as usize, offset as usize + buf.len());
        if to > st.live.len() {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        st.live[from..to].copy_from_slice(buf);
        let first = offset & !511;
        st.unsynced.push((first, (to as u64).next_multiple_of(512) - first));
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut st = self.lock();
        if st.dead {
            return Err(eio());
        }
        if st.fail_syncs > 0 {
            st.fail_syncs -= 1;
            return Err(eio());
        }
        let ranges = std::mem::take(&mut st.unsynced);
        for (off, len) in ranges {
            let (a, b) = (off as usize, ((off + len) as usize).min(st.live.len()));
            let chunk = st.live[a..b].to_vec();
            st.durable[a..b].copy_from_slice(&chunk);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_systems_in_memory_are_told_by_their_statfs_type() {
        assert_eq!(volatile_fs(0x0102_1994), Some("on tmpfs"));
        assert_eq!(volatile_fs(0x8584_58f6), Some("on ramfs"));
        assert_eq!(volatile_fs(0x9584_58f6), Some("on hugetlbfs"));
        // XFS, ext4, btrfs keep what they are given.
        for disk in [0x5846_5342, 0xef53, 0x9123_683e] {
            assert_eq!(volatile_fs(disk), None, "{disk:#x}");
        }
        // A real tmpfs, where the machine has one at /dev/shm.
        if let Ok(shm) = File::open("/dev/shm") {
            assert_eq!(volatile_fs(crate::sys::fs_type(&shm).unwrap()), Some("on tmpfs"));
        }
    }

    #[test]
    fn ram_disks_are_told_by_their_major_or_their_kernel_name() {
        let root = std::env::temp_dir().join(format!("keel-volatile-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("dev-block")).unwrap();
        for (number, device) in [("251:0", "virtual/block/zram0"), ("7:0", "virtual/block/loop0")] {
            let dir = root.join("devices").join(device);
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::symlink(&dir, root.join("dev-block").join(number)).unwrap();
        }
        let sys = root.join("dev-block");
        assert_eq!(volatile_block_device(&sys, libc::makedev(251, 0)), Some("a RAM disk (zram)"));
        assert_eq!(volatile_block_device(&sys, libc::makedev(1, 3)), Some("a RAM disk (brd)"));
        assert_eq!(volatile_block_device(&sys, libc::makedev(7, 0)), None);
        assert_eq!(volatile_block_device(&sys, libc::makedev(259, 0)), None, "not in sysfs: not known to be RAM");
        std::fs::remove_dir_all(&root).unwrap();
    }
}

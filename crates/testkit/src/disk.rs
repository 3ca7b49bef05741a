//! Disks of a test's own: an XFS on a loop device over an image file,
//! with a power switch (the xfstests "godown" method: `xfs_io -x -c
//! shutdown` without -f loses what XFS had not yet written to its log, as
//! a power cut does); and a tmpfs, memory that a power cut empties.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::procs::{TempDir, run_ok, run_timeout};
use crate::server::require_root;

const IMAGE_BYTES: u64 = 512 << 20;
const LOG_IMAGE_BYTES: u64 = 64 << 20;
const CMD_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// The disk: an XFS on a loop device, with a power switch.
// ---------------------------------------------------------------------------

/// An XFS on a loop device over an image file in a temp dir. Dropping it
/// unmounts the file system and detaches the device, whatever happened.
pub struct XfsDisk {
    dev: Option<String>,
    /// The external log's loop device, if the log is not internal.
    log_dev: Option<String>,
    pub mnt: PathBuf,
    mounted: bool,
    /// A small tmpfs holding the image of a thin-provisioned disk.
    backing: Option<PathBuf>,
    dir: TempDir,
}

impl XfsDisk {
    pub fn new(tag: &str) -> Self {
        Self::make(tag, None, false)
    }

    /// A thin-provisioned disk: the image is a sparse file on a tmpfs of
    /// `backing_bytes`, far smaller than the disk, so writes to new blocks
    /// fail once the tmpfs is full ([`XfsDisk::fill_backing`]), as they do
    /// on an overcommitted SAN LUN or sparse image.
    ///
    /// The loop driver completes a write that the full backing store took
    /// only part of as a success: a block written across the edge is
    /// acknowledged and half lost below the file system. Use it for errors
    /// the file system reports, not for what reaches the disk.
    pub fn thin(tag: &str, backing_bytes: u64) -> Self {
        Self::make(tag, Some(backing_bytes), false)
    }

    /// An XFS whose log is on a second loop device, so that the data path
    /// can die ([`XfsDisk::data_path_loss`]) while the log's works: data
    /// write-back fails with EIO and every log force still succeeds, as
    /// with a failed data LUN or a bad region of the disk.
    pub fn with_external_log(tag: &str) -> Self {
        Self::make(tag, None, true)
    }

    fn make(tag: &str, backing_bytes: Option<u64>, external_log: bool) -> Self {
        require_root();
        let dir = TempDir::new(&format!("xfs-{tag}"));
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let mut disk = XfsDisk { dev: None, log_dev: None, mnt, mounted: false, backing: None, dir };
        let mut image_dir = disk.dir.path().to_path_buf();
        if let Some(bytes) = backing_bytes {
            image_dir = disk.dir.path().join("backing");
            std::fs::create_dir(&image_dir).unwrap();
            let size = format!("size={bytes}");
            run_ok(Command::new("mount").args(["-t", "tmpfs", "-o", &size, "tmpfs"]).arg(&image_dir), CMD_TIMEOUT);
            disk.backing = Some(image_dir.clone());
        }
        let image = image_dir.join("xfs.img");
        std::fs::File::create(&image).unwrap().set_len(IMAGE_BYTES).unwrap();
        let out = run_ok(Command::new("losetup").args(["-f", "--show"]).arg(&image), CMD_TIMEOUT);
        disk.dev = Some(out.stdout.trim().to_string());
        let mut mkfs = Command::new("mkfs.xfs");
        mkfs.args(["-q", "-f"]);
        if external_log {
            let log = image_dir.join("log.img");
            std::fs::File::create(&log).unwrap().set_len(LOG_IMAGE_BYTES).unwrap();
            let out = run_ok(Command::new("losetup").args(["-f", "--show"]).arg(&log), CMD_TIMEOUT);
            disk.log_dev = Some(out.stdout.trim().to_string());
            mkfs.arg("-l").arg(format!("logdev={}", disk.log_dev.as_deref().unwrap()));
        }
        run_ok(mkfs.arg(disk.dev()), CMD_TIMEOUT);
        disk.mount();
        disk
    }

    pub fn dev(&self) -> &str {
        self.dev.as_deref().expect("loop device attached")
    }

    pub fn mount(&mut self) {
        assert!(!self.mounted);
        let mut mount = Command::new("mount");
        if let Some(log) = &self.log_dev {
            mount.arg("-o").arg(format!("logdev={log}"));
        }
        run_ok(mount.arg(self.dev()).arg(&self.mnt), CMD_TIMEOUT);
        self.mounted = true;
    }

    /// The data device's path dies: every new data or metadata I/O to it
    /// fails with EIO; the external log's path stays.
    pub fn data_path_loss(&self) {
        assert!(self.log_dev.is_some(), "a data path loss with the log on the same device kills the log too");
        loop_set_path(self.dev(), LoopPath::Dead);
    }

    pub fn data_path_repair(&self) {
        loop_set_path(self.dev(), LoopPath::Alive);
    }

    /// Makes everything written so far durable (setup, not under test).
    pub fn syncfs(&self) {
        let dir = std::fs::File::open(&self.mnt).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: syncfs on a descriptor we own.
        assert_eq!(unsafe { libc::syncfs(dir.as_raw_fd()) }, 0, "syncfs {}", self.mnt.display());
    }

    /// Fills the thin disk's backing store: from now on every write of a
    /// block the image has not stored before fails (ENOSPC from the loop
    /// device), while blocks written before still take writes.
    pub fn fill_backing(&self) {
        let backing = self.backing.as_ref().expect("a thin disk");
        let mut f = std::fs::File::create(backing.join("filler")).unwrap();
        let chunk = vec![0x55u8; 1 << 20];
        use std::io::Write;
        // Bounded by the tmpfs size.
        loop {
            if let Err(e) = f.write_all(&chunk) {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "filling the backing store: {e}");
                break;
            }
        }
    }

    /// Sectors the loop device has written since it was attached.
    pub fn sectors_written(&self) -> u64 {
        let name = self.dev().trim_start_matches("/dev/");
        let stat = std::fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
        stat.split_whitespace().nth(6).unwrap().parse().unwrap()
    }

    /// Log forces XFS was asked for since the file system was mounted (the
    /// "force" field of the "log" line of its statistics): one per fsync
    /// that found its object's changes not yet on disk, one per syncfs.
    pub fn log_forces(&self) -> u64 {
        let name = self.dev().trim_start_matches("/dev/");
        let stats = std::fs::read_to_string(format!("/sys/fs/xfs/{name}/stats/stats")).unwrap();
        // "log writes blocks noiclogs force force_sleep"
        let log = stats.lines().find(|l| l.starts_with("log ")).expect("a log line in the XFS statistics");
        log.split_whitespace().nth(4).unwrap().parse().unwrap()
    }

    /// The power cut: shut XFS down without flushing its log, then unmount.
    pub fn power_cut(&mut self) {
        run_ok(Command::new("xfs_io").args(["-x", "-c", "shutdown"]).arg(&self.mnt), CMD_TIMEOUT);
        self.unmount();
    }

    pub fn unmount(&mut self) {
        for _ in 0..50 {
            if run_timeout(Command::new("umount").arg(&self.mnt), CMD_TIMEOUT).status.success() {
                self.mounted = false;
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("cannot unmount {}", self.mnt.display());
    }
}

impl Drop for XfsDisk {
    fn drop(&mut self) {
        if self.mounted {
            let ok = (0..50).any(|_| {
                let done = Command::new("umount").arg(&self.mnt).status().is_ok_and(|s| s.success());
                if !done {
                    std::thread::sleep(Duration::from_millis(100));
                }
                done
            });
            if !ok {
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            }
        }
        for dev in self.dev.iter().chain(&self.log_dev) {
            let _ = Command::new("losetup").arg("-d").arg(dev).status();
        }
        if let Some(backing) = &self.backing {
            let _ = Command::new("umount").arg(backing).status();
        }
        // The image is of no use once detached, even when the test failed.
        let _ = std::fs::remove_file(self.dir.path().join("xfs.img"));
        let _ = std::fs::remove_file(self.dir.path().join("log.img"));
    }
}

/// struct loop_info64 (linux/loop.h).
#[repr(C)]
struct LoopInfo64 {
    device: u64,
    inode: u64,
    rdevice: u64,
    offset: u64,
    sizelimit: u64,
    number: u32,
    encrypt_type: u32,
    encrypt_key_size: u32,
    flags: u32,
    file_name: [u8; 64],
    crypt_name: [u8; 64],
    encrypt_key: [u8; 32],
    init: [u64; 2],
}

const LOOP_SET_STATUS64: libc::c_ulong = 0x4C04;
const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;

/// Kills or restores a bound loop device's path to its file. A dead path
/// has capacity 0 (a size limit of 1 byte): new I/O fails with EIO, and
/// I/O already past the block layer's end-of-device check when the limit
/// changed lands where it was aimed, as a write in flight at a real path's
/// death may. (Moving the device's offset to the end of the file instead
/// sent such writes beyond the end of the image: acknowledged to the writer,
/// gone for any other reader: a lost write that no real path makes.)
pub(crate) fn loop_set_path(dev: &str, path: LoopPath) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(dev).unwrap_or_else(|e| panic!("open {dev}: {e}"));
    // SAFETY: LoopInfo64 is plain data; all zeroes is a valid value.
    let mut info: LoopInfo64 = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctls read and write one loop_info64, which `info` is.
    unsafe {
        assert_eq!(libc::ioctl(f.as_raw_fd(), LOOP_GET_STATUS64, &mut info), 0, "LOOP_GET_STATUS64 {dev}");
        info.sizelimit = match path {
            LoopPath::Alive => 0,
            LoopPath::Dead => 1,
        };
        let rc = libc::ioctl(f.as_raw_fd(), LOOP_SET_STATUS64, &info);
        assert_eq!(rc, 0, "LOOP_SET_STATUS64 {dev}: {}", std::io::Error::last_os_error());
    }
}

#[derive(Clone, Copy)]
pub(crate) enum LoopPath {
    Alive,
    Dead,
}

/// A tmpfs mounted for a test (memory: where Keel must refuse a cache
/// device), unmounted when dropped.
pub struct Tmpfs(TempDir);

impl Tmpfs {
    pub fn mount(tag: &str) -> Self {
        require_root();
        let dir = TempDir::new(tag);
        run_ok(
            Command::new("mount").args(["-t", "tmpfs", "-o", "size=128m", "keel-test"]).arg(dir.path()),
            CMD_TIMEOUT,
        );
        Tmpfs(dir)
    }

    pub fn path(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

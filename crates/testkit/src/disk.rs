//! Disks of a test's own: an XFS on a loop device over an image file,
//! with a power switch (the xfstests "godown" method: `xfs_io -x -c
//! shutdown` without -f loses what XFS had not yet written to its log, as
//! a power cut does).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::procs::{TempDir, run_ok, run_timeout};
use crate::server::require_root;

const IMAGE_BYTES: u64 = 512 << 20;
const CMD_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// The disk: an XFS on a loop device, with a power switch.
// ---------------------------------------------------------------------------

/// An XFS on a loop device over an image file in a temp dir. Dropping it
/// unmounts the file system and detaches the device, whatever happened.
pub struct XfsDisk {
    dev: Option<String>,
    pub mnt: PathBuf,
    mounted: bool,
    /// A small tmpfs holding the image of a thin-provisioned disk.
    backing: Option<PathBuf>,
    dir: TempDir,
}

impl XfsDisk {
    pub fn new(tag: &str) -> Self {
        Self::make(tag, None)
    }

    /// A thin-provisioned disk: the image is a sparse file on a tmpfs of
    /// `backing_bytes`, far smaller than the disk, so writes to new blocks
    /// fail once the tmpfs is full ([`XfsDisk::fill_backing`]), as they do
    /// on an overcommitted SAN LUN or sparse image.
    pub fn thin(tag: &str, backing_bytes: u64) -> Self {
        Self::make(tag, Some(backing_bytes))
    }

    fn make(tag: &str, backing_bytes: Option<u64>) -> Self {
        require_root();
        let dir = TempDir::new(&format!("xfs-{tag}"));
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let mut disk = XfsDisk { dev: None, mnt, mounted: false, backing: None, dir };
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
        run_ok(Command::new("mkfs.xfs").args(["-q", "-f"]).arg(disk.dev()), CMD_TIMEOUT);
        disk.mount();
        disk
    }

    pub fn dev(&self) -> &str {
        self.dev.as_deref().expect("loop device attached")
    }

    pub fn mount(&mut self) {
        assert!(!self.mounted);
        run_ok(Command::new("mount").arg(self.dev()).arg(&self.mnt), CMD_TIMEOUT);
        self.mounted = true;
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
        if let Some(dev) = &self.dev {
            let _ = Command::new("losetup").arg("-d").arg(dev).status();
        }
        if let Some(backing) = &self.backing {
            let _ = Command::new("umount").arg(backing).status();
        }
        // The image is of no use once detached, even when the test failed.
        let _ = std::fs::remove_file(self.dir.path().join("xfs.img"));
    }
}

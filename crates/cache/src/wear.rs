//! What a cache device says of its own wear. NVMe drives say it in their
//! SMART / Health Information log page: "Percentage Used" is the drive's
//! estimate of how much of its rated endurance is spent (it may pass 100),
//! beside the spare capacity left and the data written. SATA drives put
//! wear in vendor-specific SMART attributes, and loop, virtual and
//! device-mapper devices have none: for them nothing is reported rather
//! than a guess.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// A device's own account of its wear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wear {
    /// Share of the rated endurance used, in percent (may exceed 100).
    pub percent_used: u8,
    /// Spare capacity left, in percent of the spare the drive shipped with.
    pub spare_percent: u8,
    /// Bytes the host has written to the drive over its life.
    pub host_written_bytes: u64,
}

/// Reads the wear of the NVMe drive under block device `rdev` (a cache
/// device's own number, or the file system's a cache file lives on).
/// Needs CAP_SYS_ADMIN, as `nvme smart-log` does.
pub fn of_block_device(rdev: u64) -> Option<Wear> {
    let disk = nvme_disk(Path::new("/sys/dev/block"), rdev)?;
    let dev = File::open(Path::new("/dev").join(disk)).ok()?;
    let mut page = [0u8; SMART_LOG_BYTES];
    smart_log(&dev, &mut page).ok()?;
    Some(parse_smart_log(&page))
}

/// The NVMe namespace's disk name (`nvme0n1`) for block device `rdev`,
/// through the partition's parent if it is one; None for any other kind.
fn nvme_disk(sys_dev_block: &Path, rdev: u64) -> Option<String> {
    let link = sys_dev_block.join(format!("{}:{}", libc::major(rdev), libc::minor(rdev)));
    let mut dir: PathBuf = std::fs::canonicalize(link).ok()?;
    if dir.join("partition").exists() {
        dir = dir.parent()?.to_path_buf();
    }
    let name = dir.file_name()?.to_str()?.to_string();
    let is_namespace = name
        .strip_prefix("nvme")
        .is_some_and(|rest| rest.contains('n') && rest.chars().all(|c| c.is_ascii_alphanumeric()));
    is_namespace.then_some(name)
}

const SMART_LOG_BYTES: usize = 512;

/// The NVMe admin command the kernel passes through (`struct
/// nvme_passthru_cmd`, linux/nvme_ioctl.h).
#[repr(C)]
#[derive(Default)]
struct PassthruCmd {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}

/// `_IOWR('N', 0x41, struct nvme_passthru_cmd)`.
const NVME_IOCTL_ADMIN_CMD: libc::c_ulong =
    (3 << 30) | ((std::mem::size_of::<PassthruCmd>() as libc::c_ulong) << 16) | (0x4e << 8) | 0x41;

/// Get Log Page (admin opcode 0x02) for the SMART / Health log (0x02),
/// controller-wide.
fn smart_log(dev: &File, page: &mut [u8; SMART_LOG_BYTES]) -> std::io::Result<()> {
    let dwords = (SMART_LOG_BYTES / 4) as u32;
    let mut cmd = PassthruCmd {
        opcode: 0x02,
        nsid: 0xffff_ffff,
        addr: page.as_mut_ptr() as u64,
        data_len: SMART_LOG_BYTES as u32,
        cdw10: ((dwords - 1) << 16) | 0x02,
        ..PassthruCmd::default()
    };
    // SAFETY: `cmd` is the kernel's layout and `page` outlives the call,
    // with `data_len` bytes of room.
    let rc = unsafe { libc::ioctl(dev.as_raw_fd(), NVME_IOCTL_ADMIN_CMD, &mut cmd as *mut PassthruCmd) };
    match rc {
        0 => Ok(()),
        r if r < 0 => Err(std::io::Error::last_os_error()),
        status => Err(std::io::Error::other(format!("NVMe status {status:#x}"))),
    }
}

/// The fields of the SMART / Health log page (NVMe base specification,
/// "SMART / Health Information"): byte 3 available spare, byte 5
/// percentage used, bytes 48..64 data units written (thousands of 512-byte
/// units).
fn parse_smart_log(page: &[u8; SMART_LOG_BYTES]) -> Wear {
    let units = u128::from_le_bytes(page[48..64].try_into().expect("16 bytes"));
    Wear {
        percent_used: page[5],
        spare_percent: page[3],
        host_written_bytes: u64::try_from(units.saturating_mul(512_000)).unwrap_or(u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smart_log_gives_percentage_used_spare_and_data_written() {
        let mut page = [0u8; SMART_LOG_BYTES];
        page[3] = 97;
        page[5] = 104;
        page[48..64].copy_from_slice(&3_000u128.to_le_bytes());
        let w = parse_smart_log(&page);
        assert_eq!(w, Wear { percent_used: 104, spare_percent: 97, host_written_bytes: 1_536_000_000 });
        page[48..64].copy_from_slice(&u128::MAX.to_le_bytes());
        assert_eq!(parse_smart_log(&page).host_written_bytes, u64::MAX);
    }

    #[test]
    fn the_command_has_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<PassthruCmd>(), 72);
        assert_eq!(NVME_IOCTL_ADMIN_CMD, 0xc048_4e41);
    }

    /// A fake /sys/dev/block: each number links to its device directory.
    fn sysfs(links: &[(&str, &str, bool)]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("keel-wear-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("dev-block")).unwrap();
        for &(number, device, partition) in links {
            let dir = root.join("devices").join(device);
            std::fs::create_dir_all(&dir).unwrap();
            if partition {
                std::fs::write(dir.join("partition"), "1\n").unwrap();
            }
            std::os::unix::fs::symlink(&dir, root.join("dev-block").join(number)).unwrap();
        }
        root
    }

    #[test]
    fn nvme_namespaces_and_their_partitions_are_found_and_nothing_else() {
        let root = sysfs(&[
            ("259:0", "pci/nvme/nvme0/nvme0n1", false),
            ("259:1", "pci/nvme/nvme0/nvme0n1/nvme0n1p2", true),
            ("8:0", "pci/ata1/host0/block/sda", false),
            ("7:3", "virtual/block/loop3", false),
            ("254:0", "pci/virtio/block/vda", false),
        ]);
        let at = root.join("dev-block");
        let dev = |major, minor| libc::makedev(major, minor);
        assert_eq!(nvme_disk(&at, dev(259, 0)).as_deref(), Some("nvme0n1"));
        assert_eq!(nvme_disk(&at, dev(259, 1)).as_deref(), Some("nvme0n1"));
        assert_eq!(nvme_disk(&at, dev(8, 0)), None);
        assert_eq!(nvme_disk(&at, dev(7, 3)), None);
        assert_eq!(nvme_disk(&at, dev(254, 0)), None);
        assert_eq!(nvme_disk(&at, dev(1, 99)), None, "a number sysfs does not know");
        std::fs::remove_dir_all(root).unwrap();
    }
}

//! The `[cache]` settings and the modes an export can use the cache in.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::error::{ConfigError, UnknownMode};
use crate::readcache;

/// How an export uses the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheMode {
    /// Writes go to the mirrored log and are destaged later; reads use
    /// the read cache.
    WriteBack,
    /// Writes go to the back end and update the blocks the read cache
    /// holds; reads use the read cache.
    WriteThrough,
    /// Writes go to the back end and drop the blocks from the read cache;
    /// reads use the read cache.
    WriteAround,
    /// The cache is not used for new writes nor for reads (dirty data is
    /// still destaged, and read over until it is).
    Off,
}

impl CacheMode {
    pub const ALL: [CacheMode; 4] =
        [CacheMode::WriteBack, CacheMode::WriteThrough, CacheMode::WriteAround, CacheMode::Off];

    pub fn parse(s: &str) -> Result<Self, UnknownMode> {
        CacheMode::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| UnknownMode(s.to_owned()))
    }

    pub fn name(self) -> &'static str {
        match self {
            CacheMode::WriteBack => "write-back",
            CacheMode::WriteThrough => "write-through",
            CacheMode::WriteAround => "write-around",
            CacheMode::Off => "off",
        }
    }
}

/// The smallest ring the default sizing gives the log: many of the
/// largest records (1 MiB) and the 2 MiB a write keeps free.
pub const LOG_BYTES_MIN: u64 = 16 << 20;

/// The ring's size by default: a quarter of the smaller of the log's
/// devices, at least [`LOG_BYTES_MIN`]; the rest is read cache.
pub fn default_log_bytes(device_sizes: &[u64]) -> u64 {
    let smallest = device_sizes.iter().take(2).copied().min().unwrap_or(0);
    ((smallest / 4).max(LOG_BYTES_MIN)) & !511
}

/// The `[cache]` settings.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Cache devices: block devices or files on a fast file system. The log
    /// is mirrored on the first two.
    pub devices: Vec<PathBuf>,
    /// The ring's size on each device (at most what the smaller holds);
    /// `None`: [`default_log_bytes`]. A log found on the devices keeps the
    /// size it was made with.
    pub log_bytes: Option<u64>,
    /// The read cache's slot size: a power of two from 4 KiB to 1 MiB
    /// (memory: about 80 bytes per slot).
    pub read_slot_bytes: u64,
    /// A read that misses brings in the aligned window of this many bytes
    /// around it (one back-end read) while the read cache has free slots:
    /// a cold cache warms as a disk array's cache line does, at one disk
    /// I/O per window rather than per block. A multiple of the slot size
    /// up to [`readcache::FILL_BYTES_MAX`]; the slot size turns it off.
    pub read_fill_bytes: u64,
    /// A write stream of a file longer than this goes to the back end, and
    /// a read stream longer than this is read from it (neither admitted to
    /// nor served by the read cache).
    pub sequential_cutoff: u64,
    /// Mode per export id; exports not named are `Off`.
    pub modes: HashMap<u32, CacheMode>,
    /// Run the destager thread (tests drive rounds themselves).
    pub background_destage: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            devices: Vec::new(),
            log_bytes: None,
            read_slot_bytes: readcache::SLOT_BYTES_DEFAULT,
            read_fill_bytes: readcache::FILL_BYTES_DEFAULT,
            sequential_cutoff: 4 << 20,
            modes: HashMap::new(),
            background_destage: true,
        }
    }
}
impl CacheConfig {
    /// Refuses read-cache sizes the read cache cannot work with.
    pub fn check(&self) -> Result<(), ConfigError> {
        let slot = self.read_slot_bytes;
        if !slot.is_power_of_two() || !(readcache::SLOT_BYTES_MIN..=readcache::SLOT_BYTES_MAX).contains(&slot) {
            return Err(ConfigError::SlotSize(slot));
        }
        let fill = self.read_fill_bytes;
        if fill < slot || !fill.is_multiple_of(slot) || fill > readcache::FILL_BYTES_MAX {
            return Err(ConfigError::FillWindow { fill, slot, max: readcache::FILL_BYTES_MAX });
        }
        Ok(())
    }
}

//! The cache tier's errors, one enum per kind of operation, gathered in
//! [`CacheError`] for the operations that can meet several (opening the
//! cache, adding and removing devices, changing modes, flushing). The NFS
//! path's errors stay [`keel_store::StoreError`]: a client gets an errno.

use std::io;

use keel_store::StoreError;

/// A `[cache]` setting the cache cannot work with.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("read cache slot size {0}: a power of two from 4 KiB to 1 MiB")]
    SlotSize(u64),
    #[error("read cache fill window {fill}: a multiple of the slot size ({slot}) up to {max}")]
    FillWindow { fill: u64, slot: u64, max: u64 },
}

/// A cache mode's name that is none of [`crate::CacheMode::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown cache mode {0:?} (modes: write-back, write-through, write-around, off)")]
pub struct UnknownMode(pub String);

/// A device the cache cannot take; `device` is the path as given.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("{device}: {source}")]
    Open { device: String, source: io::Error },
    #[error("{device}: the device is in use (mounted, or already a cache device)")]
    Busy { device: String },
    #[error("{device}: not a block device or a regular file")]
    NotADevice { device: String },
    #[error("{device}: cannot find its size: {source}")]
    Size { device: String, source: io::Error },
    #[error("{device}: too small ({mib} MiB; a cache device needs at least {min_mib} MiB)")]
    TooSmall { device: String, mib: u64, min_mib: u64 },
    #[error("{device}: the same device as {other}")]
    Duplicate { device: String, other: String },
    /// Memory, not storage: the next power cut or reboot empties it, and
    /// any device may come to hold a copy of the write-back log.
    #[error(
        "{device}: {what}, which a power cut or reboot empties: a cache device must keep what is written to it (any \
         device may come to hold a copy of the write-back log). Use an SSD: its block device, or a file on a file \
         system on it"
    )]
    Volatile { device: String, what: &'static str },
}

impl DeviceError {
    /// Whether the device is gone rather than unfit: its path no longer
    /// names anything (ENOENT), or names a device that is not there (ENXIO,
    /// ENODEV) or does not answer (EIO). A start goes on without such a
    /// device; an unfit one (too small, in use, in memory) is refused.
    pub fn is_missing(&self) -> bool {
        match self {
            DeviceError::Open { source, .. } => {
                source.kind() == io::ErrorKind::NotFound
                    || matches!(source.raw_os_error(), Some(libc::ENXIO | libc::ENODEV | libc::EIO))
            }
            _ => false,
        }
    }
}

/// Why a destage round stopped; everything it had not retired stays dirty.
#[derive(Debug, thiserror::Error)]
pub enum DestageError {
    #[error("cannot act as root: {0}")]
    ActAsRoot(StoreError),
    #[error("cannot open a file with dirty data: {0}")]
    Open(StoreError),
    #[error("cannot read dirty data from the log: {0}")]
    LogRead(io::Error),
    #[error("back-end write failed: {0}")]
    Write(StoreError),
    #[error("back-end setattr failed: {0}")]
    SetAttr(StoreError),
    #[error("back-end sync failed: {0}")]
    Sync(StoreError),
    #[error("cannot move the log head: {0}")]
    Head(io::Error),
}

/// What opening the cache or changing it at runtime can meet.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Destage(#[from] DestageError),
    /// The log on the devices could not be read back or made.
    #[error("cache log: {0}")]
    Log(io::Error),
    #[error("the log still holds {dirty_bytes} dirty bytes: {source}")]
    Flush { dirty_bytes: u64, source: DestageError },
    /// Writes kept coming into the log each time it was emptied to be
    /// moved to other devices.
    #[error("the log could not be moved: it was never empty in {tries} tries (writes kept coming in); try again")]
    LogBusy { tries: usize },
    #[error(
        "no cache device could be opened ({devices}): the write-back log, and any data it held that was not on \
         the disks yet, was on them. If they are lost for good, take them out of [cache] devices and set the \
         exports' cache to off"
    )]
    AllMissing { devices: String },
    #[error("cannot start the destager: {0}")]
    Destager(io::Error),
    #[error("{device}: not a cache device (devices: {known})")]
    UnknownDevice { device: String, known: String },
    #[error("write-back needs two working cache devices ({healthy} now)")]
    WriteBackNeedsTwo { healthy: usize },
    #[error("{mode} needs a read cache: no cache device has room after the log's ring")]
    NeedsReadCache { mode: &'static str },
}

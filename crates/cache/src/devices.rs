//! The cache's devices as the administrator changes them at runtime
//! (`keel cache add`, `remove`, `list`): which device holds what, moving
//! the log when its devices change, and the read cache started again over
//! the new set. One device's I/O is [`crate::device`].

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use keel_store::Store;

use crate::device::{DeviceId, DeviceIo, FileDevice};
use crate::error::{CacheError, DeviceError};
use crate::events::Event;
use crate::log::{self, Log, Mirror};
use crate::readcache::{ReadCache, Region};
use crate::wear::Wear;
use crate::{Shared, default_log_bytes};

/// How many times a log swap destages what writes in flight added to the
/// log before giving up (after its flush, only writes that took the log
/// before it add to the log, so one or two tries do).
const SWAP_TRIES_MAX: usize = 64;

/// A device the cache holds.
pub struct CacheDevice {
    pub name: String,
    pub id: Option<DeviceId>,
    pub io: Arc<dyn DeviceIo>,
}

/// One line of `keel cache list`.
#[derive(Debug, Clone)]
pub struct DeviceReport {
    pub name: String,
    pub size_bytes: u64,
    pub role: &'static str,
    pub state: &'static str,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub errors: u64,
    /// Bytes of clean data the read cache holds on the device, and the
    /// room it has there.
    pub read_cache_bytes: u64,
    pub read_cache_capacity_bytes: u64,
    /// What the device says of its wear, where it says anything.
    pub wear: Option<Wear>,
}

/// Refuses a device that is already one of `devices` under another name.
pub(crate) fn check_distinct(devices: &[CacheDevice], path: &Path, id: DeviceId) -> Result<(), DeviceError> {
    match devices.iter().find(|d| d.id == Some(id)) {
        Some(d) => Err(DeviceError::Duplicate { device: path.display().to_string(), other: d.name.clone() }),
        None => Ok(()),
    }
}

fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() { "none".into() } else { names.join(", ") }
}

impl<S: Store> Shared<S> {
    /// Adds a cache device (hot): with fewer than two before, the log is
    /// emptied and re-made over the first two devices. The read cache
    /// starts again, empty, over all of them.
    pub fn add_device(&self, path: &Path, progress: impl FnMut(u64)) -> Result<(), CacheError> {
        let dev = FileDevice::open(path)?;
        let name = path.display().to_string();
        self.add_device_io(CacheDevice { name, id: Some(dev.id), io: Arc::new(dev) }, progress)
    }

    /// As [`Shared::add_device`], with the device open (tests: simulated).
    pub fn add_device_io(&self, dev: CacheDevice, progress: impl FnMut(u64)) -> Result<(), CacheError> {
        let name = dev.name.clone();
        let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = dev.id {
            check_distinct(&devices, Path::new(&name), id)?;
        }
        let mut next: Vec<CacheDevice> =
            devices.iter().map(|d| CacheDevice { name: d.name.clone(), id: d.id, io: d.io.clone() }).collect();
        next.push(dev);
        self.quiesce_read_cache();
        if devices.len() < 2
            && let Err(e) = self.relog(&next, &format!("adding {name}"), progress)
        {
            self.restart_read_cache(&devices);
            return Err(e);
        }
        *devices = next;
        self.restart_read_cache(&devices);
        self.missing.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.events.push(Event::DeviceAdded { device: name });
        Ok(())
    }

    /// Removes a cache device (hot): its dirty data is destaged first.
    pub fn remove_device(&self, name: &str, progress: impl FnMut(u64)) -> Result<(), CacheError> {
        let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        let Some(at) = devices.iter().position(|d| d.name == name) else {
            let known: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
            return Err(CacheError::UnknownDevice { device: name.into(), known: list_or_none(&known) });
        };
        let next: Vec<CacheDevice> = devices
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != at)
            .map(|(_, d)| CacheDevice { name: d.name.clone(), id: d.id, io: d.io.clone() })
            .collect();
        // The log lives on the first two devices; any other holds only
        // clean data of the read cache.
        self.quiesce_read_cache();
        if at < 2 {
            if let Err(e) = self.relog(&next, &format!("removing {name}"), progress) {
                self.restart_read_cache(&devices);
                return Err(e);
            }
            if let Err(e) = Log::erase(devices[at].io.as_ref()) {
                // Harmless: the new log's superblocks are newer.
                tracing::warn!(device = name, error = %e, "cannot erase the old log's superblocks");
            }
        }
        *devices = next;
        self.restart_read_cache(&devices);
        self.events.push(Event::DeviceRemoved { device: name.into() });
        Ok(())
    }

    /// Empties the log and replaces it with one on `devices` (none: no
    /// log). Meanwhile writes go around the log, as during a flush; the
    /// old log is retired the moment it is empty ([`Log::retire_if_empty`]),
    /// so a write that took it before takes the new one instead.
    pub(crate) fn relog(
        &self,
        devices: &[CacheDevice],
        why: &str,
        mut progress: impl FnMut(u64),
    ) -> Result<(), CacheError> {
        self.flush(why, &mut progress)?;
        self.flushers.fetch_add(1, Ordering::AcqRel);
        let swapped = self.swap_log(devices, &mut progress);
        self.flushers.fetch_sub(1, Ordering::AcqRel);
        swapped?;
        if devices.len() < 2 {
            let reason = format!(
                "{} cache device(s): write-back exports are served write-through until two work: add one with \
                 `keel cache add DEVICE`",
                devices.len()
            );
            self.events.push(Event::Degraded { reason });
        }
        Ok(())
    }

    /// Destages until the log can be retired, then puts the new one in
    /// its place. Writes that took the log before the flush may still
    /// append to it; each try destages what they added.
    fn swap_log(&self, devices: &[CacheDevice], progress: &mut impl FnMut(u64)) -> Result<(), CacheError> {
        for _ in 0..SWAP_TRIES_MAX {
            if self.try_swap_log(devices)? {
                return Ok(());
            }
            self.flush_inner(progress)
                .map_err(|source| CacheError::Flush { dirty_bytes: self.index.dirty_bytes(), source })?;
        }
        Err(CacheError::LogBusy { tries: SWAP_TRIES_MAX })
    }

    /// Retires the log and formats one on `devices` in its place, if it
    /// is empty and no file is live; false if not.
    fn try_swap_log(&self, devices: &[CacheDevice]) -> Result<bool, CacheError> {
        // No destage round runs across the swap: one that took the old log
        // would read the new log's extents from the old one's devices.
        let _round = self.round.lock().unwrap_or_else(|p| p.into_inner());
        let mut slot = self.log.write().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = slot.as_ref()
            && !(self.index.live_files() == 0 && old.retire_if_empty())
        {
            return Ok(false);
        }
        let generation = slot.as_ref().map_or(0, |l| l.generation());
        let new = match devices.len() {
            0 => None,
            _ => {
                let mirrors = devices.iter().take(2).map(|d| Mirror::new(d.name.clone(), d.io.clone())).collect();
                let ring = self.ring_bytes_for(devices);
                match Log::format(mirrors, ring, generation, self.events.clone()) {
                    Ok(log) => Some(Arc::new(log)),
                    Err(e) => {
                        // No superblock of the new log was written: the old
                        // one is still the log on the devices.
                        if let Some(old) = slot.as_ref() {
                            old.unretire();
                        }
                        return Err(CacheError::Log(e));
                    }
                }
            }
        };
        *slot = new;
        Ok(true)
    }

    /// The devices: name, size, role, the log's counters for it and what
    /// the read cache holds on it.
    pub fn devices(&self) -> Vec<DeviceReport> {
        let log = self.log();
        let usage = self.read_cache().map(|rc| rc.usage()).unwrap_or_default();
        let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        devices
            .iter()
            .map(|d| {
                let mirror = log.as_ref().and_then(|l| l.mirrors().iter().find(|m| m.name == d.name).cloned());
                let rc = usage.iter().find(|u| u.name == d.name);
                let caches = rc.is_some_and(|u| u.capacity_bytes > 0);
                DeviceReport {
                    name: d.name.clone(),
                    size_bytes: d.io.size(),
                    role: match (mirror.is_some(), caches) {
                        (true, true) => "log mirror, read cache",
                        (true, false) => "log mirror",
                        (false, true) => "read cache",
                        (false, false) => "spare",
                    },
                    state: match &mirror {
                        Some(m) if m.is_failed() => "failed",
                        _ if rc.is_some_and(|u| u.dropped) => "out of the read cache",
                        _ => "ok",
                    },
                    read_cache_bytes: rc.map_or(0, |u| u.used_bytes),
                    read_cache_capacity_bytes: rc.map_or(0, |u| u.capacity_bytes),
                    // The log's I/O and the read cache's.
                    bytes_written: mirror.as_ref().map_or(0, |m| m.bytes_written.load(Ordering::Relaxed))
                        + rc.map_or(0, |u| u.bytes_written),
                    bytes_read: mirror.as_ref().map_or(0, |m| m.bytes_read.load(Ordering::Relaxed))
                        + rc.map_or(0, |u| u.bytes_read),
                    errors: mirror.as_ref().map_or(0, |m| m.errors.load(Ordering::Relaxed))
                        + rc.map_or(0, |u| u.errors),
                    wear: d.io.wear(),
                }
            })
            .collect()
    }

    /// The ring size a new log on `devices` gets.
    pub(crate) fn ring_bytes_for(&self, devices: &[CacheDevice]) -> u64 {
        let sizes: Vec<u64> = devices.iter().map(|d| d.io.size()).collect();
        self.log_bytes.unwrap_or_else(|| default_log_bytes(&sizes))
    }

    /// A read cache over the space after a ring of `ring_bytes` on every
    /// device (spares too: their ring space is left alone, so one can
    /// become a log mirror without meeting cached data there).
    pub(crate) fn make_read_cache(&self, devices: &[CacheDevice], ring_bytes: u64) -> ReadCache {
        let regions = devices
            .iter()
            .map(|d| Region {
                name: d.name.clone(),
                io: d.io.clone(),
                base: log::RING_START.saturating_add(ring_bytes),
            })
            .collect();
        ReadCache::new(regions, self.read_slot_bytes, self.stats.read_cache.clone(), self.events.clone())
    }

    /// Takes the read cache away and waits until no call uses it (so no
    /// admission writes a device after this returns).
    fn quiesce_read_cache(&self) {
        let old = self.read_cache.write().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(old) = old {
            while Arc::strong_count(&old) > 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// A new, empty read cache over `devices` after the log's ring.
    fn restart_read_cache(&self, devices: &[CacheDevice]) {
        let rc = self.log().map(|log| Arc::new(self.make_read_cache(devices, log.ring_bytes())));
        *self.read_cache.write().unwrap_or_else(|p| p.into_inner()) = rc;
    }
}

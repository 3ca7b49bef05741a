//! The cache's event log (`keel cache events`): devices added, failed and
//! removed, mode changes, flushes, degradation, recovery, devices taken out
//! of the read cache. The newest [`EVENTS_MAX`] are kept in memory and
//! every one is logged.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Mutex;
use std::time::SystemTime;

pub const EVENTS_MAX: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    DeviceAdded {
        device: String,
    },
    DeviceRemoved {
        device: String,
    },
    DeviceFailed {
        device: String,
        reason: String,
    },
    /// A configured device that could not be opened at start (gone): the
    /// cache started without it.
    DeviceMissing {
        device: String,
        reason: String,
    },
    ModeChanged {
        export: String,
        from: String,
        to: String,
    },
    FlushStarted {
        why: String,
        dirty_bytes: u64,
    },
    FlushFinished {
        why: String,
    },
    /// Write-back is off for new writes (write-back exports are served
    /// write-through): fewer than two working devices.
    Degraded {
        reason: String,
    },
    Recovered {
        records: usize,
        dirty_bytes: u64,
    },
    DestageFailed {
        reason: String,
    },
    /// Dirty data of a file that no longer exists was dropped.
    Dropped {
        bytes: u64,
    },
    /// A device the read cache no longer uses (its clean data is dropped;
    /// reads go to the back end).
    ReadCacheDeviceDropped {
        device: String,
        reason: String,
    },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::DeviceAdded { device } => write!(f, "device added: {device}"),
            Event::DeviceRemoved { device } => write!(f, "device removed: {device}"),
            Event::DeviceFailed { device, reason } => write!(f, "device failed: {device}: {reason}"),
            Event::DeviceMissing { device, reason } => {
                write!(f, "device missing at start: {device}: {reason}; started without it")
            }
            Event::ModeChanged { export, from, to } => write!(f, "mode changed: {export}: {from} -> {to}"),
            Event::FlushStarted { why, dirty_bytes } => write!(f, "flush started ({why}): {dirty_bytes} dirty bytes"),
            Event::FlushFinished { why } => write!(f, "flush finished ({why})"),
            Event::Degraded { reason } => write!(f, "degraded: {reason}"),
            Event::Recovered { records, dirty_bytes } => {
                write!(f, "recovered the log: {records} records, {dirty_bytes} dirty bytes")
            }
            Event::DestageFailed { reason } => write!(f, "destage failed: {reason}"),
            Event::Dropped { bytes } => write!(f, "dropped {bytes} dirty bytes of removed files"),
            Event::ReadCacheDeviceDropped { device, reason } => {
                write!(f, "device out of the read cache: {device}: {reason}")
            }
        }
    }
}

#[derive(Default)]
pub struct Events {
    ring: Mutex<VecDeque<(SystemTime, Event)>>,
}

impl Events {
    pub fn push(&self, event: Event) {
        tracing::info!("cache: {event}");
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if ring.len() == EVENTS_MAX {
            ring.pop_front();
        }
        ring.push_back((SystemTime::now(), event));
    }

    /// Oldest first.
    pub fn list(&self) -> Vec<(SystemTime, Event)> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }
}

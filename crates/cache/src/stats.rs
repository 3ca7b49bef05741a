//! Counters for `keel cache stat` and the metrics endpoint: per export,
//! writes taken by the log and bypassed (and why), bytes read from the
//! log, the read cache and the back end, read-cache hits, misses and
//! admissions; for the whole cache, destage progress and the read cache's
//! slots, evictions and errors.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a write went straight to the back end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bypass {
    /// The export is not write-back.
    Mode,
    /// A sequential stream longer than the cutoff.
    Sequential,
    /// The log had no room.
    Full,
    /// Fewer than two working devices.
    Degraded,
    /// A flush is emptying the log.
    Flushing,
}

impl Bypass {
    pub const ALL: [Bypass; 5] = [Bypass::Mode, Bypass::Sequential, Bypass::Full, Bypass::Degraded, Bypass::Flushing];

    pub fn name(self) -> &'static str {
        match self {
            Bypass::Mode => "mode",
            Bypass::Sequential => "sequential",
            Bypass::Full => "log_full",
            Bypass::Degraded => "degraded",
            Bypass::Flushing => "flushing",
        }
    }
}

/// One export's counters.
#[derive(Debug, Default)]
pub struct ExportCounters {
    pub writes_logged: AtomicU64,
    pub bytes_logged: AtomicU64,
    pub writes_bypassed: [AtomicU64; 5],
    pub bytes_bypassed: AtomicU64,
    /// READs that found dirty data in the log, and its bytes.
    pub reads_log_hit: AtomicU64,
    pub bytes_from_log: AtomicU64,
    pub reads_disk: AtomicU64,
    pub bytes_from_disk: AtomicU64,
    /// READs served whole from the read cache, and their bytes.
    pub read_cache_hits: AtomicU64,
    pub bytes_from_read_cache: AtomicU64,
    /// READs the read cache could not serve (it was asked).
    pub read_cache_misses: AtomicU64,
    /// Blocks copied into the read cache.
    pub read_cache_admissions: AtomicU64,
    /// READs of a sequential stream past the cutoff (sent to the back end).
    pub reads_sequential: AtomicU64,
}

/// A copy of one export's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportSnapshot {
    pub writes_logged: u64,
    pub bytes_logged: u64,
    /// By [`Bypass::ALL`] order.
    pub writes_bypassed: [u64; 5],
    pub bytes_bypassed: u64,
    pub reads_log_hit: u64,
    pub bytes_from_log: u64,
    pub reads_disk: u64,
    pub bytes_from_disk: u64,
    pub read_cache_hits: u64,
    pub bytes_from_read_cache: u64,
    pub read_cache_misses: u64,
    pub read_cache_admissions: u64,
    pub reads_sequential: u64,
}

/// The read cache's counters for the whole cache.
#[derive(Debug, Default)]
pub struct ReadCacheCounters {
    pub slots_total: AtomicU64,
    pub slots_used: AtomicU64,
    pub evictions: AtomicU64,
    /// Hits whose slot did not match its checksum.
    pub checksum_errors: AtomicU64,
    pub read_errors: AtomicU64,
    pub write_errors: AtomicU64,
}

#[derive(Debug, Default)]
pub struct CacheStats {
    exports: RwLock<HashMap<u32, std::sync::Arc<ExportCounters>>>,
    pub destaged_bytes: AtomicU64,
    pub destage_rounds: AtomicU64,
    pub destage_errors: AtomicU64,
    pub dropped_bytes: AtomicU64,
    /// Writes that waited for room in a full log.
    pub full_waits: AtomicU64,
    pub read_cache: std::sync::Arc<ReadCacheCounters>,
}

impl CacheStats {
    fn export(&self, id: u32) -> std::sync::Arc<ExportCounters> {
        if let Some(c) = self.exports.read().unwrap_or_else(|p| p.into_inner()).get(&id) {
            return c.clone();
        }
        self.exports.write().unwrap_or_else(|p| p.into_inner()).entry(id).or_default().clone()
    }

    pub fn logged(&self, export: u32, bytes: u64) {
        let c = self.export(export);
        c.writes_logged.fetch_add(1, Ordering::Relaxed);
        c.bytes_logged.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn bypassed(&self, export: u32, why: Bypass, bytes: u64) {
        let c = self.export(export);
        let i = Bypass::ALL.iter().position(|b| *b == why).expect("listed");
        c.writes_bypassed[i].fetch_add(1, Ordering::Relaxed);
        c.bytes_bypassed.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn read_from_log(&self, export: u32, bytes: u64) {
        let c = self.export(export);
        c.reads_log_hit.fetch_add(1, Ordering::Relaxed);
        c.bytes_from_log.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn read_from_disk(&self, export: u32, bytes: u64) {
        let c = self.export(export);
        c.reads_disk.fetch_add(1, Ordering::Relaxed);
        c.bytes_from_disk.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn read_cache_hit(&self, export: u32, bytes: u64) {
        let c = self.export(export);
        c.read_cache_hits.fetch_add(1, Ordering::Relaxed);
        c.bytes_from_read_cache.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn read_cache_miss(&self, export: u32) {
        self.export(export).read_cache_misses.fetch_add(1, Ordering::Relaxed);
    }

    pub fn read_cache_admitted(&self, export: u32) {
        self.export(export).read_cache_admissions.fetch_add(1, Ordering::Relaxed);
    }

    pub fn read_sequential(&self, export: u32) {
        self.export(export).reads_sequential.fetch_add(1, Ordering::Relaxed);
    }

    pub fn exports(&self) -> Vec<(u32, ExportSnapshot)> {
        let map = self.exports.read().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<(u32, ExportSnapshot)> = map
            .iter()
            .map(|(id, c)| {
                let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
                (
                    *id,
                    ExportSnapshot {
                        writes_logged: l(&c.writes_logged),
                        bytes_logged: l(&c.bytes_logged),
                        writes_bypassed: std::array::from_fn(|i| l(&c.writes_bypassed[i])),
                        bytes_bypassed: l(&c.bytes_bypassed),
                        reads_log_hit: l(&c.reads_log_hit),
                        bytes_from_log: l(&c.bytes_from_log),
                        reads_disk: l(&c.reads_disk),
                        bytes_from_disk: l(&c.bytes_from_disk),
                        read_cache_hits: l(&c.read_cache_hits),
                        bytes_from_read_cache: l(&c.bytes_from_read_cache),
                        read_cache_misses: l(&c.read_cache_misses),
                        read_cache_admissions: l(&c.read_cache_admissions),
                        reads_sequential: l(&c.reads_sequential),
                    },
                )
            })
            .collect();
        out.sort_by_key(|(id, _)| *id);
        out
    }
}

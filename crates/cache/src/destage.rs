//! Destage: dirty extents from the log to the back end, then the head.
//!
//! A round takes a cut of the log (the records before a sequence number),
//! writes every dirty extent from those records to the back end, file by
//! file in offset order with adjacent extents coalesced, restores the
//! file's mtime (the client's, not the destage's), syncs the file, and
//! forgets the extents; once every file of the cut is synced it moves the
//! log's head past the cut. A failure leaves everything dirty: the round
//! is retried, the head stays.
//!
//! Pacing (proportional to how full the log is, as bcache's write-back
//! rate controller): below [`IDLE_FRACTION`] of the ring and younger than
//! [`AGE_MAX`] nothing is destaged; from there to [`FLAT_OUT_FRACTION`]
//! the pause between rounds shrinks from [`PAUSE_MAX`] to none; a flush
//! (mode off, device removal) goes flat out.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use keel_store::{Cred, ExportInfo, SetAttrs, SetTime, Stability, Store, StoreError};

use crate::Shared;
use crate::error::DestageError;
use crate::events::Event;
use crate::log::Log;

pub const IDLE_FRACTION: f64 = 0.10;
pub const FLAT_OUT_FRACTION: f64 = 0.50;
pub const AGE_MAX: Duration = Duration::from_secs(30);
pub const PAUSE_MAX: Duration = Duration::from_millis(200);
/// A round covers at most this share of the ring, so the head moves often.
const ROUND_SHARE: u64 = 8;
/// Largest single write to the back end.
const WRITE_BYTES_MAX: u64 = 1 << 20;

/// The destager thread's loop.
pub fn run<S: Store>(sh: &Arc<Shared<S>>) {
    let mut failures = 0u32;
    while !sh.stopping() {
        let Some(log) = sh.log() else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let used = log.used_bytes();
        let fill = used as f64 / log.ring_bytes() as f64;
        let old = log.oldest().is_some_and(|t| t.elapsed() >= AGE_MAX);
        let degraded = log.healthy_mirrors() < 2 && used > 0;
        let urgent = sh.flush_wanted() || degraded || fill >= FLAT_OUT_FRACTION;
        if used == 0 || (!urgent && !old && fill < IDLE_FRACTION) {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        match sh.destage_round(&log, log.ring_bytes() / ROUND_SHARE) {
            Ok(_) => failures = 0,
            Err(e) => {
                failures += 1;
                sh.stats.destage_errors.fetch_add(1, Ordering::Relaxed);
                if failures == 1 || failures.is_power_of_two() {
                    sh.events.push(Event::DestageFailed { reason: e.to_string() });
                }
                std::thread::sleep(Duration::from_millis(100 * u64::from(failures.min(50))));
                continue;
            }
        }
        if !urgent {
            let span = FLAT_OUT_FRACTION - IDLE_FRACTION;
            let share = ((FLAT_OUT_FRACTION - fill) / span).clamp(0.0, 1.0);
            std::thread::sleep(PAUSE_MAX.mul_f64(share));
        }
    }
}

impl<S: Store> Shared<S> {
    /// One round over at most `bytes_max` of the log. Returns the bytes
    /// written to the back end.
    pub fn destage_round(&self, log: &Log, bytes_max: u64) -> Result<u64, DestageError> {
        let _round = self.round.lock().unwrap_or_else(|p| p.into_inner());
        // A log is replaced only between rounds (with this lock held): one
        // retired before this round began held nothing left to destage, and
        // the index's extents are the new log's, at places in it.
        if log.is_retired() {
            return Ok(0);
        }
        let (cut_seq, cut_addr) = log.cut(bytes_max);
        let who = self.inner.act_as(&Cred::ROOT).map_err(DestageError::ActAsRoot)?;
        let exports = self.inner.exports();
        let mut files = self.index.all();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        let mut written = 0;
        let mut buf = Vec::new();
        for (handle, slot) in files {
            let _io = slot.io();
            let (pieces, mtime, done_after) = {
                let st = slot.lock();
                let pieces = st.older_than(cut_seq);
                let newer = st.extents.len() > pieces.len() || st.last_seq >= cut_seq;
                (pieces, st.mtime, !newer)
            };
            if pieces.is_empty() {
                continue;
            }
            let obj = match self.inner.resolve(&handle, |_| Ok::<(), StoreError>(())) {
                Ok((obj, ())) => obj,
                Err(StoreError::Stale) if export_exists(&exports, &slot) => {
                    // The file is gone: its dirty data has no home.
                    let dropped = slot.lock().retire(cut_seq);
                    self.index.add_dirty(-(dropped as i64));
                    self.stats.dropped_bytes.fetch_add(dropped, Ordering::Relaxed);
                    self.events.push(Event::Dropped { bytes: dropped });
                    continue;
                }
                Err(e) => return Err(DestageError::Open(e)),
            };
            for (offset, len, parts) in coalesce(&pieces) {
                buf.resize(len as usize, 0);
                let mut at = 0usize;
                for e in parts {
                    log.read_data(&mut buf[at..at + e.len as usize], e.pos).map_err(DestageError::LogRead)?;
                    at += e.len as usize;
                }
                let r = self.inner.write(&who, &obj, offset, &buf, Stability::Unstable);
                // The back end changed under the read cache's copies (whose
                // blocks the log overlays until the extents are retired,
                // below: the invalidation comes first).
                self.invalidate(&handle, offset, offset + len);
                r.map_err(DestageError::Write)?;
                written += len;
            }
            if done_after {
                // The client's mtime, not the destage's.
                let set = SetAttrs { mtime: SetTime::To(mtime), ..SetAttrs::default() };
                self.inner.setattr(&who, &obj, &set, None, false).map_err(DestageError::SetAttr)?;
            }
            self.inner.commit(&who, &obj, true).map_err(DestageError::Sync)?;
            let retired = slot.lock().retire(cut_seq);
            self.index.add_dirty(-(retired as i64));
        }
        drop(who);
        {
            let _reuse = self.ring_guard.write().unwrap_or_else(|p| p.into_inner());
            log.advance_head(cut_seq, cut_addr).map_err(DestageError::Head)?;
        }
        self.index.release_before(cut_seq);
        self.stats.destaged_bytes.fetch_add(written, Ordering::Relaxed);
        self.stats.destage_rounds.fetch_add(1, Ordering::Relaxed);
        Ok(written)
    }
}

/// Whether the export of a live file still exists (a stale handle then
/// means the file is gone, not that its export was taken away).
fn export_exists(exports: &[ExportInfo], slot: &crate::index::FileSlot) -> bool {
    match slot.lock().export_id {
        Some(id) => exports.iter().any(|e| e.id == id),
        // Recovered before any call named its export: a stale handle of
        // a store that still serves exports is a removed file.
        None => !exports.is_empty(),
    }
}

/// Runs of adjacent extents, each at most [`WRITE_BYTES_MAX`]: (offset,
/// length, the extents in order).
fn coalesce(pieces: &[(u64, crate::index::Extent)]) -> Vec<(u64, u64, Vec<crate::index::Extent>)> {
    let mut runs: Vec<(u64, u64, Vec<crate::index::Extent>)> = Vec::new();
    for (off, e) in pieces {
        match runs.last_mut() {
            Some((start, len, parts)) if *start + *len == *off && *len + e.len <= WRITE_BYTES_MAX => {
                *len += e.len;
                parts.push(*e);
            }
            _ => runs.push((*off, e.len, vec![*e])),
        }
    }
    runs
}

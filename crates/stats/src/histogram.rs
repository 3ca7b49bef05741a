//! Latency histograms with fixed, log-spaced buckets: four per power of
//! two from 1.024 µs to 2^36 ns (68.7 s), plus one below and one above.
//! Fixed buckets make recording one atomic add, make snapshots
//! subtractable (rates over an interval) and let Prometheus histograms
//! and percentiles come from the same counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Buckets per power of two.
const SUB_BUCKETS: u32 = 4;
/// log2 of the first bucket's upper bound, in nanoseconds (1.024 µs).
const MIN_SHIFT: u32 = 10;
/// log2 of the last finite bucket's upper bound, in nanoseconds (68.7 s).
const MAX_SHIFT: u32 = 36;
/// Buckets: one up to 2^MIN_SHIFT ns, four per power of two up to
/// 2^MAX_SHIFT ns, and one above (+Inf).
pub const BUCKETS: usize = 1 + ((MAX_SHIFT - MIN_SHIFT) * SUB_BUCKETS) as usize + 1;

/// The upper bound of bucket `i` in nanoseconds (inclusive: a bucket holds
/// the values above the previous bound up to its own); `None` for the last
/// bucket, which has none (+Inf).
pub fn bucket_upper_ns(i: usize) -> Option<u64> {
    if i == 0 {
        return Some(1 << MIN_SHIFT);
    }
    if i >= BUCKETS - 1 {
        return None;
    }
    let octave = MIN_SHIFT + (i as u32 - 1) / SUB_BUCKETS;
    let sub = (i as u64 - 1) % u64::from(SUB_BUCKETS);
    Some((1u64 << octave) + (sub + 1) * (1u64 << (octave - 2)))
}

/// The bucket that holds `ns`.
pub fn bucket_of(ns: u64) -> usize {
    if ns <= 1 << MIN_SHIFT {
        return 0;
    }
    let w = ns - 1;
    let octave = 63 - w.leading_zeros();
    if octave >= MAX_SHIFT {
        return BUCKETS - 1;
    }
    let sub = (w >> (octave - 2)) & u64::from(SUB_BUCKETS - 1);
    1 + ((octave - MIN_SHIFT) * SUB_BUCKETS) as usize + sub as usize
}

/// A histogram that any number of threads record into without a lock.
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { buckets: std::array::from_fn(|_| AtomicU64::new(0)), sum_ns: AtomicU64::new(0) }
    }
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let buckets = self
            .buckets
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                let n = b.load(Ordering::Relaxed);
                (n > 0).then_some([i as u64, n])
            })
            .collect();
        HistogramSnapshot { buckets, sum_ns: self.sum_ns.load(Ordering::Relaxed) }
    }
}

/// A histogram's counts at one moment: `[bucket, count]` pairs for the
/// buckets that hold something (bucket numbers as [`bucket_upper_ns`]
/// numbers them), and the sum of every value recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramSnapshot {
    pub buckets: Vec<[u64; 2]>,
    pub sum_ns: u64,
}

impl HistogramSnapshot {
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|[_, n]| n).sum()
    }

    /// Every bucket's count, in bucket order.
    pub fn dense(&self) -> [u64; BUCKETS] {
        let mut out = [0; BUCKETS];
        for [i, n] in &self.buckets {
            if let Some(slot) = out.get_mut(*i as usize) {
                *slot += n;
            }
        }
        out
    }

    /// What was recorded after `earlier` (a snapshot of the same histogram).
    pub fn since(&self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        let (now, before) = (self.dense(), earlier.dense());
        let buckets = (0..BUCKETS)
            .filter_map(|i| {
                let n = now[i].saturating_sub(before[i]);
                (n > 0).then_some([i as u64, n])
            })
            .collect();
        HistogramSnapshot { buckets, sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns) }
    }

    /// The value below which a fraction `q` (0 to 1) of the recorded values
    /// lie, interpolated linearly within its bucket; `None` when empty.
    /// Values in the last bucket (above 68.7 s) are reported as its lower
    /// bound.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
        let mut below = 0u64;
        for (i, n) in self.dense().iter().enumerate() {
            if *n == 0 {
                continue;
            }
            if (below + n) as f64 >= rank {
                let lower = if i == 0 { 0 } else { bucket_upper_ns(i - 1).expect("finite") };
                let Some(upper) = bucket_upper_ns(i) else { return Some(Duration::from_nanos(lower)) };
                let within = (rank - below as f64) / *n as f64;
                return Some(Duration::from_nanos(lower + ((upper - lower) as f64 * within) as u64));
            }
            below += n;
        }
        None
    }

    pub fn mean(&self) -> Option<Duration> {
        let n = self.count();
        (n > 0).then(|| Duration::from_nanos(self.sum_ns / n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_log_spaced_and_every_value_lands_under_its_bound() {
        assert_eq!(BUCKETS, 106);
        assert_eq!(bucket_upper_ns(0), Some(1024));
        assert_eq!(bucket_upper_ns(1), Some(1280));
        assert_eq!(bucket_upper_ns(4), Some(2048));
        assert_eq!(bucket_upper_ns(5), Some(2560));
        assert_eq!(bucket_upper_ns(BUCKETS - 2), Some(1 << 36));
        assert_eq!(bucket_upper_ns(BUCKETS - 1), None);
        for i in 1..BUCKETS - 1 {
            let (lo, hi) = (bucket_upper_ns(i - 1).unwrap(), bucket_upper_ns(i).unwrap());
            assert!(hi > lo && hi as f64 / lo as f64 <= 1.26, "bucket {i}: {lo}..{hi}");
            assert_eq!(bucket_of(lo + 1), i);
            assert_eq!(bucket_of(hi), i);
        }
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1024), 0);
        assert_eq!(bucket_of((1 << 36) + 1), BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_come_from_the_buckets_within_their_resolution() {
        let h = Histogram::default();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 1000);
        for (q, want_us) in [(0.5, 500.0), (0.99, 990.0), (0.999, 999.0)] {
            let got = s.quantile(q).unwrap().as_secs_f64() * 1e6;
            assert!((got - want_us).abs() / want_us < 0.2, "q{q}: {got} µs, want about {want_us}");
        }
        assert_eq!(s.mean(), Some(Duration::from_nanos(500_500)));
        assert_eq!(HistogramSnapshot::default().quantile(0.5), None);
    }

    #[test]
    fn a_later_snapshot_minus_an_earlier_one_is_what_came_between() {
        let h = Histogram::default();
        h.record(Duration::from_micros(5));
        let before = h.snapshot();
        h.record(Duration::from_millis(5));
        h.record(Duration::from_millis(5));
        let between = h.snapshot().since(&before);
        assert_eq!(between.count(), 2);
        assert_eq!(between.sum_ns, 10_000_000);
        let p50 = between.quantile(0.5).unwrap();
        assert!(p50 > Duration::from_millis(4) && p50 <= Duration::from_millis(6), "{p50:?}");
    }
}

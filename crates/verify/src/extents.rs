//! Sets of byte ranges, coalesced: what was acknowledged as stable.

use std::collections::BTreeMap;

/// Disjoint, non-adjacent half-open ranges `[start, end)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtentSet {
    /// start → end.
    ranges: BTreeMap<u64, u64>,
}

impl ExtentSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `[offset, offset + len)`, merging with overlapping or adjacent
    /// ranges.
    pub fn insert(&mut self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mut start = offset;
        let mut end = offset.saturating_add(len);
        // The range starting at or before `start` may reach it.
        if let Some((&s, &e)) = self.ranges.range(..=start).next_back()
            && e >= start
        {
            start = s;
            end = end.max(e);
            self.ranges.remove(&s);
        }
        // Ranges starting inside (or right at the end of) the new one.
        while let Some((&s, &e)) = self.ranges.range(start..=end).next() {
            end = end.max(e);
            self.ranges.remove(&s);
        }
        self.ranges.insert(start, end);
    }

    pub fn extend(&mut self, other: &ExtentSet) {
        for (start, end) in other.iter() {
            self.insert(start, end - start);
        }
    }

    /// Bytes covered.
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn count(&self) -> usize {
        self.ranges.len()
    }

    /// The ranges as `(start, end)`, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&s, &e)| (s, e))
    }

    /// The ranges as `(start, end)` in a vector, in order.
    pub fn to_vec(&self) -> Vec<(u64, u64)> {
        self.iter().collect()
    }

    /// Whether `[offset, offset + len)` is covered entirely.
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        len == 0 || self.ranges.range(..=offset).next_back().is_some_and(|(_, &e)| e >= offset.saturating_add(len))
    }

    /// Removes everything and returns what was there.
    pub fn take(&mut self) -> ExtentSet {
        std::mem::take(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_overlapping_and_adjacent_ranges() {
        let mut s = ExtentSet::new();
        s.insert(10, 5);
        s.insert(30, 10);
        s.insert(0, 0);
        assert_eq!(s.to_vec(), [(10, 15), (30, 40)]);
        s.insert(15, 5); // adjacent on the left
        assert_eq!(s.to_vec(), [(10, 20), (30, 40)]);
        s.insert(25, 5); // adjacent on the right
        assert_eq!(s.to_vec(), [(10, 20), (25, 40)]);
        s.insert(5, 50); // swallows everything
        assert_eq!(s.to_vec(), [(5, 55)]);
        s.insert(12, 3); // inside
        assert_eq!(s.to_vec(), [(5, 55)]);
        assert_eq!(s.bytes(), 50);
        assert!(s.contains(5, 50) && s.contains(20, 1) && !s.contains(54, 2) && !s.contains(0, 6));
    }
}

//! The self-describing word format and the classifier that reads it back.
//!
//! Every aligned 8-byte word of a stream is, as a big-endian `u64`,
//!
//! ```text
//!   63                               20 19                0
//!  +-----------------------------------+-------------------+
//!  |  (offset / 8) XOR mask  (44 bits) |  check (20 bits)  |
//!  +-----------------------------------+-------------------+
//! ```
//!
//! The stream's key is output number `stream + 1` of a SplitMix64 generator
//! seeded with the run's seed; `mask` is the top 44 bits of the key's own
//! SplitMix64 mix, and `check` the top 20 bits of output number `offset / 8`
//! of a SplitMix64 generator seeded with the key (a check of 0 becomes 1,
//! so no genuine word is all zeros and a zero-filled range can never pass
//! for data). Given the run's seed, each word names the offset it was
//! written for and proves (up to 20 bits) that this run wrote it for this
//! stream.
//!
//! Why these widths: 44 index bits address 2^44 words, 128 TiB per stream,
//! beyond any file a test writes. Being **valid** needs all 64 bits to
//! match the expected word. The index is masked per stream, so a word of
//! another stream or run at the same offset differs in the index bits too
//! (unless the masks agree, 2^-44) and passes for valid with probability
//! 2^-64, like random damage. The 20-bit check only decides *which kind* of
//! damage a wrong word is: a word whose check matches the index it decodes
//! to is **misplaced** (genuine data of this stream, written at the wrong
//! offset); foreign or random bytes pass that test with probability 2^-20
//! (one stray "misplaced" word per 8 MiB of garbage on average), which
//! changes the label, never the verdict, since misplaced data fails a check
//! as well.

use serde::{Deserialize, Serialize};

const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
const CHECK_BITS: u32 = 20;
const CHECK_MASK: u64 = (1 << CHECK_BITS) - 1;
/// Largest stream: 2^44 words.
pub const STREAM_BYTES_MAX: u64 = 8 << (64 - CHECK_BITS);

/// The SplitMix64 output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The expected contents of one stream of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pattern {
    key: u64,
    /// XORed into the word index (low 44 bits used).
    mask: u64,
}

impl Pattern {
    pub fn new(seed: u64, stream: u32) -> Self {
        let key = mix(seed.wrapping_add((u64::from(stream) + 1).wrapping_mul(GAMMA)));
        Pattern { key, mask: mix(key) >> CHECK_BITS }
    }

    fn check(&self, index: u64) -> u64 {
        (mix(self.key.wrapping_add(index.wrapping_mul(GAMMA))) >> (64 - CHECK_BITS)).max(1)
    }

    /// The word at word index `index`.
    pub fn word(&self, index: u64) -> u64 {
        ((index ^ self.mask) << CHECK_BITS) | self.check(index)
    }

    /// Fills `buf` with the stream's bytes from byte `offset` on (any
    /// alignment: short writes leave a client resuming mid-word).
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        let mut at = 0;
        let mut pos = offset;
        while at < buf.len() {
            let word = self.word(pos / 8).to_be_bytes();
            let skip = (pos % 8) as usize;
            let n = (8 - skip).min(buf.len() - at);
            buf[at..at + n].copy_from_slice(&word[skip..skip + n]);
            at += n;
            pos += n as u64;
        }
    }

    pub fn bytes(&self, offset: u64, len: usize) -> bytes::Bytes {
        let mut buf = vec![0; len];
        self.fill(offset, &mut buf);
        buf.into()
    }

    /// What the 8 bytes found at word index `index` are.
    pub fn classify(&self, index: u64, found: u64) -> Class {
        if found == self.word(index) {
            return Class::Valid;
        }
        if found == 0 {
            return Class::Zero;
        }
        let source = (found >> CHECK_BITS) ^ self.mask;
        // A word naming its own index with a good check would be the
        // expected word.
        if source != index && found & CHECK_MASK == self.check(source) {
            return Class::Misplaced { source: source * 8 };
        }
        Class::Corrupt
    }

    /// A word cut short by the end of the file: valid if it is a prefix of
    /// the expected word, zero if all zeros, otherwise corrupt (too short to
    /// tell where it came from).
    pub fn classify_partial(&self, index: u64, found: &[u8]) -> Class {
        let expected = self.word(index).to_be_bytes();
        if found == &expected[..found.len()] {
            Class::Valid
        } else if found.iter().all(|&b| b == 0) {
            Class::Zero
        } else {
            Class::Corrupt
        }
    }
}

/// The classification of a word (or of a range of bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Valid,
    Zero,
    /// Genuine data of this stream that belongs at byte offset `source`.
    Misplaced {
        source: u64,
    },
    Corrupt,
}

/// The kinds of range `keel verify check` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Exactly the expected bytes.
    Valid,
    /// Zero bytes where data should be (a hole, or a zero-filled block).
    Zero,
    /// Genuine data of this stream, written for another offset.
    Misplaced,
    /// Anything else: flipped bits, another stream's or run's data.
    Corrupt,
    /// Past the end of the file (the file is shorter than the stream).
    Missing,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Valid => "valid",
            Kind::Zero => "zero",
            Kind::Misplaced => "misplaced",
            Kind::Corrupt => "corrupt",
            Kind::Missing => "missing",
        }
    }
}

/// A run of bytes of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    pub kind: Kind,
    pub offset: u64,
    pub len: u64,
    /// Misplaced data: the offset the first byte was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<u64>,
}

impl Extent {
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// Turns the bytes of a stream, fed in order in pieces of any size and
/// alignment, into extents of one kind each (misplaced extents also need
/// consecutive sources), handed to `sink` as they close.
pub struct Classifier<F: FnMut(Extent)> {
    pattern: Pattern,
    /// Offset of the next byte fed (carry included).
    pos: u64,
    carry: [u8; 8],
    carry_len: usize,
    open: Option<Extent>,
    sink: F,
}

impl<F: FnMut(Extent)> Classifier<F> {
    /// Starts at offset 0.
    pub fn new(pattern: Pattern, sink: F) -> Self {
        Classifier { pattern, pos: 0, carry: [0; 8], carry_len: 0, open: None, sink }
    }

    /// Bytes fed so far.
    pub fn position(&self) -> u64 {
        self.pos + self.carry_len as u64
    }

    pub fn feed(&mut self, mut data: &[u8]) {
        if self.carry_len > 0 {
            let n = (8 - self.carry_len).min(data.len());
            self.carry[self.carry_len..self.carry_len + n].copy_from_slice(&data[..n]);
            self.carry_len += n;
            data = &data[n..];
            if self.carry_len < 8 {
                return;
            }
            let word = u64::from_be_bytes(self.carry);
            self.carry_len = 0;
            self.word(word);
        }
        let mut words = data.chunks_exact(8);
        for w in &mut words {
            let mut b = [0; 8];
            b.copy_from_slice(w);
            self.word(u64::from_be_bytes(b));
        }
        let rest = words.remainder();
        self.carry[..rest.len()].copy_from_slice(rest);
        self.carry_len = rest.len();
    }

    fn word(&mut self, found: u64) {
        let index = self.pos / 8;
        let class = self.pattern.classify(index, found);
        self.push(class, 8);
    }

    fn push(&mut self, class: Class, len: u64) {
        let (kind, source) = match class {
            Class::Valid => (Kind::Valid, None),
            Class::Zero => (Kind::Zero, None),
            Class::Misplaced { source } => (Kind::Misplaced, Some(source)),
            Class::Corrupt => (Kind::Corrupt, None),
        };
        self.push_kind(kind, source, len);
    }

    fn push_kind(&mut self, kind: Kind, source: Option<u64>, len: u64) {
        let offset = self.pos;
        self.pos += len;
        if let Some(open) = &mut self.open
            && open.kind == kind
            && open.end() == offset
            && open.source.map(|s| s + open.len) == source
        {
            open.len += len;
            return;
        }
        if let Some(done) = self.open.replace(Extent { kind, offset, len, source }) {
            (self.sink)(done);
        }
    }

    /// Ends the stream at the bytes fed so far (a partial last word is
    /// compared as a prefix), then reports the bytes up to `expected_len`
    /// as missing.
    pub fn finish(mut self, expected_len: u64) {
        if self.carry_len > 0 {
            let class = self.pattern.classify_partial(self.pos / 8, &self.carry[..self.carry_len]);
            let len = self.carry_len as u64;
            self.carry_len = 0;
            self.push(class, len);
        }
        if self.pos < expected_len {
            self.push_kind(Kind::Missing, None, expected_len - self.pos);
        }
        if let Some(done) = self.open.take() {
            (self.sink)(done);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extents(pattern: Pattern, pieces: &[&[u8]], expected: u64) -> Vec<Extent> {
        let mut out = Vec::new();
        let mut c = Classifier::new(pattern, |e| out.push(e));
        for p in pieces {
            c.feed(p);
        }
        c.finish(expected);
        out
    }

    #[test]
    fn words_carry_their_offset_and_are_never_zero() {
        let p = Pattern::new(42, 3);
        for index in [0u64, 1, 2, 1 << 40] {
            let w = p.word(index);
            assert_eq!((w >> 20) ^ p.mask, index);
            assert_ne!(w & CHECK_MASK, 0);
        }
        assert_ne!(Pattern::new(42, 3).word(5), Pattern::new(42, 4).word(5), "streams differ");
        assert_ne!(Pattern::new(42, 3).word(5), Pattern::new(43, 3).word(5), "runs differ");
        assert_eq!(&p.bytes(0, 8)[..], &p.word(0).to_be_bytes());
    }

    #[test]
    fn fill_at_any_alignment_matches_the_words() {
        let p = Pattern::new(7, 0);
        let whole = p.bytes(0, 100);
        for start in 0..20 {
            for len in 0..30 {
                assert_eq!(&p.bytes(start as u64, len)[..], &whole[start..start + len], "{start}+{len}");
            }
        }
    }

    #[test]
    fn classifies_every_kind_of_damage() {
        let p = Pattern::new(99, 1);
        let mut data = p.bytes(0, 4096).to_vec();
        data[100] ^= 0x40; // word 12: corrupt
        data[1024..1024 + 64].fill(0); // zeros
        let moved = p.bytes(3000, 16);
        data[2048..2064].copy_from_slice(&moved); // misplaced from 3000
        let other = Pattern::new(99, 2).bytes(3072, 8);
        data[3072..3080].copy_from_slice(&other); // another stream, same offset
        let got = extents(p, &[&data[..5], &data[5..1029], &data[1029..4000]], 4096);
        let e = |kind, offset, len, source| Extent { kind, offset, len, source };
        assert_eq!(
            got,
            [
                e(Kind::Valid, 0, 96, None),
                e(Kind::Corrupt, 96, 8, None),
                e(Kind::Valid, 104, 920, None),
                e(Kind::Zero, 1024, 64, None),
                e(Kind::Valid, 1088, 960, None),
                e(Kind::Misplaced, 2048, 16, Some(3000)),
                e(Kind::Valid, 2064, 1008, None),
                e(Kind::Corrupt, 3072, 8, None),
                e(Kind::Valid, 3080, 920, None),
                e(Kind::Missing, 4000, 96, None),
            ]
        );
    }

    #[test]
    fn a_partial_last_word_is_compared_as_a_prefix() {
        let p = Pattern::new(5, 0);
        let data = p.bytes(0, 13);
        assert_eq!(
            extents(p, &[&data], 16),
            [
                Extent { kind: Kind::Valid, offset: 0, len: 13, source: None },
                Extent { kind: Kind::Missing, offset: 13, len: 3, source: None }
            ]
        );
        let mut bad = data.to_vec();
        bad[12] ^= 1;
        assert_eq!(extents(p, &[&bad], 13)[1], Extent { kind: Kind::Corrupt, offset: 8, len: 5, source: None });
        assert_eq!(extents(p, &[&[0u8; 5]], 5), [Extent { kind: Kind::Zero, offset: 0, len: 5, source: None }]);
    }
}

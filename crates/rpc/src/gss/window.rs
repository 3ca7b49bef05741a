//! The sequence window of one context (RFC 2203 section 5.3.3.1): the
//! highest sequence number seen and which of the [`SEQ_WINDOW`] numbers
//! below it were seen. A number seen before, or below the window, is a
//! replay or too old: the call is dropped without a reply.

/// Sequence numbers a context remembers below the highest seen, told to
/// the client in `seq_window` (knfsd's GSS_SEQ_WIN).
pub const SEQ_WINDOW: u32 = 128;

const WORDS: usize = SEQ_WINDOW as usize / 64;

#[derive(Debug, Default)]
pub struct SeqWindow {
    /// The highest sequence number accepted, if any was.
    highest: Option<u32>,
    /// Bit `i` (of word `i / 64`) set: `highest - i` was accepted.
    seen: [u64; WORDS],
}

impl SeqWindow {
    /// Takes `seq` if it is new and not below the window; `false` means
    /// drop the call. `seq` must be below MAXSEQ (checked before).
    pub fn accept(&mut self, seq: u32) -> bool {
        let Some(highest) = self.highest else {
            self.highest = Some(seq);
            self.seen = [0; WORDS];
            self.set(0);
            return true;
        };
        if seq > highest {
            self.shift(seq - highest);
            self.highest = Some(seq);
            self.set(0);
            return true;
        }
        let behind = highest - seq;
        if behind >= SEQ_WINDOW || self.is_set(behind) {
            return false;
        }
        self.set(behind);
        true
    }

    fn shift(&mut self, by: u32) {
        if by >= SEQ_WINDOW {
            self.seen = [0; WORDS];
            return;
        }
        let (words, bits) = ((by / 64) as usize, by % 64);
        for i in (0..WORDS).rev() {
            let from = i.checked_sub(words);
            let mut w = from.map_or(0, |f| self.seen[f] << bits);
            if bits > 0
                && let Some(f) = from.and_then(|f| f.checked_sub(1))
            {
                w |= self.seen[f] >> (64 - bits);
            }
            self.seen[i] = w;
        }
    }

    fn set(&mut self, behind: u32) {
        self.seen[(behind / 64) as usize] |= 1 << (behind % 64);
    }

    fn is_set(&self, behind: u32) -> bool {
        self.seen[(behind / 64) as usize] & (1 << (behind % 64)) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_and_numbers_below_the_window_are_refused() {
        let mut w = SeqWindow::default();
        assert!(w.accept(10));
        assert!(!w.accept(10), "a replay");
        assert!(w.accept(5), "out of order, inside the window");
        assert!(!w.accept(5));
        assert!(w.accept(200));
        assert!(!w.accept(200 - SEQ_WINDOW), "just below the window");
        assert!(w.accept(200 - SEQ_WINDOW + 1), "the window's last number, unseen");
        assert!(!w.accept(10), "seen, and below the window now");
    }

    #[test]
    fn the_window_slides_across_words() {
        let mut w = SeqWindow::default();
        for seq in 0..300 {
            assert!(w.accept(seq));
        }
        for seq in 300 - SEQ_WINDOW..300 {
            assert!(!w.accept(seq), "{seq} seen");
        }
        assert!(w.accept(370));
        // 300..370 unseen and inside the window; 242..300 seen.
        assert!(w.accept(299 + 1));
        assert!(!w.accept(299));
        assert!(!w.accept(370 - SEQ_WINDOW));
        for seq in 301..370 {
            assert!(w.accept(seq), "{seq} unseen");
        }
    }
}

//! Record marking (RFC 5531 section 11): each fragment is preceded by a
//! four-byte header whose top bit marks the last fragment of a record and
//! whose low 31 bits give the fragment length.

use bytes::{Buf, Bytes, BytesMut};

pub const LAST_FRAGMENT: u32 = 1 << 31;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record of at least {bytes} bytes exceeds the limit of {max} bytes")]
    TooLarge { bytes: usize, max: usize },
    #[error("record split into more than {max} fragments")]
    TooManyFragments { max: usize },
}

/// Fragments per record beyond this are refused: real clients send one.
const FRAGMENTS_PER_RECORD_MAX: usize = 1024;

/// Reassembles records from the bytes of a stream, refusing any record
/// longer than `record_bytes_max`.
#[derive(Debug)]
pub struct RecordAssembler {
    record_bytes_max: usize,
    /// Fragments received so far of a multi-fragment record.
    partial: Option<BytesMut>,
    fragments: usize,
}

impl RecordAssembler {
    pub fn new(record_bytes_max: usize) -> Self {
        RecordAssembler { record_bytes_max, partial: None, fragments: 0 }
    }

    /// Takes the next complete record out of `buf`, if `buf` holds one. A
    /// record sent as a single fragment (what real clients do) is split off
    /// `buf` without copying.
    pub fn next_record(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, RecordError> {
        loop {
            let Some((last, len)) = self.fragment_header(buf)? else { return Ok(None) };
            if buf.len() < 4 + len {
                return Ok(None);
            }
            buf.advance(4);
            let fragment = buf.split_to(len);
            match (last, self.partial.take()) {
                (true, None) => return Ok(Some(fragment.freeze())),
                (true, Some(mut partial)) => {
                    partial.extend_from_slice(&fragment);
                    self.fragments = 0;
                    return Ok(Some(partial.freeze()));
                }
                (false, partial) => {
                    self.fragments += 1;
                    if self.fragments > FRAGMENTS_PER_RECORD_MAX {
                        return Err(RecordError::TooManyFragments { max: FRAGMENTS_PER_RECORD_MAX });
                    }
                    let mut partial = partial.unwrap_or_default();
                    partial.extend_from_slice(&fragment);
                    self.partial = Some(partial);
                }
            }
        }
    }

    /// How many bytes `buf` should be able to hold for the fragment that is
    /// being received to arrive in one piece (a hint for reserving).
    pub fn bytes_wanted(&self, buf: &BytesMut) -> usize {
        match self.fragment_header(buf) {
            Ok(Some((_, len))) => 4 + len,
            _ => 4,
        }
    }

    /// Whether `buf` holds a whole fragment: the next call to
    /// [`RecordAssembler::next_record`] makes progress without more bytes.
    pub fn holds_fragment(&self, buf: &BytesMut) -> bool {
        matches!(self.fragment_header(buf), Ok(Some((_, len))) if buf.len() >= 4 + len)
            || self.fragment_header(buf).is_err()
    }

    fn fragment_header(&self, buf: &BytesMut) -> Result<Option<(bool, usize)>, RecordError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let header = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let len = (header & !LAST_FRAGMENT) as usize;
        let so_far = self.partial.as_ref().map_or(0, |p| p.len());
        if so_far + len > self.record_bytes_max {
            return Err(RecordError::TooLarge { bytes: so_far + len, max: self.record_bytes_max });
        }
        Ok(Some((header & LAST_FRAGMENT != 0, len)))
    }
}

/// The header of a record of `len` bytes sent as one fragment.
pub fn record_mark(len: usize) -> [u8; 4] {
    let len = u32::try_from(len).ok().filter(|l| l & LAST_FRAGMENT == 0).expect("record under 2 GiB");
    (len | LAST_FRAGMENT).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fragment(last: bool, data: &[u8]) -> Vec<u8> {
        let mut v = ((data.len() as u32) | if last { LAST_FRAGMENT } else { 0 }).to_be_bytes().to_vec();
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn single_fragment_records_come_out_whole_and_uncopied() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&fragment(true, b"hello"));
        buf.extend_from_slice(&fragment(true, b"world!"));
        let mut ra = RecordAssembler::new(1024);
        let first_data_ptr = buf[4..].as_ptr();
        let r1 = ra.next_record(&mut buf).unwrap().unwrap();
        assert_eq!(&r1[..], b"hello");
        assert_eq!(r1.as_ptr(), first_data_ptr);
        assert_eq!(&ra.next_record(&mut buf).unwrap().unwrap()[..], b"world!");
        assert_eq!(ra.next_record(&mut buf).unwrap(), None);
    }

    #[test]
    fn multi_fragment_records_are_joined() {
        let mut ra = RecordAssembler::new(1024);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&fragment(false, b"ab"));
        buf.extend_from_slice(&fragment(false, b""));
        buf.extend_from_slice(&fragment(true, b"cde"));
        assert_eq!(&ra.next_record(&mut buf).unwrap().unwrap()[..], b"abcde");
        assert!(buf.is_empty());
    }

    #[test]
    fn partial_input_waits_for_more() {
        let mut ra = RecordAssembler::new(1024);
        let whole = fragment(true, b"0123456789");
        let mut buf = BytesMut::new();
        for (i, b) in whole.iter().enumerate() {
            assert_eq!(ra.next_record(&mut buf).unwrap(), None, "after {i} bytes");
            buf.extend_from_slice(&[*b]);
        }
        assert_eq!(ra.bytes_wanted(&buf), 14);
        assert_eq!(&ra.next_record(&mut buf).unwrap().unwrap()[..], b"0123456789");
    }

    #[test]
    fn oversized_records_are_refused_from_the_header_alone() {
        let mut ra = RecordAssembler::new(8);
        let mut buf = BytesMut::from(&[0x80, 0, 0, 9][..]);
        assert_eq!(ra.next_record(&mut buf), Err(RecordError::TooLarge { bytes: 9, max: 8 }));
        // The limit is on the whole record, not on each fragment.
        let mut ra = RecordAssembler::new(8);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&fragment(false, b"12345"));
        buf.extend_from_slice(&fragment(true, b"6789"));
        assert_eq!(ra.next_record(&mut buf), Err(RecordError::TooLarge { bytes: 9, max: 8 }));
    }

    #[test]
    fn endless_empty_fragments_are_refused() {
        let mut ra = RecordAssembler::new(8);
        let mut buf = BytesMut::new();
        for _ in 0..=FRAGMENTS_PER_RECORD_MAX {
            buf.extend_from_slice(&fragment(false, b""));
        }
        assert!(matches!(ra.next_record(&mut buf), Err(RecordError::TooManyFragments { .. })));
    }
}

use bytes::{BufMut, Bytes, BytesMut};

use crate::{Encode, padding};

/// Shared payloads at least this long are spliced in as their own segment
/// instead of being copied.
const SPLICE_BYTES_MIN: usize = 1024;

const ZEROS: [u8; 4] = [0; 4];

/// Writes XDR items. The output is a list of segments: small items are
/// copied into a growing buffer, large shared payloads are kept as they are.
#[derive(Debug, Default)]
pub struct Encoder {
    done: Vec<Bytes>,
    done_bytes: usize,
    buf: BytesMut,
}

impl Encoder {
    pub fn new() -> Self {
        Self::with_capacity(512)
    }

    pub fn with_capacity(bytes: usize) -> Self {
        Encoder { done: Vec::new(), done_bytes: 0, buf: BytesMut::with_capacity(bytes) }
    }

    /// Total bytes encoded so far.
    pub fn len(&self) -> usize {
        self.done_bytes + self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn u32(&mut self, v: u32) {
        self.buf.put_u32(v);
    }

    pub fn i32(&mut self, v: i32) {
        self.buf.put_i32(v);
    }

    pub fn u64(&mut self, v: u64) {
        self.buf.put_u64(v);
    }

    pub fn i64(&mut self, v: i64) {
        self.buf.put_i64(v);
    }

    pub fn bool(&mut self, v: bool) {
        self.buf.put_u32(v as u32);
    }

    /// Fixed-length opaque data: the bytes and their padding, no length.
    pub fn opaque_fixed(&mut self, data: &[u8]) {
        self.buf.put_slice(data);
        self.buf.put_slice(&ZEROS[..padding(data.len())]);
    }

    /// Variable-length opaque data or a string: length, bytes, padding.
    pub fn opaque(&mut self, data: &[u8]) {
        self.u32(u32::try_from(data.len()).expect("XDR opaque longer than 4 GiB"));
        self.opaque_fixed(data);
    }

    /// Like [`Encoder::opaque`], but a large payload becomes its own segment
    /// rather than being copied.
    pub fn opaque_shared(&mut self, data: Bytes) {
        if data.len() < SPLICE_BYTES_MIN {
            self.opaque(&data);
            return;
        }
        self.u32(u32::try_from(data.len()).expect("XDR opaque longer than 4 GiB"));
        let pad = padding(data.len());
        self.push_segment(data);
        self.buf.put_slice(&ZEROS[..pad]);
    }

    /// Raw bytes that are already XDR (a cached or pre-encoded body).
    pub fn raw(&mut self, data: &[u8]) {
        self.buf.put_slice(data);
    }

    /// Raw pre-encoded segments, spliced in without copying.
    pub fn raw_segments(&mut self, segments: impl IntoIterator<Item = Bytes>) {
        for s in segments {
            if s.len() < SPLICE_BYTES_MIN {
                self.buf.put_slice(&s);
            } else {
                self.push_segment(s);
            }
        }
    }

    /// The u32 encoded at byte `offset` of what was written so far (to read
    /// back a status after a handler encoded its results), if four bytes
    /// are there.
    pub fn u32_at(&self, offset: usize) -> Option<u32> {
        let mut word = [0u8; 4];
        let mut got = 0;
        let mut start = 0;
        for part in self.done.iter().map(|b| &b[..]).chain(std::iter::once(&self.buf[..])) {
            let end = start + part.len();
            while got < 4 && offset + got >= start && offset + got < end {
                word[got] = part[offset + got - start];
                got += 1;
            }
            start = end;
        }
        (got == 4).then(|| u32::from_be_bytes(word))
    }

    /// Appends a value that implements [`Encode`].
    pub fn put<T: Encode + ?Sized>(&mut self, v: &T) {
        v.encode(self);
    }

    fn push_segment(&mut self, data: Bytes) {
        if !self.buf.is_empty() {
            let head = self.buf.split().freeze();
            self.done_bytes += head.len();
            self.done.push(head);
        }
        self.done_bytes += data.len();
        self.done.push(data);
    }

    /// The encoded segments, in order. Empty segments are left out.
    pub fn finish(mut self) -> Vec<Bytes> {
        if !self.buf.is_empty() {
            self.done.push(self.buf.freeze());
        }
        self.done
    }

    /// The encoding as one contiguous buffer (copies if there are several
    /// segments; meant for small messages and tests).
    pub fn into_bytes(self) -> Bytes {
        let mut segments = self.finish();
        match segments.len() {
            0 => Bytes::new(),
            1 => segments.pop().expect("one segment"),
            _ => {
                let mut all = BytesMut::with_capacity(segments.iter().map(Bytes::len).sum());
                for s in segments {
                    all.put_slice(&s);
                }
                all.freeze()
            }
        }
    }
}

use std::any::Any;
use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use crate::{Encode, padding};

/// Shared payloads at least this long are spliced in as their own segment
/// instead of being copied.
const SPLICE_BYTES_MIN: usize = 1024;

const ZEROS: [u8; 4] = [0; 4];

/// A payload the encoder carries without holding its bytes: only its
/// length is known here. Whoever writes the encoding out (a transport)
/// knows what it is and takes it back with [`Spliced::downcast`]; for the
/// encoder it is opaque, so this crate stays free of I/O.
pub struct Spliced {
    len: usize,
    payload: Box<dyn Any + Send>,
}

impl Spliced {
    /// `payload` stands for `len` bytes of data.
    pub fn new<T: Any + Send>(len: usize, payload: T) -> Self {
        Spliced { len, payload: Box::new(payload) }
    }

    /// Bytes the payload stands for.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The payload, if it is a `T`.
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        self.payload.downcast_ref()
    }

    /// The payload, if it is a `T`.
    pub fn downcast_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.payload.downcast_mut()
    }

    /// The payload, if it is a `T`; the segment back otherwise.
    pub fn downcast<T: Any>(self) -> Result<T, Spliced> {
        let len = self.len;
        self.payload.downcast().map(|b| *b).map_err(|payload| Spliced { len, payload })
    }
}

impl fmt::Debug for Spliced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Spliced({} bytes)", self.len)
    }
}

/// One piece of an encoding: bytes, or a payload carried for the writer.
#[derive(Debug)]
pub enum Segment {
    Bytes(Bytes),
    Spliced(Spliced),
}

impl Segment {
    /// Bytes the segment contributes to the encoding.
    pub fn len(&self) -> usize {
        match self {
            Segment::Bytes(b) => b.len(),
            Segment::Spliced(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, if the segment holds them.
    pub fn as_bytes(&self) -> Option<&Bytes> {
        match self {
            Segment::Bytes(b) => Some(b),
            Segment::Spliced(_) => None,
        }
    }
}

impl From<Bytes> for Segment {
    fn from(b: Bytes) -> Self {
        Segment::Bytes(b)
    }
}

/// Writes XDR items. The output is a list of segments: small items are
/// copied into a growing buffer, large shared payloads are kept as they
/// are, and spliced payloads ([`Spliced`]) are carried as they are.
#[derive(Debug, Default)]
pub struct Encoder {
    done: Vec<Segment>,
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
        self.push_segment(Segment::Bytes(data));
        self.buf.put_slice(&ZEROS[..pad]);
    }

    /// Variable-length opaque data whose bytes the encoder does not hold:
    /// the length, the payload as a segment of its own, the padding.
    pub fn opaque_spliced(&mut self, data: Spliced) {
        self.u32(u32::try_from(data.len()).expect("XDR opaque longer than 4 GiB"));
        let pad = padding(data.len());
        self.push_segment(Segment::Spliced(data));
        self.buf.put_slice(&ZEROS[..pad]);
    }

    /// Raw bytes that are already XDR (a cached or pre-encoded body).
    pub fn raw(&mut self, data: &[u8]) {
        self.buf.put_slice(data);
    }

    /// Raw pre-encoded segments, spliced in without copying.
    pub fn raw_segments(&mut self, segments: impl IntoIterator<Item = Segment>) {
        for s in segments {
            match s {
                Segment::Bytes(b) if b.len() < SPLICE_BYTES_MIN => self.buf.put_slice(&b),
                s => self.push_segment(s),
            }
        }
    }

    /// The u32 encoded at byte `offset` of what was written so far (to read
    /// back a status after a handler encoded its results), if four bytes
    /// are there (and none of them is in a spliced payload).
    pub fn u32_at(&self, offset: usize) -> Option<u32> {
        let mut word = [0u8; 4];
        let mut got = 0;
        let mut start = 0;
        let done = self.done.iter().map(|s| (s.len(), s.as_bytes().map(|b| &b[..])));
        for (len, bytes) in done.chain(std::iter::once((self.buf.len(), Some(&self.buf[..])))) {
            let end = start + len;
            while got < 4 && offset + got >= start && offset + got < end {
                word[got] = bytes?[offset + got - start];
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

    fn push_segment(&mut self, data: Segment) {
        if !self.buf.is_empty() {
            let head = self.buf.split().freeze();
            self.done_bytes += head.len();
            self.done.push(Segment::Bytes(head));
        }
        self.done_bytes += data.len();
        self.done.push(data);
    }

    /// The encoded segments, in order. Empty byte segments are left out.
    pub fn finish(mut self) -> Vec<Segment> {
        if !self.buf.is_empty() {
            self.done.push(Segment::Bytes(self.buf.freeze()));
        }
        self.done
    }

    /// The encoded segments of an encoding that holds only bytes (a call,
    /// a message a program builds for itself).
    ///
    /// # Panics
    /// If a spliced payload was added: only the writer it was meant for
    /// can turn it into bytes.
    pub fn finish_bytes(self) -> Vec<Bytes> {
        self.finish()
            .into_iter()
            .map(|s| match s {
                Segment::Bytes(b) => b,
                Segment::Spliced(s) => panic!("finish_bytes on an encoding with a spliced payload ({s:?})"),
            })
            .collect()
    }

    /// The encoding as one contiguous buffer (copies if there are several
    /// segments; meant for small messages and tests). Panics as
    /// [`Encoder::finish_bytes`] does.
    pub fn into_bytes(self) -> Bytes {
        let mut segments = self.finish_bytes();
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

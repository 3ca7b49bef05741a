use bytes::Bytes;

use crate::{Decode, XdrError, padding};

/// Reads XDR items from a shared buffer. Opaque data comes out as slices of
/// that buffer (reference-counted, not copied).
#[derive(Debug, Clone)]
pub struct Decoder {
    buf: Bytes,
    pos: usize,
}

impl Decoder {
    pub fn new(buf: Bytes) -> Self {
        Decoder { buf, pos: 0 }
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Offset of the next byte to be read.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Everything not yet consumed, without consuming it.
    pub fn rest(&self) -> Bytes {
        self.buf.slice(self.pos..)
    }

    /// The whole buffer this decoder reads from.
    pub fn buffer(&self) -> &Bytes {
        &self.buf
    }

    fn take(&mut self, n: usize) -> Result<&[u8], XdrError> {
        let remaining = self.remaining();
        if n > remaining {
            return Err(XdrError::Truncated { needed: n, remaining });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn u32(&mut self) -> Result<u32, XdrError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn i32(&mut self) -> Result<i32, XdrError> {
        self.u32().map(|v| v as i32)
    }

    pub fn u64(&mut self) -> Result<u64, XdrError> {
        let b = self.take(8)?;
        Ok(u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }

    pub fn i64(&mut self) -> Result<i64, XdrError> {
        self.u64().map(|v| v as i64)
    }

    pub fn bool(&mut self) -> Result<bool, XdrError> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(XdrError::InvalidValue { what: "bool", value }),
        }
    }

    /// Fixed-length opaque data of `N` bytes (plus padding).
    pub fn opaque_fixed<const N: usize>(&mut self) -> Result<[u8; N], XdrError> {
        let pad = padding(N);
        let b = self.take(N + pad)?;
        Ok(b[..N].try_into().expect("N bytes"))
    }

    /// Variable-length opaque data of at most `max` bytes, as a slice of the
    /// underlying buffer.
    pub fn opaque(&mut self, max: usize) -> Result<Bytes, XdrError> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(XdrError::TooLong { len, max });
        }
        let padded = len + padding(len);
        let remaining = self.remaining();
        if padded > remaining {
            return Err(XdrError::Truncated { needed: padded, remaining });
        }
        let out = self.buf.slice(self.pos..self.pos + len);
        self.pos += padded;
        Ok(out)
    }

    /// Skips variable-length opaque data of at most `max` bytes.
    pub fn skip_opaque(&mut self, max: usize) -> Result<(), XdrError> {
        self.opaque(max).map(drop)
    }

    /// A counted array (`T<max>`) of at most `max` elements. The count is
    /// checked against the bytes left (every XDR item takes at least four),
    /// so a lying count cannot reserve memory.
    pub fn array<T: Decode>(&mut self, max: usize) -> Result<Vec<T>, XdrError> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(XdrError::TooLong { len: n, max });
        }
        let remaining = self.remaining();
        if n.saturating_mul(4) > remaining {
            return Err(XdrError::Truncated { needed: n * 4, remaining });
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(T::decode(self)?);
        }
        Ok(out)
    }

    /// An XDR linked list (`*entry` chains ending in FALSE), at most `max`
    /// entries long.
    pub fn list<T: Decode>(&mut self, max: usize) -> Result<Vec<T>, XdrError> {
        let mut out = Vec::new();
        while self.bool()? {
            if out.len() == max {
                return Err(XdrError::TooLong { len: max + 1, max });
            }
            out.push(T::decode(self)?);
        }
        Ok(out)
    }

    /// Fails unless every byte has been consumed.
    pub fn finish(&self) -> Result<(), XdrError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(XdrError::TooLong { len: self.buf.len(), max: self.buf.len() - n }),
        }
    }
}

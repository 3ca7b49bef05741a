//! What the verbs take and give besides attributes.

use std::path::PathBuf;

use bytes::Bytes;

use crate::StoreResult;
use crate::attr::Attrs;
use crate::pipe::FilePipe;

/// An export as the store serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// Part of every handle: never reused for another tree.
    pub id: u32,
    /// The path clients mount (MOUNT matches it).
    pub path: PathBuf,
    /// The file system id in its objects' attributes.
    pub fsid: u64,
}

/// How durable a write must be before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stability {
    /// Buffered; a later COMMIT makes it durable.
    Unstable,
    /// Data and the metadata needed to read it back (fdatasync semantics).
    DataSync,
    /// Data and all metadata (fsync semantics).
    FileSync,
}

/// What SEEK looks for (lseek's SEEK_DATA and SEEK_HOLE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekWhat {
    Data,
    /// A hole; the end of the file counts as one.
    Hole,
}

/// What [`Store::fallocate`](crate::Store::fallocate) does to a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    /// Reserves blocks for the range (NFSv4.2 ALLOCATE): later writes
    /// there cannot fail for want of space; the size grows to cover it.
    Allocate,
    /// Frees the range's blocks (NFSv4.2 DEALLOCATE): it reads as zeros
    /// afterwards; the size stays.
    PunchHole,
}

/// What a READ found.
#[derive(Debug)]
pub struct ReadOut {
    pub data: ReadData,
    pub eof: bool,
    pub attrs: Attrs,
}

/// A READ's data: in memory, or in a pipe the transport sends from.
///
/// A store that wraps another and must see or change the bytes (a cache
/// tier overlaying what it holds) calls [`ReadData::into_bytes`], which
/// always works; `ReadData::from(bytes)` builds the common form.
#[derive(Debug)]
pub enum ReadData {
    /// A shared buffer that the reply splices in without a copy.
    Bytes(Bytes),
    /// File data spliced from the page cache into a pipe, which the
    /// transport splices on to the socket (TCP) or reads (UDP).
    Pipe(FilePipe),
}

impl ReadData {
    /// Bytes of data.
    pub fn len(&self) -> usize {
        match self {
            ReadData::Bytes(b) => b.len(),
            ReadData::Pipe(p) => p.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The data in memory (a pipe is read out; its bytes are not copied
    /// again after that).
    pub fn into_bytes(self) -> StoreResult<Bytes> {
        match self {
            ReadData::Bytes(b) => Ok(b),
            ReadData::Pipe(mut p) => Ok(p.read_to_bytes()?),
        }
    }
}

impl Default for ReadData {
    fn default() -> Self {
        ReadData::Bytes(Bytes::new())
    }
}

impl From<Bytes> for ReadData {
    fn from(b: Bytes) -> Self {
        ReadData::Bytes(b)
    }
}

#[derive(Debug)]
pub struct WriteOut {
    pub before: Attrs,
    pub after: Attrs,
    /// The write verifier as it was before the data went in: if a later
    /// flush fails, the verifier moves on and the client resends.
    pub verifier: crate::Verifier,
}

/// One directory entry. `cookie` resumes the listing after this entry.
#[derive(Debug, Clone, Copy)]
pub struct DirEntry<'a> {
    pub name: &'a [u8],
    pub fileid: u64,
    pub cookie: u64,
}

/// CREATE's three modes (RFC 1813 section 3.3.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// Create, or use the existing regular file.
    Unchecked,
    /// Fail if the name exists.
    Guarded,
    /// Exactly once: a retransmission with the same verifier finds its own
    /// file (which must still be empty).
    Exclusive([u8; 8]),
}

/// The kind of special file MKNOD makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Char { major: u32, minor: u32 },
    Block { major: u32, minor: u32 },
    Socket,
    Fifo,
}

/// Something that did not exist before (or, for CREATE UNCHECKED and a
/// retransmitted EXCLUSIVE, the file found), with its attributes.
#[derive(Debug)]
pub struct Created<O> {
    pub object: O,
    pub attrs: Attrs,
}

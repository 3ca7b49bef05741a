//! Convenience helpers on [`Nfs3Client`] for tests, `keel bench` and
//! `keel verify`: path lookup, create, pipelined whole-file WRITE and READ,
//! complete directory listings, recursive removal.
//!
//! Unlike the raw procedures, these turn a failed NFS status into
//! [`ClientError::Nfs`], and they are bounded: a misbehaving server can
//! make them fail with [`ClientError::Protocol`] or [`ClientError::Limit`],
//! never loop forever or grow memory without limit.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use keel_nfs3_proto::*;

use crate::RpcTransport;
use crate::error::ClientError;
use crate::nfs::{Nfs3Client, NfsResultExt};
use crate::window::Window;

/// Most READDIR/READDIRPLUS calls one listing may take.
pub const LISTING_CALLS_MAX: usize = 1 << 20;
/// Deepest directory [`Nfs3Client::remove_tree`] descends into.
pub const TREE_DEPTH_MAX: usize = 256;
/// The READDIR `count` [`Nfs3Client::remove_tree`] lists with.
const REMOVE_TREE_READDIR_COUNT: u32 = 32 << 10;

/// Sizes for the pipelined transfers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// Bytes per READ call.
    pub read_chunk: u32,
    /// Bytes per WRITE call.
    pub write_chunk: u32,
    /// Calls in flight at once per transfer.
    pub in_flight: usize,
    /// Most bytes [`Nfs3Client::read_all`] and [`Nfs3Client::read_range`]
    /// return (they hold the data in memory).
    pub read_bytes_max: u64,
}

impl Default for Transfer {
    fn default() -> Self {
        Transfer { read_chunk: 64 << 10, write_chunk: 64 << 10, in_flight: 16, read_bytes_max: 1 << 30 }
    }
}

/// Largest READ or WRITE this client issues, whatever the server offers:
/// the Linux client's limit, and well inside the default record limit
/// (NFS-Ganesha offers 8 MiB reads, whose replies a 4 MiB record limit refuses).
pub const IO_CHUNK_MAX: u32 = 1 << 20;

impl Transfer {
    /// Chunks of the server's maximum transfer sizes (`rtmax`, `wtmax`),
    /// at most [`IO_CHUNK_MAX`].
    pub fn from_fsinfo(info: &Fsinfo3ResOk) -> Self {
        let d = Transfer::default();
        let clamp = |v: u32, default: u32| if v == 0 { default } else { v.min(IO_CHUNK_MAX) };
        Transfer { read_chunk: clamp(info.rtmax, d.read_chunk), write_chunk: clamp(info.wtmax, d.write_chunk), ..d }
    }
}

/// What [`Nfs3Client::read_range`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOutcome {
    pub data: Bytes,
    /// The server said the file ends within (or at the end of) the range.
    pub eof: bool,
}

/// What [`Nfs3Client::write_all`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOutcome {
    pub written: u64,
    /// The weakest `committed` among the replies: what COMMIT still has to
    /// make durable.
    pub committed: StableHow,
    /// The write verifier of the first reply (zeros if nothing was written).
    pub verf: Writeverf3,
    /// Replies carried different verifiers: the server restarted during the
    /// transfer and unstable data may have been lost.
    pub verf_changed: bool,
}

impl<T: RpcTransport> Nfs3Client<T> {
    /// Attributes of `fh`.
    pub async fn attributes(&self, fh: &NfsFh3) -> Result<Fattr3, ClientError> {
        Ok(self.getattr(&Getattr3Args { object: fh.clone() }).await?.ok_or_status()?.obj_attributes)
    }

    /// FSINFO of the file system of `fh`, as transfer sizes.
    pub async fn transfer_sizes(&self, fh: &NfsFh3) -> Result<Transfer, ClientError> {
        let info = self.fsinfo(&Fsinfo3Args { fsroot: fh.clone() }).await?.ok_or_status()?;
        Ok(Transfer::from_fsinfo(&info))
    }

    /// Looks up `path` ("a/b/c") component by component from `root`. Empty
    /// and `.` components are skipped; `..` is sent to the server as is.
    pub async fn lookup_path(&self, root: &NfsFh3, path: &str) -> Result<NfsFh3, ClientError> {
        let mut fh = root.clone();
        for name in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
            let args = Lookup3Args { what: Diropargs3 { dir: fh, name: name.into() } };
            fh = self.lookup(&args).await?.ok_or_status()?.object;
        }
        Ok(fh)
    }

    /// Creates a regular file (UNCHECKED, like `open(O_CREAT)` without
    /// `O_EXCL`: an existing file is reused) and returns its handle.
    pub async fn create_file(
        &self,
        dir: &NfsFh3,
        name: impl Into<Filename3>,
        mode: u32,
    ) -> Result<NfsFh3, ClientError> {
        let where_ = Diropargs3 { dir: dir.clone(), name: name.into() };
        let how = Createhow3::Unchecked(Sattr3 { mode: Some(mode), ..Sattr3::default() });
        let ok = self.create(&Create3Args { where_: where_.clone(), how }).await?.ok_or_status()?;
        self.handle_or_lookup(ok.obj, where_).await
    }

    /// Creates a directory and returns its handle.
    pub async fn create_dir(&self, dir: &NfsFh3, name: impl Into<Filename3>, mode: u32) -> Result<NfsFh3, ClientError> {
        let where_ = Diropargs3 { dir: dir.clone(), name: name.into() };
        let attributes = Sattr3 { mode: Some(mode), ..Sattr3::default() };
        let ok = self.mkdir(&Mkdir3Args { where_: where_.clone(), attributes }).await?.ok_or_status()?;
        self.handle_or_lookup(ok.obj, where_).await
    }

    /// The handle a CREATE-like reply returned, or (the RFC lets a server
    /// leave it out) the one a LOOKUP finds.
    async fn handle_or_lookup(&self, obj: PostOpFh3, what: Diropargs3) -> Result<NfsFh3, ClientError> {
        match obj {
            Some(fh) => Ok(fh),
            None => Ok(self.lookup(&Lookup3Args { what }).await?.ok_or_status()?.object),
        }
    }

    /// Writes all of `data` at `offset` in WRITEs of `xfer.write_chunk`
    /// bytes, `xfer.in_flight` at a time. Each WRITE's data is a slice of
    /// `data` (no copy). A short WRITE is followed by one for the rest.
    pub async fn write_all(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
        xfer: &Transfer,
    ) -> Result<WriteOutcome, ClientError> {
        if offset.checked_add(data.len() as u64).is_none() {
            return Err(ClientError::Limit(format!("{} bytes at offset {offset} overflow", data.len())));
        }
        let chunk = xfer.write_chunk.max(1) as usize;
        let mut queue: VecDeque<(u64, Bytes)> = (0..data.len())
            .step_by(chunk)
            .map(|start| (offset + start as u64, data.slice(start..data.len().min(start + chunk))))
            .collect();
        let write_one = move |offset: u64, data: Bytes| async move {
            let args = Write3Args { file: fh.clone(), offset, count: data.len() as u32, stable, data };
            let result = self.write(&args).await;
            (offset, args.data, result)
        };
        let mut outcome =
            WriteOutcome { written: 0, committed: StableHow::FileSync, verf: [0; 8], verf_changed: false };
        let mut window = Window::new();
        loop {
            while window.len() < xfer.in_flight.max(1) {
                let Some((offset, piece)) = queue.pop_front() else { break };
                window.push(write_one(offset, piece));
            }
            let Some((offset, piece, result)) = window.next().await else { break };
            let ok = result?.ok_or_status()?;
            let done = ok.count as usize;
            if done > piece.len() || done == 0 {
                return Err(ClientError::Protocol(format!(
                    "WRITE of {} bytes at {offset} acknowledged {done}",
                    piece.len()
                )));
            }
            if outcome.written == 0 {
                outcome.verf = ok.verf;
            } else if outcome.verf != ok.verf {
                outcome.verf_changed = true;
            }
            outcome.committed = outcome.committed.min(ok.committed);
            outcome.written += done as u64;
            if done < piece.len() {
                queue.push_front((offset + done as u64, piece.slice(done..)));
            }
        }
        if outcome.written == 0 {
            outcome.committed = stable;
        }
        Ok(outcome)
    }

    /// Reads up to `len` bytes at `offset` in READs of `xfer.read_chunk`
    /// bytes, `xfer.in_flight` at a time, stopping at end of file. A short
    /// READ without eof is followed by one for the rest. When one READ
    /// covers the range, the data is a slice of its reply (no copy).
    pub async fn read_range(
        &self,
        fh: &NfsFh3,
        offset: u64,
        len: u64,
        xfer: &Transfer,
    ) -> Result<ReadOutcome, ClientError> {
        if len > xfer.read_bytes_max {
            return Err(ClientError::Limit(format!("read of {len} bytes exceeds {}", xfer.read_bytes_max)));
        }
        let chunk = u64::from(xfer.read_chunk.max(1));
        let end = offset.saturating_add(len);
        let read_one = move |offset: u64, count: u32| async move {
            (offset, count, self.read(&Read3Args { file: fh.clone(), offset, count }).await)
        };
        let mut next = offset;
        let mut eof_at: Option<u64> = None;
        let mut pieces = BTreeMap::new();
        let mut window = Window::new();
        loop {
            let stop = eof_at.map_or(end, |e| e.min(end));
            while window.len() < xfer.in_flight.max(1) && next < stop {
                let count = chunk.min(stop - next) as u32;
                window.push(read_one(next, count));
                next += u64::from(count);
            }
            let Some((offset, count, result)) = window.next().await else { break };
            let ok = result?.ok_or_status()?;
            let got = ok.data.len() as u64;
            if u64::from(ok.count) != got || got > u64::from(count) {
                return Err(ClientError::Protocol(format!(
                    "READ of {count} at {offset}: count {} with {got} bytes of data",
                    ok.count
                )));
            }
            if ok.eof {
                eof_at = Some(eof_at.map_or(offset + got, |e| e.min(offset + got)));
            } else if got == 0 {
                return Err(ClientError::Protocol(format!("READ at {offset} returned no data and no eof")));
            } else if got < u64::from(count) {
                window.push(read_one(offset + got, count - got as u32));
            }
            if got > 0 {
                pieces.insert(offset, ok.data);
            }
        }
        let stop = eof_at.map_or(end, |e| e.min(end));
        let mut parts = Vec::new();
        let mut at = offset;
        for (&piece_offset, data) in pieces.range(..stop) {
            if piece_offset != at {
                return Err(ClientError::Protocol(format!("READ replies leave a hole at {at}")));
            }
            let take = data.len().min((stop - at) as usize);
            parts.push(data.slice(..take));
            at += take as u64;
        }
        if at != stop {
            return Err(ClientError::Protocol(format!("READ replies end at {at}, before {stop}")));
        }
        let data = match parts.len() {
            0 => Bytes::new(),
            1 => parts.pop().unwrap_or_default(),
            _ => {
                let mut all = BytesMut::with_capacity((stop - offset) as usize);
                for part in parts {
                    all.extend_from_slice(&part);
                }
                all.freeze()
            }
        };
        Ok(ReadOutcome { data, eof: eof_at.is_some_and(|e| e <= end) })
    }

    /// The whole file, read as [`read_range`](Self::read_range) does; fails
    /// with [`ClientError::Limit`] past `xfer.read_bytes_max` bytes.
    pub async fn read_all(&self, fh: &NfsFh3, xfer: &Transfer) -> Result<Bytes, ClientError> {
        let out = self.read_range(fh, 0, xfer.read_bytes_max, xfer).await?;
        if !out.eof {
            return Err(ClientError::Limit(format!("file larger than {} bytes", xfer.read_bytes_max)));
        }
        Ok(out.data)
    }

    /// Every entry of `dir` (`.` and `..` included if the server lists
    /// them), following cookies and the cookie verifier with READDIRs of
    /// `count` bytes until eof.
    pub async fn readdir_all(&self, dir: &NfsFh3, count: u32) -> Result<Vec<Entry3>, ClientError> {
        let mut entries = Vec::new();
        let (mut cookie, mut cookieverf) = (0, [0; NFS3_COOKIEVERFSIZE]);
        for _ in 0..LISTING_CALLS_MAX {
            let ok =
                self.readdir(&Readdir3Args { dir: dir.clone(), cookie, cookieverf, count }).await?.ok_or_status()?;
            let eof = ok.reply.eof;
            match ok.reply.entries.last() {
                Some(last) => cookie = last.cookie,
                None if !eof => return Err(ClientError::Protocol("READDIR returned no entries before eof".into())),
                None => {}
            }
            cookieverf = ok.cookieverf;
            entries.extend(ok.reply.entries);
            if eof {
                return Ok(entries);
            }
        }
        Err(ClientError::Limit(format!("listing took more than {LISTING_CALLS_MAX} READDIR calls")))
    }

    /// Like [`readdir_all`](Self::readdir_all) with READDIRPLUS.
    pub async fn readdirplus_all(
        &self,
        dir: &NfsFh3,
        dircount: u32,
        maxcount: u32,
    ) -> Result<Vec<Entryplus3>, ClientError> {
        let mut entries = Vec::new();
        let (mut cookie, mut cookieverf) = (0, [0; NFS3_COOKIEVERFSIZE]);
        for _ in 0..LISTING_CALLS_MAX {
            let args = Readdirplus3Args { dir: dir.clone(), cookie, cookieverf, dircount, maxcount };
            let ok = self.readdirplus(&args).await?.ok_or_status()?;
            let eof = ok.reply.eof;
            match ok.reply.entries.last() {
                Some(last) => cookie = last.cookie,
                None if !eof => return Err(ClientError::Protocol("READDIRPLUS returned no entries before eof".into())),
                None => {}
            }
            cookieverf = ok.cookieverf;
            entries.extend(ok.reply.entries);
            if eof {
                return Ok(entries);
            }
        }
        Err(ClientError::Limit(format!("listing took more than {LISTING_CALLS_MAX} READDIRPLUS calls")))
    }

    /// Removes `name` in `dir` and, if it is a directory, everything below
    /// it (depth-first, at most [`TREE_DEPTH_MAX`] levels).
    pub async fn remove_tree(&self, dir: &NfsFh3, name: impl Into<Filename3>) -> Result<(), ClientError> {
        self.remove_tree_at(dir, name.into(), 0).await
    }

    fn remove_tree_at<'a>(
        &'a self,
        dir: &'a NfsFh3,
        name: Filename3,
        depth: usize,
    ) -> Pin<Box<dyn Future<Output = Result<(), ClientError>> + Send + 'a>> {
        Box::pin(async move {
            if depth >= TREE_DEPTH_MAX {
                return Err(ClientError::Limit(format!("directory tree deeper than {TREE_DEPTH_MAX}")));
            }
            let what = Diropargs3 { dir: dir.clone(), name };
            let found = self.lookup(&Lookup3Args { what: what.clone() }).await?.ok_or_status()?;
            let ftype = match found.obj_attributes {
                Some(attrs) => attrs.ftype,
                None => self.attributes(&found.object).await?.ftype,
            };
            if ftype == Ftype3::Dir {
                for entry in self.readdir_all(&found.object, REMOVE_TREE_READDIR_COUNT).await? {
                    if entry.name.as_bytes() != b"." && entry.name.as_bytes() != b".." {
                        self.remove_tree_at(&found.object, entry.name, depth + 1).await?;
                    }
                }
                self.rmdir(&Rmdir3Args { object: what }).await?.ok_or_status()?;
            } else {
                self.remove(&Remove3Args { object: what }).await?.ok_or_status()?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_are_at_most_one_mebibyte_whatever_the_server_offers() {
        let offer = |rtmax, wtmax| Fsinfo3ResOk { rtmax, wtmax, ..Default::default() };
        let t = Transfer::from_fsinfo(&offer(8 << 20, 64 << 20));
        assert_eq!((t.read_chunk, t.write_chunk), (IO_CHUNK_MAX, IO_CHUNK_MAX));
        let t = Transfer::from_fsinfo(&offer(32 << 10, 0));
        assert_eq!((t.read_chunk, t.write_chunk), (32 << 10, Transfer::default().write_chunk));
    }
}

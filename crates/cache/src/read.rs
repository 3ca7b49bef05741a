//! The read path: READ takes clean data from the read cache when it holds
//! every block, else from the back end (admitting blocks as it goes), then
//! lays the log's dirty extents over it; and the invalidations that keep
//! the read cache's blocks what the back end holds.

use bytes::{Bytes, BytesMut};
use keel_store::{Attrs, Object, ReadOut, Store, StoreResult};

use crate::readcache::ReadCache;
use crate::{CacheMode, Shared, errno};

impl<S: Store> Shared<S> {
    pub(crate) fn read(&self, who: &S::Caller, obj: &S::Object, offset: u64, count: usize) -> StoreResult<ReadOut> {
        let sh = self;
        let Some(slot) = sh.index.get(obj.handle()) else {
            let (out, cached) = sh.read_clean(who, obj, offset, count)?;
            if !cached {
                sh.stats.read_from_disk(obj.export_id(), out.data.len() as u64);
            }
            return Ok(out);
        };
        // Hold off ring reuse while the log positions taken here are read.
        let _ring = sh.ring_guard.read().unwrap_or_else(|p| p.into_inner());
        let (size, pieces) = {
            let st = slot.lock();
            (st.size, st.overlapping(offset, count as u64))
        };
        let (mut out, cached) = sh.read_clean(who, obj, offset, count)?;
        // Writes that bypassed the log may have made the back end longer.
        let size = size.max(out.attrs.size);
        let len = (count as u64).min(size.saturating_sub(offset)) as usize;
        // The back end never holds more than `len` here: `size` covers it.
        let disk = out.data.len().min(len);
        if !(pieces.is_empty() && disk == len) {
            let mut buf = BytesMut::zeroed(len);
            let on_disk = std::mem::take(&mut out.data).into_bytes()?;
            buf[..disk].copy_from_slice(&on_disk[..disk]);
            let log = sh.log().ok_or_else(|| errno(libc::EIO))?;
            let mut from_log = 0;
            for (at, e) in &pieces {
                let from = (*at - offset) as usize;
                log.read_data(&mut buf[from..from + e.len as usize], e.pos)?;
                from_log += e.len;
            }
            sh.stats.read_from_log(obj.export_id(), from_log);
            out.data = buf.freeze().into();
        }
        if !cached {
            sh.stats.read_from_disk(obj.export_id(), disk as u64);
        }
        out.eof = offset + len as u64 >= size;
        slot.lock().overlay(&mut out.attrs);
        Ok(out)
    }

    /// What the back end holds at `[offset, offset + count)`, from the
    /// read cache when it has every block of it (true), else from the back
    /// end, copying in the blocks the read cache admits.
    pub(crate) fn read_clean(
        &self,
        who: &S::Caller,
        obj: &S::Object,
        offset: u64,
        count: usize,
    ) -> StoreResult<(ReadOut, bool)> {
        let export = obj.export_id();
        let rc = match self.read_cache() {
            Some(rc) if count > 0 && self.mode(export) != CacheMode::Off && rc.usable() => rc,
            _ => return Ok((self.inner.read(who, obj, offset, count)?, false)),
        };
        let handle = obj.handle();
        if self.sequential_read(handle, offset, count as u64) {
            // Neither served nor admitted: sequential bandwidth is the
            // back end's, and a stream would push the working set out.
            self.stats.read_sequential(export);
            return Ok((self.inner.read(who, obj, offset, count)?, false));
        }
        let b = rc.slot_bytes();
        let first = offset / b;
        let hits = rc.lookup(handle, first, offset.saturating_add(count as u64 - 1) / b);
        if !hits.is_empty() {
            // The caller's permission and the size, as the back end's READ
            // would give them.
            let attrs = self.inner.check_io(who, obj, false)?;
            let len = (count as u64).min(attrs.size.saturating_sub(offset));
            let need = if len == 0 { usize::MAX } else { ((offset + len - 1) / b - first + 1) as usize };
            if need <= hits.len() {
                let mut buf = BytesMut::zeroed(need * b as usize);
                if rc.read_hits(&hits[..need], &mut buf).is_ok() {
                    let start = (offset - first * b) as usize;
                    let data = buf.freeze().slice(start..start + len as usize);
                    self.stats.read_cache_hit(export, len);
                    let eof = offset + len >= attrs.size;
                    return Ok((ReadOut { data: data.into(), eof, attrs }, true));
                }
            }
        }
        self.stats.read_cache_miss(export);
        // Sampled before the back end is read: a change after this makes
        // the copy unpublishable.
        let gen0 = rc.generation(handle);
        let fill = self.read_fill_bytes;
        if fill > b && rc.has_free_slots() {
            // The aligned window around the read, in one back-end read
            // (one disk I/O, as the read alone would cost), all admitted.
            let from = offset / fill * fill;
            let to = offset.saturating_add(count as u64).div_ceil(fill).saturating_mul(fill);
            // A neighbour the disk cannot read must not fail the client's
            // read: then the read alone is tried, as without the window.
            if let Ok(mut window) = self.inner.read(who, obj, from, (to - from) as usize) {
                self.admit(&rc, who, obj, from, gen0, &mut window)?;
                let data = window.data.into_bytes()?;
                let start = ((offset - from) as usize).min(data.len());
                let len = count.min(data.len() - start);
                let eof = offset + len as u64 >= window.attrs.size;
                return Ok((ReadOut { data: data.slice(start..start + len).into(), eof, attrs: window.attrs }, false));
            }
        }
        let mut out = self.inner.read(who, obj, offset, count)?;
        self.admit(&rc, who, obj, offset, gen0, &mut out)?;
        Ok((out, false))
    }

    /// Copies the blocks of a back-end read that the read cache admits
    /// ([`ReadCache::admits`]) into it: blocks the read covers whole (or to the end of
    /// file) from its data, others read whole from the back end.
    pub(crate) fn admit(
        &self,
        rc: &ReadCache,
        who: &S::Caller,
        obj: &S::Object,
        offset: u64,
        gen0: u64,
        out: &mut ReadOut,
    ) -> StoreResult<()> {
        let n = out.data.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let (b, end, handle) = (rc.slot_bytes(), offset + n, obj.handle());
        let want: Vec<u64> = (offset / b..=(end - 1) / b).filter(|&blk| rc.admits(handle, blk)).collect();
        if want.is_empty() {
            return Ok(());
        }
        let data = std::mem::take(&mut out.data).into_bytes()?;
        out.data = data.clone().into();
        let mut block = vec![0u8; b as usize];
        for blk in want {
            let (bs, be) = (blk * b, blk * b + b);
            block.fill(0);
            if bs >= offset && (be <= end || out.eof) {
                let piece = &data[(bs - offset) as usize..(be.min(end) - offset) as usize];
                block[..piece.len()].copy_from_slice(piece);
            } else {
                match self.inner.read(who, obj, bs, b as usize) {
                    Ok(r) if r.data.len() as u64 == b || r.eof => {
                        let Ok(d) = r.data.into_bytes() else { continue };
                        block[..d.len()].copy_from_slice(&d);
                    }
                    _ => continue,
                }
            }
            if rc.insert(handle, blk, &block, gen0) {
                self.stats.read_cache_admitted(obj.export_id());
            }
        }
        Ok(())
    }

    /// The same for each file's read stream.
    pub(crate) fn sequential_read(&self, handle: &Bytes, offset: u64, len: u64) -> bool {
        self.stream(&self.read_streams, handle, offset, len)
    }

    /// The file's data in `[from, to)` changed on the back end (or may
    /// have): the read cache's blocks there go. Called after the change.
    pub(crate) fn invalidate(&self, handle: &Bytes, from: u64, to: u64) {
        if let Some(rc) = self.read_cache() {
            rc.invalidate(handle, from, to);
        }
    }

    /// A WRITE of `data` at `offset` reached the back end (`ok`) or may
    /// have: the blocks it touched go; in write-through, the blocks the
    /// cache held that it covers whole take the new data, if no other
    /// change of the file came in between (`gen_before`: the file's
    /// generation sampled before the back-end write).
    pub(crate) fn wrote(&self, obj: &S::Object, offset: u64, data: &[u8], ok: bool, gen_before: Option<u64>) {
        let Some(rc) = self.read_cache() else { return };
        let handle = obj.handle();
        let end = offset.saturating_add(data.len() as u64);
        let (generation, dropped) = rc.invalidate_blocks(handle, offset, end);
        let Some(before) = gen_before else { return };
        if !ok || generation != before + 1 || self.serving(obj.export_id()) != CacheMode::WriteThrough {
            return;
        }
        let b = rc.slot_bytes();
        for blk in dropped {
            let (bs, be) = (blk * b, blk * b + b);
            if bs >= offset && be <= end {
                let from = (bs - offset) as usize;
                rc.insert(handle, blk, &data[from..from + b as usize], generation);
            }
        }
    }

    pub(crate) fn overlay(&self, handle: &Bytes, attrs: &mut Attrs) {
        if let Some(slot) = self.index.get(handle) {
            slot.lock().overlay(attrs);
        }
    }
}

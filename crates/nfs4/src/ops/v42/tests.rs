//! SEEK, ALLOCATE, DEALLOCATE and COPY against the simulated store (whose
//! files hold no holes), and the 4.2 operations refused under minor
//! version 1.

use std::time::Instant;

use bytes::Bytes;
use keel_nfs4_proto::{
    Allocate4Args, Compound4Args, Compound4Res, Copy4Args, Copy4Res, DataContent4, Deallocate4Args, NfsArgop4,
    Nfsstat4, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OpResult, ReadPlus4Args, ReadPlusContent, ReadPlusRes4,
    Seek4Args, SeekRes4, StableHow4, Stateid4,
};
use keel_rpc::{CallContext, Credential, TabledProgram};
use keel_store::{SeekWhat, Store};
use keel_xdr::{Decode, Decoder, Encode, Encoder};

use super::super::lock::harness::{Client, Rig};
use super::{
    COPY_BYTES_MAX, OpOutcome, READ_PLUS_HOLE_MIN, READ_PLUS_SEGMENTS_MAX, Segment, allocate, copy, deallocate,
    plan_segments, read_plus, seek,
};
use crate::compound::Filehandle;

fn do_seek(
    rig: &Rig,
    cl: &mut Client,
    f: &Bytes,
    s: Stateid4,
    offset: u64,
    what: DataContent4,
) -> Result<SeekRes4, Nfsstat4> {
    rig.call(cl, 2, Instant::now(), Some(f), |c| seek(c, Seek4Args { sa_stateid: s, sa_offset: offset, sa_what: what }))
}

fn do_allocate(rig: &Rig, cl: &mut Client, f: &Bytes, s: Stateid4, offset: u64, len: u64) -> Result<(), Nfsstat4> {
    let args = Allocate4Args { aa_stateid: s, aa_offset: offset, aa_length: len };
    rig.call(cl, 2, Instant::now(), Some(f), |c| allocate(c, args))
}

fn do_deallocate(rig: &Rig, cl: &mut Client, f: &Bytes, s: Stateid4, offset: u64, len: u64) -> Result<(), Nfsstat4> {
    let args = Deallocate4Args { da_stateid: s, da_offset: offset, da_length: len };
    rig.call(cl, 2, Instant::now(), Some(f), |c| deallocate(c, args))
}

/// COPY from `src` (the saved filehandle) to `dst` (the current one).
fn do_copy(
    rig: &Rig,
    cl: &mut Client,
    (src, ss): (&Bytes, Stateid4),
    (dst, ds): (&Bytes, Stateid4),
    at: (u64, u64, u64),
) -> Copy4Res {
    let args = Copy4Args {
        ca_src_stateid: ss,
        ca_dst_stateid: ds,
        ca_src_offset: at.0,
        ca_dst_offset: at.1,
        ca_count: at.2,
        ca_consecutive: true,
        ca_synchronous: false,
        ca_source_server: Default::default(),
    };
    rig.call(cl, 2, Instant::now(), Some(dst), |c| {
        c.saved = Some(Filehandle::Export(c.admit(src).unwrap()));
        copy(c, args).into_res()
    })
}

/// RFC 7862 section 15.11: data where asked (the simulator has no
/// holes), the hole at the end with `sr_eof`, NFS4ERR_NXIO past the end;
/// the stateid is checked as READ's.
#[test]
fn seek_finds_data_and_the_hole_at_the_end() {
    let rig = Rig::new(false);
    let f = rig.file("f", &[7; 1000]);
    let mut a = rig.client("a");
    let o = rig.open(&a, "o", &f, OPEN4_SHARE_ACCESS_READ);
    let data = do_seek(&rig, &mut a, &f, o, 10, DataContent4::Nfs4ContentData).unwrap();
    assert_eq!((data.sr_offset, data.sr_eof), (10, false));
    let hole = do_seek(&rig, &mut a, &f, o, 10, DataContent4::Nfs4ContentHole).unwrap();
    assert_eq!((hole.sr_offset, hole.sr_eof), (1000, true));
    assert_eq!(do_seek(&rig, &mut a, &f, o, 1000, DataContent4::Nfs4ContentData), Err(Nfsstat4::Nxio));
    assert_eq!(
        do_seek(&rig, &mut a, &f, Stateid4::ANONYMOUS, 0, DataContent4::Nfs4ContentData).map(|r| r.sr_offset),
        Ok(0)
    );
    let forged = Stateid4 { seqid: 1, other: [3; 12] };
    assert_eq!(do_seek(&rig, &mut a, &f, forged, 0, DataContent4::Nfs4ContentData), Err(Nfsstat4::BadStateid));
}

/// RFC 7862 sections 15.1 and 15.4: ALLOCATE grows the file to cover the
/// range, DEALLOCATE zeroes a range and keeps the size; a read-only open's
/// stateid is NFS4ERR_OPENMODE, an empty range NFS4ERR_INVAL.
#[test]
fn allocate_grows_and_deallocate_zeroes() {
    let rig = Rig::new(false);
    let f = rig.file("f", &[7; 100]);
    let mut a = rig.client("a");
    let rw = rig.open(&a, "rw", &f, OPEN4_SHARE_ACCESS_BOTH);
    let ro = rig.open(&a, "ro", &f, OPEN4_SHARE_ACCESS_READ);
    do_allocate(&rig, &mut a, &f, rw, 50, 150).unwrap();
    let mut want = vec![7u8; 100];
    want.resize(200, 0);
    assert_eq!(rig.data(&f), want);
    do_deallocate(&rig, &mut a, &f, rw, 10, 20).unwrap();
    want[10..30].fill(0);
    assert_eq!(rig.data(&f), want);
    do_deallocate(&rig, &mut a, &f, rw, 190, 1000).unwrap();
    want[190..].fill(0);
    assert_eq!(rig.data(&f), want, "past the end: the size stays");
    assert_eq!(do_allocate(&rig, &mut a, &f, ro, 0, 1), Err(Nfsstat4::Openmode));
    assert_eq!(do_deallocate(&rig, &mut a, &f, ro, 0, 1), Err(Nfsstat4::Openmode));
    assert_eq!(do_allocate(&rig, &mut a, &f, rw, 0, 0), Err(Nfsstat4::Inval));
    assert_eq!(do_allocate(&rig, &mut a, &f, rw, u64::MAX - 1, 5), Err(Nfsstat4::Fbig));
}

/// On a `sync` export ALLOCATE and DEALLOCATE are durable before the
/// reply: a crash right after keeps them.
#[test]
fn on_a_sync_export_space_changes_survive_a_crash() {
    let rig = Rig::new(true);
    let f = rig.file("f", &[7; 100]);
    rig.store.sync_all().unwrap();
    let mut a = rig.client("a");
    let rw = rig.open(&a, "rw", &f, OPEN4_SHARE_ACCESS_BOTH);
    do_deallocate(&rig, &mut a, &f, rw, 0, 50).unwrap();
    do_allocate(&rig, &mut a, &f, rw, 0, 300).unwrap();
    rig.store.crash(keel_store::sim::CrashMode::DurableOnly);
    let mut want = vec![0u8; 300];
    want[50..100].fill(7);
    assert_eq!(rig.data(&f), want);
}

fn copied(res: Copy4Res) -> keel_nfs4_proto::Copy4ResOk {
    match res {
        Copy4Res::Ok(ok) => ok,
        other => panic!("COPY failed: {other:?}"),
    }
}

/// RFC 7862 section 15.2: a synchronous copy of the saved file's range
/// into the current one's, reported as done synchronously, unstable on an
/// async export with the write verifier; count 0 runs to the source's
/// end; a range past the source's end and overlapping ranges of one file
/// are NFS4ERR_INVAL; stateids are checked (source READ, destination
/// WRITE).
#[test]
fn copy_within_the_server() {
    let rig = Rig::new(false);
    let src = rig.file("src", b"0123456789");
    let dst = rig.file("dst", b"abcdefghij");
    let mut a = rig.client("a");
    let so = rig.open(&a, "o", &src, OPEN4_SHARE_ACCESS_READ);
    let dw = rig.open(&a, "o", &dst, OPEN4_SHARE_ACCESS_BOTH);
    let ok = copied(do_copy(&rig, &mut a, (&src, so), (&dst, dw), (2, 5, 4)));
    assert_eq!(ok.cr_response.wr_count, 4);
    assert_eq!(ok.cr_response.wr_committed, StableHow4::Unstable4);
    assert_eq!(ok.cr_response.wr_writeverf, rig.store.write_verifier());
    assert!(ok.cr_response.wr_callback_id.is_none());
    assert!(ok.cr_requirements.cr_synchronous && ok.cr_requirements.cr_consecutive);
    assert_eq!(rig.data(&dst), b"abcde2345j");
    let ok = copied(do_copy(&rig, &mut a, (&src, so), (&dst, dw), (7, 12, 0)));
    assert_eq!(ok.cr_response.wr_count, 3, "count 0: to the source's end");
    assert_eq!(rig.data(&dst), b"abcde2345j\x00\x00789");
    let fail = |r: Copy4Res| r.status();
    assert_eq!(fail(do_copy(&rig, &mut a, (&src, so), (&dst, dw), (8, 0, 3))), Nfsstat4::Inval, "past the end");
    assert_eq!(fail(do_copy(&rig, &mut a, (&src, so), (&dst, dw), (11, 0, 0))), Nfsstat4::Inval);
    assert_eq!(fail(do_copy(&rig, &mut a, (&dst, dw), (&dst, dw), (0, 2, 4))), Nfsstat4::Inval, "overlap");
    assert!(do_copy(&rig, &mut a, (&dst, dw), (&dst, dw), (0, 4, 4)).status() == Nfsstat4::Ok, "one file, apart");
    assert_eq!(fail(do_copy(&rig, &mut a, (&src, so), (&src, so), (0, 20, 1))), Nfsstat4::Openmode, "read-only");
    let forged = Stateid4 { seqid: 1, other: [3; 12] };
    assert_eq!(fail(do_copy(&rig, &mut a, (&src, forged), (&dst, dw), (0, 0, 1))), Nfsstat4::BadStateid);
    let no_saved = rig.call(&mut a, 2, Instant::now(), Some(&dst), |c| {
        let args = Copy4Args { ca_src_stateid: so, ca_dst_stateid: dw, ca_count: 1, ..Copy4Args::default() };
        OpOutcome::<Copy4Res>::into_res(copy(c, args)).status()
    });
    assert_eq!(no_saved, Nfsstat4::Nofilehandle);
}

/// A large COPY is cut at COPY_BYTES_MAX and says so; on a `sync` export
/// the copy is FILE_SYNC and survives a crash.
#[test]
fn a_long_copy_is_reported_short_and_a_sync_copy_is_durable() {
    let rig = Rig::new(true);
    let big = vec![5u8; COPY_BYTES_MAX as usize + 4096];
    let src = rig.file("src", &big);
    let dst = rig.file("dst", b"");
    rig.store.sync_all().unwrap();
    let mut a = rig.client("a");
    let so = rig.open(&a, "o", &src, OPEN4_SHARE_ACCESS_READ);
    let dw = rig.open(&a, "o", &dst, OPEN4_SHARE_ACCESS_BOTH);
    let ok = copied(do_copy(&rig, &mut a, (&src, so), (&dst, dw), (0, 0, 0)));
    assert_eq!(ok.cr_response.wr_count, COPY_BYTES_MAX, "a short copy, reported as it is");
    assert_eq!(ok.cr_response.wr_committed, StableHow4::FileSync4);
    rig.store.crash(keel_store::sim::CrashMode::DurableOnly);
    assert_eq!(rig.data(&dst).len() as u64, COPY_BYTES_MAX);
}

/// The 4.2 operations do not exist under minor version 1: the decoder
/// makes them ILLEGAL (as knfsd), whatever the table holds.
#[test]
fn v42_operations_are_illegal_under_minor_version_1() {
    let rig = Rig::new(false);
    for minor in [1, 2] {
        let args = Compound4Args {
            tag: Default::default(),
            minorversion: minor,
            argarray: vec![NfsArgop4::Seek(Seek4Args::default())],
        };
        let mut enc = Encoder::new();
        args.encode(&mut enc);
        let cred = Credential::anonymous();
        let local = "127.0.0.1:2049".parse().unwrap();
        let ctx = CallContext {
            xid: 1,
            vers: 4,
            proc_: 1,
            cred: &cred,
            peer: local,
            local,
            connection: None,
            report: Default::default(),
        };
        let mut reply = Encoder::new();
        rig.program.run(&ctx, &mut Decoder::new(enc.into_bytes()), &mut reply).unwrap();
        let res = Compound4Res::decode(&mut Decoder::new(reply.into_bytes())).unwrap();
        let want = if minor == 1 { Nfsstat4::OpIllegal } else { Nfsstat4::OpNotInSession };
        assert_eq!(res.status, want, "minor version {minor}");
    }
}

/// A file of `size` bytes whose data is `extents` (sorted, apart), seen as
/// Linux's SEEK_DATA and SEEK_HOLE see it (`None` for ENXIO), and the
/// number of times its size was asked.
struct Layout {
    size: u64,
    extents: Vec<(u64, u64)>,
    size_asked: u32,
}

impl Layout {
    fn new(size: u64, extents: &[(u64, u64)]) -> Layout {
        Layout { size, extents: extents.to_vec(), size_asked: 0 }
    }

    fn seek(&self, at: u64, what: SeekWhat) -> Option<u64> {
        if at >= self.size {
            return None;
        }
        let inside = self.extents.iter().find(|&&(start, len)| start <= at && at < start + len);
        match what {
            SeekWhat::Data => inside.map(|_| at).or_else(|| self.extents.iter().find(|e| e.0 > at).map(|e| e.0)),
            SeekWhat::Hole => Some(inside.map_or(at, |&(start, len)| (start + len).min(self.size))),
        }
    }

    fn plan(&mut self, offset: u64, count: u64) -> (Vec<Segment>, bool) {
        let mut asked = 0;
        let this = &*self;
        let out = plan_segments(offset, offset + count, &mut |at, what| Ok(this.seek(at, what)), &mut || {
            asked += 1;
            Ok(this.size)
        })
        .unwrap();
        self.size_asked += asked;
        out
    }
}

fn data(offset: u64, len: u64) -> Segment {
    Segment::Data { offset, len }
}

fn hole(offset: u64, len: u64) -> Segment {
    Segment::Hole { offset, len }
}

/// READ_PLUS's segments: a file without holes is one data segment, read
/// mid-file with one seek and no size asked; holes of at least
/// READ_PLUS_HOLE_MIN are named, shorter ones with data after them sent
/// as data; a hole to the end of the file ends the reply with eof, one cut
/// by the count does not; past the end there is nothing, with eof; a
/// reply stops at READ_PLUS_SEGMENTS_MAX segments.
#[test]
fn read_plus_names_the_holes_worth_naming() {
    const K: u64 = 1024;
    let mut dense = Layout::new(1000 * K, &[(0, 1000 * K)]);
    assert_eq!(dense.plan(100, 64 * K), (vec![data(100, 64 * K)], false));
    assert_eq!(dense.size_asked, 0, "a dense read asks no size");
    assert_eq!(dense.plan(990 * K, 64 * K), (vec![data(990 * K, 10 * K)], true));
    assert_eq!(dense.plan(1000 * K, 10), (vec![], true), "at the end");
    assert_eq!(dense.plan(5000 * K, 10), (vec![], true), "past the end");
    assert_eq!(dense.plan(10, 0), (vec![], false), "nothing asked, not at the end");

    // Data, a 300 KiB hole, data, a 4 KiB hole, data, a hole to the end.
    let mut sparse = Layout::new(1024 * K, &[(0, 100 * K), (400 * K, 100 * K), (504 * K, 96 * K)]);
    let (segments, eof) = sparse.plan(0, 1024 * K);
    assert_eq!(
        segments,
        vec![data(0, 100 * K), hole(100 * K, 300 * K), data(400 * K, 200 * K), hole(600 * K, 424 * K)]
    );
    assert!(eof, "the last hole runs to the end of the file");
    let (segments, eof) = sparse.plan(50 * K, 500 * K);
    assert_eq!(segments, vec![data(50 * K, 50 * K), hole(100 * K, 300 * K), data(400 * K, 150 * K)]);
    assert!(!eof);
    assert_eq!(sparse.plan(700 * K, 100 * K), (vec![hole(700 * K, 100 * K)], false), "a hole cut by the count");
    assert_eq!(sparse.plan(502 * K, 4 * K), (vec![data(502 * K, 4 * K)], false), "a short hole is data");
    // A short hole that runs to the end is still a hole: nothing follows.
    let mut tail = Layout::new(100 * K, &[(0, 98 * K)]);
    assert_eq!(tail.plan(0, 1024 * K), (vec![data(0, 98 * K), hole(98 * K, 2 * K)], true));

    // Holes of READ_PLUS_HOLE_MIN between as much data, more than a reply
    // takes.
    let step = 2 * READ_PLUS_HOLE_MIN;
    let extents: Vec<_> = (0..40).map(|i| (i * step, READ_PLUS_HOLE_MIN)).collect();
    let mut striped = Layout::new(40 * step, &extents);
    let (segments, eof) = striped.plan(0, 40 * step);
    assert_eq!(segments.len(), READ_PLUS_SEGMENTS_MAX);
    assert_eq!(segments[1], hole(READ_PLUS_HOLE_MIN, READ_PLUS_HOLE_MIN));
    assert!(!eof);
}

fn do_read_plus(
    rig: &Rig,
    cl: &mut Client,
    f: &Bytes,
    s: Stateid4,
    offset: u64,
    count: u32,
) -> Result<ReadPlusRes4, Nfsstat4> {
    let args = ReadPlus4Args { rpa_stateid: s, rpa_offset: offset, rpa_count: count };
    rig.call(cl, 2, Instant::now(), Some(f), |c| read_plus(c, args))
}

/// READ_PLUS reads as READ does (the simulator's files have no holes):
/// one data segment with the bytes and eof, nothing past the end; the
/// stateid is checked as READ's, a directory is NFS4ERR_ISDIR.
#[test]
fn read_plus_reads_what_read_reads() {
    let rig = Rig::new(false);
    let bytes: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let f = rig.file("f", &bytes);
    let mut a = rig.client("a");
    let o = rig.open(&a, "o", &f, OPEN4_SHARE_ACCESS_READ);
    let segments = |r: ReadPlusRes4| -> (bool, Vec<(u64, Vec<u8>)>) {
        let contents = r.rpr_contents.0.into_iter().map(|c| match c {
            ReadPlusContent::Nfs4ContentData(d) => (d.d_offset, d.d_data.to_vec()),
            ReadPlusContent::Nfs4ContentHole(h) => panic!("a hole in a file without holes: {h:?}"),
        });
        (r.rpr_eof, contents.collect())
    };
    let r = do_read_plus(&rig, &mut a, &f, o, 100, 1000).unwrap();
    assert_eq!(segments(r), (false, vec![(100, bytes[100..1100].to_vec())]));
    let r = do_read_plus(&rig, &mut a, &f, o, 4000, 4096).unwrap();
    assert_eq!(segments(r), (true, vec![(4000, bytes[4000..].to_vec())]));
    let r = do_read_plus(&rig, &mut a, &f, o, 9000, 10).unwrap();
    assert_eq!(segments(r), (true, vec![]));
    let forged = Stateid4 { seqid: 1, other: [3; 12] };
    assert_eq!(do_read_plus(&rig, &mut a, &f, forged, 0, 10), Err(Nfsstat4::BadStateid));
    let root = keel_store::Object::handle(&rig.store.lookup_path(1, b"").unwrap()).clone();
    assert_eq!(do_read_plus(&rig, &mut a, &root, Stateid4::ANONYMOUS, 0, 10), Err(Nfsstat4::Isdir));
}

//! The `rpc_call` fuzz target's checks, run on stable without cargo-fuzz:
//! over every file of the committed corpus (fuzz/corpus/rpc_call), and
//! over hand-made seeds -- a well-formed call for every NFSv3, MOUNT and
//! portmap procedure, plus framing and header variants -- which must
//! decode all the way to their arguments.
//!
//! The checks are in fuzz/rpc_call_check.rs, one copy shared with the fuzz
//! target. To (re)write the seeds into a directory (see fuzz/README.md):
//!
//! ```text
//! KEEL_SEED_DIR=/tmp/seeds cargo test -p keel --test fuzz_corpus -- --ignored write_seeds
//! ```

#[path = "../../../fuzz/rpc_call_check.rs"]
mod rpc_call_check;

use std::path::{Path, PathBuf};

use bytes::Bytes;
use keel_nfs3_proto::mount::Dirpath;
use keel_nfs3_proto::nfs3::*;
use keel_nfs3_proto::portmap::{CallArgs, Mapping};
use keel_nfs3_proto::{IPPROTO_TCP, MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3, PMAP_PROGRAM, PMAP_V2};
use keel_rpc::msg::{
    AcceptStat, AuthStat, AuthSys, CallHeader, OpaqueAuth, RejectStat, ReplyStat, encode_reply_header,
};
use keel_rpc::record::{LAST_FRAGMENT, record_mark};
use keel_xdr::{Encode, Encoder};
use rpc_call_check::{Outcome, check_stream, control_byte};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/rpc_call")
}

/// One seed: a name, the stream, and how many calls with arguments it
/// holds (all of which must decode).
struct Seed {
    name: String,
    stream: Vec<u8>,
    calls: usize,
    args: usize,
}

fn fh(tag: u8) -> NfsFh3 {
    NfsFh3::new((0..32).map(|i| tag.wrapping_add(i)).collect::<Vec<u8>>())
}

fn dirop(name: &str) -> Diropargs3 {
    Diropargs3 { dir: fh(1), name: Filename3::from(name) }
}

fn sattr_all() -> Sattr3 {
    Sattr3 {
        mode: Some(0o4755),
        uid: Some(1000),
        gid: Some(100),
        size: Some(1 << 33),
        atime: SetTime::ServerTime,
        mtime: SetTime::ClientTime(Nfstime3 { seconds: 1_700_000_000, nseconds: 999_999_999 }),
    }
}

fn auth_sys() -> OpaqueAuth {
    AuthSys { stamp: 42, machine_name: Bytes::from_static(b"node017"), uid: 1000, gid: 100, gids: vec![100, 10, 4] }
        .to_opaque()
}

/// A call message (no record mark): header with AUTH_SYS, then `args`.
fn call(xid: u32, prog: u32, vers: u32, proc_: u32, args: &dyn Encode) -> Vec<u8> {
    let header = CallHeader { xid, rpc_version: 2, prog, vers, proc_, cred: auth_sys(), verf: OpaqueAuth::default() };
    let mut enc = Encoder::new();
    header.encode(&mut enc);
    args.encode(&mut enc);
    enc.into_bytes().to_vec()
}

fn record(message: &[u8]) -> Vec<u8> {
    [&record_mark(message.len())[..], message].concat()
}

/// The arguments of every NFSv3 procedure, with values that use every arm
/// of the unions involved somewhere.
fn nfs_calls() -> Vec<(Nfs3Proc, Box<dyn Encode>)> {
    use Nfs3Proc::*;
    vec![
        (Null, Box::new(())),
        (Getattr, Box::new(Getattr3Args { object: fh(1) })),
        (
            Setattr,
            Box::new(Setattr3Args {
                object: fh(2),
                new_attributes: sattr_all(),
                guard: Some(Nfstime3 { seconds: 5, nseconds: 6 }),
            }),
        ),
        (Lookup, Box::new(Lookup3Args { what: dirop("a-file-name.txt") })),
        (Access, Box::new(Access3Args { object: fh(3), access: ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY })),
        (Readlink, Box::new(Readlink3Args { symlink: fh(4) })),
        (Read, Box::new(Read3Args { file: fh(5), offset: 1 << 40, count: 1 << 20 })),
        (
            Write,
            Box::new(Write3Args {
                file: fh(6),
                offset: 4096,
                count: 13,
                stable: StableHow::FileSync,
                data: Bytes::from_static(b"hello, world!"),
            }),
        ),
        (Create, Box::new(Create3Args { where_: dirop("new"), how: Createhow3::Guarded(sattr_all()) })),
        (Mkdir, Box::new(Mkdir3Args { where_: dirop("dir"), attributes: Sattr3::default() })),
        (
            Symlink,
            Box::new(Symlink3Args {
                where_: dirop("link"),
                symlink: Symlinkdata3 { symlink_attributes: Sattr3::default(), symlink_data: Nfspath3::from("../t") },
            }),
        ),
        (
            Mknod,
            Box::new(Mknod3Args {
                where_: dirop("dev"),
                what: Mknoddata3::Chr(Devicedata3 {
                    dev_attributes: sattr_all(),
                    spec: Specdata3 { specdata1: 1, specdata2: 3 },
                }),
            }),
        ),
        (Remove, Box::new(Remove3Args { object: dirop("old") })),
        (Rmdir, Box::new(Rmdir3Args { object: dirop("olddir") })),
        (Rename, Box::new(Rename3Args { from: dirop("from"), to: dirop("to") })),
        (Link, Box::new(Link3Args { file: fh(7), link: dirop("hard") })),
        (Readdir, Box::new(Readdir3Args { dir: fh(8), cookie: 0, cookieverf: [0; 8], count: 4096 })),
        (
            Readdirplus,
            Box::new(Readdirplus3Args { dir: fh(9), cookie: 77, cookieverf: [1; 8], dircount: 1024, maxcount: 8192 }),
        ),
        (Fsstat, Box::new(Fsstat3Args { fsroot: fh(10) })),
        (Fsinfo, Box::new(Fsinfo3Args { fsroot: fh(11) })),
        (Pathconf, Box::new(Pathconf3Args { object: fh(12) })),
        (Commit, Box::new(Commit3Args { file: fh(13), offset: 0, count: 0 })),
    ]
}

/// Union arms the list above leaves out.
fn more_nfs_calls() -> Vec<(&'static str, Nfs3Proc, Box<dyn Encode>)> {
    let mknod = |what| Box::new(Mknod3Args { where_: dirop("node"), what }) as Box<dyn Encode>;
    let create = |how| Box::new(Create3Args { where_: dirop("file"), how }) as Box<dyn Encode>;
    let dev = Devicedata3 { dev_attributes: Sattr3::default(), spec: Specdata3 { specdata1: 8, specdata2: 0 } };
    vec![
        ("create-unchecked", Nfs3Proc::Create, create(Createhow3::Unchecked(Sattr3::default()))),
        ("create-exclusive", Nfs3Proc::Create, create(Createhow3::Exclusive(*b"verifier"))),
        ("mknod-blk", Nfs3Proc::Mknod, mknod(Mknoddata3::Blk(dev))),
        ("mknod-sock", Nfs3Proc::Mknod, mknod(Mknoddata3::Sock(Sattr3::default()))),
        ("mknod-fifo", Nfs3Proc::Mknod, mknod(Mknoddata3::Fifo(sattr_all()))),
        ("mknod-reg", Nfs3Proc::Mknod, mknod(Mknoddata3::Reg)),
        ("mknod-dir", Nfs3Proc::Mknod, mknod(Mknoddata3::Dir)),
        ("mknod-lnk", Nfs3Proc::Mknod, mknod(Mknoddata3::Lnk)),
        (
            "write-unstable-big",
            Nfs3Proc::Write,
            Box::new(Write3Args {
                file: fh(6),
                offset: u64::MAX - 4096,
                count: 2000,
                stable: StableHow::Unstable,
                data: Bytes::from(vec![0xa5; 2001]),
            }),
        ),
        (
            "setattr-none",
            Nfs3Proc::Setattr,
            Box::new(Setattr3Args { object: fh(2), new_attributes: Sattr3::default(), guard: None }),
        ),
    ]
}

fn seeds() -> Vec<Seed> {
    let mut seeds = Vec::new();
    let mut xid = 0x1000;
    let mut push = |name: String, chunk: usize, stream: Vec<u8>, calls: usize, args: usize| {
        let n = seeds.len();
        let stream = [&[control_byte(chunk + n, 0)][..], &stream].concat();
        seeds.push(Seed { name, stream, calls, args });
    };

    for (proc_, args) in nfs_calls() {
        xid += 1;
        let with_args = usize::from(proc_ != Nfs3Proc::Null);
        let msg = call(xid, NFS_PROGRAM, NFS_V3, proc_ as u32, args.as_ref());
        push(format!("nfs-{:02}-{}", proc_ as u32, proc_.name().to_lowercase()), 0, record(&msg), 1, with_args);
    }
    for (name, proc_, args) in more_nfs_calls() {
        xid += 1;
        push(format!("nfs-{name}"), 0, record(&call(xid, NFS_PROGRAM, NFS_V3, proc_ as u32, args.as_ref())), 1, 1);
    }
    let path = Dirpath::from("/srv/export/sub");
    for (proc_, args) in [(0, None), (1, Some(&path)), (2, None), (3, Some(&path)), (4, None), (5, None)] {
        xid += 1;
        let msg = match args {
            Some(p) => call(xid, MOUNT_PROGRAM, MOUNT_V3, proc_, p),
            None => call(xid, MOUNT_PROGRAM, MOUNT_V3, proc_, &()),
        };
        push(format!("mount-{proc_}"), 0, record(&msg), 1, usize::from(args.is_some()));
    }
    let mapping = Mapping { prog: NFS_PROGRAM, vers: NFS_V3, prot: IPPROTO_TCP, port: 2049 };
    let callit = CallArgs { prog: NFS_PROGRAM, vers: NFS_V3, proc: 0, args: Bytes::from_static(&[0, 0, 0, 1]) };
    for proc_ in 0..6u32 {
        xid += 1;
        let (msg, args) = match proc_ {
            1..=3 => (call(xid, PMAP_PROGRAM, PMAP_V2, proc_, &mapping), 1),
            5 => (call(xid, PMAP_PROGRAM, PMAP_V2, proc_, &callit), 1),
            _ => (call(xid, PMAP_PROGRAM, PMAP_V2, proc_, &()), 0),
        };
        push(format!("pmap-{proc_}"), 0, record(&msg), 1, args);
    }

    // Framing: a WRITE in three fragments, read a byte at a time.
    let write = call(0x2001, NFS_PROGRAM, NFS_V3, 7, nfs_calls()[7].1.as_ref());
    let (a, rest) = write.split_at(10);
    let (b, c) = rest.split_at(rest.len() / 2);
    let mut stream = Vec::new();
    for (part, last) in [(a, false), (b, false), (c, true)] {
        stream.extend_from_slice(&(part.len() as u32 | if last { LAST_FRAGMENT } else { 0 }).to_be_bytes());
        stream.extend_from_slice(part);
    }
    push("frag-write-3".into(), 1, stream, 1, 1);
    // Three pipelined calls in one stream, in odd-sized reads.
    let calls = nfs_calls();
    let stream: Vec<u8> = [3usize, 6, 16]
        .iter()
        .flat_map(|&i| record(&call(0x3000 + i as u32, NFS_PROGRAM, NFS_V3, i as u32, calls[i].1.as_ref())))
        .collect();
    push("pipelined-3".into(), 5, stream, 3, 3);
    // AUTH_NONE and an unknown flavor: the header still decodes.
    for (name, flavor) in [("auth-none", 0), ("auth-gss", 6)] {
        let header = CallHeader {
            xid: 0x4000 + flavor,
            rpc_version: 2,
            prog: NFS_PROGRAM,
            vers: NFS_V3,
            proc_: 1,
            cred: OpaqueAuth { flavor, body: Bytes::from_static(&[0, 0, 0, 0]) },
            verf: OpaqueAuth::default(),
        };
        let mut enc = Encoder::new();
        header.encode(&mut enc);
        Getattr3Args { object: fh(1) }.encode(&mut enc);
        push(name.into(), 0, record(&enc.into_bytes()), 1, 1);
    }
    // Replies, as a client's decoder would meet them.
    for (name, stat) in [
        ("reply-success", ReplyStat::Accepted(AcceptStat::Success)),
        ("reply-prog-mismatch", ReplyStat::Accepted(AcceptStat::ProgMismatch { low: 3, high: 3 })),
        ("reply-rpc-mismatch", ReplyStat::Denied(RejectStat::RpcMismatch { low: 2, high: 2 })),
        ("reply-auth-badcred", ReplyStat::Denied(RejectStat::AuthError(AuthStat::BadCred))),
    ] {
        let mut enc = Encoder::new();
        encode_reply_header(&mut enc, 0x5000, stat);
        push(name.into(), 0, record(&enc.into_bytes()), 0, 0);
    }
    seeds
}

/// Every seed decodes all the way: its records, its call headers, its
/// credential and every argument, with nothing rejected.
#[test]
fn seeds_decode_down_to_their_arguments() {
    let seeds = seeds();
    assert!(seeds.len() > 50);
    for seed in &seeds {
        let out = check_stream(&seed.stream);
        let replies = usize::from(seed.name.starts_with("reply-"));
        let expected = Outcome {
            records: seed.calls.max(replies),
            record_error: None,
            calls: seed.calls,
            bad_headers: 0,
            auth_sys: if seed.name.starts_with("auth-") { 0 } else { seed.calls },
            args_decoded: seed.args,
            args_rejected: 0,
            replies,
        };
        assert_eq!(out, expected, "seed {}", seed.name);
    }
}

/// The same seeds under a record limit they exceed, and cut short: the
/// framing refuses or waits, never panics.
#[test]
fn seeds_cut_short_or_over_the_limit_are_refused_cleanly() {
    for seed in seeds() {
        let stream = &seed.stream[1..];
        for limit in 1..4 {
            let input = [&[control_byte(0, limit)][..], stream].concat();
            let out = check_stream(&input);
            assert!(out.record_error.is_some() || out.records > 0, "seed {} under limit {limit}", seed.name);
        }
        // The last record incomplete: it never comes out, the others do.
        let records = seed.calls.max(1);
        for cut in [1, 2, 4, stream.len() / 2] {
            let input = [&[control_byte(cut, 0)][..], &stream[..stream.len() - cut]].concat();
            let out = check_stream(&input);
            assert_eq!(out.record_error, None, "seed {} cut by {cut} bytes", seed.name);
            assert!(out.records < records, "seed {} cut by {cut} bytes", seed.name);
            if cut <= 4 {
                assert_eq!(out.records, records - 1, "seed {} cut by {cut} bytes", seed.name);
            }
        }
    }
}

/// Every file of the committed corpus passes the fuzz target's checks.
#[test]
fn committed_corpus_replays_cleanly() {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read the corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(files.len() >= 50, "only {} files in {}", files.len(), dir.display());
    let mut total = Outcome::default();
    for path in &files {
        let data = std::fs::read(path).unwrap();
        let out = std::panic::catch_unwind(|| check_stream(&data))
            .unwrap_or_else(|_| panic!("corpus file {} fails the checks", path.display()));
        total.calls += out.calls;
        total.args_decoded += out.args_decoded;
        total.args_rejected += out.args_rejected;
        total.replies += out.replies;
    }
    // The corpus is worth replaying: it reaches every layer.
    assert!(total.calls > 0 && total.args_decoded > 0 && total.args_rejected > 0 && total.replies > 0, "{total:?}");
}

/// Writes the seeds to $KEEL_SEED_DIR (default: the corpus directory).
#[test]
#[ignore = "writes files; run by hand to refresh the fuzz seeds"]
fn write_seeds() {
    let dir = std::env::var_os("KEEL_SEED_DIR").map(PathBuf::from).unwrap_or_else(corpus_dir);
    std::fs::create_dir_all(&dir).unwrap();
    for seed in seeds() {
        std::fs::write(dir.join(format!("seed-{}", seed.name)), &seed.stream).unwrap();
    }
}

//! The decoding oracle behind the `rpc_call` fuzz target, shared with the
//! corpus replay test (`crates/server/tests/fuzz_corpus.rs` includes this
//! file with `#[path]`; the fuzz target does the same), so CI checks the
//! committed corpus on stable without cargo-fuzz.
//!
//! An input is one control byte and then a TCP byte stream as a client
//! would send it. The control byte picks how the stream is cut into reads
//! and which record limit applies. [`check_stream`] then:
//!
//! 1. feeds the stream to `keel_rpc::record::RecordAssembler` in those
//!    chunks, and compares the records (and the error, if any) with a
//!    plain reading of RFC 5531 section 11 over the whole stream: however
//!    the bytes arrive, the same records come out;
//! 2. decodes each record's call header and, for AUTH_SYS, the credential;
//! 3. decodes the arguments that the procedure named in the header takes
//!    (the 22 NFSv3 procedures, MOUNT's dirpath, portmap's mapping and
//!    call_args), and a reply header when the record is a reply.
//!
//! Everything that decodes is encoded again and must decode to the same
//! value, from an encoding exactly as long as the bytes it came from.
//! Decode errors are fine -- that is what garbage is for; panics, and
//! broken invariants (asserted here), are the bugs.

use std::fmt::Debug;

use bytes::{Bytes, BytesMut};
use keel_nfs3_proto::mount::Dirpath;
use keel_nfs3_proto::nfs3::*;
use keel_nfs3_proto::portmap::{CallArgs, Mapping};
use keel_nfs3_proto::{MOUNT_PROGRAM, MountProc, NFS_PROGRAM, PMAP_PROGRAM, PmapProc};
use keel_rpc::msg::{AUTH_SYS, AuthSys, CallHeader, CallHeaderError, decode_reply_header, encode_reply_header};
use keel_rpc::record::{LAST_FRAGMENT, RecordAssembler, RecordError};
use keel_xdr::{Decode, Decoder, Encode, Encoder};

/// The server's record limit (`RECORD_BYTES_MAX` in crates/transport/src/lib.rs).
pub const SERVER_RECORD_BYTES_MAX: usize = (1 << 20) + (64 << 10);

/// `RecordAssembler`'s limit on the fragments of one record
/// (`FRAGMENTS_PER_RECORD_MAX` in crates/rpc/src/record.rs).
pub const FRAGMENTS_PER_RECORD_MAX: usize = 1024;

/// How the control byte's low three bits cut the stream into reads.
const CHUNK_BYTES: [usize; 8] = [usize::MAX, 1, 2, 3, 4, 7, 64, 1000];
/// What the next two bits make the record limit. Small limits let short
/// fuzz inputs reach the "record too large" paths.
const RECORD_LIMITS: [usize; 4] = [SERVER_RECORD_BYTES_MAX, 16, 100, 1000];

/// The control byte for reading a stream in `chunk` pieces (an index into
/// the chunk table) under record limit number `limit`.
pub fn control_byte(chunk: usize, limit: usize) -> u8 {
    ((chunk % CHUNK_BYTES.len()) | ((limit % RECORD_LIMITS.len()) << 3)) as u8
}

/// What an input came to: lets tests check that inputs reach as deep as
/// they are meant to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub records: usize,
    pub record_error: Option<RecordError>,
    pub calls: usize,
    pub bad_headers: usize,
    pub auth_sys: usize,
    pub args_decoded: usize,
    pub args_rejected: usize,
    pub replies: usize,
}

/// Runs one input through the record layer and the decoders, checking
/// every invariant above. Panics on a violation.
pub fn check_stream(data: &[u8]) -> Outcome {
    let Some((&control, stream)) = data.split_first() else { return Outcome::default() };
    let chunk = CHUNK_BYTES[usize::from(control & 7)];
    let limit = RECORD_LIMITS[usize::from(control >> 3) & 3];

    let (records, error) = assemble(stream, limit, chunk);
    let (expected, expected_error) = reference_records(stream, limit);
    assert_eq!(records, expected, "records differ from RFC 5531 framing (chunk {chunk}, limit {limit})");
    assert_eq!(error, expected_error, "record error differs (chunk {chunk}, limit {limit})");

    let mut out = Outcome { records: records.len(), record_error: error, ..Outcome::default() };
    for record in records {
        check_record(record, &mut out);
    }
    out
}

/// The stream through `RecordAssembler`, `chunk` bytes at a time.
fn assemble(stream: &[u8], limit: usize, chunk: usize) -> (Vec<Bytes>, Option<RecordError>) {
    let mut assembler = RecordAssembler::new(limit);
    let mut buf = BytesMut::new();
    let mut records = Vec::new();
    for piece in stream.chunks(chunk.clamp(1, stream.len().max(1))) {
        buf.extend_from_slice(piece);
        loop {
            match assembler.next_record(&mut buf) {
                Ok(Some(record)) => {
                    assert!(record.len() <= limit, "record of {} bytes over the limit {limit}", record.len());
                    records.push(record);
                }
                Ok(None) => break,
                Err(e) => return (records, Some(e)),
            }
        }
        // What the server reserves for the next read must stay bounded.
        let wanted = assembler.bytes_wanted(&buf);
        assert!((4..=limit + 4).contains(&wanted), "bytes_wanted {wanted} with limit {limit}");
    }
    (records, None)
}

/// Record marking as RFC 5531 section 11 describes it, over the whole
/// stream at once, with the assembler's two documented limits.
fn reference_records(stream: &[u8], limit: usize) -> (Vec<Bytes>, Option<RecordError>) {
    let mut records = Vec::new();
    let mut partial: Vec<u8> = Vec::new();
    let mut fragments = 0;
    let mut pos = 0;
    while stream.len() - pos >= 4 {
        let header = u32::from_be_bytes(stream[pos..pos + 4].try_into().unwrap());
        let len = (header & !LAST_FRAGMENT) as usize;
        if partial.len() + len > limit {
            return (records, Some(RecordError::TooLarge { bytes: partial.len() + len, max: limit }));
        }
        if stream.len() - pos - 4 < len {
            break;
        }
        partial.extend_from_slice(&stream[pos + 4..pos + 4 + len]);
        pos += 4 + len;
        if header & LAST_FRAGMENT != 0 {
            records.push(Bytes::from(std::mem::take(&mut partial)));
            fragments = 0;
        } else {
            fragments += 1;
            if fragments > FRAGMENTS_PER_RECORD_MAX {
                return (records, Some(RecordError::TooManyFragments { max: FRAGMENTS_PER_RECORD_MAX }));
            }
        }
    }
    (records, None)
}

fn check_record(record: Bytes, out: &mut Outcome) {
    let mut dec = Decoder::new(record.clone());
    let header = match CallHeader::decode(&mut dec) {
        Ok(h) => h,
        Err(CallHeaderError::NoXid) => {
            assert!(record.len() < 4, "NoXid for a record of {} bytes", record.len());
            return;
        }
        Err(CallHeaderError::NotACall { xid }) => {
            assert_eq!(xid.to_be_bytes(), record[..4], "NotACall with the wrong xid");
            check_reply(record, out);
            return;
        }
        Err(CallHeaderError::Garbage { xid, .. }) => {
            assert_eq!(xid.to_be_bytes(), record[..4], "Garbage with the wrong xid");
            out.bad_headers += 1;
            return;
        }
    };
    out.calls += 1;
    let consumed = dec.position();
    let mut enc = Encoder::new();
    header.encode(&mut enc);
    let bytes = enc.into_bytes();
    assert_eq!(bytes.len(), consumed, "call header re-encodes to a different length: {header:?}");
    let mut again = Decoder::new(bytes);
    assert_eq!(CallHeader::decode(&mut again).as_ref(), Ok(&header), "call header roundtrip");
    assert_eq!(again.remaining(), 0);

    if header.cred.flavor == AUTH_SYS
        && let Ok(sys) = AuthSys::decode(header.cred.body.clone())
    {
        out.auth_sys += 1;
        let opaque = sys.to_opaque();
        assert_eq!(opaque.flavor, AUTH_SYS);
        assert_eq!(opaque.body.len(), header.cred.body.len(), "AUTH_SYS re-encodes to a different length: {sys:?}");
        assert_eq!(AuthSys::decode(opaque.body), Ok(sys), "AUTH_SYS roundtrip");
    }

    let decoded = match header.prog {
        NFS_PROGRAM => nfs_args(header.proc_, &mut dec),
        MOUNT_PROGRAM => match MountProc::from_u32(header.proc_) {
            Some(MountProc::Mnt | MountProc::Umnt) => roundtrip::<Dirpath>(&mut dec),
            _ => None,
        },
        PMAP_PROGRAM => match PmapProc::from_u32(header.proc_) {
            Some(PmapProc::Set | PmapProc::Unset | PmapProc::Getport) => roundtrip::<Mapping>(&mut dec),
            Some(PmapProc::Callit) => roundtrip::<CallArgs>(&mut dec),
            _ => None,
        },
        _ => None,
    };
    match decoded {
        Some(true) => out.args_decoded += 1,
        Some(false) => out.args_rejected += 1,
        None => {}
    }
}

/// The arguments of NFSv3 procedure `proc_`: `Some(true)` if they decoded
/// (and round-tripped), `Some(false)` if they did not, `None` for a
/// procedure without arguments or that does not exist.
fn nfs_args(proc_: u32, dec: &mut Decoder) -> Option<bool> {
    match Nfs3Proc::from_u32(proc_)? {
        Nfs3Proc::Null => None,
        Nfs3Proc::Getattr => roundtrip::<Getattr3Args>(dec),
        Nfs3Proc::Setattr => roundtrip::<Setattr3Args>(dec),
        Nfs3Proc::Lookup => roundtrip::<Lookup3Args>(dec),
        Nfs3Proc::Access => roundtrip::<Access3Args>(dec),
        Nfs3Proc::Readlink => roundtrip::<Readlink3Args>(dec),
        Nfs3Proc::Read => roundtrip::<Read3Args>(dec),
        Nfs3Proc::Write => roundtrip::<Write3Args>(dec),
        Nfs3Proc::Create => roundtrip::<Create3Args>(dec),
        Nfs3Proc::Mkdir => roundtrip::<Mkdir3Args>(dec),
        Nfs3Proc::Symlink => roundtrip::<Symlink3Args>(dec),
        Nfs3Proc::Mknod => roundtrip::<Mknod3Args>(dec),
        Nfs3Proc::Remove => roundtrip::<Remove3Args>(dec),
        Nfs3Proc::Rmdir => roundtrip::<Rmdir3Args>(dec),
        Nfs3Proc::Rename => roundtrip::<Rename3Args>(dec),
        Nfs3Proc::Link => roundtrip::<Link3Args>(dec),
        Nfs3Proc::Readdir => roundtrip::<Readdir3Args>(dec),
        Nfs3Proc::Readdirplus => roundtrip::<Readdirplus3Args>(dec),
        Nfs3Proc::Fsstat => roundtrip::<Fsstat3Args>(dec),
        Nfs3Proc::Fsinfo => roundtrip::<Fsinfo3Args>(dec),
        Nfs3Proc::Pathconf => roundtrip::<Pathconf3Args>(dec),
        Nfs3Proc::Commit => roundtrip::<Commit3Args>(dec),
    }
}

/// Decodes a `T` from `dec`; if that works, checks that its encoding is
/// exactly as long as what was consumed and decodes back to the same value.
fn roundtrip<T: Decode + Encode + PartialEq + Debug>(dec: &mut Decoder) -> Option<bool> {
    let start = dec.position();
    let Ok(value) = T::decode(dec) else { return Some(false) };
    let consumed = dec.position() - start;
    assert!(consumed <= dec.buffer().len());
    let mut enc = Encoder::new();
    value.encode(&mut enc);
    assert_eq!(enc.len(), consumed, "{} re-encodes to a different length: {value:?}", std::any::type_name::<T>());
    let mut again = Decoder::new(enc.into_bytes());
    match T::decode(&mut again) {
        Ok(back) => assert_eq!(back, value, "{} roundtrip", std::any::type_name::<T>()),
        Err(e) => panic!("{} does not decode its own encoding: {e} ({value:?})", std::any::type_name::<T>()),
    }
    assert_eq!(again.remaining(), 0);
    Some(true)
}

/// A record that is not a call: if it is a reply header, it must survive
/// encoding and decoding again.
fn check_reply(record: Bytes, out: &mut Outcome) {
    let mut dec = Decoder::new(record);
    let Ok((xid, stat)) = decode_reply_header(&mut dec) else { return };
    out.replies += 1;
    let mut enc = Encoder::new();
    encode_reply_header(&mut enc, xid, stat);
    let mut again = Decoder::new(enc.into_bytes());
    assert_eq!(decode_reply_header(&mut again), Ok((xid, stat)), "reply header roundtrip");
    assert_eq!(again.remaining(), 0);
}

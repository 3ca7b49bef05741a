//! The COMPOUND procedure (RFC 8881 section 16.2): the operation table,
//! the incremental decoder a server uses, the reply encoder it appends to
//! as operations run, and the whole messages for a client.
//!
//! A server reads a call like this:
//!
//! ```text
//! head = Compound4ArgsHead::decode(dec)      // fails: GARBAGE_ARGS (as knfsd)
//! minor version not served                   // NFS4ERR_MINOR_VERS_MISMATCH, no results
//! ops = CompoundOps::new(&head); reply = Compound4ResEncoder::new(head.tag)
//! while let Some(op) = ops.next_op(dec):
//!     Err(e)  => reply.push(&e.reply()); stop       // NFS4ERR_BADXDR at its position
//!     Ok(op)  => first op SEQUENCE: head.numops > session's ca_maxoperations
//!                    → SEQUENCE fails with NFS4ERR_TOO_MANY_OPS
//!                Illegal(_) → NFS4ERR_OP_ILLEGAL; 4.0-only ops → NFS4ERR_NOTSUPP
//!                res = run(op); reply.push(&res); stop unless res.status() is NFS4_OK
//! reply.finish(enc)
//! ```
//!
//! Nothing past a failed operation is decoded, and the decoder holds no
//! more than one operation at a time.

use keel_xdr::{Decode, Decoder, Encode, Encoder, Spliced, XdrError};

use crate::*;

operations! {
    /// `nfs_opnum4`: the operations of every minor version.
    OpNum;
    /// `nfs_argop4`: an operation and its arguments.
    NfsArgop4;
    /// `nfs_resop4`: an operation's result.
    NfsResop4;
    Illegal = 10044 "ILLEGAL";
    Access = 3 "ACCESS", minor 0, Access4Args => Access4Res;
    Close = 4 "CLOSE", minor 0, Close4Args => Close4Res;
    Commit = 5 "COMMIT", minor 0, Commit4Args => Commit4Res;
    Create = 6 "CREATE", minor 0, Create4Args => Create4Res;
    Delegpurge = 7 "DELEGPURGE", minor 0, Delegpurge4Args => Delegpurge4Res;
    Delegreturn = 8 "DELEGRETURN", minor 0, Delegreturn4Args => Delegreturn4Res;
    Getattr = 9 "GETATTR", minor 0, Getattr4Args => Getattr4Res;
    Getfh = 10 "GETFH", minor 0, () => Getfh4Res;
    Link = 11 "LINK", minor 0, Link4Args => Link4Res;
    Lock = 12 "LOCK", minor 0, Lock4Args => Lock4Res;
    Lockt = 13 "LOCKT", minor 0, Lockt4Args => Lockt4Res;
    Locku = 14 "LOCKU", minor 0, Locku4Args => Locku4Res;
    Lookup = 15 "LOOKUP", minor 0, Lookup4Args => Lookup4Res;
    Lookupp = 16 "LOOKUPP", minor 0, () => Lookupp4Res;
    Nverify = 17 "NVERIFY", minor 0, Nverify4Args => Nverify4Res;
    Open = 18 "OPEN", minor 0, Open4Args => Open4Res;
    Openattr = 19 "OPENATTR", minor 0, Openattr4Args => Openattr4Res;
    OpenConfirm = 20 "OPEN_CONFIRM", minor 0, OpenConfirm4Args => OpenConfirm4Res;
    OpenDowngrade = 21 "OPEN_DOWNGRADE", minor 0, OpenDowngrade4Args => OpenDowngrade4Res;
    Putfh = 22 "PUTFH", minor 0, Putfh4Args => Putfh4Res;
    Putpubfh = 23 "PUTPUBFH", minor 0, () => Putpubfh4Res;
    Putrootfh = 24 "PUTROOTFH", minor 0, () => Putrootfh4Res;
    Read = 25 "READ", minor 0, Read4Args => Read4Res;
    Readdir = 26 "READDIR", minor 0, Readdir4Args => Readdir4Res;
    Readlink = 27 "READLINK", minor 0, () => Readlink4Res;
    Remove = 28 "REMOVE", minor 0, Remove4Args => Remove4Res;
    Rename = 29 "RENAME", minor 0, Rename4Args => Rename4Res;
    Renew = 30 "RENEW", minor 0, Renew4Args => Renew4Res;
    Restorefh = 31 "RESTOREFH", minor 0, () => Restorefh4Res;
    Savefh = 32 "SAVEFH", minor 0, () => Savefh4Res;
    Secinfo = 33 "SECINFO", minor 0, Secinfo4Args => Secinfo4Res;
    Setattr = 34 "SETATTR", minor 0, Setattr4Args => Setattr4Res;
    Setclientid = 35 "SETCLIENTID", minor 0, Setclientid4Args => Setclientid4Res;
    SetclientidConfirm = 36 "SETCLIENTID_CONFIRM", minor 0, SetclientidConfirm4Args => SetclientidConfirm4Res;
    Verify = 37 "VERIFY", minor 0, Verify4Args => Verify4Res;
    Write = 38 "WRITE", minor 0, Write4Args => Write4Res;
    ReleaseLockowner = 39 "RELEASE_LOCKOWNER", minor 0, ReleaseLockowner4Args => ReleaseLockowner4Res;
    BackchannelCtl = 40 "BACKCHANNEL_CTL", minor 1, BackchannelCtl4Args => BackchannelCtl4Res;
    BindConnToSession = 41 "BIND_CONN_TO_SESSION", minor 1, BindConnToSession4Args => BindConnToSession4Res;
    ExchangeId = 42 "EXCHANGE_ID", minor 1, ExchangeId4Args => ExchangeId4Res;
    CreateSession = 43 "CREATE_SESSION", minor 1, CreateSession4Args => CreateSession4Res;
    DestroySession = 44 "DESTROY_SESSION", minor 1, DestroySession4Args => DestroySession4Res;
    FreeStateid = 45 "FREE_STATEID", minor 1, FreeStateid4Args => FreeStateid4Res;
    GetDirDelegation = 46 "GET_DIR_DELEGATION", minor 1, GetDirDelegation4Args => GetDirDelegation4Res;
    Getdeviceinfo = 47 "GETDEVICEINFO", minor 1, Getdeviceinfo4Args => Getdeviceinfo4Res;
    Getdevicelist = 48 "GETDEVICELIST", minor 1, Getdevicelist4Args => Getdevicelist4Res;
    Layoutcommit = 49 "LAYOUTCOMMIT", minor 1, Layoutcommit4Args => Layoutcommit4Res;
    Layoutget = 50 "LAYOUTGET", minor 1, Layoutget4Args => Layoutget4Res;
    Layoutreturn = 51 "LAYOUTRETURN", minor 1, Layoutreturn4Args => Layoutreturn4Res;
    SecinfoNoName = 52 "SECINFO_NO_NAME", minor 1, SecinfoNoName4Args => SecinfoNoName4Res;
    Sequence = 53 "SEQUENCE", minor 1, Sequence4Args => Sequence4Res;
    SetSsv = 54 "SET_SSV", minor 1, SetSsv4Args => SetSsv4Res;
    TestStateid = 55 "TEST_STATEID", minor 1, TestStateid4Args => TestStateid4Res;
    WantDelegation = 56 "WANT_DELEGATION", minor 1, WantDelegation4Args => WantDelegation4Res;
    DestroyClientid = 57 "DESTROY_CLIENTID", minor 1, DestroyClientid4Args => DestroyClientid4Res;
    ReclaimComplete = 58 "RECLAIM_COMPLETE", minor 1, ReclaimComplete4Args => ReclaimComplete4Res;
    Allocate = 59 "ALLOCATE", minor 2, Allocate4Args => Allocate4Res;
    Copy = 60 "COPY", minor 2, Copy4Args => Copy4Res;
    CopyNotify = 61 "COPY_NOTIFY", minor 2, CopyNotify4Args => CopyNotify4Res;
    Deallocate = 62 "DEALLOCATE", minor 2, Deallocate4Args => Deallocate4Res;
    IoAdvise = 63 "IO_ADVISE", minor 2, IoAdvise4Args => IoAdvise4Res;
    Layouterror = 64 "LAYOUTERROR", minor 2, Layouterror4Args => Layouterror4Res;
    Layoutstats = 65 "LAYOUTSTATS", minor 2, Layoutstats4Args => Layoutstats4Res;
    OffloadCancel = 66 "OFFLOAD_CANCEL", minor 2, OffloadCancel4Args => OffloadCancel4Res;
    OffloadStatus = 67 "OFFLOAD_STATUS", minor 2, OffloadStatus4Args => OffloadStatus4Res;
    ReadPlus = 68 "READ_PLUS", minor 2, ReadPlus4Args => ReadPlus4Res;
    Seek = 69 "SEEK", minor 2, Seek4Args => Seek4Res;
    WriteSame = 70 "WRITE_SAME", minor 2, WriteSame4Args => WriteSame4Res;
    Clone = 71 "CLONE", minor 2, Clone4Args => Clone4Res;
}

impl OpNum {
    /// True for the operations 4.1 made "must not implement" (RFC 8881
    /// section 17), which a 4.1 or 4.2 server answers `NFS4ERR_NOTSUPP`.
    pub fn is_v40_only(self) -> bool {
        matches!(
            self,
            OpNum::OpenConfirm
                | OpNum::Renew
                | OpNum::Setclientid
                | OpNum::SetclientidConfirm
                | OpNum::ReleaseLockowner
        )
    }
}

xdr_structs! {
    /// `COMPOUND4args` up to its operations: the tag, the minor version and
    /// how many operations follow (`argarray`'s count), which the server
    /// compares with its limits before it decodes any of them.
    #[derive(Default)]
    Compound4ArgsHead { tag: Tag4, minorversion: u32, numops: u32 }
}

/// Decodes a COMPOUND's operations one at a time, after its
/// [`Compound4ArgsHead`] (see the module's documentation for the loop).
///
/// After an error or an [`NfsArgop4::Illegal`] operation it yields nothing
/// more: what follows cannot be read. It never yields more than
/// [`COMPOUND_OPS_MAX`] operations: the next one is
/// [`OpDecodeError::TooManyOps`].
#[derive(Debug, Clone)]
pub struct CompoundOps {
    minorversion: u32,
    numops: u32,
    index: u32,
    done: bool,
}

impl CompoundOps {
    pub fn new(head: &Compound4ArgsHead) -> Self {
        CompoundOps { minorversion: head.minorversion, numops: head.numops, index: 0, done: false }
    }

    /// The operation count the client sent.
    pub fn numops(&self) -> u32 {
        self.numops
    }

    /// Position of the next operation (how many were yielded).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The next operation, read from `dec` (the decoder the head was read
    /// from), or `None` after the last one, an error or an ILLEGAL one.
    pub fn next_op(&mut self, dec: &mut Decoder) -> Option<Result<NfsArgop4, OpDecodeError>> {
        if self.done || self.index == self.numops {
            return None;
        }
        let index = self.index;
        self.index += 1;
        if index == COMPOUND_OPS_MAX {
            self.done = true;
            return Some(Err(OpDecodeError::TooManyOps { index }));
        }
        let opnum = dec.clone().u32();
        match NfsArgop4::decode_op(dec, self.minorversion) {
            Ok(op) => {
                self.done = matches!(op, NfsArgop4::Illegal(_));
                Some(Ok(op))
            }
            Err(error) => {
                self.done = true;
                Some(Err(match opnum {
                    Ok(n) => {
                        OpDecodeError::BadXdr { index, opnum: OpNum::from_u32(n).unwrap_or(OpNum::Illegal), error }
                    }
                    Err(_) => OpDecodeError::Missing { index, error },
                }))
            }
        }
    }
}

/// Why [`CompoundOps::next_op`] could not give an operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpDecodeError {
    /// The operation's arguments do not decode (too short, a length over
    /// its bound, a value a union does not have).
    #[error("operation {index} ({opnum}): {error}")]
    BadXdr { index: u32, opnum: OpNum, error: XdrError },
    /// The record ended where an operation number should be.
    #[error("operation {index} is missing: {error}")]
    Missing { index: u32, error: XdrError },
    /// More than [`COMPOUND_OPS_MAX`] operations. A server that checks
    /// `numops` against its session's limit (no larger) never sees this.
    #[error("operation {index} is past the limit of {COMPOUND_OPS_MAX} per COMPOUND")]
    TooManyOps { index: u32 },
}

impl OpDecodeError {
    /// Position of the operation.
    pub fn index(&self) -> u32 {
        match self {
            OpDecodeError::BadXdr { index, .. }
            | OpDecodeError::Missing { index, .. }
            | OpDecodeError::TooManyOps { index } => *index,
        }
    }

    /// The status for the operation: `NFS4ERR_BADXDR` or
    /// `NFS4ERR_TOO_MANY_OPS`.
    pub fn status(&self) -> Nfsstat4 {
        match self {
            OpDecodeError::BadXdr { .. } | OpDecodeError::Missing { .. } => Nfsstat4::Badxdr,
            OpDecodeError::TooManyOps { .. } => Nfsstat4::TooManyOps,
        }
    }

    /// The result the server appends at the operation's position: the
    /// operation's own result with the status, or ILLEGAL's when there is
    /// no operation number to answer for.
    pub fn reply(&self) -> NfsResop4 {
        match self {
            OpDecodeError::BadXdr { opnum, .. } => NfsResop4::failed(*opnum, self.status()),
            OpDecodeError::Missing { .. } | OpDecodeError::TooManyOps { .. } => NfsResop4::Illegal(self.status()),
        }
    }
}

/// `COMPOUND4args`, whole: what a client sends. A server reads calls with
/// [`Compound4ArgsHead`] and [`CompoundOps`] instead.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Compound4Args {
    pub tag: Tag4,
    pub minorversion: u32,
    pub argarray: Vec<NfsArgop4>,
}

impl Encode for Compound4Args {
    fn encode(&self, enc: &mut Encoder) {
        self.tag.encode(enc);
        enc.u32(self.minorversion);
        encode_array(enc, &self.argarray);
    }
}

/// Decodes every operation (of the call's minor version), failing as
/// [`CompoundOps`] does; an ILLEGAL operation must be the last.
impl Decode for Compound4Args {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        let head = Compound4ArgsHead::decode(dec)?;
        let mut ops = CompoundOps::new(&head);
        let mut argarray = Vec::new();
        while let Some(op) = ops.next_op(dec) {
            argarray.push(op.map_err(|e| match e {
                OpDecodeError::BadXdr { error, .. } | OpDecodeError::Missing { error, .. } => error,
                OpDecodeError::TooManyOps { .. } => {
                    XdrError::TooLong { len: head.numops as usize, max: COMPOUND_OPS_MAX as usize }
                }
            })?);
        }
        if ops.index() != head.numops {
            let value = argarray.last().map_or(0, |op: &NfsArgop4| match op {
                NfsArgop4::Illegal(n) => *n,
                _ => 0,
            });
            return Err(XdrError::InvalidValue { what: "nfs_opnum4", value });
        }
        Ok(Compound4Args { tag: head.tag, minorversion: head.minorversion, argarray })
    }
}

/// `COMPOUND4res`, whole: what a client receives. A server writes replies
/// with [`Compound4ResEncoder`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Compound4Res {
    /// The status of the last operation evaluated (`NFS4_OK` if all were).
    pub status: Nfsstat4,
    pub tag: Tag4,
    pub resarray: Vec<NfsResop4>,
}

impl Encode for Compound4Res {
    fn encode(&self, enc: &mut Encoder) {
        self.status.encode(enc);
        self.tag.encode(enc);
        encode_array(enc, &self.resarray);
    }
}

impl Decode for Compound4Res {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(Compound4Res {
            status: Nfsstat4::decode(dec)?,
            tag: Tag4::decode(dec)?,
            resarray: dec.array(COMPOUND_OPS_MAX as usize)?,
        })
    }
}

/// Writes a `COMPOUND4res` as the operations run: each result is appended
/// with [`push`](Self::push), and [`finish`](Self::finish) writes the
/// status (the last result's), the tag, the count and the results. Large
/// payloads stay segments of their own all the way.
#[derive(Debug)]
pub struct Compound4ResEncoder {
    tag: Tag4,
    status: Nfsstat4,
    count: u32,
    results: Encoder,
}

impl Compound4ResEncoder {
    /// A reply to a call with `tag` (the reply echoes it).
    pub fn new(tag: Tag4) -> Self {
        Compound4ResEncoder { tag, status: Nfsstat4::Ok, count: 0, results: Encoder::new() }
    }

    /// Appends one operation's result.
    pub fn push(&mut self, res: &NfsResop4) {
        res.encode(&mut self.results);
        self.count += 1;
        self.status = res.status();
    }

    /// Appends a successful READ whose data is a payload the encoder does
    /// not hold (a pipe of file data): the same bytes as
    /// `NfsResop4::Read(Nfs4Result::Ok(Read4ResOk { eof, data }))`, with the
    /// data written by the transport.
    pub fn push_read_spliced(&mut self, eof: bool, data: Spliced) {
        self.results.u32(OpNum::Read as u32);
        Nfsstat4::Ok.encode(&mut self.results);
        self.results.bool(eof);
        self.results.opaque_spliced(data);
        self.count += 1;
        self.status = Nfsstat4::Ok;
    }

    /// Appends a successful READ_PLUS of one data segment whose data is a
    /// payload the encoder does not hold: the same bytes as
    /// `NfsResop4::ReadPlus(Nfs4Result::Ok(ReadPlusRes4 { rpr_eof: eof,
    /// rpr_contents: [Nfs4ContentData(Data4 { d_offset: offset, d_data })] }))`.
    pub fn push_read_plus_spliced(&mut self, eof: bool, offset: u64, data: Spliced) {
        self.results.u32(OpNum::ReadPlus as u32);
        Nfsstat4::Ok.encode(&mut self.results);
        self.results.bool(eof);
        self.results.u32(1);
        DataContent4::Nfs4ContentData.encode(&mut self.results);
        self.results.u64(offset);
        self.results.opaque_spliced(data);
        self.count += 1;
        self.status = Nfsstat4::Ok;
    }

    /// The status so far: the last result's.
    pub fn status(&self) -> Nfsstat4 {
        self.status
    }

    /// Results appended so far.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Bytes of the whole `COMPOUND4res` so far (what the session's
    /// `ca_maxresponsesize` bounds).
    pub fn len(&self) -> usize {
        4 + self.tag.xdr_len() + 4 + self.results.len()
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Writes the reply into `enc`.
    pub fn finish(self, enc: &mut Encoder) {
        self.status.encode(enc);
        self.tag.encode(enc);
        enc.u32(self.count);
        enc.raw_segments(self.results.finish());
    }
}

//! The COMPOUND operations as one table (knfsd's `nfsd4_ops`): for each
//! operation its handler, or none (`NFS4ERR_NOTSUPP`), and its flags. The
//! loop in `compound.rs` reads the flags before it runs a handler; a
//! handler is `fn(&mut Compound<S>, ArgsType) -> Result<..., Nfsstat4>`
//! for the operation's argument type in keel-nfs4-proto, its result
//! converted to the operation's result type by [`OpOutcome`].
//!
//! Handlers live one file per group: `session.rs` (client IDs, sessions,
//! stateids), `fh.rs` (filehandles), `attr.rs` (attributes, access),
//! `dir.rs` (names and directories), `open.rs` (opens, shares,
//! delegations), `io.rs` (READ, WRITE, COMMIT), `lock.rs` (byte-range
//! locks) and `v42.rs` (the operations NFSv4.2 added).
//!
//! To add an operation: write `fn op<S: Store>(c: &mut Compound<'_, S>,
//! args: Op4Args) -> Result<Op4ResOk, Nfsstat4>` (or `Result<(),
//! Nfsstat4>` for a bare status) in its group's file and name it in its
//! row: `op!(Variant, FH, group::op)`. A result that carries a value on
//! failure (LOCK's `LOCK4denied`) is returned whole, with an identity
//! `OpOutcome` impl here, as SETATTR's is. From the context a handler
//! takes: `c.current_export(status)` (the current object of an export,
//! `status` for a pseudo directory), `c.act(&fh)` (the caller's squashed
//! identity for store calls), `c.store()`, `c.program.with_state(|s|
//! ...)` (the state, drained of what it released after the call), the
//! session's client in `c.slot`, `c.stateid` (the current stateid: resolve
//! the arguments' through it, set it on success), `c.now`, and
//! `io::check_stateid` for operations that do I/O under a stateid.

pub(crate) mod attr;
mod dir;
mod fh;
mod io;
mod lock;
mod open;
mod session;
mod v42;

use keel_nfs4_proto::{Nfs4Result, NfsArgop4, NfsResop4, Nfsstat4, OpNum, Setattr4Res};
use keel_store::Store;

use crate::compound::Compound;

/// What the COMPOUND loop checks of an operation before its handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpFlags(u8);

impl OpFlags {
    pub const NONE: OpFlags = OpFlags(0);
    /// May be the first operation of a COMPOUND without SEQUENCE (and is
    /// then the only one): knfsd's `ALLOWED_AS_FIRST_OP`.
    pub const FIRST_OK: OpFlags = OpFlags(1);
    /// Needs a current filehandle (NFS4ERR_NOFILEHANDLE without one).
    pub const NEEDS_FH: OpFlags = OpFlags(2);
    /// A put-filehandle operation (PUTFH, PUTROOTFH, PUTPUBFH,
    /// RESTOREFH): it checks the new current filehandle's flavor only
    /// when the next operation does not (knfsd's `OP_IS_PUTFH_LIKE`).
    pub const PUTFH_LIKE: OpFlags = OpFlags(4);
    /// After a put-filehandle operation, this one answers (or, SECINFO,
    /// never answers) NFS4ERR_WRONGSEC itself: knfsd's
    /// `OP_HANDLES_WRONGSEC`.
    pub const HANDLES_WRONGSEC: OpFlags = OpFlags(8);
    /// The loop does not check the current filehandle's flavor before
    /// the handler runs: the handler checks what it must (LOOKUP checks
    /// what it reaches), or nothing (SAVEFH, SECINFO).
    pub const OWN_SEC_CHECK: OpFlags = OpFlags(16);

    pub const fn union(self, other: OpFlags) -> OpFlags {
        OpFlags(self.0 | other.0)
    }

    pub const fn contains(self, other: OpFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// Runs one operation: its arguments in, its result out.
pub type OpHandler<S> = fn(&mut Compound<'_, S>, NfsArgop4) -> NfsResop4;

/// One operation of the table.
pub struct OpEntry<S: Store> {
    pub op: OpNum,
    pub flags: OpFlags,
    /// `None`: not implemented, NFS4ERR_NOTSUPP.
    pub handler: Option<OpHandler<S>>,
}

/// A handler's outcome as the operation's result type.
pub trait OpOutcome<R> {
    fn into_res(self) -> R;
}

/// Operations whose result is a bare status.
impl OpOutcome<Nfsstat4> for Result<(), Nfsstat4> {
    fn into_res(self) -> Nfsstat4 {
        self.err().unwrap_or(Nfsstat4::Ok)
    }
}

impl<T> OpOutcome<Nfs4Result<T>> for Result<T, Nfsstat4> {
    fn into_res(self) -> Nfs4Result<T> {
        self.into()
    }
}

/// Results that carry more than a status on failure (SETATTR's
/// `attrsset`; LOCK's and LOCKT's `LOCK4denied`) are built by their
/// handlers.
impl OpOutcome<Setattr4Res> for Setattr4Res {
    fn into_res(self) -> Setattr4Res {
        self
    }
}

const FIRST: OpFlags = OpFlags::FIRST_OK;
const FH: OpFlags = OpFlags::NEEDS_FH;
const NONE: OpFlags = OpFlags::NONE;
/// PUTFH, PUTROOTFH, PUTPUBFH, RESTOREFH.
const PUTFH: OpFlags = OpFlags::PUTFH_LIKE.union(OpFlags::HANDLES_WRONGSEC);
/// OPEN: checks the current filehandle as any operation, but a
/// put-filehandle operation before it leaves the check to it.
const FH_WRONGSEC: OpFlags = FH.union(OpFlags::HANDLES_WRONGSEC);
/// SAVEFH, LOOKUP, LOOKUPP, SECINFO, SECINFO_NO_NAME.
const FH_OWN_SEC: OpFlags = FH_WRONGSEC.union(OpFlags::OWN_SEC_CHECK);

/// A row of the table: `op!(Variant, flags, handler)` for an implemented
/// operation, `op!(Variant, flags)` for one answered NFS4ERR_NOTSUPP.
macro_rules! op {
    ($variant:ident, $flags:expr, $handler:path) => {
        OpEntry {
            op: OpNum::$variant,
            flags: $flags,
            handler: Some(|c, op| match op {
                NfsArgop4::$variant(args) => NfsResop4::$variant(OpOutcome::into_res($handler(c, args))),
                // The loop looks the entry up by the operation's number.
                other => NfsResop4::failed(other.opnum(), Nfsstat4::Serverfault),
            }),
        }
    };
    ($variant:ident, $flags:expr) => {
        OpEntry { op: OpNum::$variant, flags: $flags, handler: None }
    };
}

/// The number of the first operation (ACCESS); the table has every number
/// from it to the last (CLONE) in order.
const FIRST_OPNUM: u32 = 3;

struct Table<S: Store>(std::marker::PhantomData<S>);

impl<S: Store> Table<S> {
    /// Every operation of NFSv4.0 to 4.2 by number. The 4.0-only ones are
    /// answered NFS4ERR_NOTSUPP before the table is read (RFC 8881
    /// section 17). Of the 4.2 operations, SEEK, ALLOCATE, DEALLOCATE and
    /// COPY are served (`v42.rs` says why not the others).
    #[rustfmt::skip]
    const OPS: &'static [OpEntry<S>] = &[
        op!(Access, FH, attr::access),
        op!(Close, FH, open::close),
        op!(Commit, FH, io::commit),
        op!(Create, FH, dir::create),
        op!(Delegpurge, NONE),
        op!(Delegreturn, FH, open::delegreturn),
        op!(Getattr, FH, attr::getattr),
        op!(Getfh, FH, fh::getfh),
        op!(Link, FH, dir::link),
        op!(Lock, FH, lock::lock),
        op!(Lockt, FH, lock::lockt),
        op!(Locku, FH, lock::locku),
        op!(Lookup, FH_OWN_SEC, dir::lookup),
        op!(Lookupp, FH_OWN_SEC, dir::lookupp),
        op!(Nverify, FH, attr::nverify),
        op!(Open, FH_WRONGSEC, open::open),
        op!(Openattr, FH),
        op!(OpenConfirm, NONE),
        op!(OpenDowngrade, FH, open::open_downgrade),
        op!(Putfh, PUTFH, fh::putfh),
        op!(Putpubfh, PUTFH, fh::putpubfh),
        op!(Putrootfh, PUTFH, fh::putrootfh),
        op!(Read, FH, io::read),
        op!(Readdir, FH, dir::readdir),
        op!(Readlink, FH, attr::readlink),
        op!(Remove, FH, dir::remove),
        op!(Rename, FH, dir::rename),
        op!(Renew, NONE),
        op!(Restorefh, PUTFH, fh::restorefh),
        op!(Savefh, FH_OWN_SEC, fh::savefh),
        op!(Secinfo, FH_OWN_SEC, session::secinfo),
        op!(Setattr, FH, attr::setattr),
        op!(Setclientid, NONE),
        op!(SetclientidConfirm, NONE),
        op!(Verify, FH, attr::verify),
        op!(Write, FH, io::write),
        op!(ReleaseLockowner, NONE),
        op!(BackchannelCtl, NONE, session::backchannel_ctl),
        op!(BindConnToSession, FIRST, session::bind_conn_to_session),
        op!(ExchangeId, FIRST, session::exchange_id),
        op!(CreateSession, FIRST, session::create_session),
        op!(DestroySession, FIRST, session::destroy_session),
        op!(FreeStateid, NONE, session::free_stateid),
        op!(GetDirDelegation, FH),
        op!(Getdeviceinfo, NONE),
        op!(Getdevicelist, FH),
        op!(Layoutcommit, FH),
        op!(Layoutget, FH),
        op!(Layoutreturn, FH),
        op!(SecinfoNoName, FH_OWN_SEC, session::secinfo_no_name),
        op!(Sequence, FIRST),
        op!(SetSsv, NONE),
        op!(TestStateid, NONE, session::test_stateid),
        op!(WantDelegation, NONE),
        op!(DestroyClientid, FIRST, session::destroy_clientid),
        op!(ReclaimComplete, NONE, session::reclaim_complete),
        op!(Allocate, FH, v42::allocate),
        op!(Copy, FH, v42::copy),
        op!(CopyNotify, FH),
        op!(Deallocate, FH, v42::deallocate),
        op!(IoAdvise, FH),
        op!(Layouterror, FH),
        op!(Layoutstats, FH),
        op!(OffloadCancel, FH),
        op!(OffloadStatus, FH),
        op!(ReadPlus, FH, v42::read_plus),
        op!(Seek, FH, v42::seek),
        op!(WriteSame, FH),
        op!(Clone, FH),
    ];
}

/// The table's entry for `op` (none for ILLEGAL).
pub(crate) fn entry<S: Store>(op: OpNum) -> Option<&'static OpEntry<S>> {
    let e = Table::<S>::OPS.get((op as u32).checked_sub(FIRST_OPNUM)? as usize)?;
    debug_assert_eq!(e.op, op, "the operation table is in number order");
    Some(e)
}

/// The attributes served, for tests.
#[cfg(test)]
pub(crate) fn attr_supported_bits() -> &'static [u32] {
    attr::SUPPORTED
}

#[cfg(test)]
pub(crate) fn attr_supported() -> keel_nfs4_proto::Bitmap4 {
    attr::supported()
}

/// Each operation's number and name (`keel stat` counts operations by
/// them), ILLEGAL's last.
pub fn operation_names() -> Vec<(u32, &'static str)> {
    OpNum::ALL.iter().map(|op| (*op as u32, op.name())).collect()
}

#[cfg(test)]
mod tests {
    use keel_store::sim::SimStore;

    use super::*;

    #[test]
    fn the_table_has_every_operation_in_number_order() {
        let ops = Table::<SimStore>::OPS;
        let expected: Vec<OpNum> = OpNum::ALL.iter().copied().filter(|op| *op != OpNum::Illegal).collect();
        assert_eq!(ops.iter().map(|e| e.op).collect::<Vec<_>>(), expected);
        for op in expected {
            assert_eq!(entry::<SimStore>(op).map(|e| e.op), Some(op));
        }
        assert!(entry::<SimStore>(OpNum::Illegal).is_none());
    }

    #[test]
    fn only_the_session_operations_may_come_first() {
        let first: Vec<OpNum> =
            Table::<SimStore>::OPS.iter().filter(|e| e.flags.contains(FIRST)).map(|e| e.op).collect();
        use OpNum::*;
        assert_eq!(
            first,
            vec![BindConnToSession, ExchangeId, CreateSession, DestroySession, Sequence, DestroyClientid]
        );
    }
}

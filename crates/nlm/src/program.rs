//! The NLM v4 and NSM v1 programs: the procedure tables, decoding and
//! encoding around the lock manager.

use std::sync::Arc;

use keel_nlm_proto::nlm4::{
    NLM_PROGRAM, NLM_V4, Nlm4Cancargs, Nlm4Lockargs, Nlm4Notify, Nlm4Proc, Nlm4Res, Nlm4Shareargs, Nlm4Shareres,
    Nlm4Stats, Nlm4Testargs, Nlm4Testres, Nlm4Unlockargs,
};
use keel_nlm_proto::nsm::{SM_PROGRAM, SM_V1, SmName, SmRes, SmStatRes, StatChge};
use keel_rpc::CacheClass::Uncached;
use keel_rpc::{
    AcceptError, Call, CallContext, Handled, Handlers, Procedure, ProcedureTable, ReplyBytesMax, TabledProgram,
};
use keel_store::Store;
use keel_xdr::{Decode, Decoder, Encode, Encoder};

use crate::manager::{Ctx, LockManager, Outbound};

pub struct NlmProgram<S: Store> {
    lm: Arc<LockManager<S>>,
}

impl<S: Store> NlmProgram<S> {
    pub fn new(lm: Arc<LockManager<S>>) -> Self {
        NlmProgram { lm }
    }

    /// A `_MSG` call's result goes back as a call of its `_RES` procedure.
    fn answer_later(&self, ctx: &CallContext, res: Nlm4Proc, result: &dyn Encode) {
        let mut enc = Encoder::new();
        result.encode(&mut enc);
        let call =
            Outbound::Result { to: ctx.peer.ip(), from: ctx.local.ip(), proc_: res as u32, body: enc.into_bytes() };
        self.lm.send_one(call);
    }
}

fn args<A: Decode>(dec: &mut Decoder) -> Result<A, AcceptError> {
    Ok(A::decode(dec)?)
}

/// The lock manager's view of a call.
fn lm_ctx<'a>(ctx: &'a CallContext) -> Ctx<'a> {
    Ctx { peer: ctx.peer, local: ctx.local, cred: ctx.cred }
}

/// The handler of a procedure Keel does not serve. A closure: rustc 1.95
/// fails with an internal error on a generic function item made a
/// `Handler` in a table constant.
macro_rules! not_served {
    () => {
        |_, _, _| Err(AcceptError::ProcUnavail)
    };
}

type NlmCall<'a, S> = Call<'a, NlmProgram<S>>;

fn test<S: Store>(c: &NlmCall<S>, dec: &mut Decoder) -> Result<Nlm4Testres, AcceptError> {
    let a: Nlm4Testargs = args(dec)?;
    Ok(Nlm4Testres { stat: c.program.lm.test(&lm_ctx(c.ctx), &a), cookie: a.cookie })
}

/// LOCK, or NM_LOCK (`monitor` false: the client is not monitored, and
/// the lock never blocks).
fn lock<S: Store>(c: &NlmCall<S>, dec: &mut Decoder, monitor: bool) -> Result<Nlm4Res, AcceptError> {
    let mut a: Nlm4Lockargs = args(dec)?;
    if !monitor {
        a.block = false;
    }
    Ok(Nlm4Res { stat: c.program.lm.lock(&lm_ctx(c.ctx), &a, monitor), cookie: a.cookie })
}

fn cancel<S: Store>(c: &NlmCall<S>, dec: &mut Decoder) -> Result<Nlm4Res, AcceptError> {
    let a: Nlm4Cancargs = args(dec)?;
    Ok(Nlm4Res { stat: c.program.lm.cancel(&lm_ctx(c.ctx), &a), cookie: a.cookie })
}

fn unlock<S: Store>(c: &NlmCall<S>, dec: &mut Decoder) -> Result<Nlm4Res, AcceptError> {
    let a: Nlm4Unlockargs = args(dec)?;
    Ok(Nlm4Res { stat: c.program.lm.unlock(&lm_ctx(c.ctx), &a), cookie: a.cookie })
}

/// SHARE (`take`) or UNSHARE.
fn share<S: Store>(c: &NlmCall<S>, dec: &mut Decoder, take: bool) -> Result<Nlm4Shareres, AcceptError> {
    let a: Nlm4Shareargs = args(dec)?;
    let stat = c.program.lm.share(&lm_ctx(c.ctx), &a, take);
    Ok(Nlm4Shareres { cookie: a.cookie, stat, sequence: 0 })
}

impl<S: Store> Handlers for NlmProgram<S> {
    type Call<'a> = Call<'a, Self>;
    type Status = Nlm4Stats;

    fn status_code(status: Nlm4Stats) -> u32 {
        status as u32
    }
}

impl<S: Store> TabledProgram for NlmProgram<S> {
    const PROGRAM: u32 = NLM_PROGRAM;
    /// Version 4 only: NFSv3 clients use it (versions 1 and 3 go with
    /// NFSv2's 32-bit offsets).
    const VERSION: u32 = NLM_V4;

    /// The NLM v4 procedures (X/Open XNFS, chapter 14; none from 16 to
    /// 19). A `_MSG` call answers with a call of its `_RES` procedure, not
    /// with a reply; its status is the one that call carries. GRANTED and
    /// the `_RES` procedures are a client's side of the protocol: Keel
    /// sends them, it does not serve them.
    #[rustfmt::skip]
    const PROCEDURES: ProcedureTable<Self> = ProcedureTable::new(&[
        Procedure::new(0, "NULL", Uncached, ReplyBytesMax::DEFAULT, |_, _, _| Ok(None)),
        Procedure::new(1, "TEST", Uncached, ReplyBytesMax::DEFAULT, |c, dec, reply| {
            let res = test(c, dec)?;
            reply.put(&res);
            Ok(Some(res.stat.status()))
        }),
        Procedure::new(2, "LOCK", Uncached, ReplyBytesMax::DEFAULT, |c, dec, reply| {
            let res = lock(c, dec, true)?;
            reply.put(&res);
            Ok(Some(res.stat))
        }),
        Procedure::new(3, "CANCEL", Uncached, ReplyBytesMax::DEFAULT, |c, dec, reply| {
            let res = cancel(c, dec)?;
            reply.put(&res);
            Ok(Some(res.stat))
        }),
        Procedure::new(4, "UNLOCK", Uncached, ReplyBytesMax::DEFAULT, |c, dec, reply| {
            let res = unlock(c, dec)?;
            reply.put(&res);
            Ok(Some(res.stat))
        }),
        Procedure::new(5, "GRANTED", Uncached, ReplyBytesMax::DEFAULT, not_served!()),
        Procedure::new(6, "TEST_MSG", Uncached, ReplyBytesMax::DEFAULT, |c, dec, _| {
            let res = test(c, dec)?;
            c.program.answer_later(c.ctx, Nlm4Proc::TestRes, &res);
            Ok(Some(res.stat.status()))
        }).without_reply(),
        Procedure::new(7, "LOCK_MSG", Uncached, ReplyBytesMax::DEFAULT, |c, dec, _| {
            let res = lock(c, dec, true)?;
            c.program.answer_later(c.ctx, Nlm4Proc::LockRes, &res);
            Ok(Some(res.stat))
        }).without_reply(),
        Procedure::new(8, "CANCEL_MSG", Uncached, ReplyBytesMax::DEFAULT, |c, dec, _| {
            let res = cancel(c, dec)?;
            c.program.answer_later(c.ctx, Nlm4Proc::CancelRes, &res);
            Ok(Some(res.stat))
        }).without_reply(),
        Procedure::new(9, "UNLOCK_MSG", Uncached, ReplyBytesMax::DEFAULT, |c, dec, _| {
            let res = unlock(c, dec)?;
            c.program.answer_later(c.ctx, Nlm4Proc::UnlockRes, &res);
            Ok(Some(res.stat))
        }).without_reply(),
        Procedure::new(10, "GRANTED_MSG", Uncached, ReplyBytesMax::DEFAULT, not_served!()).without_reply(),
        Procedure::new(11, "TEST_RES", Uncached, ReplyBytesMax::DEFAULT, not_served!()).without_reply(),
        Procedure::new(12, "LOCK_RES", Uncached, ReplyBytesMax::DEFAULT, not_served!()).without_reply(),
        Procedure::new(13, "CANCEL_RES", Uncached, ReplyBytesMax::DEFAULT, not_served!()).without_reply(),
        Procedure::new(14, "UNLOCK_RES", Uncached, ReplyBytesMax::DEFAULT, not_served!()).without_reply(),
        Procedure::new(15, "GRANTED_RES", Uncached, ReplyBytesMax::DEFAULT, not_served!()).without_reply(),
        Procedure::new(20, "SHARE", Uncached, ReplyBytesMax::DEFAULT, |c, dec, reply| {
            let res = share(c, dec, true)?;
            reply.put(&res);
            Ok(Some(res.stat))
        }),
        Procedure::new(21, "UNSHARE", Uncached, ReplyBytesMax::DEFAULT, |c, dec, reply| {
            let res = share(c, dec, false)?;
            reply.put(&res);
            Ok(Some(res.stat))
        }),
        Procedure::new(22, "NM_LOCK", Uncached, ReplyBytesMax::DEFAULT, |c, dec, reply| {
            let res = lock(c, dec, false)?;
            reply.put(&res);
            Ok(Some(res.stat))
        }),
        Procedure::new(23, "FREE_ALL", Uncached, ReplyBytesMax::DEFAULT, |c, dec, _| {
            let a: Nlm4Notify = args(dec)?;
            c.program.lm.free_all(c.ctx.peer, &a);
            Ok(None)
        }),
    ]);

    fn run(&self, ctx: &CallContext, dec: &mut Decoder, reply: &mut Encoder) -> Handled<Self> {
        Self::PROCEDURES.call(&Call { program: self, ctx }, ctx, dec, reply)
    }
}

/// NSM as a server offers it to other hosts: NULL, STAT and NOTIFY. MON,
/// UNMON, UNMON_ALL and SIMU_CRASH are the private interface between a
/// host's lock manager and its own status monitor; Keel's lock manager
/// monitors its clients itself, so they are not served (PROC_UNAVAIL).
pub struct NsmProgram<S: Store> {
    lm: Arc<LockManager<S>>,
}

impl<S: Store> NsmProgram<S> {
    pub fn new(lm: Arc<LockManager<S>>) -> Self {
        NsmProgram { lm }
    }
}

impl<S: Store> Handlers for NsmProgram<S> {
    type Call<'a> = Call<'a, Self>;
    /// STAT's; the other procedures' replies carry none.
    type Status = SmRes;

    fn status_code(status: SmRes) -> u32 {
        status as u32
    }
}

impl<S: Store> TabledProgram for NsmProgram<S> {
    const PROGRAM: u32 = SM_PROGRAM;
    const VERSION: u32 = SM_V1;

    /// The NSM v1 procedures (X/Open XNFS, chapter 11).
    #[rustfmt::skip]
    const PROCEDURES: ProcedureTable<Self> = ProcedureTable::new(&[
        Procedure::new(0, "NULL", Uncached, ReplyBytesMax::DEFAULT, |_, _, _| Ok(None)),
        Procedure::new(1, "STAT", Uncached, ReplyBytesMax::DEFAULT, |c, dec, reply| {
            let _: SmName = args(dec)?;
            let res = SmStatRes { res_stat: SmRes::Succ, state: c.program.lm.nsm_state() };
            reply.put(&res);
            Ok(Some(res.res_stat))
        }),
        Procedure::new(2, "MON", Uncached, ReplyBytesMax::DEFAULT, not_served!()),
        Procedure::new(3, "UNMON", Uncached, ReplyBytesMax::DEFAULT, not_served!()),
        Procedure::new(4, "UNMON_ALL", Uncached, ReplyBytesMax::DEFAULT, not_served!()),
        Procedure::new(5, "SIMU_CRASH", Uncached, ReplyBytesMax::DEFAULT, not_served!()),
        Procedure::new(6, "NOTIFY", Uncached, ReplyBytesMax::DEFAULT, |c, dec, _| {
            let a: StatChge = args(dec)?;
            c.program.lm.host_rebooted(c.ctx.peer, &a);
            Ok(None)
        }),
    ]);

    fn run(&self, ctx: &CallContext, dec: &mut Decoder, reply: &mut Encoder) -> Handled<Self> {
        Self::PROCEDURES.call(&Call { program: self, ctx }, ctx, dec, reply)
    }
}

#[cfg(test)]
mod tests {
    use keel_store::sim::SimStore;

    use super::*;

    /// NLM4's procedures by number, as X/Open XNFS names them (after
    /// `NLM4_`); 16 to 19 do not exist.
    const NLM4_NAMES: [(u32, &str); 20] = [
        (0, "NULL"),
        (1, "TEST"),
        (2, "LOCK"),
        (3, "CANCEL"),
        (4, "UNLOCK"),
        (5, "GRANTED"),
        (6, "TEST_MSG"),
        (7, "LOCK_MSG"),
        (8, "CANCEL_MSG"),
        (9, "UNLOCK_MSG"),
        (10, "GRANTED_MSG"),
        (11, "TEST_RES"),
        (12, "LOCK_RES"),
        (13, "CANCEL_RES"),
        (14, "UNLOCK_RES"),
        (15, "GRANTED_RES"),
        (20, "SHARE"),
        (21, "UNSHARE"),
        (22, "NM_LOCK"),
        (23, "FREE_ALL"),
    ];

    #[test]
    fn every_nlm4_procedure_has_its_entry_under_its_name() {
        let table = NlmProgram::<SimStore>::PROCEDURES;
        assert_eq!(table.names(), NLM4_NAMES.to_vec());
        let numbers: Vec<u32> = Nlm4Proc::ALL.iter().map(|p| *p as u32).collect();
        assert_eq!(table.names().iter().map(|(n, _)| *n).collect::<Vec<_>>(), numbers);
        for n in 16..=19 {
            assert!(table.get(n).is_none(), "procedure {n} does not exist");
        }
    }

    #[test]
    fn only_the_asynchronous_nlm_procedures_send_no_reply_and_none_is_cached() {
        let table = NlmProgram::<SimStore>::PROCEDURES;
        for p in table.procedures() {
            let asynchronous = p.name.ends_with("_MSG") || p.name.ends_with("_RES");
            assert_eq!(p.answers, !asynchronous, "{}", p.name);
            assert_eq!(p.cache, Uncached, "{}", p.name);
        }
    }

    #[test]
    fn every_nsm_procedure_has_its_entry_under_its_name() {
        let table = NsmProgram::<SimStore>::PROCEDURES;
        let expected =
            [(0, "NULL"), (1, "STAT"), (2, "MON"), (3, "UNMON"), (4, "UNMON_ALL"), (5, "SIMU_CRASH"), (6, "NOTIFY")];
        assert_eq!(table.names(), expected.to_vec());
        assert!(table.procedures().iter().all(|p| p.answers && p.cache == Uncached));
    }
}

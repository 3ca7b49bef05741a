//! The NLM v4 and NSM v1 programs: the procedure tables, decoding and
//! encoding around the lock manager.

use std::sync::Arc;

use keel_nlm_proto::nlm4::{
    NLM_PROGRAM, NLM_V4, Nlm4Cancargs, Nlm4Lockargs, Nlm4Notify, Nlm4Proc, Nlm4Res, Nlm4Shareargs, Nlm4Shareres,
    Nlm4Testargs, Nlm4Testres, Nlm4Unlockargs,
};
use keel_nlm_proto::nsm::{SM_PROGRAM, SM_V1, SmName, SmProc, SmRes, SmStatRes, StatChge};
use keel_rpc::{AcceptError, CallContext, RpcProgram};
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

impl<S: Store> RpcProgram for NlmProgram<S> {
    fn program(&self) -> u32 {
        NLM_PROGRAM
    }

    /// Version 4 only: NFSv3 clients use it (versions 1 and 3 go with
    /// NFSv2's 32-bit offsets).
    fn versions(&self) -> (u32, u32) {
        (NLM_V4, NLM_V4)
    }

    /// The `_MSG` calls answer with a call of their own.
    fn answers(&self, _vers: u32, proc_: u32) -> bool {
        !matches!(
            Nlm4Proc::from_u32(proc_),
            Some(Nlm4Proc::TestMsg | Nlm4Proc::LockMsg | Nlm4Proc::CancelMsg | Nlm4Proc::UnlockMsg)
        )
    }

    fn call(&self, ctx: &CallContext, dec: &mut Decoder, reply: &mut Encoder) -> Result<(), AcceptError> {
        let lm = &self.lm;
        let c = Ctx { peer: ctx.peer, local: ctx.local, auth: ctx.auth };
        // GRANTED and the _RES procedures are a client's side of the
        // protocol: Keel sends them, it does not serve them.
        match Nlm4Proc::from_u32(ctx.proc_).ok_or(AcceptError::ProcUnavail)? {
            Nlm4Proc::Null => {}
            Nlm4Proc::Test => {
                let a: Nlm4Testargs = args(dec)?;
                reply.put(&Nlm4Testres { stat: lm.test(&c, &a), cookie: a.cookie });
            }
            Nlm4Proc::Lock => {
                let a: Nlm4Lockargs = args(dec)?;
                reply.put(&Nlm4Res { stat: lm.lock(&c, &a, true), cookie: a.cookie });
            }
            Nlm4Proc::NmLock => {
                let mut a: Nlm4Lockargs = args(dec)?;
                a.block = false;
                reply.put(&Nlm4Res { stat: lm.lock(&c, &a, false), cookie: a.cookie });
            }
            Nlm4Proc::Cancel => {
                let a: Nlm4Cancargs = args(dec)?;
                reply.put(&Nlm4Res { stat: lm.cancel(&c, &a), cookie: a.cookie });
            }
            Nlm4Proc::Unlock => {
                let a: Nlm4Unlockargs = args(dec)?;
                reply.put(&Nlm4Res { stat: lm.unlock(&c, &a), cookie: a.cookie });
            }
            Nlm4Proc::TestMsg => {
                let a: Nlm4Testargs = args(dec)?;
                let res = Nlm4Testres { stat: lm.test(&c, &a), cookie: a.cookie };
                self.answer_later(ctx, Nlm4Proc::TestRes, &res);
            }
            Nlm4Proc::LockMsg => {
                let a: Nlm4Lockargs = args(dec)?;
                let res = Nlm4Res { stat: lm.lock(&c, &a, true), cookie: a.cookie };
                self.answer_later(ctx, Nlm4Proc::LockRes, &res);
            }
            Nlm4Proc::CancelMsg => {
                let a: Nlm4Cancargs = args(dec)?;
                let res = Nlm4Res { stat: lm.cancel(&c, &a), cookie: a.cookie };
                self.answer_later(ctx, Nlm4Proc::CancelRes, &res);
            }
            Nlm4Proc::UnlockMsg => {
                let a: Nlm4Unlockargs = args(dec)?;
                let res = Nlm4Res { stat: lm.unlock(&c, &a), cookie: a.cookie };
                self.answer_later(ctx, Nlm4Proc::UnlockRes, &res);
            }
            Nlm4Proc::Share | Nlm4Proc::Unshare => {
                let a: Nlm4Shareargs = args(dec)?;
                let stat = lm.share(&c, &a, ctx.proc_ == Nlm4Proc::Share as u32);
                reply.put(&Nlm4Shareres { cookie: a.cookie, stat, sequence: 0 });
            }
            Nlm4Proc::FreeAll => {
                let a: Nlm4Notify = args(dec)?;
                lm.free_all(ctx.peer, &a);
            }
            Nlm4Proc::Granted
            | Nlm4Proc::GrantedMsg
            | Nlm4Proc::TestRes
            | Nlm4Proc::LockRes
            | Nlm4Proc::CancelRes
            | Nlm4Proc::UnlockRes
            | Nlm4Proc::GrantedRes => return Err(AcceptError::ProcUnavail),
        }
        Ok(())
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

impl<S: Store> RpcProgram for NsmProgram<S> {
    fn program(&self) -> u32 {
        SM_PROGRAM
    }

    fn versions(&self) -> (u32, u32) {
        (SM_V1, SM_V1)
    }

    fn call(&self, ctx: &CallContext, dec: &mut Decoder, reply: &mut Encoder) -> Result<(), AcceptError> {
        match SmProc::from_u32(ctx.proc_).ok_or(AcceptError::ProcUnavail)? {
            SmProc::Null => {}
            SmProc::Stat => {
                let _: SmName = args(dec)?;
                reply.put(&SmStatRes { res_stat: SmRes::Succ, state: self.lm.nsm_state() });
            }
            SmProc::Notify => {
                let a: StatChge = args(dec)?;
                self.lm.host_rebooted(ctx.peer, &a);
            }
            SmProc::Mon | SmProc::Unmon | SmProc::UnmonAll | SmProc::SimuCrash => {
                return Err(AcceptError::ProcUnavail);
            }
        }
        Ok(())
    }
}

//! A program's procedures as one declarative table (knfsd's arrays of
//! `struct svc_procedure`, such as `nfsd_procedures3`): for each procedure
//! its number, its name, whether its replies go into the duplicate reply
//! cache, the most bytes of results it can produce, whether it answers at
//! all, and its handler, which decodes the arguments, runs and encodes the
//! results, and returns the protocol status its reply carries, typed.
//!
//! An [`RpcProgram`](crate::RpcProgram) then answers every question the
//! dispatcher asks by looking the procedure up in its table, and the
//! statistics take the procedures' names and the replies' statuses from
//! it. The table is data, built at compile time (its order is checked
//! then), so a call costs a table index and an indirect call: no
//! allocation, and the handlers stay generic over the program's types.
//!
//! The same table serves an NFSv4 COMPOUND's operations: numbers need not
//! start at zero or be dense (NLM has none from 16 to 19), and what a
//! handler is given for one call is the program's to choose
//! ([`Handlers::Call`]), such as a COMPOUND's current filehandle.

use bytes::Bytes;
use keel_xdr::{Decoder, Encoder, XdrError};

use crate::dispatch::{AcceptError, CallContext, REPLY_RESULTS_BYTES_DEFAULT, RpcProgram};

/// What the handlers of one table are given and what they answer.
pub trait Handlers: Sized + 'static {
    /// What a handler is given for one call besides its arguments: for
    /// NFSv3 the call's request (the program, the call's context and the
    /// identity assumed once for the call); [`Call`] for a program whose
    /// handlers need nothing more than the program and the context.
    type Call<'a>;
    /// The status a reply carries (`nfsstat3`, `mountstat3`, `nlm4_stats`,
    /// `nfsstat4`), as the handler returns it.
    type Status: Copy + PartialEq + std::fmt::Debug;

    /// The status as a number, for the statistics ([`crate::CallReport`]).
    fn status_code(status: Self::Status) -> u32;
}

/// The program and the call's context: what a handler of a program with
/// no per-call state of its own is given.
pub struct Call<'a, P> {
    pub program: &'a P,
    pub ctx: &'a CallContext<'a>,
}

/// What a handler did: the status its reply carries (none for a procedure
/// whose reply carries no status, such as NULL), or why the call gets an
/// RPC error instead of results (GARBAGE_ARGS for arguments that do not
/// decode).
pub type Handled<H> = Result<Option<<H as Handlers>::Status>, AcceptError>;

/// Decodes the arguments, runs the procedure and encodes its results after
/// the reply header already in the encoder (on error the reply is
/// discarded).
pub type Handler<H> = fn(&<H as Handlers>::Call<'_>, &mut Decoder, &mut Encoder) -> Handled<H>;

/// Whether a procedure's replies go into the duplicate reply cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheClass {
    /// Idempotent: a retransmission runs again (knfsd's RC_NOCACHE).
    Uncached,
    /// Not idempotent: a retransmission gets the first reply (knfsd's
    /// RC_REPLBUFF).
    Cached,
}

/// The most bytes of results a call can produce, known before it runs
/// (knfsd's `pc_xdrressize`). The transport reserves this much of its
/// memory budget for the reply, so it is never less than what the handler
/// writes.
pub enum ReplyBytesMax<H> {
    /// At most this many, whatever the call asks.
    Fixed(usize),
    /// Grows with what the call asks for (READ's count, READDIR's) or
    /// with what the program holds (MOUNT's export list): computed from
    /// the program and the raw arguments. Arguments that do not decode get
    /// [`REPLY_RESULTS_BYTES_DEFAULT`] (the call answers GARBAGE_ARGS).
    Computed(fn(&H, &mut Decoder) -> Result<usize, XdrError>),
}

/// One procedure (or COMPOUND operation) of a table.
pub struct Procedure<H: Handlers> {
    pub number: u32,
    /// The specification's name without its prefix, e.g. `"WRITE"` for
    /// NFSPROC3_WRITE, `"TEST_MSG"` for NLM4_TEST_MSG.
    pub name: &'static str,
    pub cache: CacheClass,
    pub reply_bytes_max: ReplyBytesMax<H>,
    /// False for the asynchronous procedures (NLM's `_MSG` and `_RES`):
    /// they run and send nothing back; their results, if any, travel in a
    /// call of their own. A call refused before or by its handler
    /// (PROC_UNAVAIL, GARBAGE_ARGS, ...) is answered all the same.
    pub answers: bool,
    pub handler: Handler<H>,
}

impl<H: Handlers> Procedure<H> {
    /// A procedure that answers; see [`Procedure::without_reply`].
    pub const fn new(
        number: u32,
        name: &'static str,
        cache: CacheClass,
        reply_bytes_max: ReplyBytesMax<H>,
        handler: Handler<H>,
    ) -> Self {
        Procedure { number, name, cache, reply_bytes_max, answers: true, handler }
    }

    /// The same procedure, sending no reply (NLM's `_MSG` and `_RES`).
    pub const fn without_reply(self) -> Self {
        Procedure { answers: false, ..self }
    }
}

impl<H: Handlers> ReplyBytesMax<H> {
    /// Most procedures' bound: attributes, a handle, wcc data.
    pub const DEFAULT: Self = ReplyBytesMax::Fixed(REPLY_RESULTS_BYTES_DEFAULT);
}

/// A program's (or a COMPOUND's) procedures in increasing number order,
/// each number once; numbers may start anywhere and leave gaps.
pub struct ProcedureTable<H: Handlers> {
    procedures: &'static [Procedure<H>],
}

impl<H: Handlers> ProcedureTable<H> {
    /// Panics (at compile time, for a table that is a constant) unless
    /// `procedures` is non-empty and in strictly increasing number order.
    pub const fn new(procedures: &'static [Procedure<H>]) -> Self {
        assert!(!procedures.is_empty(), "a procedure table with no procedure");
        let mut i = 1;
        while i < procedures.len() {
            assert!(procedures[i - 1].number < procedures[i].number, "procedures out of number order, or twice");
            i += 1;
        }
        ProcedureTable { procedures }
    }

    /// The procedure with this number: one index when the numbers from the
    /// first up to it have no gap, a binary search otherwise.
    pub fn get(&self, number: u32) -> Option<&'static Procedure<H>> {
        let all = self.procedures;
        let first = all[0].number;
        match all.get(number.wrapping_sub(first) as usize) {
            Some(p) if p.number == number => Some(p),
            _ => all.binary_search_by_key(&number, |p| p.number).ok().map(|i| &all[i]),
        }
    }

    /// Every procedure, in number order.
    pub fn procedures(&self) -> &'static [Procedure<H>] {
        self.procedures
    }

    /// Each procedure's number and name, in number order (the statistics
    /// count calls by them).
    pub fn names(&self) -> Vec<(u32, &'static str)> {
        self.procedures.iter().map(|p| (p.number, p.name)).collect()
    }

    /// [`RpcProgram::is_cached`](crate::RpcProgram::is_cached): an unknown
    /// procedure is not.
    pub fn is_cached(&self, number: u32) -> bool {
        self.get(number).is_some_and(|p| p.cache == CacheClass::Cached)
    }

    /// [`RpcProgram::answers`](crate::RpcProgram::answers): an unknown
    /// procedure is answered (PROC_UNAVAIL).
    pub fn answers(&self, number: u32) -> bool {
        self.get(number).is_none_or(|p| p.answers)
    }

    /// [`RpcProgram::reply_bytes_max`](crate::RpcProgram::reply_bytes_max)
    /// of `handlers`' procedure `number`, from its raw arguments.
    pub fn reply_bytes_max(&self, handlers: &H, number: u32, args: Bytes) -> usize {
        match self.get(number).map(|p| &p.reply_bytes_max) {
            Some(ReplyBytesMax::Fixed(n)) => *n,
            Some(ReplyBytesMax::Computed(f)) => {
                f(handlers, &mut Decoder::new(args)).unwrap_or(REPLY_RESULTS_BYTES_DEFAULT)
            }
            // Answered PROC_UNAVAIL.
            None => 0,
        }
    }

    /// Runs the procedure `ctx` names on `call`: PROC_UNAVAIL if the table
    /// has none. The status the handler returns is reported for the
    /// statistics ([`CallContext::report`]).
    pub fn call(&self, call: &H::Call<'_>, ctx: &CallContext, args: &mut Decoder, reply: &mut Encoder) -> Handled<H> {
        let Some(procedure) = self.get(ctx.proc_) else { return Err(AcceptError::ProcUnavail) };
        tracing::trace!(peer = %ctx.peer, xid = ctx.xid, "{}", procedure.name);
        let status = (procedure.handler)(call, args, reply)?;
        if let Some(status) = status {
            ctx.report.set_status(H::status_code(status));
        }
        Ok(status)
    }
}

/// A program that serves one version from one [`ProcedureTable`]: its
/// [`RpcProgram`] follows from the table, so each of its procedures is
/// described in one place. NFSv3, MOUNT, NLM, NSM and the portmapper are.
pub trait TabledProgram: Handlers + Send + Sync {
    const PROGRAM: u32;
    const VERSION: u32;
    const PROCEDURES: ProcedureTable<Self>;

    /// Runs the call on [`Self::PROCEDURES`] with what the program's
    /// handlers are given for it ([`Handlers::Call`]).
    fn run(&self, ctx: &CallContext, args: &mut Decoder, reply: &mut Encoder) -> Handled<Self>;
}

impl<P: TabledProgram> RpcProgram for P {
    fn program(&self) -> u32 {
        P::PROGRAM
    }

    fn versions(&self) -> (u32, u32) {
        (P::VERSION, P::VERSION)
    }

    fn is_cached(&self, _vers: u32, proc_: u32) -> bool {
        P::PROCEDURES.is_cached(proc_)
    }

    fn answers(&self, _vers: u32, proc_: u32) -> bool {
        P::PROCEDURES.answers(proc_)
    }

    fn reply_bytes_max(&self, _vers: u32, proc_: u32, args: Bytes) -> usize {
        P::PROCEDURES.reply_bytes_max(self, proc_, args)
    }

    fn call(&self, ctx: &CallContext, args: &mut Decoder, reply: &mut Encoder) -> Result<(), AcceptError> {
        self.run(ctx, args, reply)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::Credential;

    /// Procedures 3, 4, 5 and 9: status 0 from 3, 7 from 4; 5 wants a u32
    /// and echoes it; 9 answers nothing.
    struct Gapped;

    impl Handlers for Gapped {
        type Call<'a> = Call<'a, Gapped>;
        type Status = u8;
        fn status_code(status: u8) -> u32 {
            u32::from(status) + 100
        }
    }

    fn size_of_echo(_: &Gapped, args: &mut Decoder) -> Result<usize, XdrError> {
        Ok(args.u32()? as usize)
    }

    const GAPPED: ProcedureTable<Gapped> = ProcedureTable::new(&[
        Procedure::new(3, "THREE", CacheClass::Uncached, ReplyBytesMax::DEFAULT, |_, _, _| Ok(Some(0))),
        Procedure::new(4, "FOUR", CacheClass::Cached, ReplyBytesMax::Fixed(8), |_, _, _| Ok(Some(7))),
        Procedure::new(5, "ECHO", CacheClass::Uncached, ReplyBytesMax::Computed(size_of_echo), |_, args, reply| {
            reply.u32(args.u32()?);
            Ok(None)
        }),
        Procedure::new(9, "NINE", CacheClass::Uncached, ReplyBytesMax::DEFAULT, |_, _, _| Ok(None)).without_reply(),
    ]);

    fn run(proc_: u32, args: &[u8]) -> (Handled<Gapped>, Option<u32>) {
        let peer: SocketAddr = "192.0.2.1:700".parse().unwrap();
        let cred = Credential::anonymous();
        let ctx = CallContext {
            xid: 1,
            vers: 1,
            proc_,
            cred: &cred,
            peer,
            local: peer,
            connection: None,
            report: Default::default(),
        };
        let call = Call { program: &Gapped, ctx: &ctx };
        let mut args = Decoder::new(Bytes::copy_from_slice(args));
        let handled = GAPPED.call(&call, &ctx, &mut args, &mut Encoder::new());
        (handled, ctx.report.status())
    }

    #[test]
    fn procedures_are_found_by_number_across_gaps() {
        for n in [3, 4, 5, 9] {
            assert_eq!(GAPPED.get(n).map(|p| p.number), Some(n));
        }
        for n in [0, 2, 6, 8, 10, u32::MAX] {
            assert!(GAPPED.get(n).is_none(), "{n}");
        }
        assert_eq!(GAPPED.names(), vec![(3, "THREE"), (4, "FOUR"), (5, "ECHO"), (9, "NINE")]);
    }

    #[test]
    fn the_dispatcher_s_questions_are_answered_from_the_table() {
        assert!(GAPPED.is_cached(4) && !GAPPED.is_cached(3) && !GAPPED.is_cached(7));
        assert!(!GAPPED.answers(9) && GAPPED.answers(3));
        assert!(GAPPED.answers(7), "an unknown procedure is answered PROC_UNAVAIL");
        assert_eq!(GAPPED.reply_bytes_max(&Gapped, 3, Bytes::new()), REPLY_RESULTS_BYTES_DEFAULT);
        assert_eq!(GAPPED.reply_bytes_max(&Gapped, 4, Bytes::new()), 8);
        assert_eq!(GAPPED.reply_bytes_max(&Gapped, 5, Bytes::from_static(&[0, 0, 1, 0])), 256);
        assert_eq!(GAPPED.reply_bytes_max(&Gapped, 5, Bytes::new()), REPLY_RESULTS_BYTES_DEFAULT, "garbage args");
        assert_eq!(GAPPED.reply_bytes_max(&Gapped, 7, Bytes::new()), 0);
    }

    #[test]
    fn the_typed_status_is_returned_and_reported() {
        assert_eq!(run(3, &[]), (Ok(Some(0)), Some(100)));
        assert_eq!(run(4, &[]), (Ok(Some(7)), Some(107)));
        assert_eq!(run(5, &[0, 0, 0, 1]), (Ok(None), None));
        assert_eq!(run(5, &[0]), (Err(AcceptError::GarbageArgs), None));
        assert_eq!(run(6, &[]), (Err(AcceptError::ProcUnavail), None));
    }

    #[test]
    #[should_panic(expected = "out of number order")]
    fn a_table_out_of_order_is_refused() {
        let unordered: &'static [Procedure<Gapped>] = Box::leak(Box::new([
            Procedure::new(4, "FOUR", CacheClass::Uncached, ReplyBytesMax::DEFAULT, |_, _, _| Ok(None)),
            Procedure::new(4, "AGAIN", CacheClass::Uncached, ReplyBytesMax::DEFAULT, |_, _, _| Ok(None)),
        ]));
        let _ = ProcedureTable::new(unordered);
    }

    impl TabledProgram for Gapped {
        const PROGRAM: u32 = 400_123;
        const VERSION: u32 = 2;
        const PROCEDURES: ProcedureTable<Gapped> = GAPPED;

        fn run(&self, ctx: &CallContext, args: &mut Decoder, reply: &mut Encoder) -> Handled<Self> {
            GAPPED.call(&Call { program: self, ctx }, ctx, args, reply)
        }
    }

    #[test]
    fn a_tabled_program_is_served_as_its_table_says() {
        let program: &dyn RpcProgram = &Gapped;
        assert_eq!((program.program(), program.versions()), (400_123, (2, 2)));
        assert_eq!(program.portmap_versions(), vec![2]);
        assert!(program.is_cached(2, 4) && !program.is_cached(2, 3));
        assert!(!program.answers(2, 9) && program.answers(2, 7));
        assert_eq!(program.reply_bytes_max(2, 5, Bytes::from_static(&[0, 0, 0, 12])), 12);
        assert_eq!(program.reply_bytes_max(2, 6, Bytes::new()), 0, "PROC_UNAVAIL carries no results");
    }
}

//! What counting adds to one call: a program that does nothing, called
//! bare and through [`keel_stats::Counted`] (procedure, latency histogram,
//! export, status, bytes, client table, running-call slot), on one thread
//! and on several at once (they share the export table and, from one
//! client, one shard of the client table). The difference is the counting
//! cost per call; compare it with what a call costs the server (tens of
//! microseconds of CPU for a NULL or GETATTR, see docs/benchmarks.md).
//!
//! ```sh
//! cargo run --release -p keel-stats --example count_cost
//! ```

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use keel_rpc::{AcceptError, CallContext, Credential, RpcProgram};
use keel_stats::{CallStats, ProgramSpec};
use keel_xdr::{Decoder, Encoder};

const CALLS: u32 = 2_000_000;
const ROUNDS: usize = 5;

/// Reports what the NFS program reports for a GETATTR: export and status.
struct Nothing;

impl RpcProgram for Nothing {
    fn program(&self) -> u32 {
        100003
    }
    fn versions(&self) -> (u32, u32) {
        (3, 3)
    }
    fn call(&self, ctx: &CallContext, _args: &mut Decoder, _reply: &mut Encoder) -> Result<(), AcceptError> {
        ctx.report.set_export(1);
        ctx.report.set_status(0);
        black_box(ctx.xid);
        Ok(())
    }
}

fn spec() -> ProgramSpec {
    ProgramSpec {
        program: 100003,
        version: 3,
        name: "nfs",
        procedures: vec![(0, "NULL"), (1, "GETATTR")],
        statuses: &[(0, "NFS3_OK"), (2, "NFS3ERR_NOENT")],
    }
}

/// Nanoseconds per call on each of `threads` threads calling at once.
fn per_call_ns(program: &Arc<dyn RpcProgram>, threads: usize) -> f64 {
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let program = program.clone();
            std::thread::spawn(move || {
                let peer: SocketAddr = "192.0.2.1:800".parse().unwrap();
                let cred = Credential::anonymous();
                let args = Bytes::new();
                let mut reply = Encoder::new();
                for xid in 0..CALLS {
                    let ctx = CallContext {
                        xid,
                        vers: 3,
                        proc_: 1,
                        cred: &cred,
                        peer,
                        local: peer,
                        connection: None,
                        report: Default::default(),
                    };
                    let _ = program.call(&ctx, &mut Decoder::new(args.clone()), &mut reply);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    started.elapsed().as_nanos() as f64 / f64::from(CALLS)
}

fn main() {
    let stats = CallStats::new(&[spec()]);
    stats.set_exports(&[1]);
    let bare: Arc<dyn RpcProgram> = Arc::new(Nothing);
    let counted = stats.counted(Arc::new(Nothing));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for threads in [1, cores] {
        // The least of a few rounds: the machine's other load only adds.
        let best = |p: &Arc<dyn RpcProgram>| (0..ROUNDS).map(|_| per_call_ns(p, threads)).fold(f64::MAX, f64::min);
        let (b, c) = (best(&bare), best(&counted));
        println!(
            "{threads} thread(s): bare {b:.1} ns/call, counted {c:.1} ns/call: counting costs {:.1} ns per call",
            c - b
        );
    }
    let s = stats.snapshot();
    assert_eq!(s.programs[0].procedures[1].calls, u64::from(CALLS) * (ROUNDS * (1 + cores)) as u64);
}

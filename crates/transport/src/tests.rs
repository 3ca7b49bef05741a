//! The transport on a real socket: calls sent back on a connection.

use std::io::{Read, Write};
use std::net::TcpStream;

use bytes::Bytes;
use keel_rpc::msg::{AcceptStat, CallHeader, OpaqueAuth, ReplyStat, decode_reply_header};
use keel_rpc::record::record_mark;
use keel_rpc::{AcceptError, BackchannelError, CallConnection, CallContext, ReplyCache, ReplyRouter, RpcProgram};
use keel_xdr::{Decoder, Encoder};

use super::conn::{BACKCHANNEL_CALL_BYTES_MAX, BACKCHANNEL_CALLS_QUEUED_MAX};
use super::*;

const PROGRAM: u32 = 0x4000_0001;
/// The xid of the calls the program sends back.
const CALLBACK_XID: u32 = 77;
/// Calls sent back by procedure 2 at most, whatever the socket takes.
const CALLBACKS_MAX: u32 = 100_000;

/// Procedure 1 keeps its call's connection and sends a call back on it
/// before it answers; 2 sends calls back until one is refused and answers
/// how many went and why the next did not ([`refusal`]); 3 waits for
/// [`CallsBack::replied`] (at most [`REPLY_WAIT`]) and answers whether it
/// came; 4 panics.
#[derive(Default)]
struct CallsBack {
    kept: Mutex<Option<CallConnection>>,
    /// Set by the waiter of a reply the test expects.
    replied: (Mutex<bool>, std::sync::Condvar),
}

/// How long procedure 3 waits for a reply.
const REPLY_WAIT: Duration = Duration::from_secs(5);

fn callback(body_bytes: usize) -> Bytes {
    let mut enc = Encoder::new();
    CallHeader {
        xid: CALLBACK_XID,
        rpc_version: 2,
        prog: PROGRAM,
        vers: 1,
        proc_: 0,
        cred: OpaqueAuth::default(),
        verf: OpaqueAuth::default(),
    }
    .encode(&mut enc);
    enc.raw(&vec![0; body_bytes]);
    enc.into_bytes()
}

impl RpcProgram for CallsBack {
    fn program(&self) -> u32 {
        PROGRAM
    }
    fn versions(&self) -> (u32, u32) {
        (1, 1)
    }
    fn call(&self, ctx: &CallContext, _args: &mut Decoder, reply: &mut Encoder) -> Result<(), AcceptError> {
        let connection = ctx.connection.ok_or(AcceptError::SystemErr)?;
        match ctx.proc_ {
            1 => {
                connection.backchannel().send_call(callback(0)).map_err(|_| AcceptError::SystemErr)?;
                *self.kept.lock().unwrap() = Some(connection.clone());
                Ok(())
            }
            2 => {
                let too_large = callback(BACKCHANNEL_CALL_BYTES_MAX);
                let refused = connection.backchannel().send_call(too_large);
                if !matches!(refused, Err(BackchannelError::TooLarge { .. })) {
                    return Err(AcceptError::SystemErr);
                }
                for sent in 0..CALLBACKS_MAX {
                    if let Err(e) = connection.backchannel().send_call(callback(60 << 10)) {
                        reply.u32(sent);
                        reply.u32(refusal(e));
                        return Ok(());
                    }
                }
                Err(AcceptError::SystemErr)
            }
            3 => {
                let (replied, came) = &self.replied;
                let replied = replied.lock().unwrap();
                let (replied, _) = came.wait_timeout_while(replied, REPLY_WAIT, |r| !*r).unwrap();
                reply.u32(u32::from(*replied));
                Ok(())
            }
            4 => panic!("procedure 4 panics"),
            _ => Err(AcceptError::ProcUnavail),
        }
    }
}

const FULL: u32 = 1;
const OVER_BUDGET: u32 = 2;

fn refusal(e: BackchannelError) -> u32 {
    match e {
        BackchannelError::Full { queued } if queued == BACKCHANNEL_CALLS_QUEUED_MAX => FULL,
        BackchannelError::OverBudget => OVER_BUDGET,
        _ => 0,
    }
}

fn start(program: Arc<CallsBack>, connection_bytes_max: usize) -> (Transport, SocketAddr) {
    start_with(program, connection_bytes_max, 4, Arc::default())
}

fn start_with(
    program: Arc<CallsBack>,
    connection_bytes_max: usize,
    requests_per_connection: usize,
    router: Arc<ReplyRouter>,
) -> (Transport, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let dispatcher = Dispatcher::new(vec![program], ReplyCache::new(16, 1 << 20)).unwrap().with_reply_router(router);
    let transport = Transport::start(TransportConfig {
        workers: 2,
        poll_spin: Duration::ZERO,
        requests_per_connection,
        dispatcher: Arc::new(dispatcher),
        budget: Budget::new(64 << 20, connection_bytes_max),
        conns: Connections::new(16, Duration::from_secs(60), Duration::from_secs(60)),
        admits: Box::new(|_| true),
        listeners: vec![(listener, Admit::Anyone)],
        datagrams: Vec::new(),
        reset_after_panic: count_reset,
    })
    .unwrap();
    (transport, addr)
}

/// The resets the test servers' workers made after a panic.
static WORKER_RESETS: AtomicUsize = AtomicUsize::new(0);

fn count_reset() -> io::Result<()> {
    if std::thread::current().name().is_some_and(|n| n.starts_with("keel-worker-")) {
        WORKER_RESETS.fetch_add(1, Ordering::SeqCst);
    }
    Ok(())
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream
}

fn send_call(stream: &mut TcpStream, xid: u32, proc_: u32) {
    let mut enc = Encoder::new();
    let cred = OpaqueAuth::default();
    CallHeader { xid, rpc_version: 2, prog: PROGRAM, vers: 1, proc_, cred, verf: OpaqueAuth::default() }
        .encode(&mut enc);
    let call = enc.into_bytes();
    stream.write_all(&record_mark(call.len())).unwrap();
    stream.write_all(&call).unwrap();
}

fn read_record(stream: &mut TcpStream) -> Bytes {
    let mut mark = [0; 4];
    stream.read_exact(&mut mark).unwrap();
    let len = u32::from_be_bytes(mark) & 0x7fff_ffff;
    let mut record = vec![0; len as usize];
    stream.read_exact(&mut record).unwrap();
    Bytes::from(record)
}

/// The xid of a record, and whether it is a call sent back.
fn callback_xid(record: Bytes) -> Option<u32> {
    let header = CallHeader::decode(&mut Decoder::new(record)).ok()?;
    Some(header.xid).filter(|_| header.prog == PROGRAM)
}

#[test]
fn a_call_sent_back_reaches_the_client_on_its_connection_until_it_closes() {
    let program = Arc::new(CallsBack::default());
    let (transport, addr) = start(program.clone(), 16 << 20);
    let mut stream = connect(addr);
    send_call(&mut stream, 5, 1);
    assert_eq!(callback_xid(read_record(&mut stream)), Some(CALLBACK_XID), "the call sent back comes first");
    let mut reply = Decoder::new(read_record(&mut stream));
    assert_eq!(decode_reply_header(&mut reply).unwrap(), (5, ReplyStat::Accepted(AcceptStat::Success)));

    let kept = program.kept.lock().unwrap().clone().expect("the connection was kept");
    drop(stream);
    let started = Instant::now();
    let closed = loop {
        match kept.backchannel().send_call(callback(0)) {
            Err(e) => break e,
            Ok(()) if started.elapsed() > Duration::from_secs(10) => panic!("the connection never closed"),
            Ok(()) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    assert_eq!(closed, BackchannelError::Closed);
    transport.stop(Duration::from_secs(1), Duration::ZERO);
}

/// Calls procedure 2 on a server whose connections may hold
/// `connection_bytes_max`, reads everything, and says how many calls
/// were sent back before one was refused and why.
fn fill_the_backchannel(connection_bytes_max: usize) -> (u32, u32) {
    let (transport, addr) = start(Arc::new(CallsBack::default()), connection_bytes_max);
    let mut stream = connect(addr);
    send_call(&mut stream, 6, 2);
    let mut callbacks = 0;
    let mut reply = loop {
        let record = read_record(&mut stream);
        match callback_xid(record.clone()) {
            Some(_) => callbacks += 1,
            None => break Decoder::new(record),
        }
        assert!(callbacks <= CALLBACKS_MAX, "more calls than were sent");
    };
    assert_eq!(decode_reply_header(&mut reply).unwrap(), (6, ReplyStat::Accepted(AcceptStat::Success)));
    let (sent, refused) = (reply.u32().unwrap(), reply.u32().unwrap());
    assert_eq!(callbacks, sent, "every call queued went out, before the reply");
    transport.stop(Duration::from_secs(1), Duration::ZERO);
    (sent, refused)
}

#[test]
fn calls_sent_back_to_a_client_that_does_not_read_are_bounded_and_then_all_delivered() {
    let (sent, refused) = fill_the_backchannel(16 << 20);
    assert_eq!(refused, FULL);
    assert!(sent >= BACKCHANNEL_CALLS_QUEUED_MAX as u32, "{sent} sent before the backchannel was full");
}

#[test]
fn calls_sent_back_are_charged_to_the_connection_s_budget() {
    // Four calls sent back fit, with the call that sends them.
    let (_, refused) = fill_the_backchannel(256 << 10);
    assert_eq!(refused, OVER_BUDGET);
}

#[test]
fn a_reply_from_the_client_is_taken_while_its_calls_hold_every_slot() {
    let program = Arc::new(CallsBack::default());
    let router = Arc::new(ReplyRouter::default());
    let (transport, addr) = start_with(program.clone(), 16 << 20, 1, router.clone());
    let mut stream = connect(addr);
    send_call(&mut stream, 5, 1);
    assert_eq!(callback_xid(read_record(&mut stream)), Some(CALLBACK_XID));
    read_record(&mut stream);
    let kept = program.kept.lock().unwrap().clone().expect("the connection was kept");
    let p = program.clone();
    let waiter = Box::new(move |_| {
        *p.replied.0.lock().unwrap() = true;
        p.replied.1.notify_all();
    });
    let xid = router.expect(kept.id(), Duration::from_secs(60), Instant::now(), waiter).unwrap();
    // A call that takes the connection's one slot until the reply has
    // been taken, then the reply.
    send_call(&mut stream, 6, 3);
    let mut enc = Encoder::new();
    keel_rpc::msg::encode_reply_header(&mut enc, xid, ReplyStat::Accepted(AcceptStat::Success));
    let reply = enc.into_bytes();
    stream.write_all(&record_mark(reply.len())).unwrap();
    stream.write_all(&reply).unwrap();
    let mut answer = Decoder::new(read_record(&mut stream));
    assert_eq!(decode_reply_header(&mut answer).unwrap(), (6, ReplyStat::Accepted(AcceptStat::Success)));
    assert_eq!(answer.u32().unwrap(), 1, "the reply was taken while the call held the slot");
    assert_eq!(router.stats().delivered, 1);
    transport.stop(Duration::from_secs(1), Duration::ZERO);
}

/// Replies take no slot, so a client streaming them (to no call: each is
/// dropped) must still give its turn up after a batch: two such clients,
/// one per worker, leave a third client's call answered while they stream.
#[test]
fn clients_streaming_replies_do_not_keep_the_workers_from_another_client() {
    let (transport, addr) = start(Arc::new(CallsBack::default()), 16 << 20);
    let mut enc = Encoder::new();
    keel_rpc::msg::encode_reply_header(&mut enc, 0x7777_0000, ReplyStat::Accepted(AcceptStat::Success));
    let reply = enc.into_bytes();
    let record = [&record_mark(reply.len())[..], &reply[..]].concat();
    let chunk: Vec<u8> = record.iter().copied().cycle().take(record.len() * 32_768).collect();
    let streaming = Arc::new(AtomicBool::new(true));
    let streamers: Vec<_> = (0..2)
        .map(|_| {
            let mut s = connect(addr);
            s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
            let (chunk, streaming) = (chunk.clone(), streaming.clone());
            std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(20);
                while streaming.load(Ordering::SeqCst) && Instant::now() < until {
                    if s.write_all(&chunk).is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    // Both streams flowing.
    std::thread::sleep(Duration::from_millis(300));
    let mut other = connect(addr);
    other.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    send_call(&mut other, 9, 5);
    let mut mark = [0; 4];
    let answered = other.read_exact(&mut mark).is_ok();
    let still_streaming = streamers.iter().all(|t| !t.is_finished());
    streaming.store(false, Ordering::SeqCst);
    for t in streamers {
        t.join().unwrap();
    }
    assert!(answered && still_streaming, "the other client's call was answered while the replies streamed");
    transport.stop(Duration::from_secs(1), Duration::ZERO);
}

#[test]
fn a_handler_that_panics_gets_system_err_and_its_worker_is_reset_for_the_next_call() {
    let (transport, addr) = start(Arc::new(CallsBack::default()), 16 << 20);
    let mut stream = connect(addr);
    send_call(&mut stream, 7, 4);
    let mut reply = Decoder::new(read_record(&mut stream));
    assert_eq!(decode_reply_header(&mut reply).unwrap(), (7, ReplyStat::Accepted(AcceptStat::SystemErr)));
    assert_eq!(WORKER_RESETS.load(Ordering::SeqCst), 1, "the server's reset ran on the worker");
    // The connection still serves.
    send_call(&mut stream, 8, 1);
    assert_eq!(callback_xid(read_record(&mut stream)), Some(CALLBACK_XID));
    let mut reply = Decoder::new(read_record(&mut stream));
    assert_eq!(decode_reply_header(&mut reply).unwrap(), (8, ReplyStat::Accepted(AcceptStat::Success)));
    transport.stop(Duration::from_secs(1), Duration::ZERO);
}

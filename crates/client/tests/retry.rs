//! The retrying transport: reconnects, retransmits the same bytes with the
//! same xid, from the same source port, and gives up in bounded time.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use keel_client::proto::*;
use keel_client::{
    AcceptStat, ClientError, ConnectOptions, Nfs3Client, ReplyStat, RetryPolicy, RetryingConnection, decode_results,
};
use keel_rpc::msg::CallHeader;
use keel_xdr::Decoder;

fn quick_policy() -> RetryPolicy {
    RetryPolicy {
        give_up_after: Duration::from_secs(10),
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
    }
}

fn xid_of(record: &Bytes) -> u32 {
    CallHeader::decode(&mut Decoder::new(record.clone())).unwrap().xid
}

#[tokio::test]
async fn a_dropped_connection_is_reopened_and_the_call_retransmitted_with_its_xid() {
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        // First connection: take the REMOVE, then drop the connection
        // without answering (as a crashing server would).
        let mut first = ServerConn::accept(&listener).await;
        let sent = first.read_record().await.unwrap();
        let first_peer = first.peer;
        drop(first);
        // Second connection: the same call again, answered.
        let mut second = ServerConn::accept(&listener).await;
        let mut again = second.read_call().await.unwrap();
        assert_eq!(again.record, sent, "a retransmission is the same bytes");
        let args: Remove3Args = again.decode_args();
        assert_eq!(args.object.name.as_bytes(), b"victim");
        let res = Remove3Res::Ok(Remove3ResOk::default());
        second.reply(again.header.xid, SUCCESS, |e| e.put(&res)).await;
        (xid_of(&sent), again.header.xid, first_peer, second.peer, second)
    });
    let conn = RetryingConnection::connect(addr, &opts(), quick_policy()).await.unwrap();
    let nfs = Nfs3Client::new(conn.clone());
    let args = Remove3Args { object: Diropargs3 { dir: NfsFh3::new(&b"dir"[..]), name: "victim".into() } };
    let res = within(10, nfs.remove(&args)).await.unwrap();
    assert!(res.is_ok());
    let (xid1, xid2, peer1, peer2, _conn) = server.await.unwrap();
    assert_eq!(xid1, xid2);
    assert_eq!(peer1, peer2, "reconnected from the same source port, as the reply cache needs");
    let stats = conn.stats();
    assert_eq!((stats.connects, stats.same_port_reconnects, stats.retransmissions), (2, 1, 1));
}

#[tokio::test]
async fn a_timed_out_call_is_retransmitted_on_a_fresh_connection() {
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        // First connection: alive but silent; the client must give up on it.
        let mut first = ServerConn::accept(&listener).await;
        let sent = first.read_record().await.unwrap();
        let mut second = ServerConn::accept(&listener).await;
        // The client reset the first connection before reconnecting.
        assert!(first.read_record().await.is_none());
        let again = second.read_record().await.unwrap();
        assert_eq!(again, sent);
        second.reply(xid_of(&again), SUCCESS, |e| e.u32(42)).await;
        (first.peer, second.peer, second)
    });
    let opts = ConnectOptions { call_timeout: Duration::from_millis(300), ..opts() };
    let conn = RetryingConnection::connect(addr, &opts, quick_policy()).await.unwrap();
    let started = Instant::now();
    let results = within(10, conn.call(TEST_PROG, 1, 1, &7u32)).await.unwrap();
    assert_eq!(decode_results::<u32>(results).unwrap(), 42);
    assert!(started.elapsed() >= Duration::from_millis(300));
    let (peer1, peer2, _conn) = server.await.unwrap();
    assert_eq!(peer1, peer2);
    assert_eq!(conn.stats().retransmissions, 1);
}

#[tokio::test]
async fn every_call_waiting_on_a_lost_connection_is_retransmitted() {
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        let mut first = ServerConn::accept(&listener).await;
        let mut sent = vec![first.read_record().await.unwrap(), first.read_record().await.unwrap()];
        drop(first);
        let mut second = ServerConn::accept(&listener).await;
        let mut again = vec![second.read_record().await.unwrap(), second.read_record().await.unwrap()];
        sent.sort();
        again.sort();
        assert_eq!(sent, again);
        for record in &again {
            let xid = xid_of(record);
            second.reply(xid, SUCCESS, |e| e.u32(xid)).await;
        }
        second
    });
    let conn = RetryingConnection::connect(addr, &opts(), quick_policy()).await.unwrap();
    let (a, b) =
        within(10, async { tokio::join!(conn.call(TEST_PROG, 1, 1, &1u32), conn.call(TEST_PROG, 1, 1, &2u32)) }).await;
    let (a, b) = (decode_results::<u32>(a.unwrap()).unwrap(), decode_results::<u32>(b.unwrap()).unwrap());
    assert_ne!(a, b, "each call got its own reply");
    let _conn = server.await.unwrap();
    assert_eq!(conn.stats().connects, 2);
}

#[tokio::test]
async fn answers_are_not_retried() {
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        while let Some(call) = conn.read_call().await {
            conn.reply(call.header.xid, ReplyStat::Accepted(AcceptStat::ProcUnavail), |_| {}).await;
        }
    });
    let conn = RetryingConnection::connect(addr, &opts(), quick_policy()).await.unwrap();
    let err = conn.call(TEST_PROG, 1, 99, &()).await.unwrap_err();
    assert!(matches!(err, ClientError::Rpc(ReplyStat::Accepted(AcceptStat::ProcUnavail))), "{err:?}");
    assert_eq!(conn.stats().retransmissions, 0);
}

#[tokio::test]
async fn retries_give_up_after_the_policy_deadline() {
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        conn.read_record().await.unwrap();
        // The server goes away for good: no listener, no connection.
        drop(listener);
        drop(conn);
    });
    let policy = RetryPolicy { give_up_after: Duration::from_millis(800), ..quick_policy() };
    let conn = RetryingConnection::connect(addr, &opts(), policy).await.unwrap();
    let started = Instant::now();
    let err = within(10, conn.call(TEST_PROG, 1, 1, &())).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(err.is_retryable(), "the last error is returned: {err:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    assert!(conn.stats().retransmissions >= 2, "{:?}", conn.stats());
    server.await.unwrap();
}

#[tokio::test]
async fn the_first_connect_waits_for_a_server_that_is_starting() {
    // Reserve a port, then free it: nothing listens there for a while.
    let (listener, addr) = listen().await;
    drop(listener);
    let server = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let mut conn = ServerConn::accept(&listener).await;
        let call = conn.read_call().await.unwrap();
        conn.reply(call.header.xid, SUCCESS, |_| {}).await;
        conn
    });
    let conn = within(10, RetryingConnection::connect(addr, &opts(), quick_policy())).await.unwrap();
    conn.call(TEST_PROG, 1, 0, &()).await.unwrap();
    let _conn = server.await.unwrap();
    // Not yet listening at the first attempts, so it must have retried.
    let refused = RetryingConnection::connect(
        addr,
        &opts(),
        RetryPolicy { give_up_after: Duration::from_millis(100), ..quick_policy() },
    )
    .await;
    assert!(refused.is_err());
}

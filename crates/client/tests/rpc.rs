//! The RPC transport against a scripted fake server: pipelining, framing,
//! errors, timeouts, connection loss, bounds, credentials, payloads.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use keel_client::proto::*;
use keel_client::{
    AcceptStat, Auth, AuthStat, ClientError, ConnectOptions, Nfs3Client, PortmapClient, RejectStat, ReplyStat,
    RpcConnection, auth_sys, getport_udp, process_auth,
};
use keel_rpc::msg::{AUTH_NONE, AUTH_SYS, AuthSys, CallHeader, decode_reply_header};
use keel_rpc::record::RecordError;
use keel_xdr::{Decoder, Encoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::task::JoinSet;

fn u32_results(b: Bytes) -> u32 {
    keel_client::decode_results::<u32>(b).unwrap()
}

#[tokio::test]
async fn pipelined_calls_complete_out_of_order_matched_by_xid() {
    const CALLS: u32 = 64;
    let (listener, addr) = listen().await;
    let server = tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        let mut calls = Vec::new();
        for _ in 0..CALLS {
            let mut call = conn.read_call().await.unwrap();
            let arg: u32 = call.decode_args();
            calls.push((call.header.xid, arg));
        }
        // Every call is in flight at once; answer them backwards, all in
        // one TCP write.
        let mut out = Vec::new();
        for (xid, arg) in calls.into_iter().rev() {
            out.extend(frame(&reply_body(xid, SUCCESS, |e| e.u32(arg * 3 + 1)), 1));
        }
        conn.write(&out).await;
        conn
    });
    let conn = RpcConnection::connect(addr, &opts()).await.unwrap();
    let mut set = JoinSet::new();
    for i in 0..CALLS {
        // The call future is 'static and Send: it can be spawned.
        let call = conn.call(TEST_PROG, 1, 1, move |e| e.u32(i));
        set.spawn(async move { (i, call.await) });
    }
    let mut seen = 0;
    while let Some(joined) = within(10, set.join_next()).await {
        let (i, result) = joined.unwrap();
        assert_eq!(u32_results(result.unwrap()), i * 3 + 1, "call {i} got another call's reply");
        seen += 1;
    }
    assert_eq!(seen, CALLS);
    assert_eq!(conn.in_flight(), 0);
    drop(server.await.unwrap());
}

#[tokio::test]
async fn replies_split_into_tiny_segments_and_many_fragments_are_reassembled() {
    let payload: Vec<u8> = (0..100_003u32).map(|i| (i % 251) as u8).collect();
    let expected = payload.clone();
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        for fragments in [1, 9, 1000] {
            let call = conn.read_call().await.unwrap();
            let bytes = frame(&reply_body(call.header.xid, SUCCESS, |e| e.opaque(&payload)), fragments);
            let mut at = 0;
            let mut size = 1;
            while at < bytes.len() {
                let end = (at + size).min(bytes.len());
                conn.write(&bytes[at..end]).await;
                conn.stream.flush().await.unwrap();
                if at % 64 == 0 {
                    tokio::task::yield_now().await;
                }
                at = end;
                size = size % 97 + 1;
            }
        }
    });
    let conn = RpcConnection::connect(addr, &opts()).await.unwrap();
    for _ in 0..3 {
        let results = within(20, conn.call(TEST_PROG, 1, 2, |_| {})).await.unwrap();
        let mut dec = Decoder::new(results);
        assert_eq!(&dec.opaque(1 << 20).unwrap()[..], &expected[..]);
        dec.finish().unwrap();
    }
}

#[tokio::test]
async fn rpc_rejections_become_typed_errors() {
    let stats = [
        ReplyStat::Accepted(AcceptStat::ProgUnavail),
        ReplyStat::Accepted(AcceptStat::ProgMismatch { low: 2, high: 4 }),
        ReplyStat::Accepted(AcceptStat::ProcUnavail),
        ReplyStat::Accepted(AcceptStat::GarbageArgs),
        ReplyStat::Accepted(AcceptStat::SystemErr),
        ReplyStat::Denied(RejectStat::RpcMismatch { low: 2, high: 2 }),
        ReplyStat::Denied(RejectStat::AuthError(AuthStat::BadCred)),
        ReplyStat::Denied(RejectStat::AuthError(AuthStat::TooWeak)),
    ];
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        while let Some(call) = conn.read_call().await {
            conn.reply(call.header.xid, stats[call.header.proc_ as usize], |_| {}).await;
        }
    });
    let conn = RpcConnection::connect(addr, &opts()).await.unwrap();
    for (proc_, stat) in stats.iter().enumerate() {
        match conn.call(TEST_PROG, 1, proc_ as u32, |_| {}).await {
            Err(ClientError::Rpc(got)) => assert_eq!(got, *stat),
            other => panic!("{stat:?}: got {other:?}"),
        }
    }
    // The typed clients report them the same way.
    let nfs = Nfs3Client::new(conn.clone());
    assert!(matches!(nfs.call::<(), ()>(Nfs3Proc::Null, &()).await, Err(ClientError::Rpc(ReplyStat::Accepted(_)))));
}

#[tokio::test]
async fn a_silent_server_times_out_and_its_late_reply_is_ignored() {
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        let first = conn.read_call().await.unwrap();
        let second = conn.read_call().await.unwrap();
        // The first reply comes after the client gave up on it.
        conn.reply(first.header.xid, SUCCESS, |e| e.u32(1)).await;
        conn.reply(second.header.xid, SUCCESS, |e| e.u32(2)).await;
        while conn.read_call().await.is_some() {}
    });
    let conn = RpcConnection::connect(addr, &opts()).await.unwrap().with_timeout(Duration::from_millis(200));
    let started = Instant::now();
    match conn.call(TEST_PROG, 1, 1, |_| {}).await {
        Err(ClientError::Timeout(d)) => assert_eq!(d, Duration::from_millis(200)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(200) && elapsed < Duration::from_secs(3), "{elapsed:?}");
    assert_eq!(conn.in_flight(), 0, "a timed-out call leaves nothing behind");
    let conn = conn.with_timeout(Duration::from_secs(5));
    assert_eq!(u32_results(conn.call(TEST_PROG, 1, 1, |_| {}).await.unwrap()), 2);
    assert!(!conn.is_closed());
}

#[tokio::test]
async fn a_dropped_call_future_leaves_nothing_behind() {
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        while conn.read_call().await.is_some() {}
    });
    let conn = RpcConnection::connect(addr, &opts()).await.unwrap();
    let call = conn.call(TEST_PROG, 1, 1, |_| {});
    assert!(tokio::time::timeout(Duration::from_millis(100), call).await.is_err());
    assert_eq!(conn.in_flight(), 0);
}

#[tokio::test]
async fn the_server_closing_the_connection_fails_every_pending_call() {
    const CALLS: usize = 16;
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        for _ in 0..CALLS {
            conn.read_call().await.unwrap();
        }
        drop(conn);
    });
    let conn = RpcConnection::connect(addr, &opts()).await.unwrap();
    let mut set = JoinSet::new();
    for _ in 0..CALLS {
        set.spawn(conn.call(TEST_PROG, 1, 1, |_| {}));
    }
    let started = Instant::now();
    while let Some(joined) = within(5, set.join_next()).await {
        let err = joined.unwrap().unwrap_err();
        assert!(
            matches!(err.io_kind(), Some(std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset)),
            "{err:?}"
        );
        assert!(err.is_retryable());
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(conn.is_closed());
    // Later calls fail at once.
    let err = within(1, conn.call(TEST_PROG, 1, 1, |_| {})).await.unwrap_err();
    assert!(err.io_kind().is_some(), "{err:?}");
}

#[tokio::test]
async fn calls_in_flight_are_bounded_by_the_slot_count() {
    let (listener, addr) = listen().await;
    let current = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (c, p) = (current.clone(), peak.clone());
    tokio::spawn(async move {
        let conn = ServerConn::accept(&listener).await;
        let (mut rd, wr) = conn.stream.into_split();
        let wr = Arc::new(tokio::sync::Mutex::new(wr));
        let mut buf = bytes::BytesMut::new();
        let mut records = keel_rpc::record::RecordAssembler::new(1 << 20);
        loop {
            let record = loop {
                if let Some(r) = records.next_record(&mut buf).unwrap() {
                    break Some(r);
                }
                if rd.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                    break None;
                }
            };
            let Some(record) = record else { return };
            let xid = CallHeader::decode(&mut Decoder::new(record)).unwrap().xid;
            let now = c.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            let (c, wr) = (c.clone(), wr.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                c.fetch_sub(1, Ordering::SeqCst);
                let bytes = frame(&reply_body(xid, SUCCESS, |_| {}), 1);
                wr.lock().await.write_all(&bytes).await.unwrap();
            });
        }
    });
    let conn = RpcConnection::connect(addr, &ConnectOptions { outstanding_max: 4, ..opts() }).await.unwrap();
    let mut set = JoinSet::new();
    for _ in 0..40 {
        set.spawn(conn.call(TEST_PROG, 1, 1, |_| {}));
    }
    while let Some(joined) = within(10, set.join_next()).await {
        joined.unwrap().unwrap();
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!((2..=4).contains(&peak), "peak of {peak} calls in flight");
}

#[tokio::test]
async fn an_oversized_reply_record_fails_the_call_and_closes_the_connection() {
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        let call = conn.read_call().await.unwrap();
        conn.reply(call.header.xid, SUCCESS, |e| e.opaque(&[7; 4096])).await;
        while conn.read_call().await.is_some() {}
    });
    let conn = RpcConnection::connect(addr, &ConnectOptions { record_bytes_max: 1024, ..opts() }).await.unwrap();
    match within(5, conn.call(TEST_PROG, 1, 1, |_| {})).await {
        Err(ClientError::Record(RecordError::TooLarge { max: 1024, .. })) => {}
        other => panic!("{other:?}"),
    }
    assert!(conn.is_closed());
}

#[tokio::test]
async fn a_malformed_reply_is_a_decode_error_and_the_connection_survives() {
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        let call = conn.read_call().await.unwrap();
        // Right xid, but a CALL instead of a REPLY.
        let mut body = call.header.xid.to_be_bytes().to_vec();
        body.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 2]);
        conn.write(&frame(&body, 1)).await;
        // Records too short to hold an xid, and results with trailing junk.
        conn.write(&frame(&[1, 2], 1)).await;
        let call = conn.read_call().await.unwrap();
        conn.reply(call.header.xid, SUCCESS, |e| {
            e.u32(5);
            e.u32(6);
        })
        .await;
        let call = conn.read_call().await.unwrap();
        conn.reply(call.header.xid, SUCCESS, |e| e.u32(9)).await;
    });
    let conn = RpcConnection::connect(addr, &opts()).await.unwrap();
    assert!(matches!(conn.call(TEST_PROG, 1, 1, |_| {}).await, Err(ClientError::Xdr(_))));
    let trailing = conn.call(TEST_PROG, 1, 1, |_| {}).await.unwrap();
    assert!(matches!(keel_client::decode_results::<u32>(trailing), Err(ClientError::Xdr(_))));
    assert_eq!(u32_results(conn.call(TEST_PROG, 1, 1, |_| {}).await.unwrap()), 9);
}

#[tokio::test]
async fn call_raw_sends_arbitrary_bytes_and_returns_the_whole_reply() {
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        let record = conn.read_record().await.unwrap();
        assert_eq!(&record[..], &[0x01, 0x02, 0x03, 0x04, 0xff, 0xff, 0xff]);
        conn.reply(0x0102_0304, ReplyStat::Accepted(AcceptStat::GarbageArgs), |_| {}).await;
    });
    let conn = RpcConnection::connect(addr, &opts()).await.unwrap();
    let reply = conn.call_raw(Bytes::from_static(&[0x01, 0x02, 0x03, 0x04, 0xff, 0xff, 0xff])).await.unwrap();
    let mut dec = Decoder::new(reply);
    assert_eq!(decode_reply_header(&mut dec).unwrap(), (0x0102_0304, ReplyStat::Accepted(AcceptStat::GarbageArgs)));
    assert!(matches!(conn.call_raw(Bytes::from_static(&[1, 2])).await, Err(ClientError::Protocol(_))));
}

#[tokio::test]
async fn each_handle_sends_its_own_credential() {
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        while let Some(call) = conn.read_call().await {
            let cred = call.header.cred.clone();
            conn.reply(call.header.xid, SUCCESS, |e| {
                e.u32(cred.flavor);
                match cred.flavor {
                    AUTH_SYS => {
                        let sys = AuthSys::decode(cred.body).unwrap();
                        e.u32(sys.uid);
                        e.u32(sys.gid);
                        e.u32(sys.gids.len() as u32);
                    }
                    _ => {
                        e.u32(u32::MAX);
                        e.u32(u32::MAX);
                        e.u32(0);
                    }
                }
            })
            .await;
        }
    });
    let base =
        RpcConnection::connect(addr, &ConnectOptions { auth: auth_sys(1000, 100, &[]), ..opts() }).await.unwrap();
    let other = base.with_auth(&auth_sys(2000, 200, &[1, 2, 3]));
    let anonymous = base.with_auth(&Auth::None);
    let ask = |c: &RpcConnection| {
        let call = c.call(TEST_PROG, 1, 1, |_| {});
        async move {
            let mut dec = Decoder::new(call.await.unwrap());
            [dec.u32().unwrap(), dec.u32().unwrap(), dec.u32().unwrap(), dec.u32().unwrap()]
        }
    };
    let (a, b, c) = tokio::join!(ask(&base), ask(&other), ask(&anonymous));
    assert_eq!(a, [AUTH_SYS, 1000, 100, 0]);
    assert_eq!(b, [AUTH_SYS, 2000, 200, 3]);
    assert_eq!(c, [AUTH_NONE, u32::MAX, u32::MAX, 0]);
    // The same connection carried all three.
    assert_eq!(base.local_addr(), other.local_addr());
}

#[tokio::test]
async fn big_write_and_read_payloads_arrive_intact() {
    let data: Bytes = (0..WRITE_DATA_MAX as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let expected = data.clone();
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        let mut call = conn.read_call().await.unwrap();
        let args: Write3Args = call.decode_args();
        assert_eq!(args.data, expected);
        let res = Write3Res::Ok(Write3ResOk {
            file_wcc: WccData::default(),
            count: args.count,
            committed: StableHow::FileSync,
            verf: [1; 8],
        });
        conn.reply(call.header.xid, SUCCESS, |e| e.put(&res)).await;
        let call = conn.read_call().await.unwrap();
        let res = Read3Res::Ok(Read3ResOk { file_attributes: None, count: args.count, eof: true, data: args.data });
        conn.reply(call.header.xid, SUCCESS, |e| e.put(&res)).await;
    });
    let conn = RpcConnection::connect(addr, &opts()).await.unwrap();
    let nfs = Nfs3Client::new(conn.clone());
    let args = Write3Args {
        file: NfsFh3::new(&b"file"[..]),
        offset: 0,
        count: data.len() as u32,
        stable: StableHow::FileSync,
        data: data.clone(),
    };
    let ok = nfs.write(&args).await.unwrap().into_result().unwrap();
    assert_eq!(ok.count as usize, data.len());
    // READ data is a slice of the received reply, not a copy.
    let read = Read3Args { file: NfsFh3::new(&b"file"[..]), offset: 0, count: data.len() as u32 };
    let results = conn.call(NFS_PROGRAM, NFS_V3, Nfs3Proc::Read as u32, |e| e.put(&read)).await.unwrap();
    let ok: Read3ResOk = keel_client::decode_results::<Read3Res>(results.clone()).unwrap().into_result().unwrap();
    assert_eq!(ok.data, data);
    let range = results.as_ptr() as usize..results.as_ptr() as usize + results.len();
    assert!(range.contains(&(ok.data.as_ptr() as usize)));
}

#[tokio::test]
async fn dropping_the_last_handle_closes_the_socket() {
    let (listener, addr) = listen().await;
    let conn = RpcConnection::connect(addr, &opts()).await.unwrap();
    let mut server = ServerConn::accept(&listener).await;
    let clone = conn.clone();
    drop(conn);
    drop(clone);
    let mut byte = [0u8; 1];
    assert_eq!(within(5, server.stream.read(&mut byte)).await.unwrap_or(0), 0);
}

#[tokio::test]
async fn close_fails_waiting_calls_at_once() {
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        while conn.read_call().await.is_some() {}
    });
    let conn = RpcConnection::connect(addr, &opts()).await.unwrap();
    let call = tokio::spawn(conn.call(TEST_PROG, 1, 1, |_| {}));
    while conn.in_flight() == 0 {
        tokio::task::yield_now().await;
    }
    conn.close().await;
    let err = within(2, call).await.unwrap().unwrap_err();
    assert_eq!(err.io_kind(), Some(std::io::ErrorKind::ConnectionAborted));
    assert!(conn.is_closed());
}

#[tokio::test]
async fn connecting_to_nothing_is_an_io_error() {
    let (listener, addr) = listen().await;
    drop(listener);
    let err = RpcConnection::connect(addr, &opts()).await.unwrap_err();
    assert_eq!(err.io_kind(), Some(std::io::ErrorKind::ConnectionRefused));
}

/// As root (CI runs as root: the test fails otherwise, it does not skip),
/// a connection comes from a reserved source port by default, as the kernel
/// client's do; `reserved_port: false` gives an ordinary one.
#[tokio::test]
async fn reserved_source_port_by_default_when_privileged() {
    assert!(matches!(process_auth(), Auth::Sys(AuthSys { uid: 0, .. })), "this test needs root (CI runs as root)");
    assert!(keel_client::reserved_port_available());
    let (listener, addr) = listen().await;
    let conn = RpcConnection::connect(addr, &opts()).await.unwrap();
    let server = ServerConn::accept(&listener).await;
    assert_eq!(server.peer, conn.local_addr());
    assert!((665..=1023).contains(&conn.local_addr().port()), "{:?}", conn.local_addr());
    let ordinary = RpcConnection::connect(addr, &ConnectOptions { reserved_port: false, ..opts() }).await.unwrap();
    assert!(ordinary.local_addr().port() >= 1024, "{:?}", ordinary.local_addr());
    drop(ServerConn::accept(&listener).await);
    // And an explicit source port is used as asked.
    let port = conn.local_addr().port();
    drop(server);
    conn.close().await;
    let again =
        within(5, RpcConnection::connect(addr, &ConnectOptions { source_port: Some(port), ..opts() })).await.unwrap();
    assert_eq!(again.local_addr().port(), port);
}

#[tokio::test]
async fn portmap_over_tcp_and_getport_over_udp() {
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        let mut conn = ServerConn::accept(&listener).await;
        while let Some(mut call) = conn.read_call().await {
            assert_eq!((call.header.prog, call.header.vers), (PMAP_PROGRAM, PMAP_V2));
            let mut enc = Encoder::new();
            match PmapProc::from_u32(call.header.proc_).unwrap() {
                PmapProc::Null => {}
                PmapProc::Set | PmapProc::Unset => {
                    let m: portmap::Mapping = call.decode_args();
                    enc.bool(m.prog == 7);
                }
                PmapProc::Getport => {
                    let m: portmap::Mapping = call.decode_args();
                    enc.u32(if (m.prog, m.vers, m.prot) == (NFS_PROGRAM, 3, IPPROTO_TCP) { 2049 } else { 0 });
                }
                PmapProc::Dump => enc.put(&portmap::Pmaplist(vec![portmap::Mapping {
                    prog: NFS_PROGRAM,
                    vers: 3,
                    prot: IPPROTO_TCP,
                    port: 2049,
                }])),
                PmapProc::Callit => unreachable!(),
            }
            let body = enc.into_bytes();
            conn.reply(call.header.xid, SUCCESS, |e| e.raw(&body)).await;
        }
    });
    let pmap = PortmapClient::new(RpcConnection::connect(addr, &opts()).await.unwrap());
    pmap.null().await.unwrap();
    assert_eq!(pmap.getport(NFS_PROGRAM, 3, IPPROTO_TCP).await.unwrap(), 2049);
    assert_eq!(pmap.getport(MOUNT_PROGRAM, 3, IPPROTO_TCP).await.unwrap(), 0);
    assert!(pmap.set(&portmap::Mapping { prog: 7, vers: 1, prot: IPPROTO_TCP, port: 700 }).await.unwrap());
    assert!(!pmap.unset(&portmap::Mapping { prog: 8, vers: 1, prot: 0, port: 0 }).await.unwrap());
    assert_eq!(pmap.dump().await.unwrap().0.len(), 1);

    // UDP: the server ignores the first datagram, so the client must
    // retransmit it (same xid) before the timeout.
    let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let udp_addr = udp.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let mut buf = vec![0; 65536];
        let mut xids = Vec::new();
        loop {
            let (n, from) = udp.recv_from(&mut buf).await.unwrap();
            let mut dec = Decoder::new(Bytes::copy_from_slice(&buf[..n]));
            let header = CallHeader::decode(&mut dec).unwrap();
            xids.push(header.xid);
            if xids.len() == 1 {
                continue;
            }
            // A stray datagram with another xid first: ignored by the client.
            udp.send_to(&reply_body(header.xid ^ 1, SUCCESS, |e| e.u32(1)), from).await.unwrap();
            udp.send_to(&reply_body(header.xid, SUCCESS, |e| e.u32(2049)), from).await.unwrap();
            return xids;
        }
    });
    let port = getport_udp(udp_addr, NFS_PROGRAM, 3, IPPROTO_TCP, Duration::from_millis(900)).await.unwrap();
    assert_eq!(port, 2049);
    let xids = server.await.unwrap();
    assert_eq!(xids.len(), 2);
    assert_eq!(xids[0], xids[1], "a UDP retransmission keeps its xid");
}

#[tokio::test]
async fn udp_call_to_a_silent_server_times_out() {
    let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = udp.local_addr().unwrap();
    let started = Instant::now();
    let err = getport_udp(addr, NFS_PROGRAM, 3, IPPROTO_TCP, Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(err, ClientError::Timeout(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(udp);
}

#[tokio::test]
async fn absurd_options_are_clamped_not_fatal() {
    let (listener, addr) = listen().await;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut conn = ServerConn::new(stream);
                while let Some(call) = conn.read_call().await {
                    conn.reply(call.header.xid, SUCCESS, |e| e.u32(1)).await;
                }
            });
        }
    });
    for (outstanding_max, timeout) in [(usize::MAX, Duration::MAX), (0, Duration::from_secs(5))] {
        let opts = ConnectOptions {
            outstanding_max,
            call_timeout: timeout,
            connect_timeout: timeout,
            record_bytes_max: usize::MAX,
            ..opts()
        };
        let conn = RpcConnection::connect(addr, &opts).await.unwrap();
        let (a, b) = tokio::join!(conn.call(TEST_PROG, 1, 1, |_| {}), conn.call(TEST_PROG, 1, 1, |_| {}));
        assert_eq!((u32_results(a.unwrap()), u32_results(b.unwrap())), (1, 1));
    }
}

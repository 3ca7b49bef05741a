//! READ replies whose data is spliced from the page cache to the socket
//! (the local store's pipes, the transport's splice), checked byte for byte
//! against the file with an independent client (`nfs3_types`): sizes and
//! offsets on both sides of the splice threshold and of EOF, a file
//! truncated and grown between READs, a client that reads its replies
//! slowly (the socket fills in the middle of a pipe, the rest goes out on
//! write readiness), and retransmitted READs (the same xid again: READ is
//! not in the duplicate reply cache, so each gets a reply of its own).

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use keel_testkit::nfs::*;
use keel_testkit::procs::run_timeout;
use keel_testkit::server::{ExportOpts, TestServer, keel_bin};
use nfs3_types::nfs3::{READ3args, READ3res};
use nfs3_types::xdr_codec::Unpack;

const MIB: usize = 1 << 20;

fn stats(server: &TestServer) -> serde_json::Value {
    let mut cmd = Command::new(keel_bin());
    cmd.args(["stat", "--json", "--config"]).arg(&server.config);
    let out = run_timeout(&mut cmd, Duration::from_secs(60));
    assert!(out.status.success(), "keel stat failed: {}", out.text());
    serde_json::from_str(&out.stdout).expect("JSON")
}

/// Bytes read, and READs given a pipe, so far.
fn counted(server: &TestServer) -> (u64, u64) {
    let s = stats(server);
    assert_eq!(s["read_pipes"]["pipes_max"], 32, "{}", s["read_pipes"]);
    (s["calls"]["read_bytes"].as_u64().unwrap(), s["read_pipes"]["spliced"].as_u64().unwrap())
}

/// What a READ of `count` at `offset` must return from `file`.
fn expected(file: &[u8], offset: u64, count: usize) -> (&[u8], bool) {
    let start = (offset as usize).min(file.len());
    let end = (start + count).min(file.len());
    (&file[start..end], end == file.len())
}

fn decode_read(body: &[u8]) -> (Vec<u8>, bool) {
    let (res, _) = READ3res::unpack(&mut std::io::Cursor::new(body)).expect("a READ3res");
    match res {
        nfs3_types::nfs3::Nfs3Result::Ok(ok) => {
            assert_eq!(ok.count as usize, ok.data.len(), "count agrees with the data's length");
            (ok.data.to_vec(), ok.eof)
        }
        nfs3_types::nfs3::Nfs3Result::Err((stat, _)) => panic!("READ failed: {stat:?}"),
    }
}

#[test]
fn reads_of_every_size_and_offset_are_the_files_bytes() {
    let server = TestServer::start_default("splice-sizes");
    assert!(server.log_text().contains("READs are spliced from the page cache"), "{}", server.log_text());
    let dir = server.export_dir(1);
    let file = pattern(11, 3 * MIB + 123);
    host_file(&dir.join("big"), &file, 0o644, 0, 0);
    let mut c = Nfs::connect(server.addr).unwrap();
    let root = c.mount(&server.export_path(1)).unwrap();
    let fh = c.lookup(&root, "big").unwrap();
    let size = file.len() as u64;
    let mut cases: Vec<(u64, usize)> = Vec::new();
    for count in [0, 1, 4095, 4096, 4097, 16 << 10, (32 << 10) - 1, 32 << 10, 64 << 10, 100_000, MIB - 1, MIB] {
        for offset in [0, 1, 4095, 4096, 65_536 + 3, MIB as u64, 2 * MIB as u64 + 4096] {
            cases.push((offset, count));
        }
    }
    // Across EOF, at EOF, past EOF.
    for (back, count) in [(1, 4096), (1000, 64 << 10), (40_000, MIB), (MIB as u64, MIB), (123, 123)] {
        cases.push((size - back, count));
    }
    cases.extend([(size, 4096), (size, MIB), (size + 1, 64 << 10), (size + 10 * MIB as u64, MIB)]);
    let before = counted(&server);
    let (mut total, mut large) = (0u64, 0u64);
    for &(offset, count) in &cases {
        let (data, eof) = c.read(&fh, offset, count as u32).unwrap();
        let (want, want_eof) = expected(&file, offset, count);
        assert!(data == want, "READ {count} at {offset}: {} bytes, want {}, or other bytes", data.len(), want.len());
        assert_eq!(eof, want_eof, "eof of READ {count} at {offset}");
        total += data.len() as u64;
        // Spliced: 32 KiB or more, within one pipe of 1 MiB whatever the
        // offset in its first page.
        large += (data.len() >= 32 << 10 && (offset % 4096) as usize + data.len() <= MIB) as u64;
    }
    let after = counted(&server);
    assert_eq!(after.0 - before.0, total, "bytes read are counted, spliced or not");
    assert_eq!(after.1 - before.1, large, "the large READs were spliced, the others copied");
}

#[test]
fn a_file_truncated_or_grown_between_reads_is_read_as_it_is_now() {
    let server = TestServer::start_default("splice-trunc");
    let path = server.export_dir(1).join("changes");
    let first = pattern(1, 2 * MIB);
    host_file(&path, &first, 0o644, 0, 0);
    let mut c = Nfs::connect(server.addr).unwrap();
    let root = c.mount(&server.export_path(1)).unwrap();
    let fh = c.lookup(&root, "changes").unwrap();
    assert!(c.read(&fh, MIB as u64, MIB as u32).unwrap().0 == first[MIB..]);

    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(100_000).unwrap();
    let (data, eof) = c.read(&fh, 0, MIB as u32).unwrap();
    assert!(eof && data == first[..100_000], "{} bytes after truncation", data.len());
    assert_eq!(c.read(&fh, MIB as u64, MIB as u32).unwrap(), (Vec::new(), true));
    assert_eq!(c.read(&fh, 100_000, 64 << 10).unwrap(), (Vec::new(), true));

    let second = pattern(2, 3 * MIB);
    std::fs::write(&path, &second).unwrap();
    for offset in [0, MIB as u64, 2 * MIB as u64] {
        let (data, eof) = c.read(&fh, offset, MIB as u32).unwrap();
        let (want, want_eof) = expected(&second, offset, MIB);
        assert!(data == want && eof == want_eof, "READ at {offset} after the file was rewritten");
    }
}

#[test]
fn a_client_that_reads_slowly_gets_exact_data() {
    let server = TestServer::start_default("splice-slow");
    let file = pattern(3, 24 * MIB);
    host_file(&server.export_dir(1).join("big"), &file, 0o644, 0, 0);
    let mut c = Nfs::connect(server.addr).unwrap();
    let root = c.mount(&server.export_path(1)).unwrap();
    let fh = c.lookup(&root, "big").unwrap();

    // A small receive window: the server's socket fills in the middle of
    // every pipe, and the rest of each reply waits for write readiness.
    let stream = reserved_stream_with(server.addr, |s| s.set_recv_buffer_size(16 << 10));
    let mut slow = RpcConn::from_stream(stream).unwrap();
    let reads: Vec<(u64, usize)> =
        (0..24).map(|i| (i as u64 * MIB as u64 + if i % 3 == 1 { 4096 } else { 0 }, MIB - (i % 2) * 5)).collect();
    let mut xids = Vec::new();
    for &(offset, count) in &reads {
        let args = READ3args { file: fh_of(&fh), offset, count: count as u32 };
        xids.push(slow.send(prog::NFS, prog::NFS_V3, 6, &args).unwrap());
    }
    std::thread::sleep(Duration::from_millis(300));
    // Calls of one connection run on several workers: replies come in any
    // order, matched by xid.
    for n in 0..reads.len() {
        let (xid, body) = slow.recv().unwrap();
        let i = xids.iter().position(|&x| x == xid).expect("a reply to a call sent");
        let (offset, count) = reads[i];
        let (data, eof) = decode_read(&body);
        let (want, want_eof) = expected(&file, offset, count);
        assert!(data == want && eof == want_eof, "READ {i} ({count} at {offset}) read slowly");
        xids[i] = 0;
        if n % 4 == 0 {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn a_retransmitted_read_gets_a_whole_reply_each_time() {
    let server = TestServer::start_default("splice-retrans");
    let file = pattern(4, 2 * MIB);
    host_file(&server.export_dir(1).join("f"), &file, 0o644, 0, 0);
    let mut c = Nfs::connect(server.addr).unwrap();
    let root = c.mount(&server.export_path(1)).unwrap();
    let fh = c.lookup(&root, "f").unwrap();

    let mut raw = RpcConn::connect(server.addr).unwrap();
    let args = READ3args { file: fh_of(&fh), offset: 4096, count: MIB as u32 };
    let record = rpc_record(0x0bad_cafe, prog::NFS, prog::NFS_V3, 6, &cred_groups(0, 0, &[]), &args);
    // Three copies of one call (same xid, same arguments), as a client
    // that timed out resends it: each is executed and answered in full.
    let mut stream = raw.stream().try_clone().unwrap();
    stream.write_all(&[record.clone(), record.clone(), record].concat()).unwrap();
    let (want, _) = expected(&file, 4096, MIB);
    for copy in 0..3 {
        let (xid, body) = raw.recv().unwrap();
        assert_eq!(xid, 0x0bad_cafe);
        let (data, eof) = decode_read(&body);
        assert!(data == want && !eof, "copy {copy} of the retransmitted READ");
    }
    // The connection still serves.
    assert!(c.read(&fh, 0, 64 << 10).unwrap().0 == file[..64 << 10]);
}

/// How many of the server's workers are running or about to (state `R`).
fn workers_running(server: &TestServer) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", server.pid())).expect("the server's threads");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            // "tid (comm) S ...": the state follows the last parenthesis.
            let close = stat.rfind(')').unwrap_or(0);
            stat[..close].contains("(keel-worker-") && stat[close..].starts_with(") R")
        })
        .count()
}

#[test]
fn a_worker_does_not_poll_for_the_next_call_after_a_large_reply() {
    // The longest poll allowed, so that a polling worker is seen.
    let server = TestServer::start("splice-poll", vec![ExportOpts::rw(1, "export")], "poll_spin_us = 1000");
    host_file(&server.export_dir(1).join("big"), &pattern(5, 2 * MIB), 0o644, 0, 0);
    let mut c = Nfs::connect(server.addr).unwrap();
    let root = c.mount(&server.export_path(1)).unwrap();
    let fh = c.lookup(&root, "big").unwrap();
    // After each answered call, whether a worker polls 300 µs later (a
    // poll lasts 1 ms here), over 20 calls, each after the last poll ended.
    let mut polled_after = |call: &mut dyn FnMut(&mut Nfs)| {
        (0..20)
            .filter(|_| {
                std::thread::sleep(Duration::from_millis(5));
                call(&mut c);
                std::thread::sleep(Duration::from_micros(300));
                workers_running(&server) > 0
            })
            .count()
    };
    // A client at one call in flight answers a small reply at once: the
    // worker polls for its next call rather than sleep.
    let small = polled_after(&mut |c| {
        c.getattr(&fh).unwrap();
    });
    assert!(small >= 10, "a worker polled after {small} of 20 GETATTRs: the check cannot see polling here");
    // A 1 MiB reply takes the client longer to receive than the poll
    // lasts: the worker sleeps at once, leaving the CPU to the client.
    let large = polled_after(&mut |c| assert_eq!(c.read(&fh, 0, MIB as u32).unwrap().0.len(), MIB));
    assert!(large <= 4, "a worker polled after {large} of 20 READs of 1 MiB");
}

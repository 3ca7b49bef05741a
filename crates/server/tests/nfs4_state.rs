//! NFSv4.1 state against the `keel` binary over TCP, with keel-testkit's
//! v4.1 client (built from keel-nfs4-proto; its connection is its
//! backchannel too, as the Linux client's is): what a closed connection
//! does to the sessions bound to it, and a client's open, lock and
//! acknowledged data across a power cut (durability.rs's method: kill -9,
//! then the XFS under the state directory and the export shut down
//! without flushing its log); no new OPEN before the client's
//! RECLAIM_COMPLETE; the change attribute within one tick of the kernel's
//! clock; the configured lease (`nfs4_lease_seconds`) as the lease_time
//! attribute and as how long a silent client's open stands in another's
//! way; the configured bound of client IDs per address
//! (`nfs4_clients_per_address_max`).

use std::process::Command;
use std::time::{Duration, Instant};

use keel_nfs4_proto::*;
use keel_testkit::disk::XfsDisk;
use keel_testkit::nfs::reserved_stream;
use keel_testkit::nfs4::{V4, WAIT, data_of, putfh, read, reclaim_complete};
use keel_testkit::server::{ExportOpts, TestServer, keel_bin, require_root};
use keel_xdr::Opaque;
use serde_json::Value;

const PATH_DOWN: u32 = SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;

/// `keel clients --json`.
fn clients(server: &TestServer) -> Value {
    let mut cmd = Command::new(keel_bin());
    cmd.args(["clients", "--json"]).arg("--config").arg(&server.config);
    let out = keel_testkit::procs::run_timeout(&mut cmd, WAIT);
    assert!(out.status.success(), "keel clients: {}", out.text());
    serde_json::from_str(&out.stdout).expect("keel clients --json is JSON")
}

/// The first client's first session: its connections and those with the
/// backchannel.
fn session_connections(server: &TestServer) -> (u64, u64) {
    let listed = clients(server);
    let s = &listed[0]["sessions"][0];
    (s["connections"].as_u64().unwrap(), s["back_connections"].as_u64().unwrap())
}

/// A new connection for the client (the old one is closed when dropped).
fn reconnect(server: &TestServer, v4: &mut V4) -> std::net::TcpStream {
    let stream = reserved_stream(server.addr);
    stream.set_read_timeout(Some(WAIT)).unwrap();
    std::mem::replace(&mut v4.stream, stream)
}

/// RFC 8881 sections 2.10.3.1 and 18.46.3: when the connection carrying a
/// session's backchannel closes, the session lets go of it, and SEQUENCE
/// on the client's other connection says CB_PATH_DOWN and
/// CB_PATH_DOWN_SESSION; the client binds its backchannel again with
/// BIND_CONN_TO_SESSION, which is probed, and the flags clear. A session
/// whose every connection closed lives on: a new connection just uses it.
#[test]
fn a_closed_connection_takes_the_backchannel_with_it_and_the_session_lives_on() {
    let server = TestServer::start("nfs4-conn-close", vec![ExportOpts::rw(1, "export")], "nfs_versions = [\"4.1\"]");
    let mut v4 = V4::connect(&server, b"conn-close-test");
    v4.wait_for_callback_path();

    // A second connection, bound to the fore channel by its first
    // SEQUENCE (SP4_NONE); the first one still carries the backchannel.
    let first = reconnect(&server, &mut v4);
    let (flags, _) = v4.run(vec![]);
    assert_eq!(flags & PATH_DOWN, 0, "flags {flags:#x}");
    assert_eq!(session_connections(&server), (2, 1));

    drop(first);
    let start = Instant::now();
    loop {
        let (flags, _) = v4.run(vec![]);
        if flags & PATH_DOWN == PATH_DOWN {
            break;
        }
        assert!(start.elapsed() < WAIT, "the closed backchannel was never noticed (flags {flags:#x})");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(session_connections(&server), (1, 0), "the closed connection is bound to nothing");

    // The client binds its backchannel to the connection it has.
    let bind = BindConnToSession4Args {
        bctsa_sessid: v4.session,
        bctsa_dir: ChannelDirFromClient4::Cdfc4BackOrBoth,
        bctsa_use_conn_in_rdma_mode: false,
    };
    let probes = v4.probes;
    let res = v4.compound(vec![NfsArgop4::BindConnToSession(bind)]);
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
    v4.wait_for_callback_path();
    assert!(v4.probes > probes, "the new backchannel was probed");
    assert_eq!(session_connections(&server), (1, 1));

    // Every connection of the session closes; it is still there for a
    // new one.
    drop(reconnect(&server, &mut v4));
    let start = Instant::now();
    while session_connections(&server) != (0, 0) {
        assert!(start.elapsed() < WAIT, "the last connection's close was never noticed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (flags, res) = v4.run(vec![]);
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
    assert_eq!(flags & PATH_DOWN, PATH_DOWN, "flags {flags:#x}");
}

fn open_args(owner: &'static [u8], claim: OpenClaim4) -> NfsArgop4 {
    NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: 0,
        owner: OpenOwner4 { clientid: 0, owner: Opaque(bytes::Bytes::from_static(owner)) },
        openhow: Openflag4::Open4Nocreate,
        claim,
    })
}

fn lock_args(open_stateid: Stateid4, owner: &'static [u8], reclaim: bool) -> NfsArgop4 {
    NfsArgop4::Lock(Lock4Args {
        locktype: NfsLockType4::WriteLt,
        reclaim,
        offset: 0,
        length: 100,
        locker: Locker4::OpenOwner(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid,
            lock_seqid: 0,
            lock_owner: LockOwner4 { clientid: 0, owner: Opaque(bytes::Bytes::from_static(owner)) },
        }),
    })
}

fn opened(res: &NfsResop4) -> Stateid4 {
    let NfsResop4::Open(Nfs4Result::Ok(open)) = res else { panic!("OPEN: {res:?}") };
    open.stateid
}

/// Issue 29's restart proof with a power cut instead of a kill -9: a
/// client holding an open and a write lock, with data it wrote FILE_SYNC,
/// loses the server and the file system's unflushed log at once. After
/// the restart it reclaims both (its record in the state directory
/// survived), another client gets NFS4ERR_GRACE meanwhile and, once the
/// grace period ended with the reclaimer's RECLAIM_COMPLETE, is denied
/// the lock; the acknowledged data is there.
#[test]
fn a_v4_client_reclaims_its_open_and_lock_after_a_power_cut_and_its_synced_data_is_there() {
    require_root();
    let mut disk = XfsDisk::new("nfs4-power-cut");
    let mut server = TestServer::start_in(
        "nfs4-power-cut",
        &disk.mnt,
        vec![ExportOpts::rw(1, "export")],
        "nfs_versions = [\"3\", \"4.1\"]",
    );
    let file = server.export_dir(1).join("f");
    std::fs::write(&file, b"").unwrap();
    // The client's calls are AUTH_NONE (the anonymous user).
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    disk.syncfs();

    let mut a = V4::connect(&server, b"power-cut-a");
    let mut path = vec![NfsArgop4::Putrootfh(())];
    for part in server.export_path(1).split('/').filter(|p| !p.is_empty()) {
        path.push(NfsArgop4::Lookup(Lookup4Args { objname: part.into() }));
    }
    let mut ops = path.clone();
    ops.extend([open_args(b"open-a", OpenClaim4::ClaimNull("f".into())), NfsArgop4::Getfh(())]);
    let res = a.ok(ops);
    let n = res.len();
    let open = opened(&res[n - 2]);
    let NfsResop4::Getfh(Nfs4Result::Ok(fh)) = &res[n - 1] else { panic!("GETFH: {res:?}") };
    let fh = fh.object.0.clone();
    let data = bytes::Bytes::from_static(b"acknowledged before the power cut");
    let write =
        NfsArgop4::Write(Write4Args { stateid: open, offset: 0, stable: StableHow4::FileSync4, data: data.clone() });
    let res = a.ok(vec![putfh(&fh), write]);
    let NfsResop4::Write(Nfs4Result::Ok(w)) = &res[2] else { panic!("WRITE: {res:?}") };
    assert_eq!((w.count as usize, w.committed), (data.len(), StableHow4::FileSync4));
    a.ok(vec![putfh(&fh), lock_args(open, b"lock-a", false)]);

    server.kill9();
    disk.power_cut();
    disk.mount();
    server.start_again();

    // The same client (owner and verifier) comes back and reclaims.
    let mut a = V4::connect_to_reclaim(&server, b"power-cut-a");
    let res =
        a.ok(vec![putfh(&fh), open_args(b"open-a", OpenClaim4::ClaimPrevious(OpenDelegationType4::OpenDelegateNone))]);
    let open = opened(&res[2]);
    a.ok(vec![putfh(&fh), lock_args(open, b"lock-a", true)]);

    // Another client in between: the grace period holds it off.
    let mut b = V4::connect(&server, b"power-cut-b");
    let mut ops = path.clone();
    ops.push(open_args(b"open-b", OpenClaim4::ClaimNull("f".into())));
    let (_, res) = b.run(ops.clone());
    assert_eq!(res.status, Nfsstat4::Grace, "{res:?}");

    a.ok(vec![reclaim_complete()]);
    let res = b.ok(ops);
    let open_b = opened(res.last().unwrap());
    let (_, res) = b.run(vec![putfh(&fh), lock_args(open_b, b"lock-b", false)]);
    assert_eq!(res.status, Nfsstat4::Denied, "the reclaimed lock is held: {res:?}");

    let res = a.ok(vec![putfh(&fh), read(open)]);
    assert_eq!(data_of(&res[2]), data);
}

/// RFC 8881 section 18.51.3 over the wire (pynfs RECC3): a client that
/// has not sent RECLAIM_COMPLETE gets NFS4ERR_GRACE for a new OPEN, with
/// no grace period on; once it has, the OPEN is granted.
#[test]
fn a_new_open_waits_for_the_client_s_reclaim_complete() {
    let server = TestServer::start("nfs4-recc", vec![ExportOpts::rw(1, "export")], "nfs_versions = [\"3\", \"4.1\"]");
    let file = server.export_dir(1).join("f");
    std::fs::write(&file, b"").unwrap();
    // The client's calls are AUTH_NONE (the anonymous user).
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let mut v4 = V4::connect_to_reclaim(&server, b"recc");
    let mut ops = vec![NfsArgop4::Putrootfh(())];
    for part in server.export_path(1).split('/').filter(|p| !p.is_empty()) {
        ops.push(NfsArgop4::Lookup(Lookup4Args { objname: part.into() }));
    }
    ops.push(open_args(b"o", OpenClaim4::ClaimNull("f".into())));
    let (_, res) = v4.run(ops.clone());
    assert_eq!(res.status, Nfsstat4::Grace, "{res:?}");
    v4.ok(vec![reclaim_complete()]);
    opened(v4.ok(ops).last().unwrap());
}

/// `id -u NAME` or `id -g NAME`.
fn id_of(flag: &str, name: &str) -> u32 {
    let out = Command::new("id").args([flag, name]).output().expect("id");
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("a number")
}

/// A server with `server_extra` in its `[server]` and a `no_root_squash`
/// export holding an empty file "f"; a v4.1 client calling as root, and
/// the file's handle.
fn root_with_file_f(name: &str, server_extra: &str) -> (TestServer, V4, bytes::Bytes) {
    let export = ExportOpts::new(1, "export", "access = \"rw\"\nsquash = \"no_root_squash\"");
    let server = TestServer::start(name, vec![export], server_extra);
    std::fs::write(server.export_dir(1).join("f"), b"").unwrap();
    let mut v4 = V4::connect(&server, b"root-test");
    v4.cred = keel_rpc::msg::AuthSys { uid: 0, gid: 0, ..Default::default() }.to_opaque();
    let (_, fh) = v4.open_read(&server, 1, b"o", "f");
    (server, v4, fh)
}

#[test]
fn owner_names_of_the_id_mapping_domain_are_the_system_s_users_and_groups() {
    // no_root_squash: root may give a file away.
    let (server, mut v4, fh) = root_with_file_f("nfs4-idmap", "nfs4_idmap_domain = \"keel.test\"");
    let chown = |owner: &str, group: &str| {
        let attrs = Attrs4 { owner: Some(owner.into()), owner_group: Some(group.into()), ..Attrs4::default() };
        NfsArgop4::Setattr(Setattr4Args {
            stateid: Stateid4::ANONYMOUS,
            obj_attributes: attrs.to_fattr4(&Attrs4::known()),
        })
    };
    // daemon and its group are in every Debian's base passwd and group.
    v4.ok(vec![putfh(&fh), chown("daemon@KEEL.test", "daemon@keel.test")]);
    let meta = std::fs::metadata(server.export_dir(1).join("f")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.gid()), (id_of("-u", "daemon"), id_of("-g", "daemon")));
    for (owner, group) in
        [("daemon@other.test", "0"), ("no-such-user-keel@keel.test", "0"), ("0", "no-such-group-keel@keel.test")]
    {
        let (_, res) = v4.run(vec![putfh(&fh), chown(owner, group)]);
        assert_eq!(res.status, Nfsstat4::Badowner, "{owner} {group}");
    }
}

/// The change attribute moves with every change a client can see, also
/// many within one tick of the kernel's clock (a 4 ms jiffy): 64 writes
/// and 64 creates back to back, each followed by a GETATTR of the change,
/// give 64 different, increasing values each. Keel's change attribute is
/// the ctime, which the kernel makes fine-grained for a change that
/// follows a read of it (multigrain timestamps, Linux 6.13 on, for ext4,
/// XFS, btrfs and tmpfs; an older kernel fails this test).
#[test]
fn the_change_attribute_moves_with_every_change_within_one_clock_tick() {
    let (server, mut v4, file) = root_with_file_f("nfs4-change", "");
    let (_, dir) = {
        let mut ops = vec![NfsArgop4::Putrootfh(())];
        for part in server.export_path(1).split('/').filter(|p| !p.is_empty()) {
            ops.push(NfsArgop4::Lookup(Lookup4Args { objname: part.into() }));
        }
        ops.push(NfsArgop4::Getfh(()));
        let res = v4.ok(ops);
        let NfsResop4::Getfh(Nfs4Result::Ok(fh)) = res.last().unwrap() else { panic!("GETFH: {res:?}") };
        ((), fh.object.0.clone())
    };
    let change_of = |res: &NfsResop4| {
        let NfsResop4::Getattr(Nfs4Result::Ok(g)) = res else { panic!("GETATTR: {res:?}") };
        Attrs4::from_fattr4(&g.obj_attributes, AttrUse::Reply).unwrap().change.unwrap()
    };
    let getattr = || NfsArgop4::Getattr(Getattr4Args { attr_request: Bitmap4::from_bits([FATTR4_CHANGE]) });
    let mut file_changes = Vec::new();
    let mut dir_changes = Vec::new();
    let started = Instant::now();
    for i in 0..64u64 {
        let data = bytes::Bytes::from_static(b"x");
        let write = NfsArgop4::Write(Write4Args {
            stateid: Stateid4::ANONYMOUS,
            offset: i,
            stable: StableHow4::Unstable4,
            data,
        });
        file_changes.push(change_of(&v4.ok(vec![putfh(&file), write, getattr()])[3]));
        let create = NfsArgop4::Create(Create4Args {
            objtype: Createtype4::Dir,
            objname: format!("d{i}").as_str().into(),
            createattrs: Fattr4::default(),
        });
        dir_changes.push(change_of(&v4.ok(vec![putfh(&dir), create, putfh(&dir), getattr()])[4]));
    }
    eprintln!("128 changes in {:?}", started.elapsed());
    for changes in [&file_changes, &dir_changes] {
        assert!(
            changes.windows(2).all(|w| w[0] < w[1]),
            "a change that did not move the change attribute: {changes:?}"
        );
    }
}

/// `nfs4_lease_seconds` on the wire: the lease_time attribute reads it,
/// and a client that stops renewing its lease keeps its open against
/// another client's conflicting OPEN (one denying reads) until that long
/// after its last call, not longer: the server is courteous, and a
/// courtesy client whose state is in someone's way is expired then (its
/// session goes with it).
#[test]
fn the_configured_lease_is_the_lease_time_and_how_long_a_silent_client_s_open_stands() {
    const LEASE_S: u64 = 10;
    let extra = format!("nfs_versions = [\"4.1\"]\nnfs4_lease_seconds = {LEASE_S}");
    let server = TestServer::start("nfs4-lease", vec![ExportOpts::rw(1, "export")], &extra);
    std::fs::write(server.export_dir(1).join("f"), b"data").unwrap();

    let mut silent = V4::connect(&server, b"lease-silent");
    let (_, fh) = silent.open_read(&server, 1, b"reader", "f");
    // The server renewed the lease at that OPEN's SEQUENCE, before this.
    let renewed = Instant::now();
    let getattr = NfsArgop4::Getattr(Getattr4Args { attr_request: Bitmap4::from_bits([FATTR4_LEASE_TIME]) });
    let mut other = V4::connect(&server, b"lease-other");
    let res = other.ok(vec![putfh(&fh), getattr]);
    let NfsResop4::Getattr(Nfs4Result::Ok(g)) = &res[2] else { panic!("GETATTR: {res:?}") };
    let lease_time = Attrs4::from_fattr4(&g.obj_attributes, AttrUse::Reply).unwrap().lease_time;
    assert_eq!(lease_time, Some(LEASE_S as u32), "the lease_time attribute");

    let open_denying_reads = NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_READ,
        share_deny: OPEN4_SHARE_DENY_READ,
        owner: OpenOwner4 { clientid: 0, owner: Opaque(bytes::Bytes::from_static(b"denier")) },
        openhow: Openflag4::Open4Nocreate,
        claim: OpenClaim4::ClaimFh,
    });
    let mut denied = 0;
    let waited = loop {
        let (_, res) = other.run(vec![putfh(&fh), open_denying_reads.clone()]);
        let waited = renewed.elapsed();
        if res.status == Nfsstat4::Ok {
            break waited;
        }
        assert_eq!(res.status, Nfsstat4::ShareDenied, "{res:?}");
        denied += 1;
        assert!(
            waited < Duration::from_secs(LEASE_S + 5),
            "the silent client's open still stands {waited:?} after its last call, with a lease of {LEASE_S} s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(denied > 0, "the silent client's open never stood in the way");
    assert!(
        waited >= Duration::from_millis(LEASE_S * 1000 - 500),
        "the silent client's open went {waited:?} after its last call, before its lease of {LEASE_S} s ran out"
    );
    // Its state and session are gone.
    let sequence = NfsArgop4::Sequence(Sequence4Args { sa_sessionid: silent.session, ..Sequence4Args::default() });
    let res = silent.compound(vec![sequence]);
    assert_eq!(res.status, Nfsstat4::Badsession, "{res:?}");
}

/// OPEN's arguments for `owner` with `access` (no delegation wish).
fn open_with(owner: &'static [u8], access: u32, how: Openflag4, claim: OpenClaim4) -> NfsArgop4 {
    NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: access,
        share_deny: 0,
        owner: OpenOwner4 { clientid: 0, owner: Opaque(bytes::Bytes::from_static(owner)) },
        openhow: how,
        claim,
    })
}

/// RFC 8881 section 18.16.3 ("In this case, delegation will always be
/// granted, although the server may specify an immediate recall") over
/// the wire: a client holding a read delegation on r and a write
/// delegation on w (which the store created) when Keel is killed (-9)
/// reclaims its opens after the restart with OPEN CLAIM_PREVIOUS claiming
/// them. The read delegation comes back as it was, backed by a new lease:
/// its stateid serves READ, DELEGRETURN takes it back, and a local writer
/// breaks its lease, which recalls it. The write one comes back too, on
/// a write lease the new instance has by reopening the file for writing
/// (it had opened it read-only); the open serves the client's writes.
#[test]
fn a_v4_client_reclaims_its_read_and_write_delegations_after_a_restart() {
    let mut server = TestServer::start(
        "nfs4-deleg-reclaim",
        vec![ExportOpts::rw(1, "export")],
        "nfs_versions = [\"4.1\"]\nnfs4_write_delegations = true",
    );
    let r = server.export_dir(1).join("r");
    std::fs::write(&r, b"read me").unwrap();
    // The client's calls are AUTH_NONE (the anonymous user).
    std::fs::set_permissions(&r, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    std::fs::set_permissions(server.export_dir(1), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();

    let mut a = V4::connect(&server, b"deleg-reclaim");
    a.wait_for_callback_path();
    let (open_r, fh_r) = a.open_read(&server, 1, b"o", "r");
    assert!(matches!(open_r.delegation, OpenDelegation4::OpenDelegateRead(_)), "{:?}", open_r.delegation);
    let mut create_written = |name: &str| {
        let mut ops = vec![NfsArgop4::Putrootfh(())];
        for part in server.export_path(1).split('/').filter(|p| !p.is_empty()) {
            ops.push(NfsArgop4::Lookup(Lookup4Args { objname: part.into() }));
        }
        let create = Openflag4::Open4Create(Createhow4::Unchecked4(Fattr4::default()));
        ops.extend([
            open_with(b"o", OPEN4_SHARE_ACCESS_BOTH, create, OpenClaim4::ClaimNull(name.into())),
            NfsArgop4::Getfh(()),
        ]);
        let res = a.ok(ops);
        let n = res.len();
        let NfsResop4::Open(Nfs4Result::Ok(open)) = &res[n - 2] else { panic!("OPEN: {res:?}") };
        assert!(matches!(open.delegation, OpenDelegation4::OpenDelegateWrite(_)), "{:?}", open.delegation);
        let NfsResop4::Getfh(Nfs4Result::Ok(fh)) = &res[n - 1] else { panic!("GETFH: {res:?}") };
        fh.object.0.clone()
    };
    let fh_w = create_written("w");
    let fh_x = create_written("x");

    server.kill9();
    server.start_again();
    let mut a = V4::connect_to_reclaim(&server, b"deleg-reclaim");
    // Its new backchannel proven first: one not probed yet would get the
    // delegations pre-recalled.
    a.wait_for_callback_path();
    let context = |server: &TestServer| format!("server log:\n{}", server.log_text());

    // The open's stateid and the delegation an OPEN reclaiming `kind` gets.
    let reclaim = |a: &mut V4, fh: &bytes::Bytes, access, kind| {
        let claim = OpenClaim4::ClaimPrevious(kind);
        let res = a.ok(vec![putfh(fh), open_with(b"o", access, Openflag4::Open4Nocreate, claim)]);
        let NfsResop4::Open(Nfs4Result::Ok(open)) = &res[2] else { panic!("OPEN: {res:?}") };
        (open.stateid, open.delegation.clone())
    };
    let (_, delegation) = reclaim(&mut a, &fh_r, OPEN4_SHARE_ACCESS_READ, OpenDelegationType4::OpenDelegateRead);
    let OpenDelegation4::OpenDelegateRead(deleg_r) = &delegation else {
        panic!("no read delegation reclaimed: {delegation:?}\n{}", context(&server))
    };
    assert!(!deleg_r.recall, "the lease was had and the callback path is up");
    let res = a.ok(vec![putfh(&fh_r), read(deleg_r.stateid)]);
    assert_eq!(data_of(&res[2]), bytes::Bytes::from_static(b"read me"));

    let (open_w, delegation) = reclaim(&mut a, &fh_w, OPEN4_SHARE_ACCESS_BOTH, OpenDelegationType4::OpenDelegateWrite);
    // The store opened the file read-only since the restart: its write
    // lease is had on a description reopened for writing.
    let OpenDelegation4::OpenDelegateWrite(deleg_w) = &delegation else {
        panic!("no write delegation reclaimed: {delegation:?}\n{}", context(&server))
    };
    assert!(!deleg_w.recall, "the lease was had and the callback path is up");
    let data = bytes::Bytes::from_static(b"written back");
    let write = NfsArgop4::Write(Write4Args { stateid: open_w, offset: 0, stable: StableHow4::FileSync4, data });
    a.ok(vec![putfh(&fh_w), write]);
    // A file that cannot be opened for writing now (a program runs from
    // it: ETXTBSY) gets its open back without the delegation, as knfsd
    // answers where no lease can be had, not an error.
    let x = server.export_dir(1).join("x");
    std::fs::copy("/bin/sleep", &x).unwrap();
    std::fs::set_permissions(&x, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut running = std::process::Command::new(&x).arg("30").spawn().unwrap();
    let (open_x, delegation) = reclaim(&mut a, &fh_x, OPEN4_SHARE_ACCESS_BOTH, OpenDelegationType4::OpenDelegateWrite);
    assert!(
        matches!(delegation, OpenDelegation4::OpenDelegateNone),
        "no write delegation while the file cannot be opened for writing: {delegation:?}\n{}",
        context(&server)
    );
    let res = a.ok(vec![putfh(&fh_x), read(open_x)]);
    assert_eq!(&data_of(&res[2])[..4], b"\x7fELF", "the reclaimed open reads");
    running.kill().unwrap();
    running.wait().unwrap();

    a.ok(vec![reclaim_complete()]);
    a.ok(vec![putfh(&fh_w), NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid: deleg_w.stateid })]);

    // A local writer breaks the read delegation's lease: recalled.
    let writer = std::thread::spawn(move || std::fs::OpenOptions::new().write(true).open(r).map(drop));
    let start = Instant::now();
    while a.recalled.is_empty() {
        assert!(start.elapsed() < WAIT, "the reclaimed delegation was never recalled\n{}", context(&server));
        a.ok(vec![]);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(a.recalled, vec![deleg_r.stateid]);
    a.ok(vec![putfh(&fh_r), NfsArgop4::Delegreturn(Delegreturn4Args { deleg_stateid: deleg_r.stateid })]);
    writer.join().unwrap().expect("the local writer opens once the delegation is returned");
    assert_eq!(std::fs::read(server.export_dir(1).join("w")).unwrap(), b"written back");
}

/// RFC 8881 section 18.37.3 over the wire (pynfs DSESS9001):
/// "DESTROY_SESSION MUST be invoked on a connection that is associated
/// with the session being destroyed". On a new connection a DESTROY_SESSION
/// alone is NFS4ERR_CONN_NOT_BOUND_TO_SESSION and the session lives on;
/// once a SEQUENCE in the session came on that connection (binding it),
/// DESTROY_SESSION there destroys it.
#[test]
fn destroy_session_on_a_connection_not_bound_to_it_is_refused() {
    let server = TestServer::start("nfs4-dsess", vec![ExportOpts::rw(1, "export")], "nfs_versions = [\"4.1\"]");
    let mut v4 = V4::connect(&server, b"dsess-test");
    let _first = reconnect(&server, &mut v4);
    let session = v4.session;
    let destroy = || NfsArgop4::DestroySession(DestroySession4Args { dsa_sessionid: session });
    let res = v4.compound(vec![destroy()]);
    assert_eq!(res.status, Nfsstat4::ConnNotBoundToSession, "{res:?}");
    let (_, res) = v4.run(vec![]);
    assert_eq!(res.status, Nfsstat4::Ok, "the session lives on: {res:?}");
    let res = v4.compound(vec![destroy()]);
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
    let res = v4.compound(vec![destroy()]);
    assert_eq!(res.status, Nfsstat4::Badsession, "{res:?}");
}

/// `nfs4_clients_per_address_max` bounds the client IDs one address
/// holds: past it a new client owner's EXCHANGE_ID is NFS4ERR_DELAY, and an
/// owner holding an ID already is still answered (the Linux client's
/// EXCHANGE_ID again after a reconnect).
#[test]
fn the_configured_bound_of_client_ids_per_address_holds() {
    let server = TestServer::start(
        "nfs4-clients-per-address",
        vec![ExportOpts::rw(1, "export")],
        "nfs_versions = [\"4.1\"]\nnfs4_clients_per_address_max = 2",
    );
    let mut a = V4::connect(&server, b"per-address-a");
    let _b = V4::connect(&server, b"per-address-b");
    let exchange_id = |owner: &'static [u8]| {
        NfsArgop4::ExchangeId(ExchangeId4Args {
            eia_clientowner: ClientOwner4 { co_verifier: [7; 8], co_ownerid: Opaque(bytes::Bytes::from_static(owner)) },
            eia_flags: 0,
            eia_state_protect: StateProtect4A::Sp4None,
            eia_client_impl_id: None,
        })
    };
    let res = a.compound(vec![exchange_id(b"per-address-c")]);
    assert_eq!(res.status, Nfsstat4::Delay, "a third client ID from the address: {res:?}");
    let res = a.compound(vec![exchange_id(b"per-address-a")]);
    assert_eq!(res.status, Nfsstat4::Ok, "the owner's own ID again: {res:?}");

    // The refusal is counted where an administrator looks.
    let mut cmd = Command::new(keel_bin());
    cmd.args(["stat", "--json"]).arg("--config").arg(&server.config);
    let out = keel_testkit::procs::run_timeout(&mut cmd, WAIT);
    assert!(out.status.success(), "keel stat: {}", out.text());
    let stat: Value = serde_json::from_str(&out.stdout).expect("keel stat --json is JSON");
    let refused = |resource: &str| {
        let list = stat["nfs4"]["refused"].as_array().expect("nfs4.refused is a list");
        list.iter().find(|r| r["resource"] == resource).map(|r| r["count"].clone())
    };
    assert_eq!(refused("clients"), Some(1.into()), "{stat:#}");
    assert_eq!(refused("opens"), Some(0.into()), "every resource is listed: {stat:#}");
    let mut cmd = Command::new(keel_bin());
    cmd.arg("stat").arg("--config").arg(&server.config);
    let out = keel_testkit::procs::run_timeout(&mut cmd, WAIT);
    assert!(out.stdout.contains("nfsv4 limits: refused clients 1;"), "keel stat: {}", out.text());
}

//! The NFS and MOUNT handlers on the simulated store: every call goes
//! through `RpcProgram::call` with encoded arguments and its reply is
//! decoded, as on the wire, but no root, no disk and no socket are needed.
//! A failing test prints its seed; the same seed replays the same run.

#[path = "handlers/crash_model.rs"]
mod crash_model;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use keel_exports::{Access, ClientOptions, ClientRule, ExportTable, HostMatch, Squash};
use keel_nfs3::{MountProgram, Nfs3Program};
use keel_nfs3_proto::mount::{Dirpath, MountProc, Mountres3, Mountstat3};
use keel_nfs3_proto::nfs3::*;
use keel_rpc::{AcceptError, CallContext, Credential, RpcProgram};
use keel_store::Store;
use keel_store::sim::{SimAction, SimFault, SimPoint, SimStore};
use keel_xdr::{Decode, Decoder, Encode, Encoder};

/// A server over a simulated store with one export, "/sim" (id 1).
pub struct Server {
    pub store: Arc<SimStore>,
    exports: Arc<ExportTable<SimStore>>,
    nfs: Nfs3Program<SimStore>,
    mount: MountProgram<SimStore>,
}

/// Read-write, sync, no_root_squash, secure: the zero-configuration export.
pub fn rw() -> ClientOptions {
    ClientOptions { access: Access::ReadWrite, squash: Squash::None, ..ClientOptions::default() }
}

impl Server {
    pub fn new(seed: u64, opts: ClientOptions) -> Self {
        Server::with_rules(seed, vec![ClientRule { host: HostMatch::Any, options: opts }])
    }

    fn with_rules(seed: u64, rules: Vec<ClientRule>) -> Self {
        Server::with_service(seed, rules, |svc| svc)
    }

    /// As a server in an HA pair runs it.
    pub fn holding_calls_when_storage_fails(seed: u64, opts: ClientOptions) -> Self {
        let rules = vec![ClientRule { host: HostMatch::Any, options: opts }];
        Server::with_service(seed, rules, ExportTable::holding_calls_when_storage_fails)
    }

    fn with_service(
        seed: u64,
        rules: Vec<ClientRule>,
        edit: impl FnOnce(ExportTable<SimStore>) -> ExportTable<SimStore>,
    ) -> Self {
        let store = Arc::new(SimStore::new(seed));
        let svc = Arc::new(edit(ExportTable::new(store.clone(), vec![(1, rules)])));
        Server { store, exports: svc.clone(), nfs: Nfs3Program::new(svc.clone()), mount: MountProgram::new(svc) }
    }

    /// A client calling as `uid` from a reserved port.
    pub fn client(&self, uid: u32) -> Client<'_> {
        let cred = Credential::sys(Bytes::new(), uid, uid, &[]);
        Client { srv: self, cred, peer: "127.0.0.1:700".parse().unwrap() }
    }
}

pub struct Client<'s> {
    srv: &'s Server,
    cred: Credential,
    peer: SocketAddr,
}

fn flatten(segments: Vec<Bytes>) -> Bytes {
    let mut b = BytesMut::new();
    for s in segments {
        b.extend_from_slice(&s);
    }
    b.freeze()
}

impl Client<'_> {
    fn run<A: Encode, R: Decode>(&self, program: &dyn RpcProgram, proc_: u32, args: &A) -> R {
        self.try_run(program, proc_, args).expect("accepted")
    }

    /// A call the program may refuse, or answer with nothing.
    fn try_run<A: Encode, R: Decode>(&self, program: &dyn RpcProgram, proc_: u32, args: &A) -> Result<R, AcceptError> {
        self.run_reported(program, proc_, args).0
    }

    /// [`Client::try_run`], with the status the program reported for the
    /// statistics.
    fn run_reported<A: Encode, R: Decode>(
        &self,
        program: &dyn RpcProgram,
        proc_: u32,
        args: &A,
    ) -> (Result<R, AcceptError>, Option<u32>) {
        let mut enc = Encoder::new();
        enc.put(args);
        let local: SocketAddr = "127.0.0.1:2049".parse().unwrap();
        let ctx = CallContext {
            xid: 1,
            vers: 3,
            proc_,
            cred: &self.cred,
            peer: self.peer,
            local,
            connection: None,
            report: Default::default(),
        };
        let mut reply = Encoder::new();
        if let Err(e) = program.call(&ctx, &mut Decoder::new(flatten(enc.finish_bytes())), &mut reply) {
            return (Err(e), ctx.report.status());
        }
        let mut dec = Decoder::new(flatten(reply.finish_bytes()));
        let r = R::decode(&mut dec).expect("the reply decodes");
        dec.finish().expect("nothing after the reply");
        (Ok(r), ctx.report.status())
    }

    pub fn call<A: Encode, R: Decode>(&self, proc_: Nfs3Proc, args: &A) -> R {
        self.run(&self.srv.nfs, proc_ as u32, args)
    }

    pub fn mnt(&self, path: &str) -> Mountres3 {
        self.run(&self.srv.mount, MountProc::Mnt as u32, &Dirpath(Bytes::copy_from_slice(path.as_bytes())))
    }

    /// MNT's reply and the status it reported for the statistics.
    pub fn mnt_reported(&self, path: &str) -> (Mountstat3, Option<u32>) {
        let args = Dirpath(Bytes::copy_from_slice(path.as_bytes()));
        let (res, reported) = self.run_reported::<_, Mountres3>(&self.srv.mount, MountProc::Mnt as u32, &args);
        (res.expect("accepted").status(), reported)
    }

    pub fn root(&self) -> NfsFh3 {
        match self.mnt("/sim") {
            Mountres3::Ok(ok) => NfsFh3 { data: ok.fhandle.0 },
            Mountres3::Fail(s) => panic!("MNT failed: {s}"),
        }
    }

    pub fn getattr(&self, fh: &NfsFh3) -> Getattr3Res {
        self.call(Nfs3Proc::Getattr, &Getattr3Args { object: fh.clone() })
    }

    pub fn create(&self, dir: &NfsFh3, name: &str, how: Createhow3) -> Create3Res {
        self.call(Nfs3Proc::Create, &Create3Args { where_: at(dir, name), how })
    }

    /// Creates a regular file and returns its handle.
    pub fn new_file(&self, dir: &NfsFh3, name: &str) -> NfsFh3 {
        let made = self.create(dir, name, Createhow3::Guarded(Sattr3::default())).ok().expect("CREATE");
        made.obj.expect("a handle")
    }

    pub fn write(&self, fh: &NfsFh3, offset: u64, data: &[u8], stable: StableHow) -> Write3Res {
        let data = Bytes::copy_from_slice(data);
        self.call(Nfs3Proc::Write, &Write3Args { file: fh.clone(), offset, count: data.len() as u32, stable, data })
    }

    pub fn read(&self, fh: &NfsFh3, offset: u64, count: u32) -> Read3Res {
        self.call(Nfs3Proc::Read, &Read3Args { file: fh.clone(), offset, count })
    }

    pub fn commit(&self, fh: &NfsFh3) -> Commit3Res {
        self.call(Nfs3Proc::Commit, &Commit3Args { file: fh.clone(), offset: 0, count: 0 })
    }

    pub fn setattr(&self, fh: &NfsFh3, set: Sattr3, guard: Sattrguard3) -> Setattr3Res {
        self.call(Nfs3Proc::Setattr, &Setattr3Args { object: fh.clone(), new_attributes: set, guard })
    }

    pub fn lookup(&self, dir: &NfsFh3, name: &str) -> Lookup3Res {
        self.call(Nfs3Proc::Lookup, &Lookup3Args { what: at(dir, name) })
    }

    fn readdir(&self, dir: &NfsFh3, cookie: u64, cookieverf: Cookieverf3, count: u32) -> Readdir3Res {
        self.call(Nfs3Proc::Readdir, &Readdir3Args { dir: dir.clone(), cookie, cookieverf, count })
    }
}

pub fn at(dir: &NfsFh3, name: &str) -> Diropargs3 {
    Diropargs3 { dir: dir.clone(), name: Filename3(Bytes::copy_from_slice(name.as_bytes())) }
}

fn size(attrs: &PostOpAttr) -> u64 {
    attrs.as_ref().expect("attributes").size
}

#[test]
fn a_file_goes_through_create_write_read_getattr_lookup_and_readdir() {
    let srv = Server::new(1, rw());
    let c = srv.client(0);
    let root = c.root();
    let made = c.create(&root, "f", Createhow3::Guarded(Sattr3 { mode: Some(0o640), ..Default::default() }));
    let made = made.ok().unwrap();
    let fh = made.obj.unwrap();
    assert_eq!(made.obj_attributes.as_ref().unwrap().mode, 0o640);
    let (before, after) = (made.dir_wcc.before.unwrap(), made.dir_wcc.after.unwrap());
    assert!(after.mtime > before.mtime || after.mtime.nseconds != before.mtime.nseconds, "the directory changed");

    let w = c.write(&fh, 0, b"hello, world", StableHow::FileSync).ok().unwrap();
    assert_eq!((w.count, w.committed), (12, StableHow::FileSync));
    assert_eq!(w.verf, srv.store.write_verifier(), "the store's verifier");
    assert_eq!(w.file_wcc.before.unwrap().size, 0);
    assert_eq!(size(&w.file_wcc.after), 12);

    let r = c.read(&fh, 7, 100).ok().unwrap();
    assert_eq!((&r.data[..], r.eof, r.count), (&b"world"[..], true, 5));
    let r = c.read(&fh, 0, 5).ok().unwrap();
    assert_eq!((&r.data[..], r.eof), (&b"hello"[..], false));
    assert_eq!(c.getattr(&fh).ok().unwrap().obj_attributes.size, 12);

    let found = c.lookup(&root, "f").ok().unwrap();
    assert_eq!(found.object, fh);
    assert_eq!(found.obj_attributes.unwrap().ftype, Ftype3::Reg);
    assert!(found.dir_attributes.is_some());

    let list = c.readdir(&root, 0, [0; 8], 4096).ok().unwrap();
    let names: Vec<&[u8]> = list.reply.entries.iter().map(|e| e.name.as_bytes()).collect();
    assert_eq!(names, [&b"."[..], b"..", b"f"]);
    assert!(list.reply.eof);
    let plus: Readdirplus3Res = c.call(
        Nfs3Proc::Readdirplus,
        &Readdirplus3Args { dir: root.clone(), cookie: 0, cookieverf: [0; 8], dircount: 4096, maxcount: 8192 },
    );
    let plus = plus.ok().unwrap();
    let f = plus.reply.entries.iter().find(|e| e.name.as_bytes() == b"f").unwrap();
    assert_eq!(f.name_handle.as_ref(), Some(&fh));
    assert_eq!(f.name_attributes.as_ref().unwrap().size, 12);
}

#[test]
fn directories_links_symlinks_and_special_files() {
    let srv = Server::new(2, rw());
    let c = srv.client(0);
    let root = c.root();
    let d: Mkdir3Res = c.call(Nfs3Proc::Mkdir, &Mkdir3Args { where_: at(&root, "d"), attributes: Sattr3::default() });
    let d = d.ok().unwrap().obj.unwrap();
    let target = Nfspath3(Bytes::from_static(b"../elsewhere"));
    let l: Symlink3Res = c.call(
        Nfs3Proc::Symlink,
        &Symlink3Args {
            where_: at(&d, "l"),
            symlink: Symlinkdata3 { symlink_attributes: Sattr3::default(), symlink_data: target.clone() },
        },
    );
    let l = l.ok().unwrap().obj.unwrap();
    let rl: Readlink3Res = c.call(Nfs3Proc::Readlink, &Readlink3Args { symlink: l.clone() });
    assert_eq!(rl.ok().unwrap().data, target);
    let fifo: Mknod3Res =
        c.call(Nfs3Proc::Mknod, &Mknod3Args { where_: at(&d, "p"), what: Mknoddata3::Fifo(Sattr3::default()) });
    assert_eq!(fifo.ok().unwrap().obj_attributes.unwrap().ftype, Ftype3::Fifo);
    let f = c.new_file(&root, "f");
    let linked: Link3Res = c.call(Nfs3Proc::Link, &Link3Args { file: f.clone(), link: at(&d, "f2") });
    assert_eq!(linked.ok().unwrap().file_attributes.unwrap().nlink, 2);
    let moved: Rename3Res = c.call(Nfs3Proc::Rename, &Rename3Args { from: at(&d, "f2"), to: at(&root, "g") });
    let moved = moved.ok().unwrap();
    assert!(moved.fromdir_wcc.after.is_some() && moved.todir_wcc.before.is_some());
    assert_eq!(c.lookup(&root, "g").ok().unwrap().object, f);
    let rm: Rmdir3Res = c.call(Nfs3Proc::Rmdir, &Rmdir3Args { object: at(&root, "d") });
    assert_eq!(rm.status(), Nfsstat3::Notempty);
    for name in ["l", "p"] {
        let r: Remove3Res = c.call(Nfs3Proc::Remove, &Remove3Args { object: at(&d, name) });
        assert!(r.is_ok(), "{name}");
    }
    let rm: Rmdir3Res = c.call(Nfs3Proc::Rmdir, &Rmdir3Args { object: at(&root, "d") });
    let wcc = rm.ok().unwrap().dir_wcc;
    assert!(wcc.before.is_some());
    assert_eq!(wcc.after.unwrap().nlink, 2, "the root lost a subdirectory");
    assert_eq!(c.getattr(&d).status(), Nfsstat3::Stale, "a removed directory's handle is stale");
    let fs: Fsstat3Res = c.call(Nfs3Proc::Fsstat, &Fsstat3Args { fsroot: root.clone() });
    assert!(fs.ok().unwrap().tbytes > 0);
    let info: Fsinfo3Res = c.call(Nfs3Proc::Fsinfo, &Fsinfo3Args { fsroot: root.clone() });
    assert_eq!(info.ok().unwrap().wtmax, keel_nfs3::IO_BYTES_MAX);
    let pc: Pathconf3Res = c.call(Nfs3Proc::Pathconf, &Pathconf3Args { object: root });
    assert_eq!(pc.ok().unwrap().name_max, 255);
}

#[test]
fn errors_come_back_with_the_status_and_attributes_the_rfc_asks_for() {
    let srv = Server::new(3, rw());
    let c = srv.client(0);
    let root = c.root();
    let fh = c.new_file(&root, "f");
    // Handles: forged, truncated, gone.
    let mut forged = fh.data.to_vec();
    forged[6] ^= 0x40;
    assert_eq!(c.getattr(&NfsFh3 { data: forged.into() }).status(), Nfsstat3::Badhandle);
    assert_eq!(c.getattr(&NfsFh3 { data: fh.data.slice(..4) }).status(), Nfsstat3::Badhandle);
    // Names.
    let missing = c.lookup(&root, "nope");
    assert_eq!(missing.status(), Nfsstat3::Noent);
    assert!(
        missing.into_result().unwrap_err().1.dir_attributes.is_some(),
        "LOOKUP fails with the directory's attributes"
    );
    assert_eq!(c.lookup(&fh, "x").status(), Nfsstat3::Notdir);
    assert_eq!(c.create(&root, "f", Createhow3::Guarded(Sattr3::default())).status(), Nfsstat3::Exist);
    assert_eq!(c.create(&root, "a/b", Createhow3::Guarded(Sattr3::default())).status(), Nfsstat3::Inval);
    // I/O on the wrong type, and count beyond the data.
    assert_eq!(c.read(&root, 0, 10).status(), Nfsstat3::Isdir);
    let lying = Write3Args {
        file: fh.clone(),
        offset: 0,
        count: 10,
        stable: StableHow::Unstable,
        data: Bytes::from_static(b"abc"),
    };
    let w: Write3Res = c.call(Nfs3Proc::Write, &lying);
    assert_eq!(w.status(), Nfsstat3::Inval);
    // SETATTR's guard.
    let ctime = c.getattr(&fh).ok().unwrap().obj_attributes.ctime;
    let stale_guard = Nfstime3 { seconds: ctime.seconds - 1, nseconds: 0 };
    let s = c.setattr(&fh, Sattr3 { mode: Some(0o600), ..Default::default() }, Some(stale_guard));
    assert_eq!(s.status(), Nfsstat3::NotSync);
    assert!(c.setattr(&fh, Sattr3 { mode: Some(0o600), ..Default::default() }, Some(ctime)).is_ok());
    // A cookie verifier from elsewhere.
    let page = c.readdir(&root, 0, [0; 8], 4096).ok().unwrap();
    let cookie = page.reply.entries[0].cookie;
    assert_eq!(c.readdir(&root, cookie, [9; 8], 4096).status(), Nfsstat3::BadCookie);
    assert!(c.readdir(&root, cookie, page.cookieverf, 4096).is_ok());
    assert_eq!(c.readdir(&root, 0, [0; 8], 10).status(), Nfsstat3::Toosmall);
    // Removed objects are stale.
    let _: Remove3Res = c.call(Nfs3Proc::Remove, &Remove3Args { object: at(&root, "f") });
    assert_eq!(c.getattr(&fh).status(), Nfsstat3::Stale);
    assert_eq!(c.read(&fh, 0, 1).status(), Nfsstat3::Stale);
}

#[test]
fn the_callers_identity_decides_and_is_assumed_once_per_call() {
    let srv = Server::new(4, rw());
    let (root_c, alice, bob) = (srv.client(0), srv.client(1000), srv.client(1001));
    let root = root_c.root();
    let d: Mkdir3Res = alice.call(
        Nfs3Proc::Mkdir,
        &Mkdir3Args { where_: at(&root, "home"), attributes: Sattr3 { mode: Some(0o755), ..Default::default() } },
    );
    let home = d.ok().unwrap().obj.unwrap();
    let f = alice.new_file(&home, "notes");
    assert!(alice.write(&f, 0, b"mine", StableHow::Unstable).is_ok());
    let denied = bob.write(&f, 0, b"theirs", StableHow::Unstable);
    assert_eq!(denied.status(), Nfsstat3::Acces);
    assert!(denied.into_result().unwrap_err().1.file_wcc.after.is_some());
    assert_eq!(bob.create(&home, "x", Createhow3::Unchecked(Sattr3::default())).status(), Nfsstat3::Acces);
    let granted: Access3Res = bob.call(Nfs3Proc::Access, &Access3Args { object: f.clone(), access: 0x3f });
    assert_eq!(granted.ok().unwrap().access, ACCESS3_READ);
    let chown = bob.setattr(&f, Sattr3 { uid: Some(1001), ..Default::default() }, None);
    assert_eq!(chown.status(), Nfsstat3::Perm);

    let calls = |f: &dyn Fn()| {
        let before = srv.store.act_as_calls();
        f();
        srv.store.act_as_calls() - before
    };
    assert_eq!(calls(&|| assert!(alice.getattr(&f).is_ok())), 0, "GETATTR needs no identity");
    assert_eq!(calls(&|| assert!(alice.read(&f, 0, 4).is_ok())), 1);
    let rename = || {
        let r: Rename3Res =
            alice.call(Nfs3Proc::Rename, &Rename3Args { from: at(&home, "notes"), to: at(&home, "n2") });
        assert!(r.is_ok());
    };
    assert_eq!(calls(&rename), 1, "two handles, one identity");
    let link = || {
        let r: Link3Res = alice.call(Nfs3Proc::Link, &Link3Args { file: f.clone(), link: at(&home, "n3") });
        assert!(r.is_ok());
    };
    assert_eq!(calls(&link), 1);
}

#[test]
fn export_policy_read_only_client_list_secure_and_squash() {
    let ro = ClientOptions { access: Access::ReadOnly, ..rw() };
    let srv = Server::new(5, ro);
    let c = srv.client(0);
    let root = c.root();
    assert_eq!(c.create(&root, "f", Createhow3::Unchecked(Sattr3::default())).status(), Nfsstat3::Rofs);
    let a: Access3Res = c.call(Nfs3Proc::Access, &Access3Args { object: root.clone(), access: 0x3f });
    assert_eq!(a.ok().unwrap().access & (ACCESS3_MODIFY | ACCESS3_DELETE), 0);

    let net = |s: &str| HostMatch::Net { addr: s.parse().unwrap(), prefix_len: 32 };
    let srv = Server::with_rules(6, vec![ClientRule { host: net("10.0.0.1"), options: rw() }]);
    let mut stranger = srv.client(0);
    assert_eq!(stranger.mnt("/sim").status(), Mountstat3::Acces);
    stranger.peer = "10.0.0.1:700".parse().unwrap();
    let root = stranger.root();
    stranger.peer = "127.0.0.1:700".parse().unwrap();
    assert_eq!(stranger.getattr(&root).status(), Nfsstat3::Acces, "the client list is checked on every call");
    stranger.peer = "10.0.0.1:40000".parse().unwrap();
    assert_eq!(stranger.getattr(&root).status(), Nfsstat3::Perm, "secure: a reserved port");

    let squashed = ClientOptions { squash: Squash::Root, anonuid: 65534, anongid: 65534, ..rw() };
    let srv = Server::new(7, squashed);
    let c = srv.client(0);
    let root = c.root();
    let made = c.create(&root, "f", Createhow3::Guarded(Sattr3::default())).ok().unwrap();
    assert_eq!(made.obj_attributes.unwrap().uid, 65534, "root is squashed");
    assert_eq!(c.mnt("/elsewhere").status(), Mountstat3::Noent);
    assert_eq!(c.mnt("/sim/missing").status(), Mountstat3::Noent);
}

/// MNT reports the status of its reply, so that the statistics count a
/// refused mount as an error.
#[test]
fn mnt_reports_its_status_for_the_statistics() {
    let net = |s: &str| HostMatch::Net { addr: s.parse().unwrap(), prefix_len: 32 };
    let srv = Server::with_rules(9, vec![ClientRule { host: net("127.0.0.1"), options: rw() }]);
    let mut c = srv.client(0);
    assert_eq!(c.mnt_reported("/sim"), (Mountstat3::Ok, Some(0)));
    assert_eq!(c.mnt_reported("/elsewhere"), (Mountstat3::Noent, Some(Mountstat3::Noent as u32)));
    c.peer = "10.0.0.1:700".parse().unwrap();
    assert_eq!(c.mnt_reported("/sim"), (Mountstat3::Acces, Some(Mountstat3::Acces as u32)));
}

#[test]
fn wcc_data_and_sizes_follow_truncation_and_writes() {
    let srv = Server::new(8, rw());
    let c = srv.client(0);
    let root = c.root();
    let fh = c.new_file(&root, "f");
    assert!(c.write(&fh, 0, &[7; 10_000], StableHow::Unstable).is_ok());
    let cut = c.setattr(&fh, Sattr3 { size: Some(100), ..Default::default() }, None).ok().unwrap();
    assert_eq!(cut.obj_wcc.before.unwrap().size, 10_000);
    assert_eq!(size(&cut.obj_wcc.after), 100);
    let r = c.read(&fh, 0, 200).ok().unwrap();
    assert_eq!((r.data.len(), r.eof), (100, true));
    let w = c.write(&fh, 1000, b"x", StableHow::Unstable).ok().unwrap();
    assert_eq!((w.file_wcc.before.unwrap().size, size(&w.file_wcc.after)), (100, 1001));
    let hole = c.read(&fh, 100, 900).ok().unwrap();
    assert!(hole.data.iter().all(|b| *b == 0), "a hole reads as zeros");
    let dir = c.getattr(&root).ok().unwrap().obj_attributes;
    let rm: Remove3Res = c.call(Nfs3Proc::Remove, &Remove3Args { object: at(&root, "f") });
    let wcc = rm.ok().unwrap().dir_wcc;
    let before = wcc.before.unwrap();
    assert_eq!((before.mtime, before.ctime), (dir.mtime, dir.ctime), "pre-op attributes are the directory's before");
    assert!(wcc.after.unwrap().mtime > dir.mtime);
}

/// Pre-op attributes say the change was the directory's only one (the
/// client then keeps what it cached of it): a change that another change,
/// of any protocol, overlapped gets none, and the client looks again.
#[test]
fn a_change_another_overlapped_gets_no_pre_op_attributes() {
    let srv = Server::new(9, rw());
    let c = srv.client(0);
    let root = c.root();
    let dir = srv.store.lookup_path(1, b"/").unwrap();
    let running = srv.exports.dir_changes().begin(&dir);
    let made = c.create(&root, "f", Createhow3::Unchecked(Sattr3::default())).ok().unwrap();
    assert!(made.dir_wcc.before.is_none() && made.dir_wcc.after.is_some(), "{:?}", made.dir_wcc);
    let mv: Rename3Res = c.call(Nfs3Proc::Rename, &Rename3Args { from: at(&root, "f"), to: at(&root, "g") });
    let mv = mv.ok().unwrap();
    assert!(mv.fromdir_wcc.before.is_none() && mv.todir_wcc.before.is_none());
    drop(running);
    let rm: Remove3Res = c.call(Nfs3Proc::Remove, &Remove3Args { object: at(&root, "g") });
    assert!(rm.ok().unwrap().dir_wcc.before.is_some(), "alone again");
    let made = c.create(&root, "h", Createhow3::Unchecked(Sattr3::default())).ok().unwrap();
    assert!(made.dir_wcc.before.is_some());
    // A rename within one directory is one change of it.
    let mv: Rename3Res = c.call(Nfs3Proc::Rename, &Rename3Args { from: at(&root, "h"), to: at(&root, "i") });
    let mv = mv.ok().unwrap();
    assert!(mv.fromdir_wcc.before.is_some() && mv.fromdir_wcc == mv.todir_wcc, "{mv:?}");
    assert_eq!(srv.exports.dir_changes().in_flight(), 0);
}

#[test]
fn a_failed_commit_changes_the_verifier_for_the_next_commit_of_another_client() {
    let srv = Server::new(9, rw());
    let (a, b) = (srv.client(1000), srv.client(1001));
    let root = srv.client(0).root();
    let fa = a.new_file(&root, "a");
    let fb = b.new_file(&root, "b");
    let v0 = a.write(&fa, 0, b"a's data", StableHow::Unstable).ok().unwrap().verf;
    assert!(b.write(&fb, 0, b"b's data", StableHow::Unstable).is_ok());
    let fileid_b = b.getattr(&fb).ok().unwrap().obj_attributes.fileid;
    srv.store.inject(SimFault::fail(SimPoint::Sync, libc::EIO).on(fileid_b));
    let failed = b.commit(&fb);
    assert_eq!(failed.status(), Nfsstat3::Io);
    assert!(failed.into_result().unwrap_err().1.file_wcc.after.is_some());
    let v1 = a.commit(&fa).ok().unwrap().verf;
    assert_ne!(v1, v0, "a's COMMIT tells it to resend: b's failure may have taken a's data too");
    // Resent and committed under the new epoch, it holds.
    assert_eq!(a.write(&fa, 0, b"a's data", StableHow::Unstable).ok().unwrap().verf, v1);
    assert_eq!(a.commit(&fa).ok().unwrap().verf, v1);

    // A failed WRITE (not EAGAIN) changes the verifier too; the reply to
    // the next one carries the new epoch, read before its data went in.
    srv.store.inject(SimFault::fail(SimPoint::Write, libc::EIO));
    assert_eq!(a.write(&fa, 0, b"x", StableHow::Unstable).status(), Nfsstat3::Io);
    let v2 = a.write(&fa, 0, b"x", StableHow::Unstable).ok().unwrap().verf;
    assert_ne!(v2, v1);
    srv.store.inject(SimFault::fail(SimPoint::Write, libc::EAGAIN));
    assert_eq!(a.write(&fa, 0, b"x", StableHow::Unstable).status(), Nfsstat3::Jukebox);
    assert_eq!(a.commit(&fa).ok().unwrap().verf, v2, "EAGAIN loses nothing");
    // A torn write fails and changes it as well.
    srv.store.inject(SimFault { point: SimPoint::Write, fileid: None, action: SimAction::Torn, count: 1 });
    assert_eq!(a.write(&fa, 0, &[1; 4096], StableHow::FileSync).status(), Nfsstat3::Io);
    assert_ne!(a.commit(&fa).ok().unwrap().verf, v2);
}

#[test]
fn in_an_ha_pair_an_io_error_the_whole_export_shares_gets_no_reply_one_files_own_does() {
    let write = |srv: &Server, f: &NfsFh3| {
        let data = Bytes::from_static(b"data");
        let args = Write3Args { file: f.clone(), offset: 0, count: 4, stable: StableHow::FileSync, data };
        srv.client(0).try_run::<_, Write3Res>(&srv.nfs, Nfs3Proc::Write as u32, &args)
    };
    // Two flushes fail: the WRITE's, then the export's own check.
    let export_fails = SimFault { point: SimPoint::Sync, fileid: None, action: SimAction::Fail(libc::EIO), count: 2 };

    let srv = Server::holding_calls_when_storage_fails(11, rw());
    let root = srv.client(0).root();
    let f = srv.client(0).new_file(&root, "f");
    srv.store.inject(export_fails);
    assert!(matches!(write(&srv, &f), Err(AcceptError::Drop)), "no reply: the client retransmits");
    // The retransmission, once the storage works again, is answered.
    assert!(write(&srv, &f).unwrap().is_ok());
    // One file's flush fails on storage that works: its client is told.
    let fileid = srv.client(0).getattr(&f).ok().unwrap().obj_attributes.fileid;
    srv.store.inject(SimFault::fail(SimPoint::Sync, libc::EIO).on(fileid));
    assert_eq!(write(&srv, &f).unwrap().status(), Nfsstat3::Io);

    // The storage fails as the handle is opened (a file system that shut
    // down fails open_by_handle_at too): the export is known from the
    // handle, so the call is held all the same. It was answered with
    // NFS3ERR_IO once, and the HA lab's client saw the error.
    srv.store.inject(SimFault::fail(SimPoint::Open, libc::EIO));
    srv.store.inject(SimFault::fail(SimPoint::Sync, libc::EIO));
    assert!(matches!(write(&srv, &f), Err(AcceptError::Drop)), "no reply: the client retransmits");
    assert!(write(&srv, &f).unwrap().is_ok());

    // Outside an HA pair, every I/O error is answered, as knfsd does.
    let plain = Server::new(11, rw());
    let root = plain.client(0).root();
    let f = plain.client(0).new_file(&root, "f");
    plain.store.inject(export_fails);
    assert_eq!(write(&plain, &f).unwrap().status(), Nfsstat3::Io);
}

#[test]
fn a_crash_keeps_stable_writes_and_loses_uncommitted_ones() {
    let srv = Server::new(10, rw());
    let c = srv.client(0);
    let root = c.root();
    let fh = c.new_file(&root, "f");
    assert!(c.write(&fh, 0, b"stable", StableHow::FileSync).is_ok());
    assert!(c.write(&fh, 6, b"-committed", StableHow::Unstable).is_ok());
    assert!(c.commit(&fh).is_ok());
    assert!(c.write(&fh, 16, b"-lost", StableHow::Unstable).is_ok());
    let v = c.commit(&root).status();
    assert_eq!(v, Nfsstat3::Ok, "COMMIT of a directory flushes it");
    srv.store.crash(keel_store::sim::CrashMode::DurableOnly);
    let r = c.read(&fh, 0, 100).ok().unwrap();
    assert_eq!(&r.data[..], b"stable-committed");

    // On an async export nothing waits for the disk, as knfsd's `async`:
    // the reply says FILE_SYNC and a crash loses the data.
    let srv = Server::new(11, ClientOptions { sync: false, ..rw() });
    let c = srv.client(0);
    let root = c.root();
    let fh = c.new_file(&root, "f");
    let w = c.write(&fh, 0, b"promised", StableHow::FileSync).ok().unwrap();
    assert_eq!(w.committed, StableHow::FileSync);
    srv.store.crash(keel_store::sim::CrashMode::DurableOnly);
    assert_eq!(c.lookup(&root, "f").status(), Nfsstat3::Noent);
}

#[test]
fn exclusive_create_is_idempotent_and_unchecked_truncates() {
    let srv = Server::new(12, rw());
    let c = srv.client(0);
    let root = c.root();
    let verf = *b"verifier";
    let first = c.create(&root, "x", Createhow3::Exclusive(verf)).ok().unwrap().obj.unwrap();
    let again = c.create(&root, "x", Createhow3::Exclusive(verf)).ok().unwrap().obj.unwrap();
    assert_eq!(first, again, "a retransmission finds its own file");
    assert_eq!(c.create(&root, "x", Createhow3::Exclusive(*b"another!")).status(), Nfsstat3::Exist);
    assert!(c.write(&first, 0, b"data", StableHow::Unstable).is_ok());
    let trunc = Createhow3::Unchecked(Sattr3 { size: Some(0), ..Default::default() });
    let same = c.create(&root, "x", trunc).ok().unwrap();
    assert_eq!((same.obj, same.obj_attributes.unwrap().size), (Some(first), 0));
}

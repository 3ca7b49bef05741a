//! The simulator against the real thing: the same operations on
//! `keel_store::sim::SimStore` and on the local store over a temporary
//! directory, compared answer by answer (error kinds, lock conflicts) and
//! by the tree they leave (names, types, modes, link counts, data).
//!
//! The rules Keel decides itself are shared (`keel_store::rules`); what
//! the local store leaves to Linux (rename into a directory's own subtree
//! or over its ancestor, over a non-empty directory, a file over a
//! directory and back; unlink of a directory; the arithmetic of OFD
//! locks), the simulator models. This test is what keeps that model
//! honest. Needs root, as Keel does (identity switches per call).

use std::collections::HashMap;
use std::io;

use keel_store::lock::LOCK_OFFSET_MAX;
use keel_store::sim::SimStore;
use keel_store::*;
use keel_store_local::*;
use keel_testkit::procs::TempDir;

type Name = &'static [u8];

/// One step of a script. Directories are '/'-separated paths from the
/// export root ("" is the root); names are single components, passed to
/// the store as they are.
#[derive(Debug, Clone, Copy)]
enum Op {
    Create(&'static str, Name, CreateMode),
    CreateSized(&'static str, Name, u64),
    Mkdir(&'static str, Name),
    Symlink(&'static str, Name, &'static [u8]),
    /// A new name in a directory for the object at a path.
    Link(&'static str, &'static str, Name),
    Remove(&'static str, Name),
    Rmdir(&'static str, Name),
    Rename(&'static str, Name, &'static str, Name),
    Write(&'static str, &'static [u8]),
    Truncate(&'static str, u64),
    Lookup(&'static str, Name),
    Chmod(&'static str, u32),
    Chown(&'static str, u32, u32),
    /// Acts as this user (uid = gid, no other groups) from here on; 0 is
    /// root.
    As(u32),
    /// A lock-holding description, by number, of the object at a path.
    Open(u8, &'static str),
    Lock(u8, LockKind, u64, u64),
    Test(u8, LockKind, u64, u64),
    Unlock(u8, u64, u64),
    Close(u8),
    /// ALLOCATE and DEALLOCATE of a file's range (offset, length).
    Allocate(&'static str, u64, u64),
    Punch(&'static str, u64, u64),
    /// COPY from a file's offset to another's (or the same one's), length.
    Copy(&'static str, u64, &'static str, u64, u64),
    /// SEEK for data (true) or a hole from an offset.
    Seek(&'static str, u64, bool),
}

/// How a step ended, comparable across stores: errno or error kind, and
/// what a lock request ran into.
fn outcome<T>(r: StoreResult<T>, ok: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(v) => ok(v),
        Err(e) => match e.raw_os_error() {
            Some(n) => format!("errno {n} ({})", io::Error::from_raw_os_error(n)),
            None => format!("{e:?}"),
        },
    }
}

fn done<T>(_: T) -> String {
    "ok".into()
}

fn conflict(c: Option<LockConflict>) -> String {
    match c {
        None => "granted".into(),
        Some(c) => format!("held: {:?} {}+{}", c.kind, c.range.start, c.range.len),
    }
}

fn walk<S: Store>(s: &S, who: &S::Caller, path: &str) -> StoreResult<S::Object> {
    let mut obj = s.lookup_path(1, b"")?;
    for c in path.split('/').filter(|c| !c.is_empty()) {
        obj = s.lookup(who, &obj, c.as_bytes())?.0;
    }
    Ok(obj)
}

fn cred(uid: u32) -> Cred {
    if uid == 0 { Cred::ROOT } else { Cred::new(uid, uid, &[]) }
}

/// Runs `script` (as root until it says otherwise) and returns each
/// step's outcome.
fn run<S: Store>(s: &S, script: &[Op]) -> Vec<String> {
    let mut who = Some(s.act_as(&Cred::ROOT).expect("act as root"));
    let mut lock_files: HashMap<u8, S::LockFile> = HashMap::new();
    let mut outcomes = Vec::with_capacity(script.len());
    for op in script {
        if let Op::As(uid) = *op {
            // One identity at a time on a thread: the old one goes first.
            drop(who.take());
            who = Some(s.act_as(&cred(uid)).expect("act as the user"));
            outcomes.push("ok".into());
            continue;
        }
        let who = who.as_ref().expect("an identity");
        outcomes.push(step(s, who, &mut lock_files, *op));
    }
    outcomes
}

fn step<S: Store>(s: &S, who: &S::Caller, lock_files: &mut HashMap<u8, S::LockFile>, op: Op) -> String {
    let none = SetAttrs::default();
    match op {
        Op::Create(dir, name, mode) => {
            outcome(walk(s, who, dir).and_then(|d| s.create(who, &d, name, mode, &none, false)), |c| {
                format!("ok, size {}", c.attrs.size)
            })
        }
        Op::CreateSized(dir, name, size) => {
            let set = SetAttrs { size: Some(size), ..none };
            let r = walk(s, who, dir).and_then(|d| s.create(who, &d, name, CreateMode::Unchecked, &set, false));
            outcome(r, |c| format!("ok, size {}", c.attrs.size))
        }
        Op::Mkdir(dir, name) => outcome(walk(s, who, dir).and_then(|d| s.mkdir(who, &d, name, &none, false)), done),
        Op::Symlink(dir, name, target) => {
            outcome(walk(s, who, dir).and_then(|d| s.symlink(who, &d, name, target, &none, false)), done)
        }
        Op::Link(file, dir, name) => {
            let r = walk(s, who, file).and_then(|f| s.link(who, &f, &walk(s, who, dir)?, name, false));
            outcome(r, |a| format!("ok, nlink {}", a.nlink))
        }
        Op::Remove(dir, name) => outcome(walk(s, who, dir).and_then(|d| s.remove(who, &d, name, false)), done),
        Op::Rmdir(dir, name) => outcome(walk(s, who, dir).and_then(|d| s.rmdir(who, &d, name, false)), done),
        Op::Rename(fd, from, td, to) => {
            let r = walk(s, who, fd).and_then(|f| s.rename(who, &f, from, &walk(s, who, td)?, to, false));
            outcome(r, done)
        }
        Op::Write(file, data) => {
            let r = walk(s, who, file).and_then(|f| s.write(who, &f, 0, data, Stability::Unstable));
            outcome(r, |w| format!("ok, size {}", w.after.size))
        }
        Op::Truncate(file, size) => {
            let set = SetAttrs { size: Some(size), ..none };
            outcome(walk(s, who, file).and_then(|f| s.setattr(who, &f, &set, None, false)), done)
        }
        Op::Open(n, file) => outcome(walk(s, who, file).and_then(|f| s.open_for_locks(who, &f)), |l| {
            lock_files.insert(n, l);
            "ok".into()
        }),
        Op::Lock(n, kind, start, len) => outcome(lock_files[&n].try_lock(kind, LockRange::new(start, len)), conflict),
        Op::Test(n, kind, start, len) => outcome(lock_files[&n].test(kind, LockRange::new(start, len)), conflict),
        Op::Unlock(n, start, len) => outcome(lock_files[&n].unlock(LockRange::new(start, len)), done),
        Op::Close(n) => {
            lock_files.remove(&n);
            "ok".into()
        }
        Op::Allocate(file, offset, len) => {
            outcome(walk(s, who, file).and_then(|f| s.fallocate(who, &f, Space::Allocate, offset, len, false)), done)
        }
        Op::Punch(file, offset, len) => {
            outcome(walk(s, who, file).and_then(|f| s.fallocate(who, &f, Space::PunchHole, offset, len, false)), done)
        }
        Op::Copy(from, from_offset, to, to_offset, len) => {
            let r = walk(s, who, from)
                .and_then(|f| s.copy_range(who, &f, from_offset, &walk(s, who, to)?, to_offset, len, false));
            outcome(r, |n| format!("ok, {n} bytes"))
        }
        Op::Seek(file, offset, data) => {
            let what = if data { SeekWhat::Data } else { SeekWhat::Hole };
            outcome(walk(s, who, file).and_then(|f| s.seek(who, &f, offset, what)), |at| format!("ok, at {at}"))
        }
        Op::Lookup(dir, name) => {
            let r = walk(s, who, dir).and_then(|d| s.lookup(who, &d, name));
            outcome(r, |(_, a)| format!("ok, {:?} {:o}", a.ftype, a.mode))
        }
        Op::Chmod(path, mode) => {
            let set = SetAttrs { mode: Some(mode), ..none };
            outcome(walk(s, who, path).and_then(|f| s.setattr(who, &f, &set, None, false)), done)
        }
        Op::Chown(path, uid, gid) => {
            let set = SetAttrs { uid: Some(uid), gid: Some(gid), ..none };
            outcome(walk(s, who, path).and_then(|f| s.setattr(who, &f, &set, None, false)), done)
        }
        Op::As(_) => unreachable!("handled by run"),
    }
}

/// The tree under the export root, one line per object: path, type, mode,
/// owner, link count (directories' too), and a file's data or a link's target.
fn tree<S: Store>(s: &S) -> Vec<String> {
    let who = &s.act_as(&Cred::ROOT).expect("act as root");
    let mut lines = Vec::new();
    let mut dirs = vec![(String::new(), s.lookup_path(1, b"").expect("the root"))];
    while let Some((path, dir)) = dirs.pop() {
        let mut names = Vec::new();
        s.readdir(who, &dir, 0, |e| {
            if e.name != b"." && e.name != b".." {
                names.push(e.name.to_vec());
            }
            true
        })
        .expect("readdir");
        names.sort();
        for name in names {
            let (obj, a) = s.lookup(who, &dir, &name).expect("lookup of a listed name");
            let child = format!("{path}/{}", String::from_utf8_lossy(&name));
            let body = match a.ftype {
                FileType::Regular => {
                    let data = s.read(who, &obj, 0, 1 << 16).expect("read").data.into_bytes().expect("data");
                    format!("{:?}", String::from_utf8_lossy(&data))
                }
                FileType::Symlink => {
                    format!("-> {:?}", String::from_utf8_lossy(&s.readlink(who, &obj).expect("readlink")))
                }
                FileType::Directory => {
                    dirs.push((child.clone(), obj));
                    String::new()
                }
                _ => String::new(),
            };
            lines.push(format!("{child} {:?} {:o} {}:{} nlink {} {body}", a.ftype, a.mode, a.uid, a.gid, a.nlink));
        }
    }
    lines.sort();
    lines
}

/// Runs `script` on both stores (the local one as root on a worker
/// thread, as the server does) and fails listing every step and every
/// object where they differ.
fn compare(tag: &str, script: &'static [Op]) {
    if let Err(why) = keel_store_local::ident::check_privileges() {
        panic!("this test needs root, as Keel does (CI runs it as root): {why}");
    }
    let sim = SimStore::new(29);
    let sim_steps = run(&sim, script);
    let sim_tree = tree(&sim);
    let dir = TempDir::new(&format!("sim-agrees-{tag}"));
    let export_dir = dir.path().join("export");
    std::fs::create_dir(&export_dir).unwrap();
    // As the simulator's export root.
    std::fs::set_permissions(&export_dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let (local_steps, local_tree) = std::thread::spawn(move || {
        let key = HandleKey::from_bytes([5; 16]);
        let export = Export::open(&ExportSpec { id: 1, path: export_dir, fsid: None }, &key).unwrap();
        let local = LocalStore::new(vec![export], key, 1024).unwrap();
        (run(&local, script), tree(&local))
    })
    .join()
    .unwrap();
    let mut differ: Vec<String> = script
        .iter()
        .zip(sim_steps.iter().zip(&local_steps))
        .enumerate()
        .filter(|(_, (_, (sim, local)))| sim != local)
        .map(|(i, (op, (sim, local)))| format!("step {i} {op:?}: simulator {sim}, Linux {local}"))
        .collect();
    if sim_tree != local_tree {
        differ.push(format!("trees differ:\n simulator {sim_tree:#?}\n Linux {local_tree:#?}"));
    }
    assert!(differ.is_empty(), "the simulator and the local store disagree:\n{}", differ.join("\n"));
}

use Op::*;

const V1: CreateMode = CreateMode::Exclusive(*b"verifier");
const V2: CreateMode = CreateMode::Exclusive(*b"another!");
const GUARDED: CreateMode = CreateMode::Guarded;
const UNCHECKED: CreateMode = CreateMode::Unchecked;
const LONG_NAME: &[u8] = &[b'n'; NAME_BYTES_MAX + 1];
const LONGEST_NAME: &[u8] = &[b'n'; NAME_BYTES_MAX];

#[test]
fn names_and_create_modes_agree() {
    compare(
        "create",
        &[
            Create("", b"f", GUARDED),
            Create("", b"f", GUARDED),
            Create("", b"f", UNCHECKED),
            Write("f", b"hello"),
            CreateSized("", b"f", 2),
            Create("", b"x", V1),
            Create("", b"x", V1),
            Create("", b"x", V2),
            Write("x", b"data"),
            Create("", b"x", V1),
            Create("", b".", GUARDED),
            Create("", b"..", UNCHECKED),
            Create("", b"", GUARDED),
            Create("", b"a/b", GUARDED),
            Create("", b"nul\0", GUARDED),
            Create("", LONG_NAME, GUARDED),
            Create("", LONGEST_NAME, GUARDED),
            Create("f", b"inside-a-file", GUARDED),
            Create("f", b".", GUARDED),
            Mkdir("", b"d"),
            Mkdir("", b"d"),
            Create("", b"d", UNCHECKED),
            Create("", b"d", V1),
            Mkdir("d", b".."),
            Truncate("d", 0),
            Symlink("", b"s", b"f"),
            Symlink("", b"empty", b""),
            Symlink("", b"f", b"x"),
            Create("", b"s", UNCHECKED),
            Truncate("s", 0),
            Create("missing", b"f", GUARDED),
            Lookup("", b"."),
            Lookup("", b".."),
            Lookup("d", b".."),
            Lookup("", b""),
            Lookup("", b"missing"),
            Lookup("f", b"x"),
            Lookup("", LONG_NAME),
        ],
    );
}

#[test]
fn rename_link_and_remove_agree() {
    compare(
        "rename",
        &[
            Mkdir("", b"d"),
            Mkdir("d", b"e"),
            Create("d", b"f", GUARDED),
            Create("", b"g", GUARDED),
            Mkdir("", b"empty"),
            Mkdir("", b"full"),
            Create("full", b"x", GUARDED),
            // A directory into its own subtree, or over its ancestor.
            Rename("", b"d", "d/e", b"d"),
            Rename("", b"d", "d", b"x"),
            Rename("d", b"e", "", b"d"),
            Rename("d", b"f", "", b"d"),
            // Files and directories over each other.
            Rename("", b"g", "", b"d"),
            Rename("", b"g", "", b"empty"),
            Rename("d", b"e", "", b"g"),
            Rename("", b"empty", "", b"full"),
            Rename("", b"empty", "d", b"e"),
            Mkdir("", b"empty"),
            Rename("", b"d", "", b"empty"),
            // Dots, missing names, a name over itself and over a hard link.
            Rename("", b".", "", b"z"),
            Rename("", b"z", "", b".."),
            Rename("", b"missing", "", b"z"),
            Rename("", b"g", "", b"g"),
            Link("g", "", b"g2"),
            Rename("", b"g", "", b"g2"),
            Rename("", b"g2", "empty", b"g3"),
            // Links.
            Link("empty", "", b"dirlink"),
            Link("g", "", b"g"),
            Link("g", "", b".."),
            Link("g", "g", b"x"),
            // Removal.
            Remove("", b"empty"),
            Rmdir("", b"g"),
            Rmdir("", b"empty"),
            Remove("empty", b"f"),
            Rmdir("empty", b"e"),
            Rmdir("", b"."),
            Rmdir("", b".."),
            Remove("", b"."),
            Remove("", b"missing"),
            Remove("g", b"x"),
            Rmdir("", b"d"),
        ],
    );
}

/// ALLOCATE, DEALLOCATE, COPY and SEEK of files without holes (the
/// simulator has none: a file system may report all of a file as data).
#[test]
fn space_copy_and_seek_agree() {
    compare(
        "space",
        &[
            Create("", b"f", GUARDED),
            Create("", b"g", GUARDED),
            Mkdir("", b"d"),
            Write("f", b"0123456789abcdef"),
            Seek("f", 3, true),
            Seek("f", 3, false),
            Seek("f", 16, true),
            Seek("f", 16, false),
            Seek("d", 0, true),
            Punch("f", 4, 4),
            Punch("f", 14, 100),
            Punch("f", 0, 0),
            Allocate("f", 20, 4),
            Allocate("f", 2, 2),
            Allocate("d", 0, 1),
            Allocate("f", i64::MAX as u64, 1),
            Copy("f", 0, "g", 2, 8),
            Copy("f", 20, "g", 0, 100),
            Copy("f", 30, "g", 0, 1),
            Copy("f", 0, "f", 4, 8),
            Copy("f", 0, "f", 16, 4),
            Copy("d", 0, "g", 0, 1),
            As(1000),
            Copy("f", 0, "g", 0, 1),
            Punch("g", 0, 1),
        ],
    );
}

#[test]
fn byte_range_locks_agree() {
    const EX: LockKind = LockKind::Exclusive;
    const SH: LockKind = LockKind::Shared;
    compare(
        "locks",
        &[
            Create("", b"f", GUARDED),
            Mkdir("", b"d"),
            Open(9, "d"),
            Open(1, "f"),
            Open(2, "f"),
            Lock(1, EX, 0, 10),
            Lock(1, EX, 10, 10),
            // Touching locks of one description and kind are one.
            Test(2, SH, 0, 1),
            Lock(1, EX, 15, 10),
            Test(2, SH, 24, 1),
            // Split around a lock of the other kind.
            Lock(1, SH, 5, 5),
            Test(2, SH, 0, 3),
            Test(2, SH, 0, 100),
            Test(2, EX, 8, 10),
            Lock(2, SH, 5, 5),
            Test(2, EX, 12, 1),
            Lock(2, EX, 12, 1),
            Unlock(1, 0, 0),
            Test(1, EX, 0, 0),
            Lock(1, EX, 6, 1),
            // Shared with shared; the end of the file and beyond.
            Lock(1, SH, 100, 0),
            Lock(2, SH, 200, 5),
            Test(2, EX, 150, 1),
            Lock(2, EX, LOCK_OFFSET_MAX - 1, 10),
            Test(1, SH, LOCK_OFFSET_MAX, 1),
            Lock(1, EX, LOCK_OFFSET_MAX + 1, 1),
            Test(1, EX, LOCK_OFFSET_MAX + 1, 0),
            // Which of several conflicting locks a test reports.
            Open(3, "f"),
            Lock(3, SH, 300, 1),
            Lock(2, SH, 260, 1),
            Lock(3, SH, 250, 1),
            Test(1, EX, 240, 100),
            Unlock(2, 0, 0),
            Lock(2, SH, 240, 1),
            Test(1, EX, 240, 100),
            Close(3),
            // Closing a description releases its locks.
            Close(2),
            Test(1, EX, 0, 0),
            Close(1),
        ],
    );
}

#[test]
fn permissions_as_a_user_agree() {
    // The simulator models the default every systemd distribution sets.
    let protected = std::fs::read_to_string("/proc/sys/fs/protected_hardlinks").unwrap_or_default();
    assert_eq!(protected.trim(), "1", "this test expects fs.protected_hardlinks = 1, as the simulator models");
    compare(
        "perm",
        &[
            Mkdir("", b"ro"),
            Mkdir("", b"tmp"),
            Chmod("tmp", 0o1777),
            Create("tmp", b"rootfile", GUARDED),
            As(1000),
            Create("ro", b"x", GUARDED),
            Mkdir("ro", b"x"),
            Create("ro", b"..", GUARDED),
            Create("tmp", b"mine", GUARDED),
            Create("tmp", b"rootfile", UNCHECKED),
            Create("tmp", b"rootfile", V1),
            Write("tmp/rootfile", b"no"),
            Truncate("tmp/rootfile", 0),
            Chmod("tmp/rootfile", 0o777),
            Chown("tmp/mine", 0, 1000),
            Chown("tmp/mine", 1000, 1000),
            Remove("tmp", b"rootfile"),
            Rename("tmp", b"rootfile", "tmp", b"z"),
            Rename("tmp", b"mine", "ro", b"mine"),
            Link("tmp/rootfile", "tmp", b"rootlink"),
            Mkdir("tmp", b"ud"),
            Create("tmp/ud", b"y", GUARDED),
            Chmod("tmp/ud", 0o500),
            Create("tmp/ud", b"z", GUARDED),
            Open(1, "tmp/mine"),
            Open(2, "tmp/rootfile"),
            As(2000),
            Remove("tmp", b"mine"),
            Create("tmp/ud", b"w", GUARDED),
            Remove("tmp/ud", b"y"),
            Write("tmp/mine", b"no"),
            As(0),
            Remove("tmp", b"mine"),
            Chmod("tmp/ud", 0o700),
        ],
    );
}

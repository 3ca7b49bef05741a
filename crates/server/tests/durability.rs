//! "Any write the server acknowledged as stable must survive kill -9, a
//! crash": power-cut emulation, the xfstests "godown" method.
//!
//! Keel serves a directory of an XFS on a loop device made by the test. A
//! client (the independent `nfs3_types` encoding, driven call by call) makes
//! one change and gets its reply; then Keel is killed with SIGKILL and at
//! once `xfs_io -x -c shutdown` (without -f: the log is not flushed, so
//! whatever XFS had not yet written to its log is lost, as in a power cut)
//! stops the file system; it is unmounted and mounted again (log recovery),
//! and the test looks at what is on disk.
//!
//! One change per power cut: on XFS any fsync forces the whole log, so a
//! later committed change would make an earlier uncommitted one durable and
//! hide a missing commit. Each scenario therefore has a `setup`, made durable
//! by the test itself (syncfs), and one `act`, the change under test, which
//! is the last thing before the power cut.
//!
//! The controls run the same method where loss must happen (an `async`
//! export; UNSTABLE writes never committed), and count the sectors the loop
//! device wrote between the act and the power cut: when fewer bytes reached
//! the "disk" than the change needs, the change cannot be there, so the
//! check must report it missing. That proves every check can fail.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use keel_testkit::disk::XfsDisk;
use keel_testkit::nfs::{Fh, Nfs, nfsstat3, pattern};
use keel_testkit::procs::md5_of;
use keel_testkit::server::{ExportOpts, TestServer, digest};
use nfs3_types::nfs3::{Nfs3Option, createhow3, createverf3, sattr3, stable_how};

// ---------------------------------------------------------------------------
// What must be on disk after the power cut.
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Want {
    /// A regular file with exactly these bytes.
    File(Vec<u8>),
    Dir,
    Absent,
    Symlink(String),
    Fifo,
    /// Permission bits of an existing object.
    Mode(u32),
    /// The same inode as another path.
    SameInode(String),
}

#[derive(Clone, Debug)]
struct Check {
    scenario: &'static str,
    /// Relative to the export root.
    path: String,
    want: Want,
    /// The handle the server gave for it, to use after restarts.
    handle: Option<Fh>,
}

fn check_on_disk(root: &Path, c: &Check) -> Result<(), String> {
    let path = root.join(&c.path);
    let meta = std::fs::symlink_metadata(&path);
    let what = format!("{}: {}", c.scenario, c.path);
    match (&c.want, meta) {
        (Want::Absent, Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        (Want::Absent, Ok(_)) => Err(format!("{what} exists but was removed")),
        (_, Err(e)) => Err(format!("{what} is missing ({e})")),
        (Want::File(content), Ok(m)) => {
            if !m.is_file() {
                return Err(format!("{what} is not a regular file"));
            }
            let (want, got) = (md5_of(content), digest(&path));
            if m.len() != content.len() as u64 || want != got {
                return Err(format!(
                    "{what} has {} bytes, md5 {got}; acknowledged {} bytes, md5 {want}",
                    m.len(),
                    content.len()
                ));
            }
            Ok(())
        }
        (Want::Dir, Ok(m)) if m.is_dir() => Ok(()),
        (Want::Dir, Ok(_)) => Err(format!("{what} is not a directory")),
        (Want::Symlink(target), Ok(_)) => match std::fs::read_link(&path) {
            Ok(t) if t == Path::new(target) => Ok(()),
            other => Err(format!("{what}: symlink to {target:?} expected, found {other:?}")),
        },
        (Want::Fifo, Ok(m)) if m.file_type().is_fifo() => Ok(()),
        (Want::Fifo, Ok(_)) => Err(format!("{what} is not a fifo")),
        (Want::Mode(mode), Ok(m)) if m.permissions().mode() & 0o7777 == *mode => Ok(()),
        (Want::Mode(mode), Ok(m)) => {
            Err(format!("{what} has mode {:o}, acknowledged {mode:o}", m.permissions().mode() & 0o7777))
        }
        (Want::SameInode(other), Ok(m)) => match std::fs::symlink_metadata(root.join(other)) {
            Ok(o) if o.ino() == m.ino() => Ok(()),
            other_meta => Err(format!("{what} is not the same inode as {other}: {other_meta:?}")),
        },
    }
}

// ---------------------------------------------------------------------------
// Scenarios: one acknowledged change each.
// ---------------------------------------------------------------------------

struct Ctx {
    nfs: Nfs,
    root: Fh,
    checks: Vec<Check>,
    /// Write verifiers seen in replies during this server run.
    verifiers: Vec<[u8; 8]>,
    /// Reply fields that were wrong (wrong `committed`, COMMIT verifier...).
    reply_problems: Vec<String>,
    scenario: &'static str,
}

impl Ctx {
    fn expect(&mut self, path: &str, want: Want, handle: Option<Fh>) {
        self.checks.push(Check { scenario: self.scenario, path: path.into(), want, handle });
    }

    fn file_with(&mut self, name: &str, data: &[u8]) -> Fh {
        let fh = self.nfs.create_new(&self.root, name).unwrap_or_else(|s| panic!("CREATE {name}: {s:?}"));
        self.nfs.write_all(&fh, data, stable_how::FILE_SYNC).unwrap_or_else(|s| panic!("WRITE {name}: {s:?}"));
        fh
    }

    fn lookup(&mut self, dir: &Fh, name: &str) -> Fh {
        self.nfs.lookup(dir, name).unwrap_or_else(|s| panic!("LOOKUP {name}: {s:?}"))
    }

    /// Writes `data` with `stable` and checks what each reply claims.
    fn write_checked(&mut self, fh: &Fh, data: &[u8], stable: stable_how) {
        let replies = self.nfs.write_all(fh, data, stable).unwrap_or_else(|s| panic!("WRITE: {s:?}"));
        for w in replies {
            let enough = match stable {
                stable_how::FILE_SYNC => w.committed == stable_how::FILE_SYNC,
                stable_how::DATA_SYNC => w.committed != stable_how::UNSTABLE,
                stable_how::UNSTABLE => true,
            };
            if !enough {
                let msg = format!("{}: WRITE {stable:?} answered committed {:?}", self.scenario, w.committed);
                self.reply_problems.push(msg);
            }
            self.verifiers.push(w.verf);
        }
    }
}

type Step = fn(&mut Ctx);

struct Scenario {
    name: &'static str,
    setup: Step,
    act: Step,
    /// Fewest bytes that must reach the device for the act to be durable:
    /// its data, or one sector for a metadata change.
    durable_bytes_min: u64,
}

const FILE_SYNC_BYTES: usize = (3 << 20) + 4321;
const DATA_SYNC_BYTES: usize = (2 << 20) + 17;
const UNSTABLE_BYTES: usize = (8 << 20) + 5;
const SMALL_BYTES: usize = (64 << 10) + 3;
const TRUNCATE_FROM_BYTES: usize = 1 << 20;
const TRUNCATE_TO_BYTES: u64 = 1000;

fn nothing(_: &mut Ctx) {}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "WRITE FILE_SYNC",
            setup: |c| {
                c.nfs.create_new(&c.root, "file-sync.bin").unwrap();
            },
            act: |c| {
                let data = pattern(1, FILE_SYNC_BYTES);
                let fh = c.lookup(&c.root.clone(), "file-sync.bin");
                c.write_checked(&fh, &data, stable_how::FILE_SYNC);
                c.expect("file-sync.bin", Want::File(data), Some(fh));
            },
            durable_bytes_min: FILE_SYNC_BYTES as u64,
        },
        Scenario {
            name: "WRITE DATA_SYNC",
            setup: |c| {
                c.nfs.create_new(&c.root, "data-sync.bin").unwrap();
            },
            act: |c| {
                let data = pattern(2, DATA_SYNC_BYTES);
                let fh = c.lookup(&c.root.clone(), "data-sync.bin");
                c.write_checked(&fh, &data, stable_how::DATA_SYNC);
                c.expect("data-sync.bin", Want::File(data), Some(fh));
            },
            durable_bytes_min: DATA_SYNC_BYTES as u64,
        },
        Scenario {
            name: "WRITE UNSTABLE then COMMIT",
            setup: |c| {
                c.nfs.create_new(&c.root, "committed.bin").unwrap();
            },
            act: |c| {
                let data = pattern(3, UNSTABLE_BYTES);
                let fh = c.lookup(&c.root.clone(), "committed.bin");
                c.write_checked(&fh, &data, stable_how::UNSTABLE);
                let verf = c.nfs.commit(&fh).unwrap_or_else(|s| panic!("COMMIT: {s:?}"));
                if c.verifiers.last() != Some(&verf) {
                    c.reply_problems.push(format!("COMMIT verifier {verf:x?} is not the WRITEs' {:x?}", c.verifiers));
                }
                c.expect("committed.bin", Want::File(data), Some(fh));
            },
            durable_bytes_min: UNSTABLE_BYTES as u64,
        },
        Scenario {
            name: "CREATE",
            setup: nothing,
            act: |c| {
                let fh = c.nfs.create_new(&c.root, "created").unwrap();
                c.expect("created", Want::File(Vec::new()), Some(fh));
            },
            durable_bytes_min: 1,
        },
        Scenario {
            name: "CREATE EXCLUSIVE",
            setup: nothing,
            act: |c| {
                let how = createhow3::EXCLUSIVE(createverf3(*b"keel-dur"));
                let fh = c.nfs.create(&c.root, "created-exclusive", how).unwrap();
                c.expect("created-exclusive", Want::File(Vec::new()), Some(fh));
            },
            durable_bytes_min: 1,
        },
        Scenario {
            name: "MKDIR",
            setup: nothing,
            act: |c| {
                let fh = c.nfs.mkdir(&c.root, "made-dir").unwrap();
                c.expect("made-dir", Want::Dir, Some(fh));
            },
            durable_bytes_min: 1,
        },
        Scenario {
            name: "RENAME",
            setup: |c| {
                c.file_with("rename-from", &pattern(4, SMALL_BYTES));
            },
            act: |c| {
                let fh = c.lookup(&c.root.clone(), "rename-from");
                let root = c.root.clone();
                c.nfs.rename(&root, "rename-from", &root, "renamed").unwrap();
                c.expect("rename-from", Want::Absent, None);
                c.expect("renamed", Want::File(pattern(4, SMALL_BYTES)), Some(fh));
            },
            durable_bytes_min: 1,
        },
        Scenario {
            name: "RENAME to another directory",
            setup: |c| {
                let root = c.root.clone();
                let a = c.nfs.mkdir(&root, "move-a").unwrap();
                c.nfs.mkdir(&root, "move-b").unwrap();
                let fh = c.nfs.create_new(&a, "moved").unwrap();
                c.nfs.write_all(&fh, &pattern(5, SMALL_BYTES), stable_how::FILE_SYNC).unwrap();
            },
            act: |c| {
                let root = c.root.clone();
                let (a, b) = (c.lookup(&root, "move-a"), c.lookup(&root, "move-b"));
                let fh = c.lookup(&a, "moved");
                c.nfs.rename(&a, "moved", &b, "moved").unwrap();
                c.expect("move-a/moved", Want::Absent, None);
                c.expect("move-b/moved", Want::File(pattern(5, SMALL_BYTES)), Some(fh));
            },
            durable_bytes_min: 1,
        },
        Scenario {
            name: "RENAME over an existing file",
            setup: |c| {
                c.file_with("replace-src", &pattern(6, SMALL_BYTES));
                c.file_with("replace-dst", &pattern(7, SMALL_BYTES));
            },
            act: |c| {
                let root = c.root.clone();
                let old_dst = c.lookup(&root, "replace-dst");
                let src = c.lookup(&root, "replace-src");
                c.nfs.rename(&root, "replace-src", &root, "replace-dst").unwrap();
                c.expect("replace-src", Want::Absent, None);
                c.expect("replace-dst", Want::File(pattern(6, SMALL_BYTES)), Some(src));
                // The replaced file is gone: its handle must be stale.
                c.expect("(replaced file)", Want::Absent, Some(old_dst));
            },
            durable_bytes_min: 1,
        },
        Scenario {
            name: "REMOVE",
            setup: |c| {
                c.file_with("removed", &pattern(8, SMALL_BYTES));
            },
            act: |c| {
                let root = c.root.clone();
                let fh = c.lookup(&root, "removed");
                c.nfs.remove(&root, "removed").unwrap();
                c.expect("removed", Want::Absent, Some(fh));
            },
            durable_bytes_min: 1,
        },
        Scenario {
            name: "RMDIR",
            setup: |c| {
                c.nfs.mkdir(&c.root, "removed-dir").unwrap();
            },
            act: |c| {
                let root = c.root.clone();
                c.nfs.rmdir(&root, "removed-dir").unwrap();
                c.expect("removed-dir", Want::Absent, None);
            },
            durable_bytes_min: 1,
        },
        Scenario {
            name: "SETATTR size (truncate)",
            setup: |c| {
                c.file_with("truncated", &pattern(9, TRUNCATE_FROM_BYTES));
            },
            act: |c| {
                let fh = c.lookup(&c.root.clone(), "truncated");
                let attrs = sattr3 { size: Nfs3Option::Some(TRUNCATE_TO_BYTES), ..Default::default() };
                c.nfs.setattr(&fh, attrs).unwrap();
                let mut data = pattern(9, TRUNCATE_FROM_BYTES);
                data.truncate(TRUNCATE_TO_BYTES as usize);
                c.expect("truncated", Want::File(data), Some(fh));
            },
            durable_bytes_min: 1,
        },
        Scenario {
            name: "SETATTR mode",
            setup: |c| {
                c.file_with("chmodded", &pattern(10, SMALL_BYTES));
            },
            act: |c| {
                let fh = c.lookup(&c.root.clone(), "chmodded");
                c.nfs.setattr(&fh, sattr3 { mode: Nfs3Option::Some(0o600), ..Default::default() }).unwrap();
                c.expect("chmodded", Want::Mode(0o600), Some(fh));
            },
            durable_bytes_min: 1,
        },
        Scenario {
            name: "CREATE UNCHECKED of an existing file with size 0 (truncate)",
            setup: |c| {
                c.file_with("recreated", &pattern(11, TRUNCATE_FROM_BYTES));
            },
            act: |c| {
                let attrs = sattr3 { size: Nfs3Option::Some(0), ..Default::default() };
                let fh = c.nfs.create(&c.root.clone(), "recreated", createhow3::UNCHECKED(attrs)).unwrap();
                c.expect("recreated", Want::File(Vec::new()), Some(fh));
            },
            durable_bytes_min: 1,
        },
        Scenario {
            name: "LINK",
            setup: |c| {
                c.file_with("link-src", &pattern(12, SMALL_BYTES));
            },
            act: |c| {
                let root = c.root.clone();
                let fh = c.lookup(&root, "link-src");
                c.nfs.link(&fh, &root, "link-dst").unwrap();
                c.expect("link-dst", Want::File(pattern(12, SMALL_BYTES)), Some(fh));
                c.expect("link-dst", Want::SameInode("link-src".into()), None);
            },
            durable_bytes_min: 1,
        },
        Scenario {
            name: "SYMLINK",
            setup: nothing,
            act: |c| {
                let root = c.root.clone();
                c.nfs.symlink(&root, "symlinked", "file-sync.bin").unwrap();
                c.expect("symlinked", Want::Symlink("file-sync.bin".into()), None);
            },
            durable_bytes_min: 1,
        },
        Scenario {
            name: "MKNOD fifo",
            setup: nothing,
            act: |c| {
                let root = c.root.clone();
                c.nfs.mknod_fifo(&root, "fifo-made").unwrap();
                c.expect("fifo-made", Want::Fifo, None);
            },
            durable_bytes_min: 1,
        },
    ]
}

/// What one power cut showed.
struct Cycle {
    /// Checks of this cycle's act that failed on disk.
    lost: Vec<String>,
    checks: Vec<Check>,
    /// Bytes the device wrote between the start of the act and the cut.
    bytes_written: u64,
    verifiers: Vec<[u8; 8]>,
    reply_problems: Vec<String>,
}

/// Starts the server, runs `setup` (made durable by syncfs) and `act`, cuts
/// the power, mounts the file system again and checks the act's changes.
fn power_cycle(disk: &mut XfsDisk, server: &mut TestServer, export: &Path, sc: &Scenario) -> Cycle {
    if !server.is_running() {
        server.start_again();
    }
    let mut nfs = Nfs::connect(server.addr).unwrap();
    let root = nfs.mount(&export.display().to_string()).unwrap();
    let mut c =
        Ctx { nfs, root, checks: Vec::new(), verifiers: Vec::new(), reply_problems: Vec::new(), scenario: sc.name };
    (sc.setup)(&mut c);
    disk.syncfs();
    let before = disk.sectors_written();
    (sc.act)(&mut c);
    server.kill9();
    disk.power_cut();
    let bytes_written = (disk.sectors_written() - before) * 512;
    disk.mount();
    let lost = c.checks.iter().filter_map(|ch| check_on_disk(export, ch).err()).collect();
    Cycle { lost, checks: c.checks, bytes_written, verifiers: c.verifiers, reply_problems: c.reply_problems }
}

fn export_opts(export: &Path, sync: bool) -> ExportOpts {
    let options = format!("access = \"rw\"\nsquash = \"no_root_squash\"\nsync = {sync}");
    ExportOpts::new(1, &export.display().to_string(), &options)
}

fn make_export(disk: &XfsDisk) -> PathBuf {
    let export = disk.mnt.join("export");
    std::fs::create_dir(&export).unwrap();
    export
}

// ---------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------

/// On a `sync` export every acknowledged change survives a power cut: stable
/// writes (FILE_SYNC, DATA_SYNC, UNSTABLE + COMMIT) and every metadata
/// change, each tested as the last thing before its own power cut. Then,
/// on the recovered file system, every handle given out by the earlier
/// server runs still works (removed objects' handles are stale), the data
/// reads back through them, and each server run had its own write verifier.
#[test]
fn sync_export_keeps_every_acknowledged_change_through_power_cuts() {
    let started = Instant::now();
    let mut disk = XfsDisk::new("sync");
    let export = make_export(&disk);
    let mut server = TestServer::start("durability-sync", vec![export_opts(&export, true)], "");
    let mut all_checks: Vec<Check> = Vec::new();
    let mut survived: Vec<Check> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    let mut run_verifiers: Vec<[u8; 8]> = Vec::new();
    for sc in scenarios() {
        let cycle = power_cycle(&mut disk, &mut server, &export, &sc);
        for lost in &cycle.lost {
            problems.push(format!(
                "LOST after power cut: {lost} (the device wrote {} bytes after the act)",
                cycle.bytes_written
            ));
        }
        problems.extend(cycle.reply_problems);
        if let Some(v) = cycle.verifiers.first() {
            if cycle.verifiers.iter().any(|x| x != v) {
                problems.push(format!("{}: verifier changed within one server run: {:x?}", sc.name, cycle.verifiers));
            }
            run_verifiers.push(*v);
        }
        // Earlier acts that survived their own power cut must survive the
        // later ones too.
        for ch in &survived {
            if let Err(e) = check_on_disk(&export, ch) {
                problems.push(format!("after the power cut of {:?}: {e}", sc.name));
            }
        }
        if cycle.lost.is_empty() {
            survived.extend(cycle.checks.iter().cloned());
        }
        all_checks.extend(cycle.checks);
    }

    // Restart on the recovered file system: old handles, new verifier.
    server.start_again();
    let mut nfs = Nfs::connect(server.addr).unwrap();
    let root = nfs.mount(&export.display().to_string()).unwrap();
    for ch in &all_checks {
        let Some(fh) = &ch.handle else { continue };
        let what = format!("{}: {} by its old handle", ch.scenario, ch.path);
        match (&ch.want, nfs.getattr(fh)) {
            (Want::Absent, Err(nfsstat3::NFS3ERR_STALE)) => {}
            (Want::Absent, other) => problems.push(format!("{what}: expected STALE, got {other:?}")),
            (_, Err(s)) => problems.push(format!("{what}: GETATTR failed: {s:?}")),
            (Want::File(content), Ok(_)) => match nfs.read_all(fh) {
                Ok(data) if data == *content => {}
                Ok(data) => problems.push(format!("{what}: READ gave {} bytes, not the {}", data.len(), content.len())),
                Err(s) => problems.push(format!("{what}: READ failed: {s:?}")),
            },
            (_, Ok(_)) => {}
        }
    }
    // A LOOKUP after the restart gives the same handle as before it.
    let fh_before = all_checks.iter().find(|c| c.path == "file-sync.bin").and_then(|c| c.handle.clone()).unwrap();
    assert_eq!(nfs.lookup(&root, "file-sync.bin").unwrap(), fh_before, "handle changed across restarts");
    let fh = nfs.create_new(&root, "after-restart").unwrap();
    let w = nfs.write(&fh, 0, b"new run", stable_how::UNSTABLE).unwrap();
    run_verifiers.push(w.verf);
    let mut distinct = run_verifiers.clone();
    distinct.sort();
    distinct.dedup();
    if distinct.len() != run_verifiers.len() {
        problems.push(format!("write verifiers repeat across server runs: {run_verifiers:x?}"));
    }
    assert!(problems.is_empty(), "acknowledged changes were not durable:\n  {}", problems.join("\n  "));
    eprintln!("sync export: {} power cuts in {:?}", scenarios().len(), started.elapsed());
}

/// What a `sync` export now relies on, on XFS: one sync per namespace
/// operation. A create syncs the new object only (a symlink or fifo, which
/// cannot be fsync'ed, its directory), a link or rename one directory, a
/// remove its directory; XFS commits the whole operation in the
/// transaction that sync forces to the log. Each change is the last thing
/// before its own power cut, and is on disk after it (the async control
/// below shows the same cuts lose such changes when nothing is synced).
#[test]
fn one_sync_per_create_link_rename_and_remove_survives_a_power_cut_right_after_the_reply() {
    const ACTS: [&str; 8] =
        ["CREATE", "MKDIR", "SYMLINK", "MKNOD fifo", "LINK", "RENAME to another directory", "REMOVE", "RMDIR"];
    let mut disk = XfsDisk::new("one-sync");
    let export = make_export(&disk);
    let mut server = TestServer::start("durability-one-sync", vec![export_opts(&export, true)], "");
    let mut lost = Vec::new();
    for sc in scenarios().into_iter().filter(|sc| ACTS.contains(&sc.name)) {
        let cycle = power_cycle(&mut disk, &mut server, &export, &sc);
        lost.extend(cycle.lost.into_iter().map(|l| format!("{l} (the device wrote {} bytes)", cycle.bytes_written)));
    }
    assert!(lost.is_empty(), "acknowledged changes lost in a power cut:\n  {}", lost.join("\n  "));
}

/// Creates from many clients in one directory of a `sync` export force the
/// XFS log once each: the new file's fsync commits its directory entry
/// too (one transaction), and a second fsync, of the directory, would
/// force the log again whenever another client's create had changed the
/// directory meanwhile, which in a shared directory is nearly always
/// (about 1.9 forces per create before). A count of syncs, not a time.
#[test]
fn creates_in_a_shared_directory_of_a_sync_export_force_the_log_once_each() {
    const CLIENTS: usize = 8;
    const FILES: usize = 25;
    // XFS's own periodic log work may add a force or two meanwhile.
    const FORCES_OTHERS_MAX: u64 = 4;
    let disk = XfsDisk::new("forces");
    let export = make_export(&disk);
    let server = TestServer::start("durability-forces", vec![export_opts(&export, true)], "");
    std::fs::create_dir(export.join("shared")).unwrap();
    disk.syncfs();
    let export_path = export.display().to_string();
    let clients: Vec<(Nfs, Fh)> = (0..CLIENTS)
        .map(|_| {
            let mut nfs = Nfs::connect(server.addr).unwrap();
            let root = nfs.mount(&export_path).unwrap();
            let dir = nfs.lookup(&root, "shared").unwrap();
            (nfs, dir)
        })
        .collect();
    let start = std::sync::Barrier::new(CLIENTS);
    let before = disk.log_forces();
    std::thread::scope(|s| {
        for (client, (mut nfs, dir)) in clients.into_iter().enumerate() {
            let start = &start;
            s.spawn(move || {
                start.wait();
                for i in 0..FILES {
                    nfs.create_new(&dir, &format!("c{client}-{i}")).unwrap_or_else(|e| panic!("CREATE: {e:?}"));
                }
            });
        }
    });
    let forces = disk.log_forces() - before;
    let creates = (CLIENTS * FILES) as u64;
    eprintln!("{creates} creates in one directory: {forces} XFS log forces");
    assert!(forces > 0, "{creates} creates on a sync export, and the XFS log was never forced");
    assert!(
        forces <= creates + FORCES_OTHERS_MAX,
        "{creates} creates in one directory forced the XFS log {forces} times"
    );
    assert_eq!(std::fs::read_dir(export.join("shared")).unwrap().count(), CLIENTS * FILES);
}

/// Control: the same method loses what is not committed. On a `sync`
/// export, UNSTABLE writes that were never COMMITted are in the page cache
/// only; after the power cut the data is not there, so the content check
/// fails as it must.
///
/// Deterministic by measurement: if the loop device wrote fewer bytes after
/// the writes than the data holds, the data cannot all be on disk. (If
/// something else on the machine flushed the file system meanwhile, the
/// attempt proves nothing and is repeated.)
#[test]
fn control_power_cut_loses_uncommitted_unstable_writes() {
    let mut disk = XfsDisk::new("unstable");
    let export = make_export(&disk);
    let mut server = TestServer::start("durability-unstable", vec![export_opts(&export, true)], "");
    let sc = Scenario {
        name: "WRITE UNSTABLE without COMMIT",
        setup: |c| {
            c.nfs.create_new(&c.root, "uncommitted.bin").unwrap();
        },
        act: |c| {
            let data = pattern(20, 32 << 20);
            let fh = c.lookup(&c.root.clone(), "uncommitted.bin");
            c.write_checked(&fh, &data, stable_how::UNSTABLE);
            c.expect("uncommitted.bin", Want::File(data), Some(fh));
        },
        durable_bytes_min: 32 << 20,
    };
    let mut attempts = Vec::new();
    for _ in 0..3 {
        let cycle = power_cycle(&mut disk, &mut server, &export, &sc);
        if cycle.bytes_written < sc.durable_bytes_min {
            assert!(
                !cycle.lost.is_empty(),
                "uncommitted UNSTABLE data survived a power cut although the device wrote only {} bytes: \
                 the power-cut method does not work here",
                cycle.bytes_written
            );
            eprintln!("control: loss detected as expected: {:?}", cycle.lost);
            return;
        }
        attempts.push(cycle.bytes_written);
        std::fs::remove_file(export.join("uncommitted.bin")).unwrap();
        disk.syncfs();
    }
    panic!("inconclusive: the device was flushed during every attempt (bytes written: {attempts:?})");
}

/// Control: on an `async` export nothing waits for the disk, so every
/// scenario's acknowledged change is lost by the power cut whenever the
/// device wrote less than the change needs; the checks must say so. At
/// least the data scenarios and the plain namespace changes must be
/// conclusive (truncations may be flushed when Keel's descriptors close).
#[test]
fn control_async_export_loses_acknowledged_changes() {
    let mut disk = XfsDisk::new("async");
    let export = make_export(&disk);
    let mut server = TestServer::start("durability-async", vec![export_opts(&export, false)], "");
    let mut conclusive = Vec::new();
    let mut problems = Vec::new();
    let mut inconclusive = Vec::new();
    for sc in scenarios() {
        let mut done = false;
        for _attempt in 0..3 {
            let cycle = power_cycle(&mut disk, &mut server, &export, &sc);
            if cycle.bytes_written >= sc.durable_bytes_min {
                inconclusive.push(format!("{} ({} bytes written)", sc.name, cycle.bytes_written));
                // Start the next attempt from a clean slate.
                reset_names(&export, sc.name);
                disk.syncfs();
                continue;
            }
            if cycle.lost.is_empty() {
                problems.push(format!(
                    "{}: survived on an async export although the device wrote only {} bytes",
                    sc.name, cycle.bytes_written
                ));
            }
            conclusive.push(sc.name);
            done = true;
            break;
        }
        if !done {
            eprintln!("control: {} stayed inconclusive", sc.name);
        }
        // Leave no state behind that a later scenario could trip over.
        reset_names(&export, sc.name);
        disk.syncfs();
    }
    eprintln!("control (async): conclusive {conclusive:?}; inconclusive attempts {inconclusive:?}");
    assert!(problems.is_empty(), "the power-cut checks failed to detect loss:\n  {}", problems.join("\n  "));
    for required in ["WRITE FILE_SYNC", "WRITE UNSTABLE then COMMIT", "CREATE", "MKDIR", "RENAME", "REMOVE"] {
        assert!(conclusive.contains(&required), "control for {required:?} was never conclusive: {inconclusive:?}");
    }
}

/// Removes every name a scenario may create, so it can run again.
fn reset_names(export: &Path, scenario: &str) {
    let names: &[&str] = match scenario {
        "WRITE FILE_SYNC" => &["file-sync.bin"],
        "WRITE DATA_SYNC" => &["data-sync.bin"],
        "WRITE UNSTABLE then COMMIT" => &["committed.bin"],
        "CREATE" => &["created"],
        "CREATE EXCLUSIVE" => &["created-exclusive"],
        "MKDIR" => &["made-dir"],
        "RENAME" => &["rename-from", "renamed"],
        "RENAME to another directory" => &["move-a", "move-b"],
        "RENAME over an existing file" => &["replace-src", "replace-dst"],
        "REMOVE" => &["removed"],
        "RMDIR" => &["removed-dir"],
        "SETATTR size (truncate)" => &["truncated"],
        "SETATTR mode" => &["chmodded"],
        "CREATE UNCHECKED of an existing file with size 0 (truncate)" => &["recreated"],
        "LINK" => &["link-src", "link-dst"],
        "SYMLINK" => &["symlinked"],
        "MKNOD fifo" => &["fifo-made"],
        _ => &[],
    };
    for name in names {
        let p = export.join(name);
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_file(&p);
    }
}

/// A write-back error the device really reports: a thin-provisioned disk
/// whose backing store is full fails the writes of new blocks, the first
/// COMMIT of the file reports it, and Linux reports it only once per open
/// file description. Keel flushes a file through one shared descriptor,
/// so the other client's COMMIT of the same file succeeds: it must come
/// with a new write verifier, or that client would take its unstable
/// data, which never reached the disk, for committed.
#[test]
fn a_real_writeback_error_is_never_reported_as_committed() {
    let disk = XfsDisk::thin("thin", 160 << 20);
    let export = make_export(&disk);
    let server = TestServer::start("durability-thin", vec![export_opts(&export, true)], "");
    let path = export.display().to_string();
    let (mut a, mut b) = (Nfs::connect(server.addr).unwrap(), Nfs::connect(server.addr).unwrap());
    let root = a.mount(&path).unwrap();
    b.mount(&path).unwrap();
    let file = a.create_new(&root, "victim").expect("CREATE");
    disk.syncfs();
    disk.fill_backing();

    let mut verfs = Vec::new();
    for i in 0..8u64 {
        let (client, byte) = if i < 4 { (&mut a, 0xaa) } else { (&mut b, 0xbb) };
        let w = client.write(&file, i << 20, &vec![byte; 1 << 20], stable_how::UNSTABLE).expect("WRITE");
        verfs.push(w.verf);
    }
    assert!(verfs.iter().all(|v| *v == verfs[0]));
    let wb = verfs[7];
    let first = a.commit(&file);
    assert!(first.is_err(), "the backing store is full, yet COMMIT succeeded: {first:?}");
    match b.commit(&file) {
        Ok(verf) => assert_ne!(verf, wb, "b's data never reached the disk, but its COMMIT matched"),
        Err(stat) => eprintln!("b's COMMIT failed too ({stat:?}): also safe"),
    }
    assert!(server.log_text().contains("new write verifier"), "the server says what happened");
}

/// Clients' FILE_SYNC writes to one file at once while the data path dies
/// (the log's stays): every write acknowledged is on the disk once the path
/// is back. The kernel reports a write-back error once per open file
/// description, so through a shared one both of two writes could miss the
/// disk while only the first was told, and the other was acknowledged (a
/// round lost a write that way about one time in two).
#[test]
fn file_sync_writes_racing_a_data_path_loss_acknowledge_only_what_is_on_disk() {
    const ROUNDS: usize = 5;
    const WRITERS: u64 = 3;
    const BLOCK: usize = 64 << 10;
    // Writes per writer at most; the path dies long before.
    const WRITES_MAX: u64 = 1000;
    for round in 0..ROUNDS {
        let mut disk = XfsDisk::with_external_log("sync-writes");
        let export = make_export(&disk);
        let mut server = TestServer::start("durability-sync-writes", vec![export_opts(&export, true)], "");
        let path = export.display().to_string();
        let mut setup = Nfs::connect(server.addr).unwrap();
        let root = setup.mount(&path).unwrap();
        let file = setup.create_new(&root, "victim").expect("CREATE");
        disk.syncfs();
        let acked = std::sync::atomic::AtomicU64::new(0);
        let acknowledged: Vec<(u64, u8)> = std::thread::scope(|s| {
            let writers: Vec<_> = (0..WRITERS)
                .map(|writer| {
                    let (path, file, acked) = (&path, &file, &acked);
                    s.spawn(move || {
                        let mut nfs = Nfs::connect(server.addr).unwrap();
                        nfs.mount(path).unwrap();
                        let byte = 0xa0 + writer as u8;
                        let mut mine = Vec::new();
                        for i in 0..WRITES_MAX {
                            let offset = (i * WRITERS + writer) * BLOCK as u64;
                            if nfs.write(file, offset, &[byte; BLOCK], stable_how::FILE_SYNC).is_err() {
                                break;
                            }
                            mine.push((offset, byte));
                            acked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        mine
                    })
                })
                .collect();
            // Bounded: the writers stop on their own after WRITES_MAX.
            while acked.load(std::sync::atomic::Ordering::Relaxed) < 16 * WRITERS
                && writers.iter().any(|w| !w.is_finished())
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            disk.data_path_loss();
            writers.into_iter().flat_map(|w| w.join().unwrap()).collect()
        });
        assert!(
            acknowledged.len() < (WRITERS * WRITES_MAX) as usize,
            "round {round}: no write failed after the path loss: the test proves nothing"
        );
        server.kill9();
        disk.unmount();
        disk.data_path_repair();
        disk.mount();
        let on_disk = std::fs::read(export.join("victim")).unwrap();
        let lost: Vec<u64> = acknowledged
            .iter()
            .filter(|&&(offset, byte)| {
                let at = offset as usize;
                on_disk.get(at..at + BLOCK).is_none_or(|block| block.iter().any(|&b| b != byte))
            })
            .map(|&(offset, _)| offset)
            .collect();
        assert!(
            lost.is_empty(),
            "round {round}: acknowledged FILE_SYNC writes not on the disk at offsets {lost:?} ({} acknowledged)",
            acknowledged.len()
        );
    }
}

/// Group commit: many clients creating and removing names in one directory
/// of a `sync` export at once share their syncs; every change any of them
/// saw acknowledged survives a power cut right after the last reply.
#[test]
fn concurrent_namespace_changes_on_a_sync_export_survive_a_power_cut() {
    const CLIENTS: usize = 8;
    const FILES: usize = 40;
    let mut disk = XfsDisk::new("group");
    let export = make_export(&disk);
    let mut server = TestServer::start("durability-group", vec![export_opts(&export, true)], "");
    std::fs::create_dir(export.join("shared")).unwrap();
    disk.syncfs();
    let addr = server.addr;
    let export_path = export.display().to_string();
    // Each client creates its names, then removes every other one.
    let acknowledged: Vec<Check> = std::thread::scope(|s| {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let export_path = export_path.clone();
                s.spawn(move || {
                    let mut nfs = Nfs::connect(addr).unwrap();
                    let root = nfs.mount(&export_path).unwrap();
                    let dir = nfs.lookup(&root, "shared").unwrap();
                    // The last acknowledged state of each name.
                    let mut checks = std::collections::BTreeMap::new();
                    for i in 0..FILES {
                        let name = format!("c{client}-{i}");
                        nfs.create_new(&dir, &name).unwrap_or_else(|e| panic!("CREATE {name}: {e:?}"));
                        checks.insert(name, Want::File(Vec::new()));
                        if i % 2 == 1 {
                            let older = format!("c{client}-{}", i - 1);
                            nfs.remove(&dir, &older).unwrap_or_else(|e| panic!("REMOVE {older}: {e:?}"));
                            checks.insert(older, Want::Absent);
                        }
                    }
                    checks
                })
            })
            .collect();
        clients
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .map(|(name, want)| Check {
                scenario: "concurrent creates and removes",
                path: format!("shared/{name}"),
                want,
                handle: None,
            })
            .collect()
    });
    server.kill9();
    disk.power_cut();
    disk.mount();
    let lost: Vec<String> = acknowledged.iter().filter_map(|c| check_on_disk(&export, c).err()).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged changes lost:\n  {}",
        lost.len(),
        acknowledged.len(),
        lost.join("\n  ")
    );
}

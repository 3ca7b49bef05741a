//! `keel verify` end to end on a local directory, through the public
//! `run()` API with command-line arguments: a clean run passes, and each
//! kind of damage done to a file behind the writer's back (a flipped byte,
//! a zeroed range, truncation, a block copied to the wrong place) fails
//! with exactly that damage in the report, while data that was never
//! acknowledged may be missing without failing.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use clap::Parser;
use keel_verify::{CheckReport, Kind, Lost, VerifyCommand, run};

const MIB: u64 = 1 << 20;
/// Per stream.
const SIZE: u64 = 4 * MIB;
const BLOCK: u64 = 256 << 10;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: VerifyCommand,
}

/// A scratch directory with the streams in `data/` and the journal and
/// reports beside it.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("keel-verify-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir }
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn journal(&self) -> PathBuf {
        self.dir.join("journal")
    }

    fn stream(&self, i: u32) -> PathBuf {
        self.data().join(format!("stream.{i}"))
    }

    fn verify(&self, args: &[&str]) -> anyhow::Result<bool> {
        let argv = std::iter::once("verify").chain(args.iter().copied());
        run(Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).cmd)
    }

    /// Two streams of 4 MiB, FILE_SYNC (fsync after every block).
    fn write(&self, extra: &[&str]) -> bool {
        let (data, journal) = (self.data(), self.journal());
        let mut args = vec!["write", "--local", data.to_str().unwrap(), "--journal", journal.to_str().unwrap()];
        args.extend(["--clients", "2", "--size", "4M", "--block", "256K", "--seed", "0x5eed", "--quiet"]);
        args.extend(extra);
        self.verify(&args).expect("keel verify write")
    }

    /// Checks (target from the journal) and returns the verdict and the JSON report.
    fn check(&self) -> (bool, CheckReport) {
        let (journal, json) = (self.journal(), self.dir.join("report.json"));
        let ok = self
            .verify(&["check", "--journal", journal.to_str().unwrap(), "--json", json.to_str().unwrap()])
            .expect("keel verify check");
        let report: CheckReport = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(ok, report.ok);
        (ok, report)
    }

    fn patch(&self, i: u32, offset: u64, bytes: &[u8]) {
        OpenOptions::new().write(true).open(self.stream(i)).unwrap().write_all_at(bytes, offset).unwrap();
    }

    fn read(&self, i: u32, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        std::fs::File::open(self.stream(i)).unwrap().read_exact_at(&mut buf, offset).unwrap();
        buf
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Stream 0 untouched: everything valid and acknowledged.
fn assert_clean(r: &CheckReport, i: usize) {
    let s = &r.streams[i];
    assert!(s.ok, "{s:?}");
    assert_eq!((s.valid.extents, s.valid.bytes, s.acknowledged_bytes), (1, SIZE, SIZE));
    assert_eq!((s.lost_acknowledged_bytes, s.errors, s.unacknowledged_missing_bytes), (0, 0, 0));
}

#[test]
fn a_clean_run_passes() {
    let t = Scratch::new("clean");
    assert!(t.write(&[]));
    let (ok, r) = t.check();
    assert!(ok && r.write_complete);
    assert_eq!((r.acknowledged_bytes, r.lost_acknowledged_bytes, r.errors), (2 * SIZE, 0, 0));
    assert_clean(&r, 0);
    assert_clean(&r, 1);
    assert_eq!(r.streams[1].read_bytes, SIZE);
    assert_eq!(r.seed, "0x0000000000005eed");

    // The journal must not be replaced by accident.
    let again = t.verify(&["write", "--local", t.data().to_str().unwrap(), "--journal", t.journal().to_str().unwrap()]);
    assert!(again.unwrap_err().to_string().contains("exists"));
}

#[test]
fn unstable_writes_with_periodic_syncs_pass() {
    let t = Scratch::new("unstable");
    assert!(t.write(&["--stable", "unstable", "--commit-every", "1M", "--force"]));
    let (ok, r) = t.check();
    assert!(ok);
    assert_clean(&r, 0);
    assert_clean(&r, 1);
}

#[test]
fn a_flipped_byte_is_a_corrupt_word() {
    let t = Scratch::new("flip");
    assert!(t.write(&[]));
    let at = 2 * MIB + 1003; // inside the word at 2 MiB + 1000
    let byte = t.read(1, at, 1)[0];
    t.patch(1, at, &[byte ^ 0x10]);
    let (ok, r) = t.check();
    assert!(!ok);
    assert_clean(&r, 0);
    let s = &r.streams[1];
    assert_eq!((s.corrupt.extents, s.corrupt.bytes), (1, 8));
    assert_eq!((s.valid.extents, s.valid.bytes), (2, SIZE - 8));
    assert_eq!(s.lost_acknowledged, [Lost { offset: 2 * MIB + 1000, len: 8, kind: Kind::Corrupt }]);
    assert_eq!((s.lost_acknowledged_bytes, s.errors), (8, 1));
    assert_eq!(r.lost_acknowledged_bytes, 8);
}

#[test]
fn a_zeroed_range_is_lost_acknowledged_data() {
    let t = Scratch::new("zero");
    assert!(t.write(&[]));
    t.patch(0, MIB + 4096, &[0; 4096]);
    let (ok, r) = t.check();
    assert!(!ok);
    let s = &r.streams[0];
    assert_eq!((s.zero.extents, s.zero.bytes), (1, 4096));
    assert_eq!(s.lost_acknowledged, [Lost { offset: MIB + 4096, len: 4096, kind: Kind::Zero }]);
    assert_eq!((s.lost_acknowledged_bytes, s.errors, s.unacknowledged_missing_bytes), (4096, 1, 0));
    assert_clean(&r, 1);
}

#[test]
fn truncation_below_the_acknowledged_length_loses_data() {
    let t = Scratch::new("truncate");
    assert!(t.write(&[]));
    // Not a multiple of 8: the last word is cut, and still valid as far as it goes.
    let keep = 3 * MIB + 100;
    OpenOptions::new().write(true).open(t.stream(0)).unwrap().set_len(keep).unwrap();
    let (ok, r) = t.check();
    assert!(!ok);
    let s = &r.streams[0];
    assert_eq!(s.file_bytes, Some(keep));
    assert_eq!((s.valid.bytes, s.missing.bytes, s.missing.extents), (keep, SIZE - keep, 1));
    assert_eq!(s.lost_acknowledged, [Lost { offset: keep, len: SIZE - keep, kind: Kind::Missing }]);
    assert_eq!((s.lost_acknowledged_bytes, s.errors), (SIZE - keep, 1));

    // A stream whose file is gone altogether: all of it lost.
    std::fs::remove_file(t.stream(1)).unwrap();
    let (_, r) = t.check();
    let s = &r.streams[1];
    assert_eq!((s.file_bytes, s.missing.bytes, s.lost_acknowledged_bytes), (None, SIZE, SIZE));
}

#[test]
fn a_block_copied_to_the_wrong_offset_is_misplaced() {
    let t = Scratch::new("misplaced");
    assert!(t.write(&[]));
    let block = t.read(1, BLOCK, BLOCK as usize);
    t.patch(1, 3 * MIB, &block);
    let (ok, r) = t.check();
    assert!(!ok);
    let s = &r.streams[1];
    assert_eq!((s.misplaced.extents, s.misplaced.bytes), (1, BLOCK));
    let shown = s.extents.iter().find(|e| e.kind == Kind::Misplaced).unwrap();
    assert_eq!((shown.offset, shown.len, shown.source), (3 * MIB, BLOCK, Some(BLOCK)));
    assert_eq!((s.lost_acknowledged_bytes, s.errors, s.corrupt.bytes), (BLOCK, 1, 0));

    // Another stream's data at the right offset is not this stream's: corrupt.
    let other = t.read(0, MIB, 64);
    t.patch(1, MIB, &other);
    let (_, r) = t.check();
    assert_eq!((r.streams[1].corrupt.extents, r.streams[1].corrupt.bytes), (1, 64));
}

/// What a writer killed mid-run leaves: the journal stops short of the
/// data (and its last line is torn). Missing data nobody acknowledged is
/// reported, and is no failure.
#[test]
fn missing_data_past_the_acknowledged_length_is_not_a_failure() {
    let t = Scratch::new("unacked");
    assert!(t.write(&[]));
    let text = std::fs::read_to_string(t.journal()).unwrap();
    let mut kept = String::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        match (v["type"].as_str().unwrap(), v["stream"].as_u64()) {
            ("ack" | "done", Some(0)) | ("end", _) => {}
            _ => kept += &format!("{line}\n"),
        }
    }
    kept += "{\"type\":\"ack\",\"stream\":0,\"extents\":[[0,2097152]]}\n{\"type\":\"ack\",\"stre";
    std::fs::write(t.journal(), kept).unwrap();
    OpenOptions::new().write(true).open(t.stream(0)).unwrap().set_len(3 * MIB).unwrap();

    let (ok, r) = t.check();
    assert!(ok, "{:#?}", r.streams[0]);
    assert!(!r.write_complete);
    let s = &r.streams[0];
    assert_eq!((s.acknowledged_bytes, s.valid.bytes, s.missing.bytes), (2 * MIB, 3 * MIB, MIB));
    assert_eq!((s.unacknowledged_missing_bytes, s.unacknowledged_valid_bytes), (MIB, MIB));
    assert_eq!((s.lost_acknowledged_bytes, s.errors), (0, 0));
    assert!(!s.write_done);
    assert_clean(&r, 1);

    // Zeros inside the acknowledged part still fail.
    t.patch(0, 8, &[0; 8]);
    let (ok, r) = t.check();
    assert!(!ok);
    assert_eq!(r.streams[0].lost_acknowledged, [Lost { offset: 8, len: 8, kind: Kind::Zero }]);
}

#[test]
fn another_runs_journal_or_none_at_all() {
    let t = Scratch::new("mismatch");
    assert!(t.write(&[]));
    // Same files, a journal of another seed: every acknowledged byte is wrong.
    let text = std::fs::read_to_string(t.journal()).unwrap().replace("0x0000000000005eed", "0x0000000000005eee");
    std::fs::write(t.journal(), text).unwrap();
    let (ok, r) = t.check();
    assert!(!ok);
    assert_eq!(r.lost_acknowledged_bytes, 2 * SIZE);
    assert_eq!(r.streams[0].corrupt.bytes + r.streams[0].misplaced.bytes, SIZE);

    std::fs::remove_file(t.journal()).unwrap();
    let err = t.verify(&["check", "--journal", t.journal().to_str().unwrap()]).unwrap_err();
    assert!(format!("{err:#}").contains("journal"), "{err:#}");
    std::fs::write(t.journal(), "garbage\n{\"type\":\"end\",\"finished\":\"\",\"seconds\":0,\"ok\":true}\n").unwrap();
    assert!(t.verify(&["check", "--journal", t.journal().to_str().unwrap()]).is_err());
}

#[test]
fn checking_a_copy_elsewhere() {
    let t = Scratch::new("copy");
    assert!(t.write(&[]));
    let copy = t.dir.join("copy");
    std::fs::create_dir(&copy).unwrap();
    for i in 0..2 {
        std::fs::copy(t.stream(i), copy.join(format!("stream.{i}"))).unwrap();
    }
    std::fs::remove_dir_all(t.data()).unwrap();
    let journal = t.journal();
    assert!(t.verify(&["check", "--journal", journal.to_str().unwrap(), "--local", copy.to_str().unwrap()]).unwrap());
}

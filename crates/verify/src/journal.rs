//! The client-side journal of a `keel verify write` run.
//!
//! One JSON object per line (`type` says which record), appended and
//! `fdatasync`ed by a thread of its own while the run goes on:
//!
//! ```text
//! {"type":"run","format":"keel-verify-journal/1","seed":"0x5eed...","streams":4,"size":67108864,
//!  "block":1048576,"stable":"unstable","commit_every":8388608,"target":{"kind":"nfs",...},...}
//! {"type":"verifier","stream":0,"verf":"00c0ffee00000001","from":"write"}
//! {"type":"ack","stream":0,"extents":[[0,4194304],[6291456,1048576]]}
//! {"type":"resend","stream":2,"offset":9437184,"len":1048576,"old":"00c0ffee00000001","new":"..."}
//! {"type":"done","stream":0,"acknowledged":67108864,"seconds":3.2}
//! {"type":"failed","stream":3,"error":"..."}
//! {"type":"end","finished":"2026-...Z","seconds":4.1,"ok":true}
//! ```
//!
//! `ack` extents are `[offset, length]` pairs acknowledged as stable since
//! the previous `ack` of the stream (FILE_SYNC/DATA_SYNC replies, or
//! UNSTABLE replies whose COMMIT came back with the same verifier; locally,
//! after fsync/fdatasync). The writer batches whatever acknowledgements
//! arrived during the previous fdatasync into the next append (group
//! commit), so the journal lags the acknowledgements by one sync and never
//! runs ahead of them: a `keel verify write` killed at any moment leaves a
//! journal that claims only what the server did acknowledge. A crash can
//! leave the last line torn (or, on some file systems, followed by zeros);
//! the reader ignores a bad tail, but a bad line followed by good ones is
//! an error, since the journal can then no longer be trusted.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use anyhow::{Context, anyhow, bail};
use serde::{Deserialize, Serialize};

use super::extents::ExtentSet;
use super::target::TargetSpec;

pub const FORMAT: &str = "keel-verify-journal/1";

/// How durable the writes were asked to be.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stable {
    /// FILE_SYNC writes (locally: write, then fsync).
    File,
    /// DATA_SYNC writes (locally: write, then fdatasync).
    Data,
    /// UNSTABLE writes and a COMMIT every --commit-every bytes (locally:
    /// fsync every --commit-every bytes).
    Unstable,
}

/// The first record: everything `check` needs to know about the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub format: String,
    /// Hex, `0x` and 16 digits (JSON numbers lose precision past 2^53).
    pub seed: String,
    pub streams: u32,
    /// Bytes per stream.
    pub size: u64,
    /// Bytes per WRITE.
    pub block: u64,
    pub stable: Stable,
    pub commit_every: u64,
    pub target: TargetSpec,
    /// RFC 3339, UTC.
    pub started: String,
    pub command: Vec<String>,
    pub hostname: String,
    pub pid: u32,
}

impl RunInfo {
    pub fn seed(&self) -> anyhow::Result<u64> {
        parse_seed(&self.seed).map_err(|e| anyhow!("journal: {e}"))
    }
}

/// `0x`-prefixed hex or decimal.
pub fn parse_seed(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| format!("{s:?} is not a seed (a number, decimal or 0x hex)"))
}

pub fn format_seed(seed: u64) -> String {
    format!("{seed:#018x}")
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Record {
    Run(Box<RunInfo>),
    /// Acknowledged-stable `[offset, length]` extents of a stream.
    Ack {
        stream: u32,
        extents: Vec<[u64; 2]>,
    },
    /// A write verifier seen for the first time (or again after another).
    Verifier {
        stream: u32,
        verf: String,
        from: String,
    },
    /// UNSTABLE writes sent again because COMMIT returned another verifier.
    Resend {
        stream: u32,
        offset: u64,
        len: u64,
        old: String,
        new: String,
    },
    Done {
        stream: u32,
        acknowledged: u64,
        seconds: f64,
    },
    Failed {
        stream: u32,
        error: String,
    },
    End {
        finished: String,
        seconds: f64,
        ok: bool,
    },
}

/// Appends records from any thread; a thread of its own writes and syncs
/// them in batches.
pub struct JournalWriter {
    tx: Option<mpsc::Sender<Message>>,
    thread: Option<JoinHandle<anyhow::Result<()>>>,
    path: PathBuf,
}

impl JournalWriter {
    /// Creates the journal (refusing to replace one unless `force`: it may
    /// be the only record of an earlier run) and writes the run record.
    pub fn create(path: &Path, force: bool, run: RunInfo) -> anyhow::Result<Self> {
        let mut open = OpenOptions::new();
        open.write(true);
        if force {
            open.create(true).truncate(true);
        } else {
            open.create_new(true);
        }
        let mut file = open.open(path).with_context(|| {
            if path.exists() {
                format!("journal {} exists (another run's? use --force to replace it)", path.display())
            } else {
                format!("creating journal {}", path.display())
            }
        })?;
        append(&mut file, &[Record::Run(Box::new(run))])?;
        // The journal's directory entry must outlive a crash too.
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        File::open(parent).and_then(|d| d.sync_all()).with_context(|| format!("syncing {}", parent.display()))?;
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("verify-journal".into())
            .spawn(move || write_loop(file, rx))
            .context("starting the journal thread")?;
        Ok(JournalWriter { tx: Some(tx), thread: Some(thread), path: path.to_path_buf() })
    }

    /// A handle for sending records.
    pub fn sender(&self) -> JournalSender {
        JournalSender { tx: self.tx.clone().expect("journal open") }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `last`, waits until it and everything sent before it is on
    /// disk, and stops (senders still around get errors from then on).
    pub fn finish(mut self, last: Record) -> anyhow::Result<()> {
        if let Some(tx) = self.tx.take() {
            // A failed send means the thread already stopped; its error follows.
            let _ = tx.send(Message::Record(last));
            let _ = tx.send(Message::Close);
        }
        self.join()
    }

    fn join(&mut self) -> anyhow::Result<()> {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(result)) => result.with_context(|| format!("journal {}", self.path.display())),
            Some(Err(_)) => bail!("the journal thread panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for JournalWriter {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Message::Close);
        }
        let _ = self.join();
    }
}

enum Message {
    Record(Record),
    /// Write what came before, then stop.
    Close,
}

/// Sends records to the journal thread.
#[derive(Clone)]
pub struct JournalSender {
    tx: mpsc::Sender<Message>,
}

impl JournalSender {
    /// Fails only when the journal thread stopped (it could not write).
    pub fn send(&self, record: Record) -> anyhow::Result<()> {
        self.tx.send(Message::Record(record)).map_err(|_| anyhow!("the journal is closed (or a write to it failed)"))
    }

    pub fn ack(&self, stream: u32, offset: u64, len: u64) -> anyhow::Result<()> {
        self.send(Record::Ack { stream, extents: vec![[offset, len]] })
    }
}

/// Group commit: take whatever arrived, coalesce the acknowledgements per
/// stream, append, fdatasync, repeat.
fn write_loop(mut file: File, rx: mpsc::Receiver<Message>) -> anyhow::Result<()> {
    let mut open = true;
    while open && let Ok(first) = rx.recv() {
        let mut batch = Vec::new();
        let mut acks: BTreeMap<u32, ExtentSet> = BTreeMap::new();
        for message in std::iter::once(first).chain(rx.try_iter()) {
            let record = match message {
                Message::Record(r) => r,
                Message::Close => {
                    open = false;
                    break;
                }
            };
            match record {
                Record::Ack { stream, extents } => {
                    let set = acks.entry(stream).or_default();
                    for [offset, len] in extents {
                        set.insert(offset, len);
                    }
                }
                other => {
                    // Keep acknowledgements ahead of what followed them
                    // (a `done` must come after its stream's last ack).
                    flush_acks(&mut acks, &mut batch);
                    batch.push(other);
                }
            }
        }
        flush_acks(&mut acks, &mut batch);
        append(&mut file, &batch)?;
    }
    Ok(())
}

fn flush_acks(acks: &mut BTreeMap<u32, ExtentSet>, batch: &mut Vec<Record>) {
    for (stream, set) in std::mem::take(acks) {
        batch.push(Record::Ack { stream, extents: set.iter().map(|(s, e)| [s, e - s]).collect() });
    }
}

fn append(file: &mut File, records: &[Record]) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    for r in records {
        serde_json::to_writer(&mut buf, r)?;
        buf.push(b'\n');
    }
    file.write_all(&buf).context("appending to the journal")?;
    file.sync_data().context("syncing the journal")?;
    Ok(())
}

/// A journal as `check` reads it.
#[derive(Debug, Clone)]
pub struct Journal {
    pub run: RunInfo,
    /// Per stream: acknowledged-stable bytes.
    pub acked: Vec<ExtentSet>,
    /// Per stream: the verifiers seen, in order.
    pub verifiers: Vec<Vec<String>>,
    /// Per stream: bytes resent after a verifier change.
    pub resent: Vec<u64>,
    /// Per stream: finished writing (every byte acknowledged).
    pub done: Vec<bool>,
    /// Per stream: why the stream's writer gave up.
    pub failed: Vec<Option<String>>,
    /// The `end` record: the writer finished (ok or not).
    pub end: Option<(String, f64, bool)>,
    /// Bytes of a torn (ignored) last line.
    pub torn_tail: usize,
}

/// Most streams a journal may declare (each costs a little memory).
const STREAMS_MAX: u32 = 1 << 16;

impl Journal {
    pub fn read(path: &Path) -> anyhow::Result<Journal> {
        let bytes = std::fs::read(path).with_context(|| format!("reading journal {}", path.display()))?;
        Self::parse(&bytes).with_context(|| format!("journal {}", path.display()))
    }

    pub fn parse(bytes: &[u8]) -> anyhow::Result<Journal> {
        let blank = |l: &[u8]| l.iter().all(|b| b.is_ascii_whitespace());
        let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
        let mut records = Vec::new();
        let mut torn_tail = 0;
        let mut pos = 0;
        for (n, line) in lines.iter().enumerate() {
            if !blank(line) {
                match serde_json::from_slice::<Record>(line) {
                    Ok(r) => records.push(r),
                    Err(e) => {
                        if lines[n + 1..].iter().any(|l| !blank(l) && serde_json::from_slice::<Record>(l).is_ok()) {
                            bail!("line {} is damaged ({e}) and good lines follow it", n + 1);
                        }
                        torn_tail = bytes.len() - pos;
                        break;
                    }
                }
            }
            pos += line.len() + 1;
        }
        let mut records = records.into_iter();
        let run = match records.next() {
            Some(Record::Run(run)) => *run,
            Some(_) => bail!("does not start with a run record"),
            None => bail!("empty: the writer did not get as far as the run record"),
        };
        if run.format != FORMAT {
            bail!("format {:?}, this keel reads {FORMAT:?}", run.format);
        }
        if run.streams == 0 || run.streams > STREAMS_MAX {
            bail!("{} streams (1..={STREAMS_MAX} expected)", run.streams);
        }
        run.seed()?;
        let n = run.streams as usize;
        let mut j = Journal {
            acked: vec![ExtentSet::new(); n],
            verifiers: vec![Vec::new(); n],
            resent: vec![0; n],
            done: vec![false; n],
            failed: vec![None; n],
            end: None,
            torn_tail,
            run,
        };
        for r in records {
            let stream = match &r {
                Record::Ack { stream, .. }
                | Record::Verifier { stream, .. }
                | Record::Resend { stream, .. }
                | Record::Done { stream, .. }
                | Record::Failed { stream, .. } => Some(*stream as usize),
                _ => None,
            };
            if let Some(s) = stream
                && s >= n
            {
                bail!("a record for stream {s} of a run of {n} streams");
            }
            match r {
                Record::Run(_) => bail!("a second run record (two runs in one journal?)"),
                Record::Ack { stream, extents } => {
                    for [offset, len] in extents {
                        if offset.checked_add(len).is_none_or(|end| end > j.run.size) {
                            bail!("stream {stream}: acknowledged {len} bytes at {offset}, past the stream's end");
                        }
                        j.acked[stream as usize].insert(offset, len);
                    }
                }
                Record::Verifier { stream, verf, .. } => j.verifiers[stream as usize].push(verf),
                Record::Resend { stream, len, .. } => j.resent[stream as usize] += len,
                Record::Done { stream, .. } => j.done[stream as usize] = true,
                Record::Failed { stream, error } => j.failed[stream as usize] = Some(error),
                Record::End { finished, seconds, ok } => j.end = Some((finished, seconds, ok)),
            }
        }
        Ok(j)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_info() -> RunInfo {
        RunInfo {
            format: FORMAT.into(),
            seed: format_seed(0x5eed),
            streams: 2,
            size: 1 << 20,
            block: 4096,
            stable: Stable::File,
            commit_every: 0,
            target: TargetSpec::Local { dir: "/tmp/x".into() },
            started: "2026-01-01T00:00:00Z".into(),
            command: vec![],
            hostname: "h".into(),
            pid: 1,
        }
    }

    #[test]
    fn writes_coalesced_acks_and_reads_them_back() {
        let dir = std::env::temp_dir().join(format!("keel-verify-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("j");
        let _ = std::fs::remove_file(&path);
        let w = JournalWriter::create(&path, false, run_info()).unwrap();
        assert!(JournalWriter::create(&path, false, run_info()).is_err(), "an existing journal is kept");
        let s = w.sender();
        for i in 0..10 {
            s.ack(1, i * 4096, 4096).unwrap();
        }
        s.ack(0, 8192, 100).unwrap();
        s.send(Record::Done { stream: 1, acknowledged: 40960, seconds: 1.0 }).unwrap();
        w.finish(Record::End { finished: "x".into(), seconds: 1.0, ok: true }).unwrap();
        let j = Journal::read(&path).unwrap();
        assert_eq!(j.acked[1].to_vec(), [(0, 40960)]);
        assert_eq!(j.acked[0].to_vec(), [(8192, 8292)]);
        assert_eq!(j.done, [false, true]);
        assert!(j.end.is_some());

        // A torn last line is ignored; damage in the middle is not.
        let mut text = std::fs::read(&path).unwrap();
        text.extend_from_slice(b"{\"type\":\"ack\",\"stream\":1,\"ext");
        let j = Journal::parse(&text).unwrap();
        assert_eq!((j.acked[1].bytes(), j.torn_tail), (40960, 29));
        text.extend_from_slice(b"\n\0\0\0\0\n");
        assert!(Journal::parse(&text).is_ok(), "zeros after a crash");
        text.extend_from_slice(b"{\"type\":\"done\",\"stream\":0,\"acknowledged\":0,\"seconds\":0}\n");
        assert!(Journal::parse(&text).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rejects_journals_that_claim_the_impossible() {
        let head = serde_json::to_string(&Record::Run(Box::new(run_info()))).unwrap();
        let bad = format!("{head}\n{{\"type\":\"ack\",\"stream\":5,\"extents\":[[0,1]]}}\n");
        assert!(Journal::parse(bad.as_bytes()).is_err(), "unknown stream");
        let bad = format!("{head}\n{{\"type\":\"ack\",\"stream\":0,\"extents\":[[1048570,7]]}}\n");
        assert!(Journal::parse(bad.as_bytes()).is_err(), "past the end");
        assert!(Journal::parse(b"").is_err());
        assert!(Journal::parse(b"{\"type\":\"end\",\"finished\":\"\",\"seconds\":0,\"ok\":true}\n").is_err());
    }
}

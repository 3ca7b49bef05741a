//! `keel verify check`: read every stream back, classify every word, and
//! hold the result against what the journal says was acknowledged.

use std::collections::VecDeque;
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use keel_client::NfsResultExt;
use keel_nfs3_proto::{NfsFh3, Read3Args};
use serde::{Deserialize, Serialize};
use tokio::task::{JoinHandle, JoinSet};

use super::journal::{Journal, Stable};
use super::pattern::{Classifier, Extent, Kind, Pattern};
use super::target::{Client, NfsTarget, TargetArgs, TargetSpec, local_path, lookup, stream_name};
use super::write::stable_label;
use keel_bench_format::units::{human_bytes, parse_duration, parse_size};

/// Bytes of a "block" in the read line: checkstream counts 4 KiB blocks.
const REPORT_BLOCK: u64 = 4096;

#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    /// Where the streams are; default: where the journal says they were
    /// written (give it to check a copy, or the same export through
    /// another address).
    #[command(flatten)]
    pub target: TargetArgs,
    /// The journal of the `keel verify write` run.
    #[arg(long, default_value = "keel-verify.journal")]
    pub journal: PathBuf,
    /// Bytes per READ (at most the server's rtmax).
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub block: u64,
    /// READs each stream keeps in flight.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub in_flight: u32,
    /// How long to keep retrying through a server outage: 300s, 5m, 1h.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    pub retry_for: Duration,
    /// Extents (and lost acknowledged ranges) listed per stream; the
    /// totals always count all of them.
    #[arg(long, default_value_t = 20)]
    pub show: usize,
    /// Also write the report as JSON to this file ("-": standard output,
    /// and the text goes to standard error).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

/// The JSON report of `keel verify check`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    pub schema: String,
    pub seed: String,
    pub journal: PathBuf,
    pub target: TargetSpec,
    pub size: u64,
    pub stable: Stable,
    /// Every stream's writer finished with everything acknowledged.
    pub write_complete: bool,
    pub acknowledged_bytes: u64,
    pub lost_acknowledged_bytes: u64,
    pub errors: u64,
    pub seconds: f64,
    /// No acknowledged byte is missing or wrong, no byte anywhere is
    /// misplaced or corrupt, and every stream could be read.
    pub ok: bool,
    pub streams: Vec<StreamReport>,
}

/// Extents and bytes of one kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub extents: u64,
    pub bytes: u64,
}

/// An acknowledged range that is not there as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lost {
    pub offset: u64,
    pub len: u64,
    /// What is there instead.
    pub kind: Kind,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamReport {
    pub stream: u32,
    pub name: String,
    /// The stream's size in the journal.
    pub expected_bytes: u64,
    /// The file's size; `None` if there is no such file.
    pub file_bytes: Option<u64>,
    pub read_bytes: u64,
    pub seconds: f64,
    pub valid: Totals,
    pub zero: Totals,
    pub misplaced: Totals,
    pub corrupt: Totals,
    /// Past the end of a file shorter than the stream.
    pub missing: Totals,
    /// Bytes past the stream's size (nobody wrote there).
    pub beyond_end_bytes: u64,
    pub acknowledged_bytes: u64,
    /// Acknowledged bytes that are not valid.
    pub lost_acknowledged_bytes: u64,
    pub lost_acknowledged_extents: u64,
    /// The first `--show` of them.
    pub lost_acknowledged: Vec<Lost>,
    /// Zero or missing bytes that were never acknowledged (the writes in
    /// flight when the writer or server died): reported, not an error.
    pub unacknowledged_missing_bytes: u64,
    /// Valid bytes whose acknowledgement did not reach the journal.
    pub unacknowledged_valid_bytes: u64,
    /// The first `--show` extents, in order.
    pub extents: Vec<Extent>,
    pub extents_not_shown: u64,
    /// The writer finished this stream.
    pub write_done: bool,
    /// Why the writer gave up on this stream.
    pub write_error: Option<String>,
    pub verifiers: Vec<String>,
    pub resent_bytes: u64,
    /// Corrupt and misplaced extents, acknowledged ranges found zero or
    /// missing, and data beyond the end.
    pub errors: u64,
    pub ok: bool,
    /// The stream could not be read (so it was not checked).
    pub error: Option<String>,
}

impl StreamReport {
    fn totals_mut(&mut self, kind: Kind) -> &mut Totals {
        match kind {
            Kind::Valid => &mut self.valid,
            Kind::Zero => &mut self.zero,
            Kind::Misplaced => &mut self.misplaced,
            Kind::Corrupt => &mut self.corrupt,
            Kind::Missing => &mut self.missing,
        }
    }
}

/// Takes the classifier's extents in order and counts them against the
/// acknowledged ranges.
struct Tally {
    acked: Vec<(u64, u64)>,
    /// First acknowledged range that may overlap the next extent.
    cursor: usize,
    show: usize,
    report: StreamReport,
}

impl Tally {
    fn add(&mut self, e: Extent) {
        let r = &mut self.report;
        let totals = r.totals_mut(e.kind);
        totals.extents += 1;
        totals.bytes += e.len;
        if r.extents.len() < self.show {
            r.extents.push(e);
        } else {
            r.extents_not_shown += 1;
        }
        if matches!(e.kind, Kind::Corrupt | Kind::Misplaced) {
            r.errors += 1;
        }
        while self.cursor < self.acked.len() && self.acked[self.cursor].1 <= e.offset {
            self.cursor += 1;
        }
        let mut acked = 0;
        for &(start, end) in self.acked[self.cursor..].iter().take_while(|(start, _)| *start < e.end()) {
            let (from, to) = (start.max(e.offset), end.min(e.end()));
            if from >= to {
                continue;
            }
            acked += to - from;
            if e.kind != Kind::Valid {
                let r = &mut self.report;
                r.lost_acknowledged_bytes += to - from;
                r.lost_acknowledged_extents += 1;
                if r.lost_acknowledged.len() < self.show {
                    r.lost_acknowledged.push(Lost { offset: from, len: to - from, kind: e.kind });
                }
                if matches!(e.kind, Kind::Zero | Kind::Missing) {
                    r.errors += 1;
                }
            }
        }
        let r = &mut self.report;
        match e.kind {
            Kind::Valid => r.unacknowledged_valid_bytes += e.len - acked,
            Kind::Zero | Kind::Missing => r.unacknowledged_missing_bytes += e.len - acked,
            Kind::Misplaced | Kind::Corrupt => {}
        }
    }
}

/// What every stream's reader needs.
#[derive(Debug, Clone)]
struct Plan {
    seed: u64,
    size: u64,
    block: u64,
    in_flight: usize,
}

pub fn check(args: &CheckArgs) -> anyhow::Result<CheckReport> {
    let journal = Journal::read(&args.journal)?;
    let run = &journal.run;
    let target = match args.target.spec()? {
        Some(t) => {
            if t != run.target {
                eprintln!("keel verify check: reading {t} (the journal's run wrote to {})", run.target);
            }
            t
        }
        None => run.target.clone(),
    };
    if args.block == 0 || args.block > super::write::BLOCK_MAX {
        bail!("--block must be 1..={} bytes", super::write::BLOCK_MAX);
    }
    let plan = Plan { seed: run.seed()?, size: run.size, block: args.block, in_flight: args.in_flight as usize };
    let tallies: Vec<Tally> = (0..run.streams)
        .map(|i| Tally {
            acked: journal.acked[i as usize].to_vec(),
            cursor: 0,
            show: args.show,
            report: StreamReport {
                stream: i,
                name: stream_name(i),
                expected_bytes: run.size,
                acknowledged_bytes: journal.acked[i as usize].bytes(),
                write_done: journal.done[i as usize],
                write_error: journal.failed[i as usize].clone(),
                verifiers: journal.verifiers[i as usize].clone(),
                resent_bytes: journal.resent[i as usize],
                ..StreamReport::default()
            },
        })
        .collect();
    let started = Instant::now();
    let mut streams = match &target {
        TargetSpec::Local { dir } => check_local(dir, &plan, tallies),
        TargetSpec::Nfs { .. } => {
            let nfs = NfsTarget::new(&target, args.target.connect_options(), args.retry_for)?;
            check_nfs(nfs, &plan, tallies)?
        }
    };
    for s in &mut streams {
        if s.beyond_end_bytes > 0 {
            s.errors += 1;
        }
        s.ok = s.errors == 0 && s.error.is_none();
    }
    let write_complete = journal.end.as_ref().is_some_and(|e| e.2) && journal.done.iter().all(|d| *d);
    let report = CheckReport {
        schema: "keel-verify-check/1".into(),
        seed: run.seed.clone(),
        journal: args.journal.clone(),
        target,
        size: run.size,
        stable: run.stable,
        write_complete,
        acknowledged_bytes: streams.iter().map(|s| s.acknowledged_bytes).sum(),
        lost_acknowledged_bytes: streams.iter().map(|s| s.lost_acknowledged_bytes).sum(),
        errors: streams.iter().map(|s| s.errors).sum(),
        seconds: started.elapsed().as_secs_f64(),
        ok: streams.iter().all(|s| s.ok),
        streams,
    };
    let text_to_stderr = args.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let text = render(&report, &journal);
    if text_to_stderr {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    if let Some(path) = &args.json {
        super::write_json(path, &report)?;
    }
    Ok(report)
}

// ---- local ----

fn check_local(dir: &Path, plan: &Plan, tallies: Vec<Tally>) -> Vec<StreamReport> {
    std::thread::scope(|scope| {
        let handles: Vec<_> =
            tallies.into_iter().map(|tally| scope.spawn(move || check_local_stream(dir, plan, tally))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| StreamReport { error: Some("panicked".into()), ..Default::default() }))
            .collect()
    })
}

fn check_local_stream(dir: &Path, plan: &Plan, mut tally: Tally) -> StreamReport {
    let started = Instant::now();
    let i = tally.report.stream;
    let path = local_path(dir, i);
    let pattern = Pattern::new(plan.seed, i);
    let mut classifier = Classifier::new(pattern, |e| tally.add(e));
    let result = (|| -> anyhow::Result<Option<(u64, u64)>> {
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
        };
        let size = file.metadata()?.len();
        let end = size.min(plan.size);
        let mut buf = vec![0; plan.block as usize];
        let mut at = 0;
        while at < end {
            let want = plan.block.min(end - at) as usize;
            let got = file.read_at(&mut buf[..want], at).with_context(|| format!("reading at {at}"))?;
            if got == 0 {
                break; // shrank since the stat
            }
            classifier.feed(&buf[..got]);
            at += got as u64;
        }
        Ok(Some((size, at)))
    })();
    let error = finish(classifier, plan.size, &result);
    tally.report.error = error;
    apply_sizes(&mut tally.report, plan.size, &result);
    tally.report.seconds = started.elapsed().as_secs_f64();
    tally.report
}

/// Ends classification (marking what was not read as missing) unless
/// reading failed, in which case the stream is not judged at all.
fn finish<F: FnMut(Extent)>(
    classifier: Classifier<F>,
    size: u64,
    result: &anyhow::Result<Option<(u64, u64)>>,
) -> Option<String> {
    match result {
        Ok(_) => {
            classifier.finish(size);
            None
        }
        Err(e) => Some(format!("{e:#}")),
    }
}

fn apply_sizes(r: &mut StreamReport, expected: u64, result: &anyhow::Result<Option<(u64, u64)>>) {
    if let Ok(found) = result {
        r.file_bytes = found.map(|(size, _)| size);
        r.read_bytes = found.map_or(0, |(_, read)| read);
        r.beyond_end_bytes = found.map_or(0, |(size, _)| size.saturating_sub(expected));
    }
}

// ---- NFS ----

fn check_nfs(target: NfsTarget, plan: &Plan, tallies: Vec<Tally>) -> anyhow::Result<Vec<StreamReport>> {
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let target = Arc::new(target);
        let plan = Arc::new(plan.clone());
        let mut tasks = JoinSet::new();
        for tally in tallies {
            let (target, plan) = (target.clone(), plan.clone());
            tasks.spawn(async move { check_nfs_stream(&target, &plan, tally).await });
        }
        let mut streams = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            streams.push(joined.context("a stream reader panicked")?);
        }
        streams.sort_by_key(|s| s.stream);
        Ok(streams)
    })
}

async fn check_nfs_stream(target: &NfsTarget, plan: &Plan, mut tally: Tally) -> StreamReport {
    let started = Instant::now();
    let i = tally.report.stream;
    let name = tally.report.name.clone();
    let mut classifier = Classifier::new(Pattern::new(plan.seed, i), |e| tally.add(e));
    let result = read_nfs(target, plan, &name, &mut classifier).await;
    let error = finish(classifier, plan.size, &result);
    tally.report.error = error;
    apply_sizes(&mut tally.report, plan.size, &result);
    tally.report.seconds = started.elapsed().as_secs_f64();
    tally.report
}

type ReadTask = JoinHandle<(u64, u32, Result<keel_nfs3_proto::Read3Res, keel_client::ClientError>)>;

/// Feeds the stream's bytes to `classifier` in order, with `plan.in_flight`
/// READs pipelined; returns the file's size and the bytes read, or `None`
/// if there is no such file.
async fn read_nfs<F: FnMut(Extent)>(
    target: &NfsTarget,
    plan: &Plan,
    name: &str,
    classifier: &mut Classifier<F>,
) -> anyhow::Result<Option<(u64, u64)>> {
    let (client, root) = target.connect().await?;
    // A directory (or file) that is gone is data lost, not a failure to check.
    let Some(dir) = target.find_directory(&client, &root).await? else { return Ok(None) };
    let Some(fh) = lookup(&client, &dir, name).await? else { return Ok(None) };
    let size = client.attributes(&fh).await.context("GETATTR")?.size;
    let rtmax = client.transfer_sizes(&fh).await.context("FSINFO")?.read_chunk;
    let chunk = plan.block.min(u64::from(rtmax.max(8)));
    let end = size.min(plan.size);
    let mut queue: VecDeque<ReadTask> = VecDeque::new();
    let mut next = 0;
    let mut at = 0;
    let result = async {
        loop {
            while queue.len() < plan.in_flight && next < end {
                let count = chunk.min(end - next) as u32;
                queue.push_back(tokio::spawn(read(client.clone(), fh.clone(), next, count)));
                next += u64::from(count);
            }
            let Some(task) = queue.pop_front() else { return Ok(()) };
            let (offset, count, result) = task.await.context("a READ task panicked")?;
            let mut eof = read_reply(offset, count, result, classifier, &mut at)?;
            // A short READ: fetch the rest of its range before going on.
            while !eof && at < offset + u64::from(count) {
                let rest = (offset + u64::from(count) - at) as u32;
                let (o, c, r) = read(client.clone(), fh.clone(), at, rest).await;
                eof = read_reply(o, c, r, classifier, &mut at)?;
            }
            if eof && at < end {
                return Ok(()); // the file shrank since GETATTR
            }
        }
    }
    .await;
    for task in queue {
        task.abort();
    }
    result.map(|()| Some((size, at)))
}

async fn read(
    client: Client,
    fh: NfsFh3,
    offset: u64,
    count: u32,
) -> (u64, u32, Result<keel_nfs3_proto::Read3Res, keel_client::ClientError>) {
    (offset, count, client.read(&Read3Args { file: fh, offset, count }).await)
}

/// Feeds one READ reply; returns its eof flag.
fn read_reply<F: FnMut(Extent)>(
    offset: u64,
    count: u32,
    result: Result<keel_nfs3_proto::Read3Res, keel_client::ClientError>,
    classifier: &mut Classifier<F>,
    at: &mut u64,
) -> anyhow::Result<bool> {
    if offset != *at {
        bail!("internal: READ at {offset} while at {at}");
    }
    let ok = result.and_then(|r| r.ok_or_status()).with_context(|| format!("READ of {count} bytes at {offset}"))?;
    let got = ok.data.len();
    if got > count as usize || ok.count as usize != got {
        bail!("READ of {count} bytes at {offset}: count {} with {got} bytes of data", ok.count);
    }
    if got == 0 && !ok.eof {
        bail!("READ of {count} bytes at {offset}: no data and no eof");
    }
    classifier.feed(&ok.data);
    *at += got as u64;
    Ok(ok.eof)
}

// ---- the report ----

/// checkstream's `%g`: 6 significant digits, no trailing zeros.
fn g(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return "0".into();
    }
    let digits = 5 - x.abs().log10().floor() as i32;
    let s = format!("{:.*}", digits.max(0) as usize, x);
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

/// Whole units, as checkstream prints them ("87 GiB/90 GiB").
fn whole(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut u = 0;
    while u + 1 < UNITS.len() && n >> (10 * (u + 1)) > 0 {
        u += 1;
    }
    format!("{} {}", n >> (10 * u), UNITS[u])
}

fn extent_line(e: &Extent) -> String {
    let what = match e.kind {
        Kind::Valid => "valid data",
        Kind::Zero => "zero data",
        Kind::Misplaced => "misplaced data",
        Kind::Corrupt => "corrupt data",
        Kind::Missing => "missing data",
    };
    let mut line = format!("{what} for {} bytes at offset {}", e.len, e.offset);
    match (e.kind, e.source) {
        (Kind::Misplaced, Some(source)) => line += &format!(" (written for offset {source})"),
        (Kind::Missing, _) => line += " (past the end of the file)",
        _ => {}
    }
    line
}

/// The checkstream-style text of a whole check.
pub fn render(report: &CheckReport, journal: &Journal) -> String {
    let mut out = String::new();
    let run = &journal.run;
    let state = if report.write_complete {
        "the write completed".to_string()
    } else if journal.end.is_none() {
        "the write was interrupted (no end record)".to_string()
    } else {
        "the write ended incomplete".to_string()
    };
    out += &format!(
        "keel verify check: run {} started {}: {} × {} ({}) to {}; {state}\n",
        run.seed,
        run.started,
        run.streams,
        human_bytes(run.size),
        stable_label(run.stable, run.commit_every),
        run.target
    );
    if journal.torn_tail > 0 {
        out += &format!("keel verify check: ignored a torn last journal line ({} bytes)\n", journal.torn_tail);
    }
    for s in &report.streams {
        render_stream(&mut out, s);
    }
    let failed = report.streams.iter().filter(|s| !s.ok).count();
    out += &format!(
        "keel verify check: {} streams, {} bytes acknowledged, {} acknowledged bytes lost, {} errors: {}\n",
        report.streams.len(),
        report.acknowledged_bytes,
        report.lost_acknowledged_bytes,
        report.errors,
        if report.ok { "PASS".to_string() } else { format!("FAIL ({failed} of {} streams)", report.streams.len()) }
    );
    out
}

fn render_stream(out: &mut String, s: &StreamReport) {
    let mut line = |text: String| {
        *out += &format!("checkstream[{}]: {text}\n", s.name);
    };
    line("-----".into());
    if let Some(e) = &s.error {
        line(format!("cannot read: {e}"));
        line("-----".into());
        line("not checked, failing".into());
        return;
    }
    if s.file_bytes.is_none() {
        line("no such file".into());
    }
    for e in &s.extents {
        line(extent_line(e));
    }
    if s.extents_not_shown > 0 {
        line(format!("... {} more extents (see --show)", s.extents_not_shown));
    }
    line("-----".into());
    line("end of file summary".into());
    let secs = s.seconds.max(1e-6);
    let total = s.expected_bytes;
    line(format!(
        "[valid data] {} valid extents in {secs:.6} seconds ({} err/sec)",
        s.valid.extents,
        g(s.valid.extents as f64 / secs)
    ));
    line(format!("[valid data] {}/{total} bytes ({}/{})", s.valid.bytes, whole(s.valid.bytes), whole(total)));
    for (label, t) in [
        ("zero data", s.zero),
        ("misplaced data", s.misplaced),
        ("corrupt data", s.corrupt),
        ("missing data", s.missing),
    ] {
        if t.extents > 0 {
            line(format!(
                "[{label}] {} errors in {secs:.6} seconds ({} err/sec)",
                t.extents,
                g(t.extents as f64 / secs)
            ));
            line(format!("[{label}] {}/{total} bytes ({}/{})", t.bytes, whole(t.bytes), whole(total)));
        }
    }
    if s.beyond_end_bytes > 0 {
        line(format!("[beyond end] {} bytes past the stream's {total} bytes", s.beyond_end_bytes));
    }
    line(format!(
        "[acknowledged] {}/{total} bytes acknowledged stable ({}/{})",
        s.acknowledged_bytes,
        whole(s.acknowledged_bytes),
        whole(total)
    ));
    line(format!("[lost acknowledged] {} bytes in {} extents", s.lost_acknowledged_bytes, s.lost_acknowledged_extents));
    for l in &s.lost_acknowledged {
        line(format!("[lost acknowledged] {} bytes at offset {} ({} data)", l.len, l.offset, l.kind.label()));
    }
    if s.lost_acknowledged_extents > s.lost_acknowledged.len() as u64 {
        line(format!(
            "[lost acknowledged] ... {} more",
            s.lost_acknowledged_extents - s.lost_acknowledged.len() as u64
        ));
    }
    if s.unacknowledged_missing_bytes > 0 {
        line(format!(
            "[unacknowledged] {} bytes zero or missing that were never acknowledged (not an error)",
            s.unacknowledged_missing_bytes
        ));
    }
    if s.unacknowledged_valid_bytes > 0 {
        line(format!(
            "[unacknowledged] {} bytes valid whose acknowledgement did not reach the journal",
            s.unacknowledged_valid_bytes
        ));
    }
    if let Some(e) = &s.write_error {
        line(format!("[writer] gave up: {e}"));
    }
    let kib_per_sec = (s.read_bytes as f64 / 1024.0 / secs) as u64;
    let read = format!(
        "read {} blocks {} bytes in {secs:.6} seconds ({kib_per_sec} KiB/sec)",
        s.read_bytes.div_ceil(REPORT_BLOCK),
        s.read_bytes
    );
    if s.ok && s.unacknowledged_missing_bytes > 0 {
        // checkstream counted the gaps as errors above; they are not failures here.
        line(format!("{read}, no errors (the zero or missing data was never acknowledged)"));
    } else if s.ok {
        line(format!("{read}, no errors"));
    } else {
        line(read);
        line("-----".into());
        line(format!("encountered {} errors, failing", s.errors));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_like_checkstream() {
        assert_eq!(g(1.0 / 261.205032), "0.00382841");
        assert_eq!(g(1488.0 / 273.860652), "5.43342");
        assert_eq!(g(0.0), "0");
        assert_eq!(g(344598.0), "344598");
        assert_eq!(whole(93898678272), "87 GiB");
        assert_eq!(whole(96636764160), "90 GiB");
        assert_eq!(whole(4096), "4 KiB");
        assert_eq!(whole(100), "100 B");
    }

    #[test]
    fn tally_holds_extents_against_acknowledgements() {
        let mut t = Tally { acked: vec![(0, 100), (200, 300)], cursor: 0, show: 10, report: StreamReport::default() };
        let e = |kind, offset, len| Extent { kind, offset, len, source: None };
        t.add(e(Kind::Valid, 0, 50));
        t.add(e(Kind::Zero, 50, 200)); // 50..100 and 200..250 lost
        t.add(e(Kind::Corrupt, 250, 8)); // lost, and an error of its own
        t.add(e(Kind::Valid, 258, 42));
        t.add(e(Kind::Missing, 300, 50)); // unacknowledged
        let r = t.report;
        assert_eq!(r.lost_acknowledged_bytes, 108);
        assert_eq!(
            r.lost_acknowledged,
            [
                Lost { offset: 50, len: 50, kind: Kind::Zero },
                Lost { offset: 200, len: 50, kind: Kind::Zero },
                Lost { offset: 250, len: 8, kind: Kind::Corrupt }
            ]
        );
        assert_eq!(r.errors, 3);
        assert_eq!(r.unacknowledged_missing_bytes, 100 + 50);
        assert_eq!(r.unacknowledged_valid_bytes, 0);
        assert_eq!((r.zero, r.valid.bytes), (Totals { extents: 1, bytes: 200 }, 92));
    }
}

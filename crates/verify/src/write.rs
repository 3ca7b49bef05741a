//! `keel verify write`: many streams at once, each acknowledgement in the
//! journal.

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use keel_client::{ClientError, NfsResultExt};
use keel_nfs3_proto::{
    Commit3Args, Commit3Res, Create3Args, Createhow3, Diropargs3, NfsFh3, Sattr3, StableHow, Write3Args, Write3Res,
    Writeverf3,
};
use serde::Serialize;
use tokio::task::JoinSet;

use super::journal::{JournalSender, JournalWriter, Record, RunInfo, Stable, format_seed, hex};
use super::pattern::{Pattern, STREAM_BYTES_MAX};
use super::target::{Client, NfsTarget, TargetArgs, TargetSpec, local_path, lookup, stream_name};
use keel_bench_format::units::{human_bytes, parse_duration, parse_size};

/// Largest --block: the writer holds --in-flight blocks per stream.
pub(crate) const BLOCK_MAX: u64 = 64 << 20;

#[derive(clap::Args, Debug, Clone)]
pub struct WriteArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Streams written at once, each by its own client (its own TCP
    /// connection) into its own file `stream.<i>`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub clients: u32,
    /// Bytes per stream (K, M, G, T: powers of 1024).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub size: u64,
    /// Bytes per WRITE (at most the server's wtmax).
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub block: u64,
    /// How durable each WRITE must be before the server answers.
    #[arg(long, value_enum, default_value_t = Stable::File)]
    pub stable: Stable,
    /// With --stable unstable: COMMIT after this many bytes of UNSTABLE writes.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub commit_every: u64,
    /// Seed of the data (decimal or 0x hex; default: random). Recorded in the journal.
    #[arg(long, value_parser = super::journal::parse_seed)]
    pub seed: Option<u64>,
    /// The journal, kept on this (the client's) side.
    #[arg(long, default_value = "keel-verify.journal")]
    pub journal: PathBuf,
    /// Replace an existing journal.
    #[arg(long)]
    pub force: bool,
    /// How long to keep retrying through a server outage (as a hard mount
    /// does) before a stream gives up: 300s, 5m, 1h.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    pub retry_for: Duration,
    /// WRITEs each stream keeps in flight.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub in_flight: u32,
    /// Also write the report as JSON to this file ("-": standard output,
    /// and the text goes to standard error).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// No progress line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// What `keel verify write` did (the JSON report).
#[derive(Debug, Clone, Serialize)]
pub struct WriteReport {
    pub schema: &'static str,
    pub seed: String,
    pub journal: PathBuf,
    pub target: TargetSpec,
    pub size: u64,
    pub block: u64,
    pub stable: Stable,
    pub commit_every: u64,
    /// Acknowledged as stable, all streams.
    pub acknowledged_bytes: u64,
    pub seconds: f64,
    pub mib_per_second: f64,
    /// Every stream wrote every byte and had it acknowledged.
    pub ok: bool,
    pub streams: Vec<StreamWrite>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct StreamWrite {
    pub stream: u32,
    pub name: String,
    pub acknowledged_bytes: u64,
    /// WRITE payload bytes sent, resends included.
    pub sent_bytes: u64,
    pub seconds: f64,
    /// The write verifiers seen, in order (hex).
    pub verifiers: Vec<String>,
    /// UNSTABLE bytes sent again after a COMMIT returned another verifier.
    pub resent_bytes: u64,
    pub commits: u64,
    /// Calls the client retransmitted (after a timeout or lost connection).
    pub retransmissions: u64,
    /// Connections opened beyond the first.
    pub reconnects: u64,
    pub error: Option<String>,
}

/// Byte counters for the progress line.
#[derive(Default)]
struct Progress {
    sent: AtomicU64,
    acked: AtomicU64,
}

/// What every stream's writer shares.
struct Shared {
    seed: u64,
    size: u64,
    block: u64,
    stable: Stable,
    commit_every: u64,
    in_flight: usize,
    journal: JournalSender,
    progress: Progress,
}

pub fn write(args: &WriteArgs, command: Vec<String>) -> anyhow::Result<WriteReport> {
    let spec = args.target.spec()?.ok_or_else(|| anyhow!("say where to write: --server and --export, or --local"))?;
    if args.size == 0 || args.size > STREAM_BYTES_MAX {
        bail!("--size must be 1..={STREAM_BYTES_MAX} bytes");
    }
    if args.block == 0 || args.block > BLOCK_MAX {
        bail!("--block must be 1..={BLOCK_MAX} bytes");
    }
    let seed = args.seed.unwrap_or_else(random_seed);
    let run = RunInfo {
        format: super::journal::FORMAT.into(),
        seed: format_seed(seed),
        streams: args.clients,
        size: args.size,
        block: args.block,
        stable: args.stable,
        commit_every: args.commit_every,
        target: spec.clone(),
        started: keel_bench_format::time::now(),
        command,
        hostname: keel_bench_format::host::facts().hostname,
        pid: std::process::id(),
    };
    let journal = JournalWriter::create(&args.journal, args.force, run)?;
    let shared = Arc::new(Shared {
        seed,
        size: args.size,
        block: args.block,
        stable: args.stable,
        commit_every: args.commit_every.max(1),
        in_flight: args.in_flight as usize,
        journal: journal.sender(),
        progress: Progress::default(),
    });
    let text_to_stderr = args.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let say = |line: String| if text_to_stderr { eprintln!("{line}") } else { println!("{line}") };
    say(format!(
        "keel verify write: {} × {} to {spec} ({}, block {}), seed {}, journal {}",
        args.clients,
        human_bytes(args.size),
        stable_label(args.stable, args.commit_every),
        human_bytes(args.block),
        format_seed(seed),
        args.journal.display()
    ));

    let started = Instant::now();
    let done = AtomicBool::new(false);
    let total = args.size * u64::from(args.clients);
    let streams = std::thread::scope(|scope| {
        if !args.quiet {
            scope.spawn(|| progress_loop(&shared.progress, total, &done, started));
        }
        let result = match &spec {
            TargetSpec::Local { dir } => write_local(dir, args.clients, &shared),
            TargetSpec::Nfs { .. } => NfsTarget::new(&spec, args.target.connect_options(), args.retry_for)
                .and_then(|target| write_nfs(target, args.clients, &shared)),
        };
        // Stops the progress thread, which the scope waits for.
        done.store(true, Ordering::Relaxed);
        result
    });
    let seconds = started.elapsed().as_secs_f64();
    let streams = match streams {
        Ok(s) => s,
        Err(e) => {
            let _ = journal.finish(Record::End { finished: keel_bench_format::time::now(), seconds, ok: false });
            return Err(e);
        }
    };
    let ok = streams.iter().all(|s| s.error.is_none() && s.acknowledged_bytes == args.size);
    journal.finish(Record::End { finished: keel_bench_format::time::now(), seconds, ok })?;

    let acknowledged_bytes = streams.iter().map(|s| s.acknowledged_bytes).sum();
    let report = WriteReport {
        schema: "keel-verify-write/1",
        seed: format_seed(seed),
        journal: args.journal.clone(),
        target: spec,
        size: args.size,
        block: args.block,
        stable: args.stable,
        commit_every: args.commit_every,
        acknowledged_bytes,
        seconds,
        mib_per_second: acknowledged_bytes as f64 / (1 << 20) as f64 / seconds.max(1e-9),
        ok,
        streams,
    };
    let nfs = matches!(report.target, TargetSpec::Nfs { .. });
    for s in &report.streams {
        let mut line = format!("{}: {} bytes acknowledged in {:.2} s", s.name, s.acknowledged_bytes, s.seconds);
        if nfs {
            line += &format!(
                ", {} verifier(s), {} bytes resent, {} commits, {} retransmissions, {} reconnects",
                s.verifiers.len(),
                s.resent_bytes,
                s.commits,
                s.retransmissions,
                s.reconnects
            );
        } else if s.commits > 0 {
            line += &format!(", {} syncs", s.commits);
        }
        if let Some(e) = &s.error {
            line += &format!(", FAILED: {e}");
        }
        say(line);
    }
    say(format!(
        "keel verify write: {} bytes acknowledged in {:.2} s ({:.1} MiB/s): {}",
        report.acknowledged_bytes,
        report.seconds,
        report.mib_per_second,
        if ok { "complete" } else { "INCOMPLETE" }
    ));
    if let Some(path) = &args.json {
        super::write_json(path, &report)?;
    }
    Ok(report)
}

pub fn stable_label(stable: Stable, commit_every: u64) -> String {
    match stable {
        Stable::File => "FILE_SYNC".into(),
        Stable::Data => "DATA_SYNC".into(),
        Stable::Unstable => format!("UNSTABLE, COMMIT every {}", human_bytes(commit_every)),
    }
}

fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one((std::time::SystemTime::now(), std::process::id()))
}

fn progress_loop(progress: &Progress, total: u64, done: &AtomicBool, started: Instant) {
    let mut last = Instant::now();
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if last.elapsed() < Duration::from_secs(2) {
            continue;
        }
        last = Instant::now();
        let acked = progress.acked.load(Ordering::Relaxed);
        let sent = progress.sent.load(Ordering::Relaxed);
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "keel verify write: {:.0} s, sent {}, acknowledged {} of {} ({:.1} MiB/s)",
            secs,
            human_bytes(sent),
            human_bytes(acked),
            human_bytes(total),
            acked as f64 / (1 << 20) as f64 / secs
        );
    }
}

// ---- local ----

fn write_local(dir: &std::path::Path, clients: u32, shared: &Shared) -> anyhow::Result<Vec<StreamWrite>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients).map(|i| scope.spawn(move || local_stream(dir, i, shared))).collect();
        handles.into_iter().map(|h| h.join().map_err(|_| anyhow!("a writer thread panicked"))).collect()
    })
}

fn local_stream(dir: &std::path::Path, i: u32, shared: &Shared) -> StreamWrite {
    let started = Instant::now();
    let mut report = StreamWrite { stream: i, name: stream_name(i), ..StreamWrite::default() };
    let result = local_stream_inner(dir, i, shared, &mut report);
    finish_stream(shared, &mut report, started, result);
    report
}

fn local_stream_inner(dir: &std::path::Path, i: u32, shared: &Shared, report: &mut StreamWrite) -> anyhow::Result<()> {
    let path = local_path(dir, i);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    // The new (or emptied) file must survive a crash before any of its data counts.
    file.sync_all()?;
    std::fs::File::open(dir).and_then(|d| d.sync_all())?;
    let pattern = Pattern::new(shared.seed, i);
    let mut buf = vec![0; shared.block as usize];
    let mut pending_from = 0;
    let mut offset = 0;
    while offset < shared.size {
        let len = shared.block.min(shared.size - offset);
        let buf = &mut buf[..len as usize];
        pattern.fill(offset, buf);
        file.write_all_at(buf, offset).with_context(|| format!("writing {len} bytes at {offset}"))?;
        report.sent_bytes += len;
        shared.progress.sent.fetch_add(len, Ordering::Relaxed);
        offset += len;
        let synced = match shared.stable {
            Stable::File => file.sync_all().map(|_| true),
            Stable::Data => file.sync_data().map(|_| true),
            Stable::Unstable if offset - pending_from >= shared.commit_every || offset == shared.size => {
                report.commits += 1;
                file.sync_all().map(|_| true)
            }
            Stable::Unstable => Ok(false),
        };
        if synced.context("syncing")? {
            acknowledge(shared, report, pending_from, offset - pending_from)?;
            pending_from = offset;
        }
    }
    Ok(())
}

fn acknowledge(shared: &Shared, report: &mut StreamWrite, offset: u64, len: u64) -> anyhow::Result<()> {
    shared.journal.ack(report.stream, offset, len)?;
    report.acknowledged_bytes += len;
    shared.progress.acked.fetch_add(len, Ordering::Relaxed);
    Ok(())
}

fn finish_stream(shared: &Shared, report: &mut StreamWrite, started: Instant, result: anyhow::Result<()>) {
    report.seconds = started.elapsed().as_secs_f64();
    let record = match result {
        Ok(()) => {
            Record::Done { stream: report.stream, acknowledged: report.acknowledged_bytes, seconds: report.seconds }
        }
        Err(e) => {
            let error = format!("{e:#}");
            report.error = Some(error.clone());
            Record::Failed { stream: report.stream, error }
        }
    };
    if let Err(e) = shared.journal.send(record)
        && report.error.is_none()
    {
        report.error = Some(e.to_string());
    }
}

// ---- NFS ----

fn write_nfs(target: NfsTarget, clients: u32, shared: &Arc<Shared>) -> anyhow::Result<Vec<StreamWrite>> {
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let target = Arc::new(target);
        // One connection makes the directory, so the streams need not race for it.
        let (control, root) = target.connect().await?;
        target.make_directory(&control, &root).await?;
        let mut tasks = JoinSet::new();
        for i in 0..clients {
            tasks.spawn(nfs_stream(target.clone(), i, shared.clone()));
        }
        let mut streams = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            streams.push(joined.context("a stream writer panicked")?);
        }
        streams.sort_by_key(|s| s.stream);
        Ok(streams)
    })
}

async fn nfs_stream(target: Arc<NfsTarget>, i: u32, shared: Arc<Shared>) -> StreamWrite {
    let started = Instant::now();
    let mut report = StreamWrite { stream: i, name: stream_name(i), ..StreamWrite::default() };
    let mut client = None;
    let result = NfsStream { shared: &shared, report: &mut report }.run(&target, &mut client).await;
    if let Some(client) = client {
        let stats = client.transport().stats();
        report.retransmissions = stats.retransmissions;
        report.reconnects = stats.connects.saturating_sub(1);
    }
    finish_stream(&shared, &mut report, started, result);
    report
}

/// A WRITE acknowledged UNSTABLE, waiting for its COMMIT.
struct Unstable {
    offset: u64,
    len: u64,
    verf: Writeverf3,
}

enum Event {
    Write { offset: u64, len: u64, result: Result<Write3Res, ClientError> },
    Commit { batch: Vec<Unstable>, result: Result<Commit3Res, ClientError> },
}

struct NfsStream<'a> {
    shared: &'a Shared,
    report: &'a mut StreamWrite,
}

impl NfsStream<'_> {
    async fn run(mut self, target: &NfsTarget, slot: &mut Option<Client>) -> anyhow::Result<()> {
        let shared = self.shared;
        let name = self.report.name.clone();
        let (client, root) = target.connect().await?;
        *slot = Some(client.clone());
        let dir = target
            .find_directory(&client, &root)
            .await?
            .ok_or_else(|| anyhow!("directory {:?} vanished from the export", target.dir))?;
        let fh = create_empty(&client, &dir, &name).await?;
        let wtmax = client.transfer_sizes(&fh).await.context("FSINFO")?.write_chunk;
        let chunk = shared.block.min(u64::from(wtmax.max(8)));
        let how = match shared.stable {
            Stable::File => StableHow::FileSync,
            Stable::Data => StableHow::DataSync,
            Stable::Unstable => StableHow::Unstable,
        };
        let pattern = Pattern::new(shared.seed, self.report.stream);

        let mut next = 0;
        // Ranges to send (again) before new ones: the rest of short
        // WRITEs, and UNSTABLE writes a restarted server may have lost.
        let mut again: VecDeque<(u64, u64)> = VecDeque::new();
        let mut uncommitted: Vec<Unstable> = Vec::new();
        let mut uncommitted_bytes = 0;
        let mut committing = false;
        let mut writes = 0;
        let mut tasks = JoinSet::new();
        loop {
            while writes < shared.in_flight {
                let (offset, len) = match again.pop_front() {
                    Some(range) => range,
                    None if next < shared.size => {
                        let len = chunk.min(shared.size - next);
                        next += len;
                        (next - len, len)
                    }
                    None => break,
                };
                let args = Write3Args {
                    file: fh.clone(),
                    offset,
                    count: len as u32,
                    stable: how,
                    data: pattern.bytes(offset, len as usize),
                };
                let client = client.clone();
                tasks.spawn(async move { Event::Write { offset, len, result: client.write(&args).await } });
                writes += 1;
                self.report.sent_bytes += len;
                shared.progress.sent.fetch_add(len, Ordering::Relaxed);
            }
            let all_sent = next >= shared.size && again.is_empty() && writes == 0;
            if !committing && !uncommitted.is_empty() && (uncommitted_bytes >= shared.commit_every || all_sent) {
                let batch = std::mem::take(&mut uncommitted);
                uncommitted_bytes = 0;
                let args = Commit3Args { file: fh.clone(), offset: 0, count: 0 };
                let client = client.clone();
                tasks.spawn(async move { Event::Commit { batch, result: client.commit(&args).await } });
                committing = true;
                self.report.commits += 1;
            }
            let Some(joined) = tasks.join_next().await else { break };
            match joined.context("a WRITE task panicked")? {
                Event::Write { offset, len, result } => {
                    writes -= 1;
                    let ok = result
                        .and_then(|r| r.ok_or_status())
                        .with_context(|| format!("WRITE of {len} bytes at {offset}"))?;
                    let done = u64::from(ok.count);
                    if done == 0 || done > len {
                        bail!("WRITE of {len} bytes at {offset}: the server acknowledged {done}");
                    }
                    if done < len {
                        again.push_front((offset + done, len - done));
                    }
                    self.verifier(&ok.verf, "write")?;
                    if ok.committed == StableHow::Unstable {
                        // Also when the server downgraded a stable WRITE.
                        uncommitted.push(Unstable { offset, len: done, verf: ok.verf });
                        uncommitted_bytes += done;
                    } else {
                        acknowledge(shared, self.report, offset, done)?;
                    }
                }
                Event::Commit { batch, result } => {
                    committing = false;
                    let ok = result.and_then(|r| r.ok_or_status()).context("COMMIT")?;
                    self.verifier(&ok.verf, "commit")?;
                    for w in batch {
                        if w.verf == ok.verf {
                            acknowledge(shared, self.report, w.offset, w.len)?;
                        } else {
                            // The server restarted since this WRITE: what it
                            // had not synced may be gone. Send it again, as
                            // a client does when the verifier changes.
                            shared.journal.send(Record::Resend {
                                stream: self.report.stream,
                                offset: w.offset,
                                len: w.len,
                                old: hex(&w.verf),
                                new: hex(&ok.verf),
                            })?;
                            self.report.resent_bytes += w.len;
                            again.push_back((w.offset, w.len));
                        }
                    }
                }
            }
        }
        if self.report.acknowledged_bytes != shared.size {
            bail!("finished with {} of {} bytes acknowledged", self.report.acknowledged_bytes, shared.size);
        }
        Ok(())
    }

    /// Records a verifier the first time it shows up (and again after another).
    fn verifier(&mut self, verf: &Writeverf3, from: &str) -> anyhow::Result<()> {
        let verf = hex(verf);
        if self.report.verifiers.last() != Some(&verf) {
            self.shared.journal.send(Record::Verifier {
                stream: self.report.stream,
                verf: verf.clone(),
                from: from.into(),
            })?;
            self.report.verifiers.push(verf);
        }
        Ok(())
    }
}

/// CREATE UNCHECKED with size 0: a new file, or an old one emptied, so no
/// earlier run's data remains where this run may not write.
async fn create_empty(client: &Client, dir: &NfsFh3, name: &str) -> anyhow::Result<NfsFh3> {
    let where_ = Diropargs3 { dir: dir.clone(), name: name.into() };
    let how = Createhow3::Unchecked(Sattr3 { mode: Some(0o644), size: Some(0), ..Sattr3::default() });
    let ok = client
        .create(&Create3Args { where_, how })
        .await
        .and_then(|r| r.ok_or_status())
        .with_context(|| format!("CREATE {name:?}"))?;
    match ok.obj {
        Some(fh) => Ok(fh),
        None => lookup(client, dir, name).await?.ok_or_else(|| anyhow!("{name:?} vanished after CREATE")),
    }
}

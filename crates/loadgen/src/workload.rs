//! What each load generator does in each phase. Untimed preparation
//! (creating files, filling them, building trees) is kept apart from the
//! timed phases, as IOzone, mdtest and IOR do.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use bytes::Bytes;
use keel_client::proto::nfs3::*;
use keel_client::{ClientError, Nfs3Client, NfsResultExt, Transfer, Window};

use super::args::{IorArgs, Layout, MetaArgs, RandomArgs, SeqArgs, Stable};

/// One client connection: what a node is to the papers.
pub struct Client {
    pub nfs: Nfs3Client,
    pub root: NfsFh3,
    pub xfer: Transfer,
}

/// Counters a phase bumps as it goes, for the progress line.
#[derive(Default)]
pub struct Progress {
    pub bytes: AtomicU64,
    pub ops: AtomicU64,
}

/// What one load generator did in one phase.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub bytes: u64,
    pub ops: u64,
    /// Calls the server answered with an error status.
    pub errors: u64,
}

/// One load generator: its connection, its place among all of them, and
/// the directory of the current repetition.
pub struct Proc {
    pub client: Arc<Client>,
    pub index: u32,
    pub count: u32,
    pub dir: NfsFh3,
}

/// What a load generator keeps from its preparation to its phases.
pub enum State {
    File(NfsFh3),
    /// mdtest: the leaf directories files go in.
    Leaves(Vec<NfsFh3>),
    /// IOR: one file per layout, in the order of the layouts.
    Files(Vec<NfsFh3>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    MiBPerSecond,
    Iops,
    OpsPerSecond,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::MiBPerSecond => "MiB/s",
            Unit::Iops => "IOPS",
            Unit::OpsPerSecond => "ops/s",
        }
    }

    pub fn value(self, t: &Tally, seconds: f64) -> f64 {
        let seconds = seconds.max(1e-9);
        match self {
            Unit::MiBPerSecond => t.bytes as f64 / (1 << 20) as f64 / seconds,
            Unit::Iops | Unit::OpsPerSecond => t.ops as f64 / seconds,
        }
    }
}

pub struct Phase {
    pub name: String,
    pub unit: Unit,
}

pub enum Workload {
    Seq(SeqArgs),
    Random(RandomArgs),
    Meta(MetaArgs),
    Ior(IorArgs),
}

impl Workload {
    pub fn name(&self) -> &'static str {
        match self {
            Workload::Seq(_) => "seq",
            Workload::Random(_) => "random",
            Workload::Meta(_) => "meta",
            Workload::Ior(_) => "ior",
        }
    }

    pub fn phases(&self) -> Vec<Phase> {
        let p = |name: &str, unit| Phase { name: name.to_string(), unit };
        match self {
            Workload::Seq(_) => vec![p("write", Unit::MiBPerSecond), p("read", Unit::MiBPerSecond)],
            Workload::Random(_) => vec![p("write", Unit::Iops), p("read", Unit::Iops)],
            Workload::Meta(_) => {
                vec![p("create", Unit::OpsPerSecond), p("stat", Unit::OpsPerSecond), p("remove", Unit::OpsPerSecond)]
            }
            Workload::Ior(a) => a
                .layout
                .iter()
                .flat_map(|l| {
                    [
                        p(&format!("write-{}", l.name()), Unit::MiBPerSecond),
                        p(&format!("read-{}", l.name()), Unit::MiBPerSecond),
                    ]
                })
                .collect(),
        }
    }

    /// Bytes or operations a phase will do in all, for the progress line.
    pub fn phase_total(&self, phase: usize, procs: u32) -> (u64, Unit) {
        let unit = self.phases()[phase].unit;
        let total = match self {
            Workload::Seq(a) => seq_file_bytes(a, procs) * u64::from(procs),
            Workload::Random(a) => random_ops(a) * u64::from(procs),
            Workload::Meta(a) => a.files * u64::from(procs),
            Workload::Ior(a) => a.segments * a.block * u64::from(procs),
        };
        (total, unit)
    }

    /// Before a repetition, once for all load generators (rank 0): IOR's
    /// shared files.
    pub async fn prepare_shared(&self, c: &Client, dir: &NfsFh3) -> anyhow::Result<()> {
        if let Workload::Ior(a) = self {
            for l in a.layout.iter().filter(|l| **l != Layout::Fpp) {
                c.nfs.create_file(dir, format!("ior.{}", l.name()).as_str(), 0o644).await?;
            }
        }
        Ok(())
    }

    /// Untimed preparation of one load generator.
    pub async fn prepare(&self, p: &Proc) -> anyhow::Result<State> {
        let nfs = &p.client.nfs;
        let own = format!("p.{}", p.index);
        Ok(match self {
            Workload::Seq(_) => State::File(nfs.create_file(&p.dir, own.as_str(), 0o644).await?),
            Workload::Random(a) => {
                let fh = nfs.create_file(&p.dir, own.as_str(), 0o644).await?;
                // Reads must find data, not holes.
                let xfer = &p.client.xfer;
                let chunk = u64::from(xfer.write_chunk);
                let offsets = (0..a.file_size.div_ceil(chunk)).map(|i| i * chunk);
                let data = pattern(chunk as usize, p.index);
                let t = stream(nfs, &fh, offsets, Op::Write(Stable::Unstable, data, a.file_size), 16, None).await?;
                anyhow::ensure!(t.errors == 0, "filling {own} failed");
                State::File(fh)
            }
            Workload::Meta(a) => State::Leaves(build_tree(nfs, &p.dir, &own, a.branch, a.depth).await?),
            Workload::Ior(a) => {
                let mut files = Vec::new();
                for l in &a.layout {
                    files.push(match l {
                        Layout::Fpp => nfs.create_file(&p.dir, format!("ior.fpp.{}", p.index).as_str(), 0o644).await?,
                        _ => nfs.lookup_path(&p.dir, &format!("ior.{}", l.name())).await?,
                    });
                }
                State::Files(files)
            }
        })
    }

    /// One timed phase of one load generator.
    pub async fn run(&self, phase: usize, p: &Proc, state: &State, progress: &Progress) -> anyhow::Result<Tally> {
        let nfs = &p.client.nfs;
        match (self, state) {
            (Workload::Seq(a), State::File(fh)) => {
                let size = seq_file_bytes(a, p.count);
                let offsets = (0..size.div_ceil(a.record)).map(|i| i * a.record);
                let op = if phase == 0 {
                    Op::Write(a.stable, pattern(a.record as usize, p.index), size)
                } else {
                    Op::Read(a.record as u32, size)
                };
                stream(nfs, fh, offsets, op, a.in_flight, Some(progress)).await
            }
            (Workload::Random(a), State::File(fh)) => {
                let records = (a.file_size / a.record).max(1);
                let mut rng = XorShift::new(u64::from(p.index) << 8 | phase as u64);
                let offsets = (0..random_ops(a)).map(move |_| rng.below(records) * a.record);
                let op = if phase == 0 {
                    Op::Write(a.stable, pattern(a.record as usize, p.index), a.file_size)
                } else {
                    Op::Read(a.record as u32, a.file_size)
                };
                stream(nfs, fh, offsets, op, a.queue_depth, Some(progress)).await
            }
            (Workload::Meta(a), State::Leaves(leaves)) => meta_phase(nfs, a, phase, leaves, progress).await,
            (Workload::Ior(a), State::Files(files)) => {
                let layout = a.layout[phase / 2];
                let offsets = ior_offsets(a, layout, p.index, p.count);
                let size = a.segments * a.block * if layout == Layout::Fpp { 1 } else { u64::from(p.count) };
                let op = if phase.is_multiple_of(2) {
                    Op::Write(a.stable, pattern(a.transfer as usize, p.index), size)
                } else {
                    Op::Read(a.transfer as u32, size)
                };
                stream(nfs, &files[phase / 2], offsets, op, a.in_flight, Some(progress)).await
            }
            _ => unreachable!("state made by prepare() for the same workload"),
        }
    }
}

pub fn seq_file_bytes(a: &SeqArgs, procs: u32) -> u64 {
    (a.total / u64::from(procs.max(1)) / a.record).max(1) * a.record
}

fn random_ops(a: &RandomArgs) -> u64 {
    a.ops.unwrap_or((a.file_size / a.record).max(1))
}

/// IOR's offsets for process `p` of `n` (transfer-sized pieces).
pub fn ior_offsets(a: &IorArgs, layout: Layout, p: u32, n: u32) -> impl Iterator<Item = u64> + Send + 'static {
    let (t, b, s, p, n) = (a.transfer, a.block, a.segments, u64::from(p), u64::from(n));
    let per_block = (b / t).max(1);
    (0..s).flat_map(move |seg| {
        (0..per_block).map(move |i| match layout {
            Layout::Fpp => (seg * per_block + i) * t,
            Layout::SsfSegmented => (seg * n + p) * b + i * t,
            Layout::SsfStrided => ((seg * per_block + i) * n + p) * t,
        })
    })
}

/// Incompressible, different per process.
fn pattern(len: usize, seed: u32) -> Bytes {
    let mut rng = XorShift::new(0x6b65_656c_0000_0000 | u64::from(seed));
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&rng.next().to_le_bytes());
    }
    v.truncate(len);
    Bytes::from(v)
}

struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

enum Op {
    /// Write the buffer at each offset (clipped to the file size); COMMIT
    /// at the end if unstable, timed as IOzone -e does.
    Write(Stable, Bytes, u64),
    /// Read this many bytes at each offset (clipped to the file size).
    Read(u32, u64),
}

/// Issues one call per offset, `in_flight` at a time, on one file.
async fn stream(
    nfs: &Nfs3Client,
    fh: &NfsFh3,
    offsets: impl Iterator<Item = u64>,
    op: Op,
    in_flight: usize,
    progress: Option<&Progress>,
) -> anyhow::Result<Tally> {
    let mut tally = Tally::default();
    let mut window = Window::new();
    let mut offsets = offsets.peekable();
    let size = match &op {
        Op::Write(_, _, size) | Op::Read(_, size) => *size,
    };
    loop {
        while window.len() < in_flight.max(1) {
            let Some(off) = offsets.next() else { break };
            match &op {
                Op::Write(stable, data, _) => {
                    let len = (data.len() as u64).min(size - off.min(size)) as usize;
                    let args = Write3Args {
                        file: fh.clone(),
                        offset: off,
                        count: len as u32,
                        stable: match stable {
                            Stable::Unstable => StableHow::Unstable,
                            Stable::Data => StableHow::DataSync,
                            Stable::File => StableHow::FileSync,
                        },
                        data: data.slice(..len),
                    };
                    window.push(async move { nfs.write(&args).await.map(|r| r.ok().map(|ok| ok.count as u64)) });
                }
                Op::Read(count, _) => {
                    let args = Read3Args { file: fh.clone(), offset: off, count: *count };
                    window.push(async move { nfs.read(&args).await.map(|r| r.ok().map(|ok| ok.data.len() as u64)) });
                }
            }
        }
        let Some(done) = window.next().await else { break };
        match done.context("lost the server")? {
            Some(bytes) => {
                tally.bytes += bytes;
                tally.ops += 1;
                if let Some(p) = progress {
                    p.bytes.fetch_add(bytes, Ordering::Relaxed);
                    p.ops.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => tally.errors += 1,
        }
    }
    if let Op::Write(Stable::Unstable, ..) = op {
        let r = nfs.commit(&Commit3Args { file: fh.clone(), offset: 0, count: 0 }).await?;
        if !r.is_ok() {
            tally.errors += 1;
        }
    }
    Ok(tally)
}

/// The directories of one process's tree, leaves last; mdtest's -b and -z.
async fn build_tree(
    nfs: &Nfs3Client,
    parent: &NfsFh3,
    name: &str,
    branch: u32,
    depth: u32,
) -> anyhow::Result<Vec<NfsFh3>> {
    let mut level = vec![nfs.create_dir(parent, name, 0o755).await?];
    for _ in 0..depth {
        let mut next = Vec::new();
        for dir in &level {
            for b in 0..branch.max(1) {
                next.push(nfs.create_dir(dir, format!("d.{b}").as_str(), 0o755).await?);
            }
        }
        level = next;
    }
    Ok(level)
}

async fn meta_phase(
    nfs: &Nfs3Client,
    a: &MetaArgs,
    phase: usize,
    leaves: &[NfsFh3],
    progress: &Progress,
) -> anyhow::Result<Tally> {
    let mut tally = Tally::default();
    for i in 0..a.files {
        let dir = leaves[(i % leaves.len() as u64) as usize].clone();
        let name = Filename3::from(format!("f.{i}").as_str());
        let ok = match phase {
            0 => {
                let how = Createhow3::Guarded(Sattr3 { mode: Some(0o644), ..Default::default() });
                let r = nfs.create(&Create3Args { where_: Diropargs3 { dir, name }, how }).await?;
                match (r.ok(), a.sync) {
                    (Some(Create3ResOk { obj: Some(fh), .. }), true) => {
                        nfs.commit(&Commit3Args { file: fh, offset: 0, count: 0 }).await?.is_ok()
                    }
                    (Some(_), _) => true,
                    (None, _) => false,
                }
            }
            1 => nfs.lookup(&Lookup3Args { what: Diropargs3 { dir, name } }).await?.is_ok(),
            _ => nfs.remove(&Remove3Args { object: Diropargs3 { dir, name } }).await?.is_ok(),
        };
        if ok {
            tally.ops += 1;
            progress.ops.fetch_add(1, Ordering::Relaxed);
        } else {
            tally.errors += 1;
        }
    }
    Ok(tally)
}

/// A lookup that turns an NFS error into an error.
pub async fn lookup(nfs: &Nfs3Client, dir: &NfsFh3, name: &str) -> Result<NfsFh3, ClientError> {
    Ok(nfs
        .lookup(&Lookup3Args { what: Diropargs3 { dir: dir.clone(), name: name.into() } })
        .await?
        .ok_or_status()?
        .object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ior(layout: Layout) -> IorArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            a: IorArgs,
        }
        let mut a = P::parse_from(["x", "--export", "/e", "-t", "1K", "-b", "4K", "-s", "2"]).a;
        a.layout = vec![layout];
        a
    }

    /// Every layout covers its file exactly once across the processes.
    #[test]
    fn ior_layouts_tile_the_file() {
        for layout in [Layout::Fpp, Layout::SsfSegmented, Layout::SsfStrided] {
            let a = ior(layout);
            let n = 3;
            let mut all: Vec<u64> = (0..n).flat_map(|p| ior_offsets(&a, layout, p, n)).collect();
            if layout == Layout::Fpp {
                // Each process has its own file: the same offsets, n times.
                assert_eq!(all.len(), 3 * 8);
            }
            all.sort();
            all.dedup();
            let expect: Vec<u64> = (0..if layout == Layout::Fpp { 8 } else { 24 }).map(|i| i * 1024).collect();
            assert_eq!(all, expect, "{layout:?}");
        }
        // Strided: consecutive transfers belong to consecutive processes.
        let a = ior(Layout::SsfStrided);
        assert_eq!(ior_offsets(&a, Layout::SsfStrided, 1, 3).take(2).collect::<Vec<_>>(), vec![1024, 4096]);
    }

    #[test]
    fn units_compute_rates() {
        let t = Tally { bytes: 10 << 20, ops: 500, errors: 0 };
        assert_eq!(Unit::MiBPerSecond.value(&t, 2.0), 5.0);
        assert_eq!(Unit::Iops.value(&t, 0.5), 1000.0);
    }

    #[test]
    fn patterns_differ_per_process_and_have_the_length_asked() {
        assert_eq!(pattern(4096, 1).len(), 4096);
        assert_ne!(pattern(64, 1), pattern(64, 2));
    }
}

//! The sweep: for every point (clients × threads), every repetition, every
//! phase: prepare untimed, line every load generator up (across ranks),
//! time the phase from the start signal to the last generator's end, and
//! keep the run.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use keel_client::proto::nfs3::NfsFh3;
use keel_client::{ConnectOptions, NfsResultExt};
use serde::{Deserialize, Serialize};

use super::args::CommonArgs;
use super::group::Group;
use super::output;
use super::workload::{Client, Phase, Proc, Progress, State, Tally, Workload, lookup};
use keel_bench_format::result::{BenchResult, ClientFacts, HostFacts, Point, Run, SCHEMA, Target};

/// What a rank reports after a phase (sent to rank 0).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RankRun {
    /// From this rank's start signal to its last load generator's end.
    wall_seconds: f64,
    procs: Vec<ProcRun>,
}

/// What one load generator did in a phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ProcRun {
    index: u32,
    seconds: f64,
    bytes: u64,
    ops: u64,
    errors: u64,
}

pub async fn run(
    workload: Workload,
    common: CommonArgs,
    config: serde_json::Value,
    argv: Vec<String>,
) -> anyhow::Result<Option<BenchResult>> {
    let mut group = Group::join(common.coordinator.as_deref()).await?;
    let points = points(&common, &group)?;
    let addr = resolve(&common.server)?;
    let opts = ConnectOptions {
        auth: keel_client::auth_sys(common.uid, common.gid, &[]),
        reserved_port: !common.noresvport,
        call_timeout: Duration::from_secs(300),
        ..ConnectOptions::default()
    };
    let started = keel_bench_format::time::now();
    let control = connect(addr, &common, &opts).await?;
    let hosts = group.gather(keel_bench_format::host::facts()).await?;
    let run_id =
        group.broadcast(group.is_leader().then(|| format!("{}-{}", workload.name(), std::process::id()))).await?;
    let base = if group.is_leader() {
        let base = ensure_dir(&control, &control.root, &common.dir).await?;
        Some(ensure_dir(&control, &base, &run_id).await?)
    } else {
        None
    };
    group.barrier().await?;
    let base = match base {
        Some(b) => b,
        None => lookup(&control.nfs, &control.nfs.lookup_path(&control.root, &common.dir).await?, &run_id).await?,
    };

    let workload = Arc::new(workload);
    let phases = workload.phases();
    let mut result_points = Vec::new();
    for (clients, threads) in points {
        let runs = run_point(&workload, &common, &mut group, &control, &base, addr, &opts, clients, threads).await?;
        for (phase, runs) in phases.iter().zip(runs) {
            result_points.push(Point::new(&phase.name, clients, threads, phase.unit.name(), runs));
        }
    }
    group.barrier().await?;
    if !group.is_leader() {
        return Ok(None);
    }
    if !common.keep {
        let parent = control.nfs.lookup_path(&control.root, &common.dir).await?;
        control.nfs.remove_tree(&parent, run_id.as_str()).await.context("removing the benchmark's files")?;
    }
    let info = control.nfs.fsinfo(&keel_client::proto::nfs3::Fsinfo3Args { fsroot: control.root.clone() }).await?;
    let info = info.ok_or_status()?;
    let mut unique: Vec<HostFacts> = Vec::new();
    for h in hosts.unwrap_or_default() {
        if !unique.iter().any(|u| u.hostname == h.hostname) {
            unique.push(h);
        }
    }
    let server = if common.server_name.is_empty() { common.server.clone() } else { common.server_name.clone() };
    Ok(Some(BenchResult {
        schema: SCHEMA.into(),
        label: common.label.clone().unwrap_or_else(|| server.clone()),
        workload: workload.name().into(),
        started,
        finished: keel_bench_format::time::now(),
        command: argv,
        config,
        target: Target {
            address: addr.to_string(),
            export: common.export.clone(),
            server,
            export_options: common.export_options.clone(),
            rtmax: info.rtmax,
            wtmax: info.wtmax,
            dtpref: info.dtpref,
        },
        client: ClientFacts { keel_version: env!("CARGO_PKG_VERSION").into(), ranks: group.size(), hosts: unique },
        points: result_points,
    }))
}

/// The (clients, threads) points, in sweep order.
fn points(c: &CommonArgs, group: &Group) -> anyhow::Result<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    for &clients in &c.clients {
        for &threads in &c.threads {
            if clients == 0 || threads == 0 {
                bail!("--clients and --threads must be at least 1");
            }
            if group.size() > 1 && clients > group.size() {
                bail!("--clients {clients} needs {clients} ranks; this launch has {}", group.size());
            }
            if clients * threads > 65536 {
                bail!("{clients} clients x {threads} threads is more load generators than Keel bench runs (65536)");
            }
            out.push((clients, threads));
        }
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
async fn run_point(
    workload: &Arc<Workload>,
    common: &CommonArgs,
    group: &mut Group,
    control: &Client,
    base: &NfsFh3,
    addr: SocketAddr,
    opts: &ConnectOptions,
    clients: u32,
    threads: u32,
) -> anyhow::Result<Vec<Vec<Run>>> {
    let phases = workload.phases();
    let mut runs: Vec<Vec<Run>> = phases.iter().map(|_| Vec::new()).collect();
    // Solo: every client here. Several ranks: rank r is client r.
    let local: Vec<u32> = if group.size() == 1 {
        (0..clients).collect()
    } else if group.rank() < clients {
        vec![group.rank()]
    } else {
        Vec::new()
    };
    let mut conns = Vec::new();
    for _ in &local {
        conns.push(Arc::new(connect(addr, common, opts).await?));
    }
    for rep in 0..common.repeat {
        if rep > 0 {
            between_runs(common, group.is_leader()).await?;
        }
        let name = format!("c{clients}t{threads}r{rep}");
        if group.is_leader() {
            let dir = control.nfs.create_dir(base, name.as_str(), 0o777).await?;
            workload.prepare_shared(control, &dir).await.context("preparing shared files")?;
        }
        group.barrier().await?;
        let mut procs = Vec::new();
        for (client, conn) in local.iter().zip(&conns) {
            let dir = lookup(&conn.nfs, base, &name).await?;
            for t in 0..threads {
                let index = client * threads + t;
                procs.push(Arc::new(Proc { client: conn.clone(), index, count: clients * threads, dir: dir.clone() }));
            }
        }
        let mut states = prepare_all(workload, &procs).await?;
        for (i, phase) in phases.iter().enumerate() {
            group.barrier().await?;
            let (local_runs, back) =
                run_phase(workload, i, &procs, states, common, clients, threads, rep, phase).await?;
            states = back;
            if let Some(all) = group.gather(local_runs).await? {
                let run = summarize(phase, all);
                if !common.quiet {
                    output::run_line(workload.name(), phase, clients, threads, rep + 1, common.repeat, &run);
                }
                runs[i].push(run);
            }
        }
        group.barrier().await?;
        if group.is_leader() && !common.keep {
            control.nfs.remove_tree(base, name.as_str()).await.context("removing a repetition's files")?;
        }
    }
    Ok(runs)
}

async fn prepare_all(workload: &Arc<Workload>, procs: &[Arc<Proc>]) -> anyhow::Result<Vec<State>> {
    let mut tasks = Vec::new();
    for p in procs {
        let (w, p) = (workload.clone(), p.clone());
        tasks.push(tokio::spawn(async move { w.prepare(&p).await }));
    }
    let mut states = Vec::new();
    for t in tasks {
        states.push(t.await.map_err(|e| anyhow!("a load generator failed: {e}"))??);
    }
    Ok(states)
}

/// Runs one phase on every local load generator at once; rank 0's wall
/// clock runs from its start signal to the last result.
#[allow(clippy::too_many_arguments)]
async fn run_phase(
    workload: &Arc<Workload>,
    phase: usize,
    procs: &[Arc<Proc>],
    states: Vec<State>,
    common: &CommonArgs,
    clients: u32,
    threads: u32,
    rep: u32,
    info: &Phase,
) -> anyhow::Result<(RankRun, Vec<State>)> {
    let progress = Arc::new(Progress::default());
    let ticker = (!common.quiet && !procs.is_empty()).then(|| {
        let (total, unit) = workload.phase_total(phase, clients * threads);
        let label = format!("{} {} {clients}x{threads} rep {}/{}", workload.name(), info.name, rep + 1, common.repeat);
        tokio::spawn(output::progress_line(label, progress.clone(), total, unit))
    });
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (p, state) in procs.iter().zip(states) {
        let (w, p, progress) = (workload.clone(), p.clone(), progress.clone());
        tasks.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let tally = w.run(phase, &p, &state, &progress).await;
            (p.index, t0.elapsed().as_secs_f64(), tally, state)
        }));
    }
    let mut runs = Vec::new();
    let mut states = Vec::new();
    for t in tasks {
        let (index, seconds, tally, state) = t.await.map_err(|e| anyhow!("a load generator failed: {e}"))?;
        let tally: Tally = tally.with_context(|| format!("load generator {index} in phase {}", info.name))?;
        runs.push(ProcRun { index, seconds, bytes: tally.bytes, ops: tally.ops, errors: tally.errors });
        states.push(state);
    }
    let wall_seconds = start.elapsed().as_secs_f64();
    if let Some(t) = ticker {
        t.abort();
        output::clear_progress();
    }
    Ok((RankRun { wall_seconds, procs: runs }, states))
}

/// One run from every rank's report: totals over the longest wall time any
/// rank measured.
fn summarize(phase: &Phase, ranks: Vec<RankRun>) -> Run {
    let seconds = ranks.iter().map(|r| r.wall_seconds).fold(0.0, f64::max);
    let mut procs: Vec<ProcRun> = ranks.into_iter().flat_map(|r| r.procs).collect();
    procs.sort_by_key(|r| r.index);
    let total = Tally {
        bytes: procs.iter().map(|r| r.bytes).sum(),
        ops: procs.iter().map(|r| r.ops).sum(),
        errors: procs.iter().map(|r| r.errors).sum(),
    };
    Run {
        value: phase.unit.value(&total, seconds),
        seconds,
        bytes: total.bytes,
        ops: total.ops,
        per_process: procs
            .iter()
            .map(|r| phase.unit.value(&Tally { bytes: r.bytes, ops: r.ops, errors: 0 }, r.seconds))
            .collect(),
        errors: total.errors,
    }
}

async fn between_runs(common: &CommonArgs, leader: bool) -> anyhow::Result<()> {
    if common.pause > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(common.pause)).await;
    }
    if let (Some(cmd), true) = (&common.between, leader) {
        let status = tokio::process::Command::new("sh").arg("-c").arg(cmd).status().await?;
        if !status.success() {
            bail!("--between command {cmd:?} failed ({status})");
        }
    }
    Ok(())
}

async fn connect(addr: SocketAddr, common: &CommonArgs, opts: &ConnectOptions) -> anyhow::Result<Client> {
    mount(addr, common, opts).await.map_err(|e| keel_bench_format::secure::explain_refusal(e, opts))
}

async fn mount(addr: SocketAddr, common: &CommonArgs, opts: &ConnectOptions) -> anyhow::Result<Client> {
    let (nfs, root) = match common.mount_port {
        None => keel_client::mount(addr, &common.export, opts).await,
        Some(port) => {
            let mount_addr = SocketAddr::new(addr.ip(), port);
            let conn = keel_client::RpcConnection::connect(mount_addr, opts).await?;
            let root = keel_client::MountClient::new(conn).mnt_root(common.export.as_str()).await?;
            let nfs = keel_client::Nfs3Client::new(keel_client::RpcConnection::connect(addr, opts).await?);
            Ok((nfs, root))
        }
    }
    .with_context(|| format!("cannot mount {}:{}", common.server, common.export))?;
    let xfer = nfs.transfer_sizes(&root).await?;
    Ok(Client { nfs, root, xfer })
}

/// The directory `name` in `parent`, created if missing.
async fn ensure_dir(c: &Client, parent: &NfsFh3, name: &str) -> anyhow::Result<NfsFh3> {
    match lookup(&c.nfs, parent, name).await {
        Ok(fh) => Ok(fh),
        Err(_) => Ok(c.nfs.create_dir(parent, name, 0o777).await.with_context(|| format!("cannot create {name}"))?),
    }
}

fn resolve(server: &str) -> anyhow::Result<SocketAddr> {
    server
        .to_socket_addrs()
        .with_context(|| format!("--server {server:?} is not HOST:PORT"))?
        .next()
        .ok_or_else(|| anyhow!("--server {server:?} does not resolve"))
}

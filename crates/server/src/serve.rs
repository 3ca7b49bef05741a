//! `keel serve`: from a configuration to a running server, and back down
//! again on SIGTERM.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::reply_journal::FileReplyJournal;
use crate::tickle;
use anyhow::Context;
use keel_exports::ExportTable;
use keel_nfs3::{MountProgram, Nfs3Program};
use keel_nfs3_proto::{IPPROTO_TCP, IPPROTO_UDP};
use keel_nlm::{LockConfig, LockManager, NlmProgram, NsmProgram};
use keel_rpc::{Dispatcher, ReplyCache, RpcProgram};
use keel_store::Store;
use keel_store_local::{Export, ExportSpec, HandleKey, LocalStore};
use keel_transport::{Admit, Budget, Connections, Transport, TransportConfig};

use crate::cache::Served;
use std::net::{TcpListener, UdpSocket};
use tokio::sync::watch;

use crate::admin::{self, AdminState};
use crate::config::{Config, PortmapMode};
use crate::notify::notify;
use crate::portmap::{self, PortmapProgram};
use crate::reload::{Overrides, Reloader};
use crate::stats::{ReloadCounts, ServerStats};
use crate::{metrics, sys};

/// Open objects kept cached (each holds one or two descriptors).
const CACHED_INODES_MAX: usize = 65536;
/// Replies kept for retransmitted non-idempotent calls, WRITE included. A
/// WRITE reply is about 200 bytes and an entry costs about 250 more: the
/// byte bound is what holds at about 75,000 entries, several seconds of
/// small writes at full speed, minutes at the rate one client host makes.
const REPLY_CACHE_ENTRIES_MAX: usize = 131_072;
const REPLY_CACHE_BYTES_MAX: usize = 32 << 20;
/// The mount list (DUMP), in `state_dir`: it survives restarts and, on
/// shared storage, failovers.
const MOUNT_LIST_FILE: &str = "mount-list";

/// Connections waiting to be accepted, per listener (the kernel caps it at
/// net.core.somaxconn).
const LISTEN_BACKLOG: i32 = 4096;
/// Lock-holding open file descriptions (one per lock owner and file), at
/// most; besides the cache's descriptors (see `cached_inodes_max`).
const LOCK_FILES_MAX: usize = 16384;
/// Client hosts holding locks at once, at most.
const LOCK_HOSTS_MAX: usize = 4096;
/// Replies kept for retransmitted NLM calls over UDP.
const UDP_REPLY_CACHE_ENTRIES_MAX: usize = 4096;
const UDP_REPLY_CACHE_BYTES_MAX: usize = 4 << 20;
/// Pipes for spliced READs (each 1 MiB, the largest READ; two descriptors
/// each, inside the reserve of `cached_inodes_max`). Their pages count
/// against the user root's `pipe-user-pages-soft` (64 MiB by default):
/// half of it, so other root processes without CAP_SYS_RESOURCE still get
/// full-size pipes. A READ that finds none free copies.
const READ_PIPES_MAX: usize = 32;
/// How long a stop waits for calls in flight before giving up on them.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `config` (read from `file`, if any, with `overrides` applied:
/// an export reload reads the file again) until SIGTERM or SIGINT.
/// `banner` is printed once serving, given the NFS addresses, the MOUNT
/// port and whether a portmapper knows the programs.
pub fn run(
    config: Config,
    file: Option<PathBuf>,
    overrides: Overrides,
    banner: impl FnOnce(&[SocketAddr], u16, bool) -> String,
) -> anyhow::Result<()> {
    // Every check of the configuration before anything is made on disk.
    let origin = file.as_ref().map_or_else(|| "the command line".to_owned(), |f| f.display().to_string());
    let checked = crate::validate::check(&config, &origin)?;
    for w in &checked.warnings {
        tracing::warn!("{w}");
    }
    keel_store_local::ident::check_privileges().map_err(anyhow::Error::msg)?;
    // The Kerberos key before anything is made: a keytab that is missing
    // stops the start with nothing left behind.
    let gss = crate::kerberos::start(&config)?;
    sys::clear_umask();
    let nofile = sys::raise_open_file_limit();

    let state_dir = &config.server.state_dir;
    // Held until the process ends: nothing in the state directory is read
    // or written before it is ours.
    let _state = crate::state_dir::StateDir::open(state_dir)?;
    let key = HandleKey::load_or_create(&state_dir.join("handle.key"))?;
    let mut opened = Vec::new();
    for e in &config.exports {
        let spec = ExportSpec { id: e.id, path: e.path.clone(), fsid: e.fsid };
        let export =
            Export::open(&spec, &key).with_context(|| format!("cannot export {} (id {})", e.path.display(), e.id))?;
        tracing::info!(
            export = e.id,
            path = %e.path.display(),
            fsid = format_args!("{:#x}", export.fsid),
            fsid_from = crate::validate::fsid_source_text(export.fsid_source),
            subtree = export.is_subtree(),
            "exporting"
        );
        opened.push(export);
    }
    let rules = config.exports.iter().map(|e| (e.id, e.clients.clone())).collect();
    let lock_files_max = lock_files_max(nofile);
    // Each delegation holds a descriptor for its file lease (a write
    // lease's keeps the file's cached one open).
    let delegations_on = config.server.nfs4_read_delegations || config.server.nfs4_write_delegations;
    let delegations_max = if delegations_on { lock_files_max } else { 0 };
    let cached_max = cached_inodes_max(
        nofile,
        config.server.max_connections + lock_files_max + delegations_max + 2 * READ_PIPES_MAX,
    );
    tracing::info!(open_files_limit = nofile, cached_inodes_max = cached_max, "descriptor budget");
    let mut store = LocalStore::new(opened, key.clone(), cached_max)?;
    match store.splice_reads(READ_PIPES_MAX, keel_nfs3::IO_BYTES_MAX as usize) {
        Ok(()) => tracing::info!(pipes = ?store.pipe_counts().map(|c| c.made), "READs are spliced from the page cache"),
        Err(e) => tracing::warn!(error = %e, "cannot make pipes for spliced READs; READs copy their data"),
    }
    // The cache's log is replayed here, before the first call is served.
    let served = Arc::new(crate::cache::open(&config, Arc::new(store))?);
    let exports = ExportTable::new(served.clone(), rules);
    let exports = Arc::new(if config.ha { exports.holding_calls_when_storage_fails() } else { exports });
    let calls = keel_stats::CallStats::new(&crate::stats::programs());
    calls.set_exports(&config.exports.iter().map(|e| e.id).collect::<Vec<_>>());
    let reloader = Arc::new(Reloader::new(file, overrides, key, exports.clone(), calls.clone(), config.clone()));
    // Logged so an operator can match a start with what clients saw.
    let verifier = u64::from_be_bytes(served.write_verifier());
    tracing::info!(verifier = format_args!("{verifier:016x}"), "write verifier for this start");

    // NFS calls never touch this runtime (see transport/); it carries only
    // the admin socket and signals, so one thread is enough.
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).thread_name("keel-admin").enable_all().build()?;
    let mut lock_config = LockConfig::new(crate::state_dir::nsm_dir(&config));
    lock_config.grace_max = config.server.grace_max;
    lock_config.locks_per_client_max = config.server.max_locks_per_client;
    lock_config.hosts_max = LOCK_HOSTS_MAX;
    lock_config.lock_files_max = lock_files_max;
    // The one grace period of NLM and NFSv4.1 (recovery::shared_grace).
    let recovery = crate::recovery::open(&config, &lock_config.nsm_state_dir)?;
    let grace = recovery.grace.clone();
    let locks = LockManager::with_grace(exports.clone(), lock_config, recovery.nsm, recovery.nlm_previous, grace)
        .context("cannot start the lock manager")?;
    let locks = Arc::new(locks);
    // Replies to the calls NFSv4.1 sends back on connections (callbacks).
    let reply_router = Arc::new(keel_rpc::ReplyRouter::default());
    let nfs4 = crate::nfs4::program(
        &config,
        exports.clone(),
        &calls,
        reply_router.clone(),
        recovery.nfs4_records,
        recovery.grace,
        delegations_max,
    )?;
    let lock_threads = keel_nlm::courier::start(&locks)?;
    let stateful = Stateful { locks: locks.clone(), nfs4, reply_router };
    let stopped = runtime.block_on(serve(&config, exports, stateful, calls, reloader, gss, banner))?;
    // Calls in flight finish and their replies go out before the file
    // systems are synced.
    let linger = if config.ha { keel_transport::LINGER_HA } else { keel_transport::LINGER };
    stopped.transport.stop(DRAIN_TIMEOUT, linger);
    locks.stop();
    lock_threads.join();
    runtime.shutdown_timeout(Duration::from_secs(1));
    // Dirty data stays in the cache's log for the next start.
    served.stop();
    if let Err(e) = served.sync_all() {
        tracing::error!(error = %e, "sync at stop failed");
    }
    if let Some(mappings) = stopped.registered
        && let Err(e) = portmap::register_with_rpcbind(&mappings, false)
    {
        tracing::warn!(error = %e, "could not unregister from rpcbind");
    }
    admin::unbind(&config.server.state_dir);
    tracing::info!("stopped");
    Ok(())
}

/// The programs whose state outlives a call, made before serving: they
/// share the grace period of this start.
struct Stateful {
    /// NLM's and NSM's.
    locks: Arc<LockManager<Served>>,
    /// NFSv4.1's, if served.
    nfs4: Option<Arc<crate::nfs4::Nfs4>>,
    /// Where the dispatcher gives replies to NFSv4.1's callbacks.
    reply_router: Arc<keel_rpc::ReplyRouter>,
}

struct Stopped {
    transport: Transport,
    registered: Option<Vec<keel_nfs3_proto::portmap::Mapping>>,
}

/// The dispatcher of `programs`, with RPCSEC_GSS if the server has a
/// key: the TCP and UDP dispatchers alike, sharing one [`GssServer`] (one
/// table of contexts and its bounds, whichever transport made a context).
///
/// [`GssServer`]: keel_rpc::gss::GssServer
fn dispatcher_of(
    programs: Vec<Arc<dyn RpcProgram>>,
    cache: ReplyCache,
    gss: Option<&Arc<keel_rpc::gss::GssServer>>,
) -> anyhow::Result<Dispatcher> {
    let dispatcher = Dispatcher::new(programs, cache)?;
    Ok(match gss {
        Some(gss) => dispatcher.with_gss(gss.clone()),
        None => dispatcher,
    })
}

async fn serve(
    config: &Config,
    exports: Arc<ExportTable<Served>>,
    Stateful { locks, nfs4, reply_router }: Stateful,
    calls: Arc<keel_stats::CallStats>,
    reloader: Arc<Reloader>,
    gss: Option<Arc<keel_rpc::gss::GssServer>>,
    banner: impl FnOnce(&[SocketAddr], u16, bool) -> String,
) -> anyhow::Result<Stopped> {
    let server = &config.server;
    let admin_listener = admin::bind(&server.state_dir)?;
    let mut nfs_listeners = Vec::new();
    for addr in &server.listen {
        nfs_listeners.push(listen(*addr, config.ha).with_context(|| format!("cannot listen on {addr}"))?);
    }
    let mut mount_listeners = Vec::new();
    for addr in &server.mount_listen {
        mount_listeners.push(listen(*addr, config.ha).with_context(|| format!("cannot listen on {addr}"))?);
    }
    let metrics_listener = match server.metrics_listen {
        Some(addr) => Some(metrics::bind(addr).await?),
        None => None,
    };
    let bound: Vec<SocketAddr> = nfs_listeners.iter().map(|l| l.local_addr()).collect::<Result<_, _>>()?;
    let nfs_port = bound[0].port();
    let mount_port = match mount_listeners.first() {
        Some(l) => l.local_addr()?.port(),
        None => nfs_port,
    };

    let (shutdown_tx, shutdown) = watch::channel(false);
    let started = SystemTime::now();
    if server.fault_injection {
        tracing::warn!("fault injection is on: the administration socket can make storage calls fail (for tests)");
    }
    let nfs: Arc<dyn RpcProgram> = Arc::new(Nfs3Program::new(exports.clone()));
    // Workers keep the last caller's file-system identity; state_dir is
    // root's.
    let as_root: keel_rpc::Privileged = Arc::new(|f| keel_store_local::ident::as_root(f));
    let mount: Arc<dyn RpcProgram> =
        Arc::new(MountProgram::with_list_file(exports.clone(), server.state_dir.join(MOUNT_LIST_FILE), as_root));
    let nlm: Arc<dyn RpcProgram> = Arc::new(NlmProgram::new(locks.clone()));
    let nsm: Arc<dyn RpcProgram> = Arc::new(NsmProgram::new(locks));
    // NLM and NSM share the NFS ports, over TCP and UDP (clients use both).
    let mut datagrams = Vec::new();
    let udp_dispatcher = Arc::new(dispatcher_of(
        vec![calls.counted(nlm.clone()), calls.counted(nsm.clone())],
        ReplyCache::new(UDP_REPLY_CACHE_ENTRIES_MAX, UDP_REPLY_CACHE_BYTES_MAX),
        gss.as_ref(),
    )?);
    for addr in &bound {
        let udp = bind_udp(*addr, config.ha).with_context(|| format!("cannot listen on UDP {addr}"))?;
        datagrams.push((udp, udp_dispatcher.clone()));
    }
    let serves_v3 = server.nfs_versions.v3;
    let mut served: Vec<(&dyn RpcProgram, u32, u16)> = Vec::new();
    if serves_v3 {
        served.push((&*nfs, IPPROTO_TCP, nfs_port));
    }
    if let Some(nfs4) = &nfs4 {
        served.push((&**nfs4, IPPROTO_TCP, nfs_port));
    }
    served.extend([
        (&*mount, IPPROTO_TCP, mount_port),
        (&*nlm, IPPROTO_TCP, nfs_port),
        (&*nlm, IPPROTO_UDP, nfs_port),
        (&*nsm, IPPROTO_TCP, nfs_port),
        (&*nsm, IPPROTO_UDP, nfs_port),
    ]);
    let mappings = portmap::mappings(&served);
    drop(served);
    let mut programs: Vec<Arc<dyn RpcProgram>> = Vec::new();
    if serves_v3 {
        programs.push(nfs);
    }
    programs.extend(nfs4.clone().map(|p| p as Arc<dyn RpcProgram>));
    programs.extend([mount, nlm, nsm]);
    let mut registered = None;
    // Whether a portmapper knows our programs: the clients' lock managers
    // find NLM through it.
    let mut portmapped = true;
    let mut portmap_listeners = Vec::new();
    match start_portmap(server.portmap, &bound, &mappings, config.ha).await? {
        PortmapRole::Serving(program, sockets) => {
            let udp_dispatcher = Arc::new(dispatcher_of(
                vec![calls.counted(program.clone() as Arc<dyn RpcProgram>)],
                ReplyCache::new(16, 64 << 10),
                gss.as_ref(),
            )?);
            for (tcp, udp) in sockets {
                portmap_listeners.push(tcp);
                datagrams.push((udp, udp_dispatcher.clone()));
            }
            programs.push(program);
        }
        PortmapRole::Registered => registered = Some(mappings.clone()),
        PortmapRole::None => portmapped = false,
    }

    let programs = programs.into_iter().map(|p| calls.counted(p)).collect();
    let mut cache = ReplyCache::new(REPLY_CACHE_ENTRIES_MAX, REPLY_CACHE_BYTES_MAX);
    if config.ha {
        let (journal, entries) = FileReplyJournal::open(&server.state_dir)
            .with_context(|| format!("cannot open the reply journal in {}", server.state_dir.display()))?;
        tracing::info!(entries = entries.len(), "duplicate reply cache loaded from the shared storage");
        for (key, reply) in entries {
            cache.preload(key, reply);
        }
        cache = cache.with_journal(Arc::new(journal));
    }
    let mut dispatcher = dispatcher_of(programs, cache, gss.as_ref())?.with_reply_router(reply_router);
    // Connections are the TCP transport's: only its dispatcher is told
    // when one closes (NFSv4.1 binds sessions to them).
    if let Some(nfs4) = &nfs4 {
        dispatcher = dispatcher.with_connection_watcher(nfs4.clone());
    }
    let dispatcher = Arc::new(dispatcher);
    let conns = Connections::new(server.max_connections, server.idle_timeout, server.stall_timeout);
    let budget = Budget::new(server.max_inflight_bytes, server.max_inflight_bytes_per_connection);
    let admitting = exports.clone();
    let mut listeners: Vec<(TcpListener, Admit)> =
        nfs_listeners.into_iter().chain(mount_listeners).map(|l| (l, Admit::Clients)).collect();
    listeners.extend(portmap_listeners.into_iter().map(|l| (l, Admit::Anyone)));
    let transport = Transport::start(TransportConfig {
        workers: server.workers,
        poll_spin: server.poll_spin,
        requests_per_connection: server.max_requests_per_connection,
        dispatcher: dispatcher.clone(),
        budget: budget.clone(),
        conns: conns.clone(),
        admits: Box::new(move |ip| admitting.admits(ip)),
        listeners,
        datagrams,
        // A handler that panicked may have left its caller's identity on
        // the worker's thread.
        reset_after_panic: keel_store_local::ident::reset,
    })?;
    let stats = Arc::new(ServerStats {
        calls,
        exports: exports.clone(),
        dispatcher,
        conns,
        budget,
        pool: transport.probe(),
        started,
        reloads: ReloadCounts::default(),
        nfs4,
    });
    if let Some(listener) = metrics_listener {
        tracing::info!(address = ?listener.local_addr().ok(), "serving Prometheus metrics at /metrics");
        tokio::spawn(metrics::serve(listener, stats.clone(), shutdown.clone()));
    }
    let admin_state = Arc::new(AdminState {
        served: exports.store.clone(),
        state_dir: server.state_dir.clone(),
        started,
        listen: bound.iter().map(|a| a.to_string()).collect(),
        fault_injection: server.fault_injection,
        stats: stats.clone(),
        reloader: reloader.clone(),
        keytab: gss.is_some().then(|| server.keytab.clone()),
    });
    tokio::spawn(admin::serve(admin_listener, admin_state, shutdown.clone()));
    if config.ha {
        // Listening already: a tickled client's reconnection is accepted at
        // once (refused, the kernel client would wait seconds to retry).
        let previous = tickle::load(&server.state_dir);
        if !previous.is_empty() {
            tokio::spawn(tickle::send_rounds(previous.clone(), tickle::ADDRESS_WAIT));
        }
        match tickle::Recorder::open(&server.state_dir) {
            Ok(recorder) => {
                tokio::spawn(record_connections(stats.clone(), recorder, previous, shutdown.clone()));
            }
            Err(e) => tracing::warn!(error = %e, "cannot keep the connection list: a failover tickles no client"),
        }
    }
    tracing::info!(
        listen = ?bound,
        nfs_versions = %server.nfs_versions,
        mount_port,
        workers = server.workers,
        "serving NFS, MOUNT v3, NLM v4 and NSM"
    );
    // Informational: a reader that has gone (`keel serve | head -1`) does
    // not stop the server.
    {
        use std::io::Write;
        let _ = writeln!(std::io::stdout(), "{}", banner(&bound, mount_port, portmapped))
            .and_then(|()| std::io::stdout().flush());
    }
    notify("READY=1\nSTATUS=serving");

    wait_for_stop_signal(&reloader, &stats).await?;
    notify("STOPPING=1\nSTATUS=stopping");
    tracing::info!("stopping: no new connections or calls; finishing calls in flight");
    let _ = shutdown_tx.send(true);
    Ok(Stopped { transport, registered })
}

/// Keeps `state_dir/connections` (see `tickle`) within a second of the
/// connection table; `recorded` is what the file holds now.
async fn record_connections(
    stats: Arc<ServerStats>,
    mut recorder: tickle::Recorder,
    mut recorded: Vec<tickle::Connection>,
    mut shutdown: watch::Receiver<bool>,
) {
    recorded.sort();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
        let mut now: Vec<tickle::Connection> =
            stats.conns.state().open.iter().filter_map(|c| Some((c.peer, c.local?))).collect();
        now.sort();
        if now != recorded {
            let list = now.clone();
            let saved = tokio::task::spawn_blocking(move || {
                let result = recorder.save(&list);
                (recorder, result)
            })
            .await;
            match saved {
                Ok((back, result)) => {
                    recorder = back;
                    match result {
                        Ok(()) => recorded = now,
                        Err(e) => tracing::warn!(error = %e, "cannot record the connections for a failover's tickles"),
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the connection recorder failed");
                    return;
                }
            }
        }
    }
}

enum PortmapRole {
    /// Keel is the portmapper: its program, and its TCP and UDP sockets on
    /// port 111, served by the transport.
    Serving(Arc<PortmapProgram>, Vec<(TcpListener, UdpSocket)>),
    Registered,
    None,
}

async fn start_portmap(
    mode: PortmapMode,
    bound: &[SocketAddr],
    mappings: &[keel_nfs3_proto::portmap::Mapping],
    freebind: bool,
) -> anyhow::Result<PortmapRole> {
    if mode == PortmapMode::Off {
        return Ok(PortmapRole::None);
    }
    if mode != PortmapMode::Register {
        let mut ips: Vec<IpAddr> = bound.iter().map(|a| a.ip()).collect();
        ips.dedup();
        match bind_portmap(&ips, freebind) {
            Ok(sockets) => {
                let mut all = mappings.to_vec();
                all.extend(portmap::self_mappings());
                tracing::info!(addresses = ?ips, "serving portmap on port 111");
                return Ok(PortmapRole::Serving(Arc::new(PortmapProgram::new(all)), sockets));
            }
            Err(e) if mode == PortmapMode::Serve => return Err(e.context("cannot serve portmap on port 111")),
            Err(e) => tracing::debug!(error = %e, "port 111 not available; trying the running rpcbind"),
        }
    }
    match tokio::task::block_in_place(|| portmap::register_with_rpcbind(mappings, true)) {
        Ok(()) => {
            tracing::info!("registered NFS and MOUNT with the running rpcbind");
            Ok(PortmapRole::Registered)
        }
        Err(e) if mode == PortmapMode::Register => Err(anyhow::Error::new(e).context("cannot register with rpcbind")),
        Err(e) => {
            tracing::warn!(error = %e, "no portmap: port 111 is taken and rpcbind did not take our registration; clients need port= and mountport= options");
            Ok(PortmapRole::None)
        }
    }
}

/// A TCP listener with room for a burst of connections (a cluster's
/// clients mounting at once) in its backlog.
/// `freebind` (under `[ha]`): the floating address may not be this
/// node's yet; Keel listens on it before it comes up, so that no client
/// finds the address without a listener (refused, the Linux client waits
/// 3 s before it connects again).
fn listen(addr: SocketAddr, freebind: bool) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if freebind {
        set_freebind(&socket, addr)?;
    }
    socket.bind(&addr.into()).map_err(not_this_hosts)?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// A bind to an address this host does not hold says what to do about it.
fn not_this_hosts(e: std::io::Error) -> std::io::Error {
    if e.kind() != std::io::ErrorKind::AddrNotAvailable {
        return e;
    }
    std::io::Error::new(
        e.kind(),
        format!(
            "{e}: not an address of this host (a floating address needs [ha] enabled = true, which listens on \
             it before it comes up)"
        ),
    )
}

fn bind_udp(addr: SocketAddr, freebind: bool) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, None)?;
    if freebind {
        set_freebind(&socket, addr)?;
    }
    socket.bind(&addr.into()).map_err(not_this_hosts)?;
    Ok(socket.into())
}

fn set_freebind(socket: &socket2::Socket, addr: SocketAddr) -> std::io::Result<()> {
    if addr.is_ipv4() { socket.set_freebind_v4(true) } else { socket.set_freebind_v6(true) }
}

fn bind_portmap(ips: &[IpAddr], freebind: bool) -> anyhow::Result<Vec<(TcpListener, UdpSocket)>> {
    let mut out = Vec::new();
    for ip in ips {
        let addr = SocketAddr::new(*ip, keel_nfs3_proto::PMAP_PORT);
        out.push((listen(addr, freebind)?, bind_udp(addr, freebind)?));
    }
    Ok(out)
}

/// Waits for SIGTERM or SIGINT; reloads the exports on SIGHUP meanwhile.
async fn wait_for_stop_signal(reloader: &Arc<Reloader>, stats: &Arc<ServerStats>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        tokio::select! {
            _ = term.recv() => {
                tracing::info!("SIGTERM received");
                return Ok(());
            }
            _ = int.recv() => {
                tracing::info!("SIGINT received");
                return Ok(());
            }
            _ = hup.recv() => {
                tracing::info!("SIGHUP received: reloading the exports");
                notify("RELOADING=1\nSTATUS=reloading exports");
                let (reloader, stats) = (reloader.clone(), stats.clone());
                // The outcome is logged by the reload itself.
                let _ = tokio::task::spawn_blocking(move || reloader.reload(&stats.reloads, None)).await;
                notify("READY=1\nSTATUS=serving");
            }
        }
    }
}

/// Lock-holding descriptions: at most a quarter of the open-file limit.
fn lock_files_max(nofile: u64) -> usize {
    usize::try_from(nofile / 4).unwrap_or(usize::MAX).clamp(16, LOCK_FILES_MAX)
}

/// Cached objects hold one descriptor, two once written, three once
/// written synchronously (an idle description kept for stable writes):
/// they may have a third of what the limit leaves after connections and
/// per-call opens, so the cache evicts before open() fails with EMFILE
/// (which clients see as JUKEBOX, and retry forever).
fn cached_inodes_max(nofile: u64, max_connections: usize) -> usize {
    let reserve = (max_connections as u64 + 256).min(nofile / 2);
    let room = usize::try_from(nofile.saturating_sub(reserve) / 3).unwrap_or(usize::MAX);
    room.clamp(16, CACHED_INODES_MAX)
}

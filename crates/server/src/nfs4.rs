//! NFSv4.1 and 4.2 in the server: the program built from the
//! configuration, with what it needs from the state directory and the
//! statistics.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bytes::Bytes;
use keel_exports::{ExportTable, PseudoKey};
use keel_nfs4::{MinorVersions, Nfs4Config, Nfs4Program, OpObserver};
use keel_nfs4_proto::{Nfsstat4, OpNum};
use keel_nfs4_state::{BootEpoch, SharedGrace, StateConfig};
use keel_rpc::ReplyRouter;
use keel_stats::{CallStats, OperationCounter};
use keel_store::state_file::{self, RecordFile, Stored};

use crate::cache::Served;
use crate::config::Config;
use crate::recovery::FileClientRecords;

/// The pseudo file system's handle key, in the state directory: pseudo
/// handles stay valid across restarts (and, under `[ha]`, failovers).
pub const PSEUDO_KEY_FILE: &str = "nfs4-pseudo-key";
const PSEUDO_KEY_BYTES: usize = 16;

/// The boot epoch of the last start, in the state directory: each start
/// takes a larger one.
pub const EPOCH_FILE: &str = "nfs4-epoch";
const EPOCH_SLOT_BYTES: usize = 512;
/// EXCHANGE_ID's server owner and scope, made once, in the state
/// directory.
pub const SERVER_OWNER_FILE: &str = "nfs4-server-owner";
/// NFS4_OPAQUE_LIMIT.
const SERVER_OWNER_BYTES_MAX: usize = 1024;

/// Whether the configuration serves a minor version of NFSv4.
pub fn served(config: &Config) -> bool {
    let versions = config.server.nfs_versions;
    versions.v41 || versions.v42
}

/// The NFSv4 program as the server builds it.
pub type Nfs4 = Nfs4Program<Served>;

/// The state's configuration: at most `delegations_max` delegations (each
/// holds a descriptor for its file lease: the server's descriptor budget
/// counts them); none granted (read delegations off), the default bound.
fn state_config(config: &Config, delegations_max: usize) -> StateConfig {
    let defaults = StateConfig::default();
    let mut limits = defaults.limits.clone();
    let per_address = config.server.nfs4_clients_per_address_max;
    limits.clients.per_address = per_address;
    limits.reply_cache_bytes = reply_cache_bytes(&defaults, per_address, memory_bytes());
    if delegations_max > 0 {
        let total = limits.delegations.total.min(delegations_max);
        // One address holds a quarter at most (keel-exports' claims).
        let per_address = limits.delegations.per_address.min((total / 4).max(1));
        limits.delegations = keel_nfs4_state::Bound { total, per_address };
    }
    let write_delegations = config.server.nfs4_write_delegations;
    StateConfig {
        lease: config.server.nfs4_lease,
        grace_max: config.server.grace_max,
        limits,
        write_delegations,
        ..defaults
    }
}

/// The reply caches' budget: as knfsd's, a 128th of the machine's memory
/// (64 MiB at least), so that a server with memory for more clients gives
/// more of them all the slots they ask for (a session past the budget has
/// one slot: see keel-nfs4-state); an address's share is what its
/// `nfs4_clients_per_address_max` clients take at the most slots each
/// (the default's at least; a quarter of the whole at most, by the pool).
fn reply_cache_bytes(
    defaults: &StateConfig,
    clients_per_address: usize,
    memory: Option<u64>,
) -> keel_nfs4_state::Bound {
    let default = defaults.limits.reply_cache_bytes;
    let by_memory = memory.map_or(0, |m| usize::try_from(m / 128).unwrap_or(usize::MAX));
    let session = defaults.channel.slots_per_session_max as usize * defaults.channel.cached_response_bytes_max as usize;
    keel_nfs4_state::Bound {
        total: default.total.max(by_memory),
        per_address: default.per_address.max(clients_per_address.saturating_mul(session)),
    }
}

/// The machine's memory (`MemTotal` of /proc/meminfo), if it tells.
fn memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().strip_suffix("kB")?.trim();
    kib.parse::<u64>().ok()?.checked_mul(1024)
}

/// The NFSv4 program, if the configuration serves a minor version of it:
/// its clients of earlier starts are `records` (the client records in the
/// state directory), which `grace` (shared with NLM) waits for.
pub fn program(
    config: &Config,
    exports: Arc<ExportTable<Served>>,
    calls: &Arc<CallStats>,
    reply_router: Arc<ReplyRouter>,
    records: FileClientRecords,
    grace: SharedGrace,
    delegations_max: usize,
) -> anyhow::Result<Option<Arc<Nfs4>>> {
    let versions = config.server.nfs_versions;
    let minors = MinorVersions { v41: versions.v41, v42: versions.v42 };
    if !minors.any() {
        return Ok(None);
    }
    let state_dir = &config.server.state_dir;
    let nfs4 = Nfs4Config {
        minors,
        state: state_config(config, delegations_max),
        epoch: boot_epoch(state_dir, SystemTime::now())?,
        session_key: random_bytes()?,
        pseudo_key: pseudo_key(state_dir)?,
        server_owner: server_owner(state_dir, &host_name())?,
    };
    let mut program = Nfs4Program::with_grace(exports, nfs4, Box::new(records), grace)
        .map_err(|e| anyhow::anyhow!("cannot start NFSv4: {e}"))?
        .with_reply_router(reply_router)
        .with_read_delegations(config.server.nfs4_read_delegations);
    if let Some(domain) = &config.server.nfs4_idmap_domain {
        program = program.with_owner_names(keel_nfs4::OwnerNames::new(domain, Arc::new(crate::sys::SystemUsers)));
    }
    if let Some(counter) = calls.operations(crate::stats::NFS4_OPERATIONS) {
        program = program.with_observer(Arc::new(CountedOps(counter)));
    }
    let program = Arc::new(program);
    program.start_callbacks().context("cannot start the NFSv4.1 callback thread")?;
    Ok(Some(program))
}

/// This start's boot epoch, larger than the last start's (kept in
/// [`EPOCH_FILE`], durably before the first client ID is made of it): the
/// client IDs and stateids of an earlier start are then stale, even after
/// a restart within the same second or with the clock set back. Seconds
/// since 1970 otherwise, as knfsd's boot time. The file is a record
/// rewritten in place (a start on a full file system needs no new block).
fn boot_epoch(state_dir: &Path, now: SystemTime) -> anyhow::Result<BootEpoch> {
    let path = state_dir.join(EPOCH_FILE);
    let (mut file, stored) =
        RecordFile::open(&path, EPOCH_SLOT_BYTES).with_context(|| format!("cannot open {}", path.display()))?;
    let last = match stored {
        Stored::Nothing => 0,
        Stored::Record(bytes) if bytes.len() == 4 => u32::from_be_bytes(bytes.try_into().expect("4 bytes")),
        Stored::Record(_) | Stored::Unrecognised(_) => bail!(
            "{} holds no boot epoch: remove it (NFSv4.1 clients of the last start may then not be told \
             that their state is stale if the clock was set back)",
            path.display()
        ),
    };
    let seconds = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let epoch = u32::try_from(seconds).unwrap_or(u32::MAX - 1).max(last.saturating_add(1));
    let epoch = BootEpoch::new(epoch)
        .with_context(|| format!("{} holds the largest boot epoch there is: remove it", path.display()))?;
    file.write(&epoch.get().to_be_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(epoch)
}

/// The key of pseudo handles: read from the state directory, or made
/// there (0600) at the first start.
fn pseudo_key(state_dir: &Path) -> anyhow::Result<PseudoKey> {
    let path = state_dir.join(PSEUDO_KEY_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => match <[u8; PSEUDO_KEY_BYTES]>::try_from(bytes.as_slice()) {
            Ok(key) => Ok(PseudoKey::from_bytes(key)),
            Err(_) => bail!(
                "{} holds {} bytes, not {PSEUDO_KEY_BYTES}: remove it to have a new key made \
                 (NFSv4 clients then see their pseudo file system handles turn stale)",
                path.display(),
                bytes.len()
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key: [u8; PSEUDO_KEY_BYTES] = random_bytes()?;
            state_file::replace_durably(&path, &key).with_context(|| format!("cannot write {}", path.display()))?;
            Ok(PseudoKey::from_bytes(key))
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn random_bytes<const N: usize>() -> anyhow::Result<[u8; N]> {
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("cannot read random bytes from /dev/urandom")?;
    Ok(b)
}

/// EXCHANGE_ID's server owner and scope: the host's name at the first
/// start (knfsd's are the host's name), kept in the state directory, so
/// that the node an `[ha]` service fails over to is the same server to the
/// clients (a client reclaims only from a server of the same scope, RFC
/// 8881 section 2.10.4).
fn server_owner(state_dir: &Path, host_name: &str) -> anyhow::Result<Bytes> {
    let path = state_dir.join(SERVER_OWNER_FILE);
    match std::fs::read(&path) {
        Ok(owner) if !owner.is_empty() && owner.len() <= SERVER_OWNER_BYTES_MAX => Ok(owner.into()),
        Ok(owner) => bail!(
            "{} holds {} bytes, not 1 to {SERVER_OWNER_BYTES_MAX}: remove it to have the host's name taken \
             (NFSv4.1 clients then cannot reclaim their state at the next start)",
            path.display(),
            owner.len()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let name = host_name.trim();
            let name = if name.is_empty() { "keel" } else { name };
            let owner = &name.as_bytes()[..name.len().min(SERVER_OWNER_BYTES_MAX)];
            state_file::replace_durably(&path, owner).with_context(|| format!("cannot write {}", path.display()))?;
            Ok(Bytes::copy_from_slice(owner))
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default()
}

struct CountedOps(OperationCounter);

impl OpObserver for CountedOps {
    fn op_done(&self, op: OpNum, status: Nfsstat4, elapsed: Duration) {
        self.0.record(op as u32, status != Nfsstat4::Ok, elapsed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reply caches' budget grows with the machine's memory and an
    /// address's share with its clients, never below the defaults.
    #[test]
    fn the_reply_cache_budget_follows_memory_and_the_clients_per_address() {
        let defaults = StateConfig::default();
        let (mib, gib) = (1usize << 20, 1u64 << 30);
        let budget = |clients, memory| reply_cache_bytes(&defaults, clients, memory);
        assert_eq!(budget(64, None), keel_nfs4_state::Bound { total: 64 * mib, per_address: 16 * mib });
        assert_eq!(budget(64, Some(4 * gib)).total, 64 * mib, "a small machine keeps the default");
        assert_eq!(budget(64, Some(24 * gib)).total, 192 * mib);
        assert_eq!(budget(1, Some(24 * gib)).per_address, 16 * mib);
        assert_eq!(budget(512, Some(24 * gib)).per_address, 128 * mib, "64 slots of 4 KiB each");
        assert!(memory_bytes().is_some_and(|m| m > 0), "this machine's /proc/meminfo");
    }

    /// Each start's epoch is larger than the last one's: in the same
    /// second, and with the clock set back; else it is the clock's.
    #[test]
    fn each_start_takes_a_larger_boot_epoch() {
        let dir = std::env::temp_dir().join(format!("keel-nfs4-epoch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(boot_epoch(&dir, at(1_000)).unwrap().get(), 1_000);
        assert_eq!(boot_epoch(&dir, at(1_000)).unwrap().get(), 1_001, "a restart within the same second");
        assert_eq!(boot_epoch(&dir, at(500)).unwrap().get(), 1_002, "the clock set back");
        assert_eq!(boot_epoch(&dir, at(2_000)).unwrap().get(), 2_000);
        std::fs::write(dir.join(EPOCH_FILE), vec![7; 1024]).unwrap();
        let e = format!("{:#}", boot_epoch(&dir, at(3_000)).unwrap_err());
        assert!(e.contains(EPOCH_FILE) && e.contains("remove it"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The server owner is the host's name at the first start, and stays
    /// what it was at later starts, on another host (a failover) too.
    #[test]
    fn the_server_owner_is_made_once_and_kept() {
        let dir = std::env::temp_dir().join(format!("keel-nfs4-owner-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(&server_owner(&dir, "node-a\n").unwrap()[..], b"node-a");
        assert_eq!(&server_owner(&dir, "node-b\n").unwrap()[..], b"node-a", "the other node of an HA pair");
        std::fs::write(dir.join(SERVER_OWNER_FILE), b"").unwrap();
        let e = format!("{:#}", server_owner(&dir, "node-b").unwrap_err());
        assert!(e.contains(SERVER_OWNER_FILE) && e.contains("remove it"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

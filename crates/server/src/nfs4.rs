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
use keel_nfs4_state::{BootEpoch, ClientRecords, MemoryRecords, StateConfig};
use keel_rpc::ReplyRouter;
use keel_stats::{CallStats, OperationCounter};
use keel_store::state_file;

use crate::cache::Served;
use crate::config::Config;

/// The pseudo file system's handle key, in the state directory: pseudo
/// handles stay valid across restarts (and, under `[ha]`, failovers).
pub const PSEUDO_KEY_FILE: &str = "nfs4-pseudo-key";
const PSEUDO_KEY_BYTES: usize = 16;

/// The NFSv4 program as the server builds it.
pub type Nfs4 = Nfs4Program<Served>;

/// The NFSv4 program, if the configuration serves a minor version of it.
pub fn program(
    config: &Config,
    exports: Arc<ExportTable<Served>>,
    calls: &Arc<CallStats>,
    reply_router: Arc<ReplyRouter>,
) -> anyhow::Result<Option<Arc<Nfs4>>> {
    let versions = config.server.nfs_versions;
    let minors = MinorVersions { v41: versions.v41, v42: versions.v42 };
    if !minors.any() {
        return Ok(None);
    }
    let state_dir = &config.server.state_dir;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let nfs4 = Nfs4Config {
        minors,
        state: StateConfig { grace_max: config.server.grace_max, ..StateConfig::default() },
        // Seconds since 1970 grow from one start to the next.
        epoch: BootEpoch::new(now.as_secs() as u32).context("the system clock is before 1970")?,
        session_key: random_bytes()?,
        pseudo_key: pseudo_key(state_dir)?,
        server_owner: server_owner(),
    };
    let mut program = Nfs4Program::new(exports, nfs4, client_records())
        .map_err(|e| anyhow::anyhow!("cannot start NFSv4: {e}"))?
        .with_reply_router(reply_router)
        .with_read_delegations(config.server.nfs4_read_delegations);
    if let Some(counter) = calls.operations(crate::stats::NFS4_OPERATIONS) {
        program = program.with_observer(Arc::new(CountedOps(counter)));
    }
    let program = Arc::new(program);
    program.start_callbacks().context("cannot start the NFSv4.1 callback thread")?;
    Ok(Some(program))
}

/// Where NFSv4.1 client records are kept for reclaim after a restart.
/// In memory for now: a restart forgets its clients, which then cannot
/// reclaim (their opens are lost; they start over).
fn client_records() -> Box<dyn ClientRecords> {
    Box::new(MemoryRecords::new())
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

/// The host's name, as knfsd's server owner and scope.
fn server_owner() -> Bytes {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name = name.trim();
    Bytes::copy_from_slice(if name.is_empty() { b"keel" } else { name.as_bytes() })
}

struct CountedOps(OperationCounter);

impl OpObserver for CountedOps {
    fn op_done(&self, op: OpNum, status: Nfsstat4, elapsed: Duration) {
        self.0.record(op as u32, status != Nfsstat4::Ok, elapsed);
    }
}

//! What a start reads back so that the clients of the last one can
//! reclaim their state: the NFSv4.1 client records
//! (`state_dir/nfs4-clients`), and the one grace period of NLM and
//! NFSv4.1, started from them and the NLM hosts of the NSM state.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use keel_nfs4_state::{ClientRecord, ClientRecords, Grace, SharedGrace};
use keel_nlm::nsm_store::{Monitored, NsmStore};
use keel_store::state_file::{RecordDir, RecordDirError};

use crate::config::Config;

/// The NFSv4.1 client records' directory in `state_dir`.
pub const NFS4_CLIENTS_DIR: &str = "nfs4-clients";

/// The NFSv4.1 client records on stable storage, one file per client
/// owner in a [`RecordDir`] (files 0600 in a directory 0700; each `put`
/// and `remove` durable before it returns, as knfsd's nfsdcld or v4
/// recovery directory: a client is on stable storage before it gets its
/// first state that is not a reclaim). At most as many records as the
/// NFSv4.1 state may have clients: a record is one client.
pub struct FileClientRecords {
    dir: RecordDir,
    /// What the directory held at start: what [`ClientRecords::load`]
    /// returns.
    loaded: Vec<ClientRecord>,
}

impl FileClientRecords {
    /// Opens `dir` (making it) and reads every record in it; a record
    /// that is damaged or not a client record is logged and skipped (that
    /// client cannot reclaim: its state may have been given to others).
    /// A directory that cannot be used is an error naming it.
    pub fn open(dir: &Path, records_max: usize) -> Result<Self, RecordDirError> {
        let valid = |owner: &[u8], data: &[u8]| ClientRecord::decode(data).is_some_and(|r| *r.owner == *owner);
        let (dir, found) = RecordDir::open(dir, records_max, valid)?;
        for s in &found.skipped {
            tracing::warn!(path = %s.path.display(), why = %s.why, "an NFSv4.1 client record is skipped: that client cannot reclaim");
        }
        let loaded = found.records.iter().filter_map(|(_, data)| ClientRecord::decode(data)).collect();
        Ok(FileClientRecords { dir, loaded })
    }
}

impl ClientRecords for FileClientRecords {
    fn load(&mut self) -> io::Result<Vec<ClientRecord>> {
        Ok(self.loaded.clone())
    }

    // Called from the worker serving the client's call, which acts as the
    // caller (its fsuid, maybe squashed): the records are root's alone.
    fn put(&mut self, record: &ClientRecord) -> io::Result<()> {
        Ok(keel_store_local::ident::as_root(|| self.dir.put(&record.owner, &record.encode()))?)
    }

    fn remove(&mut self, owner: &[u8]) -> io::Result<()> {
        Ok(keel_store_local::ident::as_root(|| self.dir.remove(owner))?)
    }
}

/// What a start found of the last one's clients, and the grace period
/// that waits for them.
pub struct Recovery {
    pub nsm: NsmStore,
    /// The NLM hosts that held locks.
    pub nlm_previous: Vec<Monitored>,
    /// The NFSv4.1 clients on record (for `NfsState::with_grace`); none
    /// if NFSv4.1 is not served.
    pub nfs4_records: FileClientRecords,
    /// The one grace period: the lock manager and the NFSv4.1 state each
    /// get a clone.
    pub grace: SharedGrace,
}

/// Opens the NSM state (moving its state number on) and the NFSv4.1
/// client records, and starts the grace period of this start from both.
pub fn open(config: &Config, nsm_dir: &Path) -> anyhow::Result<Recovery> {
    let (nsm, nlm_previous) =
        NsmStore::open(nsm_dir).with_context(|| format!("cannot open the NSM state in {}", nsm_dir.display()))?;
    let nfs4_dir: PathBuf = config.server.state_dir.join(NFS4_CLIENTS_DIR);
    let mut nfs4_records = FileClientRecords::open(&nfs4_dir, keel_nfs4_state::Limits::default().clients.total)
        .context("cannot open the NFSv4.1 client records")?;
    let nfs4_previous = if crate::nfs4::served(config) {
        nfs4_records.load()?
    } else {
        forget_unserved(&mut nfs4_records, &nfs4_dir)?;
        Vec::new()
    };
    let grace = shared_grace(&nlm_previous, &nfs4_previous, config.server.nfs4_lease, config.server.grace_max);
    Ok(Recovery { nsm, nlm_previous, nfs4_records, grace })
}

/// With NFSv4.1 not served, its clients on record cannot reclaim: the
/// grace period does not wait for them, and their records go (a start
/// that serves NFSv4.1 again must not let them reclaim what NLM and v3
/// clients may have taken in between).
fn forget_unserved(records: &mut FileClientRecords, dir: &Path) -> anyhow::Result<()> {
    let owners: Vec<Box<[u8]>> = records.load()?.into_iter().map(|r| r.owner).collect();
    if owners.is_empty() {
        return Ok(());
    }
    tracing::info!(
        clients = owners.len(),
        dir = %dir.display(),
        "NFSv4.1 is not served (nfs_versions): its clients of an earlier start cannot reclaim; their records are removed"
    );
    for owner in owners {
        records
            .remove(&owner)
            .with_context(|| format!("cannot remove an NFSv4.1 client record in {}", dir.display()))?;
    }
    records.loaded.clear();
    Ok(())
}

/// The one grace period of NLM and NFSv4.1 after a start: it waits for
/// every NLM host that held locks (`nlm`) and every NFSv4.1 client on
/// record (`nfs4`, each taken as gone if not back within `lease`) to
/// reclaim or be known gone, and lasts `ceiling` (`grace_seconds_max`) at
/// most; none if there is nobody to wait for or the ceiling is 0.
pub fn shared_grace(nlm: &[Monitored], nfs4: &[ClientRecord], lease: Duration, ceiling: Duration) -> SharedGrace {
    let nlm = nlm.iter().map(keel_nlm::previous_client);
    let nfs4 = nfs4.iter().map(|r| r.clone().previous_client(lease));
    SharedGrace::new(Grace::start(nlm.chain(nfs4), Instant::now(), ceiling))
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_nfs4_state::Principal;

    fn record(owner: &str, epoch: u32) -> ClientRecord {
        let principal = Principal::Sys { uid: 0, machine: b"client".as_slice().into() };
        ClientRecord { owner: owner.as_bytes().into(), principal, epoch }
    }

    fn owners(records: &mut FileClientRecords) -> Vec<(String, u32)> {
        let mut v: Vec<_> = records
            .load()
            .unwrap()
            .into_iter()
            .map(|r| (String::from_utf8_lossy(&r.owner).into_owned(), r.epoch))
            .collect();
        v.sort();
        v
    }

    /// A restart (a new object on the same directory) finds the records
    /// put and not removed before it; a record file whose content is not
    /// a client record is skipped, the others load.
    #[test]
    fn client_records_survive_a_restart_and_a_damaged_one_is_skipped() {
        let dir = std::env::temp_dir().join(format!("keel-nfs4-records-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut one = FileClientRecords::open(&dir, 16).unwrap();
        assert!(one.load().unwrap().is_empty());
        one.put(&record("a", 1)).unwrap();
        one.put(&record("b", 1)).unwrap();
        one.put(&record("a", 2)).unwrap();
        one.put(&record("c", 1)).unwrap();
        one.remove(b"c").unwrap();
        drop(one);
        let mut two = FileClientRecords::open(&dir, 16).unwrap();
        assert_eq!(owners(&mut two), vec![("a".into(), 2), ("b".into(), 1)]);
        // A whole file under another key than its record's owner (a
        // record copied by hand over another): not taken.
        let (mut raw, _) = RecordDir::open(&dir, 16, |_, _| true).unwrap();
        raw.put(b"d", &record("e", 1).encode()).unwrap();
        raw.put(b"f", b"not a client record").unwrap();
        drop((two, raw));
        let mut three = FileClientRecords::open(&dir, 16).unwrap();
        assert_eq!(owners(&mut three), vec![("a".into(), 2), ("b".into(), 1)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unusable_directory_is_an_error_naming_it() {
        let file = std::env::temp_dir().join(format!("keel-nfs4-records-file-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        let e = FileClientRecords::open(&file.join("nfs4-clients"), 16).err().unwrap();
        assert!(e.to_string().contains(&*file.to_string_lossy()), "{e}");
        std::fs::remove_file(&file).unwrap();
    }

    /// NFSv4.1 served: the grace period waits for its client on record.
    /// Not served: nobody could reclaim, so it does not wait, and the
    /// record goes (a later start serving v4 again must not let it reclaim
    /// what others may have taken in between).
    #[test]
    fn nfs4_clients_on_record_count_only_when_nfs4_is_served() {
        let dir = std::env::temp_dir().join(format!("keel-recovery-unserved-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (state, export) = (dir.join("state"), dir.join("export"));
        std::fs::create_dir_all(&export).unwrap();
        let config = |versions: &str| {
            let text = format!(
                "[server]\nstate_dir = '{}'\nnfs_versions = {versions}\n[[export]]\npath = '{}'\nid = 1\n\
                 [[export.clients]]\nhost = \"*\"\n",
                state.display(),
                export.display()
            );
            crate::config::parse(&text, "keel.toml").unwrap()
        };
        FileClientRecords::open(&state.join(NFS4_CLIENTS_DIR), 16).unwrap().put(&record("a", 1)).unwrap();
        let served = open(&config(r#"["3", "4.1"]"#), &dir.join("nsm")).unwrap();
        assert_eq!(served.grace.lock().status(Instant::now()).awaited, 1);
        drop(served);
        let unserved = open(&config(r#"["3"]"#), &dir.join("nsm")).unwrap();
        assert!(!unserved.grace.lock().poll(Instant::now()), "no grace period for clients who cannot reclaim");
        let mut records = FileClientRecords::open(&state.join(NFS4_CLIENTS_DIR), 16).unwrap();
        assert!(records.load().unwrap().is_empty(), "the record was removed");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_grace_period_waits_for_nlm_hosts_and_nfs4_clients() {
        let host = keel_nlm::nsm_store::HostKey { addr: [10, 0, 0, 1].into(), name: "h".into() };
        let nlm = [Monitored { host, local: [10, 0, 0, 9].into() }];
        let minute = Duration::from_secs(60);
        let grace = shared_grace(&nlm, &[record("a", 1)], minute, minute);
        assert_eq!(grace.lock().status(Instant::now()).awaited, 2);
        assert!(!shared_grace(&nlm, &[], minute, Duration::ZERO).lock().poll(Instant::now()), "ceiling 0: none");
        assert!(!shared_grace(&[], &[], minute, minute).lock().poll(Instant::now()), "nobody to wait for");
    }
}

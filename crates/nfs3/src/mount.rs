//! The MOUNT version 3 program (RFC 1813 appendix I): what mountd does for
//! knfsd. MNT checks the client list and hands out the handle of the export
//! root (or of a directory under it). The mount list (DUMP, `showmount`)
//! is kept in memory and, when given a file, in that file too (mountd's
//! rmtab), so that it survives a restart and moves with a failover.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use keel_exports::{ExportTable, SecFlavor, ServedExport};
use keel_nfs3_proto::mount::*;
use keel_nfs3_proto::{MOUNT_PROGRAM, MOUNT_V3};
use keel_rpc::CacheClass::Uncached;
use keel_rpc::ReplyBytesMax::{Computed, Fixed};
use keel_rpc::{
    Call, CallContext, Handled, Handlers, Privileged, Procedure, ProcedureTable, ReplyBytesMax, TabledProgram,
};
use keel_store::{Object as _, Store};
use keel_xdr::{Decode, Decoder, Encode, Encoder};

use crate::errno::{mount_admit_status, mount_status};

/// Entries kept for DUMP; the oldest go first.
const MOUNT_LIST_ENTRIES_MAX: usize = 4096;
/// Longest host name in the mount list: an IPv6 address as text.
const MOUNT_HOST_BYTES_MAX: usize = 48;
/// One DUMP entry at most: "more follows", host name, directory.
const MOUNT_ENTRY_BYTES_MAX: usize = 4 + 4 + MOUNT_HOST_BYTES_MAX + 4 + DIRPATH_MAX;

pub struct MountProgram<S: Store> {
    exports: Arc<ExportTable<S>>,
    mounts: Mutex<VecDeque<Mountbody>>,
    list_file: Option<ListFile>,
}

/// Where the list is kept across restarts (XDR of the DUMP reply).
struct ListFile {
    path: PathBuf,
    /// Writes the file: the worker serving MNT may still carry the last
    /// caller's file-system identity, and the file is the server's own.
    privileged: Privileged,
}

impl<S: Store> MountProgram<S> {
    pub fn new(exports: Arc<ExportTable<S>>) -> Self {
        MountProgram { exports, mounts: Mutex::new(VecDeque::new()), list_file: None }
    }

    /// Keeps the mount list in `file`, starting from what it holds. A file
    /// that does not decode is reported and replaced: the list is advice
    /// to administrators, not state a client depends on. `privileged`
    /// runs the writes with the server's own identity.
    pub fn with_list_file(exports: Arc<ExportTable<S>>, file: PathBuf, privileged: Privileged) -> Self {
        let mut mounts = VecDeque::new();
        match std::fs::read(&file) {
            Ok(data) => match Mountlist::decode(&mut Decoder::new(Bytes::from(data))) {
                Ok(list) => mounts.extend(list.0.into_iter().take(MOUNT_LIST_ENTRIES_MAX)),
                Err(e) => {
                    tracing::warn!(file = %file.display(), error = ?e, "the mount list does not decode; starting empty")
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(file = %file.display(), error = %e, "cannot read the mount list; starting empty"),
        }
        MountProgram { exports, mounts: Mutex::new(mounts), list_file: Some(ListFile { path: file, privileged }) }
    }

    /// Called with the list's lock held, so writes land in order.
    fn save(&self, mounts: &VecDeque<Mountbody>) {
        let Some(file) = &self.list_file else { return };
        let mut enc = Encoder::new();
        Mountlist(mounts.iter().cloned().collect()).encode(&mut enc);
        let list = enc.into_bytes();
        let mut saved = Ok(());
        (file.privileged)(&mut || saved = keel_store::state_file::replace_durably(&file.path, &list));
        if let Err(e) = saved {
            tracing::warn!(file = %file.path.display(), error = %e, "cannot save the mount list");
        }
    }

    fn mnt(&self, ctx: &CallContext, path: &Dirpath) -> Mountres3 {
        let peer = ctx.peer;
        let path = path.as_bytes();
        let exports = self.exports.exports();
        let Some((served, rest)) = find_export(&exports, path) else {
            tracing::info!(%peer, path = %String::from_utf8_lossy(path), "mount refused: not exported");
            return Mountres3::Fail(Mountstat3::Noent);
        };
        // MNT itself is answered whatever its flavor (a kernel client
        // mounting with sec=krb5 sends it with AUTH_SYS, as rpc.mountd
        // expects); the reply lists the flavors the export accepts, and
        // the NFS calls that follow must use one of them.
        let options = match self.exports.client_options(served, peer, SecFlavor::of_call(ctx.cred.flavor())) {
            Ok(options) => options,
            Err(e) => {
                tracing::warn!(%peer, path = %String::from_utf8_lossy(path), "mount refused: {e}");
                return Mountres3::Fail(mount_admit_status(&e));
            }
        };
        ctx.report.set_export(served.export.id);
        match self.exports.store.lookup_path(served.export.id, rest) {
            Ok(root) => {
                tracing::info!(%peer, path = %String::from_utf8_lossy(path), "mounted");
                let mut mounts = self.mounts.lock().expect("mount list lock");
                let entry = Mountbody {
                    ml_hostname: Name(Bytes::from(peer.ip().to_string())),
                    ml_directory: Dirpath(Bytes::copy_from_slice(path)),
                };
                if !mounts.contains(&entry) {
                    if mounts.len() == MOUNT_LIST_ENTRIES_MAX {
                        mounts.pop_front();
                    }
                    mounts.push_back(entry);
                    self.save(&mounts);
                }
                Mountres3::Ok(Mountres3Ok {
                    fhandle: Fhandle3(root.handle().clone()),
                    auth_flavors: options.sec.pseudo_flavors(),
                })
            }
            Err(e) => {
                tracing::info!(%peer, path = %String::from_utf8_lossy(path), error = %e, "mount failed");
                Mountres3::Fail(mount_status(&e))
            }
        }
    }

    fn umnt(&self, peer: SocketAddr, path: Option<&Dirpath>) {
        match path {
            Some(p) => tracing::info!(%peer, path = %String::from_utf8_lossy(p.as_bytes()), "unmounted"),
            None => tracing::info!(%peer, "unmounted everything (UMNTALL)"),
        }
        let host = peer.ip().to_string();
        let mut mounts = self.mounts.lock().expect("mount list lock");
        let before = mounts.len();
        mounts.retain(|m| m.ml_hostname.as_bytes() != host.as_bytes() || path.is_some_and(|p| p != &m.ml_directory));
        if mounts.len() != before {
            self.save(&mounts);
        }
    }

    /// EXPORT's results now.
    fn exports_reply_bytes(&self) -> usize {
        let mut reply = Encoder::new();
        reply.put(&self.exports());
        reply.len()
    }

    fn exports(&self) -> Exports {
        Exports(
            self.exports
                .exports()
                .iter()
                .map(|s| Exportnode {
                    ex_dir: Dirpath(Bytes::copy_from_slice(s.export.path.as_os_str().as_bytes())),
                    ex_groups: s.rules.iter().map(|r| Name(Bytes::from(r.host.to_string()))).collect(),
                })
                .collect(),
        )
    }
}

/// The export whose path is the longest whole-component prefix of `path`,
/// and the rest of `path` below it.
fn find_export<'a, 'p>(exports: &'a [Arc<ServedExport>], path: &'p [u8]) -> Option<(&'a ServedExport, &'p [u8])> {
    let path_trimmed = if path.len() > 1 { path.strip_suffix(b"/").unwrap_or(path) } else { path };
    exports
        .iter()
        .filter_map(|s| {
            let root = s.export.path.as_os_str().as_bytes();
            let rest = path_trimmed.strip_prefix(root)?;
            (root == b"/" || rest.is_empty() || rest.starts_with(b"/")).then_some((s, rest, root.len()))
        })
        .max_by_key(|(_, _, len)| *len)
        .map(|(s, rest, _)| (&**s, rest))
}

impl<S: Store> Handlers for MountProgram<S> {
    type Call<'a> = Call<'a, Self>;
    /// MNT's; the other procedures' replies carry none.
    type Status = Mountstat3;

    fn status_code(status: Mountstat3) -> u32 {
        status as u32
    }
}

/// DUMP's results: the longest list.
const DUMP_REPLY: usize = 4 + MOUNT_LIST_ENTRIES_MAX * MOUNT_ENTRY_BYTES_MAX;

impl<S: Store> TabledProgram for MountProgram<S> {
    const PROGRAM: u32 = MOUNT_PROGRAM;
    const VERSION: u32 = MOUNT_V3;

    /// The MOUNT v3 procedures (RFC 1813 appendix I). A refused MNT counts
    /// as an error of MNT, of the client and of the export (if it named
    /// one).
    #[rustfmt::skip]
    const PROCEDURES: ProcedureTable<Self> = ProcedureTable::new(&[
        Procedure::new(0, "NULL", Uncached, ReplyBytesMax::DEFAULT, |_, _, _| Ok(None)),
        Procedure::new(1, "MNT", Uncached, ReplyBytesMax::DEFAULT, |c, args, reply| {
            let res = c.program.mnt(c.ctx, &Dirpath::decode(args)?);
            reply.put(&res);
            Ok(Some(res.status()))
        }),
        Procedure::new(2, "DUMP", Uncached, Fixed(DUMP_REPLY), |c, _, reply| {
            reply.put(&Mountlist(c.program.mounts.lock().expect("mount list lock").iter().cloned().collect()));
            Ok(None)
        }),
        Procedure::new(3, "UMNT", Uncached, ReplyBytesMax::DEFAULT, |c, args, _| {
            c.program.umnt(c.ctx.peer, Some(&Dirpath::decode(args)?));
            Ok(None)
        }),
        Procedure::new(4, "UMNTALL", Uncached, ReplyBytesMax::DEFAULT, |c, _, _| {
            c.program.umnt(c.ctx.peer, None);
            Ok(None)
        }),
        // The list as it is now (an export reload may change it).
        Procedure::new(5, "EXPORT", Uncached, Computed(|m, _| Ok(m.exports_reply_bytes())), |c, _, reply| {
            reply.put(&c.program.exports());
            Ok(None)
        }),
    ]);

    fn run(&self, ctx: &CallContext, args: &mut Decoder, reply: &mut Encoder) -> Handled<Self> {
        Self::PROCEDURES.call(&Call { program: self, ctx }, ctx, args, reply)
    }
}

#[cfg(test)]
mod tests {
    use keel_store::sim::SimStore;

    use super::*;

    #[test]
    fn every_procedure_of_mount_v3_has_its_entry_under_its_name() {
        let table = MountProgram::<SimStore>::PROCEDURES;
        let expected: Vec<(u32, &str)> = MountProc::ALL.iter().map(|p| (*p as u32, p.name())).collect();
        assert_eq!(table.names(), expected);
        assert_eq!(expected.len(), 6);
        assert!(table.procedures().iter().all(|p| p.cache == Uncached && p.answers), "MOUNT caches nothing");
    }
}

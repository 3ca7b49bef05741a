//! State shared by the NFS and MOUNT programs, and the checks every call
//! goes through: which export a handle belongs to, whether this client may
//! use it, and as whom.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};

use keel_nfs3_proto::nfs3::{NfsFh3, Nfsstat3};
use keel_rpc::Auth;
use keel_vfs::{Acting, Cred, Export, Inode, Vfs};

use crate::errno::status;
use crate::export::{Access, ClientOptions, ClientRule, Squash, options_for};

/// An export with its client list.
pub struct ServedExport {
    pub export: Arc<Export>,
    pub rules: Vec<ClientRule>,
}

pub struct NfsService {
    pub vfs: Arc<Vfs>,
    /// The exports served now, swapped whole by an export reload
    /// ([`NfsService::set_exports`]).
    exports: RwLock<Arc<[Arc<ServedExport>]>>,
}

/// Who is calling, after the export's rules applied: the identity the
/// call acts as, and the client's options on the export.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller<'r> {
    pub who: &'r Acting,
    pub opts: ClientOptions,
}

impl Caller<'_> {
    /// ROFS unless the export is read-write for this client.
    pub fn writable(&self) -> Result<(), Nfsstat3> {
        match self.opts.access {
            Access::ReadWrite => Ok(()),
            Access::ReadOnly => Err(Nfsstat3::Rofs),
        }
    }
}

impl NfsService {
    /// `rules` gives each export (by id) its client list; every export of
    /// `vfs` must have one.
    pub fn new(vfs: Arc<Vfs>, mut rules: Vec<(u32, Vec<ClientRule>)>) -> Self {
        let exports = vfs
            .exports()
            .iter()
            .map(|export| {
                let i = rules.iter().position(|(id, _)| *id == export.id).expect("client rules for every export");
                Arc::new(ServedExport { export: export.clone(), rules: rules.swap_remove(i).1 })
            })
            .collect();
        NfsService { vfs, exports: RwLock::new(exports) }
    }

    /// The exports served now.
    pub fn exports(&self) -> Arc<[Arc<ServedExport>]> {
        self.exports.read().expect("exports lock").clone()
    }

    /// Serves `exports` from now on, in the storage layer too: handles of
    /// an export no longer in the list are stale from the next call on,
    /// and changed client lists apply to the next call. Calls in flight
    /// finish with the exports they started with.
    pub fn set_exports(&self, exports: Vec<Arc<ServedExport>>) {
        self.vfs.set_exports(exports.iter().map(|s| s.export.clone()).collect());
        *self.exports.write().expect("exports lock") = exports.into();
    }

    /// Whether some export's client list admits `client`: a connection
    /// from any other host can do nothing but be refused, and is closed at
    /// accept, before it holds a connection slot.
    pub fn admits(&self, client: IpAddr) -> bool {
        self.exports().iter().any(|s| options_for(&s.rules, client).is_some())
    }

    /// The export served now as `export` (the same directory under the
    /// same id): an object opened through an export since removed, or
    /// replaced by another directory, is stale.
    fn served(&self, export: &Export) -> Option<Arc<ServedExport>> {
        let exports = self.exports.read().expect("exports lock");
        let served = exports.iter().find(|s| s.export.id == export.id)?;
        let same = std::ptr::eq(&*served.export, export)
            || (served.export.path == export.path && served.export.fsid == export.fsid);
        same.then(|| served.clone())
    }

    /// The options for `peer` on an export, checking the client list and
    /// `secure`.
    pub(crate) fn client_options(&self, served: &ServedExport, peer: SocketAddr) -> Result<ClientOptions, Nfsstat3> {
        let Some(opts) = options_for(&served.rules, peer.ip()) else {
            tracing::debug!(%peer, export = served.export.id, "client not in the export's client list");
            return Err(Nfsstat3::Acces);
        };
        if opts.secure && peer.port() >= 1024 {
            tracing::debug!(%peer, export = served.export.id, "request from an unprivileged port to a secure export");
            return Err(Nfsstat3::Perm);
        }
        Ok(*opts)
    }

    /// Resolves a handle for `peer`, with the client's options on its
    /// export. The client list is checked before the object is opened.
    pub(crate) fn authorize(&self, peer: SocketAddr, fh: &NfsFh3) -> Result<(Arc<Inode>, ClientOptions), Nfsstat3> {
        let admit = |export: &Arc<Export>| {
            let served = self.served(export).ok_or(Status(Nfsstat3::Stale))?;
            self.client_options(&served, peer).map_err(Status)
        };
        self.vfs.resolve(&fh.data, admit).map_err(|Status(s)| s)
    }
}

/// An NFS status as the error of a storage call.
struct Status(Nfsstat3);

impl From<keel_vfs::VfsError> for Status {
    fn from(e: keel_vfs::VfsError) -> Self {
        Status(status(&e))
    }
}

/// Applies root_squash / all_squash (knfsd's nfsd_setuser): the squashed
/// root loses gid 0 in its groups too, and AUTH_NONE is anonymous.
pub(crate) fn squash(auth: &Auth, opts: &ClientOptions) -> Cred {
    let anon = Cred::new(opts.anonuid, opts.anongid, &[]);
    let Auth::Sys(sys) = auth else { return anon };
    match opts.squash {
        Squash::All => anon,
        Squash::None => Cred::new(sys.uid, sys.gid, &sys.gids),
        Squash::Root => {
            let uid = if sys.uid == 0 { opts.anonuid } else { sys.uid };
            let gid = if sys.gid == 0 { opts.anongid } else { sys.gid };
            let mut groups = [0u32; keel_vfs::ident::GROUPS_MAX];
            let n = sys.gids.len().min(groups.len());
            for (g, s) in groups.iter_mut().zip(&sys.gids[..n]) {
                *g = if *s == 0 { opts.anongid } else { *s };
            }
            Cred::new(uid, gid, &groups[..n])
        }
    }
}

#[cfg(test)]
mod tests {
    use keel_rpc::AuthSys;

    use super::*;

    fn sys(uid: u32, gid: u32, gids: &[u32]) -> Auth {
        Auth::Sys(AuthSys { uid, gid, gids: gids.to_vec(), ..Default::default() })
    }

    #[test]
    fn root_squash_maps_root_and_group_zero() {
        let opts = ClientOptions { anonuid: 99, anongid: 98, ..Default::default() };
        let c = squash(&sys(0, 0, &[0, 5]), &opts);
        assert_eq!((c.uid, c.gid, c.groups()), (99, 98, &[98, 5][..]));
        let c = squash(&sys(1000, 100, &[10]), &opts);
        assert_eq!((c.uid, c.gid, c.groups()), (1000, 100, &[10][..]));
    }

    #[test]
    fn all_squash_and_auth_none_are_anonymous() {
        let opts = ClientOptions { squash: Squash::All, anonuid: 7, anongid: 8, ..Default::default() };
        let c = squash(&sys(1000, 100, &[10]), &opts);
        assert_eq!((c.uid, c.gid, c.groups().len()), (7, 8, 0));
        let c = squash(&Auth::None, &ClientOptions { squash: Squash::None, ..opts });
        assert_eq!((c.uid, c.gid), (7, 8));
    }

    #[test]
    fn no_root_squash_keeps_root() {
        let opts = ClientOptions { squash: Squash::None, ..Default::default() };
        assert!(squash(&sys(0, 0, &[]), &opts).is_root());
    }
}

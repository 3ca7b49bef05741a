//! State shared by the NFS and MOUNT programs, and the checks every call
//! goes through: which export a handle belongs to, whether this client may
//! use it, and as whom.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};

use keel_nfs3_proto::nfs3::{NfsFh3, Nfsstat3};
use keel_rpc::Auth;
use keel_store::{Cred, ExportInfo, Store, StoreError};

use crate::errno::status;
use crate::export::{Access, ClientOptions, ClientRule, Squash, options_for};

/// An export with its client list.
pub struct ServedExport {
    pub export: ExportInfo,
    pub rules: Vec<ClientRule>,
}

pub struct NfsService<S: Store> {
    pub store: Arc<S>,
    /// The exports served now with their client lists, swapped whole by an
    /// export reload ([`NfsService::exports_changed`]).
    exports: RwLock<Arc<[Arc<ServedExport>]>>,
    /// See [`NfsService::holding_calls_when_storage_fails`].
    hold_on_storage_failure: bool,
}

/// Who is calling, after the export's rules applied: the identity the
/// call acts as, and the client's options on the export.
pub(crate) struct Caller<'r, C> {
    pub who: &'r C,
    pub opts: ClientOptions,
}

impl<C> Caller<'_, C> {
    /// ROFS unless the export is read-write for this client.
    pub fn writable(&self) -> Result<(), Nfsstat3> {
        match self.opts.access {
            Access::ReadWrite => Ok(()),
            Access::ReadOnly => Err(Nfsstat3::Rofs),
        }
    }
}

impl<S: Store> NfsService<S> {
    /// `rules` gives each export (by id) its client list; every export of
    /// `store` must have one.
    pub fn new(store: Arc<S>, rules: Vec<(u32, Vec<ClientRule>)>) -> Self {
        let exports = RwLock::new(Self::pair(&*store, rules));
        NfsService { store, exports, hold_on_storage_failure: false }
    }

    /// For a server in an HA pair: a call that fails with NFS3ERR_IO while
    /// its export's storage as a whole fails ([`Store::check_export`]: a
    /// lost path, a shut-down file system) gets no reply. The cluster moves
    /// the service, and the client's retransmission reaches the node that
    /// took over, instead of an application seeing EIO. An error of one
    /// file, on storage that works, is answered as usual.
    pub fn holding_calls_when_storage_fails(mut self) -> Self {
        self.hold_on_storage_failure = true;
        self
    }

    pub(crate) fn holds_calls_when_storage_fails(&self) -> bool {
        self.hold_on_storage_failure
    }

    /// The exports served now.
    pub fn exports(&self) -> Arc<[Arc<ServedExport>]> {
        self.exports.read().expect("exports lock").clone()
    }

    /// After the store changed the exports it serves (an export reload):
    /// serves the store's exports from now on, each with its client list
    /// from `rules`, as [`NfsService::new`]. Changed client lists apply to
    /// the next call; calls in flight finish with the rules they started
    /// with. An export the store no longer serves is stale, whatever
    /// `rules` holds for it.
    pub fn exports_changed(&self, rules: Vec<(u32, Vec<ClientRule>)>) {
        let exports = Self::pair(&*self.store, rules);
        *self.exports.write().expect("exports lock") = exports;
    }

    fn pair(store: &S, mut rules: Vec<(u32, Vec<ClientRule>)>) -> Arc<[Arc<ServedExport>]> {
        store
            .exports()
            .into_iter()
            .map(|export| {
                let i = rules.iter().position(|(id, _)| *id == export.id).expect("client rules for every export");
                Arc::new(ServedExport { export, rules: rules.swap_remove(i).1 })
            })
            .collect()
    }

    /// Whether some export's client list admits `client`: a connection
    /// from any other host can do nothing but be refused, and is closed at
    /// accept, before it holds a connection slot.
    pub fn admits(&self, client: IpAddr) -> bool {
        self.exports().iter().any(|s| options_for(&s.rules, client).is_some())
    }

    /// The export served now under `export_id`, with its client list. The
    /// store makes objects of an export it no longer serves stale itself.
    fn served(&self, export_id: u32) -> Option<Arc<ServedExport>> {
        self.exports.read().expect("exports lock").iter().find(|s| s.export.id == export_id).cloned()
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
    pub(crate) fn authorize(&self, peer: SocketAddr, fh: &NfsFh3) -> Result<(S::Object, ClientOptions), Nfsstat3> {
        self.authorize_noting(peer, fh, |_| {})
    }

    /// As [`NfsService::authorize`]; `admitted` hears the export once the
    /// client is admitted to it, before the object is opened, so that an
    /// I/O error in the opening is still known as that export's.
    pub(crate) fn authorize_noting(
        &self,
        peer: SocketAddr,
        fh: &NfsFh3,
        admitted: impl FnOnce(u32),
    ) -> Result<(S::Object, ClientOptions), Nfsstat3> {
        let admit = |export_id: u32| {
            let served = self.served(export_id).ok_or(Status(Nfsstat3::Stale))?;
            let opts = self.client_options(&served, peer).map_err(Status)?;
            admitted(export_id);
            Ok(opts)
        };
        self.store.resolve(&fh.data, admit).map_err(|Status(s)| s)
    }
}

impl<S: Store> NfsService<S> {
    /// For the lock manager (NLM carries the NFSv3 handle): the object
    /// `fh` names, if `peer` may use its export (client list, `secure`,
    /// checked before the object is opened), and the identity the caller
    /// acts as there (squashed as an NFS call would be).
    pub fn admit_handle(
        &self,
        peer: SocketAddr,
        fh: &bytes::Bytes,
        auth: &Auth,
    ) -> Result<(S::Object, Cred), Nfsstat3> {
        let (obj, opts) = self.authorize(peer, &NfsFh3 { data: fh.clone() })?;
        Ok((obj, squash(auth, &opts)))
    }
}

/// An NFS status as the error of a storage call.
struct Status(Nfsstat3);

impl From<StoreError> for Status {
    fn from(e: StoreError) -> Self {
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
            let mut groups = [0u32; keel_store::GROUPS_MAX];
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

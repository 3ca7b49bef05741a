//! The exports served now, with their client lists, and the admission of
//! a call to one of them: which export a handle belongs to, whether this
//! client may use it (client list, `secure`), and as whom (squash). Every
//! protocol admits its calls here and maps an [`AdmitError`] to its own
//! status in one place.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use keel_store::{Cred, ExportInfo, Store, StoreError};

use crate::policy::{ClientOptions, ClientRule, SecFlavor, options_for, squash};

/// Why a call may not use an export or an object in it.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    /// The export's client list has no rule for the client's address.
    #[error("not in the export's client list")]
    NotAdmitted,
    /// The export is `secure` and the call came from an unprivileged port
    /// with a credential that proves nothing of itself (AUTH_SYS or
    /// AUTH_NONE).
    #[error("illegal port {port}: the export is secure and the call came from a port above 1023")]
    InsecurePort { port: u16 },
    /// The handle names an export that is not served (any more), or an
    /// object that is gone.
    #[error("stale file handle")]
    Stale,
    /// The handle was not issued by this server.
    #[error("malformed or forged file handle")]
    BadHandle,
    /// The call's security flavor is not one the export accepts for this
    /// client (`sec=`).
    #[error("the export does not accept {} for this client", flavor.name())]
    WrongSecurity { flavor: SecFlavor },
    /// A change to an export that is read-only for this client.
    #[error("the export is read-only for this client")]
    ReadOnly,
    /// The store failed to open the object.
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for AdmitError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Stale => AdmitError::Stale,
            StoreError::BadHandle => AdmitError::BadHandle,
            e if e.raw_os_error() == Some(libc::ESTALE) => AdmitError::Stale,
            e => AdmitError::Store(e),
        }
    }
}

/// An export with its client list.
pub struct ServedExport {
    pub export: ExportInfo,
    pub rules: Vec<ClientRule>,
}

/// An object a call may use: the client's options on its export and the
/// identity the call acts as there.
pub struct Admitted<O> {
    pub object: O,
    pub options: ClientOptions,
    pub cred: Cred,
}

/// The exports a store serves, each with its client list: the one export
/// rule every protocol (NFSv3, MOUNT, NLM, NFSv4) admits its calls by.
pub struct ExportTable<S: Store> {
    pub store: Arc<S>,
    /// Swapped whole by an export reload ([`ExportTable::exports_changed`]).
    served: RwLock<Arc<[Arc<ServedExport>]>>,
    /// See [`ExportTable::holding_calls_when_storage_fails`].
    hold_on_storage_failure: bool,
    /// NFSv4.1's delegations, when served: see [`ExportTable::before_access`].
    delegations: std::sync::OnceLock<Arc<dyn crate::delegations::DelegationGate>>,
    /// Directory changes in flight, by every protocol.
    dir_changes: crate::dir_changes::DirChanges,
}

impl<S: Store> ExportTable<S> {
    /// `rules` gives each export (by id) its client list; every export of
    /// `store` must have one.
    pub fn new(store: Arc<S>, rules: Vec<(u32, Vec<ClientRule>)>) -> Self {
        let served = RwLock::new(Self::pair(&*store, rules));
        ExportTable {
            store,
            served,
            hold_on_storage_failure: false,
            delegations: std::sync::OnceLock::new(),
            dir_changes: Default::default(),
        }
    }

    /// Directory changes in flight: whether one's before and after
    /// attributes bracket it alone ([`crate::dir_changes`]).
    pub fn dir_changes(&self) -> &crate::dir_changes::DirChanges {
        &self.dir_changes
    }

    /// Installs the gate NFSv3 and NLM ask before accesses that could
    /// conflict with a delegation (once; later calls are ignored).
    pub fn set_delegation_gate(&self, gate: Arc<dyn crate::delegations::DelegationGate>) {
        _ = self.delegations.set(gate);
    }

    /// Whether an access to `handle`'s file by a client holding no
    /// delegation may go on now ([`DelegationGate::before_access`]);
    /// always without a gate.
    ///
    /// [`DelegationGate::before_access`]: crate::delegations::DelegationGate::before_access
    pub fn before_access(
        &self,
        handle: &[u8],
        access: crate::delegations::GateAccess,
    ) -> Result<(), crate::delegations::Recalling> {
        self.delegations.get().map_or(Ok(()), |g| g.before_access(handle, access))
    }

    /// A lock on `handle`'s file was refused by a conflict: whether a
    /// courtesy client holding a conflicting lock was let go of
    /// ([`DelegationGate::lock_refused`]), and the lock is worth trying
    /// once more; never without a gate.
    ///
    /// [`DelegationGate::lock_refused`]: crate::delegations::DelegationGate::lock_refused
    pub fn lock_refused(&self, handle: &[u8], exclusive: bool, range: keel_store::LockRange) -> bool {
        self.delegations.get().is_some_and(|g| g.lock_refused(handle, exclusive, range))
    }

    /// For a server in an HA pair: a call that fails with an I/O error
    /// while its export's storage as a whole fails ([`Store::check_export`]:
    /// a lost path, a shut-down file system) gets no reply
    /// ([`ExportTable::storage_failure`]). The cluster moves the service, and
    /// the client's retransmission reaches the node that took over,
    /// instead of an application seeing EIO. An error of one file, on
    /// storage that works, is answered as usual.
    pub fn holding_calls_when_storage_fails(mut self) -> Self {
        self.hold_on_storage_failure = true;
        self
    }

    /// Why the storage of export `export_id` fails as a whole, if it does
    /// and calls are held when it does (an HA pair): a call that failed
    /// with an I/O error there then gets no reply.
    pub fn storage_failure(&self, export_id: u32) -> Option<StoreError> {
        if !self.hold_on_storage_failure {
            return None;
        }
        self.store.check_export(export_id).err()
    }

    /// The exports served now.
    pub fn exports(&self) -> Arc<[Arc<ServedExport>]> {
        self.served.read().expect("exports lock").clone()
    }

    /// After the store changed the exports it serves (an export reload):
    /// serves the store's exports from now on, each with its client list
    /// from `rules`, as [`ExportTable::new`]. Changed client lists apply to
    /// the next call; calls in flight finish with the rules they started
    /// with. An export the store no longer serves is stale, whatever
    /// `rules` holds for it.
    pub fn exports_changed(&self, rules: Vec<(u32, Vec<ClientRule>)>) {
        let served = Self::pair(&*self.store, rules);
        *self.served.write().expect("exports lock") = served;
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
        self.served.read().expect("exports lock").iter().find(|s| s.export.id == export_id).cloned()
    }

    /// The options for `peer` on an export, checking the client list and
    /// `secure` for a call of security flavor `flavor`.
    ///
    /// `secure` asks an AUTH_SYS call to come from a privileged port, the
    /// client host's word that its root sent it; a Kerberos call proves
    /// its principal itself and is admitted from any port, as knfsd does
    /// ("We don't require gss requests to use low ports",
    /// nfsd_originating_port_ok).
    pub fn client_options(
        &self,
        served: &ServedExport,
        peer: SocketAddr,
        flavor: SecFlavor,
    ) -> Result<ClientOptions, AdmitError> {
        let Some(opts) = options_for(&served.rules, peer.ip()) else {
            tracing::debug!(%peer, export = served.export.id, "client not in the export's client list");
            return Err(AdmitError::NotAdmitted);
        };
        if opts.secure && !port_meets_secure(peer, flavor) {
            tracing::debug!(%peer, export = served.export.id, "request from an unprivileged port to a secure export");
            return Err(AdmitError::InsecurePort { port: peer.port() });
        }
        Ok(*opts)
    }

    /// The object `fh` names, if `peer` may use its export (client list
    /// and `secure` for a call of `flavor`, checked before the object is
    /// opened), with the
    /// client's options there and the identity the call acts as
    /// (`claimed` squashed: see [`squash`]). `admitted` hears the export
    /// once the client is admitted to it, before the object is opened, so
    /// that an I/O error in the opening is still known as that export's
    /// (for the statistics, and to hold the call when the export's storage
    /// fails).
    pub fn admit_handle(
        &self,
        peer: SocketAddr,
        fh: &Bytes,
        flavor: SecFlavor,
        claimed: Option<&Cred>,
        admitted: impl FnOnce(u32),
    ) -> Result<Admitted<S::Object>, AdmitError> {
        let admit = |export_id: u32| {
            let served = self.served(export_id).ok_or(AdmitError::Stale)?;
            let options = self.client_options(&served, peer, flavor)?;
            admitted(export_id);
            Ok::<_, AdmitError>(options)
        };
        let (object, options) = self.store.resolve(fh, admit)?;
        Ok(Admitted { object, options, cred: squash(claimed, &options) })
    }

    /// [`ExportTable::admit_handle`] for a call of security flavor
    /// `flavor`, which the export must accept for the client (`sec=`),
    /// checked with the client list, before the object is opened. NFSv3
    /// admits so. NLM does not: clients send lock calls with AUTH_SYS
    /// whatever their mount's flavor (knfsd skips the check for locks
    /// too); NFSv4 checks per operation with [`ClientOptions::check_sec`].
    pub fn admit_handle_with_sec(
        &self,
        peer: SocketAddr,
        fh: &Bytes,
        flavor: SecFlavor,
        claimed: Option<&Cred>,
        admitted: impl FnOnce(u32),
    ) -> Result<Admitted<S::Object>, AdmitError> {
        let admit = |export_id: u32| {
            let served = self.served(export_id).ok_or(AdmitError::Stale)?;
            let options = self.client_options(&served, peer, flavor)?;
            options.check_sec(flavor)?;
            admitted(export_id);
            Ok::<_, AdmitError>(options)
        };
        let (object, options) = self.store.resolve(fh, admit)?;
        Ok(Admitted { object, options, cred: squash(claimed, &options) })
    }
}

/// Whether a call from `peer` of `flavor` meets `secure`: from a
/// privileged port, or with a Kerberos credential whatever its port.
pub fn port_meets_secure(peer: SocketAddr, flavor: SecFlavor) -> bool {
    peer.port() < 1024 || flavor.is_kerberos()
}

#[cfg(test)]
mod tests {
    use keel_store::sim::SimStore;
    use keel_store::{CreateMode, Object, SetAttrs};

    use super::*;
    use crate::policy::{Access, HostMatch, Squash};

    fn rule(host: HostMatch, options: ClientOptions) -> ClientRule {
        ClientRule { host, options }
    }

    fn net(s: &str, prefix_len: u8) -> HostMatch {
        HostMatch::Net { addr: s.parse().unwrap(), prefix_len }
    }

    /// Export 1 of a simulated store, with a file in it, under `rules`.
    fn exports(rules: Vec<ClientRule>) -> (ExportTable<SimStore>, Bytes) {
        let store = Arc::new(SimStore::new(1));
        let root = store.lookup_path(1, b"/").unwrap();
        let who = store.act_as(&Cred::ROOT).unwrap();
        let file = store.create(&who, &root, b"f", CreateMode::Unchecked, &SetAttrs::default(), false).unwrap();
        let fh = file.object.handle().clone();
        (ExportTable::new(store, vec![(1, rules)]), fh)
    }

    const PRIVILEGED: &str = "10.1.0.5:700";

    #[test]
    fn a_handle_is_admitted_by_client_list_and_port_and_the_caller_squashed() {
        let opts = ClientOptions { access: Access::ReadWrite, anonuid: 99, anongid: 98, ..Default::default() };
        let (x, fh) = exports(vec![rule(net("10.1.0.0", 16), opts)]);
        let mut noted = None;
        let a = x
            .admit_handle(PRIVILEGED.parse().unwrap(), &fh, SecFlavor::Sys, Some(&Cred::ROOT), |id| noted = Some(id))
            .unwrap();
        assert_eq!((noted, a.options, a.cred.uid, a.cred.gid), (Some(1), opts, 99, 98));

        let mut noted = None;
        let refused = x.admit_handle("10.2.0.5:700".parse().unwrap(), &fh, SecFlavor::Sys, None, |id| noted = Some(id));
        assert!(matches!(refused, Err(AdmitError::NotAdmitted)));
        assert_eq!(noted, None, "an export that refuses the client is not the call's");
        let refused = x.admit_handle("10.1.0.5:2000".parse().unwrap(), &fh, SecFlavor::Sys, None, |_| {});
        assert!(matches!(refused, Err(AdmitError::InsecurePort { port: 2000 })));

        let insecure = ClientOptions { secure: false, ..opts };
        x.exports_changed(vec![(1, vec![rule(HostMatch::Any, insecure)])]);
        assert!(
            x.admit_handle("10.2.0.5:2000".parse().unwrap(), &fh, SecFlavor::Sys, None, |_| {}).is_ok(),
            "a reload applies"
        );
    }

    #[test]
    fn secure_asks_a_privileged_port_of_auth_sys_calls_only() {
        let sec = crate::policy::SecFlavors::new(&[SecFlavor::Krb5, SecFlavor::Sys]).unwrap();
        let (x, fh) = exports(vec![rule(HostMatch::Any, ClientOptions { sec, ..Default::default() })]);
        assert!(ClientOptions::default().secure, "secure by default");
        let unprivileged: SocketAddr = "10.1.0.5:40000".parse().unwrap();
        for flavor in [SecFlavor::Krb5, SecFlavor::Krb5i, SecFlavor::Krb5p] {
            assert!(x.admit_handle(unprivileged, &fh, flavor, None, |_| {}).is_ok(), "{flavor:?} from port 40000");
            assert!(x.client_options(&x.exports()[0], unprivileged, flavor).is_ok(), "MNT under {flavor:?}");
        }
        assert!(x.admit_handle_with_sec(unprivileged, &fh, SecFlavor::Krb5, None, |_| {}).is_ok());
        let refused = x.admit_handle_with_sec(unprivileged, &fh, SecFlavor::Sys, None, |_| {});
        assert!(matches!(refused, Err(AdmitError::InsecurePort { port: 40000 })), "AUTH_SYS from the same port");
        let refused = x.client_options(&x.exports()[0], unprivileged, SecFlavor::Sys);
        assert!(matches!(refused, Err(AdmitError::InsecurePort { port: 40000 })));
        assert!(x.admit_handle(PRIVILEGED.parse().unwrap(), &fh, SecFlavor::Sys, None, |_| {}).is_ok());
    }

    #[test]
    fn a_call_of_a_flavor_the_export_does_not_accept_is_wrong_security() {
        let krb5_only = crate::policy::SecFlavors::new(&[SecFlavor::Krb5p, SecFlavor::Krb5]).unwrap();
        let opts = ClientOptions { sec: krb5_only, ..Default::default() };
        let (x, fh) = exports(vec![rule(HostMatch::Any, opts)]);
        let peer = PRIVILEGED.parse().unwrap();
        let mut noted = None;
        let refused = x.admit_handle_with_sec(peer, &fh, SecFlavor::Sys, None, |id| noted = Some(id));
        assert!(matches!(refused, Err(AdmitError::WrongSecurity { flavor: SecFlavor::Sys })));
        assert_eq!(noted, None);
        assert!(matches!(
            x.admit_handle_with_sec(peer, &fh, SecFlavor::Krb5i, None, |_| {}),
            Err(AdmitError::WrongSecurity { flavor: SecFlavor::Krb5i })
        ));
        assert!(x.admit_handle_with_sec(peer, &fh, SecFlavor::Krb5p, None, |_| {}).is_ok());
        assert_eq!(krb5_only.pseudo_flavors(), vec![390005, 390003], "in order of preference");
        assert!(crate::policy::wants_kerberos(&[rule(HostMatch::Any, opts)]));
        assert!(!crate::policy::wants_kerberos(&[rule(HostMatch::Any, ClientOptions::default())]));
        assert_eq!(crate::policy::SecFlavors::new(&[SecFlavor::Sys, SecFlavor::Sys]), None, "no flavor twice");
        assert_eq!(crate::policy::SecFlavors::new(&[]), None);
    }

    #[test]
    fn forged_and_unserved_handles_are_refused() {
        let (x, fh) = exports(vec![rule(HostMatch::Any, ClientOptions { squash: Squash::None, ..Default::default() })]);
        let forged = Bytes::from_static(b"not a handle");
        assert!(matches!(
            x.admit_handle(PRIVILEGED.parse().unwrap(), &forged, SecFlavor::Sys, None, |_| {}),
            Err(AdmitError::BadHandle)
        ));
        x.exports_changed(vec![(1, Vec::new())]);
        assert!(!x.admits("10.1.0.5".parse().unwrap()), "an empty client list admits no one");
        assert!(matches!(
            x.admit_handle(PRIVILEGED.parse().unwrap(), &fh, SecFlavor::Sys, None, |_| {}),
            Err(AdmitError::NotAdmitted)
        ));
    }

    #[test]
    fn a_host_is_admitted_at_accept_if_any_export_admits_it() {
        let (x, _) = exports(vec![rule(net("10.1.0.0", 16), ClientOptions::default())]);
        assert!(x.admits("10.1.2.3".parse().unwrap()));
        assert!(x.admits("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!x.admits("192.0.2.1".parse().unwrap()));
    }

    #[test]
    fn the_store_s_stale_errors_are_stale() {
        assert!(matches!(AdmitError::from(StoreError::Stale), AdmitError::Stale));
        assert!(matches!(AdmitError::from(StoreError::errno(libc::ESTALE)), AdmitError::Stale));
        assert!(matches!(AdmitError::from(StoreError::BadHandle), AdmitError::BadHandle));
        assert!(matches!(AdmitError::from(StoreError::errno(libc::EIO)), AdmitError::Store(_)));
    }
}

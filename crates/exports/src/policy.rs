//! Export policy: who may use an export and with which options, as
//! exports(5) defines them, and the identity a caller acts as there. The
//! server enforces all of it; nothing here is left to the client.

use std::net::IpAddr;

use keel_store::Cred;

use crate::AdmitError;

/// Read-write or read-only (exports(5) `rw` / `ro`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    ReadOnly,
    ReadWrite,
}

/// Which callers are mapped to the anonymous identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Squash {
    /// `no_root_squash`: identities are used as sent.
    None,
    /// `root_squash`: uid 0 and gid 0 become anonuid / anongid.
    Root,
    /// `all_squash`: every caller becomes anonuid / anongid.
    All,
}

/// A security flavor an export accepts (exports(5)'s `sec=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecFlavor {
    /// AUTH_SYS (and AUTH_NONE): the ids the client asserts.
    Sys,
    /// Kerberos V5 through RPCSEC_GSS: authentication only.
    Krb5,
    /// Kerberos V5 with every call and reply checksummed.
    Krb5i,
    /// Kerberos V5 with every call and reply encrypted.
    Krb5p,
}

impl SecFlavor {
    pub const ALL: [SecFlavor; 4] = [SecFlavor::Sys, SecFlavor::Krb5, SecFlavor::Krb5i, SecFlavor::Krb5p];

    /// The name exports(5) gives it.
    pub fn name(self) -> &'static str {
        match self {
            SecFlavor::Sys => "sys",
            SecFlavor::Krb5 => "krb5",
            SecFlavor::Krb5i => "krb5i",
            SecFlavor::Krb5p => "krb5p",
        }
    }

    pub fn from_name(name: &str) -> Option<SecFlavor> {
        SecFlavor::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The number a server lists it by (MOUNT's auth_flavors, NFSv4's
    /// SECINFO): AUTH_SYS, or the Kerberos pseudo flavors of RFC 2623.
    pub fn pseudo_flavor(self) -> u32 {
        match self {
            SecFlavor::Sys => 1,
            SecFlavor::Krb5 => 390003,
            SecFlavor::Krb5i => 390004,
            SecFlavor::Krb5p => 390005,
        }
    }

    /// The flavor a call's credential counts as against `sec=`: AUTH_NONE
    /// is `sys` (as knfsd lets AUTH_NULL through where AUTH_UNIX is
    /// accepted). Every protocol checks its calls by this one mapping.
    pub fn of_call(flavor: keel_rpc::Flavor) -> SecFlavor {
        use keel_rpc::Flavor;
        match flavor {
            Flavor::None | Flavor::Sys => SecFlavor::Sys,
            Flavor::Krb5 => SecFlavor::Krb5,
            Flavor::Krb5i => SecFlavor::Krb5i,
            Flavor::Krb5p => SecFlavor::Krb5p,
        }
    }

    pub fn is_kerberos(self) -> bool {
        self != SecFlavor::Sys
    }
}

/// The flavors a client may use on an export, most preferred first; never
/// empty, no flavor twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecFlavors {
    list: [SecFlavor; SecFlavor::ALL.len()],
    len: u8,
}

impl SecFlavors {
    /// `flavors` in order, or `None` if the list is empty or names a
    /// flavor twice.
    pub fn new(flavors: &[SecFlavor]) -> Option<SecFlavors> {
        if flavors.is_empty() || flavors.len() > SecFlavor::ALL.len() {
            return None;
        }
        let mut list = [SecFlavor::Sys; SecFlavor::ALL.len()];
        for (i, f) in flavors.iter().enumerate() {
            if flavors[..i].contains(f) {
                return None;
            }
            list[i] = *f;
        }
        Some(SecFlavors { list, len: flavors.len() as u8 })
    }

    pub fn as_slice(&self) -> &[SecFlavor] {
        &self.list[..self.len as usize]
    }

    pub fn accepts(&self, flavor: SecFlavor) -> bool {
        self.as_slice().contains(&flavor)
    }

    /// These flavors, then those of `other` not among them (the flavors
    /// of a pseudo directory: those of the exports below it).
    pub fn union(&self, other: &SecFlavors) -> SecFlavors {
        let mut all = *self;
        for f in other.as_slice() {
            if !all.accepts(*f) {
                // At most every flavor once: there is room.
                all.list[all.len as usize] = *f;
                all.len += 1;
            }
        }
        all
    }

    /// The flavors as a server lists them, in order of preference.
    pub fn pseudo_flavors(&self) -> Vec<u32> {
        self.as_slice().iter().map(|f| f.pseudo_flavor()).collect()
    }
}

impl Default for SecFlavors {
    /// exports(5)'s default: `sec=sys`.
    fn default() -> Self {
        SecFlavors::new(&[SecFlavor::Sys]).expect("one flavor")
    }
}

/// Whether a client list accepts a Kerberos flavor for some client: the
/// server then needs its key.
pub fn wants_kerberos(rules: &[ClientRule]) -> bool {
    rules.iter().any(|r| r.options.sec.as_slice().iter().any(|f| f.is_kerberos()))
}

/// The options that apply to one client of one export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientOptions {
    pub access: Access,
    /// `sync`: stable writes and metadata changes reach the disk before the
    /// reply. `async`: nothing waits for the disk.
    pub sync: bool,
    pub squash: Squash,
    pub anonuid: u32,
    pub anongid: u32,
    /// `secure`: requests (and MNT) must come from a source port below
    /// 1024, which on a client host only root can bind: the call comes from
    /// the client's kernel (or root), not from one of its ordinary users.
    /// exports(5) `insecure` is `secure = false`.
    pub secure: bool,
    /// `sec=`: the flavors the client's calls may come with.
    pub sec: SecFlavors,
}

impl ClientOptions {
    /// ReadOnly unless the export is read-write for this client.
    pub fn writable(&self) -> Result<(), AdmitError> {
        match self.access {
            Access::ReadWrite => Ok(()),
            Access::ReadOnly => Err(AdmitError::ReadOnly),
        }
    }

    /// WrongSecurity unless `sec` lists the call's flavor: NFSv3 answers
    /// AUTH_TOOWEAK, NFSv4 NFS4ERR_WRONGSEC (and its SECINFO lists `sec`).
    pub fn check_sec(&self, flavor: SecFlavor) -> Result<(), AdmitError> {
        match self.sec.accepts(flavor) {
            true => Ok(()),
            false => Err(AdmitError::WrongSecurity { flavor }),
        }
    }
}

impl Default for ClientOptions {
    /// exports(5)'s defaults: `ro`, `sync`, `root_squash`, `secure`.
    fn default() -> Self {
        ClientOptions {
            access: Access::ReadOnly,
            sync: true,
            squash: Squash::Root,
            anonuid: 65534,
            anongid: 65534,
            secure: true,
            sec: SecFlavors::default(),
        }
    }
}

/// Which client addresses a rule covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMatch {
    /// `*`: every client.
    Any,
    /// An address or a CIDR network (an address is a network of full length).
    Net { addr: IpAddr, prefix_len: u8 },
    /// A host name, resolved when the configuration was loaded.
    Host { name: String, addrs: Vec<IpAddr> },
}

impl HostMatch {
    pub fn matches(&self, client: IpAddr) -> bool {
        let client = canonical(client);
        match self {
            HostMatch::Any => true,
            HostMatch::Net { addr, prefix_len } => in_network(client, canonical(*addr), *prefix_len),
            HostMatch::Host { addrs, .. } => addrs.iter().any(|a| canonical(*a) == client),
        }
    }
}

impl std::fmt::Display for HostMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostMatch::Any => write!(f, "*"),
            HostMatch::Net { addr, prefix_len } => {
                let full = if addr.is_ipv4() { 32 } else { 128 };
                if *prefix_len == full { write!(f, "{addr}") } else { write!(f, "{addr}/{prefix_len}") }
            }
            HostMatch::Host { name, .. } => write!(f, "{name}"),
        }
    }
}

/// IPv4-mapped IPv6 addresses (from a dual-stack socket) compare as IPv4.
fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(a),
        v4 => v4,
    }
}

fn in_network(client: IpAddr, net: IpAddr, prefix_len: u8) -> bool {
    match (client, net) {
        (IpAddr::V4(c), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix_len.min(32))).unwrap_or(0);
            u32::from(c) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(c), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix_len.min(128))).unwrap_or(0);
            u128::from(c) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// One entry of an export's client list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRule {
    pub host: HostMatch,
    pub options: ClientOptions,
}

/// The options for `client` under `rules`: the first matching rule wins.
pub fn options_for(rules: &[ClientRule], client: IpAddr) -> Option<&ClientOptions> {
    rules.iter().find(|r| r.host.matches(client)).map(|r| &r.options)
}

/// The identity a caller acts as under `opts` (knfsd's nfsd_setuser):
/// `claimed` is who the call says it comes from (AUTH_SYS's ids), `None`
/// for an anonymous call (AUTH_NONE), which gets anonuid / anongid.
/// root_squash also maps gid 0 in the supplementary groups.
pub fn squash(claimed: Option<&Cred>, opts: &ClientOptions) -> Cred {
    let anon = Cred::new(opts.anonuid, opts.anongid, &[]);
    let Some(claimed) = claimed else { return anon };
    match opts.squash {
        Squash::All => anon,
        Squash::None => *claimed,
        Squash::Root => {
            let uid = if claimed.uid == 0 { opts.anonuid } else { claimed.uid };
            let gid = if claimed.gid == 0 { opts.anongid } else { claimed.gid };
            let mut groups = [0u32; keel_store::GROUPS_MAX];
            let n = claimed.groups().len();
            for (g, c) in groups.iter_mut().zip(claimed.groups()) {
                *g = if *c == 0 { opts.anongid } else { *c };
            }
            Cred::new(uid, gid, &groups[..n])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str, prefix_len: u8) -> HostMatch {
        HostMatch::Net { addr: s.parse().unwrap(), prefix_len }
    }

    #[test]
    fn networks_match_by_prefix() {
        let n = net("10.1.0.0", 16);
        assert!(n.matches("10.1.200.3".parse().unwrap()));
        assert!(!n.matches("10.2.0.1".parse().unwrap()));
        assert!(n.matches("::ffff:10.1.0.9".parse().unwrap()), "v4-mapped v6 matches v4 rules");
        assert!(net("0.0.0.0", 0).matches("192.0.2.1".parse().unwrap()));
        assert!(net("2001:db8::", 32).matches("2001:db8:1::5".parse().unwrap()));
        assert!(!net("2001:db8::", 32).matches("10.1.0.1".parse().unwrap()));
        assert!(net("192.0.2.7", 32).matches("192.0.2.7".parse().unwrap()));
        assert!(!net("192.0.2.7", 32).matches("192.0.2.8".parse().unwrap()));
    }

    #[test]
    fn first_matching_rule_wins() {
        let rw = ClientOptions { access: Access::ReadWrite, ..Default::default() };
        let rules = vec![
            ClientRule { host: net("10.0.0.0", 8), options: rw },
            ClientRule { host: HostMatch::Any, options: ClientOptions::default() },
        ];
        assert_eq!(options_for(&rules, "10.9.9.9".parse().unwrap()).unwrap().access, Access::ReadWrite);
        assert_eq!(options_for(&rules, "192.0.2.1".parse().unwrap()).unwrap().access, Access::ReadOnly);
        assert!(options_for(&rules[..1], "192.0.2.1".parse().unwrap()).is_none());
    }

    #[test]
    fn root_squash_maps_root_and_group_zero() {
        let opts = ClientOptions { anonuid: 99, anongid: 98, ..Default::default() };
        let c = squash(Some(&Cred::new(0, 0, &[0, 5])), &opts);
        assert_eq!((c.uid, c.gid, c.groups()), (99, 98, &[98, 5][..]));
        let c = squash(Some(&Cred::new(1000, 100, &[10])), &opts);
        assert_eq!((c.uid, c.gid, c.groups()), (1000, 100, &[10][..]));
    }

    #[test]
    fn all_squash_and_anonymous_calls_are_anonymous() {
        let opts = ClientOptions { squash: Squash::All, anonuid: 7, anongid: 8, ..Default::default() };
        let c = squash(Some(&Cred::new(1000, 100, &[10])), &opts);
        assert_eq!((c.uid, c.gid, c.groups().len()), (7, 8, 0));
        let c = squash(None, &ClientOptions { squash: Squash::None, ..opts });
        assert_eq!((c.uid, c.gid), (7, 8));
    }

    #[test]
    fn no_root_squash_keeps_root() {
        let opts = ClientOptions { squash: Squash::None, ..Default::default() };
        assert!(squash(Some(&Cred::new(0, 0, &[])), &opts).is_root());
    }

    #[test]
    fn only_a_read_write_export_is_writable() {
        let rw = ClientOptions { access: Access::ReadWrite, ..Default::default() };
        assert!(rw.writable().is_ok());
        assert!(matches!(ClientOptions::default().writable(), Err(AdmitError::ReadOnly)));
    }
}

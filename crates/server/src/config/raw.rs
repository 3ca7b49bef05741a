//! The configuration file exactly as written: what serde reads before any
//! value is checked. Every value that is validated later is wrapped in
//! [`Spanned`] so that a problem can name the line it is on, and every table
//! denies unknown keys so that a misspelt key is an error, not a silently
//! ignored option.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub server: Option<RawServer>,
    pub export: Option<Spanned<Vec<Spanned<RawExport>>>>,
    pub cache: Option<Spanned<RawCache>>,
    pub ha: Option<Spanned<RawHa>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHa {
    pub enabled: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCache {
    pub devices: Option<Spanned<Vec<Spanned<String>>>>,
    pub log_mib: Option<Spanned<Int>>,
    pub sequential_cutoff_mib: Option<Spanned<Int>>,
    pub read_fill_kib: Option<Spanned<Int>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub listen: Option<Spanned<Vec<Spanned<String>>>>,
    pub mount_listen: Option<Spanned<Vec<Spanned<String>>>>,
    pub portmap: Option<Spanned<String>>,
    pub workers: Option<Spanned<Int>>,
    pub log_level: Option<Spanned<String>>,
    pub state_dir: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<Int>>,
    pub max_requests_per_connection: Option<Spanned<Int>>,
    pub poll_spin_us: Option<Spanned<Int>>,
    pub fault_injection: Option<bool>,
    pub max_inflight_mib: Option<Spanned<Int>>,
    pub max_inflight_mib_per_connection: Option<Spanned<Int>>,
    pub idle_timeout_seconds: Option<Spanned<Int>>,
    pub stall_timeout_seconds: Option<Spanned<Int>>,
    pub metrics_listen: Option<Spanned<String>>,
    pub nsm_state_dir: Option<Spanned<String>>,
    pub grace_seconds_max: Option<Spanned<Int>>,
    pub nfs4_lease_seconds: Option<Spanned<Int>>,
    pub max_locks_per_client: Option<Spanned<Int>>,
    pub keytab: Option<Spanned<String>>,
    pub principal: Option<Spanned<String>>,
    pub principal_users: Option<Spanned<std::collections::BTreeMap<String, String>>>,
    pub nfs_versions: Option<Spanned<Vec<Spanned<String>>>>,
    pub nfs4_read_delegations: Option<bool>,
    pub nfs4_write_delegations: Option<bool>,
    pub nfs4_clients_per_address_max: Option<Spanned<Int>>,
    pub nfs4_idmap_domain: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExport {
    pub path: Option<Spanned<String>>,
    pub id: Option<Spanned<Int>>,
    pub fsid: Option<Spanned<Int>>,
    pub access: Option<Spanned<String>>,
    pub sync: Option<bool>,
    pub squash: Option<Spanned<String>>,
    pub anonuid: Option<Spanned<Int>>,
    pub anongid: Option<Spanned<Int>>,
    pub secure: Option<Spanned<bool>>,
    pub insecure: Option<Spanned<bool>>,
    pub cache: Option<Spanned<String>>,
    pub sec: Option<Spanned<Vec<Spanned<String>>>>,
    pub clients: Option<Spanned<Vec<Spanned<RawClient>>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClient {
    pub host: Option<Spanned<String>>,
    pub access: Option<Spanned<String>>,
    pub sync: Option<bool>,
    pub squash: Option<Spanned<String>>,
    pub anonuid: Option<Spanned<Int>>,
    pub anongid: Option<Spanned<Int>>,
    pub secure: Option<Spanned<bool>>,
    pub insecure: Option<Spanned<bool>>,
    pub sec: Option<Spanned<Vec<Spanned<String>>>>,
}

/// The per-client options, which may be given both export-wide (in
/// `[[export]]`) and per client (in `[[export.clients]]`).
#[derive(Debug, Clone, Copy)]
pub(super) struct RawOptions<'a> {
    pub access: Option<&'a Spanned<String>>,
    pub sync: Option<bool>,
    pub squash: Option<&'a Spanned<String>>,
    pub anonuid: Option<&'a Spanned<Int>>,
    pub anongid: Option<&'a Spanned<Int>>,
    pub secure: Option<&'a Spanned<bool>>,
    /// exports(5)'s spelling: `insecure = true` is `secure = false`.
    pub insecure: Option<&'a Spanned<bool>>,
    /// exports(5)'s `sec=`, as a list.
    pub sec: Option<&'a Spanned<Vec<Spanned<String>>>>,
}

impl RawExport {
    pub fn options(&self) -> RawOptions<'_> {
        RawOptions {
            access: self.access.as_ref(),
            sync: self.sync,
            squash: self.squash.as_ref(),
            anonuid: self.anonuid.as_ref(),
            anongid: self.anongid.as_ref(),
            secure: self.secure.as_ref(),
            insecure: self.insecure.as_ref(),
            sec: self.sec.as_ref(),
        }
    }
}

impl RawClient {
    pub fn options(&self) -> RawOptions<'_> {
        RawOptions {
            access: self.access.as_ref(),
            sync: self.sync,
            squash: self.squash.as_ref(),
            anonuid: self.anonuid.as_ref(),
            anongid: self.anongid.as_ref(),
            secure: self.secure.as_ref(),
            insecure: self.insecure.as_ref(),
            sec: self.sec.as_ref(),
        }
    }
}

/// A TOML integer. Ranges are checked afterwards, against the span, so the
/// message can say which range applies; this type only exists so that a
/// value of the wrong type is reported as "expected an integer" rather than
/// "expected i64".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Int(pub i64);

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IntVisitor;

        impl Visitor<'_> for IntVisitor {
            type Value = Int;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer")
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Int, E> {
                Ok(Int(v))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Int, E> {
                i64::try_from(v).map(Int).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }
        }

        deserializer.deserialize_i64(IntVisitor)
    }
}

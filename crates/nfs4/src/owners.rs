//! Owner strings (RFC 8881 section 5.9): what `owner` and `owner_group`
//! name when a client sets them. Numbers are taken as ids, as knfsd takes
//! them with idmapping off (and Linux clients send them under AUTH_SYS).
//! `name@domain` is taken only when the server is given an id-mapping
//! domain (idmapd.conf's `Domain`): a name of that domain is the user or
//! group of the system's database; any other is NFS4ERR_BADOWNER.
//!
//! Replies carry numbers under AUTH_SYS, which every Linux client takes.
//! Under Kerberos they carry `name@domain` when a domain is given, as
//! knfsd's do (it maps ids only for RPCSEC_GSS callers when idmapping is
//! off): a Kerberos client's ids need not be the server's, its idmapper
//! maps the names to its own, and it sends names itself. An id the
//! database has no name for stays a number, as in knfsd.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The system's users and groups, by name and by id.
pub trait NameDatabase: Send + Sync {
    fn uid(&self, user: &str) -> Option<u32>;
    fn gid(&self, group: &str) -> Option<u32>;
    fn user_name(&self, uid: u32) -> Option<String>;
    fn group_name(&self, gid: u32) -> Option<String>;
}

/// Ids whose names are remembered at most, and for how long: a GETATTR
/// under Kerberos must not read the user database for every owner, and a
/// user renamed is seen within the expiry (as the identity cache of
/// keel-rpc's `gss::idmap`).
pub const OWNER_NAME_CACHE_ENTRIES_MAX: usize = 4096;
pub const OWNER_NAME_CACHE_TTL: Duration = Duration::from_secs(600);

/// Names of one domain through a database.
pub struct OwnerNames {
    /// Lower case: domains are matched whatever their case (DNS names).
    domain: String,
    names: Arc<dyn NameDatabase>,
    by_id: Mutex<HashMap<(OwnerKind, u32), CachedName>>,
}

/// `owner@domain` for an id (`None`: the database has no name for it),
/// and when it was looked up.
type CachedName = (Option<Arc<str>>, Instant);

/// Which of the two attributes a string is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum OwnerKind {
    User,
    Group,
}

impl OwnerNames {
    pub fn new(domain: &str, names: Arc<dyn NameDatabase>) -> OwnerNames {
        OwnerNames { domain: domain.to_ascii_lowercase(), names, by_id: Mutex::new(HashMap::new()) }
    }

    /// `name@domain` for `id`, or `None` if the database has no name.
    pub(crate) fn name_of(&self, id: u32, kind: OwnerKind) -> Option<Arc<str>> {
        let now = Instant::now();
        if let Some((name, at)) = self.by_id.lock().expect("owner name cache lock").get(&(kind, id))
            && now.duration_since(*at) < OWNER_NAME_CACHE_TTL
        {
            return name.clone();
        }
        // Looked up outside the lock: a slow NSS source (LDAP) must not
        // hold every other call's attributes.
        let name = match kind {
            OwnerKind::User => self.names.user_name(id),
            OwnerKind::Group => self.names.group_name(id),
        };
        let name: Option<Arc<str>> = name.map(|n| format!("{n}@{}", self.domain).into());
        let mut cache = self.by_id.lock().expect("owner name cache lock");
        if cache.len() >= OWNER_NAME_CACHE_ENTRIES_MAX {
            cache.retain(|_, (_, at)| now.duration_since(*at) < OWNER_NAME_CACHE_TTL);
            if cache.len() >= OWNER_NAME_CACHE_ENTRIES_MAX {
                cache.clear();
            }
        }
        cache.insert((kind, id), (name.clone(), now));
        name
    }

    fn id_of(&self, name: &str, kind: OwnerKind) -> Option<u32> {
        let (name, domain) = name.rsplit_once('@')?;
        if name.is_empty() || !domain.eq_ignore_ascii_case(&self.domain) {
            return None;
        }
        match kind {
            OwnerKind::User => self.names.uid(name),
            OwnerKind::Group => self.names.gid(name),
        }
    }
}

/// The id an owner string names: a number, or a name of `names`' domain.
pub(crate) fn owner_id(s: &str, kind: OwnerKind, names: Option<&OwnerNames>) -> Option<u32> {
    if let Ok(id) = s.parse::<u32>() {
        return Some(id);
    }
    names.and_then(|n| n.id_of(s, kind))
}

/// The tests' user database: user alice (1001) and group staff (50).
#[cfg(test)]
pub(crate) struct TestNames;

#[cfg(test)]
impl NameDatabase for TestNames {
    fn uid(&self, user: &str) -> Option<u32> {
        (user == "alice").then_some(1001)
    }
    fn gid(&self, group: &str) -> Option<u32> {
        (group == "staff").then_some(50)
    }
    fn user_name(&self, uid: u32) -> Option<String> {
        (uid == 1001).then(|| "alice".into())
    }
    fn group_name(&self, gid: u32) -> Option<String> {
        (gid == 50).then(|| "staff".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_named_in_the_configured_domain_and_unknown_ids_are_not() {
        let names = OwnerNames::new("Example.ORG", Arc::new(TestNames));
        assert_eq!(names.name_of(1001, OwnerKind::User).as_deref(), Some("alice@example.org"));
        assert_eq!(names.name_of(50, OwnerKind::Group).as_deref(), Some("staff@example.org"));
        // A user's id is not a group's.
        assert_eq!(names.name_of(1001, OwnerKind::Group), None);
        assert_eq!(names.name_of(7, OwnerKind::User), None);
        // Cached answers are the same answers.
        assert_eq!(names.name_of(1001, OwnerKind::User).as_deref(), Some("alice@example.org"));
        assert_eq!(names.name_of(7, OwnerKind::User), None);
    }

    #[test]
    fn numbers_always_and_names_of_the_configured_domain_only() {
        let names = OwnerNames::new("Example.ORG", Arc::new(TestNames));
        let id = |s, kind| owner_id(s, kind, Some(&names));
        assert_eq!(id("1001", OwnerKind::User), Some(1001));
        assert_eq!(id("alice@example.org", OwnerKind::User), Some(1001));
        assert_eq!(id("alice@EXAMPLE.org", OwnerKind::User), Some(1001), "domains match whatever their case");
        assert_eq!(id("staff@example.org", OwnerKind::Group), Some(50));
        // A user's name is not a group's, nor the other way round.
        assert_eq!(id("alice@example.org", OwnerKind::Group), None);
        assert_eq!(id("staff@example.org", OwnerKind::User), None);
        // Another domain, no domain, no name, an unknown user.
        assert_eq!(id("alice@example.com", OwnerKind::User), None);
        assert_eq!(id("alice", OwnerKind::User), None);
        assert_eq!(id("@example.org", OwnerKind::User), None);
        assert_eq!(id("mallory@example.org", OwnerKind::User), None);
        // Without a domain only numbers.
        assert_eq!(owner_id("alice@example.org", OwnerKind::User, None), None);
        assert_eq!(owner_id("0", OwnerKind::Group, None), Some(0));
        assert_eq!(owner_id("-1", OwnerKind::User, None), None);
    }
}

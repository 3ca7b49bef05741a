//! Owner strings (RFC 8881 section 5.9): what `owner` and `owner_group`
//! name when a client sets them. Numbers are taken as ids, as knfsd takes
//! them with idmapping off (and Linux clients send them under AUTH_SYS).
//! `name@domain` is taken only when the server is given an id-mapping
//! domain (idmapd.conf's `Domain`): a name of that domain is the user or
//! group of the system's database; any other is NFS4ERR_BADOWNER. Replies
//! always carry numbers, which every Linux client accepts.

use std::sync::Arc;

/// The system's users and groups by name.
pub trait NameDatabase: Send + Sync {
    fn uid(&self, user: &str) -> Option<u32>;
    fn gid(&self, group: &str) -> Option<u32>;
}

/// Names of one domain through a database.
pub struct OwnerNames {
    /// Lower case: domains are matched whatever their case (DNS names).
    domain: String,
    names: Arc<dyn NameDatabase>,
}

/// Which of the two attributes a string is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnerKind {
    User,
    Group,
}

impl OwnerNames {
    pub fn new(domain: &str, names: Arc<dyn NameDatabase>) -> OwnerNames {
        OwnerNames { domain: domain.to_ascii_lowercase(), names }
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Names;

    impl NameDatabase for Names {
        fn uid(&self, user: &str) -> Option<u32> {
            (user == "alice").then_some(1001)
        }
        fn gid(&self, group: &str) -> Option<u32> {
            (group == "staff").then_some(50)
        }
    }

    #[test]
    fn numbers_always_and_names_of_the_configured_domain_only() {
        let names = OwnerNames::new("Example.ORG", Arc::new(Names));
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

//! A principal's local identity: `user@REALM` of the server's realm is
//! the local user `user`, with the uid, primary gid and groups the
//! system's user database gives (not what the client says). The lookup
//! itself is the server's ([`UserDatabase`], through libc); this caches
//! its answers, unknown users included, with a bound and an expiry, as
//! rpc.idmapd and knfsd's auth.unix.gid cache do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_store::Cred;

/// The system's users by name.
pub trait UserDatabase: Send + Sync {
    /// User `name`'s uid, gid and groups; `None` if there is no such user
    /// (or the database cannot be read).
    fn user(&self, name: &str) -> Option<Cred>;
}

/// Names remembered at most.
pub const IDENTITY_CACHE_ENTRIES_MAX: usize = 4096;
/// How long an answer is believed: a user added, removed or given other
/// groups is seen within this (knfsd's auth.unix.gid cache keeps 30
/// minutes; contexts keep the identity they were established with).
pub const IDENTITY_CACHE_TTL: Duration = Duration::from_secs(600);

pub struct IdentityCache {
    users: Arc<dyn UserDatabase>,
    ttl: Duration,
    entries_max: usize,
    cache: Mutex<HashMap<String, (Option<Cred>, Instant)>>,
}

impl IdentityCache {
    pub fn new(users: Arc<dyn UserDatabase>) -> IdentityCache {
        IdentityCache::with_limits(users, IDENTITY_CACHE_TTL, IDENTITY_CACHE_ENTRIES_MAX)
    }

    pub fn with_limits(users: Arc<dyn UserDatabase>, ttl: Duration, entries_max: usize) -> IdentityCache {
        assert!(entries_max > 0);
        IdentityCache { users, ttl, entries_max, cache: Mutex::new(HashMap::new()) }
    }

    /// User `name`'s identity, from the cache while fresh.
    pub fn lookup(&self, name: &str) -> Option<Cred> {
        let now = Instant::now();
        if let Some((ids, at)) = self.cache.lock().expect("identity cache lock").get(name)
            && now.duration_since(*at) < self.ttl
        {
            return *ids;
        }
        // Looked up outside the lock: a slow NSS source (LDAP) must not
        // hold every other context's establishment.
        let ids = self.users.user(name);
        let mut cache = self.cache.lock().expect("identity cache lock");
        if cache.len() >= self.entries_max && !cache.contains_key(name) {
            cache.retain(|_, (_, at)| now.duration_since(*at) < self.ttl);
            if cache.len() >= self.entries_max {
                let oldest = cache.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    cache.remove(&oldest);
                }
            }
        }
        cache.insert(name.to_owned(), (ids, now));
        ids
    }

    pub fn len(&self) -> usize {
        self.cache.lock().expect("identity cache lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl UserDatabase for Counting {
        fn user(&self, name: &str) -> Option<Cred> {
            self.0.fetch_add(1, Ordering::SeqCst);
            (name == "alice").then(|| Cred::new(1001, 1001, &[1001, 27]))
        }
    }

    #[test]
    fn answers_are_cached_bounded_and_expire() {
        let db = Arc::new(Counting::default());
        let cache = IdentityCache::with_limits(db.clone(), Duration::from_secs(3600), 2);
        assert_eq!(cache.lookup("alice").map(|c| c.uid), Some(1001));
        assert_eq!(cache.lookup("alice").map(|c| c.uid), Some(1001));
        assert_eq!(cache.lookup("mallory"), None);
        assert_eq!(cache.lookup("mallory"), None);
        assert_eq!(db.0.load(Ordering::SeqCst), 2, "known and unknown users both cached");
        cache.lookup("carol");
        assert_eq!(cache.len(), 2, "the bound holds");

        let expiring = IdentityCache::with_limits(db.clone(), Duration::ZERO, 2);
        expiring.lookup("alice");
        expiring.lookup("alice");
        assert_eq!(db.0.load(Ordering::SeqCst), 5, "an expired answer is looked up again");
    }
}

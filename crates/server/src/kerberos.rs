//! The server's Kerberos key, loaded at start when an export accepts a
//! Kerberos flavor (`sec = ["krb5", ...]`): the keytab of `[server]
//! keytab` (GSS-API is pointed at it, whatever KRB5_KTNAME says) and the
//! key of `[server] principal` in it. A keytab that is missing or cannot
//! be read, or holds no key for the principal, stops the start with a
//! message naming both.

use std::sync::Arc;

use anyhow::Context;
use keel_rpc::gss::{Acceptor, ContextLimits, GssServer, IdentityCache, UserDatabase};

use crate::config::{Config, ServerConfig};
use crate::sys;

/// Where the host's name is, for the default principal `nfs/HOST`.
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";

/// Whether any export accepts a Kerberos flavor for any client.
pub fn wanted(config: &Config) -> bool {
    config.exports.iter().any(|e| keel_exports::wants_kerberos(&e.clients))
}

/// The configured principal, or `nfs/` and this host's name.
pub fn principal(server: &ServerConfig) -> anyhow::Result<String> {
    if let Some(p) = &server.principal {
        return Ok(p.clone());
    }
    let host = std::fs::read_to_string(HOSTNAME_FILE).with_context(|| format!("cannot read {HOSTNAME_FILE}"))?;
    Ok(format!("nfs/{}", host.trim()))
}

/// RPCSEC_GSS for the server's programs, if an export wants it.
pub fn start(config: &Config) -> anyhow::Result<Option<Arc<GssServer>>> {
    if !wanted(config) {
        if !config.server.principal_users.is_empty() {
            tracing::warn!(
                "[server] principal_users is set but no export accepts a Kerberos flavor (sec): it is unused"
            );
        }
        return Ok(None);
    }
    let keytab = &config.server.keytab;
    let principal = principal(&config.server)?;
    // Read once here so a missing or unreadable keytab is named as such,
    // not as GSS-API's "no credentials".
    std::fs::File::open(keytab).with_context(|| {
        format!(
            "cannot read the keytab {}, which an export's sec = [\"krb5\", ...] needs for the key of {principal}: \
             create it (kadmin: ktadd -k {} {principal}) or set [server] keytab",
            keytab.display(),
            keytab.display()
        )
    })?;
    sys::register_acceptor_keytab(keytab).with_context(|| format!("cannot use the keytab {}", keytab.display()))?;
    let acceptor = Acceptor::acquire(&principal).with_context(|| {
        format!(
            "no usable key for {principal} in the keytab {} (set [server] principal if the server's \
             principal is another)",
            keytab.display()
        )
    })?;
    tracing::info!(principal = %principal, keytab = %keytab.display(), "serving Kerberos (RPCSEC_GSS)");
    let users: Arc<dyn UserDatabase> = Arc::new(sys::SystemUsers);
    for (principal, user) in &config.server.principal_users {
        // A typo would otherwise leave the machine anonymous, silently.
        if users.user(user).is_none() {
            anyhow::bail!(
                "[server] principal_users maps {principal} to {user:?}, a user this host's user database does not \
                 know: create the user or correct the entry"
            );
        }
    }
    let identities = IdentityCache::new(users);
    // Workers keep the last caller's file-system identity; the keytab is
    // root's.
    let as_root: keel_rpc::Privileged = Arc::new(|f| keel_store_local::ident::as_root(f));
    let gss = GssServer::new(acceptor, identities, ContextLimits::default(), as_root)
        .with_principal_users(config.server.principal_users.clone());
    Ok(Some(Arc::new(gss)))
}

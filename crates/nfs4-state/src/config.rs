//! What an administrator may tune, with the defaults and the bounds the
//! server checks them against. Each limit names what it bounds and why its
//! default is what it is.

use std::time::Duration;

/// The default lease (RFC 8881 section 8.3), as knfsd's and Ganesha's.
pub const LEASE_DEFAULT: Duration = Duration::from_secs(90);
/// The shortest lease accepted: clients renew at a fraction of it, and
/// knfsd refuses less than 10 s.
pub const LEASE_MIN: Duration = Duration::from_secs(10);
/// The longest lease accepted (knfsd's bound): a lease is also how long a
/// crashed client's recall deadline and a previous client's absence last.
pub const LEASE_MAX: Duration = Duration::from_secs(3600);
/// The default ceiling of the grace period after a restart: knfsd and
/// Ganesha sit out 90 s; Keel ends it earlier when it can.
pub const GRACE_MAX_DEFAULT: Duration = Duration::from_secs(90);
/// How long a client whose lease expired keeps its state when nobody
/// conflicts with it (knfsd's `NFSD_COURTESY_CLIENT_TIMEOUT`).
pub const COURTESY_MAX_DEFAULT: Duration = Duration::from_secs(24 * 3600);
/// How long a courtesy client holding byte-range locks keeps its state
/// at most. An NFSv4.1 client's LOCK and OPEN, and an NLM client's LOCK,
/// that conflict with it expire it at once, but a local process's lock
/// waits in the kernel, where Keel does not see it (knfsd's lock manager
/// does, and expires the client): it waits this long at most. An hour
/// keeps a client's locks across network cuts, failovers and short
/// suspends (knfsd before 5.19 kept them 90 s) and bounds the wait of a
/// process on the server's host.
pub const COURTESY_LOCKS_MAX_DEFAULT: Duration = Duration::from_secs(3600);

/// The largest request and reply a session may negotiate by default: the
/// transport's record limit (1 MiB of WRITE or READ data and 64 KiB for
/// the rest of the COMPOUND).
pub const MESSAGE_BYTES_MAX_DEFAULT: u32 = (1 << 20) + (64 << 10);
/// The largest reply a slot caches. knfsd caches 2 KiB; 4 KiB holds any
/// reply of a non-idempotent COMPOUND (OPEN with its GETATTR, CREATE,
/// RENAME), the ones a client asks to be cached.
pub const CACHED_REPLY_BYTES_MAX_DEFAULT: u32 = 4096;
/// Operations per COMPOUND granted at most: the Linux client asks for 8
/// to 16, knfsd grants 50.
pub const OPERATIONS_MAX_DEFAULT: u32 = 64;
/// Slots (concurrent requests) per session granted at most: what the
/// Linux client asks for by default.
pub const SLOTS_PER_SESSION_MAX_DEFAULT: u32 = 64;
/// Backchannel slots granted at most: the server sends one callback at a
/// time per session (as knfsd).
pub const BACK_SLOTS_MAX: u32 = 1;
/// The smallest forechannel request a session may negotiate (knfsd's
/// `NFSD_MIN_REQ_HDR_SEQ_SZ`): an AUTH_NONE call of one SEQUENCE.
pub const FORE_REQUEST_BYTES_MIN: u32 = 64;
/// The smallest forechannel reply (knfsd's `NFSD_MIN_RESP_HDR_SEQ_SZ`).
pub const FORE_RESPONSE_BYTES_MIN: u32 = 64;
/// The smallest backchannel request the server can live with: a
/// CB_COMPOUND of CB_SEQUENCE and CB_RECALL with a 128-byte handle under
/// AUTH_SYS with a short machine name takes about 350 bytes.
pub const BACK_REQUEST_BYTES_MIN: u32 = 512;
/// The smallest backchannel reply: CB_SEQUENCE's and CB_RECALL's results.
pub const BACK_RESPONSE_BYTES_MIN: u32 = 128;
/// Operations a CB_COMPOUND needs: CB_SEQUENCE and one more.
pub const BACK_OPERATIONS_MIN: u32 = 2;

/// What a session may negotiate at most (RFC 8881 section 18.36.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelLimits {
    pub request_bytes_max: u32,
    pub response_bytes_max: u32,
    /// Per slot; also the unit of the reply cache's budget.
    pub cached_response_bytes_max: u32,
    pub operations_max: u32,
    pub slots_per_session_max: u32,
}

impl Default for ChannelLimits {
    fn default() -> Self {
        ChannelLimits {
            request_bytes_max: MESSAGE_BYTES_MAX_DEFAULT,
            response_bytes_max: MESSAGE_BYTES_MAX_DEFAULT,
            cached_response_bytes_max: CACHED_REPLY_BYTES_MAX_DEFAULT,
            operations_max: OPERATIONS_MAX_DEFAULT,
            slots_per_session_max: SLOTS_PER_SESSION_MAX_DEFAULT,
        }
    }
}

/// A server-wide bound and the share one client address may hold of it
/// (one address never holds more than a quarter, see
/// [`keel_exports::claims`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub total: usize,
    pub per_address: usize,
}

/// Everything a client can make the server hold, bounded. Past a bound
/// an operation gets the protocol's answer (see [`Limited`](crate::Limited)),
/// after courtesy clients were expired to make room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Client records, confirmed or not. knfsd allows 1024 per GiB of
    /// memory; a record with no state is a few hundred bytes.
    pub clients: Bound,
    /// Sessions of one client: the Linux client makes one per server (and
    /// binds more connections to it); 8 leaves room for others.
    pub sessions_per_client: usize,
    /// Bytes the replay caches of all sessions may hold: a session claims
    /// `slots × cached_response_bytes_max` of it when created, and gets
    /// fewer slots (at least one) when the budget or its address's share
    /// is short. 64 MiB is 16,384 slots of 4 KiB: 256 sessions of 64.
    pub reply_cache_bytes: Bound,
    /// Connections bound to one session (Linux's `nconnect` makes up to
    /// 16; trunking adds a few).
    pub connections_per_session: usize,
    /// Open owners (the Linux client makes one per user credential).
    pub open_owners: Bound,
    /// Open states, one per open owner and file: a build machine holds
    /// tens of thousands of open files; each costs about 200 bytes.
    pub opens: Bound,
    /// Lock owners (one per process and file, or per open file description).
    pub lock_owners: Bound,
    /// Lock states, one per lock owner and file; each is also an open
    /// file description on the server holding OFD locks.
    pub lock_states: Bound,
    /// Byte ranges held by lock states (each is also a lock in the
    /// kernel): per address, as NLM's `max_locks_per_client`.
    pub lock_ranges: Bound,
    /// Delegations, granted or revoked and not yet freed.
    pub delegations: Bound,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            clients: Bound { total: 4096, per_address: 64 },
            sessions_per_client: 8,
            reply_cache_bytes: Bound { total: 64 << 20, per_address: 16 << 20 },
            connections_per_session: 64,
            open_owners: Bound { total: 65_536, per_address: 4096 },
            opens: Bound { total: 262_144, per_address: 65_536 },
            lock_owners: Bound { total: 65_536, per_address: 16_384 },
            lock_states: Bound { total: 131_072, per_address: 32_768 },
            lock_ranges: Bound { total: 262_144, per_address: 4096 },
            delegations: Bound { total: 65_536, per_address: 16_384 },
        }
    }
}

/// The configuration of [`NfsState`](crate::NfsState).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateConfig {
    pub lease: Duration,
    /// The ceiling of the grace period after a restart.
    pub grace_max: Duration,
    /// How long a courtesy client keeps its state at most.
    pub courtesy_max: Duration,
    /// How long a courtesy client holding byte-range locks keeps its
    /// state at most (no longer than `courtesy_max`).
    pub courtesy_locks_max: Duration,
    /// Whether write delegations are granted. Off by default: a write
    /// delegation is only sound if every access by anyone else (a GETATTR
    /// too, from v3 clients and local processes) recalls it first.
    pub write_delegations: bool,
    pub channel: ChannelLimits,
    pub limits: Limits,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            lease: LEASE_DEFAULT,
            grace_max: GRACE_MAX_DEFAULT,
            courtesy_max: COURTESY_MAX_DEFAULT,
            courtesy_locks_max: COURTESY_LOCKS_MAX_DEFAULT,
            write_delegations: false,
            channel: ChannelLimits::default(),
            limits: Limits::default(),
        }
    }
}

/// A configuration value out of its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl StateConfig {
    /// Checks every value against its bounds; the message names the value
    /// and the bound.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError(m));
        if self.lease < LEASE_MIN || self.lease > LEASE_MAX {
            return err(format!(
                "the lease ({} s) must be from {} to {} s",
                self.lease.as_secs(),
                LEASE_MIN.as_secs(),
                LEASE_MAX.as_secs()
            ));
        }
        let c = &self.channel;
        if c.request_bytes_max < FORE_REQUEST_BYTES_MIN || c.response_bytes_max < FORE_RESPONSE_BYTES_MIN {
            return err(format!(
                "request and reply size limits ({} and {} bytes) must be at least {} bytes",
                c.request_bytes_max, c.response_bytes_max, FORE_REQUEST_BYTES_MIN
            ));
        }
        if c.cached_response_bytes_max == 0 || c.operations_max == 0 || c.slots_per_session_max == 0 {
            return err("the cached reply size, operations and slots per session must be at least 1".into());
        }
        if c.cached_response_bytes_max > c.response_bytes_max {
            return err(format!(
                "the cached reply size ({}) is more than the reply size ({})",
                c.cached_response_bytes_max, c.response_bytes_max
            ));
        }
        let l = &self.limits;
        let bounds = [
            ("clients", l.clients),
            ("reply cache bytes", l.reply_cache_bytes),
            ("open owners", l.open_owners),
            ("opens", l.opens),
            ("lock owners", l.lock_owners),
            ("lock states", l.lock_states),
            ("lock ranges", l.lock_ranges),
            ("delegations", l.delegations),
        ];
        for (name, b) in bounds {
            if b.total == 0 || b.per_address == 0 {
                return err(format!("the bound on {name} must be at least 1 (total and per address)"));
            }
        }
        if l.reply_cache_bytes.total < c.cached_response_bytes_max as usize {
            return err(format!(
                "the reply cache ({} bytes) cannot hold one slot of {} bytes",
                l.reply_cache_bytes.total, c.cached_response_bytes_max
            ));
        }
        if l.sessions_per_client == 0 || l.connections_per_session == 0 {
            return err("sessions per client and connections per session must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_bad_values_are_named() {
        StateConfig::default().validate().unwrap();
        let short = StateConfig { lease: Duration::from_secs(5), ..StateConfig::default() };
        assert!(short.validate().unwrap_err().0.contains("lease"));
        let mut tiny = StateConfig::default();
        tiny.limits.opens.per_address = 0;
        assert!(tiny.validate().unwrap_err().0.contains("opens"));
        let mut cache = StateConfig::default();
        cache.limits.reply_cache_bytes.total = 100;
        assert!(cache.validate().unwrap_err().0.contains("reply cache"));
    }
}

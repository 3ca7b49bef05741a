//! Shares of what clients make the server hold (lock-holding descriptions,
//! client hosts, locks; NFSv4.1's opens, locks and delegations to come),
//! counted by client *address*.
//!
//! The address (the peer's IP, an IPv4-mapped IPv6 one as IPv4) is what a
//! client cannot choose; the names it gives (NLM's `caller_name`, a v4
//! client id) it can, so a limit keyed by a name is no limit. The rule for
//! a pool of `total_max`, in one place so every protocol keeps it:
//! - one address holds at most `per_address_max`, and never more than a
//!   quarter of the pool ([`ADDRESS_SHARE_DIVISOR`]): it takes four
//!   addresses to fill it;
//! - the last sixteenth of the pool ([`NEWCOMER_RESERVE_DIVISOR`]) goes
//!   only to addresses that hold none of it yet, one each: a client that
//!   comes when others have filled the rest still gets its first one.

use std::collections::HashMap;
use std::net::IpAddr;

/// One address holds at most `total_max / ADDRESS_SHARE_DIVISOR` of a pool.
pub const ADDRESS_SHARE_DIVISOR: usize = 4;
/// The last `total_max / NEWCOMER_RESERVE_DIVISOR` of a pool is kept for
/// addresses holding none of it.
pub const NEWCOMER_RESERVE_DIVISOR: usize = 16;

/// Why a claim was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The address holds all it may of this pool.
    AddressShare,
    /// The pool is full (for an address already holding some: all but
    /// the newcomers' reserve is taken).
    PoolFull,
}

/// A server-wide pool shared among client addresses.
#[derive(Debug)]
pub struct ClaimPool {
    total_max: usize,
    per_address_max: usize,
    reserve: usize,
    used: usize,
    held: HashMap<IpAddr, usize>,
}

impl ClaimPool {
    /// A pool of `total_max`, of which one address holds at most
    /// `per_address_max` (and at most its share, see the module).
    pub fn new(total_max: usize, per_address_max: usize) -> Self {
        let share = (total_max / ADDRESS_SHARE_DIVISOR).max(1);
        ClaimPool {
            total_max,
            per_address_max: per_address_max.min(share),
            reserve: total_max / NEWCOMER_RESERVE_DIVISOR,
            used: 0,
            held: HashMap::new(),
        }
    }

    /// A bound per address only, with no server-wide pool (what each
    /// address holds is then bounded by the pools that bound addresses).
    pub fn per_address(per_address_max: usize) -> Self {
        ClaimPool { total_max: usize::MAX, per_address_max, reserve: 0, used: 0, held: HashMap::new() }
    }

    /// Whether `addr` may take `n` more.
    pub fn check(&self, addr: IpAddr, n: usize) -> Result<(), Refusal> {
        let held = self.held_by(addr);
        if held.saturating_add(n) > self.per_address_max {
            return Err(Refusal::AddressShare);
        }
        let after = self.used.saturating_add(n);
        let newcomer = held == 0 && n == 1;
        if after <= self.total_max - self.reserve || (newcomer && after <= self.total_max) {
            Ok(())
        } else {
            Err(Refusal::PoolFull)
        }
    }

    /// Takes `n` for `addr` if it may.
    pub fn try_claim(&mut self, addr: IpAddr, n: usize) -> Result<(), Refusal> {
        self.check(addr, n)?;
        self.add(addr, n);
        Ok(())
    }

    /// Counts `n` more for `addr` without checking: for what [`check`]
    /// admitted (as much or more), or for a release that must happen even
    /// if it splits one thing in two.
    ///
    /// [`check`]: ClaimPool::check
    pub fn add(&mut self, addr: IpAddr, n: usize) {
        if n == 0 {
            return;
        }
        *self.held.entry(addr).or_insert(0) += n;
        self.used += n;
    }

    /// Gives back `n` that `addr` held.
    pub fn release(&mut self, addr: IpAddr, n: usize) {
        let Some(held) = self.held.get_mut(&addr) else { return };
        let n = n.min(*held);
        *held -= n;
        self.used -= n;
        if *held == 0 {
            self.held.remove(&addr);
        }
    }

    pub fn held_by(&self, addr: IpAddr) -> usize {
        self.held.get(&addr).copied().unwrap_or(0)
    }

    pub fn used(&self) -> usize {
        self.used
    }

    /// What the pool has not handed out (none once [`ClaimPool::add`]
    /// went past it).
    pub fn free(&self) -> usize {
        self.total_max.saturating_sub(self.used)
    }

    /// Addresses holding some of the pool.
    pub fn addresses(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn one_address_takes_at_most_a_quarter_and_newcomers_keep_a_reserve() {
        let mut pool = ClaimPool::new(64, usize::MAX);
        // A quarter each for three addresses: 48 of 64.
        for a in 1..=3 {
            for _ in 0..16 {
                pool.try_claim(ip(a), 1).unwrap();
            }
            assert_eq!(pool.try_claim(ip(a), 1), Err(Refusal::AddressShare));
        }
        // A fourth fills all but the reserve (64 / 16 = 4).
        for _ in 0..12 {
            pool.try_claim(ip(4), 1).unwrap();
        }
        assert_eq!(pool.try_claim(ip(4), 1), Err(Refusal::PoolFull), "the reserve is for newcomers");
        // Four newcomers get one each; the pool is then full for anyone.
        for a in 5..=8 {
            pool.try_claim(ip(a), 1).unwrap();
            assert_eq!(pool.try_claim(ip(a), 1), Err(Refusal::PoolFull));
        }
        assert_eq!(pool.try_claim(ip(9), 1), Err(Refusal::PoolFull));
        assert_eq!((pool.used(), pool.addresses()), (64, 8));
        // What is given back can be taken again.
        pool.release(ip(1), 16);
        assert_eq!((pool.held_by(ip(1)), pool.addresses()), (0, 7));
        pool.try_claim(ip(9), 1).unwrap();
        pool.release(ip(9), 5);
        assert_eq!(pool.used(), 48, "a release never goes below what was held");
    }

    #[test]
    fn a_tiny_pool_still_admits_one_per_address_and_a_per_address_bound_is_its_own() {
        let mut pool = ClaimPool::new(1, usize::MAX);
        pool.try_claim(ip(1), 1).unwrap();
        assert_eq!(pool.try_claim(ip(2), 1), Err(Refusal::PoolFull));
        let mut locks = ClaimPool::per_address(3);
        locks.try_claim(ip(1), 2).unwrap();
        assert_eq!(locks.check(ip(1), 2), Err(Refusal::AddressShare));
        locks.try_claim(ip(1), 1).unwrap();
        locks.try_claim(ip(2), 3).unwrap();
        assert_eq!(locks.used(), 6);
    }
}

//! Counts per client host, in a table of bounded size: clients are not
//! trusted, so a host that connects from many addresses cannot make the
//! server's memory grow. When a shard of the table is full, the entry with
//! the fewest calls (the least active; the oldest of those) makes room,
//! and the eviction is counted, so a reader knows the table is partial.

use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::snapshot::ClientSnapshot;

/// Clients tracked at most (a 500-node cluster fits twice).
pub const CLIENTS_MAX: usize = 1024;
const SHARDS: usize = 16;
const PER_SHARD: usize = CLIENTS_MAX / SHARDS;

#[derive(Clone, Copy)]
struct Entry {
    ip: IpAddr,
    calls: u64,
    errors: u64,
    read_bytes: u64,
    write_bytes: u64,
    /// Milliseconds since the table's epoch at the last call.
    last_ms: u64,
}

pub(crate) struct ClientTable {
    shards: [Mutex<Vec<Entry>>; SHARDS],
    evicted: AtomicU64,
}

impl Default for ClientTable {
    fn default() -> Self {
        ClientTable {
            shards: std::array::from_fn(|_| Mutex::new(Vec::with_capacity(PER_SHARD))),
            evicted: AtomicU64::new(0),
        }
    }
}

/// IPv4-mapped IPv6 addresses (from a dual-stack socket) count as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

fn shard_of(ip: IpAddr) -> usize {
    let bits: u128 = match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    };
    let folded = (bits as u64) ^ ((bits >> 64) as u64);
    (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60) as usize % SHARDS
}

impl ClientTable {
    pub fn record(&self, ip: IpAddr, error: bool, read_bytes: u64, write_bytes: u64, now_ms: u64) {
        let ip = canonical(ip);
        let mut shard = self.shards[shard_of(ip)].lock().expect("client table lock");
        let i = match shard.iter().position(|e| e.ip == ip) {
            Some(i) => i,
            None => {
                let fresh = Entry { ip, calls: 0, errors: 0, read_bytes: 0, write_bytes: 0, last_ms: now_ms };
                if shard.len() < PER_SHARD {
                    shard.push(fresh);
                    shard.len() - 1
                } else {
                    let least = (0..shard.len()).min_by_key(|&i| (shard[i].calls, shard[i].last_ms)).expect("full");
                    shard[least] = fresh;
                    self.evicted.fetch_add(1, Ordering::Relaxed);
                    least
                }
            }
        };
        let e = &mut shard[i];
        e.calls += 1;
        e.errors += u64::from(error);
        e.read_bytes += read_bytes;
        e.write_bytes += write_bytes;
        e.last_ms = now_ms;
    }

    /// Every tracked client, most calls first; and how many were evicted.
    pub fn snapshot(&self, now_ms: u64) -> (Vec<ClientSnapshot>, u64) {
        let mut all = Vec::new();
        for shard in &self.shards {
            for e in shard.lock().expect("client table lock").iter() {
                all.push(ClientSnapshot {
                    address: e.ip.to_string(),
                    calls: e.calls,
                    errors: e.errors,
                    read_bytes: e.read_bytes,
                    write_bytes: e.write_bytes,
                    idle_seconds: now_ms.saturating_sub(e.last_ms) / 1000,
                });
            }
        }
        all.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.address.cmp(&b.address)));
        (all, self.evicted.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_host_and_stays_bounded_evicting_the_least_active() {
        let t = ClientTable::default();
        let busy: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..5 {
            t.record(busy, false, 10, 0, 1);
        }
        t.record("::ffff:10.0.0.1".parse().unwrap(), true, 0, 7, 2);
        let (list, evicted) = t.snapshot(2);
        assert_eq!((list.len(), evicted), (1, 0));
        assert_eq!((list[0].calls, list[0].errors, list[0].read_bytes, list[0].write_bytes), (6, 1, 50, 7));

        // Many more hosts than the table holds: bounded, and the busy one stays.
        for n in 0..20_000u32 {
            t.record(IpAddr::from((0xc000_0000u32 + n).to_be_bytes()), false, 0, 0, 3);
        }
        let (list, evicted) = t.snapshot(3);
        assert!(list.len() <= CLIENTS_MAX, "{}", list.len());
        assert_eq!(evicted as usize + list.len(), 20_001);
        assert_eq!(list[0].address, "10.0.0.1");
        assert_eq!(list[0].calls, 6);
    }
}

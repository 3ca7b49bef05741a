//! The `host` of a client entry: `*`, an address, a network, or a host name.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use keel_exports::HostMatch;

/// A parsed `host` value. Names are resolved by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HostSpec {
    Match(HostMatch),
    Name(String),
}

/// Parses a `host` value. The error says what is wrong with it (the caller
/// adds the value itself).
pub(super) fn parse_host(s: &str) -> Result<HostSpec, String> {
    if s.is_empty() {
        return Err("the host is empty; use \"*\" for every client".into());
    }
    if s == "*" {
        return Ok(HostSpec::Match(HostMatch::Any));
    }
    if s.contains(|c: char| c.is_whitespace() || c == ',') {
        return Err("a host entry names one host or network; give each its own \
                    [[export.clients]] entry"
            .into());
    }
    if let Some((addr, prefix)) = s.split_once('/') {
        return parse_network(addr, prefix).map(HostSpec::Match);
    }
    if s.contains(':') {
        return match s.parse::<Ipv6Addr>() {
            Ok(a) => Ok(HostSpec::Match(network(IpAddr::V6(a), 128))),
            Err(_) => Err("not a valid IPv6 address".into()),
        };
    }
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return match s.parse::<Ipv4Addr>() {
            Ok(a) => Ok(HostSpec::Match(network(IpAddr::V4(a), 32))),
            Err(_) => Err("not a valid IPv4 address (four numbers from 0 to 255 separated by dots)".into()),
        };
    }
    if s.contains(['*', '?']) {
        return Err("wildcards in host names are not supported; use a network such as \
                    \"10.1.0.0/16\", or \"*\" for every client"
            .into());
    }
    if s.starts_with('@') {
        return Err("NIS netgroups are not supported; list the hosts or their network".into());
    }
    check_host_name(s)?;
    Ok(HostSpec::Name(s.to_owned()))
}

/// `addr/prefix_len` or `addr/netmask` (IPv4 only, as exports(5) allows).
fn parse_network(addr: &str, prefix: &str) -> Result<HostMatch, String> {
    let addr: IpAddr = addr.parse().map_err(|_| format!("{addr:?} before the '/' is not an IP address"))?;
    let max: u32 = if addr.is_ipv4() { 32 } else { 128 };
    if prefix.is_empty() {
        return Err("the prefix length after the '/' is missing".into());
    }
    let prefix_len = if prefix.bytes().all(|b| b.is_ascii_digit()) {
        match prefix.parse::<u32>() {
            Ok(n) if n <= max => n,
            _ => {
                let shown = if prefix.len() > 12 { "that" } else { prefix };
                return Err(format!("prefix length {shown} is longer than {max}"));
            }
        }
    } else if let (IpAddr::V4(_), Ok(mask)) = (addr, prefix.parse::<Ipv4Addr>()) {
        let bits = u32::from(mask);
        let ones = bits.leading_ones();
        if bits.checked_shl(ones).unwrap_or(0) != 0 {
            return Err(format!("netmask {mask} is not contiguous"));
        }
        ones
    } else {
        return Err(format!("prefix length {prefix:?} is not a number from 0 to {max}"));
    };
    // prefix_len <= 128 here.
    Ok(network(addr, u8::try_from(prefix_len).unwrap_or(u8::MAX)))
}

/// The network of `addr` with host bits cleared; an IPv4-mapped IPv6
/// network becomes the IPv4 network it stands for.
fn network(addr: IpAddr, prefix_len: u8) -> HostMatch {
    match addr {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix_len.min(32))).unwrap_or(0);
            HostMatch::Net { addr: IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask)), prefix_len }
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix_len.min(128))).unwrap_or(0);
            let net = Ipv6Addr::from(u128::from(a) & mask);
            match net.to_ipv4_mapped() {
                Some(v4) if prefix_len >= 96 => HostMatch::Net { addr: IpAddr::V4(v4), prefix_len: prefix_len - 96 },
                _ => HostMatch::Net { addr: IpAddr::V6(net), prefix_len },
            }
        }
    }
}

/// RFC 1123 host name syntax (underscores tolerated: /etc/hosts has them).
fn check_host_name(s: &str) -> Result<(), String> {
    let name = s.strip_suffix('.').unwrap_or(s);
    if name.len() > 253 {
        return Err("a host name cannot be longer than 253 characters".into());
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("a host name cannot have an empty part (two dots in a row, or a \
                        leading dot)"
                .into());
        }
        if label.len() > 63 {
            return Err("each dot-separated part of a host name must be at most 63 characters".into());
        }
        if let Some(c) = label.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_')) {
            return Err(format!("{c:?} cannot appear in a host name (letters, digits, '-' and '.' only)"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a part of a host name cannot begin or end with '-'".into());
        }
    }
    Ok(())
}

/// Whether every client `later` matches is already matched by `earlier`, so
/// that `later` can never be the first match.
pub(super) fn covers(earlier: &HostMatch, later: &HostMatch) -> bool {
    match (earlier, later) {
        (HostMatch::Any, _) => true,
        (_, HostMatch::Any) => false,
        (HostMatch::Net { addr: a, prefix_len: pa }, HostMatch::Net { addr: b, prefix_len: pb }) => {
            a.is_ipv4() == b.is_ipv4() && pa <= pb && earlier.matches(*b)
        }
        (HostMatch::Host { .. }, HostMatch::Net { addr, prefix_len }) => {
            let full = if addr.is_ipv4() { 32 } else { 128 };
            *prefix_len == full && earlier.matches(*addr)
        }
        (_, HostMatch::Host { addrs, .. }) => !addrs.is_empty() && addrs.iter().all(|a| earlier.matches(*a)),
    }
}

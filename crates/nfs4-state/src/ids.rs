//! The identifiers the server hands out (RFC 8881 sections 2.4, 2.10.3,
//! 8.2): client IDs, session IDs and stateids, built so that one from an
//! earlier instance of the server is recognised as stale and one the
//! server never issued as bad.

use keel_nfs4_proto::{NFS4_OTHER_SIZE, NFS4_SESSIONID_SIZE, Nfsstat4, Sessionid4, Stateid4};

use crate::siphash::siphash24;

/// Which instance of the server issued an identifier. The server gives a
/// new, larger one at every start and at every takeover in an HA pair
/// (e.g. a count of starts kept in `state_dir`), so identifiers of an
/// earlier instance carry a smaller epoch. Never 0 nor `u32::MAX`: the
/// special stateids are made of those bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BootEpoch(u32);

impl BootEpoch {
    /// `None` for 0 and `u32::MAX`.
    pub fn new(value: u32) -> Option<Self> {
        (value != 0 && value != u32::MAX).then_some(BootEpoch(value))
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

/// A client ID (`clientid4`): the boot epoch in the high 32 bits and a
/// counter of this instance in the low ones, as knfsd's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(pub u64);

impl ClientId {
    pub(crate) fn new(epoch: BootEpoch, counter: u32) -> Self {
        ClientId(u64::from(epoch.0) << 32 | u64::from(counter))
    }

    /// The epoch of the instance that issued it.
    pub fn epoch(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A session ID: the client ID (8 bytes, big-endian) and a keyed hash of
/// it and a counter (8 bytes). The hash's key is the server's secret, so
/// a client that knows its own session IDs cannot compute another's; the
/// client ID in front lets the admin interface show whose it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId(pub Sessionid4);

impl SessionId {
    pub(crate) fn new(key: &[u8; 16], client: ClientId, counter: u64) -> Self {
        let mut input = [0u8; 16];
        input[..8].copy_from_slice(&client.0.to_be_bytes());
        input[8..].copy_from_slice(&counter.to_be_bytes());
        let mut id = [0u8; NFS4_SESSIONID_SIZE];
        id[..8].copy_from_slice(&client.0.to_be_bytes());
        id[8..].copy_from_slice(&siphash24(key, &input).to_be_bytes());
        SessionId(id)
    }

    /// The client the session would belong to (not checked: look it up).
    pub fn client(&self) -> ClientId {
        ClientId(u64::from_be_bytes(self.0[..8].try_into().expect("8 bytes")))
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// The stateids RFC 8881 section 8.2.3 gives a meaning without any state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialStateid {
    /// All zeros: I/O without open or lock state, subject to share
    /// reservations and delegations.
    Anonymous,
    /// All ones: a READ that bypasses share reservations (any other
    /// operation takes it as [`Anonymous`](SpecialStateid::Anonymous)).
    ReadBypass,
    /// `seqid` 1, `other` zeros: the current stateid of the COMPOUND
    /// ([`CurrentStateid`](crate::CurrentStateid) resolves it).
    Current,
    /// `seqid` all ones, `other` zeros: never valid.
    Invalid,
}

/// What a stateid's `other` field names, before any table is consulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateidName {
    Special(SpecialStateid),
    /// Issued by this instance: the key of its entry.
    Ours(u64),
}

/// The `other` field of the stateid numbered `key`: the boot epoch (4
/// bytes) and the server-wide counter (8 bytes), both big-endian.
pub(crate) fn stateid_other(epoch: BootEpoch, key: u64) -> [u8; NFS4_OTHER_SIZE] {
    let mut other = [0u8; NFS4_OTHER_SIZE];
    other[..4].copy_from_slice(&epoch.0.to_be_bytes());
    other[4..].copy_from_slice(&key.to_be_bytes());
    other
}

/// Classifies `stateid`: special, ours, or an error. A stateid of an
/// earlier epoch is `NFS4ERR_STALE_STATEID`; one of a later epoch, or
/// with an `other` the server cannot have made, `NFS4ERR_BAD_STATEID`.
pub(crate) fn name_stateid(epoch: BootEpoch, stateid: &Stateid4) -> Result<StateidName, Nfsstat4> {
    let other = &stateid.other;
    if other.iter().all(|&b| b == 0) {
        return match stateid.seqid {
            0 => Ok(StateidName::Special(SpecialStateid::Anonymous)),
            1 => Ok(StateidName::Special(SpecialStateid::Current)),
            u32::MAX => Ok(StateidName::Special(SpecialStateid::Invalid)),
            _ => Err(Nfsstat4::BadStateid),
        };
    }
    if other.iter().all(|&b| b == 0xff) {
        return if stateid.seqid == u32::MAX {
            Ok(StateidName::Special(SpecialStateid::ReadBypass))
        } else {
            Err(Nfsstat4::BadStateid)
        };
    }
    let issued = u32::from_be_bytes(other[..4].try_into().expect("4 bytes"));
    let key = u64::from_be_bytes(other[4..].try_into().expect("8 bytes"));
    match issued.cmp(&epoch.0) {
        std::cmp::Ordering::Less if issued != 0 => Err(Nfsstat4::StaleStateid),
        std::cmp::Ordering::Equal if key != 0 => Ok(StateidName::Ours(key)),
        _ => Err(Nfsstat4::BadStateid),
    }
}

/// RFC 8881 section 8.2.2 for minor version 1: `given` seqid 0 means the
/// current one; the current one is fine; an older one is
/// `NFS4ERR_OLD_STATEID`; one the server has not issued yet is
/// `NFS4ERR_BAD_STATEID`. Seqids wrap, as knfsd compares them.
pub(crate) fn check_seqid(given: u32, current: u32) -> Result<(), Nfsstat4> {
    if given == 0 || given == current {
        Ok(())
    } else if (given.wrapping_sub(current) as i32) < 0 {
        Err(Nfsstat4::OldStateid)
    } else {
        Err(Nfsstat4::BadStateid)
    }
}

/// The seqid after `seqid`: 0 is skipped on wrap-around, since it means
/// "the current one".
pub(crate) fn next_seqid(seqid: u32) -> u32 {
    seqid.wrapping_add(1).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch(n: u32) -> BootEpoch {
        BootEpoch::new(n).unwrap()
    }

    /// RFC 8881 section 8.2.3: the special stateids are recognised by
    /// their bytes; anything else with all-zero or all-one `other` is bad.
    #[test]
    fn special_stateids_are_named_and_their_neighbours_refused() {
        let e = epoch(7);
        assert_eq!(name_stateid(e, &Stateid4::ANONYMOUS), Ok(StateidName::Special(SpecialStateid::Anonymous)));
        assert_eq!(name_stateid(e, &Stateid4::READ_BYPASS), Ok(StateidName::Special(SpecialStateid::ReadBypass)));
        assert_eq!(name_stateid(e, &Stateid4::CURRENT), Ok(StateidName::Special(SpecialStateid::Current)));
        assert_eq!(name_stateid(e, &Stateid4::INVALID), Ok(StateidName::Special(SpecialStateid::Invalid)));
        assert_eq!(name_stateid(e, &Stateid4 { seqid: 2, other: [0; 12] }), Err(Nfsstat4::BadStateid));
        assert_eq!(name_stateid(e, &Stateid4 { seqid: 0, other: [0xff; 12] }), Err(Nfsstat4::BadStateid));
        assert_eq!(BootEpoch::new(0), None);
        assert_eq!(BootEpoch::new(u32::MAX), None);
    }

    /// RFC 8881 section 8.2.2: a stateid of an earlier instance is
    /// STALE_STATEID; one naming a later instance (a forgery) is
    /// BAD_STATEID.
    #[test]
    fn an_earlier_epoch_is_stale_and_a_later_one_bad() {
        let other = stateid_other(epoch(5), 42);
        let s = Stateid4 { seqid: 1, other };
        assert_eq!(name_stateid(epoch(5), &s), Ok(StateidName::Ours(42)));
        assert_eq!(name_stateid(epoch(6), &s), Err(Nfsstat4::StaleStateid));
        assert_eq!(name_stateid(epoch(4), &s), Err(Nfsstat4::BadStateid));
        let zero_key = Stateid4 { seqid: 1, other: stateid_other(epoch(5), 0) };
        assert_eq!(name_stateid(epoch(5), &zero_key), Err(Nfsstat4::BadStateid));
    }

    /// RFC 8881 section 8.2.2: seqid 0 is the current one; older is OLD,
    /// newer is BAD, across the wrap.
    #[test]
    fn seqids_compare_with_wrap_around() {
        assert_eq!(check_seqid(0, 9), Ok(()));
        assert_eq!(check_seqid(9, 9), Ok(()));
        assert_eq!(check_seqid(8, 9), Err(Nfsstat4::OldStateid));
        assert_eq!(check_seqid(10, 9), Err(Nfsstat4::BadStateid));
        assert_eq!(check_seqid(u32::MAX, 2), Err(Nfsstat4::OldStateid));
        assert_eq!(next_seqid(u32::MAX), 1);
    }

    #[test]
    fn session_ids_carry_the_client_and_differ_by_key_and_counter() {
        let c = ClientId::new(epoch(3), 9);
        let a = SessionId::new(&[1; 16], c, 1);
        assert_eq!(a.client(), c);
        assert_ne!(a, SessionId::new(&[1; 16], c, 2));
        assert_ne!(a, SessionId::new(&[2; 16], c, 1));
        assert_eq!(c.epoch(), 3);
    }
}

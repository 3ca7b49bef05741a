//! NSM, the network status monitor, version 1 (program 100024).
//!
//! Procedure arguments and results: NULL `()` → `()`; STAT [`SmName`] →
//! [`SmStatRes`]; MON [`Mon`] → [`SmStatRes`]; UNMON [`MonId`] →
//! [`SmStat`]; UNMON_ALL [`MyId`] → [`SmStat`]; SIMU_CRASH `()` → `()`;
//! NOTIFY [`StatChge`] → `()`. Besides these, a lock manager offers its
//! status monitor a private procedure the monitor calls back when a
//! monitored host reboots ([`NlmSmNotify`], `nlm_reboot` in Linux).

use keel_xdr::{Opaque, xdr_enum, xdr_struct};

pub const SM_PROGRAM: u32 = 100024;
pub const SM_V1: u32 = 1;
/// `SM_MAXSTRLEN`: the longest host name.
pub const SM_MAXSTRLEN: usize = 1024;

/// A host name as NSM carries it.
pub type SmString = Opaque<SM_MAXSTRLEN>;

/// NSM procedure numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SmProc {
    Null = 0,
    Stat = 1,
    Mon = 2,
    Unmon = 3,
    UnmonAll = 4,
    SimuCrash = 5,
    Notify = 6,
}

impl SmProc {
    pub fn from_u32(n: u32) -> Option<Self> {
        [SmProc::Null, SmProc::Stat, SmProc::Mon, SmProc::Unmon, SmProc::UnmonAll, SmProc::SimuCrash, SmProc::Notify]
            .get(usize::try_from(n).ok()?)
            .copied()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SmName {
    pub mon_name: SmString,
}
xdr_struct!(SmName { mon_name });

/// Whom the monitor calls back, and how.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MyId {
    pub my_name: SmString,
    pub my_prog: i32,
    pub my_vers: i32,
    pub my_proc: i32,
}
xdr_struct!(MyId { my_name, my_prog, my_vers, my_proc });

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MonId {
    pub mon_name: SmString,
    pub my_id: MyId,
}
xdr_struct!(MonId { mon_name, my_id });

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mon {
    pub mon_id: MonId,
    pub priv_: [u8; 16],
}
xdr_struct!(Mon { mon_id, priv_ });

/// `res`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SmRes {
    Succ = 0,
    Fail = 1,
}
xdr_enum!(SmRes { Succ, Fail });

impl SmRes {
    /// The specification's name, e.g. `"STAT_SUCC"`.
    pub fn name(self) -> &'static str {
        match self {
            SmRes::Succ => "STAT_SUCC",
            SmRes::Fail => "STAT_FAIL",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmStatRes {
    pub res_stat: SmRes,
    pub state: i32,
}
xdr_struct!(SmStatRes { res_stat, state });

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmStat {
    pub state: i32,
}
xdr_struct!(SmStat { state });

/// SM_NOTIFY's argument: a host that restarted, and its new state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatChge {
    pub mon_name: SmString,
    pub state: i32,
}
xdr_struct!(StatChge { mon_name, state });

/// The monitor's call back into its lock manager when a monitored host
/// reboots (Linux's `nlm_reboot`, NLM procedure 16 of versions 1, 3
/// and 4 on the loopback address).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NlmSmNotify {
    pub mon_name: SmString,
    pub state: i32,
    pub priv_: [u8; 16],
}
xdr_struct!(NlmSmNotify { mon_name, state, priv_ });

//! The caller's identity, after export squashing.

/// Supplementary groups kept (AUTH_SYS carries 16).
pub const GROUPS_MAX: usize = 16;

/// An identity after export squashing: what permissions are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    groups: [u32; GROUPS_MAX],
    ngroups: u8,
}

impl Cred {
    /// Groups beyond [`GROUPS_MAX`] are ignored (AUTH_SYS carries 16).
    pub fn new(uid: u32, gid: u32, groups: &[u32]) -> Self {
        let n = groups.len().min(GROUPS_MAX);
        let mut g = [0; GROUPS_MAX];
        g[..n].copy_from_slice(&groups[..n]);
        Cred { uid, gid, groups: g, ngroups: n as u8 }
    }

    pub const ROOT: Cred = Cred { uid: 0, gid: 0, groups: [0; GROUPS_MAX], ngroups: 0 };

    pub fn groups(&self) -> &[u32] {
        &self.groups[..self.ngroups as usize]
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_beyond_sixteen_are_dropped() {
        let groups: Vec<u32> = (0..20).collect();
        assert_eq!(Cred::new(1, 1, &groups).groups().len(), GROUPS_MAX);
    }
}

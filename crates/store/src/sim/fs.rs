//! The simulated file system: inodes in a table, directories as entries
//! with stable cookies, file data in memory; permission checks as the
//! kernel makes them for the common cases; and the durable image a crash
//! falls back to.

use std::collections::{BTreeMap, HashMap};

use crate::attr::{FileType, Time};
use crate::cred::Cred;

/// The first cookie of a directory's own entries ("." is 1, ".." is 2).
pub const FIRST_ENTRY_COOKIE: u64 = 3;

#[derive(Debug, Clone)]
pub struct Meta {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
    pub rdev: (u32, u32),
}

#[derive(Debug, Clone, Default)]
pub struct Dir {
    /// The directory that holds this one (an export root: itself).
    pub parent: u64,
    /// Entries by cookie: a listing resumes after any cookie it was given,
    /// whatever changed since.
    pub entries: BTreeMap<u64, (Vec<u8>, u64)>,
    pub names: HashMap<Vec<u8>, u64>,
    pub next_cookie: u64,
}

impl Dir {
    pub fn new(parent: u64) -> Self {
        Dir { parent, next_cookie: FIRST_ENTRY_COOKIE, ..Default::default() }
    }

    pub fn get(&self, name: &[u8]) -> Option<u64> {
        self.names.get(name).map(|c| self.entries[c].1)
    }

    pub fn insert(&mut self, name: &[u8], ino: u64) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.entries.insert(cookie, (name.to_vec(), ino));
        self.names.insert(name.to_vec(), cookie);
    }

    pub fn remove(&mut self, name: &[u8]) -> Option<u64> {
        let cookie = self.names.remove(name)?;
        self.entries.remove(&cookie).map(|(_, ino)| ino)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[derive(Debug, Clone)]
pub enum Body {
    File(Vec<u8>),
    Dir(Dir),
    Symlink(Vec<u8>),
    Special,
}

#[derive(Debug, Clone)]
pub struct Node {
    pub export: u32,
    pub ftype: FileType,
    pub meta: Meta,
    pub body: Body,
}

impl Node {
    pub fn dir(&self) -> Option<&Dir> {
        match &self.body {
            Body::Dir(d) => Some(d),
            _ => None,
        }
    }

    pub fn dir_mut(&mut self) -> Option<&mut Dir> {
        match &mut self.body {
            Body::Dir(d) => Some(d),
            _ => None,
        }
    }

    pub fn data(&self) -> Option<&Vec<u8>> {
        match &self.body {
            Body::File(d) => Some(d),
            _ => None,
        }
    }

    pub fn data_mut(&mut self) -> Option<&mut Vec<u8>> {
        match &mut self.body {
            Body::File(d) => Some(d),
            _ => None,
        }
    }

    pub fn size(&self) -> u64 {
        match &self.body {
            Body::File(d) => d.len() as u64,
            Body::Dir(d) => 4096 + 32 * d.entries.len() as u64,
            Body::Symlink(t) => t.len() as u64,
            Body::Special => 0,
        }
    }

    /// What a crash finds of this object when only its existence was made
    /// durable (by a flush of the directory that names it): the inode
    /// without data or entries of its own.
    pub fn skeleton(&self) -> Node {
        let body = match &self.body {
            Body::File(_) => Body::File(Vec::new()),
            Body::Dir(d) => Body::Dir(Dir::new(d.parent)),
            other => other.clone(),
        };
        Node { body, ..self.clone() }
    }
}

pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;

fn in_group(cred: &Cred, gid: u32) -> bool {
    cred.gid == gid || cred.groups().contains(&gid)
}

/// Whether `cred` has the `want` bits (R, W, X) on an object, as
/// generic_permission decides it: root may read and write anything and
/// execute what anyone may (or search any directory); others get the
/// owner's, the group's or everyone's bits, the first class they are in.
pub fn may(cred: &Cred, node: &Node, want: u32) -> bool {
    if cred.is_root() {
        return want & X == 0 || node.ftype == FileType::Directory || node.meta.mode & 0o111 != 0;
    }
    let m = node.meta.mode;
    let bits = if cred.uid == node.meta.uid {
        (m >> 6) & 7
    } else if in_group(cred, node.meta.gid) {
        (m >> 3) & 7
    } else {
        m & 7
    };
    bits & want == want
}

/// The owner, or root (CAP_FOWNER).
pub fn owns(cred: &Cred, node: &Node) -> bool {
    cred.is_root() || cred.uid == node.meta.uid
}

/// In a sticky directory only the owner of the entry, of the directory,
/// or root may remove or rename it.
pub fn sticky_allows(cred: &Cred, dir: &Node, victim: &Node) -> bool {
    dir.meta.mode & 0o1000 == 0 || owns(cred, dir) || owns(cred, victim)
}

/// May `cred` give `node` another name (fs.protected_hardlinks, on by
/// default on systemd distributions, and applied to the local store's
/// linkat(2)): its owner or root may; others only a regular file that is
/// not setuid, not setgid-executable, and that they may read and write.
pub fn may_hardlink(cred: &Cred, node: &Node) -> bool {
    let m = node.meta.mode;
    let safe = node.ftype == FileType::Regular && m & 0o4000 == 0 && m & 0o2010 != 0o2010 && may(cred, node, R | W);
    safe || owns(cred, node)
}

/// May `cred` change the owner to `uid` and the group to `gid` (chown(2)):
/// root may; the owner may only set the group to one of their own.
pub fn may_chown(cred: &Cred, node: &Node, uid: Option<u32>, gid: Option<u32>) -> bool {
    if cred.is_root() {
        return true;
    }
    let uid_ok = uid.is_none_or(|u| u == node.meta.uid);
    let gid_ok = gid.is_none_or(|g| g == node.meta.gid || in_group(cred, g));
    cred.uid == node.meta.uid && uid_ok && gid_ok
}

pub type Table = HashMap<u64, Node>;

/// After a crash: keeps what the export roots reach, drops entries that
/// name objects the crash lost, and recomputes link counts and parents as
/// fsck leaves them.
pub fn fsck(table: &mut Table, roots: &[u64]) {
    let mut reached: HashMap<u64, u32> = HashMap::new();
    let mut stack: Vec<u64> = Vec::new();
    for &root in roots {
        if let Some(n) = table.get_mut(&root) {
            if let Some(d) = n.dir_mut() {
                d.parent = root;
            }
            reached.insert(root, 1);
            stack.push(root);
        }
    }
    while let Some(ino) = stack.pop() {
        let Some(entries) = table.get(&ino).and_then(Node::dir).map(|d| d.entries.clone()) else { continue };
        let mut gone = Vec::new();
        for (cookie, (name, target)) in entries {
            let target_is_dir = match table.get(&target) {
                None => {
                    gone.push(name);
                    continue;
                }
                Some(t) => t.ftype == FileType::Directory,
            };
            // A directory has one name: a second one (a rename whose old
            // directory was flushed without its new one) goes.
            if target_is_dir && reached.contains_key(&target) {
                gone.push(name);
                continue;
            }
            *reached.entry(target).or_insert(0) += 1;
            if target_is_dir {
                if let Some(d) = table.get_mut(&target).and_then(Node::dir_mut) {
                    d.parent = ino;
                }
                stack.push(target);
            }
            let _ = cookie;
        }
        if let Some(d) = table.get_mut(&ino).and_then(Node::dir_mut) {
            for name in gone {
                d.remove(&name);
            }
        }
    }
    table.retain(|ino, _| reached.contains_key(ino));
    let subdirs: HashMap<u64, u32> = table
        .iter()
        .filter_map(|(&ino, n)| {
            let d = n.dir()?;
            Some((ino, d.entries.values().filter(|(_, t)| table[t].ftype == FileType::Directory).count() as u32))
        })
        .collect();
    for (ino, n) in table.iter_mut() {
        n.meta.nlink = match n.ftype {
            FileType::Directory => 2 + subdirs[ino],
            _ => reached[ino],
        };
    }
}

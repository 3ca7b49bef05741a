//! NFSv4's pseudo file system for one client (RFC 8881 §7; knfsd's
//! pseudo root): the read-only directories that lead from "/" to the
//! exports the client is admitted to, under the paths it mounts with
//! MOUNT v3. Sans I/O and protocol-independent: the NFSv4 handler asks it
//! what a pseudo node is and encodes the answers itself.
//!
//! **What a client sees.** An export is placed when
//! [`ExportTable::client_options`] admits the client, the one function
//! MOUNT's MNT admits by (client list, then `secure` against the
//! client's port): a client sees nothing of any other export, neither its
//! name nor the directories that lead only to it. An export inside
//! another admitted export (`/srv/b/c` in `/srv`) is reached through the
//! outer export's real directories, as knfsd crosses into it; the pseudo
//! tree covers only what lies above the outermost admitted exports, and
//! an admitted export of "/" is the root itself (no pseudo node at all).
//!
//! **Handles.** A pseudo handle is
//!
//! ```text
//! 0      PSEUDO_FH_MAGIC (0xff): no store's handle begins with it
//!        (keel-store-local's begins with its version, 1; SimStore's with 'S')
//! 1      version (1)
//! 2..10  the node's fileid (u64, big-endian): a hash of its path
//! 10..18 MAC: SipHash-2-4 under the caller's PseudoKey over bytes 0..10
//! ```
//!
//! so a client can neither make one up nor turn one into a store handle
//! (the store checks its own MAC), and a node keeps its handle and fileid
//! across reloads and restarts (given the same key). A handle whose MAC
//! holds but whose node this client's tree lacks (gone with a reload, or
//! never shown to this client) is stale.
//!
//! **What the NFSv4 handler does with it.**
//! - PUTFH: [`PseudoFs::node_from_handle`] first; [`PseudoError::NotPseudo`]
//!   hands the bytes to [`ExportTable::admit_handle`]; `BadHandle`,
//!   `Stale` and `NoEntry` are NFS4ERR_BADHANDLE, NFS4ERR_STALE and
//!   NFS4ERR_NOENT. PUTROOTFH: [`PseudoFs::root`].
//! - [`Reached::ExportRoot`] (from `root`, `lookup` or `readdir`) is
//!   crossed into as MNT does: the client was admitted when the tree was
//!   built, so the export's root is `Store::lookup_path(id, "/")`; every
//!   later operation on its handles is admitted by `admit_handle` as for
//!   NFSv3 (squash, ro/rw, sync).
//! - Nested exports ([`PseudoFs::nested_exports`]): a LOOKUP inside export
//!   `outer` that reaches its directory `below` (compare with the object
//!   `Store::lookup_path(outer, below)` names) crosses into the inner
//!   export's root instead; LOOKUPP from that root goes back to `outer`'s
//!   directory ([`PseudoFs::parent_of_export`]). An inner export that does
//!   not admit the client is not listed: the client stays in the outer
//!   export's directory, as knfsd leaves it and as NFSv3 LOOKUP does.
//! - LOOKUPP from an export's root: [`PseudoFs::parent_of_export`].
//! - GETATTR of a pseudo node: [`PseudoFs::attrs`] (a directory); its
//!   times are the handler's to choose. READDIR entries that are export
//!   roots take their attributes from the store and their
//!   mounted_on_fileid from the entry. Cookies stay valid across reloads,
//!   so any fixed cookie verifier will do.
//! - Pseudo nodes are read-only (NFS4ERR_ROFS for changes, as knfsd).
//! - A tree may be kept per client (address, and whether its calls meet
//!   `secure`: a reserved port or a Kerberos flavor) and rebuilt when [`PseudoFs::is_current`] says a reload
//!   changed the exports.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hasher;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use keel_store::{NAME_BYTES_MAX, Store};
use siphasher::sip::SipHasher24;

use crate::policy::{SecFlavor, SecFlavors};
use crate::{ExportTable, ServedExport};

/// Longest export path the pseudo file system places: MOUNT v3's
/// MNTPATHLEN, so every path a v3 client can mount has its place.
pub const PSEUDO_PATH_BYTES_MAX: usize = 1024;
/// Most components of an export path the pseudo file system places.
pub const PSEUDO_DEPTH_MAX: usize = 128;
/// Longest component of an export path: a file name.
pub const PSEUDO_COMPONENT_BYTES_MAX: usize = NAME_BYTES_MAX;
/// Permission bits of every pseudo directory: anyone may list and pass.
pub const PSEUDO_MODE: u32 = 0o555;

const PSEUDO_FH_MAGIC: u8 = 0xff;
const PSEUDO_FH_VERSION: u8 = 1;
const PSEUDO_FH_BODY_BYTES: usize = 10;
const PSEUDO_FH_MAC_BYTES: usize = 8;
/// A pseudo handle's length, well within `keel_store::HANDLE_BYTES_MAX`.
pub const PSEUDO_FH_BYTES: usize = PSEUDO_FH_BODY_BYTES + PSEUDO_FH_MAC_BYTES;
const _: () = assert!(PSEUDO_FH_BYTES <= keel_store::HANDLE_BYTES_MAX);

/// The fsid the pseudo file system prefers: `fsid=` in the configuration
/// is at most i64::MAX, so only a derived fsid can meet it.
const PSEUDO_FSID_PREFERRED: u64 = u64::MAX;
/// READDIR cookies 0 (the start), 1 and 2 mean something to NFSv4
/// (RFC 8881 §18.23.4): entries get cookies from 3 on, below 2^63.
const COOKIE_FIRST: u64 = 3;
const COOKIE_LAST: u64 = i64::MAX as u64;

/// The secret that authenticates pseudo handles. Like the store's handle
/// key it must stay the same across restarts and on both nodes of an HA
/// pair, or clients' pseudo handles turn stale. The MAC's input starts
/// with its own domain, so the store's handle key may serve for both.
#[derive(Clone)]
pub struct PseudoKey([u8; 16]);

impl PseudoKey {
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        PseudoKey(bytes)
    }

    /// SipHash-2-4 of `parts` (each length-prefixed) under the key, in
    /// `domain`.
    fn hash(&self, domain: &[u8], parts: &[&[u8]]) -> u64 {
        let k0 = u64::from_le_bytes(self.0[..8].try_into().expect("8 bytes"));
        let k1 = u64::from_le_bytes(self.0[8..].try_into().expect("8 bytes"));
        let mut h = SipHasher24::new_with_keys(k0, k1);
        h.write(domain);
        for part in parts {
            h.write(&(part.len() as u64).to_be_bytes());
            h.write(part);
        }
        h.finish()
    }
}

impl std::fmt::Debug for PseudoKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PseudoKey(..)")
    }
}

/// A pseudo directory. It keeps its id (its fileid) across rebuilds of
/// the tree as long as its path is in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PseudoNodeId(u64);

impl PseudoNodeId {
    pub fn fileid(self) -> u64 {
        self.0
    }
}

/// Where a name of the pseudo file system leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// Another pseudo directory.
    Pseudo(PseudoNodeId),
    /// The root of the export with this id, mounted at this path.
    ExportRoot(u32),
}

/// Why the pseudo file system refuses a handle or a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PseudoError {
    /// Not shaped as a pseudo handle: the store's to resolve.
    #[error("not a pseudo file system handle")]
    NotPseudo,
    /// Shaped as a pseudo handle, but this server did not issue it.
    #[error("malformed or forged pseudo file system handle")]
    BadHandle,
    /// A pseudo node this client's tree does not hold (any more).
    #[error("stale pseudo file system handle")]
    Stale,
    /// No such name, or no parent of the root.
    #[error("no such entry in the pseudo file system")]
    NoEntry,
}

/// What an NFSv4 server says about a pseudo directory (owner and group
/// root, type directory, mode [`PSEUDO_MODE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PseudoAttrs {
    pub fileid: u64,
    /// The pseudo file system's, distinct from every export's.
    pub fsid: u64,
    pub mode: u32,
    /// 2 and one for each entry (each is a directory).
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    /// A digest of the directory's entries: it moves when a reload adds,
    /// removes or replaces one, and only then.
    pub change: u64,
}

/// One READDIR entry of a pseudo directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PseudoDirEntry<'a> {
    /// Resume after this entry with it; stable across calls and reloads.
    pub cookie: u64,
    pub name: &'a [u8],
    pub reached: Reached,
    /// The entry's fileid in the pseudo file system: a pseudo node's own,
    /// an export root's mounted_on_fileid.
    pub fileid: u64,
}

/// A page of READDIR entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PseudoReaddir<'a> {
    pub entries: Vec<PseudoDirEntry<'a>>,
    /// No entry follows the last one.
    pub eof: bool,
}

/// Where LOOKUPP from an export's root leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportParent {
    /// The export is the pseudo root (its path is "/"): it has no parent.
    IsRoot,
    /// The pseudo directory it was crossed into from; `mounted_on_fileid`
    /// is the fileid of its mount point there.
    Pseudo { dir: PseudoNodeId, mounted_on_fileid: u64 },
    /// Nested: the directory `dir` (a path from the root of export
    /// `outer`, e.g. "/b" for `/srv/b/c` inside `/srv`) holds its mount
    /// point.
    InExport { outer: u32, dir: Vec<u8> },
}

/// An admitted export inside another admitted export: reached through
/// the directory `below` of export `outer` (the nearest enclosing one),
/// e.g. `/srv/b/c` is `outer` `/srv`'s "/b/c".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NestedExport {
    pub export_id: u32,
    pub outer: u32,
    pub below: Vec<u8>,
}

/// What a pseudo directory names.
#[derive(Debug, Clone)]
struct Child {
    name: Vec<u8>,
    cookie: u64,
    /// A pseudo node's fileid, or an export's mounted_on_fileid.
    fileid: u64,
    target: ChildTarget,
}

#[derive(Debug, Clone, Copy)]
enum ChildTarget {
    Node(usize),
    Export { id: u32, fsid: u64 },
}

#[derive(Debug, Clone)]
struct PseudoNode {
    path: Vec<u8>,
    fileid: u64,
    parent: Option<usize>,
    /// In cookie order.
    children: Vec<Child>,
    change: u64,
    /// The flavors of the exports below, for this client: NFSv4 calls on
    /// the directory must come with one of them (mountd gives knfsd's
    /// pseudo exports the same union).
    sec: Option<SecFlavors>,
}

/// The pseudo file system as one client sees it, built from the exports
/// served now ([`PseudoFs::build`]).
pub struct PseudoFs {
    /// The snapshot it was built from ([`PseudoFs::is_current`]).
    exports: Arc<[Arc<ServedExport>]>,
    key: PseudoKey,
    fsid: u64,
    root: Reached,
    /// The root first, if there is a pseudo root.
    nodes: Vec<PseudoNode>,
    by_fileid: BTreeMap<u64, usize>,
    /// Exports crossed into from a pseudo directory: the directory's index
    /// and the mount point's fileid.
    crossed: BTreeMap<u32, (usize, u64)>,
    nested: Vec<NestedExport>,
    /// The export of "/", when the client is admitted to it.
    root_export: Option<u32>,
}

/// An export the client is admitted to, with its path's components.
struct Placed<'a> {
    components: Vec<&'a [u8]>,
    id: u32,
    fsid: u64,
    sec: SecFlavors,
}

impl PseudoFs {
    /// The pseudo file system of the client at `peer` calling with
    /// `flavor` (its address picks the client list entry, its port and
    /// flavor decide `secure`) over the exports `table` serves now.
    pub fn build<S: Store>(table: &ExportTable<S>, peer: SocketAddr, flavor: SecFlavor, key: &PseudoKey) -> PseudoFs {
        let exports = table.exports();
        let admitted = exports.iter().filter_map(|s| Some((s, table.client_options(s, peer, flavor).ok()?)));
        let mut placed: Vec<Placed<'_>> = admitted
            .filter_map(|(s, options)| {
                let path = s.export.path.as_os_str().as_bytes();
                let Some(components) = components(path) else {
                    tracing::warn!(
                        export = s.export.id,
                        path = %String::from_utf8_lossy(path),
                        "export path not absolute, not normalised or too long: left out of the NFSv4 pseudo file system"
                    );
                    return None;
                };
                Some(Placed { components, id: s.export.id, fsid: s.export.fsid, sec: options.sec })
            })
            .collect();
        // Every export after the exports enclosing it.
        placed.sort_by(|a, b| a.components.cmp(&b.components));
        placed.dedup_by(|later, kept| {
            let same = later.components == kept.components;
            if same {
                tracing::warn!(export = later.id, other = kept.id, "two exports of one path: the first is placed");
            }
            same
        });

        let mut fs = PseudoFs {
            fsid: pseudo_fsid(exports.iter().map(|s| s.export.fsid)),
            exports: exports.clone(),
            key: key.clone(),
            root: Reached::Pseudo(PseudoNodeId(0)),
            nodes: Vec::new(),
            by_fileid: BTreeMap::new(),
            crossed: BTreeMap::new(),
            nested: Vec::new(),
            root_export: None,
        };
        let mut outermost: Vec<&Placed<'_>> = Vec::new();
        for (i, p) in placed.iter().enumerate() {
            let enclosing = placed[..i]
                .iter()
                .filter(|q| p.components.starts_with(&q.components))
                .max_by_key(|q| q.components.len());
            match enclosing {
                Some(outer) => fs.nested.push(NestedExport {
                    export_id: p.id,
                    outer: outer.id,
                    below: join(&p.components[outer.components.len()..]),
                }),
                None => outermost.push(p),
            }
        }
        match outermost.first() {
            Some(p) if p.components.is_empty() => {
                fs.root = Reached::ExportRoot(p.id);
                fs.root_export = Some(p.id);
            }
            _ => fs.grow(&outermost),
        }
        fs
    }

    /// Makes the pseudo directories above `outermost` (no export of "/"
    /// among them), gives every place a fileid and every entry a cookie.
    fn grow(&mut self, outermost: &[&Placed<'_>]) {
        let mut index: BTreeMap<Vec<&[u8]>, usize> = BTreeMap::new();
        self.nodes.push(PseudoNode {
            path: b"/".to_vec(),
            fileid: 0,
            parent: None,
            children: Vec::new(),
            change: 0,
            sec: None,
        });
        index.insert(Vec::new(), 0);
        for p in outermost {
            let (name, above) = p.components.split_last().expect("not the export of \"/\"");
            let mut dir = 0;
            self.nodes[0].add_sec(&p.sec);
            for depth in 1..=above.len() {
                dir = match index.get(&above[..depth]) {
                    Some(&i) => i,
                    None => {
                        let i = self.nodes.len();
                        let path = join(&above[..depth]);
                        self.nodes.push(PseudoNode {
                            path,
                            fileid: 0,
                            parent: Some(dir),
                            children: Vec::new(),
                            change: 0,
                            sec: None,
                        });
                        self.nodes[dir].children.push(child(above[depth - 1], ChildTarget::Node(i)));
                        index.insert(above[..depth].to_vec(), i);
                        i
                    }
                };
                self.nodes[dir].add_sec(&p.sec);
            }
            self.nodes[dir].children.push(child(name, ChildTarget::Export { id: p.id, fsid: p.fsid }));
        }
        self.number();
    }

    /// Fileids from paths and cookies from names, each unique where it
    /// must be (a collision of the hashes moves the later one on, in path
    /// order), then each directory's change attribute.
    fn number(&mut self) {
        let mut places: Vec<(Vec<u8>, usize, Option<usize>)> = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            places.push((node.path.clone(), i, None));
            for (c, entry) in node.children.iter().enumerate() {
                if let ChildTarget::Export { .. } = entry.target {
                    places.push((child_path(&node.path, &entry.name), i, Some(c)));
                }
            }
        }
        places.sort();
        let mut fileids = BTreeSet::new();
        for (path, i, c) in places {
            let fileid = claim(&mut fileids, self.key.hash(b"keel pseudo fileid", &[&path]), 1, u64::MAX);
            match c {
                None => self.nodes[i].fileid = fileid,
                Some(c) => self.nodes[i].children[c].fileid = fileid,
            }
        }
        self.by_fileid = self.nodes.iter().enumerate().map(|(i, node)| (node.fileid, i)).collect();
        self.root = Reached::Pseudo(PseudoNodeId(self.nodes[0].fileid));
        for i in 0..self.nodes.len() {
            let mut children = std::mem::take(&mut self.nodes[i].children);
            children.sort_by(|a, b| a.name.cmp(&b.name));
            let mut cookies = BTreeSet::new();
            for entry in &mut children {
                if let ChildTarget::Node(n) = entry.target {
                    entry.fileid = self.nodes[n].fileid;
                }
                let path = child_path(&self.nodes[i].path, &entry.name);
                let hash = self.key.hash(b"keel pseudo cookie", &[&path]) >> 1;
                entry.cookie = claim(&mut cookies, hash, COOKIE_FIRST, COOKIE_LAST);
            }
            children.sort_by_key(|entry| entry.cookie);
            self.nodes[i].change = self.digest(&children);
            self.nodes[i].children = children;
        }
        for node in 0..self.nodes.len() {
            for entry in &self.nodes[node].children {
                if let ChildTarget::Export { id, .. } = entry.target {
                    self.crossed.insert(id, (node, entry.fileid));
                }
            }
        }
    }

    /// The change attribute of a directory with these entries.
    fn digest(&self, children: &[Child]) -> u64 {
        let mut parts: Vec<Vec<u8>> = Vec::with_capacity(children.len() * 2);
        for entry in children {
            parts.push(entry.name.clone());
            let target = match entry.target {
                ChildTarget::Node(_) => [&[0u8][..], &entry.fileid.to_be_bytes()].concat(),
                ChildTarget::Export { id, fsid } => [&[1u8][..], &id.to_be_bytes(), &fsid.to_be_bytes()].concat(),
            };
            parts.push(target);
        }
        let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        self.key.hash(b"keel pseudo change", &parts)
    }

    /// Whether the tree was built from the exports `table` serves now:
    /// after a reload it is to be built again.
    pub fn is_current<S: Store>(&self, table: &ExportTable<S>) -> bool {
        Arc::ptr_eq(&self.exports, &table.exports())
    }

    /// Where PUTROOTFH leads: the pseudo root, or the export of "/" when
    /// the client is admitted to it. A client admitted to no export gets
    /// an empty pseudo root.
    pub fn root(&self) -> Reached {
        self.root
    }

    /// The pseudo file system's fsid, distinct from every export's.
    pub fn fsid(&self) -> u64 {
        self.fsid
    }

    /// The handle of a pseudo node (at most [`PSEUDO_FH_BYTES`]).
    pub fn handle(&self, node: PseudoNodeId) -> Bytes {
        let mut b = BytesMut::with_capacity(PSEUDO_FH_BYTES);
        b.put_u8(PSEUDO_FH_MAGIC);
        b.put_u8(PSEUDO_FH_VERSION);
        b.put_u64(node.0);
        let mac = self.mac(&b);
        b.put_slice(&mac);
        b.freeze()
    }

    fn mac(&self, body: &[u8]) -> [u8; PSEUDO_FH_MAC_BYTES] {
        self.key.hash(b"keel pseudo handle", &[body]).to_be_bytes()
    }

    /// The pseudo node `fh` names in this client's tree. `NotPseudo` for
    /// bytes of another shape (a store's handle), `BadHandle` for one this
    /// server did not issue, `Stale` for a node the tree does not hold.
    pub fn node_from_handle(&self, fh: &[u8]) -> Result<PseudoNodeId, PseudoError> {
        if fh.len() != PSEUDO_FH_BYTES || fh[0] != PSEUDO_FH_MAGIC {
            return Err(PseudoError::NotPseudo);
        }
        let (body, mac) = fh.split_at(PSEUDO_FH_BODY_BYTES);
        // Compared without an early exit.
        let differs = mac.iter().zip(self.mac(body)).fold(0, |acc, (a, b)| acc | (a ^ b));
        if differs != 0 || body[1] != PSEUDO_FH_VERSION {
            return Err(PseudoError::BadHandle);
        }
        let node = PseudoNodeId(u64::from_be_bytes(body[2..].try_into().expect("8 bytes")));
        self.node(node)?;
        Ok(node)
    }

    fn index(&self, node: PseudoNodeId) -> Result<usize, PseudoError> {
        self.by_fileid.get(&node.0).copied().ok_or(PseudoError::Stale)
    }

    fn node(&self, node: PseudoNodeId) -> Result<&PseudoNode, PseudoError> {
        Ok(&self.nodes[self.index(node)?])
    }

    fn id(&self, index: usize) -> PseudoNodeId {
        PseudoNodeId(self.nodes[index].fileid)
    }

    /// `name` in the pseudo directory `dir`: another pseudo directory or
    /// the root of an export mounted there.
    pub fn lookup(&self, dir: PseudoNodeId, name: &[u8]) -> Result<Reached, PseudoError> {
        let node = self.node(dir)?;
        let entry = node.children.iter().find(|c| c.name == name).ok_or(PseudoError::NoEntry)?;
        Ok(self.reached(entry))
    }

    fn reached(&self, entry: &Child) -> Reached {
        match entry.target {
            ChildTarget::Node(i) => Reached::Pseudo(self.id(i)),
            ChildTarget::Export { id, .. } => Reached::ExportRoot(id),
        }
    }

    /// The parent of a pseudo directory; `NoEntry` for the root.
    pub fn lookupp(&self, node: PseudoNodeId) -> Result<PseudoNodeId, PseudoError> {
        let parent = self.node(node)?.parent.ok_or(PseudoError::NoEntry)?;
        Ok(self.id(parent))
    }

    /// Where LOOKUPP from the root of export `export_id` leads; `None` for
    /// an export this client does not see.
    pub fn parent_of_export(&self, export_id: u32) -> Option<ExportParent> {
        if self.root_export == Some(export_id) {
            return Some(ExportParent::IsRoot);
        }
        if let Some(&(dir, mounted_on_fileid)) = self.crossed.get(&export_id) {
            return Some(ExportParent::Pseudo { dir: self.id(dir), mounted_on_fileid });
        }
        let nested = self.nested.iter().find(|n| n.export_id == export_id)?;
        let dir = match nested.below.iter().rposition(|b| *b == b'/') {
            Some(0) | None => b"/".to_vec(),
            Some(slash) => nested.below[..slash].to_vec(),
        };
        Some(ExportParent::InExport { outer: nested.outer, dir })
    }

    /// The admitted exports inside other admitted exports, which the
    /// handler crosses into from the outer export's directories.
    pub fn nested_exports(&self) -> &[NestedExport] {
        &self.nested
    }

    /// Up to `max_entries` entries of `dir` after `cookie` (0: from the
    /// start), in a stable order. A cookie of an entry a reload removed
    /// still resumes after where it stood.
    pub fn readdir(
        &self,
        dir: PseudoNodeId,
        cookie: u64,
        max_entries: usize,
    ) -> Result<PseudoReaddir<'_>, PseudoError> {
        let node = self.node(dir)?;
        let start = node.children.partition_point(|c| c.cookie <= cookie);
        let page = &node.children[start..];
        let entries: Vec<_> = page
            .iter()
            .take(max_entries)
            .map(|c| PseudoDirEntry { cookie: c.cookie, name: &c.name, reached: self.reached(c), fileid: c.fileid })
            .collect();
        Ok(PseudoReaddir { eof: entries.len() == page.len(), entries })
    }

    /// A pseudo directory's attributes.
    pub fn attrs(&self, node: PseudoNodeId) -> Result<PseudoAttrs, PseudoError> {
        let n = self.node(node)?;
        Ok(PseudoAttrs {
            fileid: n.fileid,
            fsid: self.fsid,
            mode: PSEUDO_MODE,
            nlink: u32::try_from(n.children.len()).unwrap_or(u32::MAX).saturating_add(2),
            uid: 0,
            gid: 0,
            change: n.change,
        })
    }

    /// The flavors a pseudo directory accepts, most preferred first: those
    /// of the exports it leads to (every flavor when it leads to none:
    /// there is nothing to guard).
    pub fn sec(&self, node: PseudoNodeId) -> Result<SecFlavors, PseudoError> {
        let all = || SecFlavors::new(&SecFlavor::ALL).expect("every flavor once");
        Ok(self.node(node)?.sec.unwrap_or_else(all))
    }

    /// A pseudo directory's path ("/srv").
    pub fn path(&self, node: PseudoNodeId) -> Result<&[u8], PseudoError> {
        Ok(&self.node(node)?.path)
    }
}

impl PseudoNode {
    fn add_sec(&mut self, sec: &SecFlavors) {
        self.sec = Some(match &self.sec {
            Some(have) => have.union(sec),
            None => *sec,
        });
    }
}

fn child(name: &[u8], target: ChildTarget) -> Child {
    Child { name: name.to_vec(), cookie: 0, fileid: 0, target }
}

/// The components of an export's path, `None` unless it is absolute and
/// normalised (no empty, "." or ".." component) within the bounds.
fn components(path: &[u8]) -> Option<Vec<&[u8]>> {
    if path.len() > PSEUDO_PATH_BYTES_MAX || path.first() != Some(&b'/') {
        return None;
    }
    if path == b"/" {
        return Some(Vec::new());
    }
    let components: Vec<&[u8]> = path[1..].split(|b| *b == b'/').take(PSEUDO_DEPTH_MAX + 1).collect();
    let fine = |c: &&[u8]| {
        !c.is_empty() && *c != b"." && *c != b".." && c.len() <= PSEUDO_COMPONENT_BYTES_MAX && !c.contains(&0)
    };
    (components.len() <= PSEUDO_DEPTH_MAX && components.iter().all(fine)).then_some(components)
}

/// "/a/b" from ["a", "b"]; "/" from none.
fn join(components: &[&[u8]]) -> Vec<u8> {
    if components.is_empty() {
        return b"/".to_vec();
    }
    components.iter().flat_map(|c| [&b"/"[..], c]).flatten().copied().collect()
}

fn child_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let dir = if dir == b"/" { &b""[..] } else { dir };
    [dir, b"/", name].concat()
}

/// `wanted` if it is free in `taken`, else the next free value after it
/// in `lo..=hi` (wrapping round), claimed. `lo..=hi` is far larger than
/// any tree, so the walk ends within `taken.len()` steps.
fn claim(taken: &mut BTreeSet<u64>, wanted: u64, lo: u64, hi: u64) -> u64 {
    let mut v = wanted.clamp(lo, hi);
    for _ in 0..taken.len() {
        if !taken.contains(&v) {
            break;
        }
        v = if v == hi { lo } else { v + 1 };
    }
    taken.insert(v);
    v
}

/// The pseudo file system's fsid: [`PSEUDO_FSID_PREFERRED`], or the next
/// lower value no export has.
fn pseudo_fsid(export_fsids: impl Iterator<Item = u64>) -> u64 {
    let taken: BTreeSet<u64> = export_fsids.collect();
    let mut fsid = PSEUDO_FSID_PREFERRED;
    for _ in 0..taken.len() {
        if !taken.contains(&fsid) {
            break;
        }
        fsid -= 1;
    }
    fsid
}

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use keel_store::Object as _;
use keel_store::sim::SimStore;

use super::*;
use crate::AdmitError;
use crate::policy::{ClientOptions, ClientRule, HostMatch, SecFlavor};

fn key() -> PseudoKey {
    PseudoKey::from_bytes([7; 16])
}

fn net(s: &str, prefix_len: u8) -> HostMatch {
    HostMatch::Net { addr: s.parse().unwrap(), prefix_len }
}

fn to(host: HostMatch) -> Vec<ClientRule> {
    vec![ClientRule { host, options: ClientOptions::default() }]
}

fn insecure_to(host: HostMatch) -> Vec<ClientRule> {
    vec![ClientRule { host, options: ClientOptions { secure: false, ..Default::default() } }]
}

fn everyone() -> Vec<ClientRule> {
    to(HostMatch::Any)
}

/// The exports `(id, path, client list)` of a simulated store.
fn table(exports: &[(u32, &str, Vec<ClientRule>)]) -> ExportTable<SimStore> {
    let paths: Vec<(u32, &str)> = exports.iter().map(|(id, path, _)| (*id, *path)).collect();
    let rules = exports.iter().map(|(id, _, rules)| (*id, rules.clone())).collect();
    ExportTable::new(Arc::new(SimStore::with_exports(1, &paths)), rules)
}

fn peer(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn build(table: &ExportTable<SimStore>, client: &str) -> PseudoFs {
    PseudoFs::build(table, peer(client), SecFlavor::Sys, &key())
}

fn node(reached: Reached) -> PseudoNodeId {
    match reached {
        Reached::Pseudo(node) => node,
        other => panic!("{other:?} is not a pseudo directory"),
    }
}

/// Where `path` ("/srv/b") leads from the root.
fn walk(fs: &PseudoFs, path: &str) -> Result<Reached, PseudoError> {
    let mut at = fs.root();
    for name in path.split('/').filter(|c| !c.is_empty()) {
        at = fs.lookup(node(at), name.as_bytes())?;
    }
    Ok(at)
}

/// Everything the client sees, by READDIR: "/srv" for a pseudo
/// directory, "/srv/a=1" for export 1 mounted there, sorted.
fn tree(fs: &PseudoFs) -> Vec<String> {
    let root = match fs.root() {
        Reached::Pseudo(root) => root,
        Reached::ExportRoot(id) => return vec![format!("/={id}")],
    };
    let mut seen = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        let base = String::from_utf8(fs.path(dir).unwrap().to_vec()).unwrap();
        for entry in fs.readdir(dir, 0, usize::MAX).unwrap().entries {
            let path = format!("{}/{}", base.trim_end_matches('/'), String::from_utf8_lossy(entry.name));
            match entry.reached {
                Reached::Pseudo(n) => {
                    assert_eq!(fs.path(n).unwrap(), path.as_bytes());
                    assert_eq!(fs.lookupp(n), Ok(dir));
                    dirs.push(n);
                    seen.push(path);
                }
                Reached::ExportRoot(id) => seen.push(format!("{path}={id}")),
            }
        }
    }
    seen.sort();
    seen
}

/// The exports the client can reach: in the pseudo tree, as the root, or
/// nested in another.
fn reachable(fs: &PseudoFs) -> BTreeSet<u32> {
    let in_tree = tree(fs).into_iter().filter_map(|p| p.split_once('=').map(|(_, id)| id.parse().unwrap()));
    in_tree.chain(fs.nested_exports().iter().map(|n| n.export_id)).collect()
}

/// The client reaches exactly the exports MNT would mount for it.
fn assert_as_mnt_admits(table: &ExportTable<SimStore>, client: &str) {
    let fs = build(table, client);
    let mnt: BTreeSet<u32> = table
        .exports()
        .iter()
        .filter(|s| table.client_options(s, peer(client), SecFlavor::Sys).is_ok())
        .map(|s| s.export.id)
        .collect();
    assert_eq!(reachable(&fs), mnt, "{client}");
}

#[test]
fn a_client_sees_only_the_branches_of_the_exports_that_admit_it() {
    let t = table(&[
        (1, "/srv/a", everyone()),
        (2, "/srv/b", to(net("10.2.0.0", 16))),
        (3, "/private/p", to(net("10.2.0.0", 16))),
        (4, "/home/y/z", everyone()),
    ]);
    let outsider = build(&t, "10.1.0.5:700");
    assert_eq!(tree(&outsider), ["/home", "/home/y", "/home/y/z=4", "/srv", "/srv/a=1"]);
    assert_eq!(walk(&outsider, "/srv/b"), Err(PseudoError::NoEntry));
    assert_eq!(walk(&outsider, "/private"), Err(PseudoError::NoEntry));
    let insider = build(&t, "10.2.0.5:700");
    assert_eq!(
        tree(&insider),
        ["/home", "/home/y", "/home/y/z=4", "/private", "/private/p=3", "/srv", "/srv/a=1", "/srv/b=2"]
    );
    assert_eq!(walk(&insider, "/srv/b"), Ok(Reached::ExportRoot(2)));

    // One path, one handle for every client; a node shown to another
    // client only is stale here.
    let private = insider.handle(node(walk(&insider, "/private").unwrap()));
    assert_eq!(outsider.node_from_handle(&private), Err(PseudoError::Stale));
    let srv = insider.handle(node(walk(&insider, "/srv").unwrap()));
    assert_eq!(outsider.node_from_handle(&srv), Ok(node(walk(&outsider, "/srv").unwrap())));
    for client in ["10.1.0.5:700", "10.2.0.5:700", "192.0.2.1:700"] {
        assert_as_mnt_admits(&t, client);
    }
}

#[test]
fn a_secure_export_is_hidden_from_an_unreserved_port_as_mnt_refuses_it() {
    let t = table(&[(1, "/srv/a", everyone()), (2, "/srv/b", insecure_to(HostMatch::Any))]);
    let unreserved = build(&t, "10.1.0.5:2000");
    assert_eq!(tree(&unreserved), ["/srv", "/srv/b=2"]);
    assert_eq!(walk(&unreserved, "/srv/a"), Err(PseudoError::NoEntry));
    assert_eq!(tree(&build(&t, "10.1.0.5:700")), ["/srv", "/srv/a=1", "/srv/b=2"]);
    let kerberos = PseudoFs::build(&t, peer("10.1.0.5:2000"), SecFlavor::Krb5i, &key());
    assert_eq!(tree(&kerberos), ["/srv", "/srv/a=1", "/srv/b=2"], "a Kerberos call needs no reserved port");
    assert!(matches!(
        t.client_options(&t.exports()[0], peer("10.1.0.5:2000"), SecFlavor::Sys),
        Err(AdmitError::InsecurePort { port: 2000 })
    ));
    for client in ["10.1.0.5:2000", "10.1.0.5:1023", "10.1.0.5:1024", "[::1]:700", "[::1]:40000"] {
        assert_as_mnt_admits(&t, client);
    }
}

#[test]
fn forged_and_foreign_handles_are_refused() {
    let t = table(&[(1, "/srv/a", everyone())]);
    let fs = build(&t, "10.1.0.5:700");
    let srv = node(walk(&fs, "/srv").unwrap());
    let fh = fs.handle(srv);
    assert!(fh.len() <= keel_store::HANDLE_BYTES_MAX);
    assert_eq!(fs.node_from_handle(&fh), Ok(srv));
    for i in 0..fh.len() {
        let mut forged = fh.to_vec();
        forged[i] ^= 0x10;
        let expected = if i == 0 { PseudoError::NotPseudo } else { PseudoError::BadHandle };
        assert_eq!(fs.node_from_handle(&forged), Err(expected), "byte {i} changed");
    }
    let other_key = PseudoFs::build(&t, peer("10.1.0.5:700"), SecFlavor::Sys, &PseudoKey::from_bytes([8; 16]));
    assert_eq!(other_key.node_from_handle(&fh), Err(PseudoError::BadHandle));
    assert_eq!(fs.node_from_handle(&fh[..fh.len() - 1]), Err(PseudoError::NotPseudo));
    assert_eq!(fs.node_from_handle(&[fh.as_ref(), &[0u8][..]].concat()), Err(PseudoError::NotPseudo));
    assert_eq!(fs.node_from_handle(b""), Err(PseudoError::NotPseudo));

    // Neither kind of handle passes for the other.
    let store_fh = t.store.lookup_path(1, b"/").unwrap().handle().clone();
    assert_eq!(fs.node_from_handle(&store_fh), Err(PseudoError::NotPseudo));
    assert!(matches!(
        t.admit_handle(peer("10.1.0.5:700"), &fh, SecFlavor::Sys, None, |_| {}),
        Err(AdmitError::BadHandle)
    ));
}

#[test]
fn a_reload_makes_gone_nodes_stale_and_keeps_the_others() {
    let exports =
        [(1, "/srv/a", everyone()), (2, "/srv/b", everyone()), (3, "/other/x", everyone()), (4, "/keep/k", everyone())];
    let t = table(&exports);
    let before = build(&t, "10.1.0.5:700");
    let path_node = |fs: &PseudoFs, path| node(walk(fs, path).unwrap());
    let [root, srv, other, keep] = ["/", "/srv", "/other", "/keep"].map(|p| path_node(&before, p));
    let [root_fh, srv_fh, other_fh, keep_fh] = [root, srv, other, keep].map(|n| before.handle(n));
    let change = |fs: &PseudoFs, n| fs.attrs(n).unwrap().change;
    assert!(before.is_current(&t));

    // Export 3 no longer admits anyone, export 2 is gone from the list.
    t.exports_changed(vec![(1, everyone()), (2, Vec::new()), (3, Vec::new()), (4, everyone())]);
    assert!(!before.is_current(&t), "a reload asks for a new tree");
    let after = build(&t, "10.1.0.5:700");
    assert!(after.is_current(&t));
    assert_eq!(tree(&after), ["/keep", "/keep/k=4", "/srv", "/srv/a=1"]);
    assert_eq!(after.node_from_handle(&other_fh), Err(PseudoError::Stale));
    assert_eq!(after.node_from_handle(&srv_fh), Ok(srv));
    assert_eq!(after.node_from_handle(&root_fh), Ok(root));
    assert_eq!(after.node_from_handle(&keep_fh), Ok(keep));
    assert_eq!(after.attrs(srv).unwrap().fileid, before.attrs(srv).unwrap().fileid);
    assert_ne!(change(&after, root), change(&before, root), "the root lost /other");
    assert_ne!(change(&after, srv), change(&before, srv), "/srv lost b");
    assert_eq!(change(&after, keep), change(&before, keep), "nothing changed in /keep");

    // Back as it was: the same handles and attributes again.
    t.exports_changed(exports.iter().map(|(id, _, rules)| (*id, rules.clone())).collect());
    let again = build(&t, "10.1.0.5:700");
    assert_eq!(again.node_from_handle(&other_fh), Ok(other));
    assert_eq!(again.attrs(root), before.attrs(root));
}

#[test]
fn an_export_of_the_root_is_the_pseudo_root() {
    let t = table(&[(1, "/", to(net("10.1.0.0", 16))), (2, "/srv/a", everyone()), (3, "/srv/b/c", everyone())]);
    let admitted = build(&t, "10.1.0.5:700");
    assert_eq!(admitted.root(), Reached::ExportRoot(1));
    assert_eq!(admitted.parent_of_export(1), Some(ExportParent::IsRoot));
    assert_eq!(
        admitted.nested_exports(),
        [
            NestedExport { export_id: 2, outer: 1, below: b"/srv/a".to_vec() },
            NestedExport { export_id: 3, outer: 1, below: b"/srv/b/c".to_vec() },
        ]
    );
    assert_eq!(admitted.parent_of_export(3), Some(ExportParent::InExport { outer: 1, dir: b"/srv/b".to_vec() }));

    // Without "/", the other exports hang from a pseudo root, whose
    // handles name nothing for a client admitted to "/".
    let other = build(&t, "10.2.0.5:700");
    assert_eq!(tree(&other), ["/srv", "/srv/a=2", "/srv/b", "/srv/b/c=3"]);
    assert_eq!(other.parent_of_export(1), None);
    let root_fh = other.handle(node(other.root()));
    assert_eq!(admitted.node_from_handle(&root_fh), Err(PseudoError::Stale));
    for client in ["10.1.0.5:700", "10.2.0.5:700"] {
        assert_as_mnt_admits(&t, client);
    }
}

#[test]
fn nested_exports_are_reached_through_the_nearest_outer_export() {
    let t = table(&[
        (1, "/srv", to(net("10.1.0.0", 16))),
        (2, "/srv/b/c", everyone()),
        (3, "/srv/b/d", to(net("192.0.2.0", 24))),
        (4, "/srv/b/c/e", everyone()),
        (5, "/data/x", everyone()),
    ]);
    let fs = build(&t, "10.1.0.5:700");
    assert_eq!(tree(&fs), ["/data", "/data/x=5", "/srv=1"]);
    assert_eq!(
        fs.nested_exports(),
        [
            NestedExport { export_id: 2, outer: 1, below: b"/b/c".to_vec() },
            NestedExport { export_id: 4, outer: 2, below: b"/e".to_vec() },
        ]
    );
    assert_eq!(fs.parent_of_export(2), Some(ExportParent::InExport { outer: 1, dir: b"/b".to_vec() }));
    assert_eq!(fs.parent_of_export(4), Some(ExportParent::InExport { outer: 2, dir: b"/".to_vec() }));
    assert_eq!(fs.parent_of_export(3), None, "not admitted: the client stays in /srv's own directory");
    let root = node(fs.root());
    let srv = fs.readdir(root, 0, usize::MAX).unwrap().entries.into_iter().find(|e| e.name == b"srv").unwrap();
    assert_eq!(fs.parent_of_export(1), Some(ExportParent::Pseudo { dir: root, mounted_on_fileid: srv.fileid }));

    // A client /srv does not admit sees the way to the inner export.
    let outsider = build(&t, "10.2.0.5:700");
    assert_eq!(tree(&outsider), ["/data", "/data/x=5", "/srv", "/srv/b", "/srv/b/c=2"]);
    assert_eq!(outsider.nested_exports(), [NestedExport { export_id: 4, outer: 2, below: b"/e".to_vec() }]);
    for client in ["10.1.0.5:700", "10.2.0.5:700", "192.0.2.9:700"] {
        assert_as_mnt_admits(&t, client);
    }
}

#[test]
fn readdir_cookies_are_stable_across_calls_and_reloads() {
    let paths: Vec<String> = (0..12).map(|i| format!("/e/n{i:02}")).collect();
    let exports: Vec<(u32, &str, Vec<ClientRule>)> =
        paths.iter().enumerate().map(|(i, p)| (i as u32 + 1, p.as_str(), everyone())).collect();
    let t = table(&exports);
    let fs = build(&t, "10.1.0.5:700");
    let e = node(walk(&fs, "/e").unwrap());
    let all = fs.readdir(e, 0, usize::MAX).unwrap();
    assert!(all.eof);
    assert_eq!(all.entries.len(), 12);
    let cookies: BTreeSet<u64> = all.entries.iter().map(|x| x.cookie).collect();
    assert_eq!(cookies.len(), 12, "one cookie per entry");
    assert!(cookies.iter().all(|c| (COOKIE_FIRST..=COOKIE_LAST).contains(c)));

    for _ in 0..2 {
        let (mut paged, mut cookie) = (Vec::new(), 0);
        for page in 0.. {
            let got = fs.readdir(e, cookie, 5).unwrap();
            assert_eq!(got.eof, page == 2, "page {page}");
            cookie = got.entries.last().map_or(cookie, |x| x.cookie);
            paged.extend(got.entries);
            if got.eof {
                break;
            }
        }
        assert_eq!(paged, all.entries);
    }
    assert_eq!(fs.readdir(e, 0, 0).unwrap(), PseudoReaddir { entries: Vec::new(), eof: false });
    let last = all.entries.last().unwrap().cookie;
    assert_eq!(fs.readdir(e, last, 5).unwrap(), PseudoReaddir { entries: Vec::new(), eof: true });

    // A reload takes one entry away: the others keep their cookies, and a
    // listing resumed at the gone one's cookie goes on after it.
    let gone = all.entries[4];
    let gone_id = std::str::from_utf8(&gone.name[1..]).unwrap().parse::<u32>().unwrap() + 1;
    t.exports_changed((1..=12).map(|id| (id, if id == gone_id { Vec::new() } else { everyone() })).collect());
    let fs2 = build(&t, "10.1.0.5:700");
    let rest = fs2.readdir(e, 0, usize::MAX).unwrap().entries;
    let mut expected: Vec<_> = all.entries.clone();
    expected.remove(4);
    assert_eq!(rest, expected);
    assert_eq!(fs2.readdir(e, gone.cookie, usize::MAX).unwrap().entries, expected[4..]);
}

#[test]
fn parents_and_attributes_of_pseudo_directories() {
    let t = table(&[(1, "/srv/a", everyone()), (2, "/srv/b/c", everyone())]);
    let fs = build(&t, "10.1.0.5:700");
    let root = node(fs.root());
    let [srv, b] = ["/srv", "/srv/b"].map(|p| node(walk(&fs, p).unwrap()));
    assert_eq!(fs.lookupp(b), Ok(srv));
    assert_eq!(fs.lookupp(srv), Ok(root));
    assert_eq!(fs.lookupp(root), Err(PseudoError::NoEntry));
    assert_eq!(fs.lookup(root, b"nope"), Err(PseudoError::NoEntry));
    assert_eq!(fs.lookup(srv, b""), Err(PseudoError::NoEntry));
    assert_eq!(fs.path(b), Ok(&b"/srv/b"[..]));

    let attrs = fs.attrs(srv).unwrap();
    assert_eq!((attrs.mode, attrs.uid, attrs.gid, attrs.nlink), (0o555, 0, 0, 4));
    assert_eq!(fs.attrs(root).unwrap().nlink, 3);
    assert_eq!(attrs.fsid, fs.fsid());
    assert!(t.exports().iter().all(|s| s.export.fsid != fs.fsid()));
    let a = fs.readdir(srv, 0, usize::MAX).unwrap().entries.into_iter().find(|e| e.name == b"a").unwrap();
    assert_eq!(fs.parent_of_export(1), Some(ExportParent::Pseudo { dir: srv, mounted_on_fileid: a.fileid }));
    let c = fs.readdir(b, 0, usize::MAX).unwrap().entries[0];
    let fileids: BTreeSet<u64> =
        [root, srv, b].iter().map(|n| fs.attrs(*n).unwrap().fileid).chain([a.fileid, c.fileid]).collect();
    assert_eq!(fileids.len(), 5, "every place has its own fileid");
    assert!(!fileids.contains(&0));
}

#[test]
fn the_pseudo_fsid_and_the_numbering_step_round_what_is_taken() {
    assert_eq!(pseudo_fsid([].into_iter()), u64::MAX);
    assert_eq!(pseudo_fsid([u64::MAX, 5, u64::MAX - 1].into_iter()), u64::MAX - 2);
    let mut taken = BTreeSet::from([5, 6]);
    assert_eq!(claim(&mut taken, 5, 3, 7), 7);
    assert_eq!(claim(&mut taken, 7, 3, 7), 3, "wraps round");
    assert_eq!(claim(&mut taken, 1, 3, 7), 4, "clamped into the range");
    assert_eq!(taken, BTreeSet::from([3, 4, 5, 6, 7]));
}

#[test]
fn malformed_or_oversized_paths_are_left_out() {
    let long_name = format!("/{}", "n".repeat(PSEUDO_COMPONENT_BYTES_MAX + 1));
    let deepest = "/d".repeat(PSEUDO_DEPTH_MAX);
    let too_deep = "/d".repeat(PSEUDO_DEPTH_MAX + 1);
    let too_long = format!("/{}", vec!["x".repeat(200); 6].join("/"));
    let t = table(&[
        (1, "srv/relative", everyone()),
        (2, "/a/../b", everyone()),
        (3, "/a/./b", everyone()),
        (4, "/a//b", everyone()),
        (5, "/x/", everyone()),
        (6, long_name.as_str(), everyone()),
        (7, too_deep.as_str(), everyone()),
        (8, too_long.as_str(), everyone()),
        (9, "", everyone()),
        (10, "/ok/fine", everyone()),
        (11, "/ok/fine", everyone()),
        (12, deepest.as_str(), everyone()),
    ]);
    let fs = build(&t, "10.1.0.5:700");
    let seen = tree(&fs);
    assert!(seen.contains(&"/ok/fine=10".to_string()));
    assert!(seen.contains(&format!("{deepest}=12")), "an export at the deepest depth has its place");
    assert_eq!(reachable(&fs), BTreeSet::from([10, 12]));
}

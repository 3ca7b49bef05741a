//! A tiny in-memory NFSv3 + MOUNT server, just enough for the helpers:
//! small transfer sizes and directory pages so that the helpers must split,
//! pipeline, handle short READs and WRITEs and follow cookies.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use keel_nfs3_proto::mount::{Dirpath, Fhandle3, Mountres3, Mountres3Ok, Mountstat3};
use keel_nfs3_proto::*;
use keel_rpc::msg::{AcceptStat, AuthSys, ReplyStat};
use keel_xdr::{Encode, Encoder};

use super::{Call, SUCCESS, ServerConn, listen};

pub const EXPORT: &str = "/export";
pub const ROOT: u64 = 1;
/// Largest READ reply and WRITE acknowledgement: smaller than the client's
/// default chunks, so short READs and WRITEs happen.
pub const RTMAX: u32 = 8192;
pub const WTMAX: u32 = 8192;
/// Entries per READDIR reply.
pub const DIR_PAGE: usize = 3;
pub const COOKIEVERF: [u8; 8] = *b"memfs-cv";
pub const WRITEVERF: [u8; 8] = *b"memfs-wv";

enum Kind {
    File(Vec<u8>),
    Dir(BTreeMap<Vec<u8>, u64>),
}

struct Node {
    kind: Kind,
    mode: u32,
    uid: u32,
}

struct Fs {
    nodes: HashMap<u64, Node>,
    next_id: u64,
}

pub fn fh(id: u64) -> NfsFh3 {
    NfsFh3::new(Bytes::copy_from_slice(&id.to_be_bytes()))
}

fn id_of(fh: &NfsFh3) -> Option<u64> {
    Some(u64::from_be_bytes(fh.as_bytes().try_into().ok()?))
}

/// Starts the server; returns its address.
pub async fn spawn() -> SocketAddr {
    let (listener, addr) = listen().await;
    let mut nodes = HashMap::new();
    nodes.insert(ROOT, Node { kind: Kind::Dir(BTreeMap::new()), mode: 0o755, uid: 0 });
    let fs = Arc::new(Mutex::new(Fs { nodes, next_id: ROOT + 1 }));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let fs = fs.clone();
            tokio::spawn(async move {
                let mut conn = ServerConn::new(stream);
                while let Some(call) = conn.read_call().await {
                    let xid = call.header.xid;
                    let (stat, body) = handle(&fs, call);
                    let body = super::reply_body(xid, stat, |enc| enc.raw(&body));
                    conn.write(&super::frame(&body, 1)).await;
                }
            });
        }
    });
    addr
}

fn encoded(v: &impl Encode) -> Bytes {
    let mut enc = Encoder::new();
    v.encode(&mut enc);
    enc.into_bytes()
}

fn handle(fs: &Mutex<Fs>, mut call: Call) -> (ReplyStat, Bytes) {
    let h = call.header.clone();
    let uid = AuthSys::decode(h.cred.body.clone()).map_or(65534, |a| a.uid);
    let mut fs = fs.lock().unwrap();
    let body = match (h.prog, h.proc_) {
        (MOUNT_PROGRAM, 0) | (NFS_PROGRAM, 0) => Bytes::new(),
        (MOUNT_PROGRAM, 1) => {
            let path: Dirpath = call.decode_args();
            if path.as_bytes() == EXPORT.as_bytes() {
                encoded(&Mountres3::Ok(Mountres3Ok {
                    fhandle: Fhandle3(fh(ROOT).data),
                    auth_flavors: vec![keel_rpc::msg::AUTH_SYS],
                }))
            } else {
                encoded(&Mountres3::Fail(Mountstat3::Noent))
            }
        }
        (NFS_PROGRAM, 1) => {
            let a: Getattr3Args = call.decode_args();
            encoded(&match fs.attrs(&a.object) {
                Some(obj_attributes) => Getattr3Res::Ok(Getattr3ResOk { obj_attributes }),
                None => Getattr3Res::Fail(Nfsstat3::Stale, ()),
            })
        }
        (NFS_PROGRAM, 3) => {
            let a: Lookup3Args = call.decode_args();
            encoded(&match fs.child(&a.what) {
                Ok(id) => Lookup3Res::Ok(Lookup3ResOk {
                    object: fh(id),
                    obj_attributes: fs.attrs(&fh(id)),
                    dir_attributes: fs.attrs(&a.what.dir),
                }),
                Err(s) => Lookup3Res::Fail(s, Lookup3ResFail { dir_attributes: fs.attrs(&a.what.dir) }),
            })
        }
        (NFS_PROGRAM, 8) => {
            let a: Create3Args = call.decode_args();
            let mode = match a.how {
                Createhow3::Unchecked(s) | Createhow3::Guarded(s) => s.mode.unwrap_or(0o644),
                Createhow3::Exclusive(_) => 0o644,
            };
            let result = match fs.child(&a.where_) {
                Ok(id) => Ok(id),
                Err(Nfsstat3::Noent) => fs.insert(&a.where_, Kind::File(Vec::new()), mode, uid),
                Err(s) => Err(s),
            };
            encoded(&match result {
                // Leave the handle out: the client must look it up.
                Ok(id) => Create3Res::Ok(Create3ResOk {
                    obj: None,
                    obj_attributes: fs.attrs(&fh(id)),
                    dir_wcc: WccData::default(),
                }),
                Err(s) => Create3Res::Fail(s, Create3ResFail::default()),
            })
        }
        (NFS_PROGRAM, 9) => {
            let a: Mkdir3Args = call.decode_args();
            let mode = a.attributes.mode.unwrap_or(0o755);
            let result = match fs.child(&a.where_) {
                Ok(_) => Err(Nfsstat3::Exist),
                Err(Nfsstat3::Noent) => fs.insert(&a.where_, Kind::Dir(BTreeMap::new()), mode, uid),
                Err(s) => Err(s),
            };
            encoded(&match result {
                Ok(id) => Mkdir3Res::Ok(Mkdir3ResOk {
                    obj: Some(fh(id)),
                    obj_attributes: fs.attrs(&fh(id)),
                    dir_wcc: WccData::default(),
                }),
                Err(s) => Mkdir3Res::Fail(s, Mkdir3ResFail::default()),
            })
        }
        (NFS_PROGRAM, 7) => {
            let a: Write3Args = call.decode_args();
            assert_eq!(a.count as usize, a.data.len());
            let n = a.data.len().min(WTMAX as usize);
            let result = match fs.file(&a.file) {
                Ok(data) => {
                    let end = a.offset as usize + n;
                    if data.len() < end {
                        data.resize(end, 0);
                    }
                    data[a.offset as usize..end].copy_from_slice(&a.data[..n]);
                    Ok(())
                }
                Err(s) => Err(s),
            };
            encoded(&match result {
                Ok(()) => Write3Res::Ok(Write3ResOk {
                    file_wcc: WccData::default(),
                    count: n as u32,
                    committed: StableHow::FileSync,
                    verf: WRITEVERF,
                }),
                Err(s) => Write3Res::Fail(s, Write3ResFail::default()),
            })
        }
        (NFS_PROGRAM, 6) => {
            let a: Read3Args = call.decode_args();
            let attrs = fs.attrs(&a.file);
            encoded(&match fs.file(&a.file) {
                Ok(data) => {
                    let start = (a.offset as usize).min(data.len());
                    let end = (start + a.count.min(RTMAX) as usize).min(data.len());
                    Read3Res::Ok(Read3ResOk {
                        file_attributes: attrs,
                        count: (end - start) as u32,
                        eof: end == data.len(),
                        data: Bytes::copy_from_slice(&data[start..end]),
                    })
                }
                Err(s) => Read3Res::Fail(s, Read3ResFail::default()),
            })
        }
        (NFS_PROGRAM, 16) => {
            let a: Readdir3Args = call.decode_args();
            encoded(&match fs.page(&a.dir, a.cookie, a.cookieverf) {
                Ok((entries, eof)) => Readdir3Res::Ok(Readdir3ResOk {
                    dir_attributes: None,
                    cookieverf: COOKIEVERF,
                    reply: Dirlist3 {
                        entries: entries
                            .into_iter()
                            .map(|(name, fileid, cookie)| Entry3 { fileid, name: name.into(), cookie })
                            .collect(),
                        eof,
                    },
                }),
                Err(s) => Readdir3Res::Fail(s, Readdir3ResFail::default()),
            })
        }
        (NFS_PROGRAM, 17) => {
            let a: Readdirplus3Args = call.decode_args();
            encoded(&match fs.page(&a.dir, a.cookie, a.cookieverf) {
                Ok((entries, eof)) => Readdirplus3Res::Ok(Readdirplus3ResOk {
                    dir_attributes: None,
                    cookieverf: COOKIEVERF,
                    reply: Dirlistplus3 {
                        entries: entries
                            .into_iter()
                            .map(|(name, fileid, cookie)| Entryplus3 {
                                fileid,
                                name: name.into(),
                                cookie,
                                name_attributes: fs.attrs(&fh(fileid)),
                                name_handle: Some(fh(fileid)),
                            })
                            .collect(),
                        eof,
                    },
                }),
                Err(s) => Readdirplus3Res::Fail(s, Readdirplus3ResFail::default()),
            })
        }
        (NFS_PROGRAM, 12) => {
            let a: Remove3Args = call.decode_args();
            encoded(&match fs.unlink(&a.object, false) {
                Ok(()) => Remove3Res::Ok(Remove3ResOk::default()),
                Err(s) => Remove3Res::Fail(s, Remove3ResFail::default()),
            })
        }
        (NFS_PROGRAM, 13) => {
            let a: Rmdir3Args = call.decode_args();
            encoded(&match fs.unlink(&a.object, true) {
                Ok(()) => Rmdir3Res::Ok(Rmdir3ResOk::default()),
                Err(s) => Rmdir3Res::Fail(s, Rmdir3ResFail::default()),
            })
        }
        (NFS_PROGRAM, 19) => {
            let a: Fsinfo3Args = call.decode_args();
            encoded(&Fsinfo3Res::Ok(Fsinfo3ResOk {
                obj_attributes: fs.attrs(&a.fsroot),
                rtmax: RTMAX,
                rtpref: RTMAX,
                rtmult: 4096,
                wtmax: WTMAX,
                wtpref: WTMAX,
                wtmult: 4096,
                dtpref: 4096,
                maxfilesize: u64::MAX,
                time_delta: Nfstime3 { seconds: 0, nseconds: 1 },
                properties: FSF3_HOMOGENEOUS,
            }))
        }
        _ => return (ReplyStat::Accepted(AcceptStat::ProcUnavail), Bytes::new()),
    };
    (SUCCESS, body)
}

impl Fs {
    fn attrs(&self, handle: &NfsFh3) -> Option<Fattr3> {
        let id = id_of(handle)?;
        let node = self.nodes.get(&id)?;
        let (ftype, size) = match &node.kind {
            Kind::File(d) => (Ftype3::Reg, d.len() as u64),
            Kind::Dir(e) => (Ftype3::Dir, e.len() as u64),
        };
        Some(Fattr3 {
            ftype,
            mode: node.mode,
            nlink: 1,
            uid: node.uid,
            size,
            used: size,
            fileid: id,
            ..Fattr3::default()
        })
    }

    fn dir(&mut self, handle: &NfsFh3) -> Result<&mut BTreeMap<Vec<u8>, u64>, Nfsstat3> {
        match self.nodes.get_mut(&id_of(handle).ok_or(Nfsstat3::Badhandle)?) {
            Some(Node { kind: Kind::Dir(entries), .. }) => Ok(entries),
            Some(_) => Err(Nfsstat3::Notdir),
            None => Err(Nfsstat3::Stale),
        }
    }

    fn file(&mut self, handle: &NfsFh3) -> Result<&mut Vec<u8>, Nfsstat3> {
        match self.nodes.get_mut(&id_of(handle).ok_or(Nfsstat3::Badhandle)?) {
            Some(Node { kind: Kind::File(data), .. }) => Ok(data),
            Some(_) => Err(Nfsstat3::Isdir),
            None => Err(Nfsstat3::Stale),
        }
    }

    fn child(&mut self, what: &Diropargs3) -> Result<u64, Nfsstat3> {
        self.dir(&what.dir)?.get(what.name.as_bytes()).copied().ok_or(Nfsstat3::Noent)
    }

    fn insert(&mut self, what: &Diropargs3, kind: Kind, mode: u32, uid: u32) -> Result<u64, Nfsstat3> {
        let id = self.next_id;
        self.dir(&what.dir)?.insert(what.name.as_bytes().to_vec(), id);
        self.next_id += 1;
        self.nodes.insert(id, Node { kind, mode, uid });
        Ok(id)
    }

    fn unlink(&mut self, what: &Diropargs3, want_dir: bool) -> Result<(), Nfsstat3> {
        let id = self.child(what)?;
        match (&self.nodes[&id].kind, want_dir) {
            (Kind::Dir(e), true) if !e.is_empty() => return Err(Nfsstat3::Notempty),
            (Kind::Dir(_), false) => return Err(Nfsstat3::Isdir),
            (Kind::File(_), true) => return Err(Nfsstat3::Notdir),
            _ => {}
        }
        self.dir(&what.dir)?.remove(what.name.as_bytes());
        self.nodes.remove(&id);
        Ok(())
    }

    /// One page of `.`, `..` and the entries, cookie = position + 1.
    #[allow(clippy::type_complexity)]
    fn page(&mut self, dir: &NfsFh3, cookie: u64, verf: [u8; 8]) -> Result<(Vec<(Vec<u8>, u64, u64)>, bool), Nfsstat3> {
        if cookie != 0 && verf != COOKIEVERF {
            return Err(Nfsstat3::BadCookie);
        }
        let id = id_of(dir).ok_or(Nfsstat3::Badhandle)?;
        let mut all = vec![(b".".to_vec(), id), (b"..".to_vec(), ROOT)];
        all.extend(self.dir(dir)?.iter().map(|(n, i)| (n.clone(), *i)));
        let start = cookie as usize;
        let page: Vec<_> = all
            .iter()
            .enumerate()
            .skip(start)
            .take(DIR_PAGE)
            .map(|(pos, (name, fileid))| (name.clone(), *fileid, pos as u64 + 1))
            .collect();
        let eof = start + page.len() >= all.len();
        Ok((page, eof))
    }
}

//! Portmapper version 2 (RFC 1833): so a client that asks port 111 finds
//! NFS and MOUNT. Keel serves it itself when port 111 is free, or registers
//! its ports with the rpcbind that holds it.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use keel_nfs3_proto::portmap::{Mapping, PmapProc, Pmaplist};
use keel_nfs3_proto::{IPPROTO_TCP, IPPROTO_UDP, PMAP_PORT, PMAP_PROGRAM, PMAP_V2};
use keel_rpc::CacheClass::Uncached;
use keel_rpc::ReplyBytesMax::Computed;
use keel_rpc::msg::{AcceptStat, CallHeader, OpaqueAuth, ReplyStat, decode_reply_header};
use keel_rpc::{
    AcceptError, Call, CallContext, Handled, Handlers, Procedure, ProcedureTable, ReplyBytesMax, RpcProgram,
    TabledProgram,
};
use keel_xdr::{Decode, Decoder, Encoder};

pub struct PortmapProgram {
    mappings: Mutex<Vec<Mapping>>,
}

impl PortmapProgram {
    pub fn new(mappings: Vec<Mapping>) -> Self {
        PortmapProgram { mappings: Mutex::new(mappings) }
    }

    fn set(&self, peer: SocketAddr, m: Mapping) -> bool {
        if !may_change_mappings(peer) {
            tracing::warn!(%peer, prog = m.prog, vers = m.vers, port = m.port, "portmap SET refused: not from a privileged local port");
            return false;
        }
        let mut all = self.mappings.lock().expect("portmap lock");
        if all.iter().any(|x| (x.prog, x.vers, x.prot) == (m.prog, m.vers, m.prot)) {
            return false;
        }
        all.push(m);
        true
    }

    fn unset(&self, peer: SocketAddr, m: Mapping) -> bool {
        if !may_change_mappings(peer) {
            tracing::warn!(%peer, prog = m.prog, vers = m.vers, "portmap UNSET refused: not from a privileged local port");
            return false;
        }
        let mut all = self.mappings.lock().expect("portmap lock");
        let before = all.len();
        all.retain(|x| (x.prog, x.vers) != (m.prog, m.vers));
        all.len() != before
    }

    fn getport(&self, m: Mapping) -> u32 {
        let all = self.mappings.lock().expect("portmap lock");
        all.iter().find(|x| (x.prog, x.vers, x.prot) == (m.prog, m.vers, m.prot)).map_or(0, |x| x.port)
    }
}

/// rpcbind's rule for SET and UNSET: only a local service running as root
/// may change the mappings, which is a call from a loopback address and a
/// source port below 1024. Anyone else could point NFS at a port of their
/// own and have the next `mount` talk to them.
fn may_change_mappings(peer: SocketAddr) -> bool {
    let ip = match peer.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    ip.is_loopback() && peer.port() < 1024
}

impl Handlers for PortmapProgram {
    type Call<'a> = Call<'a, Self>;
    /// Portmap's replies carry no status.
    type Status = Infallible;

    fn status_code(status: Infallible) -> u32 {
        match status {}
    }
}

/// One entry of DUMP's list: "more follows" and a mapping.
const DUMP_ENTRY_BYTES: usize = 4 + 16;

impl TabledProgram for PortmapProgram {
    const PROGRAM: u32 = PMAP_PROGRAM;
    const VERSION: u32 = PMAP_V2;

    /// The portmapper's procedures (RFC 1833, version 2). CALLIT is not
    /// served: forwarding calls for anyone is an amplification tool.
    #[rustfmt::skip]
    const PROCEDURES: ProcedureTable<Self> = ProcedureTable::new(&[
        Procedure::new(0, "NULL", Uncached, ReplyBytesMax::DEFAULT, |_, _, _| Ok(None)),
        Procedure::new(1, "SET", Uncached, ReplyBytesMax::DEFAULT, |c, args, reply| {
            reply.bool(c.program.set(c.ctx.peer, Mapping::decode(args)?));
            Ok(None)
        }),
        Procedure::new(2, "UNSET", Uncached, ReplyBytesMax::DEFAULT, |c, args, reply| {
            reply.bool(c.program.unset(c.ctx.peer, Mapping::decode(args)?));
            Ok(None)
        }),
        Procedure::new(3, "GETPORT", Uncached, ReplyBytesMax::DEFAULT, |c, args, reply| {
            reply.u32(c.program.getport(Mapping::decode(args)?));
            Ok(None)
        }),
        // The list as it is now (a local service may SET more).
        Procedure::new(4, "DUMP", Uncached, Computed(|p, _| Ok(p.dump_reply_bytes())), |c, _, reply| {
            reply.put(&Pmaplist(c.program.mappings.lock().expect("portmap lock").clone()));
            Ok(None)
        }),
        Procedure::new(5, "CALLIT", Uncached, ReplyBytesMax::DEFAULT, |_, _, _| {
            Err(AcceptError::ProcUnavail)
        }),
    ]);

    fn run(&self, ctx: &CallContext, args: &mut Decoder, reply: &mut Encoder) -> Handled<Self> {
        Self::PROCEDURES.call(&Call { program: self, ctx }, ctx, args, reply)
    }
}

impl PortmapProgram {
    /// DUMP's results now: the list and its end.
    fn dump_reply_bytes(&self) -> usize {
        self.mappings.lock().expect("portmap lock").len() * DUMP_ENTRY_BYTES + 4
    }
}

/// The mappings Keel advertises: each program's own versions
/// ([`RpcProgram::portmap_versions`]) on each transport (IPPROTO_TCP or
/// IPPROTO_UDP) and port it is served on.
pub fn mappings(served: &[(&dyn RpcProgram, u32, u16)]) -> Vec<Mapping> {
    let mut out = Vec::new();
    for (program, prot, port) in served {
        for vers in program.portmap_versions() {
            out.push(Mapping { prog: program.program(), vers, prot: *prot, port: u32::from(*port) });
        }
    }
    out
}

/// The portmapper's own entries, when Keel is the portmapper.
pub fn self_mappings() -> Vec<Mapping> {
    [IPPROTO_TCP, IPPROTO_UDP]
        .into_iter()
        .map(|prot| Mapping { prog: PMAP_PROGRAM, vers: PMAP_V2, prot, port: u32::from(PMAP_PORT) })
        .collect()
}

/// Registers (or with `set == false` unregisters) mappings with the
/// rpcbind on this host, over UDP from a reserved port.
pub fn register_with_rpcbind(mappings: &[Mapping], set: bool) -> std::io::Result<()> {
    let sock = bind_reserved_udp()?;
    sock.set_read_timeout(Some(Duration::from_secs(2)))?;
    sock.connect((Ipv4Addr::LOCALHOST, PMAP_PORT))?;
    let proc_ = if set { PmapProc::Set } else { PmapProc::Unset };
    for (i, m) in mappings.iter().enumerate() {
        // Clear a stale registration (say, from a killed instance) first.
        if set {
            call_rpcbind(&sock, 0x4b45_0000 + 2 * i as u32, PmapProc::Unset, m)?;
        }
        if !call_rpcbind(&sock, 0x4b45_0001 + 2 * i as u32, proc_, m)? && set {
            return Err(std::io::Error::other(format!(
                "rpcbind refused to register program {} version {} on port {}",
                m.prog, m.vers, m.port
            )));
        }
    }
    Ok(())
}

fn call_rpcbind(sock: &UdpSocket, xid: u32, proc_: PmapProc, m: &Mapping) -> std::io::Result<bool> {
    let mut enc = Encoder::new();
    CallHeader {
        xid,
        rpc_version: 2,
        prog: PMAP_PROGRAM,
        vers: PMAP_V2,
        proc_: proc_ as u32,
        cred: OpaqueAuth::default(),
        verf: OpaqueAuth::default(),
    }
    .encode(&mut enc);
    enc.put(m);
    sock.send(&enc.into_bytes())?;
    let mut buf = [0u8; 512];
    loop {
        let n = sock.recv(&mut buf)?;
        let mut dec = Decoder::new(Bytes::copy_from_slice(&buf[..n]));
        let (reply_xid, stat) = decode_reply_header(&mut dec).map_err(std::io::Error::other)?;
        if reply_xid != xid {
            continue;
        }
        if stat != ReplyStat::Accepted(AcceptStat::Success) {
            return Err(std::io::Error::other(format!("rpcbind answered {stat:?}")));
        }
        return dec.bool().map_err(std::io::Error::other);
    }
}

fn bind_reserved_udp() -> std::io::Result<UdpSocket> {
    let mut last = None;
    for port in (600..1024).rev() {
        match UdpSocket::bind((IpAddr::V4(Ipv4Addr::LOCALHOST), port)) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no reserved port free")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_privileged_local_ports_may_change_mappings() {
        for (peer, allowed) in [
            ("127.0.0.1:1023", true),
            ("127.0.0.1:600", true),
            ("127.1.2.3:111", true),
            ("[::1]:700", true),
            ("[::ffff:127.0.0.1]:700", true),
            ("127.0.0.1:1024", false),
            ("127.0.0.1:40000", false),
            ("[::1]:40000", false),
            ("192.0.2.1:600", false),
            ("[2001:db8::1]:600", false),
            ("[::ffff:192.0.2.1]:600", false),
        ] {
            assert_eq!(may_change_mappings(peer.parse().unwrap()), allowed, "{peer}");
        }
    }

    struct Prog(u32, u32, u32);

    impl RpcProgram for Prog {
        fn program(&self) -> u32 {
            self.0
        }
        fn versions(&self) -> (u32, u32) {
            (self.1, self.2)
        }
        fn call(&self, _: &CallContext, _: &mut Decoder, _: &mut Encoder) -> Result<(), AcceptError> {
            Ok(())
        }
    }

    #[test]
    fn each_program_is_registered_with_its_versions_on_its_transports() {
        let (nfs, nlm) = (Prog(100003, 3, 3), Prog(100021, 3, 4));
        let m = mappings(&[(&nfs, IPPROTO_TCP, 2049), (&nlm, IPPROTO_TCP, 2049), (&nlm, IPPROTO_UDP, 2049)]);
        let got: Vec<_> = m.iter().map(|m| (m.prog, m.vers, m.prot)).collect();
        assert_eq!(got, [(100003, 3, 6), (100021, 3, 6), (100021, 4, 6), (100021, 3, 17), (100021, 4, 17)],);
    }

    #[test]
    fn set_and_unset_from_an_unprivileged_port_change_nothing() {
        let nfs = mappings(&[(&Prog(100003, 3, 3), IPPROTO_TCP, 2049)]);
        let pm = PortmapProgram::new(nfs.clone());
        let evil = Mapping { port: 31337, ..nfs[0] };
        let high: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        assert!(!pm.unset(high, nfs[0]));
        assert!(!pm.set(high, evil));
        assert_eq!(pm.getport(nfs[0]), 2049);
        let low: SocketAddr = "127.0.0.1:700".parse().unwrap();
        assert!(pm.unset(low, nfs[0]));
        assert!(pm.set(low, evil));
        assert_eq!(pm.getport(nfs[0]), 31337);
    }

    #[test]
    fn every_portmap_procedure_has_its_entry_under_its_name() {
        let expected: Vec<(u32, &str)> = PmapProc::ALL.iter().map(|p| (*p as u32, p.name())).collect();
        assert_eq!(PortmapProgram::PROCEDURES.names(), expected);
        assert_eq!(expected.len(), 6);
        assert!(PortmapProgram::PROCEDURES.procedures().iter().all(|p| p.answers));
    }

    /// The transport reserves DUMP's bound before the call runs; a local
    /// service may have SET any number of mappings.
    #[test]
    fn dump_s_reply_fits_its_bound_however_many_mappings_there_are() {
        let pm = PortmapProgram::new(self_mappings());
        let local: SocketAddr = "127.0.0.1:700".parse().unwrap();
        for prog in 0..200 {
            assert!(pm.set(local, Mapping { prog: 400_000 + prog, vers: 1, prot: IPPROTO_TCP, port: 900 }));
        }
        let cred = keel_rpc::Credential::anonymous();
        let ctx = CallContext {
            xid: 1,
            vers: PMAP_V2,
            proc_: PmapProc::Dump as u32,
            cred: &cred,
            peer: local,
            local,
            connection: None,
            report: Default::default(),
        };
        let mut reply = Encoder::new();
        pm.call(&ctx, &mut Decoder::new(Bytes::new()), &mut reply).unwrap();
        let bound = pm.reply_bytes_max(PMAP_V2, PmapProc::Dump as u32, Bytes::new());
        assert!(reply.len() <= bound, "DUMP wrote {} bytes, bound {bound}", reply.len());
    }
}

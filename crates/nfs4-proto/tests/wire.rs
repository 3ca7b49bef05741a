//! Calls and replies written out by hand from RFC 5662's XDR, as a Linux
//! client sends them, decoded (and encoded back to the same bytes).

mod common;

use bytes::Bytes;
use common::*;
use keel_nfs4_proto::*;
use keel_xdr::{Decode, Decoder};

/// Decodes a whole COMPOUND and checks that encoding it gives the bytes
/// back.
fn call(bytes: Bytes) -> Compound4Args {
    let call: Compound4Args = decode(bytes.clone()).unwrap();
    assert_eq!(encode(&call), bytes, "encodes back to the same bytes");
    call
}

const SESSIONID: &str = "a1a2a3a4 a5a6a7a8 a9aaabac adaeafb0";

#[test]
fn exchange_id_as_linux_sends_it() {
    let bytes = hex("00000000                           # tag: empty
         00000001                           # minorversion 1
         00000001                           # one operation
         0000002a                           # OP_EXCHANGE_ID
         01020304 05060708                  # co_verifier
         00000017                           # co_ownerid: 23 bytes
         4c696e75 78204e46 5376342e 31206b65 656c2d74 657374 00  # 'Linux NFSv4.1 keel-test', pad
         00000103                           # SUPP_MOVED_REFER | SUPP_MOVED_MIGR | BIND_PRINC_STATEID
         00000001                           # SP4_MACH_CRED
         00000002 00000000 02001e00         # spo_must_enforce: 41-44, 57
         00000002 00204130 00982042         # spo_must_allow: CLOSE, COMMIT, ... LAYOUTRETURN
         00000001                           # eia_client_impl_id: one
         0000000a 6b65726e 656c2e6f 72670000  # nii_domain 'kernel.org', pad
         0000000a 4c696e75 7820362e 31320000  # nii_name 'Linux 6.12', pad
         00000000 00000000 00000000         # nii_date");
    let c = call(bytes);
    assert_eq!((c.tag.len(), c.minorversion, c.argarray.len()), (0, 1, 1));
    let NfsArgop4::ExchangeId(a) = &c.argarray[0] else { panic!("not EXCHANGE_ID: {:?}", c.argarray[0]) };
    assert_eq!(a.eia_clientowner.co_verifier, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(a.eia_clientowner.co_ownerid.as_bytes(), b"Linux NFSv4.1 keel-test");
    assert_eq!(
        a.eia_flags,
        EXCHGID4_FLAG_SUPP_MOVED_REFER | EXCHGID4_FLAG_SUPP_MOVED_MIGR | EXCHGID4_FLAG_BIND_PRINC_STATEID
    );
    let StateProtect4A::Sp4MachCred(ops) = &a.eia_state_protect else { panic!("not SP4_MACH_CRED") };
    let enforce: Vec<_> = ops.spo_must_enforce.iter().filter_map(OpNum::from_u32).collect();
    assert_eq!(
        enforce,
        [
            OpNum::BindConnToSession,
            OpNum::ExchangeId,
            OpNum::CreateSession,
            OpNum::DestroySession,
            OpNum::DestroyClientid
        ]
    );
    for op in [OpNum::Close, OpNum::Write, OpNum::Layoutreturn, OpNum::TestStateid] {
        assert!(ops.spo_must_allow.contains(op as u32), "{op}");
    }
    let id = a.eia_client_impl_id.as_ref().unwrap();
    assert_eq!((id.nii_domain.as_str(), id.nii_name.as_str()), (Some("kernel.org"), Some("Linux 6.12")));
    assert_eq!(id.nii_date, Nfstime4::default());
}

#[test]
fn create_session_as_linux_sends_it() {
    let bytes = hex("00000000 00000001 00000001
         0000002b                           # OP_CREATE_SESSION
         01234567 89abcdef                  # csa_clientid
         00000001                           # csa_sequence
         00000003                           # PERSIST | CONN_BACK_CHAN
         00000000 00100414 00100388 00001da0 00000008 00000040  # fore: pad, req, resp, cached, ops, reqs
         00000000                           # ca_rdma_ird: none
         00000000 00001000 00001000 00000000 00000002 00000010  # back channel
         00000000
         40000000                           # csa_cb_program
         00000002                           # two csa_sec_parms
         00000001                           # AUTH_SYS
         00000000                           #   stamp
         00000006 636c6965 6e740000         #   machinename 'client', pad
         00000000 00000000                  #   uid, gid
         00000001 0000000a                  #   gids: 10
         00000000                           # AUTH_NONE");
    let c = call(bytes);
    let NfsArgop4::CreateSession(a) = &c.argarray[0] else { panic!("not CREATE_SESSION") };
    assert_eq!((a.csa_clientid, a.csa_sequence), (0x0123_4567_89ab_cdef, 1));
    assert_eq!(a.csa_flags, CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_BACK_CHAN);
    let fore = &a.csa_fore_chan_attrs;
    assert_eq!(
        (fore.ca_maxrequestsize, fore.ca_maxresponsesize, fore.ca_maxresponsesize_cached),
        (1_049_620, 1_049_480, 7584)
    );
    assert_eq!((fore.ca_maxoperations, fore.ca_maxrequests, fore.ca_rdma_ird), (8, 64, None));
    assert_eq!((a.csa_back_chan_attrs.ca_maxoperations, a.csa_back_chan_attrs.ca_maxrequests), (2, 16));
    assert_eq!(a.csa_cb_program, NFS4_CALLBACK);
    let [CallbackSecParms4::AuthSys(sys), CallbackSecParms4::AuthNone] = a.csa_sec_parms.as_slice() else {
        panic!("AUTH_SYS then AUTH_NONE: {:?}", a.csa_sec_parms)
    };
    assert_eq!((sys.machinename.as_bytes(), sys.uid, sys.gid, sys.gids.as_slice()), (&b"client"[..], 0, 0, &[10][..]));
}

/// What Linux sends to find the root (`nfs4_proc_get_rootfh`): SEQUENCE,
/// PUTROOTFH, GETFH, GETATTR, read one operation at a time as the server
/// does.
#[test]
fn putrootfh_getattr_as_linux_sends_it() {
    let bytes = hex(&format!(
        "00000000 00000001 00000004
         00000035 {SESSIONID}               # OP_SEQUENCE, sa_sessionid
         00000001 00000000 00000000         # sequenceid 1, slot 0, highest slot 0
         00000000                           # sa_cachethis: false
         00000018                           # OP_PUTROOTFH
         0000000a                           # OP_GETFH
         00000009                           # OP_GETATTR
         00000003 0010011a 00b0a23a 00000000  # type change size fsid fileid | mode ... mounted_on_fileid"
    ));
    let c = call(bytes.clone());
    assert_eq!(c.argarray.len(), 4);

    let mut dec = Decoder::new(bytes);
    let head = Compound4ArgsHead::decode(&mut dec).unwrap();
    assert_eq!((head.minorversion, head.numops), (1, 4));
    let mut ops = CompoundOps::new(&head);
    let Some(Ok(NfsArgop4::Sequence(seq))) = ops.next_op(&mut dec) else { panic!("SEQUENCE first") };
    assert_eq!(seq.sa_sessionid, hex(SESSIONID).as_ref());
    assert_eq!((seq.sa_sequenceid, seq.sa_slotid, seq.sa_cachethis), (1, 0, false));
    assert_eq!(ops.next_op(&mut dec), Some(Ok(NfsArgop4::Putrootfh(()))));
    assert_eq!(ops.next_op(&mut dec), Some(Ok(NfsArgop4::Getfh(()))));
    let Some(Ok(NfsArgop4::Getattr(getattr))) = ops.next_op(&mut dec) else { panic!("GETATTR last") };
    let asked: Vec<u32> = getattr.attr_request.iter().collect();
    assert_eq!(
        asked,
        [
            FATTR4_TYPE,
            FATTR4_CHANGE,
            FATTR4_SIZE,
            FATTR4_FSID,
            FATTR4_FILEID,
            FATTR4_MODE,
            FATTR4_NUMLINKS,
            FATTR4_OWNER,
            FATTR4_OWNER_GROUP,
            FATTR4_RAWDEV,
            FATTR4_SPACE_USED,
            FATTR4_TIME_ACCESS,
            FATTR4_TIME_METADATA,
            FATTR4_TIME_MODIFY,
            FATTR4_MOUNTED_ON_FILEID,
        ]
    );
    assert_eq!(ops.next_op(&mut dec), None);
    dec.finish().unwrap();

    // Every attribute Linux asks for here is one Keel can answer.
    assert!(getattr.attr_request.difference(&Attrs4::known()).is_empty());
}

#[test]
fn open_claim_null_exclusive4_1() {
    let bytes = hex(&format!(
        "00000000 00000001 00000003
         00000035 {SESSIONID} 00000002 00000000 00000000 00000001  # SEQUENCE, cachethis
         00000016 00000008 01020304 05060708  # OP_PUTFH: the directory
         00000012                           # OP_OPEN
         00000000                           # seqid
         00000003 00000000                  # share_access BOTH, share_deny NONE
         01234567 89abcdef                  # owner.clientid
         00000018 6f70656e 2069643a         # owner: 24 bytes, 'open id:'
         00000000 00000001 00000000 00000002
         00000001                           # OPEN4_CREATE
         00000003                           # EXCLUSIVE4_1
         a1b2c3d4 e5f60718                  # cva_verf
         00000002 00000000 00000002         # cva_attrs: mode
         00000004 000001a4                  #   0644
         00000000                           # CLAIM_NULL
         00000007 6e657766 696c6500         # 'newfile', pad"
    ));
    let c = call(bytes);
    let NfsArgop4::Putfh(putfh) = &c.argarray[1] else { panic!("PUTFH") };
    assert_eq!(putfh.object.as_bytes(), &[1, 2, 3, 4, 5, 6, 7, 8]);
    let NfsArgop4::Open(open) = &c.argarray[2] else { panic!("OPEN") };
    assert_eq!((open.seqid, open.share_access, open.share_deny), (0, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_NONE));
    assert_eq!(open.owner.clientid, 0x0123_4567_89ab_cdef);
    assert_eq!(&open.owner.owner.as_bytes()[..8], b"open id:");
    let Openflag4::Open4Create(Createhow4::Exclusive4_1(both)) = &open.openhow else { panic!("EXCLUSIVE4_1") };
    assert_eq!(both.cva_verf, [0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18]);
    let attrs = Attrs4::from_fattr4(&both.cva_attrs, AttrUse::Set).unwrap();
    assert_eq!(attrs, Attrs4 { mode: Some(0o644), ..Default::default() });
    assert_eq!(open.claim, OpenClaim4::ClaimNull("newfile".into()));
    assert_eq!(open.claim.discriminant(), OpenClaimType4::ClaimNull as u32);
}

#[test]
fn open_claim_fh() {
    let bytes = hex("00000000 00000001 00000002
         00000016 00000004 cafef00d         # OP_PUTFH: the file
         00000012                           # OP_OPEN
         00000000 00000001 00000000         # seqid, share_access READ, share_deny NONE
         00000000 00000001                  # owner.clientid
         00000004 6f776e31                  # owner 'own1'
         00000000                           # OPEN4_NOCREATE
         00000004                           # CLAIM_FH");
    let c = call(bytes);
    let NfsArgop4::Open(open) = &c.argarray[1] else { panic!("OPEN") };
    assert_eq!(open.openhow, Openflag4::Open4Nocreate);
    assert_eq!(open.claim, OpenClaim4::ClaimFh);
    assert_eq!((open.owner.clientid, open.owner.owner.as_bytes()), (1, &b"own1"[..]));
}

/// A reply as a server sends it, decoded by a client: SEQUENCE, PUTROOTFH,
/// GETATTR with three attributes.
#[test]
fn reply_with_attributes() {
    let bytes = hex(&format!(
        "00000000                           # NFS4_OK
         00000000                           # tag
         00000003                           # three results
         00000035 00000000 {SESSIONID}      # SEQUENCE, NFS4_OK
         00000001 00000000 0000003f 0000003f 00000000  # seq, slot, highest, target, flags
         00000018 00000000                  # PUTROOTFH, NFS4_OK
         00000009 00000000                  # GETATTR, NFS4_OK
         00000001 00000112                  # attrmask: type, size, fsid
         0000001c                           # 28 bytes of values
         00000002                           #   NF4DIR
         00000000 00001000                  #   size 4096
         00000000 00000001 00000000 00000002  # fsid 1.2"
    ));
    let reply: Compound4Res = decode(bytes.clone()).unwrap();
    assert_eq!(encode(&reply), bytes);
    assert_eq!((reply.status, reply.resarray.len()), (Nfsstat4::Ok, 3));
    let NfsResop4::Sequence(Nfs4Result::Ok(seq)) = &reply.resarray[0] else { panic!("SEQUENCE") };
    assert_eq!((seq.sr_sequenceid, seq.sr_highest_slotid, seq.sr_target_highest_slotid), (1, 63, 63));
    let NfsResop4::Getattr(Nfs4Result::Ok(getattr)) = &reply.resarray[2] else { panic!("GETATTR") };
    let attrs = Attrs4::from_fattr4(&getattr.obj_attributes, AttrUse::Reply).unwrap();
    assert_eq!(
        attrs,
        Attrs4 {
            type_: Some(NfsFtype4::Nf4dir),
            size: Some(4096),
            fsid: Some(Fsid4 { major: 1, minor: 2 }),
            ..Default::default()
        }
    );
    // The server side writes the same attribute bytes from the same values.
    assert_eq!(attrs.to_fattr4(&Attrs4::known()), getattr.obj_attributes);
}

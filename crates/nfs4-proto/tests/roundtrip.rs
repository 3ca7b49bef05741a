//! Every operation's arguments and results, every arm of every union,
//! encode and decode back to the same value.

mod common;

use std::collections::BTreeSet;

use bytes::Bytes;
use common::*;
use keel_nfs4_proto::*;
use keel_xdr::{Decoder, Encoder, Segment, Spliced};

fn gss_handles() -> GssCbHandles4 {
    GssCbHandles4 {
        gcbp_service: RpcGssSvc::RpcGssSvcIntegrity,
        gcbp_handle_from_server: b"server-ctx".as_slice().into(),
        gcbp_handle_from_client: b"client-ctx-1".as_slice().into(),
    }
}

fn sec_parms() -> CallbackSecParmsList4 {
    vec![
        CallbackSecParms4::AuthNone,
        CallbackSecParms4::AuthSys(AuthsysParms {
            stamp: 7,
            machinename: "client.example.com".into(),
            uid: 1000,
            gid: 100,
            gids: vec![4, 24, 27].into(),
        }),
        CallbackSecParms4::RpcsecGss(gss_handles()),
    ]
    .into()
}

fn chan(maxops: u32, ird: Option<u32>) -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1_049_620,
        ca_maxresponsesize: 1_049_480,
        ca_maxresponsesize_cached: 7584,
        ca_maxoperations: maxops,
        ca_maxrequests: 64,
        ca_rdma_ird: ird,
    }
}

fn prot_ops() -> StateProtectOps4 {
    StateProtectOps4 {
        spo_must_enforce: Bitmap4::from_bits([OpNum::CreateSession as u32, OpNum::DestroySession as u32]),
        spo_must_allow: Bitmap4::from_bits([OpNum::Close as u32]),
    }
}

fn impl_id() -> NfsImplId4 {
    NfsImplId4 { nii_domain: "kernel.org".into(), nii_name: "Linux 6.12".into(), nii_date: time(0) }
}

fn netlocs() -> Vec<Netloc4> {
    vec![
        Netloc4::Nl4Name("server1".into()),
        Netloc4::Nl4Url("nfs://server2/export".into()),
        Netloc4::Nl4Netaddr(Netaddr4 { na_r_netid: "tcp".into(), na_r_addr: "192.0.2.1.8.1".into() }),
    ]
}

fn read_deleg() -> OpenReadDelegation4 {
    OpenReadDelegation4 {
        stateid: stateid(3),
        recall: false,
        permissions: Nfsace4 {
            type_: ACE4_ACCESS_ALLOWED_ACE_TYPE,
            flag: 0,
            access_mask: 0x1,
            who: "EVERYONE@".into(),
        },
    }
}

/// Every arm of `open_delegation4` and `open_none_delegation4`, and of
/// `nfs_space_limit4` inside.
fn delegations() -> Vec<OpenDelegation4> {
    let mut out = vec![
        OpenDelegation4::OpenDelegateNone,
        OpenDelegation4::OpenDelegateRead(read_deleg()),
        OpenDelegation4::OpenDelegateWrite(OpenWriteDelegation4 {
            stateid: stateid(4),
            recall: true,
            space_limit: NfsSpaceLimit4::NfsLimitSize(1 << 30),
            permissions: Nfsace4::default(),
        }),
        OpenDelegation4::OpenDelegateWrite(OpenWriteDelegation4 {
            stateid: stateid(5),
            recall: false,
            space_limit: NfsSpaceLimit4::NfsLimitBlocks(NfsModifiedLimit4 { num_blocks: 10, bytes_per_block: 4096 }),
            permissions: Nfsace4::default(),
        }),
    ];
    for why in [
        OpenNoneDelegation4::Wnd4NotWanted,
        OpenNoneDelegation4::Wnd4Contention(true),
        OpenNoneDelegation4::Wnd4Resource(false),
        OpenNoneDelegation4::Wnd4NotSuppFtype,
        OpenNoneDelegation4::Wnd4WriteDelegNotSuppFtype,
        OpenNoneDelegation4::Wnd4NotSuppUpgrade,
        OpenNoneDelegation4::Wnd4NotSuppDowngrade,
        OpenNoneDelegation4::Wnd4Cancelled,
        OpenNoneDelegation4::Wnd4IsDir,
    ] {
        out.push(OpenDelegation4::OpenDelegateNoneExt(why));
    }
    out
}

fn open_args(openhow: Openflag4, claim: OpenClaim4) -> NfsArgop4 {
    NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: owner(0x55, "open id:\x00\x00\x00\x2a"),
        openhow,
        claim,
    })
}

/// The arguments of every operation, with every arm of their unions.
fn all_args() -> Vec<NfsArgop4> {
    use NfsArgop4 as A;
    let mut ops = vec![
        A::Access(Access4Args { access: ACCESS4_READ | ACCESS4_LOOKUP }),
        A::Close(Close4Args { seqid: 0, open_stateid: stateid(1) }),
        A::Commit(Commit4Args { offset: 4096, count: 0 }),
        A::Delegpurge(Delegpurge4Args { clientid: 9 }),
        A::Delegreturn(Delegreturn4Args { deleg_stateid: stateid(2) }),
        A::Getattr(Getattr4Args { attr_request: Attrs4::known() }),
        A::Getfh(()),
        A::Link(Link4Args { newname: "hard".into() }),
        A::Lockt(Lockt4Args { locktype: NfsLockType4::WriteLt, offset: 0, length: u64::MAX, owner: owner(1, "lo") }),
        A::Locku(Locku4Args {
            locktype: NfsLockType4::ReadLt,
            seqid: 2,
            lock_stateid: stateid(3),
            offset: 10,
            length: 20,
        }),
        A::Lookup(Lookup4Args { objname: "dir".into() }),
        A::Lookupp(()),
        A::Nverify(Nverify4Args { obj_attributes: set_attrs() }),
        A::Openattr(Openattr4Args { createdir: true }),
        A::OpenConfirm(OpenConfirm4Args { open_stateid: stateid(4), seqid: 1 }),
        A::OpenDowngrade(OpenDowngrade4Args {
            open_stateid: stateid(5),
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: OPEN4_SHARE_DENY_WRITE,
        }),
        A::Putfh(Putfh4Args { object: fh(128) }),
        A::Putpubfh(()),
        A::Putrootfh(()),
        A::Read(Read4Args { stateid: Stateid4::ANONYMOUS, offset: 1 << 33, count: 1 << 20 }),
        A::Readdir(Readdir4Args {
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 8192,
            maxcount: 32768,
            attr_request: Bitmap4::from_bits([FATTR4_TYPE, FATTR4_FILEID, FATTR4_MOUNTED_ON_FILEID]),
        }),
        A::Readlink(()),
        A::Remove(Remove4Args { target: "gone".into() }),
        A::Rename(Rename4Args { oldname: "a".into(), newname: "b".into() }),
        A::Renew(Renew4Args { clientid: 77 }),
        A::Restorefh(()),
        A::Savefh(()),
        A::Secinfo(Secinfo4Args { name: "sub".into() }),
        A::Setattr(Setattr4Args { stateid: stateid(6), obj_attributes: set_attrs() }),
        A::Setclientid(Setclientid4Args {
            client: NfsClientId4 { verifier: [1; 8], id: "Linux NFSv4.0 host".into() },
            callback: CbClient4 {
                cb_program: NFS4_CALLBACK,
                cb_location: Netaddr4 { na_r_netid: "tcp".into(), na_r_addr: "10.0.0.1.3.232".into() },
            },
            callback_ident: 1,
        }),
        A::SetclientidConfirm(SetclientidConfirm4Args { clientid: 77, setclientid_confirm: [2; 8] }),
        A::Verify(Verify4Args { obj_attributes: set_attrs() }),
        A::Write(Write4Args {
            stateid: stateid(7),
            offset: 8192,
            stable: StableHow4::FileSync4,
            data: Bytes::from(vec![0xab; 5000]),
        }),
        A::Write(Write4Args {
            stateid: stateid(7),
            offset: 1,
            stable: StableHow4::Unstable4,
            data: Bytes::from_static(b"abc"),
        }),
        A::ReleaseLockowner(ReleaseLockowner4Args { lock_owner: owner(3, "lock owner") }),
        A::BackchannelCtl(BackchannelCtl4Args { bca_cb_program: NFS4_CALLBACK, bca_sec_parms: sec_parms() }),
        A::BindConnToSession(BindConnToSession4Args {
            bctsa_sessid: [9; 16],
            bctsa_dir: ChannelDirFromClient4::Cdfc4BackOrBoth,
            bctsa_use_conn_in_rdma_mode: false,
        }),
        A::CreateSession(CreateSession4Args {
            csa_clientid: 0x0102_0304_0506_0708,
            csa_sequence: 1,
            csa_flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            csa_fore_chan_attrs: chan(8, None),
            csa_back_chan_attrs: chan(2, Some(4)),
            csa_cb_program: NFS4_CALLBACK,
            csa_sec_parms: sec_parms(),
        }),
        A::DestroySession(DestroySession4Args { dsa_sessionid: [3; 16] }),
        A::FreeStateid(FreeStateid4Args { fsa_stateid: stateid(8) }),
        A::GetDirDelegation(GetDirDelegation4Args {
            gdda_signal_deleg_avail: true,
            gdda_notification_types: Bitmap4::from_bits([NotifyType4::Notify4AddEntry as u32]),
            gdda_child_attr_delay: time(1),
            gdda_dir_attr_delay: time(2),
            gdda_child_attributes: Bitmap4::from_bits([FATTR4_SIZE]),
            gdda_dir_attributes: Bitmap4::from_bits([FATTR4_CHANGE]),
        }),
        A::Getdeviceinfo(Getdeviceinfo4Args {
            gdia_device_id: [5; 16],
            gdia_layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
            gdia_maxcount: 4096,
            gdia_notify_types: Bitmap4::from_bits([NotifyDeviceidType4::NotifyDeviceid4Change as u32]),
        }),
        A::Getdevicelist(Getdevicelist4Args {
            gdla_layout_type: Layouttype4::LAYOUT4_NFSV4_1_FILES,
            gdla_maxdevices: 16,
            gdla_cookie: 0,
            gdla_cookieverf: [0; 8],
        }),
        A::Layoutcommit(Layoutcommit4Args {
            loca_offset: 0,
            loca_length: 4096,
            loca_reclaim: false,
            loca_stateid: stateid(9),
            loca_last_write_offset: Some(4095),
            loca_time_modify: Some(time(5)),
            loca_layoutupdate: Layoutupdate4 {
                lou_type: Layouttype4::LAYOUT4_FLEX_FILES,
                lou_body: b"update".as_slice().into(),
            },
        }),
        A::Layoutcommit(Layoutcommit4Args::default()),
        A::Layoutget(Layoutget4Args {
            loga_signal_layout_avail: false,
            loga_layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
            loga_iomode: Layoutiomode4::Layoutiomode4Rw,
            loga_offset: 0,
            loga_length: u64::MAX,
            loga_minlength: 4096,
            loga_stateid: stateid(10),
            loga_maxcount: 4096,
        }),
        A::SecinfoNoName(SecinfoStyle4::Secinfo4StyleCurrentFh),
        A::SecinfoNoName(SecinfoStyle4::Secinfo4StyleParent),
        A::Sequence(Sequence4Args {
            sa_sessionid: [0xaa; 16],
            sa_sequenceid: 17,
            sa_slotid: 0,
            sa_highest_slotid: 63,
            sa_cachethis: true,
        }),
        A::SetSsv(SetSsv4Args { ssa_ssv: b"ssv".as_slice().into(), ssa_digest: b"digest".as_slice().into() }),
        A::TestStateid(TestStateid4Args { ts_stateids: vec![stateid(1), stateid(2)].into() }),
        A::DestroyClientid(DestroyClientid4Args { dca_clientid: 5 }),
        A::ReclaimComplete(ReclaimComplete4Args { rca_one_fs: false }),
        A::Allocate(Allocate4Args { aa_stateid: stateid(11), aa_offset: 0, aa_length: 1 << 20 }),
        A::Copy(Copy4Args {
            ca_src_stateid: stateid(12),
            ca_dst_stateid: stateid(13),
            ca_src_offset: 0,
            ca_dst_offset: 4096,
            ca_count: 0,
            ca_consecutive: true,
            ca_synchronous: false,
            ca_source_server: netlocs().into(),
        }),
        A::Deallocate(Deallocate4Args { da_stateid: stateid(14), da_offset: 10, da_length: 20 }),
        A::IoAdvise(IoAdvise4Args {
            iaa_stateid: stateid(15),
            iaa_offset: 0,
            iaa_count: 100,
            iaa_hints: Bitmap4::from_bits([IoAdviseType4::IoAdvise4Sequential as u32]),
        }),
        A::Layouterror(Layouterror4Args {
            lea_offset: 0,
            lea_length: 10,
            lea_stateid: stateid(16),
            lea_errors: vec![DeviceError4 { de_deviceid: [1; 16], de_status: Nfsstat4::Io, de_opnum: OpNum::Write }]
                .into(),
        }),
        A::Layoutstats(Layoutstats4Args {
            lsa_offset: 0,
            lsa_length: 10,
            lsa_stateid: stateid(17),
            lsa_read: IoInfo4 { ii_count: 1, ii_bytes: 4096 },
            lsa_write: IoInfo4 { ii_count: 2, ii_bytes: 8192 },
            lsa_deviceid: [2; 16],
            lsa_layoutupdate: Layoutupdate4::default(),
        }),
        A::OffloadCancel(OffloadCancel4Args { oca_stateid: stateid(18) }),
        A::OffloadStatus(OffloadStatus4Args { osa_stateid: stateid(19) }),
        A::ReadPlus(ReadPlus4Args { rpa_stateid: stateid(20), rpa_offset: 0, rpa_count: 65536 }),
        A::Seek(Seek4Args { sa_stateid: stateid(21), sa_offset: 5, sa_what: DataContent4::Nfs4ContentHole }),
        A::WriteSame(WriteSame4Args {
            wsa_stateid: stateid(22),
            wsa_stable: StableHow4::DataSync4,
            wsa_adb: AppDataBlock4 {
                adb_offset: 0,
                adb_block_size: 512,
                adb_block_count: 8,
                adb_reloff_blocknum: 0,
                adb_block_num: 0,
                adb_reloff_pattern: 0,
                adb_pattern: b"\0\0\0\0".as_slice().into(),
            },
        }),
        A::Clone(Clone4Args {
            cl_src_stateid: stateid(23),
            cl_dst_stateid: stateid(24),
            cl_src_offset: 0,
            cl_dst_offset: 0,
            cl_count: 0,
        }),
        A::Illegal(OpNum::Illegal as u32),
    ];
    for objtype in [
        Createtype4::Lnk("target/of/link".into()),
        Createtype4::Blk(Specdata4 { specdata1: 8, specdata2: 0 }),
        Createtype4::Chr(Specdata4 { specdata1: 1, specdata2: 3 }),
        Createtype4::Sock,
        Createtype4::Fifo,
        Createtype4::Dir,
        Createtype4::Other(NfsFtype4::Nf4reg as u32),
        Createtype4::Other(99),
    ] {
        ops.push(A::Create(Create4Args { objtype, objname: "new".into(), createattrs: set_attrs() }));
    }
    for locker in [
        Locker4::OpenOwner(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: stateid(30),
            lock_seqid: 0,
            lock_owner: owner(1, "lock"),
        }),
        Locker4::LockOwner(ExistLockOwner4 { lock_stateid: stateid(31), lock_seqid: 1 }),
    ] {
        ops.push(A::Lock(Lock4Args { locktype: NfsLockType4::WritewLt, reclaim: false, offset: 0, length: 1, locker }));
    }
    let creates = [
        Createhow4::Unchecked4(set_attrs()),
        Createhow4::Guarded4(set_attrs()),
        Createhow4::Exclusive4([7; 8]),
        Createhow4::Exclusive4_1(CreatVerfAttr { cva_verf: [8; 8], cva_attrs: set_attrs() }),
    ];
    for how in creates {
        ops.push(open_args(Openflag4::Open4Create(how), OpenClaim4::ClaimNull("file".into())));
    }
    for claim in [
        OpenClaim4::ClaimNull("file".into()),
        OpenClaim4::ClaimPrevious(OpenDelegationType4::OpenDelegateWrite),
        OpenClaim4::ClaimDelegateCur(OpenClaimDelegateCur4 { delegate_stateid: stateid(40), file: "f".into() }),
        OpenClaim4::ClaimDelegatePrev("g".into()),
        OpenClaim4::ClaimFh,
        OpenClaim4::ClaimDelegCurFh(stateid(41)),
        OpenClaim4::ClaimDelegPrevFh,
    ] {
        ops.push(open_args(Openflag4::Open4Nocreate, claim));
    }
    for how in [
        StateProtect4A::Sp4None,
        StateProtect4A::Sp4MachCred(prot_ops()),
        StateProtect4A::Sp4Ssv(SsvSpParms4 {
            ssp_ops: prot_ops(),
            ssp_hash_algs: vec![SecOid4::from(b"\x60\x86\x48\x01\x65\x03\x04\x02\x01".as_slice())].into(),
            ssp_encr_algs: vec![SecOid4::from(b"\x60\x86\x48\x01\x65\x03\x04\x01\x2a".as_slice())].into(),
            ssp_window: 16,
            ssp_num_gss_handles: 2,
        }),
    ] {
        ops.push(A::ExchangeId(ExchangeId4Args {
            eia_clientowner: ClientOwner4 { co_verifier: [4; 8], co_ownerid: "Linux NFSv4.1 client".into() },
            eia_flags: EXCHGID4_FLAG_SUPP_MOVED_MIGR | EXCHGID4_FLAG_BIND_PRINC_STATEID,
            eia_state_protect: how,
            eia_client_impl_id: Some(impl_id()),
        }));
    }
    for lr in [
        Layoutreturn4::Layoutreturn4File(LayoutreturnFile4 {
            lrf_offset: 0,
            lrf_length: u64::MAX,
            lrf_stateid: stateid(50),
            lrf_body: b"ff return".as_slice().into(),
        }),
        Layoutreturn4::Layoutreturn4Fsid,
        Layoutreturn4::Layoutreturn4All,
    ] {
        ops.push(A::Layoutreturn(Layoutreturn4Args {
            lora_reclaim: false,
            lora_layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
            lora_iomode: Layoutiomode4::Layoutiomode4Any,
            lora_layoutreturn: lr,
        }));
    }
    for claim in [
        DelegClaim4::ClaimFh,
        DelegClaim4::ClaimDelegPrevFh,
        DelegClaim4::ClaimPrevious(OpenDelegationType4::OpenDelegateRead),
    ] {
        ops.push(A::WantDelegation(WantDelegation4Args {
            wda_want: OPEN4_SHARE_ACCESS_WANT_READ_DELEG,
            wda_claim: claim,
        }));
    }
    for dest in netlocs() {
        ops.push(A::CopyNotify(CopyNotify4Args { cna_src_stateid: stateid(60), cna_destination_server: dest }));
    }
    ops
}

fn ok<T>(t: T) -> Nfs4Result<T> {
    Nfs4Result::Ok(t)
}

fn write_response() -> WriteResponse4 {
    WriteResponse4 {
        wr_callback_id: Some(stateid(70)),
        wr_count: 1 << 20,
        wr_committed: StableHow4::FileSync4,
        wr_writeverf: [6; 8],
    }
}

fn entry(cookie: u64, name: &str) -> Entry4 {
    Entry4 {
        cookie,
        name: name.into(),
        attrs: full_attrs().to_fattr4(&Bitmap4::from_bits([FATTR4_TYPE, FATTR4_FILEID])),
    }
}

/// The successful results of every operation, and every result arm that
/// is not a bare status.
fn all_results() -> Vec<NfsResop4> {
    use NfsResop4 as R;
    let s = Nfsstat4::Ok;
    let mut res = vec![
        R::Access(ok(Access4ResOk { supported: 0x3f, access: 0x3 })),
        R::Close(ok(Stateid4::INVALID)),
        R::Commit(ok(Commit4ResOk { writeverf: [1; 8] })),
        R::Create(ok(Create4ResOk { cinfo: cinfo(1), attrset: Bitmap4::from_bits([FATTR4_MODE]) })),
        R::Delegpurge(s),
        R::Delegreturn(s),
        R::Getattr(ok(Getattr4ResOk { obj_attributes: full_attrs().to_fattr4(&Attrs4::known()) })),
        R::Getfh(ok(Getfh4ResOk { object: fh(20) })),
        R::Link(ok(Link4ResOk { cinfo: cinfo(2) })),
        R::Lock(Lock4Res::Ok(Lock4ResOk { lock_stateid: stateid(2) })),
        R::Lock(Lock4Res::Denied(Lock4Denied {
            offset: 0,
            length: 10,
            locktype: NfsLockType4::WriteLt,
            owner: owner(1, "other"),
        })),
        R::Lockt(Lockt4Res::Ok(())),
        R::Lockt(Lockt4Res::Denied(Lock4Denied::default())),
        R::Locku(ok(stateid(3))),
        R::Lookup(s),
        R::Lookupp(s),
        R::Nverify(Nfsstat4::Same),
        R::Openattr(s),
        R::OpenConfirm(ok(OpenConfirm4ResOk { open_stateid: stateid(4) })),
        R::OpenDowngrade(ok(OpenDowngrade4ResOk { open_stateid: stateid(5) })),
        R::Putfh(s),
        R::Putpubfh(s),
        R::Putrootfh(s),
        R::Read(ok(Read4ResOk { eof: true, data: Bytes::from_static(b"hello") })),
        R::Read(ok(Read4ResOk { eof: false, data: Bytes::from(vec![7; 70_000]) })),
        R::Readdir(ok(Readdir4ResOk {
            cookieverf: [2; 8],
            reply: Dirlist4 { entries: vec![entry(3, "a"), entry(4, "bcdef")], eof: true },
        })),
        R::Readdir(ok(Readdir4ResOk::default())),
        R::Readlink(ok(Readlink4ResOk { link: "../x".into() })),
        R::Remove(ok(Remove4ResOk { cinfo: cinfo(3) })),
        R::Rename(ok(Rename4ResOk { source_cinfo: cinfo(4), target_cinfo: cinfo(5) })),
        R::Renew(Nfsstat4::Notsupp),
        R::Restorefh(s),
        R::Savefh(s),
        R::Secinfo(ok(vec![
            Secinfo4::RpcsecGss(RpcsecGssInfo {
                oid: b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02".as_slice().into(),
                qop: 0,
                service: RpcGssSvc::RpcGssSvcPrivacy,
            }),
            Secinfo4::Flavor(AUTH_SYS),
            Secinfo4::Flavor(AUTH_NONE),
        ]
        .into())),
        R::Setattr(Setattr4Res { status: s, attrsset: Bitmap4::from_bits([FATTR4_MODE, FATTR4_OWNER]) }),
        R::Setattr(Setattr4Res { status: Nfsstat4::Perm, attrsset: Bitmap4::from_bits([FATTR4_MODE]) }),
        R::Setclientid(Setclientid4Res::Ok(Setclientid4ResOk { clientid: 1, setclientid_confirm: [3; 8] })),
        R::Setclientid(Setclientid4Res::ClidInuse(Netaddr4 {
            na_r_netid: "tcp".into(),
            na_r_addr: "1.2.3.4.0.1".into(),
        })),
        R::SetclientidConfirm(s),
        R::Verify(Nfsstat4::NotSame),
        R::Write(ok(Write4ResOk { count: 4096, committed: StableHow4::Unstable4, writeverf: [4; 8] })),
        R::ReleaseLockowner(s),
        R::BackchannelCtl(s),
        R::BindConnToSession(ok(BindConnToSession4ResOk {
            bctsr_sessid: [1; 16],
            bctsr_dir: ChannelDirFromServer4::Cdfs4Both,
            bctsr_use_conn_in_rdma_mode: false,
        })),
        R::CreateSession(ok(CreateSession4ResOk {
            csr_sessionid: [2; 16],
            csr_sequence: 1,
            csr_flags: 0,
            csr_fore_chan_attrs: chan(8, None),
            csr_back_chan_attrs: chan(2, None),
        })),
        R::DestroySession(s),
        R::FreeStateid(s),
        R::GetDirDelegation(ok(GetDirDelegation4ResNonFatal::Gdd4Ok(GetDirDelegation4ResOk {
            gddr_cookieverf: [1; 8],
            gddr_stateid: stateid(6),
            gddr_notification: Bitmap4::from_bits([NotifyType4::Notify4RemoveEntry as u32]),
            gddr_child_attributes: Bitmap4::new(),
            gddr_dir_attributes: Bitmap4::new(),
        }))),
        R::GetDirDelegation(ok(GetDirDelegation4ResNonFatal::Gdd4Unavail(true))),
        R::Getdeviceinfo(Getdeviceinfo4Res::Ok(Getdeviceinfo4ResOk {
            gdir_device_addr: DeviceAddr4 {
                da_layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
                da_addr_body: b"netaddr".as_slice().into(),
            },
            gdir_notification: Bitmap4::new(),
        })),
        R::Getdeviceinfo(Getdeviceinfo4Res::Toosmall(8192)),
        R::Getdevicelist(ok(Getdevicelist4ResOk {
            gdlr_cookie: 9,
            gdlr_cookieverf: [5; 8],
            gdlr_deviceid_list: vec![[1; 16], [2; 16]].into(),
            gdlr_eof: true,
        })),
        R::Layoutcommit(ok(Layoutcommit4ResOk { locr_newsize: Some(1 << 20) })),
        R::Layoutcommit(ok(Layoutcommit4ResOk { locr_newsize: None })),
        R::Layoutget(Layoutget4Res::Ok(Layoutget4ResOk {
            logr_return_on_close: true,
            logr_stateid: stateid(7),
            logr_layout: vec![Layout4 {
                lo_offset: 0,
                lo_length: u64::MAX,
                lo_iomode: Layoutiomode4::Layoutiomode4Read,
                lo_content: LayoutContent4 {
                    loc_type: Layouttype4::LAYOUT4_FLEX_FILES,
                    loc_body: b"mirrors".as_slice().into(),
                },
            }]
            .into(),
        })),
        R::Layoutget(Layoutget4Res::Layouttrylater(true)),
        R::Layoutreturn(ok(Some(stateid(8)))),
        R::Layoutreturn(ok(None)),
        R::SecinfoNoName(ok(vec![Secinfo4::Flavor(AUTH_SYS)].into())),
        R::Sequence(ok(Sequence4ResOk {
            sr_sessionid: [0xaa; 16],
            sr_sequenceid: 17,
            sr_slotid: 0,
            sr_highest_slotid: 63,
            sr_target_highest_slotid: 63,
            sr_status_flags: SEQ4_STATUS_CB_PATH_DOWN,
        })),
        R::SetSsv(ok(SetSsv4ResOk { ssr_digest: b"digest".as_slice().into() })),
        R::TestStateid(ok(TestStateid4ResOk {
            tsr_status_codes: vec![Nfsstat4::Ok, Nfsstat4::BadStateid, Nfsstat4::Unknown(12345)].into(),
        })),
        R::DestroyClientid(s),
        R::ReclaimComplete(Nfsstat4::CompleteAlready),
        R::Allocate(s),
        R::Copy(Copy4Res::Ok(Copy4ResOk {
            cr_response: write_response(),
            cr_requirements: CopyRequirements4 { cr_consecutive: true, cr_synchronous: true },
        })),
        R::Copy(Copy4Res::OffloadNoReqs(CopyRequirements4 { cr_consecutive: false, cr_synchronous: true })),
        R::CopyNotify(ok(CopyNotify4ResOk {
            cnr_lease_time: time(90),
            cnr_stateid: stateid(9),
            cnr_source_server: netlocs().into(),
        })),
        R::Deallocate(s),
        R::IoAdvise(ok(IoAdvise4ResOk { ior_hints: Bitmap4::from_bits([IoAdviseType4::IoAdvise4Willneed as u32]) })),
        R::Layouterror(s),
        R::Layoutstats(s),
        R::OffloadCancel(s),
        R::OffloadStatus(ok(OffloadStatus4ResOk { osr_count: 100, osr_complete: Some(Nfsstat4::Ok) })),
        R::OffloadStatus(ok(OffloadStatus4ResOk { osr_count: 50, osr_complete: None })),
        R::ReadPlus(ok(ReadPlusRes4 {
            rpr_eof: true,
            rpr_contents: vec![
                ReadPlusContent::Nfs4ContentData(Data4 { d_offset: 0, d_data: Bytes::from_static(b"data") }),
                ReadPlusContent::Nfs4ContentHole(DataInfo4 { di_offset: 4, di_length: 1 << 20 }),
            ]
            .into(),
        })),
        R::Seek(ok(SeekRes4 { sr_eof: false, sr_offset: 1 << 21 })),
        R::WriteSame(ok(WriteResponse4 { wr_callback_id: None, ..write_response() })),
        R::Clone(s),
        R::Illegal(Nfsstat4::OpIllegal),
    ];
    for how in [
        StateProtect4R::Sp4None,
        StateProtect4R::Sp4MachCred(prot_ops()),
        StateProtect4R::Sp4Ssv(SsvProtInfo4 {
            spi_ops: prot_ops(),
            spi_hash_alg: 0,
            spi_encr_alg: 1,
            spi_ssv_len: 32,
            spi_window: 16,
            spi_handles: vec![GssHandle4::from(b"h1".as_slice())].into(),
        }),
    ] {
        res.push(R::ExchangeId(ok(ExchangeId4ResOk {
            eir_clientid: 0xdead_beef,
            eir_sequenceid: 1,
            eir_flags: EXCHGID4_FLAG_USE_NON_PNFS | EXCHGID4_FLAG_CONFIRMED_R,
            eir_state_protect: how,
            eir_server_owner: ServerOwner4 { so_minor_id: 0, so_major_id: "keel-a".into() },
            eir_server_scope: "keel".into(),
            eir_server_impl_id: None,
        })));
    }
    for delegation in delegations() {
        res.push(R::Open(ok(Open4ResOk {
            stateid: stateid(1),
            cinfo: cinfo(9),
            rflags: OPEN4_RESULT_LOCKTYPE_POSIX,
            attrset: Bitmap4::from_bits([FATTR4_MODE]),
            delegation: delegation.clone(),
        })));
        res.push(R::WantDelegation(ok(delegation)));
    }
    res
}

/// Numbers of the operations in `ops`.
fn covered<I: IntoIterator<Item = OpNum>>(ops: I) -> BTreeSet<u32> {
    ops.into_iter().map(|o| o as u32).collect()
}

#[test]
fn every_operation_args_roundtrip() {
    let ops = all_args();
    let all: BTreeSet<u32> = OpNum::ALL.iter().map(|&o| o as u32).collect();
    assert_eq!(covered(ops.iter().map(NfsArgop4::opnum)), all, "every operation has arguments here");
    for op in &ops {
        let bytes = roundtrip(op);
        assert_eq!(u32::from_be_bytes(bytes[..4].try_into().unwrap()), op.opnum() as u32);
    }
    // All of them, minus ILLEGAL (it must be last), in one COMPOUND.
    let argarray: Vec<NfsArgop4> = ops.iter().filter(|o| o.opnum() != OpNum::Illegal).cloned().collect();
    let call = Compound4Args { tag: "all".into(), minorversion: 2, argarray };
    roundtrip(&call);
}

#[test]
fn every_operation_result_roundtrip() {
    let res = all_results();
    let all: BTreeSet<u32> = OpNum::ALL.iter().map(|&o| o as u32).collect();
    assert_eq!(covered(res.iter().map(NfsResop4::opnum)), all, "every operation has a result here");
    for r in &res {
        roundtrip(r);
    }
    // And every operation's bare failure, with a status that has no arm of
    // its own.
    for &op in OpNum::ALL {
        let failed = NfsResop4::failed(op, Nfsstat4::Badxdr);
        assert_eq!((failed.opnum(), failed.status()), (op, Nfsstat4::Badxdr));
        let bytes = roundtrip(&failed);
        let size = if op == OpNum::Setattr { 12 } else { 8 };
        assert_eq!(bytes.len(), size, "{op}: opnum and status only");
    }
    let reply = Compound4Res { status: Nfsstat4::Ok, tag: "all".into(), resarray: res };
    roundtrip(&reply);
}

/// The reply encoder writes what `Compound4Res` encodes, and keeps a large
/// READ payload a segment of its own (not copied).
#[test]
fn reply_encoder_matches_whole_reply() {
    let data = Bytes::from(vec![5; 100_000]);
    let results = vec![
        NfsResop4::Sequence(ok(Sequence4ResOk::default())),
        NfsResop4::Putfh(Nfsstat4::Ok),
        NfsResop4::Read(ok(Read4ResOk { eof: true, data: data.clone() })),
        NfsResop4::Getattr(Nfs4Result::Fail(Nfsstat4::Delay)),
    ];
    let mut reply = Compound4ResEncoder::new("tag".into());
    for r in &results {
        reply.push(r);
    }
    assert_eq!((reply.count(), reply.status()), (4, Nfsstat4::Delay));
    let whole = Compound4Res { status: Nfsstat4::Delay, tag: "tag".into(), resarray: results };
    let expected = encode(&whole);
    assert_eq!(reply.len(), expected.len());
    let mut enc = Encoder::new();
    reply.finish(&mut enc);
    let segments = enc.finish_bytes();
    assert!(segments.iter().any(|s| s.as_ptr() == data.as_ptr()), "the READ data is spliced, not copied");
    assert_eq!(segments.concat(), expected.to_vec());
}

/// The bytes `push` (a result holding its data) and `push_spliced` (the
/// same result with `data` as a spliced payload) put on the wire, after a
/// PUTFH.
fn wire_with_and_without_splice(
    data: &Bytes,
    whole: NfsResop4,
    push_spliced: impl FnOnce(&mut Compound4ResEncoder, Spliced),
) -> (Vec<u8>, Vec<u8>) {
    let mut spliced = Compound4ResEncoder::new(Tag4::default());
    spliced.push(&NfsResop4::Putfh(Nfsstat4::Ok));
    push_spliced(&mut spliced, Spliced::new(data.len(), "pipe"));
    let mut enc = Encoder::new();
    spliced.finish(&mut enc);
    let mut bytes = Vec::new();
    for s in enc.finish() {
        match s {
            Segment::Bytes(b) => bytes.extend_from_slice(&b),
            Segment::Spliced(p) => {
                assert_eq!(p.downcast_ref::<&str>(), Some(&"pipe"));
                bytes.extend_from_slice(&data[..p.len()]);
            }
        }
    }
    let whole = Compound4Res {
        status: Nfsstat4::Ok,
        tag: Tag4::default(),
        resarray: vec![NfsResop4::Putfh(Nfsstat4::Ok), whole],
    };
    (bytes, encode(&whole).to_vec())
}

/// A READ whose data is a spliced payload: the same bytes on the wire as a
/// `Read4ResOk` holding the data.
#[test]
fn read_spliced_is_read4resok_on_the_wire() {
    let data = Bytes::from(vec![9; 3001]);
    let whole = NfsResop4::Read(ok(Read4ResOk { eof: false, data: data.clone() }));
    let (spliced, held) = wire_with_and_without_splice(&data, whole, |e, p| e.push_read_spliced(false, p));
    assert_eq!(spliced, held);
}

/// A READ_PLUS of one data segment whose data is a spliced payload: the
/// same bytes on the wire as a `read_plus_res4` holding the data.
#[test]
fn read_plus_spliced_is_read_plus_res4_of_one_data_segment_on_the_wire() {
    let data = Bytes::from(vec![7; 4099]);
    let content = ReadPlusContent::Nfs4ContentData(Data4 { d_offset: 1 << 33, d_data: data.clone() });
    let whole = NfsResop4::ReadPlus(ok(ReadPlusRes4 { rpr_eof: true, rpr_contents: vec![content].into() }));
    let (spliced, held) = wire_with_and_without_splice(&data, whole, |e, p| e.push_read_plus_spliced(true, 1 << 33, p));
    assert_eq!(spliced, held);
}

/// WRITE data and READ reply data come out of the decoder as slices of the
/// record.
#[test]
fn payloads_are_slices_of_the_record() {
    let write = NfsArgop4::Write(Write4Args {
        stateid: stateid(1),
        offset: 0,
        stable: StableHow4::Unstable4,
        data: Bytes::from(vec![1; 4096]),
    });
    let record = encode(&write);
    let range = record.as_ptr() as usize..record.as_ptr() as usize + record.len();
    let Ok(NfsArgop4::Write(w)) = decode::<NfsArgop4>(record.clone()) else { panic!("not a WRITE") };
    assert!(range.contains(&(w.data.as_ptr() as usize)));
    let read = NfsResop4::Read(ok(Read4ResOk { eof: false, data: Bytes::from(vec![2; 4096]) }));
    let record = encode(&read);
    let range = record.as_ptr() as usize..record.as_ptr() as usize + record.len();
    let Ok(NfsResop4::Read(Nfs4Result::Ok(r))) = decode::<NfsResop4>(record.clone()) else { panic!("not a READ") };
    assert!(range.contains(&(r.data.as_ptr() as usize)));
}

fn all_cb_args() -> Vec<NfsCbArgop4> {
    use NfsCbArgop4 as A;
    let add = NotifyAdd4 {
        nad_old_entry: Some(NotifyRemove4 {
            nrm_old_entry: NotifyEntry4 { ne_file: "old".into(), ne_attrs: Fattr4::default() },
            nrm_old_entry_cookie: 3,
        }),
        nad_new_entry: NotifyEntry4 { ne_file: "new".into(), ne_attrs: set_attrs() },
        nad_new_entry_cookie: Some(4),
        nad_prev_entry: Some(PrevEntry4 {
            pe_prev_entry: NotifyEntry4 { ne_file: "prev".into(), ne_attrs: Fattr4::default() },
            pe_prev_entry_cookie: 2,
        }),
        nad_last_entry: false,
    };
    let notify_vals = encode(&add);
    let mut ops = vec![
        A::CbGetattr(CbGetattr4Args { fh: fh(40), attr_request: Bitmap4::from_bits([FATTR4_SIZE, FATTR4_CHANGE]) }),
        A::CbRecall(CbRecall4Args { stateid: stateid(1), truncate: false, fh: fh(40) }),
        A::CbNotify(CbNotify4Args {
            cna_stateid: stateid(2),
            cna_fh: fh(8),
            cna_changes: vec![Notify4 {
                notify_mask: Bitmap4::from_bits([NotifyType4::Notify4AddEntry as u32]),
                notify_vals: notify_vals.into(),
            }]
            .into(),
        }),
        A::CbRecallAny(CbRecallAny4Args {
            craa_objects_to_keep: 100,
            craa_type_mask: Bitmap4::from_bits([RCA4_TYPE_MASK_RDATA_DLG, RCA4_TYPE_MASK_WDATA_DLG]),
        }),
        A::CbRecallableObjAvail(CbRecallAny4Args { craa_objects_to_keep: 0, craa_type_mask: Bitmap4::new() }),
        A::CbRecallSlot(CbRecallSlot4Args { rsa_target_highest_slotid: 4 }),
        A::CbSequence(CbSequence4Args {
            csa_sessionid: [1; 16],
            csa_sequenceid: 1,
            csa_slotid: 0,
            csa_highest_slotid: 0,
            csa_cachethis: false,
            csa_referring_call_lists: vec![ReferringCallList4 {
                rcl_sessionid: [2; 16],
                rcl_referring_calls: vec![ReferringCall4 { rc_sequenceid: 9, rc_slotid: 1 }].into(),
            }]
            .into(),
        }),
        A::CbWantsCancelled(CbWantsCancelled4Args {
            cwca_contended_wants_cancelled: true,
            cwca_resourced_wants_cancelled: false,
        }),
        A::CbNotifyLock(CbNotifyLock4Args { cnla_fh: fh(8), cnla_lock_owner: owner(1, "waiter") }),
        A::CbNotifyDeviceid(CbNotifyDeviceid4Args {
            cnda_changes: vec![Notify4 {
                notify_mask: Bitmap4::from_bits([NotifyDeviceidType4::NotifyDeviceid4Delete as u32]),
                notify_vals: encode(&NotifyDeviceidDelete4 {
                    ndd_layouttype: Layouttype4::LAYOUT4_FLEX_FILES,
                    ndd_deviceid: [3; 16],
                })
                .into(),
            }]
            .into(),
        }),
        A::Illegal(OpNum::Illegal as u32),
    ];
    for recall in [
        Layoutrecall4::Layoutrecall4File(LayoutrecallFile4 {
            lor_fh: fh(9),
            lor_offset: 0,
            lor_length: u64::MAX,
            lor_stateid: stateid(3),
        }),
        Layoutrecall4::Layoutrecall4Fsid(Fsid4 { major: 1, minor: 2 }),
        Layoutrecall4::Layoutrecall4All,
    ] {
        ops.push(A::CbLayoutrecall(CbLayoutrecall4Args {
            clora_type: Layouttype4::LAYOUT4_FLEX_FILES,
            clora_iomode: Layoutiomode4::Layoutiomode4Any,
            clora_changed: true,
            clora_recall: recall,
        }));
    }
    for d in delegations() {
        ops.push(A::CbPushDeleg(CbPushDeleg4Args { cpda_fh: fh(7), cpda_delegation: d }));
    }
    for info in [OffloadInfo4::Ok(write_response()), OffloadInfo4::Fail(Nfsstat4::Nospc, 4096)] {
        ops.push(A::CbOffload(CbOffload4Args { coa_fh: fh(6), coa_stateid: stateid(4), coa_offload_info: info }));
    }
    ops
}

#[test]
fn every_callback_roundtrips() {
    let args = all_cb_args();
    let all: BTreeSet<u32> = CbOpNum::ALL.iter().map(|&o| o as u32).collect();
    assert_eq!(args.iter().map(|a| a.opnum() as u32).collect::<BTreeSet<_>>(), all);
    for a in &args {
        roundtrip(a);
    }
    let call = CbCompound4Args {
        tag: "cb".into(),
        minorversion: 2,
        callback_ident: 0,
        argarray: args.iter().filter(|a| a.opnum() != CbOpNum::Illegal).take(CB_COMPOUND_OPS_MAX).cloned().collect(),
    };
    roundtrip(&call);
    // The notification values inside round-trip too.
    let NfsCbArgop4::CbNotify(n) = &args[2] else { panic!("CB_NOTIFY") };
    let add: NotifyAdd4 = decode(n.cna_changes[0].notify_vals.0.clone()).unwrap();
    assert_eq!(add.nad_new_entry.ne_file.as_str(), Some("new"));
    for x in [
        encode(&NotifyAttr4 { na_changed_entry: NotifyEntry4::default() }),
        encode(&NotifyRename4::default()),
        encode(&NotifyVerifier4 { nv_old_cookieverf: [1; 8], nv_new_cookieverf: [2; 8] }),
        encode(&NotifyDeviceidChange4 { ndc_layouttype: Layouttype4(77), ndc_deviceid: [4; 16], ndc_immediate: true }),
    ] {
        assert_eq!(x.len() % 4, 0);
    }
    roundtrip(&NotifyRename4 { nrn_old_entry: NotifyRemove4::default(), nrn_new_entry: NotifyAdd4::default() });
    roundtrip(&NotifyDeviceidChange4 { ndc_layouttype: Layouttype4(77), ndc_deviceid: [4; 16], ndc_immediate: true });

    let mut results = vec![
        NfsCbResop4::CbGetattr(ok(CbGetattr4ResOk {
            obj_attributes: full_attrs().to_fattr4(&Bitmap4::from_bits([FATTR4_SIZE, FATTR4_CHANGE])),
        })),
        NfsCbResop4::CbSequence(ok(CbSequence4ResOk {
            csr_sessionid: [1; 16],
            csr_sequenceid: 1,
            csr_slotid: 0,
            csr_highest_slotid: 0,
            csr_target_highest_slotid: 0,
        })),
        NfsCbResop4::Illegal(Nfsstat4::OpIllegal),
    ];
    for &op in CbOpNum::ALL {
        results.push(NfsCbResop4::failed(op, Nfsstat4::Delay));
    }
    for r in &results {
        roundtrip(r);
    }
    roundtrip(&CbCompound4Res {
        status: Nfsstat4::Delay,
        tag: "cb".into(),
        resarray: results[..CB_COMPOUND_OPS_MAX].to_vec(),
    });
}

#[test]
fn op_numbers_and_names() {
    assert_eq!(OpNum::ALL.len(), 70, "ops 3 to 71 and ILLEGAL");
    assert_eq!(OpNum::from_u32(42), Some(OpNum::ExchangeId));
    assert_eq!(OpNum::from_u32(10044), Some(OpNum::Illegal));
    assert_eq!(OpNum::from_u32(2), None);
    assert_eq!(OpNum::from_u32(72), None);
    assert_eq!(OpNum::SetclientidConfirm.to_string(), "SETCLIENTID_CONFIRM");
    assert_eq!((OpNum::ReclaimComplete.minorversion(), OpNum::Clone.minorversion()), (1, 2));
    let v40_only: Vec<OpNum> = OpNum::ALL.iter().copied().filter(|o| o.is_v40_only()).collect();
    assert_eq!(v40_only.len(), 5);
    assert_eq!(CbOpNum::ALL.len(), 14);
    assert_eq!(CbOpNum::CbOffload.minorversion(), 2);
    assert_eq!(CbOpNum::Illegal.name(), "CB_ILLEGAL");
}

#[test]
fn nfsstat4_values() {
    for &s in Nfsstat4::ALL {
        assert_eq!(Nfsstat4::from_u32(s.code()), s);
        assert_eq!(roundtrip(&s).len(), 4);
    }
    assert_eq!(Nfsstat4::ALL.len(), 111);
    assert_eq!(Nfsstat4::Badxdr.code(), 10036);
    assert_eq!(Nfsstat4::OffloadNoReqs.code(), 10094);
    assert_eq!(Nfsstat4::TooManyOps.to_string(), "NFS4ERR_TOO_MANY_OPS");
    // An unknown value survives a reply.
    let s: Nfsstat4 = decode(Bytes::from_static(&[0, 0, 0x27, 0x99])).unwrap();
    assert_eq!(s, Nfsstat4::Unknown(10137));
    assert_eq!(encode(&s).as_ref(), &[0, 0, 0x27, 0x99]);
    let r: NfsResop4 = decode(Bytes::from_static(&[0, 0, 0, 24, 0, 0, 0x27, 0x99])).unwrap();
    assert_eq!(r, NfsResop4::Putrootfh(Nfsstat4::Unknown(10137)));
}

#[test]
fn decoder_positions_are_exact() {
    // Each op consumes exactly its own bytes: a stream of all of them
    // decodes one after another.
    let ops: Vec<NfsArgop4> = all_args().into_iter().filter(|o| o.opnum() != OpNum::Illegal).collect();
    let mut enc = Encoder::new();
    for op in &ops {
        enc.put(op);
    }
    let mut dec = Decoder::new(enc.into_bytes());
    for op in &ops {
        assert_eq!(&NfsArgop4::decode_op(&mut dec, 2).unwrap(), op);
    }
    dec.finish().unwrap();
}

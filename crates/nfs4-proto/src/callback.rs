//! The callback program (RFC 8881 sections 19 and 20; CB_OFFLOAD in RFC
//! 7862 section 16): CB_COMPOUND and its operations, which the server sends
//! on a session's backchannel and a test client decodes and answers.
//!
//! The program number is the client's (CREATE_SESSION's `csa_cb_program`,
//! BACKCHANNEL_CTL's `bca_cb_program`), not [`NFS4_CALLBACK`]; the version
//! is [`NFS_CB`].

use keel_xdr::bytes_newtype;
use keel_xdr::{Decode, Decoder, Encode, Encoder, XdrError};

use crate::*;

// CB_GETATTR, CB_RECALL (sections 20.1, 20.2)

xdr_structs! {
    /// `CB_GETATTR4args`: the attributes of a file the client holds a
    /// write delegation on.
    #[derive(Default)]
    CbGetattr4Args { fh: NfsFh4, attr_request: Bitmap4 }

    /// `CB_GETATTR4resok`.
    #[derive(Default)]
    CbGetattr4ResOk { obj_attributes: Fattr4 }

    /// `CB_RECALL4args`: return a delegation.
    #[derive(Default)]
    CbRecall4Args { stateid: Stateid4, truncate: bool, fh: NfsFh4 }
}
pub type CbGetattr4Res = Nfs4Result<CbGetattr4ResOk>;
pub type CbRecall4Res = Nfsstat4;
pub type CbIllegal4Res = Nfsstat4;

// CB_LAYOUTRECALL (section 20.3)

xdr_enums! {
    /// `layoutrecall_type4`.
    LayoutrecallType4 { Layoutrecall4File = 1, Layoutrecall4Fsid = 2, Layoutrecall4All = 3 }
}

xdr_structs! {
    /// `layoutrecall_file4`.
    #[derive(Default)]
    LayoutrecallFile4 { lor_fh: NfsFh4, lor_offset: Offset4, lor_length: Length4, lor_stateid: Stateid4 }
}

xdr_union! {
    /// `layoutrecall4`.
    Layoutrecall4 {
        LayoutrecallType4::Layoutrecall4File => Layoutrecall4File(LayoutrecallFile4),
        LayoutrecallType4::Layoutrecall4Fsid => Layoutrecall4Fsid(Fsid4),
        LayoutrecallType4::Layoutrecall4All => Layoutrecall4All,
    }
}

xdr_structs! {
    /// `CB_LAYOUTRECALL4args`.
    CbLayoutrecall4Args {
        clora_type: Layouttype4,
        clora_iomode: Layoutiomode4,
        clora_changed: bool,
        clora_recall: Layoutrecall4,
    }
}
pub type CbLayoutrecall4Res = Nfsstat4;

// CB_NOTIFY (section 20.4)

xdr_enums! {
    /// `notify_type4`: bit numbers in a directory delegation's
    /// notification bitmaps.
    NotifyType4 {
        Notify4ChangeChildAttrs = 0,
        Notify4ChangeDirAttrs = 1,
        Notify4RemoveEntry = 2,
        Notify4AddEntry = 3,
        Notify4RenameEntry = 4,
        Notify4ChangeCookieVerifier = 5,
    }
}

bytes_newtype!(
    /// `notifylist4`: encoded `notify_*4` values, in the order of the
    /// mask's bits.
    Notifylist4,
    NOTIFYLIST4_MAX
);

xdr_structs! {
    /// `notify_entry4`.
    #[derive(Default)]
    NotifyEntry4 { ne_file: Component4, ne_attrs: Fattr4 }

    /// `prev_entry4`.
    #[derive(Default)]
    PrevEntry4 { pe_prev_entry: NotifyEntry4, pe_prev_entry_cookie: NfsCookie4 }

    /// `notify_remove4`.
    #[derive(Default)]
    NotifyRemove4 { nrm_old_entry: NotifyEntry4, nrm_old_entry_cookie: NfsCookie4 }

    /// `notify_add4`; the `<1>` arrays are `Option`s.
    #[derive(Default)]
    NotifyAdd4 {
        nad_old_entry: Option<NotifyRemove4>,
        nad_new_entry: NotifyEntry4,
        nad_new_entry_cookie: Option<NfsCookie4>,
        nad_prev_entry: Option<PrevEntry4>,
        nad_last_entry: bool,
    }

    /// `notify_attr4`.
    #[derive(Default)]
    NotifyAttr4 { na_changed_entry: NotifyEntry4 }

    /// `notify_rename4`.
    #[derive(Default)]
    NotifyRename4 { nrn_old_entry: NotifyRemove4, nrn_new_entry: NotifyAdd4 }

    /// `notify_verifier4`.
    #[derive(Default)]
    NotifyVerifier4 { nv_old_cookieverf: Verifier4, nv_new_cookieverf: Verifier4 }

    /// `notify4`: a set of changes of the types in `notify_mask`.
    #[derive(Default)]
    Notify4 { notify_mask: Bitmap4, notify_vals: Notifylist4 }

    /// `CB_NOTIFY4args`.
    #[derive(Default)]
    CbNotify4Args { cna_stateid: Stateid4, cna_fh: NfsFh4, cna_changes: Array<Notify4, NOTIFY4_MAX> }
}
pub type CbNotify4Res = Nfsstat4;

// CB_PUSH_DELEG, CB_RECALL_ANY, CB_RECALLABLE_OBJ_AVAIL, CB_RECALL_SLOT
// (sections 20.5 to 20.8)

// Bits of CB_RECALL_ANY's `craa_type_mask`.
pub const RCA4_TYPE_MASK_RDATA_DLG: u32 = 0;
pub const RCA4_TYPE_MASK_WDATA_DLG: u32 = 1;
pub const RCA4_TYPE_MASK_DIR_DLG: u32 = 2;
pub const RCA4_TYPE_MASK_FILE_LAYOUT: u32 = 3;
pub const RCA4_TYPE_MASK_BLK_LAYOUT: u32 = 4;
pub const RCA4_TYPE_MASK_OBJ_LAYOUT_MIN: u32 = 8;
pub const RCA4_TYPE_MASK_OBJ_LAYOUT_MAX: u32 = 9;
pub const RCA4_TYPE_MASK_OTHER_LAYOUT_MIN: u32 = 12;
pub const RCA4_TYPE_MASK_OTHER_LAYOUT_MAX: u32 = 15;

xdr_structs! {
    /// `CB_PUSH_DELEG4args`.
    CbPushDeleg4Args { cpda_fh: NfsFh4, cpda_delegation: OpenDelegation4 }

    /// `CB_RECALL_ANY4args`, also `CB_RECALLABLE_OBJ_AVAIL4args`.
    #[derive(Default)]
    CbRecallAny4Args { craa_objects_to_keep: u32, craa_type_mask: Bitmap4 }

    /// `CB_RECALL_SLOT4args`.
    #[derive(Default)]
    CbRecallSlot4Args { rsa_target_highest_slotid: Slotid4 }
}
pub type CbPushDeleg4Res = Nfsstat4;
pub type CbRecallAny4Res = Nfsstat4;
pub type CbRecallableObjAvail4Args = CbRecallAny4Args;
pub type CbRecallableObjAvail4Res = Nfsstat4;
pub type CbRecallSlot4Res = Nfsstat4;

// CB_SEQUENCE, CB_WANTS_CANCELLED, CB_NOTIFY_LOCK (sections 20.9 to 20.11)

xdr_structs! {
    /// `referring_call4`.
    #[derive(Default)]
    ReferringCall4 { rc_sequenceid: Sequenceid4, rc_slotid: Slotid4 }

    /// `referring_call_list4`: the forward-channel calls that caused this
    /// callback.
    #[derive(Default)]
    ReferringCallList4 {
        rcl_sessionid: Sessionid4,
        rcl_referring_calls: Array<ReferringCall4, REFERRING_CALLS_MAX>,
    }

    /// `CB_SEQUENCE4args`.
    #[derive(Default)]
    CbSequence4Args {
        csa_sessionid: Sessionid4,
        csa_sequenceid: Sequenceid4,
        csa_slotid: Slotid4,
        csa_highest_slotid: Slotid4,
        csa_cachethis: bool,
        csa_referring_call_lists: Array<ReferringCallList4, REFERRING_CALLS_MAX>,
    }

    /// `CB_SEQUENCE4resok`.
    #[derive(Default)]
    CbSequence4ResOk {
        csr_sessionid: Sessionid4,
        csr_sequenceid: Sequenceid4,
        csr_slotid: Slotid4,
        csr_highest_slotid: Slotid4,
        csr_target_highest_slotid: Slotid4,
    }

    /// `CB_WANTS_CANCELLED4args`.
    #[derive(Default)]
    CbWantsCancelled4Args { cwca_contended_wants_cancelled: bool, cwca_resourced_wants_cancelled: bool }

    /// `CB_NOTIFY_LOCK4args`: a lock the client waits for may be free.
    #[derive(Default)]
    CbNotifyLock4Args { cnla_fh: NfsFh4, cnla_lock_owner: LockOwner4 }
}
pub type CbSequence4Res = Nfs4Result<CbSequence4ResOk>;
pub type CbWantsCancelled4Res = Nfsstat4;
pub type CbNotifyLock4Res = Nfsstat4;

// CB_NOTIFY_DEVICEID (section 20.12)

xdr_enums! {
    /// `notify_deviceid_type4`: bit numbers in device notification masks.
    NotifyDeviceidType4 { NotifyDeviceid4Change = 1, NotifyDeviceid4Delete = 2 }
}

xdr_structs! {
    /// `notify_deviceid_delete4`.
    #[derive(Default)]
    NotifyDeviceidDelete4 { ndd_layouttype: Layouttype4, ndd_deviceid: Deviceid4 }

    /// `notify_deviceid_change4`.
    #[derive(Default)]
    NotifyDeviceidChange4 { ndc_layouttype: Layouttype4, ndc_deviceid: Deviceid4, ndc_immediate: bool }

    /// `CB_NOTIFY_DEVICEID4args`.
    #[derive(Default)]
    CbNotifyDeviceid4Args { cnda_changes: Array<Notify4, NOTIFY4_MAX> }
}
pub type CbNotifyDeviceid4Res = Nfsstat4;

// CB_OFFLOAD (RFC 7862 section 16.1)

/// `offload_info4`: how an asynchronous copy ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OffloadInfo4 {
    /// `coa_resok4`.
    Ok(WriteResponse4),
    /// Any other status, with `coa_bytes_copied`.
    Fail(Nfsstat4, Length4),
}

impl Encode for OffloadInfo4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            OffloadInfo4::Ok(w) => {
                Nfsstat4::Ok.encode(enc);
                w.encode(enc);
            }
            OffloadInfo4::Fail(status, copied) => {
                debug_assert_ne!(*status, Nfsstat4::Ok, "OffloadInfo4::Fail with NFS4_OK");
                status.encode(enc);
                enc.u64(*copied);
            }
        }
    }
}

impl Decode for OffloadInfo4 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(match Nfsstat4::decode(dec)? {
            Nfsstat4::Ok => OffloadInfo4::Ok(WriteResponse4::decode(dec)?),
            status => OffloadInfo4::Fail(status, dec.u64()?),
        })
    }
}

xdr_structs! {
    /// `CB_OFFLOAD4args`.
    CbOffload4Args { coa_fh: NfsFh4, coa_stateid: Stateid4, coa_offload_info: OffloadInfo4 }
}
pub type CbOffload4Res = Nfsstat4;

operations! {
    /// `nfs_cb_opnum4`.
    CbOpNum;
    /// `nfs_cb_argop4`.
    NfsCbArgop4;
    /// `nfs_cb_resop4`.
    NfsCbResop4;
    Illegal = 10044 "CB_ILLEGAL";
    CbGetattr = 3 "CB_GETATTR", minor 0, CbGetattr4Args => CbGetattr4Res;
    CbRecall = 4 "CB_RECALL", minor 0, CbRecall4Args => CbRecall4Res;
    CbLayoutrecall = 5 "CB_LAYOUTRECALL", minor 1, CbLayoutrecall4Args => CbLayoutrecall4Res;
    CbNotify = 6 "CB_NOTIFY", minor 1, CbNotify4Args => CbNotify4Res;
    CbPushDeleg = 7 "CB_PUSH_DELEG", minor 1, CbPushDeleg4Args => CbPushDeleg4Res;
    CbRecallAny = 8 "CB_RECALL_ANY", minor 1, CbRecallAny4Args => CbRecallAny4Res;
    CbRecallableObjAvail = 9 "CB_RECALLABLE_OBJ_AVAIL", minor 1, CbRecallableObjAvail4Args => CbRecallableObjAvail4Res;
    CbRecallSlot = 10 "CB_RECALL_SLOT", minor 1, CbRecallSlot4Args => CbRecallSlot4Res;
    CbSequence = 11 "CB_SEQUENCE", minor 1, CbSequence4Args => CbSequence4Res;
    CbWantsCancelled = 12 "CB_WANTS_CANCELLED", minor 1, CbWantsCancelled4Args => CbWantsCancelled4Res;
    CbNotifyLock = 13 "CB_NOTIFY_LOCK", minor 1, CbNotifyLock4Args => CbNotifyLock4Res;
    CbNotifyDeviceid = 14 "CB_NOTIFY_DEVICEID", minor 1, CbNotifyDeviceid4Args => CbNotifyDeviceid4Res;
    CbOffload = 15 "CB_OFFLOAD", minor 2, CbOffload4Args => CbOffload4Res;
}

/// `CB_COMPOUND4args`: what the server sends on the backchannel.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CbCompound4Args {
    pub tag: Tag4,
    pub minorversion: u32,
    /// The client's `callback_ident` (0 in 4.1: the session says who).
    pub callback_ident: u32,
    pub argarray: Vec<NfsCbArgop4>,
}

impl Encode for CbCompound4Args {
    fn encode(&self, enc: &mut Encoder) {
        self.tag.encode(enc);
        enc.u32(self.minorversion);
        enc.u32(self.callback_ident);
        encode_array(enc, &self.argarray);
    }
}

/// At most [`CB_COMPOUND_OPS_MAX`] operations, of the call's minor version;
/// a CB_ILLEGAL operation must be the last.
impl Decode for CbCompound4Args {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        let tag = Tag4::decode(dec)?;
        let minorversion = dec.u32()?;
        let callback_ident = dec.u32()?;
        let numops = dec.u32()? as usize;
        if numops > CB_COMPOUND_OPS_MAX {
            return Err(XdrError::TooLong { len: numops, max: CB_COMPOUND_OPS_MAX });
        }
        let mut argarray = Vec::with_capacity(numops);
        for i in 0..numops {
            let op = NfsCbArgop4::decode_op(dec, minorversion)?;
            if let NfsCbArgop4::Illegal(value) = op
                && i + 1 < numops
            {
                return Err(XdrError::InvalidValue { what: "nfs_cb_opnum4", value });
            }
            argarray.push(op);
        }
        Ok(CbCompound4Args { tag, minorversion, callback_ident, argarray })
    }
}

/// `CB_COMPOUND4res`: the client's answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CbCompound4Res {
    pub status: Nfsstat4,
    pub tag: Tag4,
    pub resarray: Vec<NfsCbResop4>,
}

impl Encode for CbCompound4Res {
    fn encode(&self, enc: &mut Encoder) {
        self.status.encode(enc);
        self.tag.encode(enc);
        encode_array(enc, &self.resarray);
    }
}

impl Decode for CbCompound4Res {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(CbCompound4Res {
            status: Nfsstat4::decode(dec)?,
            tag: Tag4::decode(dec)?,
            resarray: dec.array(CB_COMPOUND_OPS_MAX)?,
        })
    }
}

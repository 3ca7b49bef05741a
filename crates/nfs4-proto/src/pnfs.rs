//! pNFS (RFC 8881 section 12; types in section 3.3.13 ff.): layout types
//! and the operations GETDEVICEINFO, GETDEVICELIST, LAYOUTCOMMIT, LAYOUTGET,
//! LAYOUTRETURN (sections 18.40 to 18.44), and 4.2's LAYOUTERROR and
//! LAYOUTSTATS (RFC 7862 sections 15.6, 15.7).
//!
//! Layout-type-specific bodies (layouts, device addresses, updates, hints,
//! return bodies) stay opaque here; a layout type's own crate or module
//! (flexfiles, RFC 8435) encodes them.

use keel_xdr::bytes_newtype;
use std::fmt;

use keel_xdr::{Decode, Decoder, Encode, Encoder, XdrError};

use crate::{
    Array, Bitmap4, Count4, DEVICE_ERRORS_MAX, DEVICE_IDS_MAX, LAYOUT_BODY_MAX, LAYOUTS_MAX, Length4,
    NFS4_DEVICEID4_SIZE, Nfs4Result, NfsCookie4, Nfsstat4, Nfstime4, Offset4, OpNum, Stateid4, Verifier4,
};

/// `deviceid4`.
pub type Deviceid4 = [u8; NFS4_DEVICEID4_SIZE];

/// `layouttype4`. Kept as its number: a layout type this crate does not
/// name (a newer one) must still decode, for the server to answer
/// `NFS4ERR_UNKNOWN_LAYOUTTYPE`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Layouttype4(pub u32);

impl Layouttype4 {
    pub const LAYOUT4_NFSV4_1_FILES: Layouttype4 = Layouttype4(1);
    pub const LAYOUT4_OSD2_OBJECTS: Layouttype4 = Layouttype4(2);
    pub const LAYOUT4_BLOCK_VOLUME: Layouttype4 = Layouttype4(3);
    /// Flexible files (RFC 8435).
    pub const LAYOUT4_FLEX_FILES: Layouttype4 = Layouttype4(4);
    /// SCSI (RFC 8154).
    pub const LAYOUT4_SCSI: Layouttype4 = Layouttype4(5);
}

impl fmt::Debug for Layouttype4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            1 => "LAYOUT4_NFSV4_1_FILES",
            2 => "LAYOUT4_OSD2_OBJECTS",
            3 => "LAYOUT4_BLOCK_VOLUME",
            4 => "LAYOUT4_FLEX_FILES",
            5 => "LAYOUT4_SCSI",
            n => return write!(f, "Layouttype4({n})"),
        };
        f.write_str(name)
    }
}

impl Encode for Layouttype4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.0);
    }
}

impl Decode for Layouttype4 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        dec.u32().map(Layouttype4)
    }
}

bytes_newtype!(
    /// A layout-type-specific body, kept opaque (`loc_body`,
    /// `da_addr_body`, `lou_body`, `loh_body`, `lrf_body`).
    LayoutBody4,
    LAYOUT_BODY_MAX
);

// `lr_returntype` and `lor_recalltype` values.
pub const LAYOUT4_RET_REC_FILE: u32 = 1;
pub const LAYOUT4_RET_REC_FSID: u32 = 2;
pub const LAYOUT4_RET_REC_ALL: u32 = 3;

xdr_enums! {
    /// `layoutiomode4`.
    Layoutiomode4 { Layoutiomode4Read = 1, Layoutiomode4Rw = 2, Layoutiomode4Any = 3 }

    /// `layoutreturn_type4`.
    LayoutreturnType4 { Layoutreturn4File = 1, Layoutreturn4Fsid = 2, Layoutreturn4All = 3 }
}

xdr_structs! {
    /// `layout_content4`.
    #[derive(Default)]
    LayoutContent4 { loc_type: Layouttype4, loc_body: LayoutBody4 }

    /// `layouthint4`.
    #[derive(Default)]
    Layouthint4 { loh_type: Layouttype4, loh_body: LayoutBody4 }

    /// `layout4`: one layout segment.
    #[derive(Default)]
    Layout4 {
        lo_offset: Offset4,
        lo_length: Length4,
        lo_iomode: Layoutiomode4,
        lo_content: LayoutContent4,
    }

    /// `device_addr4`.
    #[derive(Default)]
    DeviceAddr4 { da_layout_type: Layouttype4, da_addr_body: LayoutBody4 }

    /// `layoutupdate4`.
    #[derive(Default)]
    Layoutupdate4 { lou_type: Layouttype4, lou_body: LayoutBody4 }

    /// `layoutreturn_file4`.
    #[derive(Default)]
    LayoutreturnFile4 {
        lrf_offset: Offset4,
        lrf_length: Length4,
        lrf_stateid: Stateid4,
        lrf_body: LayoutBody4,
    }
}

xdr_union! {
    /// `layoutreturn4`.
    Layoutreturn4 {
        LayoutreturnType4::Layoutreturn4File => Layoutreturn4File(LayoutreturnFile4),
        LayoutreturnType4::Layoutreturn4Fsid => Layoutreturn4Fsid,
        LayoutreturnType4::Layoutreturn4All => Layoutreturn4All,
    }
}

// GETDEVICEINFO, GETDEVICELIST (sections 18.40, 18.41)

xdr_structs! {
    /// `GETDEVICEINFO4args`.
    #[derive(Default)]
    Getdeviceinfo4Args {
        gdia_device_id: Deviceid4,
        gdia_layout_type: Layouttype4,
        gdia_maxcount: Count4,
        gdia_notify_types: Bitmap4,
    }

    /// `GETDEVICEINFO4resok`.
    #[derive(Default)]
    Getdeviceinfo4ResOk { gdir_device_addr: DeviceAddr4, gdir_notification: Bitmap4 }

    /// `GETDEVICELIST4args`.
    #[derive(Default)]
    Getdevicelist4Args {
        gdla_layout_type: Layouttype4,
        gdla_maxdevices: Count4,
        gdla_cookie: NfsCookie4,
        gdla_cookieverf: Verifier4,
    }

    /// `GETDEVICELIST4resok`.
    #[derive(Default)]
    Getdevicelist4ResOk {
        gdlr_cookie: NfsCookie4,
        gdlr_cookieverf: Verifier4,
        gdlr_deviceid_list: Array<Deviceid4, DEVICE_IDS_MAX>,
        gdlr_eof: bool,
    }
}

status_union! {
    /// `GETDEVICEINFO4res`: `NFS4ERR_TOOSMALL` carries the size needed.
    Getdeviceinfo4Res { Ok(Getdeviceinfo4ResOk), Toosmall => Toosmall(Count4) }
}
pub type Getdevicelist4Res = Nfs4Result<Getdevicelist4ResOk>;

// LAYOUTCOMMIT, LAYOUTGET, LAYOUTRETURN (sections 18.42 to 18.44)

/// `newtime4` (a boolean-switched union, the same bytes as optional data).
pub type Newtime4 = Option<Nfstime4>;
/// `newoffset4`.
pub type Newoffset4 = Option<Offset4>;
/// `newsize4`.
pub type Newsize4 = Option<Length4>;
/// `layoutreturn_stateid`.
pub type LayoutreturnStateid = Option<Stateid4>;

xdr_structs! {
    /// `LAYOUTCOMMIT4args`.
    #[derive(Default)]
    Layoutcommit4Args {
        loca_offset: Offset4,
        loca_length: Length4,
        loca_reclaim: bool,
        loca_stateid: Stateid4,
        loca_last_write_offset: Newoffset4,
        loca_time_modify: Newtime4,
        loca_layoutupdate: Layoutupdate4,
    }

    /// `LAYOUTCOMMIT4resok`.
    #[derive(Default)]
    Layoutcommit4ResOk { locr_newsize: Newsize4 }

    /// `LAYOUTGET4args`.
    #[derive(Default)]
    Layoutget4Args {
        loga_signal_layout_avail: bool,
        loga_layout_type: Layouttype4,
        loga_iomode: Layoutiomode4,
        loga_offset: Offset4,
        loga_length: Length4,
        loga_minlength: Length4,
        loga_stateid: Stateid4,
        loga_maxcount: Count4,
    }

    /// `LAYOUTGET4resok`.
    #[derive(Default)]
    Layoutget4ResOk {
        logr_return_on_close: bool,
        logr_stateid: Stateid4,
        logr_layout: Array<Layout4, LAYOUTS_MAX>,
    }

    /// `LAYOUTRETURN4args`.
    Layoutreturn4Args {
        lora_reclaim: bool,
        lora_layout_type: Layouttype4,
        lora_iomode: Layoutiomode4,
        lora_layoutreturn: Layoutreturn4,
    }
}
pub type Layoutcommit4Res = Nfs4Result<Layoutcommit4ResOk>;

status_union! {
    /// `LAYOUTGET4res`: `NFS4ERR_LAYOUTTRYLATER` carries
    /// `logr_will_signal_layout_avail`.
    Layoutget4Res { Ok(Layoutget4ResOk), Layouttrylater => Layouttrylater(bool) }
}
pub type Layoutreturn4Res = Nfs4Result<LayoutreturnStateid>;

// LAYOUTERROR, LAYOUTSTATS (RFC 7862 sections 15.6, 15.7)

xdr_structs! {
    /// `device_error4`: an error a client got from a data server.
    DeviceError4 { de_deviceid: Deviceid4, de_status: Nfsstat4, de_opnum: OpNum }

    /// `LAYOUTERROR4args`.
    #[derive(Default)]
    Layouterror4Args {
        lea_offset: Offset4,
        lea_length: Length4,
        lea_stateid: Stateid4,
        lea_errors: Array<DeviceError4, DEVICE_ERRORS_MAX>,
    }

    /// `io_info4`.
    #[derive(Default)]
    IoInfo4 { ii_count: u64, ii_bytes: u64 }

    /// `LAYOUTSTATS4args`.
    #[derive(Default)]
    Layoutstats4Args {
        lsa_offset: Offset4,
        lsa_length: Length4,
        lsa_stateid: Stateid4,
        lsa_read: IoInfo4,
        lsa_write: IoInfo4,
        lsa_deviceid: Deviceid4,
        lsa_layoutupdate: Layoutupdate4,
    }
}
pub type Layouterror4Res = Nfsstat4;
pub type Layoutstats4Res = Nfsstat4;

//! Operations new in NFSv4.2 (RFC 7862 section 15; the XDR is RFC 7863):
//! space reservation (ALLOCATE, DEALLOCATE), server-side copy (COPY,
//! COPY_NOTIFY, OFFLOAD_CANCEL, OFFLOAD_STATUS), sparse files (READ_PLUS,
//! SEEK), IO_ADVISE, WRITE_SAME and CLONE. LAYOUTERROR and LAYOUTSTATS are
//! with the other pNFS operations.

use bytes::Bytes;
use keel_xdr::{Decode, Decoder, Encode, Encoder, Opaque, XdrError};

use crate::{
    Array, Bitmap4, Count4, Length4, NETLOCS_MAX, Netaddr4, Nfs4Result, Nfsstat4, Nfstime4, Offset4, READ_DATA_MAX,
    READ_PLUS_SEGMENTS_MAX, StableHow4, Stateid4, Utf8StrCis, Verifier4, WRITE_SAME_PATTERN_MAX,
};

xdr_enums! {
    /// `netloc_type4`.
    NetlocType4 { Nl4Name = 1, Nl4Url = 2, Nl4Netaddr = 3 }

    /// `data_content4`: data or a hole.
    DataContent4 { Nfs4ContentData = 0, Nfs4ContentHole = 1 }

    /// `IO_ADVISE_type4`: bit numbers in IO_ADVISE's hint bitmaps.
    IoAdviseType4 {
        IoAdvise4Normal = 0,
        IoAdvise4Sequential = 1,
        IoAdvise4SequentialBackwards = 2,
        IoAdvise4Random = 3,
        IoAdvise4Willneed = 4,
        IoAdvise4WillneedOpportunistic = 5,
        IoAdvise4Dontneed = 6,
        IoAdvise4Noreuse = 7,
        IoAdvise4Read = 8,
        IoAdvise4Write = 9,
        IoAdvise4InitProximity = 10,
    }
}

xdr_union! {
    /// `netloc4`: where another server is.
    Netloc4 {
        NetlocType4::Nl4Name => Nl4Name(Utf8StrCis),
        NetlocType4::Nl4Url => Nl4Url(Utf8StrCis),
        NetlocType4::Nl4Netaddr => Nl4Netaddr(Netaddr4),
    }
}

xdr_structs! {
    /// `write_response4`: the outcome of a COPY or WRITE_SAME.
    #[derive(Default)]
    WriteResponse4 {
        /// `stateid4 wr_callback_id<1>`: set when the copy goes on
        /// asynchronously.
        wr_callback_id: Option<Stateid4>,
        wr_count: Length4,
        wr_committed: StableHow4,
        wr_writeverf: Verifier4,
    }

    /// `copy_requirements4`.
    #[derive(Default)]
    CopyRequirements4 { cr_consecutive: bool, cr_synchronous: bool }
}

// ALLOCATE, DEALLOCATE (sections 15.1, 15.4)

xdr_structs! {
    /// `ALLOCATE4args`.
    #[derive(Default)]
    Allocate4Args { aa_stateid: Stateid4, aa_offset: Offset4, aa_length: Length4 }

    /// `DEALLOCATE4args`.
    #[derive(Default)]
    Deallocate4Args { da_stateid: Stateid4, da_offset: Offset4, da_length: Length4 }
}
pub type Allocate4Res = Nfsstat4;
pub type Deallocate4Res = Nfsstat4;

// COPY, COPY_NOTIFY (sections 15.2, 15.3)

xdr_structs! {
    /// `COPY4args`: SAVED_FH is the source, CURRENT_FH the destination.
    #[derive(Default)]
    Copy4Args {
        ca_src_stateid: Stateid4,
        ca_dst_stateid: Stateid4,
        ca_src_offset: Offset4,
        ca_dst_offset: Offset4,
        ca_count: Length4,
        ca_consecutive: bool,
        ca_synchronous: bool,
        ca_source_server: Array<Netloc4, NETLOCS_MAX>,
    }

    /// `COPY4resok`.
    #[derive(Default)]
    Copy4ResOk { cr_response: WriteResponse4, cr_requirements: CopyRequirements4 }

    /// `COPY_NOTIFY4args`.
    CopyNotify4Args { cna_src_stateid: Stateid4, cna_destination_server: Netloc4 }

    /// `COPY_NOTIFY4resok`.
    #[derive(Default)]
    CopyNotify4ResOk {
        cnr_lease_time: Nfstime4,
        cnr_stateid: Stateid4,
        cnr_source_server: Array<Netloc4, NETLOCS_MAX>,
    }
}

status_union! {
    /// `COPY4res`: `NFS4ERR_OFFLOAD_NO_REQS` carries the requirements the
    /// server could meet.
    Copy4Res { Ok(Copy4ResOk), OffloadNoReqs => OffloadNoReqs(CopyRequirements4) }
}
pub type CopyNotify4Res = Nfs4Result<CopyNotify4ResOk>;

// IO_ADVISE (section 15.5)

xdr_structs! {
    /// `IO_ADVISE4args`: `iaa_hints` holds [`IoAdviseType4`] bits.
    #[derive(Default)]
    IoAdvise4Args { iaa_stateid: Stateid4, iaa_offset: Offset4, iaa_count: Length4, iaa_hints: Bitmap4 }

    /// `IO_ADVISE4resok`: the hints the server will act on.
    #[derive(Default)]
    IoAdvise4ResOk { ior_hints: Bitmap4 }
}
pub type IoAdvise4Res = Nfs4Result<IoAdvise4ResOk>;

// OFFLOAD_CANCEL, OFFLOAD_STATUS (sections 15.8, 15.9)

xdr_structs! {
    /// `OFFLOAD_CANCEL4args`.
    #[derive(Default)]
    OffloadCancel4Args { oca_stateid: Stateid4 }

    /// `OFFLOAD_STATUS4args`.
    #[derive(Default)]
    OffloadStatus4Args { osa_stateid: Stateid4 }

    /// `OFFLOAD_STATUS4resok`.
    #[derive(Default)]
    OffloadStatus4ResOk {
        osr_count: Length4,
        /// `nfsstat4 osr_complete<1>`: set once the copy has ended.
        osr_complete: Option<Nfsstat4>,
    }
}
pub type OffloadCancel4Res = Nfsstat4;
pub type OffloadStatus4Res = Nfs4Result<OffloadStatus4ResOk>;

// READ_PLUS (section 15.10)

xdr_structs! {
    /// `READ_PLUS4args`.
    #[derive(Default)]
    ReadPlus4Args { rpa_stateid: Stateid4, rpa_offset: Offset4, rpa_count: Count4 }

    /// `data_info4`: a hole.
    #[derive(Default)]
    DataInfo4 { di_offset: Offset4, di_length: Length4 }
}

/// `data4`: data at an offset. `d_data` is spliced, not copied, into the
/// output on encode and is a slice of the received record on decode (at
/// most [`READ_DATA_MAX`] bytes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Data4 {
    pub d_offset: Offset4,
    pub d_data: Bytes,
}

impl Encode for Data4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u64(self.d_offset);
        enc.opaque_shared(self.d_data.clone());
    }
}

impl Decode for Data4 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(Data4 { d_offset: dec.u64()?, d_data: dec.opaque(READ_DATA_MAX)? })
    }
}

xdr_union! {
    /// `read_plus_content`.
    ReadPlusContent {
        DataContent4::Nfs4ContentData => Nfs4ContentData(Data4),
        DataContent4::Nfs4ContentHole => Nfs4ContentHole(DataInfo4),
    }
}

xdr_structs! {
    /// `read_plus_res4`.
    #[derive(Default)]
    ReadPlusRes4 { rpr_eof: bool, rpr_contents: Array<ReadPlusContent, READ_PLUS_SEGMENTS_MAX> }
}
pub type ReadPlus4Res = Nfs4Result<ReadPlusRes4>;

// SEEK (section 15.11)

xdr_structs! {
    /// `SEEK4args`.
    #[derive(Default)]
    Seek4Args { sa_stateid: Stateid4, sa_offset: Offset4, sa_what: DataContent4 }

    /// `seek_res4`.
    #[derive(Default)]
    SeekRes4 { sr_eof: bool, sr_offset: Offset4 }
}
pub type Seek4Res = Nfs4Result<SeekRes4>;

// WRITE_SAME, CLONE (sections 15.12, 15.13)

xdr_structs! {
    /// `app_data_block4`: a pattern to write into every block of a range.
    #[derive(Default)]
    AppDataBlock4 {
        adb_offset: Offset4,
        adb_block_size: Length4,
        adb_block_count: Length4,
        adb_reloff_blocknum: Length4,
        adb_block_num: Count4,
        adb_reloff_pattern: Length4,
        adb_pattern: Opaque<WRITE_SAME_PATTERN_MAX>,
    }

    /// `WRITE_SAME4args`.
    #[derive(Default)]
    WriteSame4Args { wsa_stateid: Stateid4, wsa_stable: StableHow4, wsa_adb: AppDataBlock4 }

    /// `CLONE4args`: SAVED_FH is the source, CURRENT_FH the destination.
    #[derive(Default)]
    Clone4Args {
        cl_src_stateid: Stateid4,
        cl_dst_stateid: Stateid4,
        cl_src_offset: Offset4,
        cl_dst_offset: Offset4,
        cl_count: Length4,
    }
}
pub type WriteSame4Res = Nfs4Result<WriteResponse4>;
pub type Clone4Res = Nfsstat4;

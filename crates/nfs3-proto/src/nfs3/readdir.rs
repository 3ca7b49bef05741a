//! READDIR and READDIRPLUS (RFC 1813 sections 3.3.16 and 3.3.17).
//!
//! The entries of a reply are an XDR linked list inside `dirlist3`:
//!
//! ```text
//! dir_attributes  cookieverf  TRUE entry  TRUE entry ...  FALSE  eof
//! ```
//!
//! A server must stop adding entries before the client's byte limit, so it
//! does not build a `Vec` and encode it: it writes the head (status,
//! `dir_attributes`, `cookieverf`), then for each entry checks
//! [`Entry3::xdr_len`] against what is left and calls [`encode_entry3`]
//! (which writes the `TRUE` and the entry), and finally calls
//! [`encode_dirlist_end`] (which writes `FALSE` and `eof`).
//! [`Readdir3ResOk`]'s own `Encode` produces exactly the same bytes from a
//! `Vec`, which is what a client decodes into.

use keel_xdr::{Decode, Decoder, Encode, Encoder, XdrError, xdr_struct};

use super::types::*;
use crate::{LIST_DECODE_MAX, encode_list};

/// Bytes [`encode_dirlist_end`] writes: the list's final `FALSE` and `eof`.
pub const DIRLIST_END_XDR_LEN: usize = 8;

/// `READDIR3args`. `count` bounds the size of the whole READDIR3resok.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Readdir3Args {
    pub dir: NfsFh3,
    pub cookie: Cookie3,
    pub cookieverf: Cookieverf3,
    pub count: Count3,
}
xdr_struct!(Readdir3Args { dir, cookie, cookieverf, count });

/// `READDIRPLUS3args`. `dircount` bounds the directory information (see
/// [`Entryplus3::dir_info_len`]), `maxcount` the whole READDIRPLUS3resok.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Readdirplus3Args {
    pub dir: NfsFh3,
    pub cookie: Cookie3,
    pub cookieverf: Cookieverf3,
    pub dircount: Count3,
    pub maxcount: Count3,
}
xdr_struct!(Readdirplus3Args { dir, cookie, cookieverf, dircount, maxcount });

/// `entry3`: one directory entry. Its `Encode` writes the entry only; the
/// list's "value follows" boolean is written by [`encode_entry3`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Entry3 {
    pub fileid: Fileid3,
    pub name: Filename3,
    pub cookie: Cookie3,
}
xdr_struct!(Entry3 { fileid, name, cookie });

impl Entry3 {
    /// Exact bytes [`encode_entry3`] writes for this entry, including the
    /// leading 4-byte "value follows" boolean.
    pub fn xdr_len(&self) -> usize {
        4 + 8 + self.name.xdr_len() + 8
    }
}

/// `entryplus3`: a directory entry with the object's attributes and handle.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Entryplus3 {
    pub fileid: Fileid3,
    pub name: Filename3,
    pub cookie: Cookie3,
    pub name_attributes: PostOpAttr,
    pub name_handle: PostOpFh3,
}
xdr_struct!(Entryplus3 { fileid, name, cookie, name_attributes, name_handle });

impl Entryplus3 {
    /// Exact bytes [`encode_entryplus3`] writes for this entry, including
    /// the leading 4-byte "value follows" boolean.
    pub fn xdr_len(&self) -> usize {
        let attrs = 4 + self.name_attributes.map_or(0, |_| FATTR3_XDR_LEN);
        let handle = 4 + self.name_handle.as_ref().map_or(0, NfsFh3::xdr_len);
        self.dir_info_len() + attrs + handle
    }

    /// The part of [`xdr_len`](Self::xdr_len) that is "directory
    /// information" for READDIRPLUS's `dircount`: the entry without its
    /// attributes and handle (the same as the matching [`Entry3::xdr_len`]).
    pub fn dir_info_len(&self) -> usize {
        4 + 8 + self.name.xdr_len() + 8
    }
}

/// Writes one list element of a READDIR reply: `TRUE`, then the entry.
pub fn encode_entry3(enc: &mut Encoder, e: &Entry3) {
    enc.bool(true);
    e.encode(enc);
}

/// Writes one list element of a READDIRPLUS reply: `TRUE`, then the entry.
pub fn encode_entryplus3(enc: &mut Encoder, e: &Entryplus3) {
    enc.bool(true);
    e.encode(enc);
}

/// Ends a streamed entry list: `FALSE` (no more entries), then `eof`.
pub fn encode_dirlist_end(enc: &mut Encoder, eof: bool) {
    enc.bool(false);
    enc.bool(eof);
}

/// `dirlist3`: the entries (an XDR linked list) and whether they reach the
/// end of the directory.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Dirlist3 {
    pub entries: Vec<Entry3>,
    pub eof: bool,
}

impl Encode for Dirlist3 {
    fn encode(&self, enc: &mut Encoder) {
        encode_list(enc, &self.entries);
        enc.bool(self.eof);
    }
}

impl Decode for Dirlist3 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(Dirlist3 { entries: dec.list(LIST_DECODE_MAX)?, eof: dec.bool()? })
    }
}

/// `dirlistplus3`: like [`Dirlist3`] with [`Entryplus3`] entries.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Dirlistplus3 {
    pub entries: Vec<Entryplus3>,
    pub eof: bool,
}

impl Encode for Dirlistplus3 {
    fn encode(&self, enc: &mut Encoder) {
        encode_list(enc, &self.entries);
        enc.bool(self.eof);
    }
}

impl Decode for Dirlistplus3 {
    fn decode(dec: &mut Decoder) -> Result<Self, XdrError> {
        Ok(Dirlistplus3 { entries: dec.list(LIST_DECODE_MAX)?, eof: dec.bool()? })
    }
}

/// `READDIR3resok`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Readdir3ResOk {
    pub dir_attributes: PostOpAttr,
    pub cookieverf: Cookieverf3,
    pub reply: Dirlist3,
}
xdr_struct!(Readdir3ResOk { dir_attributes, cookieverf, reply });

/// `READDIRPLUS3resok`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Readdirplus3ResOk {
    pub dir_attributes: PostOpAttr,
    pub cookieverf: Cookieverf3,
    pub reply: Dirlistplus3,
}
xdr_struct!(Readdirplus3ResOk { dir_attributes, cookieverf, reply });

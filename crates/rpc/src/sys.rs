//! Every `unsafe` of keel-rpc: the acceptor side of MIT Kerberos's
//! GSS-API (gssapi.h, gssapi_ext.h, gssapi_krb5.h through libgssapi-sys,
//! and the lucid context export, which that crate does not bind). Own
//! bindings rather than libgssapi's `ServerCtx`, because a completed
//! context's keys are exported through its raw handle, which libgssapi
//! keeps private.

use std::ffi::c_void;
use std::fmt;
use std::ptr;
use std::time::Duration;

use libgssapi_sys as g;

/// GSS_S_CONTINUE_NEEDED (RFC 2744 section 3.9.1).
const GSS_S_CONTINUE_NEEDED: u32 = 1;
/// The calling and routine error fields of a major status; the rest are
/// supplementary bits (a duplicate or out-of-order token).
const GSS_ERROR_BITS: u32 = 0xffff_0000;
const GSS_C_INDEFINITE: u32 = u32::MAX;
const GSS_C_ACCEPT: g::gss_cred_usage_t = 2;
const GSS_C_GSS_CODE: i32 = 1;
const GSS_C_MECH_CODE: i32 = 2;
/// GSS_S_BAD_MECH: a context that is not Kerberos V5's.
const GSS_S_BAD_MECH: u32 = 1 << 16;

/// DER bodies of the OIDs used here.
/// 1.2.840.113554.1.2.2: the Kerberos V5 mechanism (RFC 1964).
const OID_KRB5_MECH: &[u8] = b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02";
/// 1.2.840.113554.1.2.2.1: a Kerberos principal name.
const OID_KRB5_PRINCIPAL_NAME: &[u8] = b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02\x01";
/// 1.2.840.113554.1.2.1.4: a host-based service name, `service@host`.
const OID_HOSTBASED_SERVICE: &[u8] = b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x01\x04";
/// 1.2.840.113554.1.2.2.5.5: GSS_C_INQ_SSPI_SESSION_KEY, whose second
/// buffer is the context's current key's enctype as an OID.
const OID_INQ_SSPI_SESSION_KEY: &[u8] = b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02\x05\x05";
/// 1.2.840.113554.1.2.2.4: MIT's prefix of that enctype OID; the enctype
/// number is its last arc.
const OID_SESSION_KEY_ENCTYPE_PREFIX: &[u8] = b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02\x04";

/// A GSS-API status: major and minor (mechanism) codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GssStatus {
    pub major: u32,
    pub minor: u32,
}

impl GssStatus {
    fn check(major: u32, minor: u32) -> Result<u32, GssStatus> {
        if major & GSS_ERROR_BITS != 0 { Err(GssStatus { major, minor }) } else { Ok(major) }
    }

    fn display(f: &mut fmt::Formatter<'_>, code: u32, kind: i32) -> fmt::Result {
        let mut more = 0;
        loop {
            let mut minor = 0;
            let mut text = OutBuf::new();
            // SAFETY: every pointer is to a live local; GSS-API fills the
            // buffer, which OutBuf releases.
            let major =
                unsafe { g::gss_display_status(&mut minor, code, kind, ptr::null_mut(), &mut more, &mut text.0) };
            if major != 0 {
                return write!(f, "status {code:#x}");
            }
            f.write_str(&String::from_utf8_lossy(text.bytes()))?;
            if more == 0 {
                return Ok(());
            }
            f.write_str("; ")?;
        }
    }
}

impl fmt::Display for GssStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        GssStatus::display(f, self.major, GSS_C_GSS_CODE)?;
        if self.minor != 0 {
            f.write_str(" (")?;
            GssStatus::display(f, self.minor, GSS_C_MECH_CODE)?;
            f.write_str(")")?;
        }
        Ok(())
    }
}

impl std::error::Error for GssStatus {}

fn oid(der: &'static [u8]) -> g::gss_OID_desc {
    // GSS-API reads an OID given to it and never writes it.
    g::gss_OID_desc { length: der.len() as u32, elements: der.as_ptr() as *mut c_void }
}

fn in_buf(bytes: &[u8]) -> g::gss_buffer_desc {
    // An input buffer is read only (RFC 2744 section 3.2).
    g::gss_buffer_desc { length: bytes.len(), value: bytes.as_ptr() as *mut c_void }
}

/// A buffer GSS-API allocated, released when dropped.
struct OutBuf(g::gss_buffer_desc);

impl OutBuf {
    fn new() -> OutBuf {
        OutBuf(g::gss_buffer_desc { length: 0, value: ptr::null_mut() })
    }

    fn bytes(&self) -> &[u8] {
        if self.0.value.is_null() {
            return &[];
        }
        // SAFETY: GSS-API filled `value` with `length` bytes it owns until
        // the buffer is released, which needs `&mut self`.
        unsafe { std::slice::from_raw_parts(self.0.value as *const u8, self.0.length) }
    }
}

impl Drop for OutBuf {
    fn drop(&mut self) {
        let mut minor = 0;
        // SAFETY: an empty or GSS-API-allocated buffer, released once.
        unsafe { g::gss_release_buffer(&mut minor, &mut self.0) };
    }
}

/// A GSS-API name, released when dropped.
struct Name(g::gss_name_t);

impl Name {
    fn import(text: &str, name_type: &'static [u8]) -> Result<Name, GssStatus> {
        let (mut minor, mut name) = (0, ptr::null_mut());
        let mut buf = in_buf(text.as_bytes());
        let mut name_type = oid(name_type);
        // SAFETY: the buffer and the OID outlive the call; GSS-API copies
        // what it keeps into the new name.
        let major = unsafe { g::gss_import_name(&mut minor, &mut buf, &mut name_type, &mut name) };
        GssStatus::check(major, minor)?;
        Ok(Name(name))
    }

    fn display(&self) -> Result<String, GssStatus> {
        let (mut minor, mut text) = (0, OutBuf::new());
        // SAFETY: a live name; the output buffer is released by OutBuf.
        let major = unsafe { g::gss_display_name(&mut minor, self.0, &mut text.0, ptr::null_mut()) };
        GssStatus::check(major, minor)?;
        Ok(String::from_utf8_lossy(text.bytes()).into_owned())
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        if !self.0.is_null() {
            let mut minor = 0;
            // SAFETY: a name GSS-API made, released once.
            unsafe { g::gss_release_name(&mut minor, &mut self.0) };
        }
    }
}

/// The server's credential: its keys for one principal, to accept
/// contexts with.
pub struct AcceptorCred(g::gss_cred_id_t);

// SAFETY: MIT's credentials lock themselves (k5_mutex in the krb5 mech's
// credential); gss_accept_sec_context may use one from several threads.
unsafe impl Send for AcceptorCred {}
unsafe impl Sync for AcceptorCred {}

/// How a principal is written: `service@host` or a Kerberos principal.
#[derive(Debug, Clone, Copy)]
pub enum NameKind {
    HostBasedService,
    Principal,
}

impl AcceptorCred {
    /// The Kerberos V5 acceptor credential for `name`, from the keytab.
    /// Err(.., true): the name is not one GSS-API reads.
    pub fn acquire(name: &str, kind: NameKind) -> Result<AcceptorCred, (GssStatus, bool)> {
        let name_type = match kind {
            NameKind::HostBasedService => OID_HOSTBASED_SERVICE,
            NameKind::Principal => OID_KRB5_PRINCIPAL_NAME,
        };
        let name = Name::import(name, name_type).map_err(|e| (e, true))?;
        let mut mech = oid(OID_KRB5_MECH);
        let mut mechs = g::gss_OID_set_desc { count: 1, elements: &mut mech };
        let (mut minor, mut cred) = (0, ptr::null_mut());
        // SAFETY: the name, the OID set and its OID outlive the call; the
        // new credential is owned by the AcceptorCred made from it.
        let major = unsafe {
            g::gss_acquire_cred(
                &mut minor,
                name.0,
                GSS_C_INDEFINITE,
                &mut mechs,
                GSS_C_ACCEPT,
                &mut cred,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        GssStatus::check(major, minor).map_err(|e| (e, false))?;
        Ok(AcceptorCred(cred))
    }
}

impl Drop for AcceptorCred {
    fn drop(&mut self) {
        let mut minor = 0;
        // SAFETY: a credential GSS-API made, released once.
        unsafe { g::gss_release_cred(&mut minor, &mut self.0) };
    }
}

/// One acceptor context, established through GSS-API.
pub struct AcceptContext {
    ctx: g::gss_ctx_id_t,
}

// SAFETY: a context has one owner at a time (the server holds it under a
// mutex); GSS-API only forbids concurrent calls on one context.
unsafe impl Send for AcceptContext {}

/// What one establishment step gave: a token for the client, and whether
/// the context is complete.
pub struct AcceptStep {
    pub token: Vec<u8>,
    pub complete: bool,
}

/// Who a completed context names and how long it holds.
pub struct ContextNames {
    pub source: String,
    pub target: String,
    pub lifetime: Duration,
}

impl Default for AcceptContext {
    fn default() -> Self {
        AcceptContext { ctx: ptr::null_mut() }
    }
}

impl AcceptContext {
    /// gss_accept_sec_context with the client's `token`.
    pub fn step(&mut self, cred: &AcceptorCred, token: &[u8]) -> Result<AcceptStep, GssStatus> {
        let mut minor = 0;
        let mut input = in_buf(token);
        let mut output = OutBuf::new();
        // SAFETY: the context handle is ours (null before the first step),
        // the credential and the input outlive the call; the output buffer
        // is released by OutBuf; the optional outputs are null.
        let major = unsafe {
            g::gss_accept_sec_context(
                &mut minor,
                &mut self.ctx,
                cred.0,
                &mut input,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                &mut output.0,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        GssStatus::check(major, minor)?;
        Ok(AcceptStep { token: output.bytes().to_vec(), complete: major & GSS_S_CONTINUE_NEEDED == 0 })
    }

    /// The initiator's and the acceptor's names, and the time left.
    pub fn names(&self) -> Result<ContextNames, GssStatus> {
        let (mut minor, mut lifetime) = (0, 0);
        let (mut source, mut target) = (Name(ptr::null_mut()), Name(ptr::null_mut()));
        // SAFETY: a live context; the names GSS-API makes are released by
        // Name, the other outputs are null.
        let major = unsafe {
            g::gss_inquire_context(
                &mut minor,
                self.ctx,
                &mut source.0,
                &mut target.0,
                &mut lifetime,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        GssStatus::check(major, minor)?;
        let lifetime = if lifetime == GSS_C_INDEFINITE { Duration::MAX } else { Duration::from_secs(lifetime.into()) };
        Ok(ContextNames { source: source.display()?, target: target.display()?, lifetime })
    }

    /// The Kerberos enctype of the key the context's per-message tokens
    /// use (the acceptor subkey if there is one), read without touching
    /// the context.
    pub fn enctype(&self) -> Result<i32, GssStatus> {
        let (mut minor, mut set): (u32, g::gss_buffer_set_t) = (0, ptr::null_mut());
        let mut what = oid(OID_INQ_SSPI_SESSION_KEY);
        // SAFETY: a live context; the buffer set GSS-API makes is released
        // below.
        let major = unsafe { g::gss_inquire_sec_context_by_oid(&mut minor, self.ctx, &mut what, &mut set) };
        GssStatus::check(major, minor)?;
        let not_krb5 = GssStatus { major: GSS_S_BAD_MECH, minor: 0 };
        let mut enctype = Err(not_krb5);
        if !set.is_null() {
            // SAFETY: a set GSS-API returned holds `count` buffers.
            let buffers = unsafe { std::slice::from_raw_parts((*set).elements, (*set).count) };
            if let Some(b) = buffers.get(1).filter(|b| !b.value.is_null()) {
                // SAFETY: a buffer of the set, `length` bytes.
                let der = unsafe { std::slice::from_raw_parts(b.value as *const u8, b.length) };
                enctype = enctype_of_oid(der).ok_or(not_krb5);
            }
            // SAFETY: the set GSS-API made, released once.
            unsafe { g::gss_release_buffer_set(&mut minor, &mut set) };
        }
        enctype
    }

    pub fn get_mic(&mut self, message: &[u8]) -> Result<Vec<u8>, GssStatus> {
        let (mut minor, mut input, mut mic) = (0, in_buf(message), OutBuf::new());
        // SAFETY: a live context; input outlives the call, output released.
        let major = unsafe { g::gss_get_mic(&mut minor, self.ctx, 0, &mut input, &mut mic.0) };
        GssStatus::check(major, minor)?;
        Ok(mic.bytes().to_vec())
    }

    /// Ok: the major status, with supplementary bits only.
    pub fn verify_mic(&mut self, message: &[u8], mic: &[u8]) -> Result<u32, GssStatus> {
        let (mut minor, mut input, mut token) = (0, in_buf(message), in_buf(mic));
        // SAFETY: a live context; both inputs outlive the call.
        let major = unsafe { g::gss_verify_mic(&mut minor, self.ctx, &mut input, &mut token, ptr::null_mut()) };
        GssStatus::check(major, minor)
    }

    /// A wrap token of `message`, encrypted.
    pub fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, GssStatus> {
        let (mut minor, mut input, mut token) = (0, in_buf(message), OutBuf::new());
        // SAFETY: a live context; input outlives the call, output released.
        let major = unsafe { g::gss_wrap(&mut minor, self.ctx, 1, 0, &mut input, ptr::null_mut(), &mut token.0) };
        GssStatus::check(major, minor)?;
        Ok(token.bytes().to_vec())
    }

    pub fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, GssStatus> {
        let (mut minor, mut input, mut clear) = (0, in_buf(token), OutBuf::new());
        // SAFETY: a live context; input outlives the call, output released.
        let major =
            unsafe { g::gss_unwrap(&mut minor, self.ctx, &mut input, &mut clear.0, ptr::null_mut(), ptr::null_mut()) };
        GssStatus::check(major, minor)?;
        Ok(clear.bytes().to_vec())
    }

    /// The context's keys, by gss_krb5_export_lucid_sec_context, which
    /// ends the context (GSS-API deletes it).
    pub fn export_lucid(mut self) -> Result<LucidKeys, GssStatus> {
        let (mut minor, mut lucid) = (0, ptr::null_mut::<c_void>());
        // SAFETY: a live context; on success GSS-API deletes it and sets
        // the handle to null (so Drop does nothing), and returns a lucid
        // context we free below.
        let major = unsafe { gss_krb5_export_lucid_sec_context(&mut minor, &mut self.ctx, 1, &mut lucid) };
        GssStatus::check(major, minor)?;
        // SAFETY: version 1 was asked for and granted: the struct is v1's.
        let v1 = unsafe { &*(lucid as *const LucidContextV1) };
        let key = |k: &LucidKey| LucidKey::copy(k);
        let keys = LucidKeys {
            protocol: v1.protocol,
            send_seq: v1.send_seq,
            have_acceptor_subkey: v1.cfx_kd.have_acceptor_subkey != 0,
            ctx_key: key(&v1.cfx_kd.ctx_key),
            acceptor_subkey: key(&v1.cfx_kd.acceptor_subkey),
        };
        // SAFETY: the lucid context GSS-API returned, freed once.
        unsafe { gss_krb5_free_lucid_sec_context(&mut minor, lucid) };
        Ok(keys)
    }
}

impl Drop for AcceptContext {
    fn drop(&mut self) {
        if !self.ctx.is_null() {
            let mut minor = 0;
            // SAFETY: a context GSS-API made, deleted once.
            unsafe { g::gss_delete_sec_context(&mut minor, &mut self.ctx, ptr::null_mut()) };
        }
    }
}

/// An enctype OID's enctype: MIT's prefix, then the number in base 128.
fn enctype_of_oid(der: &[u8]) -> Option<i32> {
    let arc = der.strip_prefix(OID_SESSION_KEY_ENCTYPE_PREFIX)?;
    if arc.is_empty() || arc.len() > 4 {
        return None;
    }
    let mut n: i32 = 0;
    for (i, b) in arc.iter().enumerate() {
        let last = i == arc.len() - 1;
        if (b & 0x80 == 0) != last {
            return None;
        }
        n = (n << 7) | i32::from(b & 0x7f);
    }
    Some(n)
}

/// One key of a lucid context, copied out of it.
pub struct LucidKeyBytes {
    pub enctype: u32,
    pub bytes: Vec<u8>,
}

/// What the per-message tokens of an exported context need.
pub struct LucidKeys {
    /// 0: RFC 1964's tokens, 1: RFC 4121's (CFX).
    pub protocol: u32,
    /// The acceptor's next sequence number.
    pub send_seq: u64,
    pub have_acceptor_subkey: bool,
    /// The initiator's subkey (or the session key).
    pub ctx_key: LucidKeyBytes,
    /// Zero-length when there is none.
    pub acceptor_subkey: LucidKeyBytes,
}

// gssapi_krb5.h's lucid context, version 1.
#[repr(C)]
struct LucidKey {
    enctype: u32,
    length: u32,
    data: *mut c_void,
}

impl LucidKey {
    fn copy(&self) -> LucidKeyBytes {
        let bytes = if self.data.is_null() {
            Vec::new()
        } else {
            // SAFETY: the lucid context's key data is `length` bytes.
            unsafe { std::slice::from_raw_parts(self.data as *const u8, self.length as usize) }.to_vec()
        };
        LucidKeyBytes { enctype: self.enctype, bytes }
    }
}

#[repr(C)]
struct Rfc1964KeyData {
    sign_alg: u32,
    seal_alg: u32,
    ctx_key: LucidKey,
}

#[repr(C)]
struct CfxKeyData {
    have_acceptor_subkey: u32,
    ctx_key: LucidKey,
    acceptor_subkey: LucidKey,
}

#[repr(C)]
struct LucidContextV1 {
    version: u32,
    initiate: u32,
    endtime: u32,
    send_seq: u64,
    recv_seq: u64,
    protocol: u32,
    rfc1964_kd: Rfc1964KeyData,
    cfx_kd: CfxKeyData,
}

#[link(name = "gssapi_krb5")]
unsafe extern "C" {
    fn gss_krb5_export_lucid_sec_context(
        minor: *mut u32,
        context: *mut g::gss_ctx_id_t,
        version: u32,
        lucid: *mut *mut c_void,
    ) -> u32;
    fn gss_krb5_free_lucid_sec_context(minor: *mut u32, lucid: *mut c_void) -> u32;
}

#[cfg(test)]
mod tests {
    use super::enctype_of_oid;

    #[test]
    fn an_enctype_oid_s_last_arc_is_the_enctype() {
        let prefix = super::OID_SESSION_KEY_ENCTYPE_PREFIX;
        assert_eq!(enctype_of_oid(&[prefix, &[18]].concat()), Some(18));
        assert_eq!(enctype_of_oid(&[prefix, &[17]].concat()), Some(17));
        // 0x81 0x00 is 128 in base 128.
        assert_eq!(enctype_of_oid(&[prefix, &[0x81, 0x00]].concat()), Some(128));
        assert_eq!(enctype_of_oid(&[prefix, &[0x81]].concat()), None, "an unfinished arc");
        assert_eq!(enctype_of_oid(prefix), None);
        assert_eq!(enctype_of_oid(b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02\x05\x12"), None, "another OID");
    }
}

//! Keel's file handles taken apart and forged, as crates/store-local/src/handle.rs
//! lays them out.

use std::path::Path;

use nfs3_types::nfs3::nfs_fh3;

use super::client::fh_of;
use crate::server::TestServer;

/// The parts of a Keel handle:
/// version, ftype, kernel handle type, kernel handle length, export id
/// (BE u32), fsid (BE u64), kernel handle, 8-byte MAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandleParts {
    pub version: u8,
    pub ftype: u8,
    pub export_id: u32,
    pub fsid: u64,
    pub kernel: KernelHandle,
    pub mac: [u8; 8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelHandle {
    pub handle_type: i32,
    pub bytes: Vec<u8>,
}

pub fn parse_handle(fh: &[u8]) -> HandleParts {
    assert!(fh.len() >= 24, "handle of {} bytes", fh.len());
    let n = fh[3] as usize;
    assert_eq!(fh.len(), 16 + n + 8, "handle layout");
    HandleParts {
        version: fh[0],
        ftype: fh[1],
        export_id: u32::from_be_bytes(fh[4..8].try_into().unwrap()),
        fsid: u64::from_be_bytes(fh[8..16].try_into().unwrap()),
        kernel: KernelHandle { handle_type: i32::from(fh[2]), bytes: fh[16..16 + n].to_vec() },
        mac: fh[16 + n..].try_into().unwrap(),
    }
}

/// The handle bytes before the MAC.
pub fn handle_body(p: &HandleParts) -> Vec<u8> {
    let mut b = vec![p.version, p.ftype, p.kernel.handle_type as u8, p.kernel.bytes.len() as u8];
    b.extend_from_slice(&p.export_id.to_be_bytes());
    b.extend_from_slice(&p.fsid.to_be_bytes());
    b.extend_from_slice(&p.kernel.bytes);
    b
}

pub fn build_handle(p: &HandleParts) -> nfs_fh3 {
    let mut b = handle_body(p);
    b.extend_from_slice(&p.mac);
    fh_of(&b)
}

/// SipHash-2-4 under the server's handle key, as Keel computes the MAC.
pub fn handle_mac(key: &[u8; 16], body: &[u8]) -> [u8; 8] {
    use std::hash::Hasher;
    let k0 = u64::from_le_bytes(key[..8].try_into().unwrap());
    let k1 = u64::from_le_bytes(key[8..].try_into().unwrap());
    // std's SipHasher is SipHash-2-4; deprecated only in favour of
    // DefaultHasher, whose algorithm is unspecified.
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new_with_keys(k0, k1);
    h.write(body);
    h.finish().to_be_bytes()
}

/// The server's handle key, from its state directory.
pub fn handle_key(server: &TestServer) -> [u8; 16] {
    let bytes = std::fs::read(server.base.join("state/handle.key")).expect("read handle key");
    bytes[..16].try_into().expect("16-byte key")
}

/// name_to_handle_at(2) of `path` on the host (not following a final symlink).
pub fn kernel_handle(path: &Path) -> KernelHandle {
    #[repr(C)]
    struct RawHandle {
        handle_bytes: u32,
        handle_type: i32,
        f_handle: [u8; 128],
    }
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut raw = RawHandle { handle_bytes: 128, handle_type: 0, f_handle: [0; 128] };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: raw is a struct file_handle with 128 bytes of handle storage.
    let r = unsafe { libc::name_to_handle_at(libc::AT_FDCWD, c.as_ptr(), (&raw mut raw).cast(), &mut mount_id, 0) };
    assert_eq!(r, 0, "name_to_handle_at {}: {}", path.display(), std::io::Error::last_os_error());
    KernelHandle { handle_type: raw.handle_type, bytes: raw.f_handle[..raw.handle_bytes as usize].to_vec() }
}

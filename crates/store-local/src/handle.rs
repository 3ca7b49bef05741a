//! Persistent file handles.
//!
//! Layout (at most 64 bytes, `keel_store::HANDLE_BYTES_MAX`: NFSv3's limit,
//! and the same handle serves NFSv4):
//!
//! ```text
//! 0      version (1)
//! 1      file type (FileType as u8)
//! 2      kernel handle type (u8)
//! 3      kernel handle length n (u8, at most 40)
//! 4..8   export id (u32, big-endian)
//! 8..16  fsid (u64, big-endian)
//! 16..   kernel handle (n bytes, from name_to_handle_at)
//! 16+n.. MAC (8 bytes): SipHash-2-4 under the server's handle key over all
//!        the bytes before it
//! ```
//!
//! The kernel handle makes the handle survive restarts (and work on an HA
//! peer that mounts the same file system). The MAC means a client can only
//! present handles this server issued: root may open any inode of a file
//! system by handle, so a forged kernel handle would otherwise reach files
//! outside the export.

use std::hash::Hasher;
use std::io::{self, Read};
use std::path::Path;

use bytes::{BufMut, Bytes, BytesMut};
use siphasher::sip::SipHasher24;

use crate::sys::KernelHandle;
use keel_store::FileType;
use keel_store::{StoreError, StoreResult};

pub const FH_BYTES_MAX: usize = keel_store::HANDLE_BYTES_MAX;
const FH_VERSION: u8 = 1;
const HEADER_BYTES: usize = 16;
const MAC_BYTES: usize = 8;
/// Longest kernel handle that fits. XFS and ext4 use 8 to 12 bytes, btrfs 20.
pub const KERNEL_HANDLE_IN_FH_MAX: usize = FH_BYTES_MAX - HEADER_BYTES - MAC_BYTES;

/// The secret that authenticates handles. It must stay the same across
/// restarts (and on both nodes of an HA pair) for handles to stay valid.
#[derive(Clone)]
pub struct HandleKey([u8; 16]);

impl std::fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandleKey(..)")
    }
}

impl HandleKey {
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        HandleKey(bytes)
    }

    pub fn random() -> io::Result<Self> {
        let mut k = [0; 16];
        crate::sys::random_bytes(&mut k)?;
        Ok(HandleKey(k))
    }

    /// Reads the key at `path`, creating it (mode 0600) with random bytes
    /// if there is none. Any other problem is an error: a new key would
    /// make every handle clients hold stale.
    pub fn load_or_create(path: &Path) -> io::Result<Self> {
        match std::fs::File::open(path) {
            Ok(mut f) => {
                use std::os::unix::fs::MetadataExt;
                let meta = f.metadata()?;
                if meta.mode() & 0o077 != 0 || meta.uid() != crate::sys::geteuid() {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "handle key {} is owned by uid {} with mode {:o}: whoever can read it can forge \
                             file handles; it must belong to this user with mode 0600",
                            path.display(),
                            meta.uid(),
                            meta.mode() & 0o7777
                        ),
                    ));
                }
                let mut k = [0; 16];
                f.read_exact(&mut k)
                    .map_err(|e| io::Error::new(e.kind(), format!("handle key {} is damaged: {e}", path.display())))?;
                Ok(HandleKey(k))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let key = HandleKey::random()?;
                keel_store::state_file::replace_durably(path, &key.0)?;
                Ok(key)
            }
            Err(e) => Err(io::Error::new(e.kind(), format!("cannot read handle key {}: {e}", path.display()))),
        }
    }

    fn mac(&self, data: &[u8]) -> [u8; MAC_BYTES] {
        let k0 = u64::from_le_bytes(self.0[..8].try_into().expect("8 bytes"));
        let k1 = u64::from_le_bytes(self.0[8..].try_into().expect("8 bytes"));
        let mut h = SipHasher24::new_with_keys(k0, k1);
        h.write(data);
        h.finish().to_be_bytes()
    }
}

/// A file handle as it travels on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileHandle(Bytes);

impl FileHandle {
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }

    /// The file system and kernel handle: the same file's handle in every
    /// export (`keel_store::Object::file_key`).
    pub fn file_key(&self) -> &[u8] {
        &self.0[8..self.0.len() - MAC_BYTES]
    }
}

/// The contents of a handle whose MAC checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedHandle {
    pub export_id: u32,
    pub fsid: u64,
    pub ftype: FileType,
    pub kernel: KernelHandle,
}

pub fn encode(
    key: &HandleKey,
    export_id: u32,
    fsid: u64,
    ftype: FileType,
    kernel: &KernelHandle,
) -> StoreResult<FileHandle> {
    let n = kernel.bytes.len();
    let kind = u8::try_from(kernel.handle_type).ok();
    let (Some(kind), true) = (kind, n <= KERNEL_HANDLE_IN_FH_MAX) else {
        tracing::error!(
            handle_type = kernel.handle_type,
            bytes = n,
            "kernel file handle does not fit a Keel handle (keel_store::HANDLE_BYTES_MAX)"
        );
        return Err(StoreError::NotSupported);
    };
    let mut b = BytesMut::with_capacity(HEADER_BYTES + n + MAC_BYTES);
    b.put_u8(FH_VERSION);
    b.put_u8(ftype as u8);
    b.put_u8(kind);
    b.put_u8(n as u8);
    b.put_u32(export_id);
    b.put_u64(fsid);
    b.put_slice(&kernel.bytes);
    let mac = key.mac(&b);
    b.put_slice(&mac);
    Ok(FileHandle(b.freeze()))
}

pub fn decode(key: &HandleKey, fh: &[u8]) -> StoreResult<ParsedHandle> {
    if fh.len() < HEADER_BYTES + MAC_BYTES || fh[0] != FH_VERSION {
        return Err(StoreError::BadHandle);
    }
    let n = fh[3] as usize;
    if fh.len() != HEADER_BYTES + n + MAC_BYTES {
        return Err(StoreError::BadHandle);
    }
    let (body, mac) = fh.split_at(HEADER_BYTES + n);
    let expected = key.mac(body);
    // Compare without an early exit.
    if mac.iter().zip(expected).fold(0, |acc, (a, b)| acc | (a ^ b)) != 0 {
        return Err(StoreError::BadHandle);
    }
    Ok(ParsedHandle {
        ftype: FileType::from_u8(fh[1]).ok_or(StoreError::BadHandle)?,
        export_id: u32::from_be_bytes(fh[4..8].try_into().expect("4 bytes")),
        fsid: u64::from_be_bytes(fh[8..16].try_into().expect("8 bytes")),
        kernel: KernelHandle { handle_type: i32::from(fh[2]), bytes: fh[HEADER_BYTES..HEADER_BYTES + n].to_vec() },
    })
}

/// Wraps bytes from the wire without checking them (the cache is keyed by
/// the wire form; checking happens on a cache miss).
pub(crate) fn from_wire(bytes: Bytes) -> FileHandle {
    FileHandle(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kh() -> KernelHandle {
        KernelHandle { handle_type: 1, bytes: vec![1, 2, 3, 4, 5, 6, 7, 8] }
    }

    #[test]
    fn roundtrip() {
        let key = HandleKey::from_bytes([7; 16]);
        let fh = encode(&key, 3, 0xfeed, FileType::Directory, &kh()).unwrap();
        assert_eq!(fh.as_bytes().len(), 32);
        let p = decode(&key, fh.as_bytes()).unwrap();
        assert_eq!(p, ParsedHandle { export_id: 3, fsid: 0xfeed, ftype: FileType::Directory, kernel: kh() });
    }

    #[test]
    fn any_changed_bit_or_key_is_a_bad_handle() {
        let key = HandleKey::from_bytes([7; 16]);
        let fh = encode(&key, 3, 0xfeed, FileType::Regular, &kh()).unwrap();
        for i in 0..fh.as_bytes().len() {
            for bit in 0..8 {
                let mut forged = fh.as_bytes().to_vec();
                forged[i] ^= 1 << bit;
                assert!(decode(&key, &forged).is_err(), "byte {i} bit {bit}");
            }
        }
        assert!(matches!(decode(&HandleKey::from_bytes([8; 16]), fh.as_bytes()), Err(StoreError::BadHandle)));
    }

    #[test]
    fn truncated_and_oversized_handles_are_bad() {
        let key = HandleKey::from_bytes([7; 16]);
        let fh = encode(&key, 3, 1, FileType::Regular, &kh()).unwrap();
        for len in 0..fh.as_bytes().len() {
            assert!(decode(&key, &fh.as_bytes()[..len]).is_err());
        }
        let mut long = fh.as_bytes().to_vec();
        long.push(0);
        assert!(decode(&key, &long).is_err());
        let too_big = KernelHandle { handle_type: 1, bytes: vec![0; KERNEL_HANDLE_IN_FH_MAX + 1] };
        assert!(encode(&key, 1, 1, FileType::Regular, &too_big).is_err());
    }

    #[test]
    fn key_file_is_created_once_and_reused() {
        let dir = std::env::temp_dir().join(format!("keel-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("handle.key");
        let a = HandleKey::load_or_create(&path).unwrap();
        let b = HandleKey::load_or_create(&path).unwrap();
        assert_eq!(a.0, b.0);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::write(&path, b"short").unwrap();
        assert!(HandleKey::load_or_create(&path).is_err(), "a damaged key is an error, not a new key");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

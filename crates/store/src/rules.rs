//! The rules Keel decides itself, whatever store serves the call: what a
//! name may be, which verbs may act on which object, CREATE's three modes
//! and its verifier, the attributes a new object gets, the ACCESS bits,
//! MOUNT's path walk. `keel-store-local` and the simulated store both call
//! these, so a test on the simulator tests the policy the server runs.
//!
//! What the local store leaves to the kernel (rename into a directory's own
//! subtree, over a non-empty directory, file over directory; unlink of a
//! directory; permission bits; byte-range lock arithmetic) is not here: the
//! simulator models the kernel's answers (`sim`), and
//! `keel-store-local`'s `tests/sim_agrees.rs` checks them against Linux.

use crate::attr::{Attrs, FileType, SetAttrs, SetTime, Time, access};
use crate::types::{CreateMode, NodeKind};
use crate::{Cred, NAME_BYTES_MAX, SYMLINK_TARGET_BYTES_MAX, StoreError, StoreResult};

/// Permission bits of a file CREATE makes when the client sets none.
pub const CREATE_MODE_DEFAULT: u32 = 0o644;
/// Of a directory MKDIR makes.
pub const MKDIR_MODE_DEFAULT: u32 = 0o755;
/// Of a special file MKNOD makes.
pub const MKNOD_MODE_DEFAULT: u32 = 0o644;
/// The bits a mode may set (permissions, setuid, setgid, sticky).
pub const MODE_BITS: u32 = 0o7777;
/// Largest offset a READ may start at or a WRITE may reach (`off_t`).
pub const FILE_OFFSET_MAX: u64 = i64::MAX as u64;

fn errno(e: i32) -> StoreError {
    StoreError::errno(e)
}

/// Checks a name component: not empty, no '/', no NUL, at most
/// [`NAME_BYTES_MAX`] bytes. Every store checks names itself, whatever the
/// protocol layer did.
pub fn check_name(name: &[u8]) -> StoreResult<()> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(StoreError::InvalidName);
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(StoreError::NameTooLong);
    }
    Ok(())
}

/// "." or "..".
pub fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// ENOTDIR unless a directory.
pub fn require_dir(ftype: FileType) -> StoreResult<()> {
    if ftype != FileType::Directory {
        return Err(errno(libc::ENOTDIR));
    }
    Ok(())
}

/// READ, WRITE and truncation act on regular files: EISDIR for a
/// directory, EINVAL for anything else.
pub fn require_regular(ftype: FileType) -> StoreResult<()> {
    match ftype {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(errno(libc::EISDIR)),
        _ => Err(errno(libc::EINVAL)),
    }
}

/// A new entry `name` in a `dir` (CREATE, MKDIR, SYMLINK, MKNOD, LINK):
/// `dir` a directory, `name` a valid name, and "." or ".." exist already.
pub fn check_new_entry(dir: FileType, name: &[u8]) -> StoreResult<()> {
    require_dir(dir)?;
    check_name(name)?;
    if is_dot(name) {
        return Err(errno(libc::EEXIST));
    }
    Ok(())
}

/// SYMLINK's target: not empty, no NUL (EINVAL), at most
/// [`SYMLINK_TARGET_BYTES_MAX`] bytes.
pub fn check_symlink_target(target: &[u8]) -> StoreResult<()> {
    if target.is_empty() || target.contains(&0) {
        return Err(errno(libc::EINVAL));
    }
    if target.len() > SYMLINK_TARGET_BYTES_MAX {
        return Err(StoreError::NameTooLong);
    }
    Ok(())
}

/// MKNOD of `kind` by `cred`: the file type and device numbers it makes.
/// Device nodes are root's business, whatever capabilities linger (EPERM).
pub fn mknod_kind(cred: &Cred, kind: NodeKind) -> StoreResult<(FileType, (u32, u32))> {
    let made = match kind {
        NodeKind::Char { major, minor } => (FileType::CharDevice, (major, minor)),
        NodeKind::Block { major, minor } => (FileType::BlockDevice, (major, minor)),
        NodeKind::Socket => (FileType::Socket, (0, 0)),
        NodeKind::Fifo => (FileType::Fifo, (0, 0)),
    };
    if matches!(kind, NodeKind::Char { .. } | NodeKind::Block { .. }) && !cred.is_root() {
        return Err(errno(libc::EPERM));
    }
    Ok(made)
}

/// LINK of a `file` of export `file_export` as `name` in `dir` of export
/// `dir_export`: within one export (EXDEV), never a directory (EISDIR).
pub fn check_link(file: FileType, file_export: u32, dir: FileType, dir_export: u32, name: &[u8]) -> StoreResult<()> {
    check_new_entry(dir, name)?;
    if file_export != dir_export {
        return Err(errno(libc::EXDEV));
    }
    if file == FileType::Directory {
        return Err(errno(libc::EISDIR));
    }
    Ok(())
}

/// REMOVE and RMDIR of `name` in `dir`. As knfsd, "." and ".." are never
/// removed by name: EINVAL for ".", ENOTEMPTY for "..".
pub fn check_unlink(dir: FileType, name: &[u8]) -> StoreResult<()> {
    require_dir(dir)?;
    check_name(name)?;
    match name {
        b"." => Err(errno(libc::EINVAL)),
        b".." => Err(errno(libc::ENOTEMPTY)),
        _ => Ok(()),
    }
}

/// RENAME's own checks, before the file system's: both directories, valid
/// names that are not "." or ".." (EINVAL), one export (EXDEV).
pub fn check_rename(
    (from_dir, from_export): (FileType, u32),
    from: &[u8],
    (to_dir, to_export): (FileType, u32),
    to: &[u8],
) -> StoreResult<()> {
    require_dir(from_dir)?;
    require_dir(to_dir)?;
    check_name(from)?;
    check_name(to)?;
    if is_dot(from) || is_dot(to) {
        return Err(errno(libc::EINVAL));
    }
    if from_export != to_export {
        return Err(errno(libc::EXDEV));
    }
    Ok(())
}

/// MOUNT's path under an export root: its components, '/'-separated,
/// empty ones and "." skipped, each a valid name; ".." refused (EACCES).
pub fn path_components(path: &[u8]) -> impl Iterator<Item = StoreResult<&[u8]>> {
    path.split(|c| *c == b'/').filter(|c| !c.is_empty() && *c != b".").map(|c| {
        check_name(c)?;
        if c == b".." {
            return Err(errno(libc::EACCES));
        }
        Ok(c)
    })
}

/// A READ's start: EINVAL past [`FILE_OFFSET_MAX`].
pub fn check_read_offset(offset: u64) -> StoreResult<()> {
    if offset > FILE_OFFSET_MAX {
        return Err(errno(libc::EINVAL));
    }
    Ok(())
}

/// A WRITE's extent: EFBIG if it would end past [`FILE_OFFSET_MAX`].
pub fn check_write_extent(offset: u64, len: usize) -> StoreResult<()> {
    if offset.checked_add(len as u64).is_none_or(|end| end > FILE_OFFSET_MAX) {
        return Err(errno(libc::EFBIG));
    }
    Ok(())
}

/// ALLOCATE's and DEALLOCATE's range: EINVAL if empty, EFBIG if it would
/// end past [`FILE_OFFSET_MAX`] (fallocate(2)'s answers).
pub fn check_space_extent(offset: u64, len: u64) -> StoreResult<()> {
    if len == 0 {
        return Err(errno(libc::EINVAL));
    }
    if offset.checked_add(len).is_none_or(|end| end > FILE_OFFSET_MAX) {
        return Err(errno(libc::EFBIG));
    }
    Ok(())
}

/// A copy of `len` bytes from `src_offset` to `dst_offset`, `same_file`
/// if source and destination are one file: EINVAL for overlapping ranges
/// of one file (copy_file_range(2)'s answer, and RFC 7862's for COPY),
/// EFBIG for a destination past [`FILE_OFFSET_MAX`]. An empty copy is
/// fine (nothing happens).
pub fn check_copy(same_file: bool, src_offset: u64, dst_offset: u64, len: u64) -> StoreResult<()> {
    if src_offset > FILE_OFFSET_MAX || dst_offset.checked_add(len).is_none_or(|end| end > FILE_OFFSET_MAX) {
        return Err(errno(libc::EFBIG));
    }
    let overlap = len > 0 && src_offset < dst_offset.saturating_add(len) && dst_offset < src_offset.saturating_add(len);
    if same_file && overlap {
        return Err(errno(libc::EINVAL));
    }
    Ok(())
}

/// The bytes a copy of `len` from `src_offset` takes from a source of
/// `src_size` bytes: none from its end on.
pub fn copy_len(src_size: u64, src_offset: u64, len: u64) -> u64 {
    len.min(src_size.saturating_sub(src_offset))
}

/// SEEK in a file of `size` bytes that holds no holes (every byte before
/// the end is data): ENXIO at or past the end; data begins where asked,
/// the hole at the end.
pub fn seek_dense(size: u64, offset: u64, what: crate::SeekWhat) -> StoreResult<u64> {
    if offset >= size {
        return Err(errno(libc::ENXIO));
    }
    Ok(match what {
        crate::SeekWhat::Data => offset,
        crate::SeekWhat::Hole => size,
    })
}

/// Whether a READ that got `got` of `count` bytes at `offset` of a file
/// of `size` bytes reached the end.
pub fn read_eof(offset: u64, got: usize, count: usize, size: u64) -> bool {
    got < count || offset.saturating_add(got as u64) >= size
}

/// Whether a failed WRITE (errno `e`) may have taken data acknowledged
/// earlier with it, so the write verifier must change (as knfsd): all
/// but the errors that say nothing about the storage.
pub fn write_error_loses_data(e: Option<i32>) -> bool {
    !matches!(e, Some(libc::EAGAIN | libc::ESTALE))
}

/// SETATTR's guard: the ctime the client believes the object has
/// (`ctime` reads the real one, only when there is a guard); NotSync if
/// it has another.
pub fn check_guard(guard: Option<Time>, ctime: impl FnOnce() -> StoreResult<Time>) -> StoreResult<()> {
    match guard {
        Some(expected) if ctime()? != expected => Err(StoreError::NotSync),
        _ => Ok(()),
    }
}

/// knfsd's override for READ, WRITE, COMMIT, truncation and locks: root,
/// and the owner of the object whatever its mode (a file created 0444
/// must still take the data its creator writes). Others need the bits.
pub fn owner_overrides(cred: &Cred, owner_uid: u32) -> bool {
    cred.is_root() || cred.uid == owner_uid
}

/// Byte-range locks are taken on regular files only (EINVAL).
pub fn check_lock_file(ftype: FileType) -> StoreResult<()> {
    if ftype != FileType::Regular {
        return Err(errno(libc::EINVAL));
    }
    Ok(())
}

/// The [`access`] bits of `want` that read, write and execute (search)
/// permission on an object of type `ftype` give.
pub fn access_granted(ftype: FileType, read: bool, write: bool, exec: bool, want: u32) -> u32 {
    let mut granted = 0;
    if read {
        granted |= access::READ;
    }
    if write {
        granted |= access::MODIFY | access::EXTEND;
    }
    if ftype == FileType::Directory {
        if exec {
            granted |= access::LOOKUP;
        }
        if write {
            granted |= access::DELETE;
        }
    } else if exec {
        granted |= access::EXECUTE;
    }
    granted & want
}

/// The permission bits a new object is made with: the client's, or the
/// verb's default.
pub fn initial_mode(set: &SetAttrs, default: u32) -> u32 {
    set.mode.unwrap_or(default) & MODE_BITS
}

/// Whether SETATTR's mode applies to an object of type `ftype`: Linux has
/// no mode for symlinks, and knfsd ignores it.
pub fn mode_applies(ftype: FileType) -> bool {
    ftype != FileType::Symlink
}

/// A time a client sets, with nanoseconds brought into range.
pub fn client_time(t: Time) -> Time {
    Time { seconds: t.seconds, nanos: t.nanos.min(999_999_999) }
}

/// What a client's time setting makes of `old` at `now`.
pub fn set_time(t: SetTime, old: Time, now: Time) -> Time {
    match t {
        SetTime::Keep => old,
        SetTime::ServerNow => now,
        SetTime::To(t) => client_time(t),
    }
}

/// EXCLUSIVE CREATE's verifier, split into the two timestamps that store
/// it (as knfsd): (atime, mtime).
pub fn verifier_times(v: [u8; 8]) -> (Time, Time) {
    let mtime = u32::from_be_bytes(v[..4].try_into().expect("4 bytes"));
    let atime = u32::from_be_bytes(v[4..].try_into().expect("4 bytes"));
    (Time { seconds: i64::from(atime), nanos: 0 }, Time { seconds: i64::from(mtime), nanos: 0 })
}

/// The attributes a CREATE applies once the file exists: EXCLUSIVE stores
/// its verifier in the times (and nothing else); the others what the
/// client asked for but the mode (given at creation) and a size of 0
/// (what a new file has).
pub fn attrs_after_create(mode: CreateMode, set: &SetAttrs) -> SetAttrs {
    match mode {
        CreateMode::Exclusive(v) => {
            let (atime, mtime) = verifier_times(v);
            SetAttrs { atime: SetTime::To(atime), mtime: SetTime::To(mtime), ..SetAttrs::default() }
        }
        _ => SetAttrs { mode: None, size: set.size.filter(|s| *s != 0), ..*set },
    }
}

/// The attributes MKDIR, SYMLINK and MKNOD apply once the object exists:
/// owner and times (the mode was given at creation; a size means nothing).
pub fn attrs_after_make(set: &SetAttrs) -> SetAttrs {
    SetAttrs { mode: None, size: None, ..*set }
}

/// What CREATE does with a name that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateExisting {
    /// Answer with the file found.
    Use,
    /// UNCHECKED with a size: set it, then answer with the file.
    Resize(u64),
}

/// CREATE of a name that exists, found with attributes `found`: fine for
/// UNCHECKED (a regular file, resized if asked) and for the retransmission
/// of an EXCLUSIVE create (the verifier in its times, and, as knfsd
/// insists, still empty); otherwise EEXIST.
pub fn create_existing(mode: CreateMode, set: &SetAttrs, found: &Attrs) -> StoreResult<CreateExisting> {
    if found.ftype != FileType::Regular {
        return Err(errno(libc::EEXIST));
    }
    match mode {
        CreateMode::Guarded => Err(errno(libc::EEXIST)),
        CreateMode::Exclusive(v) => {
            let (atime, mtime) = verifier_times(v);
            let ours = found.atime.seconds == atime.seconds && found.mtime.seconds == mtime.seconds;
            if ours && found.size == 0 { Ok(CreateExisting::Use) } else { Err(errno(libc::EEXIST)) }
        }
        CreateMode::Unchecked => Ok(set.size.map_or(CreateExisting::Use, CreateExisting::Resize)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: StoreResult<impl std::fmt::Debug>) -> Option<i32> {
        r.expect_err("an error").raw_os_error()
    }

    #[test]
    fn names_are_single_components_of_at_most_255_bytes() {
        assert!(matches!(check_name(b""), Err(StoreError::InvalidName)));
        assert!(matches!(check_name(b"a/b"), Err(StoreError::InvalidName)));
        assert!(matches!(check_name(b"a\0b"), Err(StoreError::InvalidName)));
        assert!(check_name(&[b'x'; NAME_BYTES_MAX]).is_ok());
        assert!(matches!(check_name(&[b'x'; NAME_BYTES_MAX + 1]), Err(StoreError::NameTooLong)));
        assert!(check_name(b"..").is_ok(), "a valid component; the verbs decide what it means");
    }

    #[test]
    fn new_entries_need_a_directory_and_a_name_not_taken_by_dots() {
        assert_eq!(code(check_new_entry(FileType::Regular, b"x")), Some(libc::ENOTDIR));
        assert_eq!(code(check_new_entry(FileType::Regular, b".")), Some(libc::ENOTDIR), "the directory first");
        assert_eq!(code(check_new_entry(FileType::Directory, b".")), Some(libc::EEXIST));
        assert_eq!(code(check_new_entry(FileType::Directory, b"..")), Some(libc::EEXIST));
        assert!(matches!(check_new_entry(FileType::Directory, b""), Err(StoreError::InvalidName)));
        assert!(check_new_entry(FileType::Directory, b"x").is_ok());
    }

    #[test]
    fn dots_are_never_removed_or_renamed_by_name() {
        assert_eq!(code(check_unlink(FileType::Directory, b".")), Some(libc::EINVAL));
        assert_eq!(code(check_unlink(FileType::Directory, b"..")), Some(libc::ENOTEMPTY));
        assert_eq!(code(check_unlink(FileType::Symlink, b"x")), Some(libc::ENOTDIR));
        let d = (FileType::Directory, 1);
        assert_eq!(code(check_rename(d, b".", d, b"x")), Some(libc::EINVAL));
        assert_eq!(code(check_rename(d, b"x", d, b"..")), Some(libc::EINVAL));
        assert_eq!(code(check_rename(d, b"x", (FileType::Directory, 2), b"y")), Some(libc::EXDEV));
        assert_eq!(code(check_rename((FileType::Regular, 1), b".", d, b"y")), Some(libc::ENOTDIR));
        assert!(check_rename(d, b"x", d, b"x").is_ok(), "the same name: the file system's no-op");
    }

    #[test]
    fn links_stay_in_their_export_and_never_name_a_directory() {
        let dir = FileType::Directory;
        assert_eq!(code(check_link(FileType::Regular, 1, dir, 2, b"x")), Some(libc::EXDEV));
        assert_eq!(code(check_link(dir, 1, dir, 1, b"x")), Some(libc::EISDIR));
        assert_eq!(code(check_link(FileType::Regular, 1, dir, 1, b"..")), Some(libc::EEXIST));
        assert!(check_link(FileType::Symlink, 1, dir, 1, b"x").is_ok());
    }

    #[test]
    fn symlink_targets_and_device_nodes() {
        assert_eq!(code(check_symlink_target(b"")), Some(libc::EINVAL));
        assert_eq!(code(check_symlink_target(b"a\0")), Some(libc::EINVAL));
        assert!(matches!(check_symlink_target(&[b'a'; SYMLINK_TARGET_BYTES_MAX + 1]), Err(StoreError::NameTooLong)));
        let user = Cred::new(1000, 1000, &[]);
        assert_eq!(code(mknod_kind(&user, NodeKind::Block { major: 8, minor: 0 })), Some(libc::EPERM));
        assert_eq!(mknod_kind(&user, NodeKind::Fifo).unwrap(), (FileType::Fifo, (0, 0)));
        let dev = mknod_kind(&Cred::ROOT, NodeKind::Char { major: 1, minor: 3 }).unwrap();
        assert_eq!(dev, (FileType::CharDevice, (1, 3)));
    }

    #[test]
    fn mount_paths_skip_dots_and_refuse_dot_dot() {
        let parts: Vec<_> = path_components(b"/a//./b/").collect::<StoreResult<_>>().unwrap();
        assert_eq!(parts, [&b"a"[..], b"b"]);
        assert_eq!(code(path_components(b"a/../b").collect::<StoreResult<Vec<_>>>()), Some(libc::EACCES));
    }

    #[test]
    fn offsets_end_at_off_t_max() {
        assert!(check_read_offset(FILE_OFFSET_MAX).is_ok());
        assert_eq!(code(check_read_offset(FILE_OFFSET_MAX + 1)), Some(libc::EINVAL));
        assert!(check_write_extent(FILE_OFFSET_MAX - 1, 1).is_ok());
        assert_eq!(code(check_write_extent(FILE_OFFSET_MAX, 1)), Some(libc::EFBIG));
        assert_eq!(code(check_write_extent(u64::MAX, 1)), Some(libc::EFBIG));
    }

    #[test]
    fn space_copy_and_seek_ranges() {
        assert_eq!(code(check_space_extent(0, 0)), Some(libc::EINVAL));
        assert_eq!(code(check_space_extent(FILE_OFFSET_MAX, 1)), Some(libc::EFBIG));
        assert_eq!(code(check_space_extent(u64::MAX, 2)), Some(libc::EFBIG));
        assert!(check_space_extent(FILE_OFFSET_MAX - 1, 1).is_ok());
        assert_eq!(code(check_copy(true, 0, 10, 11)), Some(libc::EINVAL), "overlap in one file");
        assert_eq!(code(check_copy(true, 10, 0, 11)), Some(libc::EINVAL));
        assert!(check_copy(true, 0, 10, 10).is_ok(), "adjacent ranges do not overlap");
        assert!(check_copy(false, 0, 5, 10).is_ok(), "two files");
        assert!(check_copy(true, 0, 0, 0).is_ok(), "an empty copy");
        assert_eq!(code(check_copy(false, 0, FILE_OFFSET_MAX, 1)), Some(libc::EFBIG));
        assert_eq!(copy_len(10, 4, 100), 6);
        assert_eq!(copy_len(10, 12, 100), 0);
        assert_eq!(seek_dense(10, 3, crate::SeekWhat::Data).unwrap(), 3);
        assert_eq!(seek_dense(10, 3, crate::SeekWhat::Hole).unwrap(), 10);
        assert_eq!(code(seek_dense(10, 10, crate::SeekWhat::Hole)), Some(libc::ENXIO));
    }

    #[test]
    fn reads_end_writes_lose_data_and_guards_hold() {
        assert!(read_eof(0, 5, 10, 5));
        assert!(!read_eof(0, 4, 4, 5));
        assert!(read_eof(1, 4, 4, 5));
        assert!(write_error_loses_data(Some(libc::EIO)));
        assert!(!write_error_loses_data(Some(libc::ESTALE)));
        assert!(!write_error_loses_data(Some(libc::EAGAIN)));
        let t = |seconds| Time { seconds, nanos: 0 };
        assert!(check_guard(None, || panic!("not read without a guard")).is_ok());
        assert!(check_guard(Some(t(1)), || Ok(t(1))).is_ok());
        assert!(matches!(check_guard(Some(t(1)), || Ok(t(2))), Err(StoreError::NotSync)));
    }

    #[test]
    fn access_bits_follow_the_object_type() {
        let all = u32::MAX;
        let dir = access_granted(FileType::Directory, true, true, true, all);
        assert_eq!(dir, access::READ | access::MODIFY | access::EXTEND | access::LOOKUP | access::DELETE);
        let file = access_granted(FileType::Regular, false, false, true, all);
        assert_eq!(file, access::EXECUTE);
        assert_eq!(access_granted(FileType::Regular, true, true, true, access::READ), access::READ);
    }

    fn found(size: u64, atime: i64, mtime: i64) -> Attrs {
        let t = |seconds| Time { seconds, nanos: 0 };
        Attrs {
            ftype: FileType::Regular,
            mode: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size,
            used: 0,
            rdev_major: 0,
            rdev_minor: 0,
            fsid: 1,
            fileid: 9,
            atime: t(atime),
            mtime: t(mtime),
            ctime: t(mtime),
        }
    }

    #[test]
    fn create_of_an_existing_name_follows_rfc_1813() {
        let v = [0, 0, 0, 7, 0, 0, 0, 9];
        assert_eq!(verifier_times(v), (Time { seconds: 9, nanos: 0 }, Time { seconds: 7, nanos: 0 }));
        let none = SetAttrs::default();
        let ours = found(0, 9, 7);
        assert_eq!(create_existing(CreateMode::Exclusive(v), &none, &ours).unwrap(), CreateExisting::Use);
        let written = found(5, 9, 7);
        assert_eq!(code(create_existing(CreateMode::Exclusive(v), &none, &written)), Some(libc::EEXIST));
        let other = found(0, 1, 7);
        assert_eq!(code(create_existing(CreateMode::Exclusive(v), &none, &other)), Some(libc::EEXIST));
        assert_eq!(code(create_existing(CreateMode::Guarded, &none, &ours)), Some(libc::EEXIST));
        let sized = SetAttrs { size: Some(3), ..none };
        assert_eq!(create_existing(CreateMode::Unchecked, &sized, &ours).unwrap(), CreateExisting::Resize(3));
        let dir = Attrs { ftype: FileType::Directory, ..ours };
        assert_eq!(code(create_existing(CreateMode::Unchecked, &none, &dir)), Some(libc::EEXIST));
    }

    #[test]
    fn a_new_file_gets_the_verifier_or_the_clients_attributes() {
        let set = SetAttrs { mode: Some(0o600), size: Some(0), uid: Some(5), ..SetAttrs::default() };
        let rest = attrs_after_create(CreateMode::Guarded, &set);
        assert_eq!((rest.mode, rest.size, rest.uid), (None, None, Some(5)));
        let rest = attrs_after_create(CreateMode::Exclusive([0, 0, 0, 1, 0, 0, 0, 2]), &set);
        assert_eq!(rest.uid, None, "EXCLUSIVE sets nothing but the verifier");
        assert_eq!(rest.mtime, SetTime::To(Time { seconds: 1, nanos: 0 }));
        assert_eq!(initial_mode(&SetAttrs::default(), CREATE_MODE_DEFAULT), 0o644);
        assert_eq!(initial_mode(&SetAttrs { mode: Some(0o107777), ..SetAttrs::default() }, 0), 0o7777);
    }
}

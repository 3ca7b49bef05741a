//! The harness of Keel's integration tests (`crates/server/tests`), as a
//! library of its own so that every test file uses what it needs of it
//! without dead-code warnings (each file under `tests/` is a crate of its
//! own, which sees the helpers it does not call as unused).
//!
//! - [`server`]: a real `keel` process per test, with its configuration,
//!   exports, state and log in a directory of its own.
//! - [`disk`]: XFS file systems on loop devices, with a power switch, and
//!   tmpfs mounts.
//! - [`ha`]: a two-node Corosync/Pacemaker cluster in namespaces, with
//!   emulated power switches, a shared disk and fault injectors.
//! - [`netns`]: network namespaces of a test's own.
//! - [`procs`]: external programs run with a bound on time, temporary
//!   directories (on a disk where that matters: cache device files are
//!   refused in memory, and /tmp may be a tmpfs), free ports.
//! - [`nfs`]: speaking NFSv3 and MOUNT to the server: exact wire control
//!   (hand-built records, pipelining, raw replies), connections through the
//!   independent `nfs3_client` crate, handle forging, host-side inspection.
//!   Connections come from a reserved source port unless a test asks for an
//!   ordinary one, because exports are `secure` by default.
//! - [`nfs4`]: an NFSv4.1 client built by hand, which answers the
//!   server's callbacks on its connection.
//!
//! Everything here panics on failure: it is test code.

pub mod disk;
pub mod ha;
pub mod netns;
pub mod nfs;
pub mod nfs4;
pub mod procs;
pub mod server;

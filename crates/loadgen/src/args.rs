//! The options of `keel bench`, named after the tools the papers used
//! (IOzone, mdtest, IOR) where they have an equivalent.

use std::path::PathBuf;

use serde::Serialize;

use keel_bench_format::units::parse_size;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum BenchCommand {
    /// N-to-N sequential write then read, a file per process, COMMIT timed
    /// (IOzone -i 0 -i 1 -c -e in cluster mode).
    Seq(SeqArgs),
    /// Random 4 KiB write then read IOPS, a file per process, no client
    /// cache (IOzone -i 2 -I).
    Random(RandomArgs),
    /// Create, stat and remove empty files in a tree per process (mdtest
    /// -u -b -z -L).
    Meta(MetaArgs),
    /// File-per-process and single-shared-file (segmented, strided) write
    /// and read (IOR -F / -s / -t / -b).
    Ior(IorArgs),
}

#[derive(clap::Args, Debug, Clone, Serialize)]
pub struct CommonArgs {
    /// NFS server as HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:2049")]
    pub server: String,
    /// Exported path to mount, as the MOUNT protocol names it.
    #[arg(long)]
    pub export: String,
    /// MOUNT port, when it is not the NFS port (Keel serves MOUNT on the NFS port).
    #[arg(long)]
    pub mount_port: Option<u16>,
    /// Client counts to sweep. Each client has its own TCP connection, as a
    /// node does; with mpirun/srun each rank is one client.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub clients: Vec<u32>,
    /// Load generators per client (the papers' processes per node beyond 64
    /// nodes); they share their client's connection.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub threads: Vec<u32>,
    /// Repetitions of every point; the results give min/mean/max over them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    /// Shell command run before every repetition but the first, e.g. one
    /// that drops the server's caches.
    #[arg(long, value_name = "COMMAND")]
    pub between: Option<String>,
    /// Seconds to wait before every repetition but the first.
    #[arg(long, default_value_t = 0.0)]
    pub pause: f64,
    /// Name of this series in reports (default: the server name or address).
    #[arg(long)]
    pub label: Option<String>,
    /// What the server is, for the record ("keel 0.1.0", "nfs-ganesha 4.3").
    #[arg(long, default_value = "")]
    pub server_name: String,
    /// Export options, for the record ("sync,no_root_squash").
    #[arg(long, default_value = "")]
    pub export_options: String,
    /// Results file (JSON); a CSV with one row per run is written next to it.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Directory under the export the benchmark works in (created if
    /// missing; its run directories are removed afterwards).
    #[arg(long, default_value = "keel-bench")]
    pub dir: String,
    /// AUTH_SYS uid of the load.
    #[arg(long, default_value_t = 0)]
    pub uid: u32,
    /// AUTH_SYS gid of the load.
    #[arg(long, default_value_t = 0)]
    pub gid: u32,
    /// Call from ordinary source ports even as root (mount's noresvport).
    /// By default, as root, calls come from reserved ports (below 1024),
    /// as the kernel client's do, which `secure` exports require.
    #[arg(long = "noresvport")]
    pub noresvport: bool,
    /// Rank 0's HOST:PORT when launched by mpirun or srun on several nodes
    /// (rank 0 listens there, the other ranks connect to it).
    #[arg(long, env = "KEEL_BENCH_COORDINATOR")]
    pub coordinator: Option<String>,
    /// Leave the benchmark's files on the server.
    #[arg(long)]
    pub keep: bool,
    /// No progress line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// How durable a WRITE must be before the server answers.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stable {
    /// UNSTABLE writes, then COMMIT (what the Linux client does on close).
    Unstable,
    /// DATA_SYNC writes.
    Data,
    /// FILE_SYNC writes (what O_DIRECT and O_SYNC writes become).
    File,
}

#[derive(clap::Args, Debug, Clone, Serialize)]
pub struct SeqArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Data written (and read) in total, split evenly across the processes:
    /// the papers' 256 GiB rule, scaled to the machine.
    #[arg(long, default_value = "4G", value_parser = parse_size)]
    pub total: u64,
    /// Bytes per WRITE and READ call.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub record: u64,
    #[arg(long, value_enum, default_value_t = Stable::Unstable)]
    pub stable: Stable,
    /// Calls each process keeps in flight (the client's write-behind and read-ahead).
    #[arg(long, default_value_t = 16)]
    pub in_flight: usize,
}

#[derive(clap::Args, Debug, Clone, Serialize)]
pub struct RandomArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Size of each process's file (the papers: 4 GiB per client).
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    pub file_size: u64,
    /// Bytes per random READ and WRITE.
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    pub record: u64,
    /// Random operations per process and phase (default: the file's records, once each).
    #[arg(long)]
    pub ops: Option<u64>,
    /// Calls each process keeps in flight.
    #[arg(long, default_value_t = 1)]
    pub queue_depth: usize,
    /// FILE_SYNC by default: O_DIRECT writes of one record are FILE_SYNC on Linux.
    #[arg(long, value_enum, default_value_t = Stable::File)]
    pub stable: Stable,
}

#[derive(clap::Args, Debug, Clone, Serialize)]
pub struct MetaArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Files each process creates, stats and removes (mdtest -n).
    #[arg(long, short = 'n', default_value_t = 1000)]
    pub files: u64,
    /// Subdirectories per directory in each process's tree (mdtest -b).
    #[arg(long, short = 'b', default_value_t = 1)]
    pub branch: u32,
    /// Depth of each process's tree (mdtest -z); files go in the leaves.
    #[arg(long, short = 'z', default_value_t = 0)]
    pub depth: u32,
    /// COMMIT each file after creating it (mdtest -y).
    #[arg(long)]
    pub sync: bool,
}

/// IOR's file layouts.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Layout {
    /// A file per process (IOR -F).
    Fpp,
    /// One shared file, each process writing its own contiguous blocks.
    SsfSegmented,
    /// One shared file, processes interleaved transfer by transfer.
    SsfStrided,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Fpp => "fpp",
            Layout::SsfSegmented => "ssf-segmented",
            Layout::SsfStrided => "ssf-strided",
        }
    }
}

#[derive(clap::Args, Debug, Clone, Serialize)]
pub struct IorArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[arg(long, value_enum, value_delimiter = ',', default_value = "fpp,ssf-segmented,ssf-strided")]
    pub layout: Vec<Layout>,
    /// Bytes per call (IOR -t).
    #[arg(long, short = 't', default_value = "1M", value_parser = parse_size)]
    pub transfer: u64,
    /// Contiguous bytes per process per segment (IOR -b).
    #[arg(long, short = 'b', default_value = "64M", value_parser = parse_size)]
    pub block: u64,
    /// Segments (IOR -s).
    #[arg(long, short = 's', default_value_t = 1)]
    pub segments: u64,
    #[arg(long, value_enum, default_value_t = Stable::Unstable)]
    pub stable: Stable,
    /// Calls each process keeps in flight.
    #[arg(long, default_value_t = 16)]
    pub in_flight: usize,
}

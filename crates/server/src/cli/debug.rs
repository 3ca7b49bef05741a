//! `keel debug`: tools for testing a running server.

use clap::Subcommand;

use super::AdminArgs;
use super::out::outln;
use crate::admin;

#[derive(Subcommand)]
pub enum DebugCommand {
    /// Make storage calls of the running server fail, to test what clients
    /// see (needs fault_injection = true in the server's [server] table).
    #[command(subcommand)]
    Fault(FaultCommand),
}

#[derive(Subcommand)]
pub enum FaultCommand {
    /// Arm a fault: the next COUNT calls at POINT (on INODE, or on any
    /// object) fail with ERRNO, panic their worker with --panic, or wait
    /// --stall-ms milliseconds (a device that hangs) and go on.
    Arm {
        #[command(flatten)]
        server: AdminArgs,
        /// pwrite (WRITE's data) or fsync (COMMIT, stable metadata changes).
        #[arg(long, value_enum)]
        point: admin::FaultPointName,
        /// Only calls on the object with this inode number.
        #[arg(long)]
        inode: Option<u64>,
        /// The error number to fail with (5 is EIO).
        #[arg(long, required_unless_present_any = ["panic", "stall_ms"], conflicts_with_all = ["panic", "stall_ms"])]
        errno: Option<i32>,
        /// Panic the worker thread instead of failing the call.
        #[arg(long, conflicts_with = "stall_ms")]
        panic: bool,
        /// Stall the call this many milliseconds (1 to 60000), then let it go on.
        #[arg(long, value_name = "MS")]
        stall_ms: Option<u32>,
        /// How many calls it strikes.
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Disarm every fault.
    Clear {
        #[command(flatten)]
        server: AdminArgs,
    },
    /// List the armed faults (JSON).
    List {
        #[command(flatten)]
        server: AdminArgs,
    },
}

pub fn fault(cmd: FaultCommand) -> anyhow::Result<()> {
    let (server, request) = match cmd {
        FaultCommand::Arm { server, point, inode, errno, panic, stall_ms, count } => {
            let errno = if panic { None } else { errno };
            (server, admin::Request::FaultArm { point, inode, errno, stall_ms, count })
        }
        FaultCommand::Clear { server } => (server, admin::Request::FaultClear {}),
        FaultCommand::List { server } => (server, admin::Request::FaultList {}),
    };
    let answer = admin::call(&server.socket()?, &request)?;
    if !answer.is_null() {
        outln!("{answer}");
    }
    Ok(())
}

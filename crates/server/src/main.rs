//! `keel`: the server and the command that runs and asks it (see `cli`).

// Every `unsafe` of this crate is in `sys`.
#![deny(unsafe_code)]
// Output goes through `cli::out`, which ends quietly on a closed pipe.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod admin;
mod cache;
mod cli;
mod config;
mod ha;
mod kerberos;
mod metrics;
mod nfs4;
mod notify;
mod portmap;
mod probe;
mod recovery;
mod reload;
mod reply_journal;
mod serve;
mod state_dir;
mod stats;
#[allow(unsafe_code)]
mod sys;
mod tickle;
mod tools;
mod validate;

fn main() -> std::process::ExitCode {
    cli::main()
}

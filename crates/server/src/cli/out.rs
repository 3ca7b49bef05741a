//! The commands' standard output and error. `println!` panics when the
//! reader has gone (`keel stat -i 1 | head -3`: "failed printing to
//! stdout", exit 101); every command writes through [`outln!`] and
//! [`out!`] instead, which end the command quietly then, as a closed pipe
//! ends any Unix tool, and [`errln!`], which never fails a command for a
//! message it could not show.

use std::fmt;
use std::io::{ErrorKind, Write};

/// Writes to standard output, flushed (a command may run on for long, as
/// `keel stat -i`). A reader that has gone ends the process by SIGPIPE;
/// another write error ends it with a message and status 1.
pub fn write(args: fmt::Arguments) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == ErrorKind::BrokenPipe {
            crate::sys::die_of_sigpipe();
        }
        write_err(format_args!("keel: cannot write to standard output: {e}\n"));
        std::process::exit(1);
    }
}

/// Writes to standard error; a failure there has nowhere to be told.
pub fn write_err(args: fmt::Arguments) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// `println!` through [`write`].
macro_rules! outln {
    () => { $crate::cli::out::write(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::out::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` through [`write`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::out::write(format_args!($($arg)*)) };
}

/// `eprintln!` through [`write_err`].
macro_rules! errln {
    ($($arg:tt)*) => { $crate::cli::out::write_err(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {errln, out, outln};

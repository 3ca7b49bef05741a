//! What a program tells about a call it ran, for statistics: the
//! dispatcher knows the program and procedure, but only the program knows
//! which export the call used, the status its reply carries and how many
//! bytes of data it read or wrote.

use std::cell::Cell;

/// Filled in by the program while it runs a call (through
/// [`CallContext::report`](crate::CallContext)), read by whoever counts
/// calls once the call is done. Every field is optional: a program that
/// reports nothing is still counted by procedure.
#[derive(Debug, Default)]
pub struct CallReport {
    export: Cell<Option<u32>>,
    status: Cell<Option<u32>>,
    read_bytes: Cell<u64>,
    write_bytes: Cell<u64>,
}

impl CallReport {
    /// The call used the export with this id (the last one set wins).
    pub fn set_export(&self, id: u32) {
        self.export.set(Some(id));
    }

    /// The status the program's reply carries (an NFS status, say).
    pub fn set_status(&self, status: u32) {
        self.status.set(Some(status));
    }

    /// Bytes of file data the call read.
    pub fn add_read_bytes(&self, n: u64) {
        self.read_bytes.set(self.read_bytes.get() + n);
    }

    /// Bytes of file data the call wrote.
    pub fn add_write_bytes(&self, n: u64) {
        self.write_bytes.set(self.write_bytes.get() + n);
    }

    pub fn export(&self) -> Option<u32> {
        self.export.get()
    }

    pub fn status(&self) -> Option<u32> {
        self.status.get()
    }

    pub fn read_bytes(&self) -> u64 {
        self.read_bytes.get()
    }

    pub fn write_bytes(&self) -> u64 {
        self.write_bytes.get()
    }
}

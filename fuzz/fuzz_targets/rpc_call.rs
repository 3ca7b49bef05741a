//! Arbitrary bytes as a client's TCP stream: record marking, call header,
//! AUTH_SYS and the arguments of the procedure the header names, with
//! decode/encode roundtrips. The checks live in `../rpc_call_check.rs`,
//! shared with the corpus replay test that CI runs on stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

// `control_byte` and `Outcome`'s counts are for the replay test.
#[allow(dead_code)]
#[path = "../rpc_call_check.rs"]
mod rpc_call_check;

fuzz_target!(|data: &[u8]| {
    rpc_call_check::check_stream(data);
});

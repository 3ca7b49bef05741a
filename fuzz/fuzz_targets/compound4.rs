//! Arbitrary bytes as the arguments of an NFSv4 COMPOUND (or a reply, or a
//! callback), read as the server reads them. The checks live in
//! `../compound4_check.rs`, shared with the replay test that CI runs on
//! stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../compound4_check.rs"]
mod compound4_check;

fuzz_target!(|data: &[u8]| {
    compound4_check::check(data);
});

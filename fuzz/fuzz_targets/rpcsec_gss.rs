//! Arbitrary bytes as RPCSEC_GSS's wire types (RFC 2203): credentials,
//! context establishment arguments and results, integrity and privacy
//! bodies, and call headers carrying them. The checks live in
//! `../rpcsec_gss_check.rs`, shared with the replay test that CI runs on
//! stable.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../rpcsec_gss_check.rs"]
mod rpcsec_gss_check;

fuzz_target!(|data: &[u8]| {
    rpcsec_gss_check::check(data);
});

//! Runs the `rpcsec_gss` fuzz target's checks (`fuzz/rpcsec_gss_check.rs`)
//! on stable: over the committed corpus (fuzz/corpus/rpcsec_gss), over
//! well-formed seeds of each kind, every prefix of them and deterministic
//! mutations. Writes the seeds with `KEEL_SEED_DIR=dir cargo test -p
//! keel-rpc --test fuzz_gss -- --ignored write_seeds`.

#[allow(dead_code)]
#[path = "../../../fuzz/rpcsec_gss_check.rs"]
mod rpcsec_gss_check;

use std::path::Path;

use bytes::Bytes;
use keel_rpc::gss::wire::{GssCred, GssInitRes, GssProc, GssService, IntegData, RPCSEC_GSS, encode_init_arg};
use keel_rpc::msg::{CallHeader, OpaqueAuth};
use keel_xdr::Encoder;
use rpcsec_gss_check::{check, control_byte};

fn with_control(kind: u8, bytes: &[u8]) -> Vec<u8> {
    [&[control_byte(kind)][..], bytes].concat()
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let cred = GssCred {
        proc_: GssProc::Data,
        seq_num: 17,
        service: GssService::Integrity,
        handle: Bytes::from_static(b"0123456789abcdef"),
    };
    let mut init_arg = Encoder::new();
    encode_init_arg(&mut init_arg, b"an AP-REQ of a few bytes");
    let mut init_res = Encoder::new();
    GssInitRes {
        handle: cred.handle.clone(),
        gss_major: 0,
        gss_minor: 0,
        seq_window: 128,
        gss_token: Bytes::from_static(b"AP-REP"),
    }
    .encode(&mut init_res);
    let mut integ = Encoder::new();
    IntegData { databody: Bytes::from_static(&[0, 0, 0, 17, 1, 2, 3, 4]), checksum: Bytes::from_static(b"mic!") }
        .encode(&mut integ);
    let mut privacy = Encoder::new();
    privacy.opaque(b"a wrap token");
    let mut header = Encoder::new();
    CallHeader {
        xid: 9,
        rpc_version: 2,
        prog: 100003,
        vers: 3,
        proc_: 1,
        cred: OpaqueAuth { flavor: RPCSEC_GSS, body: cred.encode() },
        verf: OpaqueAuth { flavor: RPCSEC_GSS, body: Bytes::from_static(b"a header mic") },
    }
    .encode(&mut header);
    vec![
        ("seed-cred", with_control(0, &cred.encode())),
        ("seed-init-arg", with_control(1, &init_arg.into_bytes())),
        ("seed-init-res", with_control(2, &init_res.into_bytes())),
        ("seed-integ", with_control(3, &integ.into_bytes())),
        ("seed-priv", with_control(4, &privacy.into_bytes())),
        ("seed-header", with_control(5, &header.into_bytes())),
    ]
}

#[test]
fn seeds_decode_and_their_prefixes_and_mutations_do_not_panic() {
    for (name, seed) in seeds() {
        assert!(check(&seed).decoded, "{name} decodes");
        for len in 0..seed.len() {
            check(&seed[..len]);
        }
        // Deterministic mutations: each byte set to a few values.
        for at in 1..seed.len() {
            for value in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut mutated = seed.clone();
                mutated[at] = value;
                check(&mutated);
            }
        }
    }
}

#[test]
fn the_committed_corpus_does_not_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/rpcsec_gss");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        check(&std::fs::read(entry.unwrap().path()).unwrap());
        files += 1;
    }
    assert!(files >= seeds().len(), "the corpus holds at least the seeds");
}

#[test]
#[ignore = "writes the seeds to KEEL_SEED_DIR"]
fn write_seeds() {
    let dir = std::env::var("KEEL_SEED_DIR").expect("KEEL_SEED_DIR");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, seed) in seeds() {
        std::fs::write(Path::new(&dir).join(name), seed).unwrap();
    }
}

//! Runs the `compound4` fuzz target's checks (`fuzz/compound4_check.rs`)
//! on stable: over the committed corpus, over well-formed seeds, every
//! prefix of them and a few thousand deterministic mutations. Writes the
//! seeds with `KEEL_SEED_DIR=dir cargo test -p keel-nfs4-proto --test
//! fuzz_check -- --ignored write_seeds`.

mod common;

#[allow(dead_code)]
#[path = "../../../fuzz/compound4_check.rs"]
mod compound4_check;

use std::path::Path;

use bytes::Bytes;
use common::*;
use compound4_check::{check, control_byte};
use keel_nfs4_proto::*;

fn with_control(kind: u8, bytes: Bytes) -> Vec<u8> {
    [&[control_byte(kind)][..], &bytes].concat()
}

/// Well-formed inputs of each of the four kinds.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let call = Compound4Args {
        tag: Tag4::default(),
        minorversion: 1,
        argarray: vec![
            NfsArgop4::Sequence(Sequence4Args { sa_sessionid: [1; 16], sa_sequenceid: 3, ..Default::default() }),
            NfsArgop4::Putfh(Putfh4Args { object: fh(24) }),
            NfsArgop4::Open(Open4Args {
                seqid: 0,
                share_access: OPEN4_SHARE_ACCESS_BOTH,
                share_deny: 0,
                owner: owner(9, "open id:1"),
                openhow: Openflag4::Open4Create(Createhow4::Exclusive4_1(CreatVerfAttr {
                    cva_verf: [3; 8],
                    cva_attrs: set_attrs(),
                })),
                claim: OpenClaim4::ClaimNull("new".into()),
            }),
            NfsArgop4::Setattr(Setattr4Args { stateid: stateid(1), obj_attributes: set_attrs() }),
            NfsArgop4::Getfh(()),
            NfsArgop4::Getattr(Getattr4Args { attr_request: Attrs4::known() }),
        ],
    };
    let session = Compound4Args {
        tag: "s".into(),
        minorversion: 2,
        argarray: vec![
            NfsArgop4::ExchangeId(ExchangeId4Args {
                eia_clientowner: ClientOwner4 { co_verifier: [1; 8], co_ownerid: "client".into() },
                eia_flags: 0,
                eia_state_protect: StateProtect4A::Sp4None,
                eia_client_impl_id: None,
            }),
            NfsArgop4::CreateSession(CreateSession4Args {
                csa_sec_parms: vec![CallbackSecParms4::AuthNone].into(),
                ..Default::default()
            }),
            NfsArgop4::Write(Write4Args { data: Bytes::from_static(b"data"), ..Default::default() }),
            NfsArgop4::Verify(Verify4Args { obj_attributes: full_attrs().to_fattr4(&Bitmap4::from_bits([1, 4, 33])) }),
            NfsArgop4::Illegal(9999),
        ],
    };
    let reply = Compound4Res {
        status: Nfsstat4::Ok,
        tag: Tag4::default(),
        resarray: vec![
            NfsResop4::Sequence(Nfs4Result::Ok(Sequence4ResOk::default())),
            NfsResop4::Getattr(Nfs4Result::Ok(Getattr4ResOk {
                obj_attributes: full_attrs().to_fattr4(&Attrs4::known()),
            })),
            NfsResop4::Lock(Lock4Res::Denied(Lock4Denied::default())),
        ],
    };
    let cb = CbCompound4Args {
        tag: Tag4::default(),
        minorversion: 1,
        callback_ident: 0,
        argarray: vec![
            NfsCbArgop4::CbSequence(CbSequence4Args::default()),
            NfsCbArgop4::CbRecall(CbRecall4Args { stateid: stateid(2), truncate: false, fh: fh(10) }),
        ],
    };
    let cb_reply = CbCompound4Res {
        status: Nfsstat4::Ok,
        tag: Tag4::default(),
        resarray: vec![
            NfsCbResop4::CbSequence(Nfs4Result::Ok(CbSequence4ResOk::default())),
            NfsCbResop4::CbRecall(Nfsstat4::Ok),
        ],
    };
    vec![
        ("call-open", with_control(0, encode(&call))),
        ("call-session", with_control(0, encode(&session))),
        ("reply-getattr", with_control(1, encode(&reply))),
        ("cb-call", with_control(2, encode(&cb))),
        ("cb-reply", with_control(3, encode(&cb_reply))),
    ]
}

#[test]
fn seeds_reach_the_operations_and_attributes() {
    for (name, seed) in seeds() {
        let out = check(&seed);
        assert!(out.ops >= 2 && out.op_errors == 0, "{name}: {out:?}");
    }
    let out = check(&seeds()[0].1);
    assert_eq!((out.ops, out.attr_lists), (6, 2), "OPEN's and SETATTR's attributes are read");
}

#[test]
fn prefixes_and_mutations_never_panic() {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for (_, seed) in seeds() {
        for len in 0..seed.len() {
            check(&seed[..len]);
        }
        for _ in 0..2000 {
            let mut input = seed.clone();
            for _ in 0..1 + next() % 4 {
                let at = 1 + (next() as usize) % (input.len() - 1);
                match next() % 4 {
                    0 => input[at] ^= 1 << (next() % 8),
                    1 => input[at] = 0xff,
                    2 => input[at] = (next() % 4) as u8,
                    _ => input.truncate(at.max(2)),
                }
            }
            check(&input);
        }
    }
}

#[test]
fn corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/compound4");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        check(&std::fs::read(&path).unwrap());
        files += 1;
    }
    assert!(files >= seeds().len(), "the seeds are in the corpus");
}

#[test]
#[ignore = "writes the seeds into $KEEL_SEED_DIR"]
fn write_seeds() {
    let dir = std::env::var("KEEL_SEED_DIR").expect("KEEL_SEED_DIR");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, seed) in seeds() {
        std::fs::write(Path::new(&dir).join(format!("seed-{name}")), seed).unwrap();
    }
}

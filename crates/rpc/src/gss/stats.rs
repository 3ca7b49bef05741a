//! What RPCSEC_GSS has done, for `keel stat` and the metrics: contexts
//! established and evicted, and calls refused by cause.

use std::sync::atomic::{AtomicU64, Ordering};

/// Why a call with an RPCSEC_GSS credential was refused or dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// The credential does not decode, or misuses a procedure.
    BadCred,
    /// The call's verifier is not RPCSEC_GSS's.
    BadVerifier,
    /// A context handle the server does not know.
    UnknownContext,
    /// The context's ticket expired.
    Expired,
    /// The header's checksum does not verify.
    BadChecksum,
    /// The sequence number reached MAXSEQ.
    SequenceExhausted,
    /// A sequence number seen before or below the window (dropped).
    Replayed,
    /// An integrity or privacy body that does not verify or unwrap.
    BadBody,
    /// An establishment token GSS-API refused.
    BadToken,
}

impl AuthFailure {
    pub const ALL: [AuthFailure; 9] = [
        AuthFailure::BadCred,
        AuthFailure::BadVerifier,
        AuthFailure::UnknownContext,
        AuthFailure::Expired,
        AuthFailure::BadChecksum,
        AuthFailure::SequenceExhausted,
        AuthFailure::Replayed,
        AuthFailure::BadBody,
        AuthFailure::BadToken,
    ];

    /// The cause's name in `keel stat` and the metrics.
    pub fn name(self) -> &'static str {
        match self {
            AuthFailure::BadCred => "bad_cred",
            AuthFailure::BadVerifier => "bad_verifier",
            AuthFailure::UnknownContext => "unknown_context",
            AuthFailure::Expired => "expired",
            AuthFailure::BadChecksum => "bad_checksum",
            AuthFailure::SequenceExhausted => "sequence_exhausted",
            AuthFailure::Replayed => "replayed",
            AuthFailure::BadBody => "bad_body",
            AuthFailure::BadToken => "bad_token",
        }
    }
}

#[derive(Debug, Default)]
pub struct GssCounts {
    established: AtomicU64,
    sealed_in_process: AtomicU64,
    evicted: AtomicU64,
    failures: [AtomicU64; AuthFailure::ALL.len()],
}

impl GssCounts {
    pub(super) fn established(&self) {
        self.established.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn sealed_in_process(&self) {
        self.sealed_in_process.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn evicted(&self) {
        self.evicted.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn failed(&self, cause: AuthFailure) {
        self.failures[cause as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> GssSnapshot {
        GssSnapshot {
            established: self.established.load(Ordering::Relaxed),
            sealed_in_process: self.sealed_in_process.load(Ordering::Relaxed),
            evicted: self.evicted.load(Ordering::Relaxed),
            failures: AuthFailure::ALL.map(|c| (c, self.failures[c as usize].load(Ordering::Relaxed))),
        }
    }
}

/// [`GssCounts`] at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GssSnapshot {
    pub established: u64,
    /// Of those, the contexts whose tokens Keel makes itself (the rest:
    /// GSS-API).
    pub sealed_in_process: u64,
    pub evicted: u64,
    pub failures: [(AuthFailure, u64); AuthFailure::ALL.len()],
}

//! A randomized model test: a client writes, commits and truncates files
//! over NFS on a simulated store that fails writes and flushes, tears
//! writes and crashes; after every crash, every byte the client was told
//! is stable must be there. The client behaves as a real one: it keeps
//! UNSTABLE data until a COMMIT returns the verifier its WRITEs returned,
//! and resends (FILE_SYNC) when the verifier changed.
//!
//! Seeds 0..KEEL_SIM_SEEDS (default 300) run; KEEL_SIM_SEED=N runs one.
//! A failure names its seed, which replays it exactly.

use keel_nfs3_proto::nfs3::*;
use keel_store::sim::{CrashMode, Rng, SimAction, SimFaultRate, SimPoint};

use super::{Client, Server, rw};

const FILES: usize = 3;
const OPS_PER_RUN: usize = 120;
const FILE_BYTES_MAX: u64 = 64 * 1024;
const WRITE_BYTES_MAX: u64 = 9000;

/// What the client knows of one file.
struct Model {
    fh: NfsFh3,
    /// Per byte: the value the client last wrote (or saw after a crash);
    /// `None` where a failed write may have left anything.
    expected: Vec<Option<u8>>,
    /// Per byte: the value that must survive a crash, if any.
    stable: Vec<Option<u8>>,
    /// Per byte: which write last touched it (so a COMMIT only vouches for
    /// bytes no later write changed).
    generation: Vec<u64>,
    /// UNSTABLE writes not yet committed: offset, data, generation, verifier.
    pending: Vec<(u64, Vec<u8>, u64, [u8; 8])>,
}

impl Model {
    /// Extends the model to `len` bytes; a hole reads as zeros, or as
    /// anything (`None`) if the write that made it may not have happened.
    fn grow(&mut self, len: usize, hole: Option<u8>) {
        if self.expected.len() < len {
            self.expected.resize(len, hole);
            self.stable.resize(len, None);
            self.generation.resize(len, 0);
        }
    }
}

struct Run<'s> {
    c: Client<'s>,
    srv: &'s Server,
    rng: Rng,
    files: Vec<Model>,
    generation: u64,
    crashes: usize,
}

impl Run<'_> {
    fn write(&mut self, i: usize, stable: StableHow) {
        let offset = self.rng.below(FILE_BYTES_MAX);
        let len = 1 + self.rng.below(WRITE_BYTES_MAX) as usize;
        let byte = self.rng.below(255) as u8 + 1;
        let data = vec![byte; len];
        self.generation += 1;
        let g = self.generation;
        let r = self.c.write(&self.files[i].fh, offset, &data, stable);
        let m = &mut self.files[i];
        let (from, to) = (offset as usize, offset as usize + len);
        m.grow(to, if r.is_ok() { Some(0) } else { None });
        for b in from..to {
            m.generation[b] = g;
        }
        match r.into_result() {
            Ok(ok) => {
                for b in from..to {
                    m.expected[b] = Some(byte);
                    m.stable[b] = if stable == StableHow::Unstable { None } else { Some(byte) };
                }
                if stable == StableHow::Unstable {
                    m.pending.push((offset, data, g, ok.verf));
                }
            }
            Err(_) => {
                for b in from..to {
                    m.expected[b] = None;
                    m.stable[b] = None;
                }
            }
        }
    }

    fn commit(&mut self, i: usize) {
        let Ok(ok) = self.c.commit(&self.files[i].fh).into_result() else { return };
        let pending = std::mem::take(&mut self.files[i].pending);
        let mut resend = Vec::new();
        for (offset, data, g, verf) in pending {
            if verf == ok.verf {
                let m = &mut self.files[i];
                for (k, byte) in data.iter().enumerate() {
                    let b = offset as usize + k;
                    if b < m.stable.len() && m.generation[b] == g {
                        m.stable[b] = Some(*byte);
                    }
                }
            } else {
                resend.push((offset, data, g));
            }
        }
        // The verifier moved: what was written under the old one may be
        // gone; the client writes it again, this time FILE_SYNC.
        // Only the bytes no later write changed: a client resends its
        // pages as they are now.
        for (offset, data, g) in resend {
            let m = &self.files[i];
            let mut runs: Vec<(usize, usize)> = Vec::new();
            for k in 0..data.len() {
                let b = offset as usize + k;
                if b < m.generation.len() && m.generation[b] == g {
                    match runs.last_mut() {
                        Some((_, end)) if *end == k => *end = k + 1,
                        _ => runs.push((k, k + 1)),
                    }
                }
            }
            for (from, to) in runs {
                let at = offset + from as u64;
                let r = self.c.write(&self.files[i].fh, at, &data[from..to], StableHow::FileSync);
                let m = &mut self.files[i];
                for (k, byte) in data[from..to].iter().enumerate() {
                    let b = at as usize + k;
                    m.stable[b] = r.is_ok().then_some(*byte);
                    if !r.is_ok() {
                        m.expected[b] = None;
                    }
                }
            }
        }
    }

    fn truncate(&mut self, i: usize) {
        let size = self.rng.below(FILE_BYTES_MAX);
        self.generation += 1;
        let r = self.c.setattr(&self.files[i].fh, Sattr3 { size: Some(size), ..Default::default() }, None);
        let m = &mut self.files[i];
        let size = size as usize;
        if r.is_ok() {
            // A sync export commits the new size before the reply.
            m.grow(size, Some(0));
            m.expected.truncate(size);
            m.stable.truncate(size);
            m.generation.truncate(size);
            m.pending.retain(|(offset, ..)| (*offset as usize) < size);
        } else {
            for b in size.min(m.expected.len())..m.expected.len() {
                m.expected[b] = None;
                m.stable[b] = None;
                m.generation[b] = self.generation;
            }
        }
    }

    fn read_all(&self, i: usize) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let r = self.c.read(&self.files[i].fh, out.len() as u64, 32 * 1024).ok().expect("READ");
            out.extend_from_slice(&r.data);
            if r.eof {
                return out;
            }
        }
    }

    /// Reads return the newest data wherever the client knows it.
    fn check_reads(&self, seed: u64, op: usize) {
        for (i, m) in self.files.iter().enumerate() {
            let data = self.read_all(i);
            for (b, want) in m.expected.iter().enumerate() {
                if let Some(want) = want {
                    let got = data.get(b).copied();
                    assert_eq!(got, Some(*want), "seed {seed}, op {op}: file {i} byte {b} reads wrong");
                }
            }
        }
    }

    /// Crashes the store and checks that every stable byte survived.
    fn crash(&mut self, seed: u64, op: usize) {
        let mode = if self.rng.below(2) == 0 { CrashMode::DurableOnly } else { CrashMode::SomeUnsynced };
        self.srv.store.crash(mode);
        self.crashes += 1;
        for i in 0..self.files.len() {
            let data = self.read_all(i);
            let m = &mut self.files[i];
            for (b, want) in m.stable.iter().enumerate() {
                if let Some(want) = want {
                    assert_eq!(
                        data.get(b).copied(),
                        Some(*want),
                        "seed {seed}, op {op}, {mode:?}: file {i} byte {b} was acknowledged stable and is lost \
                         (replay: KEEL_SIM_SEED={seed} cargo test -p keel-nfs3 --test handlers crash_model)"
                    );
                }
            }
            // After a restart what is on disk is all there is.
            m.expected = data.iter().map(|b| Some(*b)).collect();
            m.stable = m.expected.clone();
            m.generation = vec![0; data.len()];
            m.pending.clear();
        }
        self.arm_faults();
    }

    /// Faults at random rates chosen by the seed (a crash disarms them).
    fn arm_faults(&mut self) {
        let rate = |rng: &mut Rng| [0, 0, 20_000, 50_000, 150_000][rng.below(5) as usize];
        let (write, torn, sync) = (rate(&mut self.rng), rate(&mut self.rng), rate(&mut self.rng));
        let store = &self.srv.store;
        store.inject_rate(SimFaultRate { point: SimPoint::Write, ppm: write, action: SimAction::Fail(libc::EIO) });
        store.inject_rate(SimFaultRate { point: SimPoint::Write, ppm: torn, action: SimAction::Torn });
        store.inject_rate(SimFaultRate { point: SimPoint::Sync, ppm: sync, action: SimAction::Fail(libc::EIO) });
    }
}

fn run(seed: u64) -> usize {
    let srv = Server::new(seed, rw());
    let c = srv.client(0);
    let root = c.root();
    let files = (0..FILES)
        .map(|i| Model {
            fh: c.new_file(&root, &format!("f{i}")),
            expected: Vec::new(),
            stable: Vec::new(),
            generation: Vec::new(),
            pending: Vec::new(),
        })
        .collect();
    let mut r = Run { c, srv: &srv, rng: Rng::new(seed ^ 0x6d6f_6465_6c00), files, generation: 0, crashes: 0 };
    r.arm_faults();
    for op in 0..OPS_PER_RUN {
        let i = r.rng.below(FILES as u64) as usize;
        match r.rng.below(20) {
            0..8 => r.write(i, StableHow::Unstable),
            8..10 => r.write(i, StableHow::FileSync),
            10..12 => r.write(i, StableHow::DataSync),
            12..16 => r.commit(i),
            16 => r.truncate(i),
            17 => r.check_reads(seed, op),
            _ if r.rng.below(4) == 0 => r.crash(seed, op),
            _ => r.commit(i),
        }
    }
    r.crash(seed, OPS_PER_RUN);
    r.crashes
}

#[test]
fn crash_model() {
    let seeds: Vec<u64> = match std::env::var("KEEL_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("KEEL_SIM_SEED is a number")],
        Err(_) => {
            let n = std::env::var("KEEL_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
            (0..n).collect()
        }
    };
    let started = std::time::Instant::now();
    let crashes: usize = seeds.iter().map(|&seed| run(seed)).sum();
    eprintln!("crash model: {} seeds, {crashes} crashes, {:?}", seeds.len(), started.elapsed());
    assert!(crashes >= seeds.len(), "every run ends with a crash");
}

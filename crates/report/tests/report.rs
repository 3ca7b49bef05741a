//! `keel report` end to end: result files built in code, a report written
//! to a temporary directory, and the page, figures and errors checked.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use keel_bench_format::result::{BenchResult, ClientFacts, HostFacts, Point, Run, SCHEMA, Target};
use keel_report::seeds::Seeds;
use keel_report::{self as report, Format, ReportArgs};

fn tmpdir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "keel-report-test-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(value: f64) -> Run {
    Run { value, seconds: 10.0, bytes: 1 << 30, ops: 1000, per_process: vec![value], errors: 0 }
}

fn result(label: &str, workload: &str, options: &str, points: Vec<Point>) -> BenchResult {
    BenchResult {
        schema: SCHEMA.into(),
        label: label.into(),
        workload: workload.into(),
        started: "2026-11-22T05:00:00Z".into(),
        finished: "2026-11-22T05:10:00Z".into(),
        command: vec!["keel".into(), "bench".into(), workload.into(), "--label".into(), label.into()],
        config: serde_json::json!({ "record_bytes": 1048576 }),
        target: Target {
            address: "10.0.0.1:2049".into(),
            export: "/srv/keel".into(),
            server: "keel 0.1.0".into(),
            export_options: options.into(),
            rtmax: 1 << 20,
            wtmax: 1 << 20,
            dtpref: 1 << 20,
        },
        client: ClientFacts {
            keel_version: "0.1.0".into(),
            ranks: 4,
            hosts: vec![HostFacts {
                hostname: "node01".into(),
                kernel: "6.1.0-28-amd64".into(),
                os: "Debian GNU/Linux 12".into(),
                cpus: 32,
                memory_bytes: 128 << 30,
            }],
        },
        points,
    }
}

/// Deterministic spread around `mean`, three runs.
fn runs(mean: f64, seed: u32) -> Vec<Run> {
    let wobble = f64::from(seed % 7 + 2) / 100.0;
    vec![run(mean * (1.0 - wobble)), run(mean), run(mean * (1.0 + wobble / 2.0))]
}

/// A sequential, a random and a metadata result for one server setup.
fn suite(label: &str, options: &str, speed: f64) -> Vec<BenchResult> {
    let loads = [1u32, 2, 4, 8, 16, 32, 64];
    let curve = |peak: f64, n: u32| peak * (1.0 - (-(f64::from(n)) / 6.0).exp());
    let mut seq = vec![];
    let mut random = vec![];
    for (i, &n) in loads.iter().enumerate() {
        let s = i as u32;
        seq.push(Point::new("write", n, 1, "MiB/s", runs(curve(900.0 * speed, n), s)));
        seq.push(Point::new("read", n, 1, "MiB/s", runs(curve(2300.0 * speed.powf(0.2), n), s + 1)));
        random.push(Point::new("write", n, 1, "IOPS", runs(curve(30_000.0 * speed, n), s + 2)));
        random.push(Point::new("read", n, 1, "IOPS", runs(curve(60_000.0 * speed.powf(0.3), n), s + 3)));
    }
    let mut meta = vec![];
    for (i, (c, t)) in
        [(1, 1), (2, 1), (4, 1), (8, 1), (16, 1), (32, 1), (64, 1), (64, 2), (64, 4), (64, 8)].into_iter().enumerate()
    {
        let n = c * t;
        let s = i as u32;
        meta.push(Point::new("create", c, t, "ops/s", runs(curve(9_000.0 * speed, n), s)));
        meta.push(Point::new("stat", c, t, "ops/s", runs(curve(70_000.0 * speed.powf(0.2), n), s + 1)));
        meta.push(Point::new("remove", c, t, "ops/s", runs(curve(11_000.0 * speed, n), s + 2)));
    }
    vec![
        result(label, "seq", options, seq),
        result(label, "random", options, random),
        result(label, "meta", options, meta),
    ]
}

fn write_results(dir: &Path, results: &[BenchResult]) -> Vec<PathBuf> {
    results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let p = dir.join(format!("{}-{}-{i}.json", r.workload, r.label.replace(' ', "_")));
            std::fs::write(&p, r.to_json()).unwrap();
            p
        })
        .collect()
}

fn args(files: Vec<PathBuf>, out: &Path) -> ReportArgs {
    ReportArgs { files, output: out.to_path_buf(), ..ReportArgs::default() }
}

/// (width, height) from a PNG's IHDR chunk, which must come first.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR", "IHDR is the first chunk");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

fn font_available() -> bool {
    keel_report::fonts::CANDIDATES.iter().any(|p| std::path::Path::new(p).exists())
}

const FIGURES: [&str; 7] =
    ["seq-write", "seq-read", "random-write", "random-read", "meta-create", "meta-stat", "meta-remove"];

#[test]
fn two_labels_with_references_make_the_papers_figures_and_tables() {
    let dir = tmpdir("full");
    let mut results = suite("keel sync", "sync", 1.0);
    results.extend(suite("keel async", "async", 2.5));
    // A point with hand-picked runs, to find its min/mean/max in the table.
    results[0].points[2] = Point::new("write", 2, 1, "MiB/s", vec![run(1234.5), run(1500.25), run(1765.5)]);
    let files = write_results(&dir, &results);
    let out = dir.join("report");
    let mut a = args(files, &out);
    a.reference = vec!["seeds".into()];
    a.width = 800;
    a.height = 500;
    let outcome = report::generate(&a).unwrap();
    assert_eq!(outcome.figures, FIGURES, "one figure per phase, in the papers' order");

    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    for label in ["keel sync", "keel async"] {
        assert!(html.contains(label), "page names {label}");
    }
    assert_eq!(html.matches("<svg ").count(), FIGURES.len(), "every figure inline");
    assert!(!html.contains("<link") && !html.contains("<script"), "self-contained");
    // The table row for 2 processes of seq write, keel sync: min, mean, max of the three runs.
    let section = &html[html.find("id=\"fig-seq-write\"").unwrap()..html.find("id=\"fig-seq-read\"").unwrap()];
    let row = &section[section.find("<tr><th>2</th>").expect("a row for 2 processes")..];
    let row = &row[..row.find("</tr>").unwrap()];
    let (lo, mean, hi) = (row.find(">1,234.5<"), row.find(">1,500.1<"), row.find(">1,765.5<"));
    assert!(lo.is_some() && mean.is_some() && hi.is_some(), "min/mean/max in {row}");
    assert!(lo < mean && mean < hi, "in the order min, mean, max: {row}");
    // Published references: named, with their sources.
    assert!(html.contains("BeeGFS 2015 (HPE Apollo 4200, 2x12 HDD, 2 targets)"));
    assert!(html.contains("Dell NSS 2013 (NL-SAS RAID60, sync)"));
    assert!(html.contains("beegfs-hpe-apollo-4200-benchmarks-2015.txt"));
    assert!(section.contains(">2,449.6<"), "BeeGFS Table 1 write mean at 4 processes in the seq write table");
    // Run metadata.
    assert!(html.contains("node01") && html.contains("Debian GNU/Linux 12") && html.contains("async"));

    for f in FIGURES {
        let svg = std::fs::read_to_string(out.join(format!("{f}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("viewBox=\"0 0 800 500\""), "{f}.svg");
        assert!(svg.contains("keel sync") && svg.contains("keel async"), "{f}.svg has both labels");
        let png = out.join(format!("{f}.png"));
        if font_available() {
            assert_eq!(png_size(&std::fs::read(&png).unwrap()), (800, 500), "{f}.png");
        } else {
            assert!(!png.exists() && outcome.png_skipped.is_some());
        }
    }
    let seq_write = std::fs::read_to_string(out.join("seq-write.svg")).unwrap();
    assert!(seq_write.contains("BeeGFS 2015"), "reference series in the legend");
    assert!(seq_write.contains("Sequential write"));
    let meta = std::fs::read_to_string(out.join("meta-create.svg")).unwrap();
    assert!(meta.contains("512"), "meta x axis reaches 64 x 8 processes");

    let csv = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    assert!(csv.lines().next().unwrap().starts_with("figure,series,kind,source"));
    assert!(csv.contains("seq-write,keel sync,measured,"));
    assert!(csv.contains(",reference,"));
    let runs = std::fs::read_to_string(out.join("runs.csv")).unwrap();
    assert_eq!(runs.matches("label,workload").count(), 1, "one header");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn without_references_the_page_has_none() {
    let dir = tmpdir("noref");
    let files = write_results(&dir, &suite("keel sync", "sync", 1.0)[..1]);
    let out = dir.join("r");
    let mut a = args(files, &out);
    a.format = vec![Format::Svg];
    let outcome = report::generate(&a).unwrap();
    assert_eq!(outcome.figures, ["seq-write", "seq-read"]);
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(!html.contains("BeeGFS") && !html.contains("Published references"));
    assert!(out.join("seq-write.svg").exists() && !out.join("seq-write.png").exists(), "--format svg");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn files_that_are_not_results_are_named_in_the_error() {
    let dir = tmpdir("bad");
    let out = dir.join("r");
    let cases: [(&str, &str, &str); 4] = [
        ("other.json", r#"{"name": "not a result"}"#, "not a keel bench result"),
        ("text.json", "hello", "not JSON"),
        ("newer.json", r#"{"schema": "keel-bench/2", "label": "x"}"#, "keel-bench/2"),
        ("broken.json", r#"{"schema": "keel-bench/1", "label": "x"}"#, "not a valid"),
    ];
    for (name, body, why) in cases {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        let err = format!("{:#}", report::generate(&args(vec![p.clone()], &out)).unwrap_err());
        assert!(err.contains(&p.display().to_string()), "{name}: error names the file: {err}");
        assert!(err.contains(why), "{name}: {err}");
    }
    let missing = dir.join("missing.json");
    let err = format!("{:#}", report::generate(&args(vec![missing.clone()], &out)).unwrap_err());
    assert!(err.contains("missing.json"), "{err}");
    assert!(report::generate(&args(vec![], &out)).is_err(), "nothing to report");
    let mut a = args(vec![], &out);
    a.reference = vec!["seeds:no-such-paper".into()];
    assert!(format!("{:#}", report::generate(&a).unwrap_err()).contains("no-such-paper"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn empty_results_duplicate_labels_and_mixed_units() {
    let dir = tmpdir("edge");
    let empty = result("empty", "seq", "sync", vec![]);
    let mb = result("keel", "seq", "sync", vec![Point::new("write", 1, 1, "MB/s", vec![run(10.0)])]);
    let mib = result("keel", "seq", "sync", vec![Point::new("write", 1, 1, "MiB/s", vec![run(10.0)])]);
    let no_runs = result(
        "idle",
        "seq",
        "sync",
        vec![Point::new("read", 1, 1, "MiB/s", vec![]), Point::new("read", u32::MAX, 2, "MiB/s", vec![run(1.0)])],
    );
    let files = write_results(&dir, &[empty, mb, mib, no_runs]);
    let out = dir.join("r");
    let mut a = args(files, &out);
    a.format = vec![Format::Svg];
    let outcome = report::generate(&a).unwrap();
    assert_eq!(outcome.figures, ["seq-write-mb-s", "seq-write-mib-s"], "units are never mixed in one figure");
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("no points"), "the empty file is reported");
    assert!(html.contains("not drawn (no runs)"), "the point without runs is reported");
    assert!(html.contains("not drawn (zero or too many processes)"), "clients x threads overflowing is reported");
    assert!(html.contains("keel (seq-keel-1.json)") && html.contains("keel (seq-keel-2.json)"), "labels told apart");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn without_a_font_svgs_and_the_page_are_still_written() {
    let dir = tmpdir("nofont");
    let files = write_results(&dir, &suite("keel sync", "sync", 1.0)[2..]);
    let out = dir.join("r");
    let mut a = args(files, &out);
    a.font = Some(dir.join("no-such-font.ttf"));
    let outcome = report::generate(&a).unwrap();
    let why = outcome.png_skipped.expect("PNGs skipped");
    assert!(why.contains("no-such-font.ttf"), "{why}");
    assert!(!out.join("meta-create.png").exists());
    assert!(out.join("meta-create.svg").exists());
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("PNG figures were not written"));
    assert!(html.contains("<svg "));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_published_numbers_alone() {
    let dir = tmpdir("seeds");
    let out = dir.join("r");
    let mut a = args(vec![], &out);
    a.reference = vec!["seeds:all".into()];
    a.format = vec![Format::Svg];
    let outcome = report::generate(&a).unwrap();
    for f in ["seq-write", "seq-read", "random-write", "random-read", "meta-create", "meta-stat", "ior-write-fpp"] {
        assert!(outcome.figures.iter().any(|x| x == f), "{f} in {:?}", outcome.figures);
    }
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("143,129"), "BeeGFS stat peak (Table 4)");
    assert!(html.contains("Not transcribed"));
    let seeds = Seeds::builtin().unwrap();
    for s in &seeds.series {
        assert!(!s.location.is_empty() && seeds.document(&s.document).is_some(), "{} has a source", s.id);
        assert!(html.contains(&format!("seeds:{}", s.id)), "{} listed", s.id);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Writes a sample report for people to look at:
/// `cargo test -p keel-report --test report -- --ignored sample`
/// (directory: $KEEL_REPORT_SAMPLE or /tmp/keel-report-sample).
#[test]
#[ignore]
fn sample() {
    let out =
        std::env::var_os("KEEL_REPORT_SAMPLE").map_or_else(|| PathBuf::from("/tmp/keel-report-sample"), PathBuf::from);
    let data = out.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut results = suite("keel sync", "sync", 1.0);
    results.extend(suite("keel async", "async", 2.5));
    results.extend(suite("nfs-ganesha sync", "sync", 0.6));
    let files = write_results(&data, &results);
    let mut a = args(files, &out);
    a.reference = vec!["seeds".into()];
    a.title = "Keel sample report (synthetic data)".into();
    let outcome = report::generate(&a).unwrap();
    println!("{}", outcome.index.display());
    let mut alone = args(vec![], &out.join("seeds-only"));
    alone.reference = vec!["seeds:all".into()];
    alone.title = "The seed papers' published results".into();
    println!("{}", report::generate(&alone).unwrap().index.display());
}

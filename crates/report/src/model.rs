//! From result files and selected seed series to figures: one figure per
//! (workload, phase, unit), one series per input file, the seeds' published
//! results overlaid. Pure data, so the grouping rules are testable without
//! drawing anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use keel_bench_format::result::BenchResult;

use super::seeds::{Basis, SeedSeries, Seeds};

/// One result file, with the label it is shown under.
#[derive(Debug, Clone)]
pub struct Input {
    pub path: PathBuf,
    /// The file's label, made unique among the inputs.
    pub label: String,
    /// Colour/marker slot, shared by inputs with the same label.
    pub style: usize,
    pub result: BenchResult,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FigureKey {
    pub workload: String,
    pub phase: String,
    pub unit: String,
}

#[derive(Debug, Clone)]
pub struct Figure {
    pub key: FigureKey,
    /// File stem: "seq-write", "ior-write-fpp", "seq-write-mb-s".
    pub id: String,
    pub title: String,
    pub y_label: String,
    /// Measured series first (in input order), then reference series.
    pub series: Vec<Series>,
    pub levels: Vec<LevelLine>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Index into the inputs.
    Measured(usize),
    /// Index into `Seeds::series`.
    Reference(usize),
}

#[derive(Debug, Clone)]
pub struct Series {
    /// Label in tables; for references the seed's name.
    pub name: String,
    /// Legend text: for references it adds the source.
    pub legend: String,
    pub origin: Origin,
    /// Colour/marker slot: the input's (one per label, so a setup has the
    /// same colour in every figure), or the position among the figure's
    /// references.
    pub style: usize,
    pub points: Vec<SeriesPoint>,
    /// Whether min and max are known (measured runs, or a table giving them).
    pub spread: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SeriesPoint {
    pub processes: u32,
    /// (clients, threads per client) when known.
    pub split: Option<(u32, u32)>,
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    pub runs: usize,
    pub errors: u64,
}

/// A published value without a client count: a horizontal line.
#[derive(Debug, Clone)]
pub struct LevelLine {
    pub name: String,
    pub legend: String,
    pub seed: usize,
    pub style: usize,
    pub value: f64,
    pub from: Option<u32>,
    pub to: Option<u32>,
}

/// Gives inputs that would share a figure distinct labels: the same label
/// in files of one workload gets the file name, and a number if that is not
/// enough either. The same label across workloads (seq, random, meta runs
/// of one setup) is the normal case and stays as it is.
pub fn disambiguate(labels: &[String], workloads: &[String], paths: &[PathBuf]) -> Vec<String> {
    let clashes =
        |v: &[String], i: usize| (0..v.len()).filter(|&j| v[j] == v[i] && workloads[j] == workloads[i]).count();
    let labels: Vec<String> =
        labels.iter().map(|l| if l.trim().is_empty() { "(no label)".to_string() } else { l.clone() }).collect();
    let named: Vec<String> = (0..labels.len())
        .map(|i| {
            if clashes(&labels, i) > 1 {
                let p = &paths[i];
                let name = p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into());
                format!("{} ({name})", labels[i])
            } else {
                labels[i].clone()
            }
        })
        .collect();
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    (0..named.len())
        .map(|i| {
            if clashes(&named, i) > 1 {
                let n = seen.entry((named[i].clone(), workloads[i].clone())).or_insert(0);
                *n += 1;
                format!("{} #{n}", named[i])
            } else {
                named[i].clone()
            }
        })
        .collect()
}

/// Colour slot of each input: one per distinct label, so a setup keeps its
/// colour in every figure.
pub fn style_slots(labels: &[String]) -> Vec<usize> {
    let mut distinct: Vec<&String> = vec![];
    labels
        .iter()
        .map(|l| {
            distinct.iter().position(|d| *d == l).unwrap_or_else(|| {
                distinct.push(l);
                distinct.len() - 1
            })
        })
        .collect()
}

/// Papers' order: sequential, random, metadata, IOR; write before read.
fn rank(key: &FigureKey) -> (usize, String, usize, String, String) {
    let w = ["seq", "random", "meta", "ior"].iter().position(|w| *w == key.workload).unwrap_or(4);
    let first = key.phase.split('-').next().unwrap_or("");
    let p = ["write", "read", "create", "stat", "remove"].iter().position(|p| *p == first).unwrap_or(5);
    (w, key.workload.clone(), p, key.phase.clone(), key.unit.clone())
}

fn title(key: &FigureKey) -> String {
    match (key.workload.as_str(), key.phase.as_str()) {
        ("seq", "write") => "Sequential write".into(),
        ("seq", "read") => "Sequential read".into(),
        ("random", "write") => "Random write".into(),
        ("random", "read") => "Random read".into(),
        ("meta", p) => format!("File {p}"),
        ("ior", p) => format!("IOR {p}"),
        (w, p) => format!("{w} {p}"),
    }
}

fn y_label(unit: &str) -> String {
    match unit {
        "MiB/s" => "Aggregate throughput (MiB/s)".into(),
        "IOPS" => "Aggregate I/O operations per second (IOPS)".into(),
        "ops/s" => "Aggregate operations per second (ops/s)".into(),
        u => format!("Aggregate ({u})"),
    }
}

fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// clients x threads, or None when a (hand-edited) file overflows u32,
/// where `Point::processes` would panic in a debug build.
pub fn processes(p: &keel_bench_format::result::Point) -> Option<u32> {
    p.clients.checked_mul(p.threads_per_client)
}

/// The drawable points of a result: those with runs, finite values and at
/// least one process (the x axis is logarithmic).
pub fn usable(p: &keel_bench_format::result::Point) -> bool {
    !p.runs.is_empty() && processes(p).is_some_and(|n| n > 0) && [p.min, p.mean, p.max].iter().all(|v| v.is_finite())
}

/// Builds the figures. With inputs, there is a figure per (workload, phase,
/// unit) they contain and references only join those; without inputs,
/// every selected reference gets its own figure.
pub fn figures(inputs: &[Input], seeds: &Seeds, selected: &[usize]) -> Vec<Figure> {
    let mut keys: BTreeSet<FigureKey> = BTreeSet::new();
    for i in inputs {
        for p in i.result.points.iter().filter(|p| usable(p)) {
            keys.insert(FigureKey {
                workload: i.result.workload.clone(),
                phase: p.phase.clone(),
                unit: p.unit.clone(),
            });
        }
    }
    if inputs.is_empty() {
        for &s in selected {
            let s = &seeds.series[s];
            keys.insert(FigureKey { workload: s.workload.clone(), phase: s.phase.clone(), unit: s.unit.clone() });
        }
    }
    let mut keys: Vec<FigureKey> = keys.into_iter().collect();
    keys.sort_by_key(rank);

    let mut ids = BTreeSet::new();
    keys.iter()
        .map(|key| {
            // A phase measured in two units gets two figures, each named with its unit.
            let split = keys.iter().filter(|k| k.workload == key.workload && k.phase == key.phase).count() > 1;
            let (mut id, title) = if split {
                (
                    slug(&format!("{}-{}-{}", key.workload, key.phase, key.unit)),
                    format!("{} ({})", title(key), key.unit),
                )
            } else {
                (slug(&format!("{}-{}", key.workload, key.phase)), title(key))
            };
            // Phases that differ only in punctuation must not share a file.
            let base = id.clone();
            for n in 2.. {
                if ids.insert(id.clone()) {
                    break;
                }
                id = format!("{base}-{n}");
            }
            let mut fig =
                Figure { key: key.clone(), id, title, y_label: y_label(&key.unit), series: vec![], levels: vec![] };
            add_measured(&mut fig, inputs);
            add_references(&mut fig, seeds, selected);
            fig
        })
        .collect()
}

fn add_measured(fig: &mut Figure, inputs: &[Input]) {
    for (idx, input) in inputs.iter().enumerate() {
        if input.result.workload != fig.key.workload {
            continue;
        }
        let mut points: Vec<SeriesPoint> = input
            .result
            .points
            .iter()
            .filter(|p| p.phase == fig.key.phase && p.unit == fig.key.unit && usable(p))
            .map(|p| SeriesPoint {
                processes: processes(p).unwrap_or(0),
                split: Some((p.clients, p.threads_per_client)),
                min: p.min,
                mean: p.mean,
                max: p.max,
                runs: p.runs.len(),
                errors: p.runs.iter().map(|r| r.errors).sum(),
            })
            .collect();
        if points.is_empty() {
            continue;
        }
        points.sort_by_key(|p| (p.processes, p.split));
        fig.series.push(Series {
            name: input.label.clone(),
            legend: input.label.clone(),
            origin: Origin::Measured(idx),
            style: input.style,
            points,
            spread: true,
        });
    }
}

/// "Name · source, section[, peak]": the legend says where a number is from.
pub fn reference_legend(seeds: &Seeds, s: &SeedSeries) -> String {
    let short = seeds.document(&s.document).map_or("", |d| d.short.as_str());
    let place = s.location.split(" (").next().unwrap_or(&s.location);
    let kind = match (&s.level, s.basis) {
        (_, Basis::Derived) => ", derived".to_string(),
        (Some(l), _) => match (l.processes_from, l.processes_to) {
            (Some(a), Some(b)) => format!(", {} over {a}\u{2013}{b} clients", l.kind),
            _ => format!(", {}, clients not stated", l.kind),
        },
        _ => String::new(),
    };
    format!("{} \u{b7} {short}, {place}{kind}", s.name)
}

fn add_references(fig: &mut Figure, seeds: &Seeds, selected: &[usize]) {
    let here = format!("{}/{}", fig.key.workload, fig.key.phase);
    let mut slot = 0;
    for &i in selected {
        let s = &seeds.series[i];
        if s.unit != fig.key.unit || !s.figures().any(|f| f == here) {
            continue;
        }
        let Some(f) = s.factor() else { continue };
        let legend = reference_legend(seeds, s);
        if let Some(l) = &s.level {
            fig.levels.push(LevelLine {
                name: s.name.clone(),
                legend,
                seed: i,
                style: slot,
                value: l.value * f,
                from: l.processes_from,
                to: l.processes_to,
            });
        } else {
            let points = s
                .points
                .iter()
                .map(|p| SeriesPoint {
                    processes: p.processes,
                    split: None,
                    min: p.min.unwrap_or(p.value) * f,
                    mean: p.value * f,
                    max: p.max.unwrap_or(p.value) * f,
                    runs: 0,
                    errors: 0,
                })
                .collect();
            let spread = s.points.iter().any(|p| p.min.is_some() || p.max.is_some());
            fig.series.push(Series {
                name: s.name.clone(),
                legend,
                origin: Origin::Reference(i),
                style: slot,
                points,
                spread,
            });
        }
        slot += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_bench_format::result::{ClientFacts, Point, Run, SCHEMA, Target};

    fn result(label: &str, workload: &str, points: Vec<Point>) -> BenchResult {
        BenchResult {
            schema: SCHEMA.into(),
            label: label.into(),
            workload: workload.into(),
            started: String::new(),
            finished: String::new(),
            command: vec![],
            config: serde_json::Value::Null,
            target: Target {
                address: String::new(),
                export: String::new(),
                server: String::new(),
                export_options: String::new(),
                rtmax: 0,
                wtmax: 0,
                dtpref: 0,
            },
            client: ClientFacts { keel_version: String::new(), ranks: 1, hosts: vec![] },
            points,
        }
    }

    fn run(v: f64) -> Run {
        Run { value: v, seconds: 1.0, bytes: 0, ops: 0, per_process: vec![], errors: 0 }
    }

    fn input(label: &str, workload: &str, points: Vec<Point>) -> Input {
        Input {
            path: PathBuf::from(format!("{label}.json")),
            label: label.into(),
            style: 0,
            result: result(label, workload, points),
        }
    }

    #[test]
    fn labels_are_made_unique() {
        let labels = vec!["a".to_string(), "a".into(), "b".into(), "a".into(), "a".into()];
        let workloads = vec!["seq".to_string(), "seq".into(), "seq".into(), "seq".into(), "meta".into()];
        let paths =
            vec![PathBuf::from("x/r.json"), "y/r.json".into(), "b.json".into(), "z.json".into(), "m.json".into()];
        let out = disambiguate(&labels, &workloads, &paths);
        assert_eq!(out, ["a (r.json) #1", "a (r.json) #2", "b", "a (z.json)", "a"]);
        assert_eq!(style_slots(&out), [0, 1, 2, 3, 4]);
        assert_eq!(style_slots(&["k".into(), "g".into(), "k".into()]), [0, 1, 0]);
    }

    #[test]
    fn one_figure_per_phase_and_unit_in_the_papers_order() {
        let inputs = vec![
            input(
                "k",
                "meta",
                vec![
                    Point::new("stat", 1, 1, "ops/s", vec![run(1.0)]),
                    Point::new("create", 1, 1, "ops/s", vec![run(1.0)]),
                ],
            ),
            input(
                "k2",
                "seq",
                vec![
                    Point::new("read", 2, 1, "MiB/s", vec![run(1.0)]),
                    Point::new("write", 2, 1, "MiB/s", vec![run(1.0)]),
                    Point::new("write", 1, 1, "MB/s", vec![run(1.0)]),
                    Point::new("write", 4, 1, "MiB/s", vec![]),
                ],
            ),
        ];
        let seeds = Seeds::builtin().unwrap();
        let figs = figures(&inputs, &seeds, &[]);
        let ids: Vec<&str> = figs.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["seq-write-mb-s", "seq-write-mib-s", "seq-read", "meta-create", "meta-stat"]);
        // The point without runs is left out; units are never mixed.
        let w = figs.iter().find(|f| f.id == "seq-write-mib-s").unwrap();
        assert_eq!(w.series[0].points.len(), 1);
        assert!(w.title.contains("MiB/s"));

        let odd = vec![input(
            "k",
            "ior",
            vec![
                Point::new("write fpp", 1, 1, "MiB/s", vec![run(1.0)]),
                Point::new("write-fpp", 1, 1, "MiB/s", vec![run(1.0)]),
            ],
        )];
        let ids: Vec<String> = figures(&odd, &seeds, &[]).into_iter().map(|f| f.id).collect();
        assert_eq!(ids, ["ior-write-fpp", "ior-write-fpp-2"]);
    }

    #[test]
    fn references_join_matching_figures_only() {
        let seeds = Seeds::builtin().unwrap();
        let all = seeds.select(&["seeds:all".into()]).unwrap();
        let inputs = vec![input("k", "seq", vec![Point::new("write", 1, 1, "MiB/s", vec![run(5.0)])])];
        let figs = figures(&inputs, &seeds, &all);
        assert_eq!(figs.len(), 1, "references add no figures of their own when there are inputs");
        let f = &figs[0];
        assert!(f.series.iter().any(|s| s.name.starts_with("BeeGFS 2015")), "IOR fpp is drawn on seq write");
        assert!(f.levels.iter().any(|l| l.name.starts_with("Dell NSS 2013")));
        let nss7 = f.levels.iter().find(|l| l.name.starts_with("Dell NSS7.0-HA")).unwrap();
        assert!((nss7.value - 1754.76).abs() < 0.01, "GB/s converted to MiB/s");
        assert!(f.series.iter().chain([]).all(|s| s.points.iter().all(|p| p.min <= p.mean && p.mean <= p.max)));

        let alone = figures(&[], &seeds, &all);
        assert!(alone.iter().any(|f| f.id == "meta-stat") && alone.iter().any(|f| f.id == "random-read"));
    }
}

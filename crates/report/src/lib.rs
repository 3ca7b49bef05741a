//! `keel report RESULTS.json...`: the figures and tables of the published
//! NFS benchmarks Keel is compared with (the seed papers: Dell's NFS white
//! papers and blog posts of 2012-2016 and a BeeGFS report of 2015, cited
//! in docs/benchmarks.md, "Reference systems") from `keel bench` result
//! files. Aggregate MiB/s, IOPS or ops/s
//! against the number of processes (base-2 axis), one figure per
//! workload phase, one line per result file (sync vs async, cache off vs
//! on, Keel vs another server), min–max bars from the runs, and the
//! papers' own published numbers as grey reference series
//! (`--reference seeds`), so a user sees where their system stands
//! against a 2013 Dell NSS or a 2015 BeeGFS server.
//!
//! ```text
//! keel report sync.json async.json ganesha.json --reference seeds -o report/
//! keel report --reference seeds:all            # the published numbers alone
//! ```
//!
//! Output: `DIR/index.html` (self-contained, SVGs inlined), `DIR/<figure>.svg`
//! and `.png`, `DIR/summary.csv` (one row per drawn value) and `DIR/runs.csv`
//! (one row per run of every input).

#![forbid(unsafe_code)]

pub mod fonts;
pub mod html;
pub mod model;
pub mod plot;
pub mod ratio;
pub mod seeds;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use plotters::prelude::{BitMapBackend, IntoDrawingArea, SVGBackend};

use keel_bench_format::result::{BenchResult, SCHEMA};
use model::{Figure, Input, Origin};
use seeds::Seeds;

#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// Result files written by `keel bench`; each becomes a series labelled
    /// with its `label` (duplicates get the file name).
    #[arg(value_name = "RESULTS.json")]
    pub files: Vec<PathBuf>,

    /// Directory for index.html, the figures and the CSV files (created if needed).
    #[arg(short, long, value_name = "DIR", default_value = "keel-report")]
    pub output: PathBuf,

    /// Published results to draw as reference series, from Dell's NFS white
    /// papers and blog posts (2012-2016) and a BeeGFS report (2015), the
    /// "seed papers": "seeds" (the headline series of every paper),
    /// "seeds:all", "seeds:<paper>" (dfc-2013, nss7-ha-2016, plain-nfs-blog,
    /// nss5-ha-blog, nss4-ha-blog, beegfs-2015) or "seeds:<series id>".
    /// The page lists each paper's title, author and date. Repeatable.
    #[arg(long = "reference", value_name = "SET")]
    pub reference: Vec<String>,

    /// Page title.
    #[arg(long, default_value = "Keel benchmark report")]
    pub title: String,

    /// Figure files to write next to the page (the page always inlines SVG).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "png,svg")]
    pub format: Vec<Format>,

    /// Figure width in pixels (SVG and PNG).
    #[arg(long, default_value_t = 960, value_parser = clap::value_parser!(u32).range(320..=8192))]
    pub width: u32,

    /// Figure height in pixels (SVG and PNG).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u32).range(240..=8192))]
    pub height: u32,

    /// A series label to compare the others against: adds tables of the
    /// ratio of means (page, ratios.csv, ratios.md).
    #[arg(long, value_name = "LABEL")]
    pub baseline: Option<String>,

    /// TrueType font for the text in PNGs (default: DejaVu Sans or
    /// Liberation Sans from the usual system paths). Without one, PNGs are
    /// skipped and the report says so.
    #[arg(long, value_name = "FILE.ttf")]
    pub font: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Png,
    Svg,
}

impl Default for ReportArgs {
    fn default() -> Self {
        ReportArgs {
            files: vec![],
            output: PathBuf::from("keel-report"),
            reference: vec![],
            title: "Keel benchmark report".into(),
            format: vec![Format::Png, Format::Svg],
            width: 960,
            height: 600,
            baseline: None,
            font: None,
        }
    }
}

/// What a report run produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub index: PathBuf,
    /// Figure ids, in page order ("seq-write", "meta-create", ...).
    pub figures: Vec<String>,
    /// Every file written.
    pub written: Vec<PathBuf>,
    /// Why PNGs were not written, when they were asked for and not written.
    pub png_skipped: Option<String>,
    /// Things left out or adjusted, also shown on the page.
    pub notes: Vec<String>,
}

/// `keel report`: writes the report and prints where it is.
pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    let out = generate(&args)?;
    for n in &out.notes {
        eprintln!("keel report: {n}");
    }
    println!(
        "keel report: wrote {} ({} figure{}, {} files in {})",
        out.index.display(),
        out.figures.len(),
        if out.figures.len() == 1 { "" } else { "s" },
        out.written.len(),
        args.output.display()
    );
    Ok(())
}

/// Reads one result file; the error names the file and says what is wrong
/// (not JSON, not a result, a result format this keel does not read).
pub fn load_result(path: &Path) -> anyhow::Result<BenchResult> {
    let p = path.display();
    let text = std::fs::read_to_string(path).with_context(|| format!("{p}: cannot read"))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| anyhow!("{p}: not a keel bench result (not JSON: {e})"))?;
    match value.get("schema").and_then(|s| s.as_str()) {
        None => {
            bail!("{p}: not a keel bench result (no \"schema\" field; keel report reads the files keel bench writes)")
        }
        Some(s) if s != SCHEMA => {
            let why = if s.starts_with("keel-bench/") { "written by another keel version" } else { "another format" };
            bail!("{p}: result format {s:?} ({why}); this keel reads {SCHEMA:?}")
        }
        Some(_) => {}
    }
    BenchResult::from_json(&text).map_err(|e| anyhow!("{p}: not a valid {SCHEMA} result: {e}"))
}

/// Does the work of [`run`] and reports what it wrote.
pub fn generate(args: &ReportArgs) -> anyhow::Result<Outcome> {
    if args.files.is_empty() && args.reference.is_empty() {
        bail!("nothing to report: give result files (keel bench output) and/or --reference seeds");
    }
    let seeds = Seeds::builtin()?;
    let selected = seeds.select(&args.reference)?;
    let results = args.files.iter().map(|f| load_result(f)).collect::<anyhow::Result<Vec<_>>>()?;
    let labels: Vec<String> = results.iter().map(|r| r.label.clone()).collect();
    let workloads: Vec<String> = results.iter().map(|r| r.workload.clone()).collect();
    let labels = model::disambiguate(&labels, &workloads, &args.files);
    let slots = model::style_slots(&labels);
    let inputs: Vec<Input> = labels
        .into_iter()
        .zip(slots)
        .zip(args.files.iter().zip(results))
        .map(|((label, style), (path, result))| Input { path: path.clone(), label, style, result })
        .collect();

    let mut notes = skipped_points(&inputs);
    let figures = model::figures(&inputs, &seeds, &selected);
    if figures.is_empty() {
        notes.push("no figures: the inputs contain no points with runs".into());
    }
    let drawn: BTreeSet<usize> = figures
        .iter()
        .flat_map(|f| {
            let series = f.series.iter().filter_map(|s| match s.origin {
                Origin::Reference(i) => Some(i),
                Origin::Measured(_) => None,
            });
            series.chain(f.levels.iter().map(|l| l.seed)).collect::<Vec<_>>()
        })
        .collect();
    let undrawn = selected.iter().filter(|i| !drawn.contains(i)).count();
    if undrawn > 0 {
        notes.push(format!(
            "{undrawn} of the {} selected reference series match no figure of these inputs (another workload \
             or phase); they are listed under Published references only",
            selected.len()
        ));
    }

    let dir = &args.output;
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create the output directory", dir.display()))?;
    let mut written = vec![];
    let write = |name: &str, data: &[u8], written: &mut Vec<PathBuf>| -> anyhow::Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, data).with_context(|| format!("{}: cannot write", path.display()))?;
        written.push(path);
        Ok(())
    };

    let size = (args.width, args.height);
    let want_png = args.format.contains(&Format::Png);
    let font = if want_png && !figures.is_empty() { Some(fonts::install(args.font.as_deref())) } else { None };
    let png_skipped = match &font {
        Some(Err(why)) => {
            let msg = format!("PNG figures were not written ({why}); the SVG figures and the page are complete");
            notes.push(msg.clone());
            Some(msg)
        }
        _ => None,
    };

    let mut svgs = vec![];
    let mut files = vec![];
    for f in &figures {
        let svg = render_svg(f, size)?;
        let mut mine = vec![];
        if args.format.contains(&Format::Svg) {
            let name = format!("{}.svg", f.id);
            write(&name, svg.as_bytes(), &mut written)?;
            mine.push(("SVG", name));
        }
        if let Some(Ok(fonts)) = &font {
            let name = format!("{}.png", f.id);
            let path = dir.join(&name);
            render_png(f, size, &path, fonts)?;
            written.push(path);
            mine.push(("PNG", name));
        }
        svgs.push(svg);
        files.push(mine);
    }

    let ratios = match &args.baseline {
        Some(b) => ratio::ratios(&figures, b)?,
        None => Vec::new(),
    };
    if !ratios.is_empty() {
        write("ratios.csv", ratio::csv(&ratios).as_bytes(), &mut written)?;
        write("ratios.md", ratio::markdown(&ratios).as_bytes(), &mut written)?;
    }
    write("summary.csv", html::summary_csv(&figures, &inputs, &seeds).as_bytes(), &mut written)?;
    if !inputs.is_empty() {
        write("runs.csv", runs_csv(&inputs).as_bytes(), &mut written)?;
    }
    let page = html::page(&html::Page {
        title: &args.title,
        generated: keel_bench_format::time::now(),
        inputs: &inputs,
        seeds: &seeds,
        selected: &selected,
        figures: &figures,
        svgs: &svgs,
        files: &files,
        notes: &notes,
        ratios: &ratios,
    });
    write("index.html", page.as_bytes(), &mut written)?;
    Ok(Outcome {
        index: dir.join("index.html"),
        figures: figures.iter().map(|f| f.id.clone()).collect(),
        written,
        png_skipped,
        notes,
    })
}

/// Points that cannot be drawn, said out loud rather than dropped quietly.
fn skipped_points(inputs: &[Input]) -> Vec<String> {
    let mut notes = vec![];
    for i in inputs {
        if i.result.points.is_empty() {
            notes.push(format!("{} ({}): no points", i.label, i.path.display()));
        }
        for p in &i.result.points {
            let why = if p.runs.is_empty() {
                "no runs"
            } else if model::processes(p).is_none_or(|n| n == 0) {
                "zero or too many processes"
            } else if ![p.min, p.mean, p.max].iter().all(|v| v.is_finite()) {
                "a value that is not a number"
            } else {
                continue;
            };
            notes.push(format!(
                "{} ({}): {} at {} clients x {} threads not drawn ({why})",
                i.label,
                i.path.display(),
                p.phase,
                p.clients,
                p.threads_per_client
            ));
        }
    }
    notes
}

fn runs_csv(inputs: &[Input]) -> String {
    let mut out = String::new();
    for (n, i) in inputs.iter().enumerate() {
        let mut r = i.result.clone();
        r.label = i.label.clone();
        // `to_csv` multiplies clients by threads unchecked; such points are already reported as not drawn.
        r.points.retain(|p| model::processes(p).is_some());
        let csv = r.to_csv();
        let body = if n == 0 { csv.as_str() } else { csv.split_once('\n').map_or("", |(_, b)| b) };
        out += body;
    }
    out
}

fn render_svg(f: &Figure, size: (u32, u32)) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        plot::draw(&area, f, plot::TextInk::Elements).map_err(|e| anyhow!("figure {}: {e}", f.id))?;
        area.present().map_err(|e| anyhow!("figure {}: {e}", f.id))?;
    }
    Ok(svg)
}

fn render_png(f: &Figure, size: (u32, u32), path: &Path, fonts: &fonts::RasterFonts) -> anyhow::Result<()> {
    let area = BitMapBackend::new(path, size).into_drawing_area();
    plot::draw(&area, f, plot::TextInk::Raster(fonts)).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    area.present().map_err(|e| anyhow!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        report: ReportArgs,
    }

    #[test]
    fn command_line() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "report",
            "sync.json",
            "async.json",
            "--reference",
            "seeds",
            "--reference=seeds:beegfs-2015",
            "--format",
            "svg",
            "-o",
            "out",
            "--width",
            "1200",
        ])
        .unwrap();
        let a = cli.report;
        assert_eq!(a.files, [PathBuf::from("sync.json"), PathBuf::from("async.json")]);
        assert_eq!(a.reference, ["seeds", "seeds:beegfs-2015"]);
        assert_eq!(a.format, [Format::Svg]);
        assert_eq!((a.output.as_path(), a.width, a.height), (Path::new("out"), 1200, 600));
        let d = Cli::try_parse_from(["report", "x.json"]).unwrap().report;
        let default = ReportArgs::default();
        assert_eq!((&d.format, &d.output, &d.title), (&default.format, &default.output, &default.title));
        assert_eq!(d.output, PathBuf::from("keel-report"));
        assert!(Cli::try_parse_from(["report", "--format", "gif"]).is_err());
        assert!(Cli::try_parse_from(["report", "--width", "10"]).is_err());
    }
}

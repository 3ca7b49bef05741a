//! `--baseline LABEL`: every other measured series' mean as a multiple of
//! the baseline's at the same load (the "Keel/Ganesha" table of a side by
//! side run).

use std::fmt::Write;

use anyhow::bail;

use super::html::escape;
use super::model::{Figure, Origin};

/// One figure's ratios: per series, per process count.
#[derive(Debug, Clone, PartialEq)]
pub struct Ratios {
    pub figure: String,
    pub unit: String,
    pub baseline: String,
    /// (series, [(processes, ratio)])
    pub series: Vec<(String, Vec<(u32, f64)>)>,
}

/// Ratios for every figure the baseline appears in.
pub fn ratios(figures: &[Figure], baseline: &str) -> anyhow::Result<Vec<Ratios>> {
    let measured =
        |f: &Figure| f.series.iter().filter(|s| matches!(s.origin, Origin::Measured(_))).cloned().collect::<Vec<_>>();
    if !figures.iter().any(|f| measured(f).iter().any(|s| s.name == baseline)) {
        let names: std::collections::BTreeSet<String> =
            figures.iter().flat_map(|f| measured(f).into_iter().map(|s| s.name)).collect();
        bail!(
            "--baseline {baseline:?} is not the label of any result; labels: {}",
            names.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    let mut out = Vec::new();
    for f in figures {
        let series = measured(f);
        let Some(base) = series.iter().find(|s| s.name == baseline) else { continue };
        let mut rows = Vec::new();
        for s in series.iter().filter(|s| s.name != baseline) {
            let points: Vec<(u32, f64)> = s
                .points
                .iter()
                .filter_map(|p| {
                    let b = base.points.iter().find(|b| b.processes == p.processes && b.split == p.split)?;
                    (b.mean > 0.0).then(|| (p.processes, p.mean / b.mean))
                })
                .collect();
            if !points.is_empty() {
                rows.push((s.name.clone(), points));
            }
        }
        if !rows.is_empty() {
            out.push(Ratios {
                figure: f.title.clone(),
                unit: f.key.unit.clone(),
                baseline: baseline.into(),
                series: rows,
            });
        }
    }
    Ok(out)
}

fn processes(r: &Ratios) -> Vec<u32> {
    let mut xs: Vec<u32> = r.series.iter().flat_map(|(_, p)| p.iter().map(|(x, _)| *x)).collect();
    xs.sort_unstable();
    xs.dedup();
    xs
}

fn cell(points: &[(u32, f64)], x: u32) -> String {
    points.iter().find(|(p, _)| *p == x).map_or(String::new(), |(_, r)| format!("{r:.2}"))
}

/// A Markdown table per figure: rows are series, columns process counts.
pub fn markdown(all: &[Ratios]) -> String {
    let mut out = String::new();
    for r in all {
        let xs = processes(r);
        let _ = writeln!(out, "{} ({}; ratio of means to {}):\n", r.figure, r.unit, r.baseline);
        let _ =
            writeln!(out, "| series | {} |", xs.iter().map(|x| format!("{x} proc")).collect::<Vec<_>>().join(" | "));
        let _ = writeln!(out, "|---|{}", "---:|".repeat(xs.len()));
        for (name, points) in &r.series {
            let cells: Vec<String> = xs.iter().map(|x| cell(points, *x)).collect();
            let _ = writeln!(out, "| {name} | {} |", cells.join(" | "));
        }
        out.push('\n');
    }
    out
}

pub fn csv(all: &[Ratios]) -> String {
    let mut out = String::from("figure,unit,baseline,series,processes,ratio\n");
    for r in all {
        for (name, points) in &r.series {
            for (x, v) in points {
                let _ = writeln!(out, "{},{},{},{},{x},{v:.4}", r.figure, r.unit, r.baseline, name);
            }
        }
    }
    out
}

pub fn html_section(h: &mut String, all: &[Ratios]) {
    let Some(first) = all.first() else { return };
    let _ = writeln!(h, "<section id=\"ratios\">\n<h2>Ratios to {}</h2>", escape(&first.baseline));
    let _ = writeln!(
        h,
        "<p class=\"meta\">Mean of each series divided by the mean of {} at the same load; above 1 is faster.</p>",
        escape(&first.baseline)
    );
    for r in all {
        let xs = processes(r);
        let _ = write!(h, "<h3>{}</h3>\n<div class=\"scroll\"><table>\n<thead><tr><th>Series</th>", escape(&r.figure));
        for x in &xs {
            let _ = write!(h, "<th>{x}</th>");
        }
        h.push_str("</tr></thead>\n<tbody>\n");
        for (name, points) in &r.series {
            let _ = write!(h, "<tr><th>{}</th>", escape(name));
            for x in &xs {
                let _ = write!(h, "<td class=\"num\">{}</td>", cell(points, *x));
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</tbody></table></div>\n");
    }
    h.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::super::model::{FigureKey, Series, SeriesPoint};
    use super::*;

    fn series(name: &str, input: usize, means: &[(u32, f64)]) -> Series {
        Series {
            name: name.into(),
            legend: name.into(),
            origin: Origin::Measured(input),
            style: input,
            points: means
                .iter()
                .map(|&(processes, mean)| SeriesPoint {
                    processes,
                    split: Some((processes, 1)),
                    min: mean,
                    mean,
                    max: mean,
                    runs: 1,
                    errors: 0,
                })
                .collect(),
            spread: true,
        }
    }

    fn figure(series: Vec<Series>) -> Figure {
        Figure {
            key: FigureKey { workload: "seq".into(), phase: "write".into(), unit: "MiB/s".into() },
            id: "seq-write".into(),
            title: "Sequential write".into(),
            y_label: "MiB/s".into(),
            series,
            levels: vec![],
        }
    }

    #[test]
    fn ratios_divide_means_at_the_same_load() {
        let f = figure(vec![
            series("ganesha", 0, &[(1, 100.0), (2, 200.0)]),
            series("keel", 1, &[(1, 150.0), (2, 100.0), (4, 9.0)]),
        ]);
        let r = ratios(&[f], "ganesha").unwrap();
        assert_eq!(r[0].series, vec![("keel".to_string(), vec![(1, 1.5), (2, 0.5)])], "no baseline at 4: no ratio");
        let md = markdown(&r);
        assert!(md.contains("| keel | 1.50 | 0.50 |"), "{md}");
        assert!(csv(&r).contains("Sequential write,MiB/s,ganesha,keel,1,1.5000"));
        let mut h = String::new();
        html_section(&mut h, &r);
        assert!(h.contains("Ratios to ganesha") && h.contains("<td class=\"num\">1.50</td>"));
    }

    #[test]
    fn an_unknown_baseline_is_an_error_naming_the_labels() {
        let f = figure(vec![series("keel", 0, &[(1, 1.0)])]);
        let e = ratios(&[f], "nfsd").unwrap_err().to_string();
        assert!(e.contains("\"nfsd\"") && e.contains("keel"), "{e}");
    }
}

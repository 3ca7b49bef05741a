//! The seed papers' published results as reference series. The seed
//! papers are the published NFS benchmarks Keel is compared with (Dell's
//! NFS white papers and blog posts of 2012-2016, a BeeGFS report of 2015;
//! docs/benchmarks.md, "Reference systems", cites them). The numbers
//! live in `seeds.json` (transcribed by hand, with the sentence or table
//! each came from) so that they can be checked against the sources without
//! reading Rust; this module parses, validates, converts and selects them.

use std::collections::BTreeSet;

use anyhow::{Context, bail, ensure};
use serde::Deserialize;

const SEEDS_JSON: &str = include_str!("seeds.json");
const SEEDS_SCHEMA: &str = "keel-seeds/1";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seeds {
    pub schema: String,
    pub about: String,
    pub documents: Vec<Document>,
    pub series: Vec<SeedSeries>,
    pub gaps: Vec<Gap>,
}

/// One source: a white paper or blog post, with the name of the text
/// transcript the numbers were read from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Document {
    pub id: String,
    /// File name of the transcript.
    pub file: String,
    pub title: String,
    pub author: String,
    pub date: String,
    /// For legends: "2013", "c. 2013".
    pub year: String,
    pub short: String,
    pub system: String,
    pub method: String,
}

/// A published result in the units the source prints (`published_unit`);
/// [`SeedSeries::factor`] converts to `unit`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedSeries {
    pub id: String,
    pub document: String,
    pub name: String,
    /// Drawn by `--reference seeds`; the rest need `seeds:all` or an id.
    pub headline: bool,
    pub workload: String,
    pub phase: String,
    /// Other figures ("workload/phase") this result is comparable to.
    #[serde(default)]
    pub also: Vec<String>,
    pub unit: String,
    pub published_unit: String,
    /// Section, table or figure in the source.
    #[serde(rename = "where")]
    pub location: String,
    pub basis: Basis,
    /// The source's words (or table caption) the numbers come from.
    pub quote: String,
    #[serde(default)]
    pub note: Option<String>,
    #[serde(default)]
    pub points: Vec<SeedPoint>,
    #[serde(default)]
    pub level: Option<Level>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// A table in the source.
    Table,
    /// A number in the prose about a figure whose curve is not in the text.
    Text,
    /// Computed from a ratio the source states; not a published value.
    Derived,
}

impl Basis {
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Table => "table",
            Basis::Text => "text",
            Basis::Derived => "derived",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedPoint {
    pub processes: u32,
    /// The mean where the source gives min/mean/max, else the one value.
    pub value: f64,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
}

/// A peak or sustained value the source gives without a client count.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Level {
    pub value: f64,
    /// The client range the source tested, when it says.
    #[serde(default)]
    pub processes_from: Option<u32>,
    #[serde(default)]
    pub processes_to: Option<u32>,
    /// "peak" or "sustained".
    pub kind: String,
}

/// Something a seed shows (a figure, a ratio) that could not be transcribed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gap {
    pub document: String,
    pub what: String,
    pub why: String,
}

/// Published units keel report understands, as multipliers to a canonical
/// unit. MB and GB are taken as SI (10^6, 10^9 bytes), as printed; the
/// series note says when the source may have meant binary units.
const CONVERSIONS: &[(&str, &str, f64)] = &[
    ("MiB/s", "MiB/s", 1.0),
    ("MB/s", "MiB/s", 1e6 / 1_048_576.0),
    ("GB/s", "MiB/s", 1e9 / 1_048_576.0),
    ("GiB/s", "MiB/s", 1024.0),
    ("IOPS", "IOPS", 1.0),
    ("ops/s", "ops/s", 1.0),
];

impl SeedSeries {
    /// Multiplier from `published_unit` to `unit`.
    pub fn factor(&self) -> Option<f64> {
        CONVERSIONS.iter().find(|(from, to, _)| *from == self.published_unit && *to == self.unit).map(|c| c.2)
    }

    /// "workload/phase" keys of every figure this series belongs on.
    pub fn figures(&self) -> impl Iterator<Item = String> + '_ {
        std::iter::once(format!("{}/{}", self.workload, self.phase)).chain(self.also.iter().cloned())
    }

    /// How the published number became the plotted one, for the page.
    pub fn conversion_note(&self) -> Option<String> {
        let f = self.factor()?;
        if f == 1.0 {
            return None;
        }
        let v = self.level.as_ref().map(|l| l.value).or_else(|| self.points.first().map(|p| p.value))?;
        Some(format!(
            "{} {} = {} {} ({})",
            v,
            self.published_unit,
            super::html::fmt_value(v * f),
            self.unit,
            match self.published_unit.as_str() {
                "MB/s" => "MB = 10^6 bytes, MiB = 2^20 bytes",
                "GB/s" => "GB = 10^9 bytes, MiB = 2^20 bytes",
                _ => "1 GiB = 1024 MiB",
            }
        ))
    }
}

impl Seeds {
    /// The built-in table, validated.
    pub fn builtin() -> anyhow::Result<Seeds> {
        let seeds: Seeds = serde_json::from_str(SEEDS_JSON).context("seeds.json does not parse")?;
        seeds.validate()?;
        Ok(seeds)
    }

    pub fn document(&self, id: &str) -> Option<&Document> {
        self.documents.iter().find(|d| d.id == id)
    }

    /// Checks what a transcription slip would break: every series cites a
    /// known document and a location, has points or a level (not both),
    /// converts to its unit, and every value is positive with min <= value <= max.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.schema == SEEDS_SCHEMA, "seeds.json: schema {:?}, expected {SEEDS_SCHEMA:?}", self.schema);
        let mut ids = BTreeSet::new();
        for d in &self.documents {
            ensure!(ids.insert(d.id.as_str()), "seeds.json: duplicate id {:?}", d.id);
            ensure!(!d.file.is_empty() && !d.year.is_empty(), "seeds.json: document {:?} lacks file or year", d.id);
        }
        for s in &self.series {
            let ctx = || format!("seeds.json: series {:?}", s.id);
            ensure!(ids.insert(s.id.as_str()), "{}: duplicate id", ctx());
            ensure!(self.document(&s.document).is_some(), "{}: unknown document {:?}", ctx(), s.document);
            ensure!(!s.location.is_empty() && !s.quote.is_empty(), "{}: no source location or quote", ctx());
            ensure!(s.factor().is_some(), "{}: cannot convert {} to {}", ctx(), s.published_unit, s.unit);
            ensure!(s.points.is_empty() != s.level.is_none(), "{}: needs points or a level, not both", ctx());
            for p in &s.points {
                ensure!(p.processes > 0 && p.value.is_finite() && p.value > 0.0, "{}: bad point {p:?}", ctx());
                let (lo, hi) = (p.min.unwrap_or(p.value), p.max.unwrap_or(p.value));
                ensure!(lo <= p.value && p.value <= hi, "{}: min/mean/max out of order at {}", ctx(), p.processes);
            }
            if let Some(l) = &s.level {
                ensure!(l.value.is_finite() && l.value > 0.0, "{}: bad level", ctx());
                if let (Some(a), Some(b)) = (l.processes_from, l.processes_to) {
                    ensure!(0 < a && a <= b, "{}: bad level range", ctx());
                }
            }
        }
        for g in &self.gaps {
            ensure!(self.document(&g.document).is_some(), "seeds.json: gap cites unknown document {:?}", g.document);
        }
        Ok(())
    }

    /// Resolves `--reference` values: "seeds" (headline series), "seeds:all",
    /// "seeds:<document id>" (all its series) or "seeds:<series id>".
    /// Returns indices into `self.series`, in file order, without duplicates.
    pub fn select(&self, selectors: &[String]) -> anyhow::Result<Vec<usize>> {
        let mut chosen = BTreeSet::new();
        for sel in selectors {
            let which = match sel.split_once(':') {
                None if sel == "seeds" => None,
                Some(("seeds", rest)) => Some(rest),
                _ => bail!("--reference {sel:?}: expected \"seeds\" or \"seeds:<id>\""),
            };
            let mut matched = false;
            for (i, s) in self.series.iter().enumerate() {
                let take = match which {
                    None => s.headline,
                    Some("all") => true,
                    Some(id) => s.id == id || s.document == id,
                };
                if take {
                    matched = true;
                    chosen.insert(i);
                }
            }
            if !matched && which.is_some_and(|w| w != "all") {
                let docs: Vec<&str> = self.documents.iter().map(|d| d.id.as_str()).collect();
                bail!(
                    "--reference {sel:?}: no such seed; use seeds, seeds:all, seeds:<document> ({}) or seeds:<series id> (listed in the report)",
                    docs.join(", ")
                );
            }
        }
        Ok(chosen.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_seeds_parse_and_every_series_cites_its_source() {
        let seeds = Seeds::builtin().unwrap();
        assert!(seeds.series.len() > 20);
        for s in &seeds.series {
            let doc = seeds.document(&s.document).unwrap();
            assert!(doc.file.ends_with(".txt"), "{}", s.id);
            assert!(!s.location.is_empty() && !s.quote.is_empty(), "{}", s.id);
        }
    }

    /// Spot checks against the sources, so a slip in the JSON shows here.
    #[test]
    fn transcribed_values_match_the_papers() {
        let seeds = Seeds::builtin().unwrap();
        let get = |id: &str| seeds.series.iter().find(|s| s.id == id).unwrap();
        let w = get("beegfs-2015-ior-write");
        assert_eq!(w.points.len(), 8);
        let p4 = &w.points[2];
        assert_eq!((p4.processes, p4.min, p4.value, p4.max), (4, Some(2432.2), 2449.6, Some(2468.4)));
        assert_eq!(get("beegfs-2015-ior-read").points[4].value, 2472.0);
        assert_eq!(get("beegfs-2015-mdtest-create").points[4].value, 40785.0);
        assert_eq!(get("beegfs-2015-mdtest-stat").points[3].value, 143129.0);
        assert_eq!(get("dfc-2013-cache-random-read").points[0].processes, 32);
        let nss7 = get("nss7-ha-2016-seq-read");
        let mib = nss7.level.as_ref().unwrap().value * nss7.factor().unwrap();
        assert!((mib - 6265.64).abs() < 0.01, "{mib}");
        assert_eq!(get("dfc-2013-wb-random-write").basis, Basis::Derived);
    }

    #[test]
    fn selection() {
        let seeds = Seeds::builtin().unwrap();
        let headline = seeds.select(&["seeds".into()]).unwrap();
        assert!(headline.iter().all(|&i| seeds.series[i].headline));
        assert_eq!(seeds.select(&["seeds:all".into()]).unwrap().len(), seeds.series.len());
        let beegfs = seeds.select(&["seeds:beegfs-2015".into()]).unwrap();
        assert!(beegfs.len() >= 10 && beegfs.iter().all(|&i| seeds.series[i].document == "beegfs-2015"));
        let one = seeds.select(&["seeds:dfc-2013-cache-random-read".into(), "seeds".into()]).unwrap();
        assert_eq!(one.len(), headline.len(), "a headline series chosen twice counts once");
        assert!(seeds.select(&["seeds:nope".into()]).is_err());
        assert!(seeds.select(&["nss".into()]).is_err());
    }

    #[test]
    fn validation_catches_slips() {
        let mut seeds = Seeds::builtin().unwrap();
        seeds.series[0].document = "unknown".into();
        assert!(seeds.validate().is_err());
        let mut seeds = Seeds::builtin().unwrap();
        let s = seeds.series.iter_mut().find(|s| !s.points.is_empty()).unwrap();
        s.points[0].min = Some(s.points[0].value + 1.0);
        assert!(seeds.validate().is_err());
    }
}

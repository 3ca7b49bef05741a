//! Draws one figure on any plotters backend (SVG and PNG share the code).
//! The layout is done here with pixel coordinates rather than with
//! plotters' chart builder: the chart builder measures text with the font
//! and so cannot draw even an SVG when no font is installed, it has no
//! base-2 axis like the papers', and error bars and dashed series need
//! hand work anyway. Text widths come from a per-character estimate, so
//! the SVG and PNG layouts agree and do not depend on the font found;
//! PNG text is rasterized here (see [`TextInk`]).

use ab_glyph::{Font, FontRef, PxScale, ScaleFont, point};
use plotters::coord::Shift;
use plotters::element::{Circle, DashedPathElement, PathElement, Polygon, Rectangle, Text};
use plotters::prelude::{DrawingArea, DrawingAreaErrorKind, DrawingBackend};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{Color, FontStyle, FontTransform, IntoFont, RGBColor, ShapeStyle, TextStyle, WHITE};

use super::fonts::RasterFonts;
use super::html::fmt_compact;
use super::model::{Figure, Origin};

/// The font family name figures ask for; PNG rendering registers a TTF
/// under it, SVG viewers pick their own.
pub const FAMILY: &str = "sans-serif";

type DrawResult<E> = Result<(), DrawingAreaErrorKind<E>>;

const PALETTE: [RGBColor; 9] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
const GREYS: [RGBColor; 3] = [RGBColor(85, 85, 85), RGBColor(125, 125, 125), RGBColor(160, 160, 160)];
const INK: RGBColor = RGBColor(34, 34, 34);
const GRID: RGBColor = RGBColor(230, 230, 230);
const SUBTLE: RGBColor = RGBColor(90, 90, 90);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Circle,
    Square,
    Up,
    Diamond,
    Down,
    Cross,
}

const MEASURED_MARKERS: [Marker; 5] = [Marker::Circle, Marker::Square, Marker::Up, Marker::Diamond, Marker::Down];
const REFERENCE_MARKERS: [Marker; 6] =
    [Marker::Square, Marker::Diamond, Marker::Up, Marker::Circle, Marker::Down, Marker::Cross];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    Solid,
    Dashed,
    Dotted,
}

#[derive(Debug, Clone, Copy)]
struct Look {
    color: RGBColor,
    marker: Marker,
    line: Line,
    /// Reference markers are hollow, so measured points stand out.
    hollow: bool,
    width: u32,
}

fn measured_look(slot: usize) -> Look {
    Look {
        color: PALETTE[slot % PALETTE.len()],
        marker: MEASURED_MARKERS[slot % MEASURED_MARKERS.len()],
        line: Line::Solid,
        hollow: false,
        width: 2,
    }
}

fn reference_look(slot: usize, line: Line) -> Look {
    Look {
        color: GREYS[slot % GREYS.len()],
        marker: REFERENCE_MARKERS[slot % REFERENCE_MARKERS.len()],
        line,
        hollow: true,
        width: 1,
    }
}

/// Approximate advance of `c` in em for DejaVu/Liberation-like sans fonts.
fn char_em(c: char) -> f64 {
    match c {
        'i' | 'j' | 'l' | '\'' | '|' | '!' | '.' | ',' | ':' | ';' | ' ' | 'I' | '\u{b7}' => 0.32,
        'f' | 't' | 'r' | '(' | ')' | '[' | ']' | '/' | '-' => 0.42,
        'm' | 'w' | 'M' | 'W' | '%' | '\u{2014}' => 0.95,
        'A'..='Z' | '\u{d7}' | '~' | '#' => 0.74,
        '0'..='9' | '\u{2013}' => 0.64,
        _ => 0.62,
    }
}

/// Estimated width in pixels of `text` at plotters font size `size`
/// (the em is `size / 1.24`: what plotters writes as the SVG font-size,
/// and what [`raster`] uses for PNGs).
pub fn text_width(text: &str, size: f64) -> i32 {
    (text.chars().map(char_em).sum::<f64>() * size * 0.84).ceil() as i32
}

/// A "nice" tick step (1, 2, 2.5, 5 x 10^k) giving about `target` ticks.
pub fn nice_step(span: f64, target: f64) -> f64 {
    let raw = (span / target).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw * 0.999).unwrap_or(10.0 * mag)
}

fn tick_label(v: f64, step: f64) -> String {
    if step >= 1.0 {
        fmt_compact(v.round())
    } else {
        // The fewest decimals that show the step exactly (0.25 -> 2, 0.2 -> 1).
        let decimals = (0..=6usize)
            .find(|d| {
                let s = step * 10f64.powi(*d as i32);
                (s - s.round()).abs() < 1e-6
            })
            .unwrap_or(6);
        format!("{v:.decimals$}")
    }
}

/// The x axis: log2 of the process count, with ticks at powers of two.
#[derive(Debug, Clone, PartialEq)]
pub struct XAxis {
    pub lo: f64,
    pub hi: f64,
    /// Exponents of the ticks.
    pub ticks: Vec<i32>,
}

impl XAxis {
    /// Covers `xs` (process counts) with half a step of air on each side.
    pub fn covering(xs: impl IntoIterator<Item = u32>) -> XAxis {
        let xs: Vec<f64> = xs.into_iter().filter(|x| *x > 0).map(|x| f64::from(x).log2()).collect();
        let (mut a, mut b) = if xs.is_empty() {
            (0, 6)
        } else {
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min).floor() as i32;
            let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max).ceil() as i32;
            (lo, hi)
        };
        // A single power of two gets neighbours; never below one process.
        if a == b {
            a = (a - 1).max(0);
            b += 1;
        }
        XAxis { lo: f64::from(a) - 0.35, hi: f64::from(b) + 0.35, ticks: (a..=b).collect() }
    }
}

/// The y axis: linear from zero, as in the papers.
#[derive(Debug, Clone, PartialEq)]
pub struct YAxis {
    pub hi: f64,
    pub step: f64,
}

impl YAxis {
    pub fn covering(max: f64) -> YAxis {
        if !(max.is_finite() && max > 0.0) {
            return YAxis { hi: 1.0, step: 0.2 };
        }
        let step = nice_step(max * 1.04, 6.0);
        YAxis { hi: (max * 1.04 / step).ceil() * step, step }
    }

    fn ticks(&self) -> Vec<f64> {
        let n = (self.hi / self.step).round() as i64;
        (0..=n).map(|i| i as f64 * self.step).collect()
    }
}

/// Pixel geometry of the plot area.
struct Frame {
    left: i32,
    right: i32,
    top: i32,
    bottom: i32,
    x: XAxis,
    y: YAxis,
}

impl Frame {
    fn px(&self, processes: f64) -> i32 {
        let t = (processes.log2() - self.x.lo) / (self.x.hi - self.x.lo);
        self.left + (t * f64::from(self.right - self.left)).round() as i32
    }

    fn px_exp(&self, e: f64) -> i32 {
        self.px(e.exp2())
    }

    fn py(&self, v: f64) -> i32 {
        let t = (v / self.y.hi).clamp(0.0, 1.05);
        self.bottom - (t * f64::from(self.bottom - self.top)).round() as i32
    }
}

struct LegendEntry {
    text: String,
    look: Look,
    /// A level: the sample is a dotted line with the marker at its end.
    level: bool,
}

const TITLE_SIZE: f64 = 21.0;
const TEXT_SIZE: f64 = 15.0;
const SMALL_SIZE: f64 = 14.0;
const LEGEND_ROW: i32 = 20;
const LEGEND_SAMPLE: i32 = 34;
const PAD: i32 = 14;

/// How text reaches the picture.
#[derive(Clone, Copy)]
pub enum TextInk<'f> {
    /// `<text>` elements (SVG): the viewer lays out the glyphs.
    Elements,
    /// Glyphs rasterized here with ab_glyph (PNG). plotters 0.3.7's own
    /// ab_glyph path drops each glyph's side bearing and rounds its
    /// vertical offset toward zero, which makes uneven, jumpy text.
    Raster(&'f RasterFonts),
}

/// One piece of text: anchored at `pos` by `h`/`v`, optionally rotated
/// to read upwards (the y axis label).
struct Label<'a> {
    text: &'a str,
    pos: (i32, i32),
    size: f64,
    color: &'static RGBColor,
    h: HPos,
    v: VPos,
    bold: bool,
    upwards: bool,
}

impl<'a> Label<'a> {
    fn new(text: &'a str, pos: (i32, i32), size: f64, h: HPos, v: VPos) -> Self {
        Label { text, pos, size, color: &INK, h, v, bold: false, upwards: false }
    }
}

fn put<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, ink: TextInk, l: Label) -> DrawResult<DB::ErrorType> {
    match ink {
        TextInk::Elements => {
            let style = if l.bold { FontStyle::Bold } else { FontStyle::Normal };
            let mut s = TextStyle::from((FAMILY, l.size, style).into_font()).color(l.color).pos(Pos::new(l.h, l.v));
            if l.upwards {
                s = s.transform(FontTransform::Rotate270);
            }
            area.draw(&Text::new(l.text.to_string(), l.pos, s))
        }
        TextInk::Raster(fonts) => raster(area, if l.bold { &fonts.bold } else { &fonts.regular }, &l),
    }
}

/// Lays out `l` with the font's advances and kerning and draws each glyph's
/// coverage as blended pixels. The em is `size / 1.24`, as plotters gives
/// SVG viewers, so PNG and SVG text are the same size.
fn raster<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, font: &FontRef, l: &Label) -> DrawResult<DB::ErrorType> {
    let em = (l.size / 1.24) as f32;
    let scale = PxScale::from(em * font.height_unscaled() / font.units_per_em().unwrap_or(2048.0));
    let scaled = font.as_scaled(scale);
    let mut pen = 0f32;
    let mut prev = None;
    let mut glyphs = vec![];
    for c in l.text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(p) = prev {
            pen += scaled.kern(p, id);
        }
        glyphs.push(id.with_scale_and_position(scale, point(pen, 0.0)));
        pen += scaled.h_advance(id);
        prev = Some(id);
    }
    let dx = match l.h {
        HPos::Left => 0.0,
        HPos::Center => -pen / 2.0,
        HPos::Right => -pen,
    };
    // Baseline below the anchor: Top as SVG's dy=0.76em, Center halves the cap height.
    let dy = match l.v {
        VPos::Top => 0.76 * em,
        VPos::Center => 0.36 * em,
        VPos::Bottom => -0.24 * em,
    };
    let mut pixels = vec![];
    for g in glyphs {
        if let Some(o) = font.outline_glyph(g) {
            let b = o.px_bounds();
            o.draw(|gx, gy, coverage| {
                if coverage > 0.0 {
                    let (x, y) = (b.min.x + gx as f32 + dx, b.min.y + gy as f32 + dy);
                    let (x, y) = if l.upwards { (y, -x) } else { (x, y) };
                    pixels.push(((l.pos.0 as f32 + x).round() as i32, (l.pos.1 as f32 + y).round() as i32, coverage));
                }
            });
        }
    }
    for (x, y, c) in pixels {
        area.draw_pixel((x, y), &l.color.mix(f64::from(c.min(1.0))))?;
    }
    Ok(())
}

/// Draws `fig` filling `area`.
pub fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    fig: &Figure,
    ink: TextInk,
) -> DrawResult<DB::ErrorType> {
    let (w, h) = area.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    area.fill(&WHITE)?;

    let legend = legend_entries(fig);
    let widest = legend.iter().map(|e| LEGEND_SAMPLE + 10 + text_width(&e.text, SMALL_SIZE)).max().unwrap_or(0);
    let columns = if legend.len() > 1 && 2 * widest + 24 <= w - 2 * PAD { 2 } else { 1 };
    let rows = legend.len().div_ceil(columns) as i32;
    let legend_h = if legend.is_empty() { 0 } else { rows * LEGEND_ROW + 6 };

    let xs = fig
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.processes))
        .chain(fig.levels.iter().flat_map(|l| l.from.into_iter().chain(l.to)));
    let x = XAxis::covering(xs);
    let ymax = fig
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.max.max(p.mean)))
        .chain(fig.levels.iter().map(|l| l.value))
        .fold(0.0, f64::max);
    let y = YAxis::covering(ymax);
    let ylabels: Vec<(f64, String)> = y.ticks().into_iter().map(|v| (v, tick_label(v, y.step))).collect();
    let ylabel_w = ylabels.iter().map(|(_, s)| text_width(s, SMALL_SIZE)).max().unwrap_or(0);

    let top = PAD + 26 + 20 + 10;
    let left = PAD + 18 + 8 + ylabel_w + 8;
    let right = w - PAD - 12;
    let bottom = (h - PAD - legend_h - 12 - 20 - 20).max(top + 40);
    let frame = Frame { left, right, top, bottom, x, y };

    // Title and subtitle.
    put(area, ink, Label { bold: true, ..Label::new(&fig.title, (left, PAD), TITLE_SIZE, HPos::Left, VPos::Top) })?;
    let mut sub = String::from("Mean per process count; bars: min\u{2013}max over runs");
    if fig.series.iter().any(|s| matches!(s.origin, Origin::Reference(_))) || !fig.levels.is_empty() {
        sub += ". Grey: published results (dotted: a value published without a client count)";
    }
    put(area, ink, Label { color: &SUBTLE, ..Label::new(&sub, (left, PAD + 28), SMALL_SIZE, HPos::Left, VPos::Top) })?;

    draw_axes(area, ink, &frame, &ylabels, &fig.y_label)?;

    for l in &fig.levels {
        let look = reference_look(l.style, Line::Dotted);
        let a = l.from.map_or(frame.left, |p| frame.px(f64::from(p)));
        let b = l.to.map_or(frame.right - 10, |p| frame.px(f64::from(p)));
        let yv = frame.py(l.value);
        draw_line(area, &[(a, yv), (b, yv)], &look)?;
        draw_marker(area, (b, yv), &look)?;
    }
    // References under measured series, so measured points stay on top.
    let mut order: Vec<&super::model::Series> = fig.series.iter().collect();
    order.sort_by_key(|s| matches!(s.origin, Origin::Measured(_)));
    for s in order {
        let look = match s.origin {
            Origin::Measured(_) => measured_look(s.style),
            Origin::Reference(_) => reference_look(s.style, Line::Dashed),
        };
        let pts: Vec<(i32, i32)> =
            s.points.iter().map(|p| (frame.px(f64::from(p.processes)), frame.py(p.mean))).collect();
        if s.spread {
            for (p, &(px, _)) in s.points.iter().zip(&pts) {
                draw_error_bar(area, px, frame.py(p.min), frame.py(p.max), look.color)?;
            }
        }
        if pts.len() > 1 {
            draw_line(area, &pts, &look)?;
        }
        for &c in &pts {
            draw_marker(area, c, &look)?;
        }
    }

    area.draw(&Rectangle::new([(frame.left, frame.top), (frame.right, frame.bottom)], INK.stroke_width(1)))?;
    draw_legend(area, ink, &legend, columns, widest, h - PAD - legend_h + 6)
}

fn draw_axes<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    ink: TextInk,
    f: &Frame,
    ylabels: &[(f64, String)],
    y_label: &str,
) -> DrawResult<DB::ErrorType> {
    for (v, label) in ylabels {
        let y = f.py(*v);
        area.draw(&PathElement::new(vec![(f.left, y), (f.right, y)], GRID.stroke_width(1)))?;
        area.draw(&PathElement::new(vec![(f.left - 5, y), (f.left, y)], INK.stroke_width(1)))?;
        put(area, ink, Label::new(label, (f.left - 8, y), SMALL_SIZE, HPos::Right, VPos::Center))?;
    }
    // Thin the x labels when powers of two crowd each other (wide ranges).
    let per_exp = f64::from(f.right - f.left) / (f.x.hi - f.x.lo);
    let widest = f.x.ticks.iter().map(|e| text_width(&(1u64 << (*e).clamp(0, 62)).to_string(), SMALL_SIZE)).max();
    let every = (1..).find(|k| per_exp * f64::from(*k) >= f64::from(widest.unwrap_or(0) + 10)).unwrap_or(1);
    for &e in &f.x.ticks {
        let x = f.px_exp(f64::from(e));
        area.draw(&PathElement::new(vec![(x, f.top), (x, f.bottom)], GRID.stroke_width(1)))?;
        area.draw(&PathElement::new(vec![(x, f.bottom), (x, f.bottom + 5)], INK.stroke_width(1)))?;
        if e.rem_euclid(every) == 0 {
            let label = (1u64 << e.clamp(0, 62)).to_string();
            put(area, ink, Label::new(&label, (x, f.bottom + 8), SMALL_SIZE, HPos::Center, VPos::Top))?;
        }
    }
    put(
        area,
        ink,
        Label::new(
            "Processes (clients \u{d7} threads per client), log\u{2082} scale",
            ((f.left + f.right) / 2, f.bottom + 28),
            TEXT_SIZE,
            HPos::Center,
            VPos::Top,
        ),
    )?;
    put(
        area,
        ink,
        Label {
            upwards: true,
            ..Label::new(y_label, (PAD, (f.top + f.bottom) / 2), TEXT_SIZE, HPos::Center, VPos::Top)
        },
    )?;
    Ok(())
}

fn legend_entries(fig: &Figure) -> Vec<LegendEntry> {
    let mut out: Vec<LegendEntry> = fig
        .series
        .iter()
        .map(|s| LegendEntry {
            text: s.legend.clone(),
            look: match s.origin {
                Origin::Measured(_) => measured_look(s.style),
                Origin::Reference(_) => reference_look(s.style, Line::Dashed),
            },
            level: false,
        })
        .collect();
    out.extend(fig.levels.iter().map(|l| LegendEntry {
        text: format!("{} ({})", l.legend, fmt_compact(l.value)),
        look: reference_look(l.style, Line::Dotted),
        level: true,
    }));
    out
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    ink: TextInk,
    entries: &[LegendEntry],
    columns: usize,
    column_w: i32,
    top: i32,
) -> DrawResult<DB::ErrorType> {
    let rows = entries.len().div_ceil(columns.max(1));
    for (i, e) in entries.iter().enumerate() {
        let (col, row) = (i / rows.max(1), i % rows.max(1));
        let x = PAD + col as i32 * (column_w + 24);
        let y = top + row as i32 * LEGEND_ROW + LEGEND_ROW / 2;
        draw_line(area, &[(x, y), (x + LEGEND_SAMPLE, y)], &e.look)?;
        let mx = if e.level { x + LEGEND_SAMPLE - 4 } else { x + LEGEND_SAMPLE / 2 };
        draw_marker(area, (mx, y), &e.look)?;
        put(area, ink, Label::new(&e.text, (x + LEGEND_SAMPLE + 10, y), SMALL_SIZE, HPos::Left, VPos::Center))?;
    }
    Ok(())
}

fn draw_line<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    pts: &[(i32, i32)],
    look: &Look,
) -> DrawResult<DB::ErrorType> {
    let s: ShapeStyle = look.color.stroke_width(look.width);
    match look.line {
        Line::Solid => area.draw(&PathElement::new(pts.to_vec(), s)),
        Line::Dashed => area.draw(&DashedPathElement::new(pts.iter().copied(), 7, 4, s)),
        Line::Dotted => area.draw(&DashedPathElement::new(pts.iter().copied(), 2, 3, s)),
    }
}

fn draw_error_bar<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    x: i32,
    y_min: i32,
    y_max: i32,
    color: RGBColor,
) -> DrawResult<DB::ErrorType> {
    if (y_min - y_max).abs() < 2 {
        return Ok(());
    }
    let s = color.stroke_width(1);
    area.draw(&PathElement::new(vec![(x, y_min), (x, y_max)], s))?;
    area.draw(&PathElement::new(vec![(x - 4, y_min), (x + 4, y_min)], s))?;
    area.draw(&PathElement::new(vec![(x - 4, y_max), (x + 4, y_max)], s))
}

fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    look: &Look,
) -> DrawResult<DB::ErrorType> {
    let r = 5;
    let outline: Vec<(i32, i32)> = match look.marker {
        Marker::Circle => {
            if look.hollow {
                area.draw(&Circle::new((x, y), r, WHITE.filled()))?;
                return area.draw(&Circle::new((x, y), r, look.color.stroke_width(2)));
            }
            return area.draw(&Circle::new((x, y), r, look.color.filled()));
        }
        Marker::Cross => {
            let s = look.color.stroke_width(2);
            area.draw(&PathElement::new(vec![(x - r, y - r), (x + r, y + r)], s))?;
            return area.draw(&PathElement::new(vec![(x - r, y + r), (x + r, y - r)], s));
        }
        Marker::Square => {
            vec![(x - r + 1, y - r + 1), (x + r - 1, y - r + 1), (x + r - 1, y + r - 1), (x - r + 1, y + r - 1)]
        }
        Marker::Up => vec![(x, y - r - 1), (x + r + 1, y + r - 1), (x - r - 1, y + r - 1)],
        Marker::Down => vec![(x, y + r + 1), (x + r + 1, y - r + 1), (x - r - 1, y - r + 1)],
        Marker::Diamond => vec![(x, y - r - 1), (x + r + 1, y), (x, y + r + 1), (x - r - 1, y)],
    };
    if look.hollow {
        area.draw(&Polygon::new(outline.clone(), WHITE.filled()))?;
        let mut closed = outline.clone();
        closed.push(outline[0]);
        area.draw(&PathElement::new(closed, look.color.stroke_width(2)))
    } else {
        area.draw(&Polygon::new(outline, look.color.filled()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x_axis_spans_powers_of_two() {
        let x = XAxis::covering([1, 2, 64, 512]);
        assert_eq!(x.ticks, (0..=9).collect::<Vec<_>>());
        assert!(x.lo < 0.0 && x.hi > 9.0);
        let one = XAxis::covering([8]);
        assert_eq!(one.ticks, [2, 3, 4]);
        assert_eq!(XAxis::covering([48]).ticks, [5, 6]);
        assert_eq!(XAxis::covering([1]).ticks, [0, 1], "no half processes");
        assert_eq!(XAxis::covering([]).ticks, (0..=6).collect::<Vec<_>>());
    }

    #[test]
    fn y_axis_has_nice_ticks_above_the_data() {
        let y = YAxis::covering(2449.6);
        assert_eq!(y.step, 500.0);
        assert_eq!(y.hi, 3000.0);
        assert_eq!(YAxis::covering(0.0).hi, 1.0);
        assert_eq!(nice_step(123_000.0, 6.0), 25_000.0);
        assert_eq!(tick_label(25_000.0, 5000.0), "25,000");
        assert_eq!(tick_label(0.25, 0.25), "0.25");
        assert_eq!(tick_label(0.4, 0.2), "0.4");
    }

    #[test]
    fn text_estimate_grows_with_text() {
        assert!(text_width("iiii", 14.0) < text_width("MMMM", 14.0));
        assert!(text_width("2,449.6", 14.0) > 30);
    }
}

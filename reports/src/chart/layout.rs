//! Pieces every chart shares: the legend panel beside the plot (so it never
//! covers data), axis ranges with padding, and text styles.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::FONT;

pub(crate) const LABEL_SIZE: u32 = 18;
pub(crate) const DESC_SIZE: u32 = 21;

/// One legend line: a colour swatch and its label.
pub(crate) struct LegendEntry {
    pub label: String,
    pub colour: RGBColor,
    pub swatch: Swatch,
}

/// What a legend entry shows beside its label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Swatch {
    /// A line with a round marker (line charts, CDF curves).
    Line,
    /// A filled box (bar charts).
    Box,
    /// A reference point's marker with no line: a crossed diamond, filled
    /// for calibration points.
    Reference { filled: bool },
    /// A scatter plot's marker alone.
    Marker(Marker),
    /// A dashed line with no marker (a scatter plot's y = x).
    Dashed,
}

/// The marker shapes of a scatter plot, told apart without colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marker {
    Circle,
    Square,
    TriangleUp,
    Diamond,
    TriangleDown,
    Cross,
}

impl Marker {
    const ALL: [Marker; 6] = [
        Marker::Circle,
        Marker::Square,
        Marker::TriangleUp,
        Marker::Diamond,
        Marker::TriangleDown,
        Marker::Cross,
    ];

    /// The marker of the `i`-th series. Six shapes against ten colours:
    /// the first 30 series differ in the pair.
    pub(crate) fn nth(i: usize) -> Marker {
        Marker::ALL[i % Marker::ALL.len()]
    }

    /// The shape as a closed polygon of pixel offsets around its centre,
    /// about `r` pixels from centre to edge (areas roughly equal, so no
    /// shape looks heavier than another).
    pub(crate) fn outline(self, r: i32) -> Vec<(i32, i32)> {
        let rf = r as f64;
        let at = |k: usize, n: usize, radius: f64, turn: f64| {
            let a = turn + std::f64::consts::TAU * k as f64 / n as f64;
            ((radius * a.cos()).round() as i32, (radius * a.sin()).round() as i32)
        };
        let up = -std::f64::consts::FRAC_PI_2;
        match self {
            Marker::Circle => (0..16).map(|k| at(k, 16, rf, 0.0)).collect(),
            Marker::Square => {
                let h = (rf * 0.85).round() as i32;
                vec![(-h, -h), (h, -h), (h, h), (-h, h)]
            }
            Marker::TriangleUp => (0..3).map(|k| at(k, 3, rf * 1.25, up)).collect(),
            Marker::TriangleDown => (0..3).map(|k| at(k, 3, rf * 1.25, -up)).collect(),
            Marker::Diamond => (0..4).map(|k| at(k, 4, rf * 1.2, up)).collect(),
            Marker::Cross => {
                // An X of two bars, each `w` wide.
                let (o, w) = (rf * 1.1, rf * 0.42);
                let s = std::f64::consts::FRAC_1_SQRT_2;
                let p = |x: f64, y: f64| ((x * s - y * s).round() as i32, (x * s + y * s).round() as i32);
                vec![
                    p(-w, -o), p(w, -o), p(w, -w), p(o, -w), p(o, w), p(w, w),
                    p(w, o), p(-w, o), p(-w, w), p(-o, w), p(-o, -w), p(-w, -w),
                ]
            }
        }
    }
}

/// What the legend panel shows: an optional heading (the series key), the
/// entries, then notes in grey (how repeats are summarised).
pub(crate) struct Legend {
    pub heading: Option<String>,
    pub entries: Vec<LegendEntry>,
    pub notes: Vec<String>,
}

impl Legend {
    pub(crate) fn is_empty(&self) -> bool {
        self.heading.is_none() && self.entries.is_empty() && self.notes.is_empty()
    }

    /// Splits `area` into (plot, legend panel) and draws the legend; with
    /// nothing to show, the plot gets the whole area.
    pub(crate) fn split_and_draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> Result<DrawingArea<DB, Shift>, String> {
        if self.is_empty() {
            return Ok(area.clone());
        }
        let width = self.width(area)?;
        let (plot, panel) = area.split_horizontally(area.dim_in_pixel().0 - width);
        self.draw(&panel)?;
        Ok(plot)
    }

    /// Like [`Legend::split_and_draw`], but the plot gets `plot_width`
    /// pixels and the legend sits right beside it, the two centred in
    /// `area` (a square plot would otherwise leave a gap before the legend).
    /// Falls back to `split_and_draw` when the area is not wide enough.
    pub(crate) fn split_centred_and_draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        plot_width: u32,
    ) -> Result<DrawingArea<DB, Shift>, String> {
        let legend_width = if self.is_empty() { 0 } else { self.width(area)? };
        let total = plot_width + legend_width;
        let width = area.dim_in_pixel().0;
        if total >= width {
            return self.split_and_draw(area);
        }
        let (_, rest) = area.split_horizontally((width - total) / 2);
        let (plot, rest) = rest.split_horizontally(plot_width);
        if !self.is_empty() {
            let (panel, _) = rest.split_horizontally(legend_width);
            self.draw(&panel)?;
        }
        Ok(plot)
    }

    fn texts(&self) -> impl Iterator<Item = (&str, TextStyle<'static>)> {
        let heading = self.heading.iter().map(|h| (h.as_str(), heading_style()));
        let entries = self.entries.iter().map(|e| (e.label.as_str(), entry_style()));
        heading.chain(entries)
    }

    fn width<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<u32, String> {
        let mut widest = 0;
        for (text, style) in self.texts() {
            let (w, _) = area.estimate_text_size(text, &style).map_err(|e| e.to_string())?;
            let swatch = if matches!(style.font.get_style(), FontStyle::Bold) { 0 } else { 44 };
            widest = widest.max(w + swatch);
        }
        Ok((widest + 30).clamp(170, 360))
    }

    fn draw<DB: DrawingBackend>(&self, panel: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        let (width, height) = panel.dim_in_pixel();
        let chars = ((width.saturating_sub(20)) / 8).max(10) as usize;
        let note_lines: Vec<Vec<String>> = self.notes.iter().map(|n| wrap(n, chars)).collect();
        let mut y = 40;
        if let Some(h) = &self.heading {
            panel.draw(&Text::new(h.clone(), (10, y), heading_style())).map_err(err)?;
            y += 28;
        }
        // A label wider than the panel goes on several lines (the panel's
        // width is capped); entries that do not fit above the notes are
        // summarised in one line.
        let entry_chars = ((width.saturating_sub(60)) / 8).max(8) as usize;
        let entry_lines: Vec<Vec<String>> = self.entries.iter().map(|e| {
            let lines = wrap(&e.label, entry_chars);
            if lines.is_empty() { vec![String::new()] } else { lines }
        }).collect();
        let entry_height = |lines: &Vec<String>| 28 + 20 * (lines.len() as i32 - 1);
        let notes_height: i32 = note_lines.iter().map(|l| 20 * l.len() as i32 + 4).sum();
        let room = height as i32 - y - notes_height - 20;
        let total: i32 = entry_lines.iter().map(entry_height).sum();
        let shown = if total <= room {
            self.entries.len()
        } else {
            // Keep one line for the summary.
            let mut used = 28;
            let mut n = 0;
            for lines in &entry_lines {
                used += entry_height(lines);
                if used > room {
                    break;
                }
                n += 1;
            }
            n.max(1).min(self.entries.len())
        };
        let hidden = self.entries.len() - shown;
        for (e, lines) in self.entries[..shown].iter().zip(&entry_lines) {
            let mid = y + 9;
            match e.swatch {
                Swatch::Reference { filled } => {
                    let diamond = vec![(25, mid - 9), (34, mid), (25, mid + 9), (16, mid), (25, mid - 9)];
                    let fill = if filled { e.colour.filled() } else { WHITE.filled() };
                    panel.draw(&Polygon::new(diamond.clone(), fill)).map_err(err)?;
                    panel.draw(&PathElement::new(diamond, e.colour.stroke_width(2))).map_err(err)?;
                    panel.draw(&PathElement::new(vec![(20, mid), (30, mid)], e.colour.stroke_width(2))).map_err(err)?;
                    panel.draw(&PathElement::new(vec![(25, mid - 5), (25, mid + 5)], e.colour.stroke_width(2))).map_err(err)?;
                }
                Swatch::Box => {
                    panel
                        .draw(&Rectangle::new([(14, mid - 8), (36, mid + 8)], e.colour.filled()))
                        .map_err(err)?;
                }
                Swatch::Line => {
                    panel
                        .draw(&PathElement::new(
                            vec![(10, mid), (40, mid)],
                            e.colour.stroke_width(3),
                        ))
                        .map_err(err)?;
                    panel
                        .draw(&Circle::new((25, mid), 4, e.colour.filled()))
                        .map_err(err)?;
                }
                Swatch::Marker(m) => {
                    let shape: Vec<(i32, i32)> = m.outline(7).into_iter().map(|(x, y)| (25 + x, mid + y)).collect();
                    panel.draw(&Polygon::new(shape, e.colour.filled())).map_err(err)?;
                }
                Swatch::Dashed => {
                    for x in [8, 20, 32] {
                        panel
                            .draw(&PathElement::new(vec![(x, mid), (x + 8, mid)], e.colour.stroke_width(2)))
                            .map_err(err)?;
                    }
                }
            }
            for (i, line) in lines.iter().enumerate() {
                panel
                    .draw(&Text::new(line.clone(), (50, y + 20 * i as i32), entry_style()))
                    .map_err(err)?;
            }
            y += entry_height(lines);
        }
        if hidden > 0 {
            let more = format!("… and {hidden} more");
            panel.draw(&Text::new(more, (50, y), entry_style())).map_err(err)?;
            y += 28;
        }
        y += 10;
        for lines in note_lines {
            for line in lines {
                panel
                    .draw(&Text::new(line, (10, y), note_style()))
                    .map_err(err)?;
                y += 20;
            }
            y += 4;
        }
        Ok(())
    }
}

fn heading_style() -> TextStyle<'static> {
    (FONT, LABEL_SIZE).into_font().style(FontStyle::Bold).into()
}

fn entry_style() -> TextStyle<'static> {
    (FONT, LABEL_SIZE).into()
}

fn note_style() -> TextStyle<'static> {
    (FONT, 15).into_font().color(&RGBColor(90, 90, 90))
}

/// Greedy word wrap at `width` characters.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    // A word longer than a line is cut into line-long pieces.
    let width = width.max(1);
    let pieces = text.split_whitespace().flat_map(|word| {
        let chars: Vec<char> = word.chars().collect();
        chars.chunks(width).map(|c| c.iter().collect::<String>()).collect::<Vec<_>>()
    });
    for word in pieces {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// An axis range around [lo, hi]: 5% padding (multiplicative on a log
/// axis), zero included on a linear axis of non-negative values when asked,
/// and never empty.
pub(crate) fn padded(lo: f64, hi: f64, log: bool, include_zero: bool) -> (f64, f64) {
    if !lo.is_finite() || !hi.is_finite() {
        return if log { (0.1, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        let (lo, hi) = if lo == hi { (lo / 2.0, hi * 2.0) } else { (lo, hi) };
        let f = (hi / lo).powf(0.05);
        return (lo / f, hi * f);
    }
    let (lo, hi) = if lo == hi {
        let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        (lo - d, hi + d)
    } else {
        (lo, hi)
    };
    // with zero included, the margin is a share of the axis drawn, so that
    // a point at the top keeps its marker inside the plot
    let (lo, hi, at_zero) = match (include_zero, lo >= 0.0, hi <= 0.0) {
        (true, true, _) => (0.0, hi, (true, false)),
        (true, _, true) => (lo, 0.0, (false, true)),
        _ => (lo, hi, (false, false)),
    };
    let pad = (hi - lo) * 0.05;
    (if at_zero.0 { lo } else { lo - pad }, if at_zero.1 { hi } else { hi + pad })
}

/// An axis whose ticks sit exactly at given values (category positions, or
/// the few distinct x values of a sweep). Unlike plotters' `WithKeyPoints`,
/// it keeps the default value formatting, so every axis type shares one
/// drawing function and its label formatter.
pub(crate) struct Ticked<R> {
    inner: R,
    ticks: Vec<f64>,
}

impl<R> Ticked<R> {
    pub(crate) fn new(inner: impl Into<R>, ticks: Vec<f64>) -> Self {
        Ticked {
            inner: inner.into(),
            ticks,
        }
    }
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticked<R> {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: plotters::coord::ranged1d::KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }

    fn axis_pixel_range(&self, limit: (i32, i32)) -> std::ops::Range<i32> {
        self.inner.axis_pixel_range(limit)
    }
}

/// Category labels longer than this are shortened with an ellipsis.
const MAX_LABEL_CHARS: usize = 28;

/// How a categorical x axis prints its labels: side by side when they fit,
/// else turned a quarter turn (drawn by [`CategoryLabels::draw_turned`], since
/// plotters centres turned labels on the axis line), and only every
/// `stride`-th one when even turned labels would touch.
pub(crate) struct CategoryLabels {
    pub labels: Vec<String>,
    pub turned: bool,
    pub stride: usize,
    /// Height of the x label area in pixels.
    pub area_size: u32,
}

impl CategoryLabels {
    pub(crate) fn fit<DB: DrawingBackend>(
        area: &DrawingArea<DB, Shift>,
        labels: &[String],
        axis_width: u32,
    ) -> Result<Self, String> {
        let labels: Vec<String> = labels
            .iter()
            .map(|l| {
                if l.chars().count() > MAX_LABEL_CHARS {
                    let head: String = l.chars().take(MAX_LABEL_CHARS - 1).collect();
                    format!("{head}…")
                } else {
                    l.clone()
                }
            })
            .collect();
        let style: TextStyle = (FONT, LABEL_SIZE).into();
        let mut total = 0;
        let mut widest = 0;
        for l in &labels {
            let (w, _) = area.estimate_text_size(l, &style).map_err(|e| e.to_string())?;
            total += w + 16;
            widest = widest.max(w);
        }
        let turned = total > axis_width;
        let (area_size, stride) = if turned {
            let per_label = 22;
            let stride = (labels.len() * per_label).div_ceil(axis_width.max(1) as usize).max(1);
            // Room for the turned labels, their 10-pixel offset and the axis name.
            ((widest * 11 / 10 + 60).clamp(60, 320), stride)
        } else {
            (60, 1)
        };
        Ok(CategoryLabels {
            labels,
            turned,
            stride,
            area_size,
        })
    }

    /// Tick positions: every `stride`-th category.
    pub(crate) fn ticks(&self) -> Vec<f64> {
        (0..self.labels.len()).step_by(self.stride).map(|i| i as f64).collect()
    }

    /// The label plotters prints at axis position `v`: none when turned.
    pub(crate) fn at(&self, v: f64) -> String {
        if self.turned {
            String::new()
        } else {
            category_at(&self.labels, v)
        }
    }

    /// Draws turned labels under the x axis of `chart`, which was built on `area`.
    pub(crate) fn draw_turned<DB, X, Y>(
        &self,
        chart: &ChartContext<'_, DB, Cartesian2d<X, Y>>,
        area: &DrawingArea<DB, Shift>,
    ) -> Result<(), String>
    where
        DB: DrawingBackend,
        X: Ranged<ValueType = f64>,
        Y: Ranged<ValueType = f64>,
    {
        if !self.turned {
            return Ok(());
        }
        let (_, y_pixels) = chart.plotting_area().get_pixel_range();
        let (base_x, base_y) = area.get_base_pixel();
        let y_any = chart.y_range().start;
        let style = TextStyle::from((FONT, LABEL_SIZE).into_font())
            .transform(FontTransform::Rotate90)
            .pos(Pos::new(HPos::Left, VPos::Center));
        for v in self.ticks() {
            let (px, _) = chart.backend_coord(&(v, y_any));
            let text = category_at(&self.labels, v);
            area.draw(&Text::new(text, (px - base_x, y_pixels.end - base_y + 10), style.clone()))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// Every how many of `n` labels fit along `length` pixels, `spacing` apart.
pub(crate) fn label_stride(n: usize, length: u32, spacing: u32) -> usize {
    (n * spacing as usize).div_ceil(length.max(1) as usize).max(1)
}

/// The label of the category at position `v`; empty between categories.
pub(crate) fn category_at(labels: &[String], v: f64) -> String {
    let i = v.round();
    if (v - i).abs() < 1e-6 && i >= 0.0 {
        labels.get(i as usize).cloned().unwrap_or_default()
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_word_boundaries() {
        assert_eq!(
            wrap("points: mean of repeated runs", 14),
            ["points: mean", "of repeated", "runs"]
        );
        assert_eq!(wrap("{\"batch\":32,\"device\":\"k40\"} x", 10), ["{\"batch\":3", "2,\"device\"", ":\"k40\"} x"]);
    }

    #[test]
    fn padding_includes_zero_and_never_collapses() {
        // from zero, the margin a twentieth of the axis drawn (0 to 20)
        assert_eq!(padded(10.0, 20.0, false, true), (0.0, 21.0));
        assert_eq!(padded(10.0, 20.0, false, false), (9.5, 20.5));
        // All below zero: the bars hang from zero at the top.
        assert_eq!(padded(-20.0, -10.0, false, true), (-21.0, 0.0));
        // Both signs: zero is inside already, both ends get the margin.
        assert_eq!(padded(-10.0, 10.0, false, true), (-11.0, 11.0));
        assert_eq!(padded(5.0, 5.0, false, false), (4.45, 5.55));
        let (lo, hi) = padded(1.0, 100.0, true, true);
        assert!((lo - 1.0 / 100f64.powf(0.05)).abs() < 1e-12 && hi > 100.0);
    }
}

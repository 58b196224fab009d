//! Pieces every chart shares: the legend panel beside the plot (so it never
//! covers data), axis ranges with padding, and text styles.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::FONT;

pub(crate) const LABEL_SIZE: u32 = 18;
pub(crate) const DESC_SIZE: u32 = 21;

/// One legend line: a colour swatch and its label.
pub(crate) struct LegendEntry {
    pub label: String,
    pub colour: RGBColor,
    /// A filled box (bar charts) rather than a line with a marker.
    pub boxed: bool,
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
        let (width, _) = panel.dim_in_pixel();
        let mut y = 40;
        if let Some(h) = &self.heading {
            panel.draw(&Text::new(h.clone(), (10, y), heading_style())).map_err(err)?;
            y += 28;
        }
        for e in &self.entries {
            let mid = y + 9;
            if e.boxed {
                panel
                    .draw(&Rectangle::new([(14, mid - 8), (36, mid + 8)], e.colour.filled()))
                    .map_err(err)?;
            } else {
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
            panel
                .draw(&Text::new(e.label.clone(), (50, y), entry_style()))
                .map_err(err)?;
            y += 28;
        }
        y += 10;
        let chars = ((width.saturating_sub(20)) / 8).max(10) as usize;
        for note in &self.notes {
            for line in wrap(note, chars) {
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
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
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
    let pad = (hi - lo) * 0.05;
    let lo = if include_zero && lo >= 0.0 { 0.0 } else { lo - pad };
    (lo, hi + pad)
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
    }

    #[test]
    fn padding_includes_zero_and_never_collapses() {
        assert_eq!(padded(10.0, 20.0, false, true), (0.0, 20.5));
        assert_eq!(padded(10.0, 20.0, false, false), (9.5, 20.5));
        assert_eq!(padded(5.0, 5.0, false, false), (4.45, 5.55));
        let (lo, hi) = padded(1.0, 100.0, true, true);
        assert!((lo - 1.0 / 100f64.powf(0.05)).abs() < 1e-12 && hi > 100.0);
    }
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

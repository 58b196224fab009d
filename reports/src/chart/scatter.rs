//! Scatter plots: one marker per run at (x, y), a colour and a shape per
//! series value, no lines. With `diagonal: true` the dashed line y = x runs
//! across the shared range of both axes, and the plot area is square, so
//! the line sits at 45 degrees and a marker's distance from it reads the
//! same on both axes (predicted against measured: above the line is an
//! over-prediction).

use plotters::coord::Shift;
use plotters::coord::combinators::{IntoLogRange, LogCoord};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::layout::{DESC_SIZE, LABEL_SIZE, Legend, LegendEntry, Marker, Swatch, Ticked, padded};
use super::xy::log_ticks;
use super::{FONT, series_colour};
use crate::labels::{Axis, axis_label};
use crate::prepare::ScatterData;
use crate::spec::PlotSpec;

/// Marker size: pixels from centre to edge.
const MARKER_R: i32 = 7;
/// The y = x line's colour.
fn diagonal_colour() -> RGBColor {
    RGBColor(0x55, 0x55, 0x55)
}

/// Pixel sizes the chart builder gives the axes (kept equal to what
/// [`plot`] asks for, so a diagonal plot can be made square).
const X_LABEL_AREA: u32 = 60;
const Y_LABEL_AREA: u32 = 85;
const MARGIN: u32 = 15;
const MARGIN_RIGHT: u32 = 25;

pub(super) fn draw<DB: DrawingBackend>(
    spec: &PlotSpec,
    d: &ScatterData,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    let mut entries: Vec<LegendEntry> = d
        .series
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            Some(LegendEntry {
                label: s.label.clone()?,
                colour: series_colour(i),
                swatch: Swatch::Marker(Marker::nth(i)),
            })
        })
        .collect();
    if d.diagonal {
        entries.push(LegendEntry {
            label: "y = x".to_string(),
            colour: diagonal_colour(),
            swatch: Swatch::Dashed,
        });
    }
    let runs: usize = d.series.iter().map(|s| s.points.len()).sum();
    let legend = Legend {
        heading: spec.series.as_deref().map(axis_label),
        entries,
        notes: vec![format!("{runs} runs, one marker each (not averaged)")],
    };
    let plot = if d.diagonal {
        legend.split_centred_and_draw(area, square_width(area.dim_in_pixel().1))?
    } else {
        legend.split_and_draw(area)?
    };

    let (log_x, log_y) = spec.log_axes();
    let (x0, x1) = padded(d.x_range.0, d.x_range.1, log_x, false);
    let (y0, y1) = if d.diagonal {
        (x0, x1)
    } else {
        let (y0, y1) = padded(d.y_range.0, d.y_range.1, log_y, false);
        let (y0, y1) = (spec.y_min.unwrap_or(y0), spec.y_max.unwrap_or(y1));
        if y0 < y1 { (y0, y1) } else { padded(y0.min(y1), y0.max(y1), log_y, false) }
    };
    if log_x {
        let xs = Ticked::<LogCoord<f64>>::new((x0..x1).log_scale(), log_ticks(x0, x1));
        with_y(spec, d, &plot, xs, (x0, x1), (y0, y1), log_y)
    } else {
        with_y(spec, d, &plot, x0..x1, (x0, x1), (y0, y1), log_y)
    }
}

/// The width of a drawing area `height` pixels tall whose plotting area
/// (inside the axis label areas and margins) is as wide as it is tall.
fn square_width(height: u32) -> u32 {
    let inner = height.saturating_sub(X_LABEL_AREA + 2 * MARGIN);
    inner + Y_LABEL_AREA + MARGIN + MARGIN_RIGHT
}

fn with_y<DB, XS>(
    spec: &PlotSpec,
    d: &ScatterData,
    area: &DrawingArea<DB, Shift>,
    xs: XS,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
    log_y: bool,
) -> Result<(), String>
where
    DB: DrawingBackend,
    XS: AsRangedCoord<Value = f64>,
    XS::CoordDescType: ValueFormatter<f64>,
{
    let diagonal = d.diagonal.then_some((x0, x1));
    if log_y {
        let ys = Ticked::<LogCoord<f64>>::new((y0..y1).log_scale(), log_ticks(y0, y1));
        plot(spec, d, area, xs, ys, diagonal)
    } else {
        plot(spec, d, area, xs, y0..y1, diagonal)
    }
}

fn plot<DB, XS, YS>(
    spec: &PlotSpec,
    d: &ScatterData,
    area: &DrawingArea<DB, Shift>,
    xs: XS,
    ys: YS,
    diagonal: Option<(f64, f64)>,
) -> Result<(), String>
where
    DB: DrawingBackend,
    XS: AsRangedCoord<Value = f64>,
    XS::CoordDescType: ValueFormatter<f64>,
    YS: AsRangedCoord<Value = f64>,
    YS::CoordDescType: ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .margin(MARGIN)
        .margin_right(MARGIN_RIGHT)
        .x_label_area_size(X_LABEL_AREA)
        .y_label_area_size(Y_LABEL_AREA)
        .build_cartesian_2d(xs, ys)
        .map_err(err)?;
    let (x_range, y_range) = (chart.x_range(), chart.y_range());
    let x_axis = Axis::new(spec.x_label.as_deref(), spec.x.as_deref().unwrap_or_default(), &x_range);
    let y_axis = Axis::new(spec.y_label.as_deref(), &spec.y, &y_range);
    let fmt_x = |v: &f64| x_axis.tick(*v);
    let fmt_y = |v: &f64| y_axis.tick(*v);
    chart
        .configure_mesh()
        .x_desc(x_axis.desc.as_str())
        .y_desc(y_axis.desc.as_str())
        .x_label_formatter(&fmt_x)
        .y_label_formatter(&fmt_y)
        .label_style((FONT, LABEL_SIZE))
        .axis_desc_style((FONT, DESC_SIZE))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(BLACK.mix(0.04))
        .max_light_lines(4)
        .draw()
        .map_err(err)?;
    // The diagonal first, so that markers on it stay visible.
    if let Some((lo, hi)) = diagonal {
        chart
            .draw_series(DashedLineSeries::new(
                [(lo, lo), (hi, hi)],
                10,
                6,
                diagonal_colour().stroke_width(2),
            ))
            .map_err(err)?;
    }
    for (i, s) in d.series.iter().enumerate() {
        let colour = series_colour(i);
        let shape = Marker::nth(i).outline(MARKER_R);
        chart
            .draw_series(s.points.iter().map(|&p| {
                // A white rim keeps overlapping markers apart.
                EmptyElement::at(p)
                    + Polygon::new(shape.clone(), colour.filled())
                    + PathElement::new(closed(&shape), WHITE.stroke_width(1))
            }))
            .map_err(err)?;
    }
    Ok(())
}

/// `outline` with its first point repeated at the end.
fn closed(outline: &[(i32, i32)]) -> Vec<(i32, i32)> {
    let mut v = outline.to_vec();
    v.extend(outline.first().copied());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_shapes_differ_and_stay_near_their_size() {
        let outlines: Vec<Vec<(i32, i32)>> = (0..6).map(|i| Marker::nth(i).outline(MARKER_R)).collect();
        for (i, a) in outlines.iter().enumerate() {
            for b in &outlines[i + 1..] {
                assert_ne!(a, b);
            }
            // Every vertex within 1.3 r of the centre and some vertex at least 0.8 r away.
            let far = a.iter().map(|&(x, y)| ((x * x + y * y) as f64).sqrt()).fold(0.0, f64::max);
            assert!(far <= 1.3 * MARKER_R as f64 && far >= 0.8 * MARKER_R as f64, "marker {i}: {far}");
        }
        assert_eq!(Marker::nth(6), Marker::nth(0));
    }
}

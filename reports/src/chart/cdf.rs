//! Empirical CDFs of per-step samples (e.g. step time), one step curve per
//! series value.

use plotters::coord::Shift;
use plotters::coord::combinators::IntoLogRange;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::layout::{DESC_SIZE, LABEL_SIZE, Legend, LegendEntry, Swatch, padded};
use super::{FONT, series_colour};
use crate::labels::{Axis, format_axis_tick};
use crate::prepare::CdfData;
use crate::spec::PlotSpec;

/// Curves with more samples are drawn through this many evenly spaced ranks,
/// which keeps the SVG small and is indistinguishable at chart resolution.
const MAX_STEPS: usize = 2000;

pub(super) fn draw<DB: DrawingBackend>(
    spec: &PlotSpec,
    d: &CdfData,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    let legend = Legend {
        heading: spec.series.as_deref().map(crate::labels::axis_label),
        entries: d
            .curves
            .iter()
            .enumerate()
            .filter_map(|(i, (label, _))| {
                Some(LegendEntry {
                    label: label.clone()?,
                    colour: series_colour(i),
                    swatch: Swatch::Line,
                })
            })
            .collect(),
        notes: vec![format!(
            "each curve pools the {} samples of every successful run{}",
            spec.y,
            if spec.series.is_some() { " with that series value" } else { "" }
        )],
    };
    let plot = legend.split_and_draw(area)?;
    let lo = d.curves.iter().filter_map(|c| c.1.first()).copied().fold(f64::INFINITY, f64::min);
    let hi = d.curves.iter().filter_map(|c| c.1.last()).copied().fold(f64::NEG_INFINITY, f64::max);
    let (x0, x1) = padded(lo, hi, spec.log_x, false);
    if spec.log_x {
        plot_curves(spec, d, &plot, (x0..x1).log_scale())
    } else {
        plot_curves(spec, d, &plot, x0..x1)
    }
}

fn plot_curves<DB, XS>(
    spec: &PlotSpec,
    d: &CdfData,
    area: &DrawingArea<DB, Shift>,
    xs: XS,
) -> Result<(), String>
where
    DB: DrawingBackend,
    XS: AsRangedCoord<Value = f64>,
    XS::CoordDescType: ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .margin(15)
        .margin_right(25)
        .x_label_area_size(60)
        .y_label_area_size(85)
        .build_cartesian_2d(xs, 0.0..1.0)
        .map_err(err)?;
    let (x_range, y_range) = (chart.x_range(), chart.y_range());
    let x_axis = Axis::new(spec.x_label.as_deref(), &spec.y, &x_range);
    let fmt = |v: &f64| x_axis.tick(*v);
    let fmt_y = |v: &f64| format_axis_tick(*v, &y_range);
    let y_desc = spec.y_label.clone().unwrap_or_else(|| "fraction of samples ≤ x".to_string());
    chart
        .configure_mesh()
        .x_desc(x_axis.desc.as_str())
        .y_desc(y_desc)
        .x_label_formatter(&fmt)
        .y_label_formatter(&fmt_y)
        .label_style((FONT, LABEL_SIZE))
        .axis_desc_style((FONT, DESC_SIZE))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(BLACK.mix(0.04))
        .max_light_lines(4)
        .draw()
        .map_err(err)?;
    for (i, (_, samples)) in d.curves.iter().enumerate() {
        chart
            .draw_series(LineSeries::new(steps(samples), series_colour(i).stroke_width(3)))
            .map_err(err)?;
    }
    Ok(())
}

/// The staircase of the empirical CDF of sorted `samples`.
fn steps(samples: &[f64]) -> Vec<(f64, f64)> {
    let n = samples.len();
    if n == 0 {
        return Vec::new();
    }
    let ranks: Vec<usize> = if n <= MAX_STEPS {
        (0..n).collect()
    } else {
        (0..MAX_STEPS).map(|k| k * (n - 1) / (MAX_STEPS - 1)).collect()
    };
    let mut out = Vec::with_capacity(2 * ranks.len());
    let mut below = 0.0;
    for r in ranks {
        let v = samples[r];
        out.push((v, below));
        below = (r + 1) as f64 / n as f64;
        out.push((v, below));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staircase_rises_by_one_over_n_at_each_sample() {
        assert_eq!(
            steps(&[1.0, 2.0, 4.0, 4.0]),
            [(1.0, 0.0), (1.0, 0.25), (2.0, 0.25), (2.0, 0.5), (4.0, 0.5), (4.0, 0.75), (4.0, 0.75), (4.0, 1.0)]
        );
    }

    #[test]
    fn long_curves_are_thinned_but_end_at_one() {
        let s: Vec<f64> = (0..10_000).map(f64::from).collect();
        let st = steps(&s);
        assert_eq!(st.len(), 2 * MAX_STEPS);
        assert_eq!(st.last(), Some(&(9999.0, 1.0)));
        assert_eq!(st[0], (0.0, 0.0));
    }
}

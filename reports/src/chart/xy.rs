//! Line charts (y against numeric or categorical x, one line per series
//! value) and grouped bar charts (categorical x). Repeats show as their mean
//! with a min..max error bar.

use plotters::coord::Shift;
use plotters::coord::combinators::{IntoLogRange, LogCoord};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::layout::{CategoryLabels, DESC_SIZE, LABEL_SIZE, Legend, LegendEntry, Swatch, Ticked, padded};
use super::{FONT, series_colour};
use crate::labels::Axis;
use crate::prepare::{XAxis, XyData};
use crate::spec::{PlotSpec, Reference, Role};

/// At most this many distinct numeric x values get a tick each.
const MAX_VALUE_TICKS: usize = 12;

pub(super) fn draw<DB: DrawingBackend>(
    spec: &PlotSpec,
    d: &XyData,
    bar: bool,
    refs: &[&Reference],
    area: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    // Reference points only fit a numeric x axis.
    let refs: Vec<&Reference> = if d.x_axis == XAxis::Numeric { refs.to_vec() } else { Vec::new() };
    let mut legend = Legend {
        heading: spec.series.as_deref().map(crate::labels::axis_label),
        entries: d
            .series
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                // Beside reference points, a plot without series names its line.
                let label = s.label.clone().or_else(|| (!refs.is_empty()).then(|| "simulation".to_string()))?;
                Some(LegendEntry {
                    label,
                    colour: series_colour(i),
                    swatch: if bar { Swatch::Box } else { Swatch::Line },
                })
            })
            .collect(),
        notes: if d.has_repeats() {
            let what = if bar { "bar height" } else { "points" };
            vec![format!(
                "{what}: mean over repeated runs with equal x{}; error bars: min..max",
                if spec.series.is_some() { " and series" } else { "" }
            )]
        } else {
            vec![]
        },
    };
    for (i, r) in refs.iter().enumerate() {
        let roles: Vec<Option<Role>> = [Some(Role::Calibration), Some(Role::HeldOut), None]
            .into_iter()
            .filter(|role| r.points.iter().any(|p| r.role_of(p) == *role))
            .collect();
        for role in roles {
            let label = match role {
                Some(role) => format!("{} ({})", r.label(), role.describe()),
                None => r.label().to_string(),
            };
            legend.entries.push(LegendEntry {
                label,
                colour: reference_colour(spec, d, r, i),
                swatch: Swatch::Reference { filled: role == Some(Role::Calibration) },
            });
        }
    }
    let plot = legend.split_and_draw(area)?;

    let points = d.series.iter().flat_map(|s| s.points.iter());
    let (y_lo, y_hi) = points.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, st)| {
        (lo.min(st.min), hi.max(st.max))
    });
    let ref_points = refs.iter().flat_map(|r| r.points.iter());
    let (y_lo, y_hi) = ref_points.fold((y_lo, y_hi), |(lo, hi), p| (lo.min(p.y), hi.max(p.y)));
    // A linear y axis includes zero unless the plot sets `y_min`: a bar's
    // length is its value, and a line's slope should not turn a 5% change
    // into the plot's full height (`y_min` zooms in, and says so by being
    // written in the file).
    let (y0, y1) = padded(y_lo, y_hi, spec.log_y, true);
    let (y0, y1) = (spec.y_min.unwrap_or(y0), spec.y_max.unwrap_or(y1));
    let (y0, y1) = if y0 < y1 { (y0, y1) } else { padded(y0.min(y1), y0.max(y1), spec.log_y, false) };

    match &d.x_axis {
        XAxis::Categorical(labels) => {
            let width = plot.dim_in_pixel().0.saturating_sub(140);
            let categories = CategoryLabels::fit(&plot, labels, width)?;
            let xs = Ticked::<RangedCoordf64>::new(
                -0.5..labels.len() as f64 - 0.5,
                categories.ticks(),
            );
            let what = What { spec, d, bar, categories: Some(&categories), refs: &refs };
            with_y(&what, &plot, xs, (y0, y1))
        }
        XAxis::Numeric => {
            let what = What { spec, d, bar, categories: None, refs: &refs };
            let mut values: Vec<f64> = d
                .series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.0))
                .chain(refs.iter().flat_map(|r| r.points.iter().map(|p| p.x)))
                .collect();
            values.sort_by(f64::total_cmp);
            values.dedup();
            let lo = values.first().copied().unwrap_or(0.0);
            let hi = values.last().copied().unwrap_or(1.0);
            let (x0, x1) = padded(lo, hi, spec.log_x, false);
            let few = values.len() <= MAX_VALUE_TICKS;
            match (spec.log_x, few) {
                (false, false) => with_y(&what, &plot, x0..x1, (y0, y1)),
                (false, true) => {
                    let xs = Ticked::<RangedCoordf64>::new(x0..x1, values);
                    with_y(&what, &plot, xs, (y0, y1))
                }
                (true, false) => {
                    with_y(&what, &plot, (x0..x1).log_scale(), (y0, y1))
                }
                (true, true) => {
                    let xs = Ticked::<LogCoord<f64>>::new((x0..x1).log_scale(), values);
                    with_y(&what, &plot, xs, (y0, y1))
                }
            }
        }
    }
}

/// What one line or bar chart shows.
struct What<'a> {
    spec: &'a PlotSpec,
    d: &'a XyData,
    bar: bool,
    categories: Option<&'a CategoryLabels>,
    refs: &'a [&'a Reference],
}

fn with_y<DB, XS>(
    what: &What<'_>,
    area: &DrawingArea<DB, Shift>,
    xs: XS,
    (y0, y1): (f64, f64),
) -> Result<(), String>
where
    DB: DrawingBackend,
    XS: AsRangedCoord<Value = f64>,
    XS::CoordDescType: ValueFormatter<f64>,
{
    if what.spec.log_y {
        let ys = Ticked::<LogCoord<f64>>::new((y0..y1).log_scale(), log_ticks(y0, y1));
        plot(what, area, xs, ys, y0)
    } else {
        // A bar's length is its value: bars rise or hang from zero.
        plot(what, area, xs, y0..y1, 0.0f64.clamp(y0, y1))
    }
}

fn plot<DB, XS, YS>(
    what: &What<'_>,
    area: &DrawingArea<DB, Shift>,
    xs: XS,
    ys: YS,
    y_base: f64,
) -> Result<(), String>
where
    DB: DrawingBackend,
    XS: AsRangedCoord<Value = f64>,
    XS::CoordDescType: ValueFormatter<f64>,
    YS: AsRangedCoord<Value = f64>,
    YS::CoordDescType: ValueFormatter<f64>,
{
    let &What { spec, d, bar, categories, refs } = what;
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .margin(15)
        .margin_right(25)
        .x_label_area_size(categories.as_ref().map_or(60, |c| c.area_size))
        .y_label_area_size(85)
        .build_cartesian_2d(xs, ys)
        .map_err(err)?;
    let (x_range, y_range) = (chart.x_range(), chart.y_range());
    let x_axis = Axis::new(spec.x_label.as_deref(), spec.x.as_deref().unwrap_or_default(), &x_range);
    let y_axis = Axis::new(spec.y_label.as_deref(), &spec.y, &y_range);
    let x_label = |v: &f64| match categories {
        Some(c) => c.at(*v),
        None => x_axis.tick(*v),
    };
    let y_label = |v: &f64| y_axis.tick(*v);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x_axis.desc.as_str())
        .y_desc(y_axis.desc.as_str())
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .label_style((FONT, LABEL_SIZE))
        .axis_desc_style((FONT, DESC_SIZE))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(BLACK.mix(0.04))
        .max_light_lines(4);
    if bar {
        mesh.disable_x_mesh();
    }
    mesh.draw().map_err(err)?;
    if let Some(c) = categories {
        c.draw_turned(&chart, area)?;
    }

    let groups = d.series.len().max(1) as f64;
    for (i, s) in d.series.iter().enumerate() {
        let colour = series_colour(i);
        if bar {
            let w = 0.8 / groups;
            let bars = s.points.iter().map(|(x, st)| {
                let x0 = x - 0.4 + w * i as f64;
                Rectangle::new([(x0 + w * 0.06, y_base), (x0 + w * 0.94, st.mean)], colour.filled())
            });
            chart.draw_series(bars).map_err(err)?;
            let centred = s.points.iter().map(|(x, st)| (x - 0.4 + w * (i as f64 + 0.5), *st));
            let bars: Vec<_> = centred
                .filter(|(_, st)| st.n > 1)
                .map(|(x, st)| (x, st.min, st.max))
                .collect();
            draw_error_bars(&mut chart, &bars, BLACK.stroke_width(2)).map_err(err)?;
        } else {
            let style = colour.stroke_width(3);
            chart
                .draw_series(LineSeries::new(s.points.iter().map(|(x, st)| (*x, st.mean)), style))
                .map_err(err)?;
            let bars: Vec<_> = s
                .points
                .iter()
                .filter(|(_, st)| st.n > 1)
                .map(|(x, st)| (*x, st.min, st.max))
                .collect();
            draw_error_bars(&mut chart, &bars, colour.stroke_width(2)).map_err(err)?;
            chart
                .draw_series(
                    s.points
                        .iter()
                        .map(|(x, st)| Circle::new((*x, st.mean), 5, colour.filled())),
                )
                .map_err(err)?;
        }
    }
    // Published numbers, drawn last so that they sit on top: held-out
    // points as hollow diamonds with a cross, calibration points (fitted,
    // so close by construction) as filled diamonds.
    for (i, r) in refs.iter().enumerate() {
        let colour = reference_colour(spec, d, r, i);
        chart
            .draw_series(r.points.iter().map(|p| {
                let fill = if r.role_of(p) == Some(Role::Calibration) { colour.filled() } else { WHITE.filled() };
                EmptyElement::at((p.x, p.y))
                    + Polygon::new(vec![(0, -9), (9, 0), (0, 9), (-9, 0)], fill)
                    + PathElement::new(vec![(0, -9), (9, 0), (0, 9), (-9, 0), (0, -9)], colour.stroke_width(2))
                    + PathElement::new(vec![(-5, 0), (5, 0)], colour.stroke_width(2))
                    + PathElement::new(vec![(0, -5), (0, 5)], colour.stroke_width(2))
            }))
            .map_err(err)?;
    }
    Ok(())
}

/// Ticks of a log axis over `lo..hi`: 1, 2 and 5 times each power of ten
/// when the range spans under three decades (powers of ten alone would
/// leave one or two labels), else the powers of ten.
pub(crate) fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo && hi.is_finite()) {
        return Vec::new();
    }
    let decades = (hi / lo).log10();
    let mults: &[f64] = if decades < 3.0 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    let step = if decades > 12.0 { (decades / 6.0).ceil() as i32 } else { 1 };
    let mut ticks = Vec::new();
    let mut e = lo.log10().floor() as i32;
    while e <= hi.log10().ceil() as i32 {
        for m in mults {
            let v = m * 10f64.powi(e);
            if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                ticks.push(v);
            }
        }
        e += step;
    }
    ticks
}

/// A reference's colour: its series' where `where:` pins the plot's series
/// key to a drawn series, else black, then dark greys, so that published
/// numbers never share a colour with a series they do not belong to.
fn reference_colour(spec: &PlotSpec, d: &XyData, r: &Reference, i: usize) -> RGBColor {
    let pinned = spec.series.as_ref().and_then(|key| r.filter.get(key)).map(|v| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    if let Some(j) = pinned.and_then(|label| d.series.iter().position(|s| s.label.as_deref() == Some(label.as_str()))) {
        return series_colour(j);
    }
    [RGBColor(0, 0, 0), RGBColor(90, 90, 90), RGBColor(150, 150, 150)][i % 3]
}

/// Vertical min..max bars with 12-pixel caps: (x, min, max) each.
fn draw_error_bars<DB, X, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    bars: &[(f64, f64, f64)],
    style: ShapeStyle,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart.draw_series(
        bars.iter()
            .map(|&(x, lo, hi)| PathElement::new(vec![(x, lo), (x, hi)], style)),
    )?;
    for &(x, lo, hi) in bars {
        for y in [lo, hi] {
            chart.plotting_area().draw(
                &(EmptyElement::at((x, y)) + PathElement::new(vec![(-6, 0), (6, 0)], style)),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::log_ticks;

    #[test]
    fn log_ticks_are_one_two_five_over_few_decades() {
        assert_eq!(log_ticks(1.5, 700.0), [2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0]);
        assert_eq!(log_ticks(0.001, 20.0), [0.001, 0.01, 0.1, 1.0, 10.0]);
        assert!(log_ticks(0.0, 1.0).is_empty());
    }
}

//! Heat maps: the mean of `z` over the grid of `x` and `y` values (e.g.
//! systolic-array utilization over array sizes and dataflows), coloured on
//! the viridis scale with a colour bar beside the grid.

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::FONT;
use super::layout::{CategoryLabels, DESC_SIZE, LABEL_SIZE, Ticked, category_at, label_stride};
use crate::cell::format_number;
use crate::labels::{axis_label, format_tick};
use crate::prepare::HeatData;
use crate::spec::PlotSpec;

/// Cells are labelled with their value when the grid has at most this many.
const MAX_LABELLED_CELLS: usize = 144;
const COLOUR_BAR_WIDTH: u32 = 150;
const MISSING: RGBColor = RGBColor(232, 232, 232);
const MISSING_TEXT: RGBColor = RGBColor(120, 120, 120);

pub(super) fn draw<DB: DrawingBackend>(
    spec: &PlotSpec,
    d: &HeatData,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (w, _) = area.dim_in_pixel();
    let (grid_area, bar_area) = area.split_horizontally(w - COLOUR_BAR_WIDTH);

    // A log colour scale works on ln(z) (prepare checked that z > 0).
    let f = |v: f64| if spec.log_z { v.ln() } else { v };
    let means = d.cells.iter().flatten().flatten().map(|s| f(s.mean));
    let (lo, hi) = means.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let (z0, z1) = if !lo.is_finite() {
        (0.0, 1.0)
    } else if lo == hi {
        let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.5 };
        (lo - d, hi + d)
    } else {
        (lo, hi)
    };
    let t_of = |v: f64| ((f(v) - z0) / (z1 - z0)).clamp(0.0, 1.0);

    let (nx, ny) = (d.x_levels.len(), d.y_levels.len());
    let x_labels = CategoryLabels::fit(
        &grid_area,
        &d.x_levels,
        grid_area.dim_in_pixel().0.saturating_sub(120),
    )?;
    let y_length = grid_area.dim_in_pixel().1.saturating_sub(x_labels.area_size + 30);
    let y_stride = label_stride(ny, y_length, 22);
    let y_ticks: Vec<f64> = (0..ny).step_by(y_stride).map(|i| i as f64).collect();
    // Room for the widest y label and, beside it, the axis title.
    let label_style: TextStyle = (FONT, LABEL_SIZE).into();
    let mut widest = 0;
    for l in &d.y_levels {
        let (w, _) = grid_area.estimate_text_size(l, &label_style).map_err(|e| e.to_string())?;
        widest = widest.max(w);
    }
    let mut chart = ChartBuilder::on(&grid_area)
        .margin(15)
        .margin_right(10)
        .x_label_area_size(x_labels.area_size)
        .y_label_area_size((widest + 55).clamp(95, 320))
        .build_cartesian_2d(
            Ticked::<RangedCoordf64>::new(-0.5..nx as f64 - 0.5, x_labels.ticks()),
            Ticked::<RangedCoordf64>::new(-0.5..ny as f64 - 0.5, y_ticks),
        )
        .map_err(err)?;
    let x_fmt = |v: &f64| x_labels.at(*v);
    let y_fmt = |v: &f64| category_at(&d.y_levels, *v);
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(spec.x_label.clone().unwrap_or_else(|| axis_label(spec.x.as_deref().unwrap_or_default())))
        .y_desc(spec.y_label.clone().unwrap_or_else(|| axis_label(&spec.y)))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style((FONT, LABEL_SIZE))
        .axis_desc_style((FONT, DESC_SIZE))
        .draw()
        .map_err(err)?;
    x_labels.draw_turned(&chart, &grid_area)?;

    let cells = d.cells.iter().enumerate().flat_map(|(yi, row)| {
        row.iter().enumerate().map(move |(xi, st)| (xi as f64, yi as f64, *st))
    });
    let cells: Vec<_> = cells.collect();
    // Thin white gaps between cells, unless cells are too small to spare them.
    let (hx, hy) = (if nx > 20 { 0.5 } else { 0.49 }, if ny > 20 { 0.5 } else { 0.49 });
    chart
        .draw_series(cells.iter().map(|&(x, y, st)| {
            let fill = st.map_or(MISSING, |s| viridis(t_of(s.mean)));
            Rectangle::new([(x - hx, y - hy), (x + hx, y + hy)], fill.filled())
        }))
        .map_err(err)?;
    if nx * ny <= MAX_LABELLED_CELLS {
        let size = if nx.max(ny) > 8 { 14 } else { 18 };
        chart
            .draw_series(cells.iter().map(|&(x, y, st)| {
                let (text, colour) = match st {
                    Some(s) if t_of(s.mean) > 0.6 => (format_number(s.mean), &BLACK),
                    Some(s) => (format_number(s.mean), &WHITE),
                    None => ("no data".to_string(), &MISSING_TEXT),
                };
                let style = TextStyle::from((FONT, size).into_font())
                    .color(colour)
                    .pos(Pos::new(HPos::Center, VPos::Center));
                Text::new(text, (x, y), style)
            }))
            .map_err(err)?;
    }
    let repeats = d.cells.iter().flatten().flatten().any(|s| s.n > 1);
    draw_colour_bar(spec, &bar_area, (z0, z1), repeats, x_labels.area_size)
}

fn draw_colour_bar<DB: DrawingBackend>(
    spec: &PlotSpec,
    area: &DrawingArea<DB, Shift>,
    (z0, z1): (f64, f64),
    repeats: bool,
    bottom: u32,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .margin_top(15)
        .margin_bottom(bottom + 15)
        .margin_left(10)
        .right_y_label_area_size(95)
        .build_cartesian_2d(0.0..1.0, Ticked::<RangedCoordf64>::new(z0..z1, bar_ticks(z0, z1, spec.log_z)))
        .map_err(err)?;
    let log = spec.log_z;
    let fmt = |v: &f64| format_tick(if log { v.exp() } else { *v });
    let z = spec.z.as_deref().unwrap_or_default();
    chart
        .configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_label_formatter(&fmt)
        .label_style((FONT, 16))
        .draw()
        .map_err(err)?;
    const STEPS: usize = 100;
    chart
        .draw_series((0..STEPS).map(|i| {
            let a = z0 + (z1 - z0) * i as f64 / STEPS as f64;
            let b = z0 + (z1 - z0) * (i + 1) as f64 / STEPS as f64;
            let t = (i as f64 + 0.5) / STEPS as f64;
            Rectangle::new([(0.0, a), (1.0, b)], viridis(t).filled())
        }))
        .map_err(err)?;
    // The bar's name goes under it, horizontal, where the grid has its x labels.
    let (_, h) = area.dim_in_pixel();
    // The label wrapped to the bar's width (about 13 characters a line).
    let label = axis_label(z);
    let mut lines: Vec<(String, u32)> = Vec::new();
    let mut line = String::new();
    for word in label.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > 13 {
            lines.push((std::mem::take(&mut line), 17));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push((line, 17));
    }
    if repeats {
        lines.push(("(mean of repeats)".to_string(), 14));
    }
    for (i, (line, size)) in lines.into_iter().enumerate() {
        let style = TextStyle::from((FONT, size).into_font());
        let y = h as i32 - bottom as i32 + 3 + 22 * i as i32;
        area.draw(&Text::new(line, (10, y), style))
            .map_err(err)?;
    }
    Ok(())
}

/// Colour-bar ticks over `z0..z1`: 1-2-5 values of z on a log scale (given
/// as ln z), else about six round linear steps.
fn bar_ticks(z0: f64, z1: f64, log: bool) -> Vec<f64> {
    if log {
        return super::xy::log_ticks(z0.exp(), z1.exp()).into_iter().map(f64::ln).collect();
    }
    let span = z1 - z0;
    if !(span > 0.0 && span.is_finite()) {
        return vec![z0];
    }
    let raw = span / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let m = [1.0, 2.0, 5.0, 10.0].into_iter().find(|m| m * mag >= raw).unwrap_or(10.0);
    let step = m * mag;
    // Ticks as whole multiples of m, scaled once (0.6, not 3 x 0.2 = 0.6000000000000001).
    let scale = |k: f64| if mag >= 1.0 { k * m * mag } else { k * m / (1.0 / mag).round() };
    let first = (z0 / step - 1e-9).ceil() as i64;
    let last = (z1 / step + 1e-9).floor() as i64;
    (first..=last).map(|k| scale(k as f64)).collect()
}

/// The viridis colour map (perceptually uniform, readable in grey) at t in 0..1.
pub(crate) fn viridis(t: f64) -> RGBColor {
    const STOPS: [(u8, u8, u8); 9] = [
        (68, 1, 84),
        (72, 36, 117),
        (62, 73, 137),
        (49, 104, 142),
        (38, 130, 142),
        (31, 158, 137),
        (53, 183, 121),
        (134, 213, 73),
        (253, 231, 37),
    ];
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    let pos = t * (STOPS.len() - 1) as f64;
    let i = (pos.floor() as usize).min(STOPS.len() - 2);
    let f = pos - i as f64;
    let mix = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viridis_runs_from_purple_to_yellow() {
        assert_eq!(viridis(0.0), RGBColor(68, 1, 84));
        assert_eq!(viridis(1.0), RGBColor(253, 231, 37));
        assert_eq!(viridis(0.5), RGBColor(38, 130, 142));
        assert_eq!(viridis(f64::NAN), viridis(0.0));
    }
}

#[cfg(test)]
mod bar_tick_tests {
    use super::bar_ticks;

    #[test]
    fn colour_bar_ticks_are_round() {
        assert_eq!(bar_ticks(0.45, 1.55, false), [0.6, 0.8, 1.0, 1.2, 1.4]);
        let log: Vec<f64> = bar_ticks(1f64.ln(), 300f64.ln(), true).into_iter().map(|v| (v.exp() * 1e6).round() / 1e6).collect();
        assert_eq!(log, [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0]);
    }
}

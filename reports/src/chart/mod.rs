//! Drawing prepared chart data to PNG and SVG with plotters.
//!
//! Every chart is drawn by one function generic over the plotters backend, so
//! the PNG and the SVG of a plot are the same picture. Text uses the DejaVu
//! Sans font compiled into the binary (registered once), so nothing depends on
//! the system's font libraries.

mod cdf;
mod heatmap;
mod layout;
mod scatter;
mod xy;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::error::ReportError;
use crate::prepare::ChartData;
use crate::spec::{PlotSpec, Reference};

/// Pixel size of every chart.
pub(crate) const WIDTH: u32 = 1000;
pub(crate) const HEIGHT: u32 = 620;

/// The font family name plotters asks for by default, bound to DejaVu Sans.
pub(crate) const FONT: &str = "sans-serif";

/// Registers the embedded font with plotters, once per process.
fn ensure_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
                .and_then(|()| register_font(FONT, FontStyle::Bold, dejavu::sans::bold()))
                .map_err(|_| "the embedded DejaVu Sans font could not be loaded".to_string())
        })
        .clone()
}

/// Draws `data` for `spec` to `<dir>/<stem>.png` and `<dir>/<stem>.svg`;
/// returns the two paths.
pub(crate) fn draw_files(
    spec: &PlotSpec,
    data: &ChartData,
    refs: &[&Reference],
    subtitle: &[String],
    dir: &Path,
    stem: &str,
) -> Result<[PathBuf; 2], ReportError> {
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    let fail = |path: &Path, message: String| ReportError::Draw {
        path: path.to_path_buf(),
        message,
    };
    ensure_font().map_err(|m| fail(&png, m))?;

    let root = BitMapBackend::new(&png, (WIDTH, HEIGHT)).into_drawing_area();
    draw(spec, data, refs, subtitle, &root).map_err(|m| fail(&png, m))?;
    root.present().map_err(|e| fail(&png, e.to_string()))?;
    drop(root);

    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (WIDTH, HEIGHT)).into_drawing_area();
        draw(spec, data, refs, subtitle, &root).map_err(|m| fail(&svg, m))?;
        root.present().map_err(|e| fail(&svg, e.to_string()))?;
    }
    flowlab_files::write_atomic(&svg, text.as_bytes()).map_err(|e| ReportError::io(&svg, e))?;
    Ok([png, svg])
}

/// Draws one chart on any backend.
fn draw<DB: DrawingBackend>(
    spec: &PlotSpec,
    data: &ChartData,
    refs: &[&Reference],
    subtitle: &[String],
    root: &DrawingArea<DB, Shift>,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let title = spec.title.clone().unwrap_or_else(|| default_title(spec));
    let below_title = root
        .titled(&title, (FONT, 28).into_font().style(FontStyle::Bold))
        .map_err(|e| e.to_string())?;
    // The settings held fixed, in grey under the title, a line each.
    const SUB_LINE: u32 = 19;
    let lines = subtitle.len() as u32;
    let (sub, body) = below_title.split_vertically(if lines == 0 { 0 } else { lines * SUB_LINE + 8 });
    let style = (FONT, 15).into_font().color(&BLACK.mix(0.62)).pos(plotters::style::text_anchor::Pos::new(
        plotters::style::text_anchor::HPos::Center,
        plotters::style::text_anchor::VPos::Top,
    ));
    for (i, line) in subtitle.iter().enumerate() {
        sub.draw(&Text::new(line.as_str(), ((WIDTH / 2) as i32, (i as u32 * SUB_LINE) as i32), style.clone()))
            .map_err(|e| e.to_string())?;
    }
    match data {
        ChartData::Line(d) => xy::draw(spec, d, false, refs, &body),
        ChartData::Bar(d) => xy::draw(spec, d, true, &[], &body),
        ChartData::Cdf(d) => cdf::draw(spec, d, &body),
        ChartData::Heat(d) => heatmap::draw(spec, d, &body),
        ChartData::Scatter(d) => scatter::draw(spec, d, &body),
        ChartData::NoData => body
            .draw(&Text::new(
                "no successful result points to plot",
                (40, (HEIGHT / 2) as i32 - 40),
                (FONT, 22).into_font().color(&BLACK.mix(0.6)),
            ))
            .map_err(|e| e.to_string()),
    }
}

/// `throughput vs workers`, `CDF of step time`, `PE utilization by array rows and dataflow`:
/// the keys' labels without their units (the axes carry those).
pub(crate) fn default_title(spec: &PlotSpec) -> String {
    let label = |key: &str| {
        let l = crate::labels::axis_label(key);
        match l.rfind(" (") {
            Some(i) if l.ends_with(')') => l[..i].to_string(),
            _ => l,
        }
    };
    use crate::spec::PlotKind;
    match spec.kind {
        PlotKind::Line | PlotKind::Bar | PlotKind::Scatter => {
            format!("{} vs {}", label(&spec.y), label(spec.x.as_deref().unwrap_or_default()))
        }
        PlotKind::Cdf => format!("CDF of {}", label(&spec.y)),
        PlotKind::Heatmap => format!(
            "{} by {} and {}",
            label(spec.z.as_deref().unwrap_or_default()),
            label(spec.x.as_deref().unwrap_or_default()),
            label(&spec.y)
        ),
    }
}

/// Ten colours that stay apart on screen and in print (Tableau 10).
pub(crate) fn series_colour(i: usize) -> RGBColor {
    const PALETTE: [RGBColor; 10] = [
        RGBColor(0x4e, 0x79, 0xa7),
        RGBColor(0xf2, 0x8e, 0x2b),
        RGBColor(0xe1, 0x57, 0x59),
        RGBColor(0x59, 0xa1, 0x4f),
        RGBColor(0xb0, 0x7a, 0xa1),
        RGBColor(0x76, 0xb7, 0xb2),
        RGBColor(0xed, 0xc9, 0x48),
        RGBColor(0x9c, 0x75, 0x5f),
        RGBColor(0xff, 0x9d, 0xa7),
        RGBColor(0x79, 0x70, 0x6e),
    ];
    PALETTE[i % PALETTE.len()]
}

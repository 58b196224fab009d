//! The numbers a run's plots draw, as text tables: what a catalog file's
//! header quotes, regenerated from a fresh run (`flowlab report DIR
//! --figures`, docs/gen/catalog-figures.sh) and compared with the file in
//! CI, so that no quoted figure drifts from what the code computes.

use std::fmt::Write;
use std::path::Path;

use crate::cell::format_number;
use crate::error::ReportError;
use crate::experiment::ExperimentHeader;
use crate::prepare::{ChartData, XAxis, prepare};
use crate::results::read_results_file;
use crate::spec::PlotSpec;

/// Metrics that time this machine rather than compute a result: never
/// quoted, since no two runs agree on them.
const WALL_CLOCK: &[&str] = &["placement_s"];

/// Each line, heat map and bar plot of the experiment in `dir` as a table
/// (rows: x; columns: series), means of repeats at four significant
/// digits, every line starting `# ` to sit in a YAML header.
pub fn figures_text(dir: &Path) -> Result<String, ReportError> {
    let exp_path = dir.join("experiment.yaml");
    let results_path = dir.join("results.jsonl");
    let text = std::fs::read_to_string(&exp_path).map_err(|e| ReportError::io(&exp_path, e))?;
    let header = ExperimentHeader::parse(&exp_path, &text)?;
    let results = read_results_file(&results_path)?;
    let mut out = String::new();
    for spec in &header.plots {
        let value = spec.z.as_deref().unwrap_or(&spec.y);
        if WALL_CLOCK.contains(&value) {
            continue;
        }
        let table = match prepare(spec, &results.rows, &results_path)? {
            ChartData::Line(d) | ChartData::Bar(d) => xy_table(spec, &d),
            ChartData::Heat(h) => {
                let mut rows = vec![std::iter::once(format!("{} \\ {}", spec.y, spec.x.as_deref().unwrap_or_default())).chain(h.x_levels.iter().cloned()).collect::<Vec<_>>()];
                for (yi, y) in h.y_levels.iter().enumerate() {
                    rows.push(std::iter::once(y.clone()).chain(h.cells[yi].iter().map(|c| c.map_or("-".into(), |s| format_number(s.mean)))).collect());
                }
                rows
            }
            ChartData::Cdf(_) | ChartData::Scatter(_) | ChartData::NoData => continue,
        };
        let slice: Vec<String> = spec.filter.iter().map(|(k, v)| format!("{k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_string))).collect();
        let slice = if slice.is_empty() { String::new() } else { format!(", {}", slice.join(", ")) };
        let _ = writeln!(out, "# {value}{slice}:");
        for line in aligned(&table) {
            let _ = writeln!(out, "#   {line}");
        }
    }
    Ok(out)
}

/// Rows x (first column) by series (one column each).
fn xy_table(spec: &PlotSpec, d: &crate::prepare::XyData) -> Vec<Vec<String>> {
    let x_key = spec.x.as_deref().unwrap_or_default();
    let mut xs: Vec<f64> = d.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let x_label = |x: f64| match &d.x_axis {
        XAxis::Categorical(labels) => labels.get(x as usize).cloned().unwrap_or_default(),
        XAxis::Numeric => format_number(x),
    };
    let head = match &spec.series {
        Some(s) => format!("{x_key} \\ {s}"),
        None => x_key.to_string(),
    };
    let mut rows = vec![std::iter::once(head).chain(d.series.iter().map(|s| s.label.clone().unwrap_or_else(|| spec.y.clone()))).collect::<Vec<_>>()];
    for x in xs {
        let cells = d.series.iter().map(|s| s.points.iter().find(|p| p.0 == x).map_or("-".to_string(), |p| format_number(p.1.mean)));
        rows.push(std::iter::once(x_label(x)).chain(cells).collect());
    }
    rows
}

/// Columns padded to their widest cell; no trailing spaces.
fn aligned(rows: &[Vec<String>]) -> Vec<String> {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r.iter().enumerate().map(|(c, s)| format!("{s:<w$}", w = widths[c])).collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_without_trailing_space() {
        let rows = vec![vec!["x".to_string(), "a".into(), "bb".into()], vec!["10".into(), "1.5".into(), "2".into()]];
        assert_eq!(aligned(&rows), ["x   a    bb", "10  1.5  2"]);
    }
}

//! From result rows and a plot spec to the numbers a chart draws.
//!
//! Rows with an error are left out. Rows with equal (x, series) values are
//! repeats (e.g. several seeds): the chart shows their mean, and min..max as
//! an error bar. A key that no successful row has is an error listing the
//! keys that are there.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use crate::cell::{Cell, Stat, levels};
use crate::error::ReportError;
use crate::results::ResultRow;
use crate::spec::{PlotKind, PlotSpec};

/// The x axis of a line or bar chart.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum XAxis {
    /// Positions are the values themselves.
    Numeric,
    /// Positions are 0..n, one per label.
    Categorical(Vec<String>),
}

/// One line (or one colour of bars).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SeriesPoints {
    /// The series value; `None` when the plot has no `series` key.
    pub label: Option<String>,
    /// (x position, statistics of the repeats), sorted by x.
    pub points: Vec<(f64, Stat)>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct XyData {
    pub x_axis: XAxis,
    pub series: Vec<SeriesPoints>,
}

impl XyData {
    pub(crate) fn has_repeats(&self) -> bool {
        self.series.iter().any(|s| s.points.iter().any(|(_, st)| st.n > 1))
    }
}

/// One empirical CDF per series value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CdfData {
    /// (label, sorted samples).
    pub curves: Vec<(Option<String>, Vec<f64>)>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HeatData {
    pub x_levels: Vec<String>,
    pub y_levels: Vec<String>,
    /// `cells[yi][xi]`: statistics of `z` at that grid position.
    pub cells: Vec<Vec<Option<Stat>>>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ChartData {
    Line(XyData),
    Bar(XyData),
    Cdf(CdfData),
    Heat(HeatData),
    /// No successful row: the chart says so instead of failing the report.
    NoData,
}

/// Gathers what `spec` plots from `rows`; `results` names the file in errors.
pub(crate) fn prepare(
    spec: &PlotSpec,
    rows: &[ResultRow],
    results: &Path,
) -> Result<ChartData, ReportError> {
    spec.validate()?;
    let ok: Vec<&ResultRow> = rows.iter().filter(|r| r.error.is_none()).collect();
    if ok.is_empty() {
        return Ok(ChartData::NoData);
    }
    let ctx = Ctx { spec, ok: &ok, results };
    match spec.kind {
        PlotKind::Line => Ok(ChartData::Line(ctx.xy(false)?)),
        PlotKind::Bar => Ok(ChartData::Bar(ctx.xy(true)?)),
        PlotKind::Cdf => Ok(ChartData::Cdf(ctx.cdf()?)),
        PlotKind::Heatmap => Ok(ChartData::Heat(ctx.heat()?)),
    }
}

struct Ctx<'a> {
    spec: &'a PlotSpec,
    ok: &'a [&'a ResultRow],
    results: &'a Path,
}

impl Ctx<'_> {
    fn invalid(&self, reason: String) -> ReportError {
        ReportError::InvalidPlot {
            plot: self.spec.describe(),
            reason,
        }
    }

    /// Fails unless some successful row has `key` as a parameter or metric.
    fn require_key(&self, role: &'static str, key: &str) -> Result<(), ReportError> {
        if self.ok.iter().any(|r| Cell::lookup(r, key).is_some()) {
            return Ok(());
        }
        let available: BTreeSet<String> = self
            .ok
            .iter()
            .flat_map(|r| r.params.keys().chain(r.metrics.keys()).cloned())
            .collect();
        Err(ReportError::UnknownKey {
            path: self.results.to_path_buf(),
            plot: self.spec.describe(),
            role,
            key: key.to_string(),
            available: available.into_iter().collect(),
        })
    }

    fn require_series_entry(&self, key: &str) -> Result<(), ReportError> {
        if self.ok.iter().any(|r| r.series.contains_key(key)) {
            return Ok(());
        }
        let available: BTreeSet<String> =
            self.ok.iter().flat_map(|r| r.series.keys().cloned()).collect();
        Err(ReportError::UnknownKey {
            path: self.results.to_path_buf(),
            plot: self.spec.describe(),
            role: "y, a per-step series",
            key: key.to_string(),
            available: available.into_iter().collect(),
        })
    }

    /// The series value of a row; `Some(None)` when the plot has no series key,
    /// `None` when the row lacks the key (the row is left out).
    fn series_of(&self, row: &ResultRow) -> Option<Option<Cell>> {
        match &self.spec.series {
            None => Some(None),
            Some(key) => Cell::lookup(row, key).map(Some),
        }
    }

    /// The legend label of a series value (the legend's heading names the key).
    fn series_label(&self, cell: &Option<Cell>) -> Option<String> {
        self.spec.series.as_ref()?;
        Some(cell.as_ref()?.label())
    }

    fn numeric(&self, role: &str, key: &str, cell: Cell) -> Result<f64, ReportError> {
        match cell {
            Cell::Num(v) => Ok(v),
            Cell::Text(t) => Err(self.invalid(format!(
                "`{role}` key `{key}` has the text value `{t}`; a {} plot needs numbers there",
                self.spec.kind.name()
            ))),
        }
    }

    fn check_log(&self, axis: &str, key: &str, v: f64, row: &ResultRow) -> Result<(), ReportError> {
        if v > 0.0 || v.is_nan() {
            return Ok(());
        }
        Err(self.invalid(format!(
            "{axis} is logarithmic but `{key}` is {v} at result index {}; a log axis needs positive values",
            row.index
        )))
    }

    fn xy(&self, categorical: bool) -> Result<XyData, ReportError> {
        let spec = self.spec;
        let x_key = spec.x.as_deref().unwrap_or_default();
        self.require_key("x", x_key)?;
        self.require_key("y", &spec.y)?;
        if let Some(s) = &spec.series {
            self.require_key("series", s)?;
        }
        // (x, series, y) per usable row.
        let mut triples: Vec<(Cell, Option<Cell>, f64)> = Vec::new();
        for row in self.ok {
            let (Some(x), Some(y), Some(s)) = (
                Cell::lookup(row, x_key),
                Cell::lookup(row, &spec.y),
                self.series_of(row),
            ) else {
                continue;
            };
            let y = self.numeric("y", &spec.y, y)?;
            if spec.log_y {
                self.check_log("y", &spec.y, y, row)?;
            }
            if spec.log_x {
                let xv = self.numeric("x", x_key, x.clone())?;
                self.check_log("x", x_key, xv, row)?;
            }
            triples.push((x, s, y));
        }
        let x_levels = levels(triples.iter().map(|t| &t.0));
        let numeric_x = !categorical && x_levels.iter().all(|c| matches!(c, Cell::Num(_)));
        let x_axis = if numeric_x {
            XAxis::Numeric
        } else {
            XAxis::Categorical(x_levels.iter().map(Cell::label).collect())
        };
        let series_levels: Vec<Option<Cell>> = if spec.series.is_some() {
            levels(triples.iter().filter_map(|t| t.1.as_ref()))
                .into_iter()
                .map(Some)
                .collect()
        } else {
            vec![None]
        };
        // Repeats: every y at one (x, series) position.
        let mut groups: HashMap<(String, Option<String>), Vec<f64>> = HashMap::new();
        for (x, s, y) in &triples {
            groups
                .entry((x.label(), s.as_ref().map(Cell::label)))
                .or_default()
                .push(*y);
        }
        let mut series = Vec::new();
        for s in &series_levels {
            let mut points = Vec::new();
            for (xi, x) in x_levels.iter().enumerate() {
                let ys = groups.get(&(x.label(), s.as_ref().map(Cell::label)));
                if let Some(stat) = ys.and_then(|ys| Stat::of(ys)) {
                    let pos = if numeric_x { x.as_num().unwrap_or(0.0) } else { xi as f64 };
                    points.push((pos, stat));
                }
            }
            series.push(SeriesPoints {
                label: self.series_label(s),
                points,
            });
        }
        Ok(XyData { x_axis, series })
    }

    fn cdf(&self) -> Result<CdfData, ReportError> {
        let spec = self.spec;
        self.require_series_entry(&spec.y)?;
        if let Some(s) = &spec.series {
            self.require_key("series", s)?;
        }
        let mut pooled: Vec<(Option<Cell>, Vec<f64>)> = Vec::new();
        for row in self.ok {
            let (Some(samples), Some(s)) = (row.series.get(&spec.y), self.series_of(row)) else {
                continue;
            };
            if spec.log_x {
                for &v in samples {
                    self.check_log("x", &spec.y, v, row)?;
                }
            }
            let label = s.as_ref().map(Cell::label);
            match pooled.iter_mut().find(|p| p.0.as_ref().map(Cell::label) == label) {
                Some(p) => p.1.extend_from_slice(samples),
                None => pooled.push((s, samples.clone())),
            }
        }
        pooled.sort_by(|a, b| match (&a.0, &b.0) {
            (Some(a), Some(b)) => a.order(b),
            _ => std::cmp::Ordering::Equal,
        });
        let curves = pooled
            .into_iter()
            .map(|(s, mut v)| {
                v.retain(|x| !x.is_nan());
                v.sort_by(f64::total_cmp);
                (self.series_label(&s), v)
            })
            .collect();
        Ok(CdfData { curves })
    }

    fn heat(&self) -> Result<HeatData, ReportError> {
        let spec = self.spec;
        let x_key = spec.x.as_deref().unwrap_or_default();
        let z_key = spec.z.as_deref().unwrap_or_default();
        self.require_key("x", x_key)?;
        self.require_key("y", &spec.y)?;
        self.require_key("z", z_key)?;
        let mut triples: Vec<(Cell, Cell, f64)> = Vec::new();
        for row in self.ok {
            let (Some(x), Some(y), Some(z)) = (
                Cell::lookup(row, x_key),
                Cell::lookup(row, &spec.y),
                Cell::lookup(row, z_key),
            ) else {
                continue;
            };
            triples.push((x, y, self.numeric("z", z_key, z)?));
        }
        let xl = levels(triples.iter().map(|t| &t.0));
        let yl = levels(triples.iter().map(|t| &t.1));
        let mut groups: HashMap<(String, String), Vec<f64>> = HashMap::new();
        for (x, y, z) in &triples {
            groups.entry((x.label(), y.label())).or_default().push(*z);
        }
        let cells = yl
            .iter()
            .map(|y| {
                xl.iter()
                    .map(|x| groups.get(&(x.label(), y.label())).and_then(|zs| Stat::of(zs)))
                    .collect()
            })
            .collect();
        Ok(HeatData {
            x_levels: xl.iter().map(Cell::label).collect(),
            y_levels: yl.iter().map(Cell::label).collect(),
            cells,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(index: u64, params: serde_json::Value, metrics: serde_json::Value) -> ResultRow {
        serde_json::from_value(json!({
            "index": index, "key": format!("k{index}"), "seed": index,
            "params": params, "metrics": metrics, "error": null, "elapsed_s": 0.0
        }))
        .unwrap()
    }

    fn spec(yaml: &str) -> PlotSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn rows() -> Vec<ResultRow> {
        let mut rows = Vec::new();
        let mut i = 0;
        for workers in [100, 25, 50] {
            for backup in [0, 2] {
                for seed in 0..2 {
                    let t = workers as f64 * (10.0 + backup as f64) + seed as f64;
                    rows.push(row(
                        i,
                        json!({"workers": workers, "strategy.sync.backup": backup, "model": "m"}),
                        json!({"throughput": t}),
                    ));
                    i += 1;
                }
            }
        }
        let mut failed = row(i, json!({"workers": 200, "strategy.sync.backup": 0}), json!({}));
        failed.error = Some("out of memory".into());
        rows.push(failed);
        rows
    }

    #[test]
    fn line_groups_series_sorts_x_and_averages_repeats() {
        let s = spec("{ x: workers, y: throughput, series: strategy.sync.backup }");
        let ChartData::Line(d) = prepare(&s, &rows(), Path::new("r.jsonl")).unwrap() else {
            panic!("not a line chart")
        };
        assert_eq!(d.x_axis, XAxis::Numeric);
        assert!(d.has_repeats());
        assert_eq!(d.series.len(), 2);
        assert_eq!(d.series[1].label.as_deref(), Some("2"));
        let xs: Vec<f64> = d.series[0].points.iter().map(|p| p.0).collect();
        // The failed 200-worker point is left out.
        assert_eq!(xs, [25.0, 50.0, 100.0]);
        let st = d.series[1].points[0].1;
        assert_eq!((st.mean, st.min, st.max, st.n), (300.5, 300.0, 301.0, 2));
    }

    #[test]
    fn text_x_is_categorical_and_bar_x_always_is() {
        let s = spec("{ x: model, y: throughput }");
        let ChartData::Line(d) = prepare(&s, &rows(), Path::new("r.jsonl")).unwrap() else {
            panic!()
        };
        assert_eq!(d.x_axis, XAxis::Categorical(vec!["m".into()]));
        let s = spec("{ kind: bar, x: workers, y: throughput }");
        let ChartData::Bar(d) = prepare(&s, &rows(), Path::new("r.jsonl")).unwrap() else {
            panic!()
        };
        assert_eq!(
            d.x_axis,
            XAxis::Categorical(vec!["25".into(), "50".into(), "100".into()])
        );
        assert_eq!(d.series[0].points[0].1.n, 4);
    }

    #[test]
    fn unknown_key_lists_available_keys() {
        let s = spec("{ x: workers, y: thruput }");
        let err = prepare(&s, &rows(), Path::new("out/b/results.jsonl")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "out/b/results.jsonl: plot `line thruput vs workers`: key `thruput` (y) is in no result row; available keys: model, strategy.sync.backup, throughput, workers"
        );
    }

    #[test]
    fn log_axis_rejects_non_positive_values() {
        let mut rs = rows();
        rs[0].metrics.insert("throughput".into(), 0.0);
        let s = spec("{ x: workers, y: throughput, log_y: true }");
        let err = prepare(&s, &rs, Path::new("r.jsonl")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "plot `line throughput vs workers`: y is logarithmic but `throughput` is 0 at result index 0; a log axis needs positive values"
        );
        let s = spec("{ x: model, y: throughput, log_x: true }");
        let err = prepare(&s, &rs, Path::new("r.jsonl")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "plot `line throughput vs model`: `x` key `model` has the text value `m`; a line plot needs numbers there"
        );
    }

    #[test]
    fn cdf_pools_samples_per_series_value() {
        let mut rs = rows();
        for (i, r) in rs.iter_mut().enumerate() {
            r.series.insert("step_time_s".into(), vec![3.0 - i as f64 * 0.1, 1.0]);
        }
        let s = spec("{ kind: cdf, y: step_time_s, series: strategy.sync.backup }");
        let ChartData::Cdf(d) = prepare(&s, &rs, Path::new("r.jsonl")).unwrap() else {
            panic!()
        };
        assert_eq!(d.curves.len(), 2);
        assert_eq!(d.curves[0].0.as_deref(), Some("0"));
        assert_eq!(d.curves[0].1.len(), 12);
        assert!(d.curves[0].1.windows(2).all(|w| w[0] <= w[1]));
        let s = spec("{ kind: cdf, y: latency }");
        let err = prepare(&s, &rs, Path::new("r.jsonl")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "r.jsonl: plot `cdf latency`: key `latency` (y, a per-step series) is in no result row; available keys: step_time_s"
        );
    }

    #[test]
    fn heatmap_fills_grid_and_leaves_gaps() {
        let rs = vec![
            row(0, json!({"array": 8, "dataflow": "os"}), json!({"u": 0.5})),
            row(1, json!({"array": 16, "dataflow": "os"}), json!({"u": 0.25})),
            row(2, json!({"array": 8, "dataflow": "ws"}), json!({"u": 0.75})),
            row(3, json!({"array": 8, "dataflow": "ws"}), json!({"u": 0.25})),
        ];
        let s = spec("{ kind: heatmap, x: array, y: dataflow, z: u }");
        let ChartData::Heat(d) = prepare(&s, &rs, Path::new("r.jsonl")).unwrap() else {
            panic!()
        };
        assert_eq!(d.x_levels, ["8", "16"]);
        assert_eq!(d.y_levels, ["os", "ws"]);
        assert_eq!(d.cells[0][1].map(|s| s.mean), Some(0.25));
        assert_eq!(d.cells[1][0].map(|s| s.mean), Some(0.5));
        assert_eq!(d.cells[1][1], None);
    }

    #[test]
    fn only_failed_rows_give_no_data() {
        let mut rs = rows();
        for r in &mut rs {
            r.error = Some("x".into());
        }
        let s = spec("{ x: workers, y: throughput }");
        assert_eq!(prepare(&s, &rs, Path::new("r.jsonl")).unwrap(), ChartData::NoData);
    }
}

//! From result rows and a plot spec to the numbers a chart draws.
//!
//! Rows with an error are left out. Rows that land on one position (equal x
//! and series; equal x and y of a heat map; one CDF curve) must be repeats:
//! the same parameters, another seed. The chart shows their mean, and
//! min..max as an error bar. Rows that differ in any other parameter and
//! land on one position are an error naming the parameters that tell them
//! apart, unless the plot pools those on purpose (`pool: [key]`). A key that
//! no successful row has is an error listing the keys that are there.
//!
//! A scatter plot is the exception: each row is its own marker, so rows
//! never collide and nothing is averaged (a validation sweep's points are
//! individual runs by design).
//!
//! A key that names a map of parameters (`strategy`, swept over
//! `{async: {}}`, `{sync: {backup: 4}}`) places a row by the map's variant
//! name and the values under it that vary: `async`, `sync backup=4`.

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

/// One colour and marker shape of a scatter plot.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScatterSeries {
    /// The series value; `None` when the plot has no `series` key.
    pub label: Option<String>,
    /// (x, y) of each run, in result order.
    pub points: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScatterData {
    pub series: Vec<ScatterSeries>,
    /// The smallest and largest value the x axis must show; with a
    /// diagonal, those of x and y together (both axes share it). Infinite
    /// (`lo > hi`) when no row has both values.
    pub x_range: (f64, f64),
    pub y_range: (f64, f64),
    /// Whether y = x is drawn across the shared range.
    pub diagonal: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ChartData {
    Line(XyData),
    Bar(XyData),
    Cdf(CdfData),
    Heat(HeatData),
    Scatter(ScatterData),
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
    let mut ok: Vec<&ResultRow> = rows.iter().filter(|r| r.error.is_none() && spec.keeps(&r.params)).collect();
    if ok.is_empty() {
        return Ok(ChartData::NoData);
    }
    ok.sort_by_key(|r| r.index);
    let ctx = Ctx { spec, ok: &ok, results };
    match spec.kind {
        PlotKind::Line => Ok(ChartData::Line(ctx.xy(false)?)),
        PlotKind::Bar => Ok(ChartData::Bar(ctx.xy(true)?)),
        PlotKind::Cdf => Ok(ChartData::Cdf(ctx.cdf()?)),
        PlotKind::Heatmap => Ok(ChartData::Heat(ctx.heat()?)),
        PlotKind::Scatter => Ok(ChartData::Scatter(ctx.scatter()?)),
    }
}

/// Checks, from parameters alone, what a plot would refuse once results are
/// in: points that would land on one position without being repeats, a
/// placing key some points lack, and a log axis over a parameter that is not
/// positive. `points` are the runs' rows before they run (no metrics); keys
/// that name metrics are left for the report to check.
pub fn check_plot_points(spec: &PlotSpec, points: &[ResultRow]) -> Result<(), ReportError> {
    spec.validate()?;
    let refs: Vec<&ResultRow> = points.iter().filter(|r| spec.keeps(&r.params)).collect();
    if refs.is_empty() && !points.is_empty() {
        let pins: Vec<String> = spec.filter.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        return Err(ReportError::InvalidPlot {
            plot: spec.describe(),
            reason: format!("`where: {{ {} }}` matches no point of the sweep", pins.join(", ")),
        });
    }
    let ctx = Ctx {
        spec,
        ok: &refs,
        results: Path::new(""),
    };
    ctx.check_positions()?;
    let (log_x, log_y) = spec.log_axes();
    for (axis, key, on) in [("x", spec.x.as_deref(), log_x), ("y", Some(spec.y.as_str()), log_y)] {
        let Some(key) = key else { continue };
        if !on || (spec.kind == PlotKind::Cdf && axis == "x") || !ctx.is_param(key) {
            continue;
        }
        let children = ctx.varying_children(key);
        for row in ctx.ok {
            if let Some(cell) = ctx.place_with(row, key, &children) {
                let v = ctx.numeric(axis, key, cell)?;
                ctx.check_log(axis, key, v, row)?;
            }
        }
    }
    Ok(())
}

struct Ctx<'a> {
    spec: &'a PlotSpec,
    ok: &'a [&'a ResultRow],
    results: &'a Path,
}

impl Ctx<'_> {
    /// Whether `key` names a parameter (a leaf, or a map over leaves) of
    /// some row, rather than a metric.
    fn is_param(&self, key: &str) -> bool {
        let prefix = format!("{key}.");
        self.ok.iter().any(|r| {
            r.params.contains_key(key) || r.params.range(prefix.clone()..).next().is_some_and(|(k, _)| k.starts_with(&prefix))
        })
    }

    /// Whether `key` is `pooled` or lies under a pooled map.
    fn pooled(&self, key: &str) -> bool {
        self.spec
            .pool
            .iter()
            .any(|p| key == p || key.strip_prefix(p.as_str()).is_some_and(|rest| rest.starts_with('.')))
    }

    /// The leaves under `key.` whose values differ between rows (absent
    /// counts as a value), in key order; empty maps (`async: {}`) and pooled
    /// leaves are left out.
    fn varying_children(&self, key: &str) -> Vec<String> {
        let prefix = format!("{key}.");
        let mut children: std::collections::BTreeMap<&str, BTreeSet<String>> = Default::default();
        for r in self.ok {
            for (k, v) in r.params.range(prefix.clone()..) {
                if !k.starts_with(&prefix) {
                    break;
                }
                if v.as_object().is_some_and(|m| m.is_empty()) || self.pooled(k) {
                    continue;
                }
                children.entry(k.as_str()).or_default();
            }
        }
        for (k, values) in children.iter_mut() {
            for r in self.ok {
                values.insert(r.params.get(*k).map_or_else(|| "\u{0}absent".to_string(), |v| v.to_string()));
            }
        }
        children
            .into_iter()
            .filter(|(_, values)| values.len() > 1)
            .map(|(k, _)| k.to_string())
            .collect()
    }

    /// The value that places `row` along the role named by `key`: a
    /// parameter (a map of parameters reads as its variant and its leaves
    /// that vary, `children`: `sync backup=4`), else a metric; `None` if the
    /// row has neither.
    fn place_with(&self, row: &ResultRow, key: &str, children: &[String]) -> Option<Cell> {
        let direct = row.params.get(key);
        let present: Vec<(&String, &serde_json::Value)> =
            children.iter().filter_map(|c| row.params.get(c).map(|v| (c, v))).collect();
        if present.is_empty() {
            // A map whose leaves are the same in every row reads as one value.
            let prefix = format!("{key}.");
            let under = || row.params.range(prefix.clone()..).next().is_some_and(|(k, _)| k.starts_with(&prefix));
            return Cell::lookup(row, key).or_else(|| under().then(|| Cell::Text(String::new())));
        }
        let variant = match direct {
            Some(serde_json::Value::String(s)) => Some(s.as_str()),
            _ => None,
        };
        let mut parts: Vec<String> = variant.map(str::to_string).into_iter().collect();
        for (k, v) in present {
            let mut rel = &k[key.len() + 1..];
            if let Some(rest) = variant.and_then(|t| rel.strip_prefix(t)).and_then(|r| r.strip_prefix('.')) {
                rel = rest;
            }
            let v = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            parts.push(format!("{rel}={v}"));
        }
        Some(Cell::Text(parts.join(" ")))
    }

    /// The parameters whose values differ between rows (absent counts).
    fn varying_keys(&self) -> BTreeSet<String> {
        let Some(first) = self.ok.first() else { return BTreeSet::new() };
        let mut out = BTreeSet::new();
        for r in self.ok {
            for k in first.params.keys().chain(r.params.keys()) {
                if !out.contains(k) && first.params.get(k) != r.params.get(k) {
                    out.insert(k.clone());
                }
            }
        }
        out
    }

    /// The keys that place a row on this chart, with their roles.
    fn placing_keys(&self) -> Vec<(&'static str, &str)> {
        let spec = self.spec;
        let mut keys = Vec::new();
        match spec.kind {
            PlotKind::Line | PlotKind::Bar => {
                keys.extend(spec.x.as_deref().map(|x| ("x", x)));
                keys.extend(spec.series.as_deref().map(|s| ("series", s)));
            }
            PlotKind::Cdf | PlotKind::Scatter => keys.extend(spec.series.as_deref().map(|s| ("series", s))),
            PlotKind::Heatmap => {
                keys.extend(spec.x.as_deref().map(|x| ("x", x)));
                keys.push(("y", spec.y.as_str()));
            }
        }
        keys
    }

    /// Only repeats may share a position: rows that land on one position
    /// must have the same parameters (pooled ones aside). Each placing key
    /// that names a parameter must be set in every row. Positions along a
    /// metric (a scatter of two results) are not checked.
    fn check_positions(&self) -> Result<(), ReportError> {
        let keys = self.placing_keys();
        let mut param_keys = Vec::new();
        for (role, key) in &keys {
            if !self.is_param(key) {
                if self.ok.iter().any(|r| r.metrics.contains_key(*key)) || self.ok.iter().all(|r| r.metrics.is_empty()) {
                    // A metric, or not known before the runs: no check here.
                    return Ok(());
                }
                continue;
            }
            param_keys.push((*role, *key, self.varying_children(key)));
        }
        let mut first_at: HashMap<Vec<String>, &ResultRow> = HashMap::new();
        for row in self.ok {
            let mut position = Vec::with_capacity(param_keys.len());
            for (role, key, children) in &param_keys {
                let Some(cell) = self.place_with(row, key, children) else {
                    return Err(self.invalid(format!(
                        "`{role}: {key}` is not set in point {} ({}); every point must have it{}",
                        row.index,
                        describe_params(row, &self.varying_keys()),
                        parent_hint(key, row)
                    )));
                };
                position.push(cell.label());
            }
            if self.spec.kind == PlotKind::Scatter {
                // Every row is its own marker: one series value is no collision.
                continue;
            }
            match first_at.get(&position) {
                None => {
                    first_at.insert(position, row);
                }
                Some(first) => {
                    let mut differ = differing(first, row, |k| self.pooled(k));
                    // `strategy` (async vs sync) says it; its leaves need not.
                    let all = differ.clone();
                    differ.retain(|k| !all.iter().any(|p| k.strip_prefix(p.as_str()).is_some_and(|r| r.starts_with('.'))));
                    if !differ.is_empty() {
                        return Err(self.invalid(self.collision_message(first, row, &differ)));
                    }
                }
            }
        }
        Ok(())
    }

    fn collision_message(&self, a: &ResultRow, b: &ResultRow, differ: &[String]) -> String {
        let show = |r: &ResultRow, k: &str| {
            r.params.get(k).map_or_else(|| "unset".to_string(), |v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        };
        let what: Vec<String> = differ
            .iter()
            .map(|k| format!("`{k}` ({} vs {})", show(a, k), show(b, k)))
            .collect();
        let position = match self.spec.kind {
            PlotKind::Heatmap => "the same cell",
            PlotKind::Cdf => "one curve",
            PlotKind::Scatter => "one series",
            PlotKind::Line | PlotKind::Bar if self.spec.series.is_some() => "the same x and series",
            PlotKind::Line | PlotKind::Bar => "the same x",
        };
        let first = differ.first().map_or("", String::as_str);
        let remedy = match self.spec.kind {
            PlotKind::Heatmap => format!("put `{first}` on an axis"),
            _ if self.spec.series.is_none() => format!("add `series: {first}`"),
            _ => format!("make `{first}` the `series`"),
        };
        let pool: Vec<&str> = differ.iter().map(String::as_str).collect();
        format!(
            "points {} and {} land on {position} but are not repeats: they differ in {}; \
             {remedy}, or average them on purpose with `pool: [{}]`",
            a.index,
            b.index,
            what.join(", "),
            pool.join(", ")
        )
    }

    fn invalid(&self, reason: String) -> ReportError {
        ReportError::InvalidPlot {
            plot: self.spec.describe(),
            reason,
        }
    }

    /// Fails unless some successful row has `key` as a parameter or metric.
    fn require_key(&self, role: &'static str, key: &str) -> Result<(), ReportError> {
        if self.ok.iter().any(|r| Cell::lookup(r, key).is_some()) || self.is_param(key) {
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
    fn series_of(&self, row: &ResultRow, children: &[String]) -> Option<Option<Cell>> {
        match &self.spec.series {
            None => Some(None),
            Some(key) => self.place_with(row, key, children).map(Some),
        }
    }

    /// The varying leaves under the series key (none without one).
    fn series_children(&self) -> Vec<String> {
        self.spec.series.as_deref().map(|k| self.varying_children(k)).unwrap_or_default()
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
            "{axis} is logarithmic but `{key}` is {v} at point {}; a log axis needs positive values",
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
        self.check_positions()?;
        // (x, series, y) per usable row.
        let mut triples: Vec<(Cell, Option<Cell>, f64)> = Vec::new();
        let (x_children, s_children) = (self.varying_children(x_key), self.series_children());
        for row in self.ok {
            let (Some(x), Some(y), Some(s)) = (
                self.place_with(row, x_key, &x_children),
                Cell::lookup(row, &spec.y),
                self.series_of(row, &s_children),
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

    /// Every successful row with both `x` and `y` is one point of its
    /// series. Rows with a non-finite value (NaN) are left out.
    fn scatter(&self) -> Result<ScatterData, ReportError> {
        let spec = self.spec;
        let x_key = spec.x.as_deref().unwrap_or_default();
        self.require_key("x", x_key)?;
        self.require_key("y", &spec.y)?;
        if let Some(s) = &spec.series {
            self.require_key("series", s)?;
        }
        // Rows lacking the series key are an error naming the point, as on
        // a line plot: a silent gap would hide runs.
        self.check_positions()?;
        let (log_x, log_y) = spec.log_axes();
        let s_children = self.series_children();
        let (x_children, y_children) = (self.varying_children(x_key), self.varying_children(&spec.y));
        let mut triples: Vec<(Option<Cell>, f64, f64)> = Vec::new();
        for row in self.ok {
            // A map key (`link`) reads as text, which `numeric` refuses by name.
            let (Some(x), Some(y), Some(s)) = (
                self.place_with(row, x_key, &x_children),
                self.place_with(row, &spec.y, &y_children),
                self.series_of(row, &s_children),
            ) else {
                continue;
            };
            let (x, y) = (self.numeric("x", x_key, x)?, self.numeric("y", &spec.y, y)?);
            if !(x.is_finite() && y.is_finite()) {
                continue;
            }
            if log_x {
                self.check_log("x", x_key, x, row)?;
            }
            if log_y {
                self.check_log("y", &spec.y, y, row)?;
            }
            triples.push((s, x, y));
        }
        let series_levels: Vec<Option<Cell>> = if spec.series.is_some() {
            levels(triples.iter().filter_map(|t| t.0.as_ref())).into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        let series = series_levels
            .iter()
            .map(|level| ScatterSeries {
                label: self.series_label(level),
                points: triples
                    .iter()
                    .filter(|t| t.0.as_ref().map(Cell::label) == level.as_ref().map(Cell::label))
                    .map(|t| (t.1, t.2))
                    .collect(),
            })
            .collect();
        let extent = |vals: &mut dyn Iterator<Item = f64>| {
            vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)))
        };
        let x_range = extent(&mut triples.iter().map(|t| t.1));
        let y_range = extent(&mut triples.iter().map(|t| t.2));
        let (x_range, y_range) = if spec.diagonal {
            let shared = (x_range.0.min(y_range.0), x_range.1.max(y_range.1));
            (shared, shared)
        } else {
            (x_range, y_range)
        };
        Ok(ScatterData {
            series,
            x_range,
            y_range,
            diagonal: spec.diagonal,
        })
    }

    fn cdf(&self) -> Result<CdfData, ReportError> {
        let spec = self.spec;
        self.require_series_entry(&spec.y)?;
        if let Some(s) = &spec.series {
            self.require_key("series", s)?;
        }
        self.check_positions()?;
        let mut pooled: Vec<(Option<Cell>, Vec<f64>)> = Vec::new();
        let s_children = self.series_children();
        for row in self.ok {
            let (Some(samples), Some(s)) = (row.series.get(&spec.y), self.series_of(row, &s_children)) else {
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
        self.check_positions()?;
        let mut triples: Vec<(Cell, Cell, f64)> = Vec::new();
        let (x_children, y_children) = (self.varying_children(x_key), self.varying_children(&spec.y));
        for row in self.ok {
            let (Some(x), Some(y), Some(z)) = (
                self.place_with(row, x_key, &x_children),
                self.place_with(row, &spec.y, &y_children),
                Cell::lookup(row, z_key),
            ) else {
                continue;
            };
            let z = self.numeric("z", z_key, z)?;
            if spec.log_z {
                self.check_log("the colour scale (`log_z`)", z_key, z, row)?;
            }
            triples.push((x, y, z));
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

/// The parameters two rows disagree on (a key one row lacks included),
/// leaving out `skip` ones. A map's variant and its leaves both count.
fn differing(a: &ResultRow, b: &ResultRow, skip: impl Fn(&str) -> bool) -> Vec<String> {
    let keys: BTreeSet<&String> = a.params.keys().chain(b.params.keys()).collect();
    keys.into_iter()
        .filter(|k| !skip(k) && a.params.get(*k) != b.params.get(*k))
        .filter(|k| {
            // `strategy.async` = {} says no more than `strategy` = async.
            let empty = |r: &ResultRow| r.params.get(*k).is_none_or(|v| v.as_object().is_some_and(|m| m.is_empty()));
            !(empty(a) && empty(b))
        })
        .cloned()
        .collect()
}

/// `strategy=async workers=25`: a row's parameters among `keys` (those
/// that vary: the sweep's), for messages.
fn describe_params(row: &ResultRow, keys: &BTreeSet<String>) -> String {
    let parts: Vec<String> = row
        .params
        .iter()
        .filter(|(k, v)| keys.contains(*k) && !v.as_object().is_some_and(|m| m.is_empty()))
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect();
    let text = parts.join(" ");
    if text.chars().count() > 160 {
        let head: String = text.chars().take(157).collect();
        format!("{head}...")
    } else {
        text
    }
}

/// `; use `strategy`, which every point has` when an enclosing map key is set.
fn parent_hint(key: &str, row: &ResultRow) -> String {
    let mut parent = key;
    while let Some((p, _)) = parent.rsplit_once('.') {
        if row.params.contains_key(p) {
            return format!(" (use `{p}`, whose variants label each point, e.g. `series: {p}`)");
        }
        parent = p;
    }
    String::new()
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
        let s = spec("{ x: model, y: throughput, pool: [workers, strategy] }");
        let ChartData::Line(d) = prepare(&s, &rows(), Path::new("r.jsonl")).unwrap() else {
            panic!()
        };
        assert_eq!(d.x_axis, XAxis::Categorical(vec!["m".into()]));
        let s = spec("{ kind: bar, x: workers, y: throughput, pool: [strategy.sync.backup] }");
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
        let s = spec("{ x: workers, y: throughput, series: strategy.sync.backup, log_y: true }");
        let err = prepare(&s, &rs, Path::new("r.jsonl")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "plot `line throughput vs workers`: y is logarithmic but `throughput` is 0 at point 0; a log axis needs positive values"
        );
        let s = spec("{ x: model, y: throughput, log_x: true, pool: [workers, strategy.sync.backup] }");
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
        let s = spec("{ kind: cdf, y: step_time_s, series: strategy.sync.backup, pool: [workers] }");
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

    /// The sweep: strategy over async, sync with 0 and sync with 4
    /// backups, times two worker counts; the leaves as the runner writes them.
    fn strategy_rows() -> Vec<ResultRow> {
        let strategies = [
            json!({"strategy": "async", "strategy.async": {}}),
            json!({"strategy": "sync", "strategy.sync.backup": 0}),
            json!({"strategy": "sync", "strategy.sync.backup": 4}),
        ];
        let mut rows = Vec::new();
        for (si, st) in strategies.iter().enumerate() {
            for (wi, workers) in [25, 50].into_iter().enumerate() {
                let mut params = st.clone();
                params["workers"] = json!(workers);
                rows.push(row((si * 2 + wi) as u64, params, json!({"throughput": (si * 10 + wi) as f64})));
            }
        }
        rows
    }

    #[test]
    fn a_map_valued_series_labels_each_variant_in_sweep_order() {
        let s = spec("{ x: workers, y: throughput, series: strategy }");
        let ChartData::Line(d) = prepare(&s, &strategy_rows(), Path::new("r.jsonl")).unwrap() else {
            panic!()
        };
        let labels: Vec<_> = d.series.iter().map(|s| s.label.clone().unwrap()).collect();
        assert_eq!(labels, ["async", "sync backup=0", "sync backup=4"]);
        // No pooling: each point is its own value.
        assert!(!d.has_repeats());
        assert_eq!(d.series[2].points[1].1.mean, 21.0);
    }

    #[test]
    fn a_series_some_points_lack_is_an_error_naming_the_enclosing_key() {
        let s = spec("{ x: workers, y: throughput, series: strategy.sync.backup }");
        let err = prepare(&s, &strategy_rows(), Path::new("r.jsonl")).unwrap_err().to_string();
        assert_eq!(
            err,
            "plot `line throughput vs workers`: `series: strategy.sync.backup` is not set in point 0 \
             (strategy=async workers=25); every point must have it (use `strategy`, whose variants \
             label each point, e.g. `series: strategy`)"
        );
    }

    #[test]
    fn points_that_differ_on_one_position_are_an_error_unless_pooled() {
        let rows: Vec<ResultRow> = strategy_rows().into_iter().skip(2).collect();
        let s = spec("{ x: workers, y: throughput }");
        let err = prepare(&s, &rows, Path::new("r.jsonl")).unwrap_err().to_string();
        assert!(
            err.contains("points 2 and 4 land on the same x but are not repeats: they differ in `strategy.sync.backup` (0 vs 4)"),
            "{err}"
        );
        assert!(err.contains("`pool: [strategy.sync.backup]`"), "{err}");
        let s = spec("{ x: workers, y: throughput, series: workers }");
        let err = prepare(&s, &strategy_rows(), Path::new("r.jsonl")).unwrap_err().to_string();
        assert!(err.contains("they differ in `strategy` (async vs sync); make `strategy` the `series`"), "{err}");
        assert!(err.contains("`pool: [strategy]`"), "{err}");
        let s = spec("{ x: workers, y: throughput, pool: [strategy] }");
        let ChartData::Line(d) = prepare(&s, &rows, Path::new("r.jsonl")).unwrap() else { panic!() };
        let st = d.series[0].points[0].1;
        assert_eq!((st.mean, st.min, st.max, st.n), (15.0, 10.0, 20.0, 2));
        // Params alone, before any run: the same verdict.
        let bare: Vec<ResultRow> = rows.iter().map(|r| ResultRow { metrics: Default::default(), ..r.clone() }).collect();
        let s = spec("{ x: workers, y: throughput }");
        assert!(check_plot_points(&s, &bare).is_err());
        let s = spec("{ x: workers, y: throughput, series: strategy }");
        check_plot_points(&s, &bare).unwrap();
        let s = spec("{ x: strategy.sync.backup, y: throughput, series: workers, log_x: true }");
        let err = check_plot_points(&s, &bare).unwrap_err().to_string();
        assert!(err.contains("x is logarithmic but `strategy.sync.backup` is 0 at point 2"), "{err}");
    }

    /// A validation sweep as `kind: validate` writes it: placers x links x
    /// predictors, measured and predicted step times in seconds; one failed
    /// point. Every row differs from the others in something besides the
    /// series (the placer), which a line plot would refuse.
    fn validate_rows() -> Vec<ResultRow> {
        let mut rows = Vec::new();
        let mut i = 0;
        for (pi, placer) in ["single_device", "round_robin", "m_etf"].into_iter().enumerate() {
            for gbps in [1, 10] {
                for predictor in ["roofline", "profile"] {
                    let measured = 0.004 + 0.001 * pi as f64 + 0.01 / gbps as f64;
                    let predicted = measured * if predictor == "roofline" { 1.3 } else { 0.95 };
                    rows.push(row(
                        i,
                        json!({"model": "mlp", "placer": placer, "link.gbps": gbps, "link.latency_us": 50, "predictor": predictor}),
                        json!({"measured_step_s": measured, "predicted_step_s": predicted}),
                    ));
                    i += 1;
                }
            }
        }
        let mut failed = row(i, json!({"model": "mlp", "placer": "m_sct", "link.gbps": 1, "predictor": "profile"}), json!({}));
        failed.error = Some("engine: out of memory".into());
        rows.push(failed);
        rows
    }

    fn scatter(yaml: &str, rows: &[ResultRow]) -> ScatterData {
        match prepare(&spec(yaml), rows, Path::new("r.jsonl")).unwrap() {
            ChartData::Scatter(d) => d,
            other => panic!("not a scatter: {other:?}"),
        }
    }

    #[test]
    fn scatter_draws_every_successful_run_once_per_series_value() {
        let rs = validate_rows();
        let d = scatter("{ kind: scatter, x: measured_step_s, y: predicted_step_s, series: placer }", &rs);
        let labels: Vec<_> = d.series.iter().map(|s| s.label.clone().unwrap()).collect();
        assert_eq!(labels, ["single_device", "round_robin", "m_etf"]);
        // 12 runs, 4 per placer; the failed m_sct point is left out, and
        // points that differ in link and predictor are not an error.
        assert_eq!(d.series.iter().map(|s| s.points.len()).collect::<Vec<_>>(), [4, 4, 4]);
        let m_etf_rows: Vec<(f64, f64)> = rs
            .iter()
            .filter(|r| r.params["placer"] == "m_etf")
            .map(|r| (r.metrics["measured_step_s"], r.metrics["predicted_step_s"]))
            .collect();
        assert_eq!(d.series[2].points, m_etf_rows);
        assert!(!d.diagonal);
        // Without a diagonal, each axis covers only its own values.
        assert_eq!(d.x_range, (0.005, 0.016));
        assert_eq!(d.y_range, (0.005 * 0.95, 0.016 * 1.3));
        // A map-valued series labels the links; no series is one group.
        let d = scatter("{ kind: scatter, x: measured_step_s, y: predicted_step_s, series: link }", &rs);
        let labels: Vec<_> = d.series.iter().map(|s| s.label.clone().unwrap()).collect();
        assert_eq!(labels, ["gbps=1", "gbps=10"]);
        let d = scatter("{ kind: scatter, x: measured_step_s, y: predicted_step_s }", &rs);
        assert_eq!((d.series.len(), d.series[0].label.clone(), d.series[0].points.len()), (1, None, 12));
    }

    #[test]
    fn the_diagonal_spans_every_point_on_both_axes() {
        let mut rs = validate_rows();
        // One far over-prediction and one far under-prediction, so that each
        // end of the shared range comes from the other axis.
        rs[3].metrics.insert("predicted_step_s".into(), 0.05);
        rs[4].metrics.insert("measured_step_s".into(), 0.002);
        rs[4].metrics.insert("predicted_step_s".into(), 0.003);
        let d = scatter(
            "{ kind: scatter, x: measured_step_s, y: predicted_step_s, series: predictor, diagonal: true }",
            &rs,
        );
        assert!(d.diagonal);
        assert_eq!(d.x_range, d.y_range);
        let (lo, hi) = d.x_range;
        let all: Vec<(f64, f64)> = d.series.iter().flat_map(|s| s.points.iter().copied()).collect();
        assert_eq!(all.len(), 12);
        for (x, y) in &all {
            assert!((lo..=hi).contains(x) && (lo..=hi).contains(y), "({x}, {y}) outside {lo}..{hi}");
        }
        // Tight: the ends are the smallest and largest value on either axis.
        assert_eq!((lo, hi), (0.002, 0.05));
    }

    #[test]
    fn scatter_refuses_text_missing_series_and_non_positive_log_values() {
        let rs = validate_rows();
        let err = prepare(&spec("{ kind: scatter, x: placer, y: predicted_step_s }"), &rs, Path::new("r.jsonl"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "plot `scatter predicted_step_s vs placer`: `x` key `placer` has the text value `single_device`; a scatter plot needs numbers there"
        );
        let mut rs2 = rs.clone();
        rs2[1].params.remove("predictor");
        let err = prepare(
            &spec("{ kind: scatter, x: measured_step_s, y: predicted_step_s, series: predictor }"),
            &rs2,
            Path::new("r.jsonl"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("`series: predictor` is not set in point 1"), "{err}");
        // With a diagonal, `log_y` makes x logarithmic too: a zero x is refused.
        let mut rs3 = rs.clone();
        rs3[2].metrics.insert("measured_step_s".into(), 0.0);
        let err = prepare(
            &spec("{ kind: scatter, x: measured_step_s, y: predicted_step_s, diagonal: true, log_y: true }"),
            &rs3,
            Path::new("r.jsonl"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("x is logarithmic but `measured_step_s` is 0 at point 2"), "{err}");
        prepare(&spec("{ kind: scatter, x: measured_step_s, y: predicted_step_s, log_y: true }"), &rs3, Path::new("r.jsonl"))
            .unwrap();
    }

    #[test]
    fn before_the_runs_a_scatter_accepts_distinct_points_but_not_a_missing_series() {
        // What `flowlab check` sees: parameters, no metrics yet.
        let mut bare: Vec<ResultRow> =
            validate_rows().into_iter().map(|r| ResultRow { metrics: Default::default(), error: None, ..r }).collect();
        let s = spec("{ kind: scatter, x: measured_step_s, y: predicted_step_s, series: predictor, diagonal: true }");
        check_plot_points(&s, &bare).unwrap();
        // The same points on a line plot collide.
        let line = spec("{ x: link.gbps, y: predicted_step_s, series: predictor }");
        assert!(check_plot_points(&line, &bare).is_err());
        bare[5].params.remove("predictor");
        let err = check_plot_points(&s, &bare).unwrap_err().to_string();
        assert!(err.contains("`series: predictor` is not set in point 5"), "{err}");
        // A parameter on a log axis must be positive, before anything runs.
        let s = spec("{ kind: scatter, x: link.gbps, y: predicted_step_s, diagonal: true, log_y: true }");
        bare[0].params.insert("link.gbps".into(), json!(0));
        let err = check_plot_points(&s, &bare).unwrap_err().to_string();
        assert!(err.contains("x is logarithmic but `link.gbps` is 0 at point 0"), "{err}");
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

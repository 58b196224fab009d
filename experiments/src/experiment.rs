//! An experiment file, parsed and fully checked: every point of its sweep is
//! built and validated by its kind before anything runs, so a typo or an
//! out-of-range value in the last point stops the run before the first.
//!
//! ```yaml
//! name: backup-workers        # results go to out/backup-workers/
//! kind: cluster               # cluster | graph | placement | systolic | engine | validate
//! seed: 42                    # optional, 0 if absent
//! repeat: 3                   # optional: runs per point, each with its own seed
//! base: { ... }               # one point's parameters (the kind's schema)
//! sweep: { workers: [25, 50], zip: [ {a: [..], b: [..]} ] }
//! plots: [ { x: workers, y: throughput, series: strategy.sync.backup } ]
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use flowlab_reports::{PlotKind, PlotSpec};
use serde_json::Value;
use serde_saphyr::{Location, Spanned};

use crate::diagnostics::{at, yaml_error};
use crate::error::ExperimentError;
use crate::identity::{run_key, run_seed};
use crate::kinds::{self, Kind, PointError, Runnable};
use crate::params::{display_value, leaves, set_dotted};
use crate::suggest::did_you_mean;
use crate::sweep::Sweep;

/// The most runs one file may expand to. Each point is held while the file
/// is checked and run (1-2 KB: `flowlab check` of a 700 x 700 cluster
/// sweep peaked at 0.9 GB resident, of 2000 x 2000 at 3.8 GB), so this
/// keeps a check under a gigabyte; the catalog's largest sweeps have
/// hundreds of points, and a sweep of more is split over files.
const MAX_RUNS: u64 = 500_000;

/// The most points whose resolved configurations a run compares for the
/// report's constants table (each point resolves in microseconds; a zoo
/// model's step is simulated once and cached).
const RESOLVE_LIMIT: u64 = 20_000;

/// The top level of an experiment file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ExperimentFile {
    name: Spanned<String>,
    kind: Spanned<String>,
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    repeat: Option<Spanned<u32>>,
    base: Spanned<Value>,
    #[serde(default)]
    sweep: Sweep,
    #[serde(default)]
    plots: Vec<Spanned<PlotSpec>>,
    /// Published numbers drawn beside the simulation's on line plots, and
    /// compared with it point by point.
    #[serde(default)]
    reference: Vec<Spanned<flowlab_reports::Reference>>,
    /// Free parameters fitted on the calibration reference points before
    /// the sweep runs.
    #[serde(default)]
    calibrate: Option<Spanned<crate::calibrate::CalibrateSpec>>,
}

/// One run: a sweep point and a repeat number, with its own seed.
pub(crate) struct Run {
    pub(crate) index: u64,
    pub(crate) seed: u64,
    pub(crate) key: String,
    /// Every leaf of the point's parameter tree, by dotted key.
    pub(crate) params: BTreeMap<String, Value>,
    /// The values the sweep set, in sweep order, for progress lines.
    pub(crate) label: String,
    pub(crate) runnable: Arc<dyn Runnable>,
}

/// A checked experiment: its runs in index order and its result columns.
pub struct Experiment {
    /// The `name:` key: the output directory's name.
    pub name: String,
    /// The `kind:` key.
    pub kind: &'static str,
    /// Where the file came from (a path, or `catalog:NAME`), for messages.
    pub origin: String,
    /// The file's text, copied verbatim into the output directory.
    pub text: String,
    /// Number of sweep points (before repeats).
    pub points: u64,
    /// Runs per point.
    pub repeat: u32,
    pub(crate) runs: Vec<Run>,
    pub(crate) param_columns: Vec<String>,
    pub(crate) metric_columns: Vec<String>,
    /// Each reference point and the sweep point it is compared with.
    pub(crate) targets: Vec<crate::references::Target>,
    /// The checked `calibrate:` block, if any.
    pub(crate) calibrate: Option<crate::calibrate::CalibrateSpec>,
    /// What the runs were built from, to build them again with fitted
    /// values.
    source: Arc<Source>,
}

/// The parts of the file that make the runs.
pub(crate) struct Source {
    pub(crate) kind: &'static dyn Kind,
    pub(crate) base: Value,
    pub(crate) sweep: Sweep,
    pub(crate) seed: u64,
    pub(crate) repeat: u32,
}

impl Source {
    /// The parameter tree of sweep point `point`, with `overrides` (dotted
    /// keys) set last, and a label of the swept values.
    pub(crate) fn tree(&self, point: u64, overrides: &BTreeMap<String, f64>) -> (Value, String) {
        let assignments = self.sweep.point(point);
        let mut tree = self.base.clone();
        for a in &assignments {
            set_dotted(&mut tree, &a.key.key, a.value.value.clone());
        }
        for (k, v) in overrides {
            set_dotted(&mut tree, k, Value::from(*v));
        }
        let label = assignments
            .iter()
            .map(|a| {
                // A swept map with a `name` (an inline workload) is labelled by it.
                let named = a.value.value.get("name").and_then(Value::as_str);
                format!("{}={}", a.key.key, named.map_or_else(|| display_value(&a.value.value), str::to_string))
            })
            .collect::<Vec<_>>()
            .join(" ");
        (tree, label)
    }

    /// The seed of repeat `r` of sweep point `point`.
    pub(crate) fn seed_of(&self, point: u64, r: u32) -> u64 {
        run_seed(self.seed, point * u64::from(self.repeat) + u64::from(r))
    }
}

impl std::fmt::Debug for Experiment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Experiment")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("origin", &self.origin)
            .field("points", &self.points)
            .field("repeat", &self.repeat)
            .finish_non_exhaustive()
    }
}

impl Experiment {
    /// Every point's configuration resolved (defaults filled in, references
    /// such as a zoo model resolved), with its index and the values its
    /// sweep set; repeats of a point are one point.
    pub fn resolved_points(&self) -> Vec<(u64, String, Result<Value, String>)> {
        self.runs.iter().step_by(self.repeat.max(1) as usize).map(|r| (r.index, r.label.clone(), r.runnable.resolved())).collect()
    }

    /// The resolved parameters (see [`Self::resolved_points`]) every point
    /// shares, and which of them the file does not write; `None` for a
    /// sweep of more than [`RESOLVE_LIMIT`] points, or when a point does
    /// not resolve (it fails when it runs, and says why).
    pub(crate) fn resolved_constants(&self) -> Option<flowlab_reports::ResolvedConstants> {
        if self.points > RESOLVE_LIMIT {
            return None;
        }
        let tags = self.source.kind.tag_paths();
        let mut shared: Option<BTreeMap<String, Value>> = None;
        let mut written = BTreeSet::new();
        for run in self.runs.iter().step_by(self.repeat.max(1) as usize) {
            let tree = run.runnable.resolved().ok()?;
            let mut point = leaves(&tree, tags);
            point.retain(|_, v| !v.is_null());
            written.extend(run.params.keys().cloned());
            shared = Some(match shared {
                None => point,
                Some(mut s) => {
                    s.retain(|k, v| point.get(k).is_some_and(|p| flowlab_reports::same_value(p, v)));
                    s
                }
            });
        }
        let values = shared?;
        let unwritten = values.keys().filter(|k| !written.contains(*k)).cloned().collect();
        let headline = self.source.kind.headline().iter().map(|k| k.to_string()).collect();
        Some(flowlab_reports::ResolvedConstants { values, unwritten, headline })
    }

    /// Number of runs: points times repeats.
    pub fn run_count(&self) -> u64 {
        self.runs.len() as u64
    }

    /// Parses and checks an experiment from its text. `origin` names it in
    /// messages (`experiments/x.yaml:3:5: ...`).
    pub fn from_text(origin: &str, text: &str) -> Result<Experiment, ExperimentError> {
        // A misspelled kind first: its "did you mean" matters more than the
        // keys the rest of the file lacks.
        #[derive(serde::Deserialize)]
        struct KindOnly {
            kind: Option<Spanned<String>>,
        }
        if let Ok(KindOnly { kind: Some(kind) }) = crate::diagnostics::parse_yaml::<KindOnly>(text) {
            kinds::lookup(&kind.value).map_err(|m| at(origin, kind.referenced, m))?;
        }
        let file: ExperimentFile = crate::diagnostics::parse_yaml(text).map_err(|e| yaml_error(origin, text, &e))?;
        check_name(origin, &file.name)?;
        let kind = kinds::lookup(&file.kind.value).map_err(|m| at(origin, file.kind.referenced, m))?;
        kind.check_base(origin, text)?;
        if !file.base.value.is_object() {
            return Err(at(origin, file.base.referenced, "`base` must be a map of parameters".into()));
        }
        kind.prepare(&file.base.value).map_err(|e| {
            // at the parameter's own line when the message names it
            let at_key = crate::diagnostics::named_parameter(e.message())
                .and_then(|path| crate::diagnostics::locate(text, (file.base.referenced.line(), file.base.referenced.column()), path));
            match at_key {
                Some((line, column)) => ExperimentError::AtLocation { origin: origin.to_string(), line, column, message: format!("base: {}", e.message()) },
                None => at(origin, file.base.referenced, format!("base: {}", e.message())),
            }
        })?;
        let repeat = match &file.repeat {
            None => 1,
            Some(r) if r.value == 0 => {
                return Err(at(origin, r.referenced, "`repeat` must be at least 1".into()));
            }
            Some(r) => r.value,
        };
        check_sweep_shape(origin, &file.sweep)?;
        check_sweep_values(origin, kind, &file.base.value, &file.sweep)?;

        let points = file
            .sweep
            .point_count()
            .filter(|n| n.saturating_mul(u64::from(repeat)) <= MAX_RUNS)
            .ok_or_else(|| {
                // the count, even past u64, as the product of the axes' lengths
                let lengths: Vec<String> = file.sweep.axes.iter().map(|a| a.len().to_string()).collect();
                let runs = file.sweep.axes.iter().fold(f64::from(repeat), |n, a| n * a.len() as f64);
                ExperimentError::InFile {
                    origin: origin.to_string(),
                    message: format!(
                        "the sweep has {} x {repeat} repeat{} = {runs:.3e} runs, more than the {MAX_RUNS} one file may expand to: \
                         sweep fewer values, or split the sweep over several files",
                        lengths.join(" x "),
                        if repeat == 1 { "" } else { "s" }
                    ),
                }
            })?;
        let source = Source {
            kind,
            base: file.base.value.clone(),
            sweep: file.sweep.clone(),
            seed: file.seed,
            repeat,
        };
        let calibrate = match &file.calibrate {
            None => None,
            Some(c) => Some(crate::calibrate::check_spec(origin, c, &source)?),
        };
        let initial = calibrate.as_ref().map(|c| crate::calibrate::initial_of(&source.base, &c.params)).unwrap_or_default();
        let mut runs = build_runs(origin, &source, points, &initial)?;

        let param_columns = param_columns(&file.sweep, &runs);
        let metric_columns = kind.metric_names();
        check_plots(origin, kind, &file.plots, &param_columns, &metric_columns)?;
        check_plot_points(origin, &file.plots, &mut runs, repeat)?;
        check_references(origin, &file.reference, &file.plots)?;
        let targets = crate::references::targets(origin, &file.reference, &runs, repeat, &metric_columns)?;
        if let Some(spec) = &file.calibrate {
            crate::calibrate::check_targets(origin, spec.referenced, &targets)?;
        }
        Ok(Experiment {
            name: file.name.value,
            kind: kind.name(),
            origin: origin.to_string(),
            text: text.to_string(),
            points,
            repeat,
            runs,
            param_columns,
            metric_columns,
            targets,
            calibrate,
            source: Arc::new(source),
        })
    }

    /// The deeper check of a `calibrate:` block, which runs simulations:
    /// every free parameter must move some calibration point. Kinds that
    /// time real runs are checked when they run instead. Returns a line for
    /// the user, `None` without a block.
    pub fn check_calibration(&self) -> Result<Option<String>, ExperimentError> {
        let Some(spec) = &self.calibrate else { return Ok(None) };
        let points = self.calibration_targets().count();
        let keys = spec.params.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
        let exclusive = kinds::lookup(self.kind).is_ok_and(|k| k.exclusive());
        if exclusive {
            return Ok(Some(format!("calibrate: {keys} on {points} calibration points (checked when it runs)")));
        }
        let initial = crate::calibrate::initial_values(self);
        crate::calibrate::check_sensitivity(self, &initial, &flowlab_runtime::Launcher::Threads)?;
        Ok(Some(format!("calibrate: {keys} on {points} calibration points; each moves at least one")))
    }

    /// The reference points free parameters are fitted on.
    pub(crate) fn calibration_targets(&self) -> impl Iterator<Item = &crate::references::Target> {
        self.targets.iter().filter(|t| t.role == flowlab_reports::Role::Calibration)
    }

    pub(crate) fn source(&self) -> &Source {
        &self.source
    }

    /// The same experiment with `fitted` values set at their dotted keys in
    /// every point.
    pub(crate) fn with_values(&self, fitted: &BTreeMap<String, f64>) -> Result<Experiment, ExperimentError> {
        let runs = build_runs(&self.origin, &self.source, self.points, fitted)?;
        Ok(Experiment {
            name: self.name.clone(),
            kind: self.kind,
            origin: self.origin.clone(),
            text: self.text.clone(),
            points: self.points,
            repeat: self.repeat,
            runs,
            param_columns: self.param_columns.clone(),
            metric_columns: self.metric_columns.clone(),
            targets: self.targets.clone(),
            calibrate: None,
            source: Arc::clone(&self.source),
        })
    }
}

/// Every run of every point, each point's tree prepared once by its kind.
fn build_runs(
    origin: &str,
    source: &Source,
    points: u64,
    overrides: &BTreeMap<String, f64>,
) -> Result<Vec<Run>, ExperimentError> {
    let repeat = source.repeat;
    let mut runs = Vec::with_capacity((points * u64::from(repeat)) as usize);
    for point in 0..points {
        let (tree, label) = source.tree(point, overrides);
        let runnable: Arc<dyn Runnable> = source
            .kind
            .prepare(&tree)
            .map_err(|e| ExperimentError::InFile {
                origin: origin.to_string(),
                message: format!("point {point} ({label}): {}", e.message()),
            })?
            .into();
        let params = leaves(&tree, source.kind.tag_paths());
        for r in 0..repeat {
            let index = point * u64::from(repeat) + u64::from(r);
            let seed = source.seed_of(point, r);
            runs.push(Run {
                index,
                seed,
                key: run_key(&params, r, seed),
                params: params.clone(),
                label: label.clone(),
                runnable: Arc::clone(&runnable),
            });
        }
    }
    Ok(runs)
}

/// The name becomes a directory: keep it to one plain path component.
fn check_name(origin: &str, name: &Spanned<String>) -> Result<(), ExperimentError> {
    let n = &name.value;
    let plain = !n.is_empty()
        && !n.starts_with('.')
        && n.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if plain {
        Ok(())
    } else {
        Err(at(
            origin,
            name.referenced,
            format!("`name` must be letters, digits, `-`, `_` or `.` (not starting with `.`), got `{n}`"),
        ))
    }
}

/// Lists non-empty, zip groups of equal length, no key set twice.
fn check_sweep_shape(origin: &str, sweep: &Sweep) -> Result<(), ExperimentError> {
    let mut seen = BTreeSet::new();
    for axis in &sweep.axes {
        let members = axis.members();
        if let crate::sweep::Axis::Zip { location, .. } = axis {
            if members.is_empty() {
                return Err(at(origin, *location, "empty zip group".into()));
            }
            let first = &members[0];
            for m in &members[1..] {
                if m.values.len() != first.values.len() {
                    return Err(at(
                        origin,
                        m.list_location,
                        format!(
                            "zip group lists differ in length: `{}` has {} values, `{}` has {}",
                            first.key.key,
                            first.values.len(),
                            m.key.key,
                            m.values.len()
                        ),
                    ));
                }
            }
        }
        for m in members {
            if m.values.is_empty() {
                return Err(at(origin, m.list_location, format!("sweep key `{}` has no values", m.key.key)));
            }
            if m.key.key.is_empty() || m.key.key.split('.').any(str::is_empty) {
                return Err(at(origin, m.key.location, format!("malformed sweep key `{}`", m.key.key)));
            }
            if !seen.insert(m.key.key.as_str()) {
                return Err(at(origin, m.key.location, format!("sweep key `{}` is set twice", m.key.key)));
            }
        }
    }
    Ok(())
}

/// Each sweep value on its own over the base (a zip group's values together
/// with their partners at the same index): blames a bad key or value at its
/// place in the file, before combinations are tried.
fn check_sweep_values(origin: &str, kind: &dyn Kind, base: &Value, sweep: &Sweep) -> Result<(), ExperimentError> {
    for axis in &sweep.axes {
        let members = axis.members();
        for i in 0..axis.len() {
            for kv in members {
                let value = &kv.values[i];
                let mut tree = base.clone();
                // Partners first, so that this member's value is the one tried.
                for partner in members.iter().filter(|m| m.key.key != kv.key.key) {
                    set_dotted(&mut tree, &partner.key.key, partner.values[i].value.clone());
                }
                set_dotted(&mut tree, &kv.key.key, value.value.clone());
                match kind.prepare(&tree) {
                    Ok(_) => {}
                    // The dotted key names a field the schema lacks (rather than
                    // the value, a map, holding one).
                    Err(PointError::UnknownKey { key, message })
                        if kv.key.key.split('.').any(|part| part == key) =>
                    {
                        // a bare name of a nested parameter: say which
                        let nested = kind.nested_keys().iter().find(|p| p.rsplit('.').next() == Some(kv.key.key.as_str()));
                        let hint = nested.map_or(String::new(), |p| format!(" (did you mean `{p}`?)"));
                        return Err(at(
                            origin,
                            kv.key.location,
                            format!("sweep key `{}` is not a parameter of kind {}{hint}: {message}", kv.key.key, kind.name()),
                        ));
                    }
                    // In a zip, blame the member the message names.
                    Err(e) if members.len() > 1 && !e.message().contains(&format!("`{}`", kv.key.key)) => {
                        let named = members.iter().any(|m| e.message().contains(&format!("`{}`", m.key.key)));
                        if named {
                            continue;
                        }
                        return Err(at(
                            origin,
                            value_location(value),
                            format!("sweep `{}` = {}: {}", kv.key.key, display_value(&value.value), e.message()),
                        ));
                    }
                    Err(e) => {
                        return Err(at(
                            origin,
                            value_location(value),
                            format!("sweep `{}` = {}: {}", kv.key.key, display_value(&value.value), e.message()),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn value_location(value: &Spanned<Value>) -> Location {
    value.referenced
}

/// CSV parameter columns: the sweep's keys in file order, then every other
/// leaf any point has, sorted.
fn param_columns(sweep: &Sweep, runs: &[Run]) -> Vec<String> {
    let all: BTreeSet<&String> = runs.iter().flat_map(|r| r.params.keys()).collect();
    let mut columns: Vec<String> = Vec::new();
    for kv in sweep.keys() {
        // The key itself, then the leaves under it (a swept map or enum).
        let prefix = format!("{}.", kv.key.key);
        for key in &all {
            let under = **key == kv.key.key || key.starts_with(&prefix);
            if under && !columns.contains(key) {
                columns.push((*key).clone());
            }
        }
    }
    for key in all {
        if !columns.contains(key) {
            columns.push(key.clone());
        }
    }
    columns
}

/// What `run` would refuse to draw, known from the points alone: points
/// that are not repeats landing on one position, a placing key some points
/// lack, a log axis over a swept value that is not positive.
fn check_plot_points(
    origin: &str,
    plots: &[Spanned<PlotSpec>],
    runs: &mut [Run],
    repeat: u32,
) -> Result<(), ExperimentError> {
    if plots.is_empty() {
        return Ok(());
    }
    // The points' parameters are lent to the check and given back, not
    // copied: a million-point sweep holds them once.
    let step = repeat.max(1) as usize;
    let points: Vec<flowlab_reports::ResultRow> = runs
        .iter_mut()
        .step_by(step)
        .map(|r| flowlab_reports::ResultRow {
            index: r.index,
            key: String::new(),
            seed: r.seed,
            params: std::mem::take(&mut r.params),
            metrics: BTreeMap::new(),
            series: BTreeMap::new(),
            error: None,
            elapsed_s: 0.0,
        })
        .collect();
    let verdict = plots.iter().try_for_each(|plot| {
        flowlab_reports::check_plot_points(&plot.value, &points).map_err(|e| at(origin, plot.referenced, e.to_string()))
    });
    for (run, point) in runs.iter_mut().step_by(step).zip(points) {
        run.params = point.params;
    }
    verdict
}

/// Each reference must land on some line plot (same `x` and `y`), else it
/// would silently never be drawn.
fn check_references(
    origin: &str,
    references: &[Spanned<flowlab_reports::Reference>],
    plots: &[Spanned<PlotSpec>],
) -> Result<(), ExperimentError> {
    for r in references {
        if r.value.points.is_empty() {
            return Err(at(origin, r.referenced, "a reference needs at least one `[x, y]` point".into()));
        }
        if !plots.iter().any(|p| r.value.fits(&p.value)) {
            let lines: Vec<String> = plots
                .iter()
                .filter(|p| p.value.kind == PlotKind::Line)
                .map(|p| format!("x: {}, y: {}", p.value.x.as_deref().unwrap_or_default(), p.value.y))
                .collect();
            return Err(at(
                origin,
                r.referenced,
                format!(
                    "reference `x: {}, y: {}` matches no line plot, so it would never be drawn (line plots: {})",
                    r.value.x,
                    r.value.y,
                    if lines.is_empty() { "none".to_string() } else { lines.join("; ") }
                ),
            ));
        }
    }
    Ok(())
}

/// Each plot's keys must name a parameter, a metric, or (for a CDF's `y`) a
/// series the kind reports.
fn check_plots(
    origin: &str,
    kind: &dyn Kind,
    plots: &[Spanned<PlotSpec>],
    params: &[String],
    metrics: &[String],
) -> Result<(), ExperimentError> {
    let series = kind.series_names();
    for plot in plots {
        let spec = &plot.value;
        spec.validate().map_err(|e| at(origin, plot.referenced, e.to_string()))?;
        let mut fields: Vec<(&str, &str, Vec<&str>)> = Vec::new();
        let scalar_keys: Vec<&str> = params.iter().chain(metrics).map(String::as_str).collect();
        if let Some(x) = &spec.x {
            fields.push(("x", x, scalar_keys.clone()));
        }
        if spec.kind == PlotKind::Cdf {
            fields.push(("y", &spec.y, series.to_vec()));
        } else {
            fields.push(("y", &spec.y, scalar_keys.clone()));
        }
        if let Some(s) = &spec.series {
            fields.push(("series", s, params.iter().map(String::as_str).collect()));
        }
        if let Some(z) = &spec.z {
            fields.push(("z", z, scalar_keys.clone()));
        }
        for key in &spec.pool {
            fields.push(("pool", key, params.iter().map(String::as_str).collect()));
        }
        for key in spec.filter.keys() {
            fields.push(("where", key, params.iter().map(String::as_str).collect()));
        }
        for (role, key, known) in fields {
            // A map of parameters (`network`) is a key too: it labels each
            // point by the values under it.
            let is_map = matches!(role, "x" | "series" | "pool" | "y")
                && params.iter().any(|p| p.strip_prefix(key).is_some_and(|rest| rest.starts_with('.')));
            if !known.contains(&key) && !is_map {
                return Err(at(
                    origin,
                    plot.referenced,
                    format!(
                        "plot `{role}: {key}` names no {} of kind {}{} (known: {})",
                        match role {
                            "series" | "pool" | "where" => "parameter",
                            "y" if spec.kind == PlotKind::Cdf => "series",
                            _ => "parameter or metric",
                        },
                        kind.name(),
                        did_you_mean(key, known.iter().copied()),
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(())
}

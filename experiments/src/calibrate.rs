//! Free parameters fitted on calibration points, before the sweep runs.
//!
//! ```yaml
//! calibrate:
//!   params: { model.step_overhead_us: [0, 5000] }   # dotted key: [lo, hi]
//!   method: nelder_mead                             # the only one
//!   max_iters: 60                                   # optional
//! ```
//!
//! The fit runs only the sweep points of the reference points whose role is
//! `calibration` and minimises the mean squared log ratio of run to
//! published value over them (ln(run / published)^2: symmetric in over- and
//! under-prediction, and scale-free, so a 1 ms point and a 7 s point weigh
//! alike). Every point of the sweep then runs with the fitted values; the
//! held-out points, which nothing was fitted to, carry the model's error.
//!
//! The optimizer is argmin's Nelder-Mead simplex, chosen because the
//! objective is a simulation (no gradient) over a handful of parameters. It
//! searches a box: each parameter is mapped to [0, 1] of its range
//! (logarithmically when the range spans two decades or more above zero)
//! and clamped there. Simulations are deterministic, so the fit is too.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use argmin::core::{CostFunction, Executor, State};
use argmin::solver::neldermead::NelderMead;
use flowlab_reports::{CalibrationRecord, Role};

use rayon::prelude::*;
use serde_json::Value;
use serde_saphyr::{Location, Spanned};

use crate::diagnostics::at;
use crate::error::ExperimentError;
use crate::experiment::{Experiment, Source};
use crate::kinds::{PointEnv, PointError};
use crate::references::Target;

/// The `calibrate:` block.
#[derive(Debug, Clone, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CalibrateSpec {
    /// Dotted parameter keys and the `[lo, hi]` range each is searched in.
    pub(crate) params: BTreeMap<String, [f64; 2]>,
    #[serde(default)]
    pub(crate) method: Method,
    /// Simplex iterations at most (each runs one to a few evaluations).
    #[serde(default = "default_max_iters")]
    pub(crate) max_iters: u64,
}

fn default_max_iters() -> u64 {
    60
}

/// The optimizer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Method {
    #[default]
    NelderMead,
}

impl Method {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Method::NelderMead => "nelder_mead",
        }
    }
}

/// Checks the ranges and that each key is a parameter every point takes.
pub(crate) fn check_spec(
    origin: &str,
    spec: &Spanned<CalibrateSpec>,
    source: &Source,
) -> Result<CalibrateSpec, ExperimentError> {
    let fail = |message: String| at(origin, spec.referenced, message);
    let c = &spec.value;
    if c.params.is_empty() {
        return Err(fail("`calibrate.params` is empty: name at least one `KEY: [lo, hi]`".into()));
    }
    if c.max_iters == 0 {
        return Err(fail("`calibrate.max_iters` must be at least 1".into()));
    }
    let swept: Vec<&str> = source.sweep.keys().map(|kv| kv.key.key.as_str()).collect();
    for (key, &[lo, hi]) in &c.params {
        let name = format!("`calibrate.params.{key}`");
        if !(lo.is_finite() && hi.is_finite() && lo < hi) {
            return Err(fail(format!("{name}: the range must be two finite numbers [lo, hi] with lo < hi, got [{lo}, {hi}]")));
        }
        // A swept map (`model`) may hold a fitted key (`model.compute_s`):
        // fitted values are set after the sweep's.
        if swept.iter().any(|s| s == key || s.starts_with(&format!("{key}."))) {
            return Err(fail(format!("{name}: the sweep sets this key too; a parameter is either swept or fitted")));
        }
    }
    let initial = initial_of(&source.base, &c.params);
    // Each end of each range must make a valid point: a key the kind does
    // not take is named here, not after the fit.
    for key in c.params.keys() {
        for end in c.params[key] {
            let mut values = initial.clone();
            values.insert(key.clone(), end);
            let (tree, label) = source.tree(0, &values);
            if let Err(e) = source.kind.prepare(&tree) {
                let why = match &e {
                    PointError::UnknownKey { .. } => format!("not a parameter of kind {}: {}", source.kind.name(), e.message()),
                    _ => format!("at {end} point 0 ({label}) is invalid: {}", e.message()),
                };
                return Err(fail(format!("`calibrate.params.{key}`: {why}")));
            }
        }
    }
    Ok(c.clone())
}

/// A fit needs points to fit on.
pub(crate) fn check_targets(origin: &str, location: Location, targets: &[Target]) -> Result<(), ExperimentError> {
    if !targets.iter().any(|t| t.role == Role::Calibration) {
        return Err(at(
            origin,
            location,
            "`calibrate` has no point to fit on: no reference point has the role `calibration` \
             (give the points a free parameter is fitted to `role: calibration`)"
                .into(),
        ));
    }
    Ok(())
}

fn lookup<'a>(tree: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.').try_fold(tree, |node, part| node.get(part))
}

/// A parameter's range as searched: linear, or logarithmic over two or more
/// decades above zero.
#[derive(Clone, Copy)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Axis {
    fn new(lo: f64, hi: f64) -> Axis {
        Axis { lo, hi, log: lo > 0.0 && hi / lo >= 100.0 }
    }

    /// The value at `u` in [0, 1] (clamped).
    fn value(self, u: f64) -> f64 {
        let u = u.clamp(0.0, 1.0);
        if self.log {
            (self.lo.ln() + u * (self.hi.ln() - self.lo.ln())).exp()
        } else {
            self.lo + u * (self.hi - self.lo)
        }
    }

    fn position(self, v: f64) -> f64 {
        if self.log {
            (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }
}

/// Runs the calibration points with `values` and returns each target's
/// run value (mean over repeats), `None` where the point failed.
struct Evaluator<'a> {
    experiment: &'a Experiment,
    /// The calibration targets.
    targets: Vec<&'a Target>,
    /// Their sweep points, each once (two references may read two metrics
    /// of one point).
    points: Vec<u64>,
    launcher: flowlab_runtime::Launcher,
    evaluations: AtomicU64,
}

impl Evaluator<'_> {
    fn run(&self, values: &BTreeMap<String, f64>) -> Vec<Option<f64>> {
        self.evaluations.fetch_add(1, Ordering::Relaxed);
        let source = self.experiment.source();
        // every repeat's metrics of every point, failed runs left out
        let outcomes: Vec<Vec<BTreeMap<String, f64>>> = self
            .points
            .par_iter()
            .map(|&point| {
                let (tree, _) = source.tree(point, values);
                let Ok(runnable) = source.kind.prepare(&tree) else { return Vec::new() };
                (0..source.repeat)
                    .filter_map(|r| {
                        let env = PointEnv { seed: source.seed_of(point, r), launcher: self.launcher.clone() };
                        crate::runner::run_caught(runnable.as_ref(), &env).ok().map(|o| o.metrics)
                    })
                    .collect()
            })
            .collect();
        self.targets
            .iter()
            .map(|t| {
                let at = self.points.iter().position(|&p| p == t.point)?;
                let ys: Vec<f64> = outcomes[at].iter().filter_map(|m| m.get(&t.y_key).copied()).collect();
                (!ys.is_empty()).then(|| ys.iter().sum::<f64>() / ys.len() as f64)
            })
            .collect()
    }

    /// Mean squared log ratio; a failed or non-positive value costs as much
    /// as being off by a factor e^10.
    fn loss(&self, values: &BTreeMap<String, f64>) -> f64 {
        let ys = self.run(values);
        let total: f64 = ys
            .iter()
            .zip(&self.targets)
            .map(|(y, t)| match y {
                Some(y) if *y > 0.0 && t.paper > 0.0 => (y / t.paper).ln().powi(2),
                _ => 100.0,
            })
            .sum();
        total / ys.len().max(1) as f64
    }
}

/// The objective over the unit box, for argmin.
struct Objective<'a> {
    eval: &'a Evaluator<'a>,
    keys: Vec<String>,
    axes: Vec<Axis>,
}

impl Objective<'_> {
    fn values(&self, u: &[f64]) -> BTreeMap<String, f64> {
        self.keys.iter().zip(&self.axes).zip(u).map(|((k, a), &u)| (k.clone(), a.value(u))).collect()
    }
}

impl CostFunction for Objective<'_> {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, u: &Self::Param) -> Result<f64, argmin::core::Error> {
        Ok(self.eval.loss(&self.values(u)))
    }
}

/// Fails if some free parameter moves no calibration point: each is set to
/// each end of its range, the others at their initial values.
pub(crate) fn check_sensitivity(experiment: &Experiment, initial: &BTreeMap<String, f64>, launcher: &flowlab_runtime::Launcher) -> Result<(), ExperimentError> {
    let Some(spec) = &experiment.calibrate else { return Ok(()) };
    let eval = evaluator(experiment, launcher);
    for (key, &[lo, hi]) in &spec.params {
        let at_end = |v: f64| {
            let mut values = initial.clone();
            values.insert(key.clone(), v);
            eval.run(&values)
        };
        if at_end(lo) == at_end(hi) {
            return Err(ExperimentError::InFile {
                origin: experiment.origin.clone(),
                message: format!(
                    "`calibrate.params.{key}`: no calibration point depends on it (each gives the same value at \
                     {lo} and at {hi}), so it cannot be fitted; drop it or fit it on points it moves"
                ),
            });
        }
    }
    Ok(())
}

fn evaluator<'a>(experiment: &'a Experiment, launcher: &flowlab_runtime::Launcher) -> Evaluator<'a> {
    let targets: Vec<&Target> = experiment.calibration_targets().collect();
    let mut points: Vec<u64> = targets.iter().map(|t| t.point).collect();
    points.sort_unstable();
    points.dedup();
    Evaluator { experiment, targets, points, launcher: launcher.clone(), evaluations: AtomicU64::new(0) }
}

/// The values the points are checked with before any fit: the base's
/// value where it lies in the range, else the range's middle.
pub(crate) fn initial_of(base: &Value, params: &BTreeMap<String, [f64; 2]>) -> BTreeMap<String, f64> {
    params
        .iter()
        .map(|(k, &[lo, hi])| {
            let given = lookup(base, k).and_then(Value::as_f64).filter(|v| (lo..=hi).contains(v));
            (k.clone(), given.unwrap_or_else(|| Axis::new(lo, hi).value(0.5)))
        })
        .collect()
}

/// The values the points were checked with, before any fit.
pub(crate) fn initial_values(experiment: &Experiment) -> BTreeMap<String, f64> {
    experiment.calibrate.as_ref().map(|spec| initial_of(&experiment.source().base, &spec.params)).unwrap_or_default()
}

/// Nelder-Mead runs at most, each from the best point of the last.
const RESTARTS: usize = 6;

/// A first simplex: `start` and one step of a quarter range along each
/// axis (inwards from an edge).
fn simplex_around(start: &[f64]) -> Vec<Vec<f64>> {
    let mut simplex = vec![start.to_vec()];
    for i in 0..start.len() {
        let mut v = start.to_vec();
        v[i] += if v[i] + 0.25 <= 1.0 { 0.25 } else { -0.25 };
        simplex.push(v);
    }
    simplex
}

/// Fits the experiment's free parameters on its calibration points.
pub(crate) fn fit(experiment: &Experiment, launcher: &flowlab_runtime::Launcher) -> Result<CalibrationRecord, ExperimentError> {
    let Some(spec) = &experiment.calibrate else {
        return Err(ExperimentError::InFile { origin: experiment.origin.clone(), message: "nothing to calibrate".into() });
    };
    let initial = initial_values(experiment);
    check_sensitivity(experiment, &initial, launcher)?;
    let eval = evaluator(experiment, launcher);
    let keys: Vec<String> = spec.params.keys().cloned().collect();
    let axes: Vec<Axis> = spec.params.values().map(|&[lo, hi]| Axis::new(lo, hi)).collect();
    let mut best: Vec<f64> = keys.iter().zip(&axes).map(|(k, a)| a.position(initial[k]).clamp(0.0, 1.0)).collect();
    let mut best_cost = f64::INFINITY;
    let failed = |e: argmin::core::Error| ExperimentError::InFile {
        origin: experiment.origin.clone(),
        message: format!("calibration failed: {e}"),
    };
    // Restarts: a simplex that collapsed against the box's edge (where the
    // clamp makes the objective flat) starts afresh around the best point,
    // until a restart finds nothing better.
    for _ in 0..RESTARTS {
        let objective = Objective { eval: &eval, keys: keys.clone(), axes: axes.clone() };
        let solver = NelderMead::new(simplex_around(&best)).with_sd_tolerance(1e-12).map_err(failed)?;
        let result = Executor::new(objective, solver)
            .configure(|state| state.max_iters(spec.max_iters))
            .run()
            .map_err(failed)?;
        let state = result.state();
        let cost = state.get_best_cost();
        let improved = cost < best_cost * (1.0 - 1e-9);
        if cost < best_cost {
            best_cost = cost;
            if let Some(p) = state.get_best_param() {
                best = p.iter().map(|u| u.clamp(0.0, 1.0)).collect();
            }
        }
        if !improved {
            break;
        }
    }
    let fitted = keys.iter().zip(&axes).zip(&best).map(|((k, a), &u)| (k.clone(), a.value(u))).collect();
    Ok(CalibrationRecord {
        method: spec.method.name().into(),
        objective: "mean over calibration points of ln(run / published)^2".into(),
        fitted,
        ranges: spec.params.clone(),
        loss: best_cost,
        evaluations: eval.evaluations.load(Ordering::Relaxed),
        points: eval.targets.len() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{Progress, RunOptions};

    /// One worker fetching one scalar from one PS task over a 100 Gbit/s
    /// star with no PS CPU: a step is its compute plus two one-hop
    /// latencies (4 x 1 us), so the median step is `compute_s` + 4 us.
    fn experiment(reference: &str, calibrate: &str) -> String {
        format!(
            "name: fit\nkind: cluster\nseed: 1\n\
             base:\n  model: {{ scalar_per_ps: true, compute_s: 1.0, ps_request_us: 0 }}\n  workers: 1\n  ps: 1\n  steps: 5\n  \
             network: {{ topology: star, link_gbps: 100, latency_us: 1 }}\n\
             sweep:\n  ps: [1, 2]\n\
             plots:\n  - {{ x: ps, y: step_p50_s }}\n\
             reference:\n{reference}{calibrate}"
        )
    }

    fn error(text: &str) -> String {
        Experiment::from_text("t.yaml", text).map(|_| ()).unwrap_err().to_string()
    }

    #[test]
    fn a_reference_point_without_a_role_is_refused_at_its_line() {
        let e = error(&experiment("  - { source: s, x: ps, y: step_p50_s, points: [[1, 0.5]] }\n", ""));
        assert!(e.starts_with("t.yaml:15:5: reference `paper`: point [1, 0.5] has no role"), "{e}");
        // A role on the point itself is enough, and a bad one is named.
        let ok = experiment("  - { source: s, x: ps, y: step_p50_s, points: [[1, 0.5, held_out]] }\n", "");
        assert!(Experiment::from_text("t.yaml", &ok).is_ok());
        let e = error(&experiment("  - { source: s, x: ps, y: step_p50_s, points: [[1, 0.5, fitted]] }\n", ""));
        assert!(e.contains("t.yaml:15") && e.contains("calibration") && e.contains("held_out"), "{e}");
    }

    #[test]
    fn a_reference_point_must_name_one_point_of_the_sweep() {
        let e = error(&experiment("  - { source: s, x: ps, y: step_p50_s, role: held_out, points: [[3, 0.5]] }\n", ""));
        assert!(e.contains("reference `paper` point x = 3: no point of the sweep has ps = 3"), "{e}");
        let two = experiment("  - { source: s, x: workers, y: step_p50_s, role: held_out, points: [[1, 0.5]] }\n", "")
            .replace("plots:\n  - { x: ps, y: step_p50_s }", "plots:\n  - { x: workers, y: step_p50_s, series: ps }");
        let e = error(&two);
        assert!(e.contains("matches 2 points of the sweep, which differ in ps: pin"), "{e}");
        let pinned = two.replace("role: held_out,", "role: held_out, where: { ps: 2 },");
        assert!(Experiment::from_text("t.yaml", &pinned).is_ok());
        let e = error(&two.replace("role: held_out,", "role: held_out, where: { pss: 2 },"));
        assert!(e.contains("`where: { pss: ... }` names no parameter of the sweep; did you mean `ps`?"), "{e}");
    }

    #[test]
    fn a_calibration_needs_calibration_points_and_parameters_they_depend_on() {
        let held_out = "  - { source: s, x: ps, y: step_p50_s, role: held_out, points: [[1, 0.5]] }\n";
        let e = error(&experiment(held_out, "calibrate: { params: { model.compute_s: [0.1, 2] } }\n"));
        assert!(e.starts_with("t.yaml:16:12: `calibrate` has no point to fit on"), "{e}");
        let e = error(&experiment(held_out, "calibrate: { params: { model.compute_s: [2, 0.1] } }\n"));
        assert!(e.contains("`calibrate.params.model.compute_s`: the range must be"), "{e}");
        let e = error(&experiment(held_out, "calibrate: { params: { model.compute_ss: [0.1, 2] } }\n"));
        assert!(e.contains("`calibrate.params.model.compute_ss`: not a parameter of kind cluster"), "{e}");
        let e = error(&experiment(held_out, "calibrate: { params: { ps: [1, 2] } }\n"));
        assert!(e.contains("the sweep sets this key too"), "{e}");
        // Without overlap, the forward pass's share of compute moves nothing.
        let calibration = "  - { source: s, x: ps, y: step_p50_s, role: calibration, points: [[1, 0.5]] }\n";
        let text = experiment(calibration, "calibrate: { params: { model.forward_fraction: [0.1, 0.9] } }\n");
        let e = Experiment::from_text("t.yaml", &text).unwrap().check_calibration().unwrap_err().to_string();
        assert!(e.contains("`calibrate.params.model.forward_fraction`: no calibration point depends on it"), "{e}");
    }

    #[test]
    fn the_fit_finds_the_closed_form_value_and_the_held_out_point_is_reported_apart() {
        // The calibration point asks for a 0.5 s median: compute_s = 0.5 s
        // less the 4 us of latency. The held-out point (published 0.6 s)
        // then sits 0.1 s off, whatever was fitted.
        let refs = "  - { source: s, x: ps, y: step_p50_s, points: [[1, 0.5, calibration], [2, 0.6, held_out]] }\n";
        let text = experiment(refs, "calibrate: { params: { model.compute_s: [0.1, 2] }, max_iters: 80 }\n");
        let e = Experiment::from_text("t.yaml", &text).unwrap();
        assert!(e.check_calibration().unwrap().unwrap().contains("on 1 calibration points"));
        let dir = tempfile::tempdir().unwrap();
        let options = RunOptions { out_dir: Some(dir.path().to_path_buf()), jobs: Some(1), progress: Progress::Quiet, ..Default::default() };
        crate::runner::run(&e, &options).unwrap();
        let info: flowlab_reports::RunInfo =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("run.json")).unwrap()).unwrap();
        let c = info.calibration.unwrap();
        let fitted = c.fitted["model.compute_s"];
        assert!((fitted - (0.5 - 4e-6)).abs() < 5e-4, "{fitted}");
        assert!(c.loss < 1e-6 && c.evaluations > 3 && c.points == 1, "{c:?}");
        let summary: flowlab_reports::Summary =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap()).unwrap();
        let [cal, held] = &summary.references[..] else { panic!("{:?}", summary.references) };
        assert_eq!((cal.role, held.role), (Role::Calibration, Role::HeldOut));
        assert!(cal.relative_error.unwrap().abs() < 1e-3, "{cal:?}");
        let e = held.relative_error.unwrap();
        assert!((e - (0.5 - 0.6) / 0.6).abs() < 1e-3, "{held:?}");
        // Every point ran with the fitted value.
        let rows = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
        assert!(rows.lines().next().unwrap().contains("model.compute_s"), "{rows}");
    }

    #[test]
    fn axes_map_the_unit_interval_onto_the_range() {
        let lin = Axis::new(2.0, 6.0);
        assert!(!lin.log);
        assert_eq!((lin.value(0.0), lin.value(0.5), lin.value(1.0), lin.value(7.0)), (2.0, 4.0, 6.0, 6.0));
        assert!((lin.position(5.0) - 0.75).abs() < 1e-12);
        let log = Axis::new(1.0, 1e4);
        assert!(log.log);
        assert!((log.value(0.5) - 100.0).abs() < 1e-9, "{}", log.value(0.5));
        assert!((log.position(10.0) - 0.25).abs() < 1e-12);
        // A range from zero stays linear whatever its span.
        assert!(!Axis::new(0.0, 1e6).log);
    }
}

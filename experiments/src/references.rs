//! Reference points against the run: each published point of a `reference:`
//! entry is tied, when the file is checked, to the one sweep point it
//! describes (its `x` value and its `where:` pins), and after the run its
//! published value is set beside the value the run produced there.
//!
//! The roles keep the two kinds of agreement apart: a calibration point had
//! free parameters fitted to it (see `calibrate`), so its error says little;
//! a held-out point had nothing fitted to it, so its error is the model's.

use std::collections::{BTreeMap, BTreeSet};

use flowlab_reports::{Reference, ReferenceCheck, ResultRow, Role, same_value};
use serde_json::Value;
use serde_saphyr::Spanned;

use crate::diagnostics::at;
use crate::error::ExperimentError;
use crate::experiment::Run;
use crate::params::display_value;
use crate::suggest::did_you_mean;

/// One reference point and the sweep point it is compared with.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) source: String,
    pub(crate) label: String,
    pub(crate) x_key: String,
    pub(crate) x: f64,
    pub(crate) y_key: String,
    /// The reference's `where:` as `key=value` words.
    pub(crate) series: String,
    pub(crate) role: Role,
    pub(crate) paper: f64,
    /// The sweep point (run index over repeats).
    pub(crate) point: u64,
}

/// Ties every reference point to its sweep point, or says which point has
/// no role, no sweep point, or several.
pub(crate) fn targets(
    origin: &str,
    references: &[Spanned<Reference>],
    runs: &[Run],
    repeat: u32,
    metrics: &[String],
) -> Result<Vec<Target>, ExperimentError> {
    let points: Vec<&Run> = runs.iter().step_by(repeat.max(1) as usize).collect();
    let params: BTreeSet<&str> = points.iter().flat_map(|r| r.params.keys().map(String::as_str)).collect();
    let mut out = Vec::new();
    for spanned in references {
        let r = &spanned.value;
        let fail = |message: String| at(origin, spanned.referenced, message);
        if !metrics.contains(&r.y) {
            return Err(fail(format!(
                "reference `{}`: `y: {}` is not a metric of this kind, so nothing can be compared with it",
                r.label(),
                r.y
            )));
        }
        for key in r.filter.keys() {
            if !params.contains(key.as_str()) {
                return Err(fail(format!(
                    "reference `{}`: `where: {{ {key}: ... }}` names no parameter of the sweep{}",
                    r.label(),
                    did_you_mean(key, params.iter().copied())
                )));
            }
        }
        let series = r.filter.iter().map(|(k, v)| format!("{k}={}", display_value(v))).collect::<Vec<_>>().join(" ");
        for p in &r.points {
            let Some(role) = r.role_of(p) else {
                return Err(fail(format!(
                    "reference `{}`: point [{}, {}] has no role: give the reference `role: calibration` or \
                     `role: held_out`, or the point a third element (`[{}, {}, held_out]`); calibration means a \
                     free parameter was fitted to it, held_out that nothing was",
                    r.label(),
                    p.x,
                    p.y,
                    p.x,
                    p.y
                )));
            };
            let matching: Vec<&Run> = points
                .iter()
                .copied()
                .filter(|run| run.params.get(&r.x).is_some_and(|v| same_value(v, &Value::from(p.x))))
                .filter(|run| r.filter.iter().all(|(k, want)| run.params.get(k).is_some_and(|v| same_value(v, want))))
                .collect();
            let at_point = format!("reference `{}` point x = {}", r.label(), p.x);
            let point = match matching.as_slice() {
                [one] => one.index / u64::from(repeat.max(1)),
                [] => {
                    let pins = if series.is_empty() { String::new() } else { format!(" and {series}") };
                    return Err(fail(format!(
                        "{at_point}: no point of the sweep has {} = {}{pins}, so the run would have nothing to \
                         compare it with (add the value to the sweep, or drop the point)",
                        r.x, p.x
                    )));
                }
                many => {
                    let differ: Vec<&str> = params
                        .iter()
                        .copied()
                        .filter(|k| many.iter().any(|m| m.params.get(*k) != many[0].params.get(*k)))
                        .collect();
                    return Err(fail(format!(
                        "{at_point} matches {} points of the sweep, which differ in {}: pin the one it describes \
                         with `where: {{ KEY: VALUE }}`",
                        many.len(),
                        differ.join(", ")
                    )));
                }
            };
            out.push(Target {
                source: r.source.clone(),
                label: r.label().to_string(),
                x_key: r.x.clone(),
                x: p.x,
                y_key: r.y.clone(),
                series: series.clone(),
                role,
                paper: p.y,
                point,
            });
        }
    }
    Ok(out)
}

/// Each target's published value beside the run's (the mean over the
/// point's successful repeats).
pub(crate) fn checks(targets: &[Target], rows: &[ResultRow], repeat: u32) -> Vec<ReferenceCheck> {
    let mut by_point: BTreeMap<u64, Vec<&ResultRow>> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.error.is_none()) {
        by_point.entry(row.index / u64::from(repeat.max(1))).or_default().push(row);
    }
    targets
        .iter()
        .map(|t| {
            let values: Vec<f64> = by_point
                .get(&t.point)
                .map(|rs| rs.iter().filter_map(|r| r.metrics.get(&t.y_key).copied()).collect())
                .unwrap_or_default();
            let simulated = (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64);
            ReferenceCheck {
                source: t.source.clone(),
                label: t.label.clone(),
                x_key: t.x_key.clone(),
                x: t.x,
                y_key: t.y_key.clone(),
                series: t.series.clone(),
                role: t.role,
                paper: t.paper,
                simulated,
                relative_error: simulated.map(|s| (s - t.paper) / t.paper),
            }
        })
        .collect()
}

/// The median absolute relative error of the checks with `role`, and how
/// many had a value (`None` if none did).
pub(crate) fn median_error(checks: &[ReferenceCheck], role: Role) -> Option<(f64, usize)> {
    let mut errors: Vec<f64> =
        checks.iter().filter(|c| c.role == role).filter_map(|c| c.relative_error.map(f64::abs)).collect();
    if errors.is_empty() {
        return None;
    }
    errors.sort_by(f64::total_cmp);
    let n = errors.len();
    let median = if n % 2 == 1 { errors[n / 2] } else { (errors[n / 2 - 1] + errors[n / 2]) / 2.0 };
    Some((median, n))
}

/// The terminal's account: one line per point, then the medians by role.
pub(crate) fn text(checks: &[ReferenceCheck]) -> String {
    if checks.is_empty() {
        return String::new();
    }
    let mut s = String::from("reference points (error = (run - published) / published):\n");
    let width = checks.iter().map(|c| c.label.len()).max().unwrap_or(0);
    for c in checks {
        let run = c.simulated.map_or("failed".to_string(), |v| format!("{v:.4}"));
        let err = c.relative_error.map_or("-".to_string(), |e| format!("{:+.1}%", e * 100.0));
        let series = if c.series.is_empty() { String::new() } else { format!(" {}", c.series) };
        s.push_str(&format!(
            "  {:<11} {:<width$}  {}={}{series}  {}: published {:.4}, run {run}  {err}\n",
            c.role.describe(),
            c.label,
            c.x_key,
            c.x,
            c.y_key,
            c.paper
        ));
    }
    let failed = checks.iter().filter(|c| c.simulated.is_none()).count();
    match median_error(checks, Role::HeldOut) {
        Some((m, n)) => s.push_str(&format!("  held out: median |error| {:.1}% over {n} points", m * 100.0)),
        None if checks.iter().any(|c| c.role == Role::HeldOut) => s.push_str("  held out: no point with a value"),
        None => s.push_str("  held out: none (every point is a calibration point: nothing here is a prediction)"),
    }
    if let Some((m, n)) = median_error(checks, Role::Calibration) {
        s.push_str(&format!("; calibration: median |error| {:.1}% over {n} points (fitted)", m * 100.0));
    }
    if failed > 0 {
        s.push_str(&format!("; {failed} points failed"));
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(role: Role, paper: f64, simulated: Option<f64>) -> ReferenceCheck {
        ReferenceCheck {
            source: "s".into(),
            label: "paper".into(),
            x_key: "workers".into(),
            x: 1.0,
            y_key: "step_p50_s".into(),
            series: String::new(),
            role,
            paper,
            simulated,
            relative_error: simulated.map(|s| (s - paper) / paper),
        }
    }

    #[test]
    fn held_out_and_calibration_errors_are_reported_apart() {
        let checks = [
            check(Role::Calibration, 1.0, Some(1.0)),
            check(Role::HeldOut, 2.0, Some(3.0)),  // +50%
            check(Role::HeldOut, 4.0, Some(3.0)),  // -25%
            check(Role::HeldOut, 10.0, Some(11.0)), // +10%
            check(Role::HeldOut, 1.0, None),
        ];
        let (m, n) = median_error(&checks, Role::HeldOut).unwrap();
        assert_eq!(n, 3);
        assert!((m - 0.25).abs() < 1e-12, "{m}");
        assert_eq!(median_error(&checks, Role::Calibration), Some((0.0, 1)));
        let t = text(&checks);
        assert!(t.contains("held out: median |error| 25.0% over 3 points"), "{t}");
        assert!(t.contains("calibration: median |error| 0.0% over 1 points (fitted)"), "{t}");
        assert!(t.contains("1 points failed"), "{t}");
    }
}

//! `flowlab compare A B`: two runs' results side by side. Points are
//! matched by the parameters that vary within the runs; the settings each
//! run holds constant and the other does not share are named, since they
//! are what the comparison compares. Repeats of a point are averaged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use flowlab_reports::ResultRow;
use serde_json::Value;

use crate::error::ExperimentError;

/// One run's successful points, by their parameters.
struct Run {
    rows: Vec<ResultRow>,
    /// Each parameter's value where every point has the same one.
    constant: BTreeMap<String, Value>,
}

fn read(dir: &Path) -> Result<Run, ExperimentError> {
    let path = dir.join(crate::store::RESULTS_JSONL);
    let rows: Vec<ResultRow> = flowlab_reports::read_results(&path)?.into_iter().filter(|r| r.error.is_none()).collect();
    if rows.is_empty() {
        return Err(ExperimentError::Usage(format!("{}: no successful points to compare", path.display())));
    }
    let mut constant: BTreeMap<String, Value> = rows[0].params.clone();
    for r in &rows[1..] {
        constant.retain(|k, v| r.params.get(k) == Some(v));
    }
    Ok(Run { rows, constant })
}

/// Two runs compared: the settings that differ, and per matched point
/// its swept values and each shared metric in both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Settings held constant in a run whose value the other run does not
    /// share (absent: `None`): (key, value in A, value in B).
    pub differing: Vec<(String, Option<Value>, Option<Value>)>,
    /// The metrics compared (in both runs, or those asked for).
    pub metrics: Vec<String>,
    /// The parameters points are matched by.
    pub keys: Vec<String>,
    /// (the point's values of `keys`, per metric (mean in A, mean in B)).
    pub points: Vec<(Vec<Value>, Vec<(f64, f64)>)>,
    /// Points of one run with no partner in the other.
    pub unmatched: (usize, usize),
}

/// Compares the results in `a` and `b` on `metrics` (empty: every metric
/// both have).
pub fn compare(a: &Path, b: &Path, metrics: &[String]) -> Result<Comparison, ExperimentError> {
    let (ra, rb) = (read(a)?, read(b)?);
    // a setting differs when both runs hold it constant at other values,
    // or one run has it and the other never names it
    let named = |run: &Run, k: &String| run.rows.iter().any(|r| r.params.contains_key(k));
    let all: BTreeSet<&String> = ra.rows.iter().chain(&rb.rows).flat_map(|r| r.params.keys()).collect();
    let mut differing = Vec::new();
    let mut keys = Vec::new();
    for k in all {
        let (ca, cb) = (ra.constant.get(k), rb.constant.get(k));
        match (ca, cb) {
            (Some(x), Some(y)) if x == y => {}
            (Some(_), Some(_)) => differing.push((k.clone(), ca.cloned(), cb.cloned())),
            _ if !named(&ra, k) || !named(&rb, k) => differing.push((k.clone(), ca.cloned(), cb.cloned())),
            // swept in at least one run: points are matched by it
            _ => keys.push(k.clone()),
        }
    }
    let shared: BTreeSet<&String> = ra.rows[0].metrics.keys().filter(|m| rb.rows[0].metrics.contains_key(*m)).collect();
    let metrics: Vec<String> = if metrics.is_empty() {
        shared.into_iter().cloned().collect()
    } else {
        for m in metrics {
            if !shared.contains(m) {
                return Err(ExperimentError::Usage(format!(
                    "--metric {m}: not a metric of both runs (both have: {})",
                    shared.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                )));
            }
        }
        metrics.to_vec()
    };
    let group = |run: &Run| {
        let mut g: BTreeMap<String, (Vec<Value>, Vec<(f64, usize)>)> = BTreeMap::new();
        for r in &run.rows {
            let values: Vec<Value> = keys.iter().map(|k| r.params.get(k).cloned().unwrap_or(Value::Null)).collect();
            let e = g.entry(Value::Array(values.clone()).to_string()).or_insert_with(|| (values, vec![(0.0, 0); metrics.len()]));
            for (slot, m) in e.1.iter_mut().zip(&metrics) {
                if let Some(v) = r.metrics.get(m).filter(|v| v.is_finite()) {
                    *slot = (slot.0 + v, slot.1 + 1);
                }
            }
        }
        g
    };
    let (ga, gb) = (group(&ra), group(&rb));
    let mean = |s: &(f64, usize)| if s.1 == 0 { f64::NAN } else { s.0 / s.1 as f64 };
    let points: Vec<(Vec<Value>, Vec<(f64, f64)>)> = ga
        .iter()
        .filter_map(|(k, (values, sa))| gb.get(k).map(|(_, sb)| (values.clone(), sa.iter().zip(sb).map(|(x, y)| (mean(x), mean(y))).collect())))
        .collect();
    let unmatched = (ga.len() - points.len(), gb.len() - points.len());
    Ok(Comparison { differing, metrics, keys, points, unmatched })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rows: &[(&[(&str, Value)], &[(&str, f64)])]) {
        let lines: Vec<String> = rows.iter().enumerate().map(|(i, (p, m))| serde_json::to_string(&crate::kinds::test_row(i as u64, p, m)).unwrap()).collect();
        std::fs::write(dir.join(crate::store::RESULTS_JSONL), lines.join("\n") + "\n").unwrap();
    }

    #[test]
    fn points_match_by_swept_values_and_the_differing_setting_is_named() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let sigma = |s: f64| ("straggler.sigma", serde_json::json!(s));
        let backup = |n: u64| ("strategy.sync.backup", serde_json::json!(n));
        let workers = ("workers", serde_json::json!(100));
        write(a.path(), &[(&[sigma(0.3), backup(0), workers.clone()], &[("throughput", 100.0), ("step_p50_s", 1.0)]), (&[sigma(0.3), backup(2), workers.clone()], &[("throughput", 110.0), ("step_p50_s", 0.9)])]);
        // B: another sigma, the same sweep, a repeat of backup 2, one more point
        write(
            b.path(),
            &[
                (&[sigma(0.6), backup(0), workers.clone()], &[("throughput", 80.0), ("step_p50_s", 1.2)]),
                (&[sigma(0.6), backup(2), workers.clone()], &[("throughput", 90.0), ("step_p50_s", 1.1)]),
                (&[sigma(0.6), backup(2), workers.clone()], &[("throughput", 100.0), ("step_p50_s", 1.0)]),
                (&[sigma(0.6), backup(4), workers.clone()], &[("throughput", 99.0), ("step_p50_s", 1.0)]),
            ],
        );
        let c = compare(a.path(), b.path(), &[]).unwrap();
        assert_eq!(c.differing, vec![("straggler.sigma".to_string(), Some(serde_json::json!(0.3)), Some(serde_json::json!(0.6)))]);
        assert_eq!(c.keys, vec!["strategy.sync.backup".to_string()]);
        assert_eq!(c.metrics, vec!["step_p50_s".to_string(), "throughput".to_string()]);
        assert_eq!(c.points.len(), 2);
        assert_eq!(c.points[1].0, vec![serde_json::json!(2)]);
        assert_eq!(c.points[1].1, vec![(0.9, 1.05), (110.0, 95.0)], "B's two repeats averaged");
        assert_eq!(c.unmatched, (0, 1));
        let e = compare(a.path(), b.path(), &["goodput".into()]).unwrap_err().to_string();
        assert_eq!(e, "--metric goodput: not a metric of both runs (both have: step_p50_s, throughput)");
    }
}

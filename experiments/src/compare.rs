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

/// Writes the comparison of `a` and `b` as a report folder `out` (the
/// standard page, rendered): the matched points' table with B/A as its
/// summary, the differing settings under it, and for each compared metric
/// a bar chart of every point (a `point` label of its swept values) with A
/// and B side by side. Returns the page's path.
pub fn compare_report(a: &Path, b: &Path, metrics: &[String], out: &Path) -> Result<std::path::PathBuf, ExperimentError> {
    let c = compare(a, b, metrics)?;
    std::fs::create_dir_all(out).map_err(|e| ExperimentError::io(out, e))?;
    let label = |values: &[Value]| -> String {
        // the last part of each key (`backup=4` for `strategy.sync.backup`): tick labels are short
        let words: Vec<String> = c.keys.iter().zip(values).map(|(k, v)| format!("{}={}", k.rsplit('.').next().unwrap_or(k), crate::params::display_value(v))).collect();
        if words.is_empty() { "all".into() } else { words.join(" ") }
    };
    let mut rows = Vec::new();
    for (run, dir) in [("A", a), ("B", b)] {
        for r in read(dir)?.rows {
            let values: Vec<Value> = c.keys.iter().map(|k| r.params.get(k).cloned().unwrap_or(Value::Null)).collect();
            let mut params = BTreeMap::new();
            params.insert("point".to_string(), Value::from(label(&values)));
            params.insert("run".to_string(), Value::from(run));
            let index = rows.len() as u64;
            rows.push(ResultRow { index, key: format!("{run}{}", r.key), params, ..r });
        }
    }
    let what: Vec<String> = c.differing.iter().map(|(k, va, vb)| format!("{k} {} vs {}", shown(va), shown(vb))).collect();
    let what = if what.is_empty() || what.join(", ").len() > 50 { String::new() } else { format!(" ({})", what.join(", ")) };
    let plots: Vec<String> = c
        .metrics
        .iter()
        .map(|m| format!("  - {{ kind: bar, x: point, y: {m}, series: run, title: {} }}\n", Value::from(format!("{m}: A vs B{what}"))))
        .collect();
    let yaml = format!(
        "# flowlab compare\n#   A = {}\n#   B = {}\nname: compare\nplots:\n{}",
        a.display(),
        b.display(),
        plots.concat()
    );
    let yaml_path = out.join("experiment.yaml");
    flowlab_files::write_atomic(&yaml_path, yaml.as_bytes()).map_err(|e| ExperimentError::io(&yaml_path, e))?;
    let jsonl = out.join(crate::store::RESULTS_JSONL);
    let text: String = rows.iter().map(|r| serde_json::to_string(r).map(|l| l + "\n")).collect::<Result<_, _>>().map_err(|e| ExperimentError::io(&jsonl, std::io::Error::other(e)))?;
    flowlab_files::write_atomic(&jsonl, text.as_bytes()).map_err(|e| ExperimentError::io(&jsonl, e))?;
    let mut columns: Vec<String> = c.keys.clone();
    for m in &c.metrics {
        columns.extend([format!("{m} A"), format!("{m} B"), format!("{m} B/A")]);
    }
    let table_rows = c
        .points
        .iter()
        .map(|(values, pairs)| values.iter().cloned().chain(pairs.iter().flat_map(|&(x, y)| [x, y, y / x].map(number))).collect())
        .collect();
    let differing: Vec<String> = c.differing.iter().map(|(k, va, vb)| format!("{k} = {} in A, {} in B", shown(va), shown(vb))).collect();
    let note = format!(
        "A = {}, B = {}; {} points matched ({} only in A, {} only in B); {}",
        a.display(),
        b.display(),
        c.points.len(),
        c.unmatched.0,
        c.unmatched.1,
        if differing.is_empty() { "the same settings in both runs".to_string() } else { format!("settings that differ: {}", differing.join("; ")) }
    );
    let table = flowlab_reports::SummaryTable { title: "A and B point by point".into(), columns, rows: table_rows, note: Some(note) };
    flowlab_reports::write_summary(out, &flowlab_reports::Summary { references: Vec::new(), tables: vec![table] })?;
    crate::render(out)
}

fn number(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

fn shown(v: &Option<Value>) -> String {
    v.as_ref().map_or_else(|| "(varies or absent)".to_string(), crate::params::display_value)
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

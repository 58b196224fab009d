//! What a `distributed` sweep shows over all its points: the prediction
//! error apart for each strategy, and, for synchronous points that differ
//! only in their backup workers, the normalized speedup of each backup
//! count, t(0) / t(b) x N / (N + b) on median steps (N gradients an update,
//! b backups), measured and predicted, with the best count of each.

use std::collections::BTreeMap;

use flowlab_reports::{ResultRow, SummaryTable};
use serde_json::{Value, json};

/// A point's number from its parameters (absent: `default`).
fn param(row: &ResultRow, key: &str, default: f64) -> f64 {
    row.params.get(key).and_then(Value::as_f64).unwrap_or(default)
}

fn strategy(row: &ResultRow) -> String {
    row.params.get("strategy").and_then(Value::as_str).unwrap_or("sync").to_string()
}

/// The group a synchronous point belongs to: every parameter but
/// `workers` and `backup`, and the gradients an update needs.
fn group_of(row: &ResultRow) -> String {
    let needed = param(row, "workers", 1.0) - param(row, "backup", 0.0);
    let mut words: Vec<String> = row
        .params
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "workers" | "backup"))
        .map(|(k, v)| format!("{k}={}", crate::params::display_value(v)))
        .collect();
    words.insert(0, format!("N={needed}"));
    words.join(" ")
}

pub(crate) fn summarize(rows: &[ResultRow]) -> (Vec<SummaryTable>, String) {
    let ok: Vec<&ResultRow> = rows.iter().filter(|r| r.error.is_none() && r.metrics.contains_key("error")).collect();
    let mut text = String::new();
    let mut by_strategy: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in &ok {
        by_strategy.entry(strategy(r)).or_default().push(r.metrics["error"]);
    }
    let error_rows: Vec<Vec<Value>> = by_strategy
        .iter()
        .map(|(s, e)| {
            let mape = e.iter().map(|x| x.abs()).sum::<f64>() / e.len() as f64 * 100.0;
            let worst = e.iter().copied().fold(0.0f64, |w, x| if x.abs() > w.abs() { x } else { w }) * 100.0;
            text.push_str(&format!("{s}: median step predicted with MAPE {mape:.1}% over {} points (worst {worst:+.1}%)\n", e.len()));
            vec![json!(s), json!(mape), json!(worst), json!(e.len())]
        })
        .collect();
    let mut tables = vec![SummaryTable {
        title: "Prediction error of the median step".into(),
        columns: ["strategy", "MAPE %", "worst %", "points"].map(String::from).to_vec(),
        rows: error_rows,
        note: Some("error = (predicted - measured) / measured of each point's median step".into()),
    }];
    let (speedups, best) = backup_speedups(&ok);
    if !speedups.is_empty() {
        for (group, (measured, predicted)) in &best {
            text.push_str(&format!("{group}: best backup count measured {measured}, predicted {predicted}\n"));
        }
        tables.push(SummaryTable {
            title: "Backup workers: normalized speedup t(0)/t(b) x N/(N+b)".into(),
            columns: ["group", "backups", "measured", "predicted"].map(String::from).to_vec(),
            rows: speedups,
            note: Some("median steps of points that differ only in their backup workers, each against the group's point without".into()),
        });
    }
    (tables, text)
}

/// The normalized speedups of each synchronous group with a point without
/// backups, and each group's best backup count (measured, predicted).
#[allow(clippy::type_complexity)]
fn backup_speedups(ok: &[&ResultRow]) -> (Vec<Vec<Value>>, BTreeMap<String, (u64, u64)>) {
    let mut groups: BTreeMap<String, Vec<&ResultRow>> = BTreeMap::new();
    for r in ok.iter().filter(|r| strategy(r) == "sync") {
        groups.entry(group_of(r)).or_default().push(r);
    }
    let (mut rows, mut best) = (Vec::new(), BTreeMap::new());
    for (group, mut members) in groups {
        members.sort_by(|a, b| param(a, "backup", 0.0).total_cmp(&param(b, "backup", 0.0)));
        let Some(base) = members.iter().find(|r| param(r, "backup", 0.0) == 0.0) else { continue };
        if members.len() < 2 {
            continue;
        }
        let (m0, p0) = (base.metrics["measured_step_s"], base.metrics["predicted_step_s"]);
        let needed = param(base, "workers", 1.0);
        let (mut top_m, mut top_p) = ((0u64, f64::MIN), (0u64, f64::MIN));
        for r in &members {
            let b = param(r, "backup", 0.0);
            let scale = needed / (needed + b);
            let m = m0 / r.metrics["measured_step_s"] * scale;
            let p = p0 / r.metrics["predicted_step_s"] * scale;
            if m > top_m.1 {
                top_m = (b as u64, m);
            }
            if p > top_p.1 {
                top_p = (b as u64, p);
            }
            rows.push(vec![json!(group), json!(b), json!(m), json!(p)]);
        }
        best.insert(group, (top_m.0, top_p.0));
    }
    (rows, best)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(index: u64, workers: u64, backup: u64, measured: f64, predicted: f64) -> ResultRow {
        crate::kinds::test_row(
            index,
            &[("workers", json!(workers)), ("backup", json!(backup)), ("strategy", json!("sync")), ("model", json!("mlp784"))],
            &[("measured_step_s", measured), ("predicted_step_s", predicted), ("error", (predicted - measured) / measured)],
        )
    }

    #[test]
    fn backup_counts_are_ranked_by_normalized_speedup_within_their_group() {
        // N = 3: b = 1 turns a 1.0 s step into 0.6 s (x 3/4: 1.25), b = 2
        // into 0.55 s (x 3/5: 1.09); the prediction says 0.7 and 0.45 s
        // (1.07 and 1.33): measured best 1, predicted best 2.
        let rows = [row(0, 3, 0, 1.0, 1.0), row(1, 4, 1, 0.6, 0.7), row(2, 5, 2, 0.55, 0.45), row(3, 4, 0, 2.0, 2.2)];
        let (tables, text) = summarize(&rows);
        assert!(text.contains("sync: median step predicted with MAPE 11.2% over 4 points"), "{text}");
        assert!(text.contains("N=3 model=mlp784 strategy=sync: best backup count measured 1, predicted 2"), "{text}");
        let speedups = &tables[1].rows;
        assert_eq!(speedups.len(), 3, "the N = 4 point has no group of its own to compare: {speedups:?}");
        let m1 = speedups[1][2].as_f64().unwrap();
        assert!((m1 - 1.0 / 0.6 * 0.75).abs() < 1e-12, "{m1}");
    }
}

//! A validation sweep's error apart for what each point tests. A placement
//! that moves no tensor runs on one device: the profile predictor's step
//! for it is the profiling run's own wall time by construction, so its
//! agreement is a reproducibility check, not accuracy. The placements that
//! split the step over devices (at least one transfer) are the ones that
//! test the placement model; they are reported apart, with Kendall's tau
//! over the distinct split placements of each group (several placers that
//! choose one placement count once).

use std::collections::{BTreeMap, BTreeSet};

use flowlab_reports::{ResultRow, SummaryTable};
use serde_json::json;

use super::validate::{kendall_tau, param};

/// Whether a point moved tensors between devices.
fn splits(r: &ResultRow) -> bool {
    r.metrics.get("measured_transfers").is_some_and(|&t| t > 0.0)
}

/// What makes two points the same measured configuration: their group and
/// the placement's own footprint (transfers, bytes, predicted step; two
/// placements alike in all three are the same placement for the engine).
fn configuration(r: &ResultRow, group: &[&str]) -> (Vec<String>, [u64; 3]) {
    let m = |k: &str| r.metrics.get(k).copied().unwrap_or(f64::NAN).to_bits();
    (group.iter().map(|k| param(r, k)).collect(), [m("predicted_transfers"), m("predicted_transfer_bytes"), m("predicted_step_s")])
}

/// (MAPE, mean signed error, worst |error|) of `rs`, in percent.
fn errors(rs: &[&&ResultRow]) -> Option<(f64, f64, f64)> {
    if rs.is_empty() {
        return None;
    }
    let e: Vec<f64> = rs.iter().map(|r| r.metrics["error"]).collect();
    let n = e.len() as f64;
    Some((
        e.iter().map(|x| x.abs()).sum::<f64>() / n * 100.0,
        e.iter().sum::<f64>() / n * 100.0,
        e.iter().map(|x| x.abs()).fold(0.0, f64::max) * 100.0,
    ))
}

/// The split/one-device tables and their lines for the terminal. `ok` are
/// the points with a finite error; `group` the keys of a tau group (all but
/// the placer).
pub(super) fn summarize(ok: &[&ResultRow], group: &[&str]) -> (Vec<SummaryTable>, String) {
    let mut text = String::new();
    let mut by_pred: BTreeMap<String, Vec<&&ResultRow>> = BTreeMap::new();
    for r in ok {
        by_pred.entry(param(r, "predictor")).or_default().push(r);
    }
    let mut rows = Vec::new();
    for (pred, rs) in &by_pred {
        let (split, one): (Vec<&&ResultRow>, Vec<&&ResultRow>) = rs.iter().partition(|r| splits(r));
        for (what, subset) in [("split (moves tensors)", &split), ("one device", &one)] {
            let distinct: BTreeSet<_> = subset.iter().map(|r| configuration(r, group)).collect();
            let Some((mape, signed, worst)) = errors(subset) else {
                text.push_str(&format!("{pred}, {what}: no point\n"));
                continue;
            };
            let note = if what == "one device" && pred == "profile" { " (a reproducibility check: the profile is this step's own run)" } else { "" };
            text.push_str(&format!(
                "{pred}, {what}: MAPE {mape:.1}% over {} points, {} distinct configurations (mean signed {signed:+.1}%, worst {worst:.1}%){note}\n",
                subset.len(),
                distinct.len()
            ));
            rows.push(vec![json!(pred), json!(what), json!(subset.len()), json!(distinct.len()), json!(mape), json!(signed), json!(worst)]);
        }
    }
    let mut tables = vec![SummaryTable {
        title: "Prediction error by what the placement tests".into(),
        columns: ["predictor", "placements", "points", "distinct configurations", "MAPE %", "mean signed error %", "worst |error| %"]
            .map(String::from)
            .to_vec(),
        rows,
        note: Some(
            "split: at least one tensor moved between devices, the points that test the placement model; one device: the \
             profile predictor's step there is the profiling run's own, so its error is a reproducibility check"
                .into(),
        ),
    }];
    // Kendall's tau over each group's distinct split placements.
    let mut groups: BTreeMap<Vec<String>, BTreeMap<[u64; 3], &ResultRow>> = BTreeMap::new();
    for r in ok.iter().filter(|r| splits(r)) {
        let (g, footprint) = configuration(r, group);
        groups.entry(g).or_default().entry(footprint).or_insert(r);
    }
    let mut tau_rows = Vec::new();
    for (g, placements) in &groups {
        let rs: Vec<&ResultRow> = placements.values().copied().collect();
        let m: Vec<f64> = rs.iter().map(|r| r.metrics.get("measured_relative").or(r.metrics.get("measured_step_s")).copied().unwrap_or(f64::NAN)).collect();
        let p: Vec<f64> = rs.iter().map(|r| r.metrics["predicted_step_s"]).collect();
        let tau = kendall_tau(&m, &p);
        let label: Vec<String> = group.iter().zip(g).filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k}={v}")).collect();
        if let Some(t) = tau {
            text.push_str(&format!("split placements: tau {t:+.2} over {} distinct: {}\n", rs.len(), label.join(" ")));
        }
        tau_rows.push(vec![json!(label.join(" ")), json!(rs.len()), tau.map_or(serde_json::Value::Null, |t| json!(t))]);
    }
    tables.push(SummaryTable {
        title: "Order of the distinct split placements: Kendall's tau".into(),
        columns: ["group", "distinct split placements", "tau"].map(String::from).to_vec(),
        rows: tau_rows,
        note: Some("tau-b between measured and predicted steps over each group's placements that move tensors, each placement once".into()),
    });
    (tables, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(index: u64, predictor: &str, placer: &str, transfers: f64, measured: f64, predicted: f64) -> ResultRow {
        crate::kinds::test_row(
            index,
            &[("predictor", json!(predictor)), ("model", json!("cnn")), ("placer", json!(placer))],
            &[
                ("measured_step_s", measured),
                ("predicted_step_s", predicted),
                ("error", (predicted - measured) / measured),
                ("measured_transfers", transfers),
                ("predicted_transfers", transfers),
                ("predicted_transfer_bytes", transfers * 100.0),
            ],
        )
    }

    #[test]
    fn split_placements_are_reported_apart_and_each_distinct_placement_counts_once() {
        let rows = [
            // three placers choose the same one-device placement
            row(0, "profile", "single_device", 0.0, 1.0, 1.0),
            row(1, "profile", "m_etf", 0.0, 1.0, 1.0),
            row(2, "profile", "m_sct", 0.0, 1.0, 1.0),
            // two split placements, and a third placer choosing the second again
            row(3, "profile", "round_robin", 10.0, 2.0, 1.5),
            row(4, "profile", "tf_greedy", 4.0, 1.2, 1.3),
            row(5, "profile", "m_topo", 4.0, 1.25, 1.3),
        ];
        let ok: Vec<&ResultRow> = rows.iter().collect();
        let (tables, text) = summarize(&ok, &["predictor", "model"]);
        // split: -25%, +8.3%, +4% over 3 points, 2 distinct placements
        assert!(text.contains("profile, split (moves tensors): MAPE 12.4% over 3 points, 2 distinct configurations"), "{text}");
        assert!(text.contains("profile, one device: MAPE 0.0% over 3 points, 1 distinct configurations (mean signed +0.0%, worst 0.0%) (a reproducibility check"), "{text}");
        // tau over the 2 distinct split placements: round robin measured
        // and predicted slowest: concordant
        assert!(text.contains("split placements: tau +1.00 over 2 distinct: predictor=profile model=cnn"), "{text}");
        assert_eq!(tables[1].rows[0][1], json!(2));
    }
}

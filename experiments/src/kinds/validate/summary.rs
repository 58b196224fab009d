//! The summary of a validate run: error per predictor, the profiles
//! taken at another host speed, Kendall's tau per group of placements and
//! the worst points.

use super::*;

/// Kendall's tau-b between two equally long lists (ties in either count
/// against neither concordance nor discordance, as tau-b defines).
pub(crate) fn kendall_tau(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len().min(y.len());
    tau_b(n, |i, j| order(x[i], x[j]), |i, j| order(y[i], y[j]))
}

/// Kendall's tau (tau-a) of predicted against measured step times over
/// the pairs the measurement orders, those whose p10-p90 intervals are
/// disjoint: (concordant - discordant) / such pairs, a pair the prediction
/// ties counting as neither. Placements the timed steps cannot tell apart
/// are left out, so the simulator is neither credited nor blamed for how it
/// orders them. `None` when the measurement orders no pair. Returns the tau
/// and the number of pairs the measurement ordered.
pub(crate) fn resolved_tau(median: &[f64], p10: &[f64], p90: &[f64], predicted: &[f64]) -> (Option<f64>, usize) {
    let n = median.len().min(p10.len()).min(p90.len()).min(predicted.len());
    let (mut resolved, mut score) = (0usize, 0i64);
    for i in 0..n {
        for j in i + 1..n {
            if p90[i] < p10[j] || p90[j] < p10[i] {
                resolved += 1;
                score += i64::from(order(median[i], median[j]) * order(predicted[i], predicted[j]));
            }
        }
    }
    if resolved == 0 {
        return (None, 0);
    }
    (Some(score as f64 / resolved as f64), resolved)
}

pub(super) fn order(a: f64, b: f64) -> i8 {
    if a < b {
        -1
    } else if a > b {
        1
    } else {
        0
    }
}

/// tau-b over `n` items given each side's order of every pair (-1, 0, 1).
pub(super) fn tau_b(n: usize, ox: impl Fn(usize, usize) -> i8, oy: impl Fn(usize, usize) -> i8) -> Option<f64> {
    if n < 2 {
        return None;
    }
    let (mut c, mut d, mut tx, mut ty) = (0f64, 0f64, 0f64, 0f64);
    for i in 0..n {
        for j in i + 1..n {
            let (a, b) = (ox(i, j), oy(i, j));
            if a == 0 && b == 0 {
                continue;
            } else if a == 0 {
                tx += 1.0;
            } else if b == 0 {
                ty += 1.0;
            } else if a == b {
                c += 1.0;
            } else {
                d += 1.0;
            }
        }
    }
    let denom = ((c + d + tx) * (c + d + ty)).sqrt();
    (denom > 0.0).then(|| (c - d) / denom)
}

pub(crate) fn param(r: &ResultRow, key: &str) -> String {
    match r.params.get(key) {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

/// How far (median over a model's points) a profile's one-device step may
/// be from the one-device step timed beside the points before the summary
/// says that the host moved: the goal for the profile predictor.
pub(super) const PROFILE_DRIFT_WARNING: f64 = 0.10;

/// The models whose profile is further than [`PROFILE_DRIFT_WARNING`] from
/// the one-device reference timed beside their points: (model, median
/// error, points). A profile is a measurement of this host, so such a gap
/// is the host's speed moving between profiling and measuring (this
/// machine's core runs in spells of different speed that the guest cannot
/// see), not the simulator's error.
pub(super) fn profile_drift(ok: &[&ResultRow]) -> Vec<(String, f64, usize)> {
    let mut by_model: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in ok.iter().filter(|r| param(r, "predictor") == "profile") {
        if let Some(&e) = r.metrics.get("reference_error") {
            let sizes = param(r, "sizes");
            let sizes = if sizes.is_empty() || sizes == "{}" { String::new() } else { format!(" sizes={sizes}") };
            by_model.entry(format!("model={} batch={}{sizes}", param(r, "model"), param(r, "batch"))).or_default().push(e);
        }
    }
    by_model
        .into_iter()
        .map(|(model, errors)| (model, measure::spread(&errors).0, errors.len()))
        .filter(|(_, median, _)| median.abs() > PROFILE_DRIFT_WARNING)
        .collect()
}

/// MAPE per predictor, the same apart for split and one-device
/// placements, profiles taken at another host speed, Kendall's tau per
/// group of placements, worst points.
pub(super) fn summarize(rows: &[ResultRow]) -> (Vec<SummaryTable>, String) {
    let ok: Vec<&ResultRow> = rows
        .iter()
        .filter(|r| r.error.is_none() && r.metrics.get("error").is_some_and(|e| e.is_finite()))
        .collect();
    let mut text = String::new();
    let mut tables = vec![error_per_predictor(&ok, &mut text)];
    // the same errors apart for placements that split the step and for
    // those that run on one device
    let group_keys = ["predictor", "model", "batch", "devices", "threads", "comm", "link.gbps", "link.latency_us"];
    let (split_tables, split_text) = crate::kinds::validate_split::summarize(&ok, &group_keys);
    text.push_str(&split_text);
    tables.extend(drift_warnings(&ok, &mut text));
    tables.extend(split_tables);
    tables.push(tau_per_group(&ok, &group_keys, &mut text));
    tables.push(worst_points(&ok));
    (tables, text)
}

/// MAPE, signed error, worst error and measured spread per predictor.
pub(super) fn error_per_predictor(ok: &[&ResultRow], text: &mut String) -> SummaryTable {
    // MAPE and spread per predictor.
    let mut by_pred: BTreeMap<String, Vec<&ResultRow>> = BTreeMap::new();
    for r in ok {
        by_pred.entry(param(r, "predictor")).or_default().push(r);
    }
    let mut rows_out = Vec::new();
    for (pred, rs) in &by_pred {
        let abs: Vec<f64> = rs.iter().map(|r| r.metrics["abs_error"]).collect();
        let signed: Vec<f64> = rs.iter().map(|r| r.metrics["error"]).collect();
        let spread: Vec<f64> = rs
            .iter()
            .map(|r| (r.metrics["measured_p90_s"] - r.metrics["measured_p10_s"]) / r.metrics["measured_step_s"])
            .collect();
        let mape = abs.iter().sum::<f64>() / abs.len() as f64;
        let bias = signed.iter().sum::<f64>() / signed.len() as f64;
        let worst = abs.iter().copied().fold(0.0, f64::max);
        let spread_med = measure::spread(&spread).0;
        let bytes_equal = rs.iter().filter(|r| r.metrics["measured_transfer_bytes"] == r.metrics["predicted_transfer_bytes"]).count();
        // How far the host moved: the one-device step's prediction against
        // the reference timed beside each point.
        let reference: Vec<f64> = rs.iter().filter_map(|r| r.metrics.get("reference_error").copied()).collect();
        // And the error left once that drift is divided out: each step over
        // the one-device step, predicted against measured.
        let relative: Vec<f64> = rs.iter().filter_map(|r| r.metrics.get("relative_error").map(|e| e.abs())).collect();
        let drift = if reference.is_empty() {
            String::new()
        } else {
            let (lo, hi) = reference.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &e| (a.min(e), b.max(e)));
            format!(
                "; the one-device step timed beside each point: error {:+.1}% to {:+.1}%; step over it: MAPE {:.1}%",
                lo * 100.0,
                hi * 100.0,
                100.0 * relative.iter().sum::<f64>() / relative.len().max(1) as f64
            )
        };
        text.push_str(&format!(
            "{pred}: MAPE {:.1}% over {} points (mean signed error {:+.1}%, worst {:.1}%; measured p10-p90 spread, median over points {:.1}%{drift}); transfer bytes equal in {bytes_equal} of {}\n",
            mape * 100.0,
            rs.len(),
            bias * 100.0,
            worst * 100.0,
            spread_med * 100.0,
            rs.len()
        ));
        rows_out.push(vec![
            serde_json::json!(pred),
            serde_json::json!(rs.len()),
            serde_json::json!(round(mape * 100.0)),
            serde_json::json!(round(bias * 100.0)),
            serde_json::json!(round(worst * 100.0)),
            serde_json::json!(round(spread_med * 100.0)),
            serde_json::json!(format!("{bytes_equal} of {}", rs.len())),
        ]);
    }
    SummaryTable {
        title: "Prediction error per predictor".into(),
        columns: ["predictor", "points", "MAPE %", "mean signed error %", "worst |error| %", "measured spread %", "transfer bytes equal"]
            .map(String::from)
            .to_vec(),
        rows: rows_out,
        note: Some("error = (predicted - measured) / measured step time; spread = (p90 - p10) / median of the timed steps".into()),
    }
}

/// A warning line per model whose profile was taken at another host speed
/// (see [`profile_drift`]), and their table if there are any.
pub(super) fn drift_warnings(ok: &[&ResultRow], text: &mut String) -> Option<SummaryTable> {
    let drift = profile_drift(ok);
    for (model, median, points) in &drift {
        text.push_str(&format!(
            "warning: {model}: the profile's one-device step is {:+.0}% off the one-device step timed beside its {points} points (median): \
             the host's speed moved between profiling and measuring, so this model's absolute errors measure the host as well as the \
             simulator; its step over the one-device step (relative_error) does not depend on that\n",
            median * 100.0
        ));
    }
    if drift.is_empty() {
        return None;
    }
    Some(SummaryTable {
        title: "Profiles taken at another host speed".into(),
        columns: ["model", "profile's one-device step against the reference, median %", "points"].map(String::from).to_vec(),
        rows: drift.iter().map(|(m, e, n)| vec![serde_json::json!(m), serde_json::json!(round(e * 100.0)), serde_json::json!(n)]).collect(),
        note: Some(format!(
            "listed when the median is beyond {:.0}%: the host's speed moved between profiling and measuring, so these models' \
             absolute errors measure the host as well as the simulator; the step over the one-device step (relative_error) does not \
             depend on it",
            PROFILE_DRIFT_WARNING * 100.0
        )),
    })
}

/// Kendall's tau per group of points that differ only in the placer.
pub(super) fn tau_per_group(ok: &[&ResultRow], group_keys: &[&str], text: &mut String) -> SummaryTable {
    let mut groups: BTreeMap<Vec<String>, Vec<&ResultRow>> = BTreeMap::new();
    for r in ok {
        groups.entry(group_keys.iter().map(|k| param(r, k)).collect()).or_default().push(r);
    }
    let mut tau_rows = Vec::new();
    for (g, rs) in &groups {
        // Ranked by step time over the one-device step timed beside it, so
        // that the host's drift between points does not reorder them
        // (rows of older runs, without the reference, by step time).
        let relative = rs.iter().all(|r| r.metrics.contains_key("measured_relative"));
        let (median, low, high) = if relative {
            ("measured_relative", "measured_relative_p10", "measured_relative_p90")
        } else {
            ("measured_step_s", "measured_p10_s", "measured_p90_s")
        };
        let column = |k: &str| -> Vec<f64> { rs.iter().map(|r| r.metrics.get(k).copied().unwrap_or(f64::NAN)).collect() };
        let (m, p10, p90) = (column(median), column(low), column(high));
        let p = column("predicted_step_s");
        let tau = kendall_tau(&m, &p);
        let (rtau, resolved) = resolved_tau(&m, &p10, &p90, &p);
        let pairs = rs.len() * rs.len().saturating_sub(1) / 2;
        let label: Vec<String> = group_keys.iter().zip(g).filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k}={v}")).collect();
        if let Some(t) = tau {
            let r = rtau.map_or("none".to_string(), |t| format!("{t:+.2}"));
            text.push_str(&format!(
                "tau {t:+.2} over {} placements (over the {resolved} of {pairs} pairs the measurement orders: {r}): {}\n",
                rs.len(),
                label.join(" ")
            ));
        }
        let num = |t: Option<f64>| t.map_or(serde_json::Value::Null, |t| serde_json::json!(round(t)));
        tau_rows.push(vec![
            serde_json::json!(label.join(" ")),
            serde_json::json!(rs.len()),
            num(tau),
            serde_json::json!(format!("{resolved} of {pairs}")),
            num(rtau),
        ]);
    }
    SummaryTable {
        title: "Order of placements: Kendall's tau between measured and predicted step times".into(),
        columns: ["group", "placements", "tau", "pairs measured apart", "tau over those pairs"].map(String::from).to_vec(),
        rows: tau_rows,
        note: Some(
            "tau-b over the placers of each group; 1 = the simulator ranks the placements as the engine does. \
             Measured placements are ranked by their step time over the one-device step timed after each of \
             their steps (the host's speed drifts between points). A pair is measured apart when the p10-p90 \
             intervals of those ratios are disjoint; the last column is tau-a over those pairs only"
                .into(),
        ),
    }
}

/// The eight points with the largest error.
pub(super) fn worst_points(ok: &[&ResultRow]) -> SummaryTable {
    let mut worst: Vec<&&ResultRow> = ok.iter().collect();
    worst.sort_by(|a, b| b.metrics["abs_error"].total_cmp(&a.metrics["abs_error"]));
    let worst_rows = worst
        .iter()
        .take(8)
        .map(|r| {
            vec![
                serde_json::json!(r.index),
                serde_json::json!(param(r, "predictor")),
                serde_json::json!(param(r, "model")),
                serde_json::json!(param(r, "placer")),
                serde_json::json!(param(r, "comm")),
                serde_json::json!(format!("{}gbps", param(r, "link.gbps"))),
                serde_json::json!(round(r.metrics["measured_step_s"] * 1e3)),
                serde_json::json!(round(r.metrics["predicted_step_s"] * 1e3)),
                serde_json::json!(round(r.metrics["error"] * 100.0)),
            ]
        })
        .collect();
    SummaryTable {
        title: "Worst points".into(),
        columns: ["point", "predictor", "model", "placer", "comm", "link", "measured ms", "predicted ms", "error %"].map(String::from).to_vec(),
        rows: worst_rows,
        note: None,
    }
}

pub(super) fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

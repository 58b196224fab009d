//! A plot's subtitle: the settings the same in every point it draws, so that
//! a plot read alone says what it held fixed ("workers: 100, model:
//! resnet50, straggler.dist: none (default)"), defaults included.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::results::ResultRow;
use crate::spec::{PlotSpec, same_value};
use crate::summary::ResolvedConstants;

/// Characters per subtitle line at the chart's subtitle font.
const LINE_CHARS: usize = 128;
/// Lines at most; the rest is on the page's constants table.
const MAX_LINES: usize = 2;

/// The subtitle's lines: the plot's `where:` pins, then the kind's headline
/// settings (from `run.json`) fixed over the drawn points, then the other
/// keys written under the same heads (`straggler.sigma` beside
/// `straggler.dist`). Without `run.json`'s resolved values, the keys the
/// file writes that are fixed. Keys the plot draws are left out.
pub(crate) fn subtitle(spec: &PlotSpec, rows: &[ResultRow], resolved: Option<&ResolvedConstants>) -> Vec<String> {
    let drawn: Vec<&ResultRow> = rows.iter().filter(|r| r.error.is_none() && spec.keeps(&r.params)).collect();
    let Some(first) = drawn.first() else { return Vec::new() };
    let fixed: BTreeMap<&String, &Value> = first
        .params
        .iter()
        .filter(|(k, v)| drawn.iter().all(|r| r.params.get(*k).is_some_and(|w| same_value(w, v))))
        .collect();
    let used = |k: &str| {
        let axes = [Some(spec.y.as_str()), spec.x.as_deref(), spec.z.as_deref(), spec.series.as_deref()];
        axes.into_iter().flatten().chain(spec.pool.iter().map(String::as_str)).chain(spec.filter.keys().map(String::as_str)).any(|u| k == u || k.starts_with(&format!("{u}.")))
    };
    let mut parts: Vec<String> = spec.filter.iter().map(|(k, v)| format!("{k}: {}", text(v))).collect();
    let mut shown: Vec<String> = Vec::new();
    let mut show = |k: &str, v: &Value, default: bool, parts: &mut Vec<String>| {
        if !used(k) && !shown.iter().any(|s| s == k) {
            shown.push(k.to_string());
            parts.push(format!("{k}: {}{}", text(v), if default { " (default)" } else { "" }));
        }
    };
    match resolved {
        Some(r) => {
            for h in &r.headline {
                let named = format!("{h}.name");
                if let Some(v) = fixed.get(h) {
                    show(h, v, false, &mut parts);
                } else if let Some(v) = fixed.get(&named) {
                    show(h, v, false, &mut parts);
                } else if let (Some(v), true) = (r.values.get(h), r.unwritten.contains(h)) {
                    show(h, v, true, &mut parts);
                } else {
                    // A short map written for the key (`model: { zoo: resnet50 }`).
                    let prefix = format!("{h}.");
                    let under: Vec<(&&String, &&Value)> = fixed.iter().filter(|(k, _)| k.starts_with(&prefix)).collect();
                    if (1..=3).contains(&under.len()) {
                        for (k, v) in under {
                            show(k, v, false, &mut parts);
                        }
                    }
                }
                if let Some((head, _)) = h.split_once('.') {
                    let under = format!("{head}.");
                    for (k, v) in fixed.iter().filter(|(k, _)| k.starts_with(&under)) {
                        show(k, v, false, &mut parts);
                    }
                }
            }
        }
        None => {
            for (k, v) in &fixed {
                show(k, v, false, &mut parts);
            }
        }
    }
    wrap(&parts)
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// `parts` joined by ", " into lines of at most [`LINE_CHARS`], at most
/// [`MAX_LINES`] of them, the last ending in "…" when parts were left out.
fn wrap(parts: &[String]) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for (i, p) in parts.iter().enumerate() {
        let sep = if line.is_empty() { "" } else { ", " };
        if line.chars().count() + sep.len() + p.chars().count() <= LINE_CHARS || line.is_empty() {
            line += sep;
            line += p;
            continue;
        }
        lines.push(std::mem::take(&mut line) + ",");
        if lines.len() == MAX_LINES {
            let last = lines.pop().unwrap_or_default();
            let rest = parts.len() - i;
            lines.push(format!("{} … ({rest} more on the page)", last.trim_end_matches(',')));
            return lines;
        }
        line = p.clone();
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(params: Value) -> ResultRow {
        serde_json::from_value(serde_json::json!({ "index": 0, "key": "k", "seed": 0, "params": params })).unwrap()
    }

    #[test]
    fn names_fixed_headline_settings_and_marks_defaults() {
        let rows = [
            row(serde_json::json!({ "model": "resnet50", "workers": 100, "strategy.sync.backup": 0, "strategy": "sync", "straggler.dist": "lognormal", "straggler.sigma": 0.3, "steps": 50 })),
            row(serde_json::json!({ "model": "resnet50", "workers": 100, "strategy.sync.backup": 4, "strategy": "sync", "straggler.dist": "lognormal", "straggler.sigma": 0.3, "steps": 50 })),
        ];
        let spec: PlotSpec = serde_json::from_value(serde_json::json!({ "x": "strategy.sync.backup", "y": "step_p50_s" })).unwrap();
        let resolved = ResolvedConstants {
            values: [("comm", "f32"), ("network.topology", "star")].into_iter().map(|(k, v)| (k.to_string(), Value::from(v))).collect(),
            unwritten: ["comm".to_string(), "network.topology".to_string()].into_iter().collect(),
            headline: ["model", "workers", "strategy", "network.topology", "straggler.dist", "comm"].map(String::from).to_vec(),
        };
        let lines = subtitle(&spec, &rows, Some(&resolved));
        let mut zoo = rows[0].clone();
        zoo.params.remove("model");
        zoo.params.insert("model.zoo".into(), Value::from("resnet50"));
        assert!(subtitle(&spec, &[zoo], Some(&resolved))[0].starts_with("model.zoo: resnet50, workers: 100,"));
        assert_eq!(
            lines,
            ["model: resnet50, workers: 100, strategy: sync, network.topology: star (default), straggler.dist: lognormal, straggler.sigma: 0.3,", "comm: f32 (default)"]
        );
        // Without run.json: the fixed keys the file writes, the drawn ones left out.
        let lines = subtitle(&spec, &rows, None);
        assert_eq!(lines, ["model: resnet50, steps: 50, straggler.dist: lognormal, straggler.sigma: 0.3, strategy: sync, workers: 100"]);
    }

    #[test]
    fn a_where_slice_leads_and_long_lists_are_cut_with_a_count() {
        let mut params = serde_json::Map::new();
        for i in 0..40 {
            params.insert(format!("key_number_{i:02}"), Value::from(i));
        }
        params.insert("workers".into(), Value::from(25));
        let rows = [row(Value::Object(params))];
        let spec: PlotSpec = serde_json::from_value(serde_json::json!({ "x": "key_number_00", "y": "t", "where": { "workers": 25 } })).unwrap();
        let lines = subtitle(&spec, &rows, None);
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("workers: 25, key_number_01: 1,"), "{lines:?}");
        assert!(lines[1].ends_with("more on the page)"), "{lines:?}");
        assert!(lines.iter().all(|l| l.chars().count() <= LINE_CHARS + 30), "{lines:?}");
    }
}

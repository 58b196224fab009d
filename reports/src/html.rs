//! The report page: one self-contained HTML file (inline CSS, the plots as
//! inline SVG, a few lines of inline script to sort the table) with the run's
//! facts (date, version, command, wall time), every plot, the summary tables
//! a kind provides (`summary.json`), the results table (swept keys and
//! metrics first, constant parameters in a collapsed block) and the
//! experiment file.

use std::collections::BTreeSet;
use std::fmt::Write;

use crate::cell::format_number;
use crate::results::ResultRow;

/// One plot as the page shows it.
pub(crate) struct PagePlot {
    pub title: String,
    pub png_name: String,
    pub svg_name: String,
    /// The SVG's text, inlined so that the page alone is the whole report.
    pub svg: String,
    /// How repeated runs are summarised, when the plot has any.
    pub note: Option<String>,
}

/// What the page is made of.
pub(crate) struct Page<'a> {
    pub name: &'a str,
    pub experiment_text: &'a str,
    pub rows: &'a [ResultRow],
    pub plots: &'a [PagePlot],
    /// Whether the results file ended in a torn line that was ignored.
    pub torn_tail: bool,
    /// What the last run recorded about itself (`run.json`), if anything.
    pub run_info: Option<&'a crate::summary::RunInfo>,
    /// Tables a kind wrote beside its results (`summary.json`).
    pub summaries: &'a [crate::summary::SummaryTable],
    /// Keys the plots draw, in plot order: the results table's metric
    /// columns start with these.
    pub plotted: &'a [String],
}

/// Escapes text for HTML element content and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:1100px;padding:0 1rem;color:#222}
h1{margin-bottom:.2rem}h2{margin-top:2.5rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
.summary{color:#555}.summary .bad{color:#b00020;font-weight:600}
figure{margin:1.5rem 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{color:#555;font-size:.9rem}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:.85rem;white-space:nowrap}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:right}
th{background:#f4f4f4;cursor:pointer;position:sticky;top:0}th[data-dir=up]::after{content:' \\25B2'}th[data-dir=down]::after{content:' \\25BC'}
.facts{color:#444;font-size:.9rem}.facts code{background:#f4f4f4;padding:0 .25rem}
figure svg{max-width:100%;height:auto;border:1px solid #eee}details{margin:.8rem 0}
td.text{text-align:left}tr.default td{color:#555;font-style:italic}tr.failed td{background:#fff0f0}td.error{color:#b00020;text-align:left;white-space:normal;min-width:16rem;max-width:28rem}
pre{background:#f7f7f7;border:1px solid #e4e4e4;padding:1rem;overflow-x:auto}";

const SORT_SCRIPT: &str = "\
document.querySelectorAll('table.sortable th').forEach(function(th,col){
th.title='click to sort';th.addEventListener('click',function(){
var body=th.closest('table').tBodies[0],rows=Array.from(body.rows);
var up=th.dataset.dir!=='up';th.dataset.dir=up?'up':'down';
function key(r){var c=r.cells[col];return c?(c.dataset.v!==undefined?c.dataset.v:c.textContent):'';}
rows.sort(function(a,b){var x=key(a),y=key(b),nx=parseFloat(x),ny=parseFloat(y);
var d=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);return up?d:-d;});
rows.forEach(function(r){body.appendChild(r);});});});";

/// The whole page.
pub(crate) fn page(p: &Page<'_>) -> String {
    let mut h = String::new();
    let name = escape(p.name);
    let failed = p.rows.iter().filter(|r| r.error.is_some()).count();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>flowlab report: {name}</title>\n<style>\n{STYLE}\n</style>\n</head>\n<body>\n\
         <h1>{name}</h1>\n<p class=\"summary\">{} result points",
        p.rows.len()
    );
    if failed > 0 {
        let _ = write!(h, ", <span class=\"bad\">{failed} failed</span> (left out of the plots, shown in the table)");
    }
    h.push('.');
    if p.torn_tail {
        h.push_str(" The results file ended in an incomplete line (an interrupted run); it was ignored.");
    }
    h.push_str("</p>\n");
    if let Some(info) = p.run_info {
        let _ = writeln!(
            h,
            "<p class=\"facts\">Run {} UTC with flowlab {}{}: <code>{}</code>; wall time {} s ({} runs ran, {} resumed).</p>",
            escape(&info.date),
            escape(&info.version),
            if info.commit.is_empty() { String::new() } else { format!(" ({} build of {})", escape(&info.profile), escape(&info.commit)) },
            escape(&info.command),
            format_number(info.wall_s),
            info.ran,
            info.resumed
        );
        if let Some(c) = &info.calibration {
            let fitted: Vec<String> = c
                .fitted
                .iter()
                .map(|(k, v)| {
                    let range = c.ranges.get(k).map(|r| format!(" (searched {}..{})", format_number(r[0]), format_number(r[1])));
                    format!("<code>{}</code> = {}{}", escape(k), format_number(*v), range.unwrap_or_default())
                })
                .collect();
            let _ = writeln!(
                h,
                "<p class=\"facts\">Calibrated before the sweep on {} reference points by {} ({}; {} evaluations, loss {}): {}.</p>",
                c.points,
                escape(&c.method),
                escape(&c.objective),
                c.evaluations,
                format_number(c.loss),
                fitted.join(", ")
            );
        }
    }

    h.push_str("<h2>Plots</h2>\n");
    if p.plots.is_empty() {
        h.push_str("<p>The experiment file lists no plots.</p>\n");
    }
    for plot in p.plots {
        let (title, png, svg) = (escape(&plot.title), escape(&plot.png_name), escape(&plot.svg_name));
        let note = plot.note.as_deref().map(|n| format!(" ({})", escape(n))).unwrap_or_default();
        let inline = plot.svg.find("<svg").map_or("", |i| &plot.svg[i..]);
        let _ = writeln!(
            h,
            "<figure>{inline}\
             <figcaption>{title}{note} &middot; <a href=\"{png}\">PNG</a> &middot; <a href=\"{svg}\">SVG</a></figcaption></figure>"
        );
    }

    for t in p.summaries {
        let _ = write!(h, "<h2>{}</h2>\n<div class=\"scroll\"><table class=\"sortable\">\n<thead><tr>", escape(&t.title));
        for c in &t.columns {
            let _ = write!(h, "<th>{}</th>", escape(c));
        }
        h.push_str("</tr></thead>\n<tbody>\n");
        for r in &t.rows {
            h.push_str("<tr>");
            for cell in r {
                match cell {
                    serde_json::Value::Number(n) => {
                        let v = n.as_f64().unwrap_or(f64::NAN);
                        let _ = write!(h, "<td data-v=\"{n}\">{}</td>", format_number(v));
                    }
                    serde_json::Value::String(s) => {
                        let _ = write!(h, "<td class=\"text\">{}</td>", escape(s));
                    }
                    serde_json::Value::Null => h.push_str("<td></td>"),
                    other => {
                        let _ = write!(h, "<td class=\"text\">{}</td>", escape(&other.to_string()));
                    }
                }
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</tbody></table></div>\n");
        if let Some(note) = &t.note {
            let _ = writeln!(h, "<p class=\"facts\">{}</p>", escape(note));
        }
    }

    h.push_str("<h2>Results</h2>\n");
    table(&mut h, p.rows, p.run_info.and_then(|i| i.resolved.as_ref()), p.plotted);

    let _ = write!(
        h,
        "<h2>Experiment file</h2>\n<pre>{}</pre>\n<script>\n{SORT_SCRIPT}\n</script>\n</body>\n</html>\n",
        escape(p.experiment_text)
    );
    h
}

/// The parameters the same in every run: those the file writes, then (from
/// `run.json`) those it leaves to defaults or that a written key resolved
/// to, each marked so.
fn constants_table(h: &mut String, written: &[&String], first: &ResultRow, resolved: Option<&crate::summary::ResolvedConstants>) {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    let unwritten: Vec<(&String, &serde_json::Value)> =
        resolved.map_or_else(Vec::new, |r| r.values.iter().filter(|(k, _)| r.unwritten.contains(*k)).collect());
    if written.is_empty() && unwritten.is_empty() {
        return;
    }
    let _ = write!(h, "<details><summary>{} parameters the same in every run", written.len() + unwritten.len());
    if !unwritten.is_empty() {
        let _ = write!(h, " ({} of them not written in the file: defaults, or resolved from a key it writes)", unwritten.len());
    }
    h.push_str("</summary><table>");
    for k in written {
        let v = first.params.get(*k).map(text).unwrap_or_default();
        let _ = write!(h, "<tr><td class=\"text\">{}</td><td class=\"text\">{}</td><td></td></tr>", escape(k), escape(&v));
    }
    for (k, v) in unwritten {
        let origin = match written.iter().find(|w| k.starts_with(&format!("{w}."))) {
            Some(w) => format!("from <code>{}</code>", escape(w)),
            None => "default".to_string(),
        };
        let _ = write!(h, "<tr class=\"default\"><td class=\"text\">{}</td><td class=\"text\">{}</td><td class=\"text\">{origin}</td></tr>", escape(k), escape(&text(v)));
    }
    h.push_str("</table></details>\n");
}

fn table(h: &mut String, rows: &[ResultRow], resolved: Option<&crate::summary::ResolvedConstants>, plotted: &[String]) {
    // Swept parameters (values that differ between rows) first; the others
    // are the same everywhere and go in a collapsed block above the table.
    let all: BTreeSet<&String> = rows.iter().flat_map(|r| r.params.keys()).collect();
    let first = rows.first();
    let varies = |k: &String| rows.iter().any(|r| r.params.get(k) != first.and_then(|f| f.params.get(k)));
    let params: Vec<&String> = all.iter().copied().filter(|k| varies(k)).collect();
    let constants: Vec<&String> = all.iter().copied().filter(|k| !varies(k)).collect();
    if let Some(first) = first {
        constants_table(h, &constants, first, resolved);
    }
    // Metrics the plots draw first, in plot order; then the rest by name.
    let names: BTreeSet<&String> = rows.iter().flat_map(|r| r.metrics.keys()).collect();
    let mut metrics: Vec<&String> = Vec::new();
    for k in plotted.iter().chain(names.iter().copied()) {
        if names.contains(k) && !metrics.contains(&k) {
            metrics.push(k);
        }
    }
    let has_series = rows.iter().any(|r| !r.series.is_empty());
    let any_error = rows.iter().any(|r| r.error.is_some());
    h.push_str("<div class=\"scroll\"><table class=\"sortable\">\n<thead><tr><th>index</th>");
    if any_error {
        h.push_str("<th>error</th>");
    }
    h.push_str("<th>seed</th>");
    for k in params.iter().chain(metrics.iter()) {
        let _ = write!(h, "<th>{}</th>", escape(k));
    }
    if has_series {
        h.push_str("<th>series (samples)</th>");
    }
    h.push_str("<th>elapsed_s</th></tr></thead>\n<tbody>\n");
    let mut sorted: Vec<&ResultRow> = rows.iter().collect();
    sorted.sort_by_key(|r| r.index);
    for r in sorted {
        let class = if r.error.is_some() { " class=\"failed\"" } else { "" };
        let _ = write!(h, "<tr{class}><td>{}</td>", r.index);
        if any_error {
            match &r.error {
                Some(e) => {
                    let _ = write!(h, "<td class=\"error\">{}</td>", escape(e));
                }
                None => h.push_str("<td></td>"),
            }
        }
        let _ = write!(h, "<td>{}</td>", r.seed);
        for k in &params {
            match r.params.get(*k) {
                Some(serde_json::Value::Number(n)) => {
                    let v = n.as_f64().unwrap_or(f64::NAN);
                    let _ = write!(h, "<td data-v=\"{n}\">{}</td>", format_number(v));
                }
                Some(serde_json::Value::String(s)) => {
                    let _ = write!(h, "<td class=\"text\">{}</td>", escape(s));
                }
                Some(v) => {
                    let _ = write!(h, "<td class=\"text\">{}</td>", escape(&v.to_string()));
                }
                None => h.push_str("<td></td>"),
            }
        }
        for k in &metrics {
            match r.metrics.get(*k) {
                Some(v) => {
                    let _ = write!(h, "<td data-v=\"{v}\">{}</td>", format_number(*v));
                }
                None => h.push_str("<td></td>"),
            }
        }
        if has_series {
            let names: Vec<String> = r
                .series
                .iter()
                .map(|(k, v)| format!("{} ({})", escape(k), v.len()))
                .collect();
            let _ = write!(h, "<td class=\"text\">{}</td>", names.join(", "));
        }
        let _ = write!(h, "<td data-v=\"{}\">{}</td>", r.elapsed_s, format_number(r.elapsed_s));
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table></div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_characters() {
        assert_eq!(
            escape(r#"a < b && c > "d" 'e'"#),
            "a &lt; b &amp;&amp; c &gt; &quot;d&quot; &#39;e&#39;"
        );
    }

    #[test]
    fn table_shows_params_metrics_and_errors_in_index_order() {
        let rows: Vec<ResultRow> = [
            r#"{"index":1,"key":"b","seed":7,"params":{"model":"<m>"},"metrics":{},"error":"died <here>","elapsed_s":0.25}"#,
            r#"{"index":0,"key":"a","seed":6,"params":{"model":"x","workers":25},"metrics":{"throughput":12.5},"elapsed_s":1}"#,
        ]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
        let mut h = String::new();
        table(&mut h, &rows, None, &[]);
        // `workers` is set in one row only: it varies. `model` too.
        assert!(h.contains("<th>index</th><th>error</th><th>seed</th><th>model</th><th>workers</th><th>throughput</th><th>elapsed_s</th>"), "{h}");
        let first = h.find("<tr><td>0</td><td></td>").unwrap();
        let second = h.find("<tr class=\"failed\"><td>1</td><td class=\"error\">died &lt;here&gt;</td>").unwrap();
        assert!(first < second);
        assert!(h.contains("<td data-v=\"12.5\">12.5</td>"));
        assert!(h.contains("<td class=\"text\">&lt;m&gt;</td>"));
        assert!(h.contains("<td class=\"error\">died &lt;here&gt;</td>"));
    }

    #[test]
    fn plotted_metrics_lead_and_unwritten_constants_are_marked() {
        let rows: Vec<ResultRow> = [
            r#"{"index":0,"key":"a","seed":1,"params":{"model":"m","workers":1},"metrics":{"a_first":1,"step_p50_s":2,"throughput":3},"elapsed_s":1}"#,
            r#"{"index":1,"key":"b","seed":2,"params":{"model":"m","workers":2},"metrics":{"a_first":1,"step_p50_s":2,"throughput":3},"elapsed_s":1}"#,
        ]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
        let resolved = crate::summary::ResolvedConstants {
            values: [("model.compute_s", serde_json::json!(1.5)), ("steps", serde_json::json!(200)), ("model", serde_json::json!("m"))]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            unwritten: ["model.compute_s".to_string(), "steps".to_string()].into_iter().collect(),
            headline: Vec::new(),
        };
        let mut h = String::new();
        table(&mut h, &rows, Some(&resolved), &["throughput".to_string(), "workers".to_string()]);
        assert!(h.contains("<th>workers</th><th>throughput</th><th>a_first</th><th>step_p50_s</th>"), "{h}");
        assert!(h.contains("3 parameters the same in every run (2 of them not written in the file"), "{h}");
        assert!(h.contains("<td class=\"text\">model.compute_s</td><td class=\"text\">1.5</td><td class=\"text\">from <code>model</code></td>"), "{h}");
        assert!(h.contains("<td class=\"text\">steps</td><td class=\"text\">200</td><td class=\"text\">default</td>"), "{h}");
    }
}

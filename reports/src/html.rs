//! The report page: one self-contained HTML file (inline CSS and a few lines
//! of inline script to sort the table) with every plot, the results table and
//! the experiment file. Plots are `<img>` of the PNG beside the page, linked
//! to the SVG.

use std::collections::BTreeSet;
use std::fmt::Write;

use crate::cell::format_number;
use crate::results::ResultRow;

/// One plot as the page shows it.
pub(crate) struct PagePlot {
    pub title: String,
    pub png_name: String,
    pub svg_name: String,
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
th{background:#f4f4f4;cursor:pointer;position:sticky;top:0}
td.text{text-align:left}tr.failed td{background:#fff0f0}td.error{color:#b00020;text-align:left;white-space:normal;min-width:16rem}
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

    h.push_str("<h2>Plots</h2>\n");
    if p.plots.is_empty() {
        h.push_str("<p>The experiment file lists no plots.</p>\n");
    }
    for plot in p.plots {
        let (title, png, svg) = (escape(&plot.title), escape(&plot.png_name), escape(&plot.svg_name));
        let note = plot.note.as_deref().map(|n| format!(" ({})", escape(n))).unwrap_or_default();
        let _ = writeln!(
            h,
            "<figure><a href=\"{svg}\"><img src=\"{png}\" alt=\"{title}\" width=\"1000\" height=\"620\"></a>\
             <figcaption>{title}{note} &middot; <a href=\"{png}\">PNG</a> &middot; <a href=\"{svg}\">SVG</a></figcaption></figure>"
        );
    }

    h.push_str("<h2>Results</h2>\n");
    table(&mut h, p.rows);

    let _ = write!(
        h,
        "<h2>Experiment file</h2>\n<pre>{}</pre>\n<script>\n{SORT_SCRIPT}\n</script>\n</body>\n</html>\n",
        escape(p.experiment_text)
    );
    h
}

fn table(h: &mut String, rows: &[ResultRow]) {
    let params: BTreeSet<&String> = rows.iter().flat_map(|r| r.params.keys()).collect();
    let metrics: BTreeSet<&String> = rows.iter().flat_map(|r| r.metrics.keys()).collect();
    let has_series = rows.iter().any(|r| !r.series.is_empty());
    h.push_str("<div class=\"scroll\"><table class=\"sortable\">\n<thead><tr><th>index</th><th>seed</th>");
    for k in params.iter().chain(metrics.iter()) {
        let _ = write!(h, "<th>{}</th>", escape(k));
    }
    if has_series {
        h.push_str("<th>series (samples)</th>");
    }
    h.push_str("<th>elapsed_s</th><th>error</th></tr></thead>\n<tbody>\n");
    let mut sorted: Vec<&ResultRow> = rows.iter().collect();
    sorted.sort_by_key(|r| r.index);
    for r in sorted {
        let class = if r.error.is_some() { " class=\"failed\"" } else { "" };
        let _ = write!(h, "<tr{class}><td>{}</td><td>{}</td>", r.index, r.seed);
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
        match &r.error {
            Some(e) => {
                let _ = write!(h, "<td class=\"error\">{}</td>", escape(e));
            }
            None => h.push_str("<td></td>"),
        }
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
        table(&mut h, &rows);
        assert!(h.contains("<th>index</th><th>seed</th><th>model</th><th>workers</th><th>throughput</th><th>elapsed_s</th><th>error</th>"), "{h}");
        let first = h.find("<tr><td>0</td>").unwrap();
        let second = h.find("<tr class=\"failed\"><td>1</td>").unwrap();
        assert!(first < second);
        assert!(h.contains("<td data-v=\"12.5\">12.5</td>"));
        assert!(h.contains("<td class=\"text\">&lt;m&gt;</td>"));
        assert!(h.contains("<td class=\"error\">died &lt;here&gt;</td>"));
    }
}

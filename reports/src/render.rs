//! `render(dir)`: the whole report of one experiment output folder, rebuilt
//! from `experiment.yaml` and `results.jsonl` alone.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::chart::draw_files;
use crate::error::ReportError;
use crate::experiment::ExperimentHeader;
use crate::html::{Page, PagePlot, page};
use crate::prepare::{ChartData, prepare};
use crate::results::read_results_file;
use crate::spec::{PlotSpec, Reference};
use crate::summary::{RUN_INFO_FILE, ReferenceCheck, RunInfo, SummaryTable, read_optional, read_summary};

/// The files one `render` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedReport {
    /// `<dir>/index.html`.
    pub index_html: PathBuf,
    /// For each plot, in the experiment file's order: its PNG, then its SVG.
    pub plots: Vec<PathBuf>,
}

/// Reads `<dir>/experiment.yaml` (its `name` and `plots`) and
/// `<dir>/results.jsonl`, writes `<dir>/<stem>.png` and `.svg` per plot and
/// `<dir>/index.html`. Points that failed are left out of the plots and shown
/// in the table. Nothing is written unless every plot can be prepared.
pub fn render(dir: &Path) -> Result<RenderedReport, ReportError> {
    let exp_path = dir.join("experiment.yaml");
    let results_path = dir.join("results.jsonl");
    let experiment_text =
        std::fs::read_to_string(&exp_path).map_err(|e| ReportError::io(&exp_path, e))?;
    let header = ExperimentHeader::parse(&exp_path, &experiment_text)?;
    let results = read_results_file(&results_path)?;

    let mut prepared = Vec::with_capacity(header.plots.len());
    for spec in &header.plots {
        prepared.push(prepare(spec, &results.rows, &results_path)?);
    }

    let run_info: Option<RunInfo> = read_optional(dir, RUN_INFO_FILE)?;
    let resolved = run_info.as_ref().and_then(|i| i.resolved.as_ref());
    let mut taken = HashSet::new();
    let mut files = Vec::new();
    let mut page_plots = Vec::new();
    for (spec, data) in header.plots.iter().zip(&prepared) {
        let stem = unique_stem(&spec.stem(), &mut taken);
        let refs: Vec<&Reference> = header.reference.iter().filter(|r| r.fits(spec)).collect();
        let subtitle = crate::subtitle::subtitle(spec, &results.rows, resolved);
        let [png, svg] = draw_files(spec, data, &refs, &subtitle, dir, &stem)?;
        let svg_text = std::fs::read_to_string(&svg).map_err(|e| ReportError::io(&svg, e))?;
        page_plots.push(PagePlot {
            svg: svg_text,
            title: spec.title.clone().unwrap_or_else(|| crate::chart::default_title(spec)),
            png_name: format!("{stem}.png"),
            svg_name: format!("{stem}.svg"),
            note: join_notes(repeats_note(spec, data), reference_note(&refs)),
        });
        files.push(png);
        files.push(svg);
    }

    let summary = read_summary(dir)?;
    let mut summaries: Vec<SummaryTable> = Vec::new();
    if !summary.references.is_empty() {
        summaries.push(ReferenceCheck::table(&summary.references));
    }
    summaries.extend(summary.tables);
    let index_html = dir.join("index.html");
    let html = page(&Page {
        run_info: run_info.as_ref(),
        summaries: &summaries,
        name: &header.name,
        experiment_text: &experiment_text,
        rows: &results.rows,
        plots: &page_plots,
        torn_tail: results.torn_tail,
        plotted: &plotted_keys(&header.plots),
    });
    flowlab_files::write_atomic(&index_html, html.as_bytes()).map_err(|e| ReportError::io(&index_html, e))?;
    Ok(RenderedReport {
        index_html,
        plots: files,
    })
}

/// How a plot summarises repeated runs (and the parameters it pools on
/// purpose), for its caption.
fn repeats_note(spec: &crate::spec::PlotSpec, data: &ChartData) -> Option<String> {
    let what = if spec.pool.is_empty() {
        "repeated runs".to_string()
    } else {
        let keys: Vec<String> = spec.pool.iter().map(|k| format!("`{k}`")).collect();
        format!("runs pooled over {} (and repeats)", keys.join(", "))
    };
    match data {
        ChartData::Line(d) | ChartData::Bar(d) if d.has_repeats() => {
            Some(format!("mean of {what}; error bars span min..max"))
        }
        ChartData::Heat(d) if d.cells.iter().flatten().flatten().any(|s| s.n > 1) => {
            Some(format!("colour: mean of {what}"))
        }
        ChartData::Cdf(_) => Some(format!("samples pooled over {what}")),
        ChartData::Scatter(_) => Some("one marker per run; runs are not averaged".to_string()),
        _ => None,
    }
}

/// Names the sources of the reference points a plot shows.
fn reference_note(refs: &[&Reference]) -> Option<String> {
    if refs.is_empty() {
        return None;
    }
    let mut sources: Vec<&str> = refs.iter().map(|r| r.source.as_str()).collect();
    sources.dedup();
    if sources.len() == 1 {
        return Some(format!("reference points from {}", sources[0]));
    }
    let parts: Vec<String> = refs.iter().map(|r| format!("{}: {}", r.label(), r.source)).collect();
    Some(format!("reference points from {}", parts.join("; ")))
}

/// The metrics the plots draw (y, then z), each once, in plot order.
fn plotted_keys(plots: &[PlotSpec]) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for k in plots.iter().flat_map(|p| std::iter::once(&p.y).chain(p.z.as_ref())) {
        if !keys.contains(k) {
            keys.push(k.clone());
        }
    }
    keys
}

fn join_notes(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    }
}

/// `stem`, or `stem-2`, `stem-3`, ... if an earlier plot already has it.
fn unique_stem(stem: &str, taken: &mut HashSet<String>) -> String {
    let mut candidate = stem.to_string();
    let mut n = 1;
    while !taken.insert(candidate.clone()) {
        n += 1;
        candidate = format!("{stem}-{n}");
    }
    candidate
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const EXPERIMENT: &str = "\
# Backup workers <study> & friends: \"sync\" vs 'async'
name: backup-workers
kind: cluster
seed: 42
base: { workers: 50, strategy: { sync: { backup: 0 } } }
sweep:
  workers: [25, 50, 100, 200]
  strategy.sync.backup: [0, 2]
plots:
  - { x: workers, y: throughput, series: strategy.sync.backup, pool: [model] }
  - { kind: cdf, y: step_time_s, series: strategy.sync.backup, pool: [model, workers, array] }
  - { kind: bar, x: model, y: throughput, series: strategy.sync.backup, title: Throughput per model, pool: [workers, array] }
  - { kind: heatmap, x: array, y: dataflow, z: utilization, pool: [model] }
  - { x: workers, y: throughput, log_x: true, log_y: true, pool: [model, strategy, dataflow] }
";

    /// Rows for every plot above: two seeds per point (repeats), one failed
    /// point, and a torn last line.
    fn results_text() -> String {
        let mut lines = Vec::new();
        let mut index = 0u64;
        for (wi, workers) in [25u32, 50, 100, 200].into_iter().enumerate() {
            for backup in [0u32, 2] {
                for seed in 0..2u64 {
                    let model = ["inception_v3", "lstm"][(wi + seed as usize) % 2];
                    let array = [8, 16, 32, 64][wi];
                    let dataflow = ["os", "ws"][backup as usize / 2];
                    let throughput = workers as f64 * (20.0 + 3.0 * backup as f64) * (1.0 - workers as f64 / 800.0)
                        + seed as f64 * 40.0;
                    let steps: Vec<f64> = (0..50)
                        .map(|k| 1.0 + backup as f64 * -0.1 + (k as f64 * 0.37 + seed as f64).sin().abs() * 0.6)
                        .collect();
                    let mut row = json!({
                        "index": index, "key": format!("{index:04x}"), "seed": 1000 + index,
                        "params": {"workers": workers, "strategy.sync.backup": backup, "model": model,
                                   "array": array, "dataflow": dataflow},
                        "metrics": {"throughput": throughput, "utilization": 0.9 - 0.1 * wi as f64 - 0.05 * backup as f64},
                        "series": {"step_time_s": steps},
                        "error": null, "elapsed_s": 0.01 * index as f64,
                    });
                    if index == 5 {
                        row["metrics"] = json!({});
                        row["series"] = json!({});
                        row["error"] = json!("simulated <failure> & co");
                    }
                    lines.push(row.to_string());
                    index += 1;
                }
            }
        }
        let torn = &lines[0].clone()[..30];
        format!("{}\n{torn}", lines.join("\n"))
    }

    fn fixture(experiment: &str, results: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("experiment.yaml"), experiment).unwrap();
        std::fs::write(dir.path().join("results.jsonl"), results).unwrap();
        dir
    }

    /// (width, height, pixels that differ from the white background).
    fn png_ink(path: &Path) -> (u32, u32, usize) {
        let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let channels = info.color_type.samples();
        let ink = buf[..info.buffer_size()]
            .chunks(channels)
            .filter(|px| px[..3] != [255, 255, 255])
            .count();
        (info.width, info.height, ink)
    }

    #[test]
    fn renders_every_chart_kind_and_the_page() {
        let dir = fixture(EXPERIMENT, &results_text());
        let report = render(dir.path()).unwrap();
        let names: Vec<String> = report
            .plots
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "line-throughput-vs-workers.png",
                "line-throughput-vs-workers.svg",
                "cdf-step_time_s.png",
                "cdf-step_time_s.svg",
                "bar-throughput-vs-model.png",
                "bar-throughput-vs-model.svg",
                "heatmap-utilization-over-array-dataflow.png",
                "heatmap-utilization-over-array-dataflow.svg",
                "line-throughput-vs-workers-2.png",
                "line-throughput-vs-workers-2.svg",
            ]
        );
        for png in report.plots.iter().filter(|p| p.extension().unwrap() == "png") {
            let (w, h, ink) = png_ink(png);
            assert_eq!((w, h), (crate::chart::WIDTH, crate::chart::HEIGHT));
            // Axes, labels and data: well over 2% of the picture is not background.
            assert!(ink > (w * h / 50) as usize, "{}: only {ink} non-white pixels", png.display());
        }
        let svg = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        let line = svg("line-throughput-vs-workers.svg");
        for label in ["backup workers", "\n0\n", "\n2\n", "throughput vs workers", "min..max"] {
            assert!(line.contains(label), "line svg lacks {label}");
        }
        let cdf = svg("cdf-step_time_s.svg");
        for label in ["CDF of step time", "step time (s)", "backup workers", "\n0\n", "\n2\n"] {
            assert!(cdf.contains(label), "cdf svg lacks {label}");
        }
        let bar = svg("bar-throughput-vs-model.svg");
        for label in ["Throughput per model", "inception_v3", "lstm", "model"] {
            assert!(bar.contains(label), "bar svg lacks {label}");
        }
        let heat = svg("heatmap-utilization-over-array-dataflow.svg");
        for label in ["PE utilization by array", "PE utilization", "\nos\n", "\nws\n", "\n64\n", "\n0.9\n", "dataflow"] {
            assert!(heat.contains(label), "heatmap svg lacks {label}");
        }

        let html = std::fs::read_to_string(&report.index_html).unwrap();
        for name in &names {
            assert!(html.contains(&format!("\"{name}\"")), "page does not reference {name}");
        }
        // The plots are inline: the page alone is the report.
        assert_eq!(html.matches("<svg").count(), 5);
        assert!(!html.contains("<img"));
        assert!(html.contains(
            "# Backup workers &lt;study&gt; &amp; friends: &quot;sync&quot; vs &#39;async&#39;"
        ));
        assert!(!html.contains("<study>"));
        assert!(html.contains("<td class=\"error\">simulated &lt;failure&gt; &amp; co</td>"));
        assert!(html.contains("16 result points, <span class=\"bad\">1 failed</span>"));
        assert!(html.contains("incomplete line"));
        assert!(html.contains("(mean of runs pooled over `model` (and repeats); error bars span min..max)"), "{html}");
        // Header row plus 16 result rows, and the collapsed constants (none here: every key varies).
        assert_eq!(html.matches("<tr").count(), 17, "header row plus 16 result rows");
        assert!(!html.contains("<details>"));
    }

    #[test]
    fn run_facts_and_a_kinds_summary_table_show_on_the_page() {
        let dir = fixture(EXPERIMENT, &results_text());
        let info = RunInfo {
            date: crate::summary::utc_date(1_795_555_805),
            version: "0.1.0".into(),
            commit: "0123abc".into(),
            profile: "release".into(),
            command: "flowlab run x.yaml --jobs 2".into(),
            wall_s: 12.5,
            ran: 16,
            resumed: 0,
            calibration: None,
            resolved: None,
        };
        crate::summary::write_run_info(dir.path(), &info).unwrap();
        let table = SummaryTable {
            title: "Prediction error".into(),
            columns: vec!["predictor".into(), "MAPE (%)".into(), "Kendall tau".into()],
            rows: vec![vec![json!("roofline"), json!(12.25), json!(0.8)], vec![json!("profile <measured>"), json!(3.5), json!(null)]],
            note: Some("against the engine's measured steps".into()),
        };
        crate::summary::write_summary(dir.path(), &crate::summary::Summary { references: vec![], tables: vec![table] }).unwrap();
        let report = render(dir.path()).unwrap();
        let html = std::fs::read_to_string(&report.index_html).unwrap();
        assert!(html.contains("Run 2026-11-24 21:30:05 UTC with flowlab 0.1.0 (release build of 0123abc): <code>flowlab run x.yaml --jobs 2</code>; wall time 12.5 s (16 runs ran, 0 resumed)."), "{html}");
        assert!(html.contains("<h2>Prediction error</h2>"));
        assert!(html.contains("<th>predictor</th><th>MAPE (%)</th><th>Kendall tau</th>"));
        assert!(html.contains("<td class=\"text\">profile &lt;measured&gt;</td><td data-v=\"3.5\">3.5</td><td></td>"));
        assert!(html.contains("against the engine&#39;s measured steps"));
        // A malformed summary is an error naming the file, not a silent gap.
        std::fs::write(dir.path().join(crate::summary::SUMMARY_FILE), "{").unwrap();
        let err = render(dir.path()).unwrap_err().to_string();
        assert!(err.starts_with(&dir.path().join(crate::summary::SUMMARY_FILE).display().to_string()), "{err}");
    }

    #[test]
    fn reference_points_are_drawn_on_line_plots_of_their_x_and_y_only() {
        let exp = format!(
            "{EXPERIMENT}reference:\n  - {{ source: \"Paper, Figure 8\", label: published, x: workers, y: throughput, points: [[100, 4000], [400, 9000]] }}\n"
        );
        let dir = fixture(&exp, &results_text());
        let report = render(dir.path()).unwrap();
        let svg = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        let line = svg("line-throughput-vs-workers.svg");
        assert!(line.contains("published"), "legend lacks the reference");
        // x = 400 lies beyond the simulated 25..200: the axis grows to show it.
        assert!(line.contains("\n400\n"), "x axis does not reach the reference point");
        assert!(!svg("bar-throughput-vs-model.svg").contains("published"));
        assert!(!svg("cdf-step_time_s.svg").contains("published"));
        let html = std::fs::read_to_string(&report.index_html).unwrap();
        assert!(html.contains("reference points from Paper, Figure 8"), "{html}");
    }

    #[test]
    fn bad_line_in_the_middle_is_an_error_naming_the_line() {
        let mut lines: Vec<String> = results_text().lines().map(str::to_string).collect();
        lines[3] = "{\"index\": 3, \"key\": ".to_string();
        let dir = fixture(EXPERIMENT, &lines.join("\n"));
        let err = render(dir.path()).unwrap_err();
        let path = dir.path().join("results.jsonl");
        assert_eq!(
            err.to_string(),
            format!(
                "{}:4: not a valid result row: EOF while parsing a value at line 1 column 19",
                path.display()
            )
        );
        assert!(!dir.path().join("index.html").exists());
    }

    #[test]
    fn plot_with_unknown_key_lists_the_available_keys() {
        let exp = "name: t\nplots:\n  - { x: workers, y: throughput, series: backups }\n";
        let dir = fixture(exp, &results_text());
        let err = render(dir.path()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{}: plot `line throughput vs workers`: key `backups` (series) is in no result row; \
                 available keys: array, dataflow, model, strategy.sync.backup, throughput, utilization, workers",
                dir.path().join("results.jsonl").display()
            )
        );
    }

    #[test]
    fn missing_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = render(dir.path()).unwrap_err().to_string();
        let path = dir.path().join("experiment.yaml");
        assert!(err.starts_with(&format!("{}: ", path.display())), "{err}");
        std::fs::write(&path, "name: t\n").unwrap();
        let err = render(dir.path()).unwrap_err().to_string();
        let path = dir.path().join("results.jsonl");
        assert!(err.starts_with(&format!("{}: ", path.display())), "{err}");
    }

    #[test]
    fn crowded_charts_turn_labels_and_shorten_the_legend() {
        // 14 long categories and 30 series: labels must turn, the legend must
        // end in "... and N more" instead of running off the picture.
        let mut lines = Vec::new();
        for m in 0..14u64 {
            for s in 0..30u64 {
                let index = m * 30 + s;
                lines.push(
                    json!({
                        "index": index, "key": format!("k{index}"), "seed": index,
                        "params": {"model": format!("a_rather_long_model_name_{m:02}"), "variant": format!("v{s:02}")},
                        "metrics": {"throughput": (m * 7 + s) as f64, "utilization": (m as f64 + 1.0) / (s as f64 + 1.0)},
                        "error": null, "elapsed_s": 0.0,
                    })
                    .to_string(),
                );
            }
        }
        let exp = "name: crowded\nplots:\n  - { kind: bar, x: model, y: throughput, series: variant }\n  - { kind: heatmap, x: model, y: variant, z: utilization }\n";
        let dir = fixture(exp, &(lines.join("\n") + "\n"));
        let report = render(dir.path()).unwrap();
        for png in report.plots.iter().filter(|p| p.extension().unwrap() == "png") {
            let (w, h, ink) = png_ink(png);
            assert!(ink > (w * h / 20) as usize, "{}: only {ink} non-white pixels", png.display());
        }
        let bar = std::fs::read_to_string(&report.plots[1]).unwrap();
        assert!(bar.contains("and 14 more"), "legend not shortened");
        assert!(bar.contains("a_rather_long_model_name_13"));
    }

    #[test]
    fn a_long_series_label_wraps_inside_the_legend() {
        // A map-valued sweep key (an inline workload) labels its series with
        // every varying leaf: far wider than the legend panel's 360 pixels.
        let mut lines = Vec::new();
        let zoo = json!({"model.zoo": "inception_v3", "model.batch": 32, "model.device": "k40",
                         "model.step_overhead_us": 450000, "model.overlap": true});
        for (i, model) in [json!({"model": "inception_v3"}), zoo].into_iter().enumerate() {
            for (j, w) in [25u64, 50, 100].into_iter().enumerate() {
                let index = i * 3 + j;
                let mut params = model.clone();
                params["workers"] = json!(w);
                lines.push(
                    json!({
                        "index": index, "key": format!("k{index}"), "seed": index,
                        "params": params,
                        "metrics": {"throughput": (w * (i as u64 + 1)) as f64},
                        "error": null, "elapsed_s": 0.0,
                    })
                    .to_string(),
                );
            }
        }
        let exp = "name: long\nplots:\n  - { x: workers, y: throughput, series: model }\n";
        let dir = fixture(exp, &(lines.join("\n") + "\n"));
        let report = render(dir.path()).unwrap();
        let svg = report.plots.iter().find(|p| p.extension().unwrap() == "svg").unwrap();
        let svg = std::fs::read_to_string(svg).unwrap();
        let texts: Vec<&str> = svg.split("<text").skip(1).filter_map(|t| t.split('>').nth(1)?.split('<').next()).collect();
        let label: Vec<&&str> = texts.iter().filter(|t| t.contains('=')).collect();
        assert!(label.len() >= 2, "the long label should take several lines: {texts:?}");
        let joined = label.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(" ");
        for part in ["batch=32", "device=k40", "overlap=true", "step_overhead_us=450000", "zoo=inception_v3"] {
            assert!(joined.contains(part), "`{part}` missing from the legend: {joined}");
        }
        assert!(label.iter().all(|t| t.chars().count() <= 40), "a line wider than the panel: {label:?}");
    }

    /// A hand-made `kind: validate` table: 3 placers x 2 links x 2
    /// predictors (12 runs) and one failed run.
    fn validate_results() -> String {
        let mut lines = Vec::new();
        let mut index = 0u64;
        for (pi, placer) in ["single_device", "round_robin", "m_etf"].into_iter().enumerate() {
            for gbps in [1u32, 10] {
                for (ki, predictor) in ["roofline", "profile"].into_iter().enumerate() {
                    let measured = 0.004 + 0.0015 * pi as f64 + 0.012 / gbps as f64;
                    let predicted = measured * [1.25, 0.93][ki] * (1.0 + 0.02 * pi as f64);
                    lines.push(
                        json!({
                            "index": index, "key": format!("v{index}"), "seed": index,
                            "params": {"model": "mlp", "placer": placer, "predictor": predictor, "comm": "f32",
                                       "link.gbps": gbps, "link.latency_us": 50},
                            "metrics": {"measured_step_s": measured, "predicted_step_s": predicted,
                                        "error": predicted / measured - 1.0},
                            "error": null, "elapsed_s": 0.5,
                        })
                        .to_string(),
                    );
                    index += 1;
                }
            }
        }
        lines.push(
            json!({
                "index": index, "key": "failed", "seed": index,
                "params": {"model": "mlp", "placer": "m_sct", "predictor": "profile", "comm": "f32",
                           "link.gbps": 1, "link.latency_us": 50},
                "metrics": {}, "error": "engine: out of memory", "elapsed_s": 0.1,
            })
            .to_string(),
        );
        lines.join("\n") + "\n"
    }

    #[test]
    fn scatter_plots_draw_each_run_and_the_diagonal_to_png_svg_and_the_page() {
        let exp = "name: validate-placement\nkind: validate\nplots:\n  \
            - { kind: scatter, x: measured_step_s, y: predicted_step_s, series: placer, diagonal: true }\n  \
            - { kind: scatter, x: measured_step_s, y: predicted_step_s, series: predictor, diagonal: true, log_y: true, \
                title: Predicted against measured, x_label: engine step (s), y_label: simulator step (s) }\n  \
            - { kind: scatter, x: link.gbps, y: error, series: predictor, log_x: true }\n";
        let dir = fixture(exp, &validate_results());
        let report = render(dir.path()).unwrap();
        let names: Vec<String> = report
            .plots
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "scatter-predicted_step_s-vs-measured_step_s.png",
                "scatter-predicted_step_s-vs-measured_step_s.svg",
                "scatter-predicted_step_s-vs-measured_step_s-2.png",
                "scatter-predicted_step_s-vs-measured_step_s-2.svg",
                "scatter-error-vs-link_gbps.png",
                "scatter-error-vs-link_gbps.svg",
            ]
        );
        for png in report.plots.iter().filter(|p| p.extension().unwrap() == "png") {
            let (w, h, ink) = png_ink(png);
            assert_eq!((w, h), (crate::chart::WIDTH, crate::chart::HEIGHT));
            assert!(ink > (w * h / 50) as usize, "{}: only {ink} non-white pixels", png.display());
        }
        let svg = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        let first = svg("scatter-predicted_step_s-vs-measured_step_s.svg");
        for label in [
            "predicted step time vs measured step time",
            // 4-19 ms steps: the axes read in milliseconds
            "measured step time (ms)",
            "predicted step time (ms)",
            "\nsingle_device\n",
            "\nround_robin\n",
            "\nm_etf\n",
            "\ny = x\n",
            "12 runs,",
        ] {
            assert!(first.contains(label), "scatter svg lacks {label}");
        }
        assert!(!first.contains("m_sct"), "the failed run is drawn");
        // Every marker is one filled polygon: 12 runs plus 3 legend swatches.
        assert_eq!(first.matches("<polygon").count(), 15);
        let second = svg("scatter-predicted_step_s-vs-measured_step_s-2.svg");
        for label in ["Predicted against measured", "engine step (s)", "simulator step (s)", "\nroofline\n", "\nprofile\n", "\ny = x\n"] {
            assert!(second.contains(label), "log scatter svg lacks {label}");
        }
        assert_eq!(second.matches("<polygon").count(), 14);
        let third = svg("scatter-error-vs-link_gbps.svg");
        assert!(third.contains("signed prediction error (fraction)") && third.contains("link speed (Gb/s)"));
        assert!(!third.contains("y = x"), "a diagonal nobody asked for");

        let html = std::fs::read_to_string(&report.index_html).unwrap();
        for name in &names {
            assert!(html.contains(&format!("\"{name}\"")), "page does not reference {name}");
        }
        assert_eq!(html.matches("<svg").count(), 3);
        assert!(html.contains("(one marker per run; runs are not averaged)"), "{html}");
    }

    #[test]
    fn all_points_failed_still_gives_a_page_and_placeholder_plots() {
        let row = r#"{"index":0,"key":"a","seed":1,"params":{"workers":5},"metrics":{},"error":"no route","elapsed_s":0}"#;
        let exp = "name: t\nplots:\n  - { x: workers, y: throughput }\n";
        let dir = fixture(exp, &format!("{row}\n"));
        let report = render(dir.path()).unwrap();
        assert_eq!(report.plots.len(), 2);
        let svg = std::fs::read_to_string(&report.plots[1]).unwrap();
        assert!(svg.contains("no successful result points to plot"));
        let html = std::fs::read_to_string(&report.index_html).unwrap();
        assert!(html.contains("no route"));
    }
}

//! A small sweep runs end to end and writes every promised file: the input
//! copied verbatim, one JSON row and one CSV row per point with every metric,
//! a PNG and an SVG per plot, and an HTML page that shows them all.

mod common;

use common::{describe, read_rows, run_flowlab, small_sweep, write_file};

const METRICS_ALWAYS_PRESENT: &[&str] = &["throughput"];

#[test]
fn check_counts_the_points_and_estimates_the_run_without_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write_file(tmp.path(), "small.yaml", &small_sweep("small", 5));
    let out = run_flowlab(&["check", file.to_str().unwrap(), "--jobs", "2"]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], format!("{}: ok: kind cluster, 6 points", file.display()));
    assert!(lines[1].starts_with("estimated run time: ") && lines[1].contains("(5 of its points timed now,") && lines[1].ends_with("6 runs on 2 thread(s))"), "{stdout}");
    assert!(!tmp.path().join("out").exists());
    let out = run_flowlab(&["check", file.to_str().unwrap(), "--no-estimate"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("{}: ok: kind cluster, 6 points", file.display()));

    // After a run the stored runs' own times give the estimate: none left.
    let dir = tmp.path().join("res");
    let out = run_flowlab(&["run", file.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    let out = run_flowlab(&["check", file.to_str().unwrap(), "--out", dir.to_str().unwrap(), "--jobs", "2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("estimated run time: 0.0 s (6 of 6 runs stored in {}, 0 to run at their median", dir.display())), "{stdout}");
}

/// `flowlab compare A B` matches two runs' points by what they sweep,
/// names the setting that differs, and puts each metric side by side with
/// B over A.
#[test]
fn compare_puts_two_runs_side_by_side_and_names_what_differs() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dirs = Vec::new();
    for (name, ps) in [("a", 1), ("b", 2)] {
        let text = format!("name: {name}\nkind: cluster\nseed: 1\nbase:\n  model: inception_v3\n  workers: 2\n  ps: {ps}\n  steps: 5\nsweep:\n  workers: [2, 4]\n");
        let file = write_file(tmp.path(), &format!("{name}.yaml"), &text);
        let dir = tmp.path().join(name);
        let out = run_flowlab(&["run", file.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}", describe(&out));
        dirs.push(dir);
    }
    let out = run_flowlab(&["compare", dirs[0].to_str().unwrap(), dirs[1].to_str().unwrap(), "--metric", "throughput"]);
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].ends_with("2 points matched (0 only in A, 0 only in B)"), "{text}");
    assert_eq!(lines[1], "setting that differs: ps = 1 in A, 2 in B");
    assert_eq!(lines[2], "workers\tthroughput A\tthroughput B\tB/A");
    let rows = read_rows(&dirs[0]);
    for (line, workers) in lines[3..].iter().zip(["2", "4"]) {
        let cells: Vec<&str> = line.split('\t').collect();
        assert_eq!(cells[0], workers, "{text}");
        let (x, y, r): (f64, f64, f64) = (cells[1].parse().unwrap(), cells[2].parse().unwrap(), cells[3].parse().unwrap());
        assert!((r - y / x).abs() < 1e-3 * r.abs().max(1.0), "{line}");
        let stored = rows.iter().find(|row| row["params"]["workers"].to_string() == workers).map(|row| row["metrics"]["throughput"].as_f64().unwrap()).unwrap();
        assert!((x - stored).abs() <= 1e-4 * stored.max(1.0), "A's column is A's stored throughput: {x} vs {stored}");
    }
    // the same as a report folder: the table with its note, a bar chart of A and B
    let html = tmp.path().join("cmp");
    let out = run_flowlab(&["compare", dirs[0].to_str().unwrap(), dirs[1].to_str().unwrap(), "--metric", "throughput", "--html", html.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    let page = std::fs::read_to_string(html.join("index.html")).unwrap();
    assert!(page.contains("A and B point by point") && page.contains("settings that differ: ps = 1 in A, 2 in B"), "{page}");
    assert!(html.join("bar-throughput-vs-point.png").exists());
    let bars = read_rows(&html);
    assert_eq!(bars.len(), 4);
    assert!(bars.iter().any(|r| r["params"]["point"] == "workers=4" && r["params"]["run"] == "B"), "{bars:?}");
    // a metric one run lacks is refused naming those both have
    let out = run_flowlab(&["compare", dirs[0].to_str().unwrap(), dirs[1].to_str().unwrap(), "--metric", "thruput"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--metric thruput: not a metric of both runs"), "{}", describe(&out));
}

/// `flowlab new KIND` writes a starting file that checks as it is, for
/// every kind; `--from catalog:NAME` gives the entry's text, comments
/// included; an unknown kind is refused naming the kinds.
#[test]
fn every_kind_has_a_starting_file_that_checks() {
    let tmp = tempfile::tempdir().unwrap();
    for kind in ["cluster", "placement", "systolic", "validate", "distributed"] {
        let out = run_flowlab(&["new", kind]);
        assert!(out.status.success(), "{kind}: {}", describe(&out));
        let file = write_file(tmp.path(), &format!("{kind}.yaml"), &String::from_utf8_lossy(&out.stdout));
        let out = run_flowlab(&["check", file.to_str().unwrap()]);
        assert!(out.status.success(), "{kind}: {}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("ok: kind {kind},")), "{}", describe(&out));
    }
    let out = run_flowlab(&["new", "--from", "catalog:backup-workers"]);
    let catalog = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/catalog/backup-workers.yaml")).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), catalog);
    let out = run_flowlab(&["new", "clustr"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("did you mean `cluster`?"), "{}", describe(&out));
}

/// `check --resolved` prints every point's whole configuration: the
/// straggler model even where the file wrote none, and a zoo model as the
/// workload the simulator runs (its compute time taken from the zoo).
#[test]
fn check_resolved_shows_every_points_defaults_and_its_zoo_model() {
    let tmp = tempfile::tempdir().unwrap();
    let text = "name: r\nkind: cluster\nseed: 1\nbase:\n  model: { zoo: resnet50 }\n  workers: 10\n  ps: 2\nsweep:\n  strategy.sync.backup: [0, 2]\n";
    let file = write_file(tmp.path(), "r.yaml", text);
    let out = run_flowlab(&["check", file.to_str().unwrap(), "--resolved"]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let points: Vec<&str> = stdout.split("# point ").skip(1).collect();
    assert_eq!(points.len(), 2, "{stdout}");
    for (i, p) in points.iter().enumerate() {
        assert!(p.starts_with(&format!("{i}: strategy.sync.backup={}", [0, 2][i])), "{p}");
        assert!(p.contains("straggler:\n  dist: none"), "the default straggler model is stated: {p}");
        assert!(p.contains("  zoo: resnet50") && p.contains("  dense_params: 25557032"), "{p}");
        // the zoo's compute, a positive number of seconds
        let compute: f64 = p.lines().find_map(|l| l.trim().strip_prefix("compute_s: ")).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        assert!(compute > 0.0, "{p}");
    }
}

#[test]
fn a_small_sweep_writes_results_plots_and_page() {
    let tmp = tempfile::tempdir().unwrap();
    let text = small_sweep("small", 5);
    let file = write_file(tmp.path(), "small.yaml", &text);
    let dir = tmp.path().join("results");
    let out = run_flowlab(&["run", file.to_str().unwrap(), "--out", dir.to_str().unwrap(), "--jobs", "2"]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);

    // The experiment file, verbatim.
    assert_eq!(std::fs::read_to_string(dir.join("experiment.yaml")).unwrap(), text);

    // One JSON row per point, in index order, with its params, metrics and series.
    let rows = read_rows(&dir);
    assert_eq!(rows.len(), 6);
    let mut keys = std::collections::HashSet::new();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["index"], i as u64);
        assert!(keys.insert(row["key"].as_str().unwrap().to_string()), "duplicate key in {row}");
        assert_eq!(row["error"], serde_json::Value::Null, "{row}");
        let params = &row["params"];
        assert_eq!(params["workers"], if i < 3 { 4 } else { 8 });
        assert_eq!(params["strategy.sync.backup"], (i % 3) as u64);
        assert_eq!(params["strategy"], "sync");
        assert_eq!(params["network.topology"], "fat_tree");
        assert_eq!(params["model"], "inception_v3");
        for m in METRICS_ALWAYS_PRESENT {
            let v = row["metrics"][m].as_f64().unwrap_or_else(|| panic!("metric {m} in {row}"));
            assert!(v > 0.0, "{m} = {v}");
        }
        let steps = row["series"]["step_time_s"].as_array().expect("step_time_s series");
        assert_eq!(steps.len(), 5);
        assert!(steps.iter().all(|s| s.as_f64().unwrap() > 0.0));
    }

    // The CSV: a header, then one row per point with every column filled.
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 7, "{csv}");
    let header: Vec<&str> = lines[0].split(',').collect();
    assert_eq!(&header[..5], ["index", "key", "seed", "workers", "strategy.sync.backup"]);
    assert_eq!(header.last(), Some(&"error"));
    assert!(header.contains(&"throughput"));
    for (i, line) in lines[1..].iter().enumerate() {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells.len(), header.len(), "{line}");
        assert_eq!(cells[0], i.to_string());
        assert_eq!(cells[1], rows[i]["key"].as_str().unwrap());
        assert_eq!(cells.last(), Some(&""), "no error in {line}");
    }

    // Plots: every PNG decodes and is not blank; the page shows every plot.
    let index = dir.join("index.html");
    assert!(stdout.contains(&format!("report: {}", index.display())), "{stdout}");
    let html = std::fs::read_to_string(&index).unwrap();
    let mut pngs = Vec::new();
    let mut svgs = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".png") {
            pngs.push(name);
        } else if name.ends_with(".svg") {
            svgs.push(name);
        }
    }
    assert_eq!(pngs.len(), 2, "one PNG per plot: {pngs:?}");
    assert_eq!(svgs.len(), 2, "one SVG per plot: {svgs:?}");
    for name in &pngs {
        assert_not_blank(&dir.join(name));
        let stem = name.trim_end_matches(".png");
        assert!(
            html.contains(name.as_str()) || html.contains(&format!("{stem}.svg")),
            "index.html does not show {name}"
        );
    }
    for name in &svgs {
        let svg = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(svg.contains("<svg") && svg.contains("</svg>"), "{name} is not an SVG");
    }
}

/// Decodes a PNG and checks it has more than one colour.
fn assert_not_blank(path: &std::path::Path) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(info.width >= 100 && info.height >= 100, "{}: {}x{}", path.display(), info.width, info.height);
    let pixels = &buf[..info.buffer_size()];
    let bytes_per_pixel = info.line_size / info.width as usize;
    let first = &pixels[..bytes_per_pixel];
    let differing = pixels.chunks(bytes_per_pixel).filter(|p| *p != first).count();
    assert!(
        differing * 100 > pixels.len() / bytes_per_pixel,
        "{}: fewer than 1% of pixels differ from the first: blank",
        path.display()
    );
}

#[test]
fn the_systolic_catalog_entry_writes_a_heatmap() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("systolic");
    let out = run_flowlab(&["run", "catalog:systolic-arrays", "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    let rows = read_rows(&dir);
    assert_eq!(rows.len(), 18);
    for row in &rows {
        let u = row["metrics"]["utilization"].as_f64().unwrap();
        assert!(u > 0.0 && u <= 1.0, "utilization {u} in {row}");
    }
    // The same array size gives the same MACs whatever the dataflow.
    assert_eq!(rows[0]["metrics"]["macs"], rows[1]["metrics"]["macs"]);
    let heatmap = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "png") && p.to_string_lossy().contains("heatmap"))
        .expect("a heatmap PNG");
    assert_not_blank(&heatmap);
}

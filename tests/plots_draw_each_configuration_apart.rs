//! The issue-15 sweep: strategy over async, sync with 0 and with 4 backups,
//! times two worker counts. `series: strategy` gives one line per variant
//! (no two configurations averaged), labelled readably, and the page inlines
//! the plot and names the run.

mod common;

use common::{describe, read_rows, run_flowlab, write_file};

const SWEEP: &str = "\
name: strategies
kind: cluster
seed: 3
base:
  model: inception_v3
  workers: 8
  ps: 2
  strategy: { sync: { backup: 0 } }
  steps: 6
sweep:
  strategy: [{ async: {} }, { sync: { backup: 0 } }, { sync: { backup: 4 } }]
  workers: [8, 16]
plots:
  - { x: workers, y: throughput, series: strategy }
  - { kind: heatmap, x: workers, y: strategy, z: step_p50_s }
";

#[test]
fn a_map_valued_series_draws_one_line_per_variant() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write_file(tmp.path(), "s.yaml", SWEEP);
    let dir = tmp.path().join("out");
    let out = run_flowlab(&["run", file.to_str().unwrap(), "--out", dir.to_str().unwrap(), "--jobs", "2"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(read_rows(&dir).len(), 6);
    let svg = std::fs::read_to_string(dir.join("line-throughput-vs-workers.svg")).unwrap();
    for label in ["async", "sync backup=0", "sync backup=4", "throughput (examples/s)"] {
        assert!(svg.contains(label), "line svg lacks {label}");
    }
    assert!(!svg.contains("mean"), "nothing is averaged: every position holds one point");
    let heat = std::fs::read_to_string(dir.join("heatmap-step_p50_s-over-workers-strategy.svg")).unwrap();
    assert!(heat.contains("sync backup=4"));
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert!(html.contains("<svg"), "plots are inline");
    assert!(html.contains("with flowlab "), "the page names the version");
    assert!(html.contains("s.yaml --out"), "the page shows the command line");
}

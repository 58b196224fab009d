//! Helpers shared by the end-to-end tests: run the real `flowlab` binary on
//! small experiments and read what it wrote.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `flowlab` binary built for these tests.
pub fn flowlab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flowlab"))
}

/// Runs `flowlab ARGS` to completion.
pub fn run_flowlab(args: &[&str]) -> Output {
    flowlab().args(args).output().expect("the flowlab binary runs")
}

/// Stdout and stderr of a finished command, for assertion messages.
pub fn describe(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A small cluster sweep: 2 worker counts x 3 backup settings = 6 points,
/// few steps, so it runs in well under a second.
pub fn small_sweep(name: &str, steps: u32) -> String {
    format!(
        "# a small backup-workers sweep for the end-to-end tests\n\
name: {name}
kind: cluster
seed: 7
base:
  model: inception_v3
  workers: 8
  ps: 2
  strategy: {{ sync: {{ backup: 0 }} }}
  network: {{ topology: fat_tree, link_gbps: 10 }}
  straggler: {{ dist: lognormal, sigma: 0.3 }}
  steps: {steps}
sweep:
  workers: [4, 8]
  strategy.sync.backup: [0, 1, 2]
plots:
  - {{ x: strategy.sync.backup, y: throughput, series: workers }}
  - {{ kind: cdf, y: step_time_s, series: strategy.sync.backup, pool: [workers] }}
"
    )
}

/// Writes `text` to `dir/file_name` and returns the path.
pub fn write_file(dir: &Path, file_name: &str, text: &str) -> PathBuf {
    let path = dir.join(file_name);
    std::fs::write(&path, text).expect("write the experiment file");
    path
}

/// The rows of a `results.jsonl`, as JSON values.
pub fn read_rows(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("results.jsonl"))
        .expect("results.jsonl exists")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect()
}

/// Rows sorted by index with the wall-clock time removed: what must be
/// identical between two runs of the same experiment.
pub fn comparable(mut rows: Vec<serde_json::Value>) -> Vec<serde_json::Value> {
    for row in &mut rows {
        row.as_object_mut().expect("a row is an object").remove("elapsed_s");
    }
    rows.sort_by_key(|r| r["index"].as_u64());
    rows
}

/// Runs `flowlab train mlp --epochs 1 EXTRA` for each case and checks that
/// it fails with `want` in its stderr.
pub fn assert_train_refuses(cases: &[(&[&str], &str)]) {
    for (extra, want) in cases {
        let mut args = vec!["train", "mlp", "--epochs", "1"];
        args.extend_from_slice(extra);
        let out = run_flowlab(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(want), "flowlab {args:?}: want '{want}'\n{}", describe(&out));
    }
}

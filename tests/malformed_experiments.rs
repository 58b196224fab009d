//! Every malformed experiment in `tests/data/bad/` is rejected by
//! `flowlab check` (and by `flowlab run`, before anything runs) with its
//! exact error: `NAME.yaml` holds the file, `NAME.err` the one line of
//! stderr expected, `{file}` standing for the file's path.

mod common;

use std::path::{Path, PathBuf};

use common::{describe, run_flowlab};

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bad");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn expected_error(file: &Path) -> String {
    let err = file.with_extension("err");
    let text = std::fs::read_to_string(&err).unwrap_or_else(|e| panic!("{}: {e}", err.display()));
    text.trim_end().replace("{file}", file.to_str().unwrap())
}

#[test]
fn every_bad_file_gets_its_exact_error_from_check() {
    let files = corpus();
    assert!(files.len() >= 15, "the corpus has {} files", files.len());
    let mut mismatches = Vec::new();
    for file in &files {
        let out = run_flowlab(&["check", file.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
        let want = expected_error(file);
        if out.status.success() || stderr != want {
            mismatches.push(format!("{}:\n  want: {want}\n  got:  {}", file.display(), describe(&out)));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn run_rejects_a_bad_file_before_running_anything() {
    let tmp = tempfile::tempdir().unwrap();
    let file = corpus()
        .into_iter()
        .find(|f| f.ends_with("zero_workers_in_sweep.yaml"))
        .expect("the corpus has zero_workers_in_sweep.yaml");
    let out_dir = tmp.path().join("out");
    let out = run_flowlab(&["run", file.to_str().unwrap(), "--out", out_dir.to_str().unwrap()]);
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim_end(), expected_error(&file));
    assert!(!out_dir.exists(), "nothing may be written for a bad file");
}

#[test]
fn unknown_catalog_entries_are_named_with_a_suggestion() {
    let out = run_flowlab(&["check", "catalog:backup-worker"]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "error: no catalog experiment `backup-worker`; did you mean `backup-workers`? (the catalog has: \
         backup-workers, backup-robustness, async-convergence, sync-replication, inception-scaling, inception-zoo, lstm-language-model, systolic-arrays, quantized-comm, placement-heuristics, validate-placement, distributed-loopback, distributed-mlp784, distributed-stragglers)"
    );
}

#[test]
fn a_bad_shard_is_a_usage_error() {
    let out = run_flowlab(&["run", "catalog:backup-workers", "--shard", "2/2"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--shard `2/2`: expected K/N with 0 <= K < N, e.g. 0/4"),
        "{stderr}"
    );
}

#[test]
fn output_paths_that_cannot_hold_results_are_named_once() {
    // A file where the results folder should be: named as a file, and
    // left as it was.
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("taken");
    std::fs::write(&file, "mine").unwrap();
    let out = run_flowlab(&["run", "catalog:backup-workers", "--out", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!("error: {}: is a file; results go to a directory (pass --out to write elsewhere)", file.display())
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    // A missing results folder: the system's reason once (it was printed
    // twice, from the message and again from its source).
    let missing = tmp.path().join("none");
    let out = run_flowlab(&["report", missing.to_str().unwrap()]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!("error: {}: No such file or directory (os error 2)", missing.join("experiment.yaml").display())
    );
}

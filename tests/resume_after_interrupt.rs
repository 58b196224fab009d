//! An interrupted sweep resumes where it stopped: no row is lost, none is
//! duplicated, and the resumed rows are the numbers an uninterrupted run
//! gives. Covers a torn last line (a write cut off mid-line) and a process
//! killed mid-run.

mod common;

use std::time::{Duration, Instant};

use common::{comparable, describe, flowlab, read_rows, run_flowlab, small_sweep, write_file};

#[test]
fn a_torn_last_line_is_dropped_and_its_point_rerun() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write_file(tmp.path(), "small.yaml", &small_sweep("small", 5));
    let dir = tmp.path().join("results");
    let (file, dir_s) = (file.to_str().unwrap(), dir.to_str().unwrap());
    let out = run_flowlab(&["run", file, "--out", dir_s, "--jobs", "2"]);
    assert!(out.status.success(), "{}", describe(&out));
    let complete = comparable(read_rows(&dir));
    assert_eq!(complete.len(), 6);

    // Keep 3 rows, then half of the 4th without its newline, as a kill
    // during a write leaves it; drop the CSV too.
    let text = std::fs::read_to_string(dir.join("results.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let torn = format!("{}\n{}", lines[..3].join("\n"), &lines[3][..lines[3].len() / 2]);
    std::fs::write(dir.join("results.jsonl"), torn).unwrap();
    std::fs::remove_file(dir.join("results.csv")).unwrap();

    let out = run_flowlab(&["run", file, "--out", dir_s, "--jobs", "2"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("resuming: 3 of 6 runs already done"),
        "{}",
        describe(&out)
    );
    assert_eq!(comparable(read_rows(&dir)), complete);
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 7, "{csv}");
}

/// Starts `flowlab ARGS` (stdout dropped, stderr kept) and returns once
/// `dir/results.jsonl` holds one whole row (its newline written).
fn run_until_a_row_is_stored(args: &[&str], dir: &std::path::Path) -> std::process::Child {
    let child = flowlab().args(args).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let jsonl = dir.join("results.jsonl");
    let start = Instant::now();
    while std::fs::read_to_string(&jsonl).map_or(true, |t| !t.contains('\n')) {
        assert!(start.elapsed() < Duration::from_secs(60), "no row written within a minute");
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

#[test]
fn a_killed_run_resumes_without_lost_or_duplicate_rows() {
    let tmp = tempfile::tempdir().unwrap();
    // Enough steps that the sweep takes a while, so the kill lands mid-run.
    let file = write_file(tmp.path(), "slow.yaml", &small_sweep("slow", 300));
    let dir = tmp.path().join("results");
    let (file, dir_s) = (file.to_str().unwrap(), dir.to_str().unwrap());

    let mut child = run_until_a_row_is_stored(&["run", file, "--out", dir_s, "--jobs", "1"], &dir);
    child.kill().unwrap();
    child.wait().unwrap();
    // The kill may land inside a row's write (a row of several kilobytes
    // can be cut at a page): that torn last line is what the resume drops
    // and reruns, so only whole lines count here.
    let text = std::fs::read_to_string(dir.join("results.jsonl")).unwrap();
    let partial = text.split_inclusive('\n').filter(|l| l.ends_with('\n')).count();
    assert!((1..6).contains(&partial), "the kill should land mid-run, found {partial} rows");

    let out = run_flowlab(&["run", file, "--out", dir_s, "--jobs", "2"]);
    assert!(out.status.success(), "{}", describe(&out));
    let resumed = comparable(read_rows(&dir));

    let fresh_dir = tmp.path().join("fresh");
    let out = run_flowlab(&["run", file, "--out", fresh_dir.to_str().unwrap(), "--jobs", "2"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(resumed, comparable(read_rows(&fresh_dir)));
}

/// Ctrl-C (SIGINT) stops starting runs, stores the one in flight, exits
/// 130 and prints the command that resumes: the same one without
/// `--fresh`, which would discard what is stored.
#[cfg(unix)]
#[test]
fn ctrl_c_stores_the_run_in_flight_and_says_how_to_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write_file(tmp.path(), "slow.yaml", &small_sweep("slow", 300));
    let dir = tmp.path().join("results");
    let (file, dir_s) = (file.to_str().unwrap(), dir.to_str().unwrap());
    let child = run_until_a_row_is_stored(&["run", file, "--out", dir_s, "--jobs", "1", "--fresh"], &dir);
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: sends a signal to the child this test started and still owns.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", describe(&out));
    let stored = read_rows(&dir).len();
    assert!((1..6).contains(&stored), "Ctrl-C should land mid-run, found {stored} rows");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let hint = format!("interrupted: {stored} of 6 runs are stored in {dir_s}: resume with `flowlab run {file} --out {dir_s} --jobs 1` (finished runs are not run again)");
    assert!(stderr.contains(&hint), "{stderr}");

    let out = run_flowlab(&["run", file, "--out", dir_s, "--jobs", "1"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("({} ran now, {stored} resumed", 6 - stored)), "{}", describe(&out));
}

#[test]
fn an_edited_file_resumes_what_matches_and_another_experiment_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write_file(tmp.path(), "small.yaml", &small_sweep("small", 3));
    let dir = tmp.path().join("results");
    let (file_s, dir_s) = (file.to_str().unwrap(), dir.to_str().unwrap());
    let out = run_flowlab(&["run", file_s, "--out", dir_s]);
    assert!(out.status.success(), "{}", describe(&out));
    let first = comparable(read_rows(&dir));

    // Only a plot added: nothing reruns, the report is drawn again.
    let with_plot = format!("{}  - {{ kind: cdf, y: step_time_s, series: workers, pool: [strategy] }}\n", small_sweep("small", 3));
    let edited = write_file(tmp.path(), "edited.yaml", &with_plot);
    let out = run_flowlab(&["run", edited.to_str().unwrap(), "--out", dir_s]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("the experiment file changed since the stored results: 6 of 6 runs still match; 0 to run"), "{stdout}");
    assert!(stdout.contains("(0 ran now, 6 resumed"), "{stdout}");
    assert_eq!(comparable(read_rows(&dir)), first);
    assert!(dir.join("cdf-step_time_s-2.svg").exists());

    // Points changed (4 steps each): every run reruns, the old rows are kept aside.
    let other = write_file(tmp.path(), "other.yaml", &small_sweep("small", 4));
    let out = run_flowlab(&["run", other.to_str().unwrap(), "--out", dir_s]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("0 of 6 runs still match; 6 stored runs are no longer in its sweep: moved to"), "{stdout}");
    let rows = read_rows(&dir);
    assert_eq!(rows.len(), 6);
    assert!(rows.iter().all(|r| r["series"]["step_time_s"].as_array().unwrap().len() == 4));
    let aside = std::fs::read_to_string(dir.join("results.superseded.jsonl")).unwrap();
    assert_eq!(aside.lines().count(), 6);

    // Another experiment into the same directory: refused, nothing touched.
    let renamed = write_file(tmp.path(), "renamed.yaml", &small_sweep("other-name", 4));
    let out = run_flowlab(&["run", renamed.to_str().unwrap(), "--out", dir_s]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        format!(
            "error: {dir_s}: holds results of experiment `small`, not `other-name`; pass --out to write elsewhere \
             (or --fresh, which deletes the results stored there)"
        )
    );
    assert_eq!(read_rows(&dir).len(), 6);
    let out = run_flowlab(&["run", renamed.to_str().unwrap(), "--out", dir_s, "--fresh"]);
    assert!(out.status.success(), "{}", describe(&out));
}

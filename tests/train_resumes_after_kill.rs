//! `flowlab train --checkpoint-dir DIR --checkpoint-every 1 --resume`
//! killed with SIGKILL at 20 moments: every restart resumes from an intact
//! checkpoint (it never fails on a half-written file), and the run that
//! finally completes reports exactly what an uninterrupted run reports.
//! Also: training flags with bad values are refused, naming the flag.

mod common;

use common::{assert_train_refuses, describe, flowlab, run_flowlab};
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};

const BASE: [&str; 8] = ["train", "mlp", "--data", "digits", "--epochs", "60", "--checkpoint-every", "1"];

fn report(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "{}", describe(out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {}", describe(out)))
}

/// The fields an interrupted run must reproduce (not wall time).
fn outcome(r: &Value) -> Vec<Value> {
    ["accuracy", "loss", "train_loss", "steps"].iter().map(|k| r[k].clone()).collect()
}

#[test]
fn killed_twenty_times_it_resumes_each_time_and_ends_as_if_never_stopped() {
    let whole_dir = tempfile::tempdir().unwrap();
    let mut args = BASE.to_vec();
    args.extend(["--checkpoint-dir", whole_dir.path().to_str().unwrap(), "--json"]);
    let whole = report(&run_flowlab(&args));

    let dir = tempfile::tempdir().unwrap();
    let mut args = BASE.to_vec();
    args.extend(["--checkpoint-dir", dir.path().to_str().unwrap(), "--keep", "2", "--resume", "--json"]);
    // A fixed xorshift schedule of kill delays between 20 and 100 ms (a 60-epoch run takes about 2 s here).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut killed = 0;
    for round in 0..20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let delay = Duration::from_millis(20 + x % 80);
        let mut child = flowlab().args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let t0 = Instant::now();
        while t0.elapsed() < delay {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            killed += 1;
        }
        let out = child.wait_with_output().unwrap();
        // Killed, or finished on its own: never a failure of its own.
        assert!(out.status.success() || out.status.code().is_none(), "round {round}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("skipped an unreadable checkpoint"), "round {round}: a torn checkpoint: {stderr}");
    }
    eprintln!("{killed} of 20 runs killed mid-run");
    assert!(killed >= 15, "only {killed} of 20 runs were killed mid-training: the schedule is too slow for this test");
    let last = run_flowlab(&args);
    let resumed = report(&last);
    assert!(resumed["resumed_from_step"].as_u64().is_some(), "{}", describe(&last));
    assert_eq!(outcome(&resumed), outcome(&whole), "{}", describe(&last));
}

#[test]
fn bad_training_values_are_refused_naming_the_flag() {
    let empty = tempfile::NamedTempFile::new().unwrap();
    let empty_path = empty.path().to_str().unwrap();
    let cases: [(&[&str], &str); 6] = [
        (&["--lr", "nan"], "--lr: must be a finite positive number (got NaN)"),
        (&["--lr=-0.5"], "--lr: must be a finite positive number (got -0.5)"),
        (&["--threads", "0"], "--threads: must be between 1 and 256 (got 0)"),
        (&["--threads", "100000"], "--threads: must be between 1 and 256 (got 100000)"),
        (&["--checkpoint-dir", "/tmp", "--checkpoint-every", "0"], "--checkpoint-every: must be at least 1 step (got 0)"),
        (&["--data", empty_path], "--data: 0 examples give 0 to train on and 0 held out: at least 5 are needed"),
    ];
    assert_train_refuses(&cases);
}

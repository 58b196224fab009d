//! `flowlab train cnn --data digits`: the small CNN trains end to end through
//! the real engine (Conv2D, MaxPool and their gradients, Adam) and generalises.
//!
//! Four epochs over the 1,438 training digits (180 steps of 32) take about a
//! second in release. Seed 1 reaches 98.3% held-out accuracy; seeds 2 and 3
//! reach 95.3%, so the 95% bar leaves room for a different SIMD path
//! (AVX2 vs AVX-512) without letting a broken gradient through (an untrained
//! network scores about 10%, two epochs about 90%).

mod common;

use common::{describe, run_flowlab};
use serde_json::Value;

/// Runs `flowlab train cnn` and parses the JSON object on its last line.
fn train_cnn(threads: &str) -> Value {
    let out = run_flowlab(&["train", "cnn", "--data", "digits", "--epochs", "4", "--seed", "1", "--threads", threads, "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_else(|| panic!("no output\n{}", describe(&out)));
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {last}"))
}

#[test]
fn cnn_on_digits_reaches_95_percent_and_ignores_the_thread_count() {
    let one = train_cnn("1");
    assert_eq!(one["model"], "cnn");
    let accuracy = one["accuracy"].as_f64().expect("accuracy is a number");
    assert!(accuracy >= 0.95, "held-out accuracy {accuracy} after 4 epochs: {one}");
    assert_eq!(one["train_examples"].as_u64(), Some(1438), "{one}");
    assert_eq!(one["test_examples"].as_u64(), Some(359), "{one}");
    // 1,438 examples in batches of 32: 45 steps per epoch.
    assert_eq!(one["steps"].as_u64(), Some(4 * 45), "{one}");
    let loss = one["loss"].as_f64().expect("loss is a number");
    assert!(loss.is_finite() && loss < 0.3, "held-out loss {loss}: {one}");
    // Same seed, two executor threads: the very same numbers.
    let two = train_cnn("2");
    for key in ["accuracy", "loss", "train_loss", "steps"] {
        assert_eq!(one[key], two[key], "`{key}` differs between 1 and 2 threads:\n{one}\n{two}");
    }
}

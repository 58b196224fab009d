//! `flowlab train mlp` on two local CPU devices: model parallel
//! (`--placement layers`) and data parallel (`--placement replicas`) reach
//! the accuracy of one device; quantized transfers shrink the bytes sent by
//! the ratio of their formats; `--trace` records the transfers; bad flags
//! get errors that name them.

mod common;

use common::{assert_train_refuses, describe, run_flowlab};
use serde_json::Value;

/// Few epochs keep the test fast; enough to get well above chance.
const EPOCHS: &str = "3";

/// Runs `flowlab train mlp --data digits --epochs EPOCHS --json EXTRA` and
/// returns its JSON report.
fn train(extra: &[&str]) -> Value {
    let mut args = vec!["train", "mlp", "--data", "digits", "--epochs", EPOCHS, "--json"];
    args.extend_from_slice(extra);
    let out = run_flowlab(&args);
    assert!(out.status.success(), "flowlab {args:?}: {}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {}", describe(&out)))
}

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no number '{key}' in {v}"))
}

#[test]
fn two_devices_layers_and_replicas_match_one_device_and_int8_sends_a_quarter() {
    let one = train(&[]);
    let layers = train(&["--devices", "2", "--placement", "layers"]);
    let replicas = train(&["--devices", "2", "--placement", "replicas"]);
    let acc1 = num(&one, "accuracy");
    assert!(acc1 > 0.85, "one device after {EPOCHS} epochs: {one}");
    for r in [&layers, &replicas] {
        assert_eq!(r["devices"], 2);
        assert!((num(r, "accuracy") - acc1).abs() <= 0.01, "one device {acc1}, two: {r}");
        assert!(num(r, "transfers") > 0.0 && num(r, "bytes_sent") > 0.0, "{r}");
        // f32 transfers: on the wire exactly what f32 takes.
        assert_eq!(r["bytes_sent"], r["bytes_f32"], "{r}");
    }
    assert_eq!(layers["placement"], "layers");
    assert_eq!(replicas["placement"], "replicas");
    assert_eq!(one["devices"], 1);
    assert!(one.get("bytes_sent").is_none(), "one device sends nothing: {one}");

    // Model parallel cuts only f32 activations and gradients (plus a few
    // scalar control edges): int8 sends 1 byte per value plus one f32 scale
    // per tensor, bf16 2 bytes.
    let int8 = train(&["--devices", "2", "--placement", "layers", "--comm", "int8"]);
    let bf16 = train(&["--devices", "2", "--placement", "layers", "--comm", "bf16"]);
    assert_eq!(int8["comm"], "int8");
    let r8 = num(&int8, "bytes_f32") / num(&int8, "bytes_sent");
    let r16 = num(&bf16, "bytes_f32") / num(&bf16, "bytes_sent");
    assert!((3.8..=4.0).contains(&r8), "int8 shrinks by {r8}: {int8}");
    assert!((1.95..=2.0).contains(&r16), "bf16 shrinks by {r16}: {bf16}");
    assert_eq!(int8["transfers"], layers["transfers"]);
    assert_eq!(int8["bytes_f32"], layers["bytes_f32"]);
    for r in [&int8, &bf16] {
        assert!((num(r, "accuracy") - acc1).abs() <= 0.02, "one device {acc1}, quantized: {r}");
    }
}

#[test]
fn trace_of_two_devices_holds_both_devices_and_their_transfers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("train.json");
    let path_s = path.to_str().unwrap();
    train(&["--devices", "2", "--placement", "replicas", "--trace", path_s]);
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let transfers = events.iter().filter(|e| e["cat"] == "transfer").count();
    assert!(transfers > 0, "no transfer events in {} events", events.len());
    let processes: Vec<&str> =
        events.iter().filter(|e| e["name"] == "process_name").filter_map(|e| e["args"]["name"].as_str()).collect();
    assert!(processes.iter().any(|p| p.ends_with("CPU:0")) && processes.iter().any(|p| p.ends_with("CPU:1")), "{processes:?}");
}

#[test]
fn the_default_batch_rounds_up_to_the_replicas() {
    // 32 does not split into 3 replicas: 33 does; 1,438 training examples
    // make ceil(1438 / 33) = 44 steps an epoch
    let r = train(&["--devices", "3"]);
    assert_eq!((r["batch"].as_u64(), r["steps"].as_u64()), (Some(33), Some(44 * 3)), "{r}");
    assert_eq!(train(&[])["batch"].as_u64(), Some(32));
}

#[test]
fn bad_device_flags_are_named() {
    let cases: [(&[&str], &str); 6] = [
        (&["--link", "5gbps"], "--link: emulates transfers between devices: use --devices 2 or more"),
        (&["--devices", "2", "--link", "fast"], "--link: 'fast': bandwidth needs gbps or mbps (expected e.g. 5gbps,50us)"),
        (&["--devices", "0"], "--devices: must be at least 1 (got 0)"),
        (
            &["--devices", "4", "--batch", "30", "--placement", "replicas"],
            "--placement replicas splits each batch into 4 equal shards, but --batch 30 is not a multiple of 4",
        ),
        (&["--comm", "int4"], "--comm int4: unknown number format `int4`; valid formats: f32, f16, bf16, int8, int8:<block>"),
        (&["--devices", "3", "--placement", "layers"], "the mlp has 2 layers, so at most 2 devices (got 3)"),
    ];
    assert_train_refuses(&cases);
}

#[test]
fn an_emulated_link_slows_transfers_but_not_learning() {
    let plain = train(&["--devices", "2", "--placement", "layers"]);
    let linked = train(&["--devices", "2", "--placement", "layers", "--link", "10gbps,50us"]);
    assert_eq!(plain["accuracy"], linked["accuracy"]);
    assert_eq!(plain["bytes_sent"], linked["bytes_sent"]);
}

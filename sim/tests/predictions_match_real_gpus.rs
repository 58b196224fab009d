//! The graph-level simulator's GPU predictions against a real H100 and a
//! real H200: the measurements in `bench/gpu/h100-2026-11-26.json` and
//! `h200-2026-11-26.json` (PyTorch twins of the zoo models trained on each
//! GPU, f32 with TF32 off, each step replayed from a CUDA graph; and the
//! device's measured GEMM, HBM and PCIe rates, see bench/gpu/README.md) are
//! an independent reference. The bounds are the accuracy measured when the
//! files were taken (docs/logs/validation.md, "Against a real GPU"): a change to the cost
//! model or the catalog that moves a prediction further from the hardware
//! fails here. Calibration and held-out points are kept apart: ResNet-50
//! at batch 32 set a catalog figure (the H100's and H200's convolution
//! efficiency, 0.42, from the H100's convolution time; the H200 runs the
//! same kernels at the same batch, so its point is no hold-out either);
//! the other 9 points of each file set nothing. The held-out bound is issue
//! 53's goal (a held-out MAPE of at most 12%), set by the issue before these
//! points were split; the per-point bound (25%) is the one the files were
//! first checked with.

use flowlab_hw::{Catalog, Dtype, OpClass, OpCost};
use flowlab_sim::graph::{GraphSimulator, SimOptions, VirtualCluster};
use serde_json::Value;

/// (catalog device, its measurements).
const MEASURED: [(&str, &str); 2] = [
    ("h100", include_str!("../../bench/gpu/h100-2026-11-26.json")),
    ("h200", include_str!("../../bench/gpu/h200-2026-11-26.json")),
];

fn measured(text: &str) -> Value {
    serde_json::from_str(text).expect("bench/gpu/*.json is JSON")
}

#[test]
fn the_catalog_gpus_run_gemms_and_copies_at_the_measured_rates() {
    for (device, text) in MEASURED {
        rates_match(device, &measured(text)["figures"]);
    }
}

fn rates_match(device: &str, f: &Value) {
    let spec = Catalog::builtin().device(device).unwrap().clone();
    let rate = |n: f64, dtype: Dtype| {
        let cost = OpCost { flops: 2.0 * n * n * n, bytes: 3.0 * n * n * 4.0, dtype, class: OpClass::Matmul };
        2.0 * n * n * n / spec.op_time_seconds(&cost, None) / 1e12
    };
    let within = |what: &str, predicted: f64, measured: f64, tol: f64| {
        let e = (predicted - measured) / measured;
        eprintln!("{device} {what}: predicted {predicted:.1}, measured {measured:.1}, error {:+.1}%", e * 100.0);
        assert!(e.abs() <= tol, "{device} {what}: predicted {predicted}, measured {measured}");
    };
    within("f32 GEMM 4096^3 TFLOP/s", rate(4096.0, Dtype::F32), f["sgemm_4096_tflops"].as_f64().unwrap(), 0.10);
    within("bf16 GEMM 8192^3 TFLOP/s", rate(8192.0, Dtype::Bf16), f["bf16_gemm_8192_tflops"].as_f64().unwrap(), 0.10);
    // A 1 GiB copy reads and writes it: the catalog's HBM rate against the
    // measured one (H100: datasheet 3,350 GB/s, measured 2,973; H200: 4,800
    // and 4,222).
    let gib = (1u64 << 30) as f64;
    let copy = OpCost { flops: 0.0, bytes: 2.0 * gib, dtype: Dtype::F32, class: OpClass::DataMovement };
    within("HBM copy GB/s", 2.0 * gib / spec.op_time_seconds(&copy, None) / 1e9, f["hbm_copy_gb_s_read_plus_write"].as_f64().unwrap(), 0.15);
    // Their host link is PCIe 5 x16 (line rate 63 GB/s, measured 55).
    let pcie = Catalog::builtin().link("pcie5-x16").unwrap().bytes_per_second() / 1e9;
    within("host to device GB/s", pcie, f["h2d_pinned_gb_s"].as_f64().unwrap(), 0.20);
}

/// How each GPU's host link was shared (`bench/gpu/pcie.py`).
const PCIE: [(&str, &str); 2] = [
    ("h100", include_str!("../../bench/gpu/h100-pcie-2026-11-26.json")),
    ("h200", include_str!("../../bench/gpu/h200-pcie-2026-11-26.json")),
];

/// The manual's GPU figures (docs/src/gpu-figures.md), which this test
/// writes when `FLOWLAB_WRITE_FIGURES` is set and otherwise checks: the
/// chapter quotes no figure that this run does not give.
const FIGURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/src/gpu-figures.md");

#[test]
fn single_gpu_training_steps_are_predicted_within_the_measured_error() {
    let mut page = String::from(
        "<!-- Written by `FLOWLAB_WRITE_FIGURES=1 cargo test -p flowlab-sim --test predictions_match_real_gpus`; that test fails while this differs from its run. -->\n\n\
         | GPU | model | batch | role | measured (CUDA graph) ms | predicted ms | error |\n|---|---|---|---|---|---|---|\n",
    );
    let mut summary = String::new();
    for (device, text) in MEASURED {
        let (rows, line) = steps_match(device, &measured(text));
        page.push_str(&rows);
        summary.push_str(&line);
    }
    page.push('\n');
    page.push_str(&summary);
    page.push_str("\nThe host link, 256 MiB pinned transfers, each on its own stream (aggregate GB/s from the common start to the last end):\n\n\
                   | GPU | one host-to-device alone | two host-to-device at once, together | one each way at once, together |\n|---|---|---|---|\n");
    for (device, text) in PCIE {
        let v = measured(text);
        let f = |k: &str| v[k].as_f64().unwrap();
        page.push_str(&format!("| {device} | {:.1} | {:.1} | {:.1} |\n", f("h2d_alone"), f("h2d_two_at_once_total"), f("h2d_and_d2h_at_once_total")));
    }
    if std::env::var_os("FLOWLAB_WRITE_FIGURES").is_some() {
        std::fs::write(FIGURES, &page).unwrap();
    }
    let committed = std::fs::read_to_string(FIGURES).unwrap_or_default();
    assert!(committed == page, "docs/src/gpu-figures.md is stale: run `FLOWLAB_WRITE_FIGURES=1 cargo test -p flowlab-sim --test predictions_match_real_gpus`\nfresh:\n{page}");
}

/// The (model, batch) points whose measurements set a catalog figure.
const CALIBRATION: [(&str, u64); 1] = [("resnet50", 32)];

/// Checks `device`'s steps; returns their table rows and a line with the
/// held-out and calibration MAPE.
fn steps_match(device: &str, m: &Value) -> (String, String) {
    let mut rows = String::new();
    let cl = VirtualCluster::parse(&format!("1x{device}")).unwrap();
    let (mut held_out, mut calibration) = (Vec::new(), Vec::new());
    for s in m["steps"].as_array().unwrap() {
        let model = s["model"].as_str().unwrap();
        // cuDNN's fused LSTM has no twin in the zoo.
        let Some(real) = s["graph_median_s"].as_f64().filter(|_| !model.ends_with("_cudnn")) else { continue };
        let batch = s["batch"].as_u64().unwrap() as usize;
        let built = flowlab_models::zoo::build(model, batch).unwrap();
        let sim = GraphSimulator::new(&built.graph, &cl, &SimOptions { step: Some(built.step()), ..Default::default() }).unwrap();
        let report = sim.simulate_indices(&vec![0u16; sim.graph().len()]).unwrap();
        let predicted = report.step_seconds;
        let e = (predicted - real) / real;
        eprintln!("{device} {model:17} b{batch:<4} measured {:8.3} ms  predicted {:8.3} ms  {:+.1}%", real * 1e3, predicted * 1e3, e * 100.0);
        assert!(e.abs() <= 0.25, "{device} {model} b{batch}: predicted {predicted} s, measured {real} s");
        // Layer norm fused as PyTorch runs it (before: +14% to +15% at b16).
        if model == "transformer_base" {
            assert!(e.abs() <= 0.10, "{device} {model} b{batch}: predicted {predicted} s, measured {real} s");
        }
        let calibrates = CALIBRATION.contains(&(model, batch as u64));
        if calibrates {
            calibration.push(e.abs());
        } else {
            held_out.push(e.abs());
        }
        let role = if calibrates { "calibration" } else { "held out" };
        rows.push_str(&format!("| {device} | {model} | {batch} | {role} | {:.2} | {:.2} | {:+.1}% |\n", real * 1e3, predicted * 1e3, e * 100.0));
        // Where the time goes: the convolutions' kernel time (torch.profiler)
        // against the simulator's conv-class time, on the points that did
        // not set the catalog's conv efficiency (H100, ResNet-50 b32).
        if let Some(conv) = s["by_class_s"]["conv"].as_f64().filter(|&c| c > 0.01 && !(device == "h100" && model == "resnet50" && batch == 32)) {
            let p = report.devices[0].op_seconds_by_class.get("conv").copied().unwrap_or(0.0);
            let ec = (p - conv) / conv;
            eprintln!("{device} {model:17} b{batch:<4} convolutions measured {:8.3} ms  predicted {:8.3} ms  {:+.1}%", conv * 1e3, p * 1e3, ec * 100.0);
            assert!(ec.abs() <= 0.15, "{device} {model} b{batch}: convolutions predicted {p} s, measured {conv} s");
        }
    }
    assert_eq!((held_out.len(), calibration.len()), (9, 1), "five twins at two batches");
    let mape = |e: &[f64]| e.iter().sum::<f64>() / e.len() as f64;
    let line = format!("- {device}: held-out MAPE {:.1}% over {} points; calibration {:.1}% over {}\n", mape(&held_out) * 100.0, held_out.len(), mape(&calibration) * 100.0, calibration.len());
    eprint!("{line}");
    assert!(mape(&held_out) <= 0.12, "{device} held-out MAPE {}", mape(&held_out));
    (rows, line)
}

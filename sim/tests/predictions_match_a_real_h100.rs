//! The graph-level simulator's GPU predictions against a real H100: the
//! measurements in `bench/gpu/h100-2026-11-26.json` (PyTorch twins of the
//! zoo models trained on an H100 SXM, f32 with TF32 off, each step replayed
//! from a CUDA graph; and the device's measured GEMM, HBM and PCIe rates,
//! see bench/gpu/README.md) are an independent reference. The bounds are
//! the accuracy measured when the file was taken (README, "Against a real
//! GPU"): a change to the cost model or the catalog that moves a prediction
//! further from the hardware fails here.

use flowlab_hw::{Catalog, Dtype, OpClass, OpCost};
use flowlab_sim::graph::{GraphSimulator, SimOptions, VirtualCluster};
use serde_json::Value;

const MEASURED: &str = include_str!("../../bench/gpu/h100-2026-11-26.json");

fn measured() -> Value {
    serde_json::from_str(MEASURED).expect("bench/gpu/h100-2026-11-26.json is JSON")
}

#[test]
fn the_catalog_h100_runs_gemms_and_copies_at_the_measured_rates() {
    let m = measured();
    let f = &m["figures"];
    let h100 = Catalog::builtin().device("h100").unwrap().clone();
    let rate = |n: f64, dtype: Dtype| {
        let cost = OpCost { flops: 2.0 * n * n * n, bytes: 3.0 * n * n * 4.0, dtype, class: OpClass::Matmul };
        2.0 * n * n * n / h100.op_time_seconds(&cost, None) / 1e12
    };
    let within = |what: &str, predicted: f64, measured: f64, tol: f64| {
        let e = (predicted - measured) / measured;
        eprintln!("{what}: predicted {predicted:.1}, measured {measured:.1}, error {:+.1}%", e * 100.0);
        assert!(e.abs() <= tol, "{what}: predicted {predicted}, measured {measured}");
    };
    within("f32 GEMM 4096^3 TFLOP/s", rate(4096.0, Dtype::F32), f["sgemm_4096_tflops"].as_f64().unwrap(), 0.10);
    within("bf16 GEMM 8192^3 TFLOP/s", rate(8192.0, Dtype::Bf16), f["bf16_gemm_8192_tflops"].as_f64().unwrap(), 0.10);
    // A 1 GiB copy reads and writes it: the catalog's HBM rate against the
    // measured one (datasheet 3,350 GB/s, measured 2,973: 13% fast).
    let gib = (1u64 << 30) as f64;
    let copy = OpCost { flops: 0.0, bytes: 2.0 * gib, dtype: Dtype::F32, class: OpClass::DataMovement };
    within("HBM copy GB/s", 2.0 * gib / h100.op_time_seconds(&copy, None) / 1e9, f["hbm_copy_gb_s_read_plus_write"].as_f64().unwrap(), 0.15);
    // An H100 SXM's host link is PCIe 5 x16 (line rate 63 GB/s, measured 55).
    let pcie = Catalog::builtin().link("pcie5-x16").unwrap().bytes_per_second() / 1e9;
    within("host to device GB/s", pcie, f["h2d_pinned_gb_s"].as_f64().unwrap(), 0.20);
}

#[test]
fn single_gpu_training_steps_are_predicted_within_the_measured_error() {
    let m = measured();
    let cl = VirtualCluster::parse("1xh100").unwrap();
    let mut errors = Vec::new();
    for s in m["steps"].as_array().unwrap() {
        let model = s["model"].as_str().unwrap();
        // cuDNN's fused LSTM has no twin in the zoo.
        let Some(real) = s["graph_median_s"].as_f64().filter(|_| !model.ends_with("_cudnn")) else { continue };
        let batch = s["batch"].as_u64().unwrap() as usize;
        let built = flowlab_sim::zoo::build(model, batch).unwrap();
        let sim = GraphSimulator::new(&built.graph, &cl, &SimOptions { step: Some(built.step()), ..Default::default() }).unwrap();
        let predicted = sim.simulate_indices(&vec![0u16; sim.graph().len()]).unwrap().step_seconds;
        let e = (predicted - real) / real;
        eprintln!("{model:17} b{batch:<4} measured {:8.3} ms  predicted {:8.3} ms  {:+.1}%", real * 1e3, predicted * 1e3, e * 100.0);
        assert!(e.abs() <= 0.35, "{model} b{batch}: predicted {predicted} s, measured {real} s");
        errors.push(e.abs());
    }
    assert_eq!(errors.len(), 10, "five twins at two batches");
    let mape = errors.iter().sum::<f64>() / errors.len() as f64;
    eprintln!("MAPE {:.1}%", mape * 100.0);
    assert!(mape <= 0.15, "MAPE {mape}");
}

//! `kind: validate` end to end: every point runs its placement in the real
//! engine and simulates the same placement; the engine's own transfer
//! counters must equal the simulator's, the error column must be what its
//! two step times say, and the summary must cover both predictors.

mod common;

use common::{describe, run_flowlab};

#[test]
fn validate_points_measure_simulate_and_summarize() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("v.yaml");
    std::fs::write(
        &file,
        "name: v\nkind: validate\nseed: 3\nbase:\n  model: mlp\n  sizes: { hidden: 64 }\n  batch: 16\n  devices: 2xcpu\n  threads: 1\n  \
         placer: m_etf\n  comm: f32\n  link: { gbps: 10, latency_us: 20 }\n  predictor: profile\n  steps: 3\n  warmup: 1\n  fallback: false\n\
         sweep:\n  placer: [single_device, round_robin, m_topo]\n  comm: [f32, int8]\n  predictor: [roofline, profile]\n",
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let out = run_flowlab(&["run", file.to_str().unwrap(), "--out", out_dir.to_str().unwrap(), "--jobs", "2"]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("run one at a time"), "--jobs 2 is refused for timed points: {stdout}");
    assert!(stdout.contains("roofline: MAPE") && stdout.contains("profile: MAPE"), "{stdout}");

    let rows: Vec<serde_json::Value> = std::fs::read_to_string(out_dir.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // m_topo's own placement (`fallback: false`): its even memory share
    // splits the MLP, which one device would beat in the simulator, so with
    // the fallback it would run on one device
    assert_eq!(rows.len(), 12);
    let mut measured_by_placement = std::collections::HashMap::new();
    for r in &rows {
        assert!(r["error"].is_null(), "{r}");
        let m = &r["metrics"];
        let f = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{k} in {m}"));
        let placer = r["params"]["placer"].as_str().unwrap();
        // The engine's counters against the simulator's transfers.
        assert_eq!(f("measured_transfers"), f("predicted_transfers"), "{placer}: {m}");
        assert_eq!(f("measured_transfer_bytes"), f("predicted_transfer_bytes"), "{placer}: {m}");
        if placer == "single_device" {
            assert_eq!((f("measured_transfers"), f("devices_used")), (0.0, 1.0), "{m}");
        } else {
            assert!(f("measured_transfers") > 0.0 && f("devices_used") == 2.0, "{m}");
        }
        let (med, p10, p90, pred) = (f("measured_step_s"), f("measured_p10_s"), f("measured_p90_s"), f("predicted_step_s"));
        assert!(p10 <= med && med <= p90 && med > 0.0 && pred > 0.0, "{m}");
        assert!((f("error") - (pred - med) / med).abs() < 1e-9, "{m}");
        assert!((f("abs_error") - f("error").abs()).abs() < 1e-12, "{m}");
        // The reference: the same model with every node on the first
        // device, timed in turn with the point's steps.
        let times = |k: &str| -> Vec<f64> { r["series"][k].as_array().unwrap_or_else(|| panic!("{k}")).iter().filter_map(|v| v.as_f64()).collect() };
        let (steps, reference) = (times("measured_step_times_s"), times("reference_step_times_s"));
        assert_eq!(steps.len(), reference.len(), "one reference step beside each step");
        let mut ratios: Vec<f64> = steps.iter().zip(&reference).map(|(t, r)| t / r).collect();
        ratios.sort_by(f64::total_cmp);
        let mid = ratios.len() / 2;
        let median = if ratios.len() % 2 == 1 { ratios[mid] } else { 0.5 * (ratios[mid - 1] + ratios[mid]) };
        assert!((f("measured_relative") - median).abs() < 1e-12, "{m}");
        assert!(f("measured_relative_p10") <= f("measured_relative") && f("measured_relative") <= f("measured_relative_p90"), "{m}");
        assert!(f("reference_step_s") > 0.0 && f("reference_error").is_finite() && f("predicted_relative") > 0.0, "{m}");
        if r["params"]["predictor"] == "profile" {
            // A profile of the very graph prices every node the step runs.
            assert_eq!(f("fallback_nodes"), 0.0, "{m}");
        }
        // Predictors that give the same placement share one measurement,
        // and a placement that moves no tensor is one run for every format.
        if placer == "single_device" {
            let prev = measured_by_placement.insert(placer, med);
            assert!(prev.is_none_or(|p| p == med), "one placement, one measurement: {prev:?} vs {med}");
        }
    }
    // int8 sends a quarter of the f32 bytes plus a scale per block.
    let bytes = |comm: &str| {
        rows.iter()
            .find(|r| r["params"]["placer"] == "round_robin" && r["params"]["comm"] == comm && r["params"]["predictor"] == "roofline")
            .map(|r| r["metrics"]["measured_transfer_bytes"].as_f64().unwrap())
            .unwrap()
    };
    assert!(bytes("int8") < 0.3 * bytes("f32") && bytes("int8") > 0.25 * bytes("f32"), "{} vs {}", bytes("int8"), bytes("f32"));

    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap()).unwrap();
    let tables = summary["tables"].as_array().unwrap();
    // The table of profiles taken at another host speed comes and goes with
    // this host's speed between a profile and its points; the others are
    // always there.
    const DRIFT: &str = "Profiles taken at another host speed";
    let titles: Vec<&str> = tables.iter().map(|t| t["title"].as_str().unwrap()).collect();
    let always: Vec<&str> = titles.iter().copied().filter(|t| *t != DRIFT).collect();
    assert_eq!(
        always,
        [
            "Prediction error per predictor",
            "Prediction error by what the placement tests",
            "Order of the distinct split placements: Kendall's tau",
            "Order of placements: Kendall's tau between measured and predicted step times",
            "Worst points"
        ],
        "{summary}"
    );
    let mape = &tables[0];
    let preds: Vec<&str> = mape["rows"].as_array().unwrap().iter().map(|r| r[0].as_str().unwrap()).collect();
    assert_eq!(preds, ["profile", "roofline"]);
    let html = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    assert!(html.contains("Prediction error per predictor"), "the page shows the summary");
    if let Some(drift) = tables.iter().find(|t| t["title"] == DRIFT) {
        let models: Vec<&str> = drift["rows"].as_array().unwrap().iter().map(|r| r[0].as_str().unwrap()).collect();
        assert_eq!(models, ["model=mlp batch=16"], "{summary}");
        assert!(html.contains(DRIFT), "the page shows the drift table");
    }
}

#[test]
fn a_step_this_machine_cannot_hold_is_refused_before_the_engine_allocates_it() {
    // ResNet-50 at batch 65,536: terabytes of activations (it aborted on a
    // 39 GB allocation); refused from the simulator's count, no file written.
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("p.json");
    let out = run_flowlab(&["profile", "--model", "resnet50", "--batch", "65536", "--steps", "1", "--out", out_file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid parameter `batch`: resnet50 at batch 65536 holds about") && err.contains("GB of live tensors at its peak"),
        "{}",
        describe(&out)
    );
    assert!(!out_file.exists());
}

/// `flowlab diagnose` as a user runs it: two `Session`s'
/// kernels alone and together (each op's time a positive number in both),
/// and a misspelt placer refused by name before anything is measured.
#[test]
fn diagnose_compares_kernels_and_names_a_bad_placer() {
    let out = run_flowlab(&["diagnose", "sessions", "--model", "mlp", "--batch", "8"]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("mlp b8, kernels per step: alone "), "{stdout}");
    let matmul = stdout.lines().find(|l| l.trim_start().starts_with("MatMul:")).unwrap_or_else(|| panic!("no MatMul line: {stdout}"));
    let times: Vec<f64> = matmul.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    assert!(times.len() == 2 && times.iter().all(|&t| t > 0.0), "{matmul}");

    let out = run_flowlab(&["diagnose", "split", "--placer", "fastest"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("split step: unknown placer `fastest` (valid: single_device,"), "{stderr}");
}

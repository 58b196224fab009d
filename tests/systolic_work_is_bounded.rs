//! `flowlab systolic` never runs for long silently: a layer of 2^48 folds
//! finishes through the closed-form replay, and the cycle-by-cycle model
//! refuses work beyond its cap, naming the estimate. A SCALE-Sim `.cfg`'s
//! per-operand bank bandwidths change the result in both counting modes.

mod common;

use common::{describe, run_flowlab};

#[test]
fn a_layer_of_2_pow_48_folds_finishes_and_the_cycle_model_refuses_huge_work() {
    let out = run_flowlab(&["systolic", "--array", "1x1", "--dataflow", "os", "--gemm", "16777216,16777216,1", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    // 2^48 one-cycle folds, every cycle one MAC.
    assert_eq!(v["compute_cycles"], 1u64 << 48, "{v}");
    assert_eq!(v["macs"], 1u64 << 48, "{v}");

    let out = run_flowlab(&["systolic", "--array", "8x8", "--dataflow", "os", "--gemm", "4096,4096,4096", "--cycle-accurate"]);
    assert!(!out.status.success(), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing the cycle-by-cycle model: 262144 folds x 4114 cycles x 64 PEs = 69021466624 PE-steps"),
        "{}",
        describe(&out)
    );
}

#[test]
fn scalesim_cfg_bank_bandwidths_feed_the_ifmap_and_filter() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/hw/configs/scale.cfg")).unwrap();
    let slow = base.replace("IfmapSRAMBankBandwidth: 10", "IfmapSRAMBankBandwidth: 1");
    assert_ne!(slow, base);
    let mut physical = Vec::new();
    let mut compat = Vec::new();
    for (name, text) in [("fast.cfg", &base), ("slow.cfg", &slow)] {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        for (mode, out) in [("--physical", &mut physical), ("--scalesim-compat", &mut compat)] {
            let run = run_flowlab(&["systolic", "--config", p.to_str().unwrap(), "--gemm", "128,256,512", "--json", mode]);
            assert!(run.status.success(), "{}", describe(&run));
            let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
            let field = |k: &str| v[k].as_u64().unwrap();
            out.push((field("stall_cycles"), field("prefetch_cycles"), field("total_cycles")));
        }
    }
    // Physical: 524,288 ifmap words at 1 word/cycle bound the slow run from below.
    assert!(physical[1].0 + physical[1].1 + 18_367 >= 524_288, "{physical:?}");
    assert!(physical[0].0 + physical[0].1 < 60_000, "{physical:?}");
    // Compat: SCALE-Sim 3.0.0's Stall and Total Cycles for the base config
    // (bench/scalesim/README.md), and more stalls with the slower ifmap.
    assert_eq!((compat[0].0, compat[0].2), (271_386, 289_753), "{compat:?}");
    assert!(compat[1].0 > compat[0].0, "{compat:?}");
}

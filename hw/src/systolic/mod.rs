//! A systolic-array model (the TPU's matrix unit) following SCALE-Sim's
//! conventions: output-, weight- and input-stationary dataflows on an R x C
//! array, convolutions lowered to GEMM by im2col, folding, double-buffered
//! SRAMs and a DRAM interface with finite bandwidth.
//!
//! Two simulators give identical reports: [`simulate_layer`] computes the
//! per-fold cycles in closed form (whole networks in milliseconds) and
//! [`simulate_layer_cycles`] steps every PE register every cycle (small
//! arrays; it also checks its own data path). Only the array is stepped:
//! both replay the same SRAM/DRAM model (`memory.rs`) over their fold
//! cycles, so their agreement checks fold cycles and SRAM access counts, not
//! stalls or DRAM traffic; those have their own closed-form tests. By default both count
//! physically (every cycle; a convolution's floor-rounded output size). With
//! `ArrayConfig::scalesim_compat` (on for configs read from a SCALE-Sim
//! `.cfg`) they follow SCALE-Sim's conventions, and in the no-stall case the
//! compute cycles equal SCALE-Sim's "Total Cycles" for the same array,
//! dataflow and layer (`bench/scalesim/compare.py` checks on ResNet-50).
//! With a DRAM bandwidth as well, compat mode replays SCALE-Sim 3.0.0's own
//! memory system line by line (`scalesim.rs`) instead of `memory.rs`, so
//! total and stall cycles and DRAM traffic equal SCALE-Sim's; the physical
//! model stays the default (`bench/scalesim/README.md` says where and why
//! the two differ).

mod config;
mod cycle;
mod fast;
mod layer;
mod mapping;
mod memory;
mod report;
mod scalesim;
mod bench;

pub use bench::{bench_records, BenchRecord};
pub use config::{ArrayConfig, Dataflow, MAX_ARRAY_DIM};
pub use cycle::{simulate_layer_cycles, MAX_CYCLE_MODEL_PES, MAX_CYCLE_MODEL_WORK};
pub use fast::simulate_layer;
pub use layer::{read_topology_csv, Layer, MAX_LAYER_DIM};
pub use report::LayerReport;
pub use scalesim::MAX_REPLAY_WORK;

/// The ResNet-50 topology shipped in `hw/topologies/resnet50.csv`.
pub fn resnet50() -> Vec<Layer> {
    const TEXT: &str = include_str!("../../topologies/resnet50.csv");
    match layer::parse_topology(TEXT, std::path::Path::new("<builtin>/hw/topologies/resnet50.csv")) {
        Ok(l) => l,
        // Checked by a unit test; reaching this is a build defect.
        Err(e) => panic!("built-in ResNet-50 topology is invalid: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::mapping::Mapping;
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn cfg(r: u32, c: u32, df: Dataflow) -> ArrayConfig {
        ArrayConfig::new(r, c, df).unwrap()
    }

    /// Physical mode, 8x4 array, GEMM M=20 N=10 K=12, ample SRAM, counted by
    /// hand from the fold structure: os 3x3 folds of T+R+C-2 = 22 cycles
    /// (198), ws 2x3 folds of 2R+C+T-2 = 38 (228), is 2x5 folds of 28 (280);
    /// mapping efficiency Sr*Sc over the folded area: 200/288, 120/192,
    /// 240/320. (SCALE-Sim's numbers for compat mode are in the next test.)
    #[test]
    fn physical_compute_cycles_follow_the_fold_structure() {
        let l = Layer::gemm("L1", 20, 10, 12).unwrap();
        for (df, cycles, eff) in [(Dataflow::Os, 198, 0.694444), (Dataflow::Ws, 228, 0.625), (Dataflow::Is, 280, 0.75)] {
            let r = simulate_layer(&cfg(8, 4, df), &l).unwrap();
            assert_eq!(r.compute_cycles, cycles, "{df}");
            assert_eq!(r.stall_cycles, 0);
            assert!((r.mapping_efficiency - eff).abs() < 1e-6, "{df}: {}", r.mapping_efficiency);
            assert_eq!(r.macs, 2400);
            assert_eq!(simulate_layer_cycles(&cfg(8, 4, df), &l).unwrap(), r);
        }
    }

    /// SCALE-Sim 3.0.0 on a 4x4 array, ample SRAM, no stall ("Total Cycles",
    /// "Overall Util %"): a stride-2 3x3 conv on an 8x8x2 IFMAP with 4 filters
    /// (H - F = 5 is odd, so SCALE-Sim sees 4x4 outputs where the convolution
    /// has 3x3) and GEMM M=20 N=10 K=12. Compat mode reproduces SCALE-Sim's
    /// numbers exactly; the physical mode counts every cycle of the 3x3-output
    /// convolution: os 3 folds x (18+4+4-2), ws 5 x (8+4+9-2), is 15 x 14.
    #[test]
    fn scalesim_compat_mode_equals_scalesim_and_physical_mode_counts_every_cycle() {
        let conv = Layer::conv("c", 8, 8, 3, 3, 2, 4, 2).unwrap();
        let gemm = Layer::gemm("g", 20, 10, 12).unwrap();
        let cases = [
            (Dataflow::Os, &conv, 95, 72, 75.78947368421052),
            (Dataflow::Ws, &conv, 129, 95, 55.81395348837209),
            (Dataflow::Is, &conv, 279, 210, 25.806451612903224),
            (Dataflow::Os, &gemm, 269, 270, 55.762081784386616),
            (Dataflow::Ws, &gemm, 269, 270, 55.762081784386616),
            (Dataflow::Is, &gemm, 299, 300, 50.16722408026756),
        ];
        for (df, layer, scalesim, physical, util_pct) in cases {
            let mut c = cfg(4, 4, df);
            let phys = simulate_layer(&c, layer).unwrap();
            assert_eq!(phys.compute_cycles, physical, "{df} {}", layer.name);
            c.scalesim_compat = true;
            let compat = simulate_layer(&c, layer).unwrap();
            assert_eq!((compat.compute_cycles, compat.stall_cycles, compat.total_cycles), (scalesim, 0, scalesim), "{df} {}", layer.name);
            assert!((100.0 * compat.utilization - util_pct).abs() < 1e-9, "{df} {}: {}", layer.name, compat.utilization);
            assert_eq!(simulate_layer_cycles(&c, layer).unwrap(), compat, "{df} {}", layer.name);
        }
        let mut c = cfg(4, 4, Dataflow::Os);
        assert_eq!(simulate_layer(&c, &conv).unwrap().m, 9);
        c.scalesim_compat = true;
        assert_eq!(simulate_layer(&c, &conv).unwrap().m, 16);
        // A one-cycle layer: last-cycle index 0, utilization stays finite.
        let one = simulate_layer(&cfg(1, 1, Dataflow::Os), &Layer::gemm("g", 1, 1, 1).unwrap()).unwrap();
        assert_eq!(one.compute_cycles, 1);
        c = cfg(1, 1, Dataflow::Os);
        c.scalesim_compat = true;
        let one = simulate_layer(&c, &Layer::gemm("g", 1, 1, 1).unwrap()).unwrap();
        assert_eq!((one.compute_cycles, one.utilization), (0, 1.0));
    }

    #[test]
    fn cycle_model_computes_the_matrix_product() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for _ in 0..30 {
            let (r, c) = (rng.random_range(1..7u32), rng.random_range(1..7u32));
            let (m, n, k) = (rng.random_range(1..20u64), rng.random_range(1..20u64), rng.random_range(1..20u64));
            let a: Vec<i32> = (0..m * k).map(|_| rng.random_range(-9..10)).collect();
            let b: Vec<i32> = (0..k * n).map(|_| rng.random_range(-9..10)).collect();
            let mut want = vec![0i64; (m * n) as usize];
            for i in 0..m {
                for j in 0..n {
                    want[(i * n + j) as usize] =
                        (0..k).map(|x| i64::from(a[(i * k + x) as usize]) * i64::from(b[(x * n + j) as usize])).sum();
                }
            }
            for df in [Dataflow::Os, Dataflow::Ws, Dataflow::Is] {
                let map = Mapping::new(&cfg(r, c, df), &Layer::gemm("g", m, n, k).unwrap());
                let mut got = vec![0i64; (m * n) as usize];
                let fa = |i: u64, x: u64| a[(i * k + x) as usize];
                let fb = |x: u64, j: u64| b[(x * n + j) as usize];
                cycle::run(&map, &fa, &fb, Some(&mut got)).unwrap();
                assert_eq!(got, want, "{df} on {r}x{c}, gemm {m},{n},{k}");
            }
        }
    }

    #[test]
    fn fast_path_equals_cycle_model_on_random_shapes() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (mut agreed, mut stalled, mut spilled) = (0, 0, 0);
        for case in 0..300 {
            let df = [Dataflow::Os, Dataflow::Ws, Dataflow::Is][rng.random_range(0..3)];
            let mut c = cfg(rng.random_range(1..10), rng.random_range(1..10), df);
            c.ifmap_sram_kib = rng.random_range(1..4);
            c.filter_sram_kib = rng.random_range(1..4);
            c.ofmap_sram_kib = rng.random_range(1..4);
            c.dram_words_per_cycle = if rng.random_bool(0.2) { None } else { Some(rng.random_range(1..6)) };
            c.word_bytes = [1, 2, 4][rng.random_range(0..3)];
            c.scalesim_compat = rng.random_bool(0.3);
            let layer = if rng.random_bool(0.5) {
                Layer::gemm("g", rng.random_range(1..48), rng.random_range(1..48), rng.random_range(1..48)).unwrap()
            } else {
                let f = rng.random_range(1..4);
                let h = rng.random_range(f..f + 8);
                Layer::conv("c", h, h + 1, f, f, rng.random_range(1..6), rng.random_range(1..12), rng.random_range(1..3)).unwrap()
            };
            match (simulate_layer(&c, &layer), simulate_layer_cycles(&c, &layer)) {
                (Ok(fast), Ok(slow)) => {
                    assert_eq!(fast, slow, "case {case}: {c:?} {layer:?}");
                    agreed += 1;
                    stalled += usize::from(fast.stall_cycles > 0);
                    spilled += usize::from(fast.ofmap_dram_bytes_read > 0);
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                (a, b) => panic!("case {case}: fast {a:?} vs cycle {b:?}"),
            }
        }
        // The shapes exercise every regime: most fit, many stall, some spill.
        assert!(agreed >= 250 && stalled >= 50 && spilled >= 5, "{agreed} agreed, {stalled} stalled, {spilled} spilled");
    }

    /// ws, 4x4 array, GEMM M=2 N=4 K=16 at 1 word/cycle: four 12-cycle folds,
    /// each needing a fresh 16-word filter tile (16 cycles): 16 cycles of
    /// cold prefetch, then 4 stall cycles before each later fold; the 8
    /// outputs drain in 8 cycles.
    #[test]
    fn stall_cycles_closed_form() {
        let mut c = cfg(4, 4, Dataflow::Ws);
        c.ifmap_sram_kib = 1;
        c.filter_sram_kib = 1;
        c.ofmap_sram_kib = 1;
        c.dram_words_per_cycle = Some(1);
        let r = simulate_layer(&c, &Layer::gemm("g", 2, 4, 16).unwrap()).unwrap();
        assert_eq!((r.compute_cycles, r.stall_cycles, r.total_cycles), (48, 12, 60));
        assert_eq!((r.prefetch_cycles, r.drain_cycles, r.end_to_end_cycles), (16, 8, 84));
        assert_eq!((r.ifmap_dram_bytes_read, r.filter_dram_bytes_read, r.ofmap_dram_bytes_written), (32, 64, 8));
        assert_eq!((r.ifmap_sram_reads, r.filter_sram_reads, r.ofmap_sram_writes, r.ofmap_sram_reads), (32, 64, 32, 24));
        assert!((r.utilization - 128.0 / (16.0 * 60.0)).abs() < 1e-12);
        assert!((r.time_seconds - 84e-9).abs() < 1e-18);
        // A 2-word/cycle filter port (SCALE-Sim's FilterSRAMBankBandwidth):
        // 16 filter words and 8 ifmap words now take 8 cycles each, under the
        // 12-cycle folds: only the 8-cycle prefetch and the 8-word drain remain.
        c.filter_dram_words_per_cycle = Some(2);
        let r = simulate_layer(&c, &Layer::gemm("g", 2, 4, 16).unwrap()).unwrap();
        assert_eq!((r.compute_cycles, r.stall_cycles, r.prefetch_cycles, r.drain_cycles), (48, 0, 8, 8));
        c.set_dram_bandwidth(None);
        let r = simulate_layer(&c, &Layer::gemm("g", 2, 4, 16).unwrap()).unwrap();
        assert_eq!((r.stall_cycles, r.prefetch_cycles, r.drain_cycles), (0, 0, 0));
    }

    #[test]
    fn bad_input_is_rejected_with_clear_errors() {
        let mut c = cfg(32, 32, Dataflow::Ws);
        c.filter_sram_kib = 1;
        let e = simulate_layer(&c, &Layer::gemm("g", 64, 64, 64).unwrap()).unwrap_err().to_string();
        assert_eq!(
            e,
            "filter SRAM too small: one fold needs 1024 words in one half of the double buffer, but 1 KiB holds 512 words per half"
        );
        assert_eq!(simulate_layer_cycles(&c, &Layer::gemm("g", 64, 64, 64).unwrap()).unwrap_err().to_string(), e);
        let e = Layer::gemm("g", 0, 4, 4).unwrap_err().to_string();
        assert_eq!(e, "invalid parameter `M`: must be between 1 and 16777216, got 0");
        let e = ArrayConfig::new(5000, 8, Dataflow::Os).unwrap_err().to_string();
        assert_eq!(e, "invalid parameter `ArrayHeight`: must be between 1 and 4096, got 5000");
        let big = cfg(1024, 1024, Dataflow::Os);
        let e = simulate_layer_cycles(&big, &Layer::gemm("g", 4, 4, 4).unwrap()).unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid parameter `ArrayHeight x ArrayWidth`: the cycle-by-cycle model takes at most 262144 PEs, got 1024x1024; use the fast path"
        );
        assert!(simulate_layer(&big, &Layer::gemm("g", 4, 4, 4).unwrap()).is_ok());
        c.rows = 0;
        assert!(simulate_layer(&c, &Layer::gemm("g", 4, 4, 4).unwrap()).is_err());
        // The cycle model refuses work beyond its cap, naming the estimate:
        // 512 x 512 folds of 4096 + 14 cycles (+4 of flush) on 64 PEs.
        let e = simulate_layer_cycles(&cfg(8, 8, Dataflow::Os), &Layer::gemm("g", 4096, 4096, 4096).unwrap())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "refusing the cycle-by-cycle model: 262144 folds x 4114 cycles x 64 PEs = 69021466624 PE-steps (layer `g`), \
             beyond the limit of 1073741824 PE-steps (a few seconds); use the fast path, which agrees with it"
        );
    }

    #[test]
    fn shipped_configs_load() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let c = ArrayConfig::from_scalesim_cfg(root.join("configs/scale.cfg")).unwrap();
        assert_eq!((c.rows, c.cols, c.dataflow, c.ifmap_sram_kib, c.dram_words_per_cycle), (32, 32, Dataflow::Os, 64, Some(10)));
        let t = ArrayConfig::from_yaml_file(root.join("configs/tpu_v1.yaml")).unwrap();
        assert_eq!((t.rows, t.dataflow, t.clock_mhz), (256, Dataflow::Ws, 700.0));
        for l in resnet50() {
            simulate_layer(&t, &l).unwrap();
        }
    }

    #[test]
    fn resnet50_topology_loads() {
        let layers = resnet50();
        assert_eq!(layers.len(), 54);
        assert_eq!(layers[0].gemm_dims(), (112 * 112, 64, 7 * 7 * 3));
        let macs: u64 = layers.iter().map(Layer::macs).sum();
        // ResNet-50 is about 4.1 GMACs per 224x224 image (convolutions + FC).
        assert!((4.0e9..4.2e9).contains(&(macs as f64)), "{macs}");
        let r = simulate_layer(&cfg(128, 128, Dataflow::Ws), &layers[0]).unwrap();
        assert!(r.utilization > 0.0 && r.utilization <= 1.0);
    }
}

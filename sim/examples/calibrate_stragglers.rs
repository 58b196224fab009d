//! Calibrates a straggler model against the TensorFlow paper's Figure 8
//! (Inception-v3, 17 PS tasks, 10 Gbit/s fat-tree): synchronous steps with a
//! median about 10% longer than asynchronous ones (50 workers), and with
//! 50 workers plus b backups the normalized speedup t(0)/t(b) x 50/(50+b)
//! best at b = 3 (+9.5%). Prints, per straggler model given as YAML on the
//! command line (default: the pair once fitted, docs/logs/cluster-simulator.md), the
//! sync/async median ratio and the normalized speedup for b = 0..5.
//!
//! cargo run --release -p flowlab-sim --example calibrate_stragglers -- \
//!   "{ dist: transient, mean_interval_s: 60, duration_s: 6, factor: 1.6, jitter_sigma: 0.05 }"
//!
//! `--model=YAML` replaces the workload (default: the catalog's
//! `inception_v3`), e.g. `--model="{ dense_params: 23800000, compute_s: 0.85,
//! examples_per_step: 32, step_overhead_us: 450000, overlap: true }"`.

use flowlab_sim::cluster::{simulate, ClusterConfig, ModelRef, Straggler, Strategy, TopologyKind};

fn run(model: &ModelRef, straggler: &Straggler, strategy: Strategy, steps: u64) -> Result<f64, flowlab_sim::SimError> {
    let mut c = ClusterConfig {
        model: model.clone(),
        workers: 50,
        ps: 17,
        strategy,
        straggler: straggler.clone(),
        steps,
        ..ClusterConfig::default()
    };
    c.network.topology = TopologyKind::FatTree;
    let r = simulate(&c, 42)?;
    Ok(r.step_percentile(0.5))
}

fn main() {
    let mut model = ModelRef::Name("inception_v3".into());
    if let Some(m) = std::env::args().find_map(|a| a.strip_prefix("--model=").map(str::to_string)) {
        model = match serde_saphyr::from_str(&m) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("error: --model {m}: {e}");
                std::process::exit(2);
            }
        };
    }
    let models: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--model=")).collect();
    let models = if models.is_empty() {
        vec!["{ dist: transient, mean_interval_s: 300, duration_s: 20, factor: 1.25, jitter_sigma: 0.03 }".to_string()]
    } else {
        models
    };
    for m in models {
        let s: Straggler = match serde_saphyr::from_str(&m) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {m}: {e}");
                std::process::exit(2);
            }
        };
        let result = (|| -> Result<(), flowlab_sim::SimError> {
            let sync = run(&model, &s, Strategy::Sync { backup: 0 }, 200)?;
            // Async: 200 steps of each worker (a step commits `workers` gradients).
            let asy = run(&model, &s, Strategy::Async {}, 200)?;
            let mut speedups = Vec::new();
            for b in 0..=5u32 {
                let tb = run(&model, &s, Strategy::Sync { backup: b }, 200)?;
                speedups.push(sync / tb * 50.0 / (50.0 + f64::from(b)));
            }
            let best = speedups.iter().enumerate().fold((0, 0.0), |a, (i, &v)| if v > a.1 { (i, v) } else { a });
            println!(
                "{m}\n  sync p50 {sync:.3} s, async p50 {asy:.3} s, sync/async {:.3}; normalized speedup b=0..5 {:?}; best b = {} ({:+.1}%)",
                sync / asy,
                speedups.iter().map(|v| (v * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
                best.0,
                (best.1 - 1.0) * 100.0
            );
            Ok(())
        })();
        if let Err(e) = result {
            eprintln!("error: {e}");
        }
    }
}

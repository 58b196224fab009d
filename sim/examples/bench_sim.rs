//! The simulator's benchmark without the CLI: prints `flowlab_sim::bench`
//! records as JSON lines (`--quick` for the small sizes). Same numbers as
//! `flowlab bench sim --json`, buildable while other crates are mid-change.
//! `--ps` runs only the issue-4 case (200 workers + 17 PS, 1,000 sync steps,
//! flow-level) and prints its wall time, simulated seconds and
//! recomputations: the case to profile and to compare before/after.

use flowlab_sim::cluster::{simulate, ClusterConfig, ModelRef, Straggler, Strategy};

fn ps_only() -> Result<(), flowlab_sim::SimError> {
    let cfg = ClusterConfig {
        model: ModelRef::Name("inception_v3".into()),
        workers: 200,
        ps: 17,
        strategy: Strategy::Sync { backup: 0 },
        straggler: Straggler::Lognormal { sigma: 0.3 },
        steps: 1000,
        ..ClusterConfig::default()
    };
    let start = std::time::Instant::now();
    let r = simulate(&cfg, 1)?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{{\"case\":\"ps_sync_1000_steps_flow\",\"seconds\":{secs},\"sim_seconds\":{},\"recomputations\":{}}}",
        r.sim_time_s, r.network_recomputations
    );
    Ok(())
}

fn main() {
    if std::env::args().any(|a| a == "--ps") {
        if let Err(e) = ps_only() {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    match flowlab_sim::bench::bench(quick) {
        Ok(records) => {
            for r in records {
                match serde_json::to_string(&r) {
                    Ok(s) => println!("{s}"),
                    Err(e) => eprintln!("error: {e}"),
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

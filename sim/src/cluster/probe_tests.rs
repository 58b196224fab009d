use super::*;

fn yaml(s: &str) -> ClusterConfig {
    serde_saphyr::from_str(s).unwrap()
}

#[test]
#[ignore]
fn probe() {
    for model in [] as [&str; 0] {
        for w in [1, 10, 50, 100] {
            let c = yaml(&format!("model: {model}\nworkers: {w}\nps: 16\nsteps: 10\n"));
            let t = std::time::Instant::now();
            let r = simulate(&c, 1).unwrap();
            println!("{model} w={w} p50={:.4} ({:?})", r.metrics()["step_p50_s"], t.elapsed());
        }
    }
    for b in 0..1 {
        let c = yaml(&format!("model: inception_v3\nworkers: 50\nps: 17\nstrategy: {{ sync: {{ backup: {b} }} }}\nnetwork: {{ link_gbps: 10 }}\nstraggler: {{ dist: lognormal, sigma: 0.3 }}\nsteps: 40\n"));
        let t = std::time::Instant::now();
        let r = simulate(&c, 1).unwrap();
        let m = r.metrics();
        println!("b={b} p50={:.4} speedup={:.4} thr={:.1} ({:?})", m["step_p50_s"], m["normalized_speedup"], m["throughput"], t.elapsed());
    }
    for w in [] as [u32;0] {
        let c = yaml(&format!("model: inception_v3\nworkers: {w}\nps: 17\nnetwork: {{ link_gbps: 10 }}\nstraggler: {{ dist: lognormal, sigma: 0.3 }}\nsteps: 15\n"));
        let a = yaml(&format!("model: inception_v3\nworkers: {w}\nps: 17\nstrategy: {{ async: {{}} }}\nnetwork: {{ link_gbps: 10 }}\nstraggler: {{ dist: lognormal, sigma: 0.3 }}\nsteps: 15\n"));
        let t = std::time::Instant::now();
        let r = simulate(&c, 1).unwrap().metrics();
        let ra = simulate(&a, 1).unwrap().metrics();
        println!("w={w} sync thr={:.1} p50={:.3} p90={:.3} async thr={:.1} p50={:.3} p90={:.3} stale={:.2} ({:?})", r["throughput"], r["step_p50_s"], r["step_p90_s"], ra["throughput"], ra["step_p50_s"], ra["step_p90_s"], ra["staleness_mean"], t.elapsed());
    }
}

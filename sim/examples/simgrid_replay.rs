//! Replays the traffic of `flowlab bench sim`'s parameter-server case (200
//! workers + 17 PS tasks, synchronous, the inception_v3 workload) on one
//! topology through the flow-level model alone, and prints it as one JSON
//! line for `bench/simgrid/replay.py`, which replays the same flows in
//! SimGrid on the same links and routes. Both sides then do the same work:
//! max-min sharing of the same flows started at the same instants.
//!
//! ```text
//! cargo run --release -p flowlab-sim --example simgrid_replay -- torus2d 200 2 > /tmp/torus.json
//! /usr/bin/python3 bench/simgrid/replay.py /tmp/torus.json
//! ```
//!
//! Arguments: topology (star, fat_tree, clos, torus2d, hierarchical),
//! workers, steps (default torus2d 200 2); or the path of a file holding
//! one cluster point (the `base:` of a `kind: cluster` experiment, as YAML:
//! `model`, `workers`, `ps`, `network`, ...) to replay that point's traffic
//! instead, with `--seed N` (default 1). Each flow is printed with the
//! instant its last byte left (its arrival less its path latency): SimGrid
//! runs with zero latency, and the flow model drains a flow independently of
//! its latency, which only delays the arrival.

use flowlab_sim::bench::ps_config_on;
use flowlab_sim::cluster::{simulate_traffic, ClusterConfig, TopologyKind};
use flowlab_sim::network::{FlowNetwork, FlowStart, NetworkModel, Topology};
use flowlab_sim::SimError;
use std::collections::BTreeMap;
use std::time::Instant;

/// Replays `flows` (in start order) on `topology`; returns each flow's drain
/// end in seconds and the recomputations it took.
fn replay(topology: Topology, flows: &[FlowStart]) -> Result<(Vec<f64>, u64), SimError> {
    let mut net = FlowNetwork::new(topology);
    let mut ends = vec![f64::NAN; flows.len()];
    let mut done = Vec::new();
    let mut next = 0;
    loop {
        let start = flows.get(next).map(|f| f.at);
        let t = match (start, net.next_event_time()) {
            (None, None) => break,
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (Some(a), Some(b)) => a.min(b),
        };
        done.clear();
        net.advance(t, &mut done);
        for &tag in &done {
            let f = &flows[tag as usize];
            let latency = net.path_latency(f.src, f.dst)?;
            ends[tag as usize] = (t - latency).as_secs_f64();
        }
        while next < flows.len() && flows[next].at == t {
            let f = &flows[next];
            net.start_flow(t, f.src, f.dst, f.bytes, next as u64)?;
            next += 1;
        }
    }
    Ok((ends, net.recomputations()))
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let first = args.first().map_or("torus2d", String::as_str);
    let number = |i: usize, default: u64| -> Result<u64, String> {
        args.get(i).map_or(Ok(default), |s| s.parse().map_err(|_| format!("argument {}: `{s}` is not a count", i + 1)))
    };
    let (name, cfg, seed) = if std::path::Path::new(first).is_file() {
        let text = std::fs::read_to_string(first).map_err(|e| format!("{first}: {e}"))?;
        let cfg: ClusterConfig = serde_saphyr::from_str(&text).map_err(|e| format!("{first}: {e}"))?;
        let seed = match args.get(1).map(String::as_str) {
            Some("--seed") => number(2, 1)?,
            Some(other) => return Err(format!("after the point's file: `{other}` (expected --seed N)")),
            None => 1,
        };
        let topology = serde_json::to_value(cfg.network.topology).map_err(|e| e.to_string())?;
        (topology.as_str().unwrap_or("?").to_string(), cfg, seed)
    } else {
        let topology = match first {
            "star" => TopologyKind::Star,
            "fat_tree" => TopologyKind::FatTree,
            "clos" => TopologyKind::Clos,
            "torus2d" => TopologyKind::Torus2d,
            "hierarchical" => TopologyKind::Hierarchical,
            other => {
                return Err(format!("`{other}` is neither a file nor a topology (star, fat_tree, clos, torus2d, hierarchical)"));
            }
        };
        let workers = u32::try_from(number(1, 200)?).map_err(|_| "too many workers".to_string())?;
        (first.to_string(), ps_config_on(workers, number(2, 2)?, topology), 1)
    };
    let (workers, steps) = (cfg.workers, cfg.steps);
    let (_, flows) = simulate_traffic(&cfg, seed).map_err(|e| e.to_string())?;
    if flows.is_empty() {
        return Err("the point started no flow".into());
    }
    let build = || -> Result<Topology, String> {
        let shape = cfg.network.shape(cfg.devices()).map_err(|e| e.to_string())?;
        Topology::build(&shape, cfg.network.main_link().map_err(|e| e.to_string())?).map_err(|e| e.to_string())
    };
    // Best of three replays (the first also warms the caches).
    let mut best = f64::INFINITY;
    let mut result = None;
    for _ in 0..3 {
        let topo = build()?;
        let start = Instant::now();
        let r = replay(topo, &flows).map_err(|e| e.to_string())?;
        best = best.min(start.elapsed().as_secs_f64());
        result = Some(r);
    }
    let (ends, recomputations) = result.ok_or("no replay ran")?;
    let mut topo = build()?;
    let links: Vec<f64> = topo.links().iter().map(|l| l.params.bytes_per_s).collect();
    let mut routes = BTreeMap::new();
    for f in &flows {
        if let std::collections::btree_map::Entry::Vacant(e) = routes.entry(format!("{},{}", f.src, f.dst)) {
            e.insert(topo.route(f.src, f.dst).map_err(|e| e.to_string())?);
        }
    }
    let mut instants: Vec<u64> = ends.iter().map(|e| e.to_bits()).collect();
    instants.sort_unstable();
    instants.dedup();
    let line = serde_json::json!({
        "topology": name,
        "seed": seed,
        "workers": workers,
        "ps": cfg.ps,
        "steps": steps,
        "links": links,
        "routes": routes,
        "flows": flows.iter().zip(&ends).map(|(f, e)| (f.at.as_secs_f64(), f.src, f.dst, f.bytes, e)).collect::<Vec<_>>(),
        "drain_end_instants": instants.len(),
        "recomputations": recomputations,
        "flowlab_replay_s": best,
    });
    println!("{line}");
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

//! Prints, as JSON lines, the completion time of every flow in the cases
//! that `bench/simgrid/compare.py` also runs in SimGrid (CM02, zero
//! latency): incast, sharded parameter servers, and a ring with two-hop
//! flows. Star networks of 1 Gbit/s (125 MB/s) links, all flows start at 0.

use flowlab_sim::network::{FlowNetwork, FlowTag, LinkParams, NetworkModel, Topology, TopologyShape};
use flowlab_sim::SimTime;

/// (case, hosts, topology, flows (src, dst, bytes)).
fn cases() -> Vec<(&'static str, usize, &'static str, Vec<(usize, usize, u64)>)> {
    let incast: Vec<_> = (1..9).map(|i| (i, 0, i as u64 * 10_000_000)).collect();
    // 3 PS tasks (hosts 0-2) with unequal shards, 6 workers (hosts 3-8)
    // fetching every shard, plus 2 workers pushing.
    let mut ps = Vec::new();
    for w in 3..9 {
        for (k, shard) in [(0, 30_000_000u64), (1, 20_000_000), (2, 10_000_000)] {
            ps.push((k, w, shard));
        }
    }
    ps.push((3, 0, 25_000_000));
    ps.push((4, 1, 25_000_000));
    let ring: Vec<_> = (0..8).map(|i| (i, (i + 2) % 8, 5_000_000 * (1 + i as u64 % 3))).collect();
    vec![("incast", 9, "star", incast), ("sharded_ps", 9, "star", ps), ("ring_two_hop", 8, "ring", ring)]
}

fn main() {
    for (name, hosts, topo, flows) in cases() {
        let shape = match topo {
            "ring" => TopologyShape::Ring { endpoints: hosts },
            _ => TopologyShape::Star { endpoints: hosts },
        };
        let topology = match Topology::build(&shape, LinkParams::from_gbps(1.0, 0.0)) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        };
        let mut net = FlowNetwork::new(topology);
        for (i, &(s, d, b)) in flows.iter().enumerate() {
            if let Err(e) = net.start_flow(SimTime::ZERO, s, d, b, i as FlowTag) {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
        let mut done = Vec::new();
        let mut times = vec![0.0; flows.len()];
        while let Some(t) = net.next_event_time() {
            done.clear();
            net.advance(t, &mut done);
            for &tag in &done {
                times[tag as usize] = t.as_secs_f64();
            }
        }
        let flows_json: Vec<String> = flows
            .iter()
            .zip(&times)
            .map(|(&(s, d, b), t)| format!("[{s},{d},{b},{t:.9}]"))
            .collect();
        println!("{{\"case\":\"{name}\",\"hosts\":{hosts},\"topology\":\"{topo}\",\"flows\":[{}]}}", flows_json.join(","));
    }
}

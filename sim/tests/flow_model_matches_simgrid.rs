//! The flow-level model against SimGrid's own numbers: every case and
//! completion time that SimGrid 3.32 (CM02, max-min sharing, zero latency)
//! printed in `bench/simgrid/result.txt` is replayed here from that file
//! (source, destination, bytes; all flows start at 0 on 1 Gbit/s links) and
//! each flow's completion must equal SimGrid's to the file's 6 decimals.

use flowlab_sim::network::{FlowNetwork, FlowTag, LinkParams, NetworkModel, Topology, TopologyShape};
use flowlab_sim::SimTime;

const RESULT: &str = include_str!("../../bench/simgrid/result.txt");

/// (src, dst, bytes, SimGrid's completion seconds).
type Flow = (usize, usize, u64, f64);

/// (case name, its flows).
fn cases() -> Vec<(String, Vec<Flow>)> {
    let mut out: Vec<(String, Vec<Flow>)> = Vec::new();
    for line in RESULT.lines() {
        if let Some(rest) = line.strip_prefix("== ") {
            let name = rest.split_whitespace().next().unwrap_or_default().to_string();
            out.push((name, Vec::new()));
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 6 && f[0].bytes().all(|b| b.is_ascii_digit()) {
            let flow = (f[0].parse().unwrap(), f[1].parse().unwrap(), f[2].parse().unwrap(), f[4].parse().unwrap());
            out.last_mut().expect("a flow row before any case header").1.push(flow);
        }
    }
    out
}

#[test]
fn every_simgrid_completion_time_is_reproduced() {
    let cases = cases();
    assert_eq!(cases.len(), 3, "incast, sharded_ps, ring_two_hop");
    let mut compared = 0;
    for (name, flows) in &cases {
        let hosts = flows.iter().map(|f| f.0.max(f.1)).max().unwrap() + 1;
        let shape = if name.starts_with("ring") {
            TopologyShape::Ring { endpoints: hosts }
        } else {
            TopologyShape::Star { endpoints: hosts }
        };
        let mut net = FlowNetwork::new(Topology::build(&shape, LinkParams::from_gbps(1.0, 0.0)).unwrap());
        for (i, &(s, d, b, _)) in flows.iter().enumerate() {
            net.start_flow(SimTime::ZERO, s, d, b, i as FlowTag).unwrap();
        }
        let mut times = vec![f64::NAN; flows.len()];
        let mut done = Vec::new();
        while let Some(t) = net.next_event_time() {
            done.clear();
            net.advance(t, &mut done);
            for &tag in &done {
                times[tag as usize] = t.as_secs_f64();
            }
        }
        for (i, &(s, d, b, simgrid)) in flows.iter().enumerate() {
            assert!((times[i] - simgrid).abs() <= 5e-7, "{name}: flow {s}->{d} of {b} B at {} s, SimGrid {simgrid} s", times[i]);
            compared += 1;
        }
    }
    assert_eq!(compared, 36);
}

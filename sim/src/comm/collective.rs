//! All-reduce algorithms as plans of stages. A stage is a set of flows that
//! run concurrently (each algorithm's chunks are pipelined, so a stage's
//! flows stream their whole share), followed by the per-hop latency of the
//! stage's remaining sequential rounds. Stages run one after another; the
//! same plan runs on either network model, so contention shows up only in
//! the flow-level one.
//!
//! Ring (p ranks, S bytes): each rank streams 2(p-1)/p * S to its successor
//! over 2(p-1) rounds: time 2(p-1)/p * S/B + 2(p-1) * latency uncongested.
//! Double binary tree (NCCL): two binary trees, each reducing half of S up
//! then broadcasting it down; a rank interior in one tree is a leaf in the
//! other. Hierarchical: reduce-scatter inside each host, `g` parallel
//! cross-host rings on S/g each, all-gather inside each host.

use crate::error::SimError;
use crate::network::{FlowTag, NetworkModel};
use crate::time::SimTime;
use serde::{Deserialize, Serialize};

/// Which all-reduce to use (the `allreduce` key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AllReduceAlgo {
    Ring,
    DoubleTree,
    Hierarchical,
}

/// Concurrent flows plus the latency of the stage's further sequential rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    /// (source endpoint, destination endpoint, bytes).
    pub flows: Vec<(usize, usize, u64)>,
    /// Rounds after the first, each costing one hop's path latency.
    pub extra_rounds: u64,
}

/// Builds the stages of `algo` over `ranks` (endpoint ids, in ring order)
/// for `bytes` per rank. `group` is the number of ranks per host for the
/// hierarchical algorithm (ranks of one host are consecutive).
pub fn plan(algo: AllReduceAlgo, ranks: &[usize], bytes: u64, group: usize) -> Vec<Stage> {
    let p = ranks.len();
    if p < 2 || bytes == 0 {
        return Vec::new();
    }
    match algo {
        AllReduceAlgo::Ring => vec![ring_stage(ranks, bytes, 2)],
        AllReduceAlgo::DoubleTree => double_tree(ranks, bytes),
        AllReduceAlgo::Hierarchical => hierarchical(ranks, bytes, group.max(1)),
    }
}

/// Ring order for the endpoints `0..members` of a torus with `dims`
/// (endpoint index = c0 + d0 * (c1 + d1 * c2), as `Topology::build` lays
/// it out): the reflected mixed-radix Gray code (a boustrophedon, "snake"),
/// in which consecutive endpoints are torus neighbours, so a ring of all
/// endpoints sends every step over one link of its own instead of crossing
/// rows (rank order 0, 1, 2, ... puts row ends two hops apart and makes
/// flows share links). With an even last dimension the ring also closes in
/// one hop. Endpoints at or above `members` are skipped.
pub fn torus_ring_order(dims: &[usize], members: usize) -> Vec<usize> {
    let total: usize = dims.iter().product();
    let mut order = Vec::with_capacity(members.min(total));
    for i in 0..total {
        // Digits of i in the mixed radix (dimension 0 fastest); digit j
        // sweeps once per step of the digits above it, so it runs backwards
        // when that count (i over the product of dims[..=j]) is odd.
        let mut rest = i;
        let mut digits = Vec::with_capacity(dims.len());
        for &d in dims {
            let quotient = rest / d;
            let raw = rest % d;
            digits.push(if quotient % 2 == 1 { d - 1 - raw } else { raw });
            rest = quotient;
        }
        let mut index = 0;
        for j in (0..dims.len()).rev() {
            index = index * dims[j] + digits[j];
        }
        if index < members {
            order.push(index);
        }
    }
    order
}

/// A ring pass: `passes` = 2 for all-reduce, 1 for reduce-scatter or all-gather.
fn ring_stage(ranks: &[usize], bytes: u64, passes: u64) -> Stage {
    let p = ranks.len() as u64;
    let per = (passes * (p - 1) * bytes).div_ceil(p);
    let flows = (0..ranks.len())
        .map(|i| (ranks[i], ranks[(i + 1) % ranks.len()], per))
        .collect();
    Stage {
        flows,
        extra_rounds: passes * (p - 1) - 1,
    }
}

fn double_tree(ranks: &[usize], bytes: u64) -> Vec<Stage> {
    let p = ranks.len();
    let half = bytes.div_ceil(2);
    // Heap-ordered binary tree over positions; tree 2 places ranks in
    // reverse, so tree 1's leaves (upper half) are tree 2's interior.
    let tree1: Vec<usize> = ranks.to_vec();
    let tree2: Vec<usize> = ranks.iter().rev().copied().collect();
    let depth = usize::BITS - p.leading_zeros(); // levels of a heap with p nodes
    let mut up = Vec::new();
    let mut down = Vec::new();
    for tree in [&tree1, &tree2] {
        for i in 1..p {
            let parent = tree[(i - 1) / 2];
            up.push((tree[i], parent, half));
            down.push((parent, tree[i], half));
        }
    }
    let extra = u64::from(depth.saturating_sub(2));
    vec![
        Stage { flows: up, extra_rounds: extra },
        Stage { flows: down, extra_rounds: extra },
    ]
}

fn hierarchical(ranks: &[usize], bytes: u64, g: usize) -> Vec<Stage> {
    let hosts: Vec<&[usize]> = ranks.chunks(g).collect();
    let mut stages = Vec::new();
    let local = |passes: u64| {
        let mut flows = Vec::new();
        let mut extra = 0;
        for h in &hosts {
            if h.len() > 1 {
                let s = ring_stage(h, bytes, passes);
                extra = extra.max(s.extra_rounds);
                flows.extend(s.flows);
            }
        }
        Stage { flows, extra_rounds: extra }
    };
    if g > 1 {
        stages.push(local(1));
    }
    if hosts.len() > 1 {
        // Local rank j of every host joins cross-host ring j on S/g bytes.
        let lanes = hosts.iter().map(|h| h.len()).min().unwrap_or(1);
        let share = bytes.div_ceil(lanes as u64);
        let mut flows = Vec::new();
        let mut extra = 0;
        for j in 0..lanes {
            let ring: Vec<usize> = hosts.iter().map(|h| h[j]).collect();
            let s = ring_stage(&ring, share, 2);
            extra = extra.max(s.extra_rounds);
            flows.extend(s.flows);
        }
        stages.push(Stage { flows, extra_rounds: extra });
    }
    if g > 1 {
        stages.push(local(1));
    }
    stages.retain(|s| !s.flows.is_empty());
    stages
}

/// Runs `stages` on `net` from `start` (the network must carry no other
/// traffic meanwhile) and returns when the last stage ends.
pub fn run(net: &mut impl NetworkModel, stages: &[Stage], start: SimTime) -> Result<SimTime, SimError> {
    let mut now = start;
    let mut done: Vec<FlowTag> = Vec::new();
    for stage in stages {
        let mut hop_latency = SimTime::ZERO;
        for (i, &(s, d, b)) in stage.flows.iter().enumerate() {
            net.start_flow(now, s, d, b, i as FlowTag)?;
            hop_latency = hop_latency.max(net.path_latency(s, d)?);
        }
        let mut left = stage.flows.len();
        while left > 0 {
            let Some(t) = net.next_event_time() else {
                return Err(SimError::param("network", "collective stalled: flows never completed"));
            };
            done.clear();
            net.advance(t, &mut done);
            left -= done.len();
            now = t;
        }
        now += SimTime(hop_latency.0.saturating_mul(stage.extra_rounds));
    }
    Ok(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torus_ring_order_visits_every_endpoint_through_neighbours() {
        // Brute force: consecutive endpoints differ by one step (with
        // wrap-around) in exactly one coordinate, and each appears once.
        for dims in [vec![8usize, 8], vec![4, 6], vec![5, 3], vec![4, 4, 4], vec![3, 5, 2]] {
            let total: usize = dims.iter().product();
            let order = torus_ring_order(&dims, total);
            let mut seen = order.clone();
            seen.sort();
            assert_eq!(seen, (0..total).collect::<Vec<_>>(), "{dims:?}");
            let coords = |mut e: usize| {
                dims.iter()
                    .map(|&d| {
                        let c = e % d;
                        e /= d;
                        c
                    })
                    .collect::<Vec<_>>()
            };
            for w in order.windows(2) {
                let (a, b) = (coords(w[0]), coords(w[1]));
                let differ: Vec<usize> = (0..dims.len()).filter(|&j| a[j] != b[j]).collect();
                assert_eq!(differ.len(), 1, "{dims:?}: {a:?} -> {b:?}");
                let (j, d) = (differ[0], dims[differ[0]]);
                assert!((a[j] + 1) % d == b[j] || (b[j] + 1) % d == a[j], "{dims:?}: {a:?} -> {b:?}");
            }
        }
        // Members below the torus size keep their relative snake order.
        assert_eq!(torus_ring_order(&[4, 2], 6), vec![0, 1, 2, 3, 5, 4]);
    }
    use crate::network::{AnalyticalNetwork, FlowNetwork, LinkParams, Topology, TopologyShape};

    fn rel(a: f64, b: f64) -> f64 {
        (a - b).abs() / b
    }

    #[test]
    fn ring_all_reduce_matches_the_closed_form_in_both_models() {
        let p = 16usize;
        let s = 64_000_000u64;
        let link = LinkParams::from_gbps(100.0, 3.0);
        let ranks: Vec<usize> = (0..p).collect();
        let stages = plan(AllReduceAlgo::Ring, &ranks, s, 1);
        let expect = 2.0 * (p as f64 - 1.0) / p as f64 * s as f64 / link.bytes_per_s
            + 2.0 * (p as f64 - 1.0) * 3e-6;
        let topo = || Topology::build(&TopologyShape::Ring { endpoints: p }, link).unwrap();
        let tf = run(&mut FlowNetwork::new(topo()), &stages, SimTime::ZERO).unwrap();
        let ta = run(&mut AnalyticalNetwork::new(topo()), &stages, SimTime::ZERO).unwrap();
        assert!(rel(tf.as_secs_f64(), expect) < 0.01, "{tf} vs {expect}");
        assert_eq!(tf, ta);
    }

    #[test]
    fn contention_slows_the_flow_model_only() {
        // A ring laid out on a star whose switch ports are shared: every rank
        // sends and receives once, so no link is shared and both agree ...
        let p = 8;
        let link = LinkParams::from_gbps(10.0, 1.0);
        let ranks: Vec<usize> = (0..p).collect();
        let stages = plan(AllReduceAlgo::Ring, &ranks, 8_000_000, 1);
        let star = || Topology::build(&TopologyShape::Star { endpoints: p }, link).unwrap();
        let tf = run(&mut FlowNetwork::new(star()), &stages, SimTime::ZERO).unwrap();
        let ta = run(&mut AnalyticalNetwork::new(star()), &stages, SimTime::ZERO).unwrap();
        assert_eq!(tf, ta);
        // ... but with two ranks per host on a hierarchical box whose NIC is
        // the only way out, cross-host pairs share it and only the flow model sees it.
        let shape = TopologyShape::Hierarchical { hosts: 4, devices_per_host: 2, intra: link };
        let h = || Topology::build(&shape, link).unwrap();
        let interleaved: Vec<usize> = (0..p).map(|i| (i % 4) * 2 + i / 4).collect();
        let stages = plan(AllReduceAlgo::Ring, &interleaved, 8_000_000, 1);
        let tf = run(&mut FlowNetwork::new(h()), &stages, SimTime::ZERO).unwrap();
        let ta = run(&mut AnalyticalNetwork::new(h()), &stages, SimTime::ZERO).unwrap();
        assert!(tf.as_secs_f64() > 1.9 * ta.as_secs_f64() - 1e-4, "{tf} vs {ta}");
    }

    #[test]
    fn double_tree_and_hierarchical_move_the_right_bytes() {
        let ranks: Vec<usize> = (0..8).collect();
        let dt = plan(AllReduceAlgo::DoubleTree, &ranks, 1000, 1);
        assert_eq!(dt.len(), 2);
        // 7 edges per tree, two trees, half the bytes each, up and down.
        assert_eq!(dt[0].flows.len(), 14);
        assert_eq!(dt[0].flows.iter().map(|f| f.2).sum::<u64>(), 14 * 500);
        // Every rank except the two roots sends up in both trees.
        let hier = plan(AllReduceAlgo::Hierarchical, &ranks, 1000, 4);
        assert_eq!(hier.len(), 3);
        assert_eq!(hier[0].flows.len(), 8); // two 4-rank local rings
        assert_eq!(hier[1].flows.len(), 8); // four 2-host rings, one flow each way
        assert_eq!(hier[1].flows[0].2, 250); // 2(h-1)/h * S/g = 250
        assert!(plan(AllReduceAlgo::Ring, &ranks[..1], 1000, 1).is_empty());
    }
}

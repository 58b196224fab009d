//! Flow-level network: every link's bandwidth is shared max-min fairly among
//! the flows crossing it, and the shares are recomputed whenever the set of
//! flows changes (all changes at one instant are batched into one
//! recomputation). A flow's payload drains at its share; it arrives one
//! path latency after its last byte left.
//!
//! The sharing is computed by progressive filling: repeatedly take the link
//! whose remaining capacity per unfrozen flow is smallest, freeze its flows
//! at that rate and charge them on their other links. Only links that carry
//! flows are visited, and a lazy heap finds the bottleneck, so one
//! recomputation costs O(F * path length + L log L).

use crate::error::SimError;
use crate::network::model::{Fabric, FlowTag, NetworkModel, Route};
use crate::network::topology::Topology;
use crate::time::SimTime;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Completion-coalescing window: 1 ns, far below any link latency modelled.
const DRAIN_WINDOW: SimTime = SimTime(1_000);

struct Flow {
    route: Route,
    remaining: f64,
    rate: f64,
    drain_at: SimTime,
    tag: FlowTag,
}

pub struct FlowNetwork {
    fabric: Fabric,
    capacity: Vec<f64>,
    flows: Vec<Flow>,
    /// Drained flows in propagation: (arrival, seq, tag).
    arrivals: BinaryHeap<Reverse<(SimTime, u64, FlowTag)>>,
    seq: u64,
    last_update: SimTime,
    dirty: bool,
    next_drain: SimTime,
    recomputations: u64,
    // Scratch for progressive filling, sized to the link count.
    residual: Vec<f64>,
    unfrozen: Vec<u32>,
    total: Vec<u32>,
    link_start: Vec<u32>,
    touched: Vec<u32>,
    link_flows: Vec<u32>,
    frozen: Vec<bool>,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
}

impl FlowNetwork {
    pub fn new(topology: Topology) -> Self {
        let n = topology.links().len();
        let fabric = Fabric::new(topology);
        let capacity = (0..n).map(|l| fabric.link_capacity(l)).collect();
        FlowNetwork {
            fabric,
            capacity,
            flows: Vec::new(),
            arrivals: BinaryHeap::new(),
            seq: 0,
            last_update: SimTime::ZERO,
            dirty: false,
            next_drain: SimTime::MAX,
            recomputations: 0,
            residual: vec![0.0; n],
            unfrozen: vec![0; n],
            total: vec![0; n],
            link_start: vec![0; n + 1],
            touched: Vec::new(),
            link_flows: Vec::new(),
            frozen: Vec::new(),
            heap: BinaryHeap::new(),
        }
    }

    /// How many times the shares were recomputed (for benchmarks).
    pub fn recomputations(&self) -> u64 {
        self.recomputations
    }

    /// Current rate of the flow with `tag`, in bytes per second (tests).
    pub fn rate_of(&mut self, tag: FlowTag) -> Option<f64> {
        self.refresh();
        self.flows.iter().find(|f| f.tag == tag).map(|f| f.rate)
    }

    /// Drains every flow by its rate up to `t`.
    fn progress_to(&mut self, t: SimTime) {
        if t <= self.last_update {
            return;
        }
        let dt = (t - self.last_update).as_secs_f64();
        for f in &mut self.flows {
            f.remaining = (f.remaining - f.rate * dt).max(0.0);
        }
        self.last_update = t;
    }

    fn refresh(&mut self) {
        if self.dirty {
            self.recompute();
            self.dirty = false;
        }
    }

    /// Max-min fair rates by progressive filling, then each flow's drain time.
    fn recompute(&mut self) {
        self.recomputations += 1;
        let FlowNetwork {
            fabric,
            capacity,
            flows,
            residual,
            unfrozen,
            total,
            link_start,
            touched,
            link_flows,
            frozen,
            heap,
            ..
        } = self;
        touched.clear();
        for f in flows.iter() {
            for &l in fabric.route_links(f.route) {
                let l = l as usize;
                if unfrozen[l] == 0 {
                    touched.push(l as u32);
                    residual[l] = capacity[l];
                }
                unfrozen[l] += 1;
            }
        }
        // Link -> flows adjacency (CSR over touched links).
        let mut off = 0u32;
        for &l in touched.iter() {
            let l = l as usize;
            link_start[l] = off;
            total[l] = unfrozen[l];
            off += unfrozen[l];
        }
        link_flows.clear();
        link_flows.resize(off as usize, 0);
        // Use `link_start` as a fill cursor, then restore it from counts.
        for (fi, f) in flows.iter().enumerate() {
            for &l in fabric.route_links(f.route) {
                let c = &mut link_start[l as usize];
                link_flows[*c as usize] = fi as u32;
                *c += 1;
            }
        }
        heap.clear();
        for &l in touched.iter() {
            let l = l as usize;
            link_start[l] -= unfrozen[l];
            heap.push(Reverse((share_key(residual[l], unfrozen[l]), l as u32)));
        }
        frozen.clear();
        frozen.resize(flows.len(), false);
        // Shares only grow as flows freeze (freezing at the global minimum
        // share s leaves (r - s) / (n - 1) >= r / n), so a popped key is a
        // lower bound: if it is stale, re-insert the link with its current
        // share instead of pushing on every change.
        while let Some(Reverse((key, l))) = heap.pop() {
            let l = l as usize;
            if unfrozen[l] == 0 {
                continue;
            }
            let current = share_key(residual[l], unfrozen[l]);
            if current != key {
                heap.push(Reverse((current, l as u32)));
                continue;
            }
            let share = f64::from_bits(key);
            let (s, n) = (link_start[l] as usize, total[l] as usize);
            for i in s..s + n {
                let fi = link_flows[i] as usize;
                if frozen[fi] {
                    continue;
                }
                frozen[fi] = true;
                if flows[fi].rate != share {
                    flows[fi].rate = share;
                    flows[fi].drain_at = SimTime::MAX; // re-derived below
                }
                for &m in fabric.route_links(flows[fi].route) {
                    let m = m as usize;
                    residual[m] = (residual[m] - share).max(0.0);
                    unfrozen[m] -= 1;
                }
            }
        }
        // Every touched link's counter is back to zero here.
        let now = self.last_update;
        let mut next = SimTime::MAX;
        for f in flows.iter_mut() {
            // An unchanged rate keeps its drain time (exact, no re-rounding).
            if f.drain_at == SimTime::MAX {
                f.drain_at = now + SimTime::from_secs_f64_ceil(f.remaining / f.rate);
            }
            next = next.min(f.drain_at);
        }
        self.next_drain = next;
    }
}

/// Fair share as a totally ordered key: non-negative f64 bits order like the values.
fn share_key(residual: f64, n: u32) -> u64 {
    // A tiny floor keeps rates positive when rounding leaves zero residual.
    (residual.max(1e-9) / n as f64).to_bits()
}

impl NetworkModel for FlowNetwork {
    fn start_flow(
        &mut self,
        now: SimTime,
        src: usize,
        dst: usize,
        bytes: u64,
        tag: FlowTag,
    ) -> Result<(), SimError> {
        let route = self.fabric.route(src, dst)?;
        self.fabric.account(route, bytes);
        let now = now.max(self.last_update);
        if route.len == 0 || bytes == 0 {
            self.arrivals.push(Reverse((now + route.latency, self.seq, tag)));
            self.seq += 1;
            return Ok(());
        }
        self.progress_to(now);
        self.flows.push(Flow {
            route,
            remaining: bytes as f64,
            rate: 0.0,
            drain_at: SimTime::MAX,
            tag,
        });
        self.dirty = true;
        Ok(())
    }

    fn next_event_time(&mut self) -> Option<SimTime> {
        self.refresh();
        let a = self.arrivals.peek().map(|Reverse((t, _, _))| *t);
        let d = (!self.flows.is_empty()).then_some(self.next_drain);
        match (a, d) {
            (Some(a), Some(d)) => Some(a.min(d)),
            (a, d) => a.or(d),
        }
    }

    fn advance(&mut self, now: SimTime, done: &mut Vec<FlowTag>) {
        loop {
            self.refresh();
            if !self.flows.is_empty() && self.next_drain <= now {
                let t = self.next_drain;
                self.progress_to(t);
                let mut i = 0;
                // Flows that drain within DRAIN_WINDOW of each other finish
                // together: float rounding in the shares would otherwise split
                // one simultaneous completion into many recomputations.
                let until = t + DRAIN_WINDOW;
                while i < self.flows.len() {
                    if self.flows[i].drain_at <= until {
                        let f = self.flows.swap_remove(i);
                        self.arrivals.push(Reverse((t + f.route.latency, self.seq, f.tag)));
                        self.seq += 1;
                    } else {
                        i += 1;
                    }
                }
                self.dirty = true;
                continue;
            }
            break;
        }
        while let Some(Reverse((t, _, tag))) = self.arrivals.peek() {
            if *t > now {
                break;
            }
            done.push(*tag);
            self.arrivals.pop();
        }
        self.progress_to(now);
    }

    fn path_latency(&mut self, src: usize, dst: usize) -> Result<SimTime, SimError> {
        Ok(self.fabric.route(src, dst)?.latency)
    }

    fn in_flight(&self) -> usize {
        self.flows.len() + self.arrivals.len()
    }

    fn fabric(&self) -> &Fabric {
        &self.fabric
    }
}

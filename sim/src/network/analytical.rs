//! Analytical network: no contention inside the network, but each
//! endpoint's own link is respected. A flow takes its path's latency plus
//! its size over the path's slowest link, and in addition the first link of
//! its route (the sender's port) and the last (the receiver's port) each
//! carry one flow at a time, first come first served: a flow's bytes leave
//! the sender's port once the flows queued there before it have left, and
//! enter the receiver's port once its earlier flows have entered. So 16 PS
//! tasks answering one worker at once take 16 shard times on its link, as
//! on the wire, while flows between disjoint endpoints never interact.
//! This is the endpoint-serialized model of LogGP-style analyses (a per-port
//! gap proportional to the bytes), without the fabric's shared links.

use crate::error::SimError;
use crate::network::model::{Fabric, FlowTag, NetworkModel, Route};
use crate::network::topology::Topology;
use crate::time::SimTime;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub struct AnalyticalNetwork {
    fabric: Fabric,
    arrivals: BinaryHeap<Reverse<(SimTime, u64, FlowTag)>>,
    seq: u64,
    /// Per link: when the bytes queued on it as an endpoint port have passed.
    port_free: Vec<SimTime>,
}

impl AnalyticalNetwork {
    pub fn new(topology: Topology) -> Self {
        let links = topology.links().len();
        AnalyticalNetwork {
            port_free: vec![SimTime::ZERO; links],
            fabric: Fabric::new(topology),
            arrivals: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl NetworkModel for AnalyticalNetwork {
    fn start_flow_on(
        &mut self,
        now: SimTime,
        src: usize,
        dst: usize,
        r: Route,
        bytes: u64,
        tag: FlowTag,
    ) -> Result<(), SimError> {
        self.fabric.account(now, src, dst, r, bytes);
        let drained = if r.len == 0 {
            now
        } else {
            // The path's own transfer time, then each end port in turn.
            let mut end = now + SimTime::from_secs_f64_ceil(bytes as f64 / r.min_bytes_per_s);
            let links = self.fabric.route_links(r);
            let (first, last) = (links[0] as usize, links[links.len() - 1] as usize);
            for l in [first, last].into_iter().take(if first == last { 1 } else { 2 }) {
                let start = self.port_free[l].max(now);
                let done = start + SimTime::from_secs_f64_ceil(bytes as f64 / self.fabric.link_capacity(l));
                self.port_free[l] = done;
                end = end.max(done);
            }
            end
        };
        self.arrivals.push(Reverse((drained + r.latency, self.seq, tag)));
        self.seq += 1;
        Ok(())
    }

    fn next_event_time(&mut self) -> Option<SimTime> {
        self.arrivals.peek().map(|Reverse((t, _, _))| *t)
    }

    fn advance(&mut self, now: SimTime, done: &mut Vec<FlowTag>) {
        while let Some(Reverse((t, _, tag))) = self.arrivals.peek() {
            if *t > now {
                break;
            }
            done.push(*tag);
            self.arrivals.pop();
        }
    }

    fn path_latency(&mut self, src: usize, dst: usize) -> Result<SimTime, SimError> {
        Ok(self.fabric.route(src, dst)?.latency)
    }

    fn in_flight(&self) -> usize {
        self.arrivals.len()
    }

    fn fabric(&self) -> &Fabric {
        &self.fabric
    }
    fn fabric_mut(&mut self) -> &mut Fabric {
        &mut self.fabric
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::{LinkParams, TopologyShape};

    fn arrivals(net: &mut AnalyticalNetwork) -> Vec<(FlowTag, u64)> {
        let mut out = Vec::new();
        let mut done = Vec::new();
        while let Some(t) = net.next_event_time() {
            net.advance(t, &mut done);
            out.extend(done.drain(..).map(|tag| (tag, t.0)));
        }
        out
    }

    #[test]
    fn flows_into_one_endpoint_share_its_link() {
        // 16 PS tasks each send 1.25 MB to worker 16 at once on a 10 Gbit/s
        // star: the worker's link carries 20 MB, 16 ms at 1.25 GB/s, so the
        // last shard arrives at 16 ms + two 5 us hops (by hand), not at 1 ms.
        let topo = Topology::build(&TopologyShape::Star { endpoints: 17 }, LinkParams::from_gbps(10.0, 5.0)).unwrap();
        let mut net = AnalyticalNetwork::new(topo);
        for k in 0..16 {
            net.start_flow(SimTime::ZERO, k, 16, 1_250_000, k as FlowTag).unwrap();
        }
        let got = arrivals(&mut net);
        assert_eq!(got.len(), 16);
        // Shard i arrives at (i + 1) ms + 10 us.
        for (i, &(tag, t)) in got.iter().enumerate() {
            assert_eq!(tag, i as FlowTag);
            assert_eq!(t, (i as u64 + 1) * 1_000_000_000 + 10_000_000);
        }
    }

    #[test]
    fn disjoint_endpoints_do_not_interact() {
        // 0->1 and 2->3 at once, then 0->3 after both: each alone takes 1 ms.
        let topo = Topology::build(&TopologyShape::Star { endpoints: 4 }, LinkParams::from_gbps(10.0, 0.0)).unwrap();
        let mut net = AnalyticalNetwork::new(topo);
        net.start_flow(SimTime::ZERO, 0, 1, 1_250_000, 1).unwrap();
        net.start_flow(SimTime::ZERO, 2, 3, 1_250_000, 2).unwrap();
        net.start_flow(SimTime(1_000_000_000), 0, 3, 1_250_000, 3).unwrap();
        assert_eq!(arrivals(&mut net), vec![(1, 1_000_000_000), (2, 1_000_000_000), (3, 2_000_000_000)]);
    }
}

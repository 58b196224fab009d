//! Network topologies, routing and the two network models.
//!
//! Max-min fair sharing is solved in two places, for two shapes of
//! problem. `flow` shares the links of routed paths (any number of links a
//! flow, any topology) among the cluster simulator's flows: progressive
//! filling over link groups, with a fast path and a group path that keep
//! it bit for bit equal to the full filling. `ports` shares device ports
//! among the graph-level simulator's transfers: every transfer holds
//! exactly one port out and one port in, so the transfers between one pair
//! of ports share one rate and the filling works on at most ports² groups,
//! O(log n) per join or leave, with none of `flow`'s routes, link lists
//! or component searches. Both give textbook max-min shares: `flow`'s are
//! checked against SimGrid, `ports`' against closed forms in its tests.

pub mod analytical;
mod arrivals;
pub mod flow;
pub mod model;
pub(crate) mod ports;
pub mod topology;

pub use analytical::AnalyticalNetwork;
pub use flow::FlowNetwork;
pub use model::{Fabric, FlowStart, FlowTag, LinkUsage, NetworkModel, Route};
pub use topology::{LinkParams, Topology, TopologyShape};

use crate::error::SimError;
use crate::time::SimTime;

/// Which model to use (the `network.model` key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    Analytical,
    #[default]
    Flow,
}

/// Either model behind one type, dispatched statically (hot loops call it).
/// One per run, so the flow model's size is not worth a box's indirection.
#[allow(clippy::large_enum_variant)]
pub enum Network {
    Analytical(AnalyticalNetwork),
    Flow(FlowNetwork),
}

impl Network {
    pub fn new(kind: ModelKind, topology: Topology) -> Network {
        match kind {
            ModelKind::Analytical => Network::Analytical(AnalyticalNetwork::new(topology)),
            ModelKind::Flow => Network::Flow(FlowNetwork::new(topology)),
        }
    }
}

impl Network {
    /// Max-min recomputations so far (0 for the analytical model).
    pub fn recomputations(&self) -> u64 {
        match self {
            Network::Analytical(_) => 0,
            Network::Flow(f) => f.recomputations(),
        }
    }

    /// Digest of every flow arrival so far (0 for the analytical model).
    pub fn flow_digest(&self) -> u64 {
        match self {
            Network::Analytical(_) => 0,
            Network::Flow(f) => f.flow_digest(),
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $n:ident => $e:expr) => {
        match $self {
            Network::Analytical($n) => $e,
            Network::Flow($n) => $e,
        }
    };
}

impl NetworkModel for Network {
    fn start_flow_on(
        &mut self,
        now: SimTime,
        src: usize,
        dst: usize,
        route: Route,
        bytes: u64,
        tag: FlowTag,
    ) -> Result<(), SimError> {
        dispatch!(self, n => n.start_flow_on(now, src, dst, route, bytes, tag))
    }
    fn next_event_time(&mut self) -> Option<SimTime> {
        dispatch!(self, n => n.next_event_time())
    }
    fn advance(&mut self, now: SimTime, done: &mut Vec<FlowTag>) {
        dispatch!(self, n => n.advance(now, done))
    }
    fn path_latency(&mut self, src: usize, dst: usize) -> Result<SimTime, SimError> {
        dispatch!(self, n => n.path_latency(src, dst))
    }
    fn in_flight(&self) -> usize {
        dispatch!(self, n => n.in_flight())
    }
    fn fabric(&self) -> &Fabric {
        dispatch!(self, n => n.fabric())
    }
    fn fabric_mut(&mut self) -> &mut Fabric {
        dispatch!(self, n => n.fabric_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: f64 = 1.25e9; // 10 Gbit/s in bytes/s

    fn star(n: usize, latency_us: f64) -> Topology {
        Topology::build(&TopologyShape::Star { endpoints: n }, LinkParams::from_gbps(10.0, latency_us)).unwrap()
    }

    /// Runs the model to idle; returns (tag, arrival seconds) in arrival order.
    fn drain(net: &mut impl NetworkModel) -> Vec<(FlowTag, f64)> {
        let mut out = Vec::new();
        let mut done = Vec::new();
        while let Some(t) = net.next_event_time() {
            net.advance(t, &mut done);
            out.extend(done.drain(..).map(|tag| (tag, t.as_secs_f64())));
        }
        out
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn two_flows_on_one_link_get_half_each() {
        let mut net = FlowNetwork::new(star(3, 0.0));
        net.start_flow(SimTime::ZERO, 0, 2, 1_250_000_000, 1).unwrap();
        net.start_flow(SimTime::ZERO, 1, 2, 1_250_000_000, 2).unwrap();
        assert!(close(net.rate_of(1).unwrap(), C / 2.0));
        assert!(close(net.rate_of(2).unwrap(), C / 2.0));
        let arrivals = drain(&mut net);
        assert_eq!(arrivals.len(), 2);
        assert!(arrivals.iter().all(|(_, t)| close(*t, 2.0)), "{arrivals:?}");
    }

    #[test]
    fn max_min_with_two_bottleneck_levels_and_recomputation() {
        // A: 0->1, B: 0->2, C: 0->3 share 0's uplink (C/3 each); D: 2->3
        // shares 3's downlink with C and gets the rest, 2C/3.
        let mut net = FlowNetwork::new(star(4, 0.0));
        net.start_flow(SimTime::ZERO, 0, 1, 125_000_000, 'A' as u64).unwrap();
        net.start_flow(SimTime::ZERO, 0, 2, 500_000_000, 'B' as u64).unwrap();
        net.start_flow(SimTime::ZERO, 0, 3, 500_000_000, 'C' as u64).unwrap();
        net.start_flow(SimTime::ZERO, 2, 3, 1_000_000_000, 'D' as u64).unwrap();
        for (t, r) in [('A', C / 3.0), ('B', C / 3.0), ('C', C / 3.0), ('D', 2.0 * C / 3.0)] {
            assert!(close(net.rate_of(t as u64).unwrap(), r), "{t}");
        }
        // A ends at 0.3 s; then B = C = D = C/2 until B and C end at 0.9 s;
        // D then runs alone at C and ends at 1.2 s.
        let arrivals = drain(&mut net);
        let when = |c: char| arrivals.iter().find(|(t, _)| *t == c as u64).unwrap().1;
        assert!(close(when('A'), 0.3), "{arrivals:?}");
        assert!(close(when('B'), 0.9), "{arrivals:?}");
        assert!(close(when('C'), 0.9), "{arrivals:?}");
        assert!(close(when('D'), 1.2), "{arrivals:?}");
    }

    #[test]
    fn flow_level_equals_analytical_without_shared_links() {
        let shape = TopologyShape::FatTree { k: 4 };
        let link = LinkParams::from_gbps(10.0, 2.0);
        let mut a = AnalyticalNetwork::new(Topology::build(&shape, link).unwrap());
        let mut f = FlowNetwork::new(Topology::build(&shape, link).unwrap());
        // Disjoint pairs inside edge switches: no link carries two flows.
        for (i, (s, d)) in [(0, 1), (2, 3), (5, 4), (15, 14)].into_iter().enumerate() {
            let bytes = 1_000_000 * (i as u64 + 1);
            a.start_flow(SimTime::ZERO, s, d, bytes, i as u64).unwrap();
            f.start_flow(SimTime::ZERO, s, d, bytes, i as u64).unwrap();
        }
        let (ra, rf) = (drain(&mut a), drain(&mut f));
        assert_eq!(ra, rf);
        // 1 MB at 10 Gbit/s plus two 2 us hops.
        assert!(close(ra[0].1, 1e6 / C + 4e-6));
        assert_eq!(a.fabric().bytes_moved(), 10_000_000);
    }

    #[test]
    fn link_usage_reports_bytes_and_utilization() {
        let mut net = Network::new(ModelKind::Flow, star(2, 0.0));
        net.start_flow(SimTime::ZERO, 0, 1, 1_250_000_000, 0).unwrap();
        let arrivals = drain(&mut net);
        assert!(close(arrivals[0].1, 1.0));
        let usage = net.fabric().link_usage(SimTime::from_secs_f64(2.0));
        assert_eq!(usage.len(), 2);
        assert!(usage.iter().all(|u| u.bytes == 1_250_000_000 && close(u.utilization, 0.5)));
        assert!(close(net.fabric().max_link_utilization(SimTime::from_secs_f64(2.0)), 0.5));
    }

    #[test]
    fn flows_arrive_one_path_latency_after_draining() {
        let mut net = FlowNetwork::new(star(2, 5.0));
        net.start_flow(SimTime::ZERO, 0, 1, 1_250_000, 0).unwrap();
        let arrivals = drain(&mut net);
        assert!(close(arrivals[0].1, 1e-3 + 10e-6));
        assert_eq!(net.in_flight(), 0);
    }
}

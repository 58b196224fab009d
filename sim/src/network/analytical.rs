//! Analytical network: a flow takes its path's latency plus its size over
//! the path's slowest link, whatever else is on the network (no contention).

use crate::error::SimError;
use crate::network::model::{Fabric, FlowTag, NetworkModel};
use crate::network::topology::Topology;
use crate::time::SimTime;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub struct AnalyticalNetwork {
    fabric: Fabric,
    arrivals: BinaryHeap<Reverse<(SimTime, u64, FlowTag)>>,
    seq: u64,
}

impl AnalyticalNetwork {
    pub fn new(topology: Topology) -> Self {
        AnalyticalNetwork {
            fabric: Fabric::new(topology),
            arrivals: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl NetworkModel for AnalyticalNetwork {
    fn start_flow(
        &mut self,
        now: SimTime,
        src: usize,
        dst: usize,
        bytes: u64,
        tag: FlowTag,
    ) -> Result<(), SimError> {
        let r = self.fabric.route(src, dst)?;
        self.fabric.account(r, bytes);
        let transfer = if r.len == 0 {
            SimTime::ZERO
        } else {
            SimTime::from_secs_f64_ceil(bytes as f64 / r.min_bytes_per_s)
        };
        self.arrivals
            .push(Reverse((now + r.latency + transfer, self.seq, tag)));
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
}

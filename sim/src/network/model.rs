//! The narrow interface between traffic generators and network models
//! (in the style of ASTRA-sim's network API): start a flow of bytes from one
//! endpoint to another, and be told, by tag, when it has arrived. Time moves
//! only when the caller advances the model to the next event it reports.

use crate::error::SimError;
use crate::network::topology::Topology;
use crate::time::SimTime;
use serde::Serialize;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes the packed (source, destination) key of the route cache with one
/// multiply (the default SipHash dominated route look-ups).
#[derive(Default)]
struct PairHasher(u64);

impl Hasher for PairHasher {
    fn finish(&self) -> u64 {
        // Fold the high bits down: hashbrown picks buckets by the low bits.
        let x = self.0 ^ (self.0 >> 29);
        x ^ (x >> 32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// The caller's label for a flow, returned on completion.
pub type FlowTag = u64;

/// Traffic and load of one directed link over a run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LinkUsage {
    pub from: String,
    pub to: String,
    pub bytes: u64,
    /// Bytes carried over (capacity x elapsed time), in [0, 1].
    pub utilization: f64,
}

/// A network model: analytical or flow-level.
pub trait NetworkModel {
    /// Starts sending `bytes` from endpoint `src` to endpoint `dst` at `now`
    /// (not before the last time the model was advanced to).
    fn start_flow(
        &mut self,
        now: SimTime,
        src: usize,
        dst: usize,
        bytes: u64,
        tag: FlowTag,
    ) -> Result<(), SimError> {
        let route = self.fabric_mut().route(src, dst)?;
        self.start_flow_on(now, src, dst, route, bytes, tag)
    }

    /// The same on `route`, the route from `src` to `dst` already looked up
    /// (`Fabric::route`): a caller that starts the same pairs' flows step
    /// after step keeps their routes instead of looking them up each time.
    fn start_flow_on(
        &mut self,
        now: SimTime,
        src: usize,
        dst: usize,
        route: Route,
        bytes: u64,
        tag: FlowTag,
    ) -> Result<(), SimError>;

    /// The time of the model's next event (a completion or an internal rate
    /// change), or `None` when idle.
    fn next_event_time(&mut self) -> Option<SimTime>;

    /// Processes every event up to and including `now`, appending the tags
    /// of flows that arrived.
    fn advance(&mut self, now: SimTime, done: &mut Vec<FlowTag>);

    /// Propagation latency of the path from `src` to `dst` (for control
    /// messages that carry no payload).
    fn path_latency(&mut self, src: usize, dst: usize) -> Result<SimTime, SimError>;

    /// Flows started but not yet arrived.
    fn in_flight(&self) -> usize;

    /// Shared routing and accounting state.
    fn fabric(&self) -> &Fabric;

    /// The same, to change (recording the flows, say).
    fn fabric_mut(&mut self) -> &mut Fabric;
}

/// Endpoint counts up to this use the dense route table (at most 16 M
/// entries, 64 MiB of lazily zeroed pages); larger ones the hash map.
const DENSE_ENDPOINTS: usize = 4096;

/// Routing, route cache and per-link byte counters, shared by both models.
pub struct Fabric {
    pub(crate) topology: Topology,
    /// Route arena: a cached route is `route_links[start..start+len]`.
    route_links: Vec<u32>,
    /// Every cached route, in order of first use.
    routes: Vec<Route>,
    /// Dense route table, indexed by `src * endpoints + dst`: 1 + the
    /// route's index in `routes`, 0 while not cached. Empty above
    /// `DENSE_ENDPOINTS` endpoints, where `route_cache` is used instead.
    dense: Vec<u32>,
    endpoints: usize,
    /// Keyed by `src << 32 | dst`: index in `routes`.
    route_cache: HashMap<u64, u32, BuildHasherDefault<PairHasher>>,
    link_bytes: Vec<u64>,
    bytes_moved: u64,
    /// Every flow started, in order, while recording (`record_flows`).
    flow_log: Option<Vec<FlowStart>>,
}

/// One started flow as a peer simulator needs it to replay a run's traffic
/// (`bench/simgrid/replay.py`): when, between which endpoints, how much.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowStart {
    pub at: SimTime,
    pub src: usize,
    pub dst: usize,
    pub bytes: u64,
}

/// A cached route: a slice of the arena, its latency and bottleneck.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub start: u32,
    pub len: u32,
    pub latency: SimTime,
    pub min_bytes_per_s: f64,
}

impl Fabric {
    pub fn new(topology: Topology) -> Fabric {
        let n = topology.links().len();
        let endpoints = topology.endpoint_count();
        // vec![0; _] allocates zeroed memory: pages are touched only when used.
        let dense = if endpoints <= DENSE_ENDPOINTS { vec![0; endpoints * endpoints] } else { Vec::new() };
        Fabric {
            topology,
            route_links: Vec::new(),
            routes: Vec::new(),
            dense,
            endpoints,
            route_cache: HashMap::default(),
            link_bytes: vec![0; n],
            bytes_moved: 0,
            flow_log: None,
        }
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    #[inline]
    pub fn route(&mut self, src: usize, dst: usize) -> Result<Route, SimError> {
        if !self.dense.is_empty() && src < self.endpoints && dst < self.endpoints {
            let slot = src * self.endpoints + dst;
            let i = self.dense[slot];
            if i != 0 {
                return Ok(self.routes[i as usize - 1]);
            }
            let r = self.find_route(src, dst)?;
            self.dense[slot] = self.routes.len() as u32;
            return Ok(r);
        }
        let key = (src as u64) << 32 | dst as u64;
        if let Some(&i) = self.route_cache.get(&key) {
            return Ok(self.routes[i as usize]);
        }
        let r = self.find_route(src, dst)?;
        self.route_cache.insert(key, self.routes.len() as u32 - 1);
        Ok(r)
    }

    /// Routes `src` to `dst` on the topology and appends the route to
    /// `routes` and its links to the arena.
    #[cold]
    fn find_route(&mut self, src: usize, dst: usize) -> Result<Route, SimError> {
        let links = self.topology.route(src, dst)?;
        let start = self.route_links.len() as u32;
        let mut latency = SimTime::ZERO;
        let mut min_bw = f64::INFINITY;
        for &l in &links {
            let p = self.topology.links()[l as usize].params;
            latency += p.latency;
            min_bw = min_bw.min(p.bytes_per_s);
        }
        self.route_links.extend_from_slice(&links);
        let r = Route {
            start,
            len: links.len() as u32,
            latency,
            min_bytes_per_s: min_bw,
        };
        self.routes.push(r);
        Ok(r)
    }

    /// The route arena: every cached route's links, back to back.
    pub fn all_route_links(&self) -> &[u32] {
        &self.route_links
    }

    pub fn route_links(&self, r: Route) -> &[u32] {
        &self.route_links[r.start as usize..(r.start + r.len) as usize]
    }

    /// Counts a flow of `bytes` from `src` to `dst` started at `at` on every
    /// link of its route `r` (and in the flow log, while recording).
    pub fn account(&mut self, at: SimTime, src: usize, dst: usize, r: Route, bytes: u64) {
        if let Some(log) = &mut self.flow_log {
            log.push(FlowStart { at, src, dst, bytes });
        }
        self.bytes_moved += bytes;
        let (s, e) = (r.start as usize, (r.start + r.len) as usize);
        for &l in &self.route_links[s..e] {
            self.link_bytes[l as usize] += bytes;
        }
    }

    /// Starts recording every flow started from now on.
    pub fn record_flows(&mut self) {
        self.flow_log.get_or_insert_with(Vec::new);
    }

    /// The flows recorded since `record_flows` (empty if never called).
    pub fn take_flow_log(&mut self) -> Vec<FlowStart> {
        self.flow_log.take().unwrap_or_default()
    }

    /// Payload bytes of every flow started (counted once per flow).
    pub fn bytes_moved(&self) -> u64 {
        self.bytes_moved
    }

    pub fn link_capacity(&self, l: usize) -> f64 {
        self.topology.links()[l].params.bytes_per_s
    }

    /// Per-link bytes and utilization over `elapsed`, for links that carried traffic.
    pub fn link_usage(&self, elapsed: SimTime) -> Vec<LinkUsage> {
        let secs = elapsed.as_secs_f64();
        self.topology
            .links()
            .iter()
            .zip(&self.link_bytes)
            .filter(|(_, b)| **b > 0)
            .map(|(l, &bytes)| LinkUsage {
                from: self.topology.node_label(l.from),
                to: self.topology.node_label(l.to),
                bytes,
                utilization: if secs > 0.0 {
                    (bytes as f64 / (l.params.bytes_per_s * secs)).min(1.0)
                } else {
                    0.0
                },
            })
            .collect()
    }

    /// Highest utilization of any link over `elapsed`.
    pub fn max_link_utilization(&self, elapsed: SimTime) -> f64 {
        let secs = elapsed.as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        self.topology
            .links()
            .iter()
            .zip(&self.link_bytes)
            .map(|(l, &b)| (b as f64 / (l.params.bytes_per_s * secs)).min(1.0))
            .fold(0.0, f64::max)
    }
}

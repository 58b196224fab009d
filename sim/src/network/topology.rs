//! Network topologies as petgraph graphs. Every cable is two directed links
//! (full duplex), each with its own bandwidth and latency. Endpoints are the
//! devices that run workers or PS tasks; switches only forward.
//!
//! Routing: shortest paths (hop count) with deterministic ECMP: at each hop
//! the next link among the equal-cost ones is picked by a hash of
//! (source, destination, hop), so a flow's path never depends on run order.

use crate::error::SimError;
use crate::time::SimTime;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use std::collections::{HashMap, VecDeque};

/// Bandwidth and latency of one direction of a cable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkParams {
    pub bytes_per_s: f64,
    pub latency: SimTime,
}

impl LinkParams {
    pub fn from_gbps(gbps: f64, latency_us: f64) -> LinkParams {
        LinkParams {
            bytes_per_s: gbps * 1e9 / 8.0,
            latency: SimTime::from_secs_f64(latency_us * 1e-6),
        }
    }
}

/// What a graph node is.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// A device port, numbered from 0 in construction order.
    Endpoint(usize),
    /// A switch or router, with a label for reports.
    Switch(String),
}

/// The shape of network to build.
#[derive(Debug, Clone, PartialEq)]
pub enum TopologyShape {
    /// One switch, every endpoint on its own port.
    Star { endpoints: usize },
    /// Endpoints in a ring, each wired to its two neighbours.
    Ring { endpoints: usize },
    /// Every pair of endpoints wired directly (a cable each), so no two
    /// flows between different pairs share a link: what per-pair emulated
    /// links (`flowlab server --link`) give the tasks of a local cluster.
    Mesh { endpoints: usize },
    /// Endpoints on a 2D or 3D wrap-around grid (dims.len() is 2 or 3).
    Torus { dims: Vec<usize> },
    /// k-ary fat-tree (k even): k pods of k/2 edge and k/2 aggregation
    /// switches, (k/2)^2 cores, k^3/4 endpoints.
    FatTree { k: usize },
    /// Two-level leaf/spine: `hosts_per_leaf` endpoints per leaf, every leaf
    /// wired to every spine; uplinks are slowed so that a leaf's downlink
    /// capacity is `oversubscription` times its uplink capacity.
    Clos {
        leaves: usize,
        hosts_per_leaf: usize,
        spines: usize,
        oversubscription: f64,
    },
    /// `hosts` machines, each with `devices_per_host` devices on an internal
    /// switch (NVLink or PCIe: the `intra` link), machines joined by one
    /// switch over their NICs (the main link).
    Hierarchical {
        hosts: usize,
        devices_per_host: usize,
        intra: LinkParams,
    },
}

impl TopologyShape {
    /// Directed links the shape builds (two per cable), counted in closed
    /// form before anything is built, in f64 so that no size overflows:
    /// what a topology costs in memory grows with it.
    pub fn directed_links(&self) -> f64 {
        let cables = match self {
            TopologyShape::Star { endpoints } | TopologyShape::Ring { endpoints } => *endpoints as f64,
            TopologyShape::Mesh { endpoints } => {
                let e = *endpoints as f64;
                e * (e - 1.0) / 2.0
            }
            TopologyShape::Torus { dims } => {
                let total: f64 = dims.iter().map(|&d| d as f64).product();
                // a dimension of 2 has one cable per pair, of 1 none
                dims.iter().map(|&d| if d > 2 { total } else if d == 2 { total / 2.0 } else { 0.0 }).sum()
            }
            TopologyShape::FatTree { k } => {
                // host-edge, edge-aggregation and aggregation-core: k^3/4 each
                let k = *k as f64;
                3.0 * k * k * k / 4.0
            }
            TopologyShape::Clos { leaves, hosts_per_leaf, spines, .. } => *leaves as f64 * (*hosts_per_leaf as f64 + *spines as f64),
            TopologyShape::Hierarchical { hosts, devices_per_host, .. } => *hosts as f64 * (*devices_per_host as f64 + 1.0),
        };
        2.0 * cables
    }

    /// Endpoints the shape builds, in f64 (see `directed_links`).
    pub fn endpoints(&self) -> f64 {
        match self {
            TopologyShape::Star { endpoints } | TopologyShape::Ring { endpoints } | TopologyShape::Mesh { endpoints } => *endpoints as f64,
            TopologyShape::Torus { dims } => dims.iter().map(|&d| d as f64).product(),
            TopologyShape::FatTree { k } => (*k as f64).powi(3) / 4.0,
            TopologyShape::Clos { leaves, hosts_per_leaf, .. } => *leaves as f64 * *hosts_per_leaf as f64,
            TopologyShape::Hierarchical { hosts, devices_per_host, .. } => *hosts as f64 * *devices_per_host as f64,
        }
    }
}

/// One directed link: its ends and parameters.
#[derive(Debug, Clone)]
pub struct Link {
    pub from: NodeIndex,
    pub to: NodeIndex,
    pub params: LinkParams,
}

/// A built network with routing.
pub struct Topology {
    name: String,
    graph: DiGraph<NodeKind, u32>,
    /// The graph's links, out of each node and into it, for routing.
    outgoing: Adjacency,
    incoming: Adjacency,
    /// `route`'s candidate links, kept between calls.
    candidates: Vec<(u32, NodeIndex)>,
    endpoints: Vec<NodeIndex>,
    links: Vec<Link>,
    dist_cache: HashMap<u32, Vec<u32>>,
    dist_cache_entries: usize,
}

/// One end of a directed link as seen from a node: the node at the other
/// end and the link's id.
#[derive(Debug, Clone, Copy)]
struct Hop {
    node: u32,
    link: u32,
}

/// Every node's links in one direction, back to back in the order the
/// links were made (node n's are `hops[at[n]..at[n + 1]]`): routing scans
/// a switch's links at every hop, and petgraph's per-node lists chase a
/// pointer per link (`Topology::route` was half of a 4,096-worker Clos
/// run's first two steps).
#[derive(Debug)]
struct Adjacency {
    at: Vec<u32>,
    hops: Vec<Hop>,
}

impl Adjacency {
    fn build(graph: &DiGraph<NodeKind, u32>, dir: Direction) -> Adjacency {
        let ends = |e: &petgraph::graph::EdgeReference<'_, u32>| match dir {
            Direction::Outgoing => (e.source().index(), e.target().index()),
            Direction::Incoming => (e.target().index(), e.source().index()),
        };
        let mut at = vec![0u32; graph.node_count() + 1];
        for e in graph.edge_references() {
            at[ends(&e).0 + 1] += 1;
        }
        for i in 1..at.len() {
            at[i] += at[i - 1];
        }
        let mut next = at.clone();
        let mut hops = vec![Hop { node: 0, link: 0 }; graph.edge_count()];
        // edge_references runs in edge-index order, so each node's hops
        // stay in that order
        for e in graph.edge_references() {
            let (key, other) = ends(&e);
            hops[next[key] as usize] = Hop { node: other as u32, link: *e.weight() };
            next[key] += 1;
        }
        Adjacency { at, hops }
    }

    fn of(&self, n: NodeIndex) -> &[Hop] {
        &self.hops[self.at[n.index()] as usize..self.at[n.index() + 1] as usize]
    }
}

/// Bound on cached distance entries (BFS results per destination).
const DIST_CACHE_LIMIT: usize = 1 << 24;

impl Topology {
    /// Builds `shape` with `link` on every cable (except `intra` links and
    /// Clos uplinks, which the shape sets).
    pub fn build(shape: &TopologyShape, link: LinkParams) -> Result<Topology, SimError> {
        if !(link.bytes_per_s > 0.0 && link.bytes_per_s.is_finite()) {
            return Err(SimError::param("network.link_gbps", "bandwidth must be positive and finite"));
        }
        let mut b = Builder::default();
        let name = match shape {
            TopologyShape::Star { endpoints } => {
                let s = b.switch("switch");
                for _ in 0..*endpoints {
                    let e = b.endpoint();
                    b.cable(e, s, link);
                }
                "star"
            }
            TopologyShape::Ring { endpoints } => {
                let n = *endpoints;
                let eps: Vec<_> = (0..n).map(|_| b.endpoint()).collect();
                if n == 2 {
                    b.cable(eps[0], eps[1], link);
                } else if n > 2 {
                    for i in 0..n {
                        b.cable(eps[i], eps[(i + 1) % n], link);
                    }
                }
                "ring"
            }
            TopologyShape::Mesh { endpoints } => {
                let eps: Vec<_> = (0..*endpoints).map(|_| b.endpoint()).collect();
                for i in 0..eps.len() {
                    for j in i + 1..eps.len() {
                        b.cable(eps[i], eps[j], link);
                    }
                }
                "mesh"
            }
            TopologyShape::Torus { dims } => {
                let total: usize = dims.iter().product();
                let eps: Vec<_> = (0..total).map(|_| b.endpoint()).collect();
                let mut stride = 1;
                for &d in dims {
                    for idx in 0..total {
                        let coord = (idx / stride) % d;
                        let next = idx - coord * stride + ((coord + 1) % d) * stride;
                        // A dimension of 2 has one neighbour (not two cables); 1 has none.
                        if d > 2 || (d == 2 && coord == 0) {
                            b.cable(eps[idx], eps[next], link);
                        }
                    }
                    stride *= d;
                }
                if dims.len() == 3 { "torus3d" } else { "torus2d" }
            }
            TopologyShape::FatTree { k } => {
                let k = *k;
                let h = k / 2;
                let cores: Vec<_> = (0..h * h).map(|i| b.switch(&format!("core{i}"))).collect();
                for p in 0..k {
                    let aggs: Vec<_> = (0..h).map(|j| b.switch(&format!("agg{p}.{j}"))).collect();
                    for (j, &a) in aggs.iter().enumerate() {
                        for c in 0..h {
                            b.cable(a, cores[j * h + c], link);
                        }
                    }
                    for i in 0..h {
                        let e = b.switch(&format!("edge{p}.{i}"));
                        for &a in &aggs {
                            b.cable(e, a, link);
                        }
                        for _ in 0..h {
                            let ep = b.endpoint();
                            b.cable(ep, e, link);
                        }
                    }
                }
                "fat_tree"
            }
            TopologyShape::Clos {
                leaves,
                hosts_per_leaf,
                spines,
                oversubscription,
            } => {
                let up = LinkParams {
                    bytes_per_s: link.bytes_per_s * *hosts_per_leaf as f64
                        / (*spines as f64 * oversubscription),
                    latency: link.latency,
                };
                let sp: Vec<_> = (0..*spines).map(|i| b.switch(&format!("spine{i}"))).collect();
                for l in 0..*leaves {
                    let leaf = b.switch(&format!("leaf{l}"));
                    for &s in &sp {
                        b.cable(leaf, s, up);
                    }
                    for _ in 0..*hosts_per_leaf {
                        let ep = b.endpoint();
                        b.cable(ep, leaf, link);
                    }
                }
                "clos"
            }
            TopologyShape::Hierarchical {
                hosts,
                devices_per_host,
                intra,
            } => {
                if !(intra.bytes_per_s > 0.0 && intra.bytes_per_s.is_finite()) {
                    return Err(SimError::param(
                        "network.intra_link_gbps",
                        "bandwidth must be positive and finite",
                    ));
                }
                let top = b.switch("top");
                for hidx in 0..*hosts {
                    let hs = b.switch(&format!("host{hidx}"));
                    b.cable(hs, top, link);
                    for _ in 0..*devices_per_host {
                        let ep = b.endpoint();
                        b.cable(ep, hs, *intra);
                    }
                }
                "hierarchical"
            }
        };
        Ok(Topology {
            name: name.to_string(),
            outgoing: Adjacency::build(&b.graph, Direction::Outgoing),
            incoming: Adjacency::build(&b.graph, Direction::Incoming),
            candidates: Vec::new(),
            graph: b.graph,
            endpoints: b.endpoints,
            links: b.links,
            dist_cache: HashMap::new(),
            dist_cache_entries: 0,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn endpoint_count(&self) -> usize {
        self.endpoints.len()
    }

    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// A short label for a node, for link reports ("ep3", "core1").
    pub fn node_label(&self, n: NodeIndex) -> String {
        match &self.graph[n] {
            NodeKind::Endpoint(i) => format!("ep{i}"),
            NodeKind::Switch(s) => s.clone(),
        }
    }

    /// The directed links from endpoint `src` to endpoint `dst`, in order.
    pub fn route(&mut self, src: usize, dst: usize) -> Result<Vec<u32>, SimError> {
        let count = self.endpoints.len();
        for e in [src, dst] {
            if e >= count {
                return Err(SimError::NoSuchEndpoint { endpoint: e, count });
            }
        }
        if src == dst {
            return Ok(Vec::new());
        }
        let s = self.endpoints[src];
        let d = self.endpoints[dst];
        // Distances to `d`: to its one switch plus one, where `d` hangs off
        // one switch and does not forward (one search per switch, shared by
        // its endpoints, rather than one per endpoint); else from `d` itself.
        let (from, extra) = self.distance_source(d);
        self.ensure_dist(from);
        let cached = &self.dist_cache[&(from.index() as u32)];
        let dist = |x: NodeIndex| if x == d { 0 } else { cached[x.index()].saturating_add(extra) };
        if dist(s) == u32::MAX {
            return Err(SimError::NoRoute { src, dst });
        }
        let mut path = Vec::with_capacity(dist(s) as usize);
        let mut u = s;
        let mut hop = 0u64;
        let mut cand = std::mem::take(&mut self.candidates);
        while u != d {
            cand.clear();
            let du = dist(u);
            if du == 1 {
                // The last hop: only `d` is at distance 0, so the candidates
                // are the links from `u` into `d`, found among `d`'s few
                // incoming links rather than a big switch's outgoing ones.
                for h in self.incoming.of(d) {
                    if h.node as usize == u.index() {
                        cand.push((h.link, d));
                    }
                }
            } else {
                for h in self.outgoing.of(u) {
                    let v = NodeIndex::new(h.node as usize);
                    // Only switches forward traffic; endpoints other than the
                    // destination are not transit nodes unless the topology is
                    // direct (ring, torus), where endpoints are the routers.
                    if dist(v) != u32::MAX && dist(v) + 1 == du {
                        cand.push((h.link, v));
                    }
                }
            }
            // in the order the links were made (the adjacency's), as ECMP
            // has always numbered them
            let pick = (ecmp_hash(src as u64, dst as u64, hop) % cand.len() as u64) as usize;
            let (link, v) = cand[pick];
            path.push(link);
            u = v;
            hop += 1;
        }
        self.candidates = cand;
        Ok(path)
    }

    /// The node whose BFS distances give those to endpoint `d`, and what to
    /// add to them: `d`'s switch and 1 when `d` does not forward and all its
    /// links go to that one switch (every path to `d` then ends through it,
    /// and a search from it expands the same nodes as one from `d` after
    /// its first step); else `d` and 0.
    fn distance_source(&self, d: NodeIndex) -> (NodeIndex, u32) {
        if self.forwards(d) {
            return (d, 0);
        }
        let mut next = self.graph.neighbors_directed(d, Direction::Outgoing);
        let Some(w) = next.next() else { return (d, 0) };
        if next.all(|x| x == w) && matches!(self.graph[w], NodeKind::Switch(_)) {
            (w, 1)
        } else {
            (d, 0)
        }
    }

    /// BFS hop distances to `d` (links are symmetric, so BFS from `d` over
    /// outgoing links gives distances towards it).
    fn ensure_dist(&mut self, d: NodeIndex) {
        let key = d.index() as u32;
        if self.dist_cache.contains_key(&key) {
            return;
        }
        let n = self.graph.node_count();
        if self.dist_cache_entries + n > DIST_CACHE_LIMIT {
            self.dist_cache.clear();
            self.dist_cache_entries = 0;
        }
        let mut dist = vec![u32::MAX; n];
        dist[d.index()] = 0;
        let mut q = VecDeque::from([d]);
        while let Some(u) = q.pop_front() {
            // Endpoints of switched topologies do not forward: only expand
            // from an endpoint if it is the destination or the topology is direct.
            if u != d && !self.forwards(u) {
                continue;
            }
            for h in self.outgoing.of(u) {
                let v = h.node as usize;
                if dist[v] == u32::MAX {
                    dist[v] = dist[u.index()] + 1;
                    q.push_back(NodeIndex::new(v));
                }
            }
        }
        self.dist_cache_entries += n;
        self.dist_cache.insert(key, dist);
    }

    fn forwards(&self, n: NodeIndex) -> bool {
        match self.graph[n] {
            NodeKind::Switch(_) => true,
            NodeKind::Endpoint(_) => self.name == "ring" || self.name.starts_with("torus"),
        }
    }
}

/// splitmix64 over (src, dst, hop): a fixed, well-mixed ECMP choice.
fn ecmp_hash(src: u64, dst: u64, hop: u64) -> u64 {
    let mut z = (src << 32 ^ dst).wrapping_add(hop.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Default)]
struct Builder {
    graph: DiGraph<NodeKind, u32>,
    endpoints: Vec<NodeIndex>,
    links: Vec<Link>,
}

impl Builder {
    fn endpoint(&mut self) -> NodeIndex {
        let n = self.graph.add_node(NodeKind::Endpoint(self.endpoints.len()));
        self.endpoints.push(n);
        n
    }
    fn switch(&mut self, label: &str) -> NodeIndex {
        self.graph.add_node(NodeKind::Switch(label.to_string()))
    }
    /// A full-duplex cable: two directed links.
    fn cable(&mut self, a: NodeIndex, b: NodeIndex, p: LinkParams) {
        for (x, y) in [(a, b), (b, a)] {
            let id = self.links.len() as u32;
            self.graph.add_edge(x, y, id);
            self.links.push(Link {
                from: x,
                to: y,
                params: p,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use petgraph::graph::EdgeIndex;

    fn l() -> LinkParams {
        LinkParams::from_gbps(10.0, 1.0)
    }

    /// Routes by scanning every node's outgoing links at every hop (the
    /// definition `route` shortcuts on the last hop).
    fn route_by_scan(t: &mut Topology, src: usize, dst: usize) -> Vec<u32> {
        if src == dst {
            return Vec::new();
        }
        let (s, d) = (t.endpoints[src], t.endpoints[dst]);
        t.ensure_dist(d);
        let dist = t.dist_cache[&(d.index() as u32)].clone();
        let (mut u, mut hop, mut path) = (s, 0u64, Vec::new());
        while u != d {
            let mut cand: Vec<(EdgeIndex, NodeIndex)> = t
                .graph
                .edges_directed(u, Direction::Outgoing)
                .filter(|e| dist[e.target().index()] != u32::MAX && dist[e.target().index()] + 1 == dist[u.index()])
                .map(|e| (e.id(), e.target()))
                .collect();
            cand.sort_by_key(|(e, _)| e.index());
            let (e, v) = cand[(ecmp_hash(src as u64, dst as u64, hop) % cand.len() as u64) as usize];
            path.push(t.graph[e]);
            u = v;
            hop += 1;
        }
        path
    }

    /// Small topologies of every shape (tori with dimensions of 2 and 1,
    /// whose cables are counted apart).
    fn one_of_each_shape() -> Vec<TopologyShape> {
        vec![
            TopologyShape::Star { endpoints: 9 },
            TopologyShape::Ring { endpoints: 7 },
            TopologyShape::Mesh { endpoints: 6 },
            TopologyShape::Torus { dims: vec![3, 4] },
            TopologyShape::Torus { dims: vec![2, 3, 2] },
            TopologyShape::Torus { dims: vec![2, 3, 1] },
            TopologyShape::FatTree { k: 4 },
            TopologyShape::FatTree { k: 6 },
            TopologyShape::Clos { leaves: 3, hosts_per_leaf: 2, spines: 2, oversubscription: 2.0 },
            TopologyShape::Hierarchical { hosts: 3, devices_per_host: 2, intra: l() },
        ]
    }

    #[test]
    fn sizes_in_closed_form_are_the_built_topologies() {
        for shape in one_of_each_shape() {
            let t = Topology::build(&shape, LinkParams::from_gbps(10.0, 1.0)).unwrap();
            assert_eq!((shape.directed_links(), shape.endpoints()), (t.links().len() as f64, t.endpoint_count() as f64), "{shape:?}");
        }
    }

    #[test]
    fn routes_equal_the_full_scan_on_every_shape() {
        for shape in one_of_each_shape() {
            let mut t = Topology::build(&shape, l()).unwrap();
            let n = t.endpoint_count();
            for src in 0..n {
                for dst in 0..n {
                    assert_eq!(t.route(src, dst).unwrap(), route_by_scan(&mut t, src, dst), "{shape:?} {src}->{dst}");
                }
            }
        }
    }

    #[test]
    fn star_routes_through_the_switch() {
        let mut t = Topology::build(&TopologyShape::Star { endpoints: 4 }, l()).unwrap();
        assert_eq!(t.endpoint_count(), 4);
        assert_eq!(t.links().len(), 8);
        let r = t.route(0, 3).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(t.node_label(t.links()[r[0] as usize].to), "switch");
    }

    #[test]
    fn ring_takes_the_short_way_round() {
        let mut t = Topology::build(&TopologyShape::Ring { endpoints: 8 }, l()).unwrap();
        assert_eq!(t.route(0, 1).unwrap().len(), 1);
        assert_eq!(t.route(0, 7).unwrap().len(), 1);
        assert_eq!(t.route(0, 3).unwrap().len(), 3);
        assert_eq!(t.route(0, 4).unwrap().len(), 4);
    }

    #[test]
    fn torus_hops_are_wraparound_manhattan() {
        let mut t = Topology::build(&TopologyShape::Torus { dims: vec![4, 4] }, l()).unwrap();
        assert_eq!(t.links().len(), 2 * 32);
        // (0,0) -> (3,3): one hop each way round.
        assert_eq!(t.route(0, 15).unwrap().len(), 2);
        let mut t3 = Topology::build(&TopologyShape::Torus { dims: vec![2, 2, 2] }, l()).unwrap();
        assert_eq!(t3.links().len(), 2 * 12);
        assert_eq!(t3.route(0, 7).unwrap().len(), 3);
    }

    #[test]
    fn fat_tree_sizes_and_path_lengths() {
        let mut t = Topology::build(&TopologyShape::FatTree { k: 4 }, l()).unwrap();
        assert_eq!(t.endpoint_count(), 16);
        // cables: 16 host + 16 edge-agg + 16 agg-core = 48, two links each.
        assert_eq!(t.links().len(), 96);
        assert_eq!(t.route(0, 1).unwrap().len(), 2); // same edge switch
        assert_eq!(t.route(0, 2).unwrap().len(), 4); // same pod
        assert_eq!(t.route(0, 15).unwrap().len(), 6); // across pods
        // ECMP is deterministic and spreads pairs over the cores.
        let a = t.route(0, 15).unwrap();
        assert_eq!(a, t.route(0, 15).unwrap());
        let cores: std::collections::BTreeSet<String> = (0..4)
            .flat_map(|s| (12..16).map(move |d| (s, d)))
            .map(|(s, d)| {
                let r = t.route(s, d).unwrap();
                t.node_label(t.links()[r[2] as usize].to)
            })
            .collect();
        assert!(cores.len() > 1, "ECMP used one core only: {cores:?}");
    }

    #[test]
    fn clos_uplinks_carry_the_oversubscription() {
        let shape = TopologyShape::Clos {
            leaves: 2,
            hosts_per_leaf: 8,
            spines: 2,
            oversubscription: 4.0,
        };
        let mut t = Topology::build(&shape, l()).unwrap();
        let r = t.route(0, 15).unwrap();
        assert_eq!(r.len(), 4);
        let up = t.links()[r[1] as usize].params.bytes_per_s;
        assert!((up - 10e9 / 8.0 * 8.0 / (2.0 * 4.0)).abs() < 1e-6);
    }

    #[test]
    fn hierarchical_keeps_local_traffic_on_the_host() {
        let shape = TopologyShape::Hierarchical {
            hosts: 2,
            devices_per_host: 4,
            intra: LinkParams::from_gbps(2400.0, 0.5),
        };
        let mut t = Topology::build(&shape, l()).unwrap();
        assert_eq!(t.route(0, 3).unwrap().len(), 2);
        assert_eq!(t.route(0, 4).unwrap().len(), 4);
    }

    #[test]
    fn errors_name_the_endpoint_and_the_bandwidth() {
        let mut t = Topology::build(&TopologyShape::Star { endpoints: 2 }, l()).unwrap();
        assert_eq!(
            t.route(0, 5).unwrap_err().to_string(),
            "endpoint 5 does not exist (topology has 2 endpoints)"
        );
        let zero = LinkParams::from_gbps(0.0, 1.0);
        assert_eq!(
            Topology::build(&TopologyShape::Star { endpoints: 2 }, zero).err().unwrap().to_string(),
            "invalid parameter `network.link_gbps`: bandwidth must be positive and finite"
        );
    }
}

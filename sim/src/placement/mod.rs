//! Cost-based placement heuristics, each an engine [`Placer`] scored with the
//! graph-level simulator.
//!
//! | name | rule |
//! |---|---|
//! | `single_device` | everything on the fastest device with memory for it |
//! | `round_robin` | colocation groups dealt to devices in turn |
//! | `default` | the engine's rule: first allowed device, accelerators first |
//! | `tf_greedy` | TF whitepaper: topological order, earliest finish incl. input transfers |
//! | `m_topo` | Baechi: topological order, devices filled to an even memory share |
//! | `m_etf` | Baechi: earliest task first under memory limits (on all devices or fewer, gradients with their ops or not: whichever its own schedule finishes first) |
//! | `m_sct` | Baechi: ETF keeping favourite children with their parents (the same choice of devices and grouping) |
//! | `local_search` | simulated annealing over group moves from another placer's answer |
//! | `map:FILE` | a hand-written [`DeviceMap`]: node-name globs to devices |
//!
//! All of them honour requested devices and colocation groups (union-find
//! over `var`, `slots`, `_class`, as the engine's placer), and all but
//! `default` keep each device's memory within its capacity, or fail naming
//! the node that does not fit: tf_greedy, m_etf and m_sct count tensors by
//! lifetime in their own schedule (as the simulator does) and run again
//! with tighter budgets where the simulator's peak still exceeds a
//! device's capacity; round_robin and
//! m_topo reserve the sum of the outputs placed (m_topo's even memory share
//! is its rule). The simulated step is pruned to what the engine runs when
//! the options name a step (`SimOptions::step`). The cost-based ones (tf_greedy, m_topo, m_etf, m_sct, local_search)
//! return everything on the best single device instead of their own answer
//! when that simulates faster: never worse than not splitting. Placement
//! time, and what that fallback did ([`Fallback`]: the own placement's
//! step, whether the single device replaced it), are reported by
//! [`place_timed`] (with the own placement); [`SimPlacer::place_own`]
//! gives the own placement alone.

mod device_map;
mod list_schedule;
mod local_search;
mod m_topo;
mod problem;
mod sct_lp;
mod simple;

#[cfg(test)]
mod tests;

use crate::error::SimError;
use crate::graph::{GraphSimulator, SimOptions, VirtualCluster};
use flowlab_engine::{DeviceSet, EngineError, Graph, Placement, Placer};
pub use device_map::DeviceMap;
use list_schedule::Planned;
use local_search::SearchLimits;
use problem::Problem;
use std::time::{Duration, Instant};

/// Placer names [`by_name`] accepts (and `map:FILE`, a [`DeviceMap`]).
pub const PLACERS: &[&str] = &["single_device", "round_robin", "default", "tf_greedy", "m_topo", "m_etf", "m_sct", "local_search"];

/// What the cost-based placers need.
#[derive(Debug, Clone)]
pub struct PlacerOptions {
    pub cluster: VirtualCluster,
    pub sim: SimOptions,
    /// Seed of `local_search`'s random moves.
    pub seed: u64,
    /// Wall-clock budget of `local_search`.
    pub budget: Duration,
    /// Move bound of `local_search` (with a zero budget: no time limit).
    pub iterations: Option<usize>,
    /// The placer `local_search` starts from.
    pub start: String,
}

impl PlacerOptions {
    /// Defaults: f32 transfers, no profile, seed 0, 2 s budget from m_etf.
    pub fn new(cluster: VirtualCluster) -> PlacerOptions {
        PlacerOptions {
            cluster,
            sim: SimOptions::default(),
            seed: 0,
            budget: Duration::from_secs(2),
            iterations: None,
            start: "m_etf".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    SingleDevice,
    RoundRobin,
    Default,
    TfGreedy,
    MTopo,
    MEtf,
    MSct,
    LocalSearch,
    /// A hand-written [`DeviceMap`]: no cost model, no fallback.
    Map,
}

impl Rule {
    /// The cost-based rules: they promise a step no slower than the best
    /// single device in their own cost model.
    fn falls_back(self) -> bool {
        matches!(self, Rule::TfGreedy | Rule::MTopo | Rule::MEtf | Rule::MSct | Rule::LocalSearch)
    }
}

/// What a cost-based placer's fallback to one device did: its own
/// placement's simulated step, the best single device's, and whether the
/// single device was returned instead (a user comparing heuristics must
/// know when two of them return the same fallback).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fallback {
    /// The placer's own placement, simulated.
    pub own_step_seconds: f64,
    /// Whether the placer's own placement fits every device's memory.
    pub own_fits: bool,
    /// The best single device, simulated (`None` when none fits).
    pub one_device_step_seconds: Option<f64>,
    /// Whether the single device was returned instead of the own placement.
    pub used: bool,
}

/// `dev`, or everything on the best single device when that simulates
/// faster (and fits): a user asking a cost-based placer for a placement
/// expects one no slower than not splitting the graph at all.
fn no_worse_than_one_device(p: &Problem, dev: Vec<u16>) -> Result<(Vec<u16>, Fallback), SimError> {
    // In this order each placement is simulated once (see Problem::replay).
    let split = p.replay(&dev)?;
    let own = |used, one_device_step_seconds| Fallback { own_step_seconds: split.step.as_secs_f64(), own_fits: split.fits, one_device_step_seconds, used };
    let Ok(one) = simple::single_device(p) else { return Ok((dev, own(false, None))) };
    let alone = p.replay(&one)?;
    let use_one = alone.fits && (alone.step < split.step || !split.fits);
    let report = own(use_one, alone.fits.then(|| alone.step.as_secs_f64()));
    Ok((if use_one { one } else { dev }, report))
}

/// How many times a list scheduler is run again with tighter budgets.
const TIGHTENINGS: usize = 8;

/// Runs a list scheduler until the simulator agrees its placement fits.
///
/// The list schedulers count live tensors in the order of their own
/// schedule; the simulator runs each device's ready ops earliest-ready
/// first, so lifetimes, and the peak, can differ (ResNet-50 at batch 160 on
/// 4xK40: m-SCT's schedule fits 12 GB, its simulated peak is 12.43 GB).
/// Where the simulated peak exceeds a device's capacity, that device's
/// budget shrinks in proportion and the scheduler runs again, at most
/// [`TIGHTENINGS`] times; a placement that still does not fit is an error
/// naming the device.
fn within_simulated_memory(p: &mut Problem, place: impl Fn(&Problem) -> Result<Planned, SimError>) -> Result<Planned, SimError> {
    let capacity = p.capacity.clone();
    let result = (|| {
        let mut round = 0;
        loop {
            let planned = place(p)?;
            let dev = &planned.dev;
            let peak = p.replay(dev)?.peak;
            let over: Vec<usize> = (0..p.ndev).filter(|&d| peak[d] as f64 > capacity[d]).collect();
            let Some(&worst) = over.iter().max_by(|&&a, &&b| (peak[a] as f64 / capacity[a]).total_cmp(&(peak[b] as f64 / capacity[b]))) else {
                return Ok(planned);
            };
            if round == TIGHTENINGS {
                let device = &p.sim.cluster().devices()[worst];
                let node = (0..p.n).find(|&i| dev[i] as usize == worst).map(|i| p.sim.graph().names[i].clone()).unwrap_or_default();
                return Err(SimError::Placement {
                    node,
                    detail: format!(
                        "the placement fits {} in the placer's schedule, but the simulated step peaks at {} bytes of its {:.0} (budget tightened {TIGHTENINGS} times)",
                        device.name, peak[worst], capacity[worst]
                    ),
                });
            }
            for d in over {
                p.capacity[d] *= capacity[d] / peak[d] as f64;
            }
            round += 1;
        }
    })();
    p.capacity = capacity;
    result
}

fn rule(name: &str) -> Result<Rule, SimError> {
    Ok(match name {
        "single_device" => Rule::SingleDevice,
        "round_robin" => Rule::RoundRobin,
        "default" => Rule::Default,
        "tf_greedy" => Rule::TfGreedy,
        "m_topo" => Rule::MTopo,
        "m_etf" => Rule::MEtf,
        "m_sct" => Rule::MSct,
        "local_search" => Rule::LocalSearch,
        _ if name.starts_with(MAP_PREFIX) => Rule::Map,
        _ => return Err(SimError::UnknownPlacer { name: name.into(), valid: format!("{}, {MAP_PREFIX}FILE", PLACERS.join(", ")) }),
    })
}

/// The prefix of a device-map placer's name: `map:FILE`.
pub const MAP_PREFIX: &str = "map:";

/// A placer of this module, as an engine [`Placer`].
pub struct SimPlacer {
    rule: Rule,
    opts: PlacerOptions,
    /// `Rule::Map`'s rules.
    map: Option<DeviceMap>,
}

/// The placer called `name` (see [`PLACERS`]).
pub fn by_name(name: &str, opts: &PlacerOptions) -> Result<Box<dyn Placer>, SimError> {
    Ok(Box::new(SimPlacer::new(name, opts)?))
}

impl SimPlacer {
    pub fn new(name: &str, opts: &PlacerOptions) -> Result<SimPlacer, SimError> {
        let rule = rule(name)?;
        if rule == Rule::LocalSearch && rule_of_start(opts)? == Rule::LocalSearch {
            return Err(SimError::param("start", "local_search cannot start from itself"));
        }
        // local_search may start from a map
        let file = match rule {
            Rule::Map => name.strip_prefix(MAP_PREFIX),
            Rule::LocalSearch => opts.start.strip_prefix(MAP_PREFIX),
            _ => None,
        };
        let map = file.map(|f| DeviceMap::load(std::path::Path::new(f))).transpose()?;
        Ok(SimPlacer { rule, opts: opts.clone(), map })
    }

    /// Places `graph` on the cluster's devices that are in `devices`.
    pub fn place_sim(&self, graph: &Graph, devices: &DeviceSet) -> Result<Placement, SimError> {
        self.place_reported(graph, devices).map(|(placement, _)| placement)
    }

    /// As [`Self::place_sim`], with what the fallback to one device did
    /// (`None` for the placers that have none).
    pub fn place_reported(&self, graph: &Graph, devices: &DeviceSet) -> Result<(Placement, Option<Fallback>), SimError> {
        self.place_both(graph, devices).map(|(placement, _, fallback)| (placement, fallback))
    }

    /// The placement returned, the placer's own (the same unless the
    /// fallback replaced it) and what the fallback did, from one run.
    fn place_both(&self, graph: &Graph, devices: &DeviceSet) -> Result<(Placement, Placement, Option<Fallback>), SimError> {
        let (p, own) = self.own_indices(graph, devices)?;
        let own_placement = p.sim.placement_of(&own);
        if !self.rule.falls_back() {
            return Ok((own_placement.clone(), own_placement, None));
        }
        let (dev, f) = no_worse_than_one_device(&p, own)?;
        Ok((p.sim.placement_of(&dev), own_placement, Some(f)))
    }

    /// The placer's own placement, never replaced by the single device:
    /// what the heuristic itself decides.
    pub fn place_own(&self, graph: &Graph, devices: &DeviceSet) -> Result<Placement, SimError> {
        let (p, dev) = self.own_indices(graph, devices)?;
        Ok(p.sim.placement_of(&dev))
    }

    /// The problem of `graph` on `devices` and the rule's own device per node.
    fn own_indices(&self, graph: &Graph, devices: &DeviceSet) -> Result<(Problem, Vec<u16>), SimError> {
        if let Some(map) = &self.map {
            map.check_rules_used(graph.nodes().iter().map(|n| n.name.as_str()))?;
        }
        let sim = GraphSimulator::new(graph, &self.opts.cluster, &self.opts.sim)?;
        let mut p = Problem::new(sim, devices)?;
        let dev = self.assign(&mut p, self.rule)?;
        Ok((p, dev))
    }

    fn assign(&self, p: &mut Problem, rule: Rule) -> Result<Vec<u16>, SimError> {
        match rule {
            Rule::SingleDevice => simple::single_device(p),
            Rule::RoundRobin => simple::round_robin(p),
            Rule::Default => simple::default_rule(p),
            Rule::TfGreedy => within_simulated_memory(p, list_schedule::tf_greedy_planned).map(|x| x.dev),
            Rule::MTopo => with_grouping(p, true, |p| m_topo::m_topo(p)),
            Rule::MEtf => shortest_own_schedule(p, false),
            Rule::MSct => shortest_own_schedule(p, true),
            Rule::Map => match &self.map {
                Some(map) => map.assign(p),
                None => Err(SimError::param("placer", "a device map placer needs its file: `map:FILE`")),
            },
            Rule::LocalSearch => {
                let start = self.assign(p, rule_of_start(&self.opts)?)?;
                let lim = SearchLimits { seed: self.opts.seed, budget: self.opts.budget, iterations: self.opts.iterations };
                local_search::local_search(p, start, &lim)
            }
        }
    }
}

/// m-ETF, or m-SCT with `sct`, scheduled on the cluster's first `k`
/// devices for `k` = all of them and each halving down to two, each with
/// every gradient op in its forward op's group (Baechi's
/// `--colocate_grads_with_ops`) and with the graph's own groups: the
/// placement whose own schedule finishes first (a tie keeps the earlier:
/// colocated, more devices), made to fit the simulated memory.
/// ETF puts a ready node on any idle device where it starts earliest, so
/// it spreads a graph over every device even where the transfers that
/// follow cost more than the parallelism gains; and neither grouping is
/// better everywhere (colocation keeps the convolutional models'
/// gradients beside their activations on 4xK40 and ties the recurrent
/// models' gradients into groups too large to spread on 8xH100 over
/// PCIe). The choice is made on the placer's own schedules, never the
/// simulator's (which only checks the chosen one's memory, as for every
/// list scheduler), and never leaves fewer than two devices. A candidate
/// that cannot be placed gives way to the next; when none can, the first
/// error (all devices, colocated) is returned.
fn shortest_own_schedule(p: &mut Problem, sct: bool) -> Result<Vec<u16>, SimError> {
    let counts: Vec<usize> = std::iter::successors(Some(p.ndev), |&k| (k / 2 >= 2).then_some(k / 2)).collect();
    let mut first_error = None;
    // (own makespan, candidate order, colocated, devices), and m-SCT's
    // favourite children per grouping (the LP sees every device)
    let mut ranked: Vec<(u64, usize, bool, usize)> = Vec::new();
    let mut favourites: [Option<Vec<u32>>; 2] = [None, None];
    for (g, colocate) in [true, false].into_iter().enumerate() {
        let outcome = with_grouping(p, colocate, |p| {
            let fav = if sct { Some(sct_lp::favourite_children(p)?) } else { None };
            let plans: Vec<(usize, Result<u64, SimError>)> =
                counts.iter().map(|&k| (k, on_first_devices(p, k, |p| list_schedule::etf(p, fav.as_deref())).map(|x| x.makespan))).collect();
            Ok::<_, SimError>((fav, plans))
        });
        match outcome {
            Ok((fav, plans)) => {
                favourites[g] = fav;
                for (k, plan) in plans {
                    match plan {
                        Ok(makespan) => ranked.push((makespan, ranked.len(), colocate, k)),
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    ranked.sort_unstable();
    for (_, _, colocate, k) in ranked {
        let fav = favourites[usize::from(!colocate)].as_deref();
        let placed = with_grouping(p, colocate, |p| on_first_devices(p, k, |p| within_simulated_memory(p, |p| list_schedule::etf(p, fav))));
        match placed {
            Ok(planned) => return Ok(planned.dev),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| SimError::param("placer", "no device to place on")))
}

/// `place` with every gradient op in its forward op's group
/// ([`Problem::colocate_gradients`]) when `colocate`; the graph's own
/// groups come back afterwards, for the fallback and a local search
/// started from the placement.
fn with_grouping<T>(p: &mut Problem, colocate: bool, place: impl FnOnce(&mut Problem) -> T) -> T {
    if !colocate {
        return place(p);
    }
    let own = p.colocate_gradients();
    let out = place(p);
    p.restore_groups(own);
    out
}

/// `place` with only the first `k` devices open (the others' memory
/// budgets zero, so no node goes there).
fn on_first_devices<T>(p: &mut Problem, k: usize, place: impl FnOnce(&mut Problem) -> T) -> T {
    let full = p.capacity.clone();
    for c in p.capacity.iter_mut().skip(k) {
        *c = 0.0;
    }
    let out = place(p);
    p.capacity = full;
    out
}

fn rule_of_start(opts: &PlacerOptions) -> Result<Rule, SimError> {
    rule(&opts.start).map_err(|_| SimError::param("start", format!("unknown start placer `{}` (valid: {})", opts.start, PLACERS.join(", "))))
}

impl Placer for SimPlacer {
    fn place(&self, graph: &Graph, devices: &DeviceSet) -> flowlab_engine::Result<Placement> {
        self.place_sim(graph, devices).map_err(|e| match e {
            SimError::Placement { node, detail } | SimError::Graph { node, detail } => EngineError::Placement { node, detail },
            other => EngineError::Placement { node: String::new(), detail: other.to_string() },
        })
    }
}

/// A placement and how long the placer took to decide it.
#[derive(Debug, Clone)]
pub struct PlacementOutcome {
    pub placer: String,
    pub placement: Placement,
    /// The placer's own placement: `placement`, unless the fallback
    /// replaced it with the single device.
    pub own_placement: Placement,
    /// Wall-clock seconds of the placer's run (simulator set-up included).
    pub seconds: f64,
    /// The cost-based placers' fallback to one device (`None` for others).
    pub fallback: Option<Fallback>,
}

/// Runs the placer called `name` on all of the cluster's devices and times it.
pub fn place_timed(name: &str, graph: &Graph, opts: &PlacerOptions) -> Result<PlacementOutcome, SimError> {
    let placer = SimPlacer::new(name, opts)?;
    let devices = opts.cluster.device_set();
    let t = Instant::now();
    let (placement, own_placement, fallback) = placer.place_both(graph, &devices)?;
    Ok(PlacementOutcome { placer: name.into(), placement, own_placement, seconds: t.elapsed().as_secs_f64(), fallback })
}

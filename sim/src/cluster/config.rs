//! One sweep point's cluster configuration, as read from YAML, and its range
//! checks. Every struct denies unknown keys; every field has a default.

use crate::cluster::workload::{ModelRef, Workload};
use crate::comm::collective::AllReduceAlgo;
use crate::error::SimError;
use crate::network::topology::{LinkParams, TopologyShape};
use crate::network::ModelKind;
use flowlab_hw::CommFormat;
use serde::{Deserialize, Serialize};

/// One sweep point of a cluster experiment: a training run on a simulated
/// cluster of workers, parameter servers and links.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Workload: a catalog name or an inline workload.
    #[serde(default)]
    pub model: ModelRef,
    /// Workers whose gradients a synchronous step needs (backups come on top).
    #[serde(default = "one_u32")]
    pub workers: u32,
    /// Parameter-server tasks (0 with `allreduce`).
    #[serde(default)]
    pub ps: u32,
    #[serde(default)]
    pub strategy: Strategy,
    /// Use an all-reduce among workers instead of parameter servers.
    #[serde(default)]
    pub allreduce: Option<AllReduceAlgo>,
    #[serde(default)]
    pub network: NetworkConfig,
    #[serde(default)]
    pub straggler: Straggler,
    /// Wire format of parameters and gradients.
    #[serde(default = "default_comm")]
    pub comm: CommFormat,
    /// Steps to run (a step applies `workers` gradients).
    #[serde(default = "default_steps")]
    pub steps: u64,
    #[serde(default)]
    pub failures: Option<Failures>,
    #[serde(default)]
    pub checkpoint: Option<Checkpoint>,
    /// The tasks share one host of this many cores (a local cluster on one
    /// machine): each worker's step overhead and compute and each PS
    /// request hold one core while they run, first come first served. Absent:
    /// every task has a machine of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cores: Option<u32>,
    /// Memory of each PS task, for the shard-size check.
    #[serde(default = "default_ps_memory_gb")]
    pub ps_memory_gb: f64,
    /// Bound on simulated time; a run that reaches it is an error.
    #[serde(default = "default_max_sim_time_s")]
    pub max_sim_time_s: f64,
    /// Bound on processed events; a run that reaches it is an error.
    #[serde(default = "default_max_events")]
    pub max_events: u64,
}

/// Training strategy (`strategy:` key), e.g. `{ sync: { backup: 2 } }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Strategy {
    /// Every worker runs on its own; staleness is recorded.
    Async {},
    /// One barrier per step; with `backup` extra workers the step ends at
    /// the first `workers` gradients and the late ones are dropped.
    Sync {
        /// Extra workers beyond `workers`, whose late gradients are dropped.
        #[serde(default)]
        backup: u32,
    },
    /// `groups` synchronous groups (workers split evenly) that run
    /// asynchronously with each other; `backup` extra workers per group.
    SyncGroups {
        /// Synchronous groups (at least 1, at most `workers`).
        groups: u32,
        /// Extra workers per group.
        #[serde(default)]
        backup: u32,
    },
}

impl Default for Strategy {
    fn default() -> Self {
        Strategy::Sync { backup: 0 }
    }
}

impl Strategy {
    /// Backup workers per synchronous group.
    pub fn backup(&self) -> u32 {
        match self {
            Strategy::Async {} => 0,
            Strategy::Sync { backup } | Strategy::SyncGroups { backup, .. } => *backup,
        }
    }
}

/// Most cores of a `host_cores` host.
pub const MAX_HOST_CORES: u32 = 4096;

/// Most endpoints of a `mesh` (its cables grow with the square).
pub const MAX_MESH: usize = 256;

/// Topology kind (`network.topology`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TopologyKind {
    #[default]
    Star,
    Ring,
    /// Every pair of endpoints on its own cable (at most `MAX_MESH` endpoints).
    Mesh,
    Torus2d,
    Torus3d,
    FatTree,
    Clos,
    Hierarchical,
}

/// The network (`network:` key). The main link is `link` (a hardware
/// catalog name) or `link_gbps` + `latency_us`, not both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// How the endpoints are wired.
    #[serde(default)]
    pub topology: TopologyKind,
    /// How flows share the links.
    #[serde(default)]
    pub model: ModelKind,
    /// The main link, a hardware catalog name (e.g. `eth-10g`), instead of
    /// `link_gbps` + `latency_us`.
    #[serde(default)]
    pub link: Option<String>,
    /// The main link's rate, Gbit/s; default 10 when neither this nor
    /// `link` is given.
    #[serde(default)]
    pub link_gbps: Option<f64>,
    /// The main link's latency, microseconds; default 5 when `link` is not
    /// given.
    #[serde(default)]
    pub latency_us: Option<f64>,
    /// Fat-tree arity (even); smallest that fits when absent.
    #[serde(default)]
    pub k: Option<u32>,
    /// Torus dimensions (2 or 3 values); near-square/cube when absent.
    #[serde(default)]
    pub dims: Option<Vec<u32>>,
    /// Clos leaves; enough for the devices when absent.
    #[serde(default)]
    pub leaves: Option<u32>,
    /// Clos: endpoints under each leaf switch.
    #[serde(default = "default_hosts_per_leaf")]
    pub hosts_per_leaf: u32,
    /// Clos: spine switches, each wired to every leaf.
    #[serde(default = "default_spines")]
    pub spines: u32,
    /// Clos: a leaf's downlink capacity over its uplink capacity (1: full
    /// bisection bandwidth).
    #[serde(default = "default_oversubscription")]
    pub oversubscription: f64,
    /// Hierarchical: machines; enough for the devices when absent.
    #[serde(default)]
    pub hosts: Option<u32>,
    /// Hierarchical: endpoints (devices) per machine.
    #[serde(default = "default_devices_per_host")]
    pub devices_per_host: u32,
    /// Hierarchical: the in-machine link (catalog name), or gbps + latency.
    #[serde(default)]
    pub intra_link: Option<String>,
    /// Hierarchical: the in-machine link's rate, Gbit/s.
    #[serde(default)]
    pub intra_link_gbps: Option<f64>,
    /// Hierarchical: the in-machine link's latency, microseconds.
    #[serde(default)]
    pub intra_latency_us: Option<f64>,
    /// Which endpoints the PS tasks and the workers take.
    #[serde(default)]
    pub tasks: TaskLayout,
}

/// How the tasks map onto the topology's endpoints (`network.tasks`).
/// Endpoints are numbered rack by rack (pod by pod, host by host), so the
/// layout decides whether the PS tasks share a rack's uplinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskLayout {
    /// PS task k on endpoint floor(k * n / ps) of the n in use, workers on
    /// the others in order: a cluster scheduler spreading a job's tasks
    /// over failure domains, so that each rack holds its share of the PS
    /// traffic.
    #[default]
    Spread,
    /// PS tasks on the first endpoints (the first rack or pod), workers
    /// after them: every PS byte crosses that rack's uplinks, where ECMP
    /// collisions make second-level bottlenecks.
    Packed,
}

impl NetworkConfig {
    /// The endpoint of each PS task and of each worker (see `TaskLayout`).
    /// On a star or a mesh every endpoint is alike, so a layout changes
    /// nothing there but the float rounding of the shares: both keep the
    /// packed numbering, whose link order the star's fast path suits best
    /// (spread numbering was 20% slower on the 200-worker star, same step
    /// times).
    pub(crate) fn task_endpoints(&self, ps: usize, workers: usize) -> (Vec<u32>, Vec<u32>) {
        let layout = match self.topology {
            TopologyKind::Star | TopologyKind::Mesh => TaskLayout::Packed,
            _ => self.tasks,
        };
        layout.endpoints(ps, workers)
    }
}

impl TaskLayout {
    /// The endpoint of each PS task and of each worker, for `ps` tasks and
    /// `workers` workers on endpoints `0..ps + workers`.
    pub(crate) fn endpoints(self, ps: usize, workers: usize) -> (Vec<u32>, Vec<u32>) {
        let n = ps + workers;
        match self {
            TaskLayout::Packed => ((0..ps as u32).collect(), (ps as u32..n as u32).collect()),
            TaskLayout::Spread => {
                let ps_at: Vec<u32> = (0..ps).map(|k| (k * n / ps) as u32).collect();
                let mut next = ps_at.iter().peekable();
                let mut worker_at = Vec::with_capacity(workers);
                for e in 0..n as u32 {
                    if next.peek() == Some(&&e) {
                        next.next();
                    } else {
                        worker_at.push(e);
                    }
                }
                (ps_at, worker_at)
            }
        }
    }
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            topology: TopologyKind::Star,
            model: ModelKind::Flow,
            link: None,
            link_gbps: None,
            latency_us: None,
            k: None,
            dims: None,
            leaves: None,
            hosts_per_leaf: default_hosts_per_leaf(),
            spines: default_spines(),
            oversubscription: default_oversubscription(),
            hosts: None,
            devices_per_host: default_devices_per_host(),
            intra_link: None,
            intra_link_gbps: None,
            intra_latency_us: None,
            tasks: TaskLayout::Spread,
        }
    }
}

/// Per-step compute slowdowns (`straggler:` key, tagged by `dist`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum Straggler {
    /// Every step takes its compute time (the default).
    #[default]
    None,
    /// Compute time times exp(sigma * Z), Z standard normal (median 1).
    Lognormal {
        /// The log's standard deviation (0.3: a 99th percentile step 2x the median).
        sigma: f64,
    },
    /// With probability `p`, compute time grows by an exponential amount
    /// of mean `mean` (a fraction of the compute time).
    Exponential {
        /// Probability that a step is slowed, in [0, 1].
        p: f64,
        /// Mean added time of a slowed step, as a fraction of its compute.
        mean: f64,
    },
    /// The listed workers always compute `factor` times slower.
    SlowMachines {
        /// Worker indices, from 0.
        workers: Vec<u32>,
        /// Their compute time's multiplier (> 0).
        factor: f64,
    },
    /// Each worker has slow periods of `duration_s` starting at exponential
    /// gaps of mean `mean_interval_s`; steps started in one are `factor`
    /// slower. Slowness persists on a machine for the period (a busy host,
    /// a throttled GPU), unlike the per-step draws above. `jitter_sigma`
    /// adds an independent lognormal per-step jitter on top (default 0).
    Transient {
        /// Mean gap between a worker's slow periods, seconds.
        mean_interval_s: f64,
        /// Length of a slow period, seconds.
        duration_s: f64,
        /// Compute time's multiplier inside a slow period.
        factor: f64,
        /// Sigma of an extra lognormal per-step jitter (0: none).
        #[serde(default)]
        jitter_sigma: f64,
    },
    /// Slowdown factors measured elsewhere, from a CSV `file` (one row per
    /// step; an optional header line; `#` comments) or given inline as
    /// `factors` (one list per worker): with one column, or with
    /// `pooled: true`, each worker step draws a factor from all of them
    /// (the empirical distribution); with several columns, worker `w`
    /// replays column `w mod columns`, its k-th step taking row
    /// `k mod rows`.
    Trace {
        /// A CSV file of factors.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<String>,
        /// The factors inline, one list per worker (instead of `file`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        factors: Option<Vec<Vec<f64>>>,
        /// Every worker draws from all the factors instead of replaying its
        /// own column.
        #[serde(default)]
        pooled: bool,
    },
}

impl Straggler {
    /// The `dist:` names, as a file writes them (for messages that list them).
    pub const DISTS: &[&str] = &["none", "lognormal", "exponential", "slow_machines", "transient", "trace"];

    /// Checks the parameters for a cluster of `workers` workers, naming
    /// the key at fault.
    pub fn validate(&self, cluster_workers: u32) -> Result<(), SimError> {
        match self {
            Straggler::None => {}
            Straggler::Lognormal { sigma } => non_negative("straggler.sigma", *sigma)?,
            Straggler::Exponential { p, mean } => {
                if !(0.0..=1.0).contains(p) {
                    return Err(SimError::param("straggler.p", format!("must be in [0, 1], got {p}")));
                }
                non_negative("straggler.mean", *mean)?;
            }
            Straggler::SlowMachines { workers, factor } => {
                positive("straggler.factor", *factor)?;
                if let Some(w) = workers.iter().find(|&&w| w >= cluster_workers) {
                    return Err(SimError::param(
                        "straggler.workers",
                        format!("worker {w} does not exist ({cluster_workers} workers)"),
                    ));
                }
            }
            Straggler::Transient {
                mean_interval_s,
                duration_s,
                factor,
                jitter_sigma,
            } => {
                positive("straggler.mean_interval_s", *mean_interval_s)?;
                non_negative("straggler.duration_s", *duration_s)?;
                positive("straggler.factor", *factor)?;
                non_negative("straggler.jitter_sigma", *jitter_sigma)?;
            }
            Straggler::Trace { .. } => {
                crate::cluster::straggler::SlowdownTrace::of(self)?;
            }
        }
        Ok(())
    }
}

/// Crashes (`failures:` key): drawn from a per-task MTBF and/or at given times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Failures {
    /// Mean time between failures of one task (worker or PS), hours.
    #[serde(default)]
    pub mtbf_hours: Option<f64>,
    /// Failure times, seconds of simulated time.
    #[serde(default)]
    pub at_s: Vec<f64>,
    /// Time to restart after a failure, before resuming from the checkpoint.
    #[serde(default = "default_recovery_s")]
    pub recovery_s: f64,
}

/// Checkpoints (`checkpoint:` key): every `every_steps` steps, pausing `cost_s`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// Steps between checkpoints.
    pub every_steps: u64,
    /// Time a checkpoint pauses training, seconds.
    #[serde(default)]
    pub cost_s: f64,
}

fn one_u32() -> u32 {
    1
}
fn default_comm() -> CommFormat {
    CommFormat::F32
}
fn default_steps() -> u64 {
    200
}
fn default_ps_memory_gb() -> f64 {
    256.0
}
fn default_max_sim_time_s() -> f64 {
    1e7
}
fn default_max_events() -> u64 {
    1_000_000_000
}
fn default_hosts_per_leaf() -> u32 {
    16
}
fn default_spines() -> u32 {
    4
}
fn default_oversubscription() -> f64 {
    1.0
}
fn default_devices_per_host() -> u32 {
    8
}
fn default_recovery_s() -> f64 {
    60.0
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            model: ModelRef::default(),
            workers: 1,
            ps: 0,
            strategy: Strategy::default(),
            allreduce: None,
            network: NetworkConfig::default(),
            straggler: Straggler::None,
            comm: default_comm(),
            steps: default_steps(),
            failures: None,
            checkpoint: None,
            host_cores: None,
            ps_memory_gb: default_ps_memory_gb(),
            max_sim_time_s: default_max_sim_time_s(),
            max_events: default_max_events(),
        }
    }
}

fn positive(param: &str, v: f64) -> Result<(), SimError> {
    if v > 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err(SimError::param(param, format!("must be positive and finite, got {v}")))
    }
}

fn non_negative(param: &str, v: f64) -> Result<(), SimError> {
    if v >= 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err(SimError::param(param, format!("must be zero or positive and finite, got {v}")))
    }
}

/// Resolves a catalog link name to its parameters.
fn catalog_link(name: &str, param: &str) -> Result<LinkParams, SimError> {
    let spec = flowlab_hw::Catalog::builtin()
        .link(name)
        .map_err(|e| SimError::UnknownLink {
            name: name.to_string(),
            param: param.to_string(),
            reason: e.to_string(),
        })?;
    Ok(LinkParams {
        bytes_per_s: spec.bytes_per_second(),
        latency: crate::time::SimTime::from_secs_f64(spec.latency_seconds()),
    })
}

impl NetworkConfig {
    /// The main link's parameters.
    pub fn main_link(&self) -> Result<LinkParams, SimError> {
        match (&self.link, self.link_gbps, self.latency_us) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err(SimError::param(
                "network.link",
                "give either a catalog link name or link_gbps/latency_us, not both",
            )),
            (Some(name), None, None) => {
                let l = catalog_link(name, "network.link")?;
                positive("network.link", l.bytes_per_s)?;
                Ok(l)
            }
            (None, gbps, lat) => {
                let gbps = gbps.unwrap_or(10.0);
                let lat = lat.unwrap_or(5.0);
                positive("network.link_gbps", gbps)?;
                non_negative("network.latency_us", lat)?;
                Ok(LinkParams::from_gbps(gbps, lat))
            }
        }
    }

    fn intra_link(&self) -> Result<LinkParams, SimError> {
        match (&self.intra_link, self.intra_link_gbps, self.intra_latency_us) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err(SimError::param(
                "network.intra_link",
                "give either a catalog link name or intra_link_gbps/intra_latency_us, not both",
            )),
            (Some(name), None, None) => catalog_link(name, "network.intra_link"),
            (None, gbps, lat) => {
                // Default: NVLink 3 class, 300 GB/s per direction.
                let gbps = gbps.unwrap_or(2400.0);
                let lat = lat.unwrap_or(1.0);
                positive("network.intra_link_gbps", gbps)?;
                non_negative("network.intra_latency_us", lat)?;
                Ok(LinkParams::from_gbps(gbps, lat))
            }
        }
    }

    /// The topology shape for `devices` endpoints, checking explicit sizes.
    pub fn shape(&self, devices: usize) -> Result<TopologyShape, SimError> {
        let too_few = |ports: usize, hint: &str| SimError::TooFewPorts {
            topology: topology_name(self.topology).to_string(),
            ports,
            needed: devices,
            hint: hint.to_string(),
        };
        Ok(match self.topology {
            TopologyKind::Star => TopologyShape::Star { endpoints: devices },
            TopologyKind::Ring => TopologyShape::Ring { endpoints: devices },
            TopologyKind::Mesh => {
                if devices > MAX_MESH {
                    return Err(SimError::param(
                        "network.topology",
                        format!("a mesh of {devices} devices needs a cable per pair; at most {MAX_MESH} devices (use star or fat_tree)"),
                    ));
                }
                TopologyShape::Mesh { endpoints: devices }
            }
            TopologyKind::Torus2d | TopologyKind::Torus3d => {
                let n = if self.topology == TopologyKind::Torus2d { 2 } else { 3 };
                let dims: Vec<usize> = match &self.dims {
                    Some(d) => {
                        if d.len() != n || d.contains(&0) {
                            return Err(SimError::param(
                                "network.dims",
                                format!("{} needs {n} positive dimensions, got {d:?}", topology_name(self.topology)),
                            ));
                        }
                        d.iter().map(|&x| x as usize).collect()
                    }
                    None => near_cube(devices, n),
                };
                let ports: usize = dims.iter().fold(1usize, |a, &d| a.saturating_mul(d));
                if ports < devices {
                    return Err(too_few(ports, "raise network.dims"));
                }
                TopologyShape::Torus { dims }
            }
            TopologyKind::FatTree => {
                let k = match self.k {
                    Some(k) => {
                        if k < 2 || k % 2 == 1 {
                            return Err(SimError::param("network.k", format!("fat-tree arity must be even and at least 2, got {k}")));
                        }
                        k as usize
                    }
                    None => {
                        let mut k = 2;
                        while k * k * k / 4 < devices {
                            k += 2;
                        }
                        k
                    }
                };
                let hosts = k.saturating_mul(k).saturating_mul(k) / 4;
                if hosts < devices {
                    return Err(too_few(hosts, "raise network.k"));
                }
                TopologyShape::FatTree { k }
            }
            TopologyKind::Clos => {
                if self.hosts_per_leaf == 0 {
                    return Err(SimError::param("network.hosts_per_leaf", "must be at least 1"));
                }
                if self.spines == 0 {
                    return Err(SimError::param("network.spines", "must be at least 1"));
                }
                positive("network.oversubscription", self.oversubscription)?;
                let hpl = self.hosts_per_leaf as usize;
                let leaves = self.leaves.map(|l| l as usize).unwrap_or(devices.div_ceil(hpl).max(1));
                if leaves.saturating_mul(hpl) < devices {
                    return Err(too_few(leaves.saturating_mul(hpl), "raise network.leaves or network.hosts_per_leaf"));
                }
                TopologyShape::Clos {
                    leaves,
                    hosts_per_leaf: hpl,
                    spines: self.spines as usize,
                    oversubscription: self.oversubscription,
                }
            }
            TopologyKind::Hierarchical => {
                if self.devices_per_host == 0 {
                    return Err(SimError::param("network.devices_per_host", "must be at least 1"));
                }
                let g = self.devices_per_host as usize;
                let hosts = self.hosts.map(|h| h as usize).unwrap_or(devices.div_ceil(g).max(1));
                if hosts.saturating_mul(g) < devices {
                    return Err(too_few(hosts.saturating_mul(g), "raise network.hosts or network.devices_per_host"));
                }
                TopologyShape::Hierarchical {
                    hosts,
                    devices_per_host: g,
                    intra: self.intra_link()?,
                }
            }
        })
    }
}

/// Memory this process may still take, from `/proc/meminfo`'s
/// `MemAvailable` (Linux); `None` where that is not known, and then no
/// point is rejected for its size.
pub fn available_memory_bytes() -> Option<f64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024.0)
}

fn topology_name(k: TopologyKind) -> &'static str {
    match k {
        TopologyKind::Star => "star",
        TopologyKind::Ring => "ring",
        TopologyKind::Mesh => "mesh",
        TopologyKind::Torus2d => "torus2d",
        TopologyKind::Torus3d => "torus3d",
        TopologyKind::FatTree => "fat_tree",
        TopologyKind::Clos => "clos",
        TopologyKind::Hierarchical => "hierarchical",
    }
}

/// `n` near-equal dimensions whose product is at least `devices`.
fn near_cube(devices: usize, n: usize) -> Vec<usize> {
    let side = (devices.max(1) as f64).powf(1.0 / n as f64).floor().max(1.0) as usize;
    let mut dims = vec![side; n];
    let mut i = 0;
    while dims.iter().product::<usize>() < devices {
        dims[i % n] += 1;
        i += 1;
    }
    dims
}

impl ClusterConfig {
    /// Keys `metrics()` always returns, in CSV column order.
    pub fn metric_names() -> &'static [&'static str] {
        crate::cluster::report::METRIC_NAMES
    }

    /// Workers in total, backups included.
    pub fn total_workers(&self) -> u32 {
        match &self.strategy {
            Strategy::Async {} | Strategy::Sync { .. } => self.workers + self.strategy.backup(),
            Strategy::SyncGroups { groups, backup } => self.workers + groups * backup,
        }
    }

    /// Devices the topology must host: PS tasks then workers.
    pub fn devices(&self) -> usize {
        self.ps as usize + self.total_workers() as usize
    }

    /// The resolved workload.
    pub fn workload(&self) -> Result<Workload, SimError> {
        self.model.resolve()
    }

    /// An estimate (rounded up) of the memory one run of this point needs,
    /// in bytes: per (worker, PS task) pair the step state (24 B) and up to
    /// two live flows with their transfer records, group-heap entries and
    /// per-link list entries (about 300 B + 32 B per route link); the route
    /// table (dense 4 B per endpoint pair up to 4,096 endpoints, else about
    /// 48 B + 4 B per link for each route used); about 400 B per device for
    /// the topology and 64 B per worker. All-reduce points hold a few flows
    /// per rank instead of per pair. Checked against peak resident size:
    /// 16,384 workers x 17 PS, one step, estimate 248 MB for 246 MB
    /// measured on star, 328 MB for 307 MB on fat_tree. The topology, which
    /// `network.dims`, `k`, `leaves` or `hosts` may make far larger than the
    /// devices need, adds 400 B per endpoint and 250 B per directed link:
    /// 4 workers + 2 PS, one step, estimate against peak resident size, on
    /// a 400 x 400 torus 225 MB for 215 MB, fat_tree k = 64 125 for 125,
    /// Clos of 8,000 leaves 131 for 110, 80,000 hierarchical hosts 616 for
    /// 478.
    pub fn memory_estimate_bytes(&self) -> f64 {
        let w = self.total_workers() as f64;
        let (links, endpoints) = self.network.shape(self.devices()).map_or((0.0, 0.0), |s| (s.directed_links(), s.endpoints()));
        // the route table's dense form covers the topology's endpoints
        let devices = (self.devices() as f64).max(endpoints);
        let hops = match self.network.topology {
            TopologyKind::Star => 2.0,
            TopologyKind::Mesh => 1.0,
            TopologyKind::Ring => devices / 2.0 + 1.0,
            TopologyKind::Torus2d => 2.0 * devices.sqrt() + 2.0,
            TopologyKind::Torus3d => 3.0 * devices.cbrt() + 2.0,
            TopologyKind::FatTree => 6.0,
            TopologyKind::Clos | TopologyKind::Hierarchical => 4.0,
        };
        let pairs = if self.allreduce.is_some() { 4.0 * w } else { w * f64::from(self.ps.max(1)) };
        // bytes and counters, two kept routes (32 each), a flow each way
        let per_pair = 24.0 + 64.0 + 2.0 * (300.0 + 32.0 * hops);
        let routes = if devices <= 4096.0 { devices * devices * 4.0 } else { 2.0 * pairs * (48.0 + 4.0 * hops) };
        pairs * per_pair + routes + devices * 400.0 + w * 64.0 + links * 250.0
    }

    /// Range checks; each error names the offending key.
    pub fn validate(&self) -> Result<(), SimError> {
        self.validate_strategy()?;
        self.validate_limits()?;
        self.validate_fits_in_memory()?;
        self.validate_ps_shards()
    }

    /// Workers, steps, the strategy and its backups, and PS tasks or
    /// all-reduce.
    fn validate_strategy(&self) -> Result<(), SimError> {
        if self.workers == 0 {
            return Err(SimError::param("workers", "must be at least 1"));
        }
        if self.steps == 0 {
            return Err(SimError::param("steps", "must be at least 1"));
        }
        match &self.strategy {
            Strategy::Async {} => {}
            Strategy::Sync { backup } => {
                if *backup > self.workers {
                    return Err(SimError::param(
                        "strategy.sync.backup",
                        format!("{backup} backup workers is more than the {} workers", self.workers),
                    ));
                }
            }
            Strategy::SyncGroups { groups, backup } => {
                if *groups == 0 || *groups > self.workers || self.workers % groups != 0 {
                    return Err(SimError::param(
                        "strategy.sync_groups.groups",
                        format!("must divide the {} workers into equal groups, got {groups}", self.workers),
                    ));
                }
                let per = self.workers / groups;
                if *backup > per {
                    return Err(SimError::param(
                        "strategy.sync_groups.backup",
                        format!("{backup} backup workers is more than the {per} workers of a group"),
                    ));
                }
            }
        }
        match self.allreduce {
            Some(_) => {
                if self.ps != 0 {
                    return Err(SimError::param("ps", "must be 0 when `allreduce` is set"));
                }
                if self.strategy != (Strategy::Sync { backup: 0 }) {
                    return Err(SimError::param("strategy", "`allreduce` needs `sync: { backup: 0 }`"));
                }
                if self.workload()?.ps_softmax.is_some() {
                    return Err(SimError::param("model.ps_softmax", "is computed on PS tasks, which `allreduce` has none of"));
                }
            }
            None => {
                if self.ps == 0 {
                    return Err(SimError::param("ps", "must be at least 1 (or set `allreduce`)"));
                }
            }
        }
        Ok(())
    }

    /// Host, clock and event limits, stragglers, failures and checkpoints.
    fn validate_limits(&self) -> Result<(), SimError> {
        positive("ps_memory_gb", self.ps_memory_gb)?;
        if let Some(c) = self.host_cores
            && !(1..=MAX_HOST_CORES).contains(&c)
        {
            return Err(SimError::param("host_cores", format!("must be between 1 and {MAX_HOST_CORES}, got {c}")));
        }
        positive("max_sim_time_s", self.max_sim_time_s)?;
        if self.max_sim_time_s >= crate::time::SimTime::MAX_SECS {
            return Err(SimError::param(
                "max_sim_time_s",
                format!(
                    "{} s is beyond the simulator's clock ({:.4e} s: 64-bit picoseconds); use at most 1.8e7",
                    self.max_sim_time_s,
                    crate::time::SimTime::MAX_SECS
                ),
            ));
        }
        if self.max_events == 0 {
            return Err(SimError::param("max_events", "must be at least 1"));
        }
        self.straggler.validate(self.total_workers())?;
        if let Some(f) = &self.failures {
            if let Some(m) = f.mtbf_hours {
                positive("failures.mtbf_hours", m)?;
                // the cluster's mean gap between failures must be a time
                // the clock can tell from zero (below a nanosecond every
                // failure fell at one instant, forever)
                let tasks = f64::from(self.total_workers()) + f64::from(self.ps);
                if m * 3600.0 / tasks < 1e-9 {
                    return Err(SimError::param(
                        "failures.mtbf_hours",
                        format!("{m:e} h over {tasks} tasks is a failure every {:.3e} s on average, under a nanosecond", m * 3600.0 / tasks),
                    ));
                }
            }
            non_negative("failures.recovery_s", f.recovery_s)?;
            for &t in &f.at_s {
                non_negative("failures.at_s", t)?;
            }
        }
        if let Some(c) = &self.checkpoint {
            if c.every_steps == 0 {
                return Err(SimError::param("checkpoint.every_steps", "must be at least 1"));
            }
            non_negative("checkpoint.cost_s", c.cost_s)?;
        }
        Ok(())
    }

    /// The network's shape, and that simulating it fits this machine's
    /// memory (an error names the key that sized the network, if one did).
    fn validate_fits_in_memory(&self) -> Result<(), SimError> {
        self.network.main_link()?;
        let shape = self.network.shape(self.devices())?;
        if let Some(available) = available_memory_bytes() {
            let need = self.memory_estimate_bytes();
            if need > available {
                // a network given far more links than the tasks need is
                // named by the key that sized it
                let links = shape.directed_links();
                let n = &self.network;
                let sized_by = match (n.topology, &shape) {
                    (TopologyKind::Torus2d | TopologyKind::Torus3d, _) if n.dims.is_some() => Some("network.dims"),
                    (TopologyKind::FatTree, _) if n.k.is_some() => Some("network.k"),
                    (_, TopologyShape::Clos { leaves, hosts_per_leaf, spines, .. }) => Some(if spines > hosts_per_leaf {
                        "network.spines"
                    } else if leaves > hosts_per_leaf && n.leaves.is_some() {
                        "network.leaves"
                    } else {
                        "network.hosts_per_leaf"
                    }),
                    (_, TopologyShape::Hierarchical { hosts, devices_per_host, .. }) => {
                        Some(if hosts >= devices_per_host && n.hosts.is_some() { "network.hosts" } else { "network.devices_per_host" })
                    }
                    _ => None,
                };
                let gb = |bytes: f64| if bytes < 1e13 { format!("{:.1} GB", bytes / 1e9) } else { format!("{:.2e} GB", bytes / 1e9) };
                let count = |x: f64| if x < 1e12 { format!("{x:.0}") } else { format!("{x:.3e}") };
                if let Some(key) = sized_by.filter(|_| links * 250.0 > need / 2.0) {
                    return Err(SimError::param(
                        key,
                        format!(
                            "a {} of {} endpoints and {} links needs about {} to simulate; this machine has {} available \
                             (a smaller network: the {} devices fit in far fewer)",
                            topology_name(self.network.topology),
                            count(shape.endpoints()),
                            count(links),
                            gb(need),
                            gb(available),
                            self.devices()
                        ),
                    ));
                }
                return Err(SimError::param(
                    "workers",
                    format!(
                        "{} workers and {} PS tasks need about {} to simulate; this machine has {} available \
                         (fewer workers or PS tasks, or a larger machine)",
                        self.total_workers(),
                        self.ps,
                        gb(need),
                        gb(available)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The workload, and each PS task's shard within its memory.
    fn validate_ps_shards(&self) -> Result<(), SimError> {
        let w = self.workload()?;
        w.validate()?;
        if self.allreduce.is_none() {
            let layout = w.layout(self.ps as usize);
            let limit = self.ps_memory_gb * 1e9;
            for k in 0..layout.tasks() {
                let bytes = layout.stored_elements(k) as f64 * 4.0;
                if bytes > limit {
                    return Err(SimError::param(
                        "ps_memory_gb",
                        format!(
                            "PS task {k} holds a {:.3} GB shard, more than its {} GB of memory (add PS tasks or memory)",
                            bytes / 1e9,
                            self.ps_memory_gb
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

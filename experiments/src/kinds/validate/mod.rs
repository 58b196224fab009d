//! `kind: validate`: one point places a zoo model's training graph with a
//! simulator placer, runs that placement for real in the engine (warm-up,
//! then `steps` timed steps) over emulated links, and simulates the same
//! placement, link and communication format with the graph-level simulator.
//! Its metrics are the two step times and the signed error; after the sweep
//! the runner writes a summary (MAPE per predictor, Kendall's tau of the
//! placements' order, the worst points) to `summary.json`.
//!
//! ```yaml
//! base:
//!   model: cnn                 # a zoo model the engine can run at this size
//!   batch: 64
//!   devices: 2xcpu             # real engine devices (CPUs of this process)
//!   threads: 1                 # worker threads per device
//!   placer: m_etf              # any placer of `flowlab place`
//!   fallback: true             # false: a cost-based placer's own placement, never replaced by one device
//!   comm: f32                  # f32 | f16 | bf16 | int8 | int8:<block>
//!   link: { gbps: 5, latency_us: 50 }   # emulated in the engine, used by the simulator
//!   predictor: profile         # roofline | profile
//!   steps: 20                  # timed steps
//!   warmup: 3                  # untimed steps first
//!   profile: prof.json         # optional: a `flowlab profile` file (else measured in this run)
//! ```
//!
//! Points of this kind time real runs, so they run one at a time whatever
//! `--jobs` says. The host is measured once per run (GEMM rate, copy
//! bandwidth, in-process transfer, dispatch), and the profile of each
//! (model, batch, threads) once, in the same sitting as the timed runs,
//! unless `profile:` names a file. Points that differ only in `predictor`
//! and give the same placement share one measurement, and so do points
//! whose placement moves no tensor between devices and that differ only
//! in `link` and `comm` (the same run).

use std::collections::{BTreeMap, HashMap};
use parking_lot::Mutex;
use std::sync::{Arc, OnceLock};

use flowlab_engine::{EmulatedLink, LinkMap, PartitionOptions};
use flowlab_hw::{CommFormat, HostMeasurement, LinkSpec, Profile};
use flowlab_reports::{ResultRow, SummaryTable};
use flowlab_sim::graph::{GraphSimulator, SimOptions, VirtualCluster};
use flowlab_sim::placement::{PlacerOptions, place_timed};
use flowlab_models::zoo::ModelGraph;

use super::{Outcome, TypedKind};
use crate::measure::{self, ProfileRequest, StepRunner, ZooSizes};

pub(crate) mod diagnose;
mod summary;
pub(crate) use summary::{kendall_tau, param};
use summary::*;

/// One sweep point of a validation experiment.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ValidatePoint {
    /// What is placed and run: a zoo graph the engine can run at this size,
    /// or an ONNX file.
    model: super::ModelKey,
    /// A smaller variant of the zoo model: `{ hidden: 128, seq_len: 20 }`.
    #[serde(default)]
    sizes: ZooSizes,
    /// Examples per training step (default 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    batch: Option<usize>,
    /// Real engine devices, CPUs of this process: `2xcpu`.
    devices: String,
    /// Worker threads per device.
    #[serde(default = "one")]
    threads: usize,
    /// Any placer of `flowlab place`, or `{ map: FILE }`: a hand-written
    /// device map (forced splits).
    #[serde(deserialize_with = "super::placer_key")]
    #[schemars(schema_with = "super::placer_schema")]
    placer: String,
    /// Number format of tensors between devices: f32, f16, bf16, int8,
    /// int8:<block>; absent: f32.
    #[serde(default)]
    comm: Option<String>,
    /// A link emulated between the devices in the engine and given to the
    /// simulator; absent: the devices exchange tensors in process.
    #[serde(default)]
    link: Option<LinkParams>,
    /// How the simulator costs each op.
    predictor: Predictor,
    /// Timed steps of the real run.
    #[serde(default = "default_steps")]
    steps: usize,
    /// Untimed steps first.
    #[serde(default = "default_warmup")]
    warmup: usize,
    /// A `flowlab profile` file for the profile predictor; absent: the
    /// model is profiled in this run.
    #[serde(default)]
    profile: Option<String>,
    /// local_search only: moves tried.
    #[serde(default)]
    iterations: Option<usize>,
    /// local_search only: the placer whose answer it starts from (a device
    /// map too).
    #[serde(default, deserialize_with = "super::optional_placer_key")]
    #[schemars(schema_with = "super::placer_schema")]
    start: Option<String>,
    /// `true` (default): the placement `flowlab place` returns, the best
    /// single device where a cost-based placer's own answer simulates
    /// slower; `false`: the placer's own placement, whatever it costs
    /// (what validates the heuristic rather than its fallback).
    #[serde(default = "yes")]
    fallback: bool,
}

fn yes() -> bool {
    true
}

/// `link: { gbps, latency_us }`: an emulated link (kinds `validate` and
/// `distributed`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LinkParams {
    /// Rate, Gbit/s.
    pub(crate) gbps: f64,
    /// One-way latency, microseconds.
    pub(crate) latency_us: f64,
}

impl LinkParams {
    /// Refuses what the engine's emulation refuses (bandwidth and latency
    /// bounds, `EmulatedLink::new`), naming the key.
    pub(crate) fn check(&self) -> Result<EmulatedLink, String> {
        EmulatedLink::new(self.gbps, self.latency_us).map_err(|e| match e {
            flowlab_engine::EngineError::Config { key, detail } => format!("invalid parameter `{key}`: {detail}"),
            other => format!("invalid parameter `link`: {other}"),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Predictor {
    /// The hardware catalog's roofline of this host's measured rates.
    Roofline,
    /// Each op's time measured by profiling the model on this host.
    Profile,
}

fn one() -> usize {
    1
}
fn default_steps() -> usize {
    20
}
fn default_warmup() -> usize {
    3
}

use flowlab_models::zoo::MAX_BATCH;
const MAX_DEVICES: usize = 16;
const MAX_STEPS: usize = 100_000;
const MAX_THREADS: usize = flowlab_engine::MAX_THREADS;

const METRICS: &[&str] = &[
    "measured_step_s",
    "measured_p10_s",
    "measured_p90_s",
    "predicted_step_s",
    "error",
    "abs_error",
    "measured_transfers",
    "predicted_transfers",
    "measured_transfer_bytes",
    "predicted_transfer_bytes",
    "fallback_nodes",
    "scaled_nodes",
    "devices_used",
    "nodes",
    "reference_step_s",
    "reference_error",
    "measured_relative",
    "measured_relative_p10",
    "measured_relative_p90",
    "predicted_relative",
    "relative_error",
    "fallback_used",
];

pub(crate) static VALIDATE: TypedKind<ValidatePoint> = TypedKind {
    name: "validate",
    validate: |p| p.validate(),
    run: |config, env| run_point(config, env.seed),
    resolve: |p| super::with_batch(super::serialized(p)?, p.batch()?),
    metric_names: || METRICS.iter().map(|m| m.to_string()).collect(),
    series_names: &["measured_step_times_s", "reference_step_times_s"],
    tag_paths: &[],
    headline: &["model", "batch", "devices", "threads", "comm", "fallback"],
    nested_keys: &[],
    exclusive: true,
    measured_point_s: Some((0.4, 0.5, "as catalog:validate-placement's 192 points took 78-91 s on 2 cores (docs/src/experiments.md)")),
    summarize: Some(summarize),
};

impl ValidatePoint {
    fn batch(&self) -> Result<usize, String> {
        self.model.batch_with(self.batch)
    }

    fn validate(&self) -> Result<(), String> {
        self.model.check()?;
        let batch = self.batch()?;
        if batch == 0 || batch > MAX_BATCH {
            return Err(format!("invalid parameter `batch`: must be between 1 and {MAX_BATCH}, got {batch}"));
        }
        let z = &self.sizes;
        for (key, v) in [("hidden", z.hidden), ("layers", z.layers), ("seq_len", z.seq_len), ("vocab", z.vocab), ("heads", z.heads), ("ff", z.ff), ("image_size", z.image_size), ("classes", z.classes)] {
            if let Some(v) = v
                && !(1..=1 << 20).contains(&v)
            {
                return Err(format!("invalid parameter `sizes.{key}`: must be between 1 and {}, got {v}", 1 << 20));
            }
        }
        self.device_count()?;
        if self.threads == 0 || self.threads > MAX_THREADS {
            return Err(format!("invalid parameter `threads`: must be between 1 and {MAX_THREADS}, got {}", self.threads));
        }
        super::check_placer("placer", &self.placer)?;
        if let Some(start) = &self.start {
            super::check_placer("start", start)?;
        }
        if self.placer == "local_search" && self.iterations.is_none_or(|i| i == 0) {
            return Err("invalid parameter `iterations`: local_search needs a positive number of moves".into());
        }
        self.comm_format()?;
        if let Some(l) = &self.link {
            l.check()?;
        }
        if self.steps == 0 || self.steps > MAX_STEPS {
            return Err(format!("invalid parameter `steps`: must be between 1 and {MAX_STEPS}, got {}", self.steps));
        }
        if self.warmup > MAX_STEPS {
            return Err(format!("invalid parameter `warmup`: at most {MAX_STEPS}, got {}", self.warmup));
        }
        if let Some(path) = &self.profile {
            let p = profile_file(path)?;
            check_profile_matches(path, &p, &self.sizes.model_id(self.model.path()), batch, self.threads, self.device_count()?)?;
        }
        Ok(())
    }

    /// Devices as `NxCPU`: the count. GPUs are refused until the CUDA
    /// backend runs kernels.
    fn device_count(&self) -> Result<usize, String> {
        let spec = self.devices.trim().to_ascii_lowercase();
        let (count, name) = match spec.split_once('x') {
            Some((c, n)) if !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()) => (c.parse::<usize>().unwrap_or(usize::MAX), n),
            _ => (1, spec.as_str()),
        };
        if name.contains("gpu") {
            return Err(format!(
                "invalid parameter `devices`: `{}`: the engine has no GPU devices yet (the CUDA backend compiles its kernels but does not run them); use `Nxcpu`",
                self.devices
            ));
        }
        if name != "cpu" {
            return Err(format!("invalid parameter `devices`: `{}`: the engine runs on this host's CPUs; write e.g. `2xcpu`", self.devices));
        }
        if count == 0 || count > MAX_DEVICES {
            return Err(format!("invalid parameter `devices`: between 1 and {MAX_DEVICES} CPUs, got `{}`", self.devices));
        }
        Ok(count)
    }

    fn comm_format(&self) -> Result<CommFormat, String> {
        match &self.comm {
            None => Ok(CommFormat::F32),
            Some(s) => s.parse().map_err(|e| format!("invalid parameter `comm`: {e}")),
        }
    }

    fn link_label(&self) -> String {
        match &self.link {
            None => "in-process".into(),
            Some(l) => format!("{}gbps,{}us", l.gbps, l.latency_us),
        }
    }
}

/// A profile file, read once per run (the same file is named by many points).
fn profile_file(path: &str) -> Result<Arc<Profile>, String> {
    static FILES: OnceLock<Mutex<HashMap<String, Arc<Profile>>>> = OnceLock::new();
    let files = FILES.get_or_init(Default::default);
    if let Some(p) = lock(files).get(path) {
        return Ok(p.clone());
    }
    let p = Arc::new(Profile::from_file(path).map_err(|e| format!("invalid parameter `profile`: {e}"))?);
    lock(files).insert(path.to_string(), p.clone());
    Ok(p)
}

fn check_profile_matches(path: &str, p: &Profile, model: &str, batch: usize, threads: usize, devices: usize) -> Result<(), String> {
    let bad = |what: String| Err(format!("invalid parameter `profile`: {path}: {what}"));
    match (&p.model, p.batch) {
        (Some(m), Some(b)) if m == model && b == batch => {}
        (Some(m), Some(b)) => return bad(format!("it was measured for {m} at batch {b}, not for {model} at batch {batch}")),
        _ => return bad("it has no `model` and `batch` (write one with `flowlab profile`)".into()),
    }
    match &p.host {
        None => bad("it has no `host` section (write one with `flowlab profile`)".into()),
        Some(h) if h.threads != threads => bad(format!("it was measured with {} threads per device, the point uses {threads}", h.threads)),
        Some(_) if p.session_devices != Some(devices) => bad(format!(
            "it was measured in a session of {} devices, the point runs {devices} (profile with `flowlab profile --devices {devices}xcpu`)",
            p.session_devices.map_or("an unknown number of".to_string(), |d| d.to_string())
        )),
        Some(_) if p.shapes.is_empty() => bad("it has no `shapes` (write one with `flowlab profile`)".into()),
        Some(_) => Ok(()),
    }
}

fn lock<T>(m: &Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    m.lock()
}

/// This host, measured once per run, thread count and model: just before
/// the model's points, as their profile is, since this machine's speed
/// drifts within minutes (a figure measured at the start of a sweep was
/// 30-50% off for the points run two minutes later). A profile measured
/// in the run starts from the same figures (`point_profile`).
fn host(threads: usize, model: &str) -> Result<HostMeasurement, String> {
    static HOSTS: OnceLock<Mutex<HashMap<(usize, String), HostMeasurement>>> = OnceLock::new();
    let hosts = HOSTS.get_or_init(Default::default);
    let key = (threads, model.to_string());
    if let Some(h) = lock(hosts).get(&key) {
        return Ok(h.clone());
    }
    let h = measure::measure_host(threads)?;
    lock(hosts).insert(key, h.clone());
    Ok(h)
}

/// The point's profile: its file, or one measured in this run.
fn point_profile(p: &ValidatePoint) -> Result<Arc<Profile>, String> {
    if let Some(path) = &p.profile {
        let prof = profile_file(path)?;
        check_profile_matches(path, &prof, &p.sizes.model_id(p.model.path()), p.batch()?, p.threads, p.device_count()?)?;
        return Ok(prof);
    }
    type Measured = Mutex<HashMap<(String, usize, usize, usize), Arc<Profile>>>;
    static MEASURED: OnceLock<Measured> = OnceLock::new();
    let measured = MEASURED.get_or_init(Default::default);
    let devices = p.device_count()?;
    let key = (p.sizes.model_id(p.model.path()), p.batch()?, p.threads, devices);
    if let Some(prof) = lock(measured).get(&key) {
        return Ok(prof.clone());
    }
    let req = ProfileRequest { model: p.model.path().to_string(), sizes: p.sizes.clone(), batch: p.batch()?, threads: p.threads, devices, warmup: p.warmup.max(2), steps: p.steps.max(10) };
    // the host figures the model's roofline points use, measured once
    let host = host(p.threads, &p.sizes.model_id(p.model.path()))?;
    let prof = Arc::new(measure::profile_model_on(&req, host, |_| {}).map_err(|e| format!("profiling {} at batch {}: {e}", p.model.path(), p.batch().unwrap_or_default()))?);
    lock(measured).insert(key, prof.clone());
    Ok(prof)
}

/// Steps of a placement, then as many of the one-device reference, in turn.
const REFERENCE_BLOCK: usize = 4;

/// What one real run measured.
#[derive(Clone)]
struct Measured {
    times: Vec<f64>,
    /// The one-device step, timed in turn with `times` in blocks of
    /// [`REFERENCE_BLOCK`]: `reference[i]` beside `times[i]`.
    reference: Vec<f64>,
    transfers: f64,
    bytes: f64,
}

/// Runs a placement in the engine: `warmup` untimed steps, then `steps`
/// timed ones; transfers and bytes per step from the session's counters.
/// The timed steps take turns with steps of the same model on one device
/// (the reference), a few at a time: this host's speed drifts by tens of
/// percent within minutes, and a step time divided by the reference timed
/// beside it compares placements measured minutes apart.
fn measure_placement(
    p: &ValidatePoint,
    model: &ModelGraph,
    init: &flowlab_engine::Output,
    placement: &flowlab_engine::Placement,
    one_device: &flowlab_engine::Placement,
    n: usize,
) -> Result<Measured, String> {
    let mut links = LinkMap::default();
    if let Some(l) = &p.link {
        links.all = Some(EmulatedLink::new(l.gbps, l.latency_us).map_err(|e| format!("invalid parameter `link`: {e}"))?);
    }
    let mut opts = measure::cpu_options(n, p.threads, Some(placement.clone()), links);
    opts.partition = PartitionOptions::in_format(p.comm_format()?);
    let runner = StepRunner::new(model.clone(), init, opts)?;
    // The session shape the profile is taken in (n devices, every node on
    // the first): the one-device prediction describes that step.
    let reference = StepRunner::new(model.clone(), init, measure::cpu_options(n, p.threads, Some(one_device.clone()), LinkMap::default()))?;
    for _ in 0..p.warmup {
        runner.step(false)?;
        reference.step(false)?;
    }
    let before = runner.session.comm_stats();
    // In blocks of a few steps: a step right after the other session's
    // runs from a cache that session has filled (measured 2-3% slower when
    // the two alternated step by step); drift is minutes, a block is
    // well under a second.
    let (mut times, mut reference_times) = (Vec::with_capacity(p.steps), Vec::with_capacity(p.steps));
    while times.len() < p.steps {
        let k = REFERENCE_BLOCK.min(p.steps - times.len());
        times.extend(runner.time_steps(0, k)?);
        reference_times.extend(reference.time_steps(0, k)?);
    }
    let after = runner.session.comm_stats();
    let steps = p.steps as f64;
    Ok(Measured {
        times,
        reference: reference_times,
        transfers: (after.transfers - before.transfers) as f64 / steps,
        bytes: (after.bytes_sent - before.bytes_sent) as f64 / steps,
    })
}

fn run_point(p: &ValidatePoint, seed: u64) -> Result<Outcome, String> {
    let n = p.device_count()?;
    let (model, init) = measure::with_initializer(p.model.path(), &p.sizes, p.batch()?)?;
    let profile = match p.predictor {
        Predictor::Profile => Some(point_profile(p)?),
        Predictor::Roofline => None,
    };
    // The machine: the profile's own host figures when it has them (same
    // sitting as its op times), else this run's measurement.
    let host = match profile.as_ref().and_then(|p| p.host.clone()) {
        Some(h) => h,
        None => host(p.threads, &p.sizes.model_id(p.model.path()))?,
    };
    let mut cluster = VirtualCluster::parse_for_host(&format!("{n}xcpu"), &host).map_err(|e| format!("invalid parameter `devices`: {e}"))?;
    if let Some(l) = &p.link {
        // The emulated delay starts when the Send starts; the emulation's
        // own hand-over (measured) comes on top of it.
        cluster = cluster.with_link(LinkSpec {
            name: "emulated".into(),
            bandwidth_gb_s: l.gbps / 8.0,
            latency_us: l.latency_us + host.emulated_overhead_us,
            // One queue per pair and direction, as the engine emulates it.
            sharing: flowlab_hw::LinkSharing::Pair,
        });
    }
    let mut opts = PlacerOptions::new(cluster.clone());
    opts.sim = SimOptions {
        partition: PartitionOptions::in_format(p.comm_format()?),
        profile: profile.as_deref().cloned(),
        step: Some(model.step()),
        transfer_compute: host.transfer_compute.clone(),
        host_contention: host.host_contention(n),
    };
    opts.seed = seed;
    opts.budget = std::time::Duration::ZERO;
    opts.iterations = p.iterations;
    if let Some(s) = &p.start {
        opts.start = s.clone();
    }
    let sim = GraphSimulator::new(&model.graph, &cluster, &opts.sim).map_err(|e| e.to_string())?;
    // Too large for the host: the simulator's peak memory on one device
    // against this machine's memory, before the engine allocates anything.
    let one_device = sim.simulate_indices(&vec![0u16; sim.graph().len()]).map_err(|e| e.to_string())?;
    let need = one_device.devices.first().map_or(0, |d| d.peak_memory_bytes) as f64;
    if need > 0.5 * host.memory_gb * 1e9 {
        return Err(format!(
            "invalid parameter `batch`: {} at batch {} needs about {:.1} GB at its peak, more than half of this host's {:.1} GB",
            p.model.path(),
            p.batch()?,
            need / 1e9,
            host.memory_gb
        ));
    }
    let mut outcome = place_timed(&p.placer, &model.graph, &opts).map_err(|e| e.to_string())?;
    if !p.fallback {
        outcome.placement = outcome.own_placement.clone();
    }
    let report = sim.simulate(&outcome.placement).map_err(|e| e.to_string())?;

    // One measurement per distinct placement and run settings: predictors
    // that choose the same placement share it, and a placement that moves
    // no tensor between devices is the same run over any link and format.
    type Key = (String, usize, usize, usize, String, String, u64);
    static RUNS: OnceLock<Mutex<HashMap<Key, Measured>>> = OnceLock::new();
    let runs = RUNS.get_or_init(Default::default);
    let (comm, link) = if report.transfers == 0 { (String::new(), String::new()) } else { (p.comm_format()?.to_string(), p.link_label()) };
    let key: Key = (p.sizes.model_id(p.model.path()), p.batch()?, n, p.threads, comm, link, placement_hash(&outcome.placement));
    let cached = lock(runs).get(&key).cloned();
    let measured = match cached {
        Some(m) => m,
        None => {
            let all_on_first = sim.placement_of(&vec![0u16; sim.graph().len()]);
            let m = measure_placement(p, &model, &init, &outcome.placement, &all_on_first, n)?;
            lock(runs).insert(key, m.clone());
            m
        }
    };
    let (med, p10, p90) = measure::spread(&measured.times);
    let predicted = report.step_seconds;
    let error = (predicted - med) / med;
    let (reference, _, _) = measure::spread(&measured.reference);
    let ratios: Vec<f64> = measured.times.iter().zip(&measured.reference).map(|(t, r)| t / r).collect();
    let (rel, rel10, rel90) = measure::spread(&ratios);
    let mut o = Outcome::default();
    let m = &mut o.metrics;
    // 1: the best single device replaced the cost-based placer's own
    // placement (with `fallback: true`); 0: it did not; no value for the
    // placers without a fallback
    if let Some(f) = outcome.fallback {
        m.insert("fallback_used".into(), if f.used && p.fallback { 1.0 } else { 0.0 });
    }
    m.insert("measured_step_s".into(), med);
    m.insert("measured_p10_s".into(), p10);
    m.insert("measured_p90_s".into(), p90);
    m.insert("predicted_step_s".into(), predicted);
    m.insert("error".into(), error);
    m.insert("abs_error".into(), error.abs());
    m.insert("reference_step_s".into(), reference);
    m.insert("reference_error".into(), (one_device.step_seconds - reference) / reference);
    m.insert("measured_relative".into(), rel);
    m.insert("measured_relative_p10".into(), rel10);
    m.insert("measured_relative_p90".into(), rel90);
    let predicted_relative = predicted / one_device.step_seconds;
    m.insert("predicted_relative".into(), predicted_relative);
    m.insert("relative_error".into(), (predicted_relative - rel) / rel);
    m.insert("measured_transfers".into(), measured.transfers);
    m.insert("predicted_transfers".into(), report.transfers as f64);
    m.insert("measured_transfer_bytes".into(), measured.bytes);
    m.insert("predicted_transfer_bytes".into(), report.transfer_bytes as f64);
    m.insert("fallback_nodes".into(), sim.fallback_nodes().len() as f64);
    m.insert("scaled_nodes".into(), sim.scaled_nodes().len() as f64);
    m.insert("devices_used".into(), report.devices.iter().filter(|d| d.ops > 0).count() as f64);
    m.insert("nodes".into(), sim.graph().len() as f64);
    o.series.insert("measured_step_times_s".into(), measured.times);
    o.series.insert("reference_step_times_s".into(), measured.reference);
    Ok(o)
}

fn placement_hash(p: &flowlab_engine::Placement) -> u64 {
    // FNV-1a over the device names in node order: stable across runs.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for d in p.devices() {
        for b in d.to_string().bytes().chain([0u8]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_far_from_the_reference_timed_beside_its_points_is_flagged() {
        let row = |i: u64, model: &str, predictor: &str, reference_error: f64| {
            let metrics: BTreeMap<String, f64> = [
                ("measured_step_s", 10e-3),
                ("measured_p10_s", 9.9e-3),
                ("measured_p90_s", 10.1e-3),
                ("predicted_step_s", 10e-3),
                ("error", 0.0),
                ("abs_error", 0.0),
                ("measured_transfer_bytes", 0.0),
                ("predicted_transfer_bytes", 0.0),
                ("reference_error", reference_error),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            let params = [("predictor", predictor), ("model", model), ("batch", "32"), ("placer", "p")].into_iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect();
            ResultRow { index: i, key: String::new(), seed: 0, params, metrics, series: BTreeMap::new(), error: None, elapsed_s: 0.0 }
        };
        // mlp: +35% in two of three points (median +35%); cnn: within 10%;
        // the roofline's own error is its own, never a drift
        let rows = vec![
            row(0, "mlp", "profile", 0.35),
            row(1, "mlp", "profile", 0.02),
            row(2, "mlp", "profile", 0.40),
            row(3, "cnn", "profile", 0.09),
            row(4, "cnn", "profile", -0.08),
            row(5, "cnn", "roofline", -0.25),
        ];
        let (_, text) = summarize(&rows);
        assert!(text.contains("warning: model=mlp batch=32: the profile's one-device step is +35% off the one-device step timed beside its 3 points (median)"), "{text}");
        assert_eq!(text.matches("warning:").count(), 1, "{text}");
        let tables = summarize(&rows).0;
        let drift = tables.iter().find(|t| t.title == "Profiles taken at another host speed").expect("the drift table");
        assert_eq!(drift.rows, vec![vec![serde_json::json!("model=mlp batch=32"), serde_json::json!(35.0), serde_json::json!(3)]]);
        // without drift, no table
        assert!(summarize(&rows[3..]).0.iter().all(|t| t.title != "Profiles taken at another host speed"));
    }

    #[test]
    fn placements_are_ranked_by_their_step_over_the_reference_timed_beside_them() {
        // Three placements; while the second was measured the host ran 40%
        // faster (its one-device reference took 6 ms, not 10). Step times
        // alone say 10, 9, 9.5 ms; over their references 1.0, 1.5, 0.95,
        // the order the predictions (11, 15, 9.5 ms) give: tau 1. Over the
        // raw times pair (0, 1) and pair (1, 2) are discordant: tau -1/3.
        let row = |i: u64, placer: &str, step: f64, reference: f64, predicted: f64| {
            let ratio = step / reference;
            let metrics: BTreeMap<String, f64> = [
                ("measured_step_s", step),
                ("measured_p10_s", step * 0.99),
                ("measured_p90_s", step * 1.01),
                ("predicted_step_s", predicted),
                ("error", (predicted - step) / step),
                ("abs_error", ((predicted - step) / step).abs()),
                ("measured_transfer_bytes", 0.0),
                ("predicted_transfer_bytes", 0.0),
                ("reference_step_s", reference),
                ("reference_error", (10e-3 - reference) / reference),
                ("measured_relative", ratio),
                ("measured_relative_p10", ratio * 0.99),
                ("measured_relative_p90", ratio * 1.01),
                ("predicted_relative", predicted / 10e-3),
                ("relative_error", (predicted / 10e-3 - ratio) / ratio),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            let params = [("predictor", "profile"), ("model", "mlp"), ("placer", placer)].into_iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect();
            ResultRow { index: i, key: String::new(), seed: 0, params, metrics, series: BTreeMap::new(), error: None, elapsed_s: 0.0 }
        };
        let rows = vec![row(0, "a", 10e-3, 10e-3, 11e-3), row(1, "b", 9e-3, 6e-3, 15e-3), row(2, "c", 9.5e-3, 10e-3, 9.5e-3)];
        let (_, text) = summarize(&rows);
        assert!(text.contains("tau +1.00 over 3 placements (over the 3 of 3 pairs the measurement orders: +1.00)"), "{text}");
        // Relative errors (1.1 - 1) / 1, (1.5 - 1.5) / 1.5 and
        // (0.95 - 0.95) / 0.95: MAPE 10% / 3.
        assert!(text.contains("the one-device step timed beside each point: error +0.0% to +66.7%; step over it: MAPE 3.3%"), "{text}");
        // Rows without the reference (older results files): raw step times.
        let raw: Vec<ResultRow> = rows
            .into_iter()
            .map(|mut r| {
                r.metrics.retain(|k, _| !k.starts_with("measured_relative") && !k.starts_with("reference"));
                r
            })
            .collect();
        let (_, text) = summarize(&raw);
        assert!(text.contains("tau -0.33 over 3 placements"), "{text}");
    }

    #[test]
    fn kendall_tau_matches_hand_counted_pairs() {
        // Reference by hand: x = 1..4, y = [1, 3, 2, 4]: 5 concordant and 1
        // discordant pair of 6, tau = 4/6.
        let t = kendall_tau(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]).unwrap();
        assert!((t - 4.0 / 6.0).abs() < 1e-12, "{t}");
        assert_eq!(kendall_tau(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
        // tau-b with a tie in y: pairs (1,2) tied in y; c = 2, d = 0, ty = 1:
        // 2 / sqrt(3 * 2).
        let t = kendall_tau(&[1.0, 2.0, 3.0], &[1.0, 1.0, 2.0]).unwrap();
        assert!((t - 2.0 / 6f64.sqrt()).abs() < 1e-12, "{t}");
        assert_eq!(kendall_tau(&[1.0], &[1.0]), None);
    }

    #[test]
    fn resolved_tau_leaves_out_pairs_the_measurement_cannot_order() {
        // Medians 1, 2, 3; the first two intervals overlap (1.05 < 1.1), so
        // the measurement orders pairs (0,2) and (1,2) only. Predicted 1.0,
        // 0.5, 3.0 orders both as measured (pair (0,1), which it gets
        // wrong, is left out): tau = (2 - 0) / 2.
        let (med, p10, p90) = ([1.0, 2.0, 3.0], [0.9, 1.05, 2.9], [1.1, 2.1, 3.1]);
        let (t, resolved) = resolved_tau(&med, &p10, &p90, &[1.0, 0.5, 3.0]);
        assert_eq!((t, resolved), (Some(1.0), 2));
        // Predicted 3.0, 0.5, 1.0: (0,2) discordant, (1,2) concordant, and a
        // tie on the predicted side counts as neither: 0 / 2, then 1 / 2.
        assert_eq!(resolved_tau(&med, &p10, &p90, &[3.0, 0.5, 1.0]), (Some(0.0), 2));
        assert_eq!(resolved_tau(&med, &p10, &p90, &[3.0, 0.5, 3.0]), (Some(0.5), 2));
        // The plain tau on the medians counts (0,1) as discordant: 1/3.
        assert!((kendall_tau(&med, &[1.0, 0.5, 3.0]).unwrap() - 1.0 / 3.0).abs() < 1e-12);
        // Nothing measured apart: no tau at all, not a perfect one.
        let (t, resolved) = resolved_tau(&med, &[0.0; 3], &[9.0; 3], &[3.0, 2.0, 1.0]);
        assert_eq!((t, resolved), (None, 0));
    }
}

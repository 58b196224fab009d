//! Data-parallel training of the digits recipes over a cluster (sections
//! 4.4 and 5 of the TensorFlow paper): synchronous with 0 backup workers, or
//! asynchronous.
//!
//! Contract, synchronous ([`Mode::Sync`]). The model's variables, the gradient average and the one Adam
//! update per step live on `ps:0`; worker `i` is fed shard `i` of each
//! batch on its own device, computes its gradients there and sends them to
//! the PS. The batches, the shards and the initial values are those of
//! `flowlab train --devices N --placement replicas` with N = the number of
//! workers, so the run computes what that in-process run computes, bit for
//! bit (same kernels on the same shapes; tested).
//!
//! Asynchronous ([`Mode::Async`]): each worker has its own update op on the
//! PS (one shared Adam state) and runs its steps in its own thread of the
//! master, without waiting for the others: worker `i` takes batches `i`,
//! `i + N`, ... of each epoch's schedule (whole `cfg.batch` batches, the
//! single-process schedule), and reads the variables as the other workers
//! have left them. The epochs are kept (all workers finish an epoch before
//! the next starts), so a run takes as many steps as one process does.
//! The chief checkpoints asynchronous training at global update
//! boundaries: the update that reaches a multiple of `every` closes a gate
//! that new updates wait at, the chief waits for those in flight, saves
//! with none running (an exact global step: the multiple or up to
//! `workers - 1` more) and opens it. A PS restart restores that step's
//! variables and counts the first `step` batches of the one-process
//! schedule as done; the rest are dealt out as before.
//!
//! | module | holds |
//! |---|---|
//! | `chief` | the chief's checkpoints, evaluations and the asynchronous gate; restoring a checkpoint |
//! | `steps` | the training loops: synchronous, asynchronous, with backup workers |
//! | `report` | what a run reports |
//! | `bench` | `flowlab bench cluster`'s training-step rows |

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flowlab_engine::checkpoint::CheckpointManager;

use flowlab_engine::{EngineError, Graph, Output, PartitionOptions, Tensor};
use crate::datasets::Dataset;
use crate::train::{
    AsyncGraph, BackupGraph, Batches, ParallelPlacement, ShardedGraph, TrainConfig, TrainReport, batch_tensors, build_async, build_backup,
    build_sharded, split_holdout,
};
use serde::Serialize;

use flowlab_runtime::{ClusterSpec, Job, Master, MasterOptions, Result, RuntimeError, TaskId};


mod bench;
mod chief;
mod report;
mod steps;
#[cfg(test)]
mod tests;

pub use bench::bench_steps;
pub use report::{ClusterTrainReport, percentile};
use chief::{Chief, Evaluation, Gate, Restore};
use report::finish;
use steps::{StepLoop, dead_ps_of, run_async, run_backup, run_sync};

/// How workers combine their gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// All workers' gradients averaged into one update per step.
    Sync,
    /// Each worker applies its own gradients when it has them.
    Async,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Sync => "sync",
            Mode::Async => "async",
        })
    }
}

/// How to train over a cluster.
#[derive(Clone, Debug)]
pub struct ClusterTraining {
    pub mode: Mode,
    /// Synchronous only: backup workers. Each update averages the first
    /// `workers - backup` gradients computed on the current variables; the
    /// rest are dropped (TensorFlow's SyncReplicasOptimizer).
    pub backup: usize,
    pub master: MasterOptions,
    /// Synchronous only: save the variables (fetched from the PS) into
    /// `dir` every `every` updates, atomically, the newest `keep` kept.
    pub checkpoint: Option<crate::train::CheckpointConfig>,
    /// Record the timeline of global updates `first..=last` (counted from
    /// 1): every step that starts after update `first - 1` is done and
    /// before update `last` is (asynchronous: the other workers' steps
    /// among them), traced on every task ([`ClusterTrainReport::timeline`]).
    /// A run that ends (or a backup run that runs out of shards) before
    /// `last` keeps what it recorded; recording starts at most once.
    pub timeline: Option<(usize, usize)>,
    /// Injected stragglers: each worker's computations wait as these say.
    pub stragglers: Option<Stragglers>,
    /// Evaluate the held-out accuracy after every this many global
    /// updates, with no update in flight (asynchronous training's gate
    /// closes for it as for a checkpoint): the report's `accuracy_curve`,
    /// how many updates a mode needs to reach an accuracy.
    pub eval_every: Option<usize>,
}

impl Default for ClusterTraining {
    fn default() -> Self {
        ClusterTraining { mode: Mode::Sync, backup: 0, master: MasterOptions::default(), checkpoint: None, timeline: None, stragglers: None, eval_every: None }
    }
}

/// Stragglers injected into a real run: worker `w`'s k-th computation
/// waits `(f - 1) x compute` before its task runs it, `f` the factor at
/// row `k mod rows` of column `w mod columns` (a factor below 1 counts as
/// 1: a wait cannot make a worker faster). The cluster simulator replays
/// the same columns (`straggler: { dist: trace, factors }`), so a
/// prediction meets the same draws.
#[derive(Clone, Debug, PartialEq)]
pub struct Stragglers {
    /// Per worker, its factors in the order of its computations.
    pub factors: Vec<Vec<f64>>,
    /// The compute time a factor scales: the worker's own, measured just
    /// before the run on this host (a factor only means something against it).
    pub compute: Duration,
}

impl Stragglers {
    /// The wait before worker `w`'s k-th computation.
    pub fn delay(&self, w: usize, k: usize) -> Duration {
        let Some(column) = self.factors.get(w % self.factors.len().max(1)).filter(|c| !c.is_empty()) else {
            return Duration::ZERO;
        };
        self.compute.mul_f64((column[k % column.len()] - 1.0).clamp(0.0, 1e6))
    }
}

/// Hands out each worker's next injected wait, counting its computations.
struct Injector<'a> {
    stragglers: Option<&'a Stragglers>,
    workers: &'a [TaskId],
    counts: parking_lot::Mutex<Vec<usize>>,
}

impl Injector<'_> {
    /// Worker `w`'s wait for the computation it is about to run, as the
    /// master's `run_delayed` takes it (none without stragglers).
    fn next(&self, w: usize) -> Option<(TaskId, Duration)> {
        let s = self.stragglers?;
        let mut counts = self.counts.lock();
        let k = counts.get(w).copied().unwrap_or(0);
        if let Some(c) = counts.get_mut(w) {
            *c += 1;
        }
        let d = s.delay(w, k);
        (d > Duration::ZERO).then(|| (self.workers[w], d))
    }
}

/// The global updates a run of `cfg` on `data` makes (`cfg.devices`
/// replicas: synchronous `workers - backup`, 1 for asynchronous workers,
/// which take whole batches): every epoch's batches. Backup workers can
/// make fewer (the shards of dropped gradients are gone).
pub fn planned_updates(data: &Dataset, cfg: &TrainConfig) -> usize {
    let mut b = Batches::new(split_holdout(data, cfg.seed).0.len(), cfg, cfg.devices);
    b.next_epoch().len().saturating_mul(cfg.epochs)
}

/// Step times collected from the training threads.
type Times = parking_lot::Mutex<Vec<f64>>;

fn push_time(times: &Times, since: Instant) {
    times.lock().push(since.elapsed().as_secs_f64());
}

fn config(detail: String) -> RuntimeError {
    RuntimeError::Engine { message: detail }
}

/// Trains `cfg` on `data` over the tasks of `spec` (see the module comment).
/// `cfg.devices` is taken as the number of workers in `spec`.
pub fn train_on_cluster(data: &Dataset, cfg: &TrainConfig, spec: &ClusterSpec, how: &ClusterTraining) -> Result<ClusterTrainReport> {
    train_on_cluster_with(data, cfg, spec, how, &Hooks { on_step: &|_| {}, restart: None, steps_done: None })
}

/// What the launcher lends a training run.
pub struct Hooks<'a> {
    /// Called with the number of updates done after each update and its
    /// checkpoint (`--kill` uses it); asynchronous: the global update count,
    /// from the worker thread that made it.
    pub on_step: &'a (dyn Fn(usize) + Sync),
    /// Starts a task again after it died. Given, a run (any mode) whose PS
    /// dies restarts it, registers the graph again, restores the newest
    /// checkpoint (or initializes) and goes on from there; `restarts` and
    /// `steps_lost` count this.
    pub restart: Option<&'a (dyn Fn(TaskId) -> Result<()> + Sync)>,
    /// Called once, after the last update and before the held-out
    /// evaluation: with `on_step`'s first call, the window a launcher
    /// measures the updates alone over (no start-up, registration or
    /// evaluation in it).
    pub steps_done: Option<&'a (dyn Fn() + Sync)>,
}

/// [`train_on_cluster`] with the launcher's [`Hooks`].
pub fn train_on_cluster_with(
    data: &Dataset,
    cfg: &TrainConfig,
    spec: &ClusterSpec,
    how: &ClusterTraining,
    hooks: &Hooks<'_>,
) -> Result<ClusterTrainReport> {
    let (mode, backup) = (how.mode, how.backup);
    let start = Instant::now();
    let (workers, ps) = cluster_tasks(spec, mode, backup)?;
    let ps0 = ps[0];
    let needed = workers.len() - backup;
    let mut cfg = cfg.clone();
    // a synchronous step splits each batch into one shard per needed
    // gradient; async workers take whole batches
    cfg.devices = if mode == Mode::Sync { needed } else { 1 };
    cfg.placement = ParallelPlacement::Replicas;
    cfg.validate()?;
    cfg.devices = workers.len();
    let (train_set, test_set) = split_holdout(data, cfg.seed);
    if train_set.is_empty() || test_set.is_empty() {
        return Err(config(format!("{} examples are too few to hold a fifth out", data.len())));
    }
    let g = Graph::new();
    let devices: Vec<_> = workers.iter().map(|t| t.device()).collect();
    let ps_devices: Vec<_> = ps.iter().map(|t| t.device()).collect();
    let opts = how.master.clone();
    let mut master = Master::connect(spec, MasterOptions { partition: PartitionOptions::in_format(cfg.comm), ..opts })?;
    let mut dropped = 0u64;
    let mut failed: Vec<String> = Vec::new();
    let n = workers.len();
    let manager = match &how.checkpoint {
        Some(c) => Some(CheckpointManager::new(&c.dir, c.keep)?),
        None => None,
    };
    let (built, init) = Built::build(how, &g, &cfg, data.features, &ps_devices, &devices)?;
    let variables = g.variables();
    let restore = Restore::ops(&g, ps0, &variables)?;
    master.register(&g)?;
    master.run(&[], &[], &[&init])?;
    // backup workers: shards taken from the queue when update k was applied
    // (index k), so a restart from update k's checkpoint goes on from there
    let positions = parking_lot::Mutex::new(vec![0usize]);
    let [eval_x, eval_y, eval_accuracy, eval_loss] = built.eval();
    let all: Vec<usize> = (0..test_set.len()).collect();
    let held_out = batch_tensors(&test_set, &all)?;
    let chief = Chief {
        positions: (mode == Mode::Sync && backup > 0).then_some(&positions),
        manager,
        every: how.checkpoint.as_ref().map_or(1, |c| c.every),
        eval: how.eval_every.map(|every| Evaluation {
            every,
            x: eval_x.clone(),
            y: eval_y.clone(),
            accuracy: eval_accuracy.clone(),
            examples: held_out.clone(),
        }),
        curve: parking_lot::Mutex::new(Vec::new()),
        variables,
        meta: run_meta(&cfg, n, backup, mode),
        on_step: hooks.on_step,
        progress: std::sync::atomic::AtomicUsize::new(0),
        gate: parking_lot::Mutex::new(Gate::default()),
        turn: parking_lot::Condvar::new(),
        timeline: how.timeline,
        recorded: parking_lot::Mutex::new(None),
        timeline_ended: std::sync::atomic::AtomicBool::new(false),
    };
    let variable_bytes = variable_bytes(&master, &chief.variables, &ps);
    let times: Times = parking_lot::Mutex::new(Vec::new());
    let traffic_before = master.traffic();
    let (mut restarts, mut steps_lost) = (0u64, 0u64);
    let mut resumed: (Option<u64>, Vec<String>) = (None, Vec::new());
    let train_start = Instant::now();
    let mut from = 0usize;
    if how.checkpoint.as_ref().is_some_and(|c| c.resume)
        && let Some((step, skipped)) = restore.newest(&master, &chief, how)?
    {
        from = step;
        resumed = (Some(step as u64), skipped);
    }
    let inject = Injector { stragglers: how.stragglers.as_ref(), workers: &workers, counts: parking_lot::Mutex::new(vec![0; n]) };
    let (steps, train_loss) = loop {
        chief.timeline_after(&master, from);
        let l = StepLoop { master: &master, train_set: &train_set, cfg: &cfg, ps: &ps, times: &times, inject: &inject };
        let r = match &built {
            Built::Sync(sg) => run_sync(&l, sg, n, from, &|k| chief.after(&master, k)),
            Built::Backup(bg) => {
                let skip = shards_taken_before(&positions, from, how)?;
                // shards taken before the restored update and not applied by it
                // are dropped for good
                dropped = (skip - needed * from) as u64;
                failed.clear();
                run_backup(&l, bg, needed, (from, skip), &positions, &|k| chief.after(&master, k)).map(
                    |(steps, loss, d, f)| {
                        dropped += d;
                        failed = f.iter().map(|&w| workers[w].to_string()).collect();
                        (steps, loss)
                    },
                )
            }
            Built::Async(ag) => {
                chief.start_at(from);
                run_async(&l, ag, n, from, &chief)
            }
        };
        let dead_ps = r.as_ref().err().and_then(|e| dead_ps_of(&master, &ps, e));
        match (r, hooks.restart, dead_ps) {
            (Ok(x), _, _) => break x,
            (Err(_), Some(restart), Some(dead)) if restarts < 3 => {
                restart(dead)?;
                from = restore.after_restart(&mut master, dead, &g, &init, &chief, how)?;
                let done = chief.progress.swap(from, std::sync::atomic::Ordering::Relaxed);
                steps_lost += done.saturating_sub(from) as u64;
                restarts += 1;
            }
            (Err(e), _, _) => return Err(e),
        }
    };
    chief.save_the_end(&master, from, steps, cfg.epochs)?;
    let train_seconds = train_start.elapsed().as_secs_f64();
    chief.keep_timeline(&master);
    if let Some(done) = hooks.steps_done {
        done();
    }
    let traffic = master.traffic();
    let (tx, ty) = &held_out;
    let out = master.run(&[(&eval_x, tx), (&eval_y, ty)], &[&eval_accuracy, &eval_loss], &[])?;
    let mut r = finish(out, steps, train_loss, start, train_seconds, &cfg, &train_set, &test_set, mode, ps.len(), n)?;
    r.backup = backup;
    r.dropped_gradients = dropped;
    r.failed_workers = failed;
    r.restarts = restarts;
    r.steps_lost = steps_lost;
    r.variable_bytes = variable_bytes;
    (r.report.resumed_from_step, r.report.skipped_checkpoints) = resumed;
    r.step_times_s = times.into_inner();
    (r.step_p10_s, r.step_p50_s, r.step_p90_s) = (percentile(&r.step_times_s, 0.1), percentile(&r.step_times_s, 0.5), percentile(&r.step_times_s, 0.9));
    let per = |x: u64, y: u64| x.saturating_sub(y) as f64 / steps.max(1) as f64;
    r.transfers_per_step = per(traffic.transfers, traffic_before.transfers);
    r.bytes_per_step = per(traffic.bytes, traffic_before.bytes);
    r.master_bytes_per_step = per(traffic.master_bytes, traffic_before.master_bytes);
    (r.link_gbps, r.link_latency_us) = (how.master.link.map(|l| l.gbps), how.master.link.map(|l| l.latency_us));
    r.straggler_compute_s = how.stragglers.as_ref().map(|s| s.compute.as_secs_f64());
    r.accuracy_curve = chief.curve.into_inner();
    r.timeline = chief.recorded.into_inner();
    Ok(r)
}

/// Backup workers: the shards taken from the queue by the time update
/// `from` was applied (where a restarted run goes on from).
fn shards_taken_before(positions: &parking_lot::Mutex<Vec<usize>>, from: usize, how: &ClusterTraining) -> Result<usize> {
    let pos = positions.lock();
    pos.get(from).copied().ok_or_else(|| {
        config(format!(
            "backup workers: the checkpoint restored is of update {from}, which this run never made (a newer checkpoint of an earlier run in {}?): restart from an empty --checkpoint-dir",
            how.checkpoint.as_ref().map(|c| c.dir.display().to_string()).unwrap_or_default()
        ))
    })
}

/// The cluster's worker and PS tasks, checked: at least one of each, and
/// backup workers only when synchronous and fewer than the workers.
fn cluster_tasks(spec: &ClusterSpec, mode: Mode, backup: usize) -> Result<(Vec<TaskId>, Vec<TaskId>)> {
    let workers: Vec<TaskId> = spec.job_tasks(Job::Worker).map(|(t, _)| t).collect();
    let ps: Vec<TaskId> = spec.job_tasks(Job::Ps).map(|(t, _)| t).collect();
    if ps.is_empty() {
        return Err(config("the cluster has no ps task to hold the variables".into()));
    }
    if workers.is_empty() {
        return Err(config("the cluster has no worker task".into()));
    }
    if backup > 0 && (mode != Mode::Sync || backup >= workers.len()) {
        return Err(RuntimeError::Engine {
            message: format!("{backup} backup workers need synchronous training and more than {backup} workers (got {})", workers.len()),
        });
    }
    Ok((workers, ps))
}

/// The graph of the mode.
enum Built {
    Sync(ShardedGraph),
    Backup(BackupGraph),
    Async(AsyncGraph),
}

impl Built {
    /// The mode's graph on `g`, and its initializer.
    fn build(how: &ClusterTraining, g: &Graph, cfg: &TrainConfig, features: usize, ps: &[flowlab_engine::DeviceName], workers: &[flowlab_engine::DeviceName]) -> Result<(Built, Output)> {
        let (mode, backup) = (how.mode, how.backup);
        let needed = workers.len() - backup;
        Ok(match mode {
            Mode::Sync if backup > 0 => {
                let bg = build_backup(g, cfg, features, ps, workers, needed)?;
                let init = bg.init.clone();
                (Built::Backup(bg), init)
            }
            Mode::Sync => {
                let sg = build_sharded(g, cfg, features, ps, workers)?;
                let init = sg.init.clone();
                (Built::Sync(sg), init)
            }
            Mode::Async => {
                let ag = build_async(g, cfg, features, ps, workers)?;
                let init = ag.init.clone();
                (Built::Async(ag), init)
            }
        })
    }

    /// The evaluation's inputs and outputs: x, y, accuracy, loss.
    fn eval(&self) -> [Output; 4] {
        match self {
            Built::Sync(sg) => [sg.eval_x.clone(), sg.eval_y.clone(), sg.eval_accuracy.clone(), sg.eval_loss.clone()],
            Built::Backup(bg) => [bg.eval_x.clone(), bg.eval_y.clone(), bg.eval_accuracy.clone(), bg.eval_loss.clone()],
            Built::Async(ag) => [ag.eval_x.clone(), ag.eval_y.clone(), ag.eval_accuracy.clone(), ag.eval_loss.clone()],
        }
    }
}

/// What a checkpoint records of the run, so that a resumed run is refused
/// when its settings differ.
fn run_meta(cfg: &TrainConfig, workers: usize, backup: usize, mode: Mode) -> BTreeMap<String, String> {
    [
        ("seed", cfg.seed.to_string()),
        ("batch", cfg.batch.to_string()),
        ("workers", workers.to_string()),
        ("backup", backup.to_string()),
        ("mode", mode.to_string()),
        ("learning_rate", cfg.learning_rate.to_string()),
        ("comm", format!("{:?}", cfg.comm)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Bytes of variables each PS task holds.
fn variable_bytes(master: &Master, variables: &[Output], ps: &[TaskId]) -> BTreeMap<String, u64> {
    let mut bytes: BTreeMap<String, u64> = ps.iter().map(|t| (t.to_string(), 0)).collect();
    for v in variables {
        if let (Some(t), Some(n)) = (master.task_of(v), v.tensor_type().shape.to_shape().map(|s| s.num_elements()))
            && let Some(b) = bytes.get_mut(&t.to_string())
        {
            *b += (n * v.dtype().size_in_bytes()) as u64;
        }
    }
    bytes
}


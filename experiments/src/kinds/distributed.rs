//! `kind: distributed`: one point trains a digits model on a real local
//! cluster (PS and worker tasks talking gRPC over loopback, the runtime of
//! `flowlab train --local-cluster`) and runs the cluster simulator on the
//! same configuration, so that the simulator's sync / async / backup-worker
//! step times are checked against the runtime's.
//!
//! ```yaml
//! base:
//!   model: mlp            # mlp (64-128-10), mlp784 (784-512-512-10, the digits at 28 x 28) or cnn, on the digits set
//!   ps: 1                 # PS tasks (variables sharded greedily by size)
//!   workers: 2            # worker tasks, backups included
//!   strategy: sync        # sync | async
//!   backup: 0             # sync: backup workers among `workers`
//!   comm: f32             # f32 | f16 | bf16 | int8: format of the tensors between tasks
//!   link: { gbps: 1, latency_us: 100 }   # optional: emulated between the tasks, and the simulator's link
//!   batch: 32             # examples per update (split over the needed workers in sync;
//!                         #   default 32 rounded up to a multiple of them)
//!   epochs: 2
//!   kill: worker:2@20     # optional: stop a task after update 20 (async: a ps task, after global update 20)
//!   checkpoint_every: 10  # optional: checkpoints (a killed PS restarts from the newest)
//!   calibration_reps: 5   # timed batches per calibration figure (the median is kept)
//!   straggler: { dist: lognormal, sigma: 0.5 }   # optional: injected stragglers (below)
//! ```
//!
//! With `straggler:` (the cluster kind's schema; not `transient`, whose
//! slow periods follow simulated time) each worker's k-th computation
//! waits (f - 1) x the calibrated `compute_s` before its task runs it (the
//! master asks for the wait in the step's `RunGraph`), f the k-th factor
//! of the worker's own stream of the point's seed, at least 1; the
//! simulator replays the same factors (`{ dist: trace, factors }`).
//!
//! What is measured, what is calibrated and what is predicted:
//! - measured (the real run): updates per second, step-time percentiles
//!   (the master's training round in sync, a worker's step in async, update
//!   to update with backups), tensors and bytes between tasks per step,
//!   held-out accuracy and loss; the CPU time of the runner (the master)
//!   and of each task process per update, over the updates alone (the
//!   first update's end to the last's) and over the whole run, beside the CPU
//!   the simulator's inputs charge per update, in all and per process
//!   (`predicted_task_cpu_per_update_us`, in the order of
//!   `task_cpu_per_update_us`, and the runner's): where a prediction falls
//!   short because the host's CPU is undercounted, these say by how much
//!   and on which task.
//! - calibrated, in the same sitting, before the run: `compute_s`, the time
//!   of one worker's forward and backward pass on its shard, run in this
//!   process on one device (the median of timed repetitions); `apply_s`,
//!   the PS update the same way, on the point's own graph: the average of
//!   its `needed` gradients (masked stashes of every worker with backups;
//!   none for async) and Adam, the gradients fed, each replica's in
//!   buffers of its own as the PS receives them (`InProcessStep`); the loopback
//!   link from a `RecvTensor` of 16 bytes (half of it is the one-way
//!   latency) and of the model's
//!   gradient bytes, at least a megabyte (the added bytes over the added
//!   time is the link rate);
//!   `step_overhead_s`, a master-driven step that runs one `RunGraph` on
//!   each of two tasks and moves nothing; and the CPU time (every thread
//!   of the calibrating process) per small `RecvTensor` and per empty step;
//!   `core_share`, the CPU time over wall time of one spinning thread (1
//!   on an idle host, less while other jobs share the cores). When the
//!   tasks are processes, the CPU figures and `step_overhead_s` come from
//!   a cluster of task processes instead, the point's PS tasks and workers
//!   (`flowlab_runtime::measure_task_processes`): each process's clock per
//!   empty step of ps:0 and worker:0 (the worker fed its shard of the
//!   batch, as the master feeds it), a step on worker:0 and every PS task
//!   traced, the PS tasks asking worker:0 for one-float tensors as a
//!   training step's ask for the gradients (how long the master's call
//!   takes to reach worker:0's
//!   executor, and its answers to come back after the last task ended:
//!   `dispatch_out_s`, `dispatch_back_s`), and per `RecvTensor` of the model's
//!   own variables in the point's format at each end, every worker
//!   fetching them at once as the point's steps do, and per tensor of the
//!   same sizes pushed, ps:0 taking every worker's at once as it takes
//!   the gradients (the in-process
//!   figures, a 4-float tensor with both ends in one process, stay in the
//!   row; `calibrated_consumers` is the workers that fetched). With one
//!   worker fetching, a transfer's CPU was measured as it costs two
//!   processes alone on the cores, and the 2- and 4-worker points of
//!   `catalog:distributed-mlp784` were predicted 18-25% short (docs/logs/distributed-prediction.md:
//!   the errors since).
//! - predicted: the cluster simulator's step times for the same workers,
//!   PS tasks, strategy, variables (sizes and greedy placement as the
//!   runtime's) and format. What the runtime does, and how the simulator
//!   is given it:
//!   - every task is one process on this host, all sharing its cores
//!     (`host_cores`: the machine's core count): a worker's step
//!     overhead, its compute and every PS request hold a core while they
//!     run. `core_share` says how disturbed the sitting was; it is not
//!     applied (docs/logs/distributed-prediction.md: one moment's share does not hold for the run).
//!   - a task has one message thread (its gRPC runtime runs on one worker
//!     thread): every tensor moved is one `RecvTensor`. Each task is the
//!     producer of half of its tensors (the PS of the fetched variables,
//!     the worker of the gradients) and the consumer of the other half, so
//!     each end is charged the mean of its two roles: between processes
//!     each is measured (`TaskEnds`: a fetch's and a push's end at the
//!     PS, at a worker); on threads, half the transfer's CPU
//!     (`CPU_SHARE_PER_END`). Between processes a pushed tensor's message
//!     part at the PS is what the calibration's one-float pushes held the
//!     step for (their added wall time less a round trip, per tensor, at
//!     most the message's CPU: `ps_push_transfer_us`). The PS's end is `ps_transfer_us` per tensor
//!     it holds, FIFO on the PS with the other workers' requests, and the
//!     step waits for it; the worker's end of its 2V fetched and pushed
//!     tensors is `worker_transfer_us`, CPU that holds a core while the
//!     tensors move and that nothing waits for, since the two ends
//!     pipeline (the worker decodes one tensor while the PS serves the
//!     next). The master's CPU of the step's `RunGraph` calls is its part
//!     of the empty step, which has two, times the calls per gradient over
//!     two (one on every worker and PS task of a synchronous step, on the
//!     worker and the PS tasks for an asynchronous step). The step
//!     overhead holds the worker's own `RunGraph` and the worker's end of
//!     its loss transfer (and on threads the master's CPU). Each PS task's own `RunGraph` is CPU on
//!     that task, in its requests like the update, and ps:0 pays its end
//!     of each worker's loss (`first_ps_push_us`). Between processes the
//!     tasks' part of the empty step is measured apart from the master's;
//!     on threads one clock holds both, all charged as the master's.
//!     Between processes the master is a process of its own: its CPU
//!     holds a core beside the worker's overhead (`master_cpu_us`, nothing
//!     waits for it), the worker starts no earlier than the traced
//!     `dispatch_out_s` after the step's start (`dispatch_us`), and the
//!     step ends `dispatch_back_s` after its last task
//!     (`step_end_wait_us`, the answers' way back to the master).
//!   - a fetch is one `RecvTensor` per variable, and a PS task's message
//!     thread answers the workers' concurrent calls in turn, so a worker
//!     has its variables once the task has served every fetch queued with
//!     its own (`fetch_in_turn`).
//!   - the update is applied once per update: each PS task's share of
//!     `apply_s`, by the parameters it holds (`ps_us_per_mparam`), over
//!     the simulator's two requests per gradient.
//!   - the train op, on ps:0, groups every variable's update: with
//!     several PS tasks, each other task sends ps:0 a control token per
//!     variable it holds once its update ran (a `RecvTensor` each, CPU at
//!     both ends: `ps_transfer_us`), and the step ends when ps:0 has them
//!     (`update_tokens`; the timeline is at the simulator's event).
//!   - the network is a mesh (a link per task pair): loopback has no shared
//!     link, and `link` emulates one per task pair, so two workers' flows
//!     from the PS do not share its link; its one-way latency is half a
//!     loopback `RecvTensor` plus the emulated link's.
//!   - with `link`, every task delays the tensors it sends to another task
//!     as over that link (the engine's rule, see `flowlab_runtime`'s
//!     worker), one behind the other per direction, a latency each, and
//!     the real loopback `RecvTensor` follows. The simulator has three
//!     latencies per worker step (a fetch's request and answer, a push);
//!     the other transfers' latencies are a wait in the step
//!     (`step_wait_us`, with the part of the empty step's wall time that
//!     is not CPU). The tensors of one direction pipeline (one is fetched
//!     over loopback while the next one's emulated time runs), so the rate
//!     is the slower of the link's and the loopback's.
//!   `error` is (predicted - measured) / measured of the median step time.
//!
//! Tasks are child processes of the `flowlab` binary when the runner is
//! given it ([`crate::RunOptions::launcher`], which `flowlab run` sets),
//! else task servers on threads of the runner's process (same gRPC, no
//! process boundary; `processes` in the row says which). Points time real
//! runs, so they run one at a time.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use flowlab_engine::{DeviceSet, Graph, Output, Session, SessionOptions, Tensor};
use flowlab_hw::CommFormat;
use flowlab_programs::datasets::{Dataset, builtin_digits};
use flowlab_programs::train::{CheckpointConfig, ModelKind, TrainConfig, batch_tensors, build_async, build_backup, build_sharded, local_cpu, shard_variables, split_holdout};
use flowlab_runtime::{ClusterTraining, Hooks, Job, LocalCluster, MasterOptions, Mode, Stragglers, TaskId, train_on_cluster_with};
use flowlab_sim::cluster::{ClusterConfig, ModelRef, NetworkConfig, Straggler, Strategy, TopologyKind, Workload, factor_table, injected_factors, simulate};

use super::validate::LinkParams;
use super::{Outcome, PointEnv, TypedKind};

/// One sweep point of a distributed experiment.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DistributedPoint {
    /// A digits model: mlp (64-128-10), mlp784 (784-512-512-10, the digits
    /// at 28 x 28) or cnn.
    #[serde(default = "default_model")]
    model: String,
    /// PS tasks (variables sharded greedily by size).
    #[serde(default = "one")]
    ps: usize,
    /// Worker tasks, backups included.
    #[serde(default = "one")]
    workers: usize,
    /// How the workers' updates combine.
    #[serde(default)]
    strategy: StrategyName,
    /// sync: backup workers among `workers`.
    #[serde(default)]
    backup: usize,
    /// Number format of the tensors between tasks: f32, f16, bf16, int8.
    #[serde(default = "default_comm")]
    comm: String,
    /// Emulated between the tasks and given to the simulator; `None`:
    /// plain loopback.
    #[serde(default)]
    link: Option<LinkParams>,
    /// Examples per update (split over the needed workers in sync);
    /// absent: 32 rounded up to a multiple of them.
    #[serde(default)]
    batch: Option<usize>,
    /// Passes over the training set.
    #[serde(default = "default_epochs")]
    epochs: usize,
    /// Stop a task after an update: `worker:2@20` (async: only a ps task,
    /// after global update 20, which is restarted).
    #[serde(default)]
    kill: Option<String>,
    /// Updates between checkpoints (a killed PS restarts from the newest).
    #[serde(default)]
    checkpoint_every: Option<usize>,
    /// Batches of timed repetitions per calibration figure.
    #[serde(default = "default_reps")]
    calibration_reps: usize,
    /// Injected stragglers (the cluster kind's `straggler:` schema, less
    /// `transient`): each worker's computations wait `(f - 1)` times the
    /// calibrated compute, `f` drawn from the point's seed per worker, and
    /// the simulator replays the same factors.
    #[serde(default)]
    straggler: Option<Straggler>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum StrategyName {
    /// An update averages the gradients of `workers - backup` workers.
    #[default]
    Sync,
    /// Each worker's gradient is applied as it comes.
    Async,
}

fn default_model() -> String {
    "mlp".into()
}
fn one() -> usize {
    1
}
fn default_comm() -> String {
    "f32".into()
}
fn default_epochs() -> usize {
    2
}
fn default_reps() -> usize {
    5
}

const MAX_TASKS: usize = flowlab_runtime::MAX_LOCAL_TASKS as usize;
const MAX_EPOCHS: usize = 1000;

/// Examples the digits set trains on (all but the held-out fifth): the
/// largest batch, which the calibration splits over the workers as the
/// run does.
fn train_examples() -> Result<usize, String> {
    static N: std::sync::OnceLock<Result<usize, String>> = std::sync::OnceLock::new();
    N.get_or_init(|| builtin_digits().map(|d| split_holdout(&d, 0).0.len()).map_err(|e| e.to_string())).clone()
}

const METRICS: &[&str] = &[
    "measured_step_s",
    "measured_p10_s",
    "measured_p90_s",
    "predicted_step_s",
    "error",
    "abs_error",
    "steps_per_s",
    "predicted_steps_per_s",
    "steps",
    "accuracy",
    "loss",
    "transfers_per_step",
    "bytes_per_step",
    "master_bytes_per_step",
    "dropped_gradients",
    "failed_workers",
    "restarts",
    "steps_lost",
    "calibrated_compute_s",
    "calibrated_apply_s",
    "calibrated_latency_us",
    "calibrated_link_gbps",
    "calibrated_step_overhead_us",
    "calibrated_recv_cpu_us",
    "calibrated_step_cpu_us",
    "calibrated_core_share",
    "calibrated_between_processes",
    "calibrated_in_process_recv_cpu_us",
    "calibrated_in_process_step_cpu_us",
    "calibrated_recv_producer_cpu_us",
    "calibrated_recv_consumer_cpu_us",
    "calibrated_push_producer_cpu_us",
    "calibrated_push_consumer_cpu_us",
    "calibrated_push_cpu_us",
    "calibrated_small_recv_producer_cpu_us",
    "calibrated_small_recv_consumer_cpu_us",
    "calibrated_small_push_producer_cpu_us",
    "calibrated_small_push_consumer_cpu_us",
    "calibrated_small_recv_wall_us",
    "calibrated_small_push_wall_us",
    "calibrated_step_master_cpu_us",
    "calibrated_step_tasks_cpu_us",
    "calibrated_all_tasks_step_us",
    "calibrated_dispatch_out_us",
    "calibrated_dispatch_back_us",
    "calibrated_consumers",
    "host_cores",
    "sim_link_gbps",
    "sim_latency_us",
    "sim_ps_transfer_us",
    "sim_ps_push_transfer_us",
    "sim_ps_us_per_mparam",
    "sim_worker_transfer_us",
    "sim_step_overhead_us",
    "sim_step_wait_us",
    "sim_step_end_wait_us",
    "sim_dispatch_us",
    "sim_master_cpu_us",
    "serial_transfers",
    "processes",
    "measured_cpu_per_update_us",
    "measured_runner_cpu_per_update_us",
    "predicted_runner_cpu_per_update_us",
    "measured_run_cpu_per_update_us",
    "predicted_cpu_per_update_us",
    "measured_dispatch_s",
    "measured_dispatch_out_s",
    "measured_dispatch_back_s",
    "predicted_dispatch_s",
    "measured_fetch_s",
    "predicted_fetch_s",
    "measured_compute_s",
    "predicted_compute_s",
    "measured_rest_s",
    "predicted_rest_s",
    "measured_span_s",
    "traced_updates",
];

pub(crate) static DISTRIBUTED: TypedKind<DistributedPoint> = TypedKind {
    name: "distributed",
    validate: |p| p.validate(),
    run: run_point,
    resolve: super::serialized,
    metric_names: || METRICS.iter().map(|m| m.to_string()).collect(),
    series_names: &["measured_step_times_s", "task_cpu_per_update_us", "predicted_task_cpu_per_update_us"],
    tag_paths: &[],
    headline: &["model", "ps", "workers", "strategy", "backup", "comm", "batch"],
    nested_keys: &[],
    exclusive: true,
    measured_point_s: Some((1.2, 13.0, "as the catalog's distributed points took: distributed-loopback 14 s for 12, distributed-stragglers 130 s for 10, on 2 cores")),
    summarize: Some(super::distributed_summary::summarize),
};

impl DistributedPoint {
    fn model_kind(&self) -> Result<ModelKind, String> {
        match self.model.as_str() {
            "mlp" => Ok(ModelKind::Mlp),
            "mlp784" => Ok(ModelKind::Mlp784),
            "cnn" => Ok(ModelKind::Cnn),
            other => Err(format!("invalid parameter `model`: `{other}` is not a digits model (expected mlp, mlp784 or cnn)")),
        }
    }

    fn mode(&self) -> Mode {
        match self.strategy {
            StrategyName::Sync => Mode::Sync,
            StrategyName::Async => Mode::Async,
        }
    }

    /// Gradients per update.
    fn needed(&self) -> usize {
        match self.strategy {
            StrategyName::Sync => self.workers.saturating_sub(self.backup),
            StrategyName::Async => 1,
        }
    }

    /// Examples per update: the point's `batch`, or 32 rounded up to a
    /// multiple of the gradients an update averages (as `flowlab train`).
    fn batch(&self) -> usize {
        self.batch.unwrap_or_else(|| flowlab_programs::train::default_batch(self.needed()))
    }

    fn kill_at(&self) -> Result<Option<(TaskId, usize)>, String> {
        let Some(k) = &self.kill else { return Ok(None) };
        let bad = |why: String| format!("invalid parameter `kill`: `{k}`: {why}");
        let (id, step) = flowlab_runtime::parse_kill(k).map_err(bad)?;
        let count = match id.job {
            Job::Ps => self.ps,
            Job::Worker => self.workers,
            Job::Chief => 0,
        };
        if id.index as usize >= count {
            return Err(bad(format!("the cluster has {} {} tasks", count, id.job)));
        }
        Ok(Some((id, step)))
    }

    fn validate(&self) -> Result<(), String> {
        self.model_kind()?;
        for (key, v) in [("ps", self.ps), ("workers", self.workers)] {
            if v == 0 || v > MAX_TASKS {
                return Err(format!("invalid parameter `{key}`: must be between 1 and {MAX_TASKS}, got {v}"));
            }
        }
        if self.backup > 0 && (self.strategy != StrategyName::Sync || self.backup >= self.workers) {
            return Err(format!(
                "invalid parameter `backup`: {} backup workers need strategy sync and more than {} workers (got {})",
                self.backup, self.backup, self.workers
            ));
        }
        self.comm.parse::<CommFormat>().map_err(|e| format!("invalid parameter `comm`: {e}"))?;
        self.link.as_ref().map(LinkParams::check).transpose()?;
        if self.epochs == 0 || self.epochs > MAX_EPOCHS {
            return Err(format!("invalid parameter `epochs`: must be between 1 and {MAX_EPOCHS}, got {}", self.epochs));
        }
        let examples = train_examples()?;
        let batch = self.batch();
        if batch > examples {
            return Err(format!("invalid parameter `batch`: at most the {examples} examples the digits set trains on, got {batch}"));
        }
        if batch == 0 || !batch.is_multiple_of(self.needed()) {
            return Err(format!(
                "invalid parameter `batch`: must be a positive multiple of the {} gradients per update, got {batch}",
                self.needed(),
            ));
        }
        if let Some(st) = &self.straggler {
            st.validate(self.workers as u32).map_err(|e| e.to_string())?;
            factor_table(st, self.workers, 1, 0).map_err(|e| e.to_string())?;
        }
        if self.calibration_reps == 0 || self.calibration_reps > 1000 {
            return Err(format!("invalid parameter `calibration_reps`: must be between 1 and 1000, got {}", self.calibration_reps));
        }
        if self.checkpoint_every == Some(0) {
            return Err("invalid parameter `checkpoint_every`: must be at least 1".into());
        }
        // asynchronous training has no backup: a dead worker stops it, a
        // dead PS task is restarted (from the newest checkpoint, taken at
        // a global update boundary)
        if self.strategy == StrategyName::Async
            && let Some((task, _)) = self.kill_at()?
            && task.job != Job::Ps
        {
            return Err(format!(
                "invalid parameter `kill`: `{}`: with strategy async only a ps task may be killed (it is restarted); a dead worker stops asynchronous training",
                self.kill.as_deref().unwrap_or_default()
            ));
        }
        self.kill_at()?;
        Ok(())
    }

    fn train_config(&self, seed: u64) -> Result<TrainConfig, String> {
        let mut cfg = TrainConfig::new(self.model_kind()?);
        cfg.epochs = self.epochs;
        cfg.batch = self.batch();
        cfg.seed = seed;
        cfg.comm = self.comm.parse().map_err(|e| format!("invalid parameter `comm`: {e}"))?;
        Ok(cfg)
    }
}

/// Median seconds per run of `f` over `reps` batches of `iters` runs
/// (after one untimed batch).
fn median_per_run(reps: usize, iters: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    for _ in 0..iters {
        f()?;
    }
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        times.push(t.elapsed().as_secs_f64() / iters as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// One worker's forward and backward pass on its shard, and the PS's
/// update, as two steps of the graph the point's strategy trains, every
/// replica on one device of this process: the update is the one the PS
/// runs, the average of `needed` gradients (of every worker's stash,
/// masked, with backups) and Adam, or Adam alone for an asynchronous
/// worker. The update's gradients are fed (the compute's own, as every
/// replica's), so that it runs without the replicas' passes.
struct InProcessStep {
    sess: Session,
    compute: (Vec<(Output, Tensor)>, Output),
    update: (Vec<(Output, Tensor)>, Output),
}

impl InProcessStep {
    fn new(p: &DistributedPoint, cfg: &TrainConfig, data: &Dataset, shard: usize) -> Result<InProcessStep, String> {
        let e = |e: flowlab_engine::EngineError| format!("calibrating the step in process: {e}");
        let g = Graph::new();
        let dev = local_cpu(0);
        let sess = Session::with_options(&g, SessionOptions { threads: cfg.threads, devices: DeviceSet::local_cpus(1), ..Default::default() }).map_err(e)?;
        let idx: Vec<usize> = (0..shard.min(data.len())).collect();
        let (x, y) = batch_tensors(data, &idx).map_err(e)?;
        let needed = p.needed();
        let batch = |x0: &Output, y0: &Output| vec![(x0.clone(), x.clone()), (y0.clone(), y.clone())];
        // replica 0's gradients computed once, fed as every replica's
        type Steps = ((Vec<(Output, Tensor)>, Output), (Vec<(Output, Tensor)>, Output));
        let fed_update = |x0: &Output, y0: &Output, replicas: &[Vec<Output>], update: &Output| -> Result<Steps, String> {
            let grads = &replicas[0];
            let compute = g.group("calibrate_compute", &grads.iter().collect::<Vec<_>>()).map_err(e)?;
            let feeds = batch(x0, y0);
            let fed: Vec<(&Output, &Tensor)> = feeds.iter().map(|(o, t)| (o, t)).collect();
            let values = sess.run(&fed, &grads.iter().collect::<Vec<_>>(), &[]).map_err(e)?;
            // each replica's gradients in buffers of their own, as the PS
            // receives them: one buffer fed to every replica would let the
            // average read the same memory `needed` times
            let mut update_feeds = Vec::with_capacity(replicas.len() * values.len());
            for (k, r) in replicas.iter().enumerate() {
                for (o, v) in r.iter().zip(&values) {
                    let own = if k == 0 { v.clone() } else { Tensor::from_f64s(v.dtype(), &v.to_f64_vec(), v.shape().clone()).map_err(e)? };
                    update_feeds.push((o.clone(), own));
                }
            }
            Ok(((feeds, compute), (update_feeds, update.clone())))
        };
        let (compute, update) = match p.strategy {
            StrategyName::Sync if p.backup == 0 => {
                let sg = build_sharded(&g, cfg, data.features, std::slice::from_ref(&dev), &vec![dev.clone(); needed]).map_err(e)?;
                sess.run(&[], &[], &[&sg.init]).map_err(e)?;
                fed_update(&sg.xs[0], &sg.ys[0], &sg.replica_gradients, &sg.train_op)?
            }
            StrategyName::Async => {
                let ag = build_async(&g, cfg, data.features, std::slice::from_ref(&dev), std::slice::from_ref(&dev)).map_err(e)?;
                sess.run(&[], &[], &[&ag.init]).map_err(e)?;
                fed_update(&ag.xs[0], &ag.ys[0], &ag.gradients[..1], &ag.train_ops[0])?
            }
            StrategyName::Sync => {
                // a worker's compute leaves its gradients in its stash; the
                // update averages the first `needed` stashes (masks 1) and
                // multiplies the backups' by 0
                let bg = build_backup(&g, cfg, data.features, std::slice::from_ref(&dev), &vec![dev.clone(); p.workers], needed).map_err(e)?;
                sess.run(&[], &[], &[&bg.init]).map_err(e)?;
                for (i, c) in bg.computes.iter().enumerate() {
                    sess.run(&[(&bg.xs[i], &x), (&bg.ys[i], &y)], &[], &[c]).map_err(e)?;
                }
                let masks = (0..p.workers)
                    .map(|i| Tensor::from_vec(vec![if i < needed { 1.0f32 } else { 0.0 }], Vec::<usize>::new()).map(|t| (bg.masks[i].clone(), t)))
                    .collect::<Result<_, _>>()
                    .map_err(e)?;
                ((batch(&bg.xs[0], &bg.ys[0]), bg.computes[0].clone()), (masks, bg.apply.clone()))
            }
        };
        Ok(InProcessStep { sess, compute, update })
    }

    /// Median seconds of the compute and of the update over `reps` timed
    /// batches: (compute_s, apply_s).
    fn time(&self, reps: usize) -> Result<(f64, f64), String> {
        let run = |(feeds, target): &(Vec<(Output, Tensor)>, Output)| {
            let fed: Vec<(&Output, &Tensor)> = feeds.iter().map(|(o, t)| (o, t)).collect();
            median_per_run(reps, 20, || self.sess.run(&fed, &[], &[target]).map(drop).map_err(|e| format!("calibrating the step in process: {e}")))
        };
        Ok((run(&self.compute)?, run(&self.update)?))
    }
}

/// What the simulator is given for one point (see the module comment).
struct SimInputs {
    workload: Workload,
    /// The mesh's link rate and one-way latency.
    gbps: f64,
    latency_us: f64,
    /// The host's cores, shared by every task.
    cores: u32,
    /// Tensors a worker's step moves (`serial_transfers`).
    transfers: usize,
    /// The master's CPU per gradient: `Workload::master_cpu_us` between
    /// processes, part of the step overhead on threads.
    runner_us: f64,
}

/// The part of a transfer's CPU time charged to each of its two ends when
/// the ends are not measured apart (tasks on threads): a task produces
/// half of the tensors it moves and consumes the other half (module
/// comment), so each end spends the mean of the producer's and the
/// consumer's CPU, half of the transfer's.
const CPU_SHARE_PER_END: f64 = 0.5;

/// What a step's work costs each task process, measured between
/// processes: one tensor moved at the PS's end and at a worker's end, each
/// the mean over a step's two directions (every variable fetched from the
/// PS, every gradient taken by it: as many of each), with the master's
/// small share split between them; the same for a tensor of one float,
/// what a message costs whatever its size (at most the mean); and one
/// task's `RunGraph` of the empty step, which every task taking part in a
/// step runs; the master's dispatch around worker:0 in a step on it and
/// every PS task, the PS tasks asking it for tensors (traced): to the
/// worker's start, and from the last task's end; and the wall time a one-float push adds to the empty step
/// per transfer, with the transfers of that step's every worker.
#[derive(Clone, Copy, Debug)]
struct TaskEnds {
    ps_s: f64,
    worker_s: f64,
    ps_message_s: f64,
    worker_message_s: f64,
    run_graph_s: f64,
    dispatch_out_s: f64,
    dispatch_back_s: f64,
    small_push_wall_s: f64,
    consumers: usize,
}

impl TaskEnds {
    fn of(f: &flowlab_runtime::ProcessFigures) -> TaskEnds {
        let master = (f.recv_master_cpu_s + f.push_master_cpu_s) / 4.0;
        let ps_s = (f.recv_producer_cpu_s + f.push_consumer_cpu_s) / 2.0 + master;
        let worker_s = (f.recv_consumer_cpu_s + f.push_producer_cpu_s) / 2.0 + master;
        TaskEnds {
            ps_s,
            worker_s,
            ps_message_s: ((f.small_recv_producer_cpu_s + f.small_push_consumer_cpu_s) / 2.0 + master).min(ps_s),
            worker_message_s: ((f.small_recv_consumer_cpu_s + f.small_push_producer_cpu_s) / 2.0 + master).min(worker_s),
            // the empty step runs one on each of two tasks
            run_graph_s: f.step_tasks_cpu_s / 2.0,
            dispatch_out_s: f.dispatch_out_s,
            dispatch_back_s: f.dispatch_back_s,
            small_push_wall_s: f.small_push_wall_s,
            consumers: f.consumers,
        }
    }
}

/// The simulator's inputs for point `p` from the calibrated figures.
#[allow(clippy::too_many_arguments)]
fn predict_inputs(
    p: &DistributedPoint,
    vars: &[(String, usize, usize)],
    needed: usize,
    total: usize,
    compute_s: f64,
    apply_s: f64,
    link: &flowlab_runtime::LoopbackFigures,
    ends: Option<TaskEnds>,
    emulated: Option<flowlab_engine::EmulatedLink>,
    comm: CommFormat,
) -> SimInputs {
    // a worker's step moves every variable out and every gradient back,
    // and its loss to ps:0 when a synchronous step averages several
    let loss_moves = p.strategy == StrategyName::Sync && p.backup == 0 && needed > 1;
    let transfers = 2 * vars.len() + usize::from(loss_moves);
    // CPU times as measured: `core_share` is recorded, not applied (one
    // moment's share swung from 0.36 to 1.0 between the points of one
    // sitting while the runs saw the load of the whole sweep; dividing by
    // it predicted 1 PS + 1 worker up to +112%)
    let per_end_us = link.recv_cpu_s * 1e6 * CPU_SHARE_PER_END;
    // between processes each end is measured, in both directions
    let (ps_end_us, worker_end_us) = ends.map_or((per_end_us, per_end_us), |e| (e.ps_s * 1e6, e.worker_s * 1e6));
    // a message's part of an end, whatever its size (the loss, a control
    // token), and at the PS the rest per byte: a task holding the large
    // variables pays for their bytes (on threads, one figure for both)
    let (ps_message_us, worker_message_us) = ends.map_or((per_end_us, per_end_us), |e| (e.ps_message_s * 1e6, e.worker_message_s * 1e6));
    let bytes_per_param = comm.bytes_for(total as u64) as f64 / total.max(1) as f64;
    let mean_bytes = bytes_per_param * total as f64 / vars.len().max(1) as f64;
    let ps_us_per_byte = (ps_end_us - ps_message_us).max(0.0) / mean_bytes.max(1.0);
    // the calibration's empty step runs one RunGraph on each of two tasks;
    // a synchronous step runs one on every worker and PS task, over the
    // `needed` gradients; an asynchronous worker's (or a backup worker's
    // computation) on it and the PS tasks. Per gradient, each PS task runs
    // `ps_graphs` of them and the computing worker one.
    let ps_graphs = match p.strategy {
        StrategyName::Sync if p.backup == 0 => 1.0 / needed as f64,
        _ => 1.0,
    };
    let run_graphs = 1.0 + p.ps as f64 * ps_graphs;
    // the master's CPU per RunGraph call, and a task's per RunGraph it runs
    // (between processes each is measured; on threads one clock holds
    // both, all charged at the worker's step as the master's)
    let (master_call_us, task_graph_us) = match ends {
        Some(e) => ((link.step_cpu_s / 2.0 - e.run_graph_s).max(0.0) * 1e6, e.run_graph_s * 1e6),
        None => (link.step_cpu_s * 1e6 / 2.0, 0.0),
    };
    let link_latency_us = emulated.map_or(0.0, |l| l.latency_us);
    // the PS applies one update per `needed` gradients (sync) or per
    // gradient (async); the simulator charges a request at each fetch and
    // each push of every gradient: each PS task's share of the update (by
    // the parameters it holds) and its RunGraph of the step, spread over
    // them
    let ps_us_per_mparam = apply_s * 1e6 / total.max(1) as f64 * 1e6 / (2 * needed) as f64 + ps_us_per_byte * bytes_per_param * 1e6;
    let ps_request_us = task_graph_us * ps_graphs / 2.0;
    let runner_us = master_call_us * run_graphs;
    // the master's dispatch: between processes the master is a process of
    // its own, its CPU beside the worker's, and a traced step on worker:0
    // and every PS task (which ask it for tensors) says how long the
    // master's call takes to
    // reach the worker and its answers to come back after the last task
    // ended (the simulator's cores add what the other workers' work costs
    // them); on threads one clock holds both CPUs, charged at the worker,
    // and the rest of the empty step's wall time is a wait before it
    // starts
    let (worker_us, master_cpu_us, dispatch_us, dispatch_wait_us, end_wait_us) = match ends {
        Some(e) => (task_graph_us, runner_us, e.dispatch_out_s * 1e6, 0.0, e.dispatch_back_s * 1e6),
        None => (runner_us + task_graph_us, 0.0, 0.0, (link.step_overhead_s - link.step_cpu_s).max(0.0) * 1e6, 0.0),
    };
    // what a pushed tensor holds the PS for: between processes, of the
    // wall time the calibration's one-float pushes added to the empty
    // step (one round trip for the step, then one tensor after the
    // other), each tensor's share, at most a message's CPU (the PS's
    // executor takes part of that CPU beside its message thread)
    let ps_push_transfer_us = ends.map(|e| {
        let n = (vars.len() * e.consumers).max(1) as f64;
        ((e.small_push_wall_s * 1e6 * n - link.recv_small_s * 1e6) / n).clamp(0.0, ps_message_us)
    });
    let workload = Workload {
        // the PS's memory work is in its measured CPU (`apply_s`, the
        // transfers' CPU), not on top of it
        ps_memory_gbps: Some(0.0),
        variables: vars.iter().map(|v| v.1 as u64).collect(),
        compute_s,
        examples_per_step: (p.batch() / needed) as u64,
        ps_request_us,
        ps_us_per_mparam,
        ps_transfer_us: ps_message_us,
        ps_push_transfer_us,
        // the worker's own RunGraph (and on threads the master's CPU of
        // the step's calls), and the worker's end of its loss transfer
        step_overhead_us: worker_us + (transfers - 2 * vars.len()) as f64 * worker_message_us,
        master_cpu_us,
        dispatch_us,
        // the worker's end of each fetched variable and pushed gradient:
        // it pipelines with the PS's end, which the step waits for
        worker_transfer_us: worker_end_us,
        // the dispatch's waits; and an emulated link delays the tensors of
        // one direction one behind the other, a latency each, where the
        // simulator has 3 (a fetch's request and answer, a push)
        step_wait_us: dispatch_wait_us + transfers.saturating_sub(3) as f64 * link_latency_us,
        step_end_wait_us: end_wait_us,
        // the train op on ps:0 waits for a control token per variable of
        // every other PS task, sent once that task's update ran
        update_tokens: p.ps > 1,
        // and the PS's end of each worker's loss, on ps:0 (the train op
        // averages the losses there)
        first_ps_push_us: if loss_moves { ps_message_us } else { 0.0 },
        // every variable is its own RecvTensor, and a task's one message
        // thread answers the workers' concurrent calls in turn
        fetch_in_turn: true,
        // each gradient leaves as the backward pass makes it (a Send per
        // variable) and its PS task takes it on arrival
        push_per_tensor: true,
        ..Workload::default()
    };
    let loopback_gbps = link.bytes_per_s * 8.0 / 1e9;
    SimInputs {
        workload,
        // the tensors of one direction pipeline through the emulation and
        // the loopback: the slower rate
        gbps: emulated.map_or(loopback_gbps, |l| loopback_gbps.min(l.gbps)),
        // one way: half a loopback round trip, and the emulated link's
        latency_us: link.recv_small_s * 1e6 / 2.0 + link_latency_us,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()).min(u32::MAX as usize) as u32,
        transfers,
        runner_us,
    }
}

/// The runner's CPU clock and each task process's, seconds.
type CpuReading = (f64, Vec<(TaskId, Option<f64>)>);

/// CPU seconds between two readings: the runner's, and per task process
/// running at the end (none on threads: the runner's CPU holds theirs); a
/// restarted task's clock starts again, so it counts from 0; a killed
/// one's is gone.
fn cpu_between(from: &CpuReading, to: &CpuReading) -> (f64, Vec<f64>) {
    let tasks = to
        .1
        .iter()
        .zip(&from.1)
        .filter_map(|(&(_, after), &(_, before))| {
            let (a, b) = (after?, before?);
            Some(if a >= b { a - b } else { a })
        })
        .collect();
    (to.0 - from.0, tasks)
}

fn run_point(p: &DistributedPoint, env: &PointEnv) -> Result<Outcome, String> {
    let emulated = p.link.as_ref().map(LinkParams::check).transpose()?;
    let cfg = p.train_config(env.seed)?;
    let data = builtin_digits().map_err(|e| e.to_string())?;
    // the 784-input MLP takes the digits at MNIST's 28 x 28
    let data = match cfg.model {
        ModelKind::Mlp784 => data.resized_images(8, 28).map_err(|e| e.to_string())?,
        _ => data,
    };
    let shard = p.batch() / p.needed();
    let vars = shard_variables(cfg.model, p.ps);
    let cal = Calibration::measure(p, env, &cfg, &data, shard, &vars)?;
    // injected stragglers: one table of factors (at least 1 each) for the
    // run and the prediction alike
    let factors = match &p.straggler {
        None => None,
        Some(st) => Some(injected_factors(st, p.workers, env.seed).map_err(|e| e.to_string())?),
    };
    let run = MeasuredRun::run(p, env, &cfg, &data, emulated, cal.compute_s, factors.clone())?;
    let predicted = Prediction::of(p, env, &cfg, &vars, shard, &cal, emulated, factors, run.r.report.steps)?;
    Ok(point_outcome(env, &cal, &run, &predicted))
}

/// What the calibration measured in this sitting, before the run.
struct Calibration {
    compute_s: f64,
    apply_s: f64,
    in_process: flowlab_runtime::LoopbackFigures,
    /// Moving the model's tensors and an empty step between task
    /// processes, per process (none when the tasks are threads).
    between: Option<flowlab_runtime::ProcessFigures>,
    /// The figures the prediction takes: between processes where
    /// measured, the loopback rate and latency in process.
    link: flowlab_runtime::LoopbackFigures,
}

impl Calibration {
    fn measure(p: &DistributedPoint, env: &PointEnv, cfg: &TrainConfig, data: &Dataset, shard: usize, vars: &[(String, usize, usize)]) -> Result<Calibration, String> {
        let total: usize = vars.iter().map(|v| v.1).sum();
        let (compute_s, apply_s) = InProcessStep::new(p, cfg, data, shard)?.time(p.calibration_reps)?;
        let grad_bytes = cfg.comm.bytes_for(total as u64) as usize;
        // the rate from at least a megabyte, so that the added time stands
        // well above the jitter of a small RecvTensor
        let in_process = flowlab_runtime::measure_loopback(grad_bytes.max(1 << 20), p.calibration_reps).map_err(|e| format!("calibrating loopback: {e}"))?;
        let floats: Vec<usize> = vars.iter().map(|v| v.1).collect();
        // what the master feeds a worker per step: its shard's inputs and
        // labels (4 bytes each)
        let feed_floats = shard * (data.features + 1);
        let between = flowlab_runtime::measure_task_processes(&env.launcher, &floats, cfg.comm, p.workers, p.ps, feed_floats, p.calibration_reps).map_err(|e| format!("calibrating task processes: {e}"))?;
        let link = match &between {
            Some(f) => flowlab_runtime::LoopbackFigures {
                recv_cpu_s: f.recv_producer_cpu_s + f.recv_consumer_cpu_s + f.recv_master_cpu_s,
                step_cpu_s: f.step_master_cpu_s + f.step_tasks_cpu_s,
                step_overhead_s: f.step_overhead_s,
                ..in_process
            },
            None => in_process,
        };
        Ok(Calibration { compute_s, apply_s, in_process, between, link })
    }
}

/// The real run over a local cluster, and the CPU its processes took.
struct MeasuredRun {
    r: flowlab_runtime::ClusterTrainReport,
    updates: f64,
    /// The runner's and each task's CPU seconds over the whole run ...
    run_runner_cpu: f64,
    run_tasks_cpu: Vec<f64>,
    /// ... and from the first update's end to the last's (the updates
    /// alone, without start-up, registration, the first step's plans or
    /// the evaluation), over `window_updates` updates.
    runner_cpu: f64,
    tasks_cpu: Vec<f64>,
    window_updates: f64,
}

impl MeasuredRun {
    fn run(p: &DistributedPoint, env: &PointEnv, cfg: &TrainConfig, data: &Dataset, emulated: Option<flowlab_engine::EmulatedLink>, compute_s: f64, factors: Option<Vec<Vec<f64>>>) -> Result<MeasuredRun, String> {
        let ck_dir = tempfile::tempdir().map_err(|e| format!("checkpoint folder: {e}"))?;
        let how = ClusterTraining {
            mode: p.mode(),
            backup: p.backup,
            master: MasterOptions { recv_timeout: Duration::from_secs(30), link: emulated, ..Default::default() },
            checkpoint: p.checkpoint_every.map(|every| CheckpointConfig { dir: ck_dir.path().to_path_buf(), every, keep: 2, resume: false }),
            timeline: traced_updates(p, cfg, data),
            stragglers: factors.map(|factors| Stragglers { factors, compute: Duration::from_secs_f64(compute_s) }),
            eval_every: None,
        };
        let cluster = LocalCluster::start_with_link(&env.launcher, p.ps as u32, p.workers as u32, emulated).map_err(|e| e.to_string())?;
        let spec = cluster.spec.clone();
        let cpu_now = |c: &LocalCluster| (flowlab_runtime::process_cpu_s(), c.task_cpu_s());
        let run_start = cpu_now(&cluster);
        let cluster = Mutex::new(cluster);
        let lock = || cluster.lock().unwrap_or_else(|e| e.into_inner());
        // the CPU clocks after the first update and after the last: the
        // updates alone, without start-up, registration, the first step's
        // plans or the evaluation
        let (first, last) = (OnceLock::<CpuReading>::new(), OnceLock::<CpuReading>::new());
        let kill = p.kill_at()?;
        // once: a restarted run replays the updates after its checkpoint
        let killed = std::sync::atomic::AtomicBool::new(false);
        let on_step = |steps: usize| {
            if steps == 1 {
                // once: a restart from update 0 counts its first update again
                first.get_or_init(|| cpu_now(&lock()));
            }
            if let Some((task, at)) = kill
                && steps == at
                && !killed.swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                lock().kill_task(task);
            }
        };
        let restart = |task: TaskId| lock().restart_task(task);
        let steps_done = || {
            last.get_or_init(|| cpu_now(&lock()));
        };
        let r = train_on_cluster_with(data, cfg, &spec, &how, &Hooks { on_step: &on_step, restart: Some(&restart), steps_done: Some(&steps_done) }).map_err(|e| {
            let exited = lock().exited();
            format!("training over the local cluster: {e}{}", exited.iter().map(|x| format!("; {x}")).collect::<String>())
        })?;
        let run_end = cpu_now(&lock());
        drop(cluster);
        let updates = r.report.steps.max(1) as f64;
        let (run_runner_cpu, run_tasks_cpu) = cpu_between(&run_start, &run_end);
        let (runner_cpu, tasks_cpu, window_updates) = match (first.get(), last.get()) {
            (Some(first), Some(last)) if r.report.steps > 1 => {
                let (runner, tasks) = cpu_between(first, last);
                (runner, tasks, (r.report.steps - 1) as f64)
            }
            _ => (run_runner_cpu, run_tasks_cpu.clone(), updates),
        };
        Ok(MeasuredRun { r, updates, run_runner_cpu, run_tasks_cpu, runner_cpu, tasks_cpu, window_updates })
    }
}

/// The cluster simulator's prediction of the run, and the CPU its inputs
/// charge per update.
struct Prediction {
    model: SimInputs,
    sim: flowlab_sim::cluster::ClusterReport,
    step_s: f64,
    steps_per_s: f64,
    /// Every task (PS tasks, then workers) and the runner, per update.
    task_cpu: Vec<f64>,
    runner_cpu: f64,
    cpu_us: f64,
}

impl Prediction {
    #[allow(clippy::too_many_arguments)]
    fn of(p: &DistributedPoint, env: &PointEnv, cfg: &TrainConfig, vars: &[(String, usize, usize)], shard: usize, cal: &Calibration, emulated: Option<flowlab_engine::EmulatedLink>, factors: Option<Vec<Vec<f64>>>, steps: usize) -> Result<Prediction, String> {
        let needed = p.needed();
        let total: usize = vars.iter().map(|v| v.1).sum();
        // the prediction (module comment: what the runtime does and how each
        // part is given to the simulator)
        let model = predict_inputs(p, vars, needed, total, cal.compute_s, cal.apply_s, &cal.link, cal.between.as_ref().map(TaskEnds::of), emulated, cfg.comm);
        // the simulator's `workers` are the gradients a synchronous step needs
        // (backups on top), or every asynchronous worker; its step commits
        // that many gradients
        let sim_workers = match p.strategy {
            StrategyName::Sync => needed,
            StrategyName::Async => p.workers,
        };
        let sim_cfg = ClusterConfig {
            model: ModelRef::Inline(model.workload.clone()),
            workers: sim_workers as u32,
            ps: p.ps as u32,
            strategy: match p.strategy {
                StrategyName::Sync => Strategy::Sync { backup: p.backup as u32 },
                StrategyName::Async => Strategy::Async {},
            },
            network: NetworkConfig {
                topology: TopologyKind::Mesh,
                link_gbps: Some(model.gbps),
                latency_us: Some(model.latency_us),
                ..NetworkConfig::default()
            },
            host_cores: Some(model.cores),
            comm: cfg.comm,
            straggler: factors.map_or(Straggler::None, |f| Straggler::Trace { file: None, factors: Some(f), pooled: false }),
            steps: ((steps / sim_workers) as u64).clamp(1, 2000),
            ..ClusterConfig::default()
        };
        sim_cfg.validate().map_err(|e| format!("the simulator's configuration: {e}"))?;
        let sim = simulate(&sim_cfg, env.seed).map_err(|e| format!("the cluster simulator: {e}"))?;
        let predicted = sim.step_percentile(0.5);
        let gradients = sim.examples_committed as f64 / shard as f64;
        let predicted_steps_per_s = if sim.sim_time_s > 0.0 { gradients / needed as f64 / sim.sim_time_s } else { 0.0 };
        // the CPU the simulator's inputs charge per update, per process: each
        // PS task (its requests, on ps:0 the losses, the update tokens at both
        // ends), each worker (its own part of the step overhead, its compute,
        // its end of every tensor; a worker computes `computing / workers`
        // gradients an update) and the master (its part of the overhead)
        let w = &model.workload;
        let (mut tensors, mut params) = (vec![0usize; p.ps], vec![0usize; p.ps]);
        for v in vars {
            tensors[v.2] += 1;
            params[v.2] += v.1;
        }
        let computing = match p.strategy {
            StrategyName::Sync => p.workers,
            StrategyName::Async => 1,
        } as f64;
        let tokens: usize = tensors.iter().skip(1).sum();
        let predicted_ps_cpu = tensors.iter().zip(&params).enumerate().map(|(k, (&t, &n))| {
            // a fetch and a push of every gradient
            let requests = if t > 0 { computing * (w.ps_request_cpu_us(t as u64, n as u64) + w.ps_push_cpu_us(t as u64, n as u64)) } else { 0.0 };
            let (losses, tokens) = match k {
                0 => (computing * w.first_ps_push_us, tokens),
                _ => (0.0, if w.update_tokens { t } else { 0 }),
            };
            requests + losses + tokens as f64 * w.ps_transfer_us
        });
        // the step overhead holds the master's CPU on threads only
        let worker_overhead_us = w.step_overhead_us - (model.runner_us - w.master_cpu_us);
        let worker_gradient_us = worker_overhead_us + w.compute_s * 1e6 + w.worker_transfer_us * 2.0 * vars.len() as f64;
        let predicted_worker_cpu = worker_gradient_us * computing / p.workers as f64;
        let predicted_task_cpu: Vec<f64> = predicted_ps_cpu.chain(std::iter::repeat_n(predicted_worker_cpu, p.workers)).collect();
        let predicted_runner_cpu = model.runner_us * computing;
        let predicted_cpu_us = predicted_task_cpu.iter().sum::<f64>() + predicted_runner_cpu;
        let task_cpu = if cal.between.is_some() { predicted_task_cpu } else { Vec::new() };
        Ok(Prediction { model, sim, step_s: predicted, steps_per_s: predicted_steps_per_s, task_cpu, runner_cpu: predicted_runner_cpu, cpu_us: predicted_cpu_us })
    }
}

/// The row: measured, predicted, their error, every calibrated figure and
/// simulator input, the CPU per update both ways, and the step's phases.
fn point_outcome(env: &PointEnv, cal: &Calibration, run: &MeasuredRun, pred: &Prediction) -> Outcome {
    let (r, link, in_process, between, model, sim) = (&run.r, &cal.link, &cal.in_process, &cal.between, &pred.model, &pred.sim);
    let (measured, predicted) = (r.step_p50_s, pred.step_s);
    let (compute_s, apply_s) = (cal.compute_s, cal.apply_s);
    let (runner_cpu, tasks_cpu, window_updates) = (run.runner_cpu, &run.tasks_cpu, run.window_updates);
    let (run_runner_cpu, run_tasks_cpu, updates) = (run.run_runner_cpu, &run.run_tasks_cpu, run.updates);
    let error = (predicted - measured) / measured;

    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: f64| {
        m.insert(k.to_string(), v);
    };
    put("measured_step_s", measured);
    put("measured_p10_s", r.step_p10_s);
    put("measured_p90_s", r.step_p90_s);
    put("predicted_step_s", predicted);
    put("error", error);
    put("abs_error", error.abs());
    put("steps_per_s", r.steps_per_second);
    put("predicted_steps_per_s", pred.steps_per_s);
    put("steps", r.report.steps as f64);
    put("accuracy", r.report.accuracy);
    put("loss", r.report.loss);
    put("transfers_per_step", r.transfers_per_step);
    put("bytes_per_step", r.bytes_per_step);
    put("master_bytes_per_step", r.master_bytes_per_step);
    put("dropped_gradients", r.dropped_gradients as f64);
    put("failed_workers", r.failed_workers.len() as f64);
    put("restarts", r.restarts as f64);
    put("steps_lost", r.steps_lost as f64);
    put("calibrated_compute_s", compute_s);
    put("calibrated_apply_s", apply_s);
    put("calibrated_latency_us", link.recv_small_s * 1e6 / 2.0);
    put("calibrated_link_gbps", link.bytes_per_s * 8.0 / 1e9);
    put("calibrated_step_overhead_us", link.step_overhead_s * 1e6);
    put("calibrated_recv_cpu_us", link.recv_cpu_s * 1e6);
    put("calibrated_step_cpu_us", link.step_cpu_s * 1e6);
    put("calibrated_core_share", link.core_share);
    put("calibrated_between_processes", if between.is_some() { 1.0 } else { 0.0 });
    put("calibrated_in_process_recv_cpu_us", in_process.recv_cpu_s * 1e6);
    put("calibrated_in_process_step_cpu_us", in_process.step_cpu_s * 1e6);
    if let Some(f) = &between {
        put("calibrated_recv_producer_cpu_us", f.recv_producer_cpu_s * 1e6);
        put("calibrated_recv_consumer_cpu_us", f.recv_consumer_cpu_s * 1e6);
        put("calibrated_push_producer_cpu_us", f.push_producer_cpu_s * 1e6);
        put("calibrated_push_consumer_cpu_us", f.push_consumer_cpu_s * 1e6);
        put("calibrated_push_cpu_us", (f.push_producer_cpu_s + f.push_consumer_cpu_s + f.push_master_cpu_s) * 1e6);
        put("calibrated_small_recv_producer_cpu_us", f.small_recv_producer_cpu_s * 1e6);
        put("calibrated_small_recv_consumer_cpu_us", f.small_recv_consumer_cpu_s * 1e6);
        put("calibrated_small_push_producer_cpu_us", f.small_push_producer_cpu_s * 1e6);
        put("calibrated_small_push_consumer_cpu_us", f.small_push_consumer_cpu_s * 1e6);
        put("calibrated_small_recv_wall_us", f.small_recv_wall_s * 1e6);
        put("calibrated_small_push_wall_us", f.small_push_wall_s * 1e6);
        put("calibrated_step_master_cpu_us", f.step_master_cpu_s * 1e6);
        put("calibrated_step_tasks_cpu_us", f.step_tasks_cpu_s * 1e6);
        put("calibrated_all_tasks_step_us", f.all_tasks_step_s * 1e6);
        put("calibrated_dispatch_out_us", f.dispatch_out_s * 1e6);
        put("calibrated_dispatch_back_us", f.dispatch_back_s * 1e6);
        put("calibrated_consumers", f.consumers as f64);
    }
    put("host_cores", f64::from(model.cores));
    put("sim_link_gbps", model.gbps);
    put("sim_latency_us", model.latency_us);
    put("sim_ps_transfer_us", model.workload.ps_transfer_us);
    put("sim_ps_push_transfer_us", model.workload.ps_push_transfer_us.unwrap_or(model.workload.ps_transfer_us));
    put("sim_ps_us_per_mparam", model.workload.ps_us_per_mparam);
    put("sim_worker_transfer_us", model.workload.worker_transfer_us);
    put("sim_step_overhead_us", model.workload.step_overhead_us);
    put("sim_step_wait_us", model.workload.step_wait_us);
    put("sim_step_end_wait_us", model.workload.step_end_wait_us);
    put("sim_dispatch_us", model.workload.dispatch_us);
    put("sim_master_cpu_us", model.workload.master_cpu_us);
    put("serial_transfers", model.transfers as f64);
    put("processes", if env.launcher.processes() { 1.0 } else { 0.0 });
    put("measured_cpu_per_update_us", (runner_cpu + tasks_cpu.iter().sum::<f64>()) * 1e6 / window_updates);
    put("measured_runner_cpu_per_update_us", runner_cpu * 1e6 / window_updates);
    put("predicted_runner_cpu_per_update_us", pred.runner_cpu);
    put("measured_run_cpu_per_update_us", (run_runner_cpu + run_tasks_cpu.iter().sum::<f64>()) * 1e6 / updates);
    put("predicted_cpu_per_update_us", pred.cpu_us);
    // where a step's time goes, phase by phase, on both sides
    let measured_phases = r.timeline.as_deref().map(step_phases).unwrap_or_default();
    if !measured_phases.is_empty() && !sim.worker0_phases_s.is_empty() {
        let median = |v: Vec<f64>| flowlab_runtime::percentile(&v, 0.5);
        for (i, name) in ["dispatch_out", "fetch", "compute", "rest", "dispatch_back"].into_iter().enumerate() {
            let v: Vec<f64> = measured_phases.iter().map(|p| p[i]).collect();
            if v.iter().all(|x| x.is_finite()) {
                put(&format!("measured_{name}_s"), median(v));
            }
        }
        if measured_phases.iter().all(|p| p[0].is_finite() && p[4].is_finite()) {
            put("measured_dispatch_s", median(measured_phases.iter().map(|p| p[0] + p[4]).collect()));
        }
        for (i, name) in ["dispatch", "fetch", "compute", "rest"].into_iter().enumerate() {
            put(&format!("predicted_{name}_s"), median(sim.worker0_phases_s.iter().map(|p| p[i]).collect()));
        }
        put("measured_span_s", median(measured_phases.iter().map(|p| p[1] + p[2] + p[3]).collect()));
        put("traced_updates", measured_phases.len() as f64);
    }
    let mut series = BTreeMap::new();
    series.insert("measured_step_times_s".to_string(), r.step_times_s.clone());
    // ps:0.., then worker:0.., of those running at the end (empty when
    // the tasks are threads)
    series.insert("task_cpu_per_update_us".to_string(), tasks_cpu.iter().map(|c| c * 1e6 / window_updates).collect());
    // every task, in the same order: what the simulator's inputs charge it
    // (with task processes, whose figures are measured per process)
    series.insert("predicted_task_cpu_per_update_us".to_string(), pred.task_cpu.clone());
    Outcome { metrics: m, series }
}

/// Updates traced for the phase comparison: 5 in the middle of the run
/// (sync without backups, async; a backup-worker update spans several
/// steps and is not traced). A traced update's round takes about 10%
/// longer (0.93-1.22x over 18 points, docs/logs/distributed-prediction.md);
/// 5 of a run's 90 or more updates barely move its median.
const TRACED: usize = 5;

fn traced_updates(p: &DistributedPoint, cfg: &flowlab_programs::train::TrainConfig, data: &flowlab_programs::datasets::Dataset) -> Option<(usize, usize)> {
    if p.backup > 0 || p.kill.is_some() {
        return None;
    }
    let mut c = cfg.clone();
    c.devices = match p.strategy {
        StrategyName::Sync => p.needed(),
        StrategyName::Async => 1,
    };
    let total = flowlab_runtime::planned_updates(data, &c);
    (total >= 2 * TRACED).then(|| (total / 2, total / 2 + TRACED - 1))
}

/// Each traced step's phases, in seconds, from the processes' own clocks:
/// the master's dispatch until the step's first worker (the lowest worker
/// task in it: worker:0 in sync; the simulator's worker sends its fetches
/// then) starts; from then until it has its last variable, until its last
/// kernel but a Send or Recv ends (its backward pass: a Send of a large
/// gradient holds the executor's thread while the tensor leaves, which is
/// the push), and until the last task's end of the step; then the master's
/// until its last answer is in. The master's two are NaN without its part
/// ([`flowlab_runtime::MASTER_DEVICE`]).
fn step_phases(parts: &[flowlab_engine::PartitionTimeline]) -> Vec<[f64; 5]> {
    let mut out = Vec::new();
    for step in flowlab_runtime::traced_steps(parts) {
        let w = step.worker;
        // on the worker's clock: its step starts at 0
        let fetched = w.received.iter().map(|e| e.at_us).fold(f64::NAN, f64::max);
        let computed = w.stats.nodes.iter().filter(|n| n.op != "Send" && n.op != "Recv").map(|n| n.end_us).fold(f64::NAN, f64::max);
        let end = step.tasks_end_unix_us - w.start_unix_us;
        let (out_s, back_s) = step.dispatch_s();
        if fetched.is_finite() && computed.is_finite() && end.is_finite() {
            out.push([out_s, fetched * 1e-6, (computed - fetched) * 1e-6, (end - computed) * 1e-6, back_s]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::Kind;
    use flowlab_runtime::Launcher;

    /// Metrics only a point whose tasks are processes has: the calibration
    /// between task processes (`measure_task_processes`).
    const PROCESS_METRICS: &[&str] = &[
        "calibrated_recv_producer_cpu_us",
        "calibrated_recv_consumer_cpu_us",
        "calibrated_push_producer_cpu_us",
        "calibrated_push_consumer_cpu_us",
        "calibrated_push_cpu_us",
        "calibrated_small_recv_producer_cpu_us",
        "calibrated_small_recv_consumer_cpu_us",
        "calibrated_small_push_producer_cpu_us",
        "calibrated_small_push_consumer_cpu_us",
        "calibrated_small_recv_wall_us",
        "calibrated_small_push_wall_us",
        "calibrated_step_master_cpu_us",
        "calibrated_step_tasks_cpu_us",
        "calibrated_all_tasks_step_us",
        "calibrated_dispatch_out_us",
        "calibrated_dispatch_back_us",
        "calibrated_consumers",
    ];

    fn point(yaml: &str) -> Result<Box<dyn crate::kinds::Runnable>, String> {
        let v: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
        DISTRIBUTED.prepare(&v).map_err(|e| e.message().to_string())
    }

    /// One step of ps:0, worker:10 and worker:2 by hand: worker:2 (the
    /// lowest worker, not worker:10, which sorts first as text) starts at
    /// 1,200 us on the wall clock and has its last variable 300 us later,
    /// ends its last kernel but a Send at 700 (its Send after that does not
    /// count); the last task ends at 1,100 + 2,400 = 3,500, 2,300 after
    /// worker:2 started. Phases 300, 400 and 1,600 us (ps:0's earlier start
    /// is in none); the master, from 900 to 3,600, dispatched for 300 us
    /// before worker:2 started and 100 after the last task ended; without
    /// its part those two are NaN; a step without a worker has none.
    #[test]
    fn a_traced_steps_phases_are_its_first_workers() {
        use flowlab_engine::{NodeStats, PartitionTimeline, StepStats, TransferEnd};
        let part = |device: &str, start: f64, total: f64, received: &[f64], ends: &[(&str, f64)]| {
            let end = |at_us: f64| TransferEnd { edge: "e:0".into(), send_device: String::new(), recv_device: String::new(), format: "f32".into(), bytes: 0, at_us };
            PartitionTimeline {
                step_id: 3,
                device: device.into(),
                start_unix_us: start,
                stats: StepStats {
                    nodes: ends
                        .iter()
                        .map(|&(op, end_us)| NodeStats { node: "n".into(), op: op.into(), start_us: 0.0, end_us, thread: 0, output_bytes: 0, device: device.into() })
                        .collect(),
                    total_us: total,
                    ..Default::default()
                },
                sent: Vec::new(),
                received: received.iter().copied().map(end).collect(),
            }
        };
        let parts = [
            part("/job:ps/replica:0/task:0/device:CPU:0", 1_000.0, 1_500.0, &[], &[("Send", 10.0)]),
            part("/job:worker/replica:0/task:10/device:CPU:0", 1_100.0, 2_400.0, &[50.0], &[("MatMul", 60.0)]),
            part("/job:worker/replica:0/task:2/device:CPU:0", 1_200.0, 900.0, &[100.0, 300.0], &[("Recv", 300.0), ("MatMul", 650.0), ("BiasAddGrad", 700.0), ("Send", 880.0)]),
        ];
        let phases = step_phases(&parts);
        assert_eq!(phases.len(), 1);
        assert!(phases[0][0].is_nan() && phases[0][4].is_nan(), "{phases:?}");
        let want = [300e-6, 400e-6, 1_600e-6];
        assert!(phases[0][1..4].iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12), "{phases:?}");
        assert!(step_phases(&parts[..1]).is_empty());
        let mut with_master = parts.to_vec();
        with_master.push(part(flowlab_runtime::MASTER_DEVICE, 900.0, 2_700.0, &[], &[("RunGraph", 2_700.0)]));
        let phases = step_phases(&with_master);
        let want = [300e-6, 300e-6, 400e-6, 1_600e-6, 100e-6];
        assert!(phases[0].iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12), "{phases:?}");
    }

    #[test]
    fn bad_points_name_the_parameter() {
        for (yaml, want) in [
            ("model: resnet", "`model`: `resnet` is not a digits model"),
            ("workers: 0", "`workers`: must be between 1 and 32"),
            ("workers: 2\nbackup: 2", "`backup`"),
            ("strategy: async\nbackup: 1\nworkers: 3", "need strategy sync"),
            ("comm: f8", "`comm`"),
            ("workers: 3\nbatch: 32", "multiple of the 3 gradients"),
            ("kill: worker:3@5\nworkers: 2", "the cluster has 2 worker tasks"),
            ("kill: worker:1", "TASK@STEP"),
            ("kill: ps:0@0", "updates count from 1"),
            ("batch: 100000000000", "`batch`: at most the 1438 examples the digits set trains on, got 100000000000"),
            ("workers: 33", "`workers`: must be between 1 and 32, got 33"),
            ("strategy: async\nkill: worker:0@3", "only a ps task may be killed"),
            ("link: { gbps: 0, latency_us: 5 }", "`link.gbps`: must be a bandwidth from 1e-6 to 1e6 Gbit/s, got 0"),
            ("link: { gbps: 1, latency_us: 1e300 }", "`link.latency_us`: must be from 0 to 1e7 us (10 s), got 1e300"),
            ("link: { gbps: 1, latency_us: -1 }", "`link.latency_us`"),
            ("link: { gbps: 1, latency: 5 }", "latency"),
        ] {
            let e = point(yaml).err().unwrap_or_else(|| panic!("{yaml} was accepted"));
            assert!(e.contains(want), "{yaml}: {e}");
        }
        let e = point("wokers: 2").err().unwrap();
        assert!(e.contains("wokers"), "{e}");
    }

    /// Without `batch`, 32 rounded up to the gradients an update averages:
    /// 3 of 4 workers with a backup take 33 (32 given is refused above).
    #[test]
    fn the_default_batch_splits_over_the_gradients_an_update_needs() {
        let batch = |yaml: &str| serde_saphyr::from_str::<DistributedPoint>(yaml).unwrap().batch();
        assert_eq!(batch("workers: 4\nbackup: 1"), 33);
        assert_eq!(batch("workers: 4"), 32);
        assert_eq!(batch("workers: 4\nstrategy: async"), 32);
        assert_eq!(batch("workers: 3\nbatch: 30"), 30);
        assert!(point("workers: 4\nbackup: 1").is_ok());
        assert!(point("workers: 3").is_ok());
    }

    /// A real cluster (tasks on threads here) against its analytic traffic,
    /// the in-process accuracy, and a prediction with its error.
    #[test]
    fn a_point_measures_the_cluster_and_predicts_it() {
        let run = point("workers: 2\nps: 2\nepochs: 1\ncalibration_reps: 2").unwrap();
        let o = run.run(&PointEnv { seed: 1, launcher: Launcher::Threads }).unwrap();
        let m = &o.metrics;
        // every metric but the per-process calibration, which tasks on
        // threads cannot have (the e2e test checks those)
        for k in METRICS.iter().filter(|k| !PROCESS_METRICS.contains(k)) {
            assert!(m.get(*k).is_some_and(|v| v.is_finite()), "{k}: {m:?}");
        }
        assert!(PROCESS_METRICS.iter().all(|k| !m.contains_key(*k)), "{m:?}");
        assert_eq!(m["calibrated_between_processes"], 0.0);
        // each end of a transfer is charged half of its calibrated CPU
        assert_eq!(m["sim_worker_transfer_us"], m["sim_ps_transfer_us"]);
        assert!((m["sim_ps_transfer_us"] - m["calibrated_recv_cpu_us"] / 2.0).abs() < 1e-9 * m["calibrated_recv_cpu_us"], "{m:?}");
        // one epoch of batches of 32 from the 1,438 training examples
        assert_eq!(m["steps"], 45.0);
        assert!(m["accuracy"] > 0.8, "{m:?}");
        // each of the 2 workers fetches the 9,610 parameters and sends as
        // many gradients, and its loss; 3 control tokens from ps:1 (4 bytes)
        assert_eq!(m["bytes_per_step"], 2.0 * (2.0 * 4.0 * 9610.0 + 4.0) + 12.0, "{m:?}");
        assert_eq!(m["error"], (m["predicted_step_s"] - m["measured_step_s"]) / m["measured_step_s"]);
        assert!(m["predicted_step_s"] > m["calibrated_compute_s"], "{m:?}");
        assert!(m["measured_p10_s"] <= m["measured_step_s"] && m["measured_step_s"] <= m["measured_p90_s"], "{m:?}");
        assert_eq!(m["processes"], 0.0);
        // tasks on threads: their CPU is the runner's, no per-task clock
        assert_eq!(m["measured_cpu_per_update_us"], m["measured_runner_cpu_per_update_us"]);
        assert!(o.series["task_cpu_per_update_us"].is_empty() && o.series["predicted_task_cpu_per_update_us"].is_empty());
        // the updates' window lies inside the run
        assert!(m["measured_run_cpu_per_update_us"] * m["steps"] >= m["measured_cpu_per_update_us"] * (m["steps"] - 1.0), "{m:?}");
        assert_eq!(o.series["measured_step_times_s"].len(), 45);
        // an emulated slow link: every task delays its tensors, so the
        // measured step holds the closed form (8 serial transfers of 1 PS
        // + 1 worker, 76,880 bytes), and the simulator gets the link in
        // series with the loopback
        let run = point("link: { gbps: 0.1, latency_us: 100 }\nepochs: 1\ncalibration_reps: 2").unwrap();
        let m = run.run(&PointEnv { seed: 1, launcher: Launcher::Threads }).unwrap().metrics;
        assert_eq!(m["bytes_per_step"], 2.0 * 4.0 * 9610.0, "{m:?}");
        let closed = 8.0 * 100e-6 + m["bytes_per_step"] * 8.0 / 0.1e9;
        assert!(m["measured_p10_s"] >= closed, "{m:?}");
        let want_gbps = m["calibrated_link_gbps"].min(0.1);
        assert!((m["sim_link_gbps"] - want_gbps).abs() < 1e-12 && m["sim_latency_us"] == m["calibrated_latency_us"] + 100.0, "{m:?}");
        // the simulator's step holds the same closed form, and the
        // bandwidth-dominated point is predicted within a quarter
        assert!(m["predicted_step_s"] >= closed && m["abs_error"] < 0.25, "{m:?}");
        // a worker killed with a backup: training goes on without it
        let run = point("workers: 3\nbackup: 1\nepochs: 1\ncalibration_reps: 1\nkill: worker:2@10").unwrap();
        let m = run.run(&PointEnv { seed: 1, launcher: Launcher::Threads }).unwrap().metrics;
        assert_eq!(m["failed_workers"], 1.0, "{m:?}");
        assert!(m["steps"] > 10.0, "{m:?}");
        // asynchronous workers, the PS killed after global update 15 and
        // restarted once from the checkpoint of update 10 (or 11: the other
        // worker's update in flight when the chief closed the gate); the
        // run still applies every batch of the epoch once
        let run = point("strategy: async\nworkers: 2\nepochs: 1\ncalibration_reps: 1\nkill: ps:0@15\ncheckpoint_every: 10").unwrap();
        let m = run.run(&PointEnv { seed: 1, launcher: Launcher::Threads }).unwrap().metrics;
        assert_eq!((m["restarts"], m["steps"]), (1.0, 45.0), "{m:?}");
        assert!((4.0..=6.0).contains(&m["steps_lost"]), "{m:?}");
    }

    fn typed(yaml: &str) -> DistributedPoint {
        serde_saphyr::from_str(yaml).unwrap()
    }

    /// The calibration's update is the PS's: every needed gradient averaged
    /// (N - 1 adds and a scale per variable; a mask multiply per worker
    /// with backups) and one Adam per variable, and none of a replica's
    /// pass (no MatMul) runs in it.
    #[test]
    fn the_calibrated_update_runs_the_average_of_the_points_strategy() {
        let data = builtin_digits().unwrap();
        // the mlp's 2 layers: 4 variables; counted over what one gradient's
        // update (workers: 1) runs, Adam's own arithmetic
        let mut base = None;
        for (yaml, adds, muls) in [
            ("workers: 1", 0, 0),
            ("workers: 3", 2 * 4, 4),
            ("workers: 3\nbackup: 1", 2 * 4, 3 * 4 + 4),
            ("workers: 3\nstrategy: async", 0, 0),
        ] {
            let p = typed(yaml);
            let cfg = p.train_config(1).unwrap();
            let step = InProcessStep::new(&p, &cfg, &data, p.batch() / p.needed()).unwrap();
            let (feeds, target) = &step.update;
            let fed: Vec<(&Output, &Tensor)> = feeds.iter().map(|(o, t)| (o, t)).collect();
            let (_, stats) = step.sess.run_traced(&fed, &[], &[target]).unwrap();
            let count = |op: &str| stats.nodes.iter().filter(|n| n.op == op).count();
            let (add0, mul0) = *base.get_or_insert((count("Add"), count("Mul")));
            assert_eq!((count("Add") - add0, count("Mul") - mul0, count("ApplyAdam"), count("MatMul")), (adds, muls, 4, 0), "{yaml}");
            // the compute is a replica's pass and no update
            let (feeds, target) = &step.compute;
            let fed: Vec<(&Output, &Tensor)> = feeds.iter().map(|(o, t)| (o, t)).collect();
            let (_, stats) = step.sess.run_traced(&fed, &[], &[target]).unwrap();
            assert!(stats.nodes.iter().any(|n| n.op == "MatMul") && !stats.nodes.iter().any(|n| n.op == "ApplyAdam"), "{yaml}");
        }
    }

    /// Feeding one replica's gradients as every replica's gives the update
    /// that the whole synchronous step makes when every replica reads the
    /// same batch, bit for bit.
    #[test]
    fn the_fed_update_is_the_synchronous_steps_update() {
        let data = builtin_digits().unwrap();
        let p = typed("workers: 2");
        let cfg = p.train_config(1).unwrap();
        let shard = p.batch() / 2;
        let step = InProcessStep::new(&p, &cfg, &data, shard).unwrap();
        let (feeds, target) = &step.update;
        // every replica's gradients in storage of their own (the PS
        // averages distinct buffers), with the same values
        let half = feeds.len() / 2;
        assert!(half > 0 && feeds.len() == 2 * half, "{}", feeds.len());
        for (a, b) in feeds[..half].iter().zip(&feeds[half..]) {
            assert!(!a.1.shares_storage_with(&b.1), "{:?}", a.0);
            assert_eq!(a.1.as_slice::<f32>().unwrap(), b.1.as_slice::<f32>().unwrap());
        }
        let fed: Vec<(&Output, &Tensor)> = feeds.iter().map(|(o, t)| (o, t)).collect();
        step.sess.run(&fed, &[], &[target]).unwrap();

        let g = Graph::new();
        let dev = local_cpu(0);
        let sg = build_sharded(&g, &cfg, data.features, std::slice::from_ref(&dev), &[dev.clone(), dev.clone()]).unwrap();
        let sess = Session::with_options(&g, SessionOptions { devices: DeviceSet::local_cpus(1), ..Default::default() }).unwrap();
        sess.run(&[], &[], &[&sg.init]).unwrap();
        let (x, y) = batch_tensors(&data, &(0..shard).collect::<Vec<_>>()).unwrap();
        sess.run(&[(&sg.xs[0], &x), (&sg.ys[0], &y), (&sg.xs[1], &x), (&sg.ys[1], &y)], &[], &[&sg.train_op]).unwrap();

        let names: Vec<String> = g.variables().iter().map(|v| v.name()).collect();
        let fetch: Vec<&str> = names.iter().map(String::as_str).collect();
        let (a, b) = (step.sess.run_named(&[], &fetch, &[]).unwrap(), sess.run_named(&[], &fetch, &[]).unwrap());
        assert!(names.len() > 4, "{names:?}");
        for ((n, a), b) in names.iter().zip(&a).zip(&b) {
            assert_eq!(a.as_slice::<f32>().unwrap(), b.as_slice::<f32>().unwrap(), "{n}");
        }
    }
}

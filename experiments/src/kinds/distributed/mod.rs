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
//! - calibrated just before the run: `compute_s`, the time
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
//!     run. `core_share` says how disturbed the host was; it is not
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
use parking_lot::Mutex;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use flowlab_engine::{DeviceSet, Graph, Output, Session, SessionOptions, Tensor};
use flowlab_hw::CommFormat;
use flowlab_programs::datasets::{Dataset, builtin_digits};
use flowlab_programs::train::{CheckpointConfig, ModelKind, TrainConfig, batch_tensors, build_async, build_backup, build_sharded, local_cpu, shard_variables, split_holdout};
use flowlab_programs::cluster::{ClusterTraining, Hooks, Mode, Stragglers, train_on_cluster_with};
use flowlab_runtime::{Job, LocalCluster, MasterOptions, TaskId};
use flowlab_sim::cluster::{ClusterConfig, ModelRef, NetworkConfig, Straggler, Strategy, TopologyKind, Workload, factor_table, injected_factors, simulate};

use super::validate::LinkParams;
use super::{Outcome, PointEnv, TypedKind};

mod calibration;
mod run;
use calibration::*;
use run::*;

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

/// A point's metrics in the order of its table: these, then
/// [`PROCESS_METRICS`], then [`LATER_METRICS`].
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
];

/// The metrics only a point whose tasks are processes has: the
/// calibration between task processes (`measure_task_processes`).
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

const LATER_METRICS: &[&str] = &[
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
    metric_names: || METRICS.iter().chain(PROCESS_METRICS).chain(LATER_METRICS).map(|m| m.to_string()).collect(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::Kind;
    use flowlab_runtime::Launcher;


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
        for k in METRICS.iter().chain(LATER_METRICS) {
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

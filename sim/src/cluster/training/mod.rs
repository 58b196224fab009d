//! The cluster training simulation: workers, PS tasks and synchronous groups
//! as state machines exchanging typed events through one event queue, with
//! the network model as a second source of events (flow arrivals).
//!
//! A worker step: fetch its parameters from every PS task (a request that
//! costs PS CPU time, FIFO per task, while the response streams back),
//! compute, push gradients (a flow per task, then PS CPU time); with the
//! workload's `overlap`, the forward pass runs while the parameters arrive
//! and the gradients stream out during the backward pass (see
//! `Sim::start_forward`). A group's step ends when `need` of its
//! members' gradients have been applied; its members then start the next
//! step together, aborting late ones (their gradients are dropped). Async
//! training is groups of one; sync is one group with backups on top.
//!
//! With `update_tokens`, the PS tasks but the first end their part of an
//! update with control tokens to the first, as the real runtime does (see
//! [`Ev::TokenArrive`]).
//!
//! With `allreduce`, a step is: every worker computes, then the collective
//! runs on the otherwise idle network (with `overlap`, from when the last
//! backward pass starts, ending no earlier than the last one ends).
//!
//! | module | holds |
//! |---|---|
//! | this one | the events, the state machines, a run's set-up and its report |
//! | `events` | the event loop and failures |
//! | `worker` | a worker's step: fetch, compute, push |
//! | `ps` | the PS tasks' CPU and memory work, the softmax on the PS tasks |
//! | `groups` | updates applied, group steps ended, members released |
//! | `allreduce` | all-reduce training |

use crate::cluster::config::{ClusterConfig, Strategy};
use crate::cluster::report::ClusterReport;
use crate::cluster::straggler::StragglerModel;
use crate::cluster::workload::Workload;
use crate::comm::collective;
use crate::comm::ps::PsLayout;
use crate::error::SimError;
use crate::event_queue::EventQueue;
use crate::network::{FlowStart, FlowTag, Network, NetworkModel, Route, Topology};
use crate::rng::point_rng;
use crate::time::SimTime;
use flowlab_hw::CommFormat;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Exp1, StandardNormal};

mod allreduce;
mod events;
mod groups;
mod ps;
mod worker;

use allreduce::run_allreduce;

#[derive(Debug, Clone, Copy)]
enum Ev {
    /// A fetch request reached PS task `ps`.
    FetchArrive { w: u32, ps: u32, epoch: u64 },
    /// A fetched shard whose flow arrived before the PS finished serving it.
    /// `held`: already held once for the work queued with it
    /// (`fetch_in_turn`).
    FetchReady { w: u32, ps: u32, epoch: u64, held: bool },
    /// The worker's compute is done (with `overlap`: its forward pass).
    ComputeDone { w: u32, epoch: u64 },
    /// With `overlap`: a gradient shard whose flow ran ahead of the backward
    /// pass has its last bytes (the backward pass is done).
    PushComplete { w: u32, ps: u32, epoch: u64 },
    /// With `ps_softmax`: PS task `ps` has computed its classes for worker
    /// `w`'s activations; their gradient leaves now.
    SoftmaxServed { w: u32, ps: u32, epoch: u64 },
    /// PS task `ps` applied one pushed gradient shard (with
    /// `push_per_tensor`, one tensor; `whole`: the worker's last there).
    PushServed { w: u32, ps: u32, epoch: u64, whole: bool },
    /// With `push_per_tensor`: the backward pass has made gradient tensor
    /// `i` (of `Sim::push_tensors`), which leaves now.
    PushTensor { w: u32, i: u32, epoch: u64 },
    /// A control token of group `g`'s update (step round `round`) reached the
    /// first PS task (`update_tokens`).
    ///
    /// Why: flowlab's runtime (and TensorFlow's) groups every variable's
    /// update in one train op, placed on `ps:0`, so a step with variables
    /// on two PS tasks ends with `ps:1` telling `ps:0` that its updates
    /// ran. A synchronous step of W workers and 2 PS tasks in
    /// `flowlab_runtime` (`master.rs`, `worker.rs`, `train.rs`), per task:
    /// - master: one `RunGraph` to every worker and PS task at once (the
    ///   workers' shards as feeds), and waits for all of them;
    /// - worker i: a `RecvTensor` to the task holding each variable (the
    ///   fetch; served on that PS task's one message thread, FIFO with the
    ///   other workers'), forward and backward pass, its gradients (and
    ///   loss) left in its rendezvous table;
    /// - PS task k: a `RecvTensor` to every worker per gradient of a
    ///   variable it holds (issued at the step's start, answered when the
    ///   worker's gradient exists), then the average and Adam update of
    ///   each of its variables once all W are in;
    /// - ps:0 also runs the train op, whose control inputs are ps:1's
    ///   updates: one `RecvTensor` per ps:1 variable (a 4-byte token, sent
    ///   once that update ran), CPU on both tasks' message threads; ps:0's
    ///   `RunGraph` (so the step) ends after the last token.
    ///
    /// The simulator's part of it: once PS task k > 0 has served the
    /// group's `need` pushes, it sends one token per tensor it holds, each
    /// `ps_transfer_us` of its CPU (FIFO), the path latency, then
    /// `ps_transfer_us` of the first task's CPU (FIFO).
    TokenArrive { g: u32, round: u64 },
    /// The first PS task has handled one control token of group `g`.
    TokenServed { g: u32, round: u64 },
    /// Group `g`'s step of `round` has reached its master
    /// (`Workload::step_end_wait_us` after its last task's end).
    StepAnswered { g: u32, round: u64 },
    CheckpointDone,
    Failure,
    RecoveryDone,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum TransferKind {
    Fetch,
    Push,
    /// With `ps_softmax`: a worker's activations to a PS task, and their
    /// gradient back.
    Activations,
    ActivationGrads,
}

#[derive(Debug, Clone, Copy)]
struct Transfer {
    w: u32,
    ps: u32,
    epoch: u64,
    kind: TransferKind,
    /// Fetch: when the PS CPU is done with the request.
    ready: SimTime,
    /// With `push_per_tensor`, a push's tensor (of `Sim::push_tensors`);
    /// `u32::MAX` for a whole shard.
    tensor: u32,
}

/// With `push_per_tensor`: one gradient tensor, in the order the backward
/// pass makes them.
#[derive(Debug, Clone, Copy)]
struct PushTensor {
    task: u32,
    bytes: u64,
    /// The backward pass's share done when it is made (its parameters and
    /// those made before it, of all).
    made_at: f64,
    /// The PS's CPU for it on arrival.
    cost: SimTime,
}

struct WorkerState {
    group: u32,
    epoch: u64,
    pending: u32,
    fetched_version: u64,
    /// With `overlap`: when the forward pass would end if every variable
    /// were there, the backward pass's length, and when it ends.
    forward_end: SimTime,
    backward: SimTime,
    backward_end: SimTime,
    /// This step: when its fetches went out (after the step overhead),
    /// when the last parameter shard was in, and when the gradients were
    /// computed (with `overlap`: the backward pass's end).
    started_at: SimTime,
    fetched_at: SimTime,
    computed_at: SimTime,
}

struct GroupState {
    first: u32,
    len: u32,
    need: u32,
    arrivals: u32,
    step_start: SimTime,
    waiting: bool,
    /// Bumped by every release and failure: tokens of an older step are
    /// ignored.
    round: u64,
    /// Per PS task, pushes served in this step (only with `update_tokens`).
    served: Vec<u32>,
    /// Per PS task, this step's gradients that have reached it (each is
    /// aggregated; the `need`-th also runs the update).
    taken: Vec<u32>,
    /// Control tokens of this step the first PS task has still to handle.
    tokens: u32,
    /// When this step's last task ended (its answer then takes
    /// `Sim::end_wait` to reach the master).
    tasks_done: SimTime,
}

struct Sim<'a> {
    cfg: &'a ClusterConfig,
    w: Workload,
    comm: CommFormat,
    q: EventQueue<Ev>,
    net: Network,
    rng: ChaCha8Rng,
    straggler: StragglerModel,
    layout: PsLayout,
    /// The endpoint of each PS task and of each worker (`network.tasks`).
    ps_at: Vec<u32>,
    worker_at: Vec<u32>,
    /// Per (worker, PS task), at `w * tasks + k`: sparse elements the
    /// worker's current step gathers from the task and the bytes it moves
    /// each way.
    sparse: Vec<u64>,
    shard_bytes: Vec<u64>,
    /// Per (worker, PS task), the routes of its push (even index) and its
    /// fetch (odd), looked up once (`route`): past 4,096 endpoints the
    /// fabric's look-up is a hash map's (star, 4,096 workers, 8 steps:
    /// 0.30 s with a look-up per flow, 0.17 s with these).
    routes: Vec<Option<Route>>,
    ps_busy: Vec<SimTime>,
    /// Seconds of PS CPU per pass over one element (0: no memory work)
    /// and the optimizer's passes per update (`Workload::ps_memory_gbps`).
    pass_s: f64,
    update_passes: u32,
    /// With `ps_softmax`: each PS task's CPU per worker step for its
    /// classes (compute and update; empty without), and the bytes of the
    /// activations (and of their gradient).
    softmax_cpu: Vec<SimTime>,
    activation_bytes: u64,
    /// Per PS task, its CPU time per request
    /// (`Workload::ps_request_cpu_us` of what it holds).
    ps_request: Vec<SimTime>,
    /// The same for a push (`Workload::ps_push_cpu_us`).
    ps_push_request: Vec<SimTime>,
    /// With `push_per_tensor`: the gradient tensors, the tensors each
    /// worker has still to push to each task this step, and the task's
    /// per-request CPU charged with the last of them.
    push_tensors: Vec<PushTensor>,
    tensors_left: Vec<u32>,
    ps_graph: SimTime,
    /// Per PS task, the control tokens it sends the first one per update
    /// (`update_tokens`; all zero otherwise), and the CPU each costs at
    /// either end.
    tokens: Vec<u32>,
    token_cpu: SimTime,
    /// The first PS task's extra CPU per push (`first_ps_push_us`).
    first_push: SimTime,
    /// Per PS task, the path latency to the first (`SimTime::MAX` until
    /// first needed).
    token_latency: Vec<SimTime>,
    /// When each core of the shared host is next free (`host_cores`;
    /// empty: every task has its own CPU).
    cores: Vec<SimTime>,
    overhead: SimTime,
    wait: SimTime,
    end_wait: SimTime,
    dispatch: SimTime,
    master_cpu: SimTime,
    /// The worker's CPU per tensor it moves (`worker_transfer_us`; only
    /// with `host_cores`): it holds a core, nothing waits for it.
    worker_transfer: SimTime,
    workers: Vec<WorkerState>,
    groups: Vec<GroupState>,
    transfers: Vec<Transfer>,
    free_transfers: Vec<u32>,
    // Progress, in gradients.
    version: u64,
    applied: u64,
    processed: u64,
    target: u64,
    last_ckpt: u64,
    next_ckpt: u64,
    ckpt_active: bool,
    recovering: bool,
    paused_s: f64,
    failures: u32,
    /// Failures since an update was last applied (see `no_progress`).
    failures_in_a_row: u32,
    step_times: Vec<f64>,
    /// Worker 0's phases of each step it took part in (see
    /// [`ClusterReport::worker0_phases_s`]), and those of the step in
    /// flight once its gradient is applied.
    phases: Vec<[f64; 4]>,
    w0_applied: Option<(SimTime, SimTime, SimTime)>,
    staleness: Vec<u64>,
    events: u64,
    done: Vec<FlowTag>,
}

/// Runs one configuration (already validated) with `seed`.
pub(crate) fn run(cfg: &ClusterConfig, seed: u64) -> Result<ClusterReport, SimError> {
    run_logged(cfg, seed, false).map(|(report, _)| report)
}

/// The same, with every flow the run started when `record` is set.
pub(crate) fn run_logged(cfg: &ClusterConfig, seed: u64, record: bool) -> Result<(ClusterReport, Vec<FlowStart>), SimError> {
    let topo = Topology::build(&cfg.network.shape(cfg.devices())?, cfg.network.main_link()?)?;
    let mut net = Network::new(cfg.network.model, topo);
    if record {
        net.fabric_mut().record_flows();
    }
    let mut rng = point_rng(seed, 0);
    let w = cfg.workload()?;
    let total_workers = cfg.total_workers() as usize;
    let straggler = StragglerModel::new(&cfg.straggler, total_workers, &mut rng)?;
    if let Some(algo) = cfg.allreduce {
        let report = run_allreduce(cfg, w, &mut net, rng, straggler, algo)?;
        return Ok((report, net.fabric_mut().take_flow_log()));
    }
    let ps = cfg.ps as usize;
    let layout = w.layout(ps);
    let (groups, workers) = groups_and_workers(cfg, ps);
    let n = u64::from(cfg.workers);
    let tokens: Vec<u32> = (0..ps)
        .map(|k| if w.update_tokens && k > 0 { layout.tensors[k].min(u64::from(u32::MAX)) as u32 } else { 0 })
        .collect();
    let ps_request = (0..ps)
        .map(|k| SimTime::from_secs_f64(w.ps_request_cpu_us(layout.tensors[k], layout.dense[k]) * 1e-6))
        .collect();
    let ps_push_request = (0..ps)
        .map(|k| SimTime::from_secs_f64(w.ps_push_cpu_us(layout.tensors[k], layout.dense[k]) * 1e-6))
        .collect();
    let push_tensors = push_tensors(cfg, &w, &layout);
    let (ps_at, worker_at) = cfg.network.task_endpoints(ps, workers.len());
    let pass_s = w.ps_seconds_per_element_pass()?;
    let mut sim = Sim {
        cfg,
        ps_at,
        worker_at,
        comm: cfg.comm,
        q: EventQueue::new(),
        net,
        rng,
        straggler,
        layout,
        sparse: vec![0; workers.len() * ps],
        shard_bytes: vec![0; workers.len() * ps],
        routes: vec![None; 2 * workers.len() * ps],
        ps_busy: vec![SimTime::ZERO; ps],
        pass_s,
        update_passes: w.optimizer.passes(),
        softmax_cpu: softmax_cpu(&w, ps, pass_s)?,
        activation_bytes: w.ps_softmax.map_or(0, |s| cfg.comm.bytes_for(s.tokens * s.dim)),
        ps_request,
        ps_push_request,
        tensors_left: vec![0; if push_tensors.is_empty() { 0 } else { workers.len() * ps }],
        push_tensors,
        ps_graph: SimTime::from_secs_f64(w.ps_request_us * 1e-6),
        tokens,
        token_cpu: SimTime::from_secs_f64(w.ps_transfer_us * 1e-6),
        first_push: SimTime::from_secs_f64(w.first_ps_push_us * 1e-6),
        token_latency: vec![SimTime::MAX; ps],
        cores: vec![SimTime::ZERO; cfg.host_cores.unwrap_or(0) as usize],
        overhead: SimTime::from_secs_f64(w.step_overhead_us * 1e-6),
        end_wait: SimTime::from_secs_f64(w.step_end_wait_us * 1e-6),
        dispatch: SimTime::from_secs_f64(w.dispatch_us * 1e-6),
        master_cpu: SimTime::from_secs_f64(w.master_cpu_us * 1e-6),
        wait: SimTime::from_secs_f64(w.step_wait_us * 1e-6),
        worker_transfer: SimTime::from_secs_f64(w.worker_transfer_us * 1e-6),
        w,
        workers,
        groups,
        transfers: Vec::new(),
        free_transfers: Vec::new(),
        version: 0,
        applied: 0,
        processed: 0,
        target: cfg.steps.saturating_mul(n),
        last_ckpt: 0,
        next_ckpt: cfg.checkpoint.as_ref().map_or(u64::MAX, |c| c.every_steps.saturating_mul(n)),
        ckpt_active: false,
        recovering: false,
        paused_s: 0.0,
        failures: 0,
        failures_in_a_row: 0,
        step_times: Vec::new(),
        phases: Vec::new(),
        w0_applied: None,
        staleness: Vec::new(),
        events: 0,
        done: Vec::new(),
    };
    sim.schedule_failures();
    for g in 0..sim.groups.len() {
        sim.release(g)?;
    }
    sim.main_loop()?;
    let report = sim.report(cfg);
    Ok((report, sim.net.fabric_mut().take_flow_log()))
}

/// The groups a strategy steps in (one for sync, one per worker for async,
/// `groups` for sync_groups) and their workers, backups included, at rest.
fn groups_and_workers(cfg: &ClusterConfig, ps: usize) -> (Vec<GroupState>, Vec<WorkerState>) {
    let (group_count, per_group, backup) = match &cfg.strategy {
        Strategy::Async {} => (cfg.workers, 1, 0),
        Strategy::Sync { backup } => (1, cfg.workers, *backup),
        Strategy::SyncGroups { groups, backup } => (*groups, cfg.workers / groups, *backup),
    };
    let mut groups = Vec::new();
    let mut workers = Vec::new();
    for g in 0..group_count {
        let first = workers.len() as u32;
        for _ in 0..per_group + backup {
            workers.push(WorkerState {
                group: g,
                epoch: 0,
                pending: 0,
                fetched_version: 0,
                forward_end: SimTime::ZERO,
                backward: SimTime::ZERO,
                backward_end: SimTime::ZERO,
                started_at: SimTime::ZERO,
                fetched_at: SimTime::ZERO,
                computed_at: SimTime::ZERO,
            });
        }
        groups.push(GroupState {
            first,
            len: per_group + backup,
            need: per_group,
            arrivals: 0,
            step_start: SimTime::ZERO,
            waiting: false,
            round: 0,
            served: vec![0; ps],
            taken: vec![0; ps],
            tokens: 0,
            tasks_done: SimTime::ZERO,
        });
    }
    (groups, workers)
}

/// The gradients a worker pushes one by one, last layer first (empty
/// unless `push_per_tensor`): each to its variable's task, when the
/// backward pass has made it, at the CPU of a one-tensor request.
fn push_tensors(cfg: &ClusterConfig, w: &Workload, layout: &PsLayout) -> Vec<PushTensor> {
    if w.push_per_tensor {
        let total: u64 = w.variables.iter().sum::<u64>().max(1);
        let mut made = 0u64;
        w.variables
            .iter()
            .zip(&layout.var_task)
            .rev()
            .map(|(&params, &k)| {
                made += params;
                PushTensor {
                    task: k as u32,
                    bytes: cfg.comm.bytes_for(params),
                    made_at: made as f64 / total as f64,
                    // a request of one tensor; the task's own part
                    // (`ps_request_us`) comes with the worker's last one
                    cost: SimTime::from_secs_f64((w.ps_push_cpu_us(1, params) - w.ps_request_us) * 1e-6),
                }
            })
            .collect()
    } else {
        Vec::new()
    }
}

/// Each PS task's CPU for its share of a full softmax computed there
/// (empty without `ps_softmax`): the forward and backward flops of its
/// classes, their update's memory passes and the request.
fn softmax_cpu(w: &Workload, ps: usize, pass_s: f64) -> Result<Vec<SimTime>, SimError> {
    Ok(match &w.ps_softmax {
        None => Vec::new(),
        Some(s) => {
            let rate = w.ps_flops_per_s()?;
            (0..ps)
                .map(|k| {
                    let classes = s.classes_on(k, ps) as f64;
                    let flops = 6.0 * s.tokens as f64 * s.dim as f64 * classes;
                    let update = pass_s * f64::from(w.optimizer.passes()) * classes * s.dim as f64;
                    SimTime::from_secs_f64(flops / rate + update + w.ps_request_us * 1e-6)
                })
                .collect()
        }
    })
}

impl Sim<'_> {
    /// The report of a finished run.
    fn report(&mut self, cfg: &ClusterConfig) -> ClusterReport {
        let end = self.q.now();
        let fabric = self.net.fabric();
        let eps = self.w.examples_per_step;
        ClusterReport {
            step_times_s: std::mem::take(&mut self.step_times),
            worker0_phases_s: std::mem::take(&mut self.phases),
            staleness_histogram: std::mem::take(&mut self.staleness),
            sim_time_s: end.as_secs_f64(),
            examples_committed: self.applied * eps,
            examples_processed: self.processed * eps,
            busy_time_s: (end.as_secs_f64() - self.paused_s).max(0.0),
            bytes_moved: fabric.bytes_moved(),
            link_usage: fabric.link_usage(end),
            link_util_max: fabric.max_link_utilization(end),
            failures: self.failures,
            events: self.events,
            network_recomputations: self.net.recomputations(),
            flow_digest: self.net.flow_digest(),
            workers: cfg.workers,
            backup_workers: cfg.total_workers() - cfg.workers,
            baseline_step_p50_s: None,
            // the model covers asynchronous updates only
            convergence: if matches!(cfg.strategy, Strategy::Async {}) { self.w.convergence } else { None },
            examples_per_update: eps,
        }
    }
}

impl Sim<'_> {
    fn ps_endpoint(&self, k: u32) -> usize {
        self.ps_at[k as usize] as usize
    }

    fn worker_endpoint(&self, w: u32) -> usize {
        self.worker_at[w as usize] as usize
    }

    /// The route of worker `w`'s fetch from PS task `k` (`fetch`) or of its
    /// push to it, looked up the first time.
    fn route(&mut self, w: u32, k: u32, fetch: bool) -> Result<Route, SimError> {
        let i = 2 * (w as usize * self.layout.tasks() + k as usize) + usize::from(fetch);
        if let Some(r) = self.routes[i] {
            return Ok(r);
        }
        let (src, dst) = if fetch { (self.ps_endpoint(k), self.worker_endpoint(w)) } else { (self.worker_endpoint(w), self.ps_endpoint(k)) };
        let r = self.net.fabric_mut().route(src, dst)?;
        self.routes[i] = Some(r);
        Ok(r)
    }

    fn transfer(&mut self, t: Transfer) -> FlowTag {
        match self.free_transfers.pop() {
            Some(i) => {
                self.transfers[i as usize] = t;
                i as FlowTag
            }
            None => {
                self.transfers.push(t);
                (self.transfers.len() - 1) as FlowTag
            }
        }
    }

    /// CPU work of `d` that may start at `from`: on a shared host it runs on
    /// the core free first (ties: the lowest), from when that core is free,
    /// and holds it; else at once. Returns when it ends.
    fn cpu(&mut self, from: SimTime, d: SimTime) -> SimTime {
        let Some((i, &free)) = self.cores.iter().enumerate().min_by_key(|&(i, &t)| (t, i)) else {
            return from + d;
        };
        let end = free.max(from) + d;
        self.cores[i] = end;
        end
    }
}

/// Failures in a row, with no update applied between them, after which a
/// run is stopped: failures come faster than a step finishes, and the run
/// would spin until its event bound (minutes) instead of progressing.
const MAX_FAILURES_IN_A_ROW: u32 = 1000;

/// The error for a run that failures keep from progressing, naming the key.
fn no_progress(cfg: &ClusterConfig, tasks: usize) -> SimError {
    let f = cfg.failures.as_ref();
    let recovery = f.map_or(0.0, |f| f.recovery_s);
    match f.and_then(|f| f.mtbf_hours) {
        Some(mtbf) => SimError::param(
            "failures.mtbf_hours",
            format!(
                "{MAX_FAILURES_IN_A_ROW} failures in a row with no update between them: {tasks} tasks with an MTBF of {mtbf:e} h fail every {:.3e} s on average, \
                 {recovery} s of recovery each, and no step finishes in between",
                mtbf * 3600.0 / tasks.max(1) as f64
            ),
        ),
        None => SimError::param("failures.at_s", format!("{MAX_FAILURES_IN_A_ROW} failures in a row with no update between them")),
    }
}

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

    fn schedule_failures(&mut self) {
        if let Some(f) = &self.cfg.failures {
            for &t in &f.at_s {
                self.q.schedule_at(SimTime::from_secs_f64(t), Ev::Failure);
            }
            if f.mtbf_hours.is_some() {
                self.schedule_next_random_failure();
            }
        }
    }

    /// Next crash of any task: tasks fail independently with the MTBF, so
    /// the cluster fails at `tasks / MTBF` per second.
    fn schedule_next_random_failure(&mut self) {
        let Some(mtbf) = self.cfg.failures.as_ref().and_then(|f| f.mtbf_hours) else {
            return;
        };
        let tasks = (self.workers.len() + self.cfg.ps as usize) as f64;
        let gap = self.rng.sample::<f64, _>(Exp1) * mtbf * 3600.0 / tasks;
        self.q.schedule_in(SimTime::from_secs_f64(gap), Ev::Failure);
    }

    fn main_loop(&mut self) -> Result<(), SimError> {
        let max_t = SimTime::from_secs_f64(self.cfg.max_sim_time_s);
        while self.applied < self.target {
            let tq = self.q.peek_time();
            // Events at the current instant run before the network is asked
            // for its next event, so flows started together share one
            // bandwidth recomputation instead of one each.
            if tq.is_some() && tq == Some(self.q.now()) {
                self.events += 1;
                if self.events > self.cfg.max_events {
                    return Err(SimError::BoundExceeded {
                        what: "max_events".into(),
                        limit: self.cfg.max_events.to_string(),
                    });
                }
                if let Some((_, ev)) = self.q.pop() {
                    self.on_event(ev)?;
                }
                continue;
            }
            let tn = self.net.next_event_time();
            let t = match (tq, tn) {
                (None, None) => {
                    return Err(SimError::BoundExceeded {
                        what: "no pending events before the last step".into(),
                        limit: format!("{} steps", self.cfg.steps),
                    })
                }
                (a, b) => a.unwrap_or(SimTime::MAX).min(b.unwrap_or(SimTime::MAX)),
            };
            if t > max_t {
                return Err(SimError::BoundExceeded {
                    what: "max_sim_time_s".into(),
                    limit: format!("{} s", self.cfg.max_sim_time_s),
                });
            }
            self.events += 1;
            if self.events > self.cfg.max_events {
                return Err(SimError::BoundExceeded {
                    what: "max_events".into(),
                    limit: self.cfg.max_events.to_string(),
                });
            }
            if tn == Some(t) {
                self.q.advance_to(t);
                let mut done = std::mem::take(&mut self.done);
                self.net.advance(t, &mut done);
                for &tag in &done {
                    self.on_transfer(tag)?;
                }
                done.clear();
                self.done = done;
            } else if let Some((_, ev)) = self.q.pop() {
                self.on_event(ev)?;
            }
        }
        Ok(())
    }

    fn current(&self, w: u32, epoch: u64) -> bool {
        self.workers[w as usize].epoch == epoch
    }

    fn on_event(&mut self, ev: Ev) -> Result<(), SimError> {
        let now = self.q.now();
        match ev {
            Ev::FetchArrive { w, ps, epoch } => {
                if self.current(w, epoch) {
                    // The response streams while the PS CPU serves the request
                    // (FIFO) and copies the shard out; the worker has the
                    // shard once both are done.
                    let copy = self.memory_work(w, ps, 1);
                    let ready = self.serve_for(ps, now, self.ps_request[ps as usize] + copy);
                    let bytes = self.shard_bytes[w as usize * self.layout.tasks() + ps as usize];
                    let tag = self.transfer(Transfer { w, ps, epoch, kind: TransferKind::Fetch, ready, tensor: u32::MAX });
                    let route = self.route(w, ps, true)?;
                    self.net.start_flow_on(now, self.ps_endpoint(ps), self.worker_endpoint(w), route, bytes, tag)?;
                }
            }
            Ev::FetchReady { w, ps, epoch, held } => {
                if self.current(w, epoch) {
                    if held {
                        self.shard_fetched(w, epoch);
                    } else {
                        self.fetch_ready(w, ps, epoch);
                    }
                }
            }
            Ev::ComputeDone { w, epoch } => {
                if self.current(w, epoch) {
                    if self.w.overlap {
                        self.backward(w, epoch)?;
                    } else if self.softmax_cpu.is_empty() {
                        self.push(w, epoch)?;
                    } else {
                        self.softmax_exchange(w, epoch)?;
                    }
                }
            }
            Ev::SoftmaxServed { w, ps, epoch } => {
                if self.current(w, epoch) {
                    let tag = self.transfer(Transfer { w, ps, epoch, kind: TransferKind::ActivationGrads, ready: now, tensor: u32::MAX });
                    let route = self.route(w, ps, true)?;
                    self.net.start_flow_on(now, self.ps_endpoint(ps), self.worker_endpoint(w), route, self.activation_bytes, tag)?;
                }
            }
            Ev::PushComplete { w, ps, epoch } => {
                if self.current(w, epoch) {
                    self.push_complete(w, ps, epoch);
                }
            }
            Ev::PushTensor { w, i, epoch } => {
                if self.current(w, epoch) {
                    let t = self.push_tensors[i as usize];
                    let tag = self.transfer(Transfer { w, ps: t.task, epoch, kind: TransferKind::Push, ready: now, tensor: i });
                    let route = self.route(w, t.task, false)?;
                    self.net.start_flow_on(now, self.worker_endpoint(w), self.ps_endpoint(t.task), route, t.bytes, tag)?;
                }
            }
            Ev::PushServed { w, ps, epoch, whole } => {
                if self.current(w, epoch) {
                    if whole && self.tokens[ps as usize] > 0 {
                        self.push_counted(w, ps)?;
                    }
                    let ws = &mut self.workers[w as usize];
                    ws.pending -= 1;
                    if ws.pending == 0 {
                        self.gradient_applied(w)?;
                    }
                }
            }
            Ev::TokenArrive { g, round } => {
                if self.groups[g as usize].round == round {
                    let at = self.serve_for(0, now, self.token_cpu);
                    self.q.schedule_at(at, Ev::TokenServed { g, round });
                }
            }
            Ev::TokenServed { g, round } => {
                let gs = &mut self.groups[g as usize];
                if gs.round == round {
                    gs.tokens -= 1;
                    if gs.tokens == 0 && gs.arrivals >= gs.need {
                        self.tasks_done(g as usize)?;
                    }
                }
            }
            Ev::StepAnswered { g, round } => {
                if self.groups[g as usize].round == round {
                    self.group_step_done(g as usize)?;
                }
            }
            Ev::CheckpointDone => {
                self.ckpt_active = false;
                self.release_waiting()?;
            }
            Ev::Failure => self.fail()?,
            Ev::RecoveryDone => {
                self.recovering = false;
                self.release_waiting()?;
            }
        }
        Ok(())
    }

    fn on_transfer(&mut self, tag: FlowTag) -> Result<(), SimError> {
        let t = self.transfers[tag as usize];
        self.free_transfers.push(tag as u32);
        if !self.current(t.w, t.epoch) {
            return Ok(()); // a dropped (late or pre-failure) transfer
        }
        let now = self.q.now();
        match t.kind {
            TransferKind::Fetch => {
                if t.ready > now {
                    self.q.schedule_at(t.ready, Ev::FetchReady { w: t.w, ps: t.ps, epoch: t.epoch, held: false });
                } else {
                    self.fetch_ready(t.w, t.ps, t.epoch);
                }
            }
            TransferKind::Activations => {
                let at = self.serve_for(t.ps, now, self.softmax_cpu[t.ps as usize]);
                self.q.schedule_at(at, Ev::SoftmaxServed { w: t.w, ps: t.ps, epoch: t.epoch });
            }
            TransferKind::ActivationGrads => {
                let ws = &mut self.workers[t.w as usize];
                ws.pending -= 1;
                if ws.pending == 0 {
                    self.push(t.w, t.epoch)?;
                }
            }
            TransferKind::Push if t.tensor != u32::MAX => {
                // one tensor: its PS task takes it (FIFO); the worker's last
                // one there also costs the task's request and, on the first
                // task, its end of the worker's loss
                let p = self.push_tensors[t.tensor as usize];
                let i = t.w as usize * self.layout.tasks() + t.ps as usize;
                self.tensors_left[i] -= 1;
                let whole = self.tensors_left[i] == 0;
                let extra = match (whole, t.ps) {
                    (false, _) => SimTime::ZERO,
                    (true, 0) => self.ps_graph + self.first_push,
                    (true, _) => self.ps_graph,
                };
                let at = self.serve_for(t.ps, now, p.cost + extra);
                self.q.schedule_at(at, Ev::PushServed { w: t.w, ps: t.ps, epoch: t.epoch, whole });
            }
            TransferKind::Push => {
                // With `overlap` the last bytes exist once the backward pass is done.
                let complete = if self.w.overlap { self.workers[t.w as usize].backward_end } else { now };
                if complete > now {
                    self.q.schedule_at(complete, Ev::PushComplete { w: t.w, ps: t.ps, epoch: t.epoch });
                } else {
                    self.push_complete(t.w, t.ps, t.epoch);
                }
            }
        }
        Ok(())
    }

    /// PS task `ps` has all of worker `w`'s gradient shard (of its current
    /// step: both callers check): its CPU applies it (FIFO).
    fn push_complete(&mut self, w: u32, ps: u32, epoch: u64) {
        let extra = if ps == 0 { self.first_push } else { SimTime::ZERO };
        let memory = self.gradient_memory_work(w, ps);
        let at = self.serve_for(ps, self.q.now(), self.ps_push_request[ps as usize] + extra + memory);
        self.q.schedule_at(at, Ev::PushServed { w, ps, epoch, whole: true });
    }

    /// With `ps_softmax`: worker `w`'s activations leave for every PS task
    /// (each answers with their gradient once it has computed its classes).
    fn softmax_exchange(&mut self, w: u32, epoch: u64) -> Result<(), SimError> {
        let now = self.q.now();
        let tasks = self.layout.tasks();
        for k in 0..tasks as u32 {
            let tag = self.transfer(Transfer { w, ps: k, epoch, kind: TransferKind::Activations, ready: now, tensor: u32::MAX });
            let route = self.route(w, k, false)?;
            self.net.start_flow_on(now, self.worker_endpoint(w), self.ps_endpoint(k), route, self.activation_bytes, tag)?;
        }
        self.workers[w as usize].pending = tasks as u32;
        Ok(())
    }

    /// PS CPU time for `passes` passes over the elements worker `w` moves
    /// to or from task `ps` this step (its dense share and its sparse rows).
    fn memory_work(&self, w: u32, ps: u32, passes: u32) -> SimTime {
        if self.pass_s == 0.0 {
            return SimTime::ZERO;
        }
        let k = ps as usize;
        let elements = self.layout.dense[k] + self.sparse[w as usize * self.layout.tasks() + k];
        SimTime::from_secs_f64(self.pass_s * f64::from(passes) * elements as f64)
    }

    /// What a gradient costs the task's memory as it is taken in: alone
    /// (one gradient an update, as asynchronous training has) the update's
    /// passes; else three passes to add it to the accumulator, and the
    /// update's passes with the `need`-th. Later ones are dropped unread.
    fn gradient_memory_work(&mut self, w: u32, ps: u32) -> SimTime {
        if self.pass_s == 0.0 {
            return SimTime::ZERO;
        }
        let g = self.workers[w as usize].group as usize;
        let need = self.groups[g].need;
        let taken = &mut self.groups[g].taken[ps as usize];
        *taken += 1;
        let passes = match (need, (*taken).cmp(&need)) {
            (1, std::cmp::Ordering::Equal) => self.update_passes,
            (_, std::cmp::Ordering::Less) => 3,
            (_, std::cmp::Ordering::Equal) => 3 + self.update_passes,
            (_, std::cmp::Ordering::Greater) => 0,
        };
        self.memory_work(w, ps, passes)
    }

    /// Worker `w`'s shard from PS task `ps` has arrived and the task has
    /// served it; with `fetch_in_turn` it is the worker's once the task
    /// has also served the work queued by then (which shared its turns),
    /// not what comes later: a busy task starves no fetch.
    fn fetch_ready(&mut self, w: u32, ps: u32, epoch: u64) {
        let busy = self.ps_busy[ps as usize];
        if self.w.fetch_in_turn && busy > self.q.now() {
            self.q.schedule_at(busy, Ev::FetchReady { w, ps, epoch, held: true });
        } else {
            self.shard_fetched(w, epoch);
        }
    }

    fn shard_fetched(&mut self, w: u32, epoch: u64) {
        let now = self.q.now();
        let ws = &mut self.workers[w as usize];
        ws.pending -= 1;
        if ws.pending == 0 {
            ws.fetched_at = now;
            ws.fetched_version = self.version;
            if self.w.overlap {
                // The forward pass has consumed each variable as it came:
                // it ends with the last bytes or its own time, the later.
                let end = ws.forward_end.max(self.q.now());
                self.q.schedule_at(end, Ev::ComputeDone { w, epoch });
            } else {
                self.compute(w, epoch);
            }
        }
    }

    /// With `overlap`, at the step's first fetch request: the compute time
    /// is drawn and the forward pass starts (it runs as the variables
    /// arrive, so it cannot end before the last of them).
    fn start_forward(&mut self, w: u32, t0: SimTime) {
        let d = self.compute_duration(w, t0).as_secs_f64();
        let forward = SimTime::from_secs_f64(d * self.w.forward_fraction);
        let end = self.cpu(t0, forward);
        let ws = &mut self.workers[w as usize];
        ws.forward_end = end;
        ws.backward = SimTime::from_secs_f64(d * (1.0 - self.w.forward_fraction));
    }

    /// With `overlap`: the forward pass is done, the backward pass starts
    /// and every gradient shard streams out as it is produced (its flow
    /// starts now; the PS task applies it once it has arrived and the
    /// backward pass, which makes its last bytes, is done).
    fn backward(&mut self, w: u32, epoch: u64) -> Result<(), SimError> {
        let now = self.q.now();
        let d = self.workers[w as usize].backward;
        let end = self.cpu(now, d);
        self.workers[w as usize].backward_end = end;
        self.push(w, epoch)
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

    /// FIFO PS CPU: work of `d` on PS task `ps` arriving at `now` is done
    /// at the returned time. On a shared host it also holds a core.
    fn serve_for(&mut self, ps: u32, now: SimTime, d: SimTime) -> SimTime {
        let from = self.ps_busy[ps as usize].max(now);
        let end = self.cpu(from, d);
        self.ps_busy[ps as usize] = end;
        end
    }

    /// Worker `w`'s push to PS task `ps` (which sends tokens) was served:
    /// when it is the group's `need`-th there, the task's update for the
    /// step has run and its tokens leave for the first task.
    fn push_counted(&mut self, w: u32, ps: u32) -> Result<(), SimError> {
        let now = self.q.now();
        let g = self.workers[w as usize].group as usize;
        let k = ps as usize;
        let gs = &mut self.groups[g];
        gs.served[k] += 1;
        if gs.served[k] != gs.need {
            return Ok(());
        }
        let round = gs.round;
        if self.token_latency[k] == SimTime::MAX {
            self.token_latency[k] = self.net.path_latency(self.ps_endpoint(ps), self.ps_endpoint(0))?;
        }
        let lat = self.token_latency[k];
        for _ in 0..self.tokens[k] {
            let sent = self.serve_for(ps, now, self.token_cpu);
            self.q.schedule_at(sent + lat, Ev::TokenArrive { g: g as u32, round });
        }
        Ok(())
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

    /// Worker `w`'s end of the tensors one fetch or push of its step moves,
    /// from `from`: CPU on the shared host that nothing waits for (see
    /// `Workload::worker_transfer_us`). Nothing without it or `host_cores`,
    /// so that other workloads keep their cores' schedule bit for bit.
    fn worker_transfer_cpu(&mut self, w: u32, from: SimTime) {
        if self.worker_transfer == SimTime::ZERO || self.cores.is_empty() {
            return;
        }
        let tensors: u64 = (0..self.layout.tasks()).filter(|&k| self.involved(w, k)).map(|k| self.layout.tensors[k]).sum();
        self.cpu(from, SimTime(self.worker_transfer.0.saturating_mul(tensors)));
    }

    fn involved(&self, w: u32, k: usize) -> bool {
        self.layout.dense[k] > 0 || self.sparse[w as usize * self.layout.tasks() + k] > 0
    }

    /// Starts worker `w`'s step at its current generation: fetch requests to every task it needs.
    fn start_step(&mut self, w: u32) -> Result<(), SimError> {
        let now = self.q.now();
        let tasks = self.layout.tasks();
        let row = w as usize * tasks..(w as usize + 1) * tasks;
        self.layout.draw_sparse(&mut self.rng, &mut self.sparse[row.clone()]);
        for (k, (bytes, &sparse)) in self.shard_bytes[row.clone()].iter_mut().zip(&self.sparse[row]).enumerate() {
            *bytes = self.comm.bytes_for(self.layout.dense[k]) + self.comm.bytes_for(sparse);
        }
        let epoch = self.workers[w as usize].epoch;
        // the master's CPU runs beside the worker's own overhead (nothing
        // waits for it), and its call reaches the worker `dispatch` after
        // the step's start at the earliest
        if self.master_cpu > SimTime::ZERO && !self.cores.is_empty() {
            self.cpu(now, self.master_cpu);
        }
        let t0 = self.cpu(now, self.overhead).max(now + self.dispatch) + self.wait;
        self.workers[w as usize].started_at = t0;
        self.worker_transfer_cpu(w, t0);
        let mut pending = 0;
        for k in 0..self.layout.tasks() {
            if self.involved(w, k) {
                let lat = self.route(w, k as u32, false)?.latency;
                self.q.schedule_at(t0 + lat, Ev::FetchArrive { w, ps: k as u32, epoch });
                pending += 1;
            }
        }
        self.workers[w as usize].pending = pending;
        if pending == 0 {
            // Nothing to fetch or push: the whole compute at once.
            self.workers[w as usize].fetched_version = self.version;
            self.workers[w as usize].backward = SimTime::ZERO;
            self.compute(w, epoch);
        } else if self.w.overlap {
            self.start_forward(w, t0);
        }
        Ok(())
    }

    fn compute(&mut self, w: u32, epoch: u64) {
        let now = self.q.now();
        let d = self.compute_duration(w, now);
        let end = self.cpu(now, d);
        self.q.schedule_at(end, Ev::ComputeDone { w, epoch });
        if !self.push_tensors.is_empty() {
            // the backward pass ends the compute and makes the gradients
            // one by one: each leaves once made
            let backward = d.as_secs_f64() * (1.0 - self.w.forward_fraction);
            let tasks = self.layout.tasks();
            // a model of variables only: a task's tensors are the variables it holds
            for (left, &held) in self.tensors_left[w as usize * tasks..(w as usize + 1) * tasks].iter_mut().zip(&self.layout.tensors) {
                *left = held as u32;
            }
            for (i, t) in self.push_tensors.iter().enumerate() {
                let at = end.saturating_sub(SimTime::from_secs_f64(backward * (1.0 - t.made_at))).max(now);
                self.q.schedule_at(at, Ev::PushTensor { w, i: i as u32, epoch });
            }
            self.workers[w as usize].pending = self.push_tensors.len() as u32;
        }
    }

    /// Worker `w`'s compute time for a step starting at `now`: the
    /// workload's jitter and the straggler model's factor.
    fn compute_duration(&mut self, w: u32, now: SimTime) -> SimTime {
        let jitter = if self.w.compute_sigma > 0.0 {
            (self.w.compute_sigma * self.rng.sample::<f64, _>(StandardNormal)).exp()
        } else {
            1.0
        };
        let factor = self.straggler.factor(&mut self.rng, w as usize, now);
        SimTime::from_secs_f64(self.w.compute_s * jitter * factor)
    }

    fn push(&mut self, w: u32, epoch: u64) -> Result<(), SimError> {
        let now = self.q.now();
        let ws = &mut self.workers[w as usize];
        ws.computed_at = if self.w.overlap { ws.backward_end } else { now };
        self.worker_transfer_cpu(w, now);
        if !self.push_tensors.is_empty() {
            // the tensors left as the backward pass made them (`compute`)
            return Ok(());
        }
        let mut pending = 0;
        for k in 0..self.layout.tasks() {
            if self.involved(w, k) {
                let bytes = self.shard_bytes[w as usize * self.layout.tasks() + k];
                let tag = self.transfer(Transfer { w, ps: k as u32, epoch, kind: TransferKind::Push, ready: now, tensor: u32::MAX });
                let route = self.route(w, k as u32, false)?;
                self.net.start_flow_on(now, self.worker_endpoint(w), self.ps_endpoint(k as u32), route, bytes, tag)?;
                pending += 1;
            }
        }
        self.workers[w as usize].pending = pending;
        if pending == 0 {
            self.gradient_applied(w)?;
        }
        Ok(())
    }

    /// Worker `w`'s whole gradient has been applied on every task.
    fn gradient_applied(&mut self, w: u32) -> Result<(), SimError> {
        let ws = &mut self.workers[w as usize];
        if w == 0 {
            self.w0_applied = Some((ws.started_at, ws.fetched_at, ws.computed_at));
        }
        // Stop the worker until its group releases it.
        ws.epoch += 1;
        let stale = (self.version - ws.fetched_version) as usize;
        if self.staleness.len() <= stale {
            self.staleness.resize(stale + 1, 0);
        }
        self.staleness[stale] += 1;
        let g = ws.group as usize;
        self.groups[g].arrivals += 1;
        if self.groups[g].arrivals == self.groups[g].need && self.groups[g].tokens == 0 {
            self.tasks_done(g)?;
        }
        Ok(())
    }

    /// Group `g`'s step has ended on every task: its answers reach the
    /// master `end_wait` later.
    fn tasks_done(&mut self, g: usize) -> Result<(), SimError> {
        let now = self.q.now();
        self.groups[g].tasks_done = now;
        if self.end_wait == SimTime::ZERO {
            return self.group_step_done(g);
        }
        let round = self.groups[g].round;
        self.q.schedule_at(now + self.end_wait, Ev::StepAnswered { g: g as u32, round });
        Ok(())
    }

    fn group_step_done(&mut self, g: usize) -> Result<(), SimError> {
        let now = self.q.now();
        let need = u64::from(self.groups[g].need);
        let start = self.groups[g].step_start;
        self.step_times.push((now - start).as_secs_f64());
        if self.workers.first().is_some_and(|w0| w0.group as usize == g)
            && let Some((started, fetched, computed)) = self.w0_applied.take()
        {
            // the master's part: before the worker's start and after the
            // last task's end
            let s = |a: SimTime, b: SimTime| b.saturating_sub(a).as_secs_f64();
            let tasks_done = self.groups[g].tasks_done;
            self.phases.push([s(start, started) + s(tasks_done, now), s(started, fetched), s(fetched, computed), s(computed, tasks_done)]);
        }
        self.applied += need;
        self.failures_in_a_row = 0;
        self.processed += need;
        self.version += 1;
        if self.applied >= self.next_ckpt && self.applied < self.target {
            if let Some(c) = &self.cfg.checkpoint {
                let every = c.every_steps.saturating_mul(u64::from(self.cfg.workers));
                self.next_ckpt = self.applied.saturating_add(every);
                self.last_ckpt = self.applied;
                self.ckpt_active = true;
                self.paused_s += c.cost_s;
                self.q.schedule_in(SimTime::from_secs_f64(c.cost_s), Ev::CheckpointDone);
            }
        }
        if self.ckpt_active || self.recovering {
            self.groups[g].waiting = true;
            Ok(())
        } else {
            self.release(g)
        }
    }

    /// Starts group `g`'s next step; members still busy are aborted.
    fn release(&mut self, g: usize) -> Result<(), SimError> {
        let now = self.q.now();
        let gs = &mut self.groups[g];
        gs.arrivals = 0;
        gs.waiting = false;
        gs.step_start = now;
        gs.round += 1;
        gs.served.iter_mut().for_each(|s| *s = 0);
        gs.taken.iter_mut().for_each(|s| *s = 0);
        gs.tokens = self.tokens.iter().sum();
        let (first, len) = (gs.first, gs.len);
        if first == 0 {
            // an aborted step's gradient is not this one's
            self.w0_applied = None;
        }
        for w in first..first + len {
            self.workers[w as usize].epoch += 1;
            self.start_step(w)?;
        }
        Ok(())
    }

    fn release_waiting(&mut self) -> Result<(), SimError> {
        if self.ckpt_active || self.recovering {
            return Ok(());
        }
        for g in 0..self.groups.len() {
            if self.groups[g].waiting {
                self.release(g)?;
            }
        }
        Ok(())
    }

    /// A crash: everything since the last checkpoint is lost; all work stops
    /// until recovery, then resumes from the checkpoint.
    fn fail(&mut self) -> Result<(), SimError> {
        let from_mtbf = self.cfg.failures.as_ref().is_some_and(|f| f.mtbf_hours.is_some());
        if self.recovering {
            if from_mtbf {
                self.schedule_next_random_failure();
            }
            return Ok(());
        }
        self.failures += 1;
        self.failures_in_a_row += 1;
        if self.failures_in_a_row > MAX_FAILURES_IN_A_ROW {
            return Err(no_progress(&self.cfg, self.workers.len() + self.cfg.ps as usize));
        }
        self.applied = self.last_ckpt;
        if let Some(c) = &self.cfg.checkpoint {
            self.next_ckpt = self.last_ckpt.saturating_add(c.every_steps.saturating_mul(u64::from(self.cfg.workers)));
        }
        for ws in &mut self.workers {
            ws.epoch += 1;
        }
        for gs in &mut self.groups {
            gs.arrivals = 0;
            gs.round += 1;
            gs.waiting = true;
        }
        self.recovering = true;
        let recovery = self.cfg.failures.as_ref().map_or(0.0, |f| f.recovery_s);
        self.paused_s += recovery;
        self.q.schedule_in(SimTime::from_secs_f64(recovery), Ev::RecoveryDone);
        if from_mtbf {
            self.schedule_next_random_failure();
        }
        Ok(())
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

/// All-reduce training: each step every worker computes, then the collective
/// runs. Failures roll back to the last checkpoint; checkpoints pause.
fn run_allreduce(
    cfg: &ClusterConfig,
    w: Workload,
    net: &mut Network,
    mut rng: ChaCha8Rng,
    mut straggler: StragglerModel,
    algo: collective::AllReduceAlgo,
) -> Result<ClusterReport, SimError> {
    let p = cfg.workers as usize;
    // A ring on a torus follows the torus (see `torus_ring_order`).
    let ranks: Vec<usize> = match (algo, cfg.network.shape(cfg.devices())?) {
        (collective::AllReduceAlgo::Ring, crate::network::TopologyShape::Torus { dims }) => {
            collective::torus_ring_order(&dims, p)
        }
        _ => (0..p).collect(),
    };
    let bytes = cfg.comm.bytes_for(w.allreduce_elements());
    let stages = collective::plan(algo, &ranks, bytes, cfg.network.devices_per_host as usize);
    // a lockstep step: where in it the master waits does not matter
    let overhead = SimTime::from_secs_f64((w.step_overhead_us.max(w.dispatch_us) + w.step_wait_us + w.step_end_wait_us) * 1e-6);
    let max_t = SimTime::from_secs_f64(cfg.max_sim_time_s);
    let mut failures_at: Vec<SimTime> = cfg
        .failures
        .as_ref()
        .map(|f| f.at_s.iter().map(|&t| SimTime::from_secs_f64(t)).collect())
        .unwrap_or_default();
    let mtbf = cfg.failures.as_ref().and_then(|f| f.mtbf_hours);
    let recovery = SimTime::from_secs_f64(cfg.failures.as_ref().map_or(0.0, |f| f.recovery_s));
    let next_random = |rng: &mut ChaCha8Rng, from: SimTime| {
        mtbf.map(|m| from + SimTime::from_secs_f64(rng.sample::<f64, _>(Exp1) * m * 3600.0 / p as f64))
    };
    let mut random_failure = next_random(&mut rng, SimTime::ZERO);
    failures_at.sort();
    let mut fixed = failures_at.into_iter().peekable();
    let (mut now, mut done_steps, mut last_ckpt, mut processed) = (SimTime::ZERO, 0u64, 0u64, 0u64);
    let (mut paused, mut failures, mut events) = (0.0f64, 0u32, 0u64);
    let mut failures_in_a_row = 0u32;
    let mut step_times = Vec::new();
    while done_steps < cfg.steps {
        events += 1;
        if now > max_t || events > cfg.max_events {
            return Err(SimError::BoundExceeded {
                what: "max_sim_time_s or max_events".into(),
                limit: format!("{} s, {} events", cfg.max_sim_time_s, cfg.max_events),
            });
        }
        let start = now;
        // `ready`: every rank's gradient is complete; `backward`: every
        // rank's backward pass has started (with `overlap` the collective
        // streams the gradients from then on, as they are produced, and
        // cannot end before they all exist).
        let (mut ready, mut backward) = (start, start);
        for r in 0..p {
            let jitter = if w.compute_sigma > 0.0 {
                (w.compute_sigma * rng.sample::<f64, _>(StandardNormal)).exp()
            } else {
                1.0
            };
            let d = w.compute_s * jitter * straggler.factor(&mut rng, r, start);
            ready = ready.max(start + overhead + SimTime::from_secs_f64(d));
            backward = backward.max(start + overhead + SimTime::from_secs_f64(d * w.forward_fraction));
        }
        let end = if w.overlap {
            collective::run(net, &stages, backward)?.max(ready)
        } else {
            collective::run(net, &stages, ready)?
        };
        if end > max_t {
            return Err(SimError::BoundExceeded {
                what: "max_sim_time_s".into(),
                limit: format!("{} s", cfg.max_sim_time_s),
            });
        }
        // The first failure inside this step, if any, loses it and all since the checkpoint.
        let fixed_hit = fixed.peek().copied().filter(|&t| t <= end);
        let random_hit = random_failure.filter(|&t| t <= end);
        let hit = match (fixed_hit, random_hit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(t) = hit {
            if fixed_hit == Some(t) {
                fixed.next();
            } else {
                random_failure = next_random(&mut rng, t);
            }
            failures += 1;
            failures_in_a_row += 1;
            if failures_in_a_row > MAX_FAILURES_IN_A_ROW {
                return Err(no_progress(cfg, p));
            }
            done_steps = last_ckpt;
            now = t.max(start) + recovery;
            paused += recovery.as_secs_f64();
            continue;
        }
        step_times.push((end - start).as_secs_f64());
        failures_in_a_row = 0;
        done_steps += 1;
        processed += 1;
        now = end;
        if let Some(c) = &cfg.checkpoint {
            if done_steps % c.every_steps == 0 && done_steps < cfg.steps {
                last_ckpt = done_steps;
                now += SimTime::from_secs_f64(c.cost_s);
                paused += c.cost_s;
            }
        }
    }
    let fabric = net.fabric();
    let eps = w.examples_per_step * p as u64;
    Ok(ClusterReport {
        staleness_histogram: vec![done_steps * p as u64],
        step_times_s: step_times,
        worker0_phases_s: Vec::new(),
        sim_time_s: now.as_secs_f64(),
        examples_committed: done_steps * eps,
        examples_processed: processed * eps,
        busy_time_s: (now.as_secs_f64() - paused).max(0.0),
        bytes_moved: fabric.bytes_moved(),
        link_usage: fabric.link_usage(now),
        link_util_max: fabric.max_link_utilization(now),
        failures,
        events,
        network_recomputations: net.recomputations(),
        flow_digest: net.flow_digest(),
        workers: cfg.workers,
        backup_workers: 0,
        baseline_step_p50_s: None,
        convergence: None,
        examples_per_update: eps,
    })
}

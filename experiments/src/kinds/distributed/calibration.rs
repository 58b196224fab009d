//! The calibration of a distributed point, measured just before its run:
//! a worker's pass and the PS's update timed in process, the loopback and
//! task processes' figures, and the simulator's inputs made from them
//! (the module comment of `kinds::distributed` says how each is charged).

use super::*;

/// Median seconds per run of `f` over `reps` batches of `iters` runs
/// (after one untimed batch).
pub(super) fn median_per_run(reps: usize, iters: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
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
pub(super) struct InProcessStep {
    pub(super) sess: Session,
    pub(super) compute: (Vec<(Output, Tensor)>, Output),
    pub(super) update: (Vec<(Output, Tensor)>, Output),
}

impl InProcessStep {
    pub(super) fn new(p: &DistributedPoint, cfg: &TrainConfig, data: &Dataset, shard: usize) -> Result<InProcessStep, String> {
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
                    let own = if k == 0 { v.clone() } else { Tensor::from_f64s(v.dtype(), &v.to_f64_vec().map_err(e)?, v.shape().clone()).map_err(e)? };
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
    pub(super) fn time(&self, reps: usize) -> Result<(f64, f64), String> {
        let run = |(feeds, target): &(Vec<(Output, Tensor)>, Output)| {
            let fed: Vec<(&Output, &Tensor)> = feeds.iter().map(|(o, t)| (o, t)).collect();
            median_per_run(reps, 20, || self.sess.run(&fed, &[], &[target]).map(drop).map_err(|e| format!("calibrating the step in process: {e}")))
        };
        Ok((run(&self.compute)?, run(&self.update)?))
    }
}

/// What the simulator is given for one point (see the module comment).
pub(super) struct SimInputs {
    pub(super) workload: Workload,
    /// The mesh's link rate and one-way latency.
    pub(super) gbps: f64,
    pub(super) latency_us: f64,
    /// The host's cores, shared by every task.
    pub(super) cores: u32,
    /// Tensors a worker's step moves (`serial_transfers`).
    pub(super) transfers: usize,
    /// The master's CPU per gradient: `Workload::master_cpu_us` between
    /// processes, part of the step overhead on threads.
    pub(super) runner_us: f64,
}

/// The part of a transfer's CPU time charged to each of its two ends when
/// the ends are not measured apart (tasks on threads): a task produces
/// half of the tensors it moves and consumes the other half (module
/// comment), so each end spends the mean of the producer's and the
/// consumer's CPU, half of the transfer's.
pub(super) const CPU_SHARE_PER_END: f64 = 0.5;

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
pub(super) struct TaskEnds {
    pub(super) ps_s: f64,
    pub(super) worker_s: f64,
    pub(super) ps_message_s: f64,
    pub(super) worker_message_s: f64,
    pub(super) run_graph_s: f64,
    pub(super) dispatch_out_s: f64,
    pub(super) dispatch_back_s: f64,
    pub(super) small_push_wall_s: f64,
    pub(super) consumers: usize,
}

impl TaskEnds {
    pub(super) fn of(f: &flowlab_runtime::ProcessFigures) -> TaskEnds {
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
pub(super) fn predict_inputs(
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
    // CPU times as measured: `core_share` is recorded, not applied: one
    // moment's share swings widely between points while a run sees the
    // load of the whole sweep, and dividing by it overpredicted badly
    // (docs/logs/distributed-prediction.md)
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

/// What the calibration measured just before the run.
pub(super) struct Calibration {
    pub(super) compute_s: f64,
    pub(super) apply_s: f64,
    pub(super) in_process: flowlab_runtime::LoopbackFigures,
    /// Moving the model's tensors and an empty step between task
    /// processes, per process (none when the tasks are threads).
    pub(super) between: Option<flowlab_runtime::ProcessFigures>,
    /// The figures the prediction takes: between processes where
    /// measured, the loopback rate and latency in process.
    pub(super) link: flowlab_runtime::LoopbackFigures,
}

impl Calibration {
    pub(super) fn measure(p: &DistributedPoint, env: &PointEnv, cfg: &TrainConfig, data: &Dataset, shard: usize, vars: &[(String, usize, usize)]) -> Result<Calibration, String> {
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

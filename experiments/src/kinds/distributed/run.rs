//! A distributed point's real run over local task processes, the cluster
//! simulator's prediction of it, and the row that puts them side by side.

use super::*;

/// The runner's CPU clock and each task process's, seconds.
pub(super) type CpuReading = (f64, Vec<(TaskId, Option<f64>)>);

/// CPU seconds between two readings: the runner's, and per task process
/// running at the end (none on threads: the runner's CPU holds theirs); a
/// restarted task's clock starts again, so it counts from 0; a killed
/// one's is gone.
pub(super) fn cpu_between(from: &CpuReading, to: &CpuReading) -> (f64, Vec<f64>) {
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

pub(super) fn run_point(p: &DistributedPoint, env: &PointEnv) -> Result<Outcome, String> {
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
    let predicted = Prediction::of(p, env, &cfg, &vars, &cal, factors, run.r.report.steps)?;
    Ok(point_outcome(env, &cal, &run, &predicted))
}

/// The real run over a local cluster, and the CPU its processes took.
pub(super) struct MeasuredRun {
    pub(super) r: flowlab_programs::cluster::ClusterTrainReport,
    pub(super) updates: f64,
    /// The runner's and each task's CPU seconds over the whole run ...
    pub(super) run_runner_cpu: f64,
    pub(super) run_tasks_cpu: Vec<f64>,
    /// ... and from the first update's end to the last's (the updates
    /// alone, without start-up, registration, the first step's plans or
    /// the evaluation), over `window_updates` updates.
    pub(super) runner_cpu: f64,
    pub(super) tasks_cpu: Vec<f64>,
    pub(super) window_updates: f64,
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
        let lock = || cluster.lock();
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
pub(super) struct Prediction {
    pub(super) model: SimInputs,
    pub(super) sim: flowlab_sim::cluster::ClusterReport,
    pub(super) step_s: f64,
    pub(super) steps_per_s: f64,
    /// Every task (PS tasks, then workers) and the runner, per update.
    pub(super) task_cpu: Vec<f64>,
    pub(super) runner_cpu: f64,
    pub(super) cpu_us: f64,
}

impl Prediction {
    /// The prediction of point `p` from its calibration, with the run's
    /// injected factors, over as many steps as the run made.
    pub(super) fn of(p: &DistributedPoint, env: &PointEnv, cfg: &TrainConfig, vars: &[(String, usize, usize)], cal: &Calibration, factors: Option<Vec<Vec<f64>>>, steps: usize) -> Result<Prediction, String> {
        let needed = p.needed();
        let shard = p.batch() / needed;
        let emulated = p.link.as_ref().map(LinkParams::check).transpose()?;
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
pub(super) fn point_outcome(env: &PointEnv, cal: &Calibration, run: &MeasuredRun, pred: &Prediction) -> Outcome {
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
        let median = |v: Vec<f64>| flowlab_programs::cluster::percentile(&v, 0.5);
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
pub(super) const TRACED: usize = 5;

pub(super) fn traced_updates(p: &DistributedPoint, cfg: &flowlab_programs::train::TrainConfig, data: &flowlab_programs::datasets::Dataset) -> Option<(usize, usize)> {
    if p.backup > 0 || p.kill.is_some() {
        return None;
    }
    let mut c = cfg.clone();
    c.devices = match p.strategy {
        StrategyName::Sync => p.needed(),
        StrategyName::Async => 1,
    };
    let total = flowlab_programs::cluster::planned_updates(data, &c);
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
pub(super) fn step_phases(parts: &[flowlab_engine::PartitionTimeline]) -> Vec<[f64; 5]> {
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

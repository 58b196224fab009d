//! `flowlab train MODEL --data digits`: trains a model with the real engine
//! and prints held-out accuracy (with --json the last line is one JSON object).
//! `--devices N` spreads it over N local CPU devices, model parallel
//! (`--placement layers`) or data parallel (`--placement replicas`), with
//! cross-device tensors sent in the `--comm` format.

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use flowlab_programs::datasets::{Dataset, load_digits};
use flowlab_engine::{EmulatedLink, EngineError};
use flowlab_programs::train::{CheckpointConfig, DEFAULT_BATCH, ModelKind, ParallelPlacement, TrainConfig, default_batch, train};
use flowlab_hw::CommFormat;
use flowlab_programs::cluster::{ClusterTraining, Hooks, Mode, train_on_cluster_with};
use flowlab_runtime::{ClusterSpec, Job, MasterOptions, TaskId};
use std::path::PathBuf;
use std::time::Duration;
use std::process::ExitCode;

#[derive(Clone, Copy, ValueEnum)]
enum Model {
    /// 64-128-10 multilayer perceptron.
    Mlp,
    /// Two 3x3 conv + max-pool layers, then a dense layer.
    Cnn,
    /// The model zoo's LSTM language model on a text corpus (--corpus);
    /// prints validation perplexity per epoch.
    LstmLm,
}

#[derive(Clone, Copy, ValueEnum)]
enum Placement {
    /// Model parallel: consecutive layers (with their variables) on consecutive devices.
    Layers,
    /// Data parallel: one replica per device, variables and the update on device 0.
    Replicas,
}

#[derive(Args)]
pub struct TrainArgs {
    /// Which network.
    model: Model,
    /// Data set: `digits` (the copy in data/) or a path to a digits-format CSV(.gz).
    #[arg(long, default_value = "digits")]
    data: String,
    #[arg(long, default_value_t = 30)]
    epochs: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Examples per step; a synchronous step splits them evenly over its
    /// replicas. Default 32, rounded up to a multiple of the replicas
    /// (`--devices N`, or a cluster's workers less its backups: 33 for
    /// `--local-cluster ps=1,workers=4 --sync-backup 1`).
    #[arg(long)]
    batch: Option<usize>,
    /// Adam learning rate.
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
    /// Executor threads per device (1 = one thread each; at most 256).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Local CPU devices to run on.
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// How the model uses several devices.
    #[arg(long, value_enum, default_value = "replicas")]
    placement: Placement,
    /// Format of cross-device transfers: f32, f16, bf16, int8, int8:<block>.
    #[arg(long, default_value = "f32")]
    comm: String,
    /// Write a Chrome/Perfetto trace of the last few training steps to this
    /// file. Over a cluster: the last 3 updates traced on every task, one
    /// process of the trace per task and the master, each transfer between tasks drawn from
    /// its send to its arrival (the tasks' wall clocks, exact on one host).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Emulate a link between every pair of devices, e.g. `5gbps,50us`:
    /// each transfer takes at least latency + bytes / bandwidth. With
    /// --local-cluster, between every pair of tasks (each task is started
    /// with it); with --cluster, every task must have been started with the
    /// same `flowlab server --link`.
    #[arg(long)]
    link: Option<String>,
    /// Save a checkpoint (variables, optimizer slots, progress) into this
    /// directory every --checkpoint-every steps.
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Steps between checkpoints. Over a cluster the master (chief) saves;
    /// with --async it stops new updates, waits for those in flight and
    /// saves the global step it has then (K, or up to workers - 1 more).
    #[arg(long, default_value_t = 100, requires = "checkpoint_dir")]
    checkpoint_every: usize,
    /// How many of the newest checkpoints to keep.
    #[arg(long, default_value_t = 5, requires = "checkpoint_dir")]
    keep: usize,
    /// Continue from the newest intact checkpoint in --checkpoint-dir (an
    /// empty directory starts from scratch); the result equals a run never
    /// stopped (bit for bit, but for --async and --sync-backup cluster runs,
    /// whose order of updates is not fixed: they go on with the batches or
    /// shards after the checkpoint's).
    #[arg(long, requires = "checkpoint_dir")]
    resume: bool,
    /// Print the result as one JSON object on the last line.
    #[arg(long)]
    json: bool,
    /// Train over a local cluster of `flowlab server` processes on loopback
    /// ports, e.g. `ps=2,workers=2`: synchronous data parallelism with the
    /// variables sharded over the PS tasks (greedy by size, each update on
    /// its variable's task) and each worker computing the gradients of its
    /// shard of every batch. The tasks are stopped at the end.
    #[arg(long, value_name = "ps=P,workers=W", conflicts_with_all = ["devices", "cluster"])]
    local_cluster: Option<String>,
    /// Train over the tasks of a running cluster (each started with
    /// `flowlab server --cluster FILE --job J --task N`), as --local-cluster does.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["devices"])]
    cluster: Option<PathBuf>,
    /// With --local-cluster or --cluster: asynchronous training (each worker
    /// applies its own gradients on the PS when it has them, without
    /// waiting for the others) instead of synchronous.
    #[arg(long = "async")]
    asynchronous: bool,
    /// With --local-cluster or --cluster, synchronous: this many of the
    /// workers are backups; each update averages the first `workers - B`
    /// gradients computed on the current variables and drops the rest.
    #[arg(long, value_name = "B", default_value_t = 0, conflicts_with = "asynchronous")]
    sync_backup: usize,
    /// With --local-cluster: kill a task (SIGKILL) after this many
    /// updates (global updates with --async), e.g. `worker:2@200`. With a
    /// backup worker training goes on without it (the JSON lists it in
    /// failed_workers); without one it stops, naming the task. A killed PS
    /// task (e.g. `ps:1@30`; sync, --sync-backup or --async) is started again
    /// and training goes on from the newest checkpoint (--checkpoint-dir;
    /// from scratch without one).
    #[arg(long, value_name = "TASK@STEP", requires = "local_cluster")]
    kill: Option<String>,
    /// With --local-cluster: stop a task's process (SIGSTOP) after this
    /// many updates, for the rest of training, e.g. `worker:2@100`: a host
    /// that hangs without dying. A stalled worker's computation fails when
    /// the PS's Recv of its gradient has waited --recv-timeout; with a
    /// backup worker training goes on without it (failed_workers), and
    /// the PS, which still answers, is not taken for dead.
    #[arg(long, value_name = "TASK@STEP", requires = "local_cluster")]
    stall: Option<String>,
    /// With --local-cluster or --cluster: evaluate the held-out accuracy
    /// after every N global updates, with no update in flight; the JSON's
    /// accuracy_curve lists (update, accuracy).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    eval_every: Option<u64>,
    /// With --local-cluster or --cluster: how long a Recv waits for its
    /// tensor before its step fails, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    recv_timeout: f64,
    /// With --local-cluster or --cluster: inject stragglers. Each worker's
    /// k-th computation waits (f - 1) x the compute time of one shard
    /// (timed in this process before training) before its task runs it, f
    /// the k-th draw of the worker's own stream of --seed, at least 1:
    /// `lognormal:SIGMA`, `exponential:P:MEAN` (slow with probability P,
    /// by an exponential factor of mean MEAN) or `slow:FACTOR:W,W...`
    /// (those workers always FACTOR times slower). The JSON gives the
    /// compute time scaled (`straggler_compute_s`).
    #[arg(long, value_name = "DIST", conflicts_with = "devices")]
    straggler: Option<String>,
    /// Seconds to keep trying to reach the cluster's tasks.
    #[arg(long, default_value_t = 30.0)]
    connect_timeout: f64,
    /// lstm-lm: `shakespeare` (59,620 words of tinyshakespeare, shipped),
    /// `markov` (a generated corpus of 60,000 words whose best perplexity is
    /// known), or a text file of words separated by white space.
    #[arg(long, default_value = "shakespeare")]
    corpus: String,
    /// lstm-lm: vocabulary (the most frequent words; the rest are <unk>).
    #[arg(long, default_value_t = 1000)]
    vocab: usize,
    /// lstm-lm: LSTM units per layer.
    #[arg(long, default_value_t = 128)]
    hidden: usize,
    /// lstm-lm: stacked LSTM layers.
    #[arg(long, default_value_t = 2)]
    layers: usize,
    /// lstm-lm: words per unrolled sequence.
    #[arg(long, default_value_t = 20)]
    seq_len: usize,
    /// lstm-lm: train on a sampled softmax of this many log-uniform
    /// candidates per step (evaluation stays the full softmax).
    #[arg(long)]
    sampled: Option<usize>,
    /// lstm-lm: carry each batch's final LSTM state into the next batch of
    /// the same streams (truncated backpropagation through time).
    #[arg(long)]
    carry_state: bool,
    /// lstm-lm: run the time steps in a while_loop (TensorFlow's
    /// dynamic_rnn) instead of unrolling them.
    #[arg(long)]
    dynamic: bool,
}

/// The flag behind each `TrainConfig` field, for error messages.
fn flag(key: &str) -> String {
    match key {
        "learning_rate" => "--lr".into(),
        "checkpoint_every" => "--checkpoint-every".into(),
        k => format!("--{}", k.replace('_', "-")),
    }
}

/// An engine error as the user should read it: configuration errors name
/// the flag they came from.
fn for_cli(e: EngineError) -> anyhow::Error {
    match e {
        EngineError::Config { key, detail } => anyhow::anyhow!("{}: {detail}", flag(&key)),
        e => e.into(),
    }
}

/// The UCI optical digits (`data/digits.csv.gz`, 57 kB), built into the
/// binary so `--data digits` works from any directory.

/// The data set named by `--data`: `digits` (built in) or a CSV file, and
/// how to name it in messages.
fn load_data(arg: &str) -> anyhow::Result<(Dataset, String)> {
    if arg == "digits" {
        let data = flowlab_programs::datasets::builtin_digits().context("loading the built-in digits")?;
        Ok((data, "digits".to_string()))
    } else {
        let path = PathBuf::from(arg);
        let data = load_digits(&path).with_context(|| format!("--data {arg}"))?;
        Ok((data, path.display().to_string()))
    }
}

/// `--link` (of `flowlab train` and `flowlab server`): the engine's parser,
/// its errors naming the flag.
pub fn parse_link(s: &str) -> anyhow::Result<EmulatedLink> {
    EmulatedLink::parse(s).map_err(for_cli)
}

/// Checks the flags that do not depend on the data, with messages naming them.
fn config(args: &TrainArgs) -> anyhow::Result<TrainConfig> {
    let comm: CommFormat = args.comm.parse().with_context(|| format!("--comm {}", args.comm))?;
    if args.devices == 0 {
        bail!("--devices: must be at least 1 (got 0)");
    }
    let placement = match args.placement {
        Placement::Layers => ParallelPlacement::Layers,
        Placement::Replicas => ParallelPlacement::Replicas,
    };
    let replicas = if placement == ParallelPlacement::Replicas { args.devices } else { 1 };
    let batch = args.batch.unwrap_or_else(|| default_batch(replicas));
    if args.devices > 1 && placement == ParallelPlacement::Replicas && !batch.is_multiple_of(args.devices) {
        bail!(
            "--placement replicas splits each batch into {} equal shards, but --batch {} is not a multiple of {}",
            args.devices,
            batch,
            args.devices
        );
    }
    let model = match args.model {
        Model::Mlp => ModelKind::Mlp,
        Model::Cnn => ModelKind::Cnn,
        Model::LstmLm => bail!("lstm-lm trains through its own path"),
    };
    let cfg = TrainConfig {
        model,
        epochs: args.epochs,
        seed: args.seed,
        batch,
        learning_rate: args.lr,
        threads: args.threads,
        devices: args.devices,
        placement,
        comm,
        trace: args.trace.clone(),
        // over a cluster the link is the tasks' (train_cluster), not the devices'
        link: match args.link.as_deref().map(parse_link).transpose()? {
            Some(_) if args.local_cluster.is_some() || args.cluster.is_some() => None,
            l => l,
        },
        checkpoint: args.checkpoint_dir.as_ref().map(|dir| CheckpointConfig {
            dir: dir.clone(),
            every: args.checkpoint_every,
            keep: args.keep,
            resume: args.resume,
        }),
    };
    cfg.validate().map_err(for_cli)?;
    Ok(cfg)
}

/// `--straggler`: `lognormal:SIGMA`, `exponential:P:MEAN` or
/// `slow:FACTOR:W,W...`, as the cluster simulator's `straggler:` key.
fn parse_straggler(spec: &str) -> anyhow::Result<flowlab_sim::cluster::Straggler> {
    use flowlab_sim::cluster::Straggler;
    let bad = || anyhow::anyhow!("--straggler {spec}: expected lognormal:SIGMA, exponential:P:MEAN or slow:FACTOR:W,W... (e.g. lognormal:0.5)");
    let num = |s: &str| s.trim().parse::<f64>().map_err(|_| bad());
    let parts: Vec<&str> = spec.split(':').collect();
    Ok(match parts.as_slice() {
        ["lognormal", sigma] => Straggler::Lognormal { sigma: num(sigma)? },
        ["exponential", p, mean] => Straggler::Exponential { p: num(p)?, mean: num(mean)? },
        ["slow", factor, workers] => Straggler::SlowMachines {
            factor: num(factor)?,
            workers: workers.split(',').map(|w| w.trim().parse::<u32>().map_err(|_| bad())).collect::<anyhow::Result<_>>()?,
        },
        _ => return Err(bad()),
    })
}

pub fn run(args: TrainArgs) -> anyhow::Result<ExitCode> {
    if let Model::LstmLm = args.model {
        let lm = super::train_lm::LmArgs {
            corpus: &args.corpus,
            vocab: args.vocab,
            hidden: args.hidden,
            layers: args.layers,
            seq_len: args.seq_len,
            sampled: args.sampled,
            carry_state: args.carry_state,
            dynamic: args.dynamic,
            batch: args.batch.unwrap_or(DEFAULT_BATCH),
            epochs: args.epochs,
            lr: args.lr,
            seed: args.seed,
            threads: args.threads,
            json: args.json,
        };
        let r = super::train_lm::run(&lm)?;
        if args.json {
            println!("{r}");
        } else {
            println!(
                "lstm_lm on {}: validation perplexity {:.2} (from {:.2}), {} steps in {:.2} s ({:.0} words/s)",
                r["corpus"].as_str().unwrap_or(""),
                r["perplexity"].as_f64().unwrap_or(f64::NAN),
                r["perplexity_start"].as_f64().unwrap_or(f64::NAN),
                r["steps"],
                r["seconds"].as_f64().unwrap_or(0.0),
                r["words_per_second"].as_f64().unwrap_or(0.0)
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.asynchronous && args.local_cluster.is_none() && args.cluster.is_none() {
        bail!("--async trains over a cluster: add --local-cluster ps=P,workers=W or --cluster FILE");
    }
    if args.sync_backup > 0 && args.local_cluster.is_none() && args.cluster.is_none() {
        bail!("--sync-backup trains over a cluster: add --local-cluster ps=P,workers=W or --cluster FILE");
    }
    let cfg = config(&args)?;
    let (data, source) = load_data(&args.data)?;
    if args.local_cluster.is_some() || args.cluster.is_some() {
        return train_cluster(&args, cfg, &data, &source);
    }
    let r = train(&data, &cfg).map_err(|e| match e {
        e @ EngineError::Config { .. } => for_cli(e),
        e => anyhow::Error::from(e).context("training"),
    })?;
    if let Some(step) = r.resumed_from_step {
        for s in &r.skipped_checkpoints {
            eprintln!("skipped an unreadable checkpoint: {s}");
        }
        eprintln!("resumed from the checkpoint of step {step}");
    }
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{:?} on {}: held-out accuracy {:.2}% ({} of {} examples), held-out loss {:.4}, {} steps in {:.2} s ({:.3} s per epoch)",
            cfg.model,
            source,
            r.accuracy * 100.0,
            (r.accuracy * r.test_examples as f64).round() as usize,
            r.test_examples,
            r.loss,
            r.steps,
            r.seconds,
            r.seconds_per_epoch
        );
        if r.devices > 1 {
            print!("{} devices, placement {:?}, comm {}", r.devices, r.placement, r.comm);
            match (r.transfers, r.bytes_sent, r.bytes_f32) {
                (Some(t), Some(b), Some(f)) => println!(": {t} transfers, {b} bytes sent ({f} as f32)"),
                _ => println!(),
            }
        }
        if let Some(t) = &args.trace {
            println!("trace of the last training steps written to {}", t.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Updates at the end of a cluster run that `--trace` records.
const TRACED_UPDATES: usize = 3;

/// The longest `--connect-timeout`, seconds (a day).
const MAX_CONNECT_TIMEOUT_S: f64 = 86_400.0;

/// `--local-cluster` / `--cluster`: the master runs here, the tasks in
/// their own processes (started here and stopped at the end for
/// `--local-cluster`).
fn train_cluster(args: &TrainArgs, mut cfg: TrainConfig, data: &Dataset, source: &str) -> anyhow::Result<ExitCode> {
    super::ignore_sigpipe();
    // at most a day: a deadline must be a time (1e300 s overflowed it and panicked)
    if !(args.connect_timeout > 0.0 && args.connect_timeout <= MAX_CONNECT_TIMEOUT_S) {
        bail!("--connect-timeout: must be a positive number of seconds, at most {MAX_CONNECT_TIMEOUT_S} (got {:?})", args.connect_timeout);
    }
    if !(args.recv_timeout > 0.0 && args.recv_timeout <= MAX_CONNECT_TIMEOUT_S) {
        bail!("--recv-timeout: must be a positive number of seconds, at most {MAX_CONNECT_TIMEOUT_S} (got {:?})", args.recv_timeout);
    }
    let kill = args.kill.as_deref().map(super::local_cluster::parse_kill).transpose()?;
    let stall = args.stall.as_deref().map(super::local_cluster::parse_kill).transpose()?;
    let link = args.link.as_deref().map(parse_link).transpose()?;
    let mut local = match &args.local_cluster {
        Some(shape) => {
            let (ps, workers) = super::local_cluster::parse_shape(shape)?;
            Some(super::local_cluster::start(ps, workers, link)?)
        }
        None => None,
    };
    let spec = match (&local, &args.cluster) {
        (Some(l), _) => l.spec.clone(),
        (None, Some(file)) => ClusterSpec::from_file(file)?,
        (None, None) => bail!("give --local-cluster or --cluster"),
    };
    let workers = spec.job_tasks(Job::Worker).count();
    if spec.job_tasks(Job::Ps).count() == 0 || workers == 0 {
        bail!("the cluster needs at least one ps task and one worker task");
    }
    let mode = if args.asynchronous { Mode::Async } else { Mode::Sync };
    if args.sync_backup >= workers {
        bail!("--sync-backup {}: the cluster has {workers} workers, so at most {} can be backups", args.sync_backup, workers - 1);
    }
    // a synchronous step splits each batch over the gradients it needs
    cfg.devices = if mode == Mode::Sync { workers - args.sync_backup } else { 1 };
    cfg.batch = args.batch.unwrap_or_else(|| default_batch(cfg.devices));
    cfg.placement = ParallelPlacement::Replicas;
    cfg.validate().map_err(for_cli)?;
    let how = ClusterTraining {
        checkpoint: cfg.checkpoint.clone(),
        mode,
        backup: args.sync_backup,
        master: MasterOptions {
            connect_deadline: Duration::from_secs_f64(args.connect_timeout),
            recv_timeout: Duration::from_secs_f64(args.recv_timeout),
            link,
            ..Default::default()
        },
        // the last TRACED_UPDATES updates, as the in-process --trace
        timeline: args.trace.as_ref().map(|_| {
            let total = flowlab_programs::cluster::planned_updates(data, &cfg);
            (total.saturating_sub(TRACED_UPDATES - 1).max(1), total.max(1))
        }),
        eval_every: args.eval_every.map(|n| n as usize),
        stragglers: match args.straggler.as_deref() {
            None => None,
            Some(spec) => {
                let dist = parse_straggler(spec)?;
                dist.validate(workers as u32).map_err(|e| anyhow::anyhow!("--straggler {spec}: {e}"))?;
                let factors = flowlab_sim::cluster::injected_factors(&dist, workers, cfg.seed).map_err(|e| anyhow::anyhow!("--straggler {spec}: {e}"))?;
                let shard = cfg.batch / cfg.devices.max(1);
                let compute = flowlab_programs::train::time_replica_compute(data, &cfg, shard, 9).map_err(for_cli)?;
                Some(flowlab_programs::cluster::Stragglers { factors, compute: Duration::from_secs_f64(compute) })
            }
        },
    };
    for (flag, value, parsed) in [("--kill", &args.kill, kill), ("--stall", &args.stall, stall)] {
        if let Some((task, _)) = parsed
            && spec.address(task).is_err()
        {
            bail!("{flag} {}: the cluster has no task {task}", value.as_deref().unwrap_or(""));
        }
    }
    let local_cell = parking_lot::Mutex::new(local.take());
    // each fault once, at its update: (task and update, done, what it does, what it says)
    type Fault = fn(&mut flowlab_runtime::LocalCluster, TaskId) -> bool;
    let faults: [(Option<(TaskId, usize)>, std::sync::atomic::AtomicBool, Fault, &str); 2] = [
        (kill, Default::default(), flowlab_runtime::LocalCluster::kill_task, "killed task"),
        (stall, Default::default(), flowlab_runtime::LocalCluster::stall_task, "stalled (SIGSTOP) task"),
    ];
    let on_step = |steps: usize| {
        for (fault, done, act, said) in &faults {
            if let Some((task, at)) = *fault
                && steps == at
                && !done.swap(true, std::sync::atomic::Ordering::Relaxed)
                && let Some(l) = local_cell.lock().as_mut()
                && act(l, task)
            {
                eprintln!("{said} {task} after update {steps}");
            }
        }
    };
    // a local PS that dies is started again (the run restores its newest checkpoint)
    let restart = |task: TaskId| -> flowlab_runtime::Result<()> {
        let mut guard = local_cell.lock();
        let l = guard.as_mut().ok_or_else(|| flowlab_runtime::RuntimeError::Engine { message: format!("task {task} is not a local task to restart") })?;
        l.restart_task(task).map_err(|e| flowlab_runtime::RuntimeError::Engine { message: format!("restarting task {task}: {e:#}") })?;
        eprintln!("restarted task {task}");
        Ok(())
    };
    let hooks = Hooks { on_step: &on_step, restart: if args.local_cluster.is_some() { Some(&restart) } else { None }, steps_done: None };
    let result = train_on_cluster_with(data, &cfg, &spec, &how, &hooks);
    let mut local = local_cell.into_inner();
    let r = match result {
        Ok(r) => r,
        Err(e) => {
            // a task that died says why in its log
            let exited = local.as_mut().map(|l| l.exited()).unwrap_or_default();
            let notes: String = exited.iter().map(|x| format!("\n  {x}")).collect();
            return Err(anyhow::anyhow!("training over the cluster: {e}{notes}"));
        }
    };
    drop(local);
    if let Some(step) = r.report.resumed_from_step {
        for s in &r.report.skipped_checkpoints {
            eprintln!("skipped an unreadable checkpoint: {s}");
        }
        eprintln!("resumed from the checkpoint of step {step}");
    }
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{:?} on {}: held-out accuracy {:.2}% ({} of {} examples), held-out loss {:.4}, {} steps in {:.2} s",
            cfg.model,
            source,
            r.report.accuracy * 100.0,
            (r.report.accuracy * r.report.test_examples as f64).round() as usize,
            r.report.test_examples,
            r.report.loss,
            r.report.steps,
            r.report.seconds
        );
        println!(
            "cluster: {} ps, {} workers ({} backup), {} ({:.1} steps/s), {} gradients dropped, {} restarts, {} steps lost",
            r.ps, r.workers, r.backup, r.mode, r.steps_per_second, r.dropped_gradients, r.restarts, r.steps_lost
        );
    }
    // after the results: a trace that cannot be written loses none of them
    match (&args.trace, &r.timeline) {
        (Some(path), Some(parts)) => {
            flowlab_engine::StepStats::merge_partitions(parts).write_chrome_trace(path).map_err(|e| anyhow::anyhow!("--trace: {e}"))?;
            if let (false, Some((first, last))) = (args.json, how.timeline) {
                println!("trace of updates {first} to {last} on every task written to {}", path.display());
            }
        }
        (Some(path), None) => bail!("--trace {}: no update was traced (the run made {} updates)", path.display(), r.report.steps),
        _ => {}
    }
    Ok(ExitCode::SUCCESS)
}

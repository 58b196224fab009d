//! Cluster training against the single-process run, on loopback tasks.

use super::*;
use flowlab_runtime::{TaskServer, bind_task};
use flowlab_engine::EmulatedLink;
use crate::train::{ModelKind, train};

pub(crate) fn local_spec(workers: u32) -> ClusterSpec {
    local_spec_ps(1, workers)
}

pub(crate) fn local_spec_ps(ps: u32, workers: u32) -> ClusterSpec {
    ClusterSpec::loopback(ps, workers).unwrap()
}

fn digits() -> Dataset {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/digits.csv.gz");
    crate::datasets::load_digits(&path).unwrap()
}

/// Injected stragglers wait where the factors say, and only there:
/// worker 1's every computation 1 + 4 = 5 times a 30 ms compute, so
/// each synchronous step lasts at least 4 x 30 = 120 ms (a lower bound:
/// the wait is a sleep, the rest only adds), while the same run without
/// them computes the same numbers. An asynchronous worker's wait
/// delays only its own steps.
#[test]
fn injected_stragglers_delay_the_steps_of_the_workers_they_name() {
    let spec = local_spec(2);
    let _servers = TaskServer::start_all(&spec).unwrap();
    let data = digits();
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 1;
    // few, large steps: the waits are what the test is about
    cfg.batch = 240;
    let stragglers = Stragglers { factors: vec![vec![1.0, 0.5], vec![5.0]], compute: Duration::from_millis(30) };
    assert_eq!((stragglers.delay(0, 0), stragglers.delay(0, 1), stragglers.delay(1, 7)), (Duration::ZERO, Duration::ZERO, Duration::from_millis(120)));
    let how = ClusterTraining { stragglers: Some(stragglers.clone()), ..ClusterTraining::default() };
    let slow = train_on_cluster(&data, &cfg, &spec, &how).unwrap();
    assert!(slow.step_p10_s >= 0.120, "every step waits for worker 1: p10 {} s", slow.step_p10_s);
    let plain = train_on_cluster(&data, &cfg, &spec, &ClusterTraining::default()).unwrap();
    assert!(plain.step_p50_s < 0.120, "without stragglers: {} s", plain.step_p50_s);
    assert_eq!(slow.report.train_loss.to_bits(), plain.report.train_loss.to_bits(), "a wait changes no number");
    // asynchronous: worker 0 never waits, so the fastest steps stay fast
    let how = ClusterTraining { mode: Mode::Async, stragglers: Some(stragglers), ..ClusterTraining::default() };
    let r = train_on_cluster(&data, &cfg, &spec, &how).unwrap();
    assert!(r.step_p10_s < 0.120 && r.step_p90_s >= 0.120, "p10 {} s, p90 {} s", r.step_p10_s, r.step_p90_s);
}

#[test]
fn one_ps_and_two_workers_compute_what_two_local_replicas_do() {
    let spec = local_spec(2);
    let _servers = TaskServer::start_all(&spec).unwrap();
    let data = digits();
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 2;
    let got = train_on_cluster(&data, &cfg, &spec, &ClusterTraining::default()).unwrap();
    cfg.devices = 2;
    let want = train(&data, &cfg).unwrap();
    assert_eq!(got.report.steps, want.steps);
    assert_eq!((got.workers, got.ps, got.mode), (2, 1, Mode::Sync));
    // the same batches, shards, initial values and the same kernels on
    // the same shapes: bit for bit what the in-process run computes
    assert_eq!(got.report.train_loss.to_bits(), want.train_loss.to_bits(), "{got:?} vs {want:?}");
    assert_eq!(got.report.accuracy.to_bits(), want.accuracy.to_bits(), "{got:?} vs {want:?}");
    assert_eq!(got.report.loss.to_bits(), want.loss.to_bits(), "{got:?} vs {want:?}");
    assert!(got.report.accuracy > 0.85, "{got:?}");
}

/// Updates 3 and 4 of 1 PS + 2 workers, traced on every task: by hand,
/// an update moves the digits MLP's 4 variables (9,610 floats) to each
/// worker, its 4 gradients back and each worker's loss to ps:0, 18
/// `RecvTensor` answers of 2 x 2 x 9,610 x 4 + 2 x 4 = 153,768 bytes, so
/// the timeline holds 36 transfers of twice that, each arriving after
/// its send began (one host's clock), the nodes of all three tasks, and
/// on ps:0 the 4 Adam updates of each update. Tracing changes no number:
/// the run computes what the in-process run does, bit for bit.
#[test]
fn traced_updates_lay_every_tasks_nodes_and_transfers_on_one_clock() {
    let spec = local_spec(2);
    let _servers = TaskServer::start_all(&spec).unwrap();
    let data = digits();
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 1;
    let got = train_on_cluster(&data, &cfg, &spec, &ClusterTraining { timeline: Some((3, 4)), ..Default::default() }).unwrap();
    let parts = got.timeline.as_ref().expect("the recorded updates");
    // two steps of three tasks and the master
    assert_eq!(parts.len(), 8);
    assert_eq!(parts.iter().map(|p| p.step_id).collect::<std::collections::BTreeSet<_>>().len(), 2);
    let t = &flowlab_engine::StepStats::merge_partitions(parts);
    assert_eq!(t.transfers.len(), 36, "{:?}", t.transfers);
    assert_eq!(t.transfers.len() as f64, 2.0 * got.transfers_per_step);
    assert_eq!(t.transfers.iter().map(|x| x.bytes).sum::<u64>(), 2 * 153_768);
    assert_eq!(2.0 * got.bytes_per_step, 2.0 * 153_768.0);
    for x in &t.transfers {
        assert!(x.end_us > x.start_us && x.start_us >= 0.0 && x.end_us <= t.total_us, "{x:?}");
        assert_eq!(x.format, "f32");
    }
    let devices: std::collections::BTreeSet<&str> = t.nodes.iter().map(|n| n.device.as_str()).collect();
    assert_eq!(
        devices.into_iter().collect::<Vec<_>>(),
        ["/job:master", "/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"]
    );
    assert_eq!(t.nodes.iter().filter(|n| n.op == "ApplyAdam" && n.device.starts_with("/job:ps")).count(), 8);
    // the master's RunGraph calls, one per task per step, each holding
    // that task's whole step
    let calls: Vec<_> = t.nodes.iter().filter(|n| n.op == "RunGraph").collect();
    assert_eq!(calls.len(), 6);
    let task_span = |d: &str| {
        let ns = t.nodes.iter().filter(|n| n.device.starts_with(d));
        (ns.clone().map(|n| n.start_us).fold(f64::INFINITY, f64::min), ns.map(|n| n.end_us).fold(0.0, f64::max))
    };
    let (first_call, last_answer) = (calls.iter().map(|n| n.start_us).fold(f64::INFINITY, f64::min), calls.iter().map(|n| n.end_us).fold(0.0, f64::max));
    for d in ["/job:ps", "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"] {
        let (s, e) = task_span(d);
        assert!(first_call < s && e < last_answer, "{d}: {s}..{e} outside the master's {first_call}..{last_answer}");
    }
    assert!(t.nodes.iter().all(|n| n.start_us >= 0.0 && n.end_us >= n.start_us && n.end_us <= t.total_us));
    cfg.devices = 2;
    let want = train(&data, &cfg).unwrap();
    assert_eq!(got.report.train_loss.to_bits(), want.train_loss.to_bits());
    assert_eq!(got.report.accuracy.to_bits(), want.accuracy.to_bits());
}

/// An asynchronous worker's updates 5 to 7 (one worker: one step at a
/// time): 3 x 8 transfers (4 variables out, 4 gradients back; the loss
/// stays on the worker), 3 x 4 Adam updates on ps:0.
#[test]
fn an_asynchronous_workers_traced_updates_are_its_steps() {
    let spec = local_spec(1);
    let _servers = TaskServer::start_all(&spec).unwrap();
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 1;
    let got = train_on_cluster(&digits(), &cfg, &spec, &ClusterTraining { mode: Mode::Async, timeline: Some((5, 7)), ..Default::default() }).unwrap();
    let t = &flowlab_engine::StepStats::merge_partitions(got.timeline.as_ref().expect("the recorded updates"));
    assert_eq!(t.transfers.len(), 24, "{:?}", t.transfers);
    assert_eq!(t.nodes.iter().filter(|n| n.op == "ApplyAdam").count(), 12);
}

/// Tasks emulating a slow link (0.1 Gbit/s, 100 us). A synchronous step
/// of 1 PS + 1 worker moves the 4 variables out and the 4 gradients
/// back; each direction's transfers queue one behind the other and every
/// gradient needs every variable, so no step can be shorter than the
/// closed form 8 x latency + bytes x 8 / bandwidth (the emulation is
/// never early), and the median step is about the step without the link
/// plus that. The numbers are those of the run without the link, and a
/// master that expects another link than a task's refuses it, naming it.
#[test]
fn an_emulated_link_between_tasks_slows_each_step_by_its_closed_form() {
    let data = digits();
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 1;
    let link = EmulatedLink::new(0.1, 100.0).unwrap();
    let run = |link: Option<EmulatedLink>| {
        let spec = local_spec(1);
        let _servers: Vec<TaskServer> =
            spec.tasks().map(|(t, _)| TaskServer::start_with_link(&spec, t, bind_task(&spec, t).unwrap(), link).unwrap()).collect();
        let how = ClusterTraining { master: MasterOptions { link, ..Default::default() }, ..Default::default() };
        train_on_cluster(&data, &cfg, &spec, &how).unwrap()
    };
    let plain = run(None);
    let slow = run(Some(link));
    assert_eq!((slow.transfers_per_step, slow.bytes_per_step), (8.0, 2.0 * 4.0 * 9610.0), "{slow:?}");
    let closed = 8.0 * link.latency_us * 1e-6 + slow.bytes_per_step * 8.0 / (link.gbps * 1e9);
    let shortest = slow.step_times_s.iter().copied().fold(f64::INFINITY, f64::min);
    assert_eq!(slow.step_times_s.len(), slow.report.steps);
    assert!(shortest >= closed, "a step of {shortest} s is shorter than the link allows ({closed} s)");
    // on top of the step without the link; each of the 8 hand-overs may
    // wake a little late (the OS's sleep), bounded here by a quarter
    assert!(
        slow.step_p50_s <= plain.step_p90_s + 1.25 * closed,
        "median {} s with the link, p90 {} s without, closed form {closed} s",
        slow.step_p50_s,
        plain.step_p90_s
    );
    assert_eq!((slow.link_gbps, slow.link_latency_us), (Some(0.1), Some(100.0)));
    assert_eq!((plain.link_gbps, plain.link_latency_us), (None, None));
    assert_eq!(slow.report.loss.to_bits(), plain.report.loss.to_bits());
    assert_eq!(slow.report.accuracy.to_bits(), plain.report.accuracy.to_bits());

    // ps:0 emulates the link, worker:0 none: a master expecting the
    // link refuses worker:0, one expecting none refuses ps:0
    let spec = local_spec(1);
    let ps = TaskId::new(Job::Ps, 0);
    let w = TaskId::new(Job::Worker, 0);
    let _a = TaskServer::start_with_link(&spec, ps, bind_task(&spec, ps).unwrap(), Some(link)).unwrap();
    let _b = TaskServer::start(&spec, w, bind_task(&spec, w).unwrap()).unwrap();
    let opts = |link| MasterOptions { connect_deadline: Duration::from_secs(10), link, ..Default::default() };
    let e = Master::connect(&spec, opts(Some(link))).err().unwrap().to_string();
    assert!(
        e.contains(&format!("task worker:0 at {}", spec.address(w).unwrap())) && e.contains("emulates no link but this run expects link 0.1gbps,100us"),
        "{e}"
    );
    let e = Master::connect(&spec, opts(None)).err().unwrap().to_string();
    assert!(e.contains("task ps:0") && e.contains("emulates link 0.1gbps,100us but this run expects no link"), "{e}");
}

#[test]
fn variables_sharded_over_two_ps_tasks_train_bit_for_bit_as_on_one() {
    let data = digits();
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 2;
    let run = |ps: u32, how: &ClusterTraining, cfg: &TrainConfig| {
        let spec = local_spec_ps(ps, 2 + how.backup as u32);
        let _servers = TaskServer::start_all(&spec).unwrap();
        train_on_cluster(&data, cfg, &spec, how).unwrap()
    };
    let one = run(1, &ClusterTraining::default(), &cfg);
    let two = run(2, &ClusterTraining::default(), &cfg);
    assert_eq!((two.ps, two.report.steps), (2, one.report.steps));
    // the same sums in the same order, each update on its variable's task
    assert_eq!(two.report.train_loss.to_bits(), one.report.train_loss.to_bits(), "{two:?} vs {one:?}");
    assert_eq!(two.report.accuracy.to_bits(), one.report.accuracy.to_bits(), "{two:?} vs {one:?}");
    assert_eq!(two.report.loss.to_bits(), one.report.loss.to_bits(), "{two:?} vs {one:?}");
    // greedy by size: hidden/w (64x128) alone on ps:0; logits/w
    // (128x10), hidden/b (128) and logits/b (10) on ps:1; each with its
    // two Adam slots (3 copies) and one f32 step counter per task
    let want = |elems: u64| elems * 3 * 4 + 4;
    let bytes: Vec<(String, u64)> = two.variable_bytes.clone().into_iter().collect();
    assert_eq!(bytes, [("ps:0".to_string(), want(64 * 128)), ("ps:1".to_string(), want(1280 + 128 + 10))]);
    assert_eq!(one.variable_bytes.values().copied().collect::<Vec<_>>(), [want(64 * 128 + 1280 + 128 + 10)]);
    // per step each worker fetches the 4 variables, sends back 4
    // gradients (to the variable's own task) and its loss to ps:0; two
    // PS tasks add only the control edges of ps:1's 3 updates to the
    // train op on ps:0 (a 4-byte token each)
    assert_eq!((one.transfers_per_step, one.bytes_per_step), (18.0, 2.0 * (2.0 * 4.0 * 9610.0 + 4.0)), "{one:?}");
    assert_eq!((two.transfers_per_step, two.bytes_per_step), (21.0, one.bytes_per_step + 12.0), "{two:?}");
    assert!(one.step_p10_s <= one.step_p50_s && one.step_p50_s <= one.step_p90_s && one.step_p10_s > 0.0, "{one:?}");
    // asynchronous, and 3 workers with 1 backup, over two PS tasks
    cfg.epochs = 3;
    let want = train(&data, &cfg).unwrap();
    for how in [ClusterTraining { mode: Mode::Async, ..Default::default() }, ClusterTraining { backup: 1, ..Default::default() }] {
        let got = run(2, &how, &cfg);
        assert!((got.report.accuracy - want.accuracy).abs() <= 0.02, "{how:?}: {got:?} vs {want:?}");
        assert!(got.variable_bytes.values().all(|&b| b > 0), "{got:?}");
    }
}

#[test]
fn asynchronous_workers_reach_the_single_process_accuracy() {
    let spec = local_spec(2);
    let _servers = TaskServer::start_all(&spec).unwrap();
    let data = digits();
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 3;
    let got = train_on_cluster(&data, &cfg, &spec, &ClusterTraining { mode: Mode::Async, ..Default::default() }).unwrap();
    let want = train(&data, &cfg).unwrap();
    // every batch of the one-process schedule, once per epoch
    assert_eq!((got.report.steps, got.mode, got.workers), (want.steps, Mode::Async, 2));
    // stale reads change the path, not where it ends: 2 points (7 of
    // the 359 held-out examples)
    assert!((got.report.accuracy - want.accuracy).abs() <= 0.02, "{got:?} vs {want:?}");
    assert!(got.report.accuracy > 0.9, "{got:?}");
}

#[test]
fn a_backup_worker_leaves_the_accuracy_and_every_shard_is_applied_or_dropped() {
    let spec = local_spec(3);
    let _servers = TaskServer::start_all(&spec).unwrap();
    let data = digits();
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 3;
    let got = train_on_cluster(&data, &cfg, &spec, &ClusterTraining { backup: 1, ..Default::default() }).unwrap();
    let want = train(&data, &cfg).unwrap();
    assert_eq!((got.mode, got.workers, got.backup), (Mode::Sync, 3, 1));
    // 2 gradients per update from shards of 16: every shard of the
    // one-process schedule (2 per batch of 32) is applied or dropped
    assert_eq!(got.report.steps as u64 * 2 + got.dropped_gradients, want.steps as u64 * 2, "{got:?}");
    assert!(got.dropped_gradients > 0, "a third worker's gradient is never needed: {got:?}");
    // fewer updates (dropped shards) on staler data: within 3 points
    // (which shards are dropped depends on timing: 25 runs on this
    // 2-core host ended 0 to 1.7 points under, and one run of the
    // whole suite more than 2 under)
    assert!((got.report.accuracy - want.accuracy).abs() <= 0.03, "{got:?} vs {want:?}");
}

#[test]
fn a_dead_worker_does_not_stop_training_with_a_backup() {
    let spec = local_spec(3);
    let servers: Vec<parking_lot::Mutex<Option<TaskServer>>> = spec
        .tasks()
        .map(|(t, _)| parking_lot::Mutex::new(Some(TaskServer::start(&spec, t, bind_task(&spec, t).unwrap()).unwrap())))
        .collect();
    let data = digits();
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 3;
    // worker:2 (the last task) stops serving after update 20
    let kill = |steps: usize| {
        if steps == 20 {
            drop(servers[3].lock().take());
        }
    };
    let how = ClusterTraining { backup: 1, ..Default::default() };
    let got = train_on_cluster_with(&data, &cfg, &spec, &how, &Hooks { on_step: &kill, restart: None, steps_done: None }).unwrap();
    let want = train(&data, &cfg).unwrap();
    assert_eq!(got.failed_workers, ["worker:2"], "{got:?}");
    assert!(got.report.steps > 20 && got.report.steps as u64 * 2 + got.dropped_gradients == want.steps as u64 * 2, "{got:?}");
    assert!((got.report.accuracy - want.accuracy).abs() <= 0.02, "{got:?} vs {want:?}");
    // without a backup the same death ends training, naming the task
    let spec = local_spec(2);
    let servers: Vec<parking_lot::Mutex<Option<TaskServer>>> = spec
        .tasks()
        .map(|(t, _)| parking_lot::Mutex::new(Some(TaskServer::start(&spec, t, bind_task(&spec, t).unwrap()).unwrap())))
        .collect();
    let kill = |steps: usize| {
        if steps == 5 {
            drop(servers[2].lock().take());
        }
    };
    let t = std::time::Instant::now();
    // Recvs would wait 30 s: the master's AbortStep ends the PS's step at once
    let how = ClusterTraining { master: MasterOptions { recv_timeout: Duration::from_secs(30), ..Default::default() }, ..Default::default() };
    let e = train_on_cluster_with(&data, &cfg, &spec, &how, &Hooks { on_step: &kill, restart: None, steps_done: None }).unwrap_err().to_string();
    let w1 = TaskId::new(Job::Worker, 1);
    assert!(e.starts_with(&format!("task {w1} at {}: RunGraph step 7", spec.address(w1).unwrap())), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

#[test]
fn the_chiefs_checkpoints_hold_what_the_in_process_run_saves() {
    use crate::train::CheckpointConfig;
    let spec = local_spec(2);
    let _servers = TaskServer::start_all(&spec).unwrap();
    let data = digits();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 1;
    let ck = |sub: &str| CheckpointConfig { dir: dir.path().join(sub), every: 20, keep: 5, resume: false };
    let how = ClusterTraining { checkpoint: Some(ck("cluster")), ..Default::default() };
    let got = train_on_cluster(&data, &cfg, &spec, &how).unwrap();
    assert_eq!(got.report.steps, 45);
    cfg.devices = 2;
    cfg.checkpoint = Some(ck("local"));
    train(&data, &cfg).unwrap();
    let mine = CheckpointManager::new(&dir.path().join("cluster"), 5).unwrap();
    // every 20 updates, and the end of training (update 45)
    assert_eq!(mine.steps().unwrap(), [20, 40, 45]);
    for step in [20, 40, 45] {
        let a = flowlab_engine::checkpoint::read(&mine.path(step)).unwrap();
        let b = flowlab_engine::checkpoint::read(&CheckpointManager::new(&dir.path().join("local"), 5).unwrap().path(step)).unwrap();
        assert_eq!(a.tensors.keys().collect::<Vec<_>>(), b.tensors.keys().collect::<Vec<_>>());
        for (name, t) in &a.tensors {
            let bits = |x: &Tensor| x.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(t), bits(&b.tensors[name]), "{name} at step {step}");
        }
        assert_eq!(a.metadata["step"], step.to_string());
    }
    // asynchronous updates: the chief saves with no update in flight,
    // each file named by the global update count it holds
    let how = ClusterTraining { mode: Mode::Async, checkpoint: Some(ck("async")), ..Default::default() };
    let got = train_on_cluster(&data, &cfg, &spec, &how).unwrap();
    let steps = CheckpointManager::new(&dir.path().join("async"), 5).unwrap().steps().unwrap();
    assert!(!steps.is_empty() && steps.iter().all(|&s| s as usize <= got.report.steps), "{steps:?}");
    for s in steps {
        let c = flowlab_engine::checkpoint::read(&CheckpointManager::new(&dir.path().join("async"), 5).unwrap().path(s)).unwrap();
        assert_eq!(c.metadata["step"], s.to_string());
    }
}

#[test]
fn a_resumed_cluster_run_ends_as_if_never_stopped() {
    use crate::train::CheckpointConfig;
    let spec = local_spec_ps(2, 2);
    let _servers = TaskServer::start_all(&spec).unwrap();
    let data = digits();
    let dir = tempfile::tempdir().unwrap();
    let ck = |resume: bool| CheckpointConfig { dir: dir.path().into(), every: 20, keep: 2, resume };
    // a first run stops after 1 epoch (45 updates; checkpoints 20, 40)
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 1;
    train_on_cluster(&data, &cfg, &spec, &ClusterTraining { checkpoint: Some(ck(false)), ..Default::default() }).unwrap();
    // a newer, torn file is skipped and named
    std::fs::write(CheckpointManager::new(dir.path(), 2).unwrap().path(45), b"torn").unwrap();
    cfg.epochs = 2;
    let got = train_on_cluster(&data, &cfg, &spec, &ClusterTraining { checkpoint: Some(ck(true)), ..Default::default() }).unwrap();
    assert_eq!(got.report.resumed_from_step, Some(40), "{got:?}");
    assert_eq!(got.report.skipped_checkpoints.len(), 1, "{got:?}");
    let mut want_cfg = cfg.clone();
    want_cfg.devices = 2;
    let want = train(&data, &want_cfg).unwrap();
    assert_eq!(got.report.steps, want.steps);
    assert_eq!(got.report.accuracy.to_bits(), want.accuracy.to_bits(), "{got:?} vs {want:?}");
    assert_eq!(got.report.loss.to_bits(), want.loss.to_bits(), "{got:?} vs {want:?}");
    // another batch size refuses the folder, naming the setting
    cfg.batch = 16;
    let e = train_on_cluster(&data, &cfg, &spec, &ClusterTraining { checkpoint: Some(ck(true)), ..Default::default() }).unwrap_err().to_string();
    assert!(e.contains("with batch 32, this run has batch 16"), "{e}");
}

/// `--resume` of the modes whose update order is not fixed: an async
/// run and a backup-worker run stopped after one epoch go on from
/// their newest checkpoint (the global update it holds; the shards
/// taken when it was saved) and, as their uninterrupted runs, apply
/// every batch of the one-process schedule (async) or apply or drop
/// every shard once (backup workers), within those runs' accuracy
/// tolerance of one process.
#[test]
fn async_and_backup_runs_resume_from_their_newest_checkpoint() {
    use crate::train::CheckpointConfig;
    let data = digits();
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 3;
    let one = train(&data, &cfg).unwrap();
    for (workers, how) in [
        (2, ClusterTraining { mode: Mode::Async, ..Default::default() }),
        (3, ClusterTraining { backup: 1, ..Default::default() }),
    ] {
        let spec = local_spec(workers);
        let _servers = TaskServer::start_all(&spec).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ck = |resume: bool| Some(CheckpointConfig { dir: dir.path().into(), every: 20, keep: 2, resume });
        let mut first = cfg.clone();
        first.epochs = 1;
        let a = train_on_cluster(&data, &first, &spec, &ClusterTraining { checkpoint: ck(false), ..how.clone() }).unwrap();
        let saved = CheckpointManager::new(dir.path(), 2).unwrap().steps().unwrap();
        let newest = *saved.last().unwrap() as usize;
        assert!(newest >= 20 && newest <= a.report.steps, "{saved:?} {a:?}");
        let got = train_on_cluster(&data, &cfg, &spec, &ClusterTraining { checkpoint: ck(true), ..how.clone() }).unwrap();
        assert_eq!(got.report.resumed_from_step, Some(newest as u64), "{got:?}");
        if how.mode == Mode::Async {
            assert_eq!(got.report.steps, one.steps, "{got:?}");
        } else {
            assert_eq!(got.report.steps as u64 * 2 + got.dropped_gradients, one.steps as u64 * 2, "{got:?}");
        }
        assert!((got.report.accuracy - one.accuracy).abs() <= 0.03, "{got:?} vs {one:?}");
        // the other mode's folder is refused, naming the setting
        let other = if how.mode == Mode::Async { ClusterTraining::default() } else { ClusterTraining { mode: Mode::Async, ..Default::default() } };
        let e = train_on_cluster(&data, &cfg, &spec, &ClusterTraining { checkpoint: ck(true), ..other }).unwrap_err().to_string();
        assert!(e.contains("this run has"), "{e}");
    }
}

#[test]
fn a_dead_ps_restarts_from_the_last_checkpoint_and_ends_as_if_never_stopped() {
    dead_ps_case(1, 0);
    // variables sharded over two PS tasks: ps:1 dies, every variable
    // (ps:0's too, which had moved on) comes back from the checkpoint
    dead_ps_case(2, 1);
}

fn dead_ps_case(ps_tasks: u32, victim: usize) {
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 2;
    let got = with_a_dead_ps(ps_tasks, 2, victim, &cfg, ClusterTraining::default());
    assert_eq!((got.restarts, got.steps_lost), (1, 10), "{got:?}");
    // the checkpoint holds every variable and slot, the replay the same
    // batches: the end is the uninterrupted run's, bit for bit
    cfg.devices = 2;
    let want = train(&digits(), &cfg).unwrap();
    assert_eq!(got.report.steps, want.steps);
    assert_eq!(got.report.accuracy.to_bits(), want.accuracy.to_bits(), "{got:?} vs {want:?}");
    assert_eq!(got.report.loss.to_bits(), want.loss.to_bits(), "{got:?} vs {want:?}");
}

/// Trains `how` (checkpoints every 20 updates added) on task servers
/// in this process, `ps:victim` stopped after update 30 and started
/// again when the run asks.
fn with_a_dead_ps(ps_tasks: u32, workers: u32, victim: usize, cfg: &TrainConfig, how: ClusterTraining) -> ClusterTrainReport {
    use crate::train::CheckpointConfig;
    let spec = local_spec_ps(ps_tasks, workers);
    let servers: Vec<parking_lot::Mutex<Option<TaskServer>>> = spec
        .tasks()
        .map(|(t, _)| parking_lot::Mutex::new(Some(TaskServer::start(&spec, t, bind_task(&spec, t).unwrap()).unwrap())))
        .collect();
    let data = digits();
    let dir = tempfile::tempdir().unwrap();
    let how = ClusterTraining { checkpoint: Some(CheckpointConfig { dir: dir.path().into(), every: 20, keep: 2, resume: false }), ..how };
    let ps = TaskId::new(Job::Ps, victim as u32);
    let first = servers[victim].lock().as_ref().unwrap().incarnation;
    // the PS task dies after update 30 (its checkpoint of update 20 stays), once
    let killed = std::sync::atomic::AtomicBool::new(false);
    let kill = |steps: usize| {
        if steps == 30 && !killed.swap(true, std::sync::atomic::Ordering::Relaxed) {
            drop(servers[victim].lock().take());
        }
    };
    let restart = |t: TaskId| -> Result<()> {
        assert_eq!(t, ps);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match bind_task(&spec, t) {
                Ok(l) => break l,
                Err(e) if std::time::Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        *servers[victim].lock() = Some(TaskServer::start(&spec, t, listener)?);
        Ok(())
    };
    let got = train_on_cluster_with(&data, cfg, &spec, &how, &Hooks { on_step: &kill, restart: Some(&restart), steps_done: None }).unwrap();
    assert_ne!(servers[victim].lock().as_ref().unwrap().incarnation, first);
    got
}

#[test]
fn a_dead_ps_restarts_from_the_last_checkpoint_with_backups_and_async() {
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 3;
    let one = train(&digits(), &cfg).unwrap();
    // 3 workers, 1 backup, 2 PS tasks (ps:1 dies): update 20's
    // checkpoint and the shards after it; every shard applied or dropped
    let got = with_a_dead_ps(2, 3, 1, &cfg, ClusterTraining { backup: 1, ..Default::default() });
    assert_eq!((got.restarts, got.steps_lost, got.failed_workers.len()), (1, 10, 0), "{got:?}");
    assert_eq!(got.report.steps as u64 * 2 + got.dropped_gradients, one.steps as u64 * 2, "{got:?}");
    assert!((got.report.accuracy - one.accuracy).abs() <= 0.02, "{got:?} vs {one:?}");
    // 2 asynchronous workers: the checkpoint of update 20 or one more
    // (the other worker's update in flight when the chief closed the
    // gate), the PS killed after update 30 (the other may reach 31).
    // Tolerances as for the uninterrupted runs: 2 points.
    let got = with_a_dead_ps(1, 2, 0, &cfg, ClusterTraining { mode: Mode::Async, ..Default::default() });
    assert_eq!(got.restarts, 1, "{got:?}");
    assert!((9..=11).contains(&got.steps_lost), "{got:?}");
    assert_eq!(got.report.steps, one.steps);
    assert!((got.report.accuracy - one.accuracy).abs() <= 0.02, "{got:?} vs {one:?}");
}

/// `eval_every`: the held-out accuracy after every N updates, with
/// nothing in flight. Synchronous: at the multiples, the last one the
/// final evaluation's bit for bit (the same variables); asynchronous:
/// each at most `workers - 1` updates past its multiple.
#[test]
fn evaluations_every_n_updates_follow_training() {
    let spec = local_spec(2);
    let _servers = TaskServer::start_all(&spec).unwrap();
    let data = digits();
    let mut cfg = TrainConfig::new(ModelKind::Mlp);
    cfg.epochs = 1;
    let got = train_on_cluster(&data, &cfg, &spec, &ClusterTraining { eval_every: Some(15), ..Default::default() }).unwrap();
    assert_eq!(got.report.steps, 45);
    let at: Vec<usize> = got.accuracy_curve.iter().map(|p| p.0).collect();
    assert_eq!(at, [15, 30, 45]);
    assert_eq!(got.accuracy_curve[2].1.to_bits(), got.report.accuracy.to_bits());
    assert!(got.accuracy_curve[0].1 < got.accuracy_curve[2].1, "{:?}", got.accuracy_curve);
    let got = train_on_cluster(&data, &cfg, &spec, &ClusterTraining { mode: Mode::Async, eval_every: Some(10), ..Default::default() }).unwrap();
    assert!(!got.accuracy_curve.is_empty());
    for (k, &(at, a)) in got.accuracy_curve.iter().enumerate() {
        let due = 10 * (k + 1);
        assert!((due..due + 2).contains(&at) && (0.0..=1.0).contains(&a), "{:?}", got.accuracy_curve);
    }
}

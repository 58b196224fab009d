//! Synchronous data-parallel training of the digits recipes over a cluster
//! (sections 4.4 and 5 of the TensorFlow paper, with 0 backup workers).
//!
//! Contract. The model's variables, the gradient average and the one Adam
//! update per step live on `ps:0`; worker `i` is fed shard `i` of each
//! batch on its own device, computes its gradients there and sends them to
//! the PS. The batches, the shards and the initial values are those of
//! `flowlab train --devices N --placement replicas` with N = the number of
//! workers, so the run computes what that in-process run computes, bit for
//! bit (same kernels on the same shapes; tested).

use std::time::Instant;

use flowlab_engine::{EngineError, Graph, Output, PartitionOptions, Tensor};
use flowlab_programs::datasets::Dataset;
use flowlab_programs::train::{Batches, ParallelPlacement, TrainConfig, TrainReport, batch_tensors, build_sharded, split_holdout};
use serde::Serialize;

use crate::cluster::{ClusterSpec, Job, TaskId};
use crate::error::{Result, RuntimeError};
use crate::master::{Master, MasterOptions};

/// What `flowlab train --local-cluster` prints: the single-process report
/// plus the cluster's figures.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterTrainReport {
    #[serde(flatten)]
    pub report: TrainReport,
    /// `sync` (all workers' gradients averaged into each update).
    pub mode: &'static str,
    pub ps: usize,
    pub workers: usize,
    /// Training steps per second (the whole cluster).
    pub steps_per_second: f64,
    /// Times a task was restarted (fault tolerance is not in this slice: 0).
    pub restarts: u64,
    /// Steps computed but not applied because of a failure (0).
    pub steps_lost: u64,
}

fn config(detail: String) -> RuntimeError {
    RuntimeError::Engine { message: detail }
}

/// Trains `cfg` on `data` over the tasks of `spec` (see the module comment).
/// `cfg.devices` is taken as the number of workers in `spec`.
pub fn train_on_cluster(data: &Dataset, cfg: &TrainConfig, spec: &ClusterSpec, opts: MasterOptions) -> Result<ClusterTrainReport> {
    let start = Instant::now();
    let workers: Vec<TaskId> = spec.job_tasks(Job::Worker).map(|(t, _)| t).collect();
    let ps: Vec<TaskId> = spec.job_tasks(Job::Ps).map(|(t, _)| t).collect();
    let Some(&ps0) = ps.first() else {
        return Err(config("the cluster has no ps task to hold the variables".into()));
    };
    if workers.is_empty() {
        return Err(config("the cluster has no worker task".into()));
    }
    let mut cfg = cfg.clone();
    cfg.devices = workers.len();
    cfg.placement = ParallelPlacement::Replicas;
    cfg.validate()?;
    let (train_set, test_set) = split_holdout(data, cfg.seed);
    if train_set.is_empty() || test_set.is_empty() {
        return Err(config(format!("{} examples are too few to hold a fifth out", data.len())));
    }
    let g = Graph::new();
    let devices: Vec<_> = workers.iter().map(|t| t.device()).collect();
    let sg = build_sharded(&g, &cfg, data.features, &ps0.device(), &devices)?;
    let mut master = Master::connect(spec, MasterOptions { partition: PartitionOptions { format: cfg.comm, ..Default::default() }, ..opts })?;
    master.register(&g)?;
    master.run(&[], &[], &[&sg.init])?;

    let n = workers.len();
    let mut batches = Batches::new(train_set.len(), &cfg, n);
    let (mut steps, mut train_loss) = (0usize, f64::NAN);
    let train_start = Instant::now();
    for _ in 0..cfg.epochs {
        let (mut sum, mut count) = (0.0, 0usize);
        for idx in batches.next_epoch() {
            let shard = idx.len() / n;
            let mut tensors: Vec<(Tensor, Tensor)> = Vec::with_capacity(n);
            for i in 0..n {
                tensors.push(batch_tensors(&train_set, &idx[i * shard..(i + 1) * shard])?);
            }
            let mut feeds: Vec<(&Output, &Tensor)> = Vec::with_capacity(2 * n);
            for (i, (x, y)) in tensors.iter().enumerate() {
                feeds.push((&sg.xs[i], x));
                feeds.push((&sg.ys[i], y));
            }
            let out = master.run(&feeds, &[&sg.loss], &[&sg.train_op])?;
            let loss = out.first().ok_or_else(|| config("the step fetched no loss".into()))?.scalar_f64()?;
            sum += loss * idx.len() as f64;
            count += idx.len();
            steps += 1;
        }
        train_loss = sum / count.max(1) as f64;
    }
    let train_seconds = train_start.elapsed().as_secs_f64();
    let all: Vec<usize> = (0..test_set.len()).collect();
    let (tx, ty) = batch_tensors(&test_set, &all)?;
    let out = master.run(&[(&sg.eval_x, &tx), (&sg.eval_y, &ty)], &[&sg.eval_accuracy, &sg.eval_loss], &[])?;
    let scalar = |i: usize| -> Result<f64> {
        Ok(out.get(i).ok_or_else(|| RuntimeError::from(EngineError::Tensor("evaluation fetched too few values".into())))?.scalar_f64()?)
    };
    let report = TrainReport {
        model: cfg.model,
        accuracy: scalar(0)?,
        loss: scalar(1)?,
        train_loss,
        steps,
        epochs: cfg.epochs,
        seconds: start.elapsed().as_secs_f64(),
        seconds_per_epoch: train_seconds / cfg.epochs as f64,
        train_examples: train_set.len(),
        test_examples: test_set.len(),
        devices: n,
        placement: ParallelPlacement::Replicas,
        comm: cfg.comm,
        transfers: None,
        bytes_sent: None,
        bytes_f32: None,
        resumed_from_step: None,
        skipped_checkpoints: Vec::new(),
    };
    Ok(ClusterTrainReport {
        report,
        mode: "sync",
        ps: ps.len(),
        workers: n,
        steps_per_second: steps as f64 / train_seconds.max(1e-9),
        restarts: 0,
        steps_lost: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::bind_task;
    use crate::worker::TaskServer;
    use flowlab_programs::train::{ModelKind, train};
    use std::net::TcpListener;

    pub(crate) fn local_spec(workers: u32) -> ClusterSpec {
        let port = || TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut tasks = vec![(TaskId::new(Job::Ps, 0), format!("127.0.0.1:{}", port()))];
        for i in 0..workers {
            tasks.push((TaskId::new(Job::Worker, i), format!("127.0.0.1:{}", port())));
        }
        ClusterSpec::from_tasks(tasks).unwrap()
    }

    fn digits() -> Dataset {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/digits.csv.gz");
        flowlab_programs::datasets::load_digits(&path).unwrap()
    }

    #[test]
    fn one_ps_and_two_workers_compute_what_two_local_replicas_do() {
        let spec = local_spec(2);
        let _servers: Vec<TaskServer> = spec.tasks().map(|(t, _)| TaskServer::start(&spec, t, bind_task(&spec, t).unwrap()).unwrap()).collect();
        let data = digits();
        let mut cfg = TrainConfig::new(ModelKind::Mlp);
        cfg.epochs = 2;
        let got = train_on_cluster(&data, &cfg, &spec, MasterOptions::default()).unwrap();
        cfg.devices = 2;
        let want = train(&data, &cfg).unwrap();
        assert_eq!(got.report.steps, want.steps);
        assert_eq!((got.workers, got.ps, got.mode), (2, 1, "sync"));
        // the same batches, shards, initial values and the same kernels on
        // the same shapes: bit for bit what the in-process run computes
        assert_eq!(got.report.train_loss.to_bits(), want.train_loss.to_bits(), "{got:?} vs {want:?}");
        assert_eq!(got.report.accuracy.to_bits(), want.accuracy.to_bits(), "{got:?} vs {want:?}");
        assert_eq!(got.report.loss.to_bits(), want.loss.to_bits(), "{got:?} vs {want:?}");
        assert!(got.report.accuracy > 0.85, "{got:?}");
    }
}

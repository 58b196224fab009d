//! What a cluster run reports.

use super::*;

/// What `flowlab train --local-cluster` prints: the single-process report
/// plus the cluster's figures.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterTrainReport {
    #[serde(flatten)]
    pub report: TrainReport,
    pub mode: Mode,
    pub ps: usize,
    pub workers: usize,
    /// Backup workers (synchronous mode).
    pub backup: usize,
    /// Gradients computed but not applied: those of backup workers that
    /// came after the first `workers - backup` of their step.
    pub dropped_gradients: u64,
    /// Workers that died during training (backup mode goes on without them).
    pub failed_workers: Vec<String>,
    /// Training steps per second (the whole cluster).
    pub steps_per_second: f64,
    /// Times the PS was restarted after it died.
    pub restarts: u64,
    /// Updates done again after restarts (since the checkpoint restored).
    pub steps_lost: u64,
    /// Per PS task, the bytes of the variables it holds (optimizer slots,
    /// step counters and backup stashes included), from the placement.
    pub variable_bytes: BTreeMap<String, u64>,
    /// Step time percentiles, seconds: the master's training `RunGraph`
    /// round (synchronous), a worker's step (asynchronous), or the time
    /// from one update to the next (backup workers).
    pub step_p10_s: f64,
    pub step_p50_s: f64,
    pub step_p90_s: f64,
    /// Tensors moved between tasks per training step (`RecvTensor`
    /// answers), and their data bytes in the communication format.
    pub transfers_per_step: f64,
    pub bytes_per_step: f64,
    /// Data bytes of the master's feeds and fetches per training step.
    pub master_bytes_per_step: f64,
    /// The emulated link between the tasks (`--link`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_gbps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_latency_us: Option<f64>,
    /// With injected stragglers: the compute time their factors scale.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub straggler_compute_s: Option<f64>,
    /// With `eval_every`: (global update, held-out accuracy) after every
    /// `eval_every` updates (asynchronous: at the update the gate closed
    /// on, up to `workers - 1` past the multiple).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub accuracy_curve: Vec<(usize, f64)>,
    /// Every step time, seconds (not in the JSON line).
    #[serde(skip)]
    pub step_times_s: Vec<f64>,
    /// The recorded updates' partitions, every task's of every step
    /// ([`ClusterTraining::timeline`]; one trace:
    /// [`flowlab_engine::StepStats::merge_partitions`]; not in the JSON
    /// line).
    #[serde(skip)]
    pub timeline: Option<Vec<flowlab_engine::PartitionTimeline>>,
}

/// The `q` quantile (0..1) of `v` by the nearest rank; NaN when empty.
pub fn percentile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    out: Vec<Tensor>,
    steps: usize,
    train_loss: f64,
    start: Instant,
    train_seconds: f64,
    cfg: &TrainConfig,
    train_set: &Dataset,
    test_set: &Dataset,
    mode: Mode,
    ps: usize,
    n: usize,
) -> Result<ClusterTrainReport> {
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
        batch: cfg.batch,
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
        mode,
        ps,
        workers: n,
        backup: 0,
        dropped_gradients: 0,
        failed_workers: Vec::new(),
        steps_per_second: steps as f64 / train_seconds.max(1e-9),
        restarts: 0,
        steps_lost: 0,
        variable_bytes: BTreeMap::new(),
        step_p10_s: f64::NAN,
        step_p50_s: f64::NAN,
        step_p90_s: f64::NAN,
        transfers_per_step: 0.0,
        bytes_per_step: 0.0,
        master_bytes_per_step: 0.0,
        link_gbps: None,
        link_latency_us: None,
        straggler_compute_s: None,
        accuracy_curve: Vec::new(),
        step_times_s: Vec::new(),
        timeline: None,
    })
}


//! What a cluster run reports, and the flat metrics a sweep writes as CSV.

use crate::network::LinkUsage;
use serde::Serialize;
use std::collections::BTreeMap;

/// Keys of [`ClusterReport::metrics`], in CSV column order.
pub(crate) const METRIC_NAMES: &[&str] = &[
    "throughput",
    "step_p50_s",
    "step_p90_s",
    "step_p99_s",
    "step_mean_s",
    "normalized_speedup",
    "staleness_mean",
    "staleness_p99",
    "implicit_momentum",
    "bytes_moved",
    "link_util_max",
    "goodput",
    "sim_time_s",
    "failures",
    "updates_to_accuracy",
    "time_to_accuracy_s",
];

/// The outcome of one simulated training run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClusterReport {
    /// Duration of every completed step, in completion order (for async and
    /// sync groups: every group step; steps later lost to a failure included).
    pub step_times_s: Vec<f64>,
    /// Worker 0's part of each step whose update took its gradient (PS
    /// training; empty with all-reduce), in seconds: the master's part
    /// (the step overhead, dispatch and wait before its fetches go out, and
    /// `step_end_wait_us` after the last task), then until its last parameter
    /// shard is in, until its gradients are computed, and until the step
    /// ends (pushes, their PS requests, the other workers, update tokens).
    /// Comparable phase by phase with a traced real step.
    pub worker0_phases_s: Vec<[f64; 4]>,
    /// `staleness_histogram[s]`: applied gradients computed from parameters
    /// `s` updates old.
    pub staleness_histogram: Vec<u64>,
    /// Simulated time from start to the last committed step.
    pub sim_time_s: f64,
    /// Examples whose gradients survive to the end (not rolled back).
    pub examples_committed: u64,
    /// Examples whose gradients were applied, rolled back or not.
    pub examples_processed: u64,
    /// Simulated time not spent checkpointing or recovering.
    pub busy_time_s: f64,
    /// Payload bytes of every flow started.
    pub bytes_moved: u64,
    /// Links that carried traffic.
    pub link_usage: Vec<LinkUsage>,
    pub link_util_max: f64,
    pub failures: u32,
    /// Events processed (queue events plus network completions).
    pub events: u64,
    /// Flow-level bandwidth-share recomputations (0 for the analytical model).
    pub network_recomputations: u64,
    /// FNV-1a over every flow's (tag, arrival picoseconds) in arrival-report
    /// order (0 for the analytical model): equal digests, the same network
    /// timeline bit for bit.
    pub flow_digest: u64,
    /// Workers a step needs, and backup workers on top of them.
    pub workers: u32,
    pub backup_workers: u32,
    /// Median step time of the same run without backup workers (set by
    /// `simulate` when the config has backups).
    pub baseline_step_p50_s: Option<f64>,
    /// Asynchronous runs of a workload with a convergence model: the model.
    pub convergence: Option<crate::cluster::workload::Convergence>,
    /// Examples one update applies (asynchronous: one worker's step).
    pub examples_per_update: u64,
}

/// Nearest-rank percentile of sorted values (0 for none).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl ClusterReport {
    pub fn step_percentile(&self, q: f64) -> f64 {
        let mut s = self.step_times_s.clone();
        s.sort_by(f64::total_cmp);
        percentile(&s, q)
    }

    /// Committed examples per second of simulated time.
    pub fn throughput(&self) -> f64 {
        if self.sim_time_s > 0.0 {
            self.examples_committed as f64 / self.sim_time_s
        } else {
            0.0
        }
    }

    /// Fraction of the run's time that produced kept progress: the share of
    /// work not rolled back times the share of time not spent on
    /// checkpoints or recovery. 1 without failures and checkpoints.
    pub fn goodput(&self) -> f64 {
        if self.examples_processed == 0 || self.sim_time_s <= 0.0 {
            return 0.0;
        }
        self.examples_committed as f64 / self.examples_processed as f64 * (self.busy_time_s / self.sim_time_s)
    }

    /// t(0)/t(b) * N/(N+b) on median step times; 1 without backups.
    pub fn normalized_speedup(&self) -> f64 {
        match self.baseline_step_p50_s {
            Some(t0) if self.backup_workers > 0 => {
                let tb = self.step_percentile(0.5);
                if tb <= 0.0 {
                    return 0.0;
                }
                let n = self.workers as f64;
                t0 / tb * n / (n + self.backup_workers as f64)
            }
            _ => 1.0,
        }
    }

    /// Every key of [`METRIC_NAMES`].
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        let mut sorted = self.step_times_s.clone();
        sorted.sort_by(f64::total_cmp);
        let mean = if sorted.is_empty() {
            0.0
        } else {
            sorted.iter().sum::<f64>() / sorted.len() as f64
        };
        let total: u64 = self.staleness_histogram.iter().sum();
        let staleness_mean = if total == 0 {
            0.0
        } else {
            self.staleness_histogram
                .iter()
                .enumerate()
                .map(|(s, &c)| s as f64 * c as f64)
                .sum::<f64>()
                / total as f64
        };
        let mut staleness_p99 = 0.0;
        let mut acc = 0u64;
        for (s, &c) in self.staleness_histogram.iter().enumerate() {
            acc += c;
            if total > 0 && acc as f64 >= 0.99 * total as f64 {
                staleness_p99 = s as f64;
                break;
            }
        }
        // asynchronous only, with a convergence model: the updates to the
        // target at this run's staleness, and the time they take at its
        // update rate; not a number otherwise
        let updates_to_accuracy = self.convergence.map_or(f64::NAN, |c| c.updates_at(staleness_mean));
        let update_rate = self.throughput() / self.examples_per_update.max(1) as f64;
        let time_to_accuracy = if update_rate > 0.0 { updates_to_accuracy / update_rate } else { f64::NAN };
        let values = [
            self.throughput(),
            percentile(&sorted, 0.5),
            percentile(&sorted, 0.9),
            percentile(&sorted, 0.99),
            mean,
            self.normalized_speedup(),
            staleness_mean,
            staleness_p99,
            implicit_momentum(staleness_mean),
            self.bytes_moved as f64,
            self.link_util_max,
            self.goodput(),
            self.sim_time_s,
            self.failures as f64,
            updates_to_accuracy,
            time_to_accuracy,
        ];
        METRIC_NAMES
            .iter()
            .zip(values)
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }
}

/// What asynchrony costs statistically, as momentum: with staleness S
/// geometric, P(S = s) = (1 - C)·Cˢ, the expected asynchronous SGD update
/// is the momentum update with momentum C and step (1 - C)·η (Mitliagkas,
/// Zhang, Hadjis and Ré, "Asynchrony begets momentum, with an application
/// to deep learning", Allerton 2016; C = 1 - 1/M for their queueing model
/// of M workers). C is taken from the measured mean staleness, C / (1 - C)
/// = mean: the geometric distribution of the same mean (the simulated
/// distribution is not geometric; the figure is that model's, not a
/// measurement of convergence). The momentum adds to the optimizer's own;
/// once the sum passes the value tuned for synchronous training, more steps
/// are needed to reach the same accuracy (the paper's experiments), so
/// asynchronous throughput is not time to accuracy. 0 for synchronous runs.
fn implicit_momentum(staleness_mean: f64) -> f64 {
    staleness_mean / (1.0 + staleness_mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[3.0], 0.9), 3.0);
        assert_eq!(percentile(&[], 0.9), 0.0);
    }
}

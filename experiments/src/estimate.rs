//! How long `flowlab run` will take, said by `flowlab check` before
//! anything runs: from the stored runs of an earlier invocation when there
//! are any (the same points, measured on this machine), else from a few of
//! the sweep's own points run now (simulation kinds: milliseconds each),
//! else (kinds that time real runs) from what the kind's catalog points
//! took on a 2-core machine.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use crate::experiment::Experiment;
use crate::kinds::PointEnv;

/// Points run to time a simulation sweep, at most.
const SAMPLES: usize = 5;
/// Wall time the sampling may take before it stops (after one point).
const SAMPLE_BUDGET_S: f64 = 3.0;

/// An estimate of a run's wall time and what it rests on.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEstimate {
    /// Seconds, low and high end (equal unless the basis is a range).
    pub seconds: (f64, f64),
    /// What the figure comes from, for the reader.
    pub basis: String,
}

impl std::fmt::Display for RunEstimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (lo, hi) = self.seconds;
        if (hi - lo).abs() <= 0.05 * hi.max(1e-9) {
            write!(f, "estimated run time: {} ({})", duration(hi), self.basis)
        } else {
            write!(f, "estimated run time: {} to {} ({})", duration(lo), duration(hi), self.basis)
        }
    }
}

/// `0.4 s`, `12 s`, `3.5 min`, `2.1 h`.
fn duration(s: f64) -> String {
    match s {
        s if s < 10.0 => format!("{s:.1} s"),
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7200.0 => format!("{:.1} min", s / 60.0),
        s => format!("{:.1} h", s / 3600.0),
    }
}

impl Experiment {
    /// How long running every run would take with `jobs` threads (all
    /// cores if `None`; one for kinds that time real runs), given what is
    /// stored in `out_dir` (`out/NAME` if `None`).
    pub fn estimate(&self, out_dir: Option<&Path>, jobs: Option<usize>) -> RunEstimate {
        let kind = self.source().kind;
        let jobs = if kind.exclusive() { 1 } else { jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1) };
        let dir = out_dir.map_or_else(|| Path::new("out").join(&self.name), Path::to_path_buf);
        let stored: HashMap<String, f64> = flowlab_reports::read_results_file(&dir.join("results.jsonl"))
            .map(|f| f.rows.into_iter().filter(|r| r.error.is_none()).map(|r| (r.key, r.elapsed_s)).collect())
            .unwrap_or_default();
        let mine: Vec<f64> = self.runs.iter().filter_map(|r| stored.get(&r.key).copied()).collect();
        let left = (self.runs.len() - mine.len()) as f64;
        let threads = |n: f64| (n / jobs as f64).ceil().max(if n > 0.0 { 1.0 } else { 0.0 });
        if !mine.is_empty() {
            let median = crate::measure::spread(&mine).0;
            let s = threads(left) * median;
            return RunEstimate {
                seconds: (s, s),
                basis: format!("{} of {} runs stored in {}, {} to run at their median {:.3} s each on {jobs} thread(s)", mine.len(), self.runs.len(), dir.display(), left, median),
            };
        }
        if let Some((lo, hi, source)) = kind.measured_point_s() {
            let n = threads(left);
            return RunEstimate { seconds: (n * lo, n * hi), basis: format!("{left} runs one at a time at {lo}-{hi} s each, {source}") };
        }
        let (taken, mean) = self.sample();
        let s = threads(left) * mean;
        let mut basis = format!("{taken} of its points timed now, {:.3} s each on average, {left} runs on {jobs} thread(s)", mean);
        // Calibration runs its points over and over first, one evaluation
        // at a time: Nelder-Mead takes about (parameters + 2) evaluations
        // an iteration with its restarts (catalog:sync-replication: 650
        // for 100 iterations of 3 parameters).
        let calibration = self.calibrate.as_ref().map_or(0.0, |c| {
            let points: std::collections::BTreeSet<u64> = self.calibration_targets().map(|t| t.point).collect();
            let indices: Vec<usize> = points.iter().map(|p| (*p * u64::from(self.repeat.max(1))) as usize).collect();
            let evaluation = self.time_runs(&indices).iter().sum::<f64>() / (jobs.min(points.len().max(1))) as f64;
            let evaluations = c.max_iters as f64 * (c.params.len() as f64 + 2.0);
            basis += &format!(
                "; first about {evaluations:.0} evaluations of its {} calibration point(s), {evaluation:.4} s each, to fit {} parameter(s)",
                points.len(),
                c.params.len()
            );
            evaluations * evaluation
        });
        RunEstimate { seconds: (s + calibration, s + calibration), basis }
    }

    /// Runs up to [`SAMPLES`] points spread over the sweep (first, last and
    /// between) within [`SAMPLE_BUDGET_S`]; their count and mean wall time.
    fn sample(&self) -> (usize, f64) {
        let n = self.runs.len();
        let picks: Vec<usize> = match n {
            0 => Vec::new(),
            n if n <= SAMPLES => (0..n).collect(),
            n => (0..SAMPLES).map(|i| i * (n - 1) / (SAMPLES - 1)).collect(),
        };
        let times = self.time_runs(&picks);
        let mean = if times.is_empty() { 0.0 } else { times.iter().sum::<f64>() / times.len() as f64 };
        (times.len(), mean)
    }
}

impl Experiment {
    /// Wall seconds of each of the runs at `indices`, run now, stopping
    /// after the first once [`SAMPLE_BUDGET_S`] has passed.
    fn time_runs(&self, indices: &[usize]) -> Vec<f64> {
        let start = Instant::now();
        let mut times = Vec::new();
        for run in indices.iter().filter_map(|&i| self.runs.get(i)) {
            let t = Instant::now();
            let _ = crate::runner::run_caught(run.runnable.as_ref(), &PointEnv { seed: run.seed, ..PointEnv::default() });
            times.push(t.elapsed().as_secs_f64());
            if start.elapsed().as_secs_f64() > SAMPLE_BUDGET_S {
                break;
            }
        }
        times
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(0.42), "0.4 s");
        assert_eq!(duration(42.0), "42 s");
        assert_eq!(duration(600.0), "10.0 min");
        assert_eq!(duration(9000.0), "2.5 h");
    }
}

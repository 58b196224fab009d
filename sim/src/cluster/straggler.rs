//! Per-step compute slowdowns drawn from the seeded RNG.

use crate::cluster::config::Straggler;
use crate::time::SimTime;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Exp1, StandardNormal};

/// Draws the factor by which a worker's step compute time is multiplied.
pub(crate) struct StragglerModel {
    cfg: Straggler,
    /// Transient: per worker, the current or next slow window [start, end).
    windows: Vec<(SimTime, SimTime)>,
}

impl StragglerModel {
    pub fn new(cfg: &Straggler, workers: usize, rng: &mut ChaCha8Rng) -> Self {
        let mut windows = Vec::new();
        if let Straggler::Transient {
            mean_interval_s,
            duration_s,
            ..
        } = cfg
        {
            windows = (0..workers)
                .map(|_| {
                    let start = SimTime::from_secs_f64(rng.sample::<f64, _>(Exp1) * mean_interval_s);
                    (start, start + SimTime::from_secs_f64(*duration_s))
                })
                .collect();
        }
        StragglerModel {
            cfg: cfg.clone(),
            windows,
        }
    }

    pub fn factor(&mut self, rng: &mut ChaCha8Rng, worker: usize, now: SimTime) -> f64 {
        match &self.cfg {
            Straggler::None => 1.0,
            Straggler::Lognormal { sigma } => (sigma * rng.sample::<f64, _>(StandardNormal)).exp(),
            Straggler::Exponential { p, mean } => {
                if rng.random::<f64>() < *p {
                    1.0 + mean * rng.sample::<f64, _>(Exp1)
                } else {
                    1.0
                }
            }
            Straggler::SlowMachines { workers, factor } => {
                if workers.contains(&(worker as u32)) {
                    *factor
                } else {
                    1.0
                }
            }
            Straggler::Transient {
                mean_interval_s,
                duration_s,
                factor,
                jitter_sigma,
            } => {
                let w = &mut self.windows[worker];
                while w.1 <= now {
                    let gap = SimTime::from_secs_f64(rng.sample::<f64, _>(Exp1) * mean_interval_s);
                    let start = w.1 + gap;
                    *w = (start, start + SimTime::from_secs_f64(*duration_s));
                }
                let slow = if w.0 <= now { *factor } else { 1.0 };
                // No draw without jitter: runs without it keep their streams.
                if *jitter_sigma > 0.0 {
                    slow * (jitter_sigma * rng.sample::<f64, _>(StandardNormal)).exp()
                } else {
                    slow
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn transient_jitter_is_lognormal_and_slow_periods_persist() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        // Never slow (zero-length periods): the factor is exp(sigma Z), so
        // ln(factor) has mean 0 and standard deviation sigma.
        let cfg = Straggler::Transient { mean_interval_s: 1.0, duration_s: 0.0, factor: 3.0, jitter_sigma: 0.2 };
        let mut m = StragglerModel::new(&cfg, 1, &mut rng);
        let logs: Vec<f64> = (0..20_000u64).map(|i| m.factor(&mut rng, 0, SimTime(i * 1_000_000_000)).ln()).collect();
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / logs.len() as f64).sqrt();
        assert!(mean.abs() < 0.01 && (sd - 0.2).abs() < 0.01, "mean {mean} sd {sd}");
        // Without jitter a slow period gives exactly `factor` for every
        // step started in it: consecutive steps of one worker agree.
        let cfg = Straggler::Transient { mean_interval_s: 10.0, duration_s: 5.0, factor: 2.0, jitter_sigma: 0.0 };
        let mut m = StragglerModel::new(&cfg, 1, &mut rng);
        let f: Vec<f64> = (0..20_000u64).map(|i| m.factor(&mut rng, 0, SimTime(i * 1_000_000_000_000))).collect();
        let slow = f.iter().filter(|&&x| x == 2.0).count() as f64 / f.len() as f64;
        // Slow a third of the time (5 s in every 10 + 5 s on average).
        assert!((slow - 1.0 / 3.0).abs() < 0.03, "{slow}");
        let runs = f.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(runs < f.len() / 4, "slowness should persist over steps: {runs} changes");
    }
}

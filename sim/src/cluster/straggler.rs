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
            } => {
                let w = &mut self.windows[worker];
                while w.1 <= now {
                    let gap = SimTime::from_secs_f64(rng.sample::<f64, _>(Exp1) * mean_interval_s);
                    let start = w.1 + gap;
                    *w = (start, start + SimTime::from_secs_f64(*duration_s));
                }
                if w.0 <= now { *factor } else { 1.0 }
            }
        }
    }
}

//! Local search over placements (simulated annealing, as FlexFlow's MCMC
//! search): start from another placer's answer, move one colocation group to
//! another device it may use, score the move with the simulator, keep it if
//! the step is shorter (or, with a probability that falls as the search
//! cools, if it is longer), and return the best placement seen. The start is
//! a candidate, so the result is never worse than it. Moves that make some
//! device exceed its memory are rejected (unless the start already did).
//!
//! Random draws come from a ChaCha8 stream seeded by `seed`. With an
//! iteration bound the result depends only on the seed; with only a time
//! budget it also depends on how many moves fit in it.

use super::problem::Problem;
use crate::error::SimError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::{Duration, Instant};

pub(crate) struct SearchLimits {
    pub seed: u64,
    pub budget: Duration,
    pub iterations: Option<usize>,
}

pub(crate) fn local_search(p: &Problem, start: Vec<u16>, lim: &SearchLimits) -> Result<Vec<u16>, SimError> {
    let clock = Instant::now();
    let movable: Vec<usize> = (0..p.groups.len()).filter(|&k| p.groups[k].allowed.count_ones() > 1).collect();
    let first = p.replay(&start)?;
    let (t0, fits0) = (first.step, first.fits);
    if movable.is_empty() {
        return Ok(start);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(lim.seed);
    let mut cur = start.clone();
    let mut cur_score = t0.0;
    let mut cur_fits = fits0;
    let mut best = (start, t0.0, fits0);
    // Initial temperature: a move 1% worse is kept with probability 1/e.
    let temp0 = (t0.0 as f64 * 0.01).max(1.0);
    let mut it = 0usize;
    loop {
        if lim.iterations.is_some_and(|n| it >= n) {
            break;
        }
        // A zero budget with an iteration bound means "no time limit".
        let elapsed = clock.elapsed();
        let timed = !(lim.iterations.is_some() && lim.budget.is_zero());
        if timed && elapsed >= lim.budget {
            break;
        }
        let progress = match lim.iterations {
            Some(n) => it as f64 / n.max(1) as f64,
            None => elapsed.as_secs_f64() / lim.budget.as_secs_f64().max(1e-9),
        };
        it += 1;
        let k = movable[rng.random_range(0..movable.len())];
        let gr = &p.groups[k];
        let from = cur[gr.members[0] as usize] as usize;
        let choices: Vec<usize> = (0..p.ndev).filter(|&d| d != from && gr.allowed & (1 << d) != 0).collect();
        let to = choices[rng.random_range(0..choices.len())];
        for &m in &gr.members {
            cur[m as usize] = to as u16;
        }
        let (t, fits) = p.sim.step_time(&cur)?;
        let temp = temp0 * (1.0 - progress).max(1e-3);
        let accept = if !fits && cur_fits {
            false
        } else if t.0 <= cur_score || (fits && !cur_fits) {
            true
        } else {
            rng.random::<f64>() < (-((t.0 - cur_score) as f64) / temp).exp()
        };
        if accept {
            cur_score = t.0;
            cur_fits = fits;
            if (fits && !best.2) || (fits == best.2 && t.0 < best.1) {
                best = (cur.clone(), t.0, fits);
            }
        } else {
            for &m in &gr.members {
                cur[m as usize] = from as u16;
            }
        }
    }
    Ok(best.0)
}

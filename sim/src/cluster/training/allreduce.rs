//! All-reduce training: every worker computes, then the collective runs.

use super::*;

/// All-reduce training: each step every worker computes, then the collective
/// runs. Failures roll back to the last checkpoint; checkpoints pause.
pub(super) fn run_allreduce(
    cfg: &ClusterConfig,
    w: Workload,
    net: &mut Network,
    mut rng: ChaCha8Rng,
    mut straggler: StragglerModel,
    algo: collective::AllReduceAlgo,
) -> Result<ClusterReport, SimError> {
    let p = cfg.workers as usize;
    // A ring on a torus follows the torus (see `torus_ring_order`).
    let ranks: Vec<usize> = match (algo, cfg.network.shape(cfg.devices())?) {
        (collective::AllReduceAlgo::Ring, crate::network::TopologyShape::Torus { dims }) => {
            collective::torus_ring_order(&dims, p)
        }
        _ => (0..p).collect(),
    };
    let bytes = cfg.comm.bytes_for(w.allreduce_elements());
    let stages = collective::plan(algo, &ranks, bytes, cfg.network.devices_per_host as usize);
    // a lockstep step: where in it the master waits does not matter
    let overhead = SimTime::from_secs_f64((w.step_overhead_us.max(w.dispatch_us) + w.step_wait_us + w.step_end_wait_us) * 1e-6);
    let max_t = SimTime::from_secs_f64(cfg.max_sim_time_s);
    let mut failures_at: Vec<SimTime> = cfg
        .failures
        .as_ref()
        .map(|f| f.at_s.iter().map(|&t| SimTime::from_secs_f64(t)).collect())
        .unwrap_or_default();
    let mtbf = cfg.failures.as_ref().and_then(|f| f.mtbf_hours);
    let recovery = SimTime::from_secs_f64(cfg.failures.as_ref().map_or(0.0, |f| f.recovery_s));
    let next_random = |rng: &mut ChaCha8Rng, from: SimTime| {
        mtbf.map(|m| from + SimTime::from_secs_f64(rng.sample::<f64, _>(Exp1) * m * 3600.0 / p as f64))
    };
    let mut random_failure = next_random(&mut rng, SimTime::ZERO);
    failures_at.sort();
    let mut fixed = failures_at.into_iter().peekable();
    let (mut now, mut done_steps, mut last_ckpt, mut processed) = (SimTime::ZERO, 0u64, 0u64, 0u64);
    let (mut paused, mut failures, mut events) = (0.0f64, 0u32, 0u64);
    let mut failures_in_a_row = 0u32;
    let mut step_times = Vec::new();
    while done_steps < cfg.steps {
        events += 1;
        if now > max_t || events > cfg.max_events {
            return Err(SimError::BoundExceeded {
                what: "max_sim_time_s or max_events".into(),
                limit: format!("{} s, {} events", cfg.max_sim_time_s, cfg.max_events),
            });
        }
        let start = now;
        // `ready`: every rank's gradient is complete; `backward`: every
        // rank's backward pass has started (with `overlap` the collective
        // streams the gradients from then on, as they are produced, and
        // cannot end before they all exist).
        let (mut ready, mut backward) = (start, start);
        for r in 0..p {
            let jitter = if w.compute_sigma > 0.0 {
                (w.compute_sigma * rng.sample::<f64, _>(StandardNormal)).exp()
            } else {
                1.0
            };
            let d = w.compute_s * jitter * straggler.factor(&mut rng, r, start);
            ready = ready.max(start + overhead + SimTime::from_secs_f64(d));
            backward = backward.max(start + overhead + SimTime::from_secs_f64(d * w.forward_fraction));
        }
        let end = if w.overlap {
            collective::run(net, &stages, backward)?.max(ready)
        } else {
            collective::run(net, &stages, ready)?
        };
        if end > max_t {
            return Err(SimError::BoundExceeded {
                what: "max_sim_time_s".into(),
                limit: format!("{} s", cfg.max_sim_time_s),
            });
        }
        // The first failure inside this step, if any, loses it and all since the checkpoint.
        let fixed_hit = fixed.peek().copied().filter(|&t| t <= end);
        let random_hit = random_failure.filter(|&t| t <= end);
        let hit = match (fixed_hit, random_hit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(t) = hit {
            if fixed_hit == Some(t) {
                fixed.next();
            } else {
                random_failure = next_random(&mut rng, t);
            }
            failures += 1;
            failures_in_a_row += 1;
            if failures_in_a_row > MAX_FAILURES_IN_A_ROW {
                return Err(no_progress(cfg, p));
            }
            done_steps = last_ckpt;
            now = t.max(start) + recovery;
            paused += recovery.as_secs_f64();
            continue;
        }
        step_times.push((end - start).as_secs_f64());
        failures_in_a_row = 0;
        done_steps += 1;
        processed += 1;
        now = end;
        if let Some(c) = &cfg.checkpoint {
            if done_steps % c.every_steps == 0 && done_steps < cfg.steps {
                last_ckpt = done_steps;
                now += SimTime::from_secs_f64(c.cost_s);
                paused += c.cost_s;
            }
        }
    }
    let fabric = net.fabric();
    let eps = w.examples_per_step * p as u64;
    Ok(ClusterReport {
        staleness_histogram: vec![done_steps * p as u64],
        step_times_s: step_times,
        worker0_phases_s: Vec::new(),
        sim_time_s: now.as_secs_f64(),
        examples_committed: done_steps * eps,
        examples_processed: processed * eps,
        busy_time_s: (now.as_secs_f64() - paused).max(0.0),
        bytes_moved: fabric.bytes_moved(),
        link_usage: fabric.link_usage(now),
        link_util_max: fabric.max_link_utilization(now),
        failures,
        events,
        network_recomputations: net.recomputations(),
        flow_digest: net.flow_digest(),
        workers: cfg.workers,
        backup_workers: 0,
        baseline_step_p50_s: None,
        convergence: None,
        examples_per_update: eps,
    })
}

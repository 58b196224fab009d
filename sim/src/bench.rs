//! `flowlab bench sim`: how fast the simulator runs on this machine.
//! Goals (issue 4): event core >= 10 M events/s on one core; 200 workers +
//! 17 PS tasks, 1,000 sync steps, flow-level: < 2 s; 1,024-worker ring
//! all-reduce, 100 steps, flow-level: < 2 s; and run time against workers.

use crate::cluster::{simulate, ClusterConfig, Strategy};
use crate::comm::collective::AllReduceAlgo;
use crate::error::SimError;
use crate::event_queue::EventQueue;
use crate::time::SimTime;
use serde::Serialize;
use std::time::Instant;

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRecord {
    pub case: String,
    pub workers: u32,
    /// Wall-clock seconds of the measured run.
    pub seconds: f64,
    /// The case's figure of merit (see `unit`).
    pub value: f64,
    pub unit: String,
    pub goal: String,
    /// Simulated seconds covered by the run (0 for the event core).
    pub sim_seconds: f64,
    /// Max-min recomputations of the flow-level model during the run.
    pub recomputations: u64,
}

/// Typed events of the event-core benchmark: a token ring of components.
#[derive(Clone, Copy)]
enum Token {
    Pass { to: u32, hops: u32 },
}

/// The event core alone: `events` pops (and as many pushes) of a token ring.
pub fn event_core(events: u64) -> BenchRecord {
    const COMPONENTS: u32 = 1024;
    let mut q = EventQueue::new();
    for c in 0..COMPONENTS {
        q.schedule_at(SimTime(u64::from(c)), Token::Pass { to: c, hops: 0 });
    }
    // xorshift delays: deterministic, no RNG cost dominating the queue.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let start = Instant::now();
    let mut n = 0u64;
    while n < events {
        let Some((_, Token::Pass { to, hops })) = q.pop() else { break };
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let next = (to + 1 + (x % 7) as u32) % COMPONENTS;
        q.schedule_in(SimTime(1 + (x >> 40) % 1_000_000), Token::Pass { to: next, hops: hops + 1 });
        n += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    BenchRecord {
        case: "event_core".into(),
        workers: 0,
        seconds: secs,
        value: n as f64 / secs / 1e6,
        unit: "M events/s".into(),
        goal: ">= 10".into(),
        sim_seconds: 0.0,
        recomputations: 0,
    }
}

fn ps_config(workers: u32, steps: u64) -> ClusterConfig {
    ClusterConfig {
        model: crate::cluster::ModelRef::Name("inception_v3".into()),
        workers,
        ps: 17,
        strategy: Strategy::Sync { backup: 0 },
        straggler: crate::cluster::Straggler::Lognormal { sigma: 0.3 },
        steps,
        ..ClusterConfig::default()
    }
}

fn ring_config(workers: u32, steps: u64) -> ClusterConfig {
    ClusterConfig {
        model: crate::cluster::ModelRef::Name("inception_v3".into()),
        workers,
        ps: 0,
        allreduce: Some(AllReduceAlgo::Ring),
        straggler: crate::cluster::Straggler::Lognormal { sigma: 0.3 },
        steps,
        ..ClusterConfig::default()
    }
}

fn timed(case: &str, cfg: &ClusterConfig, goal: &str) -> Result<BenchRecord, SimError> {
    let start = Instant::now();
    let r = simulate(cfg, 1)?;
    let secs = start.elapsed().as_secs_f64();
    Ok(BenchRecord {
        case: case.into(),
        workers: cfg.workers,
        seconds: secs,
        value: cfg.steps as f64 / secs,
        unit: "steps/s".into(),
        goal: goal.into(),
        sim_seconds: r.sim_time_s,
        recomputations: r.network_recomputations,
    })
}

/// Runs every case; `quick` shrinks step counts and sizes.
pub fn bench(quick: bool) -> Result<Vec<BenchRecord>, SimError> {
    let mut out = vec![event_core(if quick { 2_000_000 } else { 20_000_000 })];
    let (ps_steps, ring_steps) = if quick { (100, 10) } else { (1000, 100) };
    out.push(timed(
        &format!("ps_sync_{ps_steps}_steps_flow"),
        &ps_config(200, ps_steps),
        if quick { "" } else { "< 2 s" },
    )?);
    out.push(timed(
        &format!("ring_allreduce_{ring_steps}_steps_flow"),
        &ring_config(1024, ring_steps),
        if quick { "" } else { "< 2 s" },
    )?);
    let sizes: &[u32] = if quick { &[16, 64, 256] } else { &[16, 64, 256, 1024, 4096] };
    let steps = if quick { 1 } else { 2 };
    for &w in sizes {
        out.push(timed(&format!("scaling_ps_sync_{steps}_steps"), &ps_config(w, steps), "")?);
    }
    for &w in sizes {
        out.push(timed(&format!("scaling_ring_{steps}_steps"), &ring_config(w, steps), "")?);
    }
    Ok(out)
}

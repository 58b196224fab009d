//! Speed of the graph-level simulator and of the m-ETF placer (issue 7's
//! goals: one Inception-v3 training step on 8 devices well under 100 ms;
//! m-ETF placement time reported). The lead wires [`bench_records`] into
//! `flowlab bench sim`.

use super::{GraphSimulator, SimOptions, VirtualCluster};
use crate::error::SimError;
use crate::placement::{PlacerOptions, place_timed};
use flowlab_engine::Graph;
use serde::Serialize;
use std::time::Instant;

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct GraphBenchRecord {
    pub case: String,
    pub nodes: usize,
    pub devices: String,
    /// Wall-clock seconds (best of the repetitions for the step).
    pub seconds: f64,
    pub goal: String,
    /// Simulated step time of the placement measured.
    pub step_seconds: f64,
}

/// Prepares the simulator, simulates one step (best of `reps`), and times
/// m-ETF placement, for `graph` on `devices` (e.g. "8xK40").
pub fn bench_graph(name: &str, graph: &Graph, devices: &str, reps: usize) -> Result<Vec<GraphBenchRecord>, SimError> {
    let cluster = VirtualCluster::parse(devices)?;
    let t0 = Instant::now();
    let sim = GraphSimulator::new(graph, &cluster, &SimOptions::default())?;
    let prepare = t0.elapsed().as_secs_f64();
    let opts = PlacerOptions::new(cluster.clone());
    let outcome = place_timed("m_etf", graph, &opts)?;
    let dev = sim.device_indices(&outcome.placement)?;
    let mut best = f64::INFINITY;
    let mut step = 0.0;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let r = sim.simulate_indices(&dev)?;
        best = best.min(t.elapsed().as_secs_f64());
        step = r.step_seconds;
    }
    let nodes = sim.graph().len();
    let rec = |case: &str, seconds: f64, goal: &str| GraphBenchRecord {
        case: format!("{name}/{case}"),
        nodes,
        devices: devices.into(),
        seconds,
        goal: goal.into(),
        step_seconds: step,
    };
    Ok(vec![
        rec("prepare_simulator", prepare, "once per graph and cluster"),
        rec("simulate_step", best, "< 0.1 s"),
        rec("place_m_etf", outcome.seconds, "seconds, not hours (Baechi)"),
    ])
}

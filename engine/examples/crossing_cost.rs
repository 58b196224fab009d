//! What a tensor crossing between two CPU devices of one process costs
//! beyond its transfer: a chain of 41 Negs alternating between the devices
//! against the same chain on one device, with the transfer spans inside the
//! chain and one timed alone. Kernels reading a tensor the other device
//! wrote, and the receiver's wake-up, are the split-step costs the graph
//! simulator does not price yet (issue 53; figures in the forced-splits
//! log under docs/logs/).
//!
//!     cargo run --release -p flowlab-engine --example crossing_cost

use flowlab_engine::{DType, EngineError, DeviceSet, EmulatedLink, Graph, LinkMap, Output, Session, SessionOptions, StepStats, Tensor};

const CROSSINGS: usize = 40;

/// The median, NaN for no samples.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// 40 traced runs after 5 untraced.
fn traced(sess: &Session, x: &Output, v: &Tensor, fetch: &Output) -> Result<Vec<StepStats>, EngineError> {
    for _ in 0..5 {
        sess.run(&[(x, v)], &[fetch], &[])?;
    }
    (0..40).map(|_| sess.run_traced(&[(x, v)], &[fetch], &[]).map(|(_, stats)| stats)).collect()
}

fn kernel_us(runs: &[StepStats], op: &str) -> f64 {
    median(runs.iter().map(|s| s.nodes.iter().filter(|n| n.op == op).map(|n| n.end_us - n.start_us).sum()).collect())
}

fn main() -> Result<(), EngineError> {
    let fast = EmulatedLink::new(10.0, 20.0)?;
    println!("{:>8} {:>10} {:>16} {:>14} {:>12} {:>22}", "floats", "link", "chain/crossing", "span in chain", "span alone", "Neg us, chain / alone");
    for (elems, link) in [(1usize, None), (65_536, None), (1, Some(fast)), (65_536, Some(fast))] {
        let g = Graph::new();
        let x = g.device("/cpu:0").placeholder("x", DType::F32, flowlab_engine::Shape::new(vec![elems]))?;
        let (mut crossing, mut local) = (x.clone(), x.clone());
        for k in 0..=CROSSINGS {
            crossing = g.device(&format!("/cpu:{}", k % 2)).op("Neg").input(&crossing).build()?;
            local = g.device("/cpu:0").op("Neg").input(&local).build()?;
        }
        // one crossing alone: the transfer's span from Send to Recv
        let y = g.device("/cpu:0").op("Neg").input(&x).build()?;
        let alone = g.device("/cpu:1").op("Neg").input(&y).build()?;
        let options = SessionOptions { threads: 1, devices: DeviceSet::local_cpus(2), links: LinkMap { all: link, ..Default::default() }, ..Default::default() };
        let sess = Session::with_options(&g, options)?;
        let v = Tensor::from_vec(vec![1f32; elems], [elems])?;
        let runs = traced(&sess, &x, &v, &crossing)?;
        let total = median(runs.iter().map(|s| s.total_us).collect());
        let spans = median(runs.iter().map(|s| s.transfers.iter().map(|t| t.end_us - t.start_us).sum()).collect());
        let one = traced(&sess, &x, &v, &local)?;
        let single = traced(&sess, &x, &v, &alone)?;
        let span_alone = median(single.iter().filter_map(|s| s.transfers.first()).map(|t| t.end_us - t.start_us).collect());
        println!(
            "{elems:>8} {:>10} {:>13.1} us {:>11.1} us {:>9.1} us {:>10.0} / {:.0}",
            if link.is_some() { "10G 20us" } else { "in process" },
            total / CROSSINGS as f64,
            spans / CROSSINGS as f64,
            span_alone,
            kernel_us(&runs, "Neg"),
            kernel_us(&one, "Neg")
        );
    }
    Ok(())
}

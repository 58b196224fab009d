//! Emulated links: a cross-device transfer arrives no earlier than latency
//! plus bytes over bandwidth after it leaves, transfers in one direction
//! queue behind each other, and results are unchanged.

use flowlab_engine::{DType, DeviceSet, EmulatedLink, Graph, LinkMap, Result, Session, SessionOptions, Tensor};
use std::time::{Duration, Instant};

/// x0, x1 fed on CPU:0, summed on CPU:1: one or two transfers of `n` f32.
fn step_time(n: usize, two: bool, links: LinkMap) -> Result<(Duration, f64)> {
    let g = Graph::new();
    let d0 = g.device("/cpu:0");
    let x0 = d0.placeholder("x0", DType::F32, [n as i64])?;
    let x1 = d0.placeholder("x1", DType::F32, [n as i64])?;
    let d1 = g.device("/cpu:1");
    let s0 = d1.reduce_sum(&x0, &[], false)?;
    let total = if two { d1.add(&s0, d1.reduce_sum(&x1, &[], false)?)? } else { s0 };
    let s = Session::with_options(&g, SessionOptions { threads: 1, devices: DeviceSet::local_cpus(2), links, ..Default::default() })?;
    let v = Tensor::from_vec(vec![0.5f32; n], [n])?;
    let feeds = [(&x0, &v), (&x1, &v)];
    s.run(&feeds, &[&total], &[])?; // prepare once, outside the timing
    let t0 = Instant::now();
    let out = s.run(&feeds, &[&total], &[])?;
    Ok((t0.elapsed(), out[0].scalar_f64()?))
}

#[test]
fn a_transfer_takes_at_least_latency_plus_bytes_over_bandwidth_and_queues_per_direction() -> Result<()> {
    let n = 262_144; // 1 MiB of f32
    let link = EmulatedLink::new(1.0, 2_000.0)?;
    let one = link.transfer_time(4 * n as u64); // 2 ms + 8.39 ms
    let links = LinkMap { all: Some(link), ..Default::default() };
    let (plain, v_plain) = step_time(n, true, LinkMap::default())?;
    let (t1, _) = step_time(n, false, links.clone())?;
    let (t2, v_linked) = step_time(n, true, links)?;
    assert_eq!(v_plain, v_linked, "emulation changes time, not values");
    assert!(t1 >= one, "one transfer: {t1:?} < {one:?}");
    assert!(t2 >= 2 * one, "two transfers one behind the other: {t2:?} < {:?}", 2 * one);
    assert!(t2 < 2 * one + Duration::from_millis(500), "{t2:?}");
    assert!(plain < one, "without a link the same step is faster than one emulated transfer: {plain:?}");
    Ok(())
}

#[test]
fn a_pair_without_a_link_is_not_slowed() -> Result<()> {
    // Only CPU:1 -> CPU:0 is slow; this step sends CPU:0 -> CPU:1.
    let slow = EmulatedLink::new(0.001, 100_000.0)?;
    let cpu = |i| format!("/job:localhost/replica:0/task:0/device:CPU:{i}");
    let links = LinkMap { all: None, pairs: [((cpu(1), cpu(0)), slow)].into_iter().collect() };
    let (t, _) = step_time(1024, false, links)?;
    assert!(t < Duration::from_millis(100), "{t:?}");
    // The same override on the direction the step uses does slow it.
    let lat = EmulatedLink::new(10.0, 30_000.0)?;
    let links = LinkMap { all: None, pairs: [((cpu(0), cpu(1)), lat)].into_iter().collect() };
    let (t, _) = step_time(1024, false, links)?;
    assert!(t >= Duration::from_millis(30), "{t:?}");
    Ok(())
}

//! Placers that need no schedule: one device, round-robin, and the engine's
//! default rule. Each returns one device index per node, whole colocation
//! groups together.

use super::problem::Problem;
use crate::error::SimError;

/// Everything on the device that runs the graph fastest alone (least total
/// op time) among those whose simulated peak memory holds it; groups that
/// may not use that device go to their first allowed device with room.
/// (Peak, not the sum of all outputs: one device frees tensors as it goes.)
pub(crate) fn single_device(p: &Problem) -> Result<Vec<u16>, SimError> {
    let mut order: Vec<(u64, usize)> = (0..p.ndev)
        .filter(|&d| p.groups.iter().any(|g| g.allowed & (1 << d) != 0))
        .map(|d| ((0..p.n).filter(|&i| p.allowed(i, d)).map(|i| p.sim.op_ps(i, d)).sum(), d))
        .collect();
    order.sort_unstable();
    let mut tried = Vec::new();
    for &(_, home) in &order {
        let dev = all_on(p, home)?;
        let peaks = p.replay(&dev)?.peak;
        if (0..p.ndev).all(|d| peaks[d] as f64 <= p.capacity[d]) {
            return Ok(dev);
        }
        tried.push(format!("{} would need {} bytes of {:.0}", p.sim.cluster().devices()[home].name, peaks[home], p.capacity[home]));
    }
    Err(SimError::Placement {
        node: p.sim.graph().names.first().cloned().unwrap_or_default(),
        detail: format!("single_device: no device holds the graph ({})", tried.join("; ")),
    })
}

/// Every group on `home` when it may use it, else on its first allowed device.
fn all_on(p: &Problem, home: usize) -> Result<Vec<u16>, SimError> {
    let mut dev = vec![0u16; p.n];
    for g in &p.groups {
        let d = if g.allowed & (1 << home) != 0 { home } else { g.allowed.trailing_zeros() as usize };
        for &m in &g.members {
            dev[m as usize] = d as u16;
        }
    }
    Ok(dev)
}

/// Groups in order of their first member, dealt to devices in turn (skipping
/// devices a group may not use or that lack memory for it).
pub(crate) fn round_robin(p: &Problem) -> Result<Vec<u16>, SimError> {
    let mut used = vec![0u64; p.ndev];
    let mut dev = vec![0u16; p.n];
    let mut next = 0usize;
    for (k, g) in p.groups.iter().enumerate() {
        let d = (0..p.ndev).map(|o| (next + o) % p.ndev).find(|&d| p.fits(k, d, &used)).ok_or_else(|| p.no_room(k, &used))?;
        next = d + 1;
        used[d] += g.footprint;
        for &m in &g.members {
            dev[m as usize] = d as u16;
        }
    }
    Ok(dev)
}

/// The engine's `DefaultPlacer` rule: each group on the first device it may
/// use, accelerators before CPUs (TensorFlow does not check memory; neither
/// does this: the simulator reports a device over capacity).
pub(crate) fn default_rule(p: &Problem) -> Result<Vec<u16>, SimError> {
    let mut dev = vec![0u16; p.n];
    for g in &p.groups {
        let d = p.priority.iter().copied().find(|&d| g.allowed & (1 << d) != 0).unwrap_or(0);
        for &m in &g.members {
            dev[m as usize] = d as u16;
        }
    }
    Ok(dev)
}

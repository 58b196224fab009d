//! Placers that need no schedule: one device, round-robin, and the engine's
//! default rule. Each returns one device index per node, whole colocation
//! groups together.

use super::problem::Problem;
use crate::error::SimError;

/// Everything on the device that runs the graph fastest alone (least total
/// op time) among those with memory for it; groups that may not use it go
/// to their first allowed device with room.
pub(crate) fn single_device(p: &Problem) -> Result<Vec<u16>, SimError> {
    let mut best: Option<(u64, usize)> = None;
    for d in 0..p.ndev {
        if !p.groups.iter().any(|g| g.allowed & (1 << d) != 0) {
            continue;
        }
        let total: u64 = (0..p.n).filter(|&i| p.allowed(i, d)).map(|i| p.sim.op_ps(i, d)).sum();
        let bytes: u64 = p.groups.iter().filter(|g| g.allowed & (1 << d) != 0).map(|g| g.footprint).sum();
        if bytes as f64 > p.capacity[d] {
            continue;
        }
        if best.is_none_or(|(t, _)| total < t) {
            best = Some((total, d));
        }
    }
    let Some((_, home)) = best else {
        let need: u64 = p.groups.iter().map(|g| g.footprint).sum();
        let largest = p.capacity.iter().copied().fold(0.0, f64::max);
        return Err(SimError::Placement {
            node: p.sim.graph().names.first().cloned().unwrap_or_default(),
            detail: format!("single_device: the graph needs {need} bytes but the largest device holds {largest:.0}"),
        });
    };
    let mut used = vec![0u64; p.ndev];
    let mut dev = vec![0u16; p.n];
    for (k, g) in p.groups.iter().enumerate() {
        let d = if g.allowed & (1 << home) != 0 {
            home
        } else {
            (0..p.ndev).find(|&d| p.fits(k, d, &used)).ok_or_else(|| p.no_room(k, &used))?
        };
        used[d] += g.footprint;
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

//! Baechi's m-TOPO: walk the graph in topological order and fill devices one
//! after another, each up to an even share of the graph's memory (capped by
//! its capacity), so consecutive nodes share a device and memory is balanced.

use super::problem::Problem;
use crate::error::SimError;

pub(crate) fn m_topo(p: &Problem) -> Result<Vec<u16>, SimError> {
    let total: u64 = p.groups.iter().map(|g| g.footprint).sum();
    let usable: Vec<usize> = (0..p.ndev).filter(|&d| p.groups.iter().any(|g| g.allowed & (1 << d) != 0)).collect();
    let share = total.div_ceil(usable.len().max(1) as u64);
    let limit: Vec<f64> = (0..p.ndev).map(|d| p.capacity[d].min(share as f64)).collect();
    let mut used = vec![0u64; p.ndev];
    let mut group_dev = vec![u16::MAX; p.groups.len()];
    let mut dev = vec![0u16; p.n];
    let mut cur = 0usize;
    for &i in &p.sim.graph().topo {
        let i = i as usize;
        let k = p.group_of[i] as usize;
        if group_dev[k] == u16::MAX {
            let fp = p.groups[k].footprint;
            let within = |d: usize, used: &[u64]| p.groups[k].allowed & (1 << d) != 0 && (used[d] + fp) as f64 <= limit[d];
            // The current device while within its share, else the next ones;
            // if every share is spent, any device with capacity left.
            let d = (cur..p.ndev)
                .find(|&d| within(d, &used))
                .or_else(|| (0..p.ndev).find(|&d| p.fits(k, d, &used)))
                .ok_or_else(|| p.no_room(k, &used))?;
            // Pinned groups do not move the fill pointer.
            if p.groups[k].allowed.count_ones() > 1 {
                cur = cur.max(d);
            }
            used[d] += fp;
            group_dev[k] = d as u16;
        }
        dev[i] = group_dev[k];
    }
    Ok(dev)
}

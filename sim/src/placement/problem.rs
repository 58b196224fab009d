//! What every placer works from: the simulator (op and transfer times), the
//! colocation groups with the devices each may use, and memory capacities.
//!
//! Groups are computed as the engine's `DefaultPlacer` does: union-find over
//! the attrs `var`, `slots` and `_class = ["loc:@x"]`; a group may use the
//! devices that match every member's requested device. Kernel availability
//! is not checked: virtual devices run every op.

use crate::error::SimError;
use crate::graph::GraphSimulator;
use crate::SimTime;
use flowlab_engine::{DeviceName, DeviceSet};
use std::collections::HashMap;
use parking_lot::Mutex;

/// One colocation group.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    /// Members in id order.
    pub members: Vec<u32>,
    /// Devices it may use, as a bit mask over cluster indices.
    pub allowed: u64,
    /// Bytes its members' outputs occupy (what placers reserve).
    pub footprint: u64,
}

pub(crate) struct Problem {
    pub sim: GraphSimulator,
    pub n: usize,
    pub ndev: usize,
    pub group_of: Vec<u32>,
    pub groups: Vec<Group>,
    pub capacity: Vec<f64>,
    /// Accelerators first, then CPUs, each in set order (the engine's rule).
    pub priority: Vec<usize>,
    /// The last placement [`Problem::replay`] simulated, with its result.
    last_replay: Mutex<Option<(Vec<u16>, Replay)>>,
}

/// What one simulated step of a placement says about it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Replay {
    pub step: SimTime,
    /// Peak bytes per cluster device.
    pub peak: Vec<u64>,
    /// Every device's peak within its catalog capacity.
    pub fits: bool,
}

fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

/// The forward op a gradient op belongs to: the longest node name `f` such
/// that `name` is `gradients/f/...` (forward names contain `/` too).
fn forward_op_of(name: &str, by_name: &HashMap<&str, usize>) -> Option<usize> {
    let rest = name.strip_prefix("gradients/")?;
    rest.match_indices('/').rev().find_map(|(at, _)| by_name.get(&rest[..at]).copied())
}

impl Problem {
    /// Builds the groups of `sim`'s graph restricted to `devices` (the
    /// cluster's devices that are members of the set).
    pub fn new(sim: GraphSimulator, devices: &DeviceSet) -> Result<Problem, SimError> {
        let g = sim.graph();
        let n = g.len();
        let cluster = sim.cluster();
        let ndev = cluster.len();
        let mut in_set = 0u64;
        for (k, d) in cluster.devices().iter().enumerate() {
            if devices.contains(&d.name) {
                in_set |= 1 << k;
            }
        }
        if in_set == 0 {
            return Err(SimError::Placement {
                node: g.names.first().cloned().unwrap_or_default(),
                detail: format!("no device of the given set is in the simulated cluster ({})", cluster.list()),
            });
        }
        let by_name: HashMap<&str, usize> = g.names.iter().enumerate().map(|(i, s)| (s.as_str(), i)).collect();
        let mut parent: Vec<usize> = (0..n).collect();
        for i in 0..n {
            for other in &g.colocate_with[i] {
                let j = *by_name.get(other.as_str()).ok_or_else(|| SimError::Placement {
                    node: g.names[i].clone(),
                    detail: format!("it must be colocated with node '{other}', which is not in the graph"),
                })?;
                let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                let (lo, hi) = if a < b { (a, b) } else { (b, a) };
                parent[hi] = lo;
            }
        }
        let mut index_of_root: HashMap<usize, u32> = HashMap::new();
        let mut group_of = vec![0u32; n];
        let mut groups: Vec<Group> = Vec::new();
        // Who narrowed each group's devices, for error messages.
        let mut asked_by: Vec<Option<usize>> = Vec::new();
        for i in 0..n {
            let r = find(&mut parent, i);
            let k = *index_of_root.entry(r).or_insert_with(|| {
                groups.push(Group { members: Vec::new(), allowed: in_set, footprint: 0 });
                asked_by.push(None);
                (groups.len() - 1) as u32
            });
            group_of[i] = k;
            let gr = &mut groups[k as usize];
            gr.members.push(i as u32);
            gr.footprint += g.footprint(i);
            // a device the roofline has no rate for the op on (float work
            // on TPU v1) cannot take it, as a device without its kernel
            if g.runs[i] {
                let runnable = (0..ndev).filter(|&d| sim.op_ps(i, d) != u64::MAX).fold(0u64, |m, d| m | 1 << d);
                if gr.allowed & runnable == 0 {
                    return Err(SimError::Placement {
                        node: g.names[i].clone(),
                        detail: format!("no device of the set that its colocation group may use can run its {} ({})", g.ops[i], cluster.list()),
                    });
                }
                gr.allowed &= runnable;
            }
            let req = &g.requested[i];
            if req.is_empty() {
                continue;
            }
            let spec = DeviceName::parse(req).map_err(|e| SimError::Placement { node: g.names[i].clone(), detail: e.to_string() })?;
            let mut mask = 0u64;
            for (d, vd) in cluster.devices().iter().enumerate() {
                if vd.name.matches(&spec) {
                    mask |= 1 << d;
                }
            }
            let narrowed = gr.allowed & mask;
            if narrowed == 0 {
                let detail = match asked_by[k as usize] {
                    Some(prev) if mask & in_set != 0 => format!(
                        "it requests '{}' but node '{}' of its colocation group requests '{}', and no device satisfies both",
                        req, g.names[prev], g.requested[prev]
                    ),
                    _ => format!("requested device '{spec}' matches no device of the set ({})", cluster.list()),
                };
                return Err(SimError::Placement { node: g.names[i].clone(), detail });
            }
            gr.allowed = narrowed;
            asked_by[k as usize] = Some(i);
        }
        let capacity = cluster.devices().iter().map(|d| d.capacity_bytes).collect();
        let mut priority: Vec<usize> = (0..ndev).collect();
        priority.sort_by_key(|&d| (cluster.devices()[d].name.device_type.as_deref() == Some("CPU"), d));
        Ok(Problem { sim, n, ndev, group_of, groups, capacity, priority, last_replay: Mutex::new(None) })
    }

    /// Gradient ops join the group of the forward op they differentiate
    /// (the engine names them `gradients/<forward op>/...`): TensorFlow's
    /// `colocate_gradients_with_ops`, which Baechi places with
    /// (`--colocate_grads_with_ops` in its README's commands). An op's
    /// backward pass reads the forward op's inputs, and often its outputs,
    /// so splitting the pair only adds transfers; and the backward pass
    /// inherits the forward pass's split instead of a greedy one of its
    /// own. Groups merge only where they share a device. Baechi's other
    /// grouping, an op with one consumer joining it (`--grouper coplace`),
    /// is left out: on the zoo's training graphs it chains forward ops,
    /// their gradients and the variables into one group of nearly every
    /// node (ResNet-50: 1,853 of 1,854), which leaves nothing to place.
    /// Returns the groups it replaced, for [`Problem::restore_groups`].
    pub fn colocate_gradients(&mut self) -> (Vec<u32>, Vec<Group>) {
        let g = self.sim.graph();
        let by_name: HashMap<&str, usize> = g.names.iter().enumerate().map(|(i, s)| (s.as_str(), i)).collect();
        let mut parent: Vec<usize> = (0..self.groups.len()).collect();
        let mut allowed: Vec<u64> = self.groups.iter().map(|gr| gr.allowed).collect();
        for i in 0..self.n {
            let Some(fwd) = forward_op_of(&g.names[i], &by_name) else { continue };
            let (a, b) = (find(&mut parent, self.group_of[i] as usize), find(&mut parent, self.group_of[fwd] as usize));
            if a != b && allowed[a] & allowed[b] != 0 {
                let (lo, hi) = if a < b { (a, b) } else { (b, a) };
                parent[hi] = lo;
                allowed[lo] &= allowed[hi];
            }
        }
        let mut index_of_root: HashMap<usize, u32> = HashMap::new();
        let mut group_of = vec![0u32; self.n];
        let mut groups: Vec<Group> = Vec::new();
        for i in 0..self.n {
            let root = find(&mut parent, self.group_of[i] as usize);
            let k = *index_of_root.entry(root).or_insert_with(|| {
                groups.push(Group { members: Vec::new(), allowed: allowed[root], footprint: 0 });
                (groups.len() - 1) as u32
            });
            group_of[i] = k;
            groups[k as usize].members.push(i as u32);
            groups[k as usize].footprint += g.footprint(i);
        }
        (std::mem::replace(&mut self.group_of, group_of), std::mem::replace(&mut self.groups, groups))
    }

    /// Puts back the groups [`Problem::colocate_gradients`] replaced.
    pub fn restore_groups(&mut self, (group_of, groups): (Vec<u32>, Vec<Group>)) {
        self.group_of = group_of;
        self.groups = groups;
    }

    /// One simulated step of `dev`. The last answer is kept: the memory
    /// check and the single-device fallback both ask about a placer's final
    /// placement, and one replay of a large graph costs milliseconds.
    pub fn replay(&self, dev: &[u16]) -> Result<Replay, SimError> {
        let mut last = self.last_replay.lock();
        if let Some((_, r)) = last.as_ref().filter(|(d, _)| d.as_slice() == dev) {
            return Ok(r.clone());
        }
        let t = self.sim.run(dev)?;
        let fits = t.peak_mem.iter().zip(self.sim.cluster().devices()).all(|(&p, d)| p as f64 <= d.capacity_bytes);
        let r = Replay { step: t.step, peak: t.peak_mem, fits };
        *last = Some((dev.to_vec(), r.clone()));
        Ok(r)
    }

    #[inline]
    pub fn allowed(&self, node: usize, d: usize) -> bool {
        self.groups[self.group_of[node] as usize].allowed & (1 << d) != 0
    }

    /// The error for a group that fits on no allowed device.
    pub fn no_room(&self, group: usize, used: &[u64]) -> SimError {
        let gr = &self.groups[group];
        let free: Vec<String> = (0..self.ndev)
            .filter(|&d| gr.allowed & (1 << d) != 0)
            .map(|d| format!("{} has {:.0} of {:.0} bytes free", self.sim.cluster().devices()[d].name, (self.capacity[d] - used[d] as f64).max(0.0), self.capacity[d]))
            .collect();
        SimError::Placement {
            node: self.sim.graph().names[gr.members[0] as usize].clone(),
            detail: format!(
                "no device has memory for it: its colocation group ({} nodes) needs {} bytes; {}",
                gr.members.len(),
                gr.footprint,
                free.join(", ")
            ),
        }
    }

    /// Whether group `k` can go to device `d` given the bytes in use.
    #[inline]
    pub fn fits(&self, k: usize, d: usize, used: &[u64]) -> bool {
        self.groups[k].allowed & (1 << d) != 0 && (used[d] + self.groups[k].footprint) as f64 <= self.capacity[d]
    }

    /// Every data-input and control-input edge of `i` as (producer, bytes).
    pub fn in_edges(&self, i: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
        let g = self.sim.graph();
        let data = g.inputs.get(i).iter().map(move |&s| (g.slot_node[s as usize] as usize, self.sim.slot_wire_bytes(s as usize)));
        let ctrl = g.control_inputs.get(i).iter().map(move |&c| (c as usize, self.sim.control_bytes()));
        data.chain(ctrl)
    }

    /// Every consumer edge of `i` (data, one per edge, then control).
    pub fn out_edges(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let g = self.sim.graph();
        g.slots(i).flat_map(move |s| g.slot_consumers.get(s).iter().map(|&c| c as usize)).chain(g.control_consumers.get(i).iter().map(|&c| c as usize))
    }

    /// Number of input edges of `i` (data and control).
    pub fn in_degree(&self, i: usize) -> u32 {
        let g = self.sim.graph();
        (g.inputs.get(i).len() + g.control_inputs.get(i).len()) as u32
    }
}

//! List-scheduling placers: each builds a schedule (start and finish per
//! node) while it places, using the simulator's op and transfer times.
//!
//! - `tf_greedy`: the TensorFlow whitepaper's simulated placer. Nodes in
//!   topological order; each goes to the device where it would finish
//!   earliest, counting its compute and the transfers of its inputs.
//! - `m_etf`: Baechi's memory-constrained Earliest Task First. Among all
//!   ready (node, device) pairs, schedule the one that can start earliest,
//!   on devices with memory left for the node's colocation group.
//! - `m_sct`: Baechi's memory-constrained Small Communication Times: ETF,
//!   except that each node's favourite child is kept on its parent's device
//!   when that does not start it later than ETF's choice by more than the
//!   transfer it saves. Favourite children come from Baechi's LP relaxation
//!   (`sct_lp.rs`).
//!
//! A node's whole colocation group goes to the device its first scheduled
//! member picks. Memory is counted by tensor lifetime in the placer's own
//! schedule, as the simulator counts it: a group's variables from the moment
//! the group is placed; a node's outputs from its placement until the last
//! consumer of each is placed; a copy received from another device likewise.
//! A node goes only where the bytes live then, plus its outputs (and its
//! group's variables), fit.

use super::problem::Problem;
use crate::error::SimError;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

const UNPLACED: u16 = u16::MAX;

/// Schedule state shared by the three placers.
struct Schedule<'a> {
    p: &'a Problem,
    dev: Vec<u16>,
    finish: Vec<u64>,
    avail: Vec<u64>,
    /// Bytes live on each device at this point of the schedule.
    used: Vec<u64>,
    group_dev: Vec<u16>,
    /// Bytes of each group's variables (held for the whole step).
    persistent: Vec<u64>,
    /// Bytes of each node's outputs (0 for outputs aliasing a variable).
    outputs: Vec<u64>,
    /// Consumer edges of each slot not placed yet.
    remaining: Vec<u32>,
    /// Devices holding a received copy of each slot (bit mask).
    copies: Vec<u64>,
    /// When each copy engine of each device is free (transfers over `pair`
    /// links queue on the sender's engines, as in the simulator).
    copy_free: Vec<Vec<u64>>,
    /// When each port is busy (sorted, disjoint intervals): a transfer over
    /// a `port` link waits its latency, then holds its sender's port out and
    /// its receiver's port in for its bytes at full rate, in the earliest
    /// gap both have. The simulator shares a port fairly instead; both keep
    /// a port busy for the same total time, only the order of the
    /// transfers' ends differs.
    port_busy: Vec<Vec<(u64, u64)>>,
    /// Arrival time of each transfer made: (slot, or node + CONTROL for a
    /// control edge; destination device).
    arrival: HashMap<(u64, u16), u64>,
}

/// Keys control transfers apart from slots in `arrival`.
const CONTROL: u64 = 1 << 40;

impl<'a> Schedule<'a> {
    fn new(p: &'a Problem) -> Schedule<'a> {
        let g = p.sim.graph();
        let mut persistent = vec![0u64; p.groups.len()];
        let mut outputs = vec![0u64; p.n];
        for i in 0..p.n {
            if g.is_variable[i] {
                persistent[p.group_of[i] as usize] += g.footprint(i);
            } else {
                outputs[i] = g.footprint(i);
            }
        }
        let nslots = g.slot_mem.len();
        Schedule {
            p,
            dev: vec![UNPLACED; p.n],
            finish: vec![0; p.n],
            avail: vec![0; p.ndev],
            used: vec![0; p.ndev],
            group_dev: vec![UNPLACED; p.groups.len()],
            persistent,
            outputs,
            remaining: (0..nslots).map(|s| g.slot_consumers.get(s).len() as u32).collect(),
            copies: vec![0; nslots],
            copy_free: (0..p.ndev).map(|d| vec![0; p.sim.copy_engines(d)]).collect(),
            port_busy: vec![Vec::new(); p.sim.port_count()],
            arrival: HashMap::new(),
        }
    }

    /// Bytes placing `i` on `d` adds now: its outputs, its group's
    /// variables if the group is not placed yet, the inputs it would
    /// receive from other devices that are not there yet.
    fn need(&self, i: usize, d: usize) -> u64 {
        let g = self.p.sim.graph();
        let k = self.p.group_of[i] as usize;
        let mut need = self.outputs[i] + if self.group_dev[k] == UNPLACED { self.persistent[k] } else { 0 };
        for &s in g.inputs.get(i) {
            let s = s as usize;
            let src = self.dev[g.slot_node[s] as usize];
            if src != UNPLACED && src as usize != d && self.copies[s] & (1 << d) == 0 {
                need += g.slot_mem[s];
            }
        }
        need
    }

    /// Whether node `i` may go to device `d` now.
    fn can(&self, i: usize, d: usize) -> bool {
        let k = self.p.group_of[i] as usize;
        let allowed = match self.group_dev[k] {
            UNPLACED => self.p.groups[k].allowed & (1 << d) != 0,
            gd => gd as usize == d,
        };
        allowed && (self.used[d] + self.need(i, d)) as f64 <= self.p.capacity[d]
    }

    /// The edges into `i` as (transfer key, producer, wire bytes).
    fn inputs_of(&self, i: usize) -> impl Iterator<Item = (u64, usize, u64)> + '_ {
        let g = self.p.sim.graph();
        let data = g.inputs.get(i).iter().map(move |&s| (s as u64, g.slot_node[s as usize] as usize, self.p.sim.slot_wire_bytes(s as usize)));
        let ctrl = g.control_inputs.get(i).iter().map(move |&c| (CONTROL + c as u64, c as usize, self.p.sim.control_bytes()));
        data.chain(ctrl)
    }

    /// When an input of `bytes` from `src` would be on `d`: at once on its
    /// own device, when it arrived if already sent there, else after the
    /// sender's first free copy engine carries it.
    fn input_ready(&self, key: u64, src: usize, bytes: u64, d: usize) -> u64 {
        let e = self.dev[src] as usize;
        if e == d {
            return self.finish[src];
        }
        if let Some(&t) = self.arrival.get(&(key, d as u16)) {
            return t;
        }
        if let Some((o, i)) = self.p.sim.ports_of(e, d) {
            let (latency, wire) = self.p.sim.transfer_parts_ps(e, d, bytes);
            return self.port_gap(o, i, self.finish[src] + latency, wire) + wire;
        }
        let free = self.copy_free[e].iter().copied().min().unwrap_or(0);
        free.max(self.finish[src]) + self.p.sim.transfer_ps(e, d, bytes)
    }

    /// The earliest time from `t` at which ports `o` and `i` are both free
    /// for `wire` picoseconds.
    fn port_gap(&self, o: usize, i: usize, mut t: u64, wire: u64) -> u64 {
        loop {
            let mut moved = false;
            for port in [o, i] {
                let busy = &self.port_busy[port];
                let k = busy.partition_point(|iv| iv.1 <= t);
                if let Some(&(start, end)) = busy.get(k)
                    && start < t + wire.max(1)
                {
                    t = end;
                    moved = true;
                }
            }
            if !moved {
                return t;
            }
        }
    }

    /// When all of `i`'s inputs (placed) would be on device `d`.
    fn data_ready(&self, i: usize, d: usize) -> u64 {
        self.inputs_of(i).map(|(key, src, bytes)| self.input_ready(key, src, bytes, d)).max().unwrap_or(0)
    }

    /// Places `i` on `d`, no earlier than `start` nor before its inputs
    /// are there (the transfers it needs are queued now).
    fn assign(&mut self, i: usize, d: usize, start: u64) {
        let mut start = start.max(self.avail[d]);
        let edges: Vec<(u64, usize, u64)> = self.inputs_of(i).collect();
        for (key, src, bytes) in edges {
            let e = self.dev[src] as usize;
            let t = if e == d {
                self.finish[src]
            } else if let Some(&t) = self.arrival.get(&(key, d as u16)) {
                t
            } else {
                let transfer = self.p.sim.transfer_ps(e, d, bytes);
                let t = match (self.p.sim.ports_of(e, d), self.copy_free[e].iter_mut().min()) {
                    (Some((o, i)), _) => {
                        let (latency, wire) = self.p.sim.transfer_parts_ps(e, d, bytes);
                        let start = self.port_gap(o, i, self.finish[src] + latency, wire);
                        for port in [o, i] {
                            let busy = &mut self.port_busy[port];
                            let at = busy.partition_point(|iv| iv.0 < start);
                            if wire > 0 {
                                busy.insert(at, (start, start + wire));
                            }
                        }
                        start + wire
                    }
                    (None, Some(f)) => {
                        *f = (*f).max(self.finish[src]) + transfer;
                        *f
                    }
                    (None, None) => self.finish[src] + transfer,
                };
                self.arrival.insert((key, d as u16), t);
                t
            };
            start = start.max(t);
        }
        let k = self.p.group_of[i] as usize;
        if self.group_dev[k] == UNPLACED {
            self.group_dev[k] = d as u16;
            self.used[d] += self.persistent[k];
        }
        let g = self.p.sim.graph();
        self.used[d] += self.outputs[i];
        for &s in g.inputs.get(i) {
            let s = s as usize;
            let prod = g.slot_node[s] as usize;
            let src = self.dev[prod] as usize;
            if src != d && self.copies[s] & (1 << d) == 0 {
                self.copies[s] |= 1 << d;
                self.used[d] += g.slot_mem[s];
            }
            self.remaining[s] -= 1;
            if self.remaining[s] == 0 {
                // Its last consumer is placed: the tensor and its copies go
                // (a variable's own value stays).
                if !g.is_variable[prod] {
                    self.used[src] -= g.slot_mem[s];
                }
                for c in 0..self.p.ndev {
                    if self.copies[s] & (1 << c) != 0 {
                        self.used[c] -= g.slot_mem[s];
                    }
                }
            }
        }
        // Outputs nobody reads die with the op.
        for s in g.slots(i) {
            if self.remaining[s] == 0 && !g.is_variable[i] {
                self.used[d] -= g.slot_mem[s];
            }
        }
        self.dev[i] = d as u16;
        self.finish[i] = start + self.p.sim.op_ps(i, d);
        self.avail[d] = self.finish[i];
    }
}

/// A placement and the step time the placer's own schedule predicts for it.
pub(crate) struct Planned {
    pub dev: Vec<u16>,
    /// The schedule's last finish, in picoseconds.
    pub makespan: u64,
}

impl Schedule<'_> {
    fn planned(self) -> Planned {
        Planned { makespan: self.finish.iter().copied().max().unwrap_or(0), dev: self.dev }
    }
}

/// The TensorFlow whitepaper's greedy placer (see the module comment).
pub(crate) fn tf_greedy_planned(p: &Problem) -> Result<Planned, SimError> {
    let mut s = Schedule::new(p);
    for &i in &p.sim.graph().topo {
        let i = i as usize;
        let mut best: Option<(u64, u64, usize)> = None;
        for d in 0..p.ndev {
            if !s.can(i, d) {
                continue;
            }
            let start = s.avail[d].max(s.data_ready(i, d));
            let end = start + p.sim.op_ps(i, d);
            if best.is_none_or(|(e, _, _)| end < e) {
                best = Some((end, start, d));
            }
        }
        let (_, start, d) = best.ok_or_else(|| p.no_room(p.group_of[i] as usize, &s.used))?;
        s.assign(i, d, start);
    }
    Ok(s.planned())
}

/// The consumer of each node's largest outgoing data edge (ties: lowest
/// id): the greedy stand-in for the LP, kept to show where they differ.
#[cfg(test)]
pub(crate) fn largest_edge_children(p: &Problem) -> Vec<u32> {
    let g = p.sim.graph();
    (0..p.n)
        .map(|i| {
            let mut best: Option<(u64, u32)> = None;
            for s in g.slots(i) {
                let bytes = p.sim.slot_wire_bytes(s);
                for &c in g.slot_consumers.get(s) {
                    if best.is_none_or(|(b, id)| bytes > b || (bytes == b && c < id)) {
                        best = Some((bytes, c));
                    }
                }
            }
            best.map_or(u32::MAX, |(_, c)| c)
        })
        .collect()
}

/// Baechi's m-ETF, or m-SCT when given each node's favourite child
/// (`sct_lp::favourite_children`; see the module comment).
pub(crate) fn etf(p: &Problem, fav: Option<&[u32]>) -> Result<Planned, SimError> {
    let nd = p.ndev;
    let mut s = Schedule::new(p);
    let mut pending: Vec<u32> = (0..p.n).map(|i| p.in_degree(i)).collect();
    // Data-ready time per (ready node, device).
    let mut ready_dr = vec![0u64; p.n * nd];
    let mut heaps: Vec<BinaryHeap<Reverse<(u64, u32)>>> = vec![BinaryHeap::new(); nd];
    let (sct, fav) = (fav.is_some(), fav.unwrap_or(&[]));
    // The favourite child waiting on each device (the last node placed there's).
    let mut urgent: Vec<u32> = vec![u32::MAX; nd];
    let mut placed = 0usize;

    let push_ready = |i: usize, s: &Schedule, heaps: &mut Vec<BinaryHeap<Reverse<(u64, u32)>>>, ready_dr: &mut Vec<u64>| {
        for d in 0..nd {
            if s.can(i, d) {
                let dr = s.data_ready(i, d);
                ready_dr[i * nd + d] = dr;
                heaps[d].push(Reverse((dr, i as u32)));
            }
        }
    };
    for i in 0..p.n {
        if pending[i] == 0 {
            push_ready(i, &s, &mut heaps, &mut ready_dr);
        }
    }
    while placed < p.n {
        // ETF: per device, its earliest-data-ready valid node.
        let mut best: Option<(u64, u64, u32, usize)> = None;
        for d in 0..nd {
            while let Some(&Reverse((dr, i))) = heaps[d].peek() {
                let iu = i as usize;
                if s.dev[iu] != UNPLACED || !s.can(iu, d) {
                    heaps[d].pop();
                    continue;
                }
                let est = s.avail[d].max(dr);
                let key = (est, dr, i, d);
                if best.is_none_or(|b| key < b) {
                    best = Some(key);
                }
                break;
            }
        }
        let Some((mut est, _, mut i, mut d)) = best else {
            let stuck = (0..p.n).find(|&i| s.dev[i] == UNPLACED && pending[i] == 0).unwrap_or(0);
            return Err(p.no_room(p.group_of[stuck] as usize, &s.used));
        };
        if sct {
            // A waiting favourite child takes its parent's device unless it
            // would start later than ETF's pick by more than it saves.
            let mut pick: Option<(u64, u32, usize)> = None;
            for (dd, &c) in urgent.iter().enumerate() {
                if c == u32::MAX {
                    continue;
                }
                let cu = c as usize;
                if s.dev[cu] != UNPLACED || pending[cu] != 0 || !s.can(cu, dd) {
                    continue;
                }
                let c_est = s.avail[dd].max(ready_dr[cu * nd + dd]);
                // What it saves: the transfer it would need on the cheapest
                // link from the parent's device to another device it may use.
                let cheapest = |b: u64| (0..nd).filter(|&e| e != dd && s.can(cu, e)).map(|e| p.sim.transfer_ps(dd, e, b)).min().unwrap_or(0);
                let saved = p.in_edges(cu).filter(|&(src, _)| s.dev[src] as usize == dd).map(|(_, b)| cheapest(b)).max().unwrap_or(0);
                if c_est <= est + saved && pick.is_none_or(|(e, _, _)| c_est < e) {
                    pick = Some((c_est, c, dd));
                }
            }
            if let Some((e, c, dd)) = pick {
                (est, i, d) = (e, c, dd);
            }
        }
        let iu = i as usize;
        s.assign(iu, d, est);
        placed += 1;
        if sct {
            urgent[d] = fav[iu];
        }
        for c in p.out_edges(iu) {
            pending[c] -= 1;
            if pending[c] == 0 {
                push_ready(c, &s, &mut heaps, &mut ready_dr);
            }
        }
    }
    Ok(s.planned())
}

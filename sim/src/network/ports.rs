//! Transfers that share device ports: every transfer over a `port` link
//! holds its sender's port out and its receiver's port in, and the
//! transfers active at once get max-min fair rates (progressive filling),
//! as DMA engines and NICs share a PCIe slot, an NVSwitch port or a wire.
//! Rates change only when a transfer joins or leaves, so the replay keeps
//! one pending wake-up: the earliest end at the current rates.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The transfers between one port out and one port in. Max-min gives them
/// one rate, so the group keeps the bytes served to each of its members
/// since it was made (`served`) and each member the value of `served` at
/// which it is done: joining, leaving and the next end cost O(log n) in the
/// group, and the filling works on groups (at most ports² of them).
#[derive(Debug, Clone)]
struct Group {
    out: u32,
    inp: u32,
    /// Bytes per picosecond of each member.
    rate: f64,
    served: f64,
    /// The filling round that froze its rate.
    frozen: u64,
    /// (done at `served` = this, as f64 bits; join order; transfer id).
    members: BinaryHeap<Reverse<(u64, u64, u32)>>,
}

/// The ports of one cluster and the transfers crossing them.
#[derive(Debug, Clone)]
pub(crate) struct SharedPorts {
    /// Capacity of each port in bytes per picosecond.
    cap: Vec<f64>,
    groups: Vec<Group>,
    /// Group index per `out * ports + in`.
    group_of: Vec<u32>,
    /// Groups with members.
    active: Vec<u32>,
    /// When `served` was last brought up to date.
    settled_at: u64,
    joined: u64,
    /// Changes so far; a wake-up carries the value of its time.
    pub generation: u32,
    // Scratch for the filling: spare capacity, unfrozen members and the
    // active groups of each port.
    spare: Vec<f64>,
    count: Vec<f64>,
    port_groups: Vec<Vec<u32>>,
    fill_round: u64,
}

const NO_GROUP: u32 = u32::MAX;

impl SharedPorts {
    pub fn new(cap: Vec<f64>) -> SharedPorts {
        let n = cap.len();
        SharedPorts {
            cap,
            groups: Vec::new(),
            group_of: vec![NO_GROUP; n * n],
            active: Vec::new(),
            settled_at: 0,
            joined: 0,
            generation: 0,
            spare: vec![0.0; n],
            count: vec![0.0; n],
            port_groups: vec![Vec::new(); n],
            fill_round: 0,
        }
    }

    /// Serves every active group up to `now` at the current rates.
    fn settle(&mut self, now: u64) {
        let dt = now.saturating_sub(self.settled_at) as f64;
        if dt > 0.0 {
            for &g in &self.active {
                let g = &mut self.groups[g as usize];
                g.served += g.rate * dt;
            }
        }
        self.settled_at = self.settled_at.max(now);
    }

    /// Max-min fair rates: raise every unfrozen group's members' rate
    /// together until a port is full, freeze the groups through it, repeat.
    /// Called once per instant at which transfers joined or left (the
    /// replay batches them), before the next end is asked for.
    pub fn fill(&mut self) {
        let np = self.cap.len();
        self.spare.copy_from_slice(&self.cap);
        self.count.iter_mut().for_each(|c| *c = 0.0);
        self.port_groups.iter_mut().for_each(Vec::clear);
        for &k in &self.active {
            let g = &self.groups[k as usize];
            let n = g.members.len() as f64;
            self.count[g.out as usize] += n;
            self.count[g.inp as usize] += n;
            self.port_groups[g.out as usize].push(k);
            self.port_groups[g.inp as usize].push(k);
        }
        self.fill_round += 1;
        let round = self.fill_round;
        let mut live = self.active.len();
        let mut level = 0.0;
        while live > 0 {
            let step = (0..np).filter(|&p| self.count[p] > 0.0).map(|p| self.spare[p] / self.count[p]).fold(f64::INFINITY, f64::min);
            level += step;
            for p in 0..np {
                if self.count[p] > 0.0 {
                    self.spare[p] -= step * self.count[p];
                }
            }
            // A port is full once what is left is a rounding error of its
            // capacity: the groups through it keep the level reached.
            for p in 0..np {
                if self.count[p] > 0.0 && self.spare[p] <= self.cap[p] * 1e-12 {
                    for j in 0..self.port_groups[p].len() {
                        let k = self.port_groups[p][j] as usize;
                        let g = &mut self.groups[k];
                        if g.frozen == round {
                            continue;
                        }
                        g.frozen = round;
                        g.rate = level;
                        let n = g.members.len() as f64;
                        self.count[g.out as usize] -= n;
                        self.count[g.inp as usize] -= n;
                        live -= 1;
                    }
                }
            }
        }
    }

    /// Transfer `id` of `bytes` joins ports `out` and `inp` at `now` (its
    /// rate is set by the next [`fill`](Self::fill)).
    pub fn join(&mut self, now: u64, id: u32, out: u32, inp: u32, bytes: u64) {
        self.settle(now);
        let slot = out as usize * self.cap.len() + inp as usize;
        if self.group_of[slot] == NO_GROUP {
            self.group_of[slot] = self.groups.len() as u32;
            self.groups.push(Group { out, inp, rate: 0.0, served: 0.0, frozen: 0, members: BinaryHeap::new() });
        }
        let k = self.group_of[slot];
        let g = &mut self.groups[k as usize];
        if g.members.is_empty() {
            g.served = 0.0;
            self.active.push(k);
        }
        g.members.push(Reverse(((g.served + bytes as f64).to_bits(), self.joined, id)));
        self.joined += 1;
        self.generation += 1;
    }

    /// The earliest end at the current rates (whole picoseconds, rounded up).
    pub fn next_end(&self, now: u64) -> Option<u64> {
        self.active
            .iter()
            .filter_map(|&g| {
                let g = &self.groups[g as usize];
                let Reverse((done, _, _)) = g.members.peek()?;
                let left = (f64::from_bits(*done) - g.served).max(0.0);
                (g.rate > 0.0).then(|| now.saturating_add((left / g.rate).ceil() as u64))
            })
            .min()
    }

    /// At a wake-up: the transfers done by `now` (in joining order), which
    /// leave their ports; the rest get new rates at the next `fill`.
    pub fn finish(&mut self, now: u64) -> Vec<u32> {
        self.settle(now);
        let mut done: Vec<(u64, u32)> = Vec::new();
        for &k in &self.active {
            let g = &mut self.groups[k as usize];
            // Done: less than one picosecond of work left.
            while let Some(&Reverse((at, seq, id))) = g.members.peek()
                && f64::from_bits(at) - g.served <= g.rate
            {
                g.members.pop();
                done.push((seq, id));
            }
        }
        if done.is_empty() {
            return Vec::new();
        }
        let groups = &self.groups;
        self.active.retain(|&k| !groups[k as usize].members.is_empty());
        self.generation += 1;
        done.sort_unstable();
        done.into_iter().map(|(_, id)| id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs flows (join time, out, in, bytes) on ports of `cap` bytes/ps to
    /// the end and returns each one's end time, in id order.
    fn ends(cap: &[f64], flows: &[(u64, u32, u32, u64)]) -> Vec<u64> {
        let mut sp = SharedPorts::new(cap.to_vec());
        let mut end = vec![0u64; flows.len()];
        let mut next = 0;
        let mut now = 0;
        loop {
            let wake = sp.next_end(now);
            let join = flows.get(next).map(|f| f.0);
            match (wake, join) {
                (None, None) => break,
                (w, Some(j)) if w.is_none_or(|w| j < w) => {
                    now = j;
                    let (_, o, i, b) = flows[next];
                    sp.join(now, next as u32, o, i, b);
                    sp.fill();
                    next += 1;
                }
                (Some(w), _) => {
                    now = w;
                    for id in sp.finish(now) {
                        end[id as usize] = now;
                    }
                    sp.fill();
                }
                _ => unreachable!(),
            }
        }
        end
    }

    #[test]
    fn one_transfer_takes_bytes_over_bandwidth() {
        assert_eq!(ends(&[2.0, 2.0], &[(0, 0, 1, 1000)]), vec![500]);
    }

    #[test]
    fn two_transfers_out_of_one_port_share_it() {
        // Ports 0 (out of A), 1 (into B), 2 (into C); 1 byte/ps each.
        // A sends 100 to B and 300 to C: both at 1/2 until the first ends
        // at 200, then the second alone at 1: 200 + (300 - 100) = 400, the
        // time of all 400 bytes through A's port, as FIFO would end too.
        assert_eq!(ends(&[1.0, 1.0, 1.0], &[(0, 0, 1, 100), (0, 0, 2, 300)]), vec![200, 400]);
    }

    #[test]
    fn a_receiver_port_limits_senders_that_are_free() {
        // A and B (out ports 0, 1) both send 100 to C (in port 2): C's port
        // splits 1 byte/ps, so both end at 200 though each sender is idle
        // otherwise.
        assert_eq!(ends(&[1.0, 1.0, 1.0], &[(0, 0, 2, 100), (0, 1, 2, 100)]), vec![200, 200]);
    }

    #[test]
    fn max_min_gives_what_a_bottleneck_leaves_to_the_others() {
        // Flows: f0 A->C, f1 B->C, f2 B->D with ports A.out 0, B.out 1,
        // C.in 2, D.in 3 (1 byte/ps). Max-min: C's port splits between f0
        // and f1 (1/2 each); B's port gives f2 what f1 leaves (1/2)
        // (worked by hand: f1 is held to 1/2 by C, and f0 and f2 each get
        // the 1/2 that f1 leaves on their ports). 1000 bytes each: all end
        // at 2000.
        assert_eq!(ends(&[1.0, 1.0, 1.0, 1.0], &[(0, 0, 2, 1000), (0, 1, 2, 1000), (0, 1, 3, 1000)]), vec![2000, 2000, 2000]);
        // With D's port at 1/4, f2 is held there and f1 gets 3/4 of B but
        // only 1/2 of C: rates (1/2, 1/2, 1/4).
        assert_eq!(ends(&[1.0, 1.0, 1.0, 0.25], &[(0, 0, 2, 1000), (0, 1, 2, 1000), (0, 1, 3, 1000)]), vec![2000, 2000, 4000]);
    }

    #[test]
    fn a_late_joiner_slows_the_transfer_in_progress() {
        // 300 bytes from 0; a second transfer on the same out port joins at
        // 100 (200 left): both at 1/2, the 100-byte joiner ends at 300,
        // then the first has 100 left alone: ends at 400.
        assert_eq!(ends(&[1.0, 1.0, 1.0], &[(0, 0, 1, 300), (100, 0, 2, 100)]), vec![400, 300]);
    }
}

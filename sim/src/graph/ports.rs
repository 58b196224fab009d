//! Transfers that share device ports: every transfer over a `port` link
//! holds its sender's port out and its receiver's port in, and the
//! transfers active at once get max-min fair rates (progressive filling),
//! as DMA engines and NICs share a PCIe slot, an NVSwitch port or a wire.
//! Rates change only when a transfer joins or leaves, so the replay keeps
//! one pending wake-up: the earliest end at the current rates.

/// A transfer moving bytes through two ports.
#[derive(Debug, Clone, Copy)]
struct Flow {
    /// The replay's transfer id.
    id: u32,
    out: u32,
    inp: u32,
    /// Bytes still to move.
    left: f64,
    /// Bytes per picosecond.
    rate: f64,
}

/// The ports of one cluster and the transfers crossing them.
#[derive(Debug, Clone)]
pub(crate) struct SharedPorts {
    /// Capacity of each port in bytes per picosecond.
    cap: Vec<f64>,
    flows: Vec<Flow>,
    /// When `left` was last brought up to date.
    settled_at: u64,
    /// Changes so far; a wake-up carries the value of its time.
    pub generation: u32,
    // Scratch for the filling.
    spare: Vec<f64>,
    count: Vec<u32>,
}

impl SharedPorts {
    pub fn new(cap: Vec<f64>) -> SharedPorts {
        let n = cap.len();
        SharedPorts { cap, flows: Vec::new(), settled_at: 0, generation: 0, spare: vec![0.0; n], count: vec![0; n] }
    }

    /// Moves every flow's bytes forward to `now` at the current rates.
    fn settle(&mut self, now: u64) {
        let dt = now.saturating_sub(self.settled_at) as f64;
        if dt > 0.0 {
            for f in &mut self.flows {
                f.left = (f.left - f.rate * dt).max(0.0);
            }
        }
        self.settled_at = self.settled_at.max(now);
    }

    /// Max-min fair rates: raise every unfrozen flow's rate together until
    /// a port is full, freeze the flows through it, repeat.
    fn fill(&mut self) {
        self.spare.copy_from_slice(&self.cap);
        let mut frozen = vec![false; self.flows.len()];
        for f in &mut self.flows {
            f.rate = 0.0;
        }
        let mut live = self.flows.len();
        while live > 0 {
            self.count.iter_mut().for_each(|c| *c = 0);
            for (f, _) in self.flows.iter().zip(&frozen).filter(|(_, z)| !**z) {
                self.count[f.out as usize] += 1;
                self.count[f.inp as usize] += 1;
            }
            let step = (0..self.cap.len())
                .filter(|&p| self.count[p] > 0)
                .map(|p| self.spare[p] / self.count[p] as f64)
                .fold(f64::INFINITY, f64::min);
            for p in 0..self.cap.len() {
                self.spare[p] -= step * self.count[p] as f64;
            }
            for (f, z) in self.flows.iter_mut().zip(frozen.iter_mut()).filter(|(_, z)| !**z) {
                f.rate += step;
                // A port is full once what is left is a rounding error of
                // its capacity.
                let full = |p: u32| self.spare[p as usize] <= self.cap[p as usize] * 1e-12;
                if full(f.out) || full(f.inp) {
                    *z = true;
                    live -= 1;
                }
            }
        }
    }

    /// Transfer `id` of `bytes` joins ports `out` and `inp` at `now`.
    pub fn join(&mut self, now: u64, id: u32, out: u32, inp: u32, bytes: u64) {
        self.settle(now);
        self.flows.push(Flow { id, out, inp, left: bytes as f64, rate: 0.0 });
        self.fill();
        self.generation += 1;
    }

    /// The earliest end at the current rates (whole picoseconds, rounded up).
    pub fn next_end(&self, now: u64) -> Option<u64> {
        self.flows.iter().filter(|f| f.rate > 0.0).map(|f| now.saturating_add((f.left / f.rate).ceil() as u64)).min()
    }

    /// At a wake-up: the transfers done by `now` (in joining order), which
    /// leave their ports; the rest get new rates.
    pub fn finish(&mut self, now: u64) -> Vec<u32> {
        self.settle(now);
        let mut done = Vec::new();
        // Done: less than one picosecond of work left.
        self.flows.retain(|f| {
            let over = f.left <= f.rate;
            if over {
                done.push(f.id);
            }
            !over
        });
        if !done.is_empty() {
            self.fill();
            self.generation += 1;
        }
        done
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
                    next += 1;
                }
                (Some(w), _) => {
                    now = w;
                    for id in sp.finish(now) {
                        end[id as usize] = now;
                    }
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

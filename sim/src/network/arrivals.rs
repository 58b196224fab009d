//! Drained flows in propagation, popped by (arrival time, sequence number).
//!
//! Arrival = drain time + path latency. Drain times never decrease, so when
//! paths share one latency (a star, or any uniform fabric) arrivals come in
//! order and a FIFO holds them all; an arrival earlier than the FIFO's last
//! one goes to a heap instead. Popping takes the smaller head of the two, so
//! the order is exactly that of one (time, sequence) heap.

use crate::network::model::FlowTag;
use crate::time::SimTime;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

#[derive(Default)]
pub(crate) struct Arrivals {
    /// Non-decreasing in (time, sequence).
    fifo: VecDeque<(SimTime, u64, FlowTag)>,
    /// Those that would have broken the FIFO's order.
    heap: BinaryHeap<Reverse<(SimTime, u64, FlowTag)>>,
    seq: u64,
}

impl Arrivals {
    /// Adds a flow arriving at `at`; ties pop in the order they were pushed.
    pub(crate) fn push(&mut self, at: SimTime, tag: FlowTag) {
        let e = (at, self.seq, tag);
        self.seq += 1;
        match self.fifo.back() {
            Some(&(last, _, _)) if at < last => self.heap.push(Reverse(e)),
            _ => self.fifo.push_back(e),
        }
    }

    /// Whether the FIFO's head comes before the heap's.
    fn fifo_first(&self) -> Option<bool> {
        match (self.fifo.front(), self.heap.peek()) {
            (Some(f), Some(Reverse(h))) => Some((f.0, f.1) < (h.0, h.1)),
            (Some(_), None) => Some(true),
            (None, Some(_)) => Some(false),
            (None, None) => None,
        }
    }

    pub(crate) fn peek_time(&self) -> Option<SimTime> {
        match self.fifo_first()? {
            true => self.fifo.front().map(|e| e.0),
            false => self.heap.peek().map(|Reverse(e)| e.0),
        }
    }

    /// Pops the next arrival if it is at or before `now`.
    pub(crate) fn pop_until(&mut self, now: SimTime) -> Option<FlowTag> {
        if self.peek_time()? > now {
            return None;
        }
        match self.fifo_first()? {
            true => self.fifo.pop_front().map(|e| e.2),
            false => self.heap.pop().map(|Reverse(e)| e.2),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_then_push_order_like_one_heap() {
        let mut a = Arrivals::default();
        let mut reference = BinaryHeap::new();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let (mut now, mut seq) = (0u64, 0u64);
        let mut out_of_order = 0u64;
        for round in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 3 != 0 {
                // Mostly one latency (in order), sometimes a shorter or
                // longer one, with many equal times.
                let latency = match x % 7 {
                    0 => 10,
                    1 => 500,
                    _ => 100,
                };
                let at = SimTime(now + latency);
                let before = a.heap.len();
                a.push(at, round);
                out_of_order += (a.heap.len() - before) as u64;
                reference.push(Reverse((at, seq, round)));
                seq += 1;
            } else {
                now += (x >> 32) % 50;
                let mut got = Vec::new();
                while let Some(tag) = a.pop_until(SimTime(now)) {
                    got.push(tag);
                }
                let mut want = Vec::new();
                while reference.peek().is_some_and(|Reverse(e)| e.0 <= SimTime(now)) {
                    want.push(reference.pop().map(|Reverse(e)| e.2).unwrap());
                }
                assert_eq!(got, want);
            }
            assert_eq!(a.len(), reference.len());
            assert_eq!(a.peek_time(), reference.peek().map(|Reverse(e)| e.0));
        }
        // Both parts were used.
        assert!(out_of_order > 100 && seq - out_of_order > 100, "{out_of_order} of {seq}");
    }

    #[test]
    fn one_latency_needs_no_heap() {
        let mut a = Arrivals::default();
        for (i, t) in [5u64, 5, 7, 7, 7, 9].into_iter().enumerate() {
            a.push(SimTime(t + 100), i as FlowTag);
        }
        assert!(a.heap.is_empty());
        assert_eq!(a.pop_until(SimTime(104)), None);
        assert_eq!(a.peek_time(), Some(SimTime(105)));
        let got: Vec<_> = std::iter::from_fn(|| a.pop_until(SimTime(107))).collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
        assert_eq!(a.len(), 1);
    }
}

//! The event core: a priority queue of typed events ordered by time, ties
//! broken by insertion order, so the same inputs always replay identically.
//!
//! It is a radix heap over the integer picosecond clock: simulated time never
//! goes backwards, so every pending event is at or after `last` (the time of
//! the last pop), and an event sits in the bucket numbered by the highest bit
//! in which its time differs from `last`. Popping empties the lowest
//! non-empty bucket into lower ones around its minimum; each event moves at
//! most 64 times and usually once or twice. Events at exactly `last` wait in
//! a FIFO, and since a bucket only ever receives a redistribution while empty
//! and direct insertions after it, every bucket stays in insertion order:
//! equal times pop first-in first-out without storing a sequence number.

use crate::time::SimTime;
use std::collections::VecDeque;

/// Pending events of type `E`. Only the owner of the queue advances the
/// clock, by popping; scheduling in the past is clamped to `now`.
pub struct EventQueue<E> {
    /// Events at exactly `last`, in insertion order.
    front: VecDeque<E>,
    /// `buckets[i]`: events whose time first differs from `last` in bit `i`.
    buckets: Vec<Vec<(u64, E)>>,
    /// Bit `i` set when `buckets[i]` is not empty.
    occupied: u64,
    last: u64,
    /// Earliest pending time (`u64::MAX` when empty).
    min: u64,
    len: usize,
    now: SimTime,
    popped: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue {
            front: VecDeque::new(),
            buckets: (0..64).map(|_| Vec::new()).collect(),
            occupied: 0,
            last: 0,
            min: u64::MAX,
            len: 0,
            now: SimTime::ZERO,
            popped: 0,
        }
    }

    /// Current simulated time: the time of the last popped event.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Schedules `event` at absolute time `at` (never before `now`).
    pub fn schedule_at(&mut self, at: SimTime, event: E) {
        let t = at.max(self.now).0;
        // `now` only grows and `last` is the time of the last pop, so t >= last.
        debug_assert!(t >= self.last);
        self.len += 1;
        self.min = self.min.min(t);
        if t == self.last {
            self.front.push_back(event);
        } else {
            let b = 63 - (t ^ self.last).leading_zeros() as usize;
            self.buckets[b].push((t, event));
            self.occupied |= 1 << b;
        }
    }

    /// Schedules `event` after `delay` from now.
    pub fn schedule_in(&mut self, delay: SimTime, event: E) {
        self.schedule_at(self.now + delay, event);
    }

    pub fn peek_time(&self) -> Option<SimTime> {
        (self.len > 0).then_some(SimTime(self.min))
    }

    /// Pops the earliest event and advances the clock to its time.
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        if self.len == 0 {
            return None;
        }
        if self.front.is_empty() {
            self.redistribute();
        }
        let event = self.front.pop_front()?;
        self.len -= 1;
        self.now = SimTime(self.last);
        self.popped += 1;
        self.min = if !self.front.is_empty() {
            self.last
        } else if self.occupied != 0 {
            let b = self.occupied.trailing_zeros() as usize;
            self.buckets[b].iter().map(|&(t, _)| t).min().unwrap_or(u64::MAX)
        } else {
            u64::MAX
        };
        Some((self.now, event))
    }

    /// Moves the lowest non-empty bucket around its minimum, which becomes `last`.
    fn redistribute(&mut self) {
        if self.occupied == 0 {
            return;
        }
        let b = self.occupied.trailing_zeros() as usize;
        self.occupied &= !(1 << b);
        let items = std::mem::take(&mut self.buckets[b]);
        self.last = self.min;
        let mut items = items;
        for (t, e) in items.drain(..) {
            if t == self.last {
                self.front.push_back(e);
            } else {
                let nb = 63 - (t ^ self.last).leading_zeros() as usize;
                self.buckets[nb].push((t, e));
                self.occupied |= 1 << nb;
            }
        }
        // Hand the emptied allocation back for reuse.
        self.buckets[b] = items;
    }

    /// Advances the clock without an event (for time owned by another
    /// component, such as the network); never moves backwards.
    pub fn advance_to(&mut self, t: SimTime) {
        if t > self.now {
            self.now = t;
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of events popped so far (for step bounds and benchmarks).
    pub fn popped(&self) -> u64 {
        self.popped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    #[test]
    fn pops_by_time_then_insertion_order() {
        let mut q = EventQueue::new();
        q.schedule_at(SimTime(5), 'a');
        q.schedule_at(SimTime(1), 'b');
        q.schedule_at(SimTime(5), 'c');
        q.schedule_at(SimTime(1), 'd');
        assert_eq!(q.peek_time(), Some(SimTime(1)));
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, vec!['b', 'd', 'a', 'c']);
        assert_eq!(q.now(), SimTime(5));
        assert_eq!(q.popped(), 4);
        assert_eq!(q.peek_time(), None);
    }

    #[test]
    fn scheduling_in_the_past_is_clamped_to_now() {
        let mut q = EventQueue::new();
        q.schedule_at(SimTime(10), 1);
        q.pop();
        q.schedule_at(SimTime(3), 2);
        assert_eq!(q.pop(), Some((SimTime(10), 2)));
    }

    #[test]
    fn matches_a_binary_heap_on_time_then_sequence() {
        // Interleaved pushes and pops with many equal times, against the
        // textbook (time, sequence) heap.
        let mut q = EventQueue::new();
        let mut reference = BinaryHeap::new();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut seq = 0u64;
        let mut now = 0u64;
        for round in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 3 != 0 || reference.is_empty() {
                // Delays from 0 to ~2^40 ps, many of them equal.
                let delay = match x % 5 {
                    0 => 0,
                    1 => x >> 60,
                    2 => (x >> 20) % 1000,
                    _ => (x >> 24) % (1 << 40),
                };
                q.schedule_at(SimTime(now + delay), round);
                reference.push(Reverse((now + delay, seq, round)));
                seq += 1;
            } else {
                let Reverse((t, _, id)) = reference.pop().unwrap();
                assert_eq!(q.peek_time(), Some(SimTime(t)));
                assert_eq!(q.pop(), Some((SimTime(t), id)));
                now = t;
            }
            assert_eq!(q.len(), reference.len());
        }
        while let Some(Reverse((t, _, id))) = reference.pop() {
            assert_eq!(q.pop(), Some((SimTime(t), id)));
        }
        assert!(q.is_empty());
    }
}

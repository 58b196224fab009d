//! What the filling works on: a group's virtual clock and heap of
//! targets, the tournament tree over links, and the arithmetic that keeps
//! the group path bit for bit equal to the full filling.

use super::*;

/// The flows frozen by one link, all at the same rate.
pub(super) struct Group {
    /// Bytes drained per member since the clock was last reset, as of `at`.
    pub(super) clock: f64,
    pub(super) at: SimTime,
    pub(super) rate: f64,
    pub(super) members: u32,
    /// (target bits, flow slot, generation): non-negative f64 bits order like the values.
    pub(super) heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    /// Largest target bits in `heap` (stale entries included): when it is
    /// due, the whole group is, and drains without heap pops.
    pub(super) max_target: u64,
}

impl Group {
    pub(super) fn push(&mut self, target: f64, slot: u32, generation: u32) {
        let bits = target.to_bits();
        self.max_target = self.max_target.max(bits);
        self.heap.push(Reverse((bits, slot, generation)));
    }

    pub(super) fn clear(&mut self) {
        self.heap.clear();
        self.max_target = 0;
    }

    /// Starts the group afresh at `now`, draining at `rate`.
    pub(super) fn restart(&mut self, now: SimTime, rate: f64) {
        self.clear();
        self.clock = 0.0;
        self.at = now;
        self.rate = rate;
    }

    /// Drains at `rate` from `now` on: the clock restarts only when the
    /// rate changes, so an unchanged rate keeps every member's drain time
    /// exactly.
    pub(super) fn set_rate(&mut self, now: SimTime, rate: f64) {
        if rate != self.rate {
            self.clock = self.clock_at(now);
            self.at = now;
            self.rate = rate;
        }
    }

    pub(super) fn clock_at(&self, now: SimTime) -> f64 {
        if now <= self.at {
            self.clock
        } else {
            self.clock + self.rate * (now - self.at).as_secs_f64()
        }
    }

    /// When a member with `target` has drained, at the current rate.
    pub(super) fn drain_time(&self, target: f64) -> SimTime {
        self.at + ceil_time((target - self.clock).max(0.0) / self.rate)
    }
}

/// The minimum of one value per link, kept under point updates (a
/// tournament tree).
pub(super) struct MinTree {
    /// Indices in use; the leaves above them (padding to a power of two)
    /// hold `u64::MAX` and are never reported.
    pub(super) len: usize,
    pub(super) leaves: usize,
    pub(super) tree: Vec<u64>,
}

impl MinTree {
    pub(super) fn new(n: usize) -> MinTree {
        let leaves = n.next_power_of_two().max(1);
        MinTree { len: n, leaves, tree: vec![u64::MAX; 2 * leaves] }
    }

    pub(super) fn min(&self) -> u64 {
        self.tree[1]
    }

    pub(super) fn set(&mut self, l: usize, v: u64) {
        let tree = &mut self.tree[..];
        let mut i = self.leaves + l;
        if tree[i] == v {
            return;
        }
        tree[i] = v;
        // `m`: the new value at `i`; its parent takes the smaller of it
        // and its sibling, up to the first parent that does not change.
        let mut m = v;
        while i > 1 {
            m = m.min(tree[i ^ 1]);
            i /= 2;
            if tree[i] == m {
                break;
            }
            tree[i] = m;
        }
    }

    /// Appends to `out` every index whose value is at most `x`.
    pub(super) fn collect_at_most(&self, x: u64, out: &mut Vec<u32>, stack: &mut Vec<usize>) {
        stack.clear();
        stack.push(1);
        while let Some(i) = stack.pop() {
            if self.tree[i] > x {
                continue;
            }
            if i >= self.leaves {
                // A padding leaf matches only x = u64::MAX (a saturated time).
                if i - self.leaves < self.len {
                    out.push((i - self.leaves) as u32);
                }
            } else {
                stack.push(2 * i);
                stack.push(2 * i + 1);
            }
        }
    }
}

/// Seconds to picoseconds, rounded up (a transfer must not finish early):
/// `SimTime::from_secs_f64_ceil` without a call to `f64::ceil` (a libm
/// call on targets without SSE4.1, and this runs once per drain time).
pub(super) fn ceil_time(secs: f64) -> SimTime {
    let ps = secs * SimTime::PS_PER_SECOND;
    // NaN, zero and negative values give zero, as their ceiling is <= 0.
    if !(ps > 0.0) {
        return SimTime::ZERO;
    }
    // At or beyond 2^64 saturate; below it every f64 from 2^53 up is an
    // integer, so truncating and adding one where something was cut off
    // is the ceiling.
    if ps >= u64::MAX as f64 {
        return SimTime::MAX;
    }
    let t = ps as u64;
    SimTime(if (t as f64) < ps { t + 1 } else { t })
}

/// Whether link `m`, not a group link, carries less than its capacity (by
/// `THETA_MARGIN`) at the new shares (`share`, of groups frozen in filling
/// `epoch`) plus the started flows' load: then, as its share only grows
/// while filling, it stays above the share of every group crossing it
/// while it has unfrozen flows (the sum of the frozen groups' rates plus
/// the next group's share times the flows left grows with each group
/// frozen, up to the load), and never freezes a flow.
#[allow(clippy::too_many_arguments)]
pub(super) fn unsaturated(
    m: usize,
    crossing: &[(u32, u32)],
    share: &[f64],
    frozen: &[u32],
    epoch: u32,
    fresh_stamp: &[u32],
    fresh_load: &[f64],
    capacity: f64,
) -> bool {
    let mut load = if fresh_stamp[m] == epoch { fresh_load[m] } else { 0.0 };
    for &(h, c) in crossing {
        if frozen[h as usize] != epoch {
            return false;
        }
        load += f64::from(c) * share[h as usize];
    }
    load * (1.0 + THETA_MARGIN) < capacity
}

/// A flow on `links` joins group `g`: counted on each link, and the group's
/// bound lowered to the fair share of each of them that is not a group link.
pub(super) fn join_links(
    links: &[u32],
    g: u32,
    link_groups: &mut [Vec<(u32, u32)>],
    theta: &mut [f64],
    exact: (&[bool], &[bool]),
    capacity: &[f64],
    link_flows: &[Vec<Member>],
) {
    let (is_group_link, watched) = exact;
    for &m in links {
        let m = m as usize;
        count_in(&mut link_groups[m], g, 1);
        if m != g as usize && !is_group_link[m] && !watched[m] {
            theta[g as usize] = theta[g as usize].min(capacity[m] / link_flows[m].len() as f64);
        }
    }
}

/// `(r - s).max(0.0)` applied `count` times, bit for bit, in O(binades
/// crossed) rather than O(count) steps. While `r` and the exact `r - s`
/// stay in one binade (spacing `u`), `r` is a multiple of `u` and each
/// rounded step removes exactly `round(s / u)` units, unless `s / u` ends
/// in exactly one half (a tie: rounding then depends on the last bit, so
/// that step is done as is); so the steps that stay in the binade are
/// taken at once in integers, and the step that leaves it is done as is.
pub(super) fn repeat_sub(mut r: f64, s: f64, mut count: u32) -> f64 {
    const MANTISSA: u64 = 1 << 52;
    // Few steps: as is (independent links' chains overlap in the CPU,
    // which beats the bit work below).
    if count <= 16 {
        for _ in 0..count {
            r = (r - s).max(0.0);
        }
        return r;
    }
    while count > 0 {
        // One step, or outside the range where r / u, s / u are exact and
        // no step clamps: step as is.
        if count <= 2 || !((1e-200..1e200).contains(&r) && (0.0..1e200).contains(&s)) {
            r = (r - s).max(0.0);
            count -= 1;
            continue;
        }
        let bits = r.to_bits();
        let exp = (bits >> 52) & 0x7ff;
        // r = m * u with u = 2^(exp - 1075) and m the mantissa with its
        // hidden bit. s / u is computed as s * 2^(1075 - exp): both are the
        // exact value rounded once, so equal bit for bit, and a product
        // avoids a division's latency on this hot path.
        let inv_u = f64::from_bits((2098 - exp) << 52);
        let m = (bits & (MANTISSA - 1)) | MANTISSA;
        let x = s * inv_u;
        // x >= 0: truncation is the floor (f64::floor is a libm call on
        // targets without SSE4.1).
        let whole = if x < MANTISSA as f64 { x as u64 } else { u64::MAX };
        let frac = x - whole as f64;
        if whole == u64::MAX || frac == 0.5 {
            r = (r - s).max(0.0);
            count -= 1;
            continue;
        }
        let q = if frac < 0.5 { whole } else { whole + 1 };
        // The j-th step's exact result stays at or above the binade's
        // bottom while (j - 1) q + x <= m - 2^52 (x not whole: + 1).
        let a = m - MANTISSA;
        let need = whole + u64::from(frac != 0.0);
        if a < need {
            r = (r - s).max(0.0);
            count -= 1;
            continue;
        }
        // (q = 0: every step leaves r as it is.)
        if q == 0 {
            return r;
        }
        // Usually every step stays: checked with a product, the division
        // only when some step leaves the binade.
        let k = if u64::from(count - 1).saturating_mul(q).saturating_add(need) <= a {
            u64::from(count)
        } else {
            ((a - need) / q + 1).min(u64::from(count))
        };
        r = f64::from_bits((bits & !(MANTISSA - 1) & !(1 << 63)) | ((m - k * q) & (MANTISSA - 1)));
        count -= k as u32;
    }
    r
}

/// Counts `k` more members of group `g` in a link's (group, members) list.
pub(super) fn count_in(list: &mut Vec<(u32, u32)>, g: u32, k: u32) {
    if k == 0 {
        return;
    }
    match list.iter_mut().find(|e| e.0 == g) {
        Some(e) => e.1 += k,
        None => list.push((g, k)),
    }
}

/// Counts `k` members of group `g` fewer in a link's (group, members) list.
pub(super) fn count_out(list: &mut Vec<(u32, u32)>, g: u32, k: u32) {
    if k == 0 {
        return;
    }
    if let Some(i) = list.iter().position(|e| e.0 == g) {
        list[i].1 -= k;
        if list[i].1 == 0 {
            list.swap_remove(i);
        }
    }
}

/// Fair share as a totally ordered key: non-negative f64 bits order like the values.
/// Pops the link of smallest current share: a stale key (shares only
/// grow, so it is a lower bound) is replaced in place, one sift instead of a
/// pop and a push; every link has one entry, so the order is the same.
pub(super) fn pop_min_share(heap: &mut BinaryHeap<Reverse<(u64, u32)>>, residual: &[f64], unfrozen: &[u32]) -> Option<(f64, usize)> {
    while let Some(mut top) = heap.peek_mut() {
        let Reverse((key, l)) = *top;
        let lu = l as usize;
        if unfrozen[lu] == 0 {
            PeekMut::pop(top);
            continue;
        }
        let current = share_key(residual[lu], unfrozen[lu]);
        if current != key {
            *top = Reverse((current, l));
            continue;
        }
        PeekMut::pop(top);
        return Some((f64::from_bits(key), lu));
    }
    None
}

pub(super) fn share_key(residual: f64, n: u32) -> u64 {
    // A tiny floor keeps rates positive when rounding leaves zero residual.
    (residual.max(1e-9) / n as f64).to_bits()
}

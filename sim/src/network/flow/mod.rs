//! Flow-level network: every link's bandwidth is shared max-min fairly among
//! the flows crossing it, and the shares are recomputed whenever the set of
//! flows changes (all changes at one instant are batched into one
//! recomputation). A flow's payload drains at its share; it arrives one
//! path latency after its last byte left.
//!
//! The sharing is computed by progressive filling: repeatedly take the link
//! whose remaining capacity per unfrozen flow is smallest, freeze its flows
//! at that rate and charge them on their other links. A change only affects
//! the flows connected to it through shared links, so only that connected
//! component is refilled (the others keep their rates bit for bit).
//!
//! Flows frozen by the same link get the same rate, so they form a *group*
//! (named by that link) with one virtual clock: the bytes each member has
//! drained since the group's rate last changed. A member finishes when the
//! clock reaches its target; remaining bytes are never updated eagerly, and
//! a rate change costs O(1) per group rather than O(1) per flow. Each group
//! keeps its members in a heap by target (stale entries skipped by a
//! generation counter), and a tournament tree over links gives the earliest
//! drain of all groups.
//!
//! A recomputation takes the first of three paths that applies, all giving
//! the same shares bit for bit: the *fast path* (every flow on one
//! bottleneck whose share capacity / flows is below every other link's);
//! the *group path* (`group_fill`: progressive filling over the group links
//! and a few watched near-saturated links only, each group frozen whole,
//! its c members' charges on a link done as c exact subtractions in
//! O(binades) by `repeat_sub`, flows moved between groups where a link
//! freezes them earlier; it proves that no other link could freeze a flow
//! or gives up; it first tries with the watched links checked exactly
//! instead of filled); and the full progressive filling of the changed
//! component. On parameter-server traffic over fat-trees, Clos and tori
//! nearly every recomputation takes the group path, whose cost grows with
//! the groups and the links they share, not with the flows.

use crate::error::SimError;
use crate::network::arrivals::Arrivals;
use crate::network::model::{Fabric, FlowTag, NetworkModel, Route};
use crate::network::topology::Topology;
use crate::time::SimTime;
use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::BinaryHeap;

/// Completion-coalescing window: 1 ns, far below any link latency modelled.
const DRAIN_WINDOW: SimTime = SimTime(1_000);

/// No group yet (a flow started since the last recomputation).
const NONE: u32 = u32::MAX;

/// Relative margin by which a link that is not a group link must stay
/// above the shares of the groups crossing it for the group path: far
/// above the rounding of a few hundred subtractions, so the link's share
/// cannot reach theirs while progressive filling runs.
const THETA_MARGIN: f64 = 1e-9;

/// Fast recomputations in a row after which the group path's bookkeeping
/// stops (see `FlowNetwork::bookkeeping`).
const FAST_STREAK: u32 = 16;

/// A recomputation that is not fast within this many of the previous one
/// turns the bookkeeping back on.
const SLOW_AGAIN: u64 = 4;
/// The longest pause between two searches for the component of a slow
/// recomputation once they keep finding the whole network.
const MAX_WIDE_BACKOFF: u32 = 64;

/// A watched link's fair share must exceed the rate of every group
/// crossing it by this factor for it to leave the watch list (and the
/// group path's filling). Only which links the group path fills depends on
/// it, never the shares (each filling still proves its result or falls
/// back). A wider factor keeps links in the filling long after they could
/// matter (measured against 2: the flow network split's log in docs/logs/).
const UNWATCH: f64 = 1.05;

/// The longest pause of the group path's narrow attempts (see
/// `FlowNetwork::narrow_skips`) while they keep failing.
const MAX_NARROW_BACKOFF: u32 = 16;

/// See `FlowNetwork::group_failures`.
const GROUP_RETRY: u32 = 8;

/// Narrow attempts of one recomputation beyond the first, each with the
/// watched links the previous one found saturated filled as well.
const NARROW_RETRIES: usize = 2;

/// How a recomputation went.
enum Path {
    /// Every flow on one bottleneck link, shares capacity / flows.
    Fast,
    /// Progressive filling over the group links, groups frozen whole.
    Groups,
    /// Progressive filling over every flow of the changed component.
    Full,
}

/// A flow in a link's list, carrying what the component search and the
/// filling need so that those loops touch little else.
#[derive(Clone, Copy)]
struct Member {
    slot: u32,
    /// The flow's route: `route_links[start..start + len]` of the fabric.
    start: u32,
    len: u16,
    /// Index of this link in the route.
    k: u16,
}

impl Member {
    fn links<'a>(&self, routes: &'a [u32]) -> &'a [u32] {
        &routes[self.start as usize..self.start as usize + self.len as usize]
    }
}

/// What a flow needs when it starts and ends (its hot state lives in
/// `FlowNetwork`'s per-slot arrays).
#[derive(Clone, Copy)]
struct Flow {
    route: Route,
    tag: FlowTag,
}

/// A flow's bytes, in its group's clock.
#[derive(Clone, Copy, Default)]
struct Payload {
    /// Bytes left, carried from the old group to the new one when it moves.
    carry: f64,
    /// Group clock value at which the flow's last byte has left.
    target: f64,
}

mod fast_path;
mod full_fill;
mod group_path;
mod groups;
use groups::*;

pub struct FlowNetwork {
    fabric: Fabric,
    capacity: Vec<f64>,
    /// Flow slots (reused through `free`). Per-slot state is kept in dense
    /// arrays, each loop touching only those it needs: epoch stamps
    /// (visited by the component search, frozen by the filling), the link
    /// whose share the flow runs at (`NONE` before its first share), the
    /// payload, a generation bumped when the flow leaves a group (so its
    /// heap entry goes stale), its index in `order`, whether it is draining
    /// in the current drain round, and route and tag.
    visited: Vec<u32>,
    frozen: Vec<u32>,
    group: Vec<u32>,
    payload: Vec<Payload>,
    generation: Vec<u32>,
    position: Vec<u32>,
    draining: Vec<bool>,
    flows: Vec<Flow>,
    /// Position of each flow in each of its links' flow lists, by route
    /// index: `link_pos[slot * pos_stride + k]`; the stride is the longest
    /// route seen (the array is re-laid when a longer one comes).
    link_pos: Vec<u32>,
    pos_stride: usize,
    free: Vec<u32>,
    live: usize,
    /// Live flows in creation order, kept with swap-removal: it fixes the
    /// order in which flows finishing together are reported.
    order: Vec<u32>,
    /// Per link: (flow slot, index of the link in the flow's route).
    link_flows: Vec<Vec<Member>>,
    groups: Vec<Group>,
    /// Earliest drain time per group (picoseconds).
    drains: MinTree,
    /// The fast path's bookkeeping. A link is a *group link* while its
    /// group has members. `group_links_crossed[slot]`: group links on the
    /// flow's route; `crossing_not_one`: live flows for which that is not 1.
    /// `free_keys`: share key (capacity / flows) of each busy link that is
    /// not a group link; `group_keys`: u64::MAX - share key of each group link.
    is_group_link: Vec<bool>,
    group_links_crossed: Vec<u32>,
    crossing_not_one: usize,
    free_keys: MinTree,
    group_keys: MinTree,
    /// Flows started since the last recomputation.
    fresh: Vec<u32>,
    /// Fast path scratch: per link, new flows that chose it as their
    /// bottleneck (0 outside `plan_fast_path`..`fast_recompute`), and
    /// those links.
    claims: Vec<u32>,
    new_groups: Vec<u32>,
    /// Whether the fast path may be taken (tests turn it off to compare),
    /// how many recomputations took it, and how many of those started groups.
    fast_path: bool,
    fast_recomputations: u64,
    fast_new_groups: u64,
    /// The group path's bookkeeping (see `group_fill`). `link_groups[l]`:
    /// (group link, members crossing `l`) for every group with members on
    /// `l`. `theta[g]`: a lower bound on capacity / flows of every link that
    /// group `g`'s members cross and that is not a group link (lowered when
    /// such a link gains a flow, a member joins, or a group link stops being
    /// one; reset when the group restarts empty; recomputed from the members
    /// when it blocks the path). `group_list`: the group links, with each
    /// one's index in it.
    link_groups: Vec<Vec<(u32, u32)>>,
    theta: Vec<f64>,
    group_list: Vec<u32>,
    group_list_pos: Vec<u32>,
    /// Links the group path fills exactly beside the group links (ones
    /// found at or below a crossing group's share): `theta` leaves them
    /// out. A link stays watched until it carries no flow or its share is
    /// `UNWATCH` above every group crossing it.
    watched: Vec<bool>,
    watch_list: Vec<u32>,
    /// Whether `link_groups` and `theta` are kept (off after
    /// `FAST_STREAK` fast recomputations in a row, where they only cost;
    /// rebuilt from the flows when two recomputations that are not fast
    /// come within `SLOW_AGAIN`), and the current streak.
    bookkeeping: bool,
    fast_streak: u32,
    /// `FAST_STREAK` (tests lower it to switch often).
    streak_limit: u32,
    /// The recomputation that last was not fast.
    last_slow: u64,
    /// Group path failures in a row, and slow recomputations since the
    /// last attempt.
    group_failures: u32,
    group_skips: u32,
    /// Whether the group path may be taken (tests turn it off to compare)
    /// and how many recomputations took it.
    group_path: bool,
    group_recomputations: u64,
    /// Group path attempts to make without the watched links before the
    /// next narrow one, the current length of that pause (doubling while
    /// narrow attempts fail), and how many recomputations it gave.
    narrow_skips: u32,
    narrow_backoff: u32,
    narrow_recomputations: u64,
    /// Of those, how many a retry gave (see `NARROW_RETRIES`).
    narrow_retried: u64,
    /// Whether narrow attempts are made (tests turn them off to compare).
    narrow_path: bool,
    /// Group path scratch, per link: stamped `g_epoch` while in this
    /// filling's link set, or once frozen; residual, unfrozen flows and
    /// share; a group's (link, count) on the other links of the set; the
    /// started flows (indices in `fresh`) crossing the link.
    g_epoch: u32,
    g_in: Vec<u32>,
    g_frozen: Vec<u32>,
    g_residual: Vec<f64>,
    g_unfrozen: Vec<u32>,
    g_share: Vec<f64>,
    g_theta: Vec<f64>,
    g_incidence: Vec<Vec<(u32, u32)>>,
    g_fresh: Vec<Vec<u32>>,
    g_links: Vec<u32>,
    /// Per started flow (by index in `fresh`): the link it froze at.
    g_fresh_at: Vec<u32>,
    g_heap: BinaryHeap<Reverse<(u64, u32)>>,
    /// Per link: checked exactly in this filling; the started flows' load
    /// on it (valid where stamped).
    g_checked: Vec<u32>,
    g_fresh_stamp: Vec<u32>,
    g_fresh_load: Vec<f64>,
    /// Per flow slot: moved in this filling; the moves (slot, from, to);
    /// scratch for the groups a link finds unfrozen.
    g_moved: Vec<u32>,
    g_movers: Vec<(u32, u32, u32)>,
    g_foreign: Vec<(u32, u32)>,
    /// Per link: moves onto it in the current batch (0 outside it); the
    /// links with a count.
    g_move_count: Vec<u32>,
    g_touched: Vec<u32>,
    /// Per batch of moves (from group, to group) and link of their routes:
    /// (from, to, link, moves).
    g_move_links: Vec<(u32, u32, u32, u32)>,
    /// Watched links a narrow attempt found saturated (so it failed), and
    /// the watched links the next narrow attempt of the same recomputation
    /// fills beside the group links.
    g_saturated: Vec<u32>,
    g_include: Vec<u32>,
    /// Drained flows in propagation, by arrival time.
    arrivals: Arrivals,
    now: SimTime,
    /// Links whose flow set changed since the last recomputation.
    seeds: Vec<u32>,
    /// Links carrying flows, and each link's index in `busy`.
    busy: Vec<u32>,
    busy_pos: Vec<u32>,
    recomputations: u64,
    /// FNV-1a over (tag, arrival picoseconds) of every flow, in the order
    /// the flows left the network's books.
    digest: u64,
    epoch: u32,
    // Scratch, sized to the link count.
    link_stamp: Vec<u32>,
    component: Vec<u32>,
    residual: Vec<f64>,
    unfrozen: Vec<u32>,
    batch_share: Vec<f64>,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    movers: Vec<(u32, u32)>,
    /// Flows in `component`.
    component_flows: usize,
    /// Whether the last component search reached nearly every flow: the
    /// next one then takes every busy link without searching.
    wide: bool,
    /// Slow recomputations left before the component is searched again,
    /// and the current length of that pause.
    wide_skips: u32,
    wide_backoff: u32,
    drain_heap: BinaryHeap<Reverse<u32>>,
    scratch: Vec<u32>,
    stack: Vec<usize>,
}

impl FlowNetwork {
    pub fn new(topology: Topology) -> Self {
        let n = topology.links().len();
        let fabric = Fabric::new(topology);
        let capacity = (0..n).map(|l| fabric.link_capacity(l)).collect();
        FlowNetwork {
            fabric,
            capacity,
            visited: Vec::new(),
            frozen: Vec::new(),
            group: Vec::new(),
            payload: Vec::new(),
            generation: Vec::new(),
            position: Vec::new(),
            draining: Vec::new(),
            flows: Vec::new(),
            link_pos: Vec::new(),
            pos_stride: 1,
            free: Vec::new(),
            live: 0,
            order: Vec::new(),
            link_flows: (0..n).map(|_| Vec::new()).collect(),
            groups: (0..n)
                .map(|_| Group {
                    clock: 0.0,
                    at: SimTime::ZERO,
                    rate: 0.0,
                    members: 0,
                    heap: BinaryHeap::new(),
                    max_target: 0,
                })
                .collect(),
            drains: MinTree::new(n),
            is_group_link: vec![false; n],
            group_links_crossed: Vec::new(),
            crossing_not_one: 0,
            free_keys: MinTree::new(n),
            group_keys: MinTree::new(n),
            fresh: Vec::new(),
            claims: vec![0; n],
            new_groups: Vec::new(),
            fast_path: true,
            fast_recomputations: 0,
            fast_new_groups: 0,
            link_groups: (0..n).map(|_| Vec::new()).collect(),
            theta: vec![f64::INFINITY; n],
            group_list: Vec::new(),
            group_list_pos: vec![NONE; n],
            watched: vec![false; n],
            watch_list: Vec::new(),
            bookkeeping: false,
            fast_streak: 0,
            streak_limit: FAST_STREAK,
            last_slow: 0,
            group_failures: 0,
            group_skips: 0,
            group_path: true,
            group_recomputations: 0,
            narrow_skips: 0,
            narrow_backoff: 0,
            narrow_recomputations: 0,
            narrow_retried: 0,
            narrow_path: true,
            g_epoch: 0,
            g_in: vec![0; n],
            g_frozen: vec![0; n],
            g_residual: vec![0.0; n],
            g_unfrozen: vec![0; n],
            g_share: vec![0.0; n],
            g_theta: vec![0.0; n],
            g_incidence: (0..n).map(|_| Vec::new()).collect(),
            g_fresh: (0..n).map(|_| Vec::new()).collect(),
            g_links: Vec::new(),
            g_fresh_at: Vec::new(),
            g_heap: BinaryHeap::new(),
            g_checked: vec![0; n],
            g_fresh_stamp: vec![0; n],
            g_fresh_load: vec![0.0; n],
            g_moved: Vec::new(),
            g_movers: Vec::new(),
            g_foreign: Vec::new(),
            g_move_count: vec![0; n],
            g_touched: Vec::new(),
            g_move_links: Vec::new(),
            g_saturated: Vec::new(),
            g_include: Vec::new(),
            arrivals: Arrivals::default(),
            now: SimTime::ZERO,
            seeds: Vec::new(),
            busy: Vec::new(),
            busy_pos: vec![NONE; n],
            recomputations: 0,
            digest: 0xcbf2_9ce4_8422_2325,
            epoch: 0,
            link_stamp: vec![0; n],
            component: Vec::new(),
            residual: vec![0.0; n],
            unfrozen: vec![0; n],
            batch_share: vec![-1.0; n],
            heap: BinaryHeap::new(),
            movers: Vec::new(),
            component_flows: 0,
            wide: false,
            wide_skips: 0,
            wide_backoff: 0,
            drain_heap: BinaryHeap::new(),
            scratch: Vec::new(),
            stack: Vec::new(),
        }
    }

    /// Recomputations by path: (fast, group, full filling).
    pub fn path_counts(&self) -> (u64, u64, u64) {
        let (fast, group) = (self.fast_recomputations, self.group_recomputations);
        (fast, group, self.recomputations - fast - group)
    }

    /// How many times the shares were recomputed (for benchmarks).
    pub fn recomputations(&self) -> u64 {
        self.recomputations
    }

    /// FNV-1a over every flow's (tag, arrival time in picoseconds), in the
    /// order flows finished draining (zero-byte flows when started): two
    /// runs with equal digests produced the same completions bit for bit.
    pub fn flow_digest(&self) -> u64 {
        self.digest
    }

    fn record_arrival(&mut self, at: SimTime, tag: FlowTag) {
        for v in [tag, at.0] {
            self.digest = (self.digest ^ v).wrapping_mul(0x0100_0000_01b3);
        }
        self.arrivals.push(at, tag);
    }

    /// Current rate of the flow with `tag`, in bytes per second (tests).
    pub fn rate_of(&mut self, tag: FlowTag) -> Option<f64> {
        self.refresh();
        let &slot = self.order.iter().find(|&&s| self.flows[s as usize].tag == tag)?;
        Some(self.groups[self.group[slot as usize] as usize].rate)
    }

    fn refresh(&mut self) {
        if !self.seeds.is_empty() {
            self.recompute();
        }
    }

    fn next_drain(&self) -> SimTime {
        SimTime(self.drains.min())
    }

    /// Republishes link `l`'s share key in the fast path's trees.
    fn update_keys(&mut self, l: usize) {
        let n = self.link_flows[l].len() as u32;
        let key = share_key(self.capacity[l], n.max(1));
        let (free, grouped) = match (n > 0, self.is_group_link[l]) {
            (false, _) => (u64::MAX, u64::MAX),
            (true, false) => (key, u64::MAX),
            (true, true) => (u64::MAX, u64::MAX - key),
        };
        self.free_keys.set(l, free);
        self.group_keys.set(l, grouped);
    }

    /// Makes link `l` a group link exactly while its group has members.
    fn sync_group_link(&mut self, l: usize) {
        let is = self.groups[l].members > 0;
        if is == self.is_group_link[l] {
            return;
        }
        self.is_group_link[l] = is;
        if is {
            self.group_list_pos[l] = self.group_list.len() as u32;
            self.group_list.push(l as u32);
        } else {
            let p = self.group_list_pos[l] as usize;
            self.group_list.swap_remove(p);
            if let Some(&moved) = self.group_list.get(p) {
                self.group_list_pos[moved as usize] = p as u32;
            }
            self.group_list_pos[l] = NONE;
            // Now a link the groups crossing it must stay below.
            let n = self.link_flows[l].len();
            if n > 0 && self.bookkeeping && !self.watched[l] {
                let v = self.capacity[l] / n as f64;
                for &(g, _) in &self.link_groups[l] {
                    let t = &mut self.theta[g as usize];
                    *t = t.min(v);
                }
            }
        }
        for e in &self.link_flows[l] {
            let c = &mut self.group_links_crossed[e.slot as usize];
            let before = *c == 1;
            if is {
                *c += 1;
            } else {
                *c -= 1;
            }
            let after = *c == 1;
            if before && !after {
                self.crossing_not_one += 1;
            } else if after && !before {
                self.crossing_not_one -= 1;
            }
        }
        self.update_keys(l);
    }

    /// Removes every flow that drains by `until`, reporting it as finished
    /// at `t`, in the order the flows' creation-order list scan finds them.
    fn drain(&mut self, t: SimTime, until: SimTime) {
        // Groups with a member due: walk the tournament tree.
        let mut due = std::mem::take(&mut self.scratch);
        due.clear();
        let mut stack = std::mem::take(&mut self.stack);
        self.drains.collect_at_most(until.0, &mut due, &mut stack);
        let mut positions = std::mem::take(&mut self.drain_heap).into_vec();
        positions.clear();
        for &l in &due {
            let g = &mut self.groups[l as usize];
            if g.members > 0 && g.drain_time(f64::from_bits(g.max_target)) <= until {
                // Every member is due (drain times grow with targets): take
                // the live entries as they lie, without ordering them.
                for &Reverse((_, slot, generation)) in g.heap.iter() {
                    let s = slot as usize;
                    if self.generation[s] == generation {
                        self.generation[s] = generation.wrapping_add(1);
                        self.draining[s] = true;
                        positions.push(Reverse(self.position[s]));
                    }
                }
                g.members = 0;
                g.clear();
                continue;
            }
            while let Some(&Reverse((target, slot, generation))) = g.heap.peek() {
                let s = slot as usize;
                if self.generation[s] != generation {
                    g.heap.pop();
                    continue;
                }
                if g.drain_time(f64::from_bits(target)) > until {
                    break;
                }
                g.heap.pop();
                g.members -= 1;
                self.generation[s] = generation.wrapping_add(1);
                self.draining[s] = true;
                positions.push(Reverse(self.position[s]));
            }
        }
        // Replays a scan of the creation-order list that swap-removes every
        // draining flow: the flow moved into a hole is examined next, so
        // flows leave in order of the lowest position holding a draining
        // flow. When they are a good part of the list, scan it; otherwise
        // pop those positions from a heap.
        if positions.len() * 8 >= self.order.len() {
            let mut left = positions.len();
            positions.clear();
            self.drain_heap = BinaryHeap::from(positions);
            let mut p = 0;
            while left > 0 && p < self.order.len() {
                let slot = self.order[p];
                if !self.draining[slot as usize] {
                    p += 1;
                    continue;
                }
                self.remove(slot, t);
                left -= 1;
                self.order.swap_remove(p);
                if let Some(&moved) = self.order.get(p) {
                    self.position[moved as usize] = p as u32;
                }
            }
        } else {
            self.drain_heap = BinaryHeap::from(positions);
            while let Some(Reverse(p)) = self.drain_heap.pop() {
                if p as usize >= self.order.len() {
                    continue; // its flow was moved into a lower hole
                }
                let slot = self.order[p as usize];
                if !self.draining[slot as usize] {
                    continue;
                }
                self.remove(slot, t);
                self.order.swap_remove(p as usize);
                if let Some(&moved) = self.order.get(p as usize) {
                    self.position[moved as usize] = p;
                    if self.draining[moved as usize] {
                        self.drain_heap.push(Reverse(p));
                    }
                }
            }
        }
        for &l in &due {
            self.sync_group_link(l as usize);
        }
        self.scratch = due;
        self.stack = stack;
    }

    /// Re-lays `link_pos` for routes of up to `len` links.
    #[cold]
    fn widen_link_pos(&mut self, len: usize) {
        let old = self.pos_stride;
        let mut wide = vec![0; self.flows.len() * len];
        for (slot, chunk) in self.link_pos.chunks_exact(old).enumerate() {
            wide[slot * len..slot * len + old].copy_from_slice(chunk);
        }
        self.link_pos = wide;
        self.pos_stride = len;
    }

    /// Takes flow `slot` out of its links and reports it arriving after the path latency.
    fn remove(&mut self, slot: u32, t: SimTime) {
        self.draining[slot as usize] = false;
        let Flow { route, tag } = self.flows[slot as usize];
        let stride = self.pos_stride;
        let old = self.group[slot as usize];
        for k in 0..route.len as usize {
            let l = self.fabric.route_links(route)[k];
            if old != NONE && self.bookkeeping {
                count_out(&mut self.link_groups[l as usize], old, 1);
            }
            let p = self.link_pos[slot as usize * stride + k] as usize;
            let list = &mut self.link_flows[l as usize];
            list.swap_remove(p);
            if let Some(&moved) = list.get(p) {
                self.link_pos[moved.slot as usize * stride + moved.k as usize] = p as u32;
            }
            if list.is_empty() {
                let b = self.busy_pos[l as usize] as usize;
                self.busy.swap_remove(b);
                if let Some(&moved) = self.busy.get(b) {
                    self.busy_pos[moved as usize] = b as u32;
                }
            }
            self.seeds.push(l);
        }
        if self.group_links_crossed[slot as usize] != 1 {
            self.crossing_not_one -= 1;
        }
        self.record_arrival(t + route.latency, tag);
        self.free.push(slot);
        self.live -= 1;
    }
}

impl NetworkModel for FlowNetwork {
    fn start_flow_on(
        &mut self,
        now: SimTime,
        src: usize,
        dst: usize,
        route: Route,
        bytes: u64,
        tag: FlowTag,
    ) -> Result<(), SimError> {
        let now = now.max(self.now);
        self.fabric.account(now, src, dst, route, bytes);
        if route.len == 0 || bytes == 0 {
            self.record_arrival(now + route.latency, tag);
            return Ok(());
        }
        if self.seeds.is_empty() {
            self.now = now;
        } else if now > self.now {
            // Changes at an earlier instant are settled first.
            self.recompute();
            self.now = now;
        }
        if route.len as usize > self.pos_stride {
            self.widen_link_pos(route.len as usize);
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.visited.push(0);
                self.frozen.push(0);
                self.group.push(NONE);
                self.group_links_crossed.push(0);
                self.payload.push(Payload::default());
                self.generation.push(0);
                self.position.push(0);
                self.draining.push(false);
                self.flows.push(Flow { route, tag });
                self.link_pos.resize(self.link_pos.len() + self.pos_stride, 0);
                (self.flows.len() - 1) as u32
            }
        };
        let s = slot as usize;
        self.position[s] = self.order.len() as u32;
        self.order.push(slot);
        self.live += 1;
        self.fresh.push(slot);
        self.group[s] = NONE;
        self.payload[s].carry = bytes as f64;
        self.flows[s] = Flow { route, tag };
        let FlowNetwork { fabric, link_pos, pos_stride, link_flows, seeds, busy, busy_pos, .. } = self;
        let pos = &mut link_pos[s * *pos_stride..];
        for (k, &l) in fabric.route_links(route).iter().enumerate() {
            let list = &mut link_flows[l as usize];
            if list.is_empty() {
                busy_pos[l as usize] = busy.len() as u32;
                busy.push(l);
            }
            pos[k] = list.len() as u32;
            list.push(Member { slot, start: route.start, len: route.len as u16, k: k as u16 });
            seeds.push(l);
        }
        for &l in self.fabric.route_links(route) {
            let l = l as usize;
            if self.bookkeeping && !self.is_group_link[l] && !self.watched[l] {
                let v = self.capacity[l] / self.link_flows[l].len() as f64;
                for &(g, _) in &self.link_groups[l] {
                    let t = &mut self.theta[g as usize];
                    *t = t.min(v);
                }
            }
        }
        let crossed = self.fabric.route_links(route).iter().filter(|&&l| self.is_group_link[l as usize]).count() as u32;
        self.group_links_crossed[slot as usize] = crossed;
        if crossed != 1 {
            self.crossing_not_one += 1;
        }
        Ok(())
    }

    fn next_event_time(&mut self) -> Option<SimTime> {
        self.refresh();
        let a = self.arrivals.peek_time();
        let d = (self.live > 0).then_some(self.next_drain());
        match (a, d) {
            (Some(a), Some(d)) => Some(a.min(d)),
            (a, d) => a.or(d),
        }
    }

    fn advance(&mut self, now: SimTime, done: &mut Vec<FlowTag>) {
        loop {
            self.refresh();
            if self.live > 0 && self.next_drain() <= now {
                let t = self.next_drain();
                self.now = self.now.max(t);
                // Flows that drain within DRAIN_WINDOW of each other finish
                // together: float rounding in the shares would otherwise split
                // one simultaneous completion into many recomputations.
                self.drain(t, t + DRAIN_WINDOW);
                continue;
            }
            break;
        }
        while let Some(tag) = self.arrivals.pop_until(now) {
            done.push(tag);
        }
        self.now = self.now.max(now);
    }

    fn path_latency(&mut self, src: usize, dst: usize) -> Result<SimTime, SimError> {
        Ok(self.fabric.route(src, dst)?.latency)
    }

    fn in_flight(&self) -> usize {
        self.live + self.arrivals.len()
    }

    fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    fn fabric_mut(&mut self) -> &mut Fabric {
        &mut self.fabric
    }
}

#[cfg(test)]
mod tests;

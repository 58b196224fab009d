//! The fast path of a recomputation (every flow on one bottleneck whose
//! share is below every other link's) and the moves of flows between
//! groups that the group path starts from.

use super::*;

impl FlowNetwork {
    /// The fast path applies when every flow crosses exactly one *bottleneck
    /// link* and every bottleneck's fair share (capacity / flows) is below
    /// every other busy link's. The bottleneck links are the group links and,
    /// for new flows that cross none, the link of least fair share on their
    /// route (which must then carry only such new flows). Progressive
    /// filling then freezes each bottleneck's flows, untouched by the
    /// others, at exactly capacity / flows, before any other link can
    /// become the bottleneck (shares only grow while filling; the margin
    /// covers rounding), and freezes every flow: so the groups keep their
    /// members, new flows join their bottleneck's group, and only the
    /// changed bottlenecks need a new share. Plans the moves into `movers`
    /// and the new groups into `new_groups`.
    pub(super) fn plan_fast_path(&mut self) -> bool {
        if !self.fast_path {
            return false;
        }
        let planned = self.plan_moves();
        if !planned {
            for &l in &self.new_groups {
                self.claims[l as usize] = 0;
            }
            self.new_groups.clear();
            self.movers.clear();
            return false;
        }
        // New groups leave the free links for the comparison.
        let mut widest = self.group_keys.min();
        for i in 0..self.new_groups.len() {
            let l = self.new_groups[i] as usize;
            self.free_keys.set(l, u64::MAX);
            let key = share_key(self.capacity[l], self.link_flows[l].len() as u32);
            widest = widest.min(u64::MAX - key);
        }
        let free = self.free_keys.min();
        let applies = free == u64::MAX
            || (widest != u64::MAX && f64::from_bits(u64::MAX - widest) < f64::from_bits(free) * (1.0 - 1e-9));
        if !applies {
            for i in 0..self.new_groups.len() {
                let l = self.new_groups[i] as usize;
                self.claims[l] = 0;
                self.update_keys(l);
            }
            self.new_groups.clear();
            self.movers.clear();
        }
        applies
    }

    /// Picks each new flow's bottleneck (see `plan_fast_path`); false when
    /// some flow would not cross exactly one.
    pub(super) fn plan_moves(&mut self) -> bool {
        let FlowNetwork {
            fabric,
            flows,
            fresh,
            group_links_crossed,
            crossing_not_one,
            is_group_link,
            link_flows,
            capacity,
            claims,
            new_groups,
            movers,
            ..
        } = self;
        let mut uncovered = 0;
        for &f in fresh.iter() {
            let links = fabric.route_links(flows[f as usize].route);
            match group_links_crossed[f as usize] {
                1 => {
                    let Some(&l) = links.iter().find(|&&l| is_group_link[l as usize]) else {
                        return false; // unreachable: the count says one
                    };
                    movers.push((f, l));
                }
                0 => {
                    uncovered += 1;
                    let mut best = (u64::MAX, u32::MAX);
                    for &l in links {
                        let key = share_key(capacity[l as usize], link_flows[l as usize].len() as u32);
                        if key < best.0 {
                            best = (key, l);
                        }
                    }
                    let l = best.1;
                    if claims[l as usize] == 0 {
                        new_groups.push(l);
                    }
                    claims[l as usize] += 1;
                    movers.push((f, l));
                }
                _ => return false,
            }
        }
        // Older flows all cross one group link, and a new group's link
        // carries only the flows that chose it.
        uncovered == *crossing_not_one
            && new_groups.iter().all(|&l| claims[l as usize] as usize == link_flows[l as usize].len())
    }

    /// The fast path: new flows join their bottleneck's group; the changed
    /// bottlenecks take capacity / flows as their share, a new group
    /// starting its clock now (as full filling starts every empty group).
    pub(super) fn fast_recompute(&mut self) {
        let now = self.now;
        if !self.new_groups.is_empty() {
            self.fast_new_groups += 1;
        }
        for &l in &self.component {
            let l = l as usize;
            let is_new = self.claims[l] > 0;
            if !self.is_group_link[l] && !is_new {
                continue;
            }
            let n = self.link_flows[l].len() as u32;
            let share = f64::from_bits(share_key(self.capacity[l], n));
            if is_new {
                self.groups[l].restart(now, share);
                self.theta[l] = f64::INFINITY;
            } else {
                self.groups[l].set_rate(now, share);
            }
        }
        self.admit_movers();
        for i in 0..self.component.len() {
            let l = self.component[i] as usize;
            self.refresh_group(l);
        }
        for i in 0..self.new_groups.len() {
            let l = self.new_groups[i] as usize;
            self.claims[l] = 0;
            self.sync_group_link(l);
        }
        self.new_groups.clear();
    }

    /// Recounts `link_groups` and recomputes `theta` exactly from the live
    /// flows in groups, and turns the bookkeeping on.
    pub(super) fn rebuild_bookkeeping(&mut self) {
        for &l in &self.busy {
            self.link_groups[l as usize].clear();
        }
        for &g in &self.group_list {
            self.theta[g as usize] = f64::INFINITY;
        }
        for i in 0..self.order.len() {
            let f = self.order[i];
            let g = self.group[f as usize];
            if g != NONE {
                self.join_route(f, g);
            }
        }
        self.bookkeeping = true;
    }

    /// Flow `f` joins group `g`'s bookkeeping on every link of its route.
    pub(super) fn join_route(&mut self, f: u32, g: u32) {
        let links = self.fabric.route_links(self.flows[f as usize].route);
        join_links(links, g, &mut self.link_groups, &mut self.theta, (&self.is_group_link, &self.watched), &self.capacity, &self.link_flows);
    }

    /// The flows in `movers` join their new groups, draining from their
    /// group's clock now with what they carried over.
    pub(super) fn admit_movers(&mut self) {
        let now = self.now;
        for i in 0..self.movers.len() {
            let (f, l) = self.movers[i];
            let p = &mut self.payload[f as usize];
            let g = &mut self.groups[l as usize];
            p.target = g.clock_at(now) + p.carry;
            self.group[f as usize] = l;
            g.members += 1;
            g.push(p.target, f, self.generation[f as usize]);
            if self.bookkeeping {
                self.join_route(f, l);
            }
        }
    }
}

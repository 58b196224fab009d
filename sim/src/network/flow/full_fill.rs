//! The full progressive filling: the component the change touches, found
//! by a search over shared links, refilled flow by flow.

use super::*;

impl FlowNetwork {
    /// Collects into `component` the links connected to the changed ones.
    /// When the changed links alone carry half the flows or more, the
    /// component is nearly everything: take every busy link without a search
    /// (refilling an unchanged component gives the same shares bit for bit).
    /// Returns which path applies: with the fast path the component is just
    /// the changed links; the group path has already set the new shares.
    pub(super) fn find_component(&mut self, epoch: u32) -> Path {
        let FlowNetwork { link_flows, seeds, link_stamp, component, .. } = self;
        component.clear();
        let mut seeded = 0usize;
        for &l in seeds.iter() {
            if link_stamp[l as usize] != epoch {
                link_stamp[l as usize] = epoch;
                component.push(l);
                seeded += link_flows[l as usize].len();
            }
        }
        seeds.clear();
        // Flow counts changed on exactly these links since the keys were
        // last published: publish them now, once per link.
        for i in 0..self.component.len() {
            let l = self.component[i] as usize;
            self.update_keys(l);
        }
        if self.plan_fast_path() {
            self.fast_streak += 1;
            if self.fast_streak >= self.streak_limit && self.bookkeeping {
                self.bookkeeping = false;
                for &l in &self.busy {
                    self.link_groups[l as usize].clear();
                }
            }
            return Path::Fast;
        }
        self.fast_streak = 0;
        // Without the bookkeeping, an isolated slow recomputation just
        // fills; a second one soon after turns the group path back on.
        let recent = self.recomputations - self.last_slow <= SLOW_AGAIN;
        self.last_slow = self.recomputations;
        if !self.bookkeeping && recent {
            self.rebuild_bookkeeping();
        }
        // After two failures in a row the group path is tried only every
        // `GROUP_RETRY`th slow recomputation (where it rarely applies, an
        // attempt costs on top of the full filling).
        self.group_skips += 1;
        if self.bookkeeping && (self.group_failures < 2 || self.group_skips >= GROUP_RETRY) {
            self.group_skips = 0;
            if self.group_fill() {
                self.group_failures = 0;
                return Path::Groups;
            }
            self.group_failures += 1;
        }
        let FlowNetwork { fabric, visited, link_flows, link_stamp, component, busy, live, component_flows, wide, wide_skips, wide_backoff, .. } = self;
        // A search that found (nearly) the whole network is skipped for the
        // next `wide_backoff` slow recomputations, doubling while searches
        // keep finding it: on fat-tree and Clos every PS flow shares the
        // core, and the search costs as much as the filling it narrows.
        if *wide && *wide_skips > 0 {
            *wide_skips -= 1;
        } else if *wide {
            *wide = false;
        }
        if 2 * seeded >= *live || *wide {
            for &l in busy.iter() {
                if link_stamp[l as usize] != epoch {
                    link_stamp[l as usize] = epoch;
                    component.push(l);
                }
            }
            *component_flows = *live;
            return Path::Full;
        }
        let mut count = 0;
        let routes = fabric.all_route_links();
        let mut i = 0;
        while i < component.len() {
            let l = component[i] as usize;
            i += 1;
            for e in &link_flows[l] {
                let v = &mut visited[e.slot as usize];
                if *v == epoch {
                    continue;
                }
                *v = epoch;
                count += 1;
                for &m in e.links(routes) {
                    if link_stamp[m as usize] != epoch {
                        link_stamp[m as usize] = epoch;
                        component.push(m);
                    }
                }
            }
        }
        *component_flows = count;
        *wide = 4 * count >= 3 * *live;
        if *wide {
            *wide_backoff = (*wide_backoff * 2).clamp(1, MAX_WIDE_BACKOFF);
            *wide_skips = *wide_backoff;
        } else {
            *wide_backoff = 0;
        }
        Path::Full
    }

    /// Refills the component of links reachable from the changed links.
    pub(super) fn recompute(&mut self) {
        self.recomputations += 1;
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // Stamps wrapped: clear them so no stale stamp matches.
            self.link_stamp.fill(0);
            self.visited.fill(0);
            self.frozen.fill(0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        let now = self.now;
        self.movers.clear();
        match self.find_component(epoch) {
            Path::Fast => {
                self.fast_recomputations += 1;
                self.fast_recompute();
                self.fresh.clear();
                return;
            }
            Path::Groups => {
                self.group_recomputations += 1;
                self.fresh.clear();
                return;
            }
            Path::Full => {}
        }
        self.fresh.clear();
        let FlowNetwork {
            fabric,
            capacity,
            frozen,
            group,
            payload,
            generation,
            link_flows,
            groups,
            component,
            residual,
            unfrozen,
            batch_share,
            heap,
            movers,
            component_flows,
            flows,
            link_groups,
            theta,
            bookkeeping,
            ..
        } = self;
        let routes = fabric.all_route_links();
        // Progressive filling on the component.
        let mut keys = std::mem::take(heap).into_vec();
        keys.clear();
        for &l in component.iter() {
            let l = l as usize;
            let n = link_flows[l].len() as u32;
            unfrozen[l] = n;
            batch_share[l] = -1.0;
            if n > 0 {
                residual[l] = capacity[l];
                keys.push(Reverse((share_key(residual[l], n), l as u32)));
            }
        }
        *heap = BinaryHeap::from(keys);
        // Every flow of the component is visited once, so the filling can
        // stop when all are frozen (the remaining links carry none).
        let mut left = *component_flows;
        // Shares only grow as flows freeze (freezing at the global minimum
        // share s leaves (r - s) / (n - 1) >= r / n), so a popped key is a
        // lower bound: if it is stale, re-insert the link with its current
        // share instead of pushing on every change.
        while let Some((share, l)) = pop_min_share(heap, residual, unfrozen) {
            batch_share[l] = share;
            for e in &link_flows[l] {
                let z = &mut frozen[e.slot as usize];
                if *z == epoch {
                    continue;
                }
                *z = epoch;
                left -= 1;
                if group[e.slot as usize] != l as u32 {
                    movers.push((e.slot, l as u32));
                }
                // Link `l` itself is done: its residual is never read again.
                for &m in e.links(routes) {
                    let m = m as usize;
                    if m != l {
                        residual[m] = (residual[m] - share).max(0.0);
                        unfrozen[m] -= 1;
                    }
                }
            }
            unfrozen[l] = 0;
            if left == 0 {
                break;
            }
        }
        // Flows changing group leave their old one at its current rate.
        for &(f, _) in movers.iter() {
            let old = group[f as usize];
            if old != NONE {
                let p = &mut payload[f as usize];
                let g = &mut groups[old as usize];
                p.carry = (p.target - g.clock_at(now)).max(0.0);
                g.members -= 1;
                generation[f as usize] = generation[f as usize].wrapping_add(1);
                if *bookkeeping {
                    for &m in fabric.route_links(flows[f as usize].route) {
                        count_out(&mut link_groups[m as usize], old, 1);
                    }
                }
            }
        }
        // New rates: a group whose rate changed restarts its clock now; an
        // unchanged rate keeps every member's drain time exactly.
        for &l in component.iter() {
            let l = l as usize;
            let g = &mut groups[l];
            let share = batch_share[l];
            if g.members == 0 {
                g.restart(now, share.max(0.0));
                theta[l] = f64::INFINITY;
            } else {
                debug_assert!(share == g.rate || share >= 0.0, "a group with members froze no flows");
                g.set_rate(now, share);
            }
        }
        self.admit_movers();
        for i in 0..self.component.len() {
            let l = self.component[i] as usize;
            self.refresh_group(l);
            self.sync_group_link(l);
        }
    }
}

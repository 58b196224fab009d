//! The group path of a recomputation: progressive filling over the group
//! links and a few watched near-saturated links, each group frozen whole,
//! that proves no other link could freeze a flow or gives up (see the
//! module above).

use super::*;

impl FlowNetwork {
    /// The group path: progressive filling over the group links alone,
    /// freezing each group whole, on the hypothesis that the filling of
    /// every flow would keep every group's members together and freeze
    /// started flows at group links (or, for one crossing none, at the link
    /// of least fair share on its route). Returns false, having changed
    /// nothing but `theta` (recomputed, still a bound), when that cannot be
    /// shown; the full filling then runs.
    ///
    /// When it returns true the shares are those of the full filling bit
    /// for bit: the full filling subtracts one share per frozen flow from
    /// each other link of its route, and the flows frozen by one link all
    /// take that link's share, so a link's residual depends only on how
    /// many flows each earlier group froze on it (repeated here by that many
    /// subtractions, in freezing order); group links are taken in the same
    /// order as there (same keys, same re-pushes: links that freeze nothing
    /// only re-push). The hypothesis is checked as the filling runs (a group
    /// link must find only its own members and started flows unfrozen) and
    /// after it: every other link must keep capacity / flows, a lower bound
    /// on its share during the filling, above the share of every group
    /// crossing it (by `THETA_MARGIN`), so it can never be the least-share
    /// link while it has unfrozen flows. Cost: the group links, the
    /// (group, group link) pairs and the started flows' routes, instead of
    /// every flow's route.
    pub(super) fn group_fill(&mut self) -> bool {
        if !self.group_path || self.group_list.is_empty() && self.fresh.is_empty() {
            return false;
        }
        // First without the watched links, checking each exactly instead
        // (see `try_group_fill`); where that fails, with them.
        if self.narrow_path && !self.watch_list.is_empty() {
            if self.narrow_skips > 0 {
                self.narrow_skips -= 1;
            } else {
                // A failed attempt names the watched links it found
                // saturated; the next one fills those too (any watched
                // links may be filled: the others are still checked).
                self.g_include.clear();
                for attempt in 0..=NARROW_RETRIES {
                    self.g_movers.clear();
                    self.g_move_links.clear();
                    if self.try_group_fill(true) {
                        self.narrow_backoff = 0;
                        self.narrow_recomputations += 1;
                        self.narrow_retried += u64::from(attempt > 0);
                        return true;
                    }
                    self.undo_moves();
                    if self.g_saturated.is_empty() || attempt == NARROW_RETRIES {
                        break;
                    }
                    self.g_include.append(&mut self.g_saturated);
                }
                self.narrow_backoff = (self.narrow_backoff * 2).clamp(1, MAX_NARROW_BACKOFF);
                self.narrow_skips = self.narrow_backoff;
            }
        }
        self.g_movers.clear();
        self.g_move_links.clear();
        if self.try_group_fill(false) {
            return true;
        }
        self.undo_moves();
        false
    }

    /// Undoes the counts of a failed `try_group_fill`'s moves, batch by
    /// batch in reverse (per link the same list operations as undoing them
    /// one by one).
    pub(super) fn undo_moves(&mut self) {
        self.g_movers.clear();
        while let Some((from, to, m, k)) = self.g_move_links.pop() {
            let list = &mut self.link_groups[m as usize];
            count_out(list, to, 1);
            count_in(list, from, k);
            count_out(list, to, k - 1);
        }
    }

    /// `group_fill` without undoing its moves on failure. `narrow`: the
    /// watched links that are neither group links nor a started flow's
    /// bottleneck stay out of the filling, and each is checked instead as
    /// any other link below a group's share is (`unsaturated`: its exact
    /// load at the new shares under its capacity, so it never froze a
    /// flow and leaving it out changed nothing); it fails where one is
    /// saturated, typically a watched link that becomes a group, and names
    /// those links in `g_saturated`: `group_fill` then tries again with
    /// them filled (`g_include`, the other watched links still checked)
    /// before it falls back to filling every watched link. On tori the
    /// watched links are most of the filling's links (about 280 of 320 at
    /// 1,024 workers) but freeze flows in about 5% of fillings. At 200
    /// workers + 17 PS tasks on torus2d, 19% of first narrow attempts
    /// failed and 82% of their retries succeeded: the fillings of every
    /// watched link fell from 37% to 9% of the group path's attempts.
    pub(super) fn try_group_fill(&mut self, narrow: bool) -> bool {
        self.g_saturated.clear();
        self.g_epoch = self.g_epoch.wrapping_add(1);
        if self.g_epoch == 0 {
            self.g_in.fill(0);
            self.g_frozen.fill(0);
            self.g_checked.fill(0);
            self.g_fresh_stamp.fill(0);
            self.g_moved.fill(0);
            self.g_epoch = 1;
        }
        let ge = self.g_epoch;
        if self.g_moved.len() < self.flows.len() {
            self.g_moved.resize(self.flows.len(), 0);
        }
        self.g_collect_links(narrow, ge);
        if !self.g_prepare(ge) {
            return false;
        }
        self.g_freeze(ge);
        if self.g_fresh_at.contains(&NONE) || !self.g_check_bounds(ge) {
            return false;
        }
        if narrow && !self.g_check_watched(ge) {
            return false;
        }
        self.g_apply(ge);
        true
    }

    /// The links taking part in a group filling: every group link, the
    /// watched links (the ones still watched; with `narrow` only those in
    /// `g_include`), and for each started flow crossing no group link the
    /// link of least fair share on its route.
    pub(super) fn g_collect_links(&mut self, narrow: bool, ge: u32) {
        let FlowNetwork { fabric, capacity, flows, fresh, link_flows, link_groups, groups, group_list, group_links_crossed, g_in, g_links, theta, watched, watch_list, g_include, is_group_link, .. } = self;
        let links_of = |f: u32| fabric.route_links(flows[f as usize].route);
        g_links.clear();
        for &b in group_list.iter() {
            g_in[b as usize] = ge;
            g_links.push(b);
        }
        let mut i = 0;
        while i < watch_list.len() {
            let w = watch_list[i] as usize;
            // Unwatched when empty, or (not a group link) with its fair
            // share `UNWATCH` above the fastest group crossing it: it joins
            // those groups' bounds.
            let n = link_flows[w].len();
            let v = if n == 0 { f64::INFINITY } else { capacity[w] / n as f64 };
            let far = !is_group_link[w] && link_groups[w].iter().all(|&(g, _)| UNWATCH * groups[g as usize].rate < v);
            if n == 0 || far {
                for &(g, _) in &link_groups[w] {
                    theta[g as usize] = theta[g as usize].min(v);
                }
                watched[w] = false;
                watch_list.swap_remove(i);
                continue;
            }
            if !narrow && g_in[w] != ge {
                g_in[w] = ge;
                g_links.push(w as u32);
            }
            i += 1;
        }
        if narrow {
            for &w in g_include.iter() {
                let w = w as usize;
                if watched[w] && g_in[w] != ge {
                    g_in[w] = ge;
                    g_links.push(w as u32);
                }
            }
        }
        for &f in fresh.iter() {
            if group_links_crossed[f as usize] == 0 {
                let mut best = (u64::MAX, u32::MAX);
                for &l in links_of(f) {
                    let key = share_key(capacity[l as usize], link_flows[l as usize].len() as u32);
                    if key < best.0 {
                        best = (key, l);
                    }
                }
                let b = best.1 as usize;
                if g_in[b] != ge {
                    g_in[b] = ge;
                    g_links.push(b as u32);
                }
            }
        }
    }

    /// Each taking link's residual capacity, unfrozen count and heap key,
    /// the groups crossing it and the started flows on it; false if a
    /// group's link does not take part (which cannot happen).
    pub(super) fn g_prepare(&mut self, ge: u32) -> bool {
        let FlowNetwork { fabric, capacity, flows, fresh, link_flows, link_groups, g_in, g_residual, g_unfrozen, g_incidence, g_fresh, g_links, g_fresh_at, g_heap, .. } = self;
        let links_of = |f: u32| fabric.route_links(flows[f as usize].route);
        let mut keys = std::mem::take(g_heap).into_vec();
        keys.clear();
        for &b in g_links.iter() {
            let b = b as usize;
            let n = link_flows[b].len() as u32;
            g_residual[b] = capacity[b];
            g_unfrozen[b] = n;
            g_incidence[b].clear();
            g_fresh[b].clear();
            keys.push(Reverse((share_key(capacity[b], n), b as u32)));
        }
        *g_heap = BinaryHeap::from(keys);
        for &m in g_links.iter() {
            for &(g, c) in &link_groups[m as usize] {
                if g_in[g as usize] != ge {
                    return false; // a group whose link is not one: cannot happen
                }
                if g != m {
                    g_incidence[g as usize].push((m, c));
                }
            }
        }
        g_fresh_at.clear();
        for (i, &f) in fresh.iter().enumerate() {
            g_fresh_at.push(NONE);
            for &m in links_of(f) {
                if g_in[m as usize] == ge {
                    g_fresh[m as usize].push(i as u32);
                }
            }
        }
        true
    }

    /// Freezes the taking links in order of least fair share: each link's
    /// share, the members of other groups that cross it moved into its
    /// group (counted at once, undone if the path fails), every frozen
    /// flow charged on its other links, and each started flow's group.
    pub(super) fn g_freeze(&mut self, ge: u32) {
        let FlowNetwork { fabric, flows, fresh, link_groups, groups, g_in, g_frozen, g_residual, g_unfrozen, g_share, g_incidence, g_fresh, g_fresh_at, g_heap, generation, g_moved, g_movers, g_foreign, g_move_count, g_touched, g_move_links, .. } = self;
        let links_of = |f: u32| fabric.route_links(flows[f as usize].route);
        // Charges `count` flows frozen at `share` on link `m`, one at a
        // time as the full filling does.
        let charge = |m: usize, count: u32, share: f64, residual: &mut [f64], unfrozen: &mut [u32]| {
            residual[m] = repeat_sub(residual[m], share, count);
            unfrozen[m] -= count;
        };
        while let Some((share, bu)) = pop_min_share(g_heap, g_residual, g_unfrozen) {
            let b = bu as u32;
            // Members of groups not frozen yet that cross this link freeze
            // here: they move to its group (counted there at once, undone
            // if the path fails).
            g_foreign.clear();
            g_foreign.extend(link_groups[bu].iter().filter(|&&(g, _)| g != b && g_frozen[g as usize] != ge));
            for &(g, mut left) in g_foreign.iter() {
                let gu = g as usize;
                // Movers' links, counted per link and applied once per link
                // below: the same counts, list orders, and charges (all at
                // this link's share, so `repeat_sub` of k is k single ones)
                // as moving them one by one, in O(links touched) list work.
                g_touched.clear();
                for &Reverse((_, slot, version)) in groups[gu].heap.iter() {
                    if left == 0 {
                        break; // all `g`'s members on this link found
                    }
                    let su = slot as usize;
                    if generation[su] != version || g_moved[su] == ge {
                        continue;
                    }
                    let links = links_of(slot);
                    if !links.contains(&b) {
                        continue;
                    }
                    g_moved[su] = ge;
                    g_movers.push((slot, g, b));
                    left -= 1;
                    for &m in links {
                        let c = &mut g_move_count[m as usize];
                        if *c == 0 {
                            g_touched.push(m);
                        }
                        *c += 1;
                    }
                }
                for &m in g_touched.iter() {
                    let mu = m as usize;
                    let k = std::mem::take(&mut g_move_count[mu]);
                    g_move_links.push((g, b, m, k));
                    // One by one, the first move out of `g` comes before
                    // `b` is added, the others after: the same list order.
                    let list = &mut link_groups[mu];
                    count_out(list, g, 1);
                    count_in(list, b, k);
                    count_out(list, g, k - 1);
                    if g_in[mu] == ge {
                        if let Some(e) = g_incidence[gu].iter_mut().find(|e| e.0 == m && m != g) {
                            e.1 -= k;
                        }
                        if m != b {
                            charge(mu, k, share, g_residual, g_unfrozen);
                        }
                    }
                }
            }
            g_share[bu] = share;
            g_frozen[bu] = ge;
            for &(m, c) in &g_incidence[bu] {
                charge(m as usize, c, share, g_residual, g_unfrozen);
            }
            for &i in &g_fresh[bu] {
                if g_fresh_at[i as usize] != NONE {
                    continue;
                }
                g_fresh_at[i as usize] = b;
                for &m in links_of(fresh[i as usize]) {
                    if m != b && g_in[m as usize] == ge {
                        charge(m as usize, 1, share, g_residual, g_unfrozen);
                    }
                }
            }
            g_unfrozen[bu] = 0;
        }
    }

    /// Every other link crossed by a group stays above its share: each
    /// group's bound (`theta`), recomputed from its members where the
    /// share comes near it, and every link below the share checked
    /// exactly (and watched from now on). False if one is saturated.
    pub(super) fn g_check_bounds(&mut self, ge: u32) -> bool {
        let FlowNetwork { fabric, capacity, flows, fresh, link_flows, link_groups, groups, g_in, g_frozen, g_share, g_theta, g_links, g_fresh_at, g_checked, g_fresh_stamp, g_fresh_load, theta, generation, watched, watch_list, g_move_links, g_saturated, .. } = self;
        let links_of = |f: u32| fabric.route_links(flows[f as usize].route);
        // Every other link crossed by a group stays above its share. A
        // group link that froze nothing is such a link from now on.
        let stays_group = |m: usize| g_in[m] == ge && g_frozen[m] == ge;
        let exact = |m: usize, watched: &[bool]| stays_group(m) || watched[m];
        for &b in g_links.iter() {
            let b = b as usize;
            if g_frozen[b] == ge {
                g_theta[b] = if groups[b].members > 0 { theta[b] } else { f64::INFINITY };
            }
        }
        for (i, &f) in fresh.iter().enumerate() {
            let b = g_fresh_at[i];
            for &m in links_of(f) {
                if m != b && !exact(m as usize, watched) {
                    let t = &mut g_theta[b as usize];
                    *t = t.min(capacity[m as usize] / link_flows[m as usize].len() as f64);
                }
            }
        }
        for &(_, to, m, _) in g_move_links.iter() {
            {
                if m != to && !exact(m as usize, watched) {
                    let t = &mut g_theta[to as usize];
                    *t = t.min(capacity[m as usize] / link_flows[m as usize].len() as f64);
                }
            }
        }
        // Load of the started flows per link, for the exact checks.
        for (i, &f) in fresh.iter().enumerate() {
            let share = g_share[g_fresh_at[i] as usize];
            for &m in links_of(f) {
                let m = m as usize;
                if g_fresh_stamp[m] != ge {
                    g_fresh_stamp[m] = ge;
                    g_fresh_load[m] = 0.0;
                }
                g_fresh_load[m] += share;
            }
        }
        for &b in g_links.iter() {
            let b = b as usize;
            if g_frozen[b] != ge || g_share[b] * (1.0 + THETA_MARGIN) < g_theta[b] {
                continue;
            }
            // The bound may be stale, or a link below the share may still be
            // unsaturated: recompute the bound from the members, and check
            // each link under the share exactly (see `unsaturated`).
            let mut t = f64::INFINITY;
            let mut fits = true;
            let mut new_watch: Vec<u32> = Vec::new();
            // A link at or below the share is checked exactly now and
            // filled exactly from now on (watched), out of the bound.
            let mut visit = |m: u32, t: &mut f64| {
                let m = m as usize;
                if m == b || exact(m, watched) {
                    return;
                }
                let v = capacity[m] / link_flows[m].len() as f64;
                if g_share[b] * (1.0 + THETA_MARGIN) < v {
                    *t = t.min(v);
                    return;
                }
                if g_checked[m] != ge {
                    g_checked[m] = ge;
                    if !unsaturated(m, &link_groups[m], g_share, g_frozen, ge, g_fresh_stamp, g_fresh_load, capacity[m]) {
                        fits = false;
                        g_saturated.push(m as u32);
                    }
                }
                new_watch.push(m as u32);
            };
            for &Reverse((_, slot, version)) in groups[b].heap.iter() {
                if generation[slot as usize] == version {
                    for &m in links_of(slot) {
                        visit(m, &mut t);
                    }
                }
            }
            if groups[b].members > 0 {
                theta[b] = t;
            }
            for (i, &f) in fresh.iter().enumerate() {
                if g_fresh_at[i] as usize == b {
                    for &m in links_of(f) {
                        visit(m, &mut t);
                    }
                }
            }
            for &(_, to, m, _) in g_move_links.iter() {
                if to as usize == b {
                    visit(m, &mut t);
                }
            }
            g_theta[b] = t;
            for &w in new_watch.iter() {
                if !watched[w as usize] {
                    watched[w as usize] = true;
                    watch_list.push(w);
                }
            }
            new_watch.clear();
            if !fits {
                return false;
            }
        }
        true
    }

    /// A narrow filling left the watched links out: each is checked
    /// exactly, and the saturated ones named in `g_saturated`.
    pub(super) fn g_check_watched(&mut self, ge: u32) -> bool {
        let FlowNetwork { capacity, link_groups, g_in, g_frozen, g_share, g_checked, g_fresh_stamp, g_fresh_load, watch_list, g_saturated, .. } = self;
        for &w in watch_list.iter() {
            let w = w as usize;
            if g_in[w] == ge || g_checked[w] == ge {
                continue;
            }
            g_checked[w] = ge;
            if !unsaturated(w, &link_groups[w], g_share, g_frozen, ge, g_fresh_stamp, g_fresh_load, capacity[w]) {
                g_saturated.push(w as u32);
            }
        }
        g_saturated.is_empty()
    }

    /// The filling holds: moving flows leave their group at its old rate,
    /// a group whose share changed restarts its clock now, a new one
    /// starts at zero, and every changed group republishes its drain.
    pub(super) fn g_apply(&mut self, ge: u32) {
        let now = self.now;
        {
            let FlowNetwork { groups, g_frozen, g_share, g_theta, g_links, theta, generation, g_movers, payload, .. } = self;
            for &(slot, from, _) in g_movers.iter() {
                let p = &mut payload[slot as usize];
                let g = &mut groups[from as usize];
                p.carry = (p.target - g.clock_at(now)).max(0.0);
                g.members -= 1;
                generation[slot as usize] = generation[slot as usize].wrapping_add(1);
            }
            for &b in g_links.iter() {
                let b = b as usize;
                if g_frozen[b] != ge {
                    continue;
                }
                let share = g_share[b];
                let g = &mut groups[b];
                if g.members == 0 {
                    g.clear();
                    g.clock = 0.0;
                    g.at = now;
                    g.rate = share;
                } else if share != g.rate {
                    g.clock = g.clock_at(now);
                    g.at = now;
                    g.rate = share;
                }
                theta[b] = g_theta[b];
            }
        }
        for i in 0..self.fresh.len() {
            let f = self.fresh[i];
            let b = self.g_fresh_at[i];
            let p = &mut self.payload[f as usize];
            let g = &mut self.groups[b as usize];
            p.target = g.clock_at(now) + p.carry;
            self.group[f as usize] = b;
            g.members += 1;
            g.push(p.target, f, self.generation[f as usize]);
            let r = self.flows[f as usize].route;
            for &m in self.fabric.route_links(r) {
                count_in(&mut self.link_groups[m as usize], b, 1);
            }
        }
        for i in 0..self.g_movers.len() {
            let (f, _, b) = self.g_movers[i];
            let p = &mut self.payload[f as usize];
            let g = &mut self.groups[b as usize];
            p.target = g.clock_at(now) + p.carry;
            self.group[f as usize] = b;
            g.members += 1;
            g.push(p.target, f, self.generation[f as usize]);
        }
        for i in 0..self.g_links.len() {
            let b = self.g_links[i] as usize;
            if self.g_frozen[b] == ge {
                self.refresh_group(b);
                self.sync_group_link(b);
            }
        }
        // Movers come in runs from one group: refreshing it once per run
        // is the same (both calls are idempotent).
        let mut last = NONE;
        for i in 0..self.g_movers.len() {
            let from = self.g_movers[i].1;
            if from != last {
                last = from;
                self.refresh_group(from as usize);
                self.sync_group_link(from as usize);
            }
        }
        self.g_movers.clear();
        self.g_move_links.clear();
        // The changed links (in `component`): groups emptied by drains
        // republish their (now absent) drain times.
        for i in 0..self.component.len() {
            let l = self.component[i] as usize;
            self.refresh_group(l);
        }
    }


    /// Drops stale heap entries of group `l` and republishes its earliest drain.
    pub(super) fn refresh_group(&mut self, l: usize) {
        let g = &mut self.groups[l];
        let mut t = SimTime::MAX;
        if g.members == 0 {
            g.clear();
        } else {
            while let Some(&Reverse((target, slot, generation))) = g.heap.peek() {
                if self.generation[slot as usize] != generation {
                    g.heap.pop();
                    continue;
                }
                t = g.drain_time(f64::from_bits(target));
                break;
            }
        }
        self.drains.set(l, t.0);
    }
}

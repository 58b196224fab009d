use super::*;
use crate::network::{LinkParams, TopologyShape};

/// Parameter-server-like traffic on `shape`: staggered starts, or with
/// `sync` rounds in which every worker fetches from every PS at once
/// and pushes back at its own time. Returns every arrival (tag,
/// picoseconds), the recomputation count, fast ones, and fast ones that
/// started groups.
fn ps_traffic(shape: &TopologyShape, fast_path: bool, sync: bool) -> (Vec<(FlowTag, u64)>, u64, u64, u64) {
    let (out, r, fast, started, _, _) = ps_traffic_paths(shape, fast_path, false, true, sync, false);
    (out, r, fast, started)
}

/// While the group path's bookkeeping is on: `link_groups` equals a
/// recount from the flows in groups, and each group's `theta` is at most
/// capacity / flows of every link it crosses that is neither a group link
/// nor watched (the bounds the path relies on).
fn assert_bookkeeping(net: &FlowNetwork, what: &str) {
    if !net.bookkeeping {
        return;
    }
    let mut want: Vec<Vec<(u32, u32)>> = vec![Vec::new(); net.capacity.len()];
    let routes = net.fabric.all_route_links();
    for &f in &net.order {
        let g = net.group[f as usize];
        if g == NONE {
            continue;
        }
        let r = net.flows[f as usize].route;
        for &m in &routes[r.start as usize..(r.start + r.len) as usize] {
            let m = m as usize;
            count_in(&mut want[m], g, 1);
            if m != g as usize && !net.is_group_link[m] && !net.watched[m] {
                let v = net.capacity[m] / net.link_flows[m].len() as f64;
                assert!(net.theta[g as usize] <= v, "{what}: group {g} bound {} above link {m}'s {v}", net.theta[g as usize]);
            }
        }
    }
    for (l, want) in want.iter_mut().enumerate() {
        let mut got = net.link_groups[l].clone();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(&got, want, "{what}: link {l}");
    }
}

/// `ps_traffic` with the group path on or off; also returns how many
/// recomputations took the group path.
fn ps_traffic_paths(
    shape: &TopologyShape,
    fast_path: bool,
    group_path: bool,
    narrow_path: bool,
    sync: bool,
    check: bool,
) -> (Vec<(FlowTag, u64)>, u64, u64, u64, u64, (u64, u64)) {
    let topo = Topology::build(shape, LinkParams::from_gbps(10.0, 2.0)).unwrap();
    let mut net = FlowNetwork::new(topo);
    net.fast_path = fast_path;
    net.group_path = group_path;
    net.narrow_path = narrow_path;
    if check {
        net.streak_limit = 2;
    }
    let (ps, workers) = (3usize, 13usize);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    // Each worker pushes to every PS at its own time, then fetches back
    // a little later; shard sizes differ per PS.
    let mut starts: Vec<(u64, usize, usize, u64)> = Vec::new();
    for round in 0..if sync { 6 } else { 0 } {
        let t0 = round * 30_000_000_000; // 30 ms apart
        for w in 0..workers {
            let push = t0 + 12_000_000_000 + next(8_000_000_000);
            for k in 0..ps {
                let bytes = 300_000 * (k as u64 + 1);
                starts.push((t0, k, ps + w, bytes));
                starts.push((push, ps + w, k, bytes));
            }
        }
    }
    for w in 0..if sync { 0 } else { workers } {
        let t = next(3_000_000_000); // up to 3 ms
        for k in 0..ps {
            let bytes = 2_000_000 + 10_000 * k as u64 + next(500_000);
            starts.push((t, ps + w, k, bytes));
            starts.push((t + 2_000_000_000 + next(1_000_000_000), k, ps + w, bytes));
        }
    }
    starts.sort();
    let mut out = Vec::new();
    let mut done = Vec::new();
    let mut i = 0;
    let (mut switches, mut was) = (0u64, net.bookkeeping);
    loop {
        let tn = net.next_event_time();
        let ts = starts.get(i).map(|s| SimTime(s.0));
        match (ts, tn) {
            (Some(s), n) if n.is_none_or(|n| s < n) => {
                while i < starts.len() && starts[i].0 == s.0 {
                    let (_, src, dst, b) = starts[i];
                    net.start_flow(s, src, dst, b, i as FlowTag).unwrap();
                    i += 1;
                }
            }
            (_, Some(n)) => {
                net.advance(n, &mut done);
                out.extend(done.drain(..).map(|tag| (tag, n.0)));
                if check {
                    net.refresh();
                    assert_bookkeeping(&net, &format!("{shape:?} at {}", n.0));
                    switches += u64::from(net.bookkeeping != was);
                    was = net.bookkeeping;
                }
            }
            (None, None) => break,
            _ => unreachable!(),
        }
    }
    assert_eq!(out.len(), starts.len());
    if check && matches!(shape, TopologyShape::Star { .. }) {
        // The bookkeeping went off and back on, so the rebuild was checked.
        assert!(switches >= 3, "{shape:?}: bookkeeping switched {switches} times");
    }
    (out, net.recomputations(), net.fast_recomputations, net.fast_new_groups, net.group_recomputations, (net.narrow_recomputations, net.narrow_retried))
}

/// Checks max-min fairness by its definition, independently of how the
/// rates were computed: the rates are feasible (no link over capacity)
/// and every flow has a bottleneck, a saturated link on its route on
/// which no flow is faster. That allocation is unique, so passing means
/// the rates are the max-min ones.
fn assert_max_min(topo: &Topology, flows: &[(Vec<u32>, f64)], what: &str) {
    let n = topo.links().len();
    let mut load = vec![0.0; n];
    let mut fastest = vec![0.0f64; n];
    for (links, r) in flows {
        assert!(*r > 0.0, "{what}: a flow has rate {r}");
        for &l in links {
            load[l as usize] += r;
            fastest[l as usize] = fastest[l as usize].max(*r);
        }
    }
    let cap = |l: usize| topo.links()[l].params.bytes_per_s;
    for (l, &carried) in load.iter().enumerate() {
        assert!(carried <= cap(l) * (1.0 + 1e-9), "{what}: link {l} carries {carried} of {}", cap(l));
    }
    for (i, (links, r)) in flows.iter().enumerate() {
        let has_bottleneck = links.iter().any(|&l| {
            let l = l as usize;
            load[l] >= cap(l) * (1.0 - 1e-9) && *r >= fastest[l] * (1.0 - 1e-9)
        });
        assert!(has_bottleneck, "{what}: flow {i} at {r} has no bottleneck link");
    }
}

#[test]
fn shares_are_max_min_fair_by_definition_on_random_flow_sets() {
    let mut x: u64 = 0x1234_5678_9ABC_DEF1;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let shapes = [
        TopologyShape::Star { endpoints: 8 },
        TopologyShape::FatTree { k: 4 },
        TopologyShape::Torus { dims: vec![3, 4] },
        TopologyShape::Clos { leaves: 3, hosts_per_leaf: 4, spines: 2, oversubscription: 2.0 },
        TopologyShape::Hierarchical { hosts: 3, devices_per_host: 4, intra: LinkParams::from_gbps(40.0, 1.0) },
    ];
    let mut checked = 0;
    for shape in &shapes {
        for trial in 0..40 {
            let mut topo = Topology::build(shape, LinkParams::from_gbps(10.0, 1.0)).unwrap();
            let eps = topo.endpoint_count() as u64;
            let mut net = FlowNetwork::new(Topology::build(shape, LinkParams::from_gbps(10.0, 1.0)).unwrap());
            let count = 1 + next(24);
            let mut routes = Vec::new();
            for tag in 0..count {
                let src = next(eps) as usize;
                let mut dst = next(eps) as usize;
                if dst == src {
                    dst = (src + 1) % eps as usize;
                }
                net.start_flow(SimTime::ZERO, src, dst, 1_000_000_000, tag).unwrap();
                routes.push(topo.route(src, dst).unwrap());
            }
            // Check the first allocation, then again after some flows
            // have finished (incremental recomputation).
            for round in 0..3 {
                let live: Vec<FlowTag> = (0..count).filter(|&t| net.rate_of(t).is_some()).collect();
                if live.is_empty() {
                    break;
                }
                let flows: Vec<(Vec<u32>, f64)> =
                    live.iter().map(|&t| (routes[t as usize].clone(), net.rate_of(t).unwrap_or(0.0))).collect();
                assert_max_min(&topo, &flows, &format!("{shape:?} trial {trial} round {round}"));
                checked += 1;
                if let Some(t) = net.next_event_time() {
                    let mut done = Vec::new();
                    net.advance(t, &mut done);
                }
            }
        }
    }
    assert!(checked > 300, "{checked}");
}

#[test]
fn group_path_gives_the_same_arrivals_as_full_filling() {
    // Group path on against off (full filling wherever the fast path
    // does not apply): the same arrivals to the picosecond, on shapes
    // with second-level bottlenecks.
    let (mut taken_fat_tree, mut narrow, mut retried) = (0, Vec::new(), 0);
    for shape in [
        TopologyShape::FatTree { k: 4 },
        TopologyShape::Clos { leaves: 3, hosts_per_leaf: 6, spines: 2, oversubscription: 2.0 },
        TopologyShape::Torus { dims: vec![4, 4] },
        TopologyShape::Hierarchical { hosts: 3, devices_per_host: 6, intra: LinkParams::from_gbps(40.0, 1.0) },
        TopologyShape::Star { endpoints: 16 },
    ] {
        for sync in [false, true] {
            let (full, rf, _, _, none, _) = ps_traffic_paths(&shape, true, false, false, sync, false);
            // With the watched links always filled, and with narrow
            // attempts (watched links checked, not filled) first.
            let (wide, rw, _, _, _, (no_narrow, _)) = ps_traffic_paths(&shape, true, true, false, sync, true);
            let (grouped, rg, _, _, taken, narrowed) = ps_traffic_paths(&shape, true, true, true, sync, true);
            assert_eq!(wide, full, "{shape:?} sync {sync}");
            assert_eq!(grouped, full, "{shape:?} sync {sync}");
            assert_eq!((rg, rw), (rf, rf));
            assert_eq!((none, no_narrow), (0, 0));
            if matches!(shape, TopologyShape::FatTree { .. }) {
                taken_fat_tree += taken;
            }
            narrow.push((format!("{shape:?} sync {sync}"), narrowed.0));
            retried += narrowed.1;
        }
    }
    // The comparison means something only if the group path ran, and
    // the narrow attempts succeeded.
    assert!(taken_fat_tree > 20, "group path taken {taken_fat_tree} times on fat_tree");
    assert!(narrow.iter().all(|(_, n)| *n > 0), "narrow attempts succeeded: {narrow:?}");
    assert!(narrow.iter().map(|(_, n)| n).sum::<u64>() > 200, "{narrow:?}");
    assert!(retried > 0, "no narrow attempt succeeded on a retry");
}

/// An exact rational, for the brute-force reference.
#[derive(Clone, Copy, Debug)]
struct Q {
    n: i128,
    d: i128,
}

impl Q {
    fn new(n: i128, d: i128) -> Q {
        let (mut a, mut b) = (n.abs(), d.abs());
        while b != 0 {
            (a, b) = (b, a % b);
        }
        let g = a.max(1) * d.signum();
        Q { n: n / g, d: d / g }
    }
    fn sub(self, o: Q) -> Q {
        Q::new(self.n * o.d - o.n * self.d, self.d * o.d)
    }
    fn add(self, o: Q) -> Q {
        Q::new(self.n * o.d + o.n * self.d, self.d * o.d)
    }
    fn less(self, o: Q) -> bool {
        self.n * o.d < o.n * self.d
    }
    fn f64(self) -> f64 {
        self.n as f64 / self.d as f64
    }
}

/// Max-min rates by their textbook construction in exact arithmetic,
/// flow by flow (no groups, no heap, no incremental state): all unfrozen
/// flows rise together; the links that fill first (least (capacity -
/// frozen rates) / unfrozen flows) freeze every unfrozen flow on them.
/// Checks every live flow's rate (tags index `routes`) against
/// `brute_force_max_min` to 1e-12 (relative); returns the live flows
/// with their routes and rates, empty when none is live.
fn assert_rates_are_brute_force_max_min(net: &mut FlowNetwork, capacity: &[i128], routes: &[Vec<u32>], what: &str) -> Vec<(FlowTag, Vec<u32>, f64)> {
    let live: Vec<FlowTag> = (0..routes.len() as FlowTag).filter(|&t| net.rate_of(t).is_some()).collect();
    let live_routes: Vec<Vec<u32>> = live.iter().map(|&t| routes[t as usize].clone()).collect();
    let want = if live.is_empty() { Vec::new() } else { brute_force_max_min(capacity, &live_routes) };
    live.iter()
        .zip(live_routes)
        .zip(want)
        .map(|((&tag, route), want)| {
            let got = net.rate_of(tag).unwrap();
            assert!((got - want).abs() <= 1e-12 * want, "{what} flow {tag}: {got} against {want}");
            (tag, route, got)
        })
        .collect()
}

fn brute_force_max_min(capacity: &[i128], routes: &[Vec<u32>]) -> Vec<f64> {
    let mut rate: Vec<Option<Q>> = vec![None; routes.len()];
    loop {
        let share = |l: usize, rate: &[Option<Q>]| {
            let (mut used, mut n) = (Q::new(0, 1), 0);
            for (f, r) in routes.iter().enumerate() {
                if r.contains(&(l as u32)) {
                    match rate[f] {
                        Some(q) => used = used.add(q),
                        None => n += 1,
                    }
                }
            }
            (n > 0).then(|| Q::new(capacity[l], 1).sub(used)).map(|q| Q::new(q.n, q.d * n))
        };
        let shares: Vec<Option<Q>> = (0..capacity.len()).map(|l| share(l, &rate)).collect();
        let Some(level) = shares.iter().flatten().copied().reduce(|a, b| if b.less(a) { b } else { a }) else {
            break;
        };
        for (l, s) in shares.iter().enumerate() {
            if s.is_some_and(|s| !level.less(s)) {
                for (f, r) in routes.iter().enumerate() {
                    if rate[f].is_none() && r.contains(&(l as u32)) {
                        rate[f] = Some(level);
                    }
                }
            }
        }
    }
    rate.into_iter().map(|q| q.map_or(0.0, Q::f64)).collect()
}

#[test]
fn a_torus_runs_recorded_traffic_gets_the_brute_force_max_min_at_every_event() {
    // The traffic a simulated run really starts (`simulate_traffic`: the
    // benchmark's workload, 26 workers and 6 PS tasks spread over a
    // 32-endpoint torus, 2 synchronous steps), replayed flow by flow: after every
    // change, each live flow's rate equals the exact max-min rate of an
    // independent reference to 1e-12 (relative). On the torus the flows
    // finish one by one, the case `bench/simgrid/replay.py` holds
    // against SimGrid.
    let mut cfg = crate::bench::ps_config_on(26, 2, crate::cluster::TopologyKind::Torus2d);
    cfg.ps = 6;
    let (_, flows) = crate::cluster::simulate_traffic(&cfg, 1).unwrap();
    assert_eq!(flows.len(), 2 * 2 * 26 * 6);
    let shape = cfg.network.shape(cfg.devices()).unwrap();
    let link = cfg.network.main_link().unwrap();
    let topo = Topology::build(&shape, link).unwrap();
    assert!(topo.links().iter().all(|l| l.params.bytes_per_s == l.params.bytes_per_s.round()));
    let capacity: Vec<i128> = topo.links().iter().map(|l| l.params.bytes_per_s as i128).collect();
    let mut net = FlowNetwork::new(Topology::build(&shape, link).unwrap());
    let mut routes: Vec<Vec<u32>> = Vec::new();
    let (mut next, mut checks, mut done) = (0, 0, Vec::new());
    loop {
        let t = match (flows.get(next).map(|f| f.at), net.next_event_time()) {
            (None, None) => break,
            (Some(a), b) => b.map_or(a, |b| a.min(b)),
            (None, Some(b)) => b,
        };
        net.advance(t, &mut done);
        while next < flows.len() && flows[next].at == t {
            let f = flows[next];
            routes.push(net.fabric.topology.route(f.src, f.dst).unwrap());
            net.start_flow(t, f.src, f.dst, f.bytes, next as FlowTag).unwrap();
            next += 1;
        }
        if !assert_rates_are_brute_force_max_min(&mut net, &capacity, &routes, &format!("at {t:?}")).is_empty() {
            checks += 1;
        }
    }
    assert_eq!(done.len(), flows.len());
    // flows finish one by one: far more checks (882) than phases (4)
    assert!(checks > 500, "{checks}");
    assert!(net.group_recomputations > 100, "group path taken {} times", net.group_recomputations);
}

#[test]
fn shares_equal_a_brute_force_max_min_on_fat_trees_with_many_equal_flows() {
    // Parameter-server traffic on a k = 4 fat-tree: three PS endpoints in
    // pod 0, every worker fetching equal shards from each (one to three
    // copies per pair, so links carry many equal flows and ECMP collides
    // them in pod 0), then pushes started while fetches drain. After
    // every change, each live flow's rate must equal the exact max-min
    // rate of an independent reference to 1e-12 (relative).
    let shape = TopologyShape::FatTree { k: 4 };
    let link = LinkParams::from_gbps(10.0, 1.0);
    let mut x: u64 = 0x0DDB_1A5E_5BAD_5EED;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let (mut checks, mut grouped, mut narrowed) = (0, 0, 0);
    for trial in 0..12 {
        let topo = Topology::build(&shape, link).unwrap();
        let capacity: Vec<i128> = topo.links().iter().map(|l| l.params.bytes_per_s as i128).collect();
        assert!(topo.links().iter().all(|l| l.params.bytes_per_s == l.params.bytes_per_s.round()));
        let mut net = FlowNetwork::new(Topology::build(&shape, link).unwrap());
        let ps = [0usize, 1, 2];
        let workers: Vec<usize> = (3..16).filter(|_| next(4) != 0).collect();
        let mut routes: Vec<Vec<u32>> = Vec::new();
        let start = |net: &mut FlowNetwork, routes: &mut Vec<Vec<u32>>, at: SimTime, src: usize, dst: usize, bytes: u64| {
            let tag = routes.len() as FlowTag;
            routes.push(net.fabric.topology.route(src, dst).unwrap());
            net.start_flow(at, src, dst, bytes, tag).unwrap();
        };
        let shard = 1_000_000 * (1 + next(3));
        for &w in &workers {
            for &k in &ps {
                for _ in 0..1 + (w + k + trial) % 3 {
                    start(&mut net, &mut routes, SimTime::ZERO, k, w, shard);
                }
            }
        }
        let mut now = SimTime::ZERO;
        for round in 0..40 {
            if round == 3 || round == 9 {
                // Pushes, equal-sized, from some workers at once.
                for &w in workers.iter().filter(|_| next(2) == 0) {
                    for &k in &ps {
                        start(&mut net, &mut routes, now, w, k, shard / 2);
                    }
                }
            }
            let what = format!("trial {trial} round {round}");
            let live = assert_rates_are_brute_force_max_min(&mut net, &capacity, &routes, &what);
            if live.is_empty() {
                break;
            }
            let flows: Vec<(Vec<u32>, f64)> = live.into_iter().map(|(_, route, rate)| (route, rate)).collect();
            assert_max_min(&topo, &flows, &what);
            checks += 1;
            if let Some(t) = net.next_event_time() {
                let mut done = Vec::new();
                net.advance(t, &mut done);
                now = t;
            }
        }
        grouped += net.group_recomputations;
        narrowed += net.narrow_recomputations;
    }
    assert!(checks > 100, "{checks}");
    assert!(grouped > 10, "group path taken {grouped} times");
    // Also the group path's narrow attempts (watched links checked, not filled).
    assert!(narrowed > 10, "narrow attempts succeeded {narrowed} times");
}

#[test]
fn repeat_sub_equals_subtracting_one_at_a_time() {
    let naive = |mut r: f64, s: f64, c: u32| {
        for _ in 0..c {
            r = (r - s).max(0.0);
        }
        r
    };
    let mut x: u64 = 0x5DEE_CE66_D1CE_4E5B;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut cases: Vec<(f64, f64, u32)> = vec![
        (1.25e9, 1.25e9 / 3.0, 3),
        (1.25e9, 1.25e9 / 7.0, 10),
        (1.0, 0.1, 20),
        (2.0, 2f64.powi(-52), 5),       // s = u / 2 on [2, 4): ties
        (2.0, 3.0 * 2f64.powi(-52), 9), // s = 1.5 u: ties
        (4.0, 2f64.powi(-51), 7),       // exactly at the binade bottom
        (1e-210, 1e-212, 50),
        (5.0, 0.0, 100),
        (5.0, 1e-30, 1_000_000),
        (1e9, 2e9, 2),
    ];
    for _ in 0..20_000 {
        let r = (next() >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi((next() % 12) as i32);
        let c = if next() % 2 == 0 { 1 + (next() % 16) as u32 } else { 1 + (next() % 500) as u32 };
        let s = match next() % 4 {
            // Shares like the filling's: r / n, and off by a few units.
            0 => r / (1 + next() % 300) as f64,
            1 => r / (1 + next() % 300) as f64 * (1.0 + ((next() % 7) as f64 - 3.0) * f64::EPSILON),
            // Multiples of half the spacing: ties.
            2 => (next() % 64) as f64 * f64::from_bits(((r.to_bits() >> 52).max(54) - 53) << 52),
            _ => r * (next() % 1000) as f64 / 1e5,
        };
        cases.push((r, s, c));
    }
    for (r, s, c) in cases {
        assert_eq!(repeat_sub(r, s, c).to_bits(), naive(r, s, c).to_bits(), "r {r:e} s {s:e} count {c}");
    }
}

#[test]
fn min_tree_reports_exactly_the_indices_at_most_x() {
    // Against a brute-force scan, for sizes that are and are not powers
    // of two, including the saturated bound u64::MAX (which once
    // reported padding leaves past the last link).
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for n in [1usize, 2, 3, 10, 16, 17, 100] {
        let mut t = MinTree::new(n);
        let mut values = vec![u64::MAX; n];
        for round in 0..200 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let l = (x % n as u64) as usize;
            let v = if x.is_multiple_of(5) { u64::MAX } else { (x >> 20) % 1000 };
            t.set(l, v);
            values[l] = v;
            assert_eq!(t.min(), values.iter().copied().min().unwrap_or(u64::MAX));
            for bound in [0, 500, 999, u64::MAX - 1, u64::MAX] {
                let (mut got, mut stack) = (Vec::new(), Vec::new());
                t.collect_at_most(bound, &mut got, &mut stack);
                got.sort();
                let want: Vec<u32> = (0..n as u32).filter(|&i| values[i as usize] <= bound).collect();
                assert_eq!(got, want, "n {n} round {round} bound {bound}");
            }
        }
    }
}

#[test]
fn ceil_time_equals_the_rounding_up_conversion() {
    let mut cases = vec![
        0.0, -0.0, -1.0, -1e-13, 1e-13, 1e-12, 1.5e-12, 2e-12 - 1e-28, 1.0, 0.1, 0.3, 3374.721777396323,
        9.007e3, 9.0072e3, 1.8446744e7, 1.8446745e7, 1e30, f64::INFINITY, f64::NEG_INFINITY, f64::NAN,
        f64::MIN_POSITIVE, 4503599627370495.5e-12, 4503599627370497.0e-12,
    ];
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for _ in 0..100_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Seconds from 1e-15 to 1e8 on a log scale.
        cases.push(10f64.powf((x >> 11) as f64 / (1u64 << 53) as f64 * 23.0 - 15.0));
    }
    for s in cases {
        assert_eq!(ceil_time(s), SimTime::from_secs_f64_ceil(s), "{s:e}");
    }
}

#[test]
fn fast_path_gives_the_same_arrivals_as_full_filling() {
    for (shape, sync) in [
        (TopologyShape::Star { endpoints: 16 }, false),
        (TopologyShape::FatTree { k: 4 }, false),
        (TopologyShape::Star { endpoints: 16 }, true),
        (TopologyShape::FatTree { k: 4 }, true),
    ] {
        let (fast, rf, taken, started) = ps_traffic(&shape, true, sync);
        let (full, rs, none, _) = ps_traffic(&shape, false, sync);
        assert_eq!(fast, full, "{shape:?}");
        assert_eq!(rf, rs);
        // The comparison means something only if the fast path ran,
        // often, and started groups for flows on idle links.
        assert!(taken * 10 > rf, "{shape:?}: fast path in {taken} of {rf}");
        assert!(started > 0, "{shape:?}: new groups in {started} of {rf}");
        assert_eq!(none, 0);
    }
}

#[test]
fn a_change_leaves_other_components_untouched() {
    // 0->1 alone; 2->3 joined later by 4->3: the first flow's finish
    // must be exactly its size over the link rate, whatever happens in
    // the other component meanwhile.
    let topo = Topology::build(&TopologyShape::Star { endpoints: 5 }, LinkParams::from_gbps(10.0, 0.0)).unwrap();
    let mut net = FlowNetwork::new(topo);
    net.start_flow(SimTime::ZERO, 0, 1, 1_250_000_000, 1).unwrap();
    net.start_flow(SimTime::ZERO, 2, 3, 625_000_000, 2).unwrap();
    let t = net.next_event_time().unwrap();
    assert_eq!(t, SimTime(500_000_000_000)); // flow 2 alone: 0.5 s
    let mut done = Vec::new();
    let half = SimTime(250_000_000_000);
    net.advance(half, &mut done);
    net.start_flow(half, 4, 3, 625_000_000, 3).unwrap();
    assert_eq!(net.rate_of(2), Some(1.25e9 / 2.0));
    assert_eq!(net.rate_of(1), Some(1.25e9));
    let mut arrivals = Vec::new();
    while let Some(t) = net.next_event_time() {
        net.advance(t, &mut done);
        arrivals.extend(done.drain(..).map(|tag| (tag, t.0)));
    }
    // Flow 2: 0.25 s alone, then 312.5 MB left at half rate: 0.75 s.
    // Flow 3: half rate until 0.75 s (312.5 MB), then alone: 1.0 s.
    assert_eq!(arrivals, vec![(2, 750_000_000_000), (1, 1_000_000_000_000), (3, 1_000_000_000_000)]);
}

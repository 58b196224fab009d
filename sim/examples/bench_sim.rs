//! The simulator's benchmark without the CLI: prints `flowlab_sim::bench`
//! records as JSON lines (`--quick` for the small sizes). Same numbers as
//! `flowlab bench sim --json`, buildable while other crates are mid-change.
//! `--ps` runs only the issue-4 case (200 workers + 17 PS, 1,000 sync steps,
//! flow-level) and prints its wall time, simulated seconds and
//! recomputations: the case to profile and to compare before/after, with
//! a digest of every step time's bits (equal digests: the same run).
//! `--ps-4096` runs the largest PS scaling point (4,096 workers, 2 steps)
//! the same way. `--topology NAME` picks the topology of those runs (star by
//! default), `--packed` puts the PS tasks on the first endpoints (`network.tasks`), in
//! these runs and in `--digest`'s; `--workers N --steps S` any other size. `--events` runs only the event core (20 M events). `--digest` prints
//! such digests for a spread of small configurations (topologies,
//! strategies, sparse models, collectives): a change that must not alter
//! results has to leave all of them equal. Both print `flow_digest` too:
//! FNV-1a over every flow's (tag, arrival picoseconds), the network's whole
//! timeline.

use flowlab_sim::cluster::{simulate, ClusterConfig, ClusterReport, ModelRef, Straggler, Strategy, TaskLayout, TopologyKind};
use flowlab_sim::comm::collective::AllReduceAlgo;

/// FNV-1a over the step times' bits and the event count.
fn digest(r: &ClusterReport) -> u64 {
    let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
    for v in r.step_times_s.iter().map(|s| s.to_bits()).chain([r.events]) {
        digest = (digest ^ v).wrapping_mul(0x0100_0000_01b3);
    }
    digest
}

fn digests(tasks: TaskLayout) -> Result<(), flowlab_sim::SimError> {
    let base = ClusterConfig {
        model: ModelRef::Name("inception_v3".into()),
        workers: 24,
        ps: 5,
        straggler: Straggler::Lognormal { sigma: 0.3 },
        steps: 30,
        ..ClusterConfig::default()
    };
    let mut cases: Vec<(&str, ClusterConfig)> = Vec::new();
    for (name, topo) in [
        ("star", TopologyKind::Star),
        ("fat_tree", TopologyKind::FatTree),
        ("clos", TopologyKind::Clos),
        ("torus2d", TopologyKind::Torus2d),
        ("hierarchical", TopologyKind::Hierarchical),
    ] {
        let mut c = base.clone();
        c.network.topology = topo;
        cases.push((name, c));
    }
    let mut c = base.clone();
    c.strategy = Strategy::Async {};
    cases.push(("async", c));
    let mut c = base.clone();
    c.strategy = Strategy::Sync { backup: 3 };
    c.network.topology = TopologyKind::FatTree;
    cases.push(("sync_backup_fat_tree", c));
    let mut c = base.clone();
    c.strategy = Strategy::SyncGroups { groups: 4, backup: 1 };
    cases.push(("sync_groups", c));
    let mut c = base.clone();
    c.model = ModelRef::Name("lstm_lm".into());
    c.network.topology = TopologyKind::Clos;
    cases.push(("lstm_clos", c));
    let mut c = base.clone();
    c.model = ModelRef::Name("sparse_1gb".into());
    c.ps = 7;
    cases.push(("sparse_star", c));
    for (name, algo, topo) in [
        ("ring_star", AllReduceAlgo::Ring, TopologyKind::Star),
        ("double_tree_fat_tree", AllReduceAlgo::DoubleTree, TopologyKind::FatTree),
        ("hier_allreduce", AllReduceAlgo::Hierarchical, TopologyKind::Hierarchical),
    ] {
        let mut c = base.clone();
        c.ps = 0;
        c.allreduce = Some(algo);
        c.network.topology = topo;
        cases.push((name, c));
    }
    for (name, mut cfg) in cases {
        cfg.network.tasks = tasks;
        let r = simulate(&cfg, 7)?;
        println!(
            "{name}: sim_seconds {} recomputations {} events {} bytes {} digest {:016x} flow_digest {:016x}",
            r.sim_time_s,
            r.network_recomputations,
            r.events,
            r.bytes_moved,
            digest(&r),
            r.flow_digest
        );
    }
    Ok(())
}

fn ps_only(workers: u32, steps: u64, topology: TopologyKind, tasks: TaskLayout) -> Result<(), flowlab_sim::SimError> {
    let mut cfg = ClusterConfig {
        model: ModelRef::Name("inception_v3".into()),
        workers,
        ps: 17,
        strategy: Strategy::Sync { backup: 0 },
        straggler: Straggler::Lognormal { sigma: 0.3 },
        steps,
        ..ClusterConfig::default()
    };
    cfg.network.topology = topology;
    cfg.network.tasks = tasks;
    let start = std::time::Instant::now();
    let r = simulate(&cfg, 1)?;
    let secs = start.elapsed().as_secs_f64();
    let digest = digest(&r);
    println!(
        "{{\"case\":\"ps_sync_{steps}_steps_flow\",\"topology\":\"{topology:?}\",\"tasks\":\"{tasks:?}\",\"workers\":{workers},\"seconds\":{secs},\"sim_seconds\":{},\"recomputations\":{},\"events\":{},\"step_digest\":\"{digest:016x}\",\"flow_digest\":\"{:016x}\"}}",
        r.sim_time_s, r.network_recomputations, r.events, r.flow_digest
    );
    Ok(())
}

fn main() {
    if std::env::args().any(|a| a == "--events") {
        let r = flowlab_sim::bench::event_core(20_000_000);
        println!("{{\"case\":\"{}\",\"seconds\":{},\"value\":{}}}", r.case, r.seconds, r.value);
        return;
    }
    let tasks = if std::env::args().any(|a| a == "--packed") { TaskLayout::Packed } else { TaskLayout::Spread };
    if std::env::args().any(|a| a == "--digest") {
        if let Err(e) = digests(tasks) {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let topology = match args.iter().position(|a| a == "--topology").and_then(|i| args.get(i + 1)) {
        None => TopologyKind::Star,
        Some(name) => match serde_json::from_str::<TopologyKind>(&format!("\"{name}\"")) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: --topology {name}: {e}");
                std::process::exit(2);
            }
        },
    };
    let workers = args.iter().position(|a| a == "--workers").and_then(|i| args.get(i + 1)).and_then(|w| w.parse().ok());
    let steps = args.iter().position(|a| a == "--steps").and_then(|i| args.get(i + 1)).and_then(|w| w.parse().ok());
    let ps = if let (Some(w), Some(s)) = (workers, steps) {
        Some((w, s))
    } else if std::env::args().any(|a| a == "--ps") {
        Some((200, 1000))
    } else if std::env::args().any(|a| a == "--ps-4096") {
        Some((4096, 2))
    } else {
        None
    };
    if let Some((workers, steps)) = ps {
        if let Err(e) = ps_only(workers, steps, topology, tasks) {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    match flowlab_sim::bench::bench(quick) {
        Ok(records) => {
            for r in records {
                match serde_json::to_string(&r) {
                    Ok(s) => println!("{s}"),
                    Err(e) => eprintln!("error: {e}"),
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

//! `kind: cluster`: one point is a `flowlab_sim::cluster::ClusterConfig`
//! (model, workers, PS tasks, strategy, network, stragglers, steps), run by
//! the cluster simulator.

use flowlab_sim::cluster::{ClusterConfig, simulate};

use super::{Outcome, TypedKind};

pub(crate) static CLUSTER: TypedKind<ClusterConfig> = TypedKind {
    name: "cluster",
    validate: |config| config.validate().map_err(|e| e.to_string()),
    run: |config, env| run_point(config, env.seed),
    resolve: resolve_cluster,
    metric_names: || {
        ClusterConfig::metric_names()
            .iter()
            .map(|name| name.to_string())
            .collect()
    },
    series_names: &["step_time_s"],
    tag_paths: &["strategy"],
    headline: &["model", "workers", "ps", "strategy", "network.topology", "network.link_gbps", "straggler.dist", "comm"],
    nested_keys: &["strategy.sync.backup", "strategy.sync_groups.groups", "strategy.sync_groups.backup", "straggler.dist", "straggler.sigma", "network.topology", "network.link_gbps", "model.compute_s", "model.dense_params", "model.examples_per_step"],
    exclusive: false,
    measured_point_s: None,
    summarize: None,
};

/// The configuration with its defaults, and its model as the simulator
/// sees it: a catalog or zoo workload with every field (the compute time
/// taken from the zoo included).
fn resolve_cluster(config: &ClusterConfig) -> Result<serde_json::Value, String> {
    let mut v = super::serialized(config)?;
    let workload = config.workload().map_err(|e| e.to_string())?;
    if let Some(m) = v.get_mut("model") {
        *m = super::serialized(&workload)?;
    }
    Ok(v)
}

fn run_point(config: &ClusterConfig, seed: u64) -> Result<Outcome, String> {
    let report = simulate(config, seed).map_err(|e| e.to_string())?;
    let mut outcome = Outcome {
        metrics: report.metrics(),
        ..Outcome::default()
    };
    outcome
        .series
        .insert("step_time_s".to_string(), report.step_times_s.clone());
    Ok(outcome)
}

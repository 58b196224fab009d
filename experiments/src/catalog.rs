//! The catalog of ready experiments (`experiments/catalog/*.yaml`), built
//! into the binary so `flowlab run catalog:NAME` works from anywhere.

use crate::error::ExperimentError;
use crate::experiment::Experiment;
use crate::suggest::did_you_mean;

/// One ready experiment.
#[derive(Debug, Clone, Copy)]
pub struct CatalogEntry {
    /// The file's stem, as in `catalog:NAME`.
    pub name: &'static str,
    /// What it mirrors, one line.
    pub summary: &'static str,
    /// The YAML text.
    pub text: &'static str,
}

/// The entry `flowlab` runs with no arguments.
pub const DEFAULT_EXPERIMENT: &str = "backup-workers";

/// An annotated starting file for each kind (`flowlab new KIND`), checked
/// like any experiment by the tests so that none goes stale.
const TEMPLATES: &[(&str, &str)] = &[
    ("cluster", include_str!("../templates/cluster.yaml")),
    ("placement", include_str!("../templates/placement.yaml")),
    ("systolic", include_str!("../templates/systolic.yaml")),
    ("validate", include_str!("../templates/validate.yaml")),
    ("distributed", include_str!("../templates/distributed.yaml")),
];

/// The starting file of `kind`, or an error listing the kinds that have one.
pub fn template(kind: &str) -> Result<&'static str, ExperimentError> {
    TEMPLATES.iter().find(|(k, _)| *k == kind).map(|(_, t)| *t).ok_or_else(|| {
        ExperimentError::Usage(format!(
            "no template for kind `{kind}`{} (kinds: {})",
            did_you_mean(kind, TEMPLATES.iter().map(|(k, _)| *k)),
            TEMPLATES.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
        ))
    })
}

/// Every kind that has a template, with it.
pub fn templates() -> &'static [(&'static str, &'static str)] {
    TEMPLATES
}

/// Prefix that names a catalog entry instead of a file.
pub const CATALOG_PREFIX: &str = "catalog:";

const ENTRIES: &[CatalogEntry] = &[
    CatalogEntry {
        name: "backup-workers",
        summary: "Figure 8 (right): 50 Inception-v3 workers plus 0..5 backup workers (the default job)",
        text: include_str!("../catalog/backup-workers.yaml"),
    },
    CatalogEntry {
        name: "backup-robustness",
        summary: "Backup workers' benefit against cluster size (25..200) and straggler tail (lognormal sigma 0.1..0.6), b = 0..8",
        text: include_str!("../catalog/backup-robustness.yaml"),
    },
    CatalogEntry {
        name: "async-convergence",
        summary: "Asynchronous statistical efficiency: updates to 90% accuracy with 1..8 workers, a staleness model fitted on one point against the real runtime",
        text: include_str!("../catalog/async-convergence.yaml"),
    },
    CatalogEntry {
        name: "sync-replication",
        summary: "Figure 7: synchronous replication microbenchmark, null/dense/sparse fetches, 1..100 workers, 16 PS",
        text: include_str!("../catalog/sync-replication.yaml"),
    },
    CatalogEntry {
        name: "inception-scaling",
        summary: "Figure 8 (left, middle): Inception-v3 throughput from 25 to 200 workers, async against sync",
        text: include_str!("../catalog/inception-scaling.yaml"),
    },
    CatalogEntry {
        name: "inception-zoo",
        summary: "Figure 8 (left) with each step's compute from the graph-level simulator (zoo Inception-v3, K40) beside the calibrated workload",
        text: include_str!("../catalog/inception-zoo.yaml"),
    },
    CatalogEntry {
        name: "lstm-language-model",
        summary: "Figure 9: LSTM-512-512 language model, 1..32 PS tasks, 4..256 workers",
        text: include_str!("../catalog/lstm-language-model.yaml"),
    },
    CatalogEntry {
        name: "systolic-arrays",
        summary: "TPU-style systolic array: ResNet-50 utilization over array sizes and dataflows (os/ws/is)",
        text: include_str!("../catalog/systolic-arrays.yaml"),
    },
    CatalogEntry {
        name: "quantized-comm",
        summary: "Wire formats f32/f16/bf16/int8 against throughput and bytes, 50 sync workers, 17 PS",
        text: include_str!("../catalog/quantized-comm.yaml"),
    },
    CatalogEntry {
        name: "placement-heuristics",
        summary: "Section 3.3: TF greedy vs Baechi m-TOPO/m-ETF/m-SCT placing four models on 4xK40, simulated step time",
        text: include_str!("../catalog/placement-heuristics.yaml"),
    },
    CatalogEntry {
        name: "validate-placement",
        summary: "The simulator against the real engine: 3 models x 8 placers on 2 CPUs, 2 emulated links, f32/int8, roofline and profile predictors",
        text: include_str!("../catalog/validate-placement.yaml"),
    },
    CatalogEntry {
        name: "distributed-loopback",
        summary: "The cluster simulator against real PS/worker processes on loopback: digits MLP, 1/2/4 workers, 1/2 PS, sync and async",
        text: include_str!("../catalog/distributed-loopback.yaml"),
    },
    CatalogEntry {
        name: "distributed-mlp784",
        summary: "The cluster simulator against real PS/worker processes on issue 16's goal model: the 784-512-512-10 MLP, 1/2/4 workers, sync",
        text: include_str!("../catalog/distributed-mlp784.yaml"),
    },
    CatalogEntry {
        name: "distributed-stragglers",
        summary: "Backup workers and sync/async with injected lognormal stragglers: real worker processes against the cluster simulator replaying the same draws",
        text: include_str!("../catalog/distributed-stragglers.yaml"),
    },
];

/// Every catalog entry.
pub fn catalog() -> &'static [CatalogEntry] {
    ENTRIES
}

/// The entry named `name`.
pub fn catalog_entry(name: &str) -> Result<&'static CatalogEntry, ExperimentError> {
    ENTRIES.iter().find(|e| e.name == name).ok_or_else(|| {
        let names: Vec<&str> = ENTRIES.iter().map(|e| e.name).collect();
        ExperimentError::UnknownCatalogEntry {
            name: name.to_string(),
            suggestion: did_you_mean(name, names.iter().copied()),
            available: names.iter().map(|n| n.to_string()).collect(),
        }
    })
}

/// Loads and checks an experiment named on the command line: a file path,
/// or `catalog:NAME`.
pub fn load(spec: &str) -> Result<Experiment, ExperimentError> {
    match spec.strip_prefix(CATALOG_PREFIX) {
        Some(name) => {
            let entry = catalog_entry(name)?;
            Experiment::from_text(spec, entry.text)
        }
        None => {
            let bytes = std::fs::read(spec).map_err(|e| ExperimentError::InFile {
                origin: spec.to_string(),
                message: match e.kind() {
                    std::io::ErrorKind::NotFound => format!(
                        "no such file (check the path; catalog entries are named `{CATALOG_PREFIX}NAME`, see `flowlab list`)"
                    ),
                    std::io::ErrorKind::IsADirectory => "is a directory, not an experiment file".to_string(),
                    _ => format!("cannot read it: {e}"),
                },
            })?;
            let text = String::from_utf8(bytes).map_err(|e| ExperimentError::InFile {
                origin: spec.to_string(),
                message: format!(
                    "not a text file: byte {} is not UTF-8 (an experiment file is YAML text)",
                    e.utf8_error().valid_up_to()
                ),
            })?;
            Experiment::from_text(spec, &text)
        }
    }
}

//! YAML experiment schema, sweeps, the parallel runner with its resumable
//! result store, and the catalog of ready experiments.
//!
//! ```text
//! load("x.yaml" | "catalog:NAME") -> Experiment   (every point checked)
//! run(&experiment, &options)      -> out/<name>/{experiment.yaml, results.jsonl, results.csv}
//! render(dir)                     -> out/<name>/{*.png, *.svg, index.html}
//! merge(dirs, out)                -> shards' results in one directory
//! ```

mod calibrate;
mod catalog;
mod compare;
mod diagnostics;
mod error;
mod estimate;
mod experiment;
mod identity;
mod kinds;
mod measure;
mod merge;
mod params;
mod references;
mod runner;
mod schema;
mod store;
mod suggest;
mod sweep;

use std::path::{Path, PathBuf};

pub use compare::{Comparison, compare, compare_report};
pub use catalog::{CATALOG_PREFIX, CatalogEntry, DEFAULT_EXPERIMENT, catalog, catalog_entry, load, template, templates};
pub use error::ExperimentError;
pub use estimate::RunEstimate;
pub use experiment::Experiment;
pub use measure::{ProfileRequest, ZooSizes, measure_host, profile_model};
pub use merge::{MergeSummary, merge};
/// `flowlab diagnose`: measured and simulated steps side by side, as text.
pub mod diagnose {
    pub use crate::kinds::validate::diagnose::{SplitStep, roofline_by_class, split_step, two_sessions};
}
pub use schema::{file_schema, point_schema, reference_page};
pub use runner::{Progress, RunOptions, RunSummary, Shard, default_out_dir, run};

/// Renders the plots and the HTML page of a result directory; returns the
/// page's path.
pub fn render(dir: &Path) -> Result<PathBuf, ExperimentError> {
    Ok(flowlab_reports::render(dir)?.index_html)
}

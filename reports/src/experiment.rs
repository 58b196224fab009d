//! The two keys of an experiment file a report needs: `name` and `plots`.
//! Every other key belongs to `flowlab-experiments` and is ignored here.

use std::path::Path;

use serde::Deserialize;

use crate::error::ReportError;
use crate::spec::{PlotSpec, Reference};

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct ExperimentHeader {
    pub name: String,
    #[serde(default)]
    pub plots: Vec<PlotSpec>,
    /// Published numbers drawn beside the simulation's.
    #[serde(default)]
    pub reference: Vec<Reference>,
}

impl ExperimentHeader {
    /// Parses `text`, the contents of `path`, and validates every plot.
    pub(crate) fn parse(path: &Path, text: &str) -> Result<Self, ReportError> {
        let header: ExperimentHeader =
            serde_saphyr::from_str(text).map_err(|e| ReportError::BadExperiment {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        for (i, plot) in header.plots.iter().enumerate() {
            plot.validate().map_err(|e| ReportError::BadExperiment {
                path: path.to_path_buf(),
                message: format!("plots[{i}]: {e}"),
            })?;
        }
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
name: backup-workers
kind: cluster
seed: 42
base: { workers: 50, strategy: { sync: { backup: 0 } } }
sweep:
  workers: [25, 50]
plots:
  - { x: workers, y: throughput, series: strategy.sync.backup }
  - { kind: cdf, y: step_time_s, series: strategy.sync.backup }
";

    #[test]
    fn reads_name_and_plots_and_ignores_other_keys() {
        let h = ExperimentHeader::parse(Path::new("e.yaml"), FILE).unwrap();
        assert_eq!(h.name, "backup-workers");
        assert_eq!(h.plots.len(), 2);
        assert_eq!(h.plots[1].y, "step_time_s");
    }

    #[test]
    fn plots_are_optional() {
        let h = ExperimentHeader::parse(Path::new("e.yaml"), "name: x\nkind: graph\n").unwrap();
        assert!(h.plots.is_empty());
    }

    #[test]
    fn bad_plot_names_file_and_entry() {
        let text = FILE.replace("{ kind: cdf, y", "{ kind: heatmap, y");
        let err = ExperimentHeader::parse(Path::new("out/e/experiment.yaml"), &text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "out/e/experiment.yaml: plots[1]: plot `heatmap step_time_s`: a heatmap plot needs `x`, `y` and `z`"
        );
    }

    #[test]
    fn unknown_plot_field_names_file_line_and_key() {
        let text = FILE.replace("series: strategy.sync.backup }\n  - { kind", "colour: red }\n  - { kind");
        let err = ExperimentHeader::parse(Path::new("out/e/experiment.yaml"), &text)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("out/e/experiment.yaml: "), "{err}");
        assert!(err.contains("colour"), "{err}");
        assert!(err.contains("line 8"), "{err}");
    }
}

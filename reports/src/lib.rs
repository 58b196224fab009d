//! Plots (PNG/SVG), tables and the HTML report page built from result tables.
//!
//! Reads result tables only: it depends on no other flowlab crate. The
//! experiment runner calls [`render`] on an output folder after a sweep (and
//! `flowlab report DIR` calls it alone); it may also use [`read_results_file`]
//! and [`ResultRow`] to resume and merge runs, and [`PlotSpec`] for the
//! `plots:` list of its experiment schema.

mod cell;
mod chart;
mod error;
mod experiment;
mod figures;
mod html;
mod labels;
mod prepare;
mod render;
mod results;
mod spec;
mod subtitle;
mod summary;

pub use error::ReportError;
pub use figures::figures_text;
pub use labels::axis_label as metric_label;
pub use prepare::check_plot_points;
pub use render::{RenderedReport, render};
pub use results::{ResultRow, ResultsFile, read_results, read_results_file};
pub use spec::{PlotKind, PlotSpec, Reference, ReferencePoint, Role, same_value};
pub use summary::{
    CalibrationRecord, RUN_INFO_FILE, ResolvedConstants, ReferenceCheck, RunInfo, SUMMARY_FILE, Summary, SummaryTable, utc_date, write_run_info,
    write_summary,
};

//! Plots (PNG/SVG), tables and the HTML report page built from result tables.

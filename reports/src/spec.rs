//! What a plot shows: one entry of an experiment file's `plots:` list.
//!
//! `- { x: workers, y: throughput, series: strategy.sync.backup }`
//! `- { kind: cdf, y: step_time_s, series: strategy.sync.backup }`
//! `- { kind: heatmap, x: array, y: dataflow, z: utilization }`
//! `- { kind: scatter, x: measured_step_s, y: predicted_step_s, series: placer, diagonal: true }`
//!
//! Keys name a sweep parameter (dotted) or a metric; for a CDF, `y` names a
//! per-step series.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ReportError;

/// The chart type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PlotKind {
    /// `y` against `x`, one line per value of `series`, error bars from repeats.
    #[default]
    Line,
    /// Empirical CDF of the samples of series `y`, one curve per value of `series`.
    Cdf,
    /// `y` per category of `x`, grouped bars per value of `series`.
    Bar,
    /// Colour of `z` over the grid of `x` and `y` values.
    Heatmap,
    /// One marker per result row at (`x`, `y`), colour and shape per value
    /// of `series`; no lines, and no averaging: each marker is one run.
    Scatter,
}

impl PlotKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            PlotKind::Line => "line",
            PlotKind::Cdf => "cdf",
            PlotKind::Bar => "bar",
            PlotKind::Heatmap => "heatmap",
            PlotKind::Scatter => "scatter",
        }
    }
}

/// One plot of an experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlotSpec {
    #[serde(default)]
    pub kind: PlotKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    pub y: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<String>,
    /// The heat map's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub z: Option<String>,
    #[serde(default)]
    pub log_x: bool,
    #[serde(default)]
    pub log_y: bool,
    /// A heat map's colour on a logarithmic scale (every `z` positive).
    #[serde(default)]
    pub log_z: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Axis titles; by default the key's label with its unit (`median step time (s)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y_label: Option<String>,
    /// Fixes one end of the y axis (of a line or bar chart); by default the
    /// range follows the data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y_min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y_max: Option<f64>,
    /// Parameters whose points are knowingly pooled into one position (their
    /// mean and min..max drawn, a CDF's samples merged). Without it, two
    /// points that differ in anything but their seed and land on one
    /// position are an error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pool: Vec<String>,
    /// A scatter plot's y = x line (predicted against measured: a point on
    /// it is exact). Both axes then share one range, and one log setting.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub diagonal: bool,
    /// Only the points with these parameter values (`where: { workers: 100 }`):
    /// one slice of a larger sweep, so that the keys it pins do not collide.
    #[serde(default, rename = "where", skip_serializing_if = "BTreeMap::is_empty")]
    pub filter: BTreeMap<String, serde_json::Value>,
}

/// Published numbers to draw beside the simulation: one entry of an
/// experiment file's `reference:` list, drawn as a distinct marked series on
/// every line plot with the same `x` and `y`, and compared point by point
/// with the simulated value at the same sweep point.
///
/// Every point has a role: `calibration` (a free parameter was fitted to it,
/// so matching it proves nothing) or `held_out` (a prediction). A point
/// takes the reference's `role` unless it names its own as a third element.
///
/// `- { source: "TF paper, Fig. 7", label: "paper: null", x: workers, y: step_p50_s,`
/// `    where: { model: "null" }, role: held_out, points: [[1, 0.0018, calibration], [100, 0.0088]] }`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    /// Where the numbers come from (paper, figure or table).
    pub source: String,
    /// The legend entry; `paper` if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub x: String,
    pub y: String,
    /// Values of other parameters that the points' sweep points have
    /// (`where: { model: dense_1gb }`): which line of a plot with series
    /// the numbers belong to.
    #[serde(default, rename = "where", skip_serializing_if = "BTreeMap::is_empty")]
    pub filter: BTreeMap<String, serde_json::Value>,
    /// The role of every point that does not name its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// `[x, y]` or `[x, y, role]`.
    pub points: Vec<ReferencePoint>,
}

/// What a published point is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A free parameter was fitted to it: agreement here is by construction.
    Calibration,
    /// Nothing was fitted to it: the error here is the model's.
    HeldOut,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Calibration => "calibration",
            Role::HeldOut => "held_out",
        }
    }

    /// For legends and tables.
    pub fn describe(self) -> &'static str {
        match self {
            Role::Calibration => "calibration",
            Role::HeldOut => "held out",
        }
    }
}

/// One published `(x, y)` pair, with its own role if it names one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReferencePoint {
    pub x: f64,
    pub y: f64,
    pub role: Option<Role>,
}

impl Serialize for ReferencePoint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(if self.role.is_some() { 3 } else { 2 }))?;
        seq.serialize_element(&self.x)?;
        seq.serialize_element(&self.y)?;
        if let Some(r) = self.role {
            seq.serialize_element(&r)?;
        }
        seq.end()
    }
}

impl schemars::JsonSchema for ReferencePoint {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ReferencePoint".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let role = generator.subschema_for::<Role>();
        schemars::json_schema!({
            "description": "`[x, y]` or `[x, y, role]`",
            "type": "array",
            "prefixItems": [{ "type": "number" }, { "type": "number" }, role],
            "items": false,
            "minItems": 2
        })
    }
}

impl<'de> Deserialize<'de> for ReferencePoint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ReferencePoint;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a point `[x, y]` or `[x, y, role]` with role `calibration` or `held_out`")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<ReferencePoint, A::Error> {
                use serde::de::Error;
                let x: f64 = seq.next_element()?.ok_or_else(|| A::Error::invalid_length(0, &self))?;
                let y: f64 = seq.next_element()?.ok_or_else(|| A::Error::invalid_length(1, &self))?;
                let role: Option<Role> = seq.next_element()?;
                if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    return Err(A::Error::invalid_length(4, &self));
                }
                Ok(ReferencePoint { x, y, role })
            }
        }
        d.deserialize_seq(V)
    }
}

impl Reference {
    pub fn label(&self) -> &str {
        self.label.as_deref().unwrap_or("paper")
    }

    /// Whether this reference belongs on `plot`: a line plot of the same x and y.
    pub fn fits(&self, plot: &PlotSpec) -> bool {
        let same_slice = plot.filter.iter().all(|(k, v)| self.filter.get(k).is_none_or(|mine| same_value(mine, v)));
        plot.kind == PlotKind::Line && plot.x.as_deref() == Some(self.x.as_str()) && plot.y == self.y && same_slice
    }

    /// A point's role: its own, else the reference's (`None`: neither says).
    pub fn role_of(&self, p: &ReferencePoint) -> Option<Role> {
        p.role.or(self.role)
    }
}

/// Two parameter values are the same: equal JSON, or equal numbers however
/// written (`100` and `100.0`).
pub fn same_value(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
        _ => a == b,
    }
}

impl PlotSpec {
    /// Whether a row belongs on this plot: it has every value `where:` pins.
    pub fn keeps(&self, params: &BTreeMap<String, serde_json::Value>) -> bool {
        self.filter.iter().all(|(k, want)| params.get(k).is_some_and(|v| same_value(v, want)))
    }

    /// Whether the (x, y) axes are logarithmic as drawn: with `diagonal`,
    /// either log flag makes both axes logarithmic, so that y = x stays a
    /// line through equal values on both axes.
    pub(crate) fn log_axes(&self) -> (bool, bool) {
        if self.diagonal {
            let log = self.log_x || self.log_y;
            (log, log)
        } else {
            (self.log_x, self.log_y)
        }
    }

    /// Checks that the fields fit the kind, before any data is read.
    pub fn validate(&self) -> Result<(), ReportError> {
        let fail = |reason: &str| {
            Err(ReportError::InvalidPlot {
                plot: self.describe(),
                reason: reason.to_string(),
            })
        };
        if self.y.trim().is_empty() {
            return fail("`y` is empty");
        }
        for (name, key) in [("x", &self.x), ("series", &self.series), ("z", &self.z)] {
            if key.as_deref().is_some_and(|k| k.trim().is_empty()) {
                return fail(&format!("`{name}` is empty"));
            }
        }
        if let (Some(lo), Some(hi)) = (self.y_min, self.y_max)
            && lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less)
        {
            return fail(&format!("`y_min` ({lo}) must be below `y_max` ({hi})"));
        }
        if self.log_y && self.y_min.is_some_and(|v| v <= 0.0) {
            return fail("`y_min` must be positive on a logarithmic y axis (`log_y: true`)");
        }
        if matches!(self.kind, PlotKind::Cdf | PlotKind::Heatmap) && (self.y_min.is_some() || self.y_max.is_some()) {
            return fail(&format!("`y_min`/`y_max` apply to line, bar and scatter plots, not to a {} plot", self.kind.name()));
        }
        if self.log_z && self.kind != PlotKind::Heatmap {
            return fail("`log_z` is the colour scale of a heatmap plot");
        }
        if self.pool.iter().any(|k| k.trim().is_empty()) {
            return fail("`pool` lists an empty key");
        }
        if self.diagonal && self.kind != PlotKind::Scatter {
            return fail(&format!(
                "`diagonal` draws y = x on a scatter plot (`kind: scatter`); it does not apply to a {} plot",
                self.kind.name()
            ));
        }
        match self.kind {
            PlotKind::Line | PlotKind::Bar => {
                if self.x.is_none() {
                    return fail(&format!("a {} plot needs `x`", self.kind.name()));
                }
                if self.z.is_some() {
                    return fail("`z` is only for heatmap plots");
                }
                if self.kind == PlotKind::Bar && self.log_x {
                    return fail("a bar plot has a categorical x axis; `log_x` does not apply");
                }
            }
            PlotKind::Cdf => {
                if self.x.is_some() {
                    return fail(
                        "a cdf plot draws the distribution of the series named by `y`; it takes no `x`",
                    );
                }
                if self.z.is_some() {
                    return fail("`z` is only for heatmap plots");
                }
                if self.log_y {
                    return fail("a cdf plot's y axis is a fraction in 0..1; `log_y` does not apply");
                }
            }
            PlotKind::Heatmap => {
                if self.x.is_none() || self.z.is_none() {
                    return fail("a heatmap plot needs `x`, `y` and `z`");
                }
                if self.series.is_some() {
                    return fail("a heatmap plot takes no `series`");
                }
                if self.log_x || self.log_y {
                    return fail("a heatmap plot has categorical axes; `log_x`/`log_y` do not apply");
                }
            }
            PlotKind::Scatter => {
                if self.x.is_none() {
                    return fail("a scatter plot needs `x` and `y`");
                }
                if self.z.is_some() {
                    return fail("`z` is only for heatmap plots");
                }
                if !self.pool.is_empty() {
                    return fail("a scatter plot draws every run as its own marker and averages nothing; `pool` does not apply");
                }
                if self.diagonal && (self.y_min.is_some() || self.y_max.is_some()) {
                    return fail("with `diagonal: true` both axes share the range of the data; `y_min`/`y_max` do not apply");
                }
            }
        }
        Ok(())
    }

    /// A short name for messages and captions: `line throughput vs workers`.
    pub(crate) fn describe(&self) -> String {
        match (&self.x, &self.z) {
            (Some(x), Some(z)) => format!("`{} {z} over {x} x {}`", self.kind.name(), self.y),
            (Some(x), None) => format!("`{} {} vs {x}`", self.kind.name(), self.y),
            (None, _) => format!("`{} {}`", self.kind.name(), self.y),
        }
    }

    /// The file stem before de-duplication: `line-throughput-vs-workers`.
    pub(crate) fn stem(&self) -> String {
        let raw = match (&self.x, &self.z) {
            (Some(x), Some(z)) => format!("{}-{z}-over-{x}-{}", self.kind.name(), self.y),
            (Some(x), None) => format!("{}-{}-vs-{x}", self.kind.name(), self.y),
            (None, _) => format!("{}-{}", self.kind.name(), self.y),
        };
        raw.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> PlotSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn defaults_to_line_without_log_axes() {
        let s = spec("{ x: workers, y: throughput, series: strategy.sync.backup }");
        assert_eq!(s.kind, PlotKind::Line);
        assert!(!s.log_x && !s.log_y);
        assert_eq!(s.series.as_deref(), Some("strategy.sync.backup"));
        s.validate().unwrap();
        assert_eq!(s.stem(), "line-throughput-vs-workers");
    }

    #[test]
    fn unknown_field_is_rejected() {
        let err = serde_saphyr::from_str::<PlotSpec>("{ x: a, y: b, colour: red }").unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
    }

    #[test]
    fn heatmap_needs_x_y_and_z() {
        let err = spec("{ kind: heatmap, x: array, y: dataflow }")
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "plot `heatmap dataflow vs array`: a heatmap plot needs `x`, `y` and `z`"
        );
        let ok = spec("{ kind: heatmap, x: array, y: dataflow, z: utilization }");
        ok.validate().unwrap();
        assert_eq!(ok.stem(), "heatmap-utilization-over-array-dataflow");
    }

    #[test]
    fn line_and_bar_need_x_and_cdf_takes_none() {
        let err = spec("{ y: throughput }").validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "plot `line throughput`: a line plot needs `x`"
        );
        let err = spec("{ kind: bar, y: throughput }").validate().unwrap_err();
        assert_eq!(err.to_string(), "plot `bar throughput`: a bar plot needs `x`");
        let err = spec("{ kind: cdf, x: workers, y: step_time_s }")
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "plot `cdf step_time_s vs workers`: a cdf plot draws the distribution of the series named by `y`; it takes no `x`"
        );
        spec("{ kind: cdf, y: step_time_s, series: strategy.sync.backup, log_x: true }")
            .validate()
            .unwrap();
    }

    #[test]
    fn y_range_overrides_are_checked() {
        let err = spec("{ x: a, y: b, y_min: 2, y_max: 1 }").validate().unwrap_err();
        assert_eq!(err.to_string(), "plot `line b vs a`: `y_min` (2) must be below `y_max` (1)");
        let err = spec("{ x: a, y: b, y_min: 0, log_y: true }").validate().unwrap_err();
        assert!(err.to_string().contains("`y_min` must be positive on a logarithmic y axis"), "{err}");
        let err = spec("{ kind: heatmap, x: a, y: b, z: c, y_max: 3 }").validate().unwrap_err();
        assert!(err.to_string().contains("apply to line, bar and scatter plots"), "{err}");
        spec("{ x: a, y: b, y_min: 0.95, y_max: 1.1, x_label: backups, y_label: speedup, pool: [m] }")
            .validate()
            .unwrap();
    }

    #[test]
    fn diagonal_belongs_to_scatter_plots_only() {
        let err = spec("{ x: measured_step_s, y: predicted_step_s, diagonal: true }")
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "plot `line predicted_step_s vs measured_step_s`: `diagonal` draws y = x on a scatter plot \
             (`kind: scatter`); it does not apply to a line plot"
        );
        let err = spec("{ kind: heatmap, x: a, y: b, z: c, diagonal: true }").validate().unwrap_err();
        assert!(err.to_string().contains("does not apply to a heatmap plot"), "{err}");
        let ok = spec("{ kind: scatter, x: measured_step_s, y: predicted_step_s, series: placer, diagonal: true }");
        ok.validate().unwrap();
        assert_eq!(ok.stem(), "scatter-predicted_step_s-vs-measured_step_s");
        // Without the key it is off, and it is not written back.
        let plain = spec("{ kind: scatter, x: a, y: b }");
        assert!(!plain.diagonal);
        assert!(!serde_json::to_string(&plain).unwrap().contains("diagonal"));
    }

    #[test]
    fn scatter_needs_x_and_takes_no_pool_or_z() {
        let err = spec("{ kind: scatter, y: predicted_step_s }").validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "plot `scatter predicted_step_s`: a scatter plot needs `x` and `y`"
        );
        let err = spec("{ kind: scatter, x: a, y: b, pool: [model] }").validate().unwrap_err();
        assert!(err.to_string().contains("averages nothing; `pool` does not apply"), "{err}");
        let err = spec("{ kind: scatter, x: a, y: b, z: c }").validate().unwrap_err();
        assert!(err.to_string().contains("`z` is only for heatmap plots"), "{err}");
        let err = spec("{ kind: scatter, x: a, y: b, diagonal: true, y_max: 3 }").validate().unwrap_err();
        assert!(err.to_string().contains("share the range of the data"), "{err}");
        spec("{ kind: scatter, x: a, y: b, y_max: 3, log_x: true }").validate().unwrap();
    }

    #[test]
    fn one_log_flag_makes_both_axes_of_a_diagonal_logarithmic() {
        assert_eq!(spec("{ kind: scatter, x: a, y: b, diagonal: true, log_y: true }").log_axes(), (true, true));
        assert_eq!(spec("{ kind: scatter, x: a, y: b, log_y: true }").log_axes(), (false, true));
        assert_eq!(spec("{ kind: scatter, x: a, y: b, diagonal: true }").log_axes(), (false, false));
    }

    #[test]
    fn stem_replaces_dots_and_odd_characters() {
        let s = spec("{ kind: cdf, y: step time/s }");
        assert_eq!(s.stem(), "cdf-step_time_s");
    }
}

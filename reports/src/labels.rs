//! What an axis says: a key's human label with its unit, and tick numbers a
//! reader takes in at a glance (SI prefixes, scientific notation).
//!
//! The names below are the metrics and common parameters of the kinds that
//! exist (`cluster`, `placement`, `systolic`); any other key gets its unit
//! from its suffix (`_s`, `_ms`, `_mb`, `_gb`, `_gbps`) or is shown as is. A
//! plot's `x_label` / `y_label` overrides all of this.

/// Known keys: (key, label with unit).
const KNOWN: &[(&str, &str)] = &[
    // cluster metrics
    ("throughput", "throughput (examples/s)"),
    ("step_p50_s", "median step time (s)"),
    ("step_p90_s", "90th percentile step time (s)"),
    ("step_p99_s", "99th percentile step time (s)"),
    ("step_mean_s", "mean step time (s)"),
    ("normalized_speedup", "normalized speedup (×)"),
    ("staleness_mean", "mean staleness (steps)"),
    ("staleness_p99", "99th percentile staleness (steps)"),
    ("implicit_momentum", "implicit momentum of asynchrony"),
    ("bytes_moved", "bytes moved (B)"),
    ("link_util_max", "busiest link utilization (fraction)"),
    ("goodput", "goodput (examples/s)"),
    ("sim_time_s", "simulated time (s)"),
    ("failures", "failures"),
    ("step_time_s", "step time (s)"),
    // placement metrics
    ("one_device_step_s", "one-device step time (s)"),
    ("speedup", "speedup over one device (×)"),
    ("placement_s", "time to place (s)"),
    ("devices_used", "devices used"),
    ("transfers", "transfers per step"),
    ("transfer_mb", "moved between devices per step (MB)"),
    ("peak_memory_gb", "peak device memory (GB)"),
    ("mean_utilization", "mean device utilization (fraction)"),
    // validate metrics
    ("measured_step_s", "measured step time (s)"),
    ("measured_p10_s", "measured 10th percentile step time (s)"),
    ("measured_p90_s", "measured 90th percentile step time (s)"),
    ("predicted_step_s", "predicted step time (s)"),
    ("error", "signed prediction error (fraction)"),
    ("abs_error", "absolute prediction error (fraction)"),
    // systolic metrics
    ("utilization", "PE utilization (fraction)"),
    ("mapping_efficiency", "mapping efficiency (fraction)"),
    ("cycles", "cycles"),
    ("compute_cycles", "compute cycles"),
    ("stall_cycles", "stall cycles"),
    ("macs", "multiply-accumulates"),
    ("time_s", "time (s)"),
    // parameters
    ("workers", "workers"),
    ("ps", "PS tasks"),
    ("strategy.sync.backup", "backup workers"),
    ("network.link_gbps", "link speed (Gb/s)"),
    ("link.gbps", "link speed (Gb/s)"),
    ("link.latency_us", "link latency (µs)"),
    ("comm", "wire format"),
    ("rows", "array rows"),
    ("cols", "array columns"),
];

/// Unit suffixes of keys not listed above.
const SUFFIXES: &[(&str, &str)] = &[
    ("_per_s", "per s"),
    ("_gbps", "Gb/s"),
    ("_ms", "ms"),
    ("_us", "µs"),
    ("_mb", "MB"),
    ("_gb", "GB"),
    ("_s", "s"),
];

/// The axis title of `key`: `median step time (s)` for `step_p50_s`,
/// `latency (ms)` for `latency_ms`, the key itself otherwise.
pub fn axis_label(key: &str) -> String {
    if let Some((_, label)) = KNOWN.iter().find(|(k, _)| *k == key) {
        return (*label).to_string();
    }
    for (suffix, unit) in SUFFIXES {
        if let Some(stem) = key.strip_suffix(suffix)
            && !stem.is_empty()
        {
            return format!("{stem} ({unit})");
        }
    }
    key.to_string()
}

/// A tick label: whole numbers below 10,000 in full; larger magnitudes with
/// an SI prefix (`12.5k`, `3M`, `1.2G`); magnitudes below 0.001 in scientific
/// notation (`2.5e-4`); at most three significant digits otherwise.
pub(crate) fn format_tick(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let a = v.abs();
    if a < 1e-3 {
        return trim_exponent(&format!("{v:.1e}"));
    }
    if a < 1e4 {
        return significant(v, 3);
    }
    const PREFIXES: [(f64, &str); 5] = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, prefix) in PREFIXES {
        if a >= scale {
            if a >= scale * 1e3 && prefix == "P" {
                return trim_exponent(&format!("{v:.1e}"));
            }
            return format!("{}{prefix}", significant(v / scale, 3));
        }
    }
    significant(v, 3)
}

/// A tick label on an axis whose range is `range`: a value within a
/// billionth of the range's width from zero is zero (plotters' tick
/// arithmetic puts -1.1e-16 where the tick is 0).
pub(crate) fn format_axis_tick(v: f64, range: &std::ops::Range<f64>) -> String {
    let width = (range.end - range.start).abs();
    format_tick(if v.abs() <= width * 1e-9 { 0.0 } else { v })
}

/// An axis's title and its tick labels. A time in seconds (a title ending
/// in " (s)") whose axis lies within a second is shown in milliseconds, and
/// within a millisecond in microseconds, so that its ticks read `4.5`
/// rather than `0.0045`; the data stay in seconds. A plot's own label
/// (`x_label`, `y_label`) says its unit itself: its values are shown as
/// they are.
pub(crate) struct Axis {
    pub(crate) desc: String,
    scale: f64,
    range: std::ops::Range<f64>,
}

impl Axis {
    /// The axis of `key` over `range` (the chart's, in the data's units),
    /// titled `own` where the plot gives a title.
    pub(crate) fn new(own: Option<&str>, key: &str, range: &std::ops::Range<f64>) -> Axis {
        let label = own.map_or_else(|| axis_label(key), str::to_string);
        let widest = range.start.abs().max(range.end.abs());
        let seconds = if own.is_none() { label.strip_suffix(" (s)") } else { None };
        let (scale, desc) = match seconds {
            Some(stem) if widest > 0.0 && widest < 1e-3 => (1e6, format!("{stem} (µs)")),
            Some(stem) if widest > 0.0 && widest < 1.0 => (1e3, format!("{stem} (ms)")),
            _ => (1.0, label),
        };
        Axis { desc, scale, range: range.start * scale..range.end * scale }
    }

    /// The label of the tick at `v` (in the data's units).
    pub(crate) fn tick(&self, v: f64) -> String {
        format_axis_tick(v * self.scale, &self.range)
    }
}

/// `v` with at most `digits` significant digits, trailing zeros removed.
fn significant(v: f64, digits: i32) -> String {
    let a = v.abs();
    let decimals = (digits - 1 - a.log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `2.5e-4` rather than `2.5e-4` with a `.0` mantissa: `1.0e-5` -> `1e-5`.
fn trim_exponent(s: &str) -> String {
    match s.split_once('e') {
        Some((m, e)) => {
            let m = if m.contains('.') {
                m.trim_end_matches('0').trim_end_matches('.')
            } else {
                m
            };
            format!("{m}e{e}")
        }
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_keys_and_suffixes_get_units() {
        assert_eq!(axis_label("step_p50_s"), "median step time (s)");
        assert_eq!(axis_label("latency_ms"), "latency (ms)");
        assert_eq!(axis_label("link_gbps"), "link (Gb/s)");
        assert_eq!(axis_label("model"), "model");
        assert_eq!(axis_label("_s"), "_s");
    }

    /// A step time of a few milliseconds reads in ms, a sub-millisecond
    /// one in µs, one of seconds stays in s; other units, and an axis the
    /// plot titles itself, keep their values.
    #[test]
    fn short_times_read_in_milliseconds_or_microseconds() {
        let ms = Axis::new(None, "measured_step_s", &(0.0005..0.0062));
        assert_eq!((ms.desc.as_str(), ms.tick(0.0045), ms.tick(0.0)), ("measured step time (ms)", "4.5".to_string(), "0".to_string()));
        let us = Axis::new(None, "latency_s", &(0.0..0.00025));
        assert_eq!((us.desc.as_str(), us.tick(0.000125)), ("latency (µs)", "125".to_string()));
        let s = Axis::new(None, "step_p50_s", &(0.0..3.4));
        assert_eq!((s.desc.as_str(), s.tick(2.5)), ("median step time (s)", "2.5".to_string()));
        let fraction = Axis::new(None, "error", &(-0.4..0.3));
        assert_eq!((fraction.desc.as_str(), fraction.tick(-0.25)), ("signed prediction error (fraction)", "-0.25".to_string()));
        let own = Axis::new(Some("step (s)"), "measured_step_s", &(0.0..0.006));
        assert_eq!((own.desc.as_str(), own.tick(0.0045)), ("step (s)", "0.0045".to_string()));
    }

    #[test]
    fn a_tick_at_rounding_distance_from_zero_reads_zero() {
        assert_eq!(format_axis_tick(-1.1102230246251565e-16, &(-0.7..1.2)), "0");
        assert_eq!(format_axis_tick(0.2, &(-0.7..1.2)), "0.2");
        // A genuinely small value on an axis of small values keeps its digits.
        assert_eq!(format_axis_tick(2.5e-16, &(0.0..1e-15)), "2.5e-16");
    }

    #[test]
    fn ticks_use_si_prefixes_and_scientific_notation() {
        // Written out by hand from the rule, not from the code.
        let cases = [
            (0.0, "0"),
            (50.0, "50"),
            (9999.0, "9999"),
            (12_500.0, "12.5k"),
            (1_000_000_000.0, "1G"),
            (2_500_000_000.0, "2.5G"),
            (3_141_592.0, "3.14M"),
            (-40_000.0, "-40k"),
            (0.25, "0.25"),
            (0.001, "0.001"),
            (0.000_25, "2.5e-4"),
            (1e-5, "1e-5"),
            (1.23456, "1.23"),
            (4.2e18, "4.2e18"),
        ];
        for (v, want) in cases {
            assert_eq!(format_tick(v), want, "{v}");
        }
    }
}

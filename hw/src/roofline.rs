//! Roofline cost of one op on one device:
//!
//! `time = launch_overhead + max(flops / (peak(dtype) * efficiency(class)), bytes / memory_bandwidth)`
//!
//! The efficiency is a per-op-class fraction of peak: the built-in defaults
//! below, then the device's `efficiency` map in the catalog, then a measured
//! [`Profile`] (highest precedence).
//!
//! # Profile file format
//!
//! YAML, or JSON when the file name ends in `.json` (same keys):
//!
//! ```yaml
//! device: v100            # optional: the device it was measured on (informational)
//! classes:                # optional: op class -> efficiency in (0, 1]
//!   matmul: 0.62
//!   conv: 0.55
//! ops:                    # optional: op name -> measured efficiency or seconds
//!   MatMul: { efficiency: 0.7 }
//!   Conv2D: { seconds: 0.0012 }   # used as the op's whole time (overhead included)
//! ```
//!
//! Op classes: `matmul`, `conv`, `elementwise`, `reduction`, `data_movement`, `other`.

use crate::catalog::DeviceSpec;
use crate::profile::{HostMeasurement, ShapeMeasurement};
use crate::HwError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// Arithmetic precision of an op's math, for choosing the peak rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F32,
    Tf32,
    F16,
    Bf16,
    Int8,
}

/// What kind of work an op does; each class has its own efficiency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpClass {
    Matmul,
    Conv,
    Elementwise,
    Reduction,
    DataMovement,
    Other,
}

impl OpClass {
    /// Default fraction of peak FLOP/s reached by well-tuned kernels of the class.
    pub fn default_efficiency(self) -> f64 {
        match self {
            OpClass::Matmul => 0.8,
            OpClass::Conv => 0.7,
            OpClass::Elementwise | OpClass::DataMovement => 1.0,
            OpClass::Reduction => 0.8,
            OpClass::Other => 0.5,
        }
    }
}

impl fmt::Display for OpClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            OpClass::Matmul => "matmul",
            OpClass::Conv => "conv",
            OpClass::Elementwise => "elementwise",
            OpClass::Reduction => "reduction",
            OpClass::DataMovement => "data_movement",
            OpClass::Other => "other",
        };
        f.write_str(s)
    }
}

/// The work of one op: floating-point (or integer) operations and bytes moved
/// to and from device memory.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OpCost {
    pub flops: f64,
    pub bytes: f64,
    pub dtype: Dtype,
    pub class: OpClass,
}

/// A measured override for one op name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum OpMeasurement {
    Efficiency(f64),
    Seconds(f64),
}

/// Measured efficiencies (see the module docs for the file format).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    #[serde(default)]
    pub device: Option<String>,
    #[serde(default)]
    pub classes: BTreeMap<OpClass, f64>,
    #[serde(default)]
    pub ops: BTreeMap<String, OpMeasurement>,
    /// The model and batch a measured profile comes from (its shape keys
    /// describe that graph only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<usize>,
    /// Devices of the engine session the profile ran in (every node on the
    /// first). It matters: a multi-device step keeps a copy-on-write
    /// snapshot of the variables it updates, so that a failed step rolls
    /// back, which makes its in-place updates copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_devices: Option<usize>,
    /// Measured kernel seconds by shape key (see [`crate::ShapeMeasurement`]);
    /// they take precedence over `ops` and `classes`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shapes: BTreeMap<String, ShapeMeasurement>,
    /// The profiled step's nodes by name: their shape keys and modelled
    /// costs, so the same graph at other shapes can be priced from these
    /// measurements (see [`crate::ProfiledNode`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nodes: BTreeMap<String, crate::ProfiledNode>,
    /// The host the profile was measured on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostMeasurement>,
    /// Wall seconds of each timed step, in order: the host's step-time
    /// distribution, which `flowlab profile --step-factors` turns into a
    /// straggler trace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_seconds: Vec<f64>,
}

impl Profile {
    /// Reads a profile: JSON if the name ends in `.json`, YAML otherwise.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Profile, HwError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| HwError::Io { path: path.into(), error })?;
        let profile: Profile = if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) {
            serde_json::from_str(&text).map_err(|e| HwError::Parse {
                path: path.into(),
                line: e.line(),
                message: e.to_string(),
            })?
        } else {
            serde_saphyr::from_str(&text).map_err(|e| HwError::Yaml { path: path.into(), message: e.to_string() })?
        };
        let bad = |key: String, message: String| HwError::InvalidValue { path: path.into(), key, message };
        for (c, e) in &profile.classes {
            if !(e.is_finite() && *e > 0.0 && *e <= 1.0) {
                return Err(bad(format!("classes.{c}"), format!("efficiency must be in (0, 1], got {e}")));
            }
        }
        for (key, m) in &profile.shapes {
            for (field, v) in [("seconds", m.seconds), ("p10", m.p10), ("p90", m.p90), ("contended_seconds", m.contended_seconds.unwrap_or(0.0))] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(bad(format!("shapes.\"{key}\".{field}"), format!("must be zero or positive, got {v}")));
                }
            }
        }
        if let Some(h) = &profile.host
            && let Some((key, v)) = h.invalid()
        {
            return Err(bad(format!("host.{key}"), format!("must be a finite positive number, got {v}")));
        }
        for (name, m) in &profile.ops {
            match m {
                OpMeasurement::Efficiency(e) if !(e.is_finite() && *e > 0.0 && *e <= 1.0) => {
                    return Err(bad(format!("ops.{name}.efficiency"), format!("must be in (0, 1], got {e}")));
                }
                OpMeasurement::Seconds(s) if !(s.is_finite() && *s >= 0.0) => {
                    return Err(bad(format!("ops.{name}.seconds"), format!("must be zero or positive, got {s}")));
                }
                _ => {}
            }
        }
        Ok(profile)
    }
}

impl Profile {
    /// Writes the profile as pretty JSON, through a temporary file renamed
    /// into place (a crash leaves the old file or the new one).
    pub fn write_json(&self, path: impl AsRef<Path>) -> Result<(), HwError> {
        let path = path.as_ref();
        let text = serde_json::to_string_pretty(self).map_err(|e| HwError::Yaml { path: path.into(), message: e.to_string() })?;
        flowlab_files::write_atomic(path, text.as_bytes()).map_err(|error| HwError::Write { path: path.into(), error })
    }
}

impl DeviceSpec {
    /// Efficiency of `class` on this device: profile, then catalog, then default.
    pub fn efficiency(&self, class: OpClass, profile: Option<&Profile>) -> f64 {
        profile
            .and_then(|p| p.classes.get(&class).copied())
            .or_else(|| self.efficiency.get(&class).copied())
            .unwrap_or_else(|| class.default_efficiency())
    }

    /// Roofline time of one op, in seconds (see the module docs). An op the
    /// device cannot run (float work on TPU v1) or a cost that is not a
    /// finite non-negative number takes forever: `f64::INFINITY`, never a
    /// plausible time. [`DeviceSpec::try_op_time_seconds`] says why.
    pub fn op_time_seconds(&self, cost: &OpCost, profile: Option<&Profile>) -> f64 {
        self.try_op_time_seconds(cost, profile).unwrap_or(f64::INFINITY)
    }

    /// Like [`DeviceSpec::op_time_seconds`], with an error naming the device,
    /// the dtype or the bad field instead of infinity.
    pub fn try_op_time_seconds(&self, cost: &OpCost, profile: Option<&Profile>) -> Result<f64, HwError> {
        let eff = self.efficiency(cost.class, profile);
        self.roofline(cost, eff)
    }

    /// Like [`DeviceSpec::op_time_seconds`], but a profile entry for `op_name`
    /// (measured seconds or efficiency) takes precedence over the class.
    pub fn op_time_seconds_named(&self, op_name: &str, cost: &OpCost, profile: Option<&Profile>) -> f64 {
        self.try_op_time_seconds_named(op_name, cost, profile).unwrap_or(f64::INFINITY)
    }

    /// [`DeviceSpec::op_time_seconds_named`] with the reason as an error.
    pub fn try_op_time_seconds_named(
        &self,
        op_name: &str,
        cost: &OpCost,
        profile: Option<&Profile>,
    ) -> Result<f64, HwError> {
        match profile.and_then(|p| p.ops.get(op_name)) {
            Some(OpMeasurement::Seconds(s)) => Ok(*s),
            Some(OpMeasurement::Efficiency(e)) => self.roofline(cost, *e),
            None => self.try_op_time_seconds(cost, profile),
        }
    }

    fn roofline(&self, cost: &OpCost, efficiency: f64) -> Result<f64, HwError> {
        for (field, v) in [("flops", cost.flops), ("bytes", cost.bytes)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(HwError::InvalidParameter {
                    parameter: format!("op cost {field}"),
                    message: format!("must be a finite non-negative number, got {v}"),
                });
            }
        }
        let peak = self.peak_flops(cost.dtype);
        if peak <= 0.0 && cost.flops > 0.0 {
            return Err(HwError::InvalidParameter {
                parameter: format!("dtype {:?}", cost.dtype).to_lowercase(),
                message: format!("device `{}` has no units for it (its peak_tflops lists no such rate)", self.name),
            });
        }
        let compute = if cost.flops == 0.0 { 0.0 } else { cost.flops / (peak * efficiency) };
        let memory = self.memory_seconds(cost.bytes);
        Ok(self.launch_overhead_seconds() + compute.max(memory))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Catalog;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1e-12)
    }

    /// 1 MiB of cache at 100 GB/s over DRAM at 10 GB/s: half a MiB moves
    /// in 5.24288 us, two MiB in 209.7152 us; without the cache's
    /// bandwidth both go at DRAM speed.
    #[test]
    fn ops_that_fit_on_chip_move_their_bytes_at_the_cache_bandwidth() {
        let mut d = Catalog::builtin().device("cpu-x86-core").unwrap().clone();
        d.launch_overhead_us = 0.0;
        d.memory_bandwidth_gb_s = 10.0;
        d.on_chip_mib = Some(1.0);
        let op = |bytes: f64| OpCost { flops: 0.0, bytes, dtype: Dtype::F32, class: OpClass::Elementwise };
        let (half, two) = (512.0 * 1024.0, 2.0 * 1024.0 * 1024.0);
        assert!(close(d.op_time_seconds(&op(half), None), half / 10e9));
        d.on_chip_bandwidth_gb_s = Some(100.0);
        assert!(close(d.op_time_seconds(&op(half), None), 5.24288e-6));
        assert!(close(d.op_time_seconds(&op(1024.0 * 1024.0), None), 1.048576e-5), "exactly full still fits");
        assert!(close(d.op_time_seconds(&op(two), None), 209.7152e-6));
    }

    #[test]
    fn impossible_work_is_an_error_not_a_launch_overhead() {
        let v100 = Catalog::builtin().device("v100").unwrap();
        let ok = OpCost { flops: 1e9, bytes: 1e6, dtype: Dtype::F32, class: OpClass::Matmul };
        for (flops, bytes, field) in [(f64::NAN, 1.0, "flops"), (-1e9, 1.0, "flops"), (1e9, f64::INFINITY, "bytes")] {
            let c = OpCost { flops, bytes, ..ok };
            let e = v100.try_op_time_seconds(&c, None).unwrap_err().to_string();
            assert!(e.contains(&format!("op cost {field}")) && e.contains("finite non-negative"), "{e}");
            assert_eq!(v100.op_time_seconds(&c, None), f64::INFINITY);
        }
        let v1 = Catalog::builtin().device("tpu-v1").unwrap();
        let e = v1.try_op_time_seconds(&ok, None).unwrap_err().to_string();
        assert_eq!(e, "invalid parameter `dtype f32`: device `tpu-v1` has no units for it (its peak_tflops lists no such rate)");
        // Its int8 work is priced; pure data movement needs no units.
        assert!(v1.try_op_time_seconds(&OpCost { dtype: Dtype::Int8, ..ok }, None).unwrap().is_finite());
        assert!(v1.try_op_time_seconds(&OpCost { flops: 0.0, ..ok }, None).unwrap().is_finite());
    }

    #[test]
    fn compute_bound_and_memory_bound_closed_form() {
        let v100 = Catalog::builtin().device("v100").unwrap();
        // 1024^3 GEMM in f32: 2 * 2^30 flops, 3 * 4 MiB bytes: compute bound.
        let c = OpCost { flops: 2.0 * 1024f64.powi(3), bytes: 3.0 * 4.0 * 1024.0 * 1024.0, dtype: Dtype::F32, class: OpClass::Matmul };
        let t = v100.op_time_seconds(&c, None);
        assert!(close(t, 4e-6 + 2.0 * 1024f64.powi(3) / (15.7e12 * 0.8)), "{t}");
        // Elementwise add of 1M f32: 1M flops, 12 MB: memory bound.
        let e = OpCost { flops: 1e6, bytes: 12e6, dtype: Dtype::F32, class: OpClass::Elementwise };
        assert!(close(v100.op_time_seconds(&e, None), 4e-6 + 12e6 / 900e9));
        // f16 uses the tensor-core rate.
        let h = OpCost { dtype: Dtype::F16, ..c };
        assert!(close(v100.op_time_seconds(&h, None), 4e-6 + (2.0 * 1024f64.powi(3) / (125e12 * 0.8)).max(12.0 * 1024.0 * 1024.0 / 900e9)));
    }

    #[test]
    fn profile_overrides_class_and_op() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("prof.yaml");
        std::fs::write(&p, "device: v100\nclasses:\n  matmul: 0.5\nops:\n  Conv2D: { seconds: 0.25 }\n  MatMul: { efficiency: 0.25 }\n").unwrap();
        let prof = Profile::from_file(&p).unwrap();
        let v100 = Catalog::builtin().device("v100").unwrap();
        let c = OpCost { flops: 15.7e12, bytes: 0.0, dtype: Dtype::F32, class: OpClass::Matmul };
        assert!(close(v100.op_time_seconds(&c, Some(&prof)), 4e-6 + 2.0));
        assert!(close(v100.op_time_seconds_named("MatMul", &c, Some(&prof)), 4e-6 + 4.0));
        assert_eq!(v100.op_time_seconds_named("Conv2D", &c, Some(&prof)), 0.25);
        assert!(close(v100.op_time_seconds_named("Relu", &c, Some(&prof)), 4e-6 + 2.0));

        let j = dir.path().join("prof.json");
        std::fs::write(&j, r#"{"classes": {"conv": 0.5}, "ops": {"A": {"seconds": 1.0}}}"#).unwrap();
        let prof = Profile::from_file(&j).unwrap();
        assert_eq!(prof.classes[&OpClass::Conv], 0.5);

        std::fs::write(&p, "classes:\n  matmul: 1.5\n").unwrap();
        let e = Profile::from_file(&p).unwrap_err().to_string();
        assert!(e.ends_with("prof.yaml: classes.matmul: efficiency must be in (0, 1], got 1.5"), "{e}");
        std::fs::write(&p, "classes:\n  gemm: 0.5\n").unwrap();
        let e = Profile::from_file(&p).unwrap_err().to_string();
        assert!(e.contains("prof.yaml") && e.contains("gemm"), "{e}");
    }
}

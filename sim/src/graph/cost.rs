//! Time of one op on one device, first that applies: the profile's time for
//! the node's shape key on this kind of device (plus the device's dispatch
//! overhead), the profile's entry for the op name, the systolic array for
//! GEMM-shaped ops on devices that have one (TPUs), the measured GEMM rate
//! of the nearest shape on devices that have them (the measured host), the
//! roofline.

use super::sim_graph::NodeCost;
use flowlab_hw::systolic::{ArrayConfig, Dataflow, Layer, simulate_layer};
use flowlab_hw::{DeviceSpec, OpCost, Profile};
use std::collections::HashMap;

/// Prices ops on one device spec, caching systolic results per GEMM shape.
pub(crate) struct DeviceCoster<'a> {
    spec: &'a DeviceSpec,
    profile: Option<&'a Profile>,
    array: Option<ArrayConfig>,
    /// Systolic-array seconds per (M, N, K).
    gemm_cache: HashMap<(u64, u64, u64), Option<f64>>,
}

impl<'a> DeviceCoster<'a> {
    pub fn new(spec: &'a DeviceSpec, profile: Option<&'a Profile>) -> DeviceCoster<'a> {
        // TPUs are weight-stationary; an array the hw model rejects falls
        // back to the roofline.
        let array = spec.systolic.as_ref().and_then(|s| {
            let mut c = ArrayConfig::new(s.rows, s.cols, Dataflow::Ws).ok()?;
            c.clock_mhz = s.clock_mhz;
            Some(c)
        });
        DeviceCoster { spec, profile, array, gemm_cache: HashMap::new() }
    }

    /// Seconds for one execution of an op, whether a shape key of the
    /// profile priced it, and its speed while a second device of the host
    /// computes, as a fraction of its speed alone, where the profile
    /// measured it. `key` is the node's [`super::profile_key`] without the
    /// device kind.
    pub fn seconds(&mut self, op: &str, key: &str, c: &NodeCost) -> (f64, bool, Option<f64>) {
        if let Some(p) = self.profile
            && !p.shapes.is_empty()
            && let Some(m) = p.shapes.get(&format!("{} {key}", self.spec.kind.to_ascii_lowercase()))
        {
            let alone = self.spec.launch_overhead_seconds() + m.seconds;
            let share = m.contended_seconds.map(|c| {
                let together = self.spec.launch_overhead_seconds() + c;
                if together > 0.0 { (alone / together).clamp(0.01, 1.0) } else { 1.0 }
            });
            return (alone, true, share);
        }
        (self.unkeyed(op, c), false, None)
    }

    fn unkeyed(&mut self, op: &str, c: &NodeCost) -> f64 {
        let cost = OpCost { flops: c.flops, bytes: c.bytes, dtype: c.dtype, class: c.class };
        if let Some(p) = self.profile
            && p.ops.contains_key(op)
        {
            return self.spec.op_time_seconds_named(op, &cost, Some(p));
        }
        if let (Some(gemm), Some(array)) = (c.gemm, &self.array) {
            let cached = *self.gemm_cache.entry((gemm.m, gemm.n, gemm.k)).or_insert_with(|| {
                let layer = Layer::gemm(op, gemm.m, gemm.n, gemm.k).ok()?;
                let r = simulate_layer(array, &layer).ok()?;
                Some(r.end_to_end_cycles as f64 / (array.clock_mhz * 1e6))
            });
            if let Some(s) = cached {
                return self.spec.launch_overhead_seconds() + s;
            }
        }
        if let Some(g) = c.gemm
            && let Some(s) = self.spec.gemm_seconds(g.m, g.n, g.k, g.transposed, c.bytes)
        {
            return s;
        }
        self.spec.op_time_seconds(&cost, self.profile)
    }
}

//! Time of one op on one device, first that applies: the profile's time for
//! the node's shape key on this kind of device (plus the device's dispatch
//! overhead); the profile's time for the same node at the shapes it was
//! profiled at, scaled by the cost model's ratio between the two shapes
//! (the same graph at another batch); the profile's entry for the op name;
//! the systolic array for GEMM-shaped ops on devices that have one (TPUs),
//! the measured GEMM rate of the nearest shape on devices that have them
//! (the measured host), the roofline.

use super::sim_graph::NodeCost;
use flowlab_engine::Gemm;
use flowlab_hw::systolic::{ArrayConfig, Dataflow, Layer, simulate_layer};
use flowlab_hw::{DeviceSpec, OpCost, Profile};
use std::collections::HashMap;

/// How a node's time was had.
/// Ordered from most to least measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Priced {
    /// The profile measured its shapes.
    Measured,
    /// The profile measured it at other shapes; scaled by the model.
    Scaled,
    /// The model alone (op-name entry, systolic array, GEMM rates, roofline).
    Modelled,
}

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

    /// Seconds for one execution of node `name` (op `op`), how they were
    /// had, and its speed while a second device of the host computes, as a
    /// fraction of its speed alone, where the profile measured it. `key` is
    /// the node's [`super::profile_key`] without the device kind.
    pub fn seconds(&mut self, name: &str, op: &str, key: &str, c: &NodeCost) -> (f64, Priced, Option<f64>) {
        let Some(p) = self.profile.filter(|p| !p.shapes.is_empty()) else {
            return (self.unkeyed(op, c), Priced::Modelled, None);
        };
        let kind = self.spec.kind.to_ascii_lowercase();
        if let Some(m) = p.shapes.get(&format!("{kind} {key}")) {
            return self.measured(m.seconds, m.contended_seconds, Priced::Measured);
        }
        // The same node profiled at other shapes: its measured time times
        // the model's ratio, so only how the cost grows is modelled.
        if let Some(node) = p.nodes.get(name)
            && node.key.starts_with(&format!("{kind} {op} "))
            && let Some(m) = p.shapes.get(&node.key)
        {
            let profiled = NodeCost {
                flops: node.flops,
                bytes: node.bytes,
                gemm: node.gemm.map(|g| Gemm { m: g.m, n: g.n, k: g.k, transposed: (g.transpose_a, g.transpose_b) }),
                ..*c
            };
            let o = self.spec.launch_overhead_seconds();
            let (then, now) = (self.unkeyed(op, &profiled) - o, self.unkeyed(op, c) - o);
            if then > 0.0 && now.is_finite() && now >= 0.0 {
                let ratio = now / then;
                return self.measured(m.seconds * ratio, m.contended_seconds.map(|s| s * ratio), Priced::Scaled);
            }
        }
        (self.unkeyed(op, c), Priced::Modelled, None)
    }

    /// A measured kernel time plus this device's dispatch overhead, and its
    /// speed share beside a second device where that was measured.
    fn measured(&self, seconds: f64, contended: Option<f64>, how: Priced) -> (f64, Priced, Option<f64>) {
        let alone = self.spec.launch_overhead_seconds() + seconds;
        let share = contended.map(|c| {
            let together = self.spec.launch_overhead_seconds() + c;
            if together > 0.0 { (alone / together).clamp(0.01, 1.0) } else { 1.0 }
        });
        (alone, how, share)
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

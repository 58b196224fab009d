//! What a profile measured beyond per-op efficiencies: op times keyed by
//! shape, and the host the engine ran on.
//!
//! `flowlab profile` writes these from real engine runs; the graph-level
//! simulator prices a node by its shape key when the profile has it, and
//! builds the `cpu-host` device and the `in-process` link from the host
//! figures. This crate knows nothing of graphs: a shape key is an opaque
//! string the caller computes the same way when writing and reading (the
//! simulator's `profile_key`: op, device kind, input and output types).

use crate::catalog::{DeviceSpec, GemmRate, LinkSharing, LinkSpec, PeakTflops};
use crate::roofline::OpClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Name of the device built from a host measurement.
pub const HOST_DEVICE: &str = "cpu-host";
/// Name of the link built from a host measurement.
pub const HOST_LINK: &str = "in-process";

/// The measured time of every node with one shape key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeMeasurement {
    pub op: String,
    /// Median kernel time in seconds, as the engine's step statistics record
    /// it (the device's per-op dispatch overhead is added on top).
    pub seconds: f64,
    /// 10th and 90th percentiles of the samples.
    pub p10: f64,
    pub p90: f64,
    /// Samples behind the median (nodes with this key x timed steps).
    pub samples: usize,
    /// Median kernel time while a second device of the host runs the same
    /// step at once (its share of the host's caches and memory bandwidth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contended_seconds: Option<f64>,
}

/// One node of the profiled step: its shape key and the cost its op family
/// declares at those shapes. A simulation of the same graph at other shapes
/// (another batch) prices the node from its measured time here, scaled by
/// the cost model's ratio between the two shapes, instead of by the model
/// alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfiledNode {
    /// The node's key in [`Profile::shapes`](crate::Profile::shapes).
    pub key: String,
    pub flops: f64,
    pub bytes: f64,
    /// The node's arithmetic as one product `[m, k] x [k, n]`, where it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm: Option<ProfiledGemm>,
}

/// A product's dimensions and which operands are read transposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfiledGemm {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    #[serde(default)]
    pub transpose_a: bool,
    #[serde(default)]
    pub transpose_b: bool,
}

/// Figures of the host the profile was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostMeasurement {
    /// Worker threads per device the profiled steps used.
    pub threads: usize,
    /// f32 GEMM rate of the engine's matmul kernel (10^9 flop/s), by thread
    /// count (a 512 x 512 x 512 product, median of repeats).
    pub gemm_gflops: BTreeMap<usize, f64>,
    /// Copy bandwidth of one thread, read plus written bytes (10^9 bytes/s),
    /// over a buffer larger than the caches.
    pub memory_bandwidth_gb_s: f64,
    /// An in-process Send/Recv of a 4-byte tensor, end to end.
    pub transfer_latency_us: f64,
    /// In-process Send/Recv of a large tensor, bytes over the time beyond
    /// the latency.
    pub transfer_bandwidth_gb_s: f64,
    /// A 4-byte transfer over an emulated link of zero latency, end to end:
    /// what the engine's link emulation (a delivery thread that sleeps until
    /// each tensor's time, then wakes the receiver) adds to every emulated
    /// transfer beyond its latency and serialization.
    #[serde(default)]
    pub emulated_overhead_us: f64,
    /// What a Send and a Recv kernel cost the device that runs them, per
    /// wire format (`f32`, `f16`, `bf16`, `int8`): a fixed part and a part
    /// per f32 element (encoding on the sender, decoding on the receiver).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub transfer_compute: BTreeMap<String, TransferCompute>,
    /// The executor's time per op outside kernels: a step's wall time minus
    /// its nodes' kernel times, over the nodes run.
    pub dispatch_us: f64,
    /// Physical memory of the host (10^9 bytes).
    pub memory_gb: f64,
    /// The engine's GEMM rate at `threads` threads over a grid of shapes
    /// (m, n, k each 32, 256 and 2048): GEMM speed depends on shape, and
    /// the roofline takes the nearest measured one (`DeviceSpec::gemm_rates`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gemm_shapes: Vec<GemmRate>,
    /// Speed of a one-thread GEMM while `k` of them run at once on their
    /// own threads (as k one-thread devices do), as a fraction of its
    /// speed alone, for k = 1..=cores: the cores' shared caches, memory
    /// and power budget make this less than 1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub concurrent_share: BTreeMap<usize, f64>,
    /// The engine's rate on its many-flop element kernels, in flops as the
    /// ops' cost functions count them (10^9 per s; the median of layer
    /// norm and softmax over cache-sized rows): row statistics, exps and
    /// divisions run far below the GEMM rate, so such ops are bound by
    /// this rather than by memory. 0 where not measured (older files).
    #[serde(default)]
    pub elementwise_gflops: f64,
    /// The bandwidth the engine's Add kernel reaches on operands in cache
    /// (inputs plus output over the kernel's time, 1 MiB each), and that
    /// footprint (3 MiB): ops moving no more bytes than it run at this
    /// rate, 1.5-4x the DRAM copy rate (the cache-aware roofline). 0 where
    /// not measured.
    #[serde(default)]
    pub cache_mib: f64,
    #[serde(default)]
    pub cache_bandwidth_gb_s: f64,
}

/// The device time of one Send and one Recv of `n` f32 elements:
/// `send_us + n * send_ns_per_element / 1000`, likewise for the Recv.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferCompute {
    pub send_us: f64,
    pub send_ns_per_element: f64,
    pub recv_us: f64,
    pub recv_ns_per_element: f64,
}

impl HostMeasurement {
    /// Speed of one device's kernels while `k` devices compute at once, for
    /// k = 1..=devices, as a fraction of its speed alone: the measured
    /// concurrent share of one-thread GEMMs (beyond the k measured, the
    /// cores are split over the devices). Empty (no slowdown modelled) for
    /// devices of several threads, or without the measurement.
    pub fn host_contention(&self, devices: usize) -> Vec<f64> {
        if self.threads != 1 || !self.concurrent_share.values().all(|s| s.is_finite() && *s > 0.0) {
            return Vec::new();
        }
        let Some((&most, &share_most)) = self.concurrent_share.iter().next_back() else {
            return Vec::new();
        };
        (1..=devices.max(1))
            .map(|k| match self.concurrent_share.get(&k) {
                Some(s) => s.min(1.0),
                None if k > most => (share_most * most as f64 / k as f64).min(1.0),
                None => 1.0,
            })
            .collect()
    }

    /// The `cpu-host` device: the measured GEMM rate at the profiled thread
    /// count as f32 peak (so GEMMs and convolutions, which the engine runs
    /// as GEMMs, have efficiency 1), the measured bandwidth, the measured
    /// dispatch time as launch overhead.
    pub fn device_spec(&self) -> DeviceSpec {
        let gflops = self.gemm_gflops.get(&self.threads).or_else(|| self.gemm_gflops.values().next_back()).copied().unwrap_or(1.0);
        let mut efficiency = BTreeMap::new();
        efficiency.insert(OpClass::Matmul, 1.0);
        efficiency.insert(OpClass::Conv, 1.0);
        if self.elementwise_gflops > 0.0 && gflops > 0.0 {
            efficiency.insert(OpClass::Elementwise, (self.elementwise_gflops / gflops).min(1.0));
        }
        DeviceSpec {
            name: HOST_DEVICE.into(),
            kind: "cpu".into(),
            peak_tflops: PeakTflops { f32: Some(gflops * 1e-3), ..Default::default() },
            memory_bandwidth_gb_s: self.memory_bandwidth_gb_s,
            memory_gb: self.memory_gb,
            launch_overhead_us: self.dispatch_us,
            // The device's own thread runs its Sends and Recvs.
            copy_engines: 0,
            on_chip_mib: (self.cache_mib > 0.0 && self.cache_bandwidth_gb_s > 0.0).then_some(self.cache_mib),
            on_chip_bandwidth_gb_s: (self.cache_mib > 0.0 && self.cache_bandwidth_gb_s > 0.0).then_some(self.cache_bandwidth_gb_s),
            systolic: None,
            efficiency,
            gemm_rates: self.gemm_shapes.clone(),
        }
    }

    /// The `in-process` link between two devices of one engine process.
    pub fn link_spec(&self) -> LinkSpec {
        LinkSpec { name: HOST_LINK.into(), bandwidth_gb_s: self.transfer_bandwidth_gb_s, latency_us: self.transfer_latency_us, sharing: LinkSharing::Pair }
    }

    /// The first value that is not a finite positive number, as (key, value).
    pub(crate) fn invalid(&self) -> Option<(String, f64)> {
        let mut fields = vec![
            ("memory_bandwidth_gb_s".to_string(), self.memory_bandwidth_gb_s),
            ("transfer_bandwidth_gb_s".to_string(), self.transfer_bandwidth_gb_s),
            ("memory_gb".to_string(), self.memory_gb),
        ];
        for (t, g) in &self.gemm_gflops {
            fields.push((format!("gemm_gflops.{t}"), *g));
        }
        for (k, s) in &self.concurrent_share {
            fields.push((format!("concurrent_share.{k}"), *s));
        }
        for (i, r) in self.gemm_shapes.iter().enumerate() {
            fields.push((format!("gemm_shapes[{i}].gflops"), r.gflops));
        }
        for (k, v) in [("elementwise_gflops", self.elementwise_gflops), ("cache_mib", self.cache_mib), ("cache_bandwidth_gb_s", self.cache_bandwidth_gb_s)] {
            if !(v.is_finite() && v >= 0.0) {
                return Some((k.into(), v));
            }
        }
        for (f, c) in &self.transfer_compute {
            for (k, v) in [("send_us", c.send_us), ("send_ns_per_element", c.send_ns_per_element), ("recv_us", c.recv_us), ("recv_ns_per_element", c.recv_ns_per_element)] {
                if !(v.is_finite() && v >= 0.0) {
                    return Some((format!("transfer_compute.{f}.{k}"), v));
                }
            }
        }
        if let Some(bad) = fields.into_iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
            return Some(bad);
        }
        [("transfer_latency_us", self.transfer_latency_us), ("emulated_overhead_us", self.emulated_overhead_us), ("dispatch_us", self.dispatch_us)]
            .into_iter()
            .find(|(_, v)| !(v.is_finite() && *v >= 0.0))
            .map(|(k, v)| (k.to_string(), v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Profile;

    fn host() -> HostMeasurement {
        HostMeasurement {
            threads: 2,
            gemm_gflops: BTreeMap::from([(1, 150.0), (2, 280.0)]),
            memory_bandwidth_gb_s: 12.5,
            transfer_latency_us: 25.0,
            transfer_bandwidth_gb_s: 400.0,
            emulated_overhead_us: 30.0,
            transfer_compute: BTreeMap::new(),
            dispatch_us: 0.4,
            memory_gb: 24.0,
            gemm_shapes: Vec::new(),
            concurrent_share: BTreeMap::new(),
            elementwise_gflops: 0.0,
            cache_mib: 0.0,
            cache_bandwidth_gb_s: 0.0,
        }
    }

    #[test]
    fn a_measured_profile_round_trips_and_builds_the_host_device() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        let mut p = Profile { model: Some("mlp".into()), batch: Some(8), session_devices: Some(2), host: Some(host()), ..Default::default() };
        p.shapes.insert("cpu Neg f32[4] -> f32[4]".into(), ShapeMeasurement { op: "Neg".into(), seconds: 1e-6, p10: 9e-7, p90: 2e-6, samples: 20, contended_seconds: Some(1.5e-6) });
        p.write_json(&path).unwrap();
        assert_eq!(Profile::from_file(&path).unwrap(), p);
        let d = host().device_spec();
        // 280 GFLOP/s at the profiled 2 threads = 0.28 TFLOP/s, reached by GEMMs.
        assert_eq!((d.name.as_str(), d.kind.as_str(), d.peak_tflops.f32), (HOST_DEVICE, "cpu", Some(0.28)));
        assert_eq!(d.efficiency(OpClass::Matmul, None), 1.0);
        assert_eq!((d.memory_bandwidth_gb_s, d.launch_overhead_us, d.memory_gb), (12.5, 0.4, 24.0));
        // Not measured: elementwise ops get the class default (memory-bound).
        assert_eq!(d.efficiency(OpClass::Elementwise, None), OpClass::Elementwise.default_efficiency());
        // Measured at 7 GFLOP/s against 280 for GEMMs: 1/40 of the peak.
        let e = HostMeasurement { elementwise_gflops: 7.0, ..host() }.device_spec();
        assert_eq!(e.efficiency(OpClass::Elementwise, None), 0.025);
        // A measured cache bandwidth becomes the on-chip level of the roofline.
        assert_eq!((d.on_chip_mib, d.on_chip_bandwidth_gb_s), (None, None));
        let c = HostMeasurement { cache_mib: 3.0, cache_bandwidth_gb_s: 35.0, ..host() }.device_spec();
        assert_eq!((c.on_chip_mib, c.on_chip_bandwidth_gb_s), (Some(3.0), Some(35.0)));
        let l = host().link_spec();
        assert_eq!((l.name.as_str(), l.bandwidth_gb_s, l.latency_us), (HOST_LINK, 400.0, 25.0));
    }

    #[test]
    fn devices_sharing_the_host_get_the_measured_concurrent_share() {
        // Two one-thread GEMMs at once each run at 0.9 of alone; beyond the
        // two cores measured, their 2 x 0.9 is split: 0.6 each at 3, 0.45 at 4.
        let shared = HostMeasurement { threads: 1, concurrent_share: BTreeMap::from([(1, 1.0), (2, 0.9)]), ..host() };
        let c = shared.host_contention(4);
        let want = [1.0, 0.9, 0.6, 0.45];
        assert_eq!(c.len(), 4);
        for (got, want) in c.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{c:?}");
        }
        // Devices of two threads, or no measurement: no slowdown modelled.
        assert!(HostMeasurement { threads: 2, ..shared.clone() }.host_contention(2).is_empty());
        assert!(host().host_contention(2).is_empty());
    }

    #[test]
    fn bad_measurements_are_refused_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        let mut p = Profile { host: Some(HostMeasurement { transfer_bandwidth_gb_s: 0.0, ..host() }), ..Default::default() };
        p.write_json(&path).unwrap();
        let e = Profile::from_file(&path).unwrap_err().to_string();
        assert!(e.ends_with("p.json: host.transfer_bandwidth_gb_s: must be a finite positive number, got 0"), "{e}");
        p.host = Some(host());
        p.shapes.insert("cpu Neg".into(), ShapeMeasurement { op: "Neg".into(), seconds: -1.0, p10: 0.0, p90: 0.0, samples: 1, contended_seconds: None });
        p.write_json(&path).unwrap();
        let e = Profile::from_file(&path).unwrap_err().to_string();
        assert!(e.ends_with("p.json: shapes.\"cpu Neg\".seconds: must be zero or positive, got -1"), "{e}");
    }
}

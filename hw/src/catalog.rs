//! The device and link catalog: a YAML file shipped in `hw/catalog/` (compiled
//! into the binary) or a user file of the same schema. Everything the
//! simulator knows about a chip or a wire comes from here.

use crate::error::similar_names;
use crate::roofline::{Dtype, OpClass};
use crate::HwError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const BUILTIN_YAML: &str = include_str!("../catalog/catalog.yaml");
const BUILTIN_PATH: &str = "<builtin>/hw/catalog/catalog.yaml";

/// Peak throughput per data type, in 10^12 operations per second.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeakTflops {
    pub f32: Option<f64>,
    pub tf32: Option<f64>,
    pub f16: Option<f64>,
    pub bf16: Option<f64>,
    pub int8: Option<f64>,
}

/// The systolic array inside a TPU-like device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystolicSpec {
    pub rows: u32,
    pub cols: u32,
    pub clock_mhz: f64,
}

/// One device as the catalog describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    pub name: String,
    /// `cpu`, `gpu` or `tpu`.
    pub kind: String,
    pub peak_tflops: PeakTflops,
    pub memory_bandwidth_gb_s: f64,
    pub memory_gb: f64,
    pub launch_overhead_us: f64,
    pub copy_engines: u32,
    #[serde(default)]
    pub on_chip_mib: Option<f64>,
    /// Bandwidth of that on-chip memory (a CPU's last-level cache), read
    /// plus written bytes: an op whose inputs and outputs fit in
    /// `on_chip_mib` moves them at this rate instead of the DRAM's (the
    /// cache-aware roofline of Ilic, Pratas and Sousa, 2014). Measured on
    /// the host; absent from the catalog's devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_chip_bandwidth_gb_s: Option<f64>,
    #[serde(default)]
    pub systolic: Option<SystolicSpec>,
    /// Per-op-class efficiency overrides (fraction of peak).
    #[serde(default)]
    pub efficiency: BTreeMap<OpClass, f64>,
    /// Measured GEMM rates by shape, for a device whose GEMM speed depends
    /// on shape (the measured host: a product with a dimension of 32 runs
    /// at a fraction of a 512-cube's rate). A GEMM-shaped op (MatMul,
    /// convolutions and their gradients) takes the rate of the nearest
    /// measured shape instead of peak x efficiency.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gemm_rates: Vec<GemmRate>,
}

/// A measured GEMM rate: C[m, n] = op(A) op(B) at `gflops` (10^9 flop/s),
/// op(A) [m, k] and op(B) [k, n], where op transposes the operand stored
/// the other way round. Gradients multiply by transposes (dW = X^T dY, dX =
/// dY W^T), and a kernel packs a transposed operand at another speed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmRate {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    /// A is stored [k, m] (absent in older files: false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transpose_a: bool,
    /// B is stored [n, k].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transpose_b: bool,
    pub gflops: f64,
}

impl GemmRate {
    /// A rate for the untransposed product.
    pub fn plain(m: u64, n: u64, k: u64, gflops: f64) -> GemmRate {
        GemmRate { m, n, k, transpose_a: false, transpose_b: false, gflops }
    }
}

impl DeviceSpec {
    /// Seconds of a GEMM-shaped op from the measured rates: the rate of the
    /// shape nearest on a log scale (sum of squared log2 ratios of m, n and
    /// k) among those measured with the same transposes (all of them where
    /// none were), the roofline's memory bound on `bytes` if slower, plus
    /// the launch overhead. `None` without measured rates.
    pub fn gemm_seconds(&self, m: u64, n: u64, k: u64, transposed: (bool, bool), bytes: f64) -> Option<f64> {
        let l = |x: u64| (x.max(1) as f64).log2();
        let d2 = |r: &GemmRate| (l(r.m) - l(m)).powi(2) + (l(r.n) - l(n)).powi(2) + (l(r.k) - l(k)).powi(2);
        let usable = |r: &&GemmRate| r.gflops.is_finite() && r.gflops > 0.0;
        let same_layout = |r: &&GemmRate| (r.transpose_a, r.transpose_b) == transposed;
        let layout_measured = self.gemm_rates.iter().filter(usable).any(|r| same_layout(&r));
        let best = self
            .gemm_rates
            .iter()
            .filter(usable)
            .filter(|r| !layout_measured || same_layout(r))
            .min_by(|a, b| d2(a).total_cmp(&d2(b)))?;
        let compute = 2.0 * m as f64 * n as f64 * k as f64 / (best.gflops * 1e9);
        let memory = if self.memory_bandwidth_gb_s > 0.0 { bytes / (self.memory_bandwidth_gb_s * 1e9) } else { 0.0 };
        Some(self.launch_overhead_us * 1e-6 + compute.max(memory))
    }
}

/// One link: bandwidth per direction and a fixed per-message latency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub name: String,
    pub bandwidth_gb_s: f64,
    pub latency_us: f64,
    /// What the bandwidth belongs to (default `pair`).
    #[serde(default)]
    pub sharing: LinkSharing,
}

/// Who shares a link's bandwidth, as the hardware wires it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkSharing {
    /// Each ordered pair of devices has the bandwidth to itself; transfers
    /// of one pair and direction queue one behind the other (point-to-point
    /// wires; the engine's emulated links).
    #[default]
    Pair,
    /// Each device has one port of this bandwidth per direction (its PCIe
    /// slot, its NVLinks into an NVSwitch, its NIC): everything it sends
    /// shares the port out, everything it receives the port in, fairly
    /// (max-min) among the transfers active at once.
    Port,
}

impl LinkSpec {
    pub fn bytes_per_second(&self) -> f64 {
        self.bandwidth_gb_s * 1e9
    }
    pub fn latency_seconds(&self) -> f64 {
        self.latency_us * 1e-6
    }
    /// Time to send `bytes` over an idle link: latency + bytes / bandwidth.
    pub fn transfer_seconds(&self, bytes: f64) -> f64 {
        self.latency_seconds() + bytes / self.bytes_per_second()
    }
}

impl DeviceSpec {
    /// Peak operations per second for `dtype`. A dtype without dedicated units
    /// runs at the f32 rate, or at the slowest listed rate of its kind if f32
    /// is absent: float work never borrows integer units, so a device that
    /// lists only int8 (TPU v1) has 0 for every float dtype (see
    /// [`DeviceSpec::has_units_for`]).
    pub fn peak_flops(&self, dtype: Dtype) -> f64 {
        let p = &self.peak_tflops;
        let own = match dtype {
            Dtype::F32 => p.f32,
            Dtype::Tf32 => p.tf32,
            Dtype::F16 => p.f16,
            Dtype::Bf16 => p.bf16,
            Dtype::Int8 => p.int8,
        };
        let floats = [p.f32, p.tf32, p.f16, p.bf16].into_iter().flatten();
        let slowest_float = floats.clone().fold(f64::INFINITY, f64::min);
        // Int8 work may run on float units too (GPUs without int8 rates).
        let fallback = p.f32.or(slowest_float.is_finite().then_some(slowest_float));
        own.or(fallback).unwrap_or(0.0) * 1e12
    }

    /// Whether the device can run `dtype` work at all (TPU v1 runs no float).
    pub fn has_units_for(&self, dtype: Dtype) -> bool {
        self.peak_flops(dtype) > 0.0
    }
    pub fn memory_bytes_per_second(&self) -> f64 {
        self.memory_bandwidth_gb_s * 1e9
    }
    /// Seconds to move `bytes` (an op's inputs and outputs): from on-chip
    /// memory where they fit and its bandwidth is known, else from DRAM.
    pub fn memory_seconds(&self, bytes: f64) -> f64 {
        match (self.on_chip_mib, self.on_chip_bandwidth_gb_s) {
            (Some(mib), Some(bw)) if bw > 0.0 && bytes <= mib * (1 << 20) as f64 => bytes / (bw * 1e9),
            _ => bytes / self.memory_bytes_per_second(),
        }
    }
    pub fn memory_bytes(&self) -> f64 {
        self.memory_gb * 1e9
    }
    pub fn launch_overhead_seconds(&self) -> f64 {
        self.launch_overhead_us * 1e-6
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    pub devices: Vec<DeviceSpec>,
    pub links: Vec<LinkSpec>,
    /// Machines whose devices are wired pair by pair (see [`FabricSpec`]).
    #[serde(default)]
    pub fabrics: Vec<FabricSpec>,
}

/// A machine whose devices are joined by point-to-point bricks, a number
/// per pair, rather than by one kind of link everywhere (DGX-1's hybrid
/// cube mesh of NVLinks). Pairs without a brick use `otherwise`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricSpec {
    pub name: String,
    /// Bandwidth per direction of one brick, GB/s.
    pub brick_gb_s: f64,
    pub latency_us: f64,
    /// `bricks[i][j]`: bricks between devices i and j (symmetric, zero
    /// diagonal); its size is the number of devices the fabric joins.
    pub bricks: Vec<Vec<u32>>,
    /// The catalog link of pairs with no brick.
    pub otherwise: String,
}

impl FabricSpec {
    pub fn devices(&self) -> usize {
        self.bricks.len()
    }

    /// The link from device `src` to `dst`: their bricks together, to
    /// themselves (a brick is a wire between the two), or `None` where
    /// they have none.
    pub fn pair_link(&self, src: usize, dst: usize) -> Option<LinkSpec> {
        let n = *self.bricks.get(src)?.get(dst)?;
        (n > 0).then(|| LinkSpec {
            name: format!("{}-x{n}", self.name),
            bandwidth_gb_s: f64::from(n) * self.brick_gb_s,
            latency_us: self.latency_us,
            sharing: LinkSharing::Pair,
        })
    }
}

impl Catalog {
    /// The catalog shipped with flowlab (`hw/catalog/catalog.yaml`).
    pub fn builtin() -> &'static Catalog {
        static BUILTIN: OnceLock<Catalog> = OnceLock::new();
        BUILTIN.get_or_init(|| match Catalog::from_yaml_str(BUILTIN_YAML, Path::new(BUILTIN_PATH)) {
            Ok(c) => c,
            // The embedded file is checked by a unit test; reaching this is a build defect.
            Err(e) => panic!("built-in hardware catalog is invalid: {e}"),
        })
    }

    /// Loads a catalog from a user YAML file; errors name the file, line and key.
    pub fn from_yaml_file(path: impl AsRef<Path>) -> Result<Catalog, HwError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| HwError::Io { path: path.into(), error })?;
        Catalog::from_yaml_str(&text, path)
    }

    /// Parses catalog YAML; `path` is only used in error messages.
    pub fn from_yaml_str(text: &str, path: &Path) -> Result<Catalog, HwError> {
        let catalog: Catalog = serde_saphyr::from_str(text)
            .map_err(|e| HwError::Yaml { path: path.to_path_buf(), message: e.to_string() })?;
        catalog.validate(path)?;
        Ok(catalog)
    }

    fn validate(&self, path: &Path) -> Result<(), HwError> {
        let bad = |key: String, message: String| HwError::InvalidValue { path: PathBuf::from(path), key, message };
        let positive = |key: String, v: f64| {
            if v.is_finite() && v > 0.0 { Ok(()) } else { Err(bad(key, format!("must be a positive number, got {v}"))) }
        };
        let mut seen = std::collections::BTreeSet::new();
        for d in &self.devices {
            let k = |f: &str| format!("devices[{}].{f}", d.name);
            if !seen.insert(d.name.as_str()) {
                return Err(bad(k("name"), "duplicate device name".into()));
            }
            let p = &d.peak_tflops;
            let rates = [("f32", p.f32), ("tf32", p.tf32), ("f16", p.f16), ("bf16", p.bf16), ("int8", p.int8)];
            if rates.iter().all(|(_, r)| r.is_none()) {
                return Err(bad(k("peak_tflops"), "lists no data type".into()));
            }
            for (n, r) in rates {
                if let Some(r) = r {
                    positive(k(&format!("peak_tflops.{n}")), r)?;
                }
            }
            positive(k("memory_bandwidth_gb_s"), d.memory_bandwidth_gb_s)?;
            positive(k("memory_gb"), d.memory_gb)?;
            if !(d.launch_overhead_us.is_finite() && d.launch_overhead_us >= 0.0) {
                return Err(bad(k("launch_overhead_us"), "must be zero or positive".into()));
            }
            for (class, e) in &d.efficiency {
                if !(e.is_finite() && *e > 0.0 && *e <= 1.0) {
                    return Err(bad(k(&format!("efficiency.{class}")), format!("must be in (0, 1], got {e}")));
                }
            }
        }
        seen.clear();
        for l in &self.links {
            if !seen.insert(l.name.as_str()) {
                return Err(bad(format!("links[{}].name", l.name), "duplicate link name".into()));
            }
            positive(format!("links[{}].bandwidth_gb_s", l.name), l.bandwidth_gb_s)?;
            if !(l.latency_us.is_finite() && l.latency_us >= 0.0) {
                return Err(bad(format!("links[{}].latency_us", l.name), "must be zero or positive".into()));
            }
        }
        for f in &self.fabrics {
            let k = |field: &str| format!("fabrics[{}].{field}", f.name);
            if !seen.insert(f.name.as_str()) {
                return Err(bad(k("name"), "a link or fabric already has this name".into()));
            }
            positive(k("brick_gb_s"), f.brick_gb_s)?;
            if !(f.latency_us.is_finite() && f.latency_us >= 0.0) {
                return Err(bad(k("latency_us"), "must be zero or positive".into()));
            }
            let n = f.bricks.len();
            if n < 2 {
                return Err(bad(k("bricks"), format!("needs a row per device, at least 2; got {n}")));
            }
            for (i, row) in f.bricks.iter().enumerate() {
                if row.len() != n {
                    return Err(bad(format!("{}[{i}]", k("bricks")), format!("has {} entries for {n} devices", row.len())));
                }
                for (j, &b) in row.iter().enumerate() {
                    if i == j && b != 0 {
                        return Err(bad(format!("{}[{i}][{j}]", k("bricks")), "a device has no bricks to itself".into()));
                    }
                    if f.bricks[j][i] != b {
                        return Err(bad(format!("{}[{i}][{j}]", k("bricks")), format!("{b} bricks one way, {} the other", f.bricks[j][i])));
                    }
                }
            }
            if self.link(&f.otherwise).is_err() {
                return Err(bad(k("otherwise"), format!("no catalog link `{}`", f.otherwise)));
            }
        }
        Ok(())
    }

    /// The device called `name` (case-insensitive).
    pub fn device(&self, name: &str) -> Result<&DeviceSpec, HwError> {
        self.devices.iter().find(|d| d.name.eq_ignore_ascii_case(name)).ok_or_else(|| HwError::UnknownName {
            kind: "device",
            name: name.into(),
            similar: similar_names(name, self.devices.iter().map(|d| d.name.as_str())),
        })
    }

    /// The fabric called `name` (case-insensitive).
    pub fn fabric(&self, name: &str) -> Result<&FabricSpec, HwError> {
        self.fabrics.iter().find(|f| f.name.eq_ignore_ascii_case(name)).ok_or_else(|| HwError::UnknownName {
            kind: "fabric",
            name: name.into(),
            similar: similar_names(name, self.fabrics.iter().map(|f| f.name.as_str())),
        })
    }

    /// The link called `name` (case-insensitive).
    pub fn link(&self, name: &str) -> Result<&LinkSpec, HwError> {
        self.links.iter().find(|l| l.name.eq_ignore_ascii_case(name)).ok_or_else(|| HwError::UnknownName {
            kind: "link",
            name: name.into(),
            similar: similar_names(name, self.links.iter().map(|l| l.name.as_str())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gemm_takes_the_rate_of_the_nearest_measured_shape() {
        let mut d = Catalog::builtin().device("cpu-x86-core").unwrap().clone();
        const NN: (bool, bool) = (false, false);
        assert_eq!(d.gemm_seconds(32, 32, 32, NN, 0.0), None, "no measured rates: the roofline decides");
        d.launch_overhead_us = 1.0;
        d.memory_bandwidth_gb_s = 10.0;
        d.gemm_rates = vec![
            GemmRate::plain(32, 32, 32, 10.0),
            GemmRate::plain(32, 2048, 2048, 50.0),
            GemmRate::plain(2048, 2048, 2048, 200.0),
        ];
        // 30 x 40 x 30 is nearest the 32-cube: 72,000 flop at 10 GFLOP/s = 7.2 us, + 1 us launch.
        let s = d.gemm_seconds(30, 40, 30, NN, 0.0).unwrap();
        assert!((s - 8.2e-6).abs() < 1e-12, "{s}");
        // A skinny product (m = 32) takes the skinny rate, not the cube's.
        let s = d.gemm_seconds(32, 3136, 1024, NN, 0.0).unwrap();
        assert!((s - (1e-6 + 2.0 * 32.0 * 3136.0 * 1024.0 / 50e9)).abs() < 1e-12, "{s}");
        // Memory-bound: 1 MB at 10 GB/s = 100 us beats 7.2 us of compute.
        let s = d.gemm_seconds(30, 40, 30, NN, 1e6).unwrap();
        assert!((s - 101e-6).abs() < 1e-12, "{s}");
        // No rate measured with A transposed: the untransposed ones stand in.
        assert_eq!(d.gemm_seconds(30, 40, 30, (true, false), 0.0), Some(8.2e-6));
        // Once one is, A^T B takes it even where an untransposed shape is nearer:
        // 72,000 flop at 5 GFLOP/s = 14.4 us, + 1 us.
        d.gemm_rates.push(GemmRate { transpose_a: true, ..GemmRate::plain(2048, 2048, 2048, 5.0) });
        let s = d.gemm_seconds(30, 40, 30, (true, false), 0.0).unwrap();
        assert!((s - 15.4e-6).abs() < 1e-12, "{s}");
        assert_eq!(d.gemm_seconds(30, 40, 30, NN, 0.0), Some(8.2e-6));
    }

    /// The DGX-1 matrix against what NVIDIA publishes about the machine:
    /// six NVLink bricks per V100 (datasheet), two fully connected quads
    /// joined GPU to GPU (the hybrid cube mesh of the DGX-1 whitepaper), and
    /// NCCL's topology dump of one (GPU 0's peers on 1, 1, 2, 2 bricks).
    #[test]
    fn dgx1_is_a_hybrid_cube_mesh_of_six_bricks_per_gpu() {
        let f = Catalog::builtin().fabric("DGX1").unwrap();
        assert_eq!(f.devices(), 8);
        for (i, row) in f.bricks.iter().enumerate() {
            assert_eq!(row.iter().sum::<u32>(), 6, "GPU {i}: {row:?}");
            let quad = |j: usize| j / 4 == i / 4;
            for (j, &b) in row.iter().enumerate() {
                let wired = b > 0;
                let expected = i != j && (quad(j) || j == (i + 4) % 8);
                assert_eq!(wired, expected, "GPU {i} to {j}: {b} bricks");
            }
            let mut peers: Vec<u32> = row.iter().copied().filter(|&b| b > 0).collect();
            peers.sort_unstable();
            assert_eq!(peers, [1, 1, 2, 2], "GPU {i}");
        }
        let two = f.pair_link(0, 1).unwrap();
        assert_eq!((two.bandwidth_gb_s, two.sharing), (50.0, LinkSharing::Pair));
        assert_eq!(f.pair_link(0, 2).unwrap().bandwidth_gb_s, 25.0);
        assert_eq!(f.pair_link(0, 5), None);
        assert_eq!(f.pair_link(0, 8), None);
        assert_eq!(Catalog::builtin().link(&f.otherwise).unwrap().name, "pcie3-x16");
    }

    #[test]
    fn a_bad_fabric_is_refused_naming_the_entry() {
        let text = |bricks: &str, otherwise: &str| {
            format!(
                "devices: []\nlinks:\n  - {{ name: pcie, bandwidth_gb_s: 16, latency_us: 1 }}\nfabrics:\n  - {{ name: m, brick_gb_s: 25, latency_us: 1, otherwise: {otherwise}, bricks: {bricks} }}\n"
            )
        };
        let err = |t: String| Catalog::from_yaml_str(&t, Path::new("c.yaml")).unwrap_err().to_string();
        assert!(Catalog::from_yaml_str(&text("[[0, 1], [1, 0]]", "pcie"), Path::new("c.yaml")).is_ok());
        assert_eq!(err(text("[[0, 1], [2, 0]]", "pcie")), "c.yaml: fabrics[m].bricks[0][1]: 1 bricks one way, 2 the other");
        assert_eq!(err(text("[[1, 1], [1, 0]]", "pcie")), "c.yaml: fabrics[m].bricks[0][0]: a device has no bricks to itself");
        assert_eq!(err(text("[[0, 1], [1]]", "pcie")), "c.yaml: fabrics[m].bricks[1]: has 1 entries for 2 devices");
        assert_eq!(err(text("[[0, 1], [1, 0]]", "nvlink")), "c.yaml: fabrics[m].otherwise: no catalog link `nvlink`");
        assert!(err(text("[[0, 1], [1, 0]]", "pcie").replace("name: m", "name: pcie")).contains("fabrics[pcie].name"));
    }

    #[test]
    fn builtin_has_every_required_entry() {
        let c = Catalog::builtin();
        for d in ["cpu-x86-core", "k40", "p100", "v100", "a100", "h100", "h200", "tpu-v1", "tpu-v2", "tpu-v3", "tpu-v4"] {
            c.device(d).unwrap();
        }
        for l in [
            "pcie3-x16", "pcie4-x16", "pcie5-x16", "nvlink2", "nvlink3", "nvlink4", "ethernet-1g", "ethernet-10g",
            "ethernet-25g", "ethernet-100g", "ethernet-400g", "infiniband-hdr", "infiniband-ndr", "tpu-ici-v4",
        ] {
            c.link(l).unwrap();
        }
        let tpu = c.device("TPU-V1").unwrap();
        // 256 x 256 MACs x 2 ops x 700 MHz.
        assert!((tpu.peak_flops(Dtype::Int8) - 256.0 * 256.0 * 2.0 * 700e6).abs() / 9.2e13 < 1e-3);
        assert_eq!(tpu.systolic.as_ref().unwrap().rows, 256);
        let l = c.link("ethernet-10g").unwrap();
        assert_eq!(l.bytes_per_second(), 1.25e9);
        assert!((l.latency_seconds() - 20e-6).abs() < 1e-15);
        assert!((l.transfer_seconds(1.25e9) - (1.0 + 20e-6)).abs() < 1e-12);
    }

    #[test]
    fn dtype_fallback_rules() {
        let c = Catalog::builtin();
        let k40 = c.device("k40").unwrap();
        assert_eq!(k40.peak_flops(Dtype::Bf16), k40.peak_flops(Dtype::F32));
        let v2 = c.device("tpu-v2").unwrap();
        assert_eq!(v2.peak_flops(Dtype::F32), 45.9e12);
        // TPU v1 has 8-bit integer MACs only (Jouppi et al., ISCA 2017): no
        // float rate at all, rather than its int8 rate.
        let v1 = c.device("tpu-v1").unwrap();
        assert_eq!(v1.peak_flops(Dtype::F32), 0.0);
        assert!(!v1.has_units_for(Dtype::Bf16) && v1.has_units_for(Dtype::Int8));
        // The HBM figure cited in the catalog (Google Cloud's TPU v2 page).
        assert_eq!(v2.memory_bytes_per_second(), 600e9);
    }

    #[test]
    fn unknown_names_list_similar_ones() {
        let e = Catalog::builtin().device("v10").unwrap_err().to_string();
        assert_eq!(e, "unknown device `v10`; similar names: v100");
        let e = Catalog::builtin().link("nvlink9").unwrap_err().to_string();
        assert!(e.starts_with("unknown link `nvlink9`; similar names: nvlink2, nvlink3, nvlink4"), "{e}");
    }

    #[test]
    fn user_file_errors_name_file_line_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("my.yaml");
        std::fs::write(
            &p,
            "devices:\n  - name: x\n    kind: gpu\n    peak_tflops: { f32: 1 }\n    memory_bandwidth_gb_s: 1\n    memory_gb: 1\n    launch_overhead_us: 1\n    copy_engines: 1\n    bogus_key: 3\nlinks: []\n",
        )
        .unwrap();
        let e = Catalog::from_yaml_file(&p).unwrap_err().to_string();
        assert!(e.contains("my.yaml"), "{e}");
        assert!(e.contains("bogus_key"), "{e}");
        assert!(e.contains("9"), "line number missing: {e}");

        std::fs::write(&p, "devices:\n  - name: x\n    kind: gpu\n    peak_tflops: { f32: -1 }\n    memory_bandwidth_gb_s: 1\n    memory_gb: 1\n    launch_overhead_us: 1\n    copy_engines: 1\nlinks: []\n").unwrap();
        let e = Catalog::from_yaml_file(&p).unwrap_err().to_string();
        assert!(e.ends_with("my.yaml: devices[x].peak_tflops.f32: must be a positive number, got -1"), "{e}");
        let e = Catalog::from_yaml_file(dir.path().join("missing.yaml")).unwrap_err().to_string();
        assert!(e.starts_with("cannot read ") && e.contains("missing.yaml"), "{e}");
    }
}

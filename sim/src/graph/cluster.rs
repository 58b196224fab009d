//! A virtual cluster: the devices a placed graph is replayed on and the links
//! between them. Parsed from strings such as "4xK40", "2xV100,1xcpu" or
//! "8xH100"; every device gets its catalog spec and memory capacity, every
//! ordered pair of devices one link (one spec for all pairs unless set per
//! pair).
//!
//! Device names follow the engine's full form
//! `/job:localhost/replica:0/task:0/device:<TYPE>:<i>`, numbered per type.
//! The engine has no TPU device type, so TPU devices appear as `GPU:<i>`
//! accelerators in the [`DeviceSet`]; the cluster keeps which spec each has.

use crate::error::SimError;
use flowlab_engine::{DeviceName, DeviceSet};
use flowlab_hw::{Catalog, DeviceSpec, HOST_DEVICE, HostMeasurement, LinkSpec};
use std::collections::HashMap;

/// The most devices one virtual cluster may hold (placers keep device sets as
/// 64-bit masks).
pub const MAX_DEVICES: usize = 64;

/// The link used between every pair of devices unless set otherwise.
pub const DEFAULT_LINK: &str = "pcie3-x16";

/// One device of a virtual cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualDevice {
    pub name: DeviceName,
    pub spec: DeviceSpec,
    /// Memory capacity in bytes.
    pub capacity_bytes: f64,
}

/// Devices and the links between them.
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualCluster {
    devices: Vec<VirtualDevice>,
    default_link: LinkSpec,
    links: HashMap<(usize, usize), LinkSpec>,
}

impl VirtualCluster {
    /// A cluster of the given specs (in order) joined by `link`.
    pub fn new(specs: Vec<DeviceSpec>, link: LinkSpec) -> Result<VirtualCluster, SimError> {
        if specs.is_empty() {
            return Err(SimError::param("devices", "a virtual cluster needs at least one device"));
        }
        if specs.len() > MAX_DEVICES {
            return Err(SimError::param("devices", format!("{} devices requested, at most {MAX_DEVICES} supported", specs.len())));
        }
        let mut per_type: HashMap<&'static str, u32> = HashMap::new();
        let devices = specs
            .into_iter()
            .map(|spec| {
                let ty = if spec.kind.eq_ignore_ascii_case("cpu") { "CPU" } else { "GPU" };
                let id = per_type.entry(ty).or_insert(0);
                let name = DeviceName::full("localhost", 0, 0, ty, *id);
                *id += 1;
                let capacity_bytes = spec.memory_bytes();
                VirtualDevice { name, spec, capacity_bytes }
            })
            .collect();
        Ok(VirtualCluster { devices, default_link: link, links: HashMap::new() })
    }

    /// Parses "4xK40", "2xV100,1xcpu", "8xH100" (a bare name means one device;
    /// names are catalog names, case-insensitive; "cpu" means the catalog's
    /// only CPU entry, likewise any unambiguous prefix).
    pub fn parse(spec: &str) -> Result<VirtualCluster, SimError> {
        VirtualCluster::parse_in(spec, None)
    }

    /// Like [`parse`](Self::parse), with `cpu` (and `cpu-host`) meaning the
    /// device measured on this host and the `in-process` link between every
    /// pair (see [`HostMeasurement`]): the machine the engine runs on.
    pub fn parse_for_host(spec: &str, host: &HostMeasurement) -> Result<VirtualCluster, SimError> {
        VirtualCluster::parse_in(spec, Some(host))
    }

    fn parse_in(spec: &str, host: Option<&HostMeasurement>) -> Result<VirtualCluster, SimError> {
        let catalog = Catalog::builtin();
        let host_spec = host.map(|h| h.device_spec());
        let known = || catalog.devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ");
        let bad = |token: &str, reason: String| SimError::BadDeviceSet { spec: spec.into(), token: token.into(), reason };
        let mut specs = Vec::new();
        for raw in spec.split(',') {
            let token = raw.trim();
            if token.is_empty() {
                return Err(bad(raw, "empty token (write e.g. \"4xK40,1xcpu\")".into()));
            }
            let (count, name) = match token.split_once(['x', 'X']) {
                Some((c, n)) if !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()) => {
                    let c: usize = c.parse().map_err(|_| bad(token, format!("count `{c}` is too large")))?;
                    (c, n)
                }
                _ => (1, token),
            };
            if count == 0 {
                return Err(bad(token, "count must be at least 1".into()));
            }
            let host_named = name.eq_ignore_ascii_case("cpu") || name.eq_ignore_ascii_case(HOST_DEVICE);
            let device = match (host_spec.as_ref().filter(|_| host_named), catalog.device(name)) {
                (Some(h), _) => h,
                (None, Ok(d)) => d,
                (None, Err(_)) => {
                    let lower = name.to_ascii_lowercase();
                    let hits: Vec<&DeviceSpec> =
                        catalog.devices.iter().filter(|d| !lower.is_empty() && d.name.to_ascii_lowercase().starts_with(&lower)).collect();
                    match hits.as_slice() {
                        [one] => *one,
                        [] => return Err(bad(token, format!("no catalog device `{name}` (catalog: {})", known()))),
                        many => {
                            let names: Vec<&str> = many.iter().map(|d| d.name.as_str()).collect();
                            return Err(bad(token, format!("`{name}` is ambiguous: {}", names.join(", "))));
                        }
                    }
                }
            };
            if specs.len() + count > MAX_DEVICES {
                return Err(bad(token, format!("more than {MAX_DEVICES} devices in all")));
            }
            specs.extend(std::iter::repeat_n(device.clone(), count));
        }
        let link = match host {
            Some(h) => h.link_spec(),
            None => catalog
                .link(DEFAULT_LINK)
                .map_err(|e| SimError::UnknownLink { name: DEFAULT_LINK.into(), param: "link".into(), reason: e.to_string() })?
                .clone(),
        };
        VirtualCluster::new(specs, link)
    }

    /// The same cluster with `link` between every pair (per-pair links kept).
    pub fn with_link(mut self, link: LinkSpec) -> VirtualCluster {
        self.default_link = link;
        self
    }

    /// The same cluster wired by the catalog's link or fabric called `name`
    /// (what `--link` and an experiment's `link:` name): a link joins every
    /// pair; a fabric wires its pairs and needs exactly its number of
    /// devices.
    pub fn wired(self, name: &str) -> Result<VirtualCluster, SimError> {
        let catalog = Catalog::builtin();
        if let Ok(link) = catalog.link(name) {
            return Ok(self.with_link(link.clone()));
        }
        let Ok(fabric) = catalog.fabric(name) else {
            let known: Vec<&str> = catalog.links.iter().map(|l| l.name.as_str()).chain(catalog.fabrics.iter().map(|f| f.name.as_str())).collect();
            return Err(SimError::UnknownLink { name: name.into(), param: "link".into(), reason: format!("no catalog link or fabric of that name (known: {})", known.join(", ")) });
        };
        if fabric.devices() != self.devices.len() {
            return Err(SimError::param(
                "link",
                format!("fabric `{}` wires {} devices, the cluster has {}", fabric.name, fabric.devices(), self.devices.len()),
            ));
        }
        let otherwise = catalog
            .link(&fabric.otherwise)
            .map_err(|e| SimError::UnknownLink { name: fabric.otherwise.clone(), param: "link".into(), reason: e.to_string() })?
            .clone();
        let mut wired = self.with_link(otherwise);
        for src in 0..fabric.devices() {
            for dst in 0..fabric.devices() {
                if let Some(link) = fabric.pair_link(src, dst) {
                    wired.set_link(src, dst, link)?;
                }
            }
        }
        Ok(wired)
    }

    /// Sets the link from device `src` to device `dst` (one direction).
    pub fn set_link(&mut self, src: usize, dst: usize, link: LinkSpec) -> Result<(), SimError> {
        for i in [src, dst] {
            if i >= self.devices.len() {
                return Err(SimError::param("link", format!("device index {i} outside the cluster of {}", self.devices.len())));
            }
        }
        self.links.insert((src, dst), link);
        Ok(())
    }

    /// Sets a device's memory capacity (e.g. to leave room for the framework).
    pub fn set_capacity(&mut self, device: usize, bytes: f64) -> Result<(), SimError> {
        let n = self.devices.len();
        let d = self.devices.get_mut(device).ok_or_else(|| SimError::param("capacity", format!("device index {device} outside the cluster of {n}")))?;
        d.capacity_bytes = bytes;
        Ok(())
    }

    pub fn devices(&self) -> &[VirtualDevice] {
        &self.devices
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// The link from `src` to `dst`.
    pub fn link(&self, src: usize, dst: usize) -> &LinkSpec {
        self.links.get(&(src, dst)).unwrap_or(&self.default_link)
    }

    /// The index of a device by its full name.
    pub fn index_of(&self, name: &DeviceName) -> Option<usize> {
        self.devices.iter().position(|d| &d.name == name)
    }

    /// The engine's view of these devices (for `Placer::place`).
    pub fn device_set(&self) -> DeviceSet {
        let mut set = DeviceSet::new();
        for d in &self.devices {
            // Names are built full with CPU/GPU types above, so `add` accepts them.
            let _ = set.add(&d.name.to_string());
        }
        set
    }

    /// The names of all devices joined by ", " (for error messages).
    pub fn list(&self) -> String {
        self.devices.iter().map(|d| d.name.to_string()).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counts_kinds_and_names() {
        let c = VirtualCluster::parse("2xV100, 1xcpu").unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c.devices()[0].spec.name, "v100");
        assert_eq!(c.devices()[1].name.to_string(), "/job:localhost/replica:0/task:0/device:GPU:1");
        assert_eq!(c.devices()[2].name.to_string(), "/job:localhost/replica:0/task:0/device:CPU:0");
        assert_eq!(c.devices()[2].spec.name, "cpu-x86-core");
        assert_eq!(c.devices()[0].capacity_bytes, 32e9);
        assert_eq!(c.device_set().len(), 3);
        assert_eq!(c.link(0, 1).name, DEFAULT_LINK);
        assert_eq!(VirtualCluster::parse("8xH100").unwrap().len(), 8);
        assert_eq!(VirtualCluster::parse("k40").unwrap().len(), 1);
    }

    #[test]
    fn bad_tokens_are_named_with_the_catalog() {
        let e = VirtualCluster::parse("4xK40,2xK99").unwrap_err().to_string();
        assert!(e.starts_with("bad device set `4xK40,2xK99`: token `2xK99`: no catalog device `K99` (catalog: cpu-x86-core, k40, "), "{e}");
        let e = VirtualCluster::parse("0xK40").unwrap_err().to_string();
        assert_eq!(e, "bad device set `0xK40`: token `0xK40`: count must be at least 1");
        let e = VirtualCluster::parse("4xK40,").unwrap_err().to_string();
        assert!(e.contains("token ``: empty token"), "{e}");
        let e = VirtualCluster::parse("2xtpu").unwrap_err().to_string();
        assert!(e.contains("`tpu` is ambiguous: tpu-v1, tpu-v2"), "{e}");
        let e = VirtualCluster::parse("65xk40").unwrap_err().to_string();
        assert!(e.contains("more than 64 devices"), "{e}");
    }
}

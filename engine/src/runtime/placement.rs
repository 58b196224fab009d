//! Placement: which device runs each node.
//!
//! Contract. A [`Placer`] maps every node of a graph to one device of a
//! [`DeviceSet`]. [`DefaultPlacer`] does what TensorFlow's placer does:
//! 1. nodes that must share a device form colocation groups (union-find): an
//!    update op (Assign, AssignAdd, AssignSub, ScatterAdd, Apply*) names its
//!    variable in the attr `var` and its optimizer slots in `slots` (a queue
//!    op its queue in `queue`), and
//!    joins their group; a node may also ask for colocation explicitly with
//!    TensorFlow's attr `_class = ["loc:@other_node", ...]`;
//! 2. the requested device strings of a group's members are merged into one
//!    specification (two different requests in one group are an error);
//! 3. the group's feasible devices are those matching that specification on
//!    whose device type every member has a kernel for its dtype;
//! 4. the group goes to the first feasible device (GPUs before CPUs, then
//!    set order), so an unconstrained graph lands on one device.
//! Every error names the nodes involved.

use crate::framework::{DeviceName, DeviceSet};
use crate::error::{EngineError, Result};
use crate::graph::{Graph, Node, NodeId};
use crate::ops;
use crate::tensor::DeviceType;
use crate::graph::AttrValue;
use std::collections::HashMap;

/// The device of every node of a graph, indexed by node id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placement {
    devices: Vec<DeviceName>,
}

impl Placement {
    /// A placement from one device per node, in node-id order (for placers
    /// written outside the engine, e.g. the simulator's cost-based ones).
    pub fn from_devices(devices: Vec<DeviceName>) -> Placement {
        Placement { devices }
    }

    /// The device of node `id`.
    pub fn device(&self, id: NodeId) -> Option<&DeviceName> {
        self.devices.get(id)
    }

    /// The device of the node called `name` in `graph`.
    pub fn device_of(&self, graph: &Graph, name: &str) -> Result<&DeviceName> {
        let id = graph.output_by_name(name, 0)?.node_id();
        self.device(id).ok_or_else(|| EngineError::UnknownNode(name.to_string()))
    }

    /// Number of placed nodes.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// The devices in node-id order.
    pub fn devices(&self) -> &[DeviceName] {
        &self.devices
    }

    /// Moves node `id` to `device` (placers refine a placement this way).
    pub fn set(&mut self, id: NodeId, device: DeviceName) {
        if id >= self.devices.len() {
            self.devices.resize(id + 1, DeviceName::any());
        }
        self.devices[id] = device;
    }
}

/// Assigns every node of a graph to a device of a device set.
pub trait Placer {
    fn place(&self, graph: &Graph, devices: &DeviceSet) -> Result<Placement>;
}

/// TensorFlow's default placement rule (see the module comment).
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultPlacer;

/// Union-find with path halving; the root of a group is its smallest id.
struct Groups {
    parent: Vec<usize>,
}

impl Groups {
    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }
    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        let (lo, hi) = if ra < rb { (ra, rb) } else { (rb, ra) };
        self.parent[hi] = lo;
    }
}

/// Names of the nodes `n` must be colocated with.
fn colocation_names(n: &Node) -> Vec<&str> {
    let mut v = Vec::new();
    for key in ["var", "queue"] {
        if let Some(AttrValue::Str(name)) = n.attrs.get(key) {
            v.push(name.as_str());
        }
    }
    for key in ["slots", "_class"] {
        if let Some(AttrValue::Strs(list)) = n.attrs.get(key) {
            for s in list {
                v.push(if key == "_class" { s.strip_prefix("loc:@").unwrap_or(s) } else { s });
            }
        }
    }
    v
}

/// Whether node `n` has a kernel on `dev` for its dtype.
fn has_kernel(nodes: &[Node], n: &Node, dev: DeviceType) -> bool {
    let inputs: Vec<_> = n.inputs.iter().filter_map(|&(p, i)| nodes.get(p).and_then(|p| p.outputs.get(i)).cloned()).collect();
    ops::registry().kernel(&n.op, dev, ops::kernel_dtype(&n.outputs, &inputs)).is_some()
}

/// Device types first in this order when several devices are feasible.
fn priority(t: DeviceType) -> u8 {
    match t {
        DeviceType::Cuda => 0,
        DeviceType::Cpu => 1,
    }
}

impl Placer for DefaultPlacer {
    fn place(&self, graph: &Graph, devices: &DeviceSet) -> Result<Placement> {
        let nodes = graph.nodes();
        if devices.is_empty() {
            let node = nodes.first().map_or(String::new(), |n| n.name.clone());
            return Err(EngineError::Placement { node, detail: "the device set is empty".into() });
        }
        let by_name: HashMap<&str, NodeId> = nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
        let mut groups = Groups { parent: (0..nodes.len()).collect() };
        for (i, n) in nodes.iter().enumerate() {
            for other in colocation_names(n) {
                let j = *by_name.get(other).ok_or_else(|| EngineError::Placement {
                    node: n.name.clone(),
                    detail: format!("it must be colocated with node '{other}', which is not in the graph"),
                })?;
                groups.union(i, j);
            }
        }
        // Requested specification per group, with the node that asked for it.
        let mut requests: HashMap<usize, (DeviceName, NodeId)> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            if n.device.is_empty() {
                continue;
            }
            let spec = DeviceName::parse(&n.device).map_err(|e| EngineError::Placement { node: n.name.clone(), detail: e.to_string() })?;
            let root = groups.find(i);
            match requests.get(&root) {
                None => {
                    requests.insert(root, (spec, i));
                }
                Some((prev, by)) => {
                    let merged = prev.merge(&spec).map_err(|_| EngineError::Placement {
                        node: n.name.clone(),
                        detail: format!(
                            "it requests '{}' but node '{}' of its colocation group (with '{}') requests '{}'",
                            n.device, nodes[*by].name, nodes[root].name, nodes[*by].device
                        ),
                    })?;
                    let by = *by;
                    requests.insert(root, (merged, by));
                }
            }
        }
        // Members per group, in id order.
        let mut members: HashMap<usize, Vec<NodeId>> = HashMap::new();
        for i in 0..nodes.len() {
            members.entry(groups.find(i)).or_default().push(i);
        }
        let mut order: Vec<(u8, usize)> = devices.devices().iter().enumerate().map(|(k, (_, t))| (priority(*t), k)).collect();
        order.sort();
        let mut out = vec![DeviceName::any(); nodes.len()];
        let mut roots: Vec<usize> = members.keys().copied().collect();
        roots.sort_unstable();
        for root in roots {
            let group = &members[&root];
            let request = requests.get(&root);
            let candidates: Vec<usize> = order
                .iter()
                .map(|&(_, k)| k)
                .filter(|&k| request.is_none_or(|(spec, _)| devices.devices()[k].0.matches(spec)))
                .collect();
            if let Some((spec, by)) = request
                && candidates.is_empty()
            {
                return Err(EngineError::Placement {
                    node: nodes[*by].name.clone(),
                    detail: format!("requested device '{}' matches no device of the set ({})", spec, devices.list()),
                });
            }
            let mut chosen = None;
            let mut missing: Option<(NodeId, usize)> = None;
            for &k in &candidates {
                let (name, ty) = &devices.devices()[k];
                match group.iter().find(|&&m| !has_kernel(&nodes, &nodes[m], *ty)) {
                    None => {
                        chosen = Some(name.clone());
                        break;
                    }
                    Some(&m) => {
                        if missing.is_none() {
                            missing = Some((m, k));
                        }
                    }
                }
            }
            let Some(device) = chosen else {
                let (m, k) = missing.unwrap_or((root, 0));
                let n = &nodes[m];
                let mut detail = match request {
                    Some((spec, _)) => format!(
                        "no kernel for op '{}' on any device matching '{}' (first tried: {})",
                        n.op,
                        spec,
                        devices.devices()[k].0
                    ),
                    None => format!("no kernel for op '{}' on any device of the set ({})", n.op, devices.list()),
                };
                if group.len() > 1 {
                    let names: Vec<_> = group.iter().map(|&g| format!("'{}'", nodes[g].name)).collect();
                    detail.push_str(&format!("; it is colocated with {}", names.join(", ")));
                }
                return Err(EngineError::Placement { node: n.name.clone(), detail });
            };
            for &m in group {
                out[m] = device.clone();
            }
        }
        Ok(Placement { devices: out })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    fn cpu(i: u32) -> DeviceName {
        DeviceName::full("localhost", 0, 0, "CPU", i)
    }

    fn place(g: &Graph, d: &DeviceSet) -> Result<Placement> {
        DefaultPlacer.place(g, d)
    }

    #[test]
    fn requests_and_default_rule() {
        let g = Graph::new();
        let a = g.device("/cpu:1").constant(Tensor::scalar(1f32)).unwrap();
        let b = g.constant(Tensor::scalar(2f32)).unwrap();
        let c = g.device("/device:CPU:*").add(&a, &b).unwrap();
        let p = place(&g, &DeviceSet::local_cpus(3)).unwrap();
        assert_eq!(p.device(a.node_id()), Some(&cpu(1)));
        assert_eq!(p.device(b.node_id()), Some(&cpu(0)), "unconstrained nodes go to the first device");
        assert_eq!(p.device(c.node_id()), Some(&cpu(0)));
        assert_eq!(p.device_of(&g, &c.name()).unwrap(), &cpu(0));
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn conflicting_colocation_names_both_nodes() {
        let g = Graph::new();
        let w = g.device("/cpu:0").variable("w", g.constant(Tensor::scalar(1f32))).unwrap();
        let one = g.constant(Tensor::scalar(1f32)).unwrap();
        g.device("/cpu:1").op("AssignAdd").name("bump").input(&one).attr("var", AttrValue::Str("w".into())).build().unwrap();
        let e = place(&g, &DeviceSet::local_cpus(2)).unwrap_err().to_string();
        assert_eq!(
            e,
            "cannot place node 'bump': it requests '/cpu:1' but node 'w' of its colocation group (with 'w') requests '/cpu:0'"
        );
        let _ = w;
    }

    #[test]
    fn explicit_colocation_attr() {
        let g = Graph::new();
        let a = g.device("/cpu:1").constant(Tensor::scalar(1f32)).unwrap();
        let b = g.op("Identity").name("b").input(&a).attr("_class", AttrValue::Strs(vec![format!("loc:@{}", a.name())])).build().unwrap();
        let p = place(&g, &DeviceSet::local_cpus(2)).unwrap();
        assert_eq!(p.device(b.node_id()), Some(&cpu(1)));
        let g = Graph::new();
        g.op("NoOp").name("lonely").attr("_class", AttrValue::Strs(vec!["loc:@ghost".into()])).build().unwrap();
        let e = place(&g, &DeviceSet::local_cpus(1)).unwrap_err().to_string();
        assert_eq!(e, "cannot place node 'lonely': it must be colocated with node 'ghost', which is not in the graph");
    }

    #[test]
    fn missing_devices_and_kernels_are_errors_naming_the_node() {
        let g = Graph::new();
        g.device("/cpu:5").constant(Tensor::scalar(1f32)).unwrap();
        let e = place(&g, &DeviceSet::local_cpus(2)).unwrap_err().to_string();
        assert_eq!(
            e,
            "cannot place node 'Const': requested device '/device:CPU:5' matches no device of the set \
             (/job:localhost/replica:0/task:0/device:CPU:0, /job:localhost/replica:0/task:0/device:CPU:1)"
        );
        let g = Graph::new();
        g.device("/job:worker/cpu:0").constant(Tensor::scalar(1f32)).unwrap();
        let e = place(&g, &DeviceSet::local_cpus(1)).unwrap_err().to_string();
        assert!(e.starts_with("cannot place node 'Const': requested device '/job:worker/device:CPU:0' matches no device"), "{e}");
        let g = Graph::new();
        g.device("/cpu:0/x").constant(Tensor::scalar(1f32)).unwrap();
        let e = place(&g, &DeviceSet::local_cpus(1)).unwrap_err().to_string();
        assert_eq!(e, "cannot place node 'Const': invalid device name '/cpu:0/x': component 'x' has no ':'");

        // No CUDA kernels are registered in this build: a GPU request fails
        // for lack of a kernel, an unconstrained node falls back to the CPU.
        let mut set = DeviceSet::new();
        set.add("/job:localhost/replica:0/task:0/device:GPU:0").unwrap();
        set.add("/job:localhost/replica:0/task:0/device:CPU:0").unwrap();
        let g = Graph::new();
        let a = g.constant(Tensor::scalar(1f32)).unwrap();
        let m = g.device("/gpu:0").op("Neg").name("neg").input(&a).build().unwrap();
        let e = place(&g, &set).unwrap_err().to_string();
        assert_eq!(
            e,
            "cannot place node 'neg': no kernel for op 'Neg' on any device matching '/device:GPU:0' \
             (first tried: /job:localhost/replica:0/task:0/device:GPU:0)"
        );
        let g = Graph::new();
        let a = g.constant(Tensor::scalar(1f32)).unwrap();
        let p = place(&g, &set).unwrap();
        assert_eq!(p.device(a.node_id()).unwrap().to_string(), "/job:localhost/replica:0/task:0/device:CPU:0");
        let _ = m;
    }

    #[test]
    fn colocated_kernel_error_lists_the_group() {
        let mut set = DeviceSet::new();
        set.add("/job:localhost/replica:0/task:0/device:GPU:0").unwrap();
        set.add("/job:localhost/replica:0/task:0/device:CPU:0").unwrap();
        let g = Graph::new();
        let init = g.constant(Tensor::scalar(1f32)).unwrap();
        g.device("/gpu:0").variable("w", init).unwrap();
        let e = place(&g, &set).unwrap_err().to_string();
        assert_eq!(
            e,
            "cannot place node 'w': no kernel for op 'Variable' on any device matching '/device:GPU:0' \
             (first tried: /job:localhost/replica:0/task:0/device:GPU:0); it is colocated with 'w', 'w/Assign'"
        );
    }
}

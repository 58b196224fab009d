//! Graph serialization: a versioned JSON file (the GraphDef equivalent).
//! Nodes are written in id (topological) order with their op, attrs, inputs
//! as "name:index", control inputs, device and inferred output types; loading
//! rebuilds the graph node by node through shape inference and checks that
//! the recorded types agree. Attr tensors are stored as hex bytes and floats
//! with round-trip precision, so save -> load -> save is byte-identical.

use crate::graph::Attrs;
use crate::files::{byte_offset, write_atomic};
use crate::error::{EngineError, Result};
use crate::graph::{Graph, NodeClass, NodeId};
use crate::tensor::TensorType;
use serde::{Deserialize, Serialize};
use std::path::Path;

const FORMAT: &str = "flowlab-graph";
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphDef {
    format: String,
    version: u32,
    nodes: Vec<NodeDef>,
    variables: Vec<String>,
    initializers: Vec<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeDef {
    name: String,
    op: String,
    #[serde(default)]
    attrs: Attrs,
    #[serde(default)]
    inputs: Vec<String>,
    #[serde(default)]
    control_inputs: Vec<String>,
    #[serde(default)]
    device: String,
    outputs: Vec<TensorType>,
}

impl Graph {
    /// The graph as versioned JSON text.
    pub fn to_json(&self) -> String {
        let d = self.lock();
        let name = |id: NodeId| d.nodes[id].name.clone();
        let def = GraphDef {
            format: FORMAT.into(),
            version: VERSION,
            nodes: d
                .nodes
                .iter()
                .map(|n| NodeDef {
                    name: n.name.clone(),
                    op: n.op.clone(),
                    attrs: n.attrs.clone(),
                    inputs: n.inputs.iter().map(|&(s, i)| format!("{}:{}", name(s), i)).collect(),
                    control_inputs: n.control_inputs.iter().map(|&c| name(c)).collect(),
                    device: n.device.clone(),
                    outputs: n.outputs.clone(),
                })
                .collect(),
            variables: d.variables.iter().map(|&v| name(v)).collect(),
            initializers: d.initializers.iter().map(|&v| name(v)).collect(),
        };
        serde_json::to_string_pretty(&def).unwrap_or_default()
    }

    /// Writes [`to_json`](Self::to_json) to `path` atomically.
    pub fn save_json(&self, path: &Path) -> Result<()> {
        write_atomic(path, self.to_json().as_bytes())
    }

    /// Reads a graph written by [`save_json`](Self::save_json).
    pub fn load_json(path: &Path) -> Result<Graph> {
        let text = std::fs::read(path).map_err(|e| EngineError::io(path, e))?;
        Graph::from_json(&text, &path.display().to_string())
    }

    /// Parses graph JSON; `source` names the input in errors.
    pub fn from_json(text: &[u8], source: &str) -> Result<Graph> {
        let corrupt = |offset: u64, detail: String| EngineError::Corrupt { file: source.into(), offset, detail };
        let def: GraphDef =
            serde_json::from_slice(text).map_err(|e| corrupt(byte_offset(text, e.line(), e.column()), e.to_string()))?;
        // Past parsing, errors are about meaning, not bytes: they name the node.
        let invalid = |node: &str, detail: String| EngineError::GraphFile { file: source.into(), node: node.into(), detail };
        if def.format != FORMAT || def.version != VERSION {
            return Err(invalid("", format!("format '{}' version {} is not {FORMAT} version {VERSION}", def.format, def.version)));
        }
        let g = Graph::new();
        let mut back_edges = Vec::new();
        for n in def.nodes {
            let mut inputs = Vec::with_capacity(n.inputs.len());
            for s in &n.inputs {
                let (name, idx) = s
                    .rsplit_once(':')
                    .and_then(|(a, b)| b.parse::<usize>().ok().map(|i| (a, i)))
                    .ok_or_else(|| invalid(&n.name, format!("node '{}': input '{s}' is not NAME:INDEX", n.name)))?;
                match g.output_by_name(name, idx) {
                    Ok(o) => inputs.push(o),
                    // A while loop's Merge names its NextIteration, defined later.
                    Err(_) if NodeClass::of(&n.op) == NodeClass::Merge && !inputs.is_empty() => back_edges.push((n.name.clone(), name.to_string(), idx)),
                    Err(e) => return Err(invalid(&n.name, format!("node '{}': input '{s}': {e}", n.name))),
                }
            }
            let mut control = Vec::with_capacity(n.control_inputs.len());
            for c in &n.control_inputs {
                control.push(g.output_by_name(c, 0).map_err(|e| invalid(&n.name, format!("node '{}': control input: {e}", n.name)))?.node);
            }
            let id = g.add_node(&n.op, Some(&n.name), inputs, control, n.attrs).map_err(|e| invalid(&n.name, e.to_string()))?;
            let mut d = g.lock();
            let node = &mut d.nodes[id];
            if node.outputs != n.outputs {
                return Err(invalid(
                    &n.name,
                    format!("node '{}': recorded outputs {:?} differ from inferred {:?}", n.name, n.outputs, node.outputs),
                ));
            }
            node.device = n.device;
        }
        for (merge, src, idx) in back_edges {
            let o = g.output_by_name(&src, idx).map_err(|e| invalid(&merge, format!("node '{merge}': input '{src}:{idx}': {e}")))?;
            if o.op() != "NextIteration" {
                return Err(invalid(&merge, format!("node '{merge}': input '{src}:{idx}' is defined after it and is not a NextIteration")));
            }
            let m = g.output_by_name(&merge, 0).map_err(|e| invalid(&merge, e.to_string()))?;
            g.add_back_edge(m.node_id(), (o.node_id(), idx));
        }
        let ids = |names: &[String]| -> Result<Vec<NodeId>> {
            names.iter().map(|v| g.output_by_name(v, 0).map(|o| o.node).map_err(|e| invalid(v, e.to_string()))).collect()
        };
        let vars = ids(&def.variables)?;
        let inits = ids(&def.initializers)?;
        {
            let mut d = g.lock();
            d.variables = vars;
            d.initializers = inits;
        }
        Ok(g)
    }
}

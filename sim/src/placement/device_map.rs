//! A placement written by hand: rules that send nodes, by name, to devices.
//!
//! The cost-based placers decide splits; validating the placement model
//! also needs splits nobody's heuristic chose (layer-wise, pipeline-like,
//! one layer on the other device), and researchers ask "what if layer 3
//! ran there". A device map is a YAML (or JSON) list of rules, first match
//! wins:
//!
//! ```yaml
//! - { nodes: "dense_1/*", device: 1 }            # the second layer ...
//! - { nodes: "gradients/dense_1/*", device: 1 }  # ... and its gradients
//! - { nodes: "*", device: 0 }                    # everything else
//! ```
//!
//! `nodes` is a glob over node names (`*` crosses `/`; the `glob` crate's
//! syntax); `device` an index into the cluster's devices (`flowlab place
//! --devices 2xcpu`: 0 and 1). A colocation group (a variable with its
//! reads and updates) goes where its first node in graph order goes: the
//! engine cannot split one, and the variable comes before its updates. A
//! node no rule matches, a rule that matches no node, a device out of
//! range or one the group may not use are errors naming the file, the rule
//! and the node: a map that silently placed less than it says would
//! measure something else.

use super::problem::Problem;
use crate::error::SimError;
use std::path::Path;

/// One rule of a device map.
#[derive(Debug, Clone)]
struct MapRule {
    pattern: glob::Pattern,
    device: usize,
}

/// A parsed device map file.
#[derive(Debug, Clone)]
pub struct DeviceMap {
    file: String,
    rules: Vec<MapRule>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleText {
    nodes: String,
    device: usize,
}

impl DeviceMap {
    /// Reads and checks a device map file (YAML or JSON).
    pub fn load(path: &Path) -> Result<DeviceMap, SimError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| SimError::DeviceMap { file: file.clone(), detail: e.to_string() })?;
        DeviceMap::parse(&file, &text)
    }

    /// Parses `text`, the contents of `file` (named in errors).
    pub fn parse(file: &str, text: &str) -> Result<DeviceMap, SimError> {
        let err = |detail: String| SimError::DeviceMap { file: file.into(), detail };
        let rules: Vec<RuleText> = serde_saphyr::from_str(text).map_err(|e| err(format!("{e} (expected a list of `{{ nodes: GLOB, device: N }}`)")))?;
        if rules.is_empty() {
            return Err(err("no rules: write `- { nodes: \"*\", device: 0 }` at least".into()));
        }
        let rules = rules
            .into_iter()
            .enumerate()
            .map(|(k, r)| {
                let pattern = glob::Pattern::new(&r.nodes).map_err(|e| err(format!("rule {} (`{}`): {e}", k + 1, r.nodes)))?;
                Ok(MapRule { pattern, device: r.device })
            })
            .collect::<Result<Vec<_>, SimError>>()?;
        Ok(DeviceMap { file: file.into(), rules })
    }

    /// The file the map came from.
    pub fn file(&self) -> &str {
        &self.file
    }

    fn error(&self, node: &str, detail: String) -> SimError {
        SimError::Placement { node: node.into(), detail: format!("device map `{}`: {detail}", self.file) }
    }

    /// Every rule is the first match of some node of the whole graph
    /// (`names`: the simulated step is pruned, initializers are not in it).
    pub(crate) fn check_rules_used<'a>(&self, names: impl Iterator<Item = &'a str>) -> Result<(), SimError> {
        let mut used = vec![false; self.rules.len()];
        let mut first = None;
        for name in names {
            first.get_or_insert(name);
            if let Some(k) = self.rules.iter().position(|r| r.pattern.matches(name)) {
                used[k] = true;
            }
        }
        match used.iter().position(|u| !u) {
            Some(k) => Err(self.error(
                first.unwrap_or_default(),
                format!("rule {} (`{}`) matches no node of the graph (an earlier rule may take them all)", k + 1, self.rules[k].pattern),
            )),
            None => Ok(()),
        }
    }

    /// The rule (its index) each node of `p` matches first.
    fn matches(&self, p: &Problem) -> Result<Vec<usize>, SimError> {
        p.sim.graph().names.iter().take(p.n).map(|name| {
            self.rules.iter().position(|r| r.pattern.matches(name)).ok_or_else(|| {
                self.error(name, "no rule matches it: end the list with `- { nodes: \"*\", device: 0 }` for the nodes no other rule names".into())
            })
        }).collect()
    }

    /// The device of every node: each colocation group where its first
    /// member's rule sends it.
    pub(crate) fn assign(&self, p: &Problem) -> Result<Vec<u16>, SimError> {
        let rule_of = self.matches(p)?;
        let names = &p.sim.graph().names;
        let cluster = p.sim.cluster();
        let mut dev = vec![0u16; p.n];
        for g in &p.groups {
            let first = g.members[0] as usize;
            let k = rule_of[first];
            let d = self.rules[k].device;
            if d >= p.ndev {
                return Err(self.error(
                    &names[first],
                    format!("rule {} (`{}`) names device {d}, but the cluster has {} ({}: 0 to {})", k + 1, self.rules[k].pattern, p.ndev, cluster.list(), p.ndev - 1),
                ));
            }
            if g.allowed & (1 << d) == 0 {
                let name = &cluster.devices()[d].name;
                return Err(self.error(&names[first], format!("rule {} sends it to device {d} ({name}), which its colocation group may not use", k + 1)));
            }
            for &m in &g.members {
                dev[m as usize] = d as u16;
            }
        }
        Ok(dev)
    }
}

//! Dotted keys over a point's parameter tree: `strategy.sync.backup` names
//! the value at `{strategy: {sync: {backup: _}}}`. Sweeps set values by
//! dotted key; results list every leaf by its dotted key.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Sets the value at a dotted key, creating (or replacing by) maps on the way.
pub(crate) fn set_dotted(tree: &mut Value, key: &str, value: Value) {
    let mut node = tree;
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let Value::Object(map) = node else {
            unreachable!("made an object just above")
        };
        if parts.peek().is_none() {
            map.insert(part.to_string(), value);
            return;
        }
        node = map.entry(part.to_string()).or_insert(Value::Null);
    }
}

/// Every leaf of the tree under its dotted key. Lists are leaves (their JSON
/// is the value); an empty map is a leaf whose value is `{}`.
///
/// A map with exactly one key whose path is in `tag_paths` is an enum
/// variant (`strategy: {sync: {backup: 2}}`): its path also gets the
/// variant's name (`strategy = "sync"`), so that results can be grouped by
/// variant even when the variants carry different fields.
pub(crate) fn leaves(tree: &Value, tag_paths: &[&str]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    collect(tree, String::new(), tag_paths, &mut out);
    out
}

fn collect(node: &Value, path: String, tag_paths: &[&str], out: &mut BTreeMap<String, Value>) {
    match node {
        Value::Object(map) if !map.is_empty() => {
            if map.len() == 1 && tag_paths.contains(&path.as_str()) {
                if let Some(variant) = map.keys().next() {
                    out.insert(path.clone(), Value::String(variant.clone()));
                }
            }
            for (k, v) in map {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                collect(v, child, tag_paths, out);
            }
        }
        leaf => {
            if !path.is_empty() {
                out.insert(path, leaf.clone());
            }
        }
    }
}

/// A short human form of a value for progress lines and CSV cells: strings
/// bare, everything else as JSON.
pub(crate) fn display_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_dotted_creates_and_replaces_maps() {
        let mut tree = json!({"workers": 50, "strategy": "async"});
        set_dotted(&mut tree, "strategy.sync.backup", json!(2));
        set_dotted(&mut tree, "workers", json!(25));
        set_dotted(&mut tree, "network.link_gbps", json!(10.0));
        assert_eq!(
            tree,
            json!({"workers": 25, "strategy": {"sync": {"backup": 2}}, "network": {"link_gbps": 10.0}})
        );
    }

    #[test]
    fn leaves_are_dotted_and_enum_variants_are_named() {
        let tree = json!({
            "workers": 50,
            "strategy": {"sync": {"backup": 2}},
            "network": {"topology": "fat_tree", "link_gbps": 10},
            "sizes": [1, 2],
            "empty": {}
        });
        let got = leaves(&tree, &["strategy"]);
        let want: BTreeMap<String, Value> = [
            ("workers", json!(50)),
            ("strategy", json!("sync")),
            ("strategy.sync.backup", json!(2)),
            ("network.topology", json!("fat_tree")),
            ("network.link_gbps", json!(10)),
            ("sizes", json!([1, 2])),
            ("empty", json!({})),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(got, want);
        let plain = leaves(&json!({"strategy": "async"}), &["strategy"]);
        assert_eq!(plain["strategy"], json!("async"));
    }
}

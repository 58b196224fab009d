//! The generated JSON Schema of experiment files against every catalog file,
//! checked by an implementation of JSON Schema nobody here wrote (the
//! `jsonschema` crate), and the committed schema and reference pages against
//! what the binary generates today (regenerate with docs/gen/reference.sh).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

const KINDS: &[&str] = &["cluster", "placement", "systolic", "validate", "distributed"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn catalog_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("experiments/catalog"))
        .expect("catalog folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{} catalog files", files.len());
    files
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("read");
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn errors(validator: &jsonschema::Validator, v: &Value) -> Vec<String> {
    validator.iter_errors(v).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}

fn set_dotted(tree: &mut Value, key: &str, value: Value) {
    let mut node = tree;
    let parts: Vec<&str> = key.split('.').collect();
    for p in &parts[..parts.len() - 1] {
        if !node.get(*p).is_some_and(Value::is_object) {
            node[*p] = json!({});
        }
        node = &mut node[*p];
    }
    node[parts[parts.len() - 1]] = value;
}

#[test]
fn the_committed_schema_and_reference_pages_are_what_the_types_generate() {
    let stale = "stale: run docs/gen/reference.sh and commit the result";
    let committed = std::fs::read_to_string(root().join("docs/schema/experiment.schema.json")).expect("schema file");
    let generated = serde_json::to_string_pretty(&flowlab_experiments::file_schema()).expect("json") + "\n";
    assert!(committed == generated, "docs/schema/experiment.schema.json is {stale}");
    for kind in KINDS {
        let path = root().join(format!("docs/src/reference/{kind}.md"));
        let committed = std::fs::read_to_string(&path).expect("reference page");
        let generated = flowlab_experiments::reference_page(kind).expect("page");
        assert!(committed == generated, "{} is {stale}", path.display());
        let summary = std::fs::read_to_string(root().join("docs/SUMMARY.md")).expect("summary");
        assert!(summary.contains(&format!("(src/reference/{kind}.md)")), "SUMMARY.md does not link src/reference/{kind}.md");
    }
}

/// Each section of docs/src/reference/cli.md is what `flowlab COMMAND
/// --help` prints now, and every command `flowlab --help` lists has one.
#[test]
fn the_cli_reference_is_each_commands_help() {
    let page = std::fs::read_to_string(root().join("docs/src/reference/cli.md")).expect("cli.md");
    let mut sections = 0;
    for section in page.split("\n## `flowlab").skip(1) {
        let (cmd, rest) = section.split_once('`').expect("heading");
        let block = rest.split_once("```text\n").and_then(|(_, b)| b.split_once("```")).map(|(b, _)| b).expect("code block");
        let args: Vec<&str> = cmd.split_whitespace().chain(["--help"]).collect();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_flowlab")).args(&args).output().expect("flowlab");
        assert!(String::from_utf8_lossy(&out.stdout) == block, "`flowlab {cmd} --help` differs from cli.md: run docs/gen/reference.sh");
        sections += 1;
    }
    let top = std::process::Command::new(env!("CARGO_BIN_EXE_flowlab")).arg("--help").output().expect("flowlab");
    let listed: Vec<String> = String::from_utf8_lossy(&top.stdout)
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    for c in &listed {
        assert!(page.contains(&format!("## `flowlab {c}`")), "cli.md has no section for `flowlab {c}`: add it to docs/gen/reference.sh");
    }
    assert!(sections > listed.len(), "{sections} sections for {} commands", listed.len());
}

#[test]
fn every_catalog_file_validates_and_names_the_schema_on_its_first_line() {
    let validator = jsonschema::validator_for(&flowlab_experiments::file_schema()).expect("a valid schema");
    for path in catalog_files() {
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text.lines().next(),
            Some("# yaml-language-server: $schema=../../docs/schema/experiment.schema.json"),
            "{}: the editor's schema line",
            path.display()
        );
        let found = errors(&validator, &yaml(&path));
        assert!(found.is_empty(), "{}: {found:#?}", path.display());
    }
}

#[test]
fn every_template_of_flowlab_new_validates() {
    let validator = jsonschema::validator_for(&flowlab_experiments::file_schema()).expect("a valid schema");
    for (kind, text) in flowlab_experiments::templates() {
        let file: Value = serde_saphyr::from_str(text).expect("template");
        let found = errors(&validator, &file);
        assert!(found.is_empty(), "template {kind}: {found:#?}");
    }
}

/// Each sweep value set into `base:` one key (or zip group) at a time, and
/// the result checked against the kind's point schema with its required
/// keys: every value the catalog sweeps is one the schema describes.
#[test]
fn every_catalog_sweep_value_fits_its_kinds_point_schema() {
    let mut checked = 0;
    for path in catalog_files() {
        let file = yaml(&path);
        let kind = file["kind"].as_str().expect("kind");
        let schema = flowlab_experiments::point_schema(kind).expect("kind");
        let validator = jsonschema::validator_for(&schema).expect("a valid schema");
        let mut groups: Vec<Vec<(String, Vec<Value>)>> = Vec::new();
        if let Some(sweep) = file.get("sweep").and_then(Value::as_object) {
            for (key, values) in sweep {
                if key == "zip" {
                    for group in values.as_array().expect("zip list") {
                        let members = group.as_object().expect("zip group");
                        groups.push(members.iter().map(|(k, v)| (k.clone(), v.as_array().expect("list").clone())).collect());
                    }
                } else {
                    groups.push(vec![(key.clone(), values.as_array().expect("list").clone())]);
                }
            }
        }
        let first_of_each: Vec<(String, Value)> = groups.iter().flatten().map(|(k, v)| (k.clone(), v[0].clone())).collect();
        for group in &groups {
            for i in 0..group[0].1.len() {
                let mut point = file["base"].clone();
                for (k, v) in &first_of_each {
                    set_dotted(&mut point, k, v.clone());
                }
                for (k, values) in group {
                    set_dotted(&mut point, k, values[i].clone());
                }
                let found = errors(&validator, &point);
                assert!(found.is_empty(), "{}: {point}: {found:#?}", path.display());
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "{checked} points");
}

/// What the schema refuses, each also refused by `flowlab check`: the
/// schema would be no help to an editor if it passed these.
#[test]
fn the_schema_refuses_what_the_parser_refuses() {
    let validator = jsonschema::validator_for(&flowlab_experiments::file_schema()).expect("a valid schema");
    let base = json!({ "name": "x", "kind": "cluster", "base": { "workers": 4, "ps": 1 } });
    assert!(errors(&validator, &base).is_empty());
    let cases = [
        ("/base", json!({ "wrokers": 4 })),
        ("/base/workers", json!({ "workers": -1 })),
        ("/base/workers", json!({ "workers": 2.5 })),
        ("/base/straggler", json!({ "straggler": { "dist": "lognormal" } })),
        ("/base/straggler", json!({ "straggler": "default" })),
        ("/base/strategy", json!({ "strategy": "sync" })),
        ("/base/network/topology", json!({ "network": { "topology": "fat-tree" } })),
        ("/base/comm", json!({ "comm": "int4" })),
        ("/base/model", json!({ "model": "resnet50" })),
    ];
    for (at, bad_base) in cases {
        let mut file = base.clone();
        file["base"] = bad_base.clone();
        let found: Vec<String> = validator.iter_errors(&file).map(|e| e.instance_path().to_string()).collect();
        assert!(found.iter().any(|p| p.starts_with(at)), "{bad_base} not refused at {at}: {found:?}");
    }
    let mut file = base.clone();
    file["kind"] = json!("graph");
    assert!(!errors(&validator, &file).is_empty(), "a kind that does not run");
    let mut file = base.clone();
    file["sweep"] = json!({ "workers": 4 });
    assert!(!errors(&validator, &file).is_empty(), "sweep values that are not a list");
}

/// The book holds every measurement log (docs/SUMMARY.md lists each file
/// of docs/logs/), so the manual's links into them work in the built site.
#[test]
fn every_measurement_log_is_in_the_book() {
    let summary = std::fs::read_to_string(root().join("docs/SUMMARY.md")).expect("summary");
    let mut logs = 0;
    for entry in std::fs::read_dir(root().join("docs/logs")).expect("docs/logs") {
        let name = entry.expect("entry").file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            assert!(summary.contains(&format!("](logs/{name})")), "docs/SUMMARY.md does not list logs/{name}");
            logs += 1;
        }
    }
    assert!(logs >= 5, "{logs} logs");
}

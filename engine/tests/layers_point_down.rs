//! The engine's layers (see `src/lib.rs`) import only from layers below
//! them: a file under `src/<module>/` may name `crate::<other>` only when
//! `<other>` sits on a lower layer. Test modules are held to the same rule,
//! so a test that needs a higher layer belongs in `tests/`.

use std::path::{Path, PathBuf};

/// Top-level modules of `src/`, by layer (lower numbers are lower layers).
const LAYERS: &[(&str, u32)] = &[
    ("error", 0),
    ("files", 1),
    ("tensor", 2),
    ("kernels", 2),
    ("framework", 3),
    ("graph", 4),
    ("ops", 5),
    ("runtime", 6),
    ("train", 7),
];

fn layer(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every `crate::<module>` path in `text` (in `use` lines and inline), with
/// its line number; `$crate::` in macros counts too.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(p) = rest.find("crate::") {
            let after = &rest[p + "crate::".len()..];
            let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                v.push((i + 1, name));
            }
            rest = after;
        }
    }
    v
}

/// The violations in one file: (line, imported module).
fn violations(own: &str, text: &str) -> Vec<(usize, String)> {
    let own_layer = layer(own).unwrap_or_else(|| panic!("module `{own}` has no layer in LAYERS: add it"));
    crate_paths(text)
        .into_iter()
        .filter(|(_, m)| m != own && m.chars().next().is_some_and(|c| c.is_lowercase()))
        .filter(|(_, m)| match layer(m) {
            Some(l) => l >= own_layer,
            None => true,
        })
        .collect()
}

#[test]
fn no_module_imports_from_its_own_or_a_higher_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut bad = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let own = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if own == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (line, m) in violations(&own, &text) {
            bad.push(format!("{}:{line}: layer `{own}` imports `crate::{m}`", rel.display()));
        }
    }
    assert!(files.len() > 40, "found only {} source files under {}", files.len(), src.display());
    assert!(bad.is_empty(), "imports that point up or sideways:\n{}", bad.join("\n"));
}

#[test]
fn the_check_catches_an_upward_and_a_sideways_import() {
    assert_eq!(violations("graph", "use crate::ops::registry;"), vec![(1, "ops".to_string())]);
    assert_eq!(violations("tensor", "fn f(k: crate::kernels::cpu::X) {}"), vec![(1, "kernels".to_string())]);
    assert_eq!(violations("ops", "    $crate::tensor::DType::F32 => {}\nuse crate::runtime::Session;"), vec![(2, "runtime".to_string())]);
    assert!(violations("train", "use crate::runtime::Session; // crate::train::x").is_empty());
    assert!(violations("graph", "use crate::graph::attr::Attrs;").is_empty());
}

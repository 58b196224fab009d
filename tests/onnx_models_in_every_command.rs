//! An ONNX file wherever a model is taken: `flowlab onnx run` writes ONNX
//! Runtime's outputs, a placement sweep and a cluster workload take the
//! file's training step, and a missing file is named at `check`.

mod common;

use common::{describe, read_rows, run_flowlab, write_file};
use std::path::PathBuf;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/onnx").join(name).display().to_string()
}

#[test]
fn onnx_run_writes_onnx_runtimes_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_flowlab(&["onnx", "run", &fixture("mlp.onnx"), "--input", &format!("x={}", fixture("mlp.x.npy")), "--output-dir", tmp.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    let got = flowlab_models::npy::read(&tmp.path().join("output.npy")).unwrap().to_vec::<f32>().unwrap();
    let want = flowlab_models::npy::read(std::path::Path::new(&fixture("mlp.output.npy"))).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() <= 1e-4 * b.abs().max(1e-2), "{a} vs {b}");
    }
    let out = run_flowlab(&["onnx", "run", &fixture("mlp.onnx"), "--input", &format!("y={}", fixture("mlp.x.npy"))]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("input 'x' is not given (--input x=FILE.npy; the model's inputs: x)"), "{}", describe(&out));
}

#[test]
fn a_placement_sweep_and_a_cluster_workload_take_an_onnx_file() {
    let tmp = tempfile::tempdir().unwrap();
    let text = format!(
        "name: onnx-place\nkind: placement\nseed: 1\nbase:\n  model: {}\n  batch: 8\n  devices: 2xK40\n  placer: default\nsweep:\n  placer: [default, m_etf]\n",
        fixture("cnn.onnx")
    );
    let file = write_file(tmp.path(), "place.yaml", &text);
    let dir = tmp.path().join("place");
    let out = run_flowlab(&["run", file.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    let rows = read_rows(&dir);
    assert_eq!(rows.len(), 2);
    for r in &rows {
        // the file's 3,677 float weights (onnx.load's count)
        assert_eq!(r["metrics"]["params"].as_f64(), Some(3677.0), "{r}");
        assert!(r["metrics"]["step_time_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    // the cluster kind's map form, `{ onnx: FILE, batch: B }`, gives the
    // same points; a second, different batch is refused naming both
    let map = text.replace(&format!("model: {}\n  batch: 8", fixture("cnn.onnx")), &format!("model: {{ onnx: {}, batch: 8 }}", fixture("cnn.onnx")));
    assert_ne!(map, text);
    let file = write_file(tmp.path(), "place-map.yaml", &map);
    let map_dir = tmp.path().join("place-map");
    let out = run_flowlab(&["run", file.to_str().unwrap(), "--out", map_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    let metrics = |rows: &[serde_json::Value]| rows.iter().map(|r| r["metrics"]["step_time_s"].clone()).collect::<Vec<_>>();
    assert_eq!(metrics(&read_rows(&map_dir)), metrics(&rows));
    let twice = write_file(tmp.path(), "twice.yaml", &map.replace("placer: default\nsweep", "placer: default\n  batch: 16\nsweep"));
    let out = run_flowlab(&["check", twice.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid parameter `batch`: 16, but `model.batch` says 8: give it once"), "{}", describe(&out));

    let text = format!("name: onnx-cluster\nkind: cluster\nseed: 1\nbase:\n  model: {{ onnx: {}, batch: 16, device: k40 }}\n  workers: 2\n  ps: 1\n  steps: 5\n", fixture("mlp.onnx"));
    let file = write_file(tmp.path(), "cluster.yaml", &text);
    let out = run_flowlab(&["check", file.to_str().unwrap(), "--resolved"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("dense_params: 3466"), "{}", describe(&out));
    let bad = write_file(tmp.path(), "missing.yaml", &text.replace("mlp.onnx", "absent.onnx").replace("kind: cluster", "kind: cluster"));
    let out = run_flowlab(&["check", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("absent.onnx: cannot read"), "{}", describe(&out));
}

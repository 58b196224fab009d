//! A hand-written device map (`--placer map:FILE`, `placer: { map: FILE }`):
//! a placer's answer written out with `--write-map` and read back is the
//! same placement; a layer-wise map runs in the real engine with the
//! single-device numbers and moves tensors; a validate sweep takes it, and
//! `check` names a map that does not parse.

mod common;

use common::{describe, read_rows, run_flowlab, write_file};
use flowlab_engine::{DeviceSet, Session, SessionOptions, Tensor};
use flowlab_models::zoo;
use flowlab_sim::graph::VirtualCluster;
use flowlab_sim::placement::{PlacerOptions, place_timed};

/// The MLP's second hidden layer and its logits on device 1, with their
/// gradients (`gradients/dense_1/...`), the rest on device 0.
const LAYERS: &str = "- { nodes: \"*dense_1/*\", device: 1 }\n- { nodes: \"*logits/*\", device: 1 }\n- { nodes: \"*\", device: 0 }\n";

fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", describe(out));
    serde_json::from_slice(&out.stdout).expect("place --json prints JSON")
}

#[test]
fn a_written_map_reads_back_as_the_same_placement() {
    let tmp = tempfile::tempdir().unwrap();
    let map = tmp.path().join("m_etf.yaml");
    let base = ["place", "--model", "cnn", "--batch", "16", "--devices", "2xK40", "--json"];
    let etf = json_of(&run_flowlab(&[&base[..], &["--placer", "m_sct", "--write-map", map.to_str().unwrap()]].concat()));
    let text = std::fs::read_to_string(&map).unwrap();
    assert!(text.lines().filter(|l| l.starts_with("- { nodes: ")).count() > 50, "{text}");
    let placer = format!("map:{}", map.display());
    let again = json_of(&run_flowlab(&[&base[..], &["--placer", &placer]].concat()));
    assert_eq!(again["step_seconds"], etf["step_seconds"]);
    assert_eq!(again["report"]["links"], etf["report"]["links"]);
    assert_eq!(again["fallback"], serde_json::Value::Null, "a map has no fallback to one device");
}

#[test]
fn a_layer_wise_map_runs_in_the_engine_with_single_device_losses() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write_file(tmp.path(), "layers.yaml", LAYERS);
    let m = zoo::build("mlp", 16).expect("zoo mlp");
    let cluster = VirtualCluster::parse("2xcpu").expect("two CPUs");
    let init = m.graph.global_variables_initializer().expect("initializer");
    let placement = place_timed(&format!("map:{}", file.display()), &m.graph, &PlacerOptions::new(cluster)).expect("the map places").placement;
    let x = Tensor::from_vec((0..16 * 784).map(|i| ((i * 37) % 101) as f32 / 101.0 - 0.5).collect::<Vec<_>>(), vec![16, 784]).unwrap();
    let y = Tensor::from_vec((0..16).map(|i| (i % 10) as i64).collect::<Vec<_>>(), vec![16]).unwrap();
    let losses = |opts: SessionOptions| {
        let sess = Session::with_options(&m.graph, opts).expect("session");
        sess.run(&[], &[], &[&init]).expect("init");
        let feeds = [(&m.inputs[0], &x), (&m.inputs[1], &y)];
        let l: Vec<f32> = (0..3).map(|_| sess.run(&feeds, &[&m.loss], &[&m.train_op]).unwrap()[0].as_slice::<f32>().unwrap()[0]).collect();
        (l, sess.comm_stats().transfers)
    };
    let (one, _) = losses(SessionOptions { threads: 1, ..Default::default() });
    let (split, transfers) = losses(SessionOptions { threads: 1, devices: DeviceSet::local_cpus(2), placement: Some(placement), ..Default::default() });
    assert_eq!(split, one);
    assert!(transfers > 0, "the map splits the graph");
}

#[test]
fn a_validate_sweep_takes_a_map_and_check_names_a_bad_one() {
    let tmp = tempfile::tempdir().unwrap();
    write_file(tmp.path(), "layers.yaml", LAYERS);
    let layers = tmp.path().join("layers.yaml");
    let text = format!(
        "name: forced\nkind: validate\nseed: 1\nbase:\n  model: mlp\n  batch: 16\n  devices: 2xcpu\n  placer: {{ map: {} }}\n  predictor: roofline\n  steps: 2\n  warmup: 1\n",
        layers.display()
    );
    let file = write_file(tmp.path(), "forced.yaml", &text);
    let dir = tmp.path().join("out");
    let out = run_flowlab(&["run", file.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    let rows = read_rows(&dir);
    assert_eq!(rows.len(), 1);
    // the map form's key as written (a sweep mixing placers writes `map:FILE`)
    assert_eq!(rows[0]["params"]["placer.map"], serde_json::json!(layers.display().to_string()), "{}", rows[0]);
    assert!(rows[0]["metrics"]["predicted_transfers"].as_f64().unwrap() > 0.0, "{}", rows[0]);

    let bad = write_file(tmp.path(), "bad.yaml", "- { node: \"*\", device: 0 }\n");
    let file = write_file(tmp.path(), "bad-map.yaml", &text.replace(layers.to_str().unwrap(), bad.to_str().unwrap()));
    let out = run_flowlab(&["check", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let want = format!("invalid parameter `placer`: device map `{}`: ", bad.display());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&want), "{}", describe(&out));
}

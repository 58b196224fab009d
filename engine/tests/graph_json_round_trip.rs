//! Graph JSON files round-trip exactly and corrupt ones are typed errors
//! naming the file and byte offset.

use flowlab_engine::{DType, EngineError, Graph, Optimizer, Session, SessionOptions, Tensor};

fn model() -> Graph {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [-1, 4]).unwrap();
    let y = g.placeholder("y", DType::I64, [-1]).unwrap();
    let w = g.variable("w", g.random_normal([4, 3], DType::F32, 0.0, 0.1, 5).unwrap()).unwrap();
    let c = g.constant(Tensor::from_vec(vec![0.1f32, -0.2, 1.0 / 3.0], [3]).unwrap()).unwrap();
    let logits = g.device("/cpu:0").bias_add(g.matmul(&x, &w).unwrap(), &c).unwrap();
    let loss = g.reduce_mean(g.sparse_softmax_cross_entropy_with_logits(&logits, &y).unwrap(), &[], false).unwrap();
    Optimizer::Momentum { lr: 0.1, momentum: 0.9 }.minimize(&loss, &[&w]).unwrap();
    g.global_variables_initializer().unwrap();
    g
}

#[test]
fn save_load_save_is_byte_identical_and_the_loaded_graph_runs() {
    let g = model();
    let text = g.to_json();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("g.json");
    g.save_json(&p).unwrap();
    let h = Graph::load_json(&p).unwrap();
    assert_eq!(h.to_json(), text);
    assert_eq!(h.nodes(), g.nodes());
    let s = Session::with_options(&h, SessionOptions { threads: 1, ..Default::default() }).unwrap();
    s.run_named(&[], &[], &["init"]).unwrap();
    let x = Tensor::from_vec(vec![1.0f32; 8], [2, 4]).unwrap();
    let y = Tensor::from_vec(vec![0i64, 2], [2]).unwrap();
    let l0 = s.run_named(&[("x", &x), ("y", &y)], &["Mean"], &["Momentum/train"]).unwrap()[0].scalar_f64().unwrap();
    let l1 = s.run_named(&[("x", &x), ("y", &y)], &["Mean"], &[]).unwrap()[0].scalar_f64().unwrap();
    assert!(l1 < l0);
}

#[test]
fn corrupt_graph_json_names_the_byte_offset() {
    let text = model().to_json();
    let truncated = &text.as_bytes()[..text.len() / 2];
    match Graph::from_json(truncated, "g.json") {
        Err(EngineError::Corrupt { file, offset, .. }) => {
            assert_eq!(file, "g.json");
            // serde_json points at the last byte it read.
            assert!((truncated.len() as u64 - 1..=truncated.len() as u64).contains(&offset), "{offset}");
        }
        other => panic!("expected a corrupt-file error, got {other:?}"),
    }
    let bad = text.replacen("\"op\": \"MatMul\"", "\"op\": \"NoSuchOp\"", 1);
    let e = Graph::from_json(bad.as_bytes(), "g.json").unwrap_err();
    assert_eq!(e.to_string(), "g.json: unknown op 'NoSuchOp' (node 'MatMul')");
    let e = Graph::from_json(b"{\"format\": 7}", "g.json").unwrap_err();
    assert!(e.to_string().starts_with("g.json: corrupt at byte offset 11: invalid type"), "{e}");
}

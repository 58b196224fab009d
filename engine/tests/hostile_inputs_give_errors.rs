//! Inputs an attacker (or a typo) can give the engine through its safe API
//! and its files: sizes that overflow, counts that would exhaust memory,
//! constants whose bytes do not match their type. Each is an error naming
//! the node (and file), never a crash.

use flowlab_engine::kernels::cpu::{Product, matmul};
use flowlab_engine::{DType, EngineError, Graph, Session, Shape, Tensor};

/// 2^62 + 1: times 4 it wraps to 4 in 64-bit arithmetic.
const WRAPS: usize = (1 << 62) + 1;

#[test]
fn a_shape_whose_element_count_overflows_holds_no_tensor() {
    assert_eq!(Shape::new(vec![WRAPS, 4]).checked_num_elements(), None);
    let e = Tensor::from_vec(vec![0f32; 4], [WRAPS, 4]).unwrap_err().to_string();
    assert_eq!(e, "tensor: shape [4611686018427387905, 4] has more elements than this machine can address");
    let e = Tensor::zeros(DType::F32, [WRAPS, 4]).unwrap_err().to_string();
    assert_eq!(e, "cannot allocate a f32[4611686018427387905, 4] tensor: more bytes than this machine can address");
}

#[test]
fn a_huge_but_addressable_tensor_is_an_allocation_error_not_an_abort() {
    // 2^50 f32 = 4 PiB: no machine here has it; the request must fail cleanly.
    let e = Tensor::zeros(DType::F32, [1 << 50]).unwrap_err();
    assert!(matches!(e, EngineError::Alloc { .. }), "{e}");
    assert_eq!(e.to_string(), "cannot allocate a f32 tensor of 1125899906842624 elements: 4503599627370496 bytes");
}

#[test]
fn reshaping_into_a_wrapping_shape_is_refused_when_the_node_is_built() {
    let g = Graph::new();
    let x = g.constant(Tensor::from_vec(vec![1f32; 4], [4]).unwrap()).unwrap();
    let e = g.reshape(&x, &[WRAPS as i64, 4]).unwrap_err().to_string();
    assert_eq!(e, "node 'Reshape' (Reshape): attribute 'shape': [4611686018427387905, 4] has more elements than this machine can address");
}

#[test]
fn a_graph_file_with_a_wrapping_reshape_names_the_file_and_node() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [-1]).unwrap();
    g.reshape(&x, &[2, 2]).unwrap();
    // The file as an attacker would edit it: the Reshape's target shape.
    let mut v: serde_json::Value = serde_json::from_str(&g.to_json()).unwrap();
    let reshape = v["nodes"].as_array_mut().unwrap().iter_mut().find(|n| n["op"] == "Reshape").unwrap();
    let ints = reshape["attrs"]["shape"].as_object_mut().unwrap().values_mut().next().unwrap();
    *ints = serde_json::json!([WRAPS as i64, 4]);
    let json = serde_json::to_string(&v).unwrap();
    let e = Graph::from_json(json.as_bytes(), "g.json").unwrap_err();
    assert!(matches!(e, EngineError::GraphFile { .. }), "{e}");
    let e = e.to_string();
    assert!(e.starts_with("g.json: node 'Reshape' (Reshape): "), "{e}");
}

#[test]
fn a_const_whose_bytes_do_not_fill_its_shape_is_refused_at_load() {
    let g = Graph::new();
    g.constant(Tensor::from_vec(vec![1f32, 2.0], [2]).unwrap()).unwrap();
    let json = g.to_json();
    // Two f32 are 16 hex digits; keep one byte of them.
    let full = "0000803f00000040";
    assert!(json.contains(full), "{json}");
    let e = Graph::from_json(json.replace(full, "00").as_bytes(), "c.json").unwrap_err().to_string();
    assert_eq!(e, "c.json: node 'Const' (Const): attribute 'value': 1 bytes of data for a f32[2] tensor, which needs 8 bytes");
}

#[test]
fn split_counts_that_would_exhaust_memory_are_refused_with_a_short_message() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [-1]).unwrap();
    for n in [100_000_000_000_000usize, 3_000_000] {
        let e = g.split(&x, n, 0).unwrap_err().to_string();
        assert_eq!(e, format!("node 'Split' (Split): attribute 'num_split': {n} outputs is more than a node may have (65536)"));
    }
    // With a known dimension the dimension bounds the count.
    let y = g.placeholder("y", DType::F32, [6]).unwrap();
    assert!(g.split(&y, 4, 0).unwrap_err().to_string().contains("is not divisible into 4 pieces"));
    assert_eq!(g.split(&y, 3, 0).unwrap().len(), 3);
}

#[test]
fn a_fill_of_an_unallocatable_shape_fails_the_step_naming_the_node() {
    let g = Graph::new();
    let v = g.scalar(1.0, DType::F32).unwrap();
    let f = g.op("Fill").input(&v).attr("shape", flowlab_engine::AttrValue::Shape(vec![Some(1usize << 50)].into())).build().unwrap();
    let s = Session::new(&g).unwrap();
    let e = s.run(&[], &[&f], &[]).unwrap_err().to_string();
    assert!(e.starts_with("node 'Fill' (Fill): cannot allocate"), "{e}");
}

#[test]
#[should_panic(expected = "matmul: a has 4 elements, expected 4611686018427387905x4")]
fn the_public_matmul_kernel_refuses_sizes_that_wrap() {
    // m * k wraps to 4 = a.len(): an unchecked product would let gemm read
    // far outside `a`. The checked contract panics before any unsafe code.
    let a = vec![0f32; 4];
    let b = vec![0f32; 4];
    let mut c = vec![0f32; 4];
    matmul(&a, &b, &mut c, Product::new(WRAPS, 1, 4), 1);
}

#[test]
fn a_product_of_empty_operands_whose_output_overflows_is_an_error() {
    // [2^33, 0] x [0, 2^33]: both operands hold no element, the product
    // would hold 2^66.
    let g = Graph::new();
    let a = g.placeholder("a", DType::F32, [-1, 0]).unwrap();
    let b = g.placeholder("b", DType::F32, [0, -1]).unwrap();
    let p = g.matmul(&a, &b).unwrap();
    let s = Session::new(&g).unwrap();
    let (av, bv) = (Tensor::from_vec(Vec::<f32>::new(), [1 << 33, 0]).unwrap(), Tensor::from_vec(Vec::<f32>::new(), [0, 1 << 33]).unwrap());
    let e = s.run(&[(&a, &av), (&b, &bv)], &[&p], &[]).unwrap_err().to_string();
    assert_eq!(e, "node 'MatMul' (MatMul): shape mismatch: the product of [8589934592, 0] and [0, 8589934592] is larger than this machine can address");
}

/// The fused ops the executor makes can also be built by hand (a graph
/// file may hold one): a bad `fused_ops` list or a bias that does not fit
/// the output channels is refused when the node is built, naming it.
#[test]
fn a_hand_built_fused_op_with_bad_attributes_or_bias_is_refused_naming_the_node() {
    use flowlab_engine::AttrValue;
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [1, 4, 4, 2]).unwrap();
    let fused = |name: &str, bias_len: usize, ops: &[&str]| fused_conv(&g, &x, name, bias_len, ops, None);
    assert!(fused("ok", 16, &["BiasAdd", "Relu"]).is_ok());
    let e = fused("f1", 16, &["Relu"]).unwrap_err().to_string();
    assert_eq!(
        e,
        "node 'f1' (_FusedConv2D): attribute 'fused_ops': expected [BiasAdd], [BiasAdd, Relu], [BiasAdd, Add] or [BiasAdd, Add, Relu], got [\"Relu\"]"
    );
    // an Add names a fourth input, the residual
    let e = fused("f3", 16, &["BiasAdd", "Add", "Relu"]).unwrap_err().to_string();
    assert!(e.starts_with("node 'f3' (_FusedConv2D): ") && e.ends_with("fused_ops with Add take 4 inputs, got 3"), "{e}");
    let e = fused("f2", 8, &["BiasAdd"]).unwrap_err().to_string();
    assert!(e.starts_with("node 'f2' (_FusedConv2D): ") && e.contains("bias f32[8] must be a vector of the [1, 4, 4, 16] output channels"), "{e}");
    let e = g
        .op("_FusedMaxPoolGrad")
        .name("p")
        .input(&x)
        .input(&x)
        .attr("ksize", AttrValue::Ints(vec![1, 1]))
        .attr("strides", AttrValue::Ints(vec![1, 1]))
        .attr("padding", AttrValue::Str("SAME".into()))
        .build()
        .unwrap_err()
        .to_string();
    assert_eq!(e, "node 'p' (_FusedMaxPoolGrad): attribute 'fused_ops': expected [ReluGrad], got []");
}

/// A hand-built 3x3 SAME convolution of `x` into 16 channels with a bias of
/// `bias_len`: `_FusedConv2D`, or with `pool_padding` a
/// `_FusedConv2DMaxPool` pooling 2x2 at stride 2.
fn fused_conv(
    g: &Graph,
    x: &flowlab_engine::Output,
    name: &str,
    bias_len: usize,
    ops: &[&str],
    pool_padding: Option<&str>,
) -> Result<flowlab_engine::Output, EngineError> {
    use flowlab_engine::AttrValue;
    let w = g.constant(Tensor::from_vec(vec![0f32; 3 * 3 * 2 * 16], [3, 3, 2, 16]).unwrap()).unwrap();
    let b = g.constant(Tensor::from_vec(vec![0f32; bias_len], [bias_len]).unwrap()).unwrap();
    let op = if pool_padding.is_some() { "_FusedConv2DMaxPool" } else { "_FusedConv2D" };
    let mut node = g
        .op(op)
        .name(name)
        .input(x)
        .input(&w)
        .input(&b)
        .attr("strides", AttrValue::Ints(vec![1, 1]))
        .attr("padding", AttrValue::Str("SAME".into()))
        .attr("fused_ops", AttrValue::Strs(ops.iter().map(|s| s.to_string()).collect()));
    if let Some(p) = pool_padding {
        node = node
            .attr("pool_ksize", AttrValue::Ints(vec![2, 2]))
            .attr("pool_strides", AttrValue::Ints(vec![2, 2]))
            .attr("pool_padding", AttrValue::Str(p.into()));
    }
    node.build()
}

/// The pools' workspace ops (and the pool fused with a convolution), which
/// only the executor's rewrites produce,
/// refuse what they cannot index or size, naming the node; a workspace
/// whose entries name positions outside their windows routes nothing
/// rather than writing out of bounds.
#[test]
fn workspace_pool_ops_refuse_bad_windows_dtypes_and_sizes() {
    use flowlab_engine::AttrValue;
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [1, 4, 4, 2]).unwrap();
    let pool = |name: &str, k: i64| {
        g.op("_MaxPoolWithWorkspace")
            .name(name)
            .input(&x)
            .attr("ksize", AttrValue::Ints(vec![k, k]))
            .attr("strides", AttrValue::Ints(vec![2, 2]))
            .attr("padding", AttrValue::Str("SAME".into()))
            .build()
    };
    assert!(pool("ok", 3).is_ok());
    let e = pool("big", 12).unwrap_err().to_string();
    assert_eq!(e, "node 'big' (_MaxPoolWithWorkspace): attribute 'ksize': a pool's workspace indexes windows of at most 127 positions, got 12x12");
    let grad = |name: &str, ws: &flowlab_engine::Output, dy: &flowlab_engine::Output, hw: i64| {
        g.op("_MaxPoolGradWithWorkspace")
            .name(name)
            .input(ws)
            .input(dy)
            .attr("ksize", AttrValue::Ints(vec![3, 3]))
            .attr("strides", AttrValue::Ints(vec![2, 2]))
            .attr("padding", AttrValue::Str("SAME".into()))
            .attr("input_hw", AttrValue::Ints(vec![hw, hw]))
            .build()
    };
    let dy = g.placeholder("dy", DType::F32, [1, 2, 2, 2]).unwrap();
    let e = grad("f32ws", &dy, &dy, 4).unwrap_err().to_string();
    assert!(e.starts_with("node 'f32ws' (_MaxPoolGradWithWorkspace): ") && e.contains("workspace (input 0) must be i8, got f32"), "{e}");
    // Entries of 100 name no position of a 3x3 window.
    let ws = g.constant(Tensor::from_vec(vec![100i8; 8], [1, 2, 2, 2]).unwrap()).unwrap();
    let e = grad("hw", &ws, &dy, 8).unwrap_err().to_string();
    assert!(e.starts_with("node 'hw' (_MaxPoolGradWithWorkspace): ") && e.contains("workspace [1, 2, 2, 2] is not the pooled shape of a 8x8 input (4x4)"), "{e}");
    // The pool fused with a convolution reads its window from `pool_*` attrs.
    let conv_pool = |name: &str, pool_padding: &str| fused_conv(&g, &x, name, 16, &["BiasAdd", "Relu"], Some(pool_padding));
    let pooled = conv_pool("cp", "VALID").unwrap();
    assert_eq!((pooled.dtype(), pooled.shape().to_string()), (DType::F32, "[1, 2, 2, 16]".to_string()));
    let e = conv_pool("cpf", "FULL").unwrap_err().to_string();
    assert_eq!(e, "node 'cpf' (_FusedConv2DMaxPool): attribute 'pool_padding': 'FULL' is none of SAME, VALID, EXPLICIT");
    let dx = grad("dx", &ws, &dy, 4).unwrap();
    let s = Session::new(&g).unwrap();
    let dyt = Tensor::from_vec(vec![1f32; 8], [1, 2, 2, 2]).unwrap();
    let out = s.run(&[(&dy, &dyt)], &[&dx], &[]).unwrap();
    assert_eq!(out[0].dims(), [1, 4, 4, 2]);
    assert!(out[0].as_slice::<f32>().unwrap().iter().all(|&v| v == 0.0));
}

#[test]
fn a_session_asked_for_more_threads_than_it_gives_a_device_is_refused() {
    use flowlab_engine::{MAX_THREADS, SessionOptions};
    let g = Graph::new();
    g.constant(Tensor::from_vec(vec![1f32], [1]).unwrap()).unwrap();
    let with = |threads: usize| Session::with_options(&g, SessionOptions { threads, ..Default::default() });
    let e = with(100_000).err().map(|e| e.to_string());
    assert_eq!(e.as_deref(), Some("threads: at most 256 per device, got 100000"));
    assert!(with(MAX_THREADS).is_ok());
}

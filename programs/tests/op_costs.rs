//! Every op that does arithmetic reports flops > 0 through `op_cost`, the
//! number the simulator turns into time. Real training graphs (forward,
//! symbolic gradients, optimizer updates) supply the nodes, so the gradient
//! helper ops the autodiff inserts are costed with the shapes they really get.

use flowlab_programs::train::{build_model, ModelKind};
use flowlab_engine::{op_cost, op_names, step_graph, DType, DeviceType, Graph, NodeId, Optimizer, Output, Result, Shape, Tensor};
use std::collections::BTreeMap;

/// Ops that only move, alias or create data without computing on it: a cost
/// of bytes and 0 flops is right for them.
const NO_ARITHMETIC: &[&str] = &[
    "Assign", "Const", "ExpandDims", "Identity", "NoOp", "OnesLike", "Placeholder", "Recv", "Reshape", "ReshapeLike",
    "Send", "Shape", "Squeeze", "StopGradient", "Variable", "ZerosLike",
    // Queues move whole elements between steps: no arithmetic.
    "FIFOQueue", "RandomShuffleQueue", "QueueEnqueue", "QueueEnqueueMany", "QueueDequeue", "QueueDequeueMany",
    "QueueClose", "QueueSize",
    // Control flow forwards tensors (or dead markers) between frames; stacks save them.
    "Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "StackPush", "StackPop",
];

/// A CNN trained with Adam: Conv2D, MaxPool, BiasAdd, Relu, MatMul and their
/// gradients (Conv2DBackpropInput/Filter, MaxPoolGrad, BiasAddGrad, ReluGrad),
/// sparse softmax cross-entropy, ApplyAdam.
/// Returns the training step as (feeds, fetches, targets), for the fused
/// ops the executor makes of it.
fn cnn_training(g: &Graph) -> Result<Step> {
    let x = g.placeholder("x", DType::F32, [16, 64])?;
    let y = g.placeholder("y", DType::I64, [16])?;
    let logits = build_model(g, ModelKind::Cnn, &x, 1)?;
    let loss = g.reduce_mean(g.sparse_softmax_cross_entropy_with_logits(&logits, &y)?, &[], false)?;
    let vars = g.variables();
    let train = Optimizer::adam(1e-3).minimize(&loss, &vars.iter().collect::<Vec<_>>())?;
    Ok((vec![(x.node_id(), 0), (y.node_id(), 0)], vec![(loss.node_id(), 0)], vec![train.node_id()]))
}

type Step = (Vec<(NodeId, usize)>, Vec<(NodeId, usize)>, Vec<NodeId>);

/// Most remaining differentiable ops with their gradients, under SGD and Momentum.
fn many_ops_training(g: &Graph) -> Result<()> {
    // A variable image, so the gradient flows back through AvgPool too.
    let x = g.variable("img", g.random_normal([4, 6, 6, 3], DType::F32, 0.0, 1.0, 1)?)?;
    let bias = g.variable("bias", g.zeros(DType::F32, [5])?)?;
    let w = g.variable("w", g.random_normal([6, 5], DType::F32, 0.0, 0.1, 2)?)?;
    let v = g.variable("v", g.random_uniform([2, 5, 3], DType::F32, 0.5, 1.5, 3)?)?;
    let p = g.avg_pool(&x, [2, 2], [2, 2], false)?;
    let p = g.reshape(&p, &[4, 27])?;
    let p = g.slice(&p, &[0, 0], &[4, 6])?;
    // Broadcasting add: its gradient for `bias` is a SumToShape.
    let h = g.add(g.matmul(&p, &w)?, &bias)?;
    let a = g.sigmoid(&h)?;
    let b = g.tanh(&h)?;
    let c = g.exp(g.neg(g.erf(&a)?)?)?;
    let d = g.log(g.add(g.square(&b)?, g.scalar(1.0, DType::F32)?)?)?;
    let e = g.sqrt(g.add(&c, g.scalar(1.0, DType::F32)?)?)?;
    let f = g.rsqrt(g.add(&e, &d)?)?;
    let q = g.pow(g.add(&c, g.scalar(2.0, DType::F32)?)?, g.scalar(1.5, DType::F32)?)?;
    let m = g.maximum(g.minimum(&f, &q)?, g.div(&a, &e)?)?;
    let m = g.sub(g.mul(&m, &b)?, &a)?;
    let m = g.select(g.greater(&m, &a)?, &m, &a)?;
    let cat = g.concat(&[&m, &a], 1)?;
    let parts = g.split(&cat, 2, 1)?;
    let t = g.transpose(&parts[0], &[1, 0])?;
    let bm = g.batch_matmul(g.reshape(&t, &[1, 5, 4]), g.reshape(&parts[1], &[1, 4, 5]))?;
    let rows = g.constant(Tensor::from_vec(vec![0i64, 2], [2])?)?;
    let gathered = g.gather(g.reshape(&bm, &[5, 5]), &rows)?;
    let sm = g.softmax(&gathered)?;
    let lsm = g.log_softmax(&gathered)?;
    let labels = g.softmax(g.transpose(g.reduce_max(&v, &[0], false), &[1, 0]))?;
    let xent = g.softmax_cross_entropy_with_logits(g.slice(&parts[1], &[0, 0], &[3, 5]), &labels)?;
    let loss = g.add(
        g.add(g.reduce_mean(&sm, &[], false), g.reduce_mean(&lsm, &[], false)),
        g.add(g.reduce_sum(&xent, &[], false), g.reduce_mean(g.expand_dims(&m, 0), &[], false)),
    )?;
    let loss = g.add(&loss, g.reduce_mean(g.reduce_max(&v, &[0], false), &[], false))?;
    // A fused LSTM cell step fed by the layers above: LSTMBlockCell(Grad).
    let wl = g.variable("lstm_w", g.random_uniform([11, 20], DType::F32, -0.1, 0.1, 4)?)?;
    let bl = g.variable("lstm_b", g.zeros(DType::F32, [20])?)?;
    let cell = g.lstm_block_cell(&p, g.zeros(DType::F32, [4, 5])?, &a, &wl, &bl, 1.0)?;
    let loss = g.add(&loss, g.reduce_mean(&cell.h, &[], false))?;
    // Batch norm as one op each way: FusedBatchNorm(Grad).
    let scale = g.variable("bn_scale", g.fill([5], g.scalar(1.0, DType::F32)?)?)?;
    let (normed, _, _) = g.fused_batch_norm(&m, &scale, &bias, 1e-3)?;
    let loss = g.add(&loss, g.reduce_mean(&normed, &[], false))?;
    // Layer norm as one op each way: LayerNorm(Grad).
    let (lnormed, _, _) = g.layer_norm(&m, &scale, &bias, 1e-6)?;
    let loss = g.add(&loss, g.reduce_mean(&lnormed, &[], false))?;
    let vars = [x.clone(), bias.clone(), w.clone(), v.clone(), wl.clone(), bl.clone()];
    let grads = g.gradients(&[&loss], &vars.iter().collect::<Vec<_>>())?;
    let pairs: Vec<(Output, Output)> =
        vars.iter().cloned().zip(grads).filter_map(|(var, gr)| gr.map(|gr| (var, gr))).collect();
    assert_eq!(pairs.len(), vars.len(), "every variable gets a gradient");
    Optimizer::Sgd { lr: 0.1 }.apply_gradients(g, &pairs)?;
    Optimizer::Momentum { lr: 0.1, momentum: 0.9 }.apply_gradients(g, &pairs)?;
    Ok(())
}

#[test]
fn every_arithmetic_op_reports_flops() {
    let g = Graph::new();
    let (feeds, fetches, targets) = cnn_training(&g.scope("cnn")).unwrap();
    many_ops_training(&g.scope("many")).unwrap();
    // op -> (nodes seen, nodes with 0 flops)
    let mut seen: BTreeMap<String, (usize, Vec<String>)> = BTreeMap::new();
    // The graph's nodes, and the fused ones of the CNN's step as a CPU runs it.
    let nodes = g.nodes();
    let (step, _) = step_graph(&g, &feeds, &fetches, &targets, Some(DeviceType::Cpu)).unwrap();
    // The executor's own ops (underscored): fused chains and pools with workspaces.
    let fused: Vec<_> = step.iter().filter(|n| n.op.starts_with('_')).cloned().collect();
    for op in ["_FusedConv2DMaxPool", "_MaxPoolGradWithWorkspace"] {
        assert!(fused.iter().any(|n| n.op == op), "no {op} in {fused:?}");
    }
    for n in nodes.iter().chain(&fused) {
        let concrete = |t: &flowlab_engine::TensorType| {
            (t.dtype, t.shape.to_shape().unwrap_or_else(|| panic!("node {} has a partial shape {:?}", n.name, t.shape)))
        };
        let outs: Vec<(DType, Shape)> = n.outputs.iter().map(concrete).collect();
        // Inputs as the step has them (a gradient may read a rewritten pool's second output).
        let ins: Vec<(DType, Shape)> = n.inputs.iter().map(|&(p, k)| concrete(&step[p].outputs[k])).collect();
        let cost = op_cost(&n.op, &n.attrs, &ins, &outs).unwrap();
        assert!(cost.flops.is_finite() && cost.flops >= 0.0, "{} ({}): flops {}", n.name, n.op, cost.flops);
        let e = seen.entry(n.op.clone()).or_default();
        e.0 += 1;
        if cost.flops == 0.0 && !NO_ARITHMETIC.contains(&n.op.as_str()) {
            e.1.push(n.name.clone());
        }
    }
    let zero: Vec<String> = seen.iter().filter(|(_, (_, z))| !z.is_empty()).map(|(op, (_, z))| format!("{op}: {z:?}")).collect();
    assert!(zero.is_empty(), "arithmetic ops costed at 0 flops:\n{}", zero.join("\n"));
    // The gradient helpers the autodiff inserts are all among the nodes checked.
    for op in [
        "Conv2DBackpropInput", "Conv2DBackpropFilter", "MaxPoolGrad", "AvgPoolGrad", "BiasAddGrad", "ReluGrad",
        "SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits", "ApplyAdam", "ApplyMomentum",
        "ApplyGradientDescent", "GatherGrad", "SliceGrad", "ConcatGrad", "ReductionGrad", "MaxReduceGrad", "SumToShape",
        "LSTMBlockCellGrad", "FusedBatchNormGrad", "LayerNormGrad",
    ] {
        assert!(seen.contains_key(op), "no {op} node in the test graphs; ops seen: {:?}", seen.keys().collect::<Vec<_>>());
    }
    // Every registered op is accounted for: moves data only, was checked in
    // the graphs above, or is checked on hand-made shapes below.
    let unreached: Vec<&str> = op_names()
        .into_iter()
        .filter(|o| !NO_ARITHMETIC.contains(o) && !seen.contains_key(*o) && !hand_costed().iter().any(|(h, _, _)| h == o))
        .collect();
    assert!(unreached.is_empty(), "ops neither in the test graphs nor costed by hand: {unreached:?}");
}

type Io = Vec<(DType, Shape)>;

/// Ops no training graph above contains, with shapes to cost them on.
fn hand_costed() -> Vec<(&'static str, Io, Io)> {
    let f = |dims: &[usize]| (DType::F32, Shape::new(dims.to_vec()));
    let i = |dims: &[usize]| (DType::I64, Shape::new(dims.to_vec()));
    vec![
        ("AssignAdd", vec![f(&[8, 8])], vec![f(&[8, 8])]),
        ("AssignSub", vec![f(&[8, 8])], vec![f(&[8, 8])]),
        ("ScatterAdd", vec![i(&[3]), f(&[3, 8])], vec![f(&[10, 8])]),
        ("Cast", vec![f(&[8])], vec![(DType::F64, Shape::new(vec![8]))]),
        ("Fill", vec![f(&[])], vec![f(&[4, 4])]),
        ("ArgMax", vec![f(&[4, 10])], vec![i(&[4])]),
        ("Equal", vec![f(&[4]), f(&[4])], vec![(DType::Bool, Shape::new(vec![4]))]),
        ("TruncatedNormal", vec![], vec![f(&[16, 16])]),
        ("ModPartition", vec![i(&[6])], vec![i(&[3]), i(&[3]), i(&[3]), i(&[3])]),
        ("DynamicStitch", vec![i(&[3]), i(&[3]), f(&[3, 8]), f(&[3, 8])], vec![f(&[6, 8])]),
        ("LogUniformCandidateSampler", vec![i(&[4])], vec![i(&[16]), f(&[4]), f(&[16])]),
        // The CNN's step routes its pools' gradients from workspaces instead,
        ("_FusedMaxPoolGrad", vec![f(&[1, 4, 4, 3]), f(&[1, 2, 2, 3])], vec![f(&[1, 4, 4, 3])]),
        // Its convolutions run fused with their pools.
        ("_FusedConv2D", vec![f(&[1, 4, 4, 3]), f(&[3, 3, 3, 8]), f(&[8])], vec![f(&[1, 4, 4, 8])]),
        ("_MaxPoolWithWorkspace", vec![f(&[1, 4, 4, 3])], vec![f(&[1, 2, 2, 3]), (DType::I8, Shape::new(vec![1, 2, 2, 3]))]),
    ]
}

#[test]
fn ops_outside_the_training_graphs_report_flops() {
    let attrs = Default::default();
    for (op, ins, outs) in hand_costed() {
        let c = op_cost(op, &attrs, &ins, &outs).unwrap();
        assert!(c.flops > 0.0, "{op}: {c:?}");
        assert!(c.bytes > 0.0, "{op}: {c:?}");
    }
}

/// A pool and its gradient visit the same windows: a 2x2, stride-2 pool of
/// a [1, 8, 8, 3] input has 4*4*3 windows of 4 elements either way (the
/// gradient's output is the larger input shape, which must not count).
#[test]
fn pool_gradients_cost_what_the_forward_pool_costs() {
    use flowlab_engine::{AttrValue, Attrs};
    let mut attrs = Attrs::new();
    attrs.insert("ksize".into(), AttrValue::Ints(vec![2, 2]));
    attrs.insert("strides".into(), AttrValue::Ints(vec![2, 2]));
    let x = (DType::F32, Shape::new(vec![1, 8, 8, 3]));
    let y = (DType::F32, Shape::new(vec![1, 4, 4, 3]));
    for (fwd, grad) in [("MaxPool", "MaxPoolGrad"), ("AvgPool", "AvgPoolGrad")] {
        let f = op_cost(fwd, &attrs, std::slice::from_ref(&x), std::slice::from_ref(&y)).unwrap();
        let g = op_cost(grad, &attrs, &[x.clone(), y.clone()], std::slice::from_ref(&x)).unwrap();
        assert_eq!(f.flops, 4.0 * 48.0, "{fwd}");
        assert_eq!(g.flops, f.flops, "{grad}");
    }
}

/// A fused convolution declares the same kind of work and the same matrix
/// product as the Conv2D it replaces (the simulator rates it by both): in
/// the CNN's step as a CPU runs it, every `_FusedConv2D*` node against the
/// unfused graph's Conv2D with the same filter.
#[test]
fn fused_convolutions_are_priced_as_the_convolutions_they_replace() {
    let g = Graph::new();
    let (feeds, fetches, targets) = cnn_training(&g.scope("cnn")).unwrap();
    let nodes = g.nodes();
    let (step, _) = step_graph(&g, &feeds, &fetches, &targets, Some(DeviceType::Cpu)).unwrap();
    let io = |all: &[flowlab_engine::Node], n: &flowlab_engine::Node| {
        let t = |x: &flowlab_engine::TensorType| (x.dtype, x.shape.to_shape().unwrap());
        let ins: Vec<_> = n.inputs.iter().map(|&(p, k)| t(&all[p].outputs[k])).collect();
        let outs: Vec<_> = n.outputs.iter().map(t).collect();
        op_cost(&n.op, &n.attrs, &ins, &outs).unwrap()
    };
    let mut fused = BTreeMap::new();
    for f in step.iter().filter(|n| n.op.starts_with("_FusedConv2D")) {
        let filter = &step[f.inputs[1].0].name;
        let conv = nodes.iter().find(|n| n.op == "Conv2D" && &nodes[n.inputs[1].0].name == filter).unwrap();
        let (a, b) = (io(&step, f), io(&nodes, conv));
        assert_eq!((a.class, a.dtype, a.gemm), (b.class, b.dtype, b.gemm), "{} ({}) against {}", f.name, f.op, conv.name);
        assert!(a.flops > b.flops, "{}: the fused bias, activation and pool add work", f.name);
        *fused.entry(f.op.as_str()).or_insert(0) += 1;
    }
    // The step's list keeps the chain's first rewrite beside the pooled one.
    assert_eq!(fused, BTreeMap::from([("_FusedConv2D", 2), ("_FusedConv2DMaxPool", 2)]));
}

/// Costs speak the roofline's vocabulary: a product of two f16 matrices is
/// matmul work at f16; an f16 sum is a reduction at f16 with 99 additions
/// per row of 100; an elementwise op or a reduction with no arithmetic (a
/// Reshape, an Identity) moves data; an i64 op is priced at f32.
#[test]
fn costs_carry_the_roofline_class_and_precision() {
    use flowlab_engine::{AttrValue, Attrs};
    use flowlab_hw::{Dtype, OpClass};
    let t = |d: DType, dims: &[usize]| (d, Shape::new(dims.to_vec()));
    let mm = op_cost("MatMul", &Attrs::new(), &[t(DType::F16, &[4, 8]), t(DType::F16, &[8, 2])], &[t(DType::F16, &[4, 2])]).unwrap();
    assert_eq!((mm.class, mm.dtype, mm.flops), (OpClass::Matmul, Dtype::F16, 2.0 * 4.0 * 8.0 * 2.0));
    let mut axes = Attrs::new();
    axes.insert("axes".into(), AttrValue::Ints(vec![1]));
    let sum = op_cost("Sum", &axes, &[t(DType::F16, &[3, 100])], &[t(DType::F16, &[3])]).unwrap();
    assert_eq!((sum.class, sum.dtype), (OpClass::Reduction, Dtype::F16));
    for op in ["Reshape", "Identity"] {
        let c = op_cost(op, &Attrs::new(), &[t(DType::I64, &[6])], &[t(DType::I64, &[6])]).unwrap();
        assert_eq!((c.class, c.dtype, c.flops), (OpClass::DataMovement, Dtype::F32, 0.0), "{op}");
    }
}

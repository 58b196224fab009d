//! The fused LSTM cell: LSTMBlockCell and LSTMBlockCellGrad, as TensorFlow's
//! `tf.contrib.rnn.LSTMBlockCell` (the "block" mode of TF's PTB tutorial).
//!
//! Why fused: one unrolled step of the cell built from primitives is about
//! 13 forward and 25 backward nodes of `[batch, hidden]` (concat, matmul,
//! bias, split, three sigmoids, two tanhs, products); at the sizes of a
//! language model on a CPU their dispatch and memory passes cost as much as
//! the GEMM. Here the forward step is one node (concat, GEMM with the bias
//! as its starting value, activations in one pass over the row) and the
//! backward step is one elementwise node plus the two GEMMs of any dense
//! layer.
//!
//! Contract. Inputs x `[B, I]`, cs_prev `[B, H]`, h_prev `[B, H]`, w
//! `[I + H, 4H]`, b `[4H]`; attr `forget_bias`. z = [x, h_prev]·w + b split
//! into i | ci | f | o; outputs (TF's order) i = σ(z_i), cs = ci·i +
//! cs_prev·f, f = σ(z_f + forget_bias), o = σ(z_o), ci = tanh(z_ci),
//! co = tanh(cs), h = co·o. No peepholes, no cell clipping. Gradients reach
//! every input through every output (the gate outputs too, unlike TF's
//! gradient, which ignores them).

use super::{FLOATS, GradCtx, InferCtx, KernelCtx, Registry, attrs, same_dtype, with_float};
use crate::error::Result;
use crate::graph::{AttrValue, Graph, IntoOutput, Output};
use crate::kernels::cpu::Float;
use crate::kernels::cpu::lstm::{Gates, lstm_backward, lstm_forward};
use crate::kernels::cpu::matmul::{Product, gemm_strided};
use crate::tensor::{PartialShape, Shape, Tensor, TensorType};

/// The seven outputs of one LSTM cell step, named as in TensorFlow.
#[derive(Clone, Debug)]
pub struct LstmCellOutputs {
    /// Input gate σ(z_i).
    pub i: Output,
    /// New cell state.
    pub cs: Output,
    /// Forget gate σ(z_f + forget_bias).
    pub f: Output,
    /// Output gate σ(z_o).
    pub o: Output,
    /// Cell input (candidate) tanh(z_ci).
    pub ci: Output,
    /// tanh of the new cell state.
    pub co: Output,
    /// New hidden state (the cell's output).
    pub h: Output,
}

/// Index of each output in the node's output list.
const I: usize = 0;
const CS: usize = 1;
const F: usize = 2;
const O: usize = 3;
const CI: usize = 4;
const CO: usize = 5;
const H: usize = 6;

/// Merges `d` into `acc` (unknown stays unknown only when both are);
/// `Err(())` when both are known and differ.
fn unify(acc: &mut Option<usize>, d: Option<usize>) -> std::result::Result<(), ()> {
    match (*acc, d) {
        (Some(a), Some(b)) if a != b => Err(()),
        (None, Some(b)) => {
            *acc = Some(b);
            Ok(())
        }
        _ => Ok(()),
    }
}

fn infer_cell(c: &InferCtx) -> Result<Vec<TensorType>> {
    let dt = same_dtype(c, FLOATS)?;
    let [x, cs, h, w, b] = [0, 1, 2, 3, 4].map(|k| c.inputs[k].shape.clone());
    for (name, s, r) in [("x", &x, 2), ("cs_prev", &cs, 2), ("h_prev", &h, 2), ("w", &w, 2), ("b", &b, 1)] {
        if s.rank() != r {
            return Err(c.n.shape_err(format!("{name} must have rank {r}, got {s}")));
        }
    }
    let err = || c.n.shape_err(format!("shapes do not fit an LSTM cell: x {x}, cs_prev {cs}, h_prev {h}, w {w}, b {b} (need [B,I], [B,H], [B,H], [I+H,4H], [4H])"));
    let (mut batch, mut hidden) = (None, None);
    for s in [&x, &cs, &h] {
        unify(&mut batch, s.dims()[0]).map_err(|_| err())?;
    }
    for d in [cs.dims()[1], h.dims()[1], w.dims()[1].map(|v| v / 4), b.dims()[0].map(|v| v / 4)] {
        unify(&mut hidden, d).map_err(|_| err())?;
    }
    for d in [w.dims()[1], b.dims()[0]].into_iter().flatten() {
        if d % 4 != 0 {
            return Err(err());
        }
    }
    if let (Some(xi), Some(hh), Some(rows)) = (x.dims()[1], hidden, w.dims()[0])
        && xi + hh != rows
    {
        return Err(err());
    }
    Ok(vec![TensorType::new(dt, PartialShape::new(vec![batch, hidden])); 7])
}

fn k_cell(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let [x, cs, h, w, b] = [0, 1, 2, 3, 4].map(|k| &c.inputs[k]);
    let ok = x.rank() == 2 && cs.rank() == 2 && h.rank() == 2 && w.rank() == 2 && b.rank() == 1;
    let (bt, xi, hd) = if ok { (x.dims()[0], x.dims()[1], cs.dims()[1]) } else { (0, 0, 0) };
    let fits = ok
        && cs.dims() == [bt, hd]
        && h.dims() == [bt, hd]
        && hd.checked_mul(4).is_some_and(|g| w.dims() == [xi + hd, g] && b.dims() == [g])
        && Shape::new(vec![bt, 4 * hd, xi + hd]).checked_bytes(x.dtype()).is_some();
    if !fits {
        return Err(c.n.shape_err(format!(
            "shapes do not fit an LSTM cell: x {}, cs_prev {}, h_prev {}, w {}, b {} (need [B,I], [B,H], [B,H], [I+H,4H], [4H])",
            x.shape(),
            cs.shape(),
            h.shape(),
            w.shape(),
            b.shape()
        )));
    }
    let forget_bias = c.n.float("forget_bias")?;
    let (k, g) = (xi + hd, 4 * hd);
    with_float!(c, x.dtype(), T => {
        let (xs, hs) = (x.as_slice::<T>()?, h.as_slice::<T>()?);
        let mut xh = Vec::with_capacity(bt * k);
        for r in 0..bt {
            xh.extend_from_slice(&xs[r * xi..(r + 1) * xi]);
            xh.extend_from_slice(&hs[r * hd..(r + 1) * hd]);
        }
        let bias = b.as_slice::<T>()?;
        let mut z = Vec::with_capacity(bt * g);
        for _ in 0..bt {
            z.extend_from_slice(bias);
        }
        gemm_strided(&xh, w.as_slice::<T>()?, &mut z, Product::new(bt, g, k), true, c.threads);
        let a = lstm_forward(&z, cs.as_slice::<T>()?, bt, hd, T::from_f64(forget_bias));
        [a.i, a.cs, a.f, a.o, a.ci, a.co, a.h].into_iter().map(|v| Tensor::from_vec(v, [bt, hd])).collect()
    })
}

/// Inputs of LSTMBlockCellGrad: cs_prev, i, f, o, ci, co, cs_grad, h_grad,
/// then optionally the gradients at i, f, o, ci, co.
const GRAD_INPUTS: usize = 8;
const GRAD_INPUTS_WITH_GATES: usize = 13;

fn infer_cell_grad(c: &InferCtx) -> Result<Vec<TensorType>> {
    let dt = same_dtype(c, FLOATS)?;
    if c.inputs.len() != GRAD_INPUTS && c.inputs.len() != GRAD_INPUTS_WITH_GATES {
        return Err(c.n.shape_err(format!("takes {GRAD_INPUTS} or {GRAD_INPUTS_WITH_GATES} inputs, got {}", c.inputs.len())));
    }
    let mut shape = PartialShape::new(vec![None, None]);
    for (k, t) in c.inputs.iter().enumerate() {
        if t.shape.rank() != 2 || !t.shape.compatible(&shape) {
            return Err(c.n.shape_err(format!("input {k} is {} where every input must be the same [batch, hidden]", t.shape)));
        }
        let d = shape.dims().iter().zip(t.shape.dims()).map(|(a, b)| a.or(*b)).collect();
        shape = PartialShape::new(d);
    }
    let dz = PartialShape::new(vec![shape.dims()[0], shape.dims()[1].map(|h| 4 * h)]);
    Ok(vec![TensorType::new(dt, shape), TensorType::new(dt, dz)])
}

fn k_cell_grad(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let dims = c.inputs[0].dims().to_vec();
    if dims.len() != 2 {
        return Err(c.n.shape_err(format!("cs_prev must be [batch, hidden], got {}", c.inputs[0].shape())));
    }
    if let Some((k, t)) = c.inputs.iter().enumerate().find(|(_, t)| t.dims() != dims.as_slice()) {
        return Err(c.n.shape_err(format!("input {k} is {} where every input must be {}", t.shape(), c.inputs[0].shape())));
    }
    let (bt, hd) = (dims[0], dims[1]);
    with_float!(c, c.inputs[0].dtype(), T => {
        let s: Vec<&[T]> = c.inputs.iter().map(|t| t.as_slice::<T>()).collect::<Result<_>>()?;
        let activations = Gates { i: s[1], f: s[2], o: s[3], ci: s[4], co: s[5] };
        let grads = (s.len() == GRAD_INPUTS_WITH_GATES).then(|| Gates { i: s[8], f: s[9], o: s[10], ci: s[11], co: s[12] });
        let (d_cs, dz) = lstm_backward(s[0], activations, s[6], s[7], grads, bt, hd);
        Ok(vec![Tensor::from_vec(d_cs, [bt, hd])?, Tensor::from_vec(dz, [bt, 4 * hd])?])
    })
}

/// Elements of the first output.
fn cell_elems(c: &super::CostCtx) -> f64 {
    c.outputs.first().map(|(_, s)| s.num_elements()).unwrap_or(0) as f64
}

/// `w` transposed, built once per gradient computation and shared by the
/// gradients of every cell that uses `w` (an unrolled layer's steps).
///
/// `dz · Wᵀ` read through gemm's transposed-operand path took 335 us for
/// the zoo LSTM LM's [32, 512] x [512, 256] (76 us untransposed), and a
/// Transpose per cell 189 us (40 per step, a quarter of the step): one
/// shared Transpose per layer and plain products instead.
fn transposed_kernel(c: &GradCtx, w: &Output) -> Result<Output> {
    let Some(root) = c.g.without_scope_suffix(c.n.name) else {
        return c.g.transpose(w, &[1, 0]);
    };
    let name = format!("{}/transposed", w.name());
    if let Ok(t) = c.g.output_by_name(&root.scoped_name(&name), 0) {
        let n = c.g.node(t.node_id());
        if n.is_some_and(|n| n.op == "Transpose" && n.inputs == [(w.node_id(), w.index())]) {
            return Ok(t);
        }
        return c.g.transpose(w, &[1, 0]);
    }
    root.op("Transpose").name(&name).input(w.clone()).attr("perm", AttrValue::Ints(vec![1, 0])).build()
}

fn grad_cell(c: &GradCtx) -> Result<Vec<Option<Output>>> {
    let (x, cs_prev, h_prev, w) = (&c.inputs[0], &c.inputs[1], &c.inputs[2], &c.inputs[3]);
    let out = c.outputs;
    // Gradients autodiff filled with zeros (the usual case: only cs and h
    // feed the next step) are left out rather than added.
    let gate_grads = [I, F, O, CI, CO];
    let any_gate = gate_grads.iter().any(|&k| c.grads[k].op() != "ZerosLike");
    let mut ins = vec![cs_prev.clone(), out[I].clone(), out[F].clone(), out[O].clone(), out[CI].clone(), out[CO].clone(), c.grads[CS].clone(), c.grads[H].clone()];
    if any_gate {
        ins.extend(gate_grads.iter().map(|&k| c.grads[k].clone()));
    }
    let back = c.g.op("LSTMBlockCellGrad");
    let back = ins.into_iter().fold(back, |b, x| b.input(x)).build_all()?;
    let (d_cs_prev, dz) = (&back[0], &back[1]);
    let xh = c.g.concat(&[x, h_prev], 1)?;
    let dw = c.g.matmul_ex(&xh, dz, true, false)?;
    let dxh = c.g.matmul_ex(dz, &transposed_kernel(c, w)?, false, false)?;
    let split = c.g.op("ConcatGrad").attr("axis", AttrValue::Int(1)).input(dxh).input(x.clone()).input(h_prev.clone()).build_all()?;
    let db = c.g.build1("BiasAddGrad", vec![dz.clone()], attrs! {})?;
    Ok(vec![Some(split[0].clone()), Some(d_cs_prev.clone()), Some(split[1].clone()), Some(dw), Some(db)])
}

pub(crate) fn register(r: &mut Registry) {
    r.def("LSTMBlockCell", 5, Some(5), infer_cell)
        // z [B, 4H] = [x, h] [B, I+H] · W [I+H, 4H]; the gate arithmetic
        // after it is a few operations per output.
        .gemm(|c| {
            let w = c.inputs.get(3)?.1.dims();
            let out = c.outputs.first()?.1.dims();
            if w.len() != 2 || out.len() != 2 {
                return None;
            }
            Some(super::Gemm::plain(out[0], w[1], w[0]))
        })
        // The GEMM (2·B·(I+H)·4H) plus about 12 operations per gate element
        // (three sigmoids, two tanhs, the state update).
        .flops(|c| {
            let (b, k) = c.inputs.first().map(|(_, s)| (s.dims()[0], s.dims()[1])).unwrap_or((0, 0));
            let h = c.inputs.get(1).map(|(_, s)| s.dims()[1]).unwrap_or(0);
            2.0 * b as f64 * (k + h) as f64 * 4.0 * h as f64 + 12.0 * cell_elems(c)
        })
        .grad(grad_cell);
    r.cpu("LSTMBlockCell", FLOATS, k_cell);
    r.def("LSTMBlockCellGrad", GRAD_INPUTS, Some(GRAD_INPUTS_WITH_GATES), infer_cell_grad)
        // About 20 operations per [batch, hidden] element.
        .flops(|c| 20.0 * cell_elems(c));
    r.cpu("LSTMBlockCellGrad", FLOATS, k_cell_grad);
}

impl Graph {
    /// One step of a fused LSTM cell (see the module comment): `x` `[B, I]`,
    /// the previous state `cs_prev`, `h_prev` `[B, H]`, kernel `w`
    /// `[I + H, 4H]` and bias `b` `[4H]` in gate order i, ci, f, o.
    pub fn lstm_block_cell(&self, x: impl IntoOutput, cs_prev: impl IntoOutput, h_prev: impl IntoOutput, w: impl IntoOutput, b: impl IntoOutput, forget_bias: f64) -> Result<LstmCellOutputs> {
        let o = self
            .op("LSTMBlockCell")
            .input(x)
            .input(cs_prev)
            .input(h_prev)
            .input(w)
            .input(b)
            .attr("forget_bias", AttrValue::Float(forget_bias))
            .build_all()?;
        Ok(LstmCellOutputs { i: o[I].clone(), cs: o[CS].clone(), f: o[F].clone(), o: o[O].clone(), ci: o[CI].clone(), co: o[CO].clone(), h: o[H].clone() })
    }
}

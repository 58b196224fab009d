//! Layer 5, the op registry. Each op is defined once — name, arity, shape
//! inference, cost, gradient — in one file per op family; kernels register
//! against the op name per device type and dtype.
//!
//! Contract. The simulator asks this registry for costs ([`op_cost`]), the
//! executor for kernels, autodiff for gradients, and every [`Graph`] for
//! arity and shape inference (through `graph::OpRegistry`). Ops sit above
//! `graph` (gradients build nodes), `kernels` (the CPU arithmetic) and
//! `framework` (Send/Recv use the rendezvous, stateful kernels the variable
//! resources); they never import `runtime` or `train`.

use crate::error::{EngineError, Result};
use crate::framework::Resource;
use crate::graph::{Attrs, Graph, InferCtx, NodeInfo, OpRegistry, Output};
use crate::tensor::{DType, DeviceType, Shape, Tensor, TensorType};
use flowlab_hw::{Dtype, OpClass};
use std::collections::HashMap;
use std::sync::OnceLock;

pub(crate) mod array;
pub(crate) mod basic;
pub(crate) mod control_flow;
pub(crate) mod conv;
pub(crate) mod embedding;
pub(crate) mod math;
pub(crate) mod matmul;
pub(crate) mod nn;
pub(crate) mod batch_norm;
pub(crate) mod layer_norm;
pub(crate) mod random;
pub(crate) mod reduce;
pub(crate) mod rnn;
pub(crate) mod sampled_softmax;
pub(crate) mod sendrecv;
pub(crate) mod queue;
pub(crate) mod state;

/// Arithmetic work and memory traffic of one execution of a node.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct OpCost {
    /// Floating-point operations (a multiply-add counts 2).
    pub flops: f64,
    /// Bytes read from inputs plus bytes written to outputs.
    pub bytes: f64,
    /// What kind of work the op does, in the roofline's classes (an op
    /// without arithmetic moves data).
    pub class: OpClass,
    /// The precision of its arithmetic (the first output's, else the first
    /// input's element type), as the roofline picks a peak rate by it.
    pub dtype: Dtype,
    /// The flops as one matrix product, for ops that are one (plus a few
    /// operations per output).
    pub gemm: Option<Gemm>,
}

/// An op's arithmetic as one product `C[m, n] = A[m, k] · B[k, n]`: the
/// form a systolic array or a table of measured GEMM rates prices.
/// `transposed` says which of A and B the kernel reads transposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Gemm {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub transposed: (bool, bool),
}

impl Gemm {
    /// A product read as laid out (neither operand transposed).
    pub(crate) fn plain(m: usize, n: usize, k: usize) -> Gemm {
        Gemm { m: m as u64, n: n as u64, k: k as u64, transposed: (false, false) }
    }
}

pub(crate) struct CostCtx<'a> {
    pub n: NodeInfo<'a>,
    pub inputs: &'a [(DType, Shape)],
    pub outputs: &'a [(DType, Shape)],
}

/// What a gradient function sees: the forward node and the gradients
/// arriving at its outputs (zeros filled in where an output got none).
pub(crate) struct GradCtx<'a> {
    pub g: &'a Graph,
    pub n: NodeInfo<'a>,
    pub inputs: &'a [Output],
    pub outputs: &'a [Output],
    pub grads: &'a [Output],
}

pub(crate) struct KernelCtx<'a> {
    pub n: NodeInfo<'a>,
    pub inputs: Vec<Tensor>,
    pub threads: usize,
    pub resources: &'a [Resource],
    /// The step's rendezvous and transfer statistics (multi-device steps only).
    pub comm: Option<&'a sendrecv::StepComm<'a>>,
    /// The transfer of a Send or Recv node.
    pub transfer: Option<&'a sendrecv::TransferSpec>,
    /// The step's StackPush / StackPop tapes (steps of graphs with loops).
    pub stacks: Option<&'a control_flow::Stacks>,
    /// Released storage for outputs the kernel overwrites whole.
    pub buffers: Option<&'a crate::framework::BufferPool>,
    /// The device the kernel runs on: its memory and queue.
    pub backend: &'a crate::framework::Backend,
}

impl KernelCtx<'_> {
    /// An output vector of `len` elements with unspecified values (a
    /// released tensor's storage where one fits, else zeros): for kernels
    /// that write every element of their output.
    pub fn overwritten_output<T: crate::tensor::Element>(&self, len: usize) -> Vec<T> {
        match self.buffers {
            Some(pool) => pool.take(len),
            None => vec![T::default(); len],
        }
    }

    /// Input `i`'s elements, to be overwritten as an output, when this
    /// kernel holds the only reference to them: the executor hands a node
    /// the tensor itself when the node is its last reader (TensorFlow's
    /// `forward_input`). `None` when anything else shares them (a feed, a
    /// variable, a view, another reader) or their dtype or length differs.
    /// The input is left empty: read everything else of it first.
    pub fn forward_input<T: crate::tensor::Element>(&mut self, i: usize, len: usize) -> Option<Vec<T>> {
        let s = self.inputs.get_mut(i)?.storage_mut()?;
        if s.dtype() != T::DTYPE || s.len() != len {
            return None;
        }
        T::unwrap_vec(std::mem::replace(s, T::wrap(Vec::new())))
    }

    pub fn var(&self, i: usize) -> Result<&crate::framework::VarSlot> {
        match self.resources.get(i) {
            Some(Resource::Var(v)) => Ok(v),
            _ => Err(self.n.kernel_err(format!("variable resource {i} missing"))),
        }
    }
}

pub(crate) type InferFn = fn(&InferCtx) -> Result<Vec<TensorType>>;
pub(crate) type GradFn = fn(&GradCtx) -> Result<Vec<Option<Output>>>;
pub(crate) type FlopsFn = fn(&CostCtx) -> f64;
pub(crate) type GemmFn = fn(&CostCtx) -> Option<Gemm>;
pub(crate) type KernelFn = fn(&mut KernelCtx) -> Result<Vec<Tensor>>;

/// The definition of one op.
pub(crate) struct OpDef {
    pub min_inputs: usize,
    pub max_inputs: Option<usize>,
    pub infer: InferFn,
    pub grad: Option<GradFn>,
    pub flops: Option<FlopsFn>,
    /// The kind of arithmetic its flops are (matmul, conv, reduction or,
    /// by default, elementwise).
    pub class: OpClass,
    /// Its flops as one matrix product (see [`Gemm`]).
    pub gemm: Option<GemmFn>,
    /// Has state or side effects: never pruned as a duplicate, never constant-folded.
    pub stateful: bool,
    /// Cheap enough to run inline on the thread that made it ready.
    pub cheap: bool,
    /// Its outputs share their input's (or the variable's) buffer: a view,
    /// so its cost moves no bytes.
    pub views: bool,
}

impl OpDef {
    pub fn check_arity(&self, n: &NodeInfo, got: usize) -> Result<()> {
        let ok = got >= self.min_inputs && self.max_inputs.is_none_or(|m| got <= m);
        if ok {
            return Ok(());
        }
        let expected = match self.max_inputs {
            Some(m) if m == self.min_inputs => m.to_string(),
            Some(m) => format!("{}..={}", self.min_inputs, m),
            None => format!("at least {}", self.min_inputs),
        };
        Err(EngineError::Arity { node: n.name.into(), op: n.op.into(), expected, got })
    }
}

/// All op definitions and kernels.
pub(crate) struct Registry {
    ops: HashMap<&'static str, OpDef>,
    /// Kernels by (op, device type, dtype), TensorFlow's
    /// `REGISTER_KERNEL_BUILDER(Name(op).Device(d).TypeConstraint<T>)`; the
    /// dtype is the node's first output's, else its first input's (see
    /// [`kernel_dtype`]), and `None` keys a kernel that takes any dtype.
    kernels: HashMap<(&'static str, DeviceType, Option<DType>), KernelFn>,
}

/// Float dtypes the numeric kernels support.
pub(crate) const FLOATS: &[DType] = &[DType::F32, DType::F64];
/// Dtypes of the arithmetic kernels.
pub(crate) const NUMERIC: &[DType] = &[DType::F32, DType::F64, DType::I32, DType::I64];

impl Registry {
    pub fn op(&self, name: &str) -> Option<&OpDef> {
        self.ops.get(name)
    }
    /// The kernel of op `name` on `dev` for `dtype`: the one registered for
    /// that dtype, else the one that takes any.
    pub fn kernel(&self, name: &str, dev: DeviceType, dtype: Option<DType>) -> Option<KernelFn> {
        let name = self.ops.get_key_value(name)?.0;
        dtype.and_then(|d| self.kernels.get(&(name, dev, Some(d)))).or_else(|| self.kernels.get(&(name, dev, None))).copied()
    }
    /// Whether op `name` has a kernel on `dev` for some dtype.
    pub fn has_kernels(&self, name: &str, dev: DeviceType) -> bool {
        self.kernels.keys().any(|&(n, d, _)| n == name && d == dev)
    }
    /// Registers an op with its shape function; returns it for further settings.
    pub fn def(&mut self, name: &'static str, min: usize, max: Option<usize>, infer: InferFn) -> &mut OpDef {
        self.ops.entry(name).or_insert(OpDef {
            min_inputs: min,
            max_inputs: max,
            infer,
            grad: None,
            flops: None,
            class: OpClass::Elementwise,
            gemm: None,
            stateful: false,
            cheap: false,
            views: false,
        })
    }
    /// Registers a CPU kernel for each of `dtypes` (empty: for any dtype).
    pub fn cpu(&mut self, name: &'static str, dtypes: &'static [DType], compute: KernelFn) {
        self.register_kernel(name, DeviceType::Cpu, dtypes, compute);
    }
    /// Registers a kernel of `device` for each of `dtypes` (empty: for any dtype).
    pub fn register_kernel(&mut self, name: &'static str, device: DeviceType, dtypes: &'static [DType], compute: KernelFn) {
        if dtypes.is_empty() {
            self.kernels.insert((name, device, None), compute);
        }
        for &d in dtypes {
            self.kernels.insert((name, device, Some(d)), compute);
        }
    }
    /// Names of all registered ops, sorted.
    pub fn op_names(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.ops.keys().copied().collect();
        v.sort_unstable();
        v
    }
}

impl OpDef {
    pub fn grad(&mut self, f: GradFn) -> &mut Self {
        self.grad = Some(f);
        self
    }
    pub fn flops(&mut self, f: FlopsFn) -> &mut Self {
        self.flops = Some(f);
        self
    }
    /// Declares the kind of arithmetic: cost models rate the kinds
    /// differently (a GEMM reaches a larger share of a device's peak than a
    /// pass over memory), so each op family declares its own beside its
    /// flops.
    pub fn class(&mut self, class: OpClass) -> &mut Self {
        self.class = class;
        self
    }
    /// Declares the op's flops as one matrix product (see [`Gemm`]).
    pub fn gemm(&mut self, f: GemmFn) -> &mut Self {
        self.gemm = Some(f);
        self
    }
    pub fn stateful(&mut self) -> &mut Self {
        self.stateful = true;
        self
    }
    pub fn cheap(&mut self) -> &mut Self {
        self.cheap = true;
        self
    }
    /// Marks a view (see [`OpDef::views`]); views are cheap too.
    pub fn views(&mut self) -> &mut Self {
        self.views = true;
        self.cheap()
    }
}

/// The process-wide registry of every op family.
pub(crate) fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| {
        let mut r = Registry { ops: HashMap::new(), kernels: HashMap::new() };
        basic::register(&mut r);
        state::register(&mut r);
        math::register(&mut r);
        reduce::register(&mut r);
        array::register(&mut r);
        matmul::register(&mut r);
        nn::register(&mut r);
        batch_norm::register(&mut r);
        layer_norm::register(&mut r);
        conv::register(&mut r);
        random::register(&mut r);
        sendrecv::register(&mut r);
        queue::register(&mut r);
        control_flow::register(&mut r);
        embedding::register(&mut r);
        sampled_softmax::register(&mut r);
        rnn::register(&mut r);
        r
    })
}

impl OpRegistry for Registry {
    fn has_op(&self, op: &str) -> bool {
        self.ops.contains_key(op)
    }
    fn infer(&self, op: &str, ctx: &InferCtx) -> Result<Vec<TensorType>> {
        let def = self.op(op).ok_or_else(|| EngineError::UnknownOp { node: ctx.n.name.into(), op: op.to_string() })?;
        def.check_arity(&ctx.n, ctx.inputs.len())?;
        (def.infer)(ctx)
    }
}

impl Graph {
    /// An empty graph whose nodes are checked against this crate's ops.
    pub fn new() -> Graph {
        Graph::with_registry(registry())
    }
}

impl Default for Graph {
    fn default() -> Self {
        Graph::new()
    }
}

/// Names of all registered ops, sorted.
pub fn op_names() -> Vec<&'static str> {
    registry().op_names()
}

/// The cost of one execution of `op` with the given attributes and concrete
/// input and output types (what the simulator asks for).
pub fn op_cost(op: &str, attrs: &Attrs, inputs: &[(DType, Shape)], outputs: &[(DType, Shape)]) -> Result<OpCost> {
    let def = registry().op(op).ok_or_else(|| EngineError::UnknownOp { node: String::new(), op: op.into() })?;
    // A view (reshape, identity, a variable's read) hands over a buffer.
    let bytes: usize = if def.views { 0 } else { inputs.iter().chain(outputs).map(|(d, s)| d.size_in_bytes() * s.num_elements()).sum() };
    let ctx = CostCtx { n: NodeInfo { name: "", op, attrs }, inputs, outputs };
    let flops = match def.flops {
        Some(f) => f(&ctx),
        None => 0.0,
    };
    let class = match def.class {
        OpClass::Elementwise | OpClass::Reduction if flops == 0.0 => OpClass::DataMovement,
        declared => declared,
    };
    let dtype = outputs.first().or(inputs.first()).map_or(Dtype::F32, |(d, _)| d.compute_dtype());
    Ok(OpCost { flops, bytes: bytes as f64, class, dtype, gemm: def.gemm.and_then(|f| f(&ctx)) })
}

/// flops = one per output element (elementwise ops).
pub(crate) fn flops_per_output(c: &CostCtx) -> f64 {
    c.outputs.iter().map(|(_, s)| s.num_elements() as f64).sum()
}

/// flops = one per input element (reductions).
pub(crate) fn flops_per_input(c: &CostCtx) -> f64 {
    c.inputs.iter().map(|(_, s)| s.num_elements() as f64).sum()
}

// ---- helpers shared by the op files ------------------------------------

/// The dtype the kernel is chosen by: first output's, else first input's.
pub(crate) fn kernel_dtype(outputs: &[TensorType], inputs: &[TensorType]) -> Option<DType> {
    outputs.first().or(inputs.first()).map(|t| t.dtype)
}

/// Requires every input to have the same dtype, and one of `allowed`.
pub(crate) fn same_dtype(c: &InferCtx, allowed: &[DType]) -> Result<DType> {
    let d = c.inputs.first().map(|t| t.dtype).ok_or_else(|| c.n.dtype_err("no inputs"))?;
    for (i, t) in c.inputs.iter().enumerate() {
        if t.dtype != d {
            return Err(c.n.dtype_err(format!("input 0 is {} but input {} is {}", d, i, t.dtype)));
        }
    }
    if !allowed.is_empty() && !allowed.contains(&d) {
        return Err(c.n.dtype_err(format!("dtype {d} not supported (supported: {})", names(allowed))));
    }
    Ok(d)
}

pub(crate) fn names(ds: &[DType]) -> String {
    ds.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
}

/// Dispatches `$body` with `$T` bound to the Rust type of a float dtype.
macro_rules! with_float {
    ($ctx:expr, $dt:expr, $T:ident => $body:expr) => {
        match $dt {
            $crate::tensor::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::tensor::DType::F64 => {
                type $T = f64;
                $body
            }
            d => Err($ctx.n.dtype_err(format!("dtype {d} not supported by this kernel"))),
        }
    };
}
pub(crate) use with_float;

/// Like [`with_float`] over f32, f64, i32, i64.
macro_rules! with_numeric {
    ($ctx:expr, $dt:expr, $T:ident => $body:expr) => {
        match $dt {
            $crate::tensor::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::tensor::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::tensor::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::tensor::DType::I64 => {
                type $T = i64;
                $body
            }
            d => Err($ctx.n.dtype_err(format!("dtype {d} not supported by this kernel"))),
        }
    };
}
pub(crate) use with_numeric;

/// Convenience: build an attrs map.
macro_rules! attrs {
    ($($k:expr => $v:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut a = $crate::graph::Attrs::new();
        $(a.insert($k.to_string(), $v);)*
        a
    }};
}
pub(crate) use attrs;

/// Dispatches `$body` with `$T` bound to the Rust type of any dtype.
macro_rules! with_any {
    ($dt:expr, $T:ident => $body:expr) => {
        match $dt {
            $crate::tensor::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::tensor::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::tensor::DType::F16 => {
                type $T = half::f16;
                $body
            }
            $crate::tensor::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            $crate::tensor::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::tensor::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::tensor::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::tensor::DType::Bool => {
                type $T = bool;
                $body
            }
        }
    };
}
pub(crate) use with_any;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Attrs;

    /// `forward_input` hands over the memory of an input nothing else
    /// holds, and refuses one that is shared or of another dtype or length.
    #[test]
    fn an_input_is_forwarded_only_when_the_kernel_holds_it_alone() {
        let attrs = Attrs::new();
        let backend = crate::framework::Backend::Host { pool: None };
        let alone = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]).unwrap();
        let ptr = alone.as_slice::<f32>().unwrap().as_ptr();
        let shared = Tensor::from_vec(vec![4.0f32, 5.0, 6.0], [3]).unwrap();
        let mut c = KernelCtx {
            n: NodeInfo { name: "n", op: "Neg", attrs: &attrs },
            inputs: vec![alone, shared.clone()],
            threads: 1,
            resources: &[],
            comm: None,
            transfer: None,
            stacks: None,
            buffers: None,
            backend: &backend,
        };
        assert!(c.forward_input::<f64>(0, 3).is_none());
        assert!(c.forward_input::<f32>(0, 4).is_none());
        assert!(c.forward_input::<f32>(1, 3).is_none());
        let v = c.forward_input::<f32>(0, 3).unwrap();
        assert_eq!((v.as_ptr(), v), (ptr, vec![1.0, 2.0, 3.0]));
        assert_eq!(shared.to_vec::<f32>().unwrap(), vec![4.0, 5.0, 6.0]);
    }
}

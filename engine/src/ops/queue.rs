//! Queue ops: a FIFOQueue or RandomShuffleQueue node declares a queue; the
//! ops that use it (QueueEnqueue, QueueEnqueueMany, QueueDequeue,
//! QueueDequeueMany, QueueClose, QueueSize) name it in the attr `queue` and
//! carry its spec, so each resolves the session's queue by itself (also in
//! a partition that does not hold the declaring node) and the placer keeps
//! them on the queue's device. Queue ops have no gradient.

use super::{InferCtx, KernelCtx, Registry};
use crate::error::Result;
use crate::framework::{Queue, QueueSpec, Resource};
use crate::graph::{AttrValue, Attrs, Graph, NodeInfo, Output};
use crate::tensor::{CpuStorage, DType, PartialShape, Shape, Tensor, TensorType};
use std::sync::Arc;

/// A queue declared in a graph; its methods build the ops that use it, on
/// the device scope the queue was declared in.
#[derive(Clone, Debug)]
pub struct QueueHandle {
    graph: Graph,
    name: String,
    /// The spec attrs plus `queue`, copied onto every op.
    attrs: Attrs,
}

impl Graph {
    /// A first-in first-out queue of up to `capacity` elements, each a
    /// tuple of tensors of `dtypes` and `shapes`.
    pub fn fifo_queue(&self, name: &str, capacity: usize, dtypes: &[DType], shapes: &[PartialShape]) -> Result<QueueHandle> {
        self.declare_queue("FIFOQueue", name, capacity, dtypes, shapes, None)
    }

    /// A queue that dequeues uniformly at random among its elements while
    /// keeping at least `min_after_dequeue` of them (until it is closed),
    /// with a seeded, repeatable order.
    pub fn random_shuffle_queue(
        &self,
        name: &str,
        capacity: usize,
        min_after_dequeue: usize,
        seed: u64,
        dtypes: &[DType],
        shapes: &[PartialShape],
    ) -> Result<QueueHandle> {
        self.declare_queue("RandomShuffleQueue", name, capacity, dtypes, shapes, Some((min_after_dequeue, seed)))
    }

    fn declare_queue(
        &self,
        op: &str,
        name: &str,
        capacity: usize,
        dtypes: &[DType],
        shapes: &[PartialShape],
        shuffle: Option<(usize, u64)>,
    ) -> Result<QueueHandle> {
        let mut attrs = Attrs::new();
        attrs.insert("capacity".into(), AttrValue::Int(i64::try_from(capacity).unwrap_or(i64::MAX)));
        attrs.insert("component_types".into(), AttrValue::DTypes(dtypes.to_vec()));
        attrs.insert("shapes".into(), AttrValue::Shapes(shapes.to_vec()));
        if let Some((m, seed)) = shuffle {
            attrs.insert("min_after_dequeue".into(), AttrValue::Int(i64::try_from(m).unwrap_or(i64::MAX)));
            attrs.insert("seed".into(), AttrValue::Int(seed as i64));
        }
        let mut b = self.op(op).name(name);
        for (k, v) in &attrs {
            b = b.attr(k, v.clone());
        }
        let node = b.build()?;
        attrs.insert("queue".into(), AttrValue::Str(node.name()));
        Ok(QueueHandle { graph: self.clone(), name: node.name(), attrs })
    }
}

impl QueueHandle {
    pub fn name(&self) -> &str {
        &self.name
    }

    fn op(&self, op: &str, inputs: &[&Output]) -> crate::graph::OpBuilder {
        let mut b = self.graph.op(op);
        for i in inputs {
            b = b.input(*i);
        }
        for (k, v) in &self.attrs {
            b = b.attr(k, v.clone());
        }
        b
    }

    /// Adds one element (one tensor per component); blocks while full.
    pub fn enqueue(&self, components: &[&Output]) -> Result<Output> {
        self.op("QueueEnqueue", components).build()
    }

    /// Adds the rows of the components (split along dimension 0) as
    /// elements.
    pub fn enqueue_many(&self, components: &[&Output]) -> Result<Output> {
        self.op("QueueEnqueueMany", components).build()
    }

    /// Removes one element; blocks while empty.
    pub fn dequeue(&self) -> Result<Vec<Output>> {
        self.op("QueueDequeue", &[]).build_all()
    }

    /// Removes `n` elements, stacked along a new dimension 0.
    pub fn dequeue_many(&self, n: usize) -> Result<Vec<Output>> {
        self.op("QueueDequeueMany", &[]).attr("n", AttrValue::Int(i64::try_from(n).unwrap_or(i64::MAX))).build_all()
    }

    /// Closes the queue: no more enqueues; dequeues drain it, then fail.
    pub fn close(&self) -> Result<Output> {
        self.op("QueueClose", &[]).build()
    }

    /// The number of elements in the queue (i32 scalar).
    pub fn size(&self) -> Result<Output> {
        self.op("QueueSize", &[]).build()
    }
}

/// The queue spec from a node's attrs (with errors naming the node).
pub(crate) fn spec_of(n: &NodeInfo) -> Result<QueueSpec> {
    let capacity = n.int("capacity")?;
    if capacity < 1 {
        return Err(n.attr_err("capacity", format!("must be at least 1, got {capacity}")));
    }
    let dtypes = n.dtypes("component_types")?.to_vec();
    let shapes = n.shapes("shapes")?.to_vec();
    if dtypes.is_empty() || dtypes.len() != shapes.len() {
        return Err(n.attr_err("shapes", format!("{} shapes for {} component types (at least one each)", shapes.len(), dtypes.len())));
    }
    let shuffle = match n.attrs.get("min_after_dequeue") {
        None => None,
        Some(_) => {
            let m = n.int("min_after_dequeue")?;
            if m < 0 || m >= capacity {
                return Err(n.attr_err("min_after_dequeue", format!("must be in [0, capacity {capacity}), got {m}")));
            }
            Some((m as usize, n.int("seed")? as u64))
        }
    };
    Ok(QueueSpec { capacity: capacity as usize, dtypes, shapes, shuffle })
}

fn queue<'a>(c: &'a KernelCtx) -> Result<&'a Arc<Queue>> {
    match c.resources.iter().find_map(|r| if let Resource::Queue(q) = r { Some(q) } else { None }) {
        Some(q) => Ok(q),
        None => Err(c.n.kernel_err("queue resource missing")),
    }
}

fn infer_declare(c: &InferCtx) -> Result<Vec<TensorType>> {
    spec_of(&c.n)?;
    Ok(vec![])
}

/// Element types as the graph sees them: the declared component shapes,
/// with a leading dimension of `batch` for the *Many ops.
fn components(c: &InferCtx, batch: Option<Option<usize>>) -> Result<Vec<TensorType>> {
    let s = spec_of(&c.n)?;
    Ok(s.dtypes
        .iter()
        .zip(&s.shapes)
        .map(|(&d, sh)| {
            let dims = match batch {
                None => sh.dims().to_vec(),
                Some(b) => std::iter::once(b).chain(sh.dims().iter().copied()).collect(),
            };
            TensorType { dtype: d, shape: PartialShape::new(dims) }
        })
        .collect())
}

fn infer_enqueue(c: &InferCtx, many: bool) -> Result<Vec<TensorType>> {
    let want = components(c, if many { Some(None) } else { None })?;
    if c.inputs.len() != want.len() {
        return Err(c.n.shape_err(format!("the queue holds {} components, {} inputs given", want.len(), c.inputs.len())));
    }
    for (i, (got, w)) in c.inputs.iter().zip(&want).enumerate() {
        if got.dtype != w.dtype || !got.shape.compatible(&w.shape) {
            return Err(c.n.shape_err(format!("input {i} is {got}, the queue's component {i} needs {}", w)));
        }
    }
    Ok(vec![])
}

/// Splits each input along dimension 0 into one element per row (bytes
/// copied exactly, whatever the dtype).
fn unstack(c: &KernelCtx) -> Result<Vec<Vec<Tensor>>> {
    let n = c.inputs[0].dims().first().copied().unwrap_or(0);
    let mut out = vec![Vec::with_capacity(c.inputs.len()); n];
    for t in &c.inputs {
        if t.dims().first() != Some(&n) {
            return Err(c.n.shape_err(format!("every input needs {n} rows along dimension 0, got {}", t.shape())));
        }
        let row_shape = Shape::new(t.dims()[1..].to_vec());
        let row_bytes = row_shape.num_elements() * t.dtype().size_in_bytes();
        let bytes = t.cpu()?.to_le_bytes();
        for (i, elem) in out.iter_mut().enumerate() {
            elem.push(from_bytes(c, t.dtype(), &bytes[i * row_bytes..(i + 1) * row_bytes], row_shape.clone())?);
        }
    }
    Ok(out)
}

fn from_bytes(c: &KernelCtx, dtype: DType, b: &[u8], shape: Shape) -> Result<Tensor> {
    let s = CpuStorage::from_le_bytes(dtype, b).ok_or_else(|| c.n.kernel_err(format!("bytes do not decode as {dtype}")))?;
    Tensor::from_vec_storage(s, shape)
}

fn count_attr(c: &KernelCtx) -> Result<usize> {
    let n = c.n.int("n")?;
    if n < 1 {
        return Err(c.n.attr_err("n", format!("must be at least 1, got {n}")));
    }
    Ok(n as usize)
}

pub(crate) fn register(r: &mut Registry) {
    for name in ["FIFOQueue", "RandomShuffleQueue"] {
        r.def(name, 0, Some(0), infer_declare).stateful();
        r.cpu(name, &[], |_| Ok(vec![]));
    }
    r.def("QueueEnqueue", 1, None, |c| infer_enqueue(c, false)).stateful();
    r.cpu("QueueEnqueue", &[], |c| {
        queue(c)?.enqueue(c.n.name, vec![c.inputs.clone()])?;
        Ok(vec![])
    });
    r.def("QueueEnqueueMany", 1, None, |c| infer_enqueue(c, true)).stateful();
    r.cpu("QueueEnqueueMany", &[], |c| {
        let elems = unstack(c)?;
        queue(c)?.enqueue(c.n.name, elems)?;
        Ok(vec![])
    });
    r.def("QueueDequeue", 0, Some(0), |c| components(c, None)).stateful();
    r.cpu("QueueDequeue", &[], |c| queue(c)?.dequeue(c.n.name, 1));
    r.def("QueueDequeueMany", 0, Some(0), |c| {
        let n = c.n.int("n")?;
        components(c, Some(usize::try_from(n).ok()))
    })
    .stateful();
    r.cpu("QueueDequeueMany", &[], |c| {
        let n = count_attr(c)?;
        let q = queue(c)?;
        let elems = q.dequeue(c.n.name, n)?;
        stack_components(c, &elems, q.spec.dtypes.len(), n)
    });
    r.def("QueueClose", 0, Some(0), |c| {
        spec_of(&c.n)?;
        Ok(vec![])
    })
    .stateful();
    r.cpu("QueueClose", &[], |c| {
        queue(c)?.close();
        Ok(vec![])
    });
    r.def("QueueSize", 0, Some(0), |c| {
        spec_of(&c.n)?;
        Ok(vec![TensorType::new(DType::I32, PartialShape::scalar())])
    })
    .stateful();
    r.cpu("QueueSize", &[], |c| Ok(vec![Tensor::scalar(queue(c)?.size() as i32)]));
}

/// Stacks dequeued elements (element-major: e0c0, e0c1, e1c0, ...) into
/// one tensor per component with a new leading dimension of `n`.
fn stack_components(c: &KernelCtx, elems: &[Tensor], k: usize, n: usize) -> Result<Vec<Tensor>> {
    let mut out = Vec::with_capacity(k);
    for j in 0..k {
        let first = &elems[j];
        let mut bytes = Vec::with_capacity(n * first.size_in_bytes());
        for e in 0..n {
            let t = &elems[e * k + j];
            if t.shape() != first.shape() {
                return Err(c.n.shape_err(format!("component {j} has shapes {} and {}: cannot stack", first.shape(), t.shape())));
            }
            bytes.extend(t.cpu()?.to_le_bytes());
        }
        let dims: Vec<usize> = std::iter::once(n).chain(first.dims().iter().copied()).collect();
        out.push(from_bytes(c, first.dtype(), &bytes, Shape::new(dims))?);
    }
    Ok(out)
}

//! Sharded embeddings (paper section 4.2): ModPartition and DynamicStitch,
//! the lookup over a table split into shards (`embedding_lookup`) and the
//! sparse SGD update that touches only the rows a batch used.
//!
//! Contract. Row `i` of the logical table lives in shard `i % P` at row
//! `i / P` (TensorFlow's "mod" partition strategy). `ModPartition(ids)`
//! splits a batch's ids by shard: for each shard its local row ids and the
//! positions in the batch they came from. Each shard is gathered on its own
//! device; `DynamicStitch(positions..., rows...)` puts the rows back in batch
//! order. Its gradient gathers the incoming gradient by the same positions.

use super::Registry;
use crate::error::{EngineError, Result};
use crate::graph::{AttrValue, Graph, IntoOutput, Output};
use crate::tensor::{DType, PartialShape, Tensor, TensorType};

fn ids_of(c: &super::KernelCtx, t: &Tensor) -> Result<Vec<i64>> {
    match t.dtype() {
        DType::I32 => Ok(t.to_vec::<i32>()?.into_iter().map(i64::from).collect()),
        DType::I64 => t.to_vec::<i64>(),
        d => Err(c.n.dtype_err(format!("ids must be i32 or i64, got {d}"))),
    }
}

pub(crate) fn register(r: &mut Registry) {
    // ModPartition(ids) -> local ids of shard 0..P, then positions of shard 0..P.
    r.def("ModPartition", 1, Some(1), |c| {
        let p = c.n.int("num_shards")?;
        if p < 1 {
            return Err(c.n.attr_err("num_shards", format!("must be at least 1, got {p}")));
        }
        let t = &c.inputs[0];
        if !matches!(t.dtype, DType::I32 | DType::I64) || t.shape.rank() != 1 {
            return Err(c.n.shape_err(format!("ids must be a vector of i32 or i64, got {t}")));
        }
        Ok(vec![TensorType::new(DType::I64, PartialShape::new(vec![None])); 2 * p as usize])
    })
    .cheap()
    // One division and remainder per id.
    .flops(super::flops_per_input);
    r.cpu("ModPartition", &[], |c| {
        let p = c.n.int("num_shards")? as usize;
        let ids = ids_of(c, &c.inputs[0])?;
        let mut local = vec![Vec::new(); p];
        let mut pos = vec![Vec::new(); p];
        for (k, &i) in ids.iter().enumerate() {
            if i < 0 {
                return Err(c.n.kernel_err(format!("embedding id {i} (position {k}) is negative")));
            }
            let s = (i as usize) % p;
            local[s].push(i / p as i64);
            pos[s].push(k as i64);
        }
        let mut out = Vec::with_capacity(2 * p);
        for v in local.into_iter().chain(pos) {
            let n = v.len();
            out.push(Tensor::from_vec(v, [n])?);
        }
        Ok(out)
    });

    // DynamicStitch(positions_0..P, rows_0..P): out[positions_s[k]] = rows_s[k].
    r.def("DynamicStitch", 2, None, |c| {
        let n = c.inputs.len();
        if n % 2 != 0 {
            return Err(c.n.shape_err(format!("needs as many position vectors as row blocks, got {n} inputs")));
        }
        let p = n / 2;
        let first = &c.inputs[p];
        for (k, t) in c.inputs[p..].iter().enumerate() {
            if t.dtype != first.dtype || t.shape.rank() != first.shape.rank() || t.shape.dims()[1..] != first.shape.dims()[1..] {
                return Err(c.n.shape_err(format!("row block {k} is {t} but block 0 is {first}")));
            }
        }
        let mut d = vec![c.n.attrs.get("size").and_then(|a| if let AttrValue::Int(v) = a { Some(*v as usize) } else { None })];
        d.extend_from_slice(&first.shape.dims()[1.min(first.shape.rank())..]);
        Ok(vec![TensorType { dtype: first.dtype, shape: PartialShape::new(d) }])
    })
    .cheap()
    // A copy per output element, as Gather.
    .flops(super::flops_per_output)
    .grad(|c| {
        let p = c.inputs.len() / 2;
        let mut out = vec![None; p];
        for pos in &c.inputs[..p] {
            out.push(Some(c.g.gather(&c.grads[0], pos)?));
        }
        Ok(out)
    });
    r.cpu("DynamicStitch", &[], |c| {
        let p = c.inputs.len() / 2;
        let positions: Vec<Vec<i64>> = c.inputs[..p].iter().map(|t| ids_of(c, t)).collect::<Result<_>>()?;
        let n: usize = positions.iter().map(|v| v.len()).sum();
        let first = &c.inputs[p];
        let row: usize = first.dims().get(1..).map_or(1, |d| d.iter().product());
        let mut od = vec![n];
        od.extend_from_slice(first.dims().get(1..).unwrap_or(&[]));
        super::with_any!(first.dtype(), T => {
            let mut out = vec![T::default(); n * row];
            let mut seen = vec![false; n];
            for (pos, rows) in positions.iter().zip(&c.inputs[p..]) {
                let s = rows.as_slice::<T>()?;
                if s.len() != pos.len() * row {
                    return Err(c.n.kernel_err(format!("{} positions for a row block {}", pos.len(), rows.shape())));
                }
                for (k, &i) in pos.iter().enumerate() {
                    if i < 0 || i as usize >= n || seen[i as usize] {
                        return Err(c.n.kernel_err(format!("position {i} is out of range or repeated (the positions must cover 0..{n} once)")));
                    }
                    seen[i as usize] = true;
                    out[i as usize * row..(i as usize + 1) * row].copy_from_slice(&s[k * row..(k + 1) * row]);
                }
            }
            Ok(vec![Tensor::from_vec(out, od)?])
        })
    });
}

impl Graph {
    /// Rows `ids` of the table split over `shards` (row i in shard i % P at
    /// row i / P); each shard is gathered on its own device. An id outside
    /// the table is an error naming the Gather (or ModPartition, if negative).
    pub fn embedding_lookup(&self, shards: &[&Output], ids: impl IntoOutput) -> Result<Output> {
        let ids = ids.into_output()?;
        let p = shards.len();
        if p == 0 {
            return Err(EngineError::Shape { node: ids.name(), op: "embedding_lookup".into(), detail: "no shards".into() });
        }
        let parts = self.op("ModPartition").input(&ids).attr("num_shards", AttrValue::Int(p as i64)).build_all()?;
        let mut b = self.op("DynamicStitch");
        if let Some(n) = ids.shape().dims().first().copied().flatten() {
            b = b.attr("size", AttrValue::Int(n as i64));
        }
        for pos in &parts[p..] {
            b = b.input(pos);
        }
        for (s, shard) in shards.iter().enumerate() {
            let dev = shard.graph().node(shard.node_id()).map(|n| n.device).unwrap_or_default();
            let gs = if dev.is_empty() { self.clone() } else { self.device(&dev) };
            b = b.input(gs.gather(*shard, &parts[s])?);
        }
        b.build()
    }

    /// Sparse SGD on a sharded table: for each id of the batch,
    /// `table[id] -= lr * d_rows[k]` (duplicates add up), each shard updated
    /// on its own device; rows no id names are not touched. `d_rows` is the
    /// gradient of the loss with respect to the looked-up rows.
    pub fn embedding_sgd(&self, shards: &[&Output], ids: impl IntoOutput, d_rows: &Output, lr: f64) -> Result<Output> {
        let ids = ids.into_output()?;
        let p = shards.len();
        let parts = self.op("ModPartition").input(&ids).attr("num_shards", AttrValue::Int(p as i64)).build_all()?;
        let mut updates = Vec::with_capacity(p);
        for (s, shard) in shards.iter().enumerate() {
            let dev = shard.graph().node(shard.node_id()).map(|n| n.device).unwrap_or_default();
            let gs = if dev.is_empty() { self.clone() } else { self.device(&dev) };
            let rows = gs.gather(d_rows, &parts[p + s])?;
            let step = gs.mul(&rows, gs.scalar(-lr, d_rows.dtype())?)?;
            updates.push(gs.scatter_add(shard, &parts[s], step)?);
        }
        let mut b = self.op("NoOp").name(&format!("embedding_sgd_{}", self.num_nodes()));
        for u in &updates {
            b = b.control_input(u);
        }
        b.build()
    }
}

//! Seeded random initializers: RandomNormal, RandomUniform, TruncatedNormal.
//! Attrs: `shape` (fully known), `dtype`, `seed`, and `mean`/`stddev` or
//! `minval`/`maxval`. The n-th execution of a node in a session draws from
//! ChaCha8 stream n of its seed, so the numbers depend only on the seed and
//! the run count, never on threads or timing.

use super::{FLOATS, KernelCtx, Registry, Resource};
use crate::graph::AttrValue;
use crate::tensor::DType;
use crate::error::Result;
use crate::graph::{Graph, Output};
use crate::tensor::TensorType;
use crate::tensor::{PartialShape, Shape};
use crate::tensor::Tensor;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

#[derive(Clone, Copy)]
enum Dist {
    Normal,
    Uniform,
    Truncated,
}

/// The generator of a stateful random op's run: the node's `seed`, on the
/// stream of this run (the op's counter resource counts its runs, so every
/// run draws new numbers and a seed replays the same sequence of runs).
pub(crate) fn run_rng(c: &KernelCtx, seed: u64) -> ChaCha8Rng {
    let run = match c.resources.first() {
        Some(Resource::Rng(r)) => {
            let mut g = r.lock();
            let n = *g;
            *g += 1;
            n
        }
        _ => 0,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(run);
    rng
}

fn k_random(c: &mut KernelCtx, dist: Dist) -> Result<Vec<Tensor>> {
    let shape = c.n.shape("shape")?.to_shape().ok_or_else(|| c.n.attr_err("shape", "must be fully known"))?;
    let seed = c.n.int("seed")? as u64;
    let mut rng = run_rng(c, seed);
    let n = shape.num_elements();
    let v: Vec<f64> = match dist {
        Dist::Normal => {
            let (m, s) = (c.n.float("mean")?, c.n.float("stddev")?);
            (0..n).map(|_| m + s * rng.sample::<f64, _>(StandardNormal)).collect()
        }
        Dist::Truncated => {
            let (m, s) = (c.n.float("mean")?, c.n.float("stddev")?);
            (0..n)
                .map(|_| loop {
                    let z: f64 = rng.sample(StandardNormal);
                    if z.abs() <= 2.0 {
                        break m + s * z;
                    }
                })
                .collect()
        }
        Dist::Uniform => {
            let (lo, hi) = (c.n.float("minval")?, c.n.float("maxval")?);
            (0..n).map(|_| lo + (hi - lo) * rng.random::<f64>()).collect()
        }
    };
    Ok(vec![Tensor::from_f64s(c.n.dtype("dtype")?, &v, shape)?])
}

pub(crate) fn register(r: &mut Registry) {
    let infer = |c: &super::InferCtx| -> Result<Vec<TensorType>> {
        let d = c.n.dtype("dtype")?;
        if !FLOATS.contains(&d) {
            return Err(c.n.dtype_err(format!("random values need f32 or f64, got {d}")));
        }
        let s = c.n.shape("shape")?;
        if s.to_shape().is_none() {
            return Err(c.n.attr_err("shape", format!("{s} must be fully known")));
        }
        c.n.int("seed")?;
        Ok(vec![TensorType { dtype: d, shape: s.clone() }])
    };
    for name in ["RandomNormal", "RandomUniform", "TruncatedNormal"] {
        r.def(name, 0, Some(0), infer).stateful().flops(|c| 20.0 * super::flops_per_output(c));
    }
    r.cpu("RandomNormal", FLOATS, |c| k_random(c, Dist::Normal));
    r.cpu("RandomUniform", FLOATS, |c| k_random(c, Dist::Uniform));
    r.cpu("TruncatedNormal", FLOATS, |c| k_random(c, Dist::Truncated));
}

fn random_node(g: &Graph, op: &str, shape: &Shape, dtype: DType, seed: u64, a: (&str, f64), b: (&str, f64)) -> Result<Output> {
    g.op(op)
        .attr("shape", AttrValue::Shape(PartialShape::from(shape)))
        .attr("dtype", AttrValue::DType(dtype))
        .attr("seed", AttrValue::Int(seed as i64))
        .attr(a.0, AttrValue::Float(a.1))
        .attr(b.0, AttrValue::Float(b.1))
        .build()
}

impl Graph {
    /// Normal(mean, stddev) values, seeded.
    pub fn random_normal(&self, shape: impl Into<Shape>, dtype: DType, mean: f64, stddev: f64, seed: u64) -> Result<Output> {
        random_node(self, "RandomNormal", &shape.into(), dtype, seed, ("mean", mean), ("stddev", stddev))
    }
    /// Uniform values in [minval, maxval), seeded.
    pub fn random_uniform(&self, shape: impl Into<Shape>, dtype: DType, minval: f64, maxval: f64, seed: u64) -> Result<Output> {
        random_node(self, "RandomUniform", &shape.into(), dtype, seed, ("minval", minval), ("maxval", maxval))
    }
    /// Normal values redrawn until within two standard deviations, seeded.
    pub fn truncated_normal(&self, shape: impl Into<Shape>, dtype: DType, mean: f64, stddev: f64, seed: u64) -> Result<Output> {
        random_node(self, "TruncatedNormal", &shape.into(), dtype, seed, ("mean", mean), ("stddev", stddev))
    }
}

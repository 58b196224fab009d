//! Elementwise math: broadcasting binary ops (Add, Sub, Mul, Div, Maximum,
//! Minimum, Pow), comparisons (Equal, Greater, ...), unary ops (Neg, Exp,
//! Log, Sqrt, Rsqrt, Square, Tanh, Sigmoid, Relu), ReluGrad, and SumToShape
//! (the broadcast-gradient reduction). Also the `+ - * /` operators on
//! [`Output`].

use super::{FLOATS, GradCtx, InferCtx, KernelCtx, NUMERIC, Registry, attrs, flops_per_output, same_dtype, with_float, with_numeric};
use crate::tensor::{DType, Element};
use crate::error::{EngineError, Result};
use crate::graph::{Graph, IntoOutput, Output};
use crate::tensor::TensorType;
use crate::kernels::cpu::Float;
use crate::kernels::cpu::elementwise::{PAR_CHUNK, PAR_MIN_ELEMENTS, binary, broadcast_dims, broadcast_to, map, map_in_place, zip_in_place};
use rayon::prelude::*;
use crate::kernels::cpu::reduce::reduce_axes;
use crate::tensor::{PartialShape, Shape};
use crate::tensor::Tensor;

/// Broadcast of two partial shapes; `None` when they cannot broadcast.
pub(crate) fn broadcast_partial(a: &PartialShape, b: &PartialShape) -> Option<PartialShape> {
    let (ad, bd) = (a.dims(), b.dims());
    let r = ad.len().max(bd.len());
    let mut out = Vec::with_capacity(r);
    for i in 0..r {
        let x = if i + ad.len() >= r { ad[i + ad.len() - r] } else { Some(1) };
        let y = if i + bd.len() >= r { bd[i + bd.len() - r] } else { Some(1) };
        out.push(match (x, y) {
            (Some(x), Some(y)) if x == y => Some(x),
            (Some(1), y) => y,
            (x, Some(1)) => x,
            (Some(_), Some(_)) => return None,
            (None, Some(y)) | (Some(y), None) => Some(y),
            (None, None) => None,
        });
    }
    Some(PartialShape::new(out))
}

fn infer_broadcast(c: &InferCtx, allowed: &[DType], out_dtype: Option<DType>) -> Result<Vec<TensorType>> {
    let d = same_dtype(c, allowed)?;
    let (a, b) = (&c.inputs[0].shape, &c.inputs[1].shape);
    let s = broadcast_partial(a, b).ok_or_else(|| c.n.shape_err(format!("cannot broadcast {a} with {b}")))?;
    Ok(vec![TensorType { dtype: out_dtype.unwrap_or(d), shape: s }])
}

/// Select(cond, x, y): `x` where `cond` is true, else `y`, all three
/// broadcast (numpy's `where`, ONNX's `Where`: attention masks).
fn infer_select(c: &InferCtx) -> Result<Vec<TensorType>> {
    let (cond, x, y) = (&c.inputs[0], &c.inputs[1], &c.inputs[2]);
    if cond.dtype != DType::Bool {
        return Err(c.n.dtype_err(format!("the condition must be bool, got {}", cond.dtype)));
    }
    if x.dtype != y.dtype || !NUMERIC.contains(&x.dtype) {
        return Err(c.n.dtype_err(format!("the branches must share one numeric dtype, got {} and {}", x.dtype, y.dtype)));
    }
    let xy = broadcast_partial(&x.shape, &y.shape).ok_or_else(|| c.n.shape_err(format!("cannot broadcast {} with {}", x.shape, y.shape)))?;
    let s = broadcast_partial(&cond.shape, &xy).ok_or_else(|| c.n.shape_err(format!("cannot broadcast the condition {} with {xy}", cond.shape)))?;
    Ok(vec![TensorType { dtype: x.dtype, shape: s }])
}

fn k_select(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (cond, x, y) = (&c.inputs[0], &c.inputs[1], &c.inputs[2]);
    let out = broadcast_dims(x.dims(), y.dims())
        .and_then(|xy| broadcast_dims(cond.dims(), &xy))
        .ok_or_else(|| c.n.shape_err(format!("cannot broadcast {}, {} and {}", cond.shape(), x.shape(), y.shape())))?;
    if Shape::new(out.clone()).checked_bytes(x.dtype()).is_none() {
        return Err(c.n.shape_err(format!("broadcasting {}, {} and {} is larger than this machine can address", cond.shape(), x.shape(), y.shape())));
    }
    let pick = broadcast_to(cond.as_slice::<bool>()?, cond.dims(), &out, c.threads);
    let dt = x.dtype();
    with_numeric!(c, dt, T => {
        let (a, b) = (broadcast_to(x.as_slice::<T>()?, x.dims(), &out, c.threads), broadcast_to(y.as_slice::<T>()?, y.dims(), &out, c.threads));
        let v: Vec<T> = pick.iter().zip(a.into_iter().zip(b)).map(|(&p, (a, b))| if p { a } else { b }).collect();
        Ok(vec![Tensor::from_vec(v, out)?])
    })
}

/// Applies `f` with broadcasting to inputs 0 and 1.
fn apply_binary<T: Element, U: Element>(c: &KernelCtx, f: impl Fn(T, T) -> U + Sync + Send) -> Result<Tensor> {
    let (a, b) = (&c.inputs[0], &c.inputs[1]);
    let out = broadcast_dims(a.dims(), b.dims())
        .ok_or_else(|| c.n.shape_err(format!("cannot broadcast {} with {}", a.shape(), b.shape())))?;
    // Two tensors that exist can still broadcast to a size that overflows.
    if Shape::new(out.clone()).checked_bytes(a.dtype()).is_none() {
        return Err(c.n.shape_err(format!("broadcasting {} with {} is larger than this machine can address", a.shape(), b.shape())));
    }
    let v = binary(a.as_slice::<T>()?, a.dims(), b.as_slice::<T>()?, b.dims(), &out, c.threads, f);
    Tensor::from_vec(v, out)
}

/// Applies `f` to inputs 0 and 1 with broadcasting, writing over an input
/// of the output's shape when the kernel holds its only reference.
fn apply_arith<T: Element>(c: &mut KernelCtx, f: impl Fn(T, T) -> T + Sync + Send) -> Result<Tensor> {
    // Which inputs have the output's shape: both, or the one the other
    // (a single element of no higher rank) broadcasts to.
    let (da, db) = (c.inputs[0].dims(), c.inputs[1].dims());
    let scalar_into = |x: &[usize], y: &[usize]| x.len() <= y.len() && x.iter().product::<usize>() == 1;
    // (An element loop, not `==`: slice equality calls memcmp, which cost
    // more than the whole Add of a scalar.)
    let same = da.len() == db.len() && da.iter().zip(db).all(|(x, y)| x == y);
    let (a_is_out, b_is_out) = (same || scalar_into(db, da), same || scalar_into(da, db));
    if a_is_out && let Some(t) = arith_over::<T, false>(c, &f)? {
        return Ok(t);
    }
    if b_is_out && let Some(t) = arith_over::<T, true>(c, &f)? {
        return Ok(t);
    }
    apply_binary(c, f)
}

/// `f` written over input 0 (input 1 when `RHS`), which has the output's
/// shape, when the kernel holds its only reference; `None` otherwise. The
/// other input has the same length or one element.
fn arith_over<T: Element, const RHS: bool>(c: &mut KernelCtx, f: &(impl Fn(T, T) -> T + Sync + Send)) -> Result<Option<Tensor>> {
    let (mine, theirs) = if RHS { (1, 0) } else { (0, 1) };
    let shape = c.inputs[mine].shape().clone();
    let Some(mut v) = c.forward_input::<T>(mine, shape.num_elements()) else { return Ok(None) };
    let other = c.inputs[theirs].as_slice::<T>()?;
    let g = |x: T, y: T| if RHS { f(y, x) } else { f(x, y) };
    if other.len() == v.len() {
        zip_in_place(&mut v, other, c.threads, g);
    } else {
        let y = other[0];
        map_in_place(&mut v, c.threads, |x| g(x, y));
    }
    Tensor::from_vec(v, shape).map(Some)
}

/// Applies `f` to input 0, in place when the kernel holds its only reference.
fn apply_unary<T: Element>(c: &mut KernelCtx, f: impl Fn(T) -> T + Sync + Send) -> Result<Tensor> {
    let shape = c.inputs[0].shape().clone();
    if let Some(mut v) = c.forward_input::<T>(0, shape.num_elements()) {
        map_in_place(&mut v, c.threads, f);
        return Tensor::from_vec(v, shape);
    }
    Tensor::from_vec(map(c.inputs[0].as_slice::<T>()?, c.threads, f), shape)
}

/// Arithmetic shared by floats and integers (integers wrap, never panic).
pub(crate) trait Arith: Element {
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn maxv(self, o: Self) -> Self;
    fn minv(self, o: Self) -> Self;
    fn neg(self) -> Self;
}
macro_rules! arith_float {
    ($t:ty) => {
        impl Arith for $t {
            #[inline(always)]
            fn add(self, o: Self) -> Self { self + o }
            #[inline(always)]
            fn sub(self, o: Self) -> Self { self - o }
            #[inline(always)]
            fn mul(self, o: Self) -> Self { self * o }
            #[inline(always)]
            fn maxv(self, o: Self) -> Self { if self >= o || o.is_nan() { self } else { o } }
            #[inline(always)]
            fn minv(self, o: Self) -> Self { if self <= o || o.is_nan() { self } else { o } }
            #[inline(always)]
            fn neg(self) -> Self { -self }
        }
    };
}
macro_rules! arith_int {
    ($t:ty) => {
        impl Arith for $t {
            #[inline(always)]
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)]
            fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            #[inline(always)]
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)]
            fn maxv(self, o: Self) -> Self { Ord::max(self, o) }
            #[inline(always)]
            fn minv(self, o: Self) -> Self { Ord::min(self, o) }
            #[inline(always)]
            fn neg(self) -> Self { self.wrapping_neg() }
        }
    };
}
arith_float!(f32);
arith_float!(f64);
arith_int!(i32);
arith_int!(i64);

macro_rules! numeric_binary {
    ($fname:ident, $m:ident) => {
        fn $fname(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
            let dt = c.inputs[0].dtype();
            with_numeric!(c, dt, T => Ok(vec![apply_arith::<T>(c, |a: T, b: T| a.$m(b))?]))
        }
    };
}
numeric_binary!(k_add, add);
numeric_binary!(k_sub, sub);
numeric_binary!(k_mul, mul);
numeric_binary!(k_maximum, maxv);
numeric_binary!(k_minimum, minv);

fn k_div(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let dt = c.inputs[0].dtype();
    with_float!(c, dt, T => Ok(vec![apply_arith::<T>(c, |a: T, b: T| a / b)?]))
}
fn k_pow(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let dt = c.inputs[0].dtype();
    with_float!(c, dt, T => Ok(vec![apply_arith::<T>(c, |a: T, b: T| a.powf(b))?]))
}

macro_rules! compare_kernel {
    ($fname:ident, $op:tt) => {
        fn $fname(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
            let dt = c.inputs[0].dtype();
            if dt == DType::Bool {
                return Ok(vec![apply_binary::<bool, bool>(c, |a, b| a $op b)?]);
            }
            with_numeric!(c, dt, T => Ok(vec![apply_binary::<T, bool>(c, |a: T, b: T| a $op b)?]))
        }
    };
}
compare_kernel!(k_equal, ==);
compare_kernel!(k_greater, >);
compare_kernel!(k_greater_equal, >=);
compare_kernel!(k_less, <);
compare_kernel!(k_less_equal, <=);

macro_rules! float_unary {
    ($fname:ident, |$x:ident| $e:expr) => {
        fn $fname(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
            let dt = c.inputs[0].dtype();
            with_float!(c, dt, T => Ok(vec![apply_unary::<T>(c, |$x: T| $e)?]))
        }
    };
}
/// A float op over whole slices (see `Float::exp_in_place`), in chunks on
/// rayon when large.
fn apply_in_place<T: Float + Element>(c: &mut KernelCtx, f: fn(&mut [T])) -> Result<Tensor> {
    let shape = c.inputs[0].shape().clone();
    let mut v = match c.forward_input::<T>(0, shape.num_elements()) {
        Some(v) => v,
        None => c.inputs[0].as_slice::<T>()?.to_vec(),
    };
    if c.threads > 1 && v.len() >= PAR_MIN_ELEMENTS {
        v.par_chunks_mut(PAR_CHUNK).for_each(f);
    } else {
        f(&mut v);
    }
    Tensor::from_vec(v, shape)
}

macro_rules! float_in_place {
    ($fname:ident, $method:ident) => {
        fn $fname(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
            let dt = c.inputs[0].dtype();
            with_float!(c, dt, T => Ok(vec![apply_in_place::<T>(c, T::$method)?]))
        }
    };
}
float_in_place!(k_exp, exp_in_place);
float_unary!(k_log, |x| x.ln());
float_unary!(k_sqrt, |x| x.sqrt());
float_unary!(k_rsqrt, |x| T::ONE / x.sqrt());
float_unary!(k_square, |x| x * x);
float_in_place!(k_tanh, tanh_in_place);
float_in_place!(k_sigmoid, sigmoid_in_place);
float_unary!(k_relu, |x| if x > T::ZERO { x } else { T::ZERO });
// f32: Eigen's rational fit (TensorFlow's CPU erf), vectorized; f64: libm
float_in_place!(k_erf, erf_in_place);

fn k_neg(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let dt = c.inputs[0].dtype();
    with_numeric!(c, dt, T => Ok(vec![apply_unary::<T>(c, |x: T| x.neg())?]))
}

/// ReluGrad(g, x) = g where x > 0, else 0.
fn k_relu_grad(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let dt = c.inputs[0].dtype();
    if c.inputs[0].dims() != c.inputs[1].dims() {
        return Err(c.n.shape_err(format!("gradient {} and input {} differ", c.inputs[0].shape(), c.inputs[1].shape())));
    }
    with_float!(c, dt, T => Ok(vec![apply_arith::<T>(c, |g: T, x: T| if x > T::ZERO { g } else { T::ZERO })?]))
}

/// SumToShape(g, like): sums `g` over the axes along which `like` was
/// broadcast, giving `like`'s shape. Passes `g` through when shapes match.
fn k_sum_to_shape(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (g, like) = (&c.inputs[0], &c.inputs[1]);
    if g.dims() == like.dims() {
        return Ok(vec![g.clone()]);
    }
    let (gd, ld) = (g.dims(), like.dims());
    if ld.len() > gd.len() {
        return Err(c.n.shape_err(format!("cannot reduce {} to {}", g.shape(), like.shape())));
    }
    let off = gd.len() - ld.len();
    let mut axes = Vec::new();
    for (i, &d) in gd.iter().enumerate() {
        if i < off {
            axes.push(i);
        } else if ld[i - off] == 1 && d != 1 {
            axes.push(i);
        } else if ld[i - off] != d {
            return Err(c.n.shape_err(format!("cannot reduce {} to {}", g.shape(), like.shape())));
        }
    }
    let dt = g.dtype();
    with_numeric!(c, dt, T => {
        let (v, _) = reduce_axes(g.as_slice::<T>()?, gd, &axes, T::default(), c.threads, |a: T, b: T| a.add(b));
        Ok(vec![Tensor::from_vec(v, like.shape().clone())?])
    })
}

pub(crate) fn register(r: &mut Registry) {
    r.def("Add", 2, Some(2), |c| infer_broadcast(c, NUMERIC, None)).flops(flops_per_output).grad(|c| {
        Ok(vec![Some(sum_to(c, &c.grads[0], 0)?), Some(sum_to(c, &c.grads[0], 1)?)])
    });
    r.cpu("Add", NUMERIC, k_add);
    r.def("Sub", 2, Some(2), |c| infer_broadcast(c, NUMERIC, None)).flops(flops_per_output).grad(|c| {
        let ng = c.g.neg(&c.grads[0])?;
        Ok(vec![Some(sum_to(c, &c.grads[0], 0)?), Some(sum_to(c, &ng, 1)?)])
    });
    r.cpu("Sub", NUMERIC, k_sub);
    r.def("Mul", 2, Some(2), |c| infer_broadcast(c, NUMERIC, None)).flops(flops_per_output).grad(|c| {
        let (a, b, g) = (&c.inputs[0], &c.inputs[1], &c.grads[0]);
        Ok(vec![Some(sum_to(c, &(g * b)?, 0)?), Some(sum_to(c, &(g * a)?, 1)?)])
    });
    r.cpu("Mul", NUMERIC, k_mul);
    r.def("Div", 2, Some(2), |c| infer_broadcast(c, FLOATS, None)).flops(flops_per_output).grad(|c| {
        let (a, b, g) = (&c.inputs[0], &c.inputs[1], &c.grads[0]);
        let ga = (g / b)?;
        let gb = c.g.neg(((g * a)? / (b * b)?)?)?;
        Ok(vec![Some(sum_to(c, &ga, 0)?), Some(sum_to(c, &gb, 1)?)])
    });
    r.cpu("Div", FLOATS, k_div);
    r.def("Maximum", 2, Some(2), |c| infer_broadcast(c, NUMERIC, None)).flops(flops_per_output).grad(|c| {
        let (a, b, g) = (&c.inputs[0], &c.inputs[1], &c.grads[0]);
        let ma = c.g.cast(c.g.greater_equal(a, b)?, g.dtype())?;
        let mb = c.g.cast(c.g.less(a, b)?, g.dtype())?;
        Ok(vec![Some(sum_to(c, &(g * &ma)?, 0)?), Some(sum_to(c, &(g * &mb)?, 1)?)])
    });
    r.cpu("Maximum", NUMERIC, k_maximum);
    r.def("Minimum", 2, Some(2), |c| infer_broadcast(c, NUMERIC, None)).flops(flops_per_output).grad(|c| {
        let (a, b, g) = (&c.inputs[0], &c.inputs[1], &c.grads[0]);
        let ma = c.g.cast(c.g.less_equal(a, b)?, g.dtype())?;
        let mb = c.g.cast(c.g.greater(a, b)?, g.dtype())?;
        Ok(vec![Some(sum_to(c, &(g * &ma)?, 0)?), Some(sum_to(c, &(g * &mb)?, 1)?)])
    });
    r.cpu("Minimum", NUMERIC, k_minimum);
    r.def("Pow", 2, Some(2), |c| infer_broadcast(c, FLOATS, None)).flops(|c| 10.0 * flops_per_output(c)).grad(|c| {
        let (a, b, g, y) = (&c.inputs[0], &c.inputs[1], &c.grads[0], &c.outputs[0]);
        let one = c.g.scalar_like(1.0, b)?;
        let ga = ((g * b)? * c.g.pow(a, (b - &one)?)?)?;
        let gb = ((g * y)? * c.g.log(a)?)?;
        Ok(vec![Some(sum_to(c, &ga, 0)?), Some(sum_to(c, &gb, 1)?)])
    });
    r.cpu("Pow", FLOATS, k_pow);

    r.def("Select", 3, Some(3), infer_select).flops(flops_per_output).grad(|c| {
        let (cond, g) = (&c.inputs[0], &c.grads[0]);
        let zero = c.g.zeros_like(g)?;
        let gx = c.g.select(cond, g, &zero)?;
        let gy = c.g.select(cond, &zero, g)?;
        Ok(vec![None, Some(sum_to(c, &gx, 1)?), Some(sum_to(c, &gy, 2)?)])
    });
    r.cpu("Select", NUMERIC, k_select);

    let all_cmp: &'static [DType] = &[DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool];
    for (name, k) in [
        ("Equal", k_equal as super::KernelFn),
        ("Greater", k_greater),
        ("GreaterEqual", k_greater_equal),
        ("Less", k_less),
        ("LessEqual", k_less_equal),
    ] {
        r.def(name, 2, Some(2), |c| infer_broadcast(c, &[], Some(DType::Bool))).flops(flops_per_output);
        r.cpu(name, all_cmp, k);
    }

    let same = |c: &InferCtx| -> Result<Vec<TensorType>> {
        same_dtype(c, FLOATS)?;
        Ok(vec![c.inputs[0].clone()])
    };
    r.def("Neg", 1, Some(1), |c| {
        same_dtype(c, NUMERIC)?;
        Ok(vec![c.inputs[0].clone()])
    })
    .flops(flops_per_output)
    .grad(|c| Ok(vec![Some(c.g.neg(&c.grads[0])?)]));
    r.cpu("Neg", NUMERIC, k_neg);
    r.def("Exp", 1, Some(1), same).flops(flops_per_output).grad(|c| Ok(vec![Some((&c.grads[0] * &c.outputs[0])?)]));
    r.cpu("Exp", FLOATS, k_exp);
    r.def("Log", 1, Some(1), same).flops(flops_per_output).grad(|c| Ok(vec![Some((&c.grads[0] / &c.inputs[0])?)]));
    r.cpu("Log", FLOATS, k_log);
    r.def("Sqrt", 1, Some(1), same).flops(flops_per_output).grad(|c| {
        let half = c.g.scalar_like(0.5, &c.grads[0])?;
        Ok(vec![Some(((&c.grads[0] * &half)? / &c.outputs[0])?)])
    });
    r.cpu("Sqrt", FLOATS, k_sqrt);
    r.def("Rsqrt", 1, Some(1), same).flops(flops_per_output).grad(|c| {
        let y = &c.outputs[0];
        let k = c.g.scalar_like(-0.5, y)?;
        Ok(vec![Some(((&c.grads[0] * &k)? * ((y * y)? * y)?)?)])
    });
    r.cpu("Rsqrt", FLOATS, k_rsqrt);
    r.def("Square", 1, Some(1), same).flops(flops_per_output).grad(|c| {
        let two = c.g.scalar_like(2.0, &c.inputs[0])?;
        Ok(vec![Some((&c.grads[0] * (&c.inputs[0] * &two)?)?)])
    });
    r.cpu("Square", FLOATS, k_square);
    r.def("Tanh", 1, Some(1), same).flops(flops_per_output).grad(|c| {
        let y = &c.outputs[0];
        let one = c.g.scalar_like(1.0, y)?;
        Ok(vec![Some((&c.grads[0] * (&one - (y * y)?)?)?)])
    });
    r.cpu("Tanh", FLOATS, k_tanh);
    r.def("Sigmoid", 1, Some(1), same).flops(flops_per_output).grad(|c| {
        let y = &c.outputs[0];
        let one = c.g.scalar_like(1.0, y)?;
        Ok(vec![Some(((&c.grads[0] * y)? * (&one - y)?)?)])
    });
    r.cpu("Sigmoid", FLOATS, k_sigmoid);
    // the Gauss error function (ONNX's `Erf`, in exact GELU); d/dx = 2/sqrt(pi) exp(-x^2)
    r.def("Erf", 1, Some(1), same).flops(|c| 20.0 * flops_per_output(c)).grad(|c| {
        let x = &c.inputs[0];
        let k = c.g.scalar_like(std::f64::consts::FRAC_2_SQRT_PI, x)?;
        Ok(vec![Some(((&c.grads[0] * &k)? * c.g.exp(c.g.neg(c.g.square(x)?)?)?)?)])
    });
    r.cpu("Erf", FLOATS, k_erf);
    r.def("Relu", 1, Some(1), same).flops(flops_per_output).grad(|c| {
        Ok(vec![Some(c.g.build1("ReluGrad", vec![c.grads[0].clone(), c.outputs[0].clone()], attrs! {})?)])
    });
    r.cpu("Relu", FLOATS, k_relu);
    r.def("ReluGrad", 2, Some(2), |c| {
        same_dtype(c, FLOATS)?;
        if !c.inputs[0].shape.compatible(&c.inputs[1].shape) {
            return Err(c.n.shape_err(format!("gradient {} and input {} differ", c.inputs[0].shape, c.inputs[1].shape)));
        }
        Ok(vec![c.inputs[0].clone()])
    })
    .flops(flops_per_output);
    r.cpu("ReluGrad", FLOATS, k_relu_grad);

    r.def("SumToShape", 2, Some(2), |c| Ok(vec![TensorType { dtype: c.inputs[0].dtype, shape: c.inputs[1].shape.clone() }]))
        .flops(super::flops_per_input);
    r.cpu("SumToShape", NUMERIC, k_sum_to_shape);
}

/// The gradient `g` reduced to the shape of forward input `i`.
fn sum_to(c: &GradCtx, g: &Output, i: usize) -> Result<Output> {
    let x = &c.inputs[i];
    let (gs, xs) = (g.shape(), x.shape());
    if gs == xs && gs.to_shape().is_some() {
        return Ok(g.clone());
    }
    c.g.build1("SumToShape", vec![g.clone(), x.clone()], attrs! {})
}

macro_rules! unary_method {
    ($(#[$m:meta])* $fn:ident, $op:expr) => {
        $(#[$m])*
        pub fn $fn(&self, x: impl IntoOutput) -> Result<Output> {
            self.build1($op, vec![x.into_output()?], attrs! {})
        }
    };
}
macro_rules! binary_method {
    ($(#[$m:meta])* $fn:ident, $op:expr) => {
        $(#[$m])*
        pub fn $fn(&self, a: impl IntoOutput, b: impl IntoOutput) -> Result<Output> {
            let a = a.into_output()?;
            let b = b.into_output()?;
            self.build1($op, vec![a, b], attrs! {})
        }
    };
}

impl Graph {
    binary_method!(/// `a + b` with broadcasting.
        add, "Add");
    binary_method!(/// `a - b` with broadcasting.
        sub, "Sub");
    binary_method!(/// `a * b` with broadcasting.
        mul, "Mul");
    binary_method!(/// `a / b` with broadcasting (floats).
        div, "Div");
    binary_method!(maximum, "Maximum");
    binary_method!(minimum, "Minimum");
    binary_method!(/// `a ^ b` (floats).
        pow, "Pow");
    binary_method!(/// Elementwise `a == b` (bool result).
        equal, "Equal");
    binary_method!(greater, "Greater");
    binary_method!(greater_equal, "GreaterEqual");
    binary_method!(less, "Less");
    binary_method!(less_equal, "LessEqual");
    unary_method!(neg, "Neg");
    unary_method!(exp, "Exp");
    unary_method!(log, "Log");
    unary_method!(sqrt, "Sqrt");
    unary_method!(rsqrt, "Rsqrt");
    unary_method!(square, "Square");
    unary_method!(tanh, "Tanh");
    unary_method!(sigmoid, "Sigmoid");
    unary_method!(erf, "Erf");

    /// `x` where `cond` (bool) is true, else `y`; the three broadcast.
    pub fn select(&self, cond: impl IntoOutput, x: impl IntoOutput, y: impl IntoOutput) -> Result<Output> {
        self.build1("Select", vec![cond.into_output()?, x.into_output()?, y.into_output()?], attrs! {})
    }
    unary_method!(relu, "Relu");
}

// ---- operators --------------------------------------------------------------

fn same_graph_binary(op: &str, a: Output, b: Output) -> Result<Output> {
    if !a.graph.same_graph(&b.graph) {
        return Err(EngineError::ForeignGraph { node: format!("<{op}>"), input: b.to_string() });
    }
    let g = a.graph.clone();
    g.build1(op, vec![a, b], attrs! {})
}

fn scalar_binary(op: &str, a: Output, v: f64, scalar_first: bool) -> Result<Output> {
    let g = a.graph.clone();
    let s = g.scalar(v, a.dtype())?;
    if scalar_first { g.build1(op, vec![s, a], attrs! {}) } else { g.build1(op, vec![a, s], attrs! {}) }
}

macro_rules! impl_operator {
    ($Trait:ident, $method:ident, $op:expr) => {
        impl std::ops::$Trait<Output> for Output {
            type Output = Result<Output>;
            fn $method(self, b: Output) -> Result<Output> {
                same_graph_binary($op, self, b)
            }
        }
        impl std::ops::$Trait<&Output> for Output {
            type Output = Result<Output>;
            fn $method(self, b: &Output) -> Result<Output> {
                same_graph_binary($op, self, b.clone())
            }
        }
        impl std::ops::$Trait<Output> for &Output {
            type Output = Result<Output>;
            fn $method(self, b: Output) -> Result<Output> {
                same_graph_binary($op, self.clone(), b)
            }
        }
        impl std::ops::$Trait<&Output> for &Output {
            type Output = Result<Output>;
            fn $method(self, b: &Output) -> Result<Output> {
                same_graph_binary($op, self.clone(), b.clone())
            }
        }
        impl std::ops::$Trait<Result<Output>> for Output {
            type Output = Result<Output>;
            fn $method(self, b: Result<Output>) -> Result<Output> {
                same_graph_binary($op, self, b?)
            }
        }
        impl std::ops::$Trait<Result<Output>> for &Output {
            type Output = Result<Output>;
            fn $method(self, b: Result<Output>) -> Result<Output> {
                same_graph_binary($op, self.clone(), b?)
            }
        }
        impl std::ops::$Trait<Output> for Result<Output> {
            type Output = Result<Output>;
            fn $method(self, b: Output) -> Result<Output> {
                same_graph_binary($op, self?, b)
            }
        }
        impl std::ops::$Trait<&Output> for Result<Output> {
            type Output = Result<Output>;
            fn $method(self, b: &Output) -> Result<Output> {
                same_graph_binary($op, self?, b.clone())
            }
        }
        /// A scalar operand takes the dtype of the tensor operand.
        impl std::ops::$Trait<f64> for Output {
            type Output = Result<Output>;
            fn $method(self, v: f64) -> Result<Output> {
                scalar_binary($op, self, v, false)
            }
        }
        impl std::ops::$Trait<f64> for &Output {
            type Output = Result<Output>;
            fn $method(self, v: f64) -> Result<Output> {
                scalar_binary($op, self.clone(), v, false)
            }
        }
        impl std::ops::$Trait<&Output> for f64 {
            type Output = Result<Output>;
            fn $method(self, b: &Output) -> Result<Output> {
                scalar_binary($op, b.clone(), self, true)
            }
        }
    };
}
impl_operator!(Add, add, "Add");
impl_operator!(Sub, sub, "Sub");
impl_operator!(Mul, mul, "Mul");
impl_operator!(Div, div, "Div");

impl std::ops::Neg for &Output {
    type Output = Result<Output>;
    fn neg(self) -> Result<Output> {
        self.graph.neg(self)
    }
}
impl std::ops::Neg for Output {
    type Output = Result<Output>;
    fn neg(self) -> Result<Output> {
        let g = self.graph.clone();
        g.neg(self)
    }
}

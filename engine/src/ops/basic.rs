//! Sources and plumbing: Const, Placeholder, Identity, StopGradient, NoOp
//! (group), Shape, Fill, ZerosLike, OnesLike, Cast.

use super::{Registry, attrs};
use crate::graph::{AttrValue, TensorValue};
use crate::tensor::DType;
use crate::error::Result;
use crate::graph::{Graph, IntoOutput, Output};
use crate::tensor::TensorType;
use crate::tensor::{PartialShape, Shape};
use crate::tensor::Tensor;

pub(crate) fn register(r: &mut Registry) {
    r.def("Const", 0, Some(0), |c| {
        let t = c.n.tensor("value")?;
        // The value's size is checked here, where the node is built or a
        // graph file is loaded, not first when a step runs.
        let want = t.shape.checked_bytes(t.dtype);
        if want != Some(t.byte_len()) {
            let need = want.map_or("more than this machine can address".to_string(), |w| format!("{w} bytes"));
            return Err(c.n.attr_err("value", format!("{} bytes of data for a {}{} tensor, which needs {need}", t.byte_len(), t.dtype, t.shape)));
        }
        Ok(vec![TensorType::new(t.dtype, &t.shape)])
    })
    .cheap();
    r.cpu("Const", &[], |c| Ok(vec![c.n.tensor("value")?.to_tensor()?]));

    r.def("Placeholder", 0, Some(0), |c| Ok(vec![TensorType { dtype: c.n.dtype("dtype")?, shape: c.n.shape("shape")?.clone() }]))
        .cheap();
    r.cpu("Placeholder", &[], |c| Err(c.n.kernel_err("a placeholder must be fed")));

    r.def("Identity", 1, Some(1), |c| Ok(vec![c.inputs[0].clone()])).views().grad(|c| Ok(vec![Some(c.grads[0].clone())]));
    r.cpu("Identity", &[], |c| Ok(vec![c.inputs[0].clone()]));

    r.def("StopGradient", 1, Some(1), |c| Ok(vec![c.inputs[0].clone()])).views().grad(|_| Ok(vec![None]));
    r.cpu("StopGradient", &[], |c| Ok(vec![c.inputs[0].clone()]));

    r.def("NoOp", 0, Some(0), |_| Ok(vec![])).cheap();
    r.cpu("NoOp", &[], |_| Ok(vec![]));

    r.def("Shape", 1, Some(1), |c| Ok(vec![TensorType::new(DType::I64, Shape::new(vec![c.inputs[0].shape.rank()]))])).cheap();
    r.cpu("Shape", &[], |c| {
        let d: Vec<i64> = c.inputs[0].dims().iter().map(|&v| v as i64).collect();
        let n = d.len();
        Ok(vec![Tensor::from_vec(d, [n])?])
    });

    r.def("Fill", 1, Some(1), |c| {
        if c.inputs[0].shape.rank() != 0 {
            return Err(c.n.shape_err(format!("value must be a scalar, got {}", c.inputs[0].shape)));
        }
        Ok(vec![TensorType { dtype: c.inputs[0].dtype, shape: c.n.shape("shape")?.clone() }])
    })
    .flops(super::flops_per_output);
    r.cpu("Fill", &[], |c| {
        let s = c.n.shape("shape")?.to_shape().ok_or_else(|| c.n.attr_err("shape", "must be fully known"))?;
        let v = c.inputs[0].scalar_f64()?;
        Ok(vec![Tensor::full(c.inputs[0].dtype(), s, v)?])
    });

    for name in ["ZerosLike", "OnesLike"] {
        r.def(name, 1, Some(1), |c| Ok(vec![c.inputs[0].clone()])).grad(|_| Ok(vec![None])).cheap();
    }
    r.cpu("ZerosLike", &[], |c| Ok(vec![Tensor::zeros(c.inputs[0].dtype(), c.inputs[0].shape().clone())?]));
    r.cpu("OnesLike", &[], |c| Ok(vec![Tensor::full(c.inputs[0].dtype(), c.inputs[0].shape().clone(), 1.0)?]));

    r.def("Cast", 1, Some(1), |c| Ok(vec![TensorType { dtype: c.n.dtype("dtype")?, shape: c.inputs[0].shape.clone() }]))
        .flops(super::flops_per_output)
        .grad(|c| {
            let from = c.inputs[0].dtype();
            if from.is_float() && c.outputs[0].dtype().is_float() {
                Ok(vec![Some(c.g.cast(&c.grads[0], from)?)])
            } else {
                Ok(vec![None])
            }
        });
    r.cpu("Cast", &[], |c| Ok(vec![c.inputs[0].cast(c.n.dtype("dtype")?)?]));

}

impl Graph {
    /// A constant node holding `t`.
    pub fn constant(&self, t: Tensor) -> Result<Output> {
        self.build1("Const", vec![], attrs! {"value" => AttrValue::Tensor(TensorValue::from_tensor(&t)?)})
    }

    /// A scalar constant of `dtype`.
    pub fn scalar(&self, v: f64, dtype: DType) -> Result<Output> {
        self.constant(Tensor::full(dtype, Shape::scalar(), v)?)
    }

    /// A scalar constant with the dtype of `like`.
    pub(crate) fn scalar_like(&self, v: f64, like: &Output) -> Result<Output> {
        self.scalar(v, like.dtype())
    }

    /// An input fed at run time. Unknown dimensions are `-1` in `shape`.
    pub fn placeholder(&self, name: &str, dtype: DType, shape: impl Into<PartialShape>) -> Result<Output> {
        self.op("Placeholder")
            .name(name)
            .attr("dtype", AttrValue::DType(dtype))
            .attr("shape", AttrValue::Shape(shape.into()))
            .build()
    }

    pub fn identity(&self, x: impl IntoOutput) -> Result<Output> {
        self.build1("Identity", vec![x.into_output()?], attrs! {})
    }

    /// Passes `x` through; autodiff treats it as a constant.
    pub fn stop_gradient(&self, x: impl IntoOutput) -> Result<Output> {
        self.build1("StopGradient", vec![x.into_output()?], attrs! {})
    }

    /// A node that does nothing once all of `deps` have run (tf.group).
    pub fn group(&self, name: &str, deps: &[&Output]) -> Result<Output> {
        let mut b = self.op("NoOp").name(name);
        for d in deps {
            b = b.control_input(d);
        }
        b.build()
    }

    /// The runtime shape of `x` as an i64 vector.
    pub fn shape_of(&self, x: impl IntoOutput) -> Result<Output> {
        self.build1("Shape", vec![x.into_output()?], attrs! {})
    }

    /// A tensor of `shape` filled with the scalar `value`.
    pub fn fill(&self, shape: impl Into<Shape>, value: impl IntoOutput) -> Result<Output> {
        let s: Shape = shape.into();
        self.build1("Fill", vec![value.into_output()?], attrs! {"shape" => AttrValue::Shape(PartialShape::from(&s))})
    }

    /// Zeros of a known shape.
    pub fn zeros(&self, dtype: DType, shape: impl Into<Shape>) -> Result<Output> {
        let v = self.scalar(0.0, dtype)?;
        self.fill(shape, v)
    }

    pub fn zeros_like(&self, x: impl IntoOutput) -> Result<Output> {
        self.build1("ZerosLike", vec![x.into_output()?], attrs! {})
    }

    pub fn ones_like(&self, x: impl IntoOutput) -> Result<Output> {
        self.build1("OnesLike", vec![x.into_output()?], attrs! {})
    }

    pub fn cast(&self, x: impl IntoOutput, dtype: DType) -> Result<Output> {
        self.build1("Cast", vec![x.into_output()?], attrs! {"dtype" => AttrValue::DType(dtype)})
    }
}

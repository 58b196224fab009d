//! An imported model made trainable: a loss over its first output, the
//! engine's autodiff and an optimizer over every variable, as a
//! [`ModelGraph`] that trains, profiles, places and simulates like a zoo
//! graph.

use super::OnnxModel;
use crate::{ModelError, ModelGraph};
use flowlab_engine::{AttrValue, DType, Optimizer, Output};

/// The loss put on the model's first output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Mean softmax cross entropy of `[batch, classes]` logits against
    /// class ids (`labels`, i64 `[batch]`).
    SoftmaxXent,
    /// Mean squared error against `labels` of the output's shape.
    Mse,
}

impl std::str::FromStr for Loss {
    type Err = String;
    fn from_str(s: &str) -> Result<Loss, String> {
        match s {
            "softmax_xent" => Ok(Loss::SoftmaxXent),
            "mse" => Ok(Loss::Mse),
            _ => Err(format!("unknown loss `{s}` (softmax_xent, mse)")),
        }
    }
}

impl Loss {
    /// softmax_xent for a model whose first output is `[batch, classes]`
    /// floats, mse otherwise.
    pub fn default_for(m: &OnnxModel) -> Loss {
        match m.outputs.first() {
            Some((_, o)) if o.shape().rank() == 2 && matches!(o.dtype(), DType::F32 | DType::F64) => Loss::SoftmaxXent,
            _ => Loss::Mse,
        }
    }
}

/// `m` with `loss` on its first output against a `labels` placeholder,
/// gradients of every variable and `optimizer`'s updates as its train op;
/// `name` names it (the file's stem, say). The labels come last in
/// `inputs`, after the model's own.
pub fn training(m: OnnxModel, name: &str, batch: usize, loss: Loss, optimizer: &Optimizer) -> Result<ModelGraph, ModelError> {
    let err = |detail: String| ModelError::ModelBuild { model: name.to_string(), detail };
    let (out_name, y) = m.outputs.first().cloned().ok_or_else(|| err("the model has no output to put a loss on".into()))?;
    let g = m.graph.clone();
    let e = |x: flowlab_engine::EngineError| err(format!("the loss on output '{out_name}': {x}"));
    let mean = |x: Output| -> Result<Output, ModelError> {
        g.op("Mean").name("loss").input(x).attr("axes", AttrValue::Ints(Vec::new())).attr("keep_dims", AttrValue::Bool(false)).build().map_err(e)
    };
    let mut label_limit = None;
    let (labels, loss) = match loss {
        Loss::SoftmaxXent => {
            let dims = y.shape().to_shape().map(|s| s.dims().to_vec()).unwrap_or_default();
            let [rows, classes] = dims[..] else {
                return Err(err(format!("softmax_xent needs [batch, classes] logits; output '{out_name}' is {}", y.shape())));
            };
            let labels = g.placeholder("labels", DType::I64, [rows as i64]).map_err(e)?;
            label_limit = Some(classes as u64);
            let xent = g.scope("loss").sparse_softmax_cross_entropy_with_logits(&y, &labels).map_err(e)?;
            (labels.clone(), mean(xent)?)
        }
        Loss::Mse => {
            let shape = y.shape().to_shape().ok_or_else(|| err(format!("output '{out_name}' has no static shape")))?;
            let labels = g.placeholder("labels", y.dtype(), shape).map_err(e)?;
            let d = g.sub(&y, &labels).map_err(e)?;
            (labels.clone(), mean(g.square(&d).map_err(e)?)?)
        }
    };
    let vars: Vec<&Output> = m.variables.iter().collect();
    let step = optimizer.minimize(&loss, &vars).map_err(|x| err(x.to_string()))?;
    let mut deps: Vec<&Output> = vec![&step];
    deps.extend(m.updates.iter());
    let train_op = g.group("train_op", &deps).map_err(|x| err(x.to_string()))?;
    let mut inputs: Vec<Output> = m.inputs.iter().map(|i| i.placeholder.clone()).collect();
    inputs.push(labels);
    let mut input_limits = vec![None; inputs.len() - 1];
    input_limits.push(label_limit);
    Ok(ModelGraph {
        name: name.to_string(),
        graph: g,
        input_limits,
        inputs,
        eval_loss: loss.clone(),
        loss,
        state_update: None,
        state_reset: None,
        train_op,
        batch,
        params: m.params,
        non_trainable_params: m.non_trainable_params,
    })
}

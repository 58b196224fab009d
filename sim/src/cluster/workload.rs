//! Workloads: what each training step moves and computes. A config names a
//! catalog entry (`model: inception_v3`) or gives one inline
//! (`model: { dense_params: 1000000, compute_s: 0.1 }`).

use crate::comm::ps::{EmbeddingShard, PsLayout};
use crate::error::SimError;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// An embedding table (sparse parameters).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Embedding {
    /// Rows of the table (sharded over the PS tasks).
    pub rows: u64,
    /// Elements per row.
    pub dim: u64,
    /// Rows a worker gathers (and updates) per step.
    pub rows_per_step: u64,
}

/// An output layer of `classes` rows of `dim`, applied to `tokens`
/// activations a step, computed on the PS tasks (`Workload::ps_softmax`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PsSoftmax {
    /// Output classes (the vocabulary), split evenly over the PS tasks.
    pub classes: u64,
    /// Width of each class's row and of an activation.
    pub dim: u64,
    /// Activations one worker step sends (batch x unrolled steps).
    pub tokens: u64,
}

impl PsSoftmax {
    /// Classes PS task `k` of `tasks` holds (an even split, the first tasks
    /// taking the remainder).
    pub fn classes_on(&self, k: usize, tasks: usize) -> u64 {
        crate::comm::ps::even_share(self.classes, k, tasks)
    }
}

/// The update rule a PS task applies, by its memory passes over a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Optimizer {
    /// Read the variable and the gradient, write the variable: 3 passes.
    #[default]
    Sgd,
    /// Also read and write the velocity: 5.
    Momentum,
    /// Also read and write the mean square: 5.
    Rmsprop,
    /// Also read and write both moments: 7.
    Adam,
}

impl Optimizer {
    /// Passes over the shard's elements that one update makes.
    pub fn passes(self) -> u32 {
        match self {
            Optimizer::Sgd => 3,
            Optimizer::Momentum | Optimizer::Rmsprop => 5,
            Optimizer::Adam => 7,
        }
    }
}

/// Statistical efficiency of asynchronous training: the updates it needs
/// to reach a target accuracy grow with staleness,
/// `updates x (1 + staleness_cost x tau^2)`, tau the run's mean staleness
/// (updates applied between a worker's fetch and its push). The square is
/// the delay term of the convergence bound for asynchronous SGD (Lian,
/// Huang, Li and Liu, "Asynchronous parallel stochastic gradient for
/// nonconvex optimization", NeurIPS 2015: its step-size condition and
/// error grow with the square of the delay); Dai, Zhou, Dai, Jiang and
/// Xing ("Toward understanding the impact of staleness in distributed
/// machine learning", ICLR 2019) measured the growth of batches to a
/// target with staleness. `updates` is measured with one worker (no
/// staleness), `staleness_cost` fitted on other worker counts; the catalog's
/// `async-convergence` names both and the points held out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Convergence {
    /// Updates one worker without staleness needs to reach the target.
    pub updates: f64,
    /// Growth of the updates with the square of the mean staleness.
    pub staleness_cost: f64,
}

impl Convergence {
    fn validate(&self) -> Result<(), SimError> {
        if !(self.updates > 0.0 && self.updates.is_finite()) {
            return Err(SimError::param("model.convergence.updates", format!("must be positive and finite, got {}", self.updates)));
        }
        if !(self.staleness_cost >= 0.0 && self.staleness_cost.is_finite()) {
            return Err(SimError::param("model.convergence.staleness_cost", format!("must be zero or positive and finite, got {}", self.staleness_cost)));
        }
        Ok(())
    }

    /// Updates to the target at mean staleness `tau`.
    pub fn updates_at(&self, tau: f64) -> f64 {
        self.updates * (1.0 + self.staleness_cost * tau * tau)
    }
}

/// Parameters, per-step compute and batch of one worker step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// A label for plots, tables and `where:` pins of reference points
    /// (`name: dense_1gb`); the simulator does not read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Dense parameters of one partitioned variable, split evenly over PS tasks.
    #[serde(default)]
    pub dense_params: u64,
    /// Whole variables (element counts), placed on PS tasks greedily by size.
    #[serde(default)]
    pub variables: Vec<u64>,
    /// One scalar on every PS task (the paper's "null" model).
    #[serde(default)]
    pub scalar_per_ps: bool,
    /// Embedding tables (sparse parameters), gathered and updated by rows.
    #[serde(default)]
    pub embeddings: Vec<Embedding>,
    /// Median compute time of one worker step, seconds.
    #[serde(default)]
    pub compute_s: f64,
    /// The workload's own lognormal jitter of compute time (0: constant).
    #[serde(default)]
    pub compute_sigma: f64,
    /// Examples one worker processes per step (its batch).
    #[serde(default = "one")]
    pub examples_per_step: u64,
    /// PS CPU time per request (fetch or push of one shard), microseconds.
    #[serde(default = "default_ps_request_us")]
    pub ps_request_us: f64,
    /// PS CPU time per tensor a fetch or push moves, microseconds, on top
    /// of `ps_request_us`: a runtime that sends one message per tensor (as
    /// TensorFlow's `RecvTensor`) handles each on the task's one message
    /// thread, so a request to a task holding 3 variables costs 3 of these.
    #[serde(default)]
    pub ps_transfer_us: f64,
    /// PS CPU time per tensor a push moves, when it differs from a
    /// fetch's `ps_transfer_us` (absent: the same), microseconds: what the
    /// task's message thread spends taking a tensor in, where other
    /// threads share the rest (flowlab's PS hands a received tensor to its
    /// executor, which a fetch's answer does not wait for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ps_push_transfer_us: Option<f64>,
    /// PS CPU per request per million dense parameters the task holds,
    /// microseconds, on top of `ps_request_us`: work that scales with a
    /// task's share of the model (its part of the update, spread over the
    /// requests), so a task holding little pays little.
    #[serde(default)]
    pub ps_us_per_mparam: f64,
    /// Memory bandwidth a PS task's work on its shard gets, GB/s (10^9
    /// bytes/s): serving a fetch copies the shard once (read), each
    /// gradient a synchronous step takes in is added to an accumulator
    /// (three passes: read both, write one), and each update runs the
    /// optimizer's passes over the shard (`optimizer`), all at this rate on
    /// the task's CPU, FIFO with its requests. Absent: the hardware
    /// catalog's `cpu-x86-core` device (20 GB/s, one core's stream bandwidth);
    /// 0: none (a PS whose CPU per request is measured whole, as
    /// `kind: distributed` measures it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ps_memory_gbps: Option<f64>,
    /// An output layer computed on the PS tasks, sharded over them by
    /// class (the paper's LSTM language model: the full softmax "computed
    /// there"). Its weights are never fetched: after its compute a worker
    /// sends its `tokens x dim` activations to every PS task; each computes
    /// its classes' logits, its share of the loss and both gradients (6 x
    /// tokens x dim x its classes flops, at `ps_gflops`), updates its rows
    /// (the optimizer's passes) and answers with the activations' gradient
    /// (`tokens x dim`); the worker's push follows the last answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ps_softmax: Option<PsSoftmax>,
    /// How many updates asynchronous training needs to reach a target
    /// accuracy (see [`Convergence`]); absent: not modelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub convergence: Option<Convergence>,
    /// The PS tasks' compute rate for `ps_softmax`, GFLOP/s. Absent: the
    /// hardware catalog's `cpu-x86-core` f32 peak (96 GFLOP/s, one core).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ps_gflops: Option<f64>,
    /// The optimizer the PS tasks apply: the memory passes of one update
    /// over a shard (reads and writes of the variable, the gradient and the
    /// optimizer's slots).
    #[serde(default)]
    pub optimizer: Optimizer,
    /// Fixed worker time per step (session run, RPC set-up), microseconds.
    /// On a shared host (`host_cores`) it holds a core.
    #[serde(default)]
    pub step_overhead_us: f64,
    /// Worker CPU time per tensor it moves (its end of each fetch's and
    /// push's `RecvTensor`), microseconds. On a shared host (`host_cores`)
    /// it holds a core while the tensors move but delays no step: a
    /// runtime's two ends of a transfer pipeline (the worker decodes one
    /// fetched tensor while the PS serves the next), and the PS's end,
    /// `ps_transfer_us`, is the one the step waits for. Without
    /// `host_cores` it costs nothing.
    #[serde(default)]
    pub worker_transfer_us: f64,
    /// Fixed worker time per step that holds no CPU (waits the model's
    /// one flow per task does not have, e.g. one link latency per further
    /// tensor), microseconds, after `step_overhead_us`.
    #[serde(default)]
    pub step_wait_us: f64,
    /// Wall time from a step's start to the worker's start when nothing
    /// else runs, microseconds: a master that drives each step calls the
    /// worker (flowlab's `RunGraph`) and the call takes this long to reach
    /// its executor. The worker starts at the later of this and the end of
    /// its `step_overhead_us` (then `step_wait_us`).
    #[serde(default)]
    pub dispatch_us: f64,
    /// The master's CPU per worker step, microseconds: on a shared host
    /// (`host_cores`) it holds a core from the step's start, beside the
    /// worker's own overhead (the master is a process of its own); no step
    /// waits for it. Without `host_cores` it costs nothing.
    #[serde(default)]
    pub master_cpu_us: f64,
    /// Fixed time per step from its last task's end to its end, holding
    /// no CPU, microseconds: the answers' way back to a master that drives
    /// each step (flowlab's `RunGraph` replies, read by the master before
    /// it starts the next step). A synchronous round ends this much after
    /// its last update ran; an asynchronous worker's next step starts this
    /// much after its own.
    #[serde(default)]
    pub step_end_wait_us: f64,
    /// Each PS task but the first, once it has applied an update (the
    /// gradients of a synchronous step, or of one asynchronous worker),
    /// sends the first task one control token per tensor it holds: a
    /// runtime whose train op groups every variable's update on one task
    /// (flowlab's, TensorFlow's) moves these. Each costs `ps_transfer_us`
    /// on both tasks and the path latency; the step ends when the first
    /// task has them all.
    #[serde(default)]
    pub update_tokens: bool,
    /// PS CPU per push on the first PS task only, on top of its request,
    /// microseconds: a tensor each worker's step sends the task that holds
    /// the train op besides its gradients (flowlab's synchronous train op
    /// averages the workers' losses there, one `RecvTensor` each).
    #[serde(default)]
    pub first_ps_push_us: f64,
    /// PS tasks serve their queued fetches a tensor at a time, in turn:
    /// a runtime that moves every variable as its own `RecvTensor`
    /// (flowlab's, TensorFlow's) answers the workers' concurrent calls in
    /// their order of arrival, so each worker has its last variable only
    /// when the task has served the others' too. A fetched shard is ready
    /// once its task has served the work queued by the time its own
    /// service ended (for fetches queued together, within one round of
    /// tensors of the exact turn-taking; later arrivals do not hold it);
    /// `false`: each request is served whole, first come first served.
    #[serde(default)]
    pub fetch_in_turn: bool,
    /// Communication overlapped with compute, as TensorFlow's dataflow
    /// executor runs a step: each parameter shard's share of the forward
    /// pass runs as soon as that shard has arrived (in arrival order), and
    /// each gradient shard is pushed as soon as its share of the backward
    /// pass is done (in reverse arrival order), instead of fetch, compute
    /// and push one after another.
    #[serde(default)]
    pub overlap: bool,
    /// Each gradient pushed as its own tensor as soon as the backward pass
    /// has made it, and taken by its PS task on arrival (FIFO), as a
    /// dataflow runtime does with one Send per variable: the backward pass
    /// (`1 - forward_fraction` of the compute, at its end) makes the
    /// `variables` in reverse order, each after its share of the
    /// parameters; a tensor's request costs `ps_transfer_us` and its
    /// parameters' share of `ps_us_per_mparam`, and the last one on a task
    /// also `ps_request_us`. Needs a model of `variables` only (no
    /// `dense_params`, embeddings or `scalar_per_ps`) and no `overlap`.
    #[serde(default)]
    pub push_per_tensor: bool,
    /// With `overlap`, the forward pass's share of `compute_s` (default
    /// 1/3: a backward pass costs about twice the forward).
    #[serde(default = "default_forward_fraction")]
    pub forward_fraction: f64,
    /// A model-zoo graph (`flowlab_models::zoo`) whose one-device training step,
    /// simulated on `device` by the graph-level simulator, gives `compute_s`,
    /// and whose trainable variables give `dense_params` (the gradient).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zoo: Option<String>,
    /// An ONNX file (`flowlab_models::onnx`) in place of a zoo graph: its
    /// training step (the loss on its first output) gives `compute_s` and
    /// its variables `dense_params`, as `zoo` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onnx: Option<String>,
    /// The zoo graph's batch per worker (default 32); also `examples_per_step`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// The hardware catalog device the zoo step is simulated on (default k40).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// A measured op profile (as `flowlab place --profile`) for the zoo step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

/// What a zoo graph's one-device step gives a workload: compute seconds
/// and trainable parameters. Memoized per (model, batch, device, profile):
/// a sweep's points resolve their workload several times (check, run, the
/// no-backup baseline) and the result is a pure function of the key.
fn zoo_step(model: &str, batch: u64, device: &str, profile: Option<&str>) -> Result<(f64, u64), SimError> {
    use std::collections::HashMap;
    use parking_lot::Mutex;
    use std::sync::OnceLock;
    type Key = (String, u64, String, Option<String>);
    static CACHE: OnceLock<Mutex<HashMap<Key, (f64, u64)>>> = OnceLock::new();
    let key = (model.to_string(), batch, device.to_string(), profile.map(str::to_string));
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(&v) = cache.lock().get(&key) {
        return Ok(v);
    }
    if !model.ends_with(".onnx") && !flowlab_models::zoo::names().contains(&model) {
        return Err(SimError::param(
            "model.zoo",
            format!("unknown zoo model `{model}` (known: {})", flowlab_models::zoo::names().join(", ")),
        ));
    }
    let batch_usize = usize::try_from(batch).map_err(|_| SimError::param("model.batch", format!("{batch} is too large")))?;
    let built = flowlab_models::build_with(model, &flowlab_models::ZooOptions::new(batch_usize))?;
    let cluster = crate::graph::VirtualCluster::parse(device)?;
    if cluster.len() != 1 {
        return Err(SimError::param("model.device", format!("`{device}` names {} devices; a worker is one device", cluster.len())));
    }
    let mut opts = crate::graph::SimOptions { step: Some(built.step()), ..Default::default() };
    if let Some(path) = profile {
        let p = flowlab_hw::Profile::from_file(path).map_err(|e| SimError::param("model.profile", e.to_string()))?;
        opts.profile = Some(p);
    }
    let sim = crate::graph::GraphSimulator::new(&built.graph, &cluster, &opts)?;
    // Every node on the one device: what the `single_device` placer gives.
    let report = sim.simulate_indices(&vec![0u16; sim.graph().len()])?;
    let v = (report.step_seconds, built.params);
    cache.lock().insert(key, v);
    Ok(v)
}

fn one() -> u64 {
    1
}
fn default_ps_request_us() -> f64 {
    35.0
}
fn default_forward_fraction() -> f64 {
    1.0 / 3.0
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            name: None,
            dense_params: 0,
            variables: Vec::new(),
            scalar_per_ps: false,
            embeddings: Vec::new(),
            compute_s: 0.0,
            compute_sigma: 0.0,
            examples_per_step: 1,
            ps_request_us: default_ps_request_us(),
            ps_transfer_us: 0.0,
            ps_push_transfer_us: None,
            ps_us_per_mparam: 0.0,
            ps_memory_gbps: None,
            ps_softmax: None,
            convergence: None,
            ps_gflops: None,
            optimizer: Optimizer::Sgd,
            step_overhead_us: 0.0,
            worker_transfer_us: 0.0,
            step_wait_us: 0.0,
            step_end_wait_us: 0.0,
            dispatch_us: 0.0,
            master_cpu_us: 0.0,
            update_tokens: false,
            first_ps_push_us: 0.0,
            fetch_in_turn: false,
            overlap: false,
            push_per_tensor: false,
            forward_fraction: default_forward_fraction(),
            zoo: None,
            onnx: None,
            batch: None,
            device: None,
            profile: None,
        }
    }
}

/// The device a PS task's host is when the workload does not give its
/// rates: one core of the hardware catalog (`key` names the rate asked for
/// in an error).
fn ps_host(key: &str) -> Result<&'static flowlab_hw::DeviceSpec, SimError> {
    flowlab_hw::Catalog::builtin().device("cpu-x86-core").map_err(|e| SimError::param(key, e.to_string()))
}

/// The LSTM-512-512's forward and backward pass over 1,280 tokens: 32.2
/// GFLOP of matrix products.
const LSTM_LM_BODY_FLOPS: f64 = 2.0 * (2.0 * 1025.0 * 2048.0) * 1280.0 * 3.0;

/// Seconds of `flops` of matrix products on the catalog's K40 at the
/// roofline's efficiency for the class (4.29 TFLOP/s x 0.8).
fn k40_matmul_s(flops: f64) -> Option<f64> {
    let k40 = flowlab_hw::Catalog::builtin().device("k40").ok()?;
    Some(flops / (k40.peak_flops(flowlab_hw::Dtype::F32) * k40.efficiency(flowlab_hw::OpClass::Matmul, None)))
}

impl Workload {
    /// A PS task's CPU per request, microseconds, for a task holding
    /// `tensors` tensors and `params` dense parameters: `ps_request_us`,
    /// `ps_transfer_us` per tensor and `ps_us_per_mparam` per million
    /// parameters (the simulator's charge, and what a caller accounting
    /// for it should use).
    pub fn ps_request_cpu_us(&self, tensors: u64, params: u64) -> f64 {
        self.request_cpu_us(self.ps_transfer_us, tensors, params)
    }

    /// As [`Self::ps_request_cpu_us`], for a push: `ps_push_transfer_us`
    /// per tensor where it is given.
    pub fn ps_push_cpu_us(&self, tensors: u64, params: u64) -> f64 {
        self.request_cpu_us(self.ps_push_transfer_us.unwrap_or(self.ps_transfer_us), tensors, params)
    }

    fn request_cpu_us(&self, per_tensor_us: f64, tensors: u64, params: u64) -> f64 {
        self.ps_request_us + per_tensor_us * tensors as f64 + self.ps_us_per_mparam * params as f64 * 1e-6
    }

    /// Seconds a PS task takes for one pass over one f32 element (4 bytes
    /// at `ps_memory_gbps`, or the catalog `cpu-x86-core`'s memory bandwidth); 0
    /// when the memory work is off.
    pub fn ps_seconds_per_element_pass(&self) -> Result<f64, SimError> {
        let gbps = match self.ps_memory_gbps {
            Some(g) => g,
            None => ps_host("model.ps_memory_gbps")?.memory_bandwidth_gb_s,
        };
        Ok(if gbps > 0.0 { 4.0 / (gbps * 1e9) } else { 0.0 })
    }

    /// The PS tasks' compute rate for `ps_softmax`, flop/s.
    pub fn ps_flops_per_s(&self) -> Result<f64, SimError> {
        match self.ps_gflops {
            Some(g) => Ok(g * 1e9),
            None => Ok(ps_host("model.ps_gflops")?.peak_flops(flowlab_hw::Dtype::F32)),
        }
    }

    pub fn validate(&self) -> Result<(), SimError> {
        if let Some(c) = &self.convergence {
            c.validate()?;
        }
        let finite_nn = |p: &str, v: f64| {
            if v >= 0.0 && v.is_finite() {
                Ok(())
            } else {
                Err(SimError::param(p, format!("must be zero or positive and finite, got {v}")))
            }
        };
        finite_nn("model.compute_s", self.compute_s)?;
        finite_nn("model.compute_sigma", self.compute_sigma)?;
        finite_nn("model.ps_request_us", self.ps_request_us)?;
        finite_nn("model.ps_transfer_us", self.ps_transfer_us)?;
        if let Some(v) = self.ps_push_transfer_us {
            finite_nn("model.ps_push_transfer_us", v)?;
        }
        finite_nn("model.ps_us_per_mparam", self.ps_us_per_mparam)?;
        if let Some(g) = self.ps_memory_gbps {
            finite_nn("model.ps_memory_gbps", g)?;
        }
        if let Some(g) = self.ps_gflops
            && !(g > 0.0 && g.is_finite())
        {
            return Err(SimError::param("model.ps_gflops", format!("must be positive and finite, got {g}")));
        }
        if let Some(s) = &self.ps_softmax {
            if s.classes == 0 || s.dim == 0 || s.tokens == 0 {
                return Err(SimError::param("model.ps_softmax", "classes, dim and tokens must be at least 1"));
            }
            if self.overlap || self.push_per_tensor {
                return Err(SimError::param("model.ps_softmax", "runs between the compute and the push: not with `overlap` or `push_per_tensor`"));
            }
        }
        finite_nn("model.step_overhead_us", self.step_overhead_us)?;
        finite_nn("model.step_end_wait_us", self.step_end_wait_us)?;
        finite_nn("model.dispatch_us", self.dispatch_us)?;
        finite_nn("model.master_cpu_us", self.master_cpu_us)?;
        finite_nn("model.step_wait_us", self.step_wait_us)?;
        finite_nn("model.first_ps_push_us", self.first_ps_push_us)?;
        finite_nn("model.worker_transfer_us", self.worker_transfer_us)?;
        if !(0.0..=1.0).contains(&self.forward_fraction) {
            return Err(SimError::param(
                "model.forward_fraction",
                format!("must be between 0 and 1, got {}", self.forward_fraction),
            ));
        }
        if self.examples_per_step == 0 {
            return Err(SimError::param("model.examples_per_step", "must be at least 1"));
        }
        if self.push_per_tensor && (self.overlap || self.dense_params > 0 || self.scalar_per_ps || !self.embeddings.is_empty() || self.variables.is_empty()) {
            return Err(SimError::param(
                "model.push_per_tensor",
                "needs a model of `variables` only (no dense_params, embeddings or scalar_per_ps) and no `overlap`",
            ));
        }
        for (i, e) in self.embeddings.iter().enumerate() {
            if e.rows == 0 || e.dim == 0 {
                return Err(SimError::param(
                    format!("model.embeddings[{i}]"),
                    "rows and dim must be at least 1",
                ));
            }
        }
        Ok(())
    }

    /// Resolves a `zoo:` workload: compute from the graph-level simulator,
    /// gradient elements from the graph's trainable variables, batch as
    /// examples per step. `compute_s`, `dense_params` and the other traffic
    /// keys come from the graph and may not be given beside `zoo`.
    fn resolve_zoo(&self) -> Result<Workload, SimError> {
        let model = match (&self.zoo, &self.onnx) {
            (Some(_), Some(_)) => return Err(SimError::param("model.onnx", "give `zoo` or `onnx`, not both")),
            (Some(m), None) => m.as_str(),
            (None, Some(f)) if f.ends_with(".onnx") => f.as_str(),
            (None, Some(f)) => return Err(SimError::param("model.onnx", format!("`{f}` is not an ONNX file (*.onnx)"))),
            (None, None) => "",
        };
        if self.compute_s != 0.0 || self.dense_params != 0 || !self.variables.is_empty() || !self.embeddings.is_empty() || self.scalar_per_ps {
            return Err(SimError::param(
                "model.zoo",
                "compute_s, dense_params, variables, embeddings and scalar_per_ps come from the zoo graph; remove them",
            ));
        }
        let batch = self.batch.unwrap_or(32);
        if batch == 0 {
            return Err(SimError::param("model.batch", "must be at least 1"));
        }
        let device = self.device.as_deref().unwrap_or("k40");
        let (compute_s, params) = zoo_step(model, batch, device, self.profile.as_deref())?;
        Ok(Workload {
            dense_params: params,
            compute_s,
            examples_per_step: batch,
            ..self.clone()
        })
    }

    /// Parameter elements in total (dense and sparse).
    pub fn total_params(&self) -> u64 {
        self.dense_params
            + self.variables.iter().sum::<u64>()
            + self.embeddings.iter().map(|e| e.rows * e.dim).sum::<u64>()
    }

    /// Elements a worker's gradient carries per step in an all-reduce: the
    /// dense parameters plus the rows it touched.
    pub fn allreduce_elements(&self) -> u64 {
        self.dense_params
            + self.variables.iter().sum::<u64>()
            + self.embeddings.iter().map(|e| e.rows_per_step * e.dim).sum::<u64>()
    }

    pub fn layout(&self, ps: usize) -> PsLayout {
        PsLayout::new(
            ps,
            self.dense_params,
            &self.variables,
            self.scalar_per_ps,
            self.embeddings
                .iter()
                .map(|e| EmbeddingShard {
                    rows: e.rows,
                    dim: e.dim,
                    rows_per_step: e.rows_per_step,
                })
                .collect(),
        )
    }

    /// The built-in workloads. Step times are calibrated so the simulator
    /// reproduces the shapes of the TensorFlow paper's figures on 10 Gbit/s
    /// links; they are estimates, not measurements.
    pub fn catalog(name: &str) -> Option<Workload> {
        let base = Workload::default();
        Some(match name {
            // OSDI'16 Fig. 7 "null" model: 4 bytes per PS task; no compute.
            // 1.5 ms fixed step overhead + 35 us PS CPU per request give
            // the paper's 1.8 ms (1 worker) to ~9 ms (100 workers).
            "null" => Workload {
                scalar_per_ps: true,
                step_overhead_us: 1500.0,
                ..base
            },
            // Fig. 7 dense fetch: 100 MB of f32 parameters, fetched whole.
            "dense_100mb" => Workload {
                dense_params: 25_000_000,
                step_overhead_us: 1500.0,
                ..base
            },
            // Fig. 7 dense fetch: 1 GB of f32 parameters.
            "dense_1gb" => Workload {
                dense_params: 250_000_000,
                step_overhead_us: 1500.0,
                ..base
            },
            // Fig. 7 sparse fetch: 32 random rows of a 1 GB embedding
            // (2^21 rows of 128 f32).
            "sparse_1gb" => Workload {
                embeddings: vec![Embedding { rows: 1 << 21, dim: 128, rows_per_step: 32 }],
                step_overhead_us: 1500.0,
                ..base
            },
            // Fig. 7 sparse fetch: 32 random rows of a 16 GB embedding.
            "sparse_16gb" => Workload {
                embeddings: vec![Embedding { rows: 1 << 25, dim: 128, rows_per_step: 32 }],
                step_overhead_us: 1500.0,
                ..base
            },
            // Inception-v3 (Szegedy et al. 2016): 23.8 M parameters; Fig. 8
            // trains it with batch 32 per K40 worker. Per step: 1.4 s of
            // compute (subject to stragglers) plus 0.45 s of fixed host work
            // (input pipeline, session overhead); the fetch overlaps the
            // forward pass and the push the backward pass, as TensorFlow's
            // dataflow executor runs a step (`overlap`). The two times were
            // fitted so that 50 sync workers plus 4 backups step in 1.93 s,
            // as in Fig. 8 (catalog:backup-workers names that point as its
            // calibration); nothing else here was fitted to the paper.
            "inception_v3" => Workload {
                dense_params: 23_800_000,
                compute_s: 1.4,
                examples_per_step: 32,
                step_overhead_us: 450_000.0,
                overlap: true,
                ..base
            },
            // LSTM-512-512 language model on One Billion Word (Fig. 9):
            // 40,000-word vocabulary; embedding 40,000 x 512 gathered for
            // 64 x 20 = 1,280 tokens per step; two LSTM layers (4 x 1025 x
            // 512 weights each), fetched densely; the full softmax (512 x
            // 40,000) sharded over the PS tasks and computed there, as the
            // paper does (`ps_softmax`: 6 x 1,280 x 512 x 40,000 = 157 GFLOP
            // a step, at the PS host's rate). The worker's compute is the
            // LSTM's flops, 2 x (2 x 1025 x 2048) x 1,280 tokens x 3
            // (forward and backward) = 32.2 GFLOP, at the K40's datasheet
            // f32 peak (4.29 TFLOP/s) x the roofline's 0.8 for matrix
            // products: 9.4 ms.
            "lstm_lm" => Workload {
                dense_params: 2 * 4 * 1025 * 512,
                embeddings: vec![Embedding { rows: 40_000, dim: 512, rows_per_step: 1280 }],
                ps_softmax: Some(PsSoftmax { classes: 40_000, dim: 512, tokens: 1280 }),
                compute_s: k40_matmul_s(LSTM_LM_BODY_FLOPS)?,
                examples_per_step: 64 * 20,
                step_overhead_us: 2000.0,
                ..base
            },
            // The same model with sampled softmax over 512 classes, on the
            // worker: 512 rows of the softmax weights are gathered a step
            // (a sparse table), and their logits, with each token's true
            // class, cost 6 x 1,280 x 512 x 513 = 2.0 GFLOP on the K40
            // (0.6 ms at its peak x 0.8) on top of the LSTM's.
            "lstm_lm_sampled" => Workload {
                dense_params: 2 * 4 * 1025 * 512,
                embeddings: vec![
                    Embedding { rows: 40_000, dim: 512, rows_per_step: 1280 },
                    Embedding { rows: 40_000, dim: 512, rows_per_step: 512 },
                ],
                compute_s: k40_matmul_s(LSTM_LM_BODY_FLOPS + 6.0 * 1280.0 * 512.0 * 513.0)?,
                examples_per_step: 64 * 20,
                step_overhead_us: 2000.0,
                ..base
            },
            _ => return None,
        })
    }

    pub const CATALOG_NAMES: &'static [&'static str] = &[
        "null",
        "dense_100mb",
        "dense_1gb",
        "sparse_1gb",
        "sparse_16gb",
        "inception_v3",
        "lstm_lm",
        "lstm_lm_sampled",
    ];
}

/// The `model` key: a catalog name or an inline workload.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelRef {
    Name(String),
    Inline(Workload),
}

impl Default for ModelRef {
    fn default() -> Self {
        ModelRef::Name("null".to_string())
    }
}

impl ModelRef {
    pub fn resolve(&self) -> Result<Workload, SimError> {
        match self {
            ModelRef::Inline(w) if w.zoo.is_some() || w.onnx.is_some() => w.resolve_zoo(),
            ModelRef::Inline(w) => {
                if w.batch.is_some() || w.device.is_some() || w.profile.is_some() {
                    return Err(SimError::param("model", "`batch`, `device` and `profile` need `zoo: MODEL`"));
                }
                Ok(w.clone())
            }
            ModelRef::Name(n) => Workload::catalog(n).ok_or_else(|| SimError::UnknownWorkload {
                name: n.clone(),
                known: Workload::CATALOG_NAMES.join(", "),
                // a zoo graph is a workload too, written as a map
                hint: if flowlab_models::zoo::names().contains(&n.as_str()) {
                    format!("; `{n}` is a model-zoo graph: write `model: {{ zoo: {n} }}` (its step simulated on a K40 unless `device:` says otherwise)")
                } else {
                    String::new()
                },
            }),
        }
    }
}

impl Serialize for ModelRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ModelRef::Name(n) => s.serialize_str(n),
            ModelRef::Inline(w) => w.serialize(s),
        }
    }
}

/// A catalog name, `null` (the null model), or an inline workload map.
impl schemars::JsonSchema for ModelRef {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ModelRef".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let inline = generator.subschema_for::<Workload>();
        schemars::json_schema!({
            "description": "a workload catalog name, or an inline workload map (`{ zoo: MODEL }` or `{ onnx: FILE }` for a graph's step)",
            "anyOf": [
                { "type": "string", "enum": Workload::CATALOG_NAMES },
                { "type": "null" },
                inline
            ]
        })
    }
}

impl<'de> Deserialize<'de> for ModelRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ModelRef;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a workload catalog name or an inline workload map")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ModelRef, E> {
                Ok(ModelRef::Name(v.to_string()))
            }
            /// YAML reads `model: null` as a null value: that is the null model.
            fn visit_unit<E: de::Error>(self) -> Result<ModelRef, E> {
                Ok(ModelRef::Name("null".to_string()))
            }
            fn visit_none<E: de::Error>(self) -> Result<ModelRef, E> {
                Ok(ModelRef::Name("null".to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<ModelRef, A::Error> {
                Workload::deserialize(de::value::MapAccessDeserializer::new(m)).map(ModelRef::Inline)
            }
        }
        d.deserialize_any(V)
    }
}

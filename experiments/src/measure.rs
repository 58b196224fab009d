//! Measurements of the real engine on this host, for the validation loop:
//! the host's figures (GEMM rate, memory bandwidth, in-process transfer
//! cost, executor dispatch) and per-shape op profiles of a zoo model's
//! training step. Everything here runs real kernels and reads the clock;
//! nothing is estimated.

use flowlab_engine::kernels::cpu::{Product, matmul};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use flowlab_engine::{DType, DeviceSet, EmulatedLink, Graph, LinkMap, Placement, Session, SessionOptions, StepStats, Tensor};
use flowlab_hw::{CommFormat, GemmRate, HostMeasurement, Profile, ShapeMeasurement, TransferCompute};
use flowlab_models::zoo::{self, ModelGraph};

/// Median and 10th / 90th percentiles (nearest rank) of `v`.
pub(crate) fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    s.sort_by(f64::total_cmp);
    let at = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
    let mid = s.len() / 2;
    let median = if s.len() % 2 == 1 { s[mid] } else { 0.5 * (s[mid - 1] + s[mid]) };
    (median, at(0.1), at(0.9))
}

fn median(v: &[f64]) -> f64 {
    spread(v).0
}

/// Fixed, formula-made inputs of a model's step (no RNG: the same bytes on
/// every run), labels cycling through the classes.
pub(crate) fn model_feeds(m: &ModelGraph) -> Result<Vec<Tensor>, String> {
    let mut out = Vec::with_capacity(m.inputs.len());
    for (k, o) in m.inputs.iter().enumerate() {
        let dims: Vec<usize> = o
            .shape()
            .dims()
            .iter()
            .map(|d| d.ok_or_else(|| format!("input '{}' of {} has an unknown dimension", o.name(), m.name)))
            .collect::<Result<_, _>>()?;
        let n: usize = dims.iter().product();
        let limit = m.input_limits.get(k).copied().flatten().unwrap_or(10).clamp(1, 10);
        let t = match o.dtype() {
            DType::F32 => Tensor::from_vec((0..n).map(|i| ((i * 37 + k) % 101) as f32 / 101.0 - 0.5).collect::<Vec<_>>(), dims),
            // Class ids and token ids: small values, valid for every zoo head
            // and under an imported classifier's class count.
            DType::I64 => Tensor::from_vec((0..n).map(|i| (i as u64 % limit) as i64).collect::<Vec<_>>(), dims),
            DType::I32 => Tensor::from_vec((0..n).map(|i| (i as u64 % limit) as i32).collect::<Vec<_>>(), dims),
            other => return Err(format!("input '{}' of {} has dtype {other}, which the validation runner cannot fill", o.name(), m.name)),
        };
        out.push(t.map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// A session running `m`'s step on `devices` CPUs with `threads` each.
pub(crate) struct StepRunner {
    pub model: ModelGraph,
    pub session: Session,
    feeds: Vec<Tensor>,
}

/// Refuses a step this machine cannot hold before the engine allocates it:
/// the graph-level simulator's peak of live tensors for the step on one
/// device (variables, activations, gradients and slots, by their lifetimes)
/// against the memory available (ResNet-50 at batch 65,536 aborted on a
/// 39 GB allocation).
fn fits_in_memory(model: &ModelGraph) -> Result<(), String> {
    let Some(available) = flowlab_sim::cluster::available_memory_bytes() else { return Ok(()) };
    let cpu = flowlab_sim::graph::VirtualCluster::parse("1xcpu").map_err(|e| e.to_string())?;
    let opts = flowlab_sim::graph::SimOptions { step: Some(model.step()), ..Default::default() };
    let sim = flowlab_sim::graph::GraphSimulator::new(&model.graph, &cpu, &opts).map_err(|e| format!("sizing the step: {e}"))?;
    let one = Placement::from_devices(vec![cpu.devices()[0].name.clone(); model.graph.num_nodes()]);
    let peak = sim.simulate(&one).map_err(|e| format!("sizing the step: {e}"))?.devices.first().map_or(0, |d| d.peak_memory_bytes) as f64;
    if peak > available {
        return Err(format!(
            "invalid parameter `batch`: {} at batch {} holds about {:.1} GB of live tensors at its peak (the graph-level simulator's count); this machine has {:.1} GB available",
            model.name,
            model.batch,
            peak / 1e9,
            available / 1e9
        ));
    }
    Ok(())
}

impl StepRunner {
    /// `model` must already hold its initializer op ([`with_initializer`]):
    /// a placement covers the graph as it is when placed.
    pub(crate) fn new(model: ModelGraph, init: &flowlab_engine::Output, opts: SessionOptions) -> Result<StepRunner, String> {
        fits_in_memory(&model)?;
        let session = Session::with_options(&model.graph, opts).map_err(|e| format!("engine session: {e}"))?;
        session.run(&[], &[], &[init]).map_err(|e| format!("initializing variables: {e}"))?;
        let feeds = model_feeds(&model)?;
        Ok(StepRunner { model, session, feeds })
    }

    /// One training step; with `trace`, its step statistics.
    pub(crate) fn step(&self, trace: bool) -> Result<Option<StepStats>, String> {
        let pairs: Vec<_> = self.model.inputs.iter().zip(&self.feeds).collect();
        let fetch = [&self.model.loss];
        let target = [&self.model.train_op];
        if trace {
            let (_, s) = self.session.run_traced(&pairs, &fetch, &target).map_err(|e| format!("training step: {e}"))?;
            Ok(Some(s))
        } else {
            self.session.run(&pairs, &fetch, &target).map_err(|e| format!("training step: {e}"))?;
            Ok(None)
        }
    }

    /// Wall seconds of `steps` timed steps after `warmup` untimed ones.
    pub(crate) fn time_steps(&self, warmup: usize, steps: usize) -> Result<Vec<f64>, String> {
        for _ in 0..warmup {
            self.step(false)?;
        }
        let mut v = Vec::with_capacity(steps);
        for _ in 0..steps {
            let t = Instant::now();
            self.step(false)?;
            v.push(t.elapsed().as_secs_f64());
        }
        Ok(v)
    }
}

/// Sizes of a smaller zoo variant (`None`: the published value), for models
/// that must fit a CPU: `{ hidden: 128, seq_len: 20, vocab: 2000 }`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ZooSizes {
    /// Hidden width (units of an LSTM or MLP layer, a transformer's model width).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<usize>,
    /// Number of layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<usize>,
    /// Sequence length in tokens (steps an LSTM is unrolled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_len: Option<usize>,
    /// Vocabulary size (tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab: Option<usize>,
    /// Attention heads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heads: Option<usize>,
    /// Width of a transformer's feed-forward layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ff: Option<usize>,
    /// Classes of a sampled softmax.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<usize>,
    /// Height and width of input images (pixels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<usize>,
    /// Output classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<usize>,
}

impl ZooSizes {
    /// Parses `hidden=128,seq_len=20` (the CLI's `--size`).
    pub fn parse(s: &str) -> Result<ZooSizes, String> {
        let mut z = ZooSizes::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| format!("`{part}`: write key=value, e.g. hidden=128"))?;
            let v: usize = v.trim().parse().map_err(|_| format!("`{part}`: {v} is not a whole number"))?;
            let slot = match k.trim() {
                "hidden" => &mut z.hidden,
                "layers" => &mut z.layers,
                "seq_len" => &mut z.seq_len,
                "vocab" => &mut z.vocab,
                "heads" => &mut z.heads,
                "ff" => &mut z.ff,
                "sampled" => &mut z.sampled,
                "image_size" => &mut z.image_size,
                "classes" => &mut z.classes,
                other => return Err(format!("unknown size `{other}` (sizes: hidden, layers, seq_len, vocab, heads, ff, sampled, image_size, classes)")),
            };
            *slot = Some(v);
        }
        Ok(z)
    }

    /// The zoo options at `batch`.
    pub fn options(&self, batch: usize) -> zoo::ZooOptions {
        let mut o = zoo::ZooOptions::new(batch);
        o.hidden = self.hidden;
        o.layers = self.layers;
        o.seq_len = self.seq_len;
        o.vocab = self.vocab;
        o.heads = self.heads;
        o.ff = self.ff;
        o.sampled = self.sampled;
        o.image_size = self.image_size;
        o.classes = self.classes;
        o
    }

    /// The model's name with its sizes, as a profile records it:
    /// `transformer(hidden=64,seq_len=32)`; the bare name when published.
    pub fn model_id(&self, model: &str) -> String {
        let v = serde_json::to_value(self).unwrap_or_default();
        let parts: Vec<String> = v.as_object().map(|o| o.iter().map(|(k, v)| format!("{k}={v}")).collect()).unwrap_or_default();
        if parts.is_empty() { model.to_string() } else { format!("{model}({})", parts.join(",")) }
    }
}

/// A zoo model (or an ONNX file) with its variables' initializer op added.
pub(crate) fn with_initializer(model: &str, sizes: &ZooSizes, batch: usize) -> Result<(ModelGraph, flowlab_engine::Output), String> {
    let m = flowlab_models::build_with(model, &sizes.options(batch)).map_err(|e| e.to_string())?;
    let init = m.graph.global_variables_initializer().map_err(|e| e.to_string())?;
    Ok((m, init))
}

/// Session options for `n` local CPUs with `threads` each.
pub(crate) fn cpu_options(n: usize, threads: usize, placement: Option<Placement>, links: LinkMap) -> SessionOptions {
    SessionOptions { threads, devices: DeviceSet::local_cpus(n), placement, links, ..Default::default() }
}

/// What [`profile_model`] is asked to measure.
#[derive(Debug, Clone)]
pub struct ProfileRequest {
    pub model: String,
    pub sizes: ZooSizes,
    pub batch: usize,
    pub threads: usize,
    /// Devices of the session (every node on the first): profile in the
    /// session shape the profile will predict.
    pub devices: usize,
    pub warmup: usize,
    pub steps: usize,
}

/// Runs the model's training step on the first CPU of a `devices`-CPU
/// session of the real engine
/// (warm-up, then `steps` traced steps) and records every node's kernel
/// time by shape key, plus this host's figures. The profile's dispatch time
/// is this model's: (step wall time - kernel times) / nodes run.
pub fn profile_model(req: &ProfileRequest, mut progress: impl FnMut(&str)) -> Result<Profile, String> {
    progress(&format!("measuring host figures ({} threads)", req.threads));
    let host = measure_host(req.threads)?;
    profile_model_on(req, host, progress)
}

/// [`profile_model`] with this host's figures already measured (in the
/// same sitting, with `req.threads`): a sweep that prices some points by
/// the roofline and some by the profile measures the host once per model.
pub(crate) fn profile_model_on(req: &ProfileRequest, mut host: HostMeasurement, mut progress: impl FnMut(&str)) -> Result<Profile, String> {
    let (model, init) = with_initializer(&req.model, &req.sizes, req.batch)?;
    // Keys from the step the engine executes (its fusions applied: a fused
    // node carries the name of its chain's last node), as the simulator's
    // `SimGraph::for_step` prices it.
    let step = model.step();
    let (nodes, _) = flowlab_engine::step_graph(&model.graph, &step.feeds, &step.fetches, &step.targets, Some(flowlab_engine::DeviceType::Cpu)).map_err(|e| format!("the training step: {e}"))?;
    // Each step node's shape key and cost, computed once: the timed steps
    // file their samples under these keys.
    let mut profiled = flowlab_sim::graph::profiled_nodes(nodes, "cpu").map_err(|e| format!("the training step's costs: {e}"))?;
    let devices = req.devices.max(1);
    let placement = (devices > 1).then(|| {
        let first = DeviceSet::local_cpus(1).devices()[0].0.clone();
        Placement::from_devices(vec![first; model.graph.num_nodes()])
    });
    let runner = StepRunner::new(model, &init, cpu_options(devices, req.threads, placement, LinkMap::default()))?;
    progress(&format!("{} batch {}: {} warm-up steps", req.model, req.batch, req.warmup));
    for _ in 0..req.warmup {
        runner.step(false)?;
    }
    let mut samples: BTreeMap<String, (String, Vec<f64>)> = BTreeMap::new();
    let mut overhead_per_node = Vec::with_capacity(req.steps);
    let mut step_seconds = Vec::with_capacity(req.steps);
    for s in 0..req.steps {
        progress(&format!("{} batch {}: timed step {} of {}", req.model, req.batch, s + 1, req.steps));
        let started = std::time::Instant::now();
        let stats = runner.step(true)?.unwrap_or_default();
        step_seconds.push(started.elapsed().as_secs_f64());
        let mut kernel = 0.0;
        for n in &stats.nodes {
            let Some(node) = profiled.get(&n.node) else { continue };
            let secs = ((n.end_us - n.start_us) * 1e-6).max(0.0);
            kernel += secs;
            samples.entry(node.key.clone()).or_insert_with(|| (n.op.clone(), Vec::new())).1.push(secs);
        }
        if !stats.nodes.is_empty() {
            overhead_per_node.push(((stats.total_us * 1e-6 - kernel) / stats.nodes.len() as f64).max(0.0));
        }
    }
    host.dispatch_us = median(&overhead_per_node) * 1e6;
    // The same steps again while a second session of the model steps on
    // another thread, as a second device of the host would: each kernel's
    // time with a neighbour computing.
    let mut contended: HashMap<String, Vec<f64>> = HashMap::new();
    if devices > 1 && std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
        let (neighbour_model, neighbour_init) = with_initializer(&req.model, &req.sizes, req.batch)?;
        let neighbour = StepRunner::new(neighbour_model, &neighbour_init, cpu_options(1, req.threads, None, LinkMap::default()))?;
        neighbour.step(false)?;
        let stop = std::sync::atomic::AtomicBool::new(false);
        let result: Result<(), String> = std::thread::scope(|s| {
            let busy = s.spawn(|| -> Result<(), String> {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    neighbour.step(false)?;
                }
                Ok(())
            });
            let mut run = || -> Result<(), String> {
                runner.step(false)?;
                for s in 0..req.steps {
                    progress(&format!("{} batch {}: timed step {} of {} beside a second device", req.model, req.batch, s + 1, req.steps));
                    let stats = runner.step(true)?.unwrap_or_default();
                    for n in &stats.nodes {
                        let Some(node) = profiled.get(&n.node) else { continue };
                        contended.entry(node.key.clone()).or_default().push(((n.end_us - n.start_us) * 1e-6).max(0.0));
                    }
                }
                Ok(())
            };
            let mine = run();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let theirs = busy.join().unwrap_or_else(|_| Err("the neighbour session panicked".into()));
            mine.and(theirs)
        });
        result?;
    }
    let shapes: BTreeMap<String, ShapeMeasurement> = samples
        .into_iter()
        .map(|(k, (op, v))| {
            let (seconds, p10, p90) = spread(&v);
            let contended_seconds = contended.get(&k).map(|c| median(c));
            (k, ShapeMeasurement { op, seconds, p10, p90, samples: v.len(), contended_seconds })
        })
        .collect();
    // The nodes the engine timed, so other shapes of this graph can be
    // priced from these measurements.
    profiled.retain(|_, n| shapes.contains_key(&n.key));
    Ok(Profile {
        device: Some(flowlab_hw::HOST_DEVICE.into()),
        model: Some(req.sizes.model_id(&req.model)),
        batch: Some(req.batch),
        session_devices: Some(devices),
        nodes: profiled,
        shapes,
        host: Some(host),
        step_seconds,
        ..Default::default()
    })
}

/// Measures this host: the engine's f32 GEMM rate for 1..=max(threads,
/// cores) threads, single-thread copy bandwidth, an in-process Send/Recv's
/// latency and bandwidth, and the executor's per-op dispatch time.
pub fn measure_host(threads: usize) -> Result<HostMeasurement, String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut gemm_gflops = BTreeMap::new();
    for t in 1..=threads.max(cores) {
        gemm_gflops.insert(t, gemm_gflops_at(t));
    }
    let memory_bandwidth_gb_s = copy_bandwidth_gb_s();
    let (transfer_latency_us, transfer_bandwidth_gb_s) = in_process_transfer()?;
    // Through an emulated link of no latency and a bandwidth that makes a
    // 4-byte transfer's serialization negligible (4 ps): what the delivery
    // thread's sleep and hand-over add to every emulated transfer.
    let fast = EmulatedLink::new(8000.0, 0.0).map_err(|e| e.to_string())?;
    let emulated_overhead_us = transfer_span(1, Some(fast))?.0 * 1e6;
    let dispatch_us = dispatch_us()?;
    let transfer_compute = transfer_compute()?;
    let (elementwise_gflops, cache_bandwidth_gb_s) = element_rates()?;
    // The footprint the Add was measured at: its two inputs and output.
    let cache_mib = 3.0 * (ELEMENT_ROWS * ELEMENT_COLS * 4) as f64 / (1 << 20) as f64;
    // Each shape as the forward pass multiplies (A B) and as the gradients
    // do (A^T B for weights, A B^T for inputs).
    let mut gemm_shapes = Vec::new();
    for (transpose_a, transpose_b) in [(false, false), (true, false), (false, true)] {
        for m in [32, 256, 2048] {
            for n in [32, 256, 2048] {
                for k in [32, 256, 2048] {
                    let gflops = gemm_gflops_of(m, n, k, transpose_a, transpose_b, threads.max(1));
                    gemm_shapes.push(GemmRate { m: m as u64, n: n as u64, k: k as u64, transpose_a, transpose_b, gflops });
                }
            }
        }
    }
    Ok(HostMeasurement {
        threads,
        gemm_gflops,
        memory_bandwidth_gb_s,
        transfer_latency_us,
        transfer_bandwidth_gb_s,
        emulated_overhead_us,
        transfer_compute,
        dispatch_us,
        memory_gb: host_memory_gb(),
        gemm_shapes,
        concurrent_share: concurrent_share(cores),
        elementwise_gflops,
        cache_mib,
        cache_bandwidth_gb_s,
    })
}

/// For k = 1..=cores, the rate of a one-thread GEMM (512 cubed) while k of
/// them run at once on their own threads, over its rate alone. Alone and
/// together are measured in turn five times and each takes its median, so
/// a drift of the machine's speed hits both alike.
fn concurrent_share(cores: usize) -> BTreeMap<usize, f64> {
    const N: usize = 512;
    const REPS: usize = 24;
    let a: Vec<f32> = (0..N * N).map(|i| (i % 7) as f32 * 0.25).collect();
    let b: Vec<f32> = (0..N * N).map(|i| (i % 5) as f32 * 0.5).collect();
    // Seconds per GEMM on each of k threads started together.
    let run = |k: usize| -> Vec<f64> {
        let barrier = std::sync::Barrier::new(k);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..k)
                .map(|_| {
                    s.spawn(|| {
                        let mut c = vec![0f32; N * N];
                        matmul(&a, &b, &mut c, Product::new(N, N, N), 1);
                        barrier.wait();
                        let t = Instant::now();
                        for _ in 0..REPS {
                            matmul(&a, &b, &mut c, Product::new(N, N, N), 1);
                        }
                        t.elapsed().as_secs_f64() / REPS as f64
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(f64::NAN)).collect()
        })
    };
    let mut share = BTreeMap::from([(1, 1.0)]);
    for k in 2..=cores.max(1) {
        let (mut alone, mut together) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            alone.push(run(1)[0]);
            together.push(median(&run(k)));
        }
        share.insert(k, (median(&alone) / median(&together)).min(1.0));
    }
    share
}

fn gemm_gflops_at(threads: usize) -> f64 {
    gemm_gflops_of(512, 512, 512, false, false, threads)
}

/// The engine's f32 GEMM rate for C[m, n] = op(A) op(B), op(A) [m, k],
/// op(B) [k, n], each stored transposed where asked (median of repeats
/// after a warm-up; at least 8 repeats and 20 ms of them, or 3 once
/// they pass 0.25 s).
fn gemm_gflops_of(m: usize, n: usize, k: usize, transpose_a: bool, transpose_b: bool, threads: usize) -> f64 {
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.25).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.5).collect();
    let mut c = vec![0f32; m * n];
    let mut times = Vec::new();
    let started = Instant::now();
    for rep in 0..1000 {
        let t = Instant::now();
        matmul(&a, &b, &mut c, Product::new(m, n, k).transposed(transpose_a, transpose_b), threads);
        if rep > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
        // 8 runs of a short product; 3 of one long enough that each run
        // averages the host's jitter itself (a 2048-cube takes 0.1-0.2 s:
        // 9 runs of it were half of the 27-shape table's time)
        let spent = started.elapsed().as_secs_f64();
        if (times.len() >= 8 && spent > 0.02) || (times.len() >= 3 && spent > 0.25) {
            break;
        }
    }
    2.0 * (m * n * k) as f64 / median(&times) / 1e9
}

/// One thread's copy bandwidth over 64 MiB buffers (beyond any cache),
/// read plus written: the median of 6 copies after one warm-up copy.
fn copy_bandwidth_gb_s() -> f64 {
    let bytes: usize = 64 << 20;
    let src: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
    let mut dst = vec![0u8; bytes];
    let mut times = Vec::new();
    for rep in 0..=6 {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        std::hint::black_box(&dst);
        if rep > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    2.0 * bytes as f64 / median(&times) / 1e9
}


/// The step statistics of `reps` traced runs of `sess`, the first `warmup`
/// left out: how every host figure below times the engine's own kernels.
fn traced_runs(sess: &Session, feeds: &[(&flowlab_engine::Output, &Tensor)], fetches: &[&flowlab_engine::Output], warmup: usize, reps: usize) -> Result<Vec<StepStats>, String> {
    let mut out = Vec::with_capacity(reps.saturating_sub(warmup));
    for rep in 0..reps {
        let (_, s) = sess.run_traced(feeds, fetches, &[]).map_err(|e| e.to_string())?;
        if rep >= warmup {
            out.push(s);
        }
    }
    Ok(out)
}

/// Median Send/Recv span (start of Send to end of Recv) of a tensor of
/// `elems` floats from CPU:0 to CPU:1, and its bytes on the wire.
fn transfer_span(elems: usize, link: Option<EmulatedLink>) -> Result<(f64, u64), String> {
    let g = Graph::new();
    let x = g.device("/cpu:0").placeholder("x", DType::F32, flowlab_engine::Shape::new(vec![elems])).map_err(|e| e.to_string())?;
    let y = g.device("/cpu:0").op("Neg").input(&x).build().map_err(|e| e.to_string())?;
    let z = g.device("/cpu:1").op("Neg").input(&y).build().map_err(|e| e.to_string())?;
    let links = LinkMap { all: link, ..Default::default() };
    let sess = Session::with_options(&g, cpu_options(2, 1, None, links)).map_err(|e| e.to_string())?;
    let v = Tensor::from_vec(vec![1f32; elems], vec![elems]).map_err(|e| e.to_string())?;
    let runs = traced_runs(&sess, &[(&x, &v)], &[&z], 5, 25)?;
    let transfers: Vec<_> = runs.iter().filter_map(|s| s.transfers.first()).collect();
    let spans: Vec<f64> = transfers.iter().map(|t| (t.end_us - t.start_us) * 1e-6).collect();
    Ok((median(&spans), transfers.last().map_or(0, |t| t.bytes)))
}

/// Median device time of the Send and the Recv node of `elems` floats in
/// `format` from CPU:0 to CPU:1, in seconds.
fn send_recv_kernels(elems: usize, format: CommFormat) -> Result<(f64, f64), String> {
    let g = Graph::new();
    let x = g.device("/cpu:0").placeholder("x", DType::F32, flowlab_engine::Shape::new(vec![elems])).map_err(|e| e.to_string())?;
    let y = g.device("/cpu:0").op("Neg").input(&x).build().map_err(|e| e.to_string())?;
    let z = g.device("/cpu:1").op("Neg").input(&y).build().map_err(|e| e.to_string())?;
    let mut opts = cpu_options(2, 1, None, LinkMap::default());
    opts.partition = flowlab_engine::PartitionOptions::in_format(format);
    let sess = Session::with_options(&g, opts).map_err(|e| e.to_string())?;
    let v = Tensor::from_vec((0..elems).map(|i| (i % 97) as f32 * 0.01).collect::<Vec<_>>(), vec![elems]).map_err(|e| e.to_string())?;
    let runs = traced_runs(&sess, &[(&x, &v)], &[&z], 3, 15)?;
    let of = |op: &str| -> Vec<f64> { runs.iter().flat_map(|s| &s.nodes).filter(|n| n.op == op).map(|n| (n.end_us - n.start_us).max(0.0) * 1e-6).collect() };
    Ok((median(&of("Send")), median(&of("Recv"))))
}

/// Send and Recv device costs per wire format: fixed (1 element) and per
/// element (the slope to 1M elements).
fn transfer_compute() -> Result<BTreeMap<String, TransferCompute>, String> {
    const LARGE: usize = 1 << 20;
    let mut out = BTreeMap::new();
    for format in [CommFormat::F32, CommFormat::F16, CommFormat::Bf16, CommFormat::Int8 { block: None }] {
        let (s1, r1) = send_recv_kernels(1, format)?;
        let (sl, rl) = send_recv_kernels(LARGE, format)?;
        let per = |small: f64, large: f64| ((large - small).max(0.0) / LARGE as f64) * 1e9;
        out.insert(
            format.to_string(),
            TransferCompute { send_us: s1 * 1e6, send_ns_per_element: per(s1, sl), recv_us: r1 * 1e6, recv_ns_per_element: per(r1, rl) },
        );
    }
    Ok(out)
}

fn in_process_transfer() -> Result<(f64, f64), String> {
    let (small, _) = transfer_span(1, None)?;
    let (large, bytes) = transfer_span(4 << 20, None)?;
    // A Send/Recv in one process hands the buffer over without a copy, so
    // the large span may be no longer than the small one: then bandwidth is
    // bounded by the copy bandwidth instead of being infinite.
    let extra = large - small;
    let bw = if extra > 0.0 { bytes as f64 / extra / 1e9 } else { copy_bandwidth_gb_s() };
    Ok((small.max(0.0) * 1e6, bw))
}

fn dispatch_us() -> Result<f64, String> {
    const CHAIN: usize = 200;
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, flowlab_engine::Shape::new(vec![1])).map_err(|e| e.to_string())?;
    let mut y = x.clone();
    for _ in 0..CHAIN {
        y = g.op("Neg").input(&y).build().map_err(|e| e.to_string())?;
    }
    let sess = Session::with_options(&g, cpu_options(1, 1, None, LinkMap::default())).map_err(|e| e.to_string())?;
    let v = Tensor::from_vec(vec![1f32], vec![1]).map_err(|e| e.to_string())?;
    let runs = traced_runs(&sess, &[(&x, &v)], &[&y], 5, 25)?;
    let per_op: Vec<f64> = runs
        .iter()
        .filter(|s| !s.nodes.is_empty())
        .map(|s| {
            let kernel: f64 = s.nodes.iter().map(|n| (n.end_us - n.start_us).max(0.0)).sum();
            (s.total_us - kernel).max(0.0) / s.nodes.len() as f64
        })
        .collect();
    Ok(median(&per_op))
}

const ELEMENT_ROWS: usize = 1024;
const ELEMENT_COLS: usize = 256;

/// The engine's element kernels on [1024, 256] tensors (1 MiB each, in
/// cache as the zoo's activations are), from their own times (median of
/// 30 traced runs each): the flop rate of layer norm and softmax (many
/// flops per element), the median of the two, in flops as `op_cost` counts
/// them; and the bandwidth of Add (one flop per 12 bytes), in bytes as
/// `op_cost` counts them (inputs plus output).
fn element_rates() -> Result<(f64, f64), String> {
    const ROWS: usize = ELEMENT_ROWS;
    const COLS: usize = ELEMENT_COLS;
    let e = |e: flowlab_engine::EngineError| e.to_string();
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, flowlab_engine::Shape::new(vec![ROWS, COLS])).map_err(e)?;
    let y = g.placeholder("y", DType::F32, flowlab_engine::Shape::new(vec![ROWS, COLS])).map_err(e)?;
    let gamma = g.constant(Tensor::from_vec(vec![1f32; COLS], [COLS]).map_err(e)?).map_err(e)?;
    let beta = g.constant(Tensor::from_vec(vec![0f32; COLS], [COLS]).map_err(e)?).map_err(e)?;
    let (normed, _, _) = g.layer_norm(&x, &gamma, &beta, 1e-5).map_err(e)?;
    let soft = g.softmax(&x).map_err(e)?;
    let sum = g.add(&x, &y).map_err(e)?;
    let sess = Session::with_options(&g, cpu_options(1, 1, None, LinkMap::default())).map_err(e)?;
    let v = Tensor::from_vec((0..ROWS * COLS).map(|i| (i % 97) as f32 * 0.03).collect(), [ROWS, COLS]).map_err(e)?;
    let nodes = g.nodes();
    // (flops, bytes) per second of one node's kernel.
    let rate = |out: &flowlab_engine::Output| -> Result<(f64, f64), String> {
        let node = &nodes[out.node_id()];
        let ty = |t: &flowlab_engine::TensorType| (t.dtype, t.shape.to_shape().unwrap_or_default());
        let ins: Vec<_> = node.inputs.iter().map(|&(p, k)| ty(&nodes[p].outputs[k])).collect();
        let outs: Vec<_> = node.outputs.iter().map(ty).collect();
        let cost = flowlab_engine::op_cost(&node.op, &node.attrs, &ins, &outs).map_err(e)?;
        let runs = traced_runs(&sess, &[(&x, &v), (&y, &v)], &[out], 3, 33)?;
        let times: Vec<f64> =
            runs.iter().map(|st| st.nodes.iter().filter(|n| n.node == node.name).map(|n| n.end_us - n.start_us).sum::<f64>() * 1e-6).filter(|&t| t > 0.0).collect();
        let t = median(&times);
        Ok((cost.flops / t, cost.bytes / t))
    };
    let flops = [rate(&normed)?.0, rate(&soft)?.0];
    Ok((median(&flops) / 1e9, rate(&sum)?.1 / 1e9))
}

fn host_memory_gb() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024.0 / 1e9)
        })
        .unwrap_or(16.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_median_and_nearest_rank_percentiles() {
        // Reference values by hand: sorted 1..=10.
        let v: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        assert_eq!(spread(&v), (5.5, 1.0, 9.0));
        assert_eq!(spread(&[3.0]), (3.0, 3.0, 3.0));
        assert!(spread(&[]).0.is_nan());
    }
}
